"""An LMQ store built from the Java's definitions (issue 22, section 2.4), for
tests/engine/test_lmq.py and tests/mount/test_lmq_mount.py: records with
``MessageConst.PROPERTY_INNER_MULTI_DISPATCH`` / ``INNER_MULTI_QUEUE_OFFSET``, the units
``ConsumeQueue.multiDispatchLmqQueue`` writes (same CommitLog offset, in
``consumequeue/%LMQ%a/0`` at the offset the record names), and ``LmqConsumerOffsetManager``'s
``config/lmqConsumerOffset.json``."""

from __future__ import annotations

import json
import os
import struct

import pytest

from rmqfs.engine.service import validation
from rmqfs.engine.store import Message, MessageStore

UNIT = struct.Struct(">qiq")  # ConsumeQueue.CQ_STORE_UNIT_SIZE: offset, size, tagsCode
# (topic, body, LMQs) of each record, in CommitLog order
RECORDS = [
    ("T", b"m0", ["%LMQ%a", "%LMQ%b"]),
    ("T", b"m1", []),
    ("U", b"m2", ["%LMQ%b"]),
    ("T", b"m3", ["%LMQ%a"]),
]


def build_lmq_store(root) -> dict[str, list[bytes]]:
    """A store whose records carry INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET as the
    broker's LMQ dispatch sees them, with the LMQ units and offsets file the broker writes.
    Returns ``{lmq: [body, ...]}`` in queue order. (The records are put with the two
    properties a client may not send: the broker's ``LmqDispatch`` sets them.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        return _build(root)


def _build(root) -> dict[str, list[bytes]]:
    next_off: dict[str, int] = {}
    lmq: dict[str, list[bytes]] = {}
    units: dict[str, list[tuple[int, int, int]]] = {}
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        s.create_topic("U", 1)
        for topic, body, queues in RECORDS:
            props = {}
            if queues:
                offs = [next_off.get(q, 0) for q in queues]
                props = {
                    "INNER_MULTI_DISPATCH": ",".join(queues),
                    "INNER_MULTI_QUEUE_OFFSET": ",".join(map(str, offs)),
                }
            (r,) = s.put_messages([Message(topic, body, tags="tg", queue_id=0, properties=props)])
            rec = s.read_record(r.commitlog_offset, r.size)
            for q in queues:
                next_off[q] = next_off.get(q, 0) + 1
                lmq.setdefault(q, []).append(body)
                units.setdefault(q, []).append(
                    (rec.commitlog_offset, rec.store_size, rec.tags_code)
                )
        size = s.cq_file_size
    for q, us in units.items():
        d = os.path.join(root, "consumequeue", q, "0")
        os.makedirs(d)
        data = b"".join(UNIT.pack(*u) for u in us)
        with open(os.path.join(d, "0" * 20), "wb") as f:
            f.write(data + b"\0" * (size - len(data)))
    with open(os.path.join(root, "config", "lmqConsumerOffset.json"), "w") as f:
        json.dump(
            {
                "offsetTable": {"T@G": {"0": 1}},
                "lmqOffsetTable": {"%LMQ%a@%LMQ%g": 1, "%LMQ%b@%LMQ%g": 2},
            },
            f,
        )
    return lmq


_B62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _b62(n: int, width: int) -> str:
    return "".join(_B62[(n // 62**k) % 62] for k in range(width))


def build_fanout_store(root, records: int = 400, per_record: int = 2500, shared: bool = True):
    """Issue 36 item 3: ``records`` records of topic T, each naming ``per_record`` LMQ queues
    in INNER_MULTI_DISPATCH (about 30 KB of properties, under the 32,767 a record holds), no
    LMQ ConsumeQueue on disk, the store marked LMQ by ``config/lmqConsumerOffset.json``: every
    read-only open rebuilds the light queues from the records. ``shared``: every record names
    the same queues (queue offset = the record's index); else each names queues of its own
    (``records * per_record`` queues, at offset 1: a ConsumeQueue lacking older units, so the
    whole CommitLog is re-dispatched). Returns the CommitLog offsets of the records."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        offsets = []
        with MessageStore(str(root)) as s:
            s.create_topic("T", 1)
            for i in range(records):
                if shared:
                    names = ["%LMQ%" + _b62(j, 2) for j in range(per_record)]
                    offs = [str(i)] * per_record
                else:
                    names = ["%LMQ%" + _b62(i * per_record + j, 4) for j in range(per_record)]
                    offs = ["1"] * per_record
                props = {
                    "INNER_MULTI_DISPATCH": ",".join(names),
                    "INNER_MULTI_QUEUE_OFFSET": ",".join(offs),
                }
                (r,) = s.put_messages([Message("T", b"m%d" % i, queue_id=0, properties=props)])
                offsets.append(r.commitlog_offset)
    with open(os.path.join(root, "config", "lmqConsumerOffset.json"), "w") as f:
        json.dump({"offsetTable": {}, "lmqOffsetTable": {}}, f)
    return offsets
