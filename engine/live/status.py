"""The store's status: where the CommitLog stands, how far dispatch and flush lag, counts,
repairs and damage. One home for what the mount's ``status.json`` and ``rmqfs brokerStatus``
show (RocketMQ's ``brokerStatus``/``getRuntimeInfo`` answers the same questions for a running
broker: ``commitLogMinOffset``, ``commitLogMaxOffset``, ``dispatchBehindBytes``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import MessageStore


def store_status(store: MessageStore) -> dict:
    """The status of an open :class:`engine.store.MessageStore`, as a JSON-ready dict.

    Offsets and lags are bytes of the CommitLog; timestamps epoch ms. ``dispatchBehindBytes``
    is RocketMQ's ``dispatchBehindBytes()`` (CommitLog max offset minus the reput offset,
    :meth:`FlushService.dispatched_offset`: the bytes SYNC_FLUSH puts appended that wait for
    their flush to be dispatched, else 0); ``flushBehindBytes`` what an fsync would still
    write. ``brokerName`` is the mount's (``engine.storeconfig.settle_broker_name``:
    ``--broker-name``, broker.conf's, the store's brokerIdentity, else RocketMQ's default, the
    host name) and ``brokerNameFrom`` says which (``StoreConfig.broker_name_source``). A
    follower (a read-only open of a store another process writes) adds the writer's fields
    (:func:`follower_status`).
    """
    s = store
    cl = s.commitlog
    topics = s.topic_names()
    queues = s.all_queues()  # BatchCQ topics' queues too
    with s.put_lock:
        reput = s.flusher.dispatched_offset()
    index_files = 0
    if s.index_service is not None:
        index_files = len(getattr(s.index_service, "files", []) or [])
    cp = s.checkpoint
    recovery = getattr(s, "recovery_report", None)
    return {
        "brokerName": s.config.broker_name,
        "brokerNameFrom": s.config.broker_name_source(),
        "storePathRootDir": s.root,
        "flushDiskType": s.config.flush_disk_type,
        "commitLogMinOffset": cl.min_offset,
        "commitLogMaxOffset": cl.max_offset,
        "commitLogFlushedOffset": cl.flushed_where,
        "flushBehindBytes": max(0, cl.max_offset - cl.flushed_where),
        "dispatchedOffset": reput,
        "dispatchBehindBytes": max(0, cl.max_offset - reput),
        "lastStoreTimestamp": cl.last_store_timestamp or None,
        "checkpoint": {
            "physicMsgTimestamp": cp.physic_msg_timestamp,
            "logicsMsgTimestamp": cp.logics_msg_timestamp,
            "indexMsgTimestamp": cp.index_msg_timestamp,
        },
        "mappedFileSizeCommitLog": cl.file_size,
        "mappedFileSizeConsumeQueue": s.cq_file_size,
        "maxMessageSize": s.config.max_message_size,
        "commitLogSegments": cl.segment_count,
        "consumeQueueFiles": sum(cq.file_count for _, cq in queues),
        "indexFiles": index_files,
        "topics": len(topics),
        "queues": len(queues),
        "messages": sum(cq.max_offset - cq.min_offset for _, cq in queues),
        "groups": len(s.group_names()),
        # what opening the store repaired, and queues found damaged while reading
        # (rmqfs verify names the units; rmqfs recover rebuilds them)
        "repairs": list(getattr(s, "repairs", []))[:100],
        # what the recovery at open did (engine.service.recovery.RecoveryReport; null: a follower)
        "recovery": recovery.to_json() if recovery is not None else None,
        "damagedQueues": [
            {"topic": t, "queueId": q, "error": what}
            for (t, q), what in sorted(getattr(s, "damaged", {}).items())[:100]
        ],
        # the first damage a read of scheduled.jsonl found in the 5.x timer store (null: none)
        "timerDamage": getattr(s, "timer_damage", None),
        # topics the store holds under names unsafe as a path (empty, '.', '..', '/',
        # NUL, over 255 bytes): not shown; every other topic is
        "skippedTopics": s.skipped_topics()[:100],
        # LMQ units not built past maxLmqConsumeQueueNum (engine.service.dispatch.admit_lmq):
        # limit, the first record refused (offset, file), records, units, reason; null: none
        "lmqRefused": getattr(getattr(s, "lmq_limit", None), "refused", None),
        # what the store directory holds besides the plain layout: left as it is (a layout
        # that rmqfs would make the broker misread refuses writers: refusesWrite)
        "notUnderstood": [f.to_json() for f in getattr(s, "foreign", [])][:100],
        **follower_status(s),
    }


def follower_status(store: MessageStore) -> dict:
    """status.json's follower fields: ``follower`` (bool), and for a follower the writer's
    pid (null once no process holds the store's lock), its CommitLog end
    (``writerCommitLogMaxOffset``, bytes of complete records), ``followerBehindBytes``
    (written but not visible yet), ``followerBehindMs`` (how long the oldest of those has
    waited since its store time) and ``followerRefreshedTimestamp`` (epoch ms of the last
    refresh)."""
    f = store.follower
    if f is None:
        return {"follower": False}
    return {
        "follower": True,
        "writerPid": store.writer_pid,
        "writerCommitLogMaxOffset": max(f.writer_end, store.commitlog.max_offset),
        "followerBehindBytes": f.behind_bytes,
        "followerBehindMs": f.behind_ms(),
        "followerRefreshedTimestamp": f.refreshed_ms,
    }
