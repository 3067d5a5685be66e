"""The ``rmqfs`` command line itself: every subcommand answers ``--help``."""

import re

from conftest import run_rmqfs


def _subcommands() -> list[str]:
    """The subcommands as ``rmqfs --help`` lists them (``{mount,umount,report,...}``)."""
    r = run_rmqfs("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: rmqfs")
    names = re.search(r"\{([A-Za-z,-]+)\}", r.stdout).group(1).split(",")
    assert {"mount", "umount", "report", "verify"} <= set(names)
    return names


def test_every_subcommand_answers_help():
    for name in _subcommands():
        for flag in ("--help", "-h"):
            r = run_rmqfs(name, flag, check=False)
            assert r.returncode == 0, (name, flag, r.stderr)
            # an mqadmin alias (deleteTopic) shows its command's usage (delete-topic)
            expect = f"usage: rmqfs {name}" if name.islower() or "-" in name else "usage: rmqfs "
            assert r.stdout.startswith(expect), (name, r.stdout[:200])
            assert not r.stderr.strip(), (name, r.stderr)


def test_report_takes_its_options_before_the_mounts(tmp_path):
    """``rmqfs report --out DIR MNT`` reaches the report (which says MNT is no mount, 1), not
    a usage error of the rmqfs command (2)."""
    r = run_rmqfs("report", "--out", tmp_path / "out", tmp_path / "no-mount", check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("rmqfs report:") and "no-mount" in r.stderr


def test_mqadmin_names_are_aliases():
    names = set(_subcommands())
    for kebab, mq in (
        ("delete-topic", "deleteTopic"),
        ("update-topic", "updateTopic"),
        ("delete-sub-group", "deleteSubGroup"),
        ("update-sub-group", "updateSubGroup"),
        ("clone-group-offset", "cloneGroupOffset"),
        ("query-cq", "queryCq"),
        ("stats-all", "statsAll"),
        ("get-broker-config", "getBrokerConfig"),
        ("broker-status", "brokerStatus"),
        ("topic-status", "topicStatus"),
        ("consumer-progress", "consumerProgress"),
        ("print-msg", "printMsg"),
        ("query-msg", "queryMsgById"),
        ("topic-list", "topicList"),
        ("reset-offset", "resetOffsetByTime"),
        ("clean", "deleteExpiredCommitLog"),
    ):
        assert {kebab, mq} <= names
        assert run_rmqfs(mq, "--help").stdout.startswith(f"usage: rmqfs {kebab}"), mq


def test_daemon_logging_never_blocks_and_counts_what_it_drops():
    """The daemon logs through a bounded queue (mount/cli.py): a full queue drops records
    instead of blocking the caller (the trio loop), and says how many it dropped."""
    import logging
    import queue

    from mount.cli import _DroppingQueueHandler

    q: queue.Queue = queue.Queue(3)
    h = _DroppingQueueHandler(q)
    log = logging.getLogger("rmqfs.test-queue")
    log.propagate = False
    log.addHandler(h)
    try:
        for i in range(10):
            log.warning("line %d", i)  # returns at once though nobody reads the queue
        assert h.dropped == 7 and q.qsize() == 3
        got = [q.get_nowait().getMessage() for _ in range(3)]
        assert got == ["line 0", "line 1", "line 2"]
        log.warning("after")
        assert [q.get_nowait().getMessage() for _ in range(2)] == [
            "7 log records dropped (the log could not keep up)",
            "after",
        ]
        assert h.dropped == 0
    finally:
        log.removeHandler(h)
