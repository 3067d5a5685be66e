"""A single put's index entries, and a small batch's, wait in memory (issue 34): ``IndexService.put_hashed`` keeps the
entries of puts of ``FEW_ENTRIES`` or fewer keys until ``PENDING_ENTRIES`` have gathered, and
writes them in one call, as RocketMQ's ReputMessageService builds the index behind the
CommitLog. What must hold:

* whatever asks the index (a query, ``end_phy_offset``, a flush, a snapshot, close) sees every
  put that returned; the files hold them once ``PENDING_ENTRIES`` gathered or after a flush;
* a CommitLog cut drops the pending entries at or past it, and the files then equal what puts
  of the surviving messages alone write;
* a failed write (a full disk) keeps what was not written pending: the put that failed is
  undone, the ones before it stay indexed once the disk has room;
* a crash loses nothing a query can find after recovery.
"""

from __future__ import annotations

import errno
import mmap
import os
import subprocess
import sys

import pytest

import refreader as rr
from conftest import SRC_PATH
from rmqfs.engine.format import indexfile
from rmqfs.engine.service.indexservice import FEW_ENTRIES, PENDING_ENTRIES
from rmqfs.engine.store import Message, MessageStore, StoreConfig

# the flush thread's rounds an hour apart: what a test says waits is not written behind its back
CFG = dict(max_hash_slot_num=64, max_index_num=4096, flush_interval_commit_log=3_600_000)


@pytest.fixture
def no_time_limit(monkeypatch):
    """Puts however far apart in time leave the entries waiting (a loaded machine may take
    longer than ``PENDING_MS`` between two puts)."""
    from rmqfs.engine.service import indexservice

    monkeypatch.setattr(indexservice, "PENDING_MS", 1 << 60)


def _open(root, **kw) -> MessageStore:
    """A store whose index has a file: its first record (at CommitLog offset 0, where the
    index's end is with no file yet) is indexed at once, by ``IndexService.dispatch``."""
    store = MessageStore(str(root), StoreConfig(**{**CFG, **kw}))
    store.create_topic("T", 2)
    store.put_messages([Message("T", b"first", keys="first")])
    assert _on_disk(root, "first") == [0]
    return store


def _on_disk(root, key: str) -> list[int]:
    """CommitLog offsets the IndexFiles on disk hold for ``T#key`` (the reference reader)."""
    index = os.path.join(str(root), "index")
    return rr.index_lookup_dir(index, "T#" + key, 64) if os.path.isdir(index) else []


def _indexed(store: MessageStore, key: str) -> list[int]:
    return [r.commitlog_offset for r in store.query_by_key("T", key)]


def test_single_puts_wait_and_every_reader_sees_them(tmp_path, no_time_limit):
    root = tmp_path / "s"
    with _open(root) as s:
        results = [s.put_messages([Message("T", b"m%d" % i, keys=f"k{i}")])[0] for i in range(5)]
        offsets = [r.commitlog_offset for r in results]
        # written nowhere yet, but counted: the next put's entries follow them
        assert _on_disk(root, "k0") == []
        assert s.index_service.end_phy_offset == offsets[-1]
        # a query finds them where they wait, and writes nothing
        assert _indexed(s, "k3") == [offsets[3]]
        assert (
            s.look_messages_by_uniq_key(results[4].uniq_key, "T")[0].commitlog_offset
            == (offsets[4])
        )
        assert s.index_service.query("T", "k1", begin=0, end=results[1].store_timestamp - 1) == []
        assert _on_disk(root, "k0") == []
        # a flush writes them
        s.flush()
        assert _on_disk(root, "k0") == [offsets[0]]
        assert _on_disk(root, results[4].uniq_key) == [offsets[4]]
        assert _indexed(s, "k3") == [offsets[3]]  # once, from the file now
        more = s.put_messages([Message("T", b"late", keys="late")])[0]
        assert _on_disk(root, "late") == []
        s.flush()
        assert _on_disk(root, "late") == [more.commitlog_offset]
        last = s.put_messages([Message("T", b"last", keys="last")])[0]
    # close writes the rest
    assert _on_disk(root, "last") == [last.commitlog_offset]


def test_the_files_take_the_entries_once_enough_gathered(tmp_path, no_time_limit):
    root = tmp_path / "s"
    with _open(root) as s:
        puts = PENDING_ENTRIES // 2  # a UNIQ_KEY and one key each
        res = [s.put_messages([Message("T", b"x", keys=f"k{i}")])[0] for i in range(puts)]
        assert _on_disk(root, "k0") == [res[0].commitlog_offset]
        assert _on_disk(root, f"k{puts - 1}") == [res[-1].commitlog_offset]
        # a batch with more keys than FEW_ENTRIES writes at once, after what waited
        tail = s.put_messages([Message("T", b"y", keys=f"b{i}") for i in range(FEW_ENTRIES)])
        assert _on_disk(root, "b0") == [tail[0].commitlog_offset]
        # a small batch waits, as single puts do, and is found where it waits
        n = FEW_ENTRIES // 2  # a UNIQ_KEY and a key each: FEW_ENTRIES entries
        small = s.put_messages([Message("T", b"z", keys=f"s{i}") for i in range(n)])
        assert _on_disk(root, "s0") == [] and _on_disk(root, f"s{n - 1}") == []
        assert _indexed(s, f"s{n - 1}") == [small[-1].commitlog_offset]
        assert s.index_service.end_phy_offset == small[-1].commitlog_offset
        s.flush()
        assert _on_disk(root, f"s{n - 1}") == [small[-1].commitlog_offset]


def test_a_cut_drops_the_pending_entries_past_it(tmp_path, no_time_limit):
    root = tmp_path / "s"
    with _open(root) as s:
        res = [s.put_messages([Message("T", b"m%d" % i, keys=f"k{i}")])[0] for i in range(6)]
        index = s.index_service
        index.truncate(res[3].commitlog_offset)  # only pending entries lie past it
        assert index.end_phy_offset == res[2].commitlog_offset
        assert _on_disk(root, "k0") == []
        assert _indexed(s, "k2") == [res[2].commitlog_offset]
        assert index.query("T", "k4") == []
        s.flush()  # written now: puts 0-2
        index.truncate(res[1].commitlog_offset)  # now the file's entries
        assert index.query("T", "k2") == [] and index.query("T", "k1") == []
        assert index.query("T", "k0") == [res[0].commitlog_offset]
        more = s.put_messages([Message("T", b"again", keys="k1")])[0]
    # the file holds the first record's two entries (UNIQ_KEY, its key), put 0's, the last's
    (name,) = os.listdir(root / "index")
    items = rr.read_index_items(str(root / "index" / name), 64)
    assert [phy for _, phy, _, _ in items] == [0] * 2 + [res[0].commitlog_offset] * 2 + [
        more.commitlog_offset
    ] * 2


def test_a_failed_write_keeps_what_earlier_puts_acknowledged(tmp_path, monkeypatch, no_time_limit):
    # a chunk of the file a page (not 64 KiB, which holds this small file's items whole): the
    # write of the pending entries needs one more, which the full disk refuses
    monkeypatch.setattr(indexfile._MapIO, "CHUNK", mmap.PAGESIZE)
    root = tmp_path / "s"
    with _open(root) as s:
        before = [s.put_messages([Message("T", b"a%d" % i, keys=f"a{i}")])[0] for i in range(3)]
        real = os.posix_fallocate

        def full(fd, offset, length):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "posix_fallocate", full)
        # the put whose entries fill the pending buffer writes them all: the disk refuses
        ends = []
        with pytest.raises(OSError) as exc:
            for i in range(PENDING_ENTRIES):
                ends.append(s.commitlog.max_offset)
                s.put_messages([Message("T", b"b%d" % i, keys=f"b{i}")])
        assert exc.value.errno == errno.ENOSPC
        refused = len(ends) - 1
        assert 0 < refused < PENDING_ENTRIES // 2
        assert s.commitlog.max_offset == ends[-1]  # that put is undone whole
        assert s.index_service.end_phy_offset < ends[-1]
        # the flush thread's round goes on without them (and claims no more than the files'
        # time in the checkpoint); they stay pending
        waiting = s.index_service.pending_count
        assert waiting >= len(before) + refused
        _, ts = s.index_service.flush()
        assert ts == s.index_service.files[-1].end_timestamp  # the file's, not the pending
        s.flush()
        assert s.index_service.pending_count == waiting
        monkeypatch.setattr(os, "posix_fallocate", real)
        for i, r in enumerate(before):
            assert _indexed(s, f"a{i}") == [r.commitlog_offset]
        for i in range(refused):
            assert len(_indexed(s, f"b{i}")) == 1
        assert s.index_service.query("T", f"b{refused}") == []
        again = s.put_messages([Message("T", b"again", keys=f"b{refused}")])[0]
        assert _indexed(s, f"b{refused}") == [again.commitlog_offset]


CRASH = r"""
import os, sys
sys.path.insert(0, {src!r})
from rmqfs.engine.store import Message, MessageStore, StoreConfig
import rmqfs.engine.service.indexservice as indexservice
indexservice.PENDING_MS = 1 << 60  # nothing written for the time: only the count
s = MessageStore({root!r}, StoreConfig(max_hash_slot_num=64, max_index_num=4096,
                                       flush_interval_commit_log=3_600_000))
s.create_topic("T", 2)
for i in range({n}):
    s.put_messages([Message("T", b"m%d" % i, keys="k%d" % i)])
os._exit(0)  # no close: the pending entries die with the process
"""


def test_a_crash_loses_no_key_a_query_finds_after_recovery(tmp_path):
    root = tmp_path / "s"
    n = PENDING_ENTRIES // 2 + 7  # the files hold the first ones, the last wait
    subprocess.run(
        [sys.executable, "-c", CRASH.format(src=str(SRC_PATH), root=str(root), n=n)],
        check=True,
        timeout=120,
    )
    assert _on_disk(root, f"k{n - 1}") == []  # they never reached the file
    with MessageStore(str(root), StoreConfig(**CFG)) as s:
        for i in range(n):
            assert len(_indexed(s, f"k{i}")) == 1, i


def test_the_flush_thread_and_a_later_put_write_what_waits(tmp_path):
    """A writer that goes quiet leaves nothing waiting past the flush thread's next round;
    one that keeps putting writes what waited once the oldest is ``PENDING_MS`` old."""
    import time

    from rmqfs.engine.service.indexservice import PENDING_MS

    root = tmp_path / "s"
    with _open(root, flush_interval_commit_log=20) as s:
        quiet = s.put_messages([Message("T", b"quiet", keys="quiet")])[0]
        deadline = time.monotonic() + 10
        while _on_disk(root, "quiet") == [] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _on_disk(root, "quiet") == [quiet.commitlog_offset]
    with _open(tmp_path / "t", flush_interval_commit_log=3_600_000) as s:
        root = tmp_path / "t"
        old = s.put_messages([Message("T", b"old", keys="old")])[0]
        time.sleep(PENDING_MS / 1000 + 0.05)
        assert _on_disk(root, "old") == []
        s.put_messages([Message("T", b"new", keys="new")])
        assert _on_disk(root, "old") == [old.commitlog_offset]


def test_a_query_while_they_are_written_still_finds_them(tmp_path, monkeypatch):
    """The entries stay where a query reads them until they are in the file (a query in
    another thread during the flush thread's write sees every put that returned)."""
    from rmqfs.engine.service.indexservice import IndexService

    root = tmp_path / "s"
    seen = []
    real = IndexService._put_entries

    def slow(self, entries, i=0, done=None):
        seen.append((self.query("T", "mid"), self.end_phy_offset))
        return real(self, entries, i, done)

    with _open(root) as s:
        r = s.put_messages([Message("T", b"mid", keys="mid")])[0]
        monkeypatch.setattr(IndexService, "_put_entries", slow)
        s.flush()
        assert seen == [([r.commitlog_offset], r.commitlog_offset)]
        monkeypatch.setattr(IndexService, "_put_entries", real)
        assert _indexed(s, "mid") == [r.commitlog_offset]  # from the file, once


def test_a_full_disk_at_close_keeps_abort_and_the_next_open_indexes_them(
    tmp_path, monkeypatch, no_time_limit
):
    from rmqfs.engine.service.indexservice import IndexService

    root = tmp_path / "s"
    s = _open(root)
    r = s.put_messages([Message("T", b"last", keys="last")])[0]

    def full(self, entries, i=0, done=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(IndexService, "_put_entries", full)
    s.close()  # logged, not raised: every file closed, the lock released, abort kept
    monkeypatch.undo()
    assert (root / "abort").exists()
    assert _on_disk(root, "last") == []
    with MessageStore(str(root), StoreConfig(**CFG)) as again:  # in this process: unlocked
        assert _indexed(again, "last") == [r.commitlog_offset]


def test_a_put_appends_while_the_flush_thread_writes_from_a_copy(
    tmp_path, no_time_limit, monkeypatch
):
    """A single put adds its entries without the index's lock while the flush thread writes
    those waiting through the compiled writer (which releases the GIL with the entries
    exported): the write reads a copy, so the put's append is never refused (an array
    exporting its buffer cannot grow), and neither its entries nor those written are lost or
    written twice."""
    import threading

    from rmqfs.engine.read import kernel

    root = tmp_path / "s"
    with _open(root) as s:
        index = s.index_service
        real = kernel.IndexWriter.__call__
        puts: list = []

        def writing(self, mapping, chunks, chunk_size, items_base, nslots, entries, *rest):
            if not puts and not isinstance(entries, list):  # (a dispatch's list: copied)
                with memoryview(entries):  # exported, as ffi.from_buffer exports it
                    t = threading.Thread(  # a put meanwhile, in another thread
                        target=lambda: puts.append(s.put_messages([Message("T", b"b", keys="b")]))
                    )
                    t.start()
                    t.join()
            return real(self, mapping, chunks, chunk_size, items_base, nslots, entries, *rest)

        a = s.put_messages([Message("T", b"a", keys="a")])[0]
        monkeypatch.setattr(kernel.IndexWriter, "__call__", writing)
        assert index.write_pending()  # the flush thread's round
        monkeypatch.undo()
        assert len(puts) == 1  # (the put raised nothing: it returned)
        b = puts[0][0]
        assert index.end_phy_offset == b.commitlog_offset and index.pending_count == 2
        index.write_pending()
        assert _on_disk(root, "a") == [a.commitlog_offset]
        assert _on_disk(root, "b") == [b.commitlog_offset]
        assert _indexed(s, "b") == [b.commitlog_offset]


def test_a_put_whose_entries_are_written_at_once_by_the_flush_thread(tmp_path, no_time_limit):
    """The flush thread may write (and take out) a put's entries right after its append
    (``IndexService.put_hashed``'s), before the put reads the buffer again: the put neither
    fails nor loses them (it read what it needs before the append), and the store goes on
    putting to that queue."""
    import threading

    root = tmp_path / "s"
    with _open(root) as s:
        index = s.index_service

        class Racing(bytearray):  # the flush thread's round lands right after the append
            def __iadd__(self, values):
                super().__iadd__(values)
                t = threading.Thread(target=index.write_pending)
                t.start()
                t.join()
                return self

        plain, state = index._pending, index._lane_state
        racing = Racing(plain)
        # (the one buffer the service keeps, a subclass of it: the compiled single put, which
        # takes an exact bytearray only, hands put_hashed its entries)
        index._pending, index._lane_state = racing, (racing, *state[1:])
        try:
            got = [s.put_messages([Message("T", b"m%d" % i, keys=f"k{i}")])[0] for i in range(3)]
        finally:
            plain[:] = racing
            index._pending, index._lane_state = plain, state
        assert index.pending_count == 0
        for i, r in enumerate(got):
            assert _on_disk(root, f"k{i}") == [r.commitlog_offset]
            assert _indexed(s, f"k{i}") == [r.commitlog_offset]
        more = s.put_messages([Message("T", b"more", keys="more")])[0]
        assert _indexed(s, "more") == [more.commitlog_offset]


def test_the_flush_thread_writes_right_after_the_lane_added_a_puts_entries(
    tmp_path, monkeypatch, no_time_limit
):
    """The compiled single put adds a put's entries to those waiting itself
    (``IndexService.lane_state``); the flush thread's round may write them right after, while
    the put still dispatches its unit: nothing is lost or written twice, and the puts after
    it go on adding theirs."""
    import threading

    from rmqfs.engine.format.commitlog import CommitLog

    root = tmp_path / "s"
    with _open(root) as s:
        index = s.index_service
        a = s.put_messages([Message("T", b"a", keys="a")])[0]  # (from Python: none waited)
        assert index.pending_count == 2
        real = CommitLog.appended_in_place
        seen = []

        def counted(self, end, now):  # (right after the lane returned)
            seen.append(index.pending_count)
            real(self, end, now)
            t = threading.Thread(target=index.write_pending)
            t.start()
            t.join()

        monkeypatch.setattr(CommitLog, "appended_in_place", counted)
        b = s.put_messages([Message("T", b"b", keys="b")])[0]
        monkeypatch.undo()
        assert seen == [4]  # the lane added b's two entries to a's
        assert index.pending_count == 0
        c = s.put_messages([Message("T", b"c", keys="c")])[0]
        d = s.put_messages([Message("T", b"d", keys="d")])[0]
        assert index.pending_count == 4
        s.flush()
        for key, r in (("a", a), ("b", b), ("c", c), ("d", d)):
            assert _on_disk(root, key) == [r.commitlog_offset]
            assert _on_disk(root, r.uniq_key) == [r.commitlog_offset]
            assert _indexed(s, key) == [r.commitlog_offset]


def test_a_put_that_fails_after_the_lane_added_its_entries_leaves_none(
    tmp_path, monkeypatch, no_time_limit
):
    """The compiled single put adds a put's entries before its record is counted: where the
    CommitLog's append then fails (the disk, the record written into the put path's buffer
    and not the mapping) or anything is raised before it counts a record written into the
    mapping (a signal), its entries go again, with its record: no query finds a put that
    failed, and the next put indexes its own."""
    from rmqfs.engine.format.commitlog import CommitLog
    from rmqfs.engine.format.mappedfile import FileQueue

    root = tmp_path / "s"
    with _open(root) as s:
        index = s.index_service
        a = s.put_messages([Message("T", b"a", keys="a")])[0]
        b = s.put_messages([Message("T", b"b", keys="b")])[0]  # (added by the lane)
        assert index.pending_count == 4
        # the append of a record from the buffer fails
        monkeypatch.setattr(FileQueue, "write_window", lambda self, offset, n: None)

        def full(self, chunks, end, now):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(CommitLog, "append_chunks", full)
        end = s.commitlog.max_offset
        with pytest.raises(OSError):
            s.put_messages([Message("T", b"c", keys="c")])
        assert index.pending_count == 4 and index.end_phy_offset == b.commitlog_offset
        assert index.query("T", "c") == [] and s.commitlog.max_offset == end
        monkeypatch.undo()
        # a signal between the record's write into the mapping and the CommitLog counting it

        def interrupted(self, end, now):
            raise KeyboardInterrupt

        monkeypatch.setattr(CommitLog, "appended_in_place", interrupted)
        with pytest.raises(KeyboardInterrupt):
            s.put_messages([Message("T", b"d", keys="d")])
        monkeypatch.undo()
        assert index.pending_count == 4 and index.query("T", "d") == []
        assert s.commitlog.read(end, 8) == bytes(8)  # (the record zeroed in the mapping)
        e = s.put_messages([Message("T", b"e", keys="c")])[0]
        assert e.commitlog_offset == end
        assert _indexed(s, "c") == [end] and _indexed(s, "b") == [b.commitlog_offset]
        s.flush()
        assert _on_disk(root, "c") == [end] and _on_disk(root, "d") == []
        assert _on_disk(root, "a") == [a.commitlog_offset]


def test_a_signal_as_the_lanes_call_returns_leaves_nothing_of_the_put(tmp_path, no_time_limit):
    """Found by a review: CPython handles a signal that came during a call into C as the call
    returns, before its answer is kept (a KeyboardInterrupt raised there): the put had no
    answer to undo by, and left its index entries waiting (a query found the put that
    failed, and after a flush the IndexFile held them for the next record at that offset)
    and its record in the mapping. Both go, whatever the put holds of the answer."""
    root = tmp_path / "s"
    with _open(root) as s:
        index = s.index_service
        s.put_messages([Message("T", b"a", keys="a")])
        b = s.put_messages([Message("T", b"b", keys="b")])[0]
        assert index.pending_count == 4
        call = s.putter.call
        real = call.lane

        class SignalAsItReturns:
            def put(self, *args):
                real.put(*args)
                raise KeyboardInterrupt

        call.lane = SignalAsItReturns()
        end = s.commitlog.max_offset
        try:
            with pytest.raises(KeyboardInterrupt):
                s.put_messages([Message("T", b"c", keys="c")])
        finally:
            call.lane = real
        assert s.commitlog.max_offset == end and s.commitlog.read(end, 8) == bytes(8)
        assert index.pending_count == 4 and index.end_phy_offset == b.commitlog_offset
        assert index.query("T", "c") == []
        e = s.put_messages([Message("T", b"e", keys="e")])[0]
        assert e.commitlog_offset == end
        s.flush()
        assert index.query("T", "c") == [] and _on_disk(root, "c") == []
        assert _on_disk(root, "e") == [end]


def test_the_lane_adds_entries_only_after_those_waiting(tmp_path, no_time_limit):
    """The entries waiting stay in CommitLog order: where the last one waiting is at or past
    a put's record (an index ahead of the CommitLog), the compiled single put adds none of
    its own, and the put takes the dispatch that judges them (``_dispatch_one``'s rule,
    ``IndexService.dispatch``), as without it."""
    root = tmp_path / "s"
    with _open(root) as s:
        index = s.index_service
        s.put_messages([Message("T", b"a", keys="a")])
        ahead = s.commitlog.max_offset + (1 << 20)
        index.put_hashed([123, ahead, 1])  # (an entry of a record past the CommitLog's end)
        r = s.put_messages([Message("T", b"b", keys="b")])[0]
        assert r.commitlog_offset < ahead
        assert index.end_phy_offset == ahead  # (the dispatch took it as indexed already)
        s.flush()
    (name,) = os.listdir(root / "index")
    phys = [phy for _, phy, _, _ in rr.read_index_items(str(root / "index" / name), 64)]
    assert phys == sorted(phys) and phys[-1] == ahead  # none added after it
