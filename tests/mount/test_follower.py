"""Follower stores and mounts: a read-only store (or ``-o ro`` mount) of a store that a live
process writes follows it (engine/live/follower.py, docs/live-stores.md "Follower mount").

Engine tests run a writer MessageStore and a follower (``follow=True``) in one process and
refresh the follower by hand; filesystem tests run a writer mount and a follower mount of the
same store, for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from conftest import SHARED, copy_fixture, fuse, run_rmqfs
from rmqfs.engine.errors import CorruptRecordError, NoSuchTopicError, OffsetOutOfRangeError
from rmqfs.engine.format.message import FIXED_V4
from rmqfs.engine.live.status import store_status
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from stores import put_internal

ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


def _config(**kw) -> StoreConfig:
    base = dict(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
        file_reserved_time=1,
        delete_when=ALL_HOURS,
        clean_resource_interval=3_600_000,
        delete_commit_log_files_interval=0,
    )
    base.update(kw)
    return StoreConfig(**base)


def store_digest(root) -> dict:
    """Every directory's listing and every file's size, mtime and SHA-256 under ``root``."""
    out = {}
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        out[("dir", rel)] = (sorted(dirs), sorted(files), os.stat(d).st_mtime_ns)
        for name in files:
            p = os.path.join(d, name)
            st = os.stat(p)
            with open(p, "rb") as f:
                h = hashlib.sha256(f.read()).hexdigest()
            out[("file", os.path.join(rel, name))] = (st.st_size, st.st_mtime_ns, h)
    return out


def _expire_segments(root: Path, below: int) -> int:
    """Make the CommitLog segments that end at or before ``below`` look 2 hours old, so the
    writer's clean-up (fileReservedTime=1) deletes them. Returns how many."""
    old = time.time() - 2 * 3600
    n = 0
    cl = root / "commitlog"
    names = sorted(os.listdir(cl))
    size = os.path.getsize(cl / names[0])
    for name in names[:-1]:
        if int(name) + size <= below:
            os.utime(cl / name, (old, old))
            n += 1
    return n


def _queue_bodies(store: MessageStore, topic: str, q: int) -> list[tuple[int, bytes]]:
    return [(qoff, rec.plain_body) for qoff, rec in store.iter_queue(topic, q)]


# --------------------------------------------------------------------------------------------
# engine


def test_engine_follower_follows_puts_rollover_new_queues_configs_and_expiry(tmp_path):
    root = tmp_path / "store"
    cfg = _config()
    with ExitStack() as stack:  # the follower is closed first, then the writer
        w = stack.enter_context(MessageStore(root, cfg))
        w.create_topic("T", 4)
        w.put_messages([Message("T", b"before %d" % i, keys=[f"b{i}"]) for i in range(40)])
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        assert f.follower is not None and f.commitlog.max_offset == w.commitlog.max_offset
        # the newest visible record's time from the open on (it stayed 0 until the writer
        # stored again: status.json's lastStoreTimestamp null, the views' mtimes the mount's;
        # a review)
        assert f.commitlog.last_store_timestamp == w.commitlog.last_store_timestamp > 0
        assert store_status(f)["lastStoreTimestamp"] == w.commitlog.last_store_timestamp
        acked = []
        for rnd in range(40):
            acked += w.put_messages(
                [
                    Message("T", b"m%d-%d" % (rnd, i) * 8, tags="TagA", keys=[f"k{rnd}-{i}"])
                    for i in range(25)
                ]
            )
            if rnd == 10:
                w.create_topic("U", 2)
                w.put_messages([Message("U", b"u0", queue_id=1)])
                w.create_group("G")
                w.commit_offset("G", "T", 0, 3)
            changes = f.follower.refresh()
            assert changes["records"] > 0
            assert f.commitlog.max_offset == w.commitlog.max_offset
            assert f.follower.behind_bytes == 0 and f.follower.behind_ms() == 0
            for key, cq in list(w.consume_queues.items()):
                assert (f.min_offset(*key), f.max_offset(*key)) == (cq.min_offset, cq.max_offset)
        assert len(w.commitlog.files.segments) >= 4  # rolled over several times
        assert f.topic_names() == ["T", "U"]
        assert f.consumer_offsets.query("G", "T", 0) == 3 and "G" in f.group_names()
        assert _queue_bodies(f, "U", 1) == [(0, b"u0")]
        for q in range(4):
            assert _queue_bodies(f, "T", q) == _queue_bodies(w, "T", q)
        last = acked[-1]
        rec = f.message_at(last.commitlog_offset)
        assert rec is not None and rec.msg_id == last.msg_id
        # a batch of 25 keys waits in the writer's memory (IndexService.put_hashed) until its
        # flush round writes it, as a broker's reput follows its CommitLog
        w.index_service.write_pending()
        f.follower.refresh()
        assert [r.commitlog_offset for r in f.query_by_key("T", "k39-24")] == [
            last.commitlog_offset
        ]
        assert [r.commitlog_offset for r in f.query_by_key("T", "b3")] == [
            r.commitlog_offset for r in w.query_by_key("T", "b3")
        ]
        assert f.get_messages("g", "T", 1, 0, 32, "TagA").status.name == "FOUND"

        # expiry: the writer deletes old segments (and ConsumeQueue and index files)
        reader = f.iter_queue("T", 0)  # a read in progress when the files vanish
        assert next(reader)[0] == 0
        assert _expire_segments(root, acked[-1].commitlog_offset) >= 2
        report = w.delete_expired_files(manual=True)
        assert report.commitlog and w.commitlog.min_offset > 0
        changes = f.follower.refresh()
        assert any(p.startswith("commitlog/") for p in changes["deleted"])
        assert f.commitlog.min_offset == w.commitlog.min_offset
        for key, cq in list(w.consume_queues.items()):
            assert (f.min_offset(*key), f.max_offset(*key)) == (cq.min_offset, cq.max_offset)
        try:  # the rest of the read: what was deleted fails cleanly, nothing else
            sum(1 for _ in reader)
        except CorruptRecordError:
            pass
        assert f.message_at(0) is None
        with pytest.raises(OffsetOutOfRangeError):
            f.get_message("T", 0, 0)
        assert f.query_by_key("T", "b3") == []
        assert _queue_bodies(f, "T", 2) == _queue_bodies(w, "T", 2)
        # and it goes on following after the expiry
        more = w.put_messages([Message("T", b"after", keys=["after"])])
        w.flush()  # a single put's index entries reach the files by the writer's next flush
        f.follower.refresh()
        assert [r.commitlog_offset for r in f.query_by_key("T", "after")] == [
            more[0].commitlog_offset
        ]


def test_engine_follower_follows_a_topic_deleted_and_made_again(tmp_path):
    """The writer's deleteTopic removes the topic's queues: the follower drops them too (it
    kept them, and its reads of them failed with struct.error), and when the writer makes the
    topic again the follower follows the new queues (it stopped at their first record, and
    every later message of every topic stayed hidden)."""
    root = tmp_path / "store"
    cfg = _config()
    with ExitStack() as stack:
        w = stack.enter_context(MessageStore(root, cfg))
        w.create_topic("T", 2)
        w.create_topic("U", 1)
        w.put_messages([Message("T", b"t%d" % i, keys=[f"kt{i}"]) for i in range(40)])
        w.put_messages([Message("U", b"u%d" % i) for i in range(5)])
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        assert f.max_offset("T", 0) == 20
        w.delete_topic("T")
        f.follower.refresh()
        assert f.topic_names() == ["U"] and f.queue_ids("T") == []
        with pytest.raises(NoSuchTopicError):
            f.get_message("T", 0, 0)
        w.create_topic("T", 2)
        w.put_messages([Message("T", b"new%d" % i, queue_id=0) for i in range(3)])
        w.put_messages([Message("U", b"u-after")])
        f.follower.refresh()
        assert [r.body for _, r in f.iter_queue("T", 0)] == [b"new0", b"new1", b"new2"]
        assert f.max_offset("U", 0) == w.max_offset("U", 0) == 6
        assert f.follower.behind_bytes == 0
        # deleted and made again between two looks: its files have the old names, not the
        # old inodes
        w.delete_topic("T")
        w.create_topic("T", 2)
        w.put_messages([Message("T", b"again%d" % i, queue_id=0) for i in range(2)])
        w.put_messages([Message("U", b"u-last")])
        f.follower.refresh()
        assert [r.body for _, r in f.iter_queue("T", 0)] == [b"again0", b"again1"]
        assert f.max_offset("U", 0) == 7 and f.follower.behind_bytes == 0


def test_engine_follower_never_shows_a_torn_record_or_a_record_without_its_unit(tmp_path):
    """A writer caught mid-record (second half still zeros) and a ConsumeQueue unit not
    written yet (a broker's reput behind its CommitLog) keep the record invisible; it
    appears once complete."""
    root = tmp_path / "store"
    cfg = _config()
    with ExitStack() as stack:  # the follower is closed first, then the writer
        w = stack.enter_context(MessageStore(root, cfg))
        w.create_topic("T", 1)
        w.put_messages([Message("T", b"first %d" % i) for i in range(10)])
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        assert f.max_offset("T", 0) == 10
        visible = f.commitlog.max_offset
        (x,) = w.put_messages([Message("T", b"x" * 3000, keys=["x"])])
        pos = x.commitlog_offset % cfg.mapped_file_size_commit_log
        seg_path = root / "commitlog" / f"{x.commitlog_offset - pos:020d}"
        fd = os.open(seg_path, os.O_RDWR)
        try:
            whole = os.pread(fd, x.size, pos)
            os.pwrite(fd, whole[: x.size // 2] + bytes(x.size - x.size // 2), pos)
            f.follower.refresh()
            assert f.commitlog.max_offset == visible
            assert f.max_offset("T", 0) == 10 and f.message_at(x.commitlog_offset) is None
            assert f.query_by_key("T", "x") == []
            assert f.follower.behind_bytes == x.size  # its unit says it is there: held back
            os.pwrite(fd, whole, pos)
        finally:
            os.close(fd)
        f.follower.refresh()
        assert f.max_offset("T", 0) == 11 and f.get_message("T", 0, 10).plain_body == b"x" * 3000

        # the unit of the next record is not on disk yet
        (y,) = w.put_messages([Message("T", b"y")])
        cq_path = root / "consumequeue" / "T" / "0" / f"{0:020d}"
        fd = os.open(cq_path, os.O_RDWR)
        try:
            unit = os.pread(fd, 20, 11 * 20)
            os.pwrite(fd, bytes(20), 11 * 20)
            f.follower.refresh()
            assert f.max_offset("T", 0) == 11 and f.commitlog.max_offset == y.commitlog_offset
            assert f.follower.behind_bytes == y.size  # complete, waiting for its unit
            # a unit pointing elsewhere (torn) is not taken either
            os.pwrite(fd, unit[:8] + (y.size + 1).to_bytes(4, "big") + unit[12:], 11 * 20)
            f.follower.refresh()
            assert f.max_offset("T", 0) == 11
            os.pwrite(fd, unit, 11 * 20)
        finally:
            os.close(fd)
        f.follower.refresh()
        assert f.max_offset("T", 0) == 12 and f.commitlog.max_offset == w.commitlog.max_offset
        assert f.follower.behind_bytes == 0


def test_engine_follower_stops_at_a_damaged_record_and_each_queue_at_its_own(tmp_path):
    """The writer's new units are checked by the decoder every unit reader uses: a record
    whose body no longer matches its BODYCRC stops the visible CommitLog there and each queue
    before it; a unit naming another topic's record is not taken; both appear once right
    again."""
    root = tmp_path / "store"
    cfg = _config()
    with ExitStack() as stack:  # the follower is closed first, then the writer
        w = stack.enter_context(MessageStore(root, cfg))
        w.create_topic("A", 1)
        w.create_topic("B", 1)
        w.put_messages([Message("A", b"a-first"), Message("B", b"b-first")])
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        assert (f.max_offset("A", 0), f.max_offset("B", 0)) == (1, 1)
        puts = w.put_messages(
            [Message(t, f"{t}-{i}".encode() * 20) for i in range(4) for t in ("A", "B")]
        )
        a1 = puts[2]  # A's second new record, after A-0 and B-0
        pos = a1.commitlog_offset % cfg.mapped_file_size_commit_log
        seg = root / "commitlog" / f"{a1.commitlog_offset - pos:020d}"
        fd = os.open(seg, os.O_RDWR)
        try:
            body_at = pos + FIXED_V4.size  # the body of this IPv4 record: 60 bytes
            body = os.pread(fd, 4, body_at)
            os.pwrite(fd, bytes(b ^ 0x55 for b in body), body_at)
            f.follower.refresh()
            assert f.commitlog.max_offset == a1.commitlog_offset
            assert (f.max_offset("A", 0), f.max_offset("B", 0)) == (2, 2)
            os.pwrite(fd, body, body_at)
        finally:
            os.close(fd)
        f.follower.refresh()
        assert (f.max_offset("A", 0), f.max_offset("B", 0)) == (5, 5)
        # a unit of A naming a record of B with the same queue id and queue offset, already
        # visible (below the visible end, where a queue's late units are checked): a foreign
        # record, not taken (QUEUEID and QUEUEOFFSET agree; the topic does not)
        (b5,) = w.put_messages([Message("B", b"late B")])
        f.follower.refresh()
        assert f.max_offset("B", 0) == 6
        (a5,) = w.put_messages([Message("A", b"late A")])
        cq = root / "consumequeue" / "A" / "0" / f"{0:020d}"
        fd = os.open(cq, os.O_RDWR)
        try:
            unit = os.pread(fd, 20, 5 * 20)
            foreign = b5.commitlog_offset.to_bytes(8, "big") + b5.size.to_bytes(4, "big")
            os.pwrite(fd, foreign + unit[12:], 5 * 20)
            f.follower.refresh()
            assert f.max_offset("A", 0) == 5 and f.commitlog.max_offset == a5.commitlog_offset
            os.pwrite(fd, unit, 5 * 20)
        finally:
            os.close(fd)
        f.follower.refresh()
        assert (f.max_offset("A", 0), f.max_offset("B", 0)) == (6, 6)
        assert f.commitlog.max_offset == w.commitlog.max_offset
        assert f.get_message("A", 0, 5).plain_body == b"late A"
        assert f.get_message("A", 0, 2).plain_body == b"A-1" * 20


def test_engine_follower_walks_records_without_units_and_segment_ends(tmp_path):
    """PREPARED transaction halves get no ConsumeQueue unit, and a segment ends in a blank
    record: the follower walks over both to the records after them."""
    from rmqfs.engine.format.message import TRANSACTION_PREPARED_TYPE

    root = tmp_path / "store"
    cfg = _config()
    with ExitStack() as stack:  # the follower is closed first, then the writer
        w = stack.enter_context(MessageStore(root, cfg))
        w.create_topic("T", 2)
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        got = []
        for i in range(60):
            w.put_messages([Message("T", b"half %d" % i * 300, sys_flag=TRANSACTION_PREPARED_TYPE)])
            got += w.put_messages([Message("T", b"whole %d" % i * 300, keys=[f"w{i}"])])
            f.follower.refresh()
            assert f.commitlog.max_offset == w.commitlog.max_offset
        w.flush()  # single puts' index entries reach the files by the writer's next flush
        f.follower.refresh()
        assert len(w.commitlog.files.segments) >= 3
        assert [rec.plain_body for q in (0, 1) for _, rec in f.iter_queue("T", q)] == [
            rec.plain_body for q in (0, 1) for _, rec in w.iter_queue("T", q)
        ]
        assert sum(f.max_offset("T", q) for q in (0, 1)) == 60
        assert f.query_by_key("T", "w59")[0].commitlog_offset == got[-1].commitlog_offset


def test_engine_follower_writes_nothing(tmp_path):
    """A follower opened on a store with everything a recovering opener would change (an
    abort file, a torn tail, zero-length newest files, a missing ConsumeQueue unit) reads it
    and leaves every byte, name and mtime as it was."""
    root = tmp_path / "store"
    cfg = _config()
    with MessageStore(root, cfg) as w:
        w.create_topic("T", 2)
        res = w.put_messages([Message("T", b"m%d" % i * 50, keys=[f"k{i}"]) for i in range(600)])
        w.create_group("G")
        w.commit_offset("G", "T", 1, 7)
    (root / "abort").write_text("12345")
    last = sorted(os.listdir(root / "commitlog"))[-1]
    end = res[-1].commitlog_offset + res[-1].size
    with open(root / "commitlog" / last, "r+b") as fh:  # a torn record after the end
        fh.seek(end % cfg.mapped_file_size_commit_log)
        fh.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + b"\x17" * 40)
    nxt = int(last) + cfg.mapped_file_size_commit_log
    (root / "commitlog" / f"{nxt:020d}").write_bytes(b"")
    cq_dir = root / "consumequeue" / "T" / "0"
    newest_cq = sorted(os.listdir(cq_dir))[-1]
    (cq_dir / f"{int(newest_cq) + 2000:020d}").write_bytes(b"")
    (root / "index" / "29991231235959999").write_bytes(b"")
    old = time.time() - 3600
    for d, _, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(d, name), (old, old))
    before = store_digest(root)
    f = MessageStore(root, cfg, read_only=True, follow=True)
    try:
        for _ in range(3):
            f.follower.refresh()
        assert f.commitlog.max_offset == end
        assert sum(1 for q in (0, 1) for _ in f.iter_queue("T", q)) == 600
        assert f.query_by_key("T", "k5") and f.get_messages("g", "T", 0, 0).messages
        f.offset_by_time("T", 1, res[300].store_timestamp)
        assert f.consumer_offsets.query("G", "T", 1) == 7
    finally:
        f.close()
    assert store_digest(root) == before


def test_engine_follower_of_a_store_rocketmq_wrote(tmp_path):
    """RocketMQ 4.9.8's own store (copied), then appended to by the engine: followed."""
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "store")
    expected = [
        json.loads(x)
        for x in (SHARED / "fixtures" / "rocketmq-4.9.8-written" / "expected.jsonl")
        .read_text()
        .splitlines()
    ]
    cfg = StoreConfig(max_hash_slot_num=32, max_index_num=128)
    with ExitStack() as stack:  # the follower is closed first, then the writer
        w = stack.enter_context(MessageStore(root, cfg))
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        by_queue: dict = {}
        for e in expected:
            by_queue.setdefault((e["topic"], e["queueId"]), []).append(e["queueOffset"])
        for key, offs in by_queue.items():
            assert f.max_offset(*key) == max(offs) + 1
        w.create_topic("OracleTopicA", 4)  # the broker's test wrote no topics.json
        res = w.put_messages(
            [Message("OracleTopicA", b"appended %d" % i, keys=[f"ap{i}"]) for i in range(50)]
        )
        f.follower.refresh()
        for r in res:
            got = f.get_message("OracleTopicA", r.queue_id, r.queue_offset)
            assert got.commitlog_offset == r.commitlog_offset
            assert r.queue_offset >= max(by_queue[("OracleTopicA", r.queue_id)]) + 1
        assert [x.commitlog_offset for x in f.query_by_key("OracleTopicA", "ap49")] == [
            res[-1].commitlog_offset
        ]
        old = expected[0]
        rec = f.get_message(old["topic"], old["queueId"], old["queueOffset"])
        assert rec.msg_id == old["msgId"]


# --------------------------------------------------------------------------------------------
# mounts


# The waits below end as soon as the follower shows what they wait for; their deadlines (30 s)
# only end a test whose change never shows. How soon it shows is bench.follower's figure (p99
# under 1 s): bounds of 1-2.5 s here failed whenever the machine was loaded.


def _conf(tmp_path, **extra) -> Path:
    conf = tmp_path / "broker.conf"
    keys = {
        "mappedFileSizeCommitLog": 131072,
        "mappedFileSizeConsumeQueue": 2000,
        "maxHashSlotNum": 64,
        "maxIndexNum": 256,
        "fileReservedTime": 1,
        "deleteWhen": ALL_HOURS,
        "cleanResourceInterval": 100,
        "deleteCommitLogFilesInterval": 0,
        **extra,
    }
    conf.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    return conf


class _Tail:
    """Follows a growing file like ``tail -f``: only whole lines, each time it is polled."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)
        self.pos = 0
        self.partial = 0  # reads that ended inside a line

    def poll(self) -> list[bytes]:
        chunks = []
        size = os.fstat(self.fd).st_size  # as tail -f: read up to the size it sees
        while self.pos < size:
            data = os.pread(self.fd, min(1 << 20, size - self.pos), self.pos)
            if not data:
                break
            chunks.append(data)
            self.pos += len(data)
        data = b"".join(chunks)
        if data and not data.endswith(b"\n"):
            self.partial += 1
        return data.splitlines()

    def close(self):
        os.close(self.fd)


@fuse
def _expiring(root: Path) -> list[str]:
    """The CommitLog segments :func:`_expire_segments` marked old that are still there."""
    cl = root / "commitlog"
    old = time.time() - 3600
    return [n for n in os.listdir(cl) if os.path.getmtime(cl / n) < old]


def _min_in_commitlog(mnt, q: int, commitlog_min: int) -> bool:
    """Whether queue ``T/q``'s minOffset on the mount ``mnt`` names a message whose record is
    at or past ``commitlog_min`` (corrected after an expiry: ``correctMinOffset``)."""
    d = mnt / "topics" / "T" / str(q)
    try:
        first = json.loads((d / "offsets.json").read_text())["minOffset"]
        return json.loads((d / "by-offset" / str(first)).read_text())["commitLogOffset"] >= (
            commitlog_min
        )
    except (FileNotFoundError, KeyError):
        return False


def test_follower_mount_shows_every_acked_message_once(mount_store, tmp_path):
    """A writer mount produces continuously (CommitLog rolling over every ~900 messages, old
    segments expiring) while a follower mount of the same store is read like ``tail -f``:
    every acknowledged message shows up there once, whole. How soon is a figure of
    ``python -m bench.follower`` (p99 under 1 s at 100,000 msg/s), not of this test: it failed
    here whenever the machine was loaded (a max lag of 1.2-3.1 s at load 4-6)."""
    conf = _conf(tmp_path)
    store = tmp_path / "store"
    w = mount_store(store, config=conf, name="w")
    os.mkdir(w.mnt / "topics" / "T")
    r = mount_store(store, "ro", name="r")
    status = json.loads((r.mnt / "status.json").read_text())
    assert status["follower"] is True and status["writerPid"] == w.pid
    assert json.loads((w.mnt / "status.json").read_text())["follower"] is False

    acked: dict[bytes, float] = {}
    stop = threading.Event()
    errors = []

    def produce():
        try:
            fd = os.open(w.mnt / "topics" / "T" / "produce", os.O_WRONLY)
            i = 0
            try:
                t_end = time.monotonic() + 6
                while time.monotonic() < t_end:
                    lines = [b"msg-%07d %s" % (i + k, b"x" * 80) for k in range(20)]
                    os.write(fd, b"\n".join(lines) + b"\n")
                    now = time.monotonic()
                    for line in lines:
                        acked[line] = now
                    i += 20
                    time.sleep(0.01)
            finally:
                os.close(fd)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            stop.set()

    tail = _Tail(r.mnt / "topics" / "T" / "messages.jsonl")
    seen: dict[bytes, float] = {}
    dupes = []
    last_offset = -1
    expired_rounds = 0
    th = threading.Thread(target=produce)
    th.start()
    next_expiry = time.monotonic() + 2
    try:
        quiet_until = None
        while True:
            now = time.monotonic()
            for line in tail.poll():
                m = json.loads(line)
                body = m["body"].encode()
                if body in seen:
                    dupes.append(body)
                seen[body] = now
                last_offset = max(last_offset, m["commitLogOffset"])
            if now > next_expiry and last_offset > 0:
                expired_rounds += _expire_segments(store, last_offset) > 0
                next_expiry = now + 2
            if stop.is_set():
                # until every acked line is seen (or a deadline for one that never shows)
                quiet_until = quiet_until or now + 60
                if now > quiet_until or len(seen) >= len(acked):
                    break
            time.sleep(0.02)
    finally:
        th.join()
        tail.close()
    assert not errors
    assert len(acked) > 2000 and expired_rounds >= 1
    assert not dupes and tail.partial == 0
    assert set(seen) == set(acked)

    # expiry is followed: min offsets advanced, lookups below them are ENOENT
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if _expiring(store):  # the writer's clean-up deletes them over several ticks
            time.sleep(0.1)
            continue
        ws = json.loads((w.mnt / "status.json").read_text())
        rs = json.loads((r.mnt / "status.json").read_text())
        listed = sorted(os.listdir(r.mnt / "raw" / "commitlog"))
        offsets = [
            json.loads((m / "topics" / "T" / str(q) / "offsets.json").read_text())
            for m in (w.mnt, r.mnt)
            for q in range(4)
        ]
        if (
            ws["commitLogMinOffset"] == rs["commitLogMinOffset"] > 0
            and listed == sorted(os.listdir(store / "commitlog"))
            and offsets[:4] == offsets[4:]
            # the queues' min offsets corrected past the expiry (the writer's a tick after
            # its CommitLog's): this loop once stopped in between
            and all(
                _min_in_commitlog(m, q, ws["commitLogMinOffset"])
                for m in (w.mnt, r.mnt)
                for q in range(4)
            )
        ):
            break
        time.sleep(0.1)
    assert ws["commitLogMinOffset"] == rs["commitLogMinOffset"] > 0
    assert rs["commitLogMaxOffset"] == ws["commitLogMaxOffset"] > 4 * 131072
    assert rs["followerBehindBytes"] == 0
    assert sorted(os.listdir(r.mnt / "raw" / "commitlog")) == sorted(
        os.listdir(store / "commitlog")
    )
    for q in range(4):
        wo = json.loads((w.mnt / "topics" / "T" / str(q) / "offsets.json").read_text())
        ro = json.loads((r.mnt / "topics" / "T" / str(q) / "offsets.json").read_text())
        assert ro == wo and ro["minOffset"] > 0
        assert not (r.mnt / "topics" / "T" / str(q) / "by-offset" / "0").exists()
        m = json.loads(
            (r.mnt / "topics" / "T" / str(q) / "by-offset" / str(ro["minOffset"])).read_text()
        )
        assert (m["queueId"], m["queueOffset"]) == (q, ro["minOffset"])
        assert (r.mnt / "messages" / m["msgId"]).exists()


@fuse
def test_follower_mount_follows_groups_topics_and_lookups(mount_store, tmp_path):
    conf = _conf(tmp_path)
    store = tmp_path / "store"
    w = mount_store(store, config=conf, name="w")
    r = mount_store(store, "ro", name="r")
    assert os.listdir(r.mnt / "topics") == []
    os.mkdir(w.mnt / "topics" / "A")
    os.mkdir(w.mnt / "groups" / "G")
    with open(w.mnt / "topics" / "A" / "produce.jsonl", "w") as fh:
        for i in range(300):
            fh.write(
                json.dumps({"body": f"a{i}", "keys": [f"key{i}"], "tags": "TagA", "queueId": i % 4})
                + "\n"
            )
    (w.mnt / "groups" / "G" / "A" / "2" / "offset").write_text("40\n")
    t0 = time.monotonic()
    while True:  # new directories show after the kernel's 1 s entry timeout at most
        try:
            if (r.mnt / "groups" / "G" / "A" / "2" / "offset").read_text() == "40\n":
                break
        except FileNotFoundError:
            pass
        assert time.monotonic() - t0 < 30
        time.sleep(0.05)
    assert os.listdir(r.mnt / "topics") == ["A"]
    prog = json.loads((r.mnt / "groups" / "G" / "progress.json").read_text())
    row = next(x for x in prog["queues"] if x["queueId"] == 2)
    assert (row["brokerOffset"], row["consumerOffset"], row["diff"]) == (75, 40, 35)
    assert (
        len((r.mnt / "groups" / "G" / "A" / "2" / "pending.jsonl").read_text().splitlines()) == 35
    )
    key = json.loads((r.mnt / "topics" / "A" / "keys" / "key299").read_text())
    assert key["body"] == "a299" and key["queueOffset"] == 74
    assert (r.mnt / "messages" / key["msgId"]).read_text() == (
        w.mnt / "messages" / key["msgId"]
    ).read_text()
    t = key["storeTimestamp"]
    assert (
        json.loads((r.mnt / "topics" / "A" / "3" / "by-time" / str(t)).read_text())[
            "storeTimestamp"
        ]
        >= t
    )
    view_parts = sorted(p.name for p in (r.mnt / "view" / "topic=A").iterdir())
    assert view_parts == [f"queue={q}" for q in range(4)]
    assert (r.mnt / "topics" / "A" / "bodies.txt").read_text() == (
        w.mnt / "topics" / "A" / "bodies.txt"
    ).read_text()
    # a commit rewrites consumerOffset.json: followed
    (w.mnt / "groups" / "G" / "A" / "2" / "offset").write_text("75\n")
    t0 = time.monotonic()
    while (r.mnt / "groups" / "G" / "A" / "2" / "offset").read_text() != "75\n":
        assert time.monotonic() - t0 < 30
        time.sleep(0.02)
    with pytest.raises(OSError):
        (r.mnt / "groups" / "G" / "A" / "2" / "offset").write_text("1\n")


@fuse
def test_follower_mount_drops_the_views_of_a_topic_the_writer_deleted(mount_store, tmp_path):
    """The writer deletes topic A and makes it again: the follower's ``bodies.txt`` of A shows
    the new messages, not the rendering of the deleted ones it had cached (found by a review:
    it showed "one two three" while its own messages.jsonl showed "four")."""
    store = tmp_path / "store"
    w = mount_store(store, config=_conf(tmp_path), name="w")
    os.mkdir(w.mnt / "topics" / "A")
    for body in ("one", "two", "three"):
        (w.mnt / "topics" / "A" / "produce").write_text(body + "\n")
    r = mount_store(store, "ro", name="r")
    bodies = r.mnt / "topics" / "A" / "bodies.txt"
    assert bodies.read_text() == "one\ntwo\nthree\n"
    os.rmdir(w.mnt / "topics" / "A")
    os.mkdir(w.mnt / "topics" / "A")
    (w.mnt / "topics" / "A" / "produce").write_text("four\n")
    t0 = time.monotonic()
    while True:
        try:
            if bodies.read_text() == "four\n":
                break
        except OSError:  # (the topic between its deletion and its new queue)
            pass
        assert time.monotonic() - t0 < 30, bodies.read_text()
        time.sleep(0.1)


def _settled_digest(root: Path, timeout: float = 30) -> dict:
    """The store's digest once two readings 1.5 s apart agree (the writer idle)."""
    prev = store_digest(root)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1.5)
        cur = store_digest(root)
        if cur == prev:
            return cur
        prev = cur
    raise AssertionError("the writer kept changing the store")


@fuse
def test_follower_mount_and_offline_reads_change_nothing(mount_store, tmp_path):
    """With the writer mount idle, a follower mount read everywhere (views, lookups, raw/,
    status) and the offline read commands leave every byte, name and mtime of the store."""
    conf = _conf(tmp_path)
    store = tmp_path / "store"
    w = mount_store(store, config=conf, name="w")
    os.mkdir(w.mnt / "topics" / "T")
    (w.mnt / "topics" / "T" / "produce").write_bytes(
        b"".join(b"line %d\n" % i for i in range(3000))
    )
    os.mkdir(w.mnt / "groups" / "G")
    (w.mnt / "groups" / "G" / "T" / "1" / "offset").write_text("9\n")
    before = _settled_digest(store)
    r = mount_store(store, "ro", name="r")
    assert json.loads((r.mnt / "status.json").read_text())["follower"] is True
    for d, _, files in os.walk(r.mnt):
        for name in files:
            p = os.path.join(d, name)
            if "/produce" in p:
                continue
            with open(p, "rb") as fh:
                fh.read()
    for q in range(4):
        (r.mnt / "topics" / "T" / str(q) / "by-offset" / "3").read_bytes()
    time.sleep(0.5)  # a few follower refreshes
    r.umount()
    out = run_rmqfs("print-msg", store, "-t", "T", "--json").stdout.splitlines()
    assert len(out) == 3000
    run_rmqfs("topic-status", store, "-t", "T")
    run_rmqfs("query-msg", store, "-t", "T", "-q", "1", "-o", "5")
    assert store_digest(store) == before


@fuse
def test_follower_mount_of_a_store_rocketmq_wrote(mount_store, tmp_path):
    """RocketMQ 4.9.8's own store (copied), mounted by a writer and appended to: a follower
    mount shows the broker's messages as the writer does, and the new ones within a second,
    stored after the broker's last record."""
    store = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "store")
    conf = tmp_path / "broker.conf"
    conf.write_text("maxHashSlotNum=32\nmaxIndexNum=128\n")
    w = mount_store(store, config=conf, name="w")
    r = mount_store(store, "ro", name="r")
    assert json.loads((r.mnt / "status.json").read_text())["follower"] is True
    end = json.loads((w.mnt / "status.json").read_text())["commitLogMaxOffset"]
    for t in ("OracleTopicA", "OracleTopicB"):
        assert (r.mnt / "topics" / t / "messages.jsonl").read_bytes() == (
            w.mnt / "topics" / t / "messages.jsonl"
        ).read_bytes()
    old = json.loads(
        (r.mnt / "topics" / "OracleTopicA" / "messages.jsonl").read_text().splitlines()[7]
    )
    assert json.loads((r.mnt / "messages" / old["msgId"]).read_text()) == old
    os.mkdir(w.mnt / "topics" / "Appended")
    (w.mnt / "topics" / "Appended" / "produce").write_bytes(
        b"".join(b"appended %d\n" % i for i in range(100))
    )
    t0 = time.monotonic()
    while True:
        try:
            lines = (r.mnt / "topics" / "Appended" / "messages.jsonl").read_bytes().splitlines()
        except FileNotFoundError:
            lines = []
        if len(lines) >= 100:
            break
        assert time.monotonic() - t0 < 30
        time.sleep(0.02)
    new = [json.loads(x) for x in lines]
    assert [m["body"] for m in new] == [f"appended {i}" for i in range(100)]
    assert min(m["commitLogOffset"] for m in new) >= end
    assert (r.mnt / "topics" / "Appended" / "bodies.txt").read_bytes() == (
        w.mnt / "topics" / "Appended" / "bodies.txt"
    ).read_bytes()


@fuse
def test_tail_f_of_a_follower_mount(mount_store, tmp_path):
    """GNU ``tail -f`` of the follower's messages.jsonl shows what the writer produces (tail
    polls FUSE files once a second), each message once."""
    store = tmp_path / "store"
    w = mount_store(store, config=_conf(tmp_path), name="w")
    os.mkdir(w.mnt / "topics" / "Tail")
    (w.mnt / "topics" / "Tail" / "produce").write_text("before\n")
    r = mount_store(store, "ro", name="r")
    out = tmp_path / "tail.out"
    with open(out, "wb") as fh:
        tail = subprocess.Popen(
            ["tail", "-n", "+1", "-f", str(r.mnt / "topics" / "Tail" / "messages.jsonl")],
            stdout=fh,
            stderr=subprocess.DEVNULL,
        )
    try:
        for i in range(3):
            (w.mnt / "topics" / "Tail" / "produce").write_text(f"after-{i}\n")
            t0 = time.monotonic()
            while f"after-{i}".encode() not in out.read_bytes():
                # how soon (tail's 1 s poll, the follower's refresh) is bench.follower's figure;
                # the bound here only ends a test whose message never shows
                assert time.monotonic() - t0 < 30, out.read_bytes()
                time.sleep(0.02)
    finally:
        tail.terminate()
        tail.wait()
    bodies = [json.loads(x)["body"] for x in out.read_bytes().splitlines()]
    assert bodies == ["before", "after-0", "after-1", "after-2"]


@fuse
def test_follower_mount_of_a_clean_store_follows_a_writer_started_later(mount_store, tmp_path):
    store = tmp_path / "store"
    w = mount_store(store, config=_conf(tmp_path), name="w")
    os.mkdir(w.mnt / "topics" / "T")
    (w.mnt / "topics" / "T" / "produce").write_text("one\n")
    w.umount()
    r = mount_store(store, "ro", name="r")
    st = json.loads((r.mnt / "status.json").read_text())
    assert st["follower"] is True and st["writerPid"] is None
    assert (r.mnt / "topics" / "T" / "bodies.txt").read_text() == "one\n"
    w.mount()
    (w.mnt / "topics" / "T" / "produce").write_text("two\n")
    t0 = time.monotonic()
    while (r.mnt / "topics" / "T" / "bodies.txt").read_text() != "one\ntwo\n":
        assert time.monotonic() - t0 < 30
        time.sleep(0.02)
    t0 = time.monotonic()
    while json.loads((r.mnt / "status.json").read_text())["writerPid"] != w.pid:
        assert time.monotonic() - t0 < 30
        time.sleep(0.05)


@fuse
@pytest.mark.fuse
def test_snapshot_of_a_follower_mount_while_the_writer_produces(mount_store, tmp_path):
    """A follower mount takes a snapshot of what it shows: the copy verifies, mounts with a
    normal recovery and holds exactly the messages the follower had made visible (a prefix of
    the writer's, whole records only), although the writer keeps producing during the mkdir."""
    store = tmp_path / "store"
    w = mount_store(store, config=_conf(tmp_path), name="w")
    os.mkdir(w.mnt / "topics" / "Snap")
    produce = w.mnt / "topics" / "Snap" / "produce"
    produce.write_bytes(b"".join(b"first-%d\n" % i for i in range(500)))
    r = mount_store(store, "ro", name="r")
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            with open(produce, "ab") as f:
                f.write(b"".join(b"more-%d-%d\n" % (i, j) for j in range(50)))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.5)
        os.mkdir(r.mnt / "snapshots" / "f1")
        manifest = json.loads((r.mnt / "snapshots" / "f1" / "SNAPSHOT.json").read_bytes())
        time.sleep(0.3)
    finally:
        stop.set()
        t.join()
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(r.mnt / "snapshots" / "f1"), str(copy)], check=True)
    res = run_rmqfs("snapshot-verify", copy, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (copy / "abort").exists()
    (copy / "SNAPSHOT.json").unlink()
    with (
        MessageStore(str(copy), read_only=True) as snap,
        MessageStore(str(store), read_only=True) as live,
    ):
        got = [b for q in snap.queue_ids("Snap") for b in _queue_bodies(snap, "Snap", q)]
        assert len(got) == manifest["messageCount"] >= 500
        # every queue of the snapshot is a prefix of the writer's queue, byte for byte
        for q in snap.queue_ids("Snap"):
            mine = _queue_bodies(snap, "Snap", q)
            assert mine == _queue_bodies(live, "Snap", q)[: len(mine)]
        assert snap.commitlog.max_offset == manifest["commitLogOffset"] <= live.commitlog.max_offset
    assert run_rmqfs("verify", copy).returncode == 0


def test_engine_follower_opens_only_canonical_queue_directories(tmp_path):
    """A new topic whose consumequeue/ directory also holds "²", "007" and "1234567890"
    (no queues for the store: engine.format.consumequeue.queue_dir_id): the follower opens the real
    queue and ignores the others ("²".isdigit() is True, but int("²") raises)."""
    root = tmp_path / "store"
    cfg = _config()
    with ExitStack() as stack:  # the follower is closed first, then the writer
        w = stack.enter_context(MessageStore(root, cfg))
        w.create_topic("T", 1)
        w.put_messages([Message("T", b"t0")])
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        w.create_topic("V", 2)
        for odd in ("²", "007", "1234567890"):
            (root / "consumequeue" / "V" / odd).mkdir(parents=True)
        w.put_messages([Message("V", b"v%d" % i, queue_id=1) for i in range(3)])
        f.follower.refresh()
        f.follower.refresh()
        assert _queue_bodies(f, "V", 1) == [(i, b"v%d" % i) for i in range(3)]
        assert sorted(k for k in f.consume_queues if k[0] == "V") == [("V", 1)]


def test_engine_follower_follows_v2_records_of_long_topics(tmp_path):
    """A follower of a writer that puts V2 records (topics over 127 chars: the retry and DLQ
    topics of a long group, 255 chars, and a 150-char topic), new topics included, shows them
    all; a record of a topic no directory can hold is walked past and listed as skipped."""
    from rmqfs.engine.format.config import TopicConfig
    from rmqfs.engine.format.message import encode_message
    from stores import DLQ_TOPIC, LONG_GROUP, LONG_TOPIC, RETRY_TOPIC

    root = tmp_path / "store"
    cfg = _config(mapped_file_size_commit_log=16 * 1024)
    with ExitStack() as stack:  # the follower is closed first, then the writer
        w = stack.enter_context(MessageStore(root, cfg))
        w.create_topic("T", 2)
        w.put_messages([Message("T", b"first")])
        f = stack.enter_context(MessageStore(root, cfg, read_only=True, follow=True))
        w.create_topic(RETRY_TOPIC, 1)
        w.create_topic(DLQ_TOPIC, 1)
        w.topic_config.put(TopicConfig(LONG_TOPIC, 2, 2))
        w.create_group(LONG_GROUP)
        host = (b"\x7f\0\0\1", 1)
        odd = encode_message(
            "x" * 256,
            b"odd",
            queue_id=0,
            properties={},
            born_timestamp=1,
            born_host=host,
            store_host=host,
        )
        for rnd in range(12):
            for t in ("T", RETRY_TOPIC, DLQ_TOPIC, LONG_TOPIC):
                put_internal(w, [Message(t, b"%d " % rnd * 600, keys=["k%d" % rnd])])
            if rnd == 5:
                with w.put_lock:
                    w.commitlog.append([odd], [0])
                w.commit_offset(LONG_GROUP, RETRY_TOPIC, 0, 4)
            f.follower.refresh()
        w.flush()  # single puts' index entries reach the files by the writer's next flush
        f.follower.refresh()
        assert len(w.commitlog.files.segments) >= 4
        assert f.commitlog.max_offset == w.commitlog.max_offset
        assert f.topic_names() == sorted(["T", RETRY_TOPIC, DLQ_TOPIC, LONG_TOPIC])
        for key, cq in list(w.consume_queues.items()):
            assert (f.min_offset(*key), f.max_offset(*key)) == (cq.min_offset, cq.max_offset)
            assert _queue_bodies(f, *key) == _queue_bodies(w, *key)
        assert f.consumer_offsets.query(LONG_GROUP, RETRY_TOPIC, 0) == 4
        assert [r.topic for r in f.query_by_key(LONG_TOPIC, "k11")] == [LONG_TOPIC]
        assert [d["topic"] for d in f.skipped_topics()] == ["x" * 256]
