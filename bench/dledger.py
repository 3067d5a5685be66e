"""DLedger read cost (issue 22, section 2.1): a DLedger store read at the same cost per message
as the plain store it was made from.

``python -m bench.dledger [--sizes 250000,1000000] [--passes 3]``

For each size (messages; default 250,000 and 1,000,000):

1. the plain store of ``bench.decode`` (that many messages, 1 topic x 8 queues, built or
   reused under ``bench-out/decode/``);
2. the same messages as a DLedger store (``dledger-n0/data``: each record after a 48-byte entry
   header at pos + 48, fillers at file ends, ``index/`` units, a checkpoint committing every
   entry; ConsumeQueue units moved to the new offsets; the IndexFiles are left out), built once
   under ``bench-out/dledger/`` by :func:`convert` (a marker written last says it is
   complete);
3. measured in this process, one thread, **CPU time** (``time.process_time``), best of
   ``--passes`` after a warm-up, plain and DLedger alternately:

   - **decode by ConsumeQueue**: every queue decoded with ``decode_units`` in batches of
     16,384 units, all columns, body CRC checked (what ``view/``, the data source and the
     JSON views do: ``bench.decode``'s pass);
   - **walk** (verify's, and recovery's where its batches stop): ``CommitLog.scan_raw`` over
     the whole log with body CRCs, entry headers checked for DLedger;
   - **recovery after a crash**: an open with the ``abort`` file left (read-only, the index
     off), which walks the whole log in compiled batches (the DLedger entry walk for DLedger)
     and compares every record's unit with its ConsumeQueue, CPU time of the process (the
     decode threads included) per record; and the same with the index on, which for the
     DLedger store (no IndexFiles) builds every record's entries (its UNIQ_KEY and key: 2 a
     message) into the in-memory index, and for the plain one (its IndexFiles built with it)
     builds none.

Prints µs per message for each and the DLedger / plain ratio per size, then how each figure
grows from the smallest size to the largest (flat: the cost linear in the messages), with the
load average (as ``uptime`` prints it) before and after; writes ``bench-out/dledger.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from array import array
from pathlib import Path

from bench import loadavg
from bench.decode import FLAT, FLAT_US, _queue_ends, decode_pass, ensure_store

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-out"


def convert(plain: Path, dst: Path) -> None:
    """Write the records of the plain store ``plain`` as the DLedger store ``dst``: what
    ``DLedgerCommitLog`` would have written for the same appends at term 0 (entries of the
    same file size; records' PHYSICALOFFSET and the ConsumeQueue units at entry pos + 48)."""
    import numpy as np

    from rmqfs.engine.format.commitlog import CommitLog
    from rmqfs.engine.format.consumequeue import UNIT_DTYPE_SPEC
    from rmqfs.engine.format.dledger import ENTRY_HEADER, ENTRY_MAGIC, HEADER_SIZE, INDEX_UNIT
    from rmqfs.engine.format.dledger import FILLER as FILLER_HEAD
    from rmqfs.engine.format.dledger import FILLER_MAGIC as FILL
    from rmqfs.engine.format.message import INT64, PHYSICAL_OFFSET_POSITION

    if (dst / ".bench-complete").exists():
        return
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for sub in ("consumequeue", "config"):
        shutil.copytree(plain / sub, tmp / sub)
    shutil.copy(plain / "checkpoint", tmp / "checkpoint")
    data = tmp / "dledger-n0" / "data"
    data.mkdir(parents=True)
    (tmp / "dledger-n0" / "index").mkdir()
    cl = CommitLog(str(plain / "commitlog"), read_only=True)
    fs = cl.file_size
    old, new = array("q"), array("q")
    seg, pos, index = 0, 0, 0
    # one data file open at a time, replaced at each file end (closed in finally)
    out = open(data / f"{seg:020d}", "wb")  # noqa: SIM115
    idx = open(  # noqa: SIM115
        tmp / "dledger-n0" / "index" / f"{0:020d}", "wb"
    )
    try:
        for buf, p, phys, total, *_ in cl.scan_raw(cl.min_offset, check_crc=False):
            size = HEADER_SIZE + total
            if pos + size + FILLER_HEAD.size > seg + fs:
                out.write(FILLER_HEAD.pack(FILL, seg + fs - pos))
                out.truncate(fs)
                out.close()
                seg += fs
                pos = seg
                out = open(data / f"{seg:020d}", "wb")  # noqa: SIM115
            rec = bytearray(buf[p : p + total])
            INT64.pack_into(rec, PHYSICAL_OFFSET_POSITION, pos + HEADER_SIZE)
            out.write(ENTRY_HEADER.pack(ENTRY_MAGIC, size, index, 0, pos, 0, 0, 0, total))
            out.write(rec)
            idx.write(INDEX_UNIT.pack(ENTRY_MAGIC, pos, size, index, 0))
            old.append(phys)
            new.append(pos + HEADER_SIZE)
            pos += size
            index += 1
        out.truncate(fs)
    finally:
        out.close()
        idx.close()
        cl.close()
    (tmp / "dledger-n0" / "checkpoint").write_text(
        f"committedIndex={index - 1}\nendIndex={index - 1}\n"
    )
    olds, news = np.frombuffer(old, np.int64), np.frombuffer(new, np.int64)
    for f in sorted((tmp / "consumequeue").glob("*/*/*")):
        units = np.fromfile(f, dtype=np.dtype(UNIT_DTYPE_SPEC))
        at = np.minimum(np.searchsorted(olds, units["off"]), len(olds) - 1)
        hit = olds[at] == units["off"]
        units["off"][hit] = news[at[hit]]
        units.tofile(f)
    (tmp / ".bench-complete").write_text("")
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)


def walk_pass(root: Path) -> tuple[float, int]:
    """``CommitLog.scan_raw`` over the whole log, CRCs checked: ``(CPU s, records)``."""
    from rmqfs.engine.format.commitlog import CommitLog
    from rmqfs.engine.format.dledger import commitlog_dir, open_dledger

    cl = CommitLog(commitlog_dir(str(root)), read_only=True, entries=open_dledger(str(root)))
    try:
        c0 = time.process_time()
        n = sum(1 for _ in cl.scan_raw(cl.min_offset, check_crc=True))
        assert cl.scan_error is None, cl.scan_error
        return time.process_time() - c0, n
    finally:
        cl.close()


def recover_pass(root: Path, index: bool = False) -> tuple[float, int, int]:
    """Recovery after a crash as an open makes it (an ``abort`` file left, read-only, the index
    off unless ``index``): the walk from the start of the data with CRCs, in compiled batches,
    every record's unit compared with its ConsumeQueue's, and with ``index`` the entries of the
    records the IndexFiles lack built (in memory): ``(CPU s, records scanned, index entries
    rebuilt)``."""
    from rmqfs.engine.store import MessageStore, StoreConfig

    abort = root / "abort"
    abort.write_text("")
    try:
        c0 = time.process_time()
        cfg = StoreConfig(message_index_enable=index)
        with MessageStore(str(root), cfg, read_only=True) as s:
            cpu = time.process_time() - c0
            r = s.recovery_report
        assert r is not None and r.torn_tail is None and not r.units_rebuilt, r
        return cpu, r.records_scanned, r.index_rebuilt
    finally:
        abort.unlink()


ROWS = (
    ("decode by ConsumeQueue (all cols)", "decode"),
    ("walk (scan_raw, CRC)", "walk"),
    ("recovery after a crash (batches)", "recover"),
    ("the same, the index on", "recover_index"),
)


def measure_size(n: int, passes: int, out: Path) -> dict:
    """Every figure of one size: the plain store of ``n`` messages (``bench.decode``'s, built or
    reused under ``out/decode``) and its DLedger copy (under ``out/dledger``), measured
    alternately, best of ``passes`` after a warm-up: CPU µs per message for each row of
    :data:`ROWS` and store, the index entries rebuilt and every run's figures."""
    from rmqfs.engine.read.columnar import StoreFiles

    plain, _ = ensure_store(n, out / "decode")
    dl = out / "dledger" / f"store-{n}-1x8"
    t0 = time.perf_counter()
    convert(plain, dl)
    print(f"DLedger copy ready in {time.perf_counter() - t0:.1f} s: {dl}", flush=True)
    stores = {"plain": plain, "dledger": dl}
    files = {k: StoreFiles(str(v)) for k, v in stores.items()}
    runs: dict[str, dict[str, list[float]]] = {key: {k: [] for k in stores} for _, key in ROWS}
    rebuilt: dict[str, int] = {}
    try:
        ends = {k: _queue_ends(f) for k, f in files.items()}
        assert sum(ends["plain"].values()) == sum(ends["dledger"].values()) == n
        for k in stores:  # warm-up: page cache, maps
            decode_pass(files[k], ends[k], None)
            walk_pass(stores[k])
        for _ in range(passes):
            for k in stores:
                cpu, _, rows = decode_pass(files[k], ends[k], None)
                runs["decode"][k].append(cpu / rows * 1e6)
                cpu, m = walk_pass(stores[k])
                runs["walk"][k].append(cpu / m * 1e6)
                cpu, m, _ = recover_pass(stores[k])
                assert m == n, (k, m)
                runs["recover"][k].append(cpu / m * 1e6)
                cpu, m, rebuilt[k] = recover_pass(stores[k], index=True)
                assert m == n, (k, m)
                runs["recover_index"][k].append(cpu / m * 1e6)
    finally:
        for f in files.values():
            f.close()
    res: dict = {"messages": n}
    for _, key in ROWS:
        res[f"{key}_us_per_msg"] = {k: min(v) for k, v in runs[key].items()}
    res["index_entries_rebuilt"] = rebuilt
    res["runs"] = runs
    return res


def print_size(res: dict, passes: int) -> None:
    """One size's table: µs per message, plain and DLedger, and their ratio."""
    rebuilt = res["index_entries_rebuilt"]
    print(f"\n{res['messages']:,} messages, CPU µs per message, best of {passes}:")
    print(f"{'':34} {'plain':>8} {'DLedger':>8} {'ratio':>6}")
    for label, key in ROWS:
        r = res[f"{key}_us_per_msg"]
        print(f"{label:34} {r['plain']:8.3f} {r['dledger']:8.3f} {r['dledger'] / r['plain']:6.2f}")
    print(
        f"index entries rebuilt with the index on: plain {rebuilt['plain']:,} (it has its "
        f"IndexFiles), DLedger {rebuilt['dledger']:,} (it has none)"
    )


def print_growth(results: list[dict]) -> None:
    """How each figure grows from the smallest size to the largest: the µs per message at the
    largest over the one at the smallest (flat within ``bench.decode``'s FLAT or FLAT_US: the
    total linear in N), and the DLedger / plain ratio at each end."""
    first, last = results[0], results[-1]
    n0, n1 = first["messages"], last["messages"]
    print(f"\nfrom {n0:,} to {n1:,} messages ({n1 / n0:.0f}x), µs per message largest / smallest:")
    for label, key in ROWS:
        words = []
        for k in ("plain", "dledger"):
            a, b = first[f"{key}_us_per_msg"][k], last[f"{key}_us_per_msg"][k]
            flat = max(a, b) / min(a, b) <= FLAT or abs(b - a) <= FLAT_US
            words.append(f"{k} {'flat' if flat else 'GROWS' if b > a else 'falls'} ({b / a:.2f}x)")
        r0, r1 = (r[f"{key}_us_per_msg"] for r in (first, last))
        ratios = f"ratio {r0['dledger'] / r0['plain']:.2f} -> {r1['dledger'] / r1['plain']:.2f}"
        print(f"{label:34} {', '.join(words)}; {ratios}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dledger", description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="250000,1000000", help="messages per store, comma-separated")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    print(loadavg(), flush=True)
    results = []
    for n in sizes:
        results.append(measure_size(n, args.passes, Path(args.out)))
        print_size(results[-1], args.passes)
    if len(results) > 1:
        print_growth(results)
    print(f"\n{loadavg()}")
    out = Path(args.out) / "dledger.json"
    out.write_text(json.dumps({"passes": args.passes, "sizes": results}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
