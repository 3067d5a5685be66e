"""A BatchCQ store (issue 22, section 2.5) through a real read-only mount: topic B's
messages.jsonl, by-offset files and view/ Parquet hold each inner message of an inner batch at
its own queue offset; a read-write mount is refused, naming -o ro."""

from __future__ import annotations

import base64
import json
import os

import pytest

from bcqstore import build_bcq_store, expected
from conftest import fuse, run_rmqfs

pytestmark = [fuse, pytest.mark.fuse]


def _body(line: dict) -> bytes:
    if line.get("bodyEncoding") == "base64":
        return base64.b64decode(line["body"])
    return line["body"].encode()


def test_a_read_only_mount_shows_each_inner_message(tmp_path, mount_store):
    pa = pytest.importorskip("pyarrow.parquet")
    store = tmp_path / "store"
    build_bcq_store(store)
    want = expected()
    m = mount_store(store, "ro")
    try:
        q = m.mnt / "topics" / "B" / "0"
        lines = [json.loads(x) for x in (q / "messages.jsonl").read_text().splitlines()]
        assert [x["queueOffset"] for x in lines] == list(range(len(want)))
        assert [_body(x) for x in lines] == [b for b, _ in want]
        assert _body(json.loads((q / "by-offset" / "2").read_text())) == b"i1"
        rows = {}
        for part in sorted((m.mnt / "view").rglob("*.parquet")):
            if part.parent.parent.name == "topic=B":
                rows.update({r["queueOffset"]: r for r in pa.read_table(part).to_pylist()})
        assert sorted(rows) == list(range(len(want)))
        assert [bytes(rows[i]["body"]) for i in sorted(rows)] == [b for b, _ in want]
    finally:
        m.umount()


def test_a_read_write_mount_of_a_batchcq_store_is_refused(tmp_path):
    store = tmp_path / "store"
    build_bcq_store(store)
    before = sorted(os.listdir(store))
    (tmp_path / "mnt").mkdir()
    res = run_rmqfs("mount", store, tmp_path / "mnt", check=False)
    assert res.returncode != 0
    assert "BatchConsumeQueue" in res.stderr and "-o ro" in res.stderr
    assert not os.path.ismount(tmp_path / "mnt")
    assert sorted(os.listdir(store)) == before
