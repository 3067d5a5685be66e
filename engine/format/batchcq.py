"""BatchConsumeQueue: the per-queue index of a ``BatchCQ`` topic (RocketMQ 5.x
``BatchConsumeQueue``), read-only.

A topic whose attribute ``"queue.type"`` is ``"BatchCQ"`` (``QueueTypeUtils.isBatchCq``) has
its units in ``batchconsumequeue/<topic>/<queueId>/`` instead of ``consumequeue/``. Each unit
is 46 bytes, big-endian (``BatchConsumeQueue.CQ_STORE_UNIT_SIZE`` and
``putBatchMessagePositionInfo``)::

    off  size  field
    0    8     commitLogOffset   absolute offset of the record in the CommitLog
    8    4     size              TOTALSIZE of the record
    12   8     tagsCode          Java String.hashCode of TAGS (MSG_TAG_OFFSET_INDEX)
    20   8     storeTime         STORETIMESTAMP of the record, epoch ms (MSG_STORE_TIME_OFFSET_INDEX)
    28   8     msgBaseOffset     queue offset of the record's first message (MSG_BASE_OFFSET_INDEX)
    36   2     batchSize         messages in the record (MSG_BATCH_SIZE_INDEX)
    38   4     compactedOffset   -1 (INVALID_POS; MSG_COMPACT_OFFSET_INDEX)
    42   4     reserved          0

Unlike a ConsumeQueue a unit is not one queue offset: it covers queue offsets
``[msgBaseOffset, msgBaseOffset + batchSize)``. A record of an inner batch (SYSFLAG
``INNER_BATCH_FLAG``, properties ``INNER_NUM`` and ``INNER_BASE``:
``SendMessageProcessor.handlePutMessageResult`` of a batch sent to a BatchCQ topic with a
unique key) holds ``batchSize`` messages in its body (:mod:`engine.format.innerbatch`); any
other record is one message (``batchSize`` 1). Files are named by the byte position of their
first unit (unit number * 46), 300,000 units (13,800,000 bytes) a file by default
(``mapperFileSizeBatchConsumeQueue``). A unit is valid while ``commitLogOffset >= 0``,
``size > 0``, ``msgBaseOffset >= 0`` and ``batchSize > 0`` (``BatchConsumeQueue.recover``);
the first invalid one ends the queue.

rmqfs reads BatchConsumeQueues and never writes them (a store with ``batchconsumequeue/``
refuses writers: :func:`engine.service.storetree.check_layout`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError
from .mappedfile import FileQueue, Segment
from .source import LOCAL, StoreSource

if TYPE_CHECKING:
    import numpy as np

#: the directory beside ``consumequeue/`` (``StorePathConfigHelper.getStorePathBatchConsumeQueue``)
BATCH_CQ_DIR = "batchconsumequeue"
#: (numpy field name, struct format) of a unit, in file order: the one list UNIT and the
#: numpy dtype (BCQ_UNIT_DTYPE_SPEC) are built from.
BCQ_UNIT_FIELDS: tuple[tuple[str, str], ...] = (
    ("off", "q"),
    ("size", "i"),
    ("tags", "q"),
    ("store_time", "q"),
    ("base", "q"),
    ("batch", "h"),
    ("compacted", "i"),
    ("reserved", "i"),
)
BCQ_UNIT = struct.Struct(">" + "".join(fmt for _, fmt in BCQ_UNIT_FIELDS))
BCQ_STORE_UNIT_SIZE = 46
assert BCQ_UNIT.size == BCQ_STORE_UNIT_SIZE
#: BCQ_UNIT as a numpy dtype description (``np.dtype(BCQ_UNIT_DTYPE_SPEC)``)
BCQ_UNIT_DTYPE_SPEC = [(name, f">i{struct.calcsize(fmt)}") for name, fmt in BCQ_UNIT_FIELDS]
DEFAULT_BCQ_UNITS_PER_FILE = 300_000


def _dtype() -> np.dtype:
    import numpy as np

    return np.dtype(BCQ_UNIT_DTYPE_SPEC)


class BatchConsumeQueue:
    """One ``batchconsumequeue/<topic>/<queueId>`` directory, read-only
    (``BatchConsumeQueue``: ``recover``, ``getMinOffsetInQueue``, ``getMaxOffsetInQueue``,
    ``getBatchMsgIndexBuffer`` and ``getOffsetInQueueByTime``).

    Units are numpy structured arrays of :data:`BCQ_UNIT_DTYPE_SPEC`. Queue offsets are
    message numbers (``msgBaseOffset + i``), unit numbers are positions in the files.

    It is a :class:`engine.format.queue.QueueReader` (``ConsumeQueueInterface``, which
    RocketMQ's ``BatchConsumeQueue`` implements), one 20-byte unit per message
    (:meth:`read_units`, :meth:`unit`, :attr:`min_offset`, :attr:`max_offset`): the units of an
    inner batch's messages all name its record, and the reader picks the message by its queue
    offset (:func:`engine.format.innerbatch.inner_message`). So every reader of queue units
    (the mount's views, getMessage, lookups by time) reads a BatchCQ queue unchanged.

    Args:
        directory: the queue's directory.
        topic, queue_id: the queue.
        file_size: bytes per file when the files do not tell
            (``mapperFileSizeBatchConsumeQueue``).
        source: where the files are read from (:mod:`engine.format.source`; by range when
            not local).

    Raises:
        CorruptRecordError: files of different sizes or misnamed (``FileQueue``), or a file size
            that is not a multiple of 46.
    """

    def __init__(
        self,
        directory: str,
        topic: str = "",
        queue_id: int = 0,
        file_size: int = DEFAULT_BCQ_UNITS_PER_FILE * BCQ_STORE_UNIT_SIZE,
        source: StoreSource = LOCAL,
    ):
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.files = FileQueue(directory, file_size, read_only=True, derived=True, source=source)
        if self.files.file_size % BCQ_STORE_UNIT_SIZE:
            raise CorruptRecordError(
                f"{directory}: file size {self.files.file_size} is not a multiple of "
                f"{BCQ_STORE_UNIT_SIZE}"
            )
        #: unit numbers ``[first_unit, end_unit)`` hold the valid units
        self.first_unit = self.files.min_offset // BCQ_STORE_UNIT_SIZE
        self.end_unit = self.first_unit
        self.refresh()

    def refresh(self) -> None:
        """Find the end of the valid units (``BatchConsumeQueue.recover``'s rule, from the
        third-last file on; the files are not changed). Units must also go forward: a unit
        whose msgBaseOffset is not the end of the one before it ends the queue as well (a torn
        or foreign unit)."""
        import numpy as np

        end = self.first_unit
        expect = None
        #: why the valid units end before the written ones (a unit that is not zeros), or None
        self.damage: str | None = None
        segs = self.files.segments
        first = max(0, len(segs) - 3)  # the files before the third-last are full (recover)
        if segs:
            end = segs[first].start // BCQ_STORE_UNIT_SIZE
        for seg in segs[first:]:
            data = self.files.pread_segment(seg, seg.size, 0)  # its fd, else by range
            units = np.frombuffer(data, _dtype(), count=len(data) // BCQ_STORE_UNIT_SIZE)
            bad = (units["off"] < 0) | (units["size"] <= 0) | (units["base"] < 0)
            bad |= units["batch"] <= 0
            if len(units) > 1:
                ends = units["base"][:-1].astype(np.int64) + units["batch"][:-1]
                bad[1:] |= units["base"][1:] != ends
            if expect is not None and len(units):
                bad[0] |= int(units["base"][0]) != expect
            n = int(np.argmax(bad)) if bad.any() else len(units)
            end = seg.start // BCQ_STORE_UNIT_SIZE + n
            if n < len(units) and units[n].tobytes().strip(b"\0"):
                u = units[n]
                self.damage = (
                    f"unit {end} (commitLogOffset {int(u['off'])}, size {int(u['size'])}, "
                    f"msgBaseOffset {int(u['base'])}, batchSize {int(u['batch'])}) is not valid "
                    "or does not continue the unit before it: the queue ends there"
                )
            if n:
                expect = int(units["base"][n - 1]) + int(units["batch"][n - 1])
            if n < len(units):
                break
        self.end_unit = end
        self._set_bounds()

    def _set_bounds(self) -> None:
        #: one past the last message (``getMaxOffsetInQueue``); the first message still in
        #: the CommitLog once :meth:`correct_min_offset` ran (``getMinOffsetInQueue``)
        if self.end_unit <= self.first_unit:
            self.min_offset = self.max_offset = 0
            self.max_physic_offset = self.last_commitlog_offset = -1
            return
        first = self.units(self.first_unit, self.first_unit + 1)
        last = self.units(self.end_unit - 1, self.end_unit)
        self.min_offset = int(first["base"][0])
        self.max_offset = int(last["base"][0]) + int(last["batch"][0])
        self.last_commitlog_offset = int(last["off"][0])
        self.max_physic_offset = self.last_commitlog_offset + int(last["size"][0])

    # -- units ---------------------------------------------------------------------------------
    def units(self, first: int, end: int) -> np.ndarray:
        """Units numbered ``[first, end)`` (clipped to the valid ones) as a numpy array."""
        import numpy as np

        first, end = max(first, self.first_unit), min(end, self.end_unit)
        parts = []
        pos = first * BCQ_STORE_UNIT_SIZE
        stop = end * BCQ_STORE_UNIT_SIZE
        while pos < stop:
            raw = self.files.read(pos, stop - pos)
            if not raw:
                break
            parts.append(raw[: len(raw) - len(raw) % BCQ_STORE_UNIT_SIZE])
            pos += len(parts[-1])
        data = b"".join(parts)
        return np.frombuffer(data, _dtype(), count=len(data) // BCQ_STORE_UNIT_SIZE)

    def first_unit_where(self, field: str, value: int) -> int:
        """The number of the first valid unit whose ``field`` (a :data:`BCQ_UNIT_FIELDS` name,
        or ``"end"``: msgBaseOffset + batchSize) is at or above ``value``, by binary search
        (every one of them grows from unit to unit); :attr:`end_unit` when none is."""
        lo, hi = self.first_unit, self.end_unit
        while lo < hi:
            mid = (lo + hi) // 2
            u = self.units(mid, mid + 1)
            got = int(u["base"][0]) + int(u["batch"][0]) if field == "end" else int(u[field][0])
            if got >= value:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def unit_of(self, queue_offset: int) -> int:
        """The number of the unit holding ``queue_offset`` (msgBaseOffset <= it < msgBaseOffset
        + batchSize; ``getBatchMsgIndexBuffer``'s binary search), or :attr:`end_unit` when it is
        at or past the queue's end; :attr:`first_unit` when it is below the first unit."""
        return self.first_unit_where("end", queue_offset + 1)

    def _base_of(self, unit: int) -> int:
        # msgBaseOffset of unit number ``unit``; max_offset past the last one
        if unit >= self.end_unit:
            return self.max_offset
        return int(self.units(unit, unit + 1)["base"][0])

    # -- offsets -------------------------------------------------------------------------------
    def min_offset_at(self, commitlog_min: int) -> int:
        """``correctMinOffset``: the msgBaseOffset of the first unit whose record is still in
        the CommitLog (``commitLogOffset >= commitlog_min``), or :attr:`max_offset`."""
        return self._base_of(self.first_unit_where("off", commitlog_min))

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """``correctMinOffset``: :attr:`min_offset` becomes the first message whose record is
        still in the CommitLog (nothing is written)."""
        self.min_offset = max(self.min_offset, self.min_offset_at(min_commitlog_offset))

    def truncate_dirty(self, phy_offset: int) -> None:
        """Forget, in memory only, the units of records at or after CommitLog ``phy_offset``
        (a CommitLog that ends earlier: ``truncateDirtyLogicFiles`` without writing)."""
        lo = self.first_unit_where("off", phy_offset)
        if lo < self.end_unit:
            keep_min = self.min_offset
            self.end_unit = lo
            self._set_bounds()
            self.min_offset = min(max(self.min_offset, keep_min), self.max_offset)

    # -- as a ConsumeQueue (one unit per message) -------------------------------------------
    def message_units(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(off, size, tags)`` of the messages at queue offsets ``[start, end)`` (clipped to
        the queue) as int64 arrays: each unit's values repeated for each of its messages."""
        import numpy as np

        start, end = max(start, self.min_offset), min(end, self.max_offset)
        if start >= end:
            e = np.empty(0, np.int64)
            return e, e, e
        u0 = self.unit_of(start)
        u1 = self.unit_of(end - 1) + 1
        units = self.units(u0, u1)
        batch = units["batch"].astype(np.int64)
        first = int(units["base"][0])
        rep = lambda name: np.repeat(units[name].astype(np.int64), batch)  # noqa: E731
        cut = slice(start - first, end - first)
        return rep("off")[cut], rep("size")[cut], rep("tags")[cut]

    def read_units(self, start: int, count: int) -> bytes:
        """``ConsumeQueue.read_units``: the 20-byte units of ``count`` messages from queue
        offset ``start`` (fewer at the end)."""
        import numpy as np

        from .consumequeue import UNIT_DTYPE_SPEC

        off, size, tags = self.message_units(start, start + count)
        out = np.empty(len(off), np.dtype(UNIT_DTYPE_SPEC))
        out["off"], out["size"], out["tags"] = off, size, tags
        return out.tobytes()

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """``(commitLogOffset, size, tagsCode)`` of the message at ``queue_offset``.

        Raises IndexError outside ``[min_offset, max_offset)``."""
        if not self.min_offset <= queue_offset < self.max_offset:
            raise IndexError(f"queue offset {queue_offset} outside the queue")
        off, size, tags = self.message_units(queue_offset, queue_offset + 1)
        return int(off[0]), int(size[0]), int(tags[0])

    def iter_units(
        self, start: int, end: int | None = None, batch: int = 4096
    ) -> Iterator[tuple[int, int, int, int]]:
        """``ConsumeQueue.iter_units``: ``(queueOffset, commitLogOffset, size, tagsCode)``."""
        end = self.max_offset if end is None else min(end, self.max_offset)
        pos = max(start, self.min_offset)
        while pos < end:
            n = min(batch, end - pos)
            off, size, tags = self.message_units(pos, pos + n)
            for i in range(len(off)):
                yield pos + i, int(off[i]), int(size[i]), int(tags[i])
            pos += n

    @property
    def file_count(self) -> int:
        """Number of files."""
        return len(self.files.segments)

    def offset_by_time(
        self,
        timestamp: int,
        store_timestamp_at: Callable[[int, int], int] | None = None,
        lo: int | None = None,
        hi: int | None = None,
    ) -> int:
        """``getOffsetInQueueByTime`` (lower boundary): the msgBaseOffset of the first unit stored
        at or after ``timestamp`` (epoch ms, from the unit's own storeTime); when every unit is
        older, the last unit's msgBaseOffset, as ``BatchConsumeQueue.getOffsetInQueueByTime``
        answers a time at or past the last unit's (unlike the file ConsumeQueue, which
        answers its max offset); :attr:`max_offset` for a queue without units. Then brought
        into ``[lo, hi]`` where they are given (a reader's own min and max offsets).
        ``store_timestamp_at`` is not needed (the units hold their store time): the argument
        keeps :meth:`engine.format.queue.QueueReader.offset_by_time`'s signature."""
        if self.end_unit > self.first_unit and timestamp >= int(
            self.units(self.end_unit - 1, self.end_unit)["store_time"][0]
        ):
            unit = self.end_unit - 1  # at or past the last unit's time: that unit
        else:
            unit = self.first_unit_where("store_time", timestamp)
        got = self._base_of(unit)
        if lo is not None:
            got = max(got, lo)
        if hi is not None:
            got = min(got, hi)
        return got

    @property
    def units_per_file(self) -> int:
        """getMessage's scan window: the files' bytes counted as 20-byte ConsumeQueue units (the
        window a BatchCQ queue has always been read with, as the file ConsumeQueue's)."""
        from .consumequeue import CQ_STORE_UNIT_SIZE

        return self.files.file_size // CQ_STORE_UNIT_SIZE

    def follow_files(self, add: bool = True) -> list[Segment]:
        """A lock-free reader's :meth:`engine.format.consumequeue.ConsumeQueue.follow_files`:
        a BatchCQ queue is read as it was when opened (see :meth:`catch_up`). Returns no
        dropped file."""
        return []

    def catch_up(self, max_units: int = 1 << 62) -> int:
        """A lock-free reader's :meth:`engine.format.consumequeue.ConsumeQueue.catch_up`: a
        BatchCQ queue is read as it was when opened (re-reading its last three files on every
        call cost up to 41 MB of reads a query). Returns 0."""
        return 0

    def close(self) -> None:
        """Close the files."""
        self.files.close()
