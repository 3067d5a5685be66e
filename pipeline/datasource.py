"""``rocketmq``: a Spark data source over a RocketMQ store's files (Python Data Source API).

Reads the CommitLog through the ConsumeQueues, with no mount and no broker::

    from rmqfs.pipeline.datasource import register
    register(spark)
    df = spark.read.format("rocketmq").load("/data/rocketmq/store")
    q = (spark.readStream.format("rocketmq").option("startingOffsets", "earliest")
         .load("/data/rocketmq/store").writeStream...)

The schema is ``engine.read.schema.DATASOURCE_DDL``: the same columns, types and order as
``spark.read.parquet("file://MNT/view")`` (``topic`` and ``queue`` last).

Several stores (a fleet): ``.load(["/a/store", "/b/store"])`` (Spark passes the list as the
option ``paths``, a JSON list) or a glob ``.load("/fleet/*/store")`` (:func:`expand_stores`);
each store's queues are planned as one store's are, every partition names its store, and the
schema is ``engine.read.schema.SOURCE_DDL``: the columns above, then ``brokerName``
(:func:`store_broker_name`; a pushed ``brokerName`` ``=``/``IN`` prunes whole stores). The
column comes with the form of the load (a list or a glob), not with the number of stores found,
so a job's schema does not change when a glob matches one store; a load of one plain path
has no such column (and pays nothing for it). Rows
are decoded by ``engine.read.columnar`` (numpy over the memory-mapped CommitLog, only the columns
asked for) and come as Arrow record batches, one Spark partition per range of queue offsets of
one queue.

Options (strings, names case-insensitive), modelled on Spark's Kafka source:

``topics``
    Comma-separated topics (default: every topic with a ConsumeQueue, ``%RETRY%``/``%DLQ%``
    included). ``subscribePattern``: a regular expression instead.
``queues``
    Comma-separated queue ids for every topic, or JSON ``{"TopicA": [0, 1]}`` (Kafka's
    ``assign``).
``startingOffsets`` / ``endingOffsets``
    ``earliest``, ``latest`` or JSON ``{"TopicA": {"0": 23, "1": -2}}`` with -2 = earliest and
    -1 = latest; queues not named start at earliest and end at latest. The start is inclusive,
    the end exclusive (``[from, until)``, RocketMQ's "next offset"). Batch default:
    earliest..latest. Streaming default start: ``latest`` (as Kafka); ``endingOffsets`` is
    batch only.
``startingTimestamp`` / ``endingTimestamp``
    Epoch ms for every queue: the first message stored at or after it
    (``getOffsetInQueueByTime``). ``startingOffsetsByTimestamp`` /
    ``endingOffsetsByTimestamp``: JSON ``{"TopicA": {"0": 1714564800000}}``. They take
    precedence over the offset options.
``tags``
    RocketMQ sub-expression ``TagA || TagB`` (``*`` = all). Selects ConsumeQueue units by
    tagsCode before any CommitLog read; in ``SCHEDULE_TOPIC_XXXX``, whose tagsCode is the
    deliver time, by the decoded TAGS alone (a broker's subscription would match nothing
    there: ``rmqfs print-msg -s`` and ``getMessage`` answer none), so that a pushed-down
    ``WHERE tags = ...`` stays exact. Where Spark allows it safely (see "Filter pushdown"
    below), ``WHERE tags = 'TagA'`` / ``tags IN (...)`` are pushed down the same way
    (``pushFilters``), as are ``topic``/``queue``/``queueId`` equality and ``IN``, and
    ``queueOffset`` ranges.
``failOnDataLoss``
    ``true`` (default): a start offset below a queue's min offset (its ConsumeQueue/CommitLog
    files were deleted by retention) fails the query with an error naming the queue and both
    offsets. ``false``: read from the min offset and log a warning. A damaged record (a body
    that fails its BODYCRC, a unit pointing at no record) fails the query with
    :class:`DataLossError` naming the queue and the CommitLog offset either way.
``maxOffsetsPerTrigger``
    Streaming: at most this many messages per micro-batch (a positive integer), shared
    across queues in proportion to their backlog.
``.schema("topic STRING, queue INT, queueOffset BIGINT, body BINARY")``
    A narrower schema (a subset of the columns, same names and types) decodes only those
    columns: the Python Data Source API has no column pruning, this is the way to ask for it.
``brokerNameFrom``
    ``path``: on a load of several stores, name each by its path (its directory, its parent's
    when that is ``store``; in object storage the parent of ``latest``) instead of its
    snapshot manifest's or ``brokerIdentity``'s ``brokerName``: for snapshots of mounts that
    all took the host name (:func:`expand_stores`).
``maxRecordsPerPartition``
    Queue offsets per Spark partition (default 100000): a queue's range is cut at multiples of
    it, as ``view/`` cuts its parts.
``scheduled``
    ``true``: instead of the stored messages, those waiting for delivery (the 5.x timer store
    and the delay levels, ``engine.read.scheduled``; what the mount's
    ``topics/<topic>/scheduled.jsonl`` shows), batch only, in one partition: the schema is
    ``engine.read.schema.SCHEDULED_DDL`` (the columns above plus ``deliverTimestamp`` BIGINT,
    epoch ms), ``topic``/``queue``/``queueId`` the real topic and queue each will be delivered
    to; ``topics``, ``subscribePattern`` and ``queues`` select by them. The offset, time and
    tags options do not apply.

Filter pushdown: Spark 4.0 to 4.3 keep the read that filter pushdown plans (partitions and
reader, ``PythonDataSourceReadInfo``) on the ``PythonDataSourceV2`` provider, which every query
of one DataFrame shares, and reuse it for a later query that has no pushable filter: after
``d.where("queue = 0").count()``, ``d.count()`` would read only queue 0. On such a Spark,
:func:`register` registers the reader without ``pushFilters`` (Spark evaluates every ``WHERE``
itself; the options above still narrow what is read). Where ``PythonScanBuilder`` keeps that
read in the scan it builds (a ``readInfo`` of its own, as in Spark's SPARK-58551), pushdown is
on. Either way a reader's pushed filters live in a narrowed copy of its own
(:class:`PushedFilters`), never in the parsed options.

Streaming offsets are ``{"<topic>": {"<queueId>": <next queue offset>}}``, Kafka's shape (on
a load of several stores, ``{"<brokerName>": {...}}`` of those).
Spark checkpoints them; a query restarted from its checkpoint resumes at exactly the next
offset, so every message is delivered once. ``commit()`` records nothing: the checkpoint is the
consumer position (the store's consumerOffset.json is left alone).

The store may be written by a mount or a broker while it is read: the reader takes no lock and
writes nothing (``engine.read.columnar``). Executors need the store at the same path (local
mode, or a shared filesystem on a cluster), or read a snapshot in object storage in place
(``s3://...``: :class:`engine.live.remote.RemoteSnapshot`, one partition per CommitLog file;
docs/spark.md "Snapshots in object storage"); ``register()`` ships this code to them.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit, urlunsplit

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from rmqfs.engine.errors import CorruptRecordError, ObjectStoreError, StoreError
from rmqfs.engine.format.dledger import commitlog_dir
from rmqfs.engine.live.location import is_uri, open_location, redact, with_credentials
from rmqfs.engine.live.manifest import restored_broker_name
from rmqfs.engine.live.remote import Piece, RemoteSnapshot
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.read.schema import (
    BROKER_COLUMN,
    DATASOURCE_DDL,
    SCHEDULED_COLUMNS,
    SCHEDULED_DDL,
    SOURCE_DDL,
)
from rmqfs.engine.storeconfig import identity_broker_name

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import Filter
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.types import StructType

__all__ = [
    "RocketMQDataSource",
    "RocketMQFilteringDataSource",
    "register",
    "check_workers",
    "pushdown_is_per_scan",
    "DataLossError",
    "WorkerEnvironmentError",
    "QueueRange",
    "PushedFilters",
    "StoreRef",
    "SegmentRange",
    "is_remote",
    "open_snapshot",
    "remote_broker_name",
    "read_store_queue",
    "read_queue",
    "store_broker_name",
    "expand_stores",
]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
DEFAULT_RECORDS_PER_PARTITION = 100_000


class DataLossError(RuntimeError):
    """Offsets that were asked for are no longer in the store (``failOnDataLoss=true``), or a
    record asked for is damaged (whatever ``failOnDataLoss`` says: a damaged record is never
    served nor silently skipped; ``rmqfs verify`` names it, ``rmqfs recover`` repairs it)."""


class WorkerEnvironmentError(RuntimeError):
    """Spark's Python workers cannot run the ``rocketmq`` reader (see :func:`register`)."""


def register(spark: SparkSession) -> None:
    """Register the ``rocketmq`` format with a SparkSession (``spark.dataSource.register``).

    Where :func:`pushdown_is_per_scan`, registers :class:`RocketMQFilteringDataSource` (its
    reader implements ``pushFilters``) and turns on ``spark.sql.python.filterPushdown.enabled``
    (off by default in Spark 4), without which Spark refuses such a reader; elsewhere
    :class:`RocketMQDataSource`, whose reader pushes nothing (see the module docstring), and
    the setting is turned off (with a warning) where it was on: on those Spark versions it
    alone makes a DataFrame's next query reuse the read planned for an earlier filtered one.

    Raises :class:`WorkerEnvironmentError` at once when Spark's Python workers cannot import
    pyarrow, numpy or this project (typically ``.venv/bin/python job.py`` without activating
    the venv: the workers then run ``python3`` from ``PATH``), naming the interpreter the
    workers run and how to choose another, instead of a "Python worker exited unexpectedly"
    deep inside the first query.
    """
    _ship_code(spark)
    check_workers(spark)
    if pushdown_is_per_scan(spark):
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        spark.dataSource.register(RocketMQFilteringDataSource)
    else:
        if (spark.conf.get(_PUSHDOWN_CONF, "false") or "").strip().lower() == "true":
            # on this Spark the setting alone (a reader that pushes nothing included) makes a
            # DataFrame's later query reuse the read planned for an earlier filtered one:
            # d.count() after d.where(...).count() counted what that filter kept
            log.warning(
                "rocketmq: %s turned off: on this Spark it makes later queries of a DataFrame "
                "answer from the read planned for an earlier filtered query",
                _PUSHDOWN_CONF,
            )
            spark.conf.set(_PUSHDOWN_CONF, "false")
        spark.dataSource.register(RocketMQDataSource)


_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


_SCAN_BUILDER = "org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder"


def pushdown_is_per_scan(spark: SparkSession) -> bool:
    """True when this Spark keeps the read planned during filter pushdown in the scan being
    built (``PythonScanBuilder`` has a ``readInfo`` field of its own), so that it cannot leak
    into another query of the same DataFrame. False where the builder hands it to the shared
    ``PythonDataSourceV2.setReadInfo`` (Spark 4.0 to 4.3), and where the JVM cannot be asked
    (Spark Connect): pushdown is then left off.
    """
    try:
        jvm = spark.sparkContext._jvm
        if jvm is None:
            return False
        cls = jvm.java.lang.Class.forName(_SCAN_BUILDER)
        return any(f.getName() == "readInfo" for f in cls.getDeclaredFields())
    except Exception:  # noqa: BLE001 - no JVM to ask, or a Spark without that class
        return False


#: What the reader needs in a Python worker (the project itself is shipped by ``_ship_code``).
_WORKER_IMPORTS = ("pyarrow", "numpy", "rmqfs.pipeline.datasource")
# SparkContexts whose workers were checked, and those the project was shipped to (kept here
# rather than as attributes set on Spark's object)
_WORKERS_CHECKED: weakref.WeakSet = weakref.WeakSet()
_SHIPPED: weakref.WeakSet = weakref.WeakSet()


def check_workers(spark: SparkSession) -> None:
    """Run one tiny task that imports what the reader needs in a Python worker.

    Raises :class:`WorkerEnvironmentError` naming the workers' interpreter (``sys.executable``
    of the worker, or ``PYSPARK_PYTHON`` as the session saw it when the worker could not even
    start) and how to set ``PYSPARK_PYTHON`` / ``spark.pyspark.python``. Done once per session.
    """
    sc = spark.sparkContext
    if sc in _WORKERS_CHECKED:
        return
    import sys

    # The workers run sc.pythonExec: PYSPARK_PYTHON as the driver's environment had it when
    # the SparkContext started, else "python3" from PATH. spark.pyspark.python is turned into
    # PYSPARK_PYTHON by spark-submit only; on a session builder it has no effect.
    where = (
        f"PYSPARK_PYTHON={sc.pythonExec}"
        if os.environ.get("PYSPARK_PYTHON")
        else f"PYSPARK_PYTHON unset, so Spark runs {sc.pythonExec!r} from PATH"
    )
    fix = (
        f"set PYSPARK_PYTHON={sys.executable} (the interpreter that has rmqfs and pyarrow) "
        f"in the environment before the SparkSession starts (os.environ in the job before "
        f"getOrCreate(), or export it), or --conf spark.pyspark.python={sys.executable} "
        f"with spark-submit; activating that venv before running the job also works"
    )
    imports = _WORKER_IMPORTS

    def probe(_: object) -> Iterator[tuple[str, str, str | None, str | None]]:
        # Runs in a worker. A closure, so that cloudpickle ships it by value: unpickling must
        # not need this module (whose own imports are what is being checked).
        import importlib
        import sys

        for name in imports:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any failure is reported to the driver
                yield (sys.executable, sys.version.split()[0], name, f"{type(exc).__name__}: {exc}")
                return
        yield (sys.executable, sys.version.split()[0], None, None)

    try:
        found = sc.parallelize([0], 1).mapPartitions(probe).collect()
    except Exception as exc:  # noqa: BLE001 - the worker did not start or crashed
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkerEnvironmentError(
            f"rocketmq: Spark's Python workers ({sc.pythonExec!r}; {where}) cannot run: "
            f"{first[:300]}. To fix it, {fix}"
        ) from None
    exe, version, module, error = found[0]
    if module is not None:
        raise WorkerEnvironmentError(
            f"rocketmq: Spark's Python workers run {exe} (Python {version}; {where}), which "
            f"cannot import {module} ({error}); the driver runs {sys.executable}. "
            f"To fix it, {fix}"
        )
    _WORKERS_CHECKED.add(sc)


def _ship_code(spark: SparkSession) -> None:
    """Make ``pipeline`` and ``engine`` importable in every Python worker.

    Spark's Python planner workers (``create_data_source``, ``plan_data_source_read``) do not
    get the driver's ``PYTHONPATH``, and executors of a cluster may not have rmqfs installed;
    a zip of the two packages added with ``addPyFile`` reaches both. Done once per session.

    The zip is written under the driver's ``SparkFiles.getRootDirectory()`` (the
    ``userFiles-*`` directory that ``SparkEnv.stop`` deletes), not a temporary directory of
    its own: executors fetch it from the driver's file server (``RpcEnv.fileServer``) for as
    long as the session runs, and nothing of it is left once the session stops.
    """
    import importlib
    import io
    import zipfile

    from pyspark import SparkFiles

    sc = spark.sparkContext
    if sc in _SHIPPED:
        return
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        # zipimport finds a namespace package only by its directory entry
        z.writestr(zipfile.ZipInfo("rmqfs/"), b"")
        for pkg in ("pipeline", "engine"):
            # the packages with their subpackages (engine.read, ...), the decoder's compiled
            # module (engine.read.kernel unpacks it into the worker's cache: no extension
            # module loads from a zip) and its C source (whose digest it checks), under their
            # installed names (rmqfs/engine/...: ``rmqfs`` a namespace package in the zip too)
            top = os.path.abspath(importlib.import_module(f"rmqfs.{pkg}").__path__[0])
            for here, dirs, names in os.walk(top):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(names):
                    if name.endswith((".py", ".c", ".h")) or name.startswith("_kernel_cffi."):
                        path = os.path.join(here, name)
                        z.write(path, os.path.join("rmqfs", pkg, os.path.relpath(path, top)))
    # A directory of its own: addFile copies the zip into the root directory itself.
    here = os.path.join(SparkFiles.getRootDirectory(), "rmqfs-code")
    os.makedirs(here, exist_ok=True)
    path = os.path.join(here, "rmqfs_code.zip")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    sc.addPyFile(path)
    _SHIPPED.add(sc)


def read_store_queue(path: str, p: QueueRange) -> Iterator:
    """:func:`read_queue` of the store at ``path``, opened for this task and closed when its
    batches end (or the task stops reading them): a task owns the readers it opens (about a
    millisecond, and the CommitLog's pages stay in the page cache), so no reader outlives its
    task in a reused Python worker and a store replaced at the path between two tasks is read
    as it is now, never old queues against a new CommitLog. Raises as :func:`read_queue` and
    :class:`engine.read.columnar.StoreFiles`."""
    s = StoreFiles(path)
    try:
        yield from read_queue(s, p)
    finally:
        s.close()


def is_remote(path: str) -> bool:
    """True for a storage URI other than ``file://`` (``s3://``, ``gs://``, ``hdfs://``): a
    snapshot read in place (:class:`engine.live.remote.RemoteSnapshot`); a plain path or
    ``file://`` is a local store directory."""
    return is_uri(path) and not path.startswith("file://")


def open_snapshot(location: str) -> RemoteSnapshot:
    """A reader of the snapshot at ``location`` as its manifest is now, owned by the caller,
    who closes it (``with open_snapshot(uri) as s:``): a plan on the driver, a task in the
    Python worker, a report. Opening reads the manifest (one GET); nothing is cached between
    owners, so a reused worker never serves an old snapshot's plan.

    Raises ValueError naming the location (without secrets) when it cannot be read as one."""
    try:
        return RemoteSnapshot(location)
    except StoreError as exc:
        raise ValueError(f"rocketmq: {exc}") from None


#: Where a store's broker name came from (:func:`store_broker_name`), in the order tried.
RULE_MANIFEST = "SNAPSHOT.json"
RULE_IDENTITY = "brokerIdentity"
RULE_DIRECTORY = "directory name"


def _manifest_broker(path: str) -> str | None:
    """``brokerName`` of the ``SNAPSHOT.json`` at the top of ``path`` (a snapshot copy), if any
    (:func:`engine.live.manifest.restored_broker_name`). ValueError for one that is not a
    manifest."""
    try:
        return restored_broker_name(path)
    except ValueError as exc:  # ManifestError: the field named; larger than MAX_MANIFEST
        raise ValueError(f"rocketmq: {path}: {exc}") from None


def _identity_broker(path: str) -> str | None:
    """The broker name in a 5.x ``brokerIdentity`` file (``BrokerIdentity``, controller mode):
    ``cluster#broker#id`` or the properties ``brokerName=<name>``; None without one."""
    return identity_broker_name(path)


def path_broker_name(path: str) -> str:
    """The broker name the path of a store names (rule :data:`RULE_DIRECTORY`): its
    directory's name, or its parent's when it is called ``store``; for a location in object
    storage its last directory (its parent's when it is ``latest`` or ``store``)."""
    if is_remote(path):
        parts = [x for x in urlsplit(path).path.split("/") if x]
        while len(parts) > 1 and parts[-1] in ("latest", "store"):
            parts.pop()
        return parts[-1] if parts else urlsplit(path).netloc
    base = os.path.basename(path.rstrip("/")) or "/"
    if base == "store":
        base = os.path.basename(os.path.dirname(path.rstrip("/"))) or base
    return base


def store_broker_name(path: str) -> tuple[str, str]:
    """``(broker name, rule)`` of the store or snapshot copy at ``path``, by the first rule that
    knows it: the snapshot manifest's ``brokerName`` (``SNAPSHOT.json``, written by a mount: the
    ``--config`` broker.conf's ``brokerName`` as ``status.json`` shows it), a 5.x
    ``brokerIdentity`` file (RocketMQ ``BrokerIdentity``), else the directory's name, or its
    parent's when it is called ``store`` (RocketMQ's default ``storePathRootDir``,
    ``~/store``). A store directory holds no broker.conf, so that is all a path can tell.

    Raises:
        ValueError: a ``SNAPSHOT.json`` that is not a manifest (``parse_manifest``).
    """
    name = _manifest_broker(path)
    if name:
        return name, RULE_MANIFEST
    name = _identity_broker(path)
    if name:
        return name, RULE_IDENTITY
    return path_broker_name(path), RULE_DIRECTORY


def _collision_fix(name: str, rules: tuple[str, ...]) -> str:
    """How to give two stores that share the broker name ``name`` names of their own, for the
    rules that named them."""
    if RULE_MANIFEST in rules:
        how = (
            f"A mount without --config names its store after the host ({name!r} may be "
            "one); mount each broker's store with --broker-name NAME (or --config a "
            "broker.conf with brokerName=NAME) and take and upload a new snapshot, or "
        )
    elif RULE_IDENTITY in rules:
        how = "Their brokerIdentity files say so; "
    else:
        how = "Their paths end alike; read them separately, or "
    if rules == (RULE_DIRECTORY, RULE_DIRECTORY):
        return how + "give each store a directory named after its broker (/fleet/NAME/store)"
    return how + (
        'read them with .option("brokerNameFrom", "path"): each store is then named '
        "by its directory (/fleet/NAME/store, s3://bucket/fleet/NAME/latest)"
    )


@dataclass(frozen=True)
class StoreRef:
    """One store of a read: its absolute path, broker name and the rule that named it."""

    path: str
    broker: str
    rule: str = RULE_DIRECTORY


def _is_store(path: str) -> bool:
    return os.path.isdir(commitlog_dir(path))  # commitlog/, or a DLedger store's data/


def expand_stores(paths: Sequence[str], name_from_path: bool = False) -> tuple[StoreRef, ...]:
    """The stores that ``paths`` name, in order (driver side): a plain path must be a store; a
    glob (``/fleet/*/store``) is expanded with :func:`glob.glob`, sorted, and a match that is not
    a store (no ``commitlog/`` nor ``dledger-*``) is skipped with a warning naming it. The same
    store named twice is read once. Each store's broker name is :func:`store_broker_name`'s
    (:func:`remote_broker_name`'s in object storage), or with ``name_from_path`` (the option
    ``brokerNameFrom`` = ``path``) its path's alone (:func:`path_broker_name`).

    Raises:
        ValueError: no path; a plain path that is not a store; a glob that matches nothing or
            no store; two stores with the same broker name (their rows would not be distinct:
            the message says how to name them apart).
    """
    found: list[str] = []
    for raw in paths:
        if is_remote(raw):
            found.extend(_expand_remote(raw))
            continue
        p = raw[len("file://") :] if raw.startswith("file://") else raw
        if glob.has_magic(p):
            matches = sorted(glob.glob(p))
            if not matches:
                raise ValueError(f"rocketmq: {raw} matches nothing")
            stores = [m for m in matches if _is_store(m)]
            for m in matches:
                if m not in stores:
                    log.warning(
                        "rocketmq: %s (matched by %s) is not a RocketMQ store: skipped", m, raw
                    )
            if not stores:
                raise ValueError(
                    f"rocketmq: {raw} matches no RocketMQ store (no commitlog/ directory in "
                    f"{', '.join(matches)})"
                )
            found.extend(stores)
        else:
            if not _is_store(p):
                raise ValueError(
                    f"rocketmq: {raw} is not a RocketMQ store (no commitlog/ directory)"
                )
            found.append(p)
    if not found:
        raise ValueError('rocketmq: give the store directory: .load("/path/to/store")')
    out: list[StoreRef] = []
    seen: dict[str, StoreRef] = {}
    for p in found:
        path = p if is_remote(p) else os.path.abspath(p)
        if any(r.path == path for r in out):
            continue
        if name_from_path:
            name, rule = path_broker_name(path), RULE_DIRECTORY
        else:
            name, rule = remote_broker_name(path) if is_remote(path) else store_broker_name(path)
        other = seen.get(name)
        if other is not None:
            raise ValueError(
                f"rocketmq: {redact(other.path)} ({other.rule}) and {redact(path)} ({rule}) both "
                f"have brokerName {name!r}: their rows would not be distinct. "
                + _collision_fix(name, (other.rule, rule))
            )
        seen[name] = ref = StoreRef(path, name, rule)
        out.append(ref)
    return tuple(out)


def _uri_with_path(uri: str, host: str, path: str) -> str:
    """``uri`` with its location (``pyarrow.fs`` path ``host/...`` for S3 and GCS, where the
    bucket is the host; the path alone elsewhere) replaced by ``path``, query kept."""
    parts = urlsplit(uri)
    user, at, _ = parts.netloc.rpartition("@")
    if host and (path == host or path.startswith(host + "/")):
        netloc, rest = path.split("/", 1)[0], path[len(host) :]
    else:
        netloc, rest = parts.netloc.rpartition("@")[2], path
    return urlunsplit(
        (parts.scheme, f"{user}{at}{netloc}", "/" + rest.lstrip("/"), parts.query, "")
    )


def _expand_remote(raw: str) -> list[str]:
    """The snapshot locations a URI names: itself, or for a glob in its path
    (``s3://bucket/fleet/*/latest?endpoint_override=...``) every match that holds a
    ``SNAPSHOT.json``, sorted; one LIST per directory level with a wildcard, never a listing of
    the bucket. A match with no manifest yet (a broker never snapshotted, or an upload in
    progress) is skipped and named in a warning.

    Raises:
        ValueError: a URI with no manifest; a glob that matches nothing or no snapshot; the
            location cannot be listed (the reason: server, credentials).
    """
    import fnmatch

    import pyarrow.fs as pafs

    where = redact(raw)
    try:
        fs, base = open_location(raw)
    except ObjectStoreError as exc:
        raise ValueError(f"rocketmq: {exc}") from None
    if not glob.has_magic(base):
        open_snapshot(raw).close()  # refuses a location with no snapshot, naming it
        return [raw]
    host = urlsplit(raw).netloc.rpartition("@")[2]
    parts = base.split("/")
    fixed = next(i for i, x in enumerate(parts) if glob.has_magic(x))
    current = ["/".join(parts[:fixed])]
    for part in parts[fixed:]:
        if not glob.has_magic(part):
            current = [f"{c}/{part}" for c in current]
            continue
        nxt = []
        for c in current:
            try:
                infos = fs.get_file_info(pafs.FileSelector(c, allow_not_found=True))
            except OSError as exc:
                raise ValueError(f"rocketmq: listing {where}: {exc}") from None
            nxt += [
                i.path
                for i in infos
                if i.type == pafs.FileType.Directory and fnmatch.fnmatchcase(i.base_name, part)
            ]
        current = sorted(nxt)
    if not current:
        raise ValueError(f"rocketmq: {where} matches nothing")
    out = []
    for path in current:
        uri = _uri_with_path(raw, host, path)
        try:
            open_snapshot(uri).close()
        except ValueError as exc:
            if "no SNAPSHOT.json" not in str(exc):
                raise
            log.warning("rocketmq: %s (matched by %s) has no snapshot yet: skipped", path, where)
            continue
        out.append(uri)
    if not out:
        raise ValueError(
            f"rocketmq: {where} matches no snapshot (no SNAPSHOT.json in {', '.join(current)})"
        )
    return out


def _is_glob(path: str) -> bool:
    """A path with a wildcard (``*``, ``?``, ``[``); of a URI, in its path only (its query is
    not a pattern)."""
    return glob.has_magic(urlsplit(path).path if is_remote(path) else path)


def _located(uri: str, options: Mapping[str, str]) -> str:
    """``uri`` with the options ``endpoint`` (``http://host:port``: S3's ``endpoint_override``
    and ``scheme``, unless the URI names them) and ``accessKey``/``secretKey`` (the URI's user
    info, :func:`engine.live.location.with_credentials`) applied. Without them, pyarrow reads
    the standard AWS settings (``AWS_ACCESS_KEY_ID``, ``~/.aws``) where the reader runs: on a
    cluster, every executor's environment."""
    endpoint = options.get("endpoint")
    parts = urlsplit(uri)
    if endpoint and "endpoint_override=" not in parts.query:
        e = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        extra = f"endpoint_override={e.netloc}&scheme={e.scheme}"
        query = f"{parts.query}&{extra}" if parts.query else extra
        uri = urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
    key, secret = options.get("accessKey"), options.get("secretKey")
    if key or secret:
        if not (key and secret):
            raise ValueError("rocketmq: give both accessKey and secretKey, or neither")
        uri = with_credentials(uri, key, secret)
    return uri


def remote_broker_name(location: str) -> tuple[str, str]:
    """``(broker name, rule)`` of a snapshot in object storage: its manifest's ``brokerName``,
    else the location's last directory name (its parent's when it is ``latest`` or ``store``)."""
    with open_snapshot(location) as r:
        if r.broker_name:
            return r.broker_name, RULE_MANIFEST
    return path_broker_name(location), RULE_DIRECTORY


@dataclass
class QueueRange(InputPartition):
    """Queue offsets ``[start, end)`` of one queue of the store at ``path`` (broker ``broker``);
    ``tags`` None = every message."""

    path: str
    topic: str
    queue_id: int
    start: int
    end: int
    tags: tuple | None = None
    fail_on_data_loss: bool = True
    columns: tuple | None = None
    broker: str | None = None  # the store's broker name on a fleet load (brokerName), else None

    def __post_init__(self) -> None:
        super().__init__((self.broker, self.topic, self.queue_id, self.start, self.end))


@dataclass
class SegmentRange(InputPartition):
    """One CommitLog file's range of a snapshot in object storage
    (:class:`engine.live.remote.Piece`), read in CommitLog order: the rows of the queues
    ``bounds`` (``((topic, queueId, start, end), ...)``) that lie in it. ``identity`` is the
    snapshot's ``(name, time)`` when planned; ``tags`` None = every message."""

    location: str
    identity: tuple
    piece: Piece
    bounds: tuple
    tags: tuple | None = None
    fail_on_data_loss: bool = True
    columns: tuple | None = None
    broker: str | None = None

    def __post_init__(self) -> None:
        super().__init__((self.broker, self.piece.rel, self.piece.start, self.piece.end))


@dataclass
class _Options:
    path: str  # the first store's (the only one of a streaming or scheduled read)
    stores: tuple = ()  # StoreRef of every store, path's first
    fleet: bool = False  # a list or a glob was loaded: rows get the brokerName column
    topics: list | None = None
    pattern: str | None = None
    assign: dict | None = None
    queues: set | None = None
    starting: Offsets | None = None
    ending: Offsets | None = None
    start_ts: int | Offsets | None = None  # epoch ms, or per queue
    end_ts: int | Offsets | None = None
    tags: set | None = None
    fail_on_data_loss: bool = True
    max_per_trigger: int | None = None
    per_partition: int = DEFAULT_RECORDS_PER_PARTITION
    columns: tuple | None = None  # a narrower user schema: only these columns are decoded
    scheduled: bool = False  # the messages waiting for delivery instead (SCHEDULED_DDL)


@dataclass(frozen=True)
class PushedFilters:
    """What one reader's pushed-down filters select (``DataSourceReader.pushFilters``); None =
    no restriction. Immutable: :meth:`push` returns a narrowed copy, so that nothing of one
    query's filters can reach another reader or the parsed :class:`_Options`."""

    topics: frozenset | None = None
    queues: frozenset | None = None
    brokers: frozenset | None = None
    lo: int = 0
    hi: int | None = None
    tags: frozenset | None = None

    @staticmethod
    def _meet(a: frozenset[Any] | None, b: Iterable[Any]) -> frozenset[Any]:
        return frozenset(b) if a is None else a & frozenset(b)

    def push(self, f: Filter) -> PushedFilters | None:
        """This selection narrowed by filter ``f``, or None when ``f`` cannot be pushed."""
        # a filter on one column has its path in ``attribute``; Not (and any filter over other
        # filters) has none, and is left to Spark
        path: tuple[str, ...] = getattr(f, "attribute", ())
        col = path[0] if len(path) == 1 else None
        if isinstance(f, (EqualTo, In)) and col == BROKER_COLUMN[0]:
            values = {f.value} if isinstance(f, EqualTo) else set(f.value)
            return replace(
                self, brokers=self._meet(self.brokers, {v for v in values if isinstance(v, str)})
            )
        if isinstance(f, (EqualTo, In)) and col in ("tags", "topic", "queue", "queueId"):
            values = {f.value} if isinstance(f, EqualTo) else set(f.value)
            if col == "tags":
                return replace(
                    self, tags=self._meet(self.tags, {v for v in values if isinstance(v, str)})
                )
            if col == "topic":
                return replace(self, topics=self._meet(self.topics, values))
            return replace(
                self, queues=self._meet(self.queues, {int(v) for v in values if isinstance(v, int)})
            )
        if (
            col == "queueOffset"
            and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual))
            and isinstance(f.value, int)
        ):
            v, lo, hi = f.value, self.lo, self.hi
            if isinstance(f, (EqualTo, GreaterThanOrEqual)):
                lo = max(lo, v)
            if isinstance(f, GreaterThan):
                lo = max(lo, v + 1)
            if isinstance(f, (EqualTo, LessThanOrEqual)):
                hi = v + 1 if hi is None else min(hi, v + 1)
            if isinstance(f, LessThan):
                hi = v if hi is None else min(hi, v)
            return replace(self, lo=lo, hi=hi)
        return None


NO_FILTERS = PushedFilters()


def _bool(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return v == "true"


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, not {value!r}") from None


#: An offsets option: ``earliest``, ``latest``, or ``{topic: {queueId: offset}}``.
Offsets = str | dict[str, dict[str, int]]


def _offsets_option(value: str | None, name: str) -> Offsets | None:
    """``earliest`` / ``latest`` / JSON ``{"t": {"q": n}}`` -> str or dict; None if unset."""
    if value is None:
        return None
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return v.lower()
    try:
        parsed = json.loads(v)
        if not isinstance(parsed, dict) or not all(
            isinstance(qs, dict) and all(isinstance(o, int) for o in qs.values())
            for qs in parsed.values()
        ):
            raise ValueError
        return {t: {str(int(q)): o for q, o in qs.items()} for t, qs in parsed.items()}
    except ValueError:
        raise ValueError(
            f'option {name} must be "earliest", "latest" or JSON like '
            f'{{"TopicA": {{"0": 23, "1": -2}}}}, not {value!r}'
        ) from None


def _timestamps_option(
    options: Mapping[str, str], single: str, per_queue: str
) -> int | Offsets | None:
    if options.get(per_queue) is not None:
        parsed = _offsets_option(options[per_queue], per_queue)
        if not isinstance(parsed, dict):  # ("earliest"/"latest" name offsets, not times)
            raise ValueError(
                f'option {per_queue} must be JSON of epoch ms like '
                f'{{"TopicA": {{"0": 1714564800000}}}}, not {options[per_queue]!r}'
            )
        return parsed
    if options.get(single) is not None:
        return _int(options[single], single)
    return None


def parse_options(options: Mapping[str, str]) -> _Options:
    """Check the options (a case-insensitive dict of strings); raises ValueError."""
    get = options.get
    paths = [p for p in (get("path"), get("store")) if p]
    listed = get("paths")
    if listed:  # .load([...]): Spark passes the list as JSON (DataSourceV2Utils)
        try:
            more = json.loads(listed)
        except ValueError:
            more = None
        if not isinstance(more, list) or not all(isinstance(p, str) for p in more):
            raise ValueError(
                f"rocketmq: paths must be a JSON list of strings, not {get('paths')!r}"
            )
        paths.extend(more)
    paths = [_located(p, options) if is_remote(p) else p for p in paths]
    name_from = (get("brokerNameFrom") or "").strip().lower()
    if name_from not in ("", "path"):
        raise ValueError(
            f"rocketmq: brokerNameFrom {get('brokerNameFrom')!r}: the one value is \"path\" "
            "(name each store by its directory); leave it out for the stores' own names"
        )
    stores = expand_stores(paths, name_from_path=name_from == "path")
    fleet = bool(get("paths")) or any(_is_glob(p) for p in paths)
    o = _Options(path=stores[0].path, stores=stores, fleet=fleet)
    topics = get("topics")
    if topics:
        # (a topic named twice is read once)
        o.topics = list(dict.fromkeys(t.strip() for t in topics.split(",") if t.strip()))
    pattern = get("subscribePattern")
    if pattern:
        o.pattern = pattern
        re.compile(pattern)
    q = get("queues")
    if q:
        if q.strip().startswith("{"):
            try:
                o.assign = {t: {int(x) for x in qs} for t, qs in json.loads(q).items()}
            except (ValueError, TypeError, AttributeError):
                raise ValueError(
                    f'option queues: expected JSON like {{"TopicA": [0, 1]}} or "0,1", not {q!r}'
                ) from None
        else:
            o.queues = {_int(x, "queues") for x in q.split(",") if x.strip()}
    o.starting = _offsets_option(get("startingOffsets"), "startingOffsets")
    o.ending = _offsets_option(get("endingOffsets"), "endingOffsets")
    o.start_ts = _timestamps_option(options, "startingTimestamp", "startingOffsetsByTimestamp")
    o.end_ts = _timestamps_option(options, "endingTimestamp", "endingOffsetsByTimestamp")
    tags = get("tags")
    if tags and tags.strip() != "*":
        o.tags = {t.strip() for t in tags.split("||") if t.strip()}
    fail = get("failOnDataLoss")
    if fail is not None:
        o.fail_on_data_loss = _bool(fail, "failOnDataLoss")
    per_trigger = get("maxOffsetsPerTrigger")
    if per_trigger is not None:
        o.max_per_trigger = _int(per_trigger, "maxOffsetsPerTrigger")
        if o.max_per_trigger < 1:  # (0 or less would read nothing, or everything, for ever)
            raise ValueError(
                f"option maxOffsetsPerTrigger must be a positive integer, not {per_trigger!r}"
            )
    per_partition = get("maxRecordsPerPartition")
    if per_partition:
        o.per_partition = max(1, _int(per_partition, "maxRecordsPerPartition"))
    scheduled = get("scheduled")
    if scheduled is not None:
        o.scheduled = _bool(scheduled, "scheduled")
    return o


class _Planner:
    """Resolves topics, queues and offsets against the store (driver side)."""

    def __init__(
        self, opts: _Options, pushed: PushedFilters = NO_FILTERS, ref: StoreRef | None = None
    ):
        self.o = opts
        self.pushed = pushed
        self.ref = ref or (opts.stores[0] if opts.stores else StoreRef(opts.path, ""))
        self.store: StoreFiles | RemoteSnapshot
        if is_remote(self.ref.path):  # the location's manifest as it is now
            self.store = open_snapshot(self.ref.path)
        else:
            self.store = StoreFiles(self.ref.path)

    def close(self) -> None:
        """Close the store this plan opened (its files, a snapshot's request threads)."""
        self.store.close()

    def __enter__(self) -> _Planner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def queues(self) -> list[tuple[str, int]]:
        o = self.o
        topics = self.store.topics()
        if o.topics is not None:
            topics = [t for t in o.topics if t in topics]
        if o.pattern:
            topics = [t for t in topics if re.fullmatch(o.pattern, t)]
        if o.assign is not None:
            topics = [t for t in topics if t in o.assign]
        pf = self.pushed
        if pf.topics is not None:
            topics = [t for t in topics if t in pf.topics]
        if not topics and not self.store.topics():
            self._warn_without_queues()
        out = []
        for t in topics:
            for q in self.store.queue_ids(t):
                if o.queues is not None and q not in o.queues:
                    continue
                if o.assign is not None and q not in o.assign[t]:
                    continue
                if pf.queues is not None and q not in pf.queues:
                    continue
                out.append((t, q))
        return out

    def _warn_without_queues(self) -> None:
        """A store whose CommitLog holds records but that has no ConsumeQueue (they were never
        dispatched, or deleted): the data source reads messages through the ConsumeQueues, as
        a broker does, so it finds none; say so instead of reading nothing without a word."""
        store = self.store
        if isinstance(store, StoreFiles) and store.holds_records():
            log.warning(
                "rocketmq: %s: the CommitLog holds messages but the store has no ConsumeQueue "
                "(consumequeue/ missing or empty), and the data source reads messages through "
                "them: none are read. Mount the store once (rmqfs mount STORE MNT: its recovery "
                "builds them) or read MNT/view/ of a read-only mount",
                self.ref.path,
            )

    def resolve(
        self,
        spec: Offsets | None,
        ts: int | Offsets | None,
        topic: str,
        q: int,
        default: int,
    ) -> int:
        """Offset for ``spec`` (str/dict) or ``ts`` (int/dict of epoch ms) for one queue."""
        s = self.store
        if ts is not None:
            t = ts.get(topic, {}).get(str(q)) if isinstance(ts, dict) else ts
            if t is not None:
                # epoch ms: the timestamp options hold ints (a per-queue one parsed by
                # _offsets_option, whose "earliest"/"latest" are no timestamps)
                return s.offset_by_time(topic, q, cast(int, t))
        value = default
        if isinstance(spec, str):
            value = EARLIEST if spec == "earliest" else LATEST
        elif isinstance(spec, dict):
            value = spec.get(topic, {}).get(str(q), default)
        if value == EARLIEST:
            return s.min_offset(topic, q)
        if value == LATEST:
            return s.max_offset(topic, q)
        return value

    def check_start(self, topic: str, q: int, start: int) -> int:
        """``start``, or the queue's min offset when data below it is gone and that is allowed."""
        lo = self.store.min_offset(topic, q)
        if start < lo:
            msg = (
                f"rocketmq: {topic}/{q}: offsets {start}..{lo - 1} are no longer in the store "
                f"(min offset is {lo}; expired CommitLog/ConsumeQueue files)"
            )
            if self.o.fail_on_data_loss:
                raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
            log.warning("%s; skipping them (failOnDataLoss=false)", msg)
            return lo
        return start

    def ranges(self, bounds: dict) -> list[QueueRange]:
        """Cut ``{(topic, q): (start, end)}`` into partitions at multiples of per_partition."""
        o, pf = self.o, self.pushed
        tags = None
        t = o.tags if o.tags is not None else pf.tags
        if t is not None:  # the option's tags, the pushed filter's, or both
            if pf.tags is not None:
                t = t & pf.tags
            tags = tuple(sorted(t))
        out: list = []
        step = o.per_partition
        broker = self.ref.broker if o.fleet else None
        if isinstance(self.store, RemoteSnapshot):
            return self._pieces(bounds, tags, broker)
        for (topic, q), (start, end) in sorted(bounds.items()):
            start = max(start, pf.lo)
            if pf.hi is not None:
                end = min(end, pf.hi)
            a = start
            while a < end:
                b = min(end, (a // step + 1) * step)
                out.append(
                    QueueRange(
                        self.ref.path,
                        topic,
                        q,
                        a,
                        b,
                        tags,
                        o.fail_on_data_loss,
                        o.columns,
                        broker,
                    )
                )
                a = b
        return out

    def _pieces(self, bounds: dict, tags: tuple | None, broker: str | None) -> list:
        """A snapshot in object storage: one :class:`SegmentRange` per CommitLog file of the
        range that holds the queues' records (:meth:`engine.live.remote.RemoteSnapshot.pieces`,
        bounded by two unit reads per queue)."""
        o, pf = self.o, self.pushed
        store = self.store
        assert isinstance(store, RemoteSnapshot)
        narrowed = {}
        for (topic, q), (start, end) in sorted(bounds.items()):
            start = max(start, pf.lo)
            end = end if pf.hi is None else min(end, pf.hi)
            if end > start:
                narrowed[(topic, q)] = (start, end)
        if tags == () or not narrowed:
            return []
        try:
            lo, hi = store.commitlog_span(narrowed)
        except ObjectStoreError as exc:
            raise ValueError(f"rocketmq: {exc}") from None
        spans = tuple((t, q, a, b) for (t, q), (a, b) in narrowed.items())
        return [
            SegmentRange(
                self.ref.path,
                store.identity,
                piece,
                spans,
                tags,
                o.fail_on_data_loss,
                o.columns,
                broker,
            )
            for piece in store.pieces(lo, hi)
        ]


def read_range(p: QueueRange | SegmentRange) -> Iterator:
    """Arrow batches of one partition (runs in the Python worker)."""
    if isinstance(p, SegmentRange):
        yield from read_piece(p)
        return
    if p.tags == ():
        return
    yield from read_store_queue(p.path, p)


def read_queue(s: StoreFiles, p: QueueRange) -> Iterator:
    """Arrow batches of the queue range ``p`` from the store reader ``s`` (the task's own:
    :func:`read_store_queue`).

    Raises:
        DataLossError: offsets deleted while the query ran (``fail_on_data_loss``), or a
            damaged record (a body failing its CRC, a unit pointing at no record)."""
    start = p.start
    lo = s.min_offset(p.topic, p.queue_id)
    if start < lo:
        msg = (
            f"rocketmq: {p.topic}/{p.queue_id}: offsets {start}..{lo - 1} were deleted "
            f"from the store while the query ran (min offset is now {lo})"
        )
        if p.fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
        start = lo
    try:
        yield from _with_broker(
            p.broker,
            p.columns,
            lambda cols: s.read_batches(p.topic, p.queue_id, start, p.end, p.tags, columns=cols),
        )
    except CorruptRecordError as exc:  # a body failing its CRC, a unit pointing at no record
        raise DataLossError(
            f"rocketmq: {p.topic}/{p.queue_id}: damaged record, not served: "
            f"{exc} (rmqfs verify names it, rmqfs recover repairs it)"
        ) from None


def read_piece(p: SegmentRange) -> Iterator:
    """Arrow batches of one CommitLog range of a snapshot in object storage (runs in the Python
    worker). The snapshot at the location may be newer than the one planned (uploaded again
    meanwhile): the bytes of the range are the same (CommitLog files are append-only), so it is
    read as planned, the file's sum checked only when the snapshot is still the planned one.

    Raises:
        DataLossError: a damaged record or file (named), or the file was removed from the
            location since planning (``failOnDataLoss=false``: logged and skipped).
        ObjectStoreError: the server failed or refused (retried by pyarrow first; named).
    """
    s = open_snapshot(p.location)  # the task's own, closed when it ends
    try:
        piece = p.piece
        if s.identity != p.identity:
            if not s.holds(piece.rel):  # a newer upload dropped it: it expired since planning
                gone = (
                    f"{redact(p.location)}: {piece.rel} is gone from the snapshot there (it "
                    "expired; a newer snapshot was uploaded since the query was planned)"
                )
                if p.fail_on_data_loss:
                    raise DataLossError(
                        f"rocketmq: {gone}; set failOnDataLoss=false to skip what it held"
                    )
                log.warning("rocketmq: %s; skipped (failOnDataLoss=false)", gone)
                return
            piece = replace(piece, whole=False)
        bounds = {(t, q): (a, b) for t, q, a, b in p.bounds}
        yield from _with_broker(
            p.broker, p.columns, lambda cols: s.read_piece(piece, bounds, p.tags, cols)
        )
    except CorruptRecordError as exc:
        raise DataLossError(
            f"rocketmq: {redact(p.location)}: damaged, not served: {exc} (rmqfs snapshot-verify "
            "checks every file of a snapshot)"
        ) from None
    finally:
        s.close()


def _with_broker(
    broker: str | None,
    cols: tuple[str, ...] | None,
    read: Callable[[tuple[str, ...] | None], Iterator[pa.RecordBatch]],
) -> Iterator[pa.RecordBatch]:
    """``read(columns)``'s batches with the ``brokerName`` column (``broker``) where ``cols``
    ask for it (all columns: last); as they are on a one-store load (``broker`` None)."""
    import pyarrow as pa

    if broker is None:
        yield from read(cols)
        return
    name = BROKER_COLUMN[0]
    decode = None if cols is None else tuple(c for c in cols if c != name) or ("queueOffset",)
    made = pa.array([], pa.string())
    for batch in read(decode):
        if len(made) < batch.num_rows:  # made once per partition, sliced (no copy) per batch
            made = pa.repeat(pa.scalar(broker, pa.string()), batch.num_rows)
        named = made.slice(0, batch.num_rows)
        if cols is None:
            yield batch.append_column(pa.field(name, pa.string(), nullable=False), named)
        elif name in cols:
            arrays = [named if c == name else batch.column(c) for c in cols]
            yield pa.RecordBatch.from_arrays(arrays, names=list(cols))
        else:
            yield batch


class RocketMQReader(DataSourceReader):
    """Batch reader: ``[startingOffsets, endingOffsets)`` of every selected queue. Pushes no
    filter down (Spark's default ``pushFilters``): Spark evaluates every ``WHERE`` itself."""

    def __init__(self, opts: _Options):
        self.o = opts
        self.pushed = NO_FILTERS

    def partitions(self) -> Sequence[InputPartition]:
        """The partitions of every selected queue's ``[starting, ending)`` (cut at
        ``maxRecordsPerPartition``, :meth:`_Planner.ranges`); one empty range when nothing is
        selected."""
        o = self.o
        if o.starting == "latest":
            raise ValueError('startingOffsets="latest" is not allowed for a batch query')
        if o.ending == "earliest":
            raise ValueError('endingOffsets="earliest" is not allowed for a batch query')
        parts: list[QueueRange] = []
        for ref in _planned_stores(o, self.pushed):
            with _Planner(o, self.pushed, ref) as plan:
                bounds = {}
                for t, q in plan.queues():
                    start = plan.resolve(o.starting, o.start_ts, t, q, EARLIEST)
                    end = plan.resolve(o.ending, o.end_ts, t, q, LATEST)
                    end = min(end, plan.store.max_offset(t, q))
                    if end > start:
                        bounds[(t, q)] = (plan.check_start(t, q, start), end)
                parts.extend(plan.ranges(bounds))
        return parts or [QueueRange(o.path, "", 0, 0, 0, ())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark hands back a partition that partitions() planned
        """The Arrow batches of one planned partition (in the Python worker)."""
        return read_range(cast(QueueRange | SegmentRange, partition))


def _planned_stores(o: _Options, pushed: PushedFilters) -> list[StoreRef]:
    """The stores of ``o`` that a pushed ``brokerName`` filter leaves (whole stores pruned)."""
    return [r for r in o.stores if pushed.brokers is None or r.broker in pushed.brokers]


class RocketMQFilteringReader(RocketMQReader):
    """:class:`RocketMQReader` that also takes ``tags``, ``topic``, ``queue``/``queueId``
    equality and ``IN``, and ``queueOffset`` ranges (``DataSourceReader.pushFilters``): tags
    select ConsumeQueue units by tagsCode, the others cut queues and offset ranges before any
    CommitLog read. Only for a Spark that keeps the read in the scan
    (:func:`pushdown_is_per_scan`)."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Narrow this reader's own :class:`PushedFilters`; returns the filters left to Spark."""
        pushed, rest = self.pushed, []
        for f in filters:
            narrowed = pushed.push(f)
            if narrowed is None:
                rest.append(f)
            else:
                pushed = narrowed
        self.pushed = pushed
        return rest


class RocketMQStreamReader(DataSourceStreamReader):
    """Micro-batch reader whose offsets are ``{"topic": {"queueId": next queue offset}}``; on a
    load of several stores (a list or a glob: the stores it matched when the query started)
    ``{"brokerName": {"topic": {"queueId": next queue offset}}}``, each store followed on its
    own (a snapshot in object storage: the newest one uploaded to its location)."""

    def __init__(self, opts: _Options):
        if opts.ending is not None or opts.end_ts is not None:
            raise ValueError("endingOffsets/endingTimestamp are for batch queries only")
        self.o = opts
        self._plans: dict[str, _Planner] | None = None

    @property
    def plans(self) -> dict[str, _Planner]:
        """``{brokerName: planner}`` of each store (``{"": planner}`` on a one-store load)."""
        if self._plans is None:
            refs = [(r.broker, r) for r in self.o.stores] if self.o.fleet else [("", None)]
            plans: dict[str, _Planner] = {}
            try:
                for broker, ref in refs:
                    plans[broker] = _Planner(self.o, NO_FILTERS, ref)
            except BaseException:  # a store that cannot be planned: close the others
                for p in plans.values():
                    p.close()
                raise
            self._plans = plans
        return self._plans

    def _split(self, offsets: dict) -> dict[str, dict]:
        """Spark's offsets as ``{brokerName: {topic: {queueId: offset}}}``."""
        return offsets if self.o.fleet else {"": offsets}

    def _join(self, per_store: dict[str, dict]) -> dict:
        """The inverse of :meth:`_split`."""
        return per_store if self.o.fleet else per_store.get("", {})

    def _current(self) -> dict:
        out: dict = {}
        for broker, p in self.plans.items():
            if isinstance(p.store, RemoteSnapshot):
                try:  # a newer snapshot uploaded to the location since: its offsets
                    p.store.refresh()
                except ObjectStoreError as exc:  # an upload in progress (no manifest): wait
                    log.warning("rocketmq: %s; offsets kept until the next trigger", exc)
            else:  # a DLedger store's writer commits more while the stream runs
                try:
                    p.store.refresh_committed()
                except (OSError, StoreError) as exc:  # a checkpoint caught mid-write
                    log.warning("rocketmq: %s; commit point kept until the next trigger", exc)
            mine = out.setdefault(broker, {})
            for t, q in p.queues():
                mine.setdefault(t, {})[str(q)] = p.store.max_offset(t, q)
        return self._join(out)

    def initialOffset(self) -> dict:
        """Where the query starts: ``startingOffsets`` (default latest) or the starting
        timestamps, per queue."""
        out: dict = {}
        # a queue a JSON startingOffsets does not name starts at earliest, as in a batch read
        unnamed = EARLIEST if isinstance(self.o.starting, dict) else LATEST
        for broker, p in self.plans.items():
            mine = out.setdefault(broker, {})
            for t, q in p.queues():
                mine.setdefault(t, {})[str(q)] = p.resolve(
                    self.o.starting or "latest", self.o.start_ts, t, q, unnamed
                )
        return self._join(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` rows a micro-batch, else everything available."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.o.max_per_trigger:
            return ReadMaxRows(self.o.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The offsets the next micro-batch reads to: each queue's max offset (never below
        ``start``), capped by ``limit`` (:func:`_rate_limit`)."""
        from pyspark.sql.streaming.datasource import ReadMaxRows

        latest = self._split(self._current())
        # Never go backwards (a queue that vanished keeps its last offset).
        for broker, topics in self._split(start).items():
            mine = latest.setdefault(broker, {})
            for t, qs in topics.items():
                for q, off in qs.items():
                    cur = mine.setdefault(t, {}).get(q)
                    if cur is None or cur < off:
                        mine[t][q] = off
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(self._split(start), latest, limit.max_rows, self.plans)
        return self._join(latest)

    def reportLatestOffset(self) -> dict:
        """Each queue's max offset now (Spark's progress report)."""
        return self._current()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The ranges ``[start, end)`` of every queue (a queue new since the query started:
        from its min offset)."""
        begin = self._split(start)
        parts: list = []
        for broker, topics in self._split(end).items():
            p = self.plans.get(broker)
            if p is None:  # a store no longer among the load's
                continue
            bounds = {}
            for t, qs in topics.items():
                for q, e in qs.items():
                    s = begin.get(broker, {}).get(t, {}).get(q)
                    if s is None:  # a queue that appeared after the query started: earliest
                        s = p.store.min_offset(t, int(q))
                    if e > s:
                        bounds[(t, int(q))] = (p.check_start(t, int(q), s), e)
            parts.extend(p.ranges(bounds))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark hands back a partition that partitions() planned
        """The Arrow batches of one planned partition (in the Python worker)."""
        return read_range(cast(QueueRange | SegmentRange, partition))

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint holds the position."""

    def stop(self) -> None:
        """The query stopped: close the stores its plans opened (``DataSourceStreamReader.stop``);
        a restart plans again."""
        plans, self._plans = self._plans, None
        for p in (plans or {}).values():
            p.close()


def _rate_limit(start: dict, latest: dict, max_rows: int, plans: dict[str, _Planner]) -> dict:
    """Cap ``latest`` (``{store: {topic: {queueId: offset}}}``, as ``start``) so that at most
    ``max_rows`` offsets are read, shared in proportion to each queue's backlog across every
    store (``KafkaSource.rateLimit``)."""
    backlog = {}
    for broker, topics in latest.items():
        for t, qs in topics.items():
            for q, e in qs.items():
                s = start.get(broker, {}).get(t, {}).get(q)
                if s is None:
                    s = plans[broker].store.min_offset(t, int(q))
                backlog[(broker, t, q)] = (s, max(0, e - s))
    total = sum(n for _, n in backlog.values())
    if total <= max_rows:
        return latest
    out: dict = {}
    given = 0
    for (b, t, q), (s, n) in sorted(backlog.items()):
        share = (n * max_rows) // total
        out.setdefault(b, {}).setdefault(t, {})[q] = s + share
        given += share
    # hand out the rounding remainder so that progress is always made
    for (b, t, q), (s, n) in sorted(backlog.items()):
        if given >= max_rows:
            break
        if out[b][t][q] < s + n:
            out[b][t][q] += 1
            given += 1
    return out


@dataclass
class ScheduledPart(InputPartition):
    """The one partition of a ``scheduled=true`` read: every waiting message of the store."""

    path: str
    topics: tuple | None = None
    pattern: str | None = None
    queues: frozenset | None = None

    def __post_init__(self) -> None:
        super().__init__(("scheduled", self.path))


def read_scheduled(p: ScheduledPart) -> Iterator[tuple]:
    """Rows (:data:`engine.read.schema.SCHEDULED_COLUMNS`) of the messages waiting for delivery
    (``engine.read.scheduled.waiting_messages``) to the selected real topics and queues, in
    delivery order; the body as stored, decompressed. Runs in the Python worker."""
    from rmqfs.engine.read.jsonline import message_fields
    from rmqfs.engine.read.scheduled import waiting_messages
    from rmqfs.engine.store import MessageStore

    rx = re.compile(p.pattern) if p.pattern else None
    names = [n for n, _ in SCHEDULED_COLUMNS]
    with MessageStore(p.path, read_only=True) as store:
        for topic in p.topics or (None,):
            for w in waiting_messages(store, topic):
                if rx is not None and not rx.fullmatch(w.real_topic):
                    continue
                if p.queues is not None and w.real_queue_id not in p.queues:
                    continue
                row = message_fields(w.record)
                row.update(
                    topic=w.real_topic,
                    queueId=w.real_queue_id,
                    queue=w.real_queue_id,
                    body=w.record.plain_body,
                    deliverTimestamp=w.deliver_ms,
                )
                yield tuple(row[n] for n in names)


class RocketMQScheduledReader(DataSourceReader):
    """Batch reader of ``scheduled=true``: one :class:`ScheduledPart`."""

    def __init__(self, opts: _Options):
        if len(opts.stores) > 1:
            raise NotImplementedError(
                f"rocketmq: scheduled=true reads one store; {len(opts.stores)} were given"
            )
        if opts.columns is not None:
            raise ValueError("rocketmq: scheduled=true reads the whole SCHEDULED_DDL schema")
        if opts.assign is not None:
            raise ValueError('rocketmq: scheduled=true takes queues as "0,1", not JSON')
        self.o = opts

    def partitions(self) -> Sequence[InputPartition]:
        """The one :class:`ScheduledPart` of the store."""
        o = self.o
        topics = tuple(o.topics) if o.topics else None
        queues = frozenset(o.queues) if o.queues is not None else None
        return [ScheduledPart(o.path, topics, o.pattern, queues)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        # Spark hands back the partition that partitions() planned
        """The rows of the waiting messages (:func:`read_scheduled`, in the Python worker)."""
        return read_scheduled(cast(ScheduledPart, partition))


class RocketMQDataSource(DataSource):
    """``spark.read.format("rocketmq").load(STORE)`` (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        """The format's name: ``spark.read.format("rocketmq")``."""
        return "rocketmq"

    def schema(self) -> str:
        """The load's DDL: DATASOURCE_DDL, with ``brokerName`` for several stores (SOURCE_DDL),
        or SCHEDULED_DDL with ``scheduled=true``."""
        o = parse_options(self.options)
        if o.scheduled:
            return SCHEDULED_DDL
        return SOURCE_DDL if o.fleet else DATASOURCE_DDL

    def _options(self, schema: StructType | None) -> _Options:
        """Freshly parsed options for one reader (``self.options`` is never changed)."""
        o = parse_options(self.options)
        if o.scheduled:
            return replace(o, columns=_columns(schema, SCHEDULED_DDL))
        return replace(o, columns=_columns(schema, SOURCE_DDL if o.fleet else DATASOURCE_DDL))

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader of the options and ``schema`` (a narrower user schema decodes fewer
        columns)."""
        o = self._options(schema)
        if o.scheduled:
            return RocketMQScheduledReader(o)
        return RocketMQReader(o)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch reader of the options and ``schema``; ``scheduled=true`` is refused."""
        o = self._options(schema)
        if o.scheduled:
            raise ValueError("rocketmq: scheduled=true is batch only")
        return RocketMQStreamReader(o)


class RocketMQFilteringDataSource(RocketMQDataSource):
    """``rocketmq`` with filter pushdown (:class:`RocketMQFilteringReader`); what
    :func:`register` registers where :func:`pushdown_is_per_scan`."""

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader that takes pushed-down filters (:class:`RocketMQFilteringReader`)."""
        o = self._options(schema)
        if o.scheduled:
            return RocketMQScheduledReader(o)
        return RocketMQFilteringReader(o)


def _columns(schema: StructType | None, ddl: str = DATASOURCE_DDL) -> tuple[str, ...] | None:
    """Column names of a user schema (``.schema("topic STRING, queue INT, body BINARY")``),
    checked against ``ddl`` (the load's schema); None for the full schema. Only these are
    decoded."""
    from rmqfs.engine.read.schema import split_ddl

    types = {
        n: re.sub(r"\s+not\s+null$", "", t.lower()).replace(" ", "") for n, t in split_ddl(ddl)
    }
    names = list(types)
    if schema is None or [f.name for f in schema.fields] == names:
        return None
    for f in schema.fields:
        if f.name not in types:
            raise ValueError(f"rocketmq: no column {f.name!r}; the columns are {', '.join(names)}")
        if f.dataType.simpleString().replace(" ", "") != types[f.name]:
            raise ValueError(
                f"rocketmq: column {f.name} is {types[f.name]}, not {f.dataType.simpleString()}"
            )
    return tuple(f.name for f in schema.fields)
