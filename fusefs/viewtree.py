"""``view/``: the decoded messages laid out for Spark (docs/spark.md).

``view/topic=<topic>/queue=<queueId>/part-<20-digit first queue offset>.parquet`` with ``%``
(and the other characters Spark unescapes) escaped as ``%XX`` (a name over 255 bytes
shortened: :func:`topic_dir_name`), and nothing else: Polars reads a
directory only when every file in it is Parquet (it skips no ``_``/``.`` names, unlike Spark's
and pyarrow's Hive-style listing), so the DDL of ``spark.read.parquet(view)``
(``engine.read.schema.DATASOURCE_DDL``) is ``view.ddl`` beside ``view/`` (:func:`view_ddl_file`).
A part covers a fixed range of queue offsets (``part_messages`` of them, at multiples of it); a
part that holds only some of its range (the queue's last, still growing, or the first, whose
oldest messages expired) is named by the offsets it holds, ``part-<start>-<end>.parquet``
(:func:`part_name`), so the bytes behind a name never change: a job that listed a part reads
the part it listed, whatever producers add meanwhile (a name listed once stays readable until
its messages expire). It holds the columns
``engine.read.schema.PART_COLUMNS`` (``body`` BINARY; ``topic`` and ``queue`` are left to the
directory names), zstd-compressed. Parts render in worker processes (``views.PartCache``).
"""

from __future__ import annotations

import errno
import os
import re

from rmqfs.engine.read.schema import DATASOURCE_DDL
from rmqfs.engine.read.viewnames import (
    NAME_MAX,
    TOPIC_DIR,
    topic_dir_name,
    unescape_partition_value,
)
from rmqfs.engine.service.validation import parse_decimal

from .base import (
    RO_FILE,
    Context,
    Dir,
    Handle,
    Node,
    Stat,
    StaticFile,
    check_read_only_open,
    ms_to_ns,
    pread_cached,
    present,
)

_PART_NAME = re.compile(r"part-([0-9]{20})(?:-([0-9]{20}))?\.parquet")


def view_ddl_file(ctx: Context, path: str) -> StaticFile:
    """``view.ddl``: the DDL of ``spark.read.parquet(MNT/view)`` (``queue INT``)."""
    return StaticFile(ctx, path, (DATASOURCE_DDL + "\n").encode())


class ViewRootDir(Dir):
    """``view/``: one ``topic=<escaped topic>`` directory per topic with messages
    (:func:`topic_dir_name`), Hive-style partitions for ``spark.read.parquet``.

    Errnos: ENOENT for any other name (a negative entry the kernel keeps for a name that can
    never be a child: :meth:`never_child`); EROFS or EPERM for mkdir/rmdir.
    Threads: lookup, readdir and getattr answer on the trio loop (:meth:`child_cached`,
    :meth:`list_cached` and :meth:`stat_cached`: the store's in-memory topics and offsets)."""

    def stat(self) -> Stat:
        """:meth:`Dir.stat` (two stats of config files the store itself keeps writing)."""
        return Dir.stat(self)

    def stat_cached(self) -> Stat:
        """:meth:`stat`, on the trio loop."""
        return self.stat()

    def never_child(self, name: str) -> bool:
        """Any name not ``topic=...``."""
        return not name.startswith(TOPIC_DIR)

    def list_cached(self) -> list[str]:
        """:meth:`list` (in memory), on the trio loop."""
        return self.list()

    def child_cached(self, name: str) -> Node:
        """:meth:`child` (in memory), on the trio loop; ENOENT for no such child."""
        return present(self.child(name))

    def list(self) -> list[str]:
        """``topic=<escaped topic>`` of every topic with messages (in memory)."""
        s = self.ctx.store
        return [
            topic_dir_name(t)
            for t in s.topic_names()
            if any(s.max_offset(t, q) > s.min_offset(t, q) for q in s.queue_ids(t))
        ]

    def child(self, name: str) -> Node | None:
        """The :class:`ViewTopicDir` of ``name`` (a shortened name mapped back), or None."""
        if not name.startswith(TOPIC_DIR):
            return None
        store = self.ctx.store
        topic: str | None = unescape_partition_value(name[len(TOPIC_DIR) :])
        if topic is None or not store.has_topic(topic) or topic_dir_name(topic) != name:
            # a shortened name (topic_dir_name): only a name of NAME_MAX bytes can be one
            if len(name.encode("utf-8", "surrogateescape")) < NAME_MAX - 3:
                return None
            topic = next((t for t in store.topic_names() if topic_dir_name(t) == name), None)
            if topic is None:
                return None
        return ViewTopicDir(self.ctx, self.sub(name), topic)


class ViewTopicDir(Dir):
    """``view/topic=<t>/``: one ``queue=<queueId>`` directory per queue with messages.
    Listing it queues the renders of every part (``PartCache.prefetch``).

    Errnos: ENOENT for any other name (kept by the kernel for a name that is not
    ``queue=<n>``: :meth:`never_child`); EROFS or EPERM for mkdir/rmdir.
    Threads: lookup and getattr answer on the trio loop; readdir too when every part's size is
    known (:meth:`list`), else it lists (and prefetches) in a worker thread."""

    def __init__(self, ctx: Context, path: str, topic: str) -> None:
        super().__init__(ctx, path)
        self.topic = topic

    stat = ViewRootDir.stat
    stat_cached = ViewRootDir.stat_cached

    def never_child(self, name: str) -> bool:
        """Any name not ``queue=<n>``."""
        return re.fullmatch(r"queue=[0-9]+", name) is None

    def _queues(self) -> tuple[list[int], list[tuple]]:
        """The queues with messages, and the keys of their parts, first parts first."""
        s = self.ctx.store
        queues = [
            q
            for q in s.queue_ids(self.topic)
            if s.max_offset(self.topic, q) > s.min_offset(self.topic, q)
        ]
        spans = [ViewQueueDir(self.ctx, "", self.topic, q).spans() for q in queues]
        keys = [
            (self.topic, q, *f[i])
            for i in range(max(map(len, spans), default=0))
            for q, f in zip(queues, spans)
            if i < len(f)
        ]
        return queues, keys

    def list_cached(self) -> list[str] | None:
        """:meth:`list` when every part's size is known (nothing to prefetch), else None."""
        queues, keys = self._queues()
        known = self.ctx.views.parts.known
        if not all(known(k) for k in keys):
            return None
        return [f"queue={q}" for q in queues]

    def list(self) -> list[str]:
        """``queue=<q>`` of every queue with messages; prefetches every part's render."""
        queues, keys = self._queues()
        known = self.ctx.views.parts.known
        if not all(known(k) for k in keys):
            # A reader of the topic (Spark) lists each queue directory next and stats its
            # parts, one directory after another: queue the renders of every queue's parts
            # now, first parts first, so that the worker pool renders them in parallel.
            self.ctx.views.parts.prefetch(keys)
        return [f"queue={q}" for q in queues]

    def child_cached(self, name: str) -> Node:
        """:meth:`child` (in memory), on the trio loop; ENOENT for no such child."""
        return present(self.child(name))

    def child(self, name: str) -> Node | None:
        """The :class:`ViewQueueDir` of ``queue=<q>``, or None."""
        q = parse_decimal(name[6:]) if name.startswith("queue=") else None
        if q is None or q not in self.ctx.store.queue_ids(self.topic):
            return None
        return ViewQueueDir(self.ctx, self.sub(name), self.topic, q)


class ViewQueueDir(Dir):
    """``view/topic=<t>/queue=<q>/``: one part per ``part_messages`` queue offsets
    (:func:`part_firsts`), named by :func:`part_name`. Listing it queues their renders. A part
    named by the offsets it holds is found by that name as long as they are in the queue (a
    reader that listed it before the queue grew).

    Errnos: ENOENT for any other name (kept by the kernel for a name that is not a part's:
    :meth:`never_child`); EROFS or EPERM for mkdir/rmdir.
    Threads: lookup and getattr answer on the trio loop; readdir too when every part's size is
    known (:meth:`list`), else it lists (and prefetches) in a worker thread."""

    def __init__(self, ctx: Context, path: str, topic: str, queue_id: int) -> None:
        super().__init__(ctx, path)
        self.topic, self.queue_id = topic, queue_id

    def spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` queue offsets of each part of this queue, as the store stands."""
        s = self.ctx.store
        lo, hi = s.min_offset(self.topic, self.queue_id), s.max_offset(self.topic, self.queue_id)
        p = self.ctx.part_messages
        return [part_span(first, lo, hi, p) for first in part_firsts(lo, hi, p)]

    stat = ViewRootDir.stat
    stat_cached = ViewRootDir.stat_cached

    def never_child(self, name: str) -> bool:
        """Any name not ``part-<20 digits>[-<20 digits>].parquet``."""
        return _PART_NAME.fullmatch(name) is None

    def _list(self, prefetch: bool) -> list[str] | None:
        """The parts' names, handed out (``PartCache.note_listed``); a part whose size is not
        known yet: its render queued with ``prefetch`` (a listing is what Spark and ``ls -l``
        do before a stat of every part: the worker pool renders them in parallel), else
        None."""
        spans = self.spans()
        keys = [(self.topic, self.queue_id, a, b) for a, b in spans]
        parts = self.ctx.views.parts
        if not all(parts.known(k) for k in keys):
            if not prefetch:
                return None
            parts.prefetch(keys)
        parts.note_listed(keys)
        return [part_name(a, b, self.ctx.part_messages) for a, b in spans]

    def list_cached(self) -> list[str] | None:
        """:meth:`list` when every part's size is known (nothing to prefetch), else None."""
        return self._list(prefetch=False)

    def list(self) -> list[str]:
        """The parts' names; prefetches their renders."""
        names = self._list(prefetch=True)
        assert names is not None  # (with prefetch)
        return names

    def child_cached(self, name: str) -> Node:
        """:meth:`child` (in memory), on the trio loop; ENOENT for no such child."""
        return present(self.child(name))

    def child(self, name: str) -> Node | None:
        """The :class:`ViewPartFile` a part name names, or None: a whole part of the grid, or a
        part that holds only some of its range under the name a listing gives it now or gave
        it before the queue grew (``PartCache.was_listed``; the start must be the one the
        queue gives it now). Other offsets name nothing, so no reader makes the daemon render
        parts no listing named."""
        m = _PART_NAME.fullmatch(name)
        if not m:
            return None
        p = self.ctx.part_messages
        a = int(m.group(1))
        b = a + p if m.group(2) is None else int(m.group(2))
        s = self.ctx.store
        lo, hi = s.min_offset(self.topic, self.queue_id), s.max_offset(self.topic, self.queue_id)
        if not (lo <= a < b <= hi and a // p == (b - 1) // p) or part_name(a, b, p) != name:
            return None
        start, end = part_span(a - a % p, lo, hi, p)
        if a != start:
            return None  # (not the start this part has: a name no listing gives)
        key = (self.topic, self.queue_id, a, b)
        if b != end and m.group(2) is not None and not self.ctx.views.parts.was_listed(key):
            return None
        return ViewPartFile(self.ctx, self.sub(name), self.topic, self.queue_id, a, b)


def part_firsts(lo: int, hi: int, part_messages: int) -> list[int]:
    """The view's part grid: the first queue offset of each part of a queue holding offsets
    ``[lo, hi)``; parts start at multiples of ``part_messages``."""
    p = part_messages
    return [k * p for k in range(lo // p, (hi - 1) // p + 1)] if hi > lo else []


def part_span(first: int, lo: int, hi: int, part_messages: int) -> tuple[int, int]:
    """``(start, end)`` queue offsets the part at ``first`` holds of a queue holding
    ``[lo, hi)``: from ``lo`` when older messages expired, to ``hi`` while it grows."""
    return max(first, lo), min(first + part_messages, hi)


def part_name(start: int, end: int, part_messages: int) -> str:
    """The file name of the part holding queue offsets ``[start, end)``:
    ``part-<start>.parquet`` (20 digits) for a whole part of the grid (``part_messages``
    offsets from a multiple of it), which never changes, else ``part-<start>-<end>.parquet``:
    every name stands for bytes that never change (a part's bytes are a function of its
    offsets), so a reader that listed a growing part reads what it listed."""
    if start % part_messages == 0 and end - start == part_messages:
        return f"part-{start:020d}.parquet"
    return f"part-{start:020d}-{end:020d}.parquet"


#: The size a part that cannot be rendered reports (:meth:`ViewPartFile.stat`): not 0, which
#: readers take for an empty part.
UNREADABLE_SIZE = 1


class ViewPartFile(Node):
    """``view/topic=<t>/queue=<q>/part-<start>[-<end>].parquet``: the Parquet file of queue
    offsets ``[start, end)`` (:func:`part_name`).

    Columns: ``engine.read.schema.PART_COLUMNS`` (``topic`` and ``queue`` come from the path).
    mtime: store time of the part's last message. A part's bytes never change (the same bytes,
    size and mtime after an eviction or a remount): a growing queue's last part gets a new
    name as it grows.

    Errnos: EACCES for an open for writing; EIO when its render fails (damaged or missing
    ConsumeQueue units: its messages expired since it was looked up) or the mount is closing.
    Threads: lookup, getattr and open answer on the trio loop when the part is rendered
    (:meth:`stat_cached`, :meth:`open_cached`), else wait for its render in a worker thread; reads answer
    on the trio loop from the page cache (``PartHandle.read_cached``), else in a worker thread;
    release closes its descriptor on the loop (``cheap_close``)."""

    def __init__(
        self, ctx: Context, path: str, topic: str, queue_id: int, start: int, end: int
    ) -> None:
        super().__init__(ctx, path)
        self.topic, self.queue_id, self.start, self.end = topic, queue_id, start, end

    def _key(self) -> tuple:
        return (self.topic, self.queue_id, self.start, self.end)

    def _stat(self, info: tuple) -> Stat:
        size, mtime_ms, _ = info
        return Stat(RO_FILE, size, ms_to_ns(mtime_ms) or self.ctx.mount_time_ns, live=False)

    def stat_cached(self) -> Stat | None:
        """:meth:`stat` when the part's render is known (its size kept), else None."""
        key = self._key()
        info = self.ctx.views.parts.known(key)
        return None if info is None else self._stat(info)

    def stat(self) -> Stat:
        """The rendered part's size and mtime (waits for its render). A part that cannot be
        rendered (EIO: a damaged record, the mount closing) still answers, with
        :data:`UNREADABLE_SIZE` bytes, kept by the kernel for no time, and its reads fail with
        EIO, as a file with unreadable blocks does: a stat that failed read as an empty file to
        Spark (Java's ``File.length()`` is 0 then, and empty files are skipped), and a report
        over a damaged queue left its rows out without a word."""
        key = self._key()
        try:
            return self._stat(self.ctx.views.parts.info(key))
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            return Stat(RO_FILE, UNREADABLE_SIZE, self.ctx.mount_time_ns, attr_timeout=0.0)

    def open_cached(self, flags: int, uid: int | None) -> Handle | None:
        """:meth:`open` when the part is READY (:meth:`fusefs.views.PartCache.open_cached`),
        else None. EACCES for writing."""
        check_read_only_open(flags)
        fd = self.ctx.views.parts.open_cached(self._key())
        return None if fd is None else PartHandle(fd)

    def open(self, flags: int) -> Handle:
        """A :class:`PartHandle` of the rendered part (waits for its render). EACCES for
        writing."""
        check_read_only_open(flags)
        return PartHandle(self.ctx.views.parts.open(self._key()))


class PartHandle(Handle):
    """An open part: reads its rendered file through an fd of its own (an eviction unlinks
    the file, the fd stays readable)."""

    keep_cache = True
    cheap_close = True  # release closes the fd; nothing to flush

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, offset: int, length: int) -> bytes:
        """``pread`` of the rendered file."""
        return os.pread(self.fd, length, offset)

    def read_cached(self, offset: int, length: int) -> bytes | None:
        """:meth:`read` when its pages are in the page cache (:func:`fusefs.base.pread_cached`),
        else None."""
        got = pread_cached(self.fd, length, offset)
        return None if got is None else bytes(got)

    def release(self) -> None:
        """Close the descriptor."""
        os.close(self.fd)
