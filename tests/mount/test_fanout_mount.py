"""A mount of a store whose records fan out to many LMQ queues (issue 36 item 3: the mount took
over 1.5 GB and 50 s to open, and ``ls topics`` of the 22,500 queues the bound keeps ran for
minutes, then 9 s): it opens in seconds, and ``ls`` builds each entry once."""

import os
import subprocess
import time

import pytest

from conftest import fuse
from lmqstore import build_fanout_store

pytestmark = [fuse, pytest.mark.fuse]


def test_ls_of_a_topic_directory_of_22500_queues_takes_seconds(mount_store, tmp_path):
    root = tmp_path / "store"
    build_fanout_store(root, records=400, per_record=2500, shared=False)
    t0 = time.monotonic()
    m = mount_store(root, "ro")
    opened = time.monotonic() - t0
    t0 = time.monotonic()
    names = subprocess.run(
        ["ls", "-f", str(m.mnt / "topics")], capture_output=True, text=True, check=True
    ).stdout.split()
    listed = time.monotonic() - t0
    names = [n for n in names if n not in (".", "..")]
    assert len(names) == len(set(names)) > 20_000 and "T" in names
    t0 = time.monotonic()
    long = subprocess.run(
        ["ls", "-l", str(m.mnt / "topics")], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    listed_long = time.monotonic() - t0
    assert len(long) == len(names) + 1  # "total" and a line each
    print(f"open {opened:.1f} s, ls {listed:.1f} s, ls -l {listed_long:.1f} s, {len(names)} names")
    assert opened < 20 and listed < 5 and listed_long < 10
    assert os.listdir(m.mnt / "topics" / "T") == os.listdir(m.mnt / "topics" / "T")
