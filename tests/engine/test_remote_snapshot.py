"""engine.live.remote: a snapshot read in place, in CommitLog order, gives exactly the rows the
ConsumeQueues give (StoreFiles over the same copy is the judge), for a store of several
CommitLog files with interleaved queues, transactions, tags, delays and compressed bodies,
and for stores written by real brokers; damage is named, never served.

The location here is a local directory (``pyarrow.fs.LocalFileSystem``, the same range reads);
tests/spark/test_datasource_s3.py reads through a real S3 server."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

import refreader
from rmqfs.engine.errors import CorruptRecordError, ObjectStoreError, UnsupportedLayoutError
from rmqfs.engine.format.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmqfs.engine.live import remote
from rmqfs.engine.live.remote import RemoteSnapshot
from rmqfs.engine.live.snapshot import MANIFEST_NAME
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.storeconfig import StoreConfig
from stores import snapshot_copy

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"


def _config() -> StoreConfig:
    return StoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=300 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )


def _snapshot(store: MessageStore, dest: Path) -> Path:
    return snapshot_copy(store, dest)


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A snapshot copy of a store of several CommitLog files: topics T (4 queues) and U (2),
    interleaved, tags, transactions (PREPARED and ROLLBACK records get no unit), delayed
    messages (SCHEDULE_TOPIC_XXXX), a compressed body; a second round after the snapshot's
    first files sealed."""
    root = tmp_path_factory.mktemp("remote")
    with MessageStore(str(root / "store"), _config()) as s:
        s.create_topic("T", 4)
        s.create_topic("U", 2)
        for r in range(6):
            batch = []
            for i in range(200):
                n = r * 200 + i
                flag = 0
                if n % 37 == 0:
                    flag = TRANSACTION_PREPARED_TYPE
                elif n % 41 == 0:
                    flag = TRANSACTION_ROLLBACK_TYPE
                elif n % 43 == 0:
                    flag = TRANSACTION_COMMIT_TYPE
                topic = "T" if n % 3 else "U"
                batch.append(
                    Message(
                        topic,
                        f"{topic}-{n}-{'y' * (n % 500)}".encode(),
                        tags=("A", "B", None)[n % 3],
                        keys=[f"k{n}"],
                        sys_flag=flag,
                    )
                )
            s.put_messages(batch)
        s.put_messages([Message("T", b"z" * 9000, tags="big")])  # a body the store may compress
        s.put_messages([Message("T", b"later", delay_level=3)])  # SCHEDULE_TOPIC_XXXX
        assert len(s.commitlog.files.segments) >= 4
        return _snapshot(s, root / "copy")


def _rows(batches) -> list[tuple]:
    t = pa.Table.from_batches(list(batches)) if batches else None
    if t is None or not t.num_rows:
        return []
    rows = t.to_pylist()
    return sorted(
        (tuple(sorted((k, repr(v)) for k, v in r.items())) for r in rows),
    )


def _local(copy: Path, bounds, tags=None, columns=None) -> list[tuple]:
    s = StoreFiles(str(copy))
    try:
        out = []
        for (t, q), (a, b) in bounds.items():
            out.extend(s.read_batches(t, q, a, b, tags, columns=columns))
        return _rows(out)
    finally:
        s.close()


def _remote(copy: Path, bounds, tags=None, columns=None) -> tuple[list[tuple], RemoteSnapshot]:
    r = RemoteSnapshot(str(copy))
    lo, hi = r.commitlog_span(bounds)
    out = []
    for piece in r.pieces(lo, hi):
        out.extend(r.read_piece(piece, bounds, tags, columns))
    return _rows(out), r


def _all(r: RemoteSnapshot) -> dict:
    return {
        (t, q): (r.min_offset(t, q), r.max_offset(t, q)) for t in r.topics() for q in r.queue_ids(t)
    }


def test_every_queue_read_in_commitlog_order_equals_the_consumequeue_read(copy):
    r = RemoteSnapshot(str(copy))
    bounds = _all(r)
    local = StoreFiles(str(copy))
    try:  # the manifest's offsets are the copy's own
        assert sorted(bounds) == sorted((t, q) for t in local.topics() for q in local.queue_ids(t))
        for (t, q), (a, b) in bounds.items():
            assert (a, b) == (local.min_offset(t, q), local.max_offset(t, q))
    finally:
        local.close()
    assert "SCHEDULE_TOPIC_XXXX" in r.topics()
    got, r2 = _remote(copy, bounds)
    want = _local(copy, bounds)
    assert len(want) == sum(b - a for a, b in bounds.values()) > 1000
    assert got == want
    # every file read whole and summed against the manifest; requests of REQUEST bytes at most
    assert r2.stats.requests >= len(r2.pieces(0, 1 << 62))


def test_narrow_reads_tags_and_columns_equal_the_consumequeue_read(copy):
    r = RemoteSnapshot(str(copy))
    hi = r.max_offset("T", 1)
    bounds = {("T", 1): (hi // 3, hi - 5), ("U", 0): (3, 9)}
    cols = ("queueOffset", "body", "tags", "topic", "queue")
    assert _remote(copy, bounds, columns=cols)[0] == _local(copy, bounds, columns=cols)
    assert _remote(copy, bounds, tags=["A"])[0] == _local(copy, bounds, tags=["A"])
    got, r2 = _remote(copy, {("T", 1): (hi - 2, hi)})
    assert len(got) == 2
    # a narrow read reads the CommitLog between its first and last record, not every file
    assert r2.stats.bytes < sum(p.end - p.start for p in r2.pieces(0, 1 << 62)) / 2


def test_search_by_time_equals_the_local_one(copy):
    r = RemoteSnapshot(str(copy))
    local = StoreFiles(str(copy))
    try:
        for q in r.queue_ids("T"):
            lo, hi = r.min_offset("T", q), r.max_offset("T", q)
            for i in (lo, (lo + hi) // 2, hi - 1):
                ts = local.store_timestamp(local.queue("T", q).unit(i)[0])
                assert r.offset_by_time("T", q, ts) == local.offset_by_time("T", q, ts)
            assert r.offset_by_time("T", q, 1 << 62) == hi
    finally:
        local.close()


def test_a_file_that_differs_from_its_manifest_is_named(copy, tmp_path):
    bad = Path(shutil.copytree(copy, tmp_path / "bad"))
    r = RemoteSnapshot(str(bad))
    seg = r.pieces(0, 1 << 62)[1]  # a sealed file, read whole
    path = bad / seg.rel
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # in its END_OF_FILE blank, past its last record: only its sum can tell
    path.write_bytes(bytes(data))
    with pytest.raises(
        CorruptRecordError, match=rf"{seg.rel} .* has crc32c .*, expected .* by its manifest"
    ):
        list(r.read_piece(seg, _all(r)))
    with pytest.raises(CorruptRecordError, match=r"has crc32c .* not served"):
        list(r.read_piece(seg, _all(r)))  # a file found damaged is never read again
    data[-1] ^= 0xFF
    data[200] ^= 0xFF  # inside the first record: its checks name its offset
    path.write_bytes(bytes(data))
    r = RemoteSnapshot(str(bad))
    ends = [x["physicalOffset"] for x in refreader.read_commitlog(copy / "commitlog")]
    part = replace(seg, end=min(e for e in ends if e > seg.start + 200), whole=False)
    with pytest.raises(CorruptRecordError, match=rf"{seg.rel} of .*offset {seg.start}\)") as e:
        list(r.read_piece(part, _all(r)))  # not the file whole: no sum, the record's checks
    assert e.value.offset == seg.start
    with pytest.raises(CorruptRecordError, match=rf"{seg.rel} of .* has crc32c"):
        list(r.read_piece(seg, _all(r)))  # the file whole: its range fails its sum first
    os.unlink(path)
    r = RemoteSnapshot(str(bad))  # (a local file once opened stays readable)
    with pytest.raises(ObjectStoreError, match=rf"{seg.rel} of .*: gone"):
        list(r.read_piece(seg, _all(r)))


def test_no_manifest_no_queue_table_lmq_and_batchcq_are_refused(copy, tmp_path):
    with pytest.raises(ObjectStoreError, match=r"no SNAPSHOT\.json: not a snapshot"):
        RemoteSnapshot(str(tmp_path))
    old = Path(shutil.copytree(copy, tmp_path / "old"))
    import json

    doc = json.loads((old / MANIFEST_NAME).read_text())
    del doc["queues"]
    (old / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(ObjectStoreError, match="has no queues table"):
        RemoteSnapshot(str(old))
    doc["queues"] = {"%LMQ%x": {"0": [0, 1]}}
    doc["files"]["batchconsumequeue/B/0/00000000000000000000"] = {"size": 0, "crc32c": "0" * 8}
    (old / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(UnsupportedLayoutError, match="BatchConsumeQueues"):
        RemoteSnapshot(str(old))
    del doc["files"]["batchconsumequeue/B/0/00000000000000000000"]
    (old / MANIFEST_NAME).write_text(json.dumps(doc))
    r = RemoteSnapshot(str(old))
    with pytest.raises(UnsupportedLayoutError, match="LMQ"):
        list(r.read_piece(r.pieces(0, 1 << 62)[0], {("%LMQ%x", 0): (0, 1)}))


@pytest.mark.parametrize("name", ["rocketmq-4.9.8-written", "rocketmq-5.3.3-timer"])
def test_stores_written_by_real_brokers(name, tmp_path):
    """A real broker's store, snapshotted by the engine: the CommitLog-order read gives the
    ConsumeQueue read's rows, every queue (the 5.x timer's rmq_sys_wheel_timer included)."""
    src = FIXTURES / name / "store"
    if not src.is_dir():
        pytest.skip(f"fixture {name} not present")
    store = Path(shutil.copytree(src, tmp_path / "store"))
    with MessageStore(str(store)) as s:
        c = _snapshot(s, tmp_path / "copy")
    r = RemoteSnapshot(str(c))
    bounds = _all(r)
    got, _ = _remote(c, bounds)
    assert got and got == _local(c, bounds)


def test_records_are_completed_across_reads_smaller_than_them(copy, monkeypatch):
    """With requests smaller than a record, records are completed across reads."""
    monkeypatch.setattr(remote, "REQUEST", 1000)
    r = RemoteSnapshot(str(copy))
    bounds = _all(r)
    got, _ = _remote(copy, bounds)
    assert got == _local(copy, bounds)


def _upload(copy: Path, dest: Path) -> dict:
    """``rmqfs snapshot-upload COPY DEST`` to a local location (the same code as for S3),
    each file then cut to what the upload sent (a local location gets whole sparse files;
    object storage holds that prefix only: tests/mount/test_snapshot_objectstore.py)."""
    import json

    import pyarrow.fs as pafs

    from rmqfs.engine.live.objectstore import upload_snapshot

    rep = upload_snapshot(str(copy), pafs.LocalFileSystem(), str(dest))
    for rel, sent in rep["uploaded"]:
        os.truncate(dest / rel, sent)
    files = json.loads((dest / MANIFEST_NAME).read_text())["files"]
    assert [[r, v["stored"]] for r, v in sorted(files.items())] == rep["uploaded"]
    return rep


def test_a_location_holding_stored_prefixes_reads_as_the_copy(copy, tmp_path):
    """Issue 35: an upload sends each file up to its manifest ``stored`` size (a live
    segment up to the cut, a live IndexFile up to its last item), and the in-place reader
    serves the rest as zeros without a request: the same rows as the copy."""
    import json

    dest = tmp_path / "up"
    rep = _upload(copy, dest)
    files = json.loads((copy / MANIFEST_NAME).read_text())["files"]
    assert rep["uploadedBytes"] == sum(v["stored"] for v in files.values()) < rep["bytes"]
    for rel, want in files.items():
        assert (copy / rel).stat().st_size == want["size"], rel
        assert (dest / rel).stat().st_size == want["stored"] <= want["size"], rel
    segs = sorted(r for r in files if r.startswith("commitlog/"))
    live = segs[-1]
    doc = json.loads((copy / MANIFEST_NAME).read_text())
    assert files[live]["stored"] == doc["commitLogOffset"] - int(live[10:]) < files[live]["size"]
    assert all(files[r]["stored"] == files[r]["size"] for r in segs[:-1])  # sealed: whole
    assert any(r.startswith("consumequeue/") and v["stored"] < v["size"] for r, v in files.items())

    r = RemoteSnapshot(str(dest))
    bounds = _all(r)
    got, _ = _remote(dest, bounds)
    assert got and got == _local(copy, bounds)
    # past the stored prefix: zeros, no request; across it: the stored part, then zeros
    stored, size = files[live]["stored"], files[live]["size"]
    whole = (copy / live).read_bytes()
    before = r.stats.requests
    assert r.read(live, stored + 10, 100) == bytes(100) and r.stats.requests == before
    assert r.read(live, size - 5, 100) == bytes(5) and r.stats.requests == before
    assert r.read(live, stored - 10, 100) == whole[stored - 10 : stored + 90]
    assert r.stats.requests == before + 1
    # an object shorter than its stored prefix is an error naming it, never padded with zeros
    with open(dest / live, "r+b") as f:
        f.truncate(stored - 1)
    r = RemoteSnapshot(str(dest))
    with pytest.raises(ObjectStoreError, match=f"{live} of .*: 10 bytes .* 9 came back"):
        r.read(live, stored - 10, 100)
    with pytest.raises(ObjectStoreError, match="shorter than its manifest says"):
        list(r.read_piece(r.pieces(0, 1 << 62)[-1], _all(r)))


def test_a_manifest_without_stored_sizes_still_reads(copy, tmp_path):
    """A manifest written before ``stored`` existed (every object the whole file): read as
    before, the segment's tail after the cut still never asked for."""
    import json

    old = Path(shutil.copytree(copy, tmp_path / "old"))
    doc = json.loads((old / MANIFEST_NAME).read_text())
    for want in doc["files"].values():
        want.pop("stored", None)  # as written before rmqfs recorded it
    (old / MANIFEST_NAME).write_text(json.dumps(doc))
    r = RemoteSnapshot(str(old))
    bounds = _all(r)
    got, _ = _remote(old, bounds)
    assert got and got == _local(copy, bounds)
    live = max(x for x in doc["files"] if x.startswith("commitlog/"))
    size = doc["files"][live]["size"]
    before = r.stats.requests
    # past the snapshot's cut (commitLogOffset): zeros, never asked of the server
    assert r.read(live, size - 100, 200) == bytes(100)
    assert r.stats.requests == before


def test_the_source_checks_a_files_sum_when_its_bytes_come_in_order(copy, tmp_path):
    """A mount's reads of a file from its start (``cat raw/...``), block after block, are
    summed and compared with the manifest's crc32c: a file that differs fails once its stored
    prefix is in, and is not served again; a read out of order is not summed, and
    ``check_sum`` reads the rest of a file to finish its sum."""
    from rmqfs.engine.live.objectsource import ObjectSource

    bad = Path(shutil.copytree(copy, tmp_path / "bad"))
    rel = RemoteSnapshot(str(bad)).pieces(0, 1 << 62)[1].rel
    path = bad / rel
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    src = ObjectSource(str(bad), None)  # without a block cache: each read one range read
    try:
        name = f"{src.root}/{rel}"
        good = f"{src.root}/{RemoteSnapshot(str(bad)).pieces(0, 1 << 62)[0].rel}"
        size = src.file_size(name)
        assert src.pread(name, 100, size // 2) == bytes(data[size // 2 : size // 2 + 100])
        with pytest.raises(CorruptRecordError, match=rf"{rel} of .* has crc32c"):
            for at in range(0, size, 8192):
                assert src.pread(name, 8192, at) == bytes(data[at : at + 8192])
        assert at == size - 8192  # the last read finished the sum
        with pytest.raises(CorruptRecordError, match="not served"):
            src.check_sum(name)
        src.check_sum(good)  # an intact file: its rest read, its sum equal
    finally:
        src.close()
    src = ObjectSource(str(bad), str(tmp_path / "cache"), capacity=1 << 20)
    try:  # through the block cache: the block from the file's start is summed
        with pytest.raises(CorruptRecordError, match=rf"{rel} of .* has crc32c"):
            src.pread(f"{src.root}/{rel}", 100, 0)
    finally:
        src.close()


def test_a_damaged_size_is_never_read_whole_from_object_storage(copy, tmp_path, monkeypatch):
    """A record header claiming more than a broker writes (maxMessageSize + 64 KiB) is
    damage named at its offset, not a range read of what it claims (up to the file's end)."""
    monkeypatch.setattr(remote, "REQUEST", 1000)
    bad = Path(shutil.copytree(copy, tmp_path / "bad"))
    r = RemoteSnapshot(str(bad))
    seg = r.pieces(0, 1 << 62)[1]
    ends = [x["physicalOffset"] for x in refreader.read_commitlog(copy / "commitlog")]
    at = min(e for e in ends if e > seg.start + 2000)
    with open(bad / seg.rel, "r+b") as f:
        f.seek(at - seg.start)
        f.write((60 << 20).to_bytes(4, "big"))  # 60 MiB claimed, the file is 64 KiB
    r = RemoteSnapshot(str(bad))
    with pytest.raises(CorruptRecordError, match=rf"claims {60 << 20} bytes") as e:
        list(r.read_piece(seg, _all(r)))
    assert e.value.offset == at
    assert r.stats.bytes < 16_000  # ranges of 1000 bytes up to it, nothing more


@pytest.mark.parametrize("cached", [False, True])
def test_store_files_over_the_source_reads_as_the_local_copy(copy, tmp_path, cached):
    """``StoreFiles`` over a snapshot's store source (object storage; here a local location)
    lists the same topics and queues and reads the same rows, queue by queue, as over the
    copy's own files: one reader, two sources."""
    from rmqfs.engine.live.objectsource import ObjectSource

    src = ObjectSource(str(copy), str(tmp_path / "cache") if cached else None)
    remote_files = StoreFiles(src.root, source=src)
    local = StoreFiles(str(copy))
    try:
        assert remote_files.topics() == local.topics() and "T" in local.topics()
        rows = 0
        for t in local.topics():
            assert remote_files.queue_ids(t) == local.queue_ids(t)
            for q in local.queue_ids(t):
                lo, hi = local.min_offset(t, q), local.max_offset(t, q)
                assert (remote_files.min_offset(t, q), remote_files.max_offset(t, q)) == (lo, hi)
                want = _rows(list(local.read_batches(t, q, lo, hi)))
                assert _rows(list(remote_files.read_batches(t, q, lo, hi))) == want
                rows += len(want)
        assert rows > 1000
        walked = [b.num_rows for b in remote_files.read_commitlog()]
        assert sum(walked) == sum(b.num_rows for b in local.read_commitlog())
    finally:
        remote_files.close()
        local.close()
        src.close()
