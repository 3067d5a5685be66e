"""Decoded views of compressed records whose bodies inflate far past their records' size (a
review's store: 40 zstd records of 530 bytes, each inflating to 16 MiB, made one chunk of
40 KB of estimated room and 1.3 GB of lines, which a render worker decoded at once and the
daemon then held whole). The render workers decode a chunk in pieces of bounded bodies, the
sizing pass cuts a chunk whose lines are longer than ``CHUNK_BYTES`` into chunks of at most
that, and nothing a view's reads hold grows with the number of such records; the bytes are the
per-record renderer's, for every way of reading (stat, any offset, tail, cat)."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

import rmqfs.fusefs.views as V
from rmqfs.engine.format.message import (
    COMPRESSED_FLAG,
    COMPRESSION_LZ4,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    MAX_INFLATED_BODY,
    compress_body,
)
from rmqfs.engine.read import columnar
from rmqfs.engine.service.putmessage import put_internal
from rmqfs.engine.store import Message, MessageStore
from rmqfs.fusefs import render as R

MIB = 1 << 20
#: what the tests cut chunks at (the sizing pass's bound; the workers learn it per task)
BOUND = 3 * MIB
KINDS = (COMPRESSION_ZSTD, COMPRESSION_ZLIB, COMPRESSION_LZ4)


def _store(root) -> MessageStore:
    """Topic ``T`` of two queues: 14 compressed records of a few KB at most, each inflating to
    2 MiB of text or of bytes that are not UTF-8 (base64 lines), zstd, zlib and lz4, between
    small plain ones, and one zstd record over MAX_INFLATED_BODY (served as stored)."""
    s = MessageStore(str(root))
    s.create_topic("T", 2)
    for i in range(14):
        kind = KINDS[i % 3]
        plain = (b"A" if i % 4 else b"\xff\xfe") * (2 * MIB // (1 if i % 4 else 2))
        put_internal(
            s,
            [
                Message(
                    "T",
                    compress_body(plain, kind),
                    keys=[f"k{i}"],
                    queue_id=i % 2,
                    sys_flag=COMPRESSED_FLAG | kind,
                    compress=False,
                ),
                Message("T", b"plain %d" % i, tags="p", queue_id=(i + 1) % 2),
            ],
        )
    over = compress_body(b"B" * (MAX_INFLATED_BODY + 1), COMPRESSION_ZSTD)
    flag = COMPRESSED_FLAG | COMPRESSION_ZSTD
    put_internal(s, [Message("T", over, queue_id=0, sys_flag=flag, compress=False)])
    return s


def _topic_lines(store: MessageStore, render=R.render_message) -> list[bytes]:
    recs = [r for q in store.queue_ids("T") for _, r in store.iter_queue("T", q)]
    recs.sort(key=lambda r: r.commitlog_offset)
    return [render(r) for r in recs]


def _queue_lines(store: MessageStore, q: int, render=R.render_message) -> list[bytes]:
    return [render(r) for _, r in store.iter_queue("T", q)]


def _check_view(v: V.View, want: bytes, longest: int) -> None:
    """The view's size, index and bytes, read every way, without holding more than a read."""
    assert v.size == len(want)  # stat: from the index alone
    ix = v.index
    assert ix.chunks > 3  # the planned chunk was cut
    for i in range(ix.chunks):
        length = ix.byte_at[i + 1] - ix.byte_at[i]
        assert length <= BOUND or ix.line_at[i + 1] - ix.line_at[i] == 1
        assert length <= max(BOUND, longest)
    v.hold()
    try:
        assert v.read(0, 100) == want[:100]  # head -c 100
        assert v.read(v.size - 100, 1 << 20) == want[-100:]  # tail
        rnd = random.Random(5)
        for _ in range(20):  # pread anywhere, some across chunk ends
            a = rnd.randrange(v.size)
            n = rnd.choice((1, 4096, 128 << 10))
            assert v.read(a, n) == want[a : a + n]
        at = 0
        while at < v.size:  # cat: 128 KiB at a time
            got = v.read(at, 128 << 10)
            assert got and got == want[at : at + len(got)]
            at += len(got)
    finally:
        v.release()


@pytest.mark.parametrize("cache_size", [2 * MIB, 256 * MIB], ids=["no-room", "room"])
def test_inflating_records_are_cut_into_bounded_chunks_with_the_same_bytes(
    tmp_path, monkeypatch, cache_size
):
    """A view of compressed records that inflate 500-50,000 fold, under a cache too small for
    a chunk (each rendered into memory for its read) and under one that holds them all: the
    index's chunks hold at most BOUND bytes of lines (or one line), the daemon holds a few
    chunks at most at any moment (the whole view is over 20 MiB), and every read serves the
    per-record renderer's bytes."""
    monkeypatch.setattr(V, "CHUNK_BYTES", BOUND)
    store = _store(tmp_path / "s")
    views = V.ViewCache(store, str(tmp_path / "cache"), cache_size=cache_size, workers=2)
    try:
        lines = _topic_lines(store)
        want = b"".join(lines)
        longest = max(len(x) for x in lines)
        assert len(want) > 20 * MIB and longest < BOUND
        tracemalloc.start()
        try:
            v = views.topic("messages", "T", R.render_message)
            _check_view(v, want, longest)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 5 * BOUND, peak  # never the view, nor a chunk of all its records
        for q in range(2):
            qv = views.queue("messages", "T", q, R.render_message)
            _check_view(qv, b"".join(_queue_lines(store, q)), longest)
        bodies = _topic_lines(store, R.render_body)
        bv = views.topic("bodies", "T", R.render_body)
        _check_view(bv, b"".join(bodies), max(len(x) for x in bodies))
    finally:
        views.close()
        store.close()


def test_a_worker_decodes_a_chunk_in_pieces_of_bounded_bodies(tmp_path, monkeypatch):
    """render_view_chunk of the one chunk the records' sizes plan (in this process, as a
    worker runs it): the units are decoded a few MiB of bodies at a time (one record alone
    may have more), and the lines, returned, written to a file or only counted, are the
    per-record renderer's, with their ends when asked."""
    monkeypatch.setattr(R, "RENDER_BODY_BYTES", 5 * MIB)
    calls: list[tuple[int, int]] = []  # (rows, body bytes) of each decode
    real = columnar.decode_topic_units

    def decode(*args, **kwargs):
        batch = real(*args, **kwargs)
        body = sum(len(b) for b in batch.column("body").to_pylist())
        calls.append((batch.num_rows, body))
        return batch

    monkeypatch.setattr(columnar, "decode_topic_units", decode)
    store = _store(tmp_path / "s")
    try:
        lines = _topic_lines(store)
        want = b"".join(lines)
        start = dict.fromkeys(store.queue_ids("T"), 0)
        cut = store.queue_max_offsets("T")
        planned = list(V.plan_chunks(store, "T", "messages", None, start, cut, {}))
        assert len(planned) == 1  # the records' sizes say a few KB of lines
        ids, units, qoffs, _ends = planned[0]
        directory = store.commitlog.files.directory
        got = R.render_view_chunk(directory, "T", ids, units, qoffs, "messages", None, 0)
        assert got.data == want and got.length == len(want) and got.lines == len(lines)
        assert got.ends is not None
        assert got.ends.tolist() == np.cumsum([len(x) for x in lines]).tolist()
        assert len(calls) > 4 and sum(rows for rows, _ in calls) == len(lines)
        assert all(body <= 5 * MIB or rows == 1 for rows, body in calls)
        # written to a file when the lines fit its room, else only counted
        path = str(tmp_path / "c0")
        put = R.render_view_chunk(directory, "T", ids, units, qoffs, "messages", (path, len(want)))
        assert put.written and put.data is None and put.ends is None
        with open(path, "rb") as f:
            assert f.read() == want
        path = str(tmp_path / "c1")
        room = len(want) - 1
        short = R.render_view_chunk(directory, "T", ids, units, qoffs, "messages", (path, room))
        assert not short.written and short.data is None and short.length == len(want)
        assert not (tmp_path / "c1").exists()
        sized = R.render_view_chunk(directory, "T", ids, units, qoffs, "messages", R.SIZE_ONLY)
        assert (sized.length, sized.lines, sized.data) == (len(want), len(lines), None)
    finally:
        store.close()


def test_a_parquet_part_of_inflating_records_holds_bounded_row_groups(tmp_path, monkeypatch):
    """A ``view/`` part is written a row group at a time, and a row group of 65,536 units of
    compressed records that inflate to 16 MiB each held them all at once. A row group now also
    ends where the next body would pass PART_ROW_GROUP_BYTES (one body alone may): the rows
    are the decoder's, the groups bounded, and the same units give the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmqfs.engine.read.columnar import StoreFiles, queue_units
    from rmqfs.engine.read.schema import part_schema

    store = _store(tmp_path / "s")
    try:
        names = part_schema().names
        directory = store.commitlog.files.directory
        files = StoreFiles(str(tmp_path / "s"))
        for q in range(2):
            cq = store.consume_queue("T", q)
            lo, hi = cq.min_offset, cq.max_offset
            units = queue_units(cq, lo, hi)[0]
            want = pa.Table.from_batches(
                list(files.read_batches("T", q, lo, hi, columns=tuple(names))), part_schema()
            )
            out = str(tmp_path / f"whole-{q}.parquet")
            R.render_part(directory, "T", q, units, lo, out)
            assert pq.ParquetFile(out).metadata.num_row_groups == 1  # (under 128 MiB)
            monkeypatch.setattr(R, "PART_ROW_GROUP_BYTES", BOUND)
            cut = [str(tmp_path / f"cut-{q}-{k}.parquet") for k in range(2)]
            for path in cut:
                _size, _newest, rows = R.render_part(directory, "T", q, units, lo, path)
            monkeypatch.undo()
            got = pq.read_table(cut[0])
            assert got.equals(want) and rows == want.num_rows
            with open(cut[0], "rb") as a, open(cut[1], "rb") as b:
                assert a.read() == b.read()  # a function of the units
            meta = pq.ParquetFile(cut[0]).metadata
            assert meta.num_row_groups > 3
            for g in range(meta.num_row_groups):
                group = pq.ParquetFile(cut[0]).read_row_group(g, columns=["body"])
                body = sum(len(x) for x in group.column("body").to_pylist())
                assert body <= BOUND or group.num_rows == 1, (q, g, body)
        files.close()
    finally:
        store.close()
