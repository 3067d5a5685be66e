"""The mount daemon's life: open the store, mount, serve, unmount and close cleanly.

Follows s3ql's pattern (reference fuse-prior-art section 3.6): SIGINT/SIGTERM call
``pyfuse3.terminate()``, ``pyfuse3.main`` returns, and ``pyfuse3.close(unmount=True)`` removes
the mount; ``auto_unmount`` is always on so even ``kill -9`` leaves no dead mount. The store is
then closed (checkpoint written, ``abort`` removed, lock released).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import shutil
import signal
import sys
import tempfile

import pyfuse3
import trio

from engine.store import MessageStore, StoreConfig
from fusefs.nodes import Context
from fusefs.ops import RmqOperations
from fusefs.views import ViewCache

log = logging.getLogger("rmqfs")


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class MountError(Exception):
    """The mount could not be set up; the message says why."""


def is_mounted(path: str) -> bool:
    """True when ``path`` is a mount point, a dead FUSE mount included ("Transport endpoint
    is not connected"), which ``os.path.ismount`` cannot stat."""
    path = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)),
                            line.split(" ")[4])
                if mp == path:
                    return True
    except OSError:
        pass
    return os.path.ismount(path)


def check_mountpoint(mountpoint: str) -> None:
    """Raise MountError unless ``mountpoint`` is an empty directory that is not a mount."""
    if is_mounted(mountpoint):
        try:
            os.listdir(mountpoint)  # not stat: the kernel may answer that from its cache
        except OSError as exc:  # ENOTCONN/ECONNABORTED: the daemon of that mount is gone
            raise MountError(f"mount point {mountpoint} is a dead mount ({exc.strerror}); "
                             f"clean it with: rmqfs umount -z {mountpoint}") from exc
        raise MountError(f"mount point {mountpoint} is already a mount point (busy); "
                         f"rmqfs umount {mountpoint} first")
    if not os.path.exists(mountpoint):
        raise MountError(f"mount point {mountpoint} does not exist")
    if not os.path.isdir(mountpoint):
        raise MountError(f"mount point {mountpoint} is not a directory")
    if os.path.ismount(mountpoint):
        raise MountError(f"mount point {mountpoint} is already a mount point (busy)")
    try:
        if os.listdir(mountpoint):
            raise MountError(f"mount point {mountpoint} is not empty")
    except PermissionError as exc:
        raise MountError(f"mount point {mountpoint}: {exc.strerror}") from exc


def check_fuse() -> None:
    """Raise MountError when FUSE cannot work here (no /dev/fuse or no fusermount3)."""
    if not os.path.exists("/dev/fuse"):
        raise MountError("FUSE is not available: /dev/fuse is missing (modprobe fuse?)")
    if shutil.which("fusermount3") is None:
        raise MountError("FUSE is not available: fusermount3 is missing (apt install fuse3)")


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
    """

    def __init__(self, store_path: str, mountpoint: str, options: set[str],
                 config: StoreConfig | None = None, cache_dir: str | None = None,
                 debug_fuse: bool = False, cache_size: int | None = None):
        self.store_path = store_path
        self.mountpoint = os.path.abspath(mountpoint)
        self.options = set(options)
        self.read_only = "ro" in self.options
        self.config = config
        self.cache_dir = cache_dir
        self.cache_size = cache_size
        self.debug_fuse = debug_fuse
        self.store = None
        self.views = None
        self._own_cache = False

    def setup(self) -> None:
        """Check everything, open the store and mount. Raises MountError or StoreError.

        SIGINT and SIGTERM stay blocked from here until the FUSE loop runs (s3ql#202): a
        signal in between is delivered then, and unmounts cleanly.
        """
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        check_fuse()
        check_mountpoint(self.mountpoint)
        if self.read_only and not os.path.isdir(self.store_path):
            raise MountError(f"store {self.store_path} does not exist (read-only mount)")
        self.store = MessageStore(self.store_path, self.config, read_only=self.read_only)
        if self.cache_dir is None:
            self.cache_dir = tempfile.mkdtemp(prefix="rmqfs-cache-")
            self._own_cache = True
        self.views = ViewCache(self.store, self.cache_dir, self.cache_size)
        ctx = Context(self.store, self.views, self.read_only)
        ops = RmqOperations(ctx)
        opts = set(self.options)
        opts.update({"fsname=rmqfs", "subtype=rmqfs", "auto_unmount"})
        if self.debug_fuse:
            opts.add("debug")
        try:
            pyfuse3.init(ops, self.mountpoint, opts)
        except RuntimeError as exc:
            self._close_store()
            raise MountError(f"cannot mount {self.mountpoint}: {exc} (options: "
                             f"{','.join(sorted(self.options)) or 'none'})") from exc

    def serve(self, log_file: str | None = None) -> None:
        """Serve requests until unmounted or signalled, then unmount and close the store.

        Fatal errors and ``kill -USR1 PID`` (every thread's stack) go to ``log_file`` when
        given, else to stderr.
        """
        out = open(log_file, "a") if log_file else sys.stderr  # noqa: SIM115 - kept open
        faulthandler.enable(file=out)
        faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)

        def on_signal(signum, frame):
            log.info("%s: unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

        async def main():
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            await pyfuse3.main()
        try:
            trio.run(main)
        except BaseException:
            log.exception("the FUSE main loop failed")
            raise
        finally:
            try:
                pyfuse3.close(unmount=True)
            finally:
                self._close_store()
                log.info("unmounted %s; store closed", self.mountpoint)

    def _close_store(self) -> None:
        """Close the store (checkpoint, no ``abort``); the view cache goes whatever happens."""
        try:
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
            if self._own_cache and self.cache_dir:
                shutil.rmtree(self.cache_dir, ignore_errors=True)
