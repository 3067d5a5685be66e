"""What a queue reader offers, whatever keeps the queue's units (RocketMQ 5.x
``ConsumeQueueInterface``).

RocketMQ reads every kind of queue through one interface, ``ConsumeQueueInterface``
(``getTopic``, ``getQueueId``, ``getMinOffsetInQueue``, ``getMaxOffsetInQueue``,
``iterateFrom``, ``get``, ``getOffsetInQueueByTime``, ``getMaxPhysicOffset``,
``correctMinOffset``), implemented by the file ``ConsumeQueue``, the ``BatchConsumeQueue`` of a
BatchCQ topic and the ``RocksDBConsumeQueue`` of a 5.2+ store. :class:`QueueReader` is that
interface here, implemented by
:class:`engine.format.consumequeue.ConsumeQueue`, :class:`engine.format.batchcq.BatchConsumeQueue`
and :class:`engine.format.rocksdbcq.RocksDBConsumeQueue`, none a subclass of another. A reader of
queues (``engine.read.columnar.StoreFiles`` and ``queue_units``, the store's
``consume_queue``, getMessage, the mount's views, verify, the Spark data source) takes a
:class:`QueueReader` and never asks which kind it has: only where a queue is opened is its
kind chosen (``StoreFiles.queue``, ``MessageStore._open``).

Units are read as ConsumeQueue units whatever the kind: 20 bytes each,
``commitLogOffset | size | tagsCode`` (:data:`engine.format.consumequeue.UNIT`), one per queue
offset (a BatchCQ queue repeats its unit for each message of an inner batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

from .mappedfile import Segment


@runtime_checkable
class QueueReader(Protocol):
    """One queue's units and offsets, read-side (``ConsumeQueueInterface``).

    Offsets are queue offsets (``[min_offset, max_offset)`` hold the units). The attributes
    are the queue's state as last recovered or caught up; a reader that follows a writer calls
    :meth:`catch_up` (and :meth:`follow_files`) first.
    """

    #: the queue (``getTopic``, ``getQueueId``)
    topic: str
    queue_id: int
    #: first queue offset readable (``getMinOffsetInQueue``)
    min_offset: int
    #: one past the last unit (``getMaxOffsetInQueue``)
    max_offset: int
    #: end (offset + size) of the last unit's record, -1 without one (``getMaxPhysicOffset``)
    max_physic_offset: int
    #: start of the last unit's record, -1 without one (``getLatestUnit``)
    last_commitlog_offset: int

    @property
    def file_count(self) -> int:
        """Number of the queue's files on disk (0 for RocksDB)."""
        ...

    @property
    def units_per_file(self) -> int:
        """Queue offsets a file holds: getMessage's scan window (``rollNextFile``)."""
        ...

    def read_units(self, start: int, count: int) -> bytes:
        """Raw 20-byte units from queue offset ``start``, at most ``count`` (fewer at a file's
        end or the queue's; empty past it)."""
        ...

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """``(commitLogOffset, size, tagsCode)`` of one unit (``get``); IndexError outside
        ``[min_offset, max_offset)``."""
        ...

    def iter_units(
        self, start: int, end: int | None = None, batch: int = 4096
    ) -> Iterator[tuple[int, int, int, int]]:
        """``(queueOffset, commitLogOffset, size, tagsCode)`` of ``[start, end)``
        (``iterateFrom``)."""
        ...

    def offset_by_time(
        self,
        timestamp: int,
        store_timestamp_at: Callable[[int, int], int],
        lo: int | None = None,
        hi: int | None = None,
    ) -> int:
        """``getOffsetInQueueByTime`` (LOWER boundary) within ``[lo, hi]`` (default the
        queue's offsets); ``store_timestamp_at(commitLogOffset, size)`` gives a record's
        STORETIMESTAMP where the units do not hold it."""
        ...

    def catch_up(self, max_units: int = 1 << 62) -> int:
        """Make the units a writer appended since visible; the number added (0 for a queue
        read as it was opened)."""
        ...

    def follow_files(self, add: bool = True) -> list[Segment]:
        """Re-list the files a writer changed; the segments dropped, whose descriptors the
        caller closes (none for a queue read as it was opened)."""
        ...

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """``correctMinOffset``: ``min_offset`` moves to the first unit whose record is still in
        the CommitLog."""
        ...

    def close(self) -> None:
        """Release what the queue holds open."""
        ...
