"""The compiled core of the columnar decoder (engine/read/_kernel.c through engine.read.kernel)
against Python's own answers: zlib's CRC-32, bytes.decode's UTF-8, the per-record properties
split (engine.format.message.decode_properties, MessageDecoder.string2messageProperties),
str.split, struct; then whole decodes of crafted records (repeated names, non-UTF-8
properties and topics, many pairs, empty and many keys) against the per-record decoder, with
and without the kernel."""

import os
import random
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refreader
from rmqfs.engine.errors import CorruptRecordError
from rmqfs.engine.format.commitlog import walk_segment
from rmqfs.engine.format.message import (
    BODY_CRC_MASK,
    BORNHOST_V6_FLAG,
    FIXED_V4,
    FIXED_V4_FIELDS,
    FIXED_V4_POSITIONS,
    KEY_SEPARATOR,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    STOREHOSTADDRESS_V6_FLAG,
    SYSFLAG_POSITION,
    decode_properties,
    decode_record,
    host_to_str,
    min_record_size,
    offset_msg_id,
)
from rmqfs.engine.read import columnar, kernel
from rmqfs.engine.store import Message, MessageStore
from stores import put_internal, small_segments

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def k():
    got = kernel.load()
    assert got is not None, "make builds the kernel; tests run with it"
    return got


def _buf(data: bytes) -> np.ndarray:
    """``data`` in an array of its own, exactly its size: under `make sanitize` a read one
    byte past it lands in ASan's red zone (a bytes object has a NUL after its data)."""
    return np.frombuffer(data, dtype=np.uint8).copy() if data else np.zeros(0, np.uint8)


# -- the primitives --------------------------------------------------------------------------


def _walk_steps(data: bytes) -> tuple[list[int], list[int], str, int]:
    """What the one record step says of ``data`` (engine.format.commitlog.walk_segment, a loop
    over record_step), in the shape of the compiled walk's answer."""
    starts, sizes, kind, pos = [], [], "end", len(data)
    for step in walk_segment(data, len(data)):
        if step.kind == "record":
            starts.append(step.pos)
            sizes.append(step.total)
        else:
            kind, pos = step.kind, step.pos
    return starts, sizes, kind, pos


def _fixture_segments() -> list[Path]:
    """The first CommitLog file of each store in ../shared/fixtures (written by RocketMQ's
    brokers and store classes, and by other implementations)."""
    from conftest import FIXTURES

    firsts: dict[Path, Path] = {}
    for path in sorted(FIXTURES.rglob("commitlog/*")):
        if path.is_file() and path.name.isdigit():
            firsts.setdefault(path.parent, path)
    return sorted(firsts.values())


def test_the_compiled_walk_is_the_step_on_mutated_stores(k, tmp_path):
    """rmq_walk against the record step (walk_segment) on real CommitLog files, each mutated
    200 times: TOTALSIZE and MAGICCODE of a record overwritten (a record turned longer,
    shorter, negative, zero, blank or foreign), bytes flipped anywhere, the file cut anywhere.
    Every mutant must walk to the same records and stop at the same place for the same
    reason (under `make sanitize` too: no read outside the buffer)."""
    segments = _fixture_segments()
    assert len(segments) >= 4, segments  # the fixtures of 4.9.8, DLedger, 5.3.3 and more
    store = MessageStore(str(tmp_path / "ours"), small_segments())
    store.create_topic("T")
    store.put_messages([Message("T", bytes(i % 300), tags="t", keys=f"k{i}") for i in range(400)])
    store.close()
    segments.append(tmp_path / "ours" / "commitlog" / "00000000000000000000")
    rnd = random.Random(33)
    walked = 0
    for path in segments:
        whole = path.read_bytes()[: 1 << 20]
        starts = _walk_steps(whole)[0] or [0]
        for _ in range(200):
            data = bytearray(whole[: rnd.choice([len(whole), rnd.randrange(len(whole) + 1)])])
            for _ in range(rnd.randrange(1, 4)):
                if not data:
                    break
                at = rnd.choice(starts)
                if rnd.random() < 0.6 and at + 8 <= len(data):  # a record's head
                    total = rnd.choice([0, -1, 1, 7, 8, 17, 1 << 30, rnd.randrange(1, 600)])
                    magic = rnd.choice([MAGIC_V1, MAGIC_V2, MAGIC_BLANK, 0, 0x12345678])
                    data[at : at + 8] = struct.pack(">iI", total, magic)
                else:  # a byte anywhere
                    data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
            mutant = bytes(data)
            want = _walk_steps(mutant)
            assert _same_walk(k.walk(_buf(mutant)), want), path
            walked += 1
    assert walked == 200 * len(segments)


def _same_walk(got: tuple, want: tuple[list[int], list[int], str, int]) -> bool:
    """Whether the compiled walk's arrays and ending equal the step's answer."""
    starts, sizes, kind, pos = got
    return (starts.tolist(), sizes.tolist(), kind, pos) == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=700), min_size=1, max_size=12))
def test_crc32_is_zlibs(k, pieces):
    data = b"".join(pieces)
    starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    got = k.crc32(_buf(data + b"\0"), starts, [len(p) for p in pieces])
    assert got.tolist() == [zlib.crc32(p) for p in pieces]


_PIECE = st.one_of(
    # a record head (V1 or V2) and its rest, TOTALSIZE as stated or off by a little
    st.tuples(
        st.sampled_from([MAGIC_V1, MAGIC_V2]),
        st.integers(0, 120),
        st.integers(-3, 3),
    ).map(lambda t: struct.pack(">iI", max(t[1] + 8 + t[2], -5), t[0]) + bytes(t[1])),
    st.just(struct.pack(">iI", 40, MAGIC_BLANK) + bytes(32)),  # END_OF_FILE
    st.just(bytes(8)),  # zeros
    st.binary(min_size=1, max_size=12),  # anything
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECE, max_size=10), st.integers(0, 64), st.integers(1, 4))
def test_the_compiled_walk_is_walk_segment(k, pieces, cut, cap):
    """rmq_walk (engine.read.columnar.walk_records' fast path) against the lenient walk of
    engine.format.commitlog, on records, blanks, zeros, garbage and cut buffers; a small cap
    makes it stop and go on (RMQ_WALK_FULL)."""
    data = b"".join(pieces)
    data = data[: max(0, len(data) - cut)]
    want = _walk_steps(data)
    for c in (cap, 1 << 20):
        assert _same_walk(k.walk(_buf(data), cap=c), want)


def test_crc32_every_length_around_the_folding_steps(k):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    lengths = np.arange(0, 600)
    starts = rng.integers(0, 4096 - 600, len(lengths))
    got = k.crc32(data, starts, lengths)
    want = [zlib.crc32(data[a : a + n].tobytes()) for a, n in zip(starts, lengths)]
    assert got.tolist() == want


_UTF8ISH = st.lists(
    st.sampled_from(
        [b"a", b"\x01", b"\x02", b" ", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xff",
         b"\xc3", b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80",
         b"TAGS", b"KEYS", b"\x00"]
    ),
    max_size=40,
).map(b"".join)  # fmt: skip


def _valid(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@settings(max_examples=400, deadline=None)
@given(st.lists(_UTF8ISH | st.binary(max_size=40), min_size=1, max_size=8))
def test_utf8_check_is_bytes_decode(k, pieces):
    data = b"".join(pieces)
    starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    lengths = [len(p) for p in pieces]
    want = next((i for i, p in enumerate(pieces) if not _valid(p)), -1)
    assert k.utf8_bad(_buf(data + b"\0"), starts, lengths) == want


def _record(area: bytes, body: bytes = b"b", topic: bytes = b"T", fields=None) -> bytes:
    """A V1 record with IPv4 hosts built by hand from ``FIXED_V4`` (not by the engine's
    encoder): the fixed part (``fields`` overrides values by name), the body, the topic and
    the properties area ``area`` as given, TOTALSIZE and BODYCRC consistent."""
    values = {name: 0 for name, _ in FIXED_V4_FIELDS}
    values.update(bornHostAddress=b"\x7f\0\0\1", storeHostAddress=b"\x0a\x01\x02\xff")
    values.update(fields or {})
    values.update(
        totalSize=FIXED_V4.size + len(body) + 1 + len(topic) + 2 + len(area),
        magicCode=MAGIC_V1,
        bodyLength=len(body),
    )
    values.setdefault("bodyCRC", 0)
    if not (fields and "bodyCRC" in fields):
        values["bodyCRC"] = zlib.crc32(body) & BODY_CRC_MASK
    head = FIXED_V4.pack(*(values[name] for name, _ in FIXED_V4_FIELDS))
    return head + body + bytes([len(topic)]) + topic + len(area).to_bytes(2, "big") + area


_ALL_WANT = (
    kernel.WANT_BODY | kernel.WANT_TOPIC | kernel.WANT_TAGS | kernel.WANT_KEYS
    | kernel.WANT_PROPS | kernel.WANT_MSGID | kernel.WANT_BORN_HOST | kernel.WANT_STORE_HOST
    | kernel.CHECK_CRC
)  # fmt: skip
_NUMERIC_FIELDS = sorted(set(columnar._NUMERIC.values()))


def _decode(k, records, want=_ALL_WANT, queue_id=None, topic=None, pad=b"", queue_offsets=None):
    """Kernel.decode of hand-built records laid end to end (physical offset = position)."""
    data = pad + b"".join(records)
    sizes = np.array([len(r) for r in records], dtype=np.int64)
    pos = len(pad) + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    fixed = [(f, FIXED_V4_POSITIONS[f], columnar._WIDTH[f]) for f in _NUMERIC_FIELDS]
    # every PHYSICALOFFSET is 0 in these records: the units say 0 too
    return k.decode(_buf(data), pos, sizes, np.zeros(len(records), np.int64), columnar._LAYOUT,
                    fixed, want, queue_id, topic, queue_offsets)  # fmt: skip


def _strings(d, name, count=None):
    offsets, data = d.strings[name]
    count = len(offsets) - 1 if count is None else count
    return [bytes(data[offsets[i] : offsets[i + 1]]).decode() for i in range(count)]


def _decoded_rows(d):
    """The decoded rows' tags, keys and properties as Python values."""
    names, values = _strings(d, "prop_names"), _strings(d, "prop_values")
    items = _strings(d, "key_items")
    valid = np.unpackbits(d.tags_valid, count=d.rows, bitorder="little")
    tags = _strings(d, "tags", d.rows)
    out = []
    for i in range(d.rows):  # (outputs not asked for have one offset)
        lo, hi = d.prop_maps[i : i + 2] if len(d.prop_maps) > 1 else (0, 0)
        ka, kb = d.key_lists[i : i + 2] if len(d.key_lists) > 1 else (0, 0)
        out.append(
            {
                "tags": tags[i] if valid[i] else None,
                "keys": items[ka:kb],
                "properties": list(zip(names[lo:hi], values[lo:hi])),
            }
        )
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(_UTF8ISH, min_size=1, max_size=6))
def test_properties_split_is_string2messageProperties(k, areas):
    d = _decode(k, [_record(a) for a in areas])
    rows = iter(_decoded_rows(d))
    assert d.bad == -1
    for i, area in enumerate(areas):
        if not _valid(area):  # the per-record decoder replaces bad bytes: not the kernel's
            assert not d.fast[i]
            continue
        assert d.fast[i]
        want = decode_properties(area)
        row = next(rows)
        assert row["properties"] == list(want.items())  # names in first-seen order, last values
        assert row["tags"] == want.get("TAGS")
        keys = want.get("KEYS")
        assert row["keys"] == ([t for t in keys.split(KEY_SEPARATOR) if t] if keys else [])


def test_properties_with_more_pairs_than_the_fast_bound_go_record_by_record(k):
    many = b"\x02".join(b"n%d\x01v" % i for i in range(kernel.MAX_FAST_PAIRS + 1))
    enough = b"\x02".join(b"n%d\x01v" % i for i in range(kernel.MAX_FAST_PAIRS))
    same = b"\x02".join(b"n\x01v%d" % i for i in range(500))  # one name, 500 times
    d = _decode(k, [_record(many), _record(enough), _record(same)])
    assert d.fast.tolist() == [False, True, True]
    rows = _decoded_rows(d)
    assert len(rows[0]["properties"]) == kernel.MAX_FAST_PAIRS
    assert rows[1]["properties"] == [("n", "v499")]
    # without the map, names are not compared: 500 pairs are more than the bound
    d = _decode(k, [_record(same)], want=kernel.WANT_TAGS)
    assert d.fast.tolist() == [False]


def test_repeated_property_names_decode_like_a_dict(k):
    props = b"A\x01one\x02TAGS\x01t1\x02A\x01two\x02\x02x\x01\x02TAGS\x01t2\x02"
    want = [{"A": "two", "TAGS": "t2"}, {"B": "b"}]
    assert [decode_properties(props), decode_properties(b"B\x01b\x02")] == want
    for flags in (_ALL_WANT, kernel.WANT_TAGS):
        d = _decode(k, [_record(props), _record(b"B\x01b\x02")], want=flags)
        rows = _decoded_rows(d)
        assert [r["tags"] for r in rows] == ["t2", None]
        if flags & kernel.WANT_PROPS:  # first position kept, last value taken
            assert [r["properties"] for r in rows] == [list(w.items()) for w in want]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=" ab\u00e9", max_size=12), min_size=1, max_size=8))
def test_keys_split_is_str_split(k, values):
    d = _decode(k, [_record(b"KEYS\x01" + v.encode()) for v in values])
    got = [r["keys"] for r in _decoded_rows(d)]
    # an empty value is no pair at all: no keys either way
    assert got == [[t for t in v.split(KEY_SEPARATOR) if t] for v in values]


_I32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "queueId": _I32,
                "flag": _I32,
                "queueOffset": _I64,
                "sysFlag": st.just(0),
                "bornTimestamp": _I64,
                "bornHostAddress": st.binary(min_size=4, max_size=4),
                "bornHostPort": _I32,
                "storeTimestamp": _I64,
                "reconsumeTimes": _I32,
                "storeHostAddress": st.binary(min_size=4, max_size=4),
                "storeHostPort": _I32,
                "preparedTransactionOffset": _I64,
            }
        ),
        min_size=1,
        max_size=5,
    )
)
def test_fixed_fields_hosts_and_msg_ids_are_the_per_record_decoders(k, heads):
    """Numeric fields as struct reads them, host texts as message.host_to_str and msgIds
    as message.offset_msg_id, on any values (negative ports, high addresses)."""
    d = _decode(k, [_record(b"", fields=h) for h in heads])
    assert d.rows == len(heads)
    for i, h in enumerate(heads):
        for name in _NUMERIC_FIELDS:
            if name in h:
                assert int(d.fixed[name][i]) == h[name], name
        born = (h["bornHostAddress"], h["bornHostPort"])
        store = (h["storeHostAddress"], h["storeHostPort"])
        assert _strings(d, "bornHost")[i] == host_to_str(born)
        assert _strings(d, "storeHost")[i] == host_to_str(store)
        assert bytes(d.msg_id[32 * i : 32 * i + 32]).decode() == offset_msg_id(store, 0)


def test_damage_is_named_and_rare_records_are_left_alone(k):
    good = _record(b"TAGS\x01t", body=b"x" * 100)
    v2 = bytearray(good)
    v2[4:8] = MAGIC_V2.to_bytes(4, "big")
    bad_crc = _record(b"", body=b"y" * 100, fields={"bodyCRC": 5})
    d = _decode(k, [good, bytes(v2), good, bad_crc, good])
    assert (d.bad, d.bad_code, d.rows) == (3, kernel.BAD_CRC, 2)
    assert d.fast[:3].tolist() == [True, False, True]
    d = _decode(k, [good, bad_crc], want=kernel.WANT_TAGS)  # CRC not asked for
    assert d.bad == -1 and d.rows == 2
    wrong_queue = _record(b"", fields={"queueId": 3})
    d = _decode(k, [good, wrong_queue], queue_id=0)
    assert (d.bad, d.bad_code, d.bad_value) == (1, kernel.BAD_QUEUE, 3)
    # another topic than the queue's, or a topic name that is not UTF-8: record by record
    d = _decode(k, [good, _record(b"", topic=b"U"), _record(b"", topic=b"\xff")], topic=b"T")
    assert d.fast.tolist() == [True, False, False]
    d = _decode(k, [good, _record(b"", topic=b"\xff")])
    assert d.fast.tolist() == [True, False] and _strings(d, "topic") == ["T"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=8), st.data())
def test_a_unit_pointing_at_another_record_is_damage(k, stored, data):
    """Units swapped, duplicated or shifted (their queue offsets drawn against the records'
    QUEUEOFFSETs): the first record whose QUEUEOFFSET is not its unit's stops the decode as
    BAD_QOFF, the rows before it decoded, as ``message.check_unit_record`` judges them."""
    units = data.draw(st.lists(st.integers(0, 4), min_size=len(stored), max_size=len(stored)))
    records = [_record(b"", fields={"queueOffset": q}) for q in stored]
    d = _decode(k, records, queue_offsets=np.array(units, np.int64))
    first = next((i for i, (a, b) in enumerate(zip(stored, units)) if a != b), -1)
    assert d.bad == first
    if first >= 0:
        assert (d.bad_code, d.bad_value, d.rows) == (kernel.BAD_QOFF, stored[first], first)
    else:
        assert d.rows == len(records)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(
        [BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG]
    ),
    st.booleans(),
    st.integers(-3, 30),
)
def test_a_total_size_against_the_flags_is_never_read_past(k, v6, v2, delta):
    """TOTALSIZE mutated against SYSFLAG's host widths and the magic's topic length: the
    kernel never decodes such a record itself (rare flags), and the per-record decoder on
    exactly the record's bytes raises CorruptRecordError, never struct.error, for every
    length that does not fit (``message.min_record_size``)."""
    rec = bytearray(_record(b"", body=b"", topic=b""))
    sf = SYSFLAG_POSITION
    rec[sf : sf + 4] = v6.to_bytes(4, "big")
    if v2:
        rec[4:8] = MAGIC_V2.to_bytes(4, "big")
    total = max(FIXED_V4.size, len(rec) + delta)
    rec = (bytes(rec) + bytes(64))[:total]
    rec = total.to_bytes(4, "big") + rec[4:]
    d = _decode(k, [rec])
    assert d.rows == 0 and d.bad == -1
    if total < min_record_size(v6, v2):
        with pytest.raises(CorruptRecordError):
            decode_record(memoryview(rec), 0, check_crc=False)
    else:
        try:
            decode_record(memoryview(rec), 0, check_crc=False)
        except CorruptRecordError:
            pass  # lengths inside that do not add up: named, never a struct.error


def test_positions_outside_the_buffer_are_refused(k):
    buf = _buf(b"0123456789")
    for starts, lengths in (([8], [3]), ([-1], [2]), ([0], [-1])):
        with pytest.raises(ValueError):
            k.crc32(buf, starts, lengths)
    with pytest.raises(ValueError):
        fixed = [("queueId", 12, 4)]
        k.decode(buf, [0], [100], [0], columnar._LAYOUT, fixed, _ALL_WANT)


def _checkout(tmp_path, with_module=True):
    """A copy of the project's engine/ (with or without the built extension module)."""
    checkout = tmp_path / "checkout"
    ignore = ["__pycache__"] + ([] if with_module else ["*.so"])
    shutil.copytree(
        os.path.join(REPO, "engine"), checkout / "engine", ignore=shutil.ignore_patterns(*ignore)
    )
    return checkout


def _run(code, path, **env):
    """Run ``code`` with only ``path`` (a checkout or a zip) on the path for the project."""
    base = {k: v for k, v in os.environ.items() if k != "RMQFS_KERNEL_MODULE"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env=dict(base, PYTHONPATH=str(path), **env),
        capture_output=True,
        check=True,
        text=True,
        cwd=os.path.dirname(path),
    )


def test_a_module_built_from_another_source_is_refused(tmp_path):
    """An edited _kernel.c after the last build: the per-record decoder and a warning that
    says to rebuild, never the old binary."""
    checkout = _checkout(tmp_path)
    _run("from engine.read import kernel\nassert kernel.load()\n", checkout)
    with open(checkout / "engine" / "read" / "_kernel.c", "a") as f:
        f.write("\n/* edited */\n")
    out = _run("from engine.read import kernel\nassert kernel.load() is None\n", checkout)
    assert "another _kernel.c" in out.stderr and "make kernel" in out.stderr


def test_without_the_module_a_warning_and_the_per_record_decoder(tmp_path):
    checkout = _checkout(tmp_path, with_module=False)
    code = "from engine.read import kernel\nassert kernel.load() is None\n"
    out = _run(code, checkout)
    assert "compiled decoder is not available" in out.stderr and "make kernel" in out.stderr


def test_a_package_in_a_zip_loads_its_module_from_the_cache(tmp_path):
    """Spark ships engine/ as a zip (pipeline.datasource._ship_code): the module inside it is
    unpacked into $XDG_CACHE_HOME/rmqfs (0700) and decodes."""
    import zipfile

    checkout = _checkout(tmp_path)
    zpath = tmp_path / "code.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for here, _dirs, names in os.walk(checkout / "engine"):
            for name in names:
                path = os.path.join(here, name)
                z.write(path, os.path.relpath(path, checkout))
    code = (
        "from engine.read import kernel\n"
        "assert '.zip' in kernel.__file__\n"
        "k = kernel.load()\n"
        "assert k is not None\n"
        "import numpy as np, zlib\n"
        "assert k.crc32(np.frombuffer(b'abc', np.uint8), [0], [3])[0] == zlib.crc32(b'abc')\n"
        "print(k.lib.rmq_source_digest and __import__('sys').modules[kernel.__package__ + "
        "'._kernel_cffi'].__file__)\n"
    )
    out = _run(code, zpath, XDG_CACHE_HOME=str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "rmqfs"
    assert out.stdout.strip().startswith(str(cache)), out.stdout
    assert cache.stat().st_mode & 0o777 == 0o700


# -- whole decodes of crafted records --------------------------------------------------------


def _patch_properties(root, placeholder: bytes, area: bytes) -> None:
    """Replace a record's properties area (found by its unique placeholder value) by ``area``
    of the same length: properties are outside BODYCRC, so the record stays valid."""
    for name in sorted(os.listdir(root / "commitlog")):
        path = root / "commitlog" / name
        data = path.read_bytes()
        at = data.find(placeholder)
        if at >= 0:
            start = data.rfind(b"PAD\x01", 0, at)
            assert start >= 0
            old_len = at + len(placeholder) - start
            assert len(area) <= old_len
            area = area + b"\x02" * (old_len - len(area))  # empty pairs, dropped
            with open(path, "r+b") as f:
                f.seek(start)
                f.write(area)
            return
    raise AssertionError(placeholder)


REPEAT = 5  # enough records to cross a 64 KiB segment end
CRAFTED = [
    b"TAGS\x01first\x02A\x01one\x02TAGS\x01second\x02A\x01two",  # repeated names
    b"TAGS\x01\xff\xfe\x02KEYS\x01k1 k2",  # not UTF-8: replaced by the per-record decoder
    b"\x02".join(b"p%d\x01v" % i for i in range(70)),  # more pairs than the fast bound
    b"KEYS\x01   \x02TAGS\x01t",  # keys of spaces only: no key
    b"KEYS\x01" + b" ".join(b"k%d" % i for i in range(300)),  # many keys
    b"\x01x\x02y\x01\x02\x01\x02TAGS\x01\xc3\xa9t\xc3\xa9",  # empty names/values, UTF-8 tag
    b"",
]


def _crafted_store(root, areas=CRAFTED):
    with MessageStore(str(root), small_segments()) as s:
        s.create_topic("C", 2)
        msgs = []
        for i, _area in enumerate(areas * REPEAT):
            msgs.append(
                Message(
                    "C",
                    b"body %d " % i * (i % 40),
                    queue_id=i % 2,
                    properties={"PAD": "%05d" % i + "_" * 2000},
                )
            )
        put_internal(s, msgs)
    for i, area in enumerate(areas * REPEAT):
        _patch_properties(root, b"%05d" % i + b"_" * 2000, area)
    return root


def _all_rows(root, **kw):
    files = columnar.StoreFiles(str(root), **kw)
    try:
        out = []
        for q in files.queue_ids("C"):
            lo, hi = files.min_offset("C", q), files.max_offset("C", q)
            units = files.units("C", q, lo, hi)
            qoffs = np.arange(lo, hi)
            fast = columnar.decode_units(files.commitlog, "C", q, units, qoffs)
            slow = columnar.decode_units_per_record(files.commitlog, "C", q, units, qoffs)
            assert fast.equals(slow), q
            for cols in (("tags", "keys"), ("properties",), ("body", "storeTimestamp", "tags")):
                sub = columnar.decode_units(files.commitlog, "C", q, units, qoffs, columns=cols)
                assert sub.equals(slow.select(list(cols))), (q, cols)
            out.extend(fast.to_pylist())
        walked = [r for b in files.read_commitlog(batch_rows=4) for r in b.to_pylist()]
        return out, walked
    finally:
        files.close()


def test_crafted_properties_decode_as_the_per_record_decoder(tmp_path):
    root = _crafted_store(tmp_path / "s")
    rows, walked = _all_rows(root)
    assert len(rows) == len(walked) == REPEAT * len(CRAFTED)
    by_tags = {r["tags"] for r in rows}
    assert {"second", "\ufffd\ufffd", "t", "été"} <= by_tags
    assert any(len(r["keys"]) == 300 for r in rows)
    # the records crossed segment ends (small segments)
    size = small_segments().mapped_file_size_commit_log
    assert len({r["commitLogOffset"] // size for r in rows}) > 1
    # refreader (strict UTF-8 only) agrees on every record it can read
    utf8 = [a for a in CRAFTED if _valid(a)]
    root = _crafted_store(tmp_path / "u", utf8)
    rows, _ = _all_rows(root)
    ref = {r["physicalOffset"]: r for r in refreader.read_commitlog(root / "commitlog")}
    assert len(rows) == len(ref) == REPEAT * len(utf8)
    for r in rows:
        assert dict(r["properties"]) == ref[r["commitLogOffset"]]["properties"]


def test_without_the_kernel_the_rows_are_the_same(tmp_path):
    """RMQFS_NO_KERNEL=1: every record through the per-record decoder, the same batch."""
    root = _crafted_store(tmp_path / "s")
    code = (
        "import sys, numpy as np\n"
        "from engine.read import columnar, kernel\n"
        "assert kernel.load() is None\n"
        "f = columnar.StoreFiles(sys.argv[1])\n"
        "for q in f.queue_ids('C'):\n"
        "    u = f.units('C', q, 0, f.max_offset('C', q))\n"
        "    b = columnar.decode_units(f.commitlog, 'C', q, u, np.arange(len(u)))\n"
        "    sys.stdout.buffer.write(b'%d %d\\n' % (q, hash(str(b.to_pylist()))))\n"
    )
    env = dict(os.environ, RMQFS_NO_KERNEL="1", PYTHONPATH=REPO, PYTHONHASHSEED="0")
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)], env=env, capture_output=True, check=True
    )
    code_with = code.replace("assert kernel.load() is None", "assert kernel.load()")
    env.pop("RMQFS_NO_KERNEL")
    want = subprocess.run(
        [sys.executable, "-c", code_with, str(root)], env=env, capture_output=True, check=True
    )
    assert out.stdout == want.stdout and len(out.stdout.splitlines()) == 2


def test_a_cache_directory_others_can_write_is_not_used(tmp_path):
    cache = tmp_path / "rmqfs"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    code = "from engine.read import kernel\nprint(kernel._cache_dir())\n"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=REPO)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, check=True, text=True
    )
    assert out.stdout.strip() == "None"


# -- JSON lines ------------------------------------------------------------------------------

_TEXT = st.text(
    alphabet=st.sampled_from(
        ['a', 'Z', ' ', '"', "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f",
         "é", "€", "\u2028", "😀", "/", "<"]
    ),
    max_size=30,
)  # fmt: skip
_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


@st.composite
def _rows(draw):
    import pyarrow as pa

    from rmqfs.engine.read.schema import arrow_schema

    schema = arrow_schema()
    row = {}
    for name in schema.names:
        t = schema.field(name).type
        if pa.types.is_int64(t):
            row[name] = draw(_INT64)
        elif pa.types.is_integer(t):
            row[name] = draw(_INT32)
        elif pa.types.is_binary(t):
            row[name] = draw(st.binary(max_size=70) | _TEXT.map(str.encode))
        elif pa.types.is_map(t):
            # decoded maps have each name once (a repeated name is merged by the decoder)
            row[name] = list(draw(st.dictionaries(_TEXT, _TEXT, max_size=4)).items())
        elif pa.types.is_list(t):
            row[name] = draw(st.lists(_TEXT, max_size=4))
        else:
            row[name] = draw(st.none() | _TEXT) if name == "tags" else draw(_TEXT)
    return row


@settings(max_examples=150, deadline=None)
@given(st.lists(_rows(), min_size=1, max_size=6), st.integers(min_value=0, max_value=3))
def test_json_lines_are_json_dumps(k, rows, skip):
    """Kernel.json_lines equals jsonline's per-line json.dumps build on odd values: escapes,
    non-ASCII, bodies that are not UTF-8 (base64 and bodyEncoding), nulls, int64 extremes,
    and a sliced batch (Arrow offsets that do not start at 0)."""
    import pyarrow as pa

    from rmqfs.engine.read import jsonline
    from rmqfs.engine.read.schema import arrow_schema

    batch = pa.RecordBatch.from_pylist(rows, schema=arrow_schema())
    batch = batch.slice(min(skip, len(rows) - 1))
    data, ends = jsonline.build_lines(batch)
    want = []
    for row in batch.select(list(jsonline.LINE_FIELDS)).to_pylist():
        body = row.pop("body")
        row["properties"] = dict(row["properties"])
        want.append(jsonline._line(row, body))
    assert bytes(data) == b"".join(want)
    assert ends.tolist() == np.cumsum([len(w) for w in want]).tolist()
