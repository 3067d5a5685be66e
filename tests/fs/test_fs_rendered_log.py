"""RenderedLog's regions: render workers write their lines straight into reserved regions of
the cache file, the daemon records them; reads map view offsets across regions and holes."""

import os

import numpy as np

from rmqfs.fusefs import render as R
from rmqfs.fusefs.base import try_on_loop
from rmqfs.fusefs.views import RenderedLog
from stores import produce


def _put(log, data: bytes, ends, room: int) -> None:
    at = log.reserve(room)
    fd = os.open(log.path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, at)
    finally:
        os.close(fd)
    log.append_region(at, len(data), np.array(ends), 7)


def test_reads_cross_regions_and_skip_their_holes(tmp_path):
    log = RenderedLog(str(tmp_path / "v"))
    _put(log, b"a\nbb\n", [2, 5], room=100)
    log.append_block(b"ccc\n", np.array([4]), 9)  # a block the daemon writes itself
    _put(log, b"dddd\n", [5], room=5)
    want = b"a\nbb\nccc\ndddd\n"
    assert log.size == len(want) and list(log.ends) == [2, 5, 9, 14]
    for a in range(len(want) + 1):
        for n in (1, 3, 7, 100):
            assert log.read(a, n) == want[a : a + n], (a, n)
            assert try_on_loop(log.read, a, n) == want[a : a + n]
            assert log.read(a, n, end=9) == want[a : min(a + n, 9)]
    # holes left by short blocks take no disk blocks and are never read
    assert os.stat(log.path).st_size > len(want)
    assert log.line_at(5) == 2 and log.line_start(3) == 9 and log.mtime_ms == 9
    log.close()
    assert not os.path.exists(log.path)


def test_a_chunk_longer_than_its_room_comes_back_whole(tmp_path):
    from rmqfs.engine.read.columnar import StoreFiles, decode_units

    root = tmp_path / "s"
    produce(root, 20)
    files = StoreFiles(str(root))
    units = files.units("T", 0, 0, files.max_offset("T", 0))
    files.close()
    cl = str(root / "commitlog")
    qoffs = np.arange(len(units))
    batch = decode_units(
        R._worker_segments(cl), "T", 0, units, qoffs, columns=R.LINE_COLUMNS["messages"]
    )
    want, ends, newest = R.render_lines(batch, "messages")
    log = RenderedLog(str(tmp_path / "v"))
    room = R.chunk_room("messages", units)
    assert room >= len(want)
    at = log.reserve(room)
    n, data, got_ends, got_newest = R.render_view_chunk(
        cl, "T", 0, units, qoffs, "messages", (log.path, at, room)
    )
    assert data is None and n == len(want)  # written into the region
    assert os.pread(log.fd, n, at) == want
    n, data, got_ends2, _ = R.render_view_chunk(
        cl, "T", 0, units, qoffs, "messages", (log.path, log.reserve(10), 10)
    )
    assert data == want and n == len(want)  # no room: returned
    assert got_ends.tolist() == got_ends2.tolist() == ends.tolist() and got_newest == newest
    log.close()
