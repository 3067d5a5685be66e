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
    finally:
        m.umount()
