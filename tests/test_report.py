"""Tests of the Spark report job (pipeline.report) over a fake rmqfs mount layout."""

from __future__ import annotations

import base64
import csv
import glob
import json
import os
import zlib
from collections import defaultdict

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from pipeline import report  # noqa: E402
from pipeline.schema import FIELD_NAMES, MESSAGE_DDL, MESSAGE_SCHEMA  # noqa: E402

T0 = 1714564800000  # 2024-05-01T12:00:00Z, epoch ms
STORE_HOST = ("192.168.1.10", 10911)
BORN_HOST = ("10.0.0.7", 53122)
RETRY = "%RETRY%billing"

# (topic, queueId, queueOffset, storeTimestamp - T0 in ms, tags, keys, body, reconsumeTimes),
# in CommitLog order. The minute buckets are 12:00, 12:01, 12:02 for TopicA and 12:03, 12:05 for
# the retry topic (there is no row for the empty minute 12:04).
SPECS = [
    ("TopicA", 0, 0, 1_000, "TagA", ["order-1"], b'{"orderId": 1, "amount": 9.5}', 0),
    ("TopicA", 1, 0, 2_000, "TagB", ["order-2"], b"hello \xc3\xa9t\xc3\xa9", 0),
    ("TopicA", 0, 1, 30_000, None, [], b"no tag here", 0),
    ("TopicA", 1, 1, 59_999, "TagA", ["order-3", "vip"], b"last ms of minute 0", 0),
    ("TopicA", 0, 2, 60_000, "TagA", ["order-4"], b"first ms of minute 1", 0),
    ("TopicA", 0, 3, 125_000, "TagC", ["order-5"], b"x" * 300, 0),
    (RETRY, 0, 5, 180_000, "TagA", ["order-1"], bytes(range(256)), 1),  # binary -> base64
    (RETRY, 0, 6, 239_999, None, [], b"retry without tag", 2),
    (RETRY, 0, 7, 300_000, "TagB", ["order-2"], b"\x00\xff\xfe binary", 1),
]


def _ip_port_hex(host: tuple[str, int]) -> str:
    ip, port = host
    return "".join(f"{int(part):02X}" for part in ip.split(".")) + f"{port:08X}"


def make_line(topic, queue_id, queue_offset, commit_log_offset, store_ts, tags, keys, body, reconsume):
    """One decoded line as the mount renders it (RocketMQ MessageExt field names)."""
    props: dict[str, str] = {}
    if keys:
        props["KEYS"] = " ".join(keys)
    if tags is not None:
        props["TAGS"] = tags
    props["UNIQ_KEY"] = f"0A000007{queue_offset:08X}{commit_log_offset:016X}"
    props["WAIT"] = "true"
    if reconsume:
        props["RETRY_TOPIC"] = "TopicA"
        props["RECONSUME_TIME"] = str(reconsume)
    props_len = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in props.items())
    # CommitLog record length, message version 1 with IPv4 hosts (CommitLog.calMsgLength).
    store_size = 91 + len(body) + len(topic.encode()) + props_len
    line = {
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": queue_offset,
        "commitLogOffset": commit_log_offset,
        "storeSize": store_size,
        "msgId": _ip_port_hex(STORE_HOST) + f"{commit_log_offset:016X}",
        "tags": tags,
        "keys": keys,
        "bornTimestamp": store_ts - 3,
        "bornHost": "%s:%d" % BORN_HOST,
        "storeTimestamp": store_ts,
        "storeHost": "%s:%d" % STORE_HOST,
        "sysFlag": 0,
        "flag": 0,
        "bodyCRC": zlib.crc32(body) & 0x7FFFFFFF,
        "reconsumeTimes": reconsume,
        "preparedTransactionOffset": 0,
        "properties": props,
    }
    try:
        line["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        line["body"] = base64.b64encode(body).decode("ascii")
        line["bodyEncoding"] = "base64"
    return line


def build_mount(root, specs=SPECS, commit_log_start=0):
    """Write the mount layout under ``root``; return the decoded lines (dicts) in CommitLog order.

    Each message is written twice: in topics/<t>/messages.jsonl and in
    topics/<t>/<queueId>/messages.jsonl, as the mount shows them.
    """
    lines, offset = [], commit_log_start
    by_topic, by_queue = defaultdict(list), defaultdict(list)
    for topic, qid, qoff, dt, tags, keys, body, reconsume in specs:
        line = make_line(topic, qid, qoff, offset, T0 + dt, tags, keys, body, reconsume)
        offset += line["storeSize"]
        lines.append(line)
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        by_topic[topic].append(text)
        by_queue[(topic, qid)].append(text)
    os.makedirs(os.path.join(root, "topics"), exist_ok=True)
    for topic, texts in by_topic.items():
        os.makedirs(os.path.join(root, "topics", topic), exist_ok=True)
        with open(os.path.join(root, "topics", topic, "messages.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(texts)
    for (topic, qid), texts in by_queue.items():
        os.makedirs(os.path.join(root, "topics", topic, str(qid)), exist_ok=True)
        with open(os.path.join(root, "topics", topic, str(qid), "messages.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(texts)
    return lines


def bytes_of(lines, **match):
    """Sum of storeSize of the lines whose fields equal ``match`` (plain-Python oracle)."""
    return sum(l["storeSize"] for l in lines if all(l[k] == v for k, v in match.items()))


def minute_bytes(lines, topic, minute):
    start = T0 + minute * 60_000
    return sum(
        l["storeSize"] for l in lines if l["topic"] == topic and start <= l["storeTimestamp"] < start + 60_000
    )


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture
def mount(tmp_path):
    root = tmp_path / "mnt"
    lines = build_mount(str(root))
    return root, lines


# ----------------------------------------------------------------------------- schema


@pytest.mark.spark
def test_ddl_and_struct_type_agree(spark):
    assert StructType.fromDDL(MESSAGE_DDL) == MESSAGE_SCHEMA
    assert tuple(MESSAGE_SCHEMA.fieldNames()) == FIELD_NAMES
    assert MESSAGE_SCHEMA["keys"].dataType.simpleString() == "array<string>"
    assert MESSAGE_SCHEMA["properties"].dataType.simpleString() == "map<string,string>"
    assert MESSAGE_SCHEMA["storeTimestamp"].dataType.simpleString() == "bigint"


# ----------------------------------------------------------------------------- input


def test_topic_message_files_lists_topic_level_only(mount):
    root, _ = mount
    # The queue-level files exist, but the report must not read them (they repeat the same messages).
    assert len(glob.glob(str(root / "topics" / "*" / "*" / "messages.jsonl"))) == 3
    assert report.topic_message_files(root) == [
        "file://" + str(root / "topics" / RETRY / "messages.jsonl"),
        "file://" + str(root / "topics" / "TopicA" / "messages.jsonl"),
    ]


def test_topic_message_files_needs_topics_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="no topics/ directory"):
        report.topic_message_files(tmp_path)


@pytest.mark.spark
def test_read_messages_decodes_lines_with_explicit_schema(spark, mount):
    root, lines = mount
    df = report.read_messages(spark, report.topic_message_files(root))
    assert df.schema.fieldNames()[: len(FIELD_NAMES)] == list(FIELD_NAMES)
    assert df.schema["storeTime"].dataType.simpleString() == "timestamp"
    rows = {
        (r["topic"], r["queueId"], r["queueOffset"]): r
        for r in df.select(
            "*",
            F.unix_millis("storeTime").alias("storeMs"),
            F.unix_millis("bornTime").alias("bornMs"),
            F.when(F.col("bodyEncoding") == "base64", F.unbase64("body"))
            .otherwise(F.encode("body", "UTF-8"))
            .alias("bodyBytes"),
            F.col("properties")["UNIQ_KEY"].alias("uniqKey"),
        ).collect()
    }
    assert len(rows) == len(SPECS) == 9
    for line in lines:
        r = rows[(line["topic"], line["queueId"], line["queueOffset"])]
        assert r["_corrupt_record"] is None
        assert r["storeMs"] == r["storeTimestamp"] == line["storeTimestamp"]
        assert r["bornMs"] == line["bornTimestamp"]
        assert r["storeSize"] == line["storeSize"] and r["commitLogOffset"] == line["commitLogOffset"]
        assert r["tags"] == line["tags"] and r["keys"] == line["keys"]
        assert r["uniqKey"] == line["properties"]["UNIQ_KEY"] and r["msgId"] == line["msgId"]
        assert r["sourceFile"].endswith("/messages.jsonl")
    binary = rows[(RETRY, 0, 5)]
    assert binary["bodyEncoding"] == "base64" and bytes(binary["bodyBytes"]) == bytes(range(256))
    assert rows[("TopicA", 0, 1)]["tags"] is None
    assert rows[("TopicA", 1, 0)]["bodyEncoding"] is None
    assert bytes(rows[("TopicA", 1, 0)]["bodyBytes"]).decode() == "hello été"


# ----------------------------------------------------------------------------- compute_report


def _per_minute_rows(df):
    return [
        (r["topic"], r["minuteMs"], r["messages"], r["bytes"])
        for r in df.select("topic", F.unix_millis("minute").alias("minuteMs"), "messages", "bytes").collect()
    ]


@pytest.mark.spark
def test_compute_report_exact_counts_bytes_and_minutes(spark, mount):
    root, lines = mount
    result = report.compute_report(spark, report.topic_message_files(root))
    assert set(result) == {"per_queue", "per_minute", "malformed"}

    per_queue = [tuple(r) for r in result["per_queue"].collect()]
    assert result["per_queue"].columns == [
        "topic", "queueId", "messages", "bytes", "minQueueOffset", "maxQueueOffset",
    ]
    assert per_queue == [
        (RETRY, 0, 3, bytes_of(lines, topic=RETRY, queueId=0), 5, 7),
        ("TopicA", 0, 4, bytes_of(lines, topic="TopicA", queueId=0), 0, 3),
        ("TopicA", 1, 2, bytes_of(lines, topic="TopicA", queueId=1), 0, 1),
    ]
    # Each message counted once, although the mount holds every line twice (topic + queue file).
    assert sum(r[2] for r in per_queue) == 9
    assert sum(r[3] for r in per_queue) == sum(l["storeSize"] for l in lines)

    assert result["per_minute"].columns == ["topic", "minute", "messages", "bytes"]
    assert result["per_minute"].schema["minute"].dataType.simpleString() == "timestamp"
    assert _per_minute_rows(result["per_minute"]) == [
        (RETRY, T0 + 3 * 60_000, 2, minute_bytes(lines, RETRY, 3)),
        (RETRY, T0 + 5 * 60_000, 1, minute_bytes(lines, RETRY, 5)),
        ("TopicA", T0, 4, minute_bytes(lines, "TopicA", 0)),
        ("TopicA", T0 + 60_000, 1, minute_bytes(lines, "TopicA", 1)),
        ("TopicA", T0 + 2 * 60_000, 1, minute_bytes(lines, "TopicA", 2)),
    ]
    assert result["malformed"].collect() == []


@pytest.mark.spark
def test_compute_report_would_double_count_queue_files(spark, mount):
    """The counterexample: adding the queue-level files doubles every count."""
    root, _ = mount
    all_files = ["file://" + p for p in sorted(glob.glob(str(root / "topics" / "**" / "messages.jsonl"), recursive=True))]
    assert len(all_files) == 5
    doubled = report.compute_report(spark, all_files)["per_queue"]
    assert doubled.agg(F.sum("messages")).first()[0] == 18
    right = report.compute_report(spark, report.topic_message_files(root))["per_queue"]
    assert right.agg(F.sum("messages")).first()[0] == 9


@pytest.mark.spark
def test_compute_report_skips_malformed_lines(spark, tmp_path):
    root = tmp_path / "mnt"
    lines = build_mount(str(root), specs=SPECS[:2])
    path = root / "topics" / "TopicA" / "messages.jsonl"
    with open(path, "a", encoding="utf-8") as f:
        f.write("not json at all\n")
        f.write("{}\n")  # valid JSON, but no topic/queue
        f.write(json.dumps({**lines[0], "queueId": "zero"}) + "\n")  # wrong type
        f.write(json.dumps({**lines[0], "storeTimestamp": None}) + "\n")
    result = report.compute_report(spark, report.topic_message_files(root))
    assert [tuple(r) for r in result["per_queue"].collect()] == [
        ("TopicA", 0, 1, lines[0]["storeSize"], 0, 0),
        ("TopicA", 1, 1, lines[1]["storeSize"], 0, 0),
    ]
    assert [(r["topic"], r["messages"]) for r in result["per_minute"].collect()] == [("TopicA", 2)]
    bad = result["malformed"].collect()
    assert len(bad) == 1 and bad[0]["lines"] == 4
    assert report._uri_to_path(bad[0]["file"]) == str(path)


@pytest.mark.spark
def test_compute_report_without_files_is_empty(spark):
    result = report.compute_report(spark, [])
    assert all(df.collect() == [] for df in result.values())
    assert result["per_queue"].columns[:2] == ["topic", "queueId"]


# ----------------------------------------------------------------------------- main


@pytest.mark.spark
def test_main_prints_tables_and_writes_csv(spark, mount, tmp_path, capsys):
    root, lines = mount
    out = tmp_path / "out"
    assert report.main([str(root), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "Messages per topic and queue" in stdout
    assert "Messages per minute of storeTimestamp (UTC) per topic" in stdout
    table_line = next(l for l in stdout.splitlines() if l.startswith("TopicA") and " 0 " in l)
    assert table_line.split() == ["TopicA", "0", "4", str(bytes_of(lines, topic="TopicA", queueId=0)), "0", "3"]
    assert "2024-05-01T12:05:00Z" in stdout

    per_queue_csv = glob.glob(str(out / "per_queue" / "part-*.csv"))
    per_minute_csv = glob.glob(str(out / "per_minute" / "part-*.csv"))
    assert len(per_queue_csv) == 1 and len(per_minute_csv) == 1
    assert f"wrote per_queue: {per_queue_csv[0]}" in stdout
    assert read_csv(per_queue_csv[0]) == [
        ["topic", "queueId", "messages", "bytes", "minQueueOffset", "maxQueueOffset"],
        [RETRY, "0", "3", str(bytes_of(lines, topic=RETRY)), "5", "7"],
        ["TopicA", "0", "4", str(bytes_of(lines, topic="TopicA", queueId=0)), "0", "3"],
        ["TopicA", "1", "2", str(bytes_of(lines, topic="TopicA", queueId=1)), "0", "1"],
    ]
    assert read_csv(per_minute_csv[0]) == [
        ["topic", "minute", "messages", "bytes"],
        [RETRY, "2024-05-01T12:03:00Z", "2", str(minute_bytes(lines, RETRY, 3))],
        [RETRY, "2024-05-01T12:05:00Z", "1", str(minute_bytes(lines, RETRY, 5))],
        ["TopicA", "2024-05-01T12:00:00Z", "4", str(minute_bytes(lines, "TopicA", 0))],
        ["TopicA", "2024-05-01T12:01:00Z", "1", str(minute_bytes(lines, "TopicA", 1))],
        ["TopicA", "2024-05-01T12:02:00Z", "1", str(minute_bytes(lines, "TopicA", 2))],
    ]
    # main reused the fixture's session and left it running.
    assert spark.range(3).count() == 3

    # A second run overwrites the report (still one part file each).
    assert report.main([str(root), "--out", str(out)]) == 0
    assert len(glob.glob(str(out / "per_queue" / "part-*.csv"))) == 1


@pytest.mark.spark
def test_main_several_mounts_and_duplicates(spark, mount, tmp_path, capsys):
    root, lines = mount
    other = tmp_path / "broker-b"
    lines_b = build_mount(str(other), specs=[("TopicB", 3, 10, 90_000, "T", ["k"], b"b", 0)])
    out = tmp_path / "out"
    # The same mount given twice (once through a symlink) is read once.
    link = tmp_path / "mnt-link"
    link.symlink_to(root)
    assert report.main([str(root), str(other), str(link), "--out", str(out), "--max-rows", "2"]) == 0
    stdout = capsys.readouterr().out
    assert stdout.count("more rows not shown (first 2); see the CSV file") == 2
    rows = read_csv(glob.glob(str(out / "per_queue" / "part-*.csv"))[0])[1:]
    assert [r[:3] for r in rows] == [[RETRY, "0", "3"], ["TopicA", "0", "4"], ["TopicA", "1", "2"], ["TopicB", "3", "1"]]
    assert rows[3][3] == str(lines_b[0]["storeSize"])


def test_main_fails_without_topics_dir(tmp_path, capsys):
    (tmp_path / "not-a-mount").mkdir()
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "not-a-mount"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no topics/ directory" in err and "not-a-mount" in err
    assert not out.exists()


def test_main_usage_error_returns_2(capsys):
    assert report.main([]) == 2
    assert "usage: rmqfs report" in capsys.readouterr().err


@pytest.mark.spark
def test_main_no_messages(spark, tmp_path, capsys):
    root = tmp_path / "empty-mnt"
    (root / "topics" / "Idle").mkdir(parents=True)
    (root / "topics" / "Idle" / "messages.jsonl").touch()  # size 0: Spark skips it
    (root / "topics" / "NoFileYet").mkdir()
    out = tmp_path / "out"
    assert report.main([str(root), "--out", str(out)]) == 0
    assert "no messages" in capsys.readouterr().out
    assert read_csv(glob.glob(str(out / "per_queue" / "part-*.csv"))[0]) == [
        ["topic", "queueId", "messages", "bytes", "minQueueOffset", "maxQueueOffset"]
    ]
    assert read_csv(glob.glob(str(out / "per_minute" / "part-*.csv"))[0]) == [
        ["topic", "minute", "messages", "bytes"]
    ]


@pytest.mark.spark
def test_main_warns_about_malformed_lines(spark, tmp_path, capsys):
    root = tmp_path / "mnt"
    build_mount(str(root), specs=SPECS[:1])
    with open(root / "topics" / "TopicA" / "messages.jsonl", "a", encoding="utf-8") as f:
        f.write("{broken\n")
    assert report.main([str(root), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert f"skipped 1 malformed line(s) in {root / 'topics' / 'TopicA' / 'messages.jsonl'}" in captured.err
    assert "TopicA" in captured.out
