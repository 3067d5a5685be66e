"""Expiry of old files: ``CleanCommitLogService`` and ``CleanConsumeQueueService``.

RocketMQ deletes whole files, never records (``DefaultMessageStore``
``CleanCommitLogService``/``CleanConsumeQueueService``, ``MappedFileQueue.deleteExpiredFileByTime``
and ``deleteExpiredFileByOffset``, ``IndexService.deleteExpiredFile``). One run of
:meth:`CleanService.run_once`:

1. CommitLog. Files are deleted when one of these holds:

   * the current local hour is one of ``deleteWhen`` (``"04"``, ``;``-separated hours);
   * the disk is fuller than ``diskMaxUsedSpaceRatio`` (percent, clamped to [10, 95]), or than
     ``diskSpaceCleanForciblyRatio`` (0.85, clamped to [0.30, 0.85]) or
     ``diskSpaceWarningLevelRatio`` (0.90, clamped to [0.35, 0.90]); the latter two also set
     ``cleanImmediately``, and the warning level marks the store disk-full (puts fail with
     ENOSPC) until usage drops again;
   * a manual request is pending (``executeDeleteFilesManually``: 20 rounds).

   Oldest first, never the last file, a file is deleted when its mtime is at least
   ``fileReservedTime`` hours old (or ``cleanImmediately`` and ``cleanFileForciblyEnable``);
   the first file that is not expired stops the run (never a hole in the middle); at most
   ``deleteFileBatchMax`` (10) files per run. Queue min offsets move past them first, then the
   run waits ``deleteCommitLogFilesInterval`` ms (RocketMQ waits that long between deletions)
   before the files go.

2. ConsumeQueues and IndexFiles, when the CommitLog min offset moved: each queue's min offset
   moves to its first unit still in the CommitLog (``correctMinOffset``), then its files whose
   last unit lies below the CommitLog min offset are deleted (never the last); IndexFiles whose
   endPhyOffset is below it are deleted (never the newest).

Readers stay safe: a queue's min offset moves *before* the files go, file descriptors of deleted
files are closed one run later (a read that already found the file still completes), and the
list of files is replaced, never mutated, so a concurrent lookup sees a consistent list.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..format.consumequeue import CQ_STORE_UNIT_SIZE, UNIT

if TYPE_CHECKING:
    from ..format.consumequeue import ConsumeQueue
    from ..format.mappedfile import FileQueue, Segment
    from ..store import MessageStore

log = logging.getLogger(__name__)

MANUAL_DELETE_ROUNDS = 20  # DefaultMessageStore.executeDeleteFilesManually
HOUR_MS = 3600 * 1000


def is_time_to_delete(delete_when: str, now: float | None = None) -> bool:
    """``UtilAll.isItTimeToDo``: whether the local hour of ``now`` (epoch s) is in ``delete_when``.

    ``delete_when`` is a ``;``-separated list of hours (``"04"``, ``"04;16"``); bad items are
    ignored.
    """
    hour = time.localtime(now if now is not None else time.time()).tm_hour
    for item in (delete_when or "").split(";"):
        item = item.strip()
        if item.isdigit() and int(item) == hour:
            return True
    return False


def disk_used_ratio(path: str) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent``: (total - free) / total of the partition
    holding ``path`` (0.0 .. 1.0); -1 when it cannot be measured."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    free = st.f_bfree * st.f_frsize
    return (total - free) / total


def _clamp(value: float, lo: float, hi: float) -> float:
    return min(max(value, lo), hi)


@dataclass
class CleanReport:
    """What one clean run deleted: file paths, and the CommitLog min offset after it (bytes)."""

    commitlog: list[str] = field(default_factory=list)
    consumequeue: list[str] = field(default_factory=list)
    index: list[str] = field(default_factory=list)
    min_offset: int = 0
    reason: str = ""

    @property
    def deleted(self) -> int:
        """Number of files deleted."""
        return len(self.commitlog) + len(self.consumequeue) + len(self.index)

    def merge(self, other: CleanReport) -> None:
        """Add another run's deletions to this one."""
        self.commitlog += other.commitlog
        self.consumequeue += other.consumequeue
        self.index += other.index
        self.min_offset = other.min_offset
        self.reason = self.reason or other.reason


class CleanService:
    """Deletes expired CommitLog files and the derived files below the new min offset.

    Args:
        store: the :class:`engine.store.MessageStore` (opened for writing).
        disk_usage: ``callable(path) -> ratio in [0, 1]`` (default :func:`disk_used_ratio`);
            tests pass their own.
        clock: ``callable() -> epoch seconds`` (default ``time.time``).

    Settings come from ``store.config`` (``StoreConfig``): ``file_reserved_time`` (hours),
    ``delete_when``, ``disk_max_used_space_ratio`` (percent), ``disk_space_clean_forcibly_ratio``
    and ``disk_space_warning_level_ratio`` (fractions), ``clean_file_forcibly_enable``,
    ``delete_file_batch_max``, ``delete_commit_log_files_interval`` (ms) and
    ``clean_resource_interval`` (ms, the period of the background thread).
    """

    def __init__(
        self,
        store: MessageStore,
        disk_usage: Callable[[str], float] | None = None,
        clock: Callable[[], float] | None = None,
    ):
        self.store = store
        self.disk_usage = disk_usage or disk_used_ratio
        self.clock = clock or time.time
        self.manual_rounds = 0
        self.clean_immediately = False
        self.last_physical_min_offset = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- configuration ------------------------------------------------------------------------
    def _cfg(self, name: str, default: Any) -> Any:
        return getattr(self.store.config, name, default)

    @property
    def disk_max_used_space_ratio(self) -> float:
        """``getDiskMaxUsedSpaceRatio`` as a fraction: the percent clamped to [10, 95]."""
        return _clamp(self._cfg("disk_max_used_space_ratio", 75), 10, 95) / 100.0

    @property
    def disk_space_clean_forcibly_ratio(self) -> float:
        """``diskSpaceCleanForciblyRatio`` clamped to [0.30, 0.85]."""
        return _clamp(self._cfg("disk_space_clean_forcibly_ratio", 0.85), 0.30, 0.85)

    @property
    def disk_space_warning_level_ratio(self) -> float:
        """``diskSpaceWarningLevelRatio`` clamped to [0.35, 0.90]."""
        return _clamp(self._cfg("disk_space_warning_level_ratio", 0.90), 0.35, 0.90)

    # -- triggers -----------------------------------------------------------------------------
    def execute_delete_files_manually(self) -> None:
        """``executeDeleteFilesManually``: the next 20 runs delete expired files whatever the
        hour and the disk usage."""
        self.manual_rounds = MANUAL_DELETE_ROUNDS

    def is_space_to_delete(self) -> bool:
        """``isSpaceToDelete``: whether the disk holding the CommitLog or the ConsumeQueues is
        too full. Sets :attr:`clean_immediately` and the store's ``disk_full`` flag."""
        self.clean_immediately = False
        root = self.store.root
        ratios = []
        for sub in ("commitlog", "consumequeue"):
            path = os.path.join(root, sub)
            ratios.append(self.disk_usage(path if os.path.exists(path) else root))
        warning = self.disk_space_warning_level_ratio
        forcibly = self.disk_space_clean_forcibly_ratio
        for ratio in ratios:
            if ratio > warning:
                if not getattr(self.store, "disk_full", False):
                    log.error(
                        "disk usage %.2f above diskSpaceWarningLevelRatio %.2f: the store "
                        "refuses new messages until files are deleted",
                        ratio,
                        warning,
                    )
                self.store.disk_full = True
                self.clean_immediately = True
                return True
            if ratio > forcibly:
                self.clean_immediately = True
                return True
        if getattr(self.store, "disk_full", False):
            log.info("disk usage back under diskSpaceWarningLevelRatio: accepting messages again")
        self.store.disk_full = False
        limit = self.disk_max_used_space_ratio
        return any(r < 0 or r > limit for r in ratios)

    # -- one run ------------------------------------------------------------------------------
    def run_once(self) -> CleanReport:
        """One run of both services (what the background thread does every interval)."""
        with self._lock:
            report = self.clean_commitlog()
            report.merge(self.clean_consume_queues())
            return report

    def clean_commitlog(self) -> CleanReport:
        """``CleanCommitLogService.deleteExpiredFiles``."""
        report = CleanReport(min_offset=self.store.commitlog.min_offset)
        time_up = is_time_to_delete(self._cfg("delete_when", "04"), self.clock())
        space = self.is_space_to_delete()
        manual = self.manual_rounds > 0
        if not (time_up or space or manual):
            return report
        if manual:
            self.manual_rounds -= 1
        force = bool(self._cfg("clean_file_forcibly_enable", True)) and self.clean_immediately
        report.reason = ", ".join(
            r
            for r, on in (
                ("time is up (deleteWhen)", time_up),
                ("disk is full", space),
                ("manual", manual),
            )
            if on
        )
        reserved_ms = int(self._cfg("file_reserved_time", 72) * HOUR_MS)
        report.commitlog = self.delete_expired_commitlog(reserved_ms, force)
        report.min_offset = self.store.commitlog.min_offset
        if not report.commitlog and space:
            log.warning("disk space will be full soon, but no CommitLog file could be deleted")
        return report

    def delete_expired_commitlog(self, reserved_ms: int, clean_immediately: bool) -> list[str]:
        """``MappedFileQueue.deleteExpiredFileByTime`` on the CommitLog; returns deleted paths.

        A file is expired when ``now >= mtime + reserved_ms`` or ``clean_immediately``.
        """
        cl = self.store.commitlog
        fq = cl.files
        batch_max = int(self._cfg("delete_file_batch_max", 10))
        interval = self._cfg("delete_commit_log_files_interval", 100) / 1000.0
        now_ms = self.clock() * 1000
        victims: list = []
        for seg in fq.segments[:-1]:  # never the last file
            if len(victims) >= batch_max:
                break
            try:
                mtime_ms = os.stat(seg.path).st_mtime * 1000
            except FileNotFoundError:
                mtime_ms = 0  # already gone: drop it from the list
            if not (now_ms >= mtime_ms + reserved_ms or clean_immediately):
                break  # never a hole in the middle
            victims.append(seg)
        if not victims:
            return []
        # First move every queue's min offset past the records of these files, so readers
        # stop asking for them; give readers already past that check a moment to finish.
        self._correct_min_offsets(victims[-1].end)
        if interval > 0:
            time.sleep(interval)
        deleted: list[str] = []
        for seg in victims:
            if not self._drop_first(fq, seg):
                break
            deleted.append(seg.path)
            log.info("deleted expired CommitLog file %s", seg.path)
        return deleted

    def clean_consume_queues(self) -> CleanReport:
        """``CleanConsumeQueueService.deleteExpiredFiles``: when the CommitLog min offset grew,
        delete ConsumeQueue files entirely below it and correct each queue's min offset, then
        delete expired IndexFiles."""
        store = self.store
        min_offset = store.commitlog.min_offset
        report = CleanReport(min_offset=min_offset)
        if min_offset <= self.last_physical_min_offset:
            return report
        self.last_physical_min_offset = min_offset
        for _key, cq in store.file_queues():
            report.consumequeue += self.delete_expired_consume_queue(cq, min_offset)
        index = getattr(store, "index_service", None)
        if index is not None:
            before = [f.path for f in index.files if f.path]
            if index.delete_expired(min_offset):
                after = {f.path for f in index.files}
                report.index = [p for p in before if p not in after]
                for p in report.index:
                    log.info("deleted expired IndexFile %s", p)
        return report

    def delete_expired_consume_queue(
        self, cq: ConsumeQueue, min_commitlog_offset: int
    ) -> list[str]:
        """``ConsumeQueue.deleteExpiredFile``: correct the min offset, then delete files (never
        the last) whose last unit's commitLogOffset < ``min_commitlog_offset``."""
        cq.correct_min_offset(min_commitlog_offset)
        fq = cq.files
        deleted = []
        while True:
            segs = fq.segments
            if len(segs) <= 1:
                break
            first = segs[0]
            raw = os.pread(first.fd, CQ_STORE_UNIT_SIZE, first.size - CQ_STORE_UNIT_SIZE)
            if len(raw) < CQ_STORE_UNIT_SIZE:
                break
            last_offset = UNIT.unpack(raw)[0]
            if last_offset >= min_commitlog_offset:
                break
            if cq.min_offset < first.end // CQ_STORE_UNIT_SIZE:
                cq.min_offset = first.end // CQ_STORE_UNIT_SIZE
            if not self._drop_first(fq, first):
                break
            deleted.append(first.path)
            log.info("deleted expired ConsumeQueue file %s", first.path)
        return deleted

    def _correct_min_offsets(self, min_commitlog_offset: int) -> None:
        for cq in list(self.store.consume_queues.values()):
            cq.correct_min_offset(min_commitlog_offset)

    def _drop_first(self, fq: FileQueue, seg: Segment) -> bool:
        """Take ``seg`` (the first file) out of ``fq`` and unlink it; its descriptor closes when
        no reader holds the segment any more (:class:`engine.format.mappedfile.Segment`: a
        reader that took it before reads the deleted file, never a file opened since)."""
        with fq.lock:
            segs = fq.segments
            if len(segs) <= 1 or segs[0] is not seg:
                return False
            fq.segments = segs[1:]  # a new list: concurrent lookups keep a consistent view
        fq.forget_maps([seg.start])  # its blocks free once unlinked and its fd closed
        try:
            os.unlink(seg.path)
        except FileNotFoundError:
            pass
        return True

    def delete_expired_files(self, rounds: int = MANUAL_DELETE_ROUNDS) -> CleanReport:
        """``deleteExpiredCommitLog`` run now: a manual request, then up to ``rounds`` runs back to
        back until one deletes nothing. Returns everything deleted."""
        self.execute_delete_files_manually()
        total = CleanReport(min_offset=self.store.commitlog.min_offset)
        for _ in range(rounds):
            r = self.run_once()
            total.merge(r)
            if not r.deleted:
                break
        self.manual_rounds = 0
        return total

    # -- background thread --------------------------------------------------------------------
    def start(self, initial_delay: float | None = None) -> None:
        """Run :meth:`run_once` every ``clean_resource_interval`` ms in a daemon thread, after
        ``initial_delay`` seconds. RocketMQ waits 60 s before the first run; the default here
        is min(60 s, 6 intervals): 60 s with the default 10 s interval."""
        if self._thread is not None:
            return
        interval = self._cfg("clean_resource_interval", 10_000) / 1000.0
        delay = min(60.0, 6 * interval) if initial_delay is None else initial_delay

        def loop() -> None:
            wait = delay
            while not self._stop.wait(wait):
                wait = interval
                try:
                    self.run_once()
                except Exception:  # keep cleaning; the next run retries
                    log.exception("clean service run failed")

        self._thread = threading.Thread(target=loop, name="rmq-clean", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the thread (waits for a running run)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
