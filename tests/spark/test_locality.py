"""pipeline.locality on the local session: rows, the checks, the preferred hosts kept through
``mapInArrow``, Spark Connect refused. The cluster of hosts that cannot see each other's
stores is tests/spark/test_locality_cluster.py (marker long)."""

import os
import shutil
from dataclasses import replace

import pytest

from rmqfs.engine.read.schema import DATASOURCE_DDL, split_ddl
from rmqfs.engine.store import Message, MessageStore
from rmqfs.pipeline.locality import (
    BrokerStore,
    StoreLocalityError,
    executor_hosts,
    plan_broker_stores,
    read_broker_stores,
    read_plan,
)
from stores import fleet_rows, fleet_store, flip_body_byte, small


def spark_rows(df) -> list[tuple]:
    return sorted(
        (r.brokerName, r.topic, r.queue, r.queueOffset, bytes(r.body))
        for r in df.select("brokerName", "topic", "queue", "queueOffset", "body").collect()
    )


@pytest.fixture
def two_stores(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    fleet_store(a, "A", {"T": (3, 500), "U": (1, 40)})
    fleet_store(b, "B", {"T": (2, 300), "V": (2, 90)})
    return a, b


@pytest.mark.spark
def test_reads_every_store_with_its_broker_name(spark, two_stores):
    a, b = two_stores
    host = sorted(executor_hosts(spark.sparkContext))[0]
    df = read_broker_stores(
        spark,
        [("broker-a", host, str(a)), ("broker-b", host, str(b))],
        max_records_per_partition=100,
    )
    assert df.columns == [n for n, _ in split_ddl(DATASOURCE_DDL)] + ["brokerName"]
    assert spark_rows(df) == sorted(fleet_rows("broker-a", a) + fleet_rows("broker-b", b))
    # cut at multiples of 100: T's 167 (a) and 150 (b) a queue in 2, U's 40 and V's 45 in 1
    assert df.rdd.getNumPartitions() == 3 * 2 + 1 + 2 * 2 + 2 * 1


@pytest.mark.spark
def test_topics_and_columns_narrow_the_read(spark, two_stores):
    _, b = two_stores
    host = sorted(executor_hosts(spark.sparkContext))[0]
    only = read_broker_stores(
        spark, [("broker-b", host, str(b))], topics=["V"], columns=["brokerName", "queueOffset"]
    )
    assert only.columns == ["brokerName", "queueOffset"]
    assert only.count() == 90


@pytest.mark.spark
def test_the_partitions_keep_their_hosts_through_mapinarrow(spark, two_stores):
    """DAGScheduler's preferred hosts of the DataFrame's partitions are the planned ones."""
    a, b = two_stores
    host = sorted(executor_hosts(spark.sparkContext))[0]
    plan = plan_broker_stores(spark, [("broker-a", host, str(a)), ("broker-b", host, str(b))])
    moved = replace(
        plan,
        parts=tuple(
            replace(p, store=replace(p.store, host=f"h-{p.store.name}-{i}"))
            for i, p in enumerate(plan.parts)
        ),
    )
    df = read_plan(spark, moved)
    rdd = df._jdf.queryExecution().toRdd()
    sc = spark.sparkContext._jsc.sc()
    conv = spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters
    got = [
        [loc.host() for loc in conv.asJava(sc.getPreferredLocs(rdd, i))]
        for i in range(rdd.getNumPartitions())
    ]
    assert got == [[p.store.host] for p in moved.parts]


@pytest.mark.spark
def test_a_host_with_no_executor_is_refused_naming_the_hosts(spark, two_stores):
    a, _ = two_stores
    with pytest.raises(StoreLocalityError, match=r"no executor on host\(s\) 'nowhere'"):
        read_broker_stores(spark, [("broker-a", "nowhere", str(a))], executor_wait_s=0)


@pytest.mark.spark
def test_another_store_at_the_path_is_never_read(spark, two_stores, tmp_path):
    """A plan made, then the store at the path replaced: the task refuses, naming the store,
    its host and both identities."""
    a, b = two_stores
    host = sorted(executor_hosts(spark.sparkContext))[0]
    plan = plan_broker_stores(spark, [("broker-a", host, str(a))])
    os.rename(a, tmp_path / "a-moved")
    shutil.copytree(b, a)
    with pytest.raises(Exception, match=r"store 'broker-a' .* is not the one planned") as e:
        read_plan(spark, plan).count()
    assert "StoreLocalityError" in str(e.value)


@pytest.mark.spark
def test_a_part_run_off_its_host_refuses_naming_both_hosts(spark, two_stores):
    """A partition whose host has no executor runs elsewhere after spark.locality.wait,
    where it refuses rather than read whatever is at the path there."""
    a, _ = two_stores
    host = sorted(executor_hosts(spark.sparkContext))[0]
    plan = plan_broker_stores(spark, [("broker-a", host, str(a))], topics=["U"])
    lost = replace(
        plan, parts=tuple(replace(p, store=replace(p.store, host="h9")) for p in plan.parts)
    )
    with pytest.raises(
        Exception,
        match=r"StoreLocalityError: rocketmq: store 'broker-a' \(.* on host 'h9'\) was planned "
        r"for host 'h9' but the task ran on host '",
    ):
        read_plan(spark, lost).count()


@pytest.mark.spark
def test_a_store_replaced_at_the_path_is_read_anew(spark, two_stores, tmp_path):
    """A worker that read the store at a path before it was replaced reads the new one, not
    the files it still has open (Python workers are reused across jobs)."""
    a, b = two_stores
    host = sorted(executor_hosts(spark.sparkContext))[0]
    stores = [("x", host, str(a))]
    assert spark_rows(read_broker_stores(spark, stores)) == fleet_rows("x", a)
    os.rename(a, tmp_path / "a-old")
    # a task's readers end with it: no Python worker keeps the store's files open or mapped
    assert _holders(tmp_path / "a-old") == {}
    shutil.copytree(b, a)
    assert spark_rows(read_broker_stores(spark, stores)) == fleet_rows("x", a)


def _holders(path) -> dict[int, str]:
    """Processes other than this one with a file under ``path`` open or mapped: pid -> one."""
    out: dict[int, str] = {}
    prefix = str(path) + "/"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            names = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            with open(f"/proc/{pid}/maps") as f:
                names += [line.split(None, 5)[-1].strip() for line in f]
        except OSError:
            continue
        hit = [n for n in names if n.startswith(prefix)]
        if hit:
            out[int(pid)] = hit[0]
    return out


@pytest.mark.spark
def test_a_store_of_another_broker_is_refused_when_planned(spark, two_stores):
    _, b = two_stores
    (b / "brokerIdentity").write_text("DefaultCluster#broker-b#0")
    host = sorted(executor_hosts(spark.sparkContext))[0]
    with pytest.raises(
        StoreLocalityError,
        match=r"store 'broker-a' \(.* on host .*\): the store there on host .* is broker "
        r"'broker-b'",
    ):
        read_broker_stores(spark, [("broker-a", host, str(b))])
    # its own name reads it
    df = read_broker_stores(spark, [("broker-b", host, str(b))])
    assert df.count() == 390


@pytest.mark.spark
def test_a_damaged_record_fails_the_read_as_the_data_source_does(spark, tmp_path):
    root = tmp_path / "s"
    with MessageStore(str(root), small()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", f"m{i}".encode()) for i in range(20)])
    flip_body_byte(root, "T", 0, 5)
    host = sorted(executor_hosts(spark.sparkContext))[0]
    df = read_broker_stores(spark, [BrokerStore("b", host, str(root))])
    with pytest.raises(Exception, match=r"DataLossError: rocketmq: T/0: damaged record"):
        df.count()


def test_spark_connect_has_no_sparkcontext_and_is_refused():
    """A session without a SparkContext (Spark Connect raises on ``sparkContext``)."""

    class ConnectLike:
        @property
        def sparkContext(self):
            raise NotImplementedError("[NOT_IMPLEMENTED] sparkContext() is not implemented.")

    with pytest.raises(StoreLocalityError, match="Spark Connect"):
        read_broker_stores(ConnectLike(), [("b", "h", "/nowhere")])


@pytest.mark.spark
def test_bad_arguments_are_refused_before_any_job(spark):
    with pytest.raises(ValueError, match="no column 'nope'"):
        read_broker_stores(object(), [("b", "h", "/x")], columns=["nope"])
    with pytest.raises(ValueError, match="broker named twice: b"):
        read_broker_stores(spark, [("b", "h", "/x"), ("b", "h2", "/x")])
    with pytest.raises(ValueError, match="one store named for two brokers: /x on h"):
        read_broker_stores(spark, [("a", "h", "/x"), ("b", "h", "/x/")])
    with pytest.raises(ValueError, match="no store to read"):
        read_broker_stores(spark, [])
