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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyfuse3

    from rmqfs.engine.live.blockcache import BlockCache
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


class Tree:
    """The tree of a snapshot's manifest, held compactly: the files' paths sorted (references
    to the manifest's own strings) and two int64 arrays (size, data end), about 24 bytes a
    file, and no object per directory: a manifest of 1,000,000 files made a tree of a node
    each (1.1 GB). Directories are found by binary search on the sorted paths, and their
    inode numbers encode where (:meth:`dir_inode`), so nothing is added as they are listed.

    Inodes: 1 the root; ``2 + i`` the ``i``-th file in path order; a directory ``2 + n +
    8 * i + depth - 1``, ``i`` the first file under it and ``depth`` its parts. Files are the
    manifest's ``files`` (paths checked by :func:`engine.live.manifest.parse_manifest`:
    relative, at most ``MAX_PATH_PARTS`` parts) and ``manifest_name`` itself. A file's bytes past
    its stored prefix (:func:`engine.live.snapshot.stored_size`) are zeros, never fetched, and
    so are a CommitLog segment's at or past the snapshot's ``commitLogOffset`` (what a manifest
    without ``stored`` says of them); ``st_blocks`` counts the prefix only, so ``du`` and ``tar
    -S`` see the rest as a hole.

    Raises:
        ValueError: a name that is absolute, holds ``.`` or ``..`` or an empty part, or is
            both a file and a directory.
    """

    DEPTHS = 8  # a directory has at most this many parts (MAX_PATH_PARTS)

    def __init__(self, manifest: Manifest, manifest_bytes: bytes, manifest_name: str):
        import bisect

        import numpy as np

        self._bisect = bisect.bisect_left
        files = manifest.files
        if manifest_name in files:
            raise ValueError(f"the manifest names {manifest_name!r} among its files")
        self.paths: list[str] = sorted([*files, manifest_name])
        n = len(self.paths)
        self.manifest_index = self._bisect(self.paths, manifest_name)
        self.manifest_bytes = manifest_bytes
        self.sizes = np.empty(n, np.int64)
        self.data_end = np.empty(n, np.int64)
        cut = manifest.get("commitLogOffset")
        for i, rel in enumerate(self.paths):
            parts = rel.split("/")
            if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"the manifest names {rel!r}, not a relative file name")
            if len(parts) > self.DEPTHS:
                raise ValueError(f"the manifest names {rel!r}, deeper than {self.DEPTHS} parts")
            if i + 1 < n and self.paths[i + 1].startswith(rel + "/"):
                raise ValueError(f"the manifest names {rel!r}: both a file and a directory")
            if i == self.manifest_index:
                size = end = len(manifest_bytes)
            else:
                entry = files[rel]
                size, end = entry.size, max(0, min(entry.size, entry.stored))
                if isinstance(cut, int) and _SEGMENT_NAME.match(rel):
                    end = max(0, min(end, cut - int(rel[10:])))
            self.sizes[i], self.data_end[i] = size, end

    def __len__(self) -> int:
        return len(self.paths)

    # -- inodes --------------------------------------------------------------------------
    def file_index(self, inode: int) -> int | None:
        """The file of ``inode`` (its index in path order), None for another inode."""
        i = inode - 2
        return i if 0 <= i < len(self.paths) else None

    def dir_path(self, inode: int) -> str | None:
        """The directory of ``inode`` as a prefix (``""`` the root, else ``a/b/``), None when
        ``inode`` is no directory."""
        if inode == 1:
            return ""
        k = inode - 2 - len(self.paths)
        if k < 0:
            return None
        i, depth = divmod(k, self.DEPTHS)
        if i >= len(self.paths):
            return None
        parts = self.paths[i].split("/")
        if depth + 1 >= len(parts):
            return None
        prefix = "/".join(parts[: depth + 1]) + "/"
        return prefix if self._bisect(self.paths, prefix) == i else None

    def dir_inode(self, prefix: str) -> int | None:
        """The inode of the directory ``prefix`` (``a/b/``), None when no file is under it."""
        i = self._bisect(self.paths, prefix)
        if i >= len(self.paths) or not self.paths[i].startswith(prefix):
            return None
        return 2 + len(self.paths) + self.DEPTHS * i + prefix.count("/") - 1

    # -- names ---------------------------------------------------------------------------
    def lookup(self, prefix: str, name: str) -> int | None:
        """The inode of ``name`` in the directory ``prefix``, None when there is none."""
        if not name or "/" in name or name in (".", ".."):
            return None
        rel = prefix + name
        i = self._bisect(self.paths, rel)
        if i < len(self.paths) and self.paths[i] == rel:
            return 2 + i
        return self.dir_inode(rel + "/")

    def children(self, prefix: str, after: int = 0) -> Iterator[tuple[int, str, int]]:
        """``(cookie, name, inode)`` of the directory's entries in path order (each once),
        from the one after cookie ``after`` (the index past the entry's last file, for
        readdir)."""
        paths = self.paths
        i = max(after, self._bisect(paths, prefix))
        while i < len(paths) and paths[i].startswith(prefix):
            head, sep, _ = paths[i][len(prefix) :].partition("/")
            if sep:  # a directory: every path under it is skipped ('/' + 1 is '0')
                sub = prefix + head + "/"
                inode = 2 + len(paths) + self.DEPTHS * i + sub.count("/") - 1
                i = self._bisect(paths, prefix + head + "0")
                yield i, head, inode
            else:
                i += 1
                yield i, head, 2 + i - 1


def build_tree(manifest: Manifest, manifest_bytes: bytes, manifest_name: str) -> Tree:
    """The :class:`Tree` of a snapshot's manifest (see there). Raises ValueError."""
    return Tree(manifest, manifest_bytes, manifest_name)


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


def _operations(tree: Tree, cache: BlockCache, where: str) -> pyfuse3.Operations:
    """The pyfuse3 operations over ``tree``, reading through ``cache`` (a BlockCache)."""
    import pyfuse3
    import trio

    from rmqfs.engine.errors import StoreError

    limiter = trio.CapacityLimiter(READ_THREADS)
    uid, gid = os.getuid(), os.getgid()
    now = time.time_ns()
    total = int(tree.sizes.sum())

    class Ops(pyfuse3.Operations):
        def _attr(self, inode: int) -> pyfuse3.EntryAttributes:
            a = pyfuse3.EntryAttributes()
            a.st_ino = pyfuse3.InodeT(inode)
            i = tree.file_index(inode)
            if i is None:
                if tree.dir_path(inode) is None:
                    raise pyfuse3.FUSEError(errno.ENOENT)
                a.st_mode = stat.S_IFDIR | 0o555
                a.st_nlink = 2
            else:
                a.st_mode = stat.S_IFREG | 0o444
                a.st_nlink = 1
                a.st_size = int(tree.sizes[i])
                a.st_blocks = (int(tree.data_end[i]) + 511) // 512  # the zeros after: a hole
            a.st_uid, a.st_gid = uid, gid
            a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = now
            a.st_blksize = 128 * 1024
            a.attr_timeout = a.entry_timeout = TIMEOUT
            return a

        def _dir(self, inode: int) -> str:
            prefix = tree.dir_path(inode)
            if prefix is None:
                raise pyfuse3.FUSEError(
                    errno.ENOTDIR if tree.file_index(inode) is not None else errno.ENOENT
                )
            return prefix

        async def lookup(
            self,
            parent_inode: pyfuse3.InodeT,
            name: pyfuse3.FileNameT,
            ctx: pyfuse3.RequestContext | None = None,
        ) -> pyfuse3.EntryAttributes:
            inode = tree.lookup(self._dir(parent_inode), os.fsdecode(name))
            if inode is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._attr(inode)

        async def getattr(
            self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext | None = None
        ) -> pyfuse3.EntryAttributes:
            return self._attr(inode)

        async def opendir(
            self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext
        ) -> pyfuse3.FileHandleT:
            self._dir(inode)
            return pyfuse3.FileHandleT(inode)

        async def readdir(
            self, fh: pyfuse3.FileHandleT, start_id: int, token: pyfuse3.ReaddirToken
        ) -> None:
            for cookie, name, inode in tree.children(self._dir(fh), start_id):
                if not pyfuse3.readdir_reply(token, os.fsencode(name), self._attr(inode), cookie):
                    break

        async def releasedir(self, fh: pyfuse3.FileHandleT) -> None:
            pass

        async def open(
            self, inode: pyfuse3.InodeT, flags: pyfuse3.FlagT, ctx: pyfuse3.RequestContext
        ) -> pyfuse3.FileInfo:
            if tree.file_index(inode) is None:
                raise pyfuse3.FUSEError(errno.EISDIR if tree.dir_path(inode) else errno.ENOENT)
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
                raise pyfuse3.FUSEError(errno.EROFS)
            return pyfuse3.FileInfo(fh=pyfuse3.FileHandleT(inode), keep_cache=True)

        async def read(self, fh: pyfuse3.FileHandleT, off: int, size: int) -> bytes:
            i = tree.file_index(fh)
            assert i is not None  # open() took only files
            if i == tree.manifest_index:
                return tree.manifest_bytes[off : off + size]
            rel, whole, data_end = tree.paths[i], int(tree.sizes[i]), int(tree.data_end[i])
            try:
                return await trio.to_thread.run_sync(
                    cache.read, rel, whole, off, size, data_end, limiter=limiter
                )
            except StoreError as exc:
                log.error("EIO reading %s of %s at %d: %s", rel, where, off, exc)
                raise pyfuse3.FUSEError(errno.EIO) from None
            except OSError as exc:  # the local cache's disk
                log.error("EIO reading %s of %s at %d: cache: %s", rel, where, off, exc)
                raise pyfuse3.FUSEError(errno.EIO) from None

        async def release(self, fh: pyfuse3.FileHandleT) -> None:
            pass

        async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
            s = pyfuse3.StatvfsData()
            s.f_bsize = s.f_frsize = 4096
            s.f_blocks = (total + 4095) // 4096
            s.f_bfree = s.f_bavail = 0
            s.f_files = len(tree)
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
    from .fusestop import STOP_SIGNALS, StopSignals
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

    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        snap = RemoteSnapshot(location)
        got = read_manifest(snap.fs, snap.base, where)
        if got is None or got[0] != snap.manifest:
            raise StoreError(f"{where}: its {MANIFEST_NAME} changed while mounting; try again")
        tree = build_tree(got[0], got[1], MANIFEST_NAME)
        cache = BlockCache(fetch, blocks, cache_size)
        ops = _operations(tree, cache, where)
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

    async def main() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

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
