"""``rmqfs report``: a Spark batch job over one or more rmqfs FUSE mounts.

It reads the topic-level files ``MNT/topics/<topic>/messages.jsonl`` (one decoded message
per line, schema ``pipeline.schema.MESSAGE_DDL``) and computes:

* ``per_queue``: per (topic, queueId), the message count, the bytes (sum of ``storeSize``)
  and the min/max ``queueOffset``;
* ``per_minute``: per topic and UTC minute of ``storeTimestamp``, the message count and bytes;
* ``malformed``: lines that could not be used (not JSON, wrong types, or required fields
  missing), per file. They are left out of the two reports above and shown as a warning.

The queue-level files ``MNT/topics/<topic>/<queueId>/messages.jsonl`` hold the same messages
again, so they are never read: reading both would count every message twice.

The files are listed in Python and given to Spark as explicit ``file://`` paths. Spark is
not given a glob: a single glob path makes Spark log a WARN with a Java stack trace on every run
(``FileStreamSink``: "Assume no metadata directory"), and a glob would also need escaping
for mount paths that contain ``[]{}*?``.

The mount is scanned once: one aggregation at (topic, queue, minute) granularity is
computed and checkpointed, and all reports are derived from it. So the printed tables and the
CSV files come from the same snapshot, even if the mount changes while the job runs.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import os
import sys
from typing import Sequence
from urllib.parse import unquote

try:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    _PYSPARK_IMPORT_ERROR: ImportError | None = None
except ImportError as _exc:  # pragma: no cover - exercised only without the spark extra
    _PYSPARK_IMPORT_ERROR = _exc

from pipeline.schema import FIELD_NAMES

__all__ = [
    "build_session",
    "topic_message_files",
    "read_messages",
    "compute_report",
    "write_report",
    "main",
]

DEFAULT_APP_NAME = "rmqfs-report"
DEFAULT_OUT = "report"
#: Rows printed per table on stdout; the CSV files always hold every row.
DEFAULT_MAX_ROWS = 1000
#: Name of the column that holds lines Spark could not parse with the schema.
CORRUPT_COLUMN = "_corrupt_record"
#: storeTimestamp values outside [0, this] (epoch ms, 9999-12-31T23:59:59.999Z) are malformed.
_MAX_EPOCH_MS = 253402300799999
_MINUTE_MS = 60_000
_CSV_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ssXXX"

#: Report name -> columns used to sort it (also the order of rows in its CSV file).
REPORT_ORDER = {
    "per_queue": ("topic", "queueId"),
    "per_minute": ("topic", "minute"),
    "malformed": ("file",),
}
#: The reports written as CSV by ``main``.
CSV_REPORTS = ("per_queue", "per_minute")


# --------------------------------------------------------------------------- session


def build_session(
    master: str | None = None,
    app_name: str = DEFAULT_APP_NAME,
    shuffle_partitions: int = 4,
) -> "SparkSession":
    """Return a quiet SparkSession for report jobs (``getOrCreate``: reuses an active one).

    ``master`` defaults to ``local[*]``. The settings are: Spark UI and console progress bars off,
    ``spark.sql.shuffle.partitions=shuffle_partitions`` (results are small), session time
    zone UTC, and log level WARN. For ``local`` masters, the driver also binds to 127.0.0.1
    (``SPARK_LOCAL_IP`` defaults to it) and ``PYSPARK_PYTHON`` is set to ``sys.executable``.
    For other masters, ``PYSPARK_PYTHON`` is only set when it is unset, and the driver address
    is left alone (executors must reach it).
    """
    _require_pyspark()
    master = master or "local[*]"
    local = master.startswith("local")
    # Python workers must import this project (the rocketmq data source, UDFs) from the same
    # tree as the driver: put it first on their path (local mode; on a cluster, install it).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root] + [p for p in paths if p])
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


def topic_message_files(mount: str | os.PathLike) -> list[str]:
    """List the topic-level message files of one mount as ``file://`` URIs, sorted.

    Returns one URI per ``<mount>/topics/<topic>/messages.jsonl`` that is a regular file.
    Queue-level files (``topics/<topic>/<queueId>/messages.jsonl``) hold the same messages
    again and are never listed. Topic directories whose name starts with ``.`` are skipped,
    as Spark skips them. Raises ``FileNotFoundError`` if ``<mount>/topics`` is not a directory.
    """
    topics_dir = os.path.join(os.path.abspath(os.fspath(mount)), "topics")
    if not os.path.isdir(topics_dir):
        raise FileNotFoundError(f"{os.fspath(mount)}: no topics/ directory")
    pattern = os.path.join(glob.escape(topics_dir), "*", "messages.jsonl")
    return ["file://" + path for path in sorted(glob.glob(pattern)) if os.path.isfile(path)]


def _read_schema() -> "StructType":
    from pipeline.schema import MESSAGE_SCHEMA

    return StructType(list(MESSAGE_SCHEMA.fields) + [StructField(CORRUPT_COLUMN, StringType())])


def read_messages(spark: "SparkSession", paths: Sequence[str]) -> "DataFrame":
    """Read decoded message lines from ``paths`` with the explicit schema (never inferred).

    ``paths``: file paths or URIs (``file:///...``) of ``messages.jsonl`` files. An empty
    sequence gives an empty DataFrame. Files of size 0 are skipped by Spark.

    Returns one row per line. The columns are those of ``MESSAGE_DDL`` (timestamps stay BIGINT epoch ms),
    followed by:

    * ``_corrupt_record`` (STRING): the raw line if Spark could not parse it with the schema,
      otherwise NULL;
    * ``sourceFile`` (STRING): URI of the file the line came from (URL-encoded, as Spark reports it);
    * ``bornTime`` / ``storeTime`` (TIMESTAMP): ``bornTimestamp`` / ``storeTimestamp`` as
      timestamps (NULL if the epoch-ms value is NULL or outside years 0001-9999).
    """
    _require_pyspark()
    schema = _read_schema()
    if paths:
        df = (
            spark.read.schema(schema)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
            .json(list(paths))
        )
        source = F.col("_metadata.file_path")
    else:
        df = spark.createDataFrame([], schema)
        source = F.lit(None).cast("string")
    return df.select(
        *[F.col(c) for c in (*FIELD_NAMES, CORRUPT_COLUMN)],
        source.alias("sourceFile"),
        _epoch_ms_to_timestamp(F.col("bornTimestamp")).alias("bornTime"),
        _epoch_ms_to_timestamp(F.col("storeTimestamp")).alias("storeTime"),
    )


def _epoch_ms_to_timestamp(col):
    in_range = col.between(F.lit(-62135596800000), F.lit(_MAX_EPOCH_MS))
    return F.when(in_range, F.timestamp_millis(col))


# --------------------------------------------------------------------------- report


def compute_report(spark: "SparkSession", paths: Sequence[str]) -> dict[str, "DataFrame"]:
    """Compute the report DataFrames over the message files ``paths``.

    ``paths``: topic-level ``messages.jsonl`` files as paths or ``file://`` URIs (for a
    mount, use ``topic_message_files(mount)``). It may be empty.

    This runs one Spark job, which scans the input once and checkpoints a small aggregate. The
    returned DataFrames are derived from that aggregate, so they are cheap and consistent with
    each other. Keys and columns of the returned dict:

    * ``"per_queue"``: ``topic`` STRING, ``queueId`` INT, ``messages`` BIGINT (count),
      ``bytes`` BIGINT (sum of ``storeSize``), ``minQueueOffset`` / ``maxQueueOffset`` BIGINT;
      sorted by topic and queueId.
    * ``"per_minute"``: ``topic`` STRING, ``minute`` TIMESTAMP (start of the minute of
      ``storeTimestamp``; the buckets are computed on epoch ms, so they do not depend on the
      session time zone), ``messages`` BIGINT, ``bytes`` BIGINT; only minutes that have messages,
      sorted by topic and minute.
    * ``"malformed"``: ``file`` STRING (file URI as Spark reports it, URL-encoded, such as
      ``file:/mnt/topics/%25RETRY%25g/messages.jsonl``), ``lines`` BIGINT: lines left out of the
      other reports because they are not valid JSON for the schema, or because they lack
      topic, queueId, queueOffset, storeSize or a plausible storeTimestamp. Sorted by file.
    """
    messages = read_messages(spark, paths)
    # coalesce: a NULL storeTimestamp makes `between` NULL, and the predicate must be true or false.
    valid = F.coalesce(
        F.col(CORRUPT_COLUMN).isNull()
        & F.col("topic").isNotNull()
        & F.col("queueId").isNotNull()
        & F.col("queueOffset").isNotNull()
        & F.col("storeSize").isNotNull()
        & F.col("storeTimestamp").between(F.lit(0), F.lit(_MAX_EPOCH_MS)),
        F.lit(False),
    )
    ts = F.col("storeTimestamp")
    rows = messages.select(
        F.when(valid, F.col("topic")).alias("topic"),
        F.when(valid, F.col("queueId")).alias("queueId"),
        F.when(valid, ts - F.pmod(ts, F.lit(_MINUTE_MS))).alias("minuteMs"),
        F.when(valid, F.col("storeSize")).alias("storeSize"),
        F.when(valid, F.col("queueOffset")).alias("queueOffset"),
        F.when(~valid, F.col("sourceFile")).alias("badFile"),
    )
    # One row per (topic, queue, minute) for good lines, one per file for bad lines.
    fine = (
        rows.groupBy("topic", "queueId", "minuteMs", "badFile")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum("storeSize").alias("bytes"),
            F.min("queueOffset").alias("minQueueOffset"),
            F.max("queueOffset").alias("maxQueueOffset"),
        )
        .localCheckpoint(eager=True)
    )
    good = fine.where(F.col("badFile").isNull())
    bad = fine.where(F.col("badFile").isNotNull())

    per_queue = (
        good.groupBy("topic", "queueId")
        .agg(
            F.sum("messages").cast("bigint").alias("messages"),
            F.sum("bytes").cast("bigint").alias("bytes"),
            F.min("minQueueOffset").alias("minQueueOffset"),
            F.max("maxQueueOffset").alias("maxQueueOffset"),
        )
        .orderBy(*REPORT_ORDER["per_queue"])
    )
    per_minute = (
        good.groupBy("topic", "minuteMs")
        .agg(
            F.sum("messages").cast("bigint").alias("messages"),
            F.sum("bytes").cast("bigint").alias("bytes"),
        )
        .select(
            "topic",
            F.timestamp_millis(F.col("minuteMs")).alias("minute"),
            "messages",
            "bytes",
        )
        .orderBy(*REPORT_ORDER["per_minute"])
    )
    malformed = (
        bad.groupBy(F.col("badFile").alias("file"))
        .agg(F.sum("messages").cast("bigint").alias("lines"))
        .orderBy(*REPORT_ORDER["malformed"])
    )
    return {"per_queue": per_queue, "per_minute": per_minute, "malformed": malformed}


def write_report(report: dict[str, "DataFrame"], out_dir: str | os.PathLike) -> dict[str, str]:
    """Write the ``CSV_REPORTS`` DataFrames of ``report`` as CSV under ``out_dir``.

    Each report goes to ``<out_dir>/<name>/`` through Spark's writer (``coalesce(1)``, header,
    mode overwrite: only that subdirectory is replaced). That gives exactly one
    ``part-*.csv`` file per report, with rows in ``REPORT_ORDER``. Timestamps are written as
    ``2024-05-01T12:00:00Z`` (ISO 8601, UTC under the session time zone that ``build_session`` sets).
    An empty report gives a file with only the header line.

    Returns {report name: local path of its CSV file}.
    """
    out_dir = os.path.abspath(os.fspath(out_dir))
    written: dict[str, str] = {}
    for name in CSV_REPORTS:
        target = os.path.join(out_dir, name)
        (
            report[name]
            .coalesce(1)
            .sortWithinPartitions(*REPORT_ORDER[name])
            .write.mode("overwrite")
            .option("header", "true")
            .option("timestampFormat", _CSV_TIMESTAMP_FORMAT)
            .csv("file://" + target)
        )
        parts = sorted(glob.glob(os.path.join(glob.escape(target), "part-*.csv")))
        if len(parts) != 1:  # pragma: no cover - Spark contract
            raise RuntimeError(f"expected one CSV part file in {target}, found {len(parts)}")
        written[name] = parts[0]
    return written


# --------------------------------------------------------------------------- printing


def _table_rows(df: "DataFrame", limit: int) -> tuple[list[str], list[list[str]], bool]:
    """Collect at most ``limit`` rows of ``df`` as strings; timestamps as ISO UTC."""
    ts_cols = {f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)}
    # Timestamps leave Spark as epoch ms: pyspark would convert them to naive local-time datetimes.
    view = df.select(
        *[F.unix_millis(F.col(c)).alias(c) if c in ts_cols else F.col(c) for c in df.columns]
    )
    rows = view.limit(limit + 1).collect() if limit > 0 else view.collect()
    more = limit > 0 and len(rows) > limit
    rows = rows[:limit] if more else rows
    out = []
    for row in rows:
        cells = []
        for c in df.columns:
            v = row[c]
            if v is None:
                cells.append("null")
            elif c in ts_cols:
                t = _dt.datetime.fromtimestamp(v / 1000, tz=_dt.timezone.utc)
                cells.append(t.strftime("%Y-%m-%dT%H:%M:%SZ"))
            else:
                cells.append(str(v))
        out.append(cells)
    return list(df.columns), out, more


def _format_table(columns: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    numeric = [all(r[i].lstrip("-").isdigit() for r in rows) and bool(rows) for i in range(len(columns))]

    def fmt(cells: list[str]) -> str:
        return "  ".join(
            cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(cells, widths, numeric)
        ).rstrip()

    lines = [fmt(columns), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def _print_table(title: str, df: "DataFrame", max_rows: int, file) -> None:
    columns, rows, more = _table_rows(df, max_rows)
    print(title, file=file)
    print(_format_table(columns, rows), file=file)
    if more:
        print(f"... more rows not shown (first {max_rows}); see the CSV file", file=file)
    print(file=file)


def _uri_to_path(uri: str) -> str:
    """``file:/a/%25b`` (Spark's file URI) -> ``/a/%b``."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif uri.startswith("file:"):
        uri = uri[len("file:"):]
    return unquote(uri)


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rmqfs report",
        description=(
            "Spark report over rmqfs mounts: messages per topic and queue (count, bytes, "
            "min/max queueOffset) and messages per minute of storeTimestamp per topic. "
            "Reads MNT/topics/*/messages.jsonl only."
        ),
    )
    p.add_argument("mounts", nargs="+", metavar="MNT", help="rmqfs mount point (has a topics/ directory)")
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help="directory for the CSV reports, written to DIR/per_queue/ and DIR/per_minute/ (default: ./report)",
    )
    p.add_argument("--master", default=None, metavar="URL", help="Spark master URL (default: local[*])")
    p.add_argument(
        "--max-rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"rows printed per table, 0 = all (default: {DEFAULT_MAX_ROWS}); the CSV files hold all rows",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rmqfs report MNT [MNT...] [--out DIR] [--master URL] [--max-rows N]``.

    ``argv``: the arguments after the ``report`` subcommand (default ``sys.argv[1:]``).
    The function prints the two tables on stdout, writes the CSV files (see ``write_report``) and
    returns the exit code:

    * 0: report written. With no messages at all, it prints "no messages", and the CSV files
      hold only their header lines. Malformed lines are skipped and listed on stderr.
    * 1: a MNT has no ``topics/`` directory, pyspark is missing, or Spark cannot start.
    * 2: bad command line (argparse).

    A Spark session that is already active (such as a test fixture) is reused and left running.
    A session that ``main`` starts itself is stopped at the end.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help or a usage error; argparse already printed it
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)

    mounts: list[str] = []
    for m in args.mounts:
        path = os.path.abspath(m)
        if not os.path.isdir(os.path.join(path, "topics")):
            print(
                f"rmqfs report: {m}: no topics/ directory (is this an rmqfs mount?)",
                file=sys.stderr,
            )
            return 1
        if os.path.realpath(path) not in {os.path.realpath(x) for x in mounts}:
            mounts.append(path)
    paths = [f for m in mounts for f in topic_message_files(m)]

    if _PYSPARK_IMPORT_ERROR is not None:
        print("rmqfs report: pyspark is not installed: pip install 'rmqfs[spark]'", file=sys.stderr)
        return 1
    owns_session = SparkSession.getActiveSession() is None
    try:
        spark = build_session(args.master)
    except Exception as exc:  # noqa: BLE001 - report any start-up failure clearly
        print(
            f"rmqfs report: cannot start Spark (Java 17+ and JAVA_HOME needed): {exc}",
            file=sys.stderr,
        )
        return 1
    try:
        report = compute_report(spark, paths)
        out = sys.stdout
        has_messages = bool(report["per_queue"].limit(1).collect())
        if has_messages:
            _print_table("Messages per topic and queue", report["per_queue"], args.max_rows, out)
            _print_table(
                "Messages per minute of storeTimestamp (UTC) per topic",
                report["per_minute"],
                args.max_rows,
                out,
            )
        else:
            print(f"no messages in {', '.join(mounts)} (read {len(paths)} topic file(s))", file=out)
        for row in report["malformed"].collect():
            print(
                f"rmqfs report: warning: skipped {row['lines']} malformed line(s) in {_uri_to_path(row['file'])}",
                file=sys.stderr,
            )
        written = write_report(report, args.out)
        for name, path in written.items():
            print(f"wrote {name}: {path}", file=out)
        out.flush()
    finally:
        if owns_session:
            spark.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
