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

:class:`RocksDBConsumeQueues` is the reader (read-only, :class:`engine.format.rocksdb.ReadOnlyDB`);
rmqfs writes no RocksDB ConsumeQueue (a writer refuses the store:
``engine.service.storetree.foreign_layouts``).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable

from ..errors import CorruptRecordError
from .consumequeue import CQ_STORE_UNIT_SIZE, DEFAULT_UNITS_PER_FILE, UNIT, ConsumeQueue
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


class _UnitBytes:
    """The read-only ``files`` of a :class:`RocksDBConsumeQueue`: the queue's units as the byte
    stream of a file ConsumeQueue (unit ``n`` at byte ``n * 20``), served from RocksDB, with
    the attributes the store's readers ask a :class:`engine.format.mappedfile.FileQueue`."""

    read_only = True
    file_size = DEFAULT_UNITS_PER_FILE * CQ_STORE_UNIT_SIZE  # getmessage's scan window

    def __init__(self, db: RocksDBConsumeQueues, topic: str, queue_id: int, first: int):
        self.db, self.topic, self.queue_id = db, topic, queue_id
        self.directory = db.db.path
        self.min_offset = first * CQ_STORE_UNIT_SIZE
        self.repairs: list[str] = []
        self.segments: list = []  # no files

    def read(self, offset: int, length: int) -> bytes:
        """Units covering bytes ``[offset, offset + length)`` (whole units; shorter at a gap)."""
        start = offset // CQ_STORE_UNIT_SIZE
        return self.db.read_units(self.topic, self.queue_id, start, length // CQ_STORE_UNIT_SIZE)

    def dup_segments(self, dup: Callable[[int], int] | None = None) -> list[tuple[int, int, int]]:
        """No files: a snapshot copies none."""
        return []

    def flush(self, start: int = 0, end: int | None = None) -> None:
        """Nothing is written."""

    def close(self) -> None:
        """The database is closed by its owner (:meth:`RocksDBConsumeQueues.close`)."""


class RocksDBConsumeQueue(ConsumeQueue):
    """One queue of a RocksDB ConsumeQueue store, read-only, with the read interface of a file
    :class:`engine.format.consumequeue.ConsumeQueue` (units, min/max offsets, in-memory units
    past the dispatch checkpoint a read-only recovery adds): the store's callers are unchanged.

    ``recover`` takes the ``offset`` family's max (``getMaxOffsetInQueue``: cqOffset + 1) and
    min (``getMinCqOffset``; the first unit present from there, as units the compaction filter
    dropped are gone); the store's recovery then cuts units past the CommitLog's end
    (``truncateDirty``) and moves the min past expired records (``correctMinCqOffset``).
    """

    def __init__(self, db: RocksDBConsumeQueues, topic: str, queue_id: int):
        self.topic = topic
        self.queue_id = queue_id
        self.db = db
        self.lock = threading.Lock()
        self.mem = bytearray()
        self.mem_base = 0
        self.min_offset = self.max_offset = 0
        self.max_physic_offset = -1
        #: what :meth:`recover` found wrong with this queue alone (the store notes it as the
        #: queue's damage, verify as an error), or None
        self.damage: str | None = None
        self._flushed_to = 0
        self.last_commitlog_offset = -1
        self._bytes = _UnitBytes(db, topic, queue_id, 0)
        self.files = self._bytes  # type: ignore[assignment]

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
            self._bytes.min_offset = end * CQ_STORE_UNIT_SIZE
            return
        self.min_offset = self._flushed_to = first
        self._bytes.min_offset = first * CQ_STORE_UNIT_SIZE
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
                self._bytes.min_offset = first * CQ_STORE_UNIT_SIZE
                return
            end = last + 1
            have = self.db.read_units(self.topic, self.queue_id, last, 1)
        off, size, _ = UNIT.unpack(have)
        self.max_offset = end
        self.last_commitlog_offset, self.max_physic_offset = off, off + size

    def catch_up(self, max_units: int = 1 << 62) -> int:
        """A lock-free reader's :meth:`engine.format.consumequeue.ConsumeQueue.catch_up`: a
        RocksDB queue is read as the database was when opened. Returns 0."""
        return 0

    def follow_files(self, add: bool = True) -> list[Segment]:
        """No files to follow (the database is read as opened). Returns []."""
        return []

    def read_units(self, start: int, count: int) -> bytes:
        """Units from ``start``; CorruptRecordError when one inside ``[min, max)`` is missing
        (a file ConsumeQueue's reader would find it)."""
        raw = super().read_units(start, count)
        in_mem = bool(self.mem) and start >= self.mem_base
        if not raw and count > 0 and self.min_offset <= start < self.max_offset and not in_mem:
            raise CorruptRecordError(
                f"RocksDB ConsumeQueue {self.topic}/{self.queue_id}: unit {start} is missing"
            )
        return raw

    @property
    def file_count(self) -> int:
        """No ConsumeQueue files."""
        return 0
