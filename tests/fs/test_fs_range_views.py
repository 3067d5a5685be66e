"""Decoded views served by range (issue 32): a seek-point index per view (``ChunkIndex``)
from a sizing pass that keeps no rendered bytes, reads that render only the chunks they touch
into a bounded cache, and the same bytes as the per-record renderer, for topic and queue
views, as they grow, under a cache far smaller than the view and under none at all."""

from __future__ import annotations

import os
import random
import threading

import pytest

import rmqfs.fusefs.views as V
from rmqfs.engine.store import Message, MessageStore
from rmqfs.fusefs import render as R


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of at most 500 messages or 100 KB of room: many chunks from a small store (the
    index is built in this process; the workers render whatever units they are given)."""
    monkeypatch.setattr(V, "CHUNK_UNITS", 500)
    monkeypatch.setattr(V, "CHUNK_ROOM", 100_000)


def _store(root, topics: dict[str, int], per_queue: int, seed: int = 1) -> MessageStore:
    rnd = random.Random(seed)
    s = MessageStore(str(root))
    for t, queues in topics.items():
        s.create_topic(t, queues)
        for q in range(queues):
            s.put_messages(
                [
                    Message(
                        t,
                        (b'x"\\\n\x01%d-' % i) * rnd.randint(1, 40),
                        tags=f"t{i % 3}",
                        keys=[f"k{i}"],
                        queue_id=q,
                    )
                    for i in range(per_queue)
                ]
            )
    return s


def _topic_bytes(store, topic, render=R.render_message) -> bytes:
    recs = [r for q in store.queue_ids(topic) for _, r in store.iter_queue(topic, q)]
    recs.sort(key=lambda r: r.commitlog_offset)
    return b"".join(render(r) for r in recs)


def _queue_bytes(store, topic, q, render=R.render_message) -> bytes:
    return b"".join(render(r) for _, r in store.iter_queue(topic, q))


class _Bound:
    """Samples ``budget.used()`` in a thread while a test reads: the bound at every moment."""

    def __init__(self, views):
        self.views, self.peak, self.stop = views, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.views.budget.used())
            self.stop.wait(0.002)

    def done(self) -> int:
        self.stop.set()
        self.t.join()
        return self.peak


def test_a_view_many_times_the_cache_reads_by_range(tmp_path, small_chunks):
    store = _store(tmp_path / "s", {"T": 4}, 3000)
    cache = 300_000
    views = V.ViewCache(store, str(tmp_path / "cache"), cache_size=cache, workers=2)
    try:
        bound = _Bound(views)
        v = views.topic("messages", "T", R.render_message)
        want = _topic_bytes(store, "T")
        assert v.size == len(want) > 20 * cache  # the exact size, from the index alone
        assert v.index.chunks > 20 and v.index.line_at[-1] == 12_000
        views.chunks.read_ahead(v, v.index, -1)  # as a reader at the start would
        got = bytearray()
        while len(got) < v.size:  # as cat reads: 128 KiB at a time
            got += v.read(len(got), 128 << 10)
        assert got == want
        rnd = random.Random(7)
        for _ in range(300):  # pread at random offsets, some across chunk ends
            a = rnd.randrange(v.size)
            n = rnd.choice((1, 100, 5000, 300_000))
            assert v.read(a, n) == want[a : a + n]
        assert v.read(v.size - 50, 1 << 20) == want[-50:]  # tail: the last chunk alone
        assert v.read(v.size, 10) == b""
        for q in range(4):
            qv = views.queue("messages", "T", q, R.render_message)
            assert qv.read(0, 1 << 30) == _queue_bytes(store, "T", q)
            bv = views.queue("bodies", "T", q, R.render_body)
            assert bv.read(0, 1 << 30) == _queue_bytes(store, "T", q, R.render_body)
        assert 0 < bound.done() <= cache
        kept = sum(
            os.path.getsize(os.path.join(d, f))
            for d, _, fs in os.walk(views.chunks.dir)
            for f in fs
        )
        assert kept <= cache
    finally:
        views.close()
        store.close()


def test_chunks_render_in_the_workers_and_a_stat_after_eviction_renders_nothing(
    tmp_path, small_chunks
):
    store = _store(tmp_path / "s", {"W": 3}, 1000)
    views = V.ViewCache(store, str(tmp_path / "cache"), cache_size=200_000, workers=2)
    try:
        v = views.topic("messages", "W", R.render_message)
        procs = views.parts._pool._processes
        assert procs and os.getpid() not in procs
        want = _topic_bytes(store, "W")
        assert v.read(0, 1 << 30) == want  # most chunks evicted on the way
        calls = []
        real = views.parts.submit_task
        views.parts.submit_task = lambda *a: calls.append(a) or real(*a)
        assert views.peek("messages", "W") is v and v.size == len(want)  # no render
        assert views.topic("messages", "W", R.render_message).size == len(want)
        assert not calls
        assert v.read(0, 1 << 30) == want  # evicted chunks: rendered again, same bytes
        assert calls
    finally:
        views.close()
        store.close()


def test_a_growing_view_keeps_chunks_of_a_useful_size_and_its_order(tmp_path, small_chunks):
    """A view that grows a few messages at a time cuts its short last chunk again instead of
    adding one chunk per sync; a topic view stays in CommitLog order."""
    store = _store(tmp_path / "s", {"G": 3}, 10)
    views = V.ViewCache(store, str(tmp_path / "cache"), cache_size=1 << 20, workers=2)
    try:
        for k in range(60):
            store.put_messages([Message("G", b"late %d" % k, queue_id=k % 3, keys=["x"])])
            v = views.topic("messages", "G", R.render_message)
            qv = views.queue("messages", "G", k % 3, R.render_message)
            if k % 7 == 0:
                assert v.read(0, 1 << 30) == _topic_bytes(store, "G")
                assert qv.read(0, 1 << 30) == _queue_bytes(store, "G", k % 3)
        # not one chunk per sync (61): a short last chunk is cut again, longer
        assert v.index.chunks <= 1 + v.size // (V.CHUNK_ROOM // 4) < 10
        assert qv.index.chunks == 1
        assert v.read(0, 1 << 30) == _topic_bytes(store, "G")
        assert v.up_to_date()
        store.put_messages([Message("G", b"more", queue_id=1)])
        assert not v.up_to_date() and views.peek("messages", "G") is None
    finally:
        views.close()
        store.close()


def test_pending_starts_at_the_line_of_a_queue_offset(tmp_path, small_chunks):
    store = _store(tmp_path / "s", {"P": 1}, 2200)
    views = V.ViewCache(store, str(tmp_path / "cache"), cache_size=150_000, workers=2)
    try:
        v = views.queue("messages", "P", 0, R.render_message)
        whole = _queue_bytes(store, "P", 0)
        starts = [0]
        for line in whole.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        for qo in (0, 1, 499, 500, 501, 1234, 2199, 2200, 5000):
            assert v.byte_offset(qo) == starts[min(qo, 2200)], qo
    finally:
        views.close()
        store.close()


def test_a_chunk_the_cache_cannot_hold_is_read_from_memory(tmp_path):
    """With a cache smaller than one chunk nothing is kept, and every read still answers:
    the chunk is rendered into memory for the read (no EFBIG)."""
    store = _store(tmp_path / "s", {"M": 2}, 1500)
    views = V.ViewCache(store, str(tmp_path / "cache"), cache_size=16 << 10, workers=2)
    try:
        v = views.topic("bodies", "M", R.render_body)
        want = _topic_bytes(store, "M", R.render_body)
        assert v.size == len(want) > 30 * (16 << 10)
        v.hold()  # as an open handle: reads in the same chunk reuse its render
        got = bytearray()
        while len(got) < v.size:
            got += v.read(len(got), 128 << 10)
        v.release()
        assert got == want
        assert not views.chunks.kept and views.budget.used() == 0
    finally:
        views.close()
        store.close()
