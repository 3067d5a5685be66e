"""Decoded views of queues and topics, served by range from a bounded render cache.

A decoded view (``messages.jsonl``, ``bodies.txt``) is the concatenation of one rendered line
per message; a ``view/`` part is a Parquet file of a range of one queue. Messages never change
once stored, so a view's bytes are a pure function of the store and a view only grows.

A view is never rendered whole. It is cut into chunks of units (:func:`plan_chunks`: at most
8,192 messages or a few MB of lines each, as their records' sizes promise, and cut again where
compressed bodies inflate past that: :data:`CHUNK_BYTES`), and a sizing pass renders each
chunk once in the render workers and keeps only its length and line count: the view's
seek-point index
(:class:`ChunkIndex`, ratarmount's idea), so ``stat`` answers the exact size at once. A read
renders only the chunks its range touches (and the next few, read-ahead) into files of the
render cache (:class:`ChunkCache`), and ``pread``s them; an evicted chunk is rendered again,
the same bytes, when it is read. A queue view is its ConsumeQueue in order; a topic view
merges the topic's queues by CommitLog offset, which is CommitLog order.

Everything rendered (chunks, parts, renders under way) shares one bound (``--cache-size``,
:class:`RenderBudget`), least recently used first; a chunk the bound has no room for is
rendered into memory for the read that needs it, so no view is too large to read. Views catch
up on demand (:meth:`View.sync`, in worker threads) from a consistent cut of the queues;
:meth:`ViewCache.peek`, :meth:`View.read_cached`, :meth:`PartCache.known` and
:meth:`PartCache.open_cached` are what the FUSE layer runs on its trio loop (the fast methods
of ``fusefs.base``, "Where work runs"): they never wait, and answer None when only a worker
thread can answer.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import errno
import itertools
import logging
import os
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from rmqfs.engine.errors import StoreError
from rmqfs.engine.format.message import MessageRecord
from rmqfs.engine.store import MessageStore

from . import render as R
from .base import REQUEST_UID, pread_cached

if TYPE_CHECKING:  # imported where a pool starts: most mounts never render
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing.context import ForkServerContext

    import numpy as np

    #: a chunk's queue ids: the queue's id (a queue's view) or one per unit (int64 array)
    QueueIds = np.ndarray | int
    #: ``(queue_ids, units, queue offsets)`` of a chunk (``View.chunk_units``)
    ChunkUnits = tuple[QueueIds, np.ndarray, np.ndarray]
    #: what :func:`plan_chunks` yields: ``(queue_ids, units, queue offsets, ends)``
    PlannedChunk = tuple[QueueIds, np.ndarray, np.ndarray, dict[int, int]]
    #: a sizing render under way (``View._size``): ``(render, queue_ids, units, queue
    #: offsets, ends, (room, file) or None)``
    SizeJob = tuple[
        Future[R.ChunkResult],
        QueueIds,
        np.ndarray,
        np.ndarray,
        dict[int, int],
        tuple[int, str] | None,
    ]

log = logging.getLogger(__name__)

Renderer = Callable[[MessageRecord], bytes]
#: A ``view/`` part: ``(topic, queueId, first, end)`` (``end`` one past its last queue offset)
PartKey = tuple[str, int, int, int]
_T = TypeVar("_T")


_PAGE = os.sysconf("SC_PAGE_SIZE")


def on_disk(n: int) -> int:
    """Bytes ``n`` bytes of a file take on disk, in whole pages (what ``du`` counts): the
    render cache's bound counts these."""
    return n + (-n) % _PAGE


class RenderBudget:
    """The one bound of the render cache (``--cache-size``), held at every moment.

    Everything rendered counts: the JSON views' bytes, the ``view/`` parts' files and the
    room reserved for renders under way (a chunk's ``render.chunk_room`` while it is sized,
    its length once it is, a part's CommitLog bytes). A render reserves before it starts
    (:meth:`take`) and gives the room back once its bytes are counted where they landed
    (:meth:`give`). A reservation that does not fit first
    evicts least recently used renders that no one holds open or is rendering (JSON views,
    then parts: ``ViewCache.evict_one``); when it still does not fit, :meth:`take` raises
    EFBIG: a ``view/`` part is then refused, and a JSON view's chunk is rendered into memory
    for the one read that needs it instead of kept (``ChunkCache.render_for_read``).

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

    def take(self, n: int, others: bool, what: str, keep: object = None) -> None:
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

    def try_take(self, n: int, others: bool) -> bool:
        """Reserve ``n`` bytes when they fit without evicting anything (a sizing pass keeps
        a chunk only then); whether they were."""
        with self.lock:
            theirs = self.on_disk(True) + self.reserved[1]
            total = self.on_disk(False) + theirs + self.reserved[0]
            if total + n > self.max_bytes or (others and theirs + n > self.others_max):
                return False
            self.reserved[others] += n
            return True

    def give(self, n: int, others: bool) -> None:
        """A reservation of :meth:`take` is over (its bytes are counted where they landed)."""
        with self.lock:
            self.reserved[others] -= n

    @contextlib.contextmanager
    def landing(self, n: int, others: bool) -> Iterator[None]:
        """A render's reservation of ``n`` bytes ends as its file is counted where it landed
        (the ``with`` block, which must not take this budget's lock): one step for
        :meth:`used`, which sees the bytes reserved or on disk, never both (a sampler saw
        the cache one chunk over its bound in between). The cache's lock may be held around
        it: the budget never takes a cache's lock under its own."""
        with self.lock:
            try:
                yield
            finally:
                self.reserved[others] -= n


# -- the JSON views: a seek-point index per view, chunks rendered by range --------------------

# Renderers whose lines are built column-wise from engine.read.columnar batches (render.render_lines).
_LINE_KINDS: dict[Renderer, str] = {R.render_message: "messages", R.render_body: "bodies"}
#: Units in one chunk of a view at most: one worker task renders one chunk.
CHUNK_UNITS = 8192
#: Room (``render.chunk_room``, about twice the lines' bytes) of one chunk at most, a chunk of
#: one unit excepted: what a read of a few bytes renders, and all of a view the cache must
#: hold at once, so a view of any size reads under a cache of a few of these.
CHUNK_ROOM = 4 << 20
#: Bytes of rendered lines of one chunk at most, a chunk of one line excepted. The room
#: estimates a chunk's lines from its records' sizes, but a compressed body may inflate
#: ``engine.format.message.MAX_INFLATED_BODY`` / a few hundred bytes fold: a chunk whose lines
#: the sizing pass finds longer than this is cut into chunks of at most this
#: (:meth:`ChunkIndex.append_cut`), so what a read renders, and what the daemon holds of a
#: chunk it serves from memory, stays bounded by this and the longest line.
CHUNK_BYTES = 2 * CHUNK_ROOM
#: Views whose index is kept (least recently used first); a dropped index is rebuilt by a
#: sizing pass when its view is used again.
VIEWS_KEPT = 4096
#: Renders one read of a chunk starts at most (a worker that died, a chunk evicted between
#: its render and the read) before it fails with EIO.
READ_RENDERS = 4


def damage_index(units: np.ndarray, exc: StoreError) -> int:
    """Index in ``units`` of the unit at the CommitLog offset a render's error names (0 when
    it names none or no unit has it): the units before it rendered fine."""
    import numpy as np

    at = getattr(exc, "offset", None)
    if at is None:
        return 0
    hit = np.flatnonzero(units["off"].astype(np.int64) == at)
    return int(hit[0]) if len(hit) else 0


def note_damage(
    store: MessageStore,
    topic: str,
    queue_ids: QueueIds,
    units: np.ndarray,
    qoffs: np.ndarray,
    exc: StoreError,
) -> None:
    """Tell the store (``store.note_damage``: status.json ``damagedQueues``, one warning
    line) which queue a render that failed on damage was reading: the queue and queue offset
    of the unit at the CommitLog offset the error names (the chunk's first unit when it names
    none). ``queue_ids`` is one queue id or one per unit."""
    i = damage_index(units, exc)
    qid = queue_ids if isinstance(queue_ids, int) else int(queue_ids[i])
    store.note_damage(topic, qid, int(qoffs[i]) if len(qoffs) else None, exc)


class ChunkIndex:
    """The seek-point index of one decoded view (ratarmount's index of an archive's members):
    the view is cut into chunks of units, and for each chunk it keeps where the chunk starts in
    each of the view's queues (a queue offset), the byte offset of its first line and the
    number of lines before it. A chunk ``i`` is the units of queue offsets ``[pos[j][i],
    pos[j][i + 1])`` of each queue ``qids[j]`` (blank filler dropped), merged by
    commitLogOffset; its lines are a pure function of the store, so any chunk can be rendered
    again, alone, with the same bytes. Nothing rendered is kept here: a few integers per chunk
    (8,192 messages or :data:`CHUNK_ROOM` of lines; at most :data:`CHUNK_BYTES` of lines, one
    line excepted), so the index of a view of 20,000,000 messages takes some tens of
    kilobytes.

    Grows only at its end (:meth:`append`, :meth:`drop_last` of a short last chunk that is cut
    again longer); owned by its :class:`View`, which changes a :meth:`copy` under its lock and
    then puts it in place: an index a reader holds never changes."""

    def __init__(
        self,
        qids: Iterable[int] = (),
        pos: Iterable[array] = (),
        byte_at: Iterable[int] = (0,),
        line_at: Iterable[int] = (0,),
    ) -> None:
        """An empty index, or one holding copies of the given columns (:meth:`copy`)."""
        self.qids: list[int] = list(qids)
        self._col: dict[int, int] = {q: j for j, q in enumerate(self.qids)}
        #: ``pos[j][i]``: first queue offset of chunk ``i`` in queue ``qids[j]``;
        #: ``pos[j][chunks]``: the first one not in the view yet
        self.pos: list[array] = [array("q", a) for a in pos]
        self.byte_at = array("q", byte_at)  # byte offset where each chunk starts, then the size
        self.line_at = array("q", line_at)  # lines before each chunk, then all of them

    def copy(self) -> ChunkIndex:
        """An index equal to this one that can change while this one is read: a sizing pass
        works on a copy and puts it in place whole (``View.sync``), so a reader sees one
        index from its start to its end (a few integers per chunk: cheap)."""
        return ChunkIndex(self.qids, self.pos, self.byte_at, self.line_at)

    @property
    def chunks(self) -> int:
        """Number of chunks."""
        return len(self.byte_at) - 1

    @property
    def size(self) -> int:
        """The view's size in bytes (exact)."""
        return self.byte_at[-1]

    def add_queue(self, qid: int, start: int) -> None:
        """A queue of the view seen for the first time, its messages from queue offset
        ``start`` on (none in the chunks so far)."""
        self._col[qid] = len(self.qids)
        self.qids.append(qid)
        self.pos.append(array("q", [start] * (self.chunks + 1)))

    def has(self, qid: int) -> bool:
        """Whether ``qid`` is one of the view's queues."""
        return qid in self._col

    def next_offsets(self) -> dict[int, int]:
        """Per queue, the first queue offset not in the view."""
        return {q: self.pos[j][-1] for j, q in enumerate(self.qids)}

    def start_offsets(self, i: int) -> dict[int, int]:
        """Per queue, the first queue offset of chunk ``i``."""
        return {q: self.pos[j][i] for j, q in enumerate(self.qids)}

    def first_offset(self, qid: int) -> int:
        """The first queue offset of ``qid`` the view holds."""
        return self.pos[self._col[qid]][0]

    def append(self, ends: dict[int, int], length: int, lines: int) -> None:
        """A chunk after the last: its units end at ``ends`` (per queue, one past its last
        queue offset; a queue not named keeps its position), ``length`` bytes of ``lines``
        lines."""
        for j, q in enumerate(self.qids):
            self.pos[j].append(ends.get(q, self.pos[j][-1]))
        self.byte_at.append(self.byte_at[-1] + length)
        self.line_at.append(self.line_at[-1] + lines)

    def append_cut(self, queue_ids: QueueIds, qoffs: np.ndarray, line_ends: np.ndarray) -> None:
        """A planned chunk (:func:`plan_chunks`: its units' queue ids and queue offsets) whose
        lines end at ``line_ends`` (byte offsets in the chunk, one per unit), appended as
        chunks of at most :data:`CHUNK_BYTES` of lines each (one line alone may have more), in
        view order: each is a run of the planned chunk's units, which
        :meth:`View.chunk_units` finds again from the queue offsets where it starts and
        ends."""
        import numpy as np

        n, a, at = len(line_ends), 0, 0
        while a < n:
            z = int(np.searchsorted(line_ends, at + CHUNK_BYTES, side="right"))
            z = max(z, a + 1)
            ids = queue_ids if isinstance(queue_ids, int) else queue_ids[a:z]
            end = int(line_ends[z - 1])
            self.append(queue_ends(ids, qoffs[a:z]), end - at, z - a)
            a, at = z, end

    def move_start(self, qid: int, start: int) -> None:
        """Queue ``qid`` has no message in the view yet, and none before ``start`` left (they
        expired): the view takes it from ``start``."""
        a = self.pos[self._col[qid]]
        for i in range(len(a)):
            a[i] = start

    def advance(self, ends: dict[int, int]) -> None:
        """Move the end of the view past units that render nothing (blank filler) in the
        queues of ``ends``."""
        for q, end in ends.items():
            if q not in self._col:
                continue
            a = self.pos[self._col[q]]
            a[-1] = max(a[-1], end)

    def drop_last(self) -> None:
        """Forget the last chunk (cut again, longer, by the next sizing pass)."""
        for a in self.pos:
            a.pop()
        self.byte_at.pop()
        self.line_at.pop()

    def ranges(self, i: int) -> list[tuple[int, int, int]]:
        """``(queueId, first, end)`` of the units of chunk ``i``, per queue that has some."""
        return [
            (q, self.pos[j][i], self.pos[j][i + 1])
            for j, q in enumerate(self.qids)
            if self.pos[j][i] < self.pos[j][i + 1]
        ]

    def chunk_at(self, byte_offset: int) -> int:
        """The chunk holding ``byte_offset`` (0 <= byte_offset < size)."""
        return bisect.bisect_right(self.byte_at, byte_offset) - 1

    def chunk_of_offset(self, qid: int, queue_offset: int) -> int:
        """The chunk holding queue offset ``queue_offset`` of ``qid`` (-1 before the first,
        ``chunks`` past the last)."""
        a = self.pos[self._col[qid]]
        if queue_offset >= a[-1]:
            return self.chunks
        return bisect.bisect_right(a, queue_offset, 0, len(a) - 1) - 1


def plan_chunks(
    store: MessageStore,
    topic: str,
    kind: str,
    queue_id: int | None,
    start: dict[int, int],
    cut: dict[int, int],
    reached: dict[int, int],
    exact: bool = False,
) -> Iterator[PlannedChunk]:
    """Cut the units of queue offsets ``[start[q], cut[q])`` of each queue ``q`` into chunks,
    in view order: merged by commitLogOffset (CommitLog order; one queue: queue order),
    blank filler dropped, each of at most :data:`CHUNK_UNITS` units and :data:`CHUNK_ROOM` of
    room (``render.unit_rooms``; a unit alone may have more). A bounded number of units is
    loaded at a time: from each queue with units left a batch, and every unit at or below the
    smallest of the batches' last offsets is planned (no queue can still have a smaller one:
    each queue's offsets grow).

    A chunk is cut once it is full or no unit is left, so chunks have a useful size whatever
    the interleaving of the queues. Yields ``(queue_ids, units, queue offsets, ends)``:
    ``queue_ids`` the int ``queue_id`` for a queue's view, else one per unit (a topic's view,
    ``queue_id`` None); ``ends`` per queue of the chunk, one past its last queue offset
    (what ``ChunkIndex.append`` takes).
    ``reached`` is filled with how far each queue was read (past trailing blank filler:
    ``ChunkIndex.advance``). Units below a queue's min offset, or whose record is below the
    CommitLog's (cleanup deletes CommitLog files first), expired and are skipped; with
    ``exact`` (a chunk cut again, whose bytes must stay) that raises :class:`_Expired`."""
    import numpy as np

    from rmqfs.engine.read.columnar import drop_blank_units, queue_units

    loaded = dict(start)
    bufs: dict[int, tuple] = {}
    pending: list[tuple] = []  # merged units not in a chunk yet: (units, qoffs, queue ids)
    while True:
        for q, end in cut.items():
            b = bufs.get(q)
            if (b is None or not len(b[0])) and loaded[q] < end:
                cq = store.consume_queue(topic, q)
                units, qoffs = queue_units(cq, loaded[q], min(end, loaded[q] + CHUNK_UNITS))
                if not len(units):  # the queue holds fewer than its cut said: stop there
                    cut = {**cut, q: loaded[q]}
                    continue
                if exact and int(qoffs[0]) != loaded[q]:
                    raise _Expired(q)
                loaded[q] = int(qoffs[-1]) + 1
                units, qoffs, _ = drop_blank_units(units, qoffs)
                live_cl = units["off"].astype(np.int64) >= store.commitlog.min_offset
                if not live_cl.all():  # their records expired (CommitLog first, as cleanup)
                    if exact:
                        raise _Expired(q)
                    units, qoffs = units[live_cl], qoffs[live_cl]
                bufs[q] = (units, qoffs)
        reached.update(loaded)
        live = {q: b for q, b in bufs.items() if len(b[0])}
        if live:  # every unit at or below the smallest last offset loaded, merged
            bound = min(int(b[0]["off"][-1]) for b in live.values())
            us, qs, ids = [], [], []
            for q, (units, qoffs) in live.items():
                k = int(np.searchsorted(units["off"].astype(np.int64), bound, side="right"))
                us.append(units[:k])
                qs.append(qoffs[:k])
                ids.append(np.full(k, q, dtype=np.int64))
                bufs[q] = (units[k:], qoffs[k:])
            units, qoffs, qid_arr = np.concatenate(us), np.concatenate(qs), np.concatenate(ids)
            if len(live) > 1:
                order = np.argsort(units["off"].astype(np.int64), kind="stable")
                units, qoffs, qid_arr = units[order], qoffs[order], qid_arr[order]
            pending.append((units, qoffs, qid_arr))
        if not pending:
            return
        units = np.concatenate([p[0] for p in pending])
        qoffs = np.concatenate([p[1] for p in pending])
        qid_arr = np.concatenate([p[2] for p in pending])
        pending = []
        room = np.cumsum(R.unit_rooms(kind, units))
        a = 0
        while a < len(units):
            base = int(room[a - 1]) if a else 0
            z = int(np.searchsorted(room, base + CHUNK_ROOM, side="right"))
            z = min(max(z, a + 1), a + CHUNK_UNITS)
            if z == len(units) and live:  # not full: more units may join it next round
                pending.append((units[a:], qoffs[a:], qid_arr[a:]))
                break
            sl = slice(a, z)
            ends = queue_ends(qid_arr[sl], qoffs[sl])
            yield (qid_arr[sl] if queue_id is None else queue_id), units[sl], qoffs[sl], ends
            a = z


def queue_ends(queue_ids: QueueIds, qoffs: np.ndarray) -> dict[int, int]:
    """Per queue of a chunk's units (``queue_ids``: its queue's id, or one per unit; their
    queue offsets ``qoffs``, in view order), one past its last queue offset there: what
    :meth:`ChunkIndex.append` takes."""
    import numpy as np

    if not len(qoffs):
        return {}
    if isinstance(queue_ids, int):
        return {queue_ids: int(qoffs[-1]) + 1}
    ends = {}
    for q in np.unique(queue_ids).tolist():
        ends[q] = int(qoffs[queue_ids == q][-1]) + 1
    return ends


class _Expired(Exception):
    """Units a chunk cut again must hold expired meanwhile (:func:`plan_chunks`)."""


class View:
    """One decoded view (``messages.jsonl`` or ``bodies.txt`` of a topic, in CommitLog order,
    or of one queue, in queue-offset order), served by range: a :class:`ChunkIndex` built by a
    sizing pass that keeps no rendered byte gives its exact size at once, and a read renders
    only the chunks its range touches (in the render workers, into the render cache,
    ``ChunkCache``). So ``cat``, ``tail``, ``dd skip=`` and ``pread`` work on a view of any
    size under any ``--cache-size``.

    The index only grows: :meth:`sync` sizes what was stored since (from a consistent cut of
    the queues), a short last chunk is cut again longer. A view whose oldest messages were
    deleted (expiry) starts again from the oldest left once no handle holds it open: a reader
    that keeps it open (``tail -f``) keeps its offsets, and its read of a range whose messages
    expired fails with EIO. A sizing pass that meets damage ends
    the view there (:attr:`damage`): reads that reach it fail with EIO.

    Thread-safe: :meth:`sync` under :attr:`lock`; :meth:`read_cached` runs on the trio loop
    and never waits."""

    for_others = False  # its sizing was asked by another user than the owner

    def __init__(self, cache: ViewCache, key: tuple, queue_id: int | None) -> None:
        self.cache = cache
        self.store = cache.store
        self.key = key
        self.kind, self.topic = key[0], key[1]
        self.queue_id = queue_id
        self.index = ChunkIndex()
        self.vid = cache.new_view_id()
        self.mtime_ms = 0  # newest store time (epoch ms) of its messages
        self.lock = threading.Lock()
        self.opens = 0  # open handles (a view held open keeps its index)
        #: the damage the sizing met right after its last line (a StoreError), or None
        self.damage: StoreError | None = None
        self.dropped = False  # its topic was deleted
        #: the last chunk rendered into memory for a read (no room for it in the cache), as
        #: ``(chunk, bytes)``: the reads after it in the same chunk need no render; one per
        #: view held open, dropped with the last handle
        self._mem: tuple[tuple[int, int, int], bytes] | None = None

    @property
    def size(self) -> int:
        """Bytes of the view (exact; no lock: safe on the trio loop)."""
        return self.index.size

    def _cut(self) -> dict[int, int]:
        if self.queue_id is not None:
            return {self.queue_id: self.store.max_offset(self.topic, self.queue_id)}
        return self.store.queue_max_offsets(self.topic)

    def up_to_date(self) -> bool:
        """True when every stored message is in the index, or it ends at damage (no lock
        taken: safe on the trio loop)."""
        if self.damage is not None:
            return True
        ix = self.index
        nxt = ix.next_offsets()
        if self.queue_id is not None:
            cq = self.store.consume_queue(self.topic, self.queue_id)
            return cq is None or (ix.has(self.queue_id) and cq.max_offset == nxt[self.queue_id])
        queues = self.store.consume_queues
        for q in self.store.queue_ids(self.topic):  # this topic's, not every queue's
            cq = queues.get((self.topic, q))
            if cq is not None and cq.max_offset != nxt.get(q, cq.min_offset):
                return False
        return True

    def sync(self) -> None:
        """Size what was stored since the last call (the workers render each new chunk once
        and keep its length; a chunk stays in the render cache only when there is room
        without evicting anything)."""
        with self.lock:
            if self.damage is not None or self.dropped:
                return
            cut = self._cut()
            ix = self.index.copy()
            nxt = ix.next_offsets()
            for q in sorted(cut):
                cq = self.store.consume_queue(self.topic, q)
                if cq is None:
                    continue
                if not ix.has(q):
                    ix.add_queue(q, cq.min_offset)
                elif cq.min_offset > ix.first_offset(q):
                    if nxt[q] == ix.first_offset(q):  # none of its messages in the view yet
                        ix.move_start(q, cq.min_offset)
                    elif not self.opens:  # some in the view expired, and no one reads it
                        ix = self._restart()
                        break
                    elif cq.min_offset > nxt[q]:  # and some never sized: the view skips them
                        ix.advance({q: cq.min_offset})
            self._grow(ix, cut)

    def _restart(self) -> ChunkIndex:
        """Start the index again from the oldest messages left (caller holds :attr:`lock`):
        its chunks are forgotten, its size starts from zero (a reader sees the file
        truncated, as ``tail -f`` reports it)."""
        self.cache.chunks.forget_view(self)
        self.vid = self.cache.new_view_id()  # renders of the old chunks under way: not kept
        ix = ChunkIndex()
        self.mtime_ms = 0
        for q in sorted(self._cut()):
            cq = self.store.consume_queue(self.topic, q)
            if cq is not None:
                ix.add_queue(q, cq.min_offset)
        self.index = ix
        return ix.copy()

    def _grow(self, ix: ChunkIndex, cut: dict[int, int]) -> None:
        """:meth:`sync`'s sizing pass up to ``cut`` on ``ix`` (a copy of the index, caller
        holds :attr:`lock`), put in place when it is done (or ends at damage)."""
        nxt = ix.next_offsets()
        grow = {q: c for q, c in cut.items() if ix.has(q) and c > nxt[q]}
        if not grow:
            self.index = ix
            return
        base = ix.copy()
        again = bool(ix.chunks) and self._extends_last(ix, grow, nxt)
        if again:
            i = ix.chunks - 1
            start = ix.start_offsets(i)
            end = {q: max(cut.get(q, nxt[q]), nxt[q]) for q in ix.qids}
            ix.drop_last()
        else:
            start, end = {q: nxt[q] for q in grow}, grow
        reached: dict[int, int] = {}
        cl_min = self.store.commitlog.min_offset
        plan = plan_chunks(
            self.store, self.topic, self.kind, self.queue_id, start, end, reached, exact=again
        )
        try:
            self._size(ix, plan, cl_min)
        except (_Expired, StoreError) as exc:
            if isinstance(exc, StoreError) and exc.transient:
                raise  # object storage did not answer: the index stays as it was
            if isinstance(exc, StoreError) and self._expired_since(cl_min, exc):
                # records planned were deleted by expiry meanwhile (here, or by the writer a
                # follower follows): not damage; the next sync plans again from what is left
                self.index = base
                return
            if not again:
                assert isinstance(exc, StoreError)
                self.index = ix
                self.damage = exc
                return
            # the last chunk's messages expired meanwhile (or cannot be read again): it stays
            ix, reached = base, {}
            plan = plan_chunks(self.store, self.topic, self.kind, self.queue_id, nxt, grow, reached)
            try:
                self._size(ix, plan, cl_min)
            except StoreError as exc2:
                if exc2.transient:
                    raise
                if self._expired_since(cl_min, exc2):
                    self.index = base
                    return
                self.index = ix
                self.damage = exc2
                return
        ix.advance(reached)
        self.index = ix

    def _expired_since(self, cl_min: int, exc: StoreError) -> bool:
        """Whether the failure ``exc`` is expiry since the CommitLog started at ``cl_min``, not
        damage: the record it names (or, naming none, any) lies below where the CommitLog
        starts now, or, in a follower, in its oldest listed file, which the writer deleted
        before the follower listed the files again. Damage anywhere else, or a file missing
        for another reason, is damage."""
        cl = self.store.commitlog
        at = getattr(exc, "offset", None)
        if cl.min_offset != cl_min and (at is None or at < cl.min_offset):
            return True
        if self.store.follower is None or at is None:
            return False
        segs = cl.files.segments
        return bool(segs) and segs[0].start <= at < segs[0].end and cl.files.oldest_gone()

    def _extends_last(self, ix: ChunkIndex, grow: dict[int, int], nxt: dict[int, int]) -> bool:
        """Whether the last chunk is short and the new units all come after its units in
        view order, so it is cut again longer instead of a new short chunk following it (a
        view that grows a few messages at a time keeps chunks of a useful size)."""
        i = ix.chunks - 1
        if ix.line_at[i + 1] - ix.line_at[i] >= CHUNK_UNITS // 2:
            return False
        if ix.byte_at[i + 1] - ix.byte_at[i] >= CHUNK_ROOM // 4:
            return False
        for q, first, _end in ix.ranges(i):
            cq = self.store.consume_queue(self.topic, q)
            if cq is None or cq.min_offset > first:
                return False  # its messages expired: cut again, its bytes would change
        try:
            last = self.chunk_units(ix, i)[1]
        except OSError:  # its messages expired: a new chunk follows it
            return False
        if self.queue_id is not None:
            return True
        if not len(last):
            return True
        from rmqfs.engine.read.columnar import queue_units

        top = int(last["off"].astype("int64").max())
        for q in grow:
            first = nxt[q]
            units, _ = queue_units(self.store.consume_queue(self.topic, q), first, first + 1)
            if len(units) and int(units["off"][0]) <= top:
                return False
        return True

    def _size(self, ix: ChunkIndex, chunks: Iterable[PlannedChunk], cl_min: int) -> None:
        """Size ``chunks`` (from :func:`plan_chunks`, planned when the CommitLog started at
        ``cl_min``) in the workers, up to two per worker at once, and append them to the
        index in order (caller holds :attr:`lock`); one whose lines are longer than
        :data:`CHUNK_BYTES` is appended cut (:meth:`ChunkIndex.append_cut`). A chunk that
        meets damage: the lines before the damaged record are sized alone and end the view,
        and its StoreError is raised after ``note_damage``; one whose records expiry deleted
        meanwhile (:meth:`_expired_since`) raises it without either."""
        from collections import deque

        parts = self.cache.parts
        store = self.cache.chunks
        ahead: deque[SizeJob] = deque()
        depth = 2 * parts.workers

        def append(
            ids: QueueIds, qoffs: np.ndarray, ends: dict[int, int], result: R.ChunkResult
        ) -> None:
            if result.ends is None:  # no longer than CHUNK_BYTES: one chunk, as planned
                ix.append(ends, result.length, result.lines)
            else:
                ix.append_cut(ids, qoffs, result.ends)
            self.mtime_ms = max(self.mtime_ms, result.newest)

        def land(job: SizeJob) -> None:
            fut, ids, units, qoffs, ends, keep = job
            try:
                result = store.sized(self, ix, fut, keep, (ids, units, qoffs))
            except StoreError as exc:
                if exc.transient or self._expired_since(cl_min, exc):
                    raise  # not damage: the next read asks again, or plans what is left
                note_damage(self.store, self.topic, ids, units, qoffs, exc)
                k = damage_index(units, exc)
                if k:  # the lines before the damaged record end the view
                    ids_k = ids if isinstance(ids, int) else ids[:k]
                    fut = self.render(ids_k, units[:k], qoffs[:k], R.SIZE_ONLY, sizing=True)
                    append(ids_k, qoffs[:k], queue_ends(ids_k, qoffs[:k]), fut.result())
                raise
            append(ids, qoffs, ends, result)

        try:
            for ids, units, qoffs, ends in chunks:
                fut, keep = store.size_chunk(self, ids, units, qoffs)
                ahead.append((fut, ids, units, qoffs, ends, keep))
                while len(ahead) >= depth:
                    land(ahead.popleft())
            while ahead:
                land(ahead.popleft())
        finally:
            for job in ahead:  # an error: the chunks after it are not wanted
                store.abandon(job[0], job[5])

    def render(
        self,
        ids: int | np.ndarray,
        units: np.ndarray,
        qoffs: np.ndarray,
        out: R.ChunkOut,
        sizing: bool = False,
    ) -> Future[R.ChunkResult]:
        """Render units of this view in a render worker (``render.render_view_chunk``, the
        one call of the workers for the view's chunks): ``out`` says where the lines go (a
        file of the cache, nowhere, or back; returned only for a chunk of the index, which
        :data:`CHUNK_BYTES` bounds). ``sizing``: a planned chunk, whose lines' ends come back
        when they are longer than :data:`CHUNK_BYTES` (the index cuts it)."""
        parts = self.cache.parts
        over = CHUNK_BYTES if sizing else None
        return parts.submit_task(
            R.render_view_chunk,
            parts.commitlog_dir,
            self.topic,
            ids,
            units,
            qoffs,
            self.kind,
            out,
            over,
        )

    def chunk_units(self, ix: ChunkIndex, i: int) -> ChunkUnits:
        """``(queue_ids, units, queue offsets)`` of chunk ``i`` of ``ix`` (the view's index, or
        one a reader holds), as :func:`plan_chunks` gave them (blank filler dropped, merged by
        commitLogOffset). OSError(EIO) when the queue no longer has them (expired)."""
        import numpy as np

        from rmqfs.engine.read.columnar import drop_blank_units, queue_units

        us, qs, ids = [], [], []
        for q, first, end in ix.ranges(i):
            units, qoffs = queue_units(self.store.consume_queue(self.topic, q), first, end)
            if (
                first + len(units) < end
                or (len(qoffs) and qoffs[0] != first)
                or (len(units) and int(units["off"].min()) < self.store.commitlog.min_offset)
            ):
                raise OSError(errno.EIO, f"{self.what}: ConsumeQueue units missing (expired?)")
            units, qoffs, _ = drop_blank_units(units, qoffs)
            us.append(units)
            qs.append(qoffs)
            ids.append(np.full(len(units), q, dtype=np.int64))
        if not us:
            from rmqfs.engine.read.columnar import UNIT_DTYPE

            return self.queue_id or 0, np.zeros(0, UNIT_DTYPE), np.zeros(0, np.int64)
        units, qoffs, qid_arr = np.concatenate(us), np.concatenate(qs), np.concatenate(ids)
        if len(us) > 1:
            order = np.argsort(units["off"].astype(np.int64), kind="stable")
            units, qoffs, qid_arr = units[order], qoffs[order], qid_arr[order]
        if self.queue_id is not None:
            return self.queue_id, units, qoffs
        return qid_arr, units, qoffs

    @property
    def what(self) -> str:
        """The view, in words (for errors)."""
        where = self.topic if self.queue_id is None else f"{self.topic}/{self.queue_id}"
        return f"{where}'s {self.kind} view"

    def read_cached(
        self, offset: int, length: int, end: int | None = None
    ) -> bytes | bytearray | None:
        """:meth:`read` when every chunk it touches is held in memory, or in the render cache
        and the page cache (:meth:`ChunkCache.read_cached`: all of them or none), and no
        read-ahead is due; else None, and nothing changed. Never waits: the trio loop calls
        it."""
        ix = self.index
        stop = min(offset + length, ix.size if end is None else min(end, ix.size))
        spans = []  # (chunk, offset in it, bytes, its length) of each chunk the read touches
        while offset < stop:
            i = ix.chunk_at(offset)
            first, last = ix.byte_at[i], ix.byte_at[i + 1]
            n = min(stop, last) - offset
            spans.append((i, offset - first, n, last - first))
            offset += n
        mem = self._mem  # (key, bytes) of a chunk held in memory (no room in the cache)
        in_mem = {
            i
            for i, _, _, _ in spans
            if mem is not None and mem[0] == (self.vid, i, ix.byte_at[i + 1])
        }
        chunks = self.cache.chunks
        want = [(i, at, n) for i, at, n, _ in spans if i not in in_mem]
        if any(chunks.wants_ahead(self, ix, i) for i, _, _ in want):
            return None  # the thread that serves it starts the next chunks
        got = chunks.read_cached(self, ix, want)
        if got is None:
            return None
        out: list[bytes | bytearray] = []
        for i, at, n, length in spans:
            if i in in_mem:
                assert mem is not None
                out.append(mem[1][at : at + n])
                continue
            out.append(got[i])
            if at + n == length:  # read to its end: the first to go for room (drop-behind)
                chunks.read_through(self, i)
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def read(self, offset: int, length: int, end: int | None = None) -> bytes | bytearray:
        """Up to ``length`` bytes at ``offset``, not past ``end`` (default: the view's size);
        renders the chunks missing and starts the next ones (read-ahead): worker threads
        only. Raises OSError(EIO) when a chunk cannot be rendered again (its messages expired,
        a worker keeps dying)."""
        ix = self.index
        stop = min(offset + length, ix.size if end is None else min(end, ix.size))
        out = []
        while offset < stop:
            i = ix.chunk_at(offset)
            first, last = ix.byte_at[i], ix.byte_at[i + 1]
            n = min(stop, last) - offset
            out.append(self._read_chunk(ix, i, offset - first, n, last - first))
            offset += n
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def _read_chunk(
        self, ix: ChunkIndex, i: int, at: int, n: int, length: int
    ) -> bytes | bytearray:
        mem = self._mem
        if mem is not None and mem[0] == (self.vid, i, ix.byte_at[i + 1]):
            return mem[1][at : at + n]
        chunks = self.cache.chunks
        data = chunks.read(self, ix, i, at, n)
        if data is not None and len(data) == n:
            if at + n == length:  # read to its end: the first to go for room (drop-behind)
                chunks.read_through(self, i)
            chunks.read_ahead(self, ix, i)
            return data
        chunks.read_ahead(self, ix, i)
        from concurrent.futures.process import BrokenProcessPool

        for _ in range(READ_RENDERS):
            try:
                got = chunks.render_for_read(self, ix, i)
            except BrokenProcessPool:
                continue  # its worker died: the next render runs in a fresh pool
            except StoreError as exc:
                raise OSError(errno.EIO, f"{self.what}: {exc}") from None
            if isinstance(got, (bytes, bytearray)):  # not kept: no room in the cache
                if len(got) != length:
                    raise OSError(errno.EIO, f"{self.what}: the store changed under the view")
                if self.opens:
                    self._mem = ((self.vid, i, ix.byte_at[i + 1]), got)
                return got[at : at + n]
            data = chunks.read(self, ix, i, at, n)
            if data is not None and len(data) == n:
                return data
        raise OSError(errno.EIO, f"{self.what}: chunk {i} could not be rendered")

    def byte_offset(self, queue_offset: int) -> int:
        """Byte offset where the line of ``queue_offset`` starts in a queue's ``messages``
        view (clamped to the view); renders the chunk holding it when the cache lacks it
        (worker threads only). Lines of ``messages.jsonl`` hold no raw newline, so the
        line's start is found by counting the chunk's newlines."""
        import numpy as np

        ix = self.index
        q = self.queue_id
        assert q is not None and self.kind == "messages"
        if not ix.has(q) or not ix.chunks or queue_offset <= ix.first_offset(q):
            return 0
        i = ix.chunk_of_offset(q, queue_offset)
        if i >= ix.chunks:
            return ix.size
        _, _units, qoffs = self.chunk_units(ix, i)
        k = int(np.searchsorted(qoffs, queue_offset))
        if k == 0:
            return ix.byte_at[i]
        data = self.read(ix.byte_at[i], ix.byte_at[i + 1] - ix.byte_at[i])
        nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        return ix.byte_at[i] + int(nl[k - 1]) + 1

    def live_byte_offset(self, queue_offset: int) -> int:
        """:meth:`byte_offset` of a queue offset at or past the queue's minOffset; where the
        chunk holding it also holds messages that expired since the view sized it (its units
        cannot be read again: the view is held open across the expiry), the line found in the
        chunk as rendered (cached), else the start of the next chunk, whose messages all
        live."""
        ix = self.index
        q = self.queue_id
        assert q is not None
        try:
            return self.byte_offset(queue_offset)
        except (StoreError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno != errno.EIO:
                raise
            if isinstance(exc, StoreError) and exc.transient:
                raise
            i = ix.chunk_of_offset(q, queue_offset)
            first = ix.start_offsets(i).get(q, 0) if i < ix.chunks and ix.has(q) else None
            if first is None:
                raise
            if first >= queue_offset:
                return ix.byte_at[i]  # its line starts the chunk: nothing to read
            cq = self.store.consume_queue(self.topic, q)
            if cq is None or first >= cq.min_offset:
                raise  # nothing of the chunk expired: damage, or the render failed
        # its units cannot be read again, but the chunk as rendered may still be cached: its
        # lines are in queue offset order, each naming its queueOffset
        try:
            data = self.read(ix.byte_at[i], ix.byte_at[i + 1] - ix.byte_at[i])
        except (StoreError, OSError):
            return ix.byte_at[min(i + 1, ix.chunks)]
        import bisect

        import numpy as np

        starts = [0, *(np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1).tolist()]
        starts = [p for p in starts if p < len(data)]

        def offset_at(k: int) -> int:
            at = data.find(b'"queueOffset":', starts[k]) + len(b'"queueOffset":')
            end = at
            while end < len(data) and data[end : end + 1].isdigit():
                end += 1
            return int(data[at:end])

        k = bisect.bisect_left(range(len(starts)), queue_offset, key=offset_at)
        return ix.byte_at[i] + starts[k] if k < len(starts) else ix.byte_at[i + 1]

    def hold(self) -> None:
        """An open handle reads it: its index is not dropped meanwhile."""
        with self.cache.lock:
            self.opens += 1

    def release(self) -> None:
        """A handle of :meth:`hold` is closed."""
        with self.cache.lock:
            self.opens -= 1
            if not self.opens:
                self._mem = None


class ChunkCache:
    """The rendered chunks of every view, in files under the cache directory, least recently
    used first; their bytes count in the one bound of the render cache (:class:`RenderBudget`,
    with the ``view/`` parts). A chunk is rendered by the workers of :class:`PartCache` into a
    file of its own (a new name for each render), which a read ``pread``s; an evicted chunk
    is rendered again when read. A kept chunk is known by its view, its number and its end in
    the view: a short last chunk cut again longer, or a view started again, never serves the
    bytes of the chunk it replaced. Owned by :class:`ViewCache`; its state changes under
    :attr:`lock` only."""

    #: chunks a sequential read has rendered ahead of it, per worker
    AHEAD_PER_WORKER = 3

    def __init__(self, cache_dir: str, parts: PartCache, budget: RenderBudget) -> None:
        self.dir = os.path.join(cache_dir, "chunks")
        os.makedirs(self.dir, exist_ok=True)
        self.parts = parts
        self.budget = budget
        self.lock = threading.Lock()
        #: (view id, chunk) -> (view, end in the view, file, bytes on disk, charged to other
        #: users), least recently used first
        self.kept: OrderedDict[tuple[int, int], tuple[View, int, str, int, bool]] = OrderedDict()
        #: (view id, chunk, end) -> (Future, room reserved, others, file) of renders for reads
        self.rendering: dict[
            tuple[int, int, int], tuple[Future[R.ChunkResult], int, bool, str]
        ] = {}
        self.totals = [0, 0]  # bytes on disk kept for the owner, for other users
        self._serial = itertools.count()

    def _new_path(self) -> str:
        """A file name no render used before."""
        return os.path.join(self.dir, f"c{next(self._serial)}")

    def bytes_of(self, others: bool) -> int:
        """Bytes on disk of the chunks charged to other users (True) or to the owner."""
        return self.totals[others]

    def _keep(self, view: View, i: int, end: int, path: str, length: int, others: bool) -> None:
        """Count chunk ``i``'s file (caller holds :attr:`lock`), most recently used."""
        if (view.vid, i) in self.kept:
            self._unkeep((view.vid, i))
        disk = on_disk(length)
        self.kept[(view.vid, i)] = (view, end, path, disk, others)
        self.totals[others] += disk

    def _unkeep(self, key: tuple[int, int]) -> None:
        """Forget and delete a kept chunk's file (caller holds :attr:`lock`); a read that
        opened it keeps reading it."""
        _view, _end, path, disk, others = self.kept.pop(key)
        self.totals[others] -= disk
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def _current(
        self, view: View, ix: ChunkIndex, i: int, prune: bool = True
    ) -> tuple[View, int, str, int, bool] | None:
        """The kept chunk ``i`` of ``view`` when it is chunk ``i`` of the index ``ix`` (caller
        holds :attr:`lock`); one cut otherwise (shorter, before the index grew) is deleted
        when ``ix`` is the view's index now, unless ``prune`` is False (the trio loop's
        :meth:`read_cached` changes nothing unless it answers: the next read in a worker
        thread deletes it)."""
        key = (view.vid, i)
        got = self.kept.get(key)
        if got is None:
            return None
        if got[0] is view and i < ix.chunks and got[1] == ix.byte_at[i + 1]:
            return got
        if prune and ix is view.index:
            self._unkeep(key)
        return None

    def read(self, view: View, ix: ChunkIndex, i: int, at: int, n: int) -> bytes | bytearray | None:
        """``n`` bytes at ``at`` of chunk ``i`` when the cache holds it (most recently used
        now, and the owner's when the owner reads it), else None. May wait for the lock and
        the disk: worker threads only."""
        with self.lock:
            fd = self._open_kept(view, ix, i)
            if fd is None:
                return None
            self._used(view, i)
        try:
            return os.pread(fd, n, at)
        finally:
            os.close(fd)

    def read_cached(
        self, view: View, ix: ChunkIndex, want: list[tuple[int, int, int]]
    ) -> dict[int, bytearray] | None:
        """:meth:`read` of each ``(chunk, at, n)`` of ``want`` when it needs not wait: the
        lock is free, the cache holds every chunk and their bytes are in the page cache
        (:func:`fusefs.base.pread_cached`): ``{chunk: bytes}``; else None. The chunks become
        the most recently used only when it answers (all of them)."""
        if not want:
            return {}
        if not self.lock.acquire(blocking=False):
            return None
        try:
            got = {}
            for i, at, n in want:
                fd = self._open_kept(view, ix, i, prune=False)
                if fd is None:
                    return None
                try:
                    data = pread_cached(fd, n, at)
                finally:
                    os.close(fd)
                if data is None:
                    return None
                got[i] = data
            for i in got:
                self._used(view, i)
            return got
        finally:
            self.lock.release()

    def _open_kept(self, view: View, ix: ChunkIndex, i: int, prune: bool = True) -> int | None:
        """An fd of kept chunk ``i`` of ``view`` (caller holds :attr:`lock`), else None;
        ``prune`` as :meth:`_current`."""
        if self._current(view, ix, i, prune) is None:
            return None
        try:
            return os.open(self.kept[(view.vid, i)][2], os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None

    def _used(self, view: View, i: int) -> None:
        """Kept chunk ``i`` of ``view`` was read (caller holds :attr:`lock`): most recently
        used, and the owner's from now on when the owner (or root) reads it."""
        key = (view.vid, i)
        v, end, path, disk, others = self.kept.pop(key)
        if others and not self.budget.is_other():
            self.totals[True] -= disk
            self.totals[False] += disk
            others = False
        self.kept[key] = (v, end, path, disk, others)

    def read_through(self, view: View, i: int) -> None:
        """A reader read chunk ``i`` of ``view`` to its end: it becomes the least recently
        used, so making room evicts what readers left behind before the chunks rendered
        ahead of them (a sequential read of a view larger than the cache keeps its read-ahead).
        Never waits (skipped when the lock is busy)."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            if (view.vid, i) in self.kept:
                self.kept.move_to_end((view.vid, i), last=False)
        finally:
            self.lock.release()

    def _start(
        self, view: View, ix: ChunkIndex, i: int, evict: bool
    ) -> tuple[Future[R.ChunkResult] | None, bool]:
        """``(render, kept)``: the render of chunk ``i`` under way for reads, else a new one
        with its room taken in the bound (evicting least recently used renders when
        ``evict``), or ``(None, True)`` when the cache holds the chunk, ``(None, False)`` when
        there is no room for it. Its file is counted when it lands (:meth:`_landed`)."""
        end = ix.byte_at[i + 1]
        rkey = (view.vid, i, end)
        with self.lock:
            job = self.rendering.get(rkey)
            if job is not None:
                return job[0], False
            if self._current(view, ix, i) is not None:
                return None, True
        ids, units, qoffs = view.chunk_units(ix, i)
        length = ix.byte_at[i + 1] - ix.byte_at[i]  # sized: its lines take exactly that
        room = on_disk(length)
        others = self.budget.is_other()
        if evict:
            try:
                self.budget.take(room, others, view.what, keep=(view.vid, i))
            except OSError:
                return None, False
        elif not self.budget.try_take(room, others):
            return None, False
        try:
            with self.lock:
                job = self.rendering.get(rkey)
                if job is not None or self._current(view, ix, i) is not None:
                    self.budget.give(room, others)
                    return (job[0] if job else None), job is None
                path = self._new_path()
                fut = view.render(ids, units, qoffs, (path, length))
                self.rendering[rkey] = (fut, room, others, path)
        except BaseException:
            self.budget.give(room, others)
            raise
        fut.add_done_callback(lambda f: self._landed(view, rkey, f))
        return fut, False

    def _landed(self, view: View, rkey: tuple[int, int, int], fut: Future[R.ChunkResult]) -> None:
        """A render for reads is over: its file kept when it is still the chunk the view's
        index has (else deleted), its reservation given back. Runs in the pool's thread, or
        in the reader's."""
        with self.lock:
            job = self.rendering.get(rkey)
            if job is None or job[0] is not fut:
                return
            del self.rendering[rkey]
            _fut, room, others, path = job
            with self.budget.landing(room, others):
                written = not fut.cancelled() and fut.exception() is None and fut.result().written
                vid, i, end = rkey
                if written and vid == view.vid and not view.dropped:
                    self._keep(view, i, end, path, fut.result().length, others)
                elif written:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)

    def render_for_read(self, view: View, ix: ChunkIndex, i: int) -> bytes | None:
        """Render chunk ``i`` for a read and wait for it: None once its file is kept (read it
        with :meth:`read`), or its bytes when the cache has no room for it (served from
        memory, not kept: at most :data:`CHUNK_BYTES`, or one line). Raises the render's
        error (StoreError on damage, BrokenProcessPool when its worker died), OSError(EIO)
        when its lines no longer fit the length the index has (the store changed)."""
        fut, kept = self._start(view, ix, i, evict=True)
        if kept:
            return None
        if fut is None:  # no room even after evicting: rendered into memory for this read
            return view.render(*view.chunk_units(ix, i), None).result().data
        written = fut.result().written
        self._landed(view, (view.vid, i, ix.byte_at[i + 1]), fut)  # before its callback
        if not written:
            raise OSError(errno.EIO, f"{view.what}: the store changed under the view")
        return None

    def wants_ahead(self, view: View, ix: ChunkIndex, i: int) -> bool:
        """Whether a sequential reader at chunk ``i`` should start the next chunks (the one
        half the read-ahead away is neither kept nor under way). Never waits."""
        j = min(i + max(1, self.AHEAD_PER_WORKER * self.parts.workers // 2), ix.chunks - 1)
        if j <= i:
            return False
        return (view.vid, j) not in self.kept and (
            view.vid,
            j,
            ix.byte_at[j + 1],
        ) not in self.rendering

    def read_ahead(self, view: View, ix: ChunkIndex, i: int) -> None:
        """Start the renders of the chunks after ``i`` (as many as keep the workers busy)
        that the cache neither holds nor renders, while there is room (worker threads)."""
        last = min(ix.chunks, i + 1 + self.AHEAD_PER_WORKER * self.parts.workers)
        for j in range(i + 1, last):
            try:
                fut, kept = self._start(view, ix, j, evict=True)
            except Exception:  # noqa: BLE001 - the read of that chunk reports it
                return
            if fut is None and not kept:
                return  # no room

    def size_chunk(
        self, view: View, ids: QueueIds, units: np.ndarray, qoffs: np.ndarray
    ) -> tuple[Future[R.ChunkResult], tuple[int, str] | None]:
        """Start the sizing render of a chunk (``View._size``): written to a file of its own
        when the bound has room for it without evicting anything; returns the render and
        ``(room taken, file)``, or None for a render that keeps nothing."""
        room = on_disk(R.chunk_room(view.kind, units))
        others = self.budget.is_other()
        keep = (room, self._new_path()) if self.budget.try_take(room, others) else None
        try:
            out = (keep[1], room) if keep else R.SIZE_ONLY
            fut = view.render(ids, units, qoffs, out, sizing=True)
        except BaseException:
            if keep:
                self.budget.give(room, others)
            raise
        return fut, keep

    def sized(
        self,
        view: View,
        ix: ChunkIndex,
        fut: Future[R.ChunkResult],
        keep: tuple[int, str] | None,
        chunk: ChunkUnits,
    ) -> R.ChunkResult:
        """The result of :meth:`size_chunk`'s render of a planned chunk (``chunk``: its
        ``(queue_ids, units, queue offsets)``; raises its error), its file kept as the next
        chunk of ``ix`` when it was written and is not to be cut (no line ends returned), the
        room given back. A worker that died: sized once more, keeping nothing. Called in
        chunk order, before the chunk joins ``ix`` (the index being built)."""
        from concurrent.futures.process import BrokenProcessPool

        others = self.budget.is_other()
        try:
            try:
                result = fut.result()
            except BrokenProcessPool:
                if keep:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(keep[1])
                    self.budget.give(keep[0], others)
                    keep = None
                result = view.render(*chunk, R.SIZE_ONLY, sizing=True).result()
            if keep and result.written and result.ends is None:
                with self.lock, self.budget.landing(keep[0], others):
                    end = ix.size + result.length
                    self._keep(view, ix.chunks, end, keep[1], result.length, others)
                keep = None  # its reservation ended as it landed
            elif keep and result.written:  # cut into chunks: its file is none of them
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(keep[1])
            return result
        finally:
            if keep:
                self.budget.give(keep[0], others)

    def abandon(self, fut: Future[R.ChunkResult], keep: tuple[int, str] | None) -> None:
        """A sizing render no longer wanted: its file deleted once it is over."""
        fut.cancel()
        with contextlib.suppress(Exception):
            fut.exception()
        if keep:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(keep[1])
            self.budget.give(keep[0], self.budget.is_other())

    def forget(self, view: View, i: int) -> None:
        """Drop chunk ``i`` of ``view`` (cut again)."""
        with self.lock:
            if (view.vid, i) in self.kept:
                self._unkeep((view.vid, i))

    def forget_view(self, view: View) -> None:
        """Drop every kept chunk of ``view``; renders under way are deleted as they land."""
        with self.lock:
            for key in [k for k in self.kept if k[0] == view.vid]:
                self._unkeep(key)

    def evict_one(self, others_only: bool, keep: object = None) -> bool:
        """Delete the least recently used kept chunk (charged to other users only when
        ``others_only``; never ``keep``). False when there is none."""
        with self.lock:
            for key, got in self.kept.items():
                if key == keep or (others_only and not got[4]):
                    continue
                self._unkeep(key)
                return True
        return False

    def close(self) -> None:
        """Delete every kept chunk."""
        with self.lock:
            for key in list(self.kept):
                self._unkeep(key)


class ViewCache:
    """The decoded views of a mount: one :class:`View` per ``(kind, topic)`` and ``(kind,
    topic, queueId)`` used, created on first use (their indexes kept, :data:`VIEWS_KEPT` at
    most), their rendered chunks (:class:`ChunkCache`) and ``view/`` parts (:class:`PartCache`)
    under ``cache_dir`` in one bound (``--cache-size``, :class:`RenderBudget`)."""

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
        #: the one bound of everything rendered (chunks here, parts in PartCache)
        self.budget = RenderBudget(self.cache_size)
        self.parts = PartCache(store, cache_dir, self.cache_size, workers, self.budget)
        self.chunks = ChunkCache(cache_dir, self.parts, self.budget)
        self._views: dict[tuple, View] = {}  # key -> view, least recently used first
        self.lock = threading.Lock()
        self._n = 0
        self.budget.on_disk = self.bytes_on_disk
        self.budget.evict_one = self.evict_one

    def new_view_id(self) -> int:
        """A number no other view of this cache has (names its chunk files)."""
        self._n += 1
        return self._n

    def bytes_on_disk(self, others: bool) -> int:
        """Bytes of the renders (chunks and parts) charged to other users or to the owner."""
        return self.chunks.bytes_of(others) + self.parts.bytes_of(others)

    def evict_one(self, others_only: bool, keep: object = None) -> bool:
        """Evict the least recently used rendered chunk, else ``view/`` part (only one
        charged to other users when ``others_only``; never ``keep``). False when none."""
        return self.chunks.evict_one(others_only, keep) or self.parts.evict_one(others_only, keep)

    def _get(self, key: tuple, queue_id: int | None) -> View:
        others = self.budget.is_other()
        with self.lock:
            v = self._views.pop(key, None)
            if v is None:
                v = View(self, key, queue_id)
                v.for_others = others
            elif not others:
                v.for_others = False
            self._views[key] = v  # most recently used
            drop: list[tuple] = []
            gone: list[View] = []
            if len(self._views) > VIEWS_KEPT:
                for k, old in self._views.items():
                    if len(self._views) - len(drop) <= VIEWS_KEPT:
                        break
                    if not old.opens and k != key and not old.lock.locked():
                        drop.append(k)
                gone = [self._views.pop(k) for k in drop]
        for old in gone:  # outside the lock: forgetting takes the chunks' lock
            old.dropped = True
            self.chunks.forget_view(old)
        return v

    def peek(self, *key: str | int) -> View | None:
        """The view of ``key`` (``(kind, topic)`` or ``(kind, topic, queueId)``) when it
        exists and is up to date, else None. Never blocks: the FUSE layer calls it on the
        trio loop."""
        v = self._views.get(key)
        if v is not None and v.up_to_date():
            return v
        return None

    def queue(self, kind: str, topic: str, queue_id: int, render: Renderer) -> View:
        """The synced view of one queue, ``kind`` naming ``render`` (``messages``,
        ``bodies``)."""
        v = self._get((kind, topic, queue_id), queue_id)
        v.sync()
        return v

    def topic(self, kind: str, topic: str, render: Renderer) -> View:
        """The synced view of a topic."""
        v = self._get((kind, topic), None)
        v.sync()
        return v

    def drop_topic(self, topic: str) -> None:
        """Forget every view, rendered chunk and part of ``topic`` (deleted: ``rmdir
        topics/T``, or a topic created again later, which must not show the old renders). A
        handle still open on a view of it reads EIO past what its reader already has."""
        with self.lock:
            gone = [self._views.pop(k) for k in [k for k in self._views if k[1] == topic]]
        for v in gone:
            v.dropped = True
            self.chunks.forget_view(v)
        self.parts.drop_topic(topic)

    def close(self) -> None:
        """Delete every cache file (and stop the render workers)."""
        self.parts.close()
        self.chunks.close()
        with self.lock:
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


def worker_context() -> ForkServerContext:
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


def exit_with(pid: int) -> None:
    """A render worker's initializer: exit the moment process ``pid`` (the daemon) ends, however
    it ends (``kill -9`` included). Without it a worker outlives a daemon killed with -9 for
    ever: ``ProcessPoolExecutor``'s workers wait on a call queue whose write end each of them
    holds too, so it never ends, and the forkserver, which waits for its children, stays
    with them. A thread waits on the daemon's pidfd (Linux 5.3+; polled every second where
    there is none)."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(0)  # gone already
    except OSError:
        fd = -1

    def watch() -> None:
        if fd >= 0:
            poll = select.poll()  # any descriptor number (select() stops at 1024)
            poll.register(fd, select.POLLIN)
            poll.poll()
        else:
            while True:
                time.sleep(1.0)
                try:
                    os.kill(pid, 0)
                except (ProcessLookupError, PermissionError):  # gone (its pid reused)
                    break
        os._exit(0)

    threading.Thread(target=watch, name="rmqfs-exit-with-daemon", daemon=True).start()


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

    def __init__(self, key: PartKey) -> None:
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


#: ends of a part's name kept per part that holds only some of its range (PartCache.listed):
#: a name handed out before the queue grew this many times more is no longer found
LISTED_ENDS = 256
#: parts whose size the cache keeps, every state (PartCache.parts), before the entries of
#: evicted and failed ones are dropped, oldest first
PARTS_KEPT = 65536


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
    thread; :meth:`known` and :meth:`open_cached` (a READY part) never wait: the trio loop
    calls them.
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
        directory = store.commitlog.files.directory
        # what the render workers open (a store in object storage: its source's spec too)
        self.commitlog_dir: R.CommitLogRef = (
            directory if store.source.local else (store.source.spec, directory)
        )
        self.lock = threading.Lock()
        #: notified (under :attr:`lock`) whenever a part leaves RENDERING
        self.changed = threading.Condition(self.lock)
        self.parts: dict[PartKey, Part] = {}  # key -> its Part, every state
        self.ready: dict[PartKey, Part] = {}  # the READY parts, least recently used first
        self.latest: dict[tuple[str, int, int], int] = {}  # (topic, queueId, first) -> newest end
        #: (topic, queueId, start) -> the ends listings handed out for a part that holds only
        #: some of its range (its name's ``-<end>``), the newest :data:`LISTED_ENDS` kept: the
        #: names a lookup finds besides the current one (:meth:`was_listed`)
        self.listed: dict[tuple[str, int, int], OrderedDict[int, None]] = {}
        # held for a few dict operations only (never the render lock: the trio loop asks)
        self._listed_lock = threading.Lock()
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

    def state(self, key: PartKey) -> PartState | None:
        """The :class:`PartState` of ``key``, or None for a part never rendered here."""
        p = self.parts.get(key)
        return None if p is None else p.state

    def evict_one(self, others_only: bool, keep: object = None) -> bool:
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

    def _path(self, key: PartKey) -> str:
        import hashlib

        h = hashlib.sha1(repr(key).encode()).hexdigest()
        return os.path.join(self.dir, f"part-{h}.parquet")

    def _pool_(self) -> ProcessPoolExecutor:
        """The worker pool (caller holds :attr:`lock`), started when none runs: workers fork
        from the forkserver (:func:`worker_context`) in milliseconds, so a pool shut down
        while idle (:meth:`_shut_when_idle`) costs the next render nothing noticeable."""
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=worker_context(),
                initializer=exit_with,
                initargs=(os.getpid(),),
            )
            if self._idle_watch is None:
                self._idle_watch = threading.Thread(
                    target=self._shut_when_idle, name="rmqfs-pool-idle", daemon=True
                )
                self._idle_watch.start()
        return self._pool

    def _started(self, fut: Future[_T]) -> Future[_T]:
        """Count a submitted task (caller holds :attr:`lock`) until it is over."""
        self._tasks += 1
        self._last_task = time.monotonic()
        return fut

    def _submit(self, fn: Callable[..., _T], *args: object) -> Future[_T]:
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

    def _task_over(self, _fut: Future[_T]) -> None:
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

    def _units(
        self, topic: str, queue_id: int, first: int, end: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(units, queue offsets)`` of the part ``[first, end)`` (``queue_units``); OSError
        EIO when the queue lacks some."""
        from rmqfs.engine.read.columnar import queue_units

        units, qoffs = queue_units(self.store.consume_queue(topic, queue_id), first, end)
        if first + len(units) < end:
            raise OSError(errno.EIO, "view/ part: ConsumeQueue units missing")
        return units, qoffs

    def submit_task(self, fn: Callable[..., _T], *args: object) -> Future[_T]:
        """Run ``fn(*args)`` in a worker process (a JSON view chunk): its Future."""
        with self.lock:
            if self._closed:
                raise OSError(errno.EIO, "the mount is closing")
            fut = self._submit(fn, *args)
        fut.add_done_callback(self._task_over)
        return fut

    def note_listed(self, keys: Iterable[PartKey]) -> None:
        """A listing handed out the names of ``keys``: their ends stay found by
        :meth:`was_listed` (the newest :data:`LISTED_ENDS` of each part), so a job that listed a
        growing part reads it after the queue grew."""
        with self._listed_lock:
            for topic, queue_id, start, end in keys:
                ends = self.listed.setdefault((topic, queue_id, start), OrderedDict())
                ends[end] = None
                ends.move_to_end(end)
                while len(ends) > LISTED_ENDS:
                    ends.popitem(last=False)

    def was_listed(self, key: PartKey) -> bool:
        """Whether a listing handed out the name of ``key`` (:meth:`note_listed`). Never waits
        for long (the trio loop calls it)."""
        with self._listed_lock:
            ends = self.listed.get(key[:3])
            return ends is not None and key[3] in ends

    def known(self, key: PartKey) -> tuple[int, int, int] | None:
        """``(size, mtime ms, rows)`` of a part rendered before (evicted or not), or None.
        Never waits (the trio loop calls it)."""
        p = self.parts.get(key)
        return None if p is None else p.meta

    def _start(self, key: PartKey, reader: bool) -> Part:
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
                    if len(self.parts) > PARTS_KEPT:
                        self._forget_old_parts()
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
        render.add_done_callback(lambda f: self._finish(p, f, est, others))
        return p

    def _finish(self, p: Part, fut: Future[tuple[int, int, int]], est: int, others: bool) -> None:
        """The render ``fut`` of ``p`` is over: RENDERING -> READY (its file counted, a
        shorter render of the same part superseded), or -> FAILED with the render's error
        (or EIO when the mount closed or the part's topic was deleted meanwhile); then the
        reservation of ``est`` bytes is given back. Wakes every reader waiting on
        :attr:`changed`. Runs in the pool's thread (or the submitter's)."""
        with self.lock, self.budget.landing(est, others):
            try:
                self._record(p, fut, others)
            except BaseException as exc:  # the readers must wake, whatever happened
                if p.state is PartState.RENDERING:
                    p.error = exc
                    p.to(PartState.FAILED)
                raise
            finally:
                self.changed.notify_all()

    def _record(self, p: Part, fut: Future[tuple[int, int, int]], others: bool) -> None:
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

    def _forget_old_parts(self) -> None:
        """Drop the entries of parts neither READY nor RENDERING, oldest first, until a tenth
        under :data:`PARTS_KEPT` (caller holds :attr:`lock`): what a part that grew left
        behind (its shorter renders' sizes), bounded as the queues grow for days."""
        for key in list(self.parts):
            if len(self.parts) <= PARTS_KEPT * 9 // 10:
                return
            p = self.parts[key]
            if p.state not in (PartState.READY, PartState.RENDERING) and not p.readers:
                del self.parts[key]

    def prefetch(self, keys: Iterable[PartKey]) -> None:
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
            for short in [k for k in self.latest if k[0] == topic]:
                del self.latest[short]
            with self._listed_lock:
                for short in [k for k in self.listed if k[0] == topic]:
                    del self.listed[short]

    def _used(self, p: Part) -> None:
        """``p`` was just opened (caller holds :attr:`lock`): most recently used, and the
        owner's from now on when the owner (or root) uses it."""
        self.ready[p.key] = self.ready.pop(p.key)
        if p.others and not self.budget.is_other():
            p.others = False
            self.others_total -= p.disk

    def open_cached(self, key: PartKey) -> int | None:
        """:meth:`open` when it needs not wait: an fd of the part when it is READY and the
        lock is free (then it is the most recently used), else None."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            p = self.parts.get(key)
            if p is None or p.state is not PartState.READY:
                return None
            fd = os.open(self._path(key), os.O_RDONLY)
            self._used(p)  # only once it answers
            return fd
        finally:
            self.lock.release()

    def open(self, key: PartKey) -> int:
        """An fd of the rendered part (rendering it first when needed: the caller waits
        while the part is RENDERING); the file stays readable through the fd after an
        eviction. Raises OSError(EIO) when the render fails on damage (noted in the store:
        status.json, one warning line), when the mount is closing, or after
        :attr:`OPEN_RENDERS` renders that ended in a dead worker or a dropped part. Worker
        threads only (it waits for the lock and the render)."""
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
                if not error.transient:
                    self._note_damage(key, error)
                raise OSError(errno.EIO, f"view/ part {key}: {error}") from None
            raise error
        raise OSError(errno.EIO, f"view/ part {key}: not rendered")

    def _note_damage(self, key: PartKey, exc: StoreError) -> None:
        """Note the damage a render of ``key`` met in the store (``note_damage``)."""
        topic, queue_id, first, end = key
        from rmqfs.engine.read.columnar import queue_units

        units, qoffs = queue_units(self.store.consume_queue(topic, queue_id), first, end)
        if first + len(units) < end:  # as _units: none when some are missing
            units, qoffs = units[:0], qoffs[:0]
        note_damage(self.store, topic, queue_id, units, qoffs, exc)

    def info(self, key: PartKey) -> tuple[int, int, int]:
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
