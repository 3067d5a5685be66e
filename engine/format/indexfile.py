"""IndexFile: the message-key hash index's file format under ``index/`` (the service over the
files, ``IndexService``, is :mod:`engine.service.indexservice`).

One IndexFile is a fixed-size hash table with chained buckets, big-endian (docs/format.md,
RocketMQ ``IndexHeader``, ``IndexFile`` and ``IndexService`` in ``store/.../index/``)::

    file size = 40 + hashSlotNum*4 + indexNum*20      (defaults 5,000,000 / 20,000,000:
                                                        420,000,040 bytes)
    header, 40 bytes (IndexHeader)
        off  size  field
        0    8     beginTimestamp   store time (epoch ms) of the first item
        8    8     endTimestamp     store time of the newest item
        16   8     beginPhyOffset   CommitLog offset of the first item
        24   8     endPhyOffset     CommitLog offset of the newest item
        32   4     hashSlotCount    number of slots in use
        36   4     indexCount       next item number; starts at 1 (item 0 is never used)
    hashSlotNum slots of 4 bytes at 40 + slot*4
        int32 number of the newest item of the bucket; 0 = empty
    indexNum items of 20 bytes at 40 + hashSlotNum*4 + n*20, n = 1 .. indexCount-1
        off  size  field
        0    4     keyHash          abs(Java String.hashCode of "topic#key"), MIN_VALUE -> 0
        4    8     phyOffset        CommitLog offset of the message
        12   4     timeDiff         (storeTimestamp - beginTimestamp) / 1000, in seconds
        16   4     prevIndex        previous item of the same bucket (0 ends the chain)

``slot = keyHash % hashSlotNum``. A file holds ``indexNum - 1`` keys; it is full once
``indexCount >= indexNum`` and the next key goes to a new file, named by the local time of its
creation ``yyyyMMddHHmmssSSS`` (``UtilAll.timeMillisToHumanString``). Hash collisions are not
resolved here: a query returns every offset stored under the same 32-bit hash, and the caller
reads the messages back and compares the real keys (``DefaultMessageStore.queryMessage``).

Files are created at full length as sparse files (``ftruncate``), read with ``os.pread`` and
written through a shared writable mapping (RocketMQ's ``MappedByteBuffer``; no system call per
key) whose blocks are allocated first (``posix_fallocate``, 64 KiB at a time under each write:
the header's, a written slot's, the items' ahead of the writes), so a full disk gives
``OSError(ENOSPC)``, never a SIGBUS; where the file cannot be mapped or allocated it is written
with ``os.pwrite`` (:class:`_FdIO`). Writers
write an item before the slot that points at it, so a concurrent reader never follows a slot to
a half-written item. The store's put path writes keys in batches (:meth:`IndexFile.put_hashed`):
through the mapping by the compiled writer (each chain head read from the file's own slot, each
item before its slot, the header last), or, without it or a mapping, by Python's step: every
item of the batch with one pwrite, then each changed slot, then the header, with the slot
values taken from an in-memory copy of the slot table (``hashSlotNum * 4`` bytes, loaded on the
first such batch) instead of one pread per key.
"""

from __future__ import annotations

import datetime
import mmap
import os
import re
import struct
import sys
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ..errors import CorruptRecordError, ReadOnlyStoreError
from .javahash import combine_u32, index_key_hash, java_hash_u32, key_hash_of_u32, utf16_len
from .mappedfile import MAPPED_WRITE_MAX, create_preallocated, no_readahead
from .source import LOCAL, StoreSource

if TYPE_CHECKING:
    import numpy as np

HEADER = struct.Struct(">qqqqii")  # begin/endTimestamp, begin/endPhyOffset, slot and item counts
#: IndexHeader's field names, in HEADER's order
HEADER_NAMES = (
    "beginTimestamp",
    "endTimestamp",
    "beginPhyOffset",
    "endPhyOffset",
    "hashSlotCount",
    "indexCount",
)
SLOT = struct.Struct(">i")
ITEM = struct.Struct(">iqii")  # keyHash | phyOffset | timeDiff | prevIndex
INDEX_HEADER_SIZE = HEADER.size  # 40
HASH_SLOT_SIZE = SLOT.size  # 4
INDEX_SIZE = ITEM.size  # 20
INVALID_INDEX = 0
DEFAULT_HASH_SLOT_NUM = 5_000_000  # maxHashSlotNum
DEFAULT_INDEX_NUM = 5_000_000 * 4  # maxIndexNum
MAX_MSGS_NUM_BATCH = 64  # maxMsgsNumBatch: the cap on one query
LONG_MAX = 2**63 - 1
_WALK_BLOCK = 4096  # bytes of items a chain walk reads at once
_INT_MAX = 2**31 - 1
#: Entries up to which :meth:`IndexFile.put_hashed` writes each item and slot directly (a
#: single put's UNIQ_KEY and keys) instead of building the batch's writes
_FEW_ENTRIES = 4
#: Changed hash slots closer than this go out in one pwrite with the unchanged slots between
#: them (from the in-memory table, so the same bytes the file holds): the slots of a batch's
#: UNIQ_KEYs, whose hashes differ by a few units, take one or two writes instead of dozens.
_SLOT_GAP = 1024
#: Chunks (:attr:`_MapIO.CHUNK`) of items allocated at once ahead of in-place writes (256 KiB:
#: an IndexFile's items grow in order; its slots, spread over the table, a chunk at a time)
_ITEM_CHUNKS_AHEAD = 4
#: An IndexFile name: its creation time as yyyyMMddHHmmssSSS (UtilAll.timeMillisToHumanString).
INDEX_FILE_NAME = re.compile(r"[0-9]{17}\Z")
_TRUNCATE_CHUNK = 65536  # items read at once when undoing items
_ITEMS_STRUCTS: dict[int, struct.Struct] = {}  # n -> Struct(">" + "iqii" * n)


def _items_struct(n: int) -> struct.Struct:
    """A Struct packing ``n`` items at once (cached for the usual batch sizes)."""
    st = _ITEMS_STRUCTS.get(n)
    if st is None:
        st = struct.Struct(">" + "iqii" * n)
        if len(_ITEMS_STRUCTS) < 1024:
            _ITEMS_STRUCTS[n] = st
    return st


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an IndexFile: ``40 + hashSlotNum*4 + indexNum*20``."""
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def index_geometry(
    file_size: int,
    hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
    index_num: int = DEFAULT_INDEX_NUM,
    path: str = "",
) -> tuple[int, int]:
    """``(hashSlotNum, indexNum)`` of an existing IndexFile of ``file_size`` bytes.

    The configured values win when they give exactly this size; otherwise the store's fixed
    ratio ``indexNum = 4 * hashSlotNum`` is assumed (``size - 40 = 84 * hashSlotNum``, true for
    the defaults and for 32/128 test stores). RocketMQ itself always maps the configured size.

    Raises:
        CorruptRecordError: the size fits neither, or is over 2**31 - 1 bytes (RocketMQ's
            ``IndexFile`` maps an int's size: its counts could not be held).
    """
    if file_size > _INT_MAX:  # (RocketMQ maps an IndexFile of an int's size; counts are ints)
        raise CorruptRecordError(
            f"{path or 'index file'}: size {file_size} is larger than an IndexFile can be "
            f"({_INT_MAX} bytes)"
        )
    if file_size == index_file_size(hash_slot_num, index_num):
        return hash_slot_num, index_num
    body = file_size - INDEX_HEADER_SIZE
    if body > 0 and body % (HASH_SLOT_SIZE + 4 * INDEX_SIZE) == 0:
        slots = body // (HASH_SLOT_SIZE + 4 * INDEX_SIZE)
        return slots, 4 * slots
    raise CorruptRecordError(
        f"{path or 'index file'}: size {file_size} fits neither hashSlotNum={hash_slot_num}/"
        f"indexNum={index_num} nor indexNum = 4*hashSlotNum"
    )


def index_file_name(millis: int | None = None) -> str:
    """``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` in local time (17 digits)."""
    if millis is None:
        millis = time.time_ns() // 1_000_000
    return time.strftime("%Y%m%d%H%M%S", time.localtime(millis // 1000)) + f"{millis % 1000:03d}"


def name_after(name: str) -> str:
    """The 17-digit name one millisecond after ``name`` (wall-clock arithmetic, no time zone)."""
    dt = datetime.datetime.strptime(name, "%Y%m%d%H%M%S%f") + datetime.timedelta(milliseconds=1)
    return dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"


class _Reader(Protocol):
    """What a walk reads an IndexFile with (``_FdIO``, ``_MemIO`` or their readers)."""

    def read(self, offset: int, length: int) -> bytes: ...


class _FdIO:
    """Positional I/O on a file descriptor (thread-safe: pread/pwrite keep no file position)."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path: str):
        self.fd = fd
        self.path = path

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise CorruptRecordError(f"{self.path}: short read of {length} bytes", offset)
        return data

    def read_mapping(self, start: int, end: int) -> tuple[mmap.mmap, int] | None:
        """A read-only mapping of the file's bytes ``[start, end)`` and where ``start`` lies
        in it (the mapping starts at a page), or None where the caller must read instead:
        the range is empty, past the file's end, or holds a hole. A hole read through a
        mapping takes a page of tmpfs (shmem allocates on a fault, not on ``pread``): on a
        full tmpfs that read is a SIGBUS, and a sparse file would grow by what it never held.
        The caller closes the mapping."""
        try:
            if end <= start or os.fstat(self.fd).st_size < end:
                return None
            if os.lseek(self.fd, start, os.SEEK_HOLE) < end:
                return None  # (the end of the file counts as a hole: past end here)
            base = start - start % mmap.ALLOCATIONGRANULARITY
            mm = mmap.mmap(
                self.fd, end - base, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=base
            )
            return mm, start - base
        except (OSError, ValueError):
            return None

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        n = os.pwrite(self.fd, data, offset)  # all of it, but for a short write
        if n == len(data):
            return
        view = memoryview(data)[n:]
        offset += n
        while view:
            n = os.pwrite(self.fd, view, offset)
            view = view[n:]
            offset += n

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        """Close the descriptor, once: a second call does nothing (a file destroyed by a
        load that then failed is closed again by the store's cleanup; its number may be
        another file's by then)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def reader(self) -> _FdIO:
        """An independent reader of the same file (a duplicated descriptor): a walk through
        it needs no lock, since closing or deleting the file meanwhile does not affect it.
        The caller closes it."""
        return _FdIO(os.dup(self.fd), self.path)


class _MapIO(_FdIO):
    """:class:`_FdIO` writing through a shared writable mapping of the file (writes under
    :data:`MAPPED_WRITE_MAX` bytes; larger ones with ``pwrite``), made at the first write (an
    open that writes nothing changes nothing). A mapped write first allocates the
    :data:`CHUNK` bytes under it that it has not allocated yet (``posix_fallocate``, once a
    chunk: a bitmap), so a store into the mapping never meets a hole (a full disk is ENOSPC
    before anything is written, never a SIGBUS), and the file holds only the chunks written
    to: an IndexFile's slots are spread over its 20 MB slot table, and ``du`` counts the
    chunks written to (:data:`CHUNK`), not the whole table. Where the file cannot be mapped
    (no address space) it is written with ``pwrite``, each write reporting its error, as
    :class:`_FdIO` does."""

    __slots__ = ("mm", "chunks", "failed", "size")

    #: bytes allocated at once under a mapped write: 64 KiB (16 pages), not a page, as a
    #: ``pwrite`` of a slot would: keys that hash near each other (a producer's UNIQ_KEYs, keys
    #: that differ in their last characters) touch neighbouring pages, and a ``fallocate`` a
    #: page made batches of 256 keyed puts 8% slower once faults bring in a page alone
    #: (``mappedfile.no_readahead``); a slot's run of the table is allocated once, then
    #: written in place
    CHUNK = 1 << 16

    def __init__(self, fd: int, path: str, size: int):
        super().__init__(fd, path)
        self.mm: mmap.mmap | None = None
        self.chunks = bytearray(-(-size // self.CHUNK))  # 1: allocated by this object
        self.failed = False  # mapping failed: pwrite from now on
        self.size = size

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        mm = self.mm
        if n >= MAPPED_WRITE_MAX or (mm is None and (mm := self._map()) is None):
            super().write(offset, data)  # a batch's items: the kernel's copy costs less
            return
        end = offset + n
        chunks, step = self.chunks, self.CHUNK
        for c in range(offset // step, (end - 1) // step + 1):
            if not chunks[c]:
                self.allocate(c)
        mm[offset:end] = data

    def allocate(self, chunk: int, count: int = 1) -> None:
        """Allocate chunks ``chunk .. chunk + count - 1`` of the file (those past its end
        left out) with one ``posix_fallocate`` (ENOSPC as OSError, nothing noted then) and
        note them in :attr:`chunks`."""
        step = self.CHUNK
        count = max(1, min(count, len(self.chunks) - chunk))
        os.posix_fallocate(self.fd, chunk * step, min(count * step, self.size - chunk * step))
        self.chunks[chunk : chunk + count] = bytes([1]) * count

    def mapping(self) -> mmap.mmap | None:
        """The writable mapping of the whole file (made now if not yet), None where the file
        cannot be mapped."""
        return self.mm if self.mm is not None else self._map()

    def _map(self) -> mmap.mmap | None:
        if self.failed:
            return None
        try:
            # (the slots are written where keys hash: scattered)
            self.mm = no_readahead(mmap.mmap(self.fd, self.size))
        except (OSError, ValueError):
            self.failed = True
            return None
        return self.mm

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        super().close()

    def unmapped(self) -> _FdIO:
        """The same file with ``pwrite`` writes, this mapping closed (a full file)."""
        if self.mm is not None:
            self.mm.close()
        return _FdIO(self.fd, self.path)


class _SourceIO:
    """Reads of a file of a source that is not local (object storage: by range, through its
    block cache); never written."""

    __slots__ = ("source", "path")

    def __init__(self, source: StoreSource, path: str):
        self.source = source
        self.path = path

    def read(self, offset: int, length: int) -> bytes:
        data = self.source.pread(self.path, length, offset)
        if len(data) != length:
            raise CorruptRecordError(f"{self.path}: short read of {length} bytes", offset)
        return data

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        raise OSError(30, "read-only source", self.path)

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass

    def reader(self) -> _SourceIO:
        """Itself: reads keep no state."""
        return self


class _MemIO:
    """An anonymous mapping standing in for a file (read-only stores): zero pages cost nothing.
    Written in place like :class:`_MapIO` (:meth:`IndexFile.put_hashed`'s ``in_place``): every
    chunk counts as allocated, since a store into an anonymous mapping never meets a hole."""

    __slots__ = ("mm", "chunks")

    CHUNK = _MapIO.CHUNK

    def __init__(self, size: int):
        self.mm = mmap.mmap(-1, size)
        self.chunks = bytearray([1]) * -(-size // self.CHUNK)

    def mapping(self) -> mmap.mmap:
        """The mapping (what :class:`_MapIO` maps its file to)."""
        return self.mm

    def allocate(self, chunk: int, count: int = 1) -> None:
        """Nothing to allocate (every chunk is noted allocated)."""

    def read(self, offset: int, length: int) -> bytes:
        return self.mm[offset : offset + length]

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self.mm[offset : offset + len(data)] = data

    def sync(self) -> None:
        pass

    def close(self) -> None:
        self.mm.close()

    def reader(self) -> _MemReader:
        """A reader of the same mapping that leaves it open when closed (reads of a mapping
        closed meanwhile raise ValueError, which ends a walk)."""
        return _MemReader(self.mm)


class _MemReader:
    __slots__ = ("mm",)

    def __init__(self, mm: mmap.mmap):
        self.mm = mm

    def read(self, offset: int, length: int) -> bytes:
        return self.mm[offset : offset + length]

    def close(self) -> None:
        pass


class IndexFile:
    """One IndexFile (``IndexFile`` + ``IndexHeader``), opened or created.

    Args:
        path: the file. An existing file is opened and its header loaded (``indexCount <= 0``
            reads as 1, ``IndexHeader.load``); a missing one is created at full length (sparse).
            ``None`` makes an in-memory file (anonymous mapping) that is never written to disk.
        hash_slot_num, index_num: geometry of a new file; for an existing file they are used
            when they fit its size, else see :func:`index_geometry`.
        end_phy_offset, end_timestamp: for a new file, the previous file's endPhyOffset and
            endTimestamp (bytes, epoch ms); when > 0 they become begin and end of the header
            (``IndexFile(fileName, ..., endPhyOffset, endTimestamp)``).
        read_only: open the file read-only; :meth:`put_key` then raises ReadOnlyStoreError.

    Header fields are plain attributes (``begin_timestamp``, ``end_timestamp``,
    ``begin_phy_offset``, ``end_phy_offset``, ``hash_slot_count``, ``index_count``) that callers
    must not assign. Writes (:meth:`put_key`, :meth:`truncate`) must come from one thread at a
    time; :meth:`select_phy_offsets` may run concurrently with :meth:`put_key`.

    Raises:
        CorruptRecordError: an existing file whose size fits no geometry.
        FileNotFoundError: ``read_only`` and no such file.
        OSError: from the disk (ENOSPC, EACCES, ...).
    """

    # the header's fields (HEADER), set by _set_header
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def __init__(
        self,
        path: str | None,
        hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
        index_num: int = DEFAULT_INDEX_NUM,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        read_only: bool = False,
        source: StoreSource = LOCAL,
    ):
        self.path = path
        self.name = os.path.basename(path) if path else "<memory>"
        self.read_only = read_only and path is not None
        self._dirty = False
        self._unstamped = False
        created = False
        if path is None:
            check_geometry(hash_slot_num, index_num)
            self.hash_slot_num, self.index_num = hash_slot_num, index_num
            self.size = index_file_size(hash_slot_num, index_num)
            self._io: _MemIO | _FdIO | _SourceIO = _MemIO(self.size)
            created = True
        elif not source.local:  # object storage: read by range
            self.size = source.file_size(path)
            self.hash_slot_num, self.index_num = index_geometry(
                self.size, hash_slot_num, index_num, path
            )
            self._io = _SourceIO(source, path)
            self._set_header(HEADER.unpack(self._io.read(0, INDEX_HEADER_SIZE)))
            if self.index_count <= 0:
                self.index_count = 1
        elif read_only or os.path.exists(path):
            fd = os.open(path, (os.O_RDONLY if read_only else os.O_RDWR) | os.O_NOFOLLOW)
            try:
                self.size = os.fstat(fd).st_size
                self.hash_slot_num, self.index_num = index_geometry(
                    self.size, hash_slot_num, index_num, path
                )
                head = os.pread(fd, INDEX_HEADER_SIZE, 0)
            except BaseException:
                os.close(fd)
                raise
            self._set_header(HEADER.unpack(head))
            if self.index_count <= 0:
                self.index_count = 1
            items_end = self._items_base_of() + self.index_count * INDEX_SIZE
            if read_only or self.index_count >= self.index_num or items_end > self.size:
                self._io = _FdIO(fd, path)
            else:
                self._io = _MapIO(fd, path, self.size)
        else:
            check_geometry(hash_slot_num, index_num)
            self.hash_slot_num, self.index_num = hash_slot_num, index_num
            self.size = index_file_size(hash_slot_num, index_num)
            fd = create_preallocated(path, self.size, exclusive=True)
            self._io = _MapIO(fd, path, self.size)
            created = True
        if created:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count, self.index_count = 0, 1
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
            if end_phy_offset > 0 or end_timestamp > 0:
                # The Java setters write these fields through; the counts stay 0 on disk until
                # the first put.
                try:
                    self._io.write(
                        0,
                        HEADER.pack(
                            self.begin_timestamp,
                            self.end_timestamp,
                            self.begin_phy_offset,
                            self.end_phy_offset,
                            0,
                            0,
                        )[:32],
                    )
                except OSError:
                    self.destroy()
                    raise
                self._dirty = True
                self._unstamped = True  # (written since the mtime was set: touch)
        self._items_base = self._items_base_of()
        # A file another process writes (a follower's): chains are walked up to the file's
        # capacity rather than the header's indexCount read earlier (see reload_header).
        self.live = False
        # The hash slots as native ints, loaded by the first put of Python's steps
        # (hashSlotNum * 4 bytes, 20 MB for the default geometry), kept equal to the file by
        # those steps and put_key, dropped by the mapped writer (which reads the file's own)
        # and by truncate.
        self._slots: array | None = None
        # made here: its slots are all 0 until its first item (a slot is written only with
        # an item, or put back as it was), so they need not be read
        self._created = created

    def _items_base_of(self) -> int:
        """Where item 0 would start: after the header and the slot table."""
        return INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE

    # -- header -------------------------------------------------------------------------------
    @property
    def in_memory(self) -> bool:
        """True for a file that lives only in memory (``path`` is None)."""
        return self.path is None

    @property
    def is_write_full(self) -> bool:
        """``isWriteFull``: ``indexCount >= indexNum``."""
        return self.index_count >= self.index_num

    def header_fields(self) -> tuple[int, int, int, int, int, int]:
        """The six :data:`HEADER` fields, in file order (beginTimestamp, endTimestamp,
        beginPhyOffset, endPhyOffset, hashSlotCount, indexCount)."""
        return (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def _set_header(self, fields: Sequence[int]) -> None:
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = fields

    def header(self) -> dict:
        """The header as a dict keyed by RocketMQ's field names (beginTimestamp, ...)."""
        return dict(zip(HEADER_NAMES, self.header_fields(), strict=True))

    def is_time_matched(self, begin: int, end: int) -> bool:
        """``isTimeMatched``: whether ``[begin, end]`` (epoch ms) overlaps the file's time span."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    # -- write --------------------------------------------------------------------------------
    @property
    def fd(self) -> int | None:
        """The file's descriptor; None for an in-memory file (a read-only store's)."""
        return self._io.fd if isinstance(self._io, _FdIO) else None

    def freeze_slots(self) -> bytes | None:
        """A copy of the slot table this writer keeps in memory (native byte order), None
        when there is none (read-only, written through its mapping, where the file's own
        slots are the chain heads, or not loaded): then the file's slots are current.
        Caller holds the :class:`IndexService`'s lock (:meth:`IndexService.frozen`)."""
        if self._slots is None or self.read_only:
            return None
        return self._slots.tobytes()

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` (the full ``topic#key`` string) for the message at ``phy_offset``.

        Exactly ``IndexFile.putKey``: the item's ``timeDiff`` is ``(store_timestamp -
        beginTimestamp) // 1000`` seconds, 0 when beginTimestamp <= 0, clamped to [0, 2^31-1];
        a slot value <= 0 or > indexCount counts as empty; for the first item beginPhyOffset and
        beginTimestamp are set *after* its timeDiff was computed; hashSlotCount grows when the
        slot was empty. ``phy_offset`` in bytes, ``store_timestamp`` in epoch ms.

        Returns:
            False when the file is full (``indexCount >= indexNum``), True otherwise.

        Raises:
            ReadOnlyStoreError: the file was opened read-only.
            OSError: from the disk (RocketMQ logs and returns false); the header is unchanged.
        """
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.path}: index file opened read-only")
        count = self.index_count
        if count >= self.index_num:
            return False
        key_hash = index_key_hash(key)
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        old_slot = self._io.read(slot_pos, HASH_SLOT_SIZE)
        slot_value = SLOT.unpack(old_slot)[0]
        if slot_value <= INVALID_INDEX or slot_value > count:
            slot_value = INVALID_INDEX
        begin_ts = self.begin_timestamp
        if begin_ts <= 0:
            time_diff = 0
        else:
            delta = store_timestamp - begin_ts
            time_diff = delta // 1000 if delta >= 0 else 0  # Java truncates; < 0 clamps to 0
            if time_diff > _INT_MAX:
                time_diff = _INT_MAX
        item = ITEM.pack(key_hash, phy_offset, time_diff, slot_value)
        if count <= 1:
            begin_phy, begin_ts = phy_offset, store_timestamp
        else:
            begin_phy = self.begin_phy_offset
        slot_count = self.hash_slot_count + (slot_value == INVALID_INDEX)
        header = HEADER.pack(
            begin_ts, store_timestamp, begin_phy, phy_offset, slot_count, count + 1
        )
        self._io.write(self._items_base + count * INDEX_SIZE, item)
        self._created = False  # its slots are read from now on (this write may be left behind)
        self._io.write(slot_pos, SLOT.pack(count))
        try:
            self._io.write(0, header)
        except OSError:
            try:  # keep the bucket's chain intact: the slot must not name an unwritten item
                self._io.write(slot_pos, old_slot)
            except OSError:
                pass
            raise
        self._dirty = True
        self._unstamped = True  # (written since the mtime was set: touch)
        if self._slots is not None:
            self._slots[(slot_pos - INDEX_HEADER_SIZE) // HASH_SLOT_SIZE] = count
        self.begin_timestamp, self.begin_phy_offset = begin_ts, begin_phy
        self.end_timestamp, self.end_phy_offset = store_timestamp, phy_offset
        self.hash_slot_count = slot_count
        self.index_count = count + 1
        return True

    def _slot_table(self) -> array:
        slots = self._slots
        if slots is None:
            size = self.hash_slot_num * HASH_SLOT_SIZE
            if self._created and self.index_count <= 1:  # no item yet: the slots are all 0
                slots = array("i", [0]) * self.hash_slot_num
            else:
                slots = array("i")
                slots.frombytes(self._io.read(INDEX_HEADER_SIZE, size))
                if sys.byteorder == "little":
                    slots.byteswap()
            self._slots = slots
        return slots

    def put_hashed(
        self,
        entries: Sequence[int],
        start: int = 0,
        step: IndexStep | None = None,
        in_place: IndexInPlace | None = None,
    ) -> int:
        """Add many keys at once; byte for byte what :meth:`put_key` would write for each.

        Args:
            entries: flat ``[keyHash, phyOffset, storeTimestamp, ...]`` (keyHash as
                :func:`engine.format.javahash.index_key_hash` gives it; bytes; epoch ms), in order
                (a list, or an ``array("q")``).
            start: the first entry (counted in entries, not list items) to store.
            step: what builds the items and moves the slots (:data:`IndexStep`) where
                ``in_place`` is not used: :func:`index_step` (the default, Python), or a
                stand-in that does the same.
            in_place: what writes them straight into the file's mapping
                (:data:`IndexInPlace`, the compiled core's ``IndexWriter``), used before
                ``step`` where the file is mapped for writing: one call, no write of Python's.

        Returns:
            The number of the first entry not stored: ``len(entries) // 3`` when all fit, less
            when the file filled up (the caller rolls to a new file).

        Writes go items first (one pwrite for the whole run), then every changed hash slot
        (one pwrite per run of adjacent slots), then the header, so a crash at any point
        leaves slots that point only at written items and a header that counts only items its
        slots may reach; a reader meanwhile never follows a slot past its indexCount.

        Raises:
            ReadOnlyStoreError: the file was opened read-only.
            OSError: from the disk; the header and the slots are as before the call.
        """
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.path}: index file opened read-only")
        count = self.index_count
        n = min(len(entries) // 3 - start, self.index_num - count)
        if n <= 0:
            return start
        io = self._io
        if (
            in_place is not None
            and isinstance(io, (_MapIO, _MemIO))
            and (mm := io.mapping()) is not None
        ):
            return self._put_in_place(in_place, io, mm, entries, start, n)
        if n <= _FEW_ENTRIES and step is None:
            return self._put_few(entries, start, n)
        slots = self._slot_table()
        packed, old, after = (step or index_step)(
            slots,
            entries,
            start,
            n,
            (count, self.hash_slot_count, self.begin_timestamp, self.begin_phy_offset),
        )
        c, slot_count, begin_ts, begin_phy, ts, phy = after
        io = self._io
        try:
            io.write(self._items_base + count * INDEX_SIZE, packed)
            for first, run in _slot_runs(sorted(old), _SLOT_GAP):
                io.write(
                    INDEX_HEADER_SIZE + first * HASH_SLOT_SIZE,
                    SLOT.pack(slots[first])
                    if run == 1
                    else struct.pack(f">{run}i", *slots[first : first + run]),
                )
            io.write(0, HEADER.pack(begin_ts, ts, begin_phy, phy, slot_count, c))
        except OSError:
            for slot, value in old.items():
                slots[slot] = value
            # the chains must not name unwritten items: every run put back, the one a write
            # failed in the middle of (a short pwrite) included
            for first, run in _slot_runs(sorted(old), _SLOT_GAP):
                try:
                    io.write(
                        INDEX_HEADER_SIZE + first * HASH_SLOT_SIZE,
                        struct.pack(f">{run}i", *slots[first : first + run]),
                    )
                except OSError:
                    pass
            raise
        self._advance((begin_ts, ts, begin_phy, phy, slot_count, c))
        return start + n

    def _put_in_place(
        self,
        in_place: IndexInPlace,
        io: _MapIO | _MemIO,
        mm: mmap.mmap,
        entries: Sequence[int],
        start: int,
        n: int,
    ) -> int:
        """:meth:`put_hashed` by ``in_place`` into the mapping: the chunks under its writes
        allocated first (ENOSPC before anything is written), then one call writes the items,
        the slots and the header, in that order, each chain head read from the file's own
        slot (no table in memory: 20 MB of a default file's, zeroed or read at its first put)."""
        state = (
            self.index_count,
            self.hash_slot_count,
            self.begin_timestamp,
            self.begin_phy_offset,
        )
        items_from = self._items_base // io.CHUNK  # items are written in order: allocated ahead
        while True:
            after = in_place(
                mm,
                io.chunks,
                io.CHUNK,
                self._items_base,
                self.hash_slot_num,
                entries,
                start,
                n,
                state,
            )
            if isinstance(after, tuple):
                break
            for chunk in sorted(set(after)):
                if not io.chunks[chunk]:
                    io.allocate(chunk, _ITEM_CHUNKS_AHEAD if chunk > items_from else 1)
        self._slots = None  # (a table a step of Python's loaded is behind the file now)
        self._advance(after)
        return start + n

    def _put_few(self, entries: Sequence[int], start: int, n: int) -> int:
        """:meth:`put_hashed` of ``n`` (a few) entries from ``start``, a single put's UNIQ_KEY
        and keys: :func:`index_step`'s items and chains, written directly (no batch's run
        planning): the items, then each changed slot, the header last (a crash between leaves
        slots that name written items only, and a header that counts only items its slots
        may reach)."""
        slots = self._slot_table()
        c0 = self.index_count
        state = (c0, self.hash_slot_count, self.begin_timestamp, self.begin_phy_offset)
        items, old, (c, slot_count, begin_ts, begin_phy, ts, phy) = index_step(
            slots, entries, start, n, state
        )
        io = self._io
        try:
            io.write(self._items_base + c0 * INDEX_SIZE, items)
            for slot in old:
                io.write(INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE, SLOT.pack(slots[slot]))
            io.write(0, HEADER.pack(begin_ts, ts, begin_phy, phy, slot_count, c))
        except OSError:
            for slot, value in old.items():  # the chains must not name unwritten items
                slots[slot] = value
                try:
                    io.write(INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE, SLOT.pack(value))
                except OSError:
                    pass
            raise
        self._advance((begin_ts, ts, begin_phy, phy, slot_count, c))
        return start + n

    def _advance(self, header: tuple[int, int, int, int, int, int]) -> None:
        """The header fields after a put (:data:`HEADER`'s order); a full file drops its slot
        table and its mapping (no more puts)."""
        self._dirty = True
        self._unstamped = True  # (written since the mtime was set: touch)
        self._set_header(header)
        if self.index_count >= self.index_num:
            self._slots = None
            io = self._io
            if isinstance(io, _MapIO):
                self._io = io.unmapped()

    # -- read ---------------------------------------------------------------------------------
    @property
    def walk_bound(self) -> int:
        """The item numbers a chain walk may visit are below this: indexCount clamped to what
        the file can hold (``indexNum``, from its size), so a header that claims more items
        than the file has never makes a walk longer (a follower's ``live`` file: the
        capacity, since its slots may be newer than the header read last)."""
        return self.index_num if self.live else max(1, min(self.index_count, self.index_num))

    def reader(self) -> _FdIO | _MemReader | _SourceIO:
        """A reader of this file independent of its lifetime (``_FdIO.reader``): a query
        takes one under :class:`IndexService`'s lock and walks with it after the lock is
        released, so no writer ever waits for a walk. Close it after."""
        return self._io.reader()

    def select_phy_offsets(
        self,
        key: str,
        max_num: int,
        begin: int = 0,
        end: int = LONG_MAX,
        io: _Reader | None = None,
    ) -> list[int]:
        """CommitLog offsets stored under ``key`` (``topic#key``), newest first.

        ``IndexFile.selectPhyOffset``: follow the bucket's chain from the slot; take an item
        when its keyHash equals the key's and ``begin <= beginTimestamp + timeDiff*1000 <= end``
        (epoch ms); stop after ``max_num`` results, or at ``timeDiff < 0``, ``prevIndex <= 0``
        or an item older than ``begin``. A walk ends whatever the file says: item numbers at
        or past :attr:`walk_bound` (indexCount clamped to the file's capacity) end it, and so
        does a ``prevIndex`` that is not strictly below the current item (RocketMQ stops only
        at ``prevIndex == current``, so a chain 5 -> 6 -> 5 loops there), so it visits at
        most ``walk_bound`` items. ``io``: a :meth:`reader` to read through (default: the
        file itself). Items of other keys with the same hash are returned too (the caller
        filters).

        Raises:
            CorruptRecordError: the file is shorter than its geometry (truncated by someone).
        """
        out: list[int] = []
        if max_num <= 0:
            return out
        io = io or self._io
        key_hash = index_key_hash(key)
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        try:
            current = SLOT.unpack(io.read(slot_pos, HASH_SLOT_SIZE))[0]
        except ValueError:  # a memory file closed meanwhile
            return out
        # the count after the slot: a put writes its item, the slot, then the count, so a
        # slot read first never points past the items the count then covers but by a put
        # still under way (whose key is then not seen yet)
        count, begin_ts = self.walk_bound, self.begin_timestamp
        if self.live and not begin_ts:
            self.reload_header()
            begin_ts = self.begin_timestamp
        if current <= INVALID_INDEX or current >= count or count <= 1:
            return out
        base = self._items_base
        block_first, block = -(1 << 62), b""  # items read a page at a time: chains go back
        per_block = _WALK_BLOCK // INDEX_SIZE
        unpack = ITEM.unpack_from
        while True:
            if len(out) >= max_num:
                break
            if not block_first <= current < block_first + per_block:
                block_first = max(1, current - per_block + 1)
                try:
                    block = io.read(
                        base + block_first * INDEX_SIZE, (current - block_first + 1) * INDEX_SIZE
                    )
                except ValueError:
                    break
            item_hash, phy, time_diff, prev = unpack(block, (current - block_first) * INDEX_SIZE)
            if time_diff < 0:
                break
            time_read = begin_ts + time_diff * 1000
            if item_hash == key_hash and begin <= time_read <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev >= current or time_read < begin:
                break
            current = prev
        return out

    def has_key_at(self, key: str, phy_offset: int) -> bool:
        """Whether an item for ``key`` at exactly ``phy_offset`` is in the file.

        Walks the key's chain only while items are at or after ``phy_offset`` (items are
        appended in CommitLog order), so it is cheap for the newest message.
        """
        count = self.walk_bound
        key_hash = index_key_hash(key)
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        current = SLOT.unpack(self._io.read(slot_pos, HASH_SLOT_SIZE))[0]
        if current <= INVALID_INDEX or current >= count:
            return False
        for _ in range(count):
            item_hash, phy, _diff, prev = ITEM.unpack(
                self._io.read(self._items_base + current * INDEX_SIZE, INDEX_SIZE)
            )
            if phy < phy_offset:
                return False
            if phy == phy_offset and item_hash == key_hash:
                return True
            if prev <= INVALID_INDEX or prev >= current:
                return False
            current = prev
        return False

    def reload_header(self) -> bool:
        """Re-read the header of a file another process writes (a follower's files).
        Returns True when it changed."""
        head = self._io.read(0, INDEX_HEADER_SIZE)
        if len(head) < INDEX_HEADER_SIZE:
            return False
        fields = HEADER.unpack(head)
        before = (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = fields
        if self.index_count <= 0:
            self.index_count = 1
        return before != (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def item(self, n: int) -> tuple[int, int, int, int]:
        """Item ``n`` (1 .. indexCount-1) as ``(keyHash, phyOffset, timeDiff, prevIndex)``."""
        if not 1 <= n < self.index_count:
            raise IndexError(n)
        return ITEM.unpack(self._io.read(self._items_base + n * INDEX_SIZE, INDEX_SIZE))

    # -- consistency --------------------------------------------------------------------------
    def header_problem(self) -> str | None:
        """The first way the header lies about the file, or None: an indexCount past what the
        file can hold (``indexNum``, from its size), a hashSlotCount past its slots, or a hash
        slot pointing at an item the header does not count. Costs one read of the slots
        (``hashSlotNum`` * 4 bytes): what a writable open checks of the file it will write
        to (:meth:`IndexService.drop_inconsistent`)."""
        import numpy as np

        if not 1 <= self.index_count <= self.index_num:
            return f"indexCount {self.index_count} past the file's {self.index_num} items"
        if not 0 <= self.hash_slot_count <= self.hash_slot_num:
            return f"hashSlotCount {self.hash_slot_count} past its {self.hash_slot_num} slots"
        raw = self._io.read(INDEX_HEADER_SIZE, self.hash_slot_num * HASH_SLOT_SIZE)
        slot = np.frombuffer(raw, ">i4")
        bad = (slot < 0) | (slot >= self.index_count)
        if bad.any():
            s = int(np.flatnonzero(bad)[0])
            return (
                f"hash slot {s} points at item {int(slot[s])}, past indexCount {self.index_count}"
            )
        return None

    def structure_problem(self, check: IndexCheck | None = None) -> str | None:
        """The first way the file's header, hash slots and items disagree, or None.

        A crash (or a copy taken while the file was written: ``tar`` of ``raw/``) can leave
        slots pointing at items the header does not count, or chains through items written
        after the header. Checked over the whole file: each slot is the newest item of its
        bucket (0 for an empty bucket), every prevIndex points at an older item of the same
        bucket, phyOffsets never go back, keyHash and timeDiff are not negative, and
        hashSlotCount and endPhyOffset match. ``check`` finds these (:data:`IndexCheck`: the
        compiled core's one pass, ``engine.read.kernel.Kernel.index_check``), by default
        :func:`structure_findings` (numpy). Costs one read of the file (up to about 420 MB for
        the default geometry; a local file is read through a read-only mapping, not copied
        into memory, where it holds no hole; the hash slots, sparse where few are used, by
        ``pread``: :meth:`_FdIO.read_mapping`): run after an abnormal exit only.
        """
        problem = self.header_problem()
        if problem is not None:
            return problem
        slots, count = self.hash_slot_num, self.index_count
        items_at = self._items_base + INDEX_SIZE
        items_end = items_at + (count - 1) * INDEX_SIZE
        io = self._io
        mapped = io.read_mapping(items_at, items_end) if isinstance(io, _FdIO) else None
        mm = mapped[0] if mapped is not None else None
        views: list[memoryview] = []
        raw: bytes | memoryview
        try:
            slot_raw = io.read(INDEX_HEADER_SIZE, slots * HASH_SLOT_SIZE)
            if mapped is not None:  # the items read in place: no copy
                whole = memoryview(mapped[0])
                raw = whole[mapped[1] :]
                views = [whole, raw]
            else:
                raw = io.read(items_at, (count - 1) * INDEX_SIZE)
            if len(slot_raw) != slots * HASH_SLOT_SIZE or len(raw) != (count - 1) * INDEX_SIZE:
                return "file shorter than its hash slots and indexCount items"
            f = (check or structure_findings)(slot_raw, raw, slots, count)
        finally:
            for v in reversed(views):
                v.release()
            if mm is not None:
                mm.close()
        if f.negative:
            return "an item with a negative keyHash or timeDiff"
        if f.bad_prev:
            return "an item whose prevIndex is not an older item"
        if f.cross_bucket:
            return "an item whose prevIndex is in another hash bucket"
        if f.out_of_order:
            return "items out of CommitLog order"
        if f.slot >= 0:
            return (
                f"hash slot {f.slot} holds item {f.slot_value}, the newest item of its bucket "
                f"is {f.newest}"
            )
        if f.used != self.hash_slot_count:
            return f"hashSlotCount {self.hash_slot_count} but {f.used} in use"
        if count > 1 and self.end_phy_offset != f.last_phy:
            return f"endPhyOffset {self.end_phy_offset} != the last item's {f.last_phy}"
        return None

    # -- truncate -----------------------------------------------------------------------------
    def truncate(
        self, phy_offset: int, timestamp_of: Callable[[int], int | None] | None = None
    ) -> int:
        """Undo every item whose phyOffset >= ``phy_offset``; returns the new indexCount.

        The file is cut by :func:`cut_index` (the one cut, also the snapshot's): each changed
        slot and the header are written in place; removed items' bytes stay on disk beyond
        indexCount (unreachable). ``timestamp_of`` (CommitLog offset -> store time, epoch ms, or
        None) gives the new endTimestamp exactly; see :func:`cut_index`. RocketMQ has no such
        operation: it destroys files and re-dispatches.

        Raises:
            ReadOnlyStoreError: the file was opened read-only.
        """
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.path}: index file opened read-only")
        import numpy as np

        slots = np.frombuffer(
            self._io.read(INDEX_HEADER_SIZE, self.hash_slot_num * HASH_SLOT_SIZE), ">i4"
        )
        cut = cut_index(
            self.header_fields(), slots, self._io.read, self._items_base, phy_offset, timestamp_of
        )
        if cut is None:
            return self.index_count
        self._slots = None  # reloaded from the file on the next batched put
        self._created = False  # (a cut to no item may leave slots that are not 0)
        for slot in cut.changed.tolist():
            self._io.write(
                INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE, SLOT.pack(int(cut.slots[slot]))
            )
        self._set_header(cut.header)
        self._io.write(0, HEADER.pack(*cut.header))
        self._dirty = True
        self._unstamped = True  # (written since the mtime was set: touch)
        io = self._io
        if type(io) is _FdIO and self.index_count < self.index_num:
            # a file that filled (and lost its mapping) has room again: written in place again
            self._io = _MapIO(io.fd, io.path, self.size)
        return self.index_count

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> bool:
        """``fdatasync`` the file if it was written since the last flush (``IndexFile.flush``),
        and :meth:`touch` it. Returns whether it was (False: nothing to sync)."""
        if not self._dirty:
            return False
        self._io.sync()
        self._dirty = False
        self.touch()
        return True

    def touch(self) -> None:
        """Set the file's mtime to now if it was written since it was last set: a store into
        a page of a shared mapping that is dirty already moves no mtime (the kernel stamps a
        page's first store after writeback only), and a backup's quick check (rsync, restic:
        size and mtime) would skip the file. Errors are ignored (a file being deleted)."""
        if not self._unstamped or self.path is None or self.read_only:
            return
        self._unstamped = False
        try:
            os.utime(self.path)
        except OSError:
            pass

    def close(self) -> None:
        """Close the file descriptor (or drop the memory). Does not flush."""
        self._io.close()

    def destroy(self) -> None:
        """Close and delete the file (``IndexFile.destroy``)."""
        self.close()
        if self.path is not None and not self.read_only:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.name}, slots={self.hash_slot_num}, items={self.index_num}, "
            f"indexCount={self.index_count}, phy=[{self.begin_phy_offset}, "
            f"{self.end_phy_offset}], ts=[{self.begin_timestamp}, {self.end_timestamp}])"
        )


class IndexCut(NamedTuple):
    """An IndexFile as :func:`cut_index` leaves it."""

    #: the six :data:`HEADER` fields (beginTimestamp, endTimestamp, beginPhyOffset,
    #: endPhyOffset, hashSlotCount, indexCount)
    header: tuple[int, int, int, int, int, int]
    #: the whole slot table after the cut (int64, ``hashSlotNum`` values)
    slots: Any
    #: the slot numbers whose value the cut changed (int64, ascending)
    changed: Any


#: indexfile.ITEM (keyHash | phyOffset | timeDiff | prevIndex) as a numpy dtype, from its format
ITEM_FIELDS = ("key_hash", "phy_offset", "time_diff", "prev_index")


def item_dtype() -> np.dtype:
    """:data:`ITEM` as a numpy structured dtype (big-endian fields :data:`ITEM_FIELDS`)."""
    import numpy as np

    fmt = ITEM.format.lstrip(">")
    dt = np.dtype([(n, f">i{struct.calcsize(c)}") for n, c in zip(ITEM_FIELDS, fmt)])
    assert dt.itemsize == INDEX_SIZE
    return dt


def cut_index(
    header: Sequence[int],
    slots: np.ndarray,
    read: Callable[[int, int], bytes],
    items_base: int,
    phy_offset: int,
    timestamp_of: Callable[[int], int | None] | None = None,
) -> IndexCut | None:
    """An IndexFile as it was before the record at CommitLog offset ``phy_offset`` was
    indexed: the one cut of an IndexFile, for recovery (:meth:`IndexFile.truncate`, the CommitLog
    was cut) and for snapshots (a file whose writer is ahead of the snapshot's end).

    Items are appended in CommitLog order, so the items removed (phyOffset >= ``phy_offset``)
    are a tail ``[keep, indexCount)``, found by binary search. Each bucket whose newest item is
    removed points again at the prevIndex of its oldest removed item (the newest item kept;
    0, the empty slot, when the chain has none), read column-wise, 65,536 items at a time.
    hashSlotCount is the slots in use after the cut; endPhyOffset the last kept item's; and
    endTimestamp that record's store time from ``timestamp_of(commitLogOffset)`` when it
    gives one (exact, as ``IndexFile.putKey`` set it), else the item's second rounded up
    (``beginTimestamp + timeDiff*1000 + 999``, never above the old endTimestamp nor below
    beginTimestamp; beginTimestamp when only the first item is left), since items keep seconds.
    With nothing kept (indexCount 1) endPhyOffset and endTimestamp stay as they were.

    Args:
        header: the file's six :data:`HEADER` fields.
        slots: its slot table (a numpy int array of ``hashSlotNum`` values, any byte order).
        read: ``read(position, length) -> bytes`` of the file (pread-like; shorter at the end).
        items_base: position of item 0 (``40 + hashSlotNum*4``).
        phy_offset: the CommitLog offset of the first record to forget (bytes).
        timestamp_of: CommitLog offset -> STORETIMESTAMP (epoch ms) or None.

    Returns:
        An :class:`IndexCut`, or None when no item is at or past ``phy_offset``.
    """
    import numpy as np

    begin_ts, end_ts, begin_phy, end_phy, _slot_count, count = header
    dtype = item_dtype()

    def items(start: int, n: int) -> np.ndarray:
        raw = read(items_base + start * INDEX_SIZE, n * INDEX_SIZE)
        return np.frombuffer(raw, dtype, count=len(raw) // INDEX_SIZE)

    lo, hi = 1, count  # the first item with phyOffset >= phy_offset
    while lo < hi:
        mid = (lo + hi) // 2
        it = items(mid, 1)
        if not len(it) or int(it["phy_offset"][0]) >= phy_offset:
            hi = mid
        else:
            lo = mid + 1
    if lo >= count:
        return None
    old = np.asarray(slots).astype(np.int64)
    table = old.copy()
    nslots = len(table)
    done = np.zeros(nslots, dtype=bool)
    for start in range(lo, count, _TRUNCATE_CHUNK):
        part = items(start, min(_TRUNCATE_CHUNK, count - start))
        if not len(part):
            break
        bucket = part["key_hash"].astype(np.int64) % nslots
        first_in, first_at = np.unique(bucket, return_index=True)  # oldest removed per bucket
        new = ~done[first_in]
        prev = part["prev_index"][first_at[new]].astype(np.int64)
        table[first_in[new]] = np.where((prev > 0) & (prev < lo), prev, INVALID_INDEX)
        done[first_in[new]] = True
    if lo > 1:
        last = items(lo - 1, 1)
        end_phy = int(last["phy_offset"][0])
        exact = timestamp_of(end_phy) if timestamp_of is not None else None
        if exact is not None:
            end_ts = exact
        elif lo - 1 == 1:
            end_ts = begin_ts
        else:
            diff = int(last["time_diff"][0])
            end_ts = max(begin_ts, min(end_ts, begin_ts + diff * 1000 + 999))
    changed = np.flatnonzero(table != old)
    head = (begin_ts, end_ts, begin_phy, end_phy, int(np.count_nonzero(table)), lo)
    return IndexCut(head, table, changed)


#: What :meth:`IndexFile.put_hashed` calls to build ``n`` items from ``entries[3 * start:]``:
#: ``(slots, entries, start, n, (indexCount, hashSlotCount, beginTimestamp, beginPhyOffset))``
#: -> ``(items packed as ITEM, {slot: value before}, (indexCount, hashSlotCount,
#: beginTimestamp, beginPhyOffset, endTimestamp, endPhyOffset))``, the slot table updated.
IndexStep = Callable[
    [array, Sequence[int], int, int, tuple[int, int, int, int]],
    tuple[bytes, dict[int, int], tuple[int, int, int, int, int, int]],
]

#: What :meth:`IndexFile.put_hashed` calls to write ``n`` entries straight into the file's
#: mapping (the compiled core's ``engine.read.kernel.IndexWriter``): ``(mapping, allocated
#: chunks, chunk size, items base, hashSlotNum, entries, start, n, (indexCount, hashSlotCount,
#: beginTimestamp, beginPhyOffset))`` -> the header after (:data:`HEADER`'s order), or, with
#: nothing written, the chunks to allocate first; the chain heads are the file's slots.
IndexInPlace = Callable[
    [Any, bytearray, int, int, int, Sequence[int], int, int, tuple[int, int, int, int]],
    "tuple[int, int, int, int, int, int] | list[int]",
]

#: Byte offset of each field in an ITEM (the compiled step writes them there).
ITEM_POSITIONS = {
    name: struct.calcsize(">" + ITEM.format[1 : 1 + i]) for i, name in enumerate(ITEM_FIELDS)
}
#: Byte offset of each field of the header (HEADER_NAMES' order), for the compiled step.
HEADER_POSITIONS = {
    name: struct.calcsize(">" + HEADER.format[1 : 1 + i]) for i, name in enumerate(HEADER_NAMES)
}


def index_step(
    slots: array, entries: Sequence[int], start: int, n: int, state: tuple[int, int, int, int]
) -> tuple[bytes, dict[int, int], tuple[int, int, int, int, int, int]]:
    """:data:`IndexStep` in Python, the reference (``IndexFile.putKey`` per entry): each item's
    previous index is its slot's chain head when valid (``> INVALID_INDEX`` and ``<=
    indexCount``, else invalid and a new slot counted), its timeDiff the seconds since
    beginTimestamp (0 before any, clamped to int32), and the first items of a file set its
    begin timestamp and offset."""
    c, slot_count, begin_ts, begin_phy = state
    nslots = len(slots)
    items: list[int] = []
    old: dict[int, int] = {}  # slot -> value before this call
    phy = ts = 0
    for j in range(3 * start, 3 * (start + n), 3):
        key_hash, phy, ts = entries[j], entries[j + 1], entries[j + 2]
        slot = key_hash % nslots
        value = slots[slot]
        if value <= INVALID_INDEX or value > c:
            value = INVALID_INDEX
            slot_count += 1
        if begin_ts <= 0:
            time_diff = 0
        else:
            delta = ts - begin_ts
            time_diff = delta // 1000 if delta >= 0 else 0
            if time_diff > _INT_MAX:
                time_diff = _INT_MAX
        items += (key_hash, phy, time_diff, value)
        if c <= 1:
            begin_phy, begin_ts = phy, ts
        if slot not in old:
            old[slot] = slots[slot]
        slots[slot] = c
        c += 1
    return _items_struct(n).pack(*items), old, (c, slot_count, begin_ts, begin_phy, ts, phy)


class StructureFindings(NamedTuple):
    """What :meth:`IndexFile.structure_problem` checks, found over a file's slots and items
    (:data:`IndexCheck`)."""

    negative: bool  #: an item with a keyHash or timeDiff below 0
    bad_prev: bool  #: an item whose prevIndex is not an older item (below 0, or not below it)
    cross_bucket: bool  #: an item whose prevIndex (a valid one) is in another hash bucket
    out_of_order: bool  #: an item whose phyOffset is below the one before it
    slot: int  #: the first slot that does not hold its bucket's newest item (0 for an empty one), -1: none
    slot_value: int  #: what that slot holds
    newest: int  #: the newest item of its bucket
    used: int  #: slots that are not 0
    last_phy: int  #: the last item's phyOffset (0 without items)


#: What finds :class:`StructureFindings`: ``(slots as stored, items 1 .. count - 1 as stored,
#: hashSlotNum, indexCount)`` (buffers of the file's bytes after its header, big-endian: bytes
#: or a memoryview of its mapping, released by the caller after the call).
IndexCheck = Callable[[Any, Any, int, int], StructureFindings]


def structure_findings(slot_raw: Any, raw: Any, slots: int, count: int) -> StructureFindings:
    """:data:`IndexCheck` in numpy (the reference the compiled one is judged against)."""
    import numpy as np

    slot = np.frombuffer(slot_raw, ">i4").astype(np.int64)
    items = np.frombuffer(
        raw, np.dtype([("h", ">i4"), ("phy", ">i8"), ("td", ">i4"), ("prev", ">i4")])
    )
    h, phy, prev = items["h"], items["phy"], items["prev"]
    n = np.arange(1, count, dtype=np.int64)
    bad_prev = (prev < 0) | (prev >= n)
    bucket = h.astype(np.int64) % slots
    chained = np.flatnonzero((prev > 0) & ~bad_prev)
    bad_slot, slot_value, newest_value = -1, 0, 0
    if not _slots_name_newest(slot, bucket, n, count):
        newest = np.zeros(slots, np.int64)  # which slot is wrong, the costly way
        if len(bucket):
            last_first, where = np.unique(bucket[::-1], return_index=True)
            newest[last_first] = (count - 1) - where
        bad_slot = int(np.flatnonzero(slot != newest)[0])
        slot_value, newest_value = int(slot[bad_slot]), int(newest[bad_slot])
    return StructureFindings(
        bool((h < 0).any() or (items["td"] < 0).any()),
        bool(bad_prev.any()),
        bool((bucket[prev[chained] - 1] != bucket[chained]).any()),
        bool((phy[1:] < phy[:-1]).any()),  # not np.diff: it wraps on random phyOffsets
        bad_slot,
        slot_value,
        newest_value,
        int(np.count_nonzero(slot)),
        int(phy[-1]) if len(phy) else 0,
    )


def _slots_name_newest(slot: np.ndarray, bucket: np.ndarray, n: np.ndarray, count: int) -> bool:
    """Whether every hash slot holds the newest item of its bucket (0 for an empty one), in
    linear time: each non-zero slot names an item (below ``count``) of its own bucket, and no
    item is newer than its bucket's slot (``slot``: the table as int64; ``bucket``: each item's
    bucket, items 1 .. count - 1 in order; ``n``: their numbers)."""
    import numpy as np

    if ((slot < 0) | (slot >= count)).any():
        return False
    used = np.flatnonzero(slot)
    if (bucket[slot[used] - 1] != used).any():
        return False
    return bool((n <= slot[bucket]).all())


def _slot_runs(sorted_slots: list[int], gap: int = 1) -> Iterator[tuple[int, int]]:
    """``(first, length)`` runs of slot numbers, a run going on over holes of fewer than
    ``gap`` slots (``gap`` 1: consecutive numbers only). Writing a run from the in-memory slot
    table rewrites the slots in its holes with the values the file already holds."""
    if not sorted_slots:
        return
    first = prev = sorted_slots[0]
    for s in sorted_slots[1:]:
        if s - prev > gap:
            yield first, prev - first + 1
            first = s
        prev = s
    yield first, prev - first + 1


def check_geometry(hash_slot_num: int, index_num: int) -> None:
    """ValueError for a geometry no IndexFile has: fewer than 1 slot or 2 items, or a file
    over 2**31 - 1 bytes (``IndexFile``'s fileTotalSize and counts are Java ints)."""
    if hash_slot_num < 1 or index_num < 2:
        raise ValueError(
            f"bad index geometry: hashSlotNum={hash_slot_num}, "
            f"indexNum={index_num} (need >= 1 and >= 2)"
        )
    if index_file_size(hash_slot_num, index_num) > _INT_MAX:
        raise ValueError(
            f"bad index geometry: hashSlotNum={hash_slot_num}, indexNum={index_num} make a "
            f"file over {_INT_MAX} bytes"
        )


def build_key(topic: str, key: str) -> str:
    """``IndexService.buildKey``: the string an IndexFile hashes for ``key`` (a KEYS entry or
    the UNIQ_KEY) of a record of ``topic``: ``topic#key``. ``build_key(topic, "")`` is the
    prefix shared by a topic's keys (its hash seeds the fast path's key hashes)."""
    return f"{topic}#{key}"


def topic_prefix_hash(topic: str) -> int:
    """The Java ``hashCode`` (unsigned 32-bit) of ``build_key(topic, "")``: continued over a
    key's UTF-16 units it is the hash of ``topic#key`` (what the put path, recovery's compiled
    reader of stored keys and :meth:`IndexService.dispatch` seed their key hashes with)."""
    return java_hash_u32(build_key(topic, ""))


def record_entries(
    prefix_hash: int, uniq: str | None, keys: Sequence[str], offset: int, store_timestamp: int
) -> list[int]:
    """The entries ``IndexService.buildIndex`` adds for one record, flat ``[keyHash,
    phyOffset, storeTimestamp, ...]`` (what :meth:`IndexService.put_hashed` takes): its
    UNIQ_KEY (when not None, even empty), then each non-empty key of ``keys`` (its KEYS split
    on spaces), each hashed as ``topic#key`` from ``prefix_hash`` (:func:`topic_prefix_hash` of
    its topic); ``offset``: its CommitLog offset, ``store_timestamp``: its STORETIMESTAMP (epoch
    ms)."""
    out: list[int] = []
    for k in (uniq, *filter(None, keys)) if uniq is not None else filter(None, keys):
        h = key_hash_of_u32(combine_u32(prefix_hash, java_hash_u32(k), utf16_len(k)))
        out += (h, offset, store_timestamp)
    return out


class _ReadOnlySequence(Sequence[Any]):
    """A sequence read from a file, equal to any sequence of the same items, unhashable (what
    :class:`IndexItems` and :class:`NonzeroSlots` share)."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class NonzeroSlots(_ReadOnlySequence):
    """The non-zero hash slots of a slot table, in slot order, as ``(slot number, item
    number)`` pairs; held as two int64 arrays (:attr:`numbers`, :attr:`values`: 16 bytes a
    slot, not a tuple each: a full file's 5 million slots as tuples took some 500 MB)."""

    def __init__(self, numbers: np.ndarray, values: np.ndarray) -> None:
        self.numbers = numbers
        self.values = values

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, i: Any) -> Any:  # (int -> one pair; a slice is not served)
        if not isinstance(i, int):
            raise TypeError("slots are read one at a time")
        return int(self.numbers[i]), int(self.values[i])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.numbers.tolist(), self.values.tolist())


def nonzero_slots(raw: bytes, chunk: int = 4096) -> NonzeroSlots:
    """The non-zero hash slots in ``raw`` (a slot table, :data:`SLOT` each, from slot 0), in
    slot order (:class:`NonzeroSlots`: ``(slot number, item number)`` pairs). ``chunk``: kept
    for the callers that give it (the table is read whole, in numpy)."""
    import numpy as np

    del chunk
    table = np.frombuffer(raw, dtype=">i4", count=len(raw) // HASH_SLOT_SIZE)
    numbers = np.flatnonzero(table)
    return NonzeroSlots(numbers.astype(np.int64), table[numbers].astype(np.int64))


def read_index_header(path: str, source: StoreSource = LOCAL) -> tuple[int, ...] | None:
    """The six :data:`HEADER` fields of the IndexFile ``path`` as stored (``IndexHeader.load``:
    beginTimestamp, endTimestamp (epoch ms), beginPhyOffset, endPhyOffset (bytes),
    hashSlotCount, indexCount), read through ``source``; None when the file is shorter than a
    header (nothing is raised for a damaged file).

    Raises:
        OSError; ObjectStoreError: the source could not read the file.
    """
    head = source.pread(path, INDEX_HEADER_SIZE, 0)
    if len(head) < INDEX_HEADER_SIZE:
        return None
    return tuple(HEADER.unpack(head))


class IndexItems(_ReadOnlySequence):
    """An IndexFile's items 1 .. indexCount-1 as read, each ``(keyHash, phyOffset, timeDiff,
    prevIndex)`` (:data:`ITEM`) unpacked when asked for: the bytes are held (20 a item), not a
    tuple each (a full file's 20 million items as tuples took some 4 GB)."""

    def __init__(self, raw: bytes | memoryview) -> None:
        self._raw = raw

    def __len__(self) -> int:
        return len(self._raw) // INDEX_SIZE

    def __getitem__(self, i: Any) -> Any:  # (int -> one item; a slice is not served)
        n = len(self)
        if not isinstance(i, int):
            raise TypeError("items are read one at a time")
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return ITEM.unpack_from(self._raw, i * INDEX_SIZE)

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        return ITEM.iter_unpack(self._raw)

    def key_hashes(self) -> np.ndarray:
        """Every item's keyHash (int64, native order), in one pass."""
        import numpy as np

        return np.frombuffer(self._raw, dtype=item_dtype())[ITEM_FIELDS[0]].astype(np.int64)


class IndexScan(NamedTuple):
    """One IndexFile read leniently (:func:`scan_index_file`), for a checker: the parts
    :class:`IndexFile` loads, or the problem that makes the file unusable.

    ``problem`` is None or ``(what, text)``: ``what`` is ``"empty"`` (a 0-byte file, which
    ``IndexService.load`` deletes), ``"geometry"`` (a size that fits no geometry:
    :func:`index_geometry`), ``"header"`` (indexCount past indexNum) or ``"short"`` (the file
    ends before its indexCount items); the other fields are then empty."""

    #: the six :data:`HEADER` fields, indexCount read as at least 1 (``IndexHeader.load``)
    header: tuple[int, ...]
    hash_slot_num: int
    index_num: int
    #: ``(slot, item)`` of the non-zero hash slots (:func:`nonzero_slots`)
    slots: NonzeroSlots
    #: items 1 .. indexCount-1 as ``(keyHash, phyOffset, timeDiff, prevIndex)`` (:data:`ITEM`)
    items: IndexItems
    problem: tuple[str, str] | None = None


def _unusable(problem: tuple[str, str]) -> IndexScan:
    """An :class:`IndexScan` of a file that cannot be read as an IndexFile, and why."""
    return IndexScan((), 0, 0, nonzero_slots(b""), IndexItems(b""), problem)


def scan_index_file(
    path: str,
    hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
    index_num: int = DEFAULT_INDEX_NUM,
    source: StoreSource = LOCAL,
    label: str = "",
) -> IndexScan:
    """Read the IndexFile ``path`` through ``source`` leniently (``IndexFile.load``, without
    raising for damage): its size and geometry (:func:`index_geometry`, the configured
    ``hash_slot_num``/``index_num`` winning when they fit), its header, its hash slots and its
    items, in file order (a snapshot's source sums a file whose bytes come in order:
    ``engine.live.objectsource``). A file that cannot be read as an IndexFile comes back
    with :attr:`IndexScan.problem` set (``label`` names the file in its text; default
    ``path``). The checks of what the parts say (chains, buckets, counts) are the caller's.

    Raises:
        OSError; ObjectStoreError: the source could not read the file.
    """
    size = source.file_size(path)
    if size == 0:
        return _unusable(("empty", "empty file (deleted on load)"))
    try:
        slots, items_num = index_geometry(size, hash_slot_num, index_num, label or path)
    except CorruptRecordError as exc:
        return _unusable(("geometry", str(exc)))
    head = read_index_header(path, source)
    if head is None:
        return _unusable(("short", "file shorter than its header"))
    header = head[:5] + (max(head[5], 1),)
    count = header[5]
    if count > items_num:
        return _unusable(("header", f"indexCount {count} > indexNum {items_num}"))
    slot_raw = source.pread(path, slots * HASH_SLOT_SIZE, INDEX_HEADER_SIZE)
    # from the unused item 0 on, so that the reads follow one another
    raw = memoryview(
        source.pread(path, count * INDEX_SIZE, INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE)
    )
    if len(raw) - INDEX_SIZE != (count - 1) * INDEX_SIZE:
        return _unusable(("short", "file shorter than its item count"))
    items = IndexItems(raw[INDEX_SIZE:])
    return IndexScan(header, slots, items_num, nonzero_slots(slot_raw), items)
