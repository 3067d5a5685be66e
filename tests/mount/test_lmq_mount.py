"""An LMQ store (issue 22, section 2.4) through a real read-only mount: each ``%LMQ%`` queue
is a topic whose messages.jsonl holds the records its units point at, each with its own
topic."""

from __future__ import annotations

import json

import pytest

from conftest import fuse
from lmqstore import build_lmq_store

pytestmark = [fuse, pytest.mark.fuse]


def test_a_read_only_mount_shows_lmq_queues_as_topics(tmp_path, mount_store):
    store = tmp_path / "store"
    lmq = build_lmq_store(store)
    m = mount_store(store, "ro")
    try:
        for q, bodies in lmq.items():
            lines = [
                json.loads(x)
                for x in (m.mnt / "topics" / q / "0" / "messages.jsonl").read_text().splitlines()
            ]
            assert [x["body"].encode() for x in lines] == bodies
            assert {x["topic"] for x in lines} <= {"T", "U"}
            assert (m.mnt / "topics" / q / "messages.jsonl").read_text().count("\n") == len(bodies)
            # lookups by the LMQ's own offsets and times: the record at each offset, though it
            # keeps its topic's queueOffset (they reloaded by that one: EIO, or another
            # message where the lines happened to be of one length; a review)
            for n, line in enumerate(lines):
                by_offset = (m.mnt / "topics" / q / "0" / "by-offset" / str(n)).read_text()
                assert json.loads(by_offset) == line
                by_time = m.mnt / "topics" / q / "0" / "by-time" / str(line["storeTimestamp"])
                first = next(x for x in lines if x["storeTimestamp"] >= line["storeTimestamp"])
                assert json.loads(by_time.read_text()) == first
            assert any(x["queueOffset"] != n for n, x in enumerate(lines))  # the case at stake
    finally:
        m.umount()
