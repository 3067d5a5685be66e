"""First read of ``messages.jsonl`` (``python -m bench.first_read``): the part of
``bench.fuse`` that measures a view's render, without the 1 GiB segment and passthrough runs.

Builds a store of ``--messages`` loghub lines in two topics (P and Q, 4 queues each), mounts
it, and times ``cat topics/P/messages.jsonl`` (the mount's first render: the worker processes
start), ``cat topics/Q/messages.jsonl`` (a first render with the workers running) and a later
``cat`` of P (the rendered cache, the baseline), printing MB/s, the ratios and the load
average (the machine may be shared). Target (issue 16): first read >= 400 MB/s on 2 cores.
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200_000, help="lines per topic")
    args = p.parse_args(argv)
    from rmqfs.engine.store import Message, MessageStore

    work = Path(tempfile.mkdtemp(prefix="rmqfs-bench-first-"))
    store, mnt = work / "store", work / "mnt"
    mnt.mkdir()
    try:
        lines = loghub_lines(args.messages)
        s = MessageStore(str(store))
        try:
            for topic in ("P", "Q"):
                s.create_topic(topic, 4)
                for a in range(0, len(lines), 5000):
                    s.put_messages(
                        [Message(topic, x, queue_id=(a // 5000) % 4) for x in lines[a : a + 5000]]
                    )
        finally:
            s.close()
        rmqfs("mount", str(store), str(mnt))
        try:
            rows = []
            for name in ("P", "Q"):
                view = mnt / "topics" / name / "messages.jsonl"
                t0 = time.perf_counter()
                subprocess.run(["cat", str(view)], stdout=subprocess.DEVNULL, check=True)
                rows.append((name, view.stat().st_size, time.perf_counter() - t0))
            again = time_cat(mnt / "topics" / "P" / "messages.jsonl")
        finally:
            rmqfs("umount", str(mnt))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = rows[0][1]
    print(f"load average {os.getloadavg()[0]:.2f}, {size / 1e6:,.0f} MB per view")
    print(
        f"first read, workers starting: {size / 1e6 / rows[0][2]:,.0f} MB/s  "
        f"({again / rows[0][2]:.2f} x later reads)"
    )
    print(
        f"first read, workers running:  {rows[1][1] / 1e6 / rows[1][2]:,.0f} MB/s  "
        f"({again / rows[1][2]:.2f} x later reads)"
    )
    print(f"later reads (baseline):       {size / 1e6 / again:,.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
