"""engine/service/lock.py: the one store lock (RocketMQ's ``<root>/lock``, tryLock on byte 0)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SRC_PATH
from rmqfs.engine.errors import StoreLockedError
from rmqfs.engine.service import lock as lock_mod
from rmqfs.engine.service.lock import LOCK_FILE, lock_holder, release_store_lock, take_store_lock
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.tools.verify import recover_store

HOLD = """
import sys, time
from rmqfs.engine.service.lock import take_store_lock
fd = take_store_lock(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path):
    """A child process holding tmp_path's store lock until its stdin closes."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC_PATH},
    )
    assert p.stdout.readline().strip() == "locked"
    yield p
    p.stdin.close()
    p.wait(10)


def test_holder_is_named_and_gone_after_exit(tmp_path, holder):
    assert lock_holder(str(tmp_path)) == holder.pid
    with pytest.raises(StoreLockedError, match=f"locked by process {holder.pid}"):
        take_store_lock(str(tmp_path))
    holder.stdin.close()
    holder.wait(10)
    assert lock_holder(str(tmp_path)) is None
    fd = take_store_lock(str(tmp_path))  # a dead holder leaves nothing behind
    try:
        assert lock_holder(str(tmp_path)) == os.getpid()
        with open(tmp_path / LOCK_FILE, "rb") as f:
            assert f.read() == b"lock"  # what the broker writes
    finally:
        release_store_lock(fd)
    assert lock_holder(str(tmp_path)) is None


def test_no_lock_file(tmp_path):
    assert lock_holder(str(tmp_path)) is None


def test_asking_in_the_writers_process_keeps_its_lock(tmp_path):
    """lock_holder never opens the file: closing a descriptor of it would drop the lock."""
    store = MessageStore(str(tmp_path))
    try:
        for _ in range(3):
            assert lock_holder(str(tmp_path)) == os.getpid()
    finally:
        store.close()
    assert lock_holder(str(tmp_path)) is None


def test_store_and_recover_refuse_a_locked_store_read_only_follows(tmp_path, holder):
    with pytest.raises(StoreLockedError, match=str(holder.pid)):
        MessageStore(str(tmp_path))
    with pytest.raises(StoreLockedError, match=str(holder.pid)):
        recover_store(str(tmp_path))
    ro = MessageStore(str(tmp_path), read_only=True)  # takes no lock, follows the writer
    try:
        assert ro.writer_pid == holder.pid
    finally:
        ro.close()
    assert lock_holder(str(tmp_path)) == holder.pid


def test_others_only_skips_this_process(tmp_path):
    fd = take_store_lock(str(tmp_path))
    try:
        assert lock_holder(str(tmp_path)) == os.getpid()
        assert lock_holder(str(tmp_path), others_only=True) is None
    finally:
        release_store_lock(fd)


# ---------------------------------------------------------------------------------------------
# The lock belongs to one descriptor (OFD), and excludes a real JVM both ways.

PROBE = str(Path(__file__).resolve().parents[1] / "java" / "LockProbe.java")


def jvm_try_lock(root) -> str:
    """Run a JVM doing the broker's ``tryLock(0, 1, false)`` on root/lock; 'busy' or 'locked PID'."""
    res = subprocess.run(["java", PROBE, str(root)], capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 3), res.stderr
    return res.stdout.strip()


@pytest.fixture
def jvm_holder(tmp_path):
    """A JVM holding tmp_path/lock as a broker does, until its stdin closes; yields its pid."""
    p = subprocess.Popen(
        ["java", PROBE, str(tmp_path), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    first = p.stdout.readline().split()
    assert first[0] == "locked", first
    yield int(first[1])
    p.stdin.close()
    p.wait(30)


def test_closing_another_descriptor_keeps_the_lock(tmp_path):
    """Reading the lock file in the holder's process (what serving MNT/raw/lock does) must not
    release it: with a POSIX lock any close() of the file in the process drops it."""
    store = MessageStore(str(tmp_path))
    try:
        for flags in (os.O_RDONLY, os.O_RDWR):
            os.close(os.open(tmp_path / LOCK_FILE, flags))
        with open(tmp_path / LOCK_FILE, "rb") as f:
            assert f.read() == b"lock"
        assert lock_holder(str(tmp_path)) == os.getpid()
        res = subprocess.run(
            [sys.executable, "-c", HOLD, str(tmp_path)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC_PATH},
            input="",
            timeout=60,
        )
        assert res.returncode != 0 and f"locked by process {os.getpid()}" in res.stderr
        assert jvm_try_lock(tmp_path) == "busy"
    finally:
        store.close()
    assert jvm_try_lock(tmp_path).startswith("locked")


def test_a_jvm_holding_the_lock_is_refused_and_named(tmp_path, jvm_holder):
    with pytest.raises(StoreLockedError, match=f"locked by process {jvm_holder}"):
        take_store_lock(str(tmp_path))
    with pytest.raises(StoreLockedError, match=str(jvm_holder)):
        MessageStore(str(tmp_path))
    with pytest.raises(StoreLockedError, match=str(jvm_holder)):
        recover_store(str(tmp_path))
    assert lock_holder(str(tmp_path)) == jvm_holder
    assert lock_holder(str(tmp_path), others_only=True) == jvm_holder


def test_holder_found_from_another_process(tmp_path):
    """Another process sees an OFD holder's pid (from /proc/<pid>/fdinfo), not -1."""
    fd = take_store_lock(str(tmp_path))
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from engine.service.lock import lock_holder; "
                "print(lock_holder(sys.argv[1]))",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC_PATH},
            timeout=60,
        )
        assert res.stdout.strip() == str(os.getpid()), res.stderr
    finally:
        release_store_lock(fd)


# ---------------------------------------------------------------------------------------------
# The lock follows the store, not the name (issue 26, item 8).

TRY_LOCK = """
import sys
from rmqfs.engine.errors import StoreLockedError
from rmqfs.engine.service.lock import take_store_lock
try:
    take_store_lock(sys.argv[1])
except StoreLockedError as exc:
    print("refused:", exc)
else:
    print("locked")
"""


def try_lock_elsewhere(root) -> str:
    """take_store_lock in another process (as `rmqfs produce` would): its verdict."""
    res = subprocess.run(
        [sys.executable, "-c", TRY_LOCK, str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC_PATH},
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_a_renamed_lock_file_does_not_let_a_second_writer_in(tmp_path):
    """`mv STORE/lock STORE/lock.moved` while held: the next rmqfs writer is still refused
    (the directory's flock), naming this process; and this writer refuses to append once its
    lock file is gone or replaced (a broker may have locked the new one)."""
    store = MessageStore(str(tmp_path))
    try:
        store.create_topic("T")
        store.put_messages([Message("T", b"before")])
        os.rename(tmp_path / LOCK_FILE, tmp_path / "lock.moved")
        verdict = try_lock_elsewhere(tmp_path)
        assert verdict.startswith("refused:") and f"process {os.getpid()}" in verdict, verdict
        with pytest.raises(StoreLockedError, match="was removed"):
            store.put_messages([Message("T", b"after the rename")])
        (tmp_path / LOCK_FILE).write_bytes(b"lock")  # what a broker starting now would make
        with pytest.raises(StoreLockedError, match="replaced by another file"):
            store.put_messages([Message("T", b"after a new lock file")])
        with pytest.raises(StoreLockedError):
            store.commit_offset("G", "T", 0, 1)
        os.unlink(tmp_path / LOCK_FILE)
        os.rename(tmp_path / "lock.moved", tmp_path / LOCK_FILE)  # put back: writes go on
        store.put_messages([Message("T", b"after")])
        assert (
            store.max_offset("T", 0)
            + store.max_offset("T", 1)
            + store.max_offset("T", 2)
            + store.max_offset("T", 3)
            == 2
        )
    finally:
        store.close()
    assert try_lock_elsewhere(tmp_path) == "locked"


def test_the_lock_check_costs_no_syscall_per_put_and_still_sees_a_rename(tmp_path, monkeypatch):
    """Puts in a row look at the lock file at most once per CHECK_INTERVAL_S (no lstat per
    put); a rename is still refused by the first put after the interval, and a refusal is not
    remembered (the file put back, writes go on at once)."""
    calls = []
    real_lstat = os.lstat

    def counting_lstat(path, *args, **kwargs):
        if str(path).endswith(os.sep + LOCK_FILE):
            calls.append(path)
        return real_lstat(path, *args, **kwargs)

    store = MessageStore(str(tmp_path))
    try:
        store.create_topic("T")
        monkeypatch.setattr(lock_mod, "CHECK_INTERVAL_S", 60.0)
        store._lock._good_until = 0.0
        store.put_messages([Message("T", b"first")])  # looks, and that stands 60 s
        monkeypatch.setattr(lock_mod.os, "lstat", counting_lstat)
        for i in range(50):
            store.put_messages([Message("T", b"%d" % i)])
        assert calls == []
        monkeypatch.setattr(lock_mod, "CHECK_INTERVAL_S", 0.001)
        store._lock._good_until = 0.0  # the 60 s window ends
        store.put_messages([Message("T", b"looks again")])
        assert len(calls) == 1
        os.rename(tmp_path / LOCK_FILE, tmp_path / "lock.moved")
        time.sleep(0.01)
        with pytest.raises(StoreLockedError, match="was removed"):
            store.put_messages([Message("T", b"after the rename")])
        os.rename(tmp_path / "lock.moved", tmp_path / LOCK_FILE)
        store.put_messages([Message("T", b"after")])
        assert sum(store.max_offset("T", q) for q in range(4)) == 53
    finally:
        store.close()


def test_a_store_moved_whole_keeps_its_lock(tmp_path):
    """The directory lock is on the directory's inode: a second writer through the new
    name is refused too."""
    a, b = tmp_path / "a", tmp_path / "b"
    store = MessageStore(str(a))
    try:
        os.rename(a, b)
        assert try_lock_elsewhere(b).startswith("refused:")
    finally:
        store.close()
