"""The engine's fast paths write and read exactly what the straightforward paths do.

* ``engine.service.putmessage.put_plain`` (fused encode/append/dispatch) against the general put path
  (``encode_message`` + ``CommitLog.append`` + ``_dispatch``): byte-identical CommitLog,
  ConsumeQueue and IndexFile files, and equal PutResults, over segment and index-file rolls.
* ``IndexFile.put_hashed`` (batched writes) against ``put_key`` one by one: identical files.
* the loop-free Java ``hashCode`` against the textbook loop.
* the recovery scan against a full decode of every record.
"""

from __future__ import annotations

import itertools
import os
import random
import struct
import zlib
from pathlib import Path

import pytest

import rmqfs.engine.store as store_mod
from conftest import recover_decoding_every_record
from rmqfs.engine.errors import InvalidNameError, MessageTooLargeError, PutMessageError
from rmqfs.engine.format.config import TopicConfig
from rmqfs.engine.format.consumequeue import ConsumeQueue
from rmqfs.engine.format.indexfile import IndexFile
from rmqfs.engine.format.javahash import (
    combine_u32,
    index_key_hash,
    java_hash_u32,
    java_string_hash,
    utf16_len,
)
from rmqfs.engine.format.message import MAGIC_V2, cal_msg_length, encode_properties, topic_needs_v2
from rmqfs.engine.format.uniqkey import UniqKeyGenerator
from rmqfs.engine.service import dispatch, putmessage, recovery
from rmqfs.engine.service.indexservice import FEW_ENTRIES, IndexService
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from stores import fix_uniq_keys, put_internal

T0 = 1_795_305_347_998


def java_hash_loop(s: str) -> int:
    """``String.hashCode`` the textbook way, over UTF-16 code units."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def test_java_hash_without_loops_matches_the_loop():
    rnd = random.Random(7)
    alphabet = [chr(c) for c in range(1, 128)] + ["é", "中", "€", "\uffff", "😀", "\U0010ffff"]
    for n in itertools.chain(range(40), (511, 512, 513, 1030, 5000)):
        for _ in range(10):
            s = "".join(rnd.choice(alphabet) for _ in range(n))
            assert java_string_hash(s) == java_hash_loop(s), s
            a, b = s[: n // 2], s[n // 2 :]
            assert combine_u32(java_hash_u32(a), java_hash_u32(b), utf16_len(b)) == java_hash_u32(s)
    assert java_string_hash("TagA") == 2598919  # Java: "TagA".hashCode()
    assert index_key_hash("polygenelubricants") == 0  # hashCode() == Integer.MIN_VALUE


def test_uniq_key_hash_matches_the_string():
    g = UniqKeyGenerator()
    for t in (T0, T0, T0 + 1, T0 + 86_400_000 * 40, 1_600_000_000_000):
        for _ in range(3):
            key, h = g.next_with_hash(t)
            assert len(key) == 32 and h == java_hash_u32(key)


# V2 records (MessageVersion.MESSAGE_VERSION_V2): a retry topic of the longest a broker
# stores (255 bytes, HookUtils.MAX_TOPIC_LENGTH), an ordinary 150-char topic (RocketMQ's store
# classes take it), and 65 code points that are 128 UTF-16 units (Java's topic.length()).
LONG_TOPICS = ["%RETRY%" + "g" * 248, "L" * 150, "\U0001f600" * 63 + "ab"]


def _batches(rnd: random.Random):
    """Mixed batches: tags, keys (list and str), sharding keys, explicit queues, born times."""
    out = []
    for b in range(12):
        msgs = []
        for i in range(rnd.choice((1, 3, 17, 40))):
            kw = {}
            if rnd.random() < 0.7:
                kw["tags"] = rnd.choice(["TagA", "TagB", "標籤"])
            r = rnd.random()
            if r < 0.3:
                kw["keys"] = [f"order-{b}-{i}", "", "k é"]
            elif r < 0.5:
                kw["keys"] = f"a{i} b{i}"
            topic = rnd.choice(["T", "Other", *LONG_TOPICS])
            if rnd.random() < 0.2:
                kw["sharding_key"] = f"shard-{i % 3}"
            elif rnd.random() < 0.2:
                kw["queue_id"] = rnd.randrange(4 if topic == "T" else 2)
            if rnd.random() < 0.3:
                kw["born_timestamp"] = T0 - rnd.randrange(10_000_000)
            if rnd.random() < 0.2:
                kw["born_host"] = (b"\x0a\x00\x00\x07", 5555)
            body = bytes(rnd.randrange(256) for _ in range(rnd.choice((0, 1, 100, 700))))
            msgs.append(Message(topic, body, flag=rnd.choice((0, 0, 3)), **kw))
        out.append(msgs)
    return out


def _run(root: Path, batches, general: bool, monkeypatch) -> list:
    clock = itertools.count(T0, 1700)  # store times cross seconds: index timeDiff varies
    monkeypatch.setattr(store_mod.time, "time", lambda: next(clock) / 1000)
    if general:
        monkeypatch.setattr(putmessage, "put_plain", lambda store, msgs, *args: None)
    cfg = StoreConfig(
        mapped_file_size_commit_log=16 * 1024,
        mapped_file_size_consume_queue=10 * 20,
        max_hash_slot_num=16,
        max_index_num=64,
    )
    s = MessageStore(str(root), cfg)
    fix_uniq_keys(s, 65530)  # wraps the 16-bit counter
    s.create_topic("T", 4)
    s.create_topic("Other", 2)
    for t in LONG_TOPICS:
        s.topic_config.put(TopicConfig(t, 2, 2))  # the broker's own path (no client rule)
    results = []
    for msgs in batches:
        # internal: the odd keys ("", "k é" in a list) are refused by the validation of
        # engine/service/validation.py; here both paths must encode them the same way
        results += put_internal(s, msgs)
    s.close()
    monkeypatch.undo()
    return results


def _files(root: Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def test_fast_put_path_writes_the_general_paths_bytes(tmp_path, monkeypatch):
    batches = _batches(random.Random(3))
    fast = _run(tmp_path / "fast", batches, False, monkeypatch)
    general = _run(tmp_path / "general", batches, True, monkeypatch)
    assert fast == general
    assert len({r.commitlog_offset // (16 * 1024) for r in fast}) >= 3  # segments rolled
    assert {r.topic for r in fast} >= set(LONG_TOPICS)
    for sub in ("commitlog", "consumequeue"):
        assert _files(tmp_path / "fast", sub) == _files(tmp_path / "general", sub), sub
    # Index files are named by creation time: compare them in order.
    fi = list(_files(tmp_path / "fast", "index").values())
    gi = list(_files(tmp_path / "general", "index").values())
    assert len(fi) > 1 and fi == gi


def test_put_results_read_lazily_equal_the_general_paths(tmp_path, monkeypatch):
    """A compiled batch's PutResults are built as they are read (PutResults): each way of
    reading them (an index, a negative one, a slice, iteration, equality) gives the general
    path's PutResult for the same put, and an index past the end raises IndexError."""
    batches = [b for b in _batches(random.Random(5)) if len(b) > 1][:6]
    general = []
    for b in batches:
        general.append(_run(tmp_path / f"g{len(general)}", [b], True, monkeypatch))
    for k, b in enumerate(batches):
        tick = itertools.count(T0, 1700).__next__
        monkeypatch.setattr(store_mod.time, "time", lambda tick=tick: tick() / 1000)
        s = MessageStore(
            str(tmp_path / f"f{k}"), StoreConfig(mapped_file_size_commit_log=16 * 1024)
        )
        fix_uniq_keys(s, 65530)
        s.create_topic("T", 4)
        s.create_topic("Other", 2)
        for t in LONG_TOPICS:
            s.topic_config.put(TopicConfig(t, 2, 2))
        got = put_internal(s, b)
        want = general[k]
        assert isinstance(got, putmessage.PutResults), type(got)
        assert len(got) == len(want)
        assert (
            got[0] == want[0]
            and got[-1] == want[-1]
            and got[len(want) // 2] == want[len(want) // 2]
        )
        with pytest.raises(IndexError):
            got[len(want)]
        with pytest.raises(IndexError):
            got[-len(want) - 1]
        assert got[1:3] == want[1:3]
        assert list(got) == want and got == want and got == got and got != want[:-1]
        assert got[-1] == want[-1]  # (read from the built list now)
        s.close()
        monkeypatch.undo()


def test_fast_put_path_writes_v2_records_for_long_topics(tmp_path):
    """put_plain itself (not a fallback to the general path) writes the V2 record of a topic
    over 127 chars: magic 0xDAA320AB, a 2-byte topic length, calMsgLength + 1."""
    with MessageStore(str(tmp_path / "s")) as s:
        for t in LONG_TOPICS + ["T"]:
            s.topic_config.put(TopicConfig(t, 1, 1))
        for t in LONG_TOPICS + ["T"]:
            res = putmessage.put_plain(s, [Message(t, b"body", tags="a")])
            assert res is not None, t
            rec = s.get_message(t, 0, 0)
            assert (rec.topic, rec.body, rec.magic == MAGIC_V2) == (t, b"body", t != "T")
            raw = s.commitlog.read(res[0].commitlog_offset, res[0].size)
            assert raw == s.commitlog.read(rec.commitlog_offset, rec.store_size)
            assert res[0].size == cal_msg_length(
                0, 4, len(t.encode()), len(encode_properties(rec.properties)), t != "T"
            )
        with pytest.raises(InvalidNameError):
            s.topic_config.put(TopicConfig("%RETRY%" + "g" * 249, 1, 1))  # 256 bytes


def test_topic_needs_v2_counts_java_chars():
    assert not topic_needs_v2("a" * 127) and topic_needs_v2("a" * 128)
    assert topic_needs_v2("\U0001f600" * 64)  # 64 code points, 128 UTF-16 units
    assert not topic_needs_v2("é" * 127)  # 254 bytes but 127 chars: V1 in Java, refused here
    assert not topic_needs_v2("a" * 200, auto_v2=False)


def test_fast_put_path_falls_back_for_other_messages(tmp_path):
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 2)
        res = s.put_messages(
            [Message("T", b"a", properties={"p": "v"}), Message("T", b"b", tags="x")]
        )
        assert [r.queue_offset for r in res] == [0, 0]
        rec = s.get_message("T", 0, 0)
        assert rec.properties["p"] == "v" and rec.body == b"a"
        assert s.get_message("T", 1, 0).tags == "x"


def test_batched_index_writes_equal_put_key(tmp_path):
    """``put_hashed`` over batches = ``put_key`` item by item, byte for byte, full file."""
    rnd = random.Random(11)
    keys = [f"T#k{rnd.randrange(40)}" for _ in range(300)]
    single = IndexFile(str(tmp_path / "single"), 16, 400, end_phy_offset=0, end_timestamp=T0 - 5000)
    batched = IndexFile(
        str(tmp_path / "batched"), 16, 400, end_phy_offset=0, end_timestamp=T0 - 5000
    )
    entries = []
    for i, k in enumerate(keys):
        off, ts = 1000 + 97 * i, T0 + 333 * i
        assert single.put_key(k, off, ts)
        entries += (index_key_hash(k), off, ts)
    i = 0
    while i < len(keys):
        n = rnd.choice((1, 2, 7, 64))
        j = batched.put_hashed(entries[: 3 * (i + n)], i)
        assert j == min(i + n, len(keys))
        i = j
    single.close()
    batched.close()
    assert Path(single.path).read_bytes() == Path(batched.path).read_bytes()


def test_batched_index_write_stops_when_full_and_service_rolls(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 4, 10)
    entries = []
    n = FEW_ENTRIES + 1  # more than a small put's, which would wait in memory
    for i in range(n):
        entries += (index_key_hash(f"T#{i}"), 100 + i, T0 + i)
    assert f.put_hashed(entries) == 9  # indexNum - 1 items fit
    assert f.put_hashed(entries, 9) == 9
    svc = IndexService(str(tmp_path / "idx"), 4, 10)
    svc.put_hashed(entries)
    assert len(svc.files) == -(-n // 9)
    assert svc.query("T", "15") == [115]
    assert svc.query("T", str(n - 1)) == [100 + n - 1]
    svc.close()


def test_index_put_hashed_after_truncate_and_put_key(tmp_path):
    """The slot table follows put_key and truncate: same bytes as doing it all by put_key."""
    a = IndexFile(str(tmp_path / "a"), 8, 100)
    b = IndexFile(str(tmp_path / "b"), 8, 100)
    keys = [f"T#{i % 13}" for i in range(60)]
    for i, k in enumerate(keys[:30]):
        a.put_key(k, 10 * i, T0 + 1000 * i)
        b.put_hashed([index_key_hash(k), 10 * i, T0 + 1000 * i])
    a.truncate(150)
    b.truncate(150)
    b.put_key(keys[30], 150, T0 + 15_000)
    a.put_key(keys[30], 150, T0 + 15_000)
    for i, k in enumerate(keys[31:], start=31):
        a.put_key(k, 10 * i, T0 + 1000 * i)
    b.put_hashed(
        [
            x
            for i, k in enumerate(keys[31:], start=31)
            for x in (index_key_hash(k), 10 * i, T0 + 1000 * i)
        ]
    )
    a.close()
    b.close()
    assert Path(a.path).read_bytes() == Path(b.path).read_bytes()


def test_iter_queue_span_reads_equal_single_reads(tmp_path):
    """iter_queue (CommitLog spans) yields what get_message (one record each) returns, over
    interleaved queues, segment rolls and a start/end window."""
    cfg = StoreConfig(mapped_file_size_commit_log=8 * 1024, mapped_file_size_consume_queue=10 * 20)
    rnd = random.Random(5)
    with MessageStore(str(tmp_path / "s"), cfg) as s:
        s.create_topic("T", 3)
        s.create_topic("U", 1)
        for _ in range(20):
            s.put_messages(
                [
                    Message(
                        rnd.choice("TU"), bytes(rnd.randrange(1, 900)), tags=rnd.choice([None, "a"])
                    )
                    for _ in range(7)
                ]
            )
        for topic, q in (("T", 0), ("T", 1), ("T", 2), ("U", 0)):
            hi = s.max_offset(topic, q)
            got = list(s.iter_queue(topic, q))
            assert [o for o, _ in got] == list(range(hi))
            assert [r for _, r in got] == [s.get_message(topic, q, o) for o in range(hi)]
            assert [o for o, _ in s.iter_queue(topic, q, 2, hi - 1)] == list(range(2, hi - 1))


def _scan_all(store: MessageStore, raw: bool, production: bool = False):
    cl = store.commitlog
    if production:  # CommitLog.scan: scan_raw plus a decode of each record
        out = [
            (r.commitlog_offset, r.store_size, r.topic, r.queue_id, r.queue_offset, r.sys_flag)
            for r in cl.scan(0)
        ]
    elif raw:
        out = [
            (phys, total, topic, qid, qoff, flag)
            for (_b, _p, phys, total, topic, qid, qoff, flag) in cl.scan_raw(0)
        ]
    else:
        out = [
            (r.commitlog_offset, r.store_size, r.topic, r.queue_id, r.queue_offset, r.sys_flag)
            for r in reference_scan(cl, 0)
        ]
    return out, cl.scan_end, cl.scan_error is None


@pytest.mark.parametrize("damage", ["none", "crc", "torn", "zeros", "size"])
def test_scan_raw_stops_where_scan_stops(tmp_path, damage):
    """The recovery scan without decoding accepts and rejects exactly what the decoding scan
    does, on clean logs and on damaged tails."""
    cfg = StoreConfig(mapped_file_size_commit_log=8 * 1024)
    root = tmp_path / "s"
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 2)
        s.create_topic("x" * 120, 1)
        for i in range(30):
            res = s.put_messages(
                [
                    Message(
                        "T" if i % 3 else "x" * 120,
                        b"b%d" % i * (i * 13 % 300),
                        keys=["k"] if i % 2 else None,
                    )
                ]
            )
        last = s.commitlog.max_offset
        rec_at = res[0].commitlog_offset
    seg = sorted((root / "commitlog").iterdir())[-1]
    data = bytearray(seg.read_bytes())
    end = last - int(seg.name)
    start = rec_at - int(seg.name)  # the last record: 84-byte header, then a 231-byte body
    if damage == "crc":
        data[start + 150] ^= 0xFF
    elif damage == "torn":
        data[start + 50 : end] = bytes(end - start - 50)  # the tail never reached the disk
    elif damage == "zeros":
        data[start + 84 : start + 104] = bytes(20)
    elif damage == "size":
        data[start + 3] += 1  # TOTALSIZE one more than the fields add up to
    seg.write_bytes(bytes(data))
    with MessageStore(str(root), cfg, read_only=True) as s:
        a = _scan_all(s, raw=False)
        b = _scan_all(s, raw=True)
        c = _scan_all(s, raw=True, production=True)
    assert a == b == c
    if damage != "none":
        assert a[1] < last


def test_abnormal_recovery_redispatches_exactly_what_is_missing(tmp_path):
    """Recovery passes over records the queues and the index hold and re-dispatches the rest:
    after a crash that lost the tail of one ConsumeQueue and the newest index file, the
    rebuilt files equal the ones written by the puts, byte for byte."""
    cfg = StoreConfig(
        mapped_file_size_commit_log=32 * 1024,
        mapped_file_size_consume_queue=50 * 20,
        max_hash_slot_num=32,
        max_index_num=128,
    )
    root = tmp_path / "s"
    rnd = random.Random(9)
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 3)
        for i in range(40):
            s.put_messages(
                [Message("T", bytes(rnd.randrange(1, 400)), keys=[f"k{i}-{j}"]) for j in range(5)]
            )
        valid = s.max_offset("T", 1) * 20
    cq_before = _files(root, "consumequeue")
    index_before = list(_files(root, "index").values())
    assert len(index_before) > 1
    # The crash: queue 1 lost its last 17 units (and its newest file), the newest index file
    # is gone, and the abort file is left behind.
    qdir = root / "consumequeue" / "T" / "1"
    keep = valid - 17 * 20
    for p in sorted(qdir.iterdir()):
        start = int(p.name)
        if start >= keep:
            p.unlink()
        elif start + p.stat().st_size > keep:
            data = bytearray(p.read_bytes())
            data[keep - start :] = bytes(len(data) - (keep - start))
            p.write_bytes(bytes(data))
    sorted((root / "index").iterdir())[-1].unlink()
    (root / "abort").write_text("1")
    with MessageStore(str(root), cfg) as s:
        assert not s.last_exit_ok
        assert s.max_offset("T", 1) == valid // 20
    assert _files(root, "consumequeue") == cq_before
    assert list(_files(root, "index").values()) == index_before


def test_put_hashed_restores_slots_when_the_header_write_fails(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 2, 16)
    f.put_hashed([index_key_hash("T#a"), 10, T0])
    before = Path(f.path).read_bytes()
    real = f._io

    class FailHeader:
        def __init__(self):
            self.read = real.read

        def write(self, off, data):
            if off == 0:
                raise OSError(28, "No space left on device")
            real.write(off, data)

    f._io = FailHeader()
    entries = [index_key_hash(k) for k in ("T#b", "T#c", "T#a")]
    with pytest.raises(OSError):
        f.put_hashed([x for i, h in enumerate(entries) for x in (h, 20 + i, T0)])
    f._io = real
    assert f.index_count == 2
    after = Path(f.path).read_bytes()
    used = 40 + 2 * 4
    assert after[:used] == before[:used]  # header and slots as before; items are unreachable
    assert f.select_phy_offsets("T#a", 10) == [10]
    f.put_hashed([index_key_hash("T#a"), 30, T0 + 1000])  # the slot table is still right
    assert f.select_phy_offsets("T#a", 10) == [30, 10]
    f.close()


@pytest.mark.parametrize("n", [5, 1])
@pytest.mark.parametrize("where", ["index", "consumequeue", "queue files"])
def test_fast_put_path_undoes_a_batch_the_disk_refused(tmp_path, monkeypatch, n, where):
    """A put whose dispatch fails (ENOSPC) in the index, in a ConsumeQueue (a batch's second
    queue: its first queue's units are taken back) or while a ConsumeQueue's files open (EMFILE:
    its queue's first unit since the store opened) is undone whole: a batch, and a single put
    whose record went straight into the CommitLog's mapping (its bytes zeroed again)."""
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"first", keys=["a"])])
        end, q0, q1 = s.commitlog.max_offset, s.max_offset("T", 0), s.max_offset("T", 1)
        owner, name = {
            "index": (IndexService, "put_hashed"),
            # (a single put's one unit: put_unit)
            "consumequeue": (ConsumeQueue, "put_units" if n > 1 else "put_unit"),
            "queue files": (MessageStore, "writable_consume_queue"),
        }[where]
        real = getattr(owner, name)
        calls = []

        def fail(self, *args):
            calls.append(args)
            if where != "index" and n > 1 and len(calls) == 1:
                return real(self, *args)  # the first queue's units go in, the second's fail
            raise OSError(28 if where != "queue files" else 24, "refused")

        monkeypatch.setattr(owner, name, fail)
        with pytest.raises(OSError):
            s.put_messages([Message("T", b"lost %d" % i, keys=["a"]) for i in range(n)])
        assert s.commitlog.max_offset == end
        assert (s.max_offset("T", 0), s.max_offset("T", 1)) == (q0, q1)
        assert s.commitlog.files.read(end, 4096) == bytes(4096)
        monkeypatch.setattr(owner, name, real)
        res = s.put_messages([Message("T", b"second", keys=["a"])])
        assert res[0].commitlog_offset == end
        assert [r.body for r in s.query_by_key("T", "a")] == [b"second", b"first"]
        assert [r.body for _, r in s.iter_queue("T", res[0].queue_id)][-1] == b"second"


@pytest.mark.parametrize("start", [3, 0])
def test_a_batch_refused_in_the_next_queue_file_leaves_no_unit_behind(tmp_path, monkeypatch, start):
    """A batch whose ConsumeQueue units cross into a new file, and the disk refuses that file
    (ENOSPC): the units already written into the earlier file stayed there past the queue's end
    (only the count was taken back), so verify failed and every later open logged a repair a
    unit. The put is undone on disk too: the earlier file's bytes as they were, no new file,
    and a store that opens clean. ``start`` 0: the queue's first units, into its first file."""
    import rmqfs.engine.format.mappedfile as mf

    cfg = StoreConfig(mapped_file_size_consume_queue=10 * 20)
    root = tmp_path / "s"
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 1)
        if start:
            s.put_messages([Message("T", b"x%d" % i) for i in range(start)])
        qdir = root / "consumequeue" / "T" / "0"
        before = {p.name: p.read_bytes() for p in qdir.iterdir()} if qdir.exists() else {}
        end = s.commitlog.max_offset
        real = mf.create_preallocated
        made = []

        def refuse_the_second(path, size, exclusive=False):
            if "consumequeue" in str(path):
                made.append(path)
                if len(made) == (1 if start else 2):
                    raise OSError(28, "No space left on device")
            return real(path, size, exclusive)

        monkeypatch.setattr(mf, "create_preallocated", refuse_the_second)
        with pytest.raises(OSError):
            s.put_messages([Message("T", b"lost %d" % i, queue_id=0) for i in range(12)])
        monkeypatch.undo()
        assert s.commitlog.max_offset == end and s.max_offset("T", 0) == start
        after = {p.name: p.read_bytes() for p in qdir.iterdir()} if qdir.exists() else {}
        assert after == before
        res = s.put_messages([Message("T", b"kept %d" % i, queue_id=0) for i in range(12)])
        assert [r.queue_offset for r in res] == list(range(start, start + 12))
    with MessageStore(str(root), cfg, read_only=True) as s:
        assert not s.consume_queue("T", 0).repairs
        assert [r.body for _, r in s.iter_queue("T", 0)][start:] == [
            b"kept %d" % i for i in range(12)
        ]


def test_scan_raw_handles_v2_ipv6_and_crc_property_records(tmp_path):
    """Records off the common layout (V2 magic for a 200-char topic, IPv6 hosts, a __CRC32#
    property) are walked exactly as the decoding scan walks them."""
    from rmqfs.engine.format.commitlog import CommitLog
    from rmqfs.engine.format.message import encode_message

    cl = CommitLog(str(tmp_path / "commitlog"), 4096)
    v4, v6 = (b"\x7f\x00\x00\x01", 1), (bytes(range(16)), 2)
    msgs = []
    for i in range(40):
        topic = "t" * 200 if i % 4 == 1 else "T"
        props = {"UNIQ_KEY": f"u{i}"}
        if i % 5 == 2:
            props["__CRC32#"] = "123"
        msgs.append(
            encode_message(
                topic,
                b"x" * (i * 7),
                queue_id=i % 3,
                properties=props,
                born_timestamp=T0,
                born_host=v6 if i % 3 == 0 else v4,
                store_host=v6 if i % 6 == 0 else v4,
            )
        )
    cl.append(msgs, list(range(40)), T0)
    a = [
        (r.commitlog_offset, r.store_size, r.topic, r.queue_id, r.queue_offset, r.sys_flag)
        for r in reference_scan(cl, 0)
    ]
    b = [
        (phys, total, topic, qid, qoff, flag)
        for (_b, _p, phys, total, topic, qid, qoff, flag) in cl.scan_raw(0)
    ]
    assert a == b and len(a) == 40
    assert {t for _, _, t, *_ in b} == {"T", "t" * 200}
    cl.close()


# ----------------------------------------------------------------------------------------------
# After the merge of the engine features: the fast paths against main's rules.


def _scan_both(root: Path, cfg: StoreConfig):
    with MessageStore(str(root), cfg, read_only=True) as s:
        return _scan_all(s, raw=False), _scan_all(s, raw=True)


def _fill(root: Path, cfg: StoreConfig, n: int = 40) -> list:
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 2)
        return [
            s.put_messages(
                [Message("T", b"m%d" % i * (i * 7 % 200 + 1), tags="A", keys=["k%d" % i])]
            )[0]
            for i in range(n)
        ]


@pytest.mark.parametrize(
    "case", ["blank_in_last_file", "short_file", "empty_last_file", "header_only_file"]
)
def test_scan_raw_stops_where_scan_stops_on_mains_rules(tmp_path, case):
    """main's stopping rules: a blank record in the last file ends the scan there; a segment
    file that ends early (shorter than a record header at a record boundary) stops it."""
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    root = tmp_path / "s"
    res = _fill(root, cfg)
    segs = sorted((root / "commitlog").iterdir())
    assert len(segs) >= 3
    last = segs[-1]
    if case == "blank_in_last_file":
        last.unlink()  # the file before ends with its blank record and is now the last one
    elif case == "short_file":
        cut = [r for r in res if r.commitlog_offset >= int(last.name)][-1]
        last.write_bytes(last.read_bytes()[: cut.commitlog_offset - int(last.name) + 5])
    elif case == "empty_last_file":
        last.write_bytes(b"")
    else:
        last.write_bytes(last.read_bytes()[:6])
    a, b = _scan_both(root, cfg)
    assert a == b
    if case == "blank_in_last_file":
        assert a[1] < int(last.name) and a[2]  # ends at the blank, a clean end


def _tear_last_properties(root: Path, res: list) -> int:
    """Zero the last 3 bytes of the last record's properties (the UNIQ_KEY tail and its
    separator): TOTALSIZE and body CRC still pass."""
    last = res[-1]
    seg = sorted((root / "commitlog").iterdir())[-1]
    data = bytearray(seg.read_bytes())
    end = last.commitlog_offset + last.size - int(seg.name)
    data[end - 3 : end] = bytes(3)
    seg.write_bytes(bytes(data))
    return last.commitlog_offset


@pytest.mark.parametrize("abnormal", [False, True])
def test_torn_properties_of_the_last_record_dropped_with_the_raw_scan(
    tmp_path, monkeypatch, abnormal
):
    """A last record torn inside its properties is dropped (5.x-style writers end the
    properties with a separator) by the recovery built on scan_raw, exactly as with every
    record decoded. (Normal recovery starts at the last record, so there is no record
    before it to compare with and it is kept, as on main.)"""
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    ends = []
    for light in (True, False):
        root = tmp_path / f"s{light}"
        res = _fill(root, cfg)
        torn_at = _tear_last_properties(root, res)
        a, b = _scan_both(root, cfg)
        assert a == b  # both scans accept the torn record; recovery drops it
        if abnormal:
            (root / "abort").write_text("1")
        if not light:
            recover_decoding_every_record(monkeypatch)
        with MessageStore(str(root), cfg) as s:
            if abnormal:
                assert s.commitlog.max_offset == torn_at
                assert s.max_offset("T", res[-1].queue_id) == res[-1].queue_offset
            ends.append(s.commitlog.max_offset)
        monkeypatch.undo()
    assert ends[0] == ends[1]
    assert _files(tmp_path / "sTrue", "consumequeue") == _files(tmp_path / "sFalse", "consumequeue")


def test_a_last_record_in_4_9_form_after_5_x_ones_is_kept(tmp_path):
    """4.9.x's ``messageProperties2String`` drops the last PROPERTY_SEPARATOR (5.x keeps it):
    a store a 5.x broker wrote and a 4.9.x one went on writing (a downgrade) has a whole last
    record whose properties end with a value's character, after records whose end with
    \x02. It passes every RocketMQ check and RocketMQ keeps it after a crash; so does rmqfs
    (only properties ending in the zeros a tear leaves are torn)."""
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    root = tmp_path / "s"
    res = _fill(root, cfg)
    last = res[-1]
    seg = sorted((root / "commitlog").iterdir())[-1]
    data = bytearray(seg.read_bytes())
    at = last.commitlog_offset - int(seg.name)
    rec = data[at : at + last.size]
    assert rec[-1] == 2
    body_len = struct.unpack_from(">i", rec, 84)[0]
    props_at = 88 + body_len + 1 + rec[88 + body_len]
    # the same record as 4.9.x writes it: the separator gone, TOTALSIZE and the length one less
    struct.pack_into(">i", rec, 0, last.size - 1)
    struct.pack_into(">h", rec, props_at, struct.unpack_from(">h", rec, props_at)[0] - 1)
    data[at : at + last.size] = rec[:-1] + b"\0"
    seg.write_bytes(bytes(data))
    (root / "abort").write_text("1")
    with MessageStore(str(root), cfg) as s:
        assert s.commitlog.max_offset == last.commitlog_offset + last.size - 1
        assert s.recovery_report.records_cut == 0
        got = s.get_message("T", last.queue_id, last.queue_offset)
        assert got.uniq_key == last.uniq_key and got.keys == ["k39"]


def test_recovery_without_decoding_rewrites_a_torn_unit_in_the_middle(tmp_path, monkeypatch):
    """After a power cut a unit in the middle of what recovery re-dispatches may be torn
    (tagsCode half written): the units compared without decoding the records find it and the
    queue is rewritten from there, byte for byte as the puts wrote it."""
    cfg = StoreConfig(mapped_file_size_commit_log=64 * 1024, message_index_enable=False)
    root = tmp_path / "s"
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 1)
        for i in range(60):
            s.put_messages([Message("T", b"x" * 50, tags="Tag%d" % (i % 4), keys=["k%d" % i])])
    before = _files(root, "consumequeue")
    qfile = sorted((root / "consumequeue" / "T" / "0").iterdir())[0]
    data = bytearray(qfile.read_bytes())
    data[30 * 20 + 12 + 6] ^= 0x5A  # tagsCode of unit 30 of 60
    qfile.write_bytes(bytes(data))
    (root / "abort").write_text("1")
    (root / "checkpoint").unlink()  # nothing vouched for: abnormal recovery from the start
    calls = []
    real = recovery.light_unit
    monkeypatch.setattr(recovery, "light_unit", lambda *a: calls.append(1) or real(*a))
    with MessageStore(str(root), cfg) as s:
        assert [r.tags for _, r in s.iter_queue("T", 0)] == ["Tag%d" % (i % 4) for i in range(60)]
    assert calls  # the records were not decoded
    assert _files(root, "consumequeue") == before


def test_fast_put_path_falls_back_for_every_engine_feature(tmp_path):
    """delay_level, compress, wait_store_msg_ok, MessageBatches of several topics,
    enabledAppendPropCRC, compressMsgBodyOverHowmuch, an IPv6 store host and BatchCQ topics all
    take the general path; a fallback leaves round-robin and UNIQ_KEY counter as they were.
    (SYNC_FLUSH stores and MessageBatches of one topic take the fast path:
    tests/engine/test_put_kernel.py.)"""
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 4)
        assert putmessage.put_plain(s, [Message("T", b"plain")]) is not None
        rr, counter = dict(s.putter.round_robin), s.uniq_keys.counter
        for m in (
            Message("T", b"d", delay_level=2),
            Message("T", b"c", compress=True),
            Message("T", b"c", compress=False),
            Message("T", b"w", wait_store_msg_ok=False),
        ):
            assert putmessage.put_plain(s, [Message("T", b"first"), m]) is None
            assert s.putter.round_robin == rr and s.uniq_keys.counter == counter
        for name, value in (
            ("enabled_append_prop_crc", True),
            ("compress_msg_body_over_howmuch", 0),
        ):
            old = getattr(s.config, name)
            setattr(s.config, name, value)
            assert putmessage.put_plain(s, [Message("T", b"x")]) is None
            setattr(s.config, name, old)
        s.batch_cq_topics.add("T")
        assert putmessage.put_plain(s, [Message("T", b"x")]) is None
        s.batch_cq_topics.discard("T")
        s.create_topic("U", 1)
        two_topics = [Message("T", b"t"), Message("U", b"u")]
        assert putmessage.put_plain(s, two_topics, batch=True) is None
        with pytest.raises(PutMessageError, match="single topic"):
            s.put_messages(two_topics, batch=True)
        assert s.putter.round_robin == rr and s.uniq_keys.counter == counter
        seen = []
        real = putmessage.put_plain
        putmessage.put_plain = lambda store, msgs, *args: seen.append(1) or real(store, msgs, *args)
        try:
            res = s.put_messages([Message("T", b"b%d" % i) for i in range(3)], batch=True)
            assert seen == [1] and len({r.queue_id for r in res}) == 1
            res = s.put_messages([Message("T", b"delayed", delay_level=1)])
        finally:
            putmessage.put_plain = real
        assert res[0].topic == "SCHEDULE_TOPIC_XXXX" and seen == [1, 1]
    with MessageStore(str(tmp_path / "v6"), StoreConfig(broker_ip1="::1")) as s:
        s.create_topic("T", 1)
        assert putmessage.put_plain(s, [Message("T", b"x")]) is None


def test_message_batches_take_the_fast_path_whole(tmp_path, monkeypatch):
    """A MessageBatch of one topic on the compiled path: one queue for the batch (the round
    robin advanced once, or the first message's sharding key or queueId), consecutive queue
    offsets, the records whole in one segment (a batch that does not fit in the rest of it
    starts the next, behind the blank), a batch larger than a segment refused with nothing
    written; the records read back in order."""
    served = []
    real = putmessage.put_plain
    monkeypatch.setattr(
        putmessage,
        "put_plain",
        lambda store, msgs, batch=False, *args: (
            served.append(batch) or real(store, msgs, batch, *args)
        ),
    )
    with MessageStore(str(tmp_path / "s"), StoreConfig(mapped_file_size_commit_log=16384)) as s:
        s.create_topic("T", 4)
        a = s.put_messages([Message("T", b"a" * 1000) for _ in range(10)], batch=True)
        b = s.put_messages([Message("T", b"b" * 1000) for _ in range(5)], batch=True)
        assert [r.queue_id for r in a] == [0] * 10 and [r.queue_id for r in b] == [1] * 5
        assert [r.queue_offset for r in a] == list(range(10))
        assert [r.queue_offset for r in b] == list(range(5))
        assert a[-1].commitlog_offset + a[-1].size + 5 * b[0].size > 16384 - 8
        assert b[0].commitlog_offset == 16384  # rolled whole
        end = s.commitlog.max_offset
        with pytest.raises(MessageTooLargeError, match=r"^batch of .* 16384-byte"):
            s.put_messages([Message("T", b"c" * 1000) for _ in range(16)], batch=True)
        assert s.commitlog.max_offset == end and s.max_offset("T", 2) == 0
        rr = s.putter.round_robin["T"]
        with pytest.raises(MessageTooLargeError, match=r"^batch of "):
            s.put_messages([Message("T", b"c" * 20000)], batch=True)  # a batch of one
        assert s.putter.round_robin["T"] == rr + 1  # as select_queue advances it (general path)
        with pytest.raises(MessageTooLargeError, match=r"^record of "):
            s.put_messages([Message("T", b"c" * 20000)])  # a single put, refused alike
        assert s.putter.round_robin["T"] == rr + 2
        sharded = s.put_messages([Message("T", b"d", sharding_key="k") for _ in range(3)], True)
        assert len({r.queue_id for r in sharded}) == 1
        assert sharded[0].queue_id == (zlib.crc32(b"k") & 0x7FFFFFFF) % 4
        first_two = [Message("T", b"e", queue_id=2), Message("T", b"f", queue_id=0)]
        given = s.put_messages(first_two, batch=True)
        assert [r.queue_id for r in given] == [2, 2]
        got = s.get_messages("G", "T", 1, 0, 5)
        assert [m.body for m in got.messages] == [b"b" * 1000] * 5
    # the compiled path took every put (none fell back), the single put as no batch
    assert served == [True] * 4 + [False] + [True] * 2


def test_fast_put_path_refused_when_the_disk_is_full(tmp_path):
    import errno

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"a")])
        end = s.commitlog.max_offset
        s.disk_full = True
        with pytest.raises(OSError) as exc:
            s.put_messages([Message("T", b"plain")])
        assert exc.value.errno == errno.ENOSPC and s.commitlog.max_offset == end
        s.disk_full = False
        assert s.put_messages([Message("T", b"b")])[0].queue_offset == 1


def test_fast_and_general_puts_mixed_with_engine_features(tmp_path, monkeypatch):
    """Batches of plain messages (fast path) between delayed, compressed, transactional and
    MessageBatch puts (general path): the store's files are those of the general path alone,
    and queue offsets (topicQueueTable) continue across both paths."""
    from rmqfs.engine.format.message import TRANSACTION_PREPARED_TYPE

    def run(root, general):
        now = [T0]  # one store time per put, however often a put reads the clock
        monkeypatch.setattr(store_mod.time, "time", lambda: now[0] / 1000)
        if general:
            monkeypatch.setattr(putmessage, "put_plain", lambda store, msgs, *args: None)
        cfg = StoreConfig(
            mapped_file_size_commit_log=16 * 1024,
            mapped_file_size_consume_queue=10 * 20,
            max_hash_slot_num=16,
            max_index_num=64,
        )
        s = MessageStore(str(root), cfg)
        fix_uniq_keys(s, 100)
        s.create_topic("T", 2)
        out = []
        rnd = random.Random(5)
        for b in range(30):
            now[0] += 1700
            kind = b % 6
            msgs = [
                Message(
                    "T",
                    bytes(rnd.randrange(256) for _ in range(rnd.choice((1, 300)))),
                    tags=rnd.choice((None, "A", "B")),
                    keys=[f"k{b}-{i}"],
                )
                for i in range(rnd.choice((1, 4, 9)))
            ]
            if kind == 1:
                msgs[-1].delay_level = 3
            elif kind == 2:
                msgs[0].compress = True
                msgs[0].body = b"z" * 5000
            elif kind == 3:
                msgs[0].sys_flag = TRANSACTION_PREPARED_TYPE
            out += s.put_messages(msgs, batch=(kind == 4))
            if kind == 5:
                out.append(s.max_offset("T", 0, committed=False))
        s.close()
        monkeypatch.undo()
        return out

    fast = run(tmp_path / "fast", False)
    general = run(tmp_path / "general", True)
    assert fast == general
    for sub in ("commitlog", "consumequeue"):
        assert _files(tmp_path / "fast", sub) == _files(tmp_path / "general", sub), sub
    assert list(_files(tmp_path / "fast", "index").values()) == list(
        _files(tmp_path / "general", "index").values()
    )


def test_light_dispatch_equals_the_decoded_dispatch(tmp_path):
    """Recovery's undecoded dispatch gives each record the tagsCode, offset and size the
    decoded one gives, whatever the properties hold (TAGS first, last, empty, duplicated,
    inside another value, not UTF-8, a V2 topic)."""
    from rmqfs.engine.format.commitlog import CommitLog
    from rmqfs.engine.format.message import decode_record, encode_message

    cl = CommitLog(str(tmp_path / "commitlog"), 64 * 1024)
    props_list = [
        {},
        {"TAGS": "a"},
        {"XTAGS": "b", "TAGS": "c"},
        {"TAGS": ""},
        {"k": "TAGS"},
        {"TAGS": "標籤", "UNIQ_KEY": "u"},
        {"KEYS": "x", "TAGS": "t"},
        {"TAGS": "a", "XXXX": "b"},
        {"XXXX": "b", "TAGS": "a"},
        {"k": "vTAGS\x01z"},
        {"TAGS": "\x01"},
        {"TAGS": "ab", "QQQQ": "cd"},
    ]
    msgs = [
        encode_message(
            "t" * 200 if i % 2 else "T",
            b"body%d" % i,
            queue_id=0,
            properties=p,
            born_timestamp=T0,
            born_host=(b"\x7f\x00\x00\x01", 1),
            store_host=(b"\x7f\x00\x00\x01", 2),
        )
        for i, p in enumerate(props_list)
    ]
    res = cl.append(msgs, list(range(len(msgs))), T0)
    seg = sorted((tmp_path / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    for r, old, new in (
        (res[7], b"XXXX\x01b", b"TAGS\x01b"),
        (res[8], b"XXXX\x01b", b"TAGS\x01b"),
        (res[11], b"ab", b"\xff\xfe"),
    ):
        at = data.index(old, r.offset, r.offset + r.size)
        data[at : at + len(old)] = new
    seg.write_bytes(bytes(data))
    cl.close()
    with MessageStore(
        str(tmp_path), StoreConfig(mapped_file_size_commit_log=64 * 1024), read_only=True
    ) as s:
        n = 0
        for buf, pos, phys, _size, topic, qid, qoff, flag in s.commitlog.scan_raw(0):
            a = (topic, qid, phys, *recovery.light_unit(buf, pos), qoff, flag)
            b = dispatch.dispatch_of(s, decode_record(buf, pos, check_crc=False))
            assert a == (
                b.topic,
                b.queue_id,
                b.commitlog_offset,
                b.size,
                b.tags_code,
                b.store_timestamp,
                b.queue_offset,
                b.sys_flag,
            )
            n += 1
        assert n == len(msgs)


# ----------------------------------------------------------------------------------------------
# The reference walker for the scan tests.

from rmqfs.engine.errors import CorruptRecordError  # noqa: E402
from rmqfs.engine.format.commitlog import SCAN_CHUNK  # noqa: E402
from rmqfs.engine.format.message import BLANK, MAGIC_BLANK, MAGIC_V1, MAGIC_V2  # noqa: E402
from rmqfs.engine.format.message import decode_record as _decode_record  # noqa: E402


def reference_scan(self, start: int, check_crc: bool = True, end: int | None = None):
    """The record-by-record decoding walk CommitLog.scan had before it was built on scan_raw.

    Kept here, independent of scan_raw, as the reference the stop-point tests compare against
    (``self`` is a CommitLog; scan_end / scan_error are set on it as the real scans do).
    Yields ``MessageRecord``s. After the generator ends, :attr:`scan_end` holds the offset
    just after the last good record and :attr:`scan_error` what stopped it (None at a clean
    end: zeros, the end of the files or ``end``). A blank record moves to the next segment.
    """
    self.scan_error = None
    pos = start
    self.scan_end = pos
    stop = self.files.end_offset if end is None else min(end, self.files.end_offset)
    while pos < stop:
        seg = self.files.find(pos)
        if seg is None:
            break
        chunk_start = pos
        chunk = os.pread(seg.fd, min(SCAN_CHUNK, seg.end - pos), pos - seg.start)
        i = 0
        n = len(chunk)
        rolled = False
        while i < n and chunk_start + i < stop:
            if n - i < 8:
                if chunk_start + n >= seg.end:
                    self.scan_error = "segment ends inside a record header"
                    return
                break  # read more
            total, magic = BLANK.unpack_from(chunk, i)
            if magic == MAGIC_BLANK:
                # recoverNormally: a blank in the last file ends the scan at the blank
                # (the next append overwrites it); otherwise go on in the next file.
                if self.files.find(seg.end) is None:
                    return
                pos = seg.end
                self.scan_end = pos
                rolled = True
                break
            if total == 0 and magic == 0:
                self.scan_error = None
                return
            if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0:
                self.scan_error = f"no record at {chunk_start + i} (magic 0x{magic:08X})"
                return
            if i + total > n:
                if chunk_start + i + total > seg.end:
                    self.scan_error = f"record at {chunk_start + i} runs past its segment"
                    return
                if i == 0:
                    chunk = os.pread(seg.fd, total, pos - seg.start)
                    n = len(chunk)
                    if n < total:
                        self.scan_error = f"record at {pos} is truncated"
                        return
                    continue
                break  # re-read from this record
            try:
                rec = _decode_record(
                    chunk,
                    i,
                    check_crc=check_crc,
                    base_offset=chunk_start,
                    force_verify_prop_crc=self.force_verify_prop_crc,
                )
            except CorruptRecordError as exc:
                self.scan_error = str(exc)
                return
            yield rec
            i += total
            self.scan_end = chunk_start + i
        if not rolled:
            if n == 0 or (i == 0 and n < 8):
                self.scan_error = f"segment file ends early at {chunk_start + i}"
                return
            pos = chunk_start + i
            if pos >= stop:
                break


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_put_bodies_writes_what_put_messages_writes(tmp_path, monkeypatch, flush):
    """``MessageStore.put_bodies`` (the mount's produce lines, no Message per body) against
    ``put_messages`` of the same messages (and both without PutResults): byte-identical
    files and equal PutResults,
    round robin and explicit queues, no tags, tags for all or one per body, keys for all (a
    string) or one per body (strings, lists, None and ""), over segment,
    ConsumeQueue-file and IndexFile rolls; the general path's refusals (no such topic, a body
    over maxMessageSize, a queue out of range, a tag or key with a control character, a column
    of another length) change nothing."""
    from rmqfs.engine.errors import (
        MessageIllegalError,
        MessageTooLargeError,
        NoSuchTopicError,
        PutMessageError,
    )

    def run(root, bodies_path: bool | str):
        monkeypatch.setattr(store_mod.time, "time", lambda: T0 / 1000)
        cfg = StoreConfig(
            mapped_file_size_commit_log=16 * 1024,
            mapped_file_size_consume_queue=10 * 20,
            max_hash_slot_num=16,
            max_index_num=64,
            max_message_size=4096,
            flush_disk_type=flush,
        )
        s = MessageStore(str(root), cfg)
        fix_uniq_keys(s, 100)
        s.create_topic("T", 3)
        rnd = random.Random(11)
        out = []
        key_values = (None, "", "k1", "k1 k2", ["a", "b"], [], "\u00e9t\u00e9")
        for b in range(60):
            n = rnd.choice((1, 5))
            bodies = [b"%d-%d" % (b, i) * rnd.choice((1, 30)) for i in range(n)]
            q = rnd.choice((None, None, 2))
            tags = rnd.choice((None, "TagA", [rnd.choice((None, "", "A", "B")) for _ in bodies]))
            keys = rnd.choice((None, "o-%d" % b, [rnd.choice(key_values) for _ in bodies]))
            tags_c = tags if isinstance(tags, list) else [tags] * n
            keys_c = keys if isinstance(keys, list) else [keys] * n
            msgs = [
                Message("T", x, tags=t, keys=k, queue_id=q)
                for x, t, k in zip(bodies, tags_c, keys_c)
            ]
            if bodies_path in ("bare", "bare messages"):  # no PutResults where none is needed
                if bodies_path == "bare":
                    got = s.put_bodies("T", bodies, q, results=False, tags=tags, keys=keys)
                else:
                    got = s.put_messages(msgs, results=False)
                assert got == [] or flush == "SYNC_FLUSH" or len(bodies) == 1  # (a single put)
                assert got == [] or len(got) == len(bodies)
            elif bodies_path:
                out += s.put_bodies("T", bodies, q, tags=tags, keys=keys)
            else:
                out += s.put_messages(msgs)
        for bad, exc in (
            (("Nope", [b"x"], None), NoSuchTopicError),
            (("T", [b"x", b"y" * 5000], None), MessageTooLargeError),
            (("T", [b"x"], 7), PutMessageError),
            (("T", [b"x", b"y"], None, ["A", "B\x01"]), MessageIllegalError),
            (("T", [b"x", b"y"], None, "A", ["k", "k\n"]), MessageIllegalError),
            (("T", [b"x", b"y"], None, ["A"]), ValueError),
        ):
            end = s.commitlog.max_offset
            with pytest.raises(exc):
                if bodies_path:
                    s.put_bodies(*bad[:3], True, *bad[3:])
                else:
                    if exc is ValueError:
                        raise ValueError("a column of another length: put_bodies alone")
                    t, k = (list(bad[3:]) + [None, None])[:2]
                    tc = t if isinstance(t, list) else [t] * len(bad[1])
                    kc = k if isinstance(k, list) else [k] * len(bad[1])
                    s.put_messages(
                        [
                            Message(bad[0], x, tags=tt, keys=kk, queue_id=bad[2])
                            for x, tt, kk in zip(bad[1], tc, kc)
                        ]
                    )
            assert s.commitlog.max_offset == end
        s.close()
        return out

    a = run(tmp_path / "a", False)
    b = run(tmp_path / "b", True)
    run(tmp_path / "c", "bare")
    run(tmp_path / "d", "bare messages")
    assert a == b
    for other in ("b", "c", "d"):
        for sub in ("commitlog", "consumequeue"):
            assert _files(tmp_path / "a", sub) == _files(tmp_path / other, sub)
        index_a, index_b = _files(tmp_path / "a", "index"), _files(tmp_path / other, "index")
        assert len(index_a) > 1  # named by their creation times: compared in order
        assert [index_a[k] for k in sorted(index_a)] == [index_b[k] for k in sorted(index_b)]


def test_a_topic_with_a_huge_queue_count_takes_no_memory_a_queue(tmp_path):
    """A topics.json written elsewhere with writeQueueNums 2147483647: the compiled path's
    per-topic tables took some 150 bytes a configured queue (20 GB, then the OOM killer, for
    `rmqfs produce`, found by a review); such a topic takes the general path, which holds
    nothing for queues it does not put to, and the messages are stored."""
    import tracemalloc

    huge = 2**31 - 1
    with MessageStore(str(tmp_path / "s")) as s:
        s.topic_config.put(TopicConfig("T", huge, huge))
        assert putmessage.plain_topic(s, "T") is None
        tracemalloc.start()
        try:
            out = s.put_messages([Message("T", b"m%d" % i, tags="a") for i in range(50)])
            s.put_messages([Message("T", b"one")])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20  # (the live IndexFile's slot table is 20 MB of it)
        assert [r.queue_id for r in out[:3]] == [0, 1, 2]
        assert s.get_message("T", 1, 0).body == b"m1"
