"""Every mqadmin name rmqfs answers to, run with mqadmin's own option letters
(mount/mqadmin.py): each gives what its rmqfs command gives, routing options (-b, -c, -n) are
checked against the store, and options that need a live cluster are refused with the reason."""

import json
import re
import shutil
import time

import pytest

from conftest import run_rmqfs
from rmqfs.engine.store import Message, MessageStore
from rmqfs.mount.mqadmin import BY_NAME, COMMANDS
from stores import copy_store
from test_admin import _cfg, conf, hdfs_store  # noqa: F401 - fixtures

#: Each subcommand's option letters, read from RocketMQ's tools/src/main/java/org/apache/
#: rocketmq/tools/command/**/*Command.java buildCommandlineOptions (apache/rocketmq 8fc57f1,
#: 2025-09); mqadmin's global -n is added to every one.
JAVA_LETTERS = {
    "sendMessage": "bcikmpt",
    "printMsg": "bcdelst",
    "printMsgByQueue": "abcdefipst",
    "consumeMessage": "bcegiost",
    "queryMsgByKey": "bcekmt",
    "queryMsgById": "cdfgistu",
    "queryMsgByOffset": "bfiot",
    "queryMsgByUniqueKey": "acdgit",
    "queryMsgTraceById": "bceit",
    "topicList": "c",
    "topicStatus": "ct",
    "consumerProgress": "cgst",
    "getConsumerStatus": "git",
    "resetOffsetByTime": "bcfgoqst",
    "skipAccumulatedMessage": "cfgt",
    "deleteTopic": "ct",
    "updateTopic": "abcoprstuw",
    "deleteSubGroup": "bcgr",
    "updateSubGroup": "abcdgimopqrsw",
    "cloneGroupOffset": "dost",
    "queryCq": "bcgiqt",
    "statsAll": "at",
    "getBrokerConfig": "bc",
    "brokerStatus": "bc",
    "deleteExpiredCommitLog": "bcn",
}

ADDR = "127.0.0.1:10911"  # the store's brokerIP1:listenPort (StoreConfig's defaults)

#: mqadmin command line -> the rmqfs command line it must equal ({m}: a msgId, {u}: a
#: UNIQ_KEY of the store's 11th message). The store: 1200 HDFS messages, group G committed.
CASES = {
    "sendMessage": (
        f"-t HDFS -p hello -k k9 -c TagZ -b broker-t -i 2 -m false -n {ADDR}",
        "produce -t HDFS --body hello -k k9 -a TagZ -i 2",
    ),
    "printMsg": (
        "-t HDFS -c UTF-8 -s TagA -b 0 -e now -d false -l X",
        "print-msg -t HDFS -s TagA -b 0 -e now -d false",
    ),
    "printMsgByQueue": (
        "-t HDFS -a broker-t -i 1 -p true -f true -s * -c UTF-8 -b 0 -e now",
        "print-msg -t HDFS -i 1 -d false --tag-counts",
    ),
    "consumeMessage": (
        "-t HDFS -b broker-t -i 2 -o 5 -c 3 -g G",
        "print-msg -t HDFS -i 2 --from-offset 5 --max 3",
    ),
    "queryMsgByKey": (
        "-t HDFS -k blk3 -m 5 -b 0 -e now -c DefaultCluster",
        "query-msg -t HDFS -k blk3 -m 5",
    ),
    "queryMsgById": ("-t HDFS -i {m} -f UTF-8 -c DefaultCluster", "query-msg -t HDFS -i {m}"),
    "queryMsgByOffset": ("-t HDFS -b broker-t -i 1 -o 7 -f UTF-8", "query-msg -t HDFS -q 1 -o 7"),
    "queryMsgByUniqueKey": (
        "-t HDFS -i {u} -c DefaultCluster",
        "query-msg -t HDFS -i {u} --first",
    ),
    "queryMsgTraceById": ("-i {u} -t RMQ_SYS_TRACE_TOPIC -b 0 -e now -c 8", "query-trace -i {u}"),
    "topicList": ("-c", "topic-list --clusters"),
    "topicStatus": ("-t HDFS -c DefaultCluster", "topic-status -t HDFS"),
    "consumerProgress": (
        "-g G -t HDFS -s false -c DefaultCluster",
        "consumer-progress -g G -t HDFS",
    ),
    "getConsumerStatus": ("-g G -t HDFS", "consumer-progress -g G -t HDFS"),
    "resetOffsetByTime": (
        f"-g G -t HDFS -s 0 -f true -q 1 -b {ADDR} -c DefaultCluster",
        "reset-offset -g G -t HDFS -s 0 -q 1",
    ),
    "skipAccumulatedMessage": (
        "-g G -t HDFS -f true -c DefaultCluster",
        "reset-offset -g G -t HDFS -s now",
    ),
    "deleteTopic": ("-t HDFS -c DefaultCluster", "delete-topic -t HDFS"),
    "updateTopic": (
        f"-t HDFS -w 2 -r 2 -p 4 -o false -b {ADDR} -c DefaultCluster",
        "update-topic -t HDFS -w 2 -r 2 -p 4 -o false",
    ),
    "deleteSubGroup": (f"-g G -r true -b {ADDR}", "delete-sub-group -g G -r true"),
    "updateSubGroup": (
        f"-g G2 -s false -m true -d true -o true -q 2 -r 5 -i 1 -w 2 -a false -b {ADDR}",
        "update-sub-group -g G2 -s false -m true -d true -o true -q 2 -r 5 -i 1 -w 2 -a false",
    ),
    "cloneGroupOffset": ("-s G -d G3 -t HDFS -o true", "clone-group-offset -s G -d G3 -t HDFS"),
    "queryCq": (f"-t HDFS -q 0 -i 3 -c 4 -b {ADDR}", "query-cq -t HDFS -q 0 -i 3 -c 4"),
    "statsAll": ("-a -t HDFS", "stats-all -a -t HDFS"),
    "getBrokerConfig": (f"-b {ADDR} -c DefaultCluster", "get-broker-config"),
    "brokerStatus": ("-c DefaultCluster", "broker-status"),
    "deleteExpiredCommitLog": (f"-b {ADDR} -c DefaultCluster -n {ADDR}", "clean"),
}


def _trace(fields):
    return "\x01".join(fields) + "\x02"


@pytest.fixture(scope="module")
def admin_built(tmp_path_factory, hdfs_store):
    """The store of :func:`admin_store` and its message 10, built once a module."""
    built, res = hdfs_store
    root = copy_store(built, tmp_path_factory.mktemp("admin") / "store")
    r = res[10]
    now = str(int(time.time() * 1000))
    with MessageStore(root, _cfg()) as s:
        s.commit_offset("G", "HDFS", 0, 3)
        s.create_topic("RMQ_SYS_TRACE_TOPIC", 1)
        body = _trace(
            ["Pub", now, "DefaultRegion", "PG", "HDFS", r.uniq_key, "TagA", "key10"]
            + [ADDR, "120", "3", "0", r.msg_id, "true", "10.0.0.9"]
        )
        body += _trace(["SubBefore", now, "DefaultRegion", "CG", "req1", r.uniq_key, "0", "k"])
        body += _trace(["SubAfter", "req1", r.uniq_key, "7", "true", "k", "0"])
        s.put_messages([Message("RMQ_SYS_TRACE_TOPIC", body.encode(), keys=r.uniq_key)])
    return root, r


@pytest.fixture
def admin_store(tmp_path, admin_built, conf):
    """The HDFS store plus a committed group G and a trace topic tracing message 10 (the
    test's own copy), its message 10 and broker.conf."""
    built, r = admin_built
    return copy_store(built, tmp_path / "store"), r, conf


def test_every_name_takes_exactly_mqadmins_letters():
    assert set(CASES) == set(BY_NAME) == set(JAVA_LETTERS)
    for c in COMMANDS:
        assert {o.letter for o in c.opts} == set(JAVA_LETTERS[c.name]) - {"n"}, c.name


def test_each_command_declares_the_mqadmin_names_that_run_it():
    """The command table (admin.COMMANDS: each rmqfs command with its mqadmin names) and the
    translations (mqadmin.COMMANDS: each mqadmin name with the rmqfs command it runs) agree."""
    from rmqfs.mount import admin

    declared = {(c.name, name) for c in admin.COMMANDS for name in c.mqadmin}
    assert declared == {(c.rmqfs, c.name) for c in COMMANDS}


def _config(path) -> dict:
    """A config/*.json without its dataVersion (a timestamp and a counter)."""
    doc = json.loads(path.read_text())
    doc.pop("dataVersion", None)
    return doc


def _same(out: str, root) -> str:
    return re.sub(r"\d+\.\d+", "N.N", out.replace(str(root), "STORE"))


def _argv(text: str, r) -> list[str]:
    return [w.format(m=r.msg_id, u=r.uniq_key) for w in text.split()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_mqadmin_name_and_letters(name, admin_store, tmp_path):
    """``rmqfs <mqadmin name> STORE <mqadmin letters>`` does what the rmqfs command does: same
    output, same files (a writing command runs on a copy each)."""
    root, r, conf = admin_store
    mq, rm = CASES[name]
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    a = run_rmqfs(name, root, *_argv(mq, r), "--config", conf)
    rm_argv = _argv(rm, r)
    b = run_rmqfs(rm_argv[0], copy, *rm_argv[1:], "--config", conf)
    # (durations in seconds, like broker-status's recovery time, differ from run to run)
    assert _same(a.stdout, root) == _same(b.stdout, copy)
    assert a.stdout.strip() or name in ("printMsg",), name
    for f in sorted((root / "config").glob("*.json")):
        assert _config(f) == _config(copy / "config" / f.name), (name, f.name)
    assert sorted(p.name for p in root.rglob("*")) == sorted(p.name for p in copy.rglob("*"))


def test_the_letters_mean_what_they_mean_in_mqadmin(admin_store):
    """A few letters that rmqfs's own spelling uses otherwise (issue 25:
    ``queryMsgByOffset -t T -b brokerName -i queueId -o offset`` failed)."""
    root, r, conf = admin_store
    out = run_rmqfs(
        "queryMsgByOffset",
        root,
        "-t",
        "HDFS",
        "-b",
        "broker-t",
        "-i",
        r.queue_id,
        "-o",
        r.queue_offset,
        "--config",
        conf,
    ).stdout
    assert out.splitlines()[0] == f"OffsetID:            {r.msg_id}"
    # printMsgByQueue prints messages only with -p true, bodies only with -d true
    assert run_rmqfs("printMsgByQueue", root, "-t", "HDFS", "-i", "0").stdout == ""
    out = run_rmqfs("printMsgByQueue", root, "-t", "HDFS", "-i", "0", "-p", "true").stdout
    assert out.count("NOT PRINT BODY") == 300
    out = run_rmqfs("printMsgByQueue", root, "-t", "HDFS", "-i", "0", "-f", "true").stdout
    assert out.splitlines() == [
        "Tag: TagB                           Count: 200",
        "Tag: TagA                           Count: 100",
    ]
    # consumeMessage: 128 messages unless -c
    assert run_rmqfs("consumeMessage", root, "-t", "HDFS").stdout.count("MSGID:") == 128
    # queryMsgByUniqueKey takes UNIQ_KEYs only; -a shows every record with it
    miss = run_rmqfs("queryMsgByUniqueKey", root, "-t", "HDFS", "-i", r.msg_id, check=False)
    assert miss.returncode == 1 and "not a UNIQ_KEY of HDFS" in miss.stderr
    out = run_rmqfs("queryMsgByUniqueKey", root, "-t", "HDFS", "-i", r.uniq_key, "-a").stdout
    assert out.splitlines()[0] == f"OffsetID:            {r.msg_id}"
    # the trace: a Pub row and a Sub row of group CG
    out = run_rmqfs("queryMsgTraceById", root, "-i", r.uniq_key).stdout.splitlines()
    assert out[0].split() == [
        "#Type",
        "#ProducerGroup",
        "#ClientHost",
        "#SendTime",
        "#CostTimes",
        "#Status",
    ]
    assert out[1].split()[:3] == ["Pub", "PG", "10.0.0.9"] and out[1].split()[-2:] == [
        "3ms",
        "success",
    ]
    assert out[4].split()[:2] == ["Sub", "CG"] and out[4].split()[-2:] == ["7ms", "success"]
    # resetOffsetByTime -o: the offset, not the time
    out = run_rmqfs(
        "resetOffsetByTime", root, "-g", "G", "-t", "HDFS", "-s", "now", "-o", "5", "-q", "0"
    ).stdout
    assert out.splitlines()[1].split() == ["HDFS", "0", "3", "5"]
    # skipAccumulatedMessage: every queue to its max offset
    run_rmqfs("skipAccumulatedMessage", root, "-g", "G", "-t", "HDFS")
    out = run_rmqfs("consumer-progress", root, "-g", "G").stdout
    assert out.splitlines()[-1] == "Consume Diff Total: 0"
    # sendMessage -p: one message with that body
    run_rmqfs("sendMessage", root, "-t", "HDFS", "-p", "hi there", "-i", "3")
    out = run_rmqfs("printMsgByQueue", root, "-t", "HDFS", "-i", "3", "-p", "true", "-d", "true")
    assert out.stdout.splitlines()[-1].endswith("BODY: hi there")


def _fails(*argv, rc=1) -> str:
    r = run_rmqfs(*map(str, argv), check=False)
    assert r.returncode == rc, (argv, r.stdout, r.stderr)
    return r.stderr


def test_routing_options_are_checked_against_the_store(admin_store, tmp_path):
    root, _, conf = admin_store
    base = ("queryMsgByOffset", root, "-t", "HDFS", "-i", "0", "-o", "1")
    err = _fails(*base, "-b", "broker-x", "--config", conf)
    assert err == (
        "rmqfs: -b broker-x: this store is broker broker-t, not broker-x (brokerName of --config)\n"
    )
    err = _fails(*base, "-b", "broker-t")  # no --config: RocketMQ's default, the host name
    assert "RocketMQ's default brokerName: no --config broker.conf names it" in err
    err = _fails("topicStatus", root, "-t", "HDFS", "-c", "Other", "--config", conf)
    assert "this store's broker is in cluster DefaultCluster, not Other" in err
    err = _fails("queryCq", root, "-t", "HDFS", "-q", "0", "-i", "0", "-b", "10.1.1.1:10911")
    assert f"this store's broker address is {ADDR}, not 10.1.1.1:10911" in err
    # -n: a note without namesrvAddr to compare with; checked with one
    r1 = run_rmqfs("topicList", root, "-n", "ns:9876")
    assert r1.stdout.split() == ["HDFS", "RMQ_SYS_TRACE_TOPIC"]
    assert r1.stderr == (
        "rmqfs: note: -n ns:9876: not checked: a store directory has no name server (a "
        "--config with namesrvAddr= checks it)\n"
    )
    conf2 = tmp_path / "ns.conf"
    conf2.write_text(conf.read_text() + "namesrvAddr=ns1:9876;ns2:9876\nbrokerClusterName=C\n")
    assert run_rmqfs("topicList", root, "-n", "ns2:9876", "--config", conf2).stderr == ""
    err = _fails("topicList", root, "-n", "ns3:9876", "--config", conf2)
    assert "this store's broker registers with ns1:9876;ns2:9876, not ns3:9876" in err
    run_rmqfs("deleteTopic", root, "-t", "HDFS", "-c", "C", "--config", conf2)


def test_live_only_options_are_refused_and_other_letters_are_usage_errors(admin_store):
    root, r, _ = admin_store
    err = _fails("queryMsgById", root, "-t", "HDFS", "-i", r.msg_id, "-g", "G", "-d", "cid")
    assert err.startswith("rmqfs: queryMsgById -g (consumerGroup) needs a live cluster")
    err = _fails("consumerProgress", root, "-s", "true")
    assert "-s (showClientIP) needs a live cluster" in err
    run_rmqfs("consumerProgress", root, "-s", "false")
    err = _fails("sendMessage", root, "-t", "HDFS", "-p", "x", "-m", "true")
    assert "-m (msgTraceEnable) needs a live cluster" in err
    err = _fails("updateTopic", root, "-t", "HDFS", "-a", "+message.type=FIFO")
    assert "-a (attributes) needs a live cluster" in err
    # rmqfs's own letters are not mqadmin's: -q is no option of queryMsgByOffset
    err = _fails("queryMsgByOffset", root, "-t", "HDFS", "-q", "0", "-o", "1", rc=2)
    assert "-i/--queueId" in err
    # mqadmin's required letters stay required
    assert "-p/--body" in _fails("sendMessage", root, "-t", "HDFS", rc=2)


def test_the_manual_lists_every_mqadmin_command():
    """docs/offline-commands.md has a row per mqadmin command: the rmqfs command it runs, or
    what to use instead and why it needs a live cluster."""
    from conftest import REPO

    text = (REPO / "docs" / "offline-commands.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*)$", text, re.M))
    assert len(rows) >= 90 and set(JAVA_LETTERS) <= set(rows)
    for c in COMMANDS:
        assert rows[c.name].startswith(f"`rmqfs {c.name}` = `rmqfs {c.rmqfs}`"), c.name
    for name, rest in rows.items():
        if name not in BY_NAME:
            assert "needs a live cluster: " in rest or "not offered: " in rest, name
