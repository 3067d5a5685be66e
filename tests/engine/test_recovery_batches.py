"""Recovery's batched scan (issue 34 item 3, issue 33 item 1) against the record-by-record one.

Abnormal recovery of a plain CommitLog walks it with the compiled step and decoder in
batches (``engine.read.recoverruns.recovery_runs``) and compares the units the ConsumeQueues
hold per queue at once; where the batches stop, ``CommitLog.scan_raw`` walks on. The
reference is recovery with ``runs=None``: ``scan_raw`` alone, record by record, as before.
On a store with every record kind (``stores.every_kind_store``: V1 and V2 records, IPv6
hosts, compressed bodies, ``__CRC32#``, transactions, delays, an inner batch, segments
crossed), damaged at random places (seeded: ``RMQFS_DAMAGE_SEED``), with its derived files
kept, lost or damaged, both must end the CommitLog at the same offset for the same reason
and leave the same ConsumeQueue and index files.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from pathlib import Path

import pytest

import refreader
from recoverwith import derived_files, recover_with, report_fields
from rmqfs.engine.format.message import CRC32_RESERVED_LEN, FIXED_V4_POSITIONS
from rmqfs.engine.read import recoverruns
from rmqfs.engine.service import recovery
from rmqfs.engine.store import MessageStore
from stores import every_kind_store, small_segments

SEED = int(os.environ.get("RMQFS_DAMAGE_SEED", "20261128"))
CASES = 24
SEGMENT = 64 * 1024  # stores.small_segments


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("every-kind") / "s"
    every_kind_store(root)
    return root


def _records(root: Path) -> list[dict]:
    return refreader.read_commitlog(root / "commitlog", check=False)


def _patch(root: Path, offset: int, data: bytes) -> None:
    """Write ``data`` at CommitLog offset ``offset``."""
    path = root / "commitlog" / f"{offset - offset % SEGMENT:020d}"
    with open(path, "r+b") as f:
        f.seek(offset % SEGMENT)
        f.write(data)


def _read(root: Path, offset: int, n: int) -> bytes:
    path = root / "commitlog" / f"{offset - offset % SEGMENT:020d}"
    with open(path, "rb") as f:
        f.seek(offset % SEGMENT)
        return f.read(n)


def damage(root: Path, kind: str, rng: random.Random) -> None:
    """Damage the CommitLog of the store at ``root`` (``kind``, at a place ``rng`` picks)."""
    recs = _records(root)
    rec = rng.choice(recs)
    at, total = rec["physicalOffset"], rec["totalSize"]
    if kind == "flip_header":
        _flip(root, at + rng.randrange(FIXED_V4_POSITIONS["bodyLength"] + 4))
    elif kind == "flip_body":
        _flip(root, at + 88 + rng.randrange(max(1, total - 88)))
    elif kind == "flip_tail":  # topic or properties
        _flip(root, at + total - 1 - rng.randrange(min(total, 40)))
    elif kind == "torn":  # zeros from a place to the end of the data
        last = recs[-1]
        end = last["physicalOffset"] + last["totalSize"]
        cut = rng.randrange(at, end)
        while cut < end:
            n = min(end, cut - cut % SEGMENT + SEGMENT) - cut
            _patch(root, cut, bytes(n))
            cut += n
    elif kind == "empty_crc":  # an empty body whose BODYCRC is not 0
        empty = [r for r in recs if r["totalSize"] and not r["body"]]
        r = rng.choice(empty)
        _patch(root, r["physicalOffset"] + FIXED_V4_POSITIONS["bodyCRC"], struct.pack(">i", 7))
    elif kind == "trailer":  # a digit of a __CRC32# trailer
        with_crc = [r for r in recs if "__CRC32#" in r["properties"]]
        r = rng.choice(with_crc)
        end = r["physicalOffset"] + r["totalSize"] - CRC32_RESERVED_LEN
        _flip(root, end + 9 + rng.randrange(10), 1)
    else:
        raise AssertionError(kind)


def _flip(root: Path, offset: int, mask: int | None = None) -> None:
    b = _read(root, offset, 1)[0]
    _patch(root, offset, bytes([b ^ (mask or random.Random(offset).randrange(1, 256))]))


def lose(root: Path, what: str, rng: random.Random) -> None:
    """Lose or damage the derived files (``what``)."""
    if what == "no_queues":
        shutil.rmtree(root / "consumequeue")
    elif what == "no_index":
        shutil.rmtree(root / "index", ignore_errors=True)
    elif what == "unit":  # a tagsCode or offset in the middle of a queue
        files = sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())
        path = rng.choice(files)
        data = bytearray(path.read_bytes())
        used = len(data.rstrip(b"\0")) // 20
        if used:
            data[rng.randrange(used) * 20 + rng.choice((3, 15))] ^= 0x21
            path.write_bytes(bytes(data))


def recover(root: Path, batched: bool, monkeypatch, **config) -> tuple:
    """Open the store at ``root`` after a crash with the batched scan or ``scan_raw`` alone:
    ``(report fields, CommitLog end, derived files, records the batches gave)``."""
    given, _ = recover_with(monkeypatch, batched)
    (root / "abort").write_text("1")
    with MessageStore(str(root), small_segments(**config)) as s:
        seen = report_fields(s.recovery_report)
        end = s.commitlog.max_offset
    monkeypatch.undo()
    return seen, end, derived_files(root), sum(given)


def _cases() -> list[tuple]:
    rng = random.Random(SEED)
    kinds = ("flip_header", "flip_body", "flip_tail", "torn", "empty_crc", "trailer")
    losses = ("keep", "no_queues", "no_index", "unit")
    cases = [(k, "keep", True, None, 0) for k in ("none", *kinds)]
    for i in range(CASES):
        cases.append(
            (
                rng.choice(kinds),
                rng.choice(losses),
                rng.random() < 0.75,  # checkCRCOnRecover
                rng.choice((None, 4096)),  # maxMessageSize: the 9000-byte bodies claim more
                i + 1,
            )
        )
    return cases


@pytest.mark.parametrize("kind, loss, check_crc, max_size, seed", _cases())
def test_batched_recovery_ends_and_dispatches_as_scan_raw(
    base, tmp_path, monkeypatch, kind, loss, check_crc, max_size, seed
):
    rng = random.Random(SEED * 1000 + seed)
    damaged = tmp_path / "damaged"
    shutil.copytree(base, damaged)
    if kind != "none":
        damage(damaged, kind, rng)
    lose(damaged, loss, rng)
    config = {"check_crc_on_recover": check_crc}
    if max_size is not None:
        config["max_message_size"] = max_size
    roots = {}
    for batched in (True, False):
        roots[batched] = tmp_path / f"batched{batched}"
        shutil.copytree(damaged, roots[batched])
    got = recover(roots[True], True, monkeypatch, **config)
    want = recover(roots[False], False, monkeypatch, **config)
    assert got[:3] == want[:3]
    assert want[3] == 0
    if kind == "none":
        assert got[3] > 0 and got[0][2] is None  # the batches took the records
        assert got[3] >= got[0][3] // 2


def test_a_short_scan_goes_record_by_record(base, tmp_path, monkeypatch):
    """A scan shorter than BATCHES_AFTER (normal recovery's, from the queues' last record)
    does not load the batches (numpy, pyarrow): scan_raw walks it alone."""
    root = tmp_path / "s"
    shutil.copytree(base, root)
    called = []
    real = recoverruns.recovery_runs
    monkeypatch.setattr(recoverruns, "recovery_runs", lambda *a: called.append(a) or real(*a))
    (root / "abort").write_text("1")
    with MessageStore(str(root), small_segments()) as s:
        assert s.recovery_report is not None
        assert s.recovery_report.records_scanned == len(_records(base))
    assert called == []
    monkeypatch.setattr(recovery, "BATCHES_AFTER", 5000)  # the batches from there on
    (root / "abort").write_text("1")
    with MessageStore(str(root), small_segments()) as s:
        assert s.recovery_report is not None
        assert s.recovery_report.records_scanned == len(_records(base))
    assert called and all(a[1] >= 5000 for a in called)


def test_the_batches_take_every_record_of_a_plain_store(base, tmp_path, monkeypatch):
    """Without damage every record but those the batches cannot vouch for (a claim past
    maxMessageSize: none here) comes from the batches, and nothing is rebuilt."""
    root = tmp_path / "s"
    shutil.copytree(base, root)
    seen, _end, _files, given = recover(root, True, monkeypatch)
    assert seen[2] is None
    assert given == seen[3] == len(_records(base))
    assert seen[6] == seen[7] == 0


def test_int_values_reads_arrow_integers_without_pyarrows_conversions():
    """``schema.int_values`` (recovery's columns, without pyarrow's ``to_numpy`` or
    ``fill_null``, which import pandas): the values of signed and unsigned arrays and of
    slices, nulls replaced where a value is given, refused where none is, and a column that
    is not of integers refused."""
    import numpy as np
    import pyarrow as pa
    import pytest

    from rmqfs.engine.read.schema import int_values

    for t in (pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.uint32()):
        a = pa.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 120], t)
        assert int_values(a).tolist() == a.to_pylist()
        assert int_values(a.slice(3, 5)).tolist() == [4, 5, 6, 7, 8]
    d = pa.array(["x", None, "y", "x", None, "z", "y", "x", None, "q", "x"]).dictionary_encode()
    want = [0, 9, 1, 0, 9, 2, 1, 0, 9, 3, 0]
    assert int_values(d.indices, 9).tolist() == want
    assert int_values(d.indices.slice(1, 9), 9).tolist() == want[1:10]
    with pytest.raises(ValueError):
        int_values(d.indices)
    with pytest.raises(ValueError):
        int_values(pa.array([1.5]))
    with pytest.raises(ValueError):  # a null the type cannot hold is refused, not wrapped
        int_values(pa.array([1, None], pa.int8()), 128)
    with pytest.raises(ValueError):
        int_values(pa.array([1, None], pa.uint32()), -1)
    assert int_values(pa.array([], pa.int32())).dtype == np.int32
