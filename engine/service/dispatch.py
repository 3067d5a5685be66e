"""Dispatch: what each CommitLog record contributes to the derived files (RocketMQ
``CommitLogDispatcher``, ``DefaultMessageStore.CommitLogDispatcherBuildConsumeQueue`` and
``CommitLogDispatcherBuildIndex``, ``DispatchRequest``).

:func:`dispatch` writes the ConsumeQueue units of a batch of :class:`DispatchRequest` and hands
the batch to the store's other dispatchers (the IndexFile service, and any added). A dispatcher
is an object with ``dispatch(list[DispatchRequest])`` and ``truncate(commitlog_offset)``; two
optional capabilities let the store's fast paths treat it specially without knowing its class:

* ``puts_hashed_keys = True``: it takes pre-hashed index keys (``put_hashed``) from the fast put
  path (engine.service.putmessage) instead of requests;
* ``skips_below_end_offset = True``: it ignores records below its ``end_phy_offset``, so
  recovery may skip decoding records the ConsumeQueues already hold.

Prepared and rolled-back transaction records get no unit; BatchCQ topics are not written here.
A ``SCHEDULE_TOPIC_XXXX`` unit's tagsCode is its deliver time (consumequeue.deliver_tags_code).
In a store with LMQ queues (``MessageStore.lmq_enabled``) a record with ``INNER_MULTI_DISPATCH``
also gets a unit in each queue it names, at the offset ``INNER_MULTI_QUEUE_OFFSET`` gives
(``ConsumeQueue.multiDispatchLmqQueue``; :func:`engine.format.message.multi_dispatch`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..format.config import TopicConfig, topic_path_problem
from ..format.consumequeue import UNIT, ConsumeQueue, deliver_tags_code

# The fast put path and the recovery scan (kept apart from the imports above on purpose).
from ..format.message import (
    INNER_BATCH_FLAG,
    PROPERTY_DELAY,
    SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageRecord,
    is_lmq,
    multi_dispatch,
)

if TYPE_CHECKING:
    from ..store import MessageStore
    from .recovery import RecoveryReport

log = logging.getLogger(__name__)


@dataclass
class DispatchRequest:
    """``DispatchRequest``: what a record contributes to the derived files."""

    topic: str
    queue_id: int
    commitlog_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: list[str] = field(default_factory=list)
    uniq_key: str | None = None
    sys_flag: int = 0
    # the LMQ units of the record: [(queue, queueId, queueOffset)] (multi_dispatch)
    multi: list[tuple[str, int, int]] = field(default_factory=list)


def puts_hashed_keys(dispatcher: object) -> bool:
    """Whether ``dispatcher`` takes the fast put path's pre-hashed index keys."""
    return getattr(dispatcher, "puts_hashed_keys", False)


def skips_below_end_offset(dispatcher: object) -> bool:
    """Whether ``dispatcher`` ignores records below its ``end_phy_offset`` (recovery need not
    decode them for it)."""
    return getattr(dispatcher, "skips_below_end_offset", False)


def dispatch_of(store: MessageStore, rec: MessageRecord) -> DispatchRequest:
    tc = rec.tags_code
    if rec.topic == SCHEDULE_TOPIC:
        deliver = deliver_tags_code(
            rec.properties.get(PROPERTY_DELAY), rec.store_timestamp, store.delay_levels
        )
        if deliver is not None:
            tc = deliver
    multi: list[tuple[str, int, int]] = []
    if store.lmq_enabled:
        try:
            multi = multi_dispatch(rec.topic, rec.properties)
        except ValueError:
            log.warning(
                "record at %d: INNER_MULTI_QUEUE_OFFSET %r is not a list of integers; "
                "not dispatched to its LMQ queues",
                rec.commitlog_offset,
                rec.properties.get("INNER_MULTI_QUEUE_OFFSET"),
            )
    return DispatchRequest(
        rec.topic,
        rec.queue_id,
        rec.commitlog_offset,
        rec.store_size,
        tc,
        rec.store_timestamp,
        rec.queue_offset,
        rec.keys,
        rec.uniq_key,
        rec.sys_flag,
        multi,
    )


def dispatch(
    store: MessageStore,
    batch: list[DispatchRequest],
    recovering: bool = False,
    full: bool = False,
    report: RecoveryReport | None = None,
) -> bool:
    """Write ConsumeQueue units (and run the dispatchers) for ``batch``.

    Returns True when a unit's queue offset lies past its queue's end (a gap). ``report``
    (recovery's :class:`engine.service.recovery.RecoveryReport`) counts the units written in
    ``units_rebuilt``.
    """
    gap = False
    per_queue: dict[tuple[str, int], list[DispatchRequest]] = {}
    for d in batch:
        if d.sys_flag & TRANSACTION_TYPE_MASK in (
            TRANSACTION_PREPARED_TYPE,
            TRANSACTION_ROLLBACK_TYPE,
        ):
            continue
        if d.sys_flag & INNER_BATCH_FLAG or d.topic in store.batch_cq_topics:
            # BatchCQ topics dispatch to batchconsumequeue/, which is not written here;
            # a plain ConsumeQueue for them would make a broker refuse the store.
            continue
        per_queue.setdefault((d.topic, d.queue_id), []).append(d)
        for name, qid, qoff in d.multi:
            qid = d.queue_id if qid < 0 else qid
            per_queue.setdefault((name, qid), []).append(
                DispatchRequest(
                    name,
                    qid,
                    d.commitlog_offset,
                    d.size,
                    d.tags_code,
                    d.store_timestamp,
                    qoff,
                    sys_flag=d.sys_flag,
                )
            )
    unsafe = set()
    for topic in {t for t, _ in per_queue}:
        problem = topic_path_problem(topic)
        if problem is not None:
            # A record of a topic no directory can be named after (a hostile store, or one
            # that RocketMQ's store classes wrote without HookUtils.checkBeforePutMessage):
            # its ConsumeQueue cannot exist; the record stays in the CommitLog.
            store.skip_topic(topic, f"record: {problem}")
            unsafe.add(topic)
    deleted = store.deleted_topics.table
    for (topic, qid), items in per_queue.items():
        if topic in unsafe:
            continue
        if topic in deleted:
            # records of a topic deleted later (rmqfs delete-topic): never re-dispatched,
            # so recovery and rebuilds do not bring its queues back (config.DeletedTopics)
            below = deleted[topic]
            items = [d for d in items if d.commitlog_offset >= below]
            if not items:
                continue
        cq = store.writable_consume_queue(topic, qid)
        if recovering:
            # Units already present are skipped (ConsumeQueue.putMessagePositionInfo),
            # but first compared: after a power cut a unit in the middle of what was
            # re-dispatched may be torn (a unit can straddle two pages). From the first
            # one that differs, the queue is rewritten.
            verify_present(store, cq, items)
            items = [d for d in items if d.queue_offset >= cq.max_offset]
            if not items:
                continue
            if items[0].queue_offset > cq.max_offset:
                if not full or cq.max_offset > cq.min_offset:
                    gap = True
                    if not full:
                        continue
                if cq.max_offset == cq.min_offset and not cq.files.segments and not cq.mem:
                    cq.max_offset = cq.min_offset = items[0].queue_offset
                else:
                    gap = True
                    continue
            # Units must be contiguous; stop at a hole (a later full pass fills it).
            run = [items[0]]
            for d in items[1:]:
                if d.queue_offset != run[-1].queue_offset + 1:
                    gap = True
                    break
                run.append(d)
            items = run
            if not is_lmq(topic) and (
                topic not in store.topic_config.topics
                or qid >= store.topic_config.topics[topic].read_queue_nums
            ):
                register_topic(store, topic, qid)
        units = b"".join(UNIT.pack(d.commitlog_offset, d.size, d.tags_code) for d in items)
        cq.put_units(items[0].queue_offset, units)
        if report is not None:
            report.units_rebuilt += len(items)
    for disp in store.dispatchers:
        disp.dispatch(batch)
    if batch and not recovering:
        store.dispatched_store_timestamp = batch[-1].store_timestamp
    return gap


def verify_present(store: MessageStore, cq: ConsumeQueue, items: list) -> None:
    """Truncate ``cq`` at the first unit of ``items`` (queue order) it holds differently."""
    present = [d for d in items if cq.min_offset <= d.queue_offset < cq.max_offset]
    if not present:
        return
    lo, hi = present[0].queue_offset, present[-1].queue_offset + 1
    units = {q: (off, size, tc) for q, off, size, tc in cq.iter_units(lo, hi)}
    for d in present:
        if units.get(d.queue_offset) != (d.commitlog_offset, d.size, d.tags_code):
            log.warning(
                "ConsumeQueue %s/%d: unit %d differs from the CommitLog; rewritten from there",
                cq.topic,
                cq.queue_id,
                d.queue_offset,
            )
            cq.truncate_to(d.queue_offset)
            return


def register_topic(store: MessageStore, topic: str, queue_id: int) -> None:
    cfg = store.topic_config.get(topic)
    n = max(queue_id + 1, store.config.default_topic_queue_nums)
    if cfg is None:
        cfg = TopicConfig(topic, n, n)
    else:
        cfg = TopicConfig(
            **{
                **cfg.__dict__,
                "read_queue_nums": max(cfg.read_queue_nums, n),
                "write_queue_nums": max(cfg.write_queue_nums, n),
            }
        )
    if store.read_only:
        store.topic_config.topics[topic] = cfg
    else:
        store.topic_config.put(cfg)
