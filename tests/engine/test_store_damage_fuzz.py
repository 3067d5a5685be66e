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

from conftest import REPO, SRC_PATH
from rmqfs.engine.store import Message, MessageStore, StoreConfig

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
    from rmqfs.mount import cli
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
from rmqfs.engine.errors import StoreError
from rmqfs.engine.store import MessageStore, StoreConfig
from rmqfs.engine.tools.verify import verify_store
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
    from rmqfs.engine.read import columnar
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
                    env=dict(os.environ, PYTHONPATH=SRC_PATH),
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


# -- hostile fields (issue 26): TOTALSIZE against the flags, units swapped or duplicated,
# compressed bodies that inflate past the limit, index chains that loop under a lying count.
# Every read path (recovery at a read-only and a writable open, iter_queue, getMessage,
# key lookups, the columnar decoder and its JSON lines, print-msg, query-msg -k) either
# reads or names the damage: no traceback, no hang, the reader's peak RSS bounded.
HOSTILE = ("totalsize_flags", "swap_units", "dup_units", "bomb", "index_chain")
HOSTILE_CASES = int(os.environ.get("RMQFS_HOSTILE_CASES", "10"))

HOSTILE_CHILD = r"""
import contextlib, io, json, os, sys, traceback
sys.path.insert(0, {repo!r})
from rmqfs.engine.errors import StoreError
from rmqfs.engine.store import MessageStore, StoreConfig
from rmqfs.engine.read import columnar
from rmqfs.engine.read.jsonline import build_lines
from rmqfs.mount import cli
out = {{"tracebacks": []}}
conf = {conf!r}
cfg = StoreConfig.from_broker_conf(conf)

def guard(what, fn):
    try:
        fn()
    except (StoreError, OSError):
        pass
    except BaseException:
        out["tracebacks"].append(what + ": " + traceback.format_exc()[-2000:])

def run_cli(*argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(list(argv))
        except SystemExit as e:
            rc = e.code
        except BaseException:
            rc = "traceback"
            traceback.print_exc(file=err)
    if rc not in (0, 1) or "Traceback" in err.getvalue():
        out["tracebacks"].append(" ".join(argv) + ": " + err.getvalue()[-2000:])

def vmhwm():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))

out["peaks_kb"] = []
for root in {roots!r}:
    try:  # reset the peak RSS (Linux: 5 > clear_refs), so that each case has its own
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    def reads(s):
        for t in s.topic_names():
            for q in s.queue_ids(t):
                guard(f"iter_queue {{t}}/{{q}}", lambda: sum(1 for _ in s.iter_queue(t, q)))
                guard(f"getMessage {{t}}/{{q}}", lambda: s.get_messages("g", t, q, 0))
            for key in ("NOPE", "k0-0", "k3-7"):
                guard(f"key {{key}}", lambda: s.query_by_key(t, key))
    guard("read-only open", lambda: reads(MessageStore(root, cfg, read_only=True)))
    def columnar_reads():
        files = columnar.StoreFiles(root)
        for t in files.topics():
            for q in files.queue_ids(t):
                def one():
                    lo, hi = files.min_offset(t, q), files.max_offset(t, q)
                    for b in files.read_batches(t, q, lo, hi):
                        build_lines(b)
                guard(f"columnar {{t}}/{{q}}", one)
    guard("columnar", columnar_reads)
    run_cli("print-msg", "-t", "A", root, "--config", conf)
    run_cli("query-msg", "-k", "NOPE", "-t", "A", root, "--config", conf)
    def writable():
        with MessageStore(root, cfg) as s:
            reads(s)
    guard("writable open", writable)
    out["peaks_kb"].append(vmhwm())
out["vmhwm_kb"] = vmhwm()
print(json.dumps(out))
"""


def _hostile(root: Path, kind: str, rng: random.Random) -> None:
    """Apply one hostile-field mutation to a copy of the base store."""
    from rmqfs.engine.format.consumequeue import UNIT
    from rmqfs.engine.format.indexfile import HEADER, INDEX_HEADER_SIZE, ITEM, SLOT
    from rmqfs.engine.format.message import INT32, SYSFLAG_POSITION

    cq_size, cl_size = (
        CONFIG["mapped_file_size_consume_queue"],
        CONFIG["mapped_file_size_commit_log"],
    )

    def units(t, q):
        d = root / "consumequeue" / t / str(q)
        data = b"".join(p.read_bytes() for p in sorted(d.iterdir()))
        base = int(sorted(d.iterdir())[0].name) // 20
        return base, [UNIT.unpack_from(data, i) for i in range(0, len(data) - 19, 20)]

    def write_unit(t, q, n, unit):
        at = n * 20
        p = root / "consumequeue" / t / str(q) / f"{at - at % cq_size:020d}"
        with open(p, "r+b") as f:
            f.seek(at % cq_size)
            f.write(UNIT.pack(*unit))

    t, q = rng.choice([("A", 0), ("A", 1), ("B", 0)])
    base, us = units(t, q)
    us = [u for u in us if u[1] > 0]
    if kind == "totalsize_flags":
        n = rng.randrange(len(us))
        off, _size, tags = us[n]
        p = root / "commitlog" / f"{off - off % cl_size:020d}"
        with open(p, "r+b") as f:
            f.seek(off % cl_size)
            head = bytearray(f.read(SYSFLAG_POSITION + 4))
            total = rng.randint(88, 102)
            INT32.pack_into(head, 0, total)
            sf = INT32.unpack_from(head, SYSFLAG_POSITION)[0]
            INT32.pack_into(head, SYSFLAG_POSITION, sf | rng.choice([0x10, 0x20, 0x30]))
            f.seek(off % cl_size)
            f.write(head)
        write_unit(t, q, base + n, (off, total, tags))
    elif kind == "swap_units":
        a, b = rng.sample(range(len(us)), 2)
        write_unit(t, q, base + a, us[b])
        write_unit(t, q, base + b, us[a])
    elif kind == "dup_units":
        a = rng.randrange(len(us) - 1)
        for n in range(a + 1, rng.randint(a + 2, len(us))):
            write_unit(t, q, base + n, us[a])
    elif kind == "bomb":
        import zstandard

        from rmqfs.engine.format.message import COMPRESSED_FLAG, COMPRESSION_ZSTD
        from stores import put_internal

        c = zstandard.ZstdCompressor(level=3).compressobj()
        bomb = b"".join(c.compress(bytes(1 << 20)) for _ in range(32)) + c.flush()
        with MessageStore(str(root), StoreConfig(**CONFIG)) as s:
            flags = COMPRESSED_FLAG | COMPRESSION_ZSTD
            put_internal(s, [Message(t, bomb, queue_id=q, compress=False, sys_flag=flags)])
    elif kind == "index_chain":
        files = sorted((root / "index").iterdir())
        p = rng.choice(files)
        slots = CONFIG["max_hash_slot_num"]
        with open(p, "r+b") as f:
            fields = list(HEADER.unpack(f.read(INDEX_HEADER_SIZE)))
            count = max(fields[5], 3)
            a, b = rng.sample(range(1, min(count, CONFIG["max_index_num"])), 2)
            fields[5] = rng.choice([count, 2**31 - 1])
            f.seek(0)
            f.write(HEADER.pack(*fields))
            f.seek(INDEX_HEADER_SIZE + rng.randrange(slots) * 4)
            f.write(SLOT.pack(a))
            items = INDEX_HEADER_SIZE + slots * 4
            for n, prev in ((a, b), (b, a)):
                f.seek(items + n * 20)
                h, phy, td, _ = ITEM.unpack(f.read(20))
                f.seek(items + n * 20)
                f.write(ITEM.pack(h, phy, td, prev))


def test_hostile_fields_never_crash_hang_or_blow_up(base_store):
    rng = random.Random(SEED + 2)
    d = Path(tempfile.mkdtemp(prefix="rmqfs-hostile-"))
    try:
        roots, cases = [], []
        for i in range(HOSTILE_CASES):
            kind = HOSTILE[i % len(HOSTILE)]
            root = d / f"store{i}"
            shutil.copytree(base_store, root, symlinks=True)
            _hostile(root, kind, rng)
            roots.append(str(root))
            cases.append(kind)
        conf = d / "broker.conf"
        conf.write_text(BROKER_CONF)
        code = HOSTILE_CHILD.format(repo=str(REPO), roots=roots, conf=str(conf))
        p = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,  # a hang fails the test (the cases take a few seconds)
            cwd=str(REPO),
            env=dict(os.environ, PYTHONPATH=os.pathsep.join([SRC_PATH, str(REPO / "tests")])),
        )
        assert p.returncode == 0, p.stderr[-3000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
        for kind, peak in zip(cases, out["peaks_kb"]):
            print(f"hostile {kind}: every read path, the reader's peak RSS {peak // 1024} MiB")
        assert not out["tracebacks"], "\n".join(out["tracebacks"])
        assert max(out["peaks_kb"]) < 1 << 20  # 1 GiB, the bound
    finally:
        shutil.rmtree(d, ignore_errors=True)
