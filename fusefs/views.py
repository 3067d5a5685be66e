"""Rendered views of queues and topics, cached on disk as append-only files.

A decoded view (``messages.jsonl``, ``bodies.txt``, a ``view/`` part) is the concatenation of
one rendered line per message. Messages never change once stored, so a view only ever grows: it
is rendered once, into a cache file outside the store, with the end offset of every line kept in
an ``array('q')``. That gives exact ``st_size`` at any moment, O(1) reads (``pread`` of the
cache) and byte offsets for any queue offset.

A queue view renders its ConsumeQueue in order; a topic view merges the topic's queues by
CommitLog offset, which is CommitLog order. Both catch up on demand (:meth:`sync`), from a
consistent cut of the queues taken under the store's put lock.
"""

from __future__ import annotations

import bisect
import heapq
import os
import threading
from array import array
from typing import Callable

from engine.consumequeue import BLANK_UNIT_SIZE
from engine.message import MessageRecord
from engine.store import MessageStore

Renderer = Callable[[MessageRecord], bytes]
BATCH = 2048


class RenderedLog:
    """An append-only cache file of rendered lines with their end offsets.

    Attributes:
        ends: ``ends[i]`` is the byte offset just after line ``i``.
        size: bytes rendered so far.
        mtime_ms: store timestamp (epoch ms) of the newest rendered message, 0 if none.
    """

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self.ends = array("q")
        self.size = 0
        self.mtime_ms = 0
        self.lock = threading.Lock()

    def append(self, lines: list[bytes], newest_ms: int) -> None:
        """Append rendered lines (caller holds :attr:`lock`)."""
        if not lines:
            return
        data = b"".join(lines)
        view = memoryview(data)
        pos = self.size
        while view:
            n = os.pwrite(self.fd, view, pos)
            view = view[n:]
            pos += n
        end = self.size
        ends = self.ends
        for line in lines:
            end += len(line)
            ends.append(end)
        self.size = end
        self.mtime_ms = max(self.mtime_ms, newest_ms)

    def line_start(self, i: int) -> int:
        """Byte offset where line ``i`` starts (``size`` when ``i`` is past the end)."""
        if i <= 0:
            return 0
        if i > len(self.ends):
            return self.size
        return self.ends[i - 1]

    def line_at(self, byte_offset: int) -> int:
        """Index of the line holding ``byte_offset``."""
        return bisect.bisect_right(self.ends, byte_offset)

    def read(self, offset: int, length: int, end: int | None = None) -> bytes:
        """Up to ``length`` bytes at ``offset``, not past ``end`` (default: everything)."""
        stop = self.size if end is None else min(end, self.size)
        if offset >= stop:
            return b""
        return os.pread(self.fd, min(length, stop - offset), offset)

    def close(self) -> None:
        """Close and delete the cache file."""
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _render_units(store: MessageStore, units, render: Renderer):
    """Render ``(commitLogOffset, size)`` pairs; returns (lines, newest store ms)."""
    cl = store.commitlog
    lines = []
    newest = 0
    for off, size in units:
        rec = cl.read_message(off, size)
        lines.append(render(rec))
        if rec.store_timestamp > newest:
            newest = rec.store_timestamp
    return lines, newest


class QueueView:
    """One queue rendered in queue-offset order.

    Line ``i`` is the message at queue offset ``first_offset + i``.
    """

    def __init__(self, store: MessageStore, topic: str, queue_id: int, render: Renderer,
                 cache_path: str):
        self.store = store
        self.topic = topic
        self.queue_id = queue_id
        self.render = render
        self.log = RenderedLog(cache_path)
        self.first_offset = None

    def sync(self) -> None:
        """Render the messages stored since the last call."""
        cq = self.store.consume_queue(self.topic, self.queue_id)
        if cq is None:
            return
        with self.log.lock:
            if self.first_offset is None:
                self.first_offset = cq.min_offset
            nxt = self.first_offset + len(self.log.ends)
            end = cq.max_offset
            while nxt < end:
                n = min(BATCH, end - nxt)
                units = [(off, size) for _, off, size, _ in cq.iter_units(nxt, nxt + n)
                         if size != BLANK_UNIT_SIZE]
                lines, newest = _render_units(self.store, units, self.render)
                self.log.append(lines, newest)
                nxt += n

    @property
    def next_offset(self) -> int:
        """Queue offset of the first message not rendered yet."""
        return (self.first_offset or 0) + len(self.log.ends)

    def byte_offset(self, queue_offset: int) -> int:
        """Byte offset where the line of ``queue_offset`` starts (clamped to the view)."""
        return self.log.line_start(queue_offset - (self.first_offset or 0))


class TopicView:
    """All queues of a topic rendered in CommitLog order."""

    def __init__(self, store: MessageStore, topic: str, render: Renderer, cache_path: str):
        self.store = store
        self.topic = topic
        self.render = render
        self.log = RenderedLog(cache_path)
        self.next: dict[int, int] = {}

    def sync(self) -> None:
        """Render the messages stored since the last call, merged by CommitLog offset."""
        cut = self.store.queue_max_offsets(self.topic)
        with self.log.lock:
            streams = []
            for qid, end in cut.items():
                cq = self.store.consume_queue(self.topic, qid)
                if cq is None:
                    continue
                start = self.next.get(qid, cq.min_offset)
                if start < end:
                    streams.append(((off, size) for _, off, size, _ in cq.iter_units(start, end)
                                    if size != BLANK_UNIT_SIZE))
                    self.next[qid] = end
            if not streams:
                return
            batch = []
            for unit in heapq.merge(*streams):
                batch.append(unit)
                if len(batch) >= BATCH:
                    self.log.append(*_render_units(self.store, batch, self.render))
                    batch = []
            if batch:
                self.log.append(*_render_units(self.store, batch, self.render))


class ViewCache:
    """Creates views on first use and owns their cache files under ``cache_dir``."""

    def __init__(self, store: MessageStore, cache_dir: str):
        self.store = store
        self.cache_dir = cache_dir
        os.makedirs(cache_dir, exist_ok=True)
        self._views: dict = {}
        self._lock = threading.Lock()
        self._n = 0

    def _get(self, key, factory):
        v = self._views.get(key)
        if v is None:
            with self._lock:
                v = self._views.get(key)
                if v is None:
                    self._n += 1
                    v = factory(os.path.join(self.cache_dir, f"view-{self._n}"))
                    self._views[key] = v
        return v

    def queue(self, kind: str, topic: str, queue_id: int, render: Renderer) -> QueueView:
        """The synced queue view of ``kind`` (a name for ``render``)."""
        v = self._get((kind, topic, queue_id),
                      lambda p: QueueView(self.store, topic, queue_id, render, p))
        v.sync()
        return v

    def topic(self, kind: str, topic: str, render: Renderer) -> TopicView:
        """The synced topic view of ``kind``."""
        v = self._get((kind, topic), lambda p: TopicView(self.store, topic, render, p))
        v.sync()
        return v

    def close(self) -> None:
        """Delete every cache file."""
        with self._lock:
            for v in self._views.values():
                v.log.close()
            self._views.clear()
