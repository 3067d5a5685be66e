"""A 5.x timer store whose wheel's slots share timerlog chains (issue 36 item 1), for
tests/engine/test_scheduled.py, tests/fs and tests/spark: built from the Java's definitions
(``TimerWheel``'s 38,707,200-byte file of 32-byte slots, ``TimerLog``'s 52-byte units chained
back through prevPos, records put as ``HookUtils.transformTimerMessage`` leaves them)."""

from __future__ import annotations

import os
import struct
import time

import numpy as np

from rmqfs.engine.format.timerwheel import SLOT_FIELDS, SLOTS_TOTAL, WHEEL_LENGTH
from rmqfs.engine.store import Message, MessageStore

UNIT = struct.Struct(">iqiqiqiiq")  # TimerLog.UNIT_SIZE = 52


def build_shared_chain_store(root, units: int = 100, slots: int = SLOTS_TOTAL * 2) -> list[int]:
    """A store with ``units`` timed messages to topic T, one timerlog chain of ``units`` units
    (one per message, each pointing back at the one before), and a wheel whose first ``slots``
    slots (all 1,209,600 by default) each name a tick of its own in the future and point at
    the chain's head: a valid chain, reached from every slot. Returns the CommitLog offsets of
    the messages, oldest first (what waits: each once)."""
    os.makedirs(root)
    with open(os.path.join(root, "timerwheel"), "wb") as f:
        f.truncate(WHEEL_LENGTH)
    now = int(time.time() * 1000)
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        put = s.put_messages(
            [
                Message("T", b"m%d" % i, queue_id=0, deliver_time_ms=now + 3_600_000 + i * 1000)
                for i in range(units)
            ]
        )
    log = b"".join(
        UNIT.pack(
            52, (i - 1) * 52 if i else -1, 1, now, 3_600_000, r.commitlog_offset, r.size, 0, 0
        )
        for i, r in enumerate(put)
    )
    os.makedirs(os.path.join(root, "timerlog"))
    with open(os.path.join(root, "timerlog", "0" * 20), "wb") as f:
        f.write(log + b"\0" * (max(len(log), 1 << 20) - len(log)))
    wheel = np.zeros(SLOTS_TOTAL * 2, dtype=np.dtype(list(SLOT_FIELDS)))
    base = (now // 1000 // (SLOTS_TOTAL * 2) + 1) * SLOTS_TOTAL * 2  # a tick with index 0
    wheel["timeTick"][:slots] = base + np.arange(slots)
    wheel["firstPos"][:slots] = 0
    wheel["lastPos"][:slots] = (units - 1) * 52
    wheel["num"][:slots] = units
    wheel.tofile(os.path.join(root, "timerwheel"))
    return [r.commitlog_offset for r in put]


def build_waiting_store(root, timed: int = 300, delayed: int = 200) -> None:
    """A 5.x store (an empty ``timerwheel``) with ``timed`` timed messages not yet enqueued
    (``rmq_sys_wheel_timer`` queue 0) and ``delayed`` delay-level ones (levels 3 to 18), to
    topics T and U in turn, their deliver times interleaved; bodies of varied lengths, every
    seventh one not UTF-8 (a base64 line)."""
    os.makedirs(root)
    with open(os.path.join(root, "timerwheel"), "wb") as f:
        f.truncate(WHEEL_LENGTH)
    now = int(time.time() * 1000)

    def body(i: int) -> bytes:
        return b"\xff\xfe%d" % i if i % 7 == 0 else b"w%d-" % i + b"x" * (i * 37 % 400)

    msgs = [
        Message(
            "TU"[i % 2],
            body(i),
            queue_id=i % 3,
            deliver_time_ms=now + 3_600_000 + (i * 7919 % 100_000) * 1000 + 1,
        )
        for i in range(timed)
    ] + [
        Message("TU"[i % 2], body(timed + i), queue_id=i % 3, delay_level=3 + i % 16)
        for i in range(delayed)
    ]
    with MessageStore(str(root)) as s:
        s.create_topic("T", 3)
        s.create_topic("U", 3)
        for i in range(0, len(msgs), 100):
            s.put_messages(msgs[i : i + 100])
