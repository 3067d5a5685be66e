"""Recovery at open: find the CommitLog's end and bring the ConsumeQueues and the index level
with it (RocketMQ ``DefaultMessageStore.recover``, ``CommitLog.recoverNormally`` /
``recoverAbnormally``; docs/format.md "Recovery").

After a clean shutdown (no ``abort`` file) the scan starts at the last record the ConsumeQueues
hold; after a crash, at the newest CommitLog segment whose first record is older than the
checkpoint. Every record from there is checked (size, magic, body CRC), a torn tail is dropped,
ConsumeQueue units and index items past the end are cut, and the records the queues lack are
dispatched again (:mod:`engine.service.dispatch`). Records the queues already hold are compared by their
unit without decoding (:func:`light_unit`). A CommitLog (plain, or DLedger's entries) is
walked in batches by the compiled step and decoder (:class:`RecordRun`,
:func:`engine.read.recoverruns.recovery_runs`, which the store hands :func:`recover`), their
units compared per queue at once; where the batches stop,
:meth:`engine.format.commitlog.CommitLog.scan_raw` walks on record by record and says where
the data ends. Tests:
tests/engine/test_crash.py, test_rocketmq_scenarios.py, test_store_hardening.py,
test_fastpaths.py (decoded vs undecoded), test_recovery_batches.py (batched vs record by
record, on damaged stores).
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import CorruptRecordError
from ..format.consumequeue import CQ_STORE_UNIT_SIZE, UNIT, UNIT_DTYPE_SPEC

# The fast put path and the recovery scan (kept apart from the imports above on purpose).
from ..format.javahash import tags_code
from ..format.mappedfile import MappedFiles
from ..format.message import (
    BORNHOST_V6_FLAG,
    FIXED_V4,
    INNER_BATCH_FLAG,
    INT32,
    PROPERTY_END,
    PROPERTY_TAGS,
    RECORD_HEAD,
    SCHEDULE_TOPIC,
    STORE_TIMESTAMP_END_MAX,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    MessageRecord,
    cal_msg_length,
    check_unit_record,
    decode_properties,
    decode_record,
    is_record_magic,
    is_v2_magic,
    property_prefix,
    read_store_timestamp,
)
from . import dispatch, workprogress
from .dispatch import DispatchRequest
from .storetree import controller_replica

if TYPE_CHECKING:
    import numpy as np

    from ..store import MessageStore

log = logging.getLogger(__name__)

_TAGS_ITEM = property_prefix(PROPERTY_TAGS)
_PROPERTY_END_BYTE = PROPERTY_END[0]
_HOSTS_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_TAGS_CODES: dict[
    bytes, int
] = {}  # TAGS value (bytes) -> tagsCode, shared (a pure function), bounded
#: The recovery scan updates its progress bar every this many CommitLog bytes (and at the end).
PROGRESS_STEP = 16 << 20


@dataclass
class RecoveryReport:
    """What the recovery at open did (``MessageStore.recovery_report``; status.json
    ``recovery``; the line ``rmqfs mount`` prints).

    Attributes:
        abnormal: the last exit was not clean (an ``abort`` file): abnormal recovery.
        scan_start, scan_end: the CommitLog range checked, record by record; ``scan_end`` is
            the CommitLog's end after recovery.
        bytes_scanned, records_scanned: what the scan(s) read (a rescan from the first
            segment, when a queue lacked older units, counts again).
        torn_tail: why the scan stopped before the data's end (a torn or damaged record), or
            None when the CommitLog ended cleanly.
        records_cut: valid-looking records dropped from the tail (torn inside their
            properties).
        units_dropped: ConsumeQueue units dropped (past the CommitLog's end, or not matching
            their record).
        units_rebuilt: ConsumeQueue units written again from the CommitLog (re-dispatched).
        index_rebuilt: index entries written again from the CommitLog.
        unconfirmed: bytes of valid records at the CommitLog's end a controller-mode replica
            has not confirmed (past the checkpoint's confirmPhyOffset, not in its
            ConsumeQueues): not shown (:func:`confirmed_end`).
        repairs: what opening the store repaired (``MessageStore.repairs``: torn or missing
            files, inconsistent IndexFiles), as ``"<path>: <what>"`` lines.
        damaged: damaged records a re-dispatch met before where RocketMQ's recovery starts
            (``recoverNormally``/``recoverAbnormally`` never read there), as ``"<offset>:
            <what>; ..."`` lines: the CommitLog is kept whole (it is not cut there), and the
            records from each to the next segment were not re-dispatched.
        seconds: how long recovery took (loading the ConsumeQueues included).
    """

    abnormal: bool = False
    scan_start: int = 0
    scan_end: int = 0
    bytes_scanned: int = 0
    records_scanned: int = 0
    torn_tail: str | None = None
    records_cut: int = 0
    units_dropped: int = 0
    units_rebuilt: int = 0
    index_rebuilt: int = 0
    unconfirmed: int = 0
    repairs: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def did_something(self) -> bool:
        """True after a crash, or when anything was dropped, rebuilt, repaired or left out
        (unconfirmed)."""
        return bool(
            self.abnormal
            or self.torn_tail
            or self.records_cut
            or self.units_dropped
            or self.units_rebuilt
            or self.index_rebuilt
            or self.unconfirmed
            or self.repairs
            or self.damaged
        )

    def moved_data(self) -> bool:
        """True when recovery changed the data the checkpoint describes: records cut from
        the CommitLog's tail, ConsumeQueue units dropped or rebuilt, index entries rebuilt.
        (A crash alone, or repairs of other files, change none of it.)"""
        return bool(
            self.torn_tail
            or self.records_cut
            or self.units_dropped
            or self.units_rebuilt
            or self.index_rebuilt
        )

    def summary(self) -> str:
        """One line: what recovery did."""
        parts = [
            f"scanned {_human_size(self.bytes_scanned)} of CommitLog "
            f"({self.records_scanned:,} records, [{self.scan_start}, {self.scan_end}))"
        ]
        if self.torn_tail:
            parts.append(f"dropped a torn tail at {self.scan_end} ({self.torn_tail})")
        if self.records_cut:
            parts.append(f"cut {self.records_cut} torn record{'s' * (self.records_cut != 1)}")
        if self.units_dropped:
            parts.append(
                f"dropped {self.units_dropped:,} stale ConsumeQueue "
                f"unit{'s' * (self.units_dropped != 1)}"
            )
        parts.append(
            f"rebuilt {self.units_rebuilt:,} ConsumeQueue units and "
            f"{self.index_rebuilt:,} index entries"
        )
        if self.unconfirmed:
            parts.append(
                f"{_human_size(self.unconfirmed)} past confirmPhyOffset not shown "
                "(controller mode: not confirmed yet)"
            )
        if self.repairs:
            parts.append(
                f"{len(self.repairs)} repair{'s' * (len(self.repairs) != 1)} (status.json repairs)"
            )
        if self.damaged:
            parts.append(
                f"{len(self.damaged)} damaged record{'s' * (len(self.damaged) != 1)} before "
                f"where recovery starts, kept (rmqfs verify; status.json recovery.damaged)"
            )
        how = "after a crash" if self.abnormal else "after a clean shutdown"
        return f"recovery {how} in {self.seconds:.1f} s: " + ", ".join(parts)

    def to_json(self) -> dict:
        """status.json's ``recovery`` object (RocketMQ-style camelCase names)."""
        return {
            "abnormal": self.abnormal,
            "scanStartOffset": self.scan_start,
            "scanEndOffset": self.scan_end,
            "bytesScanned": self.bytes_scanned,
            "recordsScanned": self.records_scanned,
            "tornTail": self.torn_tail,
            "recordsCut": self.records_cut,
            "unitsDropped": self.units_dropped,
            "unitsRebuilt": self.units_rebuilt,
            "indexEntriesRebuilt": self.index_rebuilt,
            "unconfirmedBytes": self.unconfirmed,
            "repairs": len(self.repairs),
            "damaged": list(self.damaged),
            "seconds": round(self.seconds, 3),
            "didSomething": self.did_something(),
        }


def _human_size(n: float) -> str:
    """``n`` bytes, human-readable (binary units)."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _queue_units(store: MessageStore) -> int:
    return sum(cq.max_offset - cq.min_offset for cq in store.consume_queues.values())


def recover(
    store: MessageStore,
    progress: workprogress.ProgressFactory | None = None,
    report: RecoveryReport | None = None,
    undecoded: bool = True,
    runs: RunSource | None = None,
) -> RecoveryReport:
    """Find the end of the CommitLog and make the ConsumeQueues agree with it.

    Normal recovery (no ``abort`` file) scans from the newest record the queues point at;
    abnormal recovery starts from the segment the checkpoint vouches for
    (``isMappedFileMatchedRecover``). Either way the scan stops at the first invalid
    record, everything after it is dropped, and records the queues lack are dispatched
    (idempotently). If a queue turns out to miss older units, the scan restarts from the
    first segment.

    ``progress``: a progress factory (:mod:`engine.service.workprogress`); the scan is one bar,
    "recovering CommitLog", in bytes from its start to the end of the last segment (an upper
    bound of the data), updated every :data:`PROGRESS_STEP` bytes. Returns ``report`` (a new
    :class:`RecoveryReport` when None) with what was done. ``undecoded`` False decodes every
    record instead of comparing the units of records the queues already hold with the raw
    record (the two must agree: tests/engine/test_fastpaths.py compares them). ``runs``: the
    batched walk of a plain or DLedger CommitLog (:data:`RunSource`; the store hands
    :func:`engine.read.recoverruns.recovery_runs`); None walks record by record
    (:meth:`engine.format.commitlog.CommitLog.scan_raw`).
    """
    started = time.monotonic()
    report = report if report is not None else RecoveryReport()
    report.abnormal = not store.last_exit_ok
    try:
        _recover(store, progress, report, undecoded, runs)
    finally:
        report.repairs = list(store.repairs)
        report.seconds += time.monotonic() - started
    return report


def _recover(
    store: MessageStore,
    progress: workprogress.ProgressFactory | None,
    report: RecoveryReport,
    undecoded: bool,
    runs: RunSource | None = None,
) -> None:
    cl = store.commitlog
    if not cl.files.segments:
        report.units_dropped += _queue_units(store)
        for cq in store.consume_queues.values():
            cq.truncate_to(cq.min_offset)
        cl.max_offset = cl.files.min_offset
        report.scan_start = report.scan_end = cl.max_offset
        return
    report.units_dropped += check_queue_tails(store)
    # what the broker's ConsumeQueues held (served already) before anything is re-dispatched
    held = max((cq.max_physic_offset for cq in store.consume_queues.values()), default=-1)
    start = recovery_start(store)
    if cl.entries is not None:
        start = min(start, dledger_recovery_start(store))
    # where RocketMQ's recovery would start: only the records from here on decide the end
    # (after a crash that is ``start`` itself, the checkpoint's segment: not looked for twice)
    trusted = start if not store.last_exit_ok else rocketmq_start(store)
    if cl.entries is not None:
        trusted = min(trusted, start)
    if store.index_service is not None:
        # The IndexFiles may lag the ConsumeQueues (deleted, or dropped after a crash).
        start = max(
            cl.min_offset, min(start, record_boundary(store, store.index_service.end_phy_offset))
        )
    report.scan_start = start
    end, gap, tail = _scan_past_old_damage(
        store, start, trusted, progress, report, "recovering CommitLog", undecoded, runs
    )
    if gap and start > cl.min_offset:
        log.warning("a ConsumeQueue lacks older units; re-dispatching the whole CommitLog")
        report.scan_start = cl.min_offset
        report.damaged.clear()  # (met again, from the first segment)
        end, _, tail = _scan_past_old_damage(
            store,
            cl.min_offset,
            trusted,
            progress,
            report,
            "re-dispatching CommitLog",
            undecoded,
            runs,
        )
    prev, last = tail
    if (
        last is not None
        and prev is not None
        and last.commitlog_offset + last.store_size == end
        and ends_with_separator(store, prev) is True
        and _properties_end_in_zeros(store, last)
    ):
        # A tear inside the properties passes the size and body-CRC checks. 5.x writers
        # end a properties area with PROPERTY_SEPARATOR (\x02) (4.9.x ones do not): when
        # the record before does, a last record whose properties end in the zeros a tear
        # leaves (the preallocated file's) is torn; one that ends in a value's character is
        # a 4.9.x writer's after a 5.x one's (a downgrade), whole, and kept as RocketMQ keeps it.
        log.warning(
            "CommitLog: the last record at %d is torn inside its properties; dropped",
            last.commitlog_offset,
        )
        end = last.commitlog_offset
        report.records_cut += 1
    if cl.scan_error:
        log.warning("CommitLog: dropping a torn tail at %d: %s", end, cl.scan_error)
        report.torn_tail = cl.scan_error
    elif cl.entries is None and (file_end := cl.end_of_file_blank(end)) is not None:
        # RocketMQ's END_OF_FILE blank record fills the rest of the last file (its writer
        # stopped before it made the next one): the file is whole, and the next put goes to
        # a new file, as RocketMQ's goes once it finds no room here
        end = file_end
    elif cl.entries is None:  # (a DLedger walk also ends at the committed index)
        later = _records_after(store, end)
        if later is not None:  # zeros end the log as RocketMQ's walk ends it: say what goes
            report.torn_tail = (
                f"zeros at {end} where a record should be; the records from {later} on "
                "are dropped with them"
            )
            log.warning("CommitLog: %s", report.torn_tail)
        else:
            written = _written_after(store, end)
            if written is not None:  # a later page reached the disk, an earlier one did not
                report.torn_tail = (
                    f"zeros at {end} where a record should be; bytes written from {written} "
                    "on in the same file are dropped with them"
                )
                log.warning("CommitLog: %s", report.torn_tail)
    report.scan_end = end
    if store.read_only and controller_replica(store.root):
        shown = confirmed_end(store, end, held)
        report.unconfirmed = end - shown
        end = shown
    units = _queue_units(store)
    for cq in store.consume_queues.values():
        cq.truncate_dirty(end)
    report.units_dropped += units - _queue_units(store)
    for cq in store.consume_queues.values():
        cq.correct_min_offset(cl.min_offset)
    for d in store.dispatchers:
        d.truncate(end)
    cl.truncate(end)
    cl.flushed_where = end
    # the store time of the last record kept (what brokerStatus shows, and what the next
    # checkpoint's physicMsgTimestamp says: an open and close that write nothing must leave
    # the broker's checkpoint as it was, not write 0 there)
    for rec in (last, prev):
        if rec is not None and rec.commitlog_offset + rec.store_size <= end:
            cl.last_store_timestamp = cl.flushed_store_timestamp = rec.store_timestamp
            break


def confirmed_end(store: MessageStore, end: int, held: int) -> int:
    """Where a controller-mode replica's records visible to consumers end: at the end of the
    last valid record (below ``end``) wholly at or before the checkpoint's confirmPhyOffset,
    or at ``held`` (the end of the last record its ConsumeQueues held: the broker dispatched,
    so served, those already), whichever is later.

    A 5.x broker in controller mode (``enableControllerMode``) dispatches only records
    confirmed by its sync-state set: ``ReputMessageService.getReputEndOffset`` is
    ``CommitLog.getConfirmOffset`` (unless ``readUnCommitted``), recovery dispatches up to it
    (``CommitLog.recoverAbnormally``), and a record that ends past it waits. What lies after
    may still be truncated when the replica follows a master that lacks it
    (``AutoSwitchHAClient``). Walks only the records from ``held`` to ``end``
    (:meth:`engine.format.commitlog.CommitLog.scan_raw`).
    """
    cl = store.commitlog
    confirm = min(store.checkpoint.confirm_phy_offset, end)
    shown = max(held, cl.min_offset)
    if shown >= confirm:
        return min(shown, end)
    for _buf, _pos, phys, total, *_ in cl.scan_raw(shown, end=confirm):
        if phys + total > confirm:
            break
        shown = phys + total
    return shown


def ends_with_separator(store: MessageStore, rec: MessageRecord) -> bool | None:
    """Whether the record's properties area ends with PROPERTY_SEPARATOR; None when it is
    empty."""
    props_len = rec.store_size - cal_msg_length(
        rec.sys_flag, len(rec.body), len(rec.topic.encode()), 0, is_v2_magic(rec.magic)
    )
    if props_len <= 0:
        return None
    end = rec.commitlog_offset + rec.store_size
    return store.commitlog.files.read(end - 1, 1) == PROPERTY_END


def _records_after(store: MessageStore, end: int) -> int | None:
    """The start of the first segment after the one ``end`` is in (or starts) whose first
    record has a record's magic, where zeros ended the scan at ``end``: records recovery drops
    with the zeros (None: none; a preallocated next segment is all zeros)."""
    cl = store.commitlog
    for seg in cl.files.segments:
        if seg.start <= end:
            continue
        head = os.pread(seg.fd, RECORD_HEAD.size, cl.header_size)
        if len(head) == RECORD_HEAD.size and is_record_magic(RECORD_HEAD.unpack_from(head)[1]):
            return seg.start
    return None


#: bytes of data (``SEEK_DATA``) :func:`_written_after` reads past zeros, at most
_WRITTEN_AFTER_MAX = 64 << 20


def _written_after(store: MessageStore, end: int) -> int | None:
    """The CommitLog offset of the first non-zero byte after ``end`` in the segment holding
    ``end``, where zeros ended the scan (a crash that wrote a later page of the file and not
    an earlier one: the records there go with the zeros, as RocketMQ's walk drops them); None
    when the rest of the file is zeros. Preallocated, never written parts are skipped with
    ``SEEK_DATA``; at most :data:`_WRITTEN_AFTER_MAX` bytes are read."""
    import numpy as np

    seg = store.commitlog.files.find(end)
    if seg is None or seg.fd < 0:
        return None
    pos, budget = end - seg.start, _WRITTEN_AFTER_MAX
    seek_data: int | None = getattr(os, "SEEK_DATA", None)
    while pos < seg.size and budget > 0:
        if seek_data is not None:
            try:
                pos = os.lseek(seg.fd, pos, seek_data)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    return None  # no data past pos
                seek_data = None  # not supported here: read the bytes
        if pos >= seg.size:
            break
        chunk = os.pread(seg.fd, min(1 << 20, seg.size - pos, budget), pos)
        if not chunk:
            break
        nonzero = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8))
        if len(nonzero):
            return seg.start + pos + int(nonzero[0])
        pos += len(chunk)
        budget -= len(chunk)
    return None


def _properties_end_in_zeros(store: MessageStore, rec: MessageRecord) -> bool:
    """Whether the record's properties area is not empty and its last byte is 0 (where a
    torn write left the preallocated file's zeros; a written properties area ends with
    PROPERTY_SEPARATOR or a value's last character)."""
    if ends_with_separator(store, rec) is not False:
        return False
    end = rec.commitlog_offset + rec.store_size
    return store.commitlog.files.read(end - 1, 1) == b"\0"


def check_queue_tails(store: MessageStore) -> int:
    """Drop trailing ConsumeQueue units that do not describe their record.

    A torn unit can look valid (offset and size intact, tagsCode half written); RocketMQ
    would keep it. Each queue's last units are compared with the CommitLog record they
    point at (start, size, queue offset, tagsCode) and dropped until one agrees, in one cut
    and one log line a queue; the scan that follows re-dispatches them. Cost: one record read
    per queue, and one per unit dropped. Returns the number of units dropped.
    """
    cl = store.commitlog
    dropped = 0
    for cq in store.consume_queues.values():
        end = qend = cq.max_offset
        while qend > cq.min_offset:
            qoff = qend - 1
            off, size, tc = cq.unit(qoff)
            if size == 0x7FFFFFFF:
                break
            try:
                rec = cl.read_message(off, size) if off >= cl.min_offset else None
            except CorruptRecordError:
                rec = None
            if (
                rec is not None
                and rec.commitlog_offset == off
                and is_unit_of(rec, cq.topic, cq.queue_id, qoff)
                and dispatch.dispatch_of(store, rec).tags_code == tc
            ):
                break
            if rec is None and off < cl.min_offset:
                break  # expired record: nothing to compare with
            qend = qoff
        if qend < end:
            what = f"unit {qend}" if end - qend == 1 else f"units {qend}..{end - 1}"
            log.warning(
                "ConsumeQueue %s/%d: %s did not match the CommitLog; dropped and rebuilt",
                cq.topic,
                cq.queue_id,
                what,
            )
            cq.truncate_to(qend)
            cq.repairs.append(f"{what} did not match the CommitLog")
            dropped += end - qend
    return dropped


def is_unit_of(rec: MessageRecord, topic: str, queue_id: int, queue_offset: int) -> bool:
    """Whether ``rec`` is the record of unit ``queue_offset`` of ``topic``/``queue_id``: its
    own topic's, or another queue's that the record's multi-dispatch properties name (an
    LMQ's, or a 4.x ``MultiDispatch`` name's: ``check_unit_record``)."""
    try:
        check_unit_record(rec, queue_id, queue_offset, topic)
    except CorruptRecordError:
        return False
    return True


def record_boundary(store: MessageStore, offset: int) -> int:
    """Where a walk from the record at ``offset`` starts (``offset``, less the DLedger entry
    header before it: ``CommitLog.header_size``) when a valid record starts there, else the
    start of its segment."""
    cl = store.commitlog
    if offset <= cl.min_offset + cl.header_size:
        return cl.min_offset
    try:
        size = INT32.unpack(cl.files.read(offset, 4))[0]
        cl.read_message(offset, size)
        return offset - cl.header_size
    except (CorruptRecordError, struct.error):
        return offset - offset % cl.file_size


def dledger_recovery_start(store: MessageStore) -> int:
    """Where the walk over a DLedger CommitLog starts: the third newest data file, as
    ``DLedgerMmapFileStore.recover`` checks from there, or earlier: the file of the committed
    entry (where ``DLedgerLog.committed_end`` puts its end: ``index/``'s unit at
    committedIndex when the entry there agrees), so the walk reaches the committed end."""
    cl = store.commitlog
    segs = cl.files.segments
    start = segs[max(0, len(segs) - 3)].start if segs else cl.min_offset
    entries = cl.entries
    end = entries.committed_end() if entries is not None else None
    if end is None:
        return cl.min_offset  # nothing committed: the walk ends at the first entry
    last = end - 1  # a byte of the committed entry (DLedgerLog.committed_end: confirmed)
    if cl.min_offset <= last < start:
        start = last - last % cl.file_size
    return max(start, cl.min_offset)


def recovery_start(store: MessageStore) -> int:
    cl = store.commitlog
    if store.last_exit_ok:
        last = max((cq.last_commitlog_offset for cq in store.consume_queues.values()), default=-1)
        # A queue whose files had to be repaired (torn or missing file) is re-dispatched
        # from its last good unit on.
        damaged = [cq.last_commitlog_offset for cq in store.consume_queues.values() if cq.repairs]
        if damaged:
            last = min(damaged)
            if last < cl.min_offset:
                return cl.min_offset
        if last >= cl.min_offset:
            seg = cl.files.find(last)
            if seg is not None:
                try:
                    size = INT32.unpack(cl.files.read(last, 4))[0]
                    cl.read_message(last, size, check_crc=True)
                    return last - cl.header_size  # a DLedger record's entry
                except (CorruptRecordError, struct.error):
                    pass
        return cl.min_offset
    # Abnormal: newest segment whose first record is older than the checkpoint (a DLedger
    # file's first record is after its first entry's header).
    min_ts = store.checkpoint.min_timestamp
    for seg in reversed(cl.files.segments):
        head = os.pread(seg.fd, STORE_TIMESTAMP_END_MAX, cl.header_size)
        if len(head) < STORE_TIMESTAMP_END_MAX:
            continue
        if not is_record_magic(RECORD_HEAD.unpack_from(head)[1]):
            continue
        store_ts = read_store_timestamp(head)
        if store_ts and store_ts <= min_ts:
            return seg.start
    return cl.min_offset


def rocketmq_start(store: MessageStore) -> int:
    """Where RocketMQ's own recovery after a clean shutdown starts reading the CommitLog, whose
    records decide where it ends: the start of the segment holding the newest record the
    ConsumeQueues point at (``recoverNormally`` of 5.3.2 on; 4.x walks from the third-last
    segment), or the first segment when they point at none. (After a crash it is
    :func:`recovery_start`'s segment, ``recoverAbnormally``'s.)"""
    cl = store.commitlog
    last = max((cq.last_commitlog_offset for cq in store.consume_queues.values()), default=-1)
    seg = cl.files.find(last) if last >= cl.min_offset else None
    return seg.start if seg is not None else cl.min_offset


def scan_and_dispatch(
    store: MessageStore,
    start: int,
    full: bool,
    progress: workprogress.ProgressFactory | None = None,
    report: RecoveryReport | None = None,
    desc: str = "recovering CommitLog",
    runs: RunSource | None = None,
) -> tuple[int, bool]:
    """Check every record from ``start`` to the first invalid one and dispatch what the
    derived files lack. Returns ``(end, gap)``: where the valid records end, and whether a
    queue lacks units before the scan's first record.

    ``progress`` (a progress factory, :mod:`engine.service.workprogress`) gets one bar, ``desc``, of
    the bytes from ``start`` to the end of the last segment, updated every
    :data:`PROGRESS_STEP` bytes and filled at the end. ``report`` counts what was scanned and
    rebuilt. ``runs``: as for :func:`recover`.
    """
    end, gap, _ = _scan_and_dispatch(store, start, full, progress, report, desc, True, runs)
    return end, gap


#: The last two records a scan decoded, ``(prev, last)`` (None where there are fewer).
_Tail = tuple[MessageRecord | None, MessageRecord | None]


def _scan_past_old_damage(
    store: MessageStore,
    start: int,
    trusted: int,
    progress: workprogress.ProgressFactory | None,
    report: RecoveryReport,
    desc: str,
    undecoded: bool,
    runs: RunSource | None,
) -> tuple[int, bool, _Tail]:
    """:func:`_scan_and_dispatch` from ``start`` to the CommitLog's end, where ``trusted`` is
    where RocketMQ's recovery starts (``recoverNormally``: the queues' last record;
    ``recoverAbnormally``: the segment the checkpoint vouches for). A scan that starts before
    it (to rebuild an index or a queue that lags) and stops at a damaged or zeroed record
    before it has met old damage, which RocketMQ never reads and never cuts the log at: the
    damage goes to ``report.damaged`` and the scan goes on from the next segment's first
    record (or from ``trusted``, when that comes first), so only a record from ``trusted`` on
    ends the CommitLog. Returns what the last scan returned (``gap``: any scan's)."""
    cl = store.commitlog
    full = start <= cl.min_offset
    end, gap, tail = _scan_and_dispatch(store, start, full, progress, report, desc, undecoded, runs)
    while end < trusted:
        seg = cl.files.find(end)
        resume = trusted if seg is None else min(seg.end, trusted)
        what = cl.scan_error or "zeros where a record should be"
        report.damaged.append(f"{end}: {what}; [{end}, {resume}) not re-dispatched")
        log.warning(
            "CommitLog: a damaged record at %d (%s), before where recovery starts (%d): kept, "
            "and [%d, %d) not re-dispatched",
            end,
            what,
            trusted,
            end,
            resume,
        )
        end, more_gap, tail = _scan_and_dispatch(
            store, resume, False, progress, report, desc, undecoded, runs
        )
        gap = gap or more_gap
    return end, gap, tail


def _scan_and_dispatch(
    store: MessageStore,
    start: int,
    full: bool,
    progress: workprogress.ProgressFactory | None,
    report: RecoveryReport | None,
    desc: str,
    undecoded: bool,
    runs: RunSource | None = None,
) -> tuple[int, bool, _Tail]:
    """:func:`scan_and_dispatch`, and the last two records decoded ``(prev, last)`` (None
    where there are fewer)."""
    cl = store.commitlog
    total = max(0, cl.files.end_offset - start)
    bar = workprogress.bar(progress, total, desc, "B")
    report = report if report is not None else RecoveryReport()
    index = store.index_service
    indexed_before = index.item_count() if index is not None else 0
    try:
        end, gap, records, tail = _scan(store, start, full, bar, report, undecoded, runs)
    finally:
        bar.close()
    report.bytes_scanned += max(0, end - start)
    report.records_scanned += records
    if index is not None:
        report.index_rebuilt += max(0, index.item_count() - indexed_before)
    return end, gap, tail


class RecordRun(NamedTuple):
    """The records of one range of a CommitLog, checked and decoded column-wise
    (:func:`engine.read.recoverruns.recovery_runs`): what :func:`_scan` compares with the
    ConsumeQueues at once. Arrays are aligned, one element per record, in CommitLog order.

    Attributes:
        data, base: the buffer holding the records (a file's mapping, or bytes) and the
            CommitLog offset of ``data[0]``.
        offsets, sizes: int64 CommitLog offsets and TOTALSIZEs (bytes).
        topics: the distinct topics of the run; ``topic_index`` (int) each record's.
        queue_ids, queue_offsets, sys_flags, store_timestamps: the record fields.
        tags_codes: int64 tagsCode of each record's TAGS (0 without), as
            :func:`light_unit` gives (not a ``SCHEDULE_TOPIC_XXXX`` deliver time).
        entries: a DLedger CommitLog's: each record's entry index and term (int64, shape
            ``(n, 2)``), None for a plain one.
        index_entries: the IndexFile entries of the records past the offset the scan asked
            for (``index_after`` of :data:`RunSource`), flat int64 ``[keyHash, phyOffset,
            storeTimestamp, ...]`` in CommitLog order, as ``IndexService.buildIndex`` adds
            them; None when not asked for, or when the run must be dispatched record by
            record (:func:`engine.read.recoverruns.index_entries` says when).
    """

    data: Any
    base: int
    offsets: np.ndarray
    sizes: np.ndarray
    topics: list[str]
    topic_index: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    sys_flags: np.ndarray
    store_timestamps: np.ndarray
    tags_codes: np.ndarray
    entries: np.ndarray | None = None
    index_entries: np.ndarray | None = None


#: ``runs(files, start, check_crc, max_message_size, committed, after, index_after)``: the
#: batched walk of a plain CommitLog, or with ``committed`` (the checkpoint's committedIndex)
#: of a DLedger one whose entry at ``start`` follows the entry ``after`` (index, term; None:
#: the first walked), its runs carrying the index entries of the records past ``index_after``
#: (None: none) (:func:`engine.read.recoverruns.recovery_runs`, which the store hands
#: recovery: this layer cannot import the reader's), or None when this process has no
#: compiled walk
RunSource = Callable[
    [MappedFiles, int, bool, int, "int | None", "tuple[int, int] | None", "int | None"],
    Iterator[RecordRun] | None,
]
#: The scan goes record by record over its first this many bytes, in batches after them (a
#: short scan does not load numpy and pyarrow; tests set 0)
BATCHES_AFTER = 1 << 20


class _Scan:
    """The state of one recovery scan: what :func:`_scan` hands to dispatch record by record,
    the queues already handed a record (``dirty``), the units read ahead, the progress bar."""

    def __init__(
        self,
        store: MessageStore,
        start: int,
        full: bool,
        bar: workprogress.ProgressBar,
        report: RecoveryReport,
        undecoded: bool,
        runs: bool = False,
    ) -> None:
        self.store = store
        self.runs = runs  # batches may follow the records handed one by one
        self.full = full
        self.bar = bar
        self.report = report
        self.batch: list[DispatchRequest] = []
        self.gap = False
        self.cqs = store.consume_queues
        index = store.index_service
        # Records the ConsumeQueues and the index already hold need no decoding. The index
        # drops them (offset below its endPhyOffset); _dispatch would compare each one's unit
        # with the record (_verify_present) and change nothing when they agree. So the unit
        # is compared here, from offset, size and the tagsCode read straight from the record,
        # against units read ahead in blocks. From the first record of a queue that goes to
        # _dispatch (a unit that differs, or any other reason), every later record of that
        # queue goes there too, so a truncation and rewrite happen exactly as on the decoded
        # path. Dispatchers that need every record decoded turn this off
        # (engine.service.dispatch). An LMQ store's records are all decoded: the units of a
        # record's LMQ queues (INNER_MULTI_DISPATCH, in its properties) are checked and
        # rebuilt like its own.
        self.skip_known = (
            undecoded
            and not store.lmq_enabled
            and all(map(dispatch.skips_below_end_offset, store.dispatchers))
        )
        self.indexed_below = index.end_phy_offset if index is not None else None
        # Where the ConsumeQueues and the index are the only dispatchers, a run goes to them
        # whole (run_whole): the units of its records the queues lack from its columns, the
        # index entries of its records past indexed_below from the compiled core
        # (RecordRun.index_entries, asked for with index_after); no record decoded one by one.
        self.index = index
        self.whole_runs = self.skip_known and all(d is index for d in store.dispatchers)
        self.index_after = self.indexed_below if self.whole_runs else None
        self.windows: dict = {}  # (topic, queueId) -> (first queue offset, raw units ahead)
        self.dirty: set = set()  # queues with a record handed to _dispatch
        self.tail: list[bytes] = []  # the last two records' bytes, decoded after the scan
        self.shown = start  # bytes up to here are on the progress bar
        self.next_show = start + PROGRESS_STEP
        self.records = 0

    def show(self, phys: int) -> None:
        """The progress bar at the record at ``phys`` (every PROGRESS_STEP bytes)."""
        if phys >= self.next_show:
            self.bar.update(phys - self.shown)
            self.shown, self.next_show = phys, phys + PROGRESS_STEP

    def one(
        self, buf: Any, pos: int, phys: int, topic: str, qid: int, qoff: int, sys_flag: int
    ) -> None:
        """Hand the record at ``buf[pos]`` (CommitLog offset ``phys``) to dispatch unless the
        derived files hold it already (the record-by-record rule)."""
        d = None
        key = (topic, qid)
        covered = self.indexed_below is None or phys < self.indexed_below
        held = False  # its queue holds its unit as it is (or expired it)
        if self.skip_known:
            cq = self.cqs.get(key)
            if sys_flag & TRANSACTION_TYPE_MASK in (
                TRANSACTION_PREPARED_TYPE,
                TRANSACTION_ROLLBACK_TYPE,
            ):
                if covered:
                    return  # no unit, and already indexed
            elif (
                (covered or self.runs)  # (held matters past the index's end to runs only)
                and cq is not None
                and qoff < cq.max_offset
                and topic != SCHEDULE_TOPIC
                and not sys_flag & _HOSTS_V6
            ):
                size, tc, store_ts = light_unit(buf, pos)
                if key not in self.dirty:
                    if qoff < cq.min_offset:
                        held = True  # not present, not written: as _dispatch does
                    else:
                        w = self.windows.get(key)
                        if w is None or not w[0] <= qoff < w[0] + len(w[1]) // CQ_STORE_UNIT_SIZE:
                            w = self.windows[key] = (qoff, cq.read_units(qoff, 4096))
                        i = (qoff - w[0]) * CQ_STORE_UNIT_SIZE
                        held = w[1][i : i + CQ_STORE_UNIT_SIZE] == UNIT.pack(phys, size, tc)
                if covered:
                    if held:
                        return
                    d = DispatchRequest(
                        topic, qid, phys, size, tc, store_ts, qoff, [], None, sys_flag
                    )
        if d is None:  # decoded: its index keys are wanted, or its unit needs more than the above
            d = dispatch.dispatch_of(self.store, decode_record(buf, pos, check_crc=False))
        if not held:
            # From here on every record of this queue goes to dispatch. A record handed over
            # only for its index keys changes nothing in its queue (dispatch compares the unit
            # it holds and finds it equal), so its queue is not marked.
            self.dirty.add(key)
        if d is not None:
            self.batch.append(d)
        if len(self.batch) >= 4096:
            self.flush()

    def flush(self) -> None:
        """Dispatch what was handed so far."""
        if self.batch:
            self.gap |= dispatch.dispatch(
                self.store, self.batch, recovering=True, full=self.full, report=self.report
            )
            self.batch = []

    def keep_tail(self, buf: Any, pos: int, size: int) -> None:
        """Keep a copy of the record ``buf[pos:pos + size]`` as the last one scanned."""
        self.tail = [*self.tail[-1:], bytes(buf[pos : pos + size])]

    def run(self, r: RecordRun) -> None:
        """Every record of ``r``: those whose units the queues hold as they are (compared at
        once, per queue) are passed over; the rest go through :meth:`one`, in order."""
        import numpy as np  # lazily: `import engine` stays light (tests/test_layers.py)

        n = len(r.offsets)
        self.records += n
        offs = r.offsets
        while self.next_show <= offs[-1]:
            self.show(int(offs[int(np.searchsorted(offs, self.next_show))]))
        if self.whole_runs and (self.index_after is None or r.index_entries is not None):
            self.run_whole(r)
        else:
            for i in np.flatnonzero(~self.known(r)).tolist():
                off = int(offs[i])
                self.one(
                    r.data,
                    off - r.base,
                    off,
                    r.topics[int(r.topic_index[i])],
                    int(r.queue_ids[i]),
                    int(r.queue_offsets[i]),
                    int(r.sys_flags[i]),
                )
        for i in range(max(0, n - 2), n):
            self.keep_tail(r.data, int(offs[i]) - r.base, int(r.sizes[i]))

    def run_whole(self, r: RecordRun) -> None:
        """Dispatch ``r`` as :meth:`one` would record by record, without decoding its
        records: the units its queues lack from its columns (:meth:`known` with the index left
        out), grouped by queue (:func:`dispatch.dispatch_units`), and the run's index entries
        (``r.index_entries``) put at once (``IndexService.put_hashed``), each after what was
        handed before. Where one of those records needs more (a ``SCHEDULE_TOPIC_XXXX``
        record: its tagsCode is a deliver time; a BatchCQ record; the record at
        ``indexed_below``, of which the index may hold some keys: it goes through
        ``IndexService.dispatch``), the run's requests go through :func:`dispatch.dispatch`,
        those records decoded."""
        import numpy as np

        todo = ~self.known(r, index_too=False)
        at = -1  # the record at indexed_below, if in this run
        at_held = False  # its unit is held: it is handed over for its index keys only
        if self.index_after is not None:
            k = int(np.searchsorted(r.offsets, self.index_after))
            if k < len(r.offsets) and r.offsets[k] == self.index_after:
                at, at_held = k, not todo[k]
                todo[at] = True
        picked = np.flatnonzero(todo)
        entries = r.index_entries
        if len(picked):
            special = [
                j
                for j, t in enumerate(r.topics)
                if t == SCHEDULE_TOPIC or t in self.store.batch_cq_topics
            ]
            if np.isin(r.topic_index[picked], special).any() or (
                (r.sys_flags[picked] & INNER_BATCH_FLAG).any()
            ):
                self.batch += self.requests(r, picked, at, set(special))
            else:  # the units by queue; the record at indexed_below alone, in its place
                for part in (picked[picked < at], picked[picked == at], picked[picked > at]):
                    if not len(part):
                        continue
                    self.flush()  # what was handed before goes first
                    if part[0] == at:
                        self.batch += self.requests(r, part, at, set())
                        continue
                    self.gap |= dispatch.dispatch_units(
                        self.store, self.queue_units(r, part), True, self.full, self.report
                    )
            # every queue handed a record from here on, but for a record whose unit its queue
            # holds as it is (the one at indexed_below, handed over for its keys: as one())
            marked = picked[picked != at] if at_held else picked
            self.dirty.update(key for key, _ in _by_queue(r, marked))
        if at >= 0 or (entries is not None and len(entries)):
            self.flush()  # the index takes the keys of the records before these first
        if entries is not None and len(entries) and self.index is not None:
            # what the index holds already is not put again (IndexService.dispatch's rule;
            # nothing past index_after can be there while this scan runs)
            entries = entries.reshape(-1, 3)
            entries = entries[entries[:, 1] > self.index.end_phy_offset].ravel()
            if len(entries):
                self.index.put_hashed(array("q", entries.tobytes()))
        elif len(self.batch) >= 4096:
            self.flush()

    @staticmethod
    def queue_units(r: RecordRun, picked: np.ndarray) -> dict[tuple[str, int], list]:
        """The ConsumeQueue units of records ``picked`` of ``r``, by queue in CommitLog order
        (what :func:`dispatch.dispatch_units` takes)."""
        return {
            key: list(
                zip(
                    r.queue_offsets[sel].tolist(),
                    r.offsets[sel].tolist(),
                    r.sizes[sel].tolist(),
                    r.tags_codes[sel].tolist(),
                )
            )
            for key, sel in _by_queue(r, picked)
        }

    def requests(
        self, r: RecordRun, picked: np.ndarray, at: int, decoded: set[int]
    ) -> list[DispatchRequest]:
        """Dispatch requests of records ``picked`` of ``r``: from its columns without keys (the
        run's index entries hold them), the records of topics ``decoded`` and the record
        ``at`` (with its keys) decoded."""
        topics = r.topics
        reqs = []
        for i, ti, qid, off, size, tc, ts, qoff, flag in zip(
            picked.tolist(),
            r.topic_index[picked].tolist(),
            r.queue_ids[picked].tolist(),
            r.offsets[picked].tolist(),
            r.sizes[picked].tolist(),
            r.tags_codes[picked].tolist(),
            r.store_timestamps[picked].tolist(),
            r.queue_offsets[picked].tolist(),
            r.sys_flags[picked].tolist(),
        ):
            if ti in decoded or i == at:
                d = dispatch.dispatch_of(
                    self.store, decode_record(r.data, off - r.base, check_crc=False)
                )
                if i != at:  # its index entries are in r.index_entries
                    d.keys, d.uniq_key = [], None
            else:
                d = DispatchRequest(topics[ti], qid, off, size, tc, ts, qoff, [], None, flag)
            reqs.append(d)
        return reqs

    def known(self, r: RecordRun, index_too: bool = True) -> np.ndarray:
        """Which records of ``r`` :meth:`one` would pass over: the records below the index's
        end (``indexed_below``; any record with ``index_too`` False) that are PREPARED or
        ROLLBACK, or whose queue was handed no record before them and holds their unit as it
        is, or expired it (bool array)."""
        import numpy as np

        n = len(r.offsets)
        skip = np.zeros(n, bool)
        if not self.skip_known or not n:
            return skip
        eligible = np.ones(n, bool)
        if self.indexed_below is not None and index_too:
            eligible &= r.offsets < self.indexed_below
        flags = r.sys_flags & TRANSACTION_TYPE_MASK
        txn = eligible & (
            (flags == TRANSACTION_PREPARED_TYPE) | (flags == TRANSACTION_ROLLBACK_TYPE)
        )
        comparable = eligible & ~txn & ((r.sys_flags & _HOSTS_V6) == 0)
        for key, idx in _by_queue(r, np.arange(n)):
            topic = key[0]
            held = np.zeros(len(idx), bool)
            cq = self.cqs.get(key)
            if key not in self.dirty and cq is not None and topic != SCHEDULE_TOPIC:
                held = comparable[idx] & self.held(cq, r, idx)
            ok = held | txn[idx]
            first = int(np.argmin(ok)) if not ok.all() else len(idx)
            skip[idx[:first]] = True
            skip[idx[first:]] = txn[idx[first:]]
        return skip

    def held(self, cq: Any, r: RecordRun, idx: np.ndarray) -> np.ndarray:
        """Whether ``cq`` holds the unit of each record ``idx`` of ``r`` as it is (or expired
        it: below its min offset), compared in bulk (bool array)."""
        import numpy as np

        qoff = r.queue_offsets[idx]
        lo, hi = cq.min_offset, cq.max_offset
        present = (qoff >= lo) & (qoff < hi)
        out = (qoff < lo) & (qoff < hi)
        if not present.any():
            return out
        first, last = int(qoff[present].min()), int(qoff[present].max()) + 1
        if last - first > 4 * len(idx) + 4096:
            return out  # scattered queue offsets: each record compared by one()
        raw = []
        at = first
        while at < last:
            got = cq.read_units(at, last - at)
            if not got:
                break
            raw.append(got)
            at += len(got) // CQ_STORE_UNIT_SIZE
        units = np.frombuffer(b"".join(raw), UNIT_DTYPE_SPEC)
        rel = qoff - first
        have = present & (rel < len(units))
        j = np.where(have, rel, 0)
        if not len(units):
            return out
        same = (
            have
            & (units["off"][j] == r.offsets[idx])
            & (units["size"][j] == r.sizes[idx])
            & (units["tags"][j] == r.tags_codes[idx])
        )
        return out | same


def _scan(
    store: MessageStore,
    start: int,
    full: bool,
    bar: workprogress.ProgressBar,
    report: RecoveryReport,
    undecoded: bool,
    runs: RunSource | None = None,
) -> tuple[int, bool, int, _Tail]:
    """Walk the CommitLog from ``start`` and hand dispatch what the derived files lack.

    A CommitLog, plain or DLedger, with the compiled walk (``runs``) goes in batches past its
    first :data:`BATCHES_AFTER` bytes (:class:`RecordRun`, compared per queue at once): where
    they stop (damage, a DLedger filler they cannot pass, or a record they cannot vouch for),
    :meth:`engine.format.commitlog.CommitLog.scan_raw` walks on, record by record, and
    decides where the data ends (``scan_end``, ``scan_error``); after a record it takes, the
    batches go on. A store that verifies every ``__CRC32#`` property
    (``forceVerifyPropCRC``), one whose ``runs`` gives None (no compiled walk) and the
    first :data:`BATCHES_AFTER` bytes are walked by ``scan_raw`` alone. Returns ``(end,
    gap, records, (prev, last))``.
    """
    cl = store.commitlog
    check_crc = store.config.check_crc_on_recover
    s = _Scan(store, start, full, bar, report, undecoded, runs is not None)
    if cl.force_verify_prop_crc and check_crc:
        runs = None
    committed = cl.entries.committed_index if cl.entries is not None else None
    after: tuple[int, int] | None = None  # the last DLedger entry taken (index, term)
    pos = start
    mapped = False
    # record by record first: a short scan (normal recovery's, from the queues' last record)
    # does not pay for loading the batches' numpy and pyarrow
    budget = start + BATCHES_AFTER
    while True:
        batches = None
        if runs is not None and pos >= budget:
            batches = runs(
                cl.files, pos, check_crc, cl.max_message_size, committed, after, s.index_after
            )
            if batches is None:  # no compiled walk in this process
                runs = None
        for r in batches or ():
            s.run(r)
            pos = int(r.offsets[-1] + r.sizes[-1])
            if r.entries is not None:  # the entry before the next one (a DLedger walk's rule)
                after = (int(r.entries[-1, 0]), int(r.entries[-1, 1]))
            mapped = True
        took = False
        walk = cl.scan_raw(pos, check_crc, after=after)
        for buf, at, phys, total, topic, qid, qoff, sys_flag in walk:
            s.records += 1
            s.show(phys)
            s.one(buf, at, phys, topic, qid, qoff, sys_flag)
            s.keep_tail(buf, at, total)
            pos, took = phys + total, True
            after = cl.scan_entry
            if runs is not None and pos >= budget:
                break  # the batches go on after it
        if not took or runs is None:
            break
    s.flush()
    if mapped:
        cl.files.release_pages()  # the mapped pages leave this process's RSS
    prev, last = ([None, None] + s.tail)[-2:]
    tail = (
        None if prev is None else decode_record(prev, 0, check_crc=False),
        None if last is None else decode_record(last, 0, check_crc=False),
    )
    if cl.files.end_offset > s.shown:
        bar.update(cl.files.end_offset - s.shown)  # the rest, to the end of the last segment
    return cl.scan_end, s.gap, s.records, tail


def _by_queue(r: RecordRun, idx: np.ndarray) -> list[tuple[tuple[str, int], np.ndarray]]:
    """Records ``idx`` of ``r`` (ascending) by queue: ``[((topic, queueId), each one's index
    in ``r``, in CommitLog order), ...]``."""
    import numpy as np

    if not len(idx):
        return []
    keys = (r.topic_index[idx].astype(np.int64) << 32) | (
        r.queue_ids[idx].astype(np.int64) & 0xFFFFFFFF
    )
    order = np.argsort(keys, kind="stable")
    ordered = idx[order]
    bounds = np.flatnonzero(np.diff(keys[order])) + 1
    out = []
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(idx)]):
        sel = ordered[lo:hi]
        first = int(sel[0])
        out.append(((r.topics[int(r.topic_index[first])], int(r.queue_ids[first])), sel))
    return out


def light_unit(buf: bytes, pos: int) -> tuple[int, int, int]:
    """``(size, tagsCode, storeTimestamp)`` that :meth:`_dispatch_of` gives a record with
    IPv4 hosts whose layout :meth:`CommitLog.scan_raw` checked, without decoding it
    (tagsCode from the TAGS property). Not for ``SCHEDULE_TOPIC_XXXX`` (its tagsCode is a
    deliver time)."""
    (total, magic, _, _, _, _, _, _, _, _, _, store_ts, _, _, _, _, body_len) = (
        FIXED_V4.unpack_from(buf, pos)
    )
    p = pos + FIXED_V4.size + body_len
    if not is_v2_magic(magic):
        tlen = buf[p]
        if tlen > 127:
            tlen -= 256
        p += 1 + tlen + 2
    else:
        p += 2 + int.from_bytes(buf[p : p + 2], "big", signed=True) + 2
    tc = 0
    end = pos + total
    item = _TAGS_ITEM
    at = buf.find(item, p, end)
    if at >= 0:
        # decode_properties(...).get("TAGS"), read in place: one item named TAGS (at the
        # start or after a separator) and no other occurrence; anything else is decoded.
        v = at + len(item)
        if (at == p or buf[at - 1] == _PROPERTY_END_BYTE) and buf.find(item, v, end) < 0:
            vend = buf.find(PROPERTY_END, v, end)
            raw = bytes(buf[v : vend if vend >= 0 else end])
        else:
            tags = decode_properties(bytes(buf[p:end])).get(PROPERTY_TAGS)
            raw = tags.encode("utf-8", "surrogatepass") if tags else b""
        if raw:
            tcs = _TAGS_CODES
            cached = tcs.get(raw)
            if cached is None:
                tc = tags_code(raw.decode("utf-8", errors="replace"))
                if len(tcs) < 4096:
                    tcs[raw] = tc
            else:
                tc = cached
    return total, tc, store_ts
