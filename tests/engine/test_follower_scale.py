"""A follower of a store of many queues, from a scale review: every refresh (ten a second)
read the tail of every queue, listed every queue's files and corrected every queue's
minOffset once a second, and scanned the writer's descriptors to name it: at 8,000 queues a
refresh cost 88 ms of CPU while the writer wrote nothing, 90 ms after one put. A refresh now
asks the queues of the records written since (none when none was), and every queue only on a
full pass (every FULL_PASS_EVERY refreshes past ASK_ALL_UP_TO queues), which still takes a
late unit (a 4.x MultiDispatch one) and the writer's deletions."""

from __future__ import annotations

import os
import struct

import pytest

from rmqfs.engine.format.consumequeue import ConsumeQueue
from rmqfs.engine.live import follower as follower_mod
from rmqfs.engine.service import lock as lock_mod
from rmqfs.engine.store import Message, MessageStore

TOPICS = follower_mod.ASK_ALL_UP_TO + 16


@pytest.fixture
def pair(tmp_path, monkeypatch):
    """A writer of TOPICS one-queue topics of a message each, and its follower."""
    root = str(tmp_path / "s")
    w = MessageStore(root)
    for t in range(TOPICS):
        w.create_topic(f"T{t}", 1)
    w.put_messages([Message(f"T{t}", b"m") for t in range(TOPICS)])
    f = MessageStore(root, read_only=True, follow=True)
    asked = []
    real = ConsumeQueue.written_units

    def counting(self, *args, **kwargs):
        asked.append(self.topic)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ConsumeQueue, "written_units", counting)
    f.follower.refreshes = 1  # (not a full pass next)
    try:
        yield w, f, asked
    finally:
        f.close()
        w.close()


def test_an_idle_refresh_asks_no_queue_and_a_put_asks_its_own(pair):
    w, f, asked = pair
    for _ in range(5):
        f.follower.refresh()
    assert asked == []
    w.put_messages([Message("T3", b"new"), Message("T7", b"new")])
    f.follower.refresh()
    assert sorted(asked) == ["T3", "T7"]
    assert f.commitlog.max_offset == w.commitlog.max_offset
    assert f.get_message("T7", 0, 1).body == b"new"


def test_a_full_pass_asks_every_queue_and_takes_a_late_unit(pair):
    """A unit of another queue at a record visible already (a 4.x broker's MultiDispatch):
    the targeted refreshes do not see it, the full pass does."""
    from rmqfs.engine.service import validation

    w, f, asked = pair
    props = {"INNER_MULTI_DISPATCH": "T2", "INNER_MULTI_QUEUE_OFFSET": "1"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        (r,) = w.put_messages([Message("T1", b"multi", tags="x", properties=props)])
    f.follower.refresh()
    assert asked == ["T1"]
    rec = w.read_record(r.commitlog_offset, r.size)
    unit = struct.pack(">qiq", rec.commitlog_offset, rec.store_size, rec.tags_code)
    fd = os.open(os.path.join(w.root, "consumequeue", "T2", "0", "0" * 20), os.O_RDWR)
    try:
        os.pwrite(fd, unit, 20)  # T2's unit 1, at T1's record
    finally:
        os.close(fd)
    while f.follower.refreshes % follower_mod.FULL_PASS_EVERY != follower_mod.FULL_PASS_EVERY - 1:
        f.follower.refresh()
    assert f.max_offset("T2", 0) == 1
    asked.clear()
    f.follower.refresh()  # the full pass
    assert len(set(asked)) == TOPICS
    assert f.max_offset("T2", 0) == 2


def test_min_offsets_are_corrected_only_where_they_can_move(pair, monkeypatch):
    _w, f, _asked = pair
    corrected = []
    real = ConsumeQueue.correct_min_offset

    def counting(self, *args):
        corrected.append(self.topic)
        return real(self, *args)

    monkeypatch.setattr(ConsumeQueue, "correct_min_offset", counting)
    f.follower.refreshes = follower_mod.FULL_PASS_EVERY - 1
    f.follower.refresh()  # a full pass: the CommitLog's minOffset has not moved
    assert corrected == []


def test_the_writer_is_named_without_listing_its_descriptors_again(tmp_path, monkeypatch):
    """lock_holder found an OFD lock's holder by scanning its descriptors (a broker's are one
    a queue file) every second: it asks the descriptor it found it on first."""
    with MessageStore(str(tmp_path / "s")) as w:
        assert lock_mod.lock_holder(w.root) == os.getpid()
        listed = []
        real = os.listdir

        def counting(path):
            listed.append(str(path))
            return real(path)

        monkeypatch.setattr(os, "listdir", counting)
        for _ in range(3):
            assert lock_mod.lock_holder(w.root) == os.getpid()
        assert not [p for p in listed if p.startswith("/proc/")]


def test_an_lmq_stores_late_unit_shows_at_the_next_step(tmp_path):
    """Found by a review: a broker writes a record's LMQ units just after its own, so the
    follower may take the record between the two; with the writer idle after, the LMQ unit
    waited for the full pass (10 s past 64 queues). An LMQ store's queues are asked every step."""
    from rmqfs.engine.format.consumequeue import UNIT
    from rmqfs.engine.service import validation

    root = str(tmp_path / "s")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "RESERVED_PROPERTY_NAMES", frozenset())
        w = MessageStore(root)
        w.create_topic("T", 1)
        for t in range(TOPICS):
            w.create_topic(f"X{t}", 1)
        w.put_messages([Message(f"X{t}", b"m") for t in range(TOPICS)])
        qdir = os.path.join(root, "consumequeue", "%LMQ%a", "0")

        def put_lmq(qoff):
            props = {"INNER_MULTI_DISPATCH": "%LMQ%a", "INNER_MULTI_QUEUE_OFFSET": str(qoff)}
            (r,) = w.put_messages([Message("T", b"b%d" % qoff, queue_id=0, properties=props)])
            rec = w.read_record(r.commitlog_offset, r.size)
            os.makedirs(qdir, exist_ok=True)
            path = os.path.join(qdir, "0" * 20)
            if not os.path.exists(path):
                with open(path, "wb") as fh:
                    fh.write(bytes(w.cq_file_size))
            return path, UNIT.pack(rec.commitlog_offset, rec.store_size, rec.tags_code)

        def write_unit(path, unit, qoff):
            fd = os.open(path, os.O_RDWR)
            try:
                os.pwrite(fd, unit, qoff * 20)
            finally:
                os.close(fd)

        write_unit(*put_lmq(0), 0)
        f = MessageStore(root, read_only=True, follow=True)
        try:
            f.follower.refreshes = 1
            assert f.max_offset("%LMQ%a", 0) == 1
            path, unit = put_lmq(1)
            f.follower.refresh()  # the record taken by its own unit
            assert f.commitlog.max_offset == w.commitlog.max_offset
            write_unit(path, unit, 1)  # the broker's LMQ unit, just after
            f.follower.refresh()
            assert f.max_offset("%LMQ%a", 0) == 2
        finally:
            f.close()
            w.close()


@pytest.mark.parametrize("tail", ["header only", "half", "a bad topic"])
def test_a_torn_tail_asks_the_queues_of_the_records_before_it(pair, tail):
    """Found by a review: a record cut short after the writer's end (one being written, or
    left by a crash) made every step ask every queue, for as long as it stayed. The records
    before it name the queues to ask; it names none until it is whole."""
    w, f, asked = pair
    (r,) = w.put_messages([Message("T5", b"x" * 50)])
    f.follower.refresh()
    end = w.commitlog.max_offset
    rec = bytearray(w.commitlog.files.read(r.commitlog_offset, r.size))
    torn = bytearray(len(rec))
    if tail == "header only":
        torn[:8] = rec[:8]
    elif tail == "half":
        torn[: len(rec) // 2] = rec[: len(rec) // 2]
    else:
        torn[:] = rec
        i = torn.find(b"T5")
        torn[i : i + 2] = b"\xff\xfe"
    (r2,) = w.put_messages([Message("T9", b"whole")])  # a whole record first
    fd = os.open(os.path.join(w.root, "commitlog", "0" * 20), os.O_RDWR)
    try:
        os.pwrite(fd, bytes(torn), w.commitlog.max_offset)
    finally:
        os.close(fd)
    for _ in range(3):
        asked.clear()
        f.follower.refresh()
        assert asked in (["T9"], [])
    assert f.commitlog.max_offset == r2.commitlog_offset + r2.size > end
