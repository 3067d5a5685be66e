"""Engine tests without a mount: put/get, the on-disk bytes, reopening, fixtures."""

import base64
import json
import os

import pytest

import refreader
from conftest import FIXTURES, copy_fixture
from rmqfs.engine.errors import (
    InvalidNameError,
    MessageIllegalError,
    NoSuchTopicError,
    OffsetOutOfRangeError,
    PropertiesSizeExceededError,
    StoreLockedError,
)
from rmqfs.engine.format.config import TopicConfig
from rmqfs.engine.format.javahash import java_string_hash, tags_code
from rmqfs.engine.format.message import MAGIC_V1, decode_record
from rmqfs.engine.store import Message, MessageStore, StoreConfig


def _put_lines(store, topic, lines, **kw):
    return store.put_messages([Message(topic, line, **kw) for line in lines])


def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("TAG1") == 2567159
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == refreader.java_string_hash("\U0001f600")
    assert tags_code(None) == 0


def test_put_and_read_back(tmp_path, small_config):
    with MessageStore(tmp_path / "s", small_config) as s:
        s.create_topic("T")
        res = s.put_messages(
            [
                Message("T", b"hello", tags="TagA", keys=["k1", "k2"]),
                Message("T", b"world", queue_id=2, properties={"a": "b"}),
            ]
        )
        assert [r.queue_id for r in res] == [0, 2]
        assert [r.queue_offset for r in res] == [0, 0]
        assert res[1].commitlog_offset == res[0].commitlog_offset + res[0].size
        rec = s.get_message("T", 0, 0)
        assert rec.body == b"hello" and rec.tags == "TagA" and rec.keys == ["k1", "k2"]
        assert rec.msg_id == res[0].msg_id and len(rec.msg_id) == 32
        assert rec.uniq_key == res[0].uniq_key and len(rec.uniq_key) == 32
        assert s.get_message("T", 2, 0).properties["a"] == "b"
        with pytest.raises(OffsetOutOfRangeError):
            s.get_message("T", 0, 1)
        with pytest.raises(NoSuchTopicError):
            s.put_messages([Message("Nope", b"x")])


def test_bytes_follow_the_reference_layout(tmp_path, small_config):
    """The CommitLog and ConsumeQueue bytes, read by the independent reader, field by field."""
    root = tmp_path / "s"
    bodies = [f"line {i} ".encode() * (i % 50 + 1) for i in range(600)]
    with MessageStore(root, small_config) as s:
        s.create_topic("TopicX")
        results = _put_lines(s, "TopicX", bodies, tags="TagX", keys="a b")
    scan = refreader.scan_commitlog(root / "commitlog")
    recs = scan["records"]
    assert scan["segmentSize"] == 64 * 1024
    assert len(scan["blanks"]) >= 1  # records rolled over segment ends with a blank record
    assert len(recs) == len(bodies)
    for rec, body, res in zip(recs, bodies, results):
        refreader.check_record(rec)
        assert rec["magic"] == MAGIC_V1
        assert rec["body"] == body
        assert rec["topic"] == "TopicX"
        assert rec["physicalOffset"] == res.commitlog_offset
        assert rec["queueId"] == res.queue_id and rec["queueOffset"] == res.queue_offset
        assert rec["properties"]["TAGS"] == "TagX" and rec["properties"]["KEYS"] == "a b"
        assert rec["properties"]["UNIQ_KEY"] == res.uniq_key
        assert rec["storeTimestamp"] == res.store_timestamp
        assert refreader.offset_msg_id(rec["storeHostRaw"], rec["physicalOffset"]) == res.msg_id
    for q in range(4):
        units = refreader.read_consumequeue(root, "TopicX", q)
        expected = [
            (r.commitlog_offset, r.size, refreader.tags_code("TagX"))
            for r in results
            if r.queue_id == q
        ]
        assert units == expected
        assert (
            os.path.getsize(root / "consumequeue" / "TopicX" / str(q) / "00000000000000000000")
            == 100 * 20
        )


def test_reopen_keeps_everything_and_continues(tmp_path, small_config):
    root = tmp_path / "s"
    with MessageStore(root, small_config) as s:
        s.create_topic("T")
        first = _put_lines(s, "T", [b"a%d" % i for i in range(300)])
    assert not (root / "abort").exists()
    with MessageStore(root, small_config) as s:
        assert sum(s.max_offset("T", q) for q in range(4)) == 300
        more = _put_lines(s, "T", [b"b%d" % i for i in range(10)])
        assert (
            more[0].commitlog_offset == first[-1].commitlog_offset + first[-1].size
            or more[0].commitlog_offset % small_config.mapped_file_size_commit_log == 0
        )
        assert [r.queue_offset for r in more][:4] == [75, 75, 75, 75]
    assert len(refreader.read_commitlog(root / "commitlog")) == 310


def test_torn_tail_is_dropped(tmp_path, small_config):
    root = tmp_path / "s"
    with MessageStore(root, small_config) as s:
        s.create_topic("T")
        res = _put_lines(s, "T", [b"x" * 100 for _ in range(20)])
    last = res[-1]
    seg = root / "commitlog" / "00000000000000000000"
    with open(seg, "r+b") as f:  # cut the last record in the middle
        f.seek(last.commitlog_offset + 50)
        f.write(b"\0" * (last.size - 50))
    (root / "abort").write_text("1")
    with MessageStore(root, small_config) as s:
        assert s.commitlog.max_offset == last.commitlog_offset
        assert sum(s.max_offset("T", q) for q in range(4)) == 19


def test_size_limits(tmp_path):
    with MessageStore(tmp_path / "s", StoreConfig(mapped_file_size_commit_log=16 << 20)) as s:
        s.create_topic("T")
        s.put_messages([Message("T", b"x" * (4 << 20))])
        with pytest.raises(MessageIllegalError):
            s.put_messages([Message("T", b"x" * ((4 << 20) + 1))])
        with pytest.raises(PropertiesSizeExceededError):
            s.put_messages([Message("T", b"x", properties={"p": "v" * 32767})])
        assert s.max_offset("T", 1) == 0  # nothing of a refused put is stored
        with pytest.raises(InvalidNameError):
            s.create_topic("bad topic")


def test_second_writer_is_refused_with_the_holders_pid(tmp_path):
    import subprocess
    import sys

    root = tmp_path / "s"
    code = (
        "import sys,time; sys.path.insert(0, %r); from engine.store import MessageStore; "
        "s = MessageStore(%r); print('ready', flush=True); time.sleep(30)"
        % (str(os.path.dirname(os.path.dirname(__file__))), str(root))
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match=str(p.pid)):
            MessageStore(root)
        MessageStore(root, read_only=True).close()  # readers are allowed
    finally:
        p.kill()
        p.wait()


def test_commitlog_only_store_rebuilds_topics_and_queues(tmp_path):
    """A store holding only commitlog/ (as Java's unit tests leave it) opens with its topic."""
    root = copy_fixture("apache-rocketmq-pr3535/store", tmp_path / "s")
    with MessageStore(root) as s:
        assert s.topic_names() == ["abc"]
        assert s.max_offset("abc", 0) == 47
        recs = [r for _, r in s.iter_queue("abc", 0)]
        assert [r.queue_offset for r in recs] == list(range(47))
        assert all(r.tags == "TAG1" for r in recs)
        assert s.commitlog.file_size == 8192
    assert (
        json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]["abc"][
            "readQueueNums"
        ]
        >= 1
    )
    assert refreader.read_consumequeue(root, "abc", 0)[0] == (0, 172, 2567159)


def test_read_only_store_needs_no_writes(tmp_path):
    root = FIXTURES / "apache-rocketmq-pr3535" / "store"
    with MessageStore(root, read_only=True) as s:
        assert s.max_offset("abc", 0) == 47
        assert s.get_message("abc", 0, 46).body == b"Once, there was a chance for me!"


def test_rocketmq_498_fixture_reads_every_field(tmp_path):
    root = FIXTURES / "rocketmq-4.9.8-written" / "store"
    expected = [
        json.loads(line)
        for line in (FIXTURES / "rocketmq-4.9.8-written" / "expected.jsonl")
        .read_text()
        .splitlines()
    ]
    expected = [e for e in expected if e.get("kind", "message") == "message"]
    with MessageStore(root, read_only=True) as s:
        assert s.commitlog.file_size == 256 * 1024
        for e in expected:
            rec = s.get_message(e["topic"], e["queueId"], e["queueOffset"])
            assert rec.commitlog_offset == e["commitLogOffset"]
            assert rec.store_size == e["size"]
            assert rec.body == base64.b64decode(e["body"])
            assert rec.tags == e["tags"]
            assert rec.msg_id == e["msgId"]
            unit = s.consume_queue(e["topic"], e["queueId"]).unit(e["queueOffset"])
            assert unit == (e["commitLogOffset"], e["size"], e["tagsCode"])


def test_rust_fixture(tmp_path):
    root = FIXTURES / "mxsm-rocketmq-rust" / "store-v0.9.0" / "local-file"
    exp = json.loads(
        (FIXTURES / "mxsm-rocketmq-rust" / "store-v0.9.0" / "expected-records.json").read_text()
    )
    with MessageStore(root, read_only=True) as s:
        assert s.max_offset(exp["topic"], exp["queue_id"]) == exp["queue_max_offset"]
        bodies = [r.body.decode() for _, r in s.iter_queue(exp["topic"], exp["queue_id"])]
        assert bodies == exp["message_bodies"]


def test_decode_rejects_corruption():
    raw = bytearray(
        (
            FIXTURES / "apache-rocketmq-pr3535" / "store" / "commitlog" / "00000000000000000000"
        ).read_bytes()
    )
    decode_record(raw, 0)
    raw[100] ^= 0xFF
    from rmqfs.engine.errors import CorruptRecordError

    with pytest.raises(CorruptRecordError):
        decode_record(raw, 0)


def test_index_lookup_by_key_and_uniq_key(tmp_path, small_config):
    root = tmp_path / "s"
    with MessageStore(root, small_config) as s:
        s.create_topic("T")
        res = s.put_messages(
            [Message("T", b"m%d" % i, keys=[f"order-{i % 7}"]) for i in range(100)]
        )
        hits = s.query_by_key("T", "order-3")
        assert sorted(r.body for r in hits) == sorted(b"m%d" % i for i in range(100) if i % 7 == 3)
        # a UNIQ_KEY is not a key (queryMsgByKey: isUniqKey false keeps KEYS matches only;
        # it answered the message, as the mount's keys/ did: a review); its own lookup finds it
        assert s.query_by_key("T", res[5].uniq_key) == []
        assert [r.body for r in s.look_messages_by_uniq_key(res[5].uniq_key, "T")] == [b"m5"]
        assert s.query_by_key("T", "nope") == []
    # written in RocketMQ's layout: the independent reader finds the same offsets
    files = sorted((root / "index").iterdir())
    assert files
    found = refreader.index_lookup_dir(root / "index", "T#order-3", 64)
    assert sorted(found) == sorted(r.commitlog_offset for i, r in enumerate(res) if i % 7 == 3)
    # a deleted index is rebuilt from the CommitLog on the next open
    for f in files:
        f.unlink()
    with MessageStore(root, small_config) as s:
        assert len(s.query_by_key("T", "order-3")) == len([i for i in range(100) if i % 7 == 3])


def _old_by_msg_id(store, msg_id):
    """The code admin's queryMsgById and fusefs' messages/<msgId> each had before issue 17."""
    from rmqfs.engine.format.message import decode_offset_msg_id

    try:
        _, offset = decode_offset_msg_id(msg_id)
    except ValueError:
        return None
    rec = store.message_at(offset)
    return rec if rec is not None and rec.msg_id == msg_id.upper() else None


@pytest.mark.parametrize(
    "which",
    ["rocketmq-4.9.8-written/store", "mxsm-rocketmq-rust/store-v0.9.0/local-file", "every_kind"],
)
def test_look_message_by_offset_msg_id_equals_the_code_it_replaces(tmp_path, which):
    """MessageStore.look_message_by_offset_msg_id (lookMessageByOffset of decodeMessageId),
    now the one lookup of mount/admin.py and fusefs/nodes.py, finds what their copies found,
    and misses what they missed: another host, an offset inside a record, past the end, lower
    case, not hex, a UNIQ_KEY, padded with spaces."""
    from stores import every_kind_store

    if which == "every_kind":
        root = every_kind_store(tmp_path / "s")
    else:
        root = copy_fixture(which, tmp_path / "s")
    with MessageStore(str(root), read_only=True) as s:
        ids = []
        for t in s.topic_names():
            for q in s.queue_ids(t):
                for _, rec in s.iter_queue(t, q):
                    mid = rec.msg_id
                    other_host = ("0" if mid[0] != "0" else "1") + mid[1:]
                    inside = mid[:-1] + format((int(mid[-1], 16) + 1) % 16, "X")
                    past = mid[:-16] + format(s.commitlog.max_offset + 8, "016X")
                    ids += [
                        mid,
                        mid.lower(),
                        other_host,
                        inside,
                        past,
                        " " + mid,
                        mid[:-1] + "G",
                        mid[:20],
                        rec.uniq_key or "",
                    ]
        assert ids
        found = 0
        for mid in ids:
            old, new = _old_by_msg_id(s, mid), s.look_message_by_offset_msg_id(mid)
            assert (old is None) == (new is None), mid
            if new is not None:
                assert new.commitlog_offset == old.commitlog_offset and new.msg_id == mid.upper()
                found += 1
        assert found >= len(ids) // 9 * 2  # every msgId, in either case


def test_a_record_forged_inside_a_body_is_no_message(tmp_path):
    """Issue 26, item 5: a message whose body is a whole record of another topic (CRC right,
    PHYSICALOFFSET set to where that body lands) is not served by its offset msgId: only
    records whose ConsumeQueue unit (or index item) names their offset are. The carrier and a
    prepared transaction message (no unit: found through its index item) still are."""
    from rmqfs.engine.format.message import TRANSACTION_PREPARED_TYPE, encode_message, patch_record
    from rmqfs.engine.format.message import offset_msg_id as msg_id_of
    from rmqfs.engine.service.putmessage import put_internal

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 1)
        s.create_topic("Secret", 1)
        s.put_messages([Message("Secret", b"the real secret")])

        def forged(at: int) -> bytes:
            enc = encode_message(
                "Secret",
                b"forged body",
                queue_id=0,
                properties={},
                born_timestamp=1,
                born_host=s.store_host,
                store_host=s.store_host,
            )
            patch_record(enc.data, 0, enc.store_timestamp_pos, 0, at, 2)
            return bytes(enc.data)

        size = len(forged(0))
        first = s.put_messages([Message("T", b"\x00" * size, queue_id=0)])[0]
        raw = s.commitlog.read(first.commitlog_offset, first.size)
        inside = raw.index(b"\x00" * size)  # where a body of this size lands in T's records
        at = first.commitlog_offset + first.size + inside
        body = forged(at)
        carrier = s.put_messages([Message("T", body, queue_id=0)])[0]
        assert s.commitlog.read(at, size) == body
        forged_rec = s.message_at(at)
        assert forged_rec is not None and forged_rec.topic == "Secret"  # it decodes, CRC right
        assert s.look_message_by_offset_msg_id(msg_id_of(s.store_host, at)) is None
        assert s.look_message_by_offset_msg_id(carrier.msg_id).body == body
        assert s.look_message_by_offset_msg_id(first.msg_id) is not None
        half = put_internal(s, [Message("T", b"half", sys_flag=TRANSACTION_PREPARED_TYPE)])[0]
        assert s.look_message_by_offset_msg_id(half.msg_id).body == b"half"


@pytest.mark.parametrize("which", ["rocketmq-4.9.8-written/store", "ours"])
def test_an_open_and_close_that_write_no_message_leave_the_checkpoint_as_it_was(tmp_path, which):
    """Issue 22, section 3: an idle read-write open, an offset commit or a topic update wrote
    physicMsgTimestamp = 0 into the broker's checkpoint (and verify called it OK). Now the
    checkpoint's bytes stay the same, and the last record's store time is known after open."""
    from rmqfs.engine.format.checkpoint import StoreCheckpoint

    root = tmp_path / "s"
    if which == "ours":
        with MessageStore(str(root)) as s:
            s.create_topic("T", 2)
            s.put_messages([Message("T", b"m%d" % i) for i in range(50)])
    else:
        copy_fixture(which, root)
    before = (root / "checkpoint").read_bytes()
    cp = StoreCheckpoint.read(str(root / "checkpoint"))
    assert cp.physic_msg_timestamp > 0
    with MessageStore(str(root)) as s:  # idle
        last = s.commitlog.last_store_timestamp
        # ours: the time of the last record flushed; the broker's: of its last flush
        assert last > 0 and last >= cp.physic_msg_timestamp
        assert which != "ours" or last == cp.physic_msg_timestamp
    assert (root / "checkpoint").read_bytes() == before
    with MessageStore(str(root)) as s:  # offsets and config only
        topic = s.topic_names()[0]
        s.commit_offset("G", topic, s.queue_ids(topic)[0], 0)
        s.update_topic(topic, perm=6)
    assert (root / "checkpoint").read_bytes() == before


def _store_files(root) -> dict[str, tuple[bytes, int]]:
    """``{relative path: (content, mtime ns)}`` of every file under ``root``."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (f.read(), os.stat(p).st_mtime_ns)
    return out


def _assert_untouched(before: dict, after: dict) -> None:
    """Every file of ``before`` is in ``after`` with its bytes and mtime, but ``abort``
    (RocketMQ's shutdown deletes it too); nothing new but ``lock`` (a broker creates it)."""
    changed = [
        rel
        for rel, (data, mtime) in before.items()
        if rel != "abort" and after.get(rel) != (data, mtime)
    ]
    assert changed == []
    assert set(after) - set(before) <= {"lock"}
    assert "abort" not in after


IDLE_STORES = [
    "rocketmq-4.9.8-written/store",
    "rocketmq-5.3.3-timer/store",
    "mxsm-rocketmq-rust/store-v0.9.0/local-file",
    "liushangqing9803-rocketmq-tech/store",
    "gxstax-rocketmq/store",
]


@pytest.mark.parametrize("which", IDLE_STORES)
def test_an_idle_read_write_open_and_close_changes_no_byte_of_a_brokers_store(tmp_path, which):
    """Issue 35, item 6: a read-write open that puts nothing, reads and closes wrote the
    checkpoint at close (indexMsgTimestamp, physicMsgTimestamp, confirmPhyOffset: the 4.9.8
    store's indexMsgTimestamp became the last store time, a broker's 0 changed), so an rsync
    of a backup copied it again. RocketMQ's own open and close leave it as it was
    (``StoreCheckpoint.flush`` writes back the values it read). Now no file differs in bytes
    or mtime; ``abort`` goes (a clean shutdown), ``lock`` may appear (as a broker's)."""
    root = copy_fixture(which, tmp_path / "s")
    before = _store_files(root)
    with MessageStore(str(root)) as s:
        for topic in s.topic_names():
            for q in s.queue_ids(topic):
                s.get_messages("G", topic, q, 0, 4)
    _assert_untouched(before, _store_files(root))


def test_an_idle_open_of_a_store_rmqfs_wrote_changes_no_byte(tmp_path, small_config):
    """Issue 35, item 6, on a store this engine wrote and closed cleanly (several segments,
    index files, offsets): the next open and close, with reads, leave every file as it was;
    one put then moves the checkpoint again."""
    from rmqfs.engine.format.checkpoint import StoreCheckpoint

    root = tmp_path / "s"
    with MessageStore(str(root), small_config) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"m%d" % i * 100, keys=[f"k{i}"]) for i in range(2000)])
        s.commit_offset("G", "T", 0, 3)
    before = _store_files(root)
    cp = StoreCheckpoint.read(str(root / "checkpoint"))
    assert cp.index_msg_timestamp > 0 and cp.confirm_phy_offset > 0
    with MessageStore(str(root), small_config) as s:
        s.get_messages("G", "T", 0, 0, 32)
        s.query_by_key("T", "k7")
        s.flush()
    _assert_untouched(before, _store_files(root))
    with MessageStore(str(root), small_config) as s:
        end = s.put_messages([Message("T", b"one more", keys=["k-new"])])[0]
    cp2 = StoreCheckpoint.read(str(root / "checkpoint"))
    assert cp2.confirm_phy_offset == end.commitlog_offset + end.size
    assert cp2.physic_msg_timestamp >= cp.physic_msg_timestamp


def test_look_messages_by_uniq_key_serves_only_that_uniq_key(tmp_path, small_config):
    """MessageStore.look_messages_by_uniq_key (queryMsgByUniqueKey; the one lookup of
    ``query-msg -i`` and ``messages/<UNIQ_KEY>``): every UNIQ_KEY of a broker-written store finds
    its record, in every topic or its own; a message whose KEYS holds another's UNIQ_KEY is no
    hit, nor is the id in lower case."""
    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "s")
    with MessageStore(str(root), read_only=True) as s:
        recs = [
            rec
            for t in s.topic_names()
            for q in s.queue_ids(t)
            for _, rec in s.iter_queue(t, q)
            if rec.uniq_key
        ]
        assert recs
        for rec in recs[:50]:
            for topic in (None, rec.topic):
                found = s.look_messages_by_uniq_key(rec.uniq_key, topic)
                assert [r.commitlog_offset for r in found] == [rec.commitlog_offset]
            assert s.look_messages_by_uniq_key(rec.uniq_key.lower()) == []
    with MessageStore(tmp_path / "w", small_config) as s:
        s.create_topic("T")
        (a,) = s.put_messages([Message("T", b"a")])
        s.put_messages([Message("T", b"decoy", keys=a.uniq_key)])
        # the index holds both under the id; a key lookup keeps the one with it in KEYS
        assert [r.body for r in s.query_by_key("T", a.uniq_key)] == [b"decoy"]
        found = s.look_messages_by_uniq_key(a.uniq_key)
        assert [r.commitlog_offset for r in found] == [a.commitlog_offset]


def test_a_record_that_expires_while_read_is_out_of_range_not_damage(tmp_path, monkeypatch):
    """getMessage reads a unit, then its record: when retention (or a followed writer's)
    deletes the record's file in between, the message is gone, not damaged
    (OffsetOutOfRangeError, the queue not marked damaged; CI saw a follower mount answer EIO
    and mark a healthy queue damaged). A record missing while its file is still there stays
    damage."""
    from rmqfs.engine.errors import CorruptRecordError, OffsetOutOfRangeError
    from rmqfs.engine.format.commitlog import CommitLog

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"m%d" % i, queue_id=0) for i in range(3)])

        def gone(off, size):
            raise CorruptRecordError("record not in the CommitLog", off)

        monkeypatch.setattr(s.commitlog, "read_message", gone)
        with pytest.raises(CorruptRecordError):  # its file is there: damage
            s.get_message("T", 0, 1)
        assert ("T", 0) in s.damaged
        s.damaged.clear()
        monkeypatch.setattr(CommitLog, "min_offset", property(lambda self: 1 << 40))
        with pytest.raises(OffsetOutOfRangeError, match="expired"):
            s.get_message("T", 0, 1)
        assert not s.damaged
        # the queue's minOffset followed (found by a flaky follower test: offsets.json asked
        # for the first message three times while the follower's refresh had not corrected
        # the queue yet, and answered EINVAL)
        assert s.min_offset("T", 0) == s.max_offset("T", 0) == 3


def test_the_broker_name_carries_where_it_came_from(tmp_path):
    """Issue 35, item 5: settle_broker_name takes --broker-name, then broker.conf's
    brokerName=, then a snapshot's SNAPSHOT.json (object storage), then the store's
    brokerIdentity, then the host name, and says which."""
    import socket

    from rmqfs.engine.storeconfig import (
        BROKER_NAME_CONF,
        BROKER_NAME_HOST,
        BROKER_NAME_IDENTITY,
        BROKER_NAME_OPTION,
        BROKER_NAME_SNAPSHOT,
        settle_broker_name,
    )

    host = socket.gethostname() or "DEFAULT_BROKER"
    root = tmp_path / "store"
    root.mkdir()
    cfg = settle_broker_name(None, str(root))
    assert (cfg.broker_name, cfg.broker_name_rule) == (host, BROKER_NAME_HOST)
    assert cfg.broker_name_source() == "the host name (no --config)"
    bare = tmp_path / "bare.conf"
    bare.write_text("flushDiskType=ASYNC_FLUSH\n")
    cfg = settle_broker_name(StoreConfig.from_broker_conf(str(bare)), str(root))
    assert cfg.broker_name_source() == f"the host name ({bare} has no brokerName=)"
    (root / "brokerIdentity").write_text("DefaultCluster#from-identity#0")
    cfg = settle_broker_name(StoreConfig.from_broker_conf(str(bare)), str(root))
    assert (cfg.broker_name, cfg.broker_name_rule) == ("from-identity", BROKER_NAME_IDENTITY)
    assert cfg.broker_name_source() == "the store's brokerIdentity file"
    # a snapshot in object storage: the name of the broker it was taken of, before the
    # brokerIdentity it holds and the host name (the mount used to take the host name)
    cfg = settle_broker_name(None, str(root), None, snapshot_broker="from-manifest")
    assert (cfg.broker_name, cfg.broker_name_rule) == ("from-manifest", BROKER_NAME_SNAPSHOT)
    assert cfg.broker_name_source() == "the snapshot's SNAPSHOT.json"
    named = tmp_path / "broker.conf"
    named.write_text("brokerName = broker-a\n")
    cfg = settle_broker_name(StoreConfig.from_broker_conf(str(named)), str(root))
    assert (cfg.broker_name, cfg.broker_name_rule) == ("broker-a", BROKER_NAME_CONF)
    assert cfg.broker_name_source() == f"brokerName= in {named}"
    cfg = settle_broker_name(StoreConfig.from_broker_conf(str(named)), str(root), "b2")
    assert (cfg.broker_name, cfg.broker_name_rule) == ("b2", BROKER_NAME_OPTION)
    assert cfg.broker_name_source() == "--broker-name"
    with pytest.raises(ValueError, match="--broker-name"):
        settle_broker_name(None, str(root), "")
    from rmqfs.engine.live.status import store_status

    with MessageStore(str(root), settle_broker_name(None, str(root), "b3")) as s:
        st = store_status(s)
        assert (st["brokerName"], st["brokerNameFrom"]) == ("b3", "--broker-name")


@pytest.mark.parametrize(
    "lines, read_refused, write_refused",
    [
        ("storePathRootDir=/srv/store\nstorePathCommitLog=/srv/store/commitlog", False, False),
        ("storePathCommitLog=/home/rocketmq/store/commitlog", False, False),
        ("storePathRootDir=/srv/store\nstorePathCommitLog=/disk2/commitlog", True, True),
        ("storePathCommitLog=/d1/commitlog,/d2/commitlog", True, True),
        ("readOnlyCommitLogStorePaths=/old/commitlog", True, True),
        ("storePathDLedgerCommitLog=/elsewhere/log", True, True),
        ("storePathRootDir=/s\nstorePathDLedgerCommitLog=/s/dledger-n0/data", False, False),
        ("storePathEpochFile=/other/epoch", False, True),
        ("enableDLegerCommitLog=true", False, True),
        ("enableControllerMode=true", False, True),
        ("storeType=defaultRocksDB", False, True),
        ("storeType=default\nenableDLegerCommitLog=false", False, False),
        ("storeType=Default", False, False),  # (StoreType is compared ignoring case)
        ("storeType=DEFAULTROCKSDB", False, True),
        # a Windows broker's paths (a store copied from one, with its broker.conf; a properties
        # file escapes its backslashes)
        (
            "storePathRootDir=C:\\\\mq\\\\store\nstorePathCommitLog=C:\\\\mq\\\\store\\\\commitlog",
            False,
            False,
        ),
        ("storePathCommitLog=C:\\\\Users\\\\mq\\\\store\\\\commitlog", False, False),
        ("storePathCommitLog=D:\\\\disk2\\\\commitlog", True, True),
    ],
)
def test_broker_conf_settings_that_move_the_files_are_refused(
    tmp_path, lines, read_refused, write_refused
):
    """A broker.conf whose keys put the CommitLog (or a DLedger log) where rmqfs does not read
    it, or make the broker expect a store rmqfs does not write (DLedger, RocksDB queues,
    controller mode), refuses the open (writing, or at all), before anything is created: the
    keys were ignored, and a writable open made a second, empty CommitLog under the root."""
    from rmqfs.engine.errors import UnsupportedLayoutError

    conf = tmp_path / "broker.conf"
    conf.write_text(lines + "\n")
    cfg = StoreConfig.from_broker_conf(str(conf))
    assert bool(cfg.layout_refusals(read_only=True)) == read_refused
    assert bool(cfg.layout_refusals(read_only=False)) == write_refused
    root = tmp_path / "store"
    if write_refused:
        with pytest.raises(UnsupportedLayoutError, match=str(conf)) as info:
            MessageStore(str(root), cfg)
        assert ("read-only" in str(info.value)) == (not read_refused)
        assert not root.exists()
    else:
        MessageStore(str(root), cfg).close()
    root.mkdir(exist_ok=True)
    if read_refused:
        with pytest.raises(UnsupportedLayoutError):
            MessageStore(str(root), cfg, read_only=True)
    else:
        MessageStore(str(root), cfg, read_only=True).close()


def test_a_misspelt_broker_conf_key_gets_a_note(tmp_path):
    """Keys rmqfs does not read are ignored, as the broker ignores keys it does not know; one
    that looks like a misspelt setting rmqfs reads gets a note naming the setting."""
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskTyp=SYNC_FLUSH\nbrokerRole=ASYNC_MASTER\nmaxMessageSiz=5\n")
    cfg = StoreConfig.from_broker_conf(str(conf))
    assert cfg.flush_disk_type == "ASYNC_FLUSH"  # ignored
    assert [n.rsplit("mean ", 1)[1] for n in cfg.conf_notes] == [
        "flushDiskType?",
        "maxMessageSize?",
    ]
    conf.write_text("flushDiskType=SYNC_FLUSH\nbrokerRole=SLAVE\nlistenPort=10911\n")
    assert StoreConfig.from_broker_conf(str(conf)).conf_notes == []
    # RocketMQ's own keys that look like ours are not notes; 4.3's spellings are read
    conf.write_text(
        "brokerIP2=10.0.0.2\naccessMessageInMemoryHotRatio=26\n"
        "mappedFileSizeConsumeQueueExt=50331648\nmapperFileSizeBatchConsumeQueue=13800000\n"
        "mapedFileSizeCommitLog=65536\nmapedFileSizeConsumeQueue=2000\n"
    )
    cfg = StoreConfig.from_broker_conf(str(conf))
    assert cfg.conf_notes == []
    assert (cfg.mapped_file_size_commit_log, cfg.mapped_file_size_consume_queue) == (65536, 2000)
    assert not [k for k, _ in cfg.to_broker_conf() if k.startswith("maped")]


def test_a_commit_that_must_find_its_group_never_brings_a_deleted_group_back(tmp_path):
    """The mount's offset file checked that its group still existed and then committed: a
    ``rmdir groups/G`` between the two brought G back with one offset. The check and the
    commit are one step against deleteSubGroup now (``existing_group``): a deletion that
    comes while a commit is under way waits for it and removes what it wrote."""
    import threading

    from rmqfs.engine.errors import NoSuchGroupError

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"x"), Message("T", b"y")])
        s.commit_offset("G", "T", 0, 1)
        real = s.consumer_offsets.commit_queues
        in_commit, go_on = threading.Event(), threading.Event()

        def slow_commit(*args):
            in_commit.set()
            go_on.wait(10)
            real(*args)

        s.consumer_offsets.commit_queues = slow_commit
        committer = threading.Thread(
            target=s.commit_offset, args=("G", "T", 0, 2), kwargs={"existing_group": True}
        )
        committer.start()
        assert in_commit.wait(10)
        deleter = threading.Thread(
            target=s.delete_group, args=("G",), kwargs={"remove_offset": True}
        )
        deleter.start()
        deleter.join(0.3)
        go_on.set()
        committer.join(10)
        deleter.join(10)
        s.consumer_offsets.commit_queues = real
        assert not s.has_group("G") and s.consumer_offsets.groups() == set()
        with pytest.raises(NoSuchGroupError):
            s.commit_offset("G", "T", 0, 2, existing_group=True)
        assert not s.has_group("G")
        s.commit_offset("G", "T", 0, 2)  # (the API's plain commit still creates the group)
        assert s.has_group("G")


def test_delete_topic_never_holds_the_put_lock_while_it_waits_for_the_offsets(tmp_path):
    """A snapshot takes the consumer offsets' lock and then the put lock
    (engine.live.snapshot.freeze); deleteTopic took the put lock and then the offsets' lock
    (removing the topic's offsets), so the two deadlocked and the mount froze. Holding the
    offsets' lock as a snapshot does, the put lock must stay free while deleteTopic waits."""
    import threading

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("D", 1)
        s.put_messages([Message("D", b"x")])
        s.commit_offset("G", "D", 0, 1)
        s.consumer_offsets.lock.acquire()  # as freeze does first
        t = threading.Thread(target=s.delete_topic, args=("D",))
        t.start()
        try:
            got = s.put_lock.acquire(timeout=5)  # as freeze does next
            assert got, "deleteTopic held the put lock while waiting for the offsets' lock"
            s.put_lock.release()
        finally:
            s.consumer_offsets.lock.release()
            t.join(10)
        assert not t.is_alive() and "D" not in s.topic_names()
        assert s.consumer_offsets.topics_of("G") == {}


@pytest.mark.parametrize(
    "bad",
    [
        {"tags": "a\udc80"},
        {"keys": "k\udc80"},
        {"keys": ["ok", "k\udc80"]},
        {"properties": {"p": "\udc80"}},
        {"sharding_key": "s\udc80"},
    ],
)
def test_put_internal_refuses_text_utf8_cannot_encode(tmp_path, bad):
    """The broker's own put path has no client rules, but a lone surrogate cannot be encoded:
    one MessageIllegalError (the store's error type, EINVAL), nothing of the batch stored, in
    the compiled path and the general one alike."""
    from rmqfs.engine.errors import MessageIllegalError
    from rmqfs.engine.service.putmessage import put_internal

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 1)
        end = s.commitlog.max_offset
        for batch in (
            [Message("T", b"x", **bad)],
            [Message("T", b"ok"), Message("T", b"x", **bad)],
        ):
            with pytest.raises(MessageIllegalError, match="not encodable as UTF-8"):
                put_internal(s, batch)
            assert s.commitlog.max_offset == end and s.max_offset("T", 0) == 0
        assert put_internal(s, [Message("T", b"fine", tags="a")])[0].queue_offset == 0


def test_offset_by_time_while_expiry_deletes_under_the_queue(tmp_path):
    """Between the deletion of a CommitLog file and the correction of the queues' min offsets
    (expiry runs them one after the other), a search by time met units whose records are gone
    and failed; they count as older than any time, as units below getMinPhyOffset do in the
    broker's getOffsetInQueueByTime."""
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    with MessageStore(str(tmp_path / "s"), cfg) as s:
        s.create_topic("T", 1)
        res = [s.put_messages([Message("T", b"x" * 200)])[0] for _ in range(60)]
        assert s.commitlog.segment_count > 3
        s.commitlog.files.delete_first()  # the file goes; the queue's min offset not moved yet
        gone = sum(r.commitlog_offset < s.commitlog.min_offset for r in res)
        assert gone and s.min_offset("T", 0) == 0
        assert s.offset_by_time("T", 0, 0) == gone
        last = res[-1]
        assert s.offset_by_time("T", 0, last.store_timestamp) <= last.queue_offset
        assert s.offset_by_time("T", 0, last.store_timestamp + 10_000) == 60


def test_no_commit_lands_after_its_topic_is_deleted(tmp_path):
    """A commit racing ``delete_topic`` either lands before the deletion (and is cleaned with
    it) or is refused (the topic is gone, ConsumerManageProcessor's TOPIC_NOT_EXIST): it used
    to pass its check before the deletion and land after the offsets' cleanup, so a topic
    created again under the name started from the stale offset."""
    import threading

    from rmqfs.engine.errors import NoSuchGroupError, NoSuchTopicError

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_group("g")
        for _ in range(15):
            s.create_topic("T", 1)
            stop = threading.Event()

            def commit(stop=stop):
                while not stop.is_set():
                    try:
                        s.commit_offset("g", "T", 0, 0, existing_group=True)
                        s.clone_group_offset("g", "h", "T")
                    except (NoSuchTopicError, NoSuchGroupError):
                        pass

            th = threading.Thread(target=commit)
            th.start()
            s.commit_offset("g", "T", 0, 0, existing_group=True)
            s.delete_topic("T")
            stop.set()
            th.join()
            assert s.consumer_offsets.topics_of("g").get("T") is None
            assert s.consumer_offsets.topics_of("h").get("T") is None
        with open(tmp_path / "s" / "config" / "consumerOffset.json") as f:
            assert "T@" not in f.read()


def test_touch_written_stamps_the_files_written_since_and_no_other(tmp_path):
    """A store into a page of a shared mapping that is dirty already moves no mtime, so an
    incremental backup of the files (rsync, restic: size and mtime) skipped acknowledged
    messages. ``touch_written`` (which the mount's raw/ asks before answering attributes, and
    every flush runs) sets the mtime of each file written since the last call, and leaves
    every other file's alone."""
    old = 1_000_000_000 * 10**9  # 2001: an mtime no write of this test can give

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"a", keys="k", queue_id=0)])
        s.put_messages([Message("T", b"b", keys="k", queue_id=1)])
        s.flush()
        root = tmp_path / "s"
        files = {
            "commitlog": next((root / "commitlog").iterdir()),
            "cq0": next((root / "consumequeue" / "T" / "0").iterdir()),
            "cq1": next((root / "consumequeue" / "T" / "1").iterdir()),
            "index": next((root / "index").iterdir()),
        }
        for p in files.values():
            os.utime(p, ns=(old, old))  # as a write into a dirty page leaves it: stale
        s.touch_written()  # nothing written since the flush: nothing stamped
        assert {k: p.stat().st_mtime_ns for k, p in files.items()} == dict.fromkeys(files, old)
        s.put_messages([Message("T", b"c", keys="k2", queue_id=0)])
        s.flush()  # (single puts' index entries are written at a flush)
        for p in files.values():
            os.utime(p, ns=(old, old))
        s.put_messages([Message("T", b"d", keys="k3", queue_id=0)])
        s.index_service.write_pending()
        s.touch_written()
        got = {k: p.stat().st_mtime_ns > old for k, p in files.items()}
        assert got == {"commitlog": True, "cq0": True, "cq1": False, "index": True}


def test_a_checkpoint_later_than_the_records_kept_is_lowered_by_recovery(tmp_path):
    """A copy of raw/ whose checkpoint was read after its CommitLog (or a crash whose tail
    recovery dropped) has a logicsMsgTimestamp after the last record kept; the store wrote it
    back at its next flush and verify then failed ("logicsMsgTimestamp ... after the last
    record's store time"). Recovery lowers it to the last record's store time."""
    from rmqfs.engine.format.checkpoint import StoreCheckpoint
    from rmqfs.engine.tools.verify import verify_store

    root = tmp_path / "s"
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        res = s.put_messages([Message("T", b"a")])
    last = res[0].store_timestamp
    path = str(root / "checkpoint")
    cp = StoreCheckpoint.read(path)
    cp.logics_msg_timestamp = last + 60_000  # as a later flush of the live store wrote it
    cp.write(path)
    (root / "abort").write_text("")
    with MessageStore(str(root)) as s:
        assert s.dispatched_store_timestamp == last
    assert StoreCheckpoint.read(path).logics_msg_timestamp == last
    assert verify_store(str(root)).ok


def test_a_msgid_naming_an_offset_inside_a_body_reads_eight_bytes(tmp_path):
    """``message_at`` (``messages/<offset msgId>`` of the mount) at an offset inside a record:
    the bytes there are not a record's head (no magic, or a size past maxMessageSize + 64 KiB)
    and nothing more is read (found by a review: a body of spaces claimed 538,976,288 bytes,
    and a lookup that answered ENOENT read them all: 588 MB of the daemon's memory). A real
    record at its own offset is still found."""
    root = tmp_path / "s"
    claim = (4 << 20) + (64 << 10) + 1  # one past the largest record a broker writes
    forged = claim.to_bytes(4, "big") + MAGIC_V1.to_bytes(4, "big")
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        body = b" " * 4096 + forged + b" " * 64
        r = s.put_messages([Message("T", body, queue_id=0)])[0]
        s.put_messages([Message("T", b"x" * (1 << 20), queue_id=0) for _ in range(5)])
        raw = s.commitlog.files.read(r.commitlog_offset, r.size)
        at_forged = r.commitlog_offset + raw.index(forged)
        reads = []
        real = s.commitlog.files.read
        s.commitlog.files.read = lambda off, n: reads.append(n) or real(off, n)
        assert s.message_at(r.commitlog_offset + 200) is None  # spaces: 538,976,288 bytes
        assert s.message_at(at_forged) is None  # a record magic, 4 MiB + 64 KiB + 1 claimed
        assert max(reads) <= 8
        assert s.message_at(r.commitlog_offset).body == body


def test_delete_topic_deletes_its_pop_retry_topics(tmp_path):
    """RocketMQ 5.x ``deleteTopic`` with ``clearRetryTopicWhenDeleteTopic`` (on by default)
    also deletes ``%RETRY%<group>+<topic>`` and ``%RETRY%<group>_<topic>`` of each group
    with offsets on the topic (found by a review: they stayed); other groups' retry topics
    and the group's own ``%RETRY%<group>`` stay, and with the setting off nothing more goes."""
    for clear in (True, False):
        root = tmp_path / f"s{clear}"
        with MessageStore(str(root), StoreConfig(clear_retry_topic_when_delete_topic=clear)) as s:
            for t in ("T", "%RETRY%g_T", "%RETRY%h_T", "%RETRY%g", "U"):
                s.create_topic(t, 1)
            s.topic_config.put(TopicConfig("%RETRY%g+T", 1, 1))  # (the broker names V2 so)
            s.put_messages([Message("T", b"x")])
            s.commit_offset("g", "T", 0, 1)
            done = s.delete_topic("T")
            gone = {"T", "%RETRY%g+T", "%RETRY%g_T"} if clear else {"T"}
            assert {r["topic"] for r in done["retryTopics"]} == gone - {"T"}
            assert (
                set(s.topic_names())
                == {"T", "%RETRY%g+T", "%RETRY%g_T", "%RETRY%h_T", "%RETRY%g", "U"} - gone
            )
