"""Flushing the CommitLog and the derived files (RocketMQ ``CommitLog.FlushRealTimeService``,
``GroupCommitService`` and ``DefaultMessageStore.FlushConsumeQueueService``).

:meth:`FlushService.flush` is the fsync() path: CommitLog, ConsumeQueues, index and checkpoint, in the order
that keeps the checkpoint behind what is durable. Under SYNC_FLUSH the group-commit thread
(:meth:`FlushService.group_commit_loop`) flushes the CommitLog for waiting puts and dispatches their records
once they are durable; under ASYNC_FLUSH :meth:`FlushService.flush_loop` flushes every
``flushIntervalCommitLog`` ms.

The state of both services (the SYNC_FLUSH pending dispatches, the flush lock, the group-commit
waiters, the last thorough flush, the checkpoint values on disk) is a
:class:`FlushService`'s, one per store (``store.flusher``); other modules use its methods.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import FlushDiskTimeoutError

# The fast put path and the recovery scan (kept apart from the imports above on purpose).
from . import dispatch

if TYPE_CHECKING:
    from ..format.checkpoint import StoreCheckpoint
    from ..store import MessageStore

log = logging.getLogger(__name__)


def _checkpoint_values(cp: StoreCheckpoint) -> tuple[int, ...]:
    return (
        cp.physic_msg_timestamp,
        cp.logics_msg_timestamp,
        cp.index_msg_timestamp,
        cp.master_flushed_offset,
        cp.confirm_phy_offset,
    )


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


class _GroupCommitRequest:
    """One put waiting for the CommitLog to be flushed (RocketMQ
    ``CommitLog.GroupCommitRequest``): ``end`` is the CommitLog offset its records end at,
    ``done`` is set once they are durable or the flush failed, and ``error`` is the failure
    (None when the flush succeeded or the service was closed)."""

    __slots__ = ("done", "end", "error")

    def __init__(self, end: int):
        self.end = end
        self.done = threading.Event()
        self.error: BaseException | None = None


class FlushService:
    """A store's flush state and threads: ``FlushRealTimeService`` and ``GroupCommitService``.

    Owns the SYNC_FLUSH dispatches waiting for their records to be flushed (in CommitLog
    order), the flush lock (one flush at a time), the group-commit condition and its waiters,
    the time of the last thorough flush, the checkpoint's values as its file holds them and
    whether this open changed the data they describe.
    """

    def __init__(self, store: MessageStore):
        self.store = store
        # SYNC_FLUSH: dispatches waiting for their records to be flushed, in CommitLog order.
        self._pending: list[tuple[int, list]] = []
        # the first pending batch's dispatch failed part way (a disk error, logged once until
        # a dispatch succeeds): its retry keeps and checks what that try wrote
        self._retrying = False
        self._lock = threading.Lock()
        self._gc_cond = threading.Condition()
        self._gc_waiters: list[_GroupCommitRequest] = []
        self._last_thorough_flush = time.monotonic()
        # The checkpoint's values as its file holds them (None: no file yet, or an empty one),
        # and whether this open changed what they describe (see :meth:`flush`).
        self._checkpoint_on_disk: tuple[int, ...] | None = (
            _checkpoint_values(store.checkpoint) if _nonempty(store.checkpoint_path) else None
        )
        self._data_moved = False
        # the first error a sync of the CommitLog met: from then on the store takes no write
        # and no flush answers success (what the disk kept is unknown until a reopen)
        self._failed: OSError | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- state other modules see ------------------------------------------------------------

    @property
    def lock(self) -> threading.Lock:
        """Held by a flush from the CommitLog's sync to the checkpoint; holding it keeps
        flushes (and, under SYNC_FLUSH, the dispatch of pending puts) from running."""
        return self._lock

    def has_pending(self) -> bool:
        """Whether SYNC_FLUSH puts wait for their flush to be dispatched (caller holds the
        put lock for an answer that stays true)."""
        return bool(self._pending)

    def pending_count(self) -> int:
        """How many put batches wait for their flush (SYNC_FLUSH)."""
        return len(self._pending)

    def pending(self) -> list[tuple[int, list]]:
        """The pending ``(end offset, dispatch requests)`` batches, in CommitLog order (the
        list itself: the caller holds the put lock)."""
        return self._pending

    def dispatched_offset(self) -> int:
        """Where dispatch stands (RocketMQ ``ReputMessageService.reputFromOffset``): the
        CommitLog offset of the first record a SYNC_FLUSH put still waits to dispatch, else the
        CommitLog's max offset (dispatch runs inline with the put). Caller holds the put lock."""
        pending = self._pending
        if pending:
            return min(d.commitlog_offset for d in pending[0][1])
        return self.store.commitlog.max_offset

    def add_pending(self, end: int, requests: list) -> None:
        """SYNC_FLUSH: dispatch ``requests`` once the CommitLog is flushed to ``end`` (caller
        holds the put lock)."""
        self._pending.append((end, requests))

    def wake(self) -> None:
        """Wake the group-commit thread (a put has something for it)."""
        with self._gc_cond:
            self._gc_cond.notify()

    # -- the threads ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the flush thread and, under SYNC_FLUSH, the group-commit thread."""
        store = self.store
        self._threads.append(
            threading.Thread(target=self.flush_loop, name="rmq-flush", daemon=True)
        )
        if store.sync_flush:
            self._threads.append(
                threading.Thread(
                    target=self.group_commit_loop, name="rmq-group-commit", daemon=True
                )
            )
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop the threads and wait for them."""
        self._stop.set()
        for t in self._threads:
            t.join()

    def release_waiters(self) -> None:
        """Wake every group-commit waiter (at close, after the last flush): those whose
        records it did not make durable with the error (:meth:`check_not_failed`'s)."""
        with self._gc_cond:
            waiters, self._gc_waiters = self._gc_waiters, []
        flushed = self.store.commitlog.flushed_where
        for w in waiters:
            if w.end > flushed:
                w.error = self._failure()
            w.done.set()

    # -- a failed sync ----------------------------------------------------------------------

    def check_not_failed(self) -> None:
        """Raise OSError(EIO) once a sync of the CommitLog failed in this open: a put, and a
        flush (``fsync()``), are refused from then on, as a database stops at a failed
        ``fsync`` (Linux may mark the pages whose writeback failed clean, so a later sync's
        success would not prove them on disk). The next open's recovery reads what the disk
        holds."""
        if self._failed is not None:
            raise self._failure()

    def _failure(self) -> OSError:
        """The error of a put or flush after a failed sync (or one the close did not make
        durable)."""
        return OSError(
            errno.EIO,
            f"a sync of the CommitLog failed in this open ({self._failed or 'the close'}): "
            "the messages of the writes it fails may be stored or not (the next open's "
            "recovery keeps what reached the disk), and the store takes no more writes; "
            "reopen it (remount)",
        )

    def _sync_failed(self, exc: OSError) -> None:
        """A sync of the CommitLog raised ``exc``: note it (:meth:`check_not_failed`). The
        records past the last durable point stay where they are, undispatched (the reput of
        SYNC_FLUSH waits for the flush): some were acknowledged (a put with WAIT=false, one
        answered FLUSH_DISK_TIMEOUT), so no suffix can be cut that holds only the puts now
        told the error. Those puts' records may be on disk, and the next open's recovery keeps
        what it finds, as RocketMQ keeps a FLUSH_DISK_TIMEOUT put's (a producer that sends
        again may store one twice: :meth:`_failure` says so)."""
        if self._failed is None:
            log.error("a sync of the CommitLog failed: the store takes no more writes: %s", exc)
            self._failed = exc

    # -- flushing ------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> bool:
        """Force appended data to disk, then the ConsumeQueues, index and checkpoint.

        This is the fsync() path. The CommitLog is synced without holding the put lock, so
        puts continue meanwhile. Under SYNC_FLUSH the records synced here are then dispatched
        (made visible). ``least_pages`` > 0 skips the round when fewer 4 KiB pages are dirty
        (``flushCommitLogLeastPages``). Returns True when CommitLog data was synced.
        Raises OSError from the disk; once a sync of the CommitLog failed, OSError(EIO) at
        every call (:meth:`check_not_failed`).

        The checkpoint's values move only once this open changed what they describe: records
        appended and synced, index entries written, or recovery's repairs
        (:meth:`note_data_moved`). Until then they stay what the file holds, and the file is
        written only when its values differ from them (or it does not exist yet: a new store
        gets its 4096 bytes, as ``StoreCheckpoint``'s constructor maps them). So an open and
        close that put nothing leaves every byte of ``checkpoint`` (and its mtime) as it was,
        as RocketMQ's does: ``FlushRealTimeService`` sets physicMsgTimestamp only from a
        flushed file's store time, ``FlushConsumeQueueService`` rewrites the logics value it
        read, and ``IndexService.flush(IndexFile)`` sets indexMsgTimestamp only for a full
        file it flushes; ``StoreCheckpoint.flush`` at ``DefaultMessageStore.shutdown`` then
        writes the values it read at open.
        """
        store = self.store
        if store.read_only:
            return False
        cl = store.commitlog
        with self._lock:
            self.check_not_failed()
            with store.put_lock:
                end, ts = cl.max_offset, cl.last_store_timestamp
            try:
                synced = cl.flush(least_pages, end, ts)
            except OSError as exc:
                self._sync_failed(exc)
                raise
            with store.put_lock:
                if store.sync_flush:
                    self.dispatch_flushed(cl.flushed_where)
                # the ConsumeQueue content synced below covers at least this
                logics_ts = store.dispatched_store_timestamp
            index = store.index_service
            if index is not None:  # single puts' entries reach the files every round
                index.write_pending()
            if not synced and least_pages:
                return False
            for cq in list(store.consume_queues.values()):
                cq.flush()
            index_written, index_ts = index.flush() if index is not None else (False, 0)
            if synced or index_written:
                self._data_moved = True
            cp = store.checkpoint
            if self._data_moved:
                cp.physic_msg_timestamp = cl.flushed_store_timestamp
                cp.logics_msg_timestamp = logics_ts
                if index is not None:
                    cp.index_msg_timestamp = index_ts
                cp.confirm_phy_offset = cl.flushed_where
            values = _checkpoint_values(cp)
            if values != self._checkpoint_on_disk:
                cp.write(store.checkpoint_path)
                self._checkpoint_on_disk = values
            return synced

    def note_data_moved(self) -> None:
        """Say that this open changed the store's data other than through a flush (recovery
        cut a torn tail or rebuilt units): the next :meth:`flush` writes the checkpoint's
        values for the data as it now is."""
        self._data_moved = True

    def dispatch_flushed(self, flushed: int) -> None:
        """SYNC_FLUSH: dispatch the pending puts whose records end at or before ``flushed``
        (``ReputMessageService.doReput`` up to the flushed offset).

        Caller holds the put lock. A disk error (OSError) leaves the batch pending and is
        logged once, not raised: the records are on disk, so their puts succeeded (RocketMQ's
        PUT_OK: its reput thread dispatches behind the put and retries); they become visible
        when a later flush round dispatches them (or a restart, which re-dispatches them from
        the CommitLog). The retry keeps what the failed try wrote: it goes through
        :func:`dispatch.dispatch`'s re-dispatch rule (units present are compared and skipped,
        the index skips what it holds), so no unit is written twice.
        """
        pending = self._pending
        store = self.store
        while pending and pending[0][0] <= flushed:
            batch = pending[0][1]
            try:
                if not self._retrying:
                    dispatch.dispatch(store, batch)
                else:
                    dispatch.dispatch(store, batch, recovering=True)
                    if batch:
                        store.dispatched_store_timestamp = batch[-1].store_timestamp
            except OSError as exc:
                if not self._retrying:
                    log.warning(
                        "records from CommitLog offset %d on are on disk, but their ConsumeQueue "
                        "units and index entries could not be written (%s): their puts "
                        "succeeded; they become visible when a later flush writes them "
                        "(retried every round; a restart rebuilds them)",
                        min((d.commitlog_offset for d in batch), default=flushed),
                        exc,
                    )
                self._retrying = True
                return
            if self._retrying:
                log.warning("dispatch resumed: the records on disk are visible again")
                self._retrying = False
            pending.pop(0)

    def wait_flushed(self, end: int, results: Sequence) -> None:
        """GroupCommitService: wait until the CommitLog is flushed to ``end``."""
        cfg = self.store.config
        timeout = cfg.sync_flush_timeout / 1000
        waiter = _GroupCommitRequest(end)
        with self._gc_cond:
            self._gc_waiters.append(waiter)
            self._gc_cond.notify()
        if not waiter.done.wait(timeout):
            raise FlushDiskTimeoutError(
                f"FLUSH_DISK_TIMEOUT: CommitLog not flushed to {end} within syncFlushTimeout "
                f"{cfg.sync_flush_timeout} ms; the messages are appended and will be "
                "visible after the next flush",
                results,
            )
        if waiter.error is not None:
            raise waiter.error

    def group_commit_loop(self) -> None:
        """Serve SYNC_FLUSH waiters: one fdatasync covers every request queued before it."""
        while not self._stop.is_set():
            with self._gc_cond:
                if not self._gc_waiters and not self._pending:
                    self._gc_cond.wait(0.01)
                waiters, self._gc_waiters = self._gc_waiters, []
            if not waiters and not self._pending:
                continue
            error: Exception | None = None
            try:
                self.flush_commitlog()
            except OSError as exc:  # reported to every waiter (logged once: _sync_failed)
                error = exc
                self._stop.wait(0.01)  # do not spin on a failing disk
            except Exception as exc:  # reported to every waiter
                log.exception("group commit flush failed")
                error = exc
                self._stop.wait(0.01)
            flushed = self.store.commitlog.flushed_where
            for w in waiters:
                if error is None and flushed < w.end:
                    with self._gc_cond:  # appended after this round: next round
                        self._gc_waiters.append(w)
                    continue
                w.error = error
                w.done.set()

    def flush_commitlog(self) -> bool:
        """Sync the CommitLog only (and, under SYNC_FLUSH, dispatch what became durable).

        The cheap half of :meth:`flush` that group commit runs per round; ConsumeQueues and
        the checkpoint follow on the background flush interval. Returns True if data was
        synced.
        """
        store = self.store
        cl = store.commitlog
        with self._lock:
            self.check_not_failed()
            with store.put_lock:
                end, ts = cl.max_offset, cl.last_store_timestamp
            try:
                synced = cl.flush(0, end, ts)
            except OSError as exc:
                self._sync_failed(exc)
                raise
            if synced:
                self._data_moved = True
            if store.sync_flush:
                with store.put_lock:
                    self.dispatch_flushed(cl.flushed_where)
            return synced

    def flush_loop(self) -> None:
        """FlushRealTimeService: every ``flushIntervalCommitLog`` ms flush when at least
        ``flushCommitLogLeastPages`` pages are dirty, and everything every
        ``flushCommitLogThoroughInterval`` ms (checkpoint included). Under SYNC_FLUSH the
        CommitLog is synced by group commit; this loop then keeps the ConsumeQueues and the
        checkpoint close behind (FlushConsumeQueueService)."""
        store = self.store
        cfg = store.config
        interval = cfg.flush_interval_commit_log / 1000
        while not self._stop.wait(interval):
            if self._failed is not None:
                continue  # nothing is synced after a failed sync (check_not_failed)
            try:
                now = time.monotonic()
                if (
                    store.sync_flush
                    or (now - self._last_thorough_flush) * 1000
                    >= cfg.flush_commit_log_thorough_interval
                ):
                    self._last_thorough_flush = now
                    self.flush(0)
                else:
                    self.flush(cfg.flush_commit_log_least_pages)
            except Exception:  # keep flushing; the next round retries
                if self._failed is None:  # (else said once, by _sync_failed)
                    log.exception("background flush failed")
