"""The offline commands (mount/admin.py) through the real command line. ``rmqfs verify`` and
``rmqfs recover`` (engine/tools/verify/) are tested in test_verify.py, which shares this module's
store fixtures."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import LOGHUB, REPO, SRC_PATH, run_rmqfs
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from stores import copy_store

SEG = 64 * 1024


def _cfg():
    return StoreConfig(
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )


@pytest.fixture
def conf(tmp_path):
    """broker.conf for the small stores (index geometry 64/256 cannot be guessed from sizes)."""
    p = tmp_path / "broker.conf"
    p.write_text(
        "mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\n"
        "maxHashSlotNum=64\nmaxIndexNum=256\nbrokerName=broker-t\n"
    )
    return p


def _hdfs_lines(n=1200):
    return (LOGHUB / "HDFS_2k.log").read_bytes().split(b"\n")[:n]


@pytest.fixture(scope="session")
def hdfs_store(tmp_path_factory):
    """The store of :func:`store`, built once a run (tests change only their copies)."""
    root = tmp_path_factory.mktemp("hdfs") / "store"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("HDFS")
        res = s.put_messages(
            [
                Message(
                    "HDFS", line, tags="TagA" if i % 3 == 0 else "TagB", keys=f"key{i} blk{i % 7}"
                )
                for i, line in enumerate(_hdfs_lines())
            ]
        )
    return root, tuple(res)


@pytest.fixture
def store(tmp_path, hdfs_store):
    """A store of 1200 HDFS lines over several 64 KiB segments; returns (root, PutResults):
    a copy of :func:`hdfs_store`, the test's own."""
    built, res = hdfs_store
    return copy_store(built, tmp_path / "store"), list(res)


def _verify(root, conf=None, rc=0):
    args = ["verify", root] + (["--config", conf] if conf else [])
    r = run_rmqfs(*args, check=False)
    assert r.returncode == rc, r.stdout + r.stderr
    return r


# ----------------------------------------------------------------------------------------------
# errors and the store lock (verify/recover among the other commands)


def test_clear_errors(tmp_path, store):
    r = run_rmqfs("verify", tmp_path / "nope", check=False)
    assert r.returncode == 1
    assert r.stderr == f"rmqfs: {tmp_path / 'nope'}: no such store directory\n"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.txt").write_text("x")
    r = run_rmqfs("recover", tmp_path / "empty", check=False)
    assert r.returncode == 1 and "not a RocketMQ store" in r.stderr
    root, _ = store
    r = run_rmqfs("print-msg", root, "-t", "Nope", check=False)
    assert r.returncode == 1 and r.stderr == "rmqfs: topic Nope does not exist (topics: HDFS)\n"
    r = run_rmqfs("query-msg", root, "-t", "HDFS", "-q", "0", "-o", "999", check=False)
    assert r.returncode == 1
    assert r.stderr == "rmqfs: offset 999 is not in HDFS/0: queue offsets are [0, 300)\n"
    r = run_rmqfs("print-msg", root, "-t", "HDFS", "-c", "bogus", check=False)
    assert r.returncode == 1 and r.stderr == "rmqfs: unknown charset bogus\n"
    r = run_rmqfs("print-msg", root, "-t", "HDFS", "-b", "yesterday", check=False)
    assert r.returncode == 1 and "bad time 'yesterday'" in r.stderr
    r = run_rmqfs("reset-offset", root, "-g", "G", "-t", "HDFS", "-o", "1", check=False)
    assert r.returncode == 1 and r.stderr == (
        "rmqfs: consumer group G does not exist (groups: none); create it first: rmqfs "
        "update-sub-group STORE -g G\n"
    )  # (the broker: SUBSCRIPTION_GROUP_NOT_EXIST; a misspelt group is not made)
    assert not (root / "config" / "consumerOffset.json").exists()
    run_rmqfs("update-sub-group", root, "-g", "G")
    r = run_rmqfs("reset-offset", root, "-g", "G", "-t", "HDFS", "-o", "301", check=False)
    assert r.returncode == 1 and r.stderr == "rmqfs: offset 301 is outside [0, 300] of HDFS/0\n"


def test_locked_store(store, conf):
    """A running writer holds the lock: reading commands work, writing ones name its pid."""
    root, _ = store
    with MessageStore(root, _cfg()):
        v = _verify(root, conf)
        assert f"store in use by process {os.getpid()}" in v.stdout
        assert "OK: no errors" in v.stdout
        for args in (
            ["recover", root],
            ["clean", root],
            ["reset-offset", root, "-g", "G", "-t", "HDFS", "-s", "now"],
            ["produce", root, "-t", "HDFS", os.devnull],
        ):
            r = run_rmqfs(*args, check=False)
            assert r.returncode == 1
            assert f"is locked by process {os.getpid()}" in r.stderr, args
        assert run_rmqfs("topic-status", root, "-t", "HDFS").returncode == 0


# ----------------------------------------------------------------------------------------------
# produce / print / query


def test_produce_and_print(tmp_path):
    root = tmp_path / "new"
    r = run_rmqfs("produce", root, "-t", "Logs", os.devnull, check=False)
    assert r.returncode == 1 and "pass -c" in r.stderr and not root.exists()
    src = tmp_path / "in.txt"
    src.write_bytes(b"alpha\nbeta\n\ndelta\ngamma")  # an empty line (no message), no last \n
    r = run_rmqfs(
        "produce", root, "-t", "Logs", "-c", "--queues", "2", src, "-a", "TagX", "-k", "k1 k2"
    )
    assert r.stdout.splitlines() == [
        "created topic Logs with 2 queues",
        "produced 4 messages to Logs (queue: count 0: 2, 1: 2), CommitLog "
        f"[0, {r.stdout.split('[0, ')[1].split(')')[0]})",
    ]
    p = run_rmqfs("print-msg", root, "-t", "Logs", "--json")
    msgs = [json.loads(x) for x in p.stdout.splitlines()]
    assert [(m["queueId"], m["queueOffset"], m["body"]) for m in msgs] == [
        (0, 0, "alpha"),
        (0, 1, "delta"),
        (1, 0, "beta"),
        (1, 1, "gamma"),
    ]
    assert all(m["tags"] == "TagX" and m["keys"] == ["k1", "k2"] for m in msgs)
    with MessageStore(root, read_only=True) as s:
        recs = [s.get_message("Logs", q, o) for q in (0, 1) for o in (0, 1)]
    lines = run_rmqfs("print-msg", root, "-t", "Logs", "-i", "1").stdout.splitlines()
    assert lines == [
        f"MSGID: {r.msg_id} topic=Logs queueId=1 queueOffset={r.queue_offset} "
        f"commitLogOffset={r.commitlog_offset} storeTimestamp={r.store_timestamp} tags=TagX "
        f"keys=k1 k2 UNIQ_KEY={r.uniq_key} BODY: {r.body.decode()}"
        for r in recs[2:]
    ]
    nobody = run_rmqfs("print-msg", root, "-t", "Logs", "-i", "0", "-d", "false").stdout
    assert nobody.count("BODY: NOT PRINT BODY") == 2
    # stdin, a pinned queue and a property
    env = dict(os.environ, PYTHONPATH=SRC_PATH)
    out = (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "rmqfs.mount.cli",
                "produce",
                str(root),
                "-t",
                "Logs",
                "-i",
                "1",
                "--property",
                "src=stdin",
                "-v",
            ],
            input=b"one\ntwo\n",
            capture_output=True,
            env=env,
            check=True,
        )
        .stdout.decode()
        .splitlines()
    )
    assert [x.split()[2:] for x in out[:2]] == [["1", "2"], ["1", "3"]]
    with MessageStore(root, read_only=True) as s:
        assert s.get_message("Logs", 1, 3).properties["src"] == "stdin"
        assert s.get_message("Logs", 1, 3).body == b"two"
    assert "OK: no errors, 0 warnings" in _verify(root).stdout


def test_produce_a_loghub_file_matches_the_mount_contract(tmp_path):
    root = tmp_path / "s"
    log = LOGHUB / "HDFS_2k.log"
    run_rmqfs("produce", root, "-t", "HDFS", "-c", log)
    bodies = []
    with MessageStore(root, read_only=True) as s:
        for off in sorted(
            cq.unit(i)[0]
            for cq in s.consume_queues.values()
            for i in range(cq.min_offset, cq.max_offset)
        ):
            bodies.append(s.message_at(off).body)
    assert b"".join(b + b"\n" for b in bodies) == log.read_bytes()


def test_produce_of_plain_lines_puts_bodies_and_says_where_each_went(tmp_path):
    """Lines with no properties or timing go in from columns (``put_bodies``, no Message a
    line), with ``-a`` tags and ``-k`` keys or without: ``-v`` prints each one's msgId,
    UNIQ_KEY, queue and queue offset, the summary counts them per queue, and the records read
    back as produced, found by their keys."""
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(b"line %d\n" % i for i in range(7)) + b"\n\nlast")
    root = tmp_path / "s"
    r = run_rmqfs("produce", root, "-t", "T", "-c", "--queues", "3", src, "-v")
    lines = r.stdout.splitlines()
    assert lines[0] == "created topic T with 3 queues"
    assert lines[-1].startswith("produced 8 messages to T (queue: count 0: 3, 1: 3, 2: 2)")
    shown = [x.split() for x in lines[1:-1]]
    assert [(int(q), int(o)) for _, _, q, o in shown] == [(i % 3, i // 3) for i in range(8)]
    with MessageStore(root, read_only=True) as s:
        for i, (msg_id, uniq, q, o) in enumerate(shown):
            rec = s.get_message("T", int(q), int(o))
            assert (rec.msg_id, rec.uniq_key) == (msg_id, uniq)
            assert rec.body == (b"line %d" % i if i < 7 else b"last")
            assert rec.tags is None and rec.keys == [] and rec.topic == "T"
    r = run_rmqfs("produce", root, "-t", "U", "-c", src, "-a", "TagA", "-k", "blk order", "-v")
    shown = [x.split() for x in r.stdout.splitlines()[1:-1]]
    with MessageStore(root, read_only=True) as s:
        for i, (msg_id, _uniq, q, o) in enumerate(shown):
            rec = s.get_message("U", int(q), int(o))
            assert (rec.msg_id, rec.body) == (msg_id, b"line %d" % i if i < 7 else b"last")
            assert rec.tags == "TagA" and rec.keys == ["blk", "order"]
        found = {r.msg_id for r in s.query_by_key("U", "order", max_num=64)}
        assert found == {m for m, _, _, _ in shown}
    assert "OK: no errors, 0 warnings" in _verify(root).stdout


def test_print_msg_time_range_and_tags(tmp_path):
    root = tmp_path / "s"
    batches = []
    with MessageStore(root) as s:
        s.create_topic("T", 2)
        for b in range(3):
            batches.append(
                s.put_messages(
                    [Message("T", f"b{b}m{i}".encode(), tags=f"Tag{i % 3}") for i in range(6)]
                )
            )
            time.sleep(0.02)
    t1, t2 = batches[1][0].store_timestamp, batches[2][0].store_timestamp
    out = run_rmqfs("print-msg", root, "-t", "T", "-b", t1, "-e", t2, "--json").stdout
    assert [json.loads(x)["body"] for x in out.splitlines()] == [
        "b1m0",
        "b1m2",
        "b1m4",
        "b1m1",
        "b1m3",
        "b1m5",
    ]
    human = time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(t1 // 1000)) + f":{t1 % 1000:03d}"
    out2 = run_rmqfs("print-msg", root, "-t", "T", "-b", human, "-e", t2, "--json").stdout
    assert out2 == out
    out = run_rmqfs("print-msg", root, "-t", "T", "-s", "Tag1 || Tag2", "-i", "1", "--json").stdout
    assert [json.loads(x)["body"] for x in out.splitlines()] == [
        "b0m1",
        "b0m5",
        "b1m1",
        "b1m5",
        "b2m1",
        "b2m5",
    ]
    # the engine's parser (getMessage's): "*" is every message; blank parts only, none
    every = run_rmqfs("print-msg", root, "-t", "T", "-s", " * ", "--json").stdout
    assert len(every.splitlines()) == 18
    assert run_rmqfs("print-msg", root, "-t", "T", "-s", " || ", "--json").stdout == ""


@pytest.mark.parametrize(
    "expr",
    [
        None,
        "",
        " ",
        "*",
        " * ",
        "TagA",
        " TagA ",
        "TagA||TagB",
        "TagA || TagB ||",
        "a||a",
        "Tä g||*",
        "||",
        " || ",
    ],
)
def test_print_msg_subscription_is_the_engines(expr):
    """printMsg -s parses with engine.service.getmessage (subscription_tags, parse_subscription), not
    a copy of its own (issue 17, item 2d): the same tags and tagsCodes as admin's old parser,
    except an expression of blank parts only, which subscribes to nothing (RocketMQ's
    FilterAPI builds empty tag and code sets), where the old copy read it as every message."""
    from rmqfs.engine.format.javahash import tags_code
    from rmqfs.engine.service.getmessage import parse_subscription, subscription_tags

    def old(e):  # mount/admin.py's _parse_sub_expression before issue 17
        if e is None or e.strip() in ("", "*"):
            return None
        tags = {t.strip() for t in e.split("||") if t.strip()}
        return tags or None

    tags, codes = subscription_tags(expr), parse_subscription(expr)
    if expr is not None and expr.strip() in ("||",):
        assert old(expr) is None and tags == codes == frozenset()
        return
    assert tags == old(expr)
    assert codes == (None if tags is None else {tags_code(t) for t in tags})


def test_query_msg(store, conf):
    root, res = store
    r = res[10]  # keys "key10 blk3"
    out = run_rmqfs("query-msg", root, "-t", "HDFS", "-k", "key10", "--config", conf).stdout
    assert out.splitlines() == [
        f"{'#Message ID':<34} {'#UNIQ_KEY':<34} {'#QID':>4} {'#Offset':>10}",
        f"{r.msg_id:<34} {r.uniq_key:<34} {r.queue_id:>4} {r.queue_offset:>10}",
    ]
    out = run_rmqfs(
        "query-msg", root, "-t", "HDFS", "-k", "blk3", "-m", "5", "--json", "--config", conf
    ).stdout
    want = [x for i, x in enumerate(res) if i % 7 == 3][-5:][::-1]
    assert [json.loads(x)["commitLogOffset"] for x in out.splitlines()] == [
        x.commitlog_offset for x in want
    ]
    for ident in (r.msg_id, r.uniq_key):
        out = run_rmqfs("query-msg", root, "-i", ident, "--config", conf).stdout
        lines = out.splitlines()
        assert lines[0] == f"OffsetID:            {r.msg_id}"
        assert lines[1] == "Topic:               HDFS"
        assert f"Queue Offset:        {r.queue_offset}" in lines
        assert f"CommitLog Offset:    {r.commitlog_offset}" in lines
        assert lines[-1] == f"Message Body:        {_hdfs_lines()[10].decode().rstrip()}"
    out = run_rmqfs(
        "query-msg",
        root,
        "-t",
        "HDFS",
        "-q",
        r.queue_id,
        "-o",
        r.queue_offset,
        "--json",
        "--config",
        conf,
    ).stdout
    assert json.loads(out)["msgId"] == r.msg_id
    miss = run_rmqfs("query-msg", root, "-i", "0" * 32, "--config", conf, check=False)
    assert miss.returncode == 1 and "no message with msgId" in miss.stderr


# ----------------------------------------------------------------------------------------------
# topics, consumers, offsets


def test_topic_status_and_list(store, conf):
    root, res = store
    out = run_rmqfs("topic-status", root, "-t", "HDFS", "--config", conf).stdout.splitlines()
    from rmqfs.mount.admin import format_time

    assert out[0].split() == [
        "#Broker",
        "Name",
        "#QID",
        "#Min",
        "Offset",
        "#Max",
        "Offset",
        "#Last",
        "Updated",
    ]
    for q in range(4):
        last = max((x for x in res if x.queue_id == q), key=lambda x: x.queue_offset)
        assert out[1 + q] == (
            f"{'broker-t':<24} {q:>4} {0:>12} {300:>12} {format_time(last.store_timestamp)}"
        )
    assert run_rmqfs("topic-list", root).stdout == "HDFS\n"


def test_consumer_progress_and_reset_offset(store, conf):
    root, res = store
    with MessageStore(root, _cfg()) as s:
        s.commit_offset("G1", "HDFS", 0, 100)
        s.commit_offset("G1", "HDFS", 2, 300)
        s.commit_offset("G2", "HDFS", 1, 5)
    out = run_rmqfs("consumer-progress", root, "--config", conf).stdout.splitlines()
    assert out == [
        f"{'#Group':<40} {'#Diff Total':>12}",
        f"{'G1':<40} {800:>12}",
        f"{'G2':<40} {1195:>12}",
    ]
    with MessageStore(root, _cfg()) as s:
        s.create_topic("Other", 1)
        s.commit_offset("G3", "Other", 0, 0)
    out = run_rmqfs("consumer-progress", root, "-t", "HDFS", "--config", conf).stdout
    assert "G3" not in out and "G1" in out
    out = run_rmqfs("consumer-progress", root, "-g", "G1", "--config", conf).stdout.splitlines()
    from rmqfs.mount.admin import format_time

    by_q = {(x.queue_id, x.queue_offset): x for x in res}
    rows = [
        (0, 100, by_q[(0, 99)].store_timestamp),
        (1, 0, 0),
        (2, 300, by_q[(2, 299)].store_timestamp),
        (3, 0, 0),
    ]
    assert out[1:5] == [
        f"{'HDFS':<32} {'broker-t':<16} {q:>4} {300:>14} {c:>16} {300 - c:>10} {format_time(ts)}"
        for q, c, ts in rows
    ]
    assert out[-1] == "Consume Diff Total: 800"
    r = run_rmqfs("consumer-progress", root, "-g", "nobody", check=False)
    assert r.returncode == 1 and "consumer group nobody does not exist" in r.stderr

    # by time: the first message stored at or after the 150th message of queue 0's time
    ts = by_q[(0, 150)].store_timestamp
    out = run_rmqfs(
        "reset-offset", root, "-g", "G1", "-t", "HDFS", "-s", ts, "--config", conf
    ).stdout.splitlines()
    with MessageStore(root, _cfg(), read_only=True) as s:
        expect = {q: s.offset_by_time("HDFS", q, ts) for q in range(4)}
        got = {q: s.consumer_offsets.query("G1", "HDFS", q) for q in range(4)}
    assert got == expect and expect[0] <= 150
    assert out[1].split() == ["HDFS", "0", "100", str(expect[0])]
    assert out[2].split() == ["HDFS", "1", "-", str(expect[1])]
    # by offset, one queue; the file stays valid JSON and keeps the other group
    run_rmqfs("reset-offset", root, "-g", "G2", "-t", "HDFS", "-o", "7", "-q", "1")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["HDFS@G2"] == {"1": 7}
    assert doc["offsetTable"]["HDFS@G1"]["0"] == expect[0]
    # now: every queue to its max offset
    run_rmqfs("reset-offset", root, "-g", "G2", "-t", "HDFS", "-s", "now")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["HDFS@G2"] == {str(q): 300 for q in range(4)}

    # --rollback-only (mqadmin's -f false): a queue whose offset would move forward is kept
    run_rmqfs("reset-offset", root, "-g", "G3", "-t", "HDFS", "-o", "50", "-q", "0")
    run_rmqfs("reset-offset", root, "-g", "G3", "-t", "HDFS", "-o", "250", "-q", "1")
    out = run_rmqfs(
        "reset-offset", root, "-g", "G3", "-t", "HDFS", "-o", "100", "--rollback-only"
    ).stdout.splitlines()
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    # queue 0 would move 50 -> 100 (forward): kept; queue 1 goes back; 2 and 3 had none
    # (measured from their min offset 0, as mqadmin does): kept
    assert doc["offsetTable"]["HDFS@G3"] == {"0": 50, "1": 100}
    assert out[1].split() == ["HDFS", "0", "50", "(kept)"]
    assert out[2].split() == ["HDFS", "1", "250", "100"]
    # mqadmin's names: -f false is --rollback-only, -f true (the default) is not
    run_rmqfs("resetOffsetByTime", root, "-g", "G3", "-t", "HDFS", "-s", "-1", "-f", "false")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["HDFS@G3"] == {"0": 50, "1": 100}
    run_rmqfs("resetOffsetByTime", root, "-g", "G3", "-t", "HDFS", "-s", "-1", "-f", "true")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["HDFS@G3"] == {str(q): 300 for q in range(4)}
    # skipAccumulatedMessage is the max offset (timestamp -1), not the time now: messages
    # stamped after this host's clock are skipped too
    run_rmqfs("update-sub-group", root, "-g", "G4")
    run_rmqfs("skipAccumulatedMessage", root, "-g", "G4", "-t", "HDFS")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["HDFS@G4"] == {str(q): 300 for q in range(4)}
    # a reset of every queue is one write: a queue out of range refuses all of them
    run_rmqfs("update-sub-group", root, "-g", "G5")
    r = run_rmqfs("reset-offset", root, "-g", "G5", "-t", "HDFS", "-o", "301", check=False)
    assert r.returncode == 1 and "outside" in r.stderr
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert "HDFS@G5" not in doc["offsetTable"]
    r = run_rmqfs("reset-offset", root, "-g", "G6", "-t", "HDFS", "-o", "1", check=False)
    assert r.returncode == 1 and "consumer group G6 does not exist (groups: G1, G2" in r.stderr


def test_skip_accumulated_reaches_messages_stamped_after_this_hosts_clock(tmp_path, monkeypatch):
    """skipAccumulatedMessage sends timestamp -1 (the max offset); it ran as a search for the
    time now, which left the messages of a broker whose clock ran ahead unskipped (a review:
    Diff 3 after the skip)."""
    import rmqfs.engine.store as store_mod

    real = time.time
    monkeypatch.setattr(store_mod.time, "time", lambda: real() + 3600)  # an hour ahead
    root = tmp_path / "store"
    with MessageStore(str(root), _cfg()) as s:
        s.create_topic("T", 1)
        s.put_bodies("T", [b"a", b"b", b"c"])
        s.create_group("g")
    monkeypatch.undo()
    run_rmqfs("skipAccumulatedMessage", root, "-g", "g", "-t", "T")
    doc = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert doc["offsetTable"]["T@g"] == {"0": 3}


def test_produce_says_what_it_stored_when_the_disk_fills(tmp_path, monkeypatch, capsys):
    """A full disk (OSError ENOSPC, not a StoreError) in the middle of ``rmqfs produce`` said
    only "No space left on device": the batches stored before it went unreported and a retry
    of the file stored them twice. It says how many were produced, as for a refused message."""
    import errno

    from rmqfs.mount.cli import main

    src = tmp_path / "lines.txt"
    src.write_bytes(b"".join(b"line %06d %s\n" % (i, b"x" * 80) for i in range(30000)))
    real = MessageStore.put_bodies
    calls = []

    def full_on_the_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MessageStore, "put_bodies", full_on_the_second)
    root = tmp_path / "store"
    assert main(["produce", str(root), "-t", "T", "-c", str(src)]) == 1
    err = capsys.readouterr().err
    monkeypatch.undo()
    with MessageStore(str(root), read_only=True) as s:
        stored = sum(s.max_offset("T", q) for q in s.queue_ids("T"))
    assert 0 < stored < 30000
    # the batch refused is named by its lines (one message a line here), and what came before
    assert f"No space left on device; {src}, lines {stored + 1}.." in err
    assert f"none of them produced, nor anything after; {stored} messages produced before" in err


def test_clean_deletes_expired_files(store, conf):
    root, res = store
    segs = sorted((root / "commitlog").iterdir())
    old = time.time() - 100 * 3600
    for p in segs[:3]:
        os.utime(p, (old, old))
    r = run_rmqfs("clean", root, "--config", conf)
    lines = r.stdout.splitlines()
    assert lines[:3] == [f"deleted CommitLog commitlog/{p.name}" for p in segs[:3]]
    assert lines[-1].startswith(
        f"deleted {len(lines) - 1} files; CommitLog min offset 0 -> "
        f"{3 * SEG} (fileReservedTime 72 h)"
    )
    assert not any(p.exists() for p in segs[:3])
    v = _verify(root, conf)
    assert f"offsets [{3 * SEG}, " in v.stdout and "OK: no errors, 0 warnings" in v.stdout
    first_live = min(
        x.queue_offset for x in res if x.queue_id == 0 and x.commitlog_offset >= 3 * SEG
    )
    out = run_rmqfs("topic-status", root, "-t", "HDFS", "--config", conf).stdout.splitlines()
    assert out[1].split()[2:4] == [str(first_live), "300"]
    again = run_rmqfs("clean", root, "--config", conf).stdout
    assert again.startswith("deleted 0 files")
    r = run_rmqfs("clean", root, "--config", conf, "--file-reserved-time", "0")
    assert f"deleted CommitLog commitlog/{segs[3].name}" in r.stdout
    for bad in ("inf", "nan", "-1", "x"):  # usage errors, no traceback
        r = run_rmqfs("clean", root, "--config", conf, "--file-reserved-time", bad, check=False)
        assert r.returncode == 2 and "Traceback" not in r.stderr, bad
        assert "--file-reserved-time" in r.stderr, bad
    assert f"commitlog/{segs[-1].name}" not in r.stdout  # never the last file


def test_produce_stops_at_an_oversized_line(tmp_path):
    """A line over maxMessageSize stops ``rmqfs produce`` there, named by its number: the
    lines before it (in its batch too) are produced, none from it on; a line that never ends
    (``/dev/zero``) is refused as soon as it is too long, not held whole in memory."""
    src = tmp_path / "in.txt"
    src.write_bytes(b"a\n\n\n\n" + b"x" * (4 * 1024 * 1024 + 1) + b"\nb\n")
    r = run_rmqfs("produce", tmp_path / "s", "-t", "T", "-c", src, check=False)
    assert r.returncode == 1
    assert r.stderr == (
        f"rmqfs: {src}, line 5: the message body is 4194305 bytes, more than maxMessageSize "
        "4194304; 1 messages produced before it, none from it on\n"
    )
    small = tmp_path / "small.txt"  # the same, the long line within one read
    small.write_bytes(b"c\n\n" + b"y" * 2000 + b"\nd\n")
    conf = tmp_path / "broker.conf"
    conf.write_text("maxMessageSize=1024\n")
    r = run_rmqfs("produce", tmp_path / "s", "-t", "T", "--config", conf, small, check=False)
    assert r.returncode == 1 and r.stderr == (
        f"rmqfs: {small}, line 3: the message body is 2000 bytes, more than maxMessageSize "
        "1024; 1 messages produced before it, none from it on\n"
    )
    with MessageStore(tmp_path / "s", read_only=True) as s:
        got = [rec.body for q in s.queue_ids("T") for _, rec in s.iter_queue("T", q)]
    assert sorted(got) == [b"a", b"c"]
    r = run_rmqfs("produce", tmp_path / "s", "-t", "T", "/dev/zero", check=False, timeout=60)
    assert r.returncode == 1 and r.stderr == (
        "rmqfs: /dev/zero, line 1: longer than maxMessageSize (4194304 bytes); the lines "
        "before it were produced, none from it on\n"
    )
    r = run_rmqfs("produce", tmp_path / "s", "-t", "T", "--body", "", check=False)
    assert r.returncode == 1 and "the message body length is zero" in r.stderr


def test_print_and_query_never_show_a_damaged_record(tmp_path, conf):
    """Issue 15 item 5a: a body that fails its BODYCRC is never printed: print-msg prints the
    messages before it and fails naming the offset; every query-msg mode that finds it fails."""
    from stores import flip_body_byte

    root = tmp_path / "store"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"line %d" % i, keys=f"key{i}") for i in range(6)])
        msg_id = s.get_message("T", 0, 3).msg_id
    off = flip_body_byte(root, "T", 0, 3, _cfg())
    p = run_rmqfs("print-msg", root, "-t", "T", "--json", "--config", conf, check=False)
    assert p.returncode == 1 and f"body CRC mismatch (at offset {off})" in p.stderr
    assert [json.loads(x)["body"] for x in p.stdout.splitlines()] == ["line 0", "line 1", "line 2"]
    for args in (["-i", msg_id], ["-t", "T", "-k", "key3"], ["-t", "T", "-q", "0", "-o", "3"]):
        r = run_rmqfs("query-msg", root, *args, "--config", conf, check=False)
        assert r.returncode == 1 and f"offset {off}" in r.stderr, (args, r.stdout, r.stderr)
        assert "line" not in r.stdout


# ----------------------------------------------------------------------------------------------
# topic and group administration (mqadmin deleteTopic, updateTopic, deleteSubGroup,
# updateSubGroup, cloneGroupOffset), queryCq, statsAll, getBrokerConfig, brokerStatus


def _config_json(root, name):
    return json.loads((root / "config" / name).read_text())


def test_delete_topic_leaves_what_the_broker_would(store, conf):
    """deleteTopic: topics.json without the entry, consumequeue/HDFS/ gone, every HDFS@group
    offset gone (cleanOffsetByTopic), other topics and offsets untouched; the CommitLog stays
    byte for byte; the independent reader reads it and verify is clean."""
    import refreader

    root, _ = store
    with MessageStore(root, _cfg()) as s:
        s.create_topic("Other", 2)
        s.put_messages([Message("Other", b"o%d" % i) for i in range(10)])
        s.commit_offset("G1", "HDFS", 0, 5)
        s.commit_offset("G1", "Other", 0, 1)
        s.commit_offset("G2", "HDFS", 1, 2)
    commitlog = {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()}
    other_cq = {
        str(p.relative_to(root)): p.read_bytes()
        for p in (root / "consumequeue" / "Other").rglob("*")
        if p.is_file()
    }
    r = run_rmqfs("deleteTopic", root, "-t", "HDFS", "--config", conf)
    assert "deleted topic HDFS: 4 ConsumeQueues, 2 consumer offset entries" in r.stdout
    assert list(_config_json(root, "topics.json")["topicConfigTable"]) == ["Other"]
    offsets = _config_json(root, "consumerOffset.json")
    assert offsets["offsetTable"] == {"Other@G1": {"0": 1}}
    assert offsets["groupTopicMap"] == {"G1": ["Other"]}
    assert not (root / "consumequeue" / "HDFS").exists()
    assert {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()} == commitlog
    assert {
        str(p.relative_to(root)): p.read_bytes()
        for p in (root / "consumequeue" / "Other").rglob("*")
        if p.is_file()
    } == other_cq
    recs = refreader.read_commitlog(root / "commitlog")
    assert sum(r["topic"] == "HDFS" for r in recs) == 1200  # still there, until expiry
    assert list(refreader.read_consumequeue(root, "Other", 0))
    v = _verify(root, conf)
    assert "OK: no errors, 0 warnings" in v.stdout, v.stdout
    assert run_rmqfs("topicList", root).stdout.split() == ["Other"]
    r = run_rmqfs("delete-topic", root, "-t", "HDFS", check=False)
    assert r.returncode == 1 and "topic HDFS does not exist" in r.stderr


def test_a_deleted_topic_stays_deleted_after_a_crash(tmp_path, conf):
    """RocketMQ re-dispatches from the newest ConsumeQueue position (abnormal recovery: from
    an older segment), which would bring a deleted topic's queues back; rmqfs remembers the
    deletion. Delete, write more to other topics, crash (abort left, no checkpoint), reopen:
    the topic stays deleted, the others recover, verify is clean; also after recover
    --rebuild, which re-dispatches the whole CommitLog."""
    root = tmp_path / "store"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("A", 2)
        s.create_topic("B", 2)
        s.put_messages([Message("A" if i % 2 else "B", b"x" * 100) for i in range(900)])
    run_rmqfs("delete-topic", root, "-t", "B", "--config", conf)
    code = (
        "import sys, os; sys.path.insert(0, %r)\n"
        "from engine.store import MessageStore, Message, StoreConfig\n"
        "s = MessageStore(%r, StoreConfig(mapped_file_size_commit_log=65536, "
        "mapped_file_size_consume_queue=2000, max_hash_slot_num=64, max_index_num=256))\n"
        "s.put_messages([Message('A', b'after') for _ in range(50)])\n"
        "s.flush_commitlog()\n"
        "os._exit(9)\n"
    ) % (str(REPO), str(root))
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert (root / "abort").exists()
    (root / "checkpoint").unlink()  # recovery scans from the first segment
    with MessageStore(root, _cfg()) as s:
        assert s.topic_names() == ["A"]
        assert sum(s.max_offset("A", q) for q in (0, 1)) == 450 + 50
    assert not (root / "consumequeue" / "B").exists()
    assert "OK: no errors, 0 warnings" in _verify(root, conf).stdout
    run_rmqfs("recover", root, "--rebuild", "--config", conf)
    assert not (root / "consumequeue" / "B").exists()
    assert run_rmqfs("topic-list", root, "--config", conf).stdout.split() == ["A"]
    # the name can be used again: its new records are the new topic's
    run_rmqfs("update-topic", root, "-t", "B", "-w", "1", "-r", "1", "--config", conf)
    with MessageStore(root, _cfg()) as s:
        s.put_messages([Message("B", b"new")])
    with MessageStore(root, _cfg(), read_only=True) as s:
        assert [r.body for _, r in s.iter_queue("B", 0)] == [b"new"]
    assert "OK: no errors, 0 warnings" in _verify(root, conf).stdout


def test_delete_topic_refuses_system_topics_and_a_locked_store(store, conf):
    root, _ = store
    with MessageStore(root, _cfg()) as s:
        s.put_messages([Message("HDFS", b"later", delay_level=2)])
        r = run_rmqfs("delete-topic", root, "-t", "HDFS", check=False)
        assert r.returncode == 1 and f"is locked by process {os.getpid()}" in r.stderr
    r = run_rmqfs("delete-topic", root, "-t", "SCHEDULE_TOPIC_XXXX", check=False)
    assert r.returncode == 1 and "system topic" in r.stderr
    assert (root / "consumequeue" / "SCHEDULE_TOPIC_XXXX").is_dir()


def test_delete_topic_of_a_broker_written_store_keeps_its_layout(tmp_path):
    """A store RocketMQ 4.9.8 wrote (no topics.json: topics come from consumequeue/):
    deleting one topic removes its directory and nothing else of the broker's files."""
    import refreader
    from conftest import copy_fixture

    root = copy_fixture("rocketmq-4.9.8-written/store", tmp_path / "store")
    before = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    run_rmqfs("delete-topic", root, "-t", "OracleTopicB")
    after = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    gone = {k for k in before if k not in after}
    assert gone and all(k.startswith("consumequeue/OracleTopicB/") for k in gone)
    assert set(after) - set(before) <= {"config/rmqfs.deletedTopics.json", "checkpoint"}
    for k in after:
        if (
            k.startswith(("commitlog/", "consumequeue/", "index/"))
            or k == "config/delayOffset.json"
        ):
            assert after[k] == before[k], k
    assert not (root / "config" / "topics.json").exists()
    assert {r["topic"] for r in refreader.read_commitlog(root / "commitlog")} >= {"OracleTopicB"}
    assert "OK: no errors" in _verify(root).stdout
    assert run_rmqfs("topicList", root).stdout.split() == ["OracleTopicA"]


def test_update_topic(store, conf):
    root, _ = store
    r = run_rmqfs("update-topic", root, "-t", "HDFS", "-w", "2", "-p", "4")
    entry = _config_json(root, "topics.json")["topicConfigTable"]["HDFS"]
    assert (entry["readQueueNums"], entry["writeQueueNums"], entry["perm"]) == (4, 2, 4)
    assert "updated topic HDFS" in r.stdout
    r = run_rmqfs("produce", root, "-t", "HDFS", os.devnull, check=False)
    run_rmqfs("update-topic", root, "-t", "New", "-r", "8", "-w", "8", "-o", "true")
    entry = _config_json(root, "topics.json")["topicConfigTable"]["New"]
    assert (entry["readQueueNums"], entry["writeQueueNums"], entry["perm"], entry["order"]) == (
        8,
        8,
        6,
        True,
    )
    for args, what in (
        (["-w", "0"], "writeQueueNums 0"),
        (["-r", "1025"], "readQueueNums"),
        (["-p", "3"], "perm 3"),
        (["-o", "maybe"], "-o takes true or false"),
        (["-w", "x"], "-w takes an integer"),
    ):
        r = run_rmqfs("update-topic", root, "-t", "HDFS", *args, check=False)
        assert r.returncode == 1 and what in r.stderr, (args, r.stderr)
    r = run_rmqfs("update-topic", root, "-t", "RMQ_SYS_TRACE_TOPIC", "-w", "1", check=False)
    assert r.returncode == 1 and "system topic" in r.stderr
    assert _config_json(root, "topics.json")["topicConfigTable"]["HDFS"]["perm"] == 4
    assert "OK: no errors" in _verify(root, conf).stdout


def test_sub_groups_and_clone_offset(store, conf):
    """updateSubGroup creates or changes SubscriptionGroupConfig fields; deleteSubGroup drops
    the entry and, with -r true, the group's offsets (removeOffset); cloneGroupOffset copies
    topic@src to topic@dest (cloneOffset)."""
    root, _ = store
    with MessageStore(root, _cfg()) as s:
        s.commit_offset("G1", "HDFS", 0, 10)
        s.commit_offset("G1", "HDFS", 3, 30)
    run_rmqfs(
        "updateSubGroup",
        root,
        "-g",
        "G1",
        "-s",
        "false",
        "-q",
        "2",
        "-r",
        "5",
        "-d",
        "false",
        "-w",
        "0",
        "-i",
        "1",
    )
    g = _config_json(root, "subscriptionGroup.json")["subscriptionGroupTable"]["G1"]
    assert (
        g["consumeEnable"],
        g["retryQueueNums"],
        g["retryMaxTimes"],
        g["consumeBroadcastEnable"],
        g["whichBrokerWhenConsumeSlowly"],
        g["brokerId"],
        g["groupName"],
        g["consumeFromMinEnable"],
    ) == (False, 2, 5, False, 0, 1, "G1", False)  # created as mqadmin does: fromMin false
    run_rmqfs("update-sub-group", root, "-g", "G1", "-s", "true")
    g = _config_json(root, "subscriptionGroup.json")["subscriptionGroupTable"]["G1"]
    assert (g["consumeEnable"], g["retryQueueNums"]) == (True, 2)
    for args, what in (
        (["-s", "yes"], "-s takes true or false"),
        (["-q", "-1"], "retryQueueNums -1"),
        (["-i", "x"], "-i takes an integer"),
    ):
        r = run_rmqfs("update-sub-group", root, "-g", "G1", *args, check=False)
        assert r.returncode == 1 and what in r.stderr, (args, r.stderr)

    r = run_rmqfs("cloneGroupOffset", root, "-s", "G1", "-d", "G9", "-t", "HDFS")
    assert "cloned 2 offsets" in r.stdout
    assert _config_json(root, "consumerOffset.json")["offsetTable"]["HDFS@G9"] == {"0": 10, "3": 30}
    r = run_rmqfs("clone-group-offset", root, "-s", "nobody", "-d", "G9", "-t", "HDFS", check=False)
    assert r.returncode == 1 and "nobody has no offsets of HDFS" in r.stderr

    run_rmqfs("deleteSubGroup", root, "-g", "G1")  # mqadmin's default: offsets kept
    assert "G1" not in _config_json(root, "subscriptionGroup.json")["subscriptionGroupTable"]
    assert "HDFS@G1" in _config_json(root, "consumerOffset.json")["offsetTable"]
    run_rmqfs("delete-sub-group", root, "-g", "G1", "-r", "true")
    table = _config_json(root, "consumerOffset.json")["offsetTable"]
    assert "HDFS@G1" not in table and "HDFS@G9" in table
    r = run_rmqfs("delete-sub-group", root, "-g", "G1", check=False)
    assert r.returncode == 1 and "consumer group G1 does not exist" in r.stderr


def test_query_cq(store, conf):
    import refreader

    root, res = store
    out = run_rmqfs(
        "queryCq", root, "-t", "HDFS", "-q", "1", "-i", "5", "-c", "3", "--config", conf
    ).stdout.splitlines()
    units = refreader.read_consumequeue(root, "HDFS", 1)[5:8]
    by_off = {r.commitlog_offset: r for r in res}
    assert len(out) == 4
    for line, (off, size, tc), qoff in zip(out[1:], units, range(5, 8)):
        f = line.split()
        assert f[:5] == [str(qoff), str(off), str(size), str(tc), str(by_off[off].store_timestamp)]
    r = run_rmqfs("query-cq", root, "-t", "HDFS", "-q", "1", "-i", "999", check=False)
    assert r.returncode == 1 and "index 999 is not in HDFS/1" in r.stderr


def test_stats_all_counts_by_store_time(tmp_path, conf):
    """statsAll from units and store timestamps: messages and bytes of the last minute, hour
    and day before --now, and in total; -q adds a row per queue."""
    root = tmp_path / "store"
    with MessageStore(root, _cfg()) as s:
        s.create_topic("T", 2)
        res = s.put_messages([Message("T", b"m%d" % i) for i in range(40)])
    ts = sorted(r.store_timestamp for r in res)
    now = ts[-1]
    out = run_rmqfs(
        "stats-all", root, "--now", now, "-q", "--json", "--config", conf
    ).stdout.splitlines()
    rows = [json.loads(x) for x in out]
    tot = rows[0]
    assert tot["queueId"] is None and tot["messages"] == 40
    assert tot["bytes"] == sum(r.size for r in res)
    assert tot["minute"]["messages"] == sum(1 for t in ts if now - 60_000 <= t <= now)
    assert tot["day"] == {"messages": 40, "bytes": tot["bytes"]}
    assert [r["queueId"] for r in rows[1:]] == [0, 1]
    assert sum(r["messages"] for r in rows[1:]) == 40
    # a day later nothing is recent; the totals stay
    out = run_rmqfs("stats-all", root, "--now", now + 2 * 86_400_000, "--json").stdout
    row = json.loads(out.splitlines()[0])
    assert row["day"]["messages"] == 0 and row["messages"] == 40
    assert run_rmqfs("stats-all", root, "-a", "--now", now + 2 * 86_400_000, "--json").stdout == ""
    text = run_rmqfs("stats-all", root, "--now", "now").stdout.splitlines()
    assert text[0].startswith("#Topic") and text[1].split()[:2] == ["T", "all"]


def test_get_broker_config_and_broker_status(store, conf):
    root, _ = store
    out = run_rmqfs("getBrokerConfig", root, "--config", conf).stdout.splitlines()
    conf_items = dict(line.split("=", 1) for line in out)
    assert conf_items["mappedFileSizeCommitLog"] == "65536"
    assert conf_items["mappedFileSizeConsumeQueue"] == "2000"
    assert conf_items["brokerName"] == "broker-t"
    assert conf_items["flushDiskType"] == "ASYNC_FLUSH"
    assert conf_items["messageIndexEnable"] == "true"
    assert conf_items["storePathRootDir"] == str(root)
    assert "enableDLegerCommitLog" not in conf_items
    # the geometry the store's files have, whatever the defaults, and a DLedger replica's keys
    from conftest import FIXTURES

    items = dict(
        line.split("=", 1)
        for line in run_rmqfs(
            "getBrokerConfig", FIXTURES / "rocketmq-4.9.8-dledger/store"
        ).stdout.splitlines()
    )
    assert (items["maxHashSlotNum"], items["maxIndexNum"]) == ("64", "256")
    assert (items["enableDLegerCommitLog"], items["dLegerSelfId"]) == ("true", "n0")
    st = json.loads(run_rmqfs("broker-status", root, "--json", "--config", conf).stdout)
    from rmqfs.engine.live.status import store_status

    with MessageStore(root, _cfg(), read_only=True, follow=False) as s:
        s.config.broker_name = "broker-t"
        expect = store_status(s)
    # where the name came from (issue 35, item 5): the broker.conf given
    assert st["brokerNameFrom"] == f"brokerName= in {conf}"
    expect["brokerNameFrom"] = st["brokerNameFrom"]
    for d in (st, expect):  # how long each open's recovery took differs
        d["recovery"].pop("seconds")
    assert st == json.loads(json.dumps(expect))
    assert st["messages"] == 1200 and st["topics"] == 1
    # issue 22, section 3: a cleanly closed store that no one writes is no follower, and the
    # time of its last record is known
    assert st["follower"] is False and st["lastStoreTimestamp"] > 0
    text = run_rmqfs("broker-status", root, "--config", conf).stdout
    assert f"{'commitLogMaxOffset':<32}: {st['commitLogMaxOffset']}" in text


def test_mqadmin_names_and_one_time_syntax(store, conf):
    """Every command answers to its mqadmin name; every time option takes ms, now and
    yyyy-MM-dd#HH:mm:ss:SSS (print-msg -e now used to be refused)."""
    from rmqfs.mount.admin import parse_time

    root, _ = store
    for name in (
        "topicList",
        "topicStatus -t HDFS",
        "consumerProgress",
        "printMsg -t HDFS -s TagA -d false",
        "printMsgByQueue -t HDFS -i 0 -d false",
        "queryMsgByOffset -t HDFS -i 0 -o 1",
    ):
        assert run_rmqfs(*name.split()[:1], root, *name.split()[1:]).returncode == 0, name
    out = run_rmqfs("print-msg", root, "-t", "HDFS", "-b", "0", "-e", "now", "-d", "false").stdout
    assert out.count("MSGID:") == 1200
    assert run_rmqfs("printMsg", root, "-t", "HDFS", "-e", "2000-01-01#00:00:00:000").stdout == ""
    t = parse_time("2026-11-22#00:30:00:123")
    assert t % 1000 == 123 and parse_time(str(t)) == t
    assert abs(parse_time("now") - time.time() * 1000) < 5000
    for bad in (
        "yesterday",
        "2026-11-22 00:30:00",
        "2026-11-22#00:30:00:1234",
        "\u00b2",  # a digit to str.isdigit, not to Long.parseLong (was a bare int() error)
        "--5",
        "99999999999999999999",  # past a Java long
    ):
        r = run_rmqfs("print-msg", root, "-t", "HDFS", f"-b={bad}", check=False)
        assert r.returncode == 1 and "bad time" in r.stderr and "now" in r.stderr, bad
        r = run_rmqfs("resetOffsetByTime", root, "-g", "G", "-t", "HDFS", f"-s={bad}", check=False)
        assert r.returncode == 1 and "bad time" in r.stderr, bad
    run_rmqfs("update-sub-group", root, "-g", "G")
    run_rmqfs("resetOffsetByTime", root, "-g", "G", "-t", "HDFS", "-s", "now")
    run_rmqfs("deleteExpiredCommitLog", root)


def test_produce_delayed_and_timed_messages(tmp_path):
    """``rmqfs produce --delay-level/--deliver-time/--delay-ms`` stores them as the broker does
    (SCHEDULE_TOPIC_XXXX; rmq_sys_wheel_timer); timed ones only where a timer store is."""
    from rmqfs.engine.read.scheduled import waiting_messages

    root = tmp_path / "s"
    run_rmqfs(
        "produce", root, "-t", "T", "-c", "--queues", "1", "--body", "d", "--delay-level", "4"
    )
    r = run_rmqfs("produce", root, "-t", "T", "--body", "t", "--delay-ms", "60000", check=False)
    assert r.returncode == 1 and "no timerwheel" in r.stderr
    with open(root / "timerwheel", "wb") as f:
        f.truncate(38_707_200)
    deliver = (int(time.time()) + 600) * 1000 + 5
    run_rmqfs("produce", root, "-t", "T", "--body", "t", "--deliver-time", str(deliver))
    with MessageStore(root, read_only=True) as s:
        got = [(w.record.body, w.real_topic, w.source, w.deliver_ms) for w in waiting_messages(s)]
        store_ts = s.get_message("SCHEDULE_TOPIC_XXXX", 3, 0).store_timestamp
    assert sorted(got) == [
        (b"d", "T", "delayLevel", store_ts + 30_000),
        (b"t", "T", "timer", deliver - 5),
    ]


def test_produce_refuses_a_store_marked_lmq_only_by_its_offsets_file(tmp_path):
    """Issue 36 item 4: one line naming the file, exit 1, nothing created (before: 73 s and
    10,001 %LMQ% ConsumeQueue directories for one message)."""
    from lmqstore import build_lmq_store

    root = tmp_path / "s"
    lmq = build_lmq_store(root)
    for q in lmq:
        shutil.rmtree(root / "consumequeue" / q)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    r = run_rmqfs("produce", root, "-t", "T", src, check=False)
    assert r.returncode == 1, r.stderr
    assert "config/lmqConsumerOffset.json: LMQ consumer offsets" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def test_topic_status_of_a_store_whose_records_fan_out_to_a_million_lmq_queues(tmp_path):
    """Issue 36 item 3: 400 records naming 2,500 LMQ queues each (1,000,000 queues):
    topic-status took 34 s and 1.86 GB here (80 s, 1.9 GB in the issue); now the open builds
    at most maxLmqConsumeQueueNum queues (and one record's), says so on stderr, and the
    answer is the engine's."""
    from lmqstore import build_fanout_store

    root = tmp_path / "s"
    build_fanout_store(root, shared=False)
    t0 = time.monotonic()
    r = run_rmqfs("topic-status", root, "-t", "T")
    assert time.monotonic() - t0 < 15
    assert "Traceback" not in r.stderr and "maxLmqConsumeQueueNum 20000" in r.stderr
    (row,) = r.stdout.splitlines()[1:]
    assert row.split()[1:4] == ["0", "0", "400"]


def test_a_command_line_that_misses_an_argument_exits_2(store):
    """As offline-commands.md says (a usage error, as argparse's own): reset-offset without
    -s or -o, query-msg without a mode or with -q and no -o, produce with files and --body
    (they exited 1, found by a review)."""
    store = store[0]
    for argv in (
        ("reset-offset", store, "-g", "g", "-t", "HDFS"),
        ("query-msg", store),
        ("query-msg", store, "-t", "HDFS", "-q", "1"),
        ("produce", store, "-t", "HDFS", "--body", "x", os.devnull),
    ):
        r = run_rmqfs(*argv, check=False)
        assert r.returncode == 2 and r.stderr.startswith("rmqfs: give"), (argv, r.stderr)
    for m in ("0", "-3", "x"):  # (-m 0 said "no message with key": a count of at least 1)
        r = run_rmqfs("query-msg", store, "-t", "HDFS", "-k", "x", "-m", m, check=False)
        assert r.returncode == 2 and "-m/--max-num" in r.stderr, (m, r.stderr)


def test_ctrl_c_during_produce_says_how_many_messages_the_store_holds(tmp_path):
    """Ctrl-C while `rmqfs produce` reads its input: exit 130 and the number of messages
    produced before it, which is what the store holds (a batch being stored is stored whole
    first); it said only "interrupted" (found by a review: 49,228 lines stored, no count)."""
    import re
    import signal as sig

    from conftest import rmqfs_cmd

    store = tmp_path / "s"
    env = dict(os.environ, PYTHONPATH=SRC_PATH)
    proc = subprocess.Popen(
        rmqfs_cmd("produce", store, "-t", "T", "-c"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    try:
        assert proc.stdin is not None
        line = b"x" * 99 + b"\n"
        proc.stdin.write(line * 30_000)  # 3 MB: some batches of about 1 MiB go in
        proc.stdin.flush()
        time.sleep(3)  # (the input stays open: produce waits for more)
        proc.send_signal(sig.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    m = re.search(rb"interrupted; (\d+) messages produced before it", err)
    assert m, err
    with MessageStore(str(store), read_only=True) as s:
        held = sum(s.max_offset("T", q) for q in s.queue_ids("T"))
    assert held == int(m.group(1)) > 0


def test_produce_from_a_pipe_stores_lines_as_they_arrive(tmp_path):
    """`tail -f app.log | rmqfs produce`: lines are stored as a read returns them, not once
    1 MiB has come (raised by a review: a pipe's lines waited for 1 MiB or the end)."""
    import re
    import signal as sig

    from conftest import rmqfs_cmd

    store = tmp_path / "s"
    proc = subprocess.Popen(
        rmqfs_cmd("produce", store, "-t", "T", "-c"),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=SRC_PATH),
        cwd=REPO,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"one\ntwo\nthree\n")
        proc.stdin.flush()
        time.sleep(2)  # (the input stays open)
        proc.send_signal(sig.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert re.search(rb"interrupted; 3 messages produced before it", err), err


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_stats_all_windows_stream_in_chunks(tmp_path, monkeypatch, chunk):
    """statsAll held a whole queue's unit sizes and their running sums (33 bytes a message:
    10 GB for a queue of 300M; a review): it reads the units a chunk at a time and adds each
    to the windows it falls in. Messages stored two days, two hours, half an hour and half
    a minute before now count alike whatever the chunk, windows straddling chunks included."""
    from rmqfs.engine.live import stats
    from rmqfs.engine.service import putmessage

    now = 1_800_000_000_000
    ages = {"2d": 2 * 86_400_000, "2h": 7_200_000, "30m": 1_800_000, "30s": 30_000}
    with MessageStore(tmp_path / "s", _cfg()) as s:
        s.create_topic("T", 1)
        sizes = {}
        for name, age in ages.items():
            monkeypatch.setattr(putmessage.time, "time", lambda age=age: (now - age) / 1000)
            res = s.put_messages([Message("T", b"%s-%d" % (name.encode(), i)) for i in range(5)])
            sizes[name] = sum(r.size for r in res)
        monkeypatch.undo()
        monkeypatch.setattr(stats, "_CHUNK", chunk)
        row = stats.queue_stats(s, "T", 0, now)
    assert row["messages"] == 20 and row["bytes"] == sum(sizes.values())
    assert row["minute"] == {"messages": 5, "bytes": sizes["30s"]}
    assert row["hour"] == {"messages": 10, "bytes": sizes["30s"] + sizes["30m"]}
    assert row["day"] == {"messages": 15, "bytes": row["bytes"] - sizes["2d"]}


def test_stats_all_holds_a_chunk_not_the_queue(tmp_path, monkeypatch):
    """The memory a queue's statsAll takes is a chunk's, not the queue's (tracemalloc sees
    numpy's arrays): 200,000 units in chunks of 4,096."""
    import tracemalloc

    from rmqfs.engine.live import stats

    cfg = StoreConfig(mapped_file_size_commit_log=64 << 20)
    with MessageStore(tmp_path / "s", cfg) as s:
        s.create_topic("T", 1)
        for _ in range(4):
            s.put_bodies("T", [b"x"] * 50_000, queue_id=0, results=False)
        monkeypatch.setattr(stats, "_CHUNK", 4096)
        tracemalloc.start()
        try:
            row = stats.queue_stats(s, "T", 0, 2**62)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert row["messages"] == 200_000
    assert peak < 1_000_000, peak  # the whole queue's arrays took 5 MB and more


def test_print_msg_count_alone_reads_no_record(tmp_path, monkeypatch, capsys):
    """From a scale review: ``print-msg -p false --count`` decoded every record of the topic
    to count them (hours for a 100 GB topic). A count alone (no tag filter, nothing printed)
    comes from the ConsumeQueues' units in the range; --max, -i and -b/-e still apply, and a
    tag filter still reads the records (its exact match needs their tags)."""
    from rmqfs.engine.format.message import Message
    from rmqfs.mount.cli import main

    root = tmp_path / "store"
    with MessageStore(str(root)) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"m%d" % i, tags="A" if i % 3 else "B") for i in range(50)])

    def no_read(self, *args, **kwargs):
        raise AssertionError("a count alone read a record")

    monkeypatch.setattr(MessageStore, "read_record", no_read)
    counts = []
    for extra in ([], ["--max", "7"], ["-i", "1"], ["-b", "0", "-e", "now"]):
        assert main(["print-msg", str(root), "-t", "T", "-p", "false", "--count", *extra]) == 0
        counts.append(capsys.readouterr().err.strip())
    assert counts == ["50 messages", "7 messages", "25 messages", "50 messages"]
    monkeypatch.undo()
    assert main(["print-msg", str(root), "-t", "T", "-p", "false", "--count", "-s", "B"]) == 0
    assert capsys.readouterr().err.strip() == "17 messages"
