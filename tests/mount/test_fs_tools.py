"""The mount driven by the everyday tools: cat, head, tail -f, echo, printf, cp, dd, ls -lR,
stat, rsync, restic, and Python open/read/seek/mmap (issue 4, "files that behave")."""

import json
import mmap
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LOGHUB, fuse, run_rmqfs

pytestmark = [fuse, pytest.mark.fuse]

HDFS = LOGHUB / "HDFS_2k.log"


def sh(cmd: str, **kw) -> subprocess.CompletedProcess:
    """Run a bash command line; raise with its stderr when it fails."""
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, **kw)
    if res.returncode != 0:
        raise AssertionError(f"{cmd!r} failed ({res.returncode}): {res.stderr}")
    return res


def bodies(tdir: Path) -> list[bytes]:
    return (tdir / "bodies.txt").read_bytes().splitlines()


def test_every_way_of_writing_a_produce_file(mount_store, tmp_path):
    m = mount_store()
    t = m.mnt / "topics" / "W"
    os.mkdir(t)
    p = t / "produce"
    sh(f"echo one > '{p}'")  # O_TRUNC, one write
    sh(f"echo two >> '{p}'")  # O_APPEND
    sh(f"printf 'three\\nfour\\n' >> '{p}'")  # two lines in one write
    sh(f"printf 'no newline' > '{p}'")  # a last line without '\\n' (stored at close)
    src = tmp_path / "lines.txt"
    src.write_bytes(b"".join(b"cp-%d\n" % i for i in range(1000)))
    sh(f"cp '{src}' '{p}'")  # cp opens with O_TRUNC too
    sh(f"dd if='{src}' of='{p}' bs=7 status=none")  # writes cut in the middle of lines
    sh(f"cat '{src}' | dd of='{p}' bs=64k oflag=append conv=notrunc status=none")
    # Python's buffered writer flushes 8 KiB pieces that split lines
    with open(p, "a") as f:
        for i in range(3000):
            f.write(f"py-{i}\n")
    # one open file, many writes, partial lines across writes
    with open(p, "wb", buffering=0) as f:
        f.write(b"par")
        f.write(b"tial\nwh")
        f.write(b"ole\n")
    expect = (
        [b"one", b"two", b"three", b"four", b"no newline"]
        + src.read_bytes().splitlines() * 3
        + [f"py-{i}".encode() for i in range(3000)]
        + [b"partial", b"whole"]
    )
    got = bodies(t)
    assert got == expect
    # the write-only file reads as empty, with size 0
    assert p.read_bytes() == b"" and p.stat().st_size == 0
    # truncate to 0 is accepted, to anything else refused
    os.truncate(p, 0)
    with pytest.raises(OSError):
        os.truncate(p, 5)


def test_sizes_are_exact_and_views_match_tools(mount_store):
    m = mount_store()
    t = m.mnt / "topics" / "HDFS"
    os.mkdir(t)
    sh(f"dd if='{HDFS}' of='{t}/produce' bs=1M conv=fsync status=none")  # flushed:
    for f in [  # status.json stops changing
        t / "messages.jsonl",
        t / "bodies.txt",
        t / "0" / "messages.jsonl",
        t / "0" / "bodies.txt",
        t / "0" / "offsets.json",
        t / "topic.json",
        m.mnt / "status.json",
        m.mnt / "README.txt",
    ]:
        data = f.read_bytes()
        assert os.stat(f).st_size == len(data) > 0, f
        assert sh(f"stat -c %s '{f}'").stdout.strip() == str(len(data))
        assert sh(f"wc -c < '{f}'").stdout.strip() == str(len(data))
    assert (t / "bodies.txt").read_bytes() == HDFS.read_bytes()
    head = sh(f"head -3 '{t}/messages.jsonl'").stdout.splitlines()
    lines = HDFS.read_bytes().decode().split("\n")
    assert [json.loads(x)["body"] for x in head] == lines[:3]
    tail = (
        subprocess.run(["tail", "-n", "2", str(t / "bodies.txt")], capture_output=True)
        .stdout.decode()
        .split("\n")
    )
    assert tail == lines[-3:]
    # cp and dd of a decoded view copy every byte
    sh(f"cp '{t}/messages.jsonl' '{m.mnt.parent}/copy.jsonl'")
    assert (m.mnt.parent / "copy.jsonl").read_bytes() == (t / "messages.jsonl").read_bytes()
    dd = sh(f"dd if='{t}/bodies.txt' bs=1M status=none | md5sum").stdout.split()[0]
    assert dd == sh(f"md5sum < '{HDFS}'").stdout.split()[0]
    # lookups
    off = json.loads((t / "0" / "offsets.json").read_text())
    assert off["minOffset"] == 0 and off["maxOffset"] == 500
    one = json.loads((t / "0" / "by-offset" / "7").read_text())
    assert one["queueOffset"] == 7 and one["queueId"] == 0
    assert json.loads((m.mnt / "messages" / one["msgId"]).read_text()) == one
    first = json.loads((t / "0" / "by-time" / str(one["storeTimestamp"])).read_text())
    assert first["storeTimestamp"] >= one["storeTimestamp"] and first["queueOffset"] <= 7
    assert json.loads((t / "topic.json").read_text())["topicName"] == "HDFS"


def test_ls_lR_and_readers_while_producing(mount_store, tmp_path):
    m = mount_store()
    t = m.mnt / "topics" / "Busy"
    os.mkdir(t)
    src = tmp_path / "big.txt"
    src.write_bytes(HDFS.read_bytes() * 20)
    writer = subprocess.Popen(["bash", "-c", f"cat '{src}' > '{t}/produce'"])
    seen = []
    try:
        while writer.poll() is None:
            sh(f"ls -lR '{m.mnt}/topics' '{m.mnt}/groups' '{m.mnt}/raw' > /dev/null")
            data = (t / "bodies.txt").read_bytes()
            # a reader never sees a partial line
            assert data == b"" or data.endswith(b"\n")
            seen.append(len(data))
    finally:
        writer.wait()
    assert writer.returncode == 0
    assert (t / "bodies.txt").read_bytes() == src.read_bytes()
    assert seen == sorted(seen)


def _wait_for(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("view", ["messages.jsonl", "0/messages.jsonl", "bodies.txt"])
def test_tail_f_follows_growing_views(mount_store, tmp_path, view):
    m = mount_store()
    t = m.mnt / "topics" / "Tail"
    os.mkdir(t)
    (t / "0" / "produce").write_text("before\n")
    out = tmp_path / "tail.out"
    with open(out, "wb") as f:
        # FUSE has no inotify: tail polls the size, each 0.1 s here (its default: 1 s)
        tail = subprocess.Popen(
            ["tail", "-n", "+1", "-s", "0.1", "-f", str(t / view)],
            stdout=f,
            stderr=subprocess.DEVNULL,
        )
    try:
        assert _wait_for(lambda: b"before" in out.read_bytes())
        for i in range(3):
            (t / "0" / "produce").write_text(f"after-{i}\n")
            assert _wait_for(lambda i=i: f"after-{i}".encode() in out.read_bytes()), (
                out.read_bytes()
            )
    finally:
        tail.terminate()
        tail.wait()
    lines = out.read_bytes().splitlines()
    assert len(lines) == 4


def test_raw_files_are_the_store_files(mount_store, tmp_path, small_config):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "R"
    os.mkdir(t)
    sh(f"cat '{HDFS}' > '{t}/produce'")
    raw = m.mnt / "raw"
    segs = sorted(os.listdir(raw / "commitlog"))
    assert len(segs) > 3 and all(len(s) == 20 for s in segs)
    for name in segs:
        got = (raw / "commitlog" / name).read_bytes()
        assert got == (m.store / "commitlog" / name).read_bytes()
        assert len(got) == 65536
    sealed = raw / "commitlog" / segs[0]
    real = (m.store / "commitlog" / segs[0]).read_bytes()
    # seek + read, and mmap (the page-cache mode serves MAP_SHARED)
    with open(sealed, "rb") as f:
        f.seek(1000)
        assert f.read(123) == real[1000:1123]
        f.seek(-10, os.SEEK_END)
        assert f.read() == real[-10:]
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:] == real
            assert mm.find(b"HDFS") == real.find(b"HDFS")
    # st_blocks is the real file's: a sparse preallocated segment looks sparse
    st, real_st = os.stat(raw / "commitlog" / segs[-1]), os.stat(m.store / "commitlog" / segs[-1])
    assert st.st_blocks == real_st.st_blocks
    # same for the ConsumeQueue, index and config files
    for rel in ["consumequeue/R/0", "index", "config"]:
        for name in os.listdir(m.store / rel):
            if name.endswith(".tmp"):
                continue
            assert (raw / rel / name).read_bytes() == (m.store / rel / name).read_bytes(), name
    # raw/ and decoded views refuse writes
    for f in [sealed, raw / "config" / "topics.json", t / "messages.jsonl", m.mnt / "status.json"]:
        with pytest.raises(PermissionError):
            open(f, "r+b")  # noqa: SIM115 - the open must fail


def _stats(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def test_inodes_and_mtimes_are_stable_across_remounts(mount_store):
    m = mount_store()
    t = m.mnt / "topics" / "S"
    os.mkdir(t)
    sh(f"cat '{HDFS}' > '{t}/produce'")
    (m.mnt / "groups" / "g").mkdir()
    before = _stats(m.mnt / "topics") | {
        "raw/" + k: v for k, v in _stats(m.mnt / "raw" / "commitlog").items()
    }
    newest = max(
        json.loads(x)["storeTimestamp"] for x in (t / "messages.jsonl").read_text().splitlines()
    )
    assert before["S/messages.jsonl"][2] == newest * 1_000_000
    m.umount()
    m.mount()
    after = _stats(m.mnt / "topics") | {
        "raw/" + k: v for k, v in _stats(m.mnt / "raw" / "commitlog").items()
    }
    assert after == before


def test_directory_mtimes_are_fresh_right_after_the_mount_changes_them(mount_store):
    """The store's own writes move raw/ mtimes (config/ on a mkdir): raw/'s directories are
    not attribute-cached where the store changes. A mkdir moves every generated directory's
    (the tree's time): their cached attributes are dropped. A cached second made the first of
    two rsyncs copy an older mtime of raw/, and the second copy it again (the CI failure of
    stop 53)."""
    m = mount_store()
    t = m.mnt / "topics" / "A"
    os.mkdir(t)
    for _ in range(3):  # each round: cache the attributes, change them, look again at once
        raw_config = os.stat(m.mnt / "raw" / "config").st_mtime_ns
        topic = os.stat(t).st_mtime_ns
        time.sleep(0.02)  # the next config write gets a later mtime (coarse clocks)
        os.mkdir(m.mnt / "groups" / f"g{_}")
        real = os.stat(m.store / "config").st_mtime_ns
        assert real != raw_config
        assert os.stat(m.mnt / "raw" / "config").st_mtime_ns == real
        tree = os.stat(m.store / "config" / "subscriptionGroup.json").st_mtime_ns
        assert topic != tree
        assert os.stat(t).st_mtime_ns == tree


def fsync_produce(path: Path) -> None:
    """fsync() on a produce file: returns once everything stored is on disk (checkpoint too)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rsync(src: Path, dst: Path) -> str:
    return sh(f"rsync -a --stats --itemize-changes '{src}/' '{dst}/'").stdout


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync not installed")
def test_second_rsync_transfers_nothing(mount_store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=1048576\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "Sync"
    os.mkdir(t)
    sh(f"cat '{HDFS}' > '{t}/produce'")
    fsync_produce(t / "produce")  # the checkpoint is written now, not between the two runs
    sh(f"mkdir '{m.mnt}/groups/g' && echo 10 > '{m.mnt}/groups/g/Sync/0/offset'")
    for src, name in [(m.mnt / "raw", "raw"), (t, "topic")]:
        dst = tmp_path / f"copy-{name}"
        first = _rsync(src, dst)
        assert "Number of regular files transferred: 0" not in first
        second = _rsync(src, dst)
        assert "Number of regular files transferred: 0" in second, second
        # itemized changes: nothing but the summary
        changed = [
            x for x in second.splitlines() if len(x) > 1 and x[0] in "<>ch." and x[1] in "fdL"
        ]
        assert not changed, (name, changed)
    assert (tmp_path / "copy-topic" / "bodies.txt").read_bytes() == HDFS.read_bytes()
    for name in os.listdir(m.store / "commitlog"):
        assert (tmp_path / "copy-raw" / "commitlog" / name).read_bytes() == (
            m.store / "commitlog" / name
        ).read_bytes()
    # after a remount too (stable inodes and mtimes): still nothing to transfer
    m.umount()
    m.mount()
    # the daemon's clean close rewrote checkpoint and removed abort: only those differ
    again = _rsync(m.mnt / "topics" / "Sync", tmp_path / "copy-topic")
    assert "Number of regular files transferred: 0" in again, again


@pytest.mark.skipif(shutil.which("restic") is None, reason="restic not installed")
def test_second_restic_backup_finds_nothing_changed(mount_store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=1048576\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "Restic"
    os.mkdir(t)
    sh(f"cat '{HDFS}' > '{t}/produce'")
    fsync_produce(t / "produce")
    env = dict(
        os.environ,
        RESTIC_PASSWORD="test",
        RESTIC_REPOSITORY=str(tmp_path / "repo"),
        RESTIC_CACHE_DIR=str(tmp_path / "cache"),
    )
    sh("restic init -q", env=env)
    src = f"'{m.mnt}/topics/Restic' '{m.mnt}/raw/commitlog' '{m.mnt}/raw/consumequeue'"
    sh(f"restic backup -q --json {src} > /dev/null", env=env)
    out = sh(f"restic backup --json {src}", env=env).stdout
    summary = [json.loads(x) for x in out.splitlines() if '"summary"' in x][-1]
    assert summary["files_new"] == 0 and summary["files_changed"] == 0, summary
    assert summary["files_unmodified"] > 0


def _same_java_hash(s: str) -> str:
    """Another string with ``s``'s Java ``String.hashCode`` (the IndexFile's key hash): one
    character up by one, the next down by 31."""
    i = next(i for i in range(len(s) - 1) if s[i + 1] in "ABCDEF")
    return s[:i] + chr(ord(s[i]) + 1) + chr(ord(s[i + 1]) - 31) + s[i + 2 :]


def test_messages_by_offset_msgid_and_by_uniq_key(mount_store):
    """``messages/<id>`` takes the offset msgId and the client's msgId (UNIQ_KEY), and a UNIQ_KEY
    lookup serves only the record whose UNIQ_KEY it is: not a message carrying that id as a
    KEY, not an index hash collision."""
    m = mount_store()
    for t in ("A", "B"):
        os.mkdir(m.mnt / "topics" / t)
    (m.mnt / "topics" / "A" / "produce").write_text("first\nsecond\n")
    a = [
        json.loads(x)
        for x in (m.mnt / "topics" / "A" / "messages.jsonl").read_text().split("\n")[:-1]
    ]
    uniq = a[0]["properties"]["UNIQ_KEY"]
    twin = _same_java_hash(uniq)
    # B holds a message keyed by A's UNIQ_KEY, and one keyed by a string of the same hash
    (m.mnt / "topics" / "B" / "produce.jsonl").write_text(
        json.dumps({"body": "decoy", "keys": uniq})
        + "\n"
        + json.dumps({"body": "twin", "keys": twin})
        + "\n"
    )
    with open(m.mnt / "topics" / "A" / "produce.jsonl", "a") as f:
        f.write(json.dumps({"body": "twin in A", "keys": twin}) + "\n")
    for rec in a:
        for ident in (rec["msgId"], rec["properties"]["UNIQ_KEY"]):
            assert json.loads((m.mnt / "messages" / ident).read_text()) == rec, ident
    assert json.loads((m.mnt / "messages" / a[1]["msgId"].lower()).read_text()) == a[1]
    for missing in (twin, uniq.lower(), uniq[:-1], "X" * 32):
        assert not (m.mnt / "messages" / missing).exists(), missing
    # keys/ finds KEYS only (queryMsgByKey): A's own UNIQ_KEY is no key of A, B's decoy has it
    assert not (m.mnt / "topics" / "A" / "keys" / uniq).exists()
    assert json.loads((m.mnt / "topics" / "B" / "keys" / uniq).read_text())["body"] == "decoy"
    # the same lookup as query-msg -i
    out = run_rmqfs("query-msg", m.store, "-i", uniq, "--json").stdout
    assert [json.loads(x) for x in out.splitlines()] == [a[0]]
