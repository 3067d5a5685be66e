"""The 5.x timer store's ``config/timercheck`` (``TimerCheckpoint``).

A memory-mapped file of one OS page (4096 bytes), big-endian; ``TimerCheckpoint`` reads and
writes the first 56 bytes::

    off  size  field
    0    8     lastReadTimeMs          epoch ms: the wheel is delivered up to here
    8    8     lastTimerLogFlushPos    timerlog bytes flushed
    16   8     lastTimerQueueOffset    next rmq_sys_wheel_timer queue offset to enqueue
    24   8     masterTimerQueueOffset  the master's lastTimerQueueOffset (slaves)
    32   8     dataVersion.stateVersion
    40   8     dataVersion.timestamp
    48   8     dataVersion.counter

A missing file reads as zeros (``TimerCheckpoint``'s constructor creates it).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from ..errors import CorruptRecordError

LAYOUT = struct.Struct(">qqqqqqq")
#: Where the file is, under the store root (TimerMessageStore: ``config/timercheck``).
CHECK_FILE = os.path.join("config", "timercheck")


@dataclass(frozen=True)
class TimerCheckpoint:
    """Values of ``config/timercheck``; times epoch ms, offsets bytes or queue units."""

    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0


def read_timercheck(path: str) -> TimerCheckpoint:
    """Read a ``timercheck`` file; all zeros when it does not exist. A file shorter than 56
    bytes reads as zeros past its end, as the broker reads it (``TimerCheckpoint`` maps a whole
    page; verify warns of it).

    Raises:
        CorruptRecordError: a negative offset.
        OSError: from the file.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(LAYOUT.size)
    except FileNotFoundError:
        return TimerCheckpoint()
    ck = TimerCheckpoint(*LAYOUT.unpack(raw.ljust(LAYOUT.size, b"\0")))
    if ck.last_timer_log_flush_pos < 0 or ck.last_timer_queue_offset < 0:
        raise CorruptRecordError(f"{path}: negative offset in the timer checkpoint")
    return ck
