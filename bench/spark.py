"""Spark benchmark: the mounted ``view/`` against local disk, and the data source against it.

``python -m bench.spark [--messages N] [--runs R]`` (``make bench``). One run, on one data set:

1. builds a store of N messages (default 1,000,000; loghub lines as bodies, 2 topics x 4
   queues, tags and keys) with the engine API, under ``bench-out/spark/`` (kept, and reused
   by the next run when it has the same size);
2. mounts it with ``rmqfs mount`` and copies ``MNT/view/`` to local disk (this renders every
   part once, through FUSE: timed as "first read");
3. times, with one local[2] SparkSession, the report job (``pipeline.report.compute_report``
   and collecting its tables) over the mounted view and over the local copy, alternating, R
   runs each (after one untimed warm-up of each, alternating which goes first); and a full read of every column (``format("noop")``) of the mounted view and of
   the ``rocketmq`` data source over the store, in rows/s.

Targets (issue 5): mounted view <= 1.3x the local-disk time; data source >= the view's rows/s.
Figures are printed as a table and as JSON (``bench-out/spark/result.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-out" / "spark"
LOGHUB = REPO.parent / "shared" / "data" / "loghub"
TOPICS = ("BenchLogs", "%RETRY%bench")


def build_store(store: Path, n: int) -> float:
    """Write ``n`` messages with the engine API; returns seconds (0 when reused)."""
    from engine.store import Message, MessageStore, StoreConfig

    marker = store / ".bench-messages"
    if marker.exists() and marker.read_text() == str(n):
        return 0.0
    if store.exists():
        shutil.rmtree(store)
    lines = []
    for f in sorted(LOGHUB.glob("*_2k.log")):
        lines += [x for x in f.read_bytes().splitlines() if x]
    t0 = time.monotonic()
    cfg = StoreConfig(mapped_file_size_commit_log=256 * 1024 * 1024)
    with MessageStore(str(store), cfg) as s:
        for t in TOPICS:
            s.create_topic(t, queue_nums=4)
        batch = 2000
        for start in range(0, n, batch):
            msgs = []
            for i in range(start, min(n, start + batch)):
                msgs.append(Message(TOPICS[i % 5 == 0], lines[i % len(lines)],
                                    tags=f"Tag{i % 4}", keys=[f"k{i % 1000}"]))
            s.put_messages(msgs)
            if start % 100_000 == 0:
                print(f"  built {start:,} messages", flush=True)
    marker.write_text(str(n))
    return time.monotonic() - t0


def rmqfs(*args) -> None:
    subprocess.run([sys.executable, "-m", "mount.cli", *map(str, args)], check=True, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))


def timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)

    OUT.mkdir(parents=True, exist_ok=True)
    store, mnt, local = OUT / "store", OUT / "mnt", OUT / "view-local"
    print(f"building a store of {args.messages:,} messages ...", flush=True)
    build_s = build_store(store, args.messages)
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
    mnt.mkdir(exist_ok=True)
    rmqfs("mount", store, mnt, "--log-file", OUT / "rmqfs.log")
    results: dict = {"messages": args.messages, "build_s": round(build_s, 1)}
    try:
        if local.exists():
            shutil.rmtree(local)
        copy_s = timed(lambda: shutil.copytree(mnt / "view", local))
        view_bytes = sum(f.stat().st_size for f in local.rglob("*.jsonl"))
        results.update(first_read_copy_s=round(copy_s, 1), view_bytes=view_bytes,
                       view_files=len(list(local.rglob("*.jsonl"))))
        print(f"copied view/ to local disk: {view_bytes / 1e6:,.0f} MB in {copy_s:.1f} s "
              "(first read through FUSE renders every part)", flush=True)

        from pipeline import report
        from pipeline.datasource import register
        from pipeline.schema import VIEW_DDL
        from pyspark.sql import functions as F

        spark = report.build_session("local[2]", app_name="bench-spark", shuffle_partitions=2)
        register(spark)

        class Where:
            def __init__(self, path):
                self.path, self.broker_name = str(path), "bench"
                self.view = str(path)

            def has_messages(self):
                return True

        def report_job(view_dir):
            df = report.read_view(spark, Where(view_dir))
            tables = report.compute_report(spark, df, [])
            try:
                n = int(report.collect(tables)["per_queue_tag"]["messages"].sum())
            finally:
                tables["_cached"].unpersist()
            assert n == args.messages, (n, args.messages)

        # Warm up the JVM (JIT, Python workers) on each input once, untimed; then alternate
        # which input goes first, so that neither always runs on a warmer JVM.
        report_job(local)
        report_job(mnt / "view")
        pair = [("report_mounted_s", mnt / "view"), ("report_local_s", local)]
        runs = {"report_mounted_s": [], "report_local_s": []}
        for r in range(args.runs):
            for key, path in (pair if r % 2 == 0 else pair[::-1]):
                s = timed(lambda: report_job(path))
                runs[key].append(round(s, 2))
                print(f"  run {r + 1}: report over {key.split('_')[1]:8s} view: {s:6.2f} s",
                      flush=True)
        results.update(runs)

        def scan(df):
            return lambda: df.write.format("noop").mode("overwrite").save()

        view_df = spark.read.schema(VIEW_DDL).json(f"file://{mnt}/view")
        local_df = spark.read.schema(VIEW_DDL).json(f"file://{local}")
        ds_df = spark.read.format("rocketmq").load(str(store))
        # the report's columns only: JSON prunes while parsing; the source decodes only these
        narrow = ("topic STRING, queue INT, tags STRING, storeSize INT, keys ARRAY<STRING>, "
                  "body BINARY, bornTimestamp BIGINT, storeTimestamp BIGINT")
        names = [c.split()[0] for c in narrow.split(", ")]
        scans = [("view_scan_s", view_df), ("local_scan_s", local_df),
                 ("datasource_scan_s", ds_df),
                 ("view_narrow_s", view_df.select(*names)),
                 ("datasource_narrow_s", spark.read.format("rocketmq").schema(narrow)
                  .load(str(store)))]
        for key, df in scans:
            results[key] = []
            scan(df)()  # warm-up
        for r in range(args.runs):
            for key, df in (scans if r % 2 == 0 else scans[::-1]):
                s = timed(scan(df))
                results[key].append(round(s, 2))
                print(f"  run {r + 1}: scan {key[:-2]:20s}: {s:6.2f} s "
                      f"({args.messages / s:,.0f} rows/s)", flush=True)
        # a sanity check that the two scans read the same rows
        agg = [F.count(F.lit(1)), F.sum("storeSize"), F.sum(F.length("body"))]
        assert view_df.agg(*agg).collect() == ds_df.agg(*agg).collect()
        spark.stop()
    finally:
        rmqfs("umount", mnt)

    best = {k: min(v) for k, v in results.items() if isinstance(v, list)}
    median = {k: sorted(v)[len(v) // 2] for k, v in results.items() if isinstance(v, list)}
    results["median"] = median
    ratio = best["report_mounted_s"] / best["report_local_s"]
    view_rps = args.messages / best["view_scan_s"]
    ds_rps = args.messages / best["datasource_scan_s"]
    results.update(best=best, mounted_over_local=round(ratio, 3), view_rows_per_s=int(view_rps),
                   datasource_rows_per_s=int(ds_rps),
                   datasource_over_view=round(ds_rps / view_rps, 3))
    mratio = median["report_mounted_s"] / median["report_local_s"]
    results["median_mounted_over_local"] = round(mratio, 3)
    print(f"\n{'measure':44s} {'best':>10s} {'median':>10s}")
    print(f"{'report, mounted view/ (s)':44s} {best['report_mounted_s']:10.2f} "
          f"{median['report_mounted_s']:10.2f}")
    print(f"{'report, same .jsonl on local disk (s)':44s} {best['report_local_s']:10.2f} "
          f"{median['report_local_s']:10.2f}")
    print(f"{'mounted / local (target <= 1.3)':44s} {ratio:10.2f} {mratio:10.2f}")
    print(f"{'full scan, local copy of view/ (rows/s)':44s} "
          f"{args.messages / best['local_scan_s']:10,.0f}")
    print(f"{'full scan, mounted view/ (rows/s)':44s} {view_rps:10,.0f}")
    print(f"{'full scan, rocketmq data source (rows/s)':44s} {ds_rps:10,.0f}")
    print(f"{'data source / view (target >= 1.0)':44s} {ds_rps / view_rps:10.2f}")
    nv, nd = best["view_narrow_s"], best["datasource_narrow_s"]
    results.update(narrow_view_rows_per_s=int(args.messages / nv),
                   narrow_datasource_rows_per_s=int(args.messages / nd))
    print(f"{'report columns only, mounted view/ (rows/s)':44s} {args.messages / nv:10,.0f}")
    print(f"{'report columns only, data source (rows/s)':44s} {args.messages / nd:10,.0f}")
    print(f"{'data source / view, report columns':44s} {nv / nd:10.2f}")
    (OUT / "result.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
