"""LMQ stores (issue 22, section 2.4): rocketmq-mqtt's light queues, built here from the Java's
definitions (``MessageConst.PROPERTY_INNER_MULTI_DISPATCH`` / ``INNER_MULTI_QUEUE_OFFSET``,
``ConsumeQueue.multiDispatchLmqQueue``: a unit at the same CommitLog offset in
``consumequeue/%LMQ%a/0`` at the offset the record names, ``LmqConsumerOffsetManager``'s
``config/lmqConsumerOffset.json``)."""

from __future__ import annotations

import os
import shutil

import pytest

from lmqstore import UNIT, build_lmq_store
from rmqfs.engine.errors import CorruptRecordError, InvalidNameError, UnsupportedLayoutError
from rmqfs.engine.format.config import TopicConfig
from rmqfs.engine.format.javahash import tags_code
from rmqfs.engine.store import Message, MessageStore


def _queue_files(root, q):
    d = os.path.join(root, "consumequeue", q, "0")
    return {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d)}


def test_a_read_only_open_shows_lmq_queues_as_topics_with_their_records(tmp_path):
    """Before: the LMQ's units point at T's and U's records, whose QUEUEID/QUEUEOFFSET are
    their own topic's, so every read of %LMQ%a was refused as damage."""
    root = tmp_path / "s"
    lmq = build_lmq_store(root)
    with MessageStore(str(root), read_only=True) as s:
        assert {"%LMQ%a", "%LMQ%b", "T", "U"} <= set(s.topic_names())
        for q, bodies in lmq.items():
            assert s.queue_ids(q) == [0]
            recs = [r for _, r in s.iter_queue(q, 0)]
            assert [r.body for r in recs] == bodies
            assert all(r.topic in ("T", "U") for r in recs)  # the record as it is
            assert [s.get_message(q, 0, i).body for i in range(len(bodies))] == bodies
            assert [m.body for m in s.get_messages("g", q, 0, 0).messages] == bodies
        assert s.consumer_offsets.query("%LMQ%g", "%LMQ%a", 0) == 1
        assert s.consumer_offsets.query("%LMQ%g", "%LMQ%b", 0) == 2
        assert s.consumer_offsets.query("G", "T", 0) == 1
        assert not s.damaged


def test_an_lmq_unit_at_a_record_that_does_not_name_it_is_damage(tmp_path):
    """A unit of %LMQ%b swapped for T's record m1 (no INNER_MULTI_DISPATCH) is damage, never
    that other message."""
    root = tmp_path / "s"
    build_lmq_store(root)
    with MessageStore(str(root), read_only=True) as s:
        off, size, tc = s.consume_queue("T", 0).unit(1)
    p = os.path.join(root, "consumequeue", "%LMQ%b", "0", "0" * 20)
    with open(p, "r+b") as f:
        f.write(UNIT.pack(off, size, tc))  # unit 0 (unit 1, the tail, is checked on open)
    with (
        MessageStore(str(root), read_only=True) as s,
        pytest.raises(CorruptRecordError, match="not dispatched to '%LMQ%b' at 0"),
    ):
        s.get_message("%LMQ%b", 0, 0)


@pytest.mark.parametrize("abnormal", [False, True])
def test_recovery_rebuilds_a_deleted_lmq_queue_from_inner_multi_dispatch(tmp_path, abnormal):
    """Before: recovery dispatched each record to its own topic's queue only, so a lost
    consumequeue/%LMQ%a stayed empty."""
    root = tmp_path / "s"
    lmq = build_lmq_store(root)
    before = _queue_files(root, "%LMQ%a")
    shutil.rmtree(os.path.join(root, "consumequeue", "%LMQ%a"))
    if abnormal:
        open(os.path.join(root, "abort"), "w").close()
    with MessageStore(str(root), read_only=True) as s:
        assert [r.body for _, r in s.iter_queue("%LMQ%a", 0)] == lmq["%LMQ%a"]
        cq = s.consume_queue("%LMQ%a", 0)
        units = b"".join(UNIT.pack(o, n, t) for _, o, n, t in cq.iter_units(0, cq.max_offset))
        assert units == before["0" * 20][: len(units)]
        assert "%LMQ%a" not in s.topic_config.topics  # never in topics.json
    assert not os.path.exists(os.path.join(root, "consumequeue", "%LMQ%a"))  # read-only


def test_an_lmq_store_still_refuses_writers(tmp_path):
    """rmqfs does not assign INNER_MULTI_QUEUE_OFFSET on put nor write lmqConsumerOffset.json."""
    root = tmp_path / "s"
    build_lmq_store(root)
    with pytest.raises(UnsupportedLayoutError, match="LMQ"):
        MessageStore(str(root))


def test_a_plain_store_makes_and_writes_no_lmq_topic(tmp_path):
    """A topic named ``%LMQ%...`` is a light message queue's (``MixAll.isLmq``): making or
    writing one made a plain store an LMQ store, which then refused every writer, its delete
    included (a review). Creation, update and puts refuse it, with the reason, and the store
    stays a plain one that takes writes."""
    root = tmp_path / "s"
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        for make in (lambda: s.create_topic("%LMQ%y", 4), lambda: s.update_topic("%LMQ%y")):
            with pytest.raises(InvalidNameError, match="light message queue"):
                make()
        # a topics.json entry of that name (another tool's): its puts are refused too
        s.topic_config.put(TopicConfig("%LMQ%z", 1, 1, 6))
        for batch in ([Message("%LMQ%z", b"x")], [Message("%LMQ%z", b"x")] * 3):
            with pytest.raises(InvalidNameError, match="light message queue"):
                s.put_messages(batch)
        assert s.put_messages([Message("T", b"still a plain store")])
        assert os.listdir(root / "consumequeue") == ["T"]
    with MessageStore(str(root)) as s:  # opens for writing: not an LMQ store
        assert s.put_messages([Message("T", b"after a reopen")])


def _tree(root):
    """Every path under ``root`` with its size and mtime (what a refused open must not change)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("mark", ["lmqConsumerOffset.json", "lmqConsumerOffset.json.bak"])
def test_a_store_marked_lmq_only_by_its_offsets_file_refuses_writers(tmp_path, mark):
    """Issue 36 item 4: a store with no consumequeue/%LMQ%* directory but the offsets file of
    an LmqConsumerOffsetManager broker took a writer, whose re-dispatch fanned the records out
    to a ConsumeQueue directory per INNER_MULTI_DISPATCH name (one produce: 73 s, 10,001
    directories). Now the writer is refused before anything is created, naming the file; a
    read-only open still reads it."""
    root = tmp_path / "s"
    lmq = build_lmq_store(root)
    for q in lmq:
        shutil.rmtree(os.path.join(root, "consumequeue", q))
    if mark.endswith(".bak"):
        os.rename(
            os.path.join(root, "config", "lmqConsumerOffset.json"),
            os.path.join(root, "config", mark),
        )
    before = _tree(root)
    with pytest.raises(UnsupportedLayoutError, match=f"config/{mark}: LMQ consumer offsets"):
        MessageStore(str(root))
    assert _tree(root) == before
    with MessageStore(str(root), read_only=True) as s:
        assert [r.body for _, r in s.iter_queue("%LMQ%a", 0)] == lmq["%LMQ%a"]
    assert _tree(root) == before


FANOUT_OPEN = r"""
import json, sys, time
from rmqfs.engine.live.status import store_status
from rmqfs.engine.store import Message, MessageStore
t = time.monotonic()
with MessageStore(sys.argv[1], read_only=True) as s:
    lmq = [n for n in s.topic_names() if n.startswith("%LMQ%")]
    out = {
        "seconds": time.monotonic() - t,
        "lmq": len(lmq),
        "units": sum(s.max_offset(q, 0) - s.min_offset(q, 0) for q in lmq),
        "first": lmq[0] if lmq else None,
        "firstBodies": [r.body.decode() for _, r in s.iter_queue(lmq[0], 0)] if lmq else [],
        "T": s.max_offset("T", 0),
        "refused": store_status(s)["lmqRefused"],
    }
print(json.dumps(out))
"""


def _open_measured(root):
    from stores import run_measured

    return run_measured(FANOUT_OPEN, root)


def test_records_naming_a_million_lmq_queues_build_at_most_max_lmq_consume_queue_num(tmp_path):
    """Issue 36 item 3: 400 records naming 2,500 LMQ queues each, none the same (1,000,000
    queues). Every read-only open built them all: 34 s and 1.86 GB here. Now dispatch stops
    making queues past maxLmqConsumeQueueNum (20,000, DefaultMessageStore's
    isLmqConsumeQueueNumExceeded: one record's queues past it at most), says which record
    it stopped at, and the rest of the store reads as before."""
    from lmqstore import build_fanout_store

    root = tmp_path / "s"
    offsets = build_fanout_store(root, shared=False)
    got, err = _open_measured(root)
    # dispatch makes queues until the store has more than 20,000 (the record that crosses
    # the limit is dispatched whole, as a broker puts it), then none: 9 records' queues
    assert got["lmq"] == 22_500 and got["units"] == 22_500
    assert got["firstBodies"] == ["m0"] and got["T"] == 400
    ref = got["refused"]
    assert ref["limit"] == 20_000 and ref["firstRecord"] in offsets[8:]
    assert ref["file"] == "commitlog/" + "0" * 20 and ref["records"] == 391
    assert ref["units"] == 391 * 2500 and "maxLmqConsumeQueueNum 20000" in ref["reason"]
    assert f"the record at {ref['firstRecord']} (commitlog/{'0' * 20})" in err
    assert got["maxrss_kb"] < 500 << 10 and got["seconds"] < 10


def test_records_sharing_their_lmq_queues_rebuild_them_within_bounds(tmp_path):
    """400 records naming the same 2,500 LMQ queues: 1,000,000 units, built without an object
    per unit (6.9 s and 532 MB before; the queues are what the store holds)."""
    from lmqstore import build_fanout_store

    root = tmp_path / "s"
    build_fanout_store(root, shared=True)
    got, _err = _open_measured(root)
    assert got["lmq"] == 2500 and got["units"] == 1_000_000 and got["refused"] is None
    assert got["firstBodies"] == [f"m{i}" for i in range(400)]
    assert got["maxrss_kb"] < 500 << 10 and got["seconds"] < 10


def test_a_record_naming_more_queues_than_its_properties_can_hold_is_not_dispatched():
    """MAX_MULTI_DISPATCH: a record's properties hold 32,767 bytes, 4 a queue at least."""
    from rmqfs.engine.format.message import MAX_MULTI_DISPATCH, multi_dispatch

    n = MAX_MULTI_DISPATCH
    ok = {"INNER_MULTI_DISPATCH": ",".join(["a"] * n), "INNER_MULTI_QUEUE_OFFSET": "0," * n}
    ok["INNER_MULTI_QUEUE_OFFSET"] = ok["INNER_MULTI_QUEUE_OFFSET"][:-1]
    assert len(multi_dispatch("T", ok)) == n
    over = {k: v + ",0" for k, v in ok.items()}
    with pytest.raises(ValueError, match=f"names {n + 1} queues, more than the {n}"):
        multi_dispatch("T", over)


@pytest.mark.parametrize(
    "names, offsets, want",
    [
        # Java's String.split drops trailing empty fields: a trailing comma adds no name
        ("%LMQ%a,%LMQ%b,", "0,0", [("%LMQ%a", 0, 0), ("%LMQ%b", 0, 0)]),
        ("%LMQ%a,%LMQ%b", "0,0,", [("%LMQ%a", 0, 0), ("%LMQ%b", 0, 0)]),
        ("%LMQ%a,,", "3", [("%LMQ%a", 0, 3)]),
        # Long.parseLong takes no blanks nor "_": the names before a bad offset are dispatched
        ("%LMQ%a,%LMQ%b,%LMQ%c", "1,x,2", [("%LMQ%a", 0, 1)]),
        ("%LMQ%a,%LMQ%b", "1, 0", [("%LMQ%a", 0, 1)]),
        ("%LMQ%a,%LMQ%b", "+4,-0", [("%LMQ%a", 0, 4), ("%LMQ%b", 0, 0)]),
        ("%LMQ%a", "9223372036854775808", None),  # past a long: nothing (ValueError)
        ("%LMQ%a", "1_0", None),
        ("B,%LMQ%a", "1,2", [("B", -1, 1), ("%LMQ%a", 0, 2)]),
    ],
)
def test_multi_dispatch_splits_and_parses_as_the_broker(names, offsets, want):
    """ConsumeQueue.multiDispatchLmqQueue's String.split(",") and Long.parseLong, not Python's
    str.split and int(): the units rmqfs expects are the ones the broker wrote."""
    from rmqfs.engine.format.message import multi_dispatch

    props = {"INNER_MULTI_DISPATCH": names, "INNER_MULTI_QUEUE_OFFSET": offsets}
    if want is None:
        with pytest.raises(ValueError):
            multi_dispatch("T", props)
    else:
        assert multi_dispatch("T", props) == want


def _store_with_a_4x_unit(root, plain: int, at: int):
    """A store of topics B and T: ``plain`` messages of B (``b0``, ``b1``...), then T's record
    ``m0`` (tags ``x``) whose INNER_MULTI_DISPATCH names B at queue offset ``at``, as a 4.x
    broker's MultiDispatch record (the broker sets the property; a client may not). B's unit
    for it is the test's to write. Returns m0's PutResult."""
    from rmqfs.engine.service import validation

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        with MessageStore(str(root)) as s:
            s.create_topic("B", 1)
            s.create_topic("T", 1)
            s.put_messages([Message("B", b"b%d" % i, queue_id=0) for i in range(plain)])
            props = {"INNER_MULTI_DISPATCH": "B", "INNER_MULTI_QUEUE_OFFSET": str(at)}
            (r,) = s.put_messages([Message("T", b"m0", tags="x", queue_id=0, properties=props)])
    return r


def test_a_4x_multi_dispatch_unit_in_a_plain_queue_is_the_brokers(tmp_path):
    """A 4.x broker's MultiDispatch (enableMultiDispatch) puts a record in the queue of each
    name of its INNER_MULTI_DISPATCH, a plain name in the record's own queue id. Such a unit
    was taken for damage: dropped (on disk by a writable open, whose next put then reused its
    queue offset) and the queue's reads failed. It is the broker's now: read, kept, and the
    next put takes the offset after it, as the broker's shared topicQueueTable gives."""
    import struct

    from fstree import tree

    root = tmp_path / "s"
    r = _store_with_a_4x_unit(root, plain=1, at=1)
    qfile = root / "consumequeue" / "B" / "0" / ("0" * 20)
    data = bytearray(qfile.read_bytes())
    data[20:40] = struct.pack(">qiq", r.commitlog_offset, r.size, tags_code("x"))
    qfile.write_bytes(bytes(data))  # the unit the broker's MultiDispatch wrote
    with tree(tmp_path / "t", read_only=True, store_dir=root) as t:
        assert t.read("/topics/B/0/bodies.txt") == b"b0\nm0\n"
        assert t.read("/topics/B/messages.jsonl").count(b"\n") == 2
    with MessageStore(str(root)) as s:
        assert [s.get_message("B", 0, i).body for i in range(2)] == [b"b0", b"m0"]
        assert s.put_messages([Message("B", b"b1", queue_id=0)])[0].queue_offset == 2
    assert qfile.read_bytes()[20:40] == bytes(data[20:40])


def test_a_4x_brokers_lmq_unit_of_a_retry_record_is_read(tmp_path, monkeypatch):
    """A 4.9 broker dispatches every topic's records to their LMQs (5.x's MultiDispatchUtils
    skips %RETRY%, rmq_sys_ and SCHEDULE_TOPIC_XXXX): the unit of a retry record in %LMQ%a was
    taken for damage and the queue's read stopped there. Either broker's unit is read now."""
    import lmqstore

    records = [
        ("T", b"m0", ["%LMQ%a"]),
        ("%RETRY%G", b"r0", ["%LMQ%a"]),
        ("T", b"m1", ["%LMQ%a"]),
    ]
    monkeypatch.setattr(lmqstore, "RECORDS", records)
    real = MessageStore.create_topic

    def with_retry(self, name, *args, **kw):  # _build makes T and U; the retry topic too
        if name == "T":
            real(self, "%RETRY%G", 1)
        return real(self, name, *args, **kw)

    monkeypatch.setattr(MessageStore, "create_topic", with_retry)
    root = tmp_path / "s"
    want = build_lmq_store(root)
    assert want["%LMQ%a"] == [b"m0", b"r0", b"m1"]
    with MessageStore(str(root), read_only=True) as s:
        got = [s.get_message("%LMQ%a", 0, i).body for i in range(s.max_offset("%LMQ%a", 0))]
        assert got == [b"m0", b"r0", b"m1"] and not s.damaged


def test_an_lmq_unit_in_the_records_own_queue_id_is_read(tmp_path):
    """With enableLmq off (its default) a 5.x broker dispatches an %LMQ% name like any other,
    in the record's own queue id (ConsumeQueue.multiDispatchLmqQueue sets queue 0 only with
    enableLmq): such a unit is the record's; one in a third queue id is damage."""
    from rmqfs.engine.format.message import check_unit_record
    from rmqfs.engine.service import validation

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        with MessageStore(str(tmp_path / "s")) as s:
            s.create_topic("T", 4)
            props = {"INNER_MULTI_DISPATCH": "%LMQ%a", "INNER_MULTI_QUEUE_OFFSET": "7"}
            (r,) = s.put_messages([Message("T", b"m", queue_id=3, properties=props)])
            rec = s.read_record(r.commitlog_offset, r.size)
    for qid in (0, 3):
        assert check_unit_record(rec, qid, 7, "%LMQ%a") is rec
    with pytest.raises(CorruptRecordError):
        check_unit_record(rec, 2, 7, "%LMQ%a")
    with pytest.raises(CorruptRecordError):
        check_unit_record(rec, 0, 8, "%LMQ%a")


def test_a_4x_multi_dispatch_queue_names_the_damaged_unit_not_the_brokers(tmp_path):
    """In a queue holding a 4.x MultiDispatch unit, damage further on is the unit raised (not
    the broker's unit before it), and a prefix read (``max_bytes``) that ends before the
    damage is served: only the rows returned are checked, the foreign ones one by one."""
    import numpy as np

    from rmqfs.engine.read.columnar import StoreFiles, decode_units

    root = tmp_path / "s"
    m = _store_with_a_4x_unit(root, plain=200, at=10)
    with MessageStore(str(root)) as s:
        (p,) = s.put_messages([Message("T", b"plain", queue_id=0)])
    sf = StoreFiles(str(root))
    try:
        units = sf.units("B", 0, 0, 200).copy()
        units[10] = (m.commitlog_offset, m.size, tags_code("x"))  # the broker's unit
        units[150] = (p.commitlog_offset, p.size, 0)  # damage: T's plain record
        qoffs = np.arange(200, dtype=np.int64)
        with pytest.raises(CorruptRecordError) as info:
            decode_units(sf.commitlog, "B", 0, units, qoffs, columns=("body",))
        assert info.value.offset == p.commitlog_offset and "belongs to 'T'/0" in str(info.value)
        head = decode_units(sf.commitlog, "B", 0, units, qoffs, columns=("body",), max_bytes=300)
        bodies = head.column("body").to_pylist()
        assert 11 <= len(bodies) < 150 and bodies[10] == b"m0" and bodies[9] == b"b9"
    finally:
        sf.close()


def test_a_follower_passes_a_4x_multi_dispatch_unit(tmp_path):
    """The follower checked a plain queue's units against their records' topic, queueId and
    queueOffset only: at a 4.x MultiDispatch unit it stopped for good (visible end stuck,
    behind for ever). It asks the readers' check now (the record names the queue there)."""
    import struct
    from contextlib import ExitStack

    from rmqfs.engine.service import validation

    root = str(tmp_path / "s")
    with pytest.MonkeyPatch.context() as mp, ExitStack() as st:
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        w = st.enter_context(MessageStore(root))
        w.create_topic("B", 1)
        w.create_topic("T", 1)
        w.put_messages([Message("B", b"b0", queue_id=0)])
        f = st.enter_context(MessageStore(root, read_only=True, follow=True))
        props = {"INNER_MULTI_DISPATCH": "B", "INNER_MULTI_QUEUE_OFFSET": "1"}
        (r,) = w.put_messages([Message("T", b"m0", tags="x", queue_id=0, properties=props)])
        rec = w.read_record(r.commitlog_offset, r.size)
        unit = struct.pack(">qiq", rec.commitlog_offset, rec.store_size, rec.tags_code)
        fd = os.open(os.path.join(root, "consumequeue", "B", "0", "0" * 20), os.O_RDWR)
        try:
            os.pwrite(fd, unit, 20)  # the unit the broker's MultiDispatch writes
        finally:
            os.close(fd)
        w.put_messages([Message("T", b"m1", queue_id=0)])
        for _ in range(3):
            f.follower.refresh()
        assert f.commitlog.max_offset == w.commitlog.max_offset and f.follower.behind_bytes == 0
        assert [f.get_message("B", 0, i).body for i in range(2)] == [b"b0", b"m0"]
        assert [f.get_message("T", 0, i).body for i in range(2)] == [b"m0", b"m1"]


def test_a_hole_the_whole_re_dispatch_cannot_fill_is_said(tmp_path, monkeypatch):
    """A 4.x broker's LMQ unit of a retry record is not rebuilt (rebuilding follows 5.x's
    rules), so after a crash the units after it stop at the hole: the queue ends there, and
    now recovery says so once (the log, status.json repairs) instead of nothing."""
    import lmqstore

    monkeypatch.setattr(
        lmqstore,
        "RECORDS",
        [("T", b"m0", ["%LMQ%a"]), ("%RETRY%G", b"r0", ["%LMQ%a"]), ("T", b"m1", ["%LMQ%a"])],
    )
    real = MessageStore.create_topic

    def with_retry(self, name, *args, **kw):
        if name == "T":
            real(self, "%RETRY%G", 1)
        return real(self, name, *args, **kw)

    monkeypatch.setattr(MessageStore, "create_topic", with_retry)
    root = tmp_path / "s"
    build_lmq_store(root)
    monkeypatch.setattr(MessageStore, "create_topic", real)
    q = root / "consumequeue" / "%LMQ%a" / "0" / ("0" * 20)
    data = bytearray(q.read_bytes())
    data[20:60] = bytes(40)  # units 1 (r0's) and 2 (m1's) lost
    q.write_bytes(bytes(data))
    (root / "abort").write_bytes(b"")
    with MessageStore(str(root), read_only=True) as s:
        assert s.max_offset("%LMQ%a", 0) == 1
        notes = [r for r in s.repairs if r.startswith("consumequeue/%LMQ%a/0:")]
        assert len(notes) == 1 and "no record gives unit 1" in notes[0], s.repairs


def test_a_follower_shows_the_lmq_brokers_offset_commits(tmp_path):
    """A broker with enableLmq keeps every offset in lmqConsumerOffset.json
    (LmqConsumerOffsetManager) and never rewrites consumerOffset.json: a follower watched only
    the latter and showed the offsets of the open for ever. It reloads the offsets when
    either file changes."""
    root = tmp_path / "s"
    build_lmq_store(root)
    path = root / "config" / "lmqConsumerOffset.json"
    with MessageStore(str(root), read_only=True, follow=True) as f:
        assert f.consumer_offsets.query("%LMQ%g", "%LMQ%a", 0) == 1
        assert f.consumer_offsets.query("G", "T", 0) == 1
        tmp = path.with_name(path.name + ".tmp")  # ConfigManager.persist: a new file renamed
        tmp.write_text(
            '{"offsetTable":{"T@G":{0:2}},"lmqOffsetTable":{"%LMQ%a@%LMQ%g":2,"%LMQ%b@%LMQ%g":3}}'
        )
        os.replace(tmp, path)
        f.follower.refresh()
        assert f.consumer_offsets.query("%LMQ%g", "%LMQ%a", 0) == 2
        assert f.consumer_offsets.query("G", "T", 0) == 2
