"""The Parquet ``view/`` of a real mount, read by the tools users read it with, with no schema
argument: Spark (``spark.read.parquet``), DuckDB (hive partitioning over
``MNT/view/**/*.parquet``), pyarrow datasets, ``pandas.read_parquet`` and Polars
(``scan_parquet``/``read_parquet`` of the directory, which refuses a directory holding anything
but Parquet). Each must give the engine's own decode of the store row for row
(``test_view.engine_rows``), the partition columns ``topic`` (unescaped from ``%25...``) and
``queue`` from the path; ``queue`` is INT (``MNT/view.ddl``), which Spark, pyarrow and pandas
infer and DuckDB and Polars give when asked (they infer a 64-bit integer from the name).

One store, one mount for the module: escaped topic names, binary/empty/compressed bodies,
non-ASCII properties, keys, and a queue of more than one part (100,000 offsets per part).
"""

from __future__ import annotations

import pytest

from conftest import Mount, fuse
from rmqfs.engine.format.message import COMPRESSED_FLAG, COMPRESSION_ZLIB, compress_body
from rmqfs.engine.store import Message, MessageStore
from stores import put_internal
from test_view import DLQ, RETRY, engine_rows, fill

BULK = 100_005  # messages in Bulk/0: two parts, the second of 5


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    """(mount, engine rows) of one store shared by the module's tests."""
    tmp = tmp_path_factory.mktemp("readers")
    store_dir = tmp / "store"
    with MessageStore(str(store_dir)) as s:
        for t in ("TopicA", RETRY, DLQ, "Bulk"):
            s.create_topic(t, queue_nums=2)
        fill(s, 30)
        fill(s, 7, queue_id=1)
        put_internal(
            s,
            [
                Message(
                    RETRY,
                    bytes(range(256)),
                    tags="TagR",
                    keys="order-1 vip",
                    properties={"RETRY_TOPIC": "TopicA", "note": "non-ASCII é ✓"},
                ),
                Message(DLQ, b"\x00\xff\n\r\"{}", queue_id=1),
                Message(DLQ, b"", queue_id=1),
                Message(
                    "TopicA",
                    compress_body(b"zipped " * 50, COMPRESSION_ZLIB),
                    queue_id=1,
                    sys_flag=COMPRESSED_FLAG | COMPRESSION_ZLIB,
                ),
            ],
        )  # broker-written records (RETRY_TOPIC, empty body) on purpose
        for start in range(0, BULK, 20_000):
            s.put_messages(
                [
                    Message("Bulk", b"line %d" % i, queue_id=0, tags=f"L{i % 5}", keys=[f"b{i}"])
                    for i in range(start, min(BULK, start + 20_000))
                ]
            )
    want = engine_rows(str(store_dir))
    m = Mount(store_dir, tmp / "mnt")
    try:
        yield m, want
    finally:
        m.umount()
        m.cleanup()


def normalize(row: dict) -> dict:
    """A row as plain Python: body bytes, properties a dict, queue an int."""
    row = dict(row)
    if row.get("body") is not None:
        row["body"] = bytes(row["body"])
    props = row.get("properties")
    if props is not None and not isinstance(props, dict):
        row["properties"] = dict(props)  # Arrow/pandas maps come as (key, value) pairs
    if row.get("keys") is not None:
        row["keys"] = list(row["keys"])
    row["queue"] = int(row["queue"])
    row["topic"] = str(row["topic"])
    return row


def by_key(rows) -> dict:
    out = {}
    for r in rows:
        r = normalize(r)
        key = (r["topic"], r["queue"], r["queueOffset"])
        assert key not in out, f"{key} read twice"
        out[key] = r
    return out


def assert_same_rows(got: dict, want: dict):
    assert len(got) == len(want) and set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        for col, value in w.items():
            assert g[col] == value, (key, col, g[col], value)


def test_view_is_parquet_with_the_partition_columns_in_the_path(mounted):
    from rmqfs.engine.read.schema import DATASOURCE_DDL

    m, _ = mounted
    view = m.mnt / "view"
    parts = sorted(p.relative_to(view).as_posix() for p in view.rglob("*.parquet"))
    assert "topic=Bulk/queue=0/part-00000000000000000000.parquet" in parts
    # a part that holds only some of its range: named by the offsets it holds
    assert any(p.startswith("topic=Bulk/queue=0/part-00000000000000100000-") for p in parts)
    assert any(
        p.startswith("topic=%25RETRY%25CafeGroup/queue=0/part-0000000000000000") for p in parts
    )
    # nothing but Parquet parts (Polars refuses a directory with other files, hidden ones too)
    assert not [p for p in view.rglob("*") if p.is_file() and p.suffix != ".parquet"]
    assert (m.mnt / "view.ddl").read_text() == DATASOURCE_DDL + "\n"  # beside view/
    assert "queue INT" in DATASOURCE_DDL.split(", ")


@pytest.mark.spark
@fuse
def test_spark_read_parquet_of_the_mount(spark, mounted):
    from rmqfs.engine.read.schema import DATASOURCE_DDL

    m, want = mounted
    df = spark.read.parquet(f"file://{m.mnt}/view")  # no schema argument
    assert (
        df.schema.simpleString() == spark.createDataFrame([], DATASOURCE_DDL).schema.simpleString()
    )
    small = {k: v for k, v in want.items() if k[0] != "Bulk"}
    assert_same_rows(by_key(r.asDict() for r in df.where("topic != 'Bulk'").collect()), small)
    # the large queue: aggregates against the engine's decode, and partition pruning
    bulk = [v for k, v in want.items() if k[0] == "Bulk"]
    agg = (
        df.where("topic = 'Bulk'")
        .selectExpr(
            "count(*)",
            "sum(length(body))",
            "sum(queueOffset)",
            "max(storeTimestamp)",
            "count(distinct msgId)",
        )
        .first()
    )
    assert tuple(agg) == (
        BULK,
        sum(len(r["body"]) for r in bulk),
        sum(r["queueOffset"] for r in bulk),
        max(r["storeTimestamp"] for r in bulk),
        BULK,
    )
    assert df.where(f"topic = '{RETRY}'").count() == 1
    assert df.where("topic = 'TopicA' and queue = 1").count() == 8


@fuse
def test_duckdb_hive_partitioned_glob(mounted):
    duckdb = pytest.importorskip("duckdb")
    m, want = mounted
    glob = f"read_parquet('{m.mnt}/view/**/*.parquet', hive_partitioning = true"
    rel = duckdb.sql(f"select * from {glob}, hive_types = {{'queue': INTEGER}})")
    table = rel.arrow()
    if hasattr(table, "read_all"):  # duckdb >= 1.4 returns a RecordBatchReader
        table = table.read_all()
    # DuckDB decodes the %25 escapes of the directory names, as Spark and pyarrow do
    assert_same_rows(by_key(table.to_pylist()), want)
    assert table.schema.field("queue").type == "int32"  # INT, as asked (README)
    inferred = duckdb.sql(f"select typeof(queue), typeof(topic) from {glob}) limit 1")
    assert inferred.fetchall() == [("BIGINT", "VARCHAR")]  # what it infers: said in README
    # the plain glob of the issue works too
    n = duckdb.sql(f"select count(*) from '{m.mnt}/view/**/*.parquet'").fetchall()[0][0]
    assert n == len(want)


@fuse
def test_pyarrow_dataset_and_pandas(mounted):
    import pandas as pd
    import pyarrow.dataset as ds

    m, want = mounted
    view = str(m.mnt / "view")
    dataset = ds.dataset(view, format="parquet", partitioning="hive")
    assert dataset.schema.field("body").type == "binary"
    assert dataset.schema.field("queue").type == "int32"  # INT
    assert_same_rows(by_key(dataset.to_table().to_pylist()), want)
    pdf = pd.read_parquet(view)
    assert_same_rows(by_key(pdf.to_dict("records")), want)
    assert pdf["queue"].cat.categories.dtype == "int32"  # a categorical of INT


@fuse
def test_polars_reads_the_directory(mounted):
    pl = pytest.importorskip("polars")
    m, want = mounted
    view = f"{m.mnt}/view"
    df = pl.scan_parquet(view).collect()  # the directory itself, no glob, no schema
    assert df.schema["queue"] == pl.Int64 and df.schema["body"] == pl.Binary  # as inferred
    assert_same_rows(by_key(df.to_dicts()), want)
    typed = pl.read_parquet(view, hive_schema={"topic": pl.String, "queue": pl.Int32})
    assert typed.schema["queue"] == pl.Int32  # INT, as asked (README)
    assert_same_rows(by_key(typed.to_dicts()), want)
