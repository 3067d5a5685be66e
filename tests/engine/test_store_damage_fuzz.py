"""Store-damage fuzz (issue 9): every kind of store file flipped, truncated, zeroed, extended,
deleted, or replaced by a directory or a symbolic link, with and without ``abort``.

For each case (seeded; ``RMQFS_DAMAGE_SEED`` and ``RMQFS_DAMAGE_CASES`` override), in one
child process per case with a time limit (a hang fails the case):

* ``rmqfs verify`` and ``rmqfs recover`` exit with 0 or 1 and never print a traceback;
* opening the store as the mount does (``MessageStore``, read-write) either works or raises a
  StoreError/OSError with a message (what ``rmqfs mount`` prints), never another exception;
* nothing outside the store is written: link targets (a file and a directory beside the
  store) keep their names, sizes and checksums;
* when recover succeeds, the store loads in every reader: the engine (every queue read
  through ``iter_queue``), verify (clean), ``engine.read.columnar`` (Arrow batches) and the
  independent ``tests/refreader.py``, and they agree on the message count.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO
from engine.store import Message, MessageStore, StoreConfig

SEED = int(os.environ.get("RMQFS_DAMAGE_SEED", "20261123"))
CASES = int(os.environ.get("RMQFS_DAMAGE_CASES", "48"))
CONFIG = dict(
    mapped_file_size_commit_log=8 * 1024,
    mapped_file_size_consume_queue=16 * 20,
    max_hash_slot_num=16,
    max_index_num=64,
)
BROKER_CONF = (
    "mappedFileSizeCommitLog=8192\nmappedFileSizeConsumeQueue=320\n"
    "maxHashSlotNum=16\nmaxIndexNum=64\n"
)
MUTATIONS = ("flip", "truncate", "zero", "extend", "delete", "dir", "symlink")


@pytest.fixture(scope="module")
def base_store():
    """A clean store with several CommitLog segments, ConsumeQueue and index files, config
    files with .bak, a checkpoint; removed at the end."""
    d = Path(tempfile.mkdtemp(prefix="rmqfs-damage-base-"))
    root = d / "store"
    rng = random.Random(SEED)
    with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
        s.create_topic("A", 2)
        s.create_topic("B", 1)
        for i in range(6):
            s.put_messages(
                [
                    Message(
                        rng.choice("AB"),
                        b"m%d-%d " % (i, k) + b"x" * rng.randint(0, 300),
                        tags=f"t{k % 3}",
                        keys=[f"k{i}-{k}"],
                    )
                    for k in range(20)
                ]
            )
        s.create_group("g")
        s.commit_offset("g", "A", 0, 1)
        s.commit_offset("g", "A", 0, 2)
    yield root
    shutil.rmtree(d, ignore_errors=True)


def _targets(root: Path) -> list[str]:
    """Every file and directory of the store, relative paths (the 'kinds' of store files)."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def _cases(root: Path) -> list[tuple[str, str, bool]]:
    """``(relative path, mutation, abort)``: each kind of file at least once per mutation,
    drawn so that every mutation meets CommitLog, ConsumeQueue, index, config, checkpoint and
    the directories."""
    rng = random.Random(SEED)
    targets = _targets(root)
    kinds: dict[str, list[str]] = {}
    for t in targets:
        kind = t.split("/")[0] if "/" in t else t
        if t.startswith("consumequeue/") and t.count("/") < 3:
            kind = "consumequeue-dir"
        kinds.setdefault(kind, []).append(t)
    cases = []
    while len(cases) < CASES:
        for mutation in MUTATIONS:
            kind = rng.choice(sorted(kinds))
            cases.append((rng.choice(kinds[kind]), mutation, rng.random() < 0.5))
    return cases[:CASES]


def _mutate(root: Path, rel: str, mutation: str, rng: random.Random, outside: Path) -> None:
    p = root / rel
    if mutation in ("flip", "zero", "truncate", "extend") and p.is_dir():
        mutation = "delete"  # a directory has no bytes: drop it instead
    if mutation == "flip":
        data = bytearray(p.read_bytes())
        for _ in range(rng.randint(1, 8)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        p.write_bytes(bytes(data))
    elif mutation == "zero":
        data = bytearray(p.read_bytes())
        if data:
            at = rng.randrange(len(data))
            n = rng.randint(1, 64)
            data[at : at + n] = bytes(len(data[at : at + n]))
        p.write_bytes(bytes(data))
    elif mutation == "truncate":
        os.truncate(p, rng.choice([0, rng.randrange(max(1, p.stat().st_size))]))
    elif mutation == "extend":
        with open(p, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))))
    elif mutation == "delete":
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    elif mutation == "dir":
        shutil.rmtree(p) if p.is_dir() else p.unlink()
        p.mkdir()
        (p / "00000000000000000000").write_bytes(b"\0" * 20)
    elif mutation == "symlink":
        is_dir = p.is_dir()
        shutil.rmtree(p) if is_dir else p.unlink()
        os.symlink(outside / ("dir" if is_dir else "file"), p)


def _outside(d: Path) -> Path:
    o = d / "outside"
    (o / "dir").mkdir(parents=True)
    (o / "file").write_bytes(b"\x01" * 8192)
    (o / "dir" / "00000000000000000000").write_bytes(b"\x02" * 8192)
    return o


def _fingerprint(o: Path) -> dict:
    out = {}
    for dirpath, _dirs, files in os.walk(o):
        for n in files:
            p = os.path.join(dirpath, n)
            st = os.stat(p)
            out[p] = (hashlib.sha256(Path(p).read_bytes()).hexdigest(), st.st_size)
    out["names"] = sorted(str(p) for p in o.rglob("*"))
    return out


# The child: one case's commands, in-process, reporting what each did as JSON.
CHILD = r"""
import io, json, os, sys, traceback, contextlib
sys.path.insert(0, {repo!r})
root, conf = {root!r}, {conf!r}
out = {{}}

def run_cli(*argv):
    from mount import cli
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(list(argv))
        except SystemExit as e:
            rc = e.code
        except BaseException:
            rc = "traceback"
            traceback.print_exc(file=err)
    return rc, err.getvalue()[-3000:]

# what the mount does first: open the store for writing (and close it)
from engine.errors import StoreError
from engine.store import MessageStore, StoreConfig
from engine.tools.verify import verify_store
cfg = StoreConfig.from_broker_conf(conf)
try:
    MessageStore(root, cfg).close()
    out["open"] = "ok"
except (StoreError, OSError) as e:
    out["open"] = "refused: " + str(e)[:300]
except BaseException:
    out["open"] = "traceback: " + traceback.format_exc()[-3000:]
out["verify"] = run_cli("verify", root, "--config", conf)
out["recover"] = run_cli("recover", root, "--config", conf)
if out["recover"][0] == 0:
    counts = {{}}
    with MessageStore(root, cfg, read_only=True) as s:
        n = 0
        for t in s.topic_names():
            for q in s.queue_ids(t):
                n += sum(1 for _ in s.iter_queue(t, q))
        counts["engine"] = n
    res = verify_store(root, cfg)
    counts["verify_ok"] = res.ok
    counts["verify_errors"] = [str(p) for p in res.errors][:5]
    from engine.read import columnar
    if os.path.isdir(os.path.join(root, "commitlog")):
        files = columnar.StoreFiles(root)
        n = 0
        for t in files.topics():
            for q in files.queue_ids(t):
                lo, hi = files.min_offset(t, q), files.max_offset(t, q)
                n += sum(b.num_rows for b in files.read_batches(t, q, lo, hi))
        counts["columnar"] = n
        sys.path.insert(0, os.path.join({repo!r}, "tests"))
        import refreader
        recs = refreader.read_commitlog(os.path.join(root, "commitlog"))
        starts = {{r["physicalOffset"] for r in recs}}
        units = 0
        base = os.path.join(root, "consumequeue")
        for t in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            for q in sorted(os.listdir(os.path.join(base, t))):
                if q.isdigit() and str(int(q)) == q and os.path.isdir(os.path.join(base, t, q)):
                    # units whose record is still there (expired ones stay in old files)
                    units += sum(1 for u in refreader.read_consumequeue(root, t, int(q))
                                 if u[0] in starts)
        counts["refreader_records"] = len(recs)
        counts["refreader_units"] = units
    out["readers"] = counts
print(json.dumps(out))
"""


def test_damaged_stores_never_crash_hang_or_escape(base_store):
    rng = random.Random(SEED + 1)
    failures = []
    for i, (rel, mutation, abort) in enumerate(_cases(base_store)):
        d = Path(tempfile.mkdtemp(prefix="rmqfs-damage-"))
        try:
            root = d / "store"
            shutil.copytree(base_store, root, symlinks=True)
            outside = _outside(d)
            before = _fingerprint(outside)
            _mutate(root, rel, mutation, rng, outside)
            if abort:
                (root / "abort").write_text("1")
            conf = d / "broker.conf"
            conf.write_text(BROKER_CONF)
            code = CHILD.format(repo=str(REPO), root=str(root), conf=str(conf))
            case = f"case {i}: {mutation} {rel}{' +abort' if abort else ''}"
            try:
                p = subprocess.run(
                    [sys.executable, "-c", code],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    cwd=str(REPO),
                    env=dict(os.environ, PYTHONPATH=str(REPO)),
                )
            except subprocess.TimeoutExpired:
                failures.append(f"{case}: hung for 60 s")
                continue
            if p.returncode != 0:
                failures.append(f"{case}: child failed: {p.stderr[-2000:]}")
                continue
            out = json.loads(p.stdout.strip().splitlines()[-1])
            if out["open"].startswith("traceback"):
                failures.append(f"{case}: opening the store: {out['open']}")
            for cmd in ("verify", "recover"):
                rc, err = out[cmd]
                if rc not in (0, 1) or "Traceback" in err:
                    failures.append(f"{case}: rmqfs {cmd} exited {rc}: {err}")
            if _fingerprint(outside) != before:
                failures.append(f"{case}: something outside the store changed")
            r = out.get("readers")
            if r is not None:
                if not r["verify_ok"]:
                    failures.append(f"{case}: recover said OK but verify: {r['verify_errors']}")
                n = {
                    r["engine"],
                    r.get("columnar", 0),
                    r.get("refreader_units", 0),
                    r.get("refreader_records", 0),
                }
                if len(n) != 1:
                    failures.append(f"{case}: readers disagree after recover: {r}")
        finally:
            shutil.rmtree(d, ignore_errors=True)
    assert not failures, "\n".join(failures)
