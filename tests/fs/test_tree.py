"""The filesystem tree without FUSE (no-mount tier): fusefs.nodes driven through the node API,
with the errno each refusal gives on a real mount (tests/mount/test_mount_basic.py,
test_fs_errors.py and test_fs_hardening.py check the same rules through the kernel)."""

import errno
import json
import os

import pytest

from fstree import tree
from rmqfs.fusefs.base import FsError


def errno_of(fn, *args, **kw) -> int:
    with pytest.raises(FsError) as info:
        fn(*args, **kw)
    return info.value.errno


def messages(t, topic):
    out = []
    for q in t.store.queue_ids(topic):
        out += [(q, qoff, r.body) for qoff, r in t.store.iter_queue(topic, q)]
    return out


def test_root_lists_the_contract_entries(tmp_path):
    with tree(tmp_path) as t:
        assert t.root.list() == [
            "README.txt",
            "status.json",
            "refused.jsonl",
            "topics",
            "groups",
            "messages",
            "view",
            "view.ddl",
            "raw",
            "snapshots",
        ]
        assert t.root.child("nothing") is None
        assert b"topics/<topic>/produce" in t.read("/README.txt")
        status = json.loads(t.read("/status.json"))
        assert status["commitLogMaxOffset"] == 0 and "brokerName" in status


def test_mkdir_topic_then_produce_lines_and_the_last_line_at_close(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        assert "T" in t.node("/topics").list()
        assert errno_of(t.mkdir, "/topics/T") == errno.EEXIST
        assert errno_of(t.mkdir, "/topics/bad name") == errno.EINVAL
        assert errno_of(t.mkdir, "/topics/T\n") == errno.EINVAL
        t.write("/topics/T/produce", b"one\ntw", b"o\nthree")  # "three": stored at close
        bodies = sorted(b for _, _, b in messages(t, "T"))
        assert bodies == [b"one", b"three", b"two"]
        assert t.read("/topics/T/produce") == b""  # write-only: always empty when read
        # a queue's own produce file puts into that queue
        t.write("/topics/T/2/produce", b"q2\n")
        assert [(q, b) for q, _, b in messages(t, "T") if b == b"q2"] == [(2, b"q2")]


def test_produce_jsonl_refusals_store_nothing_of_the_write(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/J")
        path = "/topics/J/produce.jsonl"
        t.write(path, b'{"body": "a", "tags": "TagA", "keys": ["k1"]}\n')
        for bad in (
            b'{"body": "x"}\n{not json}\n',  # all or nothing: "x" is not stored
            b'{"body": "x", "properties": {"__CRC32#": "1"}}\n',  # reserved name
            b'{"body": "x", "tags": "a\\u0001b"}\n',  # a property separator
            b'{"body": "x", "queueId": true}\n',
            b'[1, 2]\n',
        ):
            assert errno_of(t.write, path, bad) == errno.EINVAL, bad
        assert [b for _, _, b in messages(t, "J")] == [b"a"]
        _, rec = next(t.store.iter_queue("J", messages(t, "J")[0][0]))
        assert rec.tags == "TagA" and rec.keys == ["k1"]


def test_produce_jsonl_plain_lines_store_what_their_messages_store(tmp_path, monkeypatch):
    """A write whose lines have a body and at most tags and keys is stored from columns
    (``put_bodies``, no Message each); a write with one richer line as a Message each: both
    give the records, queues, tags and keys that one Message per line gives, in line order,
    and a bad line among plain ones still refuses the whole write, naming that line."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/J")
        t.mkdir("/topics/K")
        plain = b"".join(b'{"body": "m%d \\u00e9\\ud83d\\ude00"}\n' % i for i in range(6))
        t.write("/topics/J/produce.jsonl", plain)
        t.write("/topics/K/produce", "".join(f"m{i} \u00e9\U0001f600\n" for i in range(6)).encode())
        for topic in ("J", "K"):
            got = sorted(messages(t, topic), key=lambda m: m[2])
            assert [(q, b) for q, _, b in got] == [
                (i % 4, f"m{i} \u00e9\U0001f600".encode()) for i in range(6)
            ]
        mixed = b'{"body": "p1"}\n{"body": "t1", "tags": "TagA"}\n \n{"body": "p2"}\n'
        t.store.create_topic("M", 1)
        t.write("/topics/M/produce.jsonl", mixed)
        got = [(r.body, r.tags) for _, r in t.store.iter_queue("M", 0)]
        assert got == [(b"p1", None), (b"t1", "TagA"), (b"p2", None)]
        tagged = (
            b'{"body": "a", "tags": "TagA", "keys": "k1 k2"}\n'
            b'{"body": "b", "tags": null, "keys": "k3"}\n{"body": "c", "tags": "TagB"}\n'
            b'{"keys": null, "body": "d"}\n'
        )
        t.store.create_topic("N", 1)
        t.write("/topics/N/produce.jsonl", tagged)  # (new tags: checked a line each, once)
        with monkeypatch.context() as mp:  # known tags: from columns, no Message each
            mp.setattr(t.store, "put_messages", None)
            t.write("/topics/N/produce.jsonl", tagged)
        got = [(r.body, r.tags, r.keys) for _, r in t.store.iter_queue("N", 0)]
        assert got == 2 * [
            (b"a", "TagA", ["k1", "k2"]),
            (b"b", None, ["k3"]),
            (b"c", "TagB", []),
            (b"d", None, []),
        ]
        assert [r.commitlog_offset for r in t.store.query_by_key("N", "k3")] == [
            r.commitlog_offset for q, r in t.store.iter_queue("N", 0) if r.body == b"b"
        ][::-1]
        before = len(messages(t, "J"))
        for bad, line in (
            (b'{"body": "ok", "tags": "TagA"}\n{"body": "x", "tags": "B\\u0001"}\n', 2),
            (b'{"body": "ok", "keys": "k"}\n{"body": "x", "keys": "k\\n"}\n', 2),
            (b'{"body": "ok"}\n{"body": ""}\n', 2),  # an empty body
            (b'{"body": "ok"}\n{"body": "\\ud800"}\n', 2),  # a lone surrogate
            (b'{"body": "ok"}\n{"body": "a", "body": "b"}\n', 2),  # a name twice
            (b'{"body": "ok"}\n{"body": "x", "bad": 1}\n{nope\n', 2),  # the first bad line
            (b'{"body": "ok"}\n\xef\xbb\xbf{"body": "b"}\n', 2),  # a byte-order mark
        ):
            with pytest.raises(FsError) as info:
                t.write("/topics/J/produce.jsonl", bad)
            assert info.value.errno == errno.EINVAL and f"line {line} " in str(info.value), bad
        assert len(messages(t, "J")) == before


def test_a_refused_continuation_poisons_the_open_file(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/P")
        h = t.node("/topics/P/produce.jsonl").open(os.O_WRONLY)
        assert h.write(b'{"body": "st') == 12  # buffered: no line yet
        assert errno_of(h.write, b'art", "bad": }\n') == errno.EINVAL
        assert errno_of(h.write, b'{"body": "later"}\n') == errno.EINVAL  # same errno after
        assert errno_of(h.flush) == errno.EINVAL
        h.release()
        assert messages(t, "P") == []


def test_a_line_longer_than_max_message_size_is_emsgsize(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/L")
        limit = t.store.config.max_message_size
        h = t.node("/topics/L/produce").open(os.O_WRONLY)
        assert errno_of(h.write, b"x" * (limit + 1)) == errno.EMSGSIZE
        h.release()
        assert messages(t, "L") == []


def test_unfinished_lines_are_bounded_across_handles(tmp_path):
    """Issue 26, item 7: another user's unfinished produce.jsonl lines over many handles are
    bounded in total (they took the daemon from 60 to 595 MB with 100 handles), in a pool of
    their own: the owner's unfinished lines still buffer meanwhile. Giving back is exact:
    finished, released and refused lines free their bytes."""
    from rmqfs.fusefs.base import LineBudget

    unit = 8 << 10
    with tree(tmp_path, others_write=True) as t:
        t.mkdir("/topics/B")
        t.ctx.line_budget = budget = LineBudget(os.getuid(), 8 * unit, 3 * unit, 2 * unit)
        node = t.node("/topics/B/produce.jsonl")
        other, other2 = 65534, 65533
        chunk = b'{"body": "' + b"x" * (unit - 10)  # an unfinished line of `unit` bytes
        hs = [node.open_as(os.O_WRONLY, other) for _ in range(3)]
        assert hs[0].write(chunk) == len(chunk)
        assert hs[1].write(chunk) == len(chunk)
        assert errno_of(hs[2].write, chunk) == errno.ENOBUFS  # 2 units each at most
        h2 = node.open_as(os.O_WRONLY, other2)
        assert h2.write(chunk) == len(chunk)
        h3 = node.open_as(os.O_WRONLY, other2)
        assert errno_of(h3.write, chunk) == errno.ENOBUFS  # 3 units for all others
        assert budget.used(other) == 2 * unit and budget.used(other2) == unit
        mine = [node.open_as(os.O_WRONLY, os.getuid()) for _ in range(4)]
        for h in mine:  # the owner's pool is its own
            assert h.write(chunk) == len(chunk)
        assert budget.used() == 4 * unit
        assert hs[0].write(b'"}\n{"body": "ab') == 15  # a line ends: its bytes are given back
        assert budget.used(other) == unit + 12
        for h in (*hs, h2, h3, *mine):  # unfinished lines are put (and refused) at close
            if h.buf:  # none of them one whole JSON object: refused (the FUSE layer logs it)
                assert errno_of(h.release) == errno.EINVAL
            else:
                h.release()
        assert budget.held == {}
        assert [len(body) for _, _, body in messages(t, "B")] == [unit - 10]


def test_produce_file_truncate_and_unwritable_topic(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        node = t.node("/topics/T/produce")
        node.truncate(0)  # `>` redirection: fine
        assert errno_of(node.truncate, 5) == errno.EINVAL
        cfg = t.store.topic_config.get("T")
        cfg.perm = 4  # PERM_READ only
        assert errno_of(node.open, os.O_WRONLY) == errno.EACCES
        assert node.open(os.O_RDONLY).read(0, 10) == b""


def test_read_only_tree_refuses_every_write_with_erofs(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/produce", b"a\n")
        t.mkdir("/groups/G")
    with tree(tmp_path, read_only=True) as t:
        assert errno_of(t.node("/topics/T/produce").open, os.O_WRONLY) == errno.EROFS
        assert errno_of(t.mkdir, "/topics/U") == errno.EROFS
        assert errno_of(t.mkdir, "/groups/H") == errno.EROFS
        assert errno_of(t.node("/groups/G/T/0/offset").open, os.O_WRONLY) == errno.EROFS
        t.mkdir("/snapshots/s")  # a read-only mount still freezes a point in time
        assert "SNAPSHOT.json" in t.node("/snapshots/s").list()
        assert t.node("/topics/T/produce").stat().mode & 0o222 == 0  # no write bit shown
        assert [b for _, _, b in messages(t, "T")] == [b"a"]


def test_only_the_owner_may_write_unless_allow_other_write(tmp_path):
    with tree(tmp_path) as t:
        assert errno_of(t.ctx.check_write, os.getuid() + 1000) == errno.EACCES
        t.ctx.check_write(None)  # the daemon itself
        t.ctx.check_write(0)
        assert t.node("/topics").stat().mode & 0o777 == 0o755
    with tree(tmp_path, others_write=True) as t:
        t.ctx.check_write(os.getuid() + 1000)
        assert t.node("/topics").stat().mode & 0o777 == 0o777


def test_groups_and_offset_commits(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/0/produce", b"".join(b"m%d\n" % i for i in range(5)))
        assert t.node("/groups").list() == []
        t.mkdir("/groups/G")
        assert errno_of(t.mkdir, "/groups/G") == errno.EEXIST
        assert errno_of(t.mkdir, "/groups/a b") == errno.EINVAL
        offset = "/groups/G/T/0/offset"
        t.write(offset, b"3\n", flags=os.O_WRONLY | os.O_TRUNC)
        assert t.read(offset) == b"3\n"
        assert t.store.consumer_offsets.query("G", "T", 0) == 3
        assert errno_of(t.write, offset, b"9\n") == errno.EINVAL  # past maxOffset 5
        assert errno_of(t.write, offset, b"three\n") == errno.EINVAL
        t.write(offset, b"5")  # no newline: committed at close
        assert t.read(offset) == b"5\n"
        progress = json.loads(t.read("/groups/G/progress.json"))
        q0 = next(q for q in progress["queues"] if q["queueId"] == 0)
        assert (q0["brokerOffset"], q0["consumerOffset"], q0["diff"]) == (5, 5, 0)


def test_lookups_by_offset_msgid_and_key_are_entries_or_enoent(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write(
            "/topics/T/produce.jsonl", b'{"body": "hello", "keys": ["order-7"], "queueId": 1}\n'
        )
        _, rec = next(t.store.iter_queue("T", 1))
        by_offset = json.loads(t.read("/topics/T/1/by-offset/0"))
        assert by_offset["body"] == "hello" and by_offset["msgId"] == rec.msg_id
        assert json.loads(t.read(f"/messages/{rec.msg_id}"))["queueOffset"] == 0
        assert b"hello" in t.read("/topics/T/keys/order-7")
        for missing in (
            "/topics/T/1/by-offset/1",
            "/topics/T/1/by-offset/00",
            "/topics/T/1/by-offset/+0",
            "/topics/T/1/by-offset/\u00b2",
            "/messages/NOTANID",
            "/topics/T/keys/nokey",
            "/topics/T/9",
            "/topics/T/01",
            "/topics/nope",
        ):
            assert errno_of(t.node, missing) == errno.ENOENT, missing
        assert t.node("/topics/T/1/by-offset").list() == []  # lookups are not listed


def test_raw_is_the_store_read_only(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/produce", b"a\n")
        assert {"commitlog", "consumequeue", "config"} <= set(t.node("/raw").list())
        seg = t.node("/raw/commitlog").list()[0]
        data = t.read(f"/raw/commitlog/{seg}")
        with open(os.path.join(t.store.root, "commitlog", seg), "rb") as f:
            assert data == f.read(len(data))
        assert errno_of(t.node(f"/raw/commitlog/{seg}").open, os.O_RDWR) == errno.EACCES
        assert errno_of(t.node("/raw").mkdir, "x") == errno.EPERM
        assert errno_of(t.node, "/raw/../etc") == errno.ENOENT


def test_snapshots_mkdir_and_rmdir(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/produce", b"a\nb\n")
        frozen_at = t.store.commitlog.max_offset
        t.mkdir("/snapshots/s1")
        assert t.node("/snapshots").list() == ["s1"]
        assert errno_of(t.mkdir, "/snapshots/s1") == errno.EEXIST
        t.write("/topics/T/produce", b"c\n")  # after the snapshot: not in it
        names = t.node("/snapshots/s1").list()
        assert "SNAPSHOT.json" in names and "commitlog" in names
        manifest = json.loads(t.read("/snapshots/s1/SNAPSHOT.json"))
        assert manifest["commitLogOffset"] == frozen_at < t.store.commitlog.max_offset
        t.rmdir("/snapshots/s1")
        assert t.node("/snapshots").list() == []
        assert errno_of(t.rmdir, "/snapshots/s1") == errno.ENOENT


def test_another_users_open_file_does_not_keep_a_dropped_snapshot(tmp_path):
    """A file of a snapshot held open by another user (``-o allow_other``) does not keep the
    snapshot's descriptors and memory once the owner drops it: its reads then fail with EIO
    (found by a review: a held file kept every dropped snapshot, 20-38 MB and a descriptor a
    store file each, until the owner's mkdir failed with EMFILE). The owner's own handle (a
    backup running) keeps reading what it opened."""
    other = os.getuid() + 12345
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/produce", b"a\nb\n")
        t.mkdir("/snapshots/s1")
        node = t.node("/snapshots/s1/checkpoint")
        theirs = node.open_as(os.O_RDONLY, other)
        mine = node.open_as(os.O_RDONLY, os.getuid())
        want = theirs.read(0, 4096)
        assert want and mine.read(0, 4096) == want
        snap = node.snap
        t.read("/snapshots/s1/SNAPSHOT.json")  # (the sums done: their hold let go)
        t.rmdir("/snapshots/s1")
        assert mine.read(0, 4096) == want  # the owner's handle pins it
        assert theirs.read(0, 4096) == want
        mine.release()
        assert snap.files == {}  # closed: the other user's handle held nothing
        assert errno_of(theirs.read, 0, 4096) == errno.EIO
        theirs.release()


def test_removing_and_renaming_store_things_is_eperm(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        assert errno_of(t.rmdir, "/topics/T/0") == errno.EPERM  # only topics/ and groups/
        assert errno_of(t.rmdir, "/topics/T/keys") == errno.EPERM
        assert errno_of(t.rmdir, "/raw/config") == errno.EPERM
        assert errno_of(t.node("/status.json").open, os.O_WRONLY) == errno.EACCES
        assert errno_of(t.node("/status.json").truncate, 0) == errno.EACCES
        assert errno_of(t.node("/topics").open, os.O_RDONLY) == errno.EISDIR
        assert errno_of(t.node("/status.json").list) == errno.ENOTDIR


def test_offset_lines_are_bounded_and_each_complete_line_commits(tmp_path):
    """An offset line is short: a long one is EINVAL as soon as it is seen, the handle keeps
    no more than OFFSET_LINE_MAX bytes, and a write costs time linear in its size."""
    from rmqfs.fusefs.nodes import OFFSET_LINE_MAX

    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/0/produce", b"".join(b"m%d\n" % i for i in range(5)))
        t.mkdir("/groups/G")
        offset = "/groups/G/T/0/offset"
        h = t.node(offset).open(os.O_WRONLY)
        try:
            chunk = b"1" * 4096
            assert errno_of(h.write, chunk) == errno.EINVAL  # no newline, over the bound
            assert len(h.buf) == 0
            for _ in range(3):  # digits keep coming: each write refused, nothing kept
                assert errno_of(h.write, chunk) == errno.EINVAL
                assert len(h.buf) <= OFFSET_LINE_MAX
            assert errno_of(h.write, b"2" * 100 + b"\n") == errno.EINVAL
        finally:
            h.release()
        assert t.store.consumer_offsets.query("G", "T", 0) in (-1, 0)
        t.write(offset, b"1\n2\n4\n")  # several lines in one write: each commits, in order
        assert t.read(offset) == b"4\n"
        t.write(offset, b"  3  \n")
        assert t.read(offset) == b"3\n"
        # one rule, mqadmin's (its options are trim()med, then Long.parseLong): blanks around,
        # a sign, leading zeros; nothing else (issue 26: " 0" worked and "+0" did not)
        for line, value in ((b" 0\n", 0), (b"+2\n", 2), (b"\t005\r\n", 5), (b"-0\n", 0)):
            t.write(offset, line)
            assert t.read(offset) == b"%d\n" % value, line
        for bad in (b"+ 1\n", b"1 2\n", b"0x1\n", b"1e0\n", b"++1\n", b"\xd9\xa0\n", b"9" * 20):
            h = t.node(offset).open(os.O_WRONLY)
            try:
                assert errno_of(h.write, bad + b"\n") == errno.EINVAL, bad
            finally:
                h.release()
        assert t.read(offset) == b"0\n"


def test_system_topics_are_refused_as_the_broker_refuses_them(tmp_path):
    """TopicValidator: clients may not create system topics (EINVAL) nor send to the
    NOT_ALLOWED_SEND ones (EACCES); the broker's own delayed messages still go there."""
    from rmqfs.engine.format.message import SCHEDULE_TOPIC
    from rmqfs.engine.service.validation import NOT_ALLOWED_SEND_TOPICS, SYSTEM_TOPICS

    with tree(tmp_path) as t:
        for name in sorted(SYSTEM_TOPICS) + ["rmq_sys_wheel_timer"]:
            assert errno_of(t.mkdir, f"/topics/{name}") == errno.EINVAL, name
        assert t.node("/topics").list() == []
        t.mkdir("/topics/T")
        from rmqfs.engine.store import Message

        t.store.put_messages([Message("T", b"later", delay_level=3)])  # the broker's path
        assert SCHEDULE_TOPIC in t.store.topic_names()
        assert (
            errno_of(t.node(f"/topics/{SCHEDULE_TOPIC}/produce").open, os.O_WRONLY) == errno.EACCES
        )
        from rmqfs.engine.errors import PermissionDeniedError

        for name in NOT_ALLOWED_SEND_TOPICS:
            with pytest.raises(PermissionDeniedError):
                t.store.put_messages([Message(name, b"x")])


def test_produce_reads_empty_and_refuses_nul_bytes(tmp_path):
    """A produce file opened O_RDWR reads as empty (docs/mount.md); plain produce takes text, so the
    NULs of posix_fallocate's emulation (or any NUL) are refused, nothing stored."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        h = t.node("/topics/T/produce").open(os.O_RDWR)
        try:
            assert h.read(0, 100) == b""
            assert errno_of(h.write, b"\0") == errno.EINVAL  # posix_fallocate's emulation
            h.flush()
        finally:
            h.release()
        assert errno_of(t.write, "/topics/T/produce", b"ok\na\0b\n") == errno.EINVAL
        assert messages(t, "T") == []
        t.write("/topics/T/produce.jsonl", b'{"bodyBase64": "AAE="}\n')
        assert [m[2] for m in messages(t, "T")] == [b"\0\x01"]


def test_rmdir_topic_is_delete_topic(tmp_path):
    """rmdir topics/T: mqadmin deleteTopic. topics.json loses the entry, consumequeue/T/ and
    the topic's offsets (T@G keys) go, other topics and groups stay; the old renders are
    dropped, so a topic created again under the name starts empty."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.mkdir("/topics/U")
        t.write("/topics/T/produce", b"".join(b"t%d\n" % i for i in range(8)))
        t.write("/topics/U/produce", b"u\n")
        t.mkdir("/groups/G")
        t.write("/groups/G/T/0/offset", b"1\n")
        t.write("/groups/G/U/0/offset", b"1\n")
        assert t.read("/topics/T/bodies.txt").count(b"\n") == 8  # rendered, cached
        t.rmdir("/topics/T")
        assert t.node("/topics").list() == ["U"]
        assert errno_of(t.node, "/topics/T") == errno.ENOENT
        root = t.store.root
        assert not os.path.exists(os.path.join(root, "consumequeue", "T"))
        with open(os.path.join(root, "config", "topics.json")) as f:
            assert list(json.load(f)["topicConfigTable"]) == ["U"]
        with open(os.path.join(root, "config", "consumerOffset.json")) as f:
            assert list(json.load(f)["offsetTable"]) == ["U@G"]
        assert t.node("/groups/G").list() == ["progress.json", "U"]
        assert errno_of(t.rmdir, "/topics/T") == errno.ENOENT
        t.mkdir("/topics/T")  # a new topic under the old name: nothing of the old one
        assert t.read("/topics/T/bodies.txt") == b""
        t.write("/topics/T/0/produce", b"new\n")
        assert t.read("/topics/T/bodies.txt") == b"new\n"
        assert t.read("/topics/T/0/by-offset/0").startswith(b"{")


def test_rmdir_of_a_system_topic_is_eperm_and_readonly_erofs(tmp_path):
    from rmqfs.engine.format.message import SCHEDULE_TOPIC
    from rmqfs.engine.store import Message

    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.store.put_messages([Message("T", b"later", delay_level=3)])
        assert SCHEDULE_TOPIC in t.node("/topics").list()
        assert errno_of(t.rmdir, f"/topics/{SCHEDULE_TOPIC}") == errno.EPERM
        assert SCHEDULE_TOPIC in t.node("/topics").list()
    with tree(tmp_path, read_only=True) as t:
        assert errno_of(t.rmdir, "/topics/T") == errno.EROFS
        assert errno_of(t.rmdir, "/groups/G") == errno.EROFS


def test_rmdir_group_is_delete_sub_group_with_its_offsets(tmp_path):
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/produce", b"a\nb\n")
        t.mkdir("/groups/G")
        t.mkdir("/groups/H")
        t.write("/groups/G/T/0/offset", b"1\n")
        t.write("/groups/H/T/0/offset", b"1\n")
        t.rmdir("/groups/G")
        assert t.node("/groups").list() == ["H"]
        root = t.store.root
        with open(os.path.join(root, "config", "subscriptionGroup.json")) as f:
            assert list(json.load(f)["subscriptionGroupTable"]) == ["H"]
        with open(os.path.join(root, "config", "consumerOffset.json")) as f:
            assert list(json.load(f)["offsetTable"]) == ["T@H"]
        assert errno_of(t.rmdir, "/groups/G") == errno.ENOENT


def test_writing_topic_json_is_update_topic(tmp_path):
    """topic.json takes a JSON object of the fields to change (readQueueNums,
    writeQueueNums, perm, order), validated and applied atomically to topics.json; the file
    read and written back with a change works too; anything else is EINVAL, nothing kept."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        path = "/topics/T/topic.json"
        t.write(path, b'{"perm": 4, "writeQueueNums": 2}\n', flags=os.O_WRONLY | os.O_TRUNC)
        cfg = json.loads(t.read(path))
        assert (cfg["perm"], cfg["writeQueueNums"], cfg["readQueueNums"]) == (4, 2, 4)
        with open(os.path.join(t.store.root, "config", "topics.json")) as f:
            assert json.load(f)["topicConfigTable"]["T"] == cfg
        assert errno_of(t.node("/topics/T/produce").open, os.O_WRONLY) == errno.EACCES  # perm 4
        cfg["perm"] = 6
        t.write(path, json.dumps(cfg).encode(), flags=os.O_WRONLY | os.O_TRUNC)  # edited back
        assert json.loads(t.read(path))["perm"] == 6
        for bad in (
            b'{"perm": 3}',
            b'{"readQueueNums": 0}',
            b'{"writeQueueNums": 1025}',
            b'{"perm": true}',
            b'{"topicName": "X"}',
            b'{"colour": 1}',
            b'[1]',
            b'{"order": 1}',
        ):
            h = t.node(path).open(os.O_WRONLY)
            try:
                assert errno_of(h.write, bad) == errno.EINVAL, bad
            finally:
                h.release()
        assert json.loads(t.read(path)) == cfg
        h = t.node(path).open(os.O_WRONLY)  # split over writes: applied once whole
        try:
            assert h.write(b'{"readQueueNums"') == 16
            assert json.loads(t.read(path))["readQueueNums"] == 4
            h.write(b': 8}')
        finally:
            h.release()
        assert json.loads(t.read(path))["readQueueNums"] == 8
        assert "7" in t.node("/topics/T").list()
        h = t.node(path).open(os.O_WRONLY)  # an unfinished object fails at the last close
        h.write(b'{"perm": ')
        h.flush()  # a close(2) of a copy: nothing changed, no error
        assert h.write(b"4}") == 2  # (a dup's or a child's close never cut it)
        now = json.loads(t.read(path))
        assert now["perm"] == 4
        h.write(b'{"perm": ')
        assert errno_of(h.release) == errno.EINVAL  # the last close: refused, logged
        assert json.loads(t.read(path)) == now
    with tree(tmp_path, read_only=True) as t:
        assert errno_of(t.node("/topics/T/topic.json").open, os.O_WRONLY) == errno.EROFS


def test_a_descriptor_copy_closing_never_cuts_a_line(tmp_path):
    """FLUSH comes with every close(2), a dup's or a forked child's copy too (a shell's
    ``exec 3>> produce`` and the commands it runs): it never stores the unfinished line, nor
    commits a half-written offset or applies half a topic.json; it only refuses what no more
    bytes could mend, and then for good: the open file's last close (release) neither
    refuses nor logs that line again. The last close stores or commits what is left, as a
    pipe's reader sees its end only when every writer closed."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        h = t.node("/topics/T/0/produce").open(os.O_WRONLY)
        assert h.write(b"par") == 3
        h.flush()  # a child that inherited the descriptor exits
        assert h.write(b"tial\nlast") == 9
        h.flush()
        assert [b for _, _, b in messages(t, "T")] == [b"partial"]
        h.release()
        assert [b for _, _, b in messages(t, "T")] == [b"partial", b"last"]
        j = t.node("/topics/T/produce.jsonl").open(os.O_WRONLY)
        j.write(b'{"body": "a')
        j.flush()  # merely unfinished: no error (a child's close(2) must not fail)
        j.fsync()  # the complete lines made durable, no error either
        j.write(b'b"}')  # still one line
        j.flush()
        j.release()
        assert sorted(b for _, _, b in messages(t, "T"))[0] == b"ab"
        j = t.node("/topics/T/produce.jsonl").open(os.O_WRONLY)
        j.write(b'{"body": "x", "colour": 1}')  # whole already, and refused whatever follows
        assert errno_of(j.flush) == errno.EINVAL
        assert errno_of(j.write, b"\n") == errno.EINVAL  # refused for good
        j.release()  # nothing left: refused (and logged) once
        assert not any(b == b"x" for _, _, b in messages(t, "T"))
        t.write("/topics/T/0/produce", b"".join(b"m%d\n" % i for i in range(20)))
        t.mkdir("/groups/G")
        o = t.node("/groups/G/T/0/offset").open(os.O_WRONLY)
        o.write(b"1")
        o.flush()
        o.write(b"1")
        assert t.store.consumer_offsets.query("G", "T", 0) == -1
        o.release()
        assert t.store.consumer_offsets.query("G", "T", 0) == 11
        o = t.node("/groups/G/T/0/offset").open(os.O_WRONLY)
        o.write(b"99")  # past the max offset (21), and more digits only make it larger
        assert errno_of(o.flush) == errno.EINVAL
        o.release()
        assert t.store.consumer_offsets.query("G", "T", 0) == 11


def test_an_offset_write_is_all_or_nothing_and_a_refused_line_stays_refused(tmp_path):
    """A write of several offset lines commits all or none of them; a line that spans writes
    and is refused (over OFFSET_LINE_MAX) poisons the open file, so its rest is never
    committed as an offset of its own (``"0" * 40``, ``"0" * 30``, ``"9\\n"`` committed 9)."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/0/produce", b"".join(b"m%d\n" % i for i in range(20)))
        t.mkdir("/groups/G")
        offset = "/groups/G/T/0/offset"
        t.write(offset, b"2\n")
        h = t.node(offset).open(os.O_WRONLY)
        assert errno_of(h.write, b"5\nabc\n") == errno.EINVAL
        assert errno_of(h.write, b"4\nabc\n9") == errno.EINVAL
        assert errno_of(h.write, b"5\n99999\n") == errno.EINVAL  # out of range
        assert t.read(offset) == b"2\n"  # neither 5 nor 4
        assert h.write(b"0" * 40) == 40
        assert errno_of(h.write, b"0" * 30) == errno.EINVAL
        assert errno_of(h.write, b"9\n") == errno.EINVAL  # the refused line's rest
        assert errno_of(h.flush) == errno.EINVAL
        h.release()
        assert t.read(offset) == b"2\n"


def test_files_of_a_deleted_topic_or_group_never_bring_it_back(tmp_path):
    """A ``topic.json`` or ``offset`` descriptor opened before ``rmdir`` of its topic or
    group answers ENOENT, as produce does; the topic or group stays deleted."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/V")
        t.mkdir("/topics/T")
        t.write("/topics/T/0/produce", b"m\n")
        t.mkdir("/groups/G2")
        cfg = t.node("/topics/V/topic.json").open(os.O_WRONLY)
        off = t.node("/groups/G2/T/0/offset").open(os.O_WRONLY)
        t.rmdir("/topics/V")
        t.rmdir("/groups/G2")
        assert errno_of(cfg.write, b'{"perm": 6}') == errno.ENOENT
        assert errno_of(off.write, b"1\n") == errno.ENOENT
        cfg.release()
        off.release()
        assert "V" not in t.node("/topics").list() and not t.store.has_topic("V")
        assert "G2" not in t.node("/groups").list()


def test_topic_json_writes_count_in_the_line_budget(tmp_path):
    """What a ``topic.json`` write handle holds counts in the mount's budget of buffered
    bytes, as an unfinished produce line does: another user's handles cannot grow the
    daemon past it (2,000 handles of 64 KiB each took it from 83 to 208 MB)."""
    from rmqfs.fusefs.base import LineBudget

    unit = 8 << 10
    with tree(tmp_path, others_write=True) as t:
        t.mkdir("/topics/T")
        t.ctx.line_budget = budget = LineBudget(os.getuid(), 8 * unit, 3 * unit, 2 * unit)
        node = t.node("/topics/T/topic.json")
        other = 65534
        chunk = b'{"perm": ' + b" " * (unit - 16)
        hs = [node.open_as(os.O_WRONLY, other) for _ in range(3)]
        assert hs[0].write(chunk) == len(chunk)
        assert hs[1].write(chunk) == len(chunk)
        assert errno_of(hs[2].write, chunk) == errno.ENOBUFS
        assert budget.used(other) == 2 * (unit - 7)
        assert hs[0].write(b"6}") == 2  # applied: its bytes given back
        assert budget.used(other) == unit - 7
        for h in hs:
            if h.buf:
                assert errno_of(h.release) == errno.EINVAL
            else:
                h.release()
        assert budget.held == {}


def test_a_sync_flush_timeout_is_no_failed_write(tmp_path, monkeypatch):
    """Under SYNC_FLUSH a flush that takes longer than syncFlushTimeout leaves the lines
    stored (RocketMQ's FLUSH_DISK_TIMEOUT send status): the write succeeds, so a writer never
    retries it into duplicates (it answered ETIMEDOUT, kept the unfinished tail, and a retry
    stored a\\nb twice with "c" glued to the first retried line)."""
    from rmqfs.engine.errors import FlushDiskTimeoutError

    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        real = t.store.put_bodies

        def slow_disk(*args, **kw):
            real(*args, **kw)
            raise FlushDiskTimeoutError("flush took longer than syncFlushTimeout")

        monkeypatch.setattr(t.store, "put_bodies", slow_disk)
        h = t.node("/topics/T/0/produce").open(os.O_WRONLY)
        assert h.write(b"a\nb\nc") == 5
        assert h.write(b"d\n") == 2
        h.release()
        assert [b for _, _, b in messages(t, "T")] == [b"a", b"b", b"cd"]


def test_close_refuses_a_whole_json_line_the_put_would_refuse(tmp_path):
    """An unfinished ``produce.jsonl`` line that is one whole JSON value is checked at close()
    as the put would check it (a queueId the topic lacks, a body over maxMessageSize, a timed
    message without a timer store), not only its fields: close() fails with the errno, the
    line is refused for good and nothing is stored (the release, which no process hears,
    would have refused it)."""
    with tree(tmp_path) as t:
        t.store.create_topic("F", 4)
        limit = t.store.config.max_message_size
        for line, err in (
            (b'{"body": "q9", "queueId": 9}', errno.EINVAL),
            (b'{"body": "%s"}' % (b"b" * (limit + 1)), errno.EMSGSIZE),
            (b'{"body": "t", "delayMs": 60000}', errno.EINVAL),  # no timerwheel here
        ):
            h = t.node("/topics/F/produce.jsonl").open(os.O_WRONLY)
            h.write(line)
            with pytest.raises(FsError) as info:
                h.flush()
            assert info.value.errno == err, (line[:40], info.value)
            assert "line 1 of the write: " in str(info.value)
            assert "unknown field" not in str(info.value)
            h.release()
        # a good whole line still waits for the last close, and is stored then
        h = t.node("/topics/F/produce.jsonl").open(os.O_WRONLY)
        h.write(b'{"body": "fine", "queueId": 3}')
        h.flush()
        assert messages(t, "F") == []
        h.release()
        assert [(q, b) for q, _, b in messages(t, "F")] == [(3, b"fine")]
        h = t.node("/topics/F/produce.jsonl").open(os.O_WRONLY)
        h.write(b'{"body": "t", "delayMs": 60000}')
        with pytest.raises(FsError) as info:
            h.flush()
        assert "timerwheel" in str(info.value)
        h.release()
        # nothing was changed by the checks: no round robin moved, no system topic made
        assert t.store.topic_config.get("rmq_sys_wheel_timer") is None


def test_a_json_line_may_be_as_long_as_its_escapes_make_it(tmp_path):
    """A body of maxMessageSize bytes written with every byte escaped (``\\u0001``: 6 bytes
    each) is a valid message: the unfinished line may grow to six times maxMessageSize (and
    the longest properties) before the write is refused with EMSGSIZE, whose reason gives
    the bound."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/E")
        h = t.node("/topics/E/produce.jsonl").open(os.O_WRONLY)
        limit = t.store.config.max_message_size
        assert h.max_line >= 6 * limit
        body = "\u0001" * 20_000  # (a record must fit a 64 KiB segment here)
        line = json.dumps({"body": body}).encode()
        assert len(line) > 6 * 20_000
        assert h.write(line) == len(line)
        h.release()
        assert [b for _, _, b in messages(t, "E")] == [body.encode()]
        h = t.node("/topics/E/produce.jsonl").open(os.O_WRONLY)
        with pytest.raises(FsError) as info:
            h.write(b'{"body": "' + b"x" * h.max_line)
        assert info.value.errno == errno.EMSGSIZE and f"({h.max_line} bytes" in str(info.value)
        h.release()


def test_a_write_refused_at_put_names_its_line(tmp_path):
    """A line the put refuses (a queueId the topic lacks, a body over maxMessageSize) fails
    the whole write, naming the line as a parsing refusal does; nothing of the write stored."""
    with tree(tmp_path) as t:
        t.store.create_topic("Q", 2)
        limit = t.store.config.max_message_size
        with pytest.raises(FsError) as info:
            t.write("/topics/Q/produce.jsonl", b'{"body": "a"}\n\n{"body": "c", "queueId": 5}\n')
        assert info.value.errno == errno.EINVAL
        assert "line 3 of the write: " in str(info.value) and "(0..1)" in str(info.value)
        big = b"x" * (limit + 1)
        with pytest.raises(FsError) as info:
            t.write("/topics/Q/produce.jsonl", b'{"body": "a"}\n{"body": "%s"}\n' % big)
        assert info.value.errno == errno.EMSGSIZE and "line 2 of the write: " in str(info.value)
        assert messages(t, "Q") == []


def test_a_raw_file_deleted_while_open_keeps_its_attributes_for_its_reader(tmp_path):
    """Expiry deleting a store file that a backup holds open: the reader goes on reading it,
    and its attributes are its descriptor's (tar fstat()s and stat()s what it reads: ENOENT
    made it write a zero-padded member and exit 2), as a local file system keeps a deleted
    file open; once no one holds it, it is gone (ENOENT)."""
    with tree(tmp_path) as t:
        t.mkdir("/topics/T")
        t.write("/topics/T/produce", b"".join(b"line %d\n" % i for i in range(3000)))
        first = sorted(os.listdir(tmp_path / "store" / "commitlog"))[0]
        node = t.node(f"/raw/commitlog/{first}")
        size = node.stat().size
        h = node.open(os.O_RDONLY)
        head = h.read(0, 4096)
        os.unlink(tmp_path / "store" / "commitlog" / first)  # as expiry deletes it
        assert node.stat().size == size
        assert h.read(0, 4096) == head
        h.release()
        assert errno_of(node.stat) == errno.ENOENT


def test_lookups_in_groups_and_view_do_not_list_every_topic(tmp_path, monkeypatch):
    """``ls groups/G`` built every topic's node for each name it looked up, and a lookup in
    ``view/`` sorted every topic's name (on the trio loop): quadratic in the topics (106 s and
    12 s for 8,000; a review). A lookup asks the store for that one topic now; a listing names
    the topics once."""
    with tree(tmp_path) as t:
        for i in range(30):
            t.store.create_topic(f"T{i:02d}", 1)
        t.write("/topics/T07/produce", b"m\n")
        t.mkdir("/groups/G")
        calls = []
        real = type(t.store).topic_names

        def counted(self):
            calls.append(1)
            return real(self)

        monkeypatch.setattr(type(t.store), "topic_names", counted)
        g = t.node("/groups/G")
        names = g.list()
        assert names[0] == "progress.json" and len(names) == 31 and len(calls) == 1
        assert all(g.child(n) is not None for n in names) and len(calls) == 1
        assert g.child("nope") is None
        view = t.node("/view")
        assert view.child("topic=T07") is not None and view.child("topic=T99") is None
        assert len(calls) == 1
        assert t.read("/groups/G/T07/0/offset") == b"-1\n"  # (no commit yet)
