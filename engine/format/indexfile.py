"""IndexFile and IndexService: the message-key hash index under ``index/``.

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

Files are created at full length as sparse files (``ftruncate``) and accessed with
``os.pread``/``os.pwrite`` (no mmap: a full disk gives ``OSError(ENOSPC)``, not SIGBUS). Writers
write an item before the slot that points at it, so a concurrent reader never follows a slot to
a half-written item. The store's put path writes keys in batches (:meth:`IndexFile.put_hashed`):
every item of the batch with one pwrite, then each changed slot, then the header, with the slot
values taken from an in-memory copy of the slot table (``hashSlotNum * 4`` bytes, loaded on the
first batch) instead of one pread per key.
"""

from __future__ import annotations

import datetime
import mmap
import os
import re
import struct
import sys
import threading
import time
from array import array
from contextlib import contextmanager

from ..errors import CorruptRecordError, ReadOnlyStoreError, StoreError
from .javahash import combine_u32, index_key_hash, java_hash_u32, key_hash_of_u32, utf16_len
from .mappedfile import create_preallocated, fsync_dir
from .message import TRANSACTION_ROLLBACK_TYPE  # MessageSysFlag: (sysFlag & 0xC) == 0xC

HEADER = struct.Struct(">qqqqii")  # begin/endTimestamp, begin/endPhyOffset, slot and item counts
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
        CorruptRecordError: the size fits neither.
    """
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


def _name_after(name: str) -> str:
    """The 17-digit name one millisecond after ``name`` (wall-clock arithmetic, no time zone)."""
    dt = datetime.datetime.strptime(name, "%Y%m%d%H%M%S%f") + datetime.timedelta(milliseconds=1)
    return dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"


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

    def write(self, offset: int, data) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, offset)
            view = view[n:]
            offset += n

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)

    def reader(self) -> _FdIO:
        """An independent reader of the same file (a duplicated descriptor): a walk through
        it needs no lock, since closing or deleting the file meanwhile does not affect it.
        The caller closes it."""
        return _FdIO(os.dup(self.fd), self.path)


class _MemIO:
    """An anonymous mapping standing in for a file (read-only stores): zero pages cost nothing."""

    __slots__ = ("mm",)

    def __init__(self, size: int):
        self.mm = mmap.mmap(-1, size)

    def read(self, offset: int, length: int) -> bytes:
        return self.mm[offset : offset + length]

    def write(self, offset: int, data) -> None:
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

    def __init__(self, mm):
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

    def __init__(
        self,
        path: str | None,
        hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
        index_num: int = DEFAULT_INDEX_NUM,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        read_only: bool = False,
    ):
        self.path = path
        self.name = os.path.basename(path) if path else "<memory>"
        self.read_only = read_only and path is not None
        self._dirty = False
        created = False
        if path is None:
            _check_geometry(hash_slot_num, index_num)
            self.hash_slot_num, self.index_num = hash_slot_num, index_num
            self.size = index_file_size(hash_slot_num, index_num)
            self._io: _MemIO | _FdIO = _MemIO(self.size)
            created = True
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
            self._io = _FdIO(fd, path)
            (
                self.begin_timestamp,
                self.end_timestamp,
                self.begin_phy_offset,
                self.end_phy_offset,
                self.hash_slot_count,
                self.index_count,
            ) = HEADER.unpack(head)
            if self.index_count <= 0:
                self.index_count = 1
        else:
            _check_geometry(hash_slot_num, index_num)
            self.hash_slot_num, self.index_num = hash_slot_num, index_num
            self.size = index_file_size(hash_slot_num, index_num)
            fd = create_preallocated(path, self.size, exclusive=True)
            self._io = _FdIO(fd, path)
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
        self._items_base = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE
        # A file another process writes (a follower's): chains are walked up to the file's
        # capacity rather than the header's indexCount read earlier (see reload_header).
        self.live = False
        # The hash slots as native ints, loaded on the first batched put (hashSlotNum * 4
        # bytes, 20 MB for the default geometry) and kept equal to the file by every writer.
        self._slots: array | None = None

    # -- header -------------------------------------------------------------------------------
    @property
    def in_memory(self) -> bool:
        """True for a file that lives only in memory (``path`` is None)."""
        return self.path is None

    @property
    def is_write_full(self) -> bool:
        """``isWriteFull``: ``indexCount >= indexNum``."""
        return self.index_count >= self.index_num

    def header(self) -> dict:
        """The header as a dict keyed by RocketMQ's field names (beginTimestamp, ...)."""
        return {
            "beginTimestamp": self.begin_timestamp,
            "endTimestamp": self.end_timestamp,
            "beginPhyOffset": self.begin_phy_offset,
            "endPhyOffset": self.end_phy_offset,
            "hashSlotCount": self.hash_slot_count,
            "indexCount": self.index_count,
        }

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
        when there is none (read-only, or not loaded): then the file's slots are current.
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
            slots = array("i")
            slots.frombytes(self._io.read(INDEX_HEADER_SIZE, self.hash_slot_num * HASH_SLOT_SIZE))
            if sys.byteorder == "little":
                slots.byteswap()
            self._slots = slots
        return slots

    def put_hashed(self, entries: list[int], start: int = 0) -> int:
        """Add many keys at once; byte for byte what :meth:`put_key` would write for each.

        Args:
            entries: flat ``[keyHash, phyOffset, storeTimestamp, ...]`` (keyHash as
                :func:`engine.format.javahash.index_key_hash` gives it; bytes; epoch ms), in order.
            start: the first entry (counted in entries, not list items) to store.

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
        slots = self._slot_table()
        nslots = self.hash_slot_num
        begin_ts, begin_phy = self.begin_timestamp, self.begin_phy_offset
        slot_count = self.hash_slot_count
        items: list[int] = []
        old: dict[int, int] = {}  # slot -> value before this call
        c = count
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
        io = self._io
        written: list[tuple[int, int]] = []
        try:
            io.write(self._items_base + count * INDEX_SIZE, _items_struct(n).pack(*items))
            for first, run in _slot_runs(sorted(old)):
                io.write(
                    INDEX_HEADER_SIZE + first * HASH_SLOT_SIZE,
                    struct.pack(f">{run}i", *slots[first : first + run]),
                )
                written.append((first, run))
            io.write(0, HEADER.pack(begin_ts, ts, begin_phy, phy, slot_count, c))
        except OSError:
            for slot, value in old.items():
                slots[slot] = value
            for first, run in written:  # the chains must not name unwritten items
                try:
                    io.write(
                        INDEX_HEADER_SIZE + first * HASH_SLOT_SIZE,
                        struct.pack(f">{run}i", *slots[first : first + run]),
                    )
                except OSError:
                    pass
            raise
        self._dirty = True
        self.begin_timestamp, self.begin_phy_offset = begin_ts, begin_phy
        self.end_timestamp, self.end_phy_offset = ts, phy
        self.hash_slot_count = slot_count
        self.index_count = c
        if c >= self.index_num:
            self._slots = None  # full: no more puts, free the table
        return start + n

    # -- read ---------------------------------------------------------------------------------
    @property
    def walk_bound(self) -> int:
        """The item numbers a chain walk may visit are below this: indexCount clamped to what
        the file can hold (``indexNum``, from its size), so a header that claims more items
        than the file has never makes a walk longer (a follower's ``live`` file: the
        capacity, since its slots may be newer than the header read last)."""
        return self.index_num if self.live else max(1, min(self.index_count, self.index_num))

    def reader(self):
        """A reader of this file independent of its lifetime (``_FdIO.reader``): a query
        takes one under :class:`IndexService`'s lock and walks with it after the lock is
        released, so no writer ever waits for a walk. Close it after."""
        return self._io.reader()

    def select_phy_offsets(
        self, key: str, max_num: int, begin: int = 0, end: int = LONG_MAX, io=None
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

    def structure_problem(self) -> str | None:
        """The first way the file's header, hash slots and items disagree, or None.

        A crash (or a copy taken while the file was written: ``tar`` of ``raw/``) can leave
        slots pointing at items the header does not count, or chains through items written
        after the header. Checked column-wise over the whole file (numpy): each slot is the
        newest item of its bucket (0 for an empty bucket), every prevIndex points at an older
        item of the same bucket, phyOffsets never go back, keyHash and timeDiff are not
        negative, and hashSlotCount and endPhyOffset match. Costs one read of the file (up to
        about 420 MB for the default geometry): run after an abnormal exit only.
        """
        import numpy as np

        problem = self.header_problem()
        if problem is not None:
            return problem
        slots, count = self.hash_slot_num, self.index_count
        slot = np.frombuffer(self._io.read(INDEX_HEADER_SIZE, slots * HASH_SLOT_SIZE), ">i4")
        raw = self._io.read(self._items_base + INDEX_SIZE, (count - 1) * INDEX_SIZE)
        if len(slot) != slots or len(raw) != (count - 1) * INDEX_SIZE:
            return "file shorter than its hash slots and indexCount items"
        items = np.frombuffer(
            raw, np.dtype([("h", ">i4"), ("phy", ">i8"), ("td", ">i4"), ("prev", ">i4")])
        )
        h, phy, prev = items["h"], items["phy"], items["prev"]
        n = np.arange(1, count, dtype=np.int64)
        if (h < 0).any() or (items["td"] < 0).any():
            return "an item with a negative keyHash or timeDiff"
        if ((prev < 0) | (prev >= n)).any():
            return "an item whose prevIndex is not an older item"
        bucket = h.astype(np.int64) % slots
        chained = prev > 0
        if (bucket[prev[chained] - 1] != bucket[chained]).any():
            return "an item whose prevIndex is in another hash bucket"
        if len(phy) > 1 and (np.diff(phy) < 0).any():
            return "items out of CommitLog order"
        newest = np.zeros(slots, np.int64)
        if len(bucket):
            last_first, where = np.unique(bucket[::-1], return_index=True)
            newest[last_first] = (count - 1) - where
        if (slot.astype(np.int64) != newest).any():
            s = int(np.flatnonzero(slot.astype(np.int64) != newest)[0])
            return (
                f"hash slot {s} holds item {int(slot[s])}, the newest item of its bucket "
                f"is {int(newest[s])}"
            )
        if int(np.count_nonzero(slot)) != self.hash_slot_count:
            return f"hashSlotCount {self.hash_slot_count} but {np.count_nonzero(slot)} in use"
        if count > 1 and self.end_phy_offset != int(phy[-1]):
            return f"endPhyOffset {self.end_phy_offset} != the last item's {int(phy[-1])}"
        return None

    # -- truncate -----------------------------------------------------------------------------
    def truncate(self, phy_offset: int) -> int:
        """Undo every item whose phyOffset >= ``phy_offset``; returns the new indexCount.

        Items are in CommitLog order, so they form a tail; each bucket's slot is set back to the
        prevIndex of its oldest removed item, hashSlotCount drops for buckets left empty, and
        endPhyOffset becomes the last kept item's offset. endTimestamp becomes the last kept
        item's time rounded up to the end of its second (``beginTimestamp + timeDiff*1000 +
        999``, never above the old value; exact when only the first item is left), since items
        keep seconds only. Removed items' bytes stay on disk beyond indexCount (unreachable).
        RocketMQ has no such operation: it destroys files and re-dispatches.

        Raises:
            ReadOnlyStoreError: the file was opened read-only.
        """
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.path}: index file opened read-only")
        count = self.index_count
        lo, hi = 1, count  # first item with phyOffset >= phy_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if self.item(mid)[1] >= phy_offset:
                hi = mid
            else:
                lo = mid + 1
        if lo >= count:
            return count
        self._slots = None  # reloaded from the file on the next batched put
        new_slots: dict[int, int] = {}
        slots = self.hash_slot_num
        for start in range(lo, count, _TRUNCATE_CHUNK):
            n = min(_TRUNCATE_CHUNK, count - start)
            raw = self._io.read(self._items_base + start * INDEX_SIZE, n * INDEX_SIZE)
            for key_hash, _phy, _diff, prev in ITEM.iter_unpack(raw):
                new_slots.setdefault(key_hash % slots, prev if 0 < prev < lo else INVALID_INDEX)
        for slot, value in new_slots.items():
            self._io.write(INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE, SLOT.pack(value))
        emptied = sum(1 for v in new_slots.values() if v == INVALID_INDEX)
        self.hash_slot_count = max(0, self.hash_slot_count - emptied)
        if lo > 1:
            _hash, phy, diff, _prev = self.item(lo - 1)
            self.end_phy_offset = phy
            if lo - 1 == 1:
                self.end_timestamp = self.begin_timestamp
            else:
                self.end_timestamp = max(
                    self.begin_timestamp,
                    min(self.end_timestamp, self.begin_timestamp + diff * 1000 + 999),
                )
        self.index_count = lo
        self._io.write(
            0,
            HEADER.pack(
                self.begin_timestamp,
                self.end_timestamp,
                self.begin_phy_offset,
                self.end_phy_offset,
                self.hash_slot_count,
                self.index_count,
            ),
        )
        self._dirty = True
        return lo

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> None:
        """``fdatasync`` the file if it was written since the last flush (``IndexFile.flush``)."""
        if self._dirty:
            self._io.sync()
            self._dirty = False

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


def _slot_runs(sorted_slots: list[int]):
    """``(first, length)`` runs of consecutive slot numbers."""
    if not sorted_slots:
        return
    first = prev = sorted_slots[0]
    for s in sorted_slots[1:]:
        if s != prev + 1:
            yield first, prev - first + 1
            first = s
        prev = s
    yield first, prev - first + 1


def _check_geometry(hash_slot_num: int, index_num: int) -> None:
    if hash_slot_num < 1 or index_num < 2:
        raise ValueError(
            f"bad index geometry: hashSlotNum={hash_slot_num}, "
            f"indexNum={index_num} (need >= 1 and >= 2)"
        )


class _RWLock:
    """Many readers or one writer (``ReentrantReadWriteLock`` without reentrancy).

    A waiting writer blocks new readers, so a stream of queries cannot starve it.
    """

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def read(self):
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self):
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def build_key(topic: str, key: str) -> str:
    """``IndexService.buildKey``: the string an IndexFile hashes for ``key`` (a KEYS entry or
    the UNIQ_KEY) of a record of ``topic``: ``topic#key``. ``build_key(topic, "")`` is the
    prefix shared by a topic's keys (its hash seeds the fast path's key hashes)."""
    return f"{topic}#{key}"


class IndexService:
    """The ``index/`` directory: builds and queries the key index (``IndexService``).

    Args:
        index_dir: ``<storeRoot>/index`` (created on the first key).
        hash_slot_num, index_num: ``maxHashSlotNum`` / ``maxIndexNum`` for new files.
        read_only: never write or delete; keys dispatched while read-only go to in-memory files
            (anonymous mappings) appended after the on-disk ones, so queries also cover records
            a read-only store had to index itself.
        max_msgs_num_batch: the cap on one query (``maxMsgsNumBatch``).

    Existing files (17-digit names) are opened in name order; zero-length ones are deleted
    (skipped when read-only), other names ignored. ``files`` is the list, oldest first.

    Threads: :meth:`dispatch`, :meth:`truncate`, :meth:`delete_expired`, :meth:`flush` and
    :meth:`close` are serialised by an internal lock (the store calls dispatch under its put
    lock anyway); :meth:`query` may run in other threads at the same time. Deleting or closing
    files waits for running queries.

    Raises:
        CorruptRecordError: an index file whose size fits no geometry.
    """

    # Dispatcher capabilities (engine.service.dispatch): the fast put path hands it pre-hashed keys
    # (put_hashed), and it ignores records below end_phy_offset, so recovery may skip them.
    puts_hashed_keys = True
    skips_below_end_offset = True

    def __init__(
        self,
        index_dir: str,
        hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
        index_num: int = DEFAULT_INDEX_NUM,
        read_only: bool = False,
        *,
        max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH,
    ):
        _check_geometry(hash_slot_num, index_num)
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.read_only = read_only
        self.max_msgs_num_batch = max_msgs_num_batch
        self.files: list[IndexFile] = []
        self._topic_hashes: dict[str, int] = {}  # topic -> hash of "topic#"
        self._mutex = threading.RLock()
        self._rw = _RWLock()
        names = []
        if os.path.isdir(index_dir):
            names = sorted(
                n
                for n in os.listdir(index_dir)
                if INDEX_FILE_NAME.fullmatch(n) and os.path.isfile(os.path.join(index_dir, n))
            )
        try:
            for n in names:
                path = os.path.join(index_dir, n)
                if os.path.getsize(path) == 0:  # created but never sized (crash)
                    if not read_only:
                        os.unlink(path)
                    continue
                self.files.append(IndexFile(path, hash_slot_num, index_num, read_only=read_only))
        except BaseException:
            for f in self.files:
                f.close()
            raise

    @contextmanager
    def frozen(self):
        """Hold off every change to the index files (puts, truncation, rolling, deletion)
        while the block runs; yields the list of files (a snapshot freezes them)."""
        with self._mutex:
            yield self.files

    # -- load ---------------------------------------------------------------------------------
    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> list[str]:
        """``IndexService.load``: after an abnormal exit, destroy every file whose endTimestamp
        is later than the checkpoint's ``indexMsgTimestamp`` (epoch ms); re-dispatching the
        CommitLog from :attr:`end_phy_offset` rebuilds them. Read-only: the files are only
        dropped from the list (and closed), not deleted.

        Returns:
            The names of the files dropped.
        """
        if last_exit_ok:
            return []
        with self._mutex, self._rw.write():
            keep, dropped = [], []
            for f in self.files:
                if f.end_timestamp > index_msg_timestamp:
                    f.destroy()
                    dropped.append(f.name)
                else:
                    keep.append(f)
            self.files = keep
        return dropped

    def drop_inconsistent(self, newest: int = 2, quick: bool = False) -> list[tuple[str, str]]:
        """After an abnormal exit: check the ``newest`` files (those a crash or a live copy
        can have caught mid-write) with :meth:`IndexFile.structure_problem`; the first
        inconsistent one and every newer one are destroyed (dropped only, when read-only), so
        recovery's re-dispatch from :attr:`end_phy_offset` rebuilds their entries from the
        CommitLog. RocketMQ's ``IndexService.load`` trusts a file whose endTimestamp is not
        past the checkpoint; a file copied while written can pass that test and still be torn.
        ``quick``: check only the header against the file and its slots
        (:meth:`IndexFile.header_problem`), what a writable open does after a clean exit.

        Returns:
            ``(name, problem)`` of each file dropped.
        """
        with self._mutex, self._rw.write():
            first_bad = None
            for i in range(max(0, len(self.files) - newest), len(self.files)):
                f = self.files[i]
                problem = f.header_problem() if quick else f.structure_problem()
                if problem is not None:
                    first_bad = (i, problem)
                    break
            if first_bad is None:
                return []
            i, problem = first_bad
            dropped = []
            for f in self.files[i:]:
                f.destroy()
                dropped.append(
                    (f.name, problem if f is self.files[i] else "newer than an inconsistent file")
                )
            self.files = self.files[:i]
            return dropped

    # -- properties ---------------------------------------------------------------------------
    @property
    def last_timestamp(self) -> int:
        """endTimestamp (epoch ms) of the newest file, 0 without files."""
        files = self.files
        return files[-1].end_timestamp if files else 0

    @property
    def end_phy_offset(self) -> int:
        """endPhyOffset of the newest file: records before it are indexed (0 without files)."""
        files = self.files
        return files[-1].end_phy_offset if files else 0

    def item_count(self) -> int:
        """Index items in every file (what recovery reports as rebuilt, by difference)."""
        return sum(max(0, f.index_count - 1) for f in self.files)

    # -- build --------------------------------------------------------------------------------
    def dispatch(self, batch) -> None:
        """Index a batch of dispatched records (``CommitLogDispatcherBuildIndex``/``buildIndex``).

        Each item needs ``topic``, ``commitlog_offset``, ``store_timestamp`` (epoch ms), ``keys``
        (list of str, or the raw KEYS string split on " "), ``uniq_key`` (str or None) and
        ``sys_flag``. Puts ``topic#uniqKey`` (when not None) then ``topic#key`` for each
        non-empty key; skips ROLLBACK records and records before the newest file's endPhyOffset
        (already indexed); rolls to a new file when one is full.

        One deviation: a record *at* endPhyOffset (the newest indexed one, which a restart may
        dispatch again) only gets the keys it does not have yet, so re-dispatch never doubles
        its entries. RocketMQ would index it again, but never re-dispatches it.

        Raises:
            OSError: from the disk (the keys put so far stay; :meth:`truncate` undoes them).
        """
        with self._mutex:
            entries: list[int] = []  # flat keyHash, phyOffset, storeTimestamp
            prefixes = self._topic_hashes
            last = -1  # offset of the newest pending entry
            for d in batch:
                if d.sys_flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_ROLLBACK_TYPE:
                    continue
                keys = d.keys
                if isinstance(keys, str):
                    keys = keys.split(" ")
                uniq = d.uniq_key
                if uniq is None and not keys:
                    continue
                offset = d.commitlog_offset
                if entries:
                    end_phy = last
                elif self.files:
                    end_phy = self.files[-1].end_phy_offset
                else:
                    end_phy = None
                if end_phy is not None and offset <= end_phy:
                    if offset < end_phy:
                        continue  # already indexed
                    # The newest indexed record again (a restart re-dispatching it): only the
                    # keys it lacks, one by one.
                    self._put_entries(entries)
                    entries = []
                    self._put_again(d.topic, uniq, keys, offset, d.store_timestamp)
                    continue
                topic = d.topic
                ph = prefixes.get(topic)
                if ph is None:
                    ph = java_hash_u32(build_key(topic, ""))
                    if len(prefixes) < 65536:
                        prefixes[topic] = ph
                ts = d.store_timestamp
                if uniq is not None:
                    entries += (
                        key_hash_of_u32(combine_u32(ph, java_hash_u32(uniq), utf16_len(uniq))),
                        offset,
                        ts,
                    )
                for k in keys or ():
                    if k:
                        entries += (
                            key_hash_of_u32(combine_u32(ph, java_hash_u32(k), utf16_len(k))),
                            offset,
                            ts,
                        )
                last = offset
            self._put_entries(entries)

    def _put_again(
        self, topic: str, uniq: str | None, keys, offset: int, store_timestamp: int
    ) -> None:
        idx_keys = [build_key(topic, uniq)] if uniq is not None else []
        idx_keys += [build_key(topic, k) for k in keys or () if k]
        files = self.files
        holders = []  # files that already hold items of this very record
        for f in reversed(files):
            if f.end_phy_offset != offset:
                break
            if f.index_count > 1:
                holders.append(f)
        for key in idx_keys:
            if holders and any(f.has_key_at(key, offset) for f in holders):
                continue
            self._put(key, offset, store_timestamp)

    def put_hashed(self, entries: list[int]) -> None:
        """Index pre-hashed keys of new records (the store's put path).

        ``entries`` is flat ``[keyHash, phyOffset, storeTimestamp, ...]`` in CommitLog order,
        every phyOffset after :attr:`end_phy_offset`; keyHash is
        ``index_key_hash("topic#key")``. Rolls to new files as they fill. Raises OSError.
        """
        with self._mutex:
            self._put_entries(entries)

    def _put_entries(self, entries: list[int]) -> None:
        total = len(entries) // 3
        i = 0
        while i < total:
            f = self._writable_last()
            j = f.put_hashed(entries, i)
            if j == i:
                f = self._new_file()
                j = f.put_hashed(entries, i)
                if j == i:
                    raise StoreError(f"{f.name}: a new index file refused a key")
            i = j

    def _put(self, key: str, offset: int, store_timestamp: int) -> None:
        f = self._writable_last()
        if f.put_key(key, offset, store_timestamp):
            return
        f = self._new_file()
        if not f.put_key(key, offset, store_timestamp):
            raise StoreError(f"{f.name}: a new index file refused a key")

    def _writable_last(self) -> IndexFile:
        """``getAndCreateLastIndexFile``: the newest file unless full (or on disk while
        read-only), else a new one."""
        if self.files:
            last = self.files[-1]
            if not last.is_write_full and not last.read_only:
                return last
        return self._new_file()

    def _new_file(self) -> IndexFile:
        prev = self.files[-1] if self.files else None
        end_phy = prev.end_phy_offset if prev else 0
        end_ts = prev.end_timestamp if prev else 0
        if self.read_only:
            f = IndexFile(None, self.hash_slot_num, self.index_num, end_phy, end_ts)
        else:
            os.makedirs(self.index_dir, exist_ok=True)
            name = index_file_name()
            last_name = next((g.name for g in reversed(self.files) if not g.in_memory), None)
            if last_name is not None and name <= last_name:
                name = _name_after(last_name)  # keep names unique and in creation order
            while os.path.exists(os.path.join(self.index_dir, name)):
                name = _name_after(name)
            f = IndexFile(
                os.path.join(self.index_dir, name),
                self.hash_slot_num,
                self.index_num,
                end_phy,
                end_ts,
            )
            fsync_dir(self.index_dir)
        with self._rw.write():
            self.files.append(f)
        return f

    def truncate(self, phy_offset: int) -> None:
        """Forget index entries of records at or after ``phy_offset`` (the CommitLog was cut).

        From the newest file back: a file whose items all lie at or after the cut is destroyed
        (as is an empty file whose endPhyOffset is at or after it), the first file holding
        older items is cut with :meth:`IndexFile.truncate`, and older files are untouched.
        Read-only: only in-memory files change; on-disk files keep their entries past the cut
        (stale: they point beyond the CommitLog's end, and query callers verify each offset).
        """
        with self._mutex, self._rw.write():
            while self.files:
                f = self.files[-1]
                if f.read_only:
                    break
                if f.index_count <= 1:
                    if f.end_phy_offset < phy_offset:
                        break
                    f.destroy()
                    self.files.pop()
                    continue
                if f.end_phy_offset < phy_offset:
                    break
                if f.truncate(phy_offset) > 1:
                    break
                f.destroy()
                self.files.pop()

    def delete_expired(self, min_phy_offset: int) -> int:
        """``IndexService.deleteExpiredFile``: delete files, oldest first and never the newest,
        whose endPhyOffset < ``min_phy_offset`` (the CommitLog's min offset); stops at the first
        file that is still needed. No-op when read-only. Returns the number deleted.
        """
        if self.read_only:
            return 0
        with self._mutex:
            files = list(self.files)
            if not files or files[0].end_phy_offset >= min_phy_offset:
                return 0
            victims = []
            for f in files[:-1]:
                if f.end_phy_offset >= min_phy_offset:
                    break
                victims.append(f)
            with self._rw.write():
                for f in victims:
                    self.files.remove(f)
                    f.destroy()
            return len(victims)

    def follow(self) -> list[str]:
        """Follower (read-only, another process writes ``index/``): open the files the
        writer created since, forget those it deleted (expiry), re-read the newest files'
        headers. Every file is marked ``live``. Returns the paths of the forgotten files.
        """
        try:
            names = sorted(n for n in os.listdir(self.index_dir) if INDEX_FILE_NAME.match(n))
        except FileNotFoundError:
            names = []
        with self._mutex:
            known = {f.name: f for f in self.files if not f.in_memory}
            present = set(names)
            gone = [f for f in self.files if not f.in_memory and f.name not in present]
            added = []
            newest = max(known, default="")
            for n in names:
                if n in known or n <= newest:
                    continue
                path = os.path.join(self.index_dir, n)
                try:
                    if os.path.getsize(path) == 0:
                        break  # being created: next time
                    f = IndexFile(path, self.hash_slot_num, self.index_num, read_only=True)
                except (OSError, CorruptRecordError):
                    break
                added.append(f)
            for f in self.files[-2:] + added:
                f.live = True
                if not f.in_memory:
                    f.reload_header()
            if gone or added:
                with self._rw.write():
                    self.files = [f for f in self.files if f not in gone] + added
                    for f in gone:
                        f.close()
            return [f.path for f in gone]

    # -- query --------------------------------------------------------------------------------
    def query(
        self,
        topic: str,
        key: str,
        max_num: int = MAX_MSGS_NUM_BATCH,
        begin: int = 0,
        end: int = LONG_MAX,
    ) -> list[int]:
        """CommitLog offsets of messages indexed under ``topic#key`` (``queryOffset``).

        ``max_num`` is capped at ``max_msgs_num_batch`` (64). Files are read newest first, only
        those whose time span overlaps ``[begin, end]`` (epoch ms); the scan stops at a file
        whose beginTimestamp < ``begin`` or once ``max_num`` offsets are found. Offsets come
        newest first and may include other keys with the same 32-bit hash, or repeat.

        Raises:
            CorruptRecordError: a file was truncated behind the store's back.
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        out: list[int] = []
        if max_num <= 0:
            return out
        idx_key = build_key(topic, key)
        # Under the lock, only the files to read and a reader of each (a duplicated
        # descriptor): the walks run after it, so a writer (a roll to a new file, truncation,
        # expiry) never waits for a walk, however long a damaged file makes it.
        todo = []
        with self._rw.read():
            for f in reversed(self.files):
                if f.is_time_matched(begin, end):
                    todo.append((f, f.reader()))
                if f.begin_timestamp < begin:
                    break
        try:
            for f, io in todo:
                out += f.select_phy_offsets(idx_key, max_num - len(out), begin, end, io)
                if len(out) >= max_num:
                    break
        finally:
            for _, io in todo:
                io.close()
        return out

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> int:
        """``fdatasync`` the files written since the last flush.

        Returns:
            The newest endTimestamp (epoch ms) now on disk: every key of a record stored at or
            before it is durable, so the store may write it to ``checkpoint.indexMsgTimestamp``
            (RocketMQ writes it only when a full file is flushed). 0 when read-only.
        """
        if self.read_only:
            return 0
        with self._mutex:
            ts = self.last_timestamp
            for f in self.files:
                f.flush()
            return ts

    def close(self) -> None:
        """Flush (unless read-only) and close every file (``IndexService.shutdown``)."""
        with self._mutex:
            if not self.read_only:
                self.flush()
            with self._rw.write():
                for f in self.files:
                    try:
                        f.close()
                    except OSError:
                        pass
                self.files = []
