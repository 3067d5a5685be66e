"""engine/format/consumequeue.py: ConsumeQueue units (commitLogOffset, size, tagsCode) written as a
broker does, truncation after a torn tail, the min offset after expiry, and the two small rules
that live only here (which directory names are queues; a delayed record's tagsCode)."""

import pytest

import refreader
from rmqfs.engine.format.consumequeue import (
    CQ_STORE_UNIT_SIZE,
    ConsumeQueue,
    deliver_tags_code,
    pack_units,
    queue_dir_id,
)
from rmqfs.engine.format.javahash import tags_code


def _queue(tmp_path, units=10, file_units=4):
    cq = ConsumeQueue(
        str(tmp_path / "consumequeue" / "T" / "0"), "T", 0, file_units * CQ_STORE_UNIT_SIZE
    )
    cq.put_units(
        0,
        pack_units([v for i in range(units) for v in (i * 100, 100, tags_code("Tag%d" % (i % 3)))]),
    )
    return cq


def test_units_are_what_a_broker_writes(tmp_path):
    cq = _queue(tmp_path)
    try:
        assert (cq.min_offset, cq.max_offset) == (0, 10)
        assert cq.unit(7) == (700, 100, tags_code("Tag1"))
        cq.flush() if hasattr(cq, "flush") else None
    finally:
        cq.close()
    assert refreader.read_consumequeue(tmp_path, "T", 0) == [
        (i * 100, 100, refreader.tags_code("Tag%d" % (i % 3))) for i in range(10)
    ]
    names = sorted(p.name for p in (tmp_path / "consumequeue" / "T" / "0").iterdir())
    assert names == ["%020d" % (i * 4 * 20) for i in range(3)]  # 4 units per file


def test_truncate_to_cuts_units_and_deletes_files_past_them(tmp_path):
    cq = _queue(tmp_path)
    try:
        cq.truncate_to(5)
        assert cq.max_offset == 5
        assert [u[0] for u in cq.iter_units(0)] == [0, 1, 2, 3, 4]
        cq.truncate_to(4)  # exactly at a file start: that file goes
        assert cq.max_offset == 4
    finally:
        cq.close()
    assert len(refreader.read_consumequeue(tmp_path, "T", 0)) == 4
    assert sorted(p.name for p in (tmp_path / "consumequeue" / "T" / "0").iterdir()) == [
        "%020d" % 0
    ]


def test_truncate_dirty_drops_units_past_the_commitlog_end(tmp_path):
    cq = _queue(tmp_path)
    try:
        cq.truncate_dirty(650)  # records at 700.. are gone from the CommitLog
        assert cq.max_offset == 7 and cq.last_commitlog_offset == 600
    finally:
        cq.close()


def test_correct_min_offset_after_expiry(tmp_path):
    cq = _queue(tmp_path)
    try:
        cq.correct_min_offset(450)  # CommitLog files below 450 were deleted
        assert cq.min_offset == 5
        assert cq.max_offset == 10
    finally:
        cq.close()


@pytest.mark.parametrize(
    "name, qid",
    [
        ("0", 0),
        ("7", 7),
        ("123456789", 123456789),
        ("007", None),
        ("+1", None),
        ("\u00b2", None),
        ("1\n", None),
        ("1234567890", None),
        ("", None),
    ],
)
def test_queue_directory_names(name, qid):
    assert queue_dir_id(name) == qid


def test_deliver_tags_code_of_a_delayed_record():
    levels = {1: 1000, 2: 5000, 3: 10000}
    assert deliver_tags_code("2", 1_000_000, levels) == 1_005_000
    assert deliver_tags_code("9", 1_000_000, levels) == 1_010_000  # capped at the top level
    for no in (None, "", "0", "x"):
        assert deliver_tags_code(no, 1_000_000, levels) is None  # keeps the tag hash


@pytest.mark.parametrize("blanks", [0, 1, 2, 7, 300_000])
@pytest.mark.parametrize("reals", [0, 1, 5, 1000])
def test_search_by_time_steps_over_the_filler_in_log_time(blanks, reals):
    """``search_by_time`` over a queue whose first file begins with ``fillPreBlank`` filler
    gives what a walk of every unit gives (the first real unit stored at or after the time,
    else the end), reading a number of units that grows with the log of the filler (it
    stepped over it one unit at a time: 300,000 reads a by-time lookup)."""
    from rmqfs.engine.format.consumequeue import BLANK_UNIT_SIZE, search_by_time

    reads = []

    def unit_at(i: int):
        reads.append(i)
        return (0, BLANK_UNIT_SIZE, 0) if i < blanks else ((i - blanks) * 100 + 5, 100, 0)

    def ts_at(off: int, size: int) -> int:
        return 1000 + 10 * ((off - 5) // 100)

    for ts in (0, 1000, 1005, 1010, 1000 + 10 * (reals - 1), 10**12):
        want = next(
            (i for i in range(blanks, blanks + reals) if ts_at(*unit_at(i)[:2]) >= ts),
            blanks + reals,
        )
        reads.clear()
        assert search_by_time(unit_at, ts, ts_at, 0, blanks + reals) == want
        assert len(reads) <= 4 * ((blanks + reals).bit_length() + 2)


@pytest.mark.parametrize("units", [0, 9, 3276, 3277, 10_000, 29_999, 30_000])
def test_recovery_reads_a_file_only_as_far_as_its_units_go(tmp_path, monkeypatch, units):
    """``recover`` read each of the last three files whole (6 MB each by default): opening a
    store of 8,000 queues of ten messages read 48 GB of zeros (a review). It reads in growing
    chunks and stops where the units end; the units it finds are the same, whatever chunk
    they end in, and a torn unit inside a later chunk still ends the queue there."""
    from rmqfs.engine.format import consumequeue as C
    from rmqfs.engine.format.mappedfile import FileQueue

    file_units = 30_000  # 600,000-byte files: chunks of 65,520, 131,040, 262,080... bytes
    d = tmp_path / "consumequeue" / "T" / "0"
    cq = ConsumeQueue(str(d), "T", 0, file_units * CQ_STORE_UNIT_SIZE)
    if units:
        cq.put_units(0, pack_units([v for i in range(units) for v in (i * 100, 100, 7)]))
    cq.close()
    read = []
    real = FileQueue.pread_segment

    def counted(self, seg, length, pos):
        data = real(self, seg, length, pos)
        read.append(len(data))
        return data

    monkeypatch.setattr(FileQueue, "pread_segment", counted)
    cq = ConsumeQueue(str(d), "T", 0, file_units * CQ_STORE_UNIT_SIZE)
    cq.recover()
    try:
        assert (cq.min_offset, cq.max_offset) == (0, units)
        if units:
            assert cq.unit(units - 1) == ((units - 1) * 100, 100, 7)
        # the units and at most a chunk as large again past them (a few units more: the
        # last one read again); a small queue one chunk, not its file
        assert sum(read) <= 3 * units * CQ_STORE_UNIT_SIZE + C.RECOVER_CHUNK + 100
        if units < C.RECOVER_CHUNK // CQ_STORE_UNIT_SIZE:
            assert sum(read) <= C.RECOVER_CHUNK + 100
    finally:
        cq.close()
    if 3 <= units < file_units:  # a torn unit (size 0) three units before the end
        with open(d / "00000000000000000000", "r+b") as f:
            f.seek((units - 3) * CQ_STORE_UNIT_SIZE + 8)
            f.write(b"\0\0\0\0")
        cq = ConsumeQueue(str(d), "T", 0, file_units * CQ_STORE_UNIT_SIZE)
        cq.recover()
        try:
            assert cq.max_offset == units - 3
        finally:
            cq.close()
