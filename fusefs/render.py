"""Rendering of decoded messages as JSON lines (docs/mount.md "What the mount looks like").

One JSON object per line, RocketMQ's ``MessageExt`` field names, timestamps in epoch ms.
``topics/`` views show a body as text when it is valid UTF-8 and as base64 otherwise (with
``"bodyEncoding": "base64"``). The same record always renders to the same bytes: per record
(:func:`render_message`, lookups) and column-wise from ``engine.read.columnar`` batches
(:func:`render_lines`, the views). ``view/`` parts are Parquet (:func:`render_part`).
"""

from __future__ import annotations

import base64
import json
import os
from typing import TYPE_CHECKING, NamedTuple

from rmqfs.engine.format.mappedfile import pwrite_all
from rmqfs.engine.format.message import Host, MessageRecord, host_to_str
from rmqfs.engine.read.jsonline import LINE_FIELDS, build_lines

if TYPE_CHECKING:  # annotations only: workers import these where they render
    import numpy as np
    import pyarrow as pa

    from rmqfs.engine.format.mappedfile import MappedFiles


class ChunkResult(NamedTuple):
    """What :func:`render_view_chunk` returns about a chunk's lines."""

    #: bytes of the lines
    length: int
    #: the lines, when they were to be returned (``out`` None), else None
    data: bytes | None
    #: number of lines
    lines: int
    #: the newest storeTimestamp (epoch ms, 0 for none)
    newest: int
    #: the lines are in ``out``'s cache file (they fit in its room)
    written: bool
    #: the byte offset just after each line (int64), when the lines are longer than
    #: ``ends_over`` bytes (the views' sizing pass cuts such a chunk: ``fusefs.views``), else None
    ends: np.ndarray | None


#: Where :func:`render_view_chunk` puts a chunk's lines: ``(cache file, room)``,
#: :data:`SIZE_ONLY` or None (returned)
ChunkOut = tuple[str, int] | str | None
#: Bytes of bodies a render worker decodes at once, compressed ones inflated
#: (``engine.read.columnar.decode_units``' ``max_bytes``; one body may have more, up to
#: ``engine.format.message.MAX_INFLATED_BODY``): a chunk's units are sized by their records'
#: bytes, and a few hundred bytes of a compressed record may inflate to 16 MiB, so a chunk is
#: decoded and rendered in pieces of bodies up to this, and its lines written (or counted) piece
#: by piece: what a worker holds is bounded by this and the largest record, never by how many
#: compressed records a chunk has.
RENDER_BODY_BYTES = 8 << 20

# -- the fast path -----------------------------------------------------------------------------
# Rendering is the cost of a first read of a decoded view, so the line is assembled from an
# f-string: integers with str(), strings with json's own C string encoder (the exact escaping
# json.dumps(ensure_ascii=False) uses), hosts and msgId prefixes from small caches. The test
# suite checks it against engine.read.jsonline.build_line byte for byte.

_str = json.encoder.encode_basestring  # c_encode_basestring when the C accelerator is there
_hosts: dict[Host, str] = {}
_id_prefixes: dict[Host, str] = {}


def _host(host: Host) -> str:
    s = _hosts.get(host)
    if s is None:
        if len(_hosts) > 4096:
            _hosts.clear()
        s = _hosts[host] = _str(host_to_str(host))
    return s


def _id_prefix(host: Host) -> str:
    s = _id_prefixes.get(host)
    if s is None:
        if len(_id_prefixes) > 4096:
            _id_prefixes.clear()
        addr, port = host
        s = _id_prefixes[host] = addr.hex().upper() + f"{port & 0xFFFFFFFF:08X}"
    return s


def _line(
    topic_json: str,
    queue_id: int,
    queue_offset: int,
    off: int,
    store_size: int,
    props: dict[str, str],
    born_ts: int,
    born: Host,
    store_ts: int,
    store: Host,
    sys_flag: int,
    flag: int,
    crc: int,
    reconsume: int,
    prepared: int,
    body: bytes,
    view: bool,
) -> bytes:
    """Assemble one line in ``MessageExt`` field order (``topic_json`` already JSON-quoted).

    ``view``: body always base64 (a ``view/`` line); else text when UTF-8, base64 with
    ``bodyEncoding`` otherwise (a ``topics/`` line).
    """
    tags = props.get("TAGS")
    keys = props.get("KEYS")
    if keys:
        keys_json = "[" + ",".join(_str(k) for k in keys.split(" ") if k) + "]"
    else:
        keys_json = "[]"
    if props:
        props_json = "{" + ",".join([_str(k) + ":" + _str(v) for k, v in props.items()]) + "}"
    else:
        props_json = "{}"
    enc = ""
    if view:
        body_json = '"' + base64.b64encode(body).decode("ascii") + '"'
    else:
        try:
            body_json = _str(body.decode("utf-8"))
        except UnicodeDecodeError:
            body_json = '"' + base64.b64encode(body).decode("ascii") + '"'
            enc = ',"bodyEncoding":"base64"'
    born_s = _hosts.get(born) or _host(born)
    store_s = _hosts.get(store) or _host(store)
    prefix = _id_prefixes.get(store) or _id_prefix(store)
    line = (
        f'{{"topic":{topic_json},"queueId":{queue_id},'
        f'"queueOffset":{queue_offset},"commitLogOffset":{off},'
        f'"storeSize":{store_size},'
        f'"msgId":"{prefix}{off & 0xFFFFFFFFFFFFFFFF:016X}",'
        f'"tags":{"null" if tags is None else _str(tags)},"keys":{keys_json},'
        f'"bornTimestamp":{born_ts},"bornHost":{born_s},'
        f'"storeTimestamp":{store_ts},"storeHost":{store_s},'
        f'"sysFlag":{sys_flag},"flag":{flag},"bodyCRC":{crc},'
        f'"reconsumeTimes":{reconsume},'
        f'"preparedTransactionOffset":{prepared},'
        f'"properties":{props_json},"body":{body_json}{enc}}}\n'
    )
    return line.encode("utf-8")


def render_message(rec: MessageRecord) -> bytes:
    """A ``topics/`` line: body as text when UTF-8, else base64 with ``bodyEncoding``.

    Same bytes as ``engine.read.jsonline.build_line`` (``MessageExt`` field order, compact JSON,
    non-ASCII kept as UTF-8), about three times faster.
    """
    body = rec.plain_body  # first: a body left compressed adds its property
    return _line(
        _str(rec.topic),
        rec.queue_id,
        rec.queue_offset,
        rec.commitlog_offset,
        rec.store_size,
        rec.properties,
        rec.born_timestamp,
        rec.born_host,
        rec.store_timestamp,
        rec.store_host,
        rec.sys_flag,
        rec.flag,
        rec.body_crc,
        rec.reconsume_times,
        rec.prepared_transaction_offset,
        body,
        False,
    )


def render_body(rec: MessageRecord) -> bytes:
    """A ``bodies.txt`` line: the (decompressed) body and ``\\n``."""
    return rec.plain_body + b"\n"


def render_json(obj: object) -> bytes:
    """Pretty JSON for small status files, ending in a newline."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# -- view/ Parquet parts ---------------------------------------------------------------------------
# A part is rendered in a worker process (fusefs.views.PartCache): the units of its queue
# offsets come from the daemon (it owns the ConsumeQueues), the records are decoded from the
# CommitLog files with engine.read.columnar and written as Parquet. The same units give the same
# bytes: fixed batch and row-group boundaries, no timestamps in the file.

PART_BATCH_ROWS = 16384  # decode batch (a divisor of PART_ROW_GROUP_ROWS)
PART_ROW_GROUP_ROWS = 65536  # rows per Parquet row group (tens of MB: one Spark task each)
#: Bytes of bodies (compressed ones inflated) a row group holds at most, one body excepted: a
#: row group is written whole, so it is what a worker holds at once, and a few hundred bytes of
#: a compressed record may inflate to ``engine.format.message.MAX_INFLATED_BODY``. A row group
#: ends at PART_ROW_GROUP_ROWS units or where the next body would pass this, whichever comes
#: first: both a function of the store alone, so a part's bytes still are. Rows of up to 2 KiB
#: of body on average never reach it.
PART_ROW_GROUP_BYTES = 128 << 20
#: How a part's columns are written, chosen per column by what its readers do (issue 16;
#: ``python -m bench.spark`` reads the parts with Spark, DuckDB and pyarrow beside the same rows
#: written by Spark with its defaults). zstd. A dictionary where values repeat: the queue,
#: tags, hosts, flags, sizes, property names, and the body (loghub-like bodies repeat; pyarrow
#: drops a column chunk's dictionary by itself past 1 MiB of distinct values,
#: ``dictionary_pagesize_limit``, so unique bodies pay only for their first MiB); none on
#: offsets, timestamps, msgIds, keys and property values, which are (nearly) unique and which a
#: dictionary made two to three times slower to write and 15% slower for Spark to read.
#: Min/max statistics and a page index on what readers filter by (offsets, times, sizes, tags,
#: flags), none on the long strings. Rows are in queueOffset order, which the footer says
#: (``sorting_columns``).
PART_DICTIONARY = (
    "queueId", "storeSize", "tags", "bornHost", "storeHost", "sysFlag", "flag",
    "reconsumeTimes", "preparedTransactionOffset", "properties.key_value.key", "body",
)  # fmt: skip
PART_STATISTICS = (
    "queueId", "queueOffset", "commitLogOffset", "storeSize", "tags", "bornTimestamp",
    "storeTimestamp", "sysFlag", "flag", "reconsumeTimes", "preparedTransactionOffset",
)  # fmt: skip
PART_COMPRESSION = "zstd"
#: Where a worker reads a store's CommitLog: its directory (local files), or ``(source spec,
#: directory)`` for a store whose source is not local (``engine.format.source``: a snapshot in
#: object storage, which the worker opens again from its spec, with its own block cache).
CommitLogRef = str | tuple[tuple[str, ...], str]


#: Seconds a worker process stays idle before it unmaps the CommitLog pages it read.
WORKER_IDLE_TRIM_S = 1.0


class RenderWorker:
    """What a render worker process keeps between its tasks: the CommitLogs it reads (mapped
    once, refreshed at each task) and when it last finished one. Its lifetime is the worker
    process's: :meth:`current` makes the process's one on its first task (``fusefs.views``
    runs the render functions below in a ``ProcessPoolExecutor``, whose tasks are module
    functions, so they find it here), and its maps go with the process."""

    _current: RenderWorker | None = None

    def __init__(self) -> None:
        import threading

        self.commitlogs: dict[CommitLogRef, MappedFiles] = {}
        self.last = 0.0  # when the last task ended (time.monotonic)
        self.trimmed = True  # pages unmapped since
        self._trimmer: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def current(cls) -> RenderWorker:
        """This process's worker state, made on first use."""
        if cls._current is None:
            cls._current = cls()
        return cls._current

    def commitlog(self, ref: CommitLogRef) -> MappedFiles:
        """The CommitLog ``ref`` (read-only mmaps of local files, or range reads of object
        storage; kept between tasks, refreshed so segments created since are seen).

        Raises:
            ObjectStoreError: a store in object storage cannot be opened (its manifest
            unread)."""
        from rmqfs.engine.format.mappedfile import MappedFiles

        with self._lock:
            segs = self.commitlogs.get(ref)
        if segs is not None:
            segs.refresh()
            return segs
        if isinstance(ref, str):
            segs = MappedFiles(ref)
        else:
            from rmqfs.engine.live.objectsource import open_source

            spec, directory = ref
            segs = MappedFiles(directory, source=open_source(spec))
        with self._lock:
            self.commitlogs[ref] = segs
        return segs

    def task_done(self, release_memory: bool) -> None:
        """After each task. ``release_memory``: give back what Arrow's allocator keeps for
        reuse (mimalloc: only from the thread that allocated, so here; about 2 ms, paid after
        a Parquet part, not after each small JSON chunk, whose memory the next one reuses).
        And note the time: a thread of the worker, started here once, unmaps the CommitLog
        pages it read after :data:`WORKER_IDLE_TRIM_S` without a task
        (``MappedFiles.release_pages``; they would otherwise add up to the whole CommitLog in
        every worker). Not after every task: the queues' records share pages, and the next
        part would map them again."""
        import threading
        import time

        if release_memory:
            import pyarrow as pa

            pa.default_memory_pool().release_unused()
        self.last = time.monotonic()
        self.trimmed = False
        if self._trimmer is None:
            self._trimmer = threading.Thread(
                target=self._trim_when_idle, name="rmqfs-trim", daemon=True
            )
            self._trimmer.start()

    def _trim_when_idle(self) -> None:
        import time

        while True:
            time.sleep(WORKER_IDLE_TRIM_S / 2)
            if self.trimmed or time.monotonic() - self.last < WORKER_IDLE_TRIM_S:
                continue
            self.trimmed = True
            with self._lock:
                held = list(self.commitlogs.values())
            for segs in held:
                segs.release_pages()


def chunk_room(kind: str, units: np.ndarray) -> int:
    """Bytes to reserve in the render cache for the lines of ``units`` (a chunk of
    :func:`render_view_chunk` not sized yet): what such lines usually take (a
    ``messages.jsonl`` line is the record's bytes, a few escapes, property values twice and
    about 400 bytes of names and numbers); a chunk that turns out longer is not kept (and
    compressed bodies may inflate far past it: ``fusefs.views`` cuts such a chunk)."""
    return int(unit_rooms(kind, units).sum())


def unit_rooms(kind: str, units: np.ndarray) -> np.ndarray:
    """The room of each unit of ``units`` alone (int64 array; the one formula: a body and its
    newline for ``bodies.txt``, twice the record and 512 bytes for a ``messages.jsonl`` line):
    what the views' chunking (``fusefs.views``) adds up to cut a view into chunks of a
    bounded room, and :func:`chunk_room` sums."""
    size = units["size"].astype("int64")
    return size + 1 if kind == "bodies" else 2 * size + 512


#: ``out`` of :func:`render_view_chunk` that keeps no rendered byte: the sizing pass of a
#: view's seek-point index (``fusefs.views.ChunkIndex``) wants lengths and line counts only
SIZE_ONLY = "size"


def render_view_chunk(
    commitlog_dir: CommitLogRef,
    topic: str,
    queue_ids: np.ndarray | int,
    units: np.ndarray,
    queue_offsets: np.ndarray,
    kind: str,
    out: ChunkOut = None,
    ends_over: int | None = None,
) -> ChunkResult:
    """Render one chunk of a ``messages.jsonl`` / ``bodies.txt`` view in a worker process
    (``fusefs.views`` cuts a view into chunks of units, sizes each once and renders a chunk
    again whenever a read needs it and the render cache no longer holds it). The units are
    decoded and rendered in pieces of at most :data:`RENDER_BODY_BYTES` of bodies (one record
    may have more), each piece's lines written, counted or kept before the next is decoded.

    Args:
        commitlog_dir: the store's CommitLog directory (``commitlog/``; a DLedger store's
            ``dledger-<selfId>/data``), opened read-only, no lock (:data:`CommitLogRef`).
        topic: the topic.
        queue_ids: the queue id (an int: a queue view) or one per unit (int64 array: a topic
            view, units in CommitLog order).
        units: ``engine.read.columnar.UNIT_DTYPE`` array without blank filler.
        queue_offsets: int64 array, the units' queue offsets.
        kind: ``"messages"`` or ``"bodies"``.
        out: ``(cache file, room in bytes)``: create that file (never through a link, never
            an existing one) and write the lines there when they fit in the room, so they
            never pass through the daemon (when they do not, the file is removed and the
            lines are only counted); :data:`SIZE_ONLY`: keep nothing; None: return them (the
            caller bounds their length: the views return only chunks they sized).
        ends_over: return the end of each line when the lines are longer than this many
            bytes (None: never).

    Returns:
        :class:`ChunkResult`: the lines' length in bytes, their data (``out`` None), number,
        newest storeTimestamp, whether they were written to ``out``'s file, and their ends.

    Raises:
        CorruptRecordError: a unit does not point at its record (``engine.read.columnar``).
        OSError: the cache file could not be written.
    """
    import numpy as np

    from rmqfs.engine.read.columnar import decode_topic_units, decode_units

    worker = RenderWorker.current()
    segs = worker.commitlog(commitlog_dir)
    cols = LINE_COLUMNS[kind]
    fd, path, room = -1, "", 0
    if isinstance(out, tuple):
        path, room = out
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    pieces: list[bytes] = []  # the lines, to return (out None)
    ends: list[np.ndarray] = []
    length = lines = newest = 0
    done, n = 0, len(units)
    try:
        while True:
            u, q = units[done:], queue_offsets[done:]
            if isinstance(queue_ids, int):
                batch = decode_units(
                    segs, topic, queue_ids, u, q, columns=cols, max_bytes=RENDER_BODY_BYTES
                )
            else:
                batch = decode_topic_units(
                    segs, topic, queue_ids[done:], u, q, cols, max_bytes=RENDER_BODY_BYTES
                )
            done += batch.num_rows
            data, piece_ends, piece_newest = _lines(batch, kind)
            del batch
            newest = max(newest, piece_newest)
            if ends_over is not None:
                ends.append(piece_ends + length)
            if fd >= 0 and length + len(data) > room:  # does not fit: counted only
                os.close(fd)
                fd = -1
                os.unlink(path)
            if fd >= 0:
                pwrite_all(fd, data, length)
            elif out is None:
                pieces.append(bytes(data))  # not a view: it would keep the decode's buffers
            length += len(data)
            lines += len(piece_ends)
            del data
            if done >= n:
                break
    except BaseException:
        if fd >= 0:
            os.close(fd)
            os.unlink(path)
        raise
    written = fd >= 0
    if written:
        os.close(fd)
    joined = None
    if out is None:
        joined = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
    line_ends = None
    if ends_over is not None and length > ends_over:
        line_ends = np.concatenate(ends) if ends else np.zeros(0, np.int64)
    worker.task_done(release_memory=False)
    return ChunkResult(length, joined, lines, newest, written, line_ends)


def render_part(
    commitlog_dir: CommitLogRef,
    topic: str,
    queue_id: int,
    units: np.ndarray,
    first: int,
    out_path: str,
) -> tuple[int, int, int]:
    """Write the Parquet part of queue offsets ``[first, first + len(units))``.

    Args:
        commitlog_dir: the store's CommitLog directory (``commitlog/``; a DLedger store's
            ``dledger-<selfId>/data``), opened read-only, no lock.
        topic, queue_id: the queue.
        units: the ConsumeQueue units of those offsets (``engine.read.columnar.queue_units``: a
            ``UNIT_DTYPE`` array); blank filler units are skipped
            (``engine.read.columnar.drop_blank_units``).
        first: queue offset of the first unit.
        out_path: the file to create; written under ``out_path + ".tmp"`` and renamed, so it
            appears whole or not at all.

    Returns:
        ``(size in bytes, storeTimestamp of the last message (epoch ms, 0 if none), rows)``.

    Raises:
        CorruptRecordError: a unit does not point at its record (``engine.read.columnar``).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmqfs.engine.read.columnar import body_bytes, decode_units, drop_blank_units
    from rmqfs.engine.read.schema import part_schema

    worker = RenderWorker.current()
    segs = worker.commitlog(commitlog_dir)
    arr = units
    qoffs = np.arange(first, first + len(arr), dtype=np.int64)
    schema = part_schema()
    names = tuple(schema.names)
    tmp = out_path + ".tmp"
    newest = 0
    rows = 0
    try:
        with pq.ParquetWriter(
            tmp,
            schema,
            compression=PART_COMPRESSION,
            use_dictionary=list(PART_DICTIONARY),
            write_statistics=list(PART_STATISTICS),
            write_page_index=True,
            sorting_columns=[pq.SortingColumn(schema.get_field_index("queueOffset"))],
        ) as w:
            group: list[pa.RecordBatch] = []
            held = 0  # bytes of bodies in group

            def flush() -> None:
                nonlocal group, held
                if group:
                    table = pa.Table.from_batches(group, schema)
                    group, held = [], 0
                    w.write_table(table, row_group_size=PART_ROW_GROUP_ROWS)

            for a in range(0, len(arr), PART_BATCH_ROWS):
                u, q = arr[a : a + PART_BATCH_ROWS], qoffs[a : a + PART_BATCH_ROWS]
                u, q, _ = drop_blank_units(u, q)
                while len(u):
                    if held >= PART_ROW_GROUP_BYTES:
                        flush()
                    b = decode_units(
                        segs, topic, queue_id, u, q, columns=names,
                        max_bytes=PART_ROW_GROUP_BYTES - held,
                    )  # fmt: skip
                    group.append(b)
                    rows += b.num_rows
                    newest = int(b.column("storeTimestamp")[-1].as_py())
                    if b.num_rows < len(u):  # the next body would pass the bound
                        flush()
                    else:
                        held += body_bytes(b)
                    u, q = u[b.num_rows :], q[b.num_rows :]
                if (a + PART_BATCH_ROWS) % PART_ROW_GROUP_ROWS == 0 or a + PART_BATCH_ROWS >= len(
                    arr
                ):
                    flush()
        size = os.path.getsize(tmp)
        os.rename(tmp, out_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        group = []
        worker.task_done(release_memory=True)
    return size, newest, rows


# -- JSON lines from columnar batches ----------------------------------------------------------
# The first read of messages.jsonl / bodies.txt renders every message, so lines are built from
# engine.read.columnar's batches without Python per message: messages.jsonl lines by
# engine.read.jsonline.build_lines (the compiled kernel), bodies.txt lines by one Arrow join.
# The same bytes as render_message / render_body (tests compare them).

#: Columns render_lines reads, per kind.
LINE_COLUMNS = {
    "messages": LINE_FIELDS,
    "bodies": ("storeTimestamp", "body"),
}


def render_lines(batch: pa.RecordBatch, kind: str) -> tuple[bytes, np.ndarray, int]:
    """Render a batch of ``engine.read.columnar`` rows as ``kind`` lines.

    ``kind``: ``"messages"`` (a ``messages.jsonl`` line, :func:`render_message`'s bytes) or
    ``"bodies"`` (:func:`render_body`). The batch needs :data:`LINE_COLUMNS` ``[kind]``.

    Returns:
        ``(data bytes, ends, newest)``: the lines concatenated, ``ends[i]`` the byte offset
        just after line ``i`` (numpy int64), and the newest storeTimestamp (epoch ms, 0 if
        the batch is empty).
    """
    data, ends, newest = _lines(batch, kind)
    return bytes(data), ends, newest


def _lines(batch: pa.RecordBatch, kind: str) -> tuple[bytes | memoryview, np.ndarray, int]:
    """:func:`render_lines` with the lines as any bytes-like object (no copy)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    if not n:
        return b"", np.zeros(0, np.int64), 0
    newest = int(pc.max(batch.column("storeTimestamp")).as_py())
    if kind == "messages":
        data, ends = build_lines(batch)
        return data, ends, newest
    lines = pc.binary_join_element_wise(batch.column("body"), b"\n", b"")
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offs = np.frombuffer(
        lines.buffers()[1], dtype=np.int32, count=n + 1, offset=lines.offset * 4
    ).astype(np.int64)
    data = memoryview(lines.buffers()[2])[offs[0] : offs[-1]]
    return data, offs[1:] - offs[0], newest
