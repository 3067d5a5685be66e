"""The store lock: the one home of who owns a store directory.

RocketMQ's broker takes an exclusive lock on ``<storePathRootDir>/lock`` when it starts
(``DefaultMessageStore`` constructor: ``lockFile = new RandomAccessFile(file, "rw")`` and
``load()``/``start()``: ``lock = lockFile.getChannel().tryLock(0, 1, false)``, then writes
``"lock"`` into it), so two writers never share a store. A Java ``FileChannel.tryLock`` is a POSIX
record lock on Linux (``fcntl(F_SETLK)``, ``sun.nio.ch.FileDispatcherImpl.lock0``).

rmqfs takes a Linux *open file description* lock (``F_OFD_SETLK``) on the same byte instead of a
POSIX one. The two kinds conflict with each other both ways, so a broker and rmqfs still exclude
each other, and both die with their holder (kill -9 included). The difference is what releases
them: a POSIX lock belongs to the *process* and is dropped when the process closes *any*
descriptor of the file, so a ``cat MNT/raw/lock`` (or tar, rsync, restic, ``grep -r`` of the mount)
served by the daemon would silently unlock the store. An OFD lock belongs to the one descriptor
:func:`take_store_lock` returns, and only closing that descriptor releases it.

The descriptor is close-on-exec, so a program the holder starts never inherits it; never
``fork()`` a holder without exec (the child would share the open file description and keep the
lock alive): rmqfs's render workers fork from a forkserver that is itself a fresh interpreter
(``fusefs.views.worker_context``), never from the holder.

Layout of the file: 4 bytes ``b"lock"`` (the content is not read by anyone; the lock is on byte 0,
length 1).

The lock follows the store, not the name. A lock on ``lock`` alone is a lock on an inode that
anyone may rename away (``mv STORE/lock STORE/lock.moved``): the next writer then creates a new
``lock``, locks it, and two writers append to one CommitLog. So rmqfs also takes an exclusive
``flock`` on the store directory itself (an rmqfs-only lock: a broker does not take it, and
``flock`` and record locks never conflict on Linux), which no rename of ``lock`` can move, and a
holder asks :meth:`StoreLock.check` before it writes: when ``lock`` is no longer the inode it
locked, a broker may have taken the store through the new file, and the write is refused.

Who uses it: :class:`engine.store.MessageStore` (writers take it), ``engine.tools.verify`` (``recover``
takes it; ``verify`` asks who holds it), ``engine.live.follower`` (a read-only open follows a live
writer it finds here).
"""

from __future__ import annotations

import fcntl
import os
import struct
import time

from ..errors import StoreLockedError

#: The lock file's name in the store root (``StorePathConfigHelper``: ``<root>/lock``).
LOCK_FILE = "lock"
#: What the broker writes into it.
LOCK_CONTENT = b"lock"
#: Seconds a successful :meth:`StoreLock.check` stands for (the writes within it ask no
#: syscall): a broker's JVM takes far longer than this to start, load the store and append, so a
#: rename of ``lock`` is still seen before anyone else can write through a new one.
CHECK_INTERVAL_S = 0.005
# struct flock on Linux x86-64/aarch64: short l_type, short l_whence, off_t l_start, off_t l_len,
# pid_t l_pid (+ padding). OFD requests must pass l_pid 0.
_FLOCK = struct.Struct("hhqqi4x")
# Linux <fcntl.h>; Python has had the names since 3.9, the values are the kernel's ABI.
F_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", 36)
F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)


def _flock(l_type: int) -> bytes:
    return _FLOCK.pack(l_type, os.SEEK_SET, 0, 1, 0)


class StoreLock:
    """A held store lock: the OFD lock on byte 0 of ``root/lock`` and the ``flock`` on the
    store directory (see the module's notes), from :func:`take_store_lock`.

    Attributes:
        root: the store directory.
        fd: the descriptor holding the OFD lock on ``root/lock``.
        dir_fd: the descriptor of ``root`` holding the ``flock``.
        ident: ``(st_dev, st_ino)`` of the ``lock`` file locked.
    """

    def __init__(self, root: str, fd: int, dir_fd: int):
        self.root, self.fd, self.dir_fd = root, fd, dir_fd
        st = os.fstat(fd)
        self.ident = (st.st_dev, st.st_ino)
        self.path = os.path.join(root, LOCK_FILE)
        self._good_until = 0.0  # time.monotonic() until which the last good check stands

    def check(self) -> None:
        """Raise StoreLockedError when ``root/lock`` is no longer the file this lock holds
        (renamed, removed or replaced since): a broker started meanwhile would have locked
        the new file and be appending to the same CommitLog. Writers call it before each
        append (``engine.service.putmessage``) and config write. One ``lstat`` at most every
        :data:`CHECK_INTERVAL_S` (a check that found the file as locked stands that long; a
        refusal is never remembered, so once refused every call looks again), so a put costs
        no syscall for it; a rename is seen by the writes that begin
        :data:`CHECK_INTERVAL_S` after it at the latest."""
        if time.monotonic() < self._good_until:
            return
        path = self.path
        try:
            st = os.lstat(path)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            now = None
        if now != self.ident:
            what = "removed" if now is None else "replaced by another file"
            raise StoreLockedError(
                f"{path} was {what} while this process held the store's lock on it: another "
                "writer (a broker) may hold the store now; refusing to write. Stop every "
                "writer, put the lock file back, and check the store (rmqfs verify)"
            )
        self._good_until = time.monotonic() + CHECK_INTERVAL_S

    def release(self) -> None:
        """Give up both locks (closes the descriptors)."""
        for fd in (self.fd, self.dir_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.dir_fd = -1


def _dir_lock_holder(root: str) -> int | None:
    """pid of the process holding the ``flock`` on the store directory (rmqfs's own lock, see
    :class:`StoreLock`), from ``/proc/locks``; None when there is none or it cannot be read."""
    try:
        ino = os.stat(root).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()  # "3: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        dev_ino = parts[5].rsplit(":", 1)
        mine = parts[4] == str(os.getpid())
        if len(dev_ino) == 2 and dev_ino[1] == str(ino) and parts[4].isdigit() and not mine:
            return int(parts[4])
    return None


def _locked(root: str, holder: int | None) -> StoreLockedError:
    if holder is None or holder < 0:
        holder = _dir_lock_holder(root) or holder
    who = f"process {holder}" if holder and holder > 0 else "another process"
    return StoreLockedError(
        f"store {root} is locked by {who} (a broker or an rmqfs mount)",
        holder if holder and holder > 0 else None,
    )


def take_store_lock(root: str) -> StoreLock:
    """Lock the store ``root``: an exclusive ``flock`` on the directory (rmqfs's own, which a
    rename of ``lock`` cannot move), then byte 0 of ``root/lock`` (creating the file) with an
    OFD lock, as a broker's ``tryLock`` would conflict with.

    Keep the returned lock while the store is written; :func:`release_store_lock` gives it
    up. Other descriptors of the file, in this process or any other, may be opened and closed
    freely: only releasing this lock releases it.

    Raises:
        StoreLockedError: another holder has it (a broker's POSIX lock or another rmqfs's OFD
            lock or directory lock); the message names its pid when it can be found.
        OSError: the directory or the file cannot be opened or created.
    """
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(dir_fd)
        raise _locked(root, lock_holder(root, others_only=True)) from None
    path = os.path.join(root, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except BaseException:
        os.close(dir_fd)
        raise
    try:
        fcntl.fcntl(fd, F_OFD_SETLK, _flock(fcntl.F_WRLCK))
    except OSError:
        os.close(fd)
        os.close(dir_fd)
        raise _locked(root, lock_holder(root, others_only=True)) from None
    if os.pread(fd, len(LOCK_CONTENT), 0) != LOCK_CONTENT:  # untouched (mtime) when it is
        os.pwrite(fd, LOCK_CONTENT, 0)
    return StoreLock(root, fd, dir_fd)


def release_store_lock(lock: StoreLock | None) -> None:
    """Give up a lock from :func:`take_store_lock` (None does nothing)."""
    if lock is not None:
        lock.release()


def lock_holder(root: str, others_only: bool = False) -> int | None:
    """pid of the live process holding ``root/lock`` (a broker or an rmqfs mount), or None.

    Read from ``/proc/locks`` by the file's inode, without opening the lock file. A POSIX lock
    (a broker's) names its pid there; an OFD lock (an rmqfs's) shows -1, and its holder is found
    in ``/proc/<pid>/fdinfo`` (the descriptor's ``lock:`` lines); -1 is returned when that
    cannot be read (another user's process without root). With ``others_only`` a lock this
    process holds counts as none (``recover`` asks while holding it). Where /proc/locks cannot
    be read (not Linux), the file is opened and asked with ``F_OFD_GETLK``.
    """
    path = os.path.join(root, LOCK_FILE)
    try:
        st = os.stat(path)
    except OSError:
        return None
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return _holder_by_getlk(path)
    ofd = False
    for line in lines:
        # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 0"; "->" lines are waiters
        parts = line.split()
        if not _is_lock_on(parts, st.st_ino):
            continue
        if parts[1] == "OFDLCK":
            ofd = True
            continue
        try:
            pid = int(parts[4])
        except ValueError:
            continue
        if others_only and pid == os.getpid():
            continue
        return pid
    if not ofd:
        return None
    key = (st.st_dev, st.st_ino)
    cached = _last_ofd_holder.get(key)
    found: dict[int, str] = {}
    holders = _ofd_holders(st, [cached[0]], cached[1], found) if cached is not None else set()
    if not holders or (others_only and holders == {os.getpid()}):
        holders = _ofd_holders(st, found=found)
    if holders:
        pid = min(holders)
        _last_ofd_holder[key] = (pid, found.get(pid))
    if others_only and os.getpid() in holders:
        holders.discard(os.getpid())
        if not holders:
            return None  # the one OFD lock is ours (the scan above already found it)
    return min(holders) if holders else -1


#: (st_dev, st_ino) of a lock file -> the pid last found holding its OFD lock and the
#: descriptor it was found on: asked first, so a follower asking every second does not scan
#: every process's descriptors each time (a broker's are thousands: one per queue file).
_last_ofd_holder: dict[tuple[int, int], tuple[int, str | None]] = {}


def _is_lock_on(parts: list[str], ino: int) -> bool:
    """True for a /proc/locks (or fdinfo ``lock:``) line's fields naming a lock on inode ino."""
    if len(parts) < 6 or parts[1] == "->" or parts[1] not in ("POSIX", "OFDLCK"):
        return False
    dev_ino = parts[5].rsplit(":", 1)
    return len(dev_ino) == 2 and dev_ino[1].isdigit() and int(dev_ino[1]) == ino


def _ofd_holders(
    st: os.stat_result,
    pids: list[int] | None = None,
    fd: str | None = None,
    found: dict[int, str] | None = None,
) -> set[int]:
    """pids whose open descriptors of the file ``st`` carry an OFD lock (``/proc/<pid>/fdinfo``).

    Only called when /proc/locks shows an OFD lock on the file; the scan opens no file of the
    store (it stats ``/proc/<pid>/fd/<n>`` links and reads fdinfo). ``fd``: look at that
    descriptor (of each of ``pids``) only; ``found`` gets the descriptor each holder was
    found on.
    """
    holders: set[int] = set()
    if pids is None:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        if fd is not None:
            fds = [fd]
        else:
            try:
                fds = os.listdir(fd_dir)
            except OSError:
                continue
        for n in fds:
            try:
                fst = os.stat(f"{fd_dir}/{n}")
                if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                    continue
                with open(f"/proc/{pid}/fdinfo/{n}", encoding="ascii", errors="replace") as f:
                    info = f.read()
            except OSError:
                continue
            for line in info.splitlines():
                if (
                    line.startswith("lock:")
                    and _is_lock_on(line.split()[1:], st.st_ino)
                    and "OFDLCK" in line
                ):
                    holders.add(pid)
                    if found is not None:
                        found.setdefault(pid, n)
    return holders


def _holder_by_getlk(path: str) -> int | None:
    """Who holds byte 0 (``F_OFD_GETLK`` on a descriptor of our own); -1 when the kernel hides it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, F_OFD_GETLK, _flock(fcntl.F_WRLCK)))
        return (pid if pid > 0 else -1) if l_type != fcntl.F_UNLCK else None
    except OSError:
        return None
    finally:
        os.close(fd)
