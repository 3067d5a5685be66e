"""The lenient readers of the format modules (issue 33 item 2: verify through the engine):
``engine.format.consumequeue.UnitFile`` / ``read_unit_file`` and
``engine.format.indexfile.scan_index_file`` / ``read_index_header`` / ``nonzero_slots`` read
the files ``rmqfs verify`` checks with the format's own layouts and rules, and report damage
where the store's (strict) readers raise or silently repair. On a good file they agree with
the strict readers (``ConsumeQueue``, ``IndexFile``); on a damaged one they name the damage
and never raise. Also the file-queue steps ``rmqfs recover`` repairs through
(``extend_with_zeros``, ``FileQueue.sync_file``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmqfs.engine.errors import CorruptRecordError
from rmqfs.engine.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    ConsumeQueue,
    UnitFile,
    pack_units,
    read_unit_file,
)
from rmqfs.engine.format.indexfile import (
    HEADER,
    SLOT,
    IndexFile,
    index_file_size,
    nonzero_slots,
    read_index_header,
    scan_index_file,
)
from rmqfs.engine.format.mappedfile import FileQueue, extend_with_zeros, fsync_file
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.storeconfig import StoreConfig

SLOTS, ITEMS = 64, 256


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A closed store with one queue of several ConsumeQueue files and one IndexFile."""
    root = tmp_path_factory.mktemp("lenient") / "store"
    cfg = StoreConfig(
        mapped_file_size_consume_queue=8 * CQ_STORE_UNIT_SIZE,
        max_hash_slot_num=SLOTS,
        max_index_num=ITEMS,
    )
    with MessageStore(str(root), cfg) as s:
        s.create_topic("T", 1)
        s.put_messages(
            [Message("T", b"m%d" % i, tags="ab"[i % 2], keys=[f"k{i}"]) for i in range(20)]
        )
    return root


def _cq_files(store: Path) -> list[Path]:
    return sorted((store / "consumequeue" / "T" / "0").iterdir())


def test_a_good_queue_reads_as_the_strict_reader_reads_it(store):
    files = _cq_files(store)
    assert len(files) == 3  # 8 + 8 + 4 units
    lenient = []
    for f in files:
        units = read_unit_file(str(f), f.stat().st_size)
        assert units.problems() == []
        lenient += list(units.units())
    assert units.ended and units.valid == 4 and not units.holds_data(4 * CQ_STORE_UNIT_SIZE)
    cq = ConsumeQueue(str(files[0].parent), "T", 0, read_only=True)
    try:
        cq.recover()
        strict = [(off, size, tc) for _, off, size, tc in cq.iter_units(cq.min_offset)]
    finally:
        cq.close()
    assert lenient == strict and len(strict) == 20


def _units(*units: tuple[int, int, int]) -> bytes:
    return pack_units([v for u in units for v in u])


@pytest.mark.parametrize(
    "tail, valid, problems",
    [
        (_units((0, 0, 0), (0, 0, 0)), 2, []),  # zeros end the queue: no damage
        (
            _units((-1, 5, 7), (0, 0, 0)),
            2,
            [(2, "invalid unit (-1, 5, 7) followed by more data")],
        ),
        (
            _units((0, 0, 0), (300, 10, 1)),
            2,
            [(2, "invalid unit (0, 0, 0) followed by more data")],
        ),
        (_units((400, 0, 0)), 2, [(2, "invalid unit (400, 0, 0) followed by more data")]),
    ],
)
def test_a_damaged_queue_file_is_reported_not_raised(tmp_path, tail, valid, problems):
    """What ends the units is the strict reader's rule (``ConsumeQueue.recover`` stops at the
    same unit); what follows that end is named, not raised."""
    data = _units((0, 100, 1), (100, 100, 2)) + tail
    units = UnitFile(data)
    assert units.ended and units.valid == valid
    assert list(units.units()) == [(0, 100, 1), (100, 100, 2)]
    assert units.problems() == problems
    qdir = tmp_path / "q"
    qdir.mkdir()
    (qdir / ("0" * 20)).write_bytes(data)
    cq = ConsumeQueue(str(qdir), "T", 0, len(data), read_only=True)
    try:
        cq.recover()
        assert cq.max_offset == valid
    finally:
        cq.close()


def test_a_full_file_and_a_partial_unit():
    units = UnitFile(_units((0, 100, 1), (100, 100, 2)) + b"\1\2\3")
    assert (units.count, units.valid, units.ended) == (2, 2, False)
    assert units.problems() == [] and units.holds_data()
    assert not UnitFile(bytes(40)).holds_data() and UnitFile(bytes(40)).valid == 0


def _index_path(store: Path) -> Path:
    (path,) = (store / "index").iterdir()
    return path


def test_a_good_index_file_reads_as_the_strict_reader_reads_it(store):
    path = _index_path(store)
    scan = scan_index_file(str(path), SLOTS, ITEMS)
    assert scan.problem is None
    f = IndexFile(str(path), SLOTS, ITEMS, read_only=True)
    try:
        assert scan.header == f.header_fields()
        assert (scan.hash_slot_num, scan.index_num) == (f.hash_slot_num, f.index_num)
        assert scan.items == [f.item(n) for n in range(1, f.index_count)]
        assert f.structure_problem() is None
    finally:
        f.close()
    assert len(scan.items) >= 20  # UNIQ_KEY and KEYS of each record
    assert len(scan.slots) == scan.header[4]  # hashSlotCount
    for slot, item in scan.slots:
        assert scan.items[item - 1][0] % SLOTS == slot  # the newest item of its bucket
    assert read_index_header(str(path)) == tuple(HEADER.unpack(path.read_bytes()[:40]))


def test_a_damaged_index_file_is_reported_not_raised(store, tmp_path):
    good = _index_path(store).read_bytes()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert scan_index_file(str(empty), SLOTS, ITEMS).problem == (
        "empty",
        "empty file (deleted on load)",
    )
    odd = tmp_path / "odd"
    odd.write_bytes(good[:-7])
    what, text = scan_index_file(str(odd), SLOTS, ITEMS, label="index/odd").problem or ("", "")
    assert what == "geometry" and text.startswith("index/odd: size ")
    with pytest.raises(CorruptRecordError):
        IndexFile(str(odd), SLOTS, ITEMS, read_only=True)
    # indexCount past what the file holds
    head = list(HEADER.unpack(good[:40]))
    head[5] = ITEMS + 1
    over = tmp_path / "over"
    over.write_bytes(HEADER.pack(*head) + good[40:])
    scan = scan_index_file(str(over), SLOTS, ITEMS)
    assert scan.problem == ("header", f"indexCount {ITEMS + 1} > indexNum {ITEMS}")
    assert scan.items == [] and scan.slots == []
    # a hash slot pointing past indexCount: the parts come back for the caller to judge
    bad_slot = tmp_path / "slot"
    count = head[5] = HEADER.unpack(good[:40])[5]
    at = 40 + 3 * SLOT.size
    bad_slot.write_bytes(good[:at] + SLOT.pack(count + 5) + good[at + SLOT.size :])
    scan = scan_index_file(str(bad_slot), SLOTS, ITEMS)
    assert scan.problem is None and (3, count + 5) in scan.slots
    f = IndexFile(str(bad_slot), SLOTS, ITEMS, read_only=True)
    try:
        assert "hash slot 3" in (f.header_problem() or "")
    finally:
        f.close()


def test_an_index_count_of_zero_reads_as_one(tmp_path):
    """``IndexHeader.load``: indexCount <= 0 is 1 (no items), as the strict reader takes it."""
    path = tmp_path / "zero"
    path.write_bytes(bytes(index_file_size(SLOTS, ITEMS)))
    scan = scan_index_file(str(path), SLOTS, ITEMS)
    assert scan.problem is None and scan.header[5] == 1 and scan.items == []
    short = tmp_path / "short"
    short.write_bytes(bytes(10))
    assert read_index_header(str(short)) is None


def test_nonzero_slots():
    table = bytearray(SLOT.size * 3000)
    for slot, item in ((0, 1), (1500, 7), (2999, 3)):
        table[slot * 4 : slot * 4 + 4] = SLOT.pack(item)
    assert nonzero_slots(bytes(table)) == [(0, 1), (1500, 7), (2999, 3)]
    assert nonzero_slots(bytes(table), chunk=8) == [(0, 1), (1500, 7), (2999, 3)]


def test_extend_with_zeros(tmp_path):
    path = tmp_path / "00000000000000000000"
    path.write_bytes(b"abc")
    extend_with_zeros(str(path), 64)
    assert path.read_bytes() == b"abc" + bytes(61)
    with pytest.raises(ValueError):
        extend_with_zeros(str(path), 10)
    link = tmp_path / "00000000000000000064"
    link.symlink_to(path)
    with pytest.raises(OSError):
        extend_with_zeros(str(link), 128)
    assert path.stat().st_size == 64


def test_truncate_dirty_then_sync_file(tmp_path):
    """recover's CommitLog cut: the files after the one holding the cut go, that one reads
    as zeros from it, and it is synced."""
    d = tmp_path / "cl"
    fq = FileQueue(str(d), 64)
    try:
        for start in (0, 64, 128):
            fq.write(start, b"x" * 64)
        fq.truncate_dirty(70)
        fq.sync_file(70)
        fq.sync_file(1000)  # no file holds it: nothing to do
        assert [s.start for s in fq.segments] == [0, 64]
    finally:
        fq.close()
    assert sorted(os.listdir(d)) == ["0" * 20, "0" * 18 + "64"]
    assert (d / ("0" * 18 + "64")).read_bytes() == b"x" * 6 + bytes(58)
    fsync_file(str(d / ("0" * 20)))
    with pytest.raises(FileNotFoundError):
        fsync_file(str(d / ("0" * 17 + "128")))


def test_pread_file_reads_files_the_listing_cannot_address(tmp_path):
    """verify reads a mis-sized or misnamed CommitLog file by range through the reader's
    ``pread_file``, by its name whatever its size or alignment (never through a link)."""
    from rmqfs.engine.format.mappedfile import MappedFiles

    d = tmp_path / "cl"
    d.mkdir()
    (d / ("0" * 20)).write_bytes(b"a" * 64)
    (d / ("0" * 18 + "70")).write_bytes(b"0123456789")  # misnamed and short
    (d / ("0" * 17 + "200")).symlink_to(d / ("0" * 20))
    files = MappedFiles(str(d))
    try:
        assert files.pread_file(70, 4, 3) == b"3456"
        assert files.pread_file(70, 100, 8) == b"89"  # fewer at its end
        with pytest.raises(OSError):
            files.pread_file(200, 4, 0)
    finally:
        files.close()
