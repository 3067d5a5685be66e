"""BatchCQ stores (issue 22, section 2.5): ``batchconsumequeue/`` units and inner batches,
each inner message at its own queue offset, read by the store (getMessage, iter_queue, lookups
by time), the columnar decoder and StoreFiles (the data source's reader). The store is built in
tests/bcqstore.py from the Java's definitions."""

from __future__ import annotations

import os

import numpy as np
import pytest

from bcqstore import BCQ_UNIT, build_bcq_store, expected
from rmqfs.engine.errors import CorruptRecordError, UnsupportedLayoutError
from rmqfs.engine.format.innerbatch import encode_inner_batch, split_inner_batch
from rmqfs.engine.live.stats import WINDOWS, queue_stats, topic_stats, total
from rmqfs.engine.live.status import store_status
from rmqfs.engine.read.columnar import StoreFiles, decode_units_per_record
from rmqfs.engine.store import MessageStore


def _props(rec_props: dict, want: dict) -> bool:
    return all(rec_props.get(k) == v for k, v in want.items())


@pytest.fixture
def bcq(tmp_path):
    root = tmp_path / "s"
    recs = build_bcq_store(root)
    return str(root), recs


def _java_offset_by_time(recs: list[dict], ts: int) -> int:
    """BatchConsumeQueue.getOffsetInQueueByTime (LOWER): at or past the last unit's time, the
    last unit's msgBaseOffset; else the first unit stored at or after ``ts``."""
    if ts >= recs[-1]["ts"]:
        return recs[-1]["base"]
    return min(r["base"] for r in recs if r["ts"] >= ts)


def test_the_store_reads_every_inner_message_at_its_own_queue_offset(bcq):
    """Before: B had no queue at all (batchconsumequeue/ was not read), and a unit naming an
    inner batch's second message was refused as damage (QUEUEOFFSET is the first's)."""
    root, recs = bcq
    want = expected()
    with MessageStore(root, read_only=True) as s:
        assert "B" in s.topic_names() and s.queue_ids("B") == [0]
        assert (s.min_offset("B", 0), s.max_offset("B", 0)) == (0, len(want))
        got = [r for _, r in s.iter_queue("B", 0)]
        assert [r.body for r in got] == [b for b, _ in want]
        assert [r.queue_offset for r in got] == list(range(len(want)))
        for r, (_, props) in zip(got, want, strict=True):
            assert _props(r.properties, props), (r.properties, props)
            assert r.topic == "B" and r.queue_id == 0
        for q, (body, props) in enumerate(want):
            m = s.get_message("B", 0, q)
            assert m.body == body and m.queue_offset == q and _props(m.properties, props)
        # every message of an inner batch names its record (one commitLogOffset, one storeTime)
        assert got[1].commitlog_offset == got[3].commitlog_offset == recs[1]["off"]
        assert got[1].flag == 0 and not got[1].sys_flag & 1
        pulled = s.get_messages("g", "B", 0, 0)
        assert [m.body for m in pulled.messages] == [b for b, _ in want]
        for ts in {r["ts"] for r in recs}:  # (records may share a ms)
            assert s.offset_by_time("B", 0, ts) == _java_offset_by_time(recs, ts)
        # past every unit: the last unit's msgBaseOffset, as BatchConsumeQueue answers it
        # (not the max offset, which the file ConsumeQueue answers)
        assert s.offset_by_time("B", 0, recs[-1]["ts"] + 1000) == recs[-1]["base"]
        assert [r.body for _, r in s.iter_queue("T", 0)] == [b"t0", b"t1"]
        assert not s.damaged


def test_status_and_stats_count_batch_queues_and_each_record_once(bcq):
    """status.json and ``stats-all`` over a BatchCQ topic (a review): status counted the
    ConsumeQueues only (B's 7 messages and its queue missing), the windows ended at the last
    unit's msgBaseOffset (BatchConsumeQueue's answer to a time past every message: the last
    batch was never in a window), and the bytes counted an inner batch's record once per
    message. A window after every message counts nothing."""
    root, recs = bcq
    want = expected()
    with MessageStore(root, read_only=True) as s:
        st = store_status(s)
        total_t = s.max_offset("T", 0) - s.min_offset("T", 0)
        assert st["messages"] == len(want) + total_t
        assert st["queues"] == 2 and st["consumeQueueFiles"] == 2
        record_bytes = sum(r["size"] for r in recs)  # each record once
        newest = max(r["ts"] for r in recs)
        row = total(topic_stats(s, "B", newest + 1))
        assert row["messages"] == len(want) and row["bytes"] == record_bytes
        for w in WINDOWS:
            assert row[w] == {"messages": len(want), "bytes": record_bytes}
        later = total(topic_stats(s, "B", newest + 2 * WINDOWS["day"]))
        assert all(later[w] == {"messages": 0, "bytes": 0} for w in WINDOWS)
        # a minute that starts at the last batch's time: from the offset the broker's search
        # answers on (a batch at its base), each record's bytes once
        last = recs[-1]
        row = queue_stats(s, "B", 0, last["ts"] + WINDOWS["minute"])
        first = _java_offset_by_time(recs, last["ts"])
        assert row["minute"] == {
            "messages": len(want) - first,
            "bytes": sum(r["size"] for r in recs if r["base"] >= first),
        }


def test_storefiles_and_the_columnar_decoder_read_the_same_rows(bcq):
    root, recs = bcq
    want = expected()
    sf = StoreFiles(root)
    try:
        assert "B" in sf.topics() and sf.queue_ids("B") == [0]
        assert (sf.min_offset("B", 0), sf.max_offset("B", 0)) == (0, len(want))
        rows = [b for batch in sf.read_batches("B", 0, 0, len(want)) for b in batch.to_pylist()]
        assert [r["body"] for r in rows] == [b for b, _ in want]
        assert [r["queueOffset"] for r in rows] == list(range(len(want)))
        assert [r["tags"] for r in rows] == ["plain", "x", None, None, "plain", "y", "y"]
        # a range starting inside an inner batch
        mid = [b for batch in sf.read_batches("B", 0, 2, 6) for b in batch.to_pylist()]
        assert [r["body"] for r in mid] == [b"i1", b"i2", b"b4", b"j0"]
        for ts in {r["ts"] for r in recs}:
            assert sf.offset_by_time("B", 0, ts) == _java_offset_by_time(recs, ts)
        assert sf.offset_by_time("B", 0, recs[-1]["ts"] + 1000) == recs[-1]["base"]
        units = sf.units("B", 0, 0, len(want))
        slow = decode_units_per_record(
            sf.commitlog, "B", 0, units, np.arange(len(want)), columns=("body", "queueOffset")
        )
        assert slow.column("body").to_pylist() == [b for b, _ in want]
    finally:
        sf.close()


def test_a_unit_past_its_inner_batch_is_damage(bcq):
    """A unit whose queue offset lies past the messages of the record it names (batchSize
    larger than INNER_NUM) is damage, never another message."""
    root, recs = bcq
    path = os.path.join(root, "batchconsumequeue", "B", "0", "0" * 20)
    r = recs[3]
    with open(path, "r+b") as f:
        f.seek(3 * BCQ_UNIT.size)
        f.write(BCQ_UNIT.pack(r["off"], r["size"], r["tags"], r["ts"], r["base"], 3, -1, 0))
    with MessageStore(root, read_only=True) as s:
        assert s.max_offset("B", 0) == 8
        assert s.get_message("B", 0, 6).body == b"j1"
        with pytest.raises(CorruptRecordError, match="2 messages"):
            s.get_message("B", 0, 7)


def test_a_bcq_store_refuses_writers(bcq):
    root, _ = bcq
    with pytest.raises(UnsupportedLayoutError, match="BatchConsumeQueue"):
        MessageStore(root)


def test_inner_batch_bodies_split_and_refuse_lies():
    body = encode_inner_batch([(1, b"a", "K\x01v\x02"), (0, b"", "")])
    assert split_inner_batch(body, 2) == [(1, b"a", {"K": "v"}), (0, b"", {})]
    with pytest.raises(CorruptRecordError, match="the record says 3"):
        split_inner_batch(body, 3)
    lying = bytearray(body)
    lying[3] = 200  # the first message claims more bytes than there are
    with pytest.raises(CorruptRecordError, match="declares"):
        split_inner_batch(bytes(lying))
    with pytest.raises(CorruptRecordError, match="less than a message's head"):
        split_inner_batch(body + b"\0\0\0")


def test_verify_checks_batch_queues_against_the_records(bcq):
    """Before: verify called B's records a ConsumeQueue's lag (``cq-lag``, consumequeue/B/0
    missing) and never read batchconsumequeue/."""
    from rmqfs.engine.tools.verify import verify_store

    root, recs = bcq
    res = verify_store(root)
    assert not res.errors, res.errors
    assert not [w for w in res.warnings if "B/0" in w.path], res.warnings
    path = os.path.join(root, "batchconsumequeue", "B", "0", "0" * 20)
    r = recs[2]
    with open(path, "r+b") as f:  # unit 2 (b4) with a wrong tagsCode
        f.seek(2 * BCQ_UNIT.size)
        f.write(BCQ_UNIT.pack(r["off"], r["size"], 12345, r["ts"], r["base"], 1, -1, 0))
    bad = verify_store(root)
    assert [e.kind for e in bad.errors] == ["bcq-unit"]
    assert "tagsCode 12345" in bad.errors[0].what


def test_a_snapshot_of_a_bcq_store_is_refused(bcq):
    """The snapshot machinery copies ConsumeQueues, not batchconsumequeue/: a snapshot would
    restore a store whose BatchCQ topics have no queue."""
    from rmqfs.engine.live.snapshot import freeze

    root, _ = bcq
    with (
        MessageStore(root, read_only=True) as s,
        pytest.raises(UnsupportedLayoutError, match="batchconsumequeue"),
    ):
        freeze(s, "s1")


def test_a_batchcq_a_crash_left_behind_is_said_not_silent(bcq, tmp_path, caplog):
    """After a crash the broker dispatches the records its BatchConsumeQueue lacks; rmqfs does
    not rebuild one, and said nothing: the messages were silently missing. The recovery says
    so now, once per queue (the log, the report's repairs, status.json)."""
    import logging
    import shutil

    root, _recs = bcq
    copy = tmp_path / "lag"
    shutil.copytree(root, copy)
    qfile = copy / "batchconsumequeue" / "B" / "0" / ("0" * 20)
    data = bytearray(qfile.read_bytes())
    data[3 * BCQ_UNIT.size : 4 * BCQ_UNIT.size] = bytes(BCQ_UNIT.size)  # the last unit lost
    qfile.write_bytes(bytes(data))
    (copy / "abort").write_bytes(b"")
    with caplog.at_level(logging.WARNING), MessageStore(str(copy), read_only=True) as s:
        notes = [r for r in s.recovery_report.repairs if r.startswith("batchconsumequeue/B/0:")]
        assert len(notes) == 1 and "does not rebuild a BatchConsumeQueue" in notes[0], notes
        assert sum("batchconsumequeue/B/0" in r.getMessage() for r in caplog.records) == 1
    with caplog.at_level(logging.WARNING), MessageStore(str(root), read_only=True) as s:
        assert not [r for r in s.recovery_report.repairs if "batchconsumequeue" in r]
