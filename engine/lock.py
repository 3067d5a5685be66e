"""The store lock: the one home of who owns a store directory.

RocketMQ's broker takes an exclusive lock on ``<storePathRootDir>/lock`` when it starts
(``DefaultMessageStore`` constructor: ``lockFile = new RandomAccessFile(file, "rw")`` and
``load()``/``start()``: ``lock = lockFile.getChannel().tryLock(0, 1, false)``, then writes
``"lock"`` into it), so two writers never share a store. A Java ``FileChannel.tryLock`` is a POSIX
record lock on Linux (``fcntl(F_SETLK)``), and so is ``fcntl.lockf`` here: a broker and rmqfs
exclude each other, and the lock dies with its process (kill -9 included).

Layout of the file: 4 bytes ``b"lock"`` (the content is not read by anyone; the lock is on byte 0,
length 1).

Who uses it: :class:`engine.store.MessageStore` (writers take it), ``engine.verify`` (``recover``
takes it; ``verify`` asks who holds it), ``engine.follower`` (a read-only open follows a live
writer it finds here).
"""

from __future__ import annotations

import fcntl
import os
import struct

from .errors import StoreLockedError

#: The lock file's name in the store root (``StorePathConfigHelper``: ``<root>/lock``).
LOCK_FILE = "lock"
#: What the broker writes into it.
LOCK_CONTENT = b"lock"
# struct flock on Linux x86-64/aarch64: short l_type, short l_whence, off_t l_start, off_t l_len,
# pid_t l_pid (+ padding).
_FLOCK = struct.Struct("hhqqi4x")


def take_store_lock(root: str) -> int:
    """Lock ``root/lock`` for this process (creating it) and return its descriptor.

    Keep the descriptor open while the store is written; :func:`release_store_lock` gives it
    up. Closing *any* descriptor of the lock file drops the lock in this process (POSIX record
    lock semantics), so nothing else in a writer's process may open it: use
    :func:`lock_holder`, which does not.

    Raises:
        StoreLockedError: another process holds it; the message names its pid when known.
        OSError: the file cannot be created or opened.
    """
    path = os.path.join(root, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        holder = _holder_of_fd(fd)
        os.close(fd)
        who = f"process {holder}" if holder else "another process"
        raise StoreLockedError(f"store {root} is locked by {who} "
                               "(a broker or an rmqfs mount); stop it first") from None
    if os.pread(fd, len(LOCK_CONTENT), 0) != LOCK_CONTENT:  # untouched (mtime) when it is
        os.pwrite(fd, LOCK_CONTENT, 0)
    return fd


def release_store_lock(fd: int | None) -> None:
    """Give up a lock from :func:`take_store_lock` (closes ``fd``; None does nothing)."""
    if fd is not None:
        os.close(fd)


def lock_holder(root: str, others_only: bool = False) -> int | None:
    """pid of the live process holding ``root/lock`` (a broker or an rmqfs mount), or None.

    Read from ``/proc/locks`` by the file's inode, without opening the lock file, so it is safe
    to call in the writer's own process. With ``others_only`` a lock this process holds counts
    as none (``recover`` asks while holding it). An OFD lock has no pid: -1 then. Where /proc/locks
    cannot be read (not Linux), the file is opened and asked with ``F_GETLK``; that is only
    correct from a process that does not hold the lock itself.
    """
    path = os.path.join(root, LOCK_FILE)
    try:
        ino = os.stat(path).st_ino
    except OSError:
        return None
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            return _holder_of_fd(fd)
        finally:
            os.close(fd)
    for line in lines:
        # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 0"; "->" lines are waiters
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->" or parts[1] not in ("POSIX", "OFDLCK"):
            continue
        dev_ino = parts[5].rsplit(":", 1)
        if len(dev_ino) == 2 and dev_ino[1].isdigit() and int(dev_ino[1]) == ino:
            try:
                pid = int(parts[4])
            except ValueError:
                return -1
            if others_only and pid == os.getpid():
                continue
            return pid
    return None


def _holder_of_fd(fd: int) -> int | None:
    """pid of the process holding a POSIX lock on byte 0 of ``fd`` (``F_GETLK``), or None."""
    try:
        req = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, req))
        return pid if l_type != fcntl.F_UNLCK and pid > 0 else None
    except OSError:
        return None
