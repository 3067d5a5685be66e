"""``rocketmq`` over several stores (issue 23, item 2): ``load([...])`` and globs, the
``brokerName`` column (on those loads only), and whole stores pruned by a pushed ``brokerName``
filter."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from rmqfs.engine.store import Message, MessageStore

pytest.importorskip("pyspark")

from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, In

from conftest import run_available_now
from rmqfs.engine.read.schema import DATASOURCE_DDL
from rmqfs.pipeline import datasource as D

pytestmark = pytest.mark.spark

#: store (relative to the fleet) -> (broker name, rule that names it, {topic: messages per queue})
FLEET = {
    "a/store": ("broker-a", D.RULE_IDENTITY, {"T": 7}),
    "b/store": ("broker-b", D.RULE_IDENTITY, {"T": 5, "U": 3}),
    "broker-c/store": ("broker-c", D.RULE_DIRECTORY, {"U": 4}),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A fleet directory of three stores (topic T, queues 0 and 1, in two of them) and one
    directory that is not a store."""
    root = tmp_path_factory.mktemp("fleet")
    for rel, (broker, _, topics) in FLEET.items():
        path = root / rel
        with MessageStore(str(path)) as s:
            for topic, n in topics.items():
                s.create_topic(topic, queue_nums=2)
                for q in range(2):
                    s.put_messages(
                        [
                            Message(topic, f"{broker}/{topic}/{q}/{i}".encode(), queue_id=q)
                            for i in range(n + q)
                        ]
                    )
        if rel == "a/store":  # 5.x BrokerIdentity as properties
            (path / "brokerIdentity").write_text(
                f"brokerClusterName=DefaultCluster\nbrokerName={broker}\nbrokerId=0\n"
            )
        if rel == "b/store":  # cluster#broker#id
            (path / "brokerIdentity").write_text(f"DefaultCluster#{broker}#0")
    (root / "junk" / "store").mkdir(parents=True)  # matched by the glob, not a store
    (root / "junk" / "store" / "notes.txt").write_text("not a store")
    return root


def test_glob_names_each_store_and_skips_what_is_not_one(fleet, caplog):
    with caplog.at_level(logging.WARNING, logger=D.__name__):
        stores = D.expand_stores([f"{fleet}/*/store"])
    assert [(r.path, r.broker, r.rule) for r in stores] == [
        (str(fleet / rel), broker, rule) for rel, (broker, rule, _) in sorted(FLEET.items())
    ]
    assert f"{fleet}/junk/store" in caplog.text and "not a RocketMQ store" in caplog.text
    with pytest.raises(ValueError, match="matches nothing"):
        D.expand_stores([f"{fleet}/*/nothing"])
    with pytest.raises(ValueError, match="matches no RocketMQ store"):
        D.expand_stores([f"{fleet}/junk/*"])
    with pytest.raises(ValueError, match="is not a RocketMQ store"):
        D.expand_stores([str(fleet / "junk" / "store")])
    # the same store twice is read once
    assert len(D.expand_stores([str(fleet / "a/store"), f"{fleet}/a/stor?"])) == 1


def test_broker_name_rules(fleet, tmp_path):
    """SNAPSHOT.json's brokerName first, then brokerIdentity, then the directory's name; two
    stores with one name are refused (their rows would not be distinct)."""
    copy = tmp_path / "snap-1"
    with MessageStore(str(copy)) as s:
        s.create_topic("T", queue_nums=1)
    (copy / "brokerIdentity").write_text("C#from-identity#0")
    (copy / "SNAPSHOT.json").write_text(json.dumps({"files": {}, "brokerName": "from-manifest"}))
    assert D.store_broker_name(str(copy)) == ("from-manifest", D.RULE_MANIFEST)
    (copy / "SNAPSHOT.json").write_text(json.dumps({"files": {}}))  # an older manifest
    assert D.store_broker_name(str(copy)) == ("from-identity", D.RULE_IDENTITY)
    (copy / "brokerIdentity").unlink()
    assert D.store_broker_name(str(copy)) == ("snap-1", D.RULE_DIRECTORY)
    (copy / "SNAPSHOT.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"SNAPSHOT\.json: not JSON"):
        D.store_broker_name(str(copy))
    twin = tmp_path / "x" / "broker-c" / "store"
    with MessageStore(str(twin)) as s:
        s.create_topic("T", queue_nums=1)
        s.put_messages([Message("T", b"x")])
    with pytest.raises(ValueError, match="both have brokerName 'broker-c'") as exc:
        D.expand_stores([str(fleet / "broker-c/store"), str(twin)])
    assert "give each store a directory named after its broker" in str(exc.value)


def test_a_broker_name_collision_says_how_to_fix_it(tmp_path):
    """Issue 35, item 5: two snapshot copies whose manifests both carry the host name (mounts
    without --config) were refused with "both have brokerName 'vm'" and no way out. The
    message now names the fixes (--broker-name, --config with brokerName=, the option
    brokerNameFrom = path), and that option reads them, named by their directories."""
    paths = []
    for broker in ("broker-a", "broker-b"):
        copy = tmp_path / broker / "store"
        with MessageStore(str(copy)) as s:
            s.create_topic("T", queue_nums=1)
            s.put_messages([Message("T", broker.encode())])
        (copy / "SNAPSHOT.json").write_text(json.dumps({"files": {}, "brokerName": "vm"}))
        paths.append(str(copy))
    with pytest.raises(ValueError, match="both have brokerName 'vm'") as exc:
        D.expand_stores(paths)
    msg = str(exc.value)
    assert "--broker-name NAME" in msg and "--config a broker.conf with brokerName=NAME" in msg
    assert '.option("brokerNameFrom", "path")' in msg
    opts = D.parse_options({"paths": json.dumps(paths), "brokerNameFrom": "path"})
    assert [(r.broker, r.rule) for r in opts.stores] == [
        ("broker-a", D.RULE_DIRECTORY),
        ("broker-b", D.RULE_DIRECTORY),
    ]
    with pytest.raises(ValueError, match="brokerNameFrom 'manifest'"):
        D.parse_options({"paths": json.dumps(paths), "brokerNameFrom": "manifest"})


def test_pushed_broker_name_prunes_whole_stores(fleet):
    """No Spark: brokerName = / IN leaves only those stores' partitions, each naming its store."""
    opts = D.parse_options({"paths": json.dumps([f"{fleet}/*/store"])})
    everything = D.RocketMQReader(opts).partitions()
    assert {(p.broker, p.path) for p in everything} == {
        (broker, str(fleet / rel)) for rel, (broker, _, _) in FLEET.items()
    }
    one = D.RocketMQFilteringReader(opts)
    assert one.pushFilters([EqualTo(("brokerName",), "broker-b")]) == []
    parts = one.partitions()
    assert parts and {p.broker for p in parts} == {"broker-b"}
    assert {p.path for p in parts} == {str(fleet / "b/store")}
    two = D.RocketMQFilteringReader(opts)
    assert two.pushFilters([In(("brokerName",), ("broker-a", "broker-c", "nobody"))]) == []
    assert {p.broker for p in two.partitions()} == {"broker-a", "broker-c"}
    none = D.RocketMQFilteringReader(opts)
    none.pushFilters([EqualTo(("brokerName",), "nobody")])
    assert [p.tags for p in none.partitions()] == [()]  # the one empty partition


def test_scheduled_over_several_stores_is_refused_clearly(fleet):
    sched = D.RocketMQDataSource({"path": f"{fleet}/*/store", "scheduled": "true"})
    with pytest.raises(NotImplementedError, match="scheduled=true reads one store"):
        sched.reader(None)


def test_streaming_offsets_are_per_broker_and_the_rate_limit_is_shared(fleet):
    """No Spark: a fleet stream's offsets are {brokerName: {topic: {queueId: n}}}; a
    maxOffsetsPerTrigger is shared by the backlogs of every store; partitions name their
    store; a one-store stream keeps Kafka's {topic: {queueId: n}}."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    r = D.RocketMQDataSource(
        {"path": f"{fleet}/*/store", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10"}
    ).streamReader(None)
    start = r.initialOffset()
    assert set(start) == {"broker-a", "broker-b", "broker-c"}
    assert start["broker-b"] == {"T": {"0": 0, "1": 0}, "U": {"0": 0, "1": 0}}
    everything = r.latestOffset(start, ReadAllAvailable())
    assert everything["broker-b"]["T"] == {"0": 5, "1": 6}
    assert everything["broker-c"]["U"] == {"0": 4, "1": 5}
    capped = r.latestOffset(start, ReadMaxRows(10))
    got = sum(
        e - start[b][t][q]
        for b, ts in capped.items()
        for t, qs in ts.items()
        for q, e in qs.items()
    )
    assert got == 10
    parts = r.partitions(start, everything)
    assert {(p.broker, p.path) for p in parts} == {
        (broker, str(fleet / rel)) for rel, (broker, _, _) in FLEET.items()
    }
    assert sum(p.end - p.start for p in parts) == sum(
        n + q for _, _, topics in FLEET.values() for n in topics.values() for q in range(2)
    )
    one = D.RocketMQDataSource(
        {"path": str(fleet / "a/store"), "startingOffsets": "earliest"}
    ).streamReader(None)
    assert one.initialOffset() == {"T": {"0": 0, "1": 0}}


def test_spark_streams_the_fleet_each_message_once(spark, fleet, tmp_path):
    """A stream over the glob, restarted from its checkpoint after one store grew: every
    message of every broker once (counted per brokerName, topic and queue)."""
    D.register(spark)
    fleet = Path(shutil.copytree(fleet, tmp_path / "fleet"))  # grown below: a copy of its own
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> None:
        df = (
            spark.readStream.format("rocketmq")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "9")
            .load(f"{fleet}/*/store")
            .selectExpr("brokerName", "topic", "queue", "queueOffset", "body")
        )
        run_available_now(df, out, ckpt)

    run()
    with MessageStore(str(fleet / "b/store")) as s:
        s.put_messages([Message("U", b"late", queue_id=0)])
    run()
    rows = spark.read.parquet(str(out))
    want = {
        (broker, topic, q): n + q + (1 if (broker, topic, q) == ("broker-b", "U", 0) else 0)
        for broker, _, topics in FLEET.values()
        for topic, n in topics.items()
        for q in range(2)
    }
    got = {
        (r.brokerName, r.topic, r.queue): r["count"]
        for r in rows.groupBy("brokerName", "topic", "queue").count().collect()
    }
    assert got == want
    keys = rows.select("brokerName", "topic", "queue", "queueOffset").distinct().count()
    assert keys == sum(want.values())


def _by_queue(df) -> dict:
    return {
        (r.brokerName, r.topic, r.queue): sorted(r.bodies)
        for r in df.groupBy("brokerName", "topic", "queue")
        .agg({"body": "collect_list"})
        .withColumnRenamed("collect_list(body)", "bodies")
        .collect()
    }


def test_spark_reads_the_fleet_by_list_and_by_glob(spark, fleet):
    """Rows per (brokerName, topic, queue), bodies included, are each store's own rows."""
    D.register(spark)
    alone: dict = {}
    for rel, (broker, _, _) in FLEET.items():
        one = spark.read.format("rocketmq").load(str(fleet / rel))
        # one plain path: the view's columns, no brokerName (a local read pays nothing for it)
        assert (
            one.schema.simpleString()
            == spark.createDataFrame([], DATASOURCE_DDL).schema.simpleString()
        )
        got = _by_queue(one.withColumn("brokerName", F.lit(broker)))
        alone.update(got)
    # a glob that matches one store still has the column: the schema follows the load's form
    single = spark.read.format("rocketmq").load(f"{fleet}/a/sto?e")
    assert {r.brokerName for r in single.select("brokerName").collect()} == {"broker-a"}
    want = {
        (broker, topic, q): sorted(f"{broker}/{topic}/{q}/{i}".encode() for i in range(n + q))
        for broker, _, topics in FLEET.values()
        for topic, n in topics.items()
        for q in range(2)
    }
    assert {k: [bytes(b) for b in v] for k, v in alone.items()} == want
    by_list = spark.read.format("rocketmq").load([str(fleet / rel) for rel in FLEET])
    by_glob = spark.read.format("rocketmq").load(f"{fleet}/*/store")
    for df in (by_list, by_glob):
        assert df.schema["brokerName"].nullable is False
        assert {k: [bytes(b) for b in v] for k, v in _by_queue(df).items()} == want
    narrow = (
        spark.read.format("rocketmq")
        .schema("brokerName STRING, queueOffset BIGINT")
        .load(f"{fleet}/*/store")
        .where("brokerName = 'broker-b'")
    )
    assert narrow.count() == sum(n + q for n in (5, 3) for q in range(2))


def test_a_store_replaced_at_its_path_is_read_anew(tmp_path):
    """A Python worker keeps its reader of a path; a store replaced there since (another
    commitlog/ directory) is opened again, never its old queues read against the new files
    (a false 'damaged record' before, found by pipeline.locality's test of the same)."""
    path = tmp_path / "store"

    def make(tag: str, n: int) -> None:
        shutil.rmtree(path, ignore_errors=True)
        with MessageStore(str(path)) as s:
            s.create_topic("T", queue_nums=1)
            s.put_messages([Message("T", f"{tag}-{i}-{'x' * (i % 40)}".encode()) for i in range(n)])

    def bodies() -> list[bytes]:
        opts = D.parse_options({"path": str(path)})
        return [
            bytes(b)
            for p in D.RocketMQReader(opts).partitions()
            for batch in D.read_range(p)
            for b in batch.column("body").to_pylist()
        ]

    make("old", 30)
    assert len(bodies()) == 30
    make("new", 45)
    got = bodies()
    assert len(got) == 45 and all(b.startswith(b"new-") for b in got)
