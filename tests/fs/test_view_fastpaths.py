"""The FUSE layer's answers for ``view/`` that never leave its event loop (fusefs/ops.py: the
fast methods of ``fusefs.base``, "Where work runs": ``open_cached``, ``Dir.never_child``,
``Handle.cheap_close``),
driven through ``RmqOperations`` without a kernel: what they answer must be what the worker
thread path answers, and a name that can never exist is a negative entry the kernel may keep."""

from __future__ import annotations

import errno
import os

import pytest

from fstree import tree
from rmqfs.engine.store import Message
from rmqfs.fusefs.base import FsError

pyfuse3 = pytest.importorskip("pyfuse3")
trio = pytest.importorskip("trio")


def _ops(t):
    from rmqfs.fusefs.ops import RmqOperations

    return RmqOperations(t.ctx)


def _walk(ops, path: str) -> int:
    ino = pyfuse3.ROOT_INODE
    for name in [p for p in path.split("/") if p]:
        ino = trio.run(ops.lookup, ino, name.encode(), None).st_ino
    return ino


def test_names_that_can_never_exist_in_view_are_kept_negative(tmp_path):
    from rmqfs.fusefs.ops import SEALED_TIMEOUT

    with tree(tmp_path) as t:
        t.store.create_topic("V", 2)
        t.store.put_messages([Message("V", b"m%d" % i, queue_id=0) for i in range(5)])
        ops = _ops(t)
        queue = _walk(ops, "/view/topic=V/queue=0")
        part = f"part-{0:020d}-{5:020d}.parquet"  # the offsets a growing queue's part holds
        for parent, name in (
            (queue, f".{part}.crc"),  # what Spark looks up beside each file it reads
            (queue, "_SUCCESS"),
            (_walk(ops, "/view/topic=V"), "_temporary"),
            (_walk(ops, "/view"), ".DS_Store"),
        ):
            miss = trio.run(ops.lookup, parent, name.encode(), None)
            assert miss.st_ino == 0 and miss.entry_timeout == SEALED_TIMEOUT, name
        # a name of the directory's own kind that is not there (yet) is a plain ENOENT
        for parent, name in (
            (queue, f"part-{100000:020d}.parquet"),
            (queue, f"part-{0:020d}.parquet"),  # (not whole yet)
            (queue, f"part-{0:020d}-{6:020d}.parquet"),  # (past the queue's end)
            (_walk(ops, "/view/topic=V"), "queue=7"),
            (_walk(ops, "/view"), "topic=W"),
        ):
            with pytest.raises(pyfuse3.FUSEError) as info:
                trio.run(ops.lookup, parent, name.encode(), None)
            assert info.value.errno == errno.ENOENT, name
        entry = trio.run(ops.lookup, queue, part.encode(), None)
        assert entry.st_ino != 0 and entry.st_size > 0


def test_a_rendered_part_opens_and_closes_on_the_loop(tmp_path):
    with tree(tmp_path) as t:
        t.store.create_topic("V", 1)
        t.store.put_messages([Message("V", b"m%d" % i) for i in range(50)])
        ops = _ops(t)
        ino = _walk(ops, f"/view/topic=V/queue=0/part-{0:020d}-{50:020d}.parquet")  # stat renders
        node = ops.nodes[ino]
        h = node.open_cached(os.O_RDONLY, None)
        assert h is not None and h.cheap_close and h.keep_cache and not h.stale_attrs
        data = h.read(0, 1 << 20)
        assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"
        h.release()
        # the same bytes as the thread path's open
        h2 = node.open(os.O_RDONLY)
        assert h2.read(0, 1 << 20) == data
        h2.release()
        # the queue grows: the part listed under this name keeps its bytes (a reader that
        # listed it reads what it listed), and the queue's last part has a new name
        t.store.put_messages([Message("V", b"more")])
        h3 = node.open_cached(os.O_RDONLY, None) or node.open(os.O_RDONLY)
        assert h3.read(0, 1 << 20) == data and h3.keep_cache and not h3.stale_attrs
        h3.release()
        names = t.node("/view/topic=V/queue=0").list()
        assert names == [f"part-{0:020d}-{51:020d}.parquet"]
        with pytest.raises(FsError) as info:  # the fast method's answer: no thread to try
            node.open_cached(os.O_WRONLY, None)
        assert info.value.errno == errno.EACCES
