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
