"""Expiry and clean (engine/service/cleanup.py): RocketMQ's DefaultMessageStoreCleanFilesTest,
MappedFileQueueTest.testDeleteExpiredFileByTime and ConsumeQueueTest.testCorrectMinOffset."""

import errno
import os
import time
from pathlib import Path

import pytest

from rmqfs.engine.errors import OffsetOutOfRangeError, ReadOnlyStoreError
from rmqfs.engine.format.consumequeue import UNIT, ConsumeQueue
from rmqfs.engine.format.message import cal_msg_length
from rmqfs.engine.service.cleanup import is_time_to_delete
from rmqfs.engine.store import Message, MessageStore, StoreConfig

TOPIC = "test"
KEYS = "hello"
FILE_COUNT = 55  # DefaultMessageStoreCleanFilesTest.fileCountCommitLog: one message per file
SEG = 256  # the Java test uses 128 bytes; our messages also carry a UNIQ_KEY, so 256
CQ_UNITS_PER_FILE = 7  # mappedFileSizeConsumeQueue 128 rounds up to 140 bytes = 7 units
INDEX_ITEMS_PER_FILE = 7  # maxIndexNum 8 -> 7 keys per file
KEYS_PER_MESSAGE = 2  # KEYS "hello" and the UNIQ_KEY


def _hour_not_now() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


def _config(delete_when, ratio, **kw):
    return StoreConfig(
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=CQ_UNITS_PER_FILE * 20,
        max_hash_slot_num=100,
        max_index_num=INDEX_ITEMS_PER_FILE + 1,
        file_reserved_time=1,
        delete_when=delete_when,
        disk_max_used_space_ratio=ratio,
        clean_resource_interval=3_600_000,
        delete_commit_log_files_interval=0,
        **kw,
    )


def _open(tmp_path, delete_when, ratio, usage, **kw):
    s = MessageStore(tmp_path / "store", _config(delete_when, ratio, **kw))
    s.clean_service.disk_usage = lambda path: usage
    s.create_topic(TOPIC, 1)
    return s


def _fill(s, count=FILE_COUNT):
    """Put ``count`` messages of exactly one CommitLog file each (record + 8-byte blank)."""
    props_len = len(f"KEYS\x01{KEYS}\x02UNIQ_KEY\x01{'0' * 32}\x02")
    body_len = SEG - cal_msg_length(0, 0, len(TOPIC), props_len) - 8
    res = s.put_messages(
        [Message(TOPIC, bytes(body_len), keys=KEYS, queue_id=0) for _ in range(count)]
    )
    assert all(r.size == SEG - 8 for r in res)
    assert len(s.commitlog.files.segments) == count
    return res


def _expire(s, count):
    old = time.time() - 2 * 3600
    for seg in s.commitlog.files.segments[:count]:
        os.utime(seg.path, (old, old))


def _cq_files(s):
    return len(s.consume_queue(TOPIC, 0).files.segments)


def _index_files_left(deleted_messages):
    """Index files kept once ``deleted_messages`` CommitLog files are gone: a file goes when its
    endPhyOffset (the message of its last item) is below the new min offset."""
    items = FILE_COUNT * KEYS_PER_MESSAGE
    files = -(-items // INDEX_ITEMS_PER_FILE)
    gone = 0
    for f in range(files - 1):
        last_item = min(items, (f + 1) * INDEX_ITEMS_PER_FILE) - 1
        if last_item // KEYS_PER_MESSAGE < deleted_messages:
            gone += 1
        else:
            break
    return files - gone


def _check_counts(s, deleted):
    assert len(s.commitlog.files.segments) == FILE_COUNT - deleted
    assert s.commitlog.min_offset == deleted * SEG
    cq_total = -(-FILE_COUNT // CQ_UNITS_PER_FILE)
    assert _cq_files(s) == cq_total - deleted // CQ_UNITS_PER_FILE
    assert len(s.index_service.files) == _index_files_left(deleted)
    assert s.min_offset(TOPIC, 0) == deleted
    assert s.max_offset(TOPIC, 0) == FILE_COUNT


def test_files_are_what_the_java_test_expects(tmp_path):
    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        _fill(s)
        assert _cq_files(s) == 8  # ceil(55 / 7)
        assert len(s.index_service.files) == _index_files_left(0) == 16  # ceil(110 / 7)


def test_delete_expired_files_by_time_up(tmp_path):
    """testDeleteExpiredFilesByTimeUp: deleteWhen = this hour; 15 expired; 10 per run."""
    hour = f"{time.localtime().tm_hour:02d}"
    with _open(tmp_path, hour, 99, 0.1) as s:
        _fill(s)
        _expire(s, 15)
        r1 = s.clean_service.run_once()
        assert len(r1.commitlog) == 10 and "deleteWhen" in r1.reason
        _check_counts(s, 10)
        r2 = s.clean_service.run_once()
        assert len(r2.commitlog) == 5
        _check_counts(s, 15)
        assert not s.clean_service.run_once().deleted  # the 16th file is not expired


def test_delete_expired_files_by_space_full(tmp_path):
    """testDeleteExpiredFilesBySpaceFull: disk above diskMaxUsedSpaceRatio, below the forcibly
    ratio: only expired files go."""
    with _open(tmp_path, _hour_not_now(), 1, 0.5) as s:
        _fill(s)
        _expire(s, 15)
        s.clean_service.run_once()
        _check_counts(s, 10)
        s.clean_service.run_once()
        _check_counts(s, 15)
        s.clean_service.run_once()
        _check_counts(s, 15)


def test_delete_files_immediately_by_space_full(tmp_path):
    """testDeleteFilesImmediatelyBySpaceFull: above diskSpaceCleanForciblyRatio every file but
    the last goes, expired or not, 10 per run."""
    with _open(tmp_path, _hour_not_now(), 1, 0.87) as s:
        _fill(s)
        for a in range(1, 6):
            s.clean_service.run_once()
            _check_counts(s, 10 * a)
        s.clean_service.run_once()
        _check_counts(s, FILE_COUNT - 1)  # never the last file
        assert not s.disk_full  # 0.87 is below the warning level


def test_clean_forcibly_disabled_deletes_only_expired(tmp_path):
    with _open(tmp_path, _hour_not_now(), 1, 0.87, clean_file_forcibly_enable=False) as s:
        _fill(s)
        _expire(s, 3)
        s.clean_service.run_once()
        _check_counts(s, 3)


def test_delete_expired_files_manually(tmp_path):
    """testDeleteExpiredFilesManually: no time or space trigger; executeDeleteFilesManually."""
    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        _fill(s)
        _expire(s, 15)
        assert not s.clean_service.run_once().deleted
        s.clean_service.execute_delete_files_manually()
        s.clean_service.run_once()
        _check_counts(s, 10)
        s.clean_service.run_once()
        _check_counts(s, 15)


def test_manual_delete_expired_files_runs_to_the_end(tmp_path):
    """MessageStore.delete_expired_files: mqadmin deleteExpiredCommitLog, rounds back to back."""
    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        _fill(s)
        _expire(s, 23)
        report = s.delete_expired_files(manual=True)
        assert len(report.commitlog) == 23 and report.min_offset == 23 * SEG
        assert len(report.consumequeue) == 23 // CQ_UNITS_PER_FILE
        assert len(s.index_service.files) + len(report.index) == 16
        _check_counts(s, 23)
        assert not os.path.exists(report.commitlog[0])


def test_deletion_never_skips_a_live_file(tmp_path):
    """MappedFileQueueTest.testDeleteExpiredFileByTime: files 0-4 and 21-49 aged, only 5 go."""
    cfg = _config(_hour_not_now(), 99, delete_file_batch_max=1000)
    with MessageStore(tmp_path / "store", cfg) as s:
        s.clean_service.disk_usage = lambda path: 0.1
        s.create_topic(TOPIC, 1)
        _fill(s, 50)
        segs = s.commitlog.files.segments
        old = time.time() - 2 * 3600
        for i, seg in enumerate(segs):
            if i < 5 or i > 20:
                os.utime(seg.path, (old, old))
        s.clean_service.execute_delete_files_manually()
        assert len(s.clean_service.run_once().commitlog) == 5
        assert len(s.commitlog.files.segments) == 45


def test_disk_full_flag_refuses_and_then_accepts_puts(tmp_path):
    """testIsSpaceFullFunctionEmpty2Full / Full2Empty: above diskSpaceWarningLevelRatio the
    store is marked disk-full and puts fail with ENOSPC; below it they work again."""
    with _open(tmp_path, _hour_not_now(), 99, 0.95) as s:
        _fill(s, 3)
        assert s.clean_service.is_space_to_delete()
        assert s.disk_full
        with pytest.raises(OSError) as exc:
            s.put_messages([Message(TOPIC, b"x")])
        assert exc.value.errno == errno.ENOSPC
        assert s.max_offset(TOPIC, 0) == 3
        s.clean_service.disk_usage = lambda path: 0.2
        assert not s.clean_service.is_space_to_delete()
        assert not s.disk_full
        s.put_messages([Message(TOPIC, b"x")])
        assert s.max_offset(TOPIC, 0) == 4


def test_readers_after_expiry_and_reopen(tmp_path):
    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        res = _fill(s, 20)
        _expire(s, 8)
        s.delete_expired_files()
        assert s.min_offset(TOPIC, 0) == 8
        with pytest.raises(OffsetOutOfRangeError):
            s.get_message(TOPIC, 0, 7)
        assert s.get_message(TOPIC, 0, 8).commitlog_offset == res[8].commitlog_offset
        assert [q for q, _ in s.iter_queue(TOPIC, 0, 0)] == list(range(8, 20))
        assert s.message_at(res[0].commitlog_offset) is None
        assert s.look_messages_by_uniq_key(res[0].uniq_key, TOPIC) == []
        assert [
            r.commitlog_offset for r in s.look_messages_by_uniq_key(res[9].uniq_key, TOPIC)
        ] == [res[9].commitlog_offset]
        assert s.offset_by_time(TOPIC, 0, 0) == 8
    with MessageStore(tmp_path / "store", _config(_hour_not_now(), 99)) as s:
        assert s.commitlog.min_offset == 8 * SEG
        assert s.min_offset(TOPIC, 0) == 8 and s.max_offset(TOPIC, 0) == 20
        assert s.get_message(TOPIC, 0, 19).commitlog_offset == res[19].commitlog_offset
    with MessageStore(tmp_path / "store", _config(_hour_not_now(), 99), read_only=True) as s:
        assert s.min_offset(TOPIC, 0) == 8


def test_background_clean_thread(tmp_path):
    cfg = _config(_hour_not_now(), 99)
    cfg.clean_resource_interval = 20
    with MessageStore(tmp_path / "store", cfg) as s:
        s.clean_service.disk_usage = lambda path: 0.1
        s.create_topic(TOPIC, 1)
        _fill(s, 6)
        _expire(s, 4)
        s.clean_service.execute_delete_files_manually()
        deadline = time.monotonic() + 20
        while s.commitlog.min_offset < 4 * SEG and time.monotonic() < deadline:
            time.sleep(0.02)
        assert s.commitlog.min_offset == 4 * SEG
        assert s.min_offset(TOPIC, 0) == 4


def test_read_only_store_runs_no_clean(tmp_path):
    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        _fill(s, 3)
    with MessageStore(tmp_path / "store", _config("04", 99), read_only=True) as s:
        assert s.clean_service._thread is None
        with pytest.raises(ReadOnlyStoreError):
            s.delete_expired_files()


def test_correct_min_offset():
    """ConsumeQueueTest.testCorrectMinOffset: 10000 units of size 100; correctMinOffset(2000)
    gives min offset 20."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cq = ConsumeQueue(d, "T", 0, 20 * 20000)
        cq.put_units(0, b"".join(UNIT.pack(i * 100, 100, 0) for i in range(10000)))
        cq.correct_min_offset(2000)
        assert cq.min_offset == 20
        cq.correct_min_offset(10000 * 100)  # every unit below: min = end of the queue
        assert cq.min_offset == 10000
        cq.close()


def test_correct_min_offset_is_not_misled_by_blank_units():
    """Blank filler units (commitLogOffset 0) belong before a queue's first record
    (``fillPreBlank``); one further on, in a damaged store, made the binary search jump past
    it and hide the live units before it (min offset 3 where unit 1 is live). Leading filler
    is still skipped, with and without expiry, over runs longer than one read."""
    import tempfile

    from rmqfs.engine.format.consumequeue import BLANK_UNIT_SIZE

    blank = UNIT.pack(0, BLANK_UNIT_SIZE, 0)
    with tempfile.TemporaryDirectory() as d:
        cq = ConsumeQueue(d, "T", 0, 20 * 20000)
        units = [UNIT.pack(100, 50, 0), UNIT.pack(200, 50, 0), blank, UNIT.pack(300, 50, 0)]
        cq.put_units(0, b"".join([*units, UNIT.pack(400, 50, 0)]))
        cq.correct_min_offset(150)
        assert cq.min_offset == 1
        cq.correct_min_offset(250)  # past the blank: the record after it
        assert cq.min_offset == 3
        cq.close()
    # blank runs just below the search's bound, and trailing ones (a review's layouts), and
    # random ones against the linear rule: the first record unit at or past the CommitLog's min
    import random

    def search(layout, cl_min):
        with tempfile.TemporaryDirectory() as d:
            cq = ConsumeQueue(d, "T", 0, 20 * 20000)
            cq.put_units(0, b"".join(blank if u is None else UNIT.pack(u, 10, 0) for u in layout))
            cq.correct_min_offset(cl_min)
            got = cq.min_offset
            cq.close()
        want = next((i for i, u in enumerate(layout) if u is not None and u >= cl_min), len(layout))
        return got, want

    B = None
    for layout, cl_min in (
        ([16, B, B, 20, 39, B, 68, 90, 119], 0),
        ([2, 5, B, 41, 74, 103, B, 131, 166], 100),
        ([46, 93, B, B, B, B], 83),
        ([2, 5, B, B], 100),
    ):
        got, want = search(layout, cl_min)
        assert got == want, (layout, cl_min, got)
    rnd = random.Random(7)
    for _ in range(300):
        off, layout = 0, []
        for _ in range(rnd.randint(1, 30)):
            if rnd.random() < 0.3:
                layout.append(B)
            else:
                off += rnd.randint(1, 50)
                layout.append(off)
        got, want = search(layout, rnd.randint(0, off + 10))
        assert got == want, layout
    for lead in (3, 5000):  # a queue that starts above 0: filler first (over one read's 4096)
        with tempfile.TemporaryDirectory() as d:
            cq = ConsumeQueue(d, "T", 0, 20 * 20000)
            cq.put_units(0, blank * lead + b"".join(UNIT.pack(i * 100, 100, 0) for i in range(50)))
            for cl_min, want in ((0, lead), (1000, lead + 10), (10**9, lead + 50)):
                cq.min_offset = 0
                cq.correct_min_offset(cl_min)
                assert cq.min_offset == want, (lead, cl_min)
            cq.close()


def test_is_time_to_delete_hours():
    t = time.mktime((2026, 11, 22, 4, 30, 0, 0, 0, -1))
    assert is_time_to_delete("04", t)
    assert is_time_to_delete("01;04;16", t)
    assert not is_time_to_delete("05;16", t)
    assert not is_time_to_delete("", t)
    assert not is_time_to_delete("x;y", t)


def test_broker_conf_clean_keys(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "fileReservedTime=48\ndeleteWhen=02;14\ndiskMaxUsedSpaceRatio=60\n"
        "cleanResourceInterval=5000\ndeleteFileBatchMax=3\n"
        "cleanFileForciblyEnable=false\ndiskSpaceCleanForciblyRatio=0.5\n"
        "diskSpaceWarningLevelRatio=0.6\ndeleteCommitLogFilesInterval=0\n"
    )
    cfg = StoreConfig.from_broker_conf(str(conf))
    assert (cfg.file_reserved_time, cfg.delete_when, cfg.disk_max_used_space_ratio) == (
        48,
        "02;14",
        60,
    )
    assert (cfg.clean_resource_interval, cfg.delete_file_batch_max) == (5000, 3)
    assert cfg.clean_file_forcibly_enable is False
    assert (cfg.disk_space_clean_forcibly_ratio, cfg.disk_space_warning_level_ratio) == (0.5, 0.6)
    assert cfg.delete_commit_log_files_interval == 0


def _mapped_gone_bytes(root) -> int:
    """Bytes this process maps of files under ``root`` that are no longer there (by inode: the
    store creates its files with O_TMPFILE, so /proc shows every one as ``(deleted)``)."""
    live = {p.stat().st_ino for p in root.rglob("*") if p.is_file()}
    total = 0
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and str(root) in line and int(fields[4]) not in live:
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            total += hi - lo
    return total


def test_expired_files_are_unmapped_so_their_blocks_go_back(tmp_path):
    """An expired file that was mapped for reading (recovery's walk, a reader's ``locate``)
    was unlinked but stayed mapped until the store closed, so its blocks (1 GiB a segment by
    default) never went back to a disk that is full: RocketMQ's ``MappedFile.destroy`` unmaps
    before it deletes. Its mapping goes with it now (and its fd once no reader holds it)."""
    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        res = _fill(s, 12)
        for r in res:  # every segment and the ConsumeQueue file mapped, as readers map them
            assert s.commitlog.files.locate(r.commitlog_offset) is not None
        s.consume_queue(TOPIC, 0).files.locate(0)
        _expire(s, 8)
        s.delete_expired_files()
        assert s.commitlog.min_offset == 8 * SEG
        assert not set(s.commitlog.files.maps) & {r.commitlog_offset for r in res[:8]}
        assert _mapped_gone_bytes(tmp_path / "store") == 0


def test_a_reader_holding_an_expired_file_reads_it_never_a_file_opened_since(tmp_path):
    """A reader that took a segment before expiry deleted its file (a slow ``pread`` of the
    mount, a follower's decoder) reads that file's bytes for as long as it holds it: its
    descriptor used to be closed by the next clean run whoever held it, and the number, handed
    to the next file opened, read that file's bytes as the deleted one's. It closes when the
    last holder lets go (RocketMQ's MappedFile reference count)."""

    def held(ident):  # the descriptors of this process open on the file ``ident``
        out = []
        for n in os.listdir("/proc/self/fd"):
            try:
                st = os.stat(f"/proc/self/fd/{n}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == ident:
                out.append(int(n))
        return out

    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        res = _fill(s, 12)
        fq = s.commitlog.files
        seg = fq.find(res[0].commitlog_offset)  # what a reader holds while it reads
        assert seg is not None
        want = os.pread(seg.fd, SEG, 0)
        st = os.fstat(seg.fd)
        ident = (st.st_dev, st.st_ino)
        _expire(s, 8)
        s.delete_expired_files()
        s.delete_expired_files()  # (the old code closed deleted files' fds here)
        assert s.commitlog.min_offset == 8 * SEG
        others = [os.open(p.path, os.O_RDONLY) for p in fq.segments]  # numbers reused
        try:
            assert os.fstat(seg.fd).st_nlink == 0  # deleted, and still the file it was
            assert (os.fstat(seg.fd).st_dev, os.fstat(seg.fd).st_ino) == ident
            assert os.pread(seg.fd, SEG, 0) == want
            assert held(ident) == [seg.fd]
            del seg  # the last holder lets go: the descriptor closes, the blocks go back
            assert held(ident) == []
        finally:
            for fd in others:
                os.close(fd)


def test_an_iteration_that_spans_an_expiry_goes_on_from_the_queues_start(tmp_path):
    """``iter_queue`` running while expiry deletes its next messages read the units from the
    new minOffset as if they were at its position, and reported damage (QUEUEOFFSET 272 !=
    16); it goes on from minOffset, as a pull moves there on OFFSET_TOO_SMALL."""
    with _open(tmp_path, _hour_not_now(), 99, 0.1) as s:
        res = _fill(s, 20)
        it = s.iter_queue(TOPIC, 0)
        assert next(it)[0] == 0
        _expire(s, 8)
        s.delete_expired_files()
        rest = [q for q, _ in it]
        assert rest == list(range(8, 20)) and s.damaged == {}
        assert s.get_message(TOPIC, 0, 19).commitlog_offset == res[19].commitlog_offset
