"""The store's ``checkpoint`` file (``StoreCheckpoint``).

A 4096-byte file (one OS page), big-endian (docs/format.md "checkpoint")::

    off  size  field
    0    8     physicMsgTimestamp    store time (epoch ms) of the CommitLog flushed so far
    8    8     logicsMsgTimestamp    same for the ConsumeQueues
    16   8     indexMsgTimestamp     same for the IndexFiles
    24   8     masterFlushedOffset   5.x only (4.x files hold zeros here)
    32   8     confirmPhyOffset      5.x only

RocketMQ 4.x reads and writes only the first 24 bytes; 5.x all 40.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from ..errors import CorruptRecordError
from .mappedfile import create_preallocated
from .source import LOCAL, StoreSource

CHECKPOINT_FILE_SIZE = 4096  # OS_PAGE_SIZE
LAYOUT = struct.Struct(">qqqqq")
#: How far a checkpoint timestamp may lie after the clock (clock skew between hosts).
FUTURE_MARGIN_MS = 24 * 3600 * 1000
#: How far one may lie after the last record's store time (it is the time of a record).
LAST_RECORD_MARGIN_MS = 1000


def _days(ms: int) -> str:
    return f"{ms / 86_400_000:,.1f} days"


@dataclass
class StoreCheckpoint:
    """Values of a ``checkpoint`` file. Timestamps in epoch ms, offsets in bytes."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    @property
    def min_timestamp(self) -> int:
        """``getMinTimestamp``: min(physic, logics) - 3000 ms, floored at 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        """``getMinTimestampIndex``: min(min_timestamp, indexMsgTimestamp)."""
        return min(self.min_timestamp, self.index_msg_timestamp)

    @classmethod
    def read(cls, path: str, source: StoreSource = LOCAL) -> StoreCheckpoint:
        """Read a checkpoint file (4.x or 5.x) from ``source``. A missing file reads as all
        zeros.

        Raises CorruptRecordError when the file is shorter than 24 bytes.
        """
        try:
            data = source.read_file(path, LAYOUT.size)
        except FileNotFoundError:
            return cls()
        if not data:  # created but never written (crash or full disk at the first flush)
            return cls()
        if len(data) < 24:
            raise CorruptRecordError(f"{path}: checkpoint is {len(data)} bytes, need 24")
        data = data.ljust(LAYOUT.size, b"\0")
        return cls(*LAYOUT.unpack(data))

    def problems(
        self, first_store_ms: int, last_store_ms: int, now_ms: int, live: bool = False
    ) -> list[tuple[str, str]]:
        """``[(severity, what)]``: why these values cannot be what ``StoreCheckpoint`` holds
        for a CommitLog whose records were stored from ``first_store_ms`` to
        ``last_store_ms`` (0, 0 for no record). The file has no CRC, so plausibility is the
        only check (a flipped byte in the upper half of a long moves it by days or years):

        * a timestamp below 0, or after ``now_ms`` + :data:`FUTURE_MARGIN_MS`, is an error;
        * physicMsgTimestamp, logicsMsgTimestamp and indexMsgTimestamp are store times of
          records already flushed (``FlushRealTimeService``, ``FlushConsumeQueueService``,
          an IndexFile's endTimestamp): one later than the last record by more than
          :data:`LAST_RECORD_MARGIN_MS` is an error (not checked while a writer holds the
          store: ``live``). Recovery trusts such a checkpoint: the abnormal recovery starts
          at the first file stored before it (``isMappedFileMatchedRecover``) and
          ``IndexService.load`` keeps IndexFiles it should rebuild;
        * one earlier than the first record by more than :data:`FUTURE_MARGIN_MS` (and not
          0, "nothing flushed") is a warning: recovery only scans more.
        ``masterFlushedOffset``/``confirmPhyOffset`` (5.x) below 0 are errors.
        """
        out = []
        names = (
            ("physicMsgTimestamp", self.physic_msg_timestamp),
            ("logicsMsgTimestamp", self.logics_msg_timestamp),
            ("indexMsgTimestamp", self.index_msg_timestamp),
        )
        for name, ts in names:
            if ts < 0:
                out.append(("error", f"{name} {ts} is not a time"))
            elif ts > now_ms + FUTURE_MARGIN_MS:
                out.append(("error", f"{name} {ts} is {_days(ts - now_ms)} in the future"))
            elif last_store_ms and not live and ts > last_store_ms + LAST_RECORD_MARGIN_MS:
                out.append(
                    (
                        "error",
                        f"{name} {ts} is {ts - last_store_ms} ms after the last "
                        f"record's store time {last_store_ms}",
                    )
                )
            elif first_store_ms and 0 < ts < first_store_ms - FUTURE_MARGIN_MS:
                out.append(
                    (
                        "warning",
                        f"{name} {ts} is {_days(first_store_ms - ts)} before "
                        f"the first record's store time {first_store_ms}",
                    )
                )
        for name, v in (
            ("masterFlushedOffset", self.master_flushed_offset),
            ("confirmPhyOffset", self.confirm_phy_offset),
        ):
            if v < 0:
                out.append(("error", f"{name} {v} is not an offset"))
        return out

    def to_bytes(self) -> bytes:
        """The 4096-byte file content (5.x layout, zero padded)."""
        return LAYOUT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ).ljust(CHECKPOINT_FILE_SIZE, b"\0")

    def write(self, path: str, sync: bool = True) -> None:
        """Write the 4096-byte file in place (as the broker's mmap does) and optionally fsync."""
        page = self.to_bytes()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            # A new file appears whole: built as checkpoint.tmp, synced, renamed into place.
            fd = create_preallocated(path, CHECKPOINT_FILE_SIZE)
        try:
            os.pwrite(fd, page, 0)
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
