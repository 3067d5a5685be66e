"""The mounted tree (docs/mount.md) as plain objects, without pyfuse3.

Every path maps to a :class:`Node`. Directories answer :meth:`Node.list` (readdir) and
:meth:`Node.child` (lookup, which may find entries readdir does not list, such as
``by-offset/<n>``); files answer :meth:`Node.stat` and open into handles. Errors are
:class:`FsError` carrying an errno; the pyfuse3 layer turns them into ``FUSEError``.

Methods here may block on disk I/O or rendering: the filesystem layer calls them from worker
threads, never on the trio loop.
"""

from __future__ import annotations

import bisect
import errno
import functools
import itertools
import logging
import os
import re
import stat
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from rmqfs.engine import errors as E
from rmqfs.engine.format.message import MAX_PROPERTIES_LENGTH, MessageRecord
from rmqfs.engine.live.progress import consumer_progress, diff_total
from rmqfs.engine.live.status import store_status
from rmqfs.engine.read.jsonline import message_from_json, parse_json_line, plain_fields
from rmqfs.engine.read.scheduled import waiting_refs
from rmqfs.engine.service.storetree import lstat_beneath, open_beneath
from rmqfs.engine.service.validation import (
    check_send_topic,
    check_topic_creatable,
    parse_decimal,
    tags_keys_clean,
)
from rmqfs.engine.store import Message

from . import render as R
from .base import (
    DIR_MODE,
    RO_DIR,
    RO_FILE,
    RW_FILE,
    WO_FILE,
    BytesHandle,
    Context,
    Dir,
    FsError,
    GeneratedFile,
    Handle,
    Node,
    Stat,
    StaticFile,
    check_read_only_open,
    fs_error,
    ms_to_ns,
    pread_cached,
)
from .snapshots import SnapshotsDir
from .viewtree import ViewRootDir, view_ddl_file

if TYPE_CHECKING:  # annotations only
    from rmqfs.engine.format.config import TopicConfig
    from rmqfs.engine.format.source import StoreSource

    from .views import View

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Root

README = """rmqfs: an Apache RocketMQ store, mounted
=========================================

Store: {root}

topics/<topic>/produce          append lines: each line becomes one message
topics/<topic>/produce.jsonl    append JSON lines: {{"body": ..., "tags": ..., "keys": [...]}}
topics/<topic>/messages.jsonl   every message of the topic, decoded, in CommitLog order
topics/<topic>/bodies.txt       the bodies only, one per line
topics/<topic>/scheduled.jsonl  messages waiting for delivery to the topic (timer, delay
                                level), each with deliverTimestamp, in delivery order
topics/<topic>/topic.json       the topic's config (topics.json); write JSON to change it
topics/<topic>/keys/<key>       messages with this key (IndexFile lookup)
topics/<topic>/<queueId>/       messages.jsonl, bodies.txt, offsets.json, produce,
                                by-offset/<n>, by-time/<epochMillis>
groups/<group>/<topic>/<queueId>/offset        the committed offset; echo N > offset commits
groups/<group>/<topic>/<queueId>/pending.jsonl messages from the committed offset on
groups/<group>/progress.json    brokerOffset, consumerOffset, diff per queue
messages/<msgId>                a message by its offset msgId or UNIQ_KEY
view/                           Spark: topic=<t>/queue=<q>/part-<first offset>[-<end>].parquet
view.ddl                        the schema of view/ as Spark DDL (queue INT)
raw/                            the store's own files, read-only (live: see snapshots/)
snapshots/<name>/               mkdir: a frozen point in time of raw/ + SNAPSHOT.json (crc32c);
                                copy it with tar, rsync or restic; rmdir drops it
status.json                     CommitLog offsets, flush and dispatch lag, segment sizes, counts
refused.jsonl                   your recent refused writes: time, pid, uid, op, path, errno, reason

mkdir topics/<topic> creates a topic; mkdir groups/<group> creates a consumer group;
rmdir deletes them (mqadmin deleteTopic; deleteSubGroup with its offsets). Writing
{{"perm": 4}} (readQueueNums, writeQueueNums, perm, order) to topic.json changes the topic.
Lookups (keys/, by-offset/, by-time/, messages/) are not listed: name what you want.
A write() to a produce file returns once its messages are in the CommitLog; fsync() once
they are on disk; a last line without a newline is stored at close().
Errors: EINVAL bad line/offset/name, EMSGSIZE too big, EACCES topic not writable or
another user writing (only the mounting user writes, unless -o allow_other_write), EROFS
read-only mount, ENOSPC disk full (nothing of the failed write is stored), EPERM chmod,
chown, touch, rm, mv. Why a write of yours was refused: cat refused.jsonl.
"""


class RootDir(Dir):
    """``/``: the mount's root, a fixed set of entries: ``README.txt``, ``status.json``,
    ``refused.jsonl``, ``topics/``, ``groups/``, ``messages/``, ``view/``, ``view.ddl``, ``raw/``,
    ``snapshots/``.

    Errnos: ENOENT for a lookup of any other name; EROFS (read-only mount) or EPERM for mkdir and
    rmdir (:meth:`Node.mkdir`, :meth:`Node.rmdir`).
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def entries(self) -> dict[str, Callable[[], Node]]:
        """The root's fixed entries."""
        c = self.ctx
        return {
            "README.txt": lambda: StaticFile(
                c, "/README.txt", README.format(root=c.location or c.store.root).encode()
            ),
            "status.json": lambda: StatusFile(c, "/status.json"),
            "refused.jsonl": lambda: RefusedFile(c, "/refused.jsonl"),
            "topics": lambda: TopicsDir(c, "/topics"),
            "groups": lambda: GroupsDir(c, "/groups"),
            "messages": lambda: MessagesDir(c, "/messages"),
            "view": lambda: ViewRootDir(c, "/view"),
            "view.ddl": lambda: view_ddl_file(c, "/view.ddl"),
            "raw": lambda: RawDir(c, "/raw", ""),
            "snapshots": lambda: SnapshotsDir(c, "/snapshots"),
        }


class RefusedFile(GeneratedFile):
    """``refused.jsonl``: the recent refusals of the reader's own writes (all of them for the
    owner and root), one JSON object a line: time (epoch ms), pid, uid, op, path, errno,
    reason (:class:`fusefs.base.RefusalLog`). Read with direct I/O: it changes without
    notice, so its size is shown as 0 and a read returns what is there at open.

    Errnos: EACCES for an open for writing.
    Threads: getattr and open (:meth:`open_as`, with the reader's uid) run in a worker thread;
    reads answer on the trio loop from the bytes taken at open (``BytesHandle.read_cached``)."""

    def stat(self) -> Stat:
        """Size 0 (read with direct I/O), the mount's start as mtime."""
        return Stat(RO_FILE, 0, self.ctx.mount_time_ns)

    def open(self, flags: int) -> Handle:
        """:meth:`open_as` with no user: the daemon's own view (every refusal)."""
        return self.open_as(flags, None)

    def open_as(self, flags: int, uid: int | None) -> Handle:
        """The refusals ``uid`` may read, taken now; EACCES for writing."""
        check_read_only_open(flags)
        return BytesHandle(self.ctx.refusals.lines_for(uid))


class StatusFile(GeneratedFile):
    """``status.json``: where the CommitLog stands, how far dispatch and flush lag, counts.

    Offsets and lags are bytes of the CommitLog; timestamps epoch ms. ``dispatchBehindBytes``
    is RocketMQ's ``dispatchBehindBytes()`` (CommitLog max offset minus the reput offset:
    dispatch runs inline with the put, so it is 0 but for SYNC_FLUSH puts waiting for their
    flush); ``flushBehindBytes`` what an fsync would still
    write. ``brokerName`` is broker.conf's (``--config``), else RocketMQ's default, the host
    name. mtime = the store time of the newest message (the mount time before any).

    Errnos: EACCES for an open for writing; an engine error's errno (EIO on damage).
    Threads: getattr (which renders the content for its size) and open run in a worker thread;
    reads answer on the trio loop from the bytes taken at open (``BytesHandle.read_cached``)."""

    def content(self) -> bytes:
        """``store_status`` (as ``rmqfs brokerStatus``) with the mount's pid and readOnly, and
        ``location`` for a snapshot in object storage (its URI, credentials redacted)."""
        st = store_status(self.ctx.store)  # the same fields as `rmqfs brokerStatus`
        # the mount's own: its daemon and whether it writes
        st = {
            **{k: st[k] for k in ("brokerName", "storePathRootDir")},
            **({"location": self.ctx.location} if self.ctx.location else {}),
            "pid": self.ctx.pid,
            "readOnly": self.ctx.read_only,
            **{k: v for k, v in st.items() if k not in ("brokerName", "storePathRootDir")},
        }
        return R.render_json(st)

    def mtime_ns(self) -> int:
        """The store time of the newest message; the mount's start before any."""
        return ms_to_ns(self.ctx.store.commitlog.last_store_timestamp) or self.ctx.mount_time_ns


# --------------------------------------------------------------------------------------------
# topics/


class TopicsDir(Dir):
    """``topics/``: one directory per topic of topics.json (``MessageStore.topic_names``);
    ``mkdir topics/T`` creates a topic as mqadmin updateTopic does (``TopicConfigManager``),
    ``rmdir`` deletes one (:meth:`rmdir`).

    Errnos: ENOENT for no such topic; EEXIST for mkdir of a topic that exists; EROFS on a
    read-only mount; EINVAL for a name RocketMQ refuses or a system topic
    (``check_topic_creatable``), EPERM for rmdir of a system topic.
    Threads: every handler (lookup, readdir, getattr, mkdir, rmdir) runs in a worker thread."""

    def stat(self) -> Stat:
        """A directory that takes mkdir: 0755 (no write bit on a read-only mount)."""
        return Stat(self.ctx.write_mode(DIR_MODE), 0, self.ctx.tree_mtime_ns())

    def list(self) -> list[str]:
        """The topics of topics.json."""
        return self.ctx.store.topic_names()

    def child(self, name: str) -> Node | None:
        """The topic's :class:`TopicDir`, or None when no such topic exists."""
        if self.ctx.store.has_topic(name):  # not topic_names(): ls -l looks up each topic
            return TopicDir(self.ctx, self.sub(name), name)
        return None

    def mkdir(self, name: str) -> Node:
        """Create the topic (``check_topic_creatable``, then ``create_topic``). EROFS on a
        read-only mount, EEXIST when it exists, EINVAL for a name refused."""
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        if self.ctx.store.has_topic(name):
            raise FsError(errno.EEXIST)
        try:
            check_topic_creatable(name)  # AdminBrokerProcessor: no system topics
            self.ctx.store.create_topic(name)
        except E.StoreError as exc:
            raise fs_error(exc) from exc
        return TopicDir(self.ctx, self.sub(name), name)

    def rmdir(self, name: str) -> None:
        """``rmdir topics/T``: mqadmin deleteTopic (``MessageStore.delete_topic``): the
        topics.json entry, the ConsumeQueues and the topic's consumer offsets go, and its POP
        retry topics (``clearRetryTopicWhenDeleteTopic``); CommitLog records stay until they
        expire. The topic's rendered views are dropped. EPERM for a
        RocketMQ system topic, ENOENT for no topic, EROFS on a read-only mount."""
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        try:
            done = self.ctx.store.delete_topic(name)
        except E.StoreError as exc:
            raise fs_error(exc) from exc
        finally:
            self.ctx.views.drop_topic(name)
        for retry in done["retryTopics"]:  # its POP retry topics went too
            self.ctx.views.drop_topic(retry["topic"])


class TopicDir(Dir):
    """``topics/<topic>/``: ``produce``, ``produce.jsonl``, ``messages.jsonl``, ``bodies.txt``,
    ``scheduled.jsonl``, ``topic.json``, ``keys/`` and one directory per ConsumeQueue (queueId).

    Errnos: ENOENT for a lookup of any other name; EROFS or EPERM for mkdir/rmdir inside it.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, topic: str) -> None:
        super().__init__(ctx, path)
        self.topic = topic

    def entries(self) -> dict[str, Callable[[], Node]]:
        """The topic's files, ``keys/`` and its queues' directories."""
        c, t = self.ctx, self.topic
        d: dict[str, Callable[[], Node]] = {
            "produce": lambda: ProduceFile(c, self.sub("produce"), t, None, jsonl=False),
            "produce.jsonl": lambda: ProduceFile(c, self.sub("produce.jsonl"), t, None, True),
            "messages.jsonl": lambda: TopicViewFile(c, self.sub("messages.jsonl"), t, "messages"),
            "bodies.txt": lambda: TopicViewFile(c, self.sub("bodies.txt"), t, "bodies"),
            "scheduled.jsonl": lambda: ScheduledFile(c, self.sub("scheduled.jsonl"), t),
            "topic.json": lambda: TopicJsonFile(c, self.sub("topic.json"), t),
            "keys": lambda: KeysDir(c, self.sub("keys"), t),
        }
        for q in c.store.queue_ids(t):
            d[str(q)] = functools.partial(QueueDir, c, self.sub(str(q)), t, q)
        return d


#: ``scheduled.jsonl``'s seek points: a handle notes where a line starts (line index, byte
#: offset) every this many lines, or sooner (:data:`SCHEDULED_CHUNK_BYTES`), as it renders.
SCHEDULED_SEEK_LINES = 1024
#: A run of lines between two seek points ends once it holds this many bytes (or one line when
#: a single line is longer): what one render costs.
SCHEDULED_CHUNK_BYTES = 256 << 10
#: Rendered ``scheduled.jsonl`` bytes one handle holds at most (its runs of lines, least
#: recently read dropped first; one run when a single run is longer): never the whole file.
SCHEDULED_HELD_BYTES = 2 << 20


class LineSeekHandle(Handle):
    """A file of ``count`` lines rendered on demand (``lines(i, j)``: the lines ``[i, j)`` in
    order, the same bytes every time), read by range with no size known in advance (direct
    I/O, the file shows size 0).

    The byte offset of a line is known only once the lines before it were rendered, so a
    handle keeps seek points as reading proceeds (ratarmount's index built as it reads): the
    file is cut into runs of at most ``seek_lines`` lines, each ending early once it holds
    ``chunk_bytes``, and where each run starts (line, byte) is noted when the run before it is
    rendered. A read at a byte offset renders from the last seek point at or before it, forward
    (noting the points it passes), and only the runs it touches; rendered runs are held up to
    ``held_max`` bytes, least recently read dropped first, and rendered again when read again.
    Memory: 16 bytes a seek point, at most ``held_max`` rendered bytes (or one run, when a run
    holds more: a single line longer than it).

    Threads: :meth:`read_cached` answers on the trio loop from the runs held, else :meth:`read`
    renders in a worker thread; concurrent reads of one handle are safe (two may render one
    run: it is the same).
    """

    direct_io = True

    def __init__(
        self,
        lines: Callable[[int, int], Iterator[bytes]],
        count: int,
        *,
        seek_lines: int | None = None,
        chunk_bytes: int | None = None,
        held_max: int | None = None,
    ) -> None:
        self.lines, self.count = lines, count
        self.seek_lines = max(1, seek_lines or SCHEDULED_SEEK_LINES)
        self.chunk_bytes = max(1, chunk_bytes or SCHEDULED_CHUNK_BYTES)
        self.held_max = held_max if held_max is not None else SCHEDULED_HELD_BYTES
        # run k starts at line _starts_line[k], byte _starts_byte[k]; k + 1 is known once k
        # was rendered
        self._starts_line, self._starts_byte = array("q", [0]), array("q", [0])
        self._held: OrderedDict[int, bytes] = OrderedDict()
        self._held_bytes = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """Rendered bytes this handle holds now."""
        return self._held_bytes

    @property
    def seek_points(self) -> int:
        """Seek points known so far (runs whose start is known)."""
        return len(self._starts_line)

    def read_cached(self, offset: int, length: int) -> bytes | None:
        """:meth:`read` when every run it touches is held (then they are the most recently
        read), else None: nothing is rendered, and nothing changes unless it answers."""
        out: list[bytes] = []
        used: list[int] = []
        pos, end = offset, offset + length
        with self._lock:
            k = bisect.bisect_right(self._starts_byte, pos) - 1
            while pos < end and self._starts_line[k] < self.count:
                data = self._held.get(k)
                if data is None:
                    return None
                start = self._starts_byte[k]
                if pos < start + len(data):
                    piece = data[pos - start : end - start]
                    out.append(piece)
                    pos += len(piece)
                    used.append(k)
                k += 1  # held: the start of the run after it is known
            for k in used:
                self._held.move_to_end(k)
        return b"".join(out)

    def read(self, offset: int, length: int) -> bytes:
        """``[offset, offset + length)`` of the lines, short only at their end; renders the
        runs it touches that are not held. EIO (or the engine error's errno) when a line
        cannot be rendered."""
        out: list[bytes] = []
        pos, end = offset, offset + length
        while pos < end:
            got = self._run_at(pos)
            if got is None:
                break
            start, data = got
            piece = data[pos - start : end - start]
            out.append(piece)
            pos += len(piece)
        return b"".join(out)

    def _run_at(self, pos: int) -> tuple[int, bytes] | None:
        """(first byte, bytes) of the run holding byte ``pos``, rendering the runs from the
        last seek point at or before it up to it; None past the last line."""
        with self._lock:
            k = bisect.bisect_right(self._starts_byte, pos) - 1
        while True:
            with self._lock:
                if self._starts_line[k] >= self.count:
                    return None
                start = self._starts_byte[k]
                data = self._held.get(k)
                if data is not None:
                    self._held.move_to_end(k)
            if data is None:
                data = self._render(k)
            if pos < start + len(data):
                return start, data
            k += 1  # its start is known now: the run before it was rendered

    def _render(self, k: int) -> bytes:
        """Render run ``k`` (its start known), note where run ``k + 1`` starts and hold it."""
        first = self._starts_line[k]
        parts: list[bytes] = []
        size, line = 0, first
        try:
            for text in self.lines(first, min(first + self.seek_lines, self.count)):
                parts.append(text)
                size += len(text)
                line += 1
                if size >= self.chunk_bytes:
                    break
        except E.StoreError as exc:
            raise fs_error(exc) from None
        if line == first:  # no line where one must be: never an empty run (it would repeat)
            raise FsError(errno.EIO, f"line {first} of {self.count} could not be rendered")
        data = b"".join(parts)
        with self._lock:
            if len(self._starts_line) == k + 1:
                self._starts_line.append(line)
                self._starts_byte.append(self._starts_byte[k] + size)
            if k not in self._held:
                self._held[k] = data
                self._held_bytes += size
            while self._held_bytes > self.held_max and len(self._held) > 1:
                _, old = self._held.popitem(last=False)
                self._held_bytes -= len(old)
        return data

    def release(self) -> None:
        """Drop the rendered runs."""
        with self._lock:
            self._held.clear()
            self._held_bytes = 0


class ScheduledFile(Node):
    """``topics/<topic>/scheduled.jsonl``: every message waiting for delivery to the topic
    (``engine.read.scheduled.waiting_refs``: the 5.x timer store's ``TimerMessageStore`` and
    the delay levels' ``ScheduleMessageService``), one ``jsonline.build_scheduled_line`` a
    line, in delivery order. Direct I/O, size shown as 0 (it changes as messages come due);
    what a handle shows is fixed at its open: the waiting messages' references (29 bytes
    each), whose lines are rendered by range as they are read (:class:`LineSeekHandle`),
    any number of them, never the whole file held.

    Errnos: EACCES for an open for writing; EIO for a damaged timer store or record (at open
    for the references, at a read for the records of its lines).
    Threads: getattr and open (which lists the references) run in a worker thread; reads answer
    on the trio loop from the lines a handle holds, else render in a worker thread
    (``LineSeekHandle.read``)."""

    def __init__(self, ctx: Context, path: str, topic: str) -> None:
        super().__init__(ctx, path)
        self.topic = topic

    def stat(self) -> Stat:
        """Size 0 (rendered as read, with direct I/O); mtime the store's newest record."""
        # the store's newest record: what a new delayed or timed message changes, and the same
        # after a remount (the mount's own start time broke rsync and inode/mtime stability)
        newest = ms_to_ns(self.ctx.store.commitlog.last_store_timestamp)
        return Stat(RO_FILE, 0, newest or self.ctx.tree_mtime_ns())

    def open(self, flags: int) -> Handle:
        """A :class:`LineSeekHandle` over the waiting messages' references as they are now;
        EACCES for writing, EIO for a damaged timer store or record."""
        check_read_only_open(flags)
        store = self.ctx.store
        try:
            refs = waiting_refs(store, self.topic)
        except E.StoreError as exc:
            raise fs_error(exc) from None
        return LineSeekHandle(functools.partial(refs.lines, store), len(refs))


class TopicJsonFile(GeneratedFile):
    """``topics/<topic>/topic.json``: the topic's topics.json entry (``TopicConfig``). Writing a
    JSON object changes the fields it names (``readQueueNums``, ``writeQueueNums``, ``perm``,
    ``order``; other fields may be written back unchanged): mqadmin updateTopic, atomic in
    topics.json (:class:`TopicJsonWriteHandle`).

    Errnos: EROFS for an open for writing or a truncate on a read-only mount; EINVAL for a
    truncate to a size other than 0, for text that is not a JSON object, or for a field value
    the engine refuses (its errno).
    Threads: getattr, open, write, flush and release run in a worker thread; reads of a
    read-only open answer on the trio loop (``BytesHandle.read_cached``)."""

    def __init__(self, ctx: Context, path: str, topic: str) -> None:
        super().__init__(ctx, path)
        self.topic = topic

    def config(self) -> TopicConfig:
        """The topic's ``TopicConfig`` (a default one of its queue count when topics.json has
        no entry)."""
        cfg = self.ctx.store.topic_config.get(self.topic)
        if cfg is None:
            n = len(self.ctx.store.queue_ids(self.topic))
            from rmqfs.engine.format.config import TopicConfig

            cfg = TopicConfig(self.topic, n, n)
        return cfg

    def content(self) -> bytes:
        """The config as JSON (``TopicConfig.to_json``)."""
        return R.render_json(self.config().to_json())

    def mtime_ns(self) -> int:
        """topics.json's mtime."""
        return self.ctx.file_mtime_ns("topics.json")

    def stat(self) -> Stat:
        """Writable (0644 as :meth:`Context.write_mode` shows it), its JSON's size."""
        return Stat(self.ctx.write_mode(RW_FILE), len(self.content()), self.mtime_ns())

    def open(self, flags: int) -> Handle:
        """A :class:`BytesHandle` for reading, a :class:`TopicJsonWriteHandle` for
        writing (EROFS on a read-only mount)."""
        if flags & os.O_ACCMODE == os.O_RDONLY:
            return BytesHandle(self.content())
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        return TopicJsonWriteHandle(self)

    def open_as(self, flags: int, uid: int | None) -> Handle:
        """:meth:`open`, what a write handle holds charged to ``uid``."""
        h = self.open(flags)
        if isinstance(h, TopicJsonWriteHandle):
            h.uid = uid  # its buffer counts in uid's share of ctx.line_budget
        return h

    def truncate(self, size: int) -> None:
        """Size 0 only (``open(O_TRUNC)``): EINVAL otherwise, EROFS on a read-only mount."""
        if size != 0:
            raise FsError(errno.EINVAL)
        if self.ctx.read_only:
            raise FsError(errno.EROFS)

    def update(self, text: bytes) -> None:
        """Apply one JSON object (all its fields or none). FsError: EINVAL for text that is
        not one, ENOENT when the topic was deleted (a descriptor opened before ``rmdir``
        never brings it back), an engine error's errno."""
        import json

        from rmqfs.engine.format.config import topic_update_from_json

        try:
            obj = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise FsError(errno.EINVAL, f"topic.json: not a JSON object: {exc}") from None
        try:  # (create=False: a topic deleted while this file was open stays deleted)
            self.ctx.store.update_topic(
                self.topic, **topic_update_from_json(self.config(), obj), create=False
            )
        except E.StoreError as exc:
            raise fs_error(exc) from exc


#: The most a write to ``topic.json`` may hold (a topics.json entry is a few hundred bytes).
TOPIC_JSON_MAX = 64 << 10


class TopicJsonWriteHandle(Handle):
    """Collects what is written to ``topic.json``; as soon as it is one whole JSON object
    it is applied (so the ``write()`` reports a refusal), else when the open file's last
    descriptor closes (release: a dup's or a forked child's close only checks it). What it
    holds counts in the mount's :class:`fusefs.base.LineBudget` (ENOBUFS past it), as an
    unfinished produce line does. Threads: a worker thread each call; ``lock`` serialises a
    FLUSH from another descriptor's close with a write."""

    writable = True
    direct_io = True

    def __init__(self, node: TopicJsonFile, uid: int | None = None) -> None:
        self.node = node
        self.uid = uid
        self.buf = bytearray()
        self.held = 0  # bytes of ctx.line_budget this handle holds (>= len(buf))
        self.lock = threading.Lock()
        parent = node.path.rsplit("/", 1)[0]
        self.invalidates = (node.path, parent)

    def read(self, offset: int, length: int) -> bytes:
        """The config as it is now (direct I/O)."""
        return self.node.content()[offset : offset + length]

    def write(self, data: bytes) -> int:
        """Collect ``data``; once the bytes are one whole JSON object, apply it
        (:meth:`TopicJsonFile.update`). EINVAL past :data:`TOPIC_JSON_MAX` bytes, ENOBUFS
        past the mount's budget of buffered bytes."""
        with self.lock:
            try:
                if len(self.buf) + len(data) > TOPIC_JSON_MAX:
                    self.buf.clear()
                    raise FsError(errno.EINVAL, f"topic.json: over {TOPIC_JSON_MAX} bytes")
                if len(self.buf) + len(data) > self.held:
                    self.node.ctx.line_budget.take(self.uid, len(self.buf) + len(data) - self.held)
                    self.held = len(self.buf) + len(data)
                self.buf += data
                import json

                try:
                    json.loads(bytes(self.buf).decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    return len(data)  # not whole yet: wait for more, or for the last close
                text = bytes(self.buf)
                self.buf.clear()
                self.node.update(text)
                return len(data)
            finally:
                self._settle()

    def _settle(self) -> None:
        """Give back what the buffer no longer holds."""
        if self.held > len(self.buf):
            self.node.ctx.line_budget.give(self.uid, self.held - len(self.buf))
            self.held = len(self.buf)

    def flush(self) -> None:
        """FUSE FLUSH (each close(2) of a descriptor): nothing; a whole object was applied (or
        refused) by the write that completed it, and what is left may be completed by a later
        write (the last close applies it, :meth:`release`)."""

    def holds_unfinished(self) -> bool:
        """Whether the last close has something to apply (:meth:`release`)."""
        return bool(self.buf)

    def release(self) -> None:
        """The open file's last descriptor closed: apply what is left (FsError for a refusal,
        which the FUSE layer logs), and give the budget back."""
        with self.lock:
            text, self.buf = bytes(self.buf), bytearray()
            try:
                if text.strip():
                    self.node.update(text)
            finally:
                self._settle()


class QueueDir(Dir):
    """``topics/<topic>/<queueId>/``: one ConsumeQueue's ``messages.jsonl``, ``bodies.txt``,
    ``offsets.json``, ``produce`` (to this queue), ``by-offset/`` and ``by-time/``.

    Errnos: ENOENT for a lookup of any other name; EROFS or EPERM for mkdir/rmdir inside it.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, topic: str, queue_id: int) -> None:
        super().__init__(ctx, path)
        self.topic, self.queue_id = topic, queue_id

    def entries(self) -> dict[str, Callable[[], Node]]:
        """The queue's views, ``offsets.json``, ``produce``, ``by-offset/`` and ``by-time/``."""
        c, t, q = self.ctx, self.topic, self.queue_id
        return {
            "messages.jsonl": lambda: QueueViewFile(
                c, self.sub("messages.jsonl"), t, q, "messages"
            ),
            "bodies.txt": lambda: QueueViewFile(c, self.sub("bodies.txt"), t, q, "bodies"),
            "offsets.json": lambda: OffsetsFile(c, self.sub("offsets.json"), t, q),
            "produce": lambda: ProduceFile(c, self.sub("produce"), t, q, jsonl=False),
            "by-offset": lambda: ByOffsetDir(c, self.sub("by-offset"), t, q),
            "by-time": lambda: ByTimeDir(c, self.sub("by-time"), t, q),
        }


class OffsetsFile(GeneratedFile):
    """``topics/<topic>/<queueId>/offsets.json``: the queue's ``minOffset`` and ``maxOffset``
    (``getMinOffsetInQueue``/``getMaxOffsetInQueue``) and the store times of its first and last
    message (null when empty). mtime: the last message's store time.

    Errnos: EACCES for an open for writing; an engine error's errno (EIO on damage).
    Threads: getattr and open run in a worker thread; reads answer on the trio loop from the bytes
    taken at open (``BytesHandle.read_cached``)."""

    def __init__(self, ctx: Context, path: str, topic: str, queue_id: int) -> None:
        super().__init__(ctx, path)
        self.topic, self.queue_id = topic, queue_id

    def _fields(self) -> dict:
        s = self.ctx.store
        for attempt in range(3):
            lo = s.min_offset(self.topic, self.queue_id)
            hi = s.max_offset(self.topic, self.queue_id)
            first = last = None
            try:
                if hi > lo:
                    first = s.get_message(self.topic, self.queue_id, lo).store_timestamp
                    last = s.get_message(self.topic, self.queue_id, hi - 1).store_timestamp
                break
            except E.OffsetOutOfRangeError:
                # the first record expired between reading minOffset and reading it
                # (retention, a followed writer's): read the offsets again
                if attempt == 2:
                    raise
        return {
            "topic": self.topic,
            "queueId": self.queue_id,
            "minOffset": lo,
            "maxOffset": hi,
            "minStoreTimestamp": first,
            "maxStoreTimestamp": last,
        }

    def content(self) -> bytes:
        """The queue's offsets and first and last store times, as JSON."""
        return R.render_json(self._fields())

    def stat(self) -> Stat:
        """Read-only, the JSON's size, mtime the last message's store time."""
        f = self._fields()
        return Stat(
            RO_FILE,
            len(R.render_json(f)),
            ms_to_ns(f["maxStoreTimestamp"] or 0) or self.ctx.tree_mtime_ns(),
        )


# -- decoded views ---------------------------------------------------------------------------

RENDERERS = {"messages": R.render_message, "bodies": R.render_body}
#: Seconds the kernel may keep a decoded view's size. Not zero: with auto_inval_data (libfuse's
#: default, which pyfuse3 gives no way to turn off) every read(2) of a file whose attributes
#: have expired first asks the daemon for them, so a 0 made a GETATTR round trip of every
#: 128 KiB read of messages.jsonl: reading a rendered 553 MB view took 1-2 s instead of 0.25 s.
#: A view grows only by new messages, and an open of a view that grew since the kernel cached
#: its size drops that size first (:meth:`ViewFile.open`), so ``echo >> produce; cat view``
#: shows the line; a reader that keeps the file open (``tail -f`` polls each second) sees new
#: lines 50 ms later at most. Not by invalidating the view after each produce write: the
#: kernel discards a GETATTR answer that crosses an invalidation, and with writers writing
#: all the time it kept a stale size (0) indefinitely.
VIEW_ATTR_TIMEOUT = 0.05


class ViewHandle(Handle):
    """Reads a decoded view (``fusefs.views.View``, served by range) between a fixed start and
    its current end."""

    keep_cache = True

    def __init__(self, view: View, start: int = 0) -> None:
        self.view = view
        self.start = start
        view.hold()  # its index is kept while open (fusefs.views.ViewCache)
        if view.damage is not None:  # the view ends at damage: the read there must reach us
            self.direct_io, self.keep_cache = True, False

    def release(self) -> None:
        """Stop holding the view."""
        self.view.release()

    def read_cached(self, offset: int, length: int) -> bytes | bytearray | None:
        """:meth:`read` when the render cache and the page cache hold the bytes
        (:meth:`fusefs.views.View.read_cached`), else None; never for a view that ends at
        damage (the blocking read decides where the damage starts)."""
        if self.view.damage is not None:
            return None
        return self.view.read_cached(self.start + offset, length)

    def read(self, offset: int, length: int) -> bytes | bytearray:
        """The view's bytes at ``start + offset``, never past damage. EIO at the end of what
        is sized when the view ends at a damaged record, and for a chunk that cannot be
        rendered again (its messages expired, its topic deleted)."""
        try:
            data = self.view.read(self.start + offset, length)
        except OSError as exc:
            raise FsError(exc.errno or errno.EIO, str(exc)) from None
        if not data and length and self.view.damage is not None:
            # the lines before the damage were read: the next one is the damaged record
            raise FsError(errno.EIO, f"damaged record: {self.view.damage}")
        return data


class ViewFile(Node):
    """Base of decoded views: size = rendered bytes, mtime = newest message's store time."""

    def view(self) -> View:
        """The view, caught up with the store (may size it: worker threads only)."""
        raise NotImplementedError

    def peek(self) -> View | None:
        """The view when it exists and is caught up, else None (never blocks)."""
        return None

    reported: int | None = None  # the size the kernel was last told

    def _stat_of(self, v: View) -> Stat:
        self.reported = v.size
        return Stat(
            RO_FILE,
            v.size,
            ms_to_ns(v.mtime_ms) or self.ctx.tree_mtime_ns(),
            attr_timeout=VIEW_ATTR_TIMEOUT,
        )

    def stat_cached(self) -> Stat | None:
        """:meth:`stat` from the cached view when it is caught up (:meth:`peek`), else None."""
        v = self.peek()
        return None if v is None else self._stat_of(v)

    def stat(self) -> Stat:
        """The view's size and newest store time, once it caught up (may render)."""
        return self._stat_of(self.view())

    def open(self, flags: int) -> Handle:
        """A :class:`ViewHandle` of the caught-up view; drops the kernel's size first when the
        view grew since it was reported. EACCES for writing."""
        check_read_only_open(flags)
        v = self.view()
        h = ViewHandle(v)
        h.stale_attrs = self.reported is not None and self.reported != v.size
        return h


class TopicViewFile(ViewFile):
    """``topics/<topic>/messages.jsonl`` and ``bodies.txt``: every message of the topic, decoded
    (``render_message``: one JSON line; ``render_body``: the body), in CommitLog order; a cached
    render (:meth:`fusefs.views.ViewCache.topic`) that grows as messages arrive.

    Errnos: EACCES for an open for writing; EIO for a read that reaches a damaged record (the
    view ends there) or a chunk that cannot be rendered again (its messages expired). Served
    by range (``fusefs.views.View``): any size reads under any ``--cache-size``.
    Threads: getattr answers on the trio loop when the view is cached and caught up
    (:meth:`stat`), else renders in a worker thread; open runs in a worker thread; reads
    answer on the trio loop from the page cache (``ViewHandle.read_cached``), else in a worker
    thread."""

    def __init__(self, ctx: Context, path: str, topic: str, kind: str) -> None:
        super().__init__(ctx, path)
        self.topic, self.kind = topic, kind

    def view(self) -> View:
        """The topic's view of this kind, caught up (may render)."""
        return self.ctx.views.topic(self.kind, self.topic, RENDERERS[self.kind])

    def peek(self) -> View | None:
        """The topic's view when cached and caught up, else None."""
        return self.ctx.views.peek(self.kind, self.topic)


class QueueViewFile(ViewFile):
    """``topics/<topic>/<queueId>/messages.jsonl`` and ``bodies.txt``: one ConsumeQueue's
    messages decoded, in queue-offset order; a cached render
    (:meth:`fusefs.views.ViewCache.queue`) that grows as messages arrive.

    Errnos: EACCES for an open for writing; EIO for a read that reaches a damaged record (the
    view ends there) or a chunk that cannot be rendered again (its messages expired). Served
    by range (``fusefs.views.View``): any size reads under any ``--cache-size``.
    Threads: getattr answers on the trio loop when the view is cached and caught up
    (:meth:`stat`), else renders in a worker thread; open runs in a worker thread; reads
    answer on the trio loop from the page cache (``ViewHandle.read_cached``), else in a worker
    thread."""

    def __init__(self, ctx: Context, path: str, topic: str, queue_id: int, kind: str) -> None:
        super().__init__(ctx, path)
        self.topic, self.queue_id, self.kind = topic, queue_id, kind

    def view(self) -> View:
        """The queue's view of this kind, caught up (may render)."""
        return self.ctx.views.queue(self.kind, self.topic, self.queue_id, RENDERERS[self.kind])

    def peek(self) -> View | None:
        """The queue's view when cached and caught up, else None."""
        return self.ctx.views.peek(self.kind, self.topic, self.queue_id)


class MessageFile(GeneratedFile):
    """``by-offset/<n>``, ``by-time/<ms>``, ``keys/<key>``, ``messages/<msgId>``: the messages a
    lookup found, one JSON line each (``render_message``). Cached by the kernel for 1 s (for
    long on a store nothing writes): expiry may remove them.

    Holds no message: each line's length (rendered once, one message at a time, when the
    node is made) and how to read its message again (``reload``), so a node the kernel
    keeps costs a few numbers, not the bodies (a lookup of 64 messages of 16 MiB inflated
    each held them all, in every node and every open handle); a read renders the one line
    it falls in (:class:`MessageLinesHandle`).

    Errnos: EACCES for an open for writing; EIO for a read of a message gone since the
    lookup (expired, or the topic deleted) or that reads back other than it was.
    Threads: getattr and open run in a worker thread; a read within the line last rendered
    answers on the trio loop, any other in a worker thread."""

    def __init__(
        self,
        ctx: Context,
        path: str,
        records: list[MessageRecord],
        reload: Callable[[Any], MessageRecord | None],
    ) -> None:
        super().__init__(ctx, path)
        self.reload = reload
        self.lengths = array("q", (len(R.render_message(r)) for r in records))
        self.locations = [_Located(r) for r in records]
        self.newest = max(r.store_timestamp for r in records)

    def content(self) -> bytes:
        """The messages' JSON lines (read again)."""
        return MessageLinesHandle(self.lengths, self.locations, self.reload).read(
            0, sum(self.lengths)
        )

    def stat(self) -> Stat:
        """Read-only, the lines' size, the newest message's store time."""
        # cached for long only when the store cannot change (expiry makes lookups ENOENT)
        return Stat(
            RO_FILE,
            sum(self.lengths),
            ms_to_ns(self.newest),
            live=False,
            attr_timeout=None if self.ctx.frozen else 1.0,
        )

    def open(self, flags: int) -> Handle:
        """A :class:`MessageLinesHandle` over the lines; EACCES for writing."""
        check_read_only_open(flags)
        return MessageLinesHandle(self.lengths, self.locations, self.reload)


class _Located:
    """Where a looked-up message is (what :attr:`MessageFile.reload` reads it again from),
    without its body."""

    __slots__ = ("commitlog_offset",)

    def __init__(self, rec: MessageRecord) -> None:
        self.commitlog_offset = rec.commitlog_offset


class MessageLinesHandle(Handle):
    """An open :class:`MessageFile`: read by range, the one line a read falls in rendered
    from its message read again (one line held at a time: a message's, at most maxMessageSize
    inflated as JSON). EIO where a message is gone or reads back as another length."""

    direct_io = True

    def __init__(
        self,
        lengths: array,
        located: list,
        reload: Callable[[Any], MessageRecord | None],
    ) -> None:
        self.ends = list(itertools.accumulate(lengths))
        self.located = located
        self.reload = reload
        self.lock = threading.Lock()
        self.held: tuple[int, int, bytes] = (0, 0, b"")  # (start, line index, line)

    def _line(self, i: int) -> bytes:
        rec = self.reload(self.located[i])
        start = self.ends[i - 1] if i else 0
        line = R.render_message(rec) if rec is not None else b""
        if rec is None or len(line) != self.ends[i] - start:
            raise FsError(errno.EIO)  # gone since the lookup (expiry), or not as it was
        return line

    def read(self, offset: int, length: int) -> bytes:
        """``[offset, offset + length)`` of the lines, each rendered as the read reaches it."""
        out = []
        end = min(offset + length, self.ends[-1] if self.ends else 0)
        with self.lock:
            while offset < end:
                start, i, line = self.held
                if not start <= offset < start + len(line):
                    i = bisect.bisect_right(self.ends, offset)
                    start = self.ends[i - 1] if i else 0
                    line = self._line(i)
                    self.held = (start, i, line)
                piece = line[offset - start : end - start]
                out.append(piece)
                offset += len(piece)
        return b"".join(out)

    def read_cached(self, offset: int, length: int) -> bytes | None:
        """:meth:`read` when it falls in the line held (or past the end), else None (a
        render: a thread)."""
        start, _, line = self.held
        end = start + len(line)
        size = self.ends[-1] if self.ends else 0
        if offset >= size:
            return b""
        if start <= offset and (offset + length <= end or end == size):
            return line[offset - start : offset - start + length]
        return None


class ByOffsetDir(Dir):
    """``topics/<topic>/<queueId>/by-offset/``: lists nothing; ``by-offset/<n>`` is the message at
    queue offset ``n`` (``getMessage``), a :class:`MessageFile`.

    Errnos: ENOENT for a name that is not a decimal offset, an offset out of the queue's range,
    or a topic that is gone.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, topic: str, queue_id: int) -> None:
        super().__init__(ctx, path)
        self.topic, self.queue_id = topic, queue_id

    def list(self) -> list[str]:
        """Nothing: messages are looked up by name."""
        return []

    def child(self, name: str) -> Node | None:
        """The message at queue offset ``name``, or None."""
        offset = parse_decimal(name)
        if offset is None:
            return None
        return self._file(name, offset)

    def _file(self, name: str, offset: int) -> Node | None:
        """The :class:`MessageFile` of the message at queue offset ``offset`` of this queue,
        read again from that offset (not from the record's own queueOffset: an LMQ's unit
        at offset n points at a record that keeps its topic's queueOffset; the broker's
        ``multiDispatchLmqQueue``), or None when there is none."""
        try:
            rec = self.ctx.store.get_message(self.topic, self.queue_id, offset)
        except (E.OffsetOutOfRangeError, E.NoSuchTopicError):
            return None  # (by-time: expired, or the topic deleted, since the search)

        def reload(_at: Any) -> MessageRecord | None:
            """The message at ``offset`` again (None: gone since)."""
            try:
                return self.ctx.store.get_message(self.topic, self.queue_id, offset)
            except (E.OffsetOutOfRangeError, E.NoSuchTopicError):
                return None

        return MessageFile(self.ctx, self.sub(name), [rec], reload)


class ByTimeDir(ByOffsetDir):
    """``topics/<topic>/<queueId>/by-time/``: lists nothing; ``by-time/<epochMillis>`` is the
    first message stored at or after that time (``getOffsetInQueueByTime``), a
    :class:`MessageFile`.

    Errnos: ENOENT for a name that is not a decimal, or a time after the queue's last message.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def child(self, name: str) -> Node | None:
        """The first message stored at or after ``name`` (epoch ms), or None."""
        ms = parse_decimal(name)
        if ms is None:
            return None
        s = self.ctx.store
        off = s.offset_by_time(self.topic, self.queue_id, ms)
        if off >= s.max_offset(self.topic, self.queue_id):
            return None
        return self._file(name, off)


class KeysDir(Dir):
    """``topics/<topic>/keys/``: lists nothing; ``keys/<key>`` holds the topic's messages with
    that key, found through the IndexFiles (``queryMessage``), a :class:`MessageFile`.

    Errnos: ENOENT when no message has the key (or the name is not UTF-8).
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, topic: str) -> None:
        super().__init__(ctx, path)
        self.topic = topic

    def list(self) -> list[str]:
        """Nothing: keys are looked up by name."""
        return []

    def child(self, name: str) -> Node | None:
        """The topic's messages with the key ``name`` (IndexFile), or None."""
        if not name.isascii():
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8: no key has that name
                return None
        records = self.ctx.store.query_by_key(self.topic, name)
        if not records:
            return None
        return MessageFile(self.ctx, self.sub(name), records, _reload_at(self.ctx))


class MessagesDir(Dir):
    """``messages/``: lists nothing; ``messages/<msgId>`` is the message with that offset msgId
    (``MessageDecoder.decodeMessageId``) or client msgId (UNIQ_KEY, through the IndexFiles), a
    :class:`MessageFile`.

    Errnos: ENOENT when no message has that id.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def list(self) -> list[str]:
        """Nothing: messages are looked up by id."""
        return []

    def child(self, name: str) -> Node | None:
        """The message with the offset msgId ``name``, else those with that UNIQ_KEY, or None."""
        rec = self.ctx.store.look_message_by_offset_msg_id(name)
        if rec is not None:
            return MessageFile(self.ctx, self.sub(name), [rec], _reload_at(self.ctx))
        return self._by_uniq_key(name)

    def _by_uniq_key(self, name: str) -> Node | None:
        """The client's msgId (UNIQ_KEY) through the IndexFiles; only records whose UNIQ_KEY
        is ``name`` (MessageStore.look_messages_by_uniq_key checks every index hit)."""
        if not name.isascii():
            return None  # UNIQ_KEYs are hex (MessageClientIDSetter); no index lookup
        records = self.ctx.store.look_messages_by_uniq_key(name)
        if not records:
            return None
        return MessageFile(self.ctx, self.sub(name), records, _reload_at(self.ctx))


def _reload_at(ctx: Context) -> Callable[[Any], MessageRecord | None]:
    """What reads a looked-up message again from its CommitLog offset (None: gone since)."""

    def reload(at: Any) -> MessageRecord | None:
        try:
            return ctx.store.message_at(at.commitlog_offset)
        except E.CorruptRecordError:
            return None

    return reload


# -- producing -------------------------------------------------------------------------------


class LineHandle(Handle):
    """What the files that take lines (``produce``, ``offset``) share: ``buf`` the unfinished
    line, ``lock`` (a FLUSH from another descriptor's close runs beside a write), and
    ``refused``: a write that fails while extending a line earlier writes began refuses that
    line whole, its start dropped, and every later write (and close) of the open file fails
    with the same errno, so the rest of the line is never taken as a line of its own."""

    buf: bytearray
    lock: threading.Lock
    refused = 0  # errno of a refused line this file continued; 0 when fine

    def _write(self, data: bytes) -> int:
        raise NotImplementedError

    def _write_lines(self, data: bytes) -> int:
        """``_write(data)`` under the rule above; the caller holds ``lock``."""
        self._check_refused()
        continued = bool(self.buf)
        try:
            return self._write(data)
        except (FsError, OSError) as exc:
            if continued:
                self.buf.clear()
                self.refused = exc.errno or errno.EIO
            raise  # logged and kept by the FUSE layer (Context.refusals)

    def _refuse_unfinished(self, check: Callable[[], object]) -> None:
        """``check()`` of the unfinished line at a FLUSH; when it refuses (no more bytes can make
        the line valid), the line is refused for good, as a write's refusal refuses it: dropped,
        its errno kept for the open file's later writes and closes, so the last close does not
        refuse (and log) it a second time. The caller holds ``lock``."""
        try:
            check()
        except FsError as exc:  # (an OSError, e.g. reading the queue's end, is no verdict)
            self.buf.clear()
            self.refused = exc.errno or errno.EIO
            raise

    def _check_refused(self) -> None:
        if self.refused:
            raise FsError(
                self.refused,
                "an earlier write on this file refused the line it continued; open the file again",
            )

    def holds_unfinished(self) -> bool:
        """Whether the last close has an unfinished line to take (:meth:`release`)."""
        return bool(self.buf) and not self.refused


class ProduceHandle(LineHandle):
    """Splits written bytes into lines; each complete non-empty line is a message.

    The rules (docs/mount.md, docs/guarantees.md "Bad input"), per write request the kernel sends (a
    write() of up to 255 pages is one request; a larger one is split, at about 1 MiB):

    * The request's complete lines (with the unfinished line earlier requests left, if any,
      in front) are stored all or none: one bad line fails the request with its errno
      (EINVAL, EMSGSIZE, ENOSPC, ...) and nothing of it is stored. Empty lines store nothing
      (``produce.jsonl``: lines of only JSON whitespace too).
    * Bytes after the request's last newline are buffered (per open file, so writers in other
      processes never interleave inside a line); the line becomes a message when a later
      request ends it, or when the open file's last descriptor closes (release), as a
      pipe's reader sees its end only then: a dup's or a forked child's copy closing (a
      FLUSH) never cuts a line, it only checks the unfinished line and reports its errno
      (what a ``produce.jsonl`` line that ended there would be refused for) without changing
      anything. An unfinished line that grows past what could ever be one message
      (``maxMessageSize``; for ``produce.jsonl`` six times it and the longest properties, plus
      64 KiB: a JSON escape takes up to 6 bytes a byte) fails the request
      with EMSGSIZE.
    * A failed request that started at a line boundary leaves the file as before it: a retry
      fails the same way, other writes go on. A failed request that continued an unfinished
      line refuses that line whole: its buffered start is dropped, and every later write and
      flush on this open file fails with the same errno (the rest of the line may follow in a
      retry of a short write, and must not be stored as a line of its own). Open the file
      again to go on.
    * SYNC_FLUSH timeout (RocketMQ's FLUSH_DISK_TIMEOUT send status, not a failure): the
      lines are stored and become durable with the next flush; the write succeeds (a failed
      write must store nothing, and a retry would store them twice), the daemon logs it, and
      an fsync() waits for the disk.

    direct_io: writes reach us at the caller's size (up to about 1 MiB), never go through
    the page cache, and the file's size stays 0.
    """

    writable = True
    direct_io = True

    def __init__(
        self,
        ctx: Context,
        topic: str,
        queue_id: int | None,
        jsonl: bool,
        path: str = "",
        uid: int | None = None,
    ):
        self.ctx = ctx
        self.topic = topic
        self.queue_id = queue_id
        self.jsonl = jsonl
        self.path = path
        self.uid = uid  # who opened it: its unfinished line counts in ctx.line_budget
        self.buf = bytearray()  # the unfinished line
        self.held = 0  # bytes of ctx.line_budget this handle holds (>= len(buf))
        self.lock = threading.Lock()
        self.refused = 0  # errno of a refused line this file continued; 0 when fine
        limit = ctx.store.config.max_message_size
        # the longest line one message can be written as: a produce line is its body; a JSON
        # line's body and properties may have every byte escaped (``\u0001``: 6 bytes)
        self.max_line = 6 * (limit + MAX_PROPERTIES_LENGTH) + 64 * 1024 if jsonl else limit
        self.too_long = (
            f"line longer than one message's JSON can be ({self.max_line} bytes: a body of "
            f"maxMessageSize {limit} and the longest properties, every byte escaped)"
            if jsonl
            else f"line longer than maxMessageSize ({limit} bytes)"
        )

    def read(self, offset: int, length: int) -> bytes:
        """Nothing: a produce file reads as empty, opened O_RDWR too."""
        return b""  # docs/mount.md: a produce file reads as empty, opened O_RDWR too

    def _messages(
        self, lines: list[bytes]
    ) -> tuple[list[bytes], list, list, list[Message], list[int]]:
        """What ``produce.jsonl`` lines say to put (blank ones skipped): ``(their bodies, their
        tags, their keys, [], line indexes)`` when every line has a body and at most tags and
        keys (``jsonline.plain_fields``) whose values the columns' passes vouch for
        (``validation.tags_keys_clean``): stored from columns, as ``produce``'s lines are;
        else ``([], [], [], a Message each, line indexes)``; the line indexes say which of
        ``lines`` each message is. FsError names the first bad line."""
        bodies: list[bytes] = []
        tags: list[str | None] = []
        keys: list[str | None] = []
        msgs: list[Message] = []
        numbered: list[tuple[int, object]] = []  # (line, parsed or Message), while needed
        for i, line in enumerate(lines):
            if not line.strip(b" \t\r"):
                continue
            try:
                obj = parse_json_line(line)
                fields = plain_fields(obj)
                if fields is not None:
                    bodies.append(fields[0])
                    tags.append(fields[1])
                    keys.append(fields[2])
                else:
                    obj = message_from_json(obj, self.topic, self.queue_id)
                    msgs.append(obj)
                numbered.append((i, obj))
            except E.StoreError as exc:
                raise FsError(exc.errno, f"line {i + 1} of the write: {exc}") from None
        at = [i for i, _ in numbered]
        if not msgs and tags_keys_clean(tags, keys):
            return bodies, tags, keys, [], at
        out = []  # a Message each, in line order; message_from_json names a line that is bad
        for i, obj in numbered:
            try:
                out.append(
                    obj
                    if isinstance(obj, Message)
                    else message_from_json(obj, self.topic, self.queue_id)
                )
            except E.StoreError as exc:
                raise FsError(exc.errno, f"line {i + 1} of the write: {exc}") from None
        return [], [], [], out, at

    def _each(self, lines: list[bytes]) -> list[tuple[int, Message]]:
        """Each message ``lines`` say to put, with the index of its line (``produce``: every
        non-empty line a body; ``produce.jsonl``: :meth:`_messages`)."""
        if not self.jsonl:
            return [
                (i, Message(self.topic, line, queue_id=self.queue_id))
                for i, line in enumerate(lines)
                if line
            ]
        bodies, tags, keys, msgs, at = self._messages(lines)
        if not msgs:
            msgs = [
                Message(self.topic, b, tags=t, keys=k, queue_id=self.queue_id)
                for b, t, k in zip(bodies, tags, keys)
            ]
        return list(zip(at, msgs))

    def _first_refused(self, lines: list[bytes]) -> FsError | None:
        """The FsError of the first of ``lines`` the store's checks refuse alone (its fields:
        :meth:`_messages`, FsError raised; then ``MessageStore.check_put``), named as the
        parsing names one (``line N of the write: ...``); None when each passes (an OSError,
        e.g. a full disk, is no verdict on a line)."""
        store = self.ctx.store
        for i, msg in self._each(lines):
            try:
                store.check_put([msg])
            except E.StoreError as one:
                return FsError(one.errno, f"line {i + 1} of the write: {one}")
            except OSError:
                break
        return None

    def _which_line(self, lines: list[bytes], exc: E.StoreError) -> FsError:
        """The FsError for a put of ``lines`` the store refused with ``exc``: the first line
        refused alone (:meth:`_first_refused`), or ``exc`` as it is when each line passes
        alone (a refusal of the whole write)."""
        return self._first_refused(lines) or fs_error(exc)

    def _put(self, lines: list[bytes]) -> None:
        """Store ``lines`` (all or none). FsError with the errno of a refusal; a SYNC_FLUSH
        timeout is not one (the lines are stored: logged, and durable with the next flush)."""
        try:
            store = self.ctx.store
            if not self.jsonl:  # the lines' bodies as they are: no Message, no PutResult each
                bodies = [line for line in lines if line]
                if bodies:
                    store.put_bodies(self.topic, bodies, self.queue_id, results=False)
                return
            bodies, tags, keys, msgs, _ = self._messages(lines)
            if bodies:  # body, tags and keys alone: from columns, no Message each
                store.put_bodies(
                    self.topic,
                    bodies,
                    self.queue_id,
                    results=False,
                    tags=tags if any(tags) else None,
                    keys=keys if any(keys) else None,
                )
            elif msgs:  # (the writer learns nothing of their PutResults: none asked for)
                store.put_messages(msgs, results=False)
        except E.FlushDiskTimeoutError as exc:
            log.warning("%s: %s (stored; durable with the next flush)", self.path, exc)
        except FsError:
            raise  # (a bad line: named already)
        except E.StoreError as exc:
            raise self._which_line(lines, exc) from exc

    def write(self, data: bytes) -> int:
        """Store the complete lines of ``data`` and buffer the rest (the class's rules).
        EROFS on a read-only mount; EINVAL, EMSGSIZE, ENOSPC, ENOBUFS; after a refused
        continued line, that errno for every later write."""
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        with self.lock:
            try:
                return self._write_lines(data)
            finally:
                self._settle()

    def _reserve(self, n: int) -> None:
        """Before the unfinished line grows to ``n`` bytes: count them in the mount's
        :class:`fusefs.base.LineBudget` (FsError ENOBUFS past it, nothing changed)."""
        if n > self.held:
            self.ctx.line_budget.take(self.uid, n - self.held)
            self.held = n

    def _settle(self) -> None:
        """Give back what the unfinished line no longer holds."""
        if self.held > len(self.buf):
            self.ctx.line_budget.give(self.uid, self.held - len(self.buf))
            self.held = len(self.buf)

    def _write(self, data: bytes) -> int:
        buf = self.buf
        if not self.jsonl and b"\0" in data:  # posix_fallocate's emulation writes NULs
            raise FsError(
                errno.EINVAL,
                "a NUL byte in the write: produce takes text lines; "
                "send binary bodies as bodyBase64 through produce.jsonl",
            )
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(buf) + len(data) > self.max_line:
                raise FsError(errno.EMSGSIZE, self.too_long)
            self._reserve(len(buf) + len(data))
            buf += data
            return len(data)
        if len(data) - cut - 1 > self.max_line:
            raise FsError(errno.EMSGSIZE, self.too_long)
        self._reserve(len(data) - cut - 1)  # before any line is stored: all or none
        lines = (bytes(buf) + data[:cut] if buf else bytes(data[:cut])).split(b"\n")
        self._put(lines)
        buf[:] = data[cut + 1 :]
        return len(data)

    def flush(self) -> None:
        """FUSE FLUSH (each close(2) of a descriptor, a dup's or a forked child's copy too):
        the errno of a refused line, or of an unfinished ``produce.jsonl`` line that no more
        bytes can make valid (it is one whole JSON value already, and not a message the rules
        let through), which refuses that line for good (:meth:`_refuse_unfinished`: logged
        once); a line that is merely unfinished is no error. Nothing is stored
        (:meth:`release` stores the unfinished line)."""
        with self.lock:
            self._check_refused()
            if self.buf and self.jsonl:
                tail = bytes(self.buf)
                try:
                    parse_json_line(tail)
                except E.StoreError:
                    return  # not one whole JSON value: more may come
                try:
                    self._refuse_unfinished(lambda: self._check_tail(tail))  # FsError: why
                finally:
                    self._settle()

    def _check_tail(self, tail: bytes) -> None:
        """FsError when the unfinished ``produce.jsonl`` line ``tail`` (one whole JSON value)
        is a message the store would refuse: its fields (:meth:`_messages`), then what the put
        checks (``MessageStore.check_put``: the queue, the body's size, the timer rules...), so
        that the close() is told and not the release, which no process hears."""
        refused = self._first_refused([tail])
        if refused is not None:
            raise refused

    def fsync(self) -> None:
        """The store's flush (durable): the complete lines written so far are on disk when it
        returns (the unfinished one is not a message yet); the errno of a refused line first."""
        with self.lock:
            self._check_refused()
        self.ctx.store.flush()

    def release(self) -> None:
        """The open file's last descriptor closed: store the unfinished line as a message
        (FsError or OSError for a refused one, which the FUSE layer logs: no process sees
        it), and give the line budget back."""
        with self.lock:
            try:
                if self.buf and not self.refused:
                    self._put([bytes(self.buf)])
            finally:
                self.buf.clear()
                self._settle()


class ProduceFile(Node):
    """``topics/<topic>/produce``, ``produce.jsonl`` and ``<queueId>/produce``: each line
    written becomes a message (``putMessages``; :class:`ProduceHandle` has the rules). Shown
    with size 0; a read-only open reads nothing.

    Errnos: EROFS for an open for writing on a read-only mount; EACCES for a topic without write
    permission (``perm``) or a topic RocketMQ refuses sends to (``check_send_topic``); EINVAL for
    a truncate to a size other than 0; a write: EINVAL, EMSGSIZE, ENOSPC, ENOBUFS, ETIMEDOUT
    (:class:`ProduceHandle`).
    Threads: getattr, open, write, flush, fsync and release run in a worker thread."""

    def __init__(
        self, ctx: Context, path: str, topic: str, queue_id: int | None, jsonl: bool
    ) -> None:
        super().__init__(ctx, path)
        self.topic, self.queue_id, self.jsonl = topic, queue_id, jsonl

    def stat(self) -> Stat:
        """0644 as :meth:`Context.write_mode` shows it, size 0, the tree's mtime."""
        return Stat(self.ctx.write_mode(WO_FILE), 0, self.ctx.tree_mtime_ns())

    def open(self, flags: int) -> Handle:
        """An empty :class:`BytesHandle` for reading, a :class:`ProduceHandle` for writing.
        EROFS on a read-only mount; EACCES for a topic without write permission or one sends are
        refused to."""
        if flags & os.O_ACCMODE == os.O_RDONLY:
            return BytesHandle(b"")
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        cfg = self.ctx.store.topic_config.get(self.topic)
        if cfg is not None and not cfg.writable:
            raise FsError(errno.EACCES, f"topic {self.topic} has no write permission")
        try:
            check_send_topic(self.topic)
        except E.StoreError as exc:
            raise fs_error(exc) from exc
        return ProduceHandle(self.ctx, self.topic, self.queue_id, self.jsonl, self.path)

    def open_as(self, flags: int, uid: int | None) -> Handle:
        """:meth:`open`, the handle's unfinished line charged to ``uid``."""
        h = self.open(flags)
        if isinstance(h, ProduceHandle):
            h.uid = uid  # its unfinished line counts in uid's share of ctx.line_budget
        return h

    def truncate(self, size: int) -> None:
        """Size 0 only (``open(O_TRUNC)`` does nothing more): EINVAL otherwise."""
        if size != 0:
            raise FsError(errno.EINVAL)


# --------------------------------------------------------------------------------------------
# groups/


class GroupsDir(Dir):
    """``groups/``: one directory per consumer group (subscriptionGroup.json and the groups with
    offsets); ``mkdir groups/G`` creates a group (mqadmin updateSubGroup), ``rmdir`` deletes one
    (:meth:`rmdir`).

    Errnos: ENOENT for no such group; EEXIST for mkdir of a group that exists; EROFS on a
    read-only mount; EINVAL for a name RocketMQ refuses.
    Threads: every handler (lookup, readdir, getattr, mkdir, rmdir) runs in a worker thread."""

    def stat(self) -> Stat:
        """A directory that takes mkdir: 0755 (no write bit on a read-only mount)."""
        return Stat(self.ctx.write_mode(DIR_MODE), 0, self.ctx.tree_mtime_ns())

    def list(self) -> list[str]:
        """The groups (subscriptionGroup.json and those with offsets)."""
        return self.ctx.store.group_names()

    def child(self, name: str) -> Node | None:
        """The group's :class:`GroupDir`, or None when no such group exists."""
        # Only existing groups: a lookup that answered for any valid name would make
        # `mkdir groups/<new>` fail with EEXIST (the kernel looks the name up first).
        if not self.ctx.store.has_group(name):
            return None
        return GroupDir(self.ctx, self.sub(name), name)

    def mkdir(self, name: str) -> Node:
        """Create the group. EROFS on a read-only mount, EEXIST when it exists, EINVAL
        for a name refused."""
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        if self.ctx.store.has_group(name):
            raise FsError(errno.EEXIST)
        try:
            self.ctx.store.create_group(name)
        except E.StoreError as exc:
            raise fs_error(exc) from exc
        return GroupDir(self.ctx, self.sub(name), name)

    def rmdir(self, name: str) -> None:
        """``rmdir groups/G``: mqadmin ``deleteSubGroup -r true``
        (``MessageStore.delete_group`` with ``remove_offset``): the subscriptionGroup.json
        entry and the group's offsets go, so the directory does not come back (a group
        with offsets is listed). ENOENT for no group, EROFS on a read-only mount."""
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        try:
            self.ctx.store.delete_group(name, remove_offset=True)
        except E.StoreError as exc:
            raise fs_error(exc) from exc


class GroupDir(Dir):
    """``groups/<group>/``: ``progress.json`` and one directory per topic.

    Errnos: ENOENT for a lookup of any other name; EROFS or EPERM for mkdir/rmdir inside it.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, group: str) -> None:
        super().__init__(ctx, path)
        self.group = group

    def list(self) -> list[str]:
        """``progress.json`` and a directory per topic, without a node each."""
        return ["progress.json", *self.ctx.store.topic_names()]

    def child(self, name: str) -> Node | None:
        """``progress.json``, or the topic's directory when the store has it (not the whole
        :meth:`entries` per name: ``ls`` of a group of 8,000 topics took 106 s)."""
        if name == "progress.json":
            return ProgressFile(self.ctx, self.sub(name), self.group)
        if self.ctx.store.has_topic(name):
            return GroupTopicDir(self.ctx, self.sub(name), self.group, name)
        return None


class ProgressFile(GeneratedFile):
    """``groups/<group>/progress.json``: per queue the broker offset, the consumer offset and
    the lag (``diff``), and ``diffTotal``, as mqadmin consumerProgress shows them
    (``engine.live.progress.consumer_progress``).

    Errnos: EACCES for an open for writing; an engine error's errno (EIO on damage).
    Threads: getattr and open run in a worker thread; reads answer on the trio loop from the bytes
    taken at open (``BytesHandle.read_cached``)."""

    def __init__(self, ctx: Context, path: str, group: str) -> None:
        super().__init__(ctx, path)
        self.group = group

    def content(self) -> bytes:
        """``{"group", "queues": consumer_progress rows, "diffTotal"}`` as JSON."""
        rows = consumer_progress(self.ctx.store, self.group)
        return R.render_json({"group": self.group, "queues": rows, "diffTotal": diff_total(rows)})

    def mtime_ns(self) -> int:
        """The newer of consumerOffset.json's mtime and the newest message's store time."""
        return max(
            self.ctx.file_mtime_ns("consumerOffset.json"),
            ms_to_ns(self.ctx.store.commitlog.last_store_timestamp),
        )


class GroupTopicDir(Dir):
    """``groups/<group>/<topic>/``: one directory per queue of the topic.

    Errnos: ENOENT for a lookup of any other name; EROFS or EPERM for mkdir/rmdir inside it.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, group: str, topic: str) -> None:
        super().__init__(ctx, path)
        self.group, self.topic = group, topic

    def entries(self) -> dict[str, Callable[[], Node]]:
        """A directory per queue of the topic."""
        c = self.ctx
        return {
            str(q): functools.partial(GroupQueueDir, c, self.sub(str(q)), self.group, self.topic, q)
            for q in c.store.queue_ids(self.topic)
        }


class GroupQueueDir(Dir):
    """``groups/<group>/<topic>/<queueId>/``: ``offset`` and ``pending.jsonl``.

    Errnos: ENOENT for a lookup of any other name; EROFS or EPERM for mkdir/rmdir inside it.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, group: str, topic: str, queue_id: int) -> None:
        super().__init__(ctx, path)
        self.group, self.topic, self.queue_id = group, topic, queue_id

    def entries(self) -> dict[str, Callable[[], Node]]:
        """``offset`` and ``pending.jsonl``."""
        c = self.ctx
        return {
            "offset": lambda: OffsetFile(
                c, self.sub("offset"), self.group, self.topic, self.queue_id
            ),
            "pending.jsonl": lambda: PendingFile(
                c, self.sub("pending.jsonl"), self.group, self.topic, self.queue_id
            ),
        }


#: The longest line an ``offset`` file takes: a signed 64-bit decimal and some white space.
OFFSET_LINE_MAX = 64


class OffsetWriteHandle(LineHandle):
    """Collects the written text; each complete line commits its offset, and the unfinished
    one is committed when the open file's last descriptor closes (release), as
    :class:`ProduceHandle` stores its last line: a dup's or a forked child's close never cuts
    a number in two.

    A write is all or nothing: its lines are checked first, then committed in order. A write
    that fails while extending a line earlier writes began refuses that line whole, and every
    later write on this open file fails with the same errno (the rest of the line must not be
    committed as a number of its own). Threads: every method runs in a worker thread; ``lock``
    serialises a FLUSH from another descriptor's close with a write."""

    writable = True
    direct_io = True

    def __init__(self, node: OffsetFile) -> None:
        self.node = node
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.refused = 0  # errno of a refused line this file continued; 0 when fine
        parent = node.path.rsplit("/", 1)[0]
        group_dir = parent.rsplit("/", 2)[0]
        self.invalidates = (f"{parent}/pending.jsonl", f"{group_dir}/progress.json")

    def read(self, offset: int, length: int) -> bytes:
        """The committed offset as it is now (direct I/O)."""
        return self.node.content()[offset : offset + length]

    def write(self, data: bytes) -> int:
        """Commit the offset of each complete line, in order, all or none; keep the unfinished
        line.

        The buffer holds at most :data:`OFFSET_LINE_MAX` bytes (an offset line is short):
        a longer line is refused with EINVAL as soon as it is seen, so the cost of a write is
        linear in its size and another user cannot make the daemon hold memory.
        """
        with self.lock:
            return self._write_lines(data)

    def _write(self, data: bytes) -> int:
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(self.buf) + len(data) > OFFSET_LINE_MAX:
                raise FsError(errno.EINVAL, f"not an offset: a line over {OFFSET_LINE_MAX} bytes")
            self.buf += data
            return len(data)
        rest = data[cut + 1 :]
        if len(rest) > OFFSET_LINE_MAX:
            raise FsError(errno.EINVAL, f"not an offset: a line over {OFFSET_LINE_MAX} bytes")
        lines = (bytes(self.buf) + data[:cut]).split(b"\n")
        offsets = [_offset_of(line) for line in lines if line.strip()]
        for offset in offsets:  # all checked first: all committed or none
            self.node.check_range(offset)
        for offset in offsets:
            self.node.commit(offset)
        self.buf[:] = rest
        return len(data)

    def flush(self) -> None:
        """FUSE FLUSH (each close(2) of a descriptor): the errno of a refused line, or of an
        unfinished one no more bytes can make an offset (not blanks, a sign and digits; or a
        number already past the queue's max offset, or negative); a number that is merely
        unfinished is no error. A refused line is refused for good (:meth:`_refuse_unfinished`:
        logged once). Nothing is committed (:meth:`release` commits it)."""
        with self.lock:
            self._check_refused()
            text = bytes(self.buf).decode("ascii", "replace").strip(" \t\r\n\f\v")
            if not text or text in "+-":
                return
            self._refuse_unfinished(self._check_unfinished)

    def _check_unfinished(self) -> None:
        """FsError(EINVAL) for an unfinished line that is not an offset whatever follows, or
        one already outside the queue's range in the direction more digits take it."""
        offset = _offset_of(bytes(self.buf))
        if offset < 0 or offset > self.node.max_offset():  # digits only make it worse
            self.node.check_range(offset)

    def release(self) -> None:
        """The open file's last descriptor closed: commit the unfinished line, if any
        (FsError for one that is not an offset, which the FUSE layer logs)."""
        with self.lock:
            line, self.buf = bytes(self.buf), bytearray()
            if line.strip() and not self.refused:
                self.node.commit(_offset_of(line))


def _offset_of(line: bytes) -> int:
    """The offset a line of an ``offset`` file says: mqadmin's rule (resetOffsetByTime,
    updateOffset...: the option's value trim()med, then Long.parseLong): ASCII blanks around,
    one sign, decimal digits. FsError(EINVAL) for anything else, or a line over
    :data:`OFFSET_LINE_MAX` bytes."""
    text = line[:OFFSET_LINE_MAX].decode("ascii", "replace").strip(" \t\r\n\f\v")
    if len(line) > OFFSET_LINE_MAX or not re.fullmatch(r"[+-]?[0-9]{1,19}", text):
        raise FsError(errno.EINVAL, f"not an offset: {text[:40]!r}")
    return int(text)


class OffsetFile(GeneratedFile):
    """``groups/<group>/<topic>/<queueId>/offset``: the committed offset and a newline
    (``ConsumerOffsetManager.queryOffset``); writing an integer commits it
    (``commitOffset``, :class:`OffsetWriteHandle`).

    Errnos: EROFS for an open for writing, a truncate or a commit on a read-only mount; EINVAL
    for a truncate to a size other than 0, or a line that is not an offset (or over
    :data:`OFFSET_LINE_MAX` bytes); an engine error's errno for a commit it refuses.
    Threads: getattr, open, write, flush and release run in a worker thread; reads of a
    read-only open answer on the trio loop (``BytesHandle.read_cached``)."""

    def __init__(self, ctx: Context, path: str, group: str, topic: str, queue_id: int) -> None:
        super().__init__(ctx, path)
        self.group, self.topic, self.queue_id = group, topic, queue_id

    def content(self) -> bytes:
        """The committed offset and a newline (-1 when none)."""
        off = self.ctx.store.consumer_offsets.query(self.group, self.topic, self.queue_id)
        return f"{off}\n".encode()

    def stat(self) -> Stat:
        """Writable (0644 as shown), its size, consumerOffset.json's mtime."""
        return Stat(
            self.ctx.write_mode(RW_FILE),
            len(self.content()),
            self.ctx.file_mtime_ns("consumerOffset.json"),
        )

    def max_offset(self) -> int:
        """The queue's max offset (the highest an offset may be)."""
        return self.ctx.store.max_offset(self.topic, self.queue_id)

    def check_range(self, offset: int) -> None:
        """FsError(EINVAL) when ``offset`` is outside the queue's ``[minOffset, maxOffset]``
        (what :meth:`commit` would refuse), before anything is committed."""
        store = self.ctx.store
        lo, hi = store.min_offset(self.topic, self.queue_id), self.max_offset()
        if not lo <= offset <= hi:
            raise FsError(
                errno.EINVAL,
                f"offset {offset} outside [{lo}, {hi}] of {self.topic}/{self.queue_id}",
            )

    def commit(self, offset: int) -> None:
        """Commit ``offset`` for the group (``commitOffset``). EROFS on a read-only mount;
        ENOENT when the group was deleted (a descriptor opened before ``rmdir`` never brings
        it back); an engine error's errno."""
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        try:  # (the group's existence checked with the commit: deleted while this was open)
            self.ctx.store.commit_offset(
                self.group, self.topic, self.queue_id, offset, existing_group=True
            )
        except E.StoreError as exc:
            raise fs_error(exc) from exc

    def open(self, flags: int) -> Handle:
        """A :class:`BytesHandle` for reading, an :class:`OffsetWriteHandle` for writing
        (EROFS on a read-only mount)."""
        if flags & os.O_ACCMODE == os.O_RDONLY:
            return BytesHandle(self.content())
        if self.ctx.read_only:
            raise FsError(errno.EROFS)
        return OffsetWriteHandle(self)

    def truncate(self, size: int) -> None:
        """Size 0 only (``open(O_TRUNC)``): EINVAL otherwise, EROFS on a read-only mount."""
        if size != 0:
            raise FsError(errno.EINVAL)
        if self.ctx.read_only:
            raise FsError(errno.EROFS)


class PendingFile(ViewFile):
    """``groups/<group>/<topic>/<queueId>/pending.jsonl``: the queue's ``messages.jsonl`` from
    the committed offset to the end (what the group has not consumed). Read with direct I/O: a
    commit moves the start.

    Errnos: EACCES for an open for writing; EIO for a read that reaches a damaged record or a
    chunk that cannot be rendered again.
    Threads: getattr and open run in a worker thread (no :meth:`stat_cached`: the start needs
    the consumer offsets); reads answer on the trio loop from the page cache
    (``ViewHandle.read_cached``), else in a worker thread."""

    def __init__(self, ctx: Context, path: str, group: str, topic: str, queue_id: int) -> None:
        super().__init__(ctx, path)
        self.group, self.topic, self.queue_id = group, topic, queue_id

    def view(self) -> View:
        """The queue's ``messages`` view, caught up (may render)."""
        return self.ctx.views.queue("messages", self.topic, self.queue_id, R.render_message)

    def peek(self) -> View | None:
        """The queue's ``messages`` view when cached and caught up, else None."""
        return self.ctx.views.peek("messages", self.topic, self.queue_id)

    def _start(self, v: View) -> int:
        """Where the pending lines start in ``v``: the committed offset's line, or minOffset's
        when expiry passed the committed offset (``getMessage``'s OFFSET_TOO_SMALL, whose next
        offset is minOffset). When the view was sized before that expiry and is held open
        (its old lines cannot be rendered again), the first line after the chunk that holds
        minOffset (:meth:`View.live_byte_offset`)."""
        store = self.ctx.store
        committed = store.consumer_offsets.query(self.group, self.topic, self.queue_id)
        try:
            low = store.min_offset(self.topic, self.queue_id)
        except E.StoreError:
            low = 0
        return v.live_byte_offset(max(committed, low, 0))

    def _pending_stat(self, v: View) -> Stat:
        start = self._start(v)
        # mtime moves with the newest message and with each commit (the start moves)
        mtime = max(ms_to_ns(v.mtime_ms), self.ctx.file_mtime_ns("consumerOffset.json"))
        return Stat(RO_FILE, v.size - start, mtime)

    def stat(self) -> Stat:
        """The bytes from the committed offset's line to the end; mtime moves with messages
        and commits."""
        return self._pending_stat(self.view())

    def stat_cached(self) -> None:
        """Never on the trio loop: the start needs the consumer offsets."""
        return None

    def open(self, flags: int) -> Handle:
        """A direct-I/O :class:`ViewHandle` from the committed offset's line. EACCES for
        writing."""
        check_read_only_open(flags)
        v = self.view()
        h = ViewHandle(v, self._start(v))
        # The same byte offset shows other lines after a commit moves the start, and the page
        # cache is per inode, not per handle: never cache.
        h.keep_cache = False
        h.direct_io = True
        return h


# --------------------------------------------------------------------------------------------
# raw/


class RawHandle(Handle):
    """An open store file; reads are ``pread`` of the real file (byte-identical). While it is
    open, a file that expiry deletes stays readable through it, and its attributes are its
    descriptor's (:meth:`open_fstat`), as a local file system keeps a deleted file open."""

    # (store root, path below it) -> the handles open on it; a lock: worker threads
    _open: ClassVar[dict[tuple[str, str], set[RawHandle]]] = {}
    _open_lock = threading.Lock()

    def __init__(self, root: str, rel: str, keep_cache: bool, direct_io: bool = False) -> None:
        # Never through a link, anywhere below the store root (engine/service/storetree.py).
        self.fd = open_beneath(root, rel, os.O_RDONLY)
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise FsError(errno.EISDIR)
        self.keep_cache = keep_cache
        self.direct_io = direct_io
        self.key = (root, rel)
        with self._open_lock:
            self._open.setdefault(self.key, set()).add(self)

    @classmethod
    def open_fstat(cls, root: str, rel: str) -> os.stat_result | None:
        """``fstat`` of a handle open on the file (one that expiry may have deleted since),
        None when none is open."""
        with cls._open_lock:
            handles = list(cls._open.get((root, rel), ()))
        for h in handles:
            try:
                return os.fstat(h.fd)
            except OSError:  # (closed meanwhile)
                continue
        return None

    def read(self, offset: int, length: int) -> bytes | bytearray:
        """``pread`` of the real file."""
        return os.pread(self.fd, length, offset)

    def read_cached(self, offset: int, length: int) -> bytearray | None:
        """:meth:`read` when its pages are in the page cache
        (:func:`fusefs.base.pread_cached`), else None."""
        return pread_cached(self.fd, length, offset)

    def release(self) -> None:
        """Close the descriptor."""
        with self._open_lock:
            open_ = self._open.get(self.key)
            if open_ is not None:
                open_.discard(self)
                if not open_:
                    del self._open[self.key]
        os.close(self.fd)


class SourceHandle(Handle):
    """An open store file of a source that is not local (a snapshot in object storage): reads
    are range reads through the source's block cache (:mod:`engine.live.objectsource`), in a
    worker thread; a failed or timed-out request is EIO for that read."""

    keep_cache = True  # a snapshot's files never change

    def __init__(self, source: StoreSource, path: str) -> None:
        self.source, self.path = source, path

    def read(self, offset: int, length: int) -> bytes | bytearray:
        """``length`` bytes at ``offset`` (fewer at the end). EIO when the source fails."""
        try:
            return self.source.pread(self.path, length, offset)
        except E.StoreError as exc:
            raise fs_error(exc) from exc
        except FileNotFoundError:
            raise FsError(errno.ENOENT) from None


class RawDir(Dir):
    """``raw/`` and its directories: a read-only mirror of the store's directory tree
    (regular files and directories only, never ``*.tmp``, never through a link:
    ``engine.service.storetree``).

    Errnos: ENOENT for a name that is not a regular file or directory there, or a directory
    that is gone; EROFS or EPERM for mkdir/rmdir.
    Threads: lookup, readdir and getattr run in a worker thread (``trio.to_thread``)."""

    def __init__(self, ctx: Context, path: str, rel: str) -> None:
        super().__init__(ctx, path)
        self.rel = rel
        self.real = os.path.join(ctx.store.root, rel) if rel else ctx.store.root

    def list(self) -> list[str]:
        """The regular files and directories there (no ``*.tmp``), sorted; nothing when
        the directory cannot be opened."""
        source = self.ctx.store.source
        if not source.local:  # object storage: its manifest's names, no links there
            try:
                return sorted(n for n in source.listdir(self.real) if not n.endswith(".tmp"))
            except OSError:
                return []
        # Only regular files and directories: a link or special file is never shown (a store
        # holding one is refused when it opens; this covers one created while mounted).
        try:
            fd = open_beneath(self.ctx.store.root, self.rel, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return []
        try:
            out = []
            for e in os.scandir(fd):
                if e.name.endswith(".tmp"):
                    continue
                if e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False):
                    out.append(e.name)
            return sorted(out)
        finally:
            os.close(fd)

    def child(self, name: str) -> Node | None:
        """The :class:`RawDir` or :class:`RawFile` of ``name``, or None (a link, a special
        file, ``*.tmp``, gone)."""
        real = os.path.join(self.real, name)
        rel = os.path.join(self.rel, name) if self.rel else name
        if name.endswith(".tmp"):
            return None
        source = self.ctx.store.source
        if not source.local:
            if source.isdir(real):
                return RawDir(self.ctx, self.sub(name), rel)
            if source.isfile(real):
                return RawFile(self.ctx, self.sub(name), rel, real)
            return None
        try:
            st = lstat_beneath(self.ctx.store.root, rel)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return RawDir(self.ctx, self.sub(name), rel)
        if stat.S_ISREG(st.st_mode):
            return RawFile(self.ctx, self.sub(name), rel, real)
        return None

    def stat(self) -> Stat:
        """The real directory's mtime and blocks (``du raw/`` is ``du STORE``); ENOENT when
        gone."""
        source = self.ctx.store.source
        if not source.local:
            if not source.isdir(self.real):
                raise FsError(errno.ENOENT)
            return Stat(RO_DIR, 0, source.mtime_ns(self.real))  # (a snapshot: never moves)
        try:
            st = lstat_beneath(self.ctx.store.root, self.rel)
        except OSError:
            raise FsError(errno.ENOENT) from None
        if not stat.S_ISDIR(st.st_mode):
            raise FsError(errno.ENOENT)
        # du raw/ == du STORE; the store's own writes (a checkpoint made, a segment, a queue's
        # directory, config/*.json replaced) move the mtime: asked each time where it changes
        # (a cached second let rsync copy an older time, then see it move on the next run)
        return Stat(
            RO_DIR,
            0,
            st.st_mtime_ns,
            blocks=st.st_blocks,
            attr_timeout=None if self.ctx.frozen else 0.0,
        )


class RawFile(Node):
    """``raw/...``: a store file (CommitLog, ConsumeQueue, IndexFile, checkpoint,
    config/*.json), byte-identical: reads are ``pread`` of the real file (:class:`RawHandle`),
    ``st_blocks`` the real file's (sparse segments stay sparse).

    Errnos: ENOENT when the file is gone (expiry) or is not a regular file; EACCES for an open
    for writing, or when the path is now a link (ELOOP) or unreadable; EISDIR when it is now
    no regular file.
    Threads: getattr and open run in a worker thread; reads answer on the trio loop when the
    pages are in the page cache (``RawHandle.read_cached``), else in a worker thread."""

    def __init__(self, ctx: Context, path: str, rel: str, real: str) -> None:
        super().__init__(ctx, path)
        self.rel, self.real = rel, real

    # Preallocated files: their size never changes, only their bytes (and mtime) do.
    PREALLOCATED = ("commitlog", "consumequeue", "index")
    # While being written, their attributes may be cached this long (seconds): a zero timeout
    # would cost a GETATTR round trip per read() call (tar reads 10 KiB at a time).
    LIVE_SEGMENT_TIMEOUT = 1.0

    def preallocated(self) -> bool:
        """A CommitLog, ConsumeQueue or IndexFile segment (its size never changes)."""
        return self.rel.split(os.sep)[0] in self.PREALLOCATED

    def sealed(self) -> bool:
        """A CommitLog/ConsumeQueue file that will not be written again."""
        parts = self.rel.split(os.sep)
        if parts[0] == "commitlog":
            start = parse_decimal(parts[-1].lstrip("0") or "0") if len(parts[-1]) == 20 else None
            return (
                start is not None and self.ctx.store.commitlog.is_sealed(start)
            ) or self.ctx.frozen
        return self.ctx.frozen

    def stat(self) -> Stat:
        """The real file's size, mtime and blocks; cached for long once sealed, 1 s while a
        preallocated segment is written. ENOENT when gone."""
        source = self.ctx.store.source
        if not source.local:  # a snapshot: never changes; blocks as its stored prefix
            try:
                size, stored = source.file_size(self.real), source.allocated(self.real)
            except OSError:
                raise FsError(errno.ENOENT) from None
            mtime = source.mtime_ns(self.real)
            return Stat(RO_FILE, size, mtime, live=False, blocks=(stored + 511) // 512)
        # the mtimes of files written through their mappings since the last look, set to now
        # first (a backup's quick check compares size and mtime)
        self.ctx.store.touch_written()
        try:
            st = lstat_beneath(self.ctx.store.root, self.rel)
        except OSError:
            # deleted (expiry) while a reader holds it open: that reader goes on reading it
            kept = RawHandle.open_fstat(self.ctx.store.root, self.rel)
            if kept is None:
                raise FsError(errno.ENOENT) from None
            st = kept
        if not stat.S_ISREG(st.st_mode):
            raise FsError(errno.ENOENT)
        # st_blocks of the real file: preallocated segments are sparse, and `du`, `tar -S`
        # and `cp --sparse` should see that.
        sealed = self.sealed()
        timeout = None if sealed or not self.preallocated() else self.LIVE_SEGMENT_TIMEOUT
        return Stat(
            RO_FILE,
            st.st_size,
            st.st_mtime_ns,
            live=not sealed,
            blocks=st.st_blocks,
            attr_timeout=timeout,
        )

    def open(self, flags: int) -> Handle:
        """A :class:`RawHandle` (page cache kept once sealed; direct I/O for files
        rewritten at any size). EACCES for writing or a link; ENOENT when gone."""
        check_read_only_open(flags)
        source = self.ctx.store.source
        if not source.local:
            if not source.isfile(self.real):
                raise FsError(errno.ENOENT)
            return SourceHandle(source, self.real)
        try:
            # checkpoint and config/*.json are rewritten at any size: never page-cached
            return RawHandle(
                self.ctx.store.root,
                self.rel,
                keep_cache=self.sealed(),
                direct_io=not self.preallocated() and not self.sealed(),
            )
        except OSError as exc:  # ENOENT, or ELOOP/EACCES: a link or special file now
            raise FsError(errno.ENOENT if exc.errno == errno.ENOENT else errno.EACCES) from None
