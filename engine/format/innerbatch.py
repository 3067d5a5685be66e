"""The messages inside an inner-batch record (RocketMQ 5.x ``MessageDecoder.encodeMessage`` /
``decodeMessage`` / ``decodeMessages``).

A batch sent to a BatchCQ topic with a unique key is stored as one CommitLog record
(SYSFLAG ``INNER_BATCH_FLAG | NEED_UNWRAP_FLAG``, properties ``INNER_NUM`` and ``INNER_BASE``;
``SendMessageProcessor``) whose BODY is the producer's encoded batch: one mini-record per
message, big-endian, back to back::

    off        size  field
    0          4     totalSize     bytes of this mini-record
    4          4     magicCode     0
    8          4     bodyCRC       0
    12         4     flag          the message's flag
    16         4     bodyLength
    20         n     body
    20+n       2     propertiesLength (a Java short)
    22+n       m     properties    name\\x01value\\x02 ...

A consumer sees message ``i`` of the record (``MessageDecoder.decodeMessage(MessageExt,
List)``) with the mini-record's flag, body and properties and everything else from the outer
record: topic, queueId, queueOffset ``INNER_BASE + i`` (the outer record's QUEUEOFFSET), store
and born hosts and times, SYSFLAG, commitLogOffset. Its msgId is its own ``UNIQ_KEY``.
"""

from __future__ import annotations

import struct

from ..errors import CorruptRecordError
from .message import INNER_BATCH_FLAG, MessageRecord, check_unit_record, decode_properties

#: (field, struct format) of a mini-record's fixed head, in file order
INNER_HEAD_FIELDS: tuple[tuple[str, str], ...] = (
    ("totalSize", "i"),
    ("magicCode", "i"),
    ("bodyCRC", "i"),
    ("flag", "i"),
    ("bodyLength", "i"),
)
INNER_HEAD = struct.Struct(">" + "".join(fmt for _, fmt in INNER_HEAD_FIELDS))  # 20 bytes
INNER_PROPS_LENGTH = struct.Struct(">h")
#: the smallest mini-record: an empty body and no properties
MIN_INNER_SIZE = INNER_HEAD.size + INNER_PROPS_LENGTH.size


def split_inner_batch(body: bytes, expect: int | None = None) -> list[tuple[int, bytes, dict]]:
    """The messages of an inner-batch record's BODY as ``[(flag, body, properties)]``, in
    order (``MessageDecoder.decodeMessages``).

    Args:
        body: the outer record's (uncompressed) BODY.
        expect: the number of messages the record claims (``INNER_NUM``, the unit's
            batchSize); None does not check it.

    Raises:
        CorruptRecordError: a mini-record whose sizes do not add up (totalSize, bodyLength and
            propertiesLength must fill it exactly and stay inside the body), or a count other
            than ``expect``. Nothing past the body is ever read.
    """
    out: list[tuple[int, bytes, dict]] = []
    pos, end = 0, len(body)
    while pos < end:
        if end - pos < MIN_INNER_SIZE:
            raise CorruptRecordError(
                f"inner batch: {end - pos} bytes left at {pos}, less than a message's head"
            )
        total, _magic, _crc, flag, body_len = INNER_HEAD.unpack_from(body, pos)
        if total < MIN_INNER_SIZE or total > end - pos:
            raise CorruptRecordError(
                f"inner batch: message at {pos} declares {total} bytes, {end - pos} left"
            )
        if body_len < 0 or body_len > total - MIN_INNER_SIZE:
            raise CorruptRecordError(
                f"inner batch: message at {pos} declares a body of {body_len} bytes in {total}"
            )
        at = pos + INNER_HEAD.size
        (props_len,) = INNER_PROPS_LENGTH.unpack_from(body, at + body_len)
        if props_len < 0 or INNER_HEAD.size + body_len + 2 + props_len != total:
            raise CorruptRecordError(
                f"inner batch: message at {pos}: head, body of {body_len} and properties of "
                f"{props_len} bytes do not make its {total} bytes"
            )
        props_at = at + body_len + 2
        out.append(
            (
                flag,
                bytes(body[at : at + body_len]),
                decode_properties(bytes(body[props_at : props_at + props_len])),
            )
        )
        pos += total
    if expect is not None and len(out) != expect:
        raise CorruptRecordError(f"inner batch: {len(out)} messages, the record says {expect}")
    return out


def encode_inner_batch(messages: list[tuple[int, bytes, str]]) -> bytes:
    """The BODY a producer sends for ``[(flag, body, properties string)]``
    (``MessageDecoder.encodeMessages``): what tests build inner-batch records from. Raises
    ValueError when a properties string is longer than a Java short holds."""
    parts = []
    for flag, body, props in messages:
        raw = props.encode()
        if len(raw) > 0x7FFF:
            raise ValueError(f"properties of {len(raw)} bytes: more than 32,767")
        total = INNER_HEAD.size + len(body) + 2 + len(raw)
        parts.append(INNER_HEAD.pack(total, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(INNER_PROPS_LENGTH.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


class InnerBatchCache:
    """Inner-batch records read lately, each with its messages split once: a BatchCQ queue's
    readers (``print-msg``, the mount's views and ``by-offset/N``, getMessage, the columnar
    decoder) ask for a batch's messages one unit at a time, and reading, CRC-checking and
    splitting the whole record for each made a 4,000-message batch cost 98 s to print (each of
    its messages paid for all of them). Keyed by the unit's ``(commitLogOffset, size)``;
    holds only records whose body CRC the caller checked (or chose not to) and whose own queue
    was checked. Bounded: at most ``records`` records and ``max_bytes`` of their bodies, the
    least recently used going first; a record larger than ``max_bytes`` is not kept.
    Thread-safe (the mount reads from several threads)."""

    def __init__(self, records: int = 16, max_bytes: int = 64 << 20):
        import threading
        from collections import OrderedDict

        self.records, self.max_bytes = records, max_bytes
        self._entries: OrderedDict[tuple[int, int], tuple[MessageRecord, list]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, offset: int, size: int) -> tuple[MessageRecord, list] | None:
        """``(record, its messages)`` of the unit at ``offset`` (bytes) of ``size``, or None."""
        with self._lock:
            hit = self._entries.get((offset, size))
            if hit is not None:
                self._entries.move_to_end((offset, size))
            return hit

    def put(self, rec: MessageRecord, msgs: list) -> None:
        """Keep ``rec`` (read at its ``commitlog_offset``, ``store_size`` bytes) and ``msgs``."""
        cost = rec.store_size
        if cost > self.max_bytes:
            return
        key = (rec.commitlog_offset, rec.store_size)
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (rec, msgs)
            self._bytes += cost
            while len(self._entries) > self.records or self._bytes > self.max_bytes:
                (_, old_size), _ = self._entries.popitem(last=False)
                self._bytes -= old_size

    def message(
        self, offset: int, size: int, queue_id: int, queue_offset: int, topic: str | None = None
    ) -> MessageRecord | None:
        """The message at ``queue_offset`` of queue ``queue_id`` when the unit (``offset``,
        ``size``) is a batch record kept here, else None (the caller reads the record).
        Raises CorruptRecordError as :func:`unit_message` does."""
        hit = self.get(offset, size)
        if hit is None:
            return None
        rec, msgs = hit
        check_unit_record(rec, queue_id, rec.queue_offset, topic)
        return _pick(rec, msgs, queue_offset)


def inner_message(
    rec: MessageRecord, queue_offset: int, cache: InnerBatchCache | None = None
) -> MessageRecord:
    """The message at ``queue_offset`` of the inner-batch record ``rec`` (an
    :class:`engine.format.message.MessageRecord` with ``INNER_BATCH_FLAG``): message
    ``queue_offset - rec.queue_offset`` of its body, with its own flag, body and properties and
    the rest of ``rec`` (``MessageDecoder.decodeMessage(MessageExt, List)``). Its body is stored
    plain inside the batch, so the result's SYSFLAG has no ``COMPRESSED_FLAG``.

    ``cache``: an :class:`InnerBatchCache` the caller keeps across calls, so that the
    messages of one record are split once (and, asked first with
    :meth:`InnerBatchCache.message`, the record read once).

    Raises:
        CorruptRecordError: the body does not split (:func:`split_inner_batch`, checked against
            ``INNER_NUM``), or ``queue_offset`` is outside the record's messages.
    """
    from .message import PROPERTY_INNER_NUM

    hit = None if cache is None else cache.get(rec.commitlog_offset, rec.store_size)
    if hit is not None:
        msgs = hit[1]
    else:
        num = rec.properties.get(PROPERTY_INNER_NUM)
        try:
            expect = int(num) if num is not None else None
        except ValueError:
            raise CorruptRecordError(
                f"inner batch: INNER_NUM {num!r} is not a number", rec.commitlog_offset
            ) from None
        msgs = split_inner_batch(rec.plain_body, expect)
        if cache is not None:
            cache.put(rec, msgs)
    return _pick(rec, msgs, queue_offset)


def _pick(rec: MessageRecord, msgs: list, queue_offset: int) -> MessageRecord:
    """Message ``queue_offset`` of the batch record ``rec`` split into ``msgs``."""
    import dataclasses

    from .message import COMPRESSED_FLAG

    k = queue_offset - rec.queue_offset
    if not 0 <= k < len(msgs):
        raise CorruptRecordError(
            f"queue offset {queue_offset} is not one of the record's {len(msgs)} messages "
            f"(queue offsets {rec.queue_offset}..{rec.queue_offset + len(msgs) - 1})",
            rec.commitlog_offset,
        )
    flag, body, props = msgs[k]
    return dataclasses.replace(
        rec,
        flag=flag,
        body=body,
        properties=props,
        queue_offset=queue_offset,
        sys_flag=rec.sys_flag & ~COMPRESSED_FLAG,
    )


def unit_message(
    rec: MessageRecord,
    queue_id: int,
    queue_offset: int,
    topic: str | None = None,
    cache: InnerBatchCache | None = None,
) -> MessageRecord:
    """:func:`engine.format.message.check_unit_record` for a unit of any queue, a BatchCQ one's
    included: ``rec`` when it is the record of unit ``queue_offset``, and for a record of an
    inner batch (``INNER_BATCH_FLAG``), whose QUEUEOFFSET is its first message's, the message
    at ``queue_offset`` (:func:`inner_message`). Check the body's CRC before, on ``rec``.

    ``cache``: kept by the caller across units (:class:`InnerBatchCache`); give it only once
    the body's CRC is checked.

    Raises CorruptRecordError naming the record's CommitLog offset."""
    if rec.sys_flag & INNER_BATCH_FLAG:
        check_unit_record(rec, queue_id, rec.queue_offset, topic)  # its queue and topic
        return inner_message(rec, queue_offset, cache)
    return check_unit_record(rec, queue_id, queue_offset, topic)
