"""The ``rmqfs`` command line itself: every subcommand answers ``--help``."""

import re

from conftest import run_rmqfs


def _subcommands() -> list[str]:
    """The rmqfs commands as ``rmqfs --help`` lists them (one per line under "commands:")."""
    r = run_rmqfs("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: rmqfs [-h] [--version] COMMAND")
    body = r.stdout.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r"^    ([a-z][a-z-]+)", body, re.M)
    assert {"mount", "umount", "report", "verify"} <= set(names)
    return names


def test_every_subcommand_answers_help():
    from rmqfs.mount.mqadmin import COMMANDS

    for name in _subcommands() + [c.name for c in COMMANDS]:
        for flag in ("--help", "-h"):
            r = run_rmqfs(name, flag, check=False)
            assert r.returncode == 0, (name, flag, r.stderr)
            assert r.stdout.startswith(f"usage: rmqfs {name}"), (name, r.stdout[:200])
            assert not r.stderr.strip(), (name, r.stderr)


def test_version():
    """``rmqfs --version`` used to fail: "the following arguments are required"."""
    from importlib.metadata import version

    r = run_rmqfs("--version")
    assert r.stdout == f"rmqfs {version('rmqfs')}\n" and not r.stderr


def test_usage_lists_each_command_once_and_groups_the_mqadmin_names():
    """The top-level usage printed 40 names twice (a {a,b,...} set in the usage line and the
    list); now each rmqfs command once, and the mqadmin names on one line per command."""
    from rmqfs.mount.mqadmin import COMMANDS

    out = run_rmqfs("--help").stdout
    assert out.splitlines()[0] == "usage: rmqfs [-h] [--version] COMMAND ..."
    names = _subcommands()
    assert len(names) == len(set(names))
    for c in COMMANDS:
        assert len(re.findall(rf"\b{c.name}\b", out)) == 1, c.name  # only in its group line
        line = next(x for x in out.splitlines() if re.search(rf"\b{c.name}\b", x))
        assert line.split()[0] == c.rmqfs and c.rmqfs in names, line
    assert len(out.splitlines()) < 2 * len(names) + len({c.rmqfs for c in COMMANDS}) + 20


def test_report_takes_its_options_before_the_mounts(tmp_path):
    """``rmqfs report --out DIR MNT`` reaches the report (which says MNT is no mount, 1), not
    a usage error of the rmqfs command (2)."""
    r = run_rmqfs("report", "--out", tmp_path / "out", tmp_path / "no-mount", check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("rmqfs report:") and "no-mount" in r.stderr


def test_daemon_logging_never_blocks_and_counts_what_it_drops():
    """The daemon logs through a bounded queue (mount/cli.py): a full queue drops records
    instead of blocking the caller (the trio loop), and says how many it dropped."""
    import logging
    import queue

    from rmqfs.mount.cli import _DroppingQueueHandler

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


def test_daemon_log_lines_name_the_level_and_logger_once(tmp_path):
    """Lines read ``rmqfs INFO INFO:rmqfs:mounted ...``: basicConfig gave the queue side its
    own format, and the writer formatted the result again (issue 25)."""
    import subprocess
    import sys

    from conftest import REPO

    log = tmp_path / "mount.log"
    code = (
        "import argparse, logging; from mount.cli import _setup_logging; "
        f"_setup_logging(argparse.Namespace(debug=False, log_file={str(log)!r}), True); "
        "logging.getLogger('rmqfs').info('mounted %s on %s', 'S', 'M'); "
        "logging.getLogger('rmqfs.fs').warning('refused')"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.fullmatch(stamp + " rmqfs INFO mounted S on M", lines[0]), lines[0]
    assert re.fullmatch(stamp + " rmqfs.fs WARNING refused", lines[1]), lines[1]


def test_a_block_cache_bounds_the_render_workers(monkeypatch):
    """A snapshot in object storage: each render worker keeps two blocks at least, so on a
    machine of many cores the workers' shares passed ``remote_cache`` (a review: 2.6 MB held
    under remote_cache=1M with 16 cores). The workers are as many as the cache's half holds at
    two blocks each; without a block cache, one a core."""
    from rmqfs.engine.live.blockcache import MIN_BLOCK
    from rmqfs.mount import daemon

    monkeypatch.setattr(daemon.os, "cpu_count", lambda: 16)
    assert daemon.render_workers(None) == 16
    assert daemon.render_workers(1 << 30) == 16
    for capacity in (1 << 20, 2 << 20, 100 << 10):
        n = daemon.render_workers(capacity)
        own = capacity // 2
        assert n >= 1 and (n == 1 or own + n * 2 * MIN_BLOCK <= capacity), (capacity, n)
    assert daemon.render_workers(1 << 20) == 4


def test_a_command_opens_a_store_of_more_files_than_the_shells_soft_limit(tmp_path):
    """A store holds a descriptor per CommitLog, ConsumeQueue and IndexFile file (as a broker
    does): a shell's soft limit of open files (``ulimit -n``, often 1,024) is below what a
    broker's store of a few hundred topics needs. The command line raises the soft limit to
    the hard one first, as the JVM does for ``mqadmin``; with the hard limit too low it says
    why in one line (DescriptorsError, EMFILE), no traceback."""
    import os
    import resource
    import subprocess
    import sys

    from conftest import REPO, SRC_PATH
    from rmqfs.engine.store import Message, MessageStore

    root = tmp_path / "store"
    with MessageStore(str(root)) as s:
        for t in range(40):
            s.create_topic(f"T{t}", 4)
            s.put_messages([Message(f"T{t}", b"m", queue_id=q) for q in range(4)])
    env = dict(os.environ, PYTHONPATH=SRC_PATH)

    def topic_list(soft: int, hard: int | None = None) -> subprocess.CompletedProcess:
        def limit() -> None:
            h = resource.getrlimit(resource.RLIMIT_NOFILE)[1] if hard is None else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, h))

        return subprocess.run(
            [sys.executable, "-m", "rmqfs.mount.cli", "topic-list", str(root)],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
            preexec_fn=limit,
        )

    r = topic_list(64)  # (160 ConsumeQueue files)
    assert r.returncode == 0, r.stderr
    assert {f"T{t}" for t in range(40)} <= set(r.stdout.split())
    r = topic_list(64, 64)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "out of file descriptors" in r.stderr and "ulimit -n" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
