"""Expiry (engine/service/cleanup.py) under a running mount: the daemon's store deletes files in the
background while the tree serves them (the engine tests of expiry are tests/engine/test_cleanup.py)."""

import json
import os
import time

from conftest import LOGHUB, fuse, run_rmqfs


@fuse
def test_expiry_under_a_running_mount(mount_store, tmp_path):
    """The mount's store expires files in the background (broker.conf keys); the queue files
    show the live messages only, with no I/O error, and verify passes next to it."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\n"
        "maxHashSlotNum=64\nmaxIndexNum=256\nfileReservedTime=0\n"
        f"deleteWhen={time.localtime().tm_hour:02d}\ncleanResourceInterval=100\n"
    )
    m = mount_store(tmp_path / "store", config=conf)
    os.mkdir(m.mnt / "topics" / "T")
    log = (LOGHUB / "HDFS_2k.log").read_bytes()
    (m.mnt / "topics" / "T" / "produce").write_bytes(log)
    deadline = time.monotonic() + 20
    while len(os.listdir(tmp_path / "store" / "commitlog")) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.listdir(tmp_path / "store" / "commitlog") == [f"{524288:020d}"]
    offsets = json.loads((m.mnt / "topics" / "T" / "0" / "offsets.json").read_text())
    assert offsets["minOffset"] > 0 and offsets["maxOffset"] == 500
    lines = (m.mnt / "topics" / "T" / "0" / "messages.jsonl").read_text().splitlines()
    assert [json.loads(x)["queueOffset"] for x in lines] == list(range(offsets["minOffset"], 500))
    status = json.loads((m.mnt / "status.json").read_text())
    assert status["commitLogMinOffset"] == 524288
    assert log.endswith((m.mnt / "topics" / "T" / "bodies.txt").read_bytes())
    r = run_rmqfs("verify", tmp_path / "store", "--config", conf)
    assert "OK: no errors" in r.stdout
