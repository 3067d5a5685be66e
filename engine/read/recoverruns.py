"""The records recovery checks, in batches: the compiled CommitLog walk (or DLedger entry walk,
``DLedgerCommitLog.checkMessageAndReturnSize``) and decoder, giving recovery
(:mod:`engine.service.recovery`, which cannot import this layer: the store hands it
:func:`recovery_runs`) each range's records as arrays (RocketMQ
``CommitLog.recoverAbnormally``: ``checkMessageAndReturnSize`` per record, then
``DefaultMessageStore.doDispatch``).

The runs stop before the first record this path cannot vouch for exactly as
:meth:`engine.format.commitlog.CommitLog.scan_raw` would: recovery walks on from there with
``scan_raw`` itself, record by record, which decides where the CommitLog ends and why
(tests/engine/test_recovery_batches.py compares the two walks on damaged stores).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CorruptRecordError
from ..format.commitlog import DEFAULT_FILE_SIZE, entry_resume
from ..format.dledger import WALK_LAYOUT
from ..format.indexfile import record_entries, topic_prefix_hash
from ..format.javahash import tags_code
from ..format.mappedfile import MappedFiles, SegmentMap
from ..format.message import (
    BODY_LENGTH_POSITION,
    BORNHOST_V6_FLAG,
    CRC32_RESERVED_LEN,
    HOST_V6_EXTRA,
    PROPERTY_CRC32,
    RECORD_SLACK,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    decode_record,
)
from ..service.recovery import RecordRun
from . import kernel
from .columnar import CommitLogWindow, commitlog_runs, decode_records
from .schema import int_values

if TYPE_CHECKING:  # annotations only: pyarrow is imported where a batch is built
    import pyarrow as pa

#: the columns recovery needs (engine.read.schema), decoded by the kernel
COLUMNS = ("topic", "queueId", "queueOffset", "sysFlag", "storeTimestamp", "tags", "bodyCRC")
#: bytes of CommitLog a range of the walk holds (a local file's mapping: no copy)
READ_SIZE = 16 << 20
#: a DLedger entry's header, before its record (bytes)
ENTRY_HEADER_SIZE = WALK_LAYOUT[0]
#: threads that decode the ranges the walk found, one a core up to 4 (the walk and recovery's
#: own checks run in the caller's thread)
DECODE_THREADS = max(1, min(4, os.cpu_count() or 1))
# the first 8 bytes of a __CRC32# trailer (prop_crc_status), as one big-endian integer
_TRAILER = int.from_bytes(PROPERTY_CRC32.encode()[:8], "big")
# TAGS value -> tagsCode (a pure function), bounded
_TAGS_CODES: dict[str, int] = {}


def recovery_runs(
    files: MappedFiles,
    start: int,
    check_crc: bool,
    max_message_size: int,
    committed: int | None = None,
    after: tuple[int, int] | None = None,
    index_after: int | None = None,
) -> Iterator[RecordRun]:
    """The records of a plain CommitLog from ``start`` (a record's or a segment's offset, bytes)
    in runs, or with ``committed`` (its checkpoint's committedIndex) those of a DLedger
    CommitLog from an entry's offset, following the entry ``after`` (index, term; None: the
    first walked) (:class:`engine.service.recovery.RecordRun`: the records
    of one range as arrays, each record checked as
    :meth:`engine.format.commitlog.CommitLog.scan_raw` checks it: magic, TOTALSIZE, layout,
    PHYSICALOFFSET, BODYCRC when ``check_crc`` (``checkCRCOnRecover``), the ``__CRC32#``
    property when present and ``check_crc``; a DLedger entry's header as well).

    The walk is :func:`engine.read.columnar.commitlog_runs` (the compiled step, ``walk_segment``'s
    rules), or :func:`entry_runs` for a DLedger CommitLog, the decode
    :func:`engine.read.columnar.decode_records`. The runs end, without an
    error, before the first record (or header) that the walk or the decoder refuses, that
    claims more than ``max_message_size`` + 64 KiB (``scan_raw`` reads such a claim only when
    no hole lies under it), or that has an empty body and a BODYCRC other than 0 (the kernel
    checks no empty body; ``scan_raw`` does): the caller walks on from the end of the last
    record with ``scan_raw``, which says where the data ends and why. With ``index_after``
    (a CommitLog offset, bytes) each run carries the IndexFile entries of its records past it
    (``RecordRun.index_entries``, :func:`index_entries`). The ranges the walk
    finds are decoded in :data:`DECODE_THREADS` threads while it goes on (at most that many
    ranges ahead), and the runs are given in CommitLog order; what the walk meets past a run
    that stopped (a file it cannot read) is never raised. Needs the compiled kernel
    (``engine.read.kernel.load``); without one the store hands recovery no batches.

    Raises:
        OSError: a file could not be read (before the runs stopped).
    """
    claim = max_message_size + RECORD_SLACK
    # a record's claim: a DLedger entry's is its header's more (scan_raw judges the entry's)
    record_claim = claim - (ENTRY_HEADER_SIZE if committed is not None else 0)
    # The walk goes on ahead while the ranges before it are decoded in DECODE_THREADS threads
    # (the compiled decoder and numpy's large steps release the GIL); runs come out in
    # CommitLog order, and nothing after a run that stopped is given.
    pending: deque[Future[tuple[RecordRun | None, bool]]] = deque()
    last = False  # the walk ended: the data ends, a claim too large, or a record it refuses
    failed: Exception | None = None  # how the walk ended, raised once the runs before it are
    with ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="rmqfs-recover") as pool:
        walk = (
            _plain_runs(files, start)
            if committed is None
            else entry_runs(files, start, committed, claim, after)
        )
        try:
            while True:
                while not last and len(pending) <= DECODE_THREADS:
                    try:
                        window, offs, sizes, entries = next(walk)
                    except StopIteration:
                        last = True
                        break
                    except Exception as exc:  # noqa: BLE001 - raised in order, below
                        failed, last = exc, True
                        break
                    over = sizes > record_claim
                    k = int(np.argmax(over)) if over.any() else len(offs)
                    if k:
                        if entries is not None:
                            entries = entries[:k]
                        pending.append(
                            pool.submit(
                                _decode,
                                window,
                                offs[:k],
                                sizes[:k],
                                check_crc,
                                entries,
                                index_after,
                            )
                        )
                    if k < len(offs):
                        last = True
                if not pending:
                    if failed is not None and not isinstance(failed, CorruptRecordError):
                        raise failed  # OSError: as the walk in this thread would have
                    return  # CorruptRecordError: the walk refuses what follows: scan_raw names it
                run, stop = pending.popleft().result()
                if run is not None:
                    yield run
                if stop:
                    return
        finally:
            walk.close()
            for f in pending:
                f.cancel()


#: what a walk gives :func:`recovery_runs`: a window, the records' offsets and sizes, and their
#: DLedger entries' index and term (None for a plain CommitLog)
Walked = tuple[CommitLogWindow, np.ndarray, np.ndarray, "np.ndarray | None"]


def _plain_runs(files: MappedFiles, start: int) -> Generator[Walked, None, None]:
    """:func:`engine.read.columnar.commitlog_runs` over a writer's own file list, as
    :data:`Walked` items."""
    walk = commitlog_runs(files, start, None, READ_SIZE, refresh=False)
    try:
        for window, offs, sizes in walk:
            yield window, offs, sizes, None
    finally:
        walk.close()


def entry_runs(
    files: MappedFiles,
    start: int,
    committed: int,
    claim: int,
    after: tuple[int, int] | None = None,
    read_size: int | None = None,
) -> Generator[Walked, None, None]:
    """The records of a DLedger CommitLog from the entry at ``start`` (bytes) up to the entry of
    index ``committed`` (committedIndex), as :func:`engine.read.columnar.commitlog_runs` gives a
    plain CommitLog's: ``(window, offsets, sizes, entries)``, each record's offset (its
    entry's + 48), TOTALSIZE and entry index and term (shape ``(n, 2)``), of the whole entries
    that start in one range of ``read_size`` bytes (default :data:`READ_SIZE`, looked up at the
    call; an entry the range cuts is read again from
    its start with the next). The entry at ``start`` must follow the entry ``after`` (index,
    term; None: it is the first walked).

    One step per entry, compiled (``Kernel.walk_entries``: ``scan_raw``'s ``entry_step`` and
    ``record_step``, ``DLedgerMmapFileStore.recover``'s checks, the index and term carried from
    entry to entry and over fillers): a filler that ends a file's data goes on at the next file,
    one inside a file after it. Anything else ends the runs without an error (zeros, damage, an
    entry past ``committed``, one claiming more than ``claim`` + 48 bytes, a file missing):
    ``scan_raw`` walks on from there and says why. ``claim``: the most bytes an entry may
    claim here (scan_raw reads a larger one only when no hole lies under it). Raises OSError
    from the files."""
    k = kernel.load()
    assert k is not None  # the store checked (recovery_runs needs the kernel)
    read_size = READ_SIZE if read_size is None else read_size
    state = list(after) if after is not None else [-1, -1]
    fs = files.file_size or DEFAULT_FILE_SIZE
    pos, need = start, 0
    while True:
        seg = files.find(pos)
        if seg is None:
            return
        want = min(seg.end, max(pos + read_size, pos + need))
        got = files.span(pos, want)
        if got is None:
            return
        buf, base = got
        lo, hi = pos - base, min(len(buf), want - base)
        if hi <= lo:
            return
        arr = np.frombuffer(buf, np.uint8, hi - lo, lo)
        starts, sizes, entries, kind, at = k.walk_entries(arr, pos, committed, state)
        del arr  # a mapping is never held past the walk
        if len(starts):
            yield CommitLogWindow(buf, base, fs), starts + pos, sizes, entries
        if kind == "end":
            pos, need = base + hi, 0
            continue
        # a filler, an entry the range cut, or what scan_raw must judge (format's rules)
        step, value = entry_resume(kind, buf, lo + at, pos + at, seg.end, claim)
        if step == "next":
            pos, need = value, 0
        elif step == "read" and (at or need < value):
            pos, need = pos + at, value  # the next range holds it whole
        else:  # scan_raw judges it (or the file's bytes end before the entry: damage)
            return


def _decode(
    window: CommitLogWindow,
    offs: np.ndarray,
    sizes: np.ndarray,
    check_crc: bool,
    entries: np.ndarray | None = None,
    index_after: int | None = None,
) -> tuple[RecordRun | None, bool]:
    """``(run, stopped)``: the records of ``offs`` that pass every check, as a run (None when
    none does), and whether one did not (the run is then the records before it); ``entries``:
    their DLedger entries' index and term, None for a plain CommitLog; ``index_after``: the
    run carries the index entries of its records past this offset (None: none)."""
    try:
        batch = decode_records(window, offs, sizes, COLUMNS, check_crc)
    except CorruptRecordError as exc:
        k = 0 if exc.offset is None else int(np.searchsorted(offs, exc.offset))
        k = min(k, len(offs) - 1)  # an offset past the records: fewer of them, never the same
        if not k:
            return None, True
        offs, sizes = offs[:k], sizes[:k]
        entries = entries[:k] if entries is not None else None
        return _decode(window, offs, sizes, check_crc, entries, index_after)[0], True
    bad = _doubtful(window.data, window.base, offs, sizes, batch, check_crc)
    if bad < len(offs):
        if not bad:
            return None, True
        entries = entries[:bad] if entries is not None else None
        run = _run(window, offs[:bad], sizes[:bad], batch.slice(0, bad), entries, index_after)
        return run, True
    return _run(window, offs, sizes, batch, entries, index_after), False


def _doubtful(
    data: SegmentMap | bytes,
    base: int,
    offs: np.ndarray,
    sizes: np.ndarray,
    batch: pa.RecordBatch,
    check_crc: bool,
) -> int:
    """The index of the first record that ``scan_raw`` may refuse though the decoder took it
    (``len(offs)`` when none): with ``check_crc``, an empty body whose BODYCRC is not 0, or a
    ``__CRC32#`` trailer (where ``engine.format.message.prop_crc_status`` looks for it) that
    ``decode_record`` refuses, checked in place as ``scan_raw`` checks such a record."""
    n = len(offs)
    if not check_crc:
        return n
    rel = offs - base
    crc = int_values(batch.column(COLUMNS.index("bodyCRC")))
    bad = np.zeros(n, bool)
    maybe = np.flatnonzero(crc != 0)
    if len(maybe):  # bodyLength of each, read in place (after its hosts: body_length_position)
        flags = int_values(batch.column(COLUMNS.index("sysFlag")))[maybe]
        at = rel[maybe] + BODY_LENGTH_POSITION
        at += HOST_V6_EXTRA * ((flags & BORNHOST_V6_FLAG) != 0)
        at += HOST_V6_EXTRA * ((flags & STOREHOSTADDRESS_V6_FLAG) != 0)
        bad[maybe] = _at(data, at, ">i4") == 0
    ends = rel + sizes - CRC32_RESERVED_LEN
    trailer = np.flatnonzero(
        (sizes >= CRC32_RESERVED_LEN) & (_at(data, ends, ">u8") == _TRAILER)
    ).tolist()
    first = int(np.argmax(bad)) if bad.any() else n
    for i in trailer:
        if i >= first:
            break
        try:
            decode_record(data, int(rel[i]), check_crc=True, base_offset=base)
        except CorruptRecordError:
            return i
    return first


def _at(data: SegmentMap | bytes, pos: np.ndarray, dtype: str) -> np.ndarray:
    """The big-endian integers of ``dtype`` at byte positions ``pos`` of ``data`` (a copy)."""
    width = np.dtype(dtype).itemsize
    view = np.ndarray((len(data) - width + 1,), dtype, data, 0, (1,))
    try:
        return view[pos]
    finally:
        del view  # a mapping is never held past the read


def _run(
    window: CommitLogWindow,
    offs: np.ndarray,
    sizes: np.ndarray,
    batch: pa.RecordBatch,
    entries: np.ndarray | None = None,
    index_after: int | None = None,
) -> RecordRun:
    """The :class:`RecordRun` of decoded records (tags as tagsCodes, topics as indices;
    ``entries``: a DLedger CommitLog's entry index and term of each; ``index_after``: the
    index entries of the records past it, :func:`index_entries`)."""
    cols = {name: batch.column(i) for i, name in enumerate(COLUMNS)}
    topics = cols["topic"].dictionary_encode()
    tags = cols["tags"].dictionary_encode()
    codes = np.zeros(len(tags.dictionary) + 1, np.int64)
    for j, t in enumerate(tags.dictionary.to_pylist()):
        tc = _TAGS_CODES.get(t)
        if tc is None:
            tc = tags_code(t)
            if len(_TAGS_CODES) < 4096:
                _TAGS_CODES[t] = tc
        codes[j] = tc
    tag_index = int_values(tags.indices, len(tags.dictionary))  # none: 0 (codes[-1])
    names = topics.dictionary.to_pylist()
    topic_index = int_values(topics.indices)
    store_ts = int_values(cols["storeTimestamp"])
    keyed = None
    if index_after is not None:
        keyed = index_entries(window, offs, store_ts, names, topic_index, index_after)
    return RecordRun(
        window.data,
        window.base,
        offs,
        sizes,
        names,
        topic_index,
        int_values(cols["queueId"]),
        int_values(cols["queueOffset"]),
        int_values(cols["sysFlag"]),
        store_ts,
        codes[tag_index],
        entries,
        keyed,
    )


#: records of a run whose index entries :func:`index_entries` takes from the decoder before it
#: leaves the run to be dispatched record by record
DECODED_MAX = 64


def index_entries(
    window: CommitLogWindow,
    offs: np.ndarray,
    store_ts: np.ndarray,
    topics: list[str],
    topic_index: np.ndarray,
    after: int,
) -> np.ndarray | None:
    """The IndexFile entries of the records at ``offs`` past the CommitLog offset ``after``,
    flat int64 ``[keyHash, phyOffset, storeTimestamp, ...]`` in CommitLog order, as
    ``IndexService.buildIndex`` adds them when the records are dispatched
    (``engine.read.kernel.Kernel.index_keys``). A record the compiled core reads differently
    from the decoder (its properties not strict UTF-8: only a damaged or hostile store has
    them, Java writes UTF-8) gets the entries ``IndexService.dispatch`` gives it decoded
    (:func:`engine.format.indexfile.record_entries`), and the compiled core goes on after it:
    one such record in every run costs one decode each, not the run's records one by one.
    None without the compiled core, for a record the decoder refuses too, or past
    :data:`DECODED_MAX` such records in the run (each costs a call on the rest of the run):
    recovery then dispatches that run's records one by one."""
    k = kernel.load()
    if k is None:
        return None
    sel = np.flatnonzero(offs > after)
    if not len(sel):
        return np.empty(0, np.int64)
    prefix = np.array([topic_prefix_hash(t) for t in topics] or [0], dtype=np.uint32)
    picked, ts, ph = offs[sel], store_ts[sel], prefix[topic_index[sel]]
    pos = picked - window.base
    parts = []
    done = 0  # records of picked whose entries are in parts
    decoded = 0  # records of them the decoder read
    while True:  # (slices of the arrays are views: no copy a call)
        got, bad = k.index_keys(window.data, pos[done:], picked[done:], ts[done:], ph[done:])
        parts.append(got)
        done += bad
        if done == len(picked):
            return np.concatenate(parts) if len(parts) > 1 else got
        if decoded == DECODED_MAX:  # a run of such records: one by one is cheaper
            return None
        decoded += 1
        off = int(picked[done])
        try:
            rec = decode_record(window.data, off - window.base, check_crc=False)
        except CorruptRecordError:  # (lengths the core refused): the run record by record
            return None
        if rec.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK_TYPE:
            one = record_entries(int(ph[done]), rec.uniq_key, rec.keys, off, int(ts[done]))
            parts.append(np.array(one, np.int64))
        done += 1
