"""The ``rocketmq`` Spark data source (pipeline.datasource) over store files, no mount needed."""

from __future__ import annotations

import base64
import json
import os
import threading
import time

import pytest

from conftest import FIXTURES, SRC_PATH, copy_fixture, fuse
from rmqfs.engine.store import Message, MessageStore

pytest.importorskip("pyspark")

from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, Not

from rmqfs.engine.read import columnar
from rmqfs.pipeline import datasource as D
from stores import put_internal

FIX = FIXTURES / "rocketmq-4.9.8-written"


def expected_498():
    rows = [json.loads(x) for x in (FIX / "expected.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("kind", "message") == "message"]


def test_tag_filters_are_pushed_down_to_the_consumequeue_tagscode(tmp_path, monkeypatch):
    """No Spark: the reader keeps tag filters, selects units by tagsCode before any CommitLog
    read, and returns exactly the messages with that tag."""
    exp = expected_498()
    want = sorted(
        (e["topic"], e["queueId"], e["queueOffset"])
        for e in exp
        if e["tags"] in ("Tag0", "Tag3") and e["queueId"] == 1
    )
    assert want
    reader = D.RocketMQFilteringReader(D.parse_options({"path": str(FIX / "store")}))
    tags = In(("tags",), ("Tag0", "Tag3"))
    queue = EqualTo(("queue",), 1)
    other = GreaterThanOrEqual(("storeTimestamp",), 0)
    assert list(reader.pushFilters([tags, queue, other])) == [other]
    decoded = []
    real = columnar.decode_units

    def counting(cl, topic, q, units, qoffs, *rest, **kw):
        decoded.extend((topic, q, int(o)) for o in qoffs)
        return real(cl, topic, q, units, qoffs, *rest, **kw)

    monkeypatch.setattr(columnar, "decode_units", counting)
    got = []
    for p in reader.partitions():
        for batch in D.read_range(p):
            for r in batch.to_pylist():
                assert r["tags"] in ("Tag0", "Tag3") and r["queue"] == 1
                got.append((r["topic"], r["queue"], r["queueOffset"]))
    assert sorted(got) == want
    assert sorted(decoded) == want  # only the matching units reached the CommitLog


def test_pushed_filters_stay_in_their_reader(tmp_path):
    """No Spark: pushFilters narrows a copy of the reader's own; the parsed options, the
    DataSource's options and a second reader of the same DataSource keep every queue. The
    default reader pushes nothing (Spark's own pushFilters), as Spark 4.0 to 4.3 need."""
    from pyspark.sql.datasource import DataSourceReader

    path = str(FIX / "store")
    source = D.RocketMQFilteringDataSource({"path": path})
    everything = D.RocketMQDataSource({"path": path}).reader(None)
    assert type(everything).pushFilters is DataSourceReader.pushFilters
    want = everything.partitions()
    first = source.reader(None)
    before = D.parse_options({"path": path})
    assert first.o == before
    assert first.pushFilters([EqualTo(("queue",), 1), In(("tags",), ("Tag0",))]) == []
    assert first.o == before and source.options == {"path": path}
    assert first.pushed == D.PushedFilters(queues=frozenset({1}), tags=frozenset({"Tag0"}))
    assert {p.queue_id for p in first.partitions()} == {1}
    second = source.reader(None)
    assert second.pushed == D.NO_FILTERS
    assert second.partitions() == want and {p.queue_id for p in want} == {0, 1, 2, 3}


def test_a_store_without_consumequeues_is_said_not_read_as_empty(tmp_path, caplog):
    """No Spark: a store whose CommitLog holds messages and that has no ConsumeQueue (apache
    PR 3535's fixture: 47 messages, CommitLog only) gave 0 rows without a word, while a mount
    of it shows them all. The data source reads through the ConsumeQueues, as a broker does,
    and now says why it finds nothing and what to do; a store with ConsumeQueues says
    nothing."""
    import logging

    caplog.set_level(logging.WARNING, logger=D.log.name)
    path = str(copy_fixture("apache-rocketmq-pr3535", tmp_path / "pr") / "store")
    D.RocketMQDataSource({"path": path}).reader(None).partitions()
    said = [r.getMessage() for r in caplog.records if "no ConsumeQueue" in r.getMessage()]
    assert said and "rmqfs mount" in said[0] and path in said[0]
    caplog.clear()
    D.RocketMQDataSource({"path": str(FIX / "store")}).reader(None).partitions()
    assert not [r for r in caplog.records if "no ConsumeQueue" in r.getMessage()]


def test_a_filter_over_filters_is_left_to_spark():
    """No Spark: ``WHERE topic <> 'x'`` reaches pushFilters as Not(EqualTo(...)), which has no
    column of its own (``attribute``): it is left to Spark, not an AttributeError."""
    reader = D.RocketMQFilteringReader(D.parse_options({"path": str(FIX / "store")}))
    other = Not(EqualTo(("topic",), "x"))
    assert list(reader.pushFilters([other, EqualTo(("queue",), 1)])) == [other]
    assert reader.pushed == D.PushedFilters(queues=frozenset({1}))


@pytest.mark.spark
@fuse
def test_fixture_store_reads_through_the_view_and_the_data_source(spark, mount_store, tmp_path):
    """A store written by RocketMQ 4.9.8 itself (IPv6 hosts, 256 KiB segments, 8-unit CQ
    files): the mount's view/ and the data source both give every message, equal to what the
    broker stored."""
    store = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "store")
    exp = {(e["topic"], e["queueId"], e["queueOffset"]): e for e in expected_498()}
    D.register(spark)
    ds = spark.read.format("rocketmq").load(str(store))
    m = mount_store(store)
    view = spark.read.parquet(f"file://{m.mnt}/view")  # view/ serves Parquet
    for df in (view, ds):
        rows = {(r.topic, r.queue, r.queueOffset): r for r in df.collect()}
        assert set(rows) == set(exp)
        for key, e in exp.items():
            r = rows[key]
            assert bytes(r.body) == base64.b64decode(e["body"])
            assert (r.commitLogOffset, r.storeSize, r.tags, r.msgId) == (
                e["commitLogOffset"],
                e["size"],
                e["tags"],
                e["msgId"],
            )
            assert r.keys == e["keys"].split()
    assert ds.where("tags = 'Tag1'").count() == sum(e["tags"] == "Tag1" for e in exp.values())
    only = (
        spark.read.format("rocketmq")
        .option("topics", "OracleTopicB")
        .option("startingOffsets", '{"OracleTopicB": {"2": 10}}')
        .option("endingOffsets", '{"OracleTopicB": {"2": 20, "3": 5}}')
        .load(str(store))
    )
    got = sorted((r.queue, r.queueOffset) for r in only.select("queue", "queueOffset").collect())
    lat = {q: max(o for (t, qq, o) in exp if t == "OracleTopicB" and qq == q) + 1 for q in range(4)}
    want = (
        [(0, o) for o in range(lat[0])]
        + [(1, o) for o in range(lat[1])]
        + [(2, o) for o in range(10, min(20, lat[2]))]
        + [(3, o) for o in range(5)]
    )
    assert got == sorted(want)
    m.umount()


@pytest.mark.spark
def test_offsets_below_the_min_offset_fail_unless_failondataloss_false(
    spark, tmp_path, small_config
):
    root = tmp_path / "store"
    with MessageStore(str(root), small_config) as s:
        s.create_topic("L", queue_nums=1)
        for _i in range(6):
            s.put_messages([Message("L", b"x" * 200) for _ in range(100)])
    # Retention: the oldest CommitLog segment is deleted.
    first = sorted(os.listdir(root / "commitlog"))[0]
    os.unlink(root / "commitlog" / first)
    files = columnar.StoreFiles(str(root))
    lo, hi = files.min_offset("L", 0), files.max_offset("L", 0)
    assert 0 < lo < hi == 600
    D.register(spark)
    reader = spark.read.format("rocketmq").option("startingOffsets", '{"L": {"0": 0}}')
    with pytest.raises(Exception, match="failOnDataLoss") as info:
        reader.load(str(root)).count()
    assert f"min offset is {lo}" in str(info.value)
    assert reader.option("failOnDataLoss", "false").load(str(root)).count() == hi - lo
    assert spark.read.format("rocketmq").load(str(root)).count() == hi - lo  # earliest
    # A narrower schema decodes only those columns; a wrong one is refused clearly.
    narrow = (
        spark.read.format("rocketmq")
        .schema("queueOffset BIGINT, body BINARY, topic STRING")
        .load(str(root))
        .collect()
    )
    assert [r.queueOffset for r in narrow] == list(range(lo, hi))
    assert all(bytes(r.body) == b"x" * 200 and r.topic == "L" for r in narrow)
    with pytest.raises(Exception, match="column body is binary, not string"):
        spark.read.format("rocketmq").schema("body STRING").load(str(root)).count()


@pytest.mark.spark
def test_stream_delivers_every_message_once_across_a_restart(spark, tmp_path, small_config):
    """Messages keep arriving while a streaming query runs, is stopped, and is restarted from
    its checkpoint: the sink holds every message exactly once."""
    root, out, chk = tmp_path / "store", tmp_path / "out", tmp_path / "chk"
    store = MessageStore(str(root), small_config)  # a writer holding the lock, as a mount does
    store.create_topic("S", queue_nums=3)
    store.create_topic("%RETRY%g", queue_nums=1)
    stop = threading.Event()
    errors = []

    def produce():
        i = 0
        try:
            while not stop.is_set():
                store.put_messages(
                    [Message("S" if j % 4 else "%RETRY%g", f"{i}-{j}".encode()) for j in range(20)]
                )
                i += 1
                time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    produce_once = [Message("S", f"first-{j}".encode()) for j in range(50)]
    store.put_messages(produce_once)
    D.register(spark)

    def start():
        return (
            spark.readStream.format("rocketmq")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "300")
            .load(str(root))
            .select("topic", "queue", "queueOffset", "body")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(chk))
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    def wait_batches(query, n):
        deadline = time.monotonic() + 60
        while len([p for p in query.recentProgress if p["numInputRows"]]) < n:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.1)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        q1 = start()
        wait_batches(q1, 2)
        q1.stop()
        q2 = start()
        wait_batches(q2, 2)
    finally:
        stop.set()
        producer.join()
    assert not errors
    q2.processAllAvailable()
    q2.stop()
    produced = {
        (t, q): store.max_offset(t, q) for t in ("S", "%RETRY%g") for q in store.queue_ids(t)
    }
    bodies = {(t, q, o): rec.body for (t, q) in produced for o, rec in store.iter_queue(t, q)}
    store.close()
    rows = spark.read.parquet(str(out)).collect()
    keys = [(r.topic, r.queue, r.queueOffset) for r in rows]
    assert len(keys) == len(set(keys)) == sum(produced.values()) > 100
    assert set(keys) == set(bodies)
    assert all(bytes(r.body) == bodies[(r.topic, r.queue, r.queueOffset)] for r in rows)
    batches = [n for n in os.listdir(chk / "offsets") if n.isdigit()]
    last = json.loads((chk / "offsets" / max(batches, key=int)).read_text().splitlines()[-1])
    assert last == {
        t: {str(q): n for (tt, q), n in produced.items() if tt == t} for t in ("S", "%RETRY%g")
    }


def test_columnwise_decode_equals_record_by_record_and_the_engine(tmp_path, small_config):
    """The vectorized decoder (common records) gives the same rows as the per-record one and
    as engine.format.message, including edge cases of the properties area."""
    import numpy as np

    root = tmp_path / "store"
    with MessageStore(str(root), small_config) as s:
        s.create_topic("E", queue_nums=2)
        msgs = [
            Message("E", b"", queue_id=0),
            Message("E", b"plain", tags="A", keys="k1  k2 ", queue_id=0),
            Message(
                "E", "é ✓".encode(), keys=["only"], properties={"e": "", "x": "a\x01b"}, queue_id=0
            ),
            Message("E", bytes(range(256)), tags="B", properties={"TAGS": "B"}, queue_id=0),
        ] * 30 + [Message("E", b"x" * 5000, queue_id=1) for _ in range(40)]  # crosses segments
        put_internal(s, msgs[:60])  # odd properties on purpose (not validated)
        put_internal(s, msgs[60:])
        files = columnar.StoreFiles(str(root))
        for q in (0, 1):
            n = files.max_offset("E", q)
            units = files.units("E", q, 0, n)
            qoffs = np.arange(n)
            fast = columnar.decode_units(files.commitlog, "E", q, units, qoffs)
            slow = columnar.decode_units_per_record(files.commitlog, "E", q, units, qoffs)
            assert fast.equals(slow)
            for row in fast.to_pylist():
                rec = s.get_message("E", q, row["queueOffset"])
                assert dict(row["properties"]) == rec.properties
                assert (row["body"], row["tags"], row["keys"], row["msgId"]) == (
                    rec.body,
                    rec.tags,
                    rec.keys,
                    rec.msg_id,
                )


_REGISTER_IN_A_SESSION = """
import sys
from pyspark.sql import SparkSession
from rmqfs.pipeline.datasource import WorkerEnvironmentError, register
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
try:
    register(spark)
    print("REGISTERED")
except WorkerEnvironmentError as exc:
    print("ERROR", exc)
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.parametrize("worker", ["venv-without-pyarrow", "missing"])
def test_register_names_the_workers_interpreter(tmp_path, worker):
    """register() fails at once, with the workers' interpreter and the fix, when Spark's Python
    workers cannot import pyarrow or do not start (not "Python worker exited unexpectedly" in
    the first query). A session of its own, in a subprocess: PYSPARK_PYTHON is read when a
    SparkContext starts, and the shared session must keep working workers."""
    import subprocess
    import sys

    if worker == "missing":
        python = str(tmp_path / "no-such-python")
    else:
        # same interpreter version as the driver, but without the venv's site-packages
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True
        )
        python = str(tmp_path / "venv" / "bin" / "python")
    env = dict(os.environ, PYSPARK_PYTHON=python, PYTHONPATH=SRC_PATH, SPARK_LOCAL_IP="127.0.0.1")
    out = subprocess.run(
        [sys.executable, "-c", _REGISTER_IN_A_SESSION],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "REGISTERED" not in out
    line = next(x for x in out.splitlines() if x.startswith("ERROR"))
    assert python in line and f"PYSPARK_PYTHON={sys.executable}" in line
    assert "spark.pyspark.python" in line
    if worker != "missing":
        assert "cannot import pyarrow" in line


@pytest.mark.spark
@fuse
def test_long_topics_through_the_data_source_and_a_mounted_view(spark, mount_store, tmp_path):
    """V2 records (topics over 127 chars; the retry and DLQ topics of a long group have 255):
    the data source gives every message with its whole topic; a real mount lists every topic
    directory (255-byte names) and Spark reads view/, where a partition name over 255 bytes
    is shortened (fusefs.viewtree.topic_dir_name); `rmqfs verify` is clean."""
    from conftest import run_rmqfs
    from rmqfs.engine.read.viewnames import topic_dir_name, unescape_partition_value
    from stores import LONG_TOPICS, RETRY_TOPIC, long_topic_store

    store = tmp_path / "store"
    want = long_topic_store(store)
    D.register(spark)
    ds = spark.read.format("rocketmq").load(str(store))
    got: dict = {}
    for r in ds.select("topic", "body").collect():
        got.setdefault(r.topic, []).append(bytes(r.body))
    assert {t: sorted(b) for t, b in got.items()} == {t: sorted(b) for t, b in want.items()}
    only = spark.read.format("rocketmq").option("topics", RETRY_TOPIC).load(str(store))
    assert only.count() == len(want[RETRY_TOPIC])
    m = mount_store(store)
    assert sorted(os.listdir(m.mnt / "topics")) == sorted(["T", "U", *LONG_TOPICS])
    assert json.loads((m.mnt / "status.json").read_text())["skippedTopics"] == []
    for t in LONG_TOPICS:
        assert len((m.mnt / "topics" / t / "bodies.txt").read_bytes().splitlines()) == len(want[t])
    view = spark.read.parquet(f"file://{m.mnt}/view").select("topic", "body").collect()
    by_dir: dict = {}
    for r in view:
        by_dir.setdefault(r.topic, []).append(bytes(r.body))
    for t, bodies in want.items():
        # Spark unescapes the directory name: the topic, or its shortened name
        assert sorted(by_dir[unescape_partition_value(topic_dir_name(t)[6:])]) == sorted(bodies)
    m.umount()
    out = run_rmqfs("verify", store).stdout
    assert "OK" in out, out


_SHIP_AND_STOP = """
import os, sys
from pyspark.sql import SparkSession
from rmqfs.engine.store import Message, MessageStore
from rmqfs.pipeline.datasource import register
tmp = sys.argv[1]
with MessageStore(os.path.join(tmp, "store")) as s:
    s.create_topic("T", queue_nums=1)
    s.put_messages([Message("T", b"m%d" % i) for i in range(5)])
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.local.dir", os.path.join(tmp, "local"))
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
register(spark)
print("COUNT", spark.read.format("rocketmq").load(os.path.join(tmp, "store")).count())
spark.stop()
left = [os.path.join(d, n) for d, dirs, files in os.walk(tmp) for n in dirs + files
        if n.startswith("rmqfs-pyfiles-") or n.endswith(".zip")]
print("LEFT", left)
"""


@pytest.mark.spark
def test_the_shipped_code_is_gone_when_the_session_stops(tmp_path):
    """register() ships pipeline/ and engine/ as a zip (addPyFile); once the session stops,
    nothing of it is left (it used to leave a /tmp/rmqfs-pyfiles-* directory per session).
    A session of its own in a subprocess, with TMPDIR and spark.local.dir under tmp_path."""
    import subprocess
    import sys

    (tmp_path / "tmp").mkdir()
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=SRC_PATH,
        SPARK_LOCAL_IP="127.0.0.1",
        TMPDIR=str(tmp_path / "tmp"),
    )
    res = subprocess.run(
        [sys.executable, "-c", _SHIP_AND_STOP, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "COUNT 5" in res.stdout, res.stdout + res.stderr[-3000:]
    assert "LEFT []" in res.stdout, res.stdout
    left = [
        p for p in tmp_path.rglob("*") if p.name.startswith("rmqfs-pyfiles-") or p.suffix == ".zip"
    ]
    assert left == []


@pytest.mark.spark
def test_a_damaged_record_fails_the_query_with_data_loss(spark, tmp_path, small_config):
    """Issue 15 item 5a: a record whose body fails its BODYCRC is never a row: the query
    fails with DataLossError naming the queue and the offset (failOnDataLoss=false too); the
    other queue reads."""
    from stores import flip_body_byte

    root = tmp_path / "store"
    with MessageStore(str(root), small_config) as s:
        s.create_topic("C", queue_nums=2)
        s.put_messages([Message("C", b"c%d" % i, queue_id=i % 2) for i in range(40)])
    off = flip_body_byte(root, "C", 0, 7, small_config)
    D.register(spark)
    for fail in ("true", "false"):
        with pytest.raises(Exception, match="DataLossError") as info:
            (spark.read.format("rocketmq").option("failOnDataLoss", fail).load(str(root)).collect())
        assert f"offset {off}" in str(info.value) and "C/0" in str(info.value)
    ok = spark.read.format("rocketmq").option("queues", '{"C": [1]}').load(str(root))
    assert sorted(bytes(r.body) for r in ok.collect()) == sorted(
        b"c%d" % i for i in range(1, 40, 2)
    )


@pytest.mark.spark
def test_a_dledger_store_reads_through_the_data_source(spark, tmp_path):
    """RocketMQ 4.9.8's DLedger store (issue 22, 2.1): the data source gives its 284
    consumable messages, equal to expected.jsonl (bodies inflated when compressed); a
    checkpoint that commits fewer entries hides the rest, as the broker does."""
    import zlib

    fix = FIXTURES / "rocketmq-4.9.8-dledger"
    store = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "store")
    rows = [json.loads(x) for x in (fix / "expected.jsonl").read_text().splitlines()]
    exp = {(e["topic"], e["queueId"], e["queueOffset"]): e for e in rows if e["kind"] == "message"}
    D.register(spark)
    got = {
        (r.topic, r.queue, r.queueOffset): r
        for r in spark.read.format("rocketmq").load(str(store)).collect()
    }
    assert set(got) == set(exp)
    for key, e in exp.items():
        body = base64.b64decode(e["body"])
        assert bytes(got[key].body) == (zlib.decompress(body) if e["sysFlag"] & 1 else body)
        assert (got[key].commitLogOffset, got[key].msgId) == (e["commitLogOffset"], e["msgId"])
    (store / "dledger-n0" / "checkpoint").write_text("committedIndex=99\nendIndex=299\n")
    from rmqfs.engine.format.dledger import open_dledger

    unit = open_dledger(str(store)).index_unit(99)
    n = spark.read.format("rocketmq").load(str(store)).count()
    assert n == sum(e["commitLogOffset"] < unit[1] + unit[2] for e in exp.values()) < len(exp)


def test_a_batchcq_store_reads_each_inner_message_through_the_data_source(spark, tmp_path):
    """A BatchCQ topic (issue 22, 2.5; tests/bcqstore.py): every inner message of an inner
    batch is a row at its own queue offset, with its own body and properties."""
    from bcqstore import build_bcq_store, expected

    store = tmp_path / "store"
    build_bcq_store(store)
    D.register(spark)
    df = spark.read.format("rocketmq").load(str(store))
    rows = sorted(df.where("topic = 'B'").collect(), key=lambda r: r.queueOffset)
    want = expected()
    assert [r.queueOffset for r in rows] == list(range(len(want)))
    assert [bytes(r.body) for r in rows] == [b for b, _ in want]
    assert [r.tags for r in rows] == ["plain", "x", None, None, "plain", "y", "y"]
    assert df.where("topic = 'T'").count() == 2


def test_options_that_would_read_wrong_are_refused_or_made_right(tmp_path):
    """No Spark (found by a review): a maxOffsetsPerTrigger of 0 or less is refused (-1 sent
    the checkpointed offsets below the start, batch after batch; 0 meant no limit); a
    startingOffsetsByTimestamp of "earliest" is refused with the option's name (it was a
    TypeError from planning); a topic named twice is read once (scheduled=true returned
    each row twice)."""
    path = str(FIX / "store")
    for bad in ("0", "-1"):
        with pytest.raises(ValueError, match="maxOffsetsPerTrigger must be a positive integer"):
            D.parse_options({"path": path, "maxOffsetsPerTrigger": bad})
    assert D.parse_options({"path": path, "maxOffsetsPerTrigger": "7"}).max_per_trigger == 7
    for bad in ("earliest", "latest"):
        with pytest.raises(ValueError, match="startingOffsetsByTimestamp must be JSON of epoch"):
            D.parse_options({"path": path, "startingOffsetsByTimestamp": bad})
    assert D.parse_options({"path": path, "topics": "A, B,A ,B"}).topics == ["A", "B"]


def test_a_stream_starts_the_queues_its_json_offsets_leave_out_at_earliest(tmp_path):
    """No Spark: ``startingOffsets`` JSON that names some queues starts the others at their
    earliest offset, as the option's documentation and a batch read have it (a stream
    started them at latest: their messages were skipped without a word)."""
    root = str(tmp_path / "s")
    with MessageStore(root) as s:
        s.create_topic("A", 2)
        s.create_topic("B", 1)
        s.put_messages([Message("A", b"a%d" % i) for i in range(10)])
        s.put_messages([Message("B", b"b%d" % i) for i in range(5)])
    r = D.RocketMQDataSource({"path": root, "startingOffsets": '{"A": {"0": 4}}'}).streamReader(
        None
    )
    assert r.initialOffset() == {"A": {"0": 4, "1": 0}, "B": {"0": 0}}
    latest = D.RocketMQDataSource({"path": root}).streamReader(None)
    assert latest.initialOffset() == {"A": {"0": 5, "1": 5}, "B": {"0": 5}}


def test_a_stream_over_a_dledger_store_follows_its_commit_point(tmp_path):
    """No Spark: a stream's planner keeps its store open for the query's life; entries the
    DLedger writer commits after the stream started are read at the next trigger (the
    committed end was read once, at open, and the stream never delivered them: found by a
    review)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    store = copy_fixture("rocketmq-4.9.8-dledger/store", tmp_path / "store")
    checkpoint = store / "dledger-n0" / "checkpoint"
    checkpoint.write_text("committedIndex=99\nendIndex=299\n")
    r = D.RocketMQDataSource({"path": str(store), "startingOffsets": "earliest"}).streamReader(None)
    start = r.initialOffset()

    def total(offsets: dict) -> int:
        return sum(n for qs in offsets.values() for n in qs.values())

    def fresh() -> dict:  # what a reader opened now says
        return D.RocketMQDataSource({"path": str(store)}).streamReader(None).initialOffset()

    first = r.latestOffset(start, ReadAllAvailable())
    assert first == fresh()
    checkpoint.write_text("committedIndex=299\nendIndex=299\n")
    later = r.latestOffset(first, ReadAllAvailable())
    assert later == fresh() and total(later) > total(first) + 150
