"""``rmqfs mount`` of a crashed store says how far its recovery is (bars on a terminal only)
and what it did (one summary line on stderr, status.json ``recovery``, the log)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import fuse, in_mount_table, run_rmqfs
from progressout import run_on_pty
from rmqfs.engine.store import Message, MessageStore
from stores import small


def _crashed_store(root):
    with MessageStore(str(root), small()) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"x" * 300, keys=[f"k{i}"]) for i in range(100)])
    (root / "abort").write_text("1")  # a crash: the broker's abnormal recovery
    shutil.rmtree(root / "index")  # and rebuilt from the CommitLog: 2 entries per message
    return root


SUMMARY = re.compile(
    r"^rmqfs: recovery after a crash in [\d.]+ s: scanned [\d.]+ KiB of "
    r"CommitLog \(100 records, \[0, \d+\)\), rebuilt 0 ConsumeQueue units and "
    r"200 index entries$",
    re.M,
)


@fuse
@pytest.mark.fuse
def test_mount_of_a_crashed_store_prints_what_recovery_did(tmp_path):
    store, mnt = _crashed_store(tmp_path / "s"), tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "log"
    try:
        res = run_rmqfs("mount", store, mnt, "--log-file", log, "--broker-name", "broker-a")
        # stderr is a pipe here: the summary line only, no bar
        assert SUMMARY.fullmatch(res.stderr.strip()), res.stderr
        status = json.loads((mnt / "status.json").read_text())["recovery"]
        assert status["abnormal"] and status["didSomething"]
        assert status["recordsScanned"] == 100 and status["indexEntriesRebuilt"] == 200
        assert "recovery after a crash" in log.read_text()  # and logged
        run_rmqfs("umount", mnt)
        # a clean shutdown then: the next mount says nothing
        res = run_rmqfs("mount", store, mnt, "--log-file", log, "--broker-name", "broker-a")
        assert res.stderr == ""
        status = json.loads((mnt / "status.json").read_text())["recovery"]
        assert not status["abnormal"] and not status["didSomething"]
        run_rmqfs("umount", mnt)
    finally:
        if in_mount_table(mnt):
            run_rmqfs("umount", "-z", mnt, check=False)


@fuse
@pytest.mark.fuse
def test_mount_draws_the_recovery_on_a_terminal(tmp_path):
    store, mnt = _crashed_store(tmp_path / "s"), tmp_path / "mnt"
    mnt.mkdir()
    try:
        rc, _, err = run_on_pty("mount", store, mnt, "--log-file", tmp_path / "log")
        assert rc == 0, err
        assert "recovering CommitLog" in err and "loading ConsumeQueues" in err  # the bars
        assert SUMMARY.search(err.replace("\r\n", "\n").split("\r")[-1]), err
        run_rmqfs("umount", mnt)
    finally:
        if in_mount_table(mnt):
            run_rmqfs("umount", "-z", mnt, check=False)
