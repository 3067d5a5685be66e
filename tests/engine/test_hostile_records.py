"""Issue 26 items 1, 3 and 4: records that lie about their length, units that point at other
records, and compressed bodies that inflate without a bound, on every engine read path (the
per-record decoder, the columnar decoder and its C kernel, getMessage, recovery, the CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import run_rmqfs
from rmqfs.engine.errors import CorruptRecordError
from rmqfs.engine.format.consumequeue import UNIT
from rmqfs.engine.format.message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    COMPRESSION_ZSTD,
    INT32,
    MAX_INFLATED_BODY,
    PROPERTY_BODY_COMPRESSION,
    SYSFLAG_POSITION,
    decode_record,
    inflate_body,
)
from rmqfs.engine.read.columnar import StoreFiles, decode_units, decode_units_per_record
from rmqfs.engine.store import MessageStore
from stores import produce, small


def _cl_path(root, off, cfg=None):
    fs = (cfg or small()).mapped_file_size_commit_log
    return os.path.join(str(root), "commitlog", f"{off - off % fs:020d}"), off % fs


def _unit(root, topic, q, qoff):
    with MessageStore(str(root), small(), read_only=True) as s:
        return s.consume_queue(topic, q).unit(qoff)[:2]


def _write_unit(root, topic, q, qoff, off, size, tags=0):
    cqs = small().mapped_file_size_consume_queue
    at = qoff * 20
    path = os.path.join(str(root), "consumequeue", topic, str(q), f"{at - at % cqs:020d}")
    with open(path, "r+b") as f:
        f.seek(at % cqs)
        f.write(UNIT.pack(off, size, tags))


def short_ipv6_store(root):
    """T/0 with 5 messages; the third one's record says IPv6 born host (+12 bytes of fixed
    part) but TOTALSIZE 91, and its unit agrees (size 91): the flags ask for 103 bytes at
    least. The store was shut down cleanly, so recovery starts at the last unit. Returns
    the bad record's CommitLog offset."""
    produce(root, 5, queue_id=0)
    off, _size = _unit(root, "T", 0, 2)
    path, p = _cl_path(root, off)
    with open(path, "r+b") as f:
        f.seek(p)
        rec = bytearray(f.read(SYSFLAG_POSITION + 4))
        INT32.pack_into(rec, 0, 91)
        sf = INT32.unpack_from(rec, SYSFLAG_POSITION)[0]
        INT32.pack_into(rec, SYSFLAG_POSITION, sf | BORNHOST_V6_FLAG)
        f.seek(p)
        f.write(rec)
    _write_unit(root, "T", 0, 2, off, 91)
    return off


# -- item 3: a record shorter than its flags say ---------------------------------------------


def test_decode_record_refuses_a_total_shorter_than_the_flags_need():
    from rmqfs.engine.format.message import encode_message

    enc = encode_message(
        "T", b"", queue_id=0, properties={}, born_timestamp=1,
        born_host=(b"\1\2\3\4", 5), store_host=(b"\1\2\3\4", 6),
    )  # fmt: skip
    rec = bytearray(enc.data)
    assert len(rec) == 92  # 91 + the topic
    INT32.pack_into(rec, 0, 91)
    INT32.pack_into(rec, SYSFLAG_POSITION, BORNHOST_V6_FLAG)
    for n in range(88, 92):  # exactly the record's bytes, or a few more
        with pytest.raises(CorruptRecordError, match="shorter than"):
            decode_record(memoryview(bytes(rec[:91]) + bytes(n - 91 if n > 91 else 0)), 0)


def test_a_short_record_is_damage_on_every_read_path(tmp_path):
    root = tmp_path / "store"
    off = short_ipv6_store(root)
    with MessageStore(str(root), small(), read_only=True) as s:  # recovery: no struct.error
        assert s.get_message("T", 0, 3).body == b"m3"
        with pytest.raises(CorruptRecordError, match="shorter than"):
            s.get_message("T", 0, 2)
        assert ("T", 0) in s.damaged
        with pytest.raises(CorruptRecordError):
            list(s.iter_queue("T", 0))
        res = s.get_messages("g", "T", 0, 0)
        assert [r.body for r in res.messages] == [b"m0", b"m1"]
    with MessageStore(str(root), small(), read_only=True) as s:  # what print-msg reads
        with pytest.raises(CorruptRecordError, match="shorter than"):
            s.read_record(off, 91, topic="T", queue_id=0, queue_offset=2)
        assert "unit 2" in s.damaged[("T", 0)]
    sf = StoreFiles(str(root))
    units = sf.units("T", 0, 0, 5)
    for dec in (decode_units, decode_units_per_record):  # the kernel and the Python decoder
        with pytest.raises(CorruptRecordError) as info:
            dec(sf.commitlog, "T", 0, units, np.arange(5))
        assert info.value.offset == off
    sf.close()
    for args in (("print-msg", "-t", "T"), ("query-msg", "-t", "T", "-q", "0", "-o", "2")):
        r = run_rmqfs(*args, str(root), check=False)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "shorter than" in r.stderr


def test_the_kernel_leaves_a_short_record_to_the_per_record_decoder(tmp_path):
    from rmqfs.engine.read import kernel

    k = kernel.load()
    if k is None:
        pytest.skip("no compiled kernel")
    root = tmp_path / "store"
    off = short_ipv6_store(root)
    sf = StoreFiles(str(root))
    try:
        path, p = _cl_path(root, off)
        buf = np.fromfile(path, dtype=np.uint8)
        from rmqfs.engine.read.columnar import _LAYOUT

        d = k.decode(buf, [p], [91], [off], _LAYOUT, [], kernel.WANT_BODY, 0, b"T", [2])
        assert d.bad < 0 and d.rows == 0 and not d.fast[0]  # no row: left to decode_record
    finally:
        sf.close()


# -- item 4: units that point at other records -----------------------------------------------


def test_swapped_units_are_damage_not_the_other_message(tmp_path):
    root = tmp_path / "store"
    produce(root, 100, queue_id=0)  # 16 units a file: units 10 and 11 in the oldest of 7
    u10, u11 = _unit(root, "T", 0, 10), _unit(root, "T", 0, 11)
    _write_unit(root, "T", 0, 10, *u11)
    _write_unit(root, "T", 0, 11, *u10)
    with MessageStore(str(root), small(), read_only=True) as s:
        assert s.get_message("T", 0, 9).body == b"m9"
        for read in (
            lambda: s.get_message("T", 0, 10),
            lambda: list(s.iter_queue("T", 0)),
            lambda: s.get_messages("g", "T", 0, 10),
        ):
            with pytest.raises(CorruptRecordError, match="QUEUEOFFSET 11 "):
                read()
        res = s.get_messages("g", "T", 0, 0)
        assert [r.body for r in res.messages] == [b"m%d" % i for i in range(10)]
        assert "unit 10" in s.damaged[("T", 0)]
    r = run_rmqfs("print-msg", "-t", "T", "--json", str(root), check=False)
    assert r.returncode == 1 and "QUEUEOFFSET 11 " in r.stderr and "Traceback" not in r.stderr
    assert len(r.stdout.splitlines()) == 10  # offsets 0-9, then the damage
    sf = StoreFiles(str(root))
    units = sf.units("T", 0, 0, 100)
    for dec in (decode_units, decode_units_per_record):
        with pytest.raises(CorruptRecordError, match="QUEUEOFFSET 11 ") as info:
            dec(sf.commitlog, "T", 0, units, np.arange(100))
        assert info.value.offset == u11[0]
        # the good units before them still read
        assert dec(sf.commitlog, "T", 0, units[:10], np.arange(10)).num_rows == 10
    sf.close()


def test_units_pointing_at_one_record_do_not_multiply_it(tmp_path):
    root = tmp_path / "store"
    produce(root, 1000, queue_id=0)  # 16 units a file: 101-299 are not in the newest three
    target = _unit(root, "T", 0, 100)
    for q in range(101, 300):
        _write_unit(root, "T", 0, q, *target)
    sf = StoreFiles(str(root))
    units = sf.units("T", 0, 0, 1000)
    for dec in (decode_units, decode_units_per_record):
        with pytest.raises(CorruptRecordError, match="QUEUEOFFSET 100 "):
            dec(sf.commitlog, "T", 0, units, np.arange(1000))
    assert decode_units(sf.commitlog, "T", 0, units[:101], np.arange(101)).num_rows == 101
    sf.close()
    with MessageStore(str(root), small(), read_only=True) as s:
        got = []
        with pytest.raises(CorruptRecordError):
            for _, rec in s.iter_queue("T", 0):
                got.append(rec.body)
        assert len(got) == 101 and ("T", 0) in s.damaged


# -- item 1: bodies that inflate past the limit ----------------------------------------------


def _zstd_bomb(n: int) -> bytes:
    import zstandard

    c = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(1 << 20)
    out = [c.compress(chunk) for _ in range(n >> 20)]
    out.append(c.flush())
    return b"".join(out)


def _bombs(n: int) -> dict[str, tuple[int, bytes]]:
    import zlib

    import lz4.frame

    z = zlib.compressobj(9)
    zl = b"".join(z.compress(bytes(1 << 20)) for _ in range(n >> 20)) + z.flush()
    lz = lz4.frame.LZ4FrameCompressor()
    l4 = lz.begin() + b"".join(lz.compress(bytes(1 << 20)) for _ in range(n >> 20)) + lz.flush()
    return {
        "zstd": (COMPRESSED_FLAG | COMPRESSION_ZSTD, _zstd_bomb(n)),
        "zlib": (COMPRESSED_FLAG, zl),
        "lz4": (COMPRESSED_FLAG | 0x100, l4),
    }


@pytest.mark.parametrize("codec", ["zstd", "zlib", "lz4"])
def test_a_body_over_the_limit_is_kept_as_stored(codec):
    sys_flag, bomb = _bombs(MAX_INFLATED_BODY + (1 << 20))[codec]
    body, left = inflate_body(bomb, sys_flag)
    assert left == codec and body == bomb
    small_one = _bombs(1 << 20)[codec]
    assert inflate_body(small_one[1], small_one[0]) == (bytes(1 << 20), None)


HOSTILE_READ = r"""
import json, sys
import numpy as np
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.read.jsonline import build_lines
from rmqfs.engine.store import MessageStore
root, path = sys.argv[1], sys.argv[2]
out = {}
if path == "engine":
    with MessageStore(root, read_only=True) as s:
        rec = s.get_message("T", 0, 1)
        from rmqfs.engine.read.jsonline import build_line
        line = json.loads(build_line(rec))
        out = {"len": len(line["body"]), "props": line["properties"]}
else:
    sf = StoreFiles(root)
    b = next(sf.read_batches("T", 0, 0, 2))
    lines, ends = build_lines(b)
    line = json.loads(bytes(lines)[int(ends[0]):int(ends[1])])
    out = {"len": len(line["body"]), "props": line["properties"]}
# VmHWM: this process's peak RSS (ru_maxrss keeps the parent's across fork and exec)
with open("/proc/self/status") as f:
    out["maxrss_kb"] = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
print(json.dumps(out))
"""


def bomb_store(root, inflated=256 << 20):
    """T/0: a plain message, then an 8 KB record whose zstd body inflates to ``inflated``
    bytes (put as a client may send it: pre-compressed, the flags set), then a plain one."""
    from rmqfs.engine.format.message import Message
    from stores import put_internal

    bomb = _zstd_bomb(inflated)
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        put_internal(s, [Message("T", b"before", queue_id=0)])
        put_internal(
            s,
            [
                Message(
                    "T", bomb, queue_id=0, compress=False,
                    sys_flag=COMPRESSED_FLAG | COMPRESSION_ZSTD,
                )
            ],
        )  # fmt: skip
        put_internal(s, [Message("T", b"after", queue_id=0)])
    return bomb


@pytest.mark.parametrize("path", ["engine", "columnar"])
def test_a_zstd_bomb_is_not_inflated_on_read(tmp_path, path):
    root = tmp_path / "store"
    bomb = bomb_store(root)
    assert len(bomb) < 16 * 1024
    r = subprocess.run(
        [sys.executable, "-c", HOSTILE_READ, str(root), path],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    print(f"{path}: peak RSS {got['maxrss_kb'] // 1024} MiB reading a 256 MiB zstd bomb")
    assert got["props"].get(PROPERTY_BODY_COMPRESSION) == "zstd"
    assert got["len"] < 4 * len(bomb)  # base64 of the stored bytes
    assert got["maxrss_kb"] < 200 << 10  # 200 MiB; the old code inflated 256 MiB (and more)
