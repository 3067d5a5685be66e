"""What may be inside a store directory, and opening files there without following links.

A store is data handed to the daemon, possibly by someone else (a tarball, a shared disk), and
the daemon may serve it to other users (``allow_other``). So nothing in it may make the engine
read or write outside it: a symbolic link anywhere under the store root (``commitlog/x ->
/etc/shadow``, ``consumequeue/T -> /``) or a special file (a FIFO would block the reader
forever, a device would be read as data) makes the whole store refused with
:class:`~engine.errors.UnsafeStoreError`, naming the entries. The root itself may be a link
(``/data/store -> /mnt/disk/store``): it is resolved once when the store opens.

Files are then opened with ``O_NOFOLLOW`` by their owners (:mod:`engine.format.mappedfile`,
:mod:`engine.format.indexfile`); :func:`open_beneath` opens a path below the root one component at a
time (``openat`` with ``O_NOFOLLOW``), for readers such as ``raw/`` that serve names chosen
by users while the store is live.
"""

from __future__ import annotations

import errno
import os
import stat

from ..errors import UnsafeStoreError

MAX_LISTED = 5  # entries named in the error message


def unsafe_entries(root: str, limit: int = 1000) -> list[str]:
    """Paths (relative to ``root``) of symbolic links and special files below ``root``.

    Walks the whole tree without following links (``os.walk(followlinks=False)``); stops after
    ``limit`` finds. An unreadable directory is reported as well (its content is unknown).
    """
    found: list[str] = []

    def onerror(exc: OSError) -> None:
        if exc.filename and os.path.abspath(exc.filename) != os.path.abspath(root):
            found.append(os.path.relpath(exc.filename, root) + f" ({exc.strerror})")

    for dirpath, dirs, files in os.walk(root, onerror=onerror, followlinks=False):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            try:
                mode = os.lstat(p).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                found.append(os.path.relpath(p, root) + " (symbolic link)")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                found.append(os.path.relpath(p, root) + " (special file)")
            if len(found) >= limit:
                return found
    return found


def check_store_tree(root: str) -> None:
    """Raise UnsafeStoreError when :func:`unsafe_entries` finds anything below ``root``."""
    bad = unsafe_entries(root)
    if bad:
        more = f" and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
        raise UnsafeStoreError(
            f"store {root} holds entries rmqfs never follows or reads: "
            f"{', '.join(bad[:MAX_LISTED])}{more}; remove them (a store holds only regular "
            "files and directories)"
        )


def open_beneath(root: str, rel: str, flags: int = os.O_RDONLY) -> int:
    """Open ``root/rel`` without following any link below ``root``; return the fd.

    Each directory component is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the one
    before (``openat``), the last with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks) and
    must be a regular file or a directory.

    Raises:
        OSError: ELOOP for a link, ENOENT, EACCES for a special file, ...
    """
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise OSError(errno.EACCES, "path leaves the store", rel)
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for p in parts[:-1]:
            nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        if not parts:
            fd, dfd = dfd, -1
            return fd
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    finally:
        if dfd >= 0:
            os.close(dfd)
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.close(fd)
        raise OSError(errno.EACCES, "not a regular file", rel)
    if flags & os.O_NONBLOCK == 0:
        import fcntl

        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
    return fd


def lstat_beneath(root: str, rel: str) -> os.stat_result:
    """``lstat`` of ``root/rel`` where no directory on the way may be a link (ELOOP)."""
    parts = [p for p in rel.split("/") if p]
    if not parts:
        return os.stat(root)
    dfd = (
        open_beneath(root, "/".join(parts[:-1]), os.O_RDONLY)
        if len(parts) > 1
        else os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    )
    try:
        return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)
