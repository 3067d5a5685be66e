"""A BatchCQ store built from the Java's definitions (issue 22, section 2.5), for
tests/engine/test_batchcq.py and the mount and Spark tests: topic ``B`` keeps its units in
``batchconsumequeue/B/0`` (``BatchConsumeQueue.putBatchMessagePositionInfo``: 46-byte units
of commitLogOffset, size, tagsCode, storeTime, msgBaseOffset, batchSize, compactedOffset -1,
reserved 0) and has plain records (batchSize 1) and inner batches (``SendMessageProcessor``:
SYSFLAG ``INNER_BATCH_FLAG | NEED_UNWRAP_FLAG``, properties ``INNER_NUM`` and ``INNER_BASE``, a
body of ``MessageDecoder.encodeMessages`` mini-records, QUEUEOFFSET = INNER_BASE); topic ``T``
is a plain topic beside it.

Written with the engine's put path, then made into what a 5.x broker writes: the header fields
QUEUEOFFSET and SYSFLAG patched (the body CRC does not cover them), the BatchConsumeQueue
written and ``consumequeue/B`` removed. Every struct here is written from the Java, not taken
from the engine."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

from rmqfs.engine.service import validation
from rmqfs.engine.store import Message, MessageStore

BCQ_UNIT = struct.Struct(">qiqqqhii")  # BatchConsumeQueue.CQ_STORE_UNIT_SIZE = 46
INNER_HEAD = struct.Struct(">iiiii")  # MessageDecoder.encodeMessage: size, magic, crc, flag, len
QUEUE_OFFSET_POSITION = 20  # MessageDecoder.QUEUE_OFFSET_POSITION
SYSFLAG_POSITION = 36  # MessageDecoder.SYSFLAG_POSITION
INNER_FLAGS = 0x80 | 0x40  # MessageSysFlag.INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
BCQ_FILE_SIZE = 300_000 * 46  # mapperFileSizeBatchConsumeQueue

#: the records of B/0 in CommitLog order: a plain message (bytes) or an inner batch
#: (a list of (body, {properties}))
RECORDS: list = [
    b"b0",
    [(b"i0", {"TAGS": "x", "UNIQ_KEY": "AA00"}), (b"i1", {"KEYS": "k1"}), (b"i2", {})],
    b"b4",
    [(b"j0", {"TAGS": "y"}), (b"j1", {"UNIQ_KEY": "AA06", "TAGS": "y"})],
]


def _encode(messages) -> bytes:
    out = b""
    for body, props in messages:
        raw = "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()
        total = INNER_HEAD.size + len(body) + 2 + len(raw)
        out += INNER_HEAD.pack(total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(raw)) + raw
    return out


def expected() -> list[tuple[bytes, dict]]:
    """``[(body, properties the message must show)]`` of B/0 by queue offset."""
    out = []
    for r in RECORDS:
        if isinstance(r, bytes):
            out.append((r, {}))
        else:
            out.extend(r)
    return out


def build_bcq_store(root) -> list[dict]:
    """Build the store; returns one dict per B record: commitLogOffset, size, base, batch."""
    with pytest.MonkeyPatch.context() as mp:  # INNER_NUM / INNER_BASE: the broker's own
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        return _build(root)


def _build(root) -> list[dict]:
    recs = []
    base = 0
    with MessageStore(str(root)) as s:
        s.create_topic("B", 1)
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"t0", queue_id=0)])
        for r in RECORDS:
            if isinstance(r, bytes):
                msg, batch = Message("B", r, tags="plain", queue_id=0), 1
            else:
                batch = len(r)
                props = {"INNER_NUM": str(batch), "INNER_BASE": str(base)}
                msg = Message("B", _encode(r), queue_id=0, properties=props)
            (res,) = s.put_messages([msg])
            rec = s.read_record(res.commitlog_offset, res.size)
            recs.append(
                {
                    "off": res.commitlog_offset,
                    "size": res.size,
                    "tags": rec.tags_code,
                    "ts": rec.store_timestamp,
                    "base": base,
                    "batch": batch,
                    "inner": not isinstance(r, bytes),
                }
            )
            base += batch
        s.put_messages([Message("T", b"t1", queue_id=0)])
        cl_size = s.config.mapped_file_size_commit_log
    for r in recs:  # what the broker's record holds
        seg = r["off"] - r["off"] % cl_size
        path = os.path.join(root, "commitlog", f"{seg:020d}")
        with open(path, "r+b") as f:
            at = r["off"] - seg
            f.seek(at + QUEUE_OFFSET_POSITION)
            f.write(struct.pack(">q", r["base"]))
            if r["inner"]:
                f.seek(at + SYSFLAG_POSITION)
                (flag,) = struct.unpack(">i", f.read(4))
                f.seek(at + SYSFLAG_POSITION)
                f.write(struct.pack(">i", flag | INNER_FLAGS))
    shutil.rmtree(os.path.join(root, "consumequeue", "B"))
    qdir = os.path.join(root, "batchconsumequeue", "B", "0")
    os.makedirs(qdir)
    data = b"".join(
        BCQ_UNIT.pack(r["off"], r["size"], r["tags"], r["ts"], r["base"], r["batch"], -1, 0)
        for r in recs
    )
    with open(os.path.join(qdir, "0" * 20), "wb") as f:
        f.write(data)
        f.truncate(BCQ_FILE_SIZE)
    return recs
