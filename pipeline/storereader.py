"""Read-only, lock-free access to a store's ConsumeQueues and CommitLog, decoded to Arrow.

This is what the Spark data source (``pipeline.datasource``) runs on the driver (offsets) and
in every task (reading a range of queue offsets). It opens no lock and writes nothing, so it
can read a store that a mount or a broker is writing at the same time: both write the CommitLog
record first and its 20-byte ConsumeQueue unit after it (``ReputMessageService``), so every unit
a reader sees points at a record that is already there.

It is lighter than ``engine.store.MessageStore(read_only=True)``: no recovery scan, no
IndexFile. It trusts the ConsumeQueues as they are on disk:

* a queue's *max offset* is the end of the valid prefix of its last file (units with
  ``commitLogOffset >= 0`` and ``size > 0``, ``ConsumeQueue.recover``), minus trailing units
  whose record is not (yet) a valid record in the CommitLog;
* its *min offset* is the first unit that is not blank filler (``fillPreBlank``) and whose
  record is still in the CommitLog (``correctMinOffset``: segments below the CommitLog's min
  offset were deleted by retention).

A store that crashed and was never recovered may have units past the CommitLog's valid end;
mount it once (or open it with ``MessageStore``) to recover it first.

Formats: ``engine.consumequeue`` (units), ``engine.message`` (records), reference sections 1-3.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import threading
from typing import Iterable, Iterator

import numpy as np

from engine.consumequeue import BLANK_UNIT_SIZE, CQ_STORE_UNIT_SIZE
from engine.errors import CorruptRecordError
from engine.javahash import tags_code
from engine.message import (FIXED_V4, INT32, INT64, MAGIC_V1, MAGIC_V2, decode_record,
                            decompress_body, host_to_str)

__all__ = ["StoreFiles", "UNIT_DTYPE", "SCHEDULE_TOPIC", "arrow_schema", "records_to_batch"]

_NAME = re.compile(r"^\d{20}$")
#: A ConsumeQueue unit as a numpy record (big-endian): commitLogOffset, size, tagsCode.
UNIT_DTYPE = np.dtype([("off", ">i8"), ("size", ">i4"), ("tags", ">i8")])
#: TopicValidator.RMQ_SYS_SCHEDULE_TOPIC: its tagsCode is a deliver time, not a tag hash.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
_HEAD = struct.Struct(">iI")  # TOTALSIZE | MAGICCODE
_STORE_TS_V4 = 56  # STORETIMESTAMP position with an IPv4 born host
_SYSFLAG_POS = 36


def _segment_names(directory: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if _NAME.match(n))


class _Segments:
    """Files of one size named by their 20-digit start offset, read through mmap."""

    def __init__(self, directory: str):
        self.directory = directory
        self.lock = threading.Lock()
        self.maps: dict[int, mmap.mmap] = {}
        self.refresh()

    def refresh(self) -> None:
        names = _segment_names(self.directory)
        sizes = {}
        self.starts = []
        for n in names:
            try:
                size = os.path.getsize(os.path.join(self.directory, n))
            except FileNotFoundError:  # deleted by retention meanwhile
                continue
            if size:
                self.starts.append(int(n))
                sizes[int(n)] = size
        self.sizes = sizes
        self.file_size = max(sizes.values()) if sizes else 0

    @property
    def min_offset(self) -> int:
        return self.starts[0] if self.starts else 0

    def _map(self, start: int) -> mmap.mmap | None:
        m = self.maps.get(start)
        if m is None:
            with self.lock:
                m = self.maps.get(start)
                if m is None:
                    path = os.path.join(self.directory, f"{start:020d}")
                    try:
                        with open(path, "rb") as f:
                            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    except (FileNotFoundError, ValueError):
                        return None
                    self.maps[start] = m
        return m

    def locate(self, offset: int) -> tuple[mmap.mmap, int] | None:
        """``(mapping of the file holding offset, position in it)`` or None."""
        if not self.file_size or offset < 0:
            return None
        start = offset - offset % self.file_size
        if start not in self.sizes:
            self.refresh()
            if start not in self.sizes:
                return None
        m = self._map(start)
        if m is None:
            return None
        pos = offset - start
        if pos >= len(m):  # the file grew since it was mapped
            with self.lock:
                self.maps.pop(start, None)
            m = self._map(start)
            if m is None or pos >= len(m):
                return None
        return m, pos

    def close(self) -> None:
        with self.lock:
            for m in self.maps.values():
                m.close()
            self.maps.clear()


class _Queue:
    """One ``consumequeue/<topic>/<queueId>`` directory."""

    def __init__(self, directory: str):
        self.files = _Segments(directory)

    def units(self, start: int, end: int) -> np.ndarray:
        """Units of queue offsets ``[start, end)`` as a ``UNIT_DTYPE`` array (may be shorter
        when files are missing)."""
        parts = []
        pos = start * CQ_STORE_UNIT_SIZE
        stop = end * CQ_STORE_UNIT_SIZE
        while pos < stop:
            loc = self.files.locate(pos)
            if loc is None:
                break
            m, p = loc
            n = min(stop - pos, len(m) - p)
            n -= n % CQ_STORE_UNIT_SIZE
            if n <= 0:
                break
            parts.append(np.frombuffer(m, dtype=UNIT_DTYPE, count=n // CQ_STORE_UNIT_SIZE,
                                       offset=p).copy())
            pos += n
        if not parts:
            return np.empty(0, dtype=UNIT_DTYPE)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def valid_end(self) -> int:
        """Queue offset one past the last valid unit on disk."""
        self.files.refresh()
        if not self.files.starts:
            return 0
        last = self.files.starts[-1]
        loc = self.files.locate(last)
        if loc is None:
            return last // CQ_STORE_UNIT_SIZE
        m, _ = loc
        arr = np.frombuffer(m, dtype=UNIT_DTYPE, count=len(m) // CQ_STORE_UNIT_SIZE)
        bad = (arr["off"] < 0) | (arr["size"] <= 0)
        n = int(np.argmax(bad)) if bad.any() else len(arr)
        return last // CQ_STORE_UNIT_SIZE + n


class StoreFiles:
    """A store directory opened for reading only, without a lock.

    Args:
        root: the store directory (``storePathRootDir``: has ``commitlog/`` and
            ``consumequeue/``).

    Raises:
        FileNotFoundError: ``root`` has no ``commitlog/`` directory.
    """

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        cl = os.path.join(self.root, "commitlog")
        if not os.path.isdir(cl):
            raise FileNotFoundError(f"{root}: not a RocketMQ store (no commitlog/ directory)")
        self.commitlog = _Segments(cl)
        self._queues: dict[tuple[str, int], _Queue] = {}

    # -- layout ------------------------------------------------------------------------------
    def topics(self) -> list[str]:
        """Topics that have a ConsumeQueue directory, sorted."""
        base = os.path.join(self.root, "consumequeue")
        try:
            return sorted(t for t in os.listdir(base) if os.path.isdir(os.path.join(base, t)))
        except FileNotFoundError:
            return []

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of a topic that have a ConsumeQueue directory, sorted."""
        base = os.path.join(self.root, "consumequeue", topic)
        try:
            return sorted(int(q) for q in os.listdir(base) if q.isdigit())
        except FileNotFoundError:
            return []

    def queue(self, topic: str, queue_id: int) -> _Queue:
        key = (topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue(
                os.path.join(self.root, "consumequeue", topic, str(queue_id)))
        return q

    # -- offsets -----------------------------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        """``getMaxOffsetInQueue``: one past the last queue offset whose record is readable."""
        q = self.queue(topic, queue_id)
        end = q.valid_end()
        lo = q.files.min_offset // CQ_STORE_UNIT_SIZE
        # A concurrent writer may have written a unit whose record we cannot see yet (another
        # host's page cache, a torn copy): back off to the last unit whose record header is sane.
        while end > lo:
            u = q.units(end - 1, end)
            if len(u) and self._record_ok(int(u["off"][0]), int(u["size"][0])):
                break
            end -= 1
        return end

    def min_offset(self, topic: str, queue_id: int) -> int:
        """``getMinOffsetInQueue``: first queue offset whose record is still in the CommitLog."""
        q = self.queue(topic, queue_id)
        q.files.refresh()
        lo = q.files.min_offset // CQ_STORE_UNIT_SIZE
        hi = q.valid_end()
        self.commitlog.refresh()
        cl_min = self.commitlog.min_offset
        while lo < hi:  # first unit with off >= commitlog min and not blank filler
            mid = (lo + hi) // 2
            u = q.units(mid, mid + 1)
            if len(u) and int(u["off"][0]) >= cl_min and int(u["size"][0]) != BLANK_UNIT_SIZE:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _record_ok(self, off: int, size: int) -> bool:
        loc = self.commitlog.locate(off)
        if loc is None:
            return False
        m, p = loc
        if p + size > len(m):
            return False
        total, magic = _HEAD.unpack_from(m, p)
        return total == size and magic in (MAGIC_V1, MAGIC_V2)

    def store_timestamp(self, off: int) -> int:
        """STORETIMESTAMP (epoch ms) of the record at CommitLog offset ``off``."""
        loc = self.commitlog.locate(off)
        if loc is None:
            raise CorruptRecordError("record not in the CommitLog", off)
        m, p = loc
        sys_flag = INT32.unpack_from(m, p + _SYSFLAG_POS)[0]
        pos = _STORE_TS_V4 + (12 if sys_flag & 0x10 else 0)
        return INT64.unpack_from(m, p + pos)[0]

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First queue offset stored at or after ``timestamp`` (epoch ms), or the max offset
        when every message is older (``getOffsetInQueueByTime``, binary search)."""
        q = self.queue(topic, queue_id)
        lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            u = q.units(mid, mid + 1)
            if self.store_timestamp(int(u["off"][0])) >= timestamp:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- reading -----------------------------------------------------------------------------
    def read_batches(self, topic: str, queue_id: int, start: int, end: int,
                     tags: Iterable[str] | None = None, batch_rows: int = 32768,
                     columns: tuple | None = None) -> Iterator:
        """Decode queue offsets ``[start, end)`` of one queue into Arrow record batches.

        ``tags``: keep only messages whose TAGS equal one of these; units are first selected by
        their ConsumeQueue tagsCode (Java hash of the tag), then the decoded tag is compared,
        so hash collisions are removed. Batches have the schema :func:`arrow_schema`, or only
        ``columns`` of it, in that order.

        Raises CorruptRecordError when a unit points at bytes that are not its record.
        """
        q = self.queue(topic, queue_id)
        wanted = None
        codes = None
        if tags is not None:
            wanted = set(tags)
            if topic != SCHEDULE_TOPIC:
                codes = np.array(sorted({tags_code(t) for t in wanted}), dtype=np.int64)
        pos = start
        while pos < end:
            n = min(batch_rows, end - pos)
            units = q.units(pos, pos + n)
            if len(units) < n:
                raise CorruptRecordError(
                    f"{topic}/{queue_id}: ConsumeQueue units {pos}..{pos + n} are missing")
            qoffs = np.arange(pos, pos + n, dtype=np.int64)
            keep = units["size"] != BLANK_UNIT_SIZE
            if codes is not None:
                keep &= np.isin(units["tags"].astype(np.int64), codes)
            if not keep.all():
                units, qoffs = units[keep], qoffs[keep]
            if len(units):
                batch = records_to_batch(self.commitlog, topic, queue_id, units, qoffs, wanted,
                                         columns)
                if batch.num_rows:
                    yield batch
            pos += n

    def close(self) -> None:
        """Unmap every file."""
        self.commitlog.close()
        for q in self._queues.values():
            q.files.close()


# ---------------------------------------------------------------------------------------------
# Arrow decoding

def _arrow_schema():
    import pyarrow as pa
    s, i32, i64 = pa.string(), pa.int32(), pa.int64()
    return pa.schema([
        ("queueId", i32), ("queueOffset", i64), ("commitLogOffset", i64), ("storeSize", i32),
        ("msgId", s), ("tags", s), ("keys", pa.list_(s)), ("bornTimestamp", i64),
        ("bornHost", s), ("storeTimestamp", i64), ("storeHost", s), ("sysFlag", i32),
        ("flag", i32), ("bodyCRC", i32), ("reconsumeTimes", i32),
        ("preparedTransactionOffset", i64), ("properties", pa.map_(s, s)), ("body", pa.binary()),
        ("topic", s), ("queue", i32),
    ])


_schema_cache = []


def arrow_schema():
    """The Arrow schema of the batches (Spark: ``pipeline.schema.DATASOURCE_DDL``)."""
    if not _schema_cache:
        _schema_cache.append(_arrow_schema())
    return _schema_cache[0]


_host_cache: dict = {}


def _host(h) -> str:
    s = _host_cache.get(h)
    if s is None:
        s = _host_cache[h] = host_to_str(h)
    return s


_msgid_prefix: dict = {}


def _msg_id(host, off: int) -> str:
    p = _msgid_prefix.get(host)
    if p is None:
        p = _msgid_prefix[host] = (host[0] + INT32.pack(host[1])).hex().upper()
    return f"{p}{off:016X}"


def _props(raw: bytes) -> list:
    """``MessageDecoder.string2messageProperties`` as a list of (name, value) pairs."""
    out = []
    if raw:
        for item in raw.decode("utf-8", errors="replace").split("\x02"):
            k, sep, v = item.partition("\x01")
            if k and v:
                out.append((k, v))
    return out


_COLUMNS = ("queueId", "queueOffset", "commitLogOffset", "storeSize", "msgId", "tags", "keys",
            "bornTimestamp", "bornHost", "storeTimestamp", "storeHost", "sysFlag", "flag",
            "bodyCRC", "reconsumeTimes", "preparedTransactionOffset", "properties", "body")


def _slow_row(buf, qoff: int, topic: str, queue_id: int):
    """Decode one record with ``engine.message.decode_record`` (IPv6 hosts, V2, compressed)."""
    rec = decode_record(buf, 0, check_crc=False)
    if rec.topic != topic or rec.queue_id != queue_id:
        raise CorruptRecordError(f"{topic}/{queue_id} offset {qoff}: the record there belongs "
                                 f"to {rec.topic}/{rec.queue_id}", rec.commitlog_offset)
    props = list(rec.properties.items())
    return (rec.queue_id, qoff, rec.commitlog_offset, rec.store_size,
            _msg_id(rec.store_host, rec.commitlog_offset), rec.tags, rec.keys,
            rec.born_timestamp, _host(rec.born_host), rec.store_timestamp, _host(rec.store_host),
            rec.sys_flag, rec.flag, rec.body_crc, rec.reconsume_times,
            rec.prepared_transaction_offset, props,
            decompress_body(rec.body, rec.sys_flag))


def records_to_batch(commitlog: _Segments, topic: str, queue_id: int, units: np.ndarray,
                     queue_offsets: np.ndarray, wanted_tags: set | None = None,
                     columns: tuple | None = None):
    """Decode the records the ``units`` point at into one Arrow RecordBatch (:func:`arrow_schema`).

    ``queue_offsets[i]`` is the queue offset of ``units[i]``; ``wanted_tags`` keeps only rows
    whose TAGS is one of them; ``columns`` (names of :func:`arrow_schema`) builds only those
    columns, in that order (None: all). Runs of units in one CommitLog file whose records are all the
    common kind (V1 magic, IPv4 hosts, uncompressed) are decoded column-wise with numpy and
    pyarrow (:func:`_fast_batch`); anything else goes record by record (:func:`_rows_batch`).
    Both give identical rows. Raises CorruptRecordError for a unit whose bytes are not a
    record of this queue.
    """
    import pyarrow as pa
    build = columns
    if columns is not None and wanted_tags is not None and "tags" not in columns:
        build = (*columns, "tags")
    offs = units["off"].astype(np.int64)
    fs = commitlog.file_size
    batches = []
    if fs and len(offs):
        seg = offs // fs
        cuts = np.flatnonzero(np.diff(seg)) + 1
        bounds = [0, *cuts.tolist(), len(offs)]
        for a, b in zip(bounds, bounds[1:]):
            loc = commitlog.locate(int(offs[a]))
            batch = None
            if loc is not None:
                batch = _fast_batch(loc[0], int(offs[a]) - loc[1], offs[a:b],
                                    units["size"][a:b].astype(np.int64), queue_offsets[a:b],
                                    topic, queue_id, build)
            if batch is None:
                batch = _rows_batch(commitlog, topic, queue_id, units[a:b], queue_offsets[a:b])
                if build is not None:
                    batch = batch.select(list(build))
            batches.append(batch)
    else:
        batch = _rows_batch(commitlog, topic, queue_id, units, queue_offsets)
        batches.append(batch if build is None else batch.select(list(build)))
    batch = batches[0] if len(batches) == 1 else pa.RecordBatch.from_struct_array(
        pa.concat_arrays([b.to_struct_array() for b in batches]))
    if wanted_tags is not None and batch.num_rows:
        import pyarrow.compute as pc
        batch = batch.filter(pc.fill_null(pc.is_in(batch.column("tags"),
                                                   pa.array(sorted(wanted_tags))), False))
    if build is not columns:
        batch = batch.select(list(columns))
    return batch


_HDR = np.dtype([("total", ">i4"), ("magic", ">u4"), ("crc", ">i4"), ("qid", ">i4"),
                 ("flag", ">i4"), ("qoff", ">i8"), ("phys", ">i8"), ("sys", ">i4"),
                 ("born", ">i8"), ("bhost", ">u8"), ("store", ">i8"), ("shost", ">u8"),
                 ("recon", ">i4"), ("prep", ">i8"), ("blen", ">i4")])
assert _HDR.itemsize == FIXED_V4.size == 88


def _hosts(packed: np.ndarray):
    """``ip:port`` strings of 8-byte IPv4 hosts (ip 4 bytes, int32 port) as an Arrow array."""
    import pyarrow as pa
    uniq, inverse = np.unique(packed, return_inverse=True)
    names = [_host((int(u >> 32).to_bytes(4, "big"), int(u & 0xFFFFFFFF) - ((u & 0x80000000) << 1)))
             for u in uniq.tolist()]
    return pa.array(names, pa.string()).take(pa.array(inverse.astype(np.int32)))


def _gather(mv: memoryview, starts: np.ndarray, lengths: np.ndarray) -> tuple:
    """Concatenate ``mv[starts[i]:starts[i] + lengths[i]]``: (int32 offsets, bytes)."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ends = (starts + lengths).tolist()
    return offsets, b"".join([mv[a:b] for a, b in zip(starts.tolist(), ends)])


def _fast_batch(m, seg_start: int, offs: np.ndarray, sizes: np.ndarray, qoffs: np.ndarray,
                topic: str, queue_id: int, columns: tuple | None = None):
    """Column-wise decode of records in one mapped CommitLog file; None when any record is
    not the common kind (the caller then decodes record by record)."""
    import pyarrow as pa
    n = len(offs)
    buf = np.frombuffer(m, dtype=np.uint8)
    pos = offs - seg_start
    if pos.min() < 0 or int((pos + sizes).max()) > len(buf):
        return None
    mv = memoryview(m)
    hdr = np.frombuffer(b"".join([mv[a:a + 88] for a in pos.tolist()]), dtype=_HDR)
    topic_raw = topic.encode("utf-8")
    tlen = len(topic_raw)
    blen = hdr["blen"].astype(np.int64)
    body_start = pos + 88
    tpos = body_start + blen
    if not (np.all(hdr["magic"] == MAGIC_V1) and np.all(hdr["sys"] & 0x31 == 0)
            and np.all(hdr["total"] == sizes) and np.all(hdr["qid"] == queue_id)
            and np.all(blen >= 0) and np.all(tpos + 3 + tlen <= pos + sizes)
            and np.all(buf[tpos] == tlen)):
        return None
    if tlen and not np.all(buf[tpos[:, None] + 1 + np.arange(tlen)]
                           == np.frombuffer(topic_raw, np.uint8)):
        return None
    pp = tpos + 1 + tlen
    plen = (buf[pp].astype(np.int64) << 8) | buf[pp + 1]
    if not np.all(pp + 2 + plen == pos + sizes):
        return None
    names = arrow_schema().names if columns is None else columns
    need = set(names)
    cols: dict = {}
    if need & {"properties", "tags", "keys"}:
        cols.update(_properties_columns(mv, pp + 2, plen, n))
        if not cols:
            return None

    def col(name, dtype):
        return pa.array(hdr[name].astype(dtype))

    def msg_id():
        # hex of store ip, port and the CommitLog offset (16 bytes -> 32 hex digits)
        raw = np.empty((n, 2), dtype=">u8")
        raw[:, 0] = hdr["shost"]
        raw[:, 1] = hdr["phys"].astype(np.uint64)
        hexed = raw.tobytes().hex().upper().encode("ascii")
        return pa.StringArray.from_buffers(
            n, pa.py_buffer(np.arange(0, 32 * n + 1, 32, dtype=np.int32)), pa.py_buffer(hexed))

    def body():
        boff, bdata = _gather(mv, body_start, blen)
        return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(boff),
                                                             pa.py_buffer(bdata)])

    make = {
        "queueId": lambda: pa.array(np.full(n, queue_id, dtype=np.int32)),
        "queueOffset": lambda: pa.array(qoffs.astype(np.int64)),
        "commitLogOffset": lambda: col("phys", np.int64),
        "storeSize": lambda: col("total", np.int32),
        "msgId": msg_id,
        "bornTimestamp": lambda: col("born", np.int64),
        "bornHost": lambda: _hosts(hdr["bhost"]),
        "storeTimestamp": lambda: col("store", np.int64),
        "storeHost": lambda: _hosts(hdr["shost"]),
        "sysFlag": lambda: col("sys", np.int32),
        "flag": lambda: col("flag", np.int32),
        "bodyCRC": lambda: col("crc", np.int32),
        "reconsumeTimes": lambda: col("recon", np.int32),
        "preparedTransactionOffset": lambda: col("prep", np.int64),
        "body": body,
        "topic": lambda: pa.array([topic] * n, pa.string()),
        "queue": lambda: pa.array(np.full(n, queue_id, dtype=np.int32)),
    }
    arrays = [cols[name] if name in cols else make[name]() for name in names]
    schema = arrow_schema()
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([schema.field(x) for x in names]))


def _properties_columns(mv: memoryview, starts: np.ndarray, lengths: np.ndarray, n: int) -> dict:
    """``{"properties", "tags", "keys"}`` arrays from the properties areas (``k\\x01v\\x02``
    pairs, ``MessageDecoder.string2messageProperties``); {} when they are not UTF-8."""
    import pyarrow as pa
    import pyarrow.compute as pc
    poff, pdata = _gather(mv, starts, lengths)
    props = pa.StringArray.from_buffers(n, pa.py_buffer(poff), pa.py_buffer(pdata))
    try:
        props.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: the per-record path decodes with errors="replace"
        return {}
    items = pc.split_pattern(props, "\x02")
    flat = items.flatten()
    counts = np.diff(items.offsets.to_numpy())
    row = np.repeat(np.arange(n), counts)
    kv = pc.split_pattern(flat, "\x01", max_splits=1)
    two = pc.equal(pc.list_value_length(kv), 2).to_numpy(zero_copy_only=False)
    safe = pc.if_else(pa.array(two), kv, pa.scalar(["", ""], pa.list_(pa.string())))
    k = pc.list_element(safe, 0)
    v = pc.list_element(safe, 1)
    keep = two & pc.invert(pc.or_(pc.equal(k, ""), pc.equal(v, ""))).to_numpy(
        zero_copy_only=False)
    k, v, row = k.filter(pa.array(keep)), v.filter(pa.array(keep)), row[keep]
    moff = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(row, minlength=n), out=moff[1:])
    properties = pa.MapArray.from_arrays(pa.array(moff), k, v)
    knp = k.to_numpy(zero_copy_only=False)

    def lookup(name):
        sel = np.flatnonzero(knp == name)
        idx = np.full(n, -1, dtype=np.int64)
        idx[row[sel]] = sel  # a repeated name: the last one wins, as in a Java HashMap
        return v.take(pa.array(idx, mask=idx < 0))

    tags = lookup("TAGS")
    parts = pc.split_pattern(pc.fill_null(lookup("KEYS"), ""), " ")
    kflat = parts.flatten()
    krow = np.repeat(np.arange(n), np.diff(parts.offsets.to_numpy()))
    nonempty = pc.not_equal(kflat, "").to_numpy(zero_copy_only=False)
    koff = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(krow[nonempty], minlength=n), out=koff[1:])
    keys = pa.ListArray.from_arrays(pa.array(koff), kflat.filter(pa.array(nonempty)))
    return {"properties": properties, "tags": tags, "keys": keys}


def _rows_batch(commitlog: _Segments, topic: str, queue_id: int, units: np.ndarray,
                queue_offsets: np.ndarray):
    """Record-by-record decode (any record kind) into one Arrow RecordBatch.

    ``queue_offsets[i]`` is the queue offset of ``units[i]``. Bodies are decompressed (as
    ``view/`` shows them). The common record (V1 magic, IPv4 hosts, uncompressed) is decoded
    inline; the others go through ``engine.message.decode_record``.

    Raises CorruptRecordError for a unit whose bytes are not a record of this queue.
    """
    import pyarrow as pa
    topic_raw = topic.encode("utf-8")
    tlen = len(topic_raw)
    fixed = FIXED_V4
    fsize = FIXED_V4.size
    rows = []
    append = rows.append
    locate = commitlog.locate
    for off, size, qoff in zip(units["off"].tolist(), units["size"].tolist(),
                               queue_offsets.tolist()):
        loc = locate(off)
        if loc is None:
            raise CorruptRecordError(f"{topic}/{queue_id} offset {qoff}: CommitLog offset {off} "
                                     "is not in the store (deleted, or not written yet)", off)
        m, p = loc
        if p + size > len(m):
            raise CorruptRecordError(f"{topic}/{queue_id} offset {qoff}: record runs past its "
                                     "CommitLog file", off)
        (total, magic, crc, qid, flag, qo, phys, sys_flag, born_ts, born_ip, born_port,
         store_ts, store_ip, store_port, recon, prep, blen) = fixed.unpack_from(m, p)
        if magic != MAGIC_V1 or sys_flag & 0x31 or total != size:
            row = _slow_row(m[p:p + size], qoff, topic, queue_id)
        else:
            b = p + fsize
            e = b + blen
            if (e + 3 + tlen > p + total or m[e] != tlen
                    or m[e + 1:e + 1 + tlen] != topic_raw or qid != queue_id):
                row = _slow_row(m[p:p + size], qoff, topic, queue_id)
            else:
                pp = e + 1 + tlen
                plen = (m[pp] << 8) | m[pp + 1]
                if pp + 2 + plen != p + total:
                    raise CorruptRecordError(f"{topic}/{queue_id} offset {qoff}: TOTALSIZE "
                                             f"{total} does not match the fields", off)
                props = _props(m[pp + 2:pp + 2 + plen]) if plen else []
                tag = None
                keys = []
                for k, v in props:
                    if k == "TAGS":
                        tag = v
                    elif k == "KEYS":
                        keys = [t for t in v.split(" ") if t]
                bh = (born_ip, born_port)
                sh = (store_ip, store_port)
                row = (qid, qoff, phys, total, _msg_id(sh, phys), tag, keys, born_ts, _host(bh),
                       store_ts, _host(sh), sys_flag, flag, crc, recon, prep, props,
                       m[b:e])
        append(row)
    schema = arrow_schema()
    n = len(rows)
    if n:
        columns = list(zip(*rows))
    else:
        columns = [[] for _ in _COLUMNS]
    arrays = [pa.array(v, type=schema.field(i).type) for i, v in enumerate(columns)]
    arrays.append(pa.array([topic] * n, type=pa.string()))
    arrays.append(pa.array([queue_id] * n, type=pa.int32()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
