"""engine/tools/verify/: ``rmqfs verify`` / ``rmqfs recover`` end to end and ``verify_store`` /
``recover_store`` directly, and the one ``__CRC32#`` check (``engine.format.message.prop_crc_status``)
that the record decoder and verify share.

The small HDFS store and broker.conf fixtures are test_admin.py's (the other offline commands
run on the same stores); the 8 KiB-segment stores are test_store_hardening.py's."""

import json
import os
import shutil
import struct

import pytest

from conftest import FIXTURES, copy_fixture, fuse, run_rmqfs
from rmqfs.engine.format.consumequeue import UNIT
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from rmqfs.engine.tools.verify import recover_store, verify_store
from stores import SMALL, bodies, produce, put_internal, small
from test_admin import SEG, _cfg, _hdfs_lines, _verify, conf, hdfs_store, store  # noqa: F401 (fixtures)

FIXTURE_STORES = {
    "rocketmq-4.9.8-written": "rocketmq-4.9.8-written/store",
    "mxsm-rocketmq-rust": "mxsm-rocketmq-rust/store-v0.9.0/local-file",
    "apache-rocketmq-pr3535": "apache-rocketmq-pr3535/store",
    "gxstax-rocketmq": "gxstax-rocketmq/store",
    "liushangqing9803-rocketmq-tech": "liushangqing9803-rocketmq-tech/store",
}
ORACLE_SEG = 256 * 1024


def _seg_path(root, offset, seg=SEG):
    return root / "commitlog" / f"{offset - offset % seg:020d}"


# ----------------------------------------------------------------------------------------------
# verify / recover (moved from test_admin.py unchanged)


def test_verify_clean_store(store, conf):
    root, res = store
    end = res[-1].commitlog_offset + res[-1].size
    r = _verify(root, conf)
    nseg = end // SEG + 1
    assert r.stdout.splitlines() == [
        f"CommitLog:    {nseg} files of {SEG} bytes, 1200 records, offsets [0, {end})",
        "ConsumeQueue: 4 queues, 1200 units",
        f"IndexFile:    {-(-3600 // 255)} files, 3600 items",  # UNIQ_KEY + 2 keys, 255 a file
        "OK: no errors, 0 warnings",
    ]
    assert r.stderr == ""


@pytest.mark.parametrize("name", sorted(FIXTURE_STORES))
def test_verify_every_fixture_in_place(name):
    """verify writes nothing: it runs on the read-only fixture directories themselves."""
    r = _verify(FIXTURES / FIXTURE_STORES[name])
    assert "OK: no errors" in r.stdout
    if name == "rocketmq-4.9.8-written":
        assert f"9 files of {ORACLE_SEG} bytes, 240 records" in r.stdout
        assert "ConsumeQueue: 8 queues, 240 units" in r.stdout
        assert "OK: no errors, 0 warnings" in r.stdout
    if name == "mxsm-rocketmq-rust":
        assert "1 files of 4096 bytes, 2 records, offsets [0, 282)" in r.stdout
        assert "OK: no errors, 0 warnings" in r.stdout
    if name == "apache-rocketmq-pr3535":  # a CommitLog only: the derived files lag
        assert "47 records" in r.stdout
        assert "WARNING consumequeue/abc/0: missing: 47 records" in r.stdout


@pytest.mark.parametrize("name", sorted(FIXTURE_STORES))
def test_recover_every_fixture_copy(tmp_path, name):
    root = copy_fixture(FIXTURE_STORES[name], tmp_path / "s")
    r = run_rmqfs("recover", root)
    assert "after:  0 errors, 0 warnings" in r.stdout
    assert "OK: no errors, 0 warnings" in _verify(root).stdout


def test_flipped_body_byte(store, conf):
    root, res = store
    bad = res[700]
    seg = _seg_path(root, bad.commitlog_offset)
    with open(seg, "r+b") as f:
        pos = bad.commitlog_offset % SEG + 88 + 10  # inside the body (it starts at 88)
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x20]))
    r = _verify(root, conf, rc=1)
    errors = [x for x in r.stdout.splitlines() if x.startswith("ERROR")]
    assert errors[0].startswith(f"ERROR   commitlog/{seg.name} @ {bad.commitlog_offset}: ")
    assert "CRC" in errors[0]  # "body CRC mismatch"
    assert f"the CommitLog is valid up to offset {bad.commitlog_offset}" in r.stdout
    assert r.stderr.strip().endswith("errors")
    doc = json.loads(run_rmqfs("verify", root, "--config", conf, "--json", check=False).stdout)
    assert (doc["ok"], doc["firstBadOffset"], doc["records"]) == (False, bad.commitlog_offset, 1199)
    assert doc["problems"][0]["path"] == f"commitlog/{seg.name}"
    assert doc["problems"][0]["offset"] == bad.commitlog_offset
    rec = run_rmqfs("recover", root, "--config", conf)
    assert f"truncated the CommitLog at offset {bad.commitlog_offset}" in rec.stdout
    assert "499 valid records after the damage" in rec.stdout
    lost = list((root / "lost+found").glob("*/commitlog/*"))
    assert seg.name in {p.name for p in lost}
    v = _verify(root, conf)
    assert "700 records" in v.stdout and "OK: no errors, 0 warnings" in v.stdout
    with MessageStore(root, _cfg(), read_only=True) as s:
        assert sum(s.max_offset("HDFS", q) for q in range(4)) == 700


def test_zeroed_topic_length_of_the_last_message(store, conf):
    """DefaultMessageStoreTest.testRecover: 16 zero bytes at the last message's topic length."""
    root, res = store
    last = res[-1]
    body_len = len(_hdfs_lines()[-1])
    with open(_seg_path(root, last.commitlog_offset), "r+b") as f:
        f.seek(last.commitlog_offset % SEG + 84 + body_len + 4)
        f.write(bytes(16))
    r = _verify(root, conf, rc=1)
    assert f"@ {last.commitlog_offset}: " in r.stdout
    run_rmqfs("recover", root, "--config", conf)
    v = _verify(root, conf)
    assert f"1199 records, offsets [0, {last.commitlog_offset})" in v.stdout
    assert not (root / "lost+found").exists()  # only the torn record was dropped


def test_cut_segment_of_the_broker_store(tmp_path):
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    expected = [
        json.loads(line)
        for line in (FIXTURES / "rocketmq-4.9.8-written" / "expected.jsonl")
        .read_text()
        .splitlines()
    ]
    last_seg = root / "commitlog" / "00000000000002097152"
    in_last = sorted(e["commitLogOffset"] for e in expected if e["commitLogOffset"] >= 2097152)
    cut_at = in_last[1] + 10  # inside the second record of the last file
    os.truncate(last_seg, cut_at - 2097152)
    r = _verify(root, rc=1)
    assert (
        f"ERROR   commitlog/{last_seg.name}: {cut_at - 2097152} bytes, the other files are "
        f"{ORACLE_SEG} bytes (cut short)"
    ) in r.stdout.splitlines()
    rec = run_rmqfs("recover", root)
    assert (
        f"extended commitlog/{last_seg.name} from {cut_at - 2097152} to {ORACLE_SEG}" in rec.stdout
    )
    v = _verify(root)
    kept = sum(1 for e in expected if e["commitLogOffset"] < in_last[1])
    assert f"{kept} records, offsets [0, {in_last[1]})" in v.stdout
    assert "OK: no errors, 0 warnings" in v.stdout
    assert os.path.getsize(last_seg) == ORACLE_SEG


def test_damaged_consume_queue_unit_is_rebuilt_byte_identical(tmp_path):
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    qdir = root / "consumequeue" / "OracleTopicA" / "1"
    first = sorted(qdir.iterdir())[0]
    original = {p.name: p.read_bytes() for p in qdir.iterdir()}
    off, size, _tc = UNIT.unpack_from(original[first.name], 3 * 20)
    with open(first, "r+b") as f:
        f.seek(3 * 20 + 8)
        f.write(struct.pack(">i", size + 1))
    r = _verify(root, rc=1)
    q0 = int(first.name) // 20
    assert (
        f"ERROR   consumequeue/OracleTopicA/1/{first.name} @ {q0 + 3}: unit at CommitLog "
        f"offset {off}: size {size + 1} != record size {size}"
    ) in r.stdout.splitlines()
    run_rmqfs("recover", root)
    assert "OK: no errors, 0 warnings" in _verify(root).stdout
    assert {p.name: p.read_bytes() for p in qdir.iterdir()} == original


def test_consume_queue_unit_pointing_elsewhere(store, conf):
    root, res = store
    cq = root / "consumequeue" / "HDFS" / "2" / "00000000000000000000"
    other = res[1]  # a record of queue 1
    with open(cq, "r+b") as f:
        f.seek(5 * 20)
        f.write(UNIT.pack(other.commitlog_offset, other.size, 0))
    r = _verify(root, conf, rc=1)
    assert (
        f"ERROR   consumequeue/HDFS/2/{cq.name} @ 5: unit ({other.commitlog_offset}, "
        f"{other.size}, 0) points at the record of HDFS/1 queue offset 0, not HDFS/2 queue "
        "offset 5"
    ) in r.stdout.splitlines()
    run_rmqfs("recover", root, "--config", conf)
    _verify(root, conf)


def test_damaged_index_item(tmp_path):
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    idx = sorted((root / "index").iterdir())[2]
    data = idx.read_bytes()
    slots = 32
    item = 7
    pos = 40 + slots * 4 + item * 20
    key_hash, phy, _, _ = struct.unpack_from(">iqii", data, pos)
    with open(idx, "r+b") as f:
        f.seek(pos)
        f.write(struct.pack(">i", key_hash ^ 0x5555))
    r = _verify(root, rc=1)
    line = next(x for x in r.stdout.splitlines() if x.startswith("ERROR"))
    assert line.startswith(
        f"ERROR   index/{idx.name} @ {item}: item {item}: keyHash "
        f"{key_hash ^ 0x5555} is not the hash of a key of the record at {phy}"
    )
    run_rmqfs("recover", root)
    assert "OK: no errors, 0 warnings" in _verify(root).stdout


def test_missing_consume_queue_and_index_are_lag_then_rebuilt(store, conf):
    root, _ = store
    shutil.rmtree(root / "consumequeue" / "HDFS" / "3")
    shutil.rmtree(root / "index")
    r = _verify(root, conf)  # lag is a warning: the store re-dispatches it on open
    assert "WARNING consumequeue/HDFS/3: missing: 300 records" in r.stdout
    assert "OK: no errors, 2 warnings" in r.stdout
    run_rmqfs("recover", root, "--config", conf)
    assert "OK: no errors, 0 warnings" in _verify(root, conf).stdout


@fuse
def test_verify_next_to_a_running_mount(mount_store, tmp_path):
    m = mount_store(tmp_path / "store")
    os.mkdir(m.mnt / "topics" / "Live")
    with open(m.mnt / "topics" / "Live" / "produce", "wb") as f:
        f.write(b"".join(line + b"\n" for line in _hdfs_lines(500)))
    v = _verify(tmp_path / "store")
    assert f"store in use by process {m.pid}" in v.stdout
    assert "500 records" in v.stdout and "OK: no errors" in v.stdout
    r = run_rmqfs("recover", tmp_path / "store", check=False)
    assert r.returncode == 1 and f"locked by process {m.pid}" in r.stderr
    out = run_rmqfs("print-msg", tmp_path / "store", "-t", "Live", "-i", "0", "--json").stdout
    assert len(out.splitlines()) == 125
    m.umount()
    assert "OK: no errors, 0 warnings" in _verify(tmp_path / "store").stdout


def test_crc32_property_is_verified(tmp_path):
    """AppendPropCRCTest: records with a __CRC32# trailer pass; one changed properties byte
    fails. The trailer is written here by hand (reference section 1.5: CRC-32 & 0x7FFFFFFF of
    the record before the 20 reserved bytes, 10 digits least significant first)."""
    import zlib

    root = tmp_path / "s"
    props = {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 1)
        # the reserved names, as a broker's own put
        res = put_internal(
            s,
            [
                Message(
                    "T",
                    f"body{i}".encode(),
                    properties={**props, "UNIQ_KEY": f"{i:032X}", "__CRC32#": "0" * 10},
                )
                for i in range(10)
            ],
        )
        s.flush()
    seg = root / "commitlog" / f"{0:020d}"
    with open(seg, "r+b") as f:
        for r in res:
            f.seek(r.commitlog_offset)
            raw = f.read(r.size)
            assert raw[-20:] == b"__CRC32#\x01" + b"0" * 10 + b"\x02"
            crc = zlib.crc32(raw[:-20]) & 0x7FFFFFFF
            f.seek(r.commitlog_offset + r.size - 11)
            f.write(f"{crc:010d}"[::-1].encode())
    assert "OK: no errors, 0 warnings" in _verify(root, None).stdout
    last = res[-1]
    with open(seg, "r+b") as f:  # the "a" property's value, inside the last record
        f.seek(last.commitlog_offset)
        pos = last.commitlog_offset + f.read(last.size).index(b"a\x011\x02") + 2
        f.seek(pos)
        f.write(b"2")
    r = _verify(root, None, rc=1)
    errors = [x for x in r.stdout.splitlines() if x.startswith("ERROR")]
    assert errors[0].startswith(f"ERROR   commitlog/{seg.name} @ {last.commitlog_offset}: ")
    assert "CRC" in errors[0]  # "__CRC32# property does not match the record"


def test_cut_middle_segment_keeps_the_dropped_files(tmp_path):
    """A segment cut in the middle of the CommitLog: the broker's recovery would drop everything
    after the damage; recover does too, but first copies the files to lost+found/."""
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    mid = root / "commitlog" / f"{3 * ORACLE_SEG:020d}"
    later = sorted(p.name for p in (root / "commitlog").iterdir() if p.name > mid.name)
    originals = {n: (root / "commitlog" / n).read_bytes() for n in later}
    os.truncate(mid, 1000)
    r = _verify(root, rc=1)
    assert (
        f"ERROR   commitlog/{mid.name}: 1000 bytes, the other files are {ORACLE_SEG} bytes "
        "(cut short)"
    ) in r.stdout.splitlines()
    rec = run_rmqfs("recover", root)
    assert "valid records after the damage, which recovery drops" in rec.stdout
    lost = next((root / "lost+found").iterdir()) / "commitlog"
    assert {n: (lost / n).read_bytes() for n in later} == originals
    v = _verify(root)
    assert "OK: no errors, 0 warnings" in v.stdout
    assert sorted(p.name for p in (root / "commitlog").iterdir())[-1] == mid.name


def test_verify_while_a_writer_appends(store, conf):
    """verify next to a live writer: records, units and index items newer than its scan are not
    errors."""
    import threading

    root, _ = store
    stop = threading.Event()
    lines = _hdfs_lines(200)
    with MessageStore(root, _cfg()) as s:

        def produce():
            while not stop.is_set():
                s.put_messages([Message("HDFS", line, keys="live") for line in lines])

        t = threading.Thread(target=produce)
        t.start()
        try:
            for _ in range(2):
                r = _verify(root, conf)
                assert "ERROR" not in r.stdout
        finally:
            stop.set()
            t.join()
    assert "OK: no errors, 0 warnings" in _verify(root, conf).stdout


def test_verify_delayed_transactional_and_long_topic_records(tmp_path):
    """tagsCode = deliver time for SCHEDULE_TOPIC_XXXX; prepared/rollback records have no unit;
    a 127-character topic (the longest TopicValidator allows)."""
    from rmqfs.engine.tools.verify import verify_store

    root = tmp_path / "s"
    long_topic = "L" * 127
    with MessageStore(root, _cfg()) as s:
        s.create_topic("SCHEDULE_TOPIC_XXXX", 18)
        s.create_topic("Tx", 1)
        s.create_topic(long_topic, 1)
        # as the broker's schedule service writes it
        put_internal(
            s,
            [
                Message(
                    "SCHEDULE_TOPIC_XXXX",
                    b"later",
                    queue_id=2,
                    properties={"DELAY": "3", "REAL_TOPIC": "Tx", "REAL_QID": "0"},
                )
            ],
        )
        s.put_messages(
            [
                Message("Tx", b"prepared", sys_flag=0x4),
                Message("Tx", b"commit", sys_flag=0x8),
                Message("Tx", b"rollback", sys_flag=0xC),
            ]
        )
        s.put_messages([Message(long_topic, b"long", tags="T")])
    res = verify_store(str(root), _cfg())
    assert res.ok and not res.problems, [str(p) for p in res.problems]
    assert (res.records, res.units) == (5, 3)
    cq = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2" / "00000000000000000000"
    off, _size, tc = UNIT.unpack_from(cq.read_bytes(), 0)
    with open(cq, "r+b") as f:  # a wrong deliver time is caught
        f.seek(12)
        f.write(struct.pack(">q", tc + 1))
    res = verify_store(str(root), _cfg())
    assert [str(p) for p in res.errors] == [
        f"ERROR   consumequeue/SCHEDULE_TOPIC_XXXX/2/{cq.name} @ 0: unit at CommitLog offset "
        f"{off}: tagsCode {tc + 1} != {tc}"
    ]


def test_recover_writes_a_checkpoint_that_vouches_for_the_data(store, conf):
    from rmqfs.engine.format.checkpoint import StoreCheckpoint

    root, res = store
    (root / "checkpoint").write_bytes(b"short")
    (root / "abort").write_text("12345")
    r = _verify(root, conf, rc=1)
    assert "ERROR   checkpoint: " in r.stdout and "WARNING abort: " in r.stdout
    run_rmqfs("recover", root, "--config", conf)
    assert "OK: no errors, 0 warnings" in _verify(root, conf).stdout
    cp = StoreCheckpoint.read(str(root / "checkpoint"))
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == res[-1].store_timestamp
    assert cp.confirm_phy_offset == res[-1].commitlog_offset + res[-1].size
    assert 0 < cp.index_msg_timestamp <= res[-1].store_timestamp
    assert not (root / "abort").exists()


def _flip_bit(data, bit_from_msb: int, value_at: int = 0) -> None:
    """Flip one bit of the long at ``value_at`` so that its value grows (or, for the sign
    bit, turns negative): a clear bit is set; a set one is left and the next clear one set."""
    v = int.from_bytes(data[value_at : value_at + 8], "big")
    bit = 63 - bit_from_msb
    while v >> bit & 1:
        bit -= 1
    data[value_at : value_at + 8] = (v | 1 << bit).to_bytes(8, "big")


@pytest.mark.parametrize(
    "case", ["sign", "byte 2", "logics byte 1", "index byte 3", "byte 4", "zeroed byte 2"]
)
def test_a_checkpoint_with_flipped_bytes_is_damaged_and_recover_rewrites_it(store, conf, case):
    """Issue 15 item 5c: the checkpoint has no CRC; a flipped bit makes a timestamp negative,
    years in the future or days after the last record (byte 4: at least 2^24 ms, 4.7 hours):
    verify reports an error (recovery would trust it). A byte cleared makes it years older:
    a warning (recovery only scans more). recover rewrites it from the CommitLog's last
    record either way, and verify is OK again."""
    from rmqfs.engine.format.checkpoint import StoreCheckpoint

    root, res = store
    path = root / "checkpoint"
    data = bytearray(path.read_bytes())
    error = True
    if case == "sign":
        data[0] |= 0x80
    elif case == "zeroed byte 2":
        data[2], error = 0, False
    else:
        field, byte = {
            "byte 2": (0, 2),
            "logics byte 1": (8, 1),
            "index byte 3": (16, 3),
            "byte 4": (0, 4),
        }[case]
        _flip_bit(data, 8 * byte, field)
    path.write_bytes(bytes(data))
    r = _verify(root, conf, rc=1 if error else 0)
    level = "ERROR  " if error else "WARNING"
    assert f"{level} checkpoint: " in r.stdout and "damaged" in r.stdout, r.stdout
    out = run_rmqfs("recover", root, "--config", conf).stdout
    assert "OK: no errors, 0 warnings" in _verify(root, conf).stdout, out
    cp = StoreCheckpoint.read(str(path))
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == res[-1].store_timestamp
    assert 0 < cp.index_msg_timestamp <= res[-1].store_timestamp


def test_checkpoint_plausibility_rules():
    from rmqfs.engine.format.checkpoint import FUTURE_MARGIN_MS, StoreCheckpoint

    now, first, last = 1_700_000_000_000, 1_600_000_000_000, 1_650_000_000_000
    ok = StoreCheckpoint(last, last, last - 5)
    assert ok.problems(first, last, now) == []
    assert StoreCheckpoint().problems(first, last, now) == []  # nothing flushed yet
    assert StoreCheckpoint(last + 10).problems(first, last, now) == []  # within a second
    assert [s for s, _ in StoreCheckpoint(last + 5000).problems(first, last, now)] == ["error"]
    assert StoreCheckpoint(last + 5000).problems(first, last, now, live=True) == []
    assert [s for s, _ in StoreCheckpoint(-1).problems(first, last, now)] == ["error"]
    far = StoreCheckpoint(0, 0, now + 2 * FUTURE_MARGIN_MS)
    assert [s for s, _ in far.problems(0, 0, now)] == ["error"]  # no record: the clock
    old = StoreCheckpoint(first - 3 * FUTURE_MARGIN_MS)
    assert [s for s, _ in old.problems(first, last, now)] == ["warning"]
    assert [s for s, _ in StoreCheckpoint(confirm_phy_offset=-5).problems(first, last, now)] == [
        "error"
    ]


def test_cut_single_segment_with_broker_conf(store, conf, tmp_path):
    """One CommitLog file: only a broker.conf tells its real size; recover restores it."""
    root = tmp_path / "one"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 1)
        res = s.put_messages([Message("T", b"x" * 100) for _ in range(50)])
    seg = root / "commitlog" / f"{0:020d}"
    os.truncate(seg, res[30].commitlog_offset + 7)
    r = _verify(root, conf, rc=1)
    assert (
        f"ERROR   commitlog/{seg.name}: {res[30].commitlog_offset + 7} bytes, "
        f"mappedFileSizeCommitLog is {SEG} bytes (cut short)"
    ) in r.stdout.splitlines()
    run_rmqfs("recover", root, "--config", conf)
    assert os.path.getsize(seg) == SEG
    v = _verify(root, conf)
    assert f"30 records, offsets [0, {res[30].commitlog_offset})" in v.stdout


def test_zeros_inside_the_last_file_then_data(store, conf):
    """A page that never reached the disk, with later pages that did: the broker cuts at the
    zeros; recover does too and keeps a copy of the file."""
    root, res = store
    hole = res[-20]
    seg = _seg_path(root, hole.commitlog_offset)
    with open(seg, "r+b") as f:
        f.seek(hole.commitlog_offset % SEG)
        f.write(bytes(3 * hole.size))
    r = _verify(root, conf, rc=1)
    assert (
        f"ERROR   commitlog/{seg.name} @ {hole.commitlog_offset}: zeros, then non-zero "
        "bytes before the end of the file"
    ) in r.stdout.splitlines()
    rec = run_rmqfs("recover", root, "--config", conf)
    assert "0 valid records and other data after the damage" in rec.stdout
    assert "OK: no errors, 0 warnings" in _verify(root, conf).stdout
    assert len(list((root / "lost+found").glob("*/commitlog/*"))) == 1


def test_truncated_consume_queue_file(tmp_path):
    """A ConsumeQueue file cut short: the store cannot even open (files of different sizes);
    recover rebuilds the queue byte for byte as the broker wrote it."""
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    qdir = root / "consumequeue" / "OracleTopicB" / "2"
    original = {p.name: p.read_bytes() for p in qdir.iterdir()}
    files = sorted(qdir.iterdir())
    os.truncate(files[-1], 150)
    r = _verify(root, rc=1)
    assert (
        "ERROR   consumequeue/OracleTopicB/2: files of sizes [150, 160]: all must be equal "
        "multiples of 20"
    ) in r.stdout.splitlines()
    run_rmqfs("recover", root)
    assert "OK: no errors, 0 warnings" in _verify(root).stdout
    assert {p.name: p.read_bytes() for p in qdir.iterdir()} == original


# ----------------------------------------------------------------------------------------------
# verify_store / recover_store on 8 KiB segments (moved from test_store_hardening.py unchanged)


def test_verify_reports_empty_and_short_segments_and_recover_repairs(tmp_path):
    root = tmp_path / "store"
    produce(root, 120, queue_id=0)
    cl = sorted((root / "commitlog").iterdir())
    nxt = int(cl[-1].name) + SMALL["mapped_file_size_commit_log"]
    (root / "commitlog" / f"{nxt:020d}").write_bytes(b"")  # crash before sizing (old code)
    qdir = root / "consumequeue" / "T" / "0"
    files = sorted(qdir.iterdir())
    assert len(files) >= 3
    os.truncate(files[-1], 100)  # a short ConsumeQueue file
    res = verify_store(str(root), small())
    kinds = {(p.kind, p.severity) for p in res.problems}
    assert ("commitlog-size", "error") in kinds and ("cq-size", "error") in kinds, res.problems
    rep = recover_store(str(root), small())
    assert rep.after.ok, [str(p) for p in rep.after.errors]
    assert not (root / "commitlog" / f"{nxt:020d}").exists()
    assert {f.stat().st_size for f in qdir.iterdir()} == {SMALL["mapped_file_size_consume_queue"]}
    assert len(bodies(root)) == 120


def test_a_missing_first_consumequeue_file_is_found_and_rebuilt(tmp_path):
    """Found by the damage fuzz: a deleted head file made messages unconsumable, verify OK."""
    root = tmp_path / "store"
    produce(root, 40, queue_id=0)
    qdir = root / "consumequeue" / "T" / "0"
    os.unlink(sorted(qdir.iterdir())[0])
    res = verify_store(str(root), small())
    assert [p.kind for p in res.errors] == ["cq-missing"], res.problems
    assert recover_store(str(root), small()).after.ok
    assert len(bodies(root)) == 40


# ----------------------------------------------------------------------------------------------
# the one __CRC32# check: engine.format.message.prop_crc_status, called by decode_record (and so by
# verify, which has no copy of its own)


def _host(port):
    import socket

    return (socket.inet_aton("127.0.0.1"), port)


def _record(append_prop_crc=True):
    """One encoded record (offsets patched), with its __CRC32# trailer filled when asked."""
    from rmqfs.engine.format.message import encode_message, patch_record, write_prop_crc

    enc = encode_message(
        "T",
        b"body",
        queue_id=0,
        properties={"a": "1", "UNIQ_KEY": "U" * 32},
        born_timestamp=1,
        born_host=_host(1),
        store_host=_host(2),
        append_prop_crc=append_prop_crc,
    )
    buf = enc.data
    patch_record(buf, 0, enc.store_timestamp_pos, 0, 0, 2)
    if append_prop_crc:
        write_prop_crc(buf, 0, len(buf))
    return buf


def test_prop_crc_status_good_flipped_digit_missing_end_and_absent():
    from rmqfs.engine.errors import CorruptRecordError
    from rmqfs.engine.format.message import decode_record, prop_crc_status

    good = _record()
    assert bytes(good[-20:-11]) == b"__CRC32#\x01" and good[-1] == 2
    assert prop_crc_status(good, 0, len(good)) is True
    assert decode_record(good, check_crc=True, force_verify_prop_crc=True).properties["a"] == "1"
    flipped = bytearray(good)
    flipped[-5] = ord("0") + (flipped[-5] - ord("0") + 1) % 10  # another digit
    no_end = bytearray(good)
    no_end[-1] = ord("0")  # the trailer's \x02 is gone
    letter = bytearray(good)
    letter[-2] = ord("x")
    for bad in (flipped, no_end, letter):
        assert prop_crc_status(bad, 0, len(bad)) is False
        with pytest.raises(CorruptRecordError, match="__CRC32# property mismatch"):
            decode_record(bad, check_crc=True)
        decode_record(bad, check_crc=False)  # the check belongs to check_crc
    plain = _record(append_prop_crc=False)
    assert prop_crc_status(plain, 0, len(plain)) is None
    decode_record(plain, check_crc=True)
    with pytest.raises(CorruptRecordError, match="__CRC32# property missing"):
        decode_record(plain, check_crc=True, force_verify_prop_crc=True)
    # the trailer is checked at any position of a buffer, over that record only
    two = bytes(plain) + bytes(good)
    assert prop_crc_status(two, len(plain), len(good)) is True


def test_verify_checks_the_crc32_trailer_through_the_decoder(tmp_path, monkeypatch):
    """A store written with enabledAppendPropCRC: verify passes, goes through the decoder's
    prop_crc_status for every record, and names the record whose trailer was damaged (a digit
    changed, the closing \\x02 gone)."""
    import rmqfs.engine.format.message as message

    cfg = StoreConfig(
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
        enabled_append_prop_crc=True,
    )
    root = tmp_path / "s"
    with MessageStore(root, cfg) as s:
        s.create_topic("T", 1)
        res = s.put_messages(
            [Message("T", f"body{i}".encode(), properties={"a": str(i)}) for i in range(5)]
        )
    calls = []
    real = message.prop_crc_status
    monkeypatch.setattr(
        message,
        "prop_crc_status",
        lambda buf, pos, total: calls.append(pos) or real(buf, pos, total),
    )
    assert verify_store(str(root), cfg).ok
    assert calls == [r.commitlog_offset for r in res]  # one segment: position = offset
    monkeypatch.undo()
    seg = _seg_path(root, 0)
    last = res[-1]
    end = last.commitlog_offset + last.size
    original = seg.read_bytes()
    assert original[end - 20 : end - 11] == b"__CRC32#\x01"
    digit = original[end - 6]
    for at, byte in ((end - 6, ord("0") + (digit - ord("0") + 1) % 10), (end - 1, ord("7"))):
        damaged = bytearray(original)
        damaged[at] = byte
        seg.write_bytes(bytes(damaged))
        r = verify_store(str(root), cfg)
        e = r.errors[0]  # (then the unit and index items of the record: past the end)
        assert (e.path, e.offset, e.what) == (
            f"commitlog/{seg.name}",
            last.commitlog_offset,
            "__CRC32# property mismatch",
        )
        assert r.first_bad == last.commitlog_offset
    seg.write_bytes(original)
    assert verify_store(str(root), cfg).ok


def test_verify_and_the_store_share_the_deliver_time_rule(tmp_path):
    """SCHEDULE_TOPIC_XXXX units carry the deliver time only for a DELAY level that is a
    non-zero number (engine.format.consumequeue.deliver_tags_code); DELAY "0" or "soon" keeps the tag
    hash, in the store's dispatch and in verify alike (verify used to expect a deliver time)."""
    from rmqfs.engine.format.consumequeue import deliver_tags_code
    from rmqfs.engine.format.javahash import tags_code

    levels = {1: 1000, 2: 5000, 3: 10000}
    assert deliver_tags_code("2", 100, levels) == 5100
    assert deliver_tags_code("99", 100, levels) == 10100  # capped at the highest level
    assert deliver_tags_code("2", 100, {}) == 1100  # no delay known: 1 s
    assert [deliver_tags_code(d, 100, levels) for d in (None, "", "0", "soon")] == [None] * 4
    root = tmp_path / "s"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("SCHEDULE_TOPIC_XXXX", 18)
        res = put_internal(
            s,
            [
                Message(
                    "SCHEDULE_TOPIC_XXXX",
                    b"x",
                    queue_id=0,
                    tags="TagA",
                    properties={"DELAY": d, "REAL_TOPIC": "T", "REAL_QID": "0"},
                )
                for d in ("0", "soon", "3")
            ],
        )
    res_v = verify_store(str(root), _cfg())
    assert res_v.ok and not res_v.problems, [str(p) for p in res_v.problems]
    cq = (root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "0" / "00000000000000000000").read_bytes()
    units = [UNIT.unpack_from(cq, 20 * i) for i in range(3)]
    delay3 = _cfg().delay_level_table()[3]
    assert [u[2] for u in units] == [
        tags_code("TagA"),
        tags_code("TagA"),
        res[2].store_timestamp + delay3,
    ]


@pytest.mark.parametrize("entry", ["symlink", "fifo"])
def test_verify_advice_matches_what_recover_does_for_links_and_special_files(
    store, conf, tmp_path, entry
):
    """Issue 15 item 5d: verify told the user to run recover, which refuses a store holding
    a link or a special file. verify now says what to do by hand instead, and recover refuses
    as before (changing nothing)."""
    root, _ = store
    if entry == "symlink":
        (tmp_path / "elsewhere").write_text("x")
        os.symlink(tmp_path / "elsewhere", root / "config" / "extra.json")
    else:
        os.mkfifo(root / "consumequeue" / "pipe")
    r = _verify(root, conf, rc=1)
    assert "recover repairs" not in r.stdout, r.stdout
    assert "BY HAND: " in r.stdout and "rmqfs recover refuses" in r.stdout
    assert "replace each link" in r.stdout and "remove FIFOs" in r.stdout
    js = json.loads(run_rmqfs("verify", root, "--config", conf, "--json", check=False).stdout)
    assert js["byHand"] and "rmqfs recover refuses" in js["byHand"][0]
    rec = run_rmqfs("recover", root, "--config", conf, check=False)
    assert rec.returncode != 0 and ("extra.json" in rec.stderr or "pipe" in rec.stderr)


def test_verify_advice_for_a_commitlog_gap_is_by_hand(store, conf):
    """A CommitLog file missing between others: recover refuses, verify says so."""
    root, _ = store
    os.unlink(_seg_path(root, SEG))
    r = _verify(root, conf, rc=1)
    assert (
        "recover repairs" not in r.stdout and "BY HAND: a CommitLog file is missing" in r.stdout
    ), r.stdout
    assert run_rmqfs("recover", root, "--config", conf, check=False).returncode != 0


def test_recover_rebuild_rebuilds_a_healthy_store(tmp_path):
    """Issue 22, section 3: `rmqfs recover --rebuild` on a healthy store printed "nothing to
    repair" and rebuilt nothing, against its help text; it now rebuilds every ConsumeQueue and
    IndexFile from the CommitLog, to the same units, and verifies clean."""
    root = tmp_path / "s"
    with MessageStore(str(root), small()) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"m%d" % i, keys=[f"k{i}"]) for i in range(40)])

    def units():
        return {
            p.relative_to(root): p.read_bytes()
            for p in (root / "consumequeue").rglob("0" * 20)
            if p.is_file()
        }

    before = units()
    assert before
    rep = recover_store(str(root), small(), rebuild=True)
    assert "nothing to repair" not in rep.actions
    assert any("consumequeue/T/0" in a and "rebuilt" in a for a in rep.actions), rep.actions
    assert any(a.startswith("deleted index/") for a in rep.actions), rep.actions
    assert rep.after.ok
    assert units() == before
    with MessageStore(str(root), small(), read_only=True) as s:
        assert [r.body for r in s.query_by_key("T", "k7")] == [b"m7"]


def _tree_sums(root) -> dict:
    """Every file under ``root`` and its bytes' digest (what a refusal must leave as it was)."""
    import hashlib

    return {
        p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(
    "line", ["storeType=defaultRocksDB", "enableDLegerCommitLog=true", "enableControllerMode=true"]
)
@pytest.mark.parametrize("rebuild", [False, True])
def test_recover_refuses_a_broker_conf_it_cannot_honour_before_touching_anything(
    tmp_path, line, rebuild
):
    """A broker.conf saying the broker expects another kind of store refused `recover` only
    when it reopened the store, after the ConsumeQueues and IndexFiles were deleted (and the
    checkpoint rewritten, an abort file made); with the store's own sizes in the conf a plain
    recover said "nothing to repair". It is refused first now, every file as it was."""
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"{line}\nmappedFileSizeCommitLog={ORACLE_SEG}\nmappedFileSizeConsumeQueue=160\n"
        "maxHashSlotNum=32\nmaxIndexNum=128\n"
    )
    before = _tree_sums(root)
    args = ("recover", root, "--config", conf) + (("--rebuild",) if rebuild else ())
    r = run_rmqfs(*args, check=False)
    assert r.returncode == 1, r
    assert line.split("=")[0] in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert _tree_sums(root) == before


def test_recover_rebuild_without_a_config_keeps_the_store_s_file_sizes(tmp_path):
    """Without --config, the ConsumeQueue and IndexFiles `recover --rebuild` makes take the
    sizes of those it replaces (160-byte queues, 32/128 index geometry), not StoreConfig's
    6,000,000-byte and 5,000,000-slot defaults that a broker configured as the store refuses."""
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    rep = recover_store(str(root), rebuild=True)
    assert rep.after.ok, rep.after.problems
    sizes = {p.stat().st_size for p in (root / "consumequeue").rglob("0*") if p.is_file()}
    assert sizes == {160}, sizes
    index = [p.stat().st_size for p in (root / "index").iterdir()]
    assert index and set(index) == {40 + 32 * 4 + 128 * 20}, index


def _damage_timer(root, case: str) -> None:
    import struct

    if case == "wheel":
        os.truncate(root / "timerwheel", 1_000_000)
    elif case == "log-cut":
        os.truncate(sorted((root / "timerlog").iterdir())[-1], 1000)
    elif case == "log-missing":
        sorted((root / "timerlog").iterdir())[1].unlink()
    elif case == "check":
        os.truncate(root / "config" / "timercheck", 20)
    elif case == "unit":
        log = sorted((root / "timerlog").iterdir())[0]
        data = bytearray(log.read_bytes())
        data[0:4] = struct.pack(">i", 99)  # the first unit's size: not a unit
        log.write_bytes(bytes(data))
    elif case == "record":  # the live head unit (at 156) names 1 byte into its record
        log = sorted((root / "timerlog").iterdir())[0]
        data = bytearray(log.read_bytes())
        (off,) = struct.unpack_from(">q", data, 156 + 28)
        struct.pack_into(">q", data, 156 + 28, off + 1)
        log.write_bytes(bytes(data))
    elif case == "empty-last-log":
        last = sorted((root / "timerlog").iterdir())[-1]
        (root / "timerlog" / f"{int(last.name) + last.stat().st_size:020d}").write_bytes(b"")
    elif case == "empty-wheel":
        os.truncate(root / "timerwheel", 0)
    elif case == "lastpos":
        wheel = root / "timerwheel"
        data = bytearray(wheel.read_bytes())
        for i in range(0, len(data), 32):
            tick, _first, last, _n, _m = struct.unpack_from(">qqqii", data, i)
            if last >= 0 and tick > 0:
                struct.pack_into(">q", data, i + 16, 10**6)
                break
        wheel.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "case, severity, what",
    [
        ("wheel", "ERROR", "a timer wheel is 38707200"),
        ("log-cut", "ERROR", "1000 bytes, the others 1664"),
        ("log-missing", "ERROR", "a timerlog file is missing before it"),
        ("check", "WARNING", "a timer checkpoint has 56: the broker reads the rest as zeros"),
        ("unit", "ERROR", "not a timerlog unit"),
        ("record", "ERROR", "no record of that size starts there"),
        ("lastpos", "WARNING", "start past the timerlog's end"),
        # what the broker takes as it is: an empty last timerlog file (MappedFileQueue.doLoad
        # deletes it), an empty timerwheel (TimerWheel makes a new one)
        ("empty-last-log", "OK", "OK: no errors, 0 warnings"),
        ("empty-wheel", "OK", "OK: no errors, 0 warnings"),
    ],
)
def test_verify_checks_the_timer_store_and_recover_leaves_it_alone(tmp_path, case, severity, what):
    """verify said OK of a cut timerwheel (which 5.3.3's TimerWheel refuses at load), a timerlog
    file cut short or missing, a bad timer checkpoint, a unit that is not one; now each is an
    error of kind timer, which recover does not repair (BY HAND: restore or move the three
    files), refusing with the store unchanged; a slot past the log's end is a warning."""
    root = copy_fixture("rocketmq-5.3.3-timer/store", tmp_path / "s")
    _damage_timer(root, case)
    r = run_rmqfs("verify", root, check=False)
    lines = [x for x in r.stdout.splitlines() if x.startswith(severity) and what in x]
    assert lines, r.stdout
    if severity in ("WARNING", "OK"):
        assert r.returncode == 0, r.stdout
        return
    assert r.returncode == 1 and "BY HAND: the timer store" in r.stdout, r.stdout
    before = _tree_sums(root)
    rec = run_rmqfs("recover", root, check=False)
    assert rec.returncode != 0 and "cannot repair" in rec.stderr, rec
    assert _tree_sums(root) == before


def test_verify_sends_an_oversized_commitlog_file_to_the_hand_not_to_recover(tmp_path):
    """A CommitLog file larger than the others: ``recover`` refuses it (it cannot tell which
    size the broker wrote), so ``verify`` says so with a BY HAND line instead of "rmqfs
    recover repairs them" (found by a review: verify promised a repair recover refused)."""
    root = tmp_path / "store"
    produce(root, 120, queue_id=0)
    cl = sorted((root / "commitlog").iterdir())
    assert len(cl) >= 2
    os.truncate(cl[0], SMALL["mapped_file_size_commit_log"] + 1)
    res = verify_store(str(root), small())
    assert ("commitlog-oversize", "error") in {(p.kind, p.severity) for p in res.problems}
    assert any("larger than the segment size" in line for line in res.by_hand())
    out = run_rmqfs("verify", root, check=False)
    assert out.returncode == 1 and "BY HAND: a CommitLog file larger" in out.stdout
    assert "recover repairs them" not in out.stdout
    r = run_rmqfs("recover", root, check=False)
    assert r.returncode == 1 and "cannot repair" in r.stderr


def test_index_check_holds_a_few_bytes_an_item(tmp_path):
    """From a scale review: verify held every IndexFile item as a tuple and every bucket's
    newest item in a dict (3.5 GB for 8 million items). The items stay the bytes read (20 a
    item), the buckets an int32 array of the file's slots: the check of 60,000 items (small
    geometry: 1,000 slots) holds under 60 bytes an item at its peak (tracemalloc; it held some
    200 before)."""
    import tracemalloc

    from rmqfs.engine.storeconfig import StoreConfig
    from rmqfs.engine.tools.verify.store import verify_store

    cfg = StoreConfig(max_hash_slot_num=1000, max_index_num=100_000)
    root = tmp_path / "s"
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 2)
        for i in range(0, 30_000, 1000):
            s.put_messages([Message("T", b"m", keys=f"k{j}") for j in range(i, i + 1000)])
    from rmqfs.engine.tools.verify import index as vindex

    real = vindex._check_index_file
    peaks = []

    def measured(*args):
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = real(*args)
        peaks.append(tracemalloc.get_traced_memory()[1] - before)
        return out

    tracemalloc.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(vindex, "_check_index_file", measured)
            res = verify_store(str(root), cfg)
    finally:
        tracemalloc.stop()
    assert res.ok and res.index_items == 60_000, res.problems
    assert len(peaks) == 1 and peaks[0] < 60 * 60_000, peaks
