"""The offline commands (mount/admin.py, engine/verify.py) through the real command line."""

import json
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, LOGHUB, REPO, copy_fixture, fuse, run_rmqfs
from engine.consumequeue import UNIT
from engine.store import Message, MessageStore, StoreConfig

SEG = 64 * 1024
FIXTURE_STORES = {
    "rocketmq-4.9.8-written": "rocketmq-4.9.8-written/store",
    "mxsm-rocketmq-rust": "mxsm-rocketmq-rust/store-v0.9.0/local-file",
    "apache-rocketmq-pr3535": "apache-rocketmq-pr3535/store",
    "gxstax-rocketmq": "gxstax-rocketmq/store",
    "liushangqing9803-rocketmq-tech": "liushangqing9803-rocketmq-tech/store",
}
ORACLE_SEG = 256 * 1024


def _cfg():
    return StoreConfig(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=100 * 20,
                       max_hash_slot_num=64, max_index_num=256)


@pytest.fixture
def conf(tmp_path):
    """broker.conf for the small stores (index geometry 64/256 cannot be guessed from sizes)."""
    p = tmp_path / "broker.conf"
    p.write_text("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\n"
                 "maxHashSlotNum=64\nmaxIndexNum=256\nbrokerName=broker-t\n")
    return p


def _hdfs_lines(n=1200):
    return (LOGHUB / "HDFS_2k.log").read_bytes().split(b"\n")[:n]


@pytest.fixture
def store(tmp_path):
    """A store of 1200 HDFS lines over several 64 KiB segments; returns (root, PutResults)."""
    root = tmp_path / "store"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("HDFS")
        res = s.put_messages([Message("HDFS", line, tags="TagA" if i % 3 == 0 else "TagB",
                                      keys=f"key{i} blk{i % 7}")
                              for i, line in enumerate(_hdfs_lines())])
    return root, res


def _verify(root, conf=None, rc=0):
    args = ["verify", root] + (["--config", conf] if conf else [])
    r = run_rmqfs(*args, check=False)
    assert r.returncode == rc, r.stdout + r.stderr
    return r


def _seg_path(root, offset, seg=SEG):
    return root / "commitlog" / f"{offset - offset % seg:020d}"


# ----------------------------------------------------------------------------------------------
# verify / recover

def test_verify_clean_store(store, conf):
    root, res = store
    end = res[-1].commitlog_offset + res[-1].size
    r = _verify(root, conf)
    nseg = end // SEG + 1
    assert r.stdout.splitlines() == [
        f"CommitLog:    {nseg} files of {SEG} bytes, 1200 records, offsets [0, {end})",
        "ConsumeQueue: 4 queues, 1200 units",
        f"IndexFile:    {-(-3600 // 255)} files, 3600 items",  # UNIQ_KEY + 2 keys, 255 a file
        "OK: no errors, 0 warnings"]
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
    assert (doc["ok"], doc["firstBadOffset"], doc["records"]) == \
        (False, bad.commitlog_offset, 1199)
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
    expected = [json.loads(line) for line in
                (FIXTURES / "rocketmq-4.9.8-written" / "expected.jsonl").read_text().splitlines()]
    last_seg = root / "commitlog" / "00000000000002097152"
    in_last = sorted(e["commitLogOffset"] for e in expected
                     if e["commitLogOffset"] >= 2097152)
    cut_at = in_last[1] + 10  # inside the second record of the last file
    os.truncate(last_seg, cut_at - 2097152)
    r = _verify(root, rc=1)
    assert (f"ERROR   commitlog/{last_seg.name}: {cut_at - 2097152} bytes, the other files are "
            f"{ORACLE_SEG} bytes (cut short)") in r.stdout.splitlines()
    rec = run_rmqfs("recover", root)
    assert f"extended commitlog/{last_seg.name} from {cut_at - 2097152} to {ORACLE_SEG}" \
        in rec.stdout
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
    off, size, tc = UNIT.unpack_from(original[first.name], 3 * 20)
    with open(first, "r+b") as f:
        f.seek(3 * 20 + 8)
        f.write(struct.pack(">i", size + 1))
    r = _verify(root, rc=1)
    q0 = int(first.name) // 20
    assert (f"ERROR   consumequeue/OracleTopicA/1/{first.name} @ {q0 + 3}: unit at CommitLog "
            f"offset {off}: size {size + 1} != record size {size}") in r.stdout.splitlines()
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
    assert (f"ERROR   consumequeue/HDFS/2/{cq.name} @ 5: unit ({other.commitlog_offset}, "
            f"{other.size}, 0) points at the record of HDFS/1 queue offset 0, not HDFS/2 queue "
            "offset 5") in r.stdout.splitlines()
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
    assert line.startswith(f"ERROR   index/{idx.name} @ {item}: item {item}: keyHash "
                           f"{key_hash ^ 0x5555} is not the hash of a key of the record at {phy}")
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


def test_clear_errors(tmp_path, store):
    r = run_rmqfs("verify", tmp_path / "nope", check=False)
    assert r.returncode == 1
    assert r.stderr == f"rmqfs: {tmp_path / 'nope'}: no such store directory\n"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.txt").write_text("x")
    r = run_rmqfs("recover", tmp_path / "empty", check=False)
    assert r.returncode == 1 and "not a RocketMQ store" in r.stderr
    root, _ = store
    r = run_rmqfs("print-msg", root, "-t", "Nope", check=False)
    assert r.returncode == 1 and r.stderr == "rmqfs: topic Nope does not exist (topics: HDFS)\n"
    r = run_rmqfs("query-msg", root, "-t", "HDFS", "-q", "0", "-o", "999", check=False)
    assert r.returncode == 1
    assert r.stderr == "rmqfs: offset 999 is not in HDFS/0: queue offsets are [0, 300)\n"
    r = run_rmqfs("print-msg", root, "-t", "HDFS", "-c", "bogus", check=False)
    assert r.returncode == 1 and r.stderr == "rmqfs: unknown charset bogus\n"
    r = run_rmqfs("print-msg", root, "-t", "HDFS", "-b", "yesterday", check=False)
    assert r.returncode == 1 and "bad time 'yesterday'" in r.stderr
    r = run_rmqfs("reset-offset", root, "-g", "G", "-t", "HDFS", "-o", "301", check=False)
    assert r.returncode == 1 and r.stderr == "rmqfs: offset 301 is outside [0, 300] of HDFS/0\n"


def test_locked_store(store, conf):
    """A running writer holds the lock: reading commands work, writing ones name its pid."""
    root, _ = store
    with MessageStore(root, _cfg()):
        v = _verify(root, conf)
        assert f"store in use by process {os.getpid()}" in v.stdout
        assert "OK: no errors" in v.stdout
        for args in (["recover", root], ["clean", root],
                     ["reset-offset", root, "-g", "G", "-t", "HDFS", "-s", "now"],
                     ["produce", root, "-t", "HDFS", os.devnull]):
            r = run_rmqfs(*args, check=False)
            assert r.returncode == 1
            assert f"is locked by process {os.getpid()}" in r.stderr, args
        assert run_rmqfs("topic-status", root, "-t", "HDFS").returncode == 0


# ----------------------------------------------------------------------------------------------
# produce / print / query

def test_produce_and_print(tmp_path):
    root = tmp_path / "new"
    r = run_rmqfs("produce", root, "-t", "Logs", os.devnull, check=False)
    assert r.returncode == 1 and "pass -c" in r.stderr and not root.exists()
    src = tmp_path / "in.txt"
    src.write_bytes(b"alpha\nbeta\n\ndelta\ngamma")  # an empty line (no message), no last \n
    r = run_rmqfs("produce", root, "-t", "Logs", "-c", "--queues", "2", src, "-a", "TagX",
                  "-k", "k1 k2")
    assert r.stdout.splitlines() == [
        "created topic Logs with 2 queues",
        "produced 4 messages to Logs (queue: count 0: 2, 1: 2), CommitLog "
        f"[0, {r.stdout.split('[0, ')[1].split(')')[0]})"]
    p = run_rmqfs("print-msg", root, "-t", "Logs", "--json")
    msgs = [json.loads(x) for x in p.stdout.splitlines()]
    assert [(m["queueId"], m["queueOffset"], m["body"]) for m in msgs] == \
        [(0, 0, "alpha"), (0, 1, "delta"), (1, 0, "beta"), (1, 1, "gamma")]
    assert all(m["tags"] == "TagX" and m["keys"] == ["k1", "k2"] for m in msgs)
    with MessageStore(root, read_only=True) as s:
        recs = [s.get_message("Logs", q, o) for q in (0, 1) for o in (0, 1)]
    lines = run_rmqfs("print-msg", root, "-t", "Logs", "-i", "1").stdout.splitlines()
    assert lines == [
        f"MSGID: {r.msg_id} topic=Logs queueId=1 queueOffset={r.queue_offset} "
        f"commitLogOffset={r.commitlog_offset} storeTimestamp={r.store_timestamp} tags=TagX "
        f"keys=k1 k2 UNIQ_KEY={r.uniq_key} BODY: {r.body.decode()}" for r in recs[2:]]
    nobody = run_rmqfs("print-msg", root, "-t", "Logs", "-i", "0", "-d", "false").stdout
    assert nobody.count("BODY: NOT PRINT BODY") == 2
    # stdin, a pinned queue and a property
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "mount.cli", "produce", str(root), "-t", "Logs",
                          "-i", "1", "--property", "src=stdin", "-v"], input=b"one\ntwo\n",
                         capture_output=True, env=env, check=True).stdout.decode().splitlines()
    assert [x.split()[2:] for x in out[:2]] == [["1", "2"], ["1", "3"]]
    with MessageStore(root, read_only=True) as s:
        assert s.get_message("Logs", 1, 3).properties["src"] == "stdin"
        assert s.get_message("Logs", 1, 3).body == b"two"
    assert "OK: no errors, 0 warnings" in _verify(root).stdout


def test_produce_a_loghub_file_matches_the_mount_contract(tmp_path):
    root = tmp_path / "s"
    log = LOGHUB / "HDFS_2k.log"
    run_rmqfs("produce", root, "-t", "HDFS", "-c", log)
    bodies = []
    with MessageStore(root, read_only=True) as s:
        for off in sorted(cq.unit(i)[0] for cq in s.consume_queues.values()
                          for i in range(cq.min_offset, cq.max_offset)):
            bodies.append(s.message_at(off).body)
    assert b"".join(b + b"\n" for b in bodies) == log.read_bytes()


def test_print_msg_time_range_and_tags(tmp_path):
    root = tmp_path / "s"
    batches = []
    with MessageStore(root) as s:
        s.create_topic("T", 2)
        for b in range(3):
            batches.append(s.put_messages([Message("T", f"b{b}m{i}".encode(),
                                                   tags=f"Tag{i % 3}") for i in range(6)]))
            time.sleep(0.02)
    t1, t2 = batches[1][0].store_timestamp, batches[2][0].store_timestamp
    out = run_rmqfs("print-msg", root, "-t", "T", "-b", t1, "-e", t2, "--json").stdout
    assert [json.loads(x)["body"] for x in out.splitlines()] == \
        ["b1m0", "b1m2", "b1m4", "b1m1", "b1m3", "b1m5"]
    human = time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(t1 // 1000)) + f":{t1 % 1000:03d}"
    out2 = run_rmqfs("print-msg", root, "-t", "T", "-b", human, "-e", t2, "--json").stdout
    assert out2 == out
    out = run_rmqfs("print-msg", root, "-t", "T", "-s", "Tag1 || Tag2", "-i", "1",
                    "--json").stdout
    assert [json.loads(x)["body"] for x in out.splitlines()] == \
        ["b0m1", "b0m5", "b1m1", "b1m5", "b2m1", "b2m5"]


def test_query_msg(store, conf):
    root, res = store
    r = res[10]  # keys "key10 blk3"
    out = run_rmqfs("query-msg", root, "-t", "HDFS", "-k", "key10", "--config", conf).stdout
    assert out.splitlines() == [
        f"{'#Message ID':<34} {'#UNIQ_KEY':<34} {'#QID':>4} {'#Offset':>10}",
        f"{r.msg_id:<34} {r.uniq_key:<34} {r.queue_id:>4} {r.queue_offset:>10}"]
    out = run_rmqfs("query-msg", root, "-t", "HDFS", "-k", "blk3", "-m", "5", "--json",
                    "--config", conf).stdout
    want = [x for i, x in enumerate(res) if i % 7 == 3][-5:][::-1]
    assert [json.loads(x)["commitLogOffset"] for x in out.splitlines()] == \
        [x.commitlog_offset for x in want]
    for ident in (r.msg_id, r.uniq_key):
        out = run_rmqfs("query-msg", root, "-i", ident, "--config", conf).stdout
        lines = out.splitlines()
        assert lines[0] == f"OffsetID:            {r.msg_id}"
        assert lines[1] == "Topic:               HDFS"
        assert f"Queue Offset:        {r.queue_offset}" in lines
        assert f"CommitLog Offset:    {r.commitlog_offset}" in lines
        assert lines[-1] == f"Message Body:        {_hdfs_lines()[10].decode().rstrip()}"
    out = run_rmqfs("query-msg", root, "-t", "HDFS", "-q", r.queue_id, "-o", r.queue_offset,
                    "--json", "--config", conf).stdout
    assert json.loads(out)["msgId"] == r.msg_id
    miss = run_rmqfs("query-msg", root, "-i", "0" * 32, "--config", conf, check=False)
    assert miss.returncode == 1 and "no message with msgId" in miss.stderr


# ----------------------------------------------------------------------------------------------
# topics, consumers, offsets

def test_topic_status_and_list(store, conf):
    root, res = store
    out = run_rmqfs("topic-status", root, "-t", "HDFS", "--config", conf).stdout.splitlines()
    from mount.admin import format_time
    assert out[0].split() == ["#Broker", "Name", "#QID", "#Min", "Offset", "#Max", "Offset",
                              "#Last", "Updated"]
    for q in range(4):
        last = max((x for x in res if x.queue_id == q), key=lambda x: x.queue_offset)
        assert out[1 + q] == (f"{'broker-t':<24} {q:>4} {0:>12} {300:>12} "
                              f"{format_time(last.store_timestamp)}")
    assert run_rmqfs("topic-list", root).stdout == "HDFS\n"


def test_consumer_progress_and_reset_offset(store, conf):
    root, res = store
    with MessageStore(root, _cfg()) as s:
        s.commit_offset("G1", "HDFS", 0, 100)
        s.commit_offset("G1", "HDFS", 2, 300)
        s.commit_offset("G2", "HDFS", 1, 5)
    out = run_rmqfs("consumer-progress", root, "--config", conf).stdout.splitlines()
    assert out == [f"{'#Group':<40} {'#Diff Total':>12}", f"{'G1':<40} {800:>12}",
                   f"{'G2':<40} {1195:>12}"]
    with MessageStore(root, _cfg()) as s:
        s.create_topic("Other", 1)
        s.commit_offset("G3", "Other", 0, 0)
    out = run_rmqfs("consumer-progress", root, "-t", "HDFS", "--config", conf).stdout
    assert "G3" not in out and "G1" in out
    out = run_rmqfs("consumer-progress", root, "-g", "G1", "--config", conf).stdout.splitlines()
    from mount.admin import format_time
    by_q = {(x.queue_id, x.queue_offset): x for x in res}
    rows = [(0, 100, by_q[(0, 99)].store_timestamp), (1, 0, 0), (2, 300,
                                                                 by_q[(2, 299)].store_timestamp),
            (3, 0, 0)]
    assert out[1:5] == [f"{'HDFS':<32} {'broker-t':<16} {q:>4} {300:>14} {c:>16} "
                        f"{300 - c:>10} {format_time(ts)}" for q, c, ts in rows]
    assert out[-1] == "Consume Diff Total: 800"
    r = run_rmqfs("consumer-progress", root, "-g", "nobody", check=False)
    assert r.returncode == 1 and "consumer group nobody does not exist" in r.stderr

    # by time: the first message stored at or after the 150th message of queue 0's time
    ts = by_q[(0, 150)].store_timestamp
    out = run_rmqfs("reset-offset", root, "-g", "G1", "-t", "HDFS", "-s", ts, "--config",
                    conf).stdout.splitlines()
    with MessageStore(root, _cfg(), read_only=True) as s:
        expect = {q: s.offset_by_time("HDFS", q, ts) for q in range(4)}
        got = {q: s.consumer_offsets.query("G1", "HDFS", q) for q in range(4)}
    assert got == expect and expect[0] <= 150
    assert out[1].split() == ["HDFS", "0", "100", str(expect[0])]
    assert out[2].split() == ["HDFS", "1", "-", str(expect[1])]
    # by offset, one queue; the file stays valid JSON and keeps the other group
    run_rmqfs("reset-offset", root, "-g", "G2", "-t", "HDFS", "-o", "7", "-q", "1")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["HDFS@G2"] == {"1": 7}
    assert doc["offsetTable"]["HDFS@G1"]["0"] == expect[0]
    # now: every queue to its max offset
    run_rmqfs("reset-offset", root, "-g", "G2", "-t", "HDFS", "-s", "now")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["HDFS@G2"] == {str(q): 300 for q in range(4)}


def test_clean_deletes_expired_files(store, conf):
    root, res = store
    segs = sorted((root / "commitlog").iterdir())
    old = time.time() - 100 * 3600
    for p in segs[:3]:
        os.utime(p, (old, old))
    r = run_rmqfs("clean", root, "--config", conf)
    lines = r.stdout.splitlines()
    assert lines[:3] == [f"deleted CommitLog commitlog/{p.name}" for p in segs[:3]]
    assert lines[-1].startswith(f"deleted {len(lines) - 1} files; CommitLog min offset 0 -> "
                                f"{3 * SEG} (fileReservedTime 72 h)")
    assert not any(p.exists() for p in segs[:3])
    v = _verify(root, conf)
    assert f"offsets [{3 * SEG}, " in v.stdout and "OK: no errors, 0 warnings" in v.stdout
    first_live = min(x.queue_offset for x in res
                     if x.queue_id == 0 and x.commitlog_offset >= 3 * SEG)
    out = run_rmqfs("topic-status", root, "-t", "HDFS", "--config", conf).stdout.splitlines()
    assert out[1].split()[2:4] == [str(first_live), "300"]
    again = run_rmqfs("clean", root, "--config", conf).stdout
    assert again.startswith("deleted 0 files")
    r = run_rmqfs("clean", root, "--config", conf, "--file-reserved-time", "0")
    assert f"deleted CommitLog commitlog/{segs[3].name}" in r.stdout
    assert f"commitlog/{segs[-1].name}" not in r.stdout  # never the last file


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
        res = s.put_messages([Message("T", f"body{i}".encode(), properties={
            **props, "UNIQ_KEY": f"{i:032X}", "__CRC32#": "0" * 10}) for i in range(10)],
            internal=True)  # the reserved names, as a broker's own put
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
    assert (f"ERROR   commitlog/{mid.name}: 1000 bytes, the other files are {ORACLE_SEG} bytes "
            "(cut short)") in r.stdout.splitlines()
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
    from engine.verify import verify_store
    root = tmp_path / "s"
    long_topic = "L" * 127
    with MessageStore(root, _cfg()) as s:
        s.create_topic("SCHEDULE_TOPIC_XXXX", 18)
        s.create_topic("Tx", 1)
        s.create_topic(long_topic, 1)
        s.put_messages([Message("SCHEDULE_TOPIC_XXXX", b"later", queue_id=2,
                                properties={"DELAY": "3", "REAL_TOPIC": "Tx", "REAL_QID": "0"})],
                       internal=True)  # as the broker's schedule service writes it
        s.put_messages([Message("Tx", b"prepared", sys_flag=0x4),
                        Message("Tx", b"commit", sys_flag=0x8),
                        Message("Tx", b"rollback", sys_flag=0xC)])
        s.put_messages([Message(long_topic, b"long", tags="T")])
    res = verify_store(str(root), _cfg())
    assert res.ok and not res.problems, [str(p) for p in res.problems]
    assert (res.records, res.units) == (5, 3)
    cq = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2" / "00000000000000000000"
    off, size, tc = UNIT.unpack_from(cq.read_bytes(), 0)
    with open(cq, "r+b") as f:  # a wrong deliver time is caught
        f.seek(12)
        f.write(struct.pack(">q", tc + 1))
    res = verify_store(str(root), _cfg())
    assert [str(p) for p in res.errors] == [
        f"ERROR   consumequeue/SCHEDULE_TOPIC_XXXX/2/{cq.name} @ 0: unit at CommitLog offset "
        f"{off}: tagsCode {tc + 1} != {tc}"]


def test_recover_writes_a_checkpoint_that_vouches_for_the_data(store, conf):
    from engine.checkpoint import StoreCheckpoint
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


def test_cut_single_segment_with_broker_conf(store, conf, tmp_path):
    """One CommitLog file: only a broker.conf tells its real size; recover restores it."""
    root = tmp_path / "one"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 1)
        res = s.put_messages([Message("T", b"x" * 100) for _ in range(50)])
    seg = root / "commitlog" / f"{0:020d}"
    os.truncate(seg, res[30].commitlog_offset + 7)
    r = _verify(root, conf, rc=1)
    assert (f"ERROR   commitlog/{seg.name}: {res[30].commitlog_offset + 7} bytes, "
            f"mappedFileSizeCommitLog is {SEG} bytes (cut short)") in r.stdout.splitlines()
    run_rmqfs("recover", root, "--config", conf)
    assert os.path.getsize(seg) == SEG
    v = _verify(root, conf)
    assert f"30 records, offsets [0, {res[30].commitlog_offset})" in v.stdout


def test_produce_stops_at_an_oversized_line(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"a\n" + b"x" * (4 * 1024 * 1024 + 1) + b"\nb\n")
    r = run_rmqfs("produce", tmp_path / "s", "-t", "T", "-c", src, check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("rmqfs: ") and "4194305" in r.stderr  # the engine's reason
    assert r.stderr.endswith("; 1 messages before lines 2..3 were produced, none after\n")
    with MessageStore(tmp_path / "s", read_only=True) as s:
        assert [rec.body for q in s.queue_ids("T") for _, rec in s.iter_queue("T", q)] == [b"a"]


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
    assert (f"ERROR   commitlog/{seg.name} @ {hole.commitlog_offset}: zeros, then non-zero "
            "bytes before the end of the file") in r.stdout.splitlines()
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
    assert ("ERROR   consumequeue/OracleTopicB/2: files of sizes [150, 160]: all must be equal "
            "multiples of 20") in r.stdout.splitlines()
    run_rmqfs("recover", root)
    assert "OK: no errors, 0 warnings" in _verify(root).stdout
    assert {p.name: p.read_bytes() for p in qdir.iterdir()} == original
