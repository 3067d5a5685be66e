"""``topics/<topic>/scheduled.jsonl`` without a kernel: the messages waiting for delivery to a
topic, as JSON lines with their real topic and queue and deliverTimestamp (issue 22, 2.2)."""

from __future__ import annotations

import errno
import json
import time

import pytest

from conftest import FIXTURES, copy_fixture
from fstree import tree
from rmqfs.fusefs import nodes
from rmqfs.fusefs.base import FsError

TIMER_FIX = FIXTURES / "rocketmq-5.3.3-timer"


def _expected_waiting(topic):
    rows = [json.loads(x) for x in (TIMER_FIX / "expected.jsonl").read_text().splitlines()]
    timed = {
        (r["uniqKey"], r["deliverMs"], r["realQueueId"])
        for r in rows
        if r["kind"] == "scheduled" and not r["cancelled"] and r["realTopic"] == topic
    }
    delayed = {
        (r["uniqKey"], r["tagsCode"], int(r["properties"]["REAL_QID"]))
        for r in rows
        if r["kind"] == "message"
        and r["topic"] == "SCHEDULE_TOPIC_XXXX"
        and r["properties"]["REAL_TOPIC"] == topic
    }
    return timed | delayed


def test_scheduled_jsonl_lists_what_waits_for_the_topic(tmp_path):
    store = TIMER_FIX / "store"
    with tree(tmp_path, read_only=True, store_dir=store) as t:
        assert "scheduled.jsonl" in t.node("/topics/TopicA").list()
        for topic in ("TopicA", "TopicD"):
            lines = [json.loads(x) for x in t.read(f"/topics/{topic}/scheduled.jsonl").splitlines()]
            assert {x["topic"] for x in lines} == {topic}
            got = {
                (x["properties"]["UNIQ_KEY"], x["deliverTimestamp"], x["queueId"]) for x in lines
            }
            assert got == _expected_waiting(topic) and len(lines) == len(got)
            assert [x["deliverTimestamp"] for x in lines] == sorted(
                x["deliverTimestamp"] for x in lines
            )
            assert list(lines[0])[-2:] == ["deliverTimestamp", "body"]
        assert t.read("/topics/TopicA/messages.jsonl") != b""  # delivered ones: as usual
        assert t.read("/topics/SELF_TEST_TOPIC/scheduled.jsonl") == b""


def test_scheduled_jsonl_is_bounded_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(nodes, "SCHEDULED_MAX_BYTES", 3000)
    with tree(tmp_path, read_only=True, store_dir=TIMER_FIX / "store") as t:
        lines = t.read("/topics/TopicA/scheduled.jsonl").splitlines()
    last = json.loads(lines[-1])
    assert last["truncated"] is True and last["waiting"] == len(_expected_waiting("TopicA"))
    assert last["shown"] == len(lines) - 1 and sum(len(x) + 1 for x in lines[:-1]) <= 3000


def test_produce_jsonl_stores_delayed_and_timed_messages(tmp_path):
    store = copy_fixture("rocketmq-5.3.3-timer", tmp_path / "fix") / "store"
    deliver = (int(time.time()) + 7200) * 1000 + 123
    with tree(tmp_path, store_dir=store) as t:
        before = len(t.read("/topics/TopicA/scheduled.jsonl").splitlines())
        line = {"body": "later", "deliverTimestamp": deliver, "queueId": 1}
        t.write(
            "/topics/TopicA/produce.jsonl",
            json.dumps(line).encode() + b"\n" + b'{"body": "soon", "delayTimeLevel": 2}\n',
        )
        lines = [json.loads(x) for x in t.read("/topics/TopicA/scheduled.jsonl").splitlines()]
        with pytest.raises(FsError) as exc:
            t.write("/topics/TopicA/produce.jsonl", b'{"body": "x", "delayMs": 1e3}\n')
        assert exc.value.errno == errno.EINVAL
    assert len(lines) == before + 2
    (later,) = [x for x in lines if x["body"] == "later"]
    assert (later["topic"], later["queueId"], later["deliverTimestamp"]) == (
        "TopicA",
        1,
        deliver // 1000 * 1000,
    )
    assert later["properties"]["TIMER_DELIVER_MS"] == str(deliver)
    (soon,) = [x for x in lines if x["body"] == "soon"]
    assert soon["deliverTimestamp"] == soon["storeTimestamp"] + 5000


def test_scheduled_jsonl_of_a_wheel_sharing_one_chain_lists_each_message_once(tmp_path):
    """Issue 36 item 1: every slot of the wheel points at one 100-unit chain; the daemon grew
    past 1.67 GB in 180 s building this file. Now each message is one line, as the engine's
    waiting_messages lists it."""
    from timerstore import build_shared_chain_store

    store = tmp_path / "s"
    offsets = build_shared_chain_store(store)
    t0 = time.monotonic()
    with tree(tmp_path, read_only=True, store_dir=store) as t:
        lines = [json.loads(x) for x in t.read("/topics/T/scheduled.jsonl").splitlines()]
    assert [x["commitLogOffset"] for x in lines] == offsets
    assert time.monotonic() - t0 < 10
