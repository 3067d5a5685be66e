"""Decode benchmark (issue 16): CPU cost per message of the columnar decoder, per stage, and of
what is built on it (a ``view/`` Parquet part, ``messages.jsonl`` lines), and how it grows.

``python -m bench.decode [--sizes 1000000,5000000,20000000] [--quick] [--passes 3]``

For each size N (default 1M, 5M and 20M messages; ``--quick``: 200k and 1M):

1. a store of N messages, 1 topic (``BenchLog0``) x 8 queues, built as ``bench.spark`` builds
   its stores (``bench.stores.build_store``: loghub lines as bodies, a tag per log level, a
   unique key each, 256 MiB CommitLog segments) under ``bench-out/decode/store-<N>-1x8/`` and
   reused by later runs (a marker written last says it is complete). 20M messages are about
   6 GB of CommitLog and about 5 minutes to build (15 s per million messages); the bench
   refuses to build without room. Measuring takes about 11 µs of CPU per message (some 4
   minutes at 20M).
2. measured in a fresh process per size (``--child``), so that peak memory does not carry
   over from one size to the next; one process, one thread of decoding, figures in **CPU time**
   (``time.process_time``: user + system of the process), so a busy machine costs wall time
   and, less, these figures (caches and cores are shared: hence the load average). Every
   queue is decoded with ``engine.read.columnar.decode_units`` in batches of 16,384 units
   (read from the ConsumeQueue per batch, as ``StoreFiles.read_batches`` reads them), with
   ``StoreFiles(check_crc=True)`` (the default) and ``check_crc=False`` (the CRC's share), for
   all columns and for ``tags, body, storeTimestamp``: one untimed warm-up pass (it also
   brings the CommitLog into the page cache), then the best of ``--passes`` (3) timed passes,
   in µs per message.
3. **stages** of the all-columns decode: the decoder does every stage in one compiled pass
   over each record (``Kernel.decode``), so a stage's cost is measured as what asking for it
   adds: the columns of :data:`STAGES` are decoded cumulatively (numeric fields without the
   CRC, then with it, then the body, the properties split that ``tags``, ``keys`` and
   ``properties`` need, msgId, the host texts, ``topic``/``queue``), best of ``--passes``
   each, and each stage is the difference from the set before (the last set is all columns;
   the first is the header checks and the numeric fields, the Arrow assembly included).
4. **part render**: queue 0's units cut into ``view/`` parts of ``VIEW_PART_MESSAGES``
   (100,000) as the mount cuts them, each written in-process by ``fusefs.render.render_part``
   (decode + Parquet, zstd) to a temporary file, timed whole; then the same units decoded as
   ``render_part`` decodes them (16,384-unit batches, ``part_schema``'s columns) without the
   writer: **Parquet encode** is the difference. Warm-up, then best of ``--passes``.
5. **JSON lines**: queue 0 decoded with ``LINE_COLUMNS["messages"]`` (not timed) and each batch
   rendered by ``fusefs.render.render_lines(batch, "messages")`` (timed): µs per message and MB
   of ``messages.jsonl`` per CPU-second.
6. **baseline, same run**: queue 0's messages written (not timed) to one local Parquet file as
   the mount writes its ``view/`` parts (zstd) and read back whole by ``pyarrow.parquet.read_table``
   on one thread, all columns and ``tags, body, storeTimestamp``: CPU µs per message, and the
   decode's figure over it (**decode / Parquet read**): what reading the store costs against the
   same columns already in Parquet on local disk, both from the page cache.
7. **memory**: the child's peak RSS (``VmHWM``, which counts the CommitLog pages mapped and
   touched: about the CommitLog's size, since ``StoreFiles`` keeps its maps) and its peak
   anonymous RSS (``RssAnon`` sampled after every batch of the warm-up passes; the decoder's
   own memory), and ``RssFile`` at the end.

The table lists each figure per size and, with two sizes or more, whether the cost per message
is flat (largest / smallest <= 1.15, or within 0.03 µs: a total linear in N), grows or falls
(the figure at the largest size over the one at the smallest is printed beside it), and
how the memory figures grow against N (``VmHWM`` grows with the CommitLog by construction; the
anonymous peak is the decoder's own and should not). Targets (issue 16, one
core): all columns <= 0.5 µs/msg; tags+body+storeTimestamp <= 0.3 µs/msg; part render
(decode + Parquet) <= 1.2 µs/msg. The load average (as ``uptime`` prints it) is printed before
and after, since the machine may be shared. Results go to stdout and
``bench-out/decode.json`` (``--quick``: ``decode-quick.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import child_env, loadavg, targets_line

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-out"  # --out: decode.json there, the stores under its decode/
TOPIC = "BenchLog0"  # bench.stores.build_store's first topic name
QUEUES = 8
BATCH = 16384
#: decoded column sets: label -> columns (None: all of them)
COLUMN_SETS: dict[str, tuple[str, ...] | None] = {
    "all columns": None,
    "tags+body+storeTimestamp": ("tags", "body", "storeTimestamp"),
}
#: issue 16's targets, CPU µs per message on one core
TARGETS = {
    "all columns": 0.5,
    "tags+body+storeTimestamp": 0.3,
    "part render (decode + Parquet)": 1.2,
}
#: largest / smallest µs/msg across sizes still called flat (or within FLAT_US of each other:
#: the small stages move by a few hundredths between passes on a shared machine)
FLAT, FLAT_US = 1.15, 0.03
BYTES_PER_MESSAGE = 350  # store bytes per loghub message (CommitLog ~280, ConsumeQueue, IndexFile)


def store_path(n: int, base: Path) -> Path:
    return base / f"store-{n}-1x{QUEUES}"


def ensure_store(n: int, base: Path) -> tuple[Path, float]:
    """The store of ``n`` messages under ``base`` (built unless a complete one is there):
    ``(path, seconds to build it, 0 if reused)``."""
    from bench.stores import build_store

    store = store_path(n, base)
    if not (store / ".bench-complete").exists():
        base.mkdir(parents=True, exist_ok=True)
        need = n * BYTES_PER_MESSAGE
        free = shutil.disk_usage(base).free
        if free < need * 1.2:
            raise SystemExit(
                f"building {n:,} messages needs about {need / 1e9:.1f} GB; {free / 1e9:.1f} GB "
                f"free under {base}"
            )
        print(f"building {store} ({n:,} messages, ~{need / 1e9:.1f} GB) ...", flush=True)
    return store, build_store(store, n, 1, QUEUES)


# ---------------------------------------------------------------------------------------------
# Measuring (one process per size)


def _status() -> dict[str, float]:
    """VmHWM, VmRSS, RssAnon, RssFile of this process in MB (ru_maxrss where there is no /proc)."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0]) / 1024
    except OSError:
        out["VmHWM"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _queue_ends(files) -> dict[int, int]:
    return {q: files.max_offset(TOPIC, q) for q in files.queue_ids(TOPIC)}


def decode_pass(files, ends: dict[int, int], columns, sample=None) -> tuple[float, float, int]:
    """Decode every queue in batches of :data:`BATCH`: ``(CPU s, wall s, rows)``."""
    import numpy as np

    from rmqfs.engine.read.columnar import decode_units

    rows = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for q, hi in ends.items():
        for pos in range(0, hi, BATCH):
            units = files.units(TOPIC, q, pos, min(hi, pos + BATCH))
            qoffs = np.arange(pos, pos + len(units), dtype=np.int64)
            rows += decode_units(
                files.commitlog, TOPIC, q, units, qoffs, columns=columns, check_crc=files.check_crc
            ).num_rows
            if sample is not None:
                sample()
    return time.process_time() - c0, time.perf_counter() - w0, rows


#: The numeric columns (fixed fields of the record header).
NUMERIC = (
    "queueId", "queueOffset", "commitLogOffset", "storeSize", "bornTimestamp", "storeTimestamp",
    "sysFlag", "flag", "bodyCRC", "reconsumeTimes", "preparedTransactionOffset",
)  # fmt: skip
#: ``(stage, columns added, body CRC checked)``: decoded cumulatively, each stage costs what it
#: adds to the set before it; together they are every column with the CRC.
STAGES: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("header checks + numeric fields", NUMERIC, False),
    ("body CRC", (), True),
    ("body", ("body",), True),
    ("properties split (tags, keys, properties)", ("tags", "keys", "properties"), True),
    ("msgId", ("msgId",), True),
    ("hosts (bornHost, storeHost)", ("bornHost", "storeHost"), True),
    ("topic, queue", ("topic", "queue"), True),
)


def stage_columns() -> list[tuple[str, tuple[str, ...], bool]]:
    """``(stage, cumulative columns, CRC)`` of :data:`STAGES`; the last is every column."""
    from rmqfs.engine.read.schema import COLUMN_NAMES

    out, cols = [], ()
    for label, add, crc in STAGES:
        cols = (*cols, *add)
        out.append((label, cols, crc))
    assert set(cols) == set(COLUMN_NAMES), "STAGES must add up to every column"
    return out


def _best(fn, passes: int) -> tuple[float, list[float]]:
    fn()  # warm-up
    runs = [fn() for _ in range(passes)]
    return min(runs), runs


def part_bench(root: Path, passes: int, work: Path) -> dict:
    """``render_part`` over queue 0 in ``view/``-sized parts vs the decode of the same units."""
    from rmqfs.engine.read.columnar import StoreFiles, decode_units, drop_blank_units
    from rmqfs.engine.read.schema import part_schema
    from rmqfs.fusefs.base import VIEW_PART_MESSAGES
    from rmqfs.fusefs.render import PART_BATCH_ROWS, RenderWorker, render_part

    files = StoreFiles(str(root))
    try:
        hi = files.max_offset(TOPIC, 0)
        units = files.units(TOPIC, 0, 0, hi)
    finally:
        files.close()
    commitlog_dir = str(root / "commitlog")
    parts = [(a, units[a : a + VIEW_PART_MESSAGES]) for a in range(0, hi, VIEW_PART_MESSAGES)]
    names = tuple(part_schema().names)
    out = work / "part.parquet"
    sizes: list[int] = []

    def render() -> float:
        sizes.clear()
        c0 = time.process_time()
        for first, u in parts:
            size, _, rows = render_part(commitlog_dir, TOPIC, 0, u, first, str(out))
            assert rows == len(u)
            sizes.append(size)
            out.unlink()
        return time.process_time() - c0

    def decode() -> float:  # render_part's loop without the writer
        import numpy as np

        segs = RenderWorker.current().commitlog(commitlog_dir)
        c0 = time.process_time()
        for first, part in parts:
            qoffs = np.arange(first, first + len(part), dtype=np.int64)
            for a in range(0, len(part), PART_BATCH_ROWS):
                u, q = part[a : a + PART_BATCH_ROWS], qoffs[a : a + PART_BATCH_ROWS]
                u, q, _ = drop_blank_units(u, q)
                decode_units(segs, TOPIC, 0, u, q, columns=names)
        return time.process_time() - c0

    render()  # first use: the worker's CommitLog maps
    best_r, runs_r = _best(render, passes)
    best_d, runs_d = _best(decode, passes)
    return {
        "messages": hi,
        "parts": len(parts),
        "parquet_bytes": sum(sizes),
        "render_us": best_r / hi * 1e6,
        "decode_us": best_d / hi * 1e6,
        "parquet_us": (best_r - best_d) / hi * 1e6,
        "render_runs_s": runs_r,
        "decode_runs_s": runs_d,
    }


def parquet_bench(root: Path, passes: int, work: Path) -> dict:
    """The same-run baseline: queue 0's messages, decoded (not timed) and written to one local
    Parquet file as the mount writes its ``view/`` parts (``PART_COMPRESSION``, row groups of
    ``PART_ROW_GROUP_ROWS``), then read back whole with ``pyarrow.parquet.read_table`` on one
    thread (``use_threads=False``), every column and each of :data:`COLUMN_SETS`' column sets: CPU µs
    per message, best of ``passes`` after a warm-up. What a Spark job pays for the same columns
    when they are already Parquet on local disk (the file is in the page cache, as the
    CommitLog is for the decode passes)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmqfs.engine.read.columnar import StoreFiles, decode_units
    from rmqfs.fusefs.render import PART_COMPRESSION, PART_ROW_GROUP_ROWS

    files = StoreFiles(str(root))
    try:
        hi = files.max_offset(TOPIC, 0)
        batches = []
        for pos in range(0, hi, BATCH):
            units = files.units(TOPIC, 0, pos, min(hi, pos + BATCH))
            qoffs = np.arange(pos, pos + len(units), dtype=np.int64)
            batches.append(decode_units(files.commitlog, TOPIC, 0, units, qoffs))
    finally:
        files.close()
    path = work / "baseline.parquet"
    pq.write_table(
        pa.Table.from_batches(batches),
        path,
        compression=PART_COMPRESSION,
        row_group_size=PART_ROW_GROUP_ROWS,
    )
    del batches
    out: dict = {"messages": hi, "parquet_bytes": path.stat().st_size, "us": {}}
    for label, cols in COLUMN_SETS.items():

        def read(cols=cols) -> float:
            c0 = time.process_time()
            t = pq.read_table(path, columns=list(cols) if cols else None, use_threads=False)
            assert t.num_rows == hi
            return time.process_time() - c0

        best, _ = _best(read, passes)
        out["us"][label] = best / hi * 1e6
    path.unlink()
    return out


def lines_bench(root: Path, passes: int) -> dict:
    """``render_lines(batch, "messages")`` over queue 0 (the decode is not timed). The records
    are read through the render worker's CommitLog maps (``render_view_chunk``'s), the ones
    :func:`part_bench` left, so the CommitLog is not mapped twice in this process's RSS."""
    import numpy as np

    from rmqfs.engine.read.columnar import StoreFiles, decode_units
    from rmqfs.fusefs.render import LINE_COLUMNS, RenderWorker, render_lines

    files = StoreFiles(str(root))
    cols = tuple(LINE_COLUMNS["messages"])
    hi = files.max_offset(TOPIC, 0)
    segs = RenderWorker.current().commitlog(str(root / "commitlog"))
    total = [0]

    def run() -> float:
        cpu = 0.0
        total[0] = 0
        for pos in range(0, hi, BATCH):
            units = files.units(TOPIC, 0, pos, min(hi, pos + BATCH))
            qoffs = np.arange(pos, pos + len(units), dtype=np.int64)
            batch = decode_units(segs, TOPIC, 0, units, qoffs, columns=cols)
            c0 = time.process_time()
            data, _, _ = render_lines(batch, "messages")
            cpu += time.process_time() - c0
            total[0] += len(data)
        return cpu

    try:
        best, runs = _best(run, passes)
    finally:
        files.close()
    return {
        "messages": hi,
        "bytes": total[0],
        "us": best / hi * 1e6,
        "mb_per_cpu_s": total[0] / best / 1e6,
        "runs_s": runs,
    }


def measure(root: Path, n: int, passes: int = 3, work: Path | None = None) -> dict:
    """Every figure of one store of ``n`` messages (see the module's docstring), in this process.

    Returns a dict of CPU µs per message (``decode``: ``{columns label: {"crc": ..,
    "no_crc": ..}}``, ``stages``, ``part``, ``lines``) and memory in MB (``memory``)."""
    from rmqfs.engine.read.columnar import StoreFiles

    res: dict = {"messages": n, "passes": passes, "load_before": os.getloadavg()}
    anon = [0.0]

    def sample() -> None:
        anon[0] = max(anon[0], _status().get("RssAnon", 0.0))

    decode: dict = {}
    runs: dict = {}
    cumulative: dict = {}
    for check in (True, False):
        files = StoreFiles(str(root), check_crc=check)
        try:
            ends = _queue_ends(files)
            assert sum(ends.values()) == n, (sum(ends.values()), n)
            for label, cols in COLUMN_SETS.items():
                cpu, _, rows = decode_pass(files, ends, cols, sample)  # warm-up, sampled
                assert rows == n, (label, rows, n)
                times = []
                for _ in range(passes):
                    cpu, wall, rows = decode_pass(files, ends, cols)
                    assert rows == n
                    times.append((cpu, wall))
                key = "crc" if check else "no_crc"
                decode.setdefault(label, {})[key] = min(t[0] for t in times) / n * 1e6
                runs[f"{label}, {key}"] = [[round(c, 4), round(w, 4)] for c, w in times]
            for label, cols, crc in stage_columns():
                if crc == check:
                    best = min(decode_pass(files, ends, cols)[0] for _ in range(passes))
                    cumulative[label] = best / n * 1e6
        finally:
            files.close()
    res["decode"] = decode
    res["decode_runs_cpu_wall_s"] = runs
    stages, before = {}, 0.0
    for label, _, _ in stage_columns():
        stages[label] = cumulative[label] - before
        before = cumulative[label]
    res["stages"] = stages
    res["stages_total_us"] = before
    mem: dict = {"after_decode": _status()}
    tmp = Path(tempfile.mkdtemp(prefix="parts-", dir=work or root.parent))
    try:
        res["part"] = part_bench(root, passes, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["lines"] = lines_bench(root, passes)
    mem["end"] = _status()
    mem["peak_anon_decode"] = anon[0]
    mem["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res["memory"] = mem
    # last: its table of queue 0 would count in the peaks above
    tmp = Path(tempfile.mkdtemp(prefix="baseline-", dir=work or root.parent))
    try:
        res["parquet"] = parquet_bench(root, passes, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_after"] = os.getloadavg()
    return res


def _child(root: Path, n: int, passes: int, out: Path) -> int:
    res = measure(root, n, passes)
    out.write_text(json.dumps(res))
    return 0


def run_size(n: int, passes: int, base: Path) -> dict:
    """Build (or reuse) the store of ``n`` messages under ``base`` and measure it in a fresh
    process."""
    from bench.stores import commitlog_bytes

    store, build_s = ensure_store(n, base)
    with tempfile.NamedTemporaryFile(suffix=".json", dir=base, delete=False) as f:
        out = Path(f.name)
    try:
        subprocess.run(
            [sys.executable, "-m", "bench.decode", "--child", str(store), "--sizes", str(n),
             "--passes", str(passes), "--child-out", str(out)],
            check=True,
            cwd=REPO,
            env=child_env(),
        )  # fmt: skip
        res = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    res["build_s"] = round(build_s, 1)
    res["commitlog_bytes"] = commitlog_bytes(store)
    res["store"] = str(store)
    return res


# ---------------------------------------------------------------------------------------------
# Reporting


def rows_of(res: dict) -> list[tuple[str, float | None, str, str]]:
    """``(label, value, target, unit)`` rows of one size's results, in the table's order;
    ``unit`` is ``"us"`` (CPU µs per message), ``"x"`` (a ratio), ``"MB"`` (memory), ``"MB/s"``
    or ``""`` (a heading)."""
    d, p, li, m = res["decode"], res["part"], res["lines"], res["memory"]
    rows: list[tuple[str, float | None, str, str]] = []
    for label in COLUMN_SETS:
        t = TARGETS.get(label)
        rows.append((f"decode, {label}", d[label]["crc"], f"<= {t}" if t else "", "us"))
        rows.append(("  without CRC (check_crc=False)", d[label]["no_crc"], "", "us"))
        if "parquet" in res:  # (results written before the baseline was measured lack it)
            base = res["parquet"]["us"][label]
            rows.append(("  baseline: local Parquet read, same columns", base, "", "us"))
            rows.append(("  decode / Parquet read (ratio)", d[label]["crc"] / base, "", "x"))
    rows.append(("all columns, by stage (what each adds):", None, "", ""))
    for label, v in res["stages"].items():
        rows.append((f"  {label}", v, "", "us"))
    rows.append(("  total (the last cumulative set)", res["stages_total_us"], "", "us"))
    t = TARGETS["part render (decode + Parquet)"]
    rows.append(("part render (decode + Parquet)", p["render_us"], f"<= {t}", "us"))
    rows.append(("  decode of the part's units", p["decode_us"], "", "us"))
    rows.append(("  Parquet encode (render - decode)", p["parquet_us"], "", "us"))
    rows.append(("JSON lines (render_lines)", li["us"], "", "us"))
    rows.append(("  messages.jsonl MB per CPU-second", li["mb_per_cpu_s"], "", "MB/s"))
    rows.append(("peak RSS (VmHWM), MB", m["end"].get("VmHWM"), "", "MB"))
    rows.append(("  after the decode passes", m["after_decode"].get("VmHWM"), "", "MB"))
    rows.append(("  CommitLog pages mapped (RssFile)", m["end"].get("RssFile"), "", "MB"))
    rows.append(("peak anonymous RSS, decoding, MB", m["peak_anon_decode"] or None, "", "MB"))
    if "commitlog_bytes" in res:
        rows.append(("CommitLog, MB", res["commitlog_bytes"] / 1e6, "", "MB"))
    return rows


def print_table(results: list[dict]) -> None:
    """One column per size (CPU µs per message unless the row says otherwise), the target and,
    with two sizes or more, whether the cost per message is flat across them."""
    sizes = [r["messages"] for r in results]
    table = [rows_of(r) for r in results]
    width = max(len(row[0]) for row in table[0])
    head = f"{'CPU µs/msg, one core':{width}}" + "".join(f" {n:>11,}" for n in sizes)
    print(head + f" {'target':>8}" + ("  across sizes" if len(sizes) > 1 else ""))
    growing = []
    for i, (label, _, target, unit) in enumerate(table[0]):
        vals = [t[i][1] for t in table]
        line = f"{label:{width}}"
        if not unit:
            print(line)
            continue
        fmt = "{:>11.3f}" if unit == "us" else "{:>11.2f}" if unit == "x" else "{:>11,.0f}"
        line += "".join(" " + ("{:>11}".format("-") if v is None else fmt.format(v)) for v in vals)
        line += f" {target:>8}"
        nums = [v for v in vals if v is not None and v > 0]
        if len(sizes) > 1 and len(nums) == len(vals):
            last = nums[-1] / nums[0]
            if unit == "us":
                flat = max(nums) / min(nums) <= FLAT or max(nums) - min(nums) <= FLAT_US
                word = "flat" if flat else "GROWS" if last > 1 else "falls"
                line += f"  {word} ({last:.2f}x)"
                if word == "GROWS":
                    growing.append(label.strip())
            elif unit == "MB":
                line += f"  {last:.2f}x for {sizes[-1] / sizes[0]:.0f}x messages"
        print(line)
    if len(sizes) > 1:
        span = f"{sizes[0]:,} to {sizes[-1]:,} messages"
        if growing:
            print(f"\ncost per message GROWS from {span} in: {', '.join(growing)}")
        else:
            print(f"\ncost per message is flat from {span} (total time linear in N)")
    last = results[-1]
    got = {
        **{label: last["decode"][label]["crc"] for label in COLUMN_SETS},
        "part render (decode + Parquet)": last["part"]["render_us"],
    }
    print(targets_line(sizes[-1], got, TARGETS, digits=3))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,5000000,20000000", help="messages per store")
    ap.add_argument("--quick", action="store_true", help="200k and 1M messages only (smoke run)")
    ap.add_argument("--passes", type=int, default=3, help="timed passes, the best is reported")
    ap.add_argument("--out", default=str(OUT), help="where decode.json and the stores go")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes = [200_000, 1_000_000] if args.quick else [int(x) for x in args.sizes.split(",")]
    if args.child:
        return _child(Path(args.child), sizes[0], args.passes, Path(args.child_out))

    from rmqfs.engine.read import kernel

    if kernel.load() is None:
        raise SystemExit("no compiled decoder (run `make`): this would measure the slow path")
    print(loadavg(), flush=True)
    results = []
    for n in sizes:
        print(f"{n:,} messages ...", flush=True)
        results.append(run_size(n, args.passes, Path(args.out) / "decode"))
    print()
    print_table(results)
    print(f"\n{loadavg()}")
    out = Path(args.out) / ("decode-quick.json" if args.quick else "decode.json")
    doc = {
        "command": "python -m bench.decode " + " ".join(argv or sys.argv[1:]),
        "machine": _machine(),
        "targets_us_per_msg": TARGETS,
        "sizes": results,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def _machine() -> dict:
    from bench.engine import machine

    return machine()


if __name__ == "__main__":
    sys.exit(main())
