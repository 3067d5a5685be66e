"""``rmqfs report`` over two real mounts (one per broker) holding the loghub logs."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from conftest import LOGHUB, fuse

pytest.importorskip("pyspark")

from rmqfs.pipeline import report


def produce_lines(mnt, topic, lines, jsonl=False):
    (mnt / "topics" / topic).mkdir()
    target = mnt / "topics" / topic / ("produce.jsonl" if jsonl else "produce")
    with open(target, "wb") as f:
        f.write(b"".join(x + b"\n" for x in lines))


@pytest.mark.spark
@fuse
def test_report_on_loghub_logs_over_two_brokers(spark, mount_store, tmp_path, capsys):
    hdfs = (LOGHUB / "HDFS_2k.log").read_bytes().splitlines()
    ssh = (LOGHUB / "OpenSSH_2k.log").read_bytes().splitlines()
    zk = (LOGHUB / "Zookeeper_2k.log").read_bytes().splitlines()
    # brokerName comes from broker.conf through status.json, not from the mount's name
    for n in "ab":
        (tmp_path / f"broker-{n}.conf").write_text(f"brokerName = broker-{n}\n")
    a = mount_store(tmp_path / "store-a", config=tmp_path / "broker-a.conf", name="mnt-a")
    b = mount_store(
        tmp_path / "store-b", config=tmp_path / "broker-b.conf", name="mnt-[b]"
    )  # glob characters: a literal path
    assert json.loads((a.mnt / "status.json").read_text())["brokerName"] == "broker-a"
    produce_lines(a.mnt, "HDFS", hdfs)
    produce_lines(a.mnt, "Zookeeper", zk)
    ssh_tags = [f"T{i % 3}" for i in range(len(ssh))]
    ssh_keys = [[f"user{i % 7}", f"host{i % 2}"] for i in range(len(ssh))]
    produce_lines(
        b.mnt,
        "%RETRY%sshd",
        [
            json.dumps({"body": line.decode(), "tags": t, "keys": k}).encode()
            for line, t, k in zip(ssh, ssh_tags, ssh_keys)
        ],
        jsonl=True,
    )
    (a.mnt / "groups" / "g1").mkdir()
    (a.mnt / "groups" / "g1" / "HDFS" / "0" / "offset").write_text("100\n")
    hdfs_q0 = json.loads((a.mnt / "topics" / "HDFS" / "0" / "offsets.json").read_text())
    out = tmp_path / "report"

    assert report.main([str(a.mnt), str(b.mnt), "--out", str(out), "--top", "5"]) == 0
    printed = capsys.readouterr().out

    for png in report.CHARTS:
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert str(out / png) in printed
    page = (out / report.HTML).read_text(encoding="utf-8")
    assert f"html:   {out / report.HTML}" in printed
    # one self-contained file: the charts as data: URIs, nothing else loaded or linked
    assert page.count('src="data:image/png;base64,') == len(report.CHARTS)
    assert all(
        s.startswith(("data:", "#")) for s in re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page)
    )
    assert "http://" not in page and "https://" not in page
    for name in report.TABLES:
        assert f'<h2 id="{name}">{name}</h2>' in page
    assert "%RETRY%sshd" in page and "broker-a" in page and "consumer lag" in page
    for name in report.TABLES:
        assert (out / f"{name}.csv").stat().st_size > 0
        assert (out / f"{name}.parquet").stat().st_size > 0

    pq = pd.read_parquet(out / "per_queue_tag.parquet")
    per_topic = pq.groupby(["brokerName", "topic"])["messages"].sum().to_dict()
    assert per_topic == {
        ("broker-a", "HDFS"): len(hdfs),
        ("broker-a", "Zookeeper"): len(zk),
        ("broker-b", "%RETRY%sshd"): len(ssh),
    }
    by_tag = pq[pq.topic == "%RETRY%sshd"].groupby("tags")["messages"].sum().to_dict()
    assert by_tag == dict(Counter(ssh_tags))
    assert pq[pq.topic == "HDFS"]["bodyBytes"].sum() == sum(map(len, hdfs))
    assert sorted(pq[pq.topic == "HDFS"]["queue"].unique()) == [0, 1, 2, 3]

    pm = pd.read_csv(out / "per_minute.csv")
    assert pm.groupby("topic")["messages"].sum().to_dict() == {
        "HDFS": len(hdfs),
        "Zookeeper": len(zk),
        "%RETRY%sshd": len(ssh),
    }

    body = pd.read_parquet(out / "body_size.parquet").set_index("topic")
    sizes = np.array([len(x) for x in hdfs])
    assert body.loc["HDFS", "min"] == sizes.min() and body.loc["HDFS", "max"] == sizes.max()
    assert body.loc["HDFS", "p50"] == pytest.approx(np.percentile(sizes, 50))
    assert body.loc["HDFS", "p99"] == pytest.approx(np.percentile(sizes, 99))
    hist = pd.read_parquet(out / "body_size_histogram.parquet")
    h = hist[hist.topic == "HDFS"]
    assert h["messages"].sum() == len(hdfs)
    assert (h["bucket"] & (h["bucket"] - 1) == 0).all()  # powers of two

    # produced through the mount: bornTimestamp == storeTimestamp, so latency is unknown,
    # said so in the table, the summary and the HTML, not 0/0/0
    lat = pd.read_parquet(out / "store_latency.parquet")
    assert set(lat.topic) == {"HDFS", "Zookeeper", "%RETRY%sshd"}
    assert not lat.measurable.any() and lat[["p50", "p95", "p99", "max"]].isna().all().all()
    assert (lat.note == report.LATENCY_BORN_IS_STORE).all()
    assert "not measurable" in pd.read_csv(out / "store_latency.csv").note[0]
    assert "latency n/a: not measurable" in printed and " 0/0/0" not in printed
    assert "Latency is not measurable for 3 of 3 topic(s)" in page

    lag = pd.read_parquet(out / "consumer_lag.parquet")
    row = lag[(lag.group == "g1") & (lag.topic == "HDFS") & (lag.queueId == 0)].iloc[0]
    assert (row.brokerName, row.consumerOffset) == ("broker-a", 100)
    assert row.lag == hdfs_q0["maxOffset"] - 100
    assert lag[lag.group == "g1"]["lag"].sum() == len(hdfs) - 100

    keys = pd.read_csv(out / "top_keys.csv", keep_default_na=False)
    want = Counter(k for ks in ssh_keys for k in ks).most_common()
    assert list(zip(keys.key, keys.messages)) == sorted(want, key=lambda kv: (-kv[1], kv[0]))[:5]
    assert "broker-a, broker-b" in printed and "consumer lag" in printed
    a.umount()
    b.umount()


def messages_frame(spark, rows):
    """A ``read_view``-shaped DataFrame of ``rows`` (brokerName, topic, born, store)."""
    from rmqfs.engine.read.schema import DATASOURCE_DDL

    data = [
        {
            "queueId": 0,
            "queueOffset": i,
            "storeSize": 100,
            "tags": None,
            "keys": [],
            "bornTimestamp": born,
            "storeTimestamp": store,
            "body": b"x" * 10,
            "topic": topic,
            "queue": 0,
            "brokerName": broker,
        }
        for i, (broker, topic, born, store) in enumerate(rows)
    ]
    return spark.createDataFrame(data, DATASOURCE_DDL + ", brokerName STRING")


@pytest.mark.spark
def test_store_latency_says_when_it_cannot_be_measured(spark):
    t = 1_700_000_000_000
    rows = (
        [("b", "clients", t + i, t + i + d) for i, d in enumerate([0, 2, 4, 6, 100])]
        + [("b", "mounted", t + i, t + i) for i in range(5)]  # born == store
        + [("b", "noborn", None, t), ("b", "noborn", 0, t + 1)]  # no bornTimestamp
        + [("c", "mounted", t, t + 3)]
    )  # another broker: set
    r = report.compute_report(spark, messages_frame(spark, rows), [])
    try:
        tables = report.collect(r)
    finally:
        r["_cached"].unpersist()
    lat = tables["store_latency"].set_index(["brokerName", "topic"])
    clients = lat.loc[("b", "clients")]
    assert clients.measurable and clients.messages == 5 and pd.isna(clients.note)
    assert (clients.p50, clients["max"]) == (4, 100)
    mounted = lat.loc[("b", "mounted")]
    assert not mounted.measurable and mounted.messages == 5
    assert mounted[["p50", "p95", "p99", "max"]].isna().all()
    assert mounted.note == report.LATENCY_BORN_IS_STORE
    noborn = lat.loc[("b", "noborn")]
    assert not noborn.measurable and noborn.messages == 0
    assert noborn.note == report.LATENCY_NO_BORN
    assert lat.loc[("c", "mounted")].measurable and lat.loc[("c", "mounted")].p99 == 3

    class M:
        broker_name = "b"

    text = report.summary(tables, [M()])
    line = {
        tuple(ln.split()[:2]): ln.rstrip()
        for ln in text.splitlines()
        if ln.startswith(("b ", "c "))
    }
    assert line[("b", "clients")].endswith(
        f" {clients.p50:.0f}/{clients.p95:.0f}/{clients.p99:.0f}"
    )
    assert line[("b", "mounted")].endswith(" n/a") and line[("b", "noborn")].endswith(" n/a")
    assert line[("c", "mounted")].endswith(" 3/3/3")
    assert "latency n/a: not measurable" in text


def test_a_failed_spark_job_is_one_line_not_a_java_traceback(spark, mount_store, tmp_path, capsys):
    """A part Spark cannot read (here a damaged record: EIO) failed the report with Py4J's
    Java traceback, 287 lines on stderr; it says the job failed and why, in one line."""
    from rmqfs.engine.store import Message, MessageStore
    from stores import flip_body_byte, small

    root = tmp_path / "store"
    with MessageStore(str(root), small()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"m%d" % i) for i in range(20)])
    flip_body_byte(root, "T", 0, 3)
    m = mount_store(root)
    assert report.main([str(m.mnt), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rmqfs report: the Spark job failed: "), err
    assert "Input/output error" in err[0] or "EIO" in err[0] or "IOException" in err[0], err


def test_a_long_retry_topic_is_named_alike_in_every_table(spark, mount_store, tmp_path, capsys):
    """A retry topic of a long group has its view/ directory shortened (NAME_MAX): the message
    tables named it by the shortened name and consumer_lag by the whole one, so a join of the
    two lost exactly the topics whose lag matters. Every table names the whole topic."""
    from stores import RETRY_TOPIC, long_topic_store

    long_topic_store(tmp_path / "store")
    m = mount_store(tmp_path / "store")
    tables = report.run(spark, [report.Mount(str(m.mnt))], str(tmp_path / "out"))
    capsys.readouterr()
    lag = tables["consumer_lag"]
    assert RETRY_TOPIC in set(lag["topic"])
    for name in ("per_queue_tag", "per_minute"):
        topics = set(tables[name]["topic"])
        assert RETRY_TOPIC in topics, name
        assert not [t for t in topics if "~" in t], name


def test_not_a_mount_is_a_clear_error(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 1
    assert "no view/ directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args", [["--top", "-1"], ["--top", "0"], ["--series", "-2"], ["--top", "x"]]
)
def test_counts_out_of_range_are_usage_errors(tmp_path, capsys, args):
    """``--top -1`` started Spark and failed there as a job (exit 1, a Spark error); a usage
    error now (exit 2), before Spark starts (a review)."""
    assert report.main([str(tmp_path), *args]) == 2
    assert "--top" in capsys.readouterr().err or "--series" in " ".join(args)


def test_chart_bucket_suits_the_time_span():
    """A burst of seconds is charted per second, an hour per 10 seconds... at most 240 points."""
    assert report.chart_bucket(0) == (10, "10 ms")  # one burst: its shape, not one dot
    assert report.chart_bucket(540) == (10, "10 ms")
    assert report.chart_bucket(3_500) == (100, "100 ms")
    assert report.chart_bucket(239_000) == (1_000, "second")
    assert report.chart_bucket(240_000)[1] == "10 seconds"
    assert report.chart_bucket(30 * 60_000)[1] == "10 seconds"
    assert report.chart_bucket(3 * 3600_000)[1] == "minute"
    assert report.chart_bucket(2 * 86_400_000)[1] == "hour"
    assert report.chart_bucket(200 * 86_400_000)[1] == "day"
    assert report.chart_bucket(365 * 86_400_000)[1] == "week"
    assert report.chart_bucket(10 * 365 * 86_400_000)[1] == "30 days"
    for span in (0, 1, 999_999, 10**8, 10**10):
        ms, _ = report.chart_bucket(span)
        assert span // ms + 1 <= 240 or ms == report.CHART_BUCKETS[-1][0]
