"""engine/lock.py: the one store lock (RocketMQ's ``<root>/lock``, tryLock on byte 0)."""

import os
import subprocess
import sys
import time

import pytest

from engine.errors import StoreLockedError
from engine.lock import LOCK_FILE, lock_holder, release_store_lock, take_store_lock
from engine.store import MessageStore
from engine.verify import recover_store

HOLD = """
import sys, time
from engine.lock import take_store_lock
fd = take_store_lock(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path):
    """A child process holding tmp_path's store lock until its stdin closes."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
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
