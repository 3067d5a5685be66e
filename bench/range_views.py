"""Decoded views served by range (issue 32): ``python -m bench.range_views [--messages
1000000,4000000] [--cache-size 32M]``.

For each N, builds a store of N loghub lines in one topic (``T``, 4 queues), mounts it
``-o ro --cache-size`` (default 32M: the view is some 20 times the cache at 1,000,000
messages) and measures, on the view ``topics/T/messages.jsonl``:

- ``stat``: the first one runs the sizing pass (every chunk rendered once in the workers,
  only lengths kept) and gives the exact size;
- ``cat`` after it, to /dev/null: every chunk rendered again by range (the cache holds a few),
  MB/s; a second ``cat``, not timed, keeps the bytes on disk for the checks: exactly
  ``st_size`` bytes and one line per message;
- ``tail -n 3``: seconds, checked equal to the last lines ``cat`` read;
- random ``pread``s (200 of 4 KiB): each equal to the same bytes of ``cat``'s output (kept on
  disk for N <= ``--check-up-to``);
- the render cache's bytes on disk, sampled every 10 ms: its peak against ``--cache-size``;
  and the daemon's peak RSS (VmHWM) with its workers' current RSS.

Baseline in the same run: ``cat`` of the store's CommitLog files on the native filesystem
(page-cached). Prints how each figure grows with N and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import du, loadavg, rmqfs
from bench.fuse import loghub_lines
from bench.stores import commitlog_bytes


def _rss_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith(field + ":"))
    except (OSError, StopIteration):
        return 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def build(store: Path, n: int) -> None:
    """N loghub lines in topic T, 4 queues, round-robin by 5,000 (``put_bodies``)."""
    from rmqfs.engine.store import MessageStore

    built = store.with_name(store.name + ".built")  # a kept store (--keep) is built once
    if built.exists() and store.is_dir():
        return
    shutil.rmtree(store, ignore_errors=True)
    lines = loghub_lines(min(n, 200_000))
    with MessageStore(str(store)) as s:
        s.create_topic("T", 4)
        for a in range(0, n, 5000):
            bodies = [lines[(a + i) % len(lines)] for i in range(min(5000, n - a))]
            s.put_bodies("T", bodies, queue_id=(a // 5000) % 4, results=False)
    built.touch()


def _read_prefix(files: list[Path], nbytes: int, chunk: int = 8 << 20) -> None:
    """Read the first ``nbytes`` of the files in order, ``chunk`` bytes a read (``cat``'s
    work without its process start)."""
    left = nbytes
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while left > 0:
                got = fh.read(min(chunk, left))
                if not got:
                    break
                left -= len(got)
        if left <= 0:
            return


def one(n: int, cache_size: str, check: bool, work: Path, keep: bool = False) -> dict:
    store, mnt, cache = work / f"store-{n}", work / "mnt", work / "cache"
    t0 = time.perf_counter()
    build(store, n)
    build_s = time.perf_counter() - t0
    cl = sorted((store / "commitlog").iterdir())
    # the baseline: the CommitLog's bytes that hold records (not the preallocated segments'
    # holes, which read as fast as nothing), page-cached by a first, untimed read
    raw_bytes = commitlog_bytes(store)
    _read_prefix(cl, raw_bytes)
    t0 = time.perf_counter()
    _read_prefix(cl, raw_bytes)
    raw_s = time.perf_counter() - t0
    mnt.mkdir(exist_ok=True)
    shutil.rmtree(cache, ignore_errors=True)
    rmqfs(
        "mount",
        store,
        mnt,
        "-o",
        "ro",
        "--cache-size",
        cache_size,
        "--cache-dir",
        cache,
        "--broker-name",
        "bench",
        "--log-file",
        work / "mount.log",
    )
    out: dict = {"messages": n, "build_s": build_s, "raw_mb_s": raw_bytes / 1e6 / raw_s}
    try:
        pid = int(
            subprocess.run(
                ["pgrep", "-f", f"rmqfs.*{mnt}"], capture_output=True, text=True
            ).stdout.split()[0]
        )
        view = mnt / "topics" / "T" / "messages.jsonl"
        peak = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], du(cache))
                time.sleep(0.01)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        t0 = time.perf_counter()
        size = os.stat(view).st_size
        out["stat_s"] = time.perf_counter() - t0
        out["view_mb"] = size / 1e6
        t0 = time.perf_counter()
        subprocess.run(["cat", str(view)], stdout=subprocess.DEVNULL, check=True)
        out["cat_s"] = time.perf_counter() - t0
        out["cat_mb_s"] = size / 1e6 / out["cat_s"]
        dump = work / "cat.out"
        if check:  # the bytes, kept for the checks (a second cat, not timed: it writes to disk)
            with open(dump, "wb") as f:
                subprocess.run(["cat", str(view)], stdout=f, check=True)
        t0 = time.perf_counter()
        tail = subprocess.run(
            ["tail", "-n", "3", str(view)], capture_output=True, check=True
        ).stdout
        out["tail_s"] = time.perf_counter() - t0
        if check:
            assert dump.stat().st_size == size, (dump.stat().st_size, size)
            lines = 0
            with open(dump, "rb") as f:
                while chunk := f.read(1 << 24):
                    lines += chunk.count(b"\n")
            assert lines == n, (lines, n)
            with open(dump, "rb") as f:
                f.seek(max(0, size - (1 << 20)))
                assert f.read().splitlines(keepends=True)[-3:] == tail.splitlines(keepends=True)
            rnd = random.Random(1)
            fd = os.open(view, os.O_RDONLY)
            t0 = time.perf_counter()
            with open(dump, "rb") as f:
                for _ in range(200):
                    at = rnd.randrange(size)
                    f.seek(at)
                    assert os.pread(fd, 4096, at) == f.read(4096), at
            out["pread_ms"] = (time.perf_counter() - t0) * 1000 / 200
            os.close(fd)
            dump.unlink()
        stop.set()
        th.join()
        out["cache_peak_mb"] = peak[0] / 1e6
        out["daemon_hwm_mb"] = _rss_kb(pid, "VmHWM") / 1e3
        out["workers_rss_mb"] = sum(_rss_kb(c, "VmRSS") for c in _children(pid)) / 1e3
    finally:
        rmqfs("umount", mnt)
        if not keep:
            shutil.rmtree(store, ignore_errors=True)
            store.with_name(store.name + ".built").unlink(missing_ok=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", default="1000000", help="comma-separated message counts")
    p.add_argument("--cache-size", default="32M")
    p.add_argument(
        "--check-up-to",
        type=int,
        default=2_000_000,
        help="compare cat, tail and preads byte for byte up to this many messages",
    )
    p.add_argument("--work", help="directory for the stores (default: a temporary one)")
    p.add_argument(
        "--keep", action="store_true", help="keep the stores in --work and reuse them next time"
    )
    args = p.parse_args(argv)
    print(f"load average before: {loadavg()}", flush=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="rmqfs-bench-range-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in [int(x) for x in args.messages.split(",")]:
            r = one(n, args.cache_size, n <= args.check_up_to, work, args.keep and bool(args.work))
            rows.append(r)
            print(
                f"{n:>11,} msgs  view {r['view_mb']:>8,.0f} MB  stat {r['stat_s']:6.2f} s  "
                f"cat {r['cat_mb_s']:5,.0f} MB/s ({r['cat_mb_s'] / r['raw_mb_s']:.2f} x raw "
                f"CommitLog cat {r['raw_mb_s']:,.0f} MB/s)  tail -n 3 {r['tail_s']:.3f} s  "
                f"pread {r.get('pread_ms', float('nan')):.2f} ms  cache peak "
                f"{r['cache_peak_mb']:.1f} MB  daemon VmHWM {r['daemon_hwm_mb']:.0f} MB  "
                f"workers RSS {r['workers_rss_mb']:.0f} MB",
                flush=True,
            )
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        k = b["messages"] / a["messages"]
        print(
            f"growth x{k:g} messages: stat x{b['stat_s'] / a['stat_s']:.2f}, cat time "
            f"x{b['cat_s'] / a['cat_s']:.2f}, tail x{b['tail_s'] / a['tail_s']:.2f}, "
            f"cache peak x{b['cache_peak_mb'] / max(a['cache_peak_mb'], 1e-9):.2f}"
        )
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
