"""A DLedger broker's store (RocketMQ 4.9.8's DLedgerCommitLog, issue 22 section 2.1), read
as the broker reads it: records after their 48-byte entry headers, entries past the
checkpoint's committedIndex not messages, entries checked as DLedgerMmapFileStore.recover
checks them; never written."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import struct

import pytest

from conftest import FIXTURES, copy_fixture
from rmqfs.engine.errors import UnsupportedLayoutError
from rmqfs.engine.format.dledger import ENTRY_HEADER, open_dledger
from rmqfs.engine.format.message import host_to_str
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.tools.verify import recover_store, verify_store

FIX = FIXTURES / "rocketmq-4.9.8-dledger"


def expected() -> list[dict]:
    rows = [json.loads(x) for x in (FIX / "expected.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "message"]


def record_fields(rec) -> dict:
    """A record as expected.jsonl writes it (without tagsCode, which is the unit's)."""
    return {
        "topic": rec.topic,
        "queueId": rec.queue_id,
        "queueOffset": rec.queue_offset,
        "commitLogOffset": rec.commitlog_offset,
        "size": rec.store_size,
        "magic": rec.magic - (1 << 32) if rec.magic >= 1 << 31 else rec.magic,
        "msgId": rec.msg_id,
        "uniqKey": rec.uniq_key,
        "tags": rec.tags,
        "keys": " ".join(rec.keys) if rec.keys else None,
        "bornTimestamp": rec.born_timestamp,
        "storeTimestamp": rec.store_timestamp,
        "flag": rec.flag,
        "sysFlag": rec.sys_flag,
        "bodyCRC": rec.body_crc,
        "reconsumeTimes": rec.reconsume_times,
        "preparedTransactionOffset": rec.prepared_transaction_offset,
        "bornHost": host_to_str(rec.born_host),
        "storeHost": host_to_str(rec.store_host),
        "properties": rec.properties,
        "body": base64.b64encode(rec.body).decode(),
    }


def same_host(text: str) -> str:
    """``ip:port`` with the address in one spelling (rmqfs writes IPv6 as Java's
    ``Inet6Address`` does, long form; expected.jsonl in the short one)."""
    addr, port = text.rsplit(":", 1)
    return f"{ipaddress.ip_address(addr.strip('[]'))}:{port}"


def _tree(root) -> dict[str, bytes]:
    return {
        os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
        for d, _, files in os.walk(root)
        for n in files
    }


def test_the_fixture_reads_every_message_field_by_field():
    """Every consumable message of the 4.9.8 DLedger store, by its ConsumeQueue unit, equals
    expected.jsonl field by field (bodies byte-exact); the queues hold exactly these (the 16
    prepared transaction messages are in no queue); the CommitLog ends where the committed
    entry 299 ends."""
    exp = expected()
    before = _tree(FIX / "store")
    with MessageStore(str(FIX / "store"), read_only=True) as s:
        assert s.dledger is not None and s.dledger.committed_index == 299
        unit = s.dledger.index_unit(299)
        assert s.commitlog.max_offset == unit[1] + unit[2]
        for e in exp:
            rec = s.get_message(e["topic"], e["queueId"], e["queueOffset"])
            want = {k: v for k, v in e.items() if k not in ("kind", "tagsCode")}
            got = record_fields(rec)
            for h in ("bornHost", "storeHost"):
                got[h], want[h] = same_host(got[h]), same_host(want[h])
            assert got == want
            cq = s.consume_queue(e["topic"], e["queueId"])
            assert cq.unit(e["queueOffset"]) == (e["commitLogOffset"], e["size"], e["tagsCode"])
            assert (
                s.look_message_by_offset_msg_id(e["msgId"]).commitlog_offset
                == (e["commitLogOffset"])
            )
        held = sorted(
            (t, q, r.queue_offset) for t in s.topic_names() for q in s.queue_ids(t)
            for _, r in s.iter_queue(t, q)
        )  # fmt: skip
        assert held == sorted((e["topic"], e["queueId"], e["queueOffset"]) for e in exp)
        assert s.recovery_report.torn_tail is None
    assert _tree(FIX / "store") == before


def test_the_whole_log_walk_sees_every_entry_once():
    """The walk over data/ (recovery's, verify's) yields the 300 records the broker wrote, each
    at its entry's pos + 48, skipping the fillers that end 7 of the 8 files."""
    d = open_dledger(str(FIX / "store"))
    from rmqfs.engine.format.commitlog import CommitLog

    cl = CommitLog(d.data_dir, read_only=True, entries=d)
    try:
        recs = list(cl.scan(cl.min_offset))
        assert cl.scan_error is None
        assert len(recs) == 300
        offs = {e["commitLogOffset"] for e in expected()}
        assert offs <= {r.commitlog_offset for r in recs}
        for r in recs:
            head = ENTRY_HEADER.unpack(cl.files.read(r.commitlog_offset - 48, 48))
            assert head[0] == 1 and head[4] == r.commitlog_offset - 48
            assert head[8] == r.store_size
    finally:
        cl.close()


def _set_committed(root, index: int) -> None:
    (root / "dledger-n0" / "checkpoint").write_text(f"committedIndex={index}\nendIndex=299\n")


def test_entries_past_committed_index_are_not_messages(tmp_path):
    """committedIndex 249: the 50 entries after it are not messages (the broker's
    getCommittedPos); their units are not served. No checkpoint: nothing is committed."""
    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    d = open_dledger(str(root))
    unit = d.index_unit(249)
    end = unit[1] + unit[2]
    _set_committed(root, 249)
    exp = expected()
    with MessageStore(str(root), read_only=True) as s:
        assert s.commitlog.max_offset == end
        n = sum(1 for t in s.topic_names() for q in s.queue_ids(t) for _ in s.iter_queue(t, q))
    assert n == sum(1 for e in exp if e["commitLogOffset"] < end)
    assert 0 < n < len(exp)
    found = [(p.severity, p.kind) for p in verify_store(str(root)).problems]
    assert found == [("warning", "dledger-uncommitted")]
    os.remove(root / "dledger-n0" / "checkpoint")
    with MessageStore(str(root), read_only=True) as s:
        assert s.commitlog.max_offset == s.commitlog.min_offset
        assert all(
            s.max_offset(t, q) == s.min_offset(t, q)
            for t in s.topic_names()
            for q in s.queue_ids(t)
        )


def _patch_entry(root, entry_no: int, field: int, value: int) -> int:
    """Overwrite one header field of the entry_no-th entry (in order); returns its pos."""
    d = open_dledger(str(root))
    pos = d.index_unit(entry_no)[1]
    seg_size = 262144
    path = root / "dledger-n0" / "data" / f"{pos - pos % seg_size:020d}"
    data = bytearray(path.read_bytes())
    fields = list(ENTRY_HEADER.unpack_from(data, pos % seg_size))
    fields[field] = value
    ENTRY_HEADER.pack_into(data, pos % seg_size, *fields)
    path.write_bytes(bytes(data))
    return pos


@pytest.mark.parametrize(
    "field, value, why",
    [
        (2, 7, "index 7 after"),
        (3, -1, "term -1 after"),
        (4, 12, "says pos 12"),
        (1, 99, "size"),
        (8, 0, "bodyLen 0 (an entry holds a record)"),
    ],
)
def test_entries_are_checked_as_dledger_recovers_them(tmp_path, field, value, why):
    """Entry 200's index not +1, its term lower, its pos wrong, its size not bodyLen + 48:
    recovery ends the log before it (messages from it on are not served) and verify names the
    offset and what is wrong."""
    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    if field == 3:
        _patch_entry(root, 199, 3, 5)  # entry 199 term 5, then entry 200 term -1
        value = 4
        why = "term 4 after 5"
    pos = _patch_entry(root, 200, field, value)
    with MessageStore(str(root), read_only=True) as s:
        assert s.commitlog.max_offset == pos
        assert why.split()[0] in (s.recovery_report.torn_tail or "")
    res = verify_store(str(root))
    errors = [p for p in res.problems if p.severity == "error"]
    assert errors and errors[0].offset == pos and why in errors[0].what


def test_writers_refuse_and_create_nothing(tmp_path):
    """A read-write open, recover and every offline writer refuse, naming -o ro; nothing is
    created beside dledger-n0/ (no commitlog/, no abort, no lock taken)."""
    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    before = _tree(root)
    with pytest.raises(UnsupportedLayoutError, match="DLedger") as exc:
        MessageStore(str(root))
    assert "-o ro" in str(exc.value)
    with pytest.raises(UnsupportedLayoutError, match="-o ro"):
        recover_store(str(root))
    with MessageStore(str(root), read_only=True) as s, pytest.raises(Exception, match="read-only"):
        s.put_messages([Message("TopicA", b"x")])
    assert _tree(root) == before
    assert not (root / "commitlog").exists()


def test_stores_it_cannot_read_are_refused_with_the_reason(tmp_path):
    """Two dledger-* directories (which replica is this broker's is not on disk) and a
    pre-migration commitlog/ beside dledger-n0 (records below dividedCommitlogOffset) are
    refused for reading too, each with its reason; verify says the same."""
    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    (root / "dledger-n1" / "data").mkdir(parents=True)
    with pytest.raises(UnsupportedLayoutError, match="2 DLedger directories"):
        MessageStore(str(root), read_only=True)
    assert any("2 DLedger directories" in p.what for p in verify_store(str(root)).problems)
    (root / "dledger-n1" / "data").rmdir()
    (root / "dledger-n1").rmdir()
    (root / "commitlog").mkdir()
    (root / "commitlog" / ("0" * 20)).write_bytes(b"\0" * 4096)
    with pytest.raises(UnsupportedLayoutError, match="dividedCommitlogOffset"):
        MessageStore(str(root), read_only=True)


def test_verify_is_clean_on_the_fixture():
    res = verify_store(str(FIX / "store"))
    assert [p for p in res.problems if p.severity == "error"] == []
    assert res.records == 300


def test_no_snapshot_is_made_of_a_dledger_store():
    """A snapshot serves the store's layout as commitlog/: of a DLedger store it would hold
    entries no reader can read, so none is made, with the reason."""
    from rmqfs.engine.live.snapshot import freeze

    with (
        MessageStore(str(FIX / "store"), read_only=True) as s,
        pytest.raises(UnsupportedLayoutError, match="does not snapshot a DLedger store"),
    ):
        freeze(s, "s1")


def test_a_committed_index_past_the_last_entry_commits_every_entry(tmp_path):
    """A checkpoint whose committedIndex is past the ledger's end (a replica far behind its
    leader): DLedgerMmapFileStore.updateCommittedIndex lowers it to the last entry, so every
    message is served, by the store and by the columnar reader (Spark, view/)."""
    from rmqfs.engine.read.columnar import StoreFiles

    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    _set_committed(root, 500)
    end = open_dledger(str(root)).committed_end()
    files = StoreFiles(str(root))
    with MessageStore(str(root), read_only=True) as s:
        assert s.commitlog.max_offset == end == files.committed_end
        n = sum(1 for t in s.topic_names() for q in s.queue_ids(t) for _ in s.iter_queue(t, q))
    assert n == len(expected())
    got = sum(
        files.max_offset(t, q) - files.min_offset(t, q)
        for t in files.topics()
        for q in files.queue_ids(t)
    )
    assert got == len(expected())
    assert [p for p in verify_store(str(root)).problems if p.severity == "error"] == []


def test_verify_finds_an_index_that_disagrees_with_the_entries(tmp_path):
    """index/'s unit for the committed entry names a position where no entry ends: an error
    (the broker's recovery would rebuild such an index)."""
    from rmqfs.engine.format.dledger import INDEX_UNIT

    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    d = open_dledger(str(root))
    magic, pos, size, index, term = d.index_unit(299)
    at = 299 * INDEX_UNIT.size
    name = f"{at - at % 512:020d}"
    path = root / "dledger-n0" / "index" / name
    data = bytearray(path.read_bytes())
    INDEX_UNIT.pack_into(data, at % 512, magic, pos + 8, size, index, term)
    path.write_bytes(bytes(data))
    found = [p.kind for p in verify_store(str(root)).problems if p.severity == "error"]
    assert found == ["dledger-index"]


def _rows_by_reader(root) -> tuple[int, int]:
    """(messages the engine serves, rows the data source's reader decodes) of every queue."""
    from rmqfs.engine.read.columnar import StoreFiles

    with MessageStore(str(root), read_only=True) as s:
        engine = sum(1 for t in s.topic_names() for q in s.queue_ids(t) for _ in s.iter_queue(t, q))
    sf = StoreFiles(str(root))
    rows = 0
    for t in sf.topics():
        for q in sf.queue_ids(t):
            lo, hi = sf.min_offset(t, q), sf.max_offset(t, q)
            rows += sum(b.num_rows for b in sf.read_batches(t, q, lo, hi))
    return engine, rows


def test_an_index_unit_lying_about_the_committed_entry_serves_no_uncommitted_entry(tmp_path):
    """Issue 36 item 8: the index/ unit at committedIndex pointing at the last entry (past 50
    uncommitted ones) made the data source read them (284 rows where the engine read 221):
    its committed end is believed only when the entry header there agrees, else walked as
    the engine walks."""
    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    d = open_dledger(str(root))
    last = d.index_unit(299)
    _set_committed(root, 249)
    honest = _rows_by_reader(root)
    assert honest[0] == honest[1] and 0 < honest[0] < len(expected())
    # the unit of entry 249 now says: entry 249 is where entry 299 is (magic, pos, size, index)
    names = sorted(os.listdir(root / "dledger-n0" / "index"), key=int)
    at = 249 * 32
    start = max(int(n) for n in names if int(n) <= at)
    with open(root / "dledger-n0" / "index" / f"{start:020d}", "r+b") as f:
        f.seek(at - start)
        f.write(struct.pack(">iqiqq", 1, last[1], last[2], 249, last[4]))
    assert open_dledger(str(root)).committed_unit()[1] == last[1]  # the lie is read
    assert _rows_by_reader(root) == honest
    found = {(p.severity, p.kind) for p in verify_store(str(root)).problems}
    assert found == {("warning", "dledger-uncommitted"), ("error", "dledger-index")}


@pytest.mark.parametrize("value", [10**30, 2**62, -2, "12x"])
def test_a_committed_index_out_of_range_names_the_checkpoint(tmp_path, value):
    """Issue 36 item 8: a committedIndex of 10^30 or 2^62 gave "cannot fit 'int' into an
    offset-sized integer", naming no file."""
    from rmqfs.engine.errors import CorruptRecordError

    root = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "s")
    (root / "dledger-n0" / "checkpoint").write_text(f"committedIndex={value}\nendIndex=299\n")
    with pytest.raises(CorruptRecordError, match=r"dledger-n0/checkpoint: committedIndex"):
        open_dledger(str(root))
    with pytest.raises(CorruptRecordError, match=r"dledger-n0/checkpoint: committedIndex"):
        MessageStore(str(root), read_only=True)
