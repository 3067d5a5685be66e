"""``rmqfs report MNT... [--out DIR] [--master URL]``: the operator's report, on Spark.

Input: one or more rmqfs mounts (one per broker), or snapshots in object storage by URI
(``s3://bucket/fleet/broker-a/latest?endpoint_override=...``, :class:`SnapshotInput`: messages
through the ``rocketmq`` data source, consumer lag from the snapshot's own offsets). For each
mount the job reads

* ``MNT/view/`` with ``spark.read.parquet("file://MNT/view")``: one row per
  message, ``topic``/``queue`` partition columns, ``body`` BINARY;
* ``MNT/groups/<group>/progress.json``: brokerOffset and consumerOffset per topic and queue;
* ``MNT/status.json``: ``brokerName`` when the mount reports it, else the mount directory's name.

Why ``view/`` and not ``topics/*/messages.jsonl``: ``view/`` is the tree made for Spark. Its
parts are Parquet (``body`` BINARY, so body sizes are byte counts; Spark reads only the
columns the job uses); they are immutable once full, with exact sizes and stable mtimes, so a
part never changes under a running job, while ``messages.jsonl`` grows as messages arrive;
parts of at most 100,000 messages give Spark parallelism; and ``topic=``/``queue=``
directories give partition pruning. The first read of a part renders it (in the daemon's
worker processes); later reads come from the render cache and the page cache.

Output (``--out``, default ``./report``): for each table ``<name>.parquet`` and ``<name>.csv``;
``messages_per_minute.png`` and ``lag_per_group.png`` (``pipeline/charts.py``); ``report.html``
(``pipeline/htmlreport.py``: summary, charts and tables in one self-contained file); and a
summary on stdout. The tables:

``per_queue_tag``
    brokerName, topic, queue, tags: messages, bytes (sum of storeSize, whole CommitLog records:
    an inner batch's messages each carry their shared record's), bodyBytes.
``per_minute``
    brokerName, topic, minute (UTC minute of storeTimestamp): messages, bytes.
``body_size``
    brokerName, topic: messages, min/p50/p95/p99/max/avg body bytes.
``body_size_histogram``
    brokerName, topic, bucket (upper bound in bytes, powers of 2): messages.
``store_latency``
    brokerName, topic: measurable, messages (with a bornTimestamp), p50/p95/p99/max of
    storeTimestamp - bornTimestamp (ms), note. ``measurable`` is false, the percentiles null
    and ``note`` says why, when no message of the topic has a bornTimestamp or every one equals
    its storeTimestamp (messages produced through the mount are stamped once): 0/0/0 would
    read as "stored instantly", not "unknown".
``consumer_lag``
    brokerName, group, topic, queueId: brokerOffset, consumerOffset, lag, lastTimestamp.
``top_keys``
    topic, key: messages (the KEYS entries seen most often, ``--top`` rows).

The aggregates are small: they are collected to the driver and written there (pyarrow and
pandas), so the same job runs on a cluster (``--master``) as long as every executor sees the
mounts at the same paths.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import pandas as pd

try:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F

    _PYSPARK_IMPORT_ERROR: ImportError | None = None
except ImportError as _exc:  # pragma: no cover - exercised only without the spark extra
    _PYSPARK_IMPORT_ERROR = _exc

from rmqfs.engine.read.schema import DATASOURCE_DDL

__all__ = [
    "build_session",
    "Mount",
    "read_view",
    "read_lag",
    "compute_report",
    "write_report",
    "write_charts",
    "summary",
    "main",
    "HTML",
    "CHARTS",
    "TABLES",
]

DEFAULT_APP_NAME = "rmqfs-report"
DEFAULT_OUT = "report"
DEFAULT_TOP = 20
DEFAULT_SERIES = 8  # topics drawn on their own in a chart; the rest are summed as "other"
_MINUTE_MS = 60_000
TABLES = (
    "per_queue_tag",
    "per_minute",
    "body_size",
    "body_size_histogram",
    "store_latency",
    "consumer_lag",
    "top_keys",
)
LAG_DDL = (
    "brokerName STRING, group STRING, topic STRING, queueId INT, brokerOffset BIGINT, "
    "consumerOffset BIGINT, lag BIGINT, lastTimestamp BIGINT"
)
CHARTS = ("messages_per_minute.png", "lag_per_group.png")
HTML = "report.html"
#: ``store_latency.note`` where a topic's latency cannot be measured
LATENCY_BORN_IS_STORE = (
    "not measurable: bornTimestamp equals storeTimestamp for every "
    "message (stamped once, as when produced through the mount)"
)
LATENCY_NO_BORN = "not measurable: no message has a bornTimestamp"


# --------------------------------------------------------------------------- session


def build_session(
    master: str | None = None,
    app_name: str = DEFAULT_APP_NAME,
    shuffle_partitions: int = 4,
) -> SparkSession:
    """Return a quiet SparkSession for report jobs (``getOrCreate``: reuses an active one).

    ``master`` defaults to ``local[*]``. The settings are: Spark UI and console progress bars off,
    ``spark.sql.shuffle.partitions=shuffle_partitions`` (results are small), session time
    zone UTC, Python data source filter pushdown on, and log level WARN. For ``local`` masters,
    the driver binds to 127.0.0.1 and ``PYSPARK_PYTHON`` is ``sys.executable``; for others
    ``PYSPARK_PYTHON`` is only set when unset. Python workers get this project first on their
    ``PYTHONPATH`` (the ``rocketmq`` data source runs in them).
    """
    _require_pyspark()
    master = master or "local[*]"
    local = master.startswith("local")
    # Python workers must import this project (the rocketmq data source) from the same tree
    # as the driver: the directories the driver's ``rmqfs`` namespace comes from go first on
    # their path (local mode; on a cluster, install it). An editable install's namespace has
    # no such directory: the workers' interpreter finds it as the driver's does.
    from rmqfs.engine.pythonpath import child_pythonpath

    os.environ["PYTHONPATH"] = child_pythonpath()
    if local:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        # Silences "Your hostname ... resolves to a loopback address" at JVM start.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(int(shuffle_partitions)))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if local:
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _require_pyspark() -> None:
    if _PYSPARK_IMPORT_ERROR is not None:
        raise ImportError(
            "rmqfs report needs pyspark: pip install 'rmqfs[spark]'"
        ) from _PYSPARK_IMPORT_ERROR


# --------------------------------------------------------------------------- input


class Mount:
    """One rmqfs mount given to the report: its path and broker name.

    Raises FileNotFoundError when ``path`` has no ``view/`` directory (not an rmqfs mount).
    """

    def __init__(self, path: str, broker_name: str | None = None):
        self.path = os.path.abspath(path)
        if not os.path.isdir(os.path.join(self.path, "view")):
            raise FileNotFoundError(f"{path}: no view/ directory (is this an rmqfs mount?)")
        self.broker_name = broker_name or self._broker_name()

    def _broker_name(self) -> str:
        try:
            with open(os.path.join(self.path, "status.json"), encoding="utf-8") as f:
                name = json.load(f).get("brokerName")
            if name:
                return str(name)
        except (OSError, ValueError, AttributeError):
            pass
        return os.path.basename(self.path.rstrip("/")) or self.path

    @property
    def view(self) -> str:
        """The mount's ``view/`` directory (Parquet parts, one directory per topic)."""
        return os.path.join(self.path, "view")

    def has_messages(self) -> bool:
        """Whether ``view/`` has a topic with messages."""
        return any(n.startswith("topic=") for n in os.listdir(self.view))

    def shortened_topics(self) -> dict[str, str]:
        """``{what Spark's topic column holds for a shortened view/ directory: the topic}``
        for the mount's topics (``MNT/topics/``) whose ``view/`` directory name is shortened
        to fit NAME_MAX (``engine.read.viewnames.topic_dir_name``: a retry or DLQ topic of a
        long group)."""
        from rmqfs.engine.read.viewnames import (
            TOPIC_DIR,
            escape_partition_value,
            topic_dir_name,
            unescape_partition_value,
        )

        try:
            names = os.listdir(os.path.join(self.path, "topics"))
        except OSError:
            return {}
        out = {}
        for topic in names:
            d = topic_dir_name(topic)
            if d != TOPIC_DIR + escape_partition_value(topic):
                out[unescape_partition_value(d[len(TOPIC_DIR) :])] = topic
        return out


class SnapshotInput:
    """A snapshot in object storage given to the report (``s3://...``, any URI
    ``pyarrow.fs`` opens but ``file://``): its messages through the ``rocketmq`` data source
    (read in place, ``engine.live.remote``), its consumer lag from its own
    ``config/consumerOffset.json`` and its manifest's offsets
    (``engine.live.remote.SnapshotProgress``, the rules of
    ``engine.live.progress.consumer_progress``), its broker name from its manifest.

    Raises ValueError (named, without secrets) when the location holds no snapshot or cannot
    be read."""

    def __init__(self, location: str):
        from rmqfs.engine.errors import StoreError
        from rmqfs.engine.live.location import redact
        from rmqfs.pipeline.datasource import open_snapshot, path_broker_name

        self.path = location
        self.shown = redact(location)
        self.snapshot = open_snapshot(location)  # this input's, closed by :meth:`close`
        self.broker_name = self.snapshot.broker_name or path_broker_name(location)
        try:
            from rmqfs.engine.live.remote import SnapshotProgress

            self.progress = SnapshotProgress(self.snapshot)
        except BaseException as exc:
            self.snapshot.close()
            if isinstance(exc, StoreError):
                raise ValueError(f"{self.shown}: {exc}") from None
            raise

    def close(self) -> None:
        """Close the snapshot reader this input opened."""
        self.snapshot.close()

    def has_messages(self) -> bool:
        """Whether the snapshot has a queue with messages."""
        return bool(self.snapshot.topics())


def is_snapshot_uri(path: str) -> bool:
    """Whether a report input is a snapshot in object storage (else an rmqfs mount)."""
    from rmqfs.pipeline.datasource import is_remote

    return is_remote(path)


def read_input(spark: SparkSession, source: Mount | SnapshotInput) -> DataFrame:
    """The messages of one input with ``brokerName``: :func:`read_view` of a mount, the
    ``rocketmq`` data source over a snapshot in object storage (the same columns)."""
    if isinstance(source, Mount):
        return read_view(spark, source)
    from rmqfs.pipeline.datasource import register

    register(spark)
    cols = [c.split()[0] for c in _top_level(DATASOURCE_DDL)]
    df = spark.read.format("rocketmq").load(source.path)
    return df.select(*cols, F.lit(source.broker_name).alias("brokerName"))


def read_input_lag(source: Mount | SnapshotInput) -> list[dict]:
    """Rows of ``consumer_lag`` of one input: :func:`read_lag` of a mount; of a snapshot, every
    group with committed offsets through ``consumer_progress``."""
    if isinstance(source, Mount):
        return read_lag(source)
    from rmqfs.engine.live.progress import consumer_progress

    rows = []
    for group in source.progress.groups():
        for q in consumer_progress(source.progress, group):
            rows.append(
                {
                    "brokerName": source.broker_name,
                    "group": group,
                    "topic": q["topic"],
                    "queueId": int(q["queueId"]),
                    "brokerOffset": int(q["brokerOffset"]),
                    "consumerOffset": int(q["consumerOffset"]),
                    "lag": int(q["diff"]),
                    "lastTimestamp": q.get("lastTimestamp"),
                }
            )
    return rows


def _glob_literal(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped (``GlobPattern``: ``\\`` quotes the
    next character): Spark's file sources expand a path as a pattern, so a mount at
    ``/mnt/[a]`` was not found (PATH_NOT_FOUND)."""
    return re.sub(r"([\\{}\[\]*?])", r"\\\1", path)


def read_view(spark: SparkSession, mount: Mount) -> DataFrame:
    """The mount's ``view/`` as a DataFrame: ``DATASOURCE_DDL`` columns plus ``brokerName``;
    ``topic`` the whole topic where its ``view/`` directory name is shortened
    (:meth:`Mount.shortened_topics`), so the message tables and ``consumer_lag`` name it alike.

    A view without any topic yet gives an empty DataFrame of the same schema.
    """
    _require_pyspark()
    if mount.has_messages():
        # The schema is given so that topic names made of digits stay STRING (Spark would
        # infer the partition column's type from the directory names).
        df = spark.read.schema(DATASOURCE_DDL).parquet("file://" + _glob_literal(mount.view))
    else:
        df = spark.createDataFrame([], DATASOURCE_DDL)
    cols: list[Any] = [c.split()[0] for c in _top_level(DATASOURCE_DDL)]
    short = mount.shortened_topics()
    if short:  # the whole topic, as consumer_lag (progress.json) names it
        whole = F.create_map(*[F.lit(x) for kv in sorted(short.items()) for x in kv])
        cols[cols.index("topic")] = F.coalesce(whole[F.col("topic")], F.col("topic")).alias("topic")
    return df.select(*cols, F.lit(mount.broker_name).alias("brokerName"))


def _top_level(ddl: str) -> list[str]:
    from rmqfs.engine.read.schema import split_ddl

    return [f"{n} {t}" for n, t in split_ddl(ddl)]


def read_lag(mount: Mount) -> list[dict]:
    """Rows of ``consumer_lag`` from ``MNT/groups/*/progress.json``: lag is the file's ``diff``
    (computed once, by ``engine.live.progress.consumer_progress``). Unreadable files are skipped with
    a warning on stderr."""
    rows: list[dict] = []
    gdir = os.path.join(mount.path, "groups")
    try:
        groups = sorted(os.listdir(gdir))
    except OSError:
        return rows
    for g in groups:
        path = os.path.join(gdir, g, "progress.json")
        try:
            with open(path, encoding="utf-8") as f:
                progress = json.load(f)
        except (OSError, ValueError) as exc:
            print(f"rmqfs report: warning: skipping {path}: {exc}", file=sys.stderr)
            continue
        for q in progress.get("queues", []):
            broker, consumer = int(q["brokerOffset"]), int(q["consumerOffset"])
            rows.append(
                {
                    "brokerName": mount.broker_name,
                    "group": progress.get("group", g),
                    "topic": q["topic"],
                    "queueId": int(q["queueId"]),
                    "brokerOffset": broker,
                    "consumerOffset": consumer,
                    "lag": int(q["diff"]),
                    "lastTimestamp": q.get("lastTimestamp"),
                }
            )
    return rows


# --------------------------------------------------------------------------- job


def compute_report(
    spark: SparkSession, messages: DataFrame, lag_rows: list[dict], top: int = DEFAULT_TOP
) -> dict[str, Any]:
    """Compute every table of the report from ``messages`` (``read_view`` rows).

    ``messages`` is scanned once: the columns the tables need are projected and persisted,
    and every table is derived from that. Returns ``{table name: DataFrame}`` (see TABLES),
    plus ``"_cached"``: the persisted projection, to ``unpersist()`` once the tables are
    collected; ``"_timeline"``: messages per broker, topic and ``bucketMs`` (epoch ms, start of
    a bucket of ``"_bucket_ms"`` ms, :func:`chart_bucket` of the stored time span), for the
    chart. Runs one small Spark job (the time span) before returning.
    """
    _require_pyspark()
    ts = F.col("storeTimestamp")
    slim = messages.select(
        "brokerName",
        "topic",
        "queue",
        "tags",
        "storeSize",
        "keys",
        F.length("body").alias("bodySize"),
        F.when(F.col("bornTimestamp") > 0, ts - F.col("bornTimestamp")).alias("latency"),
        (ts - F.pmod(ts, F.lit(_MINUTE_MS))).alias("minuteMs"),
        ts.alias("storeTimestamp"),
    ).persist()
    span = slim.agg(F.min(ts), F.max(ts)).first()
    assert span is not None  # an aggregate without groupBy has one row
    lo, hi = span
    bucket_ms = chart_bucket(hi - lo if lo is not None else 0)[0]
    timeline = (
        slim.groupBy("brokerName", "topic", (ts - F.pmod(ts, F.lit(bucket_ms))).alias("bucketMs"))
        .agg(F.count(F.lit(1)).alias("messages"))
        .orderBy("brokerName", "topic", "bucketMs")
    )
    per_queue_tag = (
        slim.groupBy("brokerName", "topic", "queue", "tags")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum("storeSize").alias("bytes"),
            F.sum("bodySize").alias("bodyBytes"),
        )
        .orderBy("brokerName", "topic", "queue", F.col("tags").asc_nulls_first())
    )
    per_minute = (
        slim.groupBy("brokerName", "topic", "minuteMs")
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("storeSize").alias("bytes"))
        .select(
            "brokerName",
            "topic",
            F.timestamp_millis("minuteMs").alias("minute"),
            "messages",
            "bytes",
        )
        .orderBy("brokerName", "topic", "minute")
    )
    q = F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))
    body = (
        slim.groupBy("brokerName", "topic")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.min("bodySize").alias("min"),
            F.percentile("bodySize", q).alias("p"),
            F.max("bodySize").alias("max"),
            F.avg("bodySize").alias("avg"),
        )
        .select(
            "brokerName",
            "topic",
            "messages",
            "min",
            F.col("p")[0].alias("p50"),
            F.col("p")[1].alias("p95"),
            F.col("p")[2].alias("p99"),
            "max",
            "avg",
        )
        .orderBy("brokerName", "topic")
    )
    bucket = (
        F.when(F.col("bodySize") <= 1, F.lit(1))
        .otherwise(F.pow(F.lit(2), F.ceil(F.log2(F.col("bodySize")))))
        .cast("bigint")
    )
    histogram = (
        slim.groupBy("brokerName", "topic", bucket.alias("bucket"))
        .agg(F.count(F.lit(1)).alias("messages"))
        .orderBy("brokerName", "topic", "bucket")
    )
    # Latency is measurable for a topic when some message has a bornTimestamp (> 0) that
    # differs from its storeTimestamp: messages produced through the mount are stamped once
    # (born == store), so 0/0/0 there would read as "instant", not "unknown".
    measurable = F.col("measured") > 0
    latency = (
        slim.groupBy("brokerName", "topic")
        .agg(
            F.count("latency").alias("messages"),
            F.count(F.when(F.col("latency") != 0, True)).alias("measured"),
            F.percentile("latency", q).alias("p"),
            F.max("latency").alias("max_"),
        )
        .select(
            "brokerName",
            "topic",
            measurable.alias("measurable"),
            "messages",
            *[
                F.when(measurable, F.col("p")[i]).alias(n)
                for i, n in enumerate(("p50", "p95", "p99"))
            ],
            F.when(measurable, F.col("max_")).alias("max"),
            F.when(F.col("messages") == 0, F.lit(LATENCY_NO_BORN))
            .when(~measurable, F.lit(LATENCY_BORN_IS_STORE))
            .alias("note"),
        )
        .orderBy("brokerName", "topic")
    )
    top_keys = (
        slim.select("topic", F.explode("keys").alias("key"))
        .groupBy("topic", "key")
        .agg(F.count(F.lit(1)).alias("messages"))
        .orderBy(F.desc("messages"), "topic", "key")
        .limit(top)
    )
    lag = spark.createDataFrame(lag_rows, LAG_DDL).orderBy(
        "brokerName", "group", "topic", "queueId"
    )
    return {
        "_cached": slim,
        "_timeline": timeline,
        "_bucket_ms": bucket_ms,
        "per_queue_tag": per_queue_tag,
        "per_minute": per_minute,
        "body_size": body,
        "body_size_histogram": histogram,
        "store_latency": latency,
        "consumer_lag": lag,
        "top_keys": top_keys,
    }


def collect(report: dict[str, Any]) -> dict:
    """``{name: pandas.DataFrame}`` of every table (they are small aggregates), plus the
    chart's ``"_timeline"`` (with a UTC ``time`` column) and ``"_bucket_ms"``."""
    from pyspark.sql.types import IntegralType

    out = {}
    for name in TABLES:
        df = report[name]
        pdf: Any = df.toPandas()  # pandas is untyped here (no pandas-stubs): Any
        for f in df.schema.fields:
            c = f.name
            if str(pdf[c].dtype).startswith("datetime64"):
                # timestamps leave Spark as naive session-time (UTC) values
                pdf[c] = pdf[c].dt.tz_localize("UTC")
            elif isinstance(f.dataType, IntegralType) and pdf[c].dtype.kind == "f":
                pdf[c] = pdf[c].astype("Int64")  # integers with NULLs stay integers
        out[name] = pdf
    if "_timeline" in report:
        import pandas as pd

        tl = report["_timeline"].toPandas()
        tl["time"] = pd.to_datetime(tl["bucketMs"], unit="ms", utc=True)
        out["_timeline"], out["_bucket_ms"] = tl, report["_bucket_ms"]
    return out


def write_report(tables: dict, out_dir: str) -> dict[str, list[str]]:
    """Write ``<out_dir>/<name>.parquet`` and ``<name>.csv`` for every table.

    Returns ``{name: [parquet path, csv path]}``. Timestamps are UTC (ISO 8601 in the CSV).
    Files are written to a temporary name and renamed, so a reader never sees half a file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out_dir, exist_ok=True)
    written = {}
    for name, pdf in tables.items():
        if name not in TABLES:  # the chart's data
            continue
        pqt = os.path.join(out_dir, f"{name}.parquet")
        csv = os.path.join(out_dir, f"{name}.csv")
        pq.write_table(pa.Table.from_pandas(pdf, preserve_index=False), pqt + ".tmp")
        os.replace(pqt + ".tmp", pqt)
        pdf.to_csv(csv + ".tmp", index=False, date_format="%Y-%m-%dT%H:%M:%SZ")
        os.replace(csv + ".tmp", csv)
        written[name] = [pqt, csv]
    return written


#: Buckets of the messages-over-time chart: (ms, name). The smallest that gives at most
#: _CHART_POINTS points over the stored time span is used.
CHART_BUCKETS = (
    (10, "10 ms"),
    (100, "100 ms"),
    (1_000, "second"),
    (10_000, "10 seconds"),
    (_MINUTE_MS, "minute"),
    (10 * _MINUTE_MS, "10 minutes"),
    (60 * _MINUTE_MS, "hour"),
    (6 * 60 * _MINUTE_MS, "6 hours"),
    (24 * 60 * _MINUTE_MS, "day"),
    (7 * 24 * 60 * _MINUTE_MS, "week"),
    (30 * 24 * 60 * _MINUTE_MS, "30 days"),
)
_CHART_POINTS = 240


def chart_bucket(span_ms: int) -> tuple[int, str]:
    """``(bucket ms, name)`` for a chart of messages over ``span_ms`` (last minus first
    storeTimestamp): a burst of logs produced in under a second is drawn per 10 ms, minutes per
    second, a day per 10 minutes, months per
    day."""
    for ms, name in CHART_BUCKETS:
        if span_ms // ms + 1 <= _CHART_POINTS:
            return ms, name
    return CHART_BUCKETS[-1]


def write_charts(tables: dict, out_dir: str, series: int = DEFAULT_SERIES) -> list[str]:
    """``messages_per_minute.png``: messages over storeTimestamp, one panel per broker, a
    stacked bar per bucket of ``tables["_bucket_ms"]`` (:func:`chart_bucket`; per minute when
    ``tables`` has no ``"_timeline"``), the ``series`` topics with most messages and the rest
    as ``other (N topics)`` (:func:`pipeline.charts.plot_timeline`); and
    ``lag_per_group.png`` (a bar per broker/group, stacked by topic). Drawn with matplotlib's
    Agg backend. Returns the paths.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rmqfs.pipeline import charts

    os.makedirs(out_dir, exist_ok=True)
    if "_timeline" in tables:
        tl, bucket_ms = tables["_timeline"], tables["_bucket_ms"]
    else:
        pm = tables["per_minute"]
        tl = pm.assign(
            bucketMs=pm["minute"].map(lambda t: int(t.timestamp() * 1000)).astype("int64")
        )
        bucket_ms = _MINUTE_MS
    unit = next((name for ms, name in CHART_BUCKETS if ms == bucket_ms), f"{bucket_ms} ms")
    figures = [
        charts.plot_timeline(tl, bucket_ms, unit, series),
        charts.plot_lag(tables["consumer_lag"], series),
    ]
    paths = []
    for fig, name in zip(figures, CHARTS):
        path = os.path.join(out_dir, name)
        fig.savefig(path + ".tmp.png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        os.replace(path + ".tmp.png", path)
        paths.append(path)
    return paths


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


LATENCY_NOTE = (
    "storeTimestamp - bornTimestamp needs a bornTimestamp set by the producer: "
    "messages produced through the mount have bornTimestamp == storeTimestamp."
)


def _latency_cell(la: pd.Series) -> str:
    """p50/p95/p99 of a ``store_latency`` row, or ``n/a`` when it is not measurable."""
    if not la.measurable:
        return "n/a"
    return f"{la.p50:.0f}/{la.p95:.0f}/{la.p99:.0f}"


def summary(tables: dict, mounts: Sequence[Mount | SnapshotInput]) -> str:
    """A short text summary of the report (what ``main`` prints)."""
    pq_, pm = tables["per_queue_tag"], tables["per_minute"]
    lines = []
    brokers = ", ".join(m.broker_name for m in mounts)
    total = int(pq_["messages"].sum()) if len(pq_) else 0
    if not total:
        lines.append(f"no messages in {len(mounts)} mount(s) (brokers: {brokers})")
    else:
        first, last = pm["minute"].min(), pm["minute"].max()
        lines.append(
            f"{total:,} messages, {_human(float(pq_['bytes'].sum()))} in CommitLog "
            f"records, {pq_['topic'].nunique()} topic(s), broker(s): {brokers}; "
            f"stored {first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M} UTC"
        )
        lines.append("")
        by_topic = (
            pq_.groupby(["brokerName", "topic"])
            .agg(
                messages=("messages", "sum"),
                bytes=("bytes", "sum"),
                queues=("queue", "nunique"),
                tags=("tags", "nunique"),
            )
            .reset_index()
        )
        lat = tables["store_latency"].set_index(["brokerName", "topic"])
        body = tables["body_size"].set_index(["brokerName", "topic"])
        hdr = (
            f"{'broker':<12} {'topic':<24} {'messages':>10} {'bytes':>11} {'queues':>6} "
            f"{'tags':>4} {'body p50/p99':>14} {'latency p50/p95/p99 ms':>24}"
        )
        lines.append(hdr)
        lines.append("-" * len(hdr))
        for r in by_topic.itertuples():
            la, bo = lat.loc[(r.brokerName, r.topic)], body.loc[(r.brokerName, r.topic)]
            lines.append(
                f"{r.brokerName[:12]:<12} {r.topic[:24]:<24} {r.messages:>10,} "
                f"{_human(r.bytes):>11} {r.queues:>6} {r.tags:>4} "
                f"{f'{bo.p50:.0f}/{bo.p99:.0f} B':>14} "
                f"{_latency_cell(la):>24}"
            )
        if not tables["store_latency"]["measurable"].all():
            lines.append(f"latency n/a: not measurable. {LATENCY_NOTE}")
    lag = tables["consumer_lag"]
    lines.append("")
    if len(lag):
        lines.append("consumer lag (messages):")
        for (b, g), grp in lag.groupby(["brokerName", "group"]):
            per = ", ".join(f"{t} {int(v):,}" for t, v in grp.groupby("topic")["lag"].sum().items())
            lines.append(f"  {b}/{g}: {int(grp['lag'].sum()):,} ({per})")
    else:
        lines.append("consumer lag: no consumer groups")
    keys = tables["top_keys"]
    if len(keys):
        lines.append(
            "top keys: "
            + ", ".join(f"{r.topic}:{r.key} ({r.messages})" for r in keys.head(5).itertuples())
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rmqfs report",
        description=(
            "Spark report over rmqfs mounts (one per broker): messages and bytes per "
            "topic, queue and tag; messages per minute; body sizes; store latency; "
            "consumer lag; top keys. Reads MNT/view/ and MNT/groups/*/progress.json."
        ),
    )
    p.add_argument(
        "mounts",
        nargs="+",
        metavar="MNT",
        help="rmqfs mount point, or the URI of a snapshot in object storage (s3://...)",
    )
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help="where the Parquet/CSV tables, PNG charts and report.html go (default: ./report)",
    )
    p.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master URL (default: local[*]); executors need the mounts at the same paths",
    )
    p.add_argument(
        "--top",
        type=_at_least(1),
        default=DEFAULT_TOP,
        metavar="N",
        help=f"rows of top_keys (default: {DEFAULT_TOP})",
    )
    p.add_argument(
        "--series",
        type=_at_least(0),
        default=DEFAULT_SERIES,
        metavar="N",
        help=f"topics drawn on their own in a chart, the rest summed as "
        f"'other' (default: {DEFAULT_SERIES})",
    )
    return p


def _at_least(least: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``least`` (else a usage error, exit 2: a
    negative --top started Spark and failed there as a job, exit 1)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"{n}: give {least} or more")
        return n

    return parse


def run(
    spark: SparkSession,
    mounts: Sequence[Mount | SnapshotInput],
    out_dir: str,
    top: int = DEFAULT_TOP,
    file: TextIO | None = None,
    series: int = DEFAULT_SERIES,
) -> dict:
    """Run the report on ``mounts`` with ``spark``; write everything under ``out_dir`` and
    print the summary to ``file`` (default stdout). Returns the pandas tables."""
    file = file or sys.stdout
    frames = [read_input(spark, m) for m in mounts]
    messages = frames[0]
    for f in frames[1:]:
        messages = messages.unionByName(f)
    lag_rows = [r for m in mounts for r in read_input_lag(m)]
    report = compute_report(spark, messages, lag_rows, top)
    try:
        tables = collect(report)
    finally:
        report["_cached"].unpersist()
    written = write_report(tables, out_dir)
    charts = write_charts(tables, out_dir, series)
    text = summary(tables, mounts)
    from rmqfs.pipeline import htmlreport

    page = htmlreport.write(
        tables,
        list(TABLES),
        text,
        charts,
        out_dir,
        HTML,
        "rmqfs report: " + ", ".join(m.broker_name for m in mounts),
    )
    print(text, file=file)
    print(
        f"\ntables: {out_dir}/{{{','.join(TABLES)}}}.{{parquet,csv}} ({len(written) * 2} files)",
        file=file,
    )
    print("charts: " + "  ".join(charts), file=file)
    print(f"html:   {page} (summary, charts and tables in one file)", file=file)
    file.flush()
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    """``rmqfs report MNT [MNT...] [--out DIR] [--master URL] [--top N] [--series N]``.

    Exit codes: 0 report written; 1 a MNT is not an rmqfs mount or Spark cannot start; 2 bad
    command line. Without pyspark (the ``spark`` extra) it raises the ImportError, which
    ``rmqfs`` prints as one line naming the extra. An active SparkSession (a test fixture) is reused and left
    running; one that ``main`` starts is stopped at the end.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if _PYSPARK_IMPORT_ERROR is not None:
        # before any input is looked at (a URI's reader needs pyspark too); ``rmqfs``
        # (mount.cli.main) turns it into one line naming the extra to install
        raise _PYSPARK_IMPORT_ERROR
    mounts: list[Mount | SnapshotInput] = []
    seen_paths = set()
    try:
        for m in args.mounts:
            mount = SnapshotInput(m) if is_snapshot_uri(m) else Mount(m)
            where = mount.path if isinstance(mount, SnapshotInput) else os.path.realpath(mount.path)
            if where in seen_paths:
                if isinstance(mount, SnapshotInput):
                    mount.close()
                continue
            seen_paths.add(where)
            names = {x.broker_name for x in mounts}
            if mount.broker_name in names:  # two mounts of brokers with one name: keep apart
                mount.broker_name = f"{mount.broker_name}#{len(mounts) + 1}"
            mounts.append(mount)
    except (FileNotFoundError, ValueError) as exc:
        _close_inputs(mounts)
        print(f"rmqfs report: {exc}", file=sys.stderr)
        return 1
    except BaseException:
        _close_inputs(mounts)
        raise
    owns_session = SparkSession.getActiveSession() is None
    try:
        spark = build_session(args.master)
    except Exception as exc:  # noqa: BLE001 - report any start-up failure clearly
        print(
            f"rmqfs report: cannot start Spark (Java 17+ and JAVA_HOME needed): {exc}",
            file=sys.stderr,
        )
        _close_inputs(mounts)
        return 1
    try:
        run(spark, mounts, os.path.abspath(args.out), args.top, series=args.series)
    except Exception as exc:
        if not _spark_failure(exc):
            raise
        # a job that failed in the JVM (a part that cannot be read: a damaged record, messages
        # that expired under the job): its cause in one line, not Py4J's Java traceback
        print(f"rmqfs report: the Spark job failed: {_root_cause(exc)}", file=sys.stderr)
        return 1
    finally:
        if owns_session:
            spark.stop()
        _close_inputs(mounts)
    return 0


def _spark_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a Spark job's failure as PySpark raises it (``Py4JJavaError``, or a
    ``PySparkException`` such as an ``AnalysisException``)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return isinstance(exc, (Py4JJavaError, PySparkException))


def _root_cause(exc: BaseException) -> str:
    """The innermost cause a Spark failure's text names (its last ``Caused by:`` line, else its
    first line), at most 400 characters."""
    text = str(exc)
    causes = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Caused by:")]
    line = causes[-1][len("Caused by:") :].strip() if causes else ""
    if not line:
        line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return line[:400]


def _close_inputs(inputs: Sequence[Mount | SnapshotInput]) -> None:
    """Close the snapshot readers of the report's inputs (a mount holds nothing open)."""
    for m in inputs:
        if isinstance(m, SnapshotInput):
            m.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
