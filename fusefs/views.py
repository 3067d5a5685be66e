"""Rendered views of queues and topics, cached on disk as append-only files.

A decoded view (``messages.jsonl``, ``bodies.txt``, a ``view/`` part) is the concatenation of
one rendered line per message. Messages never change once stored, so a view only ever grows: it
is rendered once, into a cache file outside the store, with the end offset of every line kept in
an ``array('q')``. That gives exact ``st_size`` at any moment, O(1) reads (``pread`` of the
cache) and byte offsets for any queue offset.

A queue view renders its ConsumeQueue in order; a topic view merges the topic's queues by
CommitLog offset, which is CommitLog order. ``messages.jsonl`` and ``bodies.txt`` lines are
built from ``engine.read.columnar`` batches (``render.render_view_chunk``) in chunks of units that
the pool of worker processes of :class:`PartCache` renders in parallel, appended in order;
``view/`` parts are Parquet files rendered by the same pool. Everything rendered shares
one bound (``--cache-size``): least recently used renders are evicted, their sizes kept. Both
catch up on demand (:meth:`sync`, in worker
threads), from a consistent cut of the queues taken under the store's put lock;
:meth:`ViewCache.peek`, :meth:`PartCache.known`, :meth:`RenderedLog.read` and
:meth:`PartCache.open` of a READY part are what the FUSE layer may run on its trio loop
(``fusefs.base.loop_first``): they never wait there.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import errno
import logging
import os
import threading
import time
from array import array
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from rmqfs.engine.errors import StoreError
from rmqfs.engine.format.message import MessageRecord
from rmqfs.engine.store import MessageStore

from . import render as R
from .base import REQUEST_UID, loop_first, on_loop, pread, would_block

if TYPE_CHECKING:  # imported where a pool starts: most mounts never render
    from concurrent.futures import ProcessPoolExecutor

log = logging.getLogger(__name__)

Renderer = Callable[[MessageRecord], bytes]


class RenderedLog:
    """An append-only cache file of rendered lines with their end offsets.

    The view's bytes lie in the file as regions, one per appended block, in view order: a
    region is reserved (:meth:`reserve`) before its block is rendered, so a render worker
    writes its lines straight into the file (``render.render_view_chunk``) and the daemon only
    records where they are (:meth:`append_region`): no copy of the rendered bytes passes
    through the daemon. A block shorter than its reservation leaves a hole in the file (a
    sparse file: holes take no disk blocks); reads map view offsets to file offsets.

    Attributes:
        ends: ``ends[i]`` is the byte offset (in the view) just after line ``i``.
        size: bytes rendered so far (the view's size).
        mtime_ms: store timestamp (epoch ms) of the newest rendered message, 0 if none.
    """

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self.ends = array("q")
        self.size = 0
        self.disk_size = 0  # what its regions take on disk (whole pages): what the bound counts
        self.mtime_ms = 0
        self.lock = threading.Lock()
        self.opens = 0  # open file handles reading it (an evicted log must have none)
        #: the damage its render met right after its last line (a StoreError), or None:
        #: the view ends there, and a read that reaches it fails (EIO)
        self.damage: StoreError | None = None
        self._view_at = array("q")  # view offset where each region starts
        self._file_at = array("q")  # file offset of each region
        self._reserved = 0  # file offset of the next reservation

    def reserve(self, length: int) -> int:
        """Reserve ``length`` bytes of the file (page aligned) for a block about to be
        rendered; returns its file offset (caller holds :attr:`lock`)."""
        at = self._reserved
        self._reserved += length + (-length) % _PAGE
        return at

    def append_region(self, file_at: int, length: int, ends, newest_ms: int) -> None:
        """Record ``length`` bytes of lines written at ``file_at`` (in a region from
        :meth:`reserve`) as the view's next bytes: ``ends[i]`` is the end of line ``i``
        within them (caller holds :attr:`lock`)."""
        if not len(ends):
            return
        self._view_at.append(self.size)
        self._file_at.append(file_at)
        self.ends.extend((ends + self.size).tolist())
        self.size += length
        self.disk_size += on_disk(length)
        self.mtime_ms = max(self.mtime_ms, newest_ms)

    def append_block(self, data: bytes, ends, newest_ms: int) -> None:
        """Append lines already joined: ``ends[i]`` is the end of line ``i`` within ``data``
        (caller holds :attr:`lock`)."""
        if not len(ends):
            return
        pos = at = self.reserve(len(data))
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, pos)
            view = view[n:]
            pos += n
        self.append_region(at, len(data), ends, newest_ms)

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

    def _pieces(self, offset: int, length: int, end: int | None):
        """``(file offset, length)`` of the regions holding view bytes ``[offset, offset +
        length)``, cut at ``end`` and at the view's size."""
        stop = min(self.size if end is None else min(end, self.size), offset + length)
        out = []
        r = bisect.bisect_right(self._view_at, offset) - 1
        while offset < stop and r >= 0:
            region_end = self._view_at[r + 1] if r + 1 < len(self._view_at) else self.size
            n = min(stop, region_end) - offset
            out.append((self._file_at[r] + offset - self._view_at[r], n))
            offset += n
            r += 1
        return out

    @loop_first
    def read(self, offset: int, length: int, end: int | None = None) -> bytes | bytearray:
        """Up to ``length`` bytes at ``offset``, not past ``end`` (default: everything). On
        the trio loop only when they are in the page cache (``fusefs.base.pread``: else
        WouldBlock)."""
        pieces = self._pieces(offset, length, end)
        if len(pieces) == 1:
            return pread(self.fd, pieces[0][1], pieces[0][0])
        return b"".join(pread(self.fd, n, at) for at, n in pieces)

    def close(self) -> None:
        """Close and delete the cache file."""
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


_PAGE = os.sysconf("SC_PAGE_SIZE")


def on_disk(n: int) -> int:
    """Bytes ``n`` bytes of a file take on disk, in whole pages (what ``du`` counts): the
    render cache's bound counts these."""
    return n + (-n) % _PAGE


class RenderBudget:
    """The one bound of the render cache (``--cache-size``), held at every moment.

    Everything rendered counts: the JSON views' bytes, the ``view/`` parts' files and the
    room reserved for renders under way (a chunk's ``render.chunk_room``, a part's CommitLog
    bytes). A render reserves before it starts (:meth:`take`) and gives the room back once its
    bytes are counted where they landed (:meth:`give`). A reservation that does not fit first
    evicts least recently used renders that no one holds open or is rendering (JSON views,
    then parts: ``ViewCache.evict_one``); when it still does not fit, the render is refused
    with EFBIG: a view larger than the cache can hold is never rendered, by a read or a stat.

    Other users (let in by ``-o allow_other``: not the owner, not root) are limited as their
    open files are (``fusefs.base.HandleBudget``): renders made at their request hold at most
    a quarter of the cache in all, and their reservations evict only renders made for other
    users, never the owner's. A render the owner (or root) uses becomes the owner's.

    Thread-safe. ``on_disk`` and ``evict_one`` are set by the cache that owns the renders.
    """

    #: Other users' renders may hold 1/OTHERS_SHARE of the cache, as their open files may hold
    #: a quarter of the daemon's descriptors.
    OTHERS_SHARE = 4

    def __init__(self, max_bytes: int, owner_uid: int | None = None):
        self.max_bytes = max_bytes
        self.others_max = max_bytes // self.OTHERS_SHARE
        self.owner_uid = os.getuid() if owner_uid is None else owner_uid
        self.lock = threading.Lock()
        self.reserved = [0, 0]  # bytes reserved for renders under way: [the owner's, others']
        #: bytes on disk of the renders charged to other users (True) or to the owner (False)
        self.on_disk: Callable[[bool], int] = lambda others: 0
        #: evict one render no one holds, other users' only when asked, never ``keep``;
        #: whether one was
        self.evict_one: Callable[[bool, object], bool] = lambda others_only, keep: False

    def is_other(self, uid: int | None = None) -> bool:
        """Whether ``uid`` (default: the user of the current request, ``REQUEST_UID``) is
        charged as another user."""
        if uid is None:
            uid = REQUEST_UID.get()
        return uid is not None and uid not in (0, self.owner_uid)

    def cap(self, others: bool) -> int:
        """The most one render may ever hold for the owner (False) or other users (True)."""
        return self.others_max if others else self.max_bytes

    def used(self) -> int:
        """Bytes on disk plus reserved: never more than ``max_bytes``."""
        with self.lock:
            return self.on_disk(False) + self.on_disk(True) + sum(self.reserved)

    def take(self, n: int, others: bool, what: str, keep=None) -> None:
        """Reserve ``n`` bytes for a render of ``what`` (charged to other users when
        ``others``), evicting what it must (never ``keep``). Raises OSError(EFBIG) with a
        reason when that cannot make room; nothing is reserved then."""
        while True:
            with self.lock:
                theirs = self.on_disk(True) + self.reserved[1]
                total = self.on_disk(False) + theirs + self.reserved[0]
                others_over = others and theirs + n > self.others_max
                if total + n <= self.max_bytes and not others_over:
                    self.reserved[others] += n
                    return
            if not self.evict_one(others, keep):
                bound = (
                    f"renders for users other than the mount's owner may hold {self.others_max}"
                    if others
                    else f"--cache-size is {self.max_bytes}"
                )
                raise OSError(
                    errno.EFBIG,
                    f"{what} needs {n} more bytes of the render cache than it can give "
                    f"({bound}; {total} in use by renders open or under way): mount with a "
                    "larger --cache-size, or read smaller views (a queue's, view/ parts)",
                )

    def give(self, n: int, others: bool) -> None:
        """A reservation of :meth:`take` is over (its bytes are counted where they landed)."""
        with self.lock:
            self.reserved[others] -= n


#: Fewest bytes a line of each JSON view takes: a view with more lines than the cache can
#: hold at this size is refused (EFBIG) before anything of it is rendered.
MIN_LINE = {"messages": 200, "bodies": 1}


def check_fits(budget: RenderBudget, others: bool, have: int, lines: int, kind: str, what: str):
    """Raise OSError(EFBIG) when a view of ``have`` bytes rendered and ``lines`` more lines
    of ``kind`` could never fit in what ``budget`` lets one render hold."""
    need = have + lines * MIN_LINE[kind]
    cap = budget.cap(others)
    if need > cap:
        raise OSError(
            errno.EFBIG,
            f"{what} takes at least {need} bytes rendered, more than the render cache gives one "
            f"view ({cap}: --cache-size{', a quarter of it for other users' if others else ''}):"
            " mount with a larger --cache-size, or read smaller views (a queue's, view/ parts)",
        )


# Renderers whose lines are built column-wise from engine.read.columnar batches (render.render_lines).
_LINE_KINDS: dict[Renderer, str] = {R.render_message: "messages", R.render_body: "bodies"}
COLUMNAR_BATCH = 8192  # messages decoded and rendered per chunk (one worker task)


def damage_index(units, exc: StoreError) -> int:
    """Index in ``units`` of the unit at the CommitLog offset a render's error names (0 when
    it names none or no unit has it): the units before it rendered fine."""
    import numpy as np

    at = getattr(exc, "offset", None)
    if at is None:
        return 0
    hit = np.flatnonzero(units["off"].astype(np.int64) == at)
    return int(hit[0]) if len(hit) else 0


def note_damage(store: MessageStore, topic: str, queue_ids, units, qoffs, exc: StoreError) -> None:
    """Tell the store (``store.note_damage``: status.json ``damagedQueues``, one warning
    line) which queue a render that failed on damage was reading: the queue and queue offset
    of the unit at the CommitLog offset the error names (the chunk's first unit when it names
    none). ``queue_ids`` is one queue id or one per unit."""
    i = damage_index(units, exc)
    qid = queue_ids if isinstance(queue_ids, int) else int(queue_ids[i])
    store.note_damage(topic, qid, int(qoffs[i]) if len(qoffs) else None, exc)


def _render_chunks(
    parts: PartCache,
    log_: RenderedLog,
    topic: str,
    chunks,
    kind: str,
    store: MessageStore,
    others: bool = False,
) -> None:
    """Render ``chunks`` (an iterator of ``(queue id or queue id array, units, queue
    offsets)``, in line order) in the worker processes of ``parts`` and append the results
    to ``log_`` in order (caller holds its lock).

    Up to two chunks per worker are under way at once, so every core renders while the
    daemon only appends; a chunk's lines are appended as soon as it and every earlier one
    are done (a reader of the growing view sees them). Blank filler units are dropped here.

    A chunk that meets damage (a unit pointing at no record, a body failing its CRC) raises
    its StoreError after :func:`note_damage` and after appending its lines before the damaged
    record: every line before the damage is in the view, nothing at or after it. The views
    keep that error (``RenderedLog.damage``) and stop there: reads that reach it fail (EIO).

    Every chunk reserves its room in the render cache's bound first (``parts.budget``,
    charged to other users when ``others``): OSError(EFBIG) when it cannot, and the lines
    appended so far stay.
    """
    from collections import deque

    ahead: deque[tuple] = deque()
    depth = 2 * parts.workers
    budget = parts.budget
    what = f"the {kind} view of {topic}"

    from concurrent.futures.process import BrokenProcessPool

    def submit(queue_ids, units, qoffs, at, room):
        return parts.submit_task(
            R.render_view_chunk,
            parts.commitlog_dir,
            topic,
            queue_ids,
            units,
            qoffs,
            kind,
            (log_.path, at, room),
        )

    def append(job):
        fut, queue_ids, units, qoffs, at, room = job
        try:
            try:
                length, data, ends, newest = fut.result()
            except BrokenProcessPool:  # its worker died (kill -9, OOM): once more, new pool
                length, data, ends, newest = submit(queue_ids, units, qoffs, at, room).result()
        except StoreError as exc:
            budget.give(room, others)
            note_damage(store, topic, queue_ids, units, qoffs, exc)
            i = damage_index(units, exc)
            if i:  # the lines before the damaged record, rendered again on their own
                ids = queue_ids if isinstance(queue_ids, int) else queue_ids[:i]
                room_i = on_disk(R.chunk_room(kind, units[:i]))
                budget.take(room_i, others, what)
                try:
                    at_i = log_.reserve(room_i)
                    put(at_i, room_i, *submit(ids, units[:i], qoffs[:i], at_i, room_i).result())
                finally:
                    budget.give(room_i, others)
            raise
        except BaseException:
            budget.give(room, others)
            raise
        try:
            put(at, room, length, data, ends, newest)
        finally:
            budget.give(room, others)

    def put(at, room, length, data, ends, newest):
        if data is None:  # written by the worker into its region
            log_.append_region(at, length, ends, newest)
        else:  # longer than the region: appended here, once the bound has room for it
            extra = on_disk(len(data)) - room
            budget.take(extra, others, what)
            try:
                log_.append_block(data, ends, newest)
            finally:
                budget.give(extra, others)

    from rmqfs.engine.read.columnar import drop_blank_units

    try:
        todo: deque = deque()  # chunks split to fit the bound, before the next of `chunks`
        chunks = iter(chunks)
        while True:
            if todo:
                queue_ids, units, qoffs = todo.popleft()
            else:
                nxt = next(chunks, None)
                if nxt is None:
                    break
                units, qoffs, queue_ids = drop_blank_units(nxt[1], nxt[2], nxt[0])
                if not len(units):
                    continue
            room = on_disk(R.chunk_room(kind, units))
            while True:  # room in the bound: what is under way may have to land first
                try:
                    budget.take(room, others, what)
                    break
                except OSError:
                    if ahead:
                        append(ahead.popleft())
                    elif len(units) > 1:  # a smaller chunk may fit (its room is a guess)
                        half = len(units) // 2
                        for sl in (slice(half, None), slice(None, half)):
                            ids = queue_ids if isinstance(queue_ids, int) else queue_ids[sl]
                            todo.appendleft((ids, units[sl], qoffs[sl]))
                        room = 0
                        break
                    else:
                        raise
            if not room:
                continue
            at = log_.reserve(room)
            ahead.append(
                (submit(queue_ids, units, qoffs, at, room), queue_ids, units, qoffs, at, room)
            )
            while len(ahead) >= depth:
                append(ahead.popleft())
        while ahead:
            append(ahead.popleft())
    finally:
        for job in ahead:  # an error: the chunks after it are not wanted
            if not job[0].cancel():  # under way: its worker writes its region, in the bound
                try:
                    job[0].exception()
                except Exception:  # noqa: BLE001 - the first error is the one raised
                    pass
            budget.give(job[5], others)


class QueueView:
    """One queue rendered in queue-offset order.

    Line ``i`` is the message at queue offset ``first_offset + i``.
    """

    for_others = False  # charged to other users than the owner (ViewCache, RenderBudget)

    def __init__(
        self,
        store: MessageStore,
        topic: str,
        queue_id: int,
        render: Renderer,
        cache_path: str,
        parts: PartCache,
    ):
        self.store = store
        self.parts = parts  # its worker processes render the chunks
        self.topic = topic
        self.queue_id = queue_id
        self.render = render
        self.log = RenderedLog(cache_path)
        self.first_offset: int | None = None  # the queue offset of the first line

    def sync(self) -> None:
        """Render the messages stored since the last call."""
        cq = self.store.consume_queue(self.topic, self.queue_id)
        if cq is None:
            return
        with self.log.lock:
            if self.log.damage is not None:
                return  # the view ends at the damage (docs/guarantees.md)
            if self.first_offset is None:
                self.first_offset = cq.min_offset
            nxt = self.first_offset + len(self.log.ends)
            end = cq.max_offset
            kind = _LINE_KINDS[self.render]
            others = self.parts.budget.is_other()
            what = f"{self.topic}/{self.queue_id}'s {kind} view"
            check_fits(self.parts.budget, others, self.log.size, end - nxt, kind, what)
            try:  # damage: _render_chunks has status.json name the queue, and raises
                _render_chunks(
                    self.parts,
                    self.log,
                    self.topic,
                    self._chunks(cq, nxt, end),
                    kind,
                    self.store,
                    others,
                )
            except StoreError as exc:
                self.log.damage = exc

    def _chunks(self, cq, nxt: int, end: int):
        from rmqfs.engine.read.columnar import queue_units

        while nxt < end:
            units, qoffs = queue_units(cq, nxt, min(end, nxt + COLUMNAR_BATCH))
            if not len(units):
                return
            yield self.queue_id, units, qoffs
            nxt += len(units)

    def up_to_date(self) -> bool:
        """True when every stored message is rendered, or the view ends at damage (no lock
        taken: safe on the trio loop)."""
        if self.log.damage is not None:
            return True
        cq = self.store.consume_queue(self.topic, self.queue_id)
        return cq is None or (self.first_offset is not None and cq.max_offset == self.next_offset)

    @property
    def next_offset(self) -> int:
        """Queue offset of the first message not rendered yet."""
        return (self.first_offset or 0) + len(self.log.ends)

    def byte_offset(self, queue_offset: int) -> int:
        """Byte offset where the line of ``queue_offset`` starts (clamped to the view)."""
        return self.log.line_start(queue_offset - (self.first_offset or 0))


class TopicView:
    """All queues of a topic rendered in CommitLog order."""

    for_others = False  # charged to other users than the owner (ViewCache, RenderBudget)

    def __init__(
        self, store: MessageStore, topic: str, render: Renderer, cache_path: str, parts: PartCache
    ):
        self.store = store
        self.parts = parts  # its worker processes render the chunks
        self.topic = topic
        self.render = render
        self.log = RenderedLog(cache_path)
        self.next: dict[int, int] = {}

    def up_to_date(self) -> bool:
        """True when every stored message is rendered, or the view ends at damage (no lock
        taken: safe on the trio loop)."""
        if self.log.damage is not None:
            return True
        store = self.store
        for (t, q), cq in list(store.consume_queues.items()):
            if t == self.topic and cq.max_offset != self.next.get(q, cq.min_offset):
                return False
        return True

    def _sync_columnar(self, cut: dict, kind: str) -> None:
        others = self.parts.budget.is_other()
        lines = 0
        for qid, end in cut.items():
            cq = self.store.consume_queue(self.topic, qid)
            if cq is not None:
                lines += max(0, end - self.next.get(qid, cq.min_offset))
        what = f"{self.topic}'s {kind} view"
        check_fits(self.parts.budget, others, self.log.size, lines, kind, what)
        _render_chunks(
            self.parts, self.log, self.topic, _topic_chunks(self, cut), kind, self.store, others
        )

    def sync(self) -> None:
        """Render the messages stored since the last call, merged by CommitLog offset."""
        cut = self.store.queue_max_offsets(self.topic)
        with self.log.lock:
            if self.log.damage is not None:
                return  # the view ends at the damage (docs/guarantees.md)
            done = {}
            for qid, end in cut.items():
                cq = self.store.consume_queue(self.topic, qid)
                if cq is not None and self.next.get(qid, cq.min_offset) < end:
                    done[qid] = end
            if not done:
                return
            try:
                self._sync_columnar(cut, _LINE_KINDS[self.render])
            except StoreError as exc:
                self.log.damage = exc
                return
            # only now: up_to_date() must not say yes while lines are still being rendered
            self.next.update(done)


def _topic_chunks(self, cut: dict):
    """What each queue gained up to ``cut`` merged by CommitLog offset, as chunks of at most
    COLUMNAR_BATCH ``(queue id array, units, queue offsets)``, a bounded number of units at a
    time: from every queue with units left a chunk is loaded, and every unit at or below the
    smallest of the chunks' last offsets is emitted (no queue can still have a smaller one:
    each queue's offsets grow)."""
    import numpy as np

    from rmqfs.engine.read.columnar import queue_units

    bufs: dict[int, tuple] = {}  # queueId -> (units, queue offsets) not emitted yet
    pos: dict[int, int] = {}
    for qid in cut:
        cq = self.store.consume_queue(self.topic, qid)
        if cq is not None:
            pos[qid] = self.next.get(qid, cq.min_offset)
    while True:
        for qid, end in cut.items():
            if qid not in pos:
                continue
            b = bufs.get(qid)
            if (b is None or not len(b[0])) and pos[qid] < end:
                cq = self.store.consume_queue(self.topic, qid)
                units, qoffs = queue_units(cq, pos[qid], min(end, pos[qid] + COLUMNAR_BATCH))
                pos[qid] += len(units)
                if len(units):
                    bufs[qid] = (units, qoffs)
                else:
                    pos[qid] = end
        live = {q: b for q, b in bufs.items() if len(b[0])}
        if not live:
            return
        bound = min(int(b[0]["off"][-1]) for b in live.values())
        parts, qids = [], []
        for q, (units, qoffs) in live.items():
            k = int(np.searchsorted(units["off"].astype(np.int64), bound, side="right"))
            parts.append((units[:k], qoffs[:k]))
            qids.append(np.full(k, q, dtype=np.int64))
            bufs[q] = (units[k:], qoffs[k:])
        units = np.concatenate([p[0] for p in parts])
        qoffs = np.concatenate([p[1] for p in parts])
        qid_arr = np.concatenate(qids)
        order = np.argsort(units["off"].astype(np.int64), kind="stable")
        units, qoffs, qid_arr = units[order], qoffs[order], qid_arr[order]
        for a in range(0, len(units), COLUMNAR_BATCH):
            sl = slice(a, a + COLUMNAR_BATCH)
            yield qid_arr[sl], units[sl], qoffs[sl]


class ViewCache:
    """Creates views on first use and owns their cache files under ``cache_dir``."""

    def __init__(
        self,
        store: MessageStore,
        cache_dir: str,
        cache_size: int | None = None,
        workers: int | None = None,
    ):
        self.store = store
        self.cache_dir = cache_dir
        os.makedirs(cache_dir, exist_ok=True)
        self.cache_size = default_cache_size(cache_dir) if cache_size is None else cache_size
        #: the one bound of everything rendered (views here, parts in PartCache)
        self.budget = RenderBudget(self.cache_size)
        self.parts = PartCache(store, cache_dir, self.cache_size, workers, self.budget)
        self._views: dict = {}  # key -> view, least recently used first
        self._evicted: dict = {}  # key -> (size, mtime ms, store cut) of evicted views
        self._lock = threading.Lock()
        self._n = 0
        self.budget.on_disk = self.bytes_on_disk
        self.budget.evict_one = self.evict_one

    def json_bytes(self, others: bool | None = None) -> int:
        """Bytes of the rendered JSON views on disk, in whole pages (charged to other users,
        to the owner, or all for None)."""
        return sum(
            v.log.disk_size
            for v in list(self._views.values())
            if others is None or v.for_others == others
        )

    def bytes_on_disk(self, others: bool) -> int:
        """Bytes of the renders (JSON views and parts) charged to other users or to the owner."""
        return self.json_bytes(others) + self.parts.bytes_of(others)

    def evict_one(self, others_only: bool, keep=None) -> bool:
        """Evict the least recently used JSON view that no one holds open or is rendering
        (only one charged to other users when ``others_only``; never ``keep``), else such a
        part (``PartCache.evict_one``); its size and mtime are kept, so a stat of it renders
        nothing. False when there is none."""
        with self._lock:
            for key, v in list(self._views.items()):
                if key == keep or v.log.opens or (others_only and not v.for_others):
                    continue
                if not v.log.lock.acquire(blocking=False):
                    continue  # being rendered
                try:
                    if v.log.opens:
                        continue
                    if v.log.damage is None:  # a damaged view is rendered (and noted) again
                        self._evicted[key] = (v.log.size, v.log.mtime_ms, self._view_cut(key, v))
                    v.log.close()
                    del self._views[key]
                    return True
                finally:
                    v.log.lock.release()
        return self.parts.evict_one(others_only, keep)

    def _get(self, key, factory):
        others = self.budget.is_other()
        with self._lock:
            v = self._views.pop(key, None)
            if v is None:
                self._n += 1
                v = factory(os.path.join(self.cache_dir, f"view-{self._n}"))
                v.for_others = others
                self._evicted.pop(key, None)
            elif not others:
                v.for_others = False  # the owner uses it: the owner's from now on
            self._views[key] = v  # most recently used
            v.used = time.monotonic()
        return v

    def _cut(self, key) -> tuple:
        """Where the store stands for a view: the max offset of each of its queues."""
        s = self.store
        if len(key) == 3:
            return (s.max_offset(key[1], key[2]),)
        return tuple(sorted(s.queue_max_offsets(key[1]).items()))

    def _view_cut(self, key, v) -> tuple:
        if len(key) == 3:
            return (v.next_offset,)
        return tuple(sorted(v.next.items()))

    def peek(self, *key):
        """The view of ``key`` (``(kind, topic)`` or ``(kind, topic, queueId)``) when it exists
        and is up to date, else None; for a view evicted from the cache while up to date, an
        object whose ``log`` has its ``size`` and ``mtime_ms`` (a stat needs no re-render).
        Never blocks: the FUSE layer calls it on the trio loop."""
        v = self._views.get(key)
        if v is not None and v.up_to_date():
            return v
        old = self._evicted.get(key)
        if v is None and old is not None:
            size, mtime_ms, cut = old
            try:
                if self._cut(key) == cut:
                    from types import SimpleNamespace

                    return SimpleNamespace(log=SimpleNamespace(size=size, mtime_ms=mtime_ms))
            except Exception:  # noqa: BLE001 - a stat falls back to the slow path
                return None
        return None

    def queue(self, kind: str, topic: str, queue_id: int, render: Renderer) -> QueueView:
        """The synced queue view of ``kind`` (a name for ``render``)."""
        key = (kind, topic, queue_id)
        v = self._get(key, lambda p: QueueView(self.store, topic, queue_id, render, p, self.parts))
        v.sync()
        return v

    def topic(self, kind: str, topic: str, render: Renderer) -> TopicView:
        """The synced topic view of ``kind``."""
        key = (kind, topic)
        v = self._get(key, lambda p: TopicView(self.store, topic, render, p, self.parts))
        v.sync()
        return v

    def drop_topic(self, topic: str) -> None:
        """Forget every rendered view and part of ``topic`` (deleted: ``rmdir topics/T``,
        or a topic created again later, which must not show the old renders). A view open
        for reading keeps its file until its last handle is released."""
        with self._lock:
            gone = [self._views.pop(k) for k in [k for k in self._views if k[1] == topic]]
            for key in [k for k in self._evicted if k[1] == topic]:
                del self._evicted[key]
        for v in gone:  # not under self._lock: a render holding v's lock may evict meanwhile
            with v.log.lock:
                v.log.dropped = True
                if not v.log.opens:
                    v.log.close()
        self.parts.drop_topic(topic)

    def close(self) -> None:
        """Delete every cache file (and stop the part renderers)."""
        self.parts.close()
        with self._lock:
            for v in self._views.values():
                v.log.close()
            self._views.clear()


# ---------------------------------------------------------------------------------------------
# view/ Parquet parts: rendered by a pool of worker processes, cached on disk, LRU-bounded


def default_cache_size(cache_dir: str) -> int:
    """``--cache-size`` default: the smaller of 10% of the cache directory's disk and 8 GiB."""
    try:
        st = os.statvfs(cache_dir)
        disk = st.f_blocks * st.f_frsize
    except OSError:
        disk = 0
    return min(disk // 10, 8 << 30) if disk else 8 << 30


#: Seconds without a render task after which the worker processes are stopped.
POOL_IDLE_S = 10.0
#: What every render worker imports, once, in the forkserver the workers fork from.
WORKER_PRELOAD = (
    "rmqfs.fusefs.render",
    "rmqfs.engine.read.columnar",
    "rmqfs.engine.read.jsonline",
    "rmqfs.engine.read.kernel",
    "pyarrow.parquet",
    "pyarrow.compute",
)


def worker_context():
    """The multiprocessing context render workers start in: ``forkserver``, whose server
    imports :data:`WORKER_PRELOAD` once, so a worker starts in milliseconds instead of the
    0.3-0.5 s of CPU a spawned interpreter spends importing numpy and pyarrow (a first read
    of a view paid it twice on two cores). The FUSE daemon itself is never forked (threads,
    the /dev/fuse descriptor): the server is a fresh interpreter, started by
    :func:`start_worker_server` or the first pool."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(WORKER_PRELOAD))
    return ctx


def start_worker_server() -> None:
    """Start the render workers' forkserver now (the daemon calls it in the background once
    the mount is up), so that the first render does not wait for its imports."""
    from multiprocessing import forkserver

    worker_context()
    forkserver.ensure_running()


class PartState(enum.Enum):
    """Where one ``view/`` part is in its life (:class:`Part`, :data:`PART_TRANSITIONS`)."""

    #: a worker process renders it; readers wait (:meth:`PartCache.open`)
    RENDERING = "rendering"
    #: its file is on disk, counted in the bound: opens answer at once, even on the trio loop
    READY = "ready"
    #: its file was deleted (least recently used, superseded by a longer render of the part,
    #: its topic deleted, the mount closing); its size and mtime stay known; the next open
    #: renders it again, to the same bytes. An fd opened before keeps reading the old file.
    EVICTED = "evicted"
    #: its last render failed (damage, a worker that died, the mount closing): the readers
    #: that waited get the error (:attr:`Part.error`); the next open renders it again
    FAILED = "failed"


#: The one table of a part's legal transitions. A part is born RENDERING (:meth:`PartCache.open`,
#: :meth:`PartCache.prefetch`); :meth:`Part.to` refuses every transition not listed here.
PART_TRANSITIONS: dict[PartState, frozenset[PartState]] = {
    PartState.RENDERING: frozenset({PartState.READY, PartState.FAILED}),
    PartState.READY: frozenset({PartState.EVICTED}),
    PartState.EVICTED: frozenset({PartState.RENDERING}),
    PartState.FAILED: frozenset({PartState.RENDERING}),
}


class PartStateError(RuntimeError):
    """A transition :data:`PART_TRANSITIONS` does not allow: a bug in :class:`PartCache`."""


class Part:
    """One ``view/`` part's life, owned by :class:`PartCache` (every field changes under its
    lock only): its :class:`PartState`, what its last render gave (``meta``: size in bytes,
    mtime in ms, rows; kept once evicted), its file's bytes on disk, how many readers wait for
    it (a part someone waits for is never evicted for room nor superseded), and the error of a
    failed render."""

    __slots__ = ("key", "state", "meta", "disk", "readers", "others", "error")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.state = PartState.RENDERING
        self.meta: tuple[int, int, int] | None = None
        self.disk = 0  # bytes its file takes on disk while READY
        self.readers = 0
        self.others = False  # its file is charged to other users (RenderBudget)
        self.error: BaseException | None = None

    def to(self, state: PartState) -> None:
        """Move to ``state``; PartStateError when :data:`PART_TRANSITIONS` forbids it."""
        if state not in PART_TRANSITIONS[self.state]:
            raise PartStateError(f"view/ part {self.key}: {self.state.name} -> {state.name}")
        self.state = state


class PartCache:
    """Rendered ``view/`` parts: ``(topic, queueId, first, end)`` -> a Parquet file.

    ``end`` is one past the part's last queue offset, so a growing last part is a new key
    (the old file is dropped) and a full part's key never changes. Parts render in a pool of
    ``workers`` processes (default: one per core), so a render never holds the daemon's GIL
    and a listing renders every part in parallel (:meth:`prefetch`). Files are evicted least
    recently used first once they add up to more than ``max_bytes``; the size and mtime of
    every part rendered are kept (:meth:`known`), so a stat does not re-render, and an evicted
    part is rendered again (the same bytes) when it is read.

    Each part is a :class:`Part`, a small state machine (RENDERING -> READY | FAILED,
    READY -> EVICTED, EVICTED | FAILED -> RENDERING: :data:`PART_TRANSITIONS`); this class
    alone moves it, under :attr:`lock`, and wakes the readers waiting on :attr:`changed` at
    each move. Thread-safe; :meth:`open` and :meth:`info` may wait for a render in a worker
    thread; :meth:`known`, and :meth:`open` of a READY part on the trio loop, never wait.
    """

    #: renders one :meth:`open` starts at most: a part's render fails with BrokenProcessPool
    #: when a worker dies (``kill -9``, the OOM killer) and the next one runs in a fresh pool;
    #: a part dropped while read (its topic deleted) is rendered again
    OPEN_RENDERS = 4

    def __init__(
        self,
        store: MessageStore,
        cache_dir: str,
        max_bytes: int,
        workers: int | None = None,
        budget: RenderBudget | None = None,
    ):
        self.store = store
        self.dir = os.path.join(cache_dir, "parts")
        os.makedirs(self.dir, exist_ok=True)
        self.max_bytes = max_bytes
        #: the bound parts share with the JSON views (ViewCache's); its own when alone
        self.budget = budget or RenderBudget(max_bytes)
        if budget is None:
            self.budget.on_disk = self.bytes_of
            self.budget.evict_one = self.evict_one
        self.workers = workers or os.cpu_count() or 1
        #: the CommitLog files' directory (a DLedger store's dledger-<selfId>/data)
        self.commitlog_dir = store.commitlog.files.directory
        self.lock = threading.Lock()
        #: notified (under :attr:`lock`) whenever a part leaves RENDERING
        self.changed = threading.Condition(self.lock)
        self.parts: dict[tuple, Part] = {}  # key -> its Part, every state
        self.ready: dict[tuple, Part] = {}  # the READY parts, least recently used first
        self.latest: dict = {}  # (topic, queueId, first) -> newest end rendered
        self.total = 0
        self.others_total = 0  # bytes of the READY parts charged to other users
        self._pool: ProcessPoolExecutor | None = None
        self._tasks = 0  # submitted and not over
        self._last_task = 0.0  # monotonic time of the last submit or end of a task
        self._idle_watch: threading.Thread | None = None
        self._closed = False

    @property
    def used_bytes(self) -> int:
        """Bytes of rendered parts on disk."""
        return self.total

    def bytes_of(self, others: bool) -> int:
        """Bytes of the parts on disk charged to other users (True) or to the owner."""
        return self.others_total if others else self.total - self.others_total

    def state(self, key) -> PartState | None:
        """The :class:`PartState` of ``key``, or None for a part never rendered here."""
        p = self.parts.get(key)
        return None if p is None else p.state

    def evict_one(self, others_only: bool, keep=None) -> bool:
        """Delete the least recently used READY part no reader waits for (only one charged
        to other users when ``others_only``; never ``keep``); its size and mtime stay known.
        False when there is none."""
        with self.lock:
            for key, p in self.ready.items():  # least recently used first
                if key == keep or p.readers or (others_only and not p.others):
                    continue
                self._evict(p)
                return True
        return False

    def _evict(self, p: Part) -> None:
        """READY -> EVICTED (caller holds :attr:`lock`): its file deleted, its bytes given
        back; an fd already open on it keeps reading it."""
        p.to(PartState.EVICTED)
        del self.ready[p.key]
        self.total -= p.disk
        if p.others:
            self.others_total -= p.disk
        p.disk, p.others = 0, False
        try:
            os.unlink(self._path(p.key))
        except FileNotFoundError:
            pass

    def _path(self, key) -> str:
        import hashlib

        h = hashlib.sha1(repr(key).encode()).hexdigest()
        return os.path.join(self.dir, f"part-{h}.parquet")

    def _pool_(self):
        """The worker pool (caller holds :attr:`lock`), started when none runs: workers fork
        from the forkserver (:func:`worker_context`) in milliseconds, so a pool shut down
        while idle (:meth:`_shut_when_idle`) costs the next render nothing noticeable."""
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(self.workers, mp_context=worker_context())
            if self._idle_watch is None:
                self._idle_watch = threading.Thread(
                    target=self._shut_when_idle, name="rmqfs-pool-idle", daemon=True
                )
                self._idle_watch.start()
        return self._pool

    def _started(self, fut):
        """Count a submitted task (caller holds :attr:`lock`) until it is over."""
        self._tasks += 1
        self._last_task = time.monotonic()
        return fut

    def _submit(self, fn, *args):
        """``fn(*args)`` submitted to the pool (caller holds :attr:`lock`), counted. A pool
        broken by a worker's death (``kill -9``, the OOM killer: BrokenProcessPool) is
        replaced at once by a fresh one, which renders this task: renders come back with the
        next request, not after the idle pool's shutdown."""
        from concurrent.futures.process import BrokenProcessPool

        pool = self._pool_()
        try:
            fut = pool.submit(fn, *args)
        except BrokenProcessPool:
            log.warning("render workers died; starting new ones")
            self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            fut = self._pool_().submit(fn, *args)
        return self._started(fut)

    def _task_over(self, _fut) -> None:
        with self.lock:
            self._tasks -= 1
            self._last_task = time.monotonic()

    def _shut_when_idle(self) -> None:
        """Stop the worker processes once no task has run for :data:`POOL_IDLE_S`: an idle
        mount keeps no render worker (they trim their memory after a second idle already,
        ``render.WORKER_IDLE_TRIM_S``; this gives back the rest)."""
        while not self._closed:
            time.sleep(min(POOL_IDLE_S, 5.0))
            with self.lock:
                idle = time.monotonic() - self._last_task >= POOL_IDLE_S
                if self._pool is None or self._tasks or not idle:
                    continue
                pool, self._pool = self._pool, None
            pool.shutdown(wait=True)

    def _units(self, topic: str, queue_id: int, first: int, end: int):
        """``(units, queue offsets)`` of the part ``[first, end)`` (``queue_units``); OSError
        EIO when the queue lacks some."""
        from rmqfs.engine.read.columnar import queue_units

        units, qoffs = queue_units(self.store.consume_queue(topic, queue_id), first, end)
        if first + len(units) < end:
            raise OSError(errno.EIO, "view/ part: ConsumeQueue units missing")
        return units, qoffs

    def submit_task(self, fn, *args):
        """Run ``fn(*args)`` in a worker process (a JSON view chunk): its Future."""
        with self.lock:
            if self._closed:
                raise OSError(errno.EIO, "the mount is closing")
            fut = self._submit(fn, *args)
        fut.add_done_callback(self._task_over)
        return fut

    def known(self, key):
        """``(size, mtime ms, rows)`` of a part rendered before (evicted or not), or None.
        Never waits (the trio loop calls it)."""
        p = self.parts.get(key)
        return None if p is None else p.meta

    def _start(self, key, reader: bool) -> Part:
        """The part ``key``, rendering it unless it is READY or RENDERING already (a new
        part, or EVICTED/FAILED -> RENDERING); with ``reader`` one more reader waits for it,
        counted in the same hold of :attr:`lock` that saw its state, so no eviction comes
        between. OSError(EIO) when the queue lacks the part's units or the mount is closing.

        Room for the file is reserved before the render starts: its CommitLog bytes bound it
        (a compressed Parquet part is smaller), so the cache stays within its bound. It is
        reserved outside the lock (making room may evict parts, and JSON views, whose cache
        takes other locks) and given back when the render is over (:meth:`_finish`)."""
        with self.lock:
            if self._closed:
                raise OSError(errno.EIO, "the mount is closing")
            p = self.parts.get(key)
            if p is not None and p.state in (PartState.READY, PartState.RENDERING):
                p.readers += reader
                return p
        topic, queue_id, first, end = key
        units, qoffs = self._units(topic, queue_id, first, end)
        from rmqfs.engine.read.columnar import drop_blank_units

        real = drop_blank_units(units, qoffs)[0]
        est = on_disk(int(real["size"].astype("int64").sum()) + 65536)
        others = self.budget.is_other()
        self.budget.take(est, others, f"view/ part {key}", keep=key)
        try:
            with self.lock:
                if self._closed:
                    raise OSError(errno.EIO, "the mount is closing")
                p = self.parts.get(key)
                if p is not None and p.state in (PartState.READY, PartState.RENDERING):
                    self.budget.give(est, others)  # another thread started it meanwhile
                    est = 0
                    p.readers += reader
                    return p
                render = self._submit(
                    R.render_part,
                    self.commitlog_dir,
                    topic,
                    queue_id,
                    units,
                    first,
                    self._path(key),
                )
                if p is None:
                    p = self.parts[key] = Part(key)  # born RENDERING
                else:
                    p.to(PartState.RENDERING)
                    p.error = None
                p.readers += reader
        except BaseException:
            if est:
                self.budget.give(est, others)
            raise
        # Outside the lock: a render that is already over runs the callbacks right here, and
        # they take the lock (under it, a fast render deadlocked the listing thread).
        render.add_done_callback(self._task_over)
        render.add_done_callback(lambda f, q=p, n=est, o=others: self._finish(q, f, n, o))
        return p

    def _finish(self, p: Part, fut: Future, est: int, others: bool) -> None:
        """The render ``fut`` of ``p`` is over: RENDERING -> READY (its file counted, a
        shorter render of the same part superseded), or -> FAILED with the render's error
        (or EIO when the mount closed or the part's topic was deleted meanwhile); then the
        reservation of ``est`` bytes is given back. Wakes every reader waiting on
        :attr:`changed`. Runs in the pool's thread (or the submitter's)."""
        try:
            with self.lock:
                try:
                    self._record(p, fut, others)
                except BaseException as exc:  # the readers must wake, whatever happened
                    if p.state is PartState.RENDERING:
                        p.error = exc
                        p.to(PartState.FAILED)
                    raise
                finally:
                    self.changed.notify_all()
        finally:
            self.budget.give(est, others)

    def _record(self, p: Part, fut: Future, others: bool) -> None:
        """:meth:`_finish`'s transition (caller holds :attr:`lock`)."""
        key = p.key
        if fut.cancelled():
            p.error = OSError(errno.EIO, "the mount is closing")
        elif fut.exception() is not None:
            p.error = fut.exception()
        elif self._closed or self.parts.get(key) is not p:  # closing, or its topic deleted
            p.error = OSError(errno.EIO, f"view/ part {key}: dropped while rendered")
            if self.parts.get(key) in (None, p):  # else a new Part renders the same file
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(key))
        if p.error is not None:
            p.to(PartState.FAILED)
            return
        size, mtime_ms, rows = fut.result()
        p.meta = (size, mtime_ms, rows)
        p.disk = on_disk(size)  # what it takes on disk
        p.others = others
        p.to(PartState.READY)
        self.ready[key] = p  # most recently used
        self.total += p.disk
        if others:
            self.others_total += p.disk
        short = key[:3]
        old = self.latest.get(short)
        if old is None or key[3] > old:
            self.latest[short] = key[3]
            if old is not None:  # the part grew: its shorter render is stale
                stale = self.ready.get(short + (old,))
                if stale is not None and not stale.readers:  # else LRU evicts it later
                    self._evict(stale)

    def prefetch(self, keys) -> None:
        """Queue renders of parts not rendered yet (a directory listing: the stats follow)."""
        for key in keys:
            p = self.parts.get(key)
            if p is None or (p.state is PartState.FAILED and p.meta is None):
                try:
                    self._start(key, reader=False)
                except Exception:  # noqa: BLE001 - the stat that follows reports it
                    return

    def drop_topic(self, topic: str) -> None:
        """Forget every part of ``topic``: files (READY -> EVICTED), sizes kept after
        eviction, newest ends. An fd already open on a part keeps reading it (the file is only
        unlinked); a render under way is discarded when it ends (:meth:`_record`)."""
        with self.lock:
            for key in [k for k in self.parts if k[0] == topic]:
                p = self.parts.pop(key)
                if p.state is PartState.READY:
                    self._evict(p)
            for key in [k for k in self.latest if k[0] == topic]:
                del self.latest[key]

    def _used(self, p: Part) -> None:
        """``p`` was just opened (caller holds :attr:`lock`): most recently used, and the
        owner's from now on when the owner (or root) uses it."""
        self.ready[p.key] = self.ready.pop(p.key)
        if p.others and not self.budget.is_other():
            p.others = False
            self.others_total -= p.disk

    @loop_first
    def open(self, key) -> int:
        """An fd of the rendered part (rendering it first when needed: the caller waits
        while the part is RENDERING); the file stays readable through the fd after an
        eviction. Raises OSError(EIO) when the render fails on damage (noted in the store:
        status.json, one warning line), when the mount is closing, or after
        :attr:`OPEN_RENDERS` renders that ended in a dead worker or a dropped part."""
        if on_loop():  # the trio loop (fusefs.base.loop_first): READY parts only
            fd = self._open_ready(key)
            if fd is not None:
                return fd
            would_block()
        from concurrent.futures.process import BrokenProcessPool

        for _ in range(self.OPEN_RENDERS):
            p = self._start(key, reader=True)
            with self.lock:
                try:
                    while p.state is PartState.RENDERING:
                        self.changed.wait()
                    if p.state is PartState.READY:
                        self._used(p)
                        return os.open(self._path(key), os.O_RDONLY)
                    error = p.error  # FAILED, or EVICTED: dropped (topic deleted, closing)
                finally:
                    p.readers -= 1
            if isinstance(error, BrokenProcessPool) or error is None:
                continue  # its worker died (the next render runs in a fresh pool), or dropped
            if isinstance(error, StoreError):  # status.json names the queue (one log line)
                self._note_damage(key, error)
                raise OSError(errno.EIO, f"view/ part {key}: {error}") from None
            raise error
        raise OSError(errno.EIO, f"view/ part {key}: not rendered")

    def _note_damage(self, key, exc: StoreError) -> None:
        """Note the damage a render of ``key`` met in the store (``note_damage``)."""
        topic, queue_id, first, end = key
        from rmqfs.engine.read.columnar import queue_units

        units, qoffs = queue_units(self.store.consume_queue(topic, queue_id), first, end)
        if first + len(units) < end:  # as _units: none when some are missing
            units, qoffs = units[:0], qoffs[:0]
        note_damage(self.store, topic, queue_id, units, qoffs, exc)

    def _open_ready(self, key) -> int | None:
        """An fd of the part when it is READY, else None. Never waits for the lock (the trio
        loop calls it, :meth:`open`)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            p = self.parts.get(key)
            if p is None or p.state is not PartState.READY:
                return None
            self._used(p)
            return os.open(self._path(key), os.O_RDONLY)
        finally:
            self.lock.release()

    def info(self, key) -> tuple[int, int, int]:
        """``(size, mtime ms, rows)`` of a part, rendering it when it was never rendered."""
        m = self.known(key)
        if m is None:
            os.close(self.open(key))
            m = self.known(key)
            assert m is not None  # READY once: its meta stays
        return m

    def close(self) -> None:
        """Stop the workers (renders under way are abandoned: FAILED) and delete the files
        (every READY part -> EVICTED)."""
        with self.lock:
            self._closed = True
            pool, self._pool = self._pool, None
            for p in list(self.ready.values()):
                self._evict(p)
        if pool is not None:
            procs = list(getattr(pool, "_processes", {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                if p.is_alive():
                    p.terminate()
