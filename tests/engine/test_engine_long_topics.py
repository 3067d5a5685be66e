"""Topics over 127 chars (V2 records, ``MessageVersion.MESSAGE_VERSION_V2``) in a RocketMQ 5.x
store: the engine writes them as RocketMQ does, every reader decodes them, and a reopened store
shows them (issue 15, item 2: a 150-char topic of a 5.3.3 store was skipped at load).

The store is built by the engine's V2 writer (tests/stores.py ``long_topic_store``); the
independent tests/refreader.py judges the bytes.
"""

from __future__ import annotations

import os

import refreader
from rmqfs.engine.format.config import TopicConfig
from rmqfs.engine.format.message import MAGIC_V1, MAGIC_V2, cal_msg_length, encode_message
from rmqfs.engine.read import columnar
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.tools.verify import verify_store
from stores import (
    LONG_GROUP,
    LONG_TOPIC,
    LONG_TOPICS,
    RETRY_TOPIC,
    long_topic_config,
    long_topic_store,
)
from test_columnar import _check_store


def test_v2_records_are_rocketmqs_bytes(tmp_path):
    """Each long topic's records: magic 0xDAA320AB, a 2-byte topic length, TOTALSIZE =
    calMsgLength + 1 (MessageExtEncoder.calMsgLength with getTopicLengthSize() 2); the short
    topics' stay V1. refreader reads the length field itself."""
    long_topic_store(tmp_path / "s")
    recs = refreader.read_commitlog(tmp_path / "s" / "commitlog")
    assert {r["topic"] for r in recs} == {"T", "U", *LONG_TOPICS}
    for r in recs:
        v2 = len(r["topic"]) > 127
        assert (r["magic"], r["topicLengthSize"]) == ((MAGIC_V2, 2) if v2 else (MAGIC_V1, 1))
        assert r["totalSize"] == cal_msg_length(
            r["sysFlag"], len(r["body"]), len(r["topic"]), len(r["propertiesRaw"]), v2
        )
    # records cross segment ends: the store has several CommitLog files, blanks at their ends
    assert len(refreader.list_segments(tmp_path / "s" / "commitlog")) >= 4
    assert refreader.blank_records(tmp_path / "s" / "commitlog")


def test_reopened_store_shows_every_topic_and_message(tmp_path):
    want = long_topic_store(tmp_path / "s")
    with MessageStore(str(tmp_path / "s"), long_topic_config(), read_only=True) as s:
        assert s.topic_names() == sorted(["T", "U", *LONG_TOPICS])
        assert s.skipped_topics() == []
        for t, bodies in want.items():
            got = [rec.body for q in s.queue_ids(t) for _, rec in s.iter_queue(t, q)]
            assert sorted(got) == sorted(bodies), t
        assert s.consumer_offsets.query(LONG_GROUP, RETRY_TOPIC, 0) == 3
        assert LONG_GROUP in s.group_names()
        hits = s.query_by_key(LONG_TOPIC, "shared")
        assert hits and all(r.topic == LONG_TOPIC for r in hits)
    res = verify_store(str(tmp_path / "s"), long_topic_config())
    assert res.ok and not res.warnings, res.problems


def test_recovery_redispatches_v2_records(tmp_path):
    """Abnormal recovery (abort present, ConsumeQueues gone) rebuilds the long topics' queues
    from the V2 records (the raw recovery walk, CommitLog.scan_raw)."""
    root = tmp_path / "s"
    want = long_topic_store(root)
    import shutil

    shutil.rmtree(root / "consumequeue")
    (root / "abort").write_bytes(b"")
    with MessageStore(str(root), long_topic_config()) as s:
        for t, bodies in want.items():
            got = [rec.body for q in s.queue_ids(t) for _, rec in s.iter_queue(t, q)]
            assert sorted(got) == sorted(bodies), t
    assert verify_store(str(root), long_topic_config()).ok


def test_columnar_equals_per_record_and_refreader_on_v1_and_v2(tmp_path):
    """The differential check on a store mixing V1 and V2 records across segment ends: the
    columnar decoder (V2 records take its exact per-record path) equals the per-record decoder
    and refreader, queue by queue and over the whole CommitLog."""
    long_topic_store(tmp_path / "s")
    files = columnar.StoreFiles(str(tmp_path / "s"))
    assert set(LONG_TOPICS) <= set(files.topics())
    files.close()
    n = len(refreader.read_commitlog(tmp_path / "s" / "commitlog"))
    assert _check_store(tmp_path / "s") == 2 * n


def test_skipped_topics_of_records_and_directories(tmp_path):
    """A record whose topic no directory can be named after (here 256 bytes, written by
    RocketMQ's store classes, which lack HookUtils.checkBeforePutMessage) stays in the
    CommitLog, gets no ConsumeQueue (nothing is created outside consumequeue/) and is listed
    in skipped_topics(); so is a record of topic '..'."""
    root = tmp_path / "s"
    with MessageStore(str(root), long_topic_config()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"before")])
    host = (b"\x7f\0\0\1", 1)
    # append through the engine's CommitLog with a store open (dispatch then sees them)
    with MessageStore(str(root), long_topic_config()) as s:
        for topic in ("x" * 256, ".."):
            e = encode_message(
                topic,
                b"odd",
                queue_id=0,
                properties={},
                born_timestamp=1,
                born_host=host,
                store_host=host,
            )
            s.commitlog.append([e], [0])
    before = sorted(os.listdir(tmp_path))
    (root / "abort").write_bytes(b"")  # re-dispatch what the checkpoint does not cover
    with MessageStore(str(root), long_topic_config()) as s:
        assert s.topic_names() == ["T"]
        skipped = {d["topic"]: d["reason"] for d in s.skipped_topics()}
        assert skipped == {
            "x" * 256: "record: 256 bytes: a file name holds at most 255",
            "..": "record: '..' names a directory",
        }
        s.put_messages([Message("T", b"after")])
        assert [r.body for _, r in s.iter_queue("T", 0)] == [b"before", b"after"]
    assert sorted(os.listdir(tmp_path)) == before
    assert sorted(os.listdir(root / "consumequeue")) == ["T"]


def test_new_topics_keep_the_client_rule(tmp_path):
    """Creating a topic (mkdir topics/X, rmqfs produce -c) keeps TopicValidator.validateTopic:
    127 chars, the broker's retry and DLQ topics 255 (RETRY_OR_DLQ_TOPIC_MAX_LENGTH, the
    HookUtils.MAX_TOPIC_LENGTH of a stored topic): %RETRY% + a 255-char group (262) is
    refused as a real broker refuses to store it."""
    import pytest

    from rmqfs.engine.errors import InvalidNameError

    with MessageStore(str(tmp_path / "s"), long_topic_config()) as s:
        for bad in ("L" * 128, "%RETRY%" + "g" * 249, "%DLQ%" + "g" * 251, "%RETRY%" + "g" * 255):
            with pytest.raises(InvalidNameError):
                s.create_topic(bad)
        for good in ("L" * 127, "%RETRY%" + "g" * 248, "%DLQ%" + "g" * 250):
            s.create_topic(good)
        with pytest.raises(InvalidNameError):
            s.topic_config.put(TopicConfig("%RETRY%" + "g" * 255, 1, 1))
        s.create_group("g" * 255)  # a group may have 255 chars (Validators.CHARACTER_MAX_LENGTH)
