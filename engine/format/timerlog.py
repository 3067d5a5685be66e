"""The 5.x timer store's ``timerlog/``: 52-byte units chained per wheel slot (``TimerLog``).

``timerlog/`` is a segmented file (``MappedFileQueue``: files named by their 20-digit start
offset, ``mappedFileSizeTimerLog`` bytes each, 100 MiB by default). ``TimerMessageStore.doEnqueue``
appends one unit per message it puts into the wheel, big-endian::

    off  size  field
    0    4     size        52 (TimerLog.UNIT_SIZE)
    4    8     prevPos     the previous unit of the same slot, -1 for the first
    12   4     magic       MAGIC_DEFAULT 1, | MAGIC_ROLL 2 (re-put later), | MAGIC_DELETE 4 (a recall)
    16   8     writeTime   epoch ms the unit was written (currWriteTimeMs)
    24   4     delay       ms from writeTime to the slot's time
    28   8     offsetPy    the CommitLog offset of the message (its rmq_sys_wheel_timer record)
    36   4     sizePy      its size
    40   4     topicHash   String.hashCode of its REAL_TOPIC (hashTopicForMetrics)
    44   8     reserved    0

When a unit does not fit before a file's end (with 16 bytes to spare), ``TimerLog.append`` puts
a blank there: ``int remaining | long 0 | int BLANK_MAGIC_CODE``, and the unit goes in the next
file. A slot's units are read from its ``lastPos`` back through ``prevPos``
(``TimerMessageStore.dequeue``); each unit is appended after the one it points back to, so a
valid chain's positions strictly decrease: :meth:`TimerLogReader.walk_chain` stops where one
does not (a cycle) and never takes more steps than the log has units.

In a broker's store each unit belongs to one slot's chain. A hostile wheel can point many
slots (all 1,209,600) at one chain, or chains can join: :meth:`TimerLogReader.walk_chains`
walks them all with one visited set (a bitmap of the log's bytes), so a unit reached twice is
walked once, and decodes at most as many units as the log can hold, whatever the wheel says.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..errors import CorruptRecordError
from .mappedfile import FileQueue, segment_names

UNIT = struct.Struct(">iqiqiqiiq")  # TimerLog.UNIT_SIZE = 52
UNIT_SIZE = UNIT.size
#: TimerLog.BLANK_MAGIC_CODE: ``0xBBCCDDEE ^ 1880681586 + 8`` (Java: + before ^), as an int32.
BLANK_MAGIC_CODE = struct.unpack(">i", struct.pack(">I", 0xBBCCDDEE ^ (1880681586 + 8)))[0]
#: TimerMessageStore.MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
#: The directory's name in the store root (TimerMessageStore.getTimerLogPath).
LOG_DIR = "timerlog"


@dataclass(frozen=True, slots=True)
class TimerUnit:
    """One timerlog unit. ``pos``: its offset in the log; times in epoch ms."""

    pos: int
    prev_pos: int
    magic: int
    write_time: int
    delay: int
    offset_py: int
    size_py: int
    topic_hash: int

    @property
    def delayed_time(self) -> int:
        """The slot's time: writeTime + delay (``TimerMessageStore.dequeue``)."""
        return self.write_time + self.delay

    @property
    def is_roll(self) -> bool:
        """``needRoll``: the message is re-put into the timer topic, not delivered, here."""
        return bool(self.magic & MAGIC_ROLL)

    @property
    def is_delete(self) -> bool:
        """``needDelete``: the unit is a recall (its record carries TIMER_DEL_UNIQKEY)."""
        return bool(self.magic & MAGIC_DELETE)


def decode_unit(raw: bytes, pos: int) -> TimerUnit:
    """The unit in ``raw`` (:data:`UNIT_SIZE` bytes) that sits at log offset ``pos``.

    Raises:
        CorruptRecordError: short, a blank, a size other than 52, a magic the broker's
            ``isMagicOK`` refuses (bits past the low four), or a negative CommitLog offset or
            size.
    """
    if len(raw) < UNIT_SIZE:
        raise CorruptRecordError("timerlog unit cut short", pos)
    size, prev, magic, wt, delay, off, sz, th, _ = UNIT.unpack_from(raw)
    if magic == BLANK_MAGIC_CODE:
        raise CorruptRecordError("a timerlog chain points at a blank", pos)
    if size != UNIT_SIZE or magic & ~0xF:  # TimerMessageStore.isMagicOK: (magic | 0xF) == 0xF
        raise CorruptRecordError(f"not a timerlog unit (size {size}, magic {magic:#x})", pos)
    if off < 0 or sz <= 0:
        raise CorruptRecordError(f"timerlog unit points at CommitLog {off}+{sz}", pos)
    return TimerUnit(pos, prev, magic, wt, delay, off, sz, th)


class TimerLogReader:
    """``timerlog/`` read-only: its units by offset, and the walk of a slot's chain.

    Raises (constructor): CorruptRecordError when the files do not form a segmented log
    (:class:`engine.format.mappedfile.FileQueue`).
    """

    def __init__(self, directory: str):
        self.files = (
            FileQueue(directory, None, read_only=True) if segment_names(directory) else None
        )

    def close(self) -> None:
        """Close the files."""
        if self.files is not None:
            self.files.close()

    def __enter__(self) -> TimerLogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def size(self) -> int:
        """Bytes the log spans (from its first file's start to its last file's end)."""
        f = self.files
        return f.end_offset - f.min_offset if f is not None else 0

    def unit_at(self, pos: int) -> TimerUnit | None:
        """The unit at log offset ``pos``, None when no file holds it (expired: the broker
        stops the chain there, ``TimerLog.getWholeBuffer`` null). Raises CorruptRecordError
        (:func:`decode_unit`)."""
        f = self.files
        if f is None or f.find(pos) is None:
            return None
        return decode_unit(f.read(pos, UNIT_SIZE), pos)

    def walk_chain(self, last_pos: int) -> tuple[list[TimerUnit], str | None]:
        """A slot's units from ``last_pos`` back through ``prevPos`` (``TimerMessageStore.dequeue``).

        Returns ``(units newest first, problem)``: problem is None for a chain that ends at
        ``prevPos == -1`` or at a unit no file holds any more (as the broker's walk does), else
        why it stopped early (a ``prevPos`` that does not go back: a cycle). At most
        ``size / 52 + 1`` steps.

        Raises:
            CorruptRecordError: a unit on the chain is not a unit (:func:`decode_unit`).
        """
        units: list[TimerUnit] = []
        pos = last_pos
        budget = self.size // UNIT_SIZE + 1
        while pos != -1:
            if budget <= 0:
                return units, f"chain from {last_pos} longer than the log"
            budget -= 1
            unit = self.unit_at(pos)
            if unit is None:
                break
            units.append(unit)
            if unit.prev_pos != -1 and not 0 <= unit.prev_pos < pos:
                return units, f"unit at {pos} points forward to {unit.prev_pos} (a cycle)"
            pos = unit.prev_pos
        return units, None

    def walk_chains(
        self, last_positions: Iterable[int], problems: list[str]
    ) -> Iterator[TimerUnit]:
        """Every unit on the chains that start at ``last_positions`` (the live slots' lastPos,
        ``TimerMessageStore.dequeue`` walks each back through ``prevPos``), each unit once.

        One visited set is shared by all the chains (a bitmap of the log's byte positions,
        ``size / 8`` bytes): a chain that reaches a unit already walked stops there, since the
        rest of it was walked too. A wheel whose every slot points at one chain therefore
        costs one walk of that chain, not one per slot. In all at most ``size / 52 + 1`` units
        are decoded; past that the walk ends with a problem. A chain stops as
        :meth:`walk_chain`'s does (``prevPos`` -1, a unit no file holds, a ``prevPos`` that
        does not go back: a cycle, noted in ``problems``).

        Args:
            last_positions: timerlog offsets (bytes), in any order, repeats allowed.
            problems: why chains stopped early are appended here (text naming the offsets).

        Yields:
            :class:`TimerUnit`, newest first along each chain.

        Raises:
            CorruptRecordError: a unit on a chain is not a unit (:func:`decode_unit`).
        """
        f = self.files
        if f is None:
            return
        base, size = f.min_offset, self.size
        seen = bytearray(size // 8 + 1)
        budget = size // UNIT_SIZE + 1
        for last in last_positions:
            pos = last
            while pos != -1:
                rel = pos - base
                if 0 <= rel < size:
                    if seen[rel >> 3] & (1 << (rel & 7)):
                        break  # walked from an earlier slot, with the rest of its chain
                    seen[rel >> 3] |= 1 << (rel & 7)
                if budget <= 0:
                    problems.append(
                        f"the chains reach more than the log's {size // UNIT_SIZE} units"
                    )
                    return
                budget -= 1
                unit = self.unit_at(pos)
                if unit is None:
                    break
                yield unit
                if unit.prev_pos != -1 and not 0 <= unit.prev_pos < pos:
                    problems.append(f"unit at {pos} points forward to {unit.prev_pos} (a cycle)")
                    break
                pos = unit.prev_pos
