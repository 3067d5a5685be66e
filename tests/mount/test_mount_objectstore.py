"""The mount of a snapshot in object storage (issue 23, item 3; issue 32, item 2):
``rmqfs mount URI MNT -o ro`` against a real S3 server (SeaweedFS's ``weed mini``, started once
for the module on loopback and always stopped): one FUSE filesystem whose daemon and render
workers read the snapshot in-process (engine/live/objectsource.py) through a bounded block
cache (engine/live/blockcache.py), the same tree as the mount of a local copy, EIO within the
request timeout while the server is down with every worker alive, refusals, and no mount,
process or cache left behind."""

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, SRC_PATH, fuse, in_mount_table, run_rmqfs, wait_unmounted
from rmqfs.engine.live.snapshot import MANIFEST_NAME, SnapshotManager
from rmqfs.engine.store import Message, MessageStore
from rmqfs.mount.mounts import CACHE_OWNER, CACHE_PREFIX
from s3server import BUCKET
from test_snapshots import materialize, small_store_config

pq = pytest.importorskip("pyarrow.parquet")

pytestmark = [fuse, pytest.mark.fuse]

#: broker.conf of small_store_config (64 KiB CommitLog segments: several files)
CONF = (
    "mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\n"
    "maxHashSlotNum=64\nmaxIndexNum=256\n"
)


def rmqfs_mounts() -> set[str]:
    """Mount points of every rmqfs filesystem now (a second, lower one would show here)."""
    out = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            after = line.split(" - ", 1)[1].split()
            if after[0] == "fuse.rmqfs":
                out.add(line.split()[4])
    return out


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (its render workers and their server)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


class Mounts:
    """The mounts a test makes (``rmqfs mount``), all unmounted at its end."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.conf = tmp_path / "broker.conf"
        self.conf.write_text(CONF)
        self.made: list[Path] = []
        self.mounts_before = rmqfs_mounts()

    def mount(self, src, name: str, *options: str, check=True, cache_dir=None):
        mnt = self.tmp / name
        mnt.mkdir(exist_ok=True)
        args = ["mount", str(src), mnt, "--config", self.conf, "--log-file", self.log(name)]
        args += ["--debug"] + (["-o", ",".join(options)] if options else [])
        if cache_dir is not None:
            args += ["--cache-dir", cache_dir]
        self.made.append(mnt)
        res = run_rmqfs(*args, check=check)
        return mnt if check else res

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def log_with(self, name: str, text: str, timeout: float = 10.0) -> str:
        """The mount's log once it holds ``text`` (the daemon writes its log from a queue, a
        moment after the request that logged it was answered), or as it is at ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.log(name).read_text()
            if text in log or time.monotonic() > deadline:
                return log
            time.sleep(0.05)

    def new_mounts(self) -> set[str]:
        """This test's rmqfs mounts (under its directory: other suites may run beside it)."""
        return {m for m in rmqfs_mounts() - self.mounts_before if m.startswith(f"{self.tmp}/")}

    def cleanup(self) -> None:
        for mnt in self.made:
            if in_mount_table(mnt):
                subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
                wait_unmounted(mnt, 10)


@pytest.fixture
def mounts(tmp_path):
    m = Mounts(tmp_path)
    try:
        yield m
    finally:
        m.cleanup()


def snapshot_copy(tmp_path: Path, n: int, body: int = 100) -> Path:
    """A store of ``n`` messages on topics T (2 queues) and U (1 queue) with 64 KiB segments,
    snapshotted and written out as a copy; returns the copy."""
    store = tmp_path / "store"
    cfg = small_store_config()
    cfg.broker_name = "broker-a"  # what its SNAPSHOT.json says
    with MessageStore(str(store), cfg) as s:
        s.create_topic("T", 2)
        s.create_topic("U", 1)
        s.put_messages(
            [
                Message(
                    "T" if i % 3 else "U",
                    f"line {i} {'x' * (body + i % 50)}".encode(),
                    tags="A" if i % 2 else None,
                    keys=[f"k{i}"],
                )
                for i in range(n)
            ]
        )
        mgr = SnapshotManager(s)
        snap = mgr.create("nightly")
        copy = materialize(snap, tmp_path / "copy", mgr.manifest(snap))
        mgr.close()
    return copy


def upload(src, uri) -> None:
    run_rmqfs("snapshot-upload", src, uri)


def tree(root: Path) -> dict[str, int]:
    """``{relative path: size}`` of the files under ``root`` (directories end in /)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel, d)) + "/"] = 0
        for f in filenames:
            out[os.path.normpath(os.path.join(rel, f))] = os.stat(os.path.join(dirpath, f)).st_size
    return out


def is_block(p: Path) -> bool:
    """A block file (``<file digest>.<block size>.<index>``), not the daemon's copy of the
    manifest or the mark of a server that does not answer."""
    return p.name.count(".") == 2 and p.name != MANIFEST_NAME and p.is_file()


def blocks_bytes(cache_dir: Path) -> int:
    """Bytes of the block files under ``cache_dir`` (the daemon's and its render workers')."""
    total = 0
    for p in cache_dir.glob("blocks-*/**/*"):
        try:
            if is_block(p):
                total += p.stat().st_size
        except FileNotFoundError:  # evicted meanwhile
            pass
    return total


# --------------------------------------------------------------------------------------------


def test_a_snapshot_in_object_storage_mounts_as_its_local_copy(aws, mounts, tmp_path):
    copy = snapshot_copy(tmp_path, 3000)
    assert len(list((copy / "commitlog").iterdir())) >= 5
    uri = aws.uri("fleet/broker-a/latest")
    upload(copy, uri)
    local = mounts.mount(copy, "local", "ro")
    cache = tmp_path / "cache"
    remote = mounts.mount(uri, "remote", "ro", cache_dir=cache)
    # one FUSE filesystem per mount: no second, lower one
    assert mounts.new_mounts() == {str(local), str(remote)}
    (blocks,) = cache.glob("blocks-*")  # the daemon's, private
    assert blocks.stat().st_mode & 0o777 == 0o700
    # raw/: the manifest's files, SNAPSHOT.json included, byte for byte
    want = {r: s for r, s in tree(copy).items() if not r.endswith("/") and not r.endswith(".part")}
    assert {r: s for r, s in tree(remote / "raw").items() if not r.endswith("/")} == want
    for rel in want:
        assert (remote / "raw" / rel).read_bytes() == (copy / rel).read_bytes(), rel

    # the same tree; the same messages, views and raw files
    skip = ("status.json", "stats", "README.txt")  # they name the store
    local_tree = {k: v for k, v in tree(local).items() if not k.startswith(skip)}
    remote_tree = {k: v for k, v in tree(remote).items() if not k.startswith(skip)}
    assert remote_tree == local_tree
    for rel in ("topics/T/messages.jsonl", "topics/U/messages.jsonl", "topics/T/1/bodies.txt"):
        assert (remote / rel).read_bytes() == (local / rel).read_bytes(), rel
    assert f"Store: {uri}" in (remote / "README.txt").read_text()
    status = json.loads((remote / "status.json").read_text())
    assert status["location"] == uri
    # named as the broker it is a snapshot of (its manifest), not as this machine
    assert (status["brokerName"], status["brokerNameFrom"]) == (
        "broker-a",
        "the snapshot's SNAPSHOT.json",
    )
    rows = [json.loads(x) for x in (remote / "topics/T/messages.jsonl").read_text().splitlines()]
    assert len(rows) == 2000
    parts = sorted(p for p in remote_tree if p.startswith("view/") and p.endswith(".parquet"))
    assert len(parts) >= 3  # T's two queues and U's
    for rel in parts:
        assert pq.read_table(remote / rel).equals(pq.read_table(local / rel)), rel
    raw = sorted(p for p in remote_tree if p.startswith("raw/commitlog/0"))
    assert len(raw) >= 5
    for rel in raw:
        assert (remote / rel).read_bytes() == (local / rel).read_bytes(), rel
    # grep and cat, as a user would
    res = subprocess.run(
        ["grep", "-c", '"body":"line 2999 ', remote / "topics/T/messages.jsonl"],
        capture_output=True,
        text=True,
    )
    assert res.stdout.strip() == "1", res
    res = subprocess.run(["cat", remote / "topics/U/bodies.txt"], capture_output=True)
    assert res.returncode == 0 and res.stdout == (local / "topics/U/bodies.txt").read_bytes()
    # never written; it is a snapshot already: no snapshot of it (its files are under raw/)
    with pytest.raises(OSError) as exc:
        (remote / "topics/T/produce").write_text("no\n")
    assert exc.value.errno == errno.EROFS
    with pytest.raises(OSError) as exc:
        (remote / "snapshots" / "again").mkdir()
    assert exc.value.errno == errno.EOPNOTSUPP

    # umount: the mount, its render workers and every block file go
    pid = json.loads((remote / "status.json").read_text())["pid"]
    workers = descendants(pid)
    assert workers  # the views above were rendered in them
    run_rmqfs("umount", remote)
    assert not in_mount_table(remote)
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{p}") for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list(cache.glob("blocks-*"))
    log = mounts.log("remote").read_text()
    assert "range reads" in log and "aws_secret" not in log.lower()


def test_credentials_in_the_location_stay_out_of_the_daemons_command_line(
    aws, mounts, tmp_path, monkeypatch
):
    """``rmqfs mount s3://...&access_key=K&secret_key=S`` started the daemon with the location
    on its command line, which every local user reads (``ps``) for as long as the mount runs
    (a review). The daemon's command line holds the redacted location; it gets the real one
    in its environment (readable by its user alone), and the keys in the URI work
    (docs/backup.md)."""
    from s3server import KEY, SECRET

    copy = snapshot_copy(tmp_path, 200)
    uri = aws.uri("creds/latest")
    upload(copy, uri)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    remote = mounts.mount(uri + f"&access_key={KEY}&secret_key={SECRET}", "remote", "ro")
    status = json.loads((remote / "status.json").read_text())
    with open(f"/proc/{status['pid']}/cmdline", "rb") as f:
        argv = f.read().decode()
    assert SECRET not in argv and "secret_key=***" in argv
    assert SECRET not in json.dumps(status)
    lines = (remote / "topics" / "T" / "messages.jsonl").read_text().splitlines()
    assert len(lines) > 0


def test_credentials_in_the_location_stay_out_of_a_foreground_mounts_command_line(
    aws, mounts, tmp_path, monkeypatch
):
    """``rmqfs mount -f s3://...&secret_key=S MNT -o ro``: the process the user started serves
    the mount, and its command line held the secret for as long as it ran (a known item of
    stop 53). It replaces itself (the same pid) by one whose command line holds the redacted
    location, and serves with the real one; Ctrl-C still ends it and unmounts."""
    from s3server import KEY, SECRET

    copy = snapshot_copy(tmp_path, 200)
    uri = aws.uri("creds-fg/latest")
    upload(copy, uri)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    mnt = tmp_path / "fg"
    mnt.mkdir()
    location = uri + f"&access_key={KEY}&secret_key={SECRET}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqfs.mount.cli", "mount", location, str(mnt), "-o", "ro", "-f"],
        env=dict(os.environ, PYTHONPATH=SRC_PATH),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (mnt / "status.json").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        status = json.loads((mnt / "status.json").read_text())
        assert status["pid"] == proc.pid  # replaced in place: the same process
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            argv = f.read().decode()
        assert SECRET not in argv and "secret_key=***" in argv
        lines = (mnt / "topics" / "T" / "messages.jsonl").read_text().splitlines()
        assert len(lines) > 0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    assert not in_mount_table(mnt)


def test_a_snapshot_uploaded_without_its_zeros_mounts_as_its_local_copy(aws, mounts, tmp_path):
    """Issue 35: with the default geometry (a 1 GiB segment, a 420 MB IndexFile) the upload
    holds each file's stored prefix only; the mount serves the rest as zeros, fetched never,
    and shows the same messages as the mount of the local copy."""
    mounts.conf.write_text("")  # the default geometry
    with MessageStore(str(tmp_path / "store")) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", f"line {i}".encode(), keys=[f"k{i}"]) for i in range(4000)])
        mgr = SnapshotManager(s)
        snap = mgr.create("nightly")
        copy = materialize(snap, tmp_path / "copy", mgr.manifest(snap))
        mgr.close()
    files = json.loads((copy / MANIFEST_NAME).read_text())["files"]
    uri = aws.uri("unpadded")
    upload(copy, uri)
    local = mounts.mount(copy, "local", "ro")
    cache = tmp_path / "cache"
    remote = mounts.mount(uri, "remote", "ro", cache_dir=cache)
    for rel in ("topics/T/messages.jsonl", "topics/T/1/bodies.txt"):
        assert (remote / rel).read_bytes() == (local / rel).read_bytes(), rel
    assert (remote / "topics/T/messages.jsonl").read_bytes().count(b"\n") == 4000
    seg = "commitlog/00000000000000000000"
    stored, size = files[seg]["stored"], files[seg]["size"]
    assert size == 1 << 30 and stored < 1 << 20
    with open(remote / "raw" / seg, "rb") as f, open(copy / seg, "rb") as g:
        assert f.read(stored + 100_000) == g.read(stored + 100_000)
        f.seek(size - 65536)
        assert f.read() == bytes(65536)
    st = os.stat(remote / "raw" / seg)
    assert st.st_size == size and st.st_blocks * 512 < stored + 512  # du: the stored part
    # each block cache (the daemon's, each render worker's) fetched the stored parts at most
    stored_all = sum(v["stored"] for v in files.values())
    (daemon,) = cache.glob("blocks-*")
    per_cache = [
        sum(p.stat().st_size for p in d.iterdir() if is_block(p))
        for d in [daemon, *daemon.glob("blocks-*")]
    ]
    assert len(per_cache) > 1 and 0 < per_cache[0], per_cache
    assert all(b <= stored_all for b in per_cache), per_cache
    run_rmqfs("umount", remote)
    log = mounts.log("remote").read_text()
    line = [x for x in log.splitlines() if "range reads" in x][-1]
    assert int(line.split("range reads (")[1].split()[0]) <= sum(
        v["stored"] for v in files.values()
    )


def test_the_cache_stays_within_its_bound(aws, mounts, tmp_path):
    copy = snapshot_copy(tmp_path, 3000, body=1000)  # about 3.3 MB of CommitLog
    uri = aws.uri("bounded")
    upload(copy, uri)
    cache = tmp_path / "cache"
    remote = mounts.mount(uri, "remote", "ro", "remote_cache=1M", cache_dir=cache)
    seen = 0
    read = 0
    for p in sorted((remote / "raw" / "commitlog").iterdir()):
        read += len(p.read_bytes())
        seen = max(seen, blocks_bytes(cache))
        assert blocks_bytes(cache) <= 1 << 20
    assert read > 3 << 20
    assert seen > 256 << 10  # it was used (the daemon's half: raw/ is read by the daemon)
    body = (remote / "topics/T/messages.jsonl").read_bytes()
    assert body.count(b"\n") == 2000
    assert blocks_bytes(cache) <= 1 << 20
    run_rmqfs("umount", remote)
    assert not list(cache.glob("blocks-*"))
    log = mounts.log("remote").read_text()
    evicted = [line for line in log.splitlines() if "range reads" in line]
    assert evicted and " 0 evicted" not in evicted[-1], evicted


def test_a_server_that_stops_gives_eio_and_the_mount_serves_again(aws, mounts, tmp_path):
    copy = snapshot_copy(tmp_path, 6000)  # a dozen segments: the mount reads the last ones
    uri = aws.uri("stopping")
    upload(copy, uri)
    remote = mounts.mount(uri, "remote", "ro")
    segs = sorted((remote / "raw" / "commitlog").iterdir())
    first = segs[0].read_bytes()
    aws.stop(signal.SIGKILL)
    try:
        with pytest.raises(OSError) as exc:
            segs[1].read_bytes()  # not read yet: a range read, which fails
        assert exc.value.errno == errno.EIO
        assert segs[0].read_bytes() == first  # what was read is still served
        assert os.listdir(remote / "topics")  # the mount lives
        # a render that meets the error (in a render worker, which reads by range) fails too
        for rel in ("topics/T/messages.jsonl", "view/topic=T/queue=0"):
            with pytest.raises(OSError) as exc:
                if rel.startswith("view/"):
                    (remote / rel / os.listdir(remote / rel)[0]).read_bytes()
                else:
                    (remote / rel).read_bytes()
            assert exc.value.errno == errno.EIO, rel
    finally:
        aws.start()
    assert segs[1].read_bytes() == (copy / "commitlog" / segs[1].name).read_bytes()
    rows = (remote / "topics/T/messages.jsonl").read_bytes().splitlines()
    assert len(rows) == 4000
    (part,) = os.listdir(remote / "view/topic=T/queue=0")
    assert pq.read_table(remote / "view/topic=T/queue=0" / part).num_rows == 2000
    log = mounts.log_with("remote", f"EIO reading commitlog/{segs[1].name} of {uri}")
    assert f"EIO reading commitlog/{segs[1].name} of {uri}" in log, log[-3000:]


def test_a_server_that_hangs_answers_eio_in_time_and_no_worker_dies(aws, mounts, tmp_path):
    """Issue 32 item 2: with the server not answering (stopped, its sockets open), `cat` of a
    view not read yet fails with EIO within 15 s, `ls -l` of a topic returns within 15 s,
    every render worker lives on, and once the server answers again the same reads work. (Its
    lower FUSE filesystem made each file take 36-42 s to fail, killed render workers with
    BrokenProcessPool and hung `ls -l` past 120 s.)"""
    copy = snapshot_copy(tmp_path, 6000)
    uri = aws.uri("hanging")
    upload(copy, uri)
    # blocks of 256K in each worker's share: U's view cannot leave T's bytes all cached
    remote = mounts.mount(uri, "remote", "ro", "remote_timeout=3", "remote_cache=1M")
    pid = json.loads((remote / "status.json").read_text())["pid"]
    want_u = (remote / "topics/U/messages.jsonl").read_bytes()  # starts the render workers
    workers = descendants(pid)
    assert workers
    os.killpg(aws.proc.pid, signal.SIGSTOP)
    try:
        t = time.monotonic()
        res = subprocess.run(["cat", remote / "topics/T/messages.jsonl"], capture_output=True)
        took = time.monotonic() - t
        assert res.returncode == 1 and b"Input/output error" in res.stderr, res
        assert took < 15, took
        t = time.monotonic()
        res = subprocess.run(["ls", "-l", remote / "topics/T"], capture_output=True, timeout=60)
        took = time.monotonic() - t
        assert took < 15, (took, res)
        assert b"produce" in res.stdout  # what needs no object storage is listed
        assert workers <= descendants(pid)  # no worker died (the pool may start more)
    finally:
        os.killpg(aws.proc.pid, signal.SIGCONT)
    # the waiting requests get their answers, and then reads ask the server again
    deadline = time.monotonic() + 30
    while True:
        try:
            data = (remote / "topics/T/messages.jsonl").read_bytes()
            break
        except OSError as exc:
            assert exc.errno == errno.EIO and time.monotonic() < deadline, exc
            time.sleep(0.5)
    rows = data.splitlines()
    assert len(rows) == 4000 and json.loads(rows[-1])["body"].startswith("line 5999 ")
    assert (remote / "topics/U/messages.jsonl").read_bytes() == want_u
    assert workers <= descendants(pid)
    log = mounts.log_with("remote", f"of {uri}: no answer within 3 s")
    assert f"of {uri}: no answer within 3 s" in log, log[-3000:]


def test_refusals_name_the_location_and_leave_nothing(aws, mounts, tmp_path):
    copy = snapshot_copy(tmp_path, 100)
    uri = aws.uri("no-manifest")
    upload(copy, uri)
    # read-only only
    res = mounts.mount(uri, "rw", check=False)
    assert res.returncode == 1
    assert f"{uri} is a snapshot in object storage, which is never written" in res.stderr
    assert "-o ro" in res.stderr
    # no manifest: refused, naming the location
    aws.fs().delete_file(f"{BUCKET}/no-manifest/{MANIFEST_NAME}")
    cache = tmp_path / "cache"
    res = mounts.mount(uri, "nm", "ro", check=False, cache_dir=cache)
    assert res.returncode == 1
    assert f"{uri}: no {MANIFEST_NAME}" in res.stderr, res.stderr
    assert not in_mount_table(tmp_path / "nm")
    assert mounts.new_mounts() == set()
    assert not list(cache.glob("blocks-*"))
    # a secret in the URI is never printed
    res = mounts.mount(uri + "&secret_key=hush", "nm", "ro", check=False)
    assert res.returncode == 1 and "hush" not in res.stderr and "secret_key=***" in res.stderr
    # the cache option only with a URI
    res = mounts.mount(copy, "local", "ro", "remote_cache=1G", check=False)
    assert res.returncode == 1 and "remote_cache" in res.stderr


def _pid_in(owner: Path) -> str | None:
    """The pid a view cache's owner file records, or None when it is gone meanwhile (the
    other test process's mounts clean dead daemons' caches)."""
    try:
        return owner.read_text().split()[0]
    except (OSError, IndexError):
        return None


def test_a_killed_daemon_leaves_nothing_mounted_and_mounts_again(aws, mounts, tmp_path):
    copy = snapshot_copy(tmp_path, 300)
    uri = aws.uri("killed")
    upload(copy, uri)
    remote = mounts.mount(uri, "remote", "ro")
    (remote / "topics/T/messages.jsonl").read_bytes()
    pid = json.loads((remote / "status.json").read_text())["pid"]
    (cache,) = [  # the daemon's own cache directory (mount.daemon.make_cache_dir)
        p.parent
        for p in Path(tempfile.gettempdir()).glob(f"{CACHE_PREFIX}*/{CACHE_OWNER}")
        if _pid_in(p) == str(pid)
    ]
    assert list(cache.glob("blocks-*"))
    os.kill(pid, signal.SIGKILL)
    assert wait_unmounted(remote)
    assert mounts.new_mounts() == set()
    # the same mount point mounts again, and the dead daemon's cache directory goes
    remote = mounts.mount(uri, "remote", "ro")
    assert not cache.exists()
    assert (remote / "topics/T/messages.jsonl").read_bytes().count(b"\n") == 200
    run_rmqfs("umount", remote)
    assert mounts.new_mounts() == set()
    # with --cache-dir (the docs' example) the killed daemon's block cache was left there
    # for good (a review); the next mount of that cache dir removes it, never a live one's
    mine = tmp_path / "cachedir"
    remote = mounts.mount(uri, "remote", "ro", cache_dir=mine)
    (remote / "topics/T/messages.jsonl").read_bytes()
    (left,) = mine.glob("blocks-*")
    os.kill(json.loads((remote / "status.json").read_text())["pid"], signal.SIGKILL)
    assert wait_unmounted(remote)
    other = mounts.mount(uri, "other", "ro", cache_dir=mine)
    assert not left.exists()
    (live,) = mine.glob("blocks-*")  # the new daemon's
    remote = mounts.mount(uri, "remote", "ro", cache_dir=mine)  # a second daemon beside it
    assert live.exists() and len(list(mine.glob("blocks-*"))) == 2
    run_rmqfs("umount", remote)
    run_rmqfs("umount", other)
    assert list(mine.glob("blocks-*")) == []


def test_an_upload_to_the_mounted_location_is_never_read_as_the_snapshot(
    aws, mounts, tmp_path, monkeypatch
):
    """An upload replaces files in place: once the manifest changed or went, blocks not cached
    answer EIO, never the new files' bytes (tests/quickpoll: the manifest read every 0.2 s)."""
    monkeypatch.setenv("RMQFS_TEST_PYTHONPATH", str(REPO / "tests" / "quickpoll"))
    copy = snapshot_copy(tmp_path, 6000)
    uri = aws.uri("replaced")
    upload(copy, uri)
    remote = mounts.mount(uri, "remote", "ro")
    segs = sorted((remote / "raw" / "commitlog").iterdir())
    first = segs[0].read_bytes()
    # what an upload does: the manifest goes first, then files are replaced
    fs, base = aws.fs(), f"{BUCKET}/replaced"
    fs.delete_file(f"{base}/{MANIFEST_NAME}")
    with fs.open_output_stream(f"{base}/commitlog/{segs[1].name}") as f:
        f.write(b"\xee" * segs[1].stat().st_size)
    time.sleep(0.3)  # past the poll: the next fetch reads the manifest first
    with pytest.raises(OSError) as exc:
        segs[1].read_bytes()
    assert exc.value.errno == errno.EIO
    assert segs[0].read_bytes() == first
    log = mounts.log_with("remote", "changed since it was mounted")
    assert "changed since it was mounted" in log, log[-2000:]


def test_sigterm_during_the_unmount_of_an_s3_mount_closes_cleanly(aws, mounts, tmp_path):
    """Issue 36 item 7: SIGTERM while the daemon of an object-storage mount unmounted crashed
    it 3 of 3 times (pyfuse3.terminate() after pyfuse3.close()). A burst of SIGTERMs to the
    daemon ends it cleanly: nothing mounted, no render worker left, no fatal error in its
    log."""
    from test_fs_daemon import sigterm_burst

    copy = snapshot_copy(tmp_path, 200)
    uri = aws.uri("sigterm")
    upload(copy, uri)
    remote = mounts.mount(uri, "remote", "ro")
    assert (remote / "topics/T/messages.jsonl").read_bytes()
    pid = json.loads((remote / "status.json").read_text())["pid"]
    workers = descendants(pid)
    assert sigterm_burst(pid) > 1
    assert wait_unmounted(remote)
    deadline = time.monotonic() + 15
    while any(os.path.exists(f"/proc/{p}") for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{p}") for p in workers)
    assert mounts.new_mounts() == set()
    log = mounts.log("remote").read_text()
    assert "Fatal Python error" not in log and "store closed" in log


def test_a_bad_manifest_field_is_said_by_the_mount(aws, mounts, tmp_path):
    """Issue 36 item 9: a queue id "²" (str.isdigit takes it) made the lower process die with
    a TypeError and the mount say only "its process exited (1)"; now the one ManifestError
    line names SNAPSHOT.json and the field, and nothing is left mounted."""
    copy = snapshot_copy(tmp_path, 10)
    uri = aws.uri("bad-field")
    upload(copy, uri)
    doc = json.loads((copy / MANIFEST_NAME).read_text())
    doc["queues"] = {"T": {"²": [0, 1]}}
    with aws.fs().open_output_stream(f"{BUCKET}/bad-field/{MANIFEST_NAME}") as out:
        out.write(json.dumps(doc).encode())
    res = mounts.mount(uri, "bad", "ro", check=False)
    assert res.returncode == 1
    assert "exited" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert f"{MANIFEST_NAME}: queues['T']['²']: queue id '²' is not a decimal" in res.stderr
    assert not in_mount_table(tmp_path / "bad")
    assert mounts.new_mounts() == set()
