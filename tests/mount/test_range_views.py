"""Issue 32, item 1, through a real mount: a topic's messages.jsonl some twenty times the
render cache (``-o ro --cache-size 3M``) answers stat at once, reads whole with ``cat``
(exactly st_size bytes, one line per message), answers ``tail -n 3`` with the last lines cat
read and random preads with the same bytes as cat, while the cache, sampled every 10 ms,
never passes its bound. Before, the view was rendered whole into the cache: EFBIG."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time

from conftest import LOGHUB_LOGS, du, fuse, run_rmqfs
from rmqfs.engine.store import Message, MessageStore


@fuse
def test_a_view_twenty_times_the_cache_reads_by_range(tmp_path):
    lines = [x for f in LOGHUB_LOGS for x in f.read_bytes().splitlines() if x]
    n = 120_000
    store = tmp_path / "store"
    with MessageStore(str(store)) as s:
        s.create_topic("T", 4)
        for a in range(0, n, 8000):
            s.put_messages(
                [
                    Message("T", lines[(a + i) % len(lines)], queue_id=(a // 8000) % 4)
                    for i in range(8000)
                ]
            )
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    mnt.mkdir()
    bound = 3 << 20
    run_rmqfs(
        "mount",
        store,
        mnt,
        "-o",
        "ro",
        "--cache-size",
        "4M",
        "--cache-dir",
        cache,
        "--broker-name",
        "b",
        "--log-file",
        tmp_path / "mnt.log",
    )
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], du(cache))
            time.sleep(0.01)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        view = mnt / "topics" / "T" / "messages.jsonl"
        size = os.stat(view).st_size
        assert size > 20 * bound
        out = tmp_path / "cat.out"
        with open(out, "wb") as f:
            subprocess.run(["cat", str(view)], stdout=f, check=True, timeout=120)
        data = out.read_bytes()
        assert len(data) == size and data.count(b"\n") == n
        t0 = time.monotonic()
        tail = subprocess.run(
            ["tail", "-n", "3", str(view)], capture_output=True, check=True
        ).stdout
        print(f"tail -n 3 of {size} bytes: {time.monotonic() - t0:.3f} s")
        assert tail == b"".join(data.splitlines(keepends=True)[-3:])
        wc = subprocess.run(["wc", "-l", str(view)], capture_output=True, text=True, check=True)
        assert int(wc.stdout.split()[0]) == n
        rnd = random.Random(3)
        fd = os.open(view, os.O_RDONLY)
        try:
            for _ in range(100):
                at, k = rnd.randrange(size), rnd.choice((1, 4096, 200_000))
                assert os.pread(fd, k, at) == data[at : at + k], at
        finally:
            os.close(fd)
        head = subprocess.run(["head", "-c", "200", str(view)], capture_output=True, check=True)
        assert head.stdout == data[:200]
    finally:
        stop.set()
        t.join()
        run_rmqfs("umount", mnt)
    print(f"render cache peak {peak[0]} bytes on disk for --cache-size {bound}")
    assert 0 < peak[0] <= bound
    assert "Traceback" not in (tmp_path / "mnt.log").read_text()
