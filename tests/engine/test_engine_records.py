"""Every record kind the format has, flush modes, getMessage, checkpoint/abort/lock, fixtures.

Bytes are checked with the independent reader (tests/refreader.py) where it applies.
"""

import base64
import json
import os
import shutil
import threading
import time
import zlib

import pytest

import refreader
from conftest import FIXTURES, copy_fixture
from rmqfs.engine.errors import FlushDiskTimeoutError, InvalidNameError, MessageIllegalError
from rmqfs.engine.format.checkpoint import StoreCheckpoint
from rmqfs.engine.format.javahash import java_string_hash
from rmqfs.engine.format.message import (
    COMPRESSED_FLAG,
    COMPRESSION_LZ4,
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    INNER_BATCH_FLAG,
    MAGIC_V2,
    NEED_UNWRAP_FLAG,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_offset_msg_id,
    decode_record,
    encode_message,
    host_from_str,
)
from rmqfs.engine.live.status import store_status
from rmqfs.engine.service.getmessage import GetMessageStatus as S
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from stores import put_internal


def _cfg(**kw):
    base = dict(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )
    base.update(kw)
    return StoreConfig(**base)


# ---------------------------------------------------------------------------------------------
# records


def test_v2_record_for_a_retry_topic_longer_than_127(tmp_path):
    group = "g" * 200
    topic = "%RETRY%" + group  # 207 chars: TopicValidator allows it for retry topics only
    with pytest.raises(InvalidNameError):
        MessageStore(tmp_path / "x", _cfg()).create_topic("t" * 128)
    root = tmp_path / "s"
    with MessageStore(root, _cfg()) as s:
        s.create_topic(topic, 1)
        s.create_topic("Short", 1)
        r = s.put_messages([Message(topic, b"retry me"), Message("Short", b"v1")])
    recs = refreader.read_commitlog(root / "commitlog")
    assert recs[0]["magic"] == MAGIC_V2 and recs[0]["topicLengthSize"] == 2
    assert recs[0]["topic"] == topic
    assert recs[1]["magic"] != MAGIC_V2
    with MessageStore(root, _cfg(), read_only=True) as s:
        assert s.get_message(topic, 0, 0).body == b"retry me"
        assert s.get_message(topic, 0, 0).msg_id == r[0].msg_id


def test_ipv6_born_and_store_hosts(tmp_path):
    root = tmp_path / "s"
    born = host_from_str("[2001:db8::7]:4242")
    with MessageStore(root, _cfg(broker_ip1="::1", listen_port=10911)) as s:
        s.create_topic("T", 1)
        r = s.put_messages([Message("T", b"six", born_host=born)])[0]
        rec = s.get_message("T", 0, 0)
    assert len(r.msg_id) == 56
    assert decode_offset_msg_id(r.msg_id) == (((b"\0" * 15) + b"\1", 10911), 0)
    assert rec.sys_flag & 0x30 == 0x30 and rec.born_host == born
    raw = refreader.read_commitlog(root / "commitlog")[0]
    assert raw["sysFlag"] & 0x30 == 0x30
    assert refreader.offset_msg_id(raw["storeHostRaw"], 0) == r.msg_id


@pytest.mark.parametrize(
    "kind,flag", [("ZLIB", COMPRESSION_ZLIB), ("LZ4", COMPRESSION_LZ4), ("ZSTD", COMPRESSION_ZSTD)]
)
def test_compressed_bodies(tmp_path, kind, flag):
    root = tmp_path / "s"
    big = b"the same line again and again\n" * 200
    with MessageStore(root, _cfg(compress_msg_body_over_howmuch=1024, compress_type=kind)) as s:
        s.create_topic("T", 1)
        s.put_messages(
            [Message("T", big), Message("T", b"small"), Message("T", big, compress=False)]
        )
        recs = [r for _, r in s.iter_queue("T", 0)]
    assert recs[0].sys_flag & (COMPRESSED_FLAG | COMPRESSION_TYPE_MASK) == COMPRESSED_FLAG | flag
    assert len(recs[0].body) < len(big) and recs[0].plain_body == big
    assert not recs[1].sys_flag & COMPRESSED_FLAG and recs[1].plain_body == b"small"
    assert not recs[2].sys_flag & COMPRESSED_FLAG and recs[2].body == big
    raw = refreader.read_commitlog(root / "commitlog")  # BODYCRC over the stored bytes
    assert raw[0]["bodyCRC"] == zlib.crc32(raw[0]["body"]) & 0x7FFFFFFF


def test_compression_type_zero_means_zlib(tmp_path):
    """``CompressionType.findByValue(0)`` is ZLIB: old writers set only the COMPRESSED bit."""
    with MessageStore(tmp_path / "s", _cfg()) as s:
        s.create_topic("T", 1)
        s.put_messages(
            [Message("T", zlib.compress(b"legacy"), sys_flag=COMPRESSED_FLAG, compress=False)]
        )
        assert s.get_message("T", 0, 0).plain_body == b"legacy"


def test_batch_flags_are_decoded_and_inner_batch_is_refused(tmp_path):
    """Inner-batch records belong to BatchCQ topics (batchconsumequeue/, not written here):
    a put is refused with MESSAGE_ILLEGAL, records found in a store are decoded but not put in
    a plain ConsumeQueue (a broker would refuse a plain CQ for a BatchCQ topic)."""
    root = tmp_path / "s"
    host = (b"\x7f\0\0\1", 1)
    e = encode_message(
        "B",
        b"inner",
        queue_id=0,
        born_timestamp=1,
        born_host=host,
        store_host=host,
        sys_flag=INNER_BATCH_FLAG | NEED_UNWRAP_FLAG,
        properties={"INNER_NUM": "3", "INNER_BASE": "0"},
    )
    rec = decode_record(e.data, 0)
    assert (
        rec.sys_flag & (INNER_BATCH_FLAG | NEED_UNWRAP_FLAG) == INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
    )
    assert rec.properties["INNER_NUM"] == "3"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("B", 1)
        with pytest.raises(MessageIllegalError, match="batchconsumequeue"):
            s.put_messages([Message("B", b"x", sys_flag=INNER_BATCH_FLAG)])
        s.commitlog.append([e], [0])  # as a 5.x broker would have written it
        s.put_messages([Message("B", b"plain")])
    shutil.rmtree(root / "consumequeue")
    with MessageStore(root, _cfg()) as s:  # recovery decodes it, skips its dispatch
        assert [r.body for _, r in s.iter_queue("B", 0)] == [b"plain"]
        assert s.message_at(0).properties["INNER_BASE"] == "0"


def test_transactions_prepared_and_rollback_stay_out_of_the_consumequeue(tmp_path):
    root = tmp_path / "s"
    msgs = [
        Message("T", b"half", sys_flag=TRANSACTION_PREPARED_TYPE, keys="kp"),
        Message("T", b"plain", keys="kn"),
        Message("T", b"commit", sys_flag=TRANSACTION_COMMIT_TYPE, keys="kc"),
        Message("T", b"rollback", sys_flag=TRANSACTION_ROLLBACK_TYPE, keys="kr"),
    ]
    for m in msgs:
        m.queue_id = 0
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 1)
        res = s.put_messages(msgs)
        assert [r.queue_offset for r in res] == [0, 0, 1, 0]
        assert [r.body for _, r in s.iter_queue("T", 0)] == [b"plain", b"commit"]
        assert s.query_by_key("T", "kr") == []  # rollback is not indexed
        assert [r.body for r in s.query_by_key("T", "kp")] == [b"half"]
    assert [u[0] for u in refreader.read_consumequeue(root, "T", 0)] == [
        res[1].commitlog_offset,
        res[2].commitlog_offset,
    ]
    shutil.rmtree(root / "consumequeue")  # re-dispatch from the CommitLog: the same
    with MessageStore(root, _cfg()) as s:
        assert [r.body for _, r in s.iter_queue("T", 0)] == [b"plain", b"commit"]


def test_delayed_message_goes_to_schedule_topic(tmp_path):
    root = tmp_path / "s"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 4)
        r = s.put_messages([Message("T", b"later", queue_id=2, delay_level=3, tags="x")])[0]
        assert (r.topic, r.queue_id) == (SCHEDULE_TOPIC, 2)
        rec = s.get_message(SCHEDULE_TOPIC, 2, 0)
        assert rec.properties["REAL_TOPIC"] == "T" and rec.properties["REAL_QID"] == "2"
        assert rec.properties["DELAY"] == "3"
        deliver = r.store_timestamp + 10_000  # level 3 = 10s
        assert s.consume_queue(SCHEDULE_TOPIC, 2).unit(0)[2] == deliver
        assert s.max_offset("T", 2) == 0
    assert refreader.read_consumequeue(root, SCHEDULE_TOPIC, 2)[0][2] == deliver
    shutil.rmtree(root / "consumequeue")
    with MessageStore(root, _cfg()) as s:  # rebuilt with the same tagsCode
        assert s.consume_queue(SCHEDULE_TOPIC, 2).unit(0)[2] == deliver


def test_prop_crc_written_like_rocketmq(tmp_path):
    root = tmp_path / "s"
    with MessageStore(root, _cfg(enabled_append_prop_crc=True)) as s:
        s.create_topic("T", 1)
        with pytest.raises(MessageIllegalError, match="reserved"):
            s.put_messages([Message("T", b"x", properties={"__CRC32#": "bogus", "a": "b"})])
        # a broker-internal put may: with enabledAppendPropCRC the encoder drops it
        put_internal(
            s, [Message("T", b"x", properties={"__CRC32#": "bogus", "a": "b"}), Message("T", b"y")]
        )
    for rec in refreader.read_commitlog(root / "commitlog"):
        raw = (root / "commitlog" / "00000000000000000000").read_bytes()
        start, total = rec["physicalOffset"], rec["totalSize"]
        tail = raw[start + total - 20 : start + total]
        assert tail[:9] == b"__CRC32#\x01" and tail[-1:] == b"\x02"
        crc = zlib.crc32(raw[start : start + total - 20]) & 0x7FFFFFFF
        assert tail[9:19] == f"{crc:010d}".encode()[::-1]  # least significant digit first
        assert rec["properties"]["__CRC32#"] == tail[9:19].decode()


def test_msg_id_and_uniq_key(tmp_path):
    with MessageStore(tmp_path / "s", _cfg()) as s:
        s.create_topic("T", 1)
        res = s.put_messages([Message("T", b"a"), Message("T", b"b")])
    for r in res:
        assert len(r.msg_id) == 32 and r.msg_id == r.msg_id.upper()
        assert decode_offset_msg_id(r.msg_id)[1] == r.commitlog_offset
        raw = bytes.fromhex(r.uniq_key)  # ip(4) pid(2) classLoaderHash(4) time(4) counter(2)
        assert len(raw) == 16 and raw[:4] == b"\x7f\0\0\1"
        assert int.from_bytes(raw[4:6], "big") == os.getpid() & 0xFFFF
    a, b = (bytes.fromhex(r.uniq_key) for r in res)
    assert (
        a[:10] == b[:10]
        and int.from_bytes(b[14:], "big") == (int.from_bytes(a[14:], "big") + 1) & 0xFFFF
    )


# ---------------------------------------------------------------------------------------------
# checkpoint, abort, lock


def test_checkpoint_5x_written_and_4x_read(tmp_path):
    root = tmp_path / "s"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 1)
        r = s.put_messages([Message("T", b"x")])[0]
    assert os.path.getsize(root / "checkpoint") == 4096
    cp = refreader.read_checkpoint(root / "checkpoint")
    assert cp["physicMsgTimestamp"] == r.store_timestamp == cp["logicsMsgTimestamp"]
    assert cp["confirmPhyOffset"] == r.size
    four = tmp_path / "cp4"
    four.write_bytes((FIXTURES / "gxstax-rocketmq" / "store" / "checkpoint").read_bytes()[:24])
    c = StoreCheckpoint.read(str(four))
    assert c.physic_msg_timestamp > 0 and c.master_flushed_offset == 0


def test_abort_file_holds_pid_and_means_crash(tmp_path):
    root = tmp_path / "s"
    s = MessageStore(root, _cfg())
    assert (root / "abort").read_text() == str(os.getpid())
    assert s.last_exit_ok
    s.close()
    assert not (root / "abort").exists()
    (root / "abort").write_text("")
    with MessageStore(root, _cfg()) as s:
        assert not s.last_exit_ok


# ---------------------------------------------------------------------------------------------
# flush


def test_broker_conf_keys(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# broker\nbrokerName = b1\nflushDiskType=SYNC_FLUSH\nsyncFlushTimeout=700\n"
        "flushIntervalCommitLog=200\nflushCommitLogLeastPages=2\n"
        "flushCommitLogThoroughInterval=3000\nmappedFileSizeCommitLog=65536\n"
        "enabledAppendPropCRC=true\ncompressType=lz4\nbrokerIP1=::1\n"
    )
    c = StoreConfig.from_broker_conf(str(conf))
    assert (
        c.flush_disk_type,
        c.sync_flush_timeout,
        c.flush_interval_commit_log,
        c.flush_commit_log_least_pages,
        c.flush_commit_log_thorough_interval,
        c.mapped_file_size_commit_log,
        c.enabled_append_prop_crc,
        c.compress_type,
        c.broker_name,
    ) == ("SYNC_FLUSH", 700, 200, 2, 3000, 65536, True, "LZ4", "b1")
    assert len(c.store_host[0]) == 16
    # Java properties forms: "key value", "key: value", continuation lines, escapes
    conf.write_text(
        "flushDiskType SYNC_FLUSH\nsyncFlushTimeout: 900\n"
        "storePathRootDir=/data/\\\n    rocketmq/store\n! comment\n"
    )
    c = StoreConfig.from_broker_conf(str(conf))
    assert (c.flush_disk_type, c.sync_flush_timeout, c.store_path_root_dir) == (
        "SYNC_FLUSH",
        900,
        "/data/rocketmq/store",
    )
    conf.write_text("syncFlushTimeout=soon\n")
    with pytest.raises(ValueError, match="syncFlushTimeout"):
        StoreConfig.from_broker_conf(str(conf))


def test_async_flush_least_pages(tmp_path):
    with MessageStore(tmp_path / "s", _cfg(flush_interval_commit_log=60_000)) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"x" * 100)])
        assert s.flush(least_pages=4) is False  # < 4 dirty pages: no fsync
        s.put_messages([Message("T", b"x" * 5000) for _ in range(4)])
        assert s.flush(least_pages=4) is True
        assert s.commitlog.flushed_where == s.commitlog.max_offset


def test_sync_flush_group_commit_shares_fsyncs(tmp_path):
    cfg = _cfg(flush_disk_type="SYNC_FLUSH", flush_interval_commit_log=600_000)
    with MessageStore(tmp_path / "s", cfg) as s:
        s.create_topic("T", 4)
        n_threads, per_thread = 8, 25
        errors = []

        def put(t):
            try:
                for i in range(per_thread):
                    r = s.put_messages([Message("T", b"%d-%d" % (t, i), queue_id=t % 4)])[0]
                    # durable and visible when put returns
                    assert s.commitlog.flushed_where >= r.commitlog_offset + r.size
                    assert s.max_offset("T", r.queue_id) > r.queue_offset
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=put, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert sum(s.max_offset("T", q) for q in range(4)) == n_threads * per_thread

        # Eight putters queued behind one flush in progress are served by one fdatasync.
        before = s.commitlog.flush_count
        with s.flusher.lock:
            threads = [threading.Thread(target=put, args=(t,)) for t in range(n_threads)]
            per_thread = 1
            for t in threads:
                t.start()
            while s.flusher.pending_count() < n_threads:  # all appended, all waiting
                time.sleep(0.001)
        for t in threads:
            t.join()
        assert not errors, errors
        assert s.commitlog.flush_count - before == 1


def test_sync_flush_nothing_visible_before_flush(tmp_path):
    """ReputMessageServiceTest: under SYNC_FLUSH, unflushed records are not dispatched."""
    with MessageStore(tmp_path / "s", _cfg(flush_disk_type="SYNC_FLUSH")) as s:
        s.create_topic("T", 1)
        with s.flusher.lock:  # no flush can run
            s.put_messages([Message("T", b"m%d" % i, wait_store_msg_ok=False) for i in range(10)])
            assert s.get_messages("g", "T", 0, 0, 32).status == S.NO_MESSAGE_IN_QUEUE
            assert s.max_offset("T", 0) == 0 and s.max_offset("T", 0, committed=False) == 10
        s.flush()
        r = s.get_messages("g", "T", 0, 0, 32)
        assert r.status == S.FOUND and r.message_count == 10


def test_status_dispatch_behind_sync_flush(tmp_path):
    """status.json's dispatchBehindBytes (RocketMQ ``dispatchBehindBytes()``): under SYNC_FLUSH,
    the bytes of records appended but not dispatched yet (waiting for their flush); 0 once
    flushed. It was always 0: the reput offset was looked up under a name no store has."""
    with MessageStore(tmp_path / "s", _cfg(flush_disk_type="SYNC_FLUSH")) as s:
        s.create_topic("T", 1)
        with s.flusher.lock:  # no flush can run
            s.put_messages([Message("T", b"m%d" % i, wait_store_msg_ok=False) for i in range(10)])
            st = store_status(s)
            assert st["dispatchedOffset"] == 0
            assert st["dispatchBehindBytes"] == s.commitlog.max_offset > 0
        s.flush()
        st = store_status(s)
        assert st["dispatchedOffset"] == s.commitlog.max_offset
        assert st["dispatchBehindBytes"] == 0


def test_sync_flush_timeout(tmp_path):
    with MessageStore(
        tmp_path / "s", _cfg(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=50)
    ) as s:
        s.create_topic("T", 1)
        real = s.commitlog.files.flush
        slow = threading.Event()

        def slow_flush(*a):
            slow.wait(2)
            real(*a)

        s.commitlog.files.flush = slow_flush
        with pytest.raises(FlushDiskTimeoutError, match="FLUSH_DISK_TIMEOUT") as ei:
            s.put_messages([Message("T", b"late")])
        assert ei.value.results[0].queue_offset == 0
        slow.set()
        s.commitlog.files.flush = real
        s.flush()
        assert s.get_message("T", 0, 0).body == b"late"


@pytest.mark.parametrize("where", ["index", "second queue"])
@pytest.mark.parametrize("general", [False, True])
def test_sync_flush_dispatch_error_keeps_the_store_working(tmp_path, monkeypatch, where, general):
    """Under SYNC_FLUSH a disk error while the group commit dispatches flushed records (the
    IndexFile, or a ConsumeQueue after another queue took its units) fails no put: the records
    are on disk, so the puts succeed (RocketMQ's reput dispatches behind PUT_OK), and the next
    round's retry writes what is missing without writing a unit twice. It used to report the
    put as failed (though its record was kept: a retrying producer stored it twice), and every
    later put failed with "unit N does not follow M" until a restart."""
    import errno

    from rmqfs.engine.format.consumequeue import ConsumeQueue
    from rmqfs.engine.service.indexservice import IndexService

    with MessageStore(tmp_path / "s", _cfg(flush_disk_type="SYNC_FLUSH")) as s:
        if general:
            monkeypatch.setattr(s.putter, "_load_kernel", None)
            monkeypatch.setattr(s.putter, "_kernel", None)
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"one", keys="k1", queue_id=0)])
        calls = []
        if where == "index":
            real = IndexService.dispatch

            def fail_once(self, batch):
                calls.append(1)
                if len(calls) == 1:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return real(self, batch)

            monkeypatch.setattr(IndexService, "dispatch", fail_once)
        else:
            real_units = ConsumeQueue.put_units

            def fail_queue_1_once(self, first, units):
                if self.queue_id == 1 and not calls:
                    calls.append(1)
                    raise OSError(errno.ENOSPC, "No space left on device")
                return real_units(self, first, units)

            monkeypatch.setattr(ConsumeQueue, "put_units", fail_queue_1_once)
        two = [Message("T", b"two-%d" % q, keys=f"k2{q}", queue_id=q) for q in (0, 1)]
        res = s.put_messages(two)  # no error: the records are on disk
        assert calls and [r.queue_offset for r in res] == [1, 0]
        later = s.put_messages([Message("T", b"three", keys="k3", queue_id=1)])
        assert later[0].queue_offset == 1
        assert s.flusher.pending_count() == 0
        bodies = {q: [m.body for m in s.get_messages("g", "T", q, 0, 32).messages] for q in (0, 1)}
        assert bodies == {0: [b"one", b"two-0"], 1: [b"two-1", b"three"]}
        for key in ("k1", "k20", "k21", "k3"):
            assert len(s.query_by_key("T", key)) == 1, key  # each entry once
    with MessageStore(tmp_path / "s", _cfg(flush_disk_type="SYNC_FLUSH"), read_only=True) as s:
        assert s.max_offset("T", 0) == 2 and s.max_offset("T", 1) == 2


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
@pytest.mark.parametrize("general", [False, True])
def test_a_failed_commitlog_sync_stops_writes(tmp_path, monkeypatch, flush, general):
    """The CommitLog's fdatasync fails once (EIO: a failing disk, a thin pool out of space).
    The put waiting for it (SYNC_FLUSH) was told so, yet the next round's sync succeeded and
    made it visible, as if that success proved the pages on disk (Linux may have marked them
    clean), and later writes went on (a review). Now the store takes no more writes, nor
    answers a flush with success, until it is reopened: a put that passed its checks before
    the failure and waited for the put lock is refused too, and nothing is appended after
    the failure. What was appended before it stays for the next open's recovery (some of it
    acknowledged: a put that does not wait, one answered FLUSH_DISK_TIMEOUT): the failed
    put's message may be there, as RocketMQ keeps a FLUSH_DISK_TIMEOUT put's."""
    import errno

    from rmqfs.engine.service import putmessage as pm

    real = os.fdatasync
    fail = {"n": 0}

    def flaky(fd):
        if fail["n"]:
            fail["n"] -= 1
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    real_check = pm._check_room
    checked, go = threading.Event(), threading.Event()

    def held_check(store):  # the put of thread "late" waits here, its checks passed
        real_check(store)
        if threading.current_thread().name == "late":
            checked.set()
            go.wait()

    monkeypatch.setattr(os, "fdatasync", flaky)
    monkeypatch.setattr(pm, "_check_room", held_check)
    cfg = _cfg(flush_disk_type=flush)
    with MessageStore(tmp_path / "s", cfg) as s:
        if general:
            monkeypatch.setattr(s.putter, "_load_kernel", None)
            monkeypatch.setattr(s.putter, "_kernel", None)
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"first", keys="k1")])
        s.flush()
        late: dict = {}

        def put_late():
            try:
                late["res"] = s.put_messages([Message("T", b"late")])
            except OSError as exc:
                late["res"] = exc

        t = threading.Thread(target=put_late, name="late")
        t.start()
        assert checked.wait(10)
        fail["n"] = 1
        if flush == "SYNC_FLUSH":
            with pytest.raises(OSError) as e:
                s.put_messages([Message("T", b"second", keys="k2")])
            assert e.value.errno == errno.EIO
        else:
            s.put_messages([Message("T", b"second", keys="k2")])  # acknowledged, unsynced
            with pytest.raises(OSError):
                s.flush()  # the fsync() that fails
        go.set()
        t.join(10)
        assert isinstance(late["res"], OSError) and late["res"].errno == errno.EIO
        for attempt in (lambda: s.put_messages([Message("T", b"third")]), s.flush):
            with pytest.raises(OSError, match="a sync of the CommitLog failed") as e:
                attempt()
            assert e.value.errno == errno.EIO
        end = s.commitlog.max_offset
        time.sleep(0.05)  # group-commit and flush rounds more: nothing moves
        assert s.commitlog.max_offset == end
        visible = [m.body for m in s.get_messages("g", "T", 0, 0, 10).messages]
        assert visible == ([b"first"] if flush == "SYNC_FLUSH" else [b"first", b"second"])
    with MessageStore(tmp_path / "s", cfg) as s:  # recovery reads what the disk holds
        assert [m.body for m in s.get_messages("g", "T", 0, 0, 10).messages] == [
            b"first",
            b"second",  # (the page cache kept it: "may be stored")
        ]
        assert s.put_messages([Message("T", b"again")])[0].queue_offset == 2


# ---------------------------------------------------------------------------------------------
# getMessage


def test_get_messages_statuses(tmp_path):
    with MessageStore(tmp_path / "s", _cfg()) as s:
        s.create_topic("T", 2)
        assert s.get_messages("g", "T", 0, 0).status == S.NO_MESSAGE_IN_QUEUE
        assert s.get_messages("g", "Nope", 0, 0).status == S.NO_MATCHED_LOGIC_QUEUE
        assert s.get_messages("g", "T", 9, 0).status == S.NO_MATCHED_LOGIC_QUEUE
        s.put_messages(
            [
                Message("T", b"m%d" % i, queue_id=0, tags=("TagA", "TagB", "TagC")[i % 3])
                for i in range(60)
            ]
        )
        r = s.get_messages("g", "T", 0, 0, 10)
        assert r.status == S.FOUND and r.message_count == 10 and r.next_begin_offset == 10
        assert [m.body for m in r.messages] == [b"m%d" % i for i in range(10)]
        r = s.get_messages("g", "T", 0, 0, 100)  # broker limit: 32 per pull from memory
        assert r.message_count == 32 and r.next_begin_offset == 32
        r = s.get_messages("g", "T", 0, 0, 100, tags="TagA || TagC")
        assert all(m.tags in ("TagA", "TagC") for m in r.messages) and r.message_count == 32
        r = s.get_messages("g", "T", 0, 59, 10, tags="TagA")  # 59 is TagC
        assert r.status == S.NO_MATCHED_MESSAGE and r.next_begin_offset == 60
        assert s.get_messages("g", "T", 0, 60).status == S.OFFSET_OVERFLOW_ONE
        r = s.get_messages("g", "T", 0, 70)
        assert r.status == S.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 60
        assert s.get_messages("g", "T", 0, 5, tags="*").messages[0].body == b"m5"
        s.consume_queue("T", 0).min_offset = 20  # as after expiry (correctMinOffset)
        r = s.get_messages("g", "T", 0, 3)
        assert r.status == S.OFFSET_TOO_SMALL and r.next_begin_offset == 20
        s.writable_consume_queue("T", 1)
        r = s.get_messages("g", "T", 1, 0)
        assert r.status == S.NO_MESSAGE_IN_QUEUE and r.next_begin_offset == 0


def test_get_messages_offset_found_null_and_removing(tmp_path, small_config):
    root = tmp_path / "s"
    with MessageStore(root, small_config) as s:  # 100-unit CQ files, 64 KiB CommitLog
        s.create_topic("T", 1)
        res = s.put_messages([Message("T", b"x" * 900) for _ in range(250)])
        cq = s.consume_queue("T", 0)
        # a ConsumeQueue file unreadable under a valid offset: OFFSET_FOUND_NULL, and the
        # next offset is the start of the next ConsumeQueue file (rollNextFile)
        cq.files.read = lambda off, n: b""
        try:
            r = s.get_messages("g", "T", 0, 150)
            assert r.status == S.OFFSET_FOUND_NULL and r.next_begin_offset == 200
        finally:
            del cq.files.read
        # units whose records are gone from the CommitLog (first segment removed, min offset
        # not corrected yet): skipped to the next CommitLog file
        first = s.commitlog.files.segments.pop(0)
        try:
            r = s.get_messages("g", "T", 0, 0, 4)
            skipped = [x for x in res if x.commitlog_offset < first.end]
            assert r.status == S.FOUND
            assert r.queue_offsets[0] == len(skipped)
            assert r.messages[0].commitlog_offset == first.end
            # a pull whose scan window (maxFilterMessageSize) holds only removed records
            s.config.max_filter_message_size = 3 * 20
            r = s.get_messages("g", "T", 0, 0, 1)
            assert r.status == S.MESSAGE_WAS_REMOVING and r.next_begin_offset == 3
            r = s.get_messages("g", "T", 0, 0, 1, tags="NoSuchTag || Never")
            assert r.status == S.NO_MATCHED_MESSAGE and r.next_begin_offset == 3
        finally:
            s.commitlog.files.segments.insert(0, first)
        assert res


def test_tag_filter_is_by_hash():
    from rmqfs.engine.service.getmessage import parse_subscription

    assert parse_subscription("*") is None and parse_subscription(None) is None
    assert parse_subscription(" TagA ||TagB|| ") == {
        java_string_hash("TagA"),
        java_string_hash("TagB"),
    }


# ---------------------------------------------------------------------------------------------
# any store


@pytest.mark.parametrize(
    "name",
    [
        "apache-rocketmq-pr3535/store",
        "gxstax-rocketmq/store",
        "liushangqing9803-rocketmq-tech/store",
        "mxsm-rocketmq-rust/store-v0.9.0/local-file",
        "rocketmq-4.9.8-written/store",
    ],
)
def test_every_fixture_opens_read_only_and_writable(tmp_path, name):
    with MessageStore(FIXTURES / name, read_only=True) as s:
        for t in s.topic_names():
            for q in s.queue_ids(t):
                for _, rec in s.iter_queue(t, q):
                    assert rec.topic == t
    root = copy_fixture(name, tmp_path / "copy")
    with MessageStore(root) as s:  # writable: recovery (abnormal where `abort` was left)
        topics = s.topic_names()
        counts = {t: sum(s.max_offset(t, q) for q in s.queue_ids(t)) for t in topics}
    with MessageStore(root, read_only=True) as s:
        assert {t: sum(s.max_offset(t, q) for q in s.queue_ids(t)) for t in topics} == counts


def test_rust_fixture_with_its_index(tmp_path):
    base = FIXTURES / "mxsm-rocketmq-rust" / "store-v0.9.0"
    exp = json.loads((base / "expected-records.json").read_text())
    with MessageStore(base / "local-file", read_only=True) as s:
        assert s.commitlog.file_size == 4096
        assert s.consume_queue(exp["topic"], 0).files.file_size == 200
        assert s.max_offset(exp["topic"], exp["queue_id"]) == exp["queue_max_offset"]
        hits = s.query_by_key(exp["topic"], exp["message_key"])
        assert len(hits) == exp["index_result_count"]
        assert sorted(h.body.decode() for h in hits) == exp["message_bodies"]
        r = s.get_messages("g", exp["topic"], exp["queue_id"], 0, 32)
        assert [m.body.decode() for m in r.messages] == exp["message_bodies"]


def test_498_fixture_index_and_get_messages():
    root = FIXTURES / "rocketmq-4.9.8-written" / "store"
    expected = [
        json.loads(line)
        for line in (FIXTURES / "rocketmq-4.9.8-written" / "expected.jsonl")
        .read_text()
        .splitlines()
    ]
    expected = [e for e in expected if e.get("kind", "message") == "message"]
    with MessageStore(root, read_only=True) as s:
        e = expected[7]
        keys = e["properties"]["KEYS"].split()
        hits = s.query_by_key(e["topic"], keys[0])
        assert e["commitLogOffset"] in [h.commitlog_offset for h in hits]
        by_q = {}
        for x in expected:
            by_q.setdefault((x["topic"], x["queueId"]), []).append(x)
        for (t, q), items in by_q.items():
            off, got = 0, []
            while True:
                r = s.get_messages("g", t, q, off, 32)
                got += [m.plain_body for m in r.messages]
                if r.status != S.FOUND:
                    break
                off = r.next_begin_offset
            items.sort(key=lambda x: x["queueOffset"])
            assert got == [base64.b64decode(x["body"]) for x in items]


def test_store_written_here_loads_in_a_broker_layout(tmp_path):
    """File lengths a broker's MappedFileQueue.load requires, and topics.json fields."""
    root = tmp_path / "s"
    cfg = _cfg()
    with MessageStore(root, cfg) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"x" * 3000) for _ in range(60)])
    for f in (root / "commitlog").iterdir():
        assert f.stat().st_size == cfg.mapped_file_size_commit_log
    for f in (root / "consumequeue").glob("*/*/*"):
        assert f.stat().st_size == cfg.mapped_file_size_consume_queue
    topics = json.loads((root / "config" / "topics.json").read_text())
    t = topics["topicConfigTable"]["T"]
    assert set(t) >= {
        "topicName",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicFilterType",
        "topicSysFlag",
        "order",
        "attributes",
    }
    assert set(topics["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
    assert (root / "lock").read_bytes()[:4] == b"lock"
