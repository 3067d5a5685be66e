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

4. Snapshots (issue 10): ``mkdir snapshots/<name>`` on the 1 GiB+ store while 4 producer
   processes write through the mount: the mkdir's wall time, and the longest ``write()``
   latency of a producer overlapping a mkdir vs the longest in the same run without one.
   Then ``rmqfs snapshot-verify`` of a copy of the snapshot (made with ``tar -S``), in GB/s of
   files, vs a plain in-process ``crc32c`` of the same files (read whole) and vs
   ``cat FILES > /dev/null``; and ``tar -c`` of the snapshot vs of ``raw/`` (files per second
   of wall time). ``--snapshots-only`` runs just this part.
``--produce-only`` (issue 34): ``cat`` of ``--messages`` 100-byte lines into ``produce``
   and as many JSON lines into ``produce.jsonl`` of a fresh mount, lines/s and per CPU-second
   of the daemon, against the engine's ``put_bodies`` of the same 128 KiB pieces; targets
   500,000 and 250,000 lines/s. Then a tenth as many lines written one ``write()`` a line (a
   line-buffered logger) into ``produce``, against the engine's ``put_bodies`` of one line a
   call and the same writes into a plain file. The rounds write into one store, so each case
   ends with how its time per line changed from the second round (the first pays the mount's first
   use) to the last as the store grew.
5. Follower lag (issue 10, :mod:`bench.follower`): a writer mount producing at 100,000 msg/s
   and a ``-o ro`` follower mount read like ``tail -f``; per message visible time minus ack
   time, p50/p99, per 5 s window with the store's size. ``--follower-only`` runs just this.

Targets (issue 4): raw >= 0.7 x passthrough, produce >= 0.5 x engine, decoded >= 100 MB/s;
(issue 8): first read of messages.jsonl >= 250 MB/s, daemon RSS < 500 MB throughout;
(issue 10): snapshot mkdir < 50 ms, producers not paused longer; verify >= 1 GB/s;
follower lag p99 < 1 s at 100,000 msg/s.
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

from bench import child_env, rmqfs

REPO = Path(__file__).resolve().parents[1]
LOGHUB = Path(os.environ.get("RMQFS_SHARED", REPO.parent / "shared")) / "data" / "loghub"
PASSTHROUGH_SRC = [Path("/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c")]
SEGMENT = 1024 * 1024 * 1024
CHUNK = 128 * 1024  # what cat writes per write()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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
    from rmqfs.engine.store import Message, MessageStore

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
    flags = subprocess.run(
        ["pkg-config", "fuse3", "--cflags", "--libs"], check=True, capture_output=True, text=True
    ).stdout.split()
    subprocess.run(
        ["gcc", "-O2", "-Wall", str(src), "-o", str(out), *flags], check=True, cwd=src.parent
    )
    return out


def wait_mounted(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.ismount(path):
            return
        time.sleep(0.05)
    raise SystemExit(f"{path} did not mount")


def engine_append(store: Path, data: bytes, bodies: bool = False) -> float:
    """Seconds for MessageStore.put_messages of ``data``'s lines in cat-sized pieces (``bodies``:
    ``put_bodies`` without results, what the mount's ``produce`` calls)."""
    from rmqfs.engine.store import Message, MessageStore

    with MessageStore(str(store)) as s:
        s.create_topic("P")
        t0 = time.perf_counter()
        carry = b""
        for i in range(0, len(data), CHUNK):
            piece = carry + data[i : i + CHUNK]
            cut = piece.rfind(b"\n")
            carry = piece[cut + 1 :]
            lines = [line for line in piece[:cut].split(b"\n") if line] if cut >= 0 else []
            if bodies and lines:
                s.put_bodies("P", lines, results=False)
            elif lines:
                s.put_messages([Message("P", line) for line in lines])
        if carry:
            s.put_messages([Message("P", carry)])
        return time.perf_counter() - t0


SNAP_PRODUCER = r"""
import os, sys, time
path, out, stop = sys.argv[1], sys.argv[2], sys.argv[3]
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
lat = []
i = 0
while not os.path.exists(stop):
    data = "".join(f"bench-{os.getpid()}-{i + k:08d} {'x' * 150}\n" for k in range(20)).encode()
    t0 = time.monotonic()
    os.write(fd, data)
    lat.append((t0, time.monotonic() - t0))
    i += 20
os.close(fd)
with open(out, "w") as f:
    f.write("\n".join(f"{a} {b}" for a, b in lat))
"""


def snapshot_bench(work: Path, store: Path, results: list, rounds: int = 10) -> None:
    """Item 4 of the module docstring, on ``store`` (mounted here)."""
    import statistics

    import crc32c

    mnt = work / "mnt-snap"
    mnt.mkdir(exist_ok=True)
    rmqfs("mount", str(store), str(mnt))
    procs = []
    stop = work / "snap-stop"
    try:
        os.makedirs(mnt / "topics" / "SnapBench", exist_ok=True)
        for k in range(4):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        SNAP_PRODUCER,
                        str(mnt / "topics" / "SnapBench" / "produce"),
                        str(work / f"lat-{k}"),
                        str(stop),
                    ]
                )
            )
        time.sleep(2.0)
        windows = []
        mkdir_times = []
        for r in range(rounds):
            time.sleep(0.5)  # a quiet stretch between mkdirs: the baseline
            t0 = time.monotonic()
            os.mkdir(mnt / "snapshots" / f"b{r}")
            t1 = time.monotonic()
            windows.append((t0, t1))
            mkdir_times.append(t1 - t0)
            if r < rounds - 1:
                os.rmdir(mnt / "snapshots" / f"b{r}")
        time.sleep(0.5)
        stop.write_text("")
        for p in procs:
            p.wait(timeout=60)
        lat = []
        for k in range(4):
            lat += [
                tuple(map(float, x.split()))
                for x in (work / f"lat-{k}").read_text().splitlines()
                if x
            ]
        during = [d for t, d in lat if any(t < b and t + d > a for a, b in windows)]
        quiet = [d for t, d in lat if not any(t < b + 0.1 and t + d > a - 0.1 for a, b in windows)]
        quiet.sort()
        p99 = quiet[int(len(quiet) * 0.99)] if quiet else 0.0
        results.append(
            (
                "snapshot mkdir while 4 producers write (median / max)",
                f"{statistics.median(mkdir_times) * 1000:.1f} ms",
                f"max {max(mkdir_times) * 1000:.1f} ms (target 50 ms); "
                f"store {store_bytes(store) / 2**30:.2f} GiB",
            )
        )
        results.append(
            (
                "longest producer write() overlapping a mkdir",
                f"{max(during, default=0) * 1000:.1f} ms",
                f"vs {max(quiet, default=0) * 1000:.1f} ms longest / {p99 * 1000:.1f} ms"
                f" p99 without ({len(during)} / {len(quiet)} writes)",
            )
        )
        snap = mnt / "snapshots" / f"b{rounds - 1}"
        t0 = time.monotonic()
        (snap / "SNAPSHOT.json").stat()
        t_sum = time.monotonic() - t0
        results.append(
            (
                "SNAPSHOT.json ready after mkdir (background sums)",
                f"{t_sum * 1000:.0f} ms",
                "sealed sums cached by the earlier rounds",
            )
        )
        copy = work / "snap-copy"
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir()
        subprocess.run(f"tar -C '{snap}' -Scf - . | tar -C '{copy}' -xf -", shell=True, check=True)

        def tar(src: Path) -> float:
            best = float("inf")
            for _ in range(2):
                t0 = time.perf_counter()
                subprocess.run(f"tar -C '{src}' -cf - . | cat > /dev/null", shell=True, check=True)
                best = min(best, time.perf_counter() - t0)
            return best

        snap_bytes = sum(p.stat().st_size for p in snap.rglob("*") if p.is_file())
        raw_bytes = sum(p.stat().st_size for p in (mnt / "raw").rglob("*") if p.is_file())
        t_raw, t_snap = tar(mnt / "raw"), tar(snap)
        results.append(
            (
                "tar -c of raw/ (producers stopped)",
                f"{raw_bytes / 1e6 / t_raw:,.0f} MB/s",
                "baseline",
            )
        )
        results.append(
            (
                "tar -c of snapshots/<name>/",
                f"{snap_bytes / 1e6 / t_snap:,.0f} MB/s",
                f"{(snap_bytes / t_snap) / (raw_bytes / t_raw):.2f} x raw/",
            )
        )
    finally:
        if not stop.exists():
            stop.write_text("")
        for p in procs:
            p.wait(timeout=60)
        rmqfs("umount", str(mnt))
    # In-process: the time the freeze holds the put lock (what producers can wait at most),
    # while 4 threads put, free of FUSE and scheduling noise between processes.
    import threading

    from rmqfs.engine.live.snapshot import freeze
    from rmqfs.engine.store import Message, MessageStore

    with MessageStore(str(store)) as s:
        halt = threading.Event()

        def put():
            while not halt.is_set():
                s.put_messages([Message("SnapBench", b"y" * 150) for _ in range(20)])

        threads = [threading.Thread(target=put) for _ in range(4)]
        for th in threads:
            th.start()
        held, walls = [], []
        try:
            for r in range(rounds):
                time.sleep(0.2)
                t0 = time.perf_counter()
                snap = freeze(s, f"e{r}")
                walls.append(time.perf_counter() - t0)
                held.append(snap.put_lock_ns / 1e9)
                snap.release()
        finally:
            halt.set()
            for th in threads:
                th.join()
    results.append(
        (
            "engine freeze() while 4 threads put: put lock held (median / max)",
            f"{statistics.median(held) * 1000:.2f} ms",
            f"max {max(held) * 1000:.2f} ms; whole freeze() median "
            f"{statistics.median(walls) * 1000:.2f} ms",
        )
    )
    files = [p for p in copy.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    for p in files:  # warm the page cache for every contender alike
        subprocess.run(["cat", str(p)], stdout=subprocess.DEVNULL, check=True)

    def verify():
        env = child_env()
        subprocess.run(
            [sys.executable, "-m", "rmqfs.mount.cli", "snapshot-verify", str(copy)],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )

    def plain():
        for p in files:
            with open(p, "rb", buffering=0) as f:
                crc = 0
                while True:
                    b = f.read(8 << 20)
                    if not b:
                        break
                    crc = crc32c.crc32c(b, crc)

    def cat():
        subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)

    timings = {}
    for name, fn in (("verify", verify), ("plain", plain), ("cat", cat)):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        timings[name] = best
    gb = total / 1e9
    results.append(
        ("cat snapshot copy > /dev/null", f"{gb / timings['cat']:,.2f} GB/s", "baseline")
    )
    results.append(
        (
            "crc32c of every file, in-process (whole files)",
            f"{gb / timings['plain']:,.2f} GB/s",
            f"{timings['cat'] / timings['plain']:.2f} x cat",
        )
    )
    results.append(
        (
            "rmqfs snapshot-verify (whole command)",
            f"{gb / timings['verify']:,.2f} GB/s",
            f"{timings['plain'] / timings['verify']:.2f} x plain crc32c, "
            f"{timings['cat'] / timings['verify']:.2f} x cat; {total / 2**30:.2f} GiB "
            f"in {len(files)} files (target 1 GB/s)",
        )
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LINE_WRITER = r"""
import os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
lines = [b"%09d " % i + b"y" * 90 + b"\n" for i in range(n)]
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
t0 = time.perf_counter()
for line in lines:
    os.write(fd, line)
print(time.perf_counter() - t0)
os.close(fd)
"""


def line_writes(path: Path, n: int) -> float:
    """Seconds a writer process takes to ``os.write`` ``n`` 100-byte lines to ``path``, one line
    a write (a line-buffered logger, ``tail -f``)."""
    out = subprocess.run(
        [sys.executable, "-c", LINE_WRITER, str(path), str(n)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"the line writer into {path} failed: {out.stderr.strip()}")
    return float(out.stdout)


def engine_line_puts(store: Path, n: int) -> float:
    """Seconds for ``put_bodies`` of ``n`` 100-byte lines, one line a call (what the mount's
    ``produce`` makes of one line a write), in this process."""
    from rmqfs.engine.store import MessageStore

    lines = [b"%09d " % i + b"y" * 90 for i in range(n)]
    with MessageStore(str(store)) as s:
        s.create_topic("L")
        t0 = time.perf_counter()
        for line in lines:
            s.put_bodies("L", [line], results=False)
        return time.perf_counter() - t0


def produce_bench(work: Path, n: int, rounds: int) -> list:
    """Issue 34's produce figures: ``cat`` of ``n`` 100-byte lines into ``topics/T/produce``
    of a fresh mount, and of ``n`` JSON lines (``{"body": ...}``, a 100-character body) into
    ``produce.jsonl``, in lines/s of wall clock and per CPU-second of the mount's daemon,
    ``rounds`` times each (a new topic each round, best round kept), against the engine's
    own ``put_bodies`` of the same lines in the same 128 KiB pieces (in this process) and a
    plain ``cat`` of the file into a file of the same disk; then ``n // 10`` lines written one
    ``write()`` a line into ``produce``, against the engine's ``put_bodies`` of one line a call
    and the same writes into a plain file. Returns the result rows."""
    import json

    store, mnt = work / "produce-store", work / "produce-mnt"
    mnt.mkdir(exist_ok=True)
    lines = [b"%09d " % i + b"x" * 90 for i in range(n)]
    src = work / "produce-lines.txt"
    src.write_bytes(b"\n".join(lines) + b"\n")
    jsrc = work / "produce-lines.jsonl"
    jsrc.write_bytes(
        b"".join(b'{"body": "' + line + b'"}\n' for line in lines)  # 100 ASCII characters
    )
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    # (messages in the store before the round, seconds) of each round of the mount's cases:
    # the rounds write into one store, so they say how a produce's cost grows with the store
    by_round: dict[str, list[tuple[int, float]]] = {}
    stored = [0]

    def keep(
        case: str, seconds: float, cpu_s: float | None = None, before: int | None = None
    ) -> None:
        if before is not None:
            by_round.setdefault(case, []).append((before, seconds))
            stored[0] += n_lines if case == "lines" else n
        if case not in best or seconds < best[case]:
            best[case] = seconds
            if cpu_s is not None:
                cpu[case] = cpu_s

    data = src.read_bytes()
    n_lines = max(n // 10, 1)  # one line a write: the FUSE round trip each
    for r in range(rounds):
        keep("engine", engine_append(work / f"engine-{r}", data, bodies=True))
        shutil.rmtree(work / f"engine-{r}")
        t0 = time.perf_counter()
        subprocess.run(["bash", "-c", f"cat '{src}' > '{work}/plain-copy'"], check=True)
        keep("plain", time.perf_counter() - t0)
        os.unlink(work / "plain-copy")
        keep("engine-lines", engine_line_puts(work / f"engine-lines-{r}", n_lines))
        shutil.rmtree(work / f"engine-lines-{r}")
        keep("plain-lines", line_writes(work / "plain-lines", n_lines))
        os.unlink(work / "plain-lines")
    rmqfs("mount", str(store), str(mnt))
    try:
        pid = json.loads((mnt / "status.json").read_text())["pid"]
        for r in range(rounds):
            for case, name, path in (("produce", f"P{r}", src), ("jsonl", f"J{r}", jsrc)):
                os.mkdir(mnt / "topics" / name)
                target = "produce" if case == "produce" else "produce.jsonl"
                c0 = _cpu_seconds(pid)
                t0 = time.perf_counter()
                subprocess.run(
                    ["bash", "-c", f"cat '{path}' > '{mnt}/topics/{name}/{target}'"], check=True
                )
                keep(case, time.perf_counter() - t0, _cpu_seconds(pid) - c0, stored[0])
            os.mkdir(mnt / "topics" / f"L{r}")
            c0 = _cpu_seconds(pid)
            seconds = line_writes(mnt / "topics" / f"L{r}" / "produce", n_lines)
            keep("lines", seconds, _cpu_seconds(pid) - c0, stored[0])
        with open(mnt / "topics" / f"P{rounds - 1}" / "bodies.txt", "rb") as fh:
            got = sum(1 for _ in fh)
        if got != n:
            raise SystemExit(f"produce stored {got} lines of {n}")
        with open(mnt / "topics" / f"L{rounds - 1}" / "bodies.txt", "rb") as fh:
            got = sum(1 for _ in fh)
        if got != n_lines:
            raise SystemExit(f"produce stored {got} lines of {n_lines} written one a write")
    finally:
        rmqfs("umount", str(mnt))
        shutil.rmtree(store, ignore_errors=True)
    rows = [
        ("engine put_bodies, 128 KiB pieces", f"{n / best['engine']:,.0f} lines/s", "baseline"),
        ("plain cat FILE > file (same disk)", f"{n / best['plain']:,.0f} lines/s", ""),
    ]
    for case, label, target in (
        ("produce", f"cat {n:,} 100 B lines > produce", 500_000),
        ("jsonl", f"cat {n:,} JSON lines > produce.jsonl", 250_000),
    ):
        rows.append(
            (
                label,
                f"{n / best[case]:,.0f} lines/s",
                f"{best['engine'] / best[case]:.2f} x engine; daemon "
                f"{n / max(cpu[case], 1e-9):,.0f} lines per CPU-s (target {target:,} lines/s)",
            )
        )
    rows += [
        (
            f"engine put_bodies, one line a call ({n_lines:,})",
            f"{n_lines / best['engine-lines']:,.0f} lines/s",
            "baseline",
        ),
        (
            f"{n_lines:,} lines > plain file, one write() a line",
            f"{n_lines / best['plain-lines']:,.0f} lines/s",
            "",
        ),
        (
            f"{n_lines:,} lines > produce, one write() a line",
            f"{n_lines / best['lines']:,.0f} lines/s",
            f"{best['engine-lines'] / best['lines']:.2f} x engine; "
            f"{best['plain-lines'] / best['lines']:.2f} x plain file; daemon "
            f"{n_lines / max(cpu['lines'], 1e-9):,.0f} lines per CPU-s",
        ),
    ]
    for case, label in (("produce", "produce"), ("jsonl", "produce.jsonl"), ("lines", "lines")):
        runs = by_round.get(case, [])
        if len(runs) > 1:
            # round 1 pays the mount's first use (its first topic, the first segment's
            # allocation): with 3 rounds or more the growth is read from round 2 on
            first = 1 if len(runs) > 2 else 0
            (b0, s0), (b1, s1) = runs[first], runs[-1]
            x = s1 / s0  # the same lines each round: time per line, last round over first
            word = "flat" if 1 / 1.15 <= x <= 1.15 else "GROWS" if x > 1 else "falls"
            rows.append(
                (
                    f"  {label}: round {first + 1} (store of {b0:,} messages) to {len(runs)} "
                    f"({b1:,})",
                    f"{x:.2f}x",
                    f"time per line {word} as the store grows",
                )
            )
    return rows


def store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "commitlog").iterdir())


def print_results(results: list) -> None:
    width = max(len(r[0]) for r in results)
    print(f"{'':{width}}  {'throughput':>14}  ratio")
    for name, value, note in results:
        print(f"{name:{width}}  {value:>14}  {note}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", help="work directory (default: a new temp dir, removed after)")
    p.add_argument(
        "--messages",
        type=int,
        default=300_000,
        help="loghub lines for the decoded and produce runs (default 300000)",
    )
    p.add_argument(
        "--snapshots-only", action="store_true", help="only the snapshot figures (item 4)"
    )
    p.add_argument(
        "--produce-only",
        action="store_true",
        help="only the produce figures (issue 34): cat of --messages 100-byte lines",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of --produce-only (best kept)")
    p.add_argument(
        "--follower-only",
        action="store_true",
        help="only the follower lag (python -m bench.follower has its options)",
    )
    args = p.parse_args(argv)
    if args.follower_only:
        from bench import follower

        return follower.main(["--dir", args.dir] if args.dir else [])
    work = Path(args.dir or tempfile.mkdtemp(prefix="rmqfs-bench-fuse-"))
    work.mkdir(parents=True, exist_ok=True)
    store, mnt, ptmnt = work / "store", work / "mnt", work / "pt"
    mnt.mkdir(exist_ok=True)
    ptmnt.mkdir(exist_ok=True)
    results = []
    pt_proc = None
    if args.produce_only:
        try:
            log(f"produce: {args.messages:,} lines, {args.rounds} rounds ...")
            results += produce_bench(work, args.messages, args.rounds)
        finally:
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        print_results(results)
        return 0
    if args.snapshots_only:
        try:
            log("filling a 1 GiB CommitLog segment ...")
            fill_segment(store)
            log("snapshots ...")
            snapshot_bench(work, store, results)
        finally:
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)
        print_results(results)
        return 0
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
        # what the mount's produce calls for the same pieces (put_messages of Messages would
        # be a costlier path, flattering the mount's ratio)
        t_engine = engine_append(work / "engine-store", data, bodies=True)

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
                pt_proc = subprocess.Popen(
                    [str(passthrough), "-f", "-o", f"source={store}", str(ptmnt)]
                )
                wait_mounted(ptmnt)
                t_pt = time_cat(ptmnt / "commitlog" / seg.name)
            mb = size / 1e6
            results.append(
                ("cat 1 GiB segment, native (page cache)", f"{mb / t_native:,.0f} MB/s", "")
            )
            if t_pt:
                results.append(
                    ("cat 1 GiB segment, C passthrough_ll", f"{mb / t_pt:,.0f} MB/s", "baseline")
                )
            results.append(
                (
                    "cat 1 GiB segment, rmqfs raw/",
                    f"{mb / t_raw:,.0f} MB/s",
                    f"{t_pt / t_raw:.2f} x passthrough (target 0.7)" if t_pt else "",
                )
            )

            log("produce through the mount ...")
            os.mkdir(mnt / "topics" / "P")
            t0 = time.perf_counter()
            subprocess.run(["bash", "-c", f"cat '{src}' > '{mnt}/topics/P/produce'"], check=True)
            t_produce = time.perf_counter() - t0
            n = len(lines)
            results.append(
                ("engine put_bodies (128 KiB pieces)", f"{n / t_engine:,.0f} msg/s", "baseline")
            )
            results.append(
                (
                    "cat FILE > produce",
                    f"{n / t_produce:,.0f} msg/s",
                    f"{t_engine / t_produce:.2f} x engine (target 0.5)",
                )
            )

            log("decoded reads ...")
            view = mnt / "topics" / "P" / "messages.jsonl"
            t0 = time.perf_counter()
            vsize = view.stat().st_size  # renders the view
            subprocess.run(["cat", str(view)], stdout=subprocess.DEVNULL, check=True)
            t_first = time.perf_counter() - t0
            t_again = time_cat(view)
            results.append(
                (
                    "messages.jsonl, first read (renders)",
                    f"{vsize / 1e6 / t_first:,.0f} MB/s",
                    f"{vsize / 1e6:,.0f} MB (target 250 MB/s)",
                )
            )
            results.append(
                (
                    "messages.jsonl, later reads",
                    f"{vsize / 1e6 / t_again:,.0f} MB/s",
                    "target 100 MB/s",
                )
            )
            results.append(
                ("  vs later reads (baseline)", "", f"{t_again / t_first:.2f} x later reads")
            )
            log("view/ parts ...")
            t0 = time.perf_counter()
            psize = 0
            parts = sorted((mnt / "view").rglob("*.parquet"))  # the listing renders ahead
            for part in parts:
                with open(part, "rb") as fh:
                    psize += len(fh.read())
            t_parts = time.perf_counter() - t0
            import pyarrow.parquet as pq

            # every part's rows (view/ holds the Fill topic's parts too, not only P's n)
            rows = sum(pq.read_metadata(part).num_rows for part in parts)
            results.append(
                (
                    f"view/ {len(parts)} Parquet parts, first read (renders)",
                    f"{rows / t_parts:,.0f} msg/s",
                    f"{rows:,} messages, {psize / 1e6:,.1f} MB of Parquet",
                )
            )
            bodies = mnt / "topics" / "P" / "bodies.txt"
            bsize = bodies.stat().st_size
            t_b = time_cat(bodies)
            results.append(("bodies.txt, later reads", f"{bsize / 1e6 / t_b:,.0f} MB/s", ""))
            stop_rss.set()
            rss_thread.join()
            results.append(
                (
                    "daemon peak RSS (VmHWM), whole run",
                    f"{peak_rss() / 1e6:,.0f} MB",
                    "target < 500 MB",
                )
            )
        finally:
            if pt_proc is not None:
                subprocess.run(["fusermount3", "-u", str(ptmnt)], check=False)
                pt_proc.wait(timeout=30)
            rmqfs("umount", str(mnt))
        log("snapshots ...")
        snapshot_bench(work, store, results)
        log("follower lag ...")
        from bench import follower

        (work / "follower").mkdir(exist_ok=True)
        follower.add_engine_results(follower.engine_lag(work / "follower"), results)
        follower.add_results(follower.follower_lag(work / "follower"), results)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print_results(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
