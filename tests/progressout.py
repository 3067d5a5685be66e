"""Running the rmqfs command with stderr on a terminal (a pty), to see what it draws there."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios

from conftest import REPO, SRC_PATH, rmqfs_cmd


def run_on_pty(*args, timeout: float = 120) -> tuple[int, str, str]:
    """Run ``rmqfs ARGS`` with stderr on a new pty; ``(returncode, stdout, stderr)``."""
    master, slave = pty.openpty()
    # a terminal 100 columns wide (a new pty has 0: tqdm would draw an empty bar)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = dict(os.environ, PYTHONPATH=SRC_PATH)
    proc = subprocess.Popen(
        rmqfs_cmd(*args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
        cwd=REPO,
    )
    os.close(slave)
    err = b""
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command (the last holder of the slave) exited
                break
            if not data:
                break
            err += data
        out = proc.stdout.read()
        proc.wait(timeout)
    finally:
        os.close(master)
        proc.stdout.close()
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
