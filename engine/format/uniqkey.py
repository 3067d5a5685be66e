"""Client message ids (``UNIQ_KEY``) as RocketMQ's ``MessageClientIDSetter`` makes them.

An id is upper-case hex of (``MessageClientIDSetter.createUniqID``; docs/format.md)::

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
from array import array

from .javahash import java_hash_u32


class UniqKeyGenerator:
    """Generates ``UNIQ_KEY`` values for one producer (thread-safe).

    Args:
        ip: the producer's address bytes (4 or 16).
    """

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01"):
        # (short) UtilAll.getPid(): the low 16 bits; then the class loader's hashCode.
        prefix = ip + struct.pack(">Hi", os.getpid() & 0xFFFF, random.getrandbits(31))
        self._prefix = prefix.hex().upper()
        # [the counter the next id takes (used & 0xFFFF, like a short), the month's first ms,
        # the next month's] (epoch ms): an array, so that the compiled single put takes ids
        # from the same state (:meth:`lane_state`)
        self._state = array("q", [random.getrandbits(16), 0, 0])
        self._lock = threading.Lock()
        self._head = ""
        self._head_hash = 0

    def roll_month(self, now_ms: int) -> None:
        """Make the month of ``now_ms`` (epoch ms, local time, as ``MessageClientIDSetter``'s
        ``setStartTime``) the one ids count their time part from."""
        with self._lock:
            self._roll_locked(now_ms)

    def _roll_locked(self, now_ms: int) -> None:
        """:meth:`roll_month` under the lock. The next month's start is kept past ``now_ms``
        even where local time gives an earlier one (clocks set back across a month's first
        midnight), so a time is never past its own month: it is counted from the same start
        as on every call before."""
        now = _dt.datetime.fromtimestamp(now_ms / 1000)
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + _dt.timedelta(days=32)).replace(day=1)
        self._state[1] = int(start.timestamp() * 1000)
        self._state[2] = max(int(nxt.timestamp() * 1000), now_ms + 1)

    def lane_state(self) -> tuple[str, array]:
        """``(the ids' fixed prefix, the state array)`` for the compiled single put
        (``engine/read/_putobj.c``'s Lane), which takes ids from them as :meth:`next_keys`
        would, one at a time, under the store's put lock (every caller of a store's generator
        holds it): it reads the month from ``state[1:3]`` (asking :meth:`roll_month` when a
        time is past it) and advances the counter ``state[0]``."""
        return self._prefix, self._state

    @property
    def id_length(self) -> int:
        """Characters of each id: the address, pid and class-loader hash as hex, then 8 hex
        digits of time and 4 of counter (32 for IPv4, 56 for IPv6)."""
        return len(self._prefix) + 12

    @property
    def counter(self) -> int:
        """The counter the next id takes (its low 16 bits are used, ``MessageClientIDSetter``).
        Setting it rewinds or moves the sequence: the store's fast put path puts it back when
        it falls back, so the general path hands out the ids it would have alone."""
        return self._state[0]

    @counter.setter
    def counter(self, value: int) -> None:
        with self._lock:
            self._state[0] = value

    def next(self, now_ms: int | None = None) -> str:
        """A new id (32 hex digits for IPv4)."""
        return self.next_with_hash(now_ms)[0]

    def next_with_hash(self, now_ms: int | None = None) -> tuple[str, int]:
        """A new id and its Java ``hashCode`` as an unsigned 32-bit int.

        The hash comes from the cached hash of the fixed head (prefix + time part) combined
        with a table lookup for the 4 counter digits (``h(a+b) = h(a)*31**4 + h(b)``), so the
        IndexFile key ``topic#id`` costs no per-character work.
        """
        keys, hashes = self.next_many(1, now_ms)
        return keys[0], hashes[0]

    def next_many(self, n: int, now_ms: int | None = None) -> tuple[list[str], list[int]]:
        """``n`` new ids for the same time (epoch ms) and their unsigned Java hashes."""
        head, head_hash, first = self._take(n, now_ms)
        if n == 1:
            c = first & 0xFFFF
            return [head + _HEX4[c]], [(head_hash + _HASH4[c]) & 0xFFFFFFFF]
        counters = [c & 0xFFFF for c in range(first, first + n)]
        return (
            [head + _HEX4[c] for c in counters],
            [(head_hash + _HASH4[c]) & 0xFFFFFFFF for c in counters],
        )

    def next_keys(self, n: int, now_ms: int | None = None) -> list[str]:
        """``n`` new ids for the same time (epoch ms), without their hashes (the compiled put
        path hashes them itself): the ids :meth:`next_many` would give, in C-level loops."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        head, first = self._take_plain(n, now_ms)
        c = first & 0xFFFF
        if c + n <= 0x10000:
            digits = _HEX4[c : c + n]
        else:  # the 16-bit counter wraps
            digits = list(itertools.islice(itertools.cycle(_HEX4), c, c + n))
        return list(map(head.__add__, digits))

    def _take_plain(self, n: int, now_ms: int) -> tuple[str, int]:
        """Reserve ``n`` counter values: ``(fixed head of the ids, the first counter value)``,
        the head without its hash (the ids of the compiled put path, which hashes them)."""
        with self._lock:
            state = self._state
            if now_ms >= state[2]:
                self._roll_locked(now_ms)
            first = state[0]
            state[0] = first + n
            return self._prefix + "%08X" % ((now_ms - state[1]) & 0x7FFFFFFF), first

    def _take(self, n: int, now_ms: int | None) -> tuple[str, int, int]:
        """Reserve ``n`` counter values: ``(fixed head of the ids, its hash * 31**4, the
        first counter value)`` (:meth:`_take_plain`, the head's hash kept for the next call
        of the same millisecond)."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        head, first = self._take_plain(n, now_ms)
        with self._lock:
            if head != self._head:
                self._head_hash = (java_hash_u32(head) * _POW31_4) & 0xFFFFFFFF
                self._head = head
            return head, self._head_hash, first


# "%04X" of every counter value and the Java hash of that text (65536 entries, built lazily
# in C-level comprehensions from the 256 two-digit halves).
_HEX2 = ["%02X" % b for b in range(256)]
_HASH2 = [ord(t[0]) * 31 + ord(t[1]) for t in _HEX2]
_HEX4 = [a + b for a in _HEX2 for b in _HEX2]
_HASH4 = [ha * 961 + hb for ha in _HASH2 for hb in _HASH2]
_POW31_4 = 31**4
