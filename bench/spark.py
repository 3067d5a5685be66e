"""Spark benchmark: one query on the mounted ``view/`` (cold, warm), on the same Parquet files on
local disk, and on the ``rocketmq`` data source.

``python -m bench.spark [--messages N] [--topics T] [--queues Q] [--runs R]`` (``make bench``).
One run, on one data set:

1. builds a store of N messages (default 5,000,000: T=8 topics x Q=8 queues, loghub lines as
   bodies, a tag per log level, a unique key per message; about 1.4 GB of CommitLog) straight
   with the engine's ``put_messages``, under ``bench-out/spark/store-<N>-<T>x<Q>/``. The store
   is kept and reused by the next run with the same parameters;
2. mounts it with ``rmqfs mount`` and a fresh render cache, and times the query on
   ``spark.read.parquet("file://MNT/view")`` once: **cold** (the first read renders every
   part);
3. copies ``MNT/view/`` to local disk (``bench-out/spark/view-local``);
4. times the query R times each, alternating the order, after one untimed warm-up of each:
   the mounted ``view/`` (**warm**), the local copy (**local**, the baseline),
   ``spark.read.format("rocketmq").load(STORE)`` (**data source**), and the same with
   ``.schema()`` of the query's four columns (the source then decodes only those).

The query: ``groupBy(topic, tags).agg(count(*), avg(length(body)), max(storeTimestamp))``,
collected; every input must give the same rows (checked). Spark is ``local[2]``.

Targets (issue 8), 2-core machine: warm mounted ``view/`` <= 1.3x local Parquet; cold <= 15 s;
data source <= 4x local Parquet. Figures go to stdout and ``bench-out/spark/result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-out" / "spark"
LOGHUB = REPO.parent / "shared" / "data" / "loghub"
LEVELS = (b"INFO", b"WARN", b"ERROR", b"DEBUG", b"FATAL", b"TRACE")


def _log_lines() -> list[tuple[bytes, str]]:
    """Every non-empty loghub line with a tag: its log level when it names one, else "Other"."""
    out = []
    for f in sorted(LOGHUB.glob("*_2k.log")):
        for line in f.read_bytes().splitlines():
            if line:
                tag = next((lv.decode() for lv in LEVELS if lv in line[:120]), "Other")
                out.append((line, tag))
    return out


def build_store(store: Path, n: int, topics: int, queues: int) -> float:
    """Write ``n`` messages with the engine API into ``store``; returns seconds (0 if reused).

    Message i goes to topic ``BenchLog<i % topics>`` (queues round-robin), body = loghub line
    ``i % lines``, tags = its level, keys = ``["k<i>"]`` (unique). A marker file written last
    says the store is complete.
    """
    from engine.store import Message, MessageStore, StoreConfig

    marker = store / ".bench-complete"
    if marker.exists():
        return 0.0
    if store.exists():
        shutil.rmtree(store)
    lines = _log_lines()
    names = [f"BenchLog{t}" for t in range(topics)]
    t0 = time.monotonic()
    cfg = StoreConfig(mapped_file_size_commit_log=256 * 1024 * 1024)
    with MessageStore(str(store), cfg) as s:
        for t in names:
            s.create_topic(t, queue_nums=queues)
        batch = 4096
        for start in range(0, n, batch):
            s.put_messages(
                [
                    Message(
                        names[i % topics],
                        lines[i % len(lines)][0],
                        tags=lines[i % len(lines)][1],
                        keys=[f"k{i}"],
                    )
                    for i in range(start, min(n, start + batch))
                ]
            )
            if start % 500_000 < batch:
                print(f"  built {start:,} messages", flush=True)
    marker.write_text(json.dumps({"messages": n, "topics": topics, "queues": queues}))
    return time.monotonic() - t0


def commitlog_bytes(store: Path) -> int:
    """Bytes of CommitLog holding messages (the end of the last record a ConsumeQueue unit
    points at; the segment files themselves are preallocated)."""
    from engine.read.columnar import StoreFiles

    files = StoreFiles(str(store))
    try:
        end = 0
        for t in files.topics():
            for q in files.queue_ids(t):
                hi = files.max_offset(t, q)
                if hi > files.min_offset(t, q):
                    u = files.queue(t, q).units(hi - 1, hi)[0]
                    end = max(end, int(u["off"]) + int(u["size"]))
        return end
    finally:
        files.close()


def rmqfs(*args) -> None:
    subprocess.run(
        [sys.executable, "-m", "mount.cli", *map(str, args)],
        check=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=5_000_000)
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)

    OUT.mkdir(parents=True, exist_ok=True)
    store = OUT / f"store-{args.messages}-{args.topics}x{args.queues}"
    mnt, local = OUT / "mnt", OUT / "view-local"
    print(
        f"store of {args.messages:,} messages ({args.topics} topics x {args.queues} queues): "
        f"{store}",
        flush=True,
    )
    build_s = build_store(store, args.messages, args.topics, args.queues)
    cl_bytes = commitlog_bytes(store)
    results: dict = {
        "messages": args.messages,
        "topics": args.topics,
        "queues": args.queues,
        "build_s": round(build_s, 1),
        "commitlog_bytes": cl_bytes,
    }
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
    mnt.mkdir(exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=OUT))  # cold: nothing rendered yet
    rmqfs("mount", store, mnt, "--cache-dir", cache, "--log-file", OUT / "rmqfs.log")

    from pyspark.sql import functions as F

    from pipeline import report
    from pipeline.datasource import register

    spark = report.build_session("local[2]", app_name="bench-spark", shuffle_partitions=2)
    register(spark)

    def query(df):
        return sorted(
            tuple(r)
            for r in df.groupBy("topic", "tags")
            .agg(
                F.count(F.lit(1)).alias("messages"),
                F.avg(F.length("body")).alias("avgBody"),
                F.max("storeTimestamp").alias("lastStore"),
            )
            .collect()
        )

    def parquet(path):
        return lambda: spark.read.parquet(f"file://{path}")

    # The Python Data Source API has no column pruning: the source decodes and ships every
    # column unless the query gives a narrower schema (the documented way to prune).
    narrow = "topic STRING, tags STRING, body BINARY, storeTimestamp BIGINT"
    inputs = {
        "mounted_warm": parquet(mnt / "view"),
        "local": parquet(local),
        "datasource": lambda: spark.read.format("rocketmq").load(str(store)),
        "datasource_narrow": lambda: spark.read.format("rocketmq").schema(narrow).load(str(store)),
    }
    expected = None

    def timed(name):
        nonlocal expected
        t0 = time.monotonic()
        rows = query(inputs[name]())
        s = time.monotonic() - t0
        if expected is None:
            expected = rows
        assert rows == expected, f"{name} gave other rows than the first input"
        assert sum(r[2] for r in rows) == args.messages, (name, sum(r[2] for r in rows))
        return s

    try:
        # Spark itself (JVM start, JIT) warmed on a tiny unrelated query first, so that the cold
        # figure is the mount's first read, not Spark's.
        spark.range(1000).groupBy((F.col("id") % 7).alias("k")).count().collect()
        cold = timed("mounted_warm")
        results["mounted_cold_s"] = round(cold, 2)
        print(f"  mounted view/, cold (renders every part): {cold:6.2f} s", flush=True)
        if local.exists():
            shutil.rmtree(local)
        t0 = time.monotonic()
        shutil.copytree(mnt / "view", local)
        files = list(local.rglob("*.parquet"))
        results.update(
            copy_s=round(time.monotonic() - t0, 1),
            view_files=len(files),
            view_bytes=sum(f.stat().st_size for f in files),
        )
        print(
            f"  copied view/ to local disk: {len(files)} parts, "
            f"{results['view_bytes'] / 1e6:,.0f} MB",
            flush=True,
        )
        order = list(inputs)
        for name in order:  # warm-up, untimed
            timed(name)
        runs = {name: [] for name in order}
        for r in range(args.runs):
            for name in order if r % 2 == 0 else order[::-1]:
                s = timed(name)
                runs[name].append(round(s, 2))
                print(f"  run {r + 1}: {name:14s} {s:6.2f} s", flush=True)
    finally:
        spark.stop()
        rmqfs("umount", mnt)
        shutil.rmtree(cache, ignore_errors=True)

    best = {k: min(v) for k, v in runs.items()}
    median = {k: statistics.median(v) for k, v in runs.items()}
    base = median["local"]
    results.update(
        runs=runs,
        best=best,
        median=median,
        warm_over_local=round(median["mounted_warm"] / base, 2),
        datasource_over_local=round(median["datasource"] / base, 2),
        datasource_narrow_over_local=round(median["datasource_narrow"] / base, 2),
        cold_over_local=round(cold / base, 2),
    )
    print(
        f"\n{'query (groupBy topic, tags)':40s} {'median s':>9s} {'best s':>9s} "
        f"{'x local':>8s} {'target':>10s}"
    )
    for name, label, target in (
        ("local", "Parquet copy on local disk", "baseline"),
        ("mounted_warm", "mounted view/, warm", "<= 1.3x"),
        ("datasource", "rocketmq data source", "<= 4x"),
        ("datasource_narrow", "data source, .schema(4 columns)", "<= 4x"),
    ):
        print(
            f"{label:40s} {median[name]:9.2f} {best[name]:9.2f} "
            f"{median[name] / base:8.2f} {target:>10s}"
        )
    print(
        f"{'mounted view/, cold (first read)':40s} {cold:9.2f} {'':9s} {cold / base:8.2f} "
        f"{'<= 15 s':>10s}"
    )
    (OUT / "result.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
