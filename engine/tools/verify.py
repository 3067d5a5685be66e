"""Offline verification and repair of a store directory (``rmqfs verify`` / ``rmqfs recover``).

:func:`verify_store` reads the files themselves, read-only and without the store's recovery (which
would hide damage), and checks:

* CommitLog: every segment has the same size, aligned names and no gaps; every record decodes
  (magic, TOTALSIZE = ``calMsgLength``, PHYSICALOFFSET = its position, BODYCRC, and the
  ``__CRC32#`` whole-record CRC when the property is present, ``MessageDecoder.createCrc32``: all
  checked by ``engine.format.message.decode_record``); blank END_OF_FILE records; nothing but zeros
  after the last record; no hole followed by data.
* ConsumeQueue: uniform file sizes; every unit points at a real record with the same
  size, topic, queueId, queueOffset and tagsCode (deliver time for ``SCHEDULE_TOPIC_XXXX``);
  nothing after the last unit; units past the CommitLog end.
* IndexFile: geometry, header counts and offsets, every slot and item chain in range,
  every item points at a record carrying a key with that hash, and the item's timeDiff.
* config/*.json parse.

Every read goes through a store source (:mod:`engine.format.source`): the local filesystem
(:data:`engine.format.source.LOCAL`: CommitLog files memory-mapped, as before), or a snapshot in
object storage read in place (``engine.live.objectsource.ObjectSource``): listings and sizes
from its manifest, the CommitLog in range reads of :data:`RANGE` bytes (never a whole segment
in memory), a ConsumeQueue file, an IndexFile's parts, the config files and the checkpoint
each read whole. What makes no sense for a snapshot (its lock, its ``abort`` file, links and
special files) is skipped and said so (:attr:`VerifyResult.skipped`).

Lag (records the ConsumeQueues or IndexFiles do not cover yet) is a *warning*: the store
re-dispatches it on open, as the broker's ReputMessageService does. Everything else is an *error*.

:func:`recover_store` repairs what :func:`verify_store` finds: it extends a cut segment, truncates
the CommitLog at the first invalid record (saving any valid data it drops under
``lost+found/``), deletes damaged ConsumeQueue and IndexFile files, and lets the store re-dispatch
them from the CommitLog (``CommitLog.recoverAbnormally``); when that is not enough it rebuilds every
derived file.
"""

from __future__ import annotations

import bisect
import dataclasses
import errno
import os
import shutil
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigFileError, CorruptRecordError, StoreError
from ..format.batchcq import BATCH_CQ_DIR, BatchConsumeQueue
from ..format.commitlog import RECORD_HEAD, CommitLog, Step, claim_problem, walk_segment
from ..format.config import config_parsers, load_config_file, load_config_file_only
from ..format.consumequeue import (
    BLANK_UNIT_SIZE,
    CQ_STORE_UNIT_SIZE,
    UNIT,
    deliver_tags_code,
    queue_dir_id,
    store_file_size,
)
from ..format.dledger import DIR_PREFIX, HEADER_SIZE, DLedgerLog, commitlog_dir, open_dledger
from ..format.indexfile import (
    HEADER,
    INDEX_FILE_NAME,
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    ITEM,
    SLOT,
    build_key,
    index_geometry,
)
from ..format.javahash import index_key_hash, tags_code
from ..format.mappedfile import MappedFiles, offset_problem, segment_names
from ..format.message import (
    MAX_MESSAGE_SIZE,
    PROPERTY_DELAY,
    SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_record,
    transaction_type,
)
from ..format.rocksdbcq import RocksDBConsumeQueue, RocksDBConsumeQueues
from ..format.source import LOCAL, StoreSource
from ..service.lock import StoreLock, lock_holder, release_store_lock, take_store_lock
from ..service.storetree import (
    check_layout,
    check_store_tree,
    foreign_layouts,
    remove_tree,
    rocksdb_consume_queue,
    unsafe_entries,
    walk_tree,
)
from ..service.workprogress import no_progress

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..format.message import MessageRecord
    from ..service.workprogress import ProgressFactory
    from ..store import MessageStore
    from ..storeconfig import StoreConfig

MAX_REPORTED_PER_FILE = 5  # problems printed per file and kind; the rest are counted
#: Bytes of a CommitLog file read at once from a source that is not local (one range read;
#: a record longer than this is read whole, in one read of its own)
RANGE = 16 << 20
#: What verify skips for a store source that is not local (a snapshot in object storage),
#: and why: checks of a live store directory that a snapshot has no part of.
SNAPSHOT_SKIPS = (
    "lock: a snapshot in object storage has no writer; no process holds its lock",
    "abort: a snapshot holds no abort file (it is taken as a clean shutdown leaves a store)",
    "links and special files: object storage holds objects only, named by the snapshot's "
    "manifest (checked when it was read)",
)
CONFIG_FILES = (
    "topics.json",
    "consumerOffset.json",
    "subscriptionGroup.json",
    "delayOffset.json",
    "rmqfs.deletedTopics.json",
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
    "commitlog-name": "a CommitLog file whose name is not its start offset: rmqfs recover "
    "cannot repair it; rename or remove it by hand, then run rmqfs verify "
    "again",
    "config": "a config/*.json file (and its .bak) cannot be loaded: rmqfs recover does not "
    "rewrite offsets or topics; restore the file from a backup, then run rmqfs "
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


class _Window:
    """The one buffer of CommitLog bytes verify holds when it reads a source that is not local:
    the last range read (at least :data:`RANGE` bytes, or a whole record longer than that),
    shared by every file, so memory stays at one range whatever the number of files."""

    def __init__(self, source: StoreSource) -> None:
        self.source = source
        self.path = ""
        self.base = 0  # file position of buf[0]
        self.buf = b""
        self.short = False  # the read gave less than asked: the file ends there

    def read(self, path: str, pos: int, need: int, size: int) -> tuple[bytes, int]:
        """``(buffer, base)`` holding ``[pos, pos + need)`` of the ``size``-byte file ``path``
        (clipped to its end) unless it ended sooner: ``buffer[x - base]`` is the byte at ``x``.

        Raises:
            OSError; ObjectStoreError: the range could not be read.
        """
        stop = min(pos + need, size)
        if path == self.path and self.base <= pos and stop <= self.base + len(self.buf):
            return self.buf, self.base
        n = min(max(need, RANGE), size - pos)
        self.buf = b""  # the old range goes before the new one comes
        self.buf = self.source.pread(path, n, pos)
        self.path, self.base, self.short = path, pos, len(self.buf) < n
        return self.buf, pos


@dataclass
class _Segment:
    """One CommitLog file as verify lists it (every regular file with a segment name, even
    misnamed or mis-sized ones, which the readers skip or cannot address); its bytes are read
    through the engine's reader, ``files`` (:class:`engine.format.mappedfile.MappedFiles`):
    ``map`` the whole file mapped (a local source), else ``window`` reads it by range."""

    start: int
    name: str
    path: str
    size: int
    files: MappedFiles
    map: Any = None
    window: _Window | None = None

    @property
    def readable(self) -> bool:
        """Whether its bytes can be read (a local file mapped, or a source read by range)."""
        return self.map is not None or self.window is not None

    def bytes_at(self, pos: int, need: int) -> tuple[Any, int]:
        """``(buffer, base)`` holding the file's bytes ``[pos, pos + need)`` (clipped to its
        end): the whole mapping (base 0), or a range read (:class:`_Window`). Raises as
        :meth:`_Window.read`."""
        if self.map is not None or self.window is None:
            return self.map, 0
        return self.window.read(self.path, pos, need, self.size)

    def walk(self) -> Iterator[tuple[Step, Any, int]]:
        """:func:`engine.format.commitlog.walk_segment` over the whole file, whatever the
        source: ``(step, buffer, base)`` with the step's position in the file and the buffer
        holding its bytes (``buffer[x - base]``). A range's last record, cut by its end, is
        read again whole from its start with what follows (nothing carried), unless it claims
        more than maxMessageSize + 64 KiB (:func:`engine.format.commitlog.claim_problem`: then
        it is the ``past_end`` step it is, never read)."""
        if not self.size or not self.readable:
            return  # an empty file: nothing to walk
        pos = 0
        need = RECORD_HEAD.size
        while True:
            buf, base = self.bytes_at(pos, need)
            end = self.size if self.map is not None else base + len(buf)
            cut = end < self.size and not (self.window is not None and self.window.short)
            for step in walk_segment(buf, end - base, pos - base):
                at = base + step.pos
                if (
                    cut
                    and step.kind in ("torn", "past_end")
                    # a claim past what a broker writes is not read whole (a damaged header)
                    and claim_problem(MAX_MESSAGE_SIZE, -1, 0, at, step.total) is None
                ):
                    need = max(step.total, RECORD_HEAD.size)  # again, from it, whole
                    pos = at
                    break
                yield Step(step.kind, at, step.total, step.magic), buf, base
                if step.kind != "record":
                    return
                pos = at + step.total
            else:
                if not cut:
                    return
                need = RECORD_HEAD.size  # the records ended with the range: the next one


def _majority_size(sizes: list[int]) -> int:
    counts: dict[int, int] = {}
    for s in sizes:
        counts[s] = counts.get(s, 0) + 1
    return max(counts, key=lambda s: (counts[s], s))


class _Records:
    """The valid records of the CommitLog, compactly (arrays), for the derived-file checks."""

    def __init__(self) -> None:
        self.offsets = array("q")
        self.sizes = array("i")
        self.nkeys = array("b")
        self.last_keyed = -1  # offset of the last record with index keys
        self.queues: dict[tuple[str, int], tuple[array, array, array, array]] = {}


def verify_store(
    root: str,
    config: StoreConfig | None = None,
    progress: ProgressFactory | None = None,
    check_index: bool = True,
    source: StoreSource = LOCAL,
) -> VerifyResult:
    """Verify every file of the store at ``root`` without writing anything (what the broker's
    recovery checks, ``CommitLog.checkMessageAndReturnSize``, ``ConsumeQueue.recover``,
    ``IndexFile.load``, without its repairs).

    Args:
        root: the store directory (for a source that is not local, its
            :attr:`engine.format.source.StoreSource.root`).
        config: a :class:`engine.store.StoreConfig` (segment sizes for a new file, index
            geometry, delay levels); default settings when None.
        progress: a progress factory, ``progress(total, desc, unit) -> bar``
            (:mod:`engine.service.workprogress`; tqdm's shape): one bar per phase (CommitLog bytes,
            ConsumeQueue queues, IndexFile files).
        check_index: check the IndexFiles too.
        source: where every file is read from (:mod:`engine.format.source`): the local
            filesystem, or a snapshot in object storage read in place (CommitLog files in
            ranges of :data:`RANGE` bytes); for the latter, the checks of a live directory
            (lock, ``abort``, links) are skipped and listed in :attr:`VerifyResult.skipped`.

    Returns:
        A :class:`VerifyResult`.

    Raises:
        NotAStoreError: ``root`` is not a store.
        ObjectStoreError: object storage could not be read (names the object); a file whose
            sum differs from its manifest's raises CorruptRecordError naming it.
    """
    from ..store import StoreConfig

    if source.local:
        root = os.path.abspath(root)
    check_store_dir(root, source)
    cfg = config or StoreConfig()
    progress = progress or no_progress
    res = VerifyResult(root)
    res.explicit_config = config is not None
    if not source.local:
        res.skipped.extend(SNAPSHOT_SKIPS)
    bad = unsafe_entries(root) if source.local else []
    if bad:
        # Nothing is read through a link or from a special file: the store is refused whole.
        for entry in bad:
            res.add(
                "error",
                "unsafe",
                entry.split(" (")[0],
                f"{entry}: a store holds only regular files and directories; rmqfs refuses "
                "to open it until this is removed",
            )
        return res
    unreadable = False
    for f in foreign_layouts(root, source):
        if f.refuses_read:
            unreadable = True
            res.add(
                "error",
                "layout",
                f.path,
                f"{f.what}: rmqfs cannot read this store yet (and never writes it)",
            )
        elif f.path.startswith(DIR_PREFIX):
            pass  # a DLedger CommitLog: read below, entry by entry
        elif f.refuses_write:
            res.add(
                "warning",
                "layout",
                f.path,
                f"{f.what}: rmqfs reads it but refuses to write this store (the broker "
                "would misread what it appends)"
                if f.what.startswith("RocksDB")
                else f"{f.what}: rmqfs reads the plain layout beside it but refuses to write "
                "this store (the broker would misread what it appends)",
            )
    if unreadable:
        return res
    res.lock_holder = lock_holder(root, others_only=True) if source.local else None
    if source.local and res.lock_holder is None and source.lexists(os.path.join(root, "abort")):
        res.add(
            "warning",
            "abort",
            "abort",
            "the store was not shut down cleanly (a broker or "
            "mount stopped without closing it); opening it runs the broker's abnormal "
            "recovery",
        )
    segs = _check_segments(root, cfg, res, source)
    recs = _Records()
    try:
        dledger = open_dledger(root, source)
        if dledger is None:
            _scan_commitlog(segs, cfg, res, recs, progress)
        else:
            _scan_dledger(dledger, segs, cfg, res, recs, progress)
        _forget_deleted_topics(root, recs, source)
        _check_consume_queues(root, res, recs, cfg, progress, source)
        if check_index and cfg.message_index_enable:
            _check_index(root, segs, res, recs, cfg, progress, source)
        _check_config(root, res, source)
    finally:
        if segs:
            segs[0].files.close()  # one reader for all of them
    return res


# ----------------------------------------------------------------------------------------------
# CommitLog


def _rel(path: str, root: str) -> str:
    """``path`` relative to the store root ``root`` (a local path or a source's root URI)."""
    return path[len(root) + 1 :] if path.startswith(root + "/") else os.path.relpath(path, root)


def _check_segments(
    root: str, cfg: StoreConfig, res: VerifyResult, source: StoreSource
) -> list[_Segment]:
    """List the CommitLog files (through ``source``) and check their sizes and names; each
    comes mapped (a local source) or read by range through one shared :class:`_Window`."""
    cl_dir = commitlog_dir(root, source)  # dledger-<selfId>/data for a DLedger store
    if not source.isdir(cl_dir):
        return []
    cl_rel = _rel(cl_dir, root)
    listed = _segments(cl_dir, source)
    for n in _not_files(cl_dir, listed, source):
        res.add(
            "error",
            "commitlog-name",
            f"{cl_rel}/{n}",
            "not a regular file (RocketMQ refuses to load the CommitLog)",
        )
    names = _files(cl_dir, listed, source)
    files = MappedFiles(cl_dir, source=source)
    window = None if source.local else _Window(source)
    segs = [
        _Segment(
            int(n),
            n,
            os.path.join(cl_dir, n),
            source.file_size(os.path.join(cl_dir, n)),
            files,
            window=window,
        )
        for n in names
    ]
    if segs and segs[-1].size == 0:
        res.add(
            "error",
            "commitlog-size",
            f"{cl_rel}/{segs[-1].name}",
            "empty last file (a crash while creating it; RocketMQ 4.x refuses to load "
            "the CommitLog: length not matched)",
        )
        res.empty_files.append(segs[-1].path)
        segs.pop()
    if not segs:
        return []
    sizes = [s.size for s in segs]
    if len(segs) == 1:
        # One file: its own size, unless a broker.conf says otherwise (or the name proves it).
        file_size = segs[0].size
        if res.explicit_config or (
            segs[0].start % file_size and cfg.mapped_file_size_commit_log > file_size
        ):
            file_size = cfg.mapped_file_size_commit_log
    else:
        file_size = _majority_size(sizes)
    res.segment_size = file_size
    res.segments = len(segs)
    res.commitlog_min = segs[0].start
    for i, s in enumerate(segs):
        rel = f"{cl_rel}/{s.name}"
        if s.size != file_size:
            res.bad_segment_sizes[s.path] = s.size
            expected = (
                f"the other files are {file_size} bytes"
                if len(segs) > 1
                else f"mappedFileSizeCommitLog is {file_size} bytes"
            )
            res.add(
                "error",
                "commitlog-size",
                rel,
                f"{s.size} bytes, {expected}" + (" (cut short)" if s.size < file_size else ""),
            )
        if s.start % file_size:
            res.add(
                "error",
                "commitlog-name",
                rel,
                f"name is not a multiple of the segment size {file_size}",
            )
        past = offset_problem(s.start, file_size)
        if past is not None:
            res.add("error", "commitlog-name", rel, past)
        if i and s.start != segs[i - 1].start + file_size:
            res.add(
                "error",
                "commitlog-gap",
                rel,
                f"starts at {s.start}, expected {segs[i - 1].start + file_size} "
                "(a file is missing)",
            )
    try:
        for s in segs:
            if s.size and source.local:
                s.map = files.file_view(s.start)
    except BaseException:
        files.close()
        raise
    return segs


def _is_zero(seg: _Segment, start: int, end: int) -> bool:
    """Whether ``[start, end)`` of a segment reads as zeros; holes of a sparse file are skipped
    (SEEK_DATA), so a new 1 GiB segment costs nothing. A file read by range is read in
    :data:`RANGE` steps, not kept (a snapshot's zeros past its stored prefix are not fetched)."""
    if seg.map is None:
        if seg.window is None:
            return True
        source = seg.window.source
        p = start
        while p < end:
            data = source.pread(seg.path, min(end - p, RANGE), p)
            if not data:
                break
            if data.strip(b"\0"):
                return False
            p += len(data)
        return True
    step = 1 << 20
    for p, stop in seg.files.data_ranges(seg.start, start, end):
        while p < stop:
            q = min(stop, p + step)
            if bytes(seg.map[p:q]).strip(b"\0"):
                return False
            p = q
    return True


def _scan_commitlog(
    segs: list[_Segment],
    cfg: StoreConfig,
    res: VerifyResult,
    recs: _Records,
    progress: ProgressFactory,
) -> None:
    if not segs:
        return
    file_size = res.segment_size
    delay_table = cfg.delay_level_table()
    bar = progress(sum(s.size for s in segs), "CommitLog", "B")
    ended_at = None  # offset where the data ended (zeros) before the last segment
    reachable = True
    res.commitlog_end = segs[0].start
    in_use = res.lock_holder is not None
    for si, seg in enumerate(segs):
        rel = f"commitlog/{seg.name}"
        pos = 0
        size = seg.size
        is_last = si == len(segs) - 1
        for step, m, base in seg.walk():
            pos, total, magic = step.pos, step.total, step.magic
            if step.kind == "torn":
                if not _is_zero(seg, pos, size):
                    _bad(
                        res,
                        rel,
                        seg.start + pos,
                        "segment ends inside a record header",
                        in_use and is_last,
                    )
                break
            if step.kind == "blank":
                if total != file_size - pos:
                    res.add(
                        "warning",
                        "commitlog-blank",
                        rel,
                        f"END_OF_FILE record declares {total} bytes, {file_size - pos} remain",
                        seg.start + pos,
                    )
                if reachable:
                    res.commitlog_end = seg.start + file_size
                break
            if step.kind == "zeros":
                if not _is_zero(seg, pos, size):
                    res.data_after_bad = res.data_after_bad or res.first_bad is None
                    _bad(
                        res,
                        rel,
                        seg.start + pos,
                        "zeros, then non-zero bytes before the end of the file",
                        in_use and is_last,
                    )
                elif not is_last and reachable:
                    ended_at = seg.start + pos
                break
            if step.kind == "not_record":
                if res.first_bad is None and not _is_zero(seg, pos + 8, size):
                    res.data_after_bad = True
                _bad(
                    res,
                    rel,
                    seg.start + pos,
                    f"no record here (TOTALSIZE {total}, MAGICCODE 0x{magic:08X})",
                    in_use and is_last and _is_zero(seg, pos + 8, size),
                )
                reachable = False
                break
            if step.kind == "past_end":
                _bad(
                    res,
                    rel,
                    seg.start + pos,
                    f"record of {total} bytes runs past the end of its file",
                    in_use and is_last,
                )
                reachable = False
                break
            try:
                rec = decode_record(m, pos - base, check_crc=True, base_offset=seg.start + base)
            except CorruptRecordError as exc:
                msg = str(exc).split(" (at offset")[0]
                _bad(
                    res,
                    rel,
                    seg.start + pos,
                    msg,
                    in_use and is_last and _is_zero(seg, pos + total, size),
                )
                reachable = False
                continue
            if ended_at is not None:
                res.add(
                    "error",
                    "commitlog-hole",
                    rel,
                    f"the data ended with zeros at CommitLog offset {ended_at}, but this "
                    "later file holds records (a broker drops them on recovery)",
                    seg.start + pos,
                )
                if res.first_bad is None:
                    res.first_bad = ended_at
                ended_at = None
                reachable = False
            _add_record(rec, recs, delay_table, reachable)
            res.records += 1
            if res.first_bad is not None and rec.commitlog_offset > res.first_bad:
                res.records_after_bad += 1
            pos += total
            if reachable:
                res.commitlog_end = seg.start + pos
                res.last_store_timestamp = rec.store_timestamp
                if not res.first_store_timestamp:
                    res.first_store_timestamp = rec.store_timestamp
        bar.update(seg.size)
    bar.close()


def _scan_dledger(
    dledger: DLedgerLog,
    segs: list[_Segment],
    cfg: StoreConfig,
    res: VerifyResult,
    recs: _Records,
    progress: ProgressFactory,
) -> None:
    """Check a DLedger CommitLog with the engine's walk (``CommitLog.scan`` with its
    ``entry_problem``): each entry as ``DLedgerMmapFileStore.recover`` checks it (magic, pos,
    size = bodyLen + 48, index + 1, terms never decreasing), each record as for a plain
    CommitLog. The walk ends cleanly at zeros; anything else that ends it is an error. Entries
    past the checkpoint's committedIndex (``index/`` says where the committed one ends,
    ``getCommittedPos``) are not messages yet: a warning. The broker keeps ConsumeQueue units
    up to the last entry written (``dledgerRecoverNormally`` truncates them there), so units
    are checked against every entry."""
    if not segs:
        return
    delay_table = cfg.delay_level_table()
    bar = progress(sum(s.size for s in segs), "CommitLog", "B")
    whole = dataclasses.replace(dledger, committed_index=1 << 62)  # every entry written
    cl = CommitLog(dledger.data_dir, res.segment_size, read_only=True, entries=whole)
    rel = os.path.relpath(dledger.data_dir, res.root)
    unit = dledger.committed_unit()  # (magic, pos, size, index, term) of the committed entry
    # where the committed entries end as every reader takes it: the unit's claim when the
    # entry header there agrees, else the walk's (DLedgerLog.committed_end)
    end = dledger.committed_end()
    committed_end = cl.min_offset if end is None else end
    past = 0
    try:
        for rec in cl.scan(cl.min_offset, check_crc=True):
            _add_record(rec, recs, delay_table, True)
            res.records += 1
            res.last_store_timestamp = rec.store_timestamp
            if not res.first_store_timestamp:
                res.first_store_timestamp = rec.store_timestamp
            past += rec.commitlog_offset >= committed_end
        res.commitlog_end = cl.scan_end
        if cl.scan_error:
            res.first_bad = cl.scan_end
            res.add("error", "commitlog-record", rel, cl.scan_error, cl.scan_end)
        at = -1 if unit is None else bisect.bisect_left(recs.offsets, unit[1] + HEADER_SIZE)
        if unit is not None and not (
            at < len(recs.offsets)
            and recs.offsets[at] == unit[1] + HEADER_SIZE
            and recs.sizes[at] == unit[2] - HEADER_SIZE
        ):
            res.add(
                "error",
                "dledger-index",
                f"{dledger.name}/index",
                f"the committed entry ends at {unit[1] + unit[2]} in index/, where no entry of "
                "data/ ends (DLedgerMmapFileStore.recover rebuilds such an index)",
                unit[1] + unit[2],
            )
        elif unit is not None and unit[1] + unit[2] != committed_end:
            res.add(
                "error",
                "dledger-index",
                f"{dledger.name}/index",
                f"the index/ unit of committedIndex {unit[3]} points at the entry ending at "
                f"{unit[1] + unit[2]}, which is another entry's: entry {unit[3]} ends at "
                f"{committed_end} in data/, and no reader serves what follows it "
                "(DLedgerMmapFileStore.recover rebuilds such an index)",
                unit[1] + unit[2],
            )
        if past:
            res.add(
                "warning",
                "dledger-uncommitted",
                f"{dledger.name}/checkpoint",
                f"{past} entries past committedIndex {dledger.committed_index} (from "
                f"{committed_end}) are not messages yet: no reader serves them",
                committed_end,
            )
    finally:
        cl.close()
    bar.update(sum(s.size for s in segs))
    bar.close()


def _bad(res: VerifyResult, rel: str, offset: int, what: str, in_flight: bool) -> None:
    """A bad record. In a store that is in use, a torn record at the very end is a write in
    progress: a warning."""
    if in_flight:
        res.add(
            "warning",
            "commitlog-tail",
            rel,
            f"{what}; the store is in use (pid {res.lock_holder}): a write in progress?",
            offset,
        )
        return
    res.add("error", "commitlog-record", rel, what, offset)
    if res.first_bad is None:
        res.first_bad = offset


def _add_record(rec: MessageRecord, recs: _Records, delay_table: dict, reachable: bool) -> None:
    recs.offsets.append(rec.commitlog_offset)
    recs.sizes.append(rec.store_size)
    ttype = transaction_type(rec.sys_flag)
    if ttype == TRANSACTION_ROLLBACK_TYPE:
        nkeys = 0
    else:
        nkeys = (rec.uniq_key is not None) + len(rec.keys)
    recs.nkeys.append(min(nkeys, 127))
    if nkeys and reachable:
        recs.last_keyed = rec.commitlog_offset
    if ttype in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
        return
    tc = tags_code(rec.tags)
    if rec.topic == SCHEDULE_TOPIC:
        deliver = deliver_tags_code(
            rec.properties.get(PROPERTY_DELAY), rec.store_timestamp, delay_table
        )
        if deliver is not None:
            tc = deliver
    q = recs.queues.get((rec.topic, rec.queue_id))
    if q is None:
        q = recs.queues[(rec.topic, rec.queue_id)] = (
            array("q"),
            array("q"),
            array("i"),
            array("q"),
        )
    q[0].append(rec.queue_offset)
    q[1].append(rec.commitlog_offset)
    q[2].append(rec.store_size)
    q[3].append(tc)


def _forget_deleted_topics(root: str, recs: _Records, source: StoreSource) -> None:
    """Records of topics deleted by ``rmqfs delete-topic`` (``config/rmqfs.deletedTopics.json``:
    below the CommitLog offset of the deletion) belong to no queue: no ConsumeQueue is
    expected for them (the store never re-dispatches them, :mod:`engine.service.dispatch`)."""
    from ..format.config import DeletedTopics

    try:
        deleted = DeletedTopics(os.path.join(root, "config"), read_only=True, source=source).table
    except CorruptRecordError:
        return  # _check_config reports the file
    for key in [k for k in recs.queues if k[0] in deleted]:
        below = deleted[key[0]]
        q = recs.queues[key]
        i = bisect.bisect_left(q[1], below)
        if i >= len(q[1]):
            del recs.queues[key]
        else:
            recs.queues[key] = (q[0][i:], q[1][i:], q[2][i:], q[3][i:])


def _record_index(recs: _Records, offset: int) -> int | None:
    i = bisect.bisect_left(recs.offsets, offset)
    if i < len(recs.offsets) and recs.offsets[i] == offset:
        return i
    return None


# ----------------------------------------------------------------------------------------------
# ConsumeQueue


def _check_consume_queues(
    root: str,
    res: VerifyResult,
    recs: _Records,
    cfg: StoreConfig,
    progress: ProgressFactory,
    source: StoreSource,
) -> None:
    base = os.path.join(root, "consumequeue")
    if rocksdb_consume_queue(root, source):
        if not source.local:  # a database is opened as local files (engine.format.rocksdb)
            res.skipped.append(
                "consumequeue: RocksDB ConsumeQueues in object storage are not read in place; "
                "download the snapshot (rmqfs snapshot-download) and verify the copy"
            )
            return
        _check_rocksdb_queues(base, res, recs, progress)
        return
    seen = set()
    dirs = []
    if source.isdir(base):
        for topic in sorted(source.listdir(base)):
            tdir = os.path.join(base, topic)
            if not source.isdir(tdir):
                continue
            for q in sorted(source.listdir(tdir), key=lambda x: (not x.isdigit(), x.zfill(12))):
                if queue_dir_id(q) is not None and source.isdir(os.path.join(tdir, q)):
                    dirs.append((topic, int(q), os.path.join(tdir, q)))
                else:
                    res.add(
                        "warning",
                        "cq-stray",
                        f"consumequeue/{topic}/{q}",
                        "not a queue directory (a canonical decimal queue id): rmqfs "
                        "ignores it; other readers may take it for a queue, remove it",
                    )
    res.cq_file_size = _cq_file_size([d[2] for d in dirs], cfg, res.explicit_config, source)
    bar = progress(len(dirs), "ConsumeQueue", "queue")
    for topic, qid, qdir in dirs:
        seen.add((topic, qid))
        rel = f"consumequeue/{topic}/{qid}"
        _check_queue(topic, qid, qdir, rel, res, recs, source)
        if rel in res.past_end:
            frel, first, n = res.past_end[rel]
            end = res.first_bad if res.first_bad is not None else res.commitlog_end
            res.add(
                "error",
                "cq-unit",
                frel,
                f"{n} units from queue offset {first} on point past the end of the "
                f"CommitLog ({end}): the queue is ahead of the CommitLog",
                first,
            )
        bar.update(1)
    bar.close()
    res.queues = len(dirs)
    _check_batch_queues(root, res, recs, seen, source)
    for (topic, qid), units in sorted(recs.queues.items()):
        if (topic, qid) not in seen:
            live = sum(1 for off in units[1] if off >= res.commitlog_min)
            if live:
                res.add(
                    "warning",
                    "cq-lag",
                    f"consumequeue/{topic}/{qid}",
                    f"missing: {live} records of this queue are in the CommitLog "
                    "(re-dispatched when the store is opened for writing)",
                )


def _check_batch_queues(
    root: str, res: VerifyResult, recs: _Records, seen: set, source: StoreSource
) -> None:
    """Check each ``batchconsumequeue/<topic>/<queueId>`` (a BatchCQ topic's,
    :class:`engine.format.batchcq.BatchConsumeQueue`) against the records of its queue: every
    unit names a record of the queue by its commitLogOffset, with its size, tagsCode and
    QUEUEOFFSET as msgBaseOffset (``putBatchMessagePositionInfo``); units go on where the one
    before ends (msgBaseOffset + batchSize), and the records after the last unit are lag. The
    queues are added to ``seen`` (they are no ConsumeQueue's lag)."""
    import numpy as np

    base = os.path.join(root, BATCH_CQ_DIR)
    try:
        topics = sorted(source.listdir(base))
    except OSError:
        return
    for topic in topics:
        tdir = os.path.join(base, topic)
        if not source.isdir(tdir) or (source.local and os.path.islink(tdir)):
            continue
        for name in sorted(source.listdir(tdir)):
            qid = queue_dir_id(name)
            qdir = os.path.join(tdir, name)
            if qid is None or not source.isdir(qdir):
                continue
            rel = f"{BATCH_CQ_DIR}/{topic}/{qid}"
            seen.add((topic, qid))
            res.queues += 1
            try:
                bq = BatchConsumeQueue(qdir, topic, qid, source=source)
            except CorruptRecordError as exc:
                res.add("error", "bcq-file", rel, str(exc).split(" (at offset")[0])
                continue
            try:
                units = bq.units(bq.first_unit, bq.end_unit)
            finally:
                bq.close()
            if bq.damage:
                res.add("error", "bcq-unit", rel, bq.damage)
            q = recs.queues.get((topic, qid))
            if q is None:
                q = (array("q"), array("q"), array("i"), array("q"))
            qoff, roff, rsize, rtags = (np.frombuffer(a, dtype=a.typecode) for a in q)
            uoff = units["off"].astype(np.int64)
            live = uoff >= res.commitlog_min
            i = np.searchsorted(roff, uoff)
            found = (i < len(roff)) & (roff[np.minimum(i, len(roff) - 1)] == uoff)
            if len(roff) == 0:
                found[:] = False
            bad = live & ~found
            if bad.any():
                k = int(np.argmax(bad))
                res.add(
                    "error",
                    "bcq-unit",
                    rel,
                    f"unit {bq.first_unit + k} names CommitLog offset {int(uoff[k])}, where no "
                    "record of this queue starts",
                    int(units["base"][k]),
                )
            j = i[found]
            f = units[found]
            wrong = (rsize[j] != f["size"]) | (rtags[j] != f["tags"]) | (qoff[j] != f["base"])
            if wrong.any():
                k = int(np.argmax(wrong))
                res.add(
                    "error",
                    "bcq-unit",
                    rel,
                    f"the unit of CommitLog offset {int(f['off'][k])} says size "
                    f"{int(f['size'][k])}, tagsCode {int(f['tags'][k])}, msgBaseOffset "
                    f"{int(f['base'][k])}; the record: {int(rsize[j[k]])}, {int(rtags[j[k]])}, "
                    f"{int(qoff[j[k]])}",
                    int(f["base"][k]),
                )
            last = int(uoff[-1]) if len(uoff) else -1
            lag = int(np.count_nonzero(roff > last))
            if lag:
                res.add(
                    "warning",
                    "cq-lag",
                    rel,
                    f"{lag} records of this queue in the CommitLog come after its last unit "
                    "(the broker dispatches them when it starts)",
                )


def _check_rocksdb_queues(
    base: str, res: VerifyResult, recs: _Records, progress: ProgressFactory
) -> None:
    """Each queue of a RocksDB ConsumeQueue (:mod:`engine.format.rocksdbcq`): its units from
    the ``offset`` family's min to max, each checked against its record like a file unit;
    a unit missing inside the range is an error (``rangeQuery`` would stop there)."""
    try:
        db = RocksDBConsumeQueues(base)
    except CorruptRecordError as exc:
        res.add("error", "cq-rocksdb", "consumequeue", str(exc))
        return
    try:
        queues = [(t, q) for t, qids in db.queues().items() for q in qids]
        bar = progress(len(queues), "ConsumeQueue", "queue")
        for topic, qid in queues:
            rel = f"consumequeue/{topic}/{qid}"
            cq = RocksDBConsumeQueue(db, topic, qid)
            q = recs.queues.get((topic, qid))
            try:
                cq.recover()
                if cq.damage is not None:
                    res.add("error", "cq-rocksdb", rel, cq.damage)
                    res.bad_queues.add(rel)
                for qoff, off, size, tc in cq.iter_units(cq.min_offset):
                    res.units += 1
                    _check_unit(topic, qid, qoff, off, size, tc, rel, rel, res, recs, q)
            except CorruptRecordError as exc:
                res.add("error", "cq-rocksdb", rel, str(exc))
                res.bad_queues.add(rel)
            bar.update(1)
        bar.close()
        res.queues = len(queues)
    finally:
        db.close()


def _cq_file_size(qdirs: list[str], cfg: StoreConfig, explicit: bool, source: StoreSource) -> int:
    """The store's ConsumeQueue file size: mappedFileSizeConsumeQueue from a given broker.conf,
    else what the files say (:func:`engine.format.consumequeue.store_file_size`, the rule the store
    opens with) when more than one file tells; 0 when unknown."""
    if explicit:
        return cfg.mapped_file_size_consume_queue
    size, trusted = store_file_size(qdirs, source)
    return size if trusted else 0


def _segments(directory: str, source: StoreSource = LOCAL) -> list[str]:
    """Segment names in a CommitLog or ConsumeQueue directory (``mappedfile.segment_names``),
    sorted; [] when it cannot be listed."""
    try:
        return segment_names(directory, source)
    except OSError:
        return []


def _index_names(directory: str, source: StoreSource = LOCAL) -> list[str]:
    """IndexFile names (17-digit timestamps) in ``directory``, sorted; [] when it cannot be
    listed."""
    try:
        names = source.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if INDEX_FILE_NAME.fullmatch(n))


def _files(directory: str, names: list[str], source: StoreSource) -> list[str]:
    """The ``names`` that are regular files in ``directory``."""
    return [n for n in names if source.isfile(os.path.join(directory, n))]


def _not_files(directory: str, names: list[str], source: StoreSource) -> list[str]:
    """The ``names`` (segment or IndexFile names) that are not regular files in ``directory``
    (a directory, say): a broker refuses them ("length not matched")."""
    return [n for n in names if not source.isfile(os.path.join(directory, n))]


def _check_queue(
    topic: str,
    qid: int,
    qdir: str,
    rel: str,
    res: VerifyResult,
    recs: _Records,
    source: StoreSource,
) -> None:
    """Check one ConsumeQueue directory: its files' sizes and names, then each file (read whole
    through ``source``: a few MB) unit by unit against the records (:func:`_check_unit`)."""
    listed = _segments(qdir, source)
    for n in _not_files(qdir, listed, source):
        res.add(
            "error",
            "cq-name",
            f"{rel}/{n}",
            "not a regular file (RocketMQ refuses to load the queue)",
        )
        res.bad_queues.add(rel)
    names = _files(qdir, listed, source)
    files = [
        (int(n), os.path.join(qdir, n), source.file_size(os.path.join(qdir, n))) for n in names
    ]
    if files and files[-1][2] == 0:
        res.add(
            "error",
            "cq-size",
            f"{rel}/{os.path.basename(files[-1][1])}",
            "empty last file (a crash while creating it; RocketMQ 4.x refuses to load "
            "the queue: length not matched)",
        )
        res.empty_files.append(files[-1][1])
        files.pop()
    q = recs.queues.get((topic, qid))
    if not files:
        live = sum(1 for off in q[1] if off >= res.commitlog_min) if q is not None else 0
        if live:
            res.add(
                "warning",
                "cq-lag",
                rel,
                f"no files: {live} records of this queue are in the CommitLog "
                "(re-dispatched when the store is opened for writing)",
            )
        return
    sizes = {f[2] for f in files}
    if len(sizes) > 1 or any(s % CQ_STORE_UNIT_SIZE for s in sizes):
        res.add(
            "error",
            "cq-size",
            rel,
            f"files of sizes {sorted(sizes)}: all must be equal multiples of 20",
        )
        res.bad_queues.add(rel)
        return
    fsize = sizes.pop()
    if q is not None and len(q[0]):
        # Records of this queue still in the CommitLog but before its first file: a file at
        # the head is missing (expiry deletes ConsumeQueue files only after their records).
        head = files[0][0] // CQ_STORE_UNIT_SIZE
        i = bisect.bisect_left(q[0], head)
        live = i - bisect.bisect_left(q[1], res.commitlog_min, 0, i)
        if live > 0:
            res.add(
                "error",
                "cq-missing",
                rel,
                f"{live} records of queue offsets below {head} are in the CommitLog but "
                "the queue's first file is missing: they cannot be consumed",
            )
            res.bad_queues.add(rel)
    if res.cq_file_size and fsize < res.cq_file_size:
        res.add(
            "error",
            "cq-size",
            rel,
            f"files of {fsize} bytes, short of the {res.cq_file_size}-byte ConsumeQueue "
            "files of this store (cut short; RocketMQ refuses to load the queue)",
        )
        res.bad_queues.add(rel)
        return
    for i, (start, path, _) in enumerate(files):
        if start % fsize or (i and start != files[i - 1][0] + fsize):
            res.add(
                "error",
                "cq-name",
                f"{rel}/{os.path.basename(path)}",
                "file name does not follow the previous file",
            )
            res.bad_queues.add(rel)
            return
    first_real = None
    end_q = None
    for fi, (start, path, _) in enumerate(files):
        data = source.pread(path, fsize, 0)  # the whole file (all are fsize bytes)
        frel = f"{rel}/{os.path.basename(path)}"
        qbase = start // CQ_STORE_UNIT_SIZE
        if end_q is not None:
            if data.strip(b"\0"):
                res.add(
                    "error",
                    "cq-garbage",
                    frel,
                    f"units after the end of the queue (queue offset {end_q})",
                    qbase,
                )
                res.bad_queues.add(rel)
            continue
        for i, (off, size, tc) in enumerate(UNIT.iter_unpack(data)):
            qoff = qbase + i
            if off < 0 or size <= 0:
                end_q = qoff
                if data[(i + 1) * CQ_STORE_UNIT_SIZE :].strip(b"\0") or (off, size, tc) != (
                    0,
                    0,
                    0,
                ):
                    res.add(
                        "error",
                        "cq-garbage",
                        frel,
                        f"invalid unit ({off}, {size}, {tc}) followed by more data",
                        qoff,
                    )
                    res.bad_queues.add(rel)
                break
            if size == BLANK_UNIT_SIZE and off == 0 and first_real is None:
                continue  # fillPreBlank filler
            if first_real is None:
                first_real = qoff
            res.units += 1
            _check_unit(topic, qid, qoff, off, size, tc, frel, rel, res, recs, q)
        else:
            if fi == len(files) - 1:
                end_q = qbase + len(data) // CQ_STORE_UNIT_SIZE
    if end_q is None:
        end_q = files[-1][0] // CQ_STORE_UNIT_SIZE
    # records of this queue past its last unit: lag
    if q is not None and len(q[0]):
        i = bisect.bisect_left(q[0], end_q)
        lag = len(q[0]) - i
        if lag and q[1][i] < res.commitlog_end:
            res.add(
                "warning",
                "cq-lag",
                rel,
                f"{lag} records from queue offset {q[0][i]} (CommitLog offset {q[1][i]}) "
                "have no unit yet (re-dispatched when the store is opened for writing)",
            )


def _check_unit(
    topic: str,
    qid: int,
    qoff: int,
    off: int,
    size: int,
    tc: int,
    frel: str,
    rel: str,
    res: VerifyResult,
    recs: _Records,
    q: tuple[array, array, array, array] | None,
) -> None:
    if off < res.commitlog_min:
        return  # the record expired with its CommitLog file
    end = res.first_bad if res.first_bad is not None else res.commitlog_end
    if off >= end and _record_index(recs, off) is None:
        if res.lock_holder and res.first_bad is None:
            return  # appended by the running writer after the CommitLog was scanned
        past = res.past_end.setdefault(rel, [frel, qoff, 0])
        past[2] += 1
        return
    if q is not None:
        i = bisect.bisect_left(q[0], qoff)
        if i < len(q[0]) and q[0][i] == qoff and q[1][i] == off:
            diffs = []
            if q[2][i] != size:
                diffs.append(f"size {size} != record size {q[2][i]}")
            if q[3][i] != tc:
                diffs.append(f"tagsCode {tc} != {q[3][i]}")
            if diffs:
                res.add(
                    "error",
                    "cq-unit",
                    frel,
                    f"unit at CommitLog offset {off}: " + ", ".join(diffs),
                    qoff,
                )
                res.bad_queues.add(rel)
            return
    j = _record_index(recs, off)
    if j is None:
        what = (
            f"unit ({off}, {size}, {tc}) points at CommitLog offset {off}, where no record starts"
        )
    else:
        what = (
            f"unit ({off}, {size}, {tc}) points at a record that is not {topic}/{qid} "
            f"queue offset {qoff}"
        )
        for (t, qq), arrs in recs.queues.items():
            k = bisect.bisect_left(arrs[1], off)
            if k < len(arrs[1]) and arrs[1][k] == off:
                what = (
                    f"unit ({off}, {size}, {tc}) points at the record of {t}/{qq} queue "
                    f"offset {arrs[0][k]}, not {topic}/{qid} queue offset {qoff}"
                )
                break
    res.add("error", "cq-unit", frel, what, qoff)
    res.bad_queues.add(rel)


# ----------------------------------------------------------------------------------------------
# IndexFile


def _read_record_at(segs: list[_Segment], offset: int) -> MessageRecord | None:
    """Decode the record at a CommitLog offset from the segments (mapped, or read by range:
    an IndexFile's items come in CommitLog order, so one range serves many), or None."""
    for s in segs:
        if s.start <= offset < s.start + s.size and s.readable:
            pos = offset - s.start
            buf, base = s.map, 0
            if buf is None:  # a range: the record whole in it
                buf, base = s.bytes_at(pos, RECORD_HEAD.size)
                if len(buf) - (pos - base) < RECORD_HEAD.size:
                    return None
                total = RECORD_HEAD.unpack_from(buf, pos - base)[0]
                if total > RECORD_HEAD.size:
                    buf, base = s.bytes_at(pos, total)
            try:
                return decode_record(buf, pos - base, check_crc=False)
            except CorruptRecordError:
                return None
    return None


def _check_index(
    root: str,
    segs: list[_Segment],
    res: VerifyResult,
    recs: _Records,
    cfg: StoreConfig,
    progress: ProgressFactory,
    source: StoreSource,
) -> None:
    idx_dir = os.path.join(root, "index")
    names = []
    if source.isdir(idx_dir):
        listed = _index_names(idx_dir, source)
        names = _files(idx_dir, listed, source)
        for odd in _not_files(idx_dir, listed, source):
            res.add("error", "index-size", f"index/{odd}", "not a regular file")
            res.bad_index_files.add(f"index/{odd}")
    bar = progress(len(names), "IndexFile", "file")
    last_indexed = -1
    first_indexed = None
    found = 0
    for name in names:
        rel = f"index/{name}"
        path = os.path.join(idx_dir, name)
        r = _check_index_file(path, rel, segs, res, recs, cfg, source)
        bar.update(1)
        if r is None:
            continue
        lo, hi, n = r
        res.index_files += 1
        if n:
            found += n
            last_indexed = max(last_indexed, hi)
            first_indexed = lo if first_indexed is None else min(first_indexed, lo)
    bar.close()
    if recs.last_keyed > last_indexed and recs.last_keyed >= res.commitlog_min:
        i = bisect.bisect_right(recs.offsets, last_indexed)
        missing = sum(1 for k in recs.nkeys[i:] if k)
        res.add(
            "warning",
            "index-lag",
            "index",
            f"{missing} records with keys after CommitLog offset {max(last_indexed, 0)} are "
            "not indexed yet (re-dispatched when the store is opened for writing)",
        )
    if first_indexed is not None:
        i = bisect.bisect_left(recs.offsets, first_indexed)
        j = bisect.bisect_right(recs.offsets, last_indexed)
        expected = sum(recs.nkeys[i:j])
        if found < expected:
            res.add(
                "warning",
                "index-missing",
                "index",
                f"{expected - found} keys of records in CommitLog [{first_indexed}, "
                f"{last_indexed}] have no index item",
            )


def _read_index_file(
    path: str, rel: str, res: VerifyResult, cfg: StoreConfig, source: StoreSource
) -> tuple[tuple[int, ...], int, bytes, memoryview] | None:
    """One IndexFile's parts read through ``source`` in file order (``IndexFile.load``):
    ``(header fields, slot count, slots' bytes, items' bytes from item 1)``, the item count
    at least 1; None, with the problem added to ``res``, when its size or header make it
    unusable."""
    size = source.file_size(path)
    if size == 0:
        res.add("warning", "index-size", rel, "empty file (deleted on load)")
        return None
    try:
        slots, index_num = index_geometry(size, cfg.max_hash_slot_num, cfg.max_index_num, rel)
    except CorruptRecordError as exc:
        res.add(
            "error",
            "index-size",
            rel,
            f"{exc} (give the broker.conf with its maxHashSlotNum and maxIndexNum: --config)",
        )
        res.bad_index_files.add(rel)
        return None
    header = list(HEADER.unpack(source.pread(path, INDEX_HEADER_SIZE, 0)))
    count = header[5] = max(header[5], 1)
    if count > index_num:
        res.add("error", "index-header", rel, f"indexCount {count} > indexNum {index_num}")
        res.bad_index_files.add(rel)
        return None
    slot_raw = source.pread(path, slots * 4, INDEX_HEADER_SIZE)
    # from the unused item 0 on, so that the reads follow one another (a snapshot's source
    # sums a file whose bytes come in order: engine.live.objectsource)
    items = memoryview(source.pread(path, count * INDEX_SIZE, INDEX_HEADER_SIZE + slots * 4))
    if len(items) - INDEX_SIZE != (count - 1) * INDEX_SIZE:
        res.add("error", "index-size", rel, "file shorter than its item count")
        res.bad_index_files.add(rel)
        return None
    return tuple(header), slots, slot_raw, items[INDEX_SIZE:]


def _check_index_file(
    path: str,
    rel: str,
    segs: list[_Segment],
    res: VerifyResult,
    recs: _Records,
    cfg: StoreConfig,
    source: StoreSource,
) -> tuple[int, int, int] | None:
    """Check one IndexFile (its header, slots and items read through ``source``, in file
    order: :func:`_read_index_file`); returns (first phy, last phy, valid items) or None if
    unusable."""
    parts = _read_index_file(path, rel, res, cfg, source)
    if parts is None:
        return None
    (b_ts, _e_ts, b_phy, e_phy, slot_count, count), slots, slot_raw, items_raw = parts
    bad = False

    def err(what: str, n: int | None = None) -> None:
        nonlocal bad
        bad = True
        res.add("error", "index-item" if n is not None else "index-header", rel, what, n)

    items = list(ITEM.iter_unpack(items_raw))
    past_end, past_count = None, 0
    cached: tuple[int, Any, set[int]] = (
        -1,
        None,
        set(),
    )  # (phyOffset, record, key hashes) of the last item's record
    bucket_newest: dict[int, int] = {}
    valid = 0
    end = res.first_bad if res.first_bad is not None else res.commitlog_end
    for n, (h, phy, tdiff, prev) in enumerate(items, start=1):
        res.index_items += 1
        bucket = h % slots
        bucket_newest[bucket] = n
        if h < 0:
            err(f"item {n}: negative keyHash {h}", n)
            continue
        if prev < 0 or prev >= n:
            err(f"item {n}: prevIndex {prev} does not point at an older item", n)
        elif prev and items[prev - 1][0] % slots != bucket:
            err(f"item {n}: prevIndex {prev} is in another hash bucket", n)
        if tdiff < 0:
            err(f"item {n}: negative timeDiff {tdiff}", n)
            continue
        if phy < res.commitlog_min:
            valid += 1
            continue  # the record expired; the file goes once all its records have
        i = _record_index(recs, phy)
        if i is None:
            if phy >= end:
                if not (res.lock_holder and res.first_bad is None):  # else: newer than the scan
                    past_end = past_end or (n, phy)
                    past_count += 1
            else:
                err(f"item {n}: phyOffset {phy} is not the start of a record", n)
            continue
        if cached[0] != phy:
            rec = _read_record_at(segs, phy)
            hashes = set()
            if rec is not None:
                if rec.uniq_key is not None:
                    hashes.add(index_key_hash(build_key(rec.topic, rec.uniq_key)))
                for k in rec.keys:
                    hashes.add(index_key_hash(build_key(rec.topic, k)))
            cached = (phy, rec, hashes)
        _, rec, hashes = cached
        if rec is None:
            err(f"item {n}: the record at {phy} does not decode", n)
            continue
        if h not in hashes:
            err(
                f"item {n}: keyHash {h} is not the hash of a key of the record at {phy} "
                f"(topic {rec.topic}, keys {rec.keys}, UNIQ_KEY {rec.uniq_key})",
                n,
            )
            continue
        if n > 1 and b_ts > 0 and rec.store_timestamp >= b_ts:
            expect = (rec.store_timestamp - b_ts) // 1000
            if tdiff != min(expect, 2**31 - 1):
                err(
                    f"item {n}: timeDiff {tdiff} s, the record was stored {expect} s after "
                    "the file's beginTimestamp",
                    n,
                )
                continue
        valid += 1
    if past_end:
        res.add(
            "error",
            "index-item",
            rel,
            f"{past_count} items from item {past_end[0]} on point past the end of the "
            f"CommitLog ({end}): the index is ahead of the CommitLog",
            past_end[0],
        )
    used_slots = _nonzero_slots(slot_raw)
    for s, v in used_slots:
        if v < 0 or v >= count:
            err(f"hash slot {s} points at item {v}, outside [1, {count})")
        elif items[v - 1][0] % slots != s:
            err(f"hash slot {s} points at item {v} of another bucket")
        elif bucket_newest.get(s) != v:
            err(
                f"hash slot {s} points at item {v}, but item {bucket_newest.get(s)} is the "
                "newest of its bucket (items unreachable)"
            )
    missing_slots = set(bucket_newest) - {s for s, _ in used_slots}
    if missing_slots:
        err(
            f"{len(missing_slots)} hash buckets with items have an empty slot "
            f"(e.g. slot {min(missing_slots)})"
        )
    used = len(used_slots)
    if used != slot_count:
        err(f"hashSlotCount {slot_count} but {used} slots are in use")
    if items:
        if e_phy != items[-1][1]:
            err(f"endPhyOffset {e_phy} != the last item's phyOffset {items[-1][1]}")
        if b_phy != items[0][1]:
            err(f"beginPhyOffset {b_phy} != the first item's phyOffset {items[0][1]}")
    if bad:
        res.bad_index_files.add(rel)
    if not items:
        return (e_phy, e_phy, 0)
    return (items[0][1], items[-1][1], valid)


def _nonzero_slots(raw: bytes, chunk: int = 4096) -> list[tuple[int, int]]:
    """``[(slot, value)]`` of the non-zero 4-byte slots; all-zero chunks are skipped in C."""
    out = []
    zero = bytes(chunk)
    for base in range(0, len(raw), chunk):
        part = raw[base : base + chunk]
        if part == zero[: len(part)]:
            continue
        for i, (v,) in enumerate(SLOT.iter_unpack(part)):
            if v:
                out.append((base // 4 + i, v))
    return out


# ----------------------------------------------------------------------------------------------
# config


def _check_config(root: str, res: VerifyResult, source: StoreSource) -> None:
    """The checkpoint (``StoreCheckpoint``) and each ``config/*.json`` (``ConfigManager.load``)
    read through ``source``: each must load; a file that loads only from its ``.bak`` is a
    warning."""
    from ..format.checkpoint import StoreCheckpoint

    try:
        cp = StoreCheckpoint.read(os.path.join(root, "checkpoint"), source)
    except CorruptRecordError as exc:
        res.add("error", "checkpoint", "checkpoint", str(exc))
    else:
        for severity, what in cp.problems(
            res.first_store_timestamp,
            res.last_store_timestamp,
            int(time.time() * 1000),
            live=res.lock_holder is not None,
        ):
            res.add(
                severity,
                "checkpoint",
                "checkpoint",
                f"{what}: damaged (rmqfs recover rewrites it from the CommitLog's last record)"
                if severity == "error"
                else f"{what}: damaged (recovery after a crash scans more of the CommitLog; "
                "rmqfs recover rewrites it)",
            )
    parsers = config_parsers()
    for name in CONFIG_FILES:
        path = os.path.join(root, "config", name)
        if not source.lexists(path) and not source.lexists(path + ".bak"):
            continue
        try:
            load_config_file(path, parsers[name], source)
        except CorruptRecordError as exc:
            res.add("error", "config", f"config/{name}", f"cannot be loaded: {exc}")
            continue
        if source.lexists(path) and source.lexists(path + ".bak"):
            # The file itself must load; when only its .bak does, say so (the broker and
            # rmqfs load the .bak, so this is a warning, and the next write replaces the file).
            try:
                load_config_file_only(path, parsers[name], source)
            except CorruptRecordError as exc:
                res.add(
                    "warning", "config", f"config/{name}", f"{exc}; {name}.bak is loaded instead"
                )


# ----------------------------------------------------------------------------------------------
# recover


@dataclass
class RecoverReport:
    """What :func:`recover_store` did, as human-readable lines, and the final verification."""

    actions: list[str] = field(default_factory=list)
    before: VerifyResult | None = None
    after: VerifyResult | None = None


def recover_store(
    root: str,
    config: StoreConfig | None = None,
    progress: ProgressFactory | None = None,
    rebuild: bool = False,
) -> RecoverReport:
    """Repair the store at ``root`` so that :func:`verify_store` passes.

    ``progress``: a progress factory (:mod:`engine.service.workprogress`) for the verifications and
    the store's recovery.

    Steps: extend CommitLog files that were cut short (zeros); truncate the CommitLog at the
    first invalid record, like the broker's recovery (valid records after it are copied to
    ``lost+found/<time>/`` first); delete ConsumeQueues and IndexFiles with errors (all of them
    with ``rebuild``); open the store, whose recovery re-dispatches what the derived files lack;
    verify; if errors or lag remain, rebuild every derived file and verify again.

    Raises:
        StoreLockedError: a broker or mount holds the store (names its pid).
        NotAStoreError: ``root`` is not a store.
        StoreError: a damage this cannot repair (e.g. a CommitLog file missing in the middle).
    """
    from ..store import MessageStore, StoreConfig

    root = os.path.abspath(root)
    check_store_dir(root)
    cfg = config or StoreConfig()
    report = RecoverReport()
    check_store_tree(root)  # links and special files: refused, never repaired through
    check_layout(root, read_only=False)  # a layout rmqfs does not write: never repaired
    lock = take_store_lock(root)
    try:
        before = verify_store(root, config, progress)
        report.before = before
        if not before.problems and not before.suppressed and not rebuild:
            report.actions.append("nothing to repair")
            report.after = before
            return report
        for p in before.errors:  # the kinds of BY_HAND (unsafe ones are refused above)
            if p.kind in ("commitlog-gap", "commitlog-name"):
                raise StoreError(f"cannot repair {p.path}: {p.what}")
            if p.kind == "config":
                # offsets and topics are not derived data: nothing is changed, the operator
                # restores the file (or its .bak)
                raise ConfigFileError(f"cannot repair {p.path}: {p.what}")
        for path, size in sorted(before.bad_segment_sizes.items()):
            if size > before.segment_size:
                raise StoreError(
                    f"cannot repair {path}: {size} bytes, larger than the "
                    f"{before.segment_size}-byte segments"
                )
            with open(path, "r+b") as f:
                f.truncate(before.segment_size)
            report.actions.append(
                f"extended {os.path.relpath(path, root)} from {size} to "
                f"{before.segment_size} bytes with zeros"
            )
        for path in before.empty_files:
            os.unlink(path)
            report.actions.append(
                f"deleted {os.path.relpath(path, root)} (empty: a crash while it was created)"
            )
        if before.bad_segment_sizes or before.empty_files:
            before = verify_store(root, config, progress)
        saved_checkpoint = None
        try:
            with open(os.path.join(root, "checkpoint"), "rb") as f:
                saved_checkpoint = f.read()
        except FileNotFoundError:
            pass
        cut = before.first_bad
        if cut is not None:
            _truncate_commitlog(root, before, cut, report)
        derived = list(before.bad_queues)
        if rebuild:
            derived = _all_queue_dirs(root)
        for rel in sorted(derived):
            _delete_files(os.path.join(root, rel), _segments(os.path.join(root, rel)))
            report.actions.append(f"deleted {rel} (rebuilt from the CommitLog)")
        index_dir = os.path.join(root, "index")
        bad_index = sorted(before.bad_index_files)
        if rebuild:
            bad_index = [f"index/{n}" for n in _index_names(index_dir)]
        if bad_index:
            first_bad = min(os.path.basename(r) for r in bad_index)
            for n in _index_names(index_dir):
                if n >= first_bad:
                    victim = os.path.join(index_dir, n)
                    remove_tree(victim)
                    report.actions.append(f"deleted index/{n} (rebuilt from the CommitLog)")
        _force_full_redispatch(root)
        _reopen(root, cfg, MessageStore, lock, report, progress)
        after = verify_store(root, config, progress)
        if not after.ok or any(p.kind.endswith(("lag", "missing")) for p in after.problems):
            report.actions.append(
                "derived files still disagree: rebuilding every ConsumeQueue "
                "and IndexFile from the CommitLog"
            )
            for rel in _all_queue_dirs(root):
                _delete_files(os.path.join(root, rel), _segments(os.path.join(root, rel)))
            _delete_files(index_dir, _index_names(index_dir))
            _reopen(root, cfg, MessageStore, lock, report, progress)
            after = verify_store(root, config, progress)
        report.after = after
        if after.ok:
            _sync_and_checkpoint(root, after)
        elif saved_checkpoint is not None:  # leave the broker's own checkpoint as it was
            with open(os.path.join(root, "checkpoint"), "wb") as f:
                f.write(saved_checkpoint)
        return report
    finally:
        release_store_lock(lock)


def _delete_files(directory: str, names: list[str]) -> None:
    """Delete the derived files (ConsumeQueue or IndexFile) ``names`` in ``directory``; a
    directory in the place of one (damage) goes too."""
    for n in names:
        p = os.path.join(directory, n)
        remove_tree(p)  # a directory in its place too, at any depth


def _all_queue_dirs(root: str) -> list[str]:
    base = os.path.join(root, "consumequeue")
    out = []
    if os.path.isdir(base):
        for t in sorted(os.listdir(base)):
            tdir = os.path.join(base, t)
            if os.path.isdir(tdir):
                out += [
                    f"consumequeue/{t}/{q}"
                    for q in sorted(os.listdir(tdir))
                    if queue_dir_id(q) is not None and os.path.isdir(os.path.join(tdir, q))
                ]
    return out


def _force_full_redispatch(root: str) -> None:
    """Make the next open re-dispatch the whole CommitLog (idempotently): the broker's abnormal
    recovery (``abort`` present) from the first file, since no file is older than a checkpoint
    whose CommitLog and ConsumeQueue timestamps are 0. indexMsgTimestamp is kept, so only the
    IndexFiles written after it are rebuilt."""
    from ..format.checkpoint import StoreCheckpoint

    path = os.path.join(root, "checkpoint")
    try:
        cp = StoreCheckpoint.read(path)
    except CorruptRecordError:
        cp = StoreCheckpoint()  # rewritten from the data at the end of the recovery
    cp.physic_msg_timestamp = 0
    cp.logics_msg_timestamp = 0
    # Keep the IndexFiles: verify vouched for them (damaged ones are gone already); records
    # after the newest one's endPhyOffset are indexed by the re-dispatch.
    cp.index_msg_timestamp = 2**62
    cp.write(path)
    with open(os.path.join(root, "abort"), "w") as f:
        f.write(str(os.getpid()))


def _sync_and_checkpoint(root: str, res: VerifyResult) -> None:
    """fsync the rebuilt derived files, then write a checkpoint that vouches for them: CommitLog
    and ConsumeQueue timestamps = the last record's store time, indexMsgTimestamp = the newest
    IndexFile's endTimestamp, confirmPhyOffset = the end of the CommitLog."""
    from ..format.checkpoint import StoreCheckpoint

    for sub in ("consumequeue", "index"):
        for dirpath, _dirs, files, _depth in walk_tree(os.path.join(root, sub)):
            for name in files:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fd = os.open(dirpath, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    index_ts = 0
    names = _index_names(os.path.join(root, "index"))
    if names:
        with open(os.path.join(root, "index", names[-1]), "rb") as f:
            head = f.read(INDEX_HEADER_SIZE)
        if len(head) == INDEX_HEADER_SIZE:
            index_ts = HEADER.unpack(head)[1]
    path = os.path.join(root, "checkpoint")
    cp = StoreCheckpoint.read(path)
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = res.last_store_timestamp
    cp.index_msg_timestamp = index_ts
    cp.confirm_phy_offset = res.commitlog_end
    cp.write(path)


def _reopen(
    root: str,
    cfg: StoreConfig,
    store_cls: type[MessageStore],
    lock: StoreLock,
    report: RecoverReport,
    progress: ProgressFactory | None = None,
) -> None:
    """Open the store for writing under recover's lock ``lock`` (its recovery
    re-dispatches; ``progress`` shows how far) and close it cleanly; the lock stays held.
    What that recovery did is one line of ``report.actions``. The close writes the
    checkpoint from the data even when the open re-dispatched nothing: the one on disk is
    :func:`_force_full_redispatch`'s, written only to steer this open."""
    store = store_cls(root, cfg, held_lock=lock, progress=progress)
    try:
        store.flusher.note_data_moved()
        rec = store.recovery_report
        if rec is not None and rec.did_something():
            report.actions.append(f"opened the store: {rec.summary()}")
    finally:
        store.close()


def _truncate_commitlog(root: str, res: VerifyResult, cut: int, report: RecoverReport) -> None:
    """Drop the CommitLog from ``cut`` on; save valid records after it under lost+found/."""
    cl_dir = os.path.join(root, "commitlog")
    fs = res.segment_size
    names = _segments(cl_dir)
    dropped_records = res.records_after_bad
    if dropped_records or res.data_after_bad:
        dest = os.path.join(root, "lost+found", time.strftime("%Y%m%d%H%M%S"), "commitlog")
        os.makedirs(dest, exist_ok=True)
        for n in names:
            if int(n) + fs > cut:
                shutil.copyfile(os.path.join(cl_dir, n), os.path.join(dest, n))
        report.actions.append(
            f"copied the CommitLog files from offset {cut - cut % fs} to "
            f"{os.path.relpath(dest, root)} (they hold {dropped_records} "
            "valid records"
            + (" and other data" if res.data_after_bad else "")
            + " after the damage, which recovery drops)"
        )
    removed = 0
    for n in names:
        start = int(n)
        path = os.path.join(cl_dir, n)
        if start > cut - cut % fs:
            os.unlink(path)
            removed += 1
        elif start <= cut < start + fs:
            with open(path, "r+b") as f:
                f.truncate(cut - start)
                f.truncate(fs)
                f.flush()
                os.fsync(f.fileno())
    fd = os.open(cl_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    report.actions.append(
        f"truncated the CommitLog at offset {cut} (zeroed the rest of its "
        f"file" + (f", deleted {removed} later files)" if removed else ")")
    )
