"""IndexFile / IndexService (engine/format/indexfile.py), engine only.

Ports RocketMQ's ``IndexFileTest`` (testPutKey, testSelectPhyOffset) and ``IndexServiceTest``
(query with an empty key and a huge maxNum), then checks rolling, abnormal load, truncate,
read-only mode, the real fixture index files (written by RocketMQ 4.9.8 and rocketmq-rust), a
byte-for-byte rebuild of the 4.9.8 fixture, and agreement with the independent test reader.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

import refreader as rr
from conftest import FIXTURES
from rmqfs.engine.errors import CorruptRecordError, ReadOnlyStoreError
from rmqfs.engine.format.indexfile import (
    HEADER,
    INDEX_HEADER_SIZE,
    LONG_MAX,
    IndexFile,
    cut_index,
    index_file_name,
    index_file_size,
    index_geometry,
    name_after,
)
from rmqfs.engine.format.javahash import index_key_hash
from rmqfs.engine.service.indexservice import IndexService

RMQ498 = FIXTURES / "rocketmq-4.9.8-written"
RUST_INDEX = FIXTURES / "mxsm-rocketmq-rust" / "store-v0.9.0" / "local-file" / "index"
INT_MAX = 2**31 - 1
T0 = 1_700_000_000_000


def rec(offset, ts, keys=(), uniq=None, topic="T", sys_flag=0):
    """A dispatch item as the store passes it (``_Dispatch``'s index fields)."""
    return SimpleNamespace(
        topic=topic,
        commitlog_offset=offset,
        store_timestamp=ts,
        keys=keys if isinstance(keys, str) else list(keys),
        uniq_key=uniq,
        sys_flag=sys_flag,
    )


def used_bytes(f: IndexFile | str, slots: int | None = None) -> bytes:
    """Header + slots + items 0..indexCount-1 of a file on disk (what a reader can see)."""
    path = f if isinstance(f, (str, os.PathLike)) else f.path
    data = Path(path).read_bytes()
    count = max(HEADER.unpack_from(data)[5], 1)
    if slots is None:
        slots = rr.index_geometry(str(path))[0]
    return data[: INDEX_HEADER_SIZE + slots * 4 + count * 20]


# -- IndexFileTest ------------------------------------------------------------------------------


def test_put_key_capacity(tmp_path):
    """IndexFileTest.testPutKey: 100 slots, 400 items; 399 keys fit, the 400th is refused."""
    f = IndexFile(str(tmp_path / "100"), 100, 400)
    assert os.path.getsize(f.path) == 40 + 100 * 4 + 400 * 20
    for i in range(399):
        assert f.put_key(str(i), i, T0 + i)
    assert f.index_count == 400 and f.is_write_full
    assert not f.put_key("400", 400, T0 + 400)
    assert f.index_count == 400
    assert rr.read_indexfile(f.path)["indexCount"] == 400
    f.close()


def test_select_phy_offset(tmp_path):
    """IndexFileTest.testSelectPhyOffset: key "60" over [0, Long.MAX] gives exactly one offset."""
    f = IndexFile(str(tmp_path / "200"), 100, 400)
    for i in range(399):
        assert f.put_key(str(i), i, T0)
    assert not f.put_key("400", 400, T0)
    assert f.select_phy_offsets("60", 10, 0, LONG_MAX) == [60]
    assert f.select_phy_offsets("no-such-key", 10, 0, LONG_MAX) == []
    f.close()


def test_index_service_query_empty_key_huge_max(tmp_path):
    """IndexServiceTest: queryOffset with an empty key and maxNum = Integer.MAX does not throw."""
    svc = IndexService(str(tmp_path / "index"), 100, 400)
    assert svc.query("", "", INT_MAX, 0, LONG_MAX) == []
    svc.dispatch([rec(0, T0, ["a"], "U1")])
    assert svc.query("", "", INT_MAX, 0, LONG_MAX) == []
    assert svc.query("T", "a", INT_MAX) == [0]
    svc.close()


# -- putKey details -----------------------------------------------------------------------------


def test_header_and_item_layout(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 8, 32)
    assert f.put_key("T#a", 100, T0 + 1234)
    assert f.put_key("T#b", 200, T0 + 5678)
    assert f.put_key("T#a", 300, T0 + 9999)
    hdr = rr.read_indexfile(f.path)
    assert hdr == {
        "beginTimestamp": T0 + 1234,
        "endTimestamp": T0 + 9999,
        "beginPhyOffset": 100,
        "endPhyOffset": 300,
        "hashSlotCount": f.hash_slot_count,
        "indexCount": 4,
    }
    assert hdr == f.header()
    ha, hb = index_key_hash("T#a"), index_key_hash("T#b")
    items = rr.read_index_items(f.path, 8)
    # The first item's timeDiff uses the begin before it (0 here -> 0).
    assert items[0] == (ha, 100, 0, 0)
    assert items[1] == (hb, 200, (5678 - 1234) // 1000, 1 if ha % 8 == hb % 8 else 0)
    assert items[2][:3] == (ha, 300, (9999 - 1234) // 1000) and items[2][3] in (1, 2)
    assert f.hash_slot_count == (1 if ha % 8 == hb % 8 else 2)
    f.close()


def test_first_item_uses_previous_begin(tmp_path):
    """A new file starts at the previous end; its first item's timeDiff is against that."""
    f = IndexFile(str(tmp_path / "f"), 8, 32, end_phy_offset=5000, end_timestamp=T0)
    on_disk = rr.read_indexfile(f.path)
    assert on_disk["beginPhyOffset"] == on_disk["endPhyOffset"] == 5000
    assert on_disk["beginTimestamp"] == on_disk["endTimestamp"] == T0
    assert on_disk["indexCount"] == 0  # written only by the first put, as in Java
    assert f.put_key("T#k", 6000, T0 + 7500)
    assert rr.read_index_items(f.path, 8)[0][2] == 7
    assert (f.begin_timestamp, f.begin_phy_offset) == (T0 + 7500, 6000)
    f.close()


def test_time_diff_clamped(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 8, 32)
    f.put_key("T#first", 1, T0)
    f.put_key("T#old", 2, T0 - 60_000)  # before begin -> 0
    f.put_key("T#far", 3, T0 + (INT_MAX + 10) * 1000)  # -> Integer.MAX_VALUE
    items = rr.read_index_items(f.path, 8)
    assert [it[2] for it in items] == [0, 0, INT_MAX]
    f.close()


def test_stale_slot_counts_as_empty(tmp_path):
    """A slot value > indexCount (left over from a lost header) reads and writes as empty."""
    path = tmp_path / "f"
    f = IndexFile(str(path), 1, 16)
    f.put_key("T#a", 10, T0)
    f.close()
    with open(path, "r+b") as fh:  # slot 0 -> 9, beyond indexCount 2
        fh.seek(40)
        fh.write((9).to_bytes(4, "big"))
    f = IndexFile(str(path), 1, 16)
    assert f.select_phy_offsets("T#a", 10) == []
    f.put_key("T#b", 20, T0)
    assert rr.read_index_items(str(path), 1)[1][3] == 0  # prevIndex: slot treated as empty
    assert f.hash_slot_count == 2
    f.close()


def test_a_new_file_does_not_read_its_slots_until_it_holds_an_item(tmp_path, monkeypatch):
    """A file this process created has only 0 slots until its first item: its first batched
    put does not read the slot table (20 MB by default, a sparse file's zero pages), and
    writes what a put into a reopened file writes. A file opened, or cut, reads them."""
    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append(n) or real(fd, n, off))
    flat = [v for i in range(3) for v in (index_key_hash(f"T#k{i}"), 100 + i, T0 + i)]
    new = IndexFile(str(tmp_path / "new"), 64, 32)
    new.put_hashed(flat)
    assert max(reads, default=0) < 64 * 4  # no read of the slot table
    new.close()
    IndexFile(str(tmp_path / "old"), 64, 32).close()
    reads.clear()
    old = IndexFile(str(tmp_path / "old"), 64, 32)  # opened: its slots are read
    old.put_hashed(flat)
    assert 64 * 4 in reads
    old.close()
    assert used_bytes(tmp_path / "new", 64) == used_bytes(tmp_path / "old", 64)
    cut = IndexFile(str(tmp_path / "cut"), 64, 32)  # created here, then cut to no item
    cut.put_hashed(flat)
    cut.truncate(0)
    assert cut.index_count == 1
    reads.clear()
    cut.put_hashed(flat)  # a cut file's slots are read again
    assert 64 * 4 in reads
    cut.close()


def test_select_time_window(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 4, 64)
    for i in range(10):
        f.put_key("T#k", i * 10, T0 + i * 10_000)
    assert f.select_phy_offsets("T#k", 64) == [90, 80, 70, 60, 50, 40, 30, 20, 10, 0]
    assert f.select_phy_offsets("T#k", 3) == [90, 80, 70]
    # Items older than begin stop the walk; items after end are skipped.
    got = f.select_phy_offsets("T#k", 64, T0 + 30_000, T0 + 60_000)
    assert got == [60, 50, 40, 30]
    assert f.select_phy_offsets("T#k", 64, T0 + 95_000, LONG_MAX) == []
    for begin, end in ((T0 + 30_000, T0 + 60_000), (0, T0), (T0 + 95_000, LONG_MAX)):
        assert f.select_phy_offsets("T#k", 64, begin, end) == rr.index_lookup(
            f.path, "T#k", 4, begin, end
        )
    f.close()


def test_put_key_restores_slot_when_header_write_fails(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 1, 16)
    f.put_key("T#a", 10, T0)
    real = f._io

    class FailHeader:
        def __init__(self):
            self.read = real.read

        def write(self, off, data):
            if off == 0:
                raise OSError(28, "No space left on device")
            real.write(off, data)

    f._io = FailHeader()
    with pytest.raises(OSError):
        f.put_key("T#b", 20, T0)
    f._io = real
    assert f.index_count == 2
    assert f.select_phy_offsets("T#a", 10) == [10]
    assert rr.index_lookup(f.path, "T#a", 1) == [10]
    f.close()


def test_a_batch_put_cut_short_in_its_slots_puts_every_slot_back(tmp_path):
    """A batched put whose write of a run of slots stops part way (a short ``pwrite``, then
    ENOSPC) leaves no slot naming an item the header does not count: every run is put back,
    the one cut short too; the header and the in-memory table are as before."""
    f = IndexFile(str(tmp_path / "f"), 64, 32)
    f.put_hashed([1, 10, T0])  # one item: the file now holds a slot
    before = Path(f.path).read_bytes()[: INDEX_HEADER_SIZE + 64 * 4]
    real = f._io

    class ShortSlotRun:
        def __init__(self):
            self.read = real.read
            self.failed = False

        def write(self, off, data):
            in_slots = INDEX_HEADER_SIZE <= off < INDEX_HEADER_SIZE + 64 * 4
            if not self.failed and in_slots and len(data) > 4:
                # the run of slots 5..9: its first two land, then ENOSPC
                real.write(off, bytes(data)[:8])
                self.failed = True
                raise OSError(28, "No space left on device")
            real.write(off, data)

    f._io = ShortSlotRun()
    entries = [v for k in range(5, 10) for v in (k, 100 + k, T0 + k)]  # slots 5..9: one run
    with pytest.raises(OSError):
        f.put_hashed(entries)
    f._io = real
    assert f.index_count == 2
    assert Path(f.path).read_bytes()[: INDEX_HEADER_SIZE + 64 * 4] == before
    assert f.put_hashed(entries) == 5  # and the next put goes on from the table as it was
    items = rr.read_index_items(f.path, 64)  # (keyHash, phyOffset, timeDiff, prevIndex)
    assert [(i[0], i[1], i[3]) for i in items] == [(1, 10, 0)] + [
        (k, 100 + k, 0) for k in range(5, 10)
    ]
    f.close()


def test_a_new_files_first_key_then_a_batch_chain_as_put_key_does(tmp_path):
    """A file created here whose first item came through ``put_key`` (its in-memory slot
    table not loaded yet) reads its slots for the next batched put: the batch's item for the
    same key chains to item 1, as a file written only by ``put_key``."""
    a = IndexFile(str(tmp_path / "a"), 64, 32)
    a.put_key("T#a", 10, T0)
    a.put_hashed([index_key_hash("T#a"), 20, T0 + 1000] * 5)  # a batch (more than a few)
    b = IndexFile(str(tmp_path / "b"), 64, 32)
    b.put_key("T#a", 10, T0)
    for _ in range(5):
        b.put_key("T#a", 20, T0 + 1000)
    assert rr.read_index_items(a.path, 64)[1][3] == 1  # prevIndex of the batch's first item
    assert used_bytes(a, 64) == used_bytes(b, 64)
    a.close()
    b.close()


def test_read_only_file_refuses_put(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 4, 16)
    f.put_key("T#a", 1, T0)
    f.close()
    g = IndexFile(str(tmp_path / "f"), 4, 16, read_only=True)
    with pytest.raises(ReadOnlyStoreError):
        g.put_key("T#b", 2, T0)
    assert g.select_phy_offsets("T#a", 10) == [1]
    g.close()
    with pytest.raises(FileNotFoundError):
        IndexFile(str(tmp_path / "missing"), 4, 16, read_only=True)


# -- geometry and names -------------------------------------------------------------------------


def test_geometry(tmp_path):
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert index_geometry(420_000_040) == (5_000_000, 20_000_000)
    assert index_geometry(2728) == (32, 128)  # derived: 40 + 84*32
    assert index_geometry(40 + 10 * 4 + 7 * 20, 10, 7) == (10, 7)
    with pytest.raises(CorruptRecordError):
        index_geometry(40 + 10 * 4 + 7 * 20)  # neither the default nor 4:1
    f = IndexFile(str(tmp_path / "odd"), 10, 7)
    f.put_key("T#x", 5, T0)
    f.close()
    g = IndexFile(str(tmp_path / "odd"), 10, 7)
    assert (g.hash_slot_num, g.index_num) == (10, 7) and g.select_phy_offsets("T#x", 4) == [5]
    g.close()
    with pytest.raises(CorruptRecordError):
        IndexFile(str(tmp_path / "odd"), 11, 7)
    (tmp_path / "bad").write_bytes(b"\0" * 100)
    with pytest.raises(CorruptRecordError):
        IndexFile(str(tmp_path / "bad"))


def test_file_names():
    import time

    ms = T0 + 42
    name = index_file_name(ms)
    assert len(name) == 17 and name.isdigit()
    assert name == time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + "042"
    assert name_after("20261231235959999") == "20270101000000000"
    assert name_after("20260815011551705") == "20260815011551706"


# -- IndexService -------------------------------------------------------------------------------


def build_records(n, keys_per=2, start_ts=T0, step_ts=1000, size=100):
    return [
        rec(i * size, start_ts + i * step_ts, [f"k{i}", f"g{i % 3}"][:keys_per], f"U{i}")
        for i in range(n)
    ]


def test_dispatch_keys_and_rollback(tmp_path):
    svc = IndexService(str(tmp_path / "index"), 16, 64)
    svc.dispatch(
        [
            rec(0, T0, ["a", "", "b"], "U0"),
            rec(100, T0 + 1, "a c", None),  # keys as the raw KEYS string
            rec(200, T0 + 2, ["a"], "U2", sys_flag=0xC),  # ROLLBACK: not indexed
            rec(300, T0 + 3, ["a"], "U3", sys_flag=0x4),  # PREPARED: indexed
            rec(400, T0 + 4, [], None),
        ]
    )
    assert svc.query("T", "a") == [300, 100, 0]
    assert svc.query("T", "U0") == [0]
    assert svc.query("T", "U2") == []
    assert svc.query("T", "c") == [100]
    assert svc.query("Other", "a") == []
    f = svc.files[0]
    assert f.index_count == 1 + 7  # U0 a b | a c | U3 a
    # Records before endPhyOffset are already indexed and skipped.
    svc.dispatch([rec(200, T0 + 2, ["late"], "U2b")])
    assert svc.query("T", "late") == []
    svc.close()


def test_redispatch_is_idempotent(tmp_path):
    """Dispatching the same records again (a restart) leaves the files unchanged."""
    svc = IndexService(str(tmp_path / "index"), 4, 16)
    batch = build_records(12)  # 36 keys -> 3 files of 15 items
    svc.dispatch(batch)
    svc.flush()
    before = [Path(f.path).read_bytes() for f in svc.files]
    svc.dispatch(batch)
    svc.dispatch(batch[-1:])
    assert [Path(f.path).read_bytes() for f in svc.files] == before
    svc.close()
    # A record whose keys straddle two files (15 items per file, 4 keys per record).
    svc = IndexService(str(tmp_path / "straddle"), 4, 16)
    batch = [rec(i * 100, T0 + i, [f"a{i}", f"b{i}", f"c{i}"], f"U{i}") for i in range(4)]
    svc.dispatch(batch)
    assert [f.index_count for f in svc.files] == [16, 2]
    svc.flush()
    before = [Path(f.path).read_bytes() for f in svc.files]
    svc.dispatch(batch[-1:])
    assert [Path(f.path).read_bytes() for f in svc.files] == before
    assert svc.query("T", "c3") == [300] and svc.query("T", "U3") == [300]
    svc.close()


def test_rolls_to_new_files(tmp_path):
    d = tmp_path / "index"
    svc = IndexService(str(d), 4, 16)  # 15 keys per file
    batch = build_records(20)  # 60 keys: 4 full files
    svc.dispatch(batch)
    svc.dispatch([rec(2000, T0 + 20_000, ["k20"], "U20")])
    assert len(svc.files) == 5
    names = sorted(os.listdir(d))
    assert names == [f.name for f in svc.files] and len(set(names)) == 5
    assert all(len(n) == 17 and n.isdigit() for n in names)
    for a, b in zip(svc.files, svc.files[1:]):
        assert a.is_write_full
        assert b.begin_phy_offset >= a.end_phy_offset
    second = svc.files[1]
    # File 1 ends inside record 4 (15 keys = 5 records); file 2 begins with that record.
    assert svc.files[0].end_phy_offset == 400 and second.begin_phy_offset == 500
    # The first item of a new file has its timeDiff against the previous file's end.
    items = rr.read_index_items(second.path, 4)
    assert items[0][2] == (batch[5].store_timestamp - batch[4].store_timestamp) // 1000
    # Queries walk the files newest first.
    assert svc.query("T", "g0") == [1800, 1500, 1200, 900, 600, 300, 0]
    assert svc.query("T", "g0", 3) == [1800, 1500, 1200]
    assert svc.query("T", "g0", 100) == rr.index_lookup_dir(str(d), "T#g0", 4)
    for i in range(21):
        assert svc.query("T", f"k{i}") == [i * 100]
        assert svc.query("T", f"U{i}") == [i * 100]
    # Time window: a file whose beginTimestamp < begin ends the scan.
    got = svc.query("T", "g0", 64, T0 + 6000, T0 + 15_000)
    assert got == [1500, 1200, 900, 600]
    assert svc.last_timestamp == T0 + 20_000 and svc.end_phy_offset == 2000
    svc.close()
    # Reopen: the same answers from disk.
    svc = IndexService(str(d), 4, 16)
    assert len(svc.files) == 5
    assert svc.query("T", "g0") == [1800, 1500, 1200, 900, 600, 300, 0]
    svc.close()


def test_query_caps_at_64(tmp_path):
    svc = IndexService(str(tmp_path / "index"), 64, 256)
    svc.dispatch([rec(i * 10, T0 + i, ["hot"]) for i in range(100)])
    assert len(svc.query("T", "hot", 1000)) == 64
    assert svc.query("T", "hot", 1000)[0] == 990
    assert svc.query("T", "hot", 0) == []
    svc.close()


def test_abnormal_load_destroys_newer_files(tmp_path):
    d = tmp_path / "index"
    svc = IndexService(str(d), 4, 16)
    svc.dispatch(build_records(12))  # 3 files
    ends = [f.end_timestamp for f in svc.files]
    names = [f.name for f in svc.files]
    svc.close()

    svc = IndexService(str(d), 4, 16)
    assert svc.load(True, 0) == []
    assert len(svc.files) == 3
    svc.close()

    svc = IndexService(str(d), 4, 16)
    assert svc.load(False, ends[0]) == names[1:]
    assert sorted(os.listdir(d)) == names[:1]
    assert svc.end_phy_offset == 400
    # Re-dispatching from endPhyOffset rebuilds the rest.
    svc.dispatch(build_records(12)[4:])
    for i in range(12):
        assert svc.query("T", f"k{i}") == [i * 100]
    svc.close()


def test_truncate_equals_fresh_build(tmp_path):
    """Cutting the index at a record and re-dispatching gives the bytes of a fresh build."""
    old = build_records(14)
    new = [
        rec(r.commitlog_offset, r.store_timestamp + 500, [f"n{i}"], f"V{i}")
        for i, r in enumerate(old[7:], 7)
    ]
    a = IndexService(str(tmp_path / "a"), 4, 16)
    a.dispatch(old)
    assert len(a.files) == 3
    a.truncate(700)  # file 3 (records 10..13) goes, file 2 is cut inside
    assert len(a.files) == 2
    assert a.end_phy_offset == 600
    assert a.query("T", "k7") == [] and a.query("T", "g0") == [600, 300, 0]
    assert a.query("T", "g1") == [400, 100]
    a.dispatch(new)
    b = IndexService(str(tmp_path / "b"), 4, 16)
    b.dispatch(old[:7] + new)
    assert len(a.files) == len(b.files)
    for fa, fb in zip(a.files, b.files):
        assert fa.header() == fb.header()
        assert used_bytes(fa, 4) == used_bytes(fb, 4)
    for key in ("g0", "g1", "g2", "k3", "n8", "V13", "k12"):
        assert a.query("T", key) == b.query("T", key)
        assert a.query("T", key) == rr.index_lookup_dir(a.index_dir, f"T#{key}", 4)
    a.truncate(0)
    assert a.files == [] and os.listdir(a.index_dir) == []
    a.truncate(0)
    a.dispatch(old[:2])
    assert a.query("T", "k1") == [100]
    a.close()
    b.close()


def test_truncate_time_bounds(tmp_path):
    f = IndexFile(str(tmp_path / "f"), 4, 16)
    f.put_key("T#a", 0, T0)
    f.put_key("T#b", 100, T0 + 2300)
    f.put_key("T#c", 200, T0 + 4100)
    assert f.truncate(200) == 3
    assert f.end_phy_offset == 100 and f.end_timestamp == T0 + 2999
    assert f.truncate(100) == 2
    assert f.end_timestamp == T0 and f.end_phy_offset == 0
    assert f.truncate(500) == 2  # nothing at or after 500
    assert rr.read_indexfile(f.path) == f.header()
    assert f.select_phy_offsets("T#c", 8) == [] and f.select_phy_offsets("T#a", 8) == [0]
    f.close()


def test_delete_expired(tmp_path):
    d = tmp_path / "index"
    svc = IndexService(str(d), 4, 16)
    svc.dispatch(build_records(12))  # files end at 400, 900, 1100
    assert [f.end_phy_offset for f in svc.files] == [400, 900, 1100]
    assert svc.delete_expired(400) == 0  # endPhyOffset 400 is not < 400
    assert svc.delete_expired(401) == 1  # stops at the file ending at 900
    assert [f.end_phy_offset for f in svc.files] == [900, 1100]
    assert len(os.listdir(d)) == 2
    svc.close()

    svc = IndexService(str(tmp_path / "i2"), 4, 16)
    svc.dispatch(build_records(12))
    assert svc.delete_expired(10**9) == 2  # never the newest file
    assert len(svc.files) == 1 and len(os.listdir(svc.index_dir)) == 1
    assert svc.query("T", "k11") == [1100]
    svc.close()


def test_zero_length_file_is_dropped(tmp_path):
    d = tmp_path / "index"
    d.mkdir()
    (d / "20260101000000000").write_bytes(b"")
    (d / "notes.txt").write_text("ignored")
    svc = IndexService(str(d), 4, 16)
    assert svc.files == []
    assert sorted(os.listdir(d)) == ["notes.txt"]
    svc.close()


def test_read_only_service_indexes_in_memory(tmp_path):
    d = tmp_path / "index"
    svc = IndexService(str(d), 4, 16, read_only=True)
    svc.dispatch(build_records(8))
    assert not d.exists()
    assert all(f.in_memory for f in svc.files) and len(svc.files) == 2
    assert svc.query("T", "g1") == [700, 400, 100]
    assert svc.flush() == (False, 0)  # read-only: nothing written
    svc.truncate(500)
    assert svc.query("T", "g1") == [400, 100]
    svc.close()

    # On-disk files stay untouched; newer records go to memory after them.
    w = IndexService(str(d), 4, 16)
    w.dispatch(build_records(6))
    w.close()
    before = {n: (d / n).read_bytes() for n in os.listdir(d)}
    ro = IndexService(str(d), 4, 16, read_only=True)
    assert ro.load(False, 0) == sorted(before)  # dropped, not deleted
    ro.close()
    ro = IndexService(str(d), 4, 16, read_only=True)
    ro.dispatch(build_records(10))
    assert [f.in_memory for f in ro.files] == [False, False, True]
    for i in range(10):
        assert ro.query("T", f"k{i}") == [i * 100]
    ro.truncate(200)  # on-disk entries stay (stale), memory ones go
    assert ro.query("T", "k7") == [] and ro.query("T", "k3") == [300]
    assert ro.delete_expired(10**9) == 0
    ro.close()
    assert {n: (d / n).read_bytes() for n in os.listdir(d)} == before


def test_concurrent_queries_while_dispatching(tmp_path):
    svc = IndexService(str(tmp_path / "index"), 8, 32)
    records = [rec(i * 10, T0 + i, ["hot", f"k{i}"]) for i in range(600)]
    errors, stop = [], threading.Event()

    def reader():
        try:
            while not stop.is_set():
                got = svc.query("T", "hot", 64)
                assert got == sorted(got, reverse=True)
                assert all(o % 10 == 0 and o < 6000 for o in got)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(0, 600, 7):
        svc.dispatch(records[i : i + 7])
        if i % 140 == 0:
            svc.delete_expired(i * 10 // 2)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert svc.query("T", "k599") == [5990]
    svc.close()


# -- agreement with the independent reader ------------------------------------------------------


def test_written_files_match_reference_reader(tmp_path):
    rnd = random.Random(7)
    f = IndexFile(str(tmp_path / "f"), 16, 64)
    keys = [f"T#key-{i}" for i in range(20)] + ["T#ключ", "T#消息", "T#\U0001f600"]
    ts = T0
    expected: dict[str, list[int]] = {}
    for off in range(0, 63 * 50, 50):
        k = rnd.choice(keys)
        ts += rnd.randrange(0, 3000)
        assert f.put_key(k, off, ts)
        expected.setdefault(k, []).insert(0, off)
    assert f.is_write_full
    assert rr.index_geometry(f.path) == (16, 64)
    assert rr.read_indexfile(f.path) == f.header()
    for k in keys:
        mine = f.select_phy_offsets(k, 1000)
        assert mine == rr.index_lookup(f.path, k, 16)
        assert set(expected.get(k, [])) <= set(mine)
        for begin, end in ((T0 + 20_000, T0 + 60_000), (ts - 5000, LONG_MAX), (0, T0 + 1)):
            assert f.select_phy_offsets(k, 1000, begin, end) == rr.index_lookup(
                f.path, k, 16, begin, end
            )
    f.close()


# -- real fixtures ------------------------------------------------------------------------------


def expected_498():
    rows = [json.loads(line) for line in (RMQ498 / "expected.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: r["commitLogOffset"])


def records_498():
    return [
        rec(
            r["commitLogOffset"],
            r["storeTimestamp"],
            (r.get("keys") or "").split(" "),
            r.get("uniqKey"),
            r["topic"],
            r["sysFlag"],
        )
        for r in expected_498()
    ]


@pytest.mark.skipif(not RMQ498.is_dir(), reason="shared fixtures not present")
def test_fixture_498_queries():
    svc = IndexService(str(RMQ498 / "store" / "index"), 32, 128, read_only=True)
    assert len(svc.files) == 5
    assert all((f.hash_slot_num, f.index_num) == (32, 128) for f in svc.files)
    want: dict[tuple[str, str], set[int]] = {}
    for r in expected_498():
        for k in [r["uniqKey"]] + [k for k in r["keys"].split(" ") if k]:
            want.setdefault((r["topic"], k), set()).add(r["commitLogOffset"])
    for (topic, key), offsets in want.items():
        got = svc.query(topic, key)
        assert offsets <= set(got), (topic, key)
        assert got == sorted(got, reverse=True)
        assert got == rr.index_lookup_dir(str(RMQ498 / "store" / "index"), f"{topic}#{key}", 32)
    svc.close()


@pytest.mark.skipif(not RMQ498.is_dir(), reason="shared fixtures not present")
def test_fixture_498_rebuilt_byte_for_byte(tmp_path):
    """Dispatching the 240 messages as RocketMQ 4.9.8 did reproduces its five index files."""
    svc = IndexService(str(tmp_path / "index"), 32, 128)
    for r in records_498():
        svc.dispatch([r])
    svc.flush()
    src = sorted((RMQ498 / "store" / "index").iterdir())
    assert len(svc.files) == len(src)
    for mine, theirs in zip(svc.files, src):
        assert Path(mine.path).read_bytes() == theirs.read_bytes(), theirs.name
    svc.close()


@pytest.mark.skipif(not RUST_INDEX.is_dir(), reason="shared fixtures not present")
def test_fixture_rocketmq_rust_index(tmp_path):
    path = RUST_INDEX / "20260815011551705"
    f = IndexFile(str(path), read_only=True)  # default config: geometry derived (32/128)
    assert (f.hash_slot_num, f.index_num) == (32, 128)
    assert f.header()["indexCount"] == 3
    assert f.select_phy_offsets("V1UpgradeTopic#v1-upgrade-key", 64) == [141, 0]
    f.close()
    svc = IndexService(str(RUST_INDEX), read_only=True)
    assert svc.query("V1UpgradeTopic", "v1-upgrade-key") == [141, 0]
    assert svc.query("V1UpgradeTopic", "v1-upgrade-key", 1) == [141]
    assert svc.query("V1UpgradeTopic", "other") == []
    svc.close()
    # Writable copy: further keys continue the chain as RocketMQ would.
    d = tmp_path / "index"
    d.mkdir()
    shutil.copy(path, d / path.name)
    os.chmod(d / path.name, 0o644)
    svc = IndexService(str(d), 32, 128)
    svc.dispatch([rec(282, svc.last_timestamp + 10, ["v1-upgrade-key"], None, "V1UpgradeTopic")])
    assert svc.query("V1UpgradeTopic", "v1-upgrade-key") == [282, 141, 0]
    svc.close()
    assert rr.index_lookup(str(d / path.name), "V1UpgradeTopic#v1-upgrade-key") == [282, 141, 0]


# -- hostile index files (issue 26 item 2) -----------------------------------------------------


def _looping_index(root) -> str:
    """A store whose index file's chain for ``T#NOPE`` loops 5 -> 6 -> 5 and whose header
    claims 2^31-1 items. Returns the file's path."""
    from rmqfs.engine.format.indexfile import ITEM, SLOT
    from stores import produce, small

    produce(root, 20, queue_id=0)
    (path,) = sorted((root / "index").iterdir())
    slots = small().max_hash_slot_num
    h = index_key_hash("T#NOPE")
    items = INDEX_HEADER_SIZE + slots * 4
    with open(path, "r+b") as f:
        head = bytearray(f.read(INDEX_HEADER_SIZE))
        fields = list(HEADER.unpack(head))
        fields[5] = INT_MAX
        f.seek(0)
        f.write(HEADER.pack(*fields))
        f.seek(INDEX_HEADER_SIZE + (h % slots) * 4)
        f.write(SLOT.pack(5))
        for n, prev in ((5, 6), (6, 5)):
            f.seek(items + n * 20)
            _h, phy, td, _prev = ITEM.unpack(f.read(20))
            f.seek(items + n * 20)
            f.write(ITEM.pack(h ^ 1, phy, td, prev))
    return str(path)


class _CountingReader:
    def __init__(self, io):
        self.io, self.reads = io, 0

    def read(self, offset, length):
        self.reads += 1
        return self.io.read(offset, length)

    def close(self):
        self.io.close()


def test_a_looping_chain_with_a_lying_count_ends(tmp_path):
    from stores import small

    path = _looping_index(tmp_path / "store")
    # the CLI (read-only, so the file is not rebuilt): no message, no spin (main: 2^31 steps)
    r = rr_run("query-msg", "-k", "NOPE", "-t", "T", str(tmp_path / "store"))
    assert r.returncode == 1 and "no message of T with key NOPE" in r.stderr, r.stderr
    cfg = small()
    f = IndexFile(path, cfg.max_hash_slot_num, cfg.max_index_num, read_only=True)
    assert f.walk_bound == cfg.max_index_num  # the header's 2^31-1 clamped to the file
    io = _CountingReader(f.reader())
    assert f.select_phy_offsets("T#NOPE", 64, 0, LONG_MAX, io) == []
    assert io.reads <= 3  # the slot and one block: the walk stops at 6 -> 5 (not older)
    assert f.header_problem() and "indexCount" in f.header_problem()
    assert "indexCount" in f.structure_problem()  # checked before reading 2^31 items
    io.close()
    f.close()


def rr_run(*args):
    from conftest import run_rmqfs

    return run_rmqfs(*args, check=False, timeout=120)  # a spin ends as a failure, not a hang


def test_a_writable_open_rebuilds_an_index_file_whose_header_lies(tmp_path):
    from rmqfs.engine.store import MessageStore
    from stores import small

    root = tmp_path / "store"
    path = _looping_index(root)
    with MessageStore(str(root), small()) as s:
        assert any(r.startswith(f"index/{os.path.basename(path)}: indexCount") for r in s.repairs)
        assert [r.body for r in s.query_by_key("T", "km7")] == [b"m7"]
        assert s.query_by_key("T", "NOPE") == []
    for name in os.listdir(root / "index"):
        f = IndexFile(str(root / "index" / name), 16, 64, read_only=True)
        assert f.structure_problem() is None
        f.close()


def test_a_query_walks_without_holding_the_lock_a_writer_needs(tmp_path, monkeypatch):
    """A reader blocked in the middle of its walk (its reads wait on an event) does not
    block a writer that needs the service's lock (truncate, a roll to a new file)."""
    svc = IndexService(str(tmp_path / "index"), 16, 64)
    svc.dispatch([rec(i * 100, T0 + i, [f"k{i}"]) for i in range(20)])
    walking, release = threading.Event(), threading.Event()

    class Blocking:
        def __init__(self, io):
            self.io = io

        def read(self, offset, length):
            walking.set()
            release.wait()
            return self.io.read(offset, length)

        def close(self):
            self.io.close()

    original = IndexFile.reader
    monkeypatch.setattr(IndexFile, "reader", lambda self: Blocking(original(self)))
    got = []
    reader = threading.Thread(target=lambda: got.append(svc.query("T", "k3")))
    reader.start()
    try:
        assert walking.wait(60)
        writer = threading.Thread(
            target=lambda: (
                svc.truncate(15 * 100),
                svc.dispatch([rec(i * 100, T0 + i, [f"k{i}"]) for i in range(15, 90)]),
            )
        )
        writer.start()
        writer.join(60)  # a deadlock detector, not a timing: the writer needs no reader
        assert not writer.is_alive()
        assert len(svc.files) == 2  # rolled to a new file meanwhile
    finally:
        release.set()
        reader.join(60)
    assert got == [[300]]
    svc.close()


def test_one_cut_for_recovery_and_snapshots(tmp_path):
    """The snapshot's cut (a file read through pread, the file untouched) and the recovery's
    (IndexFile.truncate, written in place) are the one ``cut_index``: the same header and slots,
    and with the record's store time at hand the same exact endTimestamp."""
    import numpy as np

    f = IndexFile(str(tmp_path / "f"), 4, 16)
    stamps = {}
    for i in range(10):
        stamps[i * 100] = T0 + i * 1700 + 3
        f.put_key(f"T#k{i % 3}", i * 100, stamps[i * 100])
    slots = np.frombuffer(Path(f.path).read_bytes()[40 : 40 + 16], ">i4")
    fd = os.open(f.path, os.O_RDONLY)
    try:
        head = tuple(f.header().values())
        cut = cut_index(head, slots, lambda p, n: os.pread(fd, n, p), 40 + 16, 650, stamps.get)
        assert cut_index(head, slots, lambda p, n: os.pread(fd, n, p), 40 + 16, 5000) is None
    finally:
        os.close(fd)
    assert cut.header == (T0 + 3, stamps[600], 0, 600, 3, 8)
    assert f.truncate(650, stamps.get) == 8
    assert tuple(f.header().values()) == cut.header
    assert rr.read_indexfile(f.path) == f.header()
    on_disk = np.frombuffer(Path(f.path).read_bytes()[40 : 40 + 16], ">i4")
    assert on_disk.tolist() == cut.slots.tolist() == [7, 5, 6, 0]
    assert f.select_phy_offsets("T#k0", 8) == [600, 300, 0]
    f.close()


def test_structure_problem_finds_every_slot_that_is_not_its_buckets_newest(tmp_path):
    """``IndexFile.structure_problem`` (its linear check that each slot names the newest item
    of its bucket) finds a slot naming an older item of its bucket, an item of another bucket,
    an item past indexCount, an item in an empty bucket, and a used bucket's slot zeroed;
    a good file has no problem."""
    import struct

    path = str(tmp_path / "i")
    f = IndexFile(path, 16, 64)
    t = 1_700_000_000_000
    for i, h in enumerate((3, 19, 35, 4, 20, 7)):  # buckets 3, 3, 3, 4, 4, 7
        assert f.put_hashed([h, 100 * (i + 1), t]) == 1
    f.close()
    good = Path(path).read_bytes()
    assert IndexFile(path, 16, 64, read_only=True).structure_problem() is None

    def slot_at(data: bytes, slot: int, value: int) -> bytes:
        at = INDEX_HEADER_SIZE + 4 * slot
        return data[:at] + struct.pack(">i", value) + data[at + 4 :]

    for slot, value in ((3, 2), (3, 4), (3, 9), (5, 1), (4, 0), (7, 0)):
        Path(path).write_bytes(slot_at(good, slot, value))
        g = IndexFile(path, 16, 64, read_only=True)
        problem = g.structure_problem()
        g.close()
        assert problem is not None and f"hash slot {slot} " in problem, (slot, value, problem)
