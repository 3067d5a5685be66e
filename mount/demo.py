"""``make demo``: mount a new store, produce real logs into it, run the Spark report, unmount.

The report's summary is printed, then where its tables, PNG charts and ``report.html`` are.

Usage: ``python -m rmqfs.mount.demo [FILE ...]`` (``make demo DATA="a.log b.log"``). Without files it
uses the loghub samples in ../shared/data/loghub (12 files of 2,000 lines), falling back to the
machine's own logs (``/var/log/dpkg.log``, ``/var/log/apt/history.log``,
``/var/log/alternatives.log``). One topic per file, plus the topics of ``DERIVED``: the lines
of all files that match a pattern (errors, warnings, ...), each tagged with the topic of its
file, as an operator routing logs would; so the loghub samples give 18 topics, enough to show
how the report draws a busy store. The lines are produced round-robin, ``CHUNK`` lines per
topic at a time, with a pause of ``PAUSE_S`` seconds halfway: topics interleave in time, and
the messages-over-time chart has an idle gap in it. The mount is always removed, even when a
step fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "demo-out"
MACHINE_LOGS = ["/var/log/dpkg.log", "/var/log/apt/history.log", "/var/log/alternatives.log"]
LOGHUB = REPO.parent / "shared" / "data" / "loghub"
#: Derived topics: (topic, pattern); a line of any file that matches goes there too, tagged
#: with its file's topic.
DERIVED = [
    ("errors", r"\b(ERROR|FATAL|SEVERE|CRITICAL|error|fatal)\b"),
    ("warnings", r"\b(WARN|WARNING|warn)\b"),
    ("auth-failures", r"authentication failure|Failed password|[Ii]nvalid user"),
    ("connections", r"(?i)\bconnect"),
    ("exceptions", r"[Ee]xception"),
    ("sessions", r"(?i)\b(session|login|logout)\b"),
]
CHUNK = 250  # lines per topic per round
PAUSE_S = 3.0  # idle time halfway through producing


def rmqfs(*args: str) -> None:
    """Run ``rmqfs ARGS`` (this checkout's) after printing it; raises CalledProcessError."""
    cmd = [sys.executable, "-m", "rmqfs.mount.cli", *args]
    print("$ rmqfs " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)


def topic_for(path: Path) -> str:
    """The topic of a log file: its name up to the first dot, made a valid topic name."""
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", path.name.split(".")[0]) or "logs"
    return name[:127]


def pick_files(argv: list[str]) -> list[Path]:
    """The log files to produce: ``argv``, else the loghub samples, else the machine's own
    logs; exits naming any that is missing."""
    files = [Path(a) for a in argv if a.strip()]
    if not files:
        files = sorted(LOGHUB.glob("*_2k.log"))
    if not files:
        files = [Path(p) for p in MACHINE_LOGS if os.path.isfile(p) and os.path.getsize(p)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"demo: no such file: {', '.join(missing)}")
    return files


def plan_topics(files: list[Path]) -> dict[str, list[bytes]]:
    """``{topic: lines to produce}``: one topic per file (its lines as they are), then each
    ``DERIVED`` topic that some line matches (``produce.jsonl`` lines: body and the tag of the
    file's topic)."""
    topics: dict[str, list[bytes]] = {}
    derived: dict[str, list[bytes]] = {name: [] for name, _ in DERIVED}
    patterns = [(name, re.compile(p)) for name, p in DERIVED]
    for f in files:
        topic = topic_for(f)
        n = 2
        while topic in topics or topic in derived:
            topic, n = f"{topic_for(f)}_{n}", n + 1
        lines = [x for x in f.read_bytes().splitlines() if x.strip()]
        topics[topic] = lines
        for line in lines:
            text = line.decode("utf-8", "replace")
            for name, rx in patterns:
                if rx.search(text):
                    derived[name].append(json.dumps({"body": text, "tags": topic}).encode())
    topics.update((name, lines) for name, lines in derived.items() if lines)
    return topics


def produce_round_robin(mnt: Path, topics: dict[str, list[bytes]]) -> None:
    """Create every topic, then write ``CHUNK`` lines to each in turn until all are produced,
    pausing ``PAUSE_S`` halfway (derived topics through ``produce.jsonl``)."""
    file_topics = {t for t in topics if t not in dict(DERIVED)}
    for t in topics:
        (mnt / "topics" / t).mkdir()
    rounds = max((len(v) + CHUNK - 1) // CHUNK for v in topics.values())
    start = time.monotonic()
    for r in range(rounds):
        if r == rounds // 2:
            print(
                f"(round {r + 1} of {rounds}: pausing {PAUSE_S:.0f} s, an idle gap for the chart)",
                flush=True,
            )
            time.sleep(PAUSE_S)
        for t, lines in topics.items():
            chunk = lines[r * CHUNK : (r + 1) * CHUNK]
            if chunk:
                name = "produce" if t in file_topics else "produce.jsonl"
                with open(mnt / "topics" / t / name, "wb") as fh:
                    fh.write(b"".join(x + b"\n" for x in chunk))
    took = time.monotonic() - start
    total = sum(map(len, topics.values()))
    for t, lines in topics.items():
        kind = "file" if t in file_topics else "derived, tags = source topic"
        print(f"produced topics/{t}: {len(lines)} messages ({kind})")
    print(
        f"{len(topics)} topics, {total:,} messages in {took:.1f} s "
        f"(a {PAUSE_S:.0f} s pause included), {CHUNK} lines per topic per round"
    )


def main(argv: list[str] | None = None) -> int:
    """``make demo``: mount, produce, report, unmount (see the module docstring)."""
    t0 = time.monotonic()
    files = pick_files(sys.argv[1:] if argv is None else argv)
    if OUT.exists():
        subprocess.run(["fusermount3", "-u", "-z", str(OUT / "mnt")], capture_output=True)
        shutil.rmtree(OUT)
    store, mnt = OUT / "store", OUT / "mnt"
    mnt.mkdir(parents=True)
    rmqfs("mount", str(store), str(mnt), "--log-file", str(OUT / "rmqfs.log"))
    try:
        topics = plan_topics(files)
        produce_round_robin(mnt, topics)
        first = topic_for(files[0])
        print(f"\n$ head -2 {mnt}/topics/{first}/messages.jsonl")
        with open(mnt / "topics" / first / "messages.jsonl", encoding="utf-8") as fh:
            for _, line in zip(range(2), fh):
                print(line.rstrip()[:400])
        (mnt / "groups" / "demo").mkdir(exist_ok=True)  # mkdir creates a consumer group
        off = mnt / "groups" / "demo" / first / "0" / "offset"
        off.write_text("1\n")
        print(f"\n$ echo 1 > {off} && cat {off}\n{off.read_text().strip()}")
        print(f"\n$ cat {mnt}/status.json\n{(mnt / 'status.json').read_text()}")
        print(f"\n$ rmqfs report {mnt} --out {OUT / 'report'}", flush=True)
        from rmqfs.pipeline import report

        rc = report.main([str(mnt), "--out", str(OUT / "report")])
        if rc != 0:
            raise SystemExit(f"demo: the report failed ({rc})")
    finally:
        rmqfs("umount", str(mnt))
    print(
        f"\nreport: tables in {OUT / 'report'} (Parquet and CSV); charts: "
        + ", ".join(str(OUT / "report" / c) for c in report.CHARTS)
    )
    print(f"report.html (summary, charts and tables in one file): {OUT / 'report' / report.HTML}")
    print(
        f"\ndemo finished in {time.monotonic() - t0:.1f} s; no mount left "
        f"({'mounted!' if os.path.ismount(mnt) else 'ok'}); store kept in {store}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
