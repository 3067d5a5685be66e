"""Topics over 127 chars (V2 records) through the mount's tree, without a kernel: every message
of the retry and DLQ topics of a long consumer group (255 chars, the longest a broker stores)
and of an ordinary 150-char topic is visible in topics/, the lookups, groups/ and view/, and
status.json lists what a store holds but cannot show."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq

from fstree import tree
from rmqfs.engine.read.viewnames import NAME_MAX, topic_dir_name
from stores import DLQ_TOPIC, LONG_GROUP, LONG_TOPIC, LONG_TOPICS, RETRY_TOPIC, long_topic_store


def _lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


def test_every_message_of_long_topics_is_visible(tmp_path):
    want = long_topic_store(tmp_path / "store")
    with tree(tmp_path) as t:
        assert t.node("/topics").list() == sorted(["T", "U", *LONG_TOPICS])
        status = json.loads(t.read("/status.json"))
        assert status["skippedTopics"] == [] and status["topics"] == 5
        assert status["messages"] == sum(len(b) for b in want.values())
        for topic, bodies in want.items():
            rows = _lines(t.read(f"/topics/{topic}/messages.jsonl"))
            assert sorted(r["body"].encode() for r in rows) == sorted(bodies), topic
            assert {r["topic"] for r in rows} == {topic}
            assert sorted(t.read(f"/topics/{topic}/bodies.txt").splitlines()) == sorted(
                b.rstrip(b"\n") for b in bodies
            )
            per_queue = []
            for q in t.store.queue_ids(topic):
                per_queue += _lines(t.read(f"/topics/{topic}/{q}/messages.jsonl"))
                offsets = json.loads(t.read(f"/topics/{topic}/{q}/offsets.json"))
                assert offsets["maxOffset"] == t.store.max_offset(topic, q)
            assert sorted(r["body"] for r in per_queue) == sorted(r["body"] for r in rows)
            # lookups: by-offset, the offset msgId, keys/ (the IndexFile key "topic#key")
            first = json.loads(t.read(f"/topics/{topic}/0/by-offset/0"))
            assert first["topic"] == topic
            assert json.loads(t.read(f"/messages/{first['msgId']}"))["topic"] == topic
            keyed = _lines(t.read(f"/topics/{topic}/keys/shared"))
            assert len(keyed) == len(bodies) and {r["topic"] for r in keyed} == {topic}
            assert json.loads(t.read(f"/topics/{topic}/topic.json"))["topicName"] == topic


def test_groups_of_long_names_and_their_retry_topic(tmp_path):
    long_topic_store(tmp_path / "store")
    with tree(tmp_path) as t:
        assert LONG_GROUP in t.node("/groups").list()
        assert t.read(f"/groups/{LONG_GROUP}/{RETRY_TOPIC}/0/offset") == b"3\n"
        pending = _lines(t.read(f"/groups/{LONG_GROUP}/{RETRY_TOPIC}/0/pending.jsonl"))
        assert len(pending) == t.store.max_offset(RETRY_TOPIC, 0) - 3
        progress = json.loads(t.read(f"/groups/{LONG_GROUP}/progress.json"))
        assert RETRY_TOPIC in {q["topic"] for q in progress["queues"]}
        t.write(f"/groups/{LONG_GROUP}/{RETRY_TOPIC}/0/offset", b"5\n")
        assert t.store.consumer_offsets.query(LONG_GROUP, RETRY_TOPIC, 0) == 5
        # produce to a long topic the store holds: a V2 record, read back
        t.write(f"/topics/{LONG_TOPIC}/produce", b"written through the tree\n")
        assert b"written through the tree" in t.read(f"/topics/{LONG_TOPIC}/bodies.txt")


def test_view_partitions_of_long_topics(tmp_path):
    """view/topic=<escaped>: a name over NAME_MAX (the escaped %RETRY% and %DLQ% topics of
    255 chars) is shortened to a unique name of at most 255 bytes that maps back; its Parquet
    parts hold every message."""
    want = long_topic_store(tmp_path / "store")
    with tree(tmp_path) as t:
        names = t.node("/view").list()
        assert all(len(n.encode()) <= NAME_MAX for n in names)
        assert f"topic={LONG_TOPIC}" in names  # fits: not shortened
        for topic in LONG_TOPICS:
            name = topic_dir_name(topic)
            assert name in names
            if topic != LONG_TOPIC:
                assert name.startswith("topic=%25") and "~" in name
                assert len(name.encode()) >= NAME_MAX - 3
            bodies = []
            for qdir in t.node(f"/view/{name}").list():
                for part in t.node(f"/view/{name}/{qdir}").list():
                    table = pq.read_table(io.BytesIO(t.read(f"/view/{name}/{qdir}/{part}")))
                    bodies += table.column("body").to_pylist()
            assert sorted(bodies) == sorted(want[topic]), topic
        # an unknown name of the same shape is no entry
        name = topic_dir_name(RETRY_TOPIC)
        bogus = name[:-1] + ("1" if name.endswith("0") else "0")
        assert t.node("/view").child(bogus) is None


def test_shortened_view_names_stay_unique():
    a, b = "%RETRY%" + "g" * 247 + "a", "%RETRY%" + "g" * 247 + "b"
    assert topic_dir_name(a) != topic_dir_name(b)
    assert len(topic_dir_name("é" * 127).encode()) <= NAME_MAX  # 2-byte chars
    assert topic_dir_name("T") == "topic=T"


def test_snapshot_holds_the_long_topics(tmp_path):
    long_topic_store(tmp_path / "store")
    with tree(tmp_path) as t:
        t.mkdir("/snapshots/s1")
        assert set(LONG_TOPICS) <= set(t.node("/snapshots/s1/consumequeue").list())
        manifest = json.loads(t.read("/snapshots/s1/SNAPSHOT.json"))
        cq = [p for p in manifest["files"] if p.startswith(f"consumequeue/{RETRY_TOPIC}/0/")]
        assert cq
        with open(f"{t.store.root}/{cq[0]}", "rb") as f:
            assert t.read(f"/snapshots/s1/{cq[0]}") == f.read()


def test_status_lists_skipped_topics(tmp_path):
    """A topics.json entry no directory can be named after is not shown; status.json says
    which and why. Every other name a broker would load is shown."""
    long_topic_store(tmp_path / "store")
    cfg_path = tmp_path / "store" / "config" / "topics.json"
    raw = json.loads(cfg_path.read_text())
    raw["topicConfigTable"]["%RETRY%" + "g" * 255] = {"topicName": "x", "readQueueNums": 1}
    raw["topicConfigTable"]["a/b"] = {"topicName": "a/b", "readQueueNums": 1}
    cfg_path.write_text(json.dumps(raw))
    with tree(tmp_path) as t:
        status = json.loads(t.read("/status.json"))
        assert status["skippedTopics"] == [
            {
                "topic": "%RETRY%" + "g" * 255,
                "reason": "topics.json: 262 bytes: a file name holds at most 255",
            },
            {"topic": "a/b", "reason": "topics.json: contains '/'"},
        ]
        assert t.node("/topics").list() == sorted(["T", "U", *LONG_TOPICS])
        assert DLQ_TOPIC in t.node("/topics").list()
