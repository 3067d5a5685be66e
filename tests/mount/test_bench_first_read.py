"""bench/first_read.py on stores of a few thousand lines, so the bench cannot rot: each size
built, mounted, its views read three ways and the mount gone after, and the growth lines
printed. The figures themselves are not checked (a few thousand lines on a shared machine say
nothing)."""

from __future__ import annotations

import pytest

from bench import first_read, stores
from conftest import fuse

pytestmark = [
    fuse,
    pytest.mark.skipif(not list(stores.LOGHUB.glob("*_2k.log")), reason="no loghub logs"),
]


def test_command_reads_every_size_and_says_how_it_grows(capsys):
    assert first_read.main(["--sizes", "2000,4000"]) == 0
    out = capsys.readouterr().out
    assert "2,000 msgs" in out and "4,000 msgs" in out
    assert "from 2,000 to 4,000 lines a topic (2x):" in out
    for label, _ in first_read.ROWS:
        assert out.count(label) == 2  # its row and its growth line
    with open("/proc/mounts") as f:
        assert "rmqfs-bench-first-" not in f.read()  # every mount is gone
