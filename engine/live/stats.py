"""Message counts and bytes per queue over the last minute, hour and day (mqadmin ``statsAll``).

A broker answers ``statsAll`` from its in-memory counters (``BrokerStatsManager``: TOPIC_PUT_NUMS,
TOPIC_PUT_SIZE, sampled per minute, hour and day), which a store on disk does not hold. Here the
same numbers come from the store itself: a queue's messages stored since ``now - window`` are
the queue offsets from ``getOffsetInQueueByTime(now - window)`` (a binary search on the
records' store timestamps, a few dozen record reads per queue) to its max offset, and their
bytes the sum of those ConsumeQueue units' sizes, read column-wise with numpy
(:data:`engine.read.columnar.UNIT_DTYPE`). No message is decoded per unit, whatever the store's size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import CorruptRecordError, OffsetOutOfRangeError
from ..read.columnar import UNIT_DTYPE

if TYPE_CHECKING:
    from ..store import MessageStore

#: The windows reported: name -> milliseconds.
WINDOWS = {"minute": 60_000, "hour": 3_600_000, "day": 86_400_000}

_CHUNK = 1 << 20  # ConsumeQueue units read at once


def queue_stats(store: MessageStore, topic: str, queue_id: int, now_ms: int) -> dict:
    """``{"topic", "queueId", "messages", "bytes", "minute": {"messages", "bytes"}, "hour":
    ..., "day": ...}`` for one queue: readable messages in total and stored in each window
    before ``now_ms`` (epoch ms; messages stored after it are not counted in the windows).

    ``bytes`` are the CommitLog bytes of their records, each record once (``TOPIC_PUT_SIZE``
    counts a put's bytes once): the messages of a BatchCQ topic's inner batch share one
    record, whose size each of their units carries."""
    cq = store.consume_queue(topic, queue_id)
    row = {"topic": topic, "queueId": queue_id, "messages": 0, "bytes": 0}
    for w in WINDOWS:
        row[w] = {"messages": 0, "bytes": 0}
    if cq is None:
        return row
    lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    if hi <= lo:
        return row
    # each window's offsets first, then one pass over the units, a chunk at a time (a queue of
    # any length holds one chunk: the whole queue's sizes took 33 bytes a message), adding
    # each unit's record bytes once to the total and to the windows it falls in
    try:
        newest = store.get_message(topic, queue_id, hi - 1).store_timestamp
    except (OffsetOutOfRangeError, CorruptRecordError):
        newest = None  # expired or damaged since: each search's answer stands
    end = max(_first_stored_at_or_after(store, topic, queue_id, now_ms + 1, hi, newest), lo)
    starts = {
        w: max(_first_stored_at_or_after(store, topic, queue_id, now_ms - ms, hi, newest), lo)
        for w, ms in WINDOWS.items()
    }
    in_window = dict.fromkeys(WINDOWS, 0)
    total = 0
    pos = lo
    last_offset = -1  # the record of the unit before a chunk
    while pos < hi:
        units = np.frombuffer(cq.read_units(pos, min(_CHUNK, hi - pos)), UNIT_DTYPE)
        if not len(units):
            break
        offsets = units["off"].astype(np.int64)
        first_of_record = np.empty(len(units), bool)
        first_of_record[0] = offsets[0] != last_offset
        np.not_equal(offsets[1:], offsets[:-1], out=first_of_record[1:])
        sizes = np.where(first_of_record, units["size"].astype(np.int64), 0)
        total += int(sizes.sum())
        for w, a in starts.items():
            x, y = max(a, pos), min(end, pos + len(sizes))
            if y > x:
                in_window[w] += int(sizes[x - pos : y - pos].sum())
        last_offset = int(offsets[-1])
        pos += len(units)
    row["messages"] = pos - lo  # (the units read: fewer where the queue ends short)
    row["bytes"] = total
    for w, a in starts.items():
        a, b = min(a, pos), min(end, pos)
        if b > a:  # (a window starts at a record: a batch's messages share its store time)
            row[w] = {"messages": b - a, "bytes": in_window[w]}
    return row


def _first_stored_at_or_after(
    store: MessageStore, topic: str, queue_id: int, ts: int, hi: int, newest: int | None
) -> int:
    """The first queue offset stored at or after ``ts`` (epoch ms), ``hi`` (the max offset)
    when the queue's newest message (stored at ``newest``) is older. ``getOffsetInQueueByTime``
    answers the last unit's msgBaseOffset there for a BatchCQ queue
    (``BatchConsumeQueue``)."""
    if newest is not None and newest < ts:
        return hi
    return min(store.offset_by_time(topic, queue_id, ts), hi)


def topic_stats(store: MessageStore, topic: str, now_ms: int) -> list[dict]:
    """:func:`queue_stats` of every queue of ``topic``."""
    return [queue_stats(store, topic, q, now_ms) for q in store.queue_ids(topic)]


def total(rows: list[dict]) -> dict:
    """The sum of :func:`queue_stats` rows (``queueId`` None)."""
    out = {
        "topic": rows[0]["topic"] if rows else None,
        "queueId": None,
        "messages": sum(r["messages"] for r in rows),
        "bytes": sum(r["bytes"] for r in rows),
    }
    for w in WINDOWS:
        out[w] = {k: sum(r[w][k] for r in rows) for k in ("messages", "bytes")}
    return out
