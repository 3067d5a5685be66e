"""The filesystem tree without a kernel (the no-mount tier, as s3ql's t3): a store, a Context
and the RootDir that the daemon hands to pyfuse3, driven through the node API.

    with tree(tmp_path) as t:
        t.write("/topics/T/produce", b"a\\nb\\n")
        t.read("/topics/T/0/offsets.json")
"""

from __future__ import annotations

import contextlib
import errno
import os

from rmqfs.engine.store import MessageStore, StoreConfig
from rmqfs.fusefs.base import Context, FsError
from rmqfs.fusefs.nodes import RootDir
from rmqfs.fusefs.views import ViewCache


class Tree:
    """A RootDir over a store, with path helpers that return nodes or raise FsError."""

    def __init__(self, store: MessageStore, ctx: Context):
        self.store, self.ctx = store, ctx
        self.root = RootDir(ctx, "/")

    def node(self, path: str):
        """The node at ``path``; FsError(ENOENT) when a lookup answers None (as ops.lookup)."""
        node = self.root
        for name in [p for p in path.split("/") if p]:
            node = node.child(name)
            if node is None:
                raise FsError(errno.ENOENT, path)
        return node

    def read(self, path: str) -> bytes:
        """The whole file, read as ``cat`` reads it: until a read returns nothing (or
        fails: the FsError is raised, as cat reports it)."""
        node = self.node(path)
        h = node.open(os.O_RDONLY)
        out = bytearray()
        try:
            while True:
                got = h.read(len(out), max(node.stat().size, 1 << 20))
                if not got:
                    return bytes(out)
                out += got
        finally:
            h.release()

    def write(self, path: str, *chunks: bytes, flags: int = os.O_WRONLY | os.O_APPEND) -> None:
        """open, one write() per chunk, flush (close(2)), release (the last close: a last line
        without newline is put then)."""
        h = self.node(path).open(flags)
        try:
            for c in chunks:
                assert h.write(c) == len(c)
            h.flush()
        finally:
            h.release()

    def mkdir(self, path: str):
        parent, name = path.rstrip("/").rsplit("/", 1)
        return self.node(parent or "/").mkdir(name)

    def rmdir(self, path: str) -> None:
        parent, name = path.rstrip("/").rsplit("/", 1)
        self.node(parent or "/").rmdir(name)


def small_config() -> StoreConfig:
    return StoreConfig(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )


@contextlib.contextmanager
def tree(tmp_path, read_only: bool = False, others_write: bool = False, store_dir=None):
    """A Tree over a new store in ``tmp_path/store`` (or ``store_dir``), closed afterwards."""
    root = str(store_dir or tmp_path / "store")
    store = MessageStore(root, small_config(), read_only=read_only)
    views = ViewCache(store, str(tmp_path / "cache"))
    ctx = Context(
        store,
        views,
        read_only,
        others_write=others_write,
        snapshot_cache_dir=str(tmp_path / "cache"),
    )
    try:
        yield Tree(store, ctx)
    finally:
        if ctx.snapshots is not None:
            ctx.snapshots.close()
        views.close()
        store.close()
