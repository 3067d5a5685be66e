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
    from ..format.rocksdbcq import RocksDBConsumeQueue
    from ..store import MessageStore
    from .recovery import RecoveryReport

log = logging.getLogger(__name__)

# a ConsumeQueue unit to write: (queueOffset, CommitLog offset, size, tagsCode)
_Unit = tuple[int, int, int, int]


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
        except ValueError as e:
            log.warning(
                "record at %d (%s): %s; not dispatched to its LMQ queues",
                rec.commitlog_offset,
                store.commitlog_file_of(rec.commitlog_offset),
                e,
            )
        if multi:
            multi = admit_lmq(store, rec.commitlog_offset, multi)
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


@dataclass
class LmqLimit:
    """How many LMQ queues a store's reads have built, and what was refused past
    ``StoreConfig.max_lmq_consume_queue_num`` (``MessageStoreConfig.maxLmqConsumeQueueNum``,
    20,000 by default). ``names``: the LMQ queues the store has (loaded or dispatched to);
    ``refused``: for status.json ``lmqRefused``, None until a record is refused."""

    names: set[str] = field(default_factory=set)
    refused: dict | None = None


def admit_lmq(
    store: MessageStore, commitlog_offset: int, multi: list[tuple[str, int, int]]
) -> list[tuple[str, int, int]]:
    """The units of ``multi`` (:func:`engine.format.message.multi_dispatch` of the record at
    ``commitlog_offset``) the store dispatches: all of them while the store has at most
    ``max_lmq_consume_queue_num`` LMQ queues (a 4.x broker puts an LMQ message only then,
    ``DefaultMessageStore.isLmqConsumeQueueNumExceeded``; a 5.x broker has no such limit, so
    its store may hold more: a larger value in broker.conf reads them); past it, only the
    units of LMQ queues the store already has. So the queues any read builds are
    bounded by the limit plus :data:`engine.format.message.MAX_MULTI_DISPATCH`, whatever
    the records name.

    A refusal is logged once, naming the first record refused (its CommitLog file and
    offset) and counted in ``store.lmq_limit.refused`` (status.json ``lmqRefused``)."""
    limit = store.lmq_limit
    names = limit.names
    if len(names) <= store.config.max_lmq_consume_queue_num:
        names.update(q for q, _qid, _off in multi if is_lmq(q))
        return multi
    kept = [u for u in multi if u[0] in names or not is_lmq(u[0])]
    if len(kept) < len(multi):
        r = limit.refused
        if r is None:
            where = store.commitlog_file_of(commitlog_offset)
            r = limit.refused = {
                "limit": store.config.max_lmq_consume_queue_num,
                "firstRecord": commitlog_offset,
                "file": where,
                "records": 0,
                "units": 0,
                "reason": f"the record at {commitlog_offset} ({where}) names LMQ queues past "
                f"maxLmqConsumeQueueNum {store.config.max_lmq_consume_queue_num}, the most "
                "rmqfs builds from records (a bound on what a store can make it hold; a 4.x "
                "broker refuses puts past it, a 5.x broker does not); they are not built: "
                "give a larger maxLmqConsumeQueueNum in broker.conf (--config) to read them",
            }
            log.warning("LMQ: %s", r["reason"])
        r["records"] += 1
        r["units"] += len(multi) - len(kept)
    return kept


def _note_batch_gap(store: MessageStore, d: DispatchRequest) -> None:
    """Say (once per queue: the log and ``store.repairs``, status.json) that recovery met a
    record of a BatchCQ topic its BatchConsumeQueue lacks (one a crash left undispatched):
    a broker's recovery dispatches it (``BatchConsumeQueue.putMessagePositionInfoWrapper``),
    rmqfs does not rebuild a BatchConsumeQueue, so its messages are not shown."""
    bq = store.batch_queues.get((d.topic, d.queue_id))
    if bq is not None and d.commitlog_offset < bq.max_physic_offset:
        return  # held
    what = (
        f"batchconsumequeue/{d.topic}/{d.queue_id}: lacks the CommitLog's records from offset "
        f"{d.commitlog_offset} on (a crash before they were dispatched); rmqfs does not "
        "rebuild a BatchConsumeQueue, so their messages are not shown until a broker's "
        "recovery dispatches them"
    )
    if store.note_repair(what):
        log.warning("%s", what)


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
    # (topic, queueId) -> [(queueOffset, CommitLog offset, size, tagsCode)]: plain tuples, as
    # an LMQ record gives up to MAX_MULTI_DISPATCH units (one object each would cost more)
    per_queue: dict[tuple[str, int], list[_Unit]] = {}
    for d in batch:
        if d.sys_flag & TRANSACTION_TYPE_MASK in (
            TRANSACTION_PREPARED_TYPE,
            TRANSACTION_ROLLBACK_TYPE,
        ):
            continue
        if d.sys_flag & INNER_BATCH_FLAG or d.topic in store.batch_cq_topics:
            # BatchCQ topics dispatch to batchconsumequeue/, which is not written here;
            # a plain ConsumeQueue for them would make a broker refuse the store.
            if recovering:
                _note_batch_gap(store, d)
            continue
        per_queue.setdefault((d.topic, d.queue_id), []).append(
            (d.queue_offset, d.commitlog_offset, d.size, d.tags_code)
        )
        for name, qid, qoff in d.multi:
            qid = d.queue_id if qid < 0 else qid
            per_queue.setdefault((name, qid), []).append(
                (qoff, d.commitlog_offset, d.size, d.tags_code)
            )
    gap = dispatch_units(store, per_queue, recovering, full, report)
    for disp in store.dispatchers:
        disp.dispatch(batch)
    if batch and not recovering:
        store.dispatched_store_timestamp = batch[-1].store_timestamp
    return gap


def dispatch_units(
    store: MessageStore,
    per_queue: dict[tuple[str, int], list[_Unit]],
    recovering: bool = False,
    full: bool = False,
    report: RecoveryReport | None = None,
) -> bool:
    """Write the ConsumeQueue units ``per_queue`` gives, ``(topic, queueId) -> [(queueOffset,
    CommitLog offset, size (bytes), tagsCode), ...]`` in queue order, as :func:`dispatch`
    writes a batch's (``ConsumeQueue.putMessagePositionInfo``): a topic no directory can be
    named after is skipped, a deleted topic's older records too; recovering, the units a
    queue holds are compared first, and a queue is only written up to a hole (``full``: a
    queue that is empty may start anywhere). The caller has left out what gets no unit here
    (prepared and rolled-back transactions, BatchCQ records). Returns True when a unit's
    queue offset lies past its queue's end (a gap)."""
    gap = False
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
            items = [d for d in items if d[1] >= below]
            if not items:
                continue
        cq = store.writable_consume_queue(topic, qid)
        if recovering:
            # Units already present are skipped (ConsumeQueue.putMessagePositionInfo),
            # but first compared: after a power cut a unit in the middle of what was
            # re-dispatched may be torn (a unit can straddle two pages). From the first
            # one that differs, the queue is rewritten.
            verify_present(store, cq, items)
            end = cq.max_offset
            items = [d for d in items if d[0] >= end]
            if not items:
                continue
            if items[0][0] > cq.max_offset:
                if not full or cq.max_offset > cq.min_offset:
                    gap = True
                    if not full:
                        continue
                if cq.max_offset == cq.min_offset and not cq.file_count and not cq.mem:
                    cq.max_offset = cq.min_offset = items[0][0]
                else:
                    gap = True
                    _note_hole(store, topic, qid, cq.max_offset, items[0][0])
                    continue
            # Units must be contiguous; stop at a hole (a later full pass fills it).
            first = items[0][0]
            for i, u in enumerate(items):
                if u[0] != first + i:
                    gap = True
                    if full:
                        _note_hole(store, topic, qid, first + i, u[0])
                    items = items[:i]
                    break
            if not is_lmq(topic) and (
                topic not in store.topic_config.topics
                or qid >= store.topic_config.topics[topic].read_queue_nums
            ):
                register_topic(store, topic, qid)
        pack = UNIT.pack
        units = b"".join([pack(off, size, tc) for _q, off, size, tc in items])
        cq.put_units(items[0][0], units)
        if report is not None:
            report.units_rebuilt += len(items)
    return gap


def _note_hole(store: MessageStore, topic: str, qid: int, missing: int, next_at: int) -> None:
    """Say (once per queue: the log, ``store.repairs``) that the whole CommitLog's re-dispatch
    left a hole in a queue: no record gives unit ``missing`` (a unit of a rule this store's
    records do not show, e.g. a 4.x broker's LMQ unit of a retry record), so the units from
    ``next_at`` on are not rebuilt and the queue ends before them."""
    what = (
        f"consumequeue/{topic}/{qid}: no record gives unit {missing} (the next is {next_at}); "
        "the queue ends there, the units after it not rebuilt"
    )
    if store.note_repair(what):
        log.warning("%s", what)


def verify_present(
    store: MessageStore, cq: ConsumeQueue | RocksDBConsumeQueue, items: list[_Unit]
) -> None:
    """Truncate ``cq`` at the first unit of ``items`` (``(queueOffset, CommitLog offset,
    size, tagsCode)`` in queue order) it holds differently."""
    lo_q, hi_q = cq.min_offset, cq.max_offset
    present = [d for d in items if lo_q <= d[0] < hi_q]
    if not present:
        return
    lo, hi = present[0][0], present[-1][0] + 1
    units = {q: (q, off, size, tc) for q, off, size, tc in cq.iter_units(lo, hi)}
    for d in present:
        if units.get(d[0]) != d:
            log.warning(
                "ConsumeQueue %s/%d: unit %d differs from the CommitLog; rewritten from there",
                cq.topic,
                cq.queue_id,
                d[0],
            )
            cq.truncate_to(d[0])
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
