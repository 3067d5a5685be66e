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


def inner_message(
    rec: MessageRecord, queue_offset: int, cache: dict | None = None
) -> MessageRecord:
    """The message at ``queue_offset`` of the inner-batch record ``rec`` (an
    :class:`engine.format.message.MessageRecord` with ``INNER_BATCH_FLAG``): message
    ``queue_offset - rec.queue_offset`` of its body, with its own flag, body and properties and
    the rest of ``rec`` (``MessageDecoder.decodeMessage(MessageExt, List)``). Its body is stored
    plain inside the batch, so the result's SYSFLAG has no ``COMPRESSED_FLAG``.

    ``cache``: a dict the caller keeps across calls (CommitLog offset -> split body), so that
    the messages of one record are split once.

    Raises:
        CorruptRecordError: the body does not split (:func:`split_inner_batch`, checked against
            ``INNER_NUM``), or ``queue_offset`` is outside the record's messages.
    """
    import dataclasses

    from .message import COMPRESSED_FLAG, PROPERTY_INNER_NUM

    msgs = None if cache is None else cache.get(rec.commitlog_offset)
    if msgs is None:
        num = rec.properties.get(PROPERTY_INNER_NUM)
        try:
            expect = int(num) if num is not None else None
        except ValueError:
            raise CorruptRecordError(
                f"inner batch: INNER_NUM {num!r} is not a number", rec.commitlog_offset
            ) from None
        msgs = split_inner_batch(rec.plain_body, expect)
        if cache is not None:
            if len(cache) >= 64:
                cache.clear()
            cache[rec.commitlog_offset] = msgs
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
    rec: MessageRecord, queue_id: int, queue_offset: int, topic: str | None = None
) -> MessageRecord:
    """:func:`engine.format.message.check_unit_record` for a unit of any queue, a BatchCQ one's
    included: ``rec`` when it is the record of unit ``queue_offset``, and for a record of an
    inner batch (``INNER_BATCH_FLAG``), whose QUEUEOFFSET is its first message's, the message
    at ``queue_offset`` (:func:`inner_message`). Check the body's CRC before, on ``rec``.

    Raises CorruptRecordError naming the record's CommitLog offset."""
    if rec.sys_flag & INNER_BATCH_FLAG:
        check_unit_record(rec, queue_id, rec.queue_offset, topic)  # its queue and topic
        return inner_message(rec, queue_offset)
    return check_unit_record(rec, queue_id, queue_offset, topic)
