"""Cold render of ``view/`` against the number of render workers (issue 16):
``python -m bench.render_scale [--messages 5000000] [--workers 1,2,4,8,16]``.

Builds (or reuses) the store ``bench.stores.build_store`` writes for ``bench.spark`` (8 topics x
8 queues of loghub lines), then renders every ``view/`` part of it (``VIEW_PART_MESSAGES``
queue offsets each, as the mount cuts them) with ``fusefs.render.render_part`` in a process
pool of W workers started as the mount starts them (``fusefs.views.worker_context``), for
each W (a fresh process each): wall time, the workers' CPU time (summed over the parts,
``time.process_time`` around each render), messages per second, the speedup over one worker
and the efficiency (speedup / W).
The pages of the CommitLog are cached by a first, untimed render. Needs no FUSE and no Spark,
so it runs on any machine with the engine's dependencies (a 16-core machine for the full
curve). Prints the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import child_env

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-out" / "render_scale"


def part_jobs(store: Path) -> list[tuple[str, int, object, int]]:
    """``(topic, queueId, units, first queue offset)`` of every ``view/`` part of ``store``."""
    from rmqfs.engine.read.columnar import StoreFiles
    from rmqfs.fusefs.base import VIEW_PART_MESSAGES as P
    from rmqfs.fusefs.viewtree import part_firsts, part_span

    files = StoreFiles(str(store))
    try:
        jobs = []
        for t in files.topics():
            for q in files.queue_ids(t):
                lo, hi = files.min_offset(t, q), files.max_offset(t, q)
                units = files.units(t, q, 0, hi)
                for a, b in (part_span(f, lo, hi, P) for f in part_firsts(lo, hi, P)):
                    jobs.append((t, q, units[a:b], a))
        return jobs
    finally:
        files.close()


def _ready() -> None:
    """A pool worker's start: what a render imports, then a short pause, so that ``workers``
    of these occupy every worker of the pool (each process started before the clock)."""
    import pyarrow  # noqa: F401

    from rmqfs.engine.read import columnar  # noqa: F401

    time.sleep(0.2)


def timed_render(*args) -> tuple[int, float]:
    """``fusefs.render.render_part(*args)`` in a worker: ``(rows, CPU seconds it took)``."""
    from rmqfs.fusefs.render import render_part

    c0 = time.process_time()
    rows = render_part(*args)[2]
    return rows, time.process_time() - c0


def render_all(store: Path, workers: int, work: Path) -> dict:
    """Render every part with a pool of ``workers`` processes started as the mount starts
    its own (``fusefs.views.worker_context``)."""
    from concurrent.futures import ProcessPoolExecutor

    from rmqfs.fusefs.views import start_worker_server, worker_context

    jobs = part_jobs(store)
    cl = str(store / "commitlog")
    start_worker_server()  # as the mount does when it starts: not timed
    with ProcessPoolExecutor(workers, mp_context=worker_context()) as pool:
        # the workers started (and their imports done) before the clock, as a mount's pool
        # is when it renders: wall_s and workers_cpu_s then time the same renders
        for f in [pool.submit(_ready) for _ in range(workers)]:
            f.result()
        t0 = time.monotonic()
        futs = [
            pool.submit(timed_render, cl, t, q, units, first, str(work / f"p{i}.parquet"))
            for i, (t, q, units, first) in enumerate(jobs)
        ]
        done = [f.result() for f in futs]
        wall = time.monotonic() - t0
    return {
        "workers": workers,
        "parts": len(jobs),
        "rows": sum(r for r, _ in done),
        "wall_s": wall,
        "workers_cpu_s": sum(c for _, c in done),
        "parquet_bytes": sum(p.stat().st_size for p in work.glob("*.parquet")),
    }


def run_child(store: Path, workers: int) -> dict:
    """:func:`render_all` in a fresh process (so RUSAGE_CHILDREN counts this pool alone)."""
    work = Path(tempfile.mkdtemp(prefix="parts-", dir=OUT))
    try:
        out = subprocess.run(
            [sys.executable, "-m", "bench.render_scale", "--child", str(store),
             "--workers", str(workers), "--child-work", str(work)],
            check=True, cwd=REPO, capture_output=True, text=True,
            env=child_env(),
        )  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.render_scale", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--messages", type=int, default=5_000_000)
    ap.add_argument("--workers", default="1,2,4,8,16", help="pool sizes to time")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(render_all(Path(args.child), int(args.workers), Path(args.child_work))))
        return 0

    from bench.engine import machine
    from bench.stores import build_store, commitlog_bytes
    from rmqfs.engine.read import kernel

    if kernel.load() is None:
        raise SystemExit("no compiled decoder (run `make`): this would time the slow path")
    OUT.mkdir(parents=True, exist_ok=True)
    store = OUT.parent / "spark" / f"store-{args.messages}-8x8"
    load0 = os.getloadavg()
    build_s = build_store(store, args.messages, 8, 8)
    print(f"store of {args.messages:,} messages ({commitlog_bytes(store) / 1e6:,.0f} MB of "
          f"CommitLog) {'built in %.0f s' % build_s if build_s else 'reused'}; "
          f"{os.cpu_count()} cores; load average {load0[0]:.2f}", flush=True)  # fmt: skip
    sizes = [int(w) for w in args.workers.split(",")]
    run_child(store, sizes[-1])  # untimed: the CommitLog into the page cache
    results = []
    print(f"{'workers':>7} {'wall s':>8} {'CPU s':>7} {'msg/s':>12} {'speedup':>8} {'eff.':>6}")
    for w in sizes:
        r = run_child(store, w)
        base = results[0]["wall_s"] if results else r["wall_s"]
        r["speedup"] = base / r["wall_s"]
        r["efficiency"] = r["speedup"] / w * (results[0]["workers"] if results else 1)
        r["msgs_per_s"] = r["rows"] / r["wall_s"]
        results.append(r)
        print(f"{w:>7} {r['wall_s']:>8.2f} {r['workers_cpu_s']:>7.1f} {r['msgs_per_s']:>12,.0f} "
              f"{r['speedup']:>8.2f} {r['efficiency']:>6.2f}", flush=True)  # fmt: skip
    load1 = os.getloadavg()
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    doc = {"machine": machine(), "messages": args.messages, "runs": results,
           "load_before": load0, "load_after": load1}  # fmt: skip
    (OUT / "result.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
