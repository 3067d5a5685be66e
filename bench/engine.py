"""Engine benchmark: append, read back and abnormal recovery, against a plain ``os.write`` loop.

Usage::

    python -m bench.engine [--quick] [--dir DIR] [--out bench-out]

Everything runs in one process, on one core (the store's flush thread sleeps in fdatasync), in a
temporary directory under ``--dir`` (default ``bench-out/``, i.e. the disk of the checkout), so
the store and the baseline write to the same filesystem:

* **append**: ``MessageStore.put_messages`` of 100-byte, 1 KiB and 16 KiB bodies (loghub lines,
  tags ``TagA``, a UNIQ_KEY per message indexed in the IndexFile, 4 queues round-robin) in
  batches of 256 and of 1. The baseline writes the very same number of CommitLog bytes with a
  sequential ``os.write`` loop, one write per batch, to a new file in the same directory.
  Reported: messages/s (wall clock, and per CPU-second of the process: what one core does
  when the machine is shared), MB/s of CommitLog bytes, and the ratio of the two bandwidths.
* **read**: ``MessageStore.iter_queue`` over every queue of the 1 KiB store (decoded
  ``MessageRecord``s) and ``get_message`` by queue offset, messages/s.
* **recovery**: a store of 1 GiB of CommitLog (one 1 GiB segment, 1 KiB bodies) is closed, the
  ``abort`` file is created as a crashed broker leaves it, and ``MessageStore(...)`` is timed:
  abnormal recovery scans every record from the start of the segment with CRC checks.
  Reported in MB/s of CommitLog scanned. The files are in the page cache (just written).

Every case runs ``--repeat`` times (default 5; store and baseline alternate) and the best run
of each is reported, since the machine may be shared; all run times are in the JSON.
Messages are created before the clock starts (a producer has its messages already); batches are
reused round-robin. Results are printed as a table and written to ``bench-out/engine.json``.
``--quick`` runs a tenth of the volume with a 128 MiB CommitLog for recovery.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rmqfs.engine.store import Message, MessageStore, StoreConfig

REPO = Path(__file__).resolve().parents[1]
LOGHUB = Path(os.environ.get("RMQFS_SHARED", REPO.parent / "shared")) / "data" / "loghub"
TOPIC = "BenchTopic"
BATCH = 256
MB = 1_000_000


def _corpus() -> bytes:
    """Real log text to cut bodies from (loghub), or a fixed pattern when it is missing."""
    parts = []
    for p in sorted(LOGHUB.glob("*_2k.log")):
        parts.append(p.read_bytes())
    data = b"".join(parts)
    return data if len(data) > 1 << 20 else (b"0123456789abcdef" * 65536)


def make_batches(body_size: int, batch: int, distinct: int) -> list[list[Message]]:
    """``distinct`` batches of ``batch`` messages with bodies of exactly ``body_size`` bytes."""
    corpus = _corpus()
    out, pos = [], 0
    for _ in range(distinct):
        msgs = []
        for _ in range(batch):
            if pos + body_size > len(corpus):
                pos = (pos + 7919) % max(1, len(corpus) - body_size)
            msgs.append(Message(TOPIC, corpus[pos : pos + body_size], tags="TagA"))
            pos += body_size
        out.append(msgs)
    return out


def _open(root: str, **cfg) -> MessageStore:
    store = MessageStore(root, StoreConfig(**cfg))
    store.create_topic(TOPIC, 4)
    return store


def _append_once(work: str, batches, nbatches: int, tag: str) -> tuple[float, float, int, list]:
    root = os.path.join(work, f"append-{tag}")
    store = _open(root)
    gc.collect()
    sizes = []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(nbatches):
        res = store.put_messages(batches[i % len(batches)])
        if i < len(batches):
            sizes.append(sum(r.size for r in res))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    written = store.commitlog.max_offset
    store.close()
    shutil.rmtree(root)
    return elapsed, cpu, written, sizes


def _plain_once(work: str, sizes: list, written: int, tag: str) -> float:
    """The baseline: the same bytes, one os.write per batch, sequentially to a new file."""
    chunks = [bytes(n) for n in sizes]
    path = os.path.join(work, f"plain-{tag}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left, i = written, 0
    t1 = time.perf_counter()
    while left > 0:
        chunk = chunks[i % len(chunks)]
        if len(chunk) > left:
            chunk = chunk[:left]
        os.write(fd, chunk)
        left -= len(chunk)
        i += 1
    elapsed = time.perf_counter() - t1
    os.close(fd)
    os.unlink(path)
    return elapsed


def bench_append(work: str, body_size: int, batch: int, count: int, repeat: int) -> dict:
    """Put ``count`` messages in batches of ``batch``, then write as many bytes with os.write;
    ``repeat`` times, alternating, keeping the best run of each (the machine is shared)."""
    batches = make_batches(body_size, batch, distinct=max(1, min(64, count // batch)))
    nbatches = max(1, count // batch)
    runs = []
    for _r in range(repeat):
        elapsed, cpu, written, sizes = _append_once(work, batches, nbatches, f"{body_size}-{batch}")
        plain = _plain_once(work, sizes, written, f"{body_size}-{batch}")
        runs.append((elapsed, cpu, plain))
    elapsed, cpu, _ = min(runs)
    plain_elapsed = min(r[2] for r in runs)
    n = nbatches * batch
    mbps = written / elapsed / MB
    plain_mbps = written / plain_elapsed / MB
    return {
        "body_bytes": body_size,
        "batch": batch,
        "messages": n,
        "commitlog_bytes": written,
        "seconds": round(elapsed, 3),
        "cpu_seconds": round(cpu, 3),
        "messages_per_s": round(n / elapsed),
        "messages_per_cpu_s": round(n / cpu) if cpu > 0 else None,
        "mb_per_s": round(mbps, 1),
        "plain_write_mb_per_s": round(plain_mbps, 1),
        "ratio_to_plain_write": round(mbps / plain_mbps, 3),
        "runs_seconds": [[round(a, 3), round(c, 3)] for a, _, c in runs],
    }


def bench_read(work: str, body_size: int, count: int, repeat: int) -> dict:
    """Fill a store, then read every queue back by queue offset (best of ``repeat``)."""
    root = os.path.join(work, f"read-{body_size}")
    store = _open(root)
    batches = make_batches(body_size, BATCH, distinct=16)
    for i in range(max(1, count // BATCH)):
        store.put_messages(batches[i % len(batches)])
    queues = store.queue_ids(TOPIC)
    gc.collect()
    seq = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = 0
        for q in queues:
            for _qoff, _rec in store.iter_queue(TOPIC, q):
                n += 1
        seq = min(seq, time.perf_counter() - t0)
    # Single reads by queue offset (get_message), a strided sample over all queues.
    sample = min(n, 50_000)
    single = float("inf")
    for _ in range(repeat):
        t1 = time.perf_counter()
        done = 0
        for q in queues:
            hi = store.max_offset(TOPIC, q)
            step = max(1, hi * len(queues) // sample)
            for off in range(0, hi, step):
                store.get_message(TOPIC, q, off)
                done += 1
        single = min(single, time.perf_counter() - t1)
    store.close()
    shutil.rmtree(root)
    return {
        "body_bytes": body_size,
        "messages": n,
        "iter_queue_messages_per_s": round(n / seq),
        "get_message_messages_per_s": round(done / single),
        "get_message_reads": done,
    }


def bench_recovery(work: str, size: int, repeat: int, body_size: int = 1024) -> dict:
    """Build ``size`` bytes of CommitLog in one segment, fake a crash, time the reopen (best of
    ``repeat``: each reopen finds the abort file again and scans the whole segment)."""
    root = os.path.join(work, "recovery")
    store = _open(root, mapped_file_size_commit_log=size)
    batches = make_batches(body_size, BATCH, distinct=16)
    per_batch = sum(r.size for r in store.put_messages(batches[0]))
    i = 1
    while store.commitlog.max_offset + per_batch + 8 < size:
        store.put_messages(batches[i % len(batches)])
        i += 1
    built = store.commitlog.max_offset
    messages = i * BATCH
    store.close()
    times = []
    ok = True
    for _ in range(repeat):
        Path(root, "abort").write_text("0")  # a broker that died leaves its abort file
        gc.collect()
        t0 = time.perf_counter()
        store = MessageStore(root, StoreConfig(mapped_file_size_commit_log=size))
        times.append(time.perf_counter() - t0)
        ok = ok and store.commitlog.max_offset == built and not store.last_exit_ok
        store.close()
    shutil.rmtree(root)
    elapsed = min(times)
    return {
        "commitlog_bytes": built,
        "messages": messages,
        "body_bytes": body_size,
        "seconds": round(elapsed, 3),
        "mb_per_s": round(built / elapsed / MB, 1),
        "messages_per_s": round(messages / elapsed),
        "recovered_whole_log": ok,
        "runs_seconds": [round(t, 3) for t in times],
    }


def machine() -> dict:
    """CPU model, cores, Python, kernel and filesystem of the run."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the volume (smoke run)")
    ap.add_argument("--dir", default=None, help="where the stores go (default: bench-out/)")
    ap.add_argument("--out", default=str(REPO / "bench-out"), help="where engine.json goes")
    ap.add_argument(
        "--repeat", type=int, default=5, help="runs per case; the best is reported (default 5)"
    )
    ap.add_argument(
        "--only",
        choices=["append", "read", "recovery"],
        action="append",
        help="run only these parts (repeatable)",
    )
    args = ap.parse_args(argv)
    scale = 0.1 if args.quick else 1.0
    os.makedirs(args.out, exist_ok=True)
    base = args.dir or args.out
    os.makedirs(base, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-engine-", dir=base)
    parts = set(args.only or ["append", "read", "recovery"])
    results: dict = {
        "machine": machine(),
        "command": "python -m bench.engine" + (" --quick" if args.quick else ""),
        "dir": os.path.abspath(work),
    }
    try:
        if "append" in parts:
            results["append"] = []
            for body, count in ((100, 500_000), (1024, 300_000), (16384, 40_000)):
                for batch in (BATCH, 1):
                    n = int(count * scale) if batch > 1 else int(min(count, 20_000) * scale)
                    r = bench_append(work, body, batch, max(n, batch), args.repeat)
                    results["append"].append(r)
                    print(
                        f"append {body:>6} B x{batch:<4} {r['messages_per_s']:>9,} msg/s "
                        f"({r['messages_per_cpu_s']:,} per CPU-s) "
                        f"{r['mb_per_s']:>8.1f} MB/s  plain {r['plain_write_mb_per_s']:>8.1f} "
                        f"MB/s  ratio {r['ratio_to_plain_write']:.3f}",
                        flush=True,
                    )
        if "read" in parts:
            r = bench_read(work, 1024, int(200_000 * scale), args.repeat)
            results["read"] = r
            print(
                f"read   {r['body_bytes']:>6} B  iter_queue {r['iter_queue_messages_per_s']:,}"
                f" msg/s  get_message {r['get_message_messages_per_s']:,} msg/s",
                flush=True,
            )
        if "recovery" in parts:
            size = (128 if args.quick else 1024) * 1024 * 1024
            r = bench_recovery(work, size, args.repeat)
            results["recovery"] = r
            print(
                f"recovery {r['commitlog_bytes'] / 2**20:.0f} MiB in {r['seconds']} s: "
                f"{r['mb_per_s']} MB/s ({r['messages_per_s']:,} msg/s)",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results)
    out = Path(args.out) / ("engine-quick.json" if args.quick else "engine.json")
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def print_table(results: dict) -> None:
    """The results as a Markdown table (pasted into docs/performance.md)."""
    print()
    print("| case | messages/s | per CPU-second | MB/s | plain os.write MB/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results.get("append", []):
        print(
            f"| append {r['body_bytes']} B bodies, batch {r['batch']} | "
            f"{r['messages_per_s']:,} | {r['messages_per_cpu_s']:,} | {r['mb_per_s']:.1f} | "
            f"{r['plain_write_mb_per_s']:.1f} | {r['ratio_to_plain_write']:.2f} |"
        )
    r = results.get("read")
    if r:
        print(
            f"| read back, iter_queue ({r['body_bytes']} B) | "
            f"{r['iter_queue_messages_per_s']:,} | | | | |"
        )
        print(
            f"| read back, get_message by queue offset ({r['body_bytes']} B) | "
            f"{r['get_message_messages_per_s']:,} | | | | |"
        )
    r = results.get("recovery")
    if r:
        print(
            f"| abnormal recovery, {r['commitlog_bytes'] / 2**20:.0f} MiB CommitLog "
            f"({r['body_bytes']} B bodies) | {r['messages_per_s']:,} | | {r['mb_per_s']:.1f} | | |"
        )


if __name__ == "__main__":
    sys.exit(main())
