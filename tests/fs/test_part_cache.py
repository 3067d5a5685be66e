"""fusefs/views.py's PartCache without a mount: a render that is over before its completion
callback is registered must not deadlock the thread that asked (it listed view/ and hung)."""

import threading
from concurrent.futures import Future

from rmqfs.engine.store import Message, MessageStore
from rmqfs.fusefs.views import PartCache
from stores import small_segments


class DoneAtOnce:
    """An executor whose futures are complete when submit() returns (a render faster than the
    caller), as a process pool's can be."""

    def submit(self, fn, *args):
        fut = Future()
        fut.set_result((123, 0, 5))  # (size, mtime ms, rows) as render_part returns
        return fut


def test_a_render_done_before_its_callback_does_not_deadlock(tmp_path, monkeypatch):
    with MessageStore(str(tmp_path / "s"), small_segments()) as store:
        store.create_topic("T", 1)
        store.put_messages([Message("T", b"m%d" % i) for i in range(5)])
        parts = PartCache(store, str(tmp_path / "cache"), 1 << 30)
        monkeypatch.setattr(parts, "_pool_", lambda: DoneAtOnce())
        key = ("T", 0, 0, 5)
        t = threading.Thread(target=parts.prefetch, args=([key],), daemon=True)
        t.start()
        t.join(5)
        assert not t.is_alive(), "prefetch deadlocked on PartCache.lock"
        assert parts.meta[key] == (123, 0, 5) and key not in parts.pending


class DoneLater:
    """An executor whose futures complete in a thread of their own, writing the part file
    first; the completion callbacks then run in that thread, after the waiters were woken
    (concurrent.futures.Future.set_result notifies them first)."""

    def submit(self, fn, *args):
        fut = Future()

        def finish():
            with open(args[-1], "wb") as f:  # render_part's last argument: the part's path
                f.write(b"x" * 123)
            fut.set_result((123, 0, 5))

        threading.Timer(0.05, finish).start()
        return fut


def test_open_waits_until_the_render_is_registered(tmp_path, monkeypatch):
    """A reader woken by the render's end must find the part registered: open() failed with
    EIO ("not rendered", once in CI) when the bookkeeping callback ran late."""
    import os
    import time

    with MessageStore(str(tmp_path / "s"), small_segments()) as store:
        store.create_topic("T", 1)
        store.put_messages([Message("T", b"m%d" % i) for i in range(5)])
        parts = PartCache(store, str(tmp_path / "cache"), 1 << 30)
        monkeypatch.setattr(parts, "_pool_", lambda: DoneLater())
        done = parts._done

        def late_done(*args):
            time.sleep(0.3)  # the thread that completes the render is slow to register it
            done(*args)

        monkeypatch.setattr(parts, "_done", late_done)
        key = ("T", 0, 0, 5)
        fd = parts.open(key)
        try:
            assert os.fstat(fd).st_size == 123
        finally:
            os.close(fd)
        assert parts.meta[key] == (123, 0, 5) and key not in parts.pending
