"""pipeline.locality on a Spark standalone cluster whose hosts cannot see each other's stores.

A master on a bridge made for the test and two workers, each in its own network namespace
and mount namespace (``ip netns exec ... unshare --mount``), where one broker's store is
bind-mounted at the same path, ``STORE``: the test process (the driver's host) and the other
worker see an empty directory there. Every read that returns the right rows ran on the host
that has the store. Long (a cluster starts): ``make test-long``; needs root and ``ip netns``.
Everything the fixture starts or makes is removed when it ends, also when a test fails.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import SRC_PATH
from stores import fleet_rows, fleet_store

pytestmark = pytest.mark.spark

BROKERS = {  # name: (worker index, tag, topics)
    "broker-a": (1, "A", {"T": (3, 2000), "U": (1, 300)}),
    "broker-b": (2, "B", {"T": (2, 1500), "V": (2, 700)}),
}

DRIVER = r"""
import json, os, sys
from dataclasses import replace
from pyspark.sql import SparkSession
from rmqfs.pipeline.locality import plan_broker_stores, read_broker_stores, read_plan

master, bridge, store, out, h1, h2 = sys.argv[1:]
os.environ["PYSPARK_PYTHON"] = sys.executable
spark = (
    SparkSession.builder.master(master).appName("rmqfs-locality-test")
    .config("spark.driver.host", bridge).config("spark.driver.bindAddress", bridge)
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    .config("spark.executor.cores", "1").config("spark.executor.memory", "512m")
    .config("spark.cores.max", "2").config("spark.task.maxFailures", "2")
    # no task leaves its host while the host's one core is busy (the module's limits)
    .config("spark.locality.wait", "60s")
    .config("spark.local.dir", os.path.join(out, "driver-local"))
    .getOrCreate()
)
spark.sparkContext.setLogLevel("WARN")
res = {"driver_sees": sorted(os.listdir(store))}
right = [("broker-a", h1, store), ("broker-b", h2, store)]
df = read_broker_stores(spark, right, max_records_per_partition=500)
res["partitions"] = df.rdd.getNumPartitions()
import contextlib, io
shown = io.StringIO()
with contextlib.redirect_stdout(shown):  # what docs/spark.md shows
    df.groupBy("brokerName", "topic").count().orderBy("brokerName", "topic").show()
res["shown"] = shown.getvalue()
t = df.select("brokerName", "topic", "queue", "queueOffset", "body").toArrow()
import pyarrow.parquet as pq
pq.write_table(t, os.path.join(out, "rows.parquet"))

def failure(fn):
    try:
        n = fn()
    except Exception as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return {"rows": n}

# the hosts of the list swapped: each store is planned on the other broker's host
swapped = [("broker-a", h2, store), ("broker-b", h1, store)]
res["swapped_list"] = failure(lambda: read_broker_stores(spark, swapped).count())
# a right plan whose partitions are sent to the other host
plan = plan_broker_stores(spark, right)
other = {h1: h2, h2: h1}
moved = replace(plan, parts=tuple(
    replace(p, store=replace(p.store, host=other[p.store.host])) for p in plan.parts))
res["swapped_plan"] = failure(lambda: read_plan(spark, moved).count())
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump(res, f)
spark.stop()
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _usable() -> str | None:
    """Why the cluster cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network and mount namespaces)"
    for tool in ("ip", "unshare", "java"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    probe = f"rmqlprobe{os.getpid()}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return "ip netns add does not work here"
    _ip("netns", "del", probe, check=False)
    return None


def _subnet() -> int:
    """A 10.200.N.0/24 that no interface of this machine uses."""
    used = _ip("-o", "addr").stdout
    for k in range(200):
        n = 20 + (os.getpid() + k) % 230
        if f"10.200.{n}." not in used:
            return n
    raise RuntimeError("no free 10.200.N.0/24")


def _stop(proc: subprocess.Popen) -> None:
    """End a process started in a session of its own, and its group."""
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue


def _wait_for(path: Path, text: str, count: int, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count(text) >= count:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise RuntimeError(f"{text!r} x{count} not seen in {path}:\n{path.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def cluster():
    why = _usable()
    if why:
        pytest.skip(f"the locality cluster {why}")
    import pyspark

    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    tag = os.getpid() % 100000
    n = _subnet()
    bridge, bridge_ip = f"rmqlb{tag}", f"10.200.{n}.1"
    tmp = Path(tempfile.mkdtemp(prefix="rmqfs-locality-"))
    store = tmp / "store"  # the same path on every host; empty where no store is mounted
    store.mkdir()
    hosts: dict[str, str] = {}
    namespaces: list[str] = []
    links: list[str] = [bridge]
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    env = dict(os.environ, SPARK_NO_DAEMONIZE="1")
    env.pop("PYTHONPATH", None)

    def start(argv: list[str], log: Path, **extra: str) -> subprocess.Popen:
        logs.append(log)
        with open(log, "wb") as f:
            p = subprocess.Popen(
                argv, env=dict(env, **extra), stdout=f, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        procs.append(p)
        return p

    try:
        for name, (_, btag, topics) in BROKERS.items():
            fleet_store(tmp / f"disk-{name}", btag, topics)
            (tmp / f"disk-{name}" / "brokerIdentity").write_text(f"DefaultCluster#{name}#0")
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{bridge_ip}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        master_log = tmp / "master.log"
        master = start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", bridge_ip,
             "--port", "7077", "--webui-port", "0"],
            master_log, SPARK_LOCAL_IP=bridge_ip, SPARK_LOCAL_HOSTNAME=bridge_ip,
        )  # fmt: skip
        for name, (i, _, _) in BROKERS.items():
            ns, veth, ip = f"rmqlh{i}-{tag}", f"rmqlv{i}{tag}", f"10.200.{n}.{10 + i}"
            _ip("netns", "add", ns)
            namespaces.append(ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            links.append(veth)
            _ip("link", "set", veth, "master", bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            hosts[name] = ip
        _wait_for(master_log, "Starting Spark master", 1, master, 60)
        for name, (i, _, _) in BROKERS.items():
            ns, ip, work = f"rmqlh{i}-{tag}", hosts[name], tmp / f"work-{i}"
            work.mkdir()
            worker = (
                f"mount --bind {tmp / f'disk-{name}'} {store} && exec {spark_class} "
                f"org.apache.spark.deploy.worker.Worker --host {ip} --webui-port 0 --cores 1 "
                f"--memory 1g --work-dir {work} spark://{bridge_ip}:7077"
            )
            start(
                ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private",
                 "bash", "-c", worker],
                tmp / f"worker-{i}.log", SPARK_LOCAL_IP=ip, SPARK_LOCAL_HOSTNAME=ip,
                SPARK_LOCAL_DIRS=str(work),
            )  # fmt: skip
        _wait_for(master_log, "Registering worker", len(BROKERS), master, 90)
        yield dict(
            tmp=tmp, store=store, hosts=hosts, master=f"spark://{bridge_ip}:7077",
            bridge_ip=bridge_ip,
        )  # fmt: skip
    finally:
        for p in reversed(procs):
            _stop(p)
        for ns in namespaces:  # what is left in a namespace (Python daemons): ours, by pid
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", ns, check=False)
        for link in links:
            _ip("link", "del", link, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        left = [ns for ns in namespaces if ns in _ip("netns", "list").stdout]
        left += [ln for ln in links if _ip("link", "show", ln, check=False).returncode == 0]
        assert not left, f"left behind: {left}"


@pytest.fixture(scope="module")
def driven(cluster):
    """Run the driver (a process of its own: one SparkContext a process) on the cluster."""
    out = cluster["tmp"] / "out"
    out.mkdir()
    h = cluster["hosts"]
    argv = [
        sys.executable, "-c", DRIVER, cluster["master"], cluster["bridge_ip"],
        str(cluster["store"]), str(out), h["broker-a"], h["broker-b"],
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=SRC_PATH)
    env.pop("SPARK_LOCAL_IP", None)
    log = cluster["tmp"] / "driver.log"
    with open(log, "wb") as f:
        p = subprocess.Popen(
            argv, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = p.wait(240)
        finally:
            _stop(p)
    assert rc == 0 and (out / "result.json").exists(), log.read_text()[-6000:]
    res = json.loads((out / "result.json").read_text())
    res["out"] = out
    return res


def test_every_store_is_read_on_its_host_and_equals_a_local_read(cluster, driven):
    import pyarrow.parquet as pq

    assert driven["driver_sees"] == []  # the driver's host has no store: no shared filesystem
    t = pq.read_table(driven["out"] / "rows.parquet").to_pylist()
    got = sorted((r["brokerName"], r["topic"], r["queue"], r["queueOffset"], r["body"]) for r in t)
    want = sorted(
        row for name in BROKERS for row in fleet_rows(name, cluster["tmp"] / f"disk-{name}")
    )
    assert len(want) == 2300 + 2200
    per_queue = Counter(r[:3] for r in got)
    assert per_queue == Counter(r[:3] for r in want)
    assert got == want  # bodies byte for byte
    assert driven["partitions"] == 3 * 2 + 1 + 2 * 2 + 2 * 1  # queues cut at 500 offsets
    print(driven["shown"])


def test_a_store_planned_on_the_other_broker_s_host_is_refused(driven):
    f = driven["swapped_list"]
    assert f.get("type") == "StoreLocalityError", f
    assert "store 'broker-a'" in f["message"] and "is broker 'broker-b'" in f["message"]
    assert "store 'broker-b'" in f["message"] and "is broker 'broker-a'" in f["message"]


def test_a_part_sent_to_the_other_host_fails_and_returns_no_rows(cluster, driven):
    f = driven["swapped_plan"]
    assert "rows" not in f, f
    m = f["message"]
    a, b = cluster["hosts"]["broker-a"], cluster["hosts"]["broker-b"]
    assert "StoreLocalityError" in m, m
    assert (
        f"store 'broker-a' ({cluster['store']} on host '{b}'): the store there on host '{b}' "
        f"is broker 'broker-b'"
        in m
        or f"store 'broker-b' ({cluster['store']} on host '{a}'): the store there on host "
        f"'{a}' is broker 'broker-a'"
        in m
    ), m
