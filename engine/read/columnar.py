"""Columnar decoding of CommitLog records into Arrow record batches: the one fast walker.

Given the ConsumeQueue units of a queue (:func:`decode_units`, :meth:`StoreFiles.read_batches`)
or a CommitLog byte range (:func:`decode_commitlog`), the records are decoded column-wise over
the memory-mapped CommitLog segments by the compiled kernel (``engine.read.kernel``, C): the
fixed fields of every record (:data:`RECORD_DTYPE`, built from
``engine.format.message.FIXED_V4_FIELDS``, the same field list ``FIXED_V4`` is built from) are
gathered into native numpy columns, the variable parts walked, bodies, topics and property
names and values copied straight into Arrow buffers, properties split as
``MessageDecoder.string2messageProperties`` splits them, msgIds hex-encoded in one call. There
is no per-record Python for the common record (V1 magic, IPv4 hosts, no inner batch,
properties in UTF-8 with at most ``kernel.MAX_FAST_PAIRS`` pairs); a compressed body is
inflated after the kernel's pass (one Python call a compressed body, whose inflation costs
more: :func:`_inflated`); the rare kinds (IPv6 hosts, V2 magic, inner batches, properties
that are not UTF-8, a body kept compressed past ``MAX_INFLATED_BODY``) go record by record
through ``engine.format.message.decode_record``, so the result is always
exact and equal to the per-record decoder (:func:`decode_units_per_record`; tests/engine/
test_kernel.py and test_columnar.py compare them). Without the kernel (no C compiler) every
record takes the per-record decoder. ``bench/decode.py`` measures the cost per stage.

Checks (what ``verify`` checks cheaply, per record): the record lies inside its CommitLog file,
MAGICCODE is V1 or V2, TOTALSIZE equals the unit's size, PHYSICALOFFSET equals the unit's
CommitLog offset, the lengths add up to TOTALSIZE (``calMsgLength``), and, for units of a
queue, the record's topic and QUEUEID are the queue's, and BODYCRC is the CRC-32 of the stored
body (as a RocketMQ client checks it: ``MessageDecoder.decode(..., checkCRC=true)`` throws
"Msg crc is error!", ``decodesBatch`` stops at it; the broker's ``checkMessageAndReturnSize``
treats it as the end of the valid data). A record that fails raises
:class:`engine.errors.CorruptRecordError` naming its CommitLog offset; no row of a damaged
record is ever returned, whichever columns are asked for. The CRC is computed by the kernel over the
mapped file (carry-less multiplication where the CPU has it, zlib otherwise;
``bench/bodycrc.py`` measures it). The ``__CRC32#`` whole-record trailer is left to
``verify``, as the client's decoder does.

The columns are ``engine.read.schema``'s (:func:`engine.read.schema.arrow_schema`); a ``columns`` subset
decodes only those (a body that is not asked for is never copied).

Reading is lock-free and read-only (:class:`StoreFiles`): a store that a mount or a broker is
writing can be read at the same time, since both write the CommitLog record before its
ConsumeQueue unit (``ReputMessageService``).

Formats (docs/format.md): ``engine.format.message`` (records, ``MessageDecoder``), ``engine.format.consumequeue``
(units, ``ConsumeQueue``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..errors import CorruptRecordError, UnsupportedLayoutError
from ..format.batchcq import BATCH_CQ_DIR, BatchConsumeQueue
from ..format.commitlog import (
    DEFAULT_FILE_SIZE,
    SCAN_CHUNK,
    CommitLog,
    claim_problem,
    walk_segment,
)
from ..format.config import topic_path_problem
from ..format.consumequeue import (
    BLANK_UNIT_SIZE,
    CQ_STORE_UNIT_SIZE,
    DEFAULT_UNITS_PER_FILE,
    UNIT_DTYPE_SPEC,
    ConsumeQueue,
    queue_dir_id,
)
from ..format.consumequeue import store_file_size as cq_store_file_size
from ..format.dledger import DLedgerLog, open_dledger
from ..format.innerbatch import InnerBatchCache, inner_message
from ..format.javahash import tags_code
from ..format.mappedfile import MappedFiles, SegmentMap
from ..format.message import (
    BODY_CRC_MASK,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    FIXED_V4,
    FIXED_V4_FIELDS,
    FIXED_V4_POSITIONS,
    HOST_V4,
    INNER_BATCH_FLAG,
    INT64,
    KEY_SEPARATOR,
    MAX_MESSAGE_SIZE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MIN_RECORD_SIZE,
    NAME_VALUE_SEPARATOR,
    NEED_UNWRAP_FLAG,
    PROPERTIES_LENGTH_SIZE,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    RECORD_HEAD,
    RECORD_MAGICS,
    SCHEDULE_TOPIC,
    STORE_TIMESTAMP_END_MAX,
    STOREHOSTADDRESS_V6_FLAG,
    TOPIC_LENGTH_SIZE_V1,
    MessageRecord,
    check_body_crc,
    check_unit_record,
    decode_record,
    inflate_body,
    is_lmq,
    is_record_magic,
    read_store_timestamp,
    unit_mismatch,
)
from ..format.queue import QueueReader
from ..format.rocksdbcq import RocksDBConsumeQueue, RocksDBConsumeQueues
from ..format.source import LOCAL, StoreSource
from ..service.storetree import check_store_tree, rocksdb_consume_queue
from . import kernel
from .jsonline import message_fields
from .kernel import (
    CHECK_CRC,
    WANT_BODY,
    WANT_BORN_HOST,
    WANT_KEYS,
    WANT_MSGID,
    WANT_PROPS,
    WANT_STORE_HOST,
    WANT_TAGS,
    WANT_TOPIC,
)
from .schema import arrow_schema, int_values

if TYPE_CHECKING:  # annotations only: pyarrow is imported where a batch is built
    import pyarrow as pa

__all__ = [
    "StoreFiles",
    "RECORD_DTYPE",
    "UNIT_DTYPE",
    "record_dtype",
    "decode_units",
    "queue_units",
    "drop_blank_units",
    "decode_topic_units",
    "decode_units_per_record",
    "decode_commitlog",
    "decode_records",
    "walk_records",
    "CommitLogWindow",
    "arrow_schema",
]

# numpy type of each struct format character of FIXED_V4_FIELDS (big-endian). An IPv4 address
# ("4s") is read as one unsigned 32-bit integer: the same four bytes.
_NP_TYPES = {"i": ">i4", "I": ">u4", "q": ">i8", "4s": ">u4"}


def record_dtype(last_field: str = FIXED_V4_FIELDS[-1][0]) -> np.dtype:
    """The fields of ``engine.format.message.FIXED_V4_FIELDS`` up to and including ``last_field`` as
    a numpy record dtype (big-endian; an IPv4 address as one uint32), at the offsets
    ``FIXED_V4_POSITIONS`` gives. Fields before ``bornHostAddress`` have these offsets in every
    record, whatever its hosts."""
    names = [name for name, _ in FIXED_V4_FIELDS]
    fields = FIXED_V4_FIELDS[: names.index(last_field) + 1]
    return np.dtype([(name, _NP_TYPES[fmt]) for name, fmt in fields])


#: The fixed part of a V1/IPv4 record (88 bytes) as a numpy record, from message.FIXED_V4_FIELDS.
RECORD_DTYPE = record_dtype()
assert RECORD_DTYPE.itemsize == FIXED_V4.size
assert RECORD_DTYPE.fields is not None
assert all(RECORD_DTYPE.fields[n][1] == at for n, at in FIXED_V4_POSITIONS.items())
_FIXED = FIXED_V4.size
#: Bodies (bytes, compressed ones inflated) one batch of :meth:`StoreFiles.read_batches` holds
#: at most, but for a batch of one record: what a reader (a Spark task) holds at a time, far
#: under the 2 GiB an Arrow binary column can hold.
READ_BATCH_BYTES = 256 << 20
#: A ConsumeQueue unit (``engine.format.consumequeue.UNIT``: commitLogOffset | size | tagsCode).
UNIT_DTYPE = np.dtype(UNIT_DTYPE_SPEC)
assert UNIT_DTYPE.itemsize == CQ_STORE_UNIT_SIZE
# SYSFLAG bits whose records take the per-record decoder. A compressed body (a Java
# client's every body past compressMsgBodyOverHowmuch, 4 KiB) does not: the kernel decodes
# its record as any other, and :func:`_inflated` inflates the bodies it copied as stored.
_RARE_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG | INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
_MIN_RECORD = MIN_RECORD_SIZE  # calMsgLength with empty body, topic and properties
_HEAD = RECORD_HEAD  # TOTALSIZE | MAGICCODE
_PROPS_SEP = PROPERTY_SEPARATOR
_TS_NEED = max(_FIXED, STORE_TIMESTAMP_END_MAX)  # bytes store_timestamp wants at a record
_NAME_SEP = NAME_VALUE_SEPARATOR
#: Kernel.decode's view of a V1/IPv4 record and of the properties (engine.format.message)
_LAYOUT = {
    "at_total": FIXED_V4_POSITIONS["totalSize"],
    "at_magic": FIXED_V4_POSITIONS["magicCode"],
    "at_crc": FIXED_V4_POSITIONS["bodyCRC"],
    "at_queue": FIXED_V4_POSITIONS["queueId"],
    "at_phys": FIXED_V4_POSITIONS["physicalOffset"],
    "at_qoff": FIXED_V4_POSITIONS["queueOffset"],
    "at_sysflag": FIXED_V4_POSITIONS["sysFlag"],
    "at_born_host": FIXED_V4_POSITIONS["bornHostAddress"],
    "at_store_host": FIXED_V4_POSITIONS["storeHostAddress"],
    "at_body_len": FIXED_V4_POSITIONS["bodyLength"],
    "fixed": _FIXED,
    "tl_size": TOPIC_LENGTH_SIZE_V1,
    "pl_size": PROPERTIES_LENGTH_SIZE,
    "max_topic": MAX_TOPIC_LENGTH_V1,
    "max_props": MAX_PROPERTIES_LENGTH,
    "magic_v1": RECORD_MAGICS[0],
    "magic_v2": RECORD_MAGICS[1],
    "rare_flags": _RARE_FLAGS,
    "crc_mask": BODY_CRC_MASK,
    "pair_sep": ord(_PROPS_SEP),
    "name_sep": ord(_NAME_SEP),
    "key_sep": ord(KEY_SEPARATOR),
    "tag_name": PROPERTY_TAGS.encode(),
    "keys_name": PROPERTY_KEYS.encode(),
}
#: numeric columns: the record field each one is (engine.format.message.FIXED_V4_FIELDS)
_NUMERIC = {
    "queueId": "queueId",
    "queue": "queueId",
    "queueOffset": "queueOffset",
    "commitLogOffset": "physicalOffset",
    "storeSize": "totalSize",
    "bornTimestamp": "bornTimestamp",
    "storeTimestamp": "storeTimestamp",
    "sysFlag": "sysFlag",
    "flag": "flag",
    "bodyCRC": "bodyCRC",
    "reconsumeTimes": "reconsumeTimes",
    "preparedTransactionOffset": "preparedTransactionOffset",
}
#: bytes of each field in a record (4 or 8: int32 / int64 columns)
_WIDTH = {name: np.dtype(_NP_TYPES[fmt]).itemsize for name, fmt in FIXED_V4_FIELDS}
assert all(_WIDTH[f] in (4, 8) for f in _NUMERIC.values())
#: Kernel.decode's flags of the other columns
_WANT = {
    "body": WANT_BODY,
    "topic": WANT_TOPIC,
    "tags": WANT_TAGS,
    "keys": WANT_KEYS,
    "properties": WANT_PROPS,
    "msgId": WANT_MSGID,
    "bornHost": WANT_BORN_HOST,
    "storeHost": WANT_STORE_HOST,
}
_MAX_DECODE_BYTES = np.iinfo(np.int32).max  # of records in one Kernel.decode call
# message.offset_msg_id of an IPv4 store host: hex of address, port and CommitLog offset
_MSG_ID_V4_HEX = 2 * (HOST_V4.size + INT64.size)  # 32 digits


# ---------------------------------------------------------------------------------------------
# Files


def queue_units(cq: QueueReader | None, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """Units of queue offsets ``[start, end)`` of a store's queue (any kind), read through its
    ``read_units`` (:meth:`engine.format.queue.QueueReader.read_units`, across its files), as
    ``(UNIT_DTYPE array, int64 queue offsets)``; blank filler kept (:func:`drop_blank_units`
    removes it). Shorter than asked when the queue holds fewer units (``cq`` None: empty);
    starting later when ``start`` is below the queue's min offset (those units expired).

    The one reader of ConsumeQueue bytes for the views (``fusefs.views``): above the engine
    units are numpy arrays, never raw bytes.
    """
    out = []
    if cq is not None:  # none below the queue's min offset (expired): labelled from there
        start = max(start, cq.min_offset)
    pos = start
    while cq is not None and pos < end:
        raw = cq.read_units(pos, end - pos)
        if not raw:
            break
        out.append(raw)
        pos += len(raw) // CQ_STORE_UNIT_SIZE
    # joined as bytes: np.concatenate would give the native byte order, not UNIT_DTYPE's
    units = np.frombuffer(out[0] if len(out) == 1 else b"".join(out), dtype=UNIT_DTYPE)
    return units, np.arange(start, start + len(units), dtype=np.int64)


def drop_blank_units(
    units: np.ndarray,
    queue_offsets: np.ndarray,
    queue_ids: np.ndarray | int | None = None,
    keep: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | int | None]:
    """Remove blank filler units (``(0, BLANK_UNIT_SIZE, _)``: ``ConsumeQueue.fillPreBlank``
    writes commitLogOffset 0; a unit of that size at another offset is damage, left for the
    decode to refuse, never skipped without a word) and,
    when ``keep`` (a bool array) is given, the units it marks False, from ``units`` and the
    arrays aligned with them: their queue offsets and, for a topic's merged units, their queue
    ids (an int, one queue, passes through). Returns ``(units, queue_offsets, queue_ids)``,
    the inputs themselves when nothing is removed.

    The one blank filter of every decode of a queue (``StoreFiles.read_batches``, the views'
    chunks and Parquet parts in ``fusefs``).
    """
    mask = (units["size"] != BLANK_UNIT_SIZE) | (units["off"] != 0)
    if keep is not None:
        mask &= keep
    if not mask.all():
        units, queue_offsets = units[mask], queue_offsets[mask]
        if queue_ids is not None and not isinstance(queue_ids, int):
            queue_ids = queue_ids[mask]
    return units, queue_offsets, queue_ids


#: the directories of queue units under a store root: ConsumeQueues and BatchConsumeQueues
_QUEUE_DIRS = ("consumequeue", BATCH_CQ_DIR)


class RecordSource(Protocol):
    """Where the decoders find CommitLog bytes: :class:`engine.format.mappedfile.MappedFiles`
    (the files, mapped) or a :class:`CommitLogWindow` (a range held in memory)."""

    file_size: int

    @property
    def ranged(self) -> bool:
        """Whether :meth:`span` reads by range (object storage: its cost grows with the span)."""
        ...

    def span(self, offset: int, end: int) -> tuple[SegmentMap | bytes, int] | None:
        """``(buffer, base)`` holding the bytes ``[offset, end)`` as far as the CommitLog file
        of ``offset`` has them (``buffer[x - base]`` is the byte at ``x``), or None where
        ``offset`` is not held (:meth:`engine.format.mappedfile.MappedFiles.span`)."""
        ...


class CommitLogWindow:
    """CommitLog bytes ``[base, base + len(data))`` of one CommitLog file: what one range of
    :func:`commitlog_runs` read (a local file's mapping, or the bytes of a range read of a
    snapshot in object storage), for :func:`decode_records`.

    Args:
        data: the bytes (any buffer: bytes, a read-only mapping).
        base: the CommitLog offset of ``data[0]`` (bytes).
        file_size: the size of the CommitLog file they belong to (``mappedFileSizeCommitLog``).
    """

    def __init__(self, data: SegmentMap | bytes, base: int, file_size: int) -> None:
        self.data = data
        self.base = base
        self.file_size = file_size
        self.ranged = False  # held in memory

    def span(self, offset: int, end: int) -> tuple[SegmentMap | bytes, int] | None:
        """``(data, base)`` where ``offset`` lies in the window, else None."""
        p = offset - self.base
        return (self.data, self.base) if 0 <= p < len(self.data) else None


class StoreFiles:
    """A store directory opened for reading only, without the store's ``lock`` file: the
    lock-free reader of Spark's executors and the benchmarks.

    It reads through the format's own classes, the ones :class:`engine.store.MessageStore`
    recovers and writes: the CommitLog's files (:class:`engine.format.mappedfile.MappedFiles`),
    each queue's :class:`engine.format.consumequeue.ConsumeQueue` opened read-only (a BatchCQ
    topic's :class:`engine.format.batchcq.BatchConsumeQueue`, a RocksDB store's
    :class:`engine.format.rocksdbcq.RocksDBConsumeQueue`), so a queue's units, where they end,
    its min offset and the search by time have one implementation each. What differs from
    ``MessageStore`` is only what a reader that takes no lock cannot do: no recovery scan and
    no IndexFile; the ConsumeQueues are trusted as they are on disk, and a queue follows the
    units a writer appends (:meth:`engine.format.consumequeue.ConsumeQueue.catch_up`).
    A queue's max offset is the end of its valid units, minus trailing units whose record is
    not (yet) a valid record; its min offset the first unit that is not blank filler
    (``fillPreBlank``) and whose record is still in the CommitLog (``correctMinOffset``).
    A store that crashed and was never recovered may have units past the CommitLog's valid
    end: mount it once (or open it with ``MessageStore``) to recover it first.

    Args:
        root: the store directory (``storePathRootDir``: has ``commitlog/`` and
            ``consumequeue/``), a path of ``source``.
        check_crc: check every record's BODYCRC (default, as RocketMQ's
            ``checkCRCOnRecover``); False trusts the files (a store already verified; the
            baseline of ``bench/bodycrc.py``) and a flipped body byte is then served.
        source: where the files are read from (:mod:`engine.format.source`): the local
            filesystem, or a snapshot in object storage
            (:class:`engine.live.objectsource.ObjectSource`, whose root is ``root``).

    Raises:
        FileNotFoundError: ``root`` has no ``commitlog/`` directory.
        UnsupportedLayoutError: RocksDB ConsumeQueues from a source that is not local.
        UnsafeStoreError: a link, FIFO or device below ``root``
            (:func:`engine.service.storetree.check_store_tree`).
        CorruptRecordError: (from :meth:`queue` and the reads) a queue's files cannot be a
            queue (mixed sizes, misnamed), or a record is not its unit's.
    """

    def __init__(self, root: str, check_crc: bool = True, source: StoreSource = LOCAL) -> None:
        #: where the store's files are read from (:mod:`engine.format.source`)
        self.source = source
        self.root = os.path.abspath(root) if source.local else root
        if source.local:  # never through a link, never a FIFO or device, as every open
            check_store_tree(self.root)
        #: the store's DLedger CommitLog (engine.format.dledger), or None for a plain store
        self.dledger = open_dledger(self.root, source)
        cl = self.dledger.data_dir if self.dledger else os.path.join(self.root, "commitlog")
        if not source.isdir(cl):
            raise FileNotFoundError(f"{root}: not a RocketMQ store (no commitlog/ directory)")
        #: where a DLedger store's committed entries end (``getCommittedPos``): records from
        #: there on are not messages; None for a plain store
        self.committed_end: int | None = None
        if self.dledger is not None:
            self.committed_end = self.dledger.committed_end() or 0
        #: the store's CommitLog files (read-only mmaps)
        self.commitlog = MappedFiles(cl, source=source)
        #: whether records read here have their BODYCRC checked (the decoders' ``check_crc``)
        self.check_crc = check_crc
        self._queues: dict[tuple[str, int], QueueReader] = {}
        #: the store's RocksDB ConsumeQueues (engine.format.rocksdbcq) when it keeps them
        #: there (storetree.rocksdb_consume_queue, the one decision), else None
        self.rocksdb: RocksDBConsumeQueues | None = None
        if rocksdb_consume_queue(self.root, source):
            if not source.local:
                raise UnsupportedLayoutError(
                    f"{root}: RocksDB ConsumeQueues are read from a local store only "
                    "(download the snapshot first)"
                )
            self.rocksdb = RocksDBConsumeQueues(os.path.join(self.root, "consumequeue"))
        self._cq_file_size: int | None = None

    # -- layout ------------------------------------------------------------------------------
    def holds_records(self) -> bool:
        """Whether the CommitLog's first file starts with a record (TOTALSIZE and a record's
        MAGICCODE): the store holds messages, whatever its ConsumeQueues say. A DLedger store's
        entries are not looked at (False)."""
        if self.dledger is not None:
            return False
        cl = self.commitlog
        if not cl.end_offset > cl.min_offset:
            return False
        got = cl.span(cl.min_offset, cl.min_offset + RECORD_HEAD.size)
        if got is None:
            return False
        data, base = got
        at = cl.min_offset - base
        head = bytes(data[at : at + RECORD_HEAD.size])
        if len(head) < RECORD_HEAD.size:
            return False
        size, magic = RECORD_HEAD.unpack(head)
        return size > 0 and magic in RECORD_MAGICS

    def topics(self) -> list[str]:
        """Topics that have a ConsumeQueue directory (or RocksDB queues), sorted."""
        if self.rocksdb is not None:
            return [t for t in self.rocksdb.queues() if topic_path_problem(t) is None]
        out: set[str] = set()
        for kind in _QUEUE_DIRS:  # ConsumeQueues and BatchConsumeQueues
            base = os.path.join(self.root, kind)
            try:
                names = self.source.listdir(base)
            except FileNotFoundError:
                continue
            # the store's rule (config.topic_path_problem): what a broker loads, unless unsafe
            out.update(
                t
                for t in names
                if self.source.isdir(os.path.join(base, t)) and topic_path_problem(t) is None
            )
        return sorted(out)

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of a topic that have a ConsumeQueue directory (or RocksDB units), sorted."""
        if self.rocksdb is not None:
            return self.rocksdb.queues().get(topic, [])
        out: set[int] = set()
        for kind in _QUEUE_DIRS:
            base = os.path.join(self.root, kind, topic)
            try:
                names = self.source.listdir(base)
            except FileNotFoundError:
                continue
            # canonical decimal names only, as the store reads them ("007" or "²" is no queue)
            out.update(
                q
                for q in map(queue_dir_id, names)
                if q is not None and self.source.isdir(os.path.join(base, str(q)))
            )
        return sorted(out)

    def queue(self, topic: str, queue_id: int) -> QueueReader:
        """The queue's :class:`engine.format.queue.QueueReader`: its
        :class:`engine.format.consumequeue.ConsumeQueue`, read-only (a RocksDB store's
        :class:`engine.format.rocksdbcq.RocksDBConsumeQueue`, a BatchCQ topic's
        :class:`engine.format.batchcq.BatchConsumeQueue`), opened once and cached: the one
        place that tells them apart. A queue with no files is an empty one.

        Raises:
            CorruptRecordError: its files cannot be a queue (``FileQueue``)."""
        key = (topic, queue_id)
        q = self._queues.get(key)
        if q is not None:
            return q
        if self.rocksdb is not None:
            rq = RocksDBConsumeQueue(self.rocksdb, topic, queue_id)
            rq.recover()
            q = rq
        else:
            d = os.path.join(self.root, "consumequeue", topic, str(queue_id))
            b = os.path.join(self.root, BATCH_CQ_DIR, topic, str(queue_id))
            if not self.source.isdir(d) and self.source.isdir(b):  # a BatchCQ topic's queue
                q = BatchConsumeQueue(b, topic, queue_id, source=self.source)
            else:
                q = ConsumeQueue(
                    d, topic, queue_id, self._queue_file_size(), read_only=True, source=self.source
                )
                q.catch_up()
        self._queues[key] = q
        return q

    def _queue_file_size(self) -> int:
        """The ConsumeQueue file size of a queue that has no file yet: the store's (its other
        queues', :func:`engine.format.consumequeue.store_file_size`), else RocketMQ's default."""
        if self._cq_file_size is None:
            base = os.path.join(self.root, "consumequeue")
            qdirs = [
                os.path.join(base, t, str(q)) for t in self.topics() for q in self.queue_ids(t)
            ][:64]
            size, _ = cq_store_file_size(qdirs, self.source)
            self._cq_file_size = size or DEFAULT_UNITS_PER_FILE * CQ_STORE_UNIT_SIZE
        return self._cq_file_size

    def units(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        """The units of queue offsets ``[start, end)`` as a :data:`UNIT_DTYPE` array, blank
        filler kept; shorter where the queue has no more (or ``start`` is before its first
        unit: empty). Follows a writer: units appended since are read
        (:meth:`engine.format.consumequeue.ConsumeQueue.catch_up`)."""
        q = self.queue(topic, queue_id)
        if end > q.max_offset:
            q.catch_up()
        if start < q.min_offset or start >= end:
            return np.empty(0, dtype=UNIT_DTYPE)
        return queue_units(q, start, end)[0]

    def refresh_committed(self) -> None:
        """Read again where a DLedger store's committed entries end (its writer commits more
        while a stream follows it: ``committed_end`` was read once, at open); never lowered
        (a committed entry stays committed). Nothing for a plain store. Raises OSError, and
        what :func:`engine.format.dledger.open_dledger` raises for a checkpoint gone bad."""
        if self.dledger is not None:
            now = open_dledger(self.root, self.source)  # (its checkpoint, read again)
            if now is None:
                return
            self.dledger = now
            end = now.committed_end() or 0
            if self.committed_end is None or end > self.committed_end:
                self.committed_end = end

    # -- offsets -----------------------------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        """``getMaxOffsetInQueue``: one past the last queue offset whose record is readable."""
        q = self.queue(topic, queue_id)
        q.catch_up()
        end = q.max_offset
        # A concurrent writer may have written a unit whose record we cannot see yet (another
        # host's page cache, a torn copy): back off to the last unit whose record header is
        # sane. A few units one by one; past those (a CommitLog cut short under a million
        # units) by galloping and then halving, so the cost grows with the log of the units
        # that point nowhere, not with their number.
        lo = q.min_offset

        def ok(i: int) -> bool:
            off, size, _ = q.unit(i)
            return self._record_ok(off, size)

        for _ in range(16):
            if end <= lo or ok(end - 1):
                return end
            end -= 1
        bad, step = end, 1  # ``bad``: a queue offset past the last readable unit
        while True:
            probe = bad - step
            if probe < lo:
                if not ok(lo):
                    return lo
                probe = lo
                break
            if ok(probe):
                break
            bad, step = probe, step * 2
        good = probe  # readable; every unit from ``bad`` on was found unreadable or unseen
        while bad - good > 1:
            mid = (good + bad) // 2
            if ok(mid):
                good = mid
            else:
                bad = mid
        return good + 1

    def min_offset(self, topic: str, queue_id: int) -> int:
        """``getMinOffsetInQueue``: first queue offset whose record is still in the CommitLog
        (:meth:`engine.format.consumequeue.ConsumeQueue.correct_min_offset`, after the files
        retention deleted are dropped)."""
        q = self.queue(topic, queue_id)
        q.follow_files(add=False)
        q.catch_up()
        self.commitlog.refresh()
        q.correct_min_offset(self.commitlog.min_offset)
        return q.min_offset

    def _record_ok(self, off: int, size: int) -> bool:
        if self.committed_end is not None and off + size > self.committed_end:
            return False  # a DLedger entry not committed: not a message yet
        sp = self.commitlog.span(off, off + max(size, 8))
        if sp is None:
            return False
        m, base = sp
        p = off - base
        if p + size > len(m) or p + 8 > len(m):
            return False
        total, magic = _HEAD.unpack_from(m, p)
        return total == size and is_record_magic(magic)

    def store_timestamp(self, off: int, size: int | None = None) -> int:
        """STORETIMESTAMP (epoch ms) of the record at CommitLog offset ``off`` (``size``, its
        unit's, is not needed: the argument keeps ``ConsumeQueue.offset_by_time``'s shape).

        Raises CorruptRecordError when no record is there."""
        sp = self.commitlog.span(off, off + _TS_NEED)
        if sp is None or off - sp[1] + _TS_NEED > len(sp[0]):
            raise CorruptRecordError("record not in the CommitLog", off)
        m, base = sp
        return read_store_timestamp(m, off - base)

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """``getOffsetInQueueByTime``: the first queue offset stored at or after ``timestamp``
        (epoch ms), or the max offset when every message is older
        (:meth:`engine.format.queue.QueueReader.offset_by_time` between
        :meth:`min_offset` and :meth:`max_offset`, whatever the queue's kind)."""
        q = self.queue(topic, queue_id)
        lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        return q.offset_by_time(timestamp, self.store_timestamp, lo, hi)

    # -- reading -----------------------------------------------------------------------------
    def read_batches(
        self,
        topic: str,
        queue_id: int,
        start: int,
        end: int,
        tags: Iterable[str] | None = None,
        batch_rows: int = 32768,
        columns: tuple | None = None,
    ) -> Iterator:
        """Decode queue offsets ``[start, end)`` of one queue into Arrow record batches.

        ``tags``: keep only messages whose TAGS equal one of these; units are first selected by
        their ConsumeQueue tagsCode (Java hash of the tag), then the decoded tag is compared,
        so hash collisions are removed. Batches (at most ``batch_rows`` rows each, and bodies
        of at most :data:`READ_BATCH_BYTES` in all but for a batch of one row: a record's
        body of any size is read whole) have the schema :func:`engine.read.schema.arrow_schema`,
        or only ``columns`` of it, in that order. Blank filler units are skipped; empty
        batches are not yielded.

        Raises CorruptRecordError when a unit is missing or points at bytes that are not its
        record (the message names the CommitLog offset).
        """
        wanted = None
        codes = None
        if tags is not None:
            wanted = set(tags)
            if topic != SCHEDULE_TOPIC:
                codes = np.array(sorted({tags_code(t) for t in wanted}), dtype=np.int64)
        pos = start
        while pos < end:
            n = min(batch_rows, end - pos)
            units = self.units(topic, queue_id, pos, pos + n)
            if len(units) < n:
                raise CorruptRecordError(
                    f"{topic}/{queue_id}: ConsumeQueue units {pos}..{pos + n} are missing"
                )
            qoffs = np.arange(pos, pos + n, dtype=np.int64)
            keep = None if codes is None else np.isin(units["tags"].astype(np.int64), codes)
            units, qoffs, _ = drop_blank_units(units, qoffs, keep=keep)
            build = columns
            if wanted is not None and columns is not None and "tags" not in columns:
                build = (*columns, "tags")
            while len(units):  # READ_BATCH_BYTES of bodies a batch at most: none is cut
                batch = decode_units(
                    self.commitlog, topic, queue_id, units, qoffs, None, build, self.check_crc,
                    max_bytes=READ_BATCH_BYTES,
                )  # fmt: skip
                units, qoffs = units[batch.num_rows :], qoffs[batch.num_rows :]
                batch = keep_tags(batch, wanted, columns)
                if batch.num_rows:
                    yield batch
            pos += n

    def read_commitlog(
        self,
        start: int = 0,
        end: int | None = None,
        batch_rows: int = 32768,
        columns: tuple | None = None,
    ) -> Iterator:
        """:func:`decode_commitlog` over this store's CommitLog (a DLedger store's committed
        entries)."""
        return decode_commitlog(
            self.commitlog, start, end, batch_rows, columns, self.dledger, self.check_crc
        )

    def close(self) -> None:
        """Unmap every file."""
        self.commitlog.close()
        for q in self._queues.values():
            q.close()
        if self.rocksdb is not None:
            self.rocksdb.close()


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_units(
    commitlog: RecordSource,
    topic: str,
    queue_id: int,
    units: np.ndarray,
    queue_offsets: np.ndarray,
    wanted_tags: set | None = None,
    columns: tuple | None = None,
    check_crc: bool = True,
    max_bytes: int | None = None,
) -> pa.RecordBatch:
    """Decode the records ConsumeQueue ``units`` of one queue point at, column-wise.

    Args:
        commitlog: the store's CommitLog files
            (:class:`engine.format.mappedfile.MappedFiles`), or one range of them read
            (:class:`CommitLogWindow`: the follower's check of a writer's new units).
        topic, queue_id: the queue; every record must belong to it.
        units: :data:`UNIT_DTYPE` array (commitLogOffset, size, tagsCode); no blank filler.
        queue_offsets: int64 array, the queue offset of each unit.
        wanted_tags: keep only rows whose TAGS is one of these (None: all rows).
        columns: names of :func:`engine.read.schema.arrow_schema` to build, in that order
            (None: all of them). Columns not asked for are not decoded.
        check_crc: check each record's BODYCRC (``checkCRCOnRecover``; ``StoreFiles``'
            ``check_crc``); False trusts the files.
        max_bytes: decode only the first units, as many as have bodies of at most this many
            bytes in all (compressed bodies inflated), and the first one always: the batch
            then has fewer rows than units, and another call decodes the rest. A compressed
            body's size is known only once it is inflated (a few hundred stored bytes may
            inflate to ``MAX_INFLATED_BODY``), so this, not the units' sizes, bounds what a
            decode holds. None: no bound. Not with ``wanted_tags`` (ValueError).

    Returns:
        one ``pyarrow.RecordBatch`` with a row per unit (fewer with ``wanted_tags`` or
        ``max_bytes``), in the units' order.

    Raises:
        CorruptRecordError: a record is not in the CommitLog, runs past its file, or is not
            the record of its unit (magic, TOTALSIZE != unit size, PHYSICALOFFSET != unit
            offset, lengths, topic or queue); the message names its CommitLog offset.
    """

    if max_bytes is not None and wanted_tags is not None:
        raise ValueError("decode_units: max_bytes with wanted_tags")
    build: Sequence[str] | None = columns
    if columns is not None and wanted_tags is not None and "tags" not in columns:
        build = (*columns, "tags")
    offs = units["off"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    qoffs = np.asarray(queue_offsets, dtype=np.int64)
    qids = np.full(len(offs), queue_id, dtype=np.int64)
    if is_lmq(topic):
        # an LMQ's units point at other topics' records, shown as they are (each checked)
        batch = _decode_foreign(
            commitlog, check_crc, topic, qids, offs, sizes, qoffs, build, max_bytes
        )
    else:
        try:
            batch = _decode(
                commitlog, check_crc, offs, sizes, qoffs, topic, queue_id, build, max_bytes
            )
        except CorruptRecordError as exc:
            # a 4.x broker's MultiDispatch puts other topics' records in a queue of a plain
            # name: the units are the broker's when each record is the queue's own or names it
            # (check_unit_record); anything else is the damage raised
            if not _multi_dispatched(commitlog, exc, offs, sizes):
                raise
            batch = _decode_foreign(
                commitlog, check_crc, topic, qids, offs, sizes, qoffs, build, max_bytes
            )
    return keep_tags(batch, wanted_tags, columns)


def keep_tags(
    batch: pa.RecordBatch, wanted_tags: set | None, columns: Sequence[str] | None
) -> pa.RecordBatch:
    """The rows of a decoded ``batch`` whose TAGS is one of ``wanted_tags`` (None: every
    row), with only ``columns`` (None: as it is; the batch may hold "tags" besides them, for
    this filter)."""
    import pyarrow as pa

    if wanted_tags is not None and batch.num_rows:
        import pyarrow.compute as pc

        batch = batch.filter(
            pc.fill_null(pc.is_in(batch.column("tags"), pa.array(sorted(wanted_tags))), False)
        )
    if columns is not None and list(batch.schema.names) != list(columns):
        batch = batch.select(list(columns))  # ("tags", added for the filter)
    return batch


def decode_topic_units(
    commitlog: MappedFiles,
    topic: str,
    queue_ids: np.ndarray,
    units: np.ndarray,
    queue_offsets: np.ndarray,
    columns: tuple | None = None,
    check_crc: bool = True,
    max_bytes: int | None = None,
) -> pa.RecordBatch:
    """:func:`decode_units` for units of several queues of one topic (``queue_ids[i]`` is the
    queue of ``units[i]``), e.g. merged in CommitLog order. Same batch (``max_bytes``: its
    first rows only, as there) and errors; a record whose QUEUEID is not its unit's queue
    raises CorruptRecordError."""
    if is_lmq(topic):  # one queue (0), records of other topics and queues
        return decode_units(
            commitlog, topic, 0, units, queue_offsets, None, columns, check_crc, max_bytes
        )
    names = tuple(arrow_schema().names if columns is None else columns)
    build = names if "queueId" in names else (*names, "queueId")
    offs = units["off"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    qoffs = np.asarray(queue_offsets, dtype=np.int64)
    try:
        batch = _decode(commitlog, check_crc, offs, sizes, qoffs, topic, None, build, max_bytes)
    except CorruptRecordError as exc:
        # a 4.x MultiDispatch queue holds other topics' records (in their own queue id): the
        # units are the broker's when each passes check_unit_record, else the damage is raised
        if not _multi_dispatched(commitlog, exc, offs, sizes):
            raise
        qids = np.asarray(queue_ids, dtype=np.int64)
        batch = _decode_foreign(
            commitlog, check_crc, topic, qids, offs, sizes, qoffs, build, max_bytes
        )
    queue_ids = np.asarray(queue_ids)[: batch.num_rows]
    got = int_values(batch.column("queueId"))
    bad = got != queue_ids
    if bad.any():
        i = int(np.argmax(bad))
        raise CorruptRecordError(
            f"the record belongs to queue {int(got[i])}, not {int(queue_ids[i])}",
            int(units["off"][i]),
        )
    if build is not names:
        batch = batch.select(list(names))
    if "queue" in names:
        import pyarrow as pa

        batch = batch.set_column(
            names.index("queue"),
            batch.schema.field("queue"),
            pa.array(np.asarray(queue_ids, dtype=np.int32)),
        )
    return batch


def decode_units_per_record(
    commitlog: MappedFiles,
    topic: str,
    queue_id: int,
    units: np.ndarray,
    queue_offsets: np.ndarray,
    columns: tuple | None = None,
    check_crc: bool = True,
) -> pa.RecordBatch:
    """The same batch as :func:`decode_units`, decoded record by record with
    ``engine.format.message.decode_record`` (the reference the columnar path is tested against)."""
    offs = units["off"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    names = arrow_schema().names if columns is None else list(columns)
    return _slow_batch(
        commitlog,
        check_crc,
        offs,
        sizes,
        np.asarray(queue_offsets, np.int64),
        topic,
        queue_id,
        names,
    )


def decode_commitlog(
    commitlog: MappedFiles,
    start: int = 0,
    end: int | None = None,
    batch_rows: int = 32768,
    columns: tuple | None = None,
    entries: DLedgerLog | None = None,
    check_crc: bool = True,
    read_size: int = SCAN_CHUNK,
    exact_end: bool = False,
) -> Iterator:
    """Decode every record of the CommitLog byte range ``[start, end)`` in CommitLog order.

    ``start`` must be the offset of a record (of its DLedger entry when ``entries`` is the
    store's DLedger CommitLog) or of a segment; records that start before ``end`` are decoded
    (None: to the end of the data). The walk is :func:`commitlog_runs` (the compiled record
    walk, ``walk_segment``'s rules: ``CommitLog.checkMessageAndReturnSize``), over the local
    files or any store source (a snapshot in object storage: ``read_size`` bytes a range read);
    a DLedger CommitLog is walked entry by entry by
    :meth:`engine.format.commitlog.CommitLog.scan_raw` (``DLedgerCommitLog``).
    ``queueOffset`` is the record's QUEUEOFFSET field; ``topic`` and ``queue`` come from each
    record. Yields RecordBatches of at most ``batch_rows`` rows (schema as
    :func:`decode_units`, BODYCRC checked unless ``check_crc`` is False), every record before a
    damaged one first.

    Raises CorruptRecordError at the first position that is neither a record nor a blank, or
    (``exact_end``: a snapshot's cut) where the data ends before ``end``.
    """
    names = tuple(arrow_schema().names) if columns is None else tuple(columns)
    if entries is not None:
        yield from _decode_dledger(commitlog, start, end, batch_rows, names, entries, check_crc)
        return
    for window, offs, sizes in commitlog_runs(commitlog, start, end, read_size, exact_end):
        for i in range(0, len(offs), batch_rows):
            o, z = offs[i : i + batch_rows], sizes[i : i + batch_rows]
            try:
                batch = decode_records(window, o, z, names, check_crc)
            except CorruptRecordError as exc:  # the records before the damaged one first
                k = 0 if exc.offset is None else int(np.searchsorted(o, exc.offset))
                if k:
                    yield decode_records(window, o[:k], z[:k], names, check_crc)
                raise
            yield batch


def commitlog_runs(
    commitlog: MappedFiles,
    start: int,
    end: int | None = None,
    read_size: int = SCAN_CHUNK,
    exact_end: bool = False,
    max_message_size: int = MAX_MESSAGE_SIZE,
    refresh: bool = True,
) -> Generator[tuple[CommitLogWindow, np.ndarray, np.ndarray], None, None]:
    """Walk a plain CommitLog's records from ``start`` (a record's or a segment's offset) to
    ``end`` (None: the end of the data) in runs: ``(window, offsets, sizes)``, the CommitLog
    offsets (int64, bytes) and TOTALSIZEs of the whole records that start in one range of
    at most ``read_size`` bytes (more for a longer record), and a window holding that range
    (the file's mapping for a local store, the bytes read for a source read by range).

    One step per record, compiled (:func:`walk_records`: ``walk_segment``'s rules, the shape of
    ``CommitLog.checkMessageAndReturnSize``): the blank END_OF_FILE record ends a file's data
    and the walk goes on at the next file; zeros end the data; a record cut by the range is
    read again from its start with the next range (so nothing is carried between ranges, and
    a record longer than ``read_size`` is read whole; from a source read by range, not one
    that claims more than ``max_message_size`` + 64 KiB: :func:`engine.format.commitlog.
    claim_problem`). Record layouts and BODYCRC are the decoders' to check
    (:func:`decode_records`). ``refresh`` False walks the files as ``commitlog`` lists them
    (a writer's own list: recovery) instead of listing them again first.

    Raises:
        CorruptRecordError: after the runs before it, at a header that is neither a record
            nor a blank (bad magic or size), a record running past the end of its file (or,
            read by range, claiming more than a broker writes), a file that ends inside a
            header, a file missing or shorter than the others before the last, or
            (``exact_end``) data that ends before ``end`` (zeros, or no file holds the next
            offset).
        OSError, ObjectStoreError: a file could not be read.
    """
    if refresh:
        commitlog.refresh()
    segs = commitlog.segments
    stop = commitlog.end_offset if end is None else end
    if exact_end and start < stop and (not segs or start < segs[0].start):
        # a range asked for exactly whose first file is gone (expired, or deleted by a newer
        # upload of a snapshot): not read as empty
        raise CorruptRecordError(
            f"no CommitLog file holds offset {start}: its file is gone (expired)", start
        )
    pos = max(start, segs[0].start) if segs else start
    last = segs[-1].start if segs else 0  # files before the last are full (FileQueue's rule)
    fs = commitlog.file_size or DEFAULT_FILE_SIZE
    need = 0  # bytes the next range must hold (a record cut by the last one)
    while pos < stop:
        seg = commitlog.find(pos)
        if seg is None:
            if exact_end or pos < last:  # a gap, or a file shorter than the others
                raise CorruptRecordError(
                    f"no CommitLog file holds offset {pos}: a file is missing or short", pos
                )
            return
        want = min(seg.end, max(min(stop, pos + read_size), pos + need))
        got = commitlog.span(pos, want)
        if got is None:
            raise CorruptRecordError("the CommitLog file holding this offset is gone", pos)
        buf, base = got
        lo, hi = pos - base, min(len(buf), want - base)
        if hi <= lo:  # the file is shorter than its listing said
            if exact_end or pos < last:
                raise CorruptRecordError("a CommitLog file ends before its size", pos)
            return
        arr = np.frombuffer(buf, np.uint8, hi - lo, lo)
        starts, sizes, kind, at = walk_records(arr)
        if kind in ("torn", "past_end"):  # a head or record the range cuts, or the file does
            total = _HEAD.unpack_from(buf, lo + at)[0] if kind == "past_end" else _HEAD.size
            claim = None if commitlog.source.local else claim_problem(
                max_message_size, -1, seg.start, pos + at, total
            )  # fmt: skip
            if claim is not None:  # read by range: never a whole claim of a damaged header
                if len(starts):
                    yield CommitLogWindow(buf, base, fs), starts + pos, sizes
                raise CorruptRecordError(f"CommitLog {claim}", pos + at)
        del arr  # a mapping is never held past the walk
        if len(starts):
            yield CommitLogWindow(buf, base, fs), starts + pos, sizes
        needed, need = need, 0
        if kind == "end":
            pos = base + hi
        elif kind == "blank":
            pos = seg.end  # END_OF_FILE: the file's data ends, the next file's begins
        elif kind == "zeros":
            if exact_end and pos + at < stop:
                raise CorruptRecordError(
                    f"the CommitLog data ends (zeros) before offset {stop}", pos + at
                )
            return
        elif (
            kind in ("torn", "past_end")
            and pos + at < stop
            and pos + at + total <= seg.end  # else it runs past its file: damage, not read
            and (at or needed < total)  # else the file's bytes end before it: damage
        ):
            pos, need = pos + at, total  # the next range holds it whole
        elif kind in ("torn", "past_end") and pos + at >= stop:
            return  # what starts at or past the end is not asked for
        else:
            what = {
                "torn": "the file ends inside a record header",
                "past_end": "a record runs past the end of its file",
            }.get(kind, "not a record (magic or size)")
            raise CorruptRecordError(f"CommitLog {what}", pos + at)  # fmt: skip


def _decode_dledger(
    commitlog: MappedFiles,
    start: int,
    end: int | None,
    batch_rows: int,
    names: tuple,
    entries: DLedgerLog,
    check_crc: bool,
) -> Iterator:
    """:func:`decode_commitlog` of a DLedger CommitLog: entries walked by ``scan_raw``."""
    commitlog.refresh()
    cl = CommitLog(
        commitlog.directory,
        commitlog.file_size or DEFAULT_FILE_SIZE,
        read_only=True,
        entries=entries,
    )
    offs: list[int] = []
    sizes: list[int] = []

    def batch() -> pa.RecordBatch:  # the records of offs and sizes, decoded
        return decode_records(
            commitlog, np.array(offs, np.int64), np.array(sizes, np.int64), names, check_crc
        )

    try:
        for _, _, phys, total, *_ in cl.scan_raw(max(start, cl.min_offset), False, end):
            offs.append(phys)
            sizes.append(total)
            if len(offs) >= batch_rows:
                yield batch()
                offs.clear()
                sizes.clear()
        if cl.scan_error:
            raise CorruptRecordError(cl.scan_error, cl.scan_end)
    finally:
        cl.close()
    if offs:
        yield batch()


def walk_records(buf: bytes | memoryview | np.ndarray) -> tuple[np.ndarray, np.ndarray, str, int]:
    """Walk CommitLog records in ``buf`` from its start by TOTALSIZE: ``(starts, sizes, kind,
    pos)``, int64 arrays of each whole record's position and TOTALSIZE, what ended the walk
    (``end``: the records end exactly at the buffer's end; else a kind of
    :data:`engine.format.commitlog.STEP_KINDS`) and where. The compiled walk
    (``kernel.Kernel.walk``), or without it :func:`engine.format.commitlog.walk_segment`, whose
    rules it follows and which judges it (tests/engine/test_kernel.py)."""
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    k = kernel.load()
    if k is not None:
        return k.walk(arr)
    starts: list[int] = []
    sizes: list[int] = []
    kind, pos = "end", len(arr)
    for step in walk_segment(arr.data, len(arr)):
        if step.kind == "record":
            starts.append(step.pos)
            sizes.append(step.total)
        else:
            kind, pos = step.kind, step.pos
    return np.array(starts, np.int64), np.array(sizes, np.int64), kind, pos


def decode_records(
    source: RecordSource,
    offs: np.ndarray,
    sizes: np.ndarray,
    columns: Sequence[str] | None = None,
    check_crc: bool = True,
) -> pa.RecordBatch:
    """Decode the records at CommitLog offsets ``offs`` (int64, bytes) of ``sizes`` bytes
    column-wise, from the mapped files or a :class:`CommitLogWindow` (``source``): ``topic``,
    ``queue`` and ``queueOffset`` come from each record (no ConsumeQueue unit to check them
    against), BODYCRC is checked unless ``check_crc`` is False. ``columns``: names of
    :func:`engine.read.schema.arrow_schema` to build, in that order (None: all).

    Raises CorruptRecordError naming the CommitLog offset of a record that is not one (magic,
    TOTALSIZE, PHYSICALOFFSET, lengths, BODYCRC) or is not in ``source``."""
    names = tuple(arrow_schema().names) if columns is None else tuple(columns)
    return _decode(
        source,
        check_crc,
        np.asarray(offs, np.int64),
        np.asarray(sizes, np.int64),
        None,
        None,
        None,
        names,
    )


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """The rows of ``batches`` (one CommitLog file's run each) as one batch. Raises
    ValueError where they cannot be one (more than 2 GiB of a binary or string column: a
    caller decodes that much only without ``max_bytes``, which every bulk reader passes)."""
    import pyarrow as pa

    if len(batches) == 1:
        return batches[0]
    if not sum(b.num_rows for b in batches):
        return batches[0]
    out = pa.Table.from_batches(batches).combine_chunks().to_batches(max_chunksize=1 << 62)
    if len(out) != 1:  # (never drop the rows past the first chunk)
        raise ValueError(
            "decode: the records' bodies take more than one Arrow batch holds (2 GiB): "
            "decode them with max_bytes"
        )
    return out[0]


def _decode_foreign(
    commitlog: RecordSource,
    check_crc: bool,
    topic: str,
    qids: np.ndarray,
    offs: np.ndarray,
    sizes: np.ndarray,
    qoffs: np.ndarray,
    build: Sequence[str] | None,
    max_bytes: int | None,
) -> pa.RecordBatch:
    """:func:`_decode` of a queue of ``topic`` that holds other topics' records (an LMQ's, all
    of them; a 4.x broker's MultiDispatch queue, some): the records decoded without the topic
    and queue checks, then the
    rows returned (a ``max_bytes`` prefix: no more) compared with their units at once, and only
    the rows that are not the queue's own checked one by one (``check_unit_record``: the record
    names this queue at that offset), in order, so the first bad unit is the one raised.
    ``qids``: each unit's queue id."""
    names = tuple(arrow_schema().names if build is None else build)
    need = tuple(c for c in ("topic", "queueId", "queueOffset") if c not in names)
    batch = _decode(commitlog, check_crc, offs, sizes, None, None, None, (*names, *need), max_bytes)
    n = batch.num_rows
    import pyarrow.compute as pc

    same = pc.fill_null(pc.equal(batch.column("topic"), topic), False)
    own = (
        same.to_numpy(zero_copy_only=False)
        & (int_values(batch.column("queueId")) == qids[:n])
        & (int_values(batch.column("queueOffset")) == qoffs[:n])
    )
    for i in np.flatnonzero(~own).tolist():
        check_unit_record(
            _record_at(commitlog, int(offs[i]), int(sizes[i])), int(qids[i]), int(qoffs[i]), topic
        )
    return batch.select(list(names)) if need else batch


def _multi_dispatched(
    commitlog: RecordSource, exc: CorruptRecordError, offs: np.ndarray, sizes: np.ndarray
) -> bool:
    """Whether the record the compiled decode refused (``exc.offset``, one of ``offs``) is a
    valid record carrying ``INNER_MULTI_DISPATCH``: only then may the queue hold another
    topic's records, and the per-row check (:func:`_decode_foreign`) is worth its cost;
    damage in a plain queue is raised at once."""
    at = exc.offset
    if at is None:
        return False
    hit = np.flatnonzero(offs == at)
    if not len(hit):
        return False
    try:
        rec = _record_at(commitlog, at, int(sizes[hit[0]]))
    except CorruptRecordError:
        return False
    return PROPERTY_INNER_MULTI_DISPATCH in rec.properties


def _renamed(exc: CorruptRecordError, off: int) -> CorruptRecordError:
    """``exc`` naming the CommitLog offset ``off`` instead of a position in a buffer."""
    return CorruptRecordError(str(exc).rsplit(" (at offset ", 1)[0], off)


def _record_at(commitlog: RecordSource, off: int, size: int) -> MessageRecord:
    """The record of ``size`` bytes at CommitLog offset ``off`` (``decode_record``, body CRC not
    checked). Raises CorruptRecordError naming ``off`` when no such record is there."""
    sp = commitlog.span(off, off + size)
    if sp is None:
        raise CorruptRecordError(
            "CommitLog offset is not in the store (deleted, or not written yet)", off
        )
    m, base = sp
    p = off - base
    if p + size > len(m):
        raise CorruptRecordError("record runs past its CommitLog file", off)
    try:
        return decode_record(memoryview(m)[p : p + size], 0, check_crc=False, base_offset=off)
    except CorruptRecordError as exc:
        raise _renamed(exc, off) from exc


def _decode(
    commitlog: RecordSource,
    check_crc: bool,
    offs: np.ndarray,
    sizes: np.ndarray,
    qoffs: np.ndarray | None,
    topic: str | None,
    queue_id: int | None,
    columns: Sequence[str] | None,
    max_bytes: int | None = None,
) -> pa.RecordBatch:
    """Decode records at CommitLog ``offs`` of ``sizes`` bytes; split by CommitLog file.
    ``max_bytes``: only the first records, as many as have bodies of at most this many bytes
    in all, the first one always (:func:`decode_units`)."""
    names = list(arrow_schema().names if columns is None else columns)
    if "body" not in names:
        max_bytes = None  # no body is decoded: nothing to bound
    fs = commitlog.file_size
    n = len(offs)
    if not n or not fs:
        if n:
            raise CorruptRecordError("CommitLog offset is not in the store", int(offs[0]))
        return _empty(names)
    runs = _ranged_runs(commitlog, offs, sizes) if commitlog.ranged else _file_runs(commitlog, offs)
    batches: list[pa.RecordBatch] = []
    left = max_bytes  # bytes of bodies the runs after these may still decode
    for a, b, buf, base in runs:
        batch = _decode_segment(
            commitlog,
            check_crc,
            buf,
            base,
            offs[a:b],
            sizes[a:b],
            None if qoffs is None else qoffs[a:b],
            topic,
            queue_id,
            names,
            None if left is None else (left, not batches),
        )
        batches.append(batch)
        if left is not None:
            if batch.num_rows < b - a:
                break  # the bound stopped it: the rest in another call
            left -= int(_body_lengths(batch).sum())
    return _concat(batches)


def body_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of the bodies of a decoded batch (one with a ``body`` column, compressed bodies
    as inflated): what ``max_bytes`` of :func:`decode_units` counts."""
    return int(_body_lengths(batch).sum())


def _body_lengths(batch: pa.RecordBatch) -> np.ndarray:
    """Bytes of each row's body (int64; a batch with a ``body`` column)."""
    col = batch.column("body")
    n = len(col)
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32, count=n + 1, offset=col.offset * 4)
    return np.diff(offsets).astype(np.int64)


def _prefix(lengths: np.ndarray, room: int, first: bool) -> int:
    """How many of the first rows, whose bodies have ``lengths`` bytes, fit in ``room`` bytes
    (with ``first``, at least one)."""
    k = int(np.searchsorted(np.cumsum(lengths), room, side="right"))
    return max(k, 1) if first and len(lengths) else k


_Run = tuple[int, int, "SegmentMap | bytes", int]


def _file_runs(commitlog: RecordSource, offs: np.ndarray) -> list[_Run]:
    """``(a, b, buffer, base)``: the records ``offs[a:b]`` lie in one CommitLog file, whose
    whole mapping is ``buffer`` (``buffer[x - base]`` the byte at offset ``x``)."""
    n = len(offs)
    seg = offs // commitlog.file_size
    bounds = [0, *(np.flatnonzero(np.diff(seg)) + 1).tolist(), n]
    runs = []
    for a, b in itertools.pairwise(bounds):
        sp = commitlog.span(int(offs[a]), int(offs[a]) + 1)
        if sp is None:
            raise CorruptRecordError(
                "CommitLog offset is not in the store (deleted, or not written yet)", int(offs[a])
            )
        runs.append((a, b, sp[0], sp[1]))
    return runs


def _ranged_runs(commitlog: RecordSource, offs: np.ndarray, sizes: np.ndarray) -> list[_Run]:
    """The runs of :func:`_file_runs` for a source read by range (object storage): each
    buffer is what :meth:`RecordSource.span` gives for the run's first record (the cached
    block that holds it, without a copy, or that record's bytes), and the run the records that
    lie whole in it (records in increasing offset order; otherwise one record a run), so a
    reader asks for the blocks its records are in, never a whole file."""
    n = len(offs)
    ends = offs + sizes
    ordered = n < 2 or bool(np.all(np.diff(offs) > 0))
    runs = []
    a = 0
    while a < n:
        off = int(offs[a])
        sp = commitlog.span(off, int(ends[a]))
        if sp is None:
            raise CorruptRecordError(
                "CommitLog offset is not in the store (deleted, or not written yet)", off
            )
        buf, base = sp
        b = a + 1
        if ordered:
            b = max(b, a + int(np.searchsorted(ends[a:], base + len(buf), "right")))
        runs.append((a, b, buf, base))
        a = b
    return runs


def _empty(names: Sequence[str]) -> pa.RecordBatch:
    import pyarrow as pa

    schema = arrow_schema()
    return pa.RecordBatch.from_arrays(
        [pa.array([], schema.field(x).type) for x in names],
        schema=pa.schema([schema.field(x) for x in names]),
    )


def _first_bad(offs: np.ndarray, bad: np.ndarray) -> int:
    return int(offs[int(np.argmax(bad))])


def _decode_segment(
    commitlog: RecordSource,
    check_crc: bool,
    m: SegmentMap | bytes,
    seg_start: int,
    offs: np.ndarray,
    sizes: np.ndarray,
    qoffs: np.ndarray | None,
    topic: str | None,
    queue_id: int | None,
    names: Sequence[str],
    bound: tuple[int, bool] | None = None,
) -> pa.RecordBatch:
    """Decode records that all lie in one mapped CommitLog file (see :func:`decode_units`).
    ``bound``: ``(room, first)``: only the first records, as many as have bodies of at most
    ``room`` bytes in all (with ``first``, at least one); None: all of them."""
    import pyarrow as pa

    n = len(offs)
    buf = np.frombuffer(m, dtype=np.uint8)
    pos = offs - seg_start
    bad = (sizes < _MIN_RECORD) | (pos + sizes > len(buf)) | (pos < 0)
    if bad.any():
        raise CorruptRecordError(
            "the unit's size runs past the CommitLog file or is smaller than a record",
            _first_bad(offs, bad),
        )
    k = kernel.load()
    all_slow = None if bound is None else _slow_rooms(n, bound)
    if k is None:  # no compiled core: every record through the per-record decoder
        return _slow_batch(
            commitlog, check_crc, offs, sizes, qoffs, topic, queue_id, names, all_slow
        )
    if n > 1 and int(sizes.sum()) > _MAX_DECODE_BYTES:  # Arrow's int32 offsets: in halves
        h = n // 2
        halves: list[pa.RecordBatch] = []
        for s in (slice(0, h), slice(h, n)):
            q = None if qoffs is None else qoffs[s]
            half_bound = bound
            if bound is not None and halves:
                half_bound = (bound[0] - int(_body_lengths(halves[0]).sum()), False)
            halves.append(
                _decode_segment(
                    commitlog,
                    check_crc,
                    m,
                    seg_start,
                    offs[s],
                    sizes[s],
                    q,
                    topic,
                    queue_id,
                    names,
                    half_bound,
                )
            )
            if bound is not None and halves[-1].num_rows < s.stop - s.start:
                break
        return _concat(halves)
    want = CHECK_CRC if check_crc else 0
    for name in names:
        want |= _WANT.get(name, 0)
    if topic is not None:
        want &= ~WANT_TOPIC  # every row has the queue's topic: no need to read it
    fields = {_NUMERIC[x] for x in names if x in _NUMERIC}
    if "body" in names:
        fields.add("sysFlag")  # which bodies are compressed (_inflated)
    if qoffs is not None:
        fields.discard("queueOffset")  # the unit's queue offset is the column
    fixed = [(f, FIXED_V4_POSITIONS[f], _WIDTH[f]) for f in sorted(fields)]
    d = k.decode(
        buf, pos, sizes, offs, _LAYOUT, fixed, want, queue_id,
        None if topic is None else topic.encode("utf-8"), qoffs,
    )  # fmt: skip
    if d.bad >= 0:
        if d.bad_code == kernel.BAD_QOFF:  # what else is wrong with it first (its topic, ...)
            i = slice(d.bad, d.bad + 1)
            q_i = None if qoffs is None else qoffs[i]
            _slow_batch(commitlog, check_crc, offs[i], sizes[i], q_i, topic, queue_id, names)
            if _record_at(commitlog, int(offs[d.bad]), int(sizes[d.bad])).sys_flag & (
                INNER_BATCH_FLAG
            ):
                # a message inside an inner batch (BatchCQ): its queue offset is the record's
                # plus its place, which the per-record decoder checked; batches are rare
                return _slow_batch(
                    commitlog, check_crc, offs, sizes, qoffs, topic, queue_id, names, all_slow
                )
        unit_qoff = None if qoffs is None else int(qoffs[d.bad])
        raise CorruptRecordError(
            _bad_message(d, int(sizes[d.bad]), queue_id, unit_qoff), int(offs[d.bad])
        )
    fast = d.fast
    if not d.rows:
        return _slow_batch(
            commitlog, check_crc, offs, sizes, qoffs, topic, queue_id, names, all_slow
        )
    every = d.rows == n
    a = _fast_batch(d, None if qoffs is None else (qoffs if every else qoffs[fast]), topic, names)
    if "body" in names:
        inflated = _inflated(a, d.fixed["sysFlag"], bound, every)
        if inflated is None:  # a body served as stored, past the bound, a codec's error
            return _slow_batch(
                commitlog, check_crc, offs, sizes, qoffs, topic, queue_id, names, all_slow
            )
        a = inflated
    if every:
        if bound is not None:
            a = a.slice(0, _prefix(_body_lengths(a), *bound))
        return a
    fi = np.flatnonzero(fast)
    si = np.flatnonzero(~fast)
    slow_rooms = None
    if bound is not None:  # each slow row's room: the bound less the fast bodies before it
        lengths = np.zeros(n, dtype=np.int64)
        lengths[fi] = _body_lengths(a)
        before = np.cumsum(lengths) - lengths
        slow_rooms = bound[0] - before[si]
        if bound[1] and si[0] == 0:
            slow_rooms[0] = np.iinfo(np.int64).max  # the first record: always decoded
    b = _slow_batch(
        commitlog,
        check_crc,
        offs[si],
        sizes[si],
        None if qoffs is None else qoffs[si],
        topic,
        queue_id,
        names,
        slow_rooms,
    )
    if bound is not None:  # the rows before the first that does not fit
        got = b.num_rows
        stop = int(si[got]) if got < len(si) else n
        lengths[si[:got]] = _body_lengths(b)
        n = min(stop, _prefix(lengths[:stop], *bound))
        nf, ns = int(np.searchsorted(fi, n)), int(np.searchsorted(si, n))
        a, b, fi, si = a.slice(0, nf), b.slice(0, ns), fi[:nf], si[:ns]
    order = np.empty(n, dtype=np.int64)
    order[np.concatenate([fi, si])] = np.arange(n)
    return _concat([a, b]).take(pa.array(order))


def _inflated(
    batch: pa.RecordBatch, sys_flags: np.ndarray, bound: tuple[int, bool] | None, can_cut: bool
) -> pa.RecordBatch | None:
    """``batch`` (rows the kernel decoded, with a ``body`` column holding each body as
    stored) with its compressed bodies (``sys_flags``: each row's SYSFLAG) inflated, as the
    per-record decoder's :attr:`MessageRecord.plain_body` inflates them
    (``MessageDecoder.decode`` with ``deCompressBody``); the batch itself when none is
    compressed. A body inflates only after the ones before it fit ``bound`` (``(room,
    first)``, :func:`_decode_segment`'s): with ``can_cut`` the batch ends before the first row
    that does not fit (at least one row with ``first``), else None. None too where the
    per-record decoder must say it: a body that stays compressed (past MAX_INFLATED_BODY: its
    row gets a property), one that does not decompress (its CorruptRecordError names the
    CommitLog offset), bodies past an Arrow binary column's 2 GiB. Python runs once per
    compressed body, whose inflation costs more."""
    import pyarrow as pa

    packed = np.flatnonzero(sys_flags & COMPRESSED_FLAG)
    if not len(packed):
        return batch
    col = batch.column("body")
    n = len(col)
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32, count=n + 1, offset=col.offset * 4)
    stored = col.buffers()[2]
    data = memoryview(stored if stored is not None else b"")
    lengths = np.diff(offsets).astype(np.int64)
    ends = np.cumsum(lengths)  # of the bodies as stored: moved by each inflation after
    grown = 0
    pieces: list[bytes | memoryview] = []
    at = 0  # the first row not in pieces yet
    rows = n
    for i in packed.tolist():
        try:
            body, codec = inflate_body(bytes(data[offsets[i] : offsets[i + 1]]), int(sys_flags[i]))
        except CorruptRecordError:
            return None
        if codec is not None:
            return None
        grown += len(body) - int(lengths[i])
        if bound is not None and int(ends[i]) + grown > bound[0] and not (i == 0 and bound[1]):
            if not can_cut:
                return None
            rows = i  # (the rows before it that do not fit either: the caller's _prefix)
            break
        pieces += (data[offsets[at] : offsets[i]], body)
        lengths[i] = len(body)
        at = i + 1
    pieces.append(data[offsets[at] : offsets[rows]])
    new_ends = np.cumsum(lengths[:rows])
    if rows and int(new_ends[-1]) > np.iinfo(np.int32).max:
        return None
    new_offsets = np.zeros(rows + 1, dtype=np.int32)
    new_offsets[1:] = new_ends
    bodies = pa.Array.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(new_offsets), pa.py_buffer(b"".join(pieces))]
    )
    out = batch.slice(0, rows)
    return out.set_column(out.schema.get_field_index("body"), "body", bodies)


def _slow_rooms(n: int, bound: tuple[int, bool]) -> np.ndarray:
    """:func:`_slow_batch`'s ``rooms`` when all ``n`` records take it: the bound's room for
    each (the first one unbounded when the bound says it is always decoded)."""
    rooms = np.full(n, bound[0], dtype=np.int64)
    if bound[1] and n:
        rooms[0] = np.iinfo(np.int64).max
    return rooms


def _bad_message(
    d: kernel.Decoded, size: int, queue_id: int | None, queue_offset: int | None = None
) -> str:
    """The CorruptRecordError text of what ``Kernel.decode`` found at ``d.bad``."""
    v = d.bad_value
    if d.bad_code == kernel.BAD_QOFF:
        return unit_mismatch(v, -1 if queue_offset is None else queue_offset)
    return {
        kernel.BAD_MAGIC: lambda: f"bad magic code 0x{v & 0xFFFFFFFF:08X}",
        kernel.BAD_TOTAL: lambda: f"TOTALSIZE {v} != the unit's size {size}",
        kernel.BAD_PHYS: lambda: f"PHYSICALOFFSET {v} != the unit's CommitLog offset",
        kernel.BAD_QUEUE: lambda: f"the record belongs to queue {v}, not {queue_id}",
        kernel.BAD_CRC: lambda: "body CRC mismatch",
    }[d.bad_code]()


def _fast_batch(
    d: kernel.Decoded, qoffs: np.ndarray | None, topic: str | None, names: Sequence[str]
) -> pa.RecordBatch:
    """The Arrow batch of the records ``Kernel.decode`` decoded (``d``: a ``kernel.Decoded``):
    its buffers become the columns without a copy. ``qoffs``: their queue offsets (None: the
    records' QUEUEOFFSET field); ``topic``: the queue's topic (None: each record's own)."""
    import pyarrow as pa

    n = d.rows
    schema = arrow_schema()
    buf = pa.py_buffer

    def strings(name: str, kind: pa.DataType | None = None, length: int = n) -> pa.Array:
        offsets, data = d.strings[name]
        return pa.Array.from_buffers(kind or pa.string(), length, [None, buf(offsets), buf(data)])

    def number(name: str) -> pa.Array:
        field = _NUMERIC[name]
        values = qoffs if field == "queueOffset" and qoffs is not None else d.fixed[field]
        return pa.Array.from_buffers(schema.field(name).type, n, [None, buf(values)])

    def msg_id() -> (
        pa.Array
    ):  # MessageDecoder.createMessageId: 32 hex digits a row, from the kernel
        offsets = np.arange(0, _MSG_ID_V4_HEX * n + 1, _MSG_ID_V4_HEX, dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), n, [None, buf(offsets), buf(d.msg_id)])

    def topic_col() -> pa.Array:
        if topic is None:
            return strings("topic")
        raw = topic.encode("utf-8")
        offsets = np.arange(0, len(raw) * n + 1, max(len(raw), 1), dtype=np.int32)[: n + 1]
        return pa.Array.from_buffers(
            pa.string(), n, [None, buf(offsets if raw else np.zeros(n + 1, np.int32)), buf(raw * n)]
        )

    def tags() -> pa.Array:
        offsets, data = d.strings["tags"]
        valid = d.tags_valid
        present = int(np.unpackbits(valid, count=n, bitorder="little").sum())
        mask = None if present == n else buf(valid)
        return pa.Array.from_buffers(
            pa.string(), n, [mask, buf(offsets), buf(data)], null_count=n - present
        )

    def keys() -> pa.Array:
        items = strings("key_items", length=len(d.strings["key_items"][0]) - 1)
        return pa.Array.from_buffers(
            schema.field("keys").type, n, [None, buf(d.key_lists)], children=[items]
        )

    def properties() -> pa.Array:
        pairs = len(d.strings["prop_names"][0]) - 1
        return pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, buf(d.prop_maps)]),
            strings("prop_names", length=pairs),
            strings("prop_values", length=pairs),
        )

    make = {
        "msgId": msg_id,
        "body": lambda: strings("body", pa.binary()),
        "topic": topic_col,
        "tags": tags,
        "keys": keys,
        "properties": properties,
        "bornHost": lambda: strings("bornHost"),
        "storeHost": lambda: strings("storeHost"),
    }
    arrays = [number(x) if x in _NUMERIC else make[x]() for x in names]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([schema.field(x) for x in names]))


def _slow_batch(
    commitlog: RecordSource,
    check_crc: bool,
    offs: np.ndarray,
    sizes: np.ndarray,
    qoffs: np.ndarray | None,
    topic: str | None,
    queue_id: int | None,
    names: Sequence[str],
    rooms: np.ndarray | None = None,
) -> pa.RecordBatch:
    """Record-by-record decode with ``engine.format.message.decode_record`` (any record kind).

    Bodies are decompressed. ``rooms``: the decode stops before record ``i`` when its body
    and the bodies decoded before it would take more than ``rooms[i]`` bytes (a shorter
    batch: :func:`decode_units`' ``max_bytes``); None: every record. Raises
    CorruptRecordError for a record that is not the one its unit describes (see
    :func:`decode_units`)."""
    import pyarrow as pa

    rows: dict[str, list] = {name: [] for name in names}
    # an inner batch's record read, checked and split once for all its rows (each row read
    # and checked the whole batch: quadratic in its messages)
    inner_cache = InnerBatchCache()
    spent = 0  # bytes of the bodies decoded
    for i, (off, size) in enumerate(zip(offs.tolist(), sizes.tolist())):
        hit = inner_cache.get(off, size) if qoffs is not None else None
        try:
            if hit is not None and qoffs is not None:
                rec = inner_message(hit[0], int(qoffs[i]), inner_cache)
            else:
                rec = _record_at(commitlog, off, size)
                if check_crc:
                    check_body_crc(rec)
                if rec.sys_flag & INNER_BATCH_FLAG and qoffs is not None:
                    # a BatchCQ unit names each message of the batch (engine.format.batchcq)
                    rec = inner_message(rec, int(qoffs[i]), inner_cache)
            # first: a body left compressed (past MAX_INFLATED_BODY) adds its property
            body = rec.plain_body if "body" in rows else None
        except CorruptRecordError as exc:  # name the CommitLog offset, not the buffer's
            raise _renamed(exc, off) from exc
        if rooms is not None and body is not None:
            if spent + len(body) > rooms[i]:
                break  # past the bound: this record and the rest in another call
            spent += len(body)
        if rec.store_size != size:
            raise CorruptRecordError(f"TOTALSIZE {rec.store_size} != the unit's size {size}", off)
        if (topic is not None and rec.topic != topic) or (
            queue_id is not None and rec.queue_id != queue_id
        ):
            raise CorruptRecordError(
                f"the record belongs to {rec.topic!r}/{rec.queue_id}, not {topic!r}"
                + ("" if queue_id is None else f"/{queue_id}"),
                off,
            )
        if qoffs is not None and rec.queue_offset != int(qoffs[i]):
            raise CorruptRecordError(unit_mismatch(rec.queue_offset, int(qoffs[i])), off)
        row = message_fields(rec)  # the contract's fields, one home (engine.read.jsonline)
        row["queue"] = rec.queue_id
        if qoffs is not None:
            row["queueOffset"] = int(qoffs[i])
        row["properties"] = list(rec.properties.items())
        for name in names:
            rows[name].append(body if name == "body" else row[name])
    schema = arrow_schema()
    return pa.RecordBatch.from_arrays(
        [pa.array(rows[x], type=schema.field(x).type) for x in names],
        schema=pa.schema([schema.field(x) for x in names]),
    )
