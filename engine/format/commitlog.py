"""The CommitLog: every message of the store, appended in order (``CommitLog``).

Records (see :mod:`engine.format.message`) are appended to fixed-size segment files
(:class:`engine.format.mappedfile.FileQueue`). When a record plus the 8-byte blank record does not fit
in the rest of a segment, the blank END_OF_FILE record is written and the record goes to the
next segment (``CommitLog.doAppend``, docs/format.md "CommitLog record").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, NamedTuple

from ..errors import CorruptRecordError, MessageTooLargeError
from .dledger import (
    ENTRY_HEADER,
    FILLER,
    FILLER_MAGIC,
    HEADER_SIZE,
    DLedgerLog,
    entry_problem,
)
from .mappedfile import FileQueue, Segment
from .message import (
    BODY_CRC_MASK,
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    FIXED_V4,
    INT16,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    MAX_MESSAGE_SIZE,
    MAX_TOPIC_LENGTH_V1,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH_SIZE,
    PROPERTY_CRC32,
    RECORD_HEAD,
    RECORD_SLACK,
    STOREHOSTADDRESS_V6_FLAG,
    TOPIC_LENGTH_SIZE_V1,
    TOPIC_LENGTH_SIZE_V2,
    EncodedMessage,
    MessageRecord,
    decode_record,
    encode_blank,
    patch_record,
    write_prop_crc,
)
from .message import crc32 as _crc32  # zlib's; masked with BODY_CRC_MASK
from .source import LOCAL, StoreSource

if TYPE_CHECKING:
    from .message import RecordBuffer

_PROP_CRC = PROPERTY_CRC32.encode()
_HOSTS_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG

DEFAULT_FILE_SIZE = 1024 * 1024 * 1024  # mappedFileSizeCommitLog
SCAN_CHUNK = 8 * 1024 * 1024
OS_PAGE_SIZE = 4096  # DefaultMappedFile.OS_PAGE_SIZE
_WRITEV_MIN_PIECE = 2048  # average piece size from which pwritev beats join + pwrite
_IOV_MAX = 1024  # os.sysconf("SC_IOV_MAX") on Linux


def _pwritev_all(fd: int, pieces: list, pos: int) -> None:
    """``pwritev`` every piece at ``pos``, in calls of at most IOV_MAX buffers, resuming after
    short writes."""
    i, n = 0, len(pieces)
    while i < n:
        bufs = pieces[i : i + _IOV_MAX]
        want = sum(map(len, bufs))
        done = os.pwritev(fd, bufs, pos)
        pos += done
        if done == want:
            i += len(bufs)
            continue
        # Short write: skip the whole buffers written, then finish the partial one.
        for b in bufs:
            if done < len(b):
                break
            done -= len(b)
            i += 1
        rest = memoryview(pieces[i])[done:]
        while rest:
            k = os.pwrite(fd, rest, pos)
            rest = rest[k:]
            pos += k
        i += 1


class AppendResult(tuple):
    """``(commitLogOffset, size, storeTimestamp)`` of an appended record (bytes, bytes, epoch ms)."""

    __slots__ = ()

    @property
    def offset(self) -> int:
        return self[0]

    @property
    def size(self) -> int:
        return self[1]


#: What :meth:`CommitLog.scan_raw` yields per record: ``(buf, pos, phys, total, topic,
#: queue_id, queue_offset, sys_flag)``, the record being ``buf[pos:pos + total]``.
RawRecord = tuple[bytes, int, int, int, str, int, int, int]


class Step(NamedTuple):
    """One step of the walk (:func:`record_step`): what lies at ``pos`` (bytes into the buffer).

    ``kind`` is one of :data:`STEP_KINDS`; ``total`` and ``magic`` are the TOTALSIZE and
    MAGICCODE read there (0 where the buffer ends inside the header)."""

    kind: str
    pos: int
    total: int
    magic: int


#: What :func:`record_step` finds at a position: ``record`` (a record header that fits the
#: buffer: decode it to know more), ``blank`` (the END_OF_FILE record: the file's data ends),
#: ``zeros`` (a zero header: the written data ends), ``torn`` (the buffer ends inside a header),
#: ``not_record`` (a header with another magic or a size <= 0) and ``past_end`` (a record that
#: runs past the end of the buffer). Every kind but ``record`` ends a walk.
STEP_KINDS = ("record", "blank", "zeros", "torn", "not_record", "past_end")


#: The magics :func:`record_step` tells apart (a record's, V1 and V2, and the blank
#: END_OF_FILE record's), for its compiled batch loop (``engine.read.kernel.Kernel.walk``).
WALK_MAGICS = (MAGIC_V1, MAGIC_V2, MAGIC_BLANK)

_HEAD = RECORD_HEAD.size
_unpack_head = RECORD_HEAD.unpack_from
_unpack_fixed = FIXED_V4.unpack_from


def record_step(buf: RecordBuffer, pos: int, limit: int) -> tuple[str, int, int]:
    """The one record step of a CommitLog walk: what lies at ``pos`` of ``buf`` when its data
    ends at ``limit`` (``pos < limit``), by the rules of ``CommitLog.checkMessageAndReturnSize``:
    a record is ``TOTALSIZE`` bytes with magic ``MAGIC_V1``/``MAGIC_V2``, the blank END_OF_FILE
    record (``MAGIC_BLANK``) ends a file, a zero header ends the data, anything else is not a
    record. Returns ``(kind, total, magic)``: one of :data:`STEP_KINDS` and the TOTALSIZE and
    MAGICCODE read (0, 0 where ``limit`` cuts the header); a ``torn`` or ``past_end`` step is
    a header or record that ``limit`` cuts: the end of its file, or of a range the caller
    reads again from there.

    Every walk of a CommitLog loops over this step: :func:`walk_segment` (the lenient walk of
    ``rmqfs verify``), :meth:`CommitLog.scan_raw` (recovery, reput, the follower), and, through
    :func:`entry_step`, DLedger entries (``DLedgerCommitLog.checkMessageAndReturnSize`` wraps
    the plain one). The compiled batch loop (``rmq_walk``, ``engine.read.kernel.Kernel.walk``)
    repeats these rules per record and is judged against this step (tests/engine/test_kernel.py,
    under the sanitizer build too). Only the header is read: the record's content is the
    decoder's (:func:`engine.format.message.decode_record`)."""
    if pos + _HEAD > limit:
        return "torn", 0, 0
    total, magic = _unpack_head(buf, pos)
    if magic == MAGIC_BLANK:
        return "blank", total, magic
    if total == 0 and magic == 0:
        return "zeros", total, magic
    if (magic != MAGIC_V1 and magic != MAGIC_V2) or total <= 0:
        return "not_record", total, magic
    if pos + total > limit:
        return "past_end", total, magic
    return "record", total, magic


def walk_segment(buf: RecordBuffer, size: int, start: int = 0) -> Iterator[Step]:
    """Walk one plain CommitLog file's bytes ``buf[start:size]`` record by record, leniently: the
    walk of a checker (``rmqfs verify``), which goes on past a record whose body is damaged (the
    caller decodes each ``record`` step and may find its CRC wrong) and reports what ends the
    file's data instead of stopping at the first doubt as :meth:`CommitLog.scan_raw` (recovery,
    the readers) does. A loop over :func:`record_step`, the one home of the rules.

    Yields :class:`Step` tuples in file order; the last one is not a ``record`` unless the
    records end exactly at ``size``. ``buf`` is any buffer (an mmap of the file, or a range of
    it read from a store source: positions are then ``buf``'s, and a ``torn`` or ``past_end``
    step at its end may be a record the range cut, for the caller to read again whole);
    ``start``: where the first record starts in ``buf``.
    """
    pos = start
    while pos < size:
        kind, total, magic = record_step(buf, pos, size)
        yield Step(kind, pos, total, magic)
        if kind != "record":
            return
        pos += total


_MIN_ENTRY = HEADER_SIZE + _HEAD


def entry_step(
    buf: RecordBuffer, pos: int, limit: int, base: int, last_index: int, last_term: int
) -> tuple[str, int, int, int, str | None]:
    """The step of a DLedger CommitLog (``DLedgerCommitLog.checkMessageAndReturnSize``): the
    48-byte entry header at ``pos`` of ``buf`` (its data ending at ``limit``, ``pos + 8 <=
    limit``; ``base``: the CommitLog offset of ``buf[0]``) after entry ``last_index`` of term
    ``last_term`` (-1, -1 for the first one walked), checked as ``DLedgerMmapFileStore.recover``
    does (:func:`engine.format.dledger.entry_problem`). The record inside an ``entry`` is the
    caller's next :func:`record_step`, with the entry's end as its limit.

    Returns ``(kind, size, index, term, problem)``: ``kind`` is ``entry`` (a whole entry whose
    header passes the checks: its record is ``size - 48`` bytes from ``pos + 48``), ``filler``
    (the filler that ends a file's data, ``size`` bytes), ``zeros`` (the written data ends),
    ``cut`` (``limit`` cuts the entry or its header: read again from ``pos``, or the file ends
    there) or ``damaged`` (``problem`` says why); ``index`` and ``term`` are the entry's. A
    plain tuple: the walk takes one per message."""
    if limit - pos >= HEADER_SIZE:
        emagic, esize, eindex, eterm, epos, _, _, _, body_len = ENTRY_HEADER.unpack_from(buf, pos)
    else:
        emagic, esize = FILLER.unpack_from(buf, pos)
        eindex = eterm = epos = body_len = 0
    if emagic == FILLER_MAGIC:
        return "filler", esize, 0, 0, None
    if emagic == 0 and esize == 0:
        return "zeros", 0, 0, 0, None
    if pos + (esize if esize > _MIN_ENTRY else _MIN_ENTRY) > limit:
        return "cut", esize, 0, 0, None
    problem = entry_problem(
        emagic, esize, eindex, eterm, epos, body_len, base + pos, last_index, last_term
    )
    if problem is not None:
        return "damaged", esize, eindex, eterm, problem
    return "entry", esize, eindex, eterm, None


def filler_next(size: int, at: int, file_end: int) -> int | None:
    """Where a walk of a DLedger CommitLog goes on after the filler of ``size`` bytes at
    CommitLog offset ``at`` of a file ending at ``file_end``: past it (the next file's start
    when it ends the file's data, ``MmapFileList``'s rule), or None for a filler that is not one
    (shorter than its own header, or running past its file)."""
    if size < FILLER.size or at + size > file_end:
        return None
    return at + size


def entry_resume(
    kind: str, buf: RecordBuffer, pos: int, at: int, file_end: int, claim: int
) -> tuple[str, int]:
    """What a batched walk of a DLedger CommitLog does where its compiled entry step
    (``Kernel.walk_entries``) stopped with ``kind``, at ``buf[pos]`` (CommitLog offset ``at``,
    in a file ending at ``file_end``): ``("next", offset)`` goes on at
    ``offset`` (past a filler), ``("read", total)`` reads again from ``at`` with ``total`` bytes
    held (an entry the range cut, no larger than ``claim`` and inside its file), ``("end",
    0)`` stops (anything else: :meth:`CommitLog.scan_raw` walks on from there and says why).
    The rules are :func:`entry_step`'s and :meth:`CommitLog.scan_raw`'s."""
    if kind == "filler":
        nxt = filler_next(FILLER.unpack_from(buf, pos)[1], at, file_end)
        return ("end", 0) if nxt is None else ("next", nxt)
    if kind in ("torn", "past_end"):
        total = FILLER.unpack_from(buf, pos)[1] if kind == "past_end" else 0
        total = max(total, _MIN_ENTRY)  # as scan_raw reads a cut entry again
        if total <= claim and at + total <= file_end:
            return "read", total
    return "end", 0


def claim_problem(
    max_message_size: int, fd: int, file_start: int, at: int, total: int
) -> str | None:
    """Why the ``total`` bytes a record (or DLedger entry) at CommitLog offset ``at`` claims
    must not be read whole, or None when they may: a claim past ``max_message_size`` + 64 KiB
    (the largest record a broker writes: ``CommitLog.DefaultAppendMessageCallback`` refuses
    longer ones) is read only when no hole of the segment (``fd``, starting at CommitLog
    offset ``file_start``) lies under it, so what a walk holds is bounded by what the store
    holds on disk, not by what a header claims (one ``lseek(SEEK_HOLE)``; a filesystem that
    cannot tell reports none); ``fd`` -1 (a file read by range: object storage) refuses it.
    RocketMQ reads the claim in place from its mapped file
    (``CommitLog.checkMessageAndReturnSize``), at no cost; a read here allocates it."""
    if total <= max_message_size + RECORD_SLACK:
        return None
    if fd < 0:  # read by range (object storage): no holes to tell, the claim is refused
        return (
            f"record at {at} claims {total} bytes, more than maxMessageSize "
            f"{max_message_size} + {RECORD_SLACK}"
        )
    try:
        hole = os.lseek(fd, at - file_start, os.SEEK_HOLE)
    except OSError:  # ENXIO (at or past the end) or no SEEK_HOLE: nothing to tell
        return None
    if hole >= at - file_start + total:
        return None
    return (
        f"record at {at} claims {total} bytes, more than maxMessageSize "
        f"{max_message_size} + {RECORD_SLACK}, over bytes of its segment never "
        f"written (a hole at {file_start + hole})"
    )


class CommitLog:
    """Segment files under ``commitlog/`` with append, read and scan.

    Args:
        directory: the ``commitlog`` directory.
        file_size: segment size for a new store; existing files decide otherwise.
        read_only: open for reading only.
        entries: the store's DLedger CommitLog (:mod:`engine.format.dledger`) when
            ``directory`` is its ``data/``: each record sits after a 48-byte entry header and
            the walk checks entries as ``DLedgerMmapFileStore.recover`` does. Only read.

    Attributes:
        max_offset: where the next record goes (bytes, absolute); set by recovery.
        flushed_where: offset up to which data was fsynced.
    """

    def __init__(
        self,
        directory: str,
        file_size: int = DEFAULT_FILE_SIZE,
        read_only: bool = False,
        entries: DLedgerLog | None = None,
        source: StoreSource = LOCAL,
    ):
        if entries is not None and not read_only:
            raise ValueError("a DLedger CommitLog is only read")
        self.files = FileQueue(directory, file_size, read_only, source=source)
        self.entries = entries
        #: bytes before each record: 0, or a DLedger entry header (48)
        self.header_size = HEADER_SIZE if entries is not None else 0
        self.file_size = self.files.file_size
        self.max_offset = self.files.min_offset
        self.flushed_where = 0
        self.last_store_timestamp = 0
        self.flushed_store_timestamp = 0
        self.lock = threading.Lock()
        self.force_verify_prop_crc = False  # MessageStoreConfig.forceVerifyPropCRC
        # MessageStoreConfig.maxMessageSize: a record claiming more than this + 64 KiB over
        # bytes never written is not read (:meth:`claim_problem`)
        self.max_message_size = MAX_MESSAGE_SIZE
        self.flush_count = 0  # fdatasync rounds, for group-commit accounting
        #: the last DLedger entry (index, term) :meth:`scan_raw` took, or its ``after``
        self.scan_entry: tuple[int, int] | None = None

    @property
    def min_offset(self) -> int:
        """First offset still on disk (start of the oldest segment)."""
        return self.files.min_offset

    @property
    def segment_count(self) -> int:
        """Number of CommitLog files on disk."""
        return len(self.files.segments)

    def is_sealed(self, segment_start: int) -> bool:
        """Whether the CommitLog file starting at ``segment_start`` (bytes, its name) exists and
        will not be written again: appends have moved past its end."""
        seg = self.files.find(segment_start)
        return seg is not None and seg.start == segment_start and seg.end <= self.max_offset - 1

    # -- read -------------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes:
        """Raw bytes of a record at ``offset`` (``size`` from its ConsumeQueue unit)."""
        data = self.files.read(offset, size)
        if len(data) != size:
            raise CorruptRecordError(f"record of {size} bytes not in the CommitLog", offset)
        return data

    def read_message(self, offset: int, size: int, check_crc: bool = False) -> MessageRecord:
        """Decode the record at ``offset``. Raises CorruptRecordError."""
        return decode_record(self.read(offset, size), 0, check_crc=check_crc)

    def scan(
        self, start: int, check_crc: bool = True, end: int | None = None
    ) -> Iterator[MessageRecord]:
        """Walk records from ``start`` (a record boundary) to the first invalid one.

        Yields ``MessageRecord``s. After the generator ends, :attr:`scan_end` holds the offset
        just after the last good record and :attr:`scan_error` what stopped it (None at a clean
        end: zeros, the end of the files or ``end``). A blank record moves to the next segment,
        and a blank in the last file ends the scan (``recoverNormally``). This is
        :meth:`scan_raw` plus a full decode of each record, so both stop at the same place
        unless a record fails to decode, which ends this scan at that record.
        """
        for buf, pos, phys, _total, *_ in self.scan_raw(start, check_crc, end):
            try:
                rec = decode_record(buf, pos, check_crc=False)
            except CorruptRecordError as exc:
                self.scan_error: str | None = str(exc)
                self.scan_end = phys
                return
            yield rec

    def claim_problem(self, fd: int, file_start: int, at: int, total: int) -> str | None:
        """:func:`claim_problem` with this CommitLog's maxMessageSize."""
        return claim_problem(self.max_message_size, fd, file_start, at, total)

    def scan_raw(
        self,
        start: int,
        check_crc: bool = True,
        end: int | None = None,
        read_size: int = SCAN_CHUNK,
        after: tuple[int, int] | None = None,
    ) -> Iterator[RawRecord]:
        """Walk records from ``start`` to the first invalid one without decoding them.

        Yields ``(buf, pos, phys, total, topic, queue_id, queue_offset, sys_flag)`` per valid
        record: the record is ``buf[pos:pos + total]`` (decode it with
        :func:`engine.format.message.decode_record` when more is needed; its CRC was checked already).
        Recovery uses this to pass over records the ConsumeQueues and the index already hold
        with only a size, CRC and layout check (CRC over a memoryview, no copies). Records with
        IPv6 hosts or a ``__CRC32#`` property are checked by ``decode_record`` itself.
        :attr:`scan_end` / :attr:`scan_error` as for :meth:`scan`. Stopping rules: zeros end the
        scan cleanly; a bad magic, size, CRC, PHYSICALOFFSET or layout, a record running past
        its segment, or a segment file that ends early end it with :attr:`scan_error` set.
        ``read_size``: bytes read at a time (a record longer than that is read whole).

        Each position is judged by the one record step, :func:`record_step`
        (``CommitLog.checkMessageAndReturnSize``); a DLedger CommitLog (:attr:`entries`) is
        walked entry by entry from ``start``, an entry's offset, each entry judged by
        :func:`entry_step` (``DLedgerMmapFileStore.recover``'s checks) and its record by
        :func:`record_step` within the entry, which must hold bodyLen bytes; ``phys`` is the
        record's offset (entry + 48). A filler (magic -1) skips its size, to the next file at a
        file's end; the first entry past the checkpoint's committedIndex ends the walk cleanly
        (``getCommittedPos``), and :attr:`scan_end` is then the end of the last committed
        entry (``DLedgerCommitLog.checkMessageAndReturnSize``). This is recovery's judge
        (tests/engine/test_layout_home.py): recovery walks a plain or DLedger CommitLog in
        batches (:func:`engine.read.recoverruns.recovery_runs`, compiled loops of the same
        steps) and goes on with this walk where they stop, so this walk says where the data
        ends; readers of a plain CommitLog in order use the compiled loop over ranges
        (:func:`engine.read.columnar.commitlog_runs`), DLedger readers this walk. A record ``decode_record`` refuses is
        named at its CommitLog offset in :attr:`scan_error`. ``after``: the DLedger entry (index,
        term) the entry at ``start`` must follow (None: the first entry walked is not compared
        with one); :attr:`scan_entry` is the last entry the walk took.
        """
        self.scan_error = None
        pos = start
        self.scan_end = pos
        self.scan_entry = after
        stop = self.files.end_offset if end is None else min(end, self.files.end_offset)
        state = _ScanState(self, check_crc)
        if after is not None:
            state.last_index, state.last_term = after
        while pos < stop:
            seg = self.files.find(pos)
            if seg is None:
                break
            chunk = self.files.pread_segment(seg, min(read_size, seg.end - pos), pos - seg.start)
            nxt = yield from self._scan_chunk(chunk, pos, seg, stop, state)
            if nxt is None:
                return
            pos = nxt

    def _scan_chunk(
        self, chunk: bytes, chunk_start: int, seg: Segment, stop: int, state: _ScanState
    ) -> Generator[RawRecord, None, int | None]:
        """The records :meth:`scan_raw` takes from ``chunk`` (read at CommitLog offset
        ``chunk_start`` of file ``seg``). Returns where the walk goes on (the next chunk, or the
        next file after a blank record or a filler), or None when it ended (:attr:`scan_end`,
        :attr:`scan_error` say where and why)."""
        i, n = 0, len(chunk)
        view = memoryview(chunk)
        dl = self.entries is not None
        step, check, entry = record_step, state.check, entry_step
        while i < n and chunk_start + i < stop:
            r = i  # where the record starts: after the DLedger entry header, if any
            if n - i < _HEAD:
                if chunk_start + n >= seg.end:
                    self.scan_error = "segment ends inside a record header"
                    return None
                break  # read more
            if dl:
                ekind, esize, eindex, eterm, problem = entry(
                    chunk, i, n, chunk_start, state.last_index, state.last_term
                )
                at = chunk_start + i
                if ekind == "filler":
                    nxt = filler_next(esize, at, seg.end)
                    if nxt is None:
                        self.scan_error = f"DLedger filler at {at} of {esize} bytes"
                        return None
                    if nxt < seg.end:  # a filler inside a file: skip it
                        self.scan_end = nxt
                        return nxt
                    return self._next_file(seg)
                if ekind == "zeros":
                    return None
                if ekind == "cut":
                    # what judging it takes: the entry, or a header and a record head at least
                    need = max(esize, _MIN_ENTRY)
                    if at + need > seg.end:
                        magic = FILLER.unpack_from(chunk, i)[0]
                        self.scan_error = (
                            f"DLedger entry at {at} of {esize} bytes (magic {magic}) "
                            "does not fit its file"
                        )
                        return None
                    if i:
                        break  # read again from this entry
                    whole = self._read_whole(seg, at, need, "DLedger entry")
                    if whole is None:
                        return None
                    chunk, view, n = whole, memoryview(whole), len(whole)
                    continue
                if ekind == "damaged":
                    self.scan_error = problem
                    return None
                if eindex > state.committed:
                    return None  # past committedIndex: not messages (getCommittedPos)
                state.last_index, state.last_term = eindex, eterm
                self.scan_entry = (eindex, eterm)
                r = i + HEADER_SIZE
            kind, total, magic = step(chunk, r, n)
            if dl and total != esize - HEADER_SIZE:
                self.scan_error = (
                    f"record of {total} bytes in a DLedger entry of bodyLen "
                    f"{esize - HEADER_SIZE} (entry at {chunk_start + i})"
                )
                return None
            if kind == "record":
                rec = check(chunk, view, r, total, magic, chunk_start)
                if rec.__class__ is str:
                    self.scan_error = rec
                    return None
                yield rec  # type: ignore[misc]
                i = r + total
                self.scan_end = chunk_start + i
                continue
            if kind == "blank" and not dl:
                # recoverNormally: a blank in the last file ends the scan at the blank (the
                # next append overwrites it); otherwise go on in the next file.
                return self._next_file(seg)
            if kind == "zeros":
                return None
            if kind != "past_end":  # not_record, or a blank inside a DLedger entry
                self.scan_error = f"no record at {chunk_start + r} (magic 0x{magic:08X})"
                return None
            if chunk_start + r + total > seg.end:
                self.scan_error = f"record at {chunk_start + r} runs past its segment"
                return None
            if i:
                break  # read again from this record
            whole = self._read_whole(seg, chunk_start, total, "record")
            if whole is None:
                return None
            chunk, view, n = whole, memoryview(whole), len(whole)
        if n == 0 or (i == 0 and n < _HEAD):
            self.scan_error = f"segment file ends early at {chunk_start + i}"
            return None
        return chunk_start + i

    def _next_file(self, seg: Segment) -> int | None:
        """Where a walk goes on after the data of file ``seg`` ended (a blank record, a
        DLedger filler): the next file's start, or None when ``seg`` is the last file."""
        if self.files.find(seg.end) is None:
            return None
        self.scan_end = seg.end
        return seg.end

    def _read_whole(self, seg: Segment, at: int, total: int, what: str) -> bytes | None:
        """The ``total`` bytes a record (or DLedger entry) at CommitLog offset ``at`` claims,
        longer than one read of :meth:`scan_raw`; None when the claim is refused
        (:meth:`claim_problem`) or the file holds fewer (:attr:`scan_error` says which)."""
        problem = self.claim_problem(seg.fd, seg.start, at, total)
        if problem is not None:
            self.scan_error = problem
            return None
        chunk = self.files.pread_segment(seg, total, at - seg.start)
        if len(chunk) < total:
            self.scan_error = f"{what} at {at} is truncated"
            return None
        return chunk

    # -- write ------------------------------------------------------------------------------
    def append(
        self,
        messages: list[EncodedMessage],
        queue_offsets: list[int],
        store_timestamp: int | None = None,
        together: bool = False,
    ) -> list[AppendResult]:
        """Append encoded records in order and return where each one went.

        Fills QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP (``store_timestamp`` or now, epoch
        ms). The caller holds the store's put lock. On an OSError (ENOSPC, EIO) everything this
        call wrote is zeroed again and :attr:`max_offset` is unchanged, so no partial batch is
        ever visible; the error is re-raised.

        ``together`` keeps the records in one segment, as RocketMQ appends a MessageBatch
        (``doAppend(MessageExtBatch)``): when the whole batch does not fit in the rest of the
        segment, the blank record is written and the batch goes whole into the next one.

        Raises:
            MessageTooLargeError: a record (or a ``together`` batch) larger than a segment.
        """
        if store_timestamp is None:
            store_timestamp = int(time.time() * 1000)
        fs = self.file_size
        start = pos = self.max_offset
        results: list[AppendResult] = []
        chunks: list[tuple[int, bytearray]] = []
        chunk_start = pos
        buf = bytearray()
        if together:
            total = sum(len(m.data) for m in messages)
            if total + END_FILE_MIN_BLANK_LENGTH > fs:
                raise MessageTooLargeError(
                    f"batch of {total} bytes does not fit in a {fs}-byte CommitLog segment"
                )
            seg_end = pos - pos % fs + fs
            if pos + total + END_FILE_MIN_BLANK_LENGTH > seg_end:
                chunks.append((pos, bytearray(encode_blank(seg_end - pos))))
                pos = chunk_start = seg_end
        for m, qoff in zip(messages, queue_offsets):
            n = len(m.data)
            if n + END_FILE_MIN_BLANK_LENGTH > fs:
                raise MessageTooLargeError(
                    f"record of {n} bytes does not fit in a {fs}-byte CommitLog segment"
                )
            seg_end = pos - pos % fs + fs
            if pos + n + END_FILE_MIN_BLANK_LENGTH > seg_end:
                buf += encode_blank(seg_end - pos)
                chunks.append((chunk_start, buf))
                buf = bytearray()
                pos = chunk_start = seg_end
            rec_pos = len(buf)
            buf += m.data
            patch_record(buf, rec_pos, m.store_timestamp_pos, qoff, pos, store_timestamp)
            if m.prop_crc:
                write_prop_crc(buf, rec_pos, n)
            results.append(AppendResult((pos, n, store_timestamp)))
            pos += n
        if buf:
            chunks.append((chunk_start, buf))
        try:
            for off, data in chunks:
                self.files.write(off, data)
        except OSError:
            self.files.truncate_dirty(start)
            raise
        self.max_offset = pos
        self.last_store_timestamp = store_timestamp
        return results

    def append_chunks(self, chunks: list[tuple[int, list]], end: int, store_timestamp: int) -> None:
        """Write records already encoded with their final offsets (the store's put path).

        ``chunks`` are ``(absolute offset, list of bytes-like pieces)`` in order, starting at
        :attr:`max_offset`, each inside one segment (a chunk that ends a segment ends with its
        blank record); ``end`` is the new :attr:`max_offset`. A chunk of one piece (the
        compiled put path's) is copied into the segment's mapping (:meth:`FileQueue.write`);
        several large pieces go to the kernel as they are (``pwritev``, no copy), several small
        ones are joined first. Same failure contract
        as :meth:`append`: on an OSError everything written is zeroed again and re-raised.
        """
        start = self.max_offset
        try:
            for off, pieces in chunks:
                size = sum(map(len, pieces))
                if len(pieces) == 1 or size < _WRITEV_MIN_PIECE * len(pieces):
                    self.files.write(off, pieces[0] if len(pieces) == 1 else b"".join(pieces))
                    continue
                seg = self.files.segment_for_write(off)
                if off + size > seg.end:
                    raise ValueError("write crosses a file boundary")
                _pwritev_all(seg.fd, pieces, off - seg.start)
        except OSError:
            self.files.truncate_dirty(start)
            raise
        self.max_offset = end
        self.last_store_timestamp = store_timestamp

    def appended_in_place(self, end: int, store_timestamp: int) -> None:
        """Records up to ``end`` (bytes) were stored by the put path straight into the mapping
        :meth:`FileQueue.write_window` gave for :attr:`max_offset` (``doAppend`` into the
        ``MappedByteBuffer``): ``end`` becomes :attr:`max_offset`, its last record's store time
        (epoch ms) the last append's. ValueError for an ``end`` before :attr:`max_offset`."""
        if end < self.max_offset:
            raise ValueError(f"CommitLog end {end} is before {self.max_offset}")
        self.max_offset = end
        self.last_store_timestamp = store_timestamp

    def flush(
        self, least_pages: int = 0, end: int | None = None, store_timestamp: int | None = None
    ) -> bool:
        """fdatasync what was appended since the last flush (``MappedFileQueue.flush``).

        Args:
            least_pages: flush only when at least this many 4 KiB pages are dirty
                (``flushCommitLogLeastPages``); 0 flushes any dirty byte.
            end, store_timestamp: flush up to ``end`` (bytes) whose last record has this store
                time (epoch ms); default :attr:`max_offset` / the last append. The caller may
                take these under the put lock and call this without it, so puts go on while
                the disk syncs.

        Returns True if anything was synced. Raises OSError from the disk.
        """
        if end is None:
            end, store_timestamp = self.max_offset, self.last_store_timestamp
        flushed = self.flushed_where
        if end <= flushed:
            return False
        if least_pages > 0 and end // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE < least_pages:
            return False
        self.files.flush(flushed, end)
        self.flush_count += 1
        if end > self.flushed_where:
            self.flushed_where = end
            self.flushed_store_timestamp = store_timestamp or self.flushed_store_timestamp
        self.touch_written(end)
        return True

    def mark_touched(self) -> None:
        """The log as an open found it: its files' mtimes stand (``FileQueue.mark_touched``)."""
        self.files.mark_touched(self.max_offset)

    def touch_written(self, end: int | None = None) -> None:
        """Stamp the files written since the last call, up to ``end`` (default
        :attr:`max_offset`): ``FileQueue.touch_written``."""
        self.files.touch_written(self.max_offset if end is None else end)

    def end_of_file_blank(self, offset: int) -> int | None:
        """The end of the file holding ``offset`` when an END_OF_FILE blank record
        (``BLANK_MAGIC_CODE``, TOTALSIZE the rest of the file: ``doAppend``'s filler) starts
        at ``offset``, else None. Recovery's walk ends at a blank in the last file
        (``recoverNormally``); this says whether what ends it is that filler, whole."""
        seg = self.files.find(offset)
        if seg is None:
            return None
        head = self.files.read(offset, _HEAD)
        if len(head) < _HEAD:
            return None
        total, magic = _unpack_head(head)
        return seg.end if magic == MAGIC_BLANK and total == seg.end - offset else None

    def truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on (recovery of a dirty tail)."""
        if not self.files.read_only:
            self.files.truncate_dirty(offset)
        self.max_offset = offset
        self.flushed_where = min(self.flushed_where, offset)

    def close(self) -> None:
        """Close the segment files."""
        self.files.close()


class _ScanState:
    """What :meth:`CommitLog.scan_raw` carries from record to record, and its check of a
    record's content (:meth:`check`): its CRC settings, the topics decoded so far (the
    previous record's topic bytes, compared in place), and the last DLedger entry's index and
    term."""

    __slots__ = (
        "check_crc", "force_prop_crc", "topics", "last_tail", "last_topic", "last_magic",
        "committed", "last_index", "last_term",
    )  # fmt: skip

    def __init__(self, cl: CommitLog, check_crc: bool) -> None:
        self.check_crc = check_crc
        self.force_prop_crc = cl.force_verify_prop_crc
        self.topics: dict[bytes, str] = {}
        self.last_tail, self.last_topic, self.last_magic = b"", "", 0
        self.committed = cl.entries.committed_index if cl.entries is not None else -1
        self.last_index = self.last_term = -1

    def check(
        self, chunk: bytes, view: memoryview, r: int, total: int, magic: int, base: int
    ) -> RawRecord | str:
        """The :data:`RawRecord` of the whole record at ``chunk[r:r + total]`` (magic
        ``magic``; ``view``: a memoryview of ``chunk``; ``base``: the CommitLog offset of
        ``chunk[0]``) when its content passes, else what is wrong with it, named at its
        CommitLog offset: BODYCRC when the walk checks CRCs, PHYSICALOFFSET, the layout of
        topic and properties (the decode of ``CommitLog.checkMessageAndReturnSize``). A plain
        IPv4 record whose valid UTF-8 topic and properties end the record, with no ``__CRC32#``
        property (nor ``forceVerifyPropCRC``), is checked in place here (the previous record's
        topic bytes compared in place); anything else by
        :func:`engine.format.message.decode_record`."""
        fixed = _unpack_fixed(chunk, r) if total >= MIN_RECORD_SIZE else None
        topic = None
        if fixed is not None and not fixed[7] & _HOSTS_V6 and fixed[16] >= 0:
            rec_end = r + total
            p = r + FIXED_V4.size + fixed[16]
            if magic == self.last_magic and chunk.startswith(self.last_tail, p):
                topic = self.last_topic  # the previous record's (length field + name)
                q = p + len(self.last_tail)
            else:
                if magic == MAGIC_V1:
                    tlen = chunk[p] if p < rec_end else -1
                    if tlen > MAX_TOPIC_LENGTH_V1:
                        tlen -= 256  # a signed byte
                    t0 = p + TOPIC_LENGTH_SIZE_V1
                else:
                    t0 = p + TOPIC_LENGTH_SIZE_V2
                    tlen = INT16.unpack_from(chunk, p)[0] if t0 <= rec_end else -1
                q = t0 + tlen
                if tlen >= 0 and q + PROPERTIES_LENGTH_SIZE <= rec_end:
                    topic = self._topic(chunk[t0:q])
                    if topic is not None:
                        self.last_tail, self.last_topic, self.last_magic = chunk[p:q], topic, magic
            if topic is not None and (
                q + PROPERTIES_LENGTH_SIZE > rec_end
                or q + PROPERTIES_LENGTH_SIZE + INT16.unpack_from(chunk, q)[0] != rec_end
                or self.force_prop_crc
                or chunk.find(_PROP_CRC, q + PROPERTIES_LENGTH_SIZE, rec_end) >= 0
            ):
                topic = None
        if fixed is None or topic is None:
            try:  # anything unusual, or a layout error to report precisely
                rec = decode_record(
                    chunk,
                    r,
                    check_crc=self.check_crc,
                    base_offset=base,
                    force_verify_prop_crc=self.force_prop_crc,
                )
            except CorruptRecordError as exc:  # named at its CommitLog offset
                return f"{str(exc).rsplit(' (at offset ', 1)[0]} (at offset {base + r})"
            return (
                chunk, r, rec.commitlog_offset, total, rec.topic, rec.queue_id,
                rec.queue_offset, rec.sys_flag,
            )  # fmt: skip
        _, _, crc, queue_id, _, queue_offset, phys, sys_flag, *_, body_len = fixed
        body_at = r + FIXED_V4.size
        if self.check_crc and crc != (_crc32(view[body_at : body_at + body_len]) & BODY_CRC_MASK):
            return f"body CRC mismatch (record at {base + r})"
        if phys != base + r:
            return f"PHYSICALOFFSET {phys} != position {base + r}"
        return (chunk, r, phys, total, topic, queue_id, queue_offset, sys_flag)

    def _topic(self, raw: bytes) -> str | None:
        """The topic named by ``raw`` (UTF-8, decoded once per walk), or None when invalid."""
        topic = self.topics.get(raw)
        if topic is None:
            try:
                topic = raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
            self.topics[raw] = topic
        return topic
