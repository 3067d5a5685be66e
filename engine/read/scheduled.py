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

:func:`waiting_messages` yields :class:`Waiting` in deliver-time order; reading needs no
timer store (a store without ``timerwheel`` has only its not-enqueued units).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from ..format.timerwheel import WHEEL_FILE, read_live_slots

if TYPE_CHECKING:
    from ..store import MessageStore

log = logging.getLogger(__name__)

__all__ = ["Waiting", "waiting_messages", "delay_offsets", "DELAY_OFFSET_FILE", "TIMER", "DELAY"]

#: Where ScheduleMessageService keeps its offsets, under the store root.
DELAY_OFFSET_FILE = os.path.join("config", "delayOffset.json")
#: :attr:`Waiting.source` values
TIMER = "timer"
DELAY = "delayLevel"


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


@dataclass(frozen=True, slots=True)
class _Ref:
    deliver_ms: int
    offset: int
    size: int
    real_topic: str
    real_queue_id: int
    source: str


def waiting_messages(store: MessageStore, topic: str | None = None) -> Iterator[Waiting]:
    """The messages waiting for delivery to ``topic`` (every topic when None), in deliver-time
    order (then CommitLog offset). See the module docstring for what waits where.

    Memory: a few dozen bytes per waiting message of the store (their references are sorted
    before the first is yielded); records are read one at a time as they are yielded.

    Raises:
        CorruptRecordError: a wheel, timerlog unit, ConsumeQueue unit or record that is not
            what it must be (a timerlog chain that loops is cut and logged instead).
        ConfigFileError: ``config/delayOffset.json`` and its ``.bak`` are unusable.
    """
    refs = _timer_refs(store, topic) + _delay_refs(store, topic)
    refs.sort(key=lambda r: (r.deliver_ms, r.offset))
    for r in refs:
        rec = store.read_record(r.offset, r.size)
        yield Waiting(rec, r.real_topic, r.real_queue_id, r.deliver_ms, r.source)


def _real_queue(rec: MessageRecord) -> tuple[str, int]:
    real = rec.properties.get(PROPERTY_REAL_TOPIC)
    qid = rec.properties.get(PROPERTY_REAL_QID)
    if not real or qid is None or not qid.isdigit():
        raise CorruptRecordError(
            f"{rec.topic} record without a valid REAL_TOPIC/REAL_QID", rec.commitlog_offset
        )
    return real, int(qid)


def _timer_refs(store: MessageStore, topic: str | None) -> list[_Ref]:
    """The timer store's waiting messages (wheel, then not-enqueued units), recalls applied."""
    root = store.root
    ck = read_timercheck(os.path.join(root, CHECK_FILE))
    # (CommitLog offset -> size), each record once: many units (or slots) may name one
    entries: dict[int, int] = {}
    wheel = os.path.join(root, WHEEL_FILE)
    if os.path.exists(wheel):
        import numpy as np

        want_hash = java_string_hash(topic) if topic is not None else None
        slots = read_live_slots(wheel, ck.last_read_time_ms, store.config.timer_precision_ms)
        # slots sharing a lastPos share its chain: each distinct head once, and one visited
        # set over all the chains (TimerLogReader.walk_chains): bounded by the timerlog's units
        heads = np.unique(slots["lastPos"]).tolist()
        problems: list[str] = []
        with TimerLogReader(os.path.join(root, LOG_DIR)) as tl:
            for u in tl.walk_chains(reversed(heads), problems):
                # hashTopicForMetrics(realTopic): a cheap filter before the record is read
                if want_hash is None or u.topic_hash == want_hash:
                    entries.setdefault(u.offset_py, u.size_py)
        for problem in problems[:3]:
            log.warning("timerlog: %s; the older units of that chain are not listed", problem)
        if len(problems) > 3:
            log.warning("timerlog: %d more chains cut short", len(problems) - 3)
    cq = store.consume_queue(TIMER_TOPIC, 0)
    if cq is not None:
        for _q, off, size, _tags in cq.iter_units(ck.last_timer_queue_offset):
            if size != BLANK_UNIT_SIZE:
                entries.setdefault(off, size)
    recalls: set[tuple[str, int]] = set()
    newest: dict[tuple[str, str], tuple[int, _Ref]] = {}
    for off, size in entries.items():
        rec = store.read_record(off, size)
        props = rec.properties
        try:
            out = int(props.get(PROPERTY_TIMER_OUT_MS, ""))
        except ValueError:
            raise CorruptRecordError(f"{TIMER_TOPIC} record without TIMER_OUT_MS", off) from None
        real, qid = _real_queue(rec)
        if topic is not None and real != topic:
            continue
        deleted = props.get(PROPERTY_TIMER_DEL_UNIQKEY)
        if deleted is not None:
            recalls.add((deleted, out))
            continue
        uniq = props.get(PROPERTY_UNIQ_KEY) or f"@{off}"
        ref = _Ref(out, off, size, real, qid, TIMER)
        old = newest.get((real, uniq))
        if old is None or old[0] < off:  # a rolled message's newest copy
            newest[(real, uniq)] = (off, ref)
    return [
        ref
        for (real, uniq), (_off, ref) in newest.items()
        if (f"{real}+{uniq}", ref.deliver_ms) not in recalls
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


def _delay_refs(store: MessageStore, topic: str | None) -> list[_Ref]:
    """SCHEDULE_TOPIC_XXXX units at or after delayOffset.json's offset of their level."""
    offsets = delay_offsets(store)
    refs = []
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
                refs.append(_Ref(deliver, off, size, real, real_qid, DELAY))
    return refs
