"""The ``rocketmq`` data source over snapshots in object storage (issue 23, item 2), against a
real S3 server (SeaweedFS's ``weed mini``, tests/s3server.py) started and stopped by this
module on loopback: one snapshot by URI, a fleet by glob with ``brokerName``, streaming that
follows newer snapshots uploaded to the same location exactly once, and the faults (a server
stopped mid-read, wrong credentials, a missing manifest, a file whose crc32c differs, a broker
with no snapshot yet). A local read of the same copies is the judge: counts per broker, topic and
queue, bodies byte-exact."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F

from conftest import run_available_now
from rmqfs.engine.live import objectstore, remote
from rmqfs.engine.live.remote import RemoteSnapshot
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.storeconfig import StoreConfig
from rmqfs.pipeline import datasource as D
from s3server import BUCKET, KEY, SECRET, Weed
from stores import snapshot_copy

pytestmark = pytest.mark.spark

#: broker -> {topic: messages per queue}; broker-c's directory has files but no snapshot yet
BROKERS = {"broker-a": {"T": 120, "U": 40}, "broker-b": {"T": 70}}


def _config(broker: str) -> StoreConfig:
    return StoreConfig(
        broker_name=broker,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=200 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )


def _put(s: MessageStore, broker: str, topics: dict, round_: int) -> None:
    for topic, n in topics.items():
        for q in range(2):
            s.put_messages(
                [
                    Message(
                        topic,
                        f"{broker}/{topic}/{q}/{round_}/{i}".encode() * (1 + i % 7),
                        tags="A" if i % 2 else "B",
                        queue_id=q,
                    )
                    for i in range(n)
                ]
            )


def _copy(s: MessageStore, dest: Path) -> Path:
    """A snapshot of ``s`` written out as a copy tool would (``MNT/snapshots/NAME``)."""
    return snapshot_copy(s, dest, dest.name)


@pytest.fixture(scope="module")
def fleet(weed, tmp_path_factory):
    """Each broker's store, a snapshot copy of it uploaded to fleet/<broker>/latest, and a
    fleet/broker-c/ with a file but no snapshot. Returns ``{broker: (store, copy)}``."""
    root = tmp_path_factory.mktemp("s3fleet")
    fs = weed.fs()
    out = {}
    for broker, topics in BROKERS.items():
        store = root / broker / "store"
        with MessageStore(str(store), _config(broker)) as s:
            for topic in topics:
                s.create_topic(topic, 2)
            _put(s, broker, topics, 0)
            s.consumer_offsets.commit("G", "T", 0, 10)  # a group's progress, for the report
            c = _copy(s, root / broker / "snap0")
        objectstore.upload_snapshot(str(c), fs, f"{BUCKET}/fleet/{broker}/latest")
        out[broker] = (store, c)
    with fs.open_output_stream(f"{BUCKET}/fleet/broker-c/latest/NOTES") as f:
        f.write(b"no snapshot yet")
    return out


def _uri(weed: Weed, rel: str) -> str:
    return weed.uri(rel)


def _by_queue(df) -> dict:
    """``{(brokerName?, topic, queue): sorted bodies}`` of a DataFrame."""
    keys = [c for c in ("brokerName", "topic", "queue") if c in df.columns]
    return {
        tuple(r[k] for k in keys): sorted(bytes(b) for b in r.bodies)
        for r in df.groupBy(*keys).agg(F.collect_list("body").alias("bodies")).collect()
    }


def _creds(reader):
    return reader.option("accessKey", KEY).option("secretKey", SECRET)


def test_one_snapshot_by_uri_equals_the_local_read_of_its_copy(spark, weed, fleet):
    D.register(spark)
    _, copy = fleet["broker-a"]
    got = _creds(spark.read.format("rocketmq")).load(_uri(weed, "fleet/broker-a/latest"))
    want = spark.read.format("rocketmq").load(str(copy))
    assert got.schema == want.schema  # one location: the view's columns, no brokerName
    assert _by_queue(got) == _by_queue(want)
    assert sum(map(len, _by_queue(got).values())) == 2 * (120 + 40)
    # narrow: a column subset, tags, offsets; the same rows as the local read
    q = {
        "topics": "T",
        "tags": "A",
        "startingOffsets": '{"T": {"0": 50}}',
        "endingOffsets": '{"T": {"0": 60, "1": 5}}',
    }
    cols = "topic STRING, queue INT, queueOffset BIGINT, body BINARY"
    g = _creds(spark.read.format("rocketmq").schema(cols).options(**q))
    l_ = spark.read.format("rocketmq").schema(cols).options(**q)
    g = g.load(_uri(weed, "fleet/broker-a/latest"))
    l_ = l_.load(str(copy))
    assert sorted(g.collect()) == sorted(l_.collect()) and g.count() == 5 + 2


def test_the_fleet_by_glob_names_brokers_and_skips_one_with_no_snapshot(spark, weed, fleet, caplog):
    D.register(spark)
    glob_uri = _uri(weed, "fleet/*/latest")
    with caplog.at_level(logging.WARNING, logger=D.__name__):
        refs = D.expand_stores([D._located(glob_uri, {"accessKey": KEY, "secretKey": SECRET})])
    assert [r.broker for r in refs] == ["broker-a", "broker-b"]  # from each manifest
    assert "fleet/broker-c/latest" in caplog.text and "no snapshot yet" in caplog.text
    assert SECRET not in caplog.text
    got = _creds(spark.read.format("rocketmq")).load(glob_uri)
    want = {}
    for broker, (_, copy) in fleet.items():
        for (t, q), bodies in _by_queue(spark.read.format("rocketmq").load(str(copy))).items():
            want[(broker, t, q)] = bodies
    assert _by_queue(got) == want


def test_streaming_follows_newer_snapshots_exactly_once(spark, weed, fleet, tmp_path):
    """Two snapshots uploaded one after the other to one location: a stream restarted from its
    checkpoint reads the second one's new messages only, each message once."""
    D.register(spark)
    store, _ = fleet["broker-b"]
    loc = "stream/broker-b/latest"
    fs = weed.fs()
    with MessageStore(str(store), _config("broker-b")) as s:
        c1 = _copy(s, tmp_path / "one")
    objectstore.upload_snapshot(str(c1), fs, f"{BUCKET}/{loc}")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> None:
        df = (
            _creds(spark.readStream.format("rocketmq"))
            .option("startingOffsets", "earliest")
            .load(_uri(weed, loc))
            .selectExpr("topic", "queue", "queueOffset", "body")
        )
        run_available_now(df, out, ckpt)

    run()
    assert spark.read.parquet(str(out)).count() == 2 * 70
    with MessageStore(str(store), _config("broker-b")) as s:
        _put(s, "broker-b", {"T": 30}, 1)
        c2 = _copy(s, tmp_path / "two")
    rep = objectstore.upload_snapshot(str(c2), fs, f"{BUCKET}/{loc}")
    assert rep["uploaded"]  # only what changed went up (sealed segments were not sent again)
    run()
    rows = spark.read.parquet(str(out))
    assert rows.count() == 2 * 100
    assert rows.select("topic", "queue", "queueOffset").distinct().count() == 2 * 100
    want = _by_queue(spark.read.format("rocketmq").load(str(c2)))
    assert _by_queue(rows) == want


def test_faults_are_named_and_never_a_partial_result(spark, weed, fleet, tmp_path, monkeypatch):
    D.register(spark)
    a = _uri(weed, "fleet/broker-a/latest")
    # wrong credentials: refused at planning, with the reason
    with pytest.raises(Exception, match="credentials refused"):
        spark.read.format("rocketmq").option("accessKey", KEY).option("secretKey", "nope").load(
            a
        ).count()
    # no manifest: named
    with pytest.raises(Exception, match=r"no SNAPSHOT\.json: not a snapshot"):
        _creds(spark.read.format("rocketmq")).load(_uri(weed, "fleet/broker-c/latest")).count()
    # a segment whose bytes differ from its manifest's crc32c: the read fails naming it
    fs = weed.fs()
    _, copy = fleet["broker-a"]
    objectstore.upload_snapshot(str(copy), fs, f"{BUCKET}/bad/latest")
    seg = sorted((copy / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    data[-1] ^= 0x5A  # in the file's END_OF_FILE blank: no record's checks see it
    with fs.open_output_stream(f"{BUCKET}/bad/latest/commitlog/{seg.name}") as f:
        f.write(bytes(data))
    with pytest.raises(
        Exception, match=rf"commitlog/{seg.name} .* has crc32c .*, expected .* by its manifest"
    ):
        _creds(spark.read.format("rocketmq")).load(_uri(weed, "bad/latest")).count()
    # the server stopped mid-read: an error naming the file, never a short result
    monkeypatch.setattr(remote, "REQUEST", 4096)
    loc = D._located(a, {"accessKey": KEY, "secretKey": SECRET})
    r = RemoteSnapshot(loc)
    bounds = {(t, q): (r.min_offset(t, q), r.max_offset(t, q)) for t in r.topics() for q in (0, 1)}
    piece = r.pieces(0, 1 << 62)[0]
    rows = r.read_piece(piece, bounds)
    next(rows)
    weed.stop()
    try:
        started = time.monotonic()
        with pytest.raises(Exception, match=rf"reading commitlog/\d{{20}} of s3://\*\*\*@{BUCKET}"):
            for _ in rows:
                pass
        assert time.monotonic() - started < 120
    finally:
        weed.start()


def test_the_report_runs_over_snapshot_uris(spark, weed, fleet, tmp_path, capsys):
    """``rmqfs report s3://...``: the tables of a snapshot read in place; consumer lag from the
    snapshot's own offsets, as consumer_progress computes it on the local copy."""
    from rmqfs.engine.live.location import with_credentials
    from rmqfs.engine.live.progress import consumer_progress
    from rmqfs.pipeline import report

    D.register(spark)
    uri = with_credentials(_uri(weed, "fleet/broker-a/latest"), KEY, SECRET)
    assert report.main([uri, "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "broker-a" in out and SECRET not in out
    import pandas as pd

    per_queue = pd.read_parquet(tmp_path / "r" / "per_queue_tag.parquet")
    assert per_queue["brokerName"].unique().tolist() == ["broker-a"]
    assert per_queue.groupby(["topic", "queue"])["messages"].sum().to_dict() == {
        (t, q): n for t, n in BROKERS["broker-a"].items() for q in range(2)
    }
    lag = pd.read_parquet(tmp_path / "r" / "consumer_lag.parquet")
    _, copy = fleet["broker-a"]
    with MessageStore(str(copy), read_only=True) as s:
        want = consumer_progress(s, "G")
    got = lag[lag["group"] == "G"].sort_values(["topic", "queueId"])
    assert got[["brokerOffset", "consumerOffset", "lag", "lastTimestamp"]].values.tolist() == [
        [r["brokerOffset"], r["consumerOffset"], r["diff"], r["lastTimestamp"]] for r in want
    ]
    c = with_credentials(_uri(weed, "fleet/broker-c/latest"), KEY, SECRET)
    assert report.main([c, "--out", str(tmp_path / "x")]) == 1
    assert "no SNAPSHOT.json" in capsys.readouterr().err


def test_every_snapshot_reader_is_closed_by_its_owner(weed, fleet, monkeypatch):
    """No snapshot reader outlives its owner (issue 33 item 4): the plan closes the ones it
    opened, each partition's read (a task in the Python worker) opens its own and closes it,
    and nothing is cached between them, so a reused worker never serves an old snapshot. The
    reader's planning and reading run here in-process, as Spark's driver and worker run them;
    the read equals the local copy's."""
    opened: list[RemoteSnapshot] = []
    closed: list[RemoteSnapshot] = []
    real_init, real_close = RemoteSnapshot.__init__, RemoteSnapshot.close

    def init(self, location):
        real_init(self, location)
        opened.append(self)

    def close(self):
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(RemoteSnapshot, "__init__", init)
    monkeypatch.setattr(RemoteSnapshot, "close", close)
    where = {"path": _uri(weed, "fleet/broker-a/latest"), "accessKey": KEY, "secretKey": SECRET}
    reader = D.RocketMQReader(D.parse_options(where))
    parts = reader.partitions()
    assert opened and sorted(map(id, opened)) == sorted(map(id, closed))  # the plan's, closed
    rows = 0
    for part in parts:
        before = len(opened)
        for batch in reader.read(part):
            rows += batch.num_rows
        assert len(opened) == before + 1  # the task's own reader
        assert sorted(map(id, opened)) == sorted(map(id, closed))  # closed when it ended
    assert rows == 2 * (120 + 40)


def test_a_file_a_newer_upload_dropped_is_data_loss_not_empty(
    weed, fleet, tmp_path, caplog, monkeypatch
):
    """A query planned from a snapshot, read after a newer upload to the location left out a
    CommitLog file (expired meanwhile): its task yielded 0 rows and no error, so a stream
    committed past rows it never delivered (a review). It is a DataLossError, or logged and
    skipped with failOnDataLoss=false."""
    import json
    import shutil

    from rmqfs.engine.live.location import open_location

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    uri = _uri(weed, "gone/latest")
    fs, base = open_location(uri)
    src = tmp_path / "snap"
    shutil.copytree(fleet["broker-a"][1], src)
    objectstore.upload_snapshot(str(src), fs, base)
    with RemoteSnapshot(uri) as s:  # the plan (Spark's driver)
        piece = s.pieces(0, s.commitlog_offset)[0]
        bounds = tuple(
            (t, q, s.min_offset(t, q), s.max_offset(t, q))
            for t in s.topics()
            for q in s.queue_ids(t)
        )
        ident = s.identity
    man = json.loads((src / "SNAPSHOT.json").read_text())  # a newer one without that file
    del man["files"][piece.rel]
    man["name"] = "next"
    (src / piece.rel).unlink()
    (src / "SNAPSHOT.json").write_text(json.dumps(man))
    objectstore.upload_snapshot(str(src), fs, base)
    lost = D.SegmentRange(uri, ident, piece, bounds, fail_on_data_loss=True)
    with pytest.raises(D.DataLossError, match="is gone from the snapshot"):
        list(D.read_piece(lost))
    skipped = D.SegmentRange(uri, ident, piece, bounds, fail_on_data_loss=False)
    with caplog.at_level(logging.WARNING):
        assert sum(b.num_rows for b in D.read_piece(skipped)) == 0
    assert "skipped (failOnDataLoss=false)" in caplog.text
