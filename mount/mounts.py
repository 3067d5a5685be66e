"""The mount table as rmqfs sees it: whether a path is mounted (a dead FUSE mount included),
what is mounted there, and the lazy unmount of a dead rmqfs mount; and the view caches that
daemons killed with kill -9 left in the temp dir (``rmqfs umount`` removes them without
importing the daemon).

Light on purpose (no pyfuse3, trio or store imports): the dead-mount guard
(:mod:`mount.guard`) runs it in a process of its own.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import subprocess
import tempfile

log = logging.getLogger("rmqfs")


class MountError(Exception):
    """The mount could not be set up; the message says why."""


def is_mounted(path: str) -> bool:
    """True when ``path`` is a mount point, a dead FUSE mount included ("Transport endpoint
    is not connected"), which ``os.path.ismount`` cannot stat."""
    return mount_info(path) is not None or os.path.ismount(path)


def module_env() -> dict[str, str]:
    """This process's environment for the ``python -m rmqfs.mount.…`` processes rmqfs starts
    (the daemon, its guard) from ``/``: the directories this process's ``rmqfs`` namespace
    comes from go first on ``PYTHONPATH``, so they run the same code (a checkout's
    ``tests/ns``; site-packages, already there, when installed; nothing for an editable
    install, whose finder the child has too). Never a directory holding ``engine/`` itself."""
    from rmqfs.engine.pythonpath import child_pythonpath

    env = dict(os.environ)
    env["PYTHONPATH"] = child_pythonpath()
    return env


FSTYPE = "fuse.rmqfs"  # what /proc/self/mountinfo shows for our mounts (subtype=rmqfs)
FSNAME = "rmqfs"


def mount_info(path: str) -> tuple[str, str] | None:
    """``(fstype, source)`` of the mount at ``path`` from /proc/self/mountinfo (the last one
    mounted there), or None when ``path`` is not a mount point."""
    path = os.path.realpath(path)
    found = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" ")
                mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                if mp == path and " - " in line:
                    after = line.split(" - ", 1)[1].split(" ")
                    found = (after[0], after[1] if len(after) > 1 else "")
    except OSError:
        return None
    return found


def mountpoint_of(pid: int) -> str | None:
    """The mount point served by the rmqfs daemon ``pid`` (a store's lock holder), or None
    when ``pid`` is no rmqfs mount daemon (a broker) or cannot be read: the argument of its
    command line that is an rmqfs mount (``/proc/PID/cmdline``, ``/proc/self/mountinfo``)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            argv = f.read(1 << 16).split(b"\0")
    except (OSError, ValueError):
        return None
    words = [os.fsdecode(a) for a in argv if a]
    if "mount" not in words or not any("rmqfs" in w for w in words[:4]):
        return None
    for word in words:
        if word.startswith("/") and os.path.isabs(word):
            info = mount_info(word)
            if info is not None and info[0] == FSTYPE:
                return word
    return None


def clean_dead_mount(mountpoint: str) -> bool:
    """Lazily unmount a dead rmqfs mount (its daemon was killed) at ``mountpoint``.

    Only a mount whose type is ``fuse.rmqfs`` and whose directory answers ENOTCONN or
    ECONNABORTED is touched. Returns True when this call removed one (False when another
    process unmounted it meanwhile, as libfuse's auto_unmount and :mod:`mount.guard` race to);
    raises MountError when the unmount fails and the mount stays.
    """
    info = mount_info(mountpoint)
    if info is None or info[0] != FSTYPE:
        return False
    try:
        os.listdir(mountpoint)  # not stat: the kernel may answer that from its cache
        return False
    except OSError as exc:
        if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED):
            return False
    res = subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True, text=True)
    if res.returncode != 0:
        info = mount_info(mountpoint)
        if info is None or info[0] != FSTYPE:
            return False  # unmounted meanwhile (auto_unmount, the daemon's guard): not an error
        raise MountError(
            f"mount point {mountpoint} is a dead rmqfs mount and it cannot be "
            f"unmounted: {res.stderr.strip()}"
        )
    log.warning("removed the dead rmqfs mount at %s (its daemon had died)", mountpoint)
    return True


def check_mountpoint(mountpoint: str) -> None:
    """Raise MountError unless ``mountpoint`` is an empty directory that is not a mount.

    A dead rmqfs mount there (its daemon killed) is unmounted first (lazily).
    """
    if is_mounted(mountpoint):
        clean_dead_mount(mountpoint)
    if is_mounted(mountpoint):
        try:
            os.listdir(mountpoint)  # not stat: the kernel may answer that from its cache
        except OSError as exc:  # ENOTCONN/ECONNABORTED: the daemon of that mount is gone
            raise MountError(
                f"mount point {mountpoint} is a dead mount of another kind "
                f"({exc.strerror}); clean it with: fusermount3 -u -z "
                f"{mountpoint}"
            ) from exc
        raise MountError(
            f"mount point {mountpoint} is already a mount point (busy); "
            f"rmqfs umount {mountpoint} first"
        )
    if not os.path.exists(mountpoint):
        raise MountError(f"mount point {mountpoint} does not exist")
    if not os.path.isdir(mountpoint):
        raise MountError(f"mount point {mountpoint} is not a directory")
    if os.path.ismount(mountpoint):
        raise MountError(f"mount point {mountpoint} is already a mount point (busy)")
    try:
        if os.listdir(mountpoint):
            raise MountError(f"mount point {mountpoint} is not empty")
    except PermissionError as exc:
        raise MountError(f"mount point {mountpoint}: {exc.strerror}") from exc


def claim_mountpoint(mountpoint: str) -> int:
    """:func:`check_mountpoint`, then hold the mount point for this process until the mount
    is made: an exclusive ``flock`` on the directory (a descriptor returned; closing it lets
    go), and the check once more under it. Two ``rmqfs mount`` commands started together on
    one mount point (whose checks both passed before either mounted) then cannot both mount
    and stack: the second is refused (it is being mounted, or it is a mount point now).

    Raises MountError (what :func:`check_mountpoint` raises, or another rmqfs mount holds
    it)."""
    check_mountpoint(mountpoint)
    try:
        fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise MountError(f"mount point {mountpoint}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MountError(
                f"mount point {mountpoint} is being mounted by another rmqfs mount (busy)"
            ) from None
        check_mountpoint(mountpoint)  # (one that mounted before the lock was taken)
    except BaseException:
        os.close(fd)
        raise
    return fd


def mount_users(mountpoint: str) -> list[tuple[int, str, str]]:
    """The processes using ``mountpoint`` (what keeps an unmount busy), like ``fuser -m``:
    ``[(pid, command name, what)]`` where what is ``cwd``, ``root``, ``exe`` or ``open
    <path>`` (the first open file of that process under it), sorted by pid. Reads the links
    of ``/proc/<pid>/{cwd,root,exe,fd/*}`` (paths, not the files: nothing is asked of the
    mount); processes of other users that cannot be read are left out. This process is
    never listed."""
    mnt = os.path.realpath(mountpoint)

    def under(path: str) -> bool:
        return path == mnt or path.startswith(mnt.rstrip("/") + "/")

    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        base = entry.path
        what = None
        for link in ("cwd", "root", "exe"):
            try:
                if under(os.readlink(f"{base}/{link}")):
                    what = link
                    break
            except OSError:
                continue
        if what is None:
            try:
                fds = os.listdir(f"{base}/fd")
            except OSError:
                fds = []
            for fd in fds:
                try:
                    target = os.readlink(f"{base}/fd/{fd}")
                except OSError:
                    continue
                if under(target):
                    what = f"open {target}"
                    break
        if what is None:
            continue
        try:
            with open(f"{base}/comm") as f:
                comm = f.read().strip()
        except OSError:
            comm = "?"
        out.append((int(entry.name), comm, what))
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# The daemons' view caches

CACHE_PREFIX = "rmqfs-cache-"
CACHE_OWNER = "daemon.pid"  # in a daemon's own cache dir: "<pid> <start time>"


def _proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), None when no such process
    or a zombie (dead, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            data = f.read()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def make_cache_dir() -> str:
    """A private temporary cache directory recording its daemon (pid and start time), so a
    later mount or umount can remove it once that daemon is gone (kill -9)."""
    path = tempfile.mkdtemp(prefix=CACHE_PREFIX)
    mark_owner(path)
    return path


def mark_owner(path: str) -> None:
    """Record this process (pid and start time) as the owner of the directory ``path``, which
    :func:`clean_stale_caches` removes once it is gone (a daemon's cache, its block cache)."""
    owner = os.path.join(path, CACHE_OWNER)
    with open(owner + ".new", "w") as f:  # whole or absent: another process may read it now
        f.write(f"{os.getpid()} {_proc_start_time(os.getpid())}\n")
    os.replace(owner + ".new", owner)


def clean_stale_caches(tmpdir: str | None = None, prefix: str = CACHE_PREFIX) -> list[str]:
    """Remove the cache directories of rmqfs daemons that died without cleaning up.

    Only directories named ``<prefix>*`` in ``tmpdir`` (default: the temp dir's
    ``rmqfs-cache-*``; a ``--cache-dir``'s block caches, ``blocks-*``), owned by the current
    user and holding a ``daemon.pid`` (:func:`mark_owner`) whose process is gone (or is another
    process with that pid) are removed. Returns their paths.
    """
    tmpdir = tmpdir or tempfile.gettempdir()
    gone: list[str] = []
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return gone
    for name in names:
        if not name.startswith(prefix):
            continue
        path = os.path.join(tmpdir, name)
        try:
            st = os.lstat(path)
            if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
                continue
            with open(os.path.join(path, CACHE_OWNER), encoding="ascii") as f:
                pid_text, start = f.read().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if pid == os.getpid() or _proc_start_time(pid) == start:
            continue  # alive
        shutil.rmtree(path, ignore_errors=True)
        gone.append(path)
        log.info("removed the view cache %s of dead daemon %d", path, pid)
    return gone


# rmqfs's own -o options, taken out before the rest go to FUSE
