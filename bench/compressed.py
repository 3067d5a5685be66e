"""Compressed bodies benchmark: what the columnar decoder costs on records whose bodies a Java
client compressed (``compressMsgBodyOverHowmuch``, 4 KiB by default: every large message of a
real store), against inflating the same bodies alone, and how it grows.

``python -m bench.compressed [--sizes 20000,100000] [--body 8192] [--passes 3]``

For each size N: a store of N messages of ``--body`` bytes (loghub lines joined; the store
compresses each with zlib as the Java client does, ``compress_msg_body_over_howmuch`` 4096) in
a temporary directory; every column of its one queue decoded by
``engine.read.columnar.decode_units`` in batches of 16,384 units (as ``StoreFiles.read_batches``
reads them), CPU time (``time.process_time``), one warm-up pass then the best of ``--passes``.
In the same run, the baselines: ``zlib.decompress`` of the same stored bodies in a loop (the
inflation alone: the floor any decoder pays) and the per-record decoder
(``decode_units_per_record``, the path compressed records took before). Figures in µs per
message, and the ratios **decode / inflate alone** and **per-record / decode**; with two sizes
or more, whether the cost per message is flat (largest / smallest <= 1.15). The load average
(as ``uptime`` prints it) is printed before and after; writes ``bench-out/compressed.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from . import growth_line, loadavg, write_result
from .stores import LOGHUB, REPO

OUT = REPO / "bench-out"

BATCH = 16384


def _bodies(n: int, size: int) -> list[bytes]:
    lines = [ln for f in sorted(LOGHUB.glob("*_2k.log")) for ln in f.read_bytes().splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        raise SystemExit(f"no loghub logs under {LOGHUB} (set RMQFS_LOGHUB)")
    out, k = [], 0
    for _ in range(n):
        b = bytearray()
        while len(b) < size:
            b += lines[k % len(lines)] + b"\n"
            k += 1
        out.append(bytes(b[:size]))
    return out


def _build(root: Path, n: int, size: int) -> None:
    from rmqfs.engine.store import Message, MessageStore, StoreConfig

    cfg = StoreConfig(compress_msg_body_over_howmuch=4096)
    bodies = _bodies(n, size)
    with MessageStore(str(root), cfg) as s:
        s.create_topic("Z", 1)
        for i in range(0, n, 256):
            s.put_messages([Message("Z", b) for b in bodies[i : i + 256]])


def _best(fn, passes: int) -> float:
    fn()  # warm-up (the page cache too)
    best = float("inf")
    for _ in range(passes):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def measure(n: int, size: int, passes: int) -> dict:
    """One size: µs per message of the decode, the inflation alone and the per-record decoder."""
    from rmqfs.engine.format.message import COMPRESSED_FLAG, decode_record
    from rmqfs.engine.read import columnar

    work = Path(tempfile.mkdtemp(prefix="bench-compressed-"))
    try:
        _build(work / "s", n, size)
        files = columnar.StoreFiles(str(work / "s"))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    try:
        units = files.units("Z", 0, 0, n)
        qoffs = np.arange(n, dtype=np.int64)
        cl = files.commitlog

        def decode() -> None:
            for a in range(0, n, BATCH):
                columnar.decode_units(cl, "Z", 0, units[a : a + BATCH], qoffs[a : a + BATCH])

        k = min(n, 4096)
        # the first k bodies as stored (compressed), for the inflation alone
        spans = [cl.span(int(o), int(o) + int(z)) for o, z in units[["off", "size"]][:k]]
        recs = [decode_record(m, int(o) - base) for (m, base), o in zip(spans, units["off"])]
        assert all(r.sys_flag & COMPRESSED_FLAG for r in recs), "bodies not compressed"
        comp = [r.body for r in recs]
        inflate = _best(lambda: [zlib.decompress(c) for c in comp], passes) / k
        dec = _best(decode, passes) / n
        per_record = (
            _best(lambda: columnar.decode_units_per_record(cl, "Z", 0, units[:k], qoffs[:k]), 1) / k
        )
        return {
            "n": n,
            "decode_us": dec * 1e6,
            "inflate_us": inflate * 1e6,
            "per_record_us": per_record * 1e6,
        }
    finally:
        files.close()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.compressed", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--sizes", default="20000,100000", help="messages per store")
    ap.add_argument("--body", type=int, default=8192, help="bytes per body before compression")
    ap.add_argument("--passes", type=int, default=3, help="timed passes, the best is reported")
    ap.add_argument("--out", default=str(OUT), help="where compressed.json goes")
    args = ap.parse_args(argv)
    before = loadavg()
    print(before, flush=True)
    rows = [measure(int(s), args.body, args.passes) for s in args.sizes.split(",")]
    print(
        f"{'messages':>10} {'decode µs':>10} {'inflate µs':>11} {'per-record µs':>14} "
        f"{'decode/inflate':>15} {'per-record/decode':>18}"
    )
    for r in rows:
        r["decode_over_inflate"] = r["decode_us"] / r["inflate_us"]
        r["per_record_over_decode"] = r["per_record_us"] / r["decode_us"]
        print(
            f"{r['n']:>10,} {r['decode_us']:>10.2f} {r['inflate_us']:>11.2f} "
            f"{r['per_record_us']:>14.2f} {r['decode_over_inflate']:>15.2f} "
            f"{r['per_record_over_decode']:>18.1f}"
        )
    growth, line = growth_line(rows, "n", "decode_us", "decode cost per message", "messages")
    if line:
        print(line)
    after = loadavg()
    print(after)
    doc = {"body": args.body, "sizes": rows, "growth": growth, "load": [before, after]}
    write_result(args.out, "compressed.json", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
