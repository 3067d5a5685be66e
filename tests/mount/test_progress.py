"""Consumer progress (engine/live/progress.py): the broker's getConsumeStats rules, and one answer
through the engine, the command line and the mount."""

import json

import pytest

from conftest import fuse, run_rmqfs
from rmqfs.engine.live.progress import consumer_progress
from rmqfs.engine.store import Message, MessageStore


def _fill(store: MessageStore) -> dict:
    store.create_topic("T", 2)
    res = store.put_messages([Message("T", f"m{i}".encode(), queue_id=i % 2) for i in range(10)])
    return {(r.queue_id, r.queue_offset): r.store_timestamp for r in res}


def test_rows_follow_the_brokers_rules(tmp_path, small_config):
    with MessageStore(str(tmp_path / "s"), small_config) as s:
        ts = _fill(s)
        s.create_topic("Other", 1)
        s.commit_offset("G", "T", 0, 3)
        rows = consumer_progress(s, "G")
        # only the topics the group committed to; every queue of it, committed or not
        assert rows == [
            {
                "topic": "T",
                "queueId": 0,
                "brokerOffset": 5,
                "consumerOffset": 3,
                "diff": 2,
                "lastTimestamp": ts[(0, 2)],
            },
            # no commit: the broker's queryOffset -1 is shown as 0, and no last time (0)
            {
                "topic": "T",
                "queueId": 1,
                "brokerOffset": 5,
                "consumerOffset": 0,
                "diff": 5,
                "lastTimestamp": 0,
            },
        ]
        # a topic asked for by name needs no commit; an unknown one has no rows
        assert [r["diff"] for r in consumer_progress(s, "G", "Other")] == [0]
        assert consumer_progress(s, "G", "Nope") == []
        assert consumer_progress(s, "nobody") == []


def test_rows_are_the_queues_consumers_read(tmp_path, small_config):
    """getConsumeStats reports queues 0..readQueueNums-1: a queue written while writeQueueNums
    was larger is not a consumer's, and its messages are no one's lag."""
    with MessageStore(str(tmp_path / "s"), small_config) as s:
        s.create_topic("T", 4)
        s.put_messages([Message("T", b"m", queue_id=q) for q in range(4)])
        s.update_topic("T", read_queue_nums=2)
        s.commit_offset("G", "T", 0, 1)
        rows = consumer_progress(s, "G")
        assert [r["queueId"] for r in rows] == [0, 1]
        assert sum(r["diff"] for r in rows) == 1
        s.update_topic("T", read_queue_nums=6, write_queue_nums=2)
        rows = consumer_progress(s, "G")
        assert [r["queueId"] for r in rows] == [0, 1, 2, 3, 4, 5]
        assert [r["brokerOffset"] for r in rows] == [1, 1, 1, 1, 0, 0]


@fuse
@pytest.mark.fuse
def test_cli_and_mount_show_the_same_progress(mount_store):
    m = mount_store()
    (m.mnt / "topics" / "T").mkdir()
    (m.mnt / "topics" / "T" / "produce").write_bytes(b"".join(b"x%d\n" % i for i in range(40)))
    (m.mnt / "groups" / "G").mkdir()
    (m.mnt / "groups" / "G" / "T" / "1" / "offset").write_text("4\n")
    mounted = json.loads((m.mnt / "groups" / "G" / "progress.json").read_bytes())
    m.umount()
    with MessageStore(str(m.store), read_only=True) as s:
        engine_rows = consumer_progress(s, "G")
    assert mounted["queues"] == engine_rows
    assert mounted["diffTotal"] == 36
    out = run_rmqfs("consumer-progress", m.store, "-g", "G").stdout.splitlines()
    cli = [line.split()[:6] for line in out[1:5]]
    assert cli == [
        [
            "T",
            s.config.broker_name,
            str(r["queueId"]),
            str(r["brokerOffset"]),
            str(r["consumerOffset"]),
            str(r["diff"]),
        ]
        for r in engine_rows
    ]
