"""Recovery's batched walk of a DLedger CommitLog (issue 34 item 3: ``recoverruns.entry_runs``
over the compiled entry step ``rmq_walk_entries``) against ``CommitLog.scan_raw`` alone.

On RocketMQ 4.9.8's DLedger store (8 data files, fillers at their ends, 300 entries), as it is
and damaged at random places (an entry header field, a record inside an entry, zeros to the
end of the data, a filler, a data file cut short, committedIndex moved; seeded:
``RMQFS_DAMAGE_SEED``), opened after a clean shutdown or a crash: both walks end the CommitLog
at the same offset for the same reason and leave the same queues. The compiled step itself is
judged against ``entry_step`` and ``record_step`` (the rules ``scan_raw`` applies) on the
fixture's data files with bytes overwritten at random (also under ``make sanitize``).
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import copy_fixture
from recoverwith import recover_with, report_fields
from rmqfs.engine.format.commitlog import entry_step, record_step
from rmqfs.engine.format.dledger import ENTRY_HEADER, ENTRY_POSITIONS, HEADER_SIZE, open_dledger
from rmqfs.engine.read import kernel
from rmqfs.engine.store import MessageStore

pytestmark = pytest.mark.skipif(kernel.load() is None, reason="no compiled kernel")

SEED = int(os.environ.get("RMQFS_DAMAGE_SEED", "20261129"))
FIXTURE = "rocketmq-4.9.8-dledger/store"
DATA_FILE = 262144  # the fixture's mappedFileSizeCommitLog
ENTRIES = 300


def _data(root: Path, pos: int) -> Path:
    return root / "dledger-n0" / "data" / f"{pos - pos % DATA_FILE:020d}"


def _patch(root: Path, pos: int, data: bytes) -> None:
    with open(_data(root, pos), "r+b") as f:
        f.seek(pos % DATA_FILE)
        f.write(data)


def _entry(root: Path, number: int) -> tuple[int, int]:
    """``(pos, size)`` of entry ``number`` (from the DLedger index)."""
    unit = open_dledger(str(root)).index_unit(number)
    assert unit is not None
    return unit[1], unit[2]


def damage(root: Path, kind: str, rng: random.Random) -> None:
    """Damage the DLedger CommitLog at ``root`` (``kind``, where ``rng`` picks)."""
    pos, size = _entry(root, rng.randrange(ENTRIES))
    if kind == "header":
        field = rng.choice(["magic", "size", "index", "term", "pos", "bodyLen"])
        at = ENTRY_POSITIONS[field]
        width = 8 if field in ("index", "term", "pos") else 4
        value = rng.choice([0, 1, -1, 7, 1 << 20, size])
        _patch(root, pos + at, value.to_bytes(width, "big", signed=True))
    elif kind == "record":  # a byte of the record inside the entry: header, body or tail
        at = rng.choice([rng.randrange(8), rng.randrange(8, size - HEADER_SIZE)])
        with open(_data(root, pos), "r+b") as f:
            f.seek(pos % DATA_FILE + HEADER_SIZE + at)
            b = f.read(1)[0]
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b ^ rng.randrange(1, 256)]))
    elif kind == "zeros":  # zeros from inside the entry to the end of the data
        cut = pos + rng.randrange(size)
        for p in sorted((root / "dledger-n0" / "data").iterdir()):
            start = int(p.name)
            if start + DATA_FILE > cut:
                keep = max(0, cut - start)
                data = bytearray(p.read_bytes())
                data[keep:] = bytes(len(data) - keep)
                p.write_bytes(bytes(data))
    elif kind == "filler":  # the filler that ends a data file: its size or its magic
        files = sorted((root / "dledger-n0" / "data").iterdir())[:-1]
        p = rng.choice(files)
        data = bytearray(p.read_bytes())
        end = _data_end(data)
        field = rng.choice([(0, -5), (4, 3), (4, DATA_FILE)])
        struct.pack_into(">i", data, end + field[0], field[1])
        p.write_bytes(bytes(data))
    elif kind == "cut":  # the last data file cut short (a torn file: the others stay whole)
        p = sorted((root / "dledger-n0" / "data").iterdir())[-1]
        os.truncate(p, rng.randrange(1, _data_end(bytearray(p.read_bytes())) + 8))
    elif kind == "tiny":  # a 50-byte entry 52 bytes before the end of the last file's bytes
        p = sorted((root / "dledger-n0" / "data").iterdir())[-1]
        data = bytearray(p.read_bytes())
        end = _data_end(data)
        last = open_dledger(str(root)).committed_index
        header = ENTRY_HEADER.pack(1, 50, last + 1, 0, int(p.name) + end, 0, 0, 0, 2)
        p.write_bytes(bytes(data[:end]) + header + bytes(4))
    elif kind == "committed":
        (root / "dledger-n0" / "checkpoint").write_text(
            f"committedIndex={rng.randrange(ENTRIES)}\nendIndex={ENTRIES - 1}\n"
        )
    else:
        raise AssertionError(kind)


def _data_end(data: bytearray) -> int:
    """Where a data file's entries end (its filler, or the file's end)."""
    at = 0
    while at + 8 <= len(data) and struct.unpack_from(">i", data, at)[0] == 1:
        at += max(8, struct.unpack_from(">i", data, at + 4)[0])
    return at


def recover(root: Path, batched: bool, monkeypatch, abnormal: bool, budget: int = 0) -> tuple:
    """Open the DLedger store at ``root`` (read-only: rmqfs never writes one) with the batched
    walk (after ``scan_raw`` over the first ``budget`` bytes) or ``scan_raw`` alone: ``(report
    fields, CommitLog end, every queue's units, records the batches gave, their calls)``."""
    given, calls = recover_with(monkeypatch, batched, budget)
    if abnormal:
        (root / "abort").write_text("1")
    with MessageStore(str(root), read_only=True) as s:
        seen = report_fields(s.recovery_report)
        end = s.commitlog.max_offset
        queues = {
            key: cq.read_units(cq.min_offset, cq.max_offset - cq.min_offset)
            for key, cq in sorted(s.consume_queues.items())
        }
    if abnormal:
        (root / "abort").unlink()
    monkeypatch.undo()
    return seen, end, queues, sum(given), calls


def _cases() -> list[tuple]:
    rng = random.Random(SEED)
    kinds = ("header", "record", "zeros", "filler", "cut", "tiny", "committed")
    cases = [("none", False, 0, 0), ("none", True, 0, 0), ("none", True, 0, MIDDLE)]
    cases += [("tiny", False, 0, 0), ("tiny", True, 0, MIDDLE)]
    cases += [
        (rng.choice(kinds), rng.random() < 0.5, i + 1, rng.choice((0, MIDDLE))) for i in range(20)
    ]
    return cases


#: a budget of bytes ``scan_raw`` walks before the batches: they go on from the middle
MIDDLE = 700_000


@pytest.mark.parametrize("kind, abnormal, seed, budget", _cases())
def test_batched_dledger_recovery_ends_and_dispatches_as_scan_raw(
    tmp_path, monkeypatch, kind, abnormal, seed, budget
):
    root = copy_fixture(FIXTURE, tmp_path / "s")
    if kind != "none":
        damage(root, kind, random.Random(SEED * 1000 + seed))
    got = recover(root, True, monkeypatch, abnormal, budget)
    want = recover(root, False, monkeypatch, abnormal)
    assert got[:3] == want[:3]
    assert want[3] == 0
    if kind == "none" and not budget:  # the batches took every record
        assert got[0][2] is None and got[3] == got[0][3] > 0
    if kind == "none" and budget:  # scan_raw, then the batches after the entry it took last
        assert got[0][2] is None and 0 < got[3] < got[0][3]
        start, after = got[4][0][1], got[4][0][5]
        d = open_dledger(str(root))
        prev = next(i for i in range(ENTRIES) if sum(d.index_unit(i)[1:3]) == start)
        assert after == (prev, d.index_unit(prev)[4])


def _reference(buf: bytes, base: int, committed: int, state: list[int]) -> tuple:
    """The walk ``rmq_walk_entries`` does, with ``scan_raw``'s own steps over one buffer."""
    starts, sizes, entries = [], [], []
    pos, n = 0, len(buf)
    while True:
        if n - pos < 8:
            return starts, sizes, entries, "torn" if pos < n else "end", pos
        ekind, esize, eindex, eterm, _ = entry_step(buf, pos, n, base, *state)
        if ekind != "entry":
            return starts, sizes, entries, {"cut": "past_end"}.get(ekind, ekind), pos
        if eindex > committed:
            return starts, sizes, entries, "committed", pos
        kind, total, _ = record_step(buf, pos + HEADER_SIZE, n)
        if kind != "record" or total != esize - HEADER_SIZE:
            return starts, sizes, entries, "damaged", pos
        starts.append(pos + HEADER_SIZE)
        sizes.append(total)
        entries.append([eindex, eterm])
        state[:] = [eindex, eterm]
        pos += esize


def test_the_compiled_entry_step_is_scan_raws(tmp_path):
    """``Kernel.walk_entries`` on every data file of the fixture, whole and cut, then with
    bytes overwritten at random (entry headers, records, fillers; 400 times): the records, the
    kind, the place and the index and term carried equal those of ``entry_step`` and
    ``record_step``."""
    k = kernel.load()
    assert k is not None
    files = sorted((copy_fixture(FIXTURE, tmp_path / "s") / "dledger-n0" / "data").iterdir())
    rng = random.Random(SEED)
    cases = []
    for p in files:
        data = p.read_bytes()
        cases.append((data, int(p.name)))
        cases.append((data[: rng.randrange(len(data))], int(p.name)))
    whole = cases[::2]
    heads = {base: _reference(data, base, ENTRIES, [-1, -1])[0] for data, base in whole}
    for _ in range(400):
        data, base = rng.choice(whole)
        buf = bytearray(data[: _data_end(bytearray(data)) + rng.choice((0, 8, 64))])
        for _ in range(rng.choice((1, 1, 3))):
            at = rng.randrange(len(buf))
            if heads[base] and rng.random() < 0.7:  # an entry's header or its record's head
                at = min(len(buf) - 1, rng.choice(heads[base]) - HEADER_SIZE + rng.randrange(56))
            width = rng.choice((1, 4, 8))
            value = rng.choice((0, 1, -1, 48, 1 << 31 - 1, rng.randrange(1 << 32)))
            chunk = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "big")
            buf[at : at + width] = chunk[: len(buf) - at]
        cases.append((bytes(buf), base))
    for data, base in cases:
        for committed, state in ((ENTRIES, [-1, -1]), (rng.randrange(ENTRIES), [-1, -1])):
            want_state = list(state)
            want = _reference(data, base, committed, want_state)
            arr = np.frombuffer(data, np.uint8)
            starts, sizes, entries, kind, at = k.walk_entries(arr, base, committed, state, cap=7)
            assert (starts.tolist(), sizes.tolist(), entries.tolist(), kind, at) == want
            assert state == want_state
    assert ENTRY_HEADER.size == HEADER_SIZE
