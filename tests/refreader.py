"""Independent reference reader for Apache RocketMQ store files (tests only).

Written from ``shared/reference/rocketmq-store-format.md`` alone, without
looking at the rmqfs engine, so tests can check the bytes the engine writes
field by field against a second implementation.  Stdlib only.

Sections of the reference used here:

* §1   CommitLog record: layout (§1.1), TOTALSIZE formula (§1.2), V1/V2 topic
       length (§1.3), BODYCRC (§1.4), properties encoding (§1.6), SYSFLAG bits
       (§1.7), blank end-of-file record (§1.8), offset message id (§1.9).
* §2   MappedFile naming: 20-digit zero-padded start offset; every file of a
       queue has the same size, which is the segment size.
* §3   ConsumeQueue: 20-byte units ``int64 offset | int32 size | int64 tagsCode``;
       tagsCode is Java ``String.hashCode`` of the TAGS string.
* §4   IndexFile: 40-byte header, ``hashSlotNum`` int32 slots, 20-byte items
       ``int32 keyHash | int64 phyOffset | int32 timeDiff | int32 prevIndex``.
* §5   checkpoint: five big-endian int64 at offsets 0..39.

All integers are big-endian.
"""

from __future__ import annotations

import os
import struct
import zlib

# --------------------------------------------------------------------------
# Constants (§1, §1.7, §1.8, §4)
# --------------------------------------------------------------------------

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

INT32_MIN = -(2**31)

# --------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------

#: §1.1 fields 1..9: TOTALSIZE, MAGICCODE (unsigned), BODYCRC, QUEUEID, FLAG,
#: QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP.  Ends at offset 48.
RECORD_HEAD = struct.Struct(">iIiiiqqiq")
#: §1.8 blank record: int32 length, int32 magic.
BLANK_HEAD = struct.Struct(">iI")
#: Host addresses (§1.1 fields 10 and 12): 4 or 16 address bytes + int32 port.
HOST_V4 = struct.Struct(">4si")
HOST_V6 = struct.Struct(">16si")
INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")
INT8 = struct.Struct(">b")
#: §1.1 fields 13..14: RECONSUMETIMES, PREPARED TRANSACTION OFFSET.
RECONSUME_AND_PREPARED = struct.Struct(">iq")

#: §3 ConsumeQueue unit.
CQ_UNIT = struct.Struct(">qiq")

#: §4 IndexFile header, slot and item.
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_SLOT = struct.Struct(">i")
INDEX_ITEM = struct.Struct(">iqii")

#: §5 checkpoint: 4.x part (24 bytes) and the 5.x extension (16 bytes).
CHECKPOINT_4X = struct.Struct(">qqq")
CHECKPOINT_5X = struct.Struct(">qq")

#: §1.9 offset message id suffix.
MSGID_OFFSET = struct.Struct(">q")


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` (§3, §4): ``h = 31*h + c`` over UTF-16 code
    units, as a signed 32-bit int."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_key_hash(key: str) -> int:
    """IndexFile key hash (§4): ``abs(key.hashCode())``, Integer.MIN_VALUE -> 0."""
    h = java_string_hash(key)
    if h == INT32_MIN:
        return 0
    return abs(h)


def decode_properties(raw: bytes) -> dict[str, str]:
    """Decode a properties string (§1.6): ``name\\x01value\\x02`` entries.

    Segments are split on \\x02; a pair is kept only if the first \\x01 lies
    strictly inside the segment (so empty keys or values are dropped).  The
    first \\x01 separates name from value.
    """
    text = raw.decode("utf-8")
    out: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        if len(segment) < 3:
            continue
        kv = segment.find(NAME_VALUE_SEPARATOR)
        if 0 < kv < len(segment) - 1:
            out[segment[:kv]] = segment[kv + 1 :]
    return out


def _format_ipv6(addr: bytes) -> str:
    """Java ``Inet6Address.getHostAddress`` style: 8 lowercase hex groups,
    no leading zeros, no ``::`` compression."""
    groups = struct.unpack(">8H", addr)
    return ":".join("%x" % g for g in groups)


def format_host(raw: bytes) -> str:
    """Render an 8- or 20-byte host field (§1.1 fields 10/12) as a string:
    ``a.b.c.d:port`` for IPv4, ``[x:x:x:x:x:x:x:x]:port`` for IPv6."""
    if len(raw) == HOST_V4.size:
        ip, port = HOST_V4.unpack(raw)
        return "%s:%d" % (".".join(str(b) for b in ip), port)
    if len(raw) == HOST_V6.size:
        ip, port = HOST_V6.unpack(raw)
        return "[%s]:%d" % (_format_ipv6(ip), port)
    raise ValueError("host field must be 8 or 20 bytes, got %d" % len(raw))


def offset_msg_id(store_host_bytes_and_port, commitlog_offset: int) -> str:
    """Offset message id (§1.9): uppercase hex of store IP (4|16 bytes) +
    int32 port + int64 commitlog offset, i.e. 32 or 56 characters.

    ``store_host_bytes_and_port`` is either the raw 8/20-byte STOREHOST field
    (``rec["storeHostRaw"]``) or a tuple ``(ip_bytes, port)``.
    """
    if isinstance(store_host_bytes_and_port, tuple):
        ip, port = store_host_bytes_and_port
        raw = bytes(ip) + INT32.pack(port)
    else:
        raw = bytes(store_host_bytes_and_port)
    if len(raw) not in (HOST_V4.size, HOST_V6.size):
        raise ValueError("store host must be 8 or 20 bytes, got %d" % len(raw))
    return (raw + MSGID_OFFSET.pack(commitlog_offset)).hex().upper()


def cal_msg_length(
    sys_flag: int,
    body_length: int,
    topic_length: int,
    properties_length: int,
    topic_length_size: int = 1,
) -> int:
    """TOTALSIZE formula (§1.2, ``calMsgLength``)."""
    bornhost_length = 8 if (sys_flag & SYSFLAG_BORNHOST_V6) == 0 else 20
    storehost_length = 8 if (sys_flag & SYSFLAG_STOREHOST_V6) == 0 else 20
    return (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + bornhost_length
        + 8
        + storehost_length
        + 4
        + 8
        + 4
        + max(body_length, 0)
        + topic_length_size
        + topic_length
        + 2
        + max(properties_length, 0)
    )


# --------------------------------------------------------------------------
# §2 file naming
# --------------------------------------------------------------------------


def list_segments(dir_path) -> list[tuple[int, str, int]]:
    """Files of a MappedFileQueue directory (§2), sorted by name, as
    ``(fileFromOffset, path, size)``.

    Checks that names are 20-digit offsets, that all files share one size
    (a zero-length *last* file is ignored, as the store deletes it on load)
    and that consecutive files are exactly one segment apart.
    """
    names = sorted(n for n in os.listdir(dir_path) if os.path.isfile(os.path.join(dir_path, n)))
    segs = []
    for name in names:
        assert len(name) == 20 and name.isdigit(), (
            "segment file name %r is not a 20-digit offset (§2)" % name
        )
        path = os.path.join(dir_path, name)
        segs.append((int(name), path, os.path.getsize(path)))
    if segs and segs[-1][2] == 0:
        segs.pop()
    if not segs:
        return segs
    size = segs[0][2]
    for i, (start, path, fsize) in enumerate(segs):
        assert fsize == size, "%s: size %d differs from segment size %d (§2)" % (path, fsize, size)
        if i:
            assert start == segs[i - 1][0] + size, (
                "%s: start offset %d is not previous + %d (§2)" % (path, start, size)
            )
    return segs


# --------------------------------------------------------------------------
# §1 CommitLog
# --------------------------------------------------------------------------


def _decode_record(buf: bytes, pos: int, file_from: int) -> dict:
    """Decode one message record starting at ``buf[pos]`` (§1.1)."""
    (
        total_size,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
    ) = RECORD_HEAD.unpack_from(buf, pos)
    end = pos + total_size
    p = pos + RECORD_HEAD.size

    bh_len = HOST_V6.size if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4.size
    born_raw = bytes(buf[p : p + bh_len])
    p += bh_len
    (store_ts,) = INT64.unpack_from(buf, p)
    p += INT64.size
    sh_len = HOST_V6.size if sys_flag & SYSFLAG_STOREHOST_V6 else HOST_V4.size
    store_raw = bytes(buf[p : p + sh_len])
    p += sh_len
    reconsume, prepared = RECONSUME_AND_PREPARED.unpack_from(buf, p)
    p += RECONSUME_AND_PREPARED.size

    (body_len,) = INT32.unpack_from(buf, p)
    p += INT32.size
    assert 0 <= body_len and p + body_len <= end, "record at %d: body length %d overruns record" % (
        file_from + pos,
        body_len,
    )
    body = bytes(buf[p : p + body_len])
    p += body_len

    if magic == MAGIC_V1:
        (topic_len,) = INT8.unpack_from(buf, p)
        topic_len_size = INT8.size
    else:
        (topic_len,) = INT16.unpack_from(buf, p)
        topic_len_size = INT16.size
    p += topic_len_size
    assert 0 <= topic_len and p + topic_len <= end, "record at %d: topic length %d invalid" % (
        file_from + pos,
        topic_len,
    )
    topic_raw = bytes(buf[p : p + topic_len])
    p += topic_len

    (props_len,) = INT16.unpack_from(buf, p)
    p += INT16.size
    assert 0 <= props_len and p + props_len <= end, "record at %d: properties length %d invalid" % (
        file_from + pos,
        props_len,
    )
    props_raw = bytes(buf[p : p + props_len])
    p += props_len

    return {
        "totalSize": total_size,
        "magic": magic,
        "bodyCRC": body_crc,
        "queueId": queue_id,
        "flag": flag,
        "queueOffset": queue_offset,
        "physicalOffset": physical_offset,
        "sysFlag": sys_flag,
        "bornTimestamp": born_ts,
        "bornHost": format_host(born_raw),
        "bornHostRaw": born_raw,
        "storeTimestamp": store_ts,
        "storeHost": format_host(store_raw),
        "storeHostRaw": store_raw,
        "reconsumeTimes": reconsume,
        "preparedTransactionOffset": prepared,
        "body": body,
        "topic": topic_raw.decode("utf-8"),
        "topicLengthSize": topic_len_size,
        "properties": decode_properties(props_raw),
        "propertiesRaw": props_raw,
        "fileOffset": file_from + pos,
        # bytes actually consumed by the fields, for check_record
        "decodedLength": p - pos,
    }


def check_record(rec: dict) -> None:
    """Consistency checks on a decoded record; raises AssertionError.

    * TOTALSIZE equals ``calMsgLength`` (§1.2) and the bytes the fields used;
    * V1 topics are at most 127 bytes (signed length byte, §1.3);
    * BODYCRC == ``zlib.crc32(body) & 0x7fffffff`` (§1.4);
    * PHYSICALOFFSET equals the absolute offset where the record was found.
    """
    where = "record at %d" % rec["fileOffset"]
    expected = cal_msg_length(
        rec["sysFlag"],
        len(rec["body"]),
        len(rec["topic"].encode("utf-8")),
        len(rec["propertiesRaw"]),
        rec["topicLengthSize"],
    )
    assert rec["totalSize"] == expected, "%s: TOTALSIZE %d != calMsgLength %d (§1.2)" % (
        where,
        rec["totalSize"],
        expected,
    )
    if "decodedLength" in rec:
        assert rec["decodedLength"] == rec["totalSize"], (
            "%s: fields use %d bytes, TOTALSIZE says %d"
            % (where, rec["decodedLength"], rec["totalSize"])
        )
    crc = zlib.crc32(rec["body"]) & 0x7FFFFFFF
    assert rec["bodyCRC"] == crc, "%s: BODYCRC %d != crc32(body)&0x7fffffff %d (§1.4)" % (
        where,
        rec["bodyCRC"],
        crc,
    )
    assert rec["physicalOffset"] == rec["fileOffset"], (
        "%s: PHYSICALOFFSET %d != position in commitlog (§1.1)" % (where, rec["physicalOffset"])
    )
    if rec["magic"] == MAGIC_V1:
        assert len(rec["topic"].encode("utf-8")) <= 127, (
            "%s: V1 record with topic longer than 127 bytes (§1.3)" % where
        )


def scan_commitlog(dir_path, check: bool = True) -> dict:
    """Walk a commitlog directory (§1, §1.8, §2).

    Returns ``{"records": [...], "blanks": [(absOffset, declaredLength)],
    "segmentSize": int, "endOffset": int, "stopReason": str}``.  ``endOffset``
    is the absolute offset just after the last message record (the recovered
    max physical offset).  Reading within a file continues record by record;
    a blank record (magic 0xCBD43194) moves to the next file; a zero or
    otherwise invalid header stops the scan.
    """
    segs = list_segments(dir_path)
    records: list[dict] = []
    blanks: list[tuple[int, int]] = []
    seg_size = segs[0][2] if segs else 0
    end_offset = segs[0][0] if segs else 0
    stop_reason = "no segment files"
    for file_from, path, size in segs:
        with open(path, "rb") as f:
            buf = f.read()
        pos = 0
        stop_reason = None
        while True:
            if pos + BLANK_HEAD.size > size:
                stop_reason = "end of file %s without blank record" % path
                break
            total_size, magic = BLANK_HEAD.unpack_from(buf, pos)
            if magic == MAGIC_BLANK:
                blanks.append((file_from + pos, total_size))
                assert pos + total_size == size, (
                    "blank at %d declares %d bytes but %d remain in the file (§1.8)"
                    % (file_from + pos, total_size, size - pos)
                )
                break
            if total_size <= 0 or magic not in (MAGIC_V1, MAGIC_V2):
                stop_reason = "header at %d: size %d magic 0x%08X" % (
                    file_from + pos,
                    total_size,
                    magic,
                )
                break
            if pos + total_size > size:
                stop_reason = "record at %d overruns its file" % (file_from + pos)
                break
            rec = _decode_record(buf, pos, file_from)
            if check:
                check_record(rec)
            records.append(rec)
            pos += total_size
            end_offset = file_from + pos
        if stop_reason is not None:
            break
    else:
        if segs:
            stop_reason = "blank record in last file"
    return {
        "records": records,
        "blanks": blanks,
        "segmentSize": seg_size,
        "endOffset": end_offset,
        "stopReason": stop_reason,
    }


def read_commitlog(dir_path, check: bool = True) -> list[dict]:
    """Decode every message record of a commitlog directory, in order.

    Each dict holds the §1.1 fields (totalSize, magic, bodyCRC, queueId, flag,
    queueOffset, physicalOffset, sysFlag, bornTimestamp, bornHost,
    storeTimestamp, storeHost, reconsumeTimes, preparedTransactionOffset,
    body, topic, properties, propertiesRaw) plus fileOffset, bornHostRaw,
    storeHostRaw and topicLengthSize.  With ``check`` (default) every record
    goes through :func:`check_record`.
    """
    return scan_commitlog(dir_path, check)["records"]


def blank_records(dir_path) -> list[tuple[int, int]]:
    """Blank end-of-file records (§1.8) as ``(absoluteOffset, declaredLength)``."""
    return scan_commitlog(dir_path, check=False)["blanks"]


# --------------------------------------------------------------------------
# §3 ConsumeQueue
# --------------------------------------------------------------------------


def read_consumequeue(dir_path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """Units ``(commitLogOffset, size, tagsCode)`` of
    ``<dir>/consumequeue/<topic>/<queue_id>/`` (§3), across files in name order,
    stopping at the first invalid unit (offset < 0 or size <= 0).

    ``dir_path`` is the store root.  The list index is the logical offset
    minus ``first file name // 20``.
    """
    qdir = os.path.join(dir_path, "consumequeue", topic, str(queue_id))
    units: list[tuple[int, int, int]] = []
    for file_from, path, size in list_segments(qdir):
        assert size % CQ_UNIT.size == 0, "%s: size %d is not a multiple of 20 (§3)" % (path, size)
        assert file_from % CQ_UNIT.size == 0, "%s: file name is not a multiple of 20 (§3)" % path
        with open(path, "rb") as f:
            buf = f.read()
        for off, usize, tags in CQ_UNIT.iter_unpack(buf):
            if off < 0 or usize <= 0:
                return units
            units.append((off, usize, tags))
    return units


def tags_code(tags) -> int:
    """ConsumeQueue tagsCode for a plain topic (§3): Java hash of the TAGS
    string sign-extended to 64 bits, 0 when there is no tag."""
    if not tags:
        return 0
    return java_string_hash(tags)


# --------------------------------------------------------------------------
# §4 IndexFile
# --------------------------------------------------------------------------


def read_indexfile(path) -> dict:
    """IndexFile header (§4): beginTimestamp, endTimestamp, beginPhyOffset,
    endPhyOffset, hashSlotCount, indexCount."""
    with open(path, "rb") as f:
        head = f.read(INDEX_HEADER.size)
    fields = INDEX_HEADER.unpack(head)
    return dict(
        zip(
            (
                "beginTimestamp",
                "endTimestamp",
                "beginPhyOffset",
                "endPhyOffset",
                "hashSlotCount",
                "indexCount",
            ),
            fields,
        )
    )


def index_geometry(path, index_num: int | None = None) -> tuple[int, int]:
    """``(hashSlotNum, indexNum)`` of an IndexFile from its size (§4):
    ``size = 40 + hashSlotNum*4 + indexNum*20``.

    Without ``index_num`` the store's default ratio ``indexNum = 4 *
    hashSlotNum`` is assumed (true for the defaults 5,000,000/20,000,000 and
    for the fixtures' 32/128).
    """
    size = os.path.getsize(path)
    body = size - INDEX_HEADER.size
    if index_num is None:
        assert body > 0 and body % 84 == 0, (
            "%s: size %d does not fit indexNum = 4*hashSlotNum; pass index_num" % (path, size)
        )
        slots = body // 84
        return slots, 4 * slots
    rest = body - index_num * INDEX_ITEM.size
    assert rest > 0 and rest % INDEX_SLOT.size == 0, "%s: size %d does not fit indexNum %d (§4)" % (
        path,
        size,
        index_num,
    )
    return rest // INDEX_SLOT.size, index_num


def read_index_items(path, hash_slot_num: int | None = None) -> list[tuple[int, int, int, int]]:
    """All used items 1..indexCount-1 of an IndexFile (§4) as
    ``(keyHash, phyOffset, timeDiff, prevIndex)``; entry 0 of the list is item 1."""
    if hash_slot_num is None:
        hash_slot_num, _ = index_geometry(path)
    header = read_indexfile(path)
    with open(path, "rb") as f:
        buf = f.read()
    base = INDEX_HEADER.size + hash_slot_num * INDEX_SLOT.size
    return [
        INDEX_ITEM.unpack_from(buf, base + n * INDEX_ITEM.size)
        for n in range(1, max(header["indexCount"], 1))
    ]


def index_lookup(
    path,
    key: str,
    hash_slot_num: int | None = None,
    begin: int = 0,
    end: int = 2**63 - 1,
    max_num: int | None = None,
) -> list[int]:
    """Physical offsets stored under ``key`` (the full ``topic#key`` string)
    in one IndexFile, following the slot chain as ``selectPhyOffset`` does
    (§4), newest first.  Hash collisions are not resolved (as in the store).

    ``hash_slot_num`` defaults to :func:`index_geometry`.  ``begin``/``end``
    is the store-timestamp window in ms; ``max_num`` caps the result.
    """
    if hash_slot_num is None:
        hash_slot_num, _ = index_geometry(path)
    header = read_indexfile(path)
    index_count = header["indexCount"]
    with open(path, "rb") as f:
        buf = f.read()
    key_hash = index_key_hash(key)
    slot_pos = INDEX_HEADER.size + (key_hash % hash_slot_num) * INDEX_SLOT.size
    (slot_value,) = INDEX_SLOT.unpack_from(buf, slot_pos)
    result: list[int] = []
    if slot_value <= 0 or slot_value > index_count or index_count <= 1:
        return result
    items_base = INDEX_HEADER.size + hash_slot_num * INDEX_SLOT.size
    current = slot_value
    while max_num is None or len(result) < max_num:
        item_hash, phy, time_diff, prev = INDEX_ITEM.unpack_from(
            buf, items_base + current * INDEX_ITEM.size
        )
        if time_diff < 0:
            break
        time_read = header["beginTimestamp"] + time_diff * 1000
        if item_hash == key_hash and begin <= time_read <= end:
            result.append(phy)
        if prev <= 0 or prev > index_count or prev == current or time_read < begin:
            break
        current = prev
    return result


def index_lookup_dir(index_dir, key: str, hash_slot_num: int | None = None) -> list[int]:
    """:func:`index_lookup` over every file of an ``index/`` directory,
    newest file (largest name) first, concatenating the results."""
    out: list[int] = []
    for name in sorted(os.listdir(index_dir), reverse=True):
        out.extend(index_lookup(os.path.join(index_dir, name), key, hash_slot_num))
    return out


# --------------------------------------------------------------------------
# §5 checkpoint
# --------------------------------------------------------------------------


def read_checkpoint(path) -> dict:
    """checkpoint file (§5): physicMsgTimestamp, logicsMsgTimestamp,
    indexMsgTimestamp and, when the file holds them (5.x), masterFlushedOffset
    and confirmPhyOffset (``None`` if the file is shorter than 40 bytes)."""
    with open(path, "rb") as f:
        buf = f.read(CHECKPOINT_4X.size + CHECKPOINT_5X.size)
    assert len(buf) >= CHECKPOINT_4X.size, "%s: shorter than 24 bytes (§5)" % path
    physic, logics, index = CHECKPOINT_4X.unpack_from(buf, 0)
    master, confirm = (
        CHECKPOINT_5X.unpack_from(buf, CHECKPOINT_4X.size)
        if len(buf) >= CHECKPOINT_4X.size + CHECKPOINT_5X.size
        else (None, None)
    )
    return {
        "physicMsgTimestamp": physic,
        "logicsMsgTimestamp": logics,
        "indexMsgTimestamp": index,
        "masterFlushedOffset": master,
        "confirmPhyOffset": confirm,
    }
