"""The uses rmqfs is built for, together on one live mount (issue 15's test tier).

While producers write through the mount and a second user (nobody, let in with
``allow_other``) reads it, the backup tools and the shell walk the whole mount: ``tar -S`` and
``rsync -a --sparse`` and ``restic backup`` of ``raw/``, ``grep -r`` and ``find`` of everything.
Afterwards:

* the store is still locked: a JVM doing the broker's ``tryLock(0, 1, false)`` fails, and every
  offline writer (``rmqfs produce``, ``reset-offset``, ``clean``, ``recover``, a second
  read-write mount) is refused, naming the daemon's pid (reading ``raw/lock`` used to release
  a POSIX lock: tests/engine/test_lock.py);
* nothing acknowledged is lost or doubled, and the unmounted store verifies clean;
* the ``tar`` copy, taken while producing, mounts with every message acknowledged before tar
  began and verifies clean after that mount's recovery.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, Mount, fuse, popen_as_nobody, run_rmqfs

pytestmark = [fuse, pytest.mark.fuse]

PROBE = REPO / "tests" / "java" / "LockProbe.java"

# nobody reads the mount until its stdin closes; prints how many reads worked and the errors
READER = r"""
import json, os, sys, threading
m = sys.argv[1]
ok, errors = 0, []
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
while not stop.is_set():
    for rel in ("status.json", "topics/T/messages.jsonl", "topics/T/0/bodies.txt",
                "groups/G/progress.json"):
        try:
            with open(os.path.join(m, rel), "rb") as f:
                while f.read(1 << 20):
                    pass
            ok += 1
        except OSError as e:
            errors.append(f"{rel}: {e}")
    for d, _, files in os.walk(os.path.join(m, "raw")):
        for n in files:
            try:
                with open(os.path.join(d, n), "rb") as f:
                    f.read(4096)
                ok += 1
            except OSError as e:
                errors.append(f"{n}: {e}")
print(json.dumps({"ok": ok, "errors": errors[:20]}))
"""


class Producers:
    """``n`` threads appending numbered lines to ``produce``, 20 lines a write, about 400 lines
    a second each (a pace the views keep up with on two busy cores, so ``grep -r`` of a view
    reaches its end), for at most ``limit`` seconds; ``acked`` holds every line whose write()
    returned."""

    def __init__(self, produce: Path, n: int = 3, limit: float = 120):
        self.deadline = time.monotonic() + limit
        self.produce, self.acked, self.errors = produce, [], []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(k,)) for k in range(n)]
        for t in self.threads:
            t.start()

    def run(self, k: int) -> None:
        fd = os.open(self.produce, os.O_WRONLY | os.O_APPEND)
        try:
            i = 0
            while not self.stop.is_set() and time.monotonic() < self.deadline:
                lines = [b"p%d-%07d %s" % (k, i + j, b"x" * 100) for j in range(20)]
                try:
                    os.write(fd, b"\n".join(lines) + b"\n")
                except OSError as exc:
                    self.errors.append(exc)
                    return
                self.acked += lines
                i += 20
                time.sleep(0.05)
        finally:
            os.close(fd)

    def join(self) -> list[bytes]:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        assert not self.errors, self.errors
        return self.acked


def tool(*cmd, ok=(0,), env=None, timeout=300) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert res.returncode in ok, f"{cmd[0]} exited {res.returncode}:\n{res.stderr[-2000:]}"
    return res


def refused(*args) -> str:
    """Run an rmqfs command that must fail; its message."""
    res = run_rmqfs(*args, check=False)
    assert res.returncode != 0, f"rmqfs {args[0]} succeeded on a mounted store:\n{res.stdout}"
    return res.stderr


def test_backup_tools_grep_and_find_while_producing_and_another_user_reads(traversable_dir):
    shared_dir = traversable_dir
    store, m = shared_dir / "store", None
    try:
        conf = shared_dir / "broker.conf"  # small files: the tools read the zero tails too
        conf.write_text(
            "mappedFileSizeCommitLog=16777216\nmaxHashSlotNum=100000\nmaxIndexNum=400000\n"
        )
        m = Mount(store, shared_dir / "mnt", "allow_other", config=conf)
        os.mkdir(m.mnt / "topics" / "T")
        os.mkdir(m.mnt / "groups" / "G")
        pid = json.loads((m.mnt / "status.json").read_text())["pid"]
        producers = Producers(m.mnt / "topics" / "T" / "produce")
        reader = popen_as_nobody(READER, m.mnt)
        time.sleep(1)
        try:
            acked_before_tar = len(producers.acked)
            # tar exits 1 for "file changed as we read it" (the live files)
            tool("tar", "-S", "-cf", shared_dir / "raw.tar", "-C", m.mnt / "raw", ".", ok=(0, 1))
            tool("rsync", "-a", "--sparse", f"{m.mnt}/raw/", shared_dir / "rsync", ok=(0, 23, 24))
            env = {"RESTIC_PASSWORD": "rmqfs-test", "RESTIC_CACHE_DIR": str(shared_dir / "rc")}
            tool("restic", "-q", "-r", shared_dir / "restic", "init", env=env)
            tool(
                "restic",
                "-q",
                "-r",
                shared_dir / "restic",
                "backup",
                m.mnt / "raw",
                env=env,
                ok=(0, 3),
            )
            tool("grep", "-r", "-s", "-c", "no such line", m.mnt, ok=(1,))
            found = tool("find", m.mnt).stdout.splitlines()
            assert str(m.mnt / "raw" / "lock") in found and len(found) > 20
            # the lock survived every read of raw/lock, in any process
            res = tool("java", PROBE, store, ok=(3,))
            assert res.stdout.strip() == "busy"
            for args in (
                ("produce", store, "-t", "T"),
                ("reset-offset", store, "-g", "G", "-t", "T", "-o", "0"),
                ("clean", store),
                ("recover", store),
            ):
                assert str(pid) in refused(*args), args
            (shared_dir / "mnt2").mkdir()
            assert str(pid) in refused("mount", store, shared_dir / "mnt2")
        finally:
            acked = producers.join()
            reader.stdin.close()
            seen = json.loads(reader.stdout.read())
            reader.wait(60)
        assert seen["ok"] > 0 and seen["errors"] == [], seen
        bodies = (m.mnt / "topics" / "T" / "bodies.txt").read_bytes().splitlines()
        assert sorted(bodies) == sorted(acked) and len(set(bodies)) == len(bodies)
        m.umount()
        assert "OK: no errors" in run_rmqfs("verify", store, "--config", conf).stdout
        # the copy tar took while producing: every message acknowledged before tar began
        copy = shared_dir / "copy"
        copy.mkdir()
        tool("tar", "-xf", shared_dir / "raw.tar", "-C", copy)
        c = Mount(copy, shared_dir / "mntc", config=conf)
        try:
            got = set((c.mnt / "topics" / "T" / "bodies.txt").read_bytes().splitlines())
            assert set(acked[:acked_before_tar]) <= got <= set(acked)
        finally:
            c.umount()
        verify = run_rmqfs("verify", copy, "--config", conf, check=False)
        assert "OK: no errors" in verify.stdout, verify.stdout[-3000:]
    finally:
        if m is not None:
            m.cleanup()


def test_a_renamed_lock_file_stops_the_mounts_writes(tmp_path, mount_store):
    """Issue 26, item 8: `mv STORE/lock STORE/lock.moved` while mounted used to let
    `rmqfs produce` lock a new `lock` and write, and the mount's next append overwrote that
    message. Now `rmqfs produce` is refused (the directory's lock names the daemon), and the
    mount refuses to append (EBUSY) until `lock` is put back; the store verifies clean."""
    import errno as E

    m = mount_store()
    (m.mnt / "topics" / "T").mkdir()
    (m.mnt / "topics" / "T" / "produce").write_text("one\n")
    store = m.store
    os.rename(store / "lock", store / "lock.moved")
    two = tmp_path / "two.txt"
    two.write_text("two\n")
    msg = refused("produce", store, "-t", "T", two)
    assert f"process {m.pid}" in msg, msg
    with pytest.raises(OSError) as exc:
        (m.mnt / "topics" / "T" / "produce").write_text("three\n")
    assert exc.value.errno == E.EBUSY
    entry = json.loads((m.mnt / "refused.jsonl").read_text().splitlines()[-1])
    assert "lock" in entry["reason"] and "removed" in entry["reason"], entry
    os.rename(store / "lock.moved", store / "lock")
    (m.mnt / "topics" / "T" / "produce").write_text("four\n")
    bodies = (m.mnt / "topics" / "T" / "messages.jsonl").read_text().splitlines()
    assert [json.loads(b)["body"] for b in bodies] == ["one", "four"]
    m.umount()
    run_rmqfs("verify", store)  # exits non-zero on any problem
