"""Backup and restore through ``raw/`` (issue 4, item 5; docs/backup.md):
``tar -C MNT/raw -cf backup.tar .`` of a live mount while a producer writes, extracted into an
empty directory, is a store that holds every message acknowledged before tar began, recovers,
verifies and mounts."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import refreader
from conftest import fuse
from rmqfs.engine.format import indexfile

pytestmark = [fuse, pytest.mark.fuse]

PRODUCER = r"""
import os, sys
path, acked = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
i = 0
while not os.path.exists(acked + ".stop"):
    batch = "".join(f"live-{i + k:07d}-{'y' * ((i + k) % 200)}\n" for k in range(50))
    os.write(fd, batch.encode())          # returns once the 50 messages are stored
    i += 50
    with open(acked + ".tmp", "w") as f:
        f.write(str(i))
    os.replace(acked + ".tmp", acked)     # i lines acknowledged
os.close(fd)
"""


def verify_store(store: Path) -> list[dict]:
    """Open the store with the engine (recovery), close it, then check every record and every
    ConsumeQueue unit with the independent reader. Returns the records."""
    from rmqfs.engine.store import MessageStore

    with MessageStore(str(store)) as s:
        n = {(t, q): (s.min_offset(t, q), s.max_offset(t, q)) for t, q in s.consume_queues}
    assert not (store / "abort").exists()
    recs = refreader.read_commitlog(store / "commitlog", check=True)
    by_offset = {r["physicalOffset"]: r for r in recs}
    for (topic, q), (lo, hi) in n.items():
        units = refreader.read_consumequeue(store, topic, q)
        assert len(units) == hi - lo
        for i, (off, size, _) in enumerate(units):
            rec = by_offset[off]
            assert rec["totalSize"] == size and rec["queueId"] == q
            assert rec["queueOffset"] == lo + i
    return recs


def test_tar_of_a_live_mount_restores_every_acknowledged_message(mount_store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=262144\nmappedFileSizeConsumeQueue=4000\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "Live"
    os.mkdir(t)
    before = [f"old-{i}" for i in range(3000)]
    (t / "produce").write_text("".join(x + "\n" for x in before))
    os.mkdir(m.mnt / "groups" / "G")
    (m.mnt / "groups" / "G" / "Live" / "0" / "offset").write_text("100\n")
    acked = tmp_path / "acked"
    prod = subprocess.Popen([sys.executable, "-c", PRODUCER, str(t / "produce"), str(acked)])
    try:
        while not acked.exists() or int(acked.read_text()) < 2000:
            time.sleep(0.01)
        n_before_tar = int(acked.read_text())
        backup = tmp_path / "backup.tar"
        res = subprocess.run(
            ["tar", "-C", str(m.mnt / "raw"), "-cf", str(backup), "."],
            capture_output=True,
            text=True,
        )
        # 0, or 1 with "file changed as we read it" for the files the producer was writing
        assert res.returncode in (0, 1), res.stderr
        for line in res.stderr.splitlines():
            assert "file changed as we read it" in line, line
        n_after_tar = int(acked.read_text())
    finally:
        Path(str(acked) + ".stop").write_text("")
        prod.wait(timeout=30)
    assert n_after_tar > n_before_tar, "the producer should write while tar reads"
    restored = tmp_path / "restored"
    restored.mkdir()
    subprocess.run(["tar", "-C", str(restored), "-xf", str(backup)], check=True)
    recs = verify_store(restored)
    bodies = [r["body"].decode() for r in recs]
    live = [f"live-{i:07d}-{'y' * (i % 200)}" for i in range(n_after_tar + 50)]
    assert bodies[: len(before)] == before
    # every message acknowledged before tar began, then a prefix of what came after: whole
    # messages only, no gap, nothing twice
    rest = bodies[len(before) :]
    assert rest == live[: len(rest)]
    assert len(rest) >= n_before_tar
    # the restored store mounts, with the consumer offset committed before the backup
    r = mount_store(restored, name="mnt-restored")
    assert (r.mnt / "groups" / "G" / "Live" / "0" / "offset").read_text() == "100\n"
    got = (r.mnt / "topics" / "Live" / "bodies.txt").read_text().splitlines()
    assert got == bodies
    r.umount()


def test_du_counts_the_store_and_tar_s_copies_views_whole(mount_store, tmp_path):
    """``du MNT/raw`` equals ``du STORE`` block for block (directories included); decoded
    files hold no store data and count one block each, so ``du MNT`` stays near the store's
    size instead of adding every view's bytes; ``tar -S`` still copies a view whole (a file
    of 0 blocks would be archived as one unread hole), and plain ``tar`` of a preallocated
    segment takes its full size where ``tar -S`` keeps its zero tail sparse."""
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=16777216\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "T"
    os.mkdir(t)
    lines = b"".join(b"line %06d %s\n" % (i, b"z" * 300) for i in range(20000))
    with open(t / "produce", "wb") as f:
        f.write(lines)
        os.fsync(f.fileno())  # the store flushed: its files stop changing under du
    assert (t / "bodies.txt").read_bytes() == lines  # rendered

    def du(*args):
        out = subprocess.run(
            ["du", "-s", *map(str, args)], capture_output=True, text=True, check=True
        ).stdout
        return int(out.split()[0])

    def du_raw_and_store(rel):  # the store between two equal measures (no write between)
        for _ in range(20):
            before, raw, after = du(m.store / rel), du(m.mnt / "raw" / rel), du(m.store / rel)
            if before == after:
                return raw, after
            time.sleep(0.1)
        raise AssertionError(f"{rel}: the store kept changing")

    for rel in ("", "commitlog", "consumequeue", "consumequeue/T", "index", "config"):
        raw, store = du_raw_and_store(rel)
        assert raw == store, rel
    view_bytes = (t / "messages.jsonl").stat().st_size + len(lines)
    assert view_bytes > 12_000_000
    assert du(m.mnt) - du(m.store) < 200  # KiB: one block per decoded file, not their bytes
    assert os.stat(t / "bodies.txt").st_blocks == 1
    subprocess.run(["tar", "-S", "-cf", tmp_path / "v.tar", "-C", t, "bodies.txt"], check=True)
    (tmp_path / "x").mkdir()
    subprocess.run(["tar", "-xf", tmp_path / "v.tar", "-C", tmp_path / "x"], check=True)
    assert (tmp_path / "x" / "bodies.txt").read_bytes() == lines
    seg = m.mnt / "raw" / "commitlog" / "00000000000000000000"
    for flags, name in (("-cf", "plain.tar"), ("-Scf", "sparse.tar")):
        subprocess.run(["tar", flags, tmp_path / name, "-C", seg.parent, seg.name], check=True)
    assert (tmp_path / "plain.tar").stat().st_size > seg.stat().st_size  # 16 MiB, zeros too
    assert (tmp_path / "sparse.tar").stat().st_size < 2 * len(lines)


def test_du_of_a_snapshot_is_du_of_the_store_files_it_froze(mount_store):
    """A snapshot's files count the blocks the store's files hold (issue 35: its IndexFile's
    frozen slot table counted all 20 MB, so one snapshot of a 736 KB store made ``du MNT``
    21 MB); ``du MNT`` is the store (``raw/``) plus each snapshot, a copy of it, plus a block
    per decoded file (docs/mount.md, "Sizes and du")."""
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    with open(m.mnt / "topics" / "T" / "produce", "wb") as f:
        f.write(b"".join(b"line %d key%d\n" % (i, i) for i in range(3000)))
        os.fsync(f.fileno())  # the store flushed: its files stop growing (du compares them)
    os.mkdir(m.mnt / "snapshots" / "s1")

    def du(path) -> int:
        out = subprocess.run(["du", "-s", str(path)], capture_output=True, text=True, check=True)
        return int(out.stdout.split()[0])

    def file_blocks(top) -> int:  # the files' blocks (a snapshot's directories hold none)
        return sum(
            os.stat(os.path.join(d, f)).st_blocks for d, _, files in os.walk(top) for f in files
        )

    snap, raw = m.mnt / "snapshots" / "s1", m.mnt / "raw"
    # within 32 KiB: the file system rounds each written run of the store's files up to its
    # blocks (the IndexFile's items and the pages of its slot table that keys hashed to, which
    # differ run to run with the UNIQ_KEYs), the snapshot counts its extents' bytes; and the
    # IndexFile is allocated a chunk (64 KiB) at a time under its writes and its items 256 KiB
    # ahead of the writer (indexfile._MapIO.CHUNK, _ITEM_CHUNKS_AHEAD), which the store's file
    # counts and the snapshot's may not (an allocated range nothing was written to may read as
    # a hole): up to a chunk a run of slots written, and the items ahead
    (ixf,) = (m.store / "index").iterdir()
    chunk = indexfile._MapIO.CHUNK
    ahead = indexfile._ITEM_CHUNKS_AHEAD * chunk // 512
    runs = _data_runs(ixf, indexfile.INDEX_HEADER_SIZE + 4 * indexfile.DEFAULT_HASH_SLOT_NUM)
    slack = {"commitlog": 64, "consumequeue": 64, "index": 64 + ahead + runs * chunk // 512}
    for rel in ("commitlog", "consumequeue", "index"):
        assert abs(file_blocks(snap / rel) - file_blocks(raw / rel)) <= slack[rel], rel
    assert file_blocks(snap / "index") < 2 * 1024  # not the 20 MB slot table: under 1 MiB
    assert du(snap) < du(raw) + 64
    assert du(m.mnt) < 2 * du(raw) + 256  # raw/, the snapshot, a block per generated file


def _data_runs(path: Path, end: int) -> int:
    """Allocated runs (``SEEK_DATA`` to ``SEEK_HOLE``) of the file at ``path`` before ``end``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        runs, pos = 0, 0
        while pos < end:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past pos
                break
            if pos >= end:
                break
            runs += 1
            pos = os.lseek(fd, pos, os.SEEK_HOLE)
        return runs
    finally:
        os.close(fd)


def _rsync_changes(src: Path, dst: Path) -> list[str]:
    """What ``rsync -a --delete --checksum`` from ``src`` to ``dst`` would change, one
    itemized line a file (directories' own times left out: ``abort`` comes and goes)."""
    out = subprocess.run(
        [
            "rsync",
            "-a",
            "--delete",
            "--checksum",
            "--dry-run",
            "--itemize-changes",
            f"{src}/",
            f"{dst}/",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if not line.startswith(".d")]


@pytest.mark.parametrize("which", ["rocketmq-4.9.8-written/store", "ours"])
def test_an_idle_read_write_mount_changes_no_byte_of_the_store(mount_store, tmp_path, which):
    """Issue 35, item 6: mount read-write, ``ls topics``, read a view, unmount: the broker's
    checkpoint had changed (its indexMsgTimestamp became the last store time, confirmPhyOffset
    the CommitLog's end), so the next rsync of a backup copied it. Now rsync, comparing
    checksums and times, finds nothing to copy, for a broker's store and for one rmqfs wrote."""
    from conftest import copy_fixture

    store = tmp_path / "store"
    if which == "ours":
        m = mount_store(store)
        os.mkdir(m.mnt / "topics" / "T")
        (m.mnt / "topics" / "T" / "produce").write_text("".join(f"m{i}\n" for i in range(300)))
        m.umount()
    else:
        copy_fixture(which, store)
    backup = tmp_path / "backup"
    subprocess.run(["cp", "-a", f"{store}/.", str(backup)], check=True)
    assert _rsync_changes(backup, store) == []
    m = mount_store(store, name="mnt2")
    topics = os.listdir(m.mnt / "topics")
    assert topics
    assert (m.mnt / "topics" / topics[0] / "messages.jsonl").read_bytes()
    m.umount()
    assert _rsync_changes(backup, store) == []


@fuse
def test_a_store_file_name_that_is_not_utf8_lists_and_copies(mount_store, tmp_path):
    """A file in the store whose name is not UTF-8 (a latin-1 note an operator left) made the
    raw/ directory holding it fail to list with EIO (the inode of its name was hashed from
    strict UTF-8), so tar and rsync of raw/ copied nothing; it lists, and copies, by its
    bytes, and a snapshot of such a store lists too."""
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    (m.mnt / "topics" / "T" / "produce").write_bytes(b"a\nb\n")
    m.umount()
    odd = b"notes\xe9.txt"
    with open(os.path.join(bytes(m.store), odd), "wb") as f:
        f.write(b"x")
    with open(os.path.join(bytes(m.store / "config"), b"line\xe9.json"), "wb") as f:
        f.write(b"{}")
    m.mount()
    assert odd in os.listdir(bytes(m.mnt / "raw"))
    assert b"line\xe9.json" in os.listdir(bytes(m.mnt / "raw" / "config"))
    with open(os.path.join(bytes(m.mnt / "raw"), odd), "rb") as f:
        assert f.read() == b"x"
    out = tmp_path / "copy"
    r = subprocess.run(["rsync", "-a", "--sparse", f"{m.mnt}/raw/", f"{out}/"], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert (out / "commitlog").is_dir() and os.path.exists(os.path.join(bytes(out), odd))
    os.mkdir(m.mnt / "snapshots" / "s")
    assert "topics.json" in os.listdir(m.mnt / "snapshots" / "s" / "config")
