"""verify's CommitLog checks: the segment files' sizes and names, then every record (the lenient
walk :func:`engine.format.commitlog.walk_segment` and the decoder,
``CommitLog.checkMessageAndReturnSize``), or a DLedger CommitLog's entries
(``DLedgerMmapFileStore.recover``); the valid records are kept compactly (:class:`Records`)
for the ConsumeQueue and IndexFile checks. A local file is mapped; a source that is not local
is read by range through one shared :class:`Window` of :data:`RANGE` bytes.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import CorruptRecordError
from ...format.commitlog import RECORD_HEAD, CommitLog, Step, claim_problem, walk_segment
from ...format.consumequeue import deliver_tags_code
from ...format.dledger import HEADER_SIZE, DLedgerLog, commitlog_dir
from ...format.javahash import tags_code
from ...format.mappedfile import MappedFiles, offset_problem
from ...format.message import (
    MAX_MESSAGE_SIZE,
    PROPERTY_DELAY,
    SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_record,
    transaction_type,
)
from ...format.source import StoreSource
from .listing import not_files, regular_files, rel_path, segment_files
from .report import VerifyResult

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ...format.message import MessageRecord
    from ...service.workprogress import ProgressFactory
    from ...storeconfig import StoreConfig


#: Bytes of a CommitLog file read at once from a source that is not local (one range read;
#: a record longer than this is read whole, in one read of its own)
RANGE = 16 << 20


class Window:
    """The one buffer of CommitLog bytes verify holds when it reads a source that is not local:
    the last range read (at least :data:`RANGE` bytes, or a whole record longer than that),
    shared by every file, so memory stays at one range whatever the number of files. The
    bytes come through the CommitLog's reader ``files``
    (:meth:`engine.format.mappedfile.MappedFiles.pread_file`: one range read of the source)."""

    def __init__(self, files: MappedFiles) -> None:
        self.files = files
        self.start = -1  # the file (its start offset, its name) buf comes from
        self.base = 0  # file position of buf[0]
        self.buf = b""
        self.short = False  # the read gave less than asked: the file ends there

    def read(self, start: int, pos: int, need: int, size: int) -> tuple[bytes, int]:
        """``(buffer, base)`` holding ``[pos, pos + need)`` of the ``size``-byte file named by
        ``start`` (clipped to its end) unless it ended sooner: ``buffer[x - base]`` is the byte
        at ``x``.

        Raises:
            OSError; ObjectStoreError: the range could not be read.
        """
        stop = min(pos + need, size)
        if start == self.start and self.base <= pos and stop <= self.base + len(self.buf):
            return self.buf, self.base
        n = min(max(need, RANGE), size - pos)
        self.buf = b""  # the old range goes before the new one comes
        self.buf = self.files.pread_file(start, n, pos)
        self.start, self.base, self.short = start, pos, len(self.buf) < n
        return self.buf, pos


@dataclass
class SegmentFile:
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
    window: Window | None = None

    @property
    def readable(self) -> bool:
        """Whether its bytes can be read (a local file mapped, or a source read by range)."""
        return self.map is not None or self.window is not None

    def bytes_at(self, pos: int, need: int) -> tuple[Any, int]:
        """``(buffer, base)`` holding the file's bytes ``[pos, pos + need)`` (clipped to its
        end): the whole mapping (base 0), or a range read (:class:`Window`). Raises as
        :meth:`Window.read`."""
        if self.map is not None or self.window is None:
            return self.map, 0
        return self.window.read(self.start, pos, need, self.size)

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


class Records:
    """The valid records of the CommitLog, compactly (arrays), for the derived-file checks."""

    def __init__(self) -> None:
        self.offsets = array("q")
        self.sizes = array("i")
        self.nkeys = array("b")
        self.last_keyed = -1  # offset of the last record with index keys
        self.queues: dict[tuple[str, int], tuple[array, array, array, array]] = {}


def check_segments(
    root: str, cfg: StoreConfig, res: VerifyResult, source: StoreSource
) -> list[SegmentFile]:
    """List the CommitLog files (through ``source``) and check their sizes and names; each
    comes mapped (a local source) or read by range through one shared :class:`Window`."""
    cl_dir = commitlog_dir(root, source)  # dledger-<selfId>/data for a DLedger store
    if not source.isdir(cl_dir):
        return []
    cl_rel = rel_path(cl_dir, root)
    listed = segment_files(cl_dir, source)
    for n in not_files(cl_dir, listed, source):
        res.add(
            "error",
            "commitlog-name",
            f"{cl_rel}/{n}",
            "not a regular file (RocketMQ refuses to load the CommitLog)",
        )
    names = regular_files(cl_dir, listed, source)
    files = MappedFiles(cl_dir, source=source)
    window = None if source.local else Window(files)
    segs = [
        SegmentFile(
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
                # cut short: recover extends it with zeros; larger: recover cannot tell which
                # size is the broker's (BY_HAND)
                "commitlog-size" if s.size < file_size else "commitlog-oversize",
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


def _is_zero(seg: SegmentFile, start: int, end: int) -> bool:
    """Whether ``[start, end)`` of a segment reads as zeros; holes of a sparse file are skipped
    (SEEK_DATA), so a new 1 GiB segment costs nothing. A file read by range is read in
    :data:`RANGE` steps, not kept (a snapshot's zeros past its stored prefix are not fetched)."""
    if seg.map is None:
        if seg.window is None:
            return True
        p = start
        while p < end:
            data = seg.files.pread_file(seg.start, min(end - p, RANGE), p)
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


def scan_commitlog(
    segs: list[SegmentFile],
    cfg: StoreConfig,
    res: VerifyResult,
    recs: Records,
    progress: ProgressFactory,
) -> None:
    """Walk every record of a plain CommitLog's files ``segs`` (:func:`check_segments`) with
    the lenient :func:`engine.format.commitlog.walk_segment` and decode each with its CRCs
    (``CommitLog.checkMessageAndReturnSize``), adding to ``res`` what ends each file's data
    (blank END_OF_FILE record, zeros, damage, a hole followed by records) and setting
    ``res.first_bad`` where the broker's recovery would cut; the valid records go to ``recs``.
    ``progress`` gets one bar in bytes. Raises OSError / ObjectStoreError from the source."""
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


def scan_dledger(
    dledger: DLedgerLog,
    segs: list[SegmentFile],
    cfg: StoreConfig,
    res: VerifyResult,
    recs: Records,
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


def _add_record(rec: MessageRecord, recs: Records, delay_table: dict, reachable: bool) -> None:
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


def forget_deleted_topics(root: str, recs: Records, source: StoreSource) -> None:
    """Records of topics deleted by ``rmqfs delete-topic`` (``config/rmqfs.deletedTopics.json``:
    below the CommitLog offset of the deletion) belong to no queue: no ConsumeQueue is
    expected for them (the store never re-dispatches them, :mod:`engine.service.dispatch`)."""
    from ...format.config import DeletedTopics

    try:
        deleted = DeletedTopics(os.path.join(root, "config"), read_only=True, source=source).table
    except CorruptRecordError:
        return  # check_config reports the file
    for key in [k for k in recs.queues if k[0] in deleted]:
        below = deleted[key[0]]
        q = recs.queues[key]
        i = bisect.bisect_left(q[1], below)
        if i >= len(q[1]):
            del recs.queues[key]
        else:
            recs.queues[key] = (q[0][i:], q[1][i:], q[2][i:], q[3][i:])


def record_index(recs: Records, offset: int) -> int | None:
    """The index in ``recs`` of the valid record starting at CommitLog offset ``offset``
    (bytes), or None where none starts (a binary search)."""
    i = bisect.bisect_left(recs.offsets, offset)
    if i < len(recs.offsets) and recs.offsets[i] == offset:
        return i
    return None


def read_record_at(segs: list[SegmentFile], offset: int) -> MessageRecord | None:
    """Decode the record at a CommitLog offset from the segments (mapped, or read by range:
    an IndexFile's items come in CommitLog order, so one range serves many), or None."""
    for s in segs:
        if s.start <= offset < s.start + s.size and s.readable:
            pos = offset - s.start
            buf, base = s.map, 0
            if buf is None:  # a range: the record whole in it
                buf, base = s.bytes_at(pos, RECORD_HEAD.size)
                # the header's TOTALSIZE, as the format's walk reads it
                step = next(walk_segment(buf, len(buf), pos - base), None)
                if step is None or step.kind == "torn":
                    return None
                if step.total > RECORD_HEAD.size:
                    buf, base = s.bytes_at(pos, step.total)
            try:
                return decode_record(buf, pos - base, check_crc=False)
            except CorruptRecordError:
                return None
    return None
