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
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ..errors import CorruptRecordError, MessageTooLargeError
from .dledger import (
    ENTRY_HEADER,
    ENTRY_MAGIC,
    FILLER,
    FILLER_MAGIC,
    HEADER_SIZE,
    DLedgerLog,
    entry_problem,
)
from .mappedfile import FileQueue
from .message import (
    BLANK,
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
    """One step of :func:`walk_segment`: what lies at ``pos`` (bytes into the file).

    ``kind`` is one of :data:`STEP_KINDS`; ``total`` and ``magic`` are the TOTALSIZE and
    MAGICCODE read there (0 where the file ends inside the header)."""

    kind: str
    pos: int
    total: int
    magic: int


#: What :func:`walk_segment` finds at a position: ``record`` (a record header that fits the
#: file: decode it to know more), ``blank`` (the END_OF_FILE record: the file's data ends),
#: ``zeros`` (a zero header: the written data ends), ``torn`` (the file ends inside a header),
#: ``not_record`` (a header with another magic or a size <= 0) and ``past_end`` (a record that
#: runs past the end of its file). Every kind but ``record`` ends the walk.
STEP_KINDS = ("record", "blank", "zeros", "torn", "not_record", "past_end")


#: The magics :func:`walk_segment` tells apart (a record's, V1 and V2, and the blank
#: END_OF_FILE record's), for its compiled fast path (``engine.read.kernel.Kernel.walk``).
WALK_MAGICS = (MAGIC_V1, MAGIC_V2, MAGIC_BLANK)


def walk_segment(buf: RecordBuffer, size: int, start: int = 0) -> Iterator[Step]:
    """Walk one plain CommitLog file's bytes ``buf[start:size]`` record by record, leniently: the
    walk of a checker (``rmqfs verify``), which goes on past a record whose body is damaged (the
    caller decodes each ``record`` step and may find its CRC wrong) and reports what ends the
    file's data instead of stopping at the first doubt as :meth:`CommitLog.scan_raw` (recovery,
    the readers) does. The rules are the same: a record is ``TOTALSIZE`` bytes with magic
    ``MAGIC_V1``/``MAGIC_V2``, the blank END_OF_FILE record (``MAGIC_BLANK``) ends a file, zeros
    end the data (``CommitLog.checkMessageAndReturnSize``).

    Yields :class:`Step` tuples in file order; the last one is not a ``record`` unless the
    records end exactly at ``size``. ``buf`` is any buffer (an mmap of the file, or a range of
    it read from a store source: positions are then ``buf``'s, and a ``torn`` or ``past_end``
    step at its end may be a record the range cut, for the caller to read again whole);
    ``start``: where the first record starts in ``buf``.
    """
    pos = start
    head = RECORD_HEAD.size
    while True:
        if pos + head > size:
            if pos < size:
                yield Step("torn", pos, 0, 0)
            return
        total, magic = RECORD_HEAD.unpack_from(buf, pos)
        if magic == MAGIC_BLANK:
            yield Step("blank", pos, total, magic)
            return
        if total == 0 and magic == 0:
            yield Step("zeros", pos, total, magic)
            return
        if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0:
            yield Step("not_record", pos, total, magic)
            return
        if pos + total > size:
            yield Step("past_end", pos, total, magic)
            return
        yield Step("record", pos, total, magic)
        pos += total


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

        A DLedger CommitLog (:attr:`entries`) is walked entry by entry from ``start``, an
        entry's offset: the 48-byte header is checked as ``DLedgerMmapFileStore.recover`` does
        (:func:`engine.format.dledger.entry_problem`: magic 1, pos, size = bodyLen + 48, index
        + 1, terms never decreasing), the record after it is checked as
        above and must be bodyLen bytes, and ``phys`` is the record's offset (entry + 48).
        A filler (magic -1) skips its size, to the next file at a file's end; the first entry
        past the checkpoint's committedIndex ends the walk cleanly (``getCommittedPos``), and
        :attr:`scan_end` is then the end of the last committed entry
        (``DLedgerCommitLog.checkMessageAndReturnSize``, ``DLedgerMmapFileStore.recover``).
        This is the walk of DLedger CommitLogs and recovery's judge (tests/engine/
        test_layout_home.py): recovery walks a plain CommitLog in batches
        (:func:`engine.read.recoverruns.recovery_runs`) and goes on with this walk where they
        stop, so this walk says where the data ends; readers of a plain CommitLog in order use
        the compiled step over ranges (:func:`engine.read.columnar.commitlog_runs`,
        ``walk_segment``'s rules). A record ``decode_record`` refuses is named at its
        CommitLog offset in :attr:`scan_error`.
        """
        self.scan_error = None
        pos = start
        self.scan_end = pos
        stop = self.files.end_offset if end is None else min(end, self.files.end_offset)
        unpack_head = BLANK.unpack_from
        unpack_fixed = FIXED_V4.unpack_from
        unpack_short = INT16.unpack_from
        topics: dict[bytes, str] = {}
        last_tail, last_topic, last_magic = b"", "", 0
        force_prop_crc = self.force_verify_prop_crc
        dl = self.entries is not None
        committed = self.entries.committed_index if self.entries is not None else -1
        last_index = last_term = -1  # of the last DLedger entry walked
        hdr = self.header_size
        min_entry = hdr + RECORD_HEAD.size
        unpack_filler = FILLER.unpack_from
        unpack_entry = ENTRY_HEADER.unpack_from
        while pos < stop:
            seg = self.files.find(pos)
            if seg is None:
                break
            chunk_start = pos
            chunk = self.files.pread_segment(seg, min(read_size, seg.end - pos), pos - seg.start)
            view = memoryview(chunk)
            i = 0
            n = len(chunk)
            rolled = False
            while i < n and chunk_start + i < stop:
                if n - i < RECORD_HEAD.size:
                    if chunk_start + n >= seg.end:
                        self.scan_error = "segment ends inside a record header"
                        return
                    break  # read more
                r = i  # where the record starts: after the DLedger entry header, if any
                if dl:
                    if n - i >= hdr:
                        emagic, esize, eindex, eterm, epos, _, _, _, body_len = unpack_entry(
                            chunk, i
                        )
                    else:
                        emagic, esize = unpack_filler(chunk, i)
                    if emagic == FILLER_MAGIC:
                        at = chunk_start + i
                        if esize < FILLER.size or at + esize > seg.end:
                            self.scan_error = f"DLedger filler at {at} of {esize} bytes"
                            return
                        if at + esize < seg.end:  # a filler inside a file: skip it
                            pos = at + esize
                            self.scan_end = pos
                            rolled = True
                            break
                        if self.files.find(seg.end) is None:
                            return
                        pos = seg.end
                        self.scan_end = pos
                        rolled = True
                        break
                    if emagic == 0 and esize == 0:
                        return
                    if i + (esize if esize > min_entry else min_entry) > n:
                        at = chunk_start + i
                        if esize <= hdr or at + esize > seg.end:
                            self.scan_error = (
                                f"DLedger entry at {at} of {esize} bytes (magic {emagic}) "
                                "does not fit its file"
                            )
                            return
                        if i == 0:
                            problem = self.claim_problem(seg.fd, seg.start, pos, esize)
                            if problem is not None:
                                self.scan_error = problem
                                return
                            chunk = self.files.pread_segment(seg, esize, pos - seg.start)
                            view = memoryview(chunk)
                            n = len(chunk)
                            if n < esize:
                                self.scan_error = f"DLedger entry at {pos} is truncated"
                                return
                            continue
                        break  # re-read from this entry
                    # DLedgerMmapFileStore.recover's checks (entry_problem says which failed)
                    if (
                        emagic != ENTRY_MAGIC
                        or epos != chunk_start + i
                        or esize != body_len + hdr
                        or body_len <= 0
                        or (last_index != -1 and eindex != last_index + 1)
                        or eterm < last_term
                    ):
                        self.scan_error = entry_problem(
                            emagic, esize, eindex, eterm, epos, body_len,
                            chunk_start + i, last_index, last_term,
                        )  # fmt: skip
                        return
                    if eindex > committed:
                        return  # past committedIndex: not messages (getCommittedPos)
                    last_index, last_term = eindex, eterm
                    r = i + hdr
                    total, magic = unpack_head(chunk, r)
                    if total != body_len:
                        self.scan_error = (
                            f"record of {total} bytes in a DLedger entry of bodyLen {body_len} "
                            f"(entry at {chunk_start + i})"
                        )
                        return
                else:
                    total, magic = unpack_head(chunk, i)
                if magic == MAGIC_BLANK and not dl:
                    # recoverNormally: a blank in the last file ends the scan at the blank
                    # (the next append overwrites it); otherwise go on in the next file.
                    if self.files.find(seg.end) is None:
                        return
                    pos = seg.end
                    self.scan_end = pos
                    rolled = True
                    break
                if total == 0 and magic == 0:
                    self.scan_error = None
                    return
                if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0:
                    self.scan_error = f"no record at {chunk_start + r} (magic 0x{magic:08X})"
                    return
                if r + total > n:
                    if chunk_start + r + total > seg.end:
                        self.scan_error = f"record at {chunk_start + r} runs past its segment"
                        return
                    if i == 0:
                        problem = self.claim_problem(seg.fd, seg.start, pos, total)
                        if problem is not None:
                            self.scan_error = problem
                            return
                        chunk = self.files.pread_segment(seg, total, pos - seg.start)
                        view = memoryview(chunk)
                        n = len(chunk)
                        if n < total:
                            self.scan_error = f"record at {pos} is truncated"
                            return
                        continue
                    break  # re-read from this record
                rec_end = r + total
                fields = None
                if total >= MIN_RECORD_SIZE:
                    (
                        _,
                        _,
                        crc,
                        queue_id,
                        _,
                        queue_offset,
                        phys,
                        sys_flag,
                        _,
                        _,
                        _,
                        _,
                        _,
                        _,
                        _,
                        _,
                        body_len,
                    ) = unpack_fixed(chunk, r)
                    if not sys_flag & _HOSTS_V6 and body_len >= 0:
                        p = r + FIXED_V4.size + body_len
                        if magic == last_magic and chunk.startswith(last_tail, p):
                            # the previous record's topic (length field + name)
                            topic = last_topic
                            q = p + len(last_tail)
                        else:
                            topic = None
                            if magic == MAGIC_V1:
                                tlen = chunk[p] if p < rec_end else -1
                                if tlen > MAX_TOPIC_LENGTH_V1:
                                    tlen -= 256  # a signed byte
                                t0 = p + TOPIC_LENGTH_SIZE_V1
                            else:
                                t0 = p + TOPIC_LENGTH_SIZE_V2
                                tlen = unpack_short(chunk, p)[0] if t0 <= rec_end else -1
                            q = t0 + tlen
                            if tlen >= 0 and q + PROPERTIES_LENGTH_SIZE <= rec_end:
                                traw = chunk[t0:q]
                                topic = topics.get(traw)
                                if topic is None:
                                    try:
                                        topic = traw.decode("utf-8")
                                    except UnicodeDecodeError:
                                        topic = None
                                    else:
                                        topics[traw] = topic
                                if topic is not None:
                                    last_tail, last_topic, last_magic = chunk[p:q], topic, magic
                        if topic is not None and q + PROPERTIES_LENGTH_SIZE <= rec_end:
                            plen = unpack_short(chunk, q)[0]
                            if (
                                plen >= 0
                                and q + PROPERTIES_LENGTH_SIZE + plen == rec_end
                                and not force_prop_crc
                                and chunk.find(_PROP_CRC, q + PROPERTIES_LENGTH_SIZE, rec_end) < 0
                            ):
                                fields = topic
                if fields is None:
                    try:  # anything unusual, or a layout error to report precisely
                        rec = decode_record(
                            chunk,
                            r,
                            check_crc=check_crc,
                            base_offset=chunk_start,
                            force_verify_prop_crc=force_prop_crc,
                        )
                    except CorruptRecordError as exc:  # named at its CommitLog offset
                        what = str(exc).rsplit(" (at offset ", 1)[0]
                        self.scan_error = f"{what} (at offset {chunk_start + r})"
                        return
                    yield (
                        chunk,
                        r,
                        rec.commitlog_offset,
                        total,
                        rec.topic,
                        rec.queue_id,
                        rec.queue_offset,
                        rec.sys_flag,
                    )
                else:
                    body_at = r + FIXED_V4.size
                    if check_crc and crc != (
                        _crc32(view[body_at : body_at + body_len]) & BODY_CRC_MASK
                    ):
                        self.scan_error = f"body CRC mismatch (record at {chunk_start + r})"
                        return
                    if phys != chunk_start + r:
                        self.scan_error = f"PHYSICALOFFSET {phys} != position {chunk_start + r}"
                        return
                    yield (chunk, r, phys, total, fields, queue_id, queue_offset, sys_flag)
                i = rec_end
                self.scan_end = chunk_start + i
            if not rolled:
                if n == 0 or (i == 0 and n < 8):
                    self.scan_error = f"segment file ends early at {chunk_start + i}"
                    return
                pos = chunk_start + i
                if pos >= stop:
                    break

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
        return True

    def truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on (recovery of a dirty tail)."""
        if not self.files.read_only:
            self.files.truncate_dirty(offset)
        self.max_offset = offset
        self.flushed_where = min(self.flushed_where, offset)

    def close(self) -> None:
        """Close the segment files."""
        self.files.close()
