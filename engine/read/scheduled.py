"""What is waiting for delivery to a topic: the 5.x timer store and the 4.x delay levels.

A broker holds a scheduled message in a system topic until its time, then puts a copy into
its real topic (``REAL_TOPIC``, queue ``REAL_QID``); the copy then appears in the real topic as
any message. Until then it waits in one of two places:

* **Delay levels** (4.x and 5.x, ``ScheduleMessageService``): topic ``SCHEDULE_TOPIC_XXXX``,
  queue ``level - 1``. ``config/delayOffset.json`` holds, per level, the queue offset the
  service delivers next (``offsetTable``; 0 when missing, clamped to the queue's bounds as
  ``correctDelayOffset`` does); every unit at or after it waits, and its ConsumeQueue
  tagsCode is its deliver time (epoch ms, ``computeDeliverTimestamp``).
* **The timer store** (5.x, ``TimerMessageStore``): topic ``rmq_sys_wheel_timer`` queue 0, then
  the wheel. (a) Units the wheel holds: every live slot at or after the checkpoint's
  lastReadTimeMs (``config/timercheck``; ``engine.format.timerwheel``), each slot's chain walked
  through ``timerlog/`` (``engine.format.timerlog``) to its CommitLog records. (b) Units the timer
  store has not read into the wheel yet: ``rmq_sys_wheel_timer`` queue-0 units at or after
  lastTimerQueueOffset (``TimerMessageStore.enqueue`` reads from there when the broker starts).
  A record carrying ``TIMER_DEL_UNIQKEY`` is a recall, not a message (``RecallMessageProcessor``):
  the dequeue drops a message whose ``realTopic + "+" + uniqKey`` a recall of the same slot
  names (``TimerDequeueGetMessageService``), so a message with a pending recall of the same
  ``TIMER_OUT_MS`` is not listed. A message due past the roll window sits in an earlier slot
  (``MAGIC_ROLL``) and is re-put into the timer topic there, as a new record with
  ``TIMER_ROLL_TIMES``: the copies of one message (same real topic and UNIQ_KEY) are listed
  once, the newest. Its deliver time is its ``TIMER_OUT_MS`` (what ``HookUtils.transformTimerMessage``
  set: the deliver time rounded to the tick), not the roll slot's.

:func:`waiting_refs` lists the references once, sorted, as compact arrays (:class:`WaitingRefs`:
29 bytes per waiting message); :meth:`WaitingRefs.waiting` and :meth:`WaitingRefs.lines` read
the records of any range of them. :func:`waiting_messages` yields every :class:`Waiting` in
deliver-time order. Reading needs no timer store (a store without ``timerwheel`` has only its
not-enqueued units).
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CorruptRecordError
from ..format.config import load_config_file
from ..format.consumequeue import BLANK_UNIT_SIZE
from ..format.javahash import java_string_hash
from ..format.message import (
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    MessageRecord,
)
from ..format.timercheck import CHECK_FILE, read_timercheck
from ..format.timerlog import LOG_DIR, TimerLogReader
from ..format.timerwheel import WHEEL_FILE, live_chain_heads
from .jsonline import build_scheduled_line

if TYPE_CHECKING:
    from ..store import MessageStore

log = logging.getLogger(__name__)

__all__ = [
    "Waiting",
    "WaitingRefs",
    "waiting_refs",
    "waiting_messages",
    "delay_offsets",
    "DELAY_OFFSET_FILE",
    "TIMER",
    "DELAY",
]

#: Where ScheduleMessageService keeps its offsets, under the store root.
DELAY_OFFSET_FILE = os.path.join("config", "delayOffset.json")
#: :attr:`Waiting.source` values
TIMER = "timer"
DELAY = "delayLevel"
#: :attr:`WaitingRefs.source` codes: the index of a :attr:`Waiting.source` value here
SOURCES = (TIMER, DELAY)


@dataclass(frozen=True, slots=True)
class Waiting:
    """One message waiting for delivery.

    ``record``: the stored record (in ``rmq_sys_wheel_timer`` or ``SCHEDULE_TOPIC_XXXX``);
    ``real_topic``/``real_queue_id``: where it will be delivered; ``deliver_ms``: when (epoch
    ms); ``source``: :data:`TIMER` or :data:`DELAY`.
    """

    record: MessageRecord
    real_topic: str
    real_queue_id: int
    deliver_ms: int
    source: str


@dataclass(frozen=True, eq=False)
class WaitingRefs:
    """The messages waiting for delivery, as references in deliver-time order (then CommitLog
    offset): what :func:`waiting_refs` finds, one row per message in six arrays of equal
    length, 29 bytes a row, and no record held.

    ``deliver_ms`` (int64, epoch ms: ``TIMER_OUT_MS`` for the timer store, the unit's tagsCode
    for a delay level), ``offset`` (int64, the stored record's CommitLog offset), ``size``
    (int32, its bytes), ``real_queue_id`` (int32, ``REAL_QID``), ``real_topic`` (int32: an
    index into ``topics``, the ``REAL_TOPIC`` names), ``source`` (uint8: an index into
    :data:`SOURCES`, ``TimerMessageStore`` or ``ScheduleMessageService``).
    """

    deliver_ms: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    real_queue_id: np.ndarray
    real_topic: np.ndarray
    source: np.ndarray
    topics: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.offset)

    @property
    def nbytes(self) -> int:
        """Bytes the six arrays hold (29 a message)."""
        cols = (self.deliver_ms, self.offset, self.size, self.real_queue_id)
        return sum(a.nbytes for a in cols) + self.real_topic.nbytes + self.source.nbytes

    def waiting(
        self, store: MessageStore, start: int = 0, stop: int | None = None
    ) -> Iterator[Waiting]:
        """The messages ``[start, stop)`` of the list (to its end when ``stop`` is None), each
        record read from the CommitLog as it is yielded (``store.read_record``, body CRC
        checked).

        Raises:
            CorruptRecordError: a record that is no longer what its reference names (expired
                and overwritten, damaged).
        """
        stop = len(self) if stop is None else min(stop, len(self))
        for i in range(max(start, 0), stop):
            rec = store.read_record(int(self.offset[i]), int(self.size[i]))
            yield Waiting(
                rec,
                self.topics[self.real_topic[i]],
                int(self.real_queue_id[i]),
                int(self.deliver_ms[i]),
                SOURCES[self.source[i]],
            )

    def lines(
        self, store: MessageStore, start: int = 0, stop: int | None = None
    ) -> Iterator[bytes]:
        """The ``scheduled.jsonl`` lines of the messages ``[start, stop)``
        (``jsonline.build_scheduled_line``), one record read per line, only those records.

        Raises:
            CorruptRecordError: as :meth:`waiting`.
        """
        for w in self.waiting(store, start, stop):
            yield build_scheduled_line(w.record, w.real_topic, w.real_queue_id, w.deliver_ms)


class _RefColumns:
    """:class:`WaitingRefs`' columns as they are found (``array.array``: 29 bytes a row)."""

    def __init__(self) -> None:
        self.deliver_ms = array("q")
        self.offset = array("q")
        self.size = array("i")
        self.real_queue_id = array("i")
        self.real_topic = array("i")
        self.source = array("B")
        self.topic_ids: dict[str, int] = {}

    def add(self, deliver_ms: int, offset: int, size: int, real: str, qid: int, source: int) -> int:
        """Append one reference; returns its row."""
        self.deliver_ms.append(deliver_ms)
        self.offset.append(offset)
        self.size.append(size)
        self.real_queue_id.append(qid)
        self.real_topic.append(self.topic_ids.setdefault(real, len(self.topic_ids)))
        self.source.append(source)
        return len(self.offset) - 1

    def put(self, row: int, deliver_ms: int, offset: int, size: int, real: str, qid: int) -> None:
        """Replace row ``row``'s reference (a rolled message's newer copy)."""
        self.deliver_ms[row], self.offset[row], self.size[row] = deliver_ms, offset, size
        self.real_queue_id[row] = qid
        self.real_topic[row] = self.topic_ids.setdefault(real, len(self.topic_ids))

    def sorted(self, drop: list[int]) -> WaitingRefs:
        """The rows but ``drop``, in (deliver_ms, offset) order, as numpy arrays."""
        cols = [
            np.frombuffer(a, dtype=dt) if len(a) else np.zeros(0, dt)
            for a, dt in (
                (self.deliver_ms, np.int64),
                (self.offset, np.int64),
                (self.size, np.int32),
                (self.real_queue_id, np.int32),
                (self.real_topic, np.int32),
                (self.source, np.uint8),
            )
        ]
        keep = np.ones(len(self.offset), dtype=bool)
        keep[np.asarray(drop, dtype=np.int64)] = False
        order = np.flatnonzero(keep)
        order = order[np.lexsort((cols[1][order], cols[0][order]))]
        topics = tuple(sorted(self.topic_ids, key=self.topic_ids.__getitem__))
        # take() copies: the arrays own their memory, not the array.array buffers
        deliver, offset, size, qid, real, source = (c.take(order) for c in cols)
        return WaitingRefs(deliver, offset, size, qid, real, source, topics)


def waiting_refs(store: MessageStore, topic: str | None = None) -> WaitingRefs:
    """The references of the messages waiting for delivery to ``topic`` (every topic when
    None), sorted by deliver time then CommitLog offset: ``TimerMessageStore``'s (wheel and
    not-enqueued units, recalls applied, a rolled message once) and ``ScheduleMessageService``'s
    delay levels. See the module docstring for what waits where.

    Memory: the result holds 29 bytes per waiting message (:class:`WaitingRefs`) and no record;
    while it is built, each record of the timer store is read once (for its ``TIMER_OUT_MS``,
    ``REAL_TOPIC``, ``REAL_QID``, ``UNIQ_KEY``) and each waiting timed message's UNIQ_KEY is
    held in a dict (a rolled message is listed once), about 150 bytes each until it returns.

    Raises:
        CorruptRecordError: a wheel, timerlog unit, ConsumeQueue unit or record that is not
            what it must be (a timerlog chain that loops is cut and logged instead); the timer
            store's is noted with the store (``note_timer_damage``: one log line, status.json).
        ConfigFileError: ``config/delayOffset.json`` and its ``.bak`` are unusable.
    """
    cols = _RefColumns()
    try:
        drop = _timer_refs(store, topic, cols)
    except CorruptRecordError as exc:
        store.note_timer_damage(str(exc))  # one log line with the reason and what to do
        raise
    _delay_refs(store, topic, cols)
    return cols.sorted(drop)


def waiting_messages(store: MessageStore, topic: str | None = None) -> Iterator[Waiting]:
    """The messages waiting for delivery to ``topic`` (every topic when None), in deliver-time
    order (then CommitLog offset): :func:`waiting_refs`, each record read as it is yielded.

    Memory: 29 bytes per waiting message of the store (their references, sorted before the
    first is yielded: :func:`waiting_refs`); records are read one at a time.

    Raises:
        CorruptRecordError: a wheel, timerlog unit, ConsumeQueue unit or record that is not
            what it must be (a timerlog chain that loops is cut and logged instead).
        ConfigFileError: ``config/delayOffset.json`` and its ``.bak`` are unusable.
    """
    yield from waiting_refs(store, topic).waiting(store)


def _real_queue(rec: MessageRecord) -> tuple[str, int]:
    real = rec.properties.get(PROPERTY_REAL_TOPIC)
    qid = rec.properties.get(PROPERTY_REAL_QID)
    # Integer.parseInt in the broker: more than an int is no queue id
    if not real or qid is None or not (qid.isascii() and qid.isdigit()) or int(qid) > 0x7FFFFFFF:
        raise CorruptRecordError(
            f"{rec.topic} record without a valid REAL_TOPIC/REAL_QID", rec.commitlog_offset
        )
    return real, int(qid)


def _timer_entries(store: MessageStore, topic: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The timer store's records, each once (many units or slots may name one): the wheel's
    chains from lastReadTimeMs on, then the not-enqueued units from lastTimerQueueOffset on.
    Returns (CommitLog offsets ascending, sizes), int64 each."""
    root = store.root
    ck = read_timercheck(os.path.join(root, CHECK_FILE))
    offs, sizes = array("q"), array("q")
    wheel = os.path.join(root, WHEEL_FILE)
    if os.path.exists(wheel):
        want_hash = java_string_hash(topic) if topic is not None else None
        # one visited set over all the chains (TimerLogReader.walk_chains): bounded by the
        # timerlog's units
        heads = live_chain_heads(wheel, ck.last_read_time_ms, store.config.timer_precision_ms)
        problems: list[str] = []
        with TimerLogReader(os.path.join(root, LOG_DIR)) as tl:
            for u in tl.walk_chains(heads, problems):
                # hashTopicForMetrics(realTopic): a cheap filter before the record is read
                if want_hash is None or u.topic_hash == want_hash:
                    offs.append(u.offset_py)
                    sizes.append(u.size_py)
        for problem in problems[:3]:
            log.warning("timerlog: %s; the older units of that chain are not listed", problem)
        if len(problems) > 3:
            log.warning("timerlog: %d more chains cut short", len(problems) - 3)
    cq = store.consume_queue(TIMER_TOPIC, 0)
    if cq is not None:
        for _q, off, size, _tags in cq.iter_units(ck.last_timer_queue_offset):
            if size != BLANK_UNIT_SIZE:
                offs.append(off)
                sizes.append(size)
    o = np.frombuffer(offs, dtype=np.int64) if offs else np.zeros(0, np.int64)
    z = np.frombuffer(sizes, dtype=np.int64) if sizes else np.zeros(0, np.int64)
    o, first = np.unique(o, return_index=True)  # the first size named for an offset
    z = z[first]
    # a unit naming a record expiry deleted is a miss, as getMessageByCommitOffset's null is
    # to TimerDequeueGetMessageService: skipped (the broker logs and drops it)
    live = o >= store.commitlog.min_offset
    if not live.all():
        log.debug("%d timer entries name expired records; skipped", int((~live).sum()))
        o, z = o[live], z[live]
    return o, z


def _timer_refs(store: MessageStore, topic: str | None, cols: _RefColumns) -> list[int]:
    """Add the timer store's waiting messages to ``cols`` (``TimerMessageStore``: a rolled
    message's newest copy once); returns the rows a recall of the same slot drops
    (``TimerDequeueGetMessageService``)."""
    recalls: set[tuple[str, int]] = set()
    newest: dict[tuple[str, str], int] = {}  # (realTopic, uniqKey) -> row
    offsets, sizes = _timer_entries(store, topic)
    for off, size in zip(offsets.tolist(), sizes.tolist()):
        try:
            rec = store.read_record(off, size)
        except CorruptRecordError as exc:
            if off < store.commitlog.min_offset:
                continue  # expired while this read (as _timer_entries skips it)
            why = str(exc).rsplit(" (at offset ", 1)[0]
            raise CorruptRecordError(
                f"the timer store names a record of {size} bytes, not there ({why})", off
            ) from None
        props = rec.properties
        try:  # Long.parseLong in the broker: a long, or no deliver time
            out = int(props.get(PROPERTY_TIMER_OUT_MS, ""))
            if not -(1 << 63) <= out < 1 << 63:
                raise ValueError(out)
        except ValueError:
            raise CorruptRecordError(
                f"{TIMER_TOPIC} record without a valid TIMER_OUT_MS", off
            ) from None
        real, qid = _real_queue(rec)
        if topic is not None and real != topic:
            continue
        deleted = props.get(PROPERTY_TIMER_DEL_UNIQKEY)
        if deleted is not None:
            recalls.add((deleted, out))
            continue
        key = (real, props.get(PROPERTY_UNIQ_KEY) or f"@{off}")
        row = newest.get(key)
        if row is None:
            newest[key] = cols.add(out, off, size, real, qid, SOURCES.index(TIMER))
        elif cols.offset[row] < off:  # a rolled message's newest copy
            cols.put(row, out, off, size, real, qid)
    return [
        row
        for (real, uniq), row in newest.items()
        if (f"{real}+{uniq}", cols.deliver_ms[row]) in recalls
    ]


def delay_offsets(store: MessageStore) -> dict[int, int]:
    """``{delay level: next queue offset to deliver}`` of ``config/delayOffset.json``
    (``ScheduleMessageService.offsetTable``), {} when there is none.

    Raises:
        ConfigFileError: the file and its ``.bak`` are unusable (``load_config_file``).
    """
    raw = load_config_file(os.path.join(store.root, DELAY_OFFSET_FILE))
    table = (raw or {}).get("offsetTable") or {}
    out = {}
    for k, v in table.items():
        try:
            out[int(k)] = int(v)
        except (TypeError, ValueError):
            continue
    return out


def _delay_refs(store: MessageStore, topic: str | None, cols: _RefColumns) -> None:
    """Add ``ScheduleMessageService``'s waiting messages to ``cols``: SCHEDULE_TOPIC_XXXX units
    at or after delayOffset.json's offset of their level."""
    offsets = delay_offsets(store)
    delay = SOURCES.index(DELAY)
    for qid in store.queue_ids(SCHEDULE_TOPIC):
        cq = store.consume_queue(SCHEDULE_TOPIC, qid)
        if cq is None:
            continue
        # ScheduleMessageService.correctDelayOffset: clamped to [min, max]
        start = min(max(offsets.get(qid + 1, 0), cq.min_offset), cq.max_offset)
        for q, off, size, deliver in cq.iter_units(start):
            if size == BLANK_UNIT_SIZE:
                continue
            rec = store.read_record(off, size, topic=SCHEDULE_TOPIC, queue_id=qid, queue_offset=q)
            real, real_qid = _real_queue(rec)
            if topic is None or real == topic:
                cols.add(deliver, off, size, real, real_qid, delay)
