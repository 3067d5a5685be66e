"""FUSE benchmark (``python -m bench.fuse``): the mount against native reads, libfuse's C
passthrough example and the engine's own append, all in one run on the same data.

Measures, and prints as a table with ratios against the baseline of the same run:

1. ``cat`` of a full 1 GiB ``raw/`` CommitLog segment, vs ``cat`` of the store file itself and
   vs the same file through ``passthrough_ll`` (libfuse3-dev's C example, built here with gcc
   and ``pkg-config fuse3``). Every file is in the page cache underneath; before each timed run
   the FUSE file's own cached pages are dropped (``posix_fadvise(DONTNEED)``), so the figure is
   the FUSE path, not a page-cache hit.
2. ``cat`` of a topic's ``messages.jsonl``: the first read (rendering) and a later one (the
   rendered cache, the baseline of the first read), in MB/s; the first read of every
   ``view/`` Parquet part (rendered by the worker pool), in messages/s; the daemon's peak RSS.
3. ``cat FILE > topics/T/produce`` in messages/s vs ``MessageStore.put_messages`` of the same
   lines, cut into the same 128 KiB pieces ``cat`` writes (each piece one put, like the FS).

Targets (issue 4): raw >= 0.7 x passthrough, produce >= 0.5 x engine, decoded >= 100 MB/s;
(issue 8): first read of messages.jsonl >= 250 MB/s, daemon RSS < 500 MB throughout.
Needs root (or a setuid fusermount3), /dev/fuse, gcc and libfuse3-dev; about 3 GiB of free
space in ``--dir`` (default: a temp dir, removed at the end).
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

REPO = Path(__file__).resolve().parents[1]
LOGHUB = Path(os.environ.get("RMQFS_SHARED", REPO.parent / "shared")) / "data" / "loghub"
PASSTHROUGH_SRC = [Path("/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c")]
SEGMENT = 1024 * 1024 * 1024
CHUNK = 128 * 1024  # what cat writes per write()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def rmqfs(*args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-m", "mount.cli", *args], check=True, env=env)


def drop_file_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def time_cat(path: Path, runs: int = 3, drop: bool = True) -> float:
    """Best wall time (s) of ``cat path > /dev/null`` over ``runs``."""
    best = float("inf")
    for _ in range(runs):
        if drop:
            drop_file_cache(path)
        t0 = time.perf_counter()
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def loghub_lines(n: int) -> list[bytes]:
    """``n`` real log lines (the loghub 2k samples, repeated), without their newlines."""
    base = []
    for f in sorted(LOGHUB.glob("*_2k.log")):
        base += [x.rstrip(b"\r") for x in f.read_bytes().split(b"\n") if x]
    if not base:
        raise SystemExit(f"no loghub logs under {LOGHUB}")
    return [base[i % len(base)] for i in range(n)]


def fill_segment(store: Path) -> Path:
    """A store whose first 1 GiB CommitLog segment is full (sealed); returns that file."""
    from engine.store import Message, MessageStore
    body = (b"0123456789abcdef" * 256)[:4000]
    with MessageStore(str(store)) as s:
        s.create_topic("Fill")
        while s.commitlog.max_offset < SEGMENT + 1:
            s.put_messages([Message("Fill", body) for _ in range(256)])
    return store / "commitlog" / "00000000000000000000"


def build_passthrough(work: Path) -> Path | None:
    src = next((p for p in PASSTHROUGH_SRC if p.exists()), None)
    if src is None:
        log("passthrough_ll.c not found (apt-get install libfuse3-dev); skipping the C baseline")
        return None
    out = work / "passthrough_ll"
    flags = subprocess.run(["pkg-config", "fuse3", "--cflags", "--libs"], check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["gcc", "-O2", "-Wall", str(src), "-o", str(out), *flags], check=True,
                   cwd=src.parent)
    return out


def wait_mounted(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.ismount(path):
            return
        time.sleep(0.05)
    raise SystemExit(f"{path} did not mount")


def engine_append(store: Path, data: bytes) -> float:
    """Seconds for MessageStore.put_messages of ``data``'s lines in cat-sized pieces."""
    from engine.store import Message, MessageStore
    with MessageStore(str(store)) as s:
        s.create_topic("P")
        t0 = time.perf_counter()
        carry = b""
        for i in range(0, len(data), CHUNK):
            piece = carry + data[i:i + CHUNK]
            cut = piece.rfind(b"\n")
            carry = piece[cut + 1:]
            s.put_messages([Message("P", line) for line in piece[:cut].split(b"\n")])
        if carry:
            s.put_messages([Message("P", carry)])
        return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", help="work directory (default: a new temp dir, removed after)")
    p.add_argument("--messages", type=int, default=300_000,
                   help="loghub lines for the decoded and produce runs (default 300000)")
    args = p.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="rmqfs-bench-fuse-"))
    work.mkdir(parents=True, exist_ok=True)
    store, mnt, ptmnt = work / "store", work / "mnt", work / "pt"
    mnt.mkdir(exist_ok=True)
    ptmnt.mkdir(exist_ok=True)
    results = []
    pt_proc = None
    try:
        log("filling a 1 GiB CommitLog segment ...")
        seg = fill_segment(store)
        size = seg.stat().st_size
        subprocess.run(["cat", str(seg)], stdout=subprocess.DEVNULL, check=True)  # warm
        lines = loghub_lines(args.messages)
        data = b"\n".join(lines) + b"\n"
        src = work / "lines.txt"
        src.write_bytes(data)

        log("engine append ...")
        t_engine = engine_append(work / "engine-store", data)

        rmqfs("mount", str(store), str(mnt))
        import json
        import threading
        daemon_pid = json.loads((mnt / "status.json").read_text())["pid"]
        stop_rss = threading.Event()

        def peak_rss() -> int:
            with open(f"/proc/{daemon_pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
            return 0

        def watch_rss():  # VmHWM is the peak; sampling keeps the daemon's own view honest
            while not stop_rss.wait(0.2):
                peak_rss()
        rss_thread = threading.Thread(target=watch_rss, daemon=True)
        rss_thread.start()
        try:
            raw = mnt / "raw" / "commitlog" / seg.name
            t_native = time_cat(seg, drop=False)
            t_raw = time_cat(raw)
            passthrough = build_passthrough(work)
            t_pt = None
            if passthrough:
                pt_proc = subprocess.Popen([str(passthrough), "-f", "-o", f"source={store}",
                                            str(ptmnt)])
                wait_mounted(ptmnt)
                t_pt = time_cat(ptmnt / "commitlog" / seg.name)
            mb = size / 1e6
            results.append(("cat 1 GiB segment, native (page cache)", f"{mb / t_native:,.0f} MB/s",
                            ""))
            if t_pt:
                results.append(("cat 1 GiB segment, C passthrough_ll", f"{mb / t_pt:,.0f} MB/s",
                                "baseline"))
            results.append(("cat 1 GiB segment, rmqfs raw/", f"{mb / t_raw:,.0f} MB/s",
                             f"{t_pt / t_raw:.2f} x passthrough (target 0.7)" if t_pt else ""))

            log("produce through the mount ...")
            os.mkdir(mnt / "topics" / "P")
            t0 = time.perf_counter()
            subprocess.run(["bash", "-c", f"cat '{src}' > '{mnt}/topics/P/produce'"],
                           check=True)
            t_produce = time.perf_counter() - t0
            n = len(lines)
            results.append(("engine put_messages (128 KiB pieces)", f"{n / t_engine:,.0f} msg/s",
                            "baseline"))
            results.append(("cat FILE > produce", f"{n / t_produce:,.0f} msg/s",
                            f"{t_engine / t_produce:.2f} x engine (target 0.5)"))

            log("decoded reads ...")
            view = mnt / "topics" / "P" / "messages.jsonl"
            t0 = time.perf_counter()
            vsize = view.stat().st_size  # renders the view
            subprocess.run(["cat", str(view)], stdout=subprocess.DEVNULL, check=True)
            t_first = time.perf_counter() - t0
            t_again = time_cat(view)
            results.append(("messages.jsonl, first read (renders)",
                            f"{vsize / 1e6 / t_first:,.0f} MB/s",
                            f"{vsize / 1e6:,.0f} MB (target 250 MB/s)"))
            results.append(("messages.jsonl, later reads", f"{vsize / 1e6 / t_again:,.0f} MB/s",
                            "target 100 MB/s"))
            results.append(("  vs later reads (baseline)", "",
                            f"{t_again / t_first:.2f} x later reads"))
            log("view/ parts ...")
            t0 = time.perf_counter()
            psize = 0
            parts = sorted((mnt / "view").rglob("*.parquet"))  # the listing renders ahead
            for part in parts:
                with open(part, "rb") as fh:
                    psize += len(fh.read())
            t_parts = time.perf_counter() - t0
            results.append((f"view/ {len(parts)} Parquet parts, first read (renders)",
                            f"{n / t_parts:,.0f} msg/s", f"{psize / 1e6:,.1f} MB of Parquet"))
            bodies = mnt / "topics" / "P" / "bodies.txt"
            bsize = bodies.stat().st_size
            t_b = time_cat(bodies)
            results.append(("bodies.txt, later reads", f"{bsize / 1e6 / t_b:,.0f} MB/s", ""))
            stop_rss.set()
            rss_thread.join()
            results.append(("daemon peak RSS (VmHWM), whole run", f"{peak_rss() / 1e6:,.0f} MB",
                            "target < 500 MB"))
        finally:
            if pt_proc is not None:
                subprocess.run(["fusermount3", "-u", str(ptmnt)], check=False)
                pt_proc.wait(timeout=30)
            rmqfs("umount", str(mnt))
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in results)
    print(f"{'':{width}}  {'throughput':>14}  ratio")
    for name, value, note in results:
        print(f"{name:{width}}  {value:>14}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
