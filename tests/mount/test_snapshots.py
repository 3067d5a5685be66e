"""Snapshots (issue 10, items 2-3): ``engine.live.snapshot`` freezes a consistent point of a live
store, ``SNAPSHOT.json`` manifests carry CRC32C sums, ``rmqfs snapshot-verify`` checks copies,
and ``MNT/snapshots/<name>/`` serves the frozen files to tar, rsync and restic.

Engine tests (no mount) first, then real mounts."""

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import refreader
from conftest import fuse, run_rmqfs
from rmqfs.engine.errors import InvalidNameError, NoSuchSnapshotError, SnapshotExistsError
from rmqfs.engine.format.crc import crc32c, crc32c_file, crc32c_zeros
from rmqfs.engine.live.snapshot import MANIFEST_NAME, SnapshotManager, freeze, verify_copy
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from stores import materialize


def small_store_config(**kw):
    return StoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
        **kw,
    )


def bodies_of(root: Path, config=None) -> dict:
    """``{(topic, queueId): [bodies]}`` after opening (recovering) the store at ``root``."""
    with MessageStore(str(root), config) as s:
        out = {}
        for (t, q), _cq in s.consume_queues.items():
            out[(t, q)] = [r.body for _, r in s.iter_queue(t, q)]
        offsets = {g: s.consumer_offsets.topics_of(g) for g in s.group_names()}
    return out, offsets


# --------------------------------------------------------------------------------------------
# crc32c helpers


def test_crc32c_zeros_matches_the_package():
    for n in (0, 1, 4095, 4097, 65536, 1 << 20, 3_000_001):
        for c in (0, 1, 0xDEADBEEF, 0xFFFFFFFF):
            assert crc32c_zeros(c, n) == crc32c(bytes(n), c)


def test_crc32c_file_with_holes(tmp_path):
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.write(os.urandom(10000))
        f.seek(5 << 20)
        f.write(b"data" + os.urandom(3 << 20))
        f.truncate(20 << 20)
    data = p.read_bytes()
    assert crc32c_file(str(p)) == (len(data), crc32c(data))


# --------------------------------------------------------------------------------------------
# freeze, engine level


def _put(store, n, topic="T", start=0, keys=True):
    return store.put_messages(
        [
            Message(
                topic,
                f"m-{start + i:06d}-{'x' * (i % 300)}".encode(),
                tags="A" if i % 2 else None,
                keys=[f"k{start + i}"] if keys else None,
            )
            for i in range(n)
        ]
    )


def test_snapshot_holds_exactly_the_state_of_its_instant(tmp_path):
    cfg = small_store_config()
    store = MessageStore(str(tmp_path / "s"), cfg)
    try:
        store.create_topic("T", 4)
        store.create_topic("U", 2)
        _put(store, 700)
        _put(store, 50, topic="U")
        store.create_group("G")
        store.commit_offset("G", "T", 1, 20)
        snap = freeze(store, "one")
        assert snap.commitlog_offset == store.commitlog.max_offset
        expect, _ = {}, None
        for t, q in store.consume_queues:
            expect[(t, q)] = [r.body for _, r in store.iter_queue(t, q)]
        # after the freeze: more messages (rolling segments), another commit, expiry-like unlink
        _put(store, 900, start=700)
        store.commit_offset("G", "T", 1, 150)
        store.commit_offset("G", "T", 2, 5)
        store.create_topic("V", 1)
        out = materialize(snap, tmp_path / "copy")
        assert not (out / "abort").exists() and not (out / "lock").exists()
        got, offsets = bodies_of(out, cfg)
        assert got == expect
        assert offsets == {"G": {"T": {1: 20}}}
        # the index of the copy answers for keys before the snapshot, not after
        with MessageStore(str(out), cfg, read_only=True) as s:
            assert [r.body for r in s.query_by_key("T", "k5")] == [expect_body(expect, b"-000005-")]
            assert s.query_by_key("T", "k800") == []
            assert "V" not in s.topic_names()
            assert s.commitlog.max_offset == snap.commitlog_offset
    finally:
        snap.release()
        store.close()


def expect_body(expect, marker):
    return next(b for bodies in expect.values() for b in bodies if marker in b)


def test_restored_snapshot_recovers_normally_without_rewriting(tmp_path):
    """No abort: normal recovery; nothing to repair, so recovery changes no byte."""
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 4)
        _put(store, 500)
        snap = freeze(store, "a")
        _put(store, 100, start=500)
        out = materialize(snap, tmp_path / "copy")
        snap.release()
    sums = {p: crc32c_file(str(p)) for p in out.rglob("*") if p.is_file()}
    with MessageStore(str(out), cfg) as s:
        assert s.last_exit_ok
        assert sum(cq.max_offset for cq in s.consume_queues.values()) == 500
    after = {p: crc32c_file(str(p)) for p in out.rglob("*") if p.is_file() and p in sums}
    changed = [str(p.relative_to(out)) for p in sums if sums[p] != after[p]]
    assert changed in ([], ["checkpoint"]), changed  # close rewrites the checkpoint
    recs = refreader.read_commitlog(out / "commitlog", check=True)
    assert len(recs) == 500


def test_snapshot_bytes_survive_expiry_and_never_change(tmp_path):
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 2)
        _put(store, 600)
        snap = freeze(store, "a")
        first = {rel: f.read(0, f.size) for rel, f in snap.files.items()}
        # expiry deletes the oldest CommitLog segments and ConsumeQueue files
        seg = sorted(os.listdir(tmp_path / "s" / "commitlog"))[0]
        store.commitlog.files.delete_first()
        assert not (tmp_path / "s" / "commitlog" / seg).exists()
        _put(store, 600, start=600)
        again = {rel: f.read(0, f.size) for rel, f in snap.files.items()}
        assert again == first
        snap.release()


def test_manager_names_manifest_and_drop(tmp_path):
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 2)
        _put(store, 300)
        mgr = SnapshotManager(store, str(tmp_path / "cache"))
        (tmp_path / "cache").mkdir()
        for bad in ("", ".x", "-x", "a/b", "x" * 129, "a b"):
            with pytest.raises(InvalidNameError):
                mgr.create(bad)
        a = mgr.create("a")
        with pytest.raises(SnapshotExistsError):
            mgr.create("a")
        doc = json.loads(mgr.manifest(a))
        assert doc["name"] == "a" and doc["commitLogOffset"] == a.commitlog_offset
        assert doc["messageCount"] == 300
        assert set(doc["files"]) == set(a.files)
        for rel, f in a.files.items():
            data = f.read(0, f.size)
            assert doc["files"][rel] == {
                "size": f.size,
                "stored": f.stored,
                "crc32c": f"{crc32c(data):08x}",
            }
            # stored: the prefix that holds data (what an upload sends), zeros after it
            assert data[f.stored :] == bytes(f.size - f.stored), rel
        live = max(r for r in a.files if r.startswith("commitlog/"))
        assert a.files[live].stored == a.commitlog_offset - int(live[10:]) < a.files[live].size
        out = materialize(a, tmp_path / "copy", mgr.manifest(a))
        _, problems = verify_copy(str(out))
        assert problems == []
        # unchanged files keep their mtime in the next snapshot, changed ones move by >= 1 s
        _put(store, 10, start=300)
        b = mgr.create("b")
        for rel, f in b.files.items():
            old = a.files.get(rel)
            if old is None:
                continue
            if old.read(0, old.size) == f.read(0, f.size):
                assert f.mtime_ns == old.mtime_ns, rel
            else:
                assert f.mtime_ns // 10**9 > old.mtime_ns // 10**9, rel
        assert json.loads(mgr.manifest(b))["messageCount"] == 310
        assert mgr.names() == ["a", "b"]
        mgr.drop("a")
        with pytest.raises(NoSuchSnapshotError):
            mgr.drop("a")
        assert mgr.names() == ["b"]
        b_files = {rel: (f.read(0, f.size), f.mtime_ns) for rel, f in b.files.items()}
        mgr.close()
        # a new manager (a remount with the same --cache-dir) remembers the mtimes
        _put(store, 10, start=310)
        mgr2 = SnapshotManager(store, str(tmp_path / "cache"))
        c = mgr2.create("c")
        moved = 0
        for rel, f in c.files.items():
            if rel not in b_files:
                continue
            data, mtime = b_files[rel]
            if data == f.read(0, f.size):
                assert f.mtime_ns == mtime, rel
            else:
                moved += 1
                assert f.mtime_ns // 10**9 > mtime // 10**9, rel
        assert moved >= 3  # the live segment, a ConsumeQueue, the index, the checkpoint
        mgr2.close()
    # the sums of the store's files are cached for the next snapshot (and mount)
    assert json.loads((tmp_path / "cache" / "snapshot-crc32c.json").read_text())


def test_a_snapshot_that_would_leave_too_few_descriptors_is_refused(tmp_path):
    """A snapshot holds a descriptor per store file: snapshots taken until the limit ran out
    left the owner's next produce, a reader's open and the store's next segment failing with
    EMFILE. One that would leave fewer than the reserve free is refused (EMFILE, with the
    counts and what to do), nothing held; with room it is taken."""
    import resource

    from rmqfs.engine.errors import SnapshotDescriptorsError
    from rmqfs.engine.live.snapshot import DESCRIPTOR_RESERVE, descriptors_needed

    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 2)
        _put(store, 300)
        need = descriptors_needed(store)
        assert need > 4  # CommitLog segments, queue files, index files
        mgr = SnapshotManager(store, None)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        used = len(os.listdir("/proc/self/fd"))
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (used + need + DESCRIPTOR_RESERVE - 2, hard))
            with pytest.raises(SnapshotDescriptorsError) as info:
                mgr.create("a")
            assert info.value.errno == errno.EMFILE
            assert f"needs {need}" in str(info.value) and "ulimit -n" in str(info.value)
            assert mgr.names() == [] and len(os.listdir("/proc/self/fd")) <= used + 1
            resource.setrlimit(resource.RLIMIT_NOFILE, (used + need + DESCRIPTOR_RESERVE + 8, hard))
            mgr.create("a")
            assert mgr.names() == ["a"]
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        mgr.close()


def test_verify_copy_names_missing_short_and_damaged_files(tmp_path):
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 2)
        _put(store, 400)
        mgr = SnapshotManager(store)
        a = mgr.create("a")
        out = materialize(a, tmp_path / "copy", mgr.manifest(a))
        mgr.close()
    cl = sorted((out / "commitlog").iterdir())
    data = bytearray(cl[0].read_bytes())
    data[1234] ^= 0x01
    cl[0].write_bytes(bytes(data))
    cqs = sorted(p for p in (out / "consumequeue" / "T").rglob("0*") if p.is_file())
    with open(cqs[0], "r+b") as f:
        f.truncate(100)
    (out / "config" / "topics.json").unlink()
    (out / "abort").write_text("1")
    _, problems = verify_copy(str(out))
    what = {rel: w.split(":")[0] for rel, w in problems}
    assert what == {
        f"commitlog/{cl[0].name}": "damaged",
        str(cqs[0].relative_to(out)): "short",
        "config/topics.json": "missing",
        "abort": "extra",
    }, problems
    res = run_rmqfs("snapshot-verify", out, check=False)
    assert res.returncode == 1
    for name in (cl[0].name, "topics.json", cqs[0].name):
        assert name in res.stdout + res.stderr


def test_freeze_on_a_read_only_store_writes_nothing(tmp_path):
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 2)
        _put(store, 300)
    before = {
        p: (p.stat().st_mtime_ns, crc32c_file(str(p)))
        for p in (tmp_path / "s").rglob("*")
        if p.is_file()
    }
    with MessageStore(str(tmp_path / "s"), cfg, read_only=True) as ro:
        mgr = SnapshotManager(ro)
        a = mgr.create("a")
        out = materialize(a, tmp_path / "copy", mgr.manifest(a))
        mgr.close()
    after = {
        p: (p.stat().st_mtime_ns, crc32c_file(str(p)))
        for p in (tmp_path / "s").rglob("*")
        if p.is_file()
    }
    assert before == after
    assert verify_copy(str(out))[1] == []
    got, _ = bodies_of(out, cfg)
    assert sum(len(v) for v in got.values()) == 300


def test_freeze_under_sync_flush_excludes_unflushed_puts(tmp_path):
    cfg = small_store_config(flush_disk_type="SYNC_FLUSH")
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 1)
        _put(store, 100)
        # a put appended but waiting for its flush is not acknowledged: not in the snapshot
        with store.put_lock:
            store.flusher.add_pending(
                store.commitlog.max_offset + 10,
                [type("D", (), {"commitlog_offset": store.commitlog.max_offset})()],
            )
            snap = freeze(store, "a")
            store.flusher.pending().pop()
        assert snap.commitlog_offset == store.commitlog.max_offset
        snap.release()


def test_freeze_while_threads_put_holds_exactly_the_acknowledged_puts(tmp_path):
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 4)
        acked = dict.fromkeys(range(4), 0)
        stop = threading.Event()

        def producer(k):
            i = 0
            while not stop.is_set():
                store.put_messages(
                    [Message("T", f"w{k}-{i + j:07d}".encode(), keys=[f"w{k}"]) for j in range(10)]
                )
                i += 10
                acked[k] = i

        threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        try:
            while min(acked.values()) < 300:
                time.sleep(0.001)
            before = dict(acked)
            snap = freeze(store, "a")
            after = dict(acked)
            time.sleep(0.05)
        finally:
            stop.set()
            for th in threads:
                th.join()
        assert store.commitlog.max_offset > snap.commitlog_offset
        out = materialize(snap, tmp_path / "copy")
        snap.release()
    got, _ = bodies_of(out, cfg)
    per = {}
    for bodies in got.values():
        for b in bodies:
            k, _, i = b.decode().partition("-")
            per.setdefault(k, []).append(int(i))
    for k in range(4):
        seq = sorted(per[f"w{k}"])
        assert seq == list(range(len(seq))) and len(seq) % 10 == 0
        assert before[k] <= len(seq) <= after[k] + 10
    assert verify_problems(out) == []


def verify_problems(out: Path) -> list:
    """``rmqfs verify`` of a restored copy: its errors and warnings (records, units, index
    items; an ``abort`` or lagging derived files would be warnings)."""
    res = run_rmqfs("verify", out, "--json", check=False)
    return json.loads(res.stdout)["problems"]


def test_snapshot_of_a_read_only_store_includes_units_kept_in_memory(tmp_path):
    """A read-only store that had to rebuild its ConsumeQueues in memory (here: deleted)
    snapshots them as files, so the copy holds complete queues."""
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 2)
        _put(store, 500)
    shutil.rmtree(tmp_path / "s" / "consumequeue")
    (tmp_path / "s" / "abort").write_text("")  # so that recovery rebuilds them (in memory)
    with MessageStore(str(tmp_path / "s"), cfg, read_only=True) as ro:
        assert sum(cq.max_offset for cq in ro.consume_queues.values()) == 500
        snap = freeze(ro, "a")
        out = materialize(snap, tmp_path / "copy")
        snap.release()
    assert not (tmp_path / "s" / "consumequeue").exists()
    units = sum(len(refreader.read_consumequeue(out, "T", q)) for q in range(2))
    assert units == 500
    got, _ = bodies_of(out, cfg)
    assert sum(len(v) for v in got.values()) == 500


# --------------------------------------------------------------------------------------------
# Real mounts

PRODUCER = r"""
import os, sys
path, acked, name = sys.argv[1], sys.argv[2], sys.argv[3]
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
i = 0
while not os.path.exists(acked + ".stop"):
    os.write(fd, "".join(f"{name}-{i + k:07d}\n" for k in range(50)).encode())
    i += 50                                # returns once the 50 messages are stored
    with open(acked + ".tmp", "w") as f:
        f.write(str(i))
    os.replace(acked + ".tmp", acked)      # i messages acknowledged
os.close(fd)
"""

COMMITTER = r"""
import os, sys, time
path, acked, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(1, top + 1):
    if os.path.exists(acked + ".stop"):
        break
    with open(path, "w") as f:
        f.write(f"{i}\n")                  # committed once close() returns
    with open(acked + ".tmp", "w") as f:
        f.write(str(i))
    os.replace(acked + ".tmp", acked)
    time.sleep(0.002)
"""


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True, **kw)


def read_int(p: Path) -> int:
    try:
        return int(p.read_text())
    except (FileNotFoundError, ValueError):
        return 0


def check_copy(copy: Path, mount_store, name, acked_before, acked_after, committed):
    """snapshot-verify passes, and the copy mounts with a normal recovery and holds, per
    producer, a whole-batch prefix of its messages at least what was acknowledged before
    the mkdir and at most what was acknowledged right after it (plus the batch in flight)."""
    res = run_rmqfs("snapshot-verify", copy, check=False)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr
    assert not (copy / "abort").exists()
    assert verify_problems(copy) == []
    m = mount_store(copy, name=name)
    bodies = (m.mnt / "topics" / "T" / "bodies.txt").read_text().splitlines()
    offset = int((m.mnt / "groups" / "G" / "T" / "0" / "offset").read_text())
    m.umount()
    assert bodies[:2000] == [f"old-{i}" for i in range(2000)]
    per = {}
    for b in bodies[2000:]:
        k, _, i = b.partition("-")
        per.setdefault(k, []).append(int(i))
    for k in acked_before:
        got = sorted(per.get(k, []))
        assert got == list(range(len(got))), f"{k}: not a prefix, or doubles"
        assert len(got) % 50 == 0, f"{k}: a write stored in part"
        assert acked_before[k] <= len(got) <= acked_after[k] + 50, (k, len(got))
    assert committed[0] <= offset <= committed[1] + 1, (offset, committed)
    return bodies


@fuse
@pytest.mark.fuse
@pytest.mark.skipif(
    not (shutil.which("rsync") and shutil.which("restic")), reason="rsync and restic needed"
)
def test_snapshot_while_producing_copied_with_tar_rsync_restic(mount_store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=262144\nmappedFileSizeConsumeQueue=4000\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "T"
    os.mkdir(t)
    (t / "produce").write_text("".join(f"old-{i}\n" for i in range(2000)))
    os.mkdir(m.mnt / "groups" / "G")
    procs = []
    acks = {f"p{k}": tmp_path / f"acked-p{k}" for k in range(4)}
    for name, ack in acks.items():
        procs.append(
            subprocess.Popen([sys.executable, "-c", PRODUCER, str(t / "produce"), str(ack), name])
        )
    cack = tmp_path / "acked-commit"
    procs.append(
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                COMMITTER,
                str(m.mnt / "groups" / "G" / "T" / "0" / "offset"),
                str(cack),
                "500",
            ]
        )
    )
    try:
        while min(read_int(a) for a in acks.values()) < 500 or read_int(cack) < 20:
            time.sleep(0.01)
        before = {k: read_int(a) for k, a in acks.items()}
        c_before = read_int(cack)
        os.mkdir(m.mnt / "snapshots" / "s1")
        after = {k: read_int(a) for k, a in acks.items()}
        c_after = read_int(cack)
        snap = m.mnt / "snapshots" / "s1"
        # copies while the producers go on
        sh(f"tar -C '{snap}' -Scf '{tmp_path}/s1.tar' .")
        rs = tmp_path / "rsync"
        first = sh(f"rsync -a --sparse --stats -i '{snap}/' '{rs}/'").stdout
        second = sh(f"rsync -a --sparse --stats -i '{snap}/' '{rs}/'").stdout
        env = dict(
            os.environ,
            RESTIC_PASSWORD="test",
            RESTIC_REPOSITORY=str(tmp_path / "repo"),
            RESTIC_CACHE_DIR=str(tmp_path / "rcache"),
        )
        sh("restic init -q", env=env)
        sh("restic backup -q .", env=env, cwd=snap)
        time.sleep(0.3)
    finally:
        for a in list(acks.values()) + [cack]:
            Path(str(a) + ".stop").write_text("")
        for p in procs:
            p.wait(timeout=60)
    assert max(read_int(a) for a in acks.values()) > max(after.values()), (
        "the producers should write on after the mkdir"
    )
    assert "Number of regular files transferred: 0" not in first
    assert "Number of regular files transferred: 0" in second, second
    assert not [x for x in second.splitlines() if x[:2] in (">f", "cd", "cL")]
    # tar
    tcopy = tmp_path / "tar"
    tcopy.mkdir()
    sh(f"tar -C '{tcopy}' -xf '{tmp_path}/s1.tar'")
    # restic
    sh(f"restic restore -q latest --target '{tmp_path}/restic'", env=env)
    rcopy = next((tmp_path / "restic").rglob(MANIFEST_NAME)).parent
    manifest = json.loads((snap / MANIFEST_NAME).read_text())
    for copy in (tcopy, rs, rcopy):
        assert json.loads((copy / MANIFEST_NAME).read_text()) == manifest
    # a flipped byte is caught, and named
    seg = sorted((tcopy / "commitlog").iterdir())[0]
    with open(seg, "r+b") as f:
        f.seek(5000)
        b = f.read(1)
        f.seek(5000)
        f.write(bytes([b[0] ^ 0x10]))
    res = run_rmqfs("snapshot-verify", tcopy, check=False)
    assert res.returncode == 1 and f"commitlog/{seg.name}: damaged" in res.stdout, res.stdout
    with open(seg, "r+b") as f:
        f.seek(5000)
        f.write(b)
    results = [
        check_copy(c, mount_store, f"m-{i}", before, after, (c_before, c_after))
        for i, c in enumerate((tcopy, rs, rcopy))
    ]
    assert results[0] == results[1] == results[2]
    assert len(results[0]) - 2000 == manifest["messageCount"] - 2000
    m.umount()


@fuse
@pytest.mark.fuse
@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync not installed")
def test_rsync_of_a_later_snapshot_copies_only_changed_files(mount_store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=131072\nmappedFileSizeConsumeQueue=2000\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "T"
    os.mkdir(t)
    (t / "produce").write_text("".join(f"first-{i}-{'z' * 100}\n" for i in range(3000)))
    os.mkdir(m.mnt / "groups" / "G")
    (m.mnt / "groups" / "G" / "T" / "1" / "offset").write_text("7\n")
    os.mkdir(m.mnt / "snapshots" / "a")
    dst = tmp_path / "backup"
    rsync = "rsync -a --sparse --delete --modify-window=-1 --stats -i"  # the README's
    sh(f"{rsync} '{m.mnt}/snapshots/a/' '{dst}/'")
    again = sh(f"{rsync} '{m.mnt}/snapshots/a/' '{dst}/'").stdout
    assert "Number of regular files transferred: 0" in again, again
    # only queue 2 gets new messages
    (t / "2" / "produce").write_text("".join(f"second-{i}\n" for i in range(40)))
    os.mkdir(m.mnt / "snapshots" / "b")  # within the same second or not: changed files move
    ma = json.loads((m.mnt / "snapshots" / "a" / MANIFEST_NAME).read_text())["files"]
    mb = json.loads((m.mnt / "snapshots" / "b" / MANIFEST_NAME).read_text())["files"]
    changed = {rel for rel in mb if ma.get(rel) != mb[rel]} | {MANIFEST_NAME}
    out = sh(f"{rsync} '{m.mnt}/snapshots/b/' '{dst}/'").stdout
    sent = {x.split(" ", 1)[1] for x in out.splitlines() if x.startswith(">f")}
    assert sent == changed, (sent, changed)
    assert any(r.startswith("consumequeue/T/2/") for r in changed)
    assert not any(r.startswith("consumequeue/T/0/") for r in changed)
    assert run_rmqfs("snapshot-verify", dst).returncode == 0
    m.umount()
    got, offsets = bodies_of(dst)
    assert got[("T", 2)][-40:] == [f"second-{i}".encode() for i in range(40)]
    assert sum(len(v) for v in got.values()) == 3040
    assert offsets == {"G": {"T": {1: 7}}}


@fuse
@pytest.mark.fuse
def test_snapshots_on_a_read_only_mount_and_rmdir(mount_store, tmp_path):
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    (m.mnt / "topics" / "T" / "produce").write_text("".join(f"m{i}\n" for i in range(1000)))
    m.umount()
    files = [p for p in m.store.rglob("*") if p.is_file()]
    before = {p: (p.stat().st_mtime_ns, crc32c_file(str(p))) for p in files}
    ro = mount_store(m.store, "ro", name="ro")
    snaps = ro.mnt / "snapshots"
    assert os.listdir(snaps) == []
    os.mkdir(snaps / "one")
    assert os.listdir(snaps) == ["one"]
    for bad, err in (("one", errno.EEXIST), (".hidden", errno.EINVAL), ("a b", errno.EINVAL)):
        with pytest.raises(OSError) as exc:
            os.mkdir(snaps / bad)
        assert exc.value.errno == err, bad
    with pytest.raises(OSError) as exc:
        os.mkdir(ro.mnt / "topics" / "New")
    assert exc.value.errno == errno.EROFS
    with pytest.raises(OSError) as exc:
        open(ro.mnt / "raw" / "checkpoint", "r+b")  # noqa: SIM115 - the open must fail
    assert exc.value.errno == errno.EROFS
    copy = tmp_path / "copy"
    sh(f"tar -C '{snaps}/one' -Scf - . | (mkdir '{copy}' && tar -C '{copy}' -xf -)")
    assert run_rmqfs("snapshot-verify", copy).returncode == 0
    assert sorted(os.listdir(copy)) == [
        MANIFEST_NAME,
        "checkpoint",
        "commitlog",
        "config",
        "consumequeue",
        "index",
    ]
    # an open file keeps reading after rmdir; the snapshot is gone from the tree
    seg = sorted((snaps / "one" / "commitlog").iterdir())[0]
    with open(seg, "rb") as f:
        head = f.read(4096)
        os.rmdir(snaps / "one")
        assert f.read(4096) == (copy / "commitlog" / seg.name).read_bytes()[4096:8192]
    assert head == (copy / "commitlog" / seg.name).read_bytes()[:4096]
    assert os.listdir(snaps) == []
    with pytest.raises(FileNotFoundError):
        os.stat(snaps / "one")
    with pytest.raises(FileNotFoundError):
        os.rmdir(snaps / "one")
    with pytest.raises(OSError) as exc:
        os.rmdir(ro.mnt / "topics" / "T")
    assert exc.value.errno == errno.EROFS
    ro.umount()
    after = {p: (p.stat().st_mtime_ns, crc32c_file(str(p))) for p in files}
    assert before == after
    assert sorted(p for p in m.store.rglob("*") if p.is_file()) == sorted(files)
    got, _ = bodies_of(copy)
    assert sum(len(v) for v in got.values()) == 1000


@fuse
@pytest.mark.fuse
@pytest.mark.skipif(shutil.which("restic") is None, reason="restic not installed")
def test_restic_of_the_same_snapshot_name_reads_only_changed_files(mount_store, tmp_path):
    """README recipe: mkdir nightly / restic backup --ignore-inode / rmdir nightly, daily."""
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=131072\nmappedFileSizeConsumeQueue=2000\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "T"
    os.mkdir(t)
    (t / "produce").write_text("".join(f"r-{i}-{'q' * 80}\n" for i in range(2000)))
    env = dict(
        os.environ,
        RESTIC_PASSWORD="test",
        RESTIC_REPOSITORY=str(tmp_path / "repo"),
        RESTIC_CACHE_DIR=str(tmp_path / "rcache"),
    )
    sh("restic init -q", env=env)
    nightly = m.mnt / "snapshots" / "nightly"

    def backup():
        os.mkdir(nightly)
        out = sh(f"restic backup --json --ignore-inode '{nightly}'", env=env).stdout
        manifest = json.loads((nightly / MANIFEST_NAME).read_text())["files"]
        os.rmdir(nightly)
        return [json.loads(x) for x in out.splitlines() if '"summary"' in x][-1], manifest

    first, m1 = backup()
    assert first["files_new"] == len(m1) + 1
    same, m2 = backup()  # nothing happened: only SNAPSHOT.json (its time) differs
    assert (same["files_new"], same["files_changed"]) == (0, 1), same
    (t / "3" / "produce").write_text("".join(f"later-{i}\n" for i in range(30)))
    later, m3 = backup()
    changed = [rel for rel in m3 if m2.get(rel) != m3[rel]]
    assert later["files_new"] + later["files_changed"] == len(changed) + 1, (later, changed)
    assert later["files_unmodified"] == len(m3) - len(changed)
    m.umount()


def test_snapshot_verify_command_line(tmp_path):
    res = run_rmqfs("snapshot-verify", tmp_path / "nope", check=False)
    assert res.returncode == 1 and "rmqfs: " in res.stderr and "not a directory" in res.stderr
    (tmp_path / "empty").mkdir()
    res = run_rmqfs("snapshot-verify", tmp_path / "empty", check=False)
    assert res.returncode == 1 and "no SNAPSHOT.json" in res.stderr
    (tmp_path / "empty" / MANIFEST_NAME).write_text("{nope")
    res = run_rmqfs("snapshot-verify", tmp_path / "empty", check=False)
    assert res.returncode == 1 and "not JSON" in res.stderr
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 1)
        _put(store, 50)
        mgr = SnapshotManager(store)
        a = mgr.create("a")
        out = materialize(a, tmp_path / "copy", mgr.manifest(a))
        mgr.close()
    res = run_rmqfs("snapshot-verify", out, "--json", "-j", "1")
    doc = json.loads(res.stdout)
    assert doc["ok"] is True and doc["name"] == "a" and doc["problems"] == []
    (out / "checkpoint").unlink()
    res = run_rmqfs("snapshot-verify", out, "--json", check=False)
    assert res.returncode == 1
    assert json.loads(res.stdout)["problems"] == [{"file": "checkpoint", "problem": "missing"}]


def test_frozen_file_piece_agrees_with_read(tmp_path):
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 2)
        _put(store, 300)
        snap = freeze(store, "a")
        import random

        rnd = random.Random(5)
        for f in snap.files.values():
            for _ in range(200):
                off = rnd.randrange(0, f.size + 10)
                n = rnd.choice([1, 20, 4096, 65536, 1 << 20])
                p = f.piece(off, n)
                if p is None:
                    continue
                if p[0] == "fd":
                    got = os.pread(p[1], p[3], p[2])
                elif p[0] == "zeros":
                    got = bytes(p[1])
                else:
                    got = bytes(p[1])
                assert got == f.read(off, n), (f.rel, off, n)
        snap.release()


def test_dropped_snapshots_close_every_descriptor(tmp_path):
    cfg = small_store_config()
    with MessageStore(str(tmp_path / "s"), cfg) as store:
        store.create_topic("T", 4)
        _put(store, 2000)
        before = len(os.listdir("/proc/self/fd"))
        mgr = SnapshotManager(store)
        snaps = [mgr.create(f"s{i}") for i in range(5)]
        assert len(os.listdir("/proc/self/fd")) > before
        mgr.drop("s0")  # maybe while its sums are computed: they stop, the fds close after
        try:
            json.loads(mgr.manifest(snaps[0]))
        except InterruptedError:
            pass
        json.loads(mgr.manifest(snaps[1]))
        mgr.close()  # drops the rest
        assert mgr.names() == []
        assert len(os.listdir("/proc/self/fd")) == before


@fuse
@pytest.mark.fuse
def test_a_controller_replica_s_snapshot_carries_its_epoch_file_and_identity(mount_store, tmp_path):
    """A 5.x controller-mode replica (epochFileCheckpoint, .bak, brokerIdentity: EpochFileCache,
    BrokerIdentity), mounted -o ro: MNT/snapshots/<name> serves the three files byte for byte,
    and a copy of it verifies (issue 22, section 2.6)."""
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    (m.mnt / "topics" / "T" / "produce").write_text("a\nb\n")
    m.umount()
    kept = {
        "epochFileCheckpoint": b"1\n3402287402\n1-0\n",
        "epochFileCheckpoint.bak": b"1\n3402287402\n1-0\n",
        "brokerIdentity": b"brokerClusterName=c\nbrokerName=b\nbrokerId=-1\n",
    }
    for n, data in kept.items():
        (m.store / n).write_bytes(data)
    ro = mount_store(m.store, "ro", name="ro")
    snap = ro.mnt / "snapshots" / "one"
    os.mkdir(snap)
    assert {n: (snap / n).read_bytes() for n in kept} == kept
    copy = tmp_path / "copy"
    sh(f"tar -C '{snap}' -Scf - . | (mkdir '{copy}' && tar -C '{copy}' -xf -)")
    assert run_rmqfs("snapshot-verify", copy).returncode == 0
    assert {n: (copy / n).read_bytes() for n in kept} == kept
    os.rmdir(snap)


def test_a_snapshot_made_again_under_its_name_while_the_old_one_was_open(mount_store):
    """``rmdir snapshots/S`` while a file of S is open, then ``mkdir snapshots/S`` again: the
    new S got the old directory's inode number, which the kernel still held as removed, and
    came up empty (ENOENT for its SNAPSHOT.json) until remount; what is made again under a
    name gets new inode numbers, as for topics and groups."""
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    (m.mnt / "topics" / "T" / "produce").write_text("one\n")
    s = m.mnt / "snapshots" / "x4"
    os.mkdir(s)
    fd = os.open(s / "checkpoint", os.O_RDONLY)
    os.rmdir(s)
    os.close(fd)
    os.mkdir(s)
    try:
        assert "SNAPSHOT.json" in os.listdir(s) and "commitlog" in os.listdir(s)
        assert json.loads((s / "SNAPSHOT.json").read_text())["files"]
    finally:
        os.rmdir(s)
