"""The dead-mount guard: a process that unmounts rmqfs's mount when its daemon dies without
unmounting (``kill -9``, the OOM killer, a crash), where libfuse's ``auto_unmount`` misses.

``auto_unmount`` is fusermount3 staying behind the mount and reading a socket the daemon
holds; when the socket closes, fusermount3 (``should_auto_unmount`` in libfuse's
util/fusermount.c, 3.14 here) opens the mount point and unmounts only when the open fails
with ENOTCONN. A killed daemon's descriptors are released one by one: when the socket goes
before the /dev/fuse descriptor, fusermount3's open reaches a session still connected,
waits, and fails with ECONNABORTED once the session is aborted, and the mount stays dead
("Transport endpoint is not connected"). Measured here: 4 of 60 ``kill -9`` of a daemon
taking writes on two busy cores left the mount behind.

The daemon starts this guard once mounted (:func:`start`), with the read end of a pipe whose
write end only the daemon holds (close-on-exec, so no process the daemon starts keeps it,
render workers included). End of file on it means the daemon is gone, however it ended. The
guard then asks :func:`mount.mounts.clean_dead_mount`, which unmounts only an rmqfs mount
whose directory answers ENOTCONN or ECONNABORTED: the listing it sends waits for the session
to be aborted, so either answer proves the daemon dead. A clean unmount, or fusermount3
unmounting first, leaves nothing to do; a new mount at the same place answers, and is kept.

The guard runs in a session of its own (a terminal's Ctrl-C stops the daemon, which then
unmounts cleanly, not the guard), imports nothing heavy (about 13 MB resident) and exits
with the daemon.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import IO

log = logging.getLogger("rmqfs")


def start(mountpoint: str, log_file: str | None = None) -> tuple[subprocess.Popen, int]:
    """Start the guard of the mount at ``mountpoint``; call it once mounted.

    Returns the guard's process and the pipe's write end, which the caller keeps open for
    as long as it serves the mount (closing it, or exiting, sets the guard off). The
    guard's messages go to ``log_file`` (appended), else to this process's stderr when that
    is a terminal (``rmqfs mount -f``), else nowhere. Raises OSError when the process cannot
    start.
    """
    r, w = os.pipe()  # both close-on-exec: r is handed over as the guard's stdin only
    try:
        if log_file:
            with open(log_file, "ab") as out:
                proc = _spawn(mountpoint, r, out)
        else:
            proc = _spawn(mountpoint, r, None if os.isatty(2) else subprocess.DEVNULL)
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    return proc, w


def _spawn(mountpoint: str, stdin: int, stderr: int | IO[bytes] | None) -> subprocess.Popen[bytes]:
    from .mounts import module_env

    return subprocess.Popen(
        [sys.executable, "-m", "rmqfs.mount.guard", os.path.abspath(mountpoint)],
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
        cwd="/",
        env=module_env(),
    )


def watch(mountpoint: str, fd: int = 0) -> bool:
    """Wait for end of file on ``fd`` (the daemon gone), then lazily unmount the mount at
    ``mountpoint`` if it is a dead rmqfs mount. Returns True when it unmounted one; a failed
    unmount is logged, not raised."""
    from .mounts import MountError, clean_dead_mount

    while os.read(fd, 4096):  # the daemon never writes: this returns at end of file
        pass
    try:
        return clean_dead_mount(mountpoint)
    except MountError as exc:
        log.error("%s", exc)
        return False


def main(argv: list[str] | None = None) -> int:
    """``python -m rmqfs.mount.guard MOUNTPOINT``, stdin the daemon's pipe: see the module's text."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m rmqfs.mount.guard MOUNTPOINT  (stdin: the daemon's pipe)",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(format="%(asctime)s rmqfs-guard %(levelname)s %(message)s")
    watch(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
