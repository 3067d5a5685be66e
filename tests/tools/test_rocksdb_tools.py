"""The offline commands on a RocksDB store (RocketMQ 5.2+, ``storeType=defaultRocksDB``,
tests/rocksdbstore.py): read commands answer as on the plain store it was converted from,
verify checks its units, every writer refuses saying why and changes nothing."""

from __future__ import annotations

import os
import struct

from rocksdict import Options, Rdict

from conftest import run_rmqfs
from rmqfs.engine import Message
from rmqfs.engine.store import MessageStore
from rocksdbstore import cq_key, write_config_v1, write_rocksdb_cq
from stores import copy_store


def _stores(tmp_path):
    plain = tmp_path / "plain"
    with MessageStore(str(plain)) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"m%d" % i, tags="a", keys=f"k{i}") for i in range(10)])
        s.commit_offset("G", "T", 0, 2)
    rdb = tmp_path / "rdb"
    copy_store(plain, rdb)
    write_rocksdb_cq(rdb)
    write_config_v1(rdb)
    return plain, rdb


def test_read_commands_answer_as_on_the_plain_store(tmp_path):
    plain, rdb = _stores(tmp_path)
    for args in (
        ("topic-list",),
        ("topic-status", "-t", "T"),
        ("consumer-progress", "-g", "G"),
        ("queryMsgByKey", "-t", "T", "-k", "k3"),
        ("queryMsgByOffset", "-t", "T", "-i", "1", "-o", "2"),
        ("query-cq", "-t", "T", "-q", "0"),
    ):
        want = run_rmqfs(*args, str(plain)).stdout
        got = run_rmqfs(*args, str(rdb)).stdout
        assert got.replace(str(rdb), "") == want.replace(str(plain), ""), args
        assert got.strip(), args
    out = run_rmqfs("verify", str(rdb)).stdout
    assert "OK: no errors" in out and "missing" not in out


def test_verify_finds_a_unit_that_is_not_its_record(tmp_path):
    _, rdb = _stores(tmp_path)
    o = Options(raw_mode=True)
    db = Rdict(str(rdb / "consumequeue"), o, column_families={"offset": Options(raw_mode=True)})
    value = db[cq_key("T", 0, 2)]
    off, size, tags, ts = struct.unpack(">qiqq", value)
    db[cq_key("T", 0, 2)] = struct.pack(">qiqq", off + 1, size, tags, ts)
    db.close()
    os.unlink(rdb / "consumequeue" / "rocksdict-config.json")
    res = run_rmqfs("verify", str(rdb), check=False)
    assert res.returncode != 0 and "consumequeue/T/0" in res.stdout + res.stderr


def test_writers_refuse_saying_why_and_change_nothing(tmp_path):
    _, rdb = _stores(tmp_path)

    def tree():
        return {
            os.path.join(d, n): os.stat(os.path.join(d, n)).st_mtime_ns
            for d, _, names in os.walk(rdb)
            for n in names
        }

    before = tree()
    for args in (
        ("update-topic", "-t", "T2"),
        ("reset-offset", "-g", "G", "-t", "T", "-o", "0"),
        ("produce", "-t", "T", "--body", "x"),
        ("recover", "--rebuild"),
    ):
        res = run_rmqfs(*args, str(rdb), check=False)
        assert res.returncode != 0, args
        assert "never writes a RocksDB ConsumeQueue" in res.stderr and "-o ro" in res.stderr
    assert tree() == before


def test_verify_calls_a_rocksdb_config_that_does_not_load_an_error(tmp_path):
    """The broker loads its topics, groups and offsets from the RocksDB config; one that does not
    load was no problem to verify (the mount read the stale JSON beside it); it is an error of
    kind config now, which recover leaves to the user."""
    from rocksdbstore import _options

    _, rdb = _stores(tmp_path)
    db = Rdict(str(rdb / "config" / "topics"), _options())
    db[b"T"] = b"{not json"
    db.close()
    (rdb / "config" / "topics" / "rocksdict-config.json").unlink(missing_ok=True)
    res = run_rmqfs("verify", str(rdb), check=False)
    assert res.returncode == 1, res.stdout
    line = next(x for x in res.stdout.splitlines() if x.startswith("ERROR   config:"))
    assert "RocksDB config" in line and "may be stale" in line, line
