"""RocksDB ConsumeQueues (RocketMQ 5.2+, ``storeType=defaultRocksDB``): layout and reader.

The database is ``consumequeue/`` itself (``RocksDBConsumeQueueStore``, the path of
``StorePathConfigHelper.getStorePathConsumeQueue``; a double-write broker,
``rocksdbCQDoubleWriteEnable``, ``CombineConsumeQueueStore``, puts its files beside the topic
directories), with two column families (``ConsumeQueueRocksDBStorage.postLoad``). All integers
are big-endian (Java ``ByteBuffer``), strings UTF-8, ``CTRL_1`` = 0x01::

    family "default": one unit per (topic, queueId, queue offset)
      key    int topicLen | 0x01 | topic | 0x01 | int queueId | 0x01 | long cqOffset
      value  long commitLogOffset | int size | long tagsCode | long storeTimestamp   (28 bytes)
             (RocksDBConsumeQueueTable.buildCQKeyByteBuffer0 / buildCQValueByteBuffer0)

    family "offset": each queue's max and min unit
      key    int topicLen | 0x01 | topic | 0x01 | "max" or "min" | 0x01 | int queueId
      value  long commitLogOffset | long cqOffset                                    (16 bytes)
             (RocksDBConsumeQueueOffsetTable.buildOffsetKeyByteBuffer0 /
             buildOffsetValueByteBuffer0)
      topic ``CHECKPOINT_TOPIC`` ("max", queue 0) holds an 8-byte long: the highest CommitLog
      offset the dispatch wrote (``appendMaxPhyOffset``, ``getMaxPhyOffset``).

Every key orders bytewise as the numbers it holds (non-negative big-endian), so a queue's
units are one contiguous range of ``default``, read with one seek.

A queue (``RocksDBConsumeQueueStore``): its max offset is the ``max`` entry's cqOffset + 1
(``getMaxOffsetInQueue``; 0 without one), its min offset the ``min`` entry's cqOffset
(``getMinCqOffset``; 0 without one), moved to the first unit whose record is still in the
CommitLog by the reader above (``correctMinCqOffset``); units below the CommitLog's min may be
gone (``ConsumeQueueCompactionFilterFactory``) and a range read stops at the first missing
unit (``RocksDBConsumeQueueTable.rangeQuery``).

:class:`RocksDBConsumeQueues` is the reader (read-only, :class:`engine.format.rocksdb.ReadOnlyDB`),
:class:`RocksDBConsumeQueue` one queue of it (an :class:`engine.format.queue.QueueReader`);
rmqfs writes no RocksDB ConsumeQueue (a writer refuses the store:
``engine.service.storetree.foreign_layouts``).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator

from ..errors import CorruptRecordError
from .consumequeue import (
    CQ_STORE_UNIT_SIZE,
    DEFAULT_UNITS_PER_FILE,
    UNIT,
    first_live_unit,
    first_unit_from,
    iter_queue_units,
    queue_unit,
    read_held_units,
    search_by_time,
)
from .mappedfile import Segment
from .rocksdb import CTRL_1, ReadOnlyDB

#: The column family of the offset table (``ConsumeQueueRocksDBStorage.OFFSET_COLUMN_FAMILY``).
OFFSET_FAMILY = "offset"
#: The topic of the dispatch checkpoint (``TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC``).
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
MAX_BYTES = b"max"
MIN_BYTES = b"min"

#: key prefix: int topicLen | CTRL_1 (the topic follows)
KEY_HEAD = struct.Struct(">iB")
#: unit key after the topic: CTRL_1 | int queueId | CTRL_1 | long cqOffset
CQ_KEY_TAIL = struct.Struct(">BiBq")
#: unit value (``RocksDBConsumeQueueTable.CQ_UNIT_SIZE`` = 28)
CQ_VALUE = struct.Struct(">qiqq")  # commitLogOffset | size | tagsCode | storeTimestamp
#: offset key after the topic: CTRL_1 | "max"/"min" | CTRL_1 | int queueId
OFFSET_KEY_TAIL = struct.Struct(">B3sBi")
#: offset value: long commitLogOffset | long cqOffset
OFFSET_VALUE = struct.Struct(">qq")
#: the checkpoint's value: long maxPhyOffset
CHECKPOINT_VALUE = struct.Struct(">q")
assert CQ_VALUE.size == 28 and OFFSET_VALUE.size == 16


def cq_key(topic: str, queue_id: int, cq_offset: int) -> bytes:
    """The ``default`` key of one unit (``RocksDBConsumeQueueTable.buildCQKeyByteBuffer0``)."""
    t = topic.encode()
    return KEY_HEAD.pack(len(t), CTRL_1) + t + CQ_KEY_TAIL.pack(CTRL_1, queue_id, CTRL_1, cq_offset)


def queue_prefix(topic: str, queue_id: int) -> bytes:
    """The ``default`` key prefix of a queue's units (up to the CTRL_1 before cqOffset)."""
    return cq_key(topic, queue_id, 0)[:-8]


def offset_key(topic: str, queue_id: int, maximum: bool) -> bytes:
    """The ``offset`` key (``RocksDBConsumeQueueOffsetTable.buildOffsetKeyByteBuffer0``)."""
    t = topic.encode()
    return (
        KEY_HEAD.pack(len(t), CTRL_1)
        + t
        + OFFSET_KEY_TAIL.pack(CTRL_1, MAX_BYTES if maximum else MIN_BYTES, CTRL_1, queue_id)
    )


def decode_offset_key(key: bytes) -> tuple[str, bool, int]:
    """``(topic, is_max, queueId)`` of an ``offset`` key; CorruptRecordError otherwise
    (``RocksDBConsumeQueueOffsetTable.forEach``)."""
    if len(key) < KEY_HEAD.size + OFFSET_KEY_TAIL.size:
        raise CorruptRecordError(f"RocksDB ConsumeQueue offset key {key.hex()} is too short")
    n, c = KEY_HEAD.unpack_from(key)
    tail = KEY_HEAD.size + n
    if c != CTRL_1 or n < 0 or len(key) != tail + OFFSET_KEY_TAIL.size:
        raise CorruptRecordError(f"RocksDB ConsumeQueue offset key {key.hex()} is malformed")
    c1, kind, c2, qid = OFFSET_KEY_TAIL.unpack_from(key, tail)
    if c1 != CTRL_1 or c2 != CTRL_1 or kind not in (MAX_BYTES, MIN_BYTES):
        raise CorruptRecordError(f"RocksDB ConsumeQueue offset key {key.hex()} is malformed")
    try:
        topic = key[KEY_HEAD.size : tail].decode()
    except UnicodeDecodeError:
        raise CorruptRecordError(
            f"RocksDB ConsumeQueue offset key {key.hex()}: topic not UTF-8"
        ) from None
    return topic, kind == MAX_BYTES, qid


class RocksDBConsumeQueues:
    """The RocksDB ConsumeQueues of a store, read-only (``RocksDBConsumeQueueStore``).

    Args:
        path: the database directory (the store's ``consumequeue/``).

    Raises:
        CorruptRecordError: RocksDB cannot open it, or it lacks the ``offset`` family.
    """

    def __init__(self, path: str):
        self.db = ReadOnlyDB(path)
        self.units_cf = self.db.family("default")
        self.offset_cf = self.db.family(OFFSET_FAMILY)
        self._queues: dict[str, list[int]] | None = None

    def queues(self) -> dict[str, list[int]]:
        """``{topic: sorted queue ids}`` of every queue with a ``max`` entry
        (``scanAllQueueIdInTopic``, ``loadMaxConsumeQueueOffsets``); the checkpoint topic left
        out. Raises CorruptRecordError for a malformed key."""
        if self._queues is not None:  # the database is read as it was at the open
            return self._queues
        out: dict[str, set[int]] = {}
        for key in self.offset_cf.keys():  # noqa: SIM118 - an Rdict, not a dict
            assert isinstance(key, bytes)  # a raw-mode database's keys are bytes
            topic, is_max, qid = decode_offset_key(key)
            if is_max and topic != CHECKPOINT_TOPIC:
                out.setdefault(topic, set()).add(qid)
        self._queues = {t: sorted(q) for t, q in sorted(out.items())}
        return self._queues

    def _entry(self, topic: str, queue_id: int, maximum: bool) -> tuple[int, int] | None:
        raw = self.offset_cf.get(offset_key(topic, queue_id, maximum))
        if raw is None:
            return None
        if len(raw) != OFFSET_VALUE.size:
            raise CorruptRecordError(
                f"RocksDB ConsumeQueue {topic}/{queue_id}: offset value of {len(raw)} bytes, not 16"
            )
        return OFFSET_VALUE.unpack(raw)

    def max_entry(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """``(commitLogOffset, cqOffset)`` of the queue's last unit (``getMaxPhyAndCqOffsetInKV``),
        None without one."""
        return self._entry(topic, queue_id, True)

    def min_entry(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """``(commitLogOffset, cqOffset)`` of the queue's first unit (``getMinPhyAndCqOffsetInKV``),
        None without one."""
        return self._entry(topic, queue_id, False)

    def max_phy_offset(self) -> int:
        """The highest CommitLog offset the dispatch wrote (``getMaxPhyOffset``; 0 without)."""
        raw = self.offset_cf.get(offset_key(CHECKPOINT_TOPIC, 0, True))
        if raw is None:
            return 0
        if len(raw) != CHECKPOINT_VALUE.size:
            raise CorruptRecordError("RocksDB ConsumeQueue checkpoint value is not 8 bytes")
        return CHECKPOINT_VALUE.unpack(raw)[0]

    def first_at_or_after(self, topic: str, queue_id: int, cq_offset: int) -> int | None:
        """The first queue offset ``>= cq_offset`` that has a unit, None when none has."""
        prefix = queue_prefix(topic, queue_id)
        it = self.units_cf.iter()
        it.seek(prefix + struct.pack(">q", max(0, cq_offset)))
        if it.valid():
            key = it.key()
            if key.startswith(prefix) and len(key) == len(prefix) + 8:
                return struct.unpack_from(">q", key, len(prefix))[0]
        return None

    def last_at_or_before(self, topic: str, queue_id: int, cq_offset: int) -> int | None:
        """The last queue offset ``<= cq_offset`` that has a unit, None when none has."""
        if cq_offset < 0:
            return None
        prefix = queue_prefix(topic, queue_id)
        it = self.units_cf.iter()
        it.seek_for_prev(prefix + struct.pack(">q", cq_offset))
        if it.valid():
            key = it.key()
            if key.startswith(prefix) and len(key) == len(prefix) + 8:
                return struct.unpack_from(">q", key, len(prefix))[0]
        return None

    def read_units(self, topic: str, queue_id: int, start: int, count: int) -> bytes:
        """The units of queue offsets ``[start, start + count)`` as 20-byte ConsumeQueue units
        (:data:`engine.format.consumequeue.UNIT`: commitLogOffset | size | tagsCode), stopping
        at the first missing one (``rangeQuery``): shorter, or empty, then.

        Raises CorruptRecordError for a value that is not 28 bytes."""
        if count <= 0:
            return b""
        prefix = queue_prefix(topic, queue_id)
        it = self.units_cf.iter()
        want = max(0, start)
        it.seek(prefix + struct.pack(">q", want))
        out = bytearray()
        end = start + count
        while want < end and it.valid():
            key = it.key()
            if len(key) != len(prefix) + 8 or not key.startswith(prefix):
                break
            if struct.unpack_from(">q", key, len(prefix))[0] != want:
                break  # a gap: the range ends (rangeQuery stops at the first null)
            value = it.value()
            if len(value) != CQ_VALUE.size:
                raise CorruptRecordError(
                    f"RocksDB ConsumeQueue {topic}/{queue_id}: unit {want} has a "
                    f"{len(value)}-byte value, not {CQ_VALUE.size}"
                )
            out += value[:20]  # commitLogOffset | size | tagsCode, as a file unit
            want += 1
            it.next()
        assert len(out) % CQ_STORE_UNIT_SIZE == 0 and UNIT.size == 20
        return bytes(out)

    def close(self) -> None:
        """Close the database."""
        self.db.close()


class RocksDBConsumeQueue:
    """One queue of a RocksDB ConsumeQueue store, read-only (RocketMQ 5.2+
    ``RocksDBConsumeQueue``, a ``ConsumeQueueInterface`` as the file ``ConsumeQueue`` is): a
    :class:`engine.format.queue.QueueReader`, with what the store's read-only recovery asks of
    a queue besides (:meth:`recover`, :meth:`truncate_dirty`, :meth:`truncate_to`, units past
    the dispatch checkpoint held in memory by :meth:`put_units`). It is not a
    :class:`engine.format.consumequeue.ConsumeQueue` and has no files: units are read from the
    database (:meth:`RocksDBConsumeQueues.read_units`); the unit rules the two share are
    functions of :mod:`engine.format.consumequeue`.

    ``recover`` takes the ``offset`` family's max (``getMaxOffsetInQueue``: cqOffset + 1) and
    min (``getMinCqOffset``; the first unit present from there, as units the compaction filter
    dropped are gone); the store's recovery then cuts units past the CommitLog's end
    (``truncateDirty``) and moves the min past expired records (``correctMinCqOffset``).
    """

    #: getMessage's scan window (queue offsets read at most in one pull), a file
    #: ConsumeQueue's default file
    units_per_file = DEFAULT_UNITS_PER_FILE
    #: no ConsumeQueue files
    file_count = 0

    def __init__(self, db: RocksDBConsumeQueues, topic: str, queue_id: int):
        self.topic = topic
        self.queue_id = queue_id
        self.db = db
        self.lock = threading.Lock()
        #: units a read-only recovery re-dispatched past the database's (the CommitLog's
        #: records after the dispatch checkpoint), from queue offset ``mem_base``
        self.mem = bytearray()
        self.mem_base = 0
        self.min_offset = self.max_offset = 0
        self.max_physic_offset = -1
        self.last_commitlog_offset = -1
        #: what :meth:`recover` found wrong with this queue alone (the store notes it as the
        #: queue's damage, verify as an error), or None
        self.damage: str | None = None
        #: what recovery repaired in this queue (in memory: the database is never written)
        self.repairs: list[str] = []

    def recover(self) -> None:
        """Read the queue's max and min from the ``offset`` family (class docstring)."""
        top = self.db.max_entry(self.topic, self.queue_id)
        if top is None:
            return
        low = self.db.min_entry(self.topic, self.queue_id)
        lo = low[1] if low is not None else 0
        first = self.db.first_at_or_after(self.topic, self.queue_id, lo)
        end = top[1] + 1
        if first is None or first >= end:
            self.min_offset = self.max_offset = end
            return
        self.min_offset = first
        # the units must be there up to max: the last one read tells the max physic offset.
        # When it is missing the damage stays in this queue (as a file queue's torn tail
        # does): it ends after the last unit present, and the store notes the damage.
        have = self.db.read_units(self.topic, self.queue_id, end - 1, 1)
        if not have:
            last = self.db.last_at_or_before(self.topic, self.queue_id, end - 1)
            self.damage = (
                f"RocksDB ConsumeQueue {self.topic}/{self.queue_id}: the offset table's max "
                f"unit {end - 1} is missing"
                + ("" if last is None or last < first else f"; served up to unit {last}")
            )
            if last is None or last < first:
                self.min_offset = self.max_offset = first
                return
            end = last + 1
            have = self.db.read_units(self.topic, self.queue_id, last, 1)
        off, size, _ = UNIT.unpack(have)
        self.max_offset = end
        self.last_commitlog_offset, self.max_physic_offset = off, off + size

    # -- read ---------------------------------------------------------------------------------
    def catch_up(self, max_units: int = 1 << 62) -> int:
        """A lock-free reader's :meth:`engine.format.consumequeue.ConsumeQueue.catch_up`: a
        RocksDB queue is read as the database was when opened. Returns 0."""
        return 0

    def follow_files(self, add: bool = True) -> list[Segment]:
        """No files to follow (the database is read as opened). Returns []."""
        return []

    def writer_deleted(self) -> bool:
        """False: the database is read as it was when opened."""
        return False

    def read_units(self, start: int, count: int) -> bytes:
        """Units from ``start`` (at most ``count``, whole units; shorter at a gap); those past
        ``mem_base`` from memory. CorruptRecordError when one inside ``[min, max)`` is missing
        (a file ConsumeQueue's reader would find it)."""
        raw = read_held_units(
            start, count, (self.min_offset, self.max_offset), self.mem, self.mem_base, self._stored
        )
        in_mem = bool(self.mem) and start >= self.mem_base
        if not raw and count > 0 and self.min_offset <= start < self.max_offset and not in_mem:
            raise CorruptRecordError(
                f"RocksDB ConsumeQueue {self.topic}/{self.queue_id}: unit {start} is missing"
            )
        return raw

    def _stored(self, start: int, count: int) -> bytes:
        return self.db.read_units(self.topic, self.queue_id, start, count)

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """``(commitLogOffset, size, tagsCode)`` of one unit. Raises IndexError if absent."""
        return queue_unit(self, queue_offset)

    def iter_units(
        self, start: int, end: int | None = None, batch: int = 4096
    ) -> Iterator[tuple[int, int, int, int]]:
        """Yield ``(queueOffset, commitLogOffset, size, tagsCode)`` for ``[start, end)``."""
        return iter_queue_units(self, start, end, batch)

    def offset_by_time(
        self,
        timestamp: int,
        store_timestamp_at: Callable[[int, int], int],
        lo: int | None = None,
        hi: int | None = None,
    ) -> int:
        """``getOffsetInQueueByTime`` (LOWER boundary), the binary search of
        :func:`engine.format.consumequeue.search_by_time` over ``[lo, hi)`` (default
        ``[min_offset, max_offset)``)."""
        lo = self.min_offset if lo is None else lo
        end = self.max_offset if hi is None else hi
        return search_by_time(self.unit, timestamp, store_timestamp_at, lo, end)

    # -- recovery (in memory: the database is never written) ----------------------------------
    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """``correctMinCqOffset``: ``min_offset`` moves to the first unit whose record is still
        in the CommitLog."""
        self.min_offset = first_live_unit(self, min_commitlog_offset)

    def truncate_dirty(self, phy_offset: int) -> None:
        """Forget the units whose record starts at or after ``phy_offset`` (``truncateDirty``)."""
        self.truncate_to(first_unit_from(self, phy_offset))

    def truncate_to(self, queue_offset: int) -> None:
        """Forget the units at and after ``queue_offset``."""
        lo = max(queue_offset, self.min_offset)
        if lo >= self.max_offset:
            return
        self.max_offset = lo
        if self.mem:
            keep = max(0, lo - self.mem_base) * CQ_STORE_UNIT_SIZE
            del self.mem[keep:]
        if lo > self.min_offset:
            off, size, _ = self.unit(lo - 1)
            self.last_commitlog_offset, self.max_physic_offset = off, off + size
        else:
            self.last_commitlog_offset = self.max_physic_offset = -1

    def put_units(self, first_queue_offset: int, units: bytes) -> None:
        """Hold units a read-only recovery re-dispatched from the CommitLog, in memory, from
        ``first_queue_offset`` (must equal ``max_offset``)."""
        if first_queue_offset != self.max_offset:
            raise ValueError(
                f"{self.topic}/{self.queue_id}: unit {first_queue_offset} does not "
                f"follow {self.max_offset}"
            )
        if not self.mem:
            self.mem_base = first_queue_offset
            if self.max_offset == self.min_offset == 0:
                self.min_offset = first_queue_offset
        self.mem += units
        self.max_offset += len(units) // CQ_STORE_UNIT_SIZE
        off, size, _ = UNIT.unpack_from(units, len(units) - CQ_STORE_UNIT_SIZE)
        self.last_commitlog_offset, self.max_physic_offset = off, off + size

    def put_unit(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> None:
        """:meth:`put_units` of one unit (``ConsumeQueue.put_unit``'s signature)."""
        self.put_units(queue_offset, UNIT.pack(commitlog_offset, size, tags_code))

    def flush(self) -> None:
        """Nothing is written."""

    def touch_written(self) -> None:
        """Nothing is written (``ConsumeQueue.touch_written``)."""

    def close(self) -> None:
        """The database is closed by its owner (:meth:`RocksDBConsumeQueues.close`)."""
