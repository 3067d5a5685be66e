"""Where the FUSE layer's work runs (fusefs/base.py "Where work runs", fusefs/ops.py
``Dispatcher``): each request's fast method answers on the trio loop or says "not ready"
(None), and then, only then, its blocking method runs once in a worker thread. Driven through
``RmqOperations`` without a kernel, counting the worker threads each request takes and
watching that no blocking step runs on the loop."""

from __future__ import annotations

import errno
import inspect
import logging
import os
import threading

import pytest

from fstree import tree
from rmqfs.engine.store import Message
from rmqfs.fusefs.base import FAST_METHODS, FsError, Handle, Node, pread_cached

pyfuse3 = pytest.importorskip("pyfuse3")
trio = pytest.importorskip("trio")


def test_serve_answers_on_the_loop_or_runs_the_blocking_method_once_in_a_thread(caplog):
    from rmqfs.fusefs.ops import Dispatcher

    d = Dispatcher()
    ran: list[tuple[str, bool]] = []  # (method, on the trio loop's thread)

    def record(name):
        ran.append((name, threading.current_thread() is threading.main_thread()))

    def slow(*args):
        record("slow")
        return ("slow", *args)

    def fast_answers(*args):
        record("fast")
        return ("fast", *args)

    def not_ready(*args):
        record("fast")
        return None

    def empty(*args):  # a falsy answer is an answer (b"" at the end of a file, no entries)
        record("fast")
        return b""

    def refuses(*args):
        record("fast")
        raise FsError(errno.EACCES)

    def buggy(*args):
        record("fast")
        raise ValueError("a bug in a fast method")

    def serve(fast):
        del ran[:]
        return trio.run(d.serve, fast, slow, 1, 2)

    assert serve(fast_answers) == ("fast", 1, 2) and ran == [("fast", True)]
    assert serve(empty) == b"" and ran == [("fast", True)]
    # not ready: the blocking method runs once, in a worker thread
    assert serve(not_ready) == ("slow", 1, 2) and ran == [("fast", True), ("slow", False)]
    # an error of the fast method is the answer: nothing runs again in a thread
    with pytest.raises(pyfuse3.FUSEError) as info:
        serve(refuses)
    assert info.value.errno == errno.EACCES and ran == [("fast", True)]
    caplog.set_level(logging.ERROR)
    with pytest.raises(pyfuse3.FUSEError) as info:
        serve(buggy)
    assert info.value.errno == errno.EIO and ran == [("fast", True)]
    assert any("buggy" in r.getMessage() and r.exc_info for r in caplog.records)  # surfaced


def test_pread_cached_reads_only_cached_pages(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 6, 0) == b"abcdef"  # now in the page cache
        assert pread_cached(fd, 3, 1) == b"bcd"
        assert pread_cached(fd, 10, 0) is None  # short: the end, or pages not cached
        assert pread_cached(fd, 0, 0) == b""
    finally:
        os.close(fd)


class Threads:
    """Counts the requests an ``RmqOperations`` hands to a worker thread
    (``Dispatcher.thread``), and every blocking step that ran on the trio loop instead (the
    store's renders and waits, ``os.pread``): none may."""

    BLOCKING = (
        ("rmqfs.fusefs.views", "PartCache", ("open", "info", "prefetch")),
        ("rmqfs.fusefs.views", "ChunkCache", ("read", "read_ahead", "render_for_read")),
        ("rmqfs.fusefs.views", "View", ("read", "sync")),
        ("rmqfs.fusefs.views", "ViewCache", ("queue", "topic")),
        ("rmqfs.fusefs.nodes", "LineSeekHandle", ("_render",)),
    )

    def __init__(self, ops, monkeypatch):
        import importlib

        self.calls: list[str] = []
        self.on_loop: list[str] = []
        real = ops.dispatch.thread

        async def counted(fn, *args, **kw):
            self.calls.append(getattr(fn, "__name__", repr(fn)))
            return await real(fn, *args, **kw)

        monkeypatch.setattr(ops.dispatch, "thread", counted)
        for module, cls, names in self.BLOCKING:
            owner = getattr(importlib.import_module(module), cls)
            for name in names:
                monkeypatch.setattr(
                    owner, name, self._watched(f"{cls}.{name}", getattr(owner, name))
                )
        monkeypatch.setattr(os, "pread", self._watched("os.pread", os.pread))

    def _watched(self, what, fn):
        def watched(*args, **kw):
            if trio.lowlevel.in_trio_run():
                self.on_loop.append(what)
            return fn(*args, **kw)

        return watched


def test_view_requests_stay_on_the_loop_once_rendered_and_others_take_a_thread(
    tmp_path, monkeypatch
):
    from rmqfs.fusefs.ops import RmqOperations

    with tree(tmp_path) as t:
        t.store.create_topic("V", 1)
        t.store.put_messages([Message("V", b"m%d" % i) for i in range(20)])
        ops = RmqOperations(t.ctx)
        threads = Threads(ops, monkeypatch)

        def walk(path, ino=pyfuse3.ROOT_INODE):
            for name in [p for p in path.split("/") if p]:
                ino = trio.run(ops.lookup, ino, name.encode(), None).st_ino
            return ino

        view = walk("/view")  # the root's children have no fast lookup: a thread
        name = f"part-{0:020d}-{20:020d}.parquet"  # (a part of a growing queue: its offsets)
        part = walk(f"topic=V/queue=0/{name}", view)
        assert threads.calls == ["find", "find"]  # the part's first stat renders it: a thread
        del threads.calls[:]
        # rendered: lookups, getattr, readdir, open and read of view/ answer on the loop
        assert walk(f"topic=V/queue=0/{name}", view) == part
        trio.run(ops.getattr, part, None)
        listed = []
        monkeypatch.setattr(
            pyfuse3, "readdir_reply", lambda token, name, attr, ino: listed.append(name) or True
        )
        queue = walk("topic=V/queue=0", view)
        fh = trio.run(ops.opendir, queue, None)
        trio.run(ops.readdir, fh, 0, None)
        assert listed == [name.encode()]
        info = trio.run(ops.open, part, os.O_RDONLY, None)
        data = trio.run(ops.read, info.fh, 0, 4)
        assert data == b"PAR1" and threads.calls == []
        # a read past the end of the file is short: the page cache cannot tell, a thread does
        size = trio.run(ops.getattr, part, None).st_size
        assert trio.run(ops.read, info.fh, size - 4, 100) == b"PAR1"
        assert threads.calls == ["read"]
        trio.run(ops.release, info.fh)
        # raw/ is read from the disk: its lookups and getattr take a thread each
        del threads.calls[:]
        config = walk("/raw/config")
        assert threads.calls == ["find", "find"]
        trio.run(ops.getattr, config, None)
        assert threads.calls == ["find", "find", "_entry"]
        assert threads.on_loop == []  # no render, wait or disk read ever ran on the loop


def test_a_view_read_answers_on_the_loop_from_the_render_cache(tmp_path, monkeypatch):
    """``messages.jsonl``: a read of what the render cache and the page cache hold answers on
    the loop (its sizing kept the chunks), across chunks too, and no blocking step runs there;
    a view that is not caught up takes a thread."""
    import rmqfs.fusefs.views as views
    from rmqfs.fusefs.ops import RmqOperations

    monkeypatch.setattr(views, "CHUNK_UNITS", 8)  # 50 messages: 7 chunks
    with tree(tmp_path) as t:
        t.store.create_topic("V", 1)
        t.store.put_messages([Message("V", b"m%d" % i) for i in range(50)])
        ops = RmqOperations(t.ctx)
        threads = Threads(ops, monkeypatch)
        ino = pyfuse3.ROOT_INODE
        for name in ("topics", "V", "messages.jsonl"):
            ino = trio.run(ops.lookup, ino, name.encode(), None).st_ino
        info = trio.run(ops.open, ino, os.O_RDONLY, None)
        size = trio.run(ops.getattr, ino, None).st_size
        first = trio.run(ops.read, info.fh, 0, size)  # reads the chunk files: in the page cache
        assert t.ctx.views.peek("messages", "V").index.chunks > 3
        del threads.calls[:]
        again = trio.run(ops.read, info.fh, 0, size)  # every chunk
        assert again == first and first.startswith(b"{") and threads.calls == []
        assert trio.run(ops.read, info.fh, 100, 64) == first[100:164] and threads.calls == []
        trio.run(ops.release, info.fh)
        t.store.put_messages([Message("V", b"more")])
        trio.run(ops.getattr, ino, None)  # not caught up: sized in a thread
        assert threads.calls == ["release", "_entry"] and threads.on_loop == []


def test_an_open_on_the_loop_is_charged_to_the_user_who_makes_it(tmp_path):
    """A part another user rendered stays charged to other users when that user opens it on
    the loop (the loop ran without the request's uid, so the open made it the owner's)."""
    from types import SimpleNamespace

    from rmqfs.fusefs.ops import RmqOperations

    with tree(tmp_path) as t:
        t.store.create_topic("V", 1)
        t.store.put_messages([Message("V", b"m%d" % i) for i in range(20)])
        ops = RmqOperations(t.ctx)
        other = SimpleNamespace(uid=os.getuid() + 1000, pid=None)
        ino = pyfuse3.ROOT_INODE
        for name in ("view", "topic=V", "queue=0", f"part-{0:020d}-{20:020d}.parquet"):
            ino = trio.run(ops.lookup, ino, name.encode(), other).st_ino
        parts = t.ctx.views.parts
        charged = parts.bytes_of(True)
        assert charged > 0  # its render is the other user's
        info = trio.run(ops.open, ino, os.O_RDONLY, other)
        trio.run(ops.release, info.fh)
        assert parts.bytes_of(True) == charged
        owner = SimpleNamespace(uid=os.getuid(), pid=None)
        info = trio.run(ops.open, ino, os.O_RDONLY, owner)
        trio.run(ops.release, info.fh)
        assert parts.bytes_of(True) == 0  # the owner used it: the owner's from now on


def _tree_classes():
    import rmqfs.fusefs.base as base
    import rmqfs.fusefs.nodes as nodes
    import rmqfs.fusefs.snapshots as snapshots
    import rmqfs.fusefs.viewtree as viewtree

    seen = {}
    for module in (base, nodes, snapshots, viewtree):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, (Node, Handle)):
                seen[cls.__qualname__] = cls
    assert len(seen) > 40, sorted(seen)  # the scan finds them
    return seen.values()


def test_only_the_read_side_has_fast_methods():
    """The fast methods are the read side's (``fusefs.base.FAST_METHODS``: stat, list, child,
    open for reading, read), never a write, commit or budget taken: a new one must be added
    to that list on purpose."""
    fast = [
        (cls.__qualname__, name)
        for cls in _tree_classes()
        for name in vars(cls)
        if name.endswith("_cached") and callable(vars(cls)[name])
    ]
    assert len(fast) >= 20, fast  # the scan finds them
    wrong = [f"{cls}.{name}" for cls, name in fast if name not in FAST_METHODS]
    assert not wrong, f"fast methods of operations that have none: {wrong}"


def test_a_fast_method_answers_for_the_blocking_method_beside_it():
    """A class that overrides a blocking method (``read``) never inherits the fast method
    (``read_cached``) of a class above, which answers for another blocking method: it
    overrides the fast one too (``PendingFile.stat_cached`` answers None), or the fast answer
    on the loop would not be what its thread answers."""
    defaults = {"stat_cached": Node, "list_cached": Node, "child_cached": Node}
    defaults |= {"open_cached": Node, "read_cached": Handle}
    wrong = []
    for cls in _tree_classes():
        for fast, slow in FAST_METHODS.items():
            if slow == "open":
                slow = "open_as" if "open_as" in vars(cls) else "open"
            if not hasattr(cls, fast):
                continue
            where_slow = next(k for k in cls.__mro__ if slow in vars(k))
            where_fast = next(k for k in cls.__mro__ if fast in vars(k))
            if where_fast is not defaults[fast] and not issubclass(where_fast, where_slow):
                wrong.append(f"{cls.__qualname__}.{fast} (from {where_fast.__qualname__})")
    assert not wrong, f"a fast method that answers for another class's blocking one: {wrong}"
