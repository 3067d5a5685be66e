"""The walking skeleton through a real mount: produce, decoded views, offsets, crashes."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import refreader
from conftest import LOGHUB_LOGS, copy_fixture, fuse, wait_unmounted

pytestmark = [fuse, pytest.mark.fuse]


def _lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    return lines[:-1] if data.endswith(b"\n") else lines


def test_every_loghub_log_round_trips(mount_store, tmp_path):
    m = mount_store()
    for log in LOGHUB_LOGS:
        topic = log.name.split("_")[0]
        os.mkdir(m.mnt / "topics" / topic)
        # the shell's own redirection, as a user would type it
        subprocess.run(f"cat '{log}' > '{m.mnt}/topics/{topic}/produce'", shell=True, check=True)
    for log in LOGHUB_LOGS:
        topic = log.name.split("_")[0]
        data = log.read_bytes()
        tdir = m.mnt / "topics" / topic
        bodies = (tdir / "bodies.txt").read_bytes()
        # every body ends with "\n" in bodies.txt; a log without a final newline gains one
        assert bodies == data if data.endswith(b"\n") else bodies == data + b"\n", topic
        assert os.stat(tdir / "bodies.txt").st_size == len(bodies)
        msgs = (tdir / "messages.jsonl").read_bytes()
        assert os.stat(tdir / "messages.jsonl").st_size == len(msgs)
        rows = [json.loads(line) for line in msgs.splitlines()]
        assert len(rows) == len(_lines(data)), topic
        assert [r["body"].encode() for r in rows] == _lines(data)
        assert [r["commitLogOffset"] for r in rows] == sorted(r["commitLogOffset"] for r in rows)
        per_queue = 0
        for q in range(4):
            qrows = (tdir / str(q) / "messages.jsonl").read_text().splitlines()
            assert [json.loads(x)["queueOffset"] for x in qrows] == list(range(len(qrows)))
            per_queue += len(qrows)
        assert per_queue == len(rows)


def test_decoded_fields_match_the_commitlog(mount_store, tmp_path):
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "Fields")
    with open(m.mnt / "topics" / "Fields" / "produce.jsonl", "w") as f:
        f.write(json.dumps({"body": "plain", "tags": "TagA", "keys": ["k1", "k2"]}) + "\n")
        f.write(
            json.dumps({"bodyBase64": "AAEC/w==", "properties": {"p": "v"}, "queueId": 3}) + "\n"
        )
    m.umount()
    recs = refreader.read_commitlog(m.store / "commitlog")
    m.mount()
    rows = [
        json.loads(x)
        for x in (m.mnt / "topics" / "Fields" / "messages.jsonl").read_text().splitlines()
    ]
    assert len(rows) == len(recs) == 2
    for row, rec in zip(rows, recs):
        assert row["topic"] == rec["topic"]
        assert row["queueId"] == rec["queueId"]
        assert row["queueOffset"] == rec["queueOffset"]
        assert row["commitLogOffset"] == rec["physicalOffset"]
        assert row["storeSize"] == rec["totalSize"]
        assert row["bornTimestamp"] == rec["bornTimestamp"]
        assert row["storeTimestamp"] == rec["storeTimestamp"]
        assert row["bornHost"] == rec["bornHost"] and row["storeHost"] == rec["storeHost"]
        assert row["bodyCRC"] == rec["bodyCRC"]
        assert row["sysFlag"] == rec["sysFlag"] and row["flag"] == rec["flag"]
        assert row["properties"] == rec["properties"]
        assert row["msgId"] == refreader.offset_msg_id(rec["storeHostRaw"], rec["physicalOffset"])
    assert rows[0]["body"] == "plain" and rows[0]["tags"] == "TagA"
    assert rows[0]["keys"] == ["k1", "k2"]
    assert rows[1]["bodyEncoding"] == "base64" and rows[1]["body"] == "AAEC/w=="
    assert rows[1]["queueId"] == 3


def test_java_written_store_mounts_with_every_field(mount_store, tmp_path):
    store = copy_fixture("apache-rocketmq-pr3535/store", tmp_path / "pr3535")
    recs = refreader.read_commitlog(store / "commitlog")
    m = mount_store(store)
    rows = [
        json.loads(x)
        for x in (m.mnt / "topics" / "abc" / "messages.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 47
    for row, rec in zip(rows, recs):
        assert row["commitLogOffset"] == rec["physicalOffset"]
        assert row["queueOffset"] == rec["queueOffset"]
        assert row["bornTimestamp"] == rec["bornTimestamp"]
        assert row["storeTimestamp"] == rec["storeTimestamp"]
        assert row["bornHost"] == rec["bornHost"] == "127.0.0.1:0"
        assert row["storeHost"] == rec["storeHost"]
        assert row["bodyCRC"] == rec["bodyCRC"]
        assert row["body"].encode() == rec["body"]
        assert row["tags"] == "TAG1" and row["keys"] == [rec["properties"]["KEYS"]]
        assert row["properties"] == rec["properties"]
    # raw/ shows the store's own bytes
    assert (m.mnt / "raw" / "commitlog" / "00000000000000000000").read_bytes() == (
        store / "commitlog" / "00000000000000000000"
    ).read_bytes()


def test_offset_commit_survives_remount(mount_store):
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    with open(m.mnt / "topics" / "T" / "0" / "produce", "w") as f:
        f.write("".join(f"m{i}\n" for i in range(200)))
    os.mkdir(m.mnt / "groups" / "demo")
    off = m.mnt / "groups" / "demo" / "T" / "0" / "offset"
    subprocess.run(f"echo 100 > '{off}'", shell=True, check=True)
    assert off.read_text() == "100\n"
    bad = subprocess.run(["bash", "-c", f"echo 201 > '{off}'"], capture_output=True, text=True)
    assert bad.returncode != 0 and "Invalid argument" in bad.stderr
    fd = os.open(off, os.O_WRONLY | os.O_TRUNC)
    with pytest.raises(OSError) as err:
        os.write(fd, b"-1\n")
    os.close(fd)
    assert err.value.errno == errno.EINVAL
    assert off.read_text() == "100\n"
    pending = (m.mnt / "groups" / "demo" / "T" / "0" / "pending.jsonl").read_text().splitlines()
    assert [json.loads(x)["queueOffset"] for x in pending] == list(range(100, 200))
    m.umount()
    table = json.loads((m.store / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert table["T@demo"] == {"0": 100}
    m.mount()
    assert off.read_text() == "100\n"


def _writer(path: Path, data: bytes, acked_path: Path) -> subprocess.Popen:
    """A process writing ``data`` in 64 KiB writes, recording bytes acknowledged so far."""
    code = f"""
import os, sys
data = open({str(acked_path.with_suffix('.in'))!r}, 'rb').read()
fd = os.open({str(path)!r}, os.O_WRONLY | os.O_APPEND)
ack = open({str(acked_path)!r}, 'w')
pos = 0
while pos < len(data):
    try:
        n = os.write(fd, data[pos:pos + 65536])
    except OSError:
        break
    pos += n
    ack.seek(0); ack.write(str(pos)); ack.truncate(); ack.flush()
"""
    acked_path.with_suffix(".in").write_bytes(data)
    return subprocess.Popen([sys.executable, "-c", code])


def test_kill_9_while_producing_loses_no_acknowledged_line(mount_store, tmp_path):
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "Crash")
    lines = [f"{i:08d} {'x' * (i % 300)}\n".encode() for i in range(400_000)]
    data = b"".join(lines)
    acked = tmp_path / "acked.txt"
    acked.write_text("0")
    w = _writer(m.mnt / "topics" / "Crash" / "produce", data, acked)
    deadline = time.monotonic() + 30
    while int(acked.read_text() or 0) < 2_000_000 and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(m.pid, signal.SIGKILL)
    w.wait(timeout=30)
    assert wait_unmounted(m.mnt), "auto_unmount should remove the mount of a killed daemon"
    n_acked = int(acked.read_text() or 0)
    assert 0 < n_acked < len(data), "the kill should land mid-produce"
    m.mount()
    bodies = (m.mnt / "topics" / "Crash" / "bodies.txt").read_bytes()
    got = _lines(bodies)
    # a prefix of the input, whole lines only, nothing twice, and every acknowledged line
    assert bodies == data[: len(bodies)]
    complete_acked = data[:n_acked].count(b"\n")
    assert len(got) >= complete_acked
    assert len(set(got)) == len(got)


def test_a_last_line_is_whole_and_read_back_right_after_close(mount_store):
    """A last line without newline is stored by the open file's last close, never cut by a
    copy of the descriptor closing (a shell's commands inheriting ``exec 3>>``, a subshell
    group whose commands exit mid-line), and none of those closes fails while a line is merely
    unfinished (a ``set -e`` script goes on). The kernel answers close(2) before the daemon
    has the RELEASE done; a read right after still finds the line (it found it 136 times of
    150 for a 200 KB line before the mount made readers wait for such releases)."""
    m = mount_store()
    t = m.mnt / "topics" / "T"
    os.mkdir(t)
    script = (
        "set -e; exec 3>> produce.jsonl; printf '{\"body\": \"a' >&3; /usr/bin/printf b >&3; "
        "cat /dev/null >&3; printf '\"}\\n' >&3; exec 3>&-; "
        "{ printf x; sleep 0.05; printf 'y\\n'; } >> 0/produce; echo done"
    )
    res = subprocess.run(["bash", "-c", script], cwd=t, capture_output=True, text=True)
    assert (res.returncode, res.stdout) == (0, "done\n"), res.stderr
    bodies = [json.loads(x)["body"] for x in (t / "messages.jsonl").read_text().splitlines()]
    assert sorted(bodies) == ["ab", "xy"]
    big = "z" * 200_000
    for i in range(30):
        with open(t / "1" / "produce", "a") as f:
            f.write(f"{i}{big}")  # no newline: the close stores it
        last = (t / "1" / "bodies.txt").read_text().splitlines()[-1]
        assert last == f"{i}{big}", i
