"""An offline write command on a store an rmqfs mount holds (issue 35, item 2): the refusal names
the mount point and the file that does the same job through the mount, never ``-o ro`` (which
cannot help a write), and each hint works when followed."""

import json
import re
import shlex
import subprocess

import pytest

from conftest import fuse, run_rmqfs

pytestmark = [fuse, pytest.mark.fuse]


def _refused(*args) -> str:
    r = run_rmqfs(*args, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "-o ro" not in r.stderr, r.stderr
    return r.stderr


def _shell(hint: str, what: str) -> str:
    """The shell command of a hint (``... through it: CMD`` up to `` (`` or the end)."""
    m = re.search(what + r": (.+?)(?: \(|$)", hint.strip())
    assert m, hint
    return m[1]


def test_write_commands_on_a_mounted_store_point_at_the_mount(mount_store):
    m = mount_store()
    (m.mnt / "topics" / "T").mkdir()
    (m.mnt / "topics" / "T" / "produce").write_bytes(b"a\nb\nc\nd\ne\nf\ng\nh\n")
    (m.mnt / "groups" / "G").mkdir()
    pid = m.pid

    err = _refused("produce", m.store, "-t", "T", "--body", "x")
    assert f"locked by process {pid}" in err and f"it is mounted on {m.mnt}" in err
    cmd = _shell(err, "produce through it").replace("LINE", "from-the-hint")
    subprocess.run(["bash", "-c", cmd.split(" (or")[0]], check=True)
    assert b"from-the-hint\n" in (m.mnt / "topics" / "T" / "bodies.txt").read_bytes()

    err = _refused("resetOffsetByTime", m.store, "-g", "G", "-t", "T", "-s", "now", "-q", "0")
    cmd = _shell(err, "commit through it, one queue at a time")
    assert f"{m.mnt}/groups/G/T/0/offset" in cmd, err
    subprocess.run(["bash", "-c", cmd.replace("OFFSET", "1")], check=True)
    assert (m.mnt / "groups" / "G" / "T" / "0" / "offset").read_text().strip() == "1"
    # the time lookup the hint names gives the queueOffset to commit
    by_time = m.mnt / "topics" / "T" / "0" / "by-time" / "0"
    assert json.loads(by_time.read_text().splitlines()[0])["queueOffset"] == 0

    err = _refused("update-topic", m.store, "-t", "T", "-p", "4")
    cmd = _shell(err, "change it through it")
    subprocess.run(["bash", "-c", cmd], check=True)
    assert json.loads((m.mnt / "topics" / "T" / "topic.json").read_text())["perm"] == 6

    err = _refused("deleteSubGroup", m.store, "-g", "G")
    cmd = _shell(err, "delete it through it")
    assert cmd == f"rmdir {m.mnt}/groups/G", err
    subprocess.run(shlex.split(cmd), check=True)
    assert not (m.mnt / "groups" / "G").exists()

    err = _refused("recover", m.store)
    assert f"unmount it first: rmqfs umount {m.mnt}" in err
    m.umount()
    run_rmqfs("recover", m.store)
