"""Stores that stay on the broker hosts: a batch read scheduled where each store is.

A RocketMQ fleet keeps each broker's store on its own host's disk. Where the stores cannot be
copied to a shared filesystem or object storage, :func:`read_broker_stores` reads them where
they are: every Spark task that reads a store runs on the host that has it::

    from rmqfs.pipeline.locality import read_broker_stores
    df = read_broker_stores(spark, [
        ("broker-a", "10.0.0.11", "/data/rocketmq/store"),
        ("broker-b", "10.0.0.12", "/data/rocketmq/store"),
    ])

The rows are the ``rocketmq`` data source's (:data:`engine.read.schema.DATASOURCE_DDL`) plus
``brokerName``, decoded column-wise by the same reader (``engine.read.columnar``,
``pipeline.datasource.read_range``), as Arrow batches.

How (the locality that PySpark's Python Data Source API lacks: its ``InputPartition`` has no
preferred location, so this is not a ``spark.read.format`` source):

1. The driver cannot see the stores, so planning runs on the hosts: a first small job of one
   task per store, each preferring its store's host, lists the store's topics and queues with
   their min and max offsets there (``getMinOffsetInQueue``, ``getMaxOffsetInQueue``) and
   records what store it saw (:class:`StoreIdentity`: the device and inode of its CommitLog
   directory, its first CommitLog file and that file's first bytes, its 5.x
   ``brokerIdentity`` file).
2. Each queue's offsets are cut into partitions as the data source cuts them (at multiples
   of ``max_records_per_partition``), each preferring its store's host.
3. Both jobs run over an RDD made with ``SparkContext.makeRDD(Seq[(T, Seq[String])])``, whose
   partitions carry preferred hosts, built through the JVM gateway; the read is
   ``DataFrame.mapInArrow`` over that RDD made a ``Dataset[String]`` in the JVM (so that
   only the decoding runs in Python), all narrow dependencies,
   so Spark's ``DAGScheduler.getPreferredLocs`` finds the hosts through them (as Spark's
   Kafka source and rocketmq-spark's ``RocketMqRDD.getPreferredLocations`` place theirs).
4. Before reading, each task checks that it runs on the planned host and that the store at
   the path is the one planned for; otherwise it fails with :class:`StoreLocalityError`
   naming the store, the planned host and the host it ran on, never reading another store's
   rows under this broker's name. A damaged record fails the read with the data source's
   :class:`pipeline.datasource.DataLossError`.

Limits:

- Batch only (no streaming) and classic PySpark only: Spark Connect has no ``SparkContext``
  to build the RDD with; :func:`read_broker_stores` raises :class:`StoreLocalityError` there.
- Each host string must equal the host its executors registered with (the worker's
  ``--host``, ``SPARK_LOCAL_HOSTNAME``; ``spark.sparkContext.statusTracker()`` lists them):
  :func:`read_broker_stores` waits ``executor_wait_s`` for an executor on every host, then
  refuses naming the hosts it has. On the executor the check accepts
  ``SPARK_LOCAL_HOSTNAME``, ``SPARK_LOCAL_IP``, the host name and the host's own addresses.
- A task waits ``spark.locality.wait`` (default 3 s) for a free core on its host before
  Spark offers it to another host, where it fails (the check above; Spark retries it up to
  ``spark.task.maxFailures`` times). Where tasks take seconds, start the session with a wait
  longer than a task (``--conf spark.locality.wait=10min``) so that none leaves its host.
- The offsets are the planning job's: messages stored after it are not read.
- A store is told apart from another at the same path by its identity, and from another
  broker's by its ``brokerIdentity`` file (``cluster#broker#id``, 5.x) when it has one; a
  store without one is taken to be the broker it is named as.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from rmqfs.engine.format.dledger import commitlog_dir
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.read.schema import DATASOURCE_DDL, split_ddl
from rmqfs.pipeline.datasource import (
    DEFAULT_RECORDS_PER_PARTITION,
    QueueRange,
    _ship_code,
    check_workers,
    read_store_queue,
)

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject, JVMView
    from pyspark import RDD, SparkContext
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BrokerStore",
    "StoreIdentity",
    "ScanPart",
    "LocalityPlan",
    "StoreLocalityError",
    "plan_broker_stores",
    "read_plan",
    "read_broker_stores",
    "located_rdd",
    "located_frame",
    "BROKER_COLUMN",
]

#: The column that names each row's broker.
BROKER_COLUMN = "brokerName"
#: The bytes of the first CommitLog file that identify a store (a record's header, with its
#: born and store timestamps: written once, never changed).
_HEAD_BYTES = 64
#: The 5.x broker's identity file in the store root (``cluster#broker#id``).
_IDENTITY_FILE = "brokerIdentity"


class StoreLocalityError(RuntimeError):
    """A store could not be read where it was planned: no SparkContext (Spark Connect), no
    executor on a store's host, a task run on another host, or another store at the path."""


@dataclass(frozen=True)
class BrokerStore:
    """One broker's store: its ``name`` (the ``brokerName`` column), the ``host`` that has it
    (an executor's registered host) and its ``path`` on that host."""

    name: str
    host: str
    path: str


@dataclass(frozen=True)
class StoreIdentity:
    """What a store at a path looked like when it was planned, on its host.

    ``dev``/``ino``: the CommitLog directory's device and inode; ``first``: the name of its
    first CommitLog file (None: no file) and ``head`` the hex of that file's first
    :data:`_HEAD_BYTES` bytes; ``broker_identity``: the ``brokerIdentity`` file's text, None
    when there is none."""

    dev: int
    ino: int
    first: str | None
    head: str
    broker_identity: str | None


@dataclass(frozen=True)
class ScanPart:
    """Queue offsets ``[start, end)`` of one queue of one broker's store, planned on its
    host, which saw ``identity`` there."""

    store: BrokerStore
    identity: StoreIdentity
    topic: str
    queue_id: int
    start: int
    end: int

    def to_json(self) -> str:
        """The part as the JSON string a task receives (:meth:`from_json` reads it back)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ScanPart:
        """The part of :meth:`to_json`'s ``text``."""
        d = json.loads(text)
        return cls(
            BrokerStore(**d["store"]),
            StoreIdentity(**d["identity"]),
            d["topic"],
            d["queue_id"],
            d["start"],
            d["end"],
        )


@dataclass(frozen=True)
class LocalityPlan:
    """The partitions of a read: ``parts``, and each store's identity as planned."""

    stores: tuple[BrokerStore, ...]
    identities: tuple[StoreIdentity, ...]
    parts: tuple[ScanPart, ...]


# -- on the hosts ------------------------------------------------------------------------------


def host_names() -> set[str]:
    """The names this host answers to, as a Python worker sees them: ``SPARK_LOCAL_HOSTNAME``,
    ``SPARK_LOCAL_IP``, the host name, its fully qualified name and the host's own IPv4 and
    IPv6 addresses (``/proc/net/fib_trie``, ``/proc/net/if_inet6``)."""
    out = {os.environ.get("SPARK_LOCAL_HOSTNAME"), os.environ.get("SPARK_LOCAL_IP")}
    out.add(socket.gethostname())
    out.add(socket.getfqdn())
    try:
        with open("/proc/net/fib_trie") as f:
            last = None
            for line in f:
                words = line.split()
                if len(words) == 2 and words[0] in ("|--", "+--"):
                    last = words[1]
                elif "/32 host LOCAL" in line and last:
                    out.add(last)
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                h = line.split()[0]
                out.add(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(h)))
    except (OSError, ValueError):
        pass
    out.discard(None)
    out.discard("")
    return {h for h in out if h}


def _this_host() -> str:
    """The host name to report: ``SPARK_LOCAL_HOSTNAME`` when set, else the host name."""
    return os.environ.get("SPARK_LOCAL_HOSTNAME") or socket.gethostname()


def store_identity(path: str) -> StoreIdentity:
    """The :class:`StoreIdentity` of the store at ``path`` on this host.

    Raises:
        FileNotFoundError: no store there (no CommitLog directory).
    """
    cl = commitlog_dir(os.path.abspath(path))
    st = os.stat(cl)
    names = sorted(n for n in os.listdir(cl) if n.isdigit())
    first = names[0] if names else None
    head = b""
    if first is not None:
        with open(os.path.join(cl, first), "rb") as f:
            head = f.read(_HEAD_BYTES)
    ident = None
    try:
        with open(os.path.join(path, _IDENTITY_FILE), encoding="utf-8", errors="replace") as f:
            ident = f.read().strip()
    except FileNotFoundError:
        pass
    return StoreIdentity(st.st_dev, st.st_ino, first, head.hex(), ident)


def identity_broker(identity: StoreIdentity) -> str | None:
    """The broker name of a ``brokerIdentity`` text (``cluster#broker#id``), else None."""
    text = identity.broker_identity
    if not text:
        return None
    fields = text.split("#")
    return fields[1] if len(fields) >= 3 else None


def _where(store: BrokerStore) -> str:
    return f"store {store.name!r} ({store.path} on host {store.host!r})"


def check_here(store: BrokerStore, planned: StoreIdentity | None = None) -> StoreIdentity:
    """Check that this task runs on ``store.host`` and that the store at ``store.path`` is
    broker ``store.name``'s (its ``brokerIdentity``, when it has one) and, when ``planned``
    is given, the one seen when planning; returns the identity seen.

    Raises:
        StoreLocalityError: naming the store, the planned host and the host it ran on.
    """
    here = _this_host()
    if store.host not in host_names():
        raise StoreLocalityError(
            f"rocketmq: {_where(store)} was planned for host {store.host!r} but the task ran "
            f"on host {here!r}: not reading it. The host must be an executor's registered "
            f"host (SPARK_LOCAL_HOSTNAME); raise spark.locality.wait on a busy cluster"
        )
    try:
        seen = store_identity(store.path)
    except OSError as exc:
        raise StoreLocalityError(
            f"rocketmq: {_where(store)}: no store there on host {here!r} ({exc})"
        ) from None
    named = identity_broker(seen)
    if named is not None and named != store.name:
        raise StoreLocalityError(
            f"rocketmq: {_where(store)}: the store there on host {here!r} is broker "
            f"{named!r} (its brokerIdentity {seen.broker_identity!r}), not {store.name!r}: "
            f"not reading it; is the host of {store.name!r} right?"
        )
    if planned is not None and not _same_store(planned, seen, store.path):
        raise StoreLocalityError(
            f"rocketmq: {_where(store)}: the store at {store.path} on host {here!r} is not "
            f"the one planned (planned {_describe(planned)}, found {_describe(seen)}): "
            f"not reading it"
        )
    return seen


def _describe(i: StoreIdentity) -> str:
    return f"commitlog dev {i.dev} inode {i.ino}, first file {i.first}"


def _same_store(planned: StoreIdentity, seen: StoreIdentity, path: str) -> bool:
    """Same directory, same identity file, and the planned first CommitLog file the same (or
    deleted since by retention: the first file now is a later one)."""
    if (planned.dev, planned.ino, planned.broker_identity) != (
        seen.dev,
        seen.ino,
        seen.broker_identity,
    ):
        return False
    if planned.first is None or planned.first == seen.first:
        return planned.first is None or planned.head == seen.head
    # deleted since by retention (CleanCommitLogService): the store moved on
    return seen.first is None or seen.first > planned.first


def plan_store(spec: str, topics: tuple[str, ...] | None = None) -> str:
    """Plan one store on its host (runs in a Python worker): JSON of ``{"identity": ...,
    "queues": [[topic, queueId, min, max], ...]}``, or ``{"error": message}``."""
    store = BrokerStore(**json.loads(spec))
    try:
        ident = check_here(store)
        s = StoreFiles(store.path)
        try:
            queues = []
            for t in s.topics():
                if topics is not None and t not in topics:
                    continue
                for q in s.queue_ids(t):
                    queues.append([t, q, s.min_offset(t, q), s.max_offset(t, q)])
        finally:
            s.close()
    except StoreLocalityError as exc:
        return json.dumps({"error": str(exc)})
    except Exception as exc:  # noqa: BLE001 - reported to the driver with the store named
        return json.dumps({"error": f"rocketmq: {_where(store)}: {type(exc).__name__}: {exc}"})
    return json.dumps({"identity": asdict(ident), "queues": queues})


def read_parts(
    batches: Iterable, columns: tuple[str, ...], fail_on_data_loss: bool = True
) -> Iterator:
    """``mapInArrow``'s function: for each :class:`ScanPart` (JSON, column 0 of the input
    batches), check the store (:func:`check_here`), then yield its rows as Arrow batches of
    ``columns`` (in that order; ``brokerName`` where named). Runs in a Python worker.

    Raises:
        StoreLocalityError: the task is not on the planned host or the store is another.
        DataLossError: a damaged record, or offsets deleted while the query ran.
    """
    for batch in batches:
        for text in batch.column(0).to_pylist():
            p = ScanPart.from_json(text)
            check_here(p.store, p.identity)
            qr = QueueRange(
                p.store.path,
                p.topic,
                p.queue_id,
                p.start,
                p.end,
                None,
                fail_on_data_loss,
                tuple(columns),
                p.store.name,
            )
            # the store at the path now: the one this task checked (opened for the task)
            yield from read_store_queue(p.store.path, qr)


# -- on the driver ---------------------------------------------------------------------------


def _context(spark: SparkSession) -> SparkContext:
    """The SparkContext of ``spark``; StoreLocalityError where there is none."""
    try:
        sc = spark.sparkContext
        jsc = sc._jsc
    except Exception as exc:  # noqa: BLE001 - Spark Connect raises PySparkNotImplementedError
        raise StoreLocalityError(
            "rocketmq: reading stores on their broker hosts needs a SparkContext to place "
            "tasks by host (an RDD with preferred locations), which Spark Connect does not "
            f"have ({type(exc).__name__}); use a classic SparkSession (pyspark, spark-submit), "
            "or read copies: spark.read.format('rocketmq')"
        ) from None
    if jsc is None:
        raise StoreLocalityError("rocketmq: the SparkContext is stopped")
    return sc


def _jvm(sc: SparkContext) -> JVMView:
    """The JVM gateway of ``sc`` (a class attribute, None until a SparkContext started)."""
    jvm = sc._jvm
    if jvm is None:
        raise StoreLocalityError("rocketmq: the SparkContext is stopped")
    return jvm


def _located_jrdd(sc: SparkContext, items: Sequence[tuple[str, str]]) -> JavaObject:
    """The JVM ``RDD[String]`` of :func:`located_rdd`."""
    jvm = _jvm(sc)
    conv = jvm.scala.jdk.javaapi.CollectionConverters
    pairs = jvm.java.util.ArrayList()
    for value, host in items:
        hosts = jvm.java.util.ArrayList()
        hosts.add(host)
        pairs.add(jvm.scala.Tuple2(value, conv.asScala(hosts).toList()))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))
    return sc._jsc.sc().makeRDD(conv.asScala(pairs).toList(), tag)


def located_rdd(sc: SparkContext, items: Sequence[tuple[str, str]]) -> RDD[str]:
    """A ``pyspark.RDD`` of strings, one partition per ``(value, host)``, each preferring its
    host: ``SparkContext.makeRDD(Seq[(String, Seq[String])])`` through the JVM gateway,
    read back with ``UTF8Deserializer``."""
    from pyspark import RDD
    from pyspark.serializers import UTF8Deserializer

    return RDD(_located_jrdd(sc, items).toJavaRDD(), sc, UTF8Deserializer())


def located_frame(spark: SparkSession, items: Sequence[tuple[str, str]]) -> DataFrame:
    """A DataFrame of one STRING column, ``value``, one partition per ``(value, host)``, each
    preferring its host: :func:`located_rdd`'s RDD made a ``Dataset[String]`` in the JVM
    (``SparkSession.createDataset(RDD, Encoders.STRING)``: no Python worker, a narrow
    dependency)."""
    from pyspark.sql.dataframe import DataFrame

    sc = spark.sparkContext
    jrdd = _located_jrdd(sc, items)
    strings = _jvm(sc).org.apache.spark.sql.Encoders.STRING()
    jdf = spark._jsparkSession.createDataset(jrdd, strings).toDF()
    return DataFrame(jdf, spark)


def executor_hosts(sc: SparkContext) -> set[str]:
    """The hosts of the application's executors (``SparkStatusTracker.getExecutorInfos``)."""
    return {i.host() for i in sc._jsc.sc().statusTracker().getExecutorInfos()}


def _wait_for_hosts(sc: SparkContext, hosts: set[str], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        have = executor_hosts(sc)
        missing = hosts - have
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise StoreLocalityError(
                f"rocketmq: no executor on host(s) {', '.join(sorted(map(repr, missing)))} "
                f"after {wait_s:g} s; the executors are on {', '.join(sorted(map(repr, have)))}. "
                f"A store's host must be the host its executor registered with "
                f"(the worker's --host, SPARK_LOCAL_HOSTNAME)"
            )
        time.sleep(0.2)


def _stores(stores: Iterable[BrokerStore | tuple[str, str, str]]) -> tuple[BrokerStore, ...]:
    out = tuple(s if isinstance(s, BrokerStore) else BrokerStore(*s) for s in stores)
    names = [s.name for s in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"rocketmq: broker named twice: {', '.join(sorted(dup))}")
    places = [(s.host, os.path.normpath(s.path)) for s in out]
    twice = sorted({f"{p} on {h}" for h, p in places if places.count((h, p)) > 1})
    if twice:
        raise ValueError(f"rocketmq: one store named for two brokers: {', '.join(twice)}")
    if not out:
        raise ValueError("rocketmq: no store to read")
    return out


def _cut(start: int, end: int, step: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` cut at multiples of ``step`` (the data source's partitions)."""
    a = start
    while a < end:
        b = min(end, (a // step + 1) * step)
        yield a, b
        a = b


def plan_broker_stores(
    spark: SparkSession,
    stores: Iterable[BrokerStore | tuple[str, str, str]],
    topics: Iterable[str] | None = None,
    max_records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION,
    executor_wait_s: float = 30.0,
) -> LocalityPlan:
    """Plan a read of ``stores`` (``(name, host, path)`` or :class:`BrokerStore`) on their
    hosts: one task per store on its host lists its queues and offsets (``topics``: only
    these; default every topic with a queue), then each queue's ``[min, max)`` is cut at
    multiples of ``max_records_per_partition``.

    Raises:
        StoreLocalityError: no SparkContext (Spark Connect); no executor on a store's host
            after ``executor_wait_s`` seconds; a store missing, or another broker's, on its
            host, or planned on another host (every store's problem named at once).
        ValueError: no store, a broker named twice, or one store (host and path) named
            for two brokers.
    """
    sc = _context(spark)
    todo = _stores(stores)
    if max_records_per_partition < 1:
        raise ValueError("rocketmq: max_records_per_partition must be at least 1")
    _ship_code(spark)
    check_workers(spark)
    _wait_for_hosts(sc, {s.host for s in todo}, executor_wait_s)
    wanted = tuple(sorted(set(topics))) if topics is not None else None
    rdd = located_rdd(sc, [(json.dumps(asdict(s)), s.host) for s in todo])
    answers = rdd.map(functools.partial(plan_store, topics=wanted)).collect()
    errors, identities, parts = [], [], []
    for store, text in zip(todo, answers, strict=True):
        got = json.loads(text)
        if "error" in got:
            errors.append(got["error"])
            continue
        ident = StoreIdentity(**got["identity"])
        identities.append(ident)
        for topic, q, lo, hi in got["queues"]:
            for a, b in _cut(lo, hi, max_records_per_partition):
                parts.append(ScanPart(store, ident, topic, q, a, b))
    if errors:
        raise StoreLocalityError("; ".join(errors))
    return LocalityPlan(todo, tuple(identities), tuple(parts))


def output_columns(columns: Iterable[str] | None = None) -> tuple[tuple[str, str], ...]:
    """``(name, Spark type)`` of a read's columns: ``columns`` in that order (names of
    :data:`DATASOURCE_DDL` and ``brokerName``), by default all of them then ``brokerName``.

    Raises:
        ValueError: a name that is no column."""
    types = dict(split_ddl(DATASOURCE_DDL))
    types[BROKER_COLUMN] = "STRING"
    if columns is None:
        return tuple(types.items())
    cols = tuple(columns)
    for c in cols:
        if c not in types:
            raise ValueError(f"rocketmq: no column {c!r}; the columns are {', '.join(types)}")
    if not cols or len(set(cols)) != len(cols):
        raise ValueError("rocketmq: columns must name each column once, at least one")
    return tuple((c, types[c]) for c in cols)


def read_plan(
    spark: SparkSession,
    plan: LocalityPlan,
    columns: Iterable[str] | None = None,
    fail_on_data_loss: bool = True,
) -> DataFrame:
    """The DataFrame of a :class:`LocalityPlan`: one Spark partition per :class:`ScanPart`,
    preferring its store's host, decoded there by :func:`read_parts` (``mapInArrow``).
    Nothing is read until an action runs. ``fail_on_data_loss``: as the data source's option
    for offsets deleted while the query runs; a damaged record fails either way.

    Raises:
        StoreLocalityError: no SparkContext (Spark Connect).
        ValueError: a column that is not one of the read's.
    """
    _context(spark)
    cols = output_columns(columns)
    names = tuple(n for n, _ in cols)
    ddl = ", ".join(f"{n} {t}" for n, t in cols)
    specs = located_frame(spark, [(p.to_json(), p.store.host) for p in plan.parts])
    return specs.mapInArrow(
        functools.partial(read_parts, columns=names, fail_on_data_loss=fail_on_data_loss), ddl
    )


def read_broker_stores(
    spark: SparkSession,
    stores: Iterable[BrokerStore | tuple[str, str, str]],
    topics: Iterable[str] | None = None,
    columns: Iterable[str] | None = None,
    max_records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION,
    executor_wait_s: float = 30.0,
    fail_on_data_loss: bool = True,
) -> DataFrame:
    """Read the stores of a fleet where they are, each on its own host (batch): a DataFrame
    of the ``rocketmq`` data source's columns plus ``brokerName`` (``columns``: only these,
    in that order), every queue from its min to its max offset at planning time.

    ``stores``: ``(brokerName, host, path)`` each (or :class:`BrokerStore`): ``host`` as its
    executor registered it, ``path`` the store on that host. See the module docstring for how
    and its limits; :func:`plan_broker_stores` and :func:`read_plan` are the two steps.

    Raises:
        StoreLocalityError: see :func:`plan_broker_stores`; an action on the DataFrame fails
            with it too (from a task) when a task runs on another host or finds another
            store than planned.
        ValueError: no store, a broker named twice, one store named for two brokers, a
            column that is no column.
    """
    output_columns(columns)  # refuse a bad column before any job runs
    plan = plan_broker_stores(spark, stores, topics, max_records_per_partition, executor_wait_s)
    return read_plan(spark, plan, columns, fail_on_data_loss)
