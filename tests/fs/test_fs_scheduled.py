"""``topics/<topic>/scheduled.jsonl`` without a kernel: the messages waiting for delivery to a
topic, as JSON lines with their real topic and queue and deliverTimestamp (issue 22, 2.2)."""

from __future__ import annotations

import errno
import json
import os
import random
import time

import pytest

from conftest import FIXTURES, copy_fixture
from fstree import tree
from rmqfs.engine.read.jsonline import build_scheduled_line
from rmqfs.engine.read.scheduled import WaitingRefs, waiting_messages
from rmqfs.engine.store import MessageStore
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


@pytest.fixture(scope="module")
def waiting_store(tmp_path_factory):
    """A store with 900 waiting messages (timed and delayed, topics T and U) and their
    scheduled.jsonl lines per topic, as the engine renders them (waiting_messages)."""
    from timerstore import build_waiting_store

    root = tmp_path_factory.mktemp("waiting") / "s"
    build_waiting_store(root, timed=500, delayed=400)
    with MessageStore(str(root), read_only=True) as s:
        lines = {
            topic: [
                build_scheduled_line(w.record, w.real_topic, w.real_queue_id, w.deliver_ms)
                for w in waiting_messages(s, topic)
            ]
            for topic in ("T", "U")
        }
    return root, lines


@pytest.fixture
def small_runs(monkeypatch):
    """Seek points every 16 lines or 8 KiB, 32 KiB held a handle; and the cap scheduled.jsonl
    had before (16 MiB, its last line ``truncated``) far below the file (no effect now). Set
    whether or not the module has them, so that the tests fail on the old code by what it
    shows."""
    monkeypatch.setattr(nodes, "SCHEDULED_SEEK_LINES", 16, raising=False)
    monkeypatch.setattr(nodes, "SCHEDULED_CHUNK_BYTES", 8 << 10, raising=False)
    monkeypatch.setattr(nodes, "SCHEDULED_HELD_BYTES", 32 << 10, raising=False)
    monkeypatch.setattr(nodes, "SCHEDULED_MAX_BYTES", 20_000, raising=False)


def test_scheduled_jsonl_has_no_cap(tmp_path, waiting_store, small_runs):
    """Issue 32 item 1: every waiting message is a line, however many (it was cut at 16 MiB
    with a ``truncated`` last line): read whole, the file is the engine's lines."""
    root, lines = waiting_store
    with tree(tmp_path, read_only=True, store_dir=root) as t:
        for topic in ("T", "U"):
            whole = t.read(f"/topics/{topic}/scheduled.jsonl")
            assert len(whole) > 100_000 and len(lines[topic]) == 450
            assert whole == b"".join(lines[topic])


def _counting_lines(monkeypatch) -> list[tuple[int, int]]:
    """Record each render of scheduled.jsonl lines: (first, past the last) asked for."""
    asked: list[tuple[int, int]] = []
    real = WaitingRefs.lines

    def lines(refs, store, start=0, stop=None):
        asked.append((start, stop))
        return real(refs, store, start, stop)

    monkeypatch.setattr(WaitingRefs, "lines", lines)
    return asked


def test_scheduled_jsonl_reads_by_range_holding_a_bounded_part(
    tmp_path, waiting_store, small_runs, monkeypatch
):
    """Reads at any offset (as ``dd skip=``, ``tail``, a reader seeking back) give the bytes
    of the whole file there; a handle holds at most its bound of rendered bytes, and a read
    renders only the runs of lines it touches once their seek points are known."""
    root, lines = waiting_store
    whole = b"".join(lines["T"])
    asked = _counting_lines(monkeypatch)
    rnd = random.Random(32)
    with tree(tmp_path, read_only=True, store_dir=root) as t:
        node = t.node("/topics/T/scheduled.jsonl")
        assert node.stat().size == 0
        h = node.open(os.O_RDONLY)
        assert h.direct_io
        try:
            # a read far in, first: renders forward from the start, holding the bound only
            at = len(whole) - 5000
            assert h.read(at, 4096) == whole[at : at + 4096]
            assert h.held_bytes <= 32 << 10
            assert h.read(len(whole) - 10, 100) == whole[-10:]
            assert h.read(len(whole), 100) == b"" and h.read(len(whole) + 7, 1) == b""
            for _ in range(200):
                off = rnd.randrange(len(whole))
                n = rnd.choice([1, 100, 4096, 20_000, 131_072])
                del asked[:]
                assert h.read(off, n) == whole[off : off + n]
                assert h.held_bytes <= 32 << 10
                # the seek points are known: only the runs the range touches are rendered
                assert sum(min(stop, 450) - start for start, stop in asked) <= 16 * (
                    2 + n // 8192 * 2
                )
            out = bytearray()
            while got := h.read(len(out), 4096):  # cat, 4 KiB at a time
                out += got
                assert h.held_bytes <= 32 << 10
            assert out == whole
        finally:
            h.release()
        assert h.held_bytes == 0
        # a fresh handle's first read renders one run
        h = node.open(os.O_RDONLY)
        del asked[:]
        assert h.read(0, 100) == whole[:100]
        assert asked == [(0, 16)] and h.seek_points == 2
        h.release()


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


def test_scheduled_jsonl_skips_timer_entries_whose_records_expired(tmp_path):
    """After expiry deleted CommitLog files the timer wheel still names, scheduled.jsonl failed
    with EIO for every topic; those entries are misses now (TimerMessageStore's
    getMessageByCommitOffset null), the rest listed as before."""
    from conftest import run_rmqfs

    root = copy_fixture("rocketmq-5.3.3-timer/store", tmp_path / "s")
    with tree(tmp_path / "a", read_only=True, store_dir=root) as t:
        before = {
            topic: [json.loads(x) for x in t.read(f"/topics/{topic}/scheduled.jsonl").splitlines()]
            for topic in ("TopicA", "TopicD")
        }
    run_rmqfs("clean", root, "--file-reserved-time", "0")
    with MessageStore(str(root), read_only=True) as s:
        low = s.commitlog.min_offset
    assert low > min(x["commitLogOffset"] for rows in before.values() for x in rows)
    with tree(tmp_path / "b", read_only=True, store_dir=root) as t:
        for topic, rows in before.items():
            after = [json.loads(x) for x in t.read(f"/topics/{topic}/scheduled.jsonl").splitlines()]
            assert after == [x for x in rows if x["commitLogOffset"] >= low]
