"""What a new user of the ``rmqfs`` command hits (issue 35, items 1-4): one line instead of a
traceback for a missing optional dependency, hints in the option letters of the name typed,
mqadmin commands that need a live cluster, and mqadmin's own defaults for the config it
creates or changes.

The expected configs are RocketMQ's (apache/rocketmq 8fc57f1):
``tools/.../consumer/UpdateSubGroupSubCommand.execute`` builds ``new SubscriptionGroupConfig()``
(``remoting/.../subscription/SubscriptionGroupConfig``: consumeEnable true, consumeFromMinEnable
true, consumeBroadcastEnable true, consumeMessageOrderly false, retryQueueNums 1, retryMaxTimes
16, brokerId 0, whichBrokerWhenConsumeSlowly 1, notifyConsumerIdsChangedEnable true,
groupSysFlag 0, consumeTimeoutMinute 15), then sets consumeBroadcastEnable and
consumeFromMinEnable to false before the options; ``topic/UpdateTopicSubCommand.execute`` builds
``new TopicConfig()`` with readQueueNums and writeQueueNums 8 (perm 6, topicSysFlag 0 from no
``-u``/``-s``, order false unless ``-o``). The broker stores either whole
(``SubscriptionGroupManager.updateSubscriptionGroupConfig``, ``TopicConfigManager.
updateTopicConfig``).
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, SRC_PATH, run_rmqfs
from rmqfs.engine.store import Message, MessageStore
from rmqfs.mount.cli import main
from rmqfs.mount.mqadmin import BY_NAME, NOT_OFFERED

#: ``new SubscriptionGroupConfig()`` as UpdateSubGroupSubCommand.execute sends it (see above).
JAVA_UPDATE_SUB_GROUP = {
    "consumeEnable": True,
    "consumeFromMinEnable": False,
    "consumeBroadcastEnable": False,
    "consumeMessageOrderly": False,
    "retryQueueNums": 1,
    "retryMaxTimes": 16,
    "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True,
    "groupSysFlag": 0,
    "consumeTimeoutMinute": 15,
}
#: ``new TopicConfig()`` as UpdateTopicSubCommand.execute sends it.
JAVA_UPDATE_TOPIC = {
    "readQueueNums": 8,
    "writeQueueNums": 8,
    "perm": 6,
    "topicSysFlag": 0,
    "order": False,
    "topicFilterType": "SINGLE_TAG",
}


def _rmqfs(capsys, *args):
    """``rmqfs ARGS`` in this process: (exit status, stdout, stderr)."""
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    with MessageStore(root) as s:
        s.create_topic("HDFS", 4)
        s.put_messages([Message("HDFS", b"line %d" % i) for i in range(8)])
    return root


def _table(root, name, key):
    with open(root / "config" / name) as f:
        return json.load(f)[key]


# ---------------------------------------------------------------------------------------------
# 1. a missing optional dependency: one line naming the extra, no traceback


def test_report_without_the_spark_extra_says_which_extra_in_one_line(tmp_path):
    """As a wheel installed without ``[spark]``: pyspark, pandas and matplotlib cannot be
    imported (None in sys.modules makes ``import`` fail as a missing module does)."""
    code = (
        "import sys\n"
        "for m in ('pyspark', 'py4j', 'pandas', 'matplotlib'):\n"
        "    sys.modules[m] = None\n"
        "from rmqfs.mount.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    uri = "s3://bucket/fleet/a?endpoint_override=127.0.0.1:1"
    for argv in (["report", str(tmp_path)], ["report", uri], ["report", str(tmp_path), uri]):
        res = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=SRC_PATH),
            cwd=REPO,
            timeout=60,
        )
        assert res.returncode == 1, res.stderr
        assert res.stderr.splitlines() == [
            "rmqfs report: pyspark is not installed; it comes with the spark extra: "
            "pip install 'rmqfs[spark]'"
        ], res.stderr
        assert "Traceback" not in res.stderr


def test_a_bug_in_another_module_keeps_its_traceback():
    """Only the optional dependencies are translated: any other missing module is a bug."""
    from rmqfs.mount.cli import missing_extra

    assert missing_extra(ModuleNotFoundError("x", name="pyspark.sql")) is not None
    assert missing_extra(ModuleNotFoundError("x", name="matplotlib.pyplot")) is not None
    assert missing_extra(ModuleNotFoundError("x", name="rmqfs.engine.nope")) is None
    assert missing_extra(ModuleNotFoundError("x")) is None


# ---------------------------------------------------------------------------------------------
# 2. hints name options of the command typed, and each hint works when followed


def test_send_message_to_a_missing_topic_names_mqadmins_way_and_it_works(capsys, store):
    rc, _, err = _rmqfs(capsys, "sendMessage", store, "-t", "NoSuch", "-p", "x")
    assert rc == 1
    # -c is sendMessage's tags: the hint must not name it
    assert " -c to create" not in err and "pass -c" not in err
    cmd = re.search(r"rmqfs (updateTopic \S+ -t NoSuch)", err)
    assert cmd, err
    rc, out, _ = _rmqfs(capsys, *cmd[1].split())  # the hint, followed
    assert rc == 0 and "created topic NoSuch" in out
    rc, out, _ = _rmqfs(capsys, "sendMessage", store, "-t", "NoSuch", "-p", "x")
    assert rc == 0 and "produced 1 messages to NoSuch" in out


def test_send_message_hints_that_name_produce_work_too(capsys, store, tmp_path):
    rc, _, err = _rmqfs(capsys, "sendMessage", store, "-t", "Other", "-p", "x")
    produce = re.search(r"or produce with rmqfs (produce \S+ -t Other -c)", err)
    assert rc == 1 and produce, err
    rc, out, _ = _rmqfs(capsys, *produce[1].split(), "--body", "x")
    assert rc == 0 and "created topic Other" in out
    # no store yet: only produce -c makes one
    rc, _, err = _rmqfs(capsys, "sendMessage", tmp_path / "new", "-t", "T", "-p", "x")
    m = re.search(r"create it with rmqfs (produce \S+ -t T -c)$", err.strip())
    assert rc == 1 and m and "updateTopic" not in err, err
    rc, out, _ = _rmqfs(capsys, *m[1].split(), "--body", "x")
    assert rc == 0 and "produced 1 messages to T" in out
    # rmqfs's own name keeps -c, which is its --create there
    rc, _, err = _rmqfs(capsys, "produce", store, "-t", "Third", "--body", "x")
    assert rc == 1 and "pass -c (--create) to create it (4 queues)" in err
    rc, out, _ = _rmqfs(capsys, "produce", store, "-t", "Third", "--body", "x", "-c")
    assert rc == 0 and "created topic Third" in out


def test_a_write_on_a_store_a_broker_holds_names_no_read_only_mount(capsys, store):
    """The holder is no rmqfs mount (here a MessageStore in this process, as a broker would
    be): a write command says to stop it, and never suggests ``-o ro``, which cannot help a
    write."""
    with MessageStore(store):
        pass
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from rmqfs.engine.store import MessageStore\n"
            "s = MessageStore(sys.argv[1]); print('ok', flush=True); time.sleep(60)",
            str(store),
        ],
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=SRC_PATH),
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ok"
        for argv in (
            ["resetOffsetByTime", store, "-g", "G", "-t", "HDFS", "-s", "now"],
            ["produce", store, "-t", "HDFS", "--body", "x"],
            ["updateSubGroup", store, "-g", "G"],
        ):
            rc, _, err = _rmqfs(capsys, *argv)
            assert rc == 1 and f"locked by process {child.pid}" in err, err
            assert "-o ro" not in err and "stop it first" in err, err
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------------------------------------
# 3. mqadmin names rmqfs does not offer


def test_mqadmin_commands_that_need_a_live_cluster_say_why_and_what_instead(capsys, store):
    rc, out, err = _rmqfs(capsys, "topicRoute", "-t", "HDFS", "-n", "127.0.0.1:9876")
    assert rc == 2 and out == ""
    assert err == (
        "rmqfs: mqadmin topicRoute needs a live cluster: routes across brokers: a running name "
        "server; instead: rmqfs topic-status STORE -t T (this broker's queues)\n"
    )
    for entry in NOT_OFFERED:
        rc, _, err = _rmqfs(capsys, entry.name)
        assert rc == 2 and len(err.splitlines()) == 1, entry.name
        assert f"mqadmin {entry.name} " in err and entry.why in err, err
        assert "invalid choice" not in err
    # "instead" commands work as printed, STORE filled in
    rc, _, err = _rmqfs(capsys, "brokerConsumeStats")
    assert "instead: rmqfs consumer-progress STORE (every group's diff)" in err
    rc, out, _ = _rmqfs(capsys, "consumer-progress", store)
    assert rc == 0
    rc, _, err = _rmqfs(capsys, "cleanExpiredCQ")
    assert "instead: rmqfs clean STORE" in err


def test_a_misspelt_command_gets_the_closest_names(capsys):
    rc, _, err = _rmqfs(capsys, "topicLst", "x")
    assert rc == 2
    assert err.startswith("rmqfs: no command 'topicLst'; did you mean topicList")
    assert len(err.splitlines()) == 1
    rc, _, err = _rmqfs(capsys, "zzzzqqq")
    assert rc == 2 and err == "rmqfs: no command 'zzzzqqq' (rmqfs --help lists them)\n"


def test_the_manual_and_the_cli_say_the_same_of_each_command_not_offered():
    """docs/offline-commands.md's table is the CLI's table (mount/mqadmin.py NOT_OFFERED),
    row for row, and together with the commands offered it names every mqadmin command."""
    text = (REPO / "docs" / "offline-commands.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", text, re.M))
    for entry in NOT_OFFERED:
        assert rows.get(entry.name) == " | ".join(entry.manual_cells()), entry.name
    assert set(rows) == set(BY_NAME) | {e.name for e in NOT_OFFERED}


# ---------------------------------------------------------------------------------------------
# 4. mqadmin's defaults, checked against what the Java sends


def test_update_sub_group_creates_what_mqadmin_creates(capsys, store):
    for name, group in (("updateSubGroup", "G1"), ("update-sub-group", "G2")):
        rc, _, err = _rmqfs(capsys, name, store, "-g", group)
        assert rc == 0, err
        entry = _table(store, "subscriptionGroup.json", "subscriptionGroupTable")[group]
        assert {k: entry[k] for k in JAVA_UPDATE_SUB_GROUP} == JAVA_UPDATE_SUB_GROUP, name
    # options apply on top of mqadmin's config, as execute() sets them after the defaults
    _rmqfs(capsys, "updateSubGroup", store, "-g", "G3", "-d", "true", "-q", "3")
    entry = _table(store, "subscriptionGroup.json", "subscriptionGroupTable")["G3"]
    assert entry == {
        **entry,
        **JAVA_UPDATE_SUB_GROUP,
        "consumeBroadcastEnable": True,
        "retryQueueNums": 3,
    }


def test_update_sub_group_under_mqadmins_name_sends_a_whole_config(capsys, store):
    """mqadmin's updateSubGroup replaces the group's settings (fields not given go back to
    mqadmin's values, and stderr says which); rmqfs's update-sub-group changes only those
    given."""
    _rmqfs(capsys, "update-sub-group", store, "-g", "G", "-s", "false", "-r", "3")
    rc, _, err = _rmqfs(capsys, "update-sub-group", store, "-g", "G", "-q", "2")
    entry = _table(store, "subscriptionGroup.json", "subscriptionGroupTable")["G"]
    assert (entry["consumeEnable"], entry["retryMaxTimes"], entry["retryQueueNums"]) == (
        False,
        3,
        2,
    )
    assert rc == 0 and "note:" not in err
    rc, _, err = _rmqfs(capsys, "updateSubGroup", store, "-g", "G", "-q", "2")
    entry = _table(store, "subscriptionGroup.json", "subscriptionGroupTable")["G"]
    assert {k: entry[k] for k in JAVA_UPDATE_SUB_GROUP} == {
        **JAVA_UPDATE_SUB_GROUP,
        "retryQueueNums": 2,
    }
    assert rc == 0
    assert "consumeEnable false -> true" in err and "retryMaxTimes 3 -> 16" in err
    assert "retryQueueNums" not in err  # given, not implied


def test_update_topic_creates_and_replaces_as_mqadmin(capsys, store):
    rc, _, _ = _rmqfs(capsys, "update-topic", store, "-t", "New")
    table = _table(store, "topics.json", "topicConfigTable")
    assert rc == 0 and {k: table["New"][k] for k in JAVA_UPDATE_TOPIC} == JAVA_UPDATE_TOPIC
    # rmqfs's name keeps what is not given
    rc, _, err = _rmqfs(capsys, "update-topic", store, "-t", "HDFS", "-p", "4")
    hdfs = _table(store, "topics.json", "topicConfigTable")["HDFS"]
    assert (hdfs["readQueueNums"], hdfs["writeQueueNums"], hdfs["perm"]) == (4, 4, 4)
    # mqadmin's name sends a whole TopicConfig: 8 queues unless given, perm 6 unless given
    rc, _, err = _rmqfs(capsys, "updateTopic", store, "-t", "HDFS", "-w", "4")
    hdfs = _table(store, "topics.json", "topicConfigTable")["HDFS"]
    assert {k: hdfs[k] for k in JAVA_UPDATE_TOPIC} == {**JAVA_UPDATE_TOPIC, "writeQueueNums": 4}
    assert "readQueueNums 4 -> 8" in err and "perm 4 -> 6" in err and "writeQueueNums" not in err
    assert "OK: no errors" in run_rmqfs("verify", store).stdout
