"""The ``rocketmq`` data source's ``scheduled`` option (issue 22, 2.2): the messages waiting for
delivery, the same rows as the mount's ``scheduled.jsonl``."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES

pytest.importorskip("pyspark")

from rmqfs.engine.read.jsonline import build_scheduled_line
from rmqfs.engine.read.scheduled import waiting_messages
from rmqfs.engine.store import MessageStore
from rmqfs.pipeline import datasource as D

pytestmark = [pytest.mark.spark]

STORE = FIXTURES / "rocketmq-5.3.3-timer" / "store"


def test_scheduled_rows_equal_the_waiting_messages(spark):
    with MessageStore(str(STORE), read_only=True) as s:
        waiting = list(waiting_messages(s))
        want = [
            json.loads(build_scheduled_line(w.record, w.real_topic, w.real_queue_id, w.deliver_ms))
            for w in waiting
        ]
    assert len(want) == 39 + 14
    D.register(spark)
    df = spark.read.format("rocketmq").option("scheduled", "true").load(str(STORE))
    assert df.columns[-3:] == ["topic", "queue", "deliverTimestamp"]
    rows = df.collect()
    got = [
        (r.topic, r.queue, r.queueId, r.deliverTimestamp, r.commitLogOffset, bytes(r.body))
        for r in rows
    ]
    assert got == [
        (
            w["topic"],
            w["queueId"],
            w["queueId"],
            w["deliverTimestamp"],
            w["commitLogOffset"],
            rec.record.plain_body,
        )
        for w, rec in zip(want, waiting)
    ]
    assert dict(rows[0].properties) == want[0]["properties"]
    only = (
        spark.read.format("rocketmq")
        .option("scheduled", "true")
        .option("topics", "TopicB")
        .option("queues", "1")
        .load(str(STORE))
    )
    assert sorted(r.commitLogOffset for r in only.collect()) == sorted(
        w["commitLogOffset"] for w in want if w["topic"] == "TopicB" and w["queueId"] == 1
    )


def test_scheduled_rows_of_a_wheel_sharing_one_chain(spark, tmp_path):
    """Issue 36 item 1: a worker reached 4.35 GB in 300 s on a wheel whose every slot points at
    one chain; now the rows are the engine's, each message once."""
    from timerstore import build_shared_chain_store

    store = tmp_path / "s"
    offsets = build_shared_chain_store(store)
    D.register(spark)
    df = spark.read.format("rocketmq").option("scheduled", "true").load(str(store))
    assert [r.commitLogOffset for r in df.collect()] == offsets
