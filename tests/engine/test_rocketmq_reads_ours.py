"""RocketMQ's own store classes read the stores rmqfs writes.

The oracle is Apache RocketMQ's ``DefaultMessageStore``, in two versions (each test runs with
both): 4.9.8, and 5.3.3 with its default file-based ConsumeQueue (no RocksDB, no timer store).
tests/rocketmq_oracle.py compiles each from the apache/rocketmq git mirror (nothing of RocketMQ
is in this repository), with our harness around it (tests/java/oracle/OracleRead.java, and
OracleRead5.java for 5.x, which prints the same fields): it ``load()``s a copy of a store
(RocketMQ's normal recovery, or its abnormal one where the copy has an ``abort`` file),
optionally ``start()``s it (ReputMessageService dispatches any CommitLog tail the ConsumeQueues
lack), and prints every message ``getMessage`` reads from each ConsumeQueue, with its unit,
whether ``lookMessageByOffset`` decodes the same record and whether ``queryMessage`` finds it by
its UNIQ_KEY and by each of its KEYS.

Each store here is written through every put path (a single put into the mapping and through
the general encoder, a transaction's half, commit and rollback, batches with the keys of each
message apart from the heads and with sharding keys, MessageBatch, ``put_bodies`` with tags and
keys, SYNC_FLUSH),
with segments small enough that the
CommitLog, the ConsumeQueues and the IndexFiles all roll; one more is a store rmqfs recovered
after a crash with a torn last record. Every message must come out of RocketMQ field by field
as rmqfs reads it, every unit (tagsCode included) as rmqfs wrote it, and the index must find
every message by every key.

Each version is skipped, with the reason, where its oracle cannot be built (no JDK, no mirror of
apache/rocketmq with the tag, a jar missing from ~/.m2: tests/rocketmq_oracle.py says which).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

import rocketmq_oracle
from conftest import FIXTURES
from rmqfs.engine.format.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Message,
    host_from_str,
    host_to_str,
)
from rmqfs.engine.store import MessageStore
from rmqfs.engine.storeconfig import StoreConfig
from stores import put_internal

#: CommitLog segment, ConsumeQueue file (bytes), IndexFile hash slots and items: all roll
CL, CQ, SLOTS, ITEMS = 256 * 1024, 64 * 20, 64, 512


def _config(**more: Any) -> StoreConfig:
    return StoreConfig(
        mapped_file_size_commit_log=CL,
        mapped_file_size_consume_queue=CQ,
        max_hash_slot_num=SLOTS,
        max_index_num=ITEMS,
        **more,
    )


@pytest.fixture(scope="module", params=rocketmq_oracle.VERSIONS)
def oracle(request: pytest.FixtureRequest) -> list[str]:
    """The java command line of each RocketMQ version's harness (built first when stale);
    skips that version, saying why, where it cannot be built here."""
    version: str = request.param
    try:
        return rocketmq_oracle.command(version)
    except rocketmq_oracle.Missing as exc:
        pytest.skip(f"RocketMQ {version}'s store classes: {exc}")


#: the messages :func:`_write` puts that a ConsumeQueue holds (a transaction's half and its
#: rollback have no unit: neither store reads them back through one)
WRITTEN = 8 + 1 + 12 * (256 + 32 + 256 + 1)


def _write(root: str, **config: Any) -> None:
    """A store through every put path (see the module's docstring)."""
    v6 = host_from_str("[1050::5:600:300c:326b]:40123")
    with MessageStore(root, _config(**config)) as store:
        store.create_topic("CrossA", 4)
        store.create_topic("CrossB", 2)
        store.create_topic("CrossC", 1)
        singles = [
            Message("CrossA", b"hello", tags="TagA", keys=["k-1", "alt-1"]),
            Message(
                "CrossA",
                b"x" * 700,
                tags="TagB",
                keys="k-2 alt-2",
                properties={"u": "h\u00e9llo-\u043a-\u6d88"},
            ),
            Message("CrossB", os.urandom(40_000), keys="big-1", flag=7, born_host=v6),
            Message("CrossB", b"z" * 5000, tags="TagZ", keys="zip-1", compress=True),
            Message("CrossC", b"", tags="Empty", keys="empty-1"),
            Message("CrossA", b"later", tags="TagD", keys="delay-1", delay_level=3),
            Message("CrossC", b"no tags, no keys"),
            Message("CrossC", b"unicode keys", tags="\u6d88\u606f", keys="\u8ba2\u5355-1 k\u00e9"),
        ]
        for m in singles:
            store.put_messages([m])
        # a transaction's records, as the broker writes them (its own put path): the half
        # (PREPARED: no ConsumeQueue unit, indexed), its COMMIT (a unit), a ROLLBACK (neither)
        for kind in (TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            put_internal(
                store,
                [Message("CrossA", b"tx %d" % kind, tags="TX", keys="tx-%d" % kind, sys_flag=kind)],
            )
        for i in range(12):
            keyed = [  # each message's own keys: an order id, now and then two, or none
                Message(
                    "CrossA",
                    b"b%d-%d-" % (i, j) * (1 + j % 17),
                    tags="T%d" % (j % 5),
                    keys=None if j % 11 == 0 else ["bk-%d-%d" % (i, j), "o%d" % j][: 1 + j % 2],
                )
                for j in range(256)
            ]
            store.put_messages(keyed, batch=(i % 3 == 0))
            sharded = [
                Message(
                    "CrossB",
                    b"s%d-%d" % (i, j),
                    tags="S",
                    keys="sk-%d-%d" % (i, j),
                    sharding_key="order-%d" % (j % 7),
                )
                for j in range(32)
            ]
            store.put_messages(sharded)
            store.put_bodies(
                "CrossB",
                [b"body-%d-%d" % (i, j) * (1 + j % 9) for j in range(256)],
                tags=[("B%d" % (j % 3)) if j % 4 else None for j in range(256)],
                keys=["b-%d-%d" % (i, j) if j % 5 else None for j in range(256)],
            )
            store.put_messages([Message("CrossC", b"single-%d" % i, tags="S", keys="s-%d" % i)])


def _rmqfs_view(root: str) -> tuple[int, dict[int, dict]]:
    """``(CommitLog end, {commitLogOffset: the fields OracleRead prints}`` as rmqfs reads them."""
    out: dict[int, dict] = {}
    with MessageStore(root, _config(), read_only=True) as store:
        for topic in store.topic_names():
            for q in store.queue_ids(topic):
                cq = store.consume_queue(topic, q)
                for qoff, r in store.iter_queue(topic, q):
                    _, size, tags_code = cq.unit(qoff)
                    out[r.commitlog_offset] = {
                        "topic": r.topic,
                        "queueId": r.queue_id,
                        "queueOffset": r.queue_offset,
                        "cqIndex": qoff,
                        "cqSize": size,
                        "tagsCode": tags_code,
                        "commitLogOffset": r.commitlog_offset,
                        "size": r.store_size,
                        "bodyLen": len(r.body),
                        "bodyCrc32": zlib.crc32(r.body),
                        "bodyCRC": r.body_crc,
                        "tags": r.tags,
                        "keys": r.properties.get("KEYS"),
                        "uniqKey": r.uniq_key,
                        "properties": dict(sorted(r.properties.items())),
                        "bornTimestamp": r.born_timestamp,
                        "storeTimestamp": r.store_timestamp,
                        "msgId": r.msg_id,
                        "flag": r.flag,
                        "sysFlag": r.sys_flag,
                        "reconsumeTimes": r.reconsume_times,
                        "preparedTransactionOffset": r.prepared_transaction_offset,
                        "bornHost": host_to_str(r.born_host),
                        "storeHost": host_to_str(r.store_host),
                    }
        return store.commitlog.max_offset, out


def _hosts_parsed(m: dict) -> dict:
    """``m`` with its bornHost and storeHost as (address, port): Java spells an IPv6 address in
    full (``2001:db8:0:1:0:0:0:10``), Python and the fixtures' writers shortened (``::``)."""
    out = dict(m)
    for k in ("bornHost", "storeHost"):
        if isinstance(m.get(k), str):
            addr, _, port = m[k].rpartition(":")
            out[k] = (ipaddress.ip_address(addr.strip("[]")), int(port))
    return out


def _oracle_read(oracle: list[str], root: Path, *flags: str) -> tuple[dict, dict[int, dict]]:
    """OracleRead of a copy of ``root``: ``(its summary, {commitLogOffset: message})``."""
    r = subprocess.run(
        [*oracle, *flags, str(root), str(CL), str(CQ), str(SLOTS), str(ITEMS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines and lines[-1]["kind"] == "summary", r.stdout[-2000:]
    return lines[-1], {m["commitLogOffset"]: m for m in lines if m["kind"] == "message"}


def _agree(oracle: list[str], root: Path, tmp: Path, mode: str = "load") -> int:
    """RocketMQ reads a copy of the store at ``root`` (``mode``: load; start: load and start;
    abort: load after a crash, RocketMQ's abnormal recovery) as rmqfs reads it. Returns the
    messages compared."""
    end, mine = _rmqfs_view(str(root))
    copy = tmp / f"copy-{mode}"
    shutil.copytree(root, copy)
    if mode == "abort":
        (copy / "abort").touch()
    summary, theirs = _oracle_read(oracle, copy, *(["--start"] if mode == "start" else []))
    problems = [f"only rmqfs reads {off}" for off in mine.keys() - theirs.keys()]
    problems += [f"only RocketMQ reads {off}" for off in theirs.keys() - mine.keys()]
    for off in sorted(mine.keys() & theirs.keys()):
        a, b = _hosts_parsed(mine[off]), _hosts_parsed(theirs[off])
        problems += [
            f"{off} {k}: rmqfs {v!r}, RocketMQ {b.get(k)!r}" for k, v in a.items() if b.get(k) != v
        ]
        if not b["lookMatches"]:
            problems.append(f"{off}: lookMessageByOffset decodes another message")
        if b["indexFoundUniq"] is False or b["indexFoundKeys"] is False:
            problems.append(f"{off}: queryMessage misses it: {b.get('indexMissingKeys')}")
    if summary["maxPhyOffset"] != end:
        problems.append(f"CommitLog end: rmqfs {end}, RocketMQ {summary['maxPhyOffset']}")
    problems += [
        f"queue {q['topic']}/{q['queueId']}: {q}"
        for q in summary["queues"]
        if q["emptyReads"] or q["cqUnits"] != q["messages"]
    ]
    assert not problems, "\n".join(problems[:40])
    return len(mine)


#: the store each version's own classes wrote (../shared/fixtures), and its geometry
OWN_STORES = {
    "4.9.8": ("rocketmq-4.9.8-written", (256 * 1024, 8 * 20, 32, 128)),
    "5.3.3": ("rocketmq-5.3.3-timer", (256 * 1024, 16 * 20, 64, 256)),
}
#: the fields of a fixture's expected.jsonl the harness prints too
JUDGED = (
    "topic", "queueId", "queueOffset", "commitLogOffset", "size", "msgId", "uniqKey", "tags",
    "keys", "tagsCode", "bornTimestamp", "storeTimestamp", "flag", "sysFlag", "bodyCRC",
    "reconsumeTimes", "preparedTransactionOffset", "properties", "body", "bornHost", "storeHost",
)  # fmt: skip


def test_the_oracle_reads_rocketmqs_own_store_as_its_writer_says(oracle, tmp_path, request):
    """The judge judged first: each version's harness reads the store that version's own
    classes wrote (the fixture) exactly as its expected.jsonl says, every message, and finds
    each one in the index by its UNIQ_KEY and its keys."""
    name, geometry = OWN_STORES[request.node.callspec.params["oracle"]]
    copy = tmp_path / "own"
    shutil.copytree(FIXTURES / name / "store", copy)
    for p in copy.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    r = subprocess.run(
        [*oracle, "--body", str(copy), *map(str, geometry)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    got = {
        m["commitLogOffset"]: m
        for m in map(json.loads, r.stdout.splitlines())
        if m["kind"] == "message"
    }
    expected = [
        m
        for m in map(json.loads, (FIXTURES / name / "expected.jsonl").read_text().splitlines())
        if m["kind"] == "message"
    ]
    assert len(got) == len(expected) > 200
    for want in expected:
        have, want = _hosts_parsed(got[want["commitLogOffset"]]), _hosts_parsed(want)
        assert {k: have[k] for k in JUDGED} == {k: want[k] for k in JUDGED}
        assert have["lookMatches"] and have["indexFoundUniq"] is not False
        assert have["indexFoundKeys"] is not False


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("oracle") / "store"
    _write(str(root))
    return root


@pytest.mark.parametrize("mode", ["load", "start", "abort"])
def test_rocketmq_reads_every_put_path(oracle, written, tmp_path, mode):
    """Every put path's records, units and index entries, read by RocketMQ after its normal
    recovery, after ``start()``, and after its abnormal recovery from our checkpoint."""
    n = _agree(oracle, written, tmp_path, mode)
    assert n == WRITTEN  # every message of every path, none lost


def test_rocketmq_reads_a_sync_flush_store(oracle, tmp_path):
    """SYNC_FLUSH: records dispatched by the flush thread after the group commit."""
    root = tmp_path / "sync"
    _write(str(root), flush_disk_type="SYNC_FLUSH")
    assert _agree(oracle, root, tmp_path) == WRITTEN


def test_rocketmq_reads_a_store_rmqfs_recovered_after_a_crash(oracle, written, tmp_path):
    """A store left as a crash leaves it (its ``abort`` file, the last record torn) recovered
    by rmqfs, then read by RocketMQ: rmqfs's recovery wrote what RocketMQ accepts (the cut
    CommitLog, the ConsumeQueue and index files truncated and rebuilt, the checkpoint)."""
    root = tmp_path / "crashed"
    shutil.copytree(written, root)
    with MessageStore(str(root), _config(), read_only=True) as store:
        end = store.commitlog.max_offset
        last = max(store.iter_queue("CrossC", 0))[1]
    assert last.commitlog_offset + last.store_size == end  # the last record of all: CrossC's
    segment = root / "commitlog" / f"{end - end % CL:020d}"
    with open(segment, "r+b") as f:  # its last 10 bytes never reached the disk
        f.seek(end % CL - 10)
        f.write(bytes(10))
    (root / "abort").touch()
    with MessageStore(str(root), _config()) as store:  # rmqfs's abnormal recovery
        assert store.commitlog.max_offset == last.commitlog_offset
        store.put_messages([Message("CrossC", b"after the crash", keys="again")])
    assert _agree(oracle, root, tmp_path) == WRITTEN  # (the torn one lost, one put after)
