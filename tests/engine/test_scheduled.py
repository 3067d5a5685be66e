"""Scheduled messages (issue 22, 2.2): what waits for delivery in the 5.x timer store and the
4.x delay levels (engine.read.scheduled, engine.format.timer*), and delayed and timed messages
produced as RocketMQ's broker stores them (HookUtils.handleScheduleMessage)."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import time

import pytest

import refreader
from conftest import FIXTURES
from rmqfs.engine.errors import CorruptRecordError, MessageIllegalError
from rmqfs.engine.format.timerlog import TimerLogReader
from rmqfs.engine.format.timerwheel import WHEEL_LENGTH, read_live_slots
from rmqfs.engine.read.jsonline import build_scheduled_line, message_from_json
from rmqfs.engine.read.scheduled import DELAY, TIMER, waiting_messages, waiting_refs
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from stores import small

TIMER_FIX = FIXTURES / "rocketmq-5.3.3-timer"


def _expected(kind):
    rows = [json.loads(x) for x in (TIMER_FIX / "expected.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


@pytest.fixture(scope="module")
def timer_store():
    with MessageStore(str(TIMER_FIX / "store"), read_only=True) as s:
        yield s


def test_the_timer_fixture_lists_every_waiting_timed_message_with_its_deliver_time(timer_store):
    """The 51 timed messages TimerMessageStore holds (23 rolled, 12 recalled): the 39 not
    recalled are listed once each, with their real topic and queue, TIMER_OUT_MS and the
    record that holds them; the recalled ones are not."""
    exp = _expected("scheduled")
    assert len(exp) == 51 and sum(e["cancelled"] for e in exp) == 12
    got = [w for w in waiting_messages(timer_store) if w.source == TIMER]
    want = sorted(
        (e["deliverMs"], e["realTopic"], e["realQueueId"], e["uniqKey"], e["commitLogOffset"])
        for e in exp
        if not e["cancelled"]
    )
    assert [
        (
            w.deliver_ms,
            w.real_topic,
            w.real_queue_id,
            w.record.properties["UNIQ_KEY"],
            w.record.commitlog_offset,
        )
        for w in got
    ] == want
    cancelled = {e["uniqKey"] for e in exp if e["cancelled"]}
    assert not cancelled & {w.record.properties["UNIQ_KEY"] for w in got}


def test_the_timer_fixture_lists_its_delay_level_messages_at_their_tagscode(timer_store):
    """The 14 SCHEDULE_TOPIC_XXXX messages (no delayOffset.json: none delivered) wait for their
    REAL_TOPIC/REAL_QID until their unit's tagsCode (computeDeliverTimestamp)."""
    exp = [e for e in _expected("message") if e["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert len(exp) == 14
    want = sorted(
        (
            e["tagsCode"],
            e["commitLogOffset"],
            e["properties"]["REAL_TOPIC"],
            int(e["properties"]["REAL_QID"]),
        )
        for e in exp
    )
    got = [
        (w.deliver_ms, w.record.commitlog_offset, w.real_topic, w.real_queue_id)
        for w in waiting_messages(timer_store)
        if w.source == DELAY
    ]
    assert got == want


def test_one_topic_lists_only_what_waits_for_it(timer_store):
    every = list(waiting_messages(timer_store))
    only = list(waiting_messages(timer_store, "TopicB"))
    assert only and [w.record.commitlog_offset for w in only] == [
        w.record.commitlog_offset for w in every if w.real_topic == "TopicB"
    ]
    assert [w.deliver_ms for w in every] == sorted(w.deliver_ms for w in every)


def _write_delay_offsets(root, table):
    os.makedirs(os.path.join(root, "config"), exist_ok=True)
    with open(os.path.join(root, "config", "delayOffset.json"), "w") as f:
        json.dump({"offsetTable": table}, f)


def test_delay_levels_wait_from_delayoffset_json_on(tmp_path):
    """Units of queue level-1 at or after delayOffset.json's offset of the level wait, until
    their store time plus the level's delay (messageDelayLevel: level 2 = 5 s, 5 = 1 min)."""
    root = str(tmp_path / "s")
    with MessageStore(root) as s:
        s.create_topic("T", 2)
        s.create_topic("U", 2)
        put = s.put_messages(
            [Message("T", f"m{i}".encode(), delay_level=2, queue_id=1) for i in range(3)]
            + [Message("U", b"u", delay_level=5), Message("T", b"plain")]
        )
    _write_delay_offsets(root, {"2": 1})  # level 2's first message was delivered
    with MessageStore(root, read_only=True) as s:
        got = [
            (w.real_topic, w.real_queue_id, w.record.body, w.deliver_ms, w.source)
            for w in waiting_messages(s)
        ]
    t_ms = put[0].store_timestamp
    assert got[:2] == [("T", 1, b"m1", t_ms + 5000, DELAY), ("T", 1, b"m2", t_ms + 5000, DELAY)]
    assert len(got) == 3 and got[2][1] in (0, 1)
    assert got[2][:1] + got[2][2:] == ("U", b"u", t_ms + 60_000, DELAY)
    assert put[3].topic == "SCHEDULE_TOPIC_XXXX" and put[3].queue_id == 4


def _timer_store(tmp_path, **cfg):
    root = str(tmp_path / "s")
    os.makedirs(root)
    with open(os.path.join(root, "timerwheel"), "wb") as f:
        f.truncate(WHEEL_LENGTH)  # a 5.x broker's store
    s = MessageStore(root, dataclasses.replace(small(), **cfg))
    s.create_topic("T", 4)
    return root, s


def _hook_utils(props: dict, topic: str, qid: int, deliver_ms: int, precision: int = 1000):
    """What HookUtils.transformTimerMessage makes of a message's properties, from its rules:
    TIMER_OUT_MS = the deliver time rounded down to the precision, one tick less when it is a
    multiple of it; REAL_TOPIC and REAL_QID added; the client's properties kept."""
    out = (
        deliver_ms - precision
        if deliver_ms % precision == 0
        else deliver_ms // precision * precision
    )
    return {**props, "TIMER_OUT_MS": str(out), "REAL_TOPIC": topic, "REAL_QID": str(qid)}


@pytest.mark.parametrize("exact", [False, True])
def test_a_produced_timed_message_is_what_hookutils_makes_of_it(tmp_path, exact):
    """Field by field (an independent reader of the CommitLog and ConsumeQueue): topic
    rmq_sys_wheel_timer queue 0, the client's TIMER_DELIVER_MS kept, TIMER_OUT_MS, REAL_TOPIC,
    REAL_QID added, a tag-hash tagsCode, the timer topic created with one queue; the wheel is
    not touched (the broker's TimerMessageStore.enqueue reads the unit in on start)."""
    root, s = _timer_store(tmp_path)
    deliver = (int(time.time()) + 7200) * 1000 + (0 if exact else 123)
    with s:
        (r,) = s.put_messages(
            [
                Message(
                    "T",
                    b"hello",
                    tags="TagA",
                    keys="k1 k2",
                    properties={"a": "b"},
                    queue_id=2,
                    deliver_time_ms=deliver,
                )
            ]
        )
        cfg = s.topic_config.get("rmq_sys_wheel_timer")
        assert (cfg.read_queue_nums, cfg.write_queue_nums) == (1, 1)
    (rec,) = refreader.read_commitlog(os.path.join(root, "commitlog"))
    client = {
        "a": "b",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": r.uniq_key,
        "TIMER_DELIVER_MS": str(deliver),
    }
    assert rec["topic"] == "rmq_sys_wheel_timer" and rec["queueId"] == 0
    assert rec["properties"] == _hook_utils(client, "T", 2, deliver)
    assert rec["body"] == b"hello" and rec["sysFlag"] == 0 and rec["queueOffset"] == 0
    units = refreader.read_consumequeue(root, "rmq_sys_wheel_timer", 0)
    assert units == [(rec["physicalOffset"], rec["totalSize"], refreader.tags_code("TagA"))]
    assert not os.path.exists(os.path.join(root, "consumequeue", "T"))
    with open(os.path.join(root, "timerwheel"), "rb") as f:
        assert not f.read().strip(b"\0")
    with MessageStore(root, read_only=True) as s2:
        (w,) = waiting_messages(s2, "T")
    assert (w.real_topic, w.real_queue_id, w.deliver_ms) == (
        "T",
        2,
        int(rec["properties"]["TIMER_OUT_MS"]),
    )


def test_a_delay_in_ms_counts_from_the_store_time(tmp_path):
    root, s = _timer_store(tmp_path)
    with s:
        (r,) = s.put_messages([Message("T", b"x", queue_id=0, delay_time_ms=90_500)])
    (rec,) = refreader.read_commitlog(os.path.join(root, "commitlog"))
    assert rec["properties"]["TIMER_DELAY_MS"] == "90500"
    assert rec["properties"] == _hook_utils(
        {"UNIQ_KEY": r.uniq_key, "TIMER_DELAY_MS": "90500"}, "T", 0, rec["storeTimestamp"] + 90_500
    )


def test_timed_messages_past_now_too_far_or_without_a_timer_store(tmp_path):
    """A deliver time already past stays in its topic (HookUtils leaves it); one more than
    timerMaxDelaySec ahead is refused (WHEEL_TIMER_MSG_ILLEGAL); a store with no timerwheel
    refuses timed messages unless broker.conf says timerWheelEnable=true."""
    _root, s = _timer_store(tmp_path)
    now = int(time.time() * 1000)
    with s:
        (r,) = s.put_messages([Message("T", b"x", deliver_time_ms=now - 1)])
        assert r.topic == "T"
        assert s.get_message("T", r.queue_id, 0).properties["TIMER_DELIVER_MS"] == str(now - 1)
        with pytest.raises(MessageIllegalError, match="timerMaxDelaySec"):
            s.put_messages([Message("T", b"x", delay_time_sec=3 * 86400 + 60)])
        s.put_messages([Message("T", b"x", deliver_time_ms=now + 2 * 86400_000)])
    bare = str(tmp_path / "bare")
    with MessageStore(bare) as s:
        s.create_topic("T", 1)
        with pytest.raises(MessageIllegalError, match="no timerwheel"):
            s.put_messages([Message("T", b"x", delay_time_ms=60_000)])
        assert s.max_offset("T", 0) == 0
    with MessageStore(bare, StoreConfig(timer_wheel_enable=True)) as s:
        (r,) = s.put_messages([Message("T", b"x", delay_time_ms=60_000)])
        assert r.topic == "rmq_sys_wheel_timer"


def test_produce_jsonl_takes_a_delay_level_a_deliver_time_or_a_delay():
    m = message_from_json({"body": "x", "delayTimeLevel": 3}, "T")
    assert m.delay_level == 3 and m.deliver_time_ms is None
    assert message_from_json({"body": "x", "deliverTimestamp": 5}, "T").deliver_time_ms == 5
    assert message_from_json({"body": "x", "delayMs": 7}, "T").delay_time_ms == 7
    with pytest.raises(MessageIllegalError, match="one of"):
        message_from_json({"body": "x", "delayMs": 7, "delayTimeLevel": 1}, "T")
    with pytest.raises(MessageIllegalError, match="integer"):
        message_from_json({"body": "x", "deliverTimestamp": "soon"}, "T")
    with pytest.raises(MessageIllegalError, match="delay level"):
        message_from_json({"body": "x", "delayTimeLevel": -1}, "T")


UNIT = struct.Struct(">iqiqiqiiq")


def test_a_timerlog_chain_that_loops_ends(tmp_path):
    """A unit whose prevPos does not point back (here: at itself) stops the walk with a
    reason; a bad unit raises CorruptRecordError; a wheel of the wrong size too."""
    d = tmp_path / "timerlog"
    d.mkdir()
    data = UNIT.pack(52, -1, 1, 0, 0, 0, 100, 0, 0) + UNIT.pack(52, 52, 1, 0, 0, 100, 100, 0, 0)
    (d / ("0" * 20)).write_bytes(data + b"\0" * (1040 - len(data)))
    with TimerLogReader(str(d)) as tl:
        units, problem = tl.walk_chain(52)
        assert [u.pos for u in units] == [52] and "cycle" in problem
        units, problem = tl.walk_chain(0)
        assert [u.offset_py for u in units] == [0] and problem is None
        with pytest.raises(CorruptRecordError):
            tl.walk_chain(104)  # zeros: not a unit
    wheel = tmp_path / "timerwheel"
    wheel.write_bytes(b"\0" * 64)
    with pytest.raises(CorruptRecordError, match="timer wheel"):
        read_live_slots(str(wheel), 0)


def test_chains_that_join_are_walked_once(tmp_path):
    """walk_chains: heads in the middle of a chain and repeats are walked once each unit; a
    loop and a chain past the log's units end with a problem, never a hang."""
    d = tmp_path / "timerlog"
    d.mkdir()
    data = b"".join(
        UNIT.pack(52, (i - 1) * 52 if i else -1, 1, 0, 0, 100 * i, 100, 0, 0) for i in range(10)
    )
    (d / ("0" * 20)).write_bytes(data + b"\0" * (1040 - len(data)))
    with TimerLogReader(str(d)) as tl:
        problems: list[str] = []
        got = [u.pos for u in tl.walk_chains([9 * 52, 4 * 52, 9 * 52, 2 * 52], problems)]
        assert got == [52 * i for i in range(9, -1, -1)] and problems == []
        got = [u.pos for u in tl.walk_chains([2 * 52, 9 * 52], problems)]
        assert got == [104, 52, 0, 468, 416, 364, 312, 260, 208, 156] and problems == []


HOSTILE_TIMER = r"""
import json, sys, time
from rmqfs.engine.read.scheduled import waiting_messages
from rmqfs.engine.store import MessageStore
t = time.monotonic()
with MessageStore(sys.argv[1], read_only=True) as s:
    offs = [w.record.commitlog_offset for w in waiting_messages(s, sys.argv[2] or None)]
print(json.dumps({"offsets": offs, "seconds": time.monotonic() - t}))
"""


@pytest.mark.parametrize("topic", ["", "T"])
def test_a_wheel_whose_every_slot_shares_one_chain_costs_one_walk(tmp_path, topic):
    """Issue 36 item 1: all 1,209,600 slots point at the head of one valid 100-unit chain (a
    40 MB store). Each slot's chain was walked on its own and every entry built before the
    duplicates went: more than 120 s and 2.5 GB (cut there). Now one walk, each message once."""
    from stores import run_measured
    from timerstore import build_shared_chain_store

    root = tmp_path / "s"
    offsets = build_shared_chain_store(root)
    got, _ = run_measured(HOSTILE_TIMER, root, topic)
    assert got["offsets"] == offsets
    assert got["maxrss_kb"] < 500 << 10 and got["seconds"] < 10


def test_waiting_refs_are_compact_sorted_arrays_that_render_any_range(tmp_path):
    """Issue 32 item 1: the references are six numpy arrays (29 bytes a message), in
    (deliver time, CommitLog offset) order, the same messages waiting_messages yields (built
    on them); lines(i, j) reads only the records [i, j) and renders scheduled.jsonl's lines."""
    from timerstore import build_waiting_store

    root = tmp_path / "s"
    build_waiting_store(root, timed=150, delayed=120)
    with MessageStore(str(root), read_only=True) as s:
        refs = waiting_refs(s)
        assert len(refs) == 270
        assert [a.dtype.name for a in (refs.deliver_ms, refs.offset, refs.size)] == [
            "int64",
            "int64",
            "int32",
        ]
        assert [a.dtype.name for a in (refs.real_queue_id, refs.real_topic, refs.source)] == [
            "int32",
            "int32",
            "uint8",
        ]
        assert refs.nbytes == 29 * len(refs) and sorted(refs.topics) == ["T", "U"]
        keys = list(zip(refs.deliver_ms.tolist(), refs.offset.tolist()))
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        every = list(waiting_messages(s))
        assert [(w.deliver_ms, w.record.commitlog_offset) for w in every] == keys
        assert {w.source for w in every} == {TIMER, DELAY}
        assert sum(w.source == TIMER for w in every) == 150
        lines = [
            build_scheduled_line(w.record, w.real_topic, w.real_queue_id, w.deliver_ms)
            for w in every
        ]
        assert list(refs.lines(s)) == lines
        reads = []
        real_read = s.read_record
        s.read_record = lambda off, size, **kw: reads.append(off) or real_read(off, size, **kw)
        assert list(refs.lines(s, 100, 107)) == lines[100:107]
        assert reads == [k[1] for k in keys[100:107]]
        assert list(refs.lines(s, 260, 999)) == lines[260:]
        only = waiting_refs(s, "U")
        assert list(only.lines(s)) == [x for x, w in zip(lines, every) if w.real_topic == "U"]


def test_a_real_qid_past_an_int_is_a_damaged_record(tmp_path):
    """REAL_QID is read by the broker with Integer.parseInt: a timer record whose REAL_QID
    passes an int is damaged, not a message to queue 9999999999 (nor an overflow in the
    references' int32 column)."""
    from stores import put_internal

    root = str(tmp_path / "s")
    with MessageStore(root) as s:
        s.create_topic("T", 1)
        s.create_topic("rmq_sys_wheel_timer", 1)
        props = {"TIMER_OUT_MS": "99999999999000", "REAL_TOPIC": "T", "REAL_QID": "9999999999"}
        put_internal(s, [Message("rmq_sys_wheel_timer", b"x", queue_id=0, properties=props)])
    with (
        MessageStore(root, read_only=True) as s,
        pytest.raises(CorruptRecordError, match="REAL_QID"),
    ):
        list(waiting_messages(s))


def test_a_damaged_timer_store_is_noted_once_with_its_reason(tmp_path, caplog):
    """A damaged timer store (a cut timerwheel) failed scheduled.jsonl's open with EIO and its
    reason went nowhere (not the log, not status.json); it is noted as damage of the timer
    store: one warning line naming what is wrong and what to do, and status.json's
    timerDamage (the timer topic's queue is not damaged, and is still served)."""
    import logging

    from conftest import copy_fixture
    from rmqfs.engine.live.status import store_status

    root = copy_fixture("rocketmq-5.3.3-timer/store", tmp_path / "s")
    wheel = root / "timerwheel"
    wheel.write_bytes(wheel.read_bytes()[:1_000_000])
    with MessageStore(str(root), read_only=True) as s, caplog.at_level(logging.WARNING):
        for _ in range(3):
            with pytest.raises(CorruptRecordError, match="timer wheel"):
                waiting_refs(s, "TopicA")
        lines = [r.getMessage() for r in caplog.records if "timer store" in r.getMessage()]
        assert len(lines) == 1 and "timerwheel" in lines[0], lines
        assert "restore timerwheel, timerlog/ and config/timercheck" in lines[0]
        st = store_status(s)
        assert "a timer wheel is" in st["timerDamage"] and st["damagedQueues"] == []


def test_a_snapshot_of_a_timer_store_keeps_every_waiting_message(tmp_path):
    """A snapshot leaves out timerwheel and timerlog/ (this engine does not write them); it
    kept config/timercheck, which says the timer store took rmq_sys_wheel_timer into them, so
    the restored store (and a broker restored from it) lost the 39 waiting timed messages.
    It leaves timercheck out too: the timer queue is taken again from its start, every
    message that waited still waits (one delivered before may be delivered again)."""
    from stores import snapshot_copy

    def waiting(s):
        return {(w.record.properties["UNIQ_KEY"], w.source) for w in waiting_messages(s)}

    with MessageStore(str(TIMER_FIX / "store"), read_only=True) as s:
        before = waiting(s)
        copy = snapshot_copy(s, tmp_path / "copy")
    assert sum(src == TIMER for _, src in before) == 39
    assert not (copy / "config" / "timercheck").exists()
    with MessageStore(str(copy), read_only=True) as s:
        after = waiting(s)
    assert before <= after
