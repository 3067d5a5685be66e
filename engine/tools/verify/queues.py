"""verify's ConsumeQueue checks: each file queue (``consumequeue/<topic>/<queueId>``, read with
the lenient :class:`engine.format.consumequeue.UnitFile`), each BatchCQ queue and each queue of
a RocksDB ConsumeQueue, unit by unit against the CommitLog's records (``ConsumeQueue.recover``
without its repairs).
"""

from __future__ import annotations

import bisect
import os
from array import array
from typing import TYPE_CHECKING

from ...errors import CorruptRecordError
from ...format.batchcq import BATCH_CQ_DIR, BatchConsumeQueue
from ...format.consumequeue import (
    BLANK_UNIT_SIZE,
    CQ_STORE_UNIT_SIZE,
    queue_dir_id,
    read_unit_file,
    store_file_size,
)
from ...format.rocksdbcq import RocksDBConsumeQueue, RocksDBConsumeQueues
from ...format.source import StoreSource
from ...service.storetree import rocksdb_consume_queue
from .commitlog import Records, record_index
from .listing import not_files, regular_files, segment_files
from .report import VerifyResult

if TYPE_CHECKING:
    from ...service.workprogress import ProgressFactory
    from ...storeconfig import StoreConfig


def check_consume_queues(
    root: str,
    res: VerifyResult,
    recs: Records,
    cfg: StoreConfig,
    progress: ProgressFactory,
    source: StoreSource,
) -> None:
    """Check every queue under ``root``: each ``consumequeue/<topic>/<queueId>`` directory
    (:func:`_check_queue`), or each queue of a RocksDB ConsumeQueue (local only), then the
    BatchCQ queues, each unit against the valid records ``recs`` (``ConsumeQueue.recover``,
    ``checkMessageAndReturnSize``'s dispatch request); queues the records have but no
    directory holds are lag (a warning: re-dispatched on open). ``progress`` gets one bar in
    queues. Raises OSError / ObjectStoreError from the source."""
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
    root: str, res: VerifyResult, recs: Records, seen: set, source: StoreSource
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
    base: str, res: VerifyResult, recs: Records, progress: ProgressFactory
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


def _check_queue(
    topic: str,
    qid: int,
    qdir: str,
    rel: str,
    res: VerifyResult,
    recs: Records,
    source: StoreSource,
) -> None:
    """Check one ConsumeQueue directory: its files' sizes and names, then each file (read whole
    through ``source``: a few MB) unit by unit against the records (:func:`_check_unit`)."""
    listed = segment_files(qdir, source)
    for n in not_files(qdir, listed, source):
        res.add(
            "error",
            "cq-name",
            f"{rel}/{n}",
            "not a regular file (RocketMQ refuses to load the queue)",
        )
        res.bad_queues.add(rel)
    names = regular_files(qdir, listed, source)
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
    end_q = _check_files(topic, qid, rel, files, fsize, res, recs, q, source)
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


def _check_files(
    topic: str,
    qid: int,
    rel: str,
    files: list[tuple[int, str, int]],
    fsize: int,
    res: VerifyResult,
    recs: Records,
    q: tuple[array, array, array, array] | None,
    source: StoreSource,
) -> int:
    """Check each file ``(start, path, size)`` of one queue, read whole (``fsize`` bytes, a few
    MB) through ``source`` by the lenient reader
    :func:`engine.format.consumequeue.read_unit_file`: every valid unit against the records
    (:func:`_check_unit`), the blank fillers before the first real unit skipped
    (``fillPreBlank``), and the damage the reader reports (an invalid unit followed by data,
    files with data after the queue's end) as ``cq-garbage``. Returns the queue offset where
    the units end."""
    first_real = None
    end_q = None
    for fi, (start, path, _) in enumerate(files):
        units = read_unit_file(path, fsize, source)
        frel = f"{rel}/{os.path.basename(path)}"
        qbase = start // CQ_STORE_UNIT_SIZE
        if end_q is not None:
            if units.holds_data():
                res.add(
                    "error",
                    "cq-garbage",
                    frel,
                    f"units after the end of the queue (queue offset {end_q})",
                    qbase,
                )
                res.bad_queues.add(rel)
            continue
        for i, (off, size, tc) in enumerate(units.units()):
            qoff = qbase + i
            if size == BLANK_UNIT_SIZE and off == 0 and first_real is None:
                continue  # fillPreBlank filler
            if first_real is None:
                first_real = qoff
            res.units += 1
            _check_unit(topic, qid, qoff, off, size, tc, frel, rel, res, recs, q)
        if units.ended:
            end_q = qbase + units.valid
            for i, what in units.problems():
                res.add("error", "cq-garbage", frel, what, qbase + i)
                res.bad_queues.add(rel)
        elif fi == len(files) - 1:
            end_q = qbase + units.count
    return files[-1][0] // CQ_STORE_UNIT_SIZE if end_q is None else end_q


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
    recs: Records,
    q: tuple[array, array, array, array] | None,
) -> None:
    if off < res.commitlog_min:
        return  # the record expired with its CommitLog file
    end = res.first_bad if res.first_bad is not None else res.commitlog_end
    if off >= end and record_index(recs, off) is None:
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
    j = record_index(recs, off)
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
