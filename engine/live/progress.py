"""Consumer progress of a subscription group: the one computation behind every view of it.

``rmqfs consumer-progress``, ``MNT/groups/<group>/progress.json`` and the Spark report (which
reads progress.json) all show these rows, so they cannot disagree.

The rules are the broker's ``AdminBrokerProcessor.getConsumeStats`` (RocketMQ 4.x,
broker/src/main/java/org/apache/rocketmq/broker/processor/AdminBrokerProcessor.java), which
``mqadmin consumerProgress`` prints:

- topics: the one asked for, else every topic the group has committed offsets for
  (``ConsumerOffsetManager.whichTopicByConsumer``); a topic without a config is skipped;
- queues: ``0 .. readQueueNums - 1`` of the topic's config (the queues consumers read; a
  queue past them, written while ``writeQueueNums`` was larger, is not reported, as the broker
  does not report it); a topic with queues on disk but no config (which the broker skips) is
  shown with the queues it holds;
- ``brokerOffset`` = the queue's max offset (never below 0);
- ``consumerOffset`` = the committed offset, or 0 when there is none (``queryOffset`` gives -1,
  which the broker shows as 0);
- ``lastTimestamp`` = the store time (epoch ms) of the message at ``consumerOffset - 1``, or 0 when
  there is no such message (nothing consumed yet, or it has expired);
- ``diff`` = ``brokerOffset - consumerOffset`` (``ConsumeStats.computeTotalDiff``; negative when a
  commit is ahead of the queue, as the broker reports it).
"""

from __future__ import annotations

from typing import Protocol

from ..errors import StoreError
from ..format.config import ConsumerOffsetManager


class _Stamped(Protocol):
    store_timestamp: int


class ProgressSource(Protocol):
    """What :func:`consumer_progress` reads: an open :class:`engine.store.MessageStore`, or a
    snapshot in object storage (:class:`engine.live.remote.SnapshotProgress`)."""

    consumer_offsets: ConsumerOffsetManager

    def topic_names(self) -> list[str]:
        """The topics, sorted."""

    def queue_ids(self, topic: str) -> list[int]:
        """The queue ids of ``topic``, sorted."""

    def read_queue_nums(self, topic: str) -> int | None:
        """The topic's ``readQueueNums``, None for a topic without a config."""

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's min offset."""

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's max offset (the next one a put takes)."""

    def get_message(self, topic: str, queue_id: int, queue_offset: int) -> _Stamped:
        """The message at ``queue_offset`` (its store timestamp is what is read)."""


def consumer_progress(store: ProgressSource, group: str, topic: str | None = None) -> list[dict]:
    """Progress rows of ``group`` on ``store`` (an open :class:`engine.store.MessageStore`, or
    any :class:`ProgressSource`).

    Returns one dict per topic/queue, sorted by topic then queueId, with the keys ``topic``,
    ``queueId``, ``brokerOffset``, ``consumerOffset``, ``diff`` (message counts) and
    ``lastTimestamp`` (epoch ms, 0 when unknown). ``topic`` narrows the rows to one topic (which
    need not have commits). Raises nothing for a group without commits: it has no rows.
    """
    committed = store.consumer_offsets.topics_of(group)
    topics = [topic] if topic is not None else sorted(committed)
    known = set(store.topic_names())
    rows = []
    for t in topics:
        if t not in known:
            continue  # "consumeStats, topic config not exist"
        offsets = committed.get(t, {})
        n = store.read_queue_nums(t)
        for q in range(n) if n is not None else store.queue_ids(t):
            broker_offset = max(store.max_offset(t, q), 0)
            consumer_offset = max(offsets.get(q, -1), 0)
            rows.append(
                {
                    "topic": t,
                    "queueId": q,
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "diff": broker_offset - consumer_offset,
                    "lastTimestamp": _store_timestamp(store, t, q, consumer_offset - 1),
                }
            )
    return rows


def _store_timestamp(store: ProgressSource, topic: str, queue_id: int, queue_offset: int) -> int:
    """``getMessageStoreTimeStamp``: store time of one queue offset, 0 when there is none."""
    if (
        queue_offset < 0
        or queue_offset < store.min_offset(topic, queue_id)
        or queue_offset >= store.max_offset(topic, queue_id)
    ):
        return 0
    try:
        return store.get_message(topic, queue_id, queue_offset).store_timestamp
    except StoreError:  # expired under us, or unreadable: no time, as the broker's -1 -> 0
        return 0


def diff_total(rows: list[dict]) -> int:
    """``Consume Diff Total`` of :func:`consumer_progress` rows: the sum of their ``diff``
    (``ConsumeStats.computeTotalDiff``), as the CLI, the mount and the report show it."""
    return sum(r["diff"] for r in rows)
