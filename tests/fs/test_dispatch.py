"""Where the FUSE layer's work runs (fusefs/base.py "Where work runs", fusefs/ops.py ``_serve``):
one dispatch point tries a ``loop_first`` method on the trio loop and runs everything else, and
whatever would block there, in a worker thread. Driven through ``RmqOperations`` without a
kernel, counting the worker threads each request takes."""

from __future__ import annotations

import errno
import os

import pytest

from fstree import tree
from rmqfs.engine.store import Message
from rmqfs.fusefs.base import (
    FsError,
    WouldBlock,
    call,
    loop_first,
    on_loop,
    pread,
    try_on_loop,
    would_block,
)

pyfuse3 = pytest.importorskip("pyfuse3")
trio = pytest.importorskip("trio")


def test_try_on_loop_runs_only_loop_first_methods_and_gives_up_on_would_block():
    ran = []

    def plain():
        ran.append("plain")
        return 1

    @loop_first
    def cheap():
        return on_loop()

    @loop_first
    def blocks():
        would_block()
        ran.append("past would_block")
        return 2

    @loop_first
    def refuses():
        raise FsError(errno.EACCES)

    @loop_first
    def buggy():
        raise ValueError("a bug: the worker thread reports it")

    @loop_first
    def composes():
        return call(plain)

    assert try_on_loop(plain) is None and ran == []  # never run on the loop
    assert try_on_loop(cheap) is True
    assert try_on_loop(blocks) is None and ran == []
    assert try_on_loop(buggy) is None
    assert try_on_loop(composes) is None and ran == []  # plain is not loop_first
    with pytest.raises(FsError):
        try_on_loop(refuses)
    # in a worker thread (no try_on_loop) the same methods run through
    assert not on_loop() and blocks() == 2 and composes() == 1
    would_block()  # nothing off the loop


def test_pread_on_the_loop_reads_only_cached_pages(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 6, 0) == b"abcdef"  # now in the page cache

        @loop_first
        def read(n, at):
            return pread(fd, n, at)

        assert try_on_loop(read, 3, 1) == b"bcd"
        assert try_on_loop(read, 10, 0) is None  # short: the end, or pages not cached
        assert read(10, 0) == b"abcdef"  # a worker thread decides

        @loop_first
        def caught(n, at):
            try:
                return pread(fd, n, at)
            except WouldBlock:  # what try_on_loop turns into None
                return "would block"

        assert try_on_loop(caught, 10, 0) == "would block"
    finally:
        os.close(fd)


class Threads:
    """Counts the requests fusefs.ops hands to a worker thread (``_run``)."""

    def __init__(self, monkeypatch):
        import rmqfs.fusefs.ops as ops

        self.calls: list[str] = []
        real = ops._run

        async def counted(fn, *args, **kw):
            self.calls.append(getattr(fn, "__name__", repr(fn)))
            return await real(fn, *args, **kw)

        monkeypatch.setattr(ops, "_run", counted)


def test_view_requests_stay_on_the_loop_once_rendered_and_others_take_a_thread(
    tmp_path, monkeypatch
):
    from rmqfs.fusefs.ops import RmqOperations

    with tree(tmp_path) as t:
        t.store.create_topic("V", 1)
        t.store.put_messages([Message("V", b"m%d" % i) for i in range(20)])
        ops = RmqOperations(t.ctx)
        threads = Threads(monkeypatch)

        def walk(path, ino=pyfuse3.ROOT_INODE):
            for name in [p for p in path.split("/") if p]:
                ino = trio.run(ops.lookup, ino, name.encode(), None).st_ino
            return ino

        view = walk("/view")  # the root's children are not loop_first: a thread
        name = f"part-{0:020d}.parquet"
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
        trio.run(ops.release, info.fh)
        # raw/ is read from the disk: its lookups and getattr take a thread each
        config = walk("/raw/config")
        assert threads.calls == ["find", "find"]
        trio.run(ops.getattr, config, None)
        assert threads.calls == ["find", "find", "_entry"]


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
        for name in ("view", "topic=V", "queue=0", f"part-{0:020d}.parquet"):
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


def test_only_the_read_side_is_tried_on_the_loop():
    """A ``loop_first`` method runs again in a worker thread after any error on the loop
    (``try_on_loop``), so only operations that are safe to run twice may be marked: the read
    side (``fusefs.base.LOOP_FIRST_OPERATIONS``), never a write, commit or budget taken. The
    source is read with ``ast``; a new marked method must be added to that list on purpose."""
    import ast

    from conftest import REPO
    from rmqfs.fusefs.base import LOOP_FIRST_OPERATIONS

    marked = []
    for path in sorted((REPO / "fusefs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {
                    d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")
                    for d in node.decorator_list
                }
                if "loop_first" in names:
                    marked.append((path.name, node.lineno, node.name))
    assert len(marked) >= 20, marked  # the scan finds them
    wrong = [m for m in marked if m[2] not in LOOP_FIRST_OPERATIONS]
    assert not wrong, f"loop_first on an operation that may not run twice: {wrong}"
