"""A bounded local cache of remote files' bytes: fixed-size blocks filled by range reads.

What the mount of a snapshot in object storage (``rmqfs mount s3://... MNT -o ro``,
:class:`engine.live.objectsource.ObjectSource` in its daemon and each render worker) reads
through: readers ask for a few KiB at a time, object storage pays per request (S3: tens of ms to
the first byte, 8-16 MB range GETs recommended), so each miss fetches the whole :data:`BLOCK`
around it with one range read (``fetch``) and keeps it as a file in a local directory;
the next reads of that block are local ``pread`` calls. s3ql and ratarmount serve remote data
the same way.

- **Bounded.** The block files never hold more than ``capacity`` bytes together: room is made
  (least recently used blocks deleted) before a fetch starts, and a fetch waits when blocks in
  flight hold the rest. Memory: one block per fetch in flight.
- **One fetch per block.** Readers of a block being fetched wait for that fetch; when it fails,
  each of them gets its error (nothing is cached).
- **Never wrong bytes.** A range read that returns fewer bytes than the file's size (from its
  manifest) says it should is an :class:`engine.errors.ObjectStoreError` naming the file, as is
  every failure of ``fetch`` (server unreachable, credentials refused, file gone). Bytes past a
  file's ``data_end`` (the end of its manifest ``stored`` prefix: a CommitLog segment's zero
  tail after the snapshot's cut, a live IndexFile's after its last item, which
  :mod:`engine.live.snapshot` guarantees and its crc32c covers; an upload sends nothing past
  it) are zeros, never fetched.

Thread-safe; no pyarrow or FUSE here (tests/engine/test_blockcache.py runs it with a function).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ObjectStoreError
from ..format.mappedfile import SegmentMap, map_read_only

__all__ = ["BLOCK", "BlockCache", "CacheStats"]

#: Bytes fetched per miss (one range read): the middle of S3's 8-16 MB guidance.
BLOCK = 8 << 20
#: Smallest block (a cache smaller than two default blocks uses smaller ones).
MIN_BLOCK = 64 << 10

#: ``fetch(rel, offset, length) -> bytes``: ``length`` bytes of file ``rel`` at ``offset``
Fetch = Callable[[str, int, int], bytes]


@dataclass
class CacheStats:
    """Reads answered from the cache (``hits``) and by fetching (``misses``: range reads
    made), bytes fetched, blocks evicted."""

    hits: int = 0
    misses: int = 0
    fetched_bytes: int = 0
    evicted: int = 0


class _Pending:
    """A block being fetched: its readers wait on ``done``; ``error`` when it failed."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None


class BlockCache:
    """Blocks of remote files cached as files in ``directory`` (made if missing, mode 0700),
    at most ``capacity`` bytes together.

    Args:
        fetch: the range read (see :data:`Fetch`); its errors propagate to :meth:`read`.
        directory: where the block files go; :meth:`close` deletes them.
        capacity: bound of the block files' bytes (at least two blocks: a smaller capacity
            makes the blocks smaller, down to :data:`MIN_BLOCK`).
        block: bytes per block (rounded down to 4 KiB).
        peers: the directories of other caches of the same files (a mount's daemon and its
            render workers, each its own cache), asked on a miss before a fetch: a block one of
            them holds is read from its file (named by the file, the block size and the block
            index alike in every cache), so the processes fetch a block once between them. The
            file of a peer's block stays readable once opened, even if that peer evicts it.

    Raises:
        ValueError: ``capacity`` below two :data:`MIN_BLOCK` blocks.
    """

    def __init__(
        self,
        fetch: Fetch,
        directory: str,
        capacity: int,
        block: int = BLOCK,
        peers: Callable[[], list[str]] | None = None,
    ) -> None:
        if capacity < 2 * MIN_BLOCK:
            raise ValueError(f"cache size {capacity} is below {2 * MIN_BLOCK} bytes")
        self.fetch = fetch
        self.directory = directory
        self.capacity = capacity
        self.block = max(MIN_BLOCK, min(block, capacity // 2) // 4096 * 4096)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.stats = CacheStats()
        self._cond = threading.Condition()
        self.peers = peers
        self._lru: OrderedDict[tuple[str, int], int] = OrderedDict()  # key -> bytes, oldest first
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._used = 0  # bytes of the cached blocks plus those reserved by fetches in flight
        self._ids: dict[str, str] = {}  # file -> the name its blocks' files start with
        self._closed = False

    @property
    def cached_bytes(self) -> int:
        """Bytes of the blocks held now (those being fetched included)."""
        with self._cond:
            return self._used

    def _name(self, key: tuple[str, int]) -> str:
        return f"{key[0]}.{key[1]:x}"

    def _path(self, key: tuple[str, int]) -> str:
        return os.path.join(self.directory, self._name(key))

    def _file_id(self, rel: str) -> str:
        """The name the block files of ``rel`` start with: a digest of the name and the block
        size, the same in every cache (caller holds the lock)."""
        fid = self._ids.get(rel)
        if fid is None:
            digest = hashlib.blake2b(rel.encode("utf-8", "surrogateescape"), digest_size=10)
            fid = self._ids[rel] = f"{digest.hexdigest()}.{self.block:x}"
        return fid

    def _from_peer(self, key: tuple[str, int]) -> int | None:
        """A descriptor of a peer's file of block ``key``, or None (no peer holds it)."""
        if self.peers is None:
            return None
        name = self._name(key)
        for d in self.peers():
            try:
                return os.open(os.path.join(d, name), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
        return None

    def read(
        self, rel: str, size: int, offset: int, length: int, data_end: int | None = None
    ) -> bytes:
        """``length`` bytes of file ``rel`` (``size`` bytes long) from ``offset`` (fewer at its
        end, ``b""`` past it); bytes at or past ``data_end`` are zeros and never fetched.

        Raises:
            ObjectStoreError: a block could not be fetched (``fetch``'s error), or the file is
                shorter than ``size``; the message names ``rel``.
        """
        end = min(offset + length, size)
        data_end = size if data_end is None else max(0, min(data_end, size))
        out = []
        pos = offset
        while pos < end:
            index = pos // self.block
            start = index * self.block
            stop = min(end, start + self.block)
            if pos >= data_end:
                out.append(bytes(stop - pos))
            else:
                want = min(start + self.block, data_end) - start
                out.append(self._read_block(rel, index, start, want, pos - start, stop - pos))
            pos = stop
        return out[0] if len(out) == 1 else b"".join(out)

    def view(
        self, rel: str, size: int, offset: int, data_end: int | None = None
    ) -> tuple[SegmentMap, int] | None:
        """A read-only map of the cached block of file ``rel`` (``size`` bytes long) that holds
        ``offset`` (fetched first when it is not cached), and the file position of its first
        byte: the block's bytes without a copy (a reader of many records of one block). The
        map holds the block's data only (not the zeros at or past ``data_end``) and stays valid
        after the block is evicted. None at or past ``data_end``.

        Raises:
            ObjectStoreError: as :meth:`read`.
        """
        data_end = size if data_end is None else max(0, min(data_end, size))
        if not 0 <= offset < data_end:
            return None
        index = offset // self.block
        start = index * self.block
        want = min(start + self.block, data_end) - start
        fd = self._block_fd(rel, index, start, want)
        try:
            return map_read_only(fd), start
        finally:
            os.close(fd)

    def _read_block(self, rel: str, index: int, start: int, want: int, at: int, n: int) -> bytes:
        """``n`` bytes at ``at`` in block ``index`` of ``rel`` (``want`` bytes of data from
        ``start``; zeros after them)."""
        fd = self._block_fd(rel, index, start, want)
        try:
            data = os.pread(fd, n, at) if at < want else b""
        finally:
            os.close(fd)
        return data + bytes(n - len(data)) if len(data) < n else data

    def _block_fd(self, rel: str, index: int, start: int, want: int) -> int:
        """A descriptor of block ``index`` of ``rel``'s file (``want`` bytes of data from
        ``start``), fetched first when it is not cached; the caller closes it."""
        asked_peers = False
        while True:
            with self._cond:
                if self._closed:
                    raise ObjectStoreError(f"reading {rel}: the cache is closed")
                key = (self._file_id(rel), index)
                if key in self._lru:
                    self._lru.move_to_end(key)
                    self.stats.hits += 1
                    fd = os.open(self._path(key), os.O_RDONLY)  # under the lock: not evicted
                    break
                pending = self._pending.get(key)
                mine = pending is None and asked_peers
                if mine:
                    pending = self._pending[key] = _Pending()
                    self._make_room(want)
                    self._used += want
            if pending is None:  # a miss no one here fetches: a peer's cache may hold it
                peer = self._from_peer(key)
                if peer is not None:  # read from its file: no fetch, nothing kept here
                    with self._cond:
                        self.stats.hits += 1
                    return peer
                asked_peers = True
                continue
            if not mine:
                pending.done.wait()
                if pending.error is not None:
                    raise ObjectStoreError(str(pending.error)) from None
                continue  # cached now (or evicted already: fetched again)
            self._fill(rel, key, start, want, pending)
        return fd

    def _make_room(self, n: int) -> None:
        """Evict least recently used blocks until ``n`` more bytes fit; wait for fetches in
        flight when they hold the rest. Caller holds the lock."""
        while self._used + n > self.capacity:
            if self._lru:
                key, size = self._lru.popitem(last=False)
                self._used -= size
                self.stats.evicted += 1
                try:
                    os.unlink(self._path(key))
                except FileNotFoundError:
                    pass
            else:
                self._cond.wait()

    def _fill(
        self, rel: str, key: tuple[str, int], start: int, want: int, pending: _Pending
    ) -> None:
        """Fetch a block (its bytes already reserved) into its file; wake its waiters."""
        path = self._path(key)
        try:
            data = self.fetch(rel, start, want)
            if len(data) != want:
                raise ObjectStoreError(
                    f"{rel}: {want} bytes at {start} asked, {len(data)} came back (the object "
                    "is shorter than its manifest says: damaged or replaced)"
                )
            tmp = path + ".part"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.rename(tmp, path)
        except BaseException as exc:
            with self._cond:
                self._pending.pop(key, None)
                self._used -= want
                pending.error = exc
                self._cond.notify_all()
            pending.done.set()
            try:
                os.unlink(path + ".part")
            except FileNotFoundError:
                pass
            raise
        with self._cond:
            self._pending.pop(key, None)
            if self._closed:
                os.unlink(path)
                self._used -= want
            else:
                self._lru[key] = want
            self.stats.misses += 1
            self.stats.fetched_bytes += want
            self._cond.notify_all()
        pending.done.set()

    def close(self) -> None:
        """Delete the block files (reads after this fail)."""
        with self._cond:
            self._closed = True
            keys = list(self._lru)
            self._lru.clear()
            self._used = 0
        for key in keys:
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                pass
