"""Recovery at open: find the CommitLog's end and bring the ConsumeQueues and the index level
with it (RocketMQ ``DefaultMessageStore.recover``, ``CommitLog.recoverNormally`` /
``recoverAbnormally``, reference section 7).

After a clean shutdown (no ``abort`` file) the scan starts at the last record the ConsumeQueues
hold; after a crash, at the newest CommitLog segment whose first record is older than the
checkpoint. Every record from there is checked (size, magic, body CRC), a torn tail is dropped,
ConsumeQueue units and index items past the end are cut, and the records the queues lack are
dispatched again (:mod:`engine.dispatch`). Records the queues already hold are compared by their
unit without decoding (:func:`light_unit`). Tests: tests/engine/test_crash.py,
test_rocketmq_scenarios.py, test_store_hardening.py, test_fastpaths.py (decoded vs undecoded).
"""

from __future__ import annotations

import logging
import os
import struct

from .consumequeue import (CQ_STORE_UNIT_SIZE, UNIT)
from .errors import CorruptRecordError
from .message import (PROPERTY_TAGS, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, MessageRecord)
# The fast put path and the recovery scan (kept apart from the imports above on purpose).
from .javahash import tags_code
from .message import (PROPERTY_END, property_prefix, BORNHOST_V6_FLAG, FIXED_V4, MAGIC_V1, MAGIC_V2, RECORD_HEAD,
                      INT32, SCHEDULE_TOPIC, STOREHOSTADDRESS_V6_FLAG, STORE_TIMESTAMP_END_MAX,
                      TRANSACTION_TYPE_MASK, cal_msg_length, decode_properties, decode_record,
                      read_store_timestamp)

from . import dispatch
from .dispatch import DispatchRequest

log = logging.getLogger(__name__)

_TAGS_ITEM = property_prefix(PROPERTY_TAGS)
_PROPERTY_END_BYTE = PROPERTY_END[0]
_HOSTS_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_TAGS_CODES: dict = {}  # TAGS value (bytes) -> tagsCode, shared (a pure function), bounded
#: False: recovery decodes every record instead of comparing units (tests compare the two).
RECOVER_UNDECODED = True


def recover(store) -> None:
    """Find the end of the CommitLog and make the ConsumeQueues agree with it.

    Normal recovery (no ``abort`` file) scans from the newest record the queues point at;
    abnormal recovery starts from the segment the checkpoint vouches for
    (``isMappedFileMatchedRecover``). Either way the scan stops at the first invalid
    record, everything after it is dropped, and records the queues lack are dispatched
    (idempotently). If a queue turns out to miss older units, the scan restarts from the
    first segment.
    """
    cl = store.commitlog
    if not cl.files.segments:
        for cq in store.consume_queues.values():
            cq.truncate_to(cq.min_offset)
        cl.max_offset = cl.files.min_offset
        return
    check_queue_tails(store)
    start = recovery_start(store)
    if store.index_service is not None:
        # The IndexFiles may lag the ConsumeQueues (deleted, or dropped after a crash).
        start = max(cl.min_offset, min(start, record_boundary(store, 
            store.index_service.end_phy_offset)))
    end, gap = scan_and_dispatch(store, start, full=start <= cl.min_offset)
    if gap and start > cl.min_offset:
        log.warning("a ConsumeQueue lacks older units; re-dispatching the whole CommitLog")
        end, _ = scan_and_dispatch(store, cl.min_offset, full=True)
    last, prev = store._scan_last, store._scan_prev
    if last is not None and prev is not None and \
            last.commitlog_offset + last.store_size == end and \
            ends_with_separator(store, prev) is True and \
            ends_with_separator(store, last) is False:
        # A tear inside the properties passes the size and body-CRC checks. 5.x writers
        # end a properties area with PROPERTY_SEPARATOR (\x02) (4.9.x ones do not): when
        # the record before does, the last record of the log must too.
        log.warning("CommitLog: the last record at %d is torn inside its properties; "
                    "dropped", last.commitlog_offset)
        end = last.commitlog_offset
    if cl.scan_error:
        log.warning("CommitLog: dropping a torn tail at %d: %s", end, cl.scan_error)
    for cq in store.consume_queues.values():
        cq.truncate_dirty(end)
        cq.correct_min_offset(cl.min_offset)
    for d in store.dispatchers:
        d.truncate(end)
    cl.truncate(end)
    cl.flushed_where = end


def ends_with_separator(store, rec: MessageRecord) -> bool | None:
    """Whether the record's properties area ends with PROPERTY_SEPARATOR; None when it is
    empty."""
    props_len = rec.store_size - cal_msg_length(rec.sys_flag, len(rec.body),
                                                len(rec.topic.encode()), 0,
                                                rec.magic == MAGIC_V2)
    if props_len <= 0:
        return None
    end = rec.commitlog_offset + rec.store_size
    return store.commitlog.files.read(end - 1, 1) == PROPERTY_END


def check_queue_tails(store) -> None:
    """Drop trailing ConsumeQueue units that do not describe their record.

    A torn unit can look valid (offset and size intact, tagsCode half written); RocketMQ
    would keep it. Each queue's last units are compared with the CommitLog record they
    point at (start, size, queue offset, tagsCode) and dropped until one agrees; the scan
    that follows re-dispatches them. Cost: one record read per queue.
    """
    cl = store.commitlog
    for cq in store.consume_queues.values():
        while cq.max_offset > cq.min_offset:
            qoff = cq.max_offset - 1
            off, size, tc = cq.unit(qoff)
            if size == 0x7FFFFFFF:
                break
            try:
                rec = cl.read_message(off, size) if off >= cl.min_offset else None
            except CorruptRecordError:
                rec = None
            if rec is not None and rec.commitlog_offset == off and \
                    rec.queue_offset == qoff and rec.topic == cq.topic and \
                    rec.queue_id == cq.queue_id and \
                    dispatch.dispatch_of(store, rec).tags_code == tc:
                break
            if rec is None and off < cl.min_offset:
                break  # expired record: nothing to compare with
            log.warning("ConsumeQueue %s/%d: unit %d does not match the CommitLog; "
                        "dropped and rebuilt", cq.topic, cq.queue_id, qoff)
            cq.truncate_to(qoff)
            cq.files.repairs.append(f"unit {qoff} did not match the CommitLog")


def record_boundary(store, offset: int) -> int:
    """``offset`` when a valid record starts there, else the start of its segment."""
    cl = store.commitlog
    if offset <= cl.min_offset:
        return cl.min_offset
    try:
        size = INT32.unpack(cl.files.read(offset, 4))[0]
        cl.read_message(offset, size)
        return offset
    except (CorruptRecordError, struct.error):
        return offset - offset % cl.file_size


def recovery_start(store) -> int:
    cl = store.commitlog
    if store.last_exit_ok:
        last = max((cq.last_commitlog_offset for cq in store.consume_queues.values()),
                   default=-1)
        # A queue whose files had to be repaired (torn or missing file) is re-dispatched
        # from its last good unit on.
        damaged = [cq.last_commitlog_offset for cq in store.consume_queues.values()
                   if cq.files.repairs]
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
                    return last
                except (CorruptRecordError, struct.error):
                    pass
        return cl.min_offset
    # Abnormal: newest segment whose first record is older than the checkpoint.
    min_ts = store.checkpoint.min_timestamp
    for seg in reversed(cl.files.segments):
        head = os.pread(seg.fd, STORE_TIMESTAMP_END_MAX, 0)
        if len(head) < STORE_TIMESTAMP_END_MAX:
            continue
        if RECORD_HEAD.unpack_from(head)[1] not in (MAGIC_V1, MAGIC_V2):
            continue
        store_ts = read_store_timestamp(head)
        if store_ts and store_ts <= min_ts:
            return seg.start
    return cl.min_offset


def scan_and_dispatch(store, start: int, full: bool) -> tuple[int, bool]:
    cl = store.commitlog
    batch: list[DispatchRequest] = []
    gap = False
    cqs = store.consume_queues
    index = store.index_service
    # Records the ConsumeQueues and the index already hold need no decoding. The index
    # drops them (offset below its endPhyOffset); _dispatch would compare each one's unit
    # with the record (_verify_present) and change nothing when they agree. So the unit is
    # compared here, from offset, size and the tagsCode read straight from the record,
    # against units read ahead in blocks. From the first record of a queue that goes to
    # _dispatch (a unit that differs, or any other reason), every later record of that
    # queue goes there too, so a truncation and rewrite happen exactly as on the decoded
    # path. Dispatchers that need every record decoded turn this off (engine.dispatch).
    skip_known = RECOVER_UNDECODED and all(map(dispatch.skips_below_end_offset, store.dispatchers))
    indexed_below = index.end_phy_offset if index is not None else None
    light = light_unit
    pack_unit = UNIT.pack
    windows: dict = {}  # (topic, queueId) -> (first queue offset, raw units read ahead)
    dirty: set = set()  # queues with a record handed to _dispatch
    store._scan_last = store._scan_prev = None
    last = prev = None  # (buf, pos) of the last two records, decoded after the scan
    for (buf, pos, phys, _size, topic, qid, qoff, sys_flag) in cl.scan_raw(
            start, check_crc=store.config.check_crc_on_recover):
        prev, last = last, (buf, pos)
        d = None
        key = (topic, qid)
        if skip_known and (indexed_below is None or phys < indexed_below):
            if sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_PREPARED_TYPE,
                                                    TRANSACTION_ROLLBACK_TYPE):
                continue  # no unit, and already indexed
            cq = cqs.get(key)
            if cq is not None and qoff < cq.max_offset and topic != SCHEDULE_TOPIC \
                    and not sys_flag & _HOSTS_V6:
                size, tc, store_ts = light(buf, pos)
                if key not in dirty:
                    if qoff < cq.min_offset:
                        continue  # not present, not written: as _dispatch does
                    w = windows.get(key)
                    if w is None or not w[0] <= qoff < w[0] + len(w[1]) // CQ_STORE_UNIT_SIZE:
                        w = windows[key] = (qoff, cq.read_units(qoff, 4096))
                    i = (qoff - w[0]) * CQ_STORE_UNIT_SIZE
                    if w[1][i:i + CQ_STORE_UNIT_SIZE] == pack_unit(phys, size, tc):
                        continue
                d = DispatchRequest(topic, qid, phys, size, tc, store_ts, qoff, [], None,
                              sys_flag)
        if d is None:
            d = dispatch.dispatch_of(store, decode_record(buf, pos, check_crc=False))
        dirty.add(key)
        if d is not None:
            batch.append(d)
        if len(batch) >= 4096:
            gap |= dispatch.dispatch(store, batch, recovering=True, full=full)
            batch = []
    if batch:
        gap |= dispatch.dispatch(store, batch, recovering=True, full=full)
    if prev is not None:
        store._scan_prev = decode_record(prev[0], prev[1], check_crc=False)
    if last is not None:
        store._scan_last = decode_record(last[0], last[1], check_crc=False)
    return cl.scan_end, gap


def light_unit(buf, pos: int) -> tuple[int, int, int]:
    """``(size, tagsCode, storeTimestamp)`` that :meth:`_dispatch_of` gives a record with
    IPv4 hosts whose layout :meth:`CommitLog.scan_raw` checked, without decoding it
    (tagsCode from the TAGS property). Not for ``SCHEDULE_TOPIC_XXXX`` (its tagsCode is a
    deliver time)."""
    (total, magic, _, _, _, _, _, _, _, _, _, store_ts, _, _, _, _,
     body_len) = FIXED_V4.unpack_from(buf, pos)
    p = pos + FIXED_V4.size + body_len
    if magic == MAGIC_V1:
        tlen = buf[p]
        if tlen > 127:
            tlen -= 256
        p += 1 + tlen + 2
    else:
        p += 2 + int.from_bytes(buf[p:p + 2], "big", signed=True) + 2
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
            raw = bytes(buf[v:vend if vend >= 0 else end])
        else:
            tags = decode_properties(bytes(buf[p:end])).get(PROPERTY_TAGS)
            raw = tags.encode("utf-8", "surrogatepass") if tags else b""
        if raw:
            tcs = _TAGS_CODES
            tc = tcs.get(raw)
            if tc is None:
                tc = tags_code(raw.decode("utf-8", errors="replace"))
                if len(tcs) < 4096:
                    tcs[raw] = tc
    return total, tc, store_ts
