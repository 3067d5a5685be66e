"""view/: the Spark-facing tree (mount contract sections 2 and 4).

The layout rules (fixed part ranges, exact sizes, stable mtimes, escaping) are checked on the
node tree directly, with parts of 10 messages; Spark reads a real mount and is compared, row for
row, with the engine's own decode of the same store, and with the ``rocketmq`` data source.
"""

from __future__ import annotations

import io
import os
import re

import pyarrow.parquet as pq
import pytest

from conftest import fuse
from rmqfs.engine.format.message import COMPRESSED_FLAG, COMPRESSION_ZLIB, compress_body
from rmqfs.engine.read.schema import DATASOURCE_DDL, part_schema
from rmqfs.engine.read.viewnames import escape_partition_value, unescape_partition_value
from rmqfs.engine.store import Message, MessageStore
from rmqfs.fusefs.base import Context
from rmqfs.fusefs.views import ViewCache
from rmqfs.fusefs.viewtree import ViewRootDir, view_ddl_file
from stores import put_internal

RETRY, DLQ = "%RETRY%CafeGroup", "%DLQ%CafeGroup"


def fill(store: MessageStore, n: int, topic="TopicA", queue_id=0, start=0):
    store.put_messages(
        [
            Message(
                topic,
                f"m{start + i}".encode(),
                queue_id=queue_id,
                tags="T%d" % (i % 3),
                keys=[f"k{start + i}"],
            )
            for i in range(n)
        ]
    )


def test_partition_escaping_round_trips_like_spark():
    for topic in ("TopicA", RETRY, DLQ, "a=b/c:d", "%25", "x{y}[z]^#?*'\"\\"):
        name = escape_partition_value(topic)
        assert "/" not in name and "=" not in name
        assert unescape_partition_value(name) == topic
    # What Spark's ExternalCatalogUtils.escapePathName gives.
    assert escape_partition_value(RETRY) == "%25RETRY%25CafeGroup"
    assert escape_partition_value("a:b") == "a%3Ab"
    assert escape_partition_value("x|y-z_1") == "x|y-z_1"


def test_parts_cover_fixed_ranges_and_never_change_once_full(tmp_path, small_config):
    store = MessageStore(str(tmp_path / "store"), small_config)
    try:
        for t in ("TopicA", RETRY):
            store.create_topic(t, queue_nums=2)
        ctx = Context(store, ViewCache(store, str(tmp_path / "cache")), False, part_messages=10)
        root = ViewRootDir(ctx, "/view")
        assert root.list() == []  # nothing while empty
        fill(store, 25)
        fill(store, 3, topic=RETRY, queue_id=1)
        assert root.list() == ["topic=%25RETRY%25CafeGroup", "topic=TopicA"]  # only Parquet
        assert root.child("_schema.ddl") is None
        assert view_ddl_file(ctx, "/view.ddl").content() == (DATASOURCE_DDL + "\n").encode()
        assert root.child("topic=%RETRY%CafeGroup") is None  # only the escaped name exists
        assert root.child("bin") is None
        topic = root.child("topic=TopicA")
        assert topic.list() == ["queue=0"]  # queue 1 has no message
        assert topic.child("queue=00") is None
        qdir = topic.child("queue=0")
        names = qdir.list()
        # whole parts by their first offset; the growing last one by the offsets it holds
        assert names == [f"part-{0:020d}.parquet", f"part-{10:020d}.parquet"] + [
            f"part-{20:020d}-{25:020d}.parquet"
        ]

        def snapshot():
            out = {}
            for name in qdir.list():
                node = qdir.child(name)
                st = node.stat()
                h = node.open(os.O_RDONLY)
                data = h.read(0, st.size + 100)
                h.release()
                out[name] = (st, data)
            return out

        def rows(data):
            return pq.read_table(io.BytesIO(data)).to_pylist()

        before = snapshot()
        got = [r for _, (_, d) in sorted(before.items()) for r in rows(d)]
        assert [x["queueOffset"] for x in got] == list(range(25))
        for name, (st, data) in before.items():
            assert st.size == len(data) > 0 and data[:4] == b"PAR1" == data[-4:]
            assert pq.read_schema(io.BytesIO(data)) == part_schema()  # no topic/queue inside
            first = int(re.search(r"\d{20}", name).group())
            offs = [x["queueOffset"] for x in rows(data)]
            assert offs == list(range(first, min(first + 10, 25)))
            last = store.get_message("TopicA", 0, offs[-1])
            assert st.mtime_ns == last.store_timestamp * 1_000_000
        assert not any(st.live for st, _ in before.values())  # no name's bytes ever change

        fill(store, 12, start=25)  # part 20 fills up, part 30 starts
        after = snapshot()
        whole = f"part-{20:020d}.parquet"
        assert list(after) == names[:2] + [whole, f"part-{30:020d}-{37:020d}.parquet"]
        for name in names[:2]:
            assert after[name] == before[name]  # full parts: same bytes, size and mtime
        assert after[whole][0].size > before[names[2]][0].size
        assert not after[whole][0].live
        # the name a reader listed before the queue grew still reads the bytes it listed
        node = qdir.child(names[2])
        h = node.open(os.O_RDONLY)
        assert (node.stat(), h.read(0, 1 << 20)) == before[names[2]]
        h.release()
        assert qdir.child(f"part-{20:020d}-{38:020d}.parquet") is None  # (past the end)
        assert qdir.child(f"part-{20:020d}-{30:020d}.parquet") is None  # (a whole part's)
        assert qdir.child(f"part-{19:020d}-{21:020d}.parquet") is None  # (across two)
        # offsets no listing named are no name: a reader cannot make the daemon render them
        # (a review: 820 never-listed names looked up, 821 renders)
        assert qdir.child(f"part-{30:020d}-{33:020d}.parquet") is None
        assert qdir.child(f"part-{31:020d}-{37:020d}.parquet") is None  # (not its start)
        assert qdir.child(f"part-{30:020d}-{37:020d}.parquet") is not None  # (listed)
        # body is BINARY, decompressed
        assert rows(after[names[0]][1])[0]["body"] == b"m0"

        # evicted parts render again to the same bytes; a remount (new cache) too
        parts = ctx.views.parts
        assert parts.used_bytes > 0
        while parts.evict_one(False):
            pass
        assert parts.used_bytes == 0
        assert qdir.child(names[0]).stat_cached() == after[names[0]][0]  # size kept: no render
        assert snapshot() == after
        ctx2 = Context(store, ViewCache(store, str(tmp_path / "cache2")), False, part_messages=10)
        q2 = ViewRootDir(ctx2, "/view").child("topic=TopicA").child("queue=0")
        for name, (st, data) in after.items():
            node = q2.child(name)
            h = node.open(os.O_RDONLY)
            assert (node.stat(), h.read(0, st.size + 1)) == (st, data)
            h.release()
        ctx2.views.close()
        fill(store, 1, start=37)  # the name a listing gave before the queue grew still reads
        assert qdir.child(f"part-{30:020d}-{37:020d}.parquet") is not None
        assert qdir.child(f"part-{30:020d}-{38:020d}.parquet") is not None  # (the current)
        ctx.views.close()
    finally:
        store.close()


# ----------------------------------------------------------------------------------------------
# Spark over a real mount


def engine_rows(store_dir: str) -> dict:
    """{(topic, queueId, queueOffset): row dict} from the engine's own decode."""
    out = {}
    with MessageStore(store_dir, read_only=True) as s:
        for topic in s.topic_names():
            for q in s.queue_ids(topic):
                for qoff, rec in s.iter_queue(topic, q):
                    out[(topic, q, qoff)] = {
                        "topic": rec.topic,
                        "queue": q,
                        "queueId": rec.queue_id,
                        "queueOffset": qoff,
                        "commitLogOffset": rec.commitlog_offset,
                        "storeSize": rec.store_size,
                        "msgId": rec.msg_id,
                        "tags": rec.tags,
                        "keys": rec.keys,
                        "bornTimestamp": rec.born_timestamp,
                        "storeTimestamp": rec.store_timestamp,
                        "sysFlag": rec.sys_flag,
                        "flag": rec.flag,
                        "bodyCRC": rec.body_crc,
                        "reconsumeTimes": rec.reconsume_times,
                        "preparedTransactionOffset": rec.prepared_transaction_offset,
                        "properties": rec.properties,
                        "body": rec.plain_body,
                    }
    return out


def spark_rows(df) -> dict:
    out = {}
    for r in df.collect():
        d = r.asDict()
        d["body"] = bytes(d["body"])
        key = (d["topic"], d["queue"], d["queueOffset"])
        assert key not in out, f"{key} read twice"
        out[key] = d
    return out


def assert_same_rows(got: dict, want: dict):
    assert set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        for col, value in w.items():
            assert g[col] == value, (key, col, g[col], value)


@pytest.mark.spark
@fuse
def test_spark_reads_the_view_row_for_row_and_the_data_source_agrees(spark, mount_store, tmp_path):
    from rmqfs.engine.read.schema import DATASOURCE_DDL
    from rmqfs.pipeline.datasource import register

    store_dir = tmp_path / "store"
    with MessageStore(str(store_dir)) as s:
        for t in ("TopicA", RETRY, DLQ):
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
        )  # RETRY_TOPIC: written by the broker itself
    m = mount_store(store_dir)
    view = m.mnt / "view"
    assert sorted(os.listdir(view)) == [
        "topic=%25DLQ%25CafeGroup",
        "topic=%25RETRY%25CafeGroup",
        "topic=TopicA",
    ]
    ddl = (m.mnt / "view.ddl").read_text().strip()
    assert ddl == DATASOURCE_DDL
    df = spark.read.parquet(f"file://{view}")  # no schema argument
    assert (
        df.schema.simpleString() == spark.createDataFrame([], DATASOURCE_DDL).schema.simpleString()
    )  # queue INT, topic STRING from the path, body BINARY
    got = spark_rows(df)
    want = engine_rows(str(store_dir))
    assert len(want) == 41
    assert_same_rows(got, want)
    assert got[("TopicA", 1, 7)]["body"] == b"zipped " * 50  # shown decompressed
    # partition pruning on the escaped directory
    assert df.where(f"topic = '{RETRY}'").count() == 1

    # The data source reads the store under the mount (no lock) and gives the same rows.
    register(spark)
    ds = spark.read.format("rocketmq").load(str(store_dir))
    assert ds.schema == df.schema
    assert_same_rows(spark_rows(ds), want)
    m.umount()
