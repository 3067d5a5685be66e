"""Recovery at open says how far it is (a progress factory, engine.service.workprogress) and what it
did (engine.service.recovery.RecoveryReport, ``MessageStore.recovery_report``)."""

from __future__ import annotations

import shutil

import refreader
from rmqfs.engine.service import recovery
from rmqfs.engine.store import Message, MessageStore, StoreConfig

CONFIG = dict(
    mapped_file_size_commit_log=8 * 1024,
    mapped_file_size_consume_queue=16 * 20,
    max_hash_slot_num=16,
    max_index_num=64,
    default_topic_queue_nums=3,
)


class Recorder:
    """A progress factory that remembers every bar: ``bars`` = [(desc, total, unit, [n...])]."""

    def __init__(self):
        self.bars = []
        self.closed = 0

    def __call__(self, total, desc, unit="B"):
        updates = []
        self.bars.append((desc, total, unit, updates))
        rec = self

        class Bar:
            def update(self, n=1):
                updates.append(n)

            def close(self):
                rec.closed += 1

        return Bar()

    def bar(self, desc):
        (found,) = [b for b in self.bars if b[0] == desc]
        return found


def fill(root, n=200, crash=True):
    """``n`` messages with one key each (2 index entries: key and UNIQ_KEY) over 3 queues."""
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        s.create_topic("T", 3)
        s.put_messages(
            [
                Message("T", b"m%d-" % i + b"x" * 200, keys=[f"k{i}"], queue_id=i % 3)
                for i in range(n)
            ]
        )
    if crash:
        (root / "abort").write_text("1")


def test_progress_of_the_recovery_scan(tmp_path, monkeypatch):
    root = tmp_path / "s"
    fill(root)
    monkeypatch.setattr(recovery, "PROGRESS_STEP", 4096)
    rec = Recorder()
    with MessageStore(str(root), StoreConfig(**CONFIG), progress=rec) as s:
        report = s.recovery_report
        segments_end = s.commitlog.files.end_offset
    assert rec.closed == len(rec.bars)  # every bar closed
    _desc, total, unit, updates = rec.bar("loading ConsumeQueues")
    assert (total, unit, sum(updates)) == (3, "queue", 3)
    _desc, total, unit, updates = rec.bar("recovering CommitLog")
    assert unit == "B"
    assert total == segments_end - report.scan_start  # to the end of the last segment
    assert sum(updates) == total
    assert all(n > 0 for n in updates)  # so the offsets shown only increase
    # every PROGRESS_STEP bytes (segments are 8 KiB: about two per segment), not per record
    assert segments_end // 4096 - 2 <= len(updates) < report.records_scanned


def test_report_after_a_crash_with_a_torn_tail_and_lost_derived_files(tmp_path):
    root = tmp_path / "s"
    fill(root, n=200)
    records = refreader.read_commitlog(root / "commitlog")
    last = records[-1]
    start, path, _ = next(
        seg
        for seg in refreader.list_segments(root / "commitlog")
        if seg[0] <= last["physicalOffset"] < seg[0] + seg[2]
    )
    with open(path, "r+b") as f:  # the last record torn: its second half never written
        f.seek(last["physicalOffset"] - start + last["totalSize"] // 2)
        f.write(bytes(last["totalSize"] - last["totalSize"] // 2))
    shutil.rmtree(root / "consumequeue" / "T" / "0")  # lost: rebuilt from the CommitLog
    shutil.rmtree(root / "index")
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        report = s.recovery_report
        assert s.max_offset("T", 0) == sum(1 for r in records if r["queueId"] == 0)
    kept = records[:-1]
    assert report.abnormal and report.did_something()
    assert report.scan_start == 0  # the index is gone: everything is re-dispatched
    assert report.scan_end == last["physicalOffset"] == report.bytes_scanned
    assert report.records_scanned == len(kept)
    assert report.torn_tail  # why the scan stopped
    assert last["queueId"] == 1
    assert report.units_dropped == 1  # the torn record's unit in queue 1
    assert report.units_rebuilt == sum(1 for r in kept if r["queueId"] == 0)
    assert report.index_rebuilt == 2 * len(kept)  # its key and its UNIQ_KEY each
    line = report.summary()
    assert line.startswith("recovery after a crash in ")
    assert f"{len(kept):,} records" in line and "dropped a torn tail" in line
    assert (
        f"rebuilt {report.units_rebuilt:,} ConsumeQueue units and "
        f"{report.index_rebuilt:,} index entries" in line
    )
    js = report.to_json()
    assert js["abnormal"] and js["unitsRebuilt"] == report.units_rebuilt
    assert js["indexEntriesRebuilt"] == report.index_rebuilt and js["tornTail"]


def test_a_clean_reopen_did_nothing(tmp_path):
    root = tmp_path / "s"
    fill(root, crash=False)
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        report = s.recovery_report
    assert not report.abnormal and not report.did_something()
    assert (report.units_rebuilt, report.index_rebuilt, report.units_dropped) == (0, 0, 0)
    assert report.torn_tail is None and report.repairs == []


def test_a_follower_recovers_nothing(tmp_path):
    root = tmp_path / "s"
    fill(root, crash=False)
    with MessageStore(str(root), StoreConfig(**CONFIG), read_only=True, follow=True) as s:
        assert s.recovery_report is None


def _flip_body_byte(root, offset: int) -> None:
    """Flip a byte 100 bytes into the record at CommitLog ``offset`` (old bit rot: its body
    CRC no longer matches)."""
    seg = CONFIG["mapped_file_size_commit_log"]
    path = root / "commitlog" / f"{offset - offset % seg:020d}"
    with open(path, "r+b") as f:
        f.seek(offset % seg + 100)
        b = f.read(1)
        f.seek(offset % seg + 100)
        f.write(bytes([b[0] ^ 0x5A]))


def test_old_damage_before_where_recovery_starts_never_cuts_the_log(tmp_path):
    """A damaged record in an old segment, before where RocketMQ's recovery starts (the
    segment the checkpoint vouches for after a crash; the queues' last record after a clean
    shutdown), cut every later record when the scan went back to rebuild an index that lags
    (IndexFiles newer than the checkpoint's indexMsgTimestamp are dropped at load, as
    RocketMQ drops them; or index/ deleted): RocketMQ never reads there. The damage is
    reported and kept, the scan goes on from the next segment, every record after it stays,
    and the index finds the records after the damaged segment again."""
    from rmqfs.engine.format.checkpoint import StoreCheckpoint

    src = tmp_path / "src"
    fill(src, crash=False)
    recs = refreader.read_commitlog(str(src / "commitlog"))
    end0 = recs[-1]["physicalOffset"] + recs[-1]["totalSize"]
    assert len({r["physicalOffset"] // CONFIG["mapped_file_size_commit_log"] for r in recs}) > 4
    cp = StoreCheckpoint.read(str(src / "checkpoint"))
    # as a running broker's flush leaves it: physic/logics past the last record, the IndexFile
    # not full, so indexMsgTimestamp 0 (RocketMQ sets it when a file fills)
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = recs[-1]["storeTimestamp"] + 5000
    cp.index_msg_timestamp = 0
    cp.write(str(src / "checkpoint"))
    _flip_body_byte(src, recs[3]["physicalOffset"])
    crash, clean = tmp_path / "crash", tmp_path / "clean"
    shutil.copytree(src, crash)
    (crash / "abort").write_text("1")
    shutil.copytree(src, clean)
    shutil.rmtree(clean / "index")
    for root in (crash, clean):
        with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
            rep = s.recovery_report
            assert s.commitlog.max_offset == end0, root
            assert rep.scan_start == 0 and rep.torn_tail is None
            (damaged,) = rep.damaged
            assert damaged.startswith(f"{recs[3]['physicalOffset']}: body CRC mismatch")
            assert rep.to_json()["damaged"] == [damaged] and "1 damaged record" in rep.summary()
            assert sum(cq.max_offset for cq in s.consume_queues.values()) == len(recs)
            last = recs[-1]
            assert [r.commitlog_offset for r in s.query_by_key("T", "k199")] == [
                last["physicalOffset"]
            ]
        assert len(refreader.read_commitlog(str(root / "commitlog"), check=False)) == len(recs)


def test_zeros_with_records_after_them_say_what_goes(tmp_path):
    """Zeros where a record should be end the CommitLog, as RocketMQ's walk ends it, and
    every record after them goes; when later segments hold records the report says so
    (``torn_tail``) instead of calling it a clean end."""
    root = tmp_path / "s"
    fill(root)
    recs = refreader.read_commitlog(str(root / "commitlog"))
    seg = CONFIG["mapped_file_size_commit_log"]
    victim = next(r for r in recs if r["physicalOffset"] // seg == 2)
    at = victim["physicalOffset"]
    path = root / "commitlog" / f"{at - at % seg:020d}"
    with open(path, "r+b") as f:
        f.seek(at % seg)
        f.write(bytes(victim["totalSize"]))
    (root / "checkpoint").unlink()  # nothing vouched for: recovery walks from the start
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        rep = s.recovery_report
        assert s.commitlog.max_offset == at
        assert rep.torn_tail == (
            f"zeros at {at} where a record should be; the records from {3 * seg} on are "
            "dropped with them"
        )
        assert "dropped a torn tail" in rep.summary()


def test_zeros_with_bytes_written_after_them_in_the_same_file_say_what_goes(tmp_path):
    """A crash can leave a later page of the live segment on disk and an earlier one not:
    the walk ends at the zeros, as RocketMQ's does, and the records after them in the same
    file go. The report says so instead of calling it a clean end; zeros to the end of the
    file are a clean end."""
    root = tmp_path / "s"
    fill(root)
    recs = refreader.read_commitlog(str(root / "commitlog"))
    seg = CONFIG["mapped_file_size_commit_log"]
    last_seg = recs[-1]["physicalOffset"] // seg
    in_last = [r for r in recs if r["physicalOffset"] // seg == last_seg]
    assert len(in_last) > 4
    victim = in_last[len(in_last) // 2]
    at, after = victim["physicalOffset"], victim["physicalOffset"] + victim["totalSize"]
    path = root / "commitlog" / f"{last_seg * seg:020d}"
    with open(path, "r+b") as f:
        f.seek(at % seg)
        f.write(bytes(victim["totalSize"]))
    clean = tmp_path / "clean"
    shutil.copytree(root, clean)
    (root / "checkpoint").unlink()  # nothing vouched for: recovery walks from the start
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        rep = s.recovery_report
        assert s.commitlog.max_offset == at
        head = f"zeros at {at} where a record should be; bytes written from "
        assert rep.torn_tail.startswith(head)
        assert rep.torn_tail.endswith(" on in the same file are dropped with them")
        # the next record's first non-zero byte (its TOTALSIZE is big-endian: leading zeros)
        assert after <= int(rep.torn_tail[len(head) :].split()[0]) < after + 4
    # the records after the hole zeroed too: zeros to the end of the file, a clean end
    with open(clean / "commitlog" / f"{last_seg * seg:020d}", "r+b") as f:
        f.seek(at % seg)
        f.write(bytes(seg - at % seg))
    (clean / "checkpoint").unlink()
    with MessageStore(str(clean), StoreConfig(**CONFIG)) as s:
        assert s.commitlog.max_offset == at and s.recovery_report.torn_tail is None


def test_an_idle_queues_damaged_last_record_never_cuts_the_log(tmp_path):
    """After a clean shutdown RocketMQ starts at the segment of the newest record the queues
    point at. An idle queue whose last record (old) lost its header has that unit dropped and
    is re-dispatched from its last good one: the scan starts there, meets the damage, and
    must not cut the log there (it cut 201 of 204 records)."""
    root = tmp_path / "s"
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        s.create_topic("T", 3)
        s.create_topic("OLD", 1)
        s.put_messages([Message("OLD", b"o%d" % i + b"y" * 200, queue_id=0) for i in range(4)])
        s.put_messages(
            [
                Message("T", b"m%d-" % i + b"x" * 200, keys=[f"k{i}"], queue_id=i % 3)
                for i in range(200)
            ]
        )
        end0 = s.commitlog.max_offset
    recs = refreader.read_commitlog(str(root / "commitlog"))
    victim = recs[3]
    assert victim["topic"] == "OLD"
    seg = CONFIG["mapped_file_size_commit_log"]
    at = victim["physicalOffset"]
    with open(root / "commitlog" / f"{at - at % seg:020d}", "r+b") as f:
        f.seek(at % seg + 4)
        f.write(bytes(4))  # its magic gone
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        rep = s.recovery_report
        assert s.commitlog.max_offset == end0 and rep.torn_tail is None
        assert [d.split(":")[0] for d in rep.damaged] == [str(at)]
        assert s.max_offset("T", 0) == 67 and s.max_offset("OLD", 0) == 3
