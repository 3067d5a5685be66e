"""Flushing the CommitLog and the derived files (RocketMQ ``CommitLog.FlushRealTimeService``,
``GroupCommitService`` and ``DefaultMessageStore.FlushConsumeQueueService``).

:func:`flush` is the fsync() path: CommitLog, ConsumeQueues, index and checkpoint, in the order
that keeps the checkpoint behind what is durable. Under SYNC_FLUSH the group-commit thread
(:func:`group_commit_loop`) flushes the CommitLog for waiting puts and dispatches their records
once they are durable; under ASYNC_FLUSH :func:`flush_loop` flushes every
``flushIntervalCommitLog`` ms.
"""

from __future__ import annotations

import logging
import threading
import time

from .errors import FlushDiskTimeoutError
# The fast put path and the recovery scan (kept apart from the imports above on purpose).

from . import dispatch

log = logging.getLogger(__name__)


def flush(store, least_pages: int = 0) -> bool:
    """Force appended data to disk, then the ConsumeQueues, index and checkpoint.

    This is the fsync() path. The CommitLog is synced without holding the put lock, so
    puts continue meanwhile. Under SYNC_FLUSH the records synced here are then dispatched
    (made visible). ``least_pages`` > 0 skips the round when fewer 4 KiB pages are dirty
    (``flushCommitLogLeastPages``). Returns True when CommitLog data was synced.
    Raises OSError from the disk.
    """
    if store.read_only:
        return False
    cl = store.commitlog
    with store._flush_lock:
        with store.put_lock:
            end, ts = cl.max_offset, cl.last_store_timestamp
        synced = cl.flush(least_pages, end, ts)
        with store.put_lock:
            if store.sync_flush:
                dispatch_flushed(store, cl.flushed_where)
            # the ConsumeQueue content synced below covers at least this
            logics_ts = store._dispatched_store_timestamp
        if not synced and least_pages:
            return False
        for cq in list(store.consume_queues.values()):
            cq.flush()
        cp = store.checkpoint
        before = (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
                  cp.confirm_phy_offset)
        cp.physic_msg_timestamp = cl.flushed_store_timestamp
        cp.logics_msg_timestamp = logics_ts
        if store.index_service is not None:
            cp.index_msg_timestamp = store.index_service.flush()
        cp.confirm_phy_offset = cl.flushed_where
        if (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
                cp.confirm_phy_offset) != before or not store._checkpoint_written:
            cp.write(store.checkpoint_path)
            store._checkpoint_written = True
        return synced


def dispatch_flushed(store, flushed: int) -> None:
    """SYNC_FLUSH: dispatch the pending puts whose records end at or before ``flushed``.

    Caller holds the put lock. A dispatch error leaves the batch pending (retried on the
    next flush; a restart re-dispatches it from the CommitLog anyway).
    """
    while store._pending and store._pending[0][0] <= flushed:
        dispatch.dispatch(store, store._pending[0][1])
        store._pending.pop(0)


def wait_flushed(store, end: int, results: list) -> None:
    """GroupCommitService: wait until the CommitLog is flushed to ``end``."""
    timeout = store.config.sync_flush_timeout / 1000
    waiter = [end, threading.Event(), None]
    with store._gc_cond:
        store._gc_waiters.append(waiter)
        store._gc_cond.notify()
    if not waiter[1].wait(timeout):
        raise FlushDiskTimeoutError(
            f"FLUSH_DISK_TIMEOUT: CommitLog not flushed to {end} within syncFlushTimeout "
            f"{store.config.sync_flush_timeout} ms; the messages are appended and will be "
            "visible after the next flush", results)
    if waiter[2] is not None:
        raise waiter[2]


def group_commit_loop(store) -> None:
    """Serve SYNC_FLUSH waiters: one fdatasync covers every request queued before it."""
    while not store._stop_flush.is_set():
        with store._gc_cond:
            if not store._gc_waiters and not store._pending:
                store._gc_cond.wait(0.01)
            waiters, store._gc_waiters = store._gc_waiters, []
        if not waiters and not store._pending:
            continue
        error = None
        try:
            flush_commitlog(store)
        except Exception as exc:  # reported to every waiter
            log.exception("group commit flush failed")
            error = exc
            store._stop_flush.wait(0.01)  # do not spin on a failing disk
        flushed = store.commitlog.flushed_where
        for w in waiters:
            if error is None and flushed < w[0]:
                with store._gc_cond:  # appended after this round: next round
                    store._gc_waiters.append(w)
                continue
            w[2] = error
            w[1].set()


def flush_commitlog(store) -> bool:
    """Sync the CommitLog only (and, under SYNC_FLUSH, dispatch what became durable).

    The cheap half of :meth:`flush` that group commit runs per round; ConsumeQueues and the
    checkpoint follow on the background flush interval. Returns True if data was synced.
    """
    cl = store.commitlog
    with store._flush_lock:
        with store.put_lock:
            end, ts = cl.max_offset, cl.last_store_timestamp
        synced = cl.flush(0, end, ts)
        if store.sync_flush:
            with store.put_lock:
                dispatch_flushed(store, cl.flushed_where)
        return synced


def flush_loop(store) -> None:
    """FlushRealTimeService: every ``flushIntervalCommitLog`` ms flush when at least
    ``flushCommitLogLeastPages`` pages are dirty, and everything every
    ``flushCommitLogThoroughInterval`` ms (checkpoint included). Under SYNC_FLUSH the
    CommitLog is synced by group commit; this loop then keeps the ConsumeQueues and the
    checkpoint close behind (FlushConsumeQueueService)."""
    cfg = store.config
    interval = cfg.flush_interval_commit_log / 1000
    while not store._stop_flush.wait(interval):
        try:
            now = time.monotonic()
            if store.sync_flush or (now - store._last_thorough_flush) * 1000 >= \
                    cfg.flush_commit_log_thorough_interval:
                store._last_thorough_flush = now
                flush(store, 0)
            else:
                flush(store, cfg.flush_commit_log_least_pages)
        except Exception:  # keep flushing; the next round retries
            log.exception("background flush failed")
