"""The mount daemon's life: open the store, mount, serve, unmount and close cleanly.

Follows s3ql's pattern (its ``mount.py``): SIGINT/SIGTERM call
``pyfuse3.terminate()``, ``pyfuse3.main`` returns, and ``pyfuse3.close(unmount=True)`` removes
the mount; ``auto_unmount`` is always on, and the dead-mount guard (:mod:`mount.guard`) closes
the race it loses, so even ``kill -9`` leaves no dead mount. The store is then closed
(checkpoint written, ``abort`` removed, lock released).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

import pyfuse3
import trio

from rmqfs.engine.errors import ManifestError, StoreError
from rmqfs.engine.format.source import LOCAL, StoreSource
from rmqfs.engine.live.location import redact
from rmqfs.engine.live.manifest import restored_broker_name
from rmqfs.engine.live.objectsource import DEFAULT_CACHE_SIZE, DEFAULT_TIMEOUT, ObjectSource
from rmqfs.engine.live.snapshot import SnapshotManager
from rmqfs.engine.service.recovery import RecoveryReport
from rmqfs.engine.service.workprogress import ProgressFactory
from rmqfs.engine.store import MessageStore, StoreConfig
from rmqfs.engine.storeconfig import BROKER_NAME_HOST, settle_broker_name
from rmqfs.fusefs.base import Context
from rmqfs.fusefs.ops import RmqOperations
from rmqfs.fusefs.views import ViewCache, start_worker_server

from . import guard
from .fdlimit import raise_fd_limit
from .fusestop import STOP_SIGNALS, StopSignals
from .mounts import (  # noqa: F401 - the CLI and tests import them from here
    CACHE_OWNER,
    CACHE_PREFIX,
    FSNAME,
    FSTYPE,
    MountError,
    claim_mountpoint,
    clean_dead_mount,
    clean_stale_caches,
    is_mounted,
    make_cache_dir,
    mark_owner,
    mount_info,
)

log = logging.getLogger("rmqfs")


FOLLOW_INTERVAL = 0.1  # seconds between a follower mount's refreshes


OWN_OPTIONS = {"allow_other_write", "create"}


def check_store_path(store_path: str, create: bool) -> None:
    """Refuse to turn a non-empty directory that is not a store into one, unless ``create``.

    A missing or empty directory is made a store (as before); one holding files but none of
    a store's (commitlog/, consumequeue/, index/, config/, checkpoint, lock) is most likely
    a mistyped path.
    """
    from rmqfs.engine.tools.verify import NotAStoreError, check_store_dir

    if create or not os.path.isdir(store_path) or not os.listdir(store_path):
        return
    try:
        check_store_dir(store_path)
    except NotAStoreError:
        raise MountError(
            f"{store_path} is a non-empty directory that is not a RocketMQ store; "
            "check the path, or mount with -o create to make a store in it"
        ) from None


def read_only_remote_message(location: str, mountpoint: str) -> str:
    """Why a snapshot in object storage is not mounted without ``-o ro``, and the command
    that mounts it (the location printed without credentials)."""
    from rmqfs.engine.live.location import redact

    return (
        f"{redact(location)} is a snapshot in object storage, which is never written: mount "
        f"it read-only: rmqfs mount '{redact(location)}' {mountpoint} -o ro"
    )


def render_workers(capacity: int | None) -> int:
    """The render workers of a mount: one a core, and for a snapshot in object storage (its
    block cache of ``capacity`` bytes, None: the default) no more than half the cache holds at
    two blocks each (``blockcache.MIN_BLOCK``), so the daemon's half and the workers' shares
    stay within ``capacity`` however many cores the machine has."""
    from rmqfs.engine.live.blockcache import MIN_BLOCK

    cores = os.cpu_count() or 1
    if capacity is None:
        return cores
    return max(1, min(cores, (capacity // 2) // (2 * MIN_BLOCK)))


def open_object_source(
    location: str, cache_dir: str, capacity: int | None, timeout: float | None
) -> ObjectSource:
    """The snapshot at ``location`` opened for a mount (its blocks under ``cache_dir``, at most
    ``capacity`` bytes with its render workers', each request at most ``timeout`` seconds).

    Raises:
        MountError: it cannot be read (no manifest, server unreachable, a bad manifest); the
            message names the location (credentials redacted) and why.
    """
    try:
        return ObjectSource(
            location,
            cache_dir,
            capacity or DEFAULT_CACHE_SIZE,
            timeout or DEFAULT_TIMEOUT,
            workers=render_workers(capacity or DEFAULT_CACHE_SIZE),
        )
    except StoreError as exc:
        raise MountError(f"cannot mount {redact(location)}: {exc}") from None


def check_fuse() -> None:
    """Raise MountError when FUSE cannot work here (no /dev/fuse or no fusermount3)."""
    if not os.path.exists("/dev/fuse"):
        raise MountError("FUSE is not available: /dev/fuse is missing (modprobe fuse?)")
    if shutil.which("fusermount3") is None:
        raise MountError("FUSE is not available: fusermount3 is missing (apt install fuse3)")


def broker_name_notice(config: StoreConfig) -> str:
    """One line: the brokerName a mount took and where from (``StoreConfig.broker_name_source``),
    what status.json and its snapshots' manifests carry; for the host name, RocketMQ's default,
    also why that matters and how to name the store (two stores mounted on machines named
    alike would share it, and a fleet read of their snapshots refuses them)."""
    line = f"brokerName {config.broker_name!r}, from {config.broker_name_source()}"
    if config.broker_name_rule != BROKER_NAME_HOST:
        return line
    return (
        f"{line}: status.json and this mount's snapshots name the store so, as would another "
        "store mounted on a machine of that name; to name it, mount with --broker-name NAME "
        "or --config a broker.conf with brokerName=NAME"
    )


class Daemon:
    """One mounted store.

    Args:
        store_path: the store directory (created when missing, unless read-only).
        mountpoint: an empty directory.
        options: FUSE mount options (``ro``, ``allow_other``, ``default_permissions``, ...).
        config: store settings.
        cache_dir: where rendered views are cached (a temporary directory by default).
        cache_size: bound of the render cache in bytes (default
            ``fusefs.views.default_cache_size``).
        progress: a progress factory (:mod:`engine.service.workprogress`) for opening the store
            (a long recovery says how far it is).
        log_file: where the dead-mount guard (:mod:`mount.guard`) logs (default: stderr on a
            terminal, else nowhere).
        remote_cache: for a ``store_path`` in object storage (a URI,
            :func:`engine.live.location.is_uri`), the bound of its block cache in bytes, the
            daemon's and its render workers' together (default
            :data:`engine.live.objectsource.DEFAULT_CACHE_SIZE`).
        remote_timeout: seconds each request to object storage may take (default
            :data:`engine.live.objectsource.DEFAULT_TIMEOUT`).

    A ``store_path`` that is a URI is a snapshot in object storage (``rmqfs snapshot-upload``):
    it is mounted read-only only, read in-process by the daemon and its render workers through
    :class:`engine.live.objectsource.ObjectSource` (range reads into a bounded block cache
    under the cache directory; a request that fails or times out is EIO for that read).
    """

    def __init__(
        self,
        store_path: str,
        mountpoint: str,
        options: set[str],
        config: StoreConfig | None = None,
        cache_dir: str | None = None,
        debug_fuse: bool = False,
        cache_size: int | None = None,
        progress: ProgressFactory | None = None,
        log_file: str | None = None,
        remote_cache: int | None = None,
        broker_name: str | None = None,
        remote_timeout: float | None = None,
    ) -> None:
        from rmqfs.engine.live.location import is_uri

        self.progress = progress
        self.location = store_path if is_uri(store_path) else None
        self.remote_cache = remote_cache
        self.remote_timeout = remote_timeout
        # the source of a snapshot in object storage (engine.live.objectsource), else None
        self._source: ObjectSource | None = None
        self.log_file = log_file
        self.store_path = store_path
        self.mountpoint = os.path.abspath(mountpoint)
        self.own_options = set(options) & OWN_OPTIONS
        self.options = set(options) - OWN_OPTIONS
        self.read_only = "ro" in self.options
        self.config = config
        self.broker_name = broker_name
        self.cache_dir = cache_dir
        self.cache_size = cache_size
        self.debug_fuse = debug_fuse
        self.store: MessageStore | None = None
        self.views: ViewCache | None = None
        self.snapshots: SnapshotManager | None = None
        self.ops: RmqOperations | None = None  # the FUSE operations, once set up
        self._own_cache = False
        # (process, pipe write end) of the dead-mount guard
        self._guard: tuple[subprocess.Popen, int] | None = None

    def setup(self) -> None:
        """Check everything, open the store and mount. Raises MountError or StoreError.

        SIGINT and SIGTERM stay blocked from here until the FUSE loop runs (s3ql#202): a
        signal in between is delivered then, and unmounts cleanly.
        """
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        check_fuse()
        claim = claim_mountpoint(self.mountpoint)  # held until mounted (or refused)
        try:
            self._setup_claimed()
        finally:
            os.close(claim)

    def _setup_claimed(self) -> None:
        """:meth:`setup` once the mount point is this process's to mount on."""
        if self.location is not None and not self.read_only:
            raise MountError(read_only_remote_message(self.location, self.mountpoint))
        if self.location is None and self.read_only and not os.path.isdir(self.store_path):
            raise MountError(f"store {self.store_path} does not exist (read-only mount)")
        raise_fd_limit(beyond_hard=True)  # each snapshot holds a descriptor per store file
        if self.location is None:
            check_store_path(self.store_path, "create" in self.own_options)
        clean_stale_caches()
        if self.cache_dir is None:
            self.cache_dir = make_cache_dir()
            self._own_cache = True
        try:
            source: StoreSource = LOCAL
            snapshot_broker = None
            if self.location is not None:
                # the block caches of daemons killed (kill -9) under this cache dir
                clean_stale_caches(self.cache_dir, prefix="blocks-")
                remote = self._source = open_object_source(
                    self.location, self.cache_dir, self.remote_cache, self.remote_timeout
                )
                if remote.blocks_dir is not None:
                    mark_owner(remote.blocks_dir)  # removed by a later mount once this is gone
                source, self.store_path = remote, remote.root
                named = remote.manifest.get("brokerName")  # the broker it is a snapshot of
                snapshot_broker = named if isinstance(named, str) else None
            else:
                try:  # a store restored from a snapshot: the broker it was taken of
                    snapshot_broker = restored_broker_name(self.store_path)
                except ManifestError as exc:
                    log.warning("%s: not used for brokerName", exc)
            self.config = settle_broker_name(
                self.config, self.store_path, self.broker_name, source, snapshot_broker
            )
            self.store = MessageStore(
                self.store_path,
                self.config,
                read_only=self.read_only,
                progress=self.progress,
                # a snapshot in object storage never changes under the mount: not followed
                follow=False if self.location is not None else None,
                source=source,
            )
        except BaseException:
            self._close_store()  # the lower mount and the cache directory go
            raise
        workers = None  # one a core; a block cache's bound allows fewer (render_workers)
        if self.location is not None:
            workers = render_workers(self.remote_cache or DEFAULT_CACHE_SIZE)
        self.views = ViewCache(self.store, self.cache_dir, self.cache_size, workers=workers)
        ctx = Context(
            self.store,
            self.views,
            self.read_only,
            others_write="allow_other_write" in self.own_options,
            snapshot_cache_dir=self.cache_dir,
            location=None if self.location is None else redact(self.location),
        )
        self.snapshots = ctx.snapshot_manager()
        ops = self.ops = RmqOperations(ctx)
        opts = set(self.options)
        # A read-only mount is read-only in the daemon (every write is EROFS there), not in the
        # kernel: the kernel would refuse `mkdir snapshots/<name>` too.
        opts.discard("ro")
        opts.update({f"fsname={FSNAME}", "subtype=rmqfs", "auto_unmount"})
        if self.debug_fuse:
            opts.add("debug")
        try:
            pyfuse3.init(ops, self.mountpoint, opts)
        except RuntimeError as exc:
            self._close_store()
            raise MountError(
                f"cannot mount {self.mountpoint}: {exc} (options: "
                f"{','.join(sorted(self.options)) or 'none'})"
            ) from exc
        try:
            self._guard = guard.start(self.mountpoint, self.log_file)
        except OSError:
            # the mount works without it; only a kill -9 racing libfuse's auto_unmount loses
            log.exception("cannot start the dead-mount guard; auto_unmount alone remains")
        notice = broker_name_notice(self.store.config)
        if self.store.config.broker_name_rule == BROKER_NAME_HOST:
            log.warning("%s", notice)
        else:
            log.info("%s", notice)
        follower = self.store.follower
        if follower is not None:
            # a read-only mount of a store a live process writes: follow it
            follower.listeners.append(ops.follower_changed)
            follower.start(FOLLOW_INTERVAL)
            log.info("following the writer of %s (pid %s)", self.store_path, self.store.writer_pid)

    def broker_name_note(self) -> str | None:
        """The line ``rmqfs mount`` prints when the brokerName is the host name (the silent
        fallback two machines named alike collide on), else None; after :meth:`setup`."""
        cfg = self.store.config if self.store is not None else None
        if cfg is None or cfg.broker_name_rule != BROKER_NAME_HOST:
            return None
        return broker_name_notice(cfg)

    def config_notes(self) -> list[str]:
        """The notes on the broker.conf (a key that looks like a misspelt setting:
        ``StoreConfig.conf_notes``) that ``rmqfs mount`` prints; the store logged them."""
        cfg = self.store.config if self.store is not None else None
        return list(cfg.conf_notes) if cfg is not None else []

    def recovery_report(self) -> RecoveryReport | None:
        """What the store's recovery did (:class:`engine.service.recovery.RecoveryReport`), None
        before :meth:`setup` or for a follower."""
        return self.store.recovery_report if self.store is not None else None

    def serve(self, log_file: str | None = None, ready: Callable[[], None] | None = None) -> None:
        """Serve requests until unmounted or signalled, then unmount and close the store.

        Fatal errors and ``kill -USR1 PID`` (every thread's stack) go to ``log_file`` when
        given, else to stderr. ``ready``: called (from a thread of its own) once the mount
        answers a listing of its root, which the kernel asks for only after the FUSE
        session's INIT has been answered: never when the session dies as it starts (libfuse refusing
        the options it was given, ``max_read``), so ``rmqfs mount`` does not say it mounted.
        """
        out = open(log_file, "a") if log_file else sys.stderr  # noqa: SIM115 - kept open
        faulthandler.enable(file=out)
        faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)

        stop = StopSignals()  # SIGINT and SIGTERM unmount (mount.fusestop)
        stop.install()

        async def main() -> None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            # the render workers' forkserver imports numpy and pyarrow now, in the background,
            # not when the first view is read; started from a thread made here, once the stop
            # signals are unblocked, which the server and every worker inherit (a worker must
            # die of the SIGTERM that stops it)
            threading.Thread(target=_start_workers, name="rmqfs-workers", daemon=True).start()
            if ready is not None:
                threading.Thread(
                    target=self._when_answering, args=(ready,), name="rmqfs-ready", daemon=True
                ).start()
            await pyfuse3.main()

        try:
            trio.run(main)
        except BaseException:
            log.exception("the FUSE main loop failed")
            raise
        finally:
            came = stop.loop_over()
            if came:
                log.info("%s: unmounting", came)
            if self.store is not None and self.store.follower is not None:
                self.store.follower.stop()  # its listener talks to the FUSE session
            try:
                # files still open (SIGTERM while a writer writes): what they hold goes to the
                # store, as their last close would have put it
                held = self.ops.release_all() if self.ops is not None else 0
                if held:
                    log.info("released %d open file(s) before unmounting", held)
            except Exception:
                log.exception("releasing the open files")
            try:
                pyfuse3.close(unmount=True)
            finally:
                self._stop_guard()
                self._close_store()
                log.info("unmounted %s; store closed", self.mountpoint)

    def _when_answering(self, ready: Callable[[], None]) -> None:
        """``ready()`` once a listing of the mount point (not a ``stat``, which the kernel
        may answer itself) is this mount's root, ``status.json`` in it; nothing when it
        fails: the session died (a session that dies at once may even be unmounted before
        the listing, which then lists the empty directory below)."""
        try:
            names = os.listdir(self.mountpoint)
        except OSError as exc:
            log.error("the mount does not answer: %s", exc)
            return
        if "status.json" not in names:
            log.error("the mount at %s is gone (its FUSE session ended)", self.mountpoint)
            return
        ready()

    def _stop_guard(self) -> None:
        """Set the dead-mount guard off once unmounted (it finds nothing to do) and reap it."""
        if self._guard is None:
            return
        proc, w = self._guard
        self._guard = None
        os.close(w)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # it exits on its own; never hold up the close
            log.warning("the dead-mount guard (pid %d) is still running", proc.pid)

    def _close_store(self) -> None:
        """Close the store (checkpoint, no ``abort``); the view cache goes whatever happens."""
        try:
            if self.snapshots is not None:
                snapshots, self.snapshots = self.snapshots, None
                snapshots.close()
            if self.store is not None:
                store, self.store = self.store, None
                try:
                    store.close()
                except Exception:
                    # e.g. ENOSPC writing the checkpoint: `abort` stays, and the next open
                    # recovers the store as after a crash.
                    log.exception("closing the store failed; the next mount will recover it")
                    raise
        finally:
            if self.views is not None:
                self.views.close()
                self.views = None
            if self._source is not None:
                source, self._source = self._source, None
                s = source.stats
                log.info(
                    "closed %s: %d reads from the block cache, %d range reads (%d bytes), "
                    "%d evicted",
                    source.where,
                    s.hits,
                    s.misses,
                    s.fetched_bytes,
                    s.evicted,
                )
                source.close()  # after the store: nothing reads it any more
            if self._own_cache and self.cache_dir:
                shutil.rmtree(self.cache_dir, ignore_errors=True)


def _start_workers() -> None:
    try:
        start_worker_server()
    except Exception:  # the first render starts it, or reports why it cannot
        log.exception("starting the render workers' server")
