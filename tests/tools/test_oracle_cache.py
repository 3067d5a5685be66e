"""tests/rocketmq_oracle.py's cache of builds: a build another checkout or JDK left is deleted
once no command has used it for PRUNE_AFTER, and never the one in use, a recent one or one being
built (its lock held)."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import rocketmq_oracle


def _build_dir(root: Path, name: str, age_s: float) -> Path:
    d = root / name
    (d / "classes").mkdir(parents=True)
    (d / "classes" / "A.class").write_bytes(b"\xca\xfe")
    for n in ("used", ".lock"):
        (d / n).touch()
        t = time.time() - age_s
        os.utime(d / n, (t, t))
    return d


def test_prune_keeps_current_recent_and_locked(tmp_path: Path) -> None:
    day = 86400.0
    old = rocketmq_oracle.PRUNE_AFTER + day
    keep = _build_dir(tmp_path, "current", old)  # the one command() returns: never deleted
    recent = _build_dir(tmp_path, "recent", rocketmq_oracle.PRUNE_AFTER - day)
    stale = _build_dir(tmp_path, "stale", old)
    building = _build_dir(tmp_path, "building", old)
    other = tmp_path / "not-a-build"  # neither 'used' nor '.lock': not ours to judge
    other.mkdir()
    t = time.time() - old
    os.utime(other, (t, t))
    with open(building / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rocketmq_oracle._prune(keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "building",
        "current",
        "not-a-build",
        "recent",
    ]
    assert (keep / "classes" / "A.class").exists() and (recent / "used").exists()
    assert not stale.exists()
    rocketmq_oracle._prune(keep)  # its lock free now
    assert not building.exists()
