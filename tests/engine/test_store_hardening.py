"""Issue 9 (store side), without mounting: files created whole, no link followed, damaged
config files, queue-count limits, ENOSPC rollback, the ConsumeQueue cut at a file start,
and one damaged ConsumeQueue kept to its queue (short segments and a missing first
ConsumeQueue file in verify: test_verify.py)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import refreader
from conftest import REPO, SRC_PATH
from rmqfs.engine.errors import ConfigFileError, InvalidNameError, StoreError, UnsafeStoreError
from rmqfs.engine.format import config as C
from rmqfs.engine.format import mappedfile
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.tools.verify import recover_store, verify_store
from stores import bodies, flip_body_byte, produce, small


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ----------------------------------------------------------------------------------------------
# item 8: whole or nothing


def test_a_failed_creation_leaves_no_file(tmp_path, monkeypatch):
    def no_space(fd, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "ftruncate", no_space)
    with pytest.raises(OSError):
        mappedfile.create_preallocated(str(tmp_path / "00000000000000000000"), 4096)
    assert os.listdir(tmp_path) == []


def test_without_o_tmpfile_a_leftover_temp_file_is_removed_on_open(tmp_path, monkeypatch):
    real_open = os.open

    def no_tmpfile(path, flags, *a, **k):
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "not supported")
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", no_tmpfile)
    fd = mappedfile.create_preallocated(str(tmp_path / "00000000000000000000"), 4096)
    os.close(fd)
    assert os.listdir(tmp_path) == ["00000000000000000000"]
    monkeypatch.undo()
    root = tmp_path / "store"
    produce(root, 5)
    # a crash between creating and renaming the temp file
    (root / "commitlog" / "00000000000000008192.tmp").write_bytes(b"")
    (root / "config" / "topics.json.tmp").write_bytes(b"{")
    produce(root, 1, tag="n")
    assert not list(root.rglob("*.tmp"))


# ----------------------------------------------------------------------------------------------
# item 9: the cut at the start of a ConsumeQueue file deletes the file


def test_cut_at_a_consumequeue_file_start_deletes_that_file(tmp_path):
    root = tmp_path / "store"
    produce(root, 16, queue_id=0)  # exactly one full 16-unit ConsumeQueue file
    produce(root, 1, queue_id=0, tag="x")  # the 17th opens the second file
    qdir = root / "consumequeue" / "T" / "0"
    assert len(list(qdir.iterdir())) == 2
    recs = refreader.read_commitlog(root / "commitlog")
    last = recs[-1]
    seg = next(
        s
        for s in refreader.list_segments(root / "commitlog")
        if s[0] <= last["physicalOffset"] < s[0] + s[2]
    )
    with open(seg[1], "r+b") as f:  # the last record torn: recovery cuts exactly there
        f.seek(last["physicalOffset"] - seg[0])
        f.write(bytes(last["totalSize"]))
    (root / "abort").write_text("1")
    with MessageStore(str(root), small()) as s:
        assert s.max_offset("T", 0) == 16
    # as ConsumeQueue.truncateDirtyLogicFiles: no all-zero file a broker would count
    assert [f.name for f in sorted(qdir.iterdir())] == ["00000000000000000000"]
    assert refreader.read_consumequeue(root, "T", 0)[-1][0] == recs[-2]["physicalOffset"]
    assert verify_store(str(root), small()).ok


# ----------------------------------------------------------------------------------------------
# item 6: links and special files


@pytest.mark.parametrize("where", ["segment", "cq-dir", "config", "top"])
def test_a_store_with_a_link_is_refused_and_the_target_untouched(tmp_path, where):
    root = tmp_path / "store"
    produce(root, 40)
    outside = tmp_path / "secret"
    outside.write_bytes(b"do not read or write me\n" * 400)
    before = sha(outside)
    if where == "segment":
        seg = sorted((root / "commitlog").iterdir())[-1]
        os.unlink(seg)
        os.symlink(outside, seg)
    elif where == "cq-dir":
        (root / "consumequeue" / "L").symlink_to(tmp_path, target_is_directory=True)
    elif where == "config":
        p = root / "config" / "topics.json"
        os.unlink(p)
        os.symlink(outside, p)
    else:
        (root / "x").symlink_to(outside)
    with pytest.raises(UnsafeStoreError) as info:
        MessageStore(str(root), small())
    assert "symbolic link" in str(info.value)
    with pytest.raises(UnsafeStoreError):
        MessageStore(str(root), small(), read_only=True)
    with pytest.raises(UnsafeStoreError):  # the lock-free reader (Spark's executors)
        StoreFiles(str(root))
    res = verify_store(str(root), small())
    assert not res.ok and {p.kind for p in res.errors} == {"unsafe"}
    with pytest.raises(UnsafeStoreError):
        recover_store(str(root), small())
    assert sha(outside) == before


def test_a_linked_segment_is_never_read_through_the_segment_files(tmp_path):
    """Below the store's tree check, the segment-file class itself never follows a link: a
    segment replaced by a link to a file outside reads as an error (ELOOP), not as the
    outside file's bytes (``MappedFiles.open_file``: O_NOFOLLOW)."""
    import errno

    from rmqfs.engine.format.mappedfile import MappedFiles

    root = tmp_path / "store"
    produce(root, 40)
    outside = tmp_path / "secret"
    outside.write_bytes(b"do not read or write me\n" * 400)
    seg = sorted((root / "commitlog").iterdir())[-1]
    size = seg.stat().st_size
    start = int(seg.name)
    os.unlink(seg)
    outside.write_bytes(outside.read_bytes()[:size].ljust(size, b"x"))
    os.symlink(outside, seg)
    files = MappedFiles(str(root / "commitlog"))
    try:
        with pytest.raises(OSError) as info:
            files.file_view(start)
        assert info.value.errno == errno.ELOOP
        try:
            got = files.locate(start)
        except OSError as exc:
            assert exc.errno == errno.ELOOP
        else:
            assert got is None
    finally:
        files.close()


def test_a_fifo_in_the_store_is_refused_without_hanging(tmp_path):
    root = tmp_path / "store"
    produce(root, 3)
    os.mkfifo(root / "config" / "consumerOffset.json")
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from engine.store import MessageStore\n"
        "try:\n    MessageStore(%r)\nexcept Exception as e:\n    print(type(e).__name__)\n"
        % (str(REPO), str(root))
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "UnsafeStoreError", out.stderr


# ----------------------------------------------------------------------------------------------
# item 11: damaged config files


def _with_bak(root):
    """A store whose consumerOffset.json has a .bak (two commits)."""
    produce(root, 10, queue_id=0)
    with MessageStore(str(root), small()) as s:
        s.commit_offset("g", "T", 0, 3)
        s.commit_offset("g", "T", 0, 5)
    return root / "config" / "consumerOffset.json"


def test_a_stray_byte_falls_back_to_the_bak_as_the_broker_does(tmp_path):
    root = tmp_path / "store"
    path = _with_bak(root)
    with open(path, "ab") as f:
        f.write(b"\xff")
    res = verify_store(str(root), small())
    assert res.ok
    warn = [p for p in res.warnings if p.kind == "config"]
    assert warn and "consumerOffset.json" in warn[0].what and ".bak" in warn[0].what
    with MessageStore(str(root), small()) as s:
        assert s.consumer_offsets.query("g", "T", 0) == 3  # the .bak's value
    assert recover_store(str(root), small()).after.ok


@pytest.mark.parametrize(
    "content,reason",
    [
        (b'{"offsetTable":5}', "offsetTable is a int"),
        (b'{"offsetTable":{"T@g":{"0":"12"}}}', "not an integer"),
        (b'{"offsetTable":{"T@g":{"x":1}}}', "queue id"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "top level"),
    ],
)
def test_an_unusable_config_file_fails_naming_file_and_reason(tmp_path, content, reason):
    root = tmp_path / "store"
    produce(root, 3)
    path = root / "config" / "consumerOffset.json"
    path.write_bytes(content)
    with pytest.raises(ConfigFileError) as info:
        MessageStore(str(root), small())
    assert str(path) in str(info.value) and reason in str(info.value)
    res = verify_store(str(root), small())
    assert [p for p in res.errors if p.kind == "config"], res.problems
    listing = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    with pytest.raises(ConfigFileError) as info:
        recover_store(str(root), small())
    assert "consumerOffset.json" in str(info.value)
    # recover changed nothing (no abort, no rewritten checkpoint)
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == listing


def test_bad_names_in_config_are_skipped_and_kept(tmp_path):
    """A broker loads every topic name (TopicConfigManager.decode,
    ConsumeQueueStore.loadConsumeQueues): only names unsafe as a path are skipped, each with
    its reason in skipped_topics() (status.json); skipped entries are written back as they were."""
    root = tmp_path / "store"
    produce(root, 3)
    sg = root / "config" / "subscriptionGroup.json"
    sg.write_text(
        json.dumps(
            {"subscriptionGroupTable": {"a/b": {"groupName": "a/b"}, "ok": {"groupName": "ok"}}}
        )
    )
    tp = root / "config" / "topics.json"
    raw = json.loads(tp.read_text())
    unsafe = {
        "a/b": "contains '/'",
        "": "empty name",
        "..": "'..' names a directory",
        "n\0ul": "contains NUL",
        "é" * 128: "256 bytes: a file name holds at most 255",
    }
    for name in [*unsafe, "bad\nname", "L" * 200]:
        raw["topicConfigTable"][name] = {"topicName": name, "readQueueNums": 1}
    tp.write_text(json.dumps(raw))
    (root / "consumequeue" / "bad name" / "0").mkdir(parents=True)
    os.makedirs(os.path.join(os.fsencode(root), b"consumequeue", b"\xff\xfe", b"0"))
    (root / "consumequeue" / "T" / "007").mkdir(parents=True)
    with MessageStore(str(root), small()) as s:
        assert s.group_names() == ["ok"]
        assert s.queue_ids("T") == [0, 1]
        # what a broker would load is shown, whatever the client's rule for creating it
        assert s.topic_names() == sorted(["T", "bad\nname", "bad name", "L" * 200])
        skipped = {d["topic"]: d["reason"] for d in s.skipped_topics()}
        assert set(skipped) == {*unsafe, "\udcff\udcfe"}
        for name, why in unsafe.items():
            assert skipped[name] == f"topics.json: {why}"
        assert skipped["\udcff\udcfe"] == "consumequeue/ directory: not UTF-8"
        s.create_group("new")
        s.create_topic("U")
        with pytest.raises(InvalidNameError):
            s.create_topic("L" * 128)  # creating keeps TopicValidator's 127
    # written back untouched, for the broker that wrote them
    assert "a/b" in json.loads(sg.read_text())["subscriptionGroupTable"]
    assert set(unsafe) | {"bad\nname", "U"} <= set(json.loads(tp.read_text())["topicConfigTable"])


# ----------------------------------------------------------------------------------------------
# item 12: queue counts


@pytest.mark.parametrize("n", [0, -5, 100_000_000, True, 1.5])
def test_queue_counts_are_validated(tmp_path, n):
    with MessageStore(str(tmp_path / "store"), small()) as s:
        with pytest.raises(InvalidNameError):
            s.create_topic("Q", n)
        assert "Q" not in s.topic_names()


def test_a_huge_queue_count_in_topics_json_costs_a_bounded_listing(tmp_path):
    root = tmp_path / "store"
    produce(root, 3)
    tp = root / "config" / "topics.json"
    raw = json.loads(tp.read_text())
    raw["topicConfigTable"]["T"]["readQueueNums"] = 100_000_000
    tp.write_text(json.dumps(raw))
    with MessageStore(str(root), small()) as s:
        assert len(s.queue_ids("T")) == C.MAX_QUEUE_NUMS


def test_produce_cli_validates_queues(tmp_path):
    for n in ("100000000", "-5", "0"):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "rmqfs.mount.cli",
                "produce",
                str(tmp_path / "s"),
                "-t",
                "T",
                "-c",
                "--queues",
                n,
            ],
            input="x\n",
            text=True,
            capture_output=True,
            cwd=REPO,
            timeout=60,
            env=dict(os.environ, PYTHONPATH=SRC_PATH),
        )
        assert res.returncode == 1 and "--queues" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


# ----------------------------------------------------------------------------------------------
# item 15: a failed config write leaves no trace in memory


def test_enospc_on_config_writes_rolls_back(tmp_path, monkeypatch):
    root = tmp_path / "store"
    produce(root, 10, queue_id=0)
    with MessageStore(str(root), small()) as s:
        s.commit_offset("g", "T", 0, 4)

        def full(path, obj, table=None):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(C, "persist_config_file", full)
        with pytest.raises(OSError):
            s.create_topic("G")
        with pytest.raises(OSError):
            s.create_group("newgroup")
        with pytest.raises(OSError):
            s.commit_offset("g", "T", 0, 7)
        with pytest.raises(OSError):
            s.commit_offset("h", "T", 0, 2)
        assert "G" not in s.topic_names()
        assert "newgroup" not in s.group_names() and "h" not in s.group_names()
        assert s.consumer_offsets.query("g", "T", 0) == 4
        monkeypatch.undo()
        s.commit_offset("g", "T", 0, 6)  # and the next write works
    with MessageStore(str(root), small()) as s:
        assert s.consumer_offsets.query("g", "T", 0) == 6
        assert "G" not in s.topic_names()


# ----------------------------------------------------------------------------------------------
# item 13: one damaged ConsumeQueue stays in its queue


def test_units_out_of_order_are_rebuilt_at_open(tmp_path):
    root = tmp_path / "store"
    produce(root, 40, queue_id=0)
    produce(root, 10, queue_id=1, tag="b")
    f = sorted((root / "consumequeue" / "T" / "0").iterdir())[1]
    with open(f, "r+b") as fh:  # unit 20: commitLogOffset with high bits flipped
        fh.seek(4 * 20)
        fh.write(b"\x00\x10")
    with MessageStore(str(root), small()) as s:
        assert any("consumequeue/T/0" in r for r in s.repairs)
    assert len(bodies(root)) == 50
    assert verify_store(str(root), small()).ok


def test_a_unit_pointing_at_no_record_fails_only_its_queue(tmp_path):
    root = tmp_path / "store"
    produce(root, 10, queue_id=0)
    produce(root, 10, queue_id=1, tag="b")
    f = sorted((root / "consumequeue" / "T" / "0").iterdir())[0]
    with open(f, "r+b") as fh:  # unit 3's size: 1 byte (order kept, no record read)
        fh.seek(3 * 20 + 8)
        fh.write((1).to_bytes(4, "big"))
    with MessageStore(str(root), small(), read_only=True) as s:
        assert [r.body for _, r in s.iter_queue("T", 1)] == [b"b%d" % i for i in range(10)]
        with pytest.raises(StoreError):
            list(s.iter_queue("T", 0))
        assert ("T", 0) in s.damaged and ("T", 1) not in s.damaged
    res = verify_store(str(root), small())
    assert any(p.path.startswith("consumequeue/T/0") for p in res.errors)
    assert recover_store(str(root), small()).after.ok
    assert len(bodies(root)) == 20


def test_a_body_crc_mismatch_is_never_served_and_is_noted(tmp_path, caplog):
    """Issue 15 item 5a: a record whose body does not match its BODYCRC (one flipped body
    bit, every other field intact) is never returned by any engine read (get_message,
    iter_queue, message_at, query_by_key, read_record, getMessage); it is noted in
    ``store.damaged`` with a reason naming its CommitLog offset and logged in one warning
    line; the other queue reads on (``MessageDecoder.decode(..., checkCRC=true)``)."""
    import logging

    from rmqfs.engine.errors import CorruptRecordError

    root = tmp_path / "store"
    produce(root, 6, queue_id=0)
    produce(root, 4, queue_id=1, tag="b")
    off = flip_body_byte(root, "T", 0, 3)
    caplog.set_level(logging.WARNING, logger="rmqfs.engine.store")
    with MessageStore(str(root), small(), read_only=True) as s:
        assert [r.body for _, r in s.iter_queue("T", 1)] == [b"b%d" % i for i in range(4)]
        assert s.get_message("T", 0, 2).body == b"m2"
        reads = [
            lambda: s.get_message("T", 0, 3),
            lambda: list(s.iter_queue("T", 0)),
            lambda: s.message_at(off),
            lambda: s.query_by_key("T", "km3"),
            lambda: s.read_record(off, s.consume_queue("T", 0).unit(3)[1]),
            lambda: s.get_messages("g", "T", 0, 3),
        ]
        for read in reads:
            with pytest.raises(CorruptRecordError, match="body CRC mismatch") as info:
                read()
            assert info.value.offset == off
        # getMessage: the batch from 0 ends before it, and the next call starts at it
        res = s.get_messages("g", "T", 0, 0)
        assert [r.body for r in res.messages] == [b"m0", b"m1", b"m2"]
        assert res.next_begin_offset == 3
        assert list(s.damaged) == [("T", 0)]
        assert f"offset {off}" in s.damaged[("T", 0)]
    lines = [r for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and not lines[0].exc_info
    assert "T/0" in lines[0].getMessage() and f"offset {off}" in lines[0].getMessage()
    res = verify_store(str(root), small())
    assert any("CRC" in p.what for p in res.errors)


def test_a_config_write_that_fails_leaves_no_trace(tmp_path, monkeypatch):
    """ENOSPC while persisting config/*.json: the old file and its .bak stay as they were and
    no .tmp is left behind (docs/guarantees.md: no trace)."""
    from rmqfs.engine.format import config as C

    path = str(tmp_path / "config" / "topics.json")
    C.persist_config_file(path, {"a": 1})
    C.persist_config_file(path, {"a": 2})
    before = {n: (tmp_path / "config" / n).read_bytes() for n in os.listdir(tmp_path / "config")}
    real_write = os.write

    def full(fd, data):
        if len(data) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        C.persist_config_file(path, {"a": 3})
    monkeypatch.undo()
    after = {n: (tmp_path / "config" / n).read_bytes() for n in os.listdir(tmp_path / "config")}
    assert after == before and sorted(after) == ["topics.json", "topics.json.bak"]


def test_a_commit_of_several_queues_the_disk_refuses_changes_nothing(tmp_path, monkeypatch):
    """``commit_queues`` (a commit, a topic's reset) is all or nothing, in memory too: on
    ENOSPC the queues it changed get their old offsets back and the ones it added go, without
    a copy of the whole table."""
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 3)
        s.put_messages([Message("T", b"m", queue_id=q) for q in range(3) for _ in range(4)])
        offsets = s.consumer_offsets
        offsets.commit_queues("G", "T", {0: 1})
        before = {k: dict(v) for k, v in offsets.table.items()}

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(C, "persist_config_file", full)
        with pytest.raises(OSError):
            offsets.commit_queues("G", "T", {0: 3, 1: 2, 2: 4})
        with pytest.raises(OSError):
            offsets.commit_queues("H", "T", {0: 3})
        assert offsets.table == before and offsets.groups() == {"G"}
        monkeypatch.undo()
        offsets.commit_queues("G", "T", {0: 3, 1: 2})
        assert offsets.topics_of("G") == {"T": {0: 3, 1: 2}}


def test_a_store_with_more_files_than_descriptors_left_says_why(tmp_path):
    """A store holds a descriptor per CommitLog, ConsumeQueue and IndexFile file (as a broker
    holds a FileChannel each): opened with too few left under RLIMIT_NOFILE, it raises
    DescriptorsError (EMFILE) naming the limit and what to do, not a bare OSError, and
    gives its lock back; with the limit raised it opens."""
    import resource

    from rmqfs.engine.errors import DescriptorsError

    root = tmp_path / "store"
    with MessageStore(str(root)) as s:
        for t in range(30):
            s.create_topic(f"T{t}", 4)
            s.put_messages([Message(f"T{t}", b"m", queue_id=q) for q in range(4)])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 40, hard))  # (120 queue files)
    try:
        with pytest.raises(DescriptorsError) as info:
            MessageStore(str(root), read_only=True)
        with pytest.raises(DescriptorsError):
            MessageStore(str(root))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert info.value.errno == errno.EMFILE
    assert f"the limit of open files is {in_use + 40}" in str(info.value)
    assert "ulimit -n" in str(info.value)
    with MessageStore(str(root)) as s:  # (the failed writable open gave its lock back)
        assert s.max_offset("T29", 3) == 1


def test_a_failed_open_stops_what_it_started_and_closes_each_file_once(tmp_path, monkeypatch):
    """Found by a review: a writable open that failed after it started its clean-up thread
    (starting the flush threads failed) left that thread running over a store whose lock it
    gave back; and an IndexFile a failed load had destroyed (closed) was closed again by the
    cleanup, which could close another file that had taken its descriptor's number."""
    import threading

    from rmqfs.engine.format.indexfile import IndexFile
    from rmqfs.engine.service import flush

    root = tmp_path / "store"
    produce(root, 10, queue_id=0)

    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(flush.FlushService, "start", refused)
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(RuntimeError):
        MessageStore(str(root), small())
    monkeypatch.undo()
    left = {t.name for t in threading.enumerate() if t.is_alive()} - before
    assert not [n for n in left if n.startswith("rmq")], left
    with MessageStore(str(root), small()) as s:  # (unlocked, nothing left running on it)
        assert s.max_offset("T", 0) == 10
    # an IndexFile closed twice closes its descriptor once
    (name,) = os.listdir(root / "index")
    f = IndexFile(str(root / "index" / name), 5_000_000, 20_000_000, read_only=True)
    f.close()
    other = os.open(str(root / "index" / name), os.O_RDONLY)  # (the number just freed)
    try:
        f.close()
        os.fstat(other)  # still open
    finally:
        os.close(other)
