"""A DLedger broker's store (RocketMQ 4.9.8, issue 22 section 2.1) through a real read-only
mount: every message of expected.jsonl in topics/*/messages.jsonl, by-offset and
messages/<msgId>, and in view/ Parquet read by pyarrow; a read-write mount refused, naming
-o ro, with nothing created."""

from __future__ import annotations

import base64
import errno
import json
import os
import zlib

import pytest

from conftest import FIXTURES, copy_fixture, fuse, run_rmqfs

pytestmark = [fuse, pytest.mark.fuse]

FIX = FIXTURES / "rocketmq-4.9.8-dledger"


def expected() -> list[dict]:
    rows = [json.loads(x) for x in (FIX / "expected.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "message"]


def plain_body(e: dict) -> bytes:
    """The body a reader gets: the stored one, inflated when SYSFLAG says compressed."""
    body = base64.b64decode(e["body"])
    return zlib.decompress(body) if e["sysFlag"] & 1 else body


def line_body(line: dict) -> bytes:
    if line.get("bodyEncoding") == "base64":
        return base64.b64decode(line["body"])
    return line["body"].encode()


SAME = (
    "topic",
    "queueId",
    "queueOffset",
    "commitLogOffset",
    "msgId",
    "tags",
    "bornTimestamp",
    "storeTimestamp",
    "sysFlag",
    "flag",
    "bodyCRC",
    "reconsumeTimes",
    "preparedTransactionOffset",
    "properties",
)


def check_line(line: dict, e: dict) -> None:
    assert {k: line[k] for k in SAME} == {k: e[k] for k in SAME}
    assert line["storeSize"] == e["size"]
    assert line["keys"] == (e["keys"].split() if e["keys"] else [])
    assert line_body(line) == plain_body(e)


def test_a_read_only_mount_shows_every_message(tmp_path, mount_store):
    pa = pytest.importorskip("pyarrow.parquet")
    store = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "store")
    exp = expected()
    by_key = {(e["topic"], e["queueId"], e["queueOffset"]): e for e in exp}
    m = mount_store(store, "ro")
    seen = set()
    for topic in {e["topic"] for e in exp}:
        for raw in (m.mnt / "topics" / topic / "messages.jsonl").read_text().splitlines():
            line = json.loads(raw)
            key = (line["topic"], line["queueId"], line["queueOffset"])
            check_line(line, by_key[key])
            seen.add(key)
    assert seen == set(by_key)
    for e in exp[::7]:
        q = m.mnt / "topics" / e["topic"] / str(e["queueId"])
        check_line(json.loads((q / "by-offset" / str(e["queueOffset"])).read_text()), e)
        by_id = json.loads((m.mnt / "messages" / e["msgId"]).read_text())
        check_line(by_id, e)
    rows = {}
    for part in sorted((m.mnt / "view").rglob("*.parquet")):
        topic = part.parent.parent.name.removeprefix("topic=")
        for r in pa.read_table(part).to_pylist():
            rows[r["commitLogOffset"]] = (topic, r)
    assert sorted(rows) == sorted(e["commitLogOffset"] for e in exp)
    for e in exp:
        topic, r = rows[e["commitLogOffset"]]
        assert (topic, r["queueId"], r["queueOffset"]) == (
            e["topic"],
            e["queueId"],
            e["queueOffset"],
        )
        assert r["msgId"] == e["msgId"] and r["storeTimestamp"] == e["storeTimestamp"]
        assert bytes(r["body"]) == plain_body(e)
    with pytest.raises(OSError) as exc:  # not a snapshot whose commitlog/ holds entries
        (m.mnt / "snapshots" / "s1").mkdir()
    assert exc.value.errno == errno.EOPNOTSUPP
    assert "DLedger" in (m.mnt / "refused.jsonl").read_text()
    m.umount()


def test_a_read_write_mount_is_refused_and_creates_nothing(tmp_path):
    store = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "store")
    before = sorted(os.listdir(store))
    (tmp_path / "mnt").mkdir()
    res = run_rmqfs("mount", store, tmp_path / "mnt", check=False)
    assert res.returncode != 0
    assert "DLedger" in res.stderr and "-o ro" in res.stderr
    assert not os.path.ismount(tmp_path / "mnt")
    assert sorted(os.listdir(store)) == before
