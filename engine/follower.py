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
2. the reput: the CommitLog is walked from the visible end with the recovery scan
   (:meth:`engine.commitlog.CommitLog.scan_raw`: size, magic, body CRC, PHYSICALOFFSET and
   layout checked, so a record the writer is still writing is never taken), and each record is
   made visible only once the *writer's own* ConsumeQueue unit for it is on disk and describes
   it exactly (commitLogOffset and size equal to the record's, at the record's
   queueId/queueOffset). The visible end stops at the first record that lacks its unit.

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
import re
import struct
import threading
import time

from .checkpoint import StoreCheckpoint
from .config import ConsumerOffsetManager, SubscriptionGroupManager, TopicConfigManager
from .consumequeue import CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue
from .errors import CorruptRecordError, StoreError
from .mappedfile import FileQueue, Segment
from .message import INNER_BATCH_FLAG, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE

log = logging.getLogger(__name__)

_NAME = re.compile(r"^\d{20}$")
# Offsets of STORETIMESTAMP in a record (MessageDecoder): after an IPv4 / IPv6 born host.
_STORE_TS_V4, _STORE_TS_V6 = 56, 68
_BORNHOST_V6_FLAG = 0x10  # MessageSysFlag.BORNHOST_V6_FLAG
_Q = struct.Struct(">q")
GRAVE_ROUNDS = 50  # refreshes before the descriptor of a deleted file is closed


def writer_pid(root: str) -> int | None:
    """pid of the process holding the POSIX (or OFD) lock on ``root/lock``, or None.

    Read from ``/proc/locks`` by inode number, without opening the lock file: closing any
    descriptor of a file drops every POSIX lock the calling process holds on it, so a
    follower running in the writer's own process must never open it. OFD locks have no pid
    (-1 is returned for them). Linux only; None elsewhere.
    """
    try:
        ino = os.stat(os.path.join(root, "lock")).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->" or parts[1] not in ("POSIX", "OFDLCK"):
            continue
        dev_ino = parts[5].rsplit(":", 1)
        if len(dev_ino) == 2 and dev_ino[1].isdigit() and int(dev_ino[1]) == ino:
            try:
                return int(parts[4])
            except ValueError:
                return -1
    return None


def _file_sig(path: str):
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

    def __init__(self, store):
        self.store = store
        self.writer_end = 0
        self.writer_store_timestamp = 0
        self.waiting_since_ms = 0
        self.refreshed_ms = 0
        self.refreshes = 0
        self._config_sigs: dict[str, tuple] = {}
        self._graves: list[tuple[int, list]] = []  # (refresh number, fds to close)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._refresh_lock = threading.Lock()
        self.listeners: list = []  # callables(dict of what changed) run after a refresh

    # -- open ---------------------------------------------------------------------------------
    def open(self) -> None:
        """Set the visible state from the writer's files, then :meth:`refresh`.

        The visible CommitLog end starts at the newest record a ConsumeQueue points at (the
        writer's reput position, as normal recovery starts there); units past what the
        refresh then validates are hidden.
        """
        s = self.store
        cl = s.commitlog
        for name in ("topics.json", "consumerOffset.json", "subscriptionGroup.json"):
            self._config_sigs[name] = self._config_sig(name)
        last = max((cq.last_commitlog_offset for cq in s.consume_queues.values()), default=-1)
        start = cl.min_offset
        if last >= cl.min_offset:
            start = s._record_boundary(last)
        cl.max_offset = start
        self.writer_end = start
        self.refresh()
        end = cl.max_offset
        for cq in s.consume_queues.values():
            if cq.max_offset > cq.min_offset and cq.last_commitlog_offset >= end:
                cq.truncate_dirty(end)  # read-only: in memory only
            cq.correct_min_offset(cl.min_offset)

    # -- the loop -----------------------------------------------------------------------------
    def start(self, interval: float = 0.1) -> None:
        """Refresh every ``interval`` seconds in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return

        def loop():
            while not self._stop.wait(interval):
                try:
                    self.refresh()
                except Exception:  # noqa: BLE001 - keep following; the next round retries
                    log.exception("follower refresh failed")
        self._thread = threading.Thread(target=loop, name="rmq-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the refresh thread (if any) and close the descriptors of deleted files."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for _, fds in self._graves:
            for fd in fds:
                _close(fd)
        self._graves = []

    # -- one step -----------------------------------------------------------------------------
    def refresh(self) -> dict:
        """Follow the writer one step: files, configs, then the reput.

        Returns what changed: ``{"records": n, "deleted": [paths], "configs": [names]}``
        (paths relative to the store root). Raises OSError only for the store directory
        itself; a file that vanishes meanwhile is skipped.
        """
        with self._refresh_lock:
            s = self.store
            changes = {"records": 0, "deleted": [], "configs": []}
            self.refreshes += 1
            self._bury()
            configs = self._follow_configs()
            with s.put_lock:
                for name, mgr_attr, mgr in configs:
                    setattr(s, mgr_attr, mgr)
                    changes["configs"].append(name)
            cl = s.commitlog
            old_min = cl.min_offset
            deleted = self._follow_file_queue(cl.files)
            cl.file_size = cl.files.file_size
            try:
                s.checkpoint = StoreCheckpoint.read(s.checkpoint_path)
            except (OSError, ValueError, StoreError):
                pass
            with s.put_lock:
                if cl.min_offset != old_min or deleted:
                    changes["deleted"] += [os.path.relpath(p, s.root) for p in deleted]
                    if cl.max_offset < cl.min_offset:
                        cl.max_offset = cl.min_offset
                    for cq in list(s.consume_queues.values()):
                        gone = self._follow_file_queue(cq.files, add=False)
                        changes["deleted"] += [os.path.relpath(p, s.root) for p in gone]
                        base = cq.files.min_offset // CQ_STORE_UNIT_SIZE
                        if cq.min_offset < base:
                            cq.min_offset = base
                            cq.max_offset = max(cq.max_offset, base)
                        cq.correct_min_offset(cl.min_offset)
            changes["records"] = self._reput()
            if s.index_service is not None:
                changes["deleted"] += [os.path.relpath(p, s.root)
                                       for p in s.index_service.follow()]
            self.refreshed_ms = int(time.time() * 1000)
        if changes["records"] or changes["deleted"] or changes["configs"]:
            for listener in self.listeners:
                try:
                    listener(changes)
                except Exception:  # noqa: BLE001 - a listener never stops the follower
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
    def _follow_file_queue(self, fq: FileQueue, add: bool = True) -> list[str]:
        """Make ``fq.segments`` match the directory: drop files the writer deleted (their
        descriptors are closed later), append new full-size files. Returns deleted paths.

        The segment list is replaced as a whole, so readers (``FileQueue.find``) always see
        one consistent list.
        """
        try:
            names = sorted(n for n in os.listdir(fq.directory) if _NAME.match(n))
        except FileNotFoundError:
            names = []
        present = {int(n) for n in names}
        old = fq.segments
        keep = [seg for seg in old if seg.start in present]
        # a file in the middle cannot vanish alone; keep the run that ends at the newest file
        run: list[Segment] = []
        for seg in keep:
            if run and seg.start != run[-1].end:
                run = []
            run.append(seg)
        keep = run
        gone = [seg for seg in old if seg not in keep]
        if add:
            nxt = keep[-1].end if keep else None
            for n in names:
                start = int(n)
                if nxt is not None and start < nxt:
                    continue
                if nxt is not None and start != nxt:
                    break
                path = os.path.join(fq.directory, n)
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    break
                size = os.fstat(fd).st_size
                if not keep and size > 0 and start % size == 0:
                    fq.file_size = size  # the first file of a new queue: its size is the size
                if size != fq.file_size or start % fq.file_size:
                    os.close(fd)  # being created (size 0 until ftruncate), or not ours
                    break
                keep.append(Segment(start, path, fd, fq.file_size))
                nxt = start + fq.file_size
        if gone or len(keep) != len(old):
            fq.segments = keep
        if gone:
            self._graves.append((self.refreshes, [seg.fd for seg in gone]))
        return [seg.path for seg in gone]

    def _bury(self) -> None:
        """Close descriptors of deleted files once GRAVE_ROUNDS refreshes have passed."""
        keep = []
        for n, fds in self._graves:
            if self.refreshes - n >= GRAVE_ROUNDS:
                for fd in fds:
                    _close(fd)
            else:
                keep.append((n, fds))
        self._graves = keep

    def _config_sig(self, name: str):
        path = os.path.join(self.store.root, "config", name)
        return (_file_sig(path), _file_sig(path + ".bak"))

    def _follow_configs(self) -> list:
        """Reload the config files the writer rewrote (atomically: a file that does not parse
        is skipped until the next refresh). Returns ``[(name, store attribute, manager)]``."""
        out = []
        config_dir = os.path.join(self.store.root, "config")
        for name, attr, cls in (("topics.json", "topic_config", TopicConfigManager),
                                ("consumerOffset.json", "consumer_offsets",
                                 ConsumerOffsetManager),
                                ("subscriptionGroup.json", "subscription_groups",
                                 SubscriptionGroupManager)):
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

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The store's ConsumeQueue of a queue, opened when the writer created its directory
        since (None while it has not)."""
        s = self.store
        key = (topic, queue_id)
        cq = s.consume_queues.get(key)
        if cq is not None:
            return cq
        qdir = os.path.join(s.root, "consumequeue", topic, str(queue_id))
        if not os.path.isdir(qdir):
            return None
        try:
            # the writer preallocates its files: a lone file's size is the file size
            cq = ConsumeQueue(qdir, topic, queue_id, s._cq_file_size, True)
        except (ValueError, CorruptRecordError, OSError) as exc:
            log.debug("follower: queue %s/%d not readable yet: %s", topic, queue_id, exc)
            return None
        cq.max_offset = cq.min_offset  # units become visible through the reput only
        with s.put_lock:
            s.consume_queues[key] = cq
        return cq

    def _disk_units(self, cq: ConsumeQueue, lo: int, hi: int) -> bytes:
        """The writer's raw units ``[lo, hi)`` (queue offsets) from the files, following the
        queue's directory for new files; shorter when files end first."""
        fq = cq.files
        want_end = hi * CQ_STORE_UNIT_SIZE
        if want_end > fq.end_offset:
            self._follow_file_queue(fq)
        out = []
        pos = lo * CQ_STORE_UNIT_SIZE
        while pos < want_end:
            data = fq.read(pos, want_end - pos)
            if not data:
                break
            out.append(data)
            pos += len(data)
        return b"".join(out)

    # -- reput --------------------------------------------------------------------------------
    def _reput(self) -> int:
        """Advance the visible end over complete records whose units the writer has written.
        Returns the number of records made visible."""
        s = self.store
        cl = s.commitlog
        start = cl.max_offset
        recs = []  # (phys, total, key or None, queue offset, buf, pos)
        for buf, pos, phys, total, topic, qid, qoff, sys_flag in cl.scan_raw(
                start, check_crc=True):
            needs_unit = not (sys_flag & 0xC in (TRANSACTION_PREPARED_TYPE,
                                                  TRANSACTION_ROLLBACK_TYPE)
                              or sys_flag & INNER_BATCH_FLAG or topic in s._batch_cq_topics)
            recs.append((phys, total, (topic, qid) if needs_unit else None, qoff, buf, pos))
        scan_end = cl.scan_end
        if not recs:
            self.writer_end = max(start, scan_end)
            if scan_end > start:  # a blank record: the visible end moves to the next file
                with s.put_lock:
                    cl.max_offset = scan_end
            self.waiting_since_ms = 0
            return 0
        last = recs[-1]
        self.writer_end = max(scan_end, last[0] + last[1])
        self.writer_store_timestamp = _store_timestamp(last[4], last[5])
        stop = len(recs)
        per_queue: dict[tuple, list] = {}
        for i, r in enumerate(recs):
            if r[2] is not None:
                per_queue.setdefault(r[2], []).append(i)
        new_max: dict[tuple, tuple] = {}
        for key, idxs in per_queue.items():
            cq = self._queue(*key)
            if cq is None:
                stop = min(stop, idxs[0])
                continue
            lo = min(cq.max_offset, recs[idxs[0]][3])
            hi = recs[idxs[-1]][3] + 1
            if lo < cq.min_offset:
                lo = cq.min_offset
            raw = self._disk_units(cq, lo, hi) if hi > lo else b""
            n = len(raw) // CQ_STORE_UNIT_SIZE
            # units between the visible end of the queue and the first new record (a unit a
            # queue had before the records scanned here, e.g. RocketMQ's pre-blank filler)
            first = recs[idxs[0]][3]
            gap_ok = True
            for k in range(max(0, cq.max_offset - lo), max(0, first - lo)):
                if k >= n:
                    gap_ok = False
                    break
                off, size, _ = UNIT.unpack_from(raw, k * CQ_STORE_UNIT_SIZE)
                if off < 0 or size <= 0:
                    gap_ok = False
                    break
            if not gap_ok:
                stop = min(stop, idxs[0])
                continue
            good = None
            for i in idxs:
                if i >= stop:
                    break
                phys, total, _, qoff, _, _ = recs[i]
                k = qoff - lo
                if qoff < cq.min_offset:
                    continue  # expired meanwhile: nothing to show, nothing to check
                if k < 0 or k >= n:
                    stop = min(stop, i)
                    break
                off, size, _ = UNIT.unpack_from(raw, k * CQ_STORE_UNIT_SIZE)
                if off != phys or size != total:
                    stop = min(stop, i)
                    break
                good = i
            if good is not None:
                new_max[key] = (cq, good)
        end = recs[stop][0] if stop < len(recs) else scan_end
        if stop < len(recs):
            r = recs[stop]
            self.waiting_since_ms = _store_timestamp(r[4], r[5])
        else:
            self.waiting_since_ms = 0
        with s.put_lock:
            for key, (cq, good) in new_max.items():
                if good >= stop:
                    # the queue's last record below the stop point
                    idxs = [i for i in per_queue[key] if i < stop]
                    if not idxs:
                        continue
                    good = idxs[-1]
                phys, total, _, qoff, _, _ = recs[good]
                if qoff + 1 > cq.max_offset:
                    cq.max_offset = qoff + 1
                    cq.last_commitlog_offset, cq.max_physic_offset = phys, phys + total
            if stop > 0:
                r = recs[stop - 1]
                cl.last_store_timestamp = _store_timestamp(r[4], r[5])
                s._dispatched_store_timestamp = cl.last_store_timestamp
            if end > cl.max_offset:
                cl.max_offset = end
            # what the writer says it has synced (checkpoint), within what is visible
            confirmed = s.checkpoint.confirm_phy_offset
            cl.flushed_where = min(cl.max_offset, confirmed) if confirmed > 0 else cl.max_offset
        return stop


def _store_timestamp(buf, pos: int) -> int:
    """STORETIMESTAMP of the record at ``buf[pos:]`` (epoch ms)."""
    sys_flag = struct.unpack_from(">i", buf, pos + 36)[0]
    at = _STORE_TS_V6 if sys_flag & _BORNHOST_V6_FLAG else _STORE_TS_V4
    return _Q.unpack_from(buf, pos + at)[0]


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
