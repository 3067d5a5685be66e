"""Cost of the body-CRC check on the columnar read path (``python -m bench.bodycrc``).

``engine.read.columnar`` checks every record's BODYCRC (``MessageDecoder.decode(..., checkCRC)``)
in its compiled kernel (``engine.read.kernel``: carry-less multiplication folding where the CPU
has PCLMULQDQ, zlib's ``crc32`` for the rest) over the mapped CommitLog, in the same pass over
each record as the rest of the decode. This builds a store of ``--sizes`` loghub lines (one
topic, 4 queues) and times ``StoreFiles.read_batches`` over every queue with the check and
without it (``StoreFiles(check_crc=False)``, the baseline, measured in the same run), for all
columns and for one column (``queueOffset``: the body is otherwise never touched). Prints µs
per message, the ratio to the baseline and the load average (the machine may be shared). Best
of ``--repeat`` runs, pages cached (the first run warms them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.fuse import loghub_lines


def _read(root: str, check: bool, columns) -> tuple[float, int]:
    from rmqfs.engine.read.columnar import StoreFiles

    files = StoreFiles(root, check_crc=check)
    try:
        t0 = time.perf_counter()
        rows = 0
        for q in files.queue_ids("B"):
            for b in files.read_batches("B", q, 0, files.max_offset("B", q), columns=columns):
                rows += b.num_rows
        return time.perf_counter() - t0, rows
    finally:
        files.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100000,400000", help="messages per store, comma-separated")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    from rmqfs.engine.store import Message, MessageStore

    print(f"load average {os.getloadavg()[0]:.2f}")
    print(
        f"{'messages':>9} {'columns':>11} {'no CRC µs/msg':>14} {'CRC µs/msg':>11} "
        f"{'ratio':>6} {'CRC µs/MB':>10}"
    )
    for n in (int(x) for x in args.sizes.split(",")):
        work = Path(tempfile.mkdtemp(prefix="rmqfs-bench-crc-"))
        try:
            root = str(work / "store")
            lines = loghub_lines(n)
            with MessageStore(root) as s:
                s.create_topic("B", 4)
                for a in range(0, n, 5000):
                    s.put_messages(
                        [Message("B", x, queue_id=(a // 5000) % 4) for x in lines[a : a + 5000]]
                    )
            mb = sum(map(len, lines)) / 1e6
            for label, columns in (("all", None), ("queueOffset", ("queueOffset",))):
                best = {}
                _read(root, False, columns)  # warms the pages and the imports: not counted
                for check in (False, True, False, True)[:2] * args.repeat:
                    t, rows = _read(root, check, columns)
                    assert rows == n
                    best[check] = min(best.get(check, t), t)
                base, crc = best[False], best[True]
                print(
                    f"{n:>9,} {label:>11} {base / n * 1e6:>14.3f} {crc / n * 1e6:>11.3f} "
                    f"{crc / base:>6.2f} {(crc - base) / mb * 1e6:>10,.0f}"
                )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
