"""ConsumeQueue: the per-queue index of CommitLog positions (``ConsumeQueue``).

Each unit is 20 bytes, big-endian (docs/format.md, ``ConsumeQueue.CQ_STORE_UNIT_SIZE``)::

    off  size  field
    0    8     commitLogOffset   absolute offset of the record in the CommitLog
    8    4     size              TOTALSIZE of the record
    12   8     tagsCode          Java String.hashCode of TAGS (0 without tags); for
                                 SCHEDULE_TOPIC_XXXX the deliver timestamp (epoch ms)

Files live in ``consumequeue/<topic>/<queueId>/`` and are named by the byte offset of their
first unit (``queueOffset * 20``), 300,000 units (6,000,000 bytes) per file by default. A unit
is valid while ``commitLogOffset >= 0 and size > 0``; the first invalid one ends the queue.
A unit ``(0, Integer.MAX_VALUE, 0)`` is the blank filler RocketMQ writes before the first unit of
a queue that starts at a non-zero offset (``fillPreBlank``).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .mappedfile import FileQueue, Segment
from .source import LOCAL, StoreSource

if TYPE_CHECKING:
    from .queue import QueueReader

CQ_STORE_UNIT_SIZE = 20
#: (numpy field name, struct format) of a unit: commitLogOffset | size | tagsCode. The one list
#: UNIT, pack_units and the numpy dtype (UNIT_DTYPE_SPEC; ``engine.read.columnar.UNIT_DTYPE``) are
#: built from.
UNIT_FIELDS: tuple[tuple[str, str], ...] = (("off", "q"), ("size", "i"), ("tags", "q"))
_UNIT_FORMAT = "".join(fmt for _, fmt in UNIT_FIELDS)
UNIT = struct.Struct(">" + _UNIT_FORMAT)  # commitLogOffset | size | tagsCode
assert UNIT.size == CQ_STORE_UNIT_SIZE
#: UNIT as a numpy dtype description (``np.dtype(UNIT_DTYPE_SPEC)``; numpy is imported lazily).
UNIT_DTYPE_SPEC = [(name, f">i{struct.calcsize(fmt)}") for name, fmt in UNIT_FIELDS]
_UNIT_DTYPE = UNIT_DTYPE_SPEC
DEFAULT_UNITS_PER_FILE = 300_000
#: Bytes of a ConsumeQueue file :meth:`ConsumeQueue.recover` reads first (3,276 units), doubled
#: each read up to RECOVER_CHUNK_MAX while the units go on.
RECOVER_CHUNK = 3276 * CQ_STORE_UNIT_SIZE
RECOVER_CHUNK_MAX = 16 << 20
BLANK_UNIT_SIZE = 0x7FFFFFFF
_UNITS_STRUCTS: dict[int, struct.Struct] = {}


_QUEUE_DIR_NAME = re.compile(r"(?:0|[1-9][0-9]{0,8})\Z")


def queue_dir_id(name: str) -> int | None:
    """The queueId a ``consumequeue/<topic>/<name>`` directory stands for: a canonical decimal
    of at most 9 ASCII digits (``0``, or no leading zero), else None: ``007``, ``+1``, ``²`` or
    ``1\n`` are not queues, and the store and every reader ignore them (verify warns)."""
    return int(name) if _QUEUE_DIR_NAME.match(name) else None


def store_file_size(qdirs: list[str], source: StoreSource = LOCAL) -> tuple[int, bool]:
    """The ConsumeQueue file size of a store from its queue directories: the most common size
    among files that are not the last of their queue (those are complete), else among all
    non-empty files (sizes a multiple of 20 only).

    Returns ``(size in bytes or 0 when no file tells, trusted)``: ``trusted`` is False when
    the only evidence is one file (a lone torn file could be shorter than the real size).
    """
    from .mappedfile import segment_names

    full: dict[int, int] = {}
    every: dict[int, int] = {}
    for qdir in qdirs:
        try:
            names = segment_names(qdir, source)
        except OSError:
            continue
        for i, n in enumerate(names):
            try:
                size = source.file_size(os.path.join(qdir, n))
            except OSError:
                continue
            if size and size % CQ_STORE_UNIT_SIZE == 0:
                every[size] = every.get(size, 0) + 1
                if i < len(names) - 1:
                    full[size] = full.get(size, 0) + 1
    sizes = full or every
    if not sizes:
        return 0, False
    return max(sizes, key=lambda k: (sizes[k], k)), bool(full) or sum(every.values()) >= 2


def deliver_tags_code(
    delay: str | None, store_timestamp: int, delay_levels: dict[int, int]
) -> int | None:
    """The tagsCode of a ``SCHEDULE_TOPIC_XXXX`` record's unit: its deliver time (epoch ms),
    ``CommitLog.checkMessageAndReturnSize`` with ``computeDeliverTimestamp``.

    ``delay`` is the record's DELAY property, ``delay_levels`` ``{level: delay ms}``
    (``StoreConfig.delay_level_table``). The level is capped at the highest one; a level
    without a delay waits 1 s. Returns None when the property is missing, not a number or 0:
    the unit then keeps the tag hash (the store's dispatch and ``verify`` share this rule).
    """
    try:
        level = int(delay) if delay else 0
    except ValueError:
        return None
    if not level:
        return None
    if delay_levels:
        level = min(level, max(delay_levels))
    wait = delay_levels.get(level)
    return store_timestamp + (wait if wait is not None else 1000)


def pack_units(flat: list[int]) -> bytes:
    """Encode units from a flat ``[commitLogOffset, size, tagsCode, ...]`` list in one pack."""
    n = len(flat) // 3
    st = _UNITS_STRUCTS.get(n)
    if st is None:
        st = struct.Struct(">" + _UNIT_FORMAT * n)
        if len(_UNITS_STRUCTS) < 1024:
            _UNITS_STRUCTS[n] = st
    return st.pack(*flat)


def search_by_time(
    unit_at: Callable[[int], tuple[int, int, int]],
    timestamp: int,
    store_timestamp_at: Callable[[int, int], int],
    lo: int,
    hi: int,
) -> int:
    """The binary search of ``getOffsetInQueueByTime`` (LOWER boundary) over queue offsets
    ``[lo, hi)``: the first whose record was stored at or after ``timestamp`` (epoch ms), or
    ``hi`` when every one is older. ``unit_at(queueOffset)`` gives a unit's
    ``(commitLogOffset, size, tagsCode)`` (a ConsumeQueue's files, or range reads of a snapshot
    in object storage); ``store_timestamp_at(commitLogOffset, size)`` a record's STORETIMESTAMP
    (raising CorruptRecordError where no record is). Blank filler units (``fillPreBlank``) have
    no record: the first real unit after one stands for it. They are a prefix of the queue
    (``fillPreBlank`` fills the first file up to the first unit), which is stepped over by
    galloping and halving: a lookup reads a number of units that grows with the log of the
    filler, not with the filler (a whole file of it is 300,000 units)."""
    end = hi
    if lo < hi and unit_at(lo)[1] == BLANK_UNIT_SIZE:
        blank, step = lo, 1  # ``blank``: a filler unit; the real ones follow the prefix
        while blank + step < hi and unit_at(blank + step)[1] == BLANK_UNIT_SIZE:
            blank, step = blank + step, step * 2
        real = min(blank + step, hi)  # a real unit, or the end
        while real - blank > 1:
            mid = (blank + real) // 2
            if unit_at(mid)[1] == BLANK_UNIT_SIZE:
                blank = mid
            else:
                real = mid
        lo = real
    while lo < hi:
        mid = (lo + hi) // 2
        probe = mid
        off, size, _ = unit_at(probe)
        while size == BLANK_UNIT_SIZE and probe + 1 < hi:
            probe += 1
            off, size, _ = unit_at(probe)
        if size == BLANK_UNIT_SIZE or store_timestamp_at(off, size) >= timestamp:
            hi = mid
        else:
            lo = probe + 1
    while lo < end and unit_at(lo)[1] == BLANK_UNIT_SIZE:  # the real unit, not filler
        lo += 1
    return lo


def queue_unit(q: QueueReader, queue_offset: int) -> tuple[int, int, int]:
    """``(commitLogOffset, size, tagsCode)`` of one unit of ``q``, read through its
    ``read_units`` (``ConsumeQueueInterface.get``). Raises IndexError if absent."""
    if not q.min_offset <= queue_offset < q.max_offset:
        raise IndexError(queue_offset)
    return UNIT.unpack(q.read_units(queue_offset, 1))


def iter_queue_units(
    q: QueueReader, start: int, end: int | None, batch: int
) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(queueOffset, commitLogOffset, size, tagsCode)`` for ``[start, end)`` of ``q``
    (clipped to its offsets), read ``batch`` units at a time through its ``read_units``
    (``ConsumeQueueInterface.iterateFrom``); stops at the first read that finds none."""
    end = q.max_offset if end is None else min(end, q.max_offset)
    pos = max(start, q.min_offset)
    while pos < end:
        raw = q.read_units(pos, min(batch, end - pos))
        if not raw:
            return
        for off, size, tags in UNIT.iter_unpack(raw):
            yield pos, off, size, tags
            pos += 1


def first_unit_from(q: QueueReader, phy_offset: int) -> int:
    """The first queue offset of ``q`` whose unit's commitLogOffset is ``>= phy_offset``
    (``max_offset`` when none is), by binary search: where ``truncateDirtyLogicFiles`` cuts."""
    lo, hi = q.min_offset, q.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        if q.unit(mid)[0] >= phy_offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


def first_live_unit(q: QueueReader, min_commitlog_offset: int) -> int:
    """The first queue offset of ``q`` whose record is still in the CommitLog (not blank
    filler, commitLogOffset ``>= min_commitlog_offset``), ``max_offset`` when none is
    (``correctMinOffset``), by binary search over the units' commitLogOffsets.

    Blank filler units (``fillPreBlank``: commitLogOffset 0) belong before a queue's first
    record, but a damaged store can hold one further on, where its 0 would make the search
    skip live units before it: a blank unit is therefore judged by the first record unit at or
    after it in the whole queue (blank units with no record after them count as live: nothing
    after them is dead), which keeps the search's order, and the answer moves past blank
    units."""
    lo, hi, end = q.min_offset, q.max_offset, q.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        at, off = _record_unit_from(q, mid, end)
        if at >= end or off >= min_commitlog_offset:
            hi = mid
        else:
            lo = mid + 1
    return _record_unit_from(q, lo, end)[0]


#: units read at a time where a run of blank filler units is walked (:func:`_record_unit_from`)
_BLANK_RUN_STEP = 4096


def _record_unit_from(q: QueueReader, start: int, end: int) -> tuple[int, int]:
    """``(queue offset, commitLogOffset)`` of the first unit in ``[start, end)`` that is not
    blank filler; ``(end, -1)`` when there is none."""
    if start >= end:
        return end, -1
    raw = q.read_units(start, 1)
    if len(raw) < CQ_STORE_UNIT_SIZE:
        return end, -1
    off, size, _ = UNIT.unpack(raw)
    if size != BLANK_UNIT_SIZE:
        return start, off
    import numpy as np

    at = start + 1
    while at < end:
        raw = q.read_units(at, min(_BLANK_RUN_STEP, end - at))
        if not raw:
            break
        units = np.frombuffer(raw, dtype=_UNIT_DTYPE)
        real = np.flatnonzero(units["size"] != BLANK_UNIT_SIZE)
        if len(real):
            return at + int(real[0]), int(units["off"][real[0]])
        at += len(units)
    return end, -1


def read_held_units(
    start: int,
    count: int,
    bounds: tuple[int, int],
    mem: bytearray,
    mem_base: int,
    stored: Callable[[int, int], bytes],
) -> bytes:
    """Raw units from queue offset ``start``, at most ``count``, within ``bounds`` (the queue's
    ``(min_offset, max_offset)``): from ``mem`` (units a read-only recovery added in memory,
    from queue offset ``mem_base``) at and past ``mem_base``, else ``stored(start, count)``
    (the queue's files or database), never reading across into ``mem``."""
    start = max(start, bounds[0])
    count = min(count, bounds[1] - start)
    if count <= 0:
        return b""
    if mem and start >= mem_base:
        i = (start - mem_base) * CQ_STORE_UNIT_SIZE
        return bytes(mem[i : i + count * CQ_STORE_UNIT_SIZE])
    if mem:
        count = min(count, mem_base - start)
    return stored(start, count)


class ConsumeQueue:
    """One queue's units, with its min and max queue offsets.

    Args:
        directory: ``consumequeue/<topic>/<queueId>``.
        topic, queue_id: the queue.
        file_size: bytes per file when no file exists yet (``mappedFileSizeConsumeQueue``).
        read_only: never write.
        trusted_size: ``file_size`` is certain (a lone shorter file is then a torn one).

    Offsets are queue offsets (unit numbers). ``max_offset`` is one past the last unit.

    RocketMQ's file ``ConsumeQueue``; a :class:`engine.format.queue.QueueReader`
    (``ConsumeQueueInterface``), as :class:`engine.format.batchcq.BatchConsumeQueue` and
    :class:`engine.format.rocksdbcq.RocksDBConsumeQueue` are. The unit rules they share are the
    functions above (:func:`read_held_units`, :func:`iter_queue_units`, :func:`first_unit_from`,
    :func:`first_live_unit`), not a base class.
    """

    def __init__(
        self,
        directory: str,
        topic: str,
        queue_id: int,
        file_size: int = DEFAULT_UNITS_PER_FILE * CQ_STORE_UNIT_SIZE,
        read_only: bool = False,
        trusted_size: bool = False,
        source: StoreSource = LOCAL,
    ):
        self.topic = topic
        self.queue_id = queue_id
        self.files = FileQueue(
            directory, file_size, read_only, trusted_size=trusted_size, derived=True, source=source
        )
        if self.files.file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"{directory}: file size is not a multiple of 20")
        self.lock = threading.Lock()
        # A read-only store that needs units its files lack (e.g. a store holding only
        # commitlog/) keeps them here, starting at queue offset ``mem_base``.
        self.mem = bytearray()
        self.mem_base = 0
        self.min_offset = self.files.min_offset // CQ_STORE_UNIT_SIZE
        self.max_offset = self.min_offset
        self.max_physic_offset = -1  # end (offset + size) of the last unit
        self._flushed_to = self.min_offset  # queue offset up to which units were synced
        self.files.mark_touched(self.max_offset * CQ_STORE_UNIT_SIZE)  # (recover() moves it)
        self.last_commitlog_offset = -1  # start of the last unit's record

    # -- recovery ---------------------------------------------------------------------------
    def recover(self) -> None:
        """Find the last valid unit (``ConsumeQueue.recover``) and drop what follows it.

        Like RocketMQ, the scan starts at the third-last file; the files before it are full.
        Each file is read in chunks that grow from :data:`RECOVER_CHUNK` and stops at the
        chunk where its units end (a queue of ten messages reads 64 KiB of its 6 MB file, not
        the file: opening a store of 8,000 such queues read 48 GB of zeros).
        """
        segs = self.files.segments
        first = max(0, len(segs) - 3)
        end = segs[first].start if segs else self.files.min_offset
        prev_end = -1
        for seg in segs[first:]:
            pos, chunk = 0, RECOVER_CHUNK
            while pos < seg.size:
                data = self.files.pread_segment(seg, min(chunk, seg.size - pos), pos)
                n = valid_prefix_units(data)
                k, prev_end = _ordered_prefix_units(data, n, prev_end)
                if k < n:
                    self.files.repairs.append(
                        f"unit {(seg.start + pos) // CQ_STORE_UNIT_SIZE + k} overlaps or precedes "
                        "the unit before it: units from there are dropped and rebuilt from the "
                        "CommitLog"
                    )
                    n = k
                pos += n * CQ_STORE_UNIT_SIZE
                if not data or n * CQ_STORE_UNIT_SIZE < len(data):
                    break
                chunk = min(2 * chunk, RECOVER_CHUNK_MAX)
            end = seg.start + pos
            if pos < seg.size:
                break
        self.max_offset = end // CQ_STORE_UNIT_SIZE
        self.files.mark_touched(end)  # (the units as found: their files' mtimes stand)
        if end > self.files.min_offset:
            last = UNIT.unpack(self.files.read(end - CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE))
            self.last_commitlog_offset = last[0]
            self.max_physic_offset = last[0] + last[1]
        if not self.files.read_only:
            self.files.truncate_dirty(end, delete_at_start=True)

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop units whose record starts at or after ``phy_offset`` (``truncateDirtyLogicFiles``)."""
        self.truncate_to(first_unit_from(self, phy_offset))

    def truncate_to(self, queue_offset: int) -> None:
        """Drop the units at and after ``queue_offset``."""
        lo = max(queue_offset, self.min_offset)
        if lo >= self.max_offset:
            return
        self.max_offset = lo
        self._flushed_to = min(self._flushed_to, lo)
        if self.mem:
            keep = max(0, lo - self.mem_base) * CQ_STORE_UNIT_SIZE
            del self.mem[keep:]
        if not self.files.read_only:
            # ConsumeQueue.truncateDirtyLogicFiles: a file whose first unit goes is deleted.
            self.files.truncate_dirty(lo * CQ_STORE_UNIT_SIZE, delete_at_start=True)
        if lo > self.min_offset:
            off, size, _ = self.unit(lo - 1)
            self.last_commitlog_offset, self.max_physic_offset = off, off + size
        else:
            self.last_commitlog_offset = self.max_physic_offset = -1

    # -- following a writer (read-only) ---------------------------------------------------
    def follow_files(self, add: bool = True) -> list[Segment]:
        """Re-list the files of a read-only queue another process writes
        (:meth:`engine.format.mappedfile.FileQueue.refresh`): files the writer deleted are
        dropped and ``min_offset`` moves to the first file left. Returns the segments dropped
        (each closes its descriptor once no reader holds it: :class:`Segment`)."""
        gone = self.files.refresh(add)
        base = self.files.min_offset // CQ_STORE_UNIT_SIZE
        if self.files.segments and self.min_offset < base:
            self.min_offset = base
            self.max_offset = max(self.max_offset, base)
        return gone

    def writer_deleted(self) -> bool:
        """Whether the process that writes this queue deleted it (``deleteTopic``), after
        :meth:`follow_files`: no file left and its directory gone, or its first file under
        its name is another file than the one held (deleted and made again between two
        looks: ``deleteTopic`` then ``updateTopic`` and a send)."""
        segs = self.files.segments
        if not segs:
            return not os.path.isdir(self.files.directory)
        first = segs[0]
        if first.fd < 0:
            return False
        try:
            now = os.lstat(first.path)
        except FileNotFoundError:
            return not os.path.isdir(self.files.directory)
        held = os.fstat(first.fd)
        return (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev)

    def written_units(
        self, max_units: int, relist: Callable[[FileQueue], object] | None = None
    ) -> bytes:
        """The valid units the writer has written past ``max_offset`` (``offset >= 0 and
        size > 0``, the rule of :meth:`recover`), as raw units, at most ``max_units``; read in
        growing steps (most queues gain a few units between two calls) and across new files.
        ``max_offset`` is not moved: the caller makes them visible (a follower after their
        records, :meth:`catch_up` at once).

        ``relist``: called with the :class:`FileQueue` when the read reaches the end of the
        last listed file (default :meth:`follow_files`; a follower passes its own, which
        reports the files the writer deleted)."""
        fq = self.files
        lo = self.max_offset
        out = []
        n_total = 0
        step = 256
        while n_total < max_units:
            pos = (lo + n_total) * CQ_STORE_UNIT_SIZE
            if pos >= fq.end_offset:
                if relist is None:
                    self.follow_files()  # (a dropped file's descriptor: closed when unheld)
                else:
                    relist(fq)  # the writer may have started the next file
                if pos >= fq.end_offset:
                    break
            data = fq.read(pos, min(step, max_units - n_total) * CQ_STORE_UNIT_SIZE)
            if not data:
                break
            n = valid_prefix_units(data)
            out.append(data[: n * CQ_STORE_UNIT_SIZE])
            n_total += n
            if n * CQ_STORE_UNIT_SIZE < len(data):
                break
            step = min(step * 8, 1 << 16)
        return b"".join(out)

    def catch_up(self, max_units: int = 1 << 62) -> int:
        """A lock-free reader's view of a queue a writer appends to (``StoreFiles``): make
        every unit the writer has written visible at once (:meth:`written_units`). A queue
        just opened starts at its last file, whose predecessors are full (the rule of
        :meth:`recover`). Returns the number of units added."""
        segs = self.files.segments
        if self.max_offset == self.min_offset and segs:
            last = segs[-1].start // CQ_STORE_UNIT_SIZE
            if last > self.max_offset:
                self.max_offset = last
        raw = self.written_units(max_units)
        if raw:
            self._advance(raw)
        return len(raw) // CQ_STORE_UNIT_SIZE

    # -- read -------------------------------------------------------------------------------
    def offset_by_time(
        self,
        timestamp: int,
        store_timestamp_at: Callable[[int, int], int],
        lo: int | None = None,
        hi: int | None = None,
    ) -> int:
        """``getOffsetInQueueByTime`` (LOWER boundary): the first queue offset whose record was
        stored at or after ``timestamp`` (epoch ms), or ``hi`` when every one is older.
        A binary search over the units ``[lo, hi)`` (default ``[min_offset, max_offset)``);
        ``store_timestamp_at(commitLogOffset, size)`` gives a record's STORETIMESTAMP (and
        raises CorruptRecordError where no record is); blank filler units are stepped over
        (they have no record: a search that met one read the record at offset 0, or failed)."""
        lo = self.min_offset if lo is None else lo
        end = self.max_offset if hi is None else hi
        return search_by_time(self.unit, timestamp, store_timestamp_at, lo, end)

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """``(commitLogOffset, size, tagsCode)`` of one unit. Raises IndexError if absent."""
        return queue_unit(self, queue_offset)

    def read_units(self, start: int, count: int) -> bytes:
        """Raw units from ``start`` (queue offset), at most ``count``, stopping at a file end."""
        return read_held_units(
            start, count, (self.min_offset, self.max_offset), self.mem, self.mem_base, self._stored
        )

    def _stored(self, start: int, count: int) -> bytes:
        return self.files.read(start * CQ_STORE_UNIT_SIZE, count * CQ_STORE_UNIT_SIZE)

    def iter_units(
        self, start: int, end: int | None = None, batch: int = 4096
    ) -> Iterator[tuple[int, int, int, int]]:
        """Yield ``(queueOffset, commitLogOffset, size, tagsCode)`` for ``[start, end)``."""
        return iter_queue_units(self, start, end, batch)

    # -- write ------------------------------------------------------------------------------
    def put_units(self, first_queue_offset: int, units: bytes) -> None:
        """Append encoded units starting at ``first_queue_offset`` (must equal ``max_offset``).

        A queue that starts above 0 gets blank filler units first (``fillPreBlank``).
        Raises OSError from the disk (e.g. ENOSPC); nothing is counted then, and nothing of
        them stays on disk (units written into earlier files before a later one failed are
        cut again, a file this call made deleted): a put the disk refused leaves the queue's
        files as they were, which the put's undo (``truncate_to`` of what is counted) relies on.
        """
        if first_queue_offset != self.max_offset:
            raise ValueError(
                f"{self.topic}/{self.queue_id}: unit {first_queue_offset} does not "
                f"follow {self.max_offset}"
            )
        if self.files.read_only:
            if not self.mem:
                self.mem_base = first_queue_offset
                if self.max_offset == self.min_offset == 0:
                    self.min_offset = first_queue_offset
            self.mem += units
            self._advance(units)
            return
        pos = first_queue_offset * CQ_STORE_UNIT_SIZE
        fs = self.files.file_size
        if self.files.segments and pos // fs == (pos + len(units) - 1) // fs:
            self.files.write(pos, units)  # in one file (always, for one put's units): whole or not
            self._advance(units)
            return
        first, min_before = pos, self.min_offset
        try:
            if not self.files.segments and pos % fs:
                first = pos - pos % fs
                filler = UNIT.pack(0, BLANK_UNIT_SIZE, 0) * ((pos - first) // CQ_STORE_UNIT_SIZE)
                self.files.write(first, filler)
                self.min_offset = first_queue_offset
            view = memoryview(units)
            while view:
                seg = self.files.segment_for_write(pos)
                n = min(len(view), seg.end - pos)
                self.files.write(pos, view[:n])
                view = view[n:]
                pos += n
        except OSError:
            self.min_offset = min_before
            # what this call wrote goes (ConsumeQueue.truncateDirtyLogicFiles: a file whose
            # first unit goes is deleted); the caller's error is the disk's
            with contextlib.suppress(OSError):
                self.files.truncate_dirty(first, delete_at_start=first % fs == 0)
            raise
        self._advance(units)

    def put_unit(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> None:
        """:meth:`put_units` of one unit (``ConsumeQueue.putMessagePositionInfo``: the record
        at ``commitlog_offset``, ``size`` bytes, its ``tags_code``), at the least per-call cost
        where it goes into the file being written (a single put's). Raises as
        :meth:`put_units`."""
        pos = queue_offset * CQ_STORE_UNIT_SIZE
        files = self.files
        if (
            queue_offset != self.max_offset
            or files.read_only
            or not files.segments
            or pos % files.file_size == 0  # (the first unit of a file: put_units finds it)
        ):
            self.put_units(queue_offset, UNIT.pack(commitlog_offset, size, tags_code))
            return
        files.write(pos, UNIT.pack(commitlog_offset, size, tags_code))
        self.max_offset = queue_offset + 1
        self.last_commitlog_offset = commitlog_offset
        self.max_physic_offset = commitlog_offset + size

    def _advance(self, units: bytes) -> None:
        self.max_offset += len(units) // CQ_STORE_UNIT_SIZE
        off, size, _ = UNIT.unpack_from(units, len(units) - CQ_STORE_UNIT_SIZE)
        self.last_commitlog_offset, self.max_physic_offset = off, off + size

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Move ``min_offset`` to the first unit whose record is still in the CommitLog."""
        self.min_offset = first_live_unit(self, min_commitlog_offset)

    def flush(self) -> None:
        """fdatasync the files holding units appended since the last flush (none: no-op)."""
        end = self.max_offset
        start = min(self._flushed_to, end)
        if end <= self._flushed_to or self.files.read_only:
            return
        self.files.flush(start * CQ_STORE_UNIT_SIZE, end * CQ_STORE_UNIT_SIZE)
        self._flushed_to = end
        self.touch_written()

    def touch_written(self) -> None:
        """Stamp the files holding units written since the last call
        (``FileQueue.touch_written``)."""
        self.files.touch_written(self.max_offset * CQ_STORE_UNIT_SIZE)

    @property
    def file_count(self) -> int:
        """Number of this queue's files on disk."""
        return len(self.files.segments)

    @property
    def units_per_file(self) -> int:
        """Units a file holds (``mappedFileSizeConsumeQueue / 20``)."""
        return self.files.file_size // CQ_STORE_UNIT_SIZE

    @property
    def repairs(self) -> list[str]:
        """What opening or recovering the queue repaired (its files' repairs)."""
        return self.files.repairs

    def close(self) -> None:
        """Close the files."""
        self.files.close()


def _ordered_prefix_units(data: bytes, n: int, prev_end: int) -> tuple[int, int]:
    """How many of the first ``n`` (valid) units keep CommitLog order: each record starts at or
    after the end (offset + size) of the one before, the first after ``prev_end``. A unit
    breaking the order is damage (a flipped offset or size); the unit before it is counted
    out too, since either may be the damaged one. Blank fillers (``fillPreBlank``) are skipped.

    Returns ``(count, end of the last counted unit)``; numpy, no loop per unit.
    """
    if n == 0:
        return 0, prev_end
    import numpy as np

    units = np.frombuffer(data, dtype=_UNIT_DTYPE, count=n)
    off = units["off"].astype(np.int64)
    size = units["size"].astype(np.int64)
    real = ~((off == 0) & (size == BLANK_UNIT_SIZE))
    idx = np.flatnonzero(real)
    if not len(idx):
        return n, prev_end
    o, e = off[idx], off[idx] + size[idx]
    starts_ok = np.empty(len(idx), dtype=bool)
    starts_ok[0] = o[0] >= prev_end
    starts_ok[1:] = o[1:] >= e[:-1]
    bad = np.flatnonzero(~starts_ok)
    if not len(bad):
        return n, int(e[-1])
    j = int(bad[0])
    cut = int(idx[j - 1]) if j > 0 else int(idx[0])
    return cut, (int(e[j - 2]) if j >= 2 else prev_end)


_HIGH_BIT = bytes(1 if b & 0x80 else 0 for b in range(256))


def valid_prefix_units(data: bytes) -> int:
    """Number of leading valid units in ``data`` (``offset >= 0 and size > 0``): the one
    rule of where a queue's units end (``ConsumeQueue.recover``), for recovery, a follower and
    a lock-free reader (:meth:`ConsumeQueue.written_units`).

    Whole-buffer byte operations, no loop per unit: a negative commitLogOffset or size has the
    high bit of its first byte set; a zero size has all four bytes zero, which the OR of the
    four byte planes shows.
    """
    n = len(data) // CQ_STORE_UNIT_SIZE
    if not n:
        return 0
    data = bytes(data[: n * CQ_STORE_UNIT_SIZE])
    first = n
    k = data[0::CQ_STORE_UNIT_SIZE].translate(_HIGH_BIT).find(1)
    if k >= 0:
        first = k
    s0 = data[8::CQ_STORE_UNIT_SIZE]
    k = s0.translate(_HIGH_BIT).find(1)
    if 0 <= k < first:
        first = k
    planes = (
        int.from_bytes(s0, "big")
        | int.from_bytes(data[9::CQ_STORE_UNIT_SIZE], "big")
        | int.from_bytes(data[10::CQ_STORE_UNIT_SIZE], "big")
        | int.from_bytes(data[11::CQ_STORE_UNIT_SIZE], "big")
    )
    k = planes.to_bytes(n, "big").find(0)
    if 0 <= k < first:
        first = k
    return first


class UnitFile:
    """One ConsumeQueue file's units read leniently, for a checker (``rmqfs verify``): where
    :meth:`ConsumeQueue.recover` silently drops what follows the last valid unit, this keeps
    the whole file and names what is wrong with it instead of raising.

    The rule of where the units end is :func:`valid_prefix_units` (``offset >= 0 and
    size > 0``, ``ConsumeQueue.recover``), the one recovery and every reader use; the units
    are decoded with :data:`UNIT`. Build one with :func:`read_unit_file` (a file through a
    store source) or from a file's bytes.

    Attributes:
        data: the file's bytes (a multiple of 20 bytes is expected; a partial unit at the end
            is ignored).
        count: whole units in ``data``.
        valid: the leading valid units (``count`` when every unit is valid).
    """

    def __init__(self, data: bytes):
        self.data = data
        self.count = len(data) // CQ_STORE_UNIT_SIZE
        self.valid = valid_prefix_units(data)

    @property
    def ended(self) -> bool:
        """Whether an invalid unit ends the queue inside this file (unit :attr:`valid`)."""
        return self.valid < self.count

    def units(self) -> Iterator[tuple[int, int, int]]:
        """The valid units from the file's start, in order: ``(commitLogOffset, size,
        tagsCode)`` (bytes, bytes, a tag hash or a deliver time in epoch ms); blank fillers
        (``(0, BLANK_UNIT_SIZE, 0)``, ``fillPreBlank``) included, as they are valid units."""
        return UNIT.iter_unpack(memoryview(self.data)[: self.valid * CQ_STORE_UNIT_SIZE])

    def problems(self) -> list[tuple[int, str]]:
        """``[(unit number in the file, what is wrong)]``: the invalid unit that ends the queue
        when it is not a zero unit or data follows it (a broker writes units in order, so
        nothing but zeros follows the end: the rest is damage, ``ConsumeQueue.recover``
        drops it). [] for a file whose units are all valid or that ends in zeros."""
        if not self.ended:
            return []
        at = self.valid * CQ_STORE_UNIT_SIZE
        unit = UNIT.unpack_from(self.data, at)
        if unit == (0, 0, 0) and not self.holds_data(at + CQ_STORE_UNIT_SIZE):
            return []
        off, size, tc = unit
        return [(self.valid, f"invalid unit ({off}, {size}, {tc}) followed by more data")]

    def holds_data(self, start: int = 0) -> bool:
        """Whether any byte of :attr:`data` from ``start`` (bytes) is not zero."""
        return bool(self.data[start:].strip(b"\0"))


def read_unit_file(path: str, size: int, source: StoreSource = LOCAL) -> UnitFile:
    """The ConsumeQueue file ``path`` read whole (``size`` bytes, one read through ``source``:
    a few MB) as a lenient :class:`UnitFile` (damage reported by
    :meth:`UnitFile.problems`, never raised).

    Raises:
        OSError; ObjectStoreError: the source could not read the file.
    """
    return UnitFile(source.pread(path, size, 0))
