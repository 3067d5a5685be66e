"""Hostile stores whose cost grew with what a header claims, not with what the store holds
(issue 36, items 2, 11 and 13), through the real command line with each run's peak memory
(VmHWM of the command's own process)."""

import json
import os
import struct

from rmqfs.engine.format.message import MAGIC_V1
from rmqfs.engine.store import Message, MessageStore
from stores import run_measured

#: Runs ``rmqfs ARGS`` in the child, its stdout captured: exit status and output as JSON.
PEAK_CLI = r"""
import contextlib, io, json, sys
from rmqfs.mount.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "out": out.getvalue()}))
"""


def rmqfs_peak(*args) -> tuple[int, str, str, int]:
    """(exit status, stdout, stderr, peak RSS in MiB) of ``rmqfs ARGS``
    (:func:`stores.run_measured`)."""
    got, err = run_measured(PEAK_CLI, *args)
    return got["rc"], got["out"].rstrip("\n"), err, got["maxrss_kb"] >> 10


def claim_store(root, segment=1 << 30) -> int:
    """A store of 100 messages in T/0 (1 GiB segments by default), then, after the last record,
    a header claiming the rest of the sparse segment (``TOTALSIZE`` = what remains, magic
    V1): 84 KB on disk. Returns where the claim starts."""
    from rmqfs.engine.store import StoreConfig

    with MessageStore(root, StoreConfig(mapped_file_size_commit_log=segment)) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"m%d" % i) for i in range(100)])
        end = s.commitlog.max_offset
    seg = os.path.join(root, "commitlog", "00000000000000000000")
    with open(seg, "r+b") as f:
        f.seek(end)
        f.write(struct.pack(">iI", segment - end, MAGIC_V1))
    return end


def test_a_record_claiming_the_rest_of_a_sparse_segment_is_not_read(tmp_path):
    """Item 2: 84 KB on disk cost 1.06 GB on every open (``scan_raw`` read the claimed size
    whole before any check). Every command stays small, and the claim is named with its
    offset; recover cuts it, and nothing before it is lost."""
    root = tmp_path / "store"
    at = claim_store(root)
    assert os.stat(root / "commitlog" / "00000000000000000000").st_blocks * 512 < 1 << 20
    rc, out, _, peak = rmqfs_peak("topic-list", root)
    assert rc == 0 and out.split() == ["T"] and peak < 300, peak
    rc, out, _, peak = rmqfs_peak("print-msg", root, "-t", "T", "-i", "0", "-d", "false")
    assert rc == 0 and peak < 300, peak
    rc, out, _, peak = rmqfs_peak("verify", root)
    assert rc == 1 and f"@ {at}" in out and peak < 300, (out, peak)
    rc, out, err, peak = rmqfs_peak("recover", root)
    assert rc == 0 and peak < 300, (out, err, peak)
    assert "100 records, CommitLog [0, " in out
    with MessageStore(root, read_only=True) as s:
        assert [s.get_message("T", 0, i).body for i in range(100)] == [
            b"m%d" % i for i in range(100)
        ]


def test_the_claim_check_reads_a_large_real_record(tmp_path):
    """The bound only guards bytes never written: a record over maxMessageSize that is on
    disk (a broker configured with a larger maxMessageSize, read without its broker.conf)
    is read as before, never cut."""
    from rmqfs.engine.store import StoreConfig

    root = tmp_path / "store"
    big = os.urandom(6 << 20)
    cfg = StoreConfig(max_message_size=8 << 20, mapped_file_size_commit_log=64 << 20)
    with MessageStore(root, cfg) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"a"), Message("T", big), Message("T", b"z")])
    with MessageStore(root, StoreConfig(mapped_file_size_commit_log=64 << 20)) as s:
        got = [s.get_message("T", 0, i).body for i in range(3)]
    assert got == [b"a", big, b"z"]


def test_a_segment_named_past_the_largest_offset_is_refused_in_one_line(tmp_path):
    """Item 13: a CommitLog segment named past 2^63 (a Java long) gave ``struct.error``
    tracebacks from recover, left ``abort``, wrote a checkpoint with indexMsgTimestamp 2^62
    and never converged. Every command now names the file and changes nothing."""
    root = tmp_path / "store"
    with MessageStore(root) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"x")])
    cl = root / "commitlog"
    os.rename(cl / "00000000000000000000", cl / f"{1 << 63:020d}")
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    for args in (
        ("recover", root),
        ("topic-list", root),
        ("produce", root, "-t", "T", "--body", "y"),
    ):
        rc, out, err, _ = rmqfs_peak(*args)
        assert rc == 1, (args, out, err)
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert f"{1 << 63:020d}" in err and "largest offset RocketMQ addresses" in err, err
    rc, out, err, _ = rmqfs_peak("verify", root)
    assert rc == 1 and "largest offset RocketMQ addresses" in out and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()} == before


def test_a_4000_message_batch_record_reads_in_linear_time(tmp_path, monkeypatch):
    """Item 11: a legitimate 5.x batch record of 4,000 messages (BatchCQ) printed in 98 s and
    the mount's by-offset/N took 146 ms a message: each message read, CRC-checked and split
    the whole record again. Now each reader reads it once (engine.format.innerbatch
    InnerBatchCache); every reader gives the same 4,000 messages."""
    import time

    import bcqstore
    from rmqfs.engine.read.columnar import StoreFiles

    n = 4000
    batch = [(b"msg-%05d" % i, {"KEYS": f"k{i}"}) for i in range(n)]
    monkeypatch.setattr(bcqstore, "RECORDS", [b"first", batch, b"last"])
    root = tmp_path / "store"
    bcqstore.build_bcq_store(root)
    want = [b"first"] + [b for b, _ in batch] + [b"last"]

    t0 = time.monotonic()
    rc, out, err, peak = rmqfs_peak("print-msg", root, "-t", "B", "-i", "0", "--json")
    took = time.monotonic() - t0
    assert rc == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["queueOffset"] for x in lines] == list(range(n + 2))
    assert [x["body"] for x in lines[1:3]] == ["msg-00000", "msg-00001"]
    assert took < 20 and peak < 300, (took, peak)  # was 98 s

    with MessageStore(str(root), read_only=True) as s:
        t0 = time.monotonic()
        got = [s.get_message("B", 0, q).body for q in range(n + 2)]
        assert time.monotonic() - t0 < 5
        res = s.get_messages("G", "B", 0, 1, 32)  # getMessage: the same messages
        got_pull = [m.body for m in res.messages]
        assert got_pull and got_pull == want[1 : 1 + len(got_pull)]
    assert got == want
    sf = StoreFiles(str(root))
    t0 = time.monotonic()
    rows = [
        r.as_py()
        for b in sf.read_batches("B", 0, 0, n + 2, columns=("body",))
        for r in b.column("body")
    ]
    assert time.monotonic() - t0 < 5
    assert rows == want
