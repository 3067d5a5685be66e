"""Concurrency through a real mount: several writer processes into one topic, readers while
writers write, and a slow render that must not stall the rest of the mount."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import fuse

pytestmark = [fuse, pytest.mark.fuse]

WRITER = r"""
import os, random, sys
path, wid, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rnd = random.Random(wid)
lines = [f"w{wid}-{i:06d}-" + "x" * rnd.randrange(0, 400) for i in range(n)]
if mode == "buffered":      # Python's 8 KiB buffer cuts lines anywhere
    with open(path, "a") as f:
        for line in lines:
            f.write(line + "\n")
elif mode == "tiny":        # many small writes, each cutting a line in pieces
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    data = "".join(l + "\n" for l in lines).encode()
    pos = 0
    while pos < len(data):
        step = rnd.randrange(1, 300)
        pos += os.write(fd, data[pos:pos + step])
    os.close(fd)
else:                       # one line per write, as bash printf does
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    for line in lines:
        os.write(fd, (line + "\n").encode())
    os.close(fd)
"""


def test_concurrent_writers_never_interleave_or_lose_lines(mount_store):
    m = mount_store()
    t = m.mnt / "topics" / "Many"
    os.mkdir(t)
    n = 3000
    modes = ["buffered", "tiny", "lines", "buffered"]
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(t / "produce"), str(w), str(n), mode])
        for w, mode in enumerate(modes)
    ]
    # readers while the writers write: every read shows whole JSON lines, growing
    sizes = []
    while any(p.poll() is None for p in procs):
        size = os.stat(t / "bodies.txt").st_size
        now = (t / "bodies.txt").read_bytes()
        # st_size always ends a whole line: never a torn message
        assert len(now) >= size and (size == 0 or now[size - 1 : size] == b"\n")
        data = (t / "messages.jsonl").read_bytes()
        assert data == b"" or data.endswith(b"\n")
        last = data.rsplit(b"\n", 2)
        if len(last) > 1:
            json.loads(last[-2])
        sizes.append(len(data))
    assert [p.wait() for p in procs] == [0] * len(procs)
    assert sizes == sorted(sizes)
    got = (t / "bodies.txt").read_bytes().decode().splitlines()
    assert len(got) == len(set(got)) == n * len(modes)
    for w in range(len(modes)):
        mine = [x for x in got if x.startswith(f"w{w}-")]
        # each writer's lines whole and in its own order
        assert [x.split("-")[1] for x in mine] == [f"{i:06d}" for i in range(n)]
        assert all(set(x.split("-", 2)[2]) <= {"x"} for x in mine)
    # every queue view and the topic view agree
    rows = [json.loads(x) for x in (t / "messages.jsonl").read_text().splitlines()]
    per_queue = sum(
        len((t / str(q) / "messages.jsonl").read_bytes().splitlines()) for q in range(4)
    )
    assert len(rows) == per_queue == len(got)
    assert [r["commitLogOffset"] for r in rows] == sorted(r["commitLogOffset"] for r in rows)


def test_a_slow_render_does_not_stall_the_mount(mount_store, slow_renders):
    # Every rendered chunk (8,192 messages) of a JSON view sleeps 2 s in this daemon.
    m = mount_store()
    t = m.mnt / "topics" / "Slow"
    os.mkdir(t)
    with open(t / "produce", "w") as f:
        f.write("".join(f"m{i}\n" for i in range(16_000)))  # 2 chunks: 2 s or more
    os.mkdir(m.mnt / "topics" / "Other")
    (m.mnt / "topics" / "Other" / "produce").write_text("hello\n")
    reader = subprocess.Popen(["cat", str(t / "messages.jsonl")], stdout=subprocess.PIPE)
    try:
        time.sleep(0.3)  # the render is under way in a worker thread
        assert reader.poll() is None
        # meanwhile everything else answers
        status = json.loads((m.mnt / "status.json").read_text())
        assert status["messages"] == 16_001
        assert sorted(os.listdir(m.mnt / "topics")) == ["Other", "Slow"]
        assert (m.mnt / "topics" / "Other" / "0" / "produce").stat().st_size == 0
        (m.mnt / "topics" / "Other" / "produce").write_text("again\n")
        assert reader.poll() is None, "the slow render finished before the other requests"
    finally:
        out, _ = reader.communicate(timeout=60)
    assert len(out.splitlines()) == 16_000
