"""What a follower's step costs on a store of many queues (no FUSE; ``python -m bench.follower``
measures the lag of a mounted follower), and how it grows with the queues.

``python -m bench.follower_queues [--queues 1000,8000] [--steps 30]``

For each size N: a store of N one-queue topics of ten 100-byte messages each is written by a
writer ``MessageStore`` in this process, and a follower ``MessageStore`` (read-only, following
the writer, as a ``-o ro`` mount's daemon does) is opened on it. Measured in CPU time
(``time.process_time``), per step (``Follower.refresh``, which the daemon runs every 100 ms;
none of them a full pass): ``--steps`` steps while the writer writes nothing; ``--steps``
steps each after one put to a queue (the put not timed); and one full pass (``Follower._full_pass``: every
queue asked for new units, every queue's files listed). Baseline in the same run: N
``os.pread`` of 20 bytes (of one file), the least a step that asks every queue pays. The ratios
printed are a step over that baseline; the growth line compares the largest size with the
smallest. The load average (as ``uptime`` prints it) is printed before and after; writes
``bench-out/follower_queues.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from . import growth_line, loadavg, write_result
from .stores import REPO

OUT = REPO / "bench-out"


def measure(n: int, steps: int) -> dict:
    """One size: CPU ms of an idle step, a step after a put, a full pass and the baseline."""
    from rmqfs.engine.store import Message, MessageStore

    work = Path(tempfile.mkdtemp(prefix="bench-follower-queues-"))
    root = str(work / "s")
    try:
        with MessageStore(root) as w:
            for t in range(n):
                w.create_topic(f"T{t}", 1)
            for t in range(0, n, 256):
                batch = [Message(f"T{k}", b"x" * 100) for k in range(t, min(n, t + 256))]
                w.put_messages(batch * 10)
        w = MessageStore(root)  # (again: it maps only the queues it writes from here)
        try:
            f = MessageStore(root, read_only=True, follow=True)
        except BaseException:
            w.close()
            raise
        fol = f.follower
        try:
            fol.refresh()
            w.put_messages([Message("T0", b"warm")])  # (what the first step imports)
            fol.refresh()

            def step() -> float:
                """One step that is not a full pass, in CPU ms."""
                fol.refreshes = 1
                t = time.process_time()
                fol.refresh()
                return (time.process_time() - t) * 1000

            def timed(fn) -> float:
                t = time.process_time()
                fn()
                return (time.process_time() - t) * 1000

            idle = sum(step() for _ in range(steps)) / steps
            active = 0.0
            for i in range(steps):
                w.put_messages([Message(f"T{i % n}", b"y" * 100)])  # (not timed)
                active += step()
            active /= steps
            assert f.commitlog.max_offset == w.commitlog.max_offset, "the follower fell behind"
            fol.refreshes = -1  # the next step is a full pass
            full = timed(fol.refresh)
            # (one file read n times: the writer and the follower hold a descriptor or two a
            # queue already)
            fd = os.open(os.path.join(root, "consumequeue", "T0", "0", "0" * 20), os.O_RDONLY)
            try:
                base = timed(lambda: [os.pread(fd, 20, 0) for _ in range(n)])
            finally:
                os.close(fd)
        finally:
            f.close()
            w.close()
        return {"queues": n, "idle_ms": idle, "after_put_ms": active, "full_ms": full,
                "pread_each_ms": base}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.follower_queues", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--queues", default="1000,8000", help="one-queue topics per store")
    ap.add_argument("--steps", type=int, default=30, help="steps timed in each case")
    ap.add_argument("--out", default=str(OUT), help="where follower_queues.json goes")
    args = ap.parse_args(argv)
    # the follower holds a descriptor a queue, the writer one a queue (and one more a queue it
    # writes, its mapping's: a few here): as many as the daemon allows itself (mount/daemon.py)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = 2 * max(int(n) for n in args.queues.split(",")) + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        raise SystemExit(
            f"--queues {args.queues} needs about {need} file descriptors (the writer and the "
            f"follower hold one a queue); this process may have {hard}: raise `ulimit -n` or "
            "give fewer queues"
        )
    before = loadavg()
    print(before, flush=True)
    rows = [measure(int(n), args.steps) for n in args.queues.split(",")]
    print(
        f"{'queues':>8} {'idle step ms':>13} {'step after a put ms':>20} {'full pass ms':>13} "
        f"{'N preads ms':>17} {'after a put / N preads':>25}"
    )
    for r in rows:
        r["after_put_over_pread_each"] = r["after_put_ms"] / max(r["pread_each_ms"], 1e-6)
        print(
            f"{r['queues']:>8,} {r['idle_ms']:>13.3f} {r['after_put_ms']:>20.3f} "
            f"{r['full_ms']:>13.1f} {r['pread_each_ms']:>17.2f} "
            f"{r['after_put_over_pread_each']:>25.2f}"
        )
    growth, line = growth_line(rows, "queues", "after_put_ms", "step after a put")
    if line:
        print(line)
    after = loadavg()
    print(after)
    write_result(
        args.out, "follower_queues.json", {"sizes": rows, "growth": growth, "load": [before, after]}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
