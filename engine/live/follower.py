"""Follow a store that another process writes (a slave's reput, read-only).

A read-only :class:`engine.store.MessageStore` whose store is held by a live writer (a RocketMQ
broker or another rmqfs: the ``lock`` file carries its POSIX lock) opens in follower mode: it
trusts the writer's files instead of recovering them (the writer's ``abort`` file is there
because it is running, not because it crashed), and :meth:`Follower.refresh` then advances what
readers see, in one step, the way a RocketMQ slave's ``ReputMessageService`` follows a
CommitLog:

1. the files: new and deleted CommitLog segments (``commitlog/``), ConsumeQueue files and
   directories (new topics and queues), IndexFiles (``index/``, headers re-read), and the
   ``config/*.json`` files when the writer rewrote them (topics, consumer offsets, groups);
2. the reput: the writer's new ConsumeQueue units (after each queue's visible end) are read,
   sorted by commitLogOffset, and taken as long as they tile the CommitLog from the visible
   end without a hole (a unit ends where the next begins; a blank END_OF_FILE record moves to
   the next segment; records that get no unit, PREPARED/ROLLBACK transaction halves,
   inner-batch and BatchCQ records, are walked over one by one). Each taken unit's record must
   agree with it (TOTALSIZE = size, MAGIC, PHYSICALOFFSET = commitLogOffset, QUEUEID and
   QUEUEOFFSET = the unit's queue and position) and have a good body CRC. A writer writes the
   record, then its unit (``ReputMessageService``), so a unit names a complete record; the
   checks catch torn units and damage. The visible end stops at the first record without its
   unit. The tiling is columnar (numpy over units); the records are checked by the compiled
   decoder every reader of units uses (``engine.read.columnar.decode_units``), and the
   records between units by the CommitLog's own walk (``CommitLog.scan_raw``, over the one
   record step), so the follower holds no record rule of its own.

Why follow the writer's ConsumeQueues instead of dispatching in memory: queue offsets are then
exactly the broker's (units are what its consumers pull), nothing has to be held in memory per
message however long the follower runs, and the lookups (by offset, by time) read the same
units the broker serves. The record carries its own queueOffset, so the two would agree; a
broker's ConsumeQueue may however lag its CommitLog by its reput, and the follower then lags
with it (``behind_bytes`` says by how much), exactly as a consumer of that broker would.

Visible state (what snapshots and views read) changes only inside :meth:`Follower.refresh`,
under the store's ``put_lock``: ``commitlog.max_offset`` (the visible CommitLog end, a record
boundary), each ConsumeQueue's ``min_offset``/``max_offset``, ``commitlog.min_offset`` (the
oldest segment still on disk) and the config managers. Nothing is ever written to the store.
Files the writer deletes stay readable through descriptors the follower still holds; those are
closed a few refreshes later, once no reader can still be using them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CorruptRecordError, StoreError
from ..format.checkpoint import StoreCheckpoint
from ..format.config import (
    LMQ_CONSUMER_OFFSET_FILE,
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
    topic_path_problem,
)
from ..format.consumequeue import (
    ConsumeQueue,
    queue_dir_id,
)
from ..format.mappedfile import FileQueue
from ..format.message import (
    INNER_BATCH_FLAG,
    RECORD_HEAD,
    STORE_TIMESTAMP_END_MAX,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    is_lmq,
    read_store_timestamp,
    transaction_type,
)
from ..read import kernel
from ..read.columnar import UNIT_DTYPE, CommitLogWindow, decode_records, decode_units
from ..service import recovery
from ..service.lock import lock_holder

if TYPE_CHECKING:
    from ..store import MessageStore

log = logging.getLogger(__name__)

MAX_NEW_UNITS = 1 << 20  # units of one queue taken per refresh
#: a store of at most this many queues has every queue asked for new units each refresh; past
#: it, only those of the records written since the last (see Follower._queues_to_ask)
ASK_ALL_UP_TO = 64
#: CommitLog bytes past the visible end whose records name the queues a refresh asks
WALK_BYTES = 4 << 20
#: refreshes between two full passes on a store of more than ASK_ALL_UP_TO queues (10 s)
FULL_PASS_EVERY = 100
BRIDGE_MAX = 10_000  # unit-less records walked one by one per refresh
BRIDGE_CHUNK = 64 * 1024  # bytes the bridge reads at a time (records past it are read whole)
TAIL_MAX = 10_000  # records past the last unit walked to measure the writer's lead
CHECK_CHUNK = 16_384  # records checked per decoder pass
RETRIES = 8  # decoder passes over a range after bad units, before one unit at a time
_UNIT_CHECK_COLUMNS = ("topic", "queueId", "queueOffset")  # what a unit says of its record
# A ConsumeQueue unit (ConsumeQueue.CQ_STORE_UNIT_SIZE, see engine.format.consumequeue) as a
# numpy record, for the columnar tiling.
_UNIT_DT = UNIT_DTYPE


def _file_sig(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class Follower:
    """The reput of a follower store (see the module docstring).

    Args:
        store: a read-only MessageStore opened with ``follow=True`` (it calls
            :meth:`open` itself).

    Attributes:
        writer_end: CommitLog offset just after the last complete record the writer has
            written (bytes; >= the visible end ``store.commitlog.max_offset``).
        writer_store_timestamp: store time (epoch ms) of the writer's newest complete record.
        waiting_since_ms: store time of the oldest complete record not visible yet (its unit
            is missing), 0 when nothing waits.
        refreshed_ms: when the last refresh ended (epoch ms).
        refreshes: how many refreshes ran.
    """

    def __init__(self, store: MessageStore):
        self.store = store
        self.writer_end = 0
        self.writer_store_timestamp = 0
        self.waiting_since_ms = 0
        self.refreshed_ms = 0
        self.refreshes = 0
        self._config_sigs: dict[str, tuple] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._refresh_lock = threading.Lock()
        self._opened_queue = False
        # queue -> the CommitLog minOffset its min_offset was last corrected to: corrected
        # again only when that moves or its files change (thousands of queues a refresh)
        self._min_corrected: dict[tuple[str, int], int] = {}
        self._lmq = False  # whether a queue of an LMQ was opened (_queues_to_ask)
        self.listeners: list = []  # callables(dict of what changed) run after a refresh

    # -- open ---------------------------------------------------------------------------------
    def open(self) -> None:
        """Set the visible state from the writer's files, then :meth:`refresh`.

        The visible CommitLog end starts after the newest record a ConsumeQueue points at (the
        writer's reput position, where normal recovery starts too); units the writer adds
        later, also below that point (a queue whose units of the last put were not written
        yet), are checked by the refresh.
        """
        s = self.store
        cl = s.commitlog
        for name in ("topics.json", "consumerOffset.json", "subscriptionGroup.json"):
            self._config_sigs[name] = self._config_sig(name)
        self._lmq = any(is_lmq(topic) for topic, _ in s.consume_queues)
        # The writer's units are trusted as normal recovery trusts them, but for each queue's
        # last one, which is compared with its record (a unit being written is dropped, in
        # memory); the reput goes on from the end of the newest record a unit names.
        recovery.check_queue_tails(s)
        # (end of the newest record a unit names, its offset)
        newest = max(
            (
                (cq.max_physic_offset, cq.last_commitlog_offset)
                for cq in s.consume_queues.values()
                if cq.max_offset > cq.min_offset
            ),
            default=(cl.min_offset, -1),
        )
        start = max(newest[0], cl.min_offset)
        cl.max_offset = start
        if start == newest[0] and newest[1] >= 0:
            # the store time of the newest visible record (status.json's lastStoreTimestamp,
            # the views' mtimes), as recovery sets it: the refresh sets it only for records it
            # takes past this point, and the writer may store nothing more for hours
            ts = self._store_ts_at(newest[1])
            if ts:
                cl.last_store_timestamp = ts
                s.dispatched_store_timestamp = ts
        self.writer_end = start
        self.refresh()
        for key, cq in list(s.consume_queues.items()):
            cq.correct_min_offset(cl.min_offset)
            self._min_corrected[key] = cl.min_offset

    def attach(self) -> None:
        """Follow from the state normal recovery left (a clean store no one wrote at open)."""
        for name in ("topics.json", "consumerOffset.json", "subscriptionGroup.json"):
            self._config_sigs[name] = self._config_sig(name)
        self._lmq = any(is_lmq(topic) for topic, _ in self.store.consume_queues)
        self.writer_end = self.store.commitlog.max_offset

    # -- the loop -----------------------------------------------------------------------------
    def start(self, interval: float = 0.1) -> None:
        """Refresh every ``interval`` seconds in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.refresh()
                except Exception:  # keep following; the next round retries
                    log.exception("follower refresh failed")

        self._thread = threading.Thread(target=loop, name="rmq-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the refresh thread (if any)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- one step -----------------------------------------------------------------------------
    def refresh(self) -> dict:
        """Follow the writer one step: files, configs, then the reput.

        Returns what changed: ``{"records": n, "deleted": [paths], "configs": [names]}``
        (paths relative to the store root). Raises OSError only for the store directory
        itself; a file that vanishes meanwhile is skipped.
        """
        with self._refresh_lock:
            s = self.store
            changes: dict[str, Any] = {"records": 0, "deleted": [], "configs": [], "topics": []}
            self.refreshes += 1
            # read now, shown after the reput below: a config the writer wrote after a put
            # (a consumer offset past its messages) is never visible before those messages
            configs = self._follow_configs()
            cl = s.commitlog
            try:
                s.checkpoint = StoreCheckpoint.read(s.checkpoint_path)
            except (OSError, ValueError, StoreError):
                pass
            with s.put_lock:
                old_min = cl.min_offset
                deleted = self._follow_file_queue(cl.files)
                cl.file_size = cl.files.file_size
                # the writer deletes ConsumeQueue files a little after the segments: their
                # deletion is also looked for on each full pass (_full_pass), and at once when
                # it rewrote topics.json (a topic deleted: deleteTopic removes its queues'
                # directories)
                topics_changed = any(name == "topics.json" for name, _, _ in configs)
                if cl.min_offset != old_min or deleted or topics_changed or self._full_pass():
                    changes["deleted"] += [os.path.relpath(p, s.root) for p in deleted]
                    if cl.max_offset < cl.min_offset:
                        cl.max_offset = cl.min_offset
                    corrected = self._follow_queue_files(changes)
                else:
                    corrected = []
            for _ in range(8):  # again at once when the writer started new queues
                self._opened_queue = False
                changes["records"] += self._reput()
                if not self._opened_queue:
                    break
            with s.put_lock:
                for name, mgr_attr, mgr in configs:
                    setattr(s, mgr_attr, mgr)
                    changes["configs"].append(name)
            if corrected:
                # again after the reput: a queue whose every visible unit had expired stopped
                # at its old max_offset above; the writer's minOffset is past it, in units
                # visible now
                with s.put_lock:
                    for cq in corrected:
                        cq.correct_min_offset(cl.min_offset)
            if s.index_service is not None:
                changes["deleted"] += [os.path.relpath(p, s.root) for p in s.index_service.follow()]
            if self.refreshes % 10 == 0:  # the writer may have stopped, or been restarted
                s.writer_pid = lock_holder(s.root)
            self.refreshed_ms = int(time.time() * 1000)
        if changes["records"] or changes["deleted"] or changes["configs"] or changes["topics"]:
            for listener in self.listeners:
                try:
                    listener(changes)
                except Exception:  # a listener never stops the follower
                    log.exception("follower listener failed")
        return changes

    @property
    def behind_bytes(self) -> int:
        """CommitLog bytes the writer has written completely that are not visible yet."""
        return max(0, self.writer_end - self.store.commitlog.max_offset)

    def behind_ms(self, now_ms: int | None = None) -> int:
        """How long (ms) the oldest complete record that is not visible yet has waited since
        the writer stored it (0 when the follower is caught up with the writer's files)."""
        if not self.waiting_since_ms or not self.behind_bytes:
            return 0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0, now_ms - self.waiting_since_ms)

    # -- files --------------------------------------------------------------------------------
    def _follow_queue_files(self, changes: dict[str, Any]) -> list[ConsumeQueue]:
        """Drop the ConsumeQueue files (and queues, topics) the writer deleted, adding them to
        ``changes``, and move each queue's min_offset past units whose records expired
        (``correctMinOffset``) where the CommitLog's minOffset moved since it was last
        corrected or its files changed: here, under the put lock that dropped the segments
        (the caller holds it), so that no reader is ever handed a unit whose record was just
        deleted. Returns the queues corrected."""
        s = self.store
        cl = s.commitlog
        corrected = []
        for key, cq in s.file_queues():  # (a RocksDB store has no follower)
            gone = [seg.path for seg in cq.follow_files(add=False)]
            changes["deleted"] += [os.path.relpath(p, s.root) for p in gone]
            if cq.writer_deleted():
                # the writer deleted the topic (or the queue): it goes here too, and a topic
                # made again under the name starts afresh (_queue), its views too (listeners
                # drop what they rendered of it)
                del s.consume_queues[key]
                self._min_corrected.pop(key, None)
                if key[0] not in changes["topics"]:
                    changes["topics"].append(key[0])
                continue
            if gone or self._min_corrected.get(key) != cl.min_offset:
                cq.correct_min_offset(cl.min_offset)
                self._min_corrected[key] = cl.min_offset
                corrected.append(cq)
        return corrected

    def _follow_file_queue(self, fq: FileQueue, add: bool = True) -> list[str]:
        """Make ``fq.segments`` match the directory
        (:meth:`engine.format.mappedfile.FileQueue.refresh`); a dropped file's descriptor
        closes once no reader holds its segment (:class:`engine.format.mappedfile.Segment`).
        Returns the deleted paths."""
        return [seg.path for seg in fq.refresh(add)]

    def _config_sig(self, name: str) -> tuple[tuple[int, int, int] | None, ...]:
        """What says a config file changed: its and its ``.bak``'s size, mtime and inode;
        for consumerOffset.json those of lmqConsumerOffset.json too, which its manager
        reads beside it (a broker with enableLmq rewrites only that one)."""
        config = os.path.join(self.store.root, "config")
        names = [name]
        if name == "consumerOffset.json":
            names.append(LMQ_CONSUMER_OFFSET_FILE)
        return tuple(
            _file_sig(os.path.join(config, n) + bak) for n in names for bak in ("", ".bak")
        )

    def _follow_configs(self) -> list:
        """Reload the config files the writer rewrote (atomically: a file that does not parse
        is skipped until the next refresh). Returns ``[(name, store attribute, manager)]``."""
        out = []
        config_dir = os.path.join(self.store.root, "config")
        for name, attr, cls in (
            ("topics.json", "topic_config", TopicConfigManager),
            ("consumerOffset.json", "consumer_offsets", ConsumerOffsetManager),
            ("subscriptionGroup.json", "subscription_groups", SubscriptionGroupManager),
        ):
            sig = self._config_sig(name)
            if sig == self._config_sigs.get(name):
                continue
            try:
                mgr = cls(config_dir, True)
            except (OSError, ValueError, StoreError) as exc:
                log.debug("follower: %s not reloaded yet: %s", name, exc)
                continue
            self._config_sigs[name] = sig
            out.append((name, attr, mgr))
        return out

    def _discover_queues(self, topic: str) -> int:
        """Open every queue directory of ``topic`` the writer created since; returns how
        many (a new topic's queues usually all start within one put)."""
        try:
            names = os.listdir(os.path.join(self.store.root, "consumequeue", topic))
        except OSError:
            return 0
        n = 0
        for name in names:
            q = queue_dir_id(name)  # "²".isdigit() is True, but int("²") raises
            if q is not None and (topic, q) not in self.store.consume_queues:
                n += self._queue(topic, q) is not None
        return n

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The store's ConsumeQueue of a queue, opened when the writer created its directory
        since (None while it has not)."""
        s = self.store
        key = (topic, queue_id)
        if key in s.consume_queues:
            return s.file_queue(key)
        qdir = os.path.join(s.root, "consumequeue", topic, str(queue_id))
        if not os.path.isdir(qdir):
            return None
        try:
            # the writer preallocates its files: a lone file's size is the file size
            cq = ConsumeQueue(qdir, topic, queue_id, s.cq_file_size, True)
        except (ValueError, CorruptRecordError, OSError) as exc:
            log.debug("follower: queue %s/%d not readable yet: %s", topic, queue_id, exc)
            return None
        cq.max_offset = cq.min_offset  # units become visible through the reput only
        with s.put_lock:
            s.consume_queues[key] = cq
        self._lmq = self._lmq or is_lmq(topic)
        return cq

    # -- reput --------------------------------------------------------------------------------
    def _reput(self) -> int:
        """Advance the visible end over complete records whose units the writer has written
        (see the module docstring). Returns the number of units made visible.

        Columnar: the new units of every queue are read in one pass per queue, sorted by
        CommitLog offset and must tile the CommitLog from the visible end (a unit ends where
        the next begins); their records are checked by the compiled decoder
        (:meth:`_check_records`: TOTALSIZE equals the unit's size, MAGIC, PHYSICALOFFSET,
        topic, QUEUEID and QUEUEOFFSET equal the unit's, the layout and the body CRC); only the
        gaps of the tiling (a blank record at a segment end, records that get no unit, or a
        unit not written yet) are walked one by one (:meth:`_bridge`).
        """
        s = self.store
        cl = s.commitlog
        start = cl.max_offset
        if not (self._full_pass() or self._lmq) and not self._written_after(start):
            # nothing past the visible end: no queue has a unit to take but a late one (another
            # queue's unit of a record visible already: a 4.x MultiDispatch one), which the
            # full pass takes; thousands of queues cost a read each. (A broker writes an LMQ's
            # units just after the record's own: an LMQ store's queues are asked every step.)
            self.writer_end = start
            self.waiting_since_ms = 0
            self._confirm_flushed()
            return 0
        queues = self._queues_to_ask(start)
        parts = []
        for i, cq in enumerate(queues):
            raw = cq.written_units(MAX_NEW_UNITS, self._follow_file_queue)
            if raw:
                parts.append((i, cq.max_offset, np.frombuffer(raw, _UNIT_DT)))
        if parts:
            off = np.concatenate([u["off"] for _, _, u in parts]).astype(np.int64)
            size = np.concatenate([u["size"] for _, _, u in parts]).astype(np.int64)
            qoff = np.concatenate([np.arange(b, b + len(u), dtype=np.int64) for _, b, u in parts])
            qidx = np.concatenate([np.full(len(u), i, dtype=np.int64) for i, _, u in parts])
        else:
            off = size = qoff = qidx = np.zeros(0, dtype=np.int64)
        end_of = off + size
        order = np.argsort(off, kind="stable")
        # the tiling, from the visible end
        pos = start
        so, se = off[order], end_of[order]
        ahead = so >= start
        so_a, se_a = so[ahead], se[ahead]
        if len(so_a) > 1:
            breaks = np.flatnonzero(so_a[1:] != se_a[:-1])
        else:
            breaks = np.zeros(0, dtype=np.int64)
        i, n = 0, len(so_a)
        while True:
            if i < n and so_a[i] == pos:
                k = int(np.searchsorted(breaks, i))  # the first break at or after i
                last = int(breaks[k]) if k < len(breaks) else n - 1
                pos = int(se_a[last])
                i = last + 1
                continue
            if i < n and so_a[i] < pos:  # a unit overlapping what is taken: torn or foreign
                break
            bridged = self._bridge(pos, int(so_a[i]) if i < n else None)
            if bridged == pos:
                break
            pos = bridged
        # header and CRC checks of everything taken (and of units below the start, which a
        # queue may get late: they are complete records already inside the visible end)
        take = off < pos
        valid = self._check_records(off, size, qoff, qidx, queues, take)
        # a bad unit in the tiled range ends it there; a bad late unit (below the start) only
        # stops its own queue (the per-queue prefix below)
        bad_ahead = off[~valid & (off >= start)]
        if len(bad_ahead):
            pos = min(pos, int(bad_ahead.min()))
        take = (off < pos) & valid
        # per queue, the taken units are a prefix of its new ones (units are in CommitLog order)
        counts: dict[int, int] = {}
        at = 0
        for i, _base, u in parts:
            t = take[at : at + len(u)]
            k = int(np.argmin(t)) if not t.all() else len(u)
            counts[i] = k
            at += len(u)
        # how far the writer is: its units and then its CommitLog beyond them
        writer_end = max(pos, int(end_of.max()) if len(end_of) else 0)
        writer_end, last_ts = self._writer_tail(writer_end)
        self.writer_end = writer_end
        if last_ts:
            self.writer_store_timestamp = last_ts
        self.waiting_since_ms = self._store_ts_at(pos) if writer_end > pos else 0
        made = 0
        with s.put_lock:
            for i, k in counts.items():
                if k:
                    cq = queues[i]
                    hit = np.flatnonzero(qidx == i)[k - 1]
                    cq.max_offset += k
                    cq.last_commitlog_offset = int(off[hit])
                    cq.max_physic_offset = int(end_of[hit])
                    made += k
            if pos > cl.max_offset:
                taken = off[take]
                newest = int(taken.max()) if len(taken) else None
                cl.max_offset = pos
                ts = self._store_ts_at(newest) if newest is not None else 0
                if ts:
                    cl.last_store_timestamp = ts
                    s.dispatched_store_timestamp = ts
        self._confirm_flushed()
        return made

    def _queues_to_ask(self, start: int) -> list[ConsumeQueue]:
        """The queues whose new units this refresh reads: on a store of more than
        :data:`ASK_ALL_UP_TO` queues, those of the records the writer wrote after ``start``
        when they all lie in the next :data:`WALK_BYTES` of its segment (walked and their
        topics and queueIds decoded by the compiled core: a refresh after a few puts reads a
        few queues, not thousands; none when no record there is complete); every queue where
        more than the window was written or the segment ends there (its blank record), on a
        full pass (:meth:`_full_pass`: a
        late unit, another queue's unit of a record visible already, a 4.x MultiDispatch
        one), on a store with an LMQ (a record's units in queues it does not name) or a
        DLedger CommitLog."""
        s = self.store
        k = kernel.load()
        cl = s.commitlog

        def every() -> list[ConsumeQueue]:
            return [cq for _key, cq in s.file_queues()]

        if (
            len(s.consume_queues) <= ASK_ALL_UP_TO
            or self._full_pass()
            or k is None
            or cl.entries is not None
            or self._lmq
        ):
            return every()
        fs = cl.file_size
        data = cl.files.read(start, min(WALK_BYTES, fs - start % fs))
        starts, sizes, kind, _ = k.walk(np.frombuffer(data, np.uint8))
        if kind == "blank" or (kind != "zeros" and len(data) == WALK_BYTES):
            # the segment ends (its records may go on in the next), or more than the window
            # was written: a busy writer, whose step asks every queue once for all of it
            return every()
        # (a record cut short past these, one being written or left torn by a crash, or
        # damage, is not complete: nothing to take there yet)
        window = CommitLogWindow(data, start, fs)
        offs = starts + start
        while True:
            if not len(offs):
                return []
            try:
                named = decode_records(
                    window, offs, sizes, columns=("topic", "queue"), check_crc=False
                )
                break
            except CorruptRecordError as exc:  # the records before it: a writer's torn tail
                if exc.offset is None:
                    return every()
                keep = offs < exc.offset
                if keep.all():
                    return every()
                offs, sizes = offs[keep], sizes[keep]
        pairs = named.to_pydict()  # (a few records: each refresh reads what was written since)
        asked = []
        for key in dict.fromkeys(zip(pairs["topic"], pairs["queue"])):
            cq = s.file_queue(key)
            if cq is not None:
                asked.append(cq)
        return asked

    def _full_pass(self) -> bool:
        """Whether this refresh asks every queue for new units and lists every queue's files
        (the writer's deletions): once a second (every tenth refresh), on a store of more than
        :data:`ASK_ALL_UP_TO` queues every :data:`FULL_PASS_EVERY` refreshes (a read and a
        listing a queue: at 8,000 queues a quarter of a second of CPU)."""
        every = 10 if len(self.store.consume_queues) <= ASK_ALL_UP_TO else FULL_PASS_EVERY
        return self.refreshes % every == 0

    def _confirm_flushed(self) -> None:
        """What the writer says it has synced (its checkpoint), within what is visible, as the
        CommitLog's flushed position."""
        s = self.store
        cl = s.commitlog
        with s.put_lock:
            confirmed = s.checkpoint.confirm_phy_offset
            cl.flushed_where = min(cl.max_offset, confirmed) if confirmed > 0 else cl.max_offset

    def _written_after(self, pos: int) -> bool:
        """Whether the writer has written anything at CommitLog offset ``pos`` (a record's
        first bytes: TOTALSIZE and MAGICCODE are never zero)."""
        head = self.store.commitlog.files.read(pos, RECORD_HEAD.size)
        return len(head) == RECORD_HEAD.size and head != bytes(RECORD_HEAD.size)

    def _bridge(self, pos: int, target: int | None) -> int:
        """Walk records from ``pos`` that need no unit of a known queue: a blank record at a
        segment end (to the next segment, once the follower has its file), PREPARED/ROLLBACK
        transaction records, inner-batch or BatchCQ records. Stops at ``target``, at a record
        whose unit is missing (opening its queue when the writer created the directory since;
        the next refresh takes it), or at anything incomplete. Returns where it stopped.
        The walk is the CommitLog's own (:meth:`engine.format.commitlog.CommitLog.scan_raw`,
        body CRCs checked), read in :data:`BRIDGE_CHUNK` pieces."""
        s = self.store
        cl = s.commitlog
        if not self._written_after(pos):
            return pos  # nothing written after pos yet
        walk = cl.scan_raw(pos, check_crc=True, end=target, read_size=BRIDGE_CHUNK)
        for n, (_, _, phys, total, topic, queue_id, _, sys_flag) in enumerate(walk, 1):
            needs_unit = not (
                transaction_type(sys_flag) in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
                or sys_flag & INNER_BATCH_FLAG
                or topic in s.batch_cq_topics
            )
            problem = topic_path_problem(topic) if needs_unit else None
            if problem is not None:
                # no directory can hold its ConsumeQueue (see dispatch.dispatch)
                s.skip_topic(topic, f"record: {problem}")
            elif needs_unit:
                if (topic, queue_id) not in s.consume_queues and self._discover_queues(topic):
                    self._opened_queue = True  # new queues: the reput runs again
                return phys
            pos = phys + total
            if n >= BRIDGE_MAX:
                return pos
        return max(pos, cl.scan_end)  # past a blank record to the next segment

    def _check_records(
        self,
        off: np.ndarray,
        size: np.ndarray,
        qoff: np.ndarray,
        qidx: np.ndarray,
        queues: list[ConsumeQueue],
        take: np.ndarray,
    ) -> np.ndarray:
        """Check the records of the units where ``take`` is set, as every reader of units
        checks them: the compiled decoder (the record is whole in its file, magic, TOTALSIZE =
        the unit's size, PHYSICALOFFSET = its commitLogOffset, the layout, the body CRC:
        :func:`engine.read.columnar.decode_records`, one call for the units of every queue in
        a range of at most CHECK_CHUNK records of one CommitLog file), then the record's topic,
        queueId and queueOffset against the unit's queue and place, column-wise; an LMQ's units
        name other topics' records (:func:`engine.read.columnar.decode_units` checks them).
        Returns a bool array over all units: False for a unit whose record does not agree with
        it (True for units not checked)."""
        valid = np.ones(len(off), dtype=bool)
        idx = np.flatnonzero(take)
        if not len(idx):
            return valid
        cl = self.store.commitlog
        idx = idx[np.argsort(off[idx], kind="stable")]
        fs = cl.files.file_size
        seg_of = off[idx] // fs
        for seg_no in np.unique(seg_of):
            in_seg = idx[seg_of == seg_no]
            for k in range(0, len(in_seg), CHECK_CHUNK):  # bounded: one range's bytes
                sel = in_seg[k : k + CHECK_CHUNK]
                lo = int(off[sel].min())
                hi = int((off[sel] + size[sel]).max())
                window = CommitLogWindow(cl.files.read(lo, hi - lo), lo, fs)
                lmq = np.array([is_lmq(queues[q].topic) for q in qidx[sel].tolist()], bool)
                for q in np.unique(qidx[sel[lmq]]).tolist():
                    mine = sel[lmq][qidx[sel[lmq]] == q]
                    valid[mine] = _agree(window, queues[q], off[mine], size[mine], qoff[mine])
                rest = sel[~lmq]
                if len(rest):
                    topic = np.array([queues[q].topic for q in qidx[rest].tolist()], object)
                    qid = np.array([queues[q].queue_id for q in qidx[rest].tolist()], np.int64)
                    valid[rest] = _records_agree(
                        window, off[rest], size[rest], qoff[rest], topic, qid
                    )
                    # a unit at another topic's record may be a 4.x broker's MultiDispatch
                    # one (the record names the queue): asked of decode_units, as readers do
                    odd = rest[~valid[rest]]
                    for q in np.unique(qidx[odd]).tolist():
                        mine = odd[qidx[odd] == q]
                        valid[mine] = _agree(window, queues[q], off[mine], size[mine], qoff[mine])
        return valid

    def _writer_tail(self, pos: int) -> tuple[int, int]:
        """``(end, storeTimestamp)`` of the complete records the writer has after ``pos``
        (records its ConsumeQueues do not point at yet), walking at most TAIL_MAX of them."""
        cl = self.store.commitlog
        end, ts = pos, 0
        if not self._written_after(pos):
            return end, ts  # the usual case: nothing after the units (no 8 MB scan read)
        for n, (buf, at, phys, total, *_) in enumerate(cl.scan_raw(pos, check_crc=True), 1):
            end = phys + total
            ts = read_store_timestamp(buf, at)
            if n >= TAIL_MAX:
                break
        else:
            end = max(end, cl.scan_end)
        return end, ts

    def _store_ts_at(self, pos: int) -> int:
        """STORETIMESTAMP of the record at ``pos`` (0 when none can be read there)."""
        head = self.store.commitlog.files.read(pos, STORE_TIMESTAMP_END_MAX)
        if len(head) < STORE_TIMESTAMP_END_MAX:
            return 0
        return read_store_timestamp(head, 0)


def _records_agree(
    window: CommitLogWindow,
    off: np.ndarray,
    size: np.ndarray,
    qoff: np.ndarray,
    topic: np.ndarray,
    qid: np.ndarray,
) -> np.ndarray:
    """Whether each unit (commitLogOffset ``off``, ``size``; its queue's ``topic`` and ``qid``,
    its queue offset ``qoff``; in CommitLog order) names a good record of its queue and place
    in ``window``: one decode of them all (:func:`engine.read.columnar.decode_records`), which
    stops at the first record that is not one: that unit is False, the units before it are
    decoded again, then those after it; past RETRIES refusals, one unit at a time."""
    n = len(off)
    ok = np.zeros(n, dtype=bool)
    at, end, tries = 0, n, 0  # decode [at, end); ``end`` < n: the unit refused last
    while at < n:
        if at == end:  # the refused unit stays False
            at, end = at + 1, n
            continue
        step = end - at if tries < RETRIES else 1
        part = slice(at, at + step)
        try:
            batch = decode_records(window, off[part], size[part], _UNIT_CHECK_COLUMNS)
        except CorruptRecordError as exc:
            bad = at if exc.offset is None else at + int(np.searchsorted(off[part], exc.offset))
            end, tries = min(bad, at + step - 1), tries + 1  # first the units before it
            continue
        ok[part] = (
            (batch.column(0).to_numpy(zero_copy_only=False) == topic[part])
            & (batch.column(1).to_numpy() == qid[part])
            & (batch.column(2).to_numpy() == qoff[part])
        )
        at += step
    return ok


def _agree(
    window: CommitLogWindow,
    cq: ConsumeQueue,
    off: np.ndarray,
    size: np.ndarray,
    qoff: np.ndarray,
) -> np.ndarray:
    """Whether each unit of ``cq`` (an LMQ's, or one whose record is another topic's: a 4.x
    MultiDispatch unit or damage; commitLogOffset ``off``, ``size``, queue offset
    ``qoff``, in CommitLog order) names its record in ``window`` (:func:`engine.read.columnar.decode_units`
    builds no column, only checks). The decoder stops at the first unit that does not: that
    one is False and the rest are checked again after it; past RETRIES of them, one by one."""
    ok = np.ones(len(off), dtype=bool)
    units = np.zeros(len(off), dtype=UNIT_DTYPE)
    units["off"], units["size"] = off, size
    at, tries = 0, 0
    while at < len(off):
        step = len(off) - at if tries < RETRIES else 1
        part = slice(at, at + step)
        try:
            decode_units(window, cq.topic, cq.queue_id, units[part], qoff[part], columns=())
        except CorruptRecordError as exc:
            bad = at if exc.offset is None else at + int(np.searchsorted(off[part], exc.offset))
            bad = min(bad, at + step - 1)
            ok[bad] = False
            at, tries = bad + 1, tries + 1
            continue
        at += step
    return ok
