"""CommitLog message record: the byte layout, a reader and a builder.

Matches RocketMQ's ``MessageExtEncoder.encode`` / ``MessageDecoder.decode`` and
``CommitLog.checkMessageAndReturnSize`` (store 5.3.3; see
docs/format.md "CommitLog record"). All integers are big-endian.

Record layout (offsets for IPv4 born and store hosts; a host is 20 bytes instead of 8 when its
SYSFLAG bit 0x10 (born) or 0x20 (store) is set)::

    off  size  field
    0    4     TOTALSIZE          whole record, this field included
    4    4     MAGICCODE          0xDAA320A7 (V1) or 0xDAA320AB (V2)
    8    4     BODYCRC            zlib CRC-32 of the stored body & 0x7FFFFFFF
    12   4     QUEUEID
    16   4     FLAG
    20   8     QUEUEOFFSET
    28   8     PHYSICALOFFSET     absolute CommitLog offset of this record
    36   4     SYSFLAG
    40   8     BORNTIMESTAMP      epoch ms
    48   8|20  BORNHOST           IPv4 (4) or IPv6 (16) address + int32 port
    56   8     STORETIMESTAMP     epoch ms
    64   8|20  STOREHOSTADDRESS
    72   4     RECONSUMETIMES
    76   8     PREPARED TRANSACTION OFFSET
    84   4     BODY length, then the body (compressed when SYSFLAG bit 0 is set)
    ..   1|2   TOPIC length (V1: signed byte, V2: short), then UTF-8 topic
    ..   2     PROPERTIES length (signed short, <= 32767), then ``k\\x01v\\x02`` pairs

TOTALSIZE = 91 + body + topic + properties for V1/IPv4/IPv4 (``MessageExtEncoder.calMsgLength``).

The blank end-of-file record (``CommitLog.doAppend`` END_OF_FILE) is 8 bytes:
``int32 remaining bytes of the segment`` + ``int32 0xCBD43194``.

This module is the one home of the layout: the magic codes, SYSFLAG bits, property names and
separators, ``SCHEDULE_TOPIC``, the field offsets (``FIXED_V4_POSITIONS`` and the
``*_POSITION`` names, derived from ``FIXED_V4_FIELDS``, never retyped) and the ``__CRC32#``
trailer (:func:`write_prop_crc`, :func:`prop_crc_status`). Other modules import them
(``engine.read.columnar`` builds its numpy dtypes from ``FIXED_V4_FIELDS``);
tests/engine/test_layout_home.py fails when a copy appears elsewhere.
"""

from __future__ import annotations

import re
import socket
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

try:  # the same CRC-32 as zlib's, 10-20x faster (PCLMUL); zlib's when it is missing
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover
    from zlib import crc32

from ..errors import CorruptRecordError, MessageTooLargeError, PropertiesSizeExceededError
from .javahash import tags_code

if TYPE_CHECKING:
    import mmap

    #: What the record decoders read: a record's bytes in any bytes-like (a file's mmap too).
    RecordBuffer = bytes | bytearray | memoryview | mmap.mmap
    #: What the record writers patch in place.
    WritableRecordBuffer = bytearray | memoryview | mmap.mmap

# MessageDecoder.MESSAGE_MAGIC_CODE(_V2), CommitLog.BLANK_MAGIC_CODE
MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194
MAGIC_V1_SIGNED = MAGIC_V1 - (1 << 32)
MAGIC_V2_SIGNED = MAGIC_V2 - (1 << 32)
MAGIC_BLANK_SIGNED = MAGIC_BLANK - (1 << 32)
#: The magics of a message record (``MessageVersion.MESSAGE_VERSION_V1`` and ``_V2``): what
#: readers outside engine/format ask for, never a code by name.
RECORD_MAGICS = (MAGIC_V1, MAGIC_V2)


def is_record_magic(magic: int) -> bool:
    """Whether ``magic`` (MAGICCODE as unsigned) is a message record's, V1 or V2
    (``MessageVersion.valueOfMagicCode``); the blank END_OF_FILE record's is not."""
    return magic in RECORD_MAGICS


def is_v2_magic(magic: int) -> bool:
    """Whether a record of ``magic`` is V2 (``MessageVersion.MESSAGE_VERSION_V2``: a 2-byte
    topic length, for topics over 127 bytes), else V1."""
    return magic == MAGIC_V2


def record_magic(v2: bool) -> int:
    """The MAGICCODE a record is written with: V2 where its topic needs it
    (``MessageExtEncoder``, ``MessageVersion``), else V1."""
    return MAGIC_V2 if v2 else MAGIC_V1


# CommitLog.END_FILE_MIN_BLANK_LENGTH
END_FILE_MIN_BLANK_LENGTH = 8
BLANK = struct.Struct(">iI")  # int32 maxBlank | int32 BLANK magic
#: The 8 bytes every record starts with, a blank one included: TOTALSIZE | MAGICCODE (unsigned).
RECORD_HEAD = BLANK

# MessageSysFlag
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
# MessageSysFlag.getTransactionValue: sysFlag & TRANSACTION_ROLLBACK_TYPE
TRANSACTION_TYPE_MASK = TRANSACTION_ROLLBACK_TYPE
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 0x100
COMPRESSION_ZSTD = 0x200
COMPRESSION_ZLIB = 0x300

# MessageDecoder.NAME_VALUE_SEPARATOR / PROPERTY_SEPARATOR
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
#: PROPERTY_SEPARATOR as bytes: the end of every encoded property item.
PROPERTY_END = PROPERTY_SEPARATOR.encode()


def property_prefix(name: str) -> bytes:
    """The encoded start of the property item ``name``: ``name`` + NAME_VALUE_SEPARATOR
    (``MessageDecoder.messageProperties2String``); the value and PROPERTY_END follow."""
    return (name + NAME_VALUE_SEPARATOR).encode()


# MessageConst property names used by the store
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_DELAY = "DELAY"
# TopicValidator.RMQ_SYS_SCHEDULE_TOPIC: where delayed messages wait (queue = delay level - 1);
# its ConsumeQueue tagsCode is the deliver time (epoch ms), not a tag hash.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
# TimerMessageStore.TIMER_TOPIC (TopicValidator.SYSTEM_TOPIC_PREFIX + "wheel_timer"): where the
# 5.x broker stores a timed message (queue 0) until its timer store delivers it.
TIMER_TOPIC = "rmq_sys_wheel_timer"
# MessageConst: what a producer sets on a timed message (one of the three), what HookUtils adds
# (TIMER_OUT_MS: the deliver time, rounded to the tick), and what a recall carries
# (TIMER_DEL_UNIQKEY = realTopic + "+" + uniqKey, TimerMessageStore.buildDeleteKey);
# TIMER_ROLL_TIMES counts the re-puts of a message due more than the roll window ahead.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_WAIT = "WAIT"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_CRC32 = "__CRC32#"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
# LMQ (light message queues, rocketmq-mqtt): MessageConst.PROPERTY_INNER_MULTI_DISPATCH and
# PROPERTY_INNER_MULTI_QUEUE_OFFSET, MixAll.LMQ_PREFIX and LMQ_DISPATCH_SEPARATOR
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
LMQ_PREFIX = "%LMQ%"
LMQ_DISPATCH_SEPARATOR = ","
KEY_SEPARATOR = " "

# CommitLog.CRC32_RESERVED_LEN: "__CRC32#" + \x01 + 10 digits + \x02
CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + 10 + 1
_CRC32_PREFIX = (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR).encode()

# MessageStoreConfig defaults
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
MAX_PROPERTIES_LENGTH = 32767
RECORD_SLACK = 64 * 1024  # encoder buffer = maxMessageSize + 64 KiB
# The most queues one record's INNER_MULTI_DISPATCH can name: its properties hold at most
# MAX_PROPERTIES_LENGTH bytes (MessageExtEncoder refuses more, "message properties length too
# long"), and each queue takes at least 4 of them (a one-character name and ",", a one-digit
# offset and "," in INNER_MULTI_QUEUE_OFFSET). A record naming more is refused by
# multi_dispatch (no broker wrote it); RocketMQ has no other per-record limit.
MAX_MULTI_DISPATCH = MAX_PROPERTIES_LENGTH // 4
#: MessageStoreConfig.maxLmqConsumeQueueNum default: the LMQ queues a broker makes before
#: it refuses LMQ puts (DefaultMessageStore.isLmqConsumeQueueNumExceeded, 4.9.x)
MAX_LMQ_CONSUME_QUEUE_NUM = 20_000

# The fixed part up to and including the body length, for IPv4 born and store hosts: the one
# field list both the Struct below and the columnar decoder's numpy dtype
# (``engine.read.columnar.RECORD_DTYPE``) are built from. ``4s`` is an IPv4 address.
FIXED_V4_FIELDS: tuple[tuple[str, str], ...] = (
    ("totalSize", "i"),
    ("magicCode", "I"),
    ("bodyCRC", "i"),
    ("queueId", "i"),
    ("flag", "i"),
    ("queueOffset", "q"),
    ("physicalOffset", "q"),
    ("sysFlag", "i"),
    ("bornTimestamp", "q"),
    ("bornHostAddress", "4s"),
    ("bornHostPort", "i"),
    ("storeTimestamp", "q"),
    ("storeHostAddress", "4s"),
    ("storeHostPort", "i"),
    ("reconsumeTimes", "i"),
    ("preparedTransactionOffset", "q"),
    ("bodyLength", "i"),
)
FIXED_V4 = struct.Struct(">" + "".join(fmt for _, fmt in FIXED_V4_FIELDS))
PREFIX = struct.Struct(">iIiiiqqiq")  # up to BORNTIMESTAMP (48 bytes), any host width
HOST_V4 = struct.Struct(">4si")
HOST_V6 = struct.Struct(">16si")
INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")
INT8 = struct.Struct(">b")

#: Byte offset of each field of FIXED_V4_FIELDS in a record with IPv4 hosts, derived from that
#: field list (never retyped). The fields before BORNHOST sit there whatever the hosts; every
#: later field moves by HOST_V6_EXTRA bytes per IPv6 host before it.
FIXED_V4_POSITIONS: dict[str, int] = {}
for _i, (_name, _fmt) in enumerate(FIXED_V4_FIELDS):
    FIXED_V4_POSITIONS[_name] = struct.calcsize(">" + "".join(f for _, f in FIXED_V4_FIELDS[:_i]))
del _i, _name, _fmt
HOST_V6_EXTRA = HOST_V6.size - HOST_V4.size  # 12: a 16-byte address instead of 4

QUEUE_OFFSET_POSITION = FIXED_V4_POSITIONS["queueOffset"]  # MessageDecoder.QUEUE_OFFSET_POSITION
PHYSICAL_OFFSET_POSITION = FIXED_V4_POSITIONS["physicalOffset"]  # MessageDecoder.PHY_POS_POSITION
SYSFLAG_POSITION = FIXED_V4_POSITIONS["sysFlag"]  # MessageDecoder.SYSFLAG_POSITION
BORN_HOST_POSITION = FIXED_V4_POSITIONS["bornHostAddress"]
STORE_TIMESTAMP_POSITION = FIXED_V4_POSITIONS["storeTimestamp"]  # after an IPv4 born host
BODY_LENGTH_POSITION = FIXED_V4_POSITIONS["bodyLength"]  # after IPv4 born and store hosts
assert PREFIX.size == BORN_HOST_POSITION
# The variable tail after the body: the topic length (V1: a signed byte, V2: a short), the
# topic, the properties length (a signed short), the properties.
TOPIC_LENGTH_SIZE_V1 = INT8.size
TOPIC_LENGTH_SIZE_V2 = INT16.size
MAX_TOPIC_LENGTH_V1 = 127  # Byte.MAX_VALUE: longer topics take the V2 magic


def topic_needs_v2(topic: str, auto_v2: bool = True) -> bool:
    """Whether a put writes ``topic``'s record as V2 (``MessageVersion.MESSAGE_VERSION_V2``:
    2-byte topic length, magic 0xDAA320AB): ``autoMessageVersionOnTopicLen`` and
    ``topic.length() > Byte.MAX_VALUE``, Java's length in UTF-16 units (``CommitLog.asyncPutMessage``,
    CommitLog.java:940-945 in 5.3.3; ``asyncPutMessages`` for batches)."""
    if not auto_v2:
        return False
    n = len(topic)
    if n > MAX_TOPIC_LENGTH_V1 or topic.isascii():
        return n > MAX_TOPIC_LENGTH_V1
    return len(topic.encode("utf-16-le")) // 2 > MAX_TOPIC_LENGTH_V1


def topic_field(topic_raw: bytes, v2: bool) -> bytes:
    """The TOPIC field: its length (V1: one byte, V2: a short, ``MessageVersion.putTopicLength``)
    then the UTF-8 name. The caller has checked that the length fits."""
    return (INT16.pack(len(topic_raw)) if v2 else bytes((len(topic_raw),))) + topic_raw


PROPERTIES_LENGTH_SIZE = INT16.size

Host = tuple  # (address bytes of length 4 or 16, port)


def host_width(sys_flag: int, v6_flag: int) -> int:
    """Bytes a host address takes in the record: 8 (IPv4) or 20 (IPv6)."""
    return 20 if sys_flag & v6_flag else 8


def store_timestamp_position(sys_flag: int) -> int:
    """Offset (bytes) of STORETIMESTAMP in a record with this SYSFLAG: after an IPv4 or IPv6
    born host."""
    return STORE_TIMESTAMP_POSITION + (HOST_V6_EXTRA if sys_flag & BORNHOST_V6_FLAG else 0)


def body_length_position(sys_flag: int) -> int:
    """Offset (bytes) of the BODY length field in a record with this SYSFLAG (the body follows
    it); each IPv6 host before it adds HOST_V6_EXTRA."""
    return (
        BODY_LENGTH_POSITION
        + (HOST_V6_EXTRA if sys_flag & BORNHOST_V6_FLAG else 0)
        + (HOST_V6_EXTRA if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0)
    )


def read_store_timestamp(buf: RecordBuffer, pos: int = 0) -> int:
    """STORETIMESTAMP (epoch ms) of the record at ``buf[pos]``; the buffer must hold at least
    ``STORE_TIMESTAMP_END_MAX`` bytes from ``pos`` (struct.error otherwise)."""
    sys_flag = INT32.unpack_from(buf, pos + SYSFLAG_POSITION)[0]
    return INT64.unpack_from(buf, pos + store_timestamp_position(sys_flag))[0]


def transaction_type(sys_flag: int) -> int:
    """``MessageSysFlag.getTransactionValue``: NOT (0), PREPARED (4), COMMIT (8) or ROLLBACK
    (0xC). PREPARED and ROLLBACK records get no ConsumeQueue unit; ROLLBACK ones no index."""
    return sys_flag & TRANSACTION_TYPE_MASK


def cal_msg_length(
    sys_flag: int,
    body_length: int,
    topic_length: int,
    properties_length: int,
    version_v2: bool = False,
) -> int:
    """TOTALSIZE for the given field lengths (``MessageExtEncoder.calMsgLength``), in bytes."""
    # 4+4+4+4+4+8+8+4+8 + born 8 + 8 + store 8 + 4+8+4 + topic length 1 + properties length 2
    # = 91; an IPv6 host adds 12, V2's topic length adds 1.
    n = 91 + topic_length
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        n += (HOST_V6_EXTRA if sys_flag & BORNHOST_V6_FLAG else 0) + (
            HOST_V6_EXTRA if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0
        )
    if version_v2:
        n += 1
    if body_length > 0:
        n += body_length
    if properties_length > 0:
        n += properties_length
    return n


#: The smallest record: calMsgLength of an empty body, topic and properties (V1, IPv4).
MIN_RECORD_SIZE = cal_msg_length(0, 0, 0, 0)
#: Bytes from a record's start that hold STORETIMESTAMP whatever its hosts.
STORE_TIMESTAMP_END_MAX = store_timestamp_position(BORNHOST_V6_FLAG) + INT64.size
assert FIXED_V4.size == BODY_LENGTH_POSITION + INT32.size
assert MIN_RECORD_SIZE == FIXED_V4.size + TOPIC_LENGTH_SIZE_V1 + PROPERTIES_LENGTH_SIZE


#: ``UtilAll.crc32`` keeps 31 bits of the CRC-32 (BODYCRC and the ``__CRC32#`` value). Loops
#: that cannot afford a call to :func:`body_crc` per record use ``crc32(b) & BODY_CRC_MASK``.
BODY_CRC_MASK = 0x7FFFFFFF


#: What the compiled append (``rmq_put`` of engine/read/_kernel.c, used by
#: ``engine.service.putmessage``) is told of this layout, by the name of its C argument: the
#: byte position of each fixed field it writes in a record with IPv4 hosts, the fixed part's
#: size, the blank filler's magic (``CommitLog.BLANK_MAGIC_CODE``) and the body CRC mask. One
#: home: neither the C core nor the put path retypes any of them.
APPEND_LAYOUT: dict[str, int] = {
    **{
        arg: FIXED_V4_POSITIONS[name]
        for arg, name in (
            ("at_total", "totalSize"),
            ("at_magic", "magicCode"),
            ("at_crc", "bodyCRC"),
            ("at_queue", "queueId"),
            ("at_flag", "flag"),
            ("at_qoff", "queueOffset"),
            ("at_phys", "physicalOffset"),
            ("at_born", "bornTimestamp"),
            ("at_born_host", "bornHostAddress"),
            ("at_store_ts", "storeTimestamp"),
            ("at_store_host", "storeHostAddress"),
            ("at_body_len", "bodyLength"),
        )
    },
    "fixed": FIXED_V4.size,
    "magic_blank": MAGIC_BLANK,
    "crc_mask": BODY_CRC_MASK,
}
#: What the compiled reader of stored records' index keys (``rmq_index_keys`` of
#: engine/read/_kernel.c, recovery's re-dispatch) is told of this layout, by the name of its C
#: argument: the positions of the fields it reads in a record with IPv4 hosts, what an IPv6
#: host adds before bodyLength, the magics, the sysFlag bits it tests and the property
#: separators. One home: the C core retypes none of them.
INDEX_KEYS_LAYOUT: dict[str, int] = {
    "at_total": FIXED_V4_POSITIONS["totalSize"],
    "at_magic": FIXED_V4_POSITIONS["magicCode"],
    "at_sysflag": FIXED_V4_POSITIONS["sysFlag"],
    "at_body_len": FIXED_V4_POSITIONS["bodyLength"],
    "host_v6_extra": HOST_V6_EXTRA,
    "magic_v1": MAGIC_V1,
    "magic_v2": MAGIC_V2,
    "born_v6": BORNHOST_V6_FLAG,
    "store_v6": STOREHOSTADDRESS_V6_FLAG,
    "tx_mask": TRANSACTION_TYPE_MASK,
    "tx_rollback": TRANSACTION_ROLLBACK_TYPE,
    "pair_sep": ord(PROPERTY_SEPARATOR),
    "name_sep": ord(NAME_VALUE_SEPARATOR),
    "key_sep": ord(KEY_SEPARATOR),
}
assert FIXED_V4_POSITIONS["bornHostPort"] == FIXED_V4_POSITIONS["bornHostAddress"] + 4
assert FIXED_V4_POSITIONS["storeHostPort"] == FIXED_V4_POSITIONS["storeHostAddress"] + 4


def body_crc(body: bytes) -> int:
    """``UtilAll.crc32``: CRC-32/IEEE (zlib) of the stored body, masked to 31 bits."""
    return crc32(body) & BODY_CRC_MASK


def check_body_crc(rec: MessageRecord) -> MessageRecord:
    """Raise CorruptRecordError("body CRC mismatch") naming the record's CommitLog offset
    when its stored (still compressed) body is not empty and its CRC is not BODYCRC; return
    the record otherwise.

    What ``MessageDecoder.decode(..., checkCRC=true)`` checks ("Msg crc is error!", the
    message is dropped and ``decodesBatch`` stops at it) and the broker's
    ``CommitLog.checkMessageAndReturnSize`` ("CRC check failed": not a valid message, recovery
    ends the CommitLog there). Every read path of rmqfs applies it (docs/guarantees.md).
    """
    if rec.body and (crc32(rec.body) & BODY_CRC_MASK) != rec.body_crc:
        raise CorruptRecordError("body CRC mismatch", rec.commitlog_offset)
    return rec


def unit_mismatch(record_queue_offset: int, unit_queue_offset: int) -> str:
    """The damage text of a record whose QUEUEOFFSET is not the queue offset of the
    ConsumeQueue unit that points at it (the unit's index in its queue)."""
    return f"QUEUEOFFSET {record_queue_offset} != the unit's queue offset {unit_queue_offset}"


def is_lmq(name: str) -> bool:
    """Whether a topic (or group) name is an LMQ's (``MixAll.isLmq``: it starts with
    ``%LMQ%``)."""
    return name.startswith(LMQ_PREFIX)


def multi_dispatch(
    topic: str, properties: dict[str, str], v4: bool = False
) -> list[tuple[str, int, int]]:
    """The extra ConsumeQueue units a record of ``topic`` gets, ``[(queue, queueId,
    queueOffset)]``: one per name of its ``INNER_MULTI_DISPATCH`` property, at the offset of
    the same place in ``INNER_MULTI_QUEUE_OFFSET`` (comma-separated both), as
    ``MultiDispatchUtils.checkMultiDispatchQueue`` and ``ConsumeQueue.multiDispatchLmqQueue``
    dispatch them: none for retry (``%RETRY%``), system (``rmq_sys_``) and
    ``SCHEDULE_TOPIC_XXXX`` records, none when either property is blank or the two lists
    differ in length; a name holding ``/`` is skipped; an LMQ's queue id is 0, another
    name's the record's (``queue_id`` -1 here: the caller's record's).

    At most :data:`MAX_MULTI_DISPATCH` (8,191) units: more names than a record's properties
    can hold (``MessageExtEncoder``: 32,767 bytes) is no broker's record.

    ``v4``: a 4.x broker's rules (``ConsumeQueue.multiDispatchLmqQueue`` of 4.9): every
    topic's records are dispatched, names holding ``/`` too (the exclusions came with 5.x's
    ``MultiDispatchUtils``).

    The two lists are split as Java splits them (:func:`java_split`: a trailing comma adds no
    name) and each offset parsed as ``Long.parseLong`` parses it; at an offset it cannot parse
    the broker's loop throws, the names before it dispatched: those are returned.

    Raises:
        ValueError: the first offset is not a long (``Long.parseLong``), or more than
            :data:`MAX_MULTI_DISPATCH` names (counted before anything is split).
    """
    if not v4 and (topic.startswith(("%RETRY%", "rmq_sys_")) or topic == SCHEDULE_TOPIC):
        return []
    names = properties.get(PROPERTY_INNER_MULTI_DISPATCH, "")
    offsets = properties.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET, "")
    if not names.strip() or not offsets.strip():
        return []
    if names.count(LMQ_DISPATCH_SEPARATOR) >= MAX_MULTI_DISPATCH:
        raise ValueError(
            f"INNER_MULTI_DISPATCH names {names.count(LMQ_DISPATCH_SEPARATOR) + 1} queues, "
            f"more than the {MAX_MULTI_DISPATCH} a record's properties can hold"
        )
    queues = java_split(names, LMQ_DISPATCH_SEPARATOR)
    offs = java_split(offsets, LMQ_DISPATCH_SEPARATOR)
    if len(queues) != len(offs):
        return []
    out: list[tuple[str, int, int]] = []
    for q, o in zip(queues, offs, strict=True):
        if "/" in q and not v4:
            continue
        if not _JAVA_LONG.fullmatch(o) or not -(1 << 63) <= int(o) < 1 << 63:
            # Long.parseLong throws here: the broker has dispatched the names before it
            if not out:
                raise ValueError(f"INNER_MULTI_QUEUE_OFFSET {o!r} is not a long")
            break
        out.append((q, 0 if is_lmq(q) else -1, int(o)))
    return out


#: what ``Long.parseLong`` takes: a sign, then decimal digits (no blanks, no ``_``)
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")


def java_split(text: str, sep: str) -> list[str]:
    """``text.split(sep)`` as Java's ``String.split`` of a one-character literal separator
    does it: trailing empty fields dropped (``"a,b,"`` is two fields, ``","`` none), the
    whole text when ``sep`` is not in it."""
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def check_unit_record(
    rec: MessageRecord, queue_id: int, queue_offset: int, topic: str | None = None
) -> MessageRecord:
    """``rec`` when it is the record of unit ``queue_offset`` of queue ``queue_id``: its
    QUEUEID and QUEUEOFFSET are the unit's (``CommitLogDispatcherBuildConsumeQueue`` writes
    unit n for the record whose QUEUEOFFSET is n, so a unit that points at another record,
    swapped, copied or forged, is damage, never that other message). Raises
    CorruptRecordError naming the record's CommitLog offset.

    In another topic's queue (``topic`` not the record's: an LMQ's, or a name a 4.x broker's
    ``MultiDispatch`` dispatched the record to in the record's own queue id) the record must
    name that queue and the unit's queue offset in its ``INNER_MULTI_DISPATCH`` /
    ``INNER_MULTI_QUEUE_OFFSET`` (:func:`multi_dispatch`, by 5.x's rules or 4.x's, which
    also dispatch retry, system and schedule records); any other record is damage.
    (A BatchCQ unit of an inner batch's message: :func:`engine.format.innerbatch.unit_message`.)"""
    if topic is not None and topic != rec.topic:
        try:  # 4.x's rules: a superset of 5.x's units (the store's broker may be either)
            units = multi_dispatch(rec.topic, rec.properties, v4=True)
        except ValueError:
            units = []
        if (topic, 0, queue_offset) in units and queue_id in (0, rec.queue_id):
            return rec  # an LMQ's unit (queue 0; the record's own with enableLmq off)
        if (topic, -1, queue_offset) in units and queue_id == rec.queue_id:
            return rec  # another name's: the record's own queue id (4.x MultiDispatch)
        if not units and not is_lmq(topic):  # a plain queue's unit at another's record
            raise CorruptRecordError(
                f"the record belongs to {rec.topic!r}/{rec.queue_id}, not {topic!r}/{queue_id}",
                rec.commitlog_offset,
            )
        raise CorruptRecordError(
            f"the record ({rec.topic!r}) is not dispatched to {topic!r} at {queue_offset}",
            rec.commitlog_offset,
        )
    if rec.queue_id != queue_id:
        raise CorruptRecordError(
            f"the record belongs to queue {rec.queue_id}, not {queue_id}", rec.commitlog_offset
        )
    if rec.queue_offset != queue_offset:
        raise CorruptRecordError(
            unit_mismatch(rec.queue_offset, queue_offset), rec.commitlog_offset
        )
    return rec


def encode_properties(props: dict[str, str]) -> bytes:
    """Encode properties as ``name\\x01value\\x02`` for every entry (``messageProperties2String``).

    Entries whose value is ``None`` are skipped, as in RocketMQ. A name or value given as a
    ``str`` subclass is written as its characters, whatever its ``__str__`` says (an ``Enum``
    mixed with ``str``: its value, not ``Cls.NAME``), as the compiled put path writes it.
    """
    if not props:
        return b""
    return "".join(
        f"{_text(k)}\x01{_text(v)}\x02" for k, v in props.items() if v is not None
    ).encode("utf-8")


def _text(v: object) -> object:
    """A property name or value as :func:`encode_properties` writes it: a ``str`` subclass as
    its own characters (``str.__str__``), anything else as it formats."""
    return str.__str__(v) if isinstance(v, str) and v.__class__ is not str else v


def decode_properties(raw: bytes) -> dict[str, str]:
    """Decode a properties area (``MessageDecoder.string2messageProperties``).

    Pairs are split on \\x02; a pair is kept only when \\x01 lies strictly inside it, so empty
    names and empty values are dropped as RocketMQ drops them.
    """
    props: dict[str, str] = {}
    if not raw:
        return props
    for item in raw.decode("utf-8", errors="replace").split("\x02"):
        name, _sep, value = item.partition("\x01")
        if name and value:
            props[name] = value
    return props


def host_to_str(host: Host) -> str:
    """Render a host as ``ip:port`` (``[ipv6]:port`` for IPv6)."""
    addr, port = host
    if len(addr) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, addr)}:{port}"
    # Java's Inet6Address.getHostAddress: eight groups, no "::" shortening.
    groups = ":".join(f"{(addr[i] << 8) | addr[i + 1]:x}" for i in range(0, 16, 2))
    return f"[{groups}]:{port}"


def host_from_str(text: str) -> Host:
    """Parse ``ip:port`` or ``[ipv6]:port`` into ``(address bytes, port)``; raises ValueError."""
    if text.startswith("["):
        addr, _, port = text[1:].partition("]:")
        return socket.inet_pton(socket.AF_INET6, addr), int(port)
    addr, _, port = text.rpartition(":")
    if ":" in addr:
        return socket.inet_pton(socket.AF_INET6, addr), int(port)
    return socket.inet_pton(socket.AF_INET, addr), int(port)


def offset_msg_id(store_host: Host, commitlog_offset: int) -> str:
    """Offset message id: hex of store ip + int32 port + int64 offset, 32 or 56 upper-case digits.

    ``MessageDecoder.createMessageId`` (docs/format.md "CommitLog record").
    """
    addr, port = store_host
    return (addr + INT32.pack(port) + INT64.pack(commitlog_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """Inverse of :func:`offset_msg_id`: ``((address, port), commitLogOffset)``.

    Raises ValueError for a string that is not 32 or 56 hex digits.
    """
    if len(msg_id) not in (32, 56):
        raise ValueError(f"msgId must be 32 or 56 hex digits, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    n = len(raw) - 12
    return (raw[:n], INT32.unpack_from(raw, n)[0]), INT64.unpack_from(raw, n + 4)[0]


#: The most bytes a compressed body is inflated to (16 MiB), on every read path: the
#: per-record decoder, the columnar decoder, the mount's views and lookups, the Spark data
#: source, the report. 4 x maxMessageSize's default: a RocketMQ producer refuses a body over
#: maxMessageSize before it compresses it (``Validators.checkMessage``), so no conforming
#: client writes a body that inflates past it, and a broker whose maxMessageSize was raised
#: up to 4-fold still reads in full. RocketMQ's own readers have no bound
#: (``UtilAll.uncompress``, ``ZstdCompressor.decompress``, ``Lz4Compressor.decompress`` read
#: the stream into a growing ``ByteArrayOutputStream``): an 8 KB zstd body can ask for 256 MiB
#: and a 4 MiB one for about 128 GiB. A body over the limit is served as its stored bytes,
#: never inflated, with :data:`PROPERTY_BODY_COMPRESSION` naming its codec (docs/guarantees.md).
MAX_INFLATED_BODY = 4 * MAX_MESSAGE_SIZE
#: The property a decoded message gets when its body is served as stored because it inflates
#: past :data:`MAX_INFLATED_BODY`: the codec's name (``zlib``, ``lz4``, ``zstd``). Set by the
#: readers only, never stored.
PROPERTY_BODY_COMPRESSION = "RMQFS_BODY_COMPRESSION"
#: SYSFLAG compression type -> codec name (``CompressionType``; 0 is ZLIB for old writers).
COMPRESSION_NAMES = {
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
    COMPRESSION_ZLIB: "zlib",
    0: "zlib",
}


def inflate_body(
    body: bytes, sys_flag: int, limit: int = MAX_INFLATED_BODY
) -> tuple[bytes, str | None]:
    """``(plain body, None)``, or ``(body as stored, codec name)`` when the body would inflate
    past ``limit`` bytes: never more than ``limit`` + one read's worth of output is made (the
    decompressors are streaming ones with a bounded output: zlib's ``max_length``, zstd's
    ``stream_reader`` with a window of at most ``limit``, lz4's ``max_length``).

    SYSFLAG bits 0 and 8-10 say the codec (``CompressionType``; type 0 is ZLIB for old
    writers). Raises CorruptRecordError when the bytes do not decompress.
    """
    if not sys_flag & COMPRESSED_FLAG:
        return body, None
    kind = sys_flag & COMPRESSION_TYPE_MASK
    name = COMPRESSION_NAMES.get(kind, "zlib")
    try:
        if kind == COMPRESSION_LZ4:
            import lz4.frame

            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(body, max_length=limit + 1)
            if len(out) > limit or (not d.eof and d.needs_input is False):
                return body, name
            if not d.eof:
                raise ValueError("truncated LZ4 frame")
            return out, None
        if kind == COMPRESSION_ZSTD:
            import zstandard

            window = 1 << max(10, (limit - 1).bit_length())
            reader = zstandard.ZstdDecompressor(max_window_size=window).stream_reader(body)
            parts, got = [], 0
            while True:
                chunk = reader.read(limit + 1 - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
                if got > limit:
                    return body, name
            return b"".join(parts), None
        d = zlib.decompressobj()
        out = d.decompress(body, limit + 1)
        if len(out) > limit or d.unconsumed_tail:
            return body, name
        if not d.eof:
            raise ValueError("incomplete or truncated zlib stream")
        return out, None
    except Exception as exc:  # any codec failure is corrupt data
        if "window" in str(exc).lower() or "memory" in str(exc).lower():
            return body, name  # a frame that asks for a window over the limit
        raise CorruptRecordError(f"compressed body does not decompress: {exc}") from exc


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The body uncompressed per SYSFLAG bits 0 and 8-10 (``CompressionType``), or as stored
    when it inflates past :data:`MAX_INFLATED_BODY` (:func:`inflate_body`). Raises
    CorruptRecordError when the bytes do not decompress."""
    return inflate_body(body, sys_flag)[0]


def compress_body(body: bytes, kind: int, level: int = 5) -> bytes:
    """Compress a body with the codec named by SYSFLAG compression bits (ZLIB, LZ4, ZSTD).

    The formats RocketMQ's compressors write: zlib stream (``ZlibCompressor``/``Deflater``),
    LZ4 frame (``Lz4Compressor``: ``LZ4FrameOutputStream``), zstd frame (``ZstdCompressor``).
    """
    if kind == COMPRESSION_LZ4:
        import lz4.frame

        return lz4.frame.compress(body)
    if kind == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=level).compress(body)
    return zlib.compress(body, level)


@dataclass(slots=True)
class MessageRecord:
    """One decoded CommitLog record (RocketMQ ``MessageExt``).

    Timestamps are epoch milliseconds; offsets are bytes (``commitlog_offset``) or queue units
    (``queue_offset``); ``body`` is the stored body (compressed if ``sys_flag`` says so; see
    :attr:`plain_body`).
    """

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: Host
    store_timestamp: int
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        """The TAGS property, or None."""
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces (``MessageConst.KEY_SEPARATOR``)."""
        k = self.properties.get(PROPERTY_KEYS)
        return [t for t in k.split(KEY_SEPARATOR) if t] if k else []

    @property
    def uniq_key(self) -> str | None:
        """The client message id (``UNIQ_KEY`` property), or None."""
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def msg_id(self) -> str:
        """The offset msgId (32 or 56 hex digits)."""
        return offset_msg_id(self.store_host, self.commitlog_offset)

    @property
    def plain_body(self) -> bytes:
        """The body, decompressed when the record is compressed; as stored when it would
        inflate past :data:`MAX_INFLATED_BODY`, and then :attr:`properties` gets
        :data:`PROPERTY_BODY_COMPRESSION` (the codec's name), so that the message built from
        this record after it says so (:func:`inflate_body`)."""
        body, codec = inflate_body(self.body, self.sys_flag)
        if codec is not None:
            self.properties[PROPERTY_BODY_COMPRESSION] = codec
        return body

    @property
    def transaction_type(self) -> int:
        """``sysFlag & 0xC``: NOT (0), PREPARED (4), COMMIT (8) or ROLLBACK (0xC)."""
        return self.sys_flag & TRANSACTION_TYPE_MASK

    @property
    def tags_code(self) -> int:
        """The ConsumeQueue tagsCode this record dispatches with (Java hash of TAGS, or 0)."""
        return tags_code(self.tags)


_TOPICS: dict[bytes, str] = {}  # decoded topic names, shared by every decode


def read_total_size_and_magic(buf: RecordBuffer, pos: int) -> tuple[int, int]:
    """``(TOTALSIZE, MAGICCODE as unsigned)`` at ``pos``; raises CorruptRecordError if < 8 bytes."""
    if len(buf) - pos < 8:
        raise CorruptRecordError("truncated record header", pos)
    return BLANK.unpack_from(buf, pos)


def min_record_size(sys_flag: int, v2: bool) -> int:
    """The smallest TOTALSIZE a record with this SYSFLAG and magic can have (bytes):
    ``calMsgLength`` of an empty body, topic and properties, its hosts' widths included."""
    return cal_msg_length(sys_flag, 0, 0, 0, v2)


def decode_fixed(buf: RecordBuffer, pos: int = 0) -> tuple:
    """The fixed fields of the record at ``buf[pos]``, the one decode of them every reader
    shares (the per-record decoder, recovery's walk through it, the columnar checks of the
    rare records): ``(TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET,
    PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, born host, STORETIMESTAMP, store host,
    RECONSUMETIMES, PREPARED TRANSACTION OFFSET, BODY length, position of the body)``, hosts
    as ``(address bytes, port)`` (4 or 16 address bytes as SYSFLAG says).

    ``MessageDecoder.decode`` reads these fields without checking that they fit the record;
    here every length is checked against TOTALSIZE and the buffer first.

    Raises:
        CorruptRecordError: fewer bytes than the fixed part, a magic that is neither V1 nor
            V2, a TOTALSIZE that runs past ``buf`` or is smaller than the fixed part its
            SYSFLAG's host widths and magic ask for (e.g. a V1 record with the IPv6 born-host
            bit and TOTALSIZE 91), or a body length below 0 or past TOTALSIZE.
    """
    end_of_buf = len(buf)
    if end_of_buf - pos < FIXED_V4.size:
        raise CorruptRecordError("truncated record", pos)
    # The IPv4 layout covers the first 88 bytes of any record (the length check above): read it
    # all at once, and re-read the hosts when a SYSFLAG bit says IPv6.
    (
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_ip,
        born_port,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body_len,
    ) = FIXED_V4.unpack_from(buf, pos)
    if magic == MAGIC_V1:
        v2 = False
    elif magic == MAGIC_V2:
        v2 = True
    else:
        raise CorruptRecordError(f"bad magic code 0x{magic:08X}", pos)
    if total <= 0 or pos + total > end_of_buf:
        raise CorruptRecordError(f"record size {total} runs past the data", pos)
    smallest = min_record_size(sys_flag, v2)
    if total < smallest:
        raise CorruptRecordError(
            f"TOTALSIZE {total} is shorter than the {smallest} bytes its SYSFLAG "
            f"0x{sys_flag & 0xFFFFFFFF:X} and magic need",
            pos,
        )
    if not sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        born_host = (born_ip, born_port)
        store_host = (store_ip, store_port)
        p = pos + FIXED_V4.size
    else:
        p = pos + BORN_HOST_POSITION
        hs = HOST_V6 if sys_flag & BORNHOST_V6_FLAG else HOST_V4
        born_host = hs.unpack_from(buf, p)
        p += hs.size
        store_ts = INT64.unpack_from(buf, p)[0]
        p += 8
        hs = HOST_V6 if sys_flag & STOREHOSTADDRESS_V6_FLAG else HOST_V4
        store_host = hs.unpack_from(buf, p)
        p += hs.size
        reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, p)
        p += 16
    if body_len < 0 or p + body_len > pos + total:
        raise CorruptRecordError(f"body length {body_len} runs past the record", pos)
    return (
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body_len,
        p,
    )


def decode_record(
    buf: RecordBuffer,
    pos: int = 0,
    *,
    check_crc: bool = True,
    base_offset: int | None = None,
    force_verify_prop_crc: bool = False,
) -> MessageRecord:
    """Decode the message record starting at ``buf[pos]``.

    Args:
        buf: bytes-like holding at least the whole record.
        pos: where the record starts in ``buf``.
        check_crc: verify BODYCRC (``checkCRCOnRecover``).
        base_offset: absolute CommitLog offset of ``buf[0]``; when given, PHYSICALOFFSET must
            equal ``base_offset + pos``.
        force_verify_prop_crc: with ``check_crc``, require the ``__CRC32#`` trailer
            (``forceVerifyPropCRC``); without it a trailer is verified when present.

    Raises:
        CorruptRecordError: unknown magic (a blank record included: check for it first), a
            TOTALSIZE that does not match the field lengths, a truncated record or a bad CRC.
    """
    (
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body_len,
        p,
    ) = decode_fixed(buf, pos)
    v2 = magic == MAGIC_V2
    record_end = pos + total
    body = bytes(buf[p : p + body_len])
    p += body_len
    if v2:
        if p + 2 > record_end:
            raise CorruptRecordError("truncated topic length", pos)
        topic_len = INT16.unpack_from(buf, p)[0]
        p += 2
    else:
        if p + 1 > record_end:
            raise CorruptRecordError("truncated topic length", pos)
        topic_len = buf[p]
        if topic_len > 127:  # a signed byte
            topic_len -= 256
        p += 1
    if topic_len < 0 or p + topic_len + 2 > record_end:
        raise CorruptRecordError(f"topic length {topic_len} runs past the record", pos)
    raw_topic = bytes(buf[p : p + topic_len])
    topic = _TOPICS.get(raw_topic)
    if topic is None:
        try:
            topic = raw_topic.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError("topic is not UTF-8", pos) from exc
        if len(_TOPICS) < 65536:
            _TOPICS[raw_topic] = topic
    p += topic_len
    props_len = INT16.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0 or p + props_len > record_end:
        raise CorruptRecordError(f"properties length {props_len} runs past the record", pos)
    props_raw = bytes(buf[p : p + props_len])
    expected = cal_msg_length(sys_flag, body_len, topic_len, props_len, v2)
    if expected != total:
        raise CorruptRecordError(f"TOTALSIZE {total} != calMsgLength {expected}", pos)
    if check_crc:
        if crc != (crc32(body) & BODY_CRC_MASK):
            raise CorruptRecordError("body CRC mismatch", pos)
        if props_len >= CRC32_RESERVED_LEN or force_verify_prop_crc:
            ok = prop_crc_status(buf, pos, total)
            if ok is False or (ok is None and force_verify_prop_crc):
                raise CorruptRecordError(
                    "__CRC32# property " + ("missing" if ok is None else "mismatch"), pos
                )
    if base_offset is not None and phys != base_offset + pos:
        raise CorruptRecordError(f"PHYSICALOFFSET {phys} != position {base_offset + pos}", pos)
    return MessageRecord(
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body,
        topic,
        decode_properties(props_raw),
    )


# ----------------------------------------------------------------------------------------------
# Writer


@dataclass(slots=True)
class Message:
    """A message to put (``MessageExtBrokerInner`` before the store fills its fields).

    ``keys`` is a list or a space-separated string. ``queue_id`` None picks a queue: by
    ``sharding_key`` hash when given, else round-robin over the topic's write queues.
    Timestamps are epoch ms; hosts are ``(address bytes, port)`` (16 address bytes = IPv6).

    ``sys_flag`` may carry the transaction type (PREPARED/COMMIT/ROLLBACK) and batch bits.
    ``delay_level`` > 0 stores the message as RocketMQ's broker does a delayed one
    (``HookUtils.handleScheduleMessage``): topic ``SCHEDULE_TOPIC_XXXX``, queue ``level-1``,
    properties ``REAL_TOPIC``/``REAL_QID``/``DELAY``. ``compress`` True/False forces or
    forbids body compression; None applies ``StoreConfig.compress_msg_body_over_howmuch``.
    ``deliver_time_ms`` (epoch ms), ``delay_time_ms`` or ``delay_time_sec`` make a timed message
    (the producer's ``setDeliverTimeMs``/``setDelayTimeMs``/``setDelayTimeSec``: properties
    ``TIMER_DELIVER_MS``/``TIMER_DELAY_MS``/``TIMER_DELAY_SEC``), which a 5.x broker stores in
    ``rmq_sys_wheel_timer`` (``HookUtils.transformTimerMessage``); ignored with ``delay_level``
    (``HookUtils.checkIfTimerMessage`` clears them).
    ``wait_store_msg_ok`` False (property ``WAIT=false``) does not wait for SYNC_FLUSH.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] | None = None
    queue_id: int | None = None
    sharding_key: str | None = None
    flag: int = 0
    born_timestamp: int | None = None
    born_host: Host | None = None
    sys_flag: int = 0
    delay_level: int = 0
    compress: bool | None = None
    wait_store_msg_ok: bool = True
    deliver_time_ms: int | None = None
    delay_time_ms: int | None = None
    delay_time_sec: int | None = None


@dataclass(slots=True)
class EncodedMessage:
    """A record encoded by :func:`encode_message`, waiting for its store-time fields.

    ``data`` is the whole record; :func:`patch_record` fills QUEUEOFFSET, PHYSICALOFFSET and
    STORETIMESTAMP in place when the CommitLog assigns them.
    """

    data: bytearray
    topic: str
    queue_id: int
    sys_flag: int
    tags_code: int
    keys: list[str]
    uniq_key: str | None
    store_timestamp_pos: int
    prop_crc: bool = False  # the last 20 bytes are reserved for ``__CRC32#`` (CRC32_RESERVED_LEN)


def encode_message(
    topic: str,
    body: bytes,
    *,
    queue_id: int,
    properties: dict[str, str],
    born_timestamp: int,
    born_host: Host,
    store_host: Host,
    flag: int = 0,
    sys_flag: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    max_message_size: int = MAX_MESSAGE_SIZE,
    auto_v2: bool = True,
    append_prop_crc: bool = False,
) -> EncodedMessage:
    """Encode one message record (``MessageExtEncoder.encode``), offsets still zero.

    ``body`` is stored as given (compress it first and set the sysFlag bits for a compressed
    record). The V2 magic is chosen when ``auto_v2`` and the topic is longer than 127 chars
    (``autoMessageVersionOnTopicLen``). IPv6 flags are set from the host address lengths.
    With ``append_prop_crc`` (``enabledAppendPropCRC``) any caller-supplied ``__CRC32#`` is
    dropped and 20 bytes are reserved at the end of the properties; :func:`write_prop_crc` fills
    them once the offsets are patched (``CommitLog.doAppend``).

    Raises:
        MessageTooLargeError: body longer than ``max_message_size`` bytes, a topic that does not
            fit its length field, or a record longer than max_message_size + 64 KiB.
        PropertiesSizeExceededError: encoded properties longer than 32767 bytes.
    """
    if len(body) > max_message_size:
        raise MessageTooLargeError(
            f"message body is {len(body)} bytes, more than maxMessageSize {max_message_size}"
        )
    topic_raw = topic.encode("utf-8")
    v2 = topic_needs_v2(topic, auto_v2)
    if len(topic_raw) > (32767 if v2 else MAX_TOPIC_LENGTH_V1):
        raise MessageTooLargeError(f"topic is {len(topic_raw)} bytes, too long for its field")
    if append_prop_crc and PROPERTY_CRC32 in properties:
        properties = {k: v for k, v in properties.items() if k != PROPERTY_CRC32}
    props_raw = encode_properties(properties)
    if append_prop_crc:
        # encode_properties always ends a non-empty area with \x02 (PROPERTY_SEPARATOR).
        props_raw += bytes(CRC32_RESERVED_LEN)
    if len(props_raw) > MAX_PROPERTIES_LENGTH:
        raise PropertiesSizeExceededError(
            f"properties are {len(props_raw)} bytes, more than {MAX_PROPERTIES_LENGTH}"
        )
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if len(born_host[0]) == 16:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store_host[0]) == 16:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    total = cal_msg_length(sys_flag, len(body), len(topic_raw), len(props_raw), v2)
    if total > max_message_size + RECORD_SLACK:
        raise MessageTooLargeError(
            f"message record is {total} bytes, more than maxMessageSize + 64 KiB"
        )
    buf = bytearray(total)
    crc = crc32(body) & BODY_CRC_MASK
    if not sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        FIXED_V4.pack_into(
            buf,
            0,
            total,
            MAGIC_V2 if v2 else MAGIC_V1,
            crc,
            queue_id,
            flag,
            0,
            0,
            sys_flag,
            born_timestamp,
            born_host[0],
            born_host[1],
            0,
            store_host[0],
            store_host[1],
            reconsume_times,
            prepared_transaction_offset,
            len(body),
        )
        p = FIXED_V4.size
        store_ts_pos = STORE_TIMESTAMP_POSITION
    else:
        PREFIX.pack_into(
            buf,
            0,
            total,
            MAGIC_V2 if v2 else MAGIC_V1,
            crc,
            queue_id,
            flag,
            0,
            0,
            sys_flag,
            born_timestamp,
        )
        p = BORN_HOST_POSITION
        hs = HOST_V6 if len(born_host[0]) == 16 else HOST_V4
        hs.pack_into(buf, p, born_host[0], born_host[1])
        p += hs.size
        store_ts_pos = p
        p += 8
        hs = HOST_V6 if len(store_host[0]) == 16 else HOST_V4
        hs.pack_into(buf, p, store_host[0], store_host[1])
        p += hs.size
        struct.pack_into(">iqi", buf, p, reconsume_times, prepared_transaction_offset, len(body))
        p += 16
    buf[p : p + len(body)] = body
    p += len(body)
    field = topic_field(topic_raw, v2)
    buf[p : p + len(field)] = field
    p += len(field)
    INT16.pack_into(buf, p, len(props_raw))
    p += 2
    buf[p : p + len(props_raw)] = props_raw
    tags = properties.get(PROPERTY_TAGS)
    keys_text = properties.get(PROPERTY_KEYS)
    return EncodedMessage(
        buf,
        topic,
        queue_id,
        sys_flag,
        tags_code(tags),
        [k for k in keys_text.split(KEY_SEPARATOR) if k] if keys_text else [],
        properties.get(PROPERTY_UNIQ_KEY),
        store_ts_pos,
        append_prop_crc,
    )


def write_prop_crc(buf: WritableRecordBuffer, pos: int, total: int) -> None:
    """Fill the 20 reserved bytes at the end of the record at ``buf[pos:pos+total]``.

    ``crc = UtilAll.crc32(record[0 .. total-20))`` written by ``MessageDecoder.createCrc32`` as
    ``"__CRC32#" 0x01 d0..d9 0x02`` with the ten decimal digits least significant first
    (``MessageDecoder.createCrc32``; docs/format.md "CommitLog record").
    """
    end = pos + total - CRC32_RESERVED_LEN
    crc = crc32(memoryview(buf)[pos:end]) & 0x7FFFFFFF
    digits = bytearray(10)
    for i in range(10):
        digits[i] = 48 + crc % 10
        crc //= 10
    buf[end : pos + total] = _CRC32_PREFIX + digits + b"\x02"


def prop_crc_status(buf: RecordBuffer, pos: int, total: int) -> bool | None:
    """Check the ``__CRC32#`` trailer of the record at ``buf[pos:pos+total]``.

    Returns None when the record has no trailer, True when it matches, False when not
    (``CommitLog.checkMessageAndReturnSize`` with ``forceVerifyPropCRC``).
    """
    end = pos + total - CRC32_RESERVED_LEN
    if total < CRC32_RESERVED_LEN or bytes(buf[end : end + 9]) != _CRC32_PREFIX:
        return None
    digits = bytes(buf[end + 9 : end + 19])
    if buf[end + 19] != 2 or not digits.isdigit():
        return False
    value = 0
    for d in reversed(digits):
        value = value * 10 + d - 48
    return value == crc32(memoryview(buf)[pos:end]) & 0x7FFFFFFF


def patch_record(
    buf: WritableRecordBuffer,
    pos: int,
    store_timestamp_pos: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
) -> None:
    """Fill QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of the record at ``buf[pos]``."""
    INT64.pack_into(buf, pos + QUEUE_OFFSET_POSITION, queue_offset)
    INT64.pack_into(buf, pos + PHYSICAL_OFFSET_POSITION, physical_offset)
    INT64.pack_into(buf, pos + store_timestamp_pos, store_timestamp)


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte END_OF_FILE record declaring ``max_blank`` bytes to the end of the segment."""
    return BLANK.pack(max_blank, MAGIC_BLANK)
