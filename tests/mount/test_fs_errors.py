"""Every error of the mount contract (sections 2.2, 2.3, 2.4), provoked through a real mount with
its errno checked, and the store still consistent afterwards."""

import contextlib
import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

import refreader
from conftest import fuse, run_rmqfs

pytestmark = [fuse, pytest.mark.fuse]


def oserror(fn, *args) -> int:
    """The errno ``fn(*args)`` fails with (the test fails when it does not fail)."""
    with pytest.raises(OSError) as info:
        fn(*args)
    return info.value.errno


def write_once(path: Path, data: bytes, flags=os.O_WRONLY | os.O_APPEND) -> None:
    fd = os.open(path, flags)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_then_close(path: Path, data: bytes) -> None:
    """write() then close(): a last line without newline fails at close (flush)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    except OSError:
        os.close(fd)
        raise
    os.close(fd)


def bodies(tdir: Path) -> list[bytes]:
    return (tdir / "bodies.txt").read_bytes().splitlines()


def test_einval(mount_store):
    m = mount_store()
    t = m.mnt / "topics" / "E"
    os.mkdir(t)
    (t / "produce").write_text("good-1\n")
    pj = t / "produce.jsonl"
    # a bad line fails its write and stores none of the write's lines
    for bad in [
        b'{"body": "ok"}\nnot json\n',
        b'{"tags": "no body"}\n',
        b'[1, 2]\n',
        b'{"body": "x", "queueId": "zero"}\n',
        b'{"body": "x", "queueId": 99}\n',
        b'{"bodyBase64": "***"}\n',
        b'{"body": "x", "properties": {"a": 1}}\n',
        b'{"body": "x", "keys": [1]}\n',
    ]:
        assert oserror(write_once, pj, bad) == errno.EINVAL, bad
    # a bad last line without newline fails at close() when no more bytes could mend it; one
    # merely unfinished is refused by the last close (the kernel answers close() first):
    # refused.jsonl says so (a read waits for such a close to be done)
    refused = m.mnt / "refused.jsonl"
    seen = len(refused.read_text().splitlines())
    assert oserror(write_then_close, pj, b'{"body": 1}') == errno.EINVAL
    # one refusal, one record: the last close (RELEASE) does not refuse it again
    new = [json.loads(x) for x in refused.read_text().splitlines()[seen:]]
    assert [(r["op"], r["errno"]) for r in new] == [("close", "EINVAL")], new
    # refused at a dup's close, the line is refused for good: the open file's next write
    # must not take the rest of it as a line of its own
    fd = os.open(pj, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b'{"body": 2}')
        assert oserror(os.close, os.dup(fd)) == errno.EINVAL
        assert oserror(os.write, fd, b', "tags": "t"}\n') == errno.EINVAL
    finally:
        assert oserror(os.close, fd) == errno.EINVAL
    write_then_close(pj, b'{"body": ')
    last = json.loads((m.mnt / "refused.jsonl").read_text().splitlines()[-1])
    assert (last["op"], last["errno"]) == ("close", "EINVAL") and "not JSON" in last["reason"]
    write_once(pj, b'{"body": "good-2", "keys": "k"}\n')
    assert bodies(t) == [b"good-1", b"good-2"]
    # bad topic and group names (RocketMQ's TopicValidator rules), via mkdir
    for name in ["has space", "a" * 128, "semi;colon", "dot.ted"]:
        assert oserror(os.mkdir, m.mnt / "topics" / name) == errno.EINVAL, name
    for name in ["has space", "a" * 256, "x*y"]:
        assert oserror(os.mkdir, m.mnt / "groups" / name) == errno.EINVAL, name
    # bad offsets: not a number, below minOffset, above maxOffset
    os.mkdir(m.mnt / "groups" / "G")
    off = m.mnt / "groups" / "G" / "E" / "0" / "offset"
    for text in [b"abc\n", b"-1\n", b"2\n", b"1 2\n", b"\xff\n"]:
        assert oserror(write_once, off, text, os.O_WRONLY | os.O_TRUNC) == errno.EINVAL, text
    bad = subprocess.run(["bash", "-c", f"echo nope > '{off}'"], capture_output=True, text=True)
    assert bad.returncode == 1 and "Invalid argument" in bad.stderr
    assert off.read_text() == "-1\n"
    seen = len(refused.read_text().splitlines())
    for text in [b"x", b"99"]:  # refused at close(), no more bytes could mend them: once each
        assert oserror(write_then_close, off, text) == errno.EINVAL, text
    new = [json.loads(x) for x in refused.read_text().splitlines()[seen:]]
    assert [(r["op"], r["reason"]) for r in new] == [
        ("close", "not an offset: 'x'"),
        ("close", "offset 99 outside [0, 1] of E/0"),
    ], new
    write_once(off, b"1\n", os.O_WRONLY | os.O_TRUNC)
    assert off.read_text() == "1\n"
    # `>` and `>>` both commit; `truncate -s 0` is accepted
    subprocess.run(["bash", "-c", f"echo 0 >> '{off}' && truncate -s 0 '{off}'"], check=True)
    assert off.read_text() == "0\n"
    subprocess.run(["bash", "-c", f"printf 1 > '{off}'"], check=True)  # no newline: at close
    assert off.read_text() == "1\n"
    # truncating an append file to anything but 0
    assert oserror(os.truncate, t / "produce", 3) == errno.EINVAL
    assert oserror(os.truncate, off, 3) == errno.EINVAL


def test_emsgsize(mount_store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("maxMessageSize=1024\n")
    m = mount_store(None, config=conf)
    t = m.mnt / "topics" / "Big"
    os.mkdir(t)
    write_once(t / "produce", b"small\n")
    assert oserror(write_once, t / "produce", b"x" * 1025 + b"\n") == errno.EMSGSIZE
    assert (
        oserror(write_once, t / "produce.jsonl", json.dumps({"body": "y" * 2000}).encode() + b"\n")
        == errno.EMSGSIZE
    )
    # a line that never ends is refused once it is too long, without buffering it all
    fd = os.open(t / "produce", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"z" * 1000)
        with pytest.raises(OSError) as info:
            for _ in range(100):
                os.write(fd, b"z" * 1000)
        assert info.value.errno == errno.EMSGSIZE
        # the line is refused whole: nothing of it is stored, and this open file refuses
        # every later write (its rest could follow, as in a retry after a short write)
        for later in (b"z" * 100, b"zz\nafter\n"):
            assert oserror(os.write, fd, later) == errno.EMSGSIZE
    finally:
        assert oserror(os.close, fd) == errno.EMSGSIZE  # close() reports it too
    write_once(t / "produce", b"after\n")  # a new open goes on
    # the shell sees "Message too long"
    res = subprocess.run(
        ["bash", "-c", f"head -c 5000 /dev/zero | tr '\\0' a > '{t}/produce'"],
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0 and "Message too long" in res.stderr
    assert bodies(t) == [b"small", b"after"]


def test_eacces_for_a_topic_without_write_permission(mount_store, tmp_path):
    from rmqfs.engine.store import MessageStore

    store = tmp_path / "store"
    with MessageStore(str(store)) as s:
        s.create_topic("ReadOnlyTopic", perm=4)  # PermName.PERM_READ
        s.create_topic("Open")
    m = mount_store(store)
    t = m.mnt / "topics" / "ReadOnlyTopic"
    for name in ["produce", "produce.jsonl", "0/produce"]:
        assert oserror(open, t / name, "a") == errno.EACCES
    res = subprocess.run(["bash", "-c", f"echo hi > '{t}/produce'"], capture_output=True, text=True)
    assert res.returncode == 1 and "Permission denied" in res.stderr
    # files cannot be created, renamed or removed anywhere in the generated tree
    o = m.mnt / "topics" / "Open"
    assert oserror(open, o / "newfile", "w") == errno.EACCES
    assert oserror(os.unlink, o / "produce") == errno.EPERM
    assert oserror(os.rename, o / "produce", o / "p2") == errno.EPERM
    assert oserror(os.rmdir, o / "0") == errno.EPERM  # rmdir topics/Open deletes the topic
    for f in [o / "messages.jsonl", m.mnt / "status.json", m.mnt / "raw" / "lock"]:
        assert oserror(open, f, "r+b") == errno.EACCES, f
        assert oserror(os.truncate, f, 0) == errno.EACCES, f


def test_erofs_on_a_read_only_mount(mount_store, tmp_path):
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    (m.mnt / "topics" / "T" / "produce").write_text("one\n")
    os.mkdir(m.mnt / "groups" / "G")
    m.umount()
    ro = mount_store(m.store, "ro", name="ro")
    t = ro.mnt / "topics" / "T"
    assert bodies(t) == [b"one"]
    assert oserror(open, t / "produce", "a") == errno.EROFS
    assert oserror(os.mkdir, ro.mnt / "topics" / "New") == errno.EROFS
    assert oserror(os.mkdir, ro.mnt / "groups" / "New") == errno.EROFS
    assert oserror(open, ro.mnt / "groups" / "G" / "T" / "0" / "offset", "w") == errno.EROFS
    assert json.loads((ro.mnt / "status.json").read_text())["readOnly"] is True


def test_enoent_eisdir_enotdir(mount_store):
    m = mount_store()
    t = m.mnt / "topics" / "L"
    os.mkdir(t)
    (t / "0" / "produce").write_text("a\nb\n")
    first = json.loads((t / "0" / "by-offset" / "0").read_text())
    missing = [
        m.mnt / "topics" / "Nope",
        t / "7",
        t / "0" / "by-offset" / "2",
        t / "0" / "by-offset" / "-1",
        t / "0" / "by-offset" / "x",
        t / "0" / "by-time" / str(first["storeTimestamp"] + 10**9),
        t / "keys" / "no-such-key",
        m.mnt / "messages" / "00",
        m.mnt / "messages" / ("F" * 32),
        m.mnt / "messages" / first["msgId"].replace(first["msgId"][-1], "F"),
        m.mnt / "groups" / "NoGroup",
        m.mnt / "raw" / "nothing",
    ]
    for p in missing:
        assert oserror(os.stat, p) == errno.ENOENT, p
    assert oserror(open, m.mnt / "topics" / "Nope" / "produce", "a") == errno.ENOENT
    # lookups are not listed, but exist by name
    assert os.listdir(t / "0" / "by-offset") == [] and os.listdir(t / "keys") == []
    assert json.loads((m.mnt / "messages" / first["msgId"]).read_text()) == first
    assert oserror(open, t, "w") == errno.EISDIR
    assert oserror(os.read, os.open(t, os.O_RDONLY), 10) == errno.EISDIR
    assert oserror(os.stat, t / "produce" / "x") == errno.ENOTDIR
    assert oserror(os.listdir, t / "bodies.txt") == errno.ENOTDIR
    assert oserror(os.mkdir, t / "0" / "sub") == errno.EPERM


@contextlib.contextmanager
def _full_disk_mount(mount_store, tmp_path: Path, conf: str, topic: str):
    """A store on an 8 MiB tmpfs mounted with the broker.conf text ``conf`` and ``topic``
    made: yields ``(tmpfs directory, broker.conf path, Mount, topic directory)``; the tmpfs is
    unmounted afterwards, whatever happened."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        path = tmp_path / "broker.conf"
        path.write_text(conf)
        m = mount_store(disk / "store", config=path)
        t = m.mnt / "topics" / topic
        os.mkdir(t)
        yield disk, path, m, t
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_enospc_on_a_full_disk_keeps_the_store_consistent(mount_store, tmp_path):
    conf = (
        "mappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=20000\n"
        "messageIndexEnable=false\n"
    )
    with _full_disk_mount(mount_store, tmp_path, conf, "Full") as (disk, _, m, t):
        acked = [b"first"]
        fd = os.open(t / "produce", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"first\n")
        os.fsync(fd)  # the first flush creates the checkpoint, before the disk is full
        err = None
        try:
            for i in range(100_000):
                batch = [b"%07d-%s" % (i * 10 + k, b"p" * 1000) for k in range(10)]
                try:
                    os.write(fd, b"\n".join(batch) + b"\n")
                except OSError as exc:
                    err = exc.errno
                    break
                acked += batch
        finally:
            os.close(fd)
        assert err == errno.ENOSPC
        assert len(acked) > 1000
        # the mount still serves, and holds exactly the acknowledged messages
        assert bodies(t) == acked
        # reading works and other writes fail cleanly with ENOSPC too (or succeed if small)
        m.umount()
        assert not (disk / "store" / "abort").exists()
        recs = refreader.read_commitlog(disk / "store" / "commitlog")
        assert [r["body"] for r in recs] == acked
        m.mount()
        assert bodies(t) == acked
        m.umount()


def _fill(disk: Path) -> None:
    """Fill the filesystem at ``disk`` to its last page."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 4096):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_at_close_is_said_and_the_crash_recovery_after_it_opens(mount_store, tmp_path):
    """Index entries of single puts wait in memory; on a disk full by then the close cannot
    write them, so ``abort`` stays: ``rmqfs umount`` said nothing (it says so now), and the
    recovery that follows read the IndexFile's sparse slot table through a mapping, which on
    a full tmpfs is a SIGBUS (each hole read so takes a page): the mount, ``rmqfs produce``
    and ``rmqfs recover`` died (a review). It reads the slots with pread now: on the full disk
    the writable mount refuses with the ENOSPC and a hint (recovery has to write), ``-o ro``
    reads every acknowledged message, and once space is free it mounts and recovers."""
    conf_text = (
        "mappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=60000\n"
        "defaultTopicQueueNums=1\n"
    )
    with _full_disk_mount(mount_store, tmp_path, conf_text, "T") as (disk, conf, m, t):
        fd = os.open(t / "produce.jsonl", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b'{"body": "m0", "keys": ["k0"]}\n')
            os.fsync(fd)  # every file made and the checkpoint written, before the disk fills
            _fill(disk)
            for i in range(1, 9):  # the CommitLog and the queue's file are preallocated
                os.write(fd, b'{"body": "m%d", "keys": ["key-%d"]}\n' % (i, i))
        finally:
            os.close(fd)
        res = run_rmqfs("umount", m.mnt)
        assert "was not closed cleanly" in res.stderr and "recovers it" in res.stderr
        assert (disk / "store" / "abort").exists()

        def index_kib() -> int:
            du = subprocess.run(["du", "-sk", disk / "store" / "index"], capture_output=True)
            return int(du.stdout.split()[0])

        used = index_kib()
        # on the full disk: the recovery must write what the close could not, and says so
        # (it was killed by a SIGBUS before it got there)
        res = run_rmqfs("mount", disk / "store", m.mnt, "--config", conf, check=False)
        assert res.returncode == 1 and "SIG" not in res.stderr
        assert "No space left on device" in res.stderr and "-o ro" in res.stderr
        assert index_kib() <= used + 64  # the slot table's holes were not read into pages
        ro = mount_store(disk / "store", "ro", config=conf, name="ro")
        assert bodies(ro.mnt / "topics" / "T") == [b"m%d" % i for i in range(9)]
        ro.umount()
        os.unlink(disk / "filler")
        m.mount()
        assert bodies(t) == [b"m%d" % i for i in range(9)]
        assert json.loads((t / "keys" / "key-8").read_text())["body"] == "m8"
        m.umount()
        assert not (disk / "store" / "abort").exists()


def test_refusals_the_readme_names(mount_store, tmp_path):
    """posix_fallocate on produce stores nothing (glibc emulates it with NUL writes: refused,
    EINVAL); a produce file opened O_RDWR reads as empty; mknod and symlink are EACCES, link
    EPERM; system topics cannot be made or written."""
    m = mount_store(tmp_path / "store")
    t = m.mnt / "topics" / "T"
    os.mkdir(t)
    fd = os.open(t / "produce", os.O_RDWR)
    try:
        assert os.read(fd, 100) == b""
        assert oserror(os.posix_fallocate, fd, 0, 8192) == errno.EINVAL
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    with open(t / "produce", "ab") as f:
        f.write(b"real\n")
    assert bodies(t) == [b"real"]
    assert oserror(os.mknod, t / "node", 0o644 | 0o100000) == errno.EACCES
    assert oserror(os.mkfifo, t / "fifo") == errno.EACCES
    assert oserror(os.symlink, "/etc/passwd", t / "link") == errno.EACCES
    assert oserror(os.link, t / "produce", t / "hard") == errno.EPERM
    assert oserror(os.mkdir, m.mnt / "topics" / "SCHEDULE_TOPIC_XXXX") == errno.EINVAL
    assert oserror(os.mkdir, m.mnt / "topics" / "RMQ_SYS_TRANS_HALF_TOPIC") == errno.EINVAL
    assert sorted(os.listdir(m.mnt / "topics")) == ["T"]


def test_extended_attributes_are_enotsup_and_recorded(mount_store):
    """setxattr/removexattr: ENOTSUP, in refused.jsonl with the reason (issue 26: it answered
    ENOTSUP from the kernel with no trace of it); getxattr still finds none."""
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "T")
    target = m.mnt / "topics" / "T" / "produce"
    assert oserror(os.setxattr, target, "user.note", b"1") == errno.ENOTSUP
    assert oserror(os.removexattr, target, "user.note") == errno.ENOTSUP
    assert oserror(os.getxattr, target, "user.note") in (errno.ENODATA, errno.ENOTSUP)
    refused = [json.loads(x) for x in (m.mnt / "refused.jsonl").read_text().splitlines()]
    assert [(e["op"], e["path"], e["errno"]) for e in refused] == [
        ("setxattr", "/topics/T/produce", "ENOTSUP"),
        ("removexattr", "/topics/T/produce", "ENOTSUP"),
    ]
    assert "extended attributes are not kept" in refused[0]["reason"]
