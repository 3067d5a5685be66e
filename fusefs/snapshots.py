"""``snapshots/``: point-in-time snapshots of the store (see :mod:`engine.live.snapshot`).

``mkdir snapshots/<name>`` freezes the store (also on a read-only mount: nothing is written
anywhere), ``snapshots/<name>/`` then holds the layout of ``raw/`` (``commitlog/``,
``consumequeue/``, ``index/``, ``config/``, ``checkpoint``) as a clean shutdown at that instant
would have left it, plus ``SNAPSHOT.json`` (the manifest with each file's size and CRC32C), and
``rmdir snapshots/<name>`` drops it (as ZFS's ``.zfs/snapshot`` directory does).

A snapshot's files never change: their attributes and pages are cached by the kernel, and their
inode numbers include the snapshot's creation time, so a snapshot made again under the same
name never shows the old one's cached pages.
"""

from __future__ import annotations

import errno

from rmqfs.engine import errors as E
from rmqfs.engine.live.snapshot import FrozenFile, Snapshot, SnapshotManager

from .base import (
    DIR_MODE,
    RO_FILE,
    BytesHandle,
    Context,
    Dir,
    FsError,
    Handle,
    Node,
    Stat,
    check_read_only_open,
    fs_error,
    pread_cached,
)


def manager(ctx: Context) -> SnapshotManager:
    """The context's :class:`engine.live.snapshot.SnapshotManager` (made on first use)."""
    return ctx.snapshot_manager()


class SnapshotsDir(Dir):
    """``snapshots/``: one directory per snapshot of the store
    (:class:`engine.live.snapshot.SnapshotManager`); ``mkdir snapshots/S`` takes one, ``rmdir``
    drops it (the owner only, also on a read-only mount).

    Errnos: ENOENT for no such snapshot; EEXIST for mkdir of a name taken; an engine error's
    errno for a name it refuses.
    Threads: every handler (lookup, readdir, getattr, mkdir, rmdir) runs in a worker thread."""

    def list(self) -> list[str]:
        """The snapshots' names."""
        return manager(self.ctx).names()

    def child(self, name: str) -> Node | None:
        """The snapshot's :class:`SnapshotDir`, or None."""
        snap = manager(self.ctx).get(name)
        if snap is None:
            return None
        return SnapshotDir(self.ctx, self.sub(name), snap, "")

    def stat(self) -> Stat:
        """A directory that takes mkdir (0755), the mount's start as mtime."""
        return Stat(DIR_MODE, 0, self.ctx.mount_time_ns)

    def mkdir(self, name: str) -> Node:
        """Take a snapshot named ``name`` (``SnapshotManager.create``); the engine error's
        errno (EEXIST for a name taken)."""
        try:
            snap = manager(self.ctx).create(name)
        except E.StoreError as exc:
            raise fs_error(exc) from exc
        return SnapshotDir(self.ctx, self.sub(name), snap, "")

    def rmdir(self, name: str) -> None:
        """Drop the snapshot (``SnapshotManager.drop``); ENOENT for no such snapshot."""
        try:
            manager(self.ctx).drop(name)
        except E.StoreError as exc:
            raise fs_error(exc) from exc


class SnapshotDir(Dir):
    """``snapshots/<name>/...``: a directory of a snapshot (``rel`` "" is the snapshot itself,
    which also holds ``SNAPSHOT.json``); its children's paths carry the snapshot's identity, so a
    snapshot made again under the same name gets new inodes.

    Errnos: ENOENT for a name the snapshot does not hold; EROFS or EPERM for mkdir/rmdir.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, snap: Snapshot, rel: str) -> None:
        super().__init__(ctx, path)
        self.snap, self.rel = snap, rel
        # children's paths (and so inodes) carry the snapshot's identity
        self.base = f"{path}@{snap.time_ms}-{id(snap):x}" if not rel else path

    def sub(self, name: str) -> str:
        """The child's path, under the snapshot's identity."""
        return f"{self.base}/{name}"

    def list(self) -> list[str]:
        """The snapshot's entries here (and ``SNAPSHOT.json`` at its top)."""
        names = list(self.snap.dirs.get(self.rel, ()))
        if not self.rel:
            names.append("SNAPSHOT.json")
        return names

    def child(self, name: str) -> Node | None:
        """The :class:`ManifestFile`, :class:`SnapshotFile` or :class:`SnapshotDir` of
        ``name``, or None."""
        rel = f"{self.rel}/{name}" if self.rel else name
        if not self.rel and name == "SNAPSHOT.json":
            return ManifestFile(self.ctx, self.sub(name), self.snap)
        if rel in self.snap.files:
            return SnapshotFile(self.ctx, self.sub(name), self.snap, self.snap.files[rel], rel)
        if self.snap.is_dir(rel):
            return SnapshotDir(self.ctx, self.sub(name), self.snap, rel)
        return None

    def stat(self) -> Stat:
        """0755 (a directory), the snapshot's time as mtime, never changes (``live=False``)."""
        return Stat(DIR_MODE, 0, self.snap.time_ms * 1_000_000, live=False)


class SnapshotHandle(Handle):
    """An open snapshot file. The owner's and root's keep the snapshot's descriptors open
    until release (a backup reading it is never cut off by an ``rmdir``); another user's
    (``-o allow_other``) holds nothing between reads (``pin`` False): each read takes the
    snapshot for its own length, and once the owner dropped it the read fails with EIO, so
    no other user keeps a dropped snapshot's descriptors and memory (its frozen IndexFile
    slot table) alive by holding a file open."""

    keep_cache = True

    def __init__(self, snap: Snapshot, frozen: FrozenFile, rel: str, pin: bool = True) -> None:
        if not snap.acquire():
            raise FsError(errno.ENOENT, "snapshot dropped")
        self.snap, self.rel, self.pin = snap, rel, pin
        self.frozen: FrozenFile | None = frozen
        self._released = False
        if not pin:
            self.frozen = None
            snap.release()

    def _file(self) -> FrozenFile:
        """The frozen file, the snapshot taken (an unpinned handle; EIO: dropped)."""
        if not self.snap.acquire():
            raise FsError(errno.EIO, "the snapshot was dropped")
        f = self.snap.files.get(self.rel)
        if f is None:
            self.snap.release()
            raise FsError(errno.EIO, "the snapshot was dropped")
        return f

    def read(self, offset: int, length: int) -> bytes | bytearray:
        """The frozen file's bytes (``FrozenFile.read``)."""
        if self.frozen is not None:
            return self.frozen.read(offset, length)
        f = self._file()
        try:
            return f.read(offset, length)
        finally:
            self.snap.release()

    def read_cached(self, offset: int, length: int) -> bytes | bytearray | None:
        """:meth:`read` when the bytes are one piece in memory or in the page cache
        (``FrozenFile.piece``, :func:`fusefs.base.pread_cached`), else None (an unpinned
        handle: None, its reads take a thread)."""
        if self.frozen is None:
            return None
        p = self.frozen.piece(offset, length)
        if p is None:
            return None
        if p[0] == "fd":
            return pread_cached(p[1], p[3], p[2])
        return bytes(p[1]) if p[0] == "zeros" else p[1]

    def release(self) -> None:
        """Release the snapshot's hold (once; an unpinned handle holds none)."""
        if not self._released:
            self._released = True
            if self.pin:
                self.snap.release()


class SnapshotFile(Node):
    """``snapshots/<name>/<store path>``: a store file as it was when the snapshot was taken
    (:class:`engine.live.snapshot.FrozenFile`: its extents of the real file, frozen slots, zeros).

    Errnos: EACCES for an open for writing; ENOENT for an open after the snapshot was dropped.
    Threads: getattr answers on the trio loop (:meth:`stat_cached`: all in memory);
    open runs in a worker thread; reads answer on the trio loop when the pieces are in memory or
    the page cache (``SnapshotHandle.read_cached``), else in a worker thread."""

    def __init__(
        self, ctx: Context, path: str, snap: Snapshot, frozen: FrozenFile, rel: str
    ) -> None:
        super().__init__(ctx, path)
        self.snap, self.frozen, self.rel = snap, frozen, rel

    def stat(self) -> Stat:
        """The frozen size, mtime and data blocks; never changes (in memory)."""
        f = self.frozen
        blocks = (f.allocated_bytes() + 511) // 512
        return Stat(RO_FILE, f.size, f.mtime_ns, live=False, blocks=blocks)

    def stat_cached(self) -> Stat:
        """:meth:`stat` (in memory), on the trio loop."""
        return self.stat()

    def open(self, flags: int) -> Handle:
        """A :class:`SnapshotHandle` (holds the snapshot open). EACCES for writing;
        ENOENT when the snapshot was dropped."""
        return self.open_as(flags, None)

    def open_as(self, flags: int, uid: int | None) -> Handle:
        """:meth:`open` for ``uid``: another user's handle does not pin the snapshot
        (:class:`SnapshotHandle`)."""
        check_read_only_open(flags)
        pin = uid is None or uid in (0, self.ctx.owner_uid)
        return SnapshotHandle(self.snap, self.frozen, self.rel, pin)


class ManifestFile(Node):
    """``snapshots/<name>/SNAPSHOT.json``: the snapshot's manifest
    (:meth:`engine.live.snapshot.SnapshotManager.manifest`); stat and open wait until every file
    is summed (in the background).

    Errnos: EACCES for an open for writing; ENOENT when the snapshot was dropped meanwhile.
    Threads: getattr answers on the trio loop once the manifest is done (:meth:`stat_cached`),
    else waits in a worker thread; open runs in a worker thread; reads answer on the trio loop from
    the bytes taken at open (``BytesHandle.read_cached``)."""

    def __init__(self, ctx: Context, path: str, snap: Snapshot) -> None:
        super().__init__(ctx, path)
        self.snap = snap

    def _data(self) -> bytes:
        try:
            return manager(self.ctx).manifest(self.snap)
        except InterruptedError:
            raise FsError(errno.ENOENT, "snapshot dropped") from None

    def stat_cached(self) -> Stat | None:
        """:meth:`stat` once the sums are done (the manifest is in memory), else None."""
        fut = self.snap.manifest_future
        if fut is None or not fut.done() or fut.exception() is not None:
            return None
        return self.stat()

    def stat(self) -> Stat:
        """The manifest's size (waits for the sums); ENOENT when the snapshot was dropped."""
        return Stat(RO_FILE, len(self._data()), self.snap.time_ms * 1_000_000, live=False)

    def open(self, flags: int) -> Handle:
        """A :class:`BytesHandle` of the manifest (waits for the sums). EACCES for writing."""
        check_read_only_open(flags)
        h = BytesHandle(self._data())
        h.direct_io = False
        h.keep_cache = True
        return h
