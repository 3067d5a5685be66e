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
from typing import TYPE_CHECKING

import numpy as np

from ...errors import CorruptRecordError
from ...format.mappedfile import segment_names
from ...format.source import StoreSource
from ...format.timercheck import CHECK_FILE, read_timercheck
from ...format.timerlog import LOG_DIR, TimerLogReader
from ...format.timerwheel import WHEEL_FILE, read_live_slots
from .report import VerifyResult

if TYPE_CHECKING:
    from ...storeconfig import StoreConfig

#: what :func:`check_timer_store` says of a store in object storage (its readers are local)
SKIPPED_REMOTE = (
    "timer store: timerwheel, timerlog/ and config/timercheck are checked on a local copy"
)


def check_timer_store(root: str, res: VerifyResult, cfg: StoreConfig, source: StoreSource) -> None:
    """Check the timer store of the store at ``root`` (nothing when it has none), adding
    problems of kind ``timer`` to ``res``; ``res.commitlog_end`` must be set (the CommitLog
    scanned). A store read through a source that is not local is skipped (listed in
    ``res.skipped``) when it holds a timer store."""
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
    except (CorruptRecordError, OSError) as exc:
        res.add("error", "timer", CHECK_FILE, str(exc))
        return
    if not _check_log_files(logdir, res):
        return
    if not os.path.exists(wheel):
        return
    try:
        slots = read_live_slots(wheel, ck.last_read_time_ms, cfg.timer_precision_ms)
    except (CorruptRecordError, OSError) as exc:
        res.add("error", "timer", WHEEL_FILE, str(exc))
        return
    heads = np.unique(slots["lastPos"]).tolist()
    problems: list[str] = []
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
            for u in tl.walk_chains(reversed([h for h in heads if h < end]), problems):
                if u.offset_py + u.size_py > res.commitlog_end:
                    res.add(
                        "error",
                        "timer",
                        LOG_DIR,
                        f"unit at {u.pos} names CommitLog {u.offset_py}+{u.size_py}, past the "
                        f"CommitLog's end {res.commitlog_end}",
                        u.pos,
                    )
    except CorruptRecordError as exc:
        res.add("error", "timer", LOG_DIR, str(exc))
    for problem in problems:
        res.add("warning", "timer", LOG_DIR, f"a live chain stops early: {problem}")


def _check_log_files(logdir: str, res: VerifyResult) -> bool:
    """timerlog/'s files (``MappedFileQueue``: every one preallocated at mappedFileSizeTimerLog):
    each named by its start offset, all of one size (the most common), none missing between
    others. Returns whether they form one log."""
    try:
        names = segment_names(logdir)
    except OSError:
        return True  # no timerlog/: no units to check
    if not names:
        return True
    sizes = [os.path.getsize(os.path.join(logdir, n)) for n in names]
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
