"""Prove the independent reference reader (tests/refreader.py) against real
RocketMQ store fixtures (shared/fixtures, see its README.md).

* apache-rocketmq-pr3535: Java 4.4-era commitlog, 47 messages + blank record.
* rocketmq-4.9.8-written: written by RocketMQ 4.9.8's DefaultMessageStore,
  with expected.jsonl listing every stored field per message.
* mxsm-rocketmq-rust/store-v0.9.0: written by rocketmq-rust 0.9.0,
  with expected-records.json.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import shutil
import struct

import pytest

import refreader as rr
from conftest import SHARED

FIXTURES = SHARED / "fixtures"
PR3535 = FIXTURES / "apache-rocketmq-pr3535" / "store"
RMQ498 = FIXTURES / "rocketmq-4.9.8-written"
RUST = FIXTURES / "mxsm-rocketmq-rust" / "store-v0.9.0"

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared fixtures not present")


# --------------------------------------------------------------------------
# pure helpers
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", 0),
        ("hello", 99162322),
        ("TAG1", 2567159),
        ("polygenelubricants", -(2**31)),  # hashes to Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # surrogate pair: two UTF-16 units
        # ((((104*31 + 0xE9)*31 + 108)*31 + 108)*31 + 111): one unit per BMP char
        ("h\u00e9llo", 103094734),
    ],
)
def test_java_string_hash(text, expected):
    assert rr.java_string_hash(text) == expected


def test_index_key_hash_min_value_maps_to_zero():
    assert rr.index_key_hash("polygenelubricants") == 0
    assert rr.index_key_hash("TAG1") == 2567159


def test_decode_properties_rules():
    # §1.6: trailing separator optional, empty key or value dropped,
    # first \x01 splits name from value.
    raw = b"A\x011\x02\x01x\x02y\x01\x02B\x01a\x01b"
    assert rr.decode_properties(raw) == {"A": "1", "B": "a\x01b"}


def test_offset_msg_id_forms():
    v4 = bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert rr.offset_msg_id(v4, 0x1107) == "7F00000100002A9F0000000000001107"
    assert (
        rr.offset_msg_id((bytes([127, 0, 0, 1]), 10911), 0x1107)
        == "7F00000100002A9F0000000000001107"
    )
    v6 = bytes(15) + b"\x01" + struct.pack(">i", 10911)
    assert len(rr.offset_msg_id(v6, 1)) == 56


# --------------------------------------------------------------------------
# apache-rocketmq-pr3535
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pr3535():
    return rr.read_commitlog(PR3535 / "commitlog")


def test_pr3535_messages(pr3535):
    assert len(pr3535) == 47
    for i, rec in enumerate(pr3535):
        rr.check_record(rec)
        assert rec["magic"] == rr.MAGIC_V1
        assert rec["topic"] == "abc"
        assert rec["queueOffset"] == i
        assert rec["properties"]["TAGS"] == "TAG1"
        assert "KEYS" in rec["properties"]
    first = pr3535[0]
    assert first["totalSize"] == 172  # worked example of §1.2
    assert first["storeHost"] == "192.168.71.1:8123"
    assert first["propertiesRaw"].endswith(b"\x02")


def test_pr3535_blank_record():
    assert rr.blank_records(PR3535 / "commitlog") == [(8084, 108)]
    scan = rr.scan_commitlog(PR3535 / "commitlog")
    assert scan["endOffset"] == 8084
    assert scan["segmentSize"] == 8192
    raw = (PR3535 / "commitlog" / "00000000000000000000").read_bytes()
    assert raw[8084:8092] == bytes.fromhex("0000006ccbd43194")


def test_pr3535_tags_code():
    assert rr.tags_code("TAG1") == 2567159
    assert rr.tags_code(None) == 0


def test_check_record_detects_corruption(pr3535):
    for field, value in (
        ("bodyCRC", pr3535[0]["bodyCRC"] ^ 1),
        ("totalSize", 171),
        ("physicalOffset", 1),
    ):
        bad = dict(pr3535[0], **{field: value})
        with pytest.raises(AssertionError):
            rr.check_record(bad)


def test_read_commitlog_rejects_bad_crc(tmp_path):
    src = (PR3535 / "commitlog" / "00000000000000000000").read_bytes()
    data = bytearray(src)
    data[8:12] = struct.pack(">i", 12345)  # BODYCRC of the first record
    (tmp_path / "00000000000000000000").write_bytes(bytes(data))
    with pytest.raises(AssertionError, match="BODYCRC"):
        rr.read_commitlog(tmp_path)
    assert len(rr.read_commitlog(tmp_path, check=False)) == 47


def test_segments_must_be_contiguous(tmp_path):
    src = PR3535 / "commitlog" / "00000000000000000000"
    shutil.copy(src, tmp_path / "00000000000000000000")
    shutil.copy(src, tmp_path / "00000000000000016384")  # gap of one segment
    with pytest.raises(AssertionError, match="previous"):
        rr.read_commitlog(tmp_path)


# --------------------------------------------------------------------------
# rocketmq-4.9.8-written
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expected498():
    with open(RMQ498 / "expected.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def scan498():
    return rr.scan_commitlog(RMQ498 / "store" / "commitlog")


def test_498_every_message_matches_expected(scan498, expected498):
    records = scan498["records"]
    assert len(records) == len(expected498) == 240
    for rec, exp in zip(records, expected498):
        assert exp["kind"] == "message"
        where = "message at %d" % exp["commitLogOffset"]
        got = {
            "topic": rec["topic"],
            "queueId": rec["queueId"],
            "queueOffset": rec["queueOffset"],
            "commitLogOffset": rec["physicalOffset"],
            "size": rec["totalSize"],
            "tags": rec["properties"].get("TAGS"),
            "keys": rec["properties"].get("KEYS"),
            "body": base64.b64encode(rec["body"]).decode("ascii"),
            "bornTimestamp": rec["bornTimestamp"],
            "storeTimestamp": rec["storeTimestamp"],
            "msgId": rr.offset_msg_id(rec["storeHostRaw"], rec["physicalOffset"]),
            "uniqKey": rec["properties"].get("UNIQ_KEY"),
            "flag": rec["flag"],
            "sysFlag": rec["sysFlag"],
            "bodyCRC": rec["bodyCRC"],
            "reconsumeTimes": rec["reconsumeTimes"],
            "preparedTransactionOffset": rec["preparedTransactionOffset"],
            "bornHost": rec["bornHost"],
            "storeHost": rec["storeHost"],
            "properties": rec["properties"],
        }
        want = {k: exp[k] for k in got}
        assert got == want, where
        assert rec["fileOffset"] == exp["commitLogOffset"], where
        assert rec["magic"] == rr.MAGIC_V1, where


def test_498_host_widths_follow_sysflag(scan498):
    seen = collections.Counter()
    for rec in scan498["records"]:
        born6 = bool(rec["sysFlag"] & rr.SYSFLAG_BORNHOST_V6)
        store6 = bool(rec["sysFlag"] & rr.SYSFLAG_STOREHOST_V6)
        assert len(rec["bornHostRaw"]) == (20 if born6 else 8)
        assert len(rec["storeHostRaw"]) == (20 if store6 else 8)
        seen[(born6, store6)] += 1
    assert len(seen) == 4  # all four v4/v6 combinations occur


def test_498_segments_and_blanks(scan498):
    seg = scan498["segmentSize"]
    assert seg == 256 * 1024
    files = sorted(os.listdir(RMQ498 / "store" / "commitlog"))
    assert len(files) == 9
    blanks = scan498["blanks"]
    # one blank at the end of every file but the last, filling it exactly
    assert len(blanks) == len(files) - 1
    for off, length in blanks:
        assert (off + length) % seg == 0
        assert length >= 8
    assert (
        scan498["endOffset"]
        == scan498["records"][-1]["fileOffset"] + scan498["records"][-1]["totalSize"]
    )
    assert scan498["stopReason"].startswith("header at %d" % scan498["endOffset"])
    # no record crosses a segment boundary
    for rec in scan498["records"]:
        assert rec["fileOffset"] // seg == (rec["fileOffset"] + rec["totalSize"] - 1) // seg


def test_498_properties_have_no_trailing_separator(scan498):
    # 4.9.8 strips the final \x02 (5.x and the 4.4-era fixture keep it);
    # decoding is the same either way.
    assert not any(r["propertiesRaw"].endswith(b"\x02") for r in scan498["records"])


def test_498_consume_queues(expected498):
    store = RMQ498 / "store"
    by_queue = collections.defaultdict(list)
    for exp in expected498:
        by_queue[(exp["topic"], exp["queueId"])].append(exp)
    assert len(by_queue) == 8
    for (topic, qid), msgs in by_queue.items():
        msgs.sort(key=lambda m: m["queueOffset"])
        assert [m["queueOffset"] for m in msgs] == list(range(len(msgs)))
        units = rr.read_consumequeue(store, topic, qid)
        assert units == [(m["commitLogOffset"], m["size"], m["tagsCode"]) for m in msgs], (
            topic,
            qid,
        )
        for m in msgs:
            assert m["tagsCode"] == rr.tags_code(m["tags"])
        qdir = store / "consumequeue" / topic / str(qid)
        assert all(os.path.getsize(qdir / n) == 160 for n in os.listdir(qdir))


def _index_keys(exp):
    keys = []
    if exp.get("uniqKey"):
        keys.append(exp["uniqKey"])
    keys.extend(k for k in (exp.get("keys") or "").split(" ") if k)
    return ["%s#%s" % (exp["topic"], k) for k in keys]


def test_498_index_files(expected498):
    idx = RMQ498 / "store" / "index"
    names = sorted(os.listdir(idx))
    assert len(names) == 5
    by_offset = {e["commitLogOffset"]: e for e in expected498}
    want = collections.Counter()
    for exp in expected498:
        for key in _index_keys(exp):
            want[(rr.index_key_hash(key), exp["commitLogOffset"])] += 1
    got = collections.Counter()
    prev_end = None
    for name in names:
        path = idx / name
        assert rr.index_geometry(path) == (32, 128)
        assert rr.index_geometry(path, index_num=128) == (32, 128)
        header = rr.read_indexfile(path)
        items = rr.read_index_items(path, 32)
        assert len(items) == header["indexCount"] - 1
        with open(path, "rb") as f:
            slots = struct.unpack(">32i", f.read(40 + 32 * 4)[40:])
        assert header["hashSlotCount"] == sum(1 for s in slots if s > 0)
        for n, (key_hash, phy, time_diff, prev) in enumerate(items, start=1):
            got[(key_hash, phy)] += 1
            store_ts = by_offset[phy]["storeTimestamp"]
            assert time_diff == (store_ts - header["beginTimestamp"]) // 1000
            assert 0 <= prev < n
        assert header["endPhyOffset"] == items[-1][1]
        assert header["endTimestamp"] == by_offset[items[-1][1]]["storeTimestamp"]
        if prev_end is not None:
            assert header["beginPhyOffset"] >= prev_end
        prev_end = header["endPhyOffset"]
    # every key of every message is indexed exactly once; files 1-4 are full
    assert got == want
    assert [rr.read_indexfile(idx / n)["indexCount"] for n in names[:4]] == [128] * 4


def test_498_index_lookup(expected498):
    idx = RMQ498 / "store" / "index"
    pairs_by_hash = collections.defaultdict(list)
    for exp in expected498:
        for key in _index_keys(exp):
            pairs_by_hash[rr.index_key_hash(key)].append(exp["commitLogOffset"])
    for exp in expected498:
        for key in _index_keys(exp):
            found = rr.index_lookup_dir(idx, key)
            assert exp["commitLogOffset"] in found, key
            # collisions are not resolved: exactly the items with that hash
            assert collections.Counter(found) == collections.Counter(
                pairs_by_hash[rr.index_key_hash(key)]
            ), key
    assert rr.index_lookup_dir(idx, "OracleTopicA#no-such-key") == []


def test_498_checkpoint(scan498):
    cp = rr.read_checkpoint(RMQ498 / "store" / "checkpoint")
    store_ts = {r["storeTimestamp"] for r in scan498["records"]}
    assert cp["physicMsgTimestamp"] in store_ts
    assert cp["logicsMsgTimestamp"] == max(store_ts)
    # indexMsgTimestamp = endTimestamp of the last index file flushed when full
    ends = [
        rr.read_indexfile(RMQ498 / "store" / "index" / n)["endTimestamp"]
        for n in sorted(os.listdir(RMQ498 / "store" / "index"))
    ]
    assert cp["indexMsgTimestamp"] == ends[3]
    assert cp["masterFlushedOffset"] == 0 and cp["confirmPhyOffset"] == 0  # 4.x: 24 bytes
    assert os.path.getsize(RMQ498 / "store" / "checkpoint") == 4096


# --------------------------------------------------------------------------
# mxsm-rocketmq-rust v0.9.0
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rust_expected():
    return json.loads((RUST / "expected-records.json").read_text(encoding="utf-8"))


def test_rust_commitlog(rust_expected):
    store = RUST / "local-file"
    records = rr.read_commitlog(store / "commitlog")
    assert [r["body"].decode() for r in records] == rust_expected["message_bodies"]
    for i, rec in enumerate(records):
        assert rec["topic"] == rust_expected["topic"]
        assert rec["queueId"] == rust_expected["queue_id"]
        assert rec["queueOffset"] == i
        assert rec["totalSize"] == 141
        assert rec["properties"] == {"KEYS": rust_expected["message_key"]}
    assert rr.blank_records(store / "commitlog") == []


def test_rust_consume_queue(rust_expected):
    units = rr.read_consumequeue(
        RUST / "local-file", rust_expected["topic"], rust_expected["queue_id"]
    )
    assert len(units) == rust_expected["queue_max_offset"] == 2
    assert units == [(0, 141, 0), (141, 141, 0)]


def test_rust_index(rust_expected):
    idx = RUST / "local-file" / "index"
    (name,) = os.listdir(idx)
    path = idx / name
    assert rr.index_geometry(path) == (32, 128)
    header = rr.read_indexfile(path)
    assert header["indexCount"] == 3 and header["hashSlotCount"] == 1
    assert header["beginPhyOffset"] == 0 and header["endPhyOffset"] == 141
    key = "%s#%s" % (rust_expected["topic"], rust_expected["message_key"])
    found = rr.index_lookup(path, key, 32)
    assert len(found) == rust_expected["index_result_count"] == 2
    assert found == [141, 0]  # newest first
    assert rr.index_lookup(path, key, 32, max_num=1) == [141]
    assert rr.index_lookup(path, rust_expected["topic"] + "#other") == []


def test_rust_checkpoint():
    cp = rr.read_checkpoint(RUST / "local-file" / "checkpoint")
    assert set(cp) == {
        "physicMsgTimestamp",
        "logicsMsgTimestamp",
        "indexMsgTimestamp",
        "masterFlushedOffset",
        "confirmPhyOffset",
    }
    assert cp["logicsMsgTimestamp"] == 1786727751704
