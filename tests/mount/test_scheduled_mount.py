"""A real mount's ``topics/<topic>/scheduled.jsonl`` (issue 22, 2.2): the 5.3.3 timer fixture's
waiting messages, and a timed message produced through the mount with shell tools."""

import json
import subprocess
import time

import pytest

from conftest import FIXTURES, copy_fixture, fuse

pytestmark = [fuse, pytest.mark.fuse]

TIMER_FIX = FIXTURES / "rocketmq-5.3.3-timer"


def test_scheduled_jsonl_through_a_real_mount(mount_store, tmp_path):
    store = copy_fixture("rocketmq-5.3.3-timer", tmp_path / "fix") / "store"
    rows = [json.loads(x) for x in (TIMER_FIX / "expected.jsonl").read_text().splitlines()]
    want = sorted(
        (r["deliverMs"], r["uniqKey"], r["realQueueId"])
        for r in rows
        if r["kind"] == "scheduled" and not r["cancelled"] and r["realTopic"] == "TopicC"
    ) + sorted(
        (r["tagsCode"], r["uniqKey"], int(r["properties"]["REAL_QID"]))
        for r in rows
        if r["kind"] == "message"
        and r["topic"] == "SCHEDULE_TOPIC_XXXX"
        and r["properties"]["REAL_TOPIC"] == "TopicC"
    )
    m = mount_store(store)
    f = m.mnt / "topics" / "TopicC" / "scheduled.jsonl"
    out = subprocess.run(["cat", str(f)], capture_output=True, check=True).stdout
    got = [json.loads(x) for x in out.splitlines()]
    assert sorted(
        (x["deliverTimestamp"], x["properties"]["UNIQ_KEY"], x["queueId"]) for x in got
    ) == sorted(want)
    assert {x["topic"] for x in got} == {"TopicC"}
    deliver = (int(time.time()) + 3600) * 1000 + 1
    line = json.dumps({"body": "in an hour", "deliverTimestamp": deliver})
    subprocess.run(
        ["sh", "-c", f"echo '{line}' >> '{m.mnt}/topics/TopicC/produce.jsonl'"], check=True
    )
    got2 = [json.loads(x) for x in f.read_bytes().splitlines()]
    assert len(got2) == len(got) + 1
    (new,) = [x for x in got2 if x["body"] == "in an hour"]
    assert new["deliverTimestamp"] == deliver - 1
    m.umount()


def test_scheduled_jsonl_past_its_runs_through_a_real_mount(mount_store, tmp_path):
    """Issue 32 item 1: a scheduled.jsonl of several runs of lines (seek points every 1,024
    lines or 256 KiB) read through the kernel: ``cat`` gives every line, as the engine renders
    them; ``dd skip=``, ``head -c`` and ``tail -n`` give the same bytes as the whole."""
    from rmqfs.engine.read.jsonline import build_scheduled_line
    from rmqfs.engine.read.scheduled import waiting_messages
    from rmqfs.engine.store import MessageStore
    from timerstore import build_waiting_store

    store = tmp_path / "w"
    build_waiting_store(store, timed=1500, delayed=1300)
    with MessageStore(str(store), read_only=True) as s:
        want = b"".join(
            build_scheduled_line(w.record, w.real_topic, w.real_queue_id, w.deliver_ms)
            for w in waiting_messages(s, "T")
        )
    assert len(want) > 3 * (256 << 10)  # four runs at least
    m = mount_store(store)
    f = str(m.mnt / "topics" / "T" / "scheduled.jsonl")

    def run(*cmd: str) -> bytes:
        return subprocess.run(cmd, capture_output=True, check=True).stdout

    assert run("cat", f) == want
    skip = len(want) // 1000 - 300
    assert (
        run("dd", f"if={f}", "bs=1000", f"skip={skip}", "count=250", "status=none")
        == (want[skip * 1000 : (skip + 250) * 1000])
    )
    assert run("head", "-c", "300000", f) == want[:300000]
    assert run("tail", "-n", "5", f) == b"".join(want.splitlines(keepends=True)[-5:])
    m.umount()
