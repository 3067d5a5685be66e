"""Follower lag (``python -m bench.follower``, also part of ``python -m bench.fuse``).

A writer mount of a new store and a follower mount (``-o ro``) of the same store. A producer
process writes to the writer's ``topics/F/produce`` at a fixed rate (default 100,000
messages/s, in writes of ``--batch`` lines, each write one put; a write's acknowledgement time
is when ``write()`` returned). This process reads the follower's ``topics/F/messages.jsonl`` as
``tail -f`` does (``fstat``, then ``pread`` up to that size, every ``--poll`` seconds) and
notes when each line first became readable there. Per message: visible time minus ack time
(``CLOCK_MONOTONIC``, one clock for both processes). Also when the follower's own state
(``status.json``'s ``commitLogMaxOffset``, what lookups see) reached the writer's CommitLog end
read right after each write, and the CPU seconds each mount daemon used per second of
producing (a figure the machine's other load does not change much). Reported: p50/p99/max
over the run and per window of ``--window`` seconds with the store's CommitLog size at that
window, to show how the lag grows with the store (it should not: a refresh reads only what
was written since the previous one), and the rate the producer actually reached.

First, the follower mechanism alone, without FUSE: an engine writer process puts at the same
rate and a follower ``MessageStore`` in this process is refreshed every 100 ms, as a follower
mount's daemon does; per message, the end of the refresh that made it visible minus the end of
its put, the refresh's CPU time per message, and the time to open a follower over the whole
store just written (one 1 GiB segment).

Target (issue 10): p99 under 1 s at 100,000 msg/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import rmqfs

REPO = Path(__file__).resolve().parents[1]

PRODUCER = r"""
import json, os, sys, time
path, out = sys.argv[1], sys.argv[2]
rate, batch, seconds = float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
status = sys.argv[6]
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
ends = []
pad = b"x" * 80
acks = []
k = 0
t0 = time.monotonic()
end = t0 + seconds
while True:
    due = t0 + k * batch / rate
    now = time.monotonic()
    if due >= end:
        break
    if due > now:
        time.sleep(due - now)
    data = b"".join(b"%d:%d %s\n" % (k, j, pad) for j in range(batch))
    os.write(fd, data)
    acks.append(time.monotonic())
    with open(status, "rb") as f:  # an upper bound of where this write's records end
        ends.append(json.loads(f.read())["commitLogMaxOffset"])
    k += 1
os.close(fd)
with open(out, "w") as f:
    f.write("\n".join(f"{a!r} {e}" for a, e in zip(acks, ends)))
"""


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (s), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(sorted_values, p: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p))]


def follower_lag(
    work: Path,
    rate: float = 100_000,
    seconds: float = 20,
    batch: int = 1000,
    poll: float = 0.01,
    window: float = 5,
) -> dict:
    """Run the measurement in ``work``; returns the figures (seconds, bytes, msg/s)."""
    import numpy as np

    store, wmnt, rmnt = work / "store", work / "mnt-writer", work / "mnt-follower"
    wmnt.mkdir(parents=True, exist_ok=True)
    rmnt.mkdir(parents=True, exist_ok=True)
    rmqfs("mount", store, wmnt)
    try:
        os.mkdir(wmnt / "topics" / "F")
        rmqfs("mount", store, rmnt, "-o", "ro")
        try:
            assert json.loads((rmnt / "status.json").read_text())["follower"]
            acks_file = work / "acks.txt"
            pids = {
                name: json.loads((m / "status.json").read_text())["pid"]
                for name, m in (("writer", wmnt), ("follower", rmnt))
            }
            cpu0 = {name: _cpu_seconds(pid) for name, pid in pids.items()}
            prod = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    PRODUCER,
                    str(wmnt / "topics" / "F" / "produce"),
                    str(acks_file),
                    str(rate),
                    str(batch),
                    str(seconds),
                    str(wmnt / "status.json"),
                ]
            )
            view = rmnt / "topics" / "F" / "messages.jsonl"
            deadline = time.monotonic() + 10
            while not view.exists():
                if time.monotonic() > deadline:
                    raise SystemExit("the follower never showed the topic")
                time.sleep(0.01)
            fd = os.open(view, os.O_RDONLY)
            pos = 0
            seen: dict[int, list] = {}  # batch -> [lines seen, first seen, last seen]
            sizes = []  # (time, CommitLog bytes seen by the follower)
            carry = b""
            idle_since = None
            try:
                while True:
                    size = os.fstat(fd).st_size
                    now = time.monotonic()
                    if size > pos:
                        data = carry + os.pread(fd, size - pos, pos)
                        pos = size
                        cut = data.rfind(b"\n") + 1
                        carry = data[cut:]
                        for line in data[:cut].split(b"\n")[:-1]:
                            at = line.rindex(b'"body":"') + 8
                            k = int(line[at : line.index(b":", at)])
                            e = seen.get(k)
                            if e is None:
                                seen[k] = [1, now, now]
                            else:
                                e[0] += 1
                                e[2] = now
                        idle_since = None
                    elif prod.poll() is not None:
                        idle_since = idle_since or now
                        if now - idle_since > 3:
                            break
                    if not sizes or now - sizes[-1][0] >= 0.05:  # 20 Hz: status costs CPU
                        st = json.loads((rmnt / "status.json").read_text())
                        sizes.append(
                            (time.monotonic(), st["commitLogMaxOffset"], st["followerBehindBytes"])
                        )
                    time.sleep(poll)
            finally:
                os.close(fd)
            prod.wait()
            cpu = {name: _cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        finally:
            rmqfs("umount", rmnt)
    finally:
        rmqfs("umount", wmnt)
    rows = [x.split() for x in acks_file.read_text().splitlines() if x]
    acks = [float(a) for a, _ in rows]
    # visible in the follower's state (status.json, lookups): its CommitLog end reached the
    # writer's end seen right after the write
    ack_ends = np.array([int(e) for _, e in rows], dtype=np.int64)
    times = np.array([t for t, _, _ in sizes])
    ends = np.maximum.accumulate(np.array([e for _, e, _ in sizes], dtype=np.int64))
    at = np.searchsorted(ends, ack_ends, side="left")
    state_lags = np.sort(
        np.repeat(
            np.where(
                at < len(times), times[np.minimum(at, len(times) - 1)] - np.array(acks), np.inf
            ),
            batch,
        )
    )
    lags = []
    per_window: dict[int, list] = {}
    missing = 0
    t_start = acks[0] if acks else 0
    for k, ack in enumerate(acks):
        e = seen.get(k)
        if e is None or e[0] < batch:
            missing += batch - (e[0] if e else 0)
            continue
        # lines of one write usually show in one poll; the late ones count at the last poll
        lag_first, lag_last = e[1] - ack, e[2] - ack
        values = [lag_first] * (batch - 1) + [lag_last]
        lags += values
        per_window.setdefault(int((ack - t_start) // window), []).extend(values)
    lags.sort()
    produced = len(acks) * batch
    span = (acks[-1] - acks[0]) if len(acks) > 1 else float("nan")
    windows = []
    for w, values in sorted(per_window.items()):
        values.sort()
        t_mid = t_start + (w + 0.5) * window
        cl = max((s for t, s, _ in sizes if t <= t_mid), default=0)
        windows.append(
            {
                "window": w,
                "commitLogBytes": cl,
                "p50": _pct(values, 0.5),
                "p99": _pct(values, 0.99),
                "max": values[-1],
            }
        )
    arr = np.array(lags) if lags else np.array([float("nan")])
    return {
        "rate_target": rate,
        # the batches after the first, over the time from the first ack to the last
        "rate_reached": (produced - batch) / span if span else float("nan"),
        "state_p50": float(np.percentile(state_lags, 50)),
        "state_p99": float(np.percentile(state_lags, 99)),
        "cpu_per_s": {k: v / span for k, v in cpu.items()} if span else {},
        "messages": produced,
        "missing": missing,
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
        "windows": windows,
        "max_behind_bytes": max((b for _, _, b in sizes), default=0),
    }


ENGINE_WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[6])
from rmqfs.engine.store import Message, MessageStore
root, out = sys.argv[1], sys.argv[2]
rate, batch, seconds = float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
pad = b"x" * 80
rows = []
with MessageStore(root) as s:
    s.create_topic("F", 4)
    open(out + ".ready", "w").close()
    k = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while True:
        due = t0 + k * batch / rate
        now = time.monotonic()
        if due >= end:
            break
        if due > now:
            time.sleep(due - now)
        res = s.put_messages([Message("F", b"%d:%d %s" % (k, j, pad)) for j in range(batch)])
        rows.append((time.monotonic(), res[-1].commitlog_offset + res[-1].size))
        k += 1
with open(out, "w") as f:
    f.write("\n".join(f"{a!r} {e}" for a, e in rows))
"""


def engine_lag(
    work: Path, rate: float = 100_000, seconds: float = 20, batch: int = 1000, interval: float = 0.1
) -> dict:
    """The follower mechanism alone: an engine writer process puts at ``rate``; this process
    runs a follower store refreshed every ``interval`` s (as a follower mount does). Per
    message: the end of the refresh that made it visible minus the end of its put."""
    import numpy as np

    from rmqfs.engine.store import MessageStore

    root = work / "engine-store"
    out = work / "engine-acks.txt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ENGINE_WRITER,
            str(root),
            str(out),
            str(rate),
            str(batch),
            str(seconds),
            str(REPO),
        ]
    )
    ready = Path(str(out) + ".ready")
    while not ready.exists():
        if proc.poll() is not None:
            raise SystemExit("the engine writer failed")
        time.sleep(0.01)
    f = MessageStore(str(root), read_only=True, follow=True)
    seen = []  # (time, visible end)
    cpu = []
    try:
        while proc.poll() is None or not seen or seen[-1][1] < _last_end(out):
            t0 = time.process_time()
            f.follower.refresh()
            cpu.append(time.process_time() - t0)
            seen.append((time.monotonic(), f.commitlog.max_offset))
            time.sleep(interval)
            if proc.poll() is not None and len(seen) > 5 and seen[-1][1] == seen[-6][1]:
                break
    finally:
        f.close()
        proc.wait()
    t0 = time.perf_counter()  # opening a follower over everything just written
    MessageStore(str(root), read_only=True, follow=True).close()
    open_s = time.perf_counter() - t0
    rows = [x.split() for x in out.read_text().splitlines() if x]
    acks = np.array([float(a) for a, _ in rows])
    ends = np.array([int(e) for _, e in rows], dtype=np.int64)
    times = np.array([t for t, _ in seen])
    vis = np.maximum.accumulate(np.array([e for _, e in seen], dtype=np.int64))
    at = np.searchsorted(vis, ends, side="left")
    lags = np.where(at < len(times), times[np.minimum(at, len(times) - 1)] - acks, np.inf)
    lags = np.repeat(lags, batch)
    produced = len(acks) * batch
    span = acks[-1] - acks[0] if len(acks) > 1 else float("nan")
    return {
        "rate_reached": (produced - batch) / span,  # the batches after the first ack
        "messages": produced,
        "p50": float(np.percentile(lags, 50)),
        "p99": float(np.percentile(lags, 99)),
        "max": float(lags.max()),
        "open_s": open_s,
        "refresh_cpu_per_message_us": sum(cpu) / produced * 1e6,
        "store_bytes": int(ends[-1]),
    }


def _last_end(out: Path) -> int:
    try:
        text = out.read_text()
    except FileNotFoundError:
        return 1 << 62
    rows = text.split()
    return int(rows[-1]) if rows else 0


def add_engine_results(res: dict, results: list) -> None:
    """Rows for the engine-level follower figure."""
    results.append(
        (
            "follower store alone (engine writer, refresh every 100 ms) p50 / p99",
            f"{res['p50'] * 1000:,.0f} / {res['p99'] * 1000:,.0f} ms",
            f"max {res['max'] * 1000:,.0f} ms; reached {res['rate_reached']:,.0f} "
            f"msg/s, {res['messages']:,} messages, {res['store_bytes'] / 1e6:,.0f} MB; "
            f"refresh CPU {res['refresh_cpu_per_message_us']:.2f} us/message; "
            f"opening a follower over it {res['open_s'] * 1000:,.0f} ms",
        )
    )


def add_results(res: dict, results: list) -> None:
    """Rows for bench.fuse's table."""
    results.append(
        (
            f"follower lag at {res['rate_target']:,.0f} msg/s (p50 / p99)",
            f"{res['p50'] * 1000:,.0f} / {res['p99'] * 1000:,.0f} ms",
            f"max {res['max'] * 1000:,.0f} ms (target p99 < 1 s); reached "
            f"{res['rate_reached']:,.0f} msg/s, {res['messages']:,} messages, "
            f"{res['missing']} missing",
        )
    )
    results.append(
        (
            "  in the follower's state (status.json, lookups) p50 / p99",
            f"{res['state_p50'] * 1000:,.0f} / {res['state_p99'] * 1000:,.0f} ms",
            "CPU per second of producing: "
            + ", ".join(f"{k} daemon {v:.2f} s" for k, v in res["cpu_per_s"].items()),
        )
    )
    for w in res["windows"]:
        results.append(
            (
                f"  window {w['window']}: CommitLog {w['commitLogBytes'] / 1e6:,.0f} MB",
                f"{w['p50'] * 1000:,.0f} / {w['p99'] * 1000:,.0f} ms",
                f"max {w['max'] * 1000:,.0f} ms",
            )
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", help="work directory (default: a new temp dir, removed after)")
    p.add_argument("--rate", type=float, default=100_000, help="messages/s (default 100000)")
    p.add_argument("--seconds", type=float, default=20, help="how long to produce")
    p.add_argument("--batch", type=int, default=1000, help="lines per write() (one put)")
    p.add_argument("--poll", type=float, default=0.01, help="reader poll interval, s")
    p.add_argument("--window", type=float, default=5, help="seconds per reported window")
    args = p.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="rmqfs-bench-follow-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        eng = engine_lag(work, args.rate, args.seconds, args.batch)
        res = follower_lag(work, args.rate, args.seconds, args.batch, args.poll, args.window)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    results: list = []
    add_engine_results(eng, results)
    add_results(res, results)
    width = max(len(r[0]) for r in results)
    for name, value, note in results:
        print(f"{name:{width}}  {value:>16}  {note}")
    print(json.dumps(res), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
