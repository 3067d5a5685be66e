"""Issue 15 item 5: damage is neither served nor forgotten, through the tree (no kernel).

A record whose body does not match its BODYCRC (one flipped body bit: every other check
passes) is never served by any read path of the mount: the JSON views (topic and queue
``messages.jsonl``/``bodies.txt``, ``pending.jsonl``), ``view/`` parts and the lookups
(``by-offset``, ``by-time``, ``keys/``, ``messages/<msgId>``) fail with EIO, status.json's
``damagedQueues`` names the queue and the offset, the log gets one warning line and no
traceback, and the other queue reads on."""

import errno
import json
import logging

import pytest

from fstree import small_config, tree
from rmqfs.engine.store import Message, MessageStore
from rmqfs.fusefs.base import FsError
from stores import flip_body_byte


def _store(tmp_path):
    root = tmp_path / "store"
    with MessageStore(str(root), small_config()) as s:
        s.create_topic("T", 2)
        s.put_messages(
            [Message("T", b"m%d" % i, keys=[f"k{i}"], queue_id=i % 2) for i in range(20)]
        )
        s.create_group("g")
    off = flip_body_byte(root, "T", 0, 0, small_config())  # message m0
    return root, off


def errno_of(fn, *args) -> int:
    with pytest.raises(Exception) as info:  # FsError, OSError or a StoreError: all carry errno
        fn(*args)
    return getattr(info.value, "errno", None)


def _damaged(t):
    return json.loads(t.read("/status.json"))["damagedQueues"]


def test_a_topic_view_over_damage_is_eio_and_noted(tmp_path, caplog):
    """Item 5b: the topic view is the first read to meet the damage: EIO, and status.json
    names the queue (it stayed [] before), in one warning line, no traceback."""
    root, off = _store(tmp_path)
    caplog.set_level(logging.DEBUG)
    with tree(tmp_path, store_dir=root) as t:
        assert _damaged(t) == []
        for path in ("/topics/T/messages.jsonl", "/topics/T/bodies.txt"):
            assert errno_of(t.read, path) == errno.EIO, path
        damaged = _damaged(t)
        assert [(d["topic"], d["queueId"]) for d in damaged] == [("T", 0)]
        assert f"offset {off}" in damaged[0]["error"] and "CRC" in damaged[0]["error"]
        assert t.read("/topics/T/1/bodies.txt") == b"".join(b"m%d\n" % i for i in range(1, 20, 2))
    noted = [r for r in caplog.records if "damaged" in r.getMessage()]
    assert len(noted) == 1 and noted[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.exc_info]


def test_every_read_path_of_the_tree_refuses_a_damaged_record(tmp_path):
    root, off = _store(tmp_path)
    with MessageStore(str(root), small_config(), read_only=True) as s:
        cq = s.consume_queue("T", 0)
        good = s.get_message("T", 0, 1)
        ts = s.commitlog.read_message(*cq.unit(0)[:2]).store_timestamp
        msg_id = s.commitlog.read_message(*cq.unit(0)[:2]).msg_id
    with tree(tmp_path, store_dir=root) as t:
        paths = [
            "/topics/T/0/messages.jsonl",
            "/topics/T/0/bodies.txt",
            "/groups/g/T/0/pending.jsonl",
            "/topics/T/0/by-offset/0",
            f"/topics/T/0/by-time/{ts}",
            "/topics/T/keys/k0",
            f"/messages/{msg_id}",
            f"/view/topic=T/queue=0/part-{0:020d}-{10:020d}.parquet",
            "/topics/T/messages.jsonl",
        ]
        for path in paths:
            assert errno_of(t.read, path) == errno.EIO, path
        damaged = _damaged(t)
        assert [(d["topic"], d["queueId"]) for d in damaged] == [("T", 0)]
        assert f"offset {off}" in damaged[0]["error"]
        # what is not damaged still reads
        assert json.loads(t.read("/topics/T/0/by-offset/1"))["body"] == "m2" == good.body.decode()
        assert b"m5" in t.read("/topics/T/keys/k5")
        assert t.read("/topics/T/1/bodies.txt").count(b"\n") == 10
        assert t.node(f"/view/topic=T/queue=1/part-{0:020d}-{10:020d}.parquet").stat().size > 0


def test_a_view_part_is_the_first_to_meet_the_damage(tmp_path):
    """A view/ part alone notes the damage too (the Spark-over-the-mount path)."""
    root, off = _store(tmp_path)
    with tree(tmp_path, store_dir=root) as t:
        part = f"/view/topic=T/queue=0/part-{0:020d}-{10:020d}.parquet"
        assert errno_of(t.read, part) == errno.EIO
        damaged = _damaged(t)
        assert [(d["topic"], d["queueId"]) for d in damaged] == [("T", 0)]
        assert f"offset {off}" in damaged[0]["error"]
        # its stat answers, not 0 bytes (Spark takes a failed stat for an empty part and
        # skips it): the rows are not left out without a word, the reads fail
        from rmqfs.fusefs.viewtree import UNREADABLE_SIZE

        st = t.node(part).stat()
        assert st.size == UNREADABLE_SIZE > 0 and st.attr_timeout == 0
        assert errno_of(t.read, part) == errno.EIO


def test_fuse_requests_turn_engine_errors_into_their_errno_without_traceback(caplog):
    """What reaches pyfuse3 (fusefs/ops.py ``Dispatcher``, on the loop or in a thread): a
    CorruptRecordError a node let through answers EIO with no traceback in the log (the store
    logged the damage once); before, it was logged with log.exception as a bug."""
    pyfuse3 = pytest.importorskip("pyfuse3")
    import trio

    from rmqfs.engine.errors import CorruptRecordError, NoSuchTopicError
    from rmqfs.fusefs import ops

    def damaged():
        raise CorruptRecordError("body CRC mismatch", 864)

    def gone():
        raise NoSuchTopicError("no queue T/9")

    caplog.set_level(logging.DEBUG)
    for fn, want in ((damaged, errno.EIO), (gone, errno.ENOENT)):
        with pytest.raises(pyfuse3.FUSEError) as info:
            trio.run(ops.Dispatcher().thread, fn)
        assert info.value.errno == want
        with pytest.raises(pyfuse3.FUSEError) as info:
            ops.Dispatcher().fast(fn)
        assert info.value.errno == want
    assert not [r for r in caplog.records if r.exc_info]


def test_the_lines_before_a_damaged_record_stay_readable(tmp_path):
    """docs/guarantees.md: a read that reaches a damaged record fails (EIO), the lines before it
    stay readable. The views' stat answered EIO for the whole queue (issue 26); now the queue
    and topic views end at the damage: their stat works, a reader gets every line before the
    damaged record, then EIO, and the damage is noted."""
    root = tmp_path / "store"
    with MessageStore(str(root), small_config()) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"m%d" % i, queue_id=i % 2) for i in range(20)])
    off = flip_body_byte(root, "T", 0, 3, small_config())  # m6, queue 0 offset 3
    with tree(tmp_path, store_dir=root) as t:
        for path, before in (
            ("/topics/T/0/bodies.txt", b"m0\nm2\nm4\n"),
            ("/topics/T/bodies.txt", b"m0\nm1\nm2\nm3\nm4\nm5\n"),
        ):
            node = t.node(path)
            assert node.stat().size == len(before), path  # no EIO for the whole view
            h = node.open(0)
            try:
                assert h.read(0, 1 << 20) == before, path
                with pytest.raises(FsError) as exc:
                    h.read(len(before), 1 << 20)
                assert exc.value.errno == errno.EIO and "CRC" in str(exc.value), path
            finally:
                h.release()
            assert errno_of(t.read, path) == errno.EIO, path  # as cat sees it
        damaged = _damaged(t)
        assert [(d["topic"], d["queueId"]) for d in damaged] == [("T", 0)]
        assert f"offset {off}" in damaged[0]["error"]
        assert t.read("/topics/T/1/bodies.txt").count(b"\n") == 10


def _one_queue(root, batches: int = 20) -> None:
    """A store at ``root`` whose topic T (one queue) holds ``batches`` x 200 messages of 67
    bytes over many small CommitLog segments (fstree.small_config)."""
    with MessageStore(str(root), small_config()) as s:
        s.create_topic("T", 1)
        for b in range(batches):
            s.put_messages(
                [Message("T", b"m%05d " % (b * 200 + i) + b"x" * 60) for i in range(200)]
            )


def _age_oldest_half(root) -> None:
    """Make the oldest half of the CommitLog segments 100 days old (expired)."""
    import os
    import time

    old = time.time() - 100 * 86400
    segs = sorted((root / "commitlog").iterdir())
    for p in segs[: len(segs) // 2]:
        os.utime(p, (old, old))


def test_expiry_while_a_view_is_sized_is_not_damage(tmp_path, monkeypatch):
    """Expiry that deletes records a view planned, before the render workers read them (on a
    writer, or the writer a follower follows), is not damage: the queue was marked damaged,
    the view answered EIO until remount and verify/recover were suggested. The view plans
    again from what is left; no queue is marked."""
    from rmqfs.fusefs.views import View

    root = tmp_path / "store"
    _one_queue(root)
    _age_oldest_half(root)
    with tree(tmp_path) as t:
        real = View._size
        raced = []

        def expiry_between_plan_and_render(self, ix, chunks, cl_min):
            def planned():  # the first chunk planned, then expiry, then the workers read it
                it = iter(chunks)
                first = next(it, None)
                if first is None:
                    return
                if not raced:
                    raced.append(t.store.delete_expired_files())
                yield first
                yield from it

            return real(self, ix, planned(), cl_min)

        monkeypatch.setattr(View, "_size", expiry_between_plan_and_render)
        data = t.read("/topics/T/0/messages.jsonl")
        assert raced and raced[0].commitlog
        assert t.store.damaged == {}
        lo, hi = t.store.min_offset("T", 0), t.store.max_offset("T", 0)
        lines = data.splitlines()
        assert lo > 0 and len(lines) == hi - lo
        assert json.loads(lines[0])["queueOffset"] == lo


def test_pending_starts_at_min_offset_once_expiry_passed_the_commit(tmp_path):
    """A group whose committed offset expiry passed has its pending messages from minOffset
    (``getMessage``'s OFFSET_TOO_SMALL, next = minOffset); while a reader held the queue's
    view open across the expiry, pending.jsonl answered EIO (its start was looked for in
    chunks that cannot be rendered again)."""
    import os

    root = tmp_path / "store"
    _one_queue(root)
    with MessageStore(str(root), small_config()) as s:
        s.create_group("G")
        s.commit_offset("G", "T", 0, 10)
    with tree(tmp_path) as t:
        h = t.node("/topics/T/0/messages.jsonl").open(os.O_RDONLY)  # holds the view
        try:
            assert h.read(0, 100)
            _age_oldest_half(root)
            assert t.store.delete_expired_files().commitlog
            lo, hi = t.store.min_offset("T", 0), t.store.max_offset("T", 0)
            assert lo > 10
            lines = t.read("/groups/G/T/0/pending.jsonl").splitlines()
            first = json.loads(lines[0])["queueOffset"]
            assert lo <= first < hi and len(lines) == hi - first
        finally:
            h.release()
        # nobody holds the view: it starts again from the oldest left, pending at minOffset
        lines = t.read("/groups/G/T/0/pending.jsonl").splitlines()
        assert json.loads(lines[0])["queueOffset"] == lo and len(lines) == hi - lo


def test_a_missing_oldest_file_is_damage_not_expiry(tmp_path):
    """Expiry is told from damage by the record a failure names: one below where the
    CommitLog starts now. A CommitLog file removed by hand (not by expiry) leaves the store's
    start where it was: the view's EIO and the damaged queue are reported, as before."""
    import os

    root = tmp_path / "store"
    _one_queue(root, 6)
    with tree(tmp_path) as t:
        os.unlink(sorted((root / "commitlog").iterdir())[0])
        with pytest.raises(FsError) as info:
            t.read("/topics/T/0/messages.jsonl")
        assert info.value.errno == errno.EIO
        assert ("T", 0) in t.store.damaged


def test_pending_answers_eio_when_a_render_fails_without_expiry(tmp_path, monkeypatch):
    """pending.jsonl looks for its start in a chunk as rendered only where that chunk holds
    expired messages; a render that fails for another reason (workers gone) is EIO, never a
    pending file that silently lost its lines."""
    from rmqfs.fusefs.views import View

    root = tmp_path / "store"
    with MessageStore(str(root), small_config()) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"m%05d" % i) for i in range(100)])
        s.create_group("G")
        s.commit_offset("G", "T", 0, 10)
    with tree(tmp_path) as t:
        t.read("/topics/T/0/messages.jsonl")

        def failing(self, *args, **kw):
            raise OSError(errno.EIO, "chunk 0 could not be rendered")

        monkeypatch.setattr(View, "read", failing)
        with pytest.raises(OSError) as info:
            t.node("/groups/G/T/0/pending.jsonl").stat()
        assert info.value.errno == errno.EIO
