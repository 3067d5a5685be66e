"""What verify found (:class:`VerifyResult`, its :class:`Problem` lines) and what recover leaves to
the user (:data:`BY_HAND`); whether a path is a store at all (:func:`check_store_dir`).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

from ...errors import StoreError
from ...format.source import LOCAL, StoreSource

MAX_REPORTED_PER_FILE = 5  # problems printed per file and kind; the rest are counted
#: What verify skips for a store source that is not local (a snapshot in object storage),
#: and why: checks of a live store directory that a snapshot has no part of.
SNAPSHOT_SKIPS = (
    "lock: a snapshot in object storage has no writer; no process holds its lock",
    "abort: a snapshot holds no abort file (it is taken as a clean shutdown leaves a store)",
    "links and special files: object storage holds objects only, named by the snapshot's "
    "manifest (checked when it was read)",
)

#: Error kinds :func:`recover_store` refuses to repair (it raises naming the entry and changes
#: nothing), with what the user must do instead. Links and special files: recover never
#: reads or writes through them (``engine.service.storetree``); a gap or a misnamed CommitLog file:
#: the records are not there to rebuild from; config/*.json: offsets and topics are not
#: derived data.
BY_HAND = {
    "unsafe": "symbolic links, special files or directories nested too deep (listed above): "
    "rmqfs recover refuses such a store and never follows them; by hand, replace each link "
    "with the file or directory it points to (or mount the real directory), remove FIFOs, "
    "sockets, devices and the deep directories, then run rmqfs verify again",
    "commitlog-gap": "a CommitLog file is missing between others: rmqfs recover cannot "
    "rebuild it; restore it from a backup (or move the files after the gap "
    "out of commitlog/, losing their records), then run rmqfs verify again",
    "commitlog-oversize": "a CommitLog file larger than the segment size: rmqfs recover "
    "cannot tell which size the broker wrote; when the broker's mappedFileSizeCommitLog is the "
    "larger size, give its broker.conf with --config; else cut the file to the segment size "
    "by hand (truncate -s), then run rmqfs verify again",
    "commitlog-name": "a CommitLog file whose name is not its start offset: rmqfs recover "
    "cannot repair it; rename or remove it by hand, then run rmqfs verify "
    "again",
    "config": "a config/*.json file (and its .bak) cannot be loaded: rmqfs recover does not "
    "rewrite offsets or topics; restore the file from a backup, then run rmqfs "
    "verify again",
    "timer": "the timer store (timerwheel, timerlog/, config/timercheck) is damaged: rmqfs "
    "recover does not rebuild it; restore the three from a backup, or move all three out of "
    "the store, and the broker enqueues rmq_sys_wheel_timer's messages again from its "
    "ConsumeQueue (a timed message already delivered may be delivered again); then run rmqfs "
    "verify again",
}


class NotAStoreError(StoreError):
    """The path is not a store directory (missing, not a directory, or no store files)."""

    errno = errno.ENOENT


@dataclass
class Problem:
    """One finding: ``severity`` "error" or "warning", the file (relative to the store root),
    the absolute offset in that file sequence when it applies (bytes for the CommitLog, queue
    offset for a ConsumeQueue, item number for an IndexFile), and what is wrong."""

    severity: str
    kind: str
    path: str
    what: str
    offset: int | None = None

    def __str__(self) -> str:
        where = self.path if self.offset is None else f"{self.path} @ {self.offset}"
        return f"{self.severity.upper():7} {where}: {self.what}"


@dataclass
class VerifyResult:
    """What :func:`verify_store` found.

    ``commitlog_min``/``commitlog_end`` are bytes: the first segment's start and the end of the
    last valid record reachable from it; ``first_bad`` is where the broker's recovery would cut
    the CommitLog (None when nothing is wrong with it). ``lock_holder`` is the pid of a running
    process holding the store's lock, if any.
    """

    root: str
    problems: list[Problem] = field(default_factory=list)
    suppressed: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    _shown: dict = field(default_factory=dict, repr=False)
    segment_size: int = 0
    segments: int = 0
    records: int = 0
    commitlog_min: int = 0
    commitlog_end: int = 0
    first_bad: int | None = None
    records_after_bad: int = 0
    data_after_bad: bool = False  # non-zero bytes past the damage that are not records
    last_store_timestamp: int = 0  # of the last record before first_bad (epoch ms)
    first_store_timestamp: int = 0  # of the first record (epoch ms)
    explicit_config: bool = False  # segment size from a broker.conf, not only from the files
    queues: int = 0
    units: int = 0
    index_files: int = 0
    index_items: int = 0
    lock_holder: int | None = None
    skipped: list[str] = field(default_factory=list)  # checks not made, each with why
    bad_queues: set = field(default_factory=set)  # consumequeue/<topic>/<qid> paths
    bad_index_files: set = field(default_factory=set)  # index/<name> paths
    bad_segment_sizes: dict = field(default_factory=dict)  # path -> size
    past_end: dict = field(default_factory=dict)  # queue/index rel -> [file, first, count]
    empty_files: list = field(default_factory=list)  # paths of 0-byte last segments
    cq_file_size: int = 0  # the store's ConsumeQueue file size (bytes), 0 when unknown

    @property
    def errors(self) -> list[Problem]:
        """The problems of severity "error"."""
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        """The problems of severity "warning"."""
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when there is no error (warnings allowed)."""
        return self.count("error") == 0

    def add(
        self, severity: str, kind: str, path: str, what: str, offset: int | None = None
    ) -> None:
        """Record a problem; past :data:`MAX_REPORTED_PER_FILE` per (path, kind) only count it."""
        key = (path, kind)
        shown = self._shown.get(key, 0)
        self._shown[key] = shown + 1
        if shown >= MAX_REPORTED_PER_FILE:
            self.suppressed[key] = (severity, self.suppressed.get(key, (severity, 0))[1] + 1)
            return
        self.problems.append(Problem(severity, kind, path, what, offset))

    def by_hand(self) -> list[str]:
        """What the user must do by hand for the errors :func:`recover_store` refuses to
        repair (:data:`BY_HAND`, one line per kind found); [] when ``rmqfs recover`` can
        repair every error. verify's advice therefore matches what recover will do."""
        kinds = {p.kind for p in self.errors} | {
            k for (_, k), (sev, _) in self.suppressed.items() if sev == "error"
        }
        return [BY_HAND[k] for k in BY_HAND if k in kinds]

    def count(self, severity: str) -> int:
        """Problems of ``severity``, those not listed included."""
        return sum(1 for p in self.problems if p.severity == severity) + sum(
            n for sev, n in self.suppressed.values() if sev == severity
        )


def check_store_dir(root: str, source: StoreSource = LOCAL) -> None:
    """Raise NotAStoreError unless ``root`` is a directory holding store files (listed
    through ``source``)."""
    if not (os.path.exists(root) if source.local else source.lexists(root)):
        raise NotAStoreError(f"{root}: no such store directory")
    if not source.isdir(root):
        raise NotAStoreError(f"{root}: not a directory")
    names = set(source.listdir(root))
    if not names & {"commitlog", "consumequeue", "index", "config", "checkpoint", "lock"}:
        raise NotAStoreError(
            f"{root}: not a RocketMQ store (no commitlog/, consumequeue/, "
            "index/, config/ or checkpoint)"
        )
