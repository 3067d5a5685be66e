"""First read of ``messages.jsonl`` (``python -m bench.first_read``): the part of
``bench.fuse`` that measures a view's render, without the 1 GiB segment and passthrough runs.

For each of ``--sizes`` (lines a topic; default 100,000 and 400,000), builds a store of that
many loghub lines in two topics (P and Q, 4 queues each), mounts it, and times ``cat
topics/P/messages.jsonl`` (the mount's first render: the worker processes start), ``cat
topics/Q/messages.jsonl`` (a first render with the workers running) and a later ``cat`` of P
(the rendered cache, the baseline), printing MB/s, the ratios and the load average (the
machine may be shared), then, with two sizes or more, how the time per MB of each read grows
from the smallest store to the largest (flat: linear in the view's size). Target (issue 16):
first read >= 400 MB/s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.fuse import loghub_lines, rmqfs, time_cat


def measure(n: int) -> dict:
    """One size: a store of ``n`` loghub lines in each of topics P and Q (4 queues each),
    mounted, and the three ``cat`` s of the module's docstring: ``{"messages", "view_bytes" (P's
    view), "q_bytes" (Q's, a few bytes longer: its commitLogOffsets), "first_s", "running_s",
    "later_s"}`` (wall seconds; the store and the mount are removed)."""
    from rmqfs.engine.store import MessageStore

    work = Path(tempfile.mkdtemp(prefix="rmqfs-bench-first-"))
    store, mnt = work / "store", work / "mnt"
    mnt.mkdir()
    try:
        lines = loghub_lines(n)
        s = MessageStore(str(store))
        try:
            for topic in ("P", "Q"):
                s.create_topic(topic, 4)
                for a in range(0, len(lines), 5000):
                    s.put_bodies(topic, lines[a : a + 5000], queue_id=(a // 5000) % 4)
        finally:
            s.close()
        rmqfs("mount", str(store), str(mnt))
        try:
            rows = []
            for name in ("P", "Q"):
                view = mnt / "topics" / name / "messages.jsonl"
                t0 = time.perf_counter()
                subprocess.run(["cat", str(view)], stdout=subprocess.DEVNULL, check=True)
                rows.append((view.stat().st_size, time.perf_counter() - t0))
            again = time_cat(mnt / "topics" / "P" / "messages.jsonl")
        finally:
            rmqfs("umount", str(mnt))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "messages": n,
        "view_bytes": rows[0][0],
        "q_bytes": rows[1][0],
        "first_s": rows[0][1],
        "running_s": rows[1][1],
        "later_s": again,
    }


ROWS = (
    ("first read, workers starting", "first_s"),
    ("first read, workers running", "running_s"),
    ("later reads (baseline)", "later_s"),
)

BYTES = {"first_s": "view_bytes", "running_s": "q_bytes", "later_s": "view_bytes"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes", default="100000,400000", help="lines per topic, comma-separated sizes"
    )
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    results = [measure(int(x)) for x in args.sizes.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f}")
    head = "".join(f" {r['messages']:>9,} msgs ({r['view_bytes'] / 1e6:,.0f} MB)" for r in results)
    print(f"{'MB/s (x later reads)':30}{head}")
    for label, key in ROWS:
        cells = "".join(
            f" {r[BYTES[key]] / 1e6 / r[key]:>11,.0f} ({r['later_s'] / r[key]:.2f}x)"
            for r in results
        )
        print(f"{label:30}{cells}")
    if len(results) > 1:
        a, b = results[0], results[-1]
        grow = b["messages"] / a["messages"]
        print(f"\nfrom {a['messages']:,} to {b['messages']:,} lines a topic ({grow:.0f}x):")
        for label, key in ROWS:
            # seconds per MB: flat when the time grows as the view does
            per = (b[key] / b[BYTES[key]]) / (a[key] / a[BYTES[key]])
            word = "flat" if 1 / 1.15 <= per <= 1.15 else "GROWS" if per > 1 else "falls"
            print(f"  {label}: time per MB {word} ({per:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
