"""The lower filesystem of a mount of a snapshot in object storage (``rmqfs mount URI MNT -o ro``).

The mount daemon reads a store *directory* (its files memory-mapped by the render workers,
read with ``pread`` by the daemon), so a snapshot in object storage is first made a directory:
this module's process mounts a second, read-only FUSE filesystem on a private directory
(under the daemon's cache directory, mode 0700) holding the snapshot's files exactly as its
manifest names them (directories from the names, sizes from the manifest, ``SNAPSHOT.json``
itself), and the daemon mounts that directory read-only as it mounts a local copy. pyfuse3
serves one session per process, hence a process of its own.

Reads go through :class:`engine.live.blockcache.BlockCache` (8 MiB blocks fetched with one
range read each, :meth:`engine.live.remote.RemoteSnapshot.read`; at most ``cache_size`` bytes
on local disk, least recently used blocks evicted); a file's zeros after its stored prefix
(the manifest's ``stored``: a segment's tail after the snapshot's cut, a live IndexFile's after
its last item; all an upload sent of it) are answered without a request. The files never change, so the kernel keeps
their pages and attributes (``keep_cache``, an hour's timeouts). A read that fails (server
unreachable, credentials refused, object shorter than its manifest says) answers EIO and logs
the file and the location; the next read of that block asks the server again.

An upload to the location while it is mounted replaces files in place (it deletes the manifest
first, :mod:`engine.live.objectstore`): the manifest is read again every :data:`MANIFEST_POLL`
seconds, and once it changed or is gone, blocks not cached answer EIO (the log says to
remount) rather than bytes of another snapshot; the cached ones are still served.

Life: the daemon starts it (:func:`start`) with the read end of a pipe whose write end only
the daemon holds as its stdin; end of file there (the daemon gone, however it ended: an
unmount, ``kill -9``) unmounts the lower filesystem and ends the process, which deletes its
blocks. ``auto_unmount`` and a dead-mount guard (:mod:`mount.guard`) cover a ``kill -9`` of
this process itself. The location, which may carry credentials, is passed in the environment
(:data:`LOCATION_ENV`), never on the command line.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmqfs.engine.live.manifest import Manifest

log = logging.getLogger("rmqfs")

#: The environment variable the location goes to the lower process in.
LOCATION_ENV = "RMQFS_REMOTE_LOCATION"
#: Default bound of the block cache (``-o remote_cache=SIZE``).
DEFAULT_CACHE_SIZE = 1 << 30
#: Reads served at once (each holds at most one block in memory while it is fetched).
READ_THREADS = 16
#: Seconds the kernel may keep the attributes and names of the (immutable) files.
TIMEOUT = 3600.0
#: Seconds between two reads of the location's manifest (one small request each): once it
#: changed or went (an upload to the location began), blocks not cached are no longer fetched.
MANIFEST_POLL = 10.0
_SEGMENT_PREFIX = "commitlog/"
_SEGMENT_NAME = re.compile(r"commitlog/[0-9]{20}\Z")  # ASCII digits ("²".isdigit() is True)


@dataclass(slots=True)
class _Node:
    inode: int
    name: str
    rel: str = ""  # the manifest name of a file
    size: int = 0
    data_end: int | None = None  # bytes past this are zeros (its stored prefix's end)
    data: bytes | None = None  # SNAPSHOT.json's own bytes
    children: dict[str, int] | None = None  # a directory's, by name
    entries: list[tuple[str, int]] = field(default_factory=list)  # a directory's, sorted


def build_tree(manifest: Manifest, manifest_bytes: bytes, manifest_name: str) -> dict[int, _Node]:
    """The tree of a snapshot's manifest: ``{inode: node}``, the root at inode 1. Files are
    the manifest's ``files`` (:class:`engine.live.manifest.ManifestFiles`, its paths checked:
    relative, at most ``MAX_PATH_PARTS`` deep) and ``manifest_name``
    itself. A file's bytes past its stored prefix (:func:`engine.live.snapshot.stored_size`)
    are zeros, never fetched, and so are a CommitLog segment's at or past the snapshot's
    ``commitLogOffset`` (what a manifest without ``stored`` says of them); ``st_blocks``
    counts the prefix only, so ``du`` and ``tar -S`` see the rest as a hole.

    Raises:
        ValueError: a name that is absolute, holds ``.`` or ``..`` or an empty part, or is
            both a file and a directory.
    """
    root = _Node(1, "", children={})
    nodes = {1: root}
    cut = manifest.get("commitLogOffset")

    def add(rel: str, size: int, data: bytes | None = None, stored: int | None = None) -> None:
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"the manifest names {rel!r}, not a relative file name")
        d = root
        for part in parts[:-1]:
            assert d.children is not None
            child = d.children.get(part)
            if child is None:
                child = len(nodes) + 1
                nodes[child] = _Node(child, part, children={})
                d.children[part] = child
            d = nodes[child]
            if d.children is None:
                raise ValueError(f"the manifest names {rel!r} under a file")
        assert d.children is not None
        if parts[-1] in d.children:
            raise ValueError(f"the manifest names {rel!r} twice, or as a file and a directory")
        node = _Node(len(nodes) + 1, parts[-1], rel=rel, size=size, data=data)
        if stored is not None:
            node.data_end = max(0, min(size, stored))
        if isinstance(cut, int) and _SEGMENT_NAME.match(rel):
            end = size if node.data_end is None else node.data_end
            node.data_end = max(0, min(end, cut - int(rel[10:])))
        nodes[node.inode] = node
        d.children[parts[-1]] = node.inode

    files = manifest.files
    for rel in sorted(files):
        entry = files[rel]
        add(rel, entry.size, stored=entry.stored)
    add(manifest_name, len(manifest_bytes), manifest_bytes)
    for node in nodes.values():
        if node.children is not None:
            node.entries = sorted(node.children.items())
    return nodes


# --------------------------------------------------------------------------------------------
# The daemon's side


@dataclass
class RemoteMount:
    """A running lower mount: its directory (``lower``, the store path the daemon opens), the
    process serving it and the pipe end that keeps it alive."""

    lower: str
    workdir: str
    proc: subprocess.Popen
    life: int

    def stop(self, timeout: float = 30) -> None:
        """Unmount the lower filesystem and end its process (it deletes its blocks); remove
        its directory. Never raises: what fails is logged."""
        if self.life >= 0:
            os.close(self.life)  # end of file: the process unmounts and exits
            self.life = -1
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("the object-storage mount (pid %d) did not stop; killing it", self.proc.pid)
            self.proc.kill()
            self.proc.wait()
        from .mounts import is_mounted

        if is_mounted(self.lower):
            subprocess.run(["fusermount3", "-u", "-z", self.lower], capture_output=True)
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)


def start(
    location: str,
    cache_dir: str,
    cache_size: int | None = None,
    log_file: str | None = None,
    debug: bool = False,
) -> RemoteMount:
    """Mount the snapshot at ``location`` read-only on a new private directory under
    ``cache_dir`` (its blocks beside it, at most ``cache_size`` bytes, default
    :data:`DEFAULT_CACHE_SIZE`) in a process of its own, and return once it serves.

    Raises:
        MountError: the location holds no snapshot, cannot be read, or the lower mount fails;
            the message names the location (credentials redacted) and why.
    """
    from rmqfs.engine.live.location import redact

    from .mounts import MountError, module_env

    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="remote-", dir=cache_dir)  # 0700
    lower = os.path.join(workdir, "snapshot")
    os.mkdir(lower, 0o700)
    cmd = [sys.executable, "-m", "rmqfs.mount.remotefs", lower, "--blocks", f"{workdir}/blocks"]
    cmd += ["--cache-size", str(cache_size or DEFAULT_CACHE_SIZE), "--poll", str(MANIFEST_POLL)]
    if log_file:
        cmd += ["--log-file", log_file]
    if debug:
        cmd.append("--debug")
    env = module_env()
    env[LOCATION_ENV] = location
    r, life = os.pipe()  # both close-on-exec: r is the process's stdin only
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=r,
            stdout=subprocess.PIPE,
            stderr=None if log_file is None else subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C stops the daemon, which stops this
            cwd="/",
            env=env,
        )
    except BaseException:
        os.close(life)
        os.rmdir(lower)
        os.rmdir(workdir)
        raise
    finally:
        os.close(r)
    mount = RemoteMount(lower, workdir, proc, life)
    assert proc.stdout is not None
    answer = proc.stdout.readline().decode(errors="replace").strip()  # one line, then EOF
    proc.stdout.close()
    if answer != "ok":
        mount.stop()
        why = answer or f"its process exited ({proc.returncode})"
        raise MountError(f"cannot mount {redact(location)}: {why}")
    return mount


# --------------------------------------------------------------------------------------------
# The lower filesystem's process


def _operations(nodes: dict[int, _Node], cache, where: str):
    """The pyfuse3 operations over ``nodes``, reading through ``cache`` (a BlockCache)."""
    import pyfuse3
    import trio

    from rmqfs.engine.errors import StoreError

    limiter = trio.CapacityLimiter(READ_THREADS)
    uid, gid = os.getuid(), os.getgid()
    now = time.time_ns()

    class Ops(pyfuse3.Operations):
        def _attr(self, node: _Node) -> pyfuse3.EntryAttributes:
            a = pyfuse3.EntryAttributes()
            a.st_ino = pyfuse3.InodeT(node.inode)
            if node.children is not None:
                a.st_mode = stat.S_IFDIR | 0o555
                a.st_nlink = 2
            else:
                a.st_mode = stat.S_IFREG | 0o444
                a.st_nlink = 1
                a.st_size = node.size
                data = node.size if node.data_end is None else node.data_end
                a.st_blocks = (data + 511) // 512  # the zeros after the data: a hole
            a.st_uid, a.st_gid = uid, gid
            a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = now
            a.st_blksize = 128 * 1024
            a.attr_timeout = a.entry_timeout = TIMEOUT
            return a

        def _node(self, inode: int) -> _Node:
            node = nodes.get(inode)
            if node is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return node

        async def lookup(self, parent_inode, name, ctx=None):
            children = self._node(parent_inode).children
            if children is None:
                raise pyfuse3.FUSEError(errno.ENOTDIR)
            inode = children.get(os.fsdecode(name))
            if inode is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._attr(nodes[inode])

        async def getattr(self, inode, ctx=None):
            return self._attr(self._node(inode))

        async def opendir(self, inode, ctx):
            if self._node(inode).children is None:
                raise pyfuse3.FUSEError(errno.ENOTDIR)
            return pyfuse3.FileHandleT(inode)

        async def readdir(self, fh, start_id, token):
            entries = nodes[fh].entries
            for i in range(start_id, len(entries)):
                name, inode = entries[i]
                if not pyfuse3.readdir_reply(
                    token, os.fsencode(name), self._attr(nodes[inode]), i + 1
                ):
                    break

        async def releasedir(self, fh):
            pass

        async def open(self, inode, flags, ctx):
            node = self._node(inode)
            if node.children is not None:
                raise pyfuse3.FUSEError(errno.EISDIR)
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
                raise pyfuse3.FUSEError(errno.EROFS)
            return pyfuse3.FileInfo(fh=pyfuse3.FileHandleT(inode), keep_cache=True)

        async def read(self, fh, off, size):
            node = nodes[fh]
            if node.data is not None:
                return node.data[off : off + size]
            try:
                return await trio.to_thread.run_sync(
                    cache.read, node.rel, node.size, off, size, node.data_end, limiter=limiter
                )
            except StoreError as exc:
                log.error("EIO reading %s of %s at %d: %s", node.rel, where, off, exc)
                raise pyfuse3.FUSEError(errno.EIO) from None
            except OSError as exc:  # the local cache's disk
                log.error("EIO reading %s of %s at %d: cache: %s", node.rel, where, off, exc)
                raise pyfuse3.FUSEError(errno.EIO) from None

        async def release(self, fh):
            pass

        async def statfs(self, ctx):
            s = pyfuse3.StatvfsData()
            total = sum(n.size for n in nodes.values())
            s.f_bsize = s.f_frsize = 4096
            s.f_blocks = (total + 4095) // 4096
            s.f_bfree = s.f_bavail = 0
            s.f_files = len(nodes)
            s.f_ffree = s.f_favail = 0
            s.f_namemax = 255
            return s

    return Ops()


def _setup_logging(log_file: str | None, debug: bool) -> None:
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file)
    elif os.path.exists("/dev/log"):
        handler = logging.handlers.SysLogHandler("/dev/log")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s rmqfs-remote %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, handlers=[handler])


def serve(
    lower: str,
    blocks: str,
    cache_size: int,
    location: str,
    ready: int,
    life: int,
    poll: float = MANIFEST_POLL,
) -> int:
    """Open the snapshot at ``location``, mount its files on ``lower``, write ``ok`` (or why
    not) and a newline to ``ready``, and serve until end of file on ``life`` or SIGTERM;
    read the manifest again every ``poll`` seconds."""
    import pyfuse3
    import trio

    from rmqfs.engine.errors import StoreError
    from rmqfs.engine.live.blockcache import BlockCache
    from rmqfs.engine.live.location import redact
    from rmqfs.engine.live.objectstore import read_manifest
    from rmqfs.engine.live.remote import RemoteSnapshot
    from rmqfs.engine.live.snapshot import MANIFEST_NAME

    from . import guard
    from .fusestop import StopSignals
    from .mounts import FSTYPE

    where = redact(location)
    changed: list[str] = []  # why blocks are no longer fetched (the location changed)

    def fetch(rel: str, offset: int, length: int) -> bytes:
        if changed:
            raise StoreError(changed[0])
        return snap.read(rel, offset, length)

    def answer(text: str) -> None:
        os.write(ready, text.replace("\n", " ").encode() + b"\n")
        os.close(ready)

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        snap = RemoteSnapshot(location)
        got = read_manifest(snap.fs, snap.base, where)
        if got is None or got[0] != snap.manifest:
            raise StoreError(f"{where}: its {MANIFEST_NAME} changed while mounting; try again")
        nodes = build_tree(got[0], got[1], MANIFEST_NAME)
        cache = BlockCache(fetch, blocks, cache_size)
        ops = _operations(nodes, cache, where)
        opts = {"ro", "fsname=rmqfs-remote", f"subtype={FSTYPE.split('.', 1)[1]}", "auto_unmount"}
        pyfuse3.init(ops, lower, opts)
    except (StoreError, ValueError, OSError, RuntimeError) as exc:
        answer(str(exc))
        return 1
    except Exception as exc:  # a bug: said in one line to the mount, the traceback logged
        log.exception("cannot serve %s", where)
        answer(f"{type(exc).__name__}: {exc}")
        return 1
    try:
        guard_proc = guard.start(lower, None)
    except OSError:
        log.exception("cannot start the dead-mount guard of %s", lower)
        guard_proc = None
    log.info("serving %s on %s (cache %d bytes in %s)", where, lower, cache_size, blocks)
    answer("ok")

    stop = StopSignals()  # SIGINT and SIGTERM unmount (mount.fusestop)
    stop.install()

    async def main():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

        async def watch() -> None:
            await trio.lowlevel.wait_readable(life)
            log.info("the mount daemon is gone: unmounting %s", lower)
            pyfuse3.terminate()

        async def recheck() -> None:
            while True:
                await trio.sleep(poll)
                try:
                    now = await trio.to_thread.run_sync(read_manifest, snap.fs, snap.base, where)
                except StoreError:
                    continue  # the server is down: the reads say so
                if now is None or now[1] != got[1]:
                    changed.append(
                        f"{where} changed since it was mounted (an upload to it): blocks not "
                        "cached are not read from it any more; unmount and mount it again"
                    )
                    log.error("%s", changed[0])
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            nursery.start_soon(recheck)
            await pyfuse3.main()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        came = stop.loop_over()
        if came:
            log.info("%s: unmounting %s", came, lower)
        try:
            pyfuse3.close(unmount=True)
        finally:
            if guard_proc is not None:
                proc, w = guard_proc
                os.close(w)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            s = cache.stats
            cache.close()
            snap.close()
            log.info(
                "unmounted %s: %d reads from the cache, %d range reads (%d bytes), %d evicted",
                lower,
                s.hits,
                s.misses,
                s.fetched_bytes,
                s.evicted,
            )
            for directory in (blocks, lower, os.path.dirname(lower)):  # empty once unmounted
                try:
                    os.rmdir(directory)
                except OSError:
                    pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m rmqfs.mount.remotefs LOWER --blocks DIR --cache-size N``, the location in
    :data:`LOCATION_ENV`, stdin the daemon's pipe, stdout where the answer goes (:func:`start`)."""
    import logging.handlers  # noqa: F401 - SysLogHandler

    p = argparse.ArgumentParser(prog="python -m rmqfs.mount.remotefs")
    p.add_argument("lower")
    p.add_argument("--blocks", required=True)
    p.add_argument("--cache-size", type=int, required=True)
    p.add_argument("--poll", type=float, default=MANIFEST_POLL)
    p.add_argument("--log-file")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    location = os.environ.pop(LOCATION_ENV, None)
    if not location:
        print(f"{LOCATION_ENV} is not set", file=sys.stderr)
        return 2
    _setup_logging(args.log_file, args.debug)
    # The answer and the daemon's pipe on descriptors of their own (close-on-exec): the
    # auto_unmount helper libfuse starts inherits 0-2 and would hold them open.
    ready, life = os.dup(1), os.dup(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    return serve(args.lower, args.blocks, args.cache_size, location, ready, life, args.poll)


if __name__ == "__main__":
    sys.exit(main())
