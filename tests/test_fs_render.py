"""The fast ``topics/`` line renderer gives the same bytes as the plain ``json`` one, for
records written by RocketMQ itself (IPv6 hosts, binary and large bodies, non-ASCII properties)
and by us (compressed bodies, odd characters)."""

import json

import pytest

from conftest import copy_fixture
from engine.store import Message, MessageStore
from fusefs.render import render_message, render_message_json


def _records(store):
    with MessageStore(str(store), read_only=True) as s:
        out = []
        for (t, q) in sorted(s.consume_queues):
            out += [rec for _, rec in s.iter_queue(t, q)]
        return out


@pytest.mark.parametrize("fixture", ["rocketmq-4.9.8-written/store",
                                     "apache-rocketmq-pr3535/store"])
def test_fast_renderer_matches_json_on_broker_written_stores(tmp_path, fixture):
    store = copy_fixture(fixture, tmp_path / "s")
    recs = _records(store)
    assert recs
    for rec in recs:
        assert render_message(rec) == render_message_json(rec)


def test_fast_renderer_matches_json_on_odd_messages(tmp_path):
    bodies = [b"", b"plain", "ünïcödé \u2028 \u0000 \t \" \\ /".encode(), b"\xff\xfe\x00binary",
              b"x" * 70_000, "emoji \U0001F600".encode()]
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("Odd%|_-1")
        s.put_messages([Message("Odd%|_-1", b, tags=t, keys=k, properties=p)
                        for b in bodies
                        for t, k, p in [(None, None, None),
                                        ("Tä\"g", ["k 1", "k\\2"], {"ü": "\n", "a": "é"}),
                                        ("", "  spaced  keys ", {})]])
    recs = _records(tmp_path / "s")
    assert len(recs) == len(bodies) * 3
    for rec in recs:
        line = render_message(rec)
        assert line == render_message_json(rec)
        assert json.loads(line)["queueOffset"] == rec.queue_offset
