"""Point-in-time snapshots of a live store, and their manifests (``SNAPSHOT.json``).

:func:`freeze` takes, under the store's put lock, the state a clean shutdown at that instant
would leave on disk, and returns a :class:`Snapshot`: the files of the store's layout
(``commitlog/``, ``consumequeue/``, ``index/``, ``config/``, ``checkpoint``; no ``abort``, no
``lock``) as :class:`FrozenFile` objects whose bytes never change while the snapshot exists.

What is frozen, and how (the files of docs/format.md):

- the CommitLog offset ``O``: a record boundary with every dispatched (acknowledged) record
  before it and none after (``max_offset``; under SYNC_FLUSH the start of the first put still
  waiting for its flush). Segments are served from the store's files up to ``O`` and read as
  zeros from there to their full size, exactly what a broker's normal recovery
  (``CommitLog.recoverNormally``: it stops at the first record whose magic is not a record's)
  and ours expect after a clean shutdown. Segments starting after ``O`` are left out.
- every ConsumeQueue's unit count: its files up to the last unit, zeros after (a unit of
  zeros ends ``ConsumeQueue.recover``'s scan). Units a read-only store keeps only in memory
  are copied.
- the IndexFiles: full files are served as they are; a file still being filled has its header
  and hash-slot table (``40 + hashSlotNum * 4`` bytes, the only part written in place) copied,
  and its items up to the frozen ``indexCount``, zeros after.
- ``config/*.json`` (consumer offsets, topics, groups, their ``.bak``): their bytes, read under
  the consumer-offset lock, which is held until the put lock is released again: every commit
  that returned before is in, none that began after (a commit's fsync never runs under the
  put lock, so producers do not wait for it).
- ``checkpoint`` as ``flush()`` at close would write it: physicMsgTimestamp and
  logicsMsgTimestamp = store time of the last record before ``O``, indexMsgTimestamp = the
  newest IndexFile's endTimestamp, masterFlushedOffset as the store's, confirmPhyOffset =
  ``O`` (a controller-mode replica's, one with ``epochFileCheckpoint``: the store's, as
  ``CommitLog.setConfirmOffset`` left it).
- ``epochFileCheckpoint``, ``epochFileCheckpoint.bak`` and ``brokerIdentity`` (5.x controller
  mode: ``EpochFileCache``, ``BrokerIdentity``) byte-exact, when present.

CommitLog, ConsumeQueue and IndexFile item regions are append-only, so their bytes below the
frozen points never change; the snapshot holds duplicated file descriptors, so expiry (which
unlinks files) cannot take them away while it exists. Cost under the lock: one ``dup`` per file
and one copy of the live IndexFile's slot table (20 MB for the default 5,000,000 slots).

Not in a snapshot: IndexFiles a read-only store built in memory only (the restored store's
recovery re-indexes from the last on-disk index file's endPhyOffset), and other 5.x
directories (``timerwheel``, ``timerlog/``, ``batchconsumequeue``, ...), which this engine
does not write, with the timer store's ``config/timercheck`` (:data:`CONFIG_LEFT_OUT`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
import re
import resource
import stat
import sys
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import (
    InvalidNameError,
    NoSuchSnapshotError,
    SnapshotDescriptorsError,
    SnapshotError,
    SnapshotExistsError,
    UnsupportedLayoutError,
)
from ..format.checkpoint import StoreCheckpoint
from ..format.consumequeue import CQ_STORE_UNIT_SIZE
from ..format.crc import CHUNK, crc32c, crc32c_fd, crc32c_zeros
from ..format.indexfile import HASH_SLOT_SIZE, HEADER, INDEX_HEADER_SIZE, INDEX_SIZE, cut_index
from ..format.mappedfile import offset_to_file_name
from ..format.timercheck import CHECK_FILE as TIMER_CHECK_FILE
from ..service import workprogress
from ..service.storetree import CONTROLLER_TOP, MAX_STORE_DEPTH, walk_tree
from .manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST,
    FileEntry,
    Manifest,
    ManifestFiles,
    parse_manifest,
    read_manifest_file,
)

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from ..store import MessageStore

log = logging.getLogger(__name__)

MANIFEST_FORMAT = 1
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=@,-]{0,127}$")
NS = 1_000_000_000
_TAIL_CHECK = 64 * 1024  # bytes re-summed to confirm a cached prefix sum is still valid
#: A replica's top-level files a snapshot carries byte-exact: the controller's epoch file and
#: its copy (``EpochFileCache``), the broker's identity (``BrokerIdentity``: cluster#broker#id).
REPLICA_FILES = ("epochFileCheckpoint", "epochFileCheckpoint.bak", "brokerIdentity")
#: Bound on each (an epoch file is a text line per epoch; a broker's are a few KiB).
MAX_REPLICA_FILE = 1 << 20


class _IndexHead:
    """The header and hash slots of a live IndexFile as frozen: the slot table is copied under
    the put lock in the engine's native int order (one memcpy) and turned into the file's
    big-endian bytes on first use, off the mkdir path."""

    __slots__ = ("_head", "_slots", "_native", "_bytes", "_lock")

    def __init__(self, head: bytes, slots: bytes, native: bool):
        self._head, self._native = head, native
        self._slots: bytes | None = slots
        self._bytes: bytes | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        # Read _slots once: get() on another thread may set _bytes and drop _slots between a
        # test of _bytes and a read of _slots (len(None) raised TypeError).
        slots = self._slots
        if slots is not None:
            return len(self._head) + len(slots)
        assert self._bytes is not None  # _slots is dropped only after _bytes is set
        return len(self._bytes)

    def allocated(self) -> int:
        """Bytes of the header and the slot table's 4 KiB pages that are not all zeros (the
        pages a sparse IndexFile holds on disk)."""
        slots = self._slots  # read once: get() on another thread may drop it
        data = slots if slots is not None else self.get()[len(self._head) :]
        page = 4096
        whole = len(data) // page * page
        pages = np.frombuffer(data, dtype=np.uint8, count=whole).reshape(-1, page)
        used = int(np.count_nonzero(pages.any(axis=1))) * page
        if any(data[whole:]):
            used += len(data) - whole
        return len(self._head) + used

    def get(self) -> bytes:
        if self._bytes is None:
            with self._lock:
                if self._bytes is None:
                    slots = self._slots
                    assert slots is not None  # dropped only once _bytes is set
                    if self._native and sys.byteorder == "little":
                        a = array("i")
                        a.frombytes(slots)
                        a.byteswap()
                        slots = a.tobytes()
                    self._bytes = self._head + slots
                    self._slots = None
        assert self._bytes is not None
        return self._bytes


# What an extent serves from memory: bytes, or a frozen IndexFile header and slot table.
_ExtentData = bytes | _IndexHead
# (start, end, fd, fd_offset, data): see FrozenFile.
Extent = tuple[int, int, int, int, "_ExtentData | None"]


def _bytes_of(data: _ExtentData) -> bytes:
    return data if isinstance(data, bytes) else data.get()


class FrozenFile:
    """One file of a snapshot: ``size`` bytes made of extents, zeros elsewhere.

    ``extents`` is a sorted list of ``(start, end, fd, fd_offset, data)``: bytes
    ``[start, end)`` come from ``fd`` at ``fd_offset`` (``data`` None) or from ``data`` (fd
    -1). ``key`` identifies the content (equal keys, equal bytes); ``candidate_mtime_ns`` is the
    mtime to show when the content is new (the store file's mtime when served whole).
    """

    __slots__ = (
        "rel",
        "size",
        "extents",
        "key",
        "candidate_mtime_ns",
        "mtime_ns",
        "ident",
        "_allocated",
    )

    def __init__(self, rel: str, size: int, extents: list[Extent], ident: int | None = None):
        self.rel = rel
        self.size = size
        self.extents = extents
        # the store file served from offset 0: its fd until the freeze identifies it, then
        # its (st_dev, st_ino); None for none
        self.ident: int | tuple[int, int] | None = ident
        self.key: tuple | None = None
        self.candidate_mtime_ns = 0
        self.mtime_ns = 0
        self._allocated: int | None = None

    def read(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` (short at the end of the file)."""
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        parts: list[bytes] = []
        pos = offset
        for s, e, fd, fo, data in self.extents:
            if e <= pos:
                continue
            if s >= end:
                break
            if s > pos:
                parts.append(bytes(s - pos))
                pos = s
            n = min(e, end) - pos
            if data is not None:
                parts.append(_bytes_of(data)[pos - s : pos - s + n])
            else:
                b = os.pread(fd, n, fo + pos - s)
                if len(b) < n:  # cannot happen below a frozen point; never serve garbage
                    b += bytes(n - len(b))
                parts.append(b)
            pos += n
        if pos < end:
            parts.append(bytes(end - pos))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def piece(self, offset: int, length: int) -> tuple[Any, ...] | None:
        """Where ``[offset, offset + length)`` comes from when it lies in one extent or in
        zeros only: ``("fd", fd, file_offset, n)``, ``("data", bytes)`` or ``("zeros", n)``;
        None when it spans several (callers then use :meth:`read`)."""
        end = min(offset + length, self.size)
        if offset >= end:
            return ("data", b"")
        for s, e, fd, fo, data in self.extents:
            if e <= offset:
                continue
            if s >= end:
                break
            if s <= offset and end <= e:
                if data is None:
                    return ("fd", fd, fo + offset - s, end - offset)
                if isinstance(data, bytes):
                    return ("data", data[offset - s : end - s])
            return None
        return ("zeros", end - offset)

    @property
    def stored(self) -> int:
        """Bytes from the start that hold data: ``[stored, size)`` is zeros (the end of the last
        extent). What the manifest records as ``stored`` and an upload sends: a live CommitLog
        segment up to the snapshot's cut, a ConsumeQueue file up to its last unit, a live
        IndexFile up to its last item (``IndexFile``: header, hash slots, then ``indexCount``
        items)."""
        return self.extents[-1][1] if self.extents else 0

    def allocated_bytes(self) -> int:
        """The bytes of the file that hold data, as ``du`` should count them (the mount's
        ``st_blocks``): every extent served from a store file or from memory, but of a frozen
        IndexFile's hash-slot table (copied whole: 20 MB for 5,000,000 slots) only its 4 KiB
        pages that are not all zeros, as the store's sparse IndexFile allocates only the pages
        a slot was written to. So ``du`` of a snapshot is ``du`` of the store's files it
        froze. Computed once (a scan of the slot table, a few ms)."""
        if self._allocated is None:
            total = 0
            for s, e, _fd, _fo, data in self.extents:
                total += data.allocated() if isinstance(data, _IndexHead) else e - s
            self._allocated = total
        return self._allocated

    def served_whole(self) -> bool:
        """True when every byte comes from one store file at the same offsets."""
        return (
            len(self.extents) == 1
            and self.extents[0][4] is None
            and self.extents[0][0] == 0
            and self.extents[0][3] == 0
            and self.extents[0][1] == self.size
        )


class Snapshot:
    """A frozen store: name, time, CommitLog offset, files (see the module docstring).

    Files are served until :meth:`release` drops the last reference (the snapshot's own, held
    until ``rmdir``, plus one per open file and per running manifest computation).
    """

    def __init__(
        self,
        name: str,
        time_ms: int,
        commitlog_offset: int,
        commitlog_min_offset: int,
        message_count: int,
        checkpoint: StoreCheckpoint,
        files: dict[str, FrozenFile],
        fds: list[int],
        store_root: str,
        queues: dict[str, dict[str, list[int]]] | None = None,
    ):
        self.name = name
        #: ``{topic: {queueId: [minOffset, maxOffset]}}`` of every queue in the snapshot
        #: (``getMinOffsetInQueue``/``getMaxOffsetInQueue`` at the freeze): what a reader of a
        #: snapshot in object storage plans by without reading the ConsumeQueues
        self.queues = queues or {}
        self.time_ms = time_ms
        self.commitlog_offset = commitlog_offset
        self.commitlog_min_offset = commitlog_min_offset
        self.message_count = message_count
        self.checkpoint = checkpoint
        self.files = files
        self.store_root = store_root
        self._fds = fds
        self._refs = 1
        self._lock = threading.Lock()
        self.manifest_future: Future | None = None
        self.put_lock_ns = 0  # time the freeze held the store's put lock
        self.cancelled = False
        dirs: dict[str, set] = {"": set()}
        for rel in files:
            parts = rel.split("/")
            for i in range(len(parts)):
                parent = "/".join(parts[:i])
                dirs.setdefault(parent, set()).add(parts[i])
        self.dirs = {k: sorted(v) for k, v in dirs.items()}

    # -- lifetime -----------------------------------------------------------------------------
    def acquire(self) -> bool:
        """Take a reference; False when the snapshot is already released."""
        with self._lock:
            if self._refs <= 0:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        """Drop a reference; the last one closes the file descriptors and lets go of the
        frozen files (their in-memory pieces: the IndexFile's slot table)."""
        with self._lock:
            self._refs -= 1
            if self._refs > 0:
                return
            fds, self._fds = self._fds, []
            self.files = {}
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    # -- content ------------------------------------------------------------------------------
    def is_dir(self, rel: str) -> bool:
        """Whether ``rel`` is a directory of the snapshot."""
        return rel in self.dirs

    def manifest_head(self) -> dict:
        """Everything of the manifest but the files."""
        cp = self.checkpoint
        return {
            "format": MANIFEST_FORMAT,
            "name": self.name,
            "time": self.time_ms,
            "commitLogOffset": self.commitlog_offset,
            "commitLogMinOffset": self.commitlog_min_offset,
            "messageCount": self.message_count,
            "storePathRootDir": self.store_root,
            "queues": self.queues,
            "checkpoint": {
                "physicMsgTimestamp": cp.physic_msg_timestamp,
                "logicsMsgTimestamp": cp.logics_msg_timestamp,
                "indexMsgTimestamp": cp.index_msg_timestamp,
                "confirmPhyOffset": cp.confirm_phy_offset,
            },
        }


def validate_snapshot_name(name: str) -> None:
    """A snapshot name: 1-128 of ``[A-Za-z0-9_.+=@,-]``, not starting with ``.``, ``-``.

    Raises InvalidNameError.
    """
    if not NAME_RE.match(name):
        raise InvalidNameError(
            f"bad snapshot name {name!r}: use 1-128 characters of "
            "A-Z a-z 0-9 _ . + = @ , - (not starting with . or -)"
        )


def _segment_files(
    prefix: str, segs: list, end: int, file_size: int, mem: bytes = b"", mem_base: int = -1
) -> list[FrozenFile]:
    """FrozenFiles of a FileQueue frozen at byte ``end``: each ``(start, fd, size)`` segment
    served up to ``end`` (and up to ``mem_base`` when units live in memory from there), then
    ``mem`` bytes, zeros after. Segments starting at or after ``end`` are left out, except a
    queue's only file."""
    out = []
    by_start = {s: fd for s, fd, _ in segs}
    starts = [s for s, _, _ in segs if s < end] or [s for s, _, _ in segs][:1]
    if mem:
        first = mem_base - mem_base % file_size
        for s in range(first, end, file_size):
            if s not in starts:
                starts.append(s)
    for s in sorted(starts):
        extents: list[Extent] = []
        fd = by_start.get(s)
        disk_end = min(end, mem_base) if mem else end
        if fd is not None and disk_end > s:
            extents.append((0, min(file_size, disk_end - s), fd, 0, None))
        if mem:
            lo, hi = max(s, mem_base), min(s + file_size, end)
            if hi > lo:
                extents.append((lo - s, hi - s, -1, 0, mem[lo - mem_base : hi - mem_base]))
        out.append(FrozenFile(f"{prefix}/{offset_to_file_name(s)}", file_size, extents, ident=fd))
    return out


def _replica_files(root: str) -> dict[str, tuple[bytes, int]]:
    """``{name: (bytes, mtime_ns)}`` of the replica's own top-level files a snapshot carries
    byte-exact (:data:`REPLICA_FILES`: ``EpochFileCache``'s ``epochFileCheckpoint`` and its
    ``.bak``, ``BrokerIdentity``'s ``brokerIdentity``). No writer of this engine touches them.

    Raises:
        SnapshotError: one is larger than :data:`MAX_REPLICA_FILE` bytes (not a broker's).
        OSError: from open/read (ELOOP for a link).
    """
    out = {}
    for n in REPLICA_FILES:
        try:
            fd = os.open(os.path.join(root, n), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_size > MAX_REPLICA_FILE:
                raise SnapshotError(
                    f"{n}: {st.st_size} bytes, more than the {MAX_REPLICA_FILE} a broker writes"
                )
            data = os.pread(fd, MAX_REPLICA_FILE + 1, 0)
            if len(data) > MAX_REPLICA_FILE:
                raise SnapshotError(f"{n}: more than {MAX_REPLICA_FILE} bytes")
            out[n] = (data, st.st_mtime_ns)
        finally:
            os.close(fd)
    return out


#: An IndexFile copied under the lock: ``(rel, size, header bytes, slot bytes (None: read them
#: after the lock), slots in native order, fd, where the items start)``.
_SlotCopy = tuple[str, int, bytes, bytes | None, bool, int, int]


def _check_layout(store: MessageStore) -> None:
    """Raise UnsupportedLayoutError for a store :func:`freeze` cannot snapshot whole."""
    if store.dledger is not None:
        raise UnsupportedLayoutError(
            f"{store.dledger.name}: rmqfs does not snapshot a DLedger store yet (its entries are "
            "not a plain commitlog/); copy the store directory while no broker writes it"
        )
    if store.rocksdb_cq is not None or store.batch_queues:
        what = (
            "consumequeue/ is a RocksDB database (RocksDBConsumeQueueStore)"
            if store.rocksdb_cq is not None
            else "its BatchCQ topics' batchconsumequeue/ (BatchConsumeQueue)"
        )
        raise UnsupportedLayoutError(
            f"rmqfs does not snapshot this store yet: {what} would not be in the snapshot, "
            "and a broker restored from it would not see those queues; copy the store "
            "directory while no broker writes it"
        )


#: ``config/`` files a snapshot leaves out: the 5.x timer store's checkpoint
#: (``TimerCheckpoint``), which says how far the timer store took ``rmq_sys_wheel_timer`` into
#: ``timerwheel`` and ``timerlog/``; those are not in a snapshot, and a broker restored with the
#: checkpoint and without them would never deliver the messages they held (the restored
#: broker's TimerMessageStore takes the queue again from its start instead: a message
#: delivered before the snapshot may be delivered again, none is lost).
CONFIG_LEFT_OUT = frozenset({os.path.basename(TIMER_CHECK_FILE)})


def _read_config(config_dir: str) -> dict[str, tuple[bytes, int]]:
    """``{name: (bytes, mtime_ns)}`` of the files in ``config/`` (no ``.tmp``, no links, none
    of :data:`CONFIG_LEFT_OUT`)."""
    config: dict[str, tuple[bytes, int]] = {}
    try:
        names = sorted(os.listdir(config_dir))
    except FileNotFoundError:
        names = []
    for n in names:
        p = os.path.join(config_dir, n)
        if n.endswith(".tmp") or n in CONFIG_LEFT_OUT or not os.path.isfile(p) or os.path.islink(p):
            continue
        try:
            with open(p, "rb") as fh:
                config[n] = (fh.read(), os.fstat(fh.fileno()).st_mtime_ns)
        except FileNotFoundError:
            continue
    return config


def _freeze_queues(
    store: MessageStore, dup: Callable[[int], int], files: list[FrozenFile]
) -> tuple[int, dict[str, dict[str, list[int]]]]:
    """Add the ConsumeQueues' files to ``files`` (under the put lock); returns ``(messages,
    {topic: {queueId: [min, max]}})``."""
    messages = 0
    queues: dict[str, dict[str, list[int]]] = {}
    for (topic, qid), cq in store.file_queues():
        qsegs = cq.files.dup_segments(dup)
        end = cq.max_offset * CQ_STORE_UNIT_SIZE
        messages += cq.max_offset - cq.min_offset
        mem = b""
        mem_base = -1
        if cq.mem:
            mem_base = cq.mem_base * CQ_STORE_UNIT_SIZE
            mem = bytes(cq.mem[: max(0, end - mem_base)])
        if not qsegs and not mem:
            continue
        queues.setdefault(topic, {})[str(qid)] = [cq.min_offset, cq.max_offset]
        files += _segment_files(
            f"consumequeue/{topic}/{qid}", qsegs, end, cq.files.file_size, mem, mem_base
        )
    return messages, queues


def _freeze_index(
    store: MessageStore,
    dup: Callable[[int], int],
    offset: int,
    files: list[FrozenFile],
    slot_copies: list[_SlotCopy],
) -> int:
    """Freeze the IndexFiles (under the put lock): a full file that names no record past
    ``offset`` goes to ``files`` whole, the others to ``slot_copies`` (finished by
    :func:`_index_files` after the lock). Returns the newest IndexFile's end timestamp (0: none)."""
    index_ts = 0
    index = store.index_service
    if index is None:
        return index_ts
    with index.frozen() as index_files:
        for ixf in index_files:
            if ixf.path is None or ixf.fd is None:
                continue  # in memory only (read-only store)
            fd = dup(ixf.fd)
            rel = f"index/{ixf.name}"
            nslots = ixf.hash_slot_num * HASH_SLOT_SIZE
            if ixf.is_write_full:
                head = os.pread(fd, INDEX_HEADER_SIZE, 0)
                if len(head) == INDEX_HEADER_SIZE and HEADER.unpack(head)[3] >= offset:
                    # names records past the snapshot (a follower's writer is ahead of what
                    # it shows): cut below, slots read then
                    slot_copies.append(
                        (rel, ixf.size, head, None, False, fd, INDEX_HEADER_SIZE + nslots)
                    )
                    continue
                files.append(FrozenFile(rel, ixf.size, [(0, ixf.size, fd, 0, None)], ident=fd))
                index_ts = ixf.end_timestamp
                continue
            # Slots first, then the header: a writer (another process, for a follower) writes
            # items, then slots, then the header, so the slots read here name only items the
            # header read after counts.
            frozen = ixf.freeze_slots()  # native order; swapped after the lock
            if frozen is not None:
                slots = frozen
                native = True
            else:
                slots = os.pread(fd, nslots, INDEX_HEADER_SIZE)
                native = False
            head = os.pread(fd, INDEX_HEADER_SIZE, 0)
            slot_copies.append((rel, ixf.size, head, slots, native, fd, INDEX_HEADER_SIZE + nslots))
            index_ts = HEADER.unpack(head)[1] if len(head) == INDEX_HEADER_SIZE else index_ts
    return index_ts


def _index_files(
    store: MessageStore,
    slot_copies: list[_SlotCopy],
    offset: int,
    partial_mtime: int,
    files: list[FrozenFile],
) -> int | None:
    """Add the IndexFiles of ``slot_copies`` to ``files`` (after the lock), each cut at
    ``offset`` where it names later records; returns the end timestamp of the last one cut
    (None: none was)."""
    cut_ts = None
    for rel, size, head, copied, native, fd, items_base in slot_copies:
        if copied is not None:
            slots = copied
        else:  # a full file's slots, read outside the lock
            slots = os.pread(fd, items_base - INDEX_HEADER_SIZE, INDEX_HEADER_SIZE)
        if len(head) == INDEX_HEADER_SIZE and HEADER.unpack(head)[3] >= offset:
            cut = _cut_index(store, fd, head, slots, native, items_base, offset)
            if cut is None:
                continue  # every item names a record past the snapshot: no such file yet
            head, slots, native = cut
            cut_ts = HEADER.unpack(head)[1]
        count = HEADER.unpack(head)[5] if len(head) == INDEX_HEADER_SIZE else 0
        count = max(count, 1)
        extents: list[Extent] = [
            (0, INDEX_HEADER_SIZE + len(slots), -1, 0, _IndexHead(head, slots, native))
        ]
        items_end = min(size, items_base + count * INDEX_SIZE)
        if items_end > items_base:
            extents.append((items_base, items_end, fd, items_base, None))
        f = FrozenFile(rel, size, extents)
        st = os.fstat(fd)
        # The header names the items (indexCount, endPhyOffset, ...), and the items determine
        # the slots: equal headers of one file, equal content.
        f.key = ("index", st.st_dev, st.st_ino, size, head)
        f.candidate_mtime_ns = partial_mtime
        files.append(f)
    return cut_ts


def _data_file(rel: str, data: bytes, mtime_ns: int) -> FrozenFile:
    """A file served from ``data`` (a config file, a replica file, the checkpoint)."""
    f = FrozenFile(rel, len(data), [(0, len(data), -1, 0, data)])
    f.key = ("data", len(data), crc32c(data))
    f.candidate_mtime_ns = mtime_ns
    return f


def _identify(files: list[FrozenFile], partial_mtime: int) -> None:
    """Give each file still without one its ``key`` (what identifies its content) and its
    ``ident`` (the served file's device and inode)."""
    for f in files:
        if f.key is not None:
            continue
        ident = None
        if isinstance(f.ident, int):  # the fd the file is served from
            st = os.fstat(f.ident)
            ident = (st.st_dev, st.st_ino)
            if f.served_whole():
                f.key = ("file", st.st_dev, st.st_ino, f.size, st.st_mtime_ns)
                f.candidate_mtime_ns = st.st_mtime_ns
        f.ident = ident
        if f.key is None:  # a file served in part: identified by what is served
            parts: list[tuple[int, ...]] = []
            for s, e, fd, fo, blob in f.extents:
                if blob is not None:
                    parts.append((s, e, crc32c(_bytes_of(blob))))
                else:
                    st = os.fstat(fd)
                    parts.append((s, e, fo, st.st_dev, st.st_ino))
            f.key = ("part", f.size, tuple(parts))
            f.candidate_mtime_ns = partial_mtime


#: file descriptors a snapshot must leave free, at least (and an eighth of the limit): for the
#: producers' and readers' open files, the store's next segments and the other snapshots' reads
DESCRIPTOR_RESERVE = 256


def descriptors_needed(store: MessageStore) -> int:
    """How many file descriptors :func:`freeze` of ``store`` takes now: one per CommitLog,
    ConsumeQueue and IndexFile file (each is held open until the snapshot is dropped)."""
    n = len(store.commitlog.files.segments)
    for _, cq in store.file_queues():
        n += len(cq.files.segments)
    index = store.index_service
    if index is not None:
        n += len(index.files)
    return n


def check_descriptor_room(store: MessageStore) -> None:
    """Refuse a snapshot that would leave fewer than :data:`DESCRIPTOR_RESERVE` (or an eighth of
    RLIMIT_NOFILE, whichever is more) of this process's file descriptors free: past that the
    next producer's ``open``, a reader's or the store's next segment would fail with EMFILE.

    Raises:
        SnapshotDescriptorsError: (EMFILE) with the counts and what to do.
    """
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: nothing to count against (os.dup still says EMFILE)
        return
    need = descriptors_needed(store)
    reserve = max(DESCRIPTOR_RESERVE, soft // 8)
    if used + need + reserve > soft:
        raise SnapshotDescriptorsError(
            f"a snapshot holds one file descriptor per store file: this one needs {need}, "
            f"{used} of the {soft} this process may open are in use, and {reserve} must stay "
            "free for producers, readers and new segments; drop a snapshot you no longer "
            "need (rmdir snapshots/NAME) or raise the limit (ulimit -n) and mount again"
        )


def freeze(store: MessageStore, name: str) -> Snapshot:
    """Freeze ``store`` (an open :class:`engine.store.MessageStore`) as snapshot ``name``.

    Holds the put lock for the time of a few ``dup`` calls and one copy of the live IndexFile's
    hash slots; everything else (sizes, mtimes, sums) is done after. Works on read-only stores
    (nothing is written anywhere).

    Raises:
        SnapshotError: the store is closed.
        UnsupportedLayoutError: a DLedger store (its entries would be served as a plain
            ``commitlog/``, which no reader could read), a store with RocksDB ConsumeQueues or
            BatchConsumeQueues (the snapshot would lack them).
        SnapshotDescriptorsError: (EMFILE) it would leave too few file descriptors free
            (:func:`check_descriptor_room`).
        OSError: from dup/pread.
    """
    _check_layout(store)
    check_descriptor_room(store)
    fds: list[int] = []

    def dup(fd: int) -> int:
        nfd = os.dup(fd)
        fds.append(nfd)
        return nfd

    files: list[FrozenFile] = []
    slot_copies: list[_SlotCopy] = []
    offsets_lock = store.consumer_offsets.lock
    held = False
    try:
        # Consumer offsets first, under their lock (held until the freeze is done, so no commit
        # lands in between): a commit in progress fsyncs, and waiting for it must not hold
        # the put lock, which would pause producers.
        offsets_lock.acquire()
        held = True
        config = _read_config(os.path.join(store.root, "config"))
        replica = _replica_files(store.root)
        with store.put_lock:
            locked_at = time.perf_counter_ns()
            if store.closed:
                raise SnapshotError("store is closed")
            # every file written so far gets its mtime now (writes through a mapping leave
            # it behind): the snapshot's mtimes are final, so a later snapshot shows a file
            # unchanged since with the same one (rsync's and restic's quick check)
            store.touch_written()
            now_ms = int(time.time() * 1000)
            cl = store.commitlog
            # SYNC_FLUSH puts waiting for their flush are not acknowledged yet: the snapshot
            # ends where dispatch stands (a follower's CommitLog end is its reput already).
            offset = store.flusher.dispatched_offset()
            if store.flusher.has_pending():
                last_ts = store.dispatched_store_timestamp
            else:
                last_ts = cl.last_store_timestamp or store.dispatched_store_timestamp
            segs = cl.files.dup_segments(dup)
            files += _segment_files("commitlog", segs, offset, cl.file_size)
            min_offset = cl.min_offset
            messages, queues = _freeze_queues(store, dup, files)
            index_ts = _freeze_index(store, dup, offset, files, slot_copies)
            # A controller-mode replica's confirmPhyOffset is the sync-state set's, not ours
            # (CommitLog.setConfirmOffset): kept as the broker left it.
            confirm = offset
            if any(n in CONTROLLER_TOP for n in replica):
                confirm = store.checkpoint.confirm_phy_offset
            cp = StoreCheckpoint(
                last_ts, last_ts, index_ts, store.checkpoint.master_flushed_offset, confirm
            )
            lock_ns = time.perf_counter_ns() - locked_at
        offsets_lock.release()
        held = False
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        if held:
            offsets_lock.release()
    # -- outside the lock ---------------------------------------------------------------------
    # Files served in part (and the checkpoint) show the whole second before the snapshot: a
    # store file written after the snapshot (the only way its content can differ from what
    # was served) has an mtime in a later second, so even a copy tool comparing whole seconds
    # without this manager's memory of earlier mtimes (another mount) sees it changed.
    partial_mtime = (now_ms // 1000 - 1) * NS
    cut_ts = _index_files(store, slot_copies, offset, partial_mtime, files)
    for n, (data, mtime) in config.items():
        files.append(_data_file(f"config/{n}", data, mtime))
    for n, (data, mtime) in replica.items():
        files.append(_data_file(n, data, mtime))
    if cut_ts is not None:  # indexMsgTimestamp: the newest IndexFile as cut
        cp = StoreCheckpoint(
            cp.physic_msg_timestamp,
            cp.logics_msg_timestamp,
            cut_ts,
            cp.master_flushed_offset,
            cp.confirm_phy_offset,
        )
    files.append(_data_file("checkpoint", cp.to_bytes(), partial_mtime))
    _identify(files, partial_mtime)
    snap = Snapshot(
        name,
        now_ms,
        offset,
        min_offset,
        messages,
        cp,
        {f.rel: f for f in sorted(files, key=lambda f: f.rel)},
        fds,
        store.root,
        queues,
    )
    snap.put_lock_ns = lock_ns  # how long puts waited at most (bench, logs)
    return snap


def _cut_index(
    store: MessageStore, fd: int, head: bytes, slots: bytes, native: bool, items_base: int, cut: int
) -> tuple[bytes, bytes, bool] | None:
    """An IndexFile as it was when the CommitLog ended at ``cut`` (the file's writer is ahead
    of the snapshot: a follower shows less than its writer has indexed), by the format's one
    cut (:func:`engine.format.indexfile.cut_index`), endTimestamp the last kept record's store
    time. Returns ``(header bytes, big-endian slot bytes, False)``, or None when no item is
    kept (every item names a record past the snapshot)."""

    def timestamp_of(off: int) -> int | None:
        rec = store.message_at(off)
        return rec.store_timestamp if rec is not None else None

    table = np.frombuffer(slots, dtype="=i4" if native else ">i4")
    done = cut_index(
        HEADER.unpack(head),
        table,
        lambda pos, n: os.pread(fd, n, pos),
        items_base,
        cut,
        timestamp_of,
    )
    if done is None or done.header[5] <= 1:
        return None
    return HEADER.pack(*done.header), done.slots.astype(">i4").tobytes(), False


class _CrcCache:
    """CRC32C of file prefixes ``[0, end)`` by ``(st_dev, st_ino)``, kept in a JSON file.

    Store files only grow below their frozen points (append-only regions), so the sum of a
    prefix summed once is extended by the new bytes only. A cached entry is used after the
    sum of its last 64 KiB is found unchanged (a file rewritten by ``recover`` or replaced is
    summed again).
    """

    def __init__(self, path: str | None):
        self.path = path
        self.entries: dict[str, list] = {}
        self.lock = threading.Lock()
        if path and os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    self.entries = json.loads(f.read())
            except (OSError, ValueError):
                self.entries = {}

    def prefix(self, ident: tuple[int, int], fd: int, end: int) -> int:
        key = f"{ident[0]}:{ident[1]}"
        with self.lock:
            ent = self.entries.get(key)
        crc, done = 0, 0
        if ent is not None:
            e0, c0, t0 = ent[1], ent[2], ent[3]
            lo = max(0, e0 - _TAIL_CHECK)
            if e0 <= end and (e0 == 0 or crc32c_fd(fd, lo, e0) == t0):
                crc, done = c0, e0
        crc = crc32c_fd(fd, done, end, crc)
        lo = max(0, end - _TAIL_CHECK)
        tail = crc32c_fd(fd, lo, end) if end else 0
        with self.lock:
            self.entries[key] = [None, end, crc, tail]
        return crc

    def save(self, paths: dict) -> None:
        """Keep entries of files named in ``paths`` (ident key -> path) and write the file."""
        with self.lock:
            for k, p in paths.items():
                if k in self.entries:
                    self.entries[k][0] = p
            keep = {
                k: v for k, v in self.entries.items() if v[0] is not None and os.path.exists(v[0])
            }
            self.entries = keep
            data = json.dumps(keep).encode()
        if not self.path:
            return
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.path, exc)


def file_checksum(
    f: FrozenFile, cache: _CrcCache, cancelled: Callable[[], bool] = lambda: False
) -> int:
    """CRC32C of a frozen file's bytes; zeros are never read (see :mod:`engine.format.crc`)."""
    crc, pos = 0, 0
    for s, e, fd, fo, data in f.extents:
        if cancelled():
            raise InterruptedError("snapshot dropped")
        if s > pos:
            crc = crc32c_zeros(crc, s - pos)
        if data is not None:
            crc = crc32c(_bytes_of(data), crc)
        elif s == 0 and fo == 0 and pos == 0 and isinstance(f.ident, tuple):
            crc = cache.prefix(f.ident, fd, e)
        else:
            crc = crc32c_fd(fd, fo, fo + e - s, crc)
        pos = e
    return crc32c_zeros(crc, f.size - pos)


class SnapshotManager:
    """The snapshots of one open store (what ``MNT/snapshots/`` shows).

    Args:
        store: the open MessageStore.
        cache_dir: where the sums of store files are cached across snapshots (and mounts);
            None: in memory only.

    Manifests are computed in a background thread right after :meth:`create` (one snapshot
    at a time, oldest first); :meth:`manifest` waits for it. Snapshots live as long as the
    manager (the mount): they hold file descriptors and copies in memory, which a remount
    cannot get back without having written them somewhere.

    mtimes: a file whose content is the same as in the previous snapshot keeps its mtime; a
    file whose content changed gets a new one at least one second later than before, so
    ``rsync -a`` (which compares whole seconds) copies exactly the files that changed. The
    memory of the previous mtimes is kept in ``cache_dir`` (``snapshot-mtimes.json``), so this
    holds across mounts that use the same ``--cache-dir``.
    """

    def __init__(self, store: MessageStore, cache_dir: str | None = None):
        self.store = store
        self.snapshots: dict[str, Snapshot] = {}
        self._lock = threading.Lock()
        # rel -> (digest of the content key, mtime_ns), kept in the cache dir across mounts
        self._mtimes_path = os.path.join(cache_dir, "snapshot-mtimes.json") if cache_dir else None
        self._mtimes: dict[str, list] = {}
        if self._mtimes_path and os.path.exists(self._mtimes_path):
            try:
                with open(self._mtimes_path, "rb") as f:
                    self._mtimes = json.loads(f.read())
            except (OSError, ValueError):
                self._mtimes = {}
        self._cache = _CrcCache(
            os.path.join(cache_dir, "snapshot-crc32c.json") if cache_dir else None
        )
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rmq-snapshot-sum")

    def names(self) -> list[str]:
        """The snapshots' names, sorted."""
        with self._lock:
            return sorted(self.snapshots)

    def get(self, name: str) -> Snapshot | None:
        """The snapshot ``name``, or None."""
        with self._lock:
            return self.snapshots.get(name)

    def create(self, name: str) -> Snapshot:
        """Freeze the store as ``name`` and start summing its files.

        Raises InvalidNameError, SnapshotExistsError, SnapshotError, UnsupportedLayoutError
        (EOPNOTSUPP: a store in object storage is a snapshot already, its files are under
        ``raw/``), OSError.
        """
        validate_snapshot_name(name)
        if not self.store.source.local:
            raise UnsupportedLayoutError(
                "this store is a snapshot in object storage already: it never changes, and its "
                "files are under raw/ (copy them from there, or snapshot-download it)"
            )
        with self._lock:
            if name in self.snapshots:
                raise SnapshotExistsError(f"snapshot {name} exists")
            snap = freeze(self.store, name)
            mtimes = {}
            for rel, f in snap.files.items():
                digest = hashlib.blake2b(repr(f.key).encode(), digest_size=16).hexdigest()
                prev = self._mtimes.get(rel)
                mt = f.candidate_mtime_ns
                if prev is not None:
                    if prev[0] == digest:
                        mt = prev[1]
                    else:
                        mt = max(mt, (prev[1] // NS + 1) * NS)
                f.mtime_ns = mt
                mtimes[rel] = [digest, mt]
            self._mtimes = mtimes
            self.snapshots[name] = snap
        log.info(
            "snapshot %s: CommitLog offset %d, %d messages, %d files; put lock held %.2f ms",
            name,
            snap.commitlog_offset,
            snap.message_count,
            len(snap.files),
            snap.put_lock_ns / 1e6,
        )
        snap.acquire()
        snap.manifest_future = self._pool.submit(self._compute, snap)
        return snap

    def _compute(self, snap: Snapshot) -> bytes:
        try:
            out = {}
            paths = {}
            for rel, f in snap.files.items():
                out[rel] = {
                    "size": f.size,
                    "stored": f.stored,
                    "crc32c": f"{file_checksum(f, self._cache, lambda: snap.cancelled):08x}",
                }
                if isinstance(f.ident, tuple):
                    paths[f"{f.ident[0]}:{f.ident[1]}"] = os.path.join(snap.store_root, rel)
            self._cache.save(paths)
            self._save_mtimes()
            doc = snap.manifest_head()
            # the broker's name as status.json shows it (--broker-name, broker.conf via
            # --config, brokerIdentity, else the host name) and where it came from: what the
            # rocketmq data source names this snapshot's rows by
            doc["brokerName"] = self.store.config.broker_name
            doc["brokerNameFrom"] = self.store.config.broker_name_source()
            doc["files"] = out
            return (json.dumps(doc, indent=1) + "\n").encode()
        finally:
            snap.release()

    def _save_mtimes(self) -> None:
        if not self._mtimes_path:
            return
        with self._lock:
            data = json.dumps(self._mtimes).encode()
        tmp = self._mtimes_path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self._mtimes_path)
        except OSError as exc:
            log.warning("cannot write %s: %s", self._mtimes_path, exc)

    def manifest(self, snap: Snapshot, timeout: float | None = None) -> bytes:
        """The ``SNAPSHOT.json`` bytes (waits for the sums). Raises InterruptedError when the
        snapshot was dropped meanwhile, OSError from the disk."""
        assert snap.manifest_future is not None, "manifest asked of an unfrozen snapshot"
        return snap.manifest_future.result(timeout)

    def drop(self, name: str) -> None:
        """``rmdir``: forget the snapshot; its files close once no reader holds them.
        Raises NoSuchSnapshotError."""
        with self._lock:
            snap = self.snapshots.pop(name, None)
        if snap is None:
            raise NoSuchSnapshotError(f"no snapshot {name}")
        snap.cancelled = True
        snap.release()

    def close(self) -> None:
        """Drop every snapshot (at unmount)."""
        for name in self.names():
            try:
                self.drop(name)
            except NoSuchSnapshotError:
                pass
        self._pool.shutdown(wait=True)


def stored_size(entry: FileEntry | dict) -> int:
    """Bytes of a manifest file entry that hold data: its ``stored`` (``[stored, size)`` is
    zeros; an object-storage copy holds only ``[0, stored)``), or its ``size`` for a manifest
    written before rmqfs recorded ``stored`` (the whole file). ``entry``: a
    :class:`engine.live.manifest.FileEntry` (what :func:`parse_manifest` gives), or a dict of
    its JSON."""
    if isinstance(entry, FileEntry):
        return entry.stored
    stored = entry.get("stored")
    return int(entry["size"]) if stored is None else int(stored)


#: Batches being checked at once per worker thread (the rest wait as names, not as futures).
_WINDOW = 4
#: Files a batch holds at most (fewer when they add up to CHUNK bytes).
_BATCH = 256


def verify_copy(
    directory: str,
    workers: int | None = None,
    progress: workprogress.ProgressFactory | None = None,
    filesystem: Any = None,
) -> tuple[Manifest, list[tuple[str, str]]]:
    """Check a copy of a snapshot against its ``SNAPSHOT.json``.

    Every file the manifest names must exist with its size and CRC32C; files are summed in
    ``workers`` threads (default: one per CPU; 4 for a remote location), local holes without
    reading. ``progress`` is a progress factory (:mod:`engine.service.workprogress`): one bar
    ("verify", bytes of the manifest's files) updated as each file is done.

    ``filesystem``: a ``pyarrow.fs.FileSystem`` and ``directory`` a path in it (what
    :func:`engine.live.location.open_location` returns for ``s3://...``, ``gs://...``); None
    or a ``LocalFileSystem``: ``directory`` is a local directory, read through file
    descriptors (holes skipped with ``SEEK_DATA``). A remote file is read in
    :data:`engine.format.crc.CHUNK` pieces, one stream per thread; its object holds at least
    the entry's ``stored`` prefix (:func:`stored_size`: what ``snapshot-upload`` sends) and at
    most the whole ``size`` (a copy by another tool), and what it lacks of ``size`` is summed
    as zeros, never read. The bar counts bytes read.

    Returns:
        ``(manifest, problems)``: problems is a list of ``(rel, what)``, ``what`` one of
        ``missing``, ``short: N of M bytes``, ``longer: ...``, ``damaged: crc32c X, expected Y``,
        ``unreadable: ...``, and ``extra`` for files the manifest does not name (not an error
        of the copy, reported so that a leftover ``abort`` or ``lock`` is seen).

    Memory: the manifest as :func:`engine.live.manifest.parse_manifest` holds it (about 150
    bytes a file) and a window of files in flight; the local copy's tree is walked without
    recursion, at most :data:`engine.service.storetree.MAX_STORE_DEPTH` deep (a deeper
    directory is reported ``extra: ...``, not entered).

    Raises:
        FileNotFoundError: no SNAPSHOT.json in ``directory``.
        ManifestError: SNAPSHOT.json is not a manifest (:func:`parse_manifest`), naming the
            field; a ValueError too.
        ObjectStoreError: a remote manifest cannot be read (server unreachable, refused).
    """
    from . import location

    remote = filesystem is not None and not location.is_local(filesystem)
    if remote:
        path = location.join(directory, MANIFEST_NAME)
        data = location.read_small(filesystem, path, MAX_MANIFEST, directory)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        doc = parse_manifest(data)
    else:
        doc = read_manifest_file(os.path.join(directory, MANIFEST_NAME))[0]
    files = doc.files
    problems: list[tuple[str, str]] = []

    check: Callable[[str, FileEntry], tuple[str, str | None, int]] = (
        functools.partial(_check_remote_file, filesystem, directory)
        if remote
        else functools.partial(_check_local_file, directory)
    )
    workers = workers or (location.DEFAULT_WORKERS if remote else os.cpu_count() or 1)
    # Big files first, so the threads finish together; a window of futures, not one a file.
    total = files.total_stored() if remote else files.total_size()
    done = workprogress.bar(progress, total, "verify")
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pending: deque[Future] = deque()

            def collect(fut: Future) -> None:
                for _rel, what, n in fut.result():
                    if what:
                        problems.append((_rel, what))
                    done.update(n)

            def check_all(batch: list) -> list:
                return [check(rel, want) for rel, want in batch]

            batch: list[tuple[str, FileEntry]] = []
            weight = 0
            for rel, want in files.by_weight(stored=remote):
                # small files go in batches: a future each would cost more than the file
                batch.append((rel, want))
                weight += want.stored if remote else want.size
                if len(batch) < _BATCH and weight < CHUNK:
                    continue
                pending.append(pool.submit(check_all, batch))
                batch, weight = [], 0
                while len(pending) >= workers * _WINDOW or (pending and pending[0].done()):
                    collect(pending.popleft())
            if batch:
                pending.append(pool.submit(check_all, batch))
            while pending:
                collect(pending.popleft())
    finally:
        done.close()
    problems += _extra_files(directory, filesystem if remote else None, files)
    problems.sort()
    return doc, problems


def _check_local_file(directory: str, rel: str, want: FileEntry) -> tuple[str, str | None, int]:
    """``(rel, problem or None, bytes done)`` of the local copy's file ``rel``
    (:func:`verify_copy`): its size and CRC32C against ``want``."""
    path = os.path.join(directory, *rel.split("/"))
    size = want.size
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return rel, "missing", 0
    except OSError as exc:
        return rel, f"unreadable: {exc.strerror}", 0
    try:
        st = os.fstat(fd)
        if st.st_size < size:
            return rel, f"short: {st.st_size} of {size} bytes", st.st_size
        if st.st_size > size:
            return rel, f"longer: {st.st_size} bytes, expected {size}", size
        try:
            crc = crc32c_fd(fd, 0, size)
        except EOFError as exc:
            return rel, f"short: {exc}", size
        problem = want.crc_problem(crc, size)
        return rel, None if problem is None else f"damaged: {problem}", size
    except OSError as exc:
        return rel, f"unreadable: {exc.strerror}", 0
    finally:
        os.close(fd)


def _check_remote_file(
    filesystem: pafs.FileSystem, directory: str, rel: str, want: FileEntry
) -> tuple[str, str | None, int]:
    """``(rel, problem or None, bytes read)`` of the object of ``rel`` under ``directory`` in
    ``filesystem`` (:func:`verify_copy`). An object holds the file's stored prefix (rmqfs
    snapshot-upload) or, copied by another tool, more of it up to the whole file: what it lacks
    of size is zeros."""
    from . import location

    size, stored = want.size, want.stored
    try:
        n, crc = location.sum_object(filesystem, location.join(directory, rel), size + 1)
    except FileNotFoundError:
        return rel, "missing", 0
    except OSError as exc:
        return rel, f"unreadable: {exc}", 0
    if n < stored:
        return rel, f"short: {n} of {stored} bytes", n
    if n > size:
        return rel, f"longer: more than {size} bytes", size
    problem = want.crc_problem(crc, n)
    return rel, None if problem is None else f"damaged: {problem}", n


def _extra_files(
    directory: str, filesystem: pafs.FileSystem | None, files: ManifestFiles
) -> list[tuple[str, str]]:
    """The ``(rel, "extra...")`` problems of :func:`verify_copy`: files of the copy that the
    manifest does not name; ``filesystem`` None: a local directory, walked at most
    :data:`engine.service.storetree.MAX_STORE_DEPTH` deep (a deeper directory is reported)."""
    from . import location

    problems: list[tuple[str, str]] = []
    if filesystem is not None:
        for rel in location.list_files(filesystem, directory, directory):
            if rel != MANIFEST_NAME and rel not in files:
                problems.append((rel, "extra"))
        return problems
    for root, dirs, names, depth in walk_tree(directory):
        here = os.path.relpath(root, directory).replace(os.sep, "/")
        for name in names:
            rel = name if here == "." else f"{here}/{name}"
            if rel != MANIFEST_NAME and rel not in files:
                problems.append((rel, "extra"))
        if depth >= MAX_STORE_DEPTH:
            for name in dirs:
                rel = name if here == "." else f"{here}/{name}"
                problems.append(
                    (rel, f"extra: a directory nested deeper than {MAX_STORE_DEPTH} levels")
                )
    return problems
