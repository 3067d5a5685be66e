"""engine/tools/verify/ over a store source (issue 32, item 2): ``verify_store(root,
source=ObjectSource(...))`` checks a snapshot in object storage in place, every read through the
source (listings and sizes from the manifest, the CommitLog by range, ConsumeQueue and IndexFile
bytes, config files, the checkpoint), and reports what ``verify_store`` reports over the local
copy of the same snapshot: the same problems and counts, for a good store and for a damaged one.

The location is a local directory (``pyarrow.fs.LocalFileSystem``: the same range reads as S3);
tests/tools/test_verify_objectstore.py runs ``rmqfs verify s3://...`` against a real S3 server.
The ranges are made small (:data:`engine.tools.verify.commitlog.RANGE`), so records are cut by
them and read again whole, and a record longer than a range is read in one read of its own."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from rmqfs.engine.format.crc import crc32c
from rmqfs.engine.live.objectsource import ObjectSource
from rmqfs.engine.live.snapshot import MANIFEST_NAME
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.storeconfig import StoreConfig
from rmqfs.engine.tools.verify import SNAPSHOT_SKIPS, VerifyResult, verify_store
from rmqfs.engine.tools.verify import commitlog as verify_commitlog
from stores import snapshot_copy

SEG = 64 * 1024


def _config() -> StoreConfig:
    return StoreConfig(
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=300 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A snapshot copy of a store of several CommitLog files (two topics, keys, tags, a body
    longer than a range), as tests/engine/test_remote_snapshot.py makes one."""
    root = tmp_path_factory.mktemp("verifysrc")
    with MessageStore(str(root / "store"), _config()) as s:
        s.create_topic("T", 3)
        s.create_topic("U", 1)
        for r in range(4):
            s.put_messages(
                [
                    Message(
                        "T" if i % 4 else "U",
                        f"{r}-{i}-{'y' * (i % 300)}".encode(),
                        tags=("A", "B", None)[i % 3],
                        keys=[f"k{r}-{i}"],
                    )
                    for i in range(150)
                ]
            )
        s.put_messages([Message("T", bytes(range(256)) * 40, keys=["big"])])  # > a range
        s.put_messages([Message("U", b"last", keys=["last"])])
        assert len(s.commitlog.files.segments) >= 3
        return snapshot_copy(s, root / "copy")


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch):
    monkeypatch.setattr(verify_commitlog, "RANGE", 4096)


def _report(res: VerifyResult) -> dict:
    """What a report says, the root aside (a path here, the location's there)."""
    return {
        "problems": [(p.severity, p.kind, p.path, p.what, p.offset) for p in res.problems],
        "suppressed": sorted(res.suppressed.items()),
        "errors": res.count("error"),
        "warnings": res.count("warning"),
        "numbers": (
            res.segments,
            res.segment_size,
            res.records,
            res.commitlog_min,
            res.commitlog_end,
            res.first_bad,
            res.queues,
            res.units,
            res.index_files,
            res.index_items,
            res.lock_holder,
        ),
        "bad": (sorted(res.bad_queues), sorted(res.bad_index_files)),
    }


def _both(copy: Path) -> tuple[VerifyResult, VerifyResult, ObjectSource]:
    """verify over the local copy, and over the copy as a location read in place (a source
    without a block cache: each read one range read)."""
    local = verify_store(str(copy), _config())
    src = ObjectSource(str(copy), None)
    try:
        remote = verify_store(src.root, _config(), source=src)
    finally:
        src.close()
    return local, remote, src


def test_a_good_snapshot_verifies_in_place_as_its_local_copy(copy):
    local, remote, src = _both(copy)
    assert local.ok and local.records > 600 and local.units and local.index_items
    assert local.segments >= 3
    assert _report(remote) == _report(local)
    assert remote.root == src.root and remote.ok
    # what a snapshot has no part of is skipped and said so; the local copy skips nothing
    assert remote.skipped == list(SNAPSHOT_SKIPS) and local.skipped == []
    assert src.stats.misses > local.segments  # the CommitLog came by range reads


def test_the_commitlog_is_read_by_range_never_whole(copy, monkeypatch):
    """Memory stays bounded: each read of a CommitLog file asks for one range (or one record
    longer than a range, in a read of its own), never a whole file."""
    src = ObjectSource(str(copy), None)
    asked: list[tuple[str, int]] = []
    real = src.pread

    def pread(path: str, length: int, offset: int) -> bytes:
        asked.append((path.rsplit("/", 2)[-2], length))
        return real(path, length, offset)

    monkeypatch.setattr(src, "pread", pread)
    try:
        assert verify_store(src.root, _config(), source=src).ok
    finally:
        src.close()
    lengths = [n for d, n in asked if d == "commitlog"]
    assert len(lengths) > 3 * SEG // 4096  # every file, range by range
    assert max(lengths) <= 40 * 256 + 300 < SEG  # the big record, read whole
    assert sum(1 for n in lengths if n > 4096) <= 2  # it alone (scan, index item)


def test_verify_in_place_reads_through_the_source_only(copy, monkeypatch):
    """Nothing of the store is opened, listed or mapped locally: every read goes through the
    source (the location is a local directory, so a local read would go unnoticed)."""
    import builtins
    import os

    src = ObjectSource(str(copy), None)
    seen: list[str] = []
    real_open, real_listdir, real_os_open = builtins.open, os.listdir, os.open

    def spy(real):
        def wrapped(path, *a, **k):
            if str(path).startswith(str(copy)):
                seen.append(str(path))
            return real(path, *a, **k)

        return wrapped

    monkeypatch.setattr(builtins, "open", spy(real_open))
    monkeypatch.setattr(os, "listdir", spy(real_listdir))
    monkeypatch.setattr(os, "open", spy(real_os_open))
    try:
        res = verify_store(src.root, _config(), source=src)
    finally:
        monkeypatch.undo()
        src.close()
    assert res.ok and res.records
    # the location's own reads (pyarrow's local filesystem) do not go through Python's os
    assert seen == []


def _resum(copy: Path, *changed: Path) -> None:
    """Write the manifest's crc32c of each changed file anew: the snapshot as uploaded from a
    damaged store (its sums those of the damaged bytes), not one damaged after its upload."""
    doc = json.loads((copy / MANIFEST_NAME).read_text())
    for path in changed:
        rel = path.relative_to(copy).as_posix()
        doc["files"][rel]["crc32c"] = f"{crc32c(path.read_bytes()):08x}"
    (copy / MANIFEST_NAME).write_text(json.dumps(doc))


def _flip(path: Path, at: int, mask: int = 0x20) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ mask]))


def test_a_damaged_snapshot_verifies_in_place_as_its_local_copy(copy, tmp_path):
    """A flipped byte in a record's body, a ConsumeQueue unit with another tagsCode, an
    IndexFile header with another hashSlotCount: the same problems over the source as over
    the local copy, each naming its file."""
    bad = Path(shutil.copytree(copy, tmp_path / "bad"))
    # a record's body, in the second CommitLog file (V1 record, IPv4: body at +88)
    unit_file = bad / "consumequeue" / "T" / "1" / f"{0:020d}"
    units = unit_file.read_bytes()
    off = next(
        o
        for o, _, _ in struct.iter_unpack(">qiq", units[: len(units) - len(units) % 20])
        if SEG <= o < 2 * SEG
    )
    seg = bad / "commitlog" / f"{off - off % SEG:020d}"
    _flip(seg, off % SEG + 88)
    # another ConsumeQueue's unit 3: its tagsCode
    cq = bad / "consumequeue" / "T" / "2" / f"{0:020d}"
    _flip(cq, 3 * 20 + 19, 0x01)
    # an IndexFile's header: hashSlotCount (bytes 32-35)
    idx = sorted((bad / "index").iterdir())[0]
    _flip(idx, 35, 0x04)
    _resum(bad, seg, cq, idx)

    local, remote, _ = _both(bad)
    assert not local.ok
    kinds = {(p.kind, p.path) for p in local.errors}
    assert ("commitlog-record", f"commitlog/{seg.name}") in kinds, local.errors
    assert ("cq-unit", f"consumequeue/T/2/{cq.name}") in kinds, local.errors
    assert ("index-header", f"index/{idx.name}") in kinds, local.errors
    assert local.first_bad == off
    assert _report(remote) == _report(local)


def test_a_file_that_differs_from_its_manifest_is_named(copy, tmp_path):
    """A file damaged after its upload (its sum no longer the manifest's) is named by the
    source once its bytes came in order: verify stops with that error, not a report of
    bytes the snapshot never held."""
    from rmqfs.engine.errors import CorruptRecordError

    bad = Path(shutil.copytree(copy, tmp_path / "bad"))
    seg = sorted((bad / "commitlog").iterdir())[1]
    data = bytearray(seg.read_bytes())
    data[-1] ^= 0xFF  # in its END_OF_FILE blank: only its sum can tell
    seg.write_bytes(bytes(data))
    assert verify_store(str(bad), _config()).ok  # the local copy has no sums to compare
    src = ObjectSource(str(bad), None)
    try:
        with pytest.raises(CorruptRecordError, match=rf"commitlog/{seg.name} of .* has crc32c"):
            verify_store(src.root, _config(), source=src)
    finally:
        src.close()
