"""The store's ``checkpoint`` file (``StoreCheckpoint``).

A 4096-byte file (one OS page), big-endian (reference section 5)::

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

from .errors import CorruptRecordError
from .mappedfile import create_preallocated

CHECKPOINT_FILE_SIZE = 4096  # OS_PAGE_SIZE
LAYOUT = struct.Struct(">qqqqq")


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
    def read(cls, path: str) -> "StoreCheckpoint":
        """Read a checkpoint file (4.x or 5.x). A missing file reads as all zeros.

        Raises CorruptRecordError when the file is shorter than 24 bytes.
        """
        try:
            with open(path, "rb") as f:
                data = f.read(LAYOUT.size)
        except FileNotFoundError:
            return cls()
        if not data:  # created but never written (crash or full disk at the first flush)
            return cls()
        if len(data) < 24:
            raise CorruptRecordError(f"{path}: checkpoint is {len(data)} bytes, need 24")
        data = data.ljust(LAYOUT.size, b"\0")
        return cls(*LAYOUT.unpack(data))

    def to_bytes(self) -> bytes:
        """The 4096-byte file content (5.x layout, zero padded)."""
        return LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                           self.index_msg_timestamp, self.master_flushed_offset,
                           self.confirm_phy_offset).ljust(CHECKPOINT_FILE_SIZE, b"\0")

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
