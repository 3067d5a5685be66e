"""Client message ids (``UNIQ_KEY``) as RocketMQ's ``MessageClientIDSetter`` makes them.

An id is upper-case hex of (reference section 1.9)::

    ip (4 or 16 bytes) | int16 pid | int32 class-loader hash | int32 ms since the month began
    | int16 counter

so 32 hex digits for an IPv4 producer. The first three parts are fixed per process.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import random
import struct
import threading
import time

_TAIL = struct.Struct(">iH")


class UniqKeyGenerator:
    """Generates ``UNIQ_KEY`` values for one producer (thread-safe).

    Args:
        ip: the producer's address bytes (4 or 16).
    """

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01"):
        # (short) UtilAll.getPid(): the low 16 bits; then the class loader's hashCode.
        prefix = ip + struct.pack(">Hi", os.getpid() & 0xFFFF, random.getrandbits(31))
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count(random.getrandbits(16))
        self._lock = threading.Lock()
        self._month_start = 0
        self._next_month = 0

    def _roll_month(self, now_ms: int) -> None:
        now = _dt.datetime.fromtimestamp(now_ms / 1000)
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + _dt.timedelta(days=32)).replace(day=1)
        self._month_start = int(start.timestamp() * 1000)
        self._next_month = int(nxt.timestamp() * 1000)

    def next(self, now_ms: int | None = None) -> str:
        """A new id (32 hex digits for IPv4)."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        with self._lock:
            if now_ms >= self._next_month:
                self._roll_month(now_ms)
            counter = next(self._counter) & 0xFFFF
            since = now_ms - self._month_start
        return self._prefix + _TAIL.pack(since & 0x7FFFFFFF, counter).hex().upper()
