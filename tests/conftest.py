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
    from pipeline.report import build_session

    session = build_session(master="local[2]", app_name="rmqfs-tests", shuffle_partitions=2)
    yield session
    session.stop()


# --------------------------------------------------------------------------------------------
# Paths and stores

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RMQFS_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
LOGHUB = SHARED / "data" / "loghub"
LOGHUB_LOGS = sorted(LOGHUB.glob("*_2k.log"))


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
    from engine.store import StoreConfig

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
    return [sys.executable, "-m", "mount.cli", *map(str, args)]


def recover_decoding_every_record(monkeypatch) -> None:
    """Make every MessageStore opened afterwards recover with each record decoded
    (``engine.service.recovery.recover(..., undecoded=False)``) instead of comparing the units the
    queues already hold with the raw records: tests compare the two recoveries. Undone by
    ``monkeypatch.undo()``."""
    import functools

    from engine.service import recovery

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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *extra]))
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
