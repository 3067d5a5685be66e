"""The 5.x timer store's ``timerwheel`` file: one slot per timer tick (``TimerWheel``, ``Slot``).

A file of ``slotsTotal * 2`` slots, ``slotsTotal = TIMER_WHEEL_TTL_DAY * DAY_SECS`` = 604,800
(``TimerMessageStore``'s constructor, whatever ``timerPrecisionMs`` is), so exactly 38,707,200
bytes; ``TimerWheel``'s constructor refuses a file of another length. Slot ``i`` holds the tick
``time / timerPrecisionMs``, kept at index ``tick mod (slotsTotal * 2)``
(``TimerWheel.getSlotIndex``). Each slot, big-endian::

    off  size  field
    0    8     timeTick    time / timerPrecisionMs (TimerWheel.putSlot); 0 in a slot never used
    8    8     firstPos    timerlog offset of the slot's first unit, -1 when none
    16   8     lastPos     timerlog offset of its last unit (the chain runs back from it)
    24   4     num         units put minus delete units (TimerMessageStore.doEnqueue)
    28   4     magic       unused by the store (0)

``TimerWheel.getSlot(timeMs)`` returns an empty slot when the slot at the index holds another
tick, so only a slot whose tick maps to its own index is live. The reader is numpy over the
whole file (1.2 million slots: never a Python loop over them); numpy is imported on first use,
so the put path (which only needs :data:`WHEEL_FILE`) stays free of it.
"""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError

if TYPE_CHECKING:
    import numpy as np

#: TimerMessageStore.TIMER_WHEEL_TTL_DAY, DAY_SECS
TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
#: TimerMessageStore.slotsTotal; the file holds twice as many slots (TimerWheel.wheelLength)
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS
#: MessageStoreConfig.timerPrecisionMs default
DEFAULT_PRECISION_MS = 1000

SLOT = struct.Struct(">qqqii")  # Slot.SIZE = 32
SLOT_FIELDS: tuple[tuple[str, str], ...] = (
    ("timeTick", ">i8"),
    ("firstPos", ">i8"),
    ("lastPos", ">i8"),
    ("num", ">i4"),
    ("magic", ">i4"),
)
#: The file's one valid length (TimerWheel: ``slotsTotal * 2 * Slot.SIZE``).
WHEEL_LENGTH = SLOTS_TOTAL * 2 * SLOT.size
#: The file's name in the store root (TimerMessageStore.getTimerWheelPath).
WHEEL_FILE = "timerwheel"


def read_live_slots(
    path: str, from_ms: int, precision_ms: int = DEFAULT_PRECISION_MS
) -> np.ndarray:
    """The live slots of a ``timerwheel`` file whose time is at or after ``from_ms``.

    Args:
        path: the ``timerwheel`` file.
        from_ms: epoch ms; slots before it are already delivered (``TimerCheckpoint``'s
            lastReadTimeMs: the dequeue reads the wheel from there).
        precision_ms: ``timerPrecisionMs`` (a tick's length).

    Returns:
        A numpy structured array (:data:`SLOT_FIELDS` plus ``timeMs``, int64 epoch ms), one row
        per slot that holds units (``lastPos >= 0``) and whose tick maps to its own index
        (``TimerWheel.getSlot``), sorted by time.

    Raises:
        CorruptRecordError: the file is neither empty (a new wheel to ``TimerWheel``) nor
            :data:`WHEEL_LENGTH` bytes (``TimerWheel`` refuses such a file), or ``precision_ms``
            is not positive.
        OSError: from the file.
    """
    import numpy as np

    if precision_ms <= 0:
        raise CorruptRecordError(f"timerPrecisionMs {precision_ms} is not positive")
    size = os.stat(path).st_size
    if size == 0:  # TimerWheel takes an empty file as a new wheel (setLength): no slot
        return np.empty(0, dtype=np.dtype(list(SLOT_FIELDS) + [("timeMs", "<i8")]))
    if size != WHEEL_LENGTH:
        raise CorruptRecordError(
            f"{path}: {size} bytes, a timer wheel is {WHEEL_LENGTH} (TimerWheel refuses it)"
        )
    wheel = np.memmap(path, dtype=np.dtype(list(SLOT_FIELDS)), mode="r")
    try:
        ticks = wheel["timeTick"]
        index = np.arange(len(wheel), dtype=np.int64)
        live = (
            (wheel["lastPos"] >= 0)
            & (ticks > 0)
            & (ticks * precision_ms >= from_ms)
            & (ticks % (SLOTS_TOTAL * 2) == index)
        )
        rows = np.asarray(wheel[live])
    finally:
        del wheel
    out = np.empty(len(rows), dtype=np.dtype(list(SLOT_FIELDS) + [("timeMs", "<i8")]))
    for name, _ in SLOT_FIELDS:
        out[name] = rows[name]
    out["timeMs"] = rows["timeTick"].astype(np.int64) * precision_ms
    out.sort(order="timeMs", kind="stable")
    return out


def live_chain_heads(
    path: str, from_ms: int, precision_ms: int = DEFAULT_PRECISION_MS
) -> list[int]:
    """The distinct ``lastPos`` of the live slots of the ``timerwheel`` at ``path``
    (:func:`read_live_slots`), newest first: where ``TimerMessageStore.dequeue`` starts its
    walks back through the timerlog. Slots sharing a lastPos share its chain, so each head
    comes once (``TimerLogReader.walk_chains`` then walks them with one visited set).

    Raises: as :func:`read_live_slots`.
    """
    import numpy as np

    slots = read_live_slots(path, from_ms, precision_ms)
    return np.unique(slots["lastPos"]).tolist()[::-1]
