"""``make demo``: mount a new store, produce real logs into it, run the Spark report, unmount.

The report's summary is printed, then where its tables and PNG charts are.

Usage: ``python -m mount.demo [FILE ...]`` (``make demo DATA="a.log b.log"``). Without files it
uses the machine's own logs (``/var/log/dpkg.log``, ``/var/log/apt/history.log``,
``/var/log/alternatives.log``), falling back to ../shared/data/loghub. One topic per file.
The mount is always removed, even when a step fails.
"""

from __future__ import annotations

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


def rmqfs(*args: str) -> None:
    cmd = [sys.executable, "-m", "mount.cli", *args]
    print("$ rmqfs " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)


def topic_for(path: Path) -> str:
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", path.name.split(".")[0]) or "logs"
    return name[:127]


def pick_files(argv: list[str]) -> list[Path]:
    files = [Path(a) for a in argv if a.strip()]
    if not files:
        files = [Path(p) for p in MACHINE_LOGS if os.path.isfile(p) and os.path.getsize(p)]
    if not files:
        files = sorted((REPO.parent / "shared" / "data" / "loghub").glob("*_2k.log"))[:3]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"demo: no such file: {', '.join(missing)}")
    return files


def main(argv=None) -> int:
    t0 = time.monotonic()
    files = pick_files(sys.argv[1:] if argv is None else argv)
    if OUT.exists():
        subprocess.run(["fusermount3", "-u", "-z", str(OUT / "mnt")], capture_output=True)
        shutil.rmtree(OUT)
    store, mnt = OUT / "store", OUT / "mnt"
    mnt.mkdir(parents=True)
    rmqfs("mount", str(store), str(mnt), "--log-file", str(OUT / "rmqfs.log"))
    try:
        seen = {}
        for f in files:
            topic = topic_for(f)
            seen[topic] = seen.get(topic, 0) + 1
            if seen[topic] > 1:
                topic = f"{topic}_{seen[topic]}"
            (mnt / "topics" / topic).mkdir()
            start = time.monotonic()
            subprocess.run(f"cat '{f}' > '{mnt}/topics/{topic}/produce'", shell=True,
                           check=True)
            took = time.monotonic() - start
            n = sum(1 for _ in open(mnt / "topics" / topic / "messages.jsonl", "rb"))
            print(f"produced {f} -> topics/{topic}: {n} messages in {took:.3f} s "
                  f"({n / max(took, 1e-6):,.0f} messages/s)")
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
        from pipeline import report
        rc = report.main([str(mnt), "--out", str(OUT / "report")])
        if rc != 0:
            raise SystemExit(f"demo: the report failed ({rc})")
    finally:
        rmqfs("umount", str(mnt))
    print(f"\nreport: tables in {OUT / 'report'} (Parquet and CSV); charts: "
          + ", ".join(str(OUT / "report" / c) for c in report.CHARTS))
    print(f"\ndemo finished in {time.monotonic() - t0:.1f} s; no mount left "
          f"({'mounted!' if os.path.ismount(mnt) else 'ok'}); store kept in {store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
