"""``rmqfs umount`` tries again while the mount is busy and no process holds it (a reference
the kernel holds for a moment: CI saw an unmount fail "in use by a process this user cannot
see" under load), and fails at once, naming the holders, when a process does hold it
(tests/mount/test_fs_daemon.py's busy test, on a real mount)."""

from __future__ import annotations

import subprocess

from rmqfs.mount import cli, mounts


def _fusermount(answers):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        code, err = answers[min(len(calls), len(answers)) - 1]
        return subprocess.CompletedProcess(cmd, code, "", err)

    return run, calls


BUSY = "fusermount3: failed to unmount /m: Device or resource busy"


def test_a_busy_mount_nobody_holds_is_unmounted_on_a_later_try(monkeypatch):
    run, calls = _fusermount([(1, BUSY), (1, BUSY), (0, "")])
    monkeypatch.setattr(cli.subprocess, "run", run)
    monkeypatch.setattr(mounts, "mount_users", lambda mnt: [])
    assert cli._unmount(["fusermount3", "-u", "/m"], "/m").returncode == 0
    assert len(calls) == 3


def test_a_busy_mount_a_process_holds_fails_at_once(monkeypatch):
    run, calls = _fusermount([(1, BUSY), (0, "")])
    monkeypatch.setattr(cli.subprocess, "run", run)
    monkeypatch.setattr(mounts, "mount_users", lambda mnt: [(42, "sleep", "cwd")])
    res = cli._unmount(["fusermount3", "-u", "/m"], "/m")
    assert res.returncode == 1 and "busy" in res.stderr and len(calls) == 1


def test_a_mount_that_stays_busy_fails_after_the_retry_time(monkeypatch):
    run, calls = _fusermount([(1, BUSY)])
    monkeypatch.setattr(cli.subprocess, "run", run)
    monkeypatch.setattr(mounts, "mount_users", lambda mnt: [])
    monkeypatch.setattr(cli, "BUSY_RETRY_S", 0.2)
    assert cli._unmount(["fusermount3", "-u", "/m"], "/m").returncode == 1
    assert 2 <= len(calls) <= 10
    run, calls = _fusermount([(1, "fusermount3: entry for /m not found in /etc/mtab")])
    monkeypatch.setattr(cli.subprocess, "run", run)
    assert cli._unmount(["fusermount3", "-u", "/m"], "/m").returncode == 1 and len(calls) == 1
