"""The columnar decoder (engine.read.columnar) equals the per-record decoder (engine.format.message) and
the independent reader (tests/refreader.py) on every fixture and on stores holding every record
kind the engine writes; a damaged record raises CorruptRecordError naming its offset."""

import os
import shutil
import zlib

import numpy as np
import pytest

import refreader
from conftest import FIXTURES
from rmqfs.engine.errors import CorruptRecordError
from rmqfs.engine.format.message import COMPRESSED_FLAG, INNER_BATCH_FLAG, decompress_body
from rmqfs.engine.read import columnar
from rmqfs.engine.read.schema import arrow_schema
from rmqfs.engine.store import Message, MessageStore
from stores import blank_units_store, every_kind_store, put_internal
from stores import small_segments as _cfg

STORES = [
    FIXTURES / "rocketmq-4.9.8-written" / "store",
    FIXTURES / "mxsm-rocketmq-rust" / "store-v0.9.0" / "local-file",
    FIXTURES / "apache-rocketmq-pr3535" / "store",
]


def _ref_row(rec: dict) -> dict:
    """What refreader says a row must be (body decompressed)."""
    props = rec["properties"]
    keys = props.get("KEYS")
    return {
        "topic": rec["topic"],
        "queueId": rec["queueId"],
        "queue": rec["queueId"],
        "commitLogOffset": rec["physicalOffset"],
        "storeSize": rec["totalSize"],
        "msgId": refreader.offset_msg_id(rec["storeHostRaw"], rec["physicalOffset"]),
        "tags": props.get("TAGS"),
        "keys": [k for k in keys.split(" ") if k] if keys else [],
        "bornTimestamp": rec["bornTimestamp"],
        "bornHost": rec["bornHost"],
        "storeTimestamp": rec["storeTimestamp"],
        "storeHost": rec["storeHost"],
        "sysFlag": rec["sysFlag"],
        "flag": rec["flag"],
        "bodyCRC": rec["bodyCRC"],
        "reconsumeTimes": rec["reconsumeTimes"],
        "preparedTransactionOffset": rec["preparedTransactionOffset"],
        "properties": props,
        "body": decompress_body(rec["body"], rec["sysFlag"]),
    }


def _as_ref(row: dict) -> dict:
    out = dict(row)
    out["properties"] = dict(row["properties"])
    return out


def _check_store(root) -> int:
    """Compare every queue and the whole CommitLog; returns the rows compared."""
    root = str(root)
    by_offset = {
        r["fileOffset"]: r
        for r in refreader.read_commitlog(os.path.join(root, "commitlog"), check=False)
    }
    files = columnar.StoreFiles(root)
    rows = 0
    for topic in files.topics():
        for q in files.queue_ids(topic):
            lo, hi = files.min_offset(topic, q), files.max_offset(topic, q)
            units = files.units(topic, q, lo, hi)
            keep = units["size"] != columnar.BLANK_UNIT_SIZE
            qoffs = np.arange(lo, hi)[keep]
            units = units[keep]
            fast = columnar.decode_units(files.commitlog, topic, q, units, qoffs)
            slow = columnar.decode_units_per_record(files.commitlog, topic, q, units, qoffs)
            assert fast.schema == arrow_schema()
            assert fast.equals(slow), (topic, q)
            via_batches = list(files.read_batches(topic, q, lo, hi, batch_rows=7))
            assert sum(b.num_rows for b in via_batches) == fast.num_rows
            ref_units = refreader.read_consumequeue(root, topic, q)
            base = (
                min(int(n) for n in os.listdir(os.path.join(root, "consumequeue", topic, str(q))))
                // 20
            )
            for row in fast.to_pylist():
                off, size, _ = ref_units[row["queueOffset"] - base]
                assert (off, size) == (row["commitLogOffset"], row["storeSize"])
                want = _ref_row(by_offset[off])
                got = _as_ref(row)
                got.pop("queueOffset")
                assert got == want, off
                rows += 1
            # a column subset decodes to the same values
            sub = columnar.decode_units(
                files.commitlog, topic, q, units, qoffs, columns=("body", "queueOffset", "tags")
            )
            assert sub.equals(fast.select(["body", "queueOffset", "tags"]))
    # the CommitLog range walk finds every record refreader finds, in order
    walked = list(files.read_commitlog(batch_rows=5))
    got = [r for b in walked for r in b.to_pylist()]
    assert [r["commitLogOffset"] for r in got] == sorted(by_offset)
    for r in got:
        rec = by_offset[r["commitLogOffset"]]
        want = _ref_row(rec)
        assert r["queueOffset"] == rec["queueOffset"]
        r = _as_ref(r)
        r.pop("queueOffset")
        assert r == want
    files.close()
    return rows + len(got)


@pytest.mark.parametrize("root", STORES, ids=lambda p: p.parts[-2])
def test_columnar_equals_per_record_and_refreader_on_fixtures(root):
    assert _check_store(root) > 0


def test_columnar_on_every_record_kind(tmp_path):
    root = every_kind_store(tmp_path / "s")
    recs = refreader.read_commitlog(root / "commitlog", check=False)
    flags = {r["sysFlag"] for r in recs}
    assert any(f & COMPRESSED_FLAG for f in flags) and any(f & 0x30 for f in flags)
    assert any(f & INNER_BATCH_FLAG for f in flags)
    assert any(r["magic"] == 0xDAA320AB for r in recs)
    assert _check_store(root) > 2 * len(recs) - 10


def test_mixed_runs_keep_their_order(tmp_path, monkeypatch):
    """Common and rare records (an IPv6 born host) interleaved in one queue come back in
    queue order; compressed ones among them are the kernel's (their bodies inflated after
    it), not the per-record decoder's."""
    root = tmp_path / "s"
    v6 = (bytes(15) + b"\x01", 7)
    bodies = [(b"%d " % i) * (1 + 60 * (i % 4 == 0)) for i in range(50)]
    with MessageStore(str(root), _cfg(compress_msg_body_over_howmuch=100)) as s:
        s.create_topic("M", 1)
        s.put_messages(
            [Message("M", b, born_host=v6 if i % 3 == 0 else None) for i, b in enumerate(bodies)]
        )
    files = columnar.StoreFiles(str(root))
    slow_rows = []
    real = columnar._slow_batch

    def counting(cl, check_crc, offs, *a):
        slow_rows.extend(offs.tolist())
        return real(cl, check_crc, offs, *a)

    monkeypatch.setattr(columnar, "_slow_batch", counting)
    got = [r for b in files.read_batches("M", 0, 0, 50) for r in b.to_pylist()]
    # only the IPv6 records took the per-record decoder
    assert sorted(slow_rows) == [r["commitLogOffset"] for r in got if r["bornHost"].startswith("[")]
    assert len(slow_rows) == 17
    assert [r["queueOffset"] for r in got] == list(range(50))
    assert [r["body"] for r in got] == bodies
    assert sum(bool(r["sysFlag"] & COMPRESSED_FLAG) for r in got) == 13


@pytest.mark.parametrize("halves", [False, True], ids=["whole", "in-halves"])
@pytest.mark.parametrize("max_bytes", [0, 1, 100, 5000, 20000])
def test_a_bounded_decode_gives_the_whole_decode_in_prefixes(
    tmp_path, monkeypatch, max_bytes, halves
):
    """decode_units / decode_topic_units with max_bytes: each batch is the longest prefix of
    the units left whose bodies (compressed ones inflated) fit in max_bytes, one row at least,
    and the batches one after the other are the unbounded decode, over every record kind,
    across CommitLog files (common, compressed, IPv6 and V2 records mixed), and where a run
    of records is decoded in halves (past Arrow's int32 offsets: made small here)."""
    import pyarrow as pa

    if halves:
        monkeypatch.setattr(columnar, "_MAX_DECODE_BYTES", 3000)
    root = every_kind_store(tmp_path / "s")
    files = columnar.StoreFiles(str(root))

    def lengths(batch):
        return [len(b) for b in batch.column("body").to_pylist()]

    def check(decode, n):
        whole = decode(0, n, None)
        got, a = [], 0
        while a < n:
            b = decode(a, n, max_bytes)
            sizes = lengths(b)
            assert b.num_rows >= 1 and (sum(sizes) <= max_bytes or b.num_rows == 1)
            if a + b.num_rows < n:  # the next body would not have fit
                assert sum(sizes) + lengths(whole.slice(a + b.num_rows, 1))[0] > max_bytes
            got.append(b)
            a += b.num_rows
        assert pa.Table.from_batches(got).equals(pa.Table.from_batches([whole]))
        return len(got)

    try:
        pieces = 0
        merged = []
        for q in range(3):
            units = files.units("T", q, 0, files.max_offset("T", q))
            qoffs = np.arange(len(units), dtype=np.int64)
            units, qoffs, _ = columnar.drop_blank_units(units, qoffs)
            merged.append((units, qoffs, np.full(len(units), q, dtype=np.int64)))

            def one(a, z, limit, units=units, qoffs=qoffs, q=q):
                return columnar.decode_units(
                    files.commitlog, "T", q, units[a:z], qoffs[a:z], max_bytes=limit
                )

            pieces += check(one, len(units))
        units = np.concatenate([m[0] for m in merged])
        qoffs = np.concatenate([m[1] for m in merged])
        qids = np.concatenate([m[2] for m in merged])
        order = np.argsort(units["off"].astype(np.int64), kind="stable")
        units, qoffs, qids = units[order], qoffs[order], qids[order]

        def topic(a, z, limit):
            return columnar.decode_topic_units(
                files.commitlog, "T", qids[a:z], units[a:z], qoffs[a:z], max_bytes=limit
            )

        pieces += check(topic, len(units))
        assert pieces > 6
    finally:
        files.close()


@pytest.mark.parametrize("max_bytes", [None, 1, 150, 700, 5000])
def test_compressed_bodies_inflate_after_the_kernel_within_the_bound(
    tmp_path, monkeypatch, max_bytes
):
    """From a scale review: every compressed record (a Java client compresses each body past
    4 KiB) took the per-record decoder, 40 times slower. The kernel decodes them now and their
    bodies inflate after it: the batches equal the per-record decoder's, no record of a queue
    of plain and compressed ones takes it, and a bounded decode stops before the first body
    that does not fit (its prefix rule), inflating none past it; a body that stays compressed
    (past MAX_INFLATED_BODY) and one that does not inflate go to the per-record decoder, which
    says what it says of them."""
    import pyarrow as pa

    root = tmp_path / "s"
    bodies = [(b"%d " % i) * (1 + 90 * (i % 3 == 0)) for i in range(40)]
    with MessageStore(str(root), _cfg(compress_msg_body_over_howmuch=100)) as s:
        s.create_topic("Z", 1)
        s.put_messages([Message("Z", b, tags="t%d" % (i % 2)) for i, b in enumerate(bodies)])
    files = columnar.StoreFiles(str(root))
    units = files.units("Z", 0, 0, 40)
    qoffs = np.arange(40, dtype=np.int64)
    slow = []
    real_slow, real_inflate = columnar._slow_batch, columnar.inflate_body
    inflated = []

    def counting_slow(cl, check_crc, offs, *a):
        slow.extend(offs.tolist())
        return real_slow(cl, check_crc, offs, *a)

    def counting_inflate(body, flag, *a):
        inflated.append(body)
        return real_inflate(body, flag, *a)

    ref = columnar.decode_units_per_record(files.commitlog, "Z", 0, units, qoffs)
    monkeypatch.setattr(columnar, "_slow_batch", counting_slow)
    monkeypatch.setattr(columnar, "inflate_body", counting_inflate)
    try:
        got, a = [], 0
        while a < 40:
            before = len(inflated)
            b = columnar.decode_units(
                files.commitlog, "Z", 0, units[a:], qoffs[a:], max_bytes=max_bytes
            )
            # no body inflated past the first that does not fit
            assert len(inflated) - before <= sum(i % 3 == 0 for i in range(a, a + b.num_rows)) + 1
            lengths = [len(x) for x in b.column("body").to_pylist()]
            if max_bytes is not None:
                assert b.num_rows == 1 or sum(lengths) <= max_bytes
                if a + b.num_rows < 40:
                    assert sum(lengths) + len(bodies[a + b.num_rows]) > max_bytes
            got.append(b)
            a += b.num_rows
        assert pa.Table.from_batches(got).equals(pa.Table.from_batches([ref]))
        assert slow == []
        packed = sum(1 for i in range(40) if i % 3 == 0)
        assert packed == 14 and len(inflated) >= packed
        if max_bytes is None:
            assert len(inflated) == packed  # one inflation each, none twice
        # the fallbacks: a body kept compressed, and one that does not inflate
        monkeypatch.setattr(columnar, "inflate_body", lambda b, f: (b, "zlib"))
        assert columnar.decode_units(files.commitlog, "Z", 0, units, qoffs).equals(ref)
        assert sorted(slow) == units["off"].astype(np.int64).tolist()

        def broken(b, f):
            raise CorruptRecordError("does not inflate")

        monkeypatch.setattr(columnar, "inflate_body", broken)
        assert columnar.decode_units(files.commitlog, "Z", 0, units, qoffs).equals(ref)
    finally:
        files.close()


def _damage(root, mutate):
    files = columnar.StoreFiles(str(root))
    units = files.units("D", 0, 0, 10)
    offs = [int(u) for u in units["off"]]
    sizes = [int(u) for u in units["size"]]
    files.close()
    mutate(root, offs, sizes)
    files = columnar.StoreFiles(str(root))
    try:
        with pytest.raises(CorruptRecordError) as info:
            for _ in files.read_batches("D", 0, 0, 10):
                pass
        return info.value, offs
    finally:
        files.close()


def sizes_of(root):
    return [r["totalSize"] for r in refreader.read_commitlog(root / "commitlog", check=False)]


def _patch(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


@pytest.mark.parametrize(
    "what",
    ["magic", "totalsize", "physical", "bodylen", "unit_size", "unit_offset", "queue", "topic"],
)
def test_damaged_record_raises_naming_its_offset(tmp_path, what, monkeypatch):
    # damage of a plain queue is raised at once: the per-record pass that lets a 4.x
    # MultiDispatch queue hold other topics' records runs only for a record that names queues
    monkeypatch.setattr(
        columnar, "_decode_foreign", lambda *a: pytest.fail("per-record pass on plain damage")
    )
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("D", 1)
        s.create_topic("E", 1)
        s.put_messages([Message("D", b"body %d" % i, tags="t") for i in range(10)])
        s.put_messages([Message("E", b"other")])
    cl = root / "commitlog" / f"{0:020d}"
    cq = root / "consumequeue" / "D" / "0" / f"{0:020d}"

    def mutate(root, offs, sizes):
        o = offs[4]
        if what == "magic":
            _patch(cl, o + 4, b"\0\0\0\0")
        elif what == "totalsize":
            _patch(cl, o, (sizes[4] + 1).to_bytes(4, "big"))
        elif what == "physical":
            _patch(cl, o + 28, (o + 1).to_bytes(8, "big"))
        elif what == "bodylen":
            _patch(cl, o + 84, (200).to_bytes(4, "big"))
        elif what == "unit_size":
            _patch(cq, 4 * 20 + 8, (sizes[4] - 3).to_bytes(4, "big"))
        elif what == "unit_offset":
            _patch(cq, 4 * 20, (o + 7).to_bytes(8, "big"))
        elif what == "queue":
            _patch(cl, o + 12, (3).to_bytes(4, "big"))
        elif what == "topic":  # the unit points at a record of topic E
            e_off = offs[-1] + sizes[-1]
            _patch(cq, 4 * 20, e_off.to_bytes(8, "big"))
            _patch(
                cq,
                4 * 20 + 8,
                refreader.read_commitlog(root / "commitlog")[-1]["totalSize"].to_bytes(4, "big"),
            )

    err, offs = _damage(root, mutate)
    if what in ("unit_offset",):
        assert err.offset == offs[4] + 7
    elif what == "topic":
        assert err.offset == offs[-1] + sizes_of(root)[-2] and "belongs to 'E'/0" in str(err)
    else:
        assert err.offset == offs[4]
    assert f"offset {err.offset}" in str(err)


def test_damaged_rare_record_raises_too(tmp_path):
    """A compressed (per-record path) record with a bad magic or whose body does not
    decompress raises instead of giving a row."""
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg(compress_msg_body_over_howmuch=10)) as s:
        s.create_topic("D", 1)
        s.put_messages([Message("D", b"compress this body " * 20) for _ in range(10)])

    def mutate(root, offs, sizes):
        cl = root / "commitlog" / f"{0:020d}"
        _patch(cl, offs[4] + 88 + 2, b"\xff\xff\xff\xff")
        if fix_crc:  # a BODYCRC that matches the damaged body: decompressing fails
            raw = cl.read_bytes()
            blen = int.from_bytes(raw[offs[4] + 84 : offs[4] + 88], "big")
            crc = zlib.crc32(raw[offs[4] + 88 : offs[4] + 88 + blen]) & 0x7FFFFFFF
            _patch(cl, offs[4] + 8, crc.to_bytes(4, "big"))

    for fix_crc in (False, True):
        err, offs = _damage(root, mutate)
        assert ("decompress" if fix_crc else "body CRC mismatch") in str(err)
        assert err.offset == offs[4]


def test_store_files_open_read_only_without_the_lock(tmp_path):
    """A store held by a writer is readable; nothing is created or written."""
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("R", 1)
        s.put_messages([Message("R", b"m%d" % i) for i in range(5)])
        before = {
            p: os.stat(os.path.join(d, p)).st_mtime_ns for d, _, fs in os.walk(root) for p in fs
        }
        files = columnar.StoreFiles(str(root))
        rows = [
            r["body"]
            for b in files.read_batches("R", 0, 0, files.max_offset("R", 0))
            for r in b.to_pylist()
        ]
        assert rows == [b"m%d" % i for i in range(5)]
        files.close()
        after = {
            p: os.stat(os.path.join(d, p)).st_mtime_ns for d, _, fs in os.walk(root) for p in fs
        }
        assert after == before
    shutil.rmtree(root)


def test_queue_directory_names_follow_the_stores_one_rule(tmp_path):
    """``consumequeue/<topic>/<name>``: StoreFiles, the store and verify take a name for a
    queue by one rule (engine.format.consumequeue.queue_dir_id: a canonical decimal of at most 9
    digits); "007", "²" and a 10-digit name are no queues anywhere (verify warns)."""
    from rmqfs.engine.format.consumequeue import queue_dir_id
    from rmqfs.engine.tools.verify import verify_store

    assert [queue_dir_id(n) for n in ("0", "7", "123456789")] == [0, 7, 123456789]
    assert [queue_dir_id(n) for n in ("007", "+1", "²", "1\n", "1234567890", "")] == [None] * 6
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"m%d" % i) for i in range(4)])
    odd = ("007", "²", "1234567890")
    for name in odd:
        (root / "consumequeue" / "T" / name).mkdir()
    files = columnar.StoreFiles(str(root))
    assert files.queue_ids("T") == [0, 1]
    files.close()
    with MessageStore(str(root), _cfg(), read_only=True) as s:
        assert s.queue_ids("T") == [0, 1]
    res = verify_store(str(root), _cfg())
    assert res.ok and res.queues == 2
    assert sorted(p.path for p in res.warnings if p.kind == "cq-stray") == sorted(
        f"consumequeue/T/{n}" for n in odd
    )


@pytest.mark.parametrize("columns", [None, ("queueOffset",), ("msgId", "tags")])
def test_body_crc_mismatch_is_never_a_row(tmp_path, columns):
    """A record whose body does not match its BODYCRC (one flipped body byte: every other
    check passes) raises CorruptRecordError naming its offset on every columnar path, whichever
    columns are asked for (``MessageDecoder.decode(..., checkCRC=true)``)."""
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("D", 2)
        s.put_messages([Message("D", b"body %d" % i, queue_id=i % 2) for i in range(20)])
    files = columnar.StoreFiles(str(root))
    units = files.units("D", 0, 0, 10)
    files.close()
    bad = int(units["off"][4])
    _patch(root / "commitlog" / f"{0:020d}", bad + 88 + 1, b"X")
    files = columnar.StoreFiles(str(root))
    try:
        for read in (
            lambda: list(files.read_batches("D", 0, 0, 10, columns=columns)),
            lambda: list(files.read_commitlog(columns=columns)),
            lambda: columnar.decode_topic_units(
                files.commitlog, "D", np.zeros(10, np.int64), units, np.arange(10), columns=columns
            ),
            lambda: columnar.decode_units_per_record(
                files.commitlog, "D", 0, units, np.arange(10), columns=columns
            ),
        ):
            with pytest.raises(CorruptRecordError, match="body CRC mismatch") as info:
                read()
            assert info.value.offset == bad
        # the other queue and the records before it still read
        assert sum(b.num_rows for b in files.read_batches("D", 1, 0, 10)) == 10
        assert sum(b.num_rows for b in files.read_batches("D", 0, 0, 4)) == 4
    finally:
        files.close()
    # the bench's switch: without the check the row comes back (what the mount served)
    files = columnar.StoreFiles(str(root), check_crc=False)
    try:
        assert sum(b.num_rows for b in files.read_batches("D", 0, 0, 10)) == 10
    finally:
        files.close()


# -- one reader of a queue's units (issue 17): queue_units + drop_blank_units ------------------


def _old_units(cq, start, end):
    """The views' and parts' code before queue_units: raw bytes joined, then frombuffer."""
    out, pos = [], start
    while pos < end:
        raw = cq.read_units(pos, end - pos)
        if not raw:
            break
        out.append(raw)
        pos += len(raw) // 20
    arr = np.frombuffer(b"".join(out), dtype=columnar.UNIT_DTYPE)
    return arr, np.arange(start, start + len(arr), dtype=np.int64)


def _old_drop(units, qoffs, qids):
    keep = units["size"] != columnar.BLANK_UNIT_SIZE
    if not keep.all():
        units, qoffs = units[keep], qoffs[keep]
        if not isinstance(qids, int):
            qids = qids[keep]
    return units, qoffs, qids


@pytest.mark.parametrize("which", ["blanks", "every_kind", *range(len(STORES))])
def test_queue_units_and_blank_filter_equal_the_code_they_replace(tmp_path, which):
    """The views' chunks, the Parquet parts and read_batches now read units and drop blank
    filler through engine.read.columnar.queue_units / drop_blank_units: the same units, queue
    offsets and queue ids as the inline code each had, and read_batches the same rows."""
    if which == "blanks":
        root, cfg = str(blank_units_store(tmp_path / "s")), None
    elif which == "every_kind":
        root, cfg = str(tmp_path / "s"), _cfg(compress_msg_body_over_howmuch=1024)
        every_kind_store(root)
    else:
        root = str(tmp_path / "s")
        shutil.copytree(STORES[which], root)
        cfg = None
    from stores import small

    with MessageStore(root, small() if which == "blanks" else cfg, read_only=True) as s:
        blanks = 0
        for (topic, q), cq in sorted(s.consume_queues.items()):
            lo, hi = cq.min_offset, cq.max_offset
            for a, b in ((lo, hi), (lo, hi + 5), (lo + 1, min(hi, lo + 4)), (hi, hi)):
                old, new = _old_units(cq, a, b), columnar.queue_units(cq, a, b)
                assert old[0].tobytes() == new[0].tobytes() and (old[1] == new[1]).all()
                qids = np.full(len(new[0]), q, dtype=np.int64)
                for ids in (q, qids):
                    o, n = _old_drop(*old, ids), columnar.drop_blank_units(*new, ids)
                    assert o[0].tobytes() == n[0].tobytes() and (o[1] == n[1]).all()
                    assert np.array_equal(o[2], n[2])
                blanks = max(blanks, len(new[0]) - len(n[0]))
            if which == "blanks" and (topic, q) == ("T", 0):
                assert blanks == 3
            files = columnar.StoreFiles(root)
            try:
                if (files.min_offset(topic, q), files.max_offset(topic, q)) != (lo, hi):
                    continue  # units the store rebuilt in memory (no ConsumeQueue on disk)
                got = [
                    r["queueOffset"]
                    for b in files.read_batches(topic, q, lo, hi, batch_rows=4)
                    for r in b.to_pylist()
                ]
            finally:
                files.close()
            qoffs = _old_drop(*_old_units(cq, lo, hi), q)[1]
            assert got == [int(x) for x in qoffs]
        assert columnar.queue_units(None, 0, 5)[0].size == 0


def test_storefiles_follows_a_writer_and_agrees_with_the_store(tmp_path):
    """The lock-free reader (``StoreFiles``) reads through the format's own ConsumeQueue
    (issue 22, one reader per format): units a writer appends after the open become visible,
    across a new ConsumeQueue file; files retention deletes move the min offset; and its min,
    max and search by time equal ``MessageStore``'s on the same files."""
    root = tmp_path / "store"
    cfg = _cfg()  # 100 units a ConsumeQueue file, 64 KiB CommitLog files
    body = b"y" * 900
    w = MessageStore(str(root), cfg)
    sf = None
    try:
        w.create_topic("F", 1)
        w.put_messages([Message("F", body + b"%d" % i, queue_id=0) for i in range(150)])
        sf = columnar.StoreFiles(str(root))
        assert (sf.min_offset("F", 0), sf.max_offset("F", 0)) == (0, 150)
        w.put_messages([Message("F", body + b"%d" % i, queue_id=0) for i in range(150, 270)])
        assert sf.max_offset("F", 0) == 270  # into the third ConsumeQueue file
        got = [
            r
            for b in sf.read_batches("F", 0, 140, 270, columns=("body",))
            for r in b.column(0).to_pylist()
        ]
        assert got == [body + b"%d" % i for i in range(140, 270)]
    finally:
        w.close()
    # retention: the oldest CommitLog file, then the ConsumeQueue file whose units all point
    # into deleted records (CleanCommitLogService, then CleanConsumeQueueService)
    for seg in sorted((root / "commitlog").iterdir())[:2]:  # about 128 records
        os.unlink(seg)
    os.unlink(sorted((root / "consumequeue" / "F" / "0").iterdir())[0])
    with MessageStore(str(root), cfg, read_only=True) as r:
        want_min, want_max = r.min_offset("F", 0), r.max_offset("F", 0)
        assert want_min > 100  # the first file's units went, and the first records of the next
        times = sorted(
            {r.get_message("F", 0, q).store_timestamp for q in range(want_min, want_max, 7)}
        )
        want_time = {t: r.offset_by_time("F", 0, t) for t in (0, *times, times[-1] + 1)}
    assert sf is not None
    try:
        assert (sf.min_offset("F", 0), sf.max_offset("F", 0)) == (want_min, want_max)
        assert {t: sf.offset_by_time("F", 0, t) for t in want_time} == want_time
        got = [
            r
            for b in sf.read_batches("F", 0, want_min, want_max, columns=("queueOffset",))
            for r in b.column(0).to_pylist()
        ]
        assert got == list(range(want_min, want_max))
    finally:
        sf.close()


@pytest.mark.parametrize("read_size", [300, 4096, 1 << 20])
def test_the_commitlog_walk_in_ranges_of_any_size_finds_every_record(tmp_path, read_size):
    """``decode_commitlog`` walks the CommitLog in ranges of ``read_size`` bytes: records cut by
    a range (or longer than it) are read again whole, blank END_OF_FILE records move on to the
    next file, and every record comes back once, in order, as refreader finds them; a damaged
    header ends the walk after every record before it, naming its offset."""
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:  # small segments: many files, blanks at ends
        s.create_topic("W", 2)
        s.put_messages(
            [Message("W", b"x" * (1 + (i * 37) % 900), queue_id=i % 2) for i in range(600)]
        )
    recs = refreader.read_commitlog(root / "commitlog")
    assert len({r["physicalOffset"] // _cfg().mapped_file_size_commit_log for r in recs}) > 3
    assert max(r["totalSize"] for r in recs) > 300
    files = columnar.StoreFiles(str(root))
    try:
        got = [
            r
            for b in columnar.decode_commitlog(
                files.commitlog, columns=("commitLogOffset", "queueOffset", "body"),
                read_size=read_size, batch_rows=50,
            )
            for r in b.to_pylist()
        ]  # fmt: skip
        assert [(r["commitLogOffset"], r["queueOffset"], r["body"]) for r in got] == [
            (r["physicalOffset"], r["queueOffset"], r["body"]) for r in recs
        ]
        # from a record in the middle, to a record's start: exactly the records between
        a, b = recs[100]["physicalOffset"], recs[400]["physicalOffset"]
        part = columnar.decode_commitlog(
            files.commitlog, a, b, columns=("commitLogOffset",), read_size=read_size,
            exact_end=True,
        )  # fmt: skip
        offs = [o for x in part for o in x.column("commitLogOffset").to_pylist()]
        assert offs == [r["physicalOffset"] for r in recs[100:400]]
    finally:
        files.close()
    bad = recs[450]["physicalOffset"]
    seg = _cfg().mapped_file_size_commit_log
    _patch(root / "commitlog" / f"{bad - bad % seg:020d}", bad % seg + 4, b"\0\0\0\1")
    seen, err = _walk_to_damage(root, read_size)
    assert err.offset == bad
    assert seen == [r["physicalOffset"] for r in recs[:450]]
    _patch(root / "commitlog" / f"{bad - bad % seg:020d}", bad % seg + 4, b"\xda\xa3\x20\xa7")
    body = recs[300]["physicalOffset"] + 88  # the body's first byte (after BODYLENGTH)
    with open(root / "commitlog" / f"{body - body % seg:020d}", "r+b") as f:
        f.seek(body % seg)
        byte = f.read(1)
        f.seek(body % seg)
        f.write(bytes([byte[0] ^ 0xFF]))
    seen, err = _walk_to_damage(root, read_size)  # BODYCRC: found by the decoder
    assert err.offset == recs[300]["physicalOffset"]
    assert seen == [r["physicalOffset"] for r in recs[:300]]


def _walk_to_damage(root, read_size: int) -> tuple[list[int], CorruptRecordError]:
    """The CommitLog offsets ``decode_commitlog`` yields before the error it must raise."""
    files = columnar.StoreFiles(str(root))
    seen: list[int] = []
    try:
        with pytest.raises(CorruptRecordError) as info:
            for x in columnar.decode_commitlog(
                files.commitlog, columns=("commitLogOffset",), read_size=read_size
            ):
                seen.extend(x.column("commitLogOffset").to_pylist())
    finally:
        files.close()
    return seen, info.value


def test_the_commitlog_walk_names_a_missing_or_short_file(tmp_path):
    """A CommitLog file missing or cut short before the last one ends the walk with
    CorruptRecordError, never silently (FileQueue refuses such a store too)."""
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("W", 1)
        s.put_messages([Message("W", b"y" * 500) for _ in range(600)])
    names = sorted(os.listdir(root / "commitlog"))
    assert len(names) > 3
    recs = refreader.read_commitlog(root / "commitlog")
    seg = _cfg().mapped_file_size_commit_log
    inside = [r for r in recs if r["physicalOffset"] // seg == 1]
    cut = inside[3]["physicalOffset"] % seg  # file 1 cut at a record boundary
    os.truncate(root / "commitlog" / names[1], cut)
    for gone in (False, True):
        if gone:
            os.unlink(root / "commitlog" / names[1])
        files = columnar.StoreFiles(str(root))
        try:
            with pytest.raises(CorruptRecordError, match=r"missing or short|ends before its size"):
                for _ in columnar.decode_commitlog(files.commitlog, columns=("commitLogOffset",)):
                    pass
        finally:
            files.close()


def test_read_batches_bounds_the_bodies_of_a_batch_and_drops_no_row(tmp_path, monkeypatch):
    """Compressed bodies inflate to many times their records (a few KiB of zlib to 3 MiB
    here): a batch of units whose bodies take more than READ_BATCH_BYTES is read in several
    batches, each of them under the bound (but for a first record on its own), and every row
    comes back, with the tags filter too. Before, one batch held them all, and past 2 GiB
    (Arrow's binary column) the rows after the first chunk were dropped without a word
    (found by a review of the Spark reader: 136 of 150 rows of 15 MiB bodies)."""
    monkeypatch.setattr(columnar, "READ_BATCH_BYTES", 8 << 20)
    inflated = 3 << 20
    body = zlib.compress(b"\0" * inflated, 9)
    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("Z", 1)
        for i in range(12):
            m = Message("Z", body, tags="even" if i % 2 == 0 else "odd", queue_id=0)
            m.sys_flag, m.compress = COMPRESSED_FLAG, False
            put_internal(s, [m])
    f = columnar.StoreFiles(str(root))
    try:
        lens = []
        for b in f.read_batches("Z", 0, 0, 12, columns=("queueOffset", "body")):
            assert b.num_rows == 1 or b.num_rows * inflated <= columnar.READ_BATCH_BYTES
            lens.append(b.num_rows)
            assert all(len(x) == inflated for x in b.column("body").to_pylist())
        assert sum(lens) == 12 and len(lens) >= 4
        got = [
            q
            for b in f.read_batches("Z", 0, 0, 12, tags=["even"], columns=("queueOffset",))
            for q in b.column(0).to_pylist()
        ]
        assert got == list(range(0, 12, 2))
    finally:
        f.close()


@pytest.mark.parametrize("good", [0, 1, 10])
@pytest.mark.parametrize("bad", [0, 1, 16, 17, 100, 100_000])
def test_max_offset_backs_off_units_past_the_commitlog_in_log_time(tmp_path, good, bad):
    """A ConsumeQueue whose last units point past the CommitLog's end (a CommitLog cut short,
    a copy in progress) ends at its last readable unit, as a walk back one unit at a time
    says, with a number of record checks that grows with the log of the unreadable units
    (a review found a million of them took 14 s a queue, twice per planned query)."""
    from rmqfs.engine.format.consumequeue import UNIT

    root = tmp_path / "s"
    with MessageStore(str(root), _cfg(mapped_file_size_consume_queue=200_000 * 20)) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"x" * 10, queue_id=0) for _ in range(max(good, 1))])
    qdir = root / "consumequeue" / "T" / "0"
    f = qdir / sorted(os.listdir(qdir))[0]
    with open(f, "r+b") as fh:
        off, size, tags = UNIT.unpack(fh.read(20))
        fh.seek(20 * good)
        fh.write(b"".join(UNIT.pack(off + 10**9 + i * size, size, tags) for i in range(bad)))
        if good == 0 and bad == 0:
            fh.write(UNIT.pack(off + 10**9, size, tags))
            bad = 1
    files = columnar.StoreFiles(str(root))
    checks = []
    real = files._record_ok
    files._record_ok = lambda o, n: checks.append(o) or real(o, n)  # type: ignore[method-assign]
    try:
        assert files.max_offset("T", 0) == good
        assert len(checks) <= 16 + 2 * (bad.bit_length() + 1) + 1
    finally:
        files.close()


def test_a_unit_of_the_blank_size_at_a_record_is_damage_not_filler(tmp_path):
    """``fillPreBlank`` writes ``(0, Integer.MAX_VALUE, 0)``; a unit of that size pointing at a
    record (a damaged size) is refused as the damage it is, as any other impossible size
    is, instead of being skipped as filler (found by a review: 39 of 40 rows, no error)."""
    from rmqfs.engine.format.consumequeue import BLANK_UNIT_SIZE, UNIT

    root = tmp_path / "s"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"m%d" % i, queue_id=0) for i in range(40)])
    qdir = root / "consumequeue" / "T" / "0"
    f = qdir / sorted(os.listdir(qdir))[0]
    with open(f, "r+b") as fh:
        fh.seek(10 * 20)
        off, _, tags = UNIT.unpack(fh.read(20))
        fh.seek(10 * 20)
        fh.write(UNIT.pack(off, BLANK_UNIT_SIZE, tags))
    files = columnar.StoreFiles(str(root))
    try:
        with pytest.raises(CorruptRecordError):
            for _ in files.read_batches("T", 0, 0, 40):
                pass
        blanks = np.zeros(3, dtype=columnar.UNIT_DTYPE)
        blanks["size"] = BLANK_UNIT_SIZE
        kept, _, _ = columnar.drop_blank_units(blanks, np.arange(3))
        assert len(kept) == 0  # fillPreBlank's own filler is still skipped
    finally:
        files.close()
