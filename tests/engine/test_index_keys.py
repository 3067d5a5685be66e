"""Recovery's re-dispatch to the index in batches (issue 34 item 3).

Where the index lacks records (its files lost, dropped after a crash, or never written: a
DLedger store or a broker with ``messageIndexEnable=false``), recovery rebuilds their entries.
It did so record by record (``decode_record``, ``dispatch_of``, ``IndexService.dispatch``'s
Java hashes in Python); the compiled core now reads each run's KEYS and UNIQ_KEY in place and
hashes them (``rmq_index_keys``, ``Kernel.index_keys``), and the run's entries go to the
index at once.

* The judge of ``Kernel.index_keys`` is ``IndexService.dispatch`` itself, fed the records
  ``decode_record`` decodes: hypothesis draws records with any properties area (pairs of
  KEYS, UNIQ_KEY and other names, repeated, empty names and values, separators inside values,
  characters outside the BMP, bytes that are not UTF-8), V1 and V2 topics, IPv6 hosts and
  every transaction type. The entries must be equal, or the call must stop at the first record
  whose properties are not strict UTF-8 (recovery decodes that run record by record).
* Whole stores: a store with every record kind, its index (or its ConsumeQueues) lost,
  recovers to the same index and queue files by the batches as record by record, writable
  and read-only (the in-memory index written in place); the runs carried the entries.

tests/engine/test_kernel_sanitize.py runs this file against the sanitizer build.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refreader
from recoverwith import derived_files, recover_with, report_fields
from rmqfs.engine.format.indexfile import build_key
from rmqfs.engine.format.javahash import java_hash_u32
from rmqfs.engine.format.message import (
    BODY_LENGTH_POSITION,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_record,
    encode_message,
)
from rmqfs.engine.read import kernel
from rmqfs.engine.service.dispatch import DispatchRequest
from rmqfs.engine.service.indexservice import IndexService
from rmqfs.engine.store import MessageStore
from stores import every_kind_store, small_segments

pytestmark = pytest.mark.skipif(kernel.load() is None, reason="no compiled kernel")

V4 = (bytes([10, 0, 0, 1]), 9876)
V6 = (bytes(range(16)), 10911)

words = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6
)
names = st.one_of(st.sampled_from([PROPERTY_KEYS, PROPERTY_UNIQ_KEY, "TAGS", ""]), words)
values = st.one_of(
    st.lists(st.sampled_from(["k1", "", " ", "é", "\U0001f600", "a\x01b", "x y"]), max_size=4).map(
        " ".join
    ),
    words,
)


@st.composite
def areas(draw) -> bytes:
    """A properties area: pairs, or bytes that may not be UTF-8."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=40))
    pairs = draw(st.lists(st.tuples(names, values), max_size=6))
    raw = "".join(f"{n}\x01{v}\x02" for n, v in pairs).encode()
    if draw(st.booleans()) and raw:
        raw = raw[: draw(st.integers(0, len(raw)))]  # a cut area: a pair without its end
    return raw


@st.composite
def records(draw) -> tuple[bytes, str, bytes]:
    """A stored record (bytes) with the drawn properties area, its topic and that area."""
    topic = draw(st.sampled_from(["T", "Topic\u00e9", "V" * 140]))
    tx = draw(
        st.sampled_from(
            [0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE]
        )
    )
    enc = encode_message(
        topic,
        draw(st.binary(max_size=20)),
        queue_id=0,
        properties={},
        born_timestamp=1_795_305_347_998,
        born_host=draw(st.sampled_from([V4, V6])),
        store_host=draw(st.sampled_from([V4, V6])),
        sys_flag=tx,
    )
    area = draw(areas())
    data = bytes(enc.data[:-2]) + struct.pack(">h", len(area)) + area  # props length last
    return struct.pack(">i", len(data)) + data[4:], topic, area


def _reference(recs: list[tuple[bytes, str, bytes]], offsets: list[int]) -> list[int]:
    """What ``IndexService.dispatch`` puts for these records, decoded one by one."""
    got: list[int] = []
    index = IndexService("/nonexistent", read_only=True)
    index._put_entries = lambda entries, i=0, done=None: got.extend(entries)
    batch = []
    for (raw, _topic, _area), off in zip(recs, offsets):
        rec = decode_record(raw, 0, check_crc=False)
        batch.append(
            DispatchRequest(
                rec.topic, 0, off, len(raw), 0, rec.store_timestamp, 0, rec.keys,
                rec.uniq_key, rec.sys_flag,
            )
        )  # fmt: skip
    index.dispatch(batch)
    return got


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), min_size=1, max_size=6), st.integers(0, 7))
def test_index_keys_are_what_index_service_dispatch_puts(recs, lead):
    k = kernel.load()
    buf = bytes(lead) + b"".join(r[0] for r in recs)  # the records at some offset in a buffer
    pos, at = [], lead
    for r in recs:
        pos.append(at)
        at += len(r[0])
    offsets = [1000 + p for p in pos]
    ts = [decode_record(r[0], 0, check_crc=False).store_timestamp for r in recs]
    prefix = [java_hash_u32(build_key(r[1], "")) for r in recs]
    entries, bad = k.index_keys(
        buf, np.array(pos), np.array(offsets), np.array(ts), np.array(prefix, np.uint32)
    )
    strict = []  # a ROLLBACK record's properties are not read: it gets no entries
    for raw, _topic, area in recs:
        try:
            area.decode("utf-8")
            strict.append(True)
        except UnicodeDecodeError:
            flag = decode_record(raw, 0, check_crc=False).sys_flag
            strict.append(flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_ROLLBACK_TYPE)
    want_bad = strict.index(False) if False in strict else len(recs)
    assert bad == want_bad
    assert entries.tolist() == _reference(recs[:bad], offsets[:bad])


def test_index_keys_refuse_lengths_outside_the_record():
    """A record whose lengths do not add up (a hostile buffer) stops the call; nothing is
    read outside the buffer (the sanitizer build checks that)."""
    k = kernel.load()
    enc = encode_message(
        "T", b"body", queue_id=0, properties={PROPERTY_KEYS: "a b"},
        born_timestamp=1, born_host=V4, store_host=V4,
    )  # fmt: skip
    raw = bytes(enc.data)
    ok, bad = k.index_keys(
        raw, np.array([0]), np.array([0]), np.array([1]), np.array([7], np.uint32)
    )
    assert bad == 1 and len(ok) == 6
    for cut in (10, len(raw) - 1):
        got, bad = k.index_keys(
            raw[:cut], np.array([0]), np.array([0]), np.array([1]), np.array([7], np.uint32)
        )
        assert bad == 0 and len(got) == 0
    for field_at, value in (
        (BODY_LENGTH_POSITION, 1 << 20),
        (BODY_LENGTH_POSITION, -5),
    ):  # bodyLength beyond the record, negative
        broken = bytearray(raw)
        struct.pack_into(">i", broken, field_at, value)
        got, bad = k.index_keys(
            bytes(broken), np.array([0]), np.array([0]), np.array([1]), np.array([7], np.uint32)
        )
        assert bad == 0
    got, bad = k.index_keys(
        raw, np.array([len(raw)]), np.array([0]), np.array([1]), np.array([7], np.uint32)
    )
    assert bad == 0


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("every-kind") / "s"
    every_kind_store(root)
    return root


def _found(s: MessageStore, recs: list[dict]) -> list:
    """Every record's index hits by its UNIQ_KEY and keys (the in-memory index included)."""
    index = s.index_service
    assert index is not None
    out = []
    for r in recs:
        props = r["properties"]
        keys = [props.get(PROPERTY_UNIQ_KEY)] + (props.get(PROPERTY_KEYS) or "").split(" ")
        for key in filter(None, keys):
            out.append((r["topic"], key, sorted(index.query(r["topic"], key, 64))))
    return out


def _recover_both(
    tmp_path: Path,
    base: Path,
    monkeypatch,
    read_only: bool,
    recs: list[dict],
    lost: str | None = None,
) -> tuple[dict, list[int], list[tuple]]:
    """Copies of ``base`` (``lost``: that directory removed) opened after a crash, recovered
    by the batches and record by record: ``({batched: (report fields, index hits, derived
    files when writable)}, records the runs gave, the runs' calls)``."""
    seen: dict = {}
    given: list[int] = []
    calls: list[tuple] = []
    for batched in (True, False):
        root = tmp_path / f"b{batched}"
        shutil.copytree(base, root)
        if lost is not None:
            shutil.rmtree(root / lost, ignore_errors=True)
        g, c = recover_with(monkeypatch, batched)
        (root / "abort").write_text("1")
        with MessageStore(str(root), small_segments(), read_only=read_only) as s:
            seen[batched] = (report_fields(s.recovery_report), _found(s, recs))
        monkeypatch.undo()
        if not read_only:
            seen[batched] += (derived_files(root),)
        if batched:
            given, calls = g, c
    return seen, given, calls


@pytest.mark.parametrize("lost", ["index", "consumequeue"])
@pytest.mark.parametrize("read_only", [False, True])
def test_recovery_rebuilds_by_runs_what_it_rebuilds_record_by_record(
    base, tmp_path, monkeypatch, lost, read_only
):
    recs = refreader.read_commitlog(base / "commitlog", check=False)
    seen, given, calls = _recover_both(tmp_path, base, monkeypatch, read_only, recs, lost)
    assert sum(given) == len(recs)
    # the index's rebuild was asked of the runs (from offset 0, the index lost)
    assert calls and all(c[6] is not None for c in calls)
    assert seen[True] == seen[False]
    fields = seen[True][0]
    if lost == "index":
        assert fields[7] > 0  # index entries rebuilt
    else:
        assert fields[6] > 0  # units rebuilt
    if not read_only:  # and what was rebuilt is what the puts wrote, byte for byte
        want = {k: v for k, v in derived_files(base).items() if k.startswith(lost)}
        assert {k: v for k, v in seen[True][2].items() if k.startswith(lost)} == want


@pytest.mark.parametrize("read_only", [False, True])
def test_derived_files_behind_are_brought_up_by_runs_as_record_by_record(
    tmp_path, monkeypatch, read_only
):
    """The index and one ConsumeQueue (further back) stop in the middle of the CommitLog
    (copies taken while the broker wrote, then a crash): the record at the index's end is in
    the middle of a run, units missing before and after it (it goes through
    ``IndexService.dispatch``, which puts only the keys that record lacks; the queue's units
    are rebuilt from the run's columns); IndexFiles of 256 items fill and roll. Both walks
    leave the same files."""
    from rmqfs.engine.store import Message

    base = tmp_path / "base"
    held = tmp_path / "held"
    with MessageStore(str(base), small_segments()) as s:
        s.create_topic("T", 3)
        for i in range(150):
            s.put_messages([Message("T", b"b%d" % i, keys=[f"k{i}", f"j{i % 7}"], tags="t")])
    shutil.copytree(base / "consumequeue" / "T" / "1", held / "cq1")  # behind the index
    with MessageStore(str(base), small_segments()) as s:
        for i in range(150, 300):
            s.put_messages([Message("T", b"b%d" % i, keys=[f"k{i}", f"j{i % 7}"], tags="t")])
    shutil.copytree(base / "index", held / "index")
    with MessageStore(str(base), small_segments()) as s:
        for i in range(300, 700):
            s.put_messages([Message("T", b"b%d" % i, keys=[f"k{i}"], tags="u")])
    shutil.rmtree(base / "index")
    shutil.copytree(held / "index", base / "index")
    shutil.rmtree(base / "consumequeue" / "T" / "1")
    shutil.copytree(held / "cq1", base / "consumequeue" / "T" / "1")
    recs = refreader.read_commitlog(base / "commitlog", check=False)
    seen, _, _ = _recover_both(tmp_path, base, monkeypatch, read_only, recs)
    assert seen[True] == seen[False]
    fields = seen[True][0]
    assert fields[6] > 0 and fields[7] >= 400  # units and index entries rebuilt


@pytest.mark.parametrize(
    "read_only, every, limit", [(False, 97, 64), (True, 97, 64), (False, 3, 1), (True, 3, 1)]
)
def test_a_record_with_properties_not_utf8_costs_its_run_one_decode(
    tmp_path, monkeypatch, read_only, every, limit
):
    """A record whose KEYS are not UTF-8 (only a damaged or hostile store has one: Java writes
    UTF-8), in the middle of runs: its entries are the decoder's (as ``IndexService.dispatch``
    puts them, U+FFFD for each bad byte sequence), the compiled core's go on after it, and no
    run falls back to dispatching its records one by one; a run with more than
    ``DECODED_MAX`` (``limit``) of them does. Same index files as record by record."""
    from rmqfs.engine.read import recoverruns
    from rmqfs.engine.store import Message

    base = tmp_path / "base"
    with MessageStore(str(base), small_segments()) as s:
        s.create_topic("T", 2)
        for i in range(300):
            key = "BADKEY" if i % every == 50 % every else f"k{i}"
            s.put_messages([Message("T", b"b%d" % i, keys=[key, f"j{i % 5}"], tags="t")])
    recs = refreader.read_commitlog(base / "commitlog", check=False)  # (strict UTF-8: before)
    bad_at = []
    for seg in sorted((base / "commitlog").iterdir()):
        raw = bytearray(seg.read_bytes())
        at = raw.find(b"BADKEY")
        while at >= 0:  # the same length, not UTF-8 (the body CRC does not cover properties)
            raw[at + 3 : at + 6] = b"\xff\xc3\x28"
            bad_at.append(at)
            at = raw.find(b"BADKEY", at + 1)
        seg.write_bytes(bytes(raw))
    assert len(bad_at) == len(range(50 % every, 300, every))
    shutil.rmtree(base / "index")
    monkeypatch.setattr(recoverruns, "DECODED_MAX", limit)
    returned = []
    real = recoverruns.index_entries

    def watched(*a, **k):
        returned.append(real(*a, **k))
        return returned[-1]

    monkeypatch.setattr(recoverruns, "index_entries", watched)
    seen, given, _ = _recover_both(tmp_path, base, monkeypatch, read_only, recs)
    assert sum(given) == len(recs) == 300
    fell_back = [r is None for r in returned]
    assert returned and any(fell_back) == (limit == 1)  # (record by record: many in a run)
    assert seen[True] == seen[False]
    with MessageStore(str(tmp_path / "bTrue"), small_segments(), read_only=True) as s:
        hits = s.query_by_key("T", "BAD\ufffd\ufffd(", max_num=1000)
        assert len(hits) == min(len(bad_at), 64)  # (queryMessage gives 64 at most)
