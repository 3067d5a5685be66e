"""verify's checks of the 5.x timer store (``TimerMessageStore``): ``config/timercheck``, the
``timerwheel`` and the ``timerlog/`` chains its live slots start, read-only.

What the broker would refuse or lose is an error (kind ``timer``, which ``recover`` does not
repair: :data:`engine.tools.verify.report.BY_HAND`): a wheel of the wrong length
(``TimerWheel`` refuses it at load), a timer checkpoint cut short or with a negative offset, a
timerlog file cut short or missing between others, a unit on a live chain that is not a unit,
or one naming a record past the CommitLog's end. A chain that loops, and a live slot whose
``lastPos`` lies past the log's end (whose messages the wheel never delivers), are warnings. A
unit naming a record expiry deleted is no problem: the broker skips it
(``getMessageByCommitOffset`` null).
"""

from __future__ import annotations

import os
from array import array
from typing import TYPE_CHECKING

import numpy as np

from ...errors import CorruptRecordError
from ...format.source import StoreSource
from ...format.timercheck import CHECK_FILE, LAYOUT, read_timercheck
from ...format.timerlog import LOG_DIR, TimerLogReader
from ...format.timerwheel import WHEEL_FILE, live_chain_heads
from .commitlog import Records
from .listing import segment_files
from .report import VerifyResult

if TYPE_CHECKING:
    from ...storeconfig import StoreConfig

#: bytes of a timer checkpoint's fields (``TimerCheckpoint``: a page is mapped, read from 0)
CHECKPOINT_BYTES = LAYOUT.size
#: units that name no record listed one by one; the rest counted
MAX_NAMED = 5
#: what :func:`check_timer_store` says of a store in object storage (its readers are local)
SKIPPED_REMOTE = (
    "timer store: timerwheel, timerlog/ and config/timercheck are checked on a local copy"
)


def check_timer_store(
    root: str, res: VerifyResult, recs: Records, cfg: StoreConfig, source: StoreSource
) -> None:
    """Check the timer store of the store at ``root`` (nothing when it has none), adding
    problems of kind ``timer`` to ``res``; ``recs``: the CommitLog's valid records (the scan
    done), which each unit on a live chain must name (its offset and size), unless expired. A
    store read through a source that is not local is skipped (listed in ``res.skipped``) when
    it holds a timer store."""
    wheel = os.path.join(root, WHEEL_FILE)
    check = os.path.join(root, CHECK_FILE)
    logdir = os.path.join(root, LOG_DIR)
    if not any(source.lexists(p) for p in (wheel, check, logdir)):
        return
    if not source.local:
        res.skipped.append(SKIPPED_REMOTE)
        return
    try:
        ck = read_timercheck(check)
        size = os.path.getsize(check) if os.path.exists(check) else CHECKPOINT_BYTES
    except (CorruptRecordError, OSError) as exc:
        res.add("error", "timer", CHECK_FILE, str(exc))
        return
    if size < CHECKPOINT_BYTES:
        res.add(
            "warning",
            "timer",
            CHECK_FILE,
            f"{size} bytes, a timer checkpoint has {CHECKPOINT_BYTES}: the broker reads the "
            "rest as zeros (TimerCheckpoint maps a page), which moves the timer back",
        )
    if not _check_log_files(logdir, res):
        return
    if not os.path.exists(wheel):
        return
    try:
        heads = live_chain_heads(wheel, ck.last_read_time_ms, cfg.timer_precision_ms)
    except (CorruptRecordError, OSError) as exc:
        res.add("error", "timer", WHEEL_FILE, str(exc))
        return
    problems: list[str] = []
    pos, off, sz = array("q"), array("q"), array("q")
    try:
        with TimerLogReader(logdir) as tl:
            end = tl.files.end_offset if tl.files is not None else 0
            past = [h for h in heads if h >= end]
            if past:
                res.add(
                    "warning",
                    "timer",
                    WHEEL_FILE,
                    f"{len(past)} live slots start past the timerlog's end {end} (the first: "
                    f"lastPos {past[0]}): the wheel delivers none of their timed messages",
                )
            for u in tl.walk_chains([h for h in heads if h < end], problems):
                pos.append(u.pos)
                off.append(u.offset_py)
                sz.append(u.size_py)
    except CorruptRecordError as exc:
        res.add("error", "timer", LOG_DIR, str(exc))
    for problem in problems:
        res.add("warning", "timer", LOG_DIR, f"a live chain stops early: {problem}")
    _check_named_records(res, recs, pos, off, sz)


def _check_named_records(
    res: VerifyResult, recs: Records, pos: array, off: array, sz: array
) -> None:
    """Each unit (timerlog offset ``pos``) must name a valid record: its CommitLog offset the
    start of one, its size that record's (what ``TimerMessageStore.getMessageByCommitOffset``
    reads); one below the CommitLog's first file is expired (a miss, as the broker's)."""
    if not pos:
        return
    p = np.frombuffer(pos, dtype=np.int64)
    o = np.frombuffer(off, dtype=np.int64)
    z = np.frombuffer(sz, dtype=np.int64)
    starts = np.frombuffer(recs.offsets, dtype=np.int64) if recs.offsets else np.zeros(0, np.int64)
    sizes = np.frombuffer(recs.sizes, dtype=np.int32) if recs.sizes else np.zeros(0, np.int32)
    i = np.searchsorted(starts, o)
    found = i < len(starts)
    found[found] = starts[i[found]] == o[found]
    good = found.copy()
    good[found] = sizes[i[found]] == z[found]
    bad = np.flatnonzero(~good & (o >= res.commitlog_min))
    for k in bad[:MAX_NAMED].tolist():
        res.add(
            "error",
            "timer",
            LOG_DIR,
            f"unit at {int(p[k])} names CommitLog {int(o[k])}+{int(z[k])}: no record of that "
            "size starts there",
            int(p[k]),
        )
    if len(bad) > MAX_NAMED:
        res.add("error", "timer", LOG_DIR, f"{len(bad) - MAX_NAMED} more units name no record")


def _check_log_files(logdir: str, res: VerifyResult) -> bool:
    """timerlog/'s files (``MappedFileQueue``: every one preallocated at mappedFileSizeTimerLog):
    each named by its start offset, all of one size (the most common), none missing between
    others; an empty last file is no problem (``doLoad`` deletes it). Returns whether they
    form one log."""
    names = segment_files(logdir)
    if not names:  # no timerlog/ (or an empty one): no units to check
        return True
    sizes = [os.path.getsize(os.path.join(logdir, n)) for n in names]
    if sizes[-1] == 0:  # MappedFileQueue.doLoad deletes an empty last file: no problem
        names, sizes = names[:-1], sizes[:-1]
        if not names:
            return True
    size = max(set(sizes), key=lambda k: (sizes.count(k), k))
    ok = True
    for i, (n, got) in enumerate(zip(names, sizes)):
        if got != size:
            res.add("error", "timer", f"{LOG_DIR}/{n}", f"{got} bytes, the others {size}")
            ok = False
        elif i and int(n) != int(names[i - 1]) + size:
            res.add(
                "error",
                "timer",
                f"{LOG_DIR}/{n}",
                f"a timerlog file is missing before it (expected one at {int(names[i - 1]) + size})",
            )
            ok = False
    return ok
