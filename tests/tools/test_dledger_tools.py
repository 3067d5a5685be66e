"""``rmqfs`` offline commands on a DLedger store (RocketMQ 4.9.8, issue 22 section 2.1):
verify reads and checks it, every writer refuses naming -o ro and creates nothing."""

from __future__ import annotations

import os

import pytest

from conftest import copy_fixture, run_rmqfs


def _tree(root) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
        for d, _, files in os.walk(root)
        for n in files
    }


@pytest.fixture
def store(tmp_path):
    return copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "store")


def test_verify_reads_the_entries_and_finds_nothing_wrong(store):
    res = run_rmqfs("verify", store)
    assert "300 records, offsets [0, 2003195)" in res.stdout
    assert "OK: no errors, 0 warnings" in res.stdout


def test_verify_of_a_damaged_replica_does_not_send_the_user_to_recover(store):
    """recover never writes a DLedger store: verify's advice names that refusal (and what to do
    instead) rather than "rmqfs recover repairs them"."""
    import json

    q = next(p for p in sorted((store / "consumequeue").rglob("0" * 20)) if p.stat().st_size)
    units = bytearray(q.read_bytes())
    units[8:12] = (12345).to_bytes(4, "big")  # the first unit's size: no such record there
    q.write_bytes(bytes(units))
    res = run_rmqfs("verify", store, check=False)
    assert res.returncode == 1
    failed = next(x for x in res.stdout.splitlines() if x.startswith("FAILED: "))
    assert failed.endswith("(rmqfs recover does not repair this store)"), res.stdout
    assert "BY HAND: store " in res.stdout and "DLedger" in res.stdout and "-o ro" in res.stdout
    doc = json.loads(run_rmqfs("verify", store, "--json", check=False).stdout)
    assert "DLedger" in doc["recoverRefused"]


@pytest.mark.parametrize(
    "args",
    [
        ("produce", "{store}", "-t", "TopicA"),
        ("recover", "{store}"),
        ("update-topic", "{store}", "-t", "T2"),
        ("reset-offset", "{store}", "-g", "g", "-t", "TopicA", "-s", "0"),
    ],
)
def test_writers_refuse_naming_read_only_mounts(store, args):
    before = _tree(store)
    res = run_rmqfs(*(a.format(store=store) for a in args), check=False)
    assert res.returncode != 0
    assert "DLedger" in res.stderr and "-o ro" in res.stderr, res.stderr
    assert _tree(store) == before
    assert not (store / "commitlog").exists()


def test_readers_read_the_committed_messages(store):
    """topic-status (mqadmin topicStatus): TopicA's 4 queues hold its 58 messages."""
    res = run_rmqfs("topic-status", store, "-t", "TopicA")
    rows = [line.split() for line in res.stdout.splitlines()[1:]]
    assert sum(int(r[3]) - int(r[2]) for r in rows) == 58
