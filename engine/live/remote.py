"""A snapshot in object storage, read in place: planned from its manifest, CommitLog ranges in
large range reads.

A snapshot uploaded with ``rmqfs snapshot-upload`` (or copied by another tool from
``MNT/snapshots/NAME``) lies at a *location* (:mod:`engine.live.location`: ``s3://...``,
``gs://``, ``hdfs://``, ``file://``) as its files and ``SNAPSHOT.json``
(:mod:`engine.live.snapshot`). :class:`RemoteSnapshot` reads it where it is, through the store
source a mount reads it through (:class:`engine.live.objectsource.ObjectSource`: ``pyarrow.fs``
range reads, one GET each on S3, each under a bounded timeout), here without a block cache, for
the ``rocketmq`` Spark data source:

- **Planning from the manifest, never a listing.** Topics, queue ids and each queue's min and
  max offset are the manifest's ``queues`` table (``getMinOffsetInQueue`` /
  ``getMaxOffsetInQueue`` at the freeze); the CommitLog files and their sizes and crc32c are its
  ``files``. A queue offset's unit is one 20-byte range read of its ConsumeQueue file (the
  search by time, :func:`engine.format.consumequeue.search_by_time`, and the CommitLog range a
  query needs: :meth:`RemoteSnapshot.commitlog_span`).
- **Reading in CommitLog order.** Object storage pays per request (S3: tens of ms to first
  byte, 8-16 MB range GETs recommended): following each queue's units would be a GET per
  message, or, coalesced, every queue's task reading the whole interleaved CommitLog. The reader
  instead reads each CommitLog file's needed range in :data:`REQUEST` byte range reads (a
  record a read cuts is read again whole with the next: at most one record's bytes twice),
  through the store's one CommitLog walk and decoder, as for local files
  (:func:`engine.read.columnar.decode_commitlog` over the snapshot's files as
  :class:`engine.format.mappedfile.MappedFiles` of the source), and keeps what the
  ConsumeQueues hold: RocketMQ's own dispatch
  (``ReputMessageService.doReput``, ``CommitLogDispatcherBuildConsumeQueue.dispatch``) makes a
  unit for every record of a plain store but PREPARED and ROLLBACK transaction records, so the
  rows of queue ``(topic, queueId)`` at queue offsets ``[start, end)`` are the records with
  that TOPIC, QUEUEID and QUEUEOFFSET whose transaction type is NOT or COMMIT
  (:func:`select_rows`). A snapshot is cut at a record boundary with every record before it
  dispatched (its ``commitLogOffset``), so nothing past it is read.
- **Zeros not fetched.** A file's bytes past its manifest ``stored`` prefix (what
  ``snapshot-upload`` sends of it: a live segment up to the cut, a ConsumeQueue file up to its
  last unit) are zeros, never asked of the server (:meth:`RemoteSnapshot.read`).
- **Checked.** Every record's layout and BODYCRC as on local files; a CommitLog file read whole
  (the range from its start to its end, or to the snapshot's cut with zeros after) is summed
  by the source as its bytes arrive and compared with the manifest's crc32c
  (:meth:`engine.live.objectsource.ObjectSource.check_sum`), and a mismatch fails naming the
  file. A file gone
  from the location, a server that stops answering (each request waits at most
  :data:`engine.live.objectsource.DEFAULT_TIMEOUT` seconds), refused credentials: an
  :class:`engine.errors.ObjectStoreError` naming the file and the location; no partial result
  is returned as complete.

Not read this way: LMQ queues (their units point at other topics' records,
``multiDispatchLmqQueue``), BatchCQ and RocksDB ConsumeQueues and DLedger CommitLogs (which a
snapshot never holds: ``engine.live.snapshot.freeze`` refuses them).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import (
    CorruptRecordError,
    ObjectStoreError,
    OffsetOutOfRangeError,
    UnsupportedLayoutError,
)
from ..format.config import ConsumerOffsetManager, TopicConfigManager, loads_fastjson
from ..format.consumequeue import BLANK_UNIT_SIZE, CQ_STORE_UNIT_SIZE, UNIT, search_by_time
from ..format.mappedfile import MappedFiles
from ..format.message import (
    STORE_TIMESTAMP_END_MAX,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    is_lmq,
    read_store_timestamp,
)
from ..read.columnar import decode_commitlog
from ..read.schema import arrow_schema
from .manifest import MANIFEST_NAME, Manifest
from .objectsource import ObjectSource

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "REQUEST",
    "RemoteSnapshot",
    "Piece",
    "RequestStats",
    "SnapshotProgress",
    "select_rows",
]

#: Bytes per CommitLog range read: S3's guidance is 8-16 MB byte-range GETs; a record longer
#: than what is left of a read is read whole with the next one.
REQUEST = 16 << 20
#: Rows of a decoded batch (at most; fewer where a range's records end)
BATCH_ROWS = 32768
#: Small range reads (units, record headers) in flight at once while planning.
PLAN_THREADS = 16
_SEGMENT = re.compile(r"commitlog/([0-9]{20})\Z")  # ASCII digits: \d takes other scripts'
_QUEUE_FILE = re.compile(r"consumequeue/([^/]+)/(0|[1-9][0-9]{0,9})/([0-9]{20})\Z")
#: The largest config file read from a snapshot (``consumerOffset.json`` of a big broker is a
#: few MB).
MAX_CONFIG = 64 << 20
#: the columns the selection needs from every record (besides those asked for)
SELECT_COLUMNS = ("topic", "queueId", "queueOffset", "sysFlag")


@dataclass
class RequestStats:
    """Range reads made and bytes they returned (``bench/objectstore.py`` reports them)."""

    requests: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class Piece:
    """One CommitLog file's range ``[start, end)`` to read (absolute CommitLog offsets, bytes;
    ``start`` a record boundary), from a snapshot's file ``rel`` of ``file_size`` bytes starting
    at CommitLog offset ``file_start``. ``whole``: the piece covers the file whole (from its
    start to its end, or to the snapshot's cut, where zeros follow), so the read has the
    source check the file's sum against the manifest's crc32c."""

    rel: str
    file_start: int
    file_size: int
    start: int
    end: int
    whole: bool = False


class RemoteSnapshot:
    """A snapshot at ``location`` (a URI ``pyarrow.fs.FileSystem.from_uri`` accepts, or a
    local path), read in place (see the module docstring).

    Attributes:
        manifest: the ``SNAPSHOT.json`` object.
        broker_name: its ``brokerName`` (the mount's), or None.
        commitlog_offset: the snapshot's cut (``commitLogOffset``): every record before it is
            dispatched, none after is in the snapshot.
        stats: the range reads made through this object.

    Raises:
        ObjectStoreError: the location cannot be read (server unreachable, credentials refused;
            :func:`engine.live.location.explain` says which), holds no ``SNAPSHOT.json`` (not
            a snapshot, or one being uploaded: the manifest is written last), or its manifest
            has no ``queues`` table (made before rmqfs wrote one: take a new snapshot).
        UnsupportedLayoutError: it holds a layout this reader does not read (BatchCQ).
    """

    def __init__(self, location: str) -> None:
        self.location = location
        #: the location's bytes (engine.live.objectsource: the store source a mount reads a
        #: snapshot through), read here without a block cache: each range read once
        self.source = ObjectSource(location, None)
        self.where = self.source.where
        #: the snapshot's CommitLog files, read through :attr:`source` by range
        self._commitlog = MappedFiles(f"{self.source.root}/commitlog", source=self.source)
        self._load(self.source.manifest)

    @property
    def stats(self) -> RequestStats:
        """The range reads made through this object (planning and pieces)."""
        s = self.source.stats
        return RequestStats(s.misses, s.fetched_bytes)

    # -- the manifest ---------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Read the location's manifest again (a newer snapshot uploaded to the same location);
        True when it changed. Raises as the constructor."""
        if not self.source.refresh():
            return False
        self._load(self.source.manifest)
        return True

    def _load(self, doc: Manifest) -> None:
        # Everything is held as arrays beside the manifest's own (engine/live/manifest.py): a
        # manifest of a million files or queues costs tens of MB here, not GBs.
        if doc.queues is None:
            raise ObjectStoreError(
                f"{self.where}: {MANIFEST_NAME} has no queues table (a snapshot made before "
                "rmqfs recorded one): take a new snapshot and upload it"
            )
        files = doc.files
        queues = doc.queues
        tix = {t: i for i, t in enumerate(queues.topic_names)}
        segments: list[tuple[int, str, int]] = []
        qkeys: list[int] = []
        qstarts: list[int] = []
        qfiles: list[int] = []
        for i in range(len(files)):
            rel = files.name(i)
            if rel.startswith("batchconsumequeue/"):
                raise UnsupportedLayoutError(
                    f"{self.where}: holds BatchConsumeQueues, which rmqfs does not read from "
                    "object storage; download it (rmqfs snapshot-download) and read the copy"
                )
            m = _SEGMENT.match(rel)
            if m:
                segments.append((int(m.group(1)), rel, int(files.sizes[i])))
                continue
            m = _QUEUE_FILE.match(rel)
            if m:
                t = tix.get(m.group(1))
                if t is not None and int(m.group(2)) <= 0x7FFFFFFF:
                    qkeys.append((t << 32) | int(m.group(2)))
                    qstarts.append(int(m.group(3)))
                    qfiles.append(i)
        self.manifest = doc
        name = doc.get("brokerName")
        self.broker_name: str | None = name if isinstance(name, str) and name else None
        self.commitlog_offset = int(doc.get("commitLogOffset") or 0)
        self._queues = queues
        self._tix = tix
        self._segments = sorted(segments)
        self._seg_starts = [s[0] for s in self._segments]
        order = np.lexsort((np.array(qstarts, np.int64), np.array(qkeys, np.int64)))
        self._qf_keys = np.array(qkeys, np.int64)[order]
        self._qf_starts = np.array(qstarts, np.int64)[order]
        self._qf_files = np.array(qfiles, np.int64)[order]

    def _queue_files(self, topic: str, queue_id: int) -> Iterator[tuple[int, str, int]]:
        """``(first byte, rel, size)`` of each ConsumeQueue file of a queue, in order."""
        t = self._tix.get(topic)
        if t is None or not 0 <= queue_id <= 0x7FFFFFFF:
            return
        key = (t << 32) | queue_id
        a, b = np.searchsorted(self._qf_keys, [key, key + 1])
        files = self.manifest.files
        for j in range(int(a), int(b)):
            i = int(self._qf_files[j])
            yield int(self._qf_starts[j]), files.name(i), int(files.sizes[i])

    @property
    def identity(self) -> tuple:
        """``(name, time)`` of the snapshot this object reads now."""
        return (self.manifest.get("name"), self.manifest.get("time"))

    # -- layout and offsets (what engine.read.columnar.StoreFiles answers for a directory) ----
    def topics(self) -> list[str]:
        """Topics with a queue in the snapshot, sorted."""
        return self._queues.topics()

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` in the snapshot, sorted."""
        return self._queues.queue_ids(topic)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """``getMinOffsetInQueue`` at the freeze (0 for a queue not in the snapshot)."""
        return (self._queues.span(topic, queue_id) or (0, 0))[0]

    def max_offset(self, topic: str, queue_id: int) -> int:
        """``getMaxOffsetInQueue`` at the freeze (0 for a queue not in the snapshot)."""
        return (self._queues.span(topic, queue_id) or (0, 0))[1]

    def unit(self, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int]:
        """``(commitLogOffset, size, tagsCode)`` of one unit: a 20-byte range read of its
        ConsumeQueue file. Raises IndexError outside ``[min, max)``, ObjectStoreError."""
        lo, hi = self._queues.span(topic, queue_id) or (0, 0)
        if not lo <= queue_offset < hi:
            raise IndexError(queue_offset)
        at = queue_offset * CQ_STORE_UNIT_SIZE
        for start, rel, size in self._queue_files(topic, queue_id):
            if start <= at < start + size:
                raw = self.read(rel, at - start, CQ_STORE_UNIT_SIZE)
                if len(raw) != CQ_STORE_UNIT_SIZE:
                    raise ObjectStoreError(f"{self.where}: {rel} ends before unit {queue_offset}")
                return UNIT.unpack(raw)
        raise ObjectStoreError(
            f"{self.where}: no ConsumeQueue file of {topic}/{queue_id} holds unit {queue_offset}"
        )

    def store_timestamp(self, offset: int, size: int | None = None) -> int:
        """STORETIMESTAMP (epoch ms) of the record at CommitLog ``offset`` (one range read).
        Raises CorruptRecordError when no record is there."""
        seg = self._segment_of(offset)
        if seg is None:
            raise CorruptRecordError("record not in the snapshot's CommitLog", offset)
        start, rel, _ = seg
        head = self.read(rel, offset - start, STORE_TIMESTAMP_END_MAX)
        try:
            return read_store_timestamp(head, 0)
        except Exception:  # noqa: BLE001 - struct.error: the file ends inside the header
            raise CorruptRecordError("record header cut short", offset) from None

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """``getOffsetInQueueByTime``: the first queue offset stored at or after ``timestamp``
        (epoch ms), or the max offset (:func:`engine.format.consumequeue.search_by_time` over
        range reads: about two small reads per halving)."""
        return search_by_time(
            lambda i: self.unit(topic, queue_id, i),
            timestamp,
            self.store_timestamp,
            self.min_offset(topic, queue_id),
            self.max_offset(topic, queue_id),
        )

    def commitlog_span(self, bounds: dict[tuple[str, int], tuple[int, int]]) -> tuple[int, int]:
        """The CommitLog range ``[lo, hi)`` holding the records of queue offsets
        ``{(topic, queueId): (start, end)}``: from the first start's record to the end of the
        last end's (two unit reads per queue, :data:`PLAN_THREADS` at a time). Blank filler
        units stand for no record: the nearest real one inward is used. ``(0, 0)`` when no
        queue has a unit in its range."""

        def ends(item: tuple[tuple[str, int], tuple[int, int]]) -> tuple[int, int] | None:
            (topic, q), (start, end) = item
            i = start
            while i < end:
                off, size, _ = self.unit(topic, q, i)
                if size != BLANK_UNIT_SIZE:
                    break
                i += 1
            else:
                return None
            j = end - 1
            while True:
                last, lsize, _ = self.unit(topic, q, j)
                if lsize != BLANK_UNIT_SIZE:
                    return off, last + lsize
                j -= 1

        items = [(k, v) for k, v in bounds.items() if v[1] > v[0]]
        with ThreadPoolExecutor(PLAN_THREADS) as pool:
            found = [x for x in pool.map(ends, items) if x is not None]
        if not found:
            return 0, 0
        return min(a for a, _ in found), max(b for _, b in found)

    def pieces(self, lo: int, hi: int) -> list[Piece]:
        """The CommitLog files' parts of ``[lo, hi)`` (bytes; ``lo`` a record boundary), one
        :class:`Piece` per file, cut at the snapshot's cut (``whole`` where it covers its
        file)."""
        hi = min(hi, self.commitlog_offset)
        out = []
        for start, rel, size in self._segments:
            a, b = max(lo, start), min(hi, start + size)
            if a >= b:
                continue
            whole = a == start and b == min(start + size, self.commitlog_offset)
            out.append(Piece(rel, start, size, a, b, whole))
        return out

    def _segment_of(self, offset: int) -> tuple[int, str, int] | None:
        i = bisect.bisect_right(self._seg_starts, offset) - 1
        if i >= 0 and offset < self._segments[i][0] + self._segments[i][2]:
            return self._segments[i]
        return None

    # -- reading ----------------------------------------------------------------------------------
    def read(self, rel: str, offset: int, length: int) -> bytes:
        """``length`` bytes of file ``rel`` from ``offset`` (fewer at its end, the manifest's
        ``size``): one range read of the part inside the file's stored prefix
        (:func:`engine.live.snapshot.stored_size`), then zeros up to the end asked for, through
        :meth:`engine.live.objectsource.ObjectSource.pread` (each request under its timeout).

        Raises:
            ObjectStoreError: the file is gone (a newer snapshot at the location expired it),
                the read failed or timed out (server unreachable, credentials refused), or the
                object is shorter than its manifest says; named.
        """
        try:
            return self.source.pread(f"{self.source.root}/{rel}", length, offset)
        except FileNotFoundError:
            raise ObjectStoreError(f"{rel} of {self.where}: not in its {MANIFEST_NAME}") from None

    def holds(self, rel: str) -> bool:
        """Whether the snapshot's manifest names the file ``rel`` (a CommitLog file a newer
        upload left out: it expired since an older snapshot was planned from)."""
        return rel in self.manifest.files

    def read_piece(
        self,
        piece: Piece,
        bounds: dict[tuple[str, int], tuple[int, int]],
        tags: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        check_crc: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``piece`` that queues ``{(topic, queueId): (start, end)}`` hold at those
        queue offsets (:func:`select_rows`; ``tags``: only those TAGS), as Arrow record batches
        of ``columns`` (None: every column of :func:`engine.read.schema.arrow_schema`), in
        CommitLog order: the store's one CommitLog walk and decoder
        (:func:`engine.read.columnar.decode_commitlog`) over the snapshot's files, read
        :data:`REQUEST` bytes at a time. A piece that covers its file whole has the file's sum
        checked (:meth:`engine.live.objectsource.ObjectSource.check_sum`: the rest of the file
        past the records is read for it).

        Raises:
            CorruptRecordError: a record is damaged, the data ends before the piece's end, or
                the file read whole does not have the manifest's crc32c (named).
            ObjectStoreError: as :meth:`read`.
        """
        names = tuple(arrow_schema().names) if columns is None else tuple(columns)
        need = tuple(dict.fromkeys((*names, *SELECT_COLUMNS, *(("tags",) if tags else ()))))
        chooser = _Chooser(bounds, tags)
        walk = decode_commitlog(
            self._commitlog, piece.start, piece.end, BATCH_ROWS, need, None, check_crc,
            REQUEST, exact_end=True,
        )  # fmt: skip
        try:
            for batch in walk:
                keep = chooser.select(batch)
                if keep.all():
                    yield batch.select(list(names))
                elif keep.any():
                    import pyarrow as pa

                    yield batch.filter(pa.array(keep)).select(list(names))
        except CorruptRecordError as exc:
            if str(exc).startswith(piece.rel):  # the source's: names the file already
                raise
            named = CorruptRecordError(f"{piece.rel} of {self.where}: {exc}")
            named.offset = exc.offset
            raise named from None
        if piece.whole:
            self.source.check_sum(f"{self.source.root}/{piece.rel}", REQUEST)

    def close(self) -> None:
        """Close the open files and the request threads."""
        self._commitlog.close()
        self.source.close()

    def __enter__(self) -> RemoteSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stamp:
    """A message's store time (what :func:`engine.live.progress.consumer_progress` asks of a
    message)."""

    def __init__(self, store_timestamp: int) -> None:
        self.store_timestamp = store_timestamp


class SnapshotProgress:
    """A snapshot in object storage as :func:`engine.live.progress.consumer_progress` reads a
    store (:class:`engine.live.progress.ProgressSource`): its ``config/consumerOffset.json``
    and ``config/topics.json`` (read once, at most :data:`MAX_CONFIG` bytes each), the queues
    and offsets of its manifest, a message's store time from two range reads.

    Raises:
        ObjectStoreError: a config file cannot be read or is not its JSON.
    """

    def __init__(self, snap: RemoteSnapshot) -> None:
        self.snap = snap
        offsets = self._config("consumerOffset.json", ConsumerOffsetManager.parse)
        topics = self._config("topics.json", TopicConfigManager.parse)
        # raw tables given: no file is read or written (the offsets are only looked at)
        self.consumer_offsets = ConsumerOffsetManager("", raw=offsets)
        self._configs = TopicConfigManager("", raw=topics)
        self._topics = set(self._configs.topics) | set(snap.topics())

    def _config(self, name: str, parse: Callable[[object], object]) -> dict[str, Any]:
        rel = f"config/{name}"
        entry = self.snap.manifest.files.get(rel)
        if entry is None:
            return {}
        size = entry.size
        if size > MAX_CONFIG:
            raise ObjectStoreError(f"{rel} of {self.snap.where}: over {MAX_CONFIG} bytes")
        try:
            raw = loads_fastjson(self.snap.read(rel, 0, size).decode("utf-8")) if size else {}
            parse(raw)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ObjectStoreError(f"{rel} of {self.snap.where}: {exc}") from None
        return raw if isinstance(raw, dict) else {}

    def groups(self) -> list[str]:
        """Groups with committed offsets, sorted."""
        return sorted(self.consumer_offsets.groups())

    def topic_names(self) -> list[str]:
        """Topics configured or holding a queue in the snapshot."""
        return sorted(self._topics)

    def queue_ids(self, topic: str) -> list[int]:
        """The topic's queues in the snapshot."""
        return self.snap.queue_ids(topic)

    def read_queue_nums(self, topic: str) -> int | None:
        """The topic's ``readQueueNums`` in the snapshot's topics.json (None: not there)."""
        cfg = self._configs.get(topic)
        return None if cfg is None else cfg.consumed_queue_nums

    def min_offset(self, topic: str, queue_id: int) -> int:
        """``getMinOffsetInQueue`` of the snapshot."""
        return self.snap.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """``getMaxOffsetInQueue`` of the snapshot."""
        return self.snap.max_offset(topic, queue_id)

    def get_message(self, topic: str, queue_id: int, queue_offset: int) -> _Stamp:
        """The store time of a message (its unit, then its record's header). Raises
        StoreError (IndexError outside the queue's offsets as OffsetOutOfRangeError)."""
        try:
            off, size, _ = self.snap.unit(topic, queue_id, queue_offset)
        except IndexError:
            raise OffsetOutOfRangeError(f"{topic}/{queue_id}: no offset {queue_offset}") from None
        return _Stamp(self.snap.store_timestamp(off, size))


class _Chooser:
    """:func:`select_rows` with its lookup tables built once per piece."""

    def __init__(
        self, bounds: dict[tuple[str, int], tuple[int, int]], tags: Sequence[str] | None
    ) -> None:
        by_topic: dict[str, dict[int, tuple[int, int]]] = {}
        for (topic, q), span in bounds.items():
            if is_lmq(topic):
                raise UnsupportedLayoutError(
                    f"{topic}: LMQ queues are not read from object storage (their units point "
                    "at other topics' records); leave them out with the topics option"
                )
            by_topic.setdefault(topic, {})[q] = span
        self.tables: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for topic, qs in by_topic.items():
            size = max(qs) + 1
            lo = np.zeros(size, np.int64)
            hi = np.zeros(size, np.int64)
            for q, (s, e) in qs.items():
                lo[q], hi[q] = s, e
            self.tables[topic] = (lo, hi)
        self.tags = None if tags is None else sorted(tags)

    def select(self, batch: pa.RecordBatch) -> np.ndarray:
        return select_rows(batch, self.tables, self.tags)


def select_rows(
    batch: pa.RecordBatch,
    tables: dict[str, tuple[np.ndarray, np.ndarray]],
    tags: Sequence[str] | None = None,
) -> np.ndarray:
    """Which rows of decoded CommitLog records (columns ``topic``, ``queueId``,
    ``queueOffset``, ``sysFlag``, and ``tags`` when ``tags`` is given) a ConsumeQueue read would
    return: the record's queue is in ``tables`` (``{topic: (lo, hi)}``, int64 arrays indexed by
    queueId: queue offsets ``[lo, hi)``), its QUEUEOFFSET in that range, its transaction type
    NOT or COMMIT (``CommitLogDispatcherBuildConsumeQueue.dispatch`` gives PREPARED and
    ROLLBACK records no unit), its TAGS one of ``tags`` (None: any). Column-wise: a pass per
    topic present in the batch. Returns a bool array, one per row."""
    import pyarrow.compute as pc

    n = batch.num_rows
    keep = np.zeros(n, dtype=bool)
    if not n:
        return keep
    enc = pc.dictionary_encode(batch.column("topic"))
    idx = enc.indices.to_numpy(zero_copy_only=False)
    qid = batch.column("queueId").to_numpy(zero_copy_only=False)
    qoff = batch.column("queueOffset").to_numpy(zero_copy_only=False)
    for k, topic in enumerate(enc.dictionary.to_pylist()):
        table = tables.get(topic)
        if table is None:
            continue
        lo, hi = table
        rows = np.flatnonzero(idx == k)
        q = qid[rows].astype(np.int64)
        inside = (q >= 0) & (q < len(lo))
        qq = np.where(inside, q, 0)
        o = qoff[rows]
        keep[rows] = inside & (o >= lo[qq]) & (o < hi[qq])
    tran = batch.column("sysFlag").to_numpy(zero_copy_only=False) & TRANSACTION_TYPE_MASK
    keep &= (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
    if tags is not None:
        import pyarrow as pa

        hit = pc.fill_null(pc.is_in(batch.column("tags"), pa.array(list(tags), pa.string())), False)
        keep &= hit.to_numpy(zero_copy_only=False)
    return keep
