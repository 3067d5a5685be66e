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

from engine import errors as E
from engine.live.snapshot import FrozenFile, Snapshot, SnapshotManager

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
    pread_nowait,
)


def manager(ctx: Context) -> SnapshotManager:
    """The context's :class:`engine.live.snapshot.SnapshotManager` (made on first use)."""
    return ctx.snapshot_manager()


class SnapshotsDir(Dir):
    """``snapshots/``: one directory per snapshot; mkdir makes one, rmdir drops one."""

    def list(self) -> list[str]:
        return manager(self.ctx).names()

    def child(self, name: str) -> Node | None:
        snap = manager(self.ctx).get(name)
        if snap is None:
            return None
        return SnapshotDir(self.ctx, self.sub(name), snap, "")

    def stat(self) -> Stat:
        return Stat(DIR_MODE, 0, self.ctx.mount_time_ns)

    def mkdir(self, name: str) -> Node:
        try:
            snap = manager(self.ctx).create(name)
        except E.StoreError as exc:
            raise fs_error(exc) from exc
        return SnapshotDir(self.ctx, self.sub(name), snap, "")

    def rmdir(self, name: str) -> None:
        try:
            manager(self.ctx).drop(name)
        except E.StoreError as exc:
            raise fs_error(exc) from exc


class SnapshotDir(Dir):
    """A directory inside a snapshot (``rel`` "" is the snapshot itself)."""

    def __init__(self, ctx: Context, path: str, snap: Snapshot, rel: str) -> None:
        super().__init__(ctx, path)
        self.snap, self.rel = snap, rel
        # children's paths (and so inodes) carry the snapshot's identity
        self.base = f"{path}@{snap.time_ms}-{id(snap):x}" if not rel else path

    def sub(self, name):
        return f"{self.base}/{name}"

    def list(self) -> list[str]:
        names = list(self.snap.dirs.get(self.rel, ()))
        if not self.rel:
            names.append("SNAPSHOT.json")
        return names

    def child(self, name: str) -> Node | None:
        rel = f"{self.rel}/{name}" if self.rel else name
        if not self.rel and name == "SNAPSHOT.json":
            return ManifestFile(self.ctx, self.sub(name), self.snap)
        if rel in self.snap.files:
            return SnapshotFile(self.ctx, self.sub(name), self.snap, self.snap.files[rel])
        if self.snap.is_dir(rel):
            return SnapshotDir(self.ctx, self.sub(name), self.snap, rel)
        return None

    def stat(self) -> Stat:
        return Stat(DIR_MODE, 0, self.snap.time_ms * 1_000_000, live=False)


class SnapshotHandle(Handle):
    """An open snapshot file: keeps the snapshot's descriptors open until release."""

    keep_cache = True

    def __init__(self, snap: Snapshot, frozen: FrozenFile) -> None:
        if not snap.acquire():
            raise FsError(errno.ENOENT, "snapshot dropped")
        self.snap, self.frozen = snap, frozen
        self._released = False

    def read(self, offset: int, length: int) -> bytes:
        return self.frozen.read(offset, length)

    def read_nowait(self, offset: int, length: int) -> bytes | bytearray | None:
        p = self.frozen.piece(offset, length)
        if p is None:
            return None
        if p[0] == "fd":
            return pread_nowait(p[1], p[3], p[2])
        if p[0] == "zeros":
            return bytes(p[1])
        return p[1]

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.snap.release()


class SnapshotFile(Node):
    def __init__(self, ctx: Context, path: str, snap: Snapshot, frozen: FrozenFile) -> None:
        super().__init__(ctx, path)
        self.snap, self.frozen = snap, frozen

    def stat(self) -> Stat:
        f = self.frozen
        data = sum(e - s for s, e, _, _, _ in f.extents)
        return Stat(RO_FILE, f.size, f.mtime_ns, live=False, blocks=(data + 511) // 512)

    stat_nowait = stat

    def open(self, flags: int) -> Handle:
        check_read_only_open(flags)
        return SnapshotHandle(self.snap, self.frozen)


class ManifestFile(Node):
    """``SNAPSHOT.json``: stat and open wait until every file is summed (background)."""

    def __init__(self, ctx: Context, path: str, snap: Snapshot) -> None:
        super().__init__(ctx, path)
        self.snap = snap

    def _data(self) -> bytes:
        try:
            return manager(self.ctx).manifest(self.snap)
        except InterruptedError:
            raise FsError(errno.ENOENT, "snapshot dropped") from None

    def stat(self) -> Stat:
        return Stat(RO_FILE, len(self._data()), self.snap.time_ms * 1_000_000, live=False)

    def stat_nowait(self) -> Stat | None:
        fut = self.snap.manifest_future
        if fut is None or not fut.done() or fut.exception() is not None:
            return None
        return self.stat()

    def open(self, flags: int) -> Handle:
        check_read_only_open(flags)
        h = BytesHandle(self._data())
        h.direct_io = False
        h.keep_cache = True
        return h
