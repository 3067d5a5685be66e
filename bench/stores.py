"""The stores the benches share (``bench.spark``, ``bench.decode``, ``bench.render_scale``): loghub
lines put with the engine's ``put_messages``, kept under ``bench-out/`` and reused. Needs
neither FUSE nor Spark, so a machine with only the engine's dependencies can build one."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the loghub samples (``RMQFS_LOGHUB`` overrides: a machine without ``../shared``)
LOGHUB = Path(os.environ.get("RMQFS_LOGHUB") or REPO.parent / "shared" / "data" / "loghub")
LEVELS = (b"INFO", b"WARN", b"ERROR", b"DEBUG", b"FATAL", b"TRACE")


def _log_lines() -> list[tuple[bytes, str]]:
    """Every non-empty loghub line with a tag: its log level when it names one, else "Other"."""
    out = []
    for f in sorted(LOGHUB.glob("*_2k.log")):
        for line in f.read_bytes().splitlines():
            if line:
                tag = next((lv.decode() for lv in LEVELS if lv in line[:120]), "Other")
                out.append((line, tag))
    return out


def build_store(store: Path, n: int, topics: int, queues: int) -> float:
    """Write ``n`` messages with the engine API into ``store``; returns seconds (0 if reused).

    Message i goes to topic ``BenchLog<i % topics>`` (queues round-robin), body = loghub line
    ``i % lines``, tags = its level, keys = ``["k<i>"]`` (unique). A marker file written last
    says the store is complete.
    """
    from rmqfs.engine.store import Message, MessageStore, StoreConfig

    marker = store / ".bench-complete"
    if marker.exists():
        return 0.0
    if store.exists():
        shutil.rmtree(store)
    lines = _log_lines()
    names = [f"BenchLog{t}" for t in range(topics)]
    t0 = time.monotonic()
    cfg = StoreConfig(mapped_file_size_commit_log=256 * 1024 * 1024)
    with MessageStore(str(store), cfg) as s:
        for t in names:
            s.create_topic(t, queue_nums=queues)
        batch = 4096
        for start in range(0, n, batch):
            s.put_messages(
                [
                    Message(
                        names[i % topics],
                        lines[i % len(lines)][0],
                        tags=lines[i % len(lines)][1],
                        keys=[f"k{i}"],
                    )
                    for i in range(start, min(n, start + batch))
                ]
            )
            if start % 500_000 < batch:
                print(f"  built {start:,} messages", flush=True)
    marker.write_text(json.dumps({"messages": n, "topics": topics, "queues": queues}))
    return time.monotonic() - t0


def commitlog_bytes(store: Path) -> int:
    """Bytes of CommitLog holding messages (the end of the last record a ConsumeQueue unit
    points at; the segment files themselves are preallocated)."""
    from rmqfs.engine.read.columnar import StoreFiles

    files = StoreFiles(str(store))
    try:
        end = 0
        for t in files.topics():
            for q in files.queue_ids(t):
                hi = files.max_offset(t, q)
                if hi > files.min_offset(t, q):
                    u = files.units(t, q, hi - 1, hi)[0]
                    end = max(end, int(u["off"]) + int(u["size"]))
        return end
    finally:
        files.close()
