"""One ``rocketmq`` DataFrame, many queries: each query gets its own rows, whatever ran before.

Spark 4's ``PythonDataSourceV2`` keeps the read planned during filter pushdown (partitions and
reader) on the provider, which every query of a DataFrame shares; a later query with no
pushable filter reused it (``d.count()`` after ``d.where("queue = 0").count()`` gave the
filtered count). Every query here is compared with the engine's own listing of the store.
"""

from __future__ import annotations

import pytest

from rmqfs.engine.store import Message, MessageStore

pytest.importorskip("pyspark")

from rmqfs.pipeline import datasource as D

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(store dir, engine rows {(topic, queue, queueOffset): (tags, storeTimestamp)})."""
    root = tmp_path_factory.mktemp("queries") / "store"
    with MessageStore(str(root)) as s:
        s.create_topic("A", queue_nums=4)
        s.create_topic("B", queue_nums=2)
        s.create_topic("%RETRY%g", queue_nums=1)
        for q in range(4):
            s.put_messages(
                [Message("A", b"a%d" % i, queue_id=q, tags=f"T{i % 3}") for i in range(300)]
            )
        for q in range(2):
            s.put_messages([Message("B", b"b%d" % i, queue_id=q, tags="T1") for i in range(50)])
        s.put_messages([Message("%RETRY%g", b"r%d" % i) for i in range(10)])
        rows = {}
        for t in s.topic_names():
            for q in s.queue_ids(t):
                for off, rec in s.iter_queue(t, q):
                    rows[(t, q, off)] = (rec.tags, rec.store_timestamp)
    return str(root), rows


def _queries(rows):
    """(SQL condition or None, the rows it selects) for the sequences below."""
    stamps = sorted(ts for _, ts in rows.values())
    mid = stamps[len(stamps) // 2]
    return [
        (None, lambda k, v: True),
        ("queue = 0", lambda k, v: k[1] == 0),
        ("queueId = 1", lambda k, v: k[1] == 1),
        ("topic = 'B'", lambda k, v: k[0] == "B"),
        ("topic = 'A' and queue in (2, 3)", lambda k, v: k[0] == "A" and k[1] in (2, 3)),
        ("tags = 'T1'", lambda k, v: v[0] == "T1"),
        ("queueOffset >= 100 and queueOffset < 150", lambda k, v: 100 <= k[2] < 150),
        (f"storeTimestamp >= {mid}", lambda k, v: v[1] >= mid),
        ("length(body) > 2", lambda k, v: len(f"{k[2]}") > 1),  # not pushable
    ]


def _expect(rows, pred) -> set:
    return {k for k, v in rows.items() if pred(k, v)}


def _sequences(rows):
    """Each filtered query followed by an unfiltered one, forwards and backwards, and the
    filtered ones back to back."""
    qs = _queries(rows)
    unfiltered, filtered = qs[0], qs[1:]
    forwards = [x for f in filtered for x in (f, unfiltered)]
    return [[unfiltered] + forwards, [unfiltered] + forwards[::-1], filtered + filtered[::-1]]


def test_batch_queries_on_one_dataframe_do_not_leak_into_each_other(spark, store):
    root, rows = store
    D.register(spark)
    for sequence in _sequences(rows):
        d = spark.read.format("rocketmq").load(root)  # one DataFrame for the whole sequence
        for cond, pred in sequence:
            q = d if cond is None else d.where(cond)
            want = _expect(rows, pred)
            assert q.count() == len(want), (cond, [c for c, _ in sequence])
            got = {
                (r.topic, r.queue, r.queueOffset)
                for r in q.select("topic", "queue", "queueOffset").collect()
            }
            assert got == want, cond


def test_streaming_queries_on_one_dataframe_do_not_leak_into_each_other(spark, store, tmp_path):
    root, rows = store
    D.register(spark)
    sd = spark.readStream.format("rocketmq").option("startingOffsets", "earliest").load(root)
    qs = _queries(rows)
    sequence = [qs[0], qs[1], qs[0], qs[5], qs[3], qs[0]]
    for i, (cond, pred) in enumerate(sequence):
        s = sd if cond is None else sd.where(cond)
        name = f"rmq_stream_{i}"
        query = (
            s.select("topic", "queue", "queueOffset")
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        got = [(r.topic, r.queue, r.queueOffset) for r in spark.table(name).collect()]
        assert len(got) == len(set(got))
        assert set(got) == _expect(rows, pred), cond


def test_a_growing_store_answers_every_query_of_a_dataframe_from_now(spark, tmp_path):
    """With ``spark.sql.python.filterPushdown.enabled`` on (the report's session set it), a
    Spark whose scan builder shares the planned read (4.0 to 4.3) answered ``count()`` with
    the read planned for the last filtered query, even with a reader that pushes nothing: over
    a store that grew, count() said 20 before and 10 after two filtered counts of 10 each.
    ``register()`` turns the setting off there (and the report's session no longer sets it);
    every query of the DataFrame then answers from one moment."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    D.register(spark)
    if not D.pushdown_is_per_scan(spark):
        assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "false"
    root = str(tmp_path / "s")
    with MessageStore(root) as s:
        s.create_topic("A", 2)
        s.put_messages([Message("A", b"a%d" % i) for i in range(10)])
    df = spark.read.format("rocketmq").load(root)
    assert (df.count(), df.where("queue = 0").count()) == (10, 5)
    with MessageStore(root) as s:
        s.put_messages([Message("A", b"b%d" % i) for i in range(10)])
    total, q0, q1 = df.count(), df.where("queue = 0").count(), df.where("queue = 1").count()
    assert total == q0 + q1 == df.count()  # one moment for every query of the DataFrame
