"""Store layouts rmqfs does not fully understand (issue 22, sections 2.1 and 2.7): never
written, and not read where they would be read wrong; everything else left as it is and listed
in status.json's ``notUnderstood``."""

from __future__ import annotations

import os

import pytest

from conftest import copy_fixture
from rmqfs.engine.errors import UnsupportedLayoutError
from rmqfs.engine.live.status import store_status
from rmqfs.engine.service.storetree import foreign_layouts
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.tools.verify import recover_store, verify_store


def _tree(root) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, n), root)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
    }


def test_a_dledger_store_is_never_written_and_read_only_as_it_is(tmp_path):
    """A DLedger replica (4.9.8's DLedgerCommitLog) mounted read-write as an empty store, took
    a produce and created commitlog/ beside dledger-n0/: an acknowledged message the broker
    never sees. Now every writer refuses, naming the layout and -o ro, and creates nothing; a
    read-only open reads its messages (tests/engine/test_dledger.py) and verify finds no
    error."""
    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    before = _tree(root)
    with pytest.raises(UnsupportedLayoutError, match="dledger-n0: a DLedger CommitLog") as exc:
        MessageStore(str(root))
    assert "-o ro" in str(exc.value)
    with pytest.raises(UnsupportedLayoutError, match="DLedger"):
        recover_store(str(root))
    with MessageStore(str(root), read_only=True) as s:
        assert s.max_offset("TopicA", 0) > 0
        listed = store_status(s)["notUnderstood"]
    assert [(e["path"], e["refusesWrite"]) for e in listed] == [("dledger-n0", True)]
    res = verify_store(str(root))
    assert [p for p in res.problems if p.severity == "error"] == []
    assert _tree(root) == before  # no commitlog/, no abort, nothing


@pytest.mark.parametrize(
    "where, files, what",
    [
        ("consumequeue", ["CURRENT", "MANIFEST-000005"], "RocksDB ConsumeQueues"),
        ("config/topics", ["CURRENT", "MANIFEST-000001"], "RocksDB config"),
        ("config/rdb", ["CURRENT", "MANIFEST-000001"], "RocksDB config"),
        ("batchconsumequeue/T/0", ["00000000000000000000"], "BatchConsumeQueues"),
        ("consumequeue/%LMQ%a/0", ["00000000000000000000"], "LMQ"),
        ("compaction/compactionLog/T/0", ["00000000000000000000"], "compaction logs"),
    ],
)
def test_layouts_the_broker_would_misread_refuse_writers(tmp_path, where, files, what):
    """RocksDB ConsumeQueues or config (the broker reads its queues and offsets there),
    BatchConsumeQueues, LMQ queues and compaction logs (rmqfs neither writes nor rebuilds
    them): every writer refuses, saying to mount -o ro; a read-only open reads the plain
    layout beside them and lists them; verify warns."""
    root = tmp_path / "s"
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"plain")])
    (root / where).mkdir(parents=True, exist_ok=True)
    for name in files:
        (root / where / name).write_bytes(b"")
    with pytest.raises(UnsupportedLayoutError, match=what) as exc:
        MessageStore(str(root))
    assert "-o ro" in str(exc.value)
    with pytest.raises(UnsupportedLayoutError, match=what):
        recover_store(str(root))
    with MessageStore(str(root), read_only=True) as s:
        assert [r.body for _, r in s.iter_queue("T", 0)] == [b"plain"]
        listed = store_status(s)["notUnderstood"]
    assert [e["refusesWrite"] for e in listed if what.split()[0] in e["what"]] == [True]
    warned = [p for p in verify_store(str(root)).problems if p.kind == "layout"]
    assert warned and all(p.severity == "warning" for p in warned)


def test_a_5x_store_s_timer_files_are_listed_and_kept(tmp_path):
    """The 5.3.3 timer store's files (timerwheel, timerlog/, compaction's checkpoint) are left
    as they are by a write, and listed; they refuse nothing."""
    root = copy_fixture("rocketmq-5.3.3-timer/store", tmp_path / "s")
    kept = {p: (root / p).read_bytes() for p in ("timerwheel", "compaction/position-checkpoint")}
    found = {f.path: f for f in foreign_layouts(str(root))}
    assert {"timerwheel", "timerlog", "compaction", "abort.bak"} <= set(found)
    assert not any(f.refuses_write for f in found.values())
    with MessageStore(str(root)) as s:
        s.put_messages([Message("TopicA", b"written beside the timer store")])
        listed = {e["path"] for e in store_status(s)["notUnderstood"]}
    assert {"timerwheel", "timerlog"} <= listed
    assert {p: (root / p).read_bytes() for p in kept} == kept


def test_the_timer_topic_takes_no_client_message(tmp_path):
    """A client's record in rmq_sys_wheel_timer has no TIMER_OUT_MS: the broker's timer retries
    it for ever and every scheduled.jsonl of the mount failed with EIO. Every put path a user
    reaches refuses it as a topic only the broker writes (EACCES); a timed message still goes
    there the broker's way."""
    from conftest import run_rmqfs
    from rmqfs.engine.errors import PermissionDeniedError
    from rmqfs.engine.format.message import TIMER_TOPIC

    root = copy_fixture("rocketmq-5.3.3-timer/store", tmp_path / "s")
    r = run_rmqfs("produce", root, "-t", TIMER_TOPIC, "--body", "x", check=False)
    assert r.returncode == 1 and "only the broker writes it" in r.stderr, r
    with MessageStore(str(root)) as s:
        before = s.max_offset(TIMER_TOPIC, 0)
        for put in (
            lambda: s.put_messages([Message(TIMER_TOPIC, b"x")]),
            lambda: s.put_messages([Message("TopicA", b"a"), Message(TIMER_TOPIC, b"x")]),
            lambda: s.put_bodies(TIMER_TOPIC, [b"x", b"y"]),
        ):
            with pytest.raises(PermissionDeniedError, match="only the broker writes it"):
                put()
        assert s.max_offset(TIMER_TOPIC, 0) == before
        r0 = s.put_messages([Message("TopicA", b"later", delay_time_ms=60_000)])[0]
        assert r0.topic == TIMER_TOPIC and s.max_offset(TIMER_TOPIC, 0) == before + 1
