"""fusefs/views.py's PartCache without a mount: each part's life is a small state machine
(``PartState``, ``PART_TRANSITIONS``), driven here through every transition, including the
races that were fixed one by one before it existed (a reader woken before the render was
registered, a render over before its callback was added, a part evicted or failed while a
reader waited for it, a part evicted while open)."""

import errno
import os
import threading
import time
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pytest

from rmqfs.engine.errors import CorruptRecordError
from rmqfs.engine.store import Message, MessageStore
from rmqfs.fusefs.views import PART_TRANSITIONS, Part, PartCache, PartState, PartStateError
from stores import small_segments

KEY = ("T", 0, 0, 5)
RESULT = (123, 0, 5)  # (size, mtime ms, rows) as render_part returns


class ManualPool:
    """An executor whose renders the test ends (``finish``, ``fail``), writing the part file
    first as ``render_part`` does; callbacks then run in the test's thread."""

    def __init__(self):
        self.futures: list[tuple[Future, tuple]] = []
        self.submitted = threading.Event()

    def submit(self, fn, *args):
        fut = Future()
        self.futures.append((fut, args))
        self.submitted.set()
        return fut

    def wait_submitted(self, n: int) -> None:
        deadline = time.monotonic() + 30
        while len(self.futures) < n:
            assert time.monotonic() < deadline, "no render was submitted"
            time.sleep(0.01)

    def finish(self, i: int = -1, data: bytes = b"x" * 123) -> None:
        fut, args = self.futures[i]
        with open(args[-1], "wb") as f:  # render_part's last argument: the part's path
            f.write(data)
        fut.set_result((len(data), 0, 5))

    def fail(self, exc: BaseException, i: int = -1) -> None:
        self.futures[i][0].set_exception(exc)

    def shutdown(self, wait=True, cancel_futures=False):
        if cancel_futures:
            for fut, _ in self.futures:
                fut.cancel()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """``(PartCache, ManualPool)`` over a topic T of 6 messages in one queue."""
    with MessageStore(str(tmp_path / "s"), small_segments()) as store:
        store.create_topic("T", 1)
        store.put_messages([Message("T", b"m%d" % i) for i in range(6)])
        parts = PartCache(store, str(tmp_path / "cache"), 1 << 30)
        pool = ManualPool()
        monkeypatch.setattr(parts, "_pool_", lambda: pool)
        yield parts, pool


class Reader(threading.Thread):
    """``parts.open(key)`` in a thread of its own: its fd or its error."""

    def __init__(self, parts, key=KEY):
        super().__init__(daemon=True)
        self.parts, self.key = parts, key
        self.fd: int | None = None
        self.error: BaseException | None = None
        self.start()

    def run(self):
        try:
            self.fd = self.parts.open(self.key)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.error = exc

    def result(self) -> int:
        self.join(30)
        assert not self.is_alive(), "the reader still waits"
        if self.error is not None:
            raise self.error
        assert self.fd is not None
        return self.fd


def waiting(parts, key=KEY, n=1) -> None:
    """Until ``n`` readers wait for ``key`` (its Part counts them)."""
    deadline = time.monotonic() + 30
    while (p := parts.parts.get(key)) is None or p.readers < n:
        assert time.monotonic() < deadline, "the reader never waited"
        time.sleep(0.01)


def test_the_transition_table_is_enforced():
    every = list(PartState)
    assert set(PART_TRANSITIONS) == set(every)  # every state has its row
    for src in every:
        for dst in every:
            p = Part(KEY)
            p.state = src
            if dst in PART_TRANSITIONS[src]:
                p.to(dst)
                assert p.state is dst
            else:
                with pytest.raises(PartStateError):
                    p.to(dst)
                assert p.state is src


def test_a_part_is_born_rendering_then_ready(cache):
    parts, pool = cache
    r = Reader(parts)
    waiting(parts)
    assert parts.state(KEY) is PartState.RENDERING and parts.known(KEY) is None
    assert parts.open_cached(KEY) is None  # the loop never waits for a render
    pool.finish()
    fd = r.result()
    try:
        assert os.pread(fd, 200, 0) == b"x" * 123
    finally:
        os.close(fd)
    assert parts.state(KEY) is PartState.READY and parts.known(KEY) == RESULT
    assert parts.used_bytes == 4096 and parts.parts[KEY].readers == 0
    fd = parts.open_cached(KEY)  # READY: the loop opens it at once
    assert fd is not None
    os.close(fd)
    assert len(pool.futures) == 1  # rendered once


def test_two_readers_share_one_render(cache):
    parts, pool = cache
    a, b = Reader(parts), Reader(parts)
    waiting(parts, n=2)
    pool.finish()
    for r in (a, b):
        os.close(r.result())
    assert len(pool.futures) == 1


def test_a_render_done_before_its_callback_does_not_deadlock(tmp_path, monkeypatch):
    """A render over when submit() returns (faster than the caller, as a process pool's can
    be) runs its callbacks in the submitting thread: they must not take a lock it holds."""

    class DoneAtOnce:
        def submit(self, fn, *args):
            fut = Future()
            fut.set_result(RESULT)
            return fut

    with MessageStore(str(tmp_path / "s"), small_segments()) as store:
        store.create_topic("T", 1)
        store.put_messages([Message("T", b"m%d" % i) for i in range(5)])
        parts = PartCache(store, str(tmp_path / "cache"), 1 << 30)
        monkeypatch.setattr(parts, "_pool_", lambda: DoneAtOnce())
        t = threading.Thread(target=parts.prefetch, args=([KEY],), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "prefetch deadlocked on PartCache.lock"
        assert parts.known(KEY) == RESULT and parts.state(KEY) is PartState.READY


def test_open_waits_until_the_render_is_registered(cache, monkeypatch):
    """A reader must not see the render's end before the part is READY: open() failed with
    EIO ("not rendered", once in CI) when the bookkeeping callback ran late after the pool's
    Future had woken the reader."""
    parts, pool = cache
    finish = parts._finish

    def late_finish(*args):
        time.sleep(0.3)  # the thread that completes the render is slow to register it
        finish(*args)

    monkeypatch.setattr(parts, "_finish", late_finish)
    r = Reader(parts)
    waiting(parts)
    pool.finish()
    fd = r.result()
    try:
        assert os.fstat(fd).st_size == 123
    finally:
        os.close(fd)
    assert parts.known(KEY) == RESULT


def test_a_failed_render_reaches_its_readers_and_the_next_open_renders_again(cache):
    parts, pool = cache
    a, b = Reader(parts), Reader(parts)
    waiting(parts, n=2)
    pool.fail(OSError(errno.ENOSPC, "disk full"))
    for r in (a, b):
        with pytest.raises(OSError) as exc:
            r.result()
        assert exc.value.errno == errno.ENOSPC
    assert parts.state(KEY) is PartState.FAILED and parts.used_bytes == 0
    assert parts.budget.used() == 0  # the reservation went back
    r = Reader(parts)  # FAILED -> RENDERING
    pool.wait_submitted(2)
    pool.finish()
    os.close(r.result())
    assert parts.state(KEY) is PartState.READY


def test_a_render_failing_on_damage_answers_eio_and_notes_it(cache, monkeypatch):
    import rmqfs.fusefs.views as V

    parts, pool = cache
    noted = []
    monkeypatch.setattr(V, "note_damage", lambda *args: noted.append(args[1:3]))
    r = Reader(parts)
    waiting(parts)
    pool.fail(CorruptRecordError("bad record"))
    with pytest.raises(OSError) as exc:
        r.result()
    assert exc.value.errno == errno.EIO and noted == [("T", 0)]
    assert parts.state(KEY) is PartState.FAILED


def test_a_reader_of_a_render_whose_worker_died_gets_a_fresh_render(cache):
    parts, pool = cache
    r = Reader(parts)
    waiting(parts)
    pool.fail(BrokenProcessPool("a worker died"))
    pool.wait_submitted(2)  # the reader rendered it again (RENDERING -> FAILED -> RENDERING)
    pool.finish()
    os.close(r.result())
    assert parts.state(KEY) is PartState.READY


def test_a_reader_gives_up_after_open_renders_dead_workers(cache):
    parts, pool = cache
    r = Reader(parts)
    for i in range(parts.OPEN_RENDERS):
        pool.wait_submitted(i + 1)
        pool.fail(BrokenProcessPool("a worker died"))
    with pytest.raises(OSError) as exc:
        r.result()
    assert exc.value.errno == errno.EIO and len(pool.futures) == parts.OPEN_RENDERS


def test_eviction_of_an_open_part_keeps_its_fd_and_the_next_open_renders_again(cache):
    parts, pool = cache
    r = Reader(parts)
    waiting(parts)
    pool.finish(data=b"a" * 100)
    fd = r.result()
    try:
        assert parts.evict_one(False)  # READY -> EVICTED: open fds do not hold a part
        assert parts.state(KEY) is PartState.EVICTED and parts.used_bytes == 0
        assert parts.known(KEY) == (100, 0, 5)  # its size stays known: a stat renders nothing
        assert parts.open_cached(KEY) is None
        assert os.pread(fd, 200, 0) == b"a" * 100  # the unlinked file still reads
    finally:
        os.close(fd)
    assert not parts.evict_one(False)  # nothing READY is left
    r = Reader(parts)  # EVICTED -> RENDERING
    pool.wait_submitted(2)
    pool.finish(data=b"a" * 100)
    fd = r.result()
    assert os.pread(fd, 200, 0) == b"a" * 100
    os.close(fd)


def test_a_part_a_reader_waits_for_is_neither_evicted_nor_superseded(cache):
    parts, pool = cache
    longer = KEY[:3] + (6,)
    for key in (KEY, longer):
        fd = Reader(parts, key)
        pool.wait_submitted(1 if key == KEY else 2)
        pool.finish()
        os.close(fd.result())
    # the longer render superseded the shorter one (READY -> EVICTED): no reader held it
    assert parts.state(KEY) is PartState.EVICTED and parts.state(longer) is PartState.READY
    parts.parts[longer].readers += 1  # as a reader between its wake and its open
    try:
        assert not parts.evict_one(False)
        assert parts.state(longer) is PartState.READY
    finally:
        parts.parts[longer].readers -= 1
    assert parts.evict_one(False) and parts.state(longer) is PartState.EVICTED


def test_a_superseded_part_someone_waits_for_stays_until_opened(cache):
    parts, pool = cache
    longer = KEY[:3] + (6,)
    r = Reader(parts)
    waiting(parts)
    pool.finish()
    os.close(r.result())
    parts.parts[KEY].readers += 1  # a reader woken by its render and not yet opened ...
    r = Reader(parts, longer)
    pool.wait_submitted(2)
    pool.finish()  # ... when the longer render supersedes it
    os.close(r.result())
    assert parts.state(KEY) is PartState.READY  # not dropped under its reader
    parts.parts[KEY].readers -= 1
    assert parts.evict_one(False) and parts.state(KEY) is PartState.EVICTED  # LRU takes it


def test_a_topic_dropped_while_its_part_renders_fails_its_reader(cache):
    parts, pool = cache
    r = Reader(parts)
    waiting(parts)
    parts.drop_topic("T")
    pool.finish()  # the render ends after the drop: discarded
    with pytest.raises(OSError) as exc:
        r.result()
    assert exc.value.errno == errno.EIO
    assert parts.state(KEY) is None and parts.used_bytes == 0
    assert not os.listdir(parts.dir)  # its file is gone


def test_drop_topic_evicts_ready_parts_and_forgets_them(cache):
    parts, pool = cache
    r = Reader(parts)
    waiting(parts)
    pool.finish()
    os.close(r.result())
    p = parts.parts[KEY]
    parts.drop_topic("T")
    assert p.state is PartState.EVICTED and parts.state(KEY) is None
    assert parts.known(KEY) is None and parts.used_bytes == 0


def test_close_fails_the_readers_of_renders_under_way(cache):
    parts, pool = cache
    parts._pool = pool  # close() shuts the running pool down
    r = Reader(parts)
    waiting(parts)
    parts.close()  # its render is cancelled: RENDERING -> FAILED
    with pytest.raises(OSError) as exc:
        r.result()
    assert exc.value.errno == errno.EIO
    assert parts.state(KEY) is PartState.FAILED
    with pytest.raises(OSError):
        parts.open(KEY)
