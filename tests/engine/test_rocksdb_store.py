"""RocksDB ConsumeQueues and config (RocketMQ 5.2+, ``storeType=defaultRocksDB``; v2 config
5.3.2+): a plain store written by the engine, converted into the broker's RocksDB databases by
tests/rocksdbstore.py (keys and values from the Java definitions, written with struct), reads
back equal to the plain store, field by field; writers are refused; a database a broker holds
(LOCK) still reads; nothing in the store changes; a double-write store reads its files."""

from __future__ import annotations

import json
import os

import pytest

from rmqfs.engine import Message
from rmqfs.engine.errors import UnsupportedLayoutError
from rmqfs.engine.live.status import store_status
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.store import MessageStore
from rocksdbstore import hold_rocksdb, write_config_v1, write_config_v2, write_rocksdb_cq
from stores import copy_store

FIELDS = (
    "topic",
    "queue_id",
    "queue_offset",
    "body",
    "tags",
    "keys",
    "properties",
    "store_timestamp",
    "born_timestamp",
    "commitlog_offset",
    "flag",
    "sys_flag",
)


def _plain(tmp_path):
    root = tmp_path / "plain"
    with MessageStore(str(root)) as s:
        s.create_topic("T", 3)
        s.create_topic("U", 1)
        s.put_messages(
            [
                Message(
                    "T",
                    b"body-%d" % i + bytes(range(256)) * (i % 3),
                    tags="a" if i % 2 else "b",
                    keys=f"k{i}",
                )
                for i in range(60)
            ]
        )
        s.put_messages([Message("U", b"u%d" % i) for i in range(7)])
        s.commit_offset("G1", "T", 0, 3)
        s.commit_offset("G1", "T", 2, 5)
        s.create_group("G2")
    return root


def _records(s: MessageStore) -> dict:
    out = {}
    for t in s.topic_names():
        for q in s.queue_ids(t):
            for qoff, rec in s.iter_queue(t, q):
                out[(t, q, qoff)] = tuple(getattr(rec, f, None) for f in FIELDS)
    return out


@pytest.fixture
def stores(tmp_path):
    plain = _plain(tmp_path)
    rdb = tmp_path / "rocksdb"
    copy_store(plain, rdb)
    write_rocksdb_cq(rdb)
    write_config_v1(rdb)
    (rdb / "config" / "topics.json").write_text(
        json.dumps(
            {
                "topicConfigTable": {
                    "Stale": {
                        "topicName": "Stale",
                        "readQueueNums": 9,
                        "writeQueueNums": 9,
                        "perm": 6,
                    }
                }
            }
        )
    )
    return plain, rdb


def test_rocksdb_store_reads_every_message_as_the_plain_store(stores):
    plain, rdb = stores
    assert not (rdb / "consumequeue" / "T").exists()
    with MessageStore(str(plain), read_only=True) as p, MessageStore(str(rdb), read_only=True) as r:
        want, got = _records(p), _records(r)
        assert len(want) == 67 and got == want
        assert r.topic_names() == ["T", "U"]  # topics.json is stale: "Stale" is not there
        assert r.topic_config.get("T").read_queue_nums == 3
        for q in range(3):
            assert (r.min_offset("T", q), r.max_offset("T", q)) == (
                p.min_offset("T", q),
                p.max_offset("T", q),
            )
            ts = p.get_message("T", q, 10).store_timestamp
            assert r.offset_by_time("T", q, ts) == p.offset_by_time("T", q, ts)
        assert r.consumer_offsets.table == p.consumer_offsets.table
        assert r.group_names() == p.group_names()
        listed = store_status(r)["notUnderstood"]
        assert {e["path"] for e in listed} >= {"consumequeue", "config/topics"}
        assert all(e["refusesWrite"] for e in listed if "RocksDB" in e["what"])


def test_rocksdb_store_reads_through_storefiles_as_the_plain_store(stores):
    plain, rdb = stores
    p, r = StoreFiles(str(plain)), StoreFiles(str(rdb))
    try:
        assert r.topics() == p.topics() == ["T", "U"]
        for t in r.topics():
            assert r.queue_ids(t) == p.queue_ids(t)
            for q in r.queue_ids(t):
                lo, hi = r.min_offset(t, q), r.max_offset(t, q)
                assert (lo, hi) == (p.min_offset(t, q), p.max_offset(t, q))
                a = [b.to_pylist() for b in p.read_batches(t, q, lo, hi)]
                b = [b.to_pylist() for b in r.read_batches(t, q, lo, hi)]
                assert a == b and a
                ts = a[0][len(a[0]) // 2]["storeTimestamp"] if "storeTimestamp" in a[0][0] else 0
                assert r.offset_by_time(t, q, ts) == p.offset_by_time(t, q, ts)
    finally:
        p.close()
        r.close()


def test_rocksdb_store_refuses_writers_and_is_left_unchanged(stores):
    _, rdb = stores

    def tree():
        return {
            os.path.join(d, n): os.stat(os.path.join(d, n)).st_mtime_ns
            for d, _, names in os.walk(rdb)
            for n in names
        }

    for what in ("consumequeue", "config/topics"):
        before = tree()
        with pytest.raises(UnsupportedLayoutError, match="RocksDB") as exc:
            MessageStore(str(rdb))
        assert "-o ro" in str(exc.value) and "never writes" in str(exc.value)
        assert tree() == before, what
    before = tree()
    with MessageStore(str(rdb), read_only=True) as r:
        assert len(_records(r)) == 67
    StoreFiles(str(rdb)).close()
    assert tree() == before  # no rocksdict-config.json, no LOG, nothing


def test_rocksdb_held_by_a_broker_still_reads(stores):
    plain, rdb = stores
    broker = hold_rocksdb(rdb / "consumequeue")  # LOCK taken, as a running broker
    try:
        with (
            MessageStore(str(plain), read_only=True) as p,
            MessageStore(str(rdb), read_only=True) as r,
        ):
            assert _records(r) == _records(p)
    finally:
        broker.close()


def test_config_v2_is_the_source_of_truth(tmp_path):
    plain = _plain(tmp_path)
    rdb = tmp_path / "v2"
    copy_store(plain, rdb)
    write_rocksdb_cq(rdb)
    write_config_v2(rdb)
    with MessageStore(str(plain), read_only=True) as p, MessageStore(str(rdb), read_only=True) as r:
        assert r.consumer_offsets.table == p.consumer_offsets.table
        assert r.group_names() == p.group_names()
        assert r.topic_config.get("T").read_queue_nums == 3
        assert _records(r) == _records(p)
    with pytest.raises(UnsupportedLayoutError, match="rdb"):
        MessageStore(str(rdb))


def test_double_write_store_reads_its_files_beside_the_database(tmp_path):
    plain = _plain(tmp_path)
    dw = tmp_path / "dw"
    copy_store(plain, dw)
    write_rocksdb_cq(dw, double_write=True)
    names = os.listdir(dw / "consumequeue")
    assert "CURRENT" in names and "T" in names
    with MessageStore(str(plain), read_only=True) as p, MessageStore(str(dw), read_only=True) as r:
        assert r.rocksdb_cq is None  # the file ConsumeQueues, as the broker prefers
        assert r.topic_names() == ["T", "U"] and _records(r) == _records(p)
    sf = StoreFiles(str(dw))
    try:
        assert sf.topics() == ["T", "U"] and sf.rocksdb is None
    finally:
        sf.close()
    with pytest.raises(UnsupportedLayoutError):
        MessageStore(str(dw))


def test_a_malformed_unit_or_offset_key_raises_the_engine_s_error(stores):
    from rmqfs.engine.errors import CorruptRecordError
    from rmqfs.engine.format.rocksdbcq import RocksDBConsumeQueues
    from rocksdbstore import cq_key, hold_rocksdb

    _, rdb = stores
    db = hold_rocksdb(rdb / "consumequeue")
    db[cq_key("T", 0, 1)] = b"\0" * 10  # not the 28-byte value of buildCQValueByteBuffer0
    db.get_column_family("offset")[b"\0\0\0\x01\x01X"] = b"\0" * 16  # key cut short
    db.close()
    os.unlink(rdb / "consumequeue" / "rocksdict-config.json")
    cq = RocksDBConsumeQueues(str(rdb / "consumequeue"))
    try:
        assert len(cq.read_units("T", 0, 0, 1)) == 20
        with pytest.raises(CorruptRecordError, match="unit 1 has a 10-byte value"):
            cq.read_units("T", 0, 0, 5)
        with pytest.raises(CorruptRecordError, match="offset key"):
            cq.queues()
    finally:
        cq.close()
    (rdb / "consumequeue" / "CURRENT").write_text("MANIFEST-999999\n")
    with pytest.raises(CorruptRecordError, match="RocksDB cannot open it"):
        RocksDBConsumeQueues(str(rdb / "consumequeue"))


def test_a_snapshot_of_a_rocksdb_store_is_refused(stores):
    """The snapshot machinery copies file ConsumeQueues: a snapshot of a store whose queues
    are in RocksDB would restore a store without them."""
    from rmqfs.engine.errors import UnsupportedLayoutError
    from rmqfs.engine.live.snapshot import freeze

    _plain_store, rdb = stores
    with (
        MessageStore(str(rdb), read_only=True) as s,
        pytest.raises(UnsupportedLayoutError, match="RocksDB"),
    ):
        freeze(s, "s1")


def test_one_queue_whose_max_unit_is_missing_stays_in_its_queue(tmp_path):
    """Issue 36 item 10: one RocksDB ConsumeQueue whose offset table's max points at a missing
    unit refused the whole store (topic-list, topic-status, every open). Now that queue ends
    after its last unit present and is noted damaged; every other queue reads as before, and
    the engine, the data source and verify agree."""
    from rocksdict import Rdict

    from rocksdbstore import _options, cq_key

    root = _plain(tmp_path)
    write_rocksdb_cq(root)
    with MessageStore(str(root), read_only=True) as s:
        t1_max = s.max_offset("T", 1)
        before = {q: [m.body for _, m in s.iter_queue("T", q)] for q in s.queue_ids("T")}
    db = Rdict(str(root / "consumequeue"), _options(), column_families={"offset": _options()})
    try:
        del db[cq_key("T", 1, t1_max - 1)]  # the unit the max names
    finally:
        db.close()
    with MessageStore(str(root), read_only=True) as s:
        assert s.topic_names() == ["T", "U"]
        assert s.max_offset("T", 1) == t1_max - 1
        got = {q: [m.body for _, m in s.iter_queue("T", q)] for q in s.queue_ids("T")}
        assert "missing" in s.damaged[("T", 1)]
        assert store_status(s)["damagedQueues"]
    assert got == {**before, 1: before[1][:-1]}
    sf = StoreFiles(str(root))
    rows = [
        r.as_py()
        for b in sf.read_batches("T", 1, sf.min_offset("T", 1), sf.max_offset("T", 1))
        for r in b.column("body")
    ]
    assert rows == got[1]
    from rmqfs.engine.tools.verify import verify_store

    found = [(p.severity, p.kind, p.path) for p in verify_store(str(root)).problems]
    assert ("error", "cq-rocksdb", "consumequeue/T/1") in found
