"""The pyfuse3 filesystem: kernel requests mapped onto :mod:`fusefs.nodes`.

Inodes are stable across mounts: a 63-bit hash of the path, so ``rsync``, ``tar`` and
``restic`` see unchanged files as unchanged.

Threads: each request names its two phases (``fusefs.base``, "Where work runs") and
:class:`Dispatcher` (one per mount, owned by :class:`RmqOperations`) runs them: the node's
fast method on the trio loop (:meth:`Dispatcher.fast`), which answers or says "not ready"
(None) without blocking, then, only when it is not ready, the blocking method in a worker
thread (:meth:`Dispatcher.thread`, ``trio.to_thread.run_sync``: the one named blocking point,
:meth:`Dispatcher.serve` for both), so one slow reader never stalls the mount. Nothing is
retried: an error in either phase is the request's answer (:func:`_answer`). A thread hop
costs 0.1-0.5 ms on a busy machine and Spark's listing of ``view/`` makes hundreds of requests
a query, so the hot requests have fast methods: ``read`` of data in memory or the page cache
(``preadv(RWF_NOWAIT)``, ``fusefs.base.pread_cached``), ``getattr`` of a decoded view that is
caught up, ``lookup`` and ``readdir`` in ``view/`` (children from the store's memory),
``open`` of a rendered part; ``flush``/``release`` of a handle with nothing to commit
(``Handle.cheap_close``) do nothing more than close its descriptor.

Kernel caching: files that grow are reported with a zero attribute timeout so ``tail -f`` and
``ls -l`` see new sizes at once (a size change also drops the file's cached pages), except a
``view/`` part that is still growing, cached for a second and checked at each open (its
attributes and pages are dropped before the open is answered when it grew since); files that
never change again (sealed segments, full ``view/`` parts) are cached for an hour.
``raw/``'s directories, where the store changes, have a zero attribute timeout too (the
store's own writes move their mtimes: ``rsync`` must see the time they have); the other
directories are cached for a second, and dropped when a change through the mount moves the
tree's time (``_tree_moved``). Generated
files whose bytes change without a size change (``offset``, ``status.json``, ...) are read with
``direct_io``; after a commit or a mkdir the affected inodes are invalidated explicitly
(``invalidate_inode``) so no cached attribute survives.

``mkdir`` and ``rmdir`` go to the parent node (``snapshots/<name>`` makes and drops snapshots).
A ``-o ro`` mount is read-only here, not in the kernel (which would refuse those mkdirs too):
opens for writing and setattr answer EROFS, as the nodes do for every other write.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import errno
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pyfuse3
import trio

from rmqfs.engine.errors import CorruptRecordError, StoreError
from rmqfs.engine.read.viewnames import topic_dir_name

from .base import (
    RO_DIR,
    RO_FILE,
    Context,
    Dir,
    FsError,
    Handle,
    HandleBudget,
    Node,
    Stat,
    as_user,
)
from .nodes import RootDir

log = logging.getLogger(__name__)

_T = TypeVar("_T")
#: The most a request waits (s) for RELEASEs storing what their files held (_after_releases)
RELEASE_WAIT = 5.0
#: ``on_error(errno, reason)``: told of each error a request answers (:func:`_answer`)
OnError = Callable[[int, str], None]
#: readdir's entries: (inode, name, child, its attributes), in inode order
DirEntries = list[tuple[int, str, Node, pyfuse3.EntryAttributes]]
#: Children built at a time for a readdir reply (it takes a few dozen READDIRPLUS entries).
READDIR_CHUNK = 64
#: Directory handles whose listing order is kept between readdir calls, and the names kept
#: in all (a name costs about 100 bytes: at most about 50 MB).
LISTINGS_KEPT = 256
LISTING_NAMES_KEPT = 500_000

LIVE_TIMEOUT = 0.0
DIR_TIMEOUT = 1.0
SEALED_TIMEOUT = 3600.0
BLKSIZE = 128 * 1024


def path_inode(path: str, removed: Mapping[str, int] | None = None) -> pyfuse3.InodeT:
    """Stable inode number of a path (the root is ``pyfuse3.ROOT_INODE``). ``removed``: the
    directories ``rmdir`` removed in this mount (``topics/T``, ``groups/G``) -> how many times
    (:attr:`RmqOperations.removed`). The kernel marks a removed directory's inode dead while it
    still holds it, so a directory made again under the name needs a new inode number: its
    paths' numbers are salted with this count (stable numbers otherwise, as before any rmdir)."""
    if path == "/":
        return pyfuse3.ROOT_INODE
    key = path
    if removed:
        parts = path.split("/")
        salt = [
            f"{p}#{removed[p]}"
            for p in ("/".join(parts[:i]) for i in range(3, min(len(parts), 4) + 1))
            if p in removed
        ]
        if salt:
            key = path + "\0" + salt[0]
    # (a name that is not UTF-8 holds surrogates, as os.fsdecode gives it: its own bytes)
    h = int.from_bytes(
        hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big"
    )
    return (h & 0x7FFF_FFFF_FFFF_FFFF) | 0x100  # never 0 or 1


def signalled(pid: int) -> bool:
    """True when the process (thread) ``pid`` is gone or has a signal pending that it neither
    blocks nor ignores (``/proc/<pid>/status``: SigPnd, ShdPnd, SigBlk, SigIgn).

    The kernel makes a process wait for the answer to a FUSE request it already handed to the
    daemon even when the process is killed (``request_wait_answer``: "wait it out"), and
    pyfuse3 does not pass FUSE_INTERRUPT on; so a request that may take long is abandoned with
    EINTR when its caller has such a signal pending, and the killed reader exits at once.
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        return False
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(b":")
        if name in (b"SigPnd", b"ShdPnd", b"SigBlk", b"SigIgn", b"State"):
            fields[name] = value.strip()
    if fields.get(b"State", b"").startswith((b"Z", b"X")):
        return True
    try:
        pending = int(fields[b"SigPnd"], 16) | int(fields[b"ShdPnd"], 16)
        masked = int(fields[b"SigBlk"], 16) | int(fields[b"SigIgn"], 16)
    except (KeyError, ValueError):
        return False
    return bool(pending & ~masked) or bool(pending & (1 << 8))  # SIGKILL cannot be masked


WATCH_INTERVAL = 0.1  # seconds between checks of the callers waiting on a worker thread
#: Worker threads for node methods, per mount: more than pyfuse3's 99 request tasks, so
#: requests waiting on a slow render can never use up the threads the others need (trio's
#: default limiter has 40).
WORKER_THREADS = 128


def _pid(ctx: pyfuse3.RequestContext | None) -> int | None:
    """The caller's pid of a request (None when unknown)."""
    return getattr(ctx, "pid", None) or None


class Dispatcher:
    """Where a request's work runs, for one mount (:class:`RmqOperations` owns one): the two
    phases of ``fusefs.base`` ("Where work runs"). :meth:`fast` runs a node's fast method on
    the trio loop; :meth:`thread` is the one named blocking point, a worker thread
    (``trio.to_thread.run_sync`` under this mount's :attr:`limiter`); :meth:`serve` is the
    first, then the second when the first answers None. Nothing is ever retried: an error is
    the request's answer wherever it was raised (:func:`_answer`).

    It holds the worker threads' limiter, the requests waiting on a worker thread with the
    pid that asked, and the watcher that cancels (EINTR) those whose caller was signalled
    (:func:`signalled`), started in the trio run that first needs it."""

    def __init__(self, threads: int = WORKER_THREADS) -> None:
        self.limiter = trio.CapacityLimiter(threads)
        self.waiting: dict[trio.CancelScope, int] = {}
        self._watched: object = None  # the trio run (its token) whose watcher runs

    async def _watch_callers(self) -> None:
        while True:
            await trio.sleep(WATCH_INTERVAL)
            for scope, pid in list(self.waiting.items()):
                try:
                    if signalled(pid):
                        scope.cancel()
                except Exception:  # the watcher must never die
                    log.exception("checking caller %s", pid)

    def _watch(self) -> None:
        """Start the watcher of waiting callers in this trio run, once."""
        token = trio.lowlevel.current_trio_token()
        if self._watched is not token:
            self._watched = token
            trio.lowlevel.spawn_system_task(self._watch_callers)

    async def run_sync(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` in a worker thread of this mount, as it returns or raises: for the
        FUSE layer's own blocking steps (``statvfs``, invalidations)."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    async def thread(
        self,
        fn: Callable[..., _T],
        *args: Any,
        pid: int | None = None,
        uid: int | None = None,
        on_error: OnError | None = None,
    ) -> _T:
        """Run the blocking ``fn(*args)`` in a worker thread; its errors become their errno
        (:func:`_answer`).

        ``uid``: the requesting user, set as :data:`fusefs.base.REQUEST_UID` while ``fn`` runs
        (what it renders is charged to that user: ``fusefs.views.RenderBudget``).

        With ``pid`` (the caller of the FUSE request) the request answers EINTR as soon as the
        caller is killed or signalled (checked every WATCH_INTERVAL s); the thread is
        abandoned and its work (a render) finishes in the background for the next reader.
        ``on_error`` (errno, reason) is called with each error answered, EINTR excepted
        (refused writes are recorded: :class:`fusefs.base.RefusalLog`).
        """
        call = (as_user, uid, fn, *args) if uid is not None else (fn, *args)
        try:
            if not pid:
                return await trio.to_thread.run_sync(*call, limiter=self.limiter)
            self._watch()
            with trio.CancelScope() as scope:
                self.waiting[scope] = pid
                try:
                    return await trio.to_thread.run_sync(
                        *call, limiter=self.limiter, abandon_on_cancel=True
                    )
                finally:
                    self.waiting.pop(scope, None)
            raise pyfuse3.FUSEError(errno.EINTR)
        except Exception as exc:  # noqa: BLE001 - each error is the request's answer
            raise _answer(exc, fn, on_error) from None

    def fast(
        self,
        fn: Callable[..., _T | None],
        *args: Any,
        uid: int | None = None,
        on_error: OnError | None = None,
    ) -> _T | None:
        """The fast ``fn(*args)`` on the trio loop, with ``uid`` as
        :data:`fusefs.base.REQUEST_UID`: its answer, or None when it is not ready. An error is
        the request's answer, as in :meth:`thread` (:func:`_answer`): a bug in a fast method
        is EIO and logged, never run again in a thread."""
        try:
            return as_user(uid, fn, *args)
        except Exception as exc:  # noqa: BLE001 - each error is the request's answer
            raise _answer(exc, fn, on_error) from None

    async def serve(
        self,
        fast: Callable[..., _T | None],
        slow: Callable[..., _T],
        *args: Any,
        pid: int | None = None,
        uid: int | None = None,
        on_error: OnError | None = None,
    ) -> _T:
        """A request's two phases: ``fast(*args)`` on the trio loop (:meth:`fast`), and when
        it answers None, the blocking ``slow(*args)`` in a worker thread (:meth:`thread`, with
        ``pid``, ``uid`` and ``on_error`` as there)."""
        got = self.fast(fast, *args, uid=uid, on_error=on_error)
        if got is not None:
            return got
        return await self.thread(slow, *args, pid=pid, uid=uid, on_error=on_error)


def _answer(exc: Exception, fn: Callable[..., object], on_error: OnError | None) -> Exception:
    """The ``pyfuse3.FUSEError`` a request answers for ``exc``, raised by ``fn`` on the trio
    loop or in a worker thread: FsError, OSError and engine errors become their errno; any
    other exception is a bug, logged and answered EIO (it never kills the mount).
    ``on_error`` is told, EINTR excepted. ``exc`` itself when it is no Exception to answer."""
    name = getattr(fn, "__qualname__", fn)
    if isinstance(exc, FsError):
        _tell(on_error, exc.errno, str(exc))
        return pyfuse3.FUSEError(exc.errno)
    if isinstance(exc, pyfuse3.FUSEError):
        if exc.errno != errno.EINTR:
            _tell(on_error, exc.errno, "")
        return exc
    if isinstance(exc, OSError):
        _tell(on_error, exc.errno or errno.EIO, exc.strerror or str(exc))
        return pyfuse3.FUSEError(exc.errno or errno.EIO)
    if isinstance(exc, CorruptRecordError):  # damage: the store logged it once, in one line
        log.debug("%s: %s", name, exc)
        _tell(on_error, exc.errno, str(exc))
        return pyfuse3.FUSEError(exc.errno)
    if isinstance(exc, StoreError):  # an engine error the tree did not translate: its errno
        if on_error is None:
            log.warning("%s: %s", name, exc)
        _tell(on_error, exc.errno, str(exc))
        return pyfuse3.FUSEError(exc.errno)
    log.error("error in %s", name, exc_info=exc)  # never let a bug kill the mount
    _tell(on_error, errno.EIO, "internal error (see the mount's log)")
    return pyfuse3.FUSEError(errno.EIO)


def _tell(on_error: OnError | None, err: int, reason: str) -> None:
    if on_error is not None:
        try:
            on_error(err, reason)
        except Exception:  # recording a refusal never changes the answer
            log.exception("recording a refusal")


def _uid(ctx: pyfuse3.RequestContext | None) -> int | None:
    """The requesting user's uid (None without a request context)."""
    return getattr(ctx, "uid", None)


def _check_write(fs_ctx: Context, ctx: pyfuse3.RequestContext | None) -> None:
    """FUSEError(EACCES) unless the requesting user may write (Context.check_write)."""
    try:
        fs_ctx.check_write(_uid(ctx))
    except FsError as exc:
        raise pyfuse3.FUSEError(exc.errno) from None


def _check_owner(fs_ctx: Context, ctx: pyfuse3.RequestContext | None) -> None:
    """FUSEError(EACCES) unless the requesting user may write (Context.may_write); unlike
    :func:`_check_write` it leaves a read-only mount's EROFS to the node."""
    if not fs_ctx.may_write(_uid(ctx)):
        raise pyfuse3.FUSEError(errno.EACCES)


#: The most snapshots users other than the mounting user and root may hold at a time (each
#: holds memory until dropped: the live IndexFile's slot table, 20 MB with the default slots).
OTHERS_SNAPSHOTS = 4


class RmqOperations(pyfuse3.Operations):
    """pyfuse3 operations over a :class:`fusefs.nodes.Context`."""

    enable_writeback_cache = False
    supports_dot_lookup = True

    def __init__(self, ctx: Context, budget: HandleBudget | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        if budget is None:
            import resource

            budget = HandleBudget.for_limit(
                ctx.owner_uid, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            )
        self.budget = budget  # what other users may hold open (HandleBudget)
        self.dispatch = Dispatcher()  # where this mount's requests run, its worker threads
        # directories rmdir removed in this mount -> how many times (path_inode's salt)
        self.removed: dict[str, int] = {}
        # the tree's time (Context.tree_mtime_ns) when the directories' caches last dropped
        self._tree_seen: int | None = None
        # snapshots other users made (their paths): each holds memory (the live IndexFile's
        # slot table, up to 20 MB) until dropped, so they hold at most OTHERS_SNAPSHOTS
        self.others_snapshots: set[str] = set()
        self.nodes: dict[int, Node] = {pyfuse3.ROOT_INODE: RootDir(ctx, "/")}
        self.lookups: dict[int, int] = {}
        self.parents: dict[int, int] = {}
        self.handles: dict[int, Handle] = {}
        self._next_fh = 1
        # opendir fh -> (inode, caller pid, caller uid)
        self.dir_handles: dict[int, tuple[int, int | None, int | None]] = {}
        # opendir fh -> its entries' (inode, name) order (readdir), bounded (_keep_listing)
        self._listings: collections.OrderedDict[int, list[tuple[int, str]]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        # RELEASEs storing what an open file held (an unfinished line): requests that may
        # read it wait for them (_after_releases); the event is set when the count is 0
        self._releasing = 0
        self._released: trio.Event | None = None

    # -- helpers ----------------------------------------------------------------------------
    async def _after_releases(self) -> None:
        """Wait (at most :data:`RELEASE_WAIT` s) for the RELEASEs under way that store what
        their files held. The kernel answers close(2) before the daemon has the RELEASE done,
        but queues it first, and a request read after it starts after its first step: so a
        ``cat`` right after ``printf 'last' >> produce`` finds the line."""
        with trio.move_on_after(RELEASE_WAIT):
            while self._releasing:
                if self._released is None:
                    self._released = trio.Event()
                await self._released.wait()

    def _refusal(self, op: str, path: str, pid: int | None, uid: int | None) -> OnError:
        """An ``on_error`` for :meth:`Dispatcher.thread`: records the refused request (Context.refusals:
        the log and ``refused.jsonl``)."""
        return lambda err, reason: self.ctx.refusals.record(op, path, pid, uid, err, reason)

    def _refuse(
        self, op: str, path: str, ctx: pyfuse3.RequestContext | None, err: int, reason: str
    ) -> pyfuse3.FUSEError:
        """Record a refusal decided here; returns the FUSEError to raise."""
        self.ctx.refusals.record(op, path, _pid(ctx), _uid(ctx), err, reason)
        return pyfuse3.FUSEError(err)

    def _check_writer(
        self, op: str, path: str, ctx: pyfuse3.RequestContext | None, owner_only: bool = False
    ) -> None:
        """:func:`_check_write` (or :func:`_check_owner`), recording a refusal."""
        try:
            (_check_owner if owner_only else _check_write)(self.ctx, ctx)
        except pyfuse3.FUSEError as exc:
            why = (
                "the mount is read-only"
                if exc.errno == errno.EROFS
                else "only the mounting user may write (mount with -o allow_other_write to let "
                "others)"
            )
            raise self._refuse(op, path, ctx, exc.errno, why) from None

    def _no_write(
        self, op: str, path: str, ctx: pyfuse3.RequestContext | None, err: int, reason: str
    ) -> pyfuse3.FUSEError:
        """The refusal of an operation the tree never allows (EROFS on a read-only mount)."""
        if self.ctx.read_only:
            return self._refuse(op, path, ctx, errno.EROFS, "the mount is read-only")
        return self._refuse(op, path, ctx, err, reason)

    def _child_path(self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT) -> str:
        parent = self.nodes.get(parent_inode)
        base = parent.path if parent is not None else "?"
        return base.rstrip("/") + "/" + os.fsdecode(name)

    def _node(self, inode: pyfuse3.InodeT) -> Node:
        node = self.nodes.get(inode)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    def inode_of(self, path: str) -> pyfuse3.InodeT:
        """The inode number of ``path`` in this mount (:func:`path_inode`, salted by the
        directories removed here)."""
        return path_inode(path, self.removed)

    def _remember(self, node: Node, parent: pyfuse3.InodeT) -> pyfuse3.InodeT:
        ino = self.inode_of(node.path)
        self.nodes[ino] = node
        self.parents[ino] = parent
        self.lookups[ino] = self.lookups.get(ino, 0) + 1
        return ino

    def _entry(self, node: Node, ino: pyfuse3.InodeT) -> pyfuse3.EntryAttributes:
        """The kernel's attributes of ``node`` (its :meth:`Node.stat`: may block)."""
        return self._attrs(node, ino, node.stat())

    def _entry_cached(self, node: Node, ino: pyfuse3.InodeT) -> pyfuse3.EntryAttributes | None:
        """:meth:`_entry` when :meth:`Node.stat_cached` answers, else None (the trio loop)."""
        st = node.stat_cached()
        return None if st is None else self._attrs(node, ino, st)

    def _attrs(self, node: Node, ino: pyfuse3.InodeT, st: Stat) -> pyfuse3.EntryAttributes:
        """The kernel's attributes of ``node`` whose :class:`Stat` is ``st``."""
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.st_mode = st.mode
        # 1 for directories: the "unknown" convention, so find(1) never assumes a leaf
        a.st_nlink = 1
        a.st_size = st.size
        a.st_blksize = BLKSIZE
        # du counts the disk a file holds in the store: raw/ and snapshot files give their real
        # blocks; decoded and generated files hold no store data and count one block when not
        # empty (never 0: tar -S would archive a file of 0 blocks as one hole, unread)
        a.st_blocks = (1 if st.size else 0) if st.blocks is None else st.blocks
        a.st_uid = os.getuid()
        a.st_gid = os.getgid()
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = st.mtime_ns
        a.generation = 0
        if node.is_dir:
            # a second, or what the node says (raw/ of a store that changes: 0); the
            # generated directories' cached times are dropped when they move (_tree_moved)
            a.entry_timeout = DIR_TIMEOUT
            a.attr_timeout = DIR_TIMEOUT if st.attr_timeout is None else st.attr_timeout
        elif st.attr_timeout is not None:
            a.attr_timeout = st.attr_timeout
            a.entry_timeout = DIR_TIMEOUT
        elif st.live:
            a.attr_timeout = LIVE_TIMEOUT
            a.entry_timeout = DIR_TIMEOUT
        else:
            a.attr_timeout = a.entry_timeout = SEALED_TIMEOUT
        return a

    # -- lookup and attributes --------------------------------------------------------------
    async def lookup(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext | None = None,
    ) -> pyfuse3.EntryAttributes:
        """FUSE LOOKUP: the attributes of ``name`` in ``parent_inode`` (``.`` and ``..`` too:
        ``supports_dot_lookup``); each answer adds one to the inode's lookup count. On the trio loop
        when the parent's :meth:`Node.child_cached` and the child's :meth:`Node.stat_cached`
        answer (``view/``; a name that can never exist there gets a negative entry the kernel
        keeps), else in a worker thread (:meth:`Dispatcher.serve`). ENOENT for no such child."""
        if self._releasing:
            await self._after_releases()
        parent = self._node(parent_inode)
        text = os.fsdecode(name)
        serve = self.dispatch.serve
        if text == ".":
            return await serve(self._entry_cached, self._entry, parent, parent_inode)
        if text == "..":
            pino = self.parents.get(parent_inode, pyfuse3.ROOT_INODE)
            return await serve(self._entry_cached, self._entry, self._node(pino), pino)

        def missing() -> pyfuse3.EntryAttributes:  # no child ``text``
            if not parent.never_child(text):
                raise FsError(errno.ENOENT)
            # view/: Spark's lookups of absent .crc files, kept by the kernel
            miss = pyfuse3.EntryAttributes()
            miss.st_ino = 0
            miss.entry_timeout = SEALED_TIMEOUT
            return miss

        def find_cached() -> pyfuse3.EntryAttributes | None:
            try:
                child = parent.child_cached(text)
            except FsError as exc:
                if exc.errno == errno.ENOENT:
                    return missing()
                raise
            if child is None:
                return None  # not ready: find() in a worker thread
            attr = self._entry_cached(child, self.inode_of(child.path))
            if attr is not None:
                self._remember(child, parent_inode)
            return attr

        def find() -> pyfuse3.EntryAttributes:
            child = parent.child(text)
            if child is None:
                return missing()
            attr = self._entry(child, self.inode_of(child.path))
            self._remember(child, parent_inode)
            return attr

        return await serve(find_cached, find, pid=_pid(ctx), uid=_uid(ctx))

    # pyfuse3 calls forget without awaiting a plain return (save_retval in handlers.pxi):
    # kept synchronous so the maps change before the next request; the stub says async.
    def forget(  # type: ignore[override]
        self, inode_list: Sequence[tuple[pyfuse3.InodeT, int]]
    ) -> None:
        """FUSE FORGET: drop ``n`` lookups of each inode; a node no longer looked up is
        forgotten (never the root). Runs on the trio loop and must not raise (pyfuse3)."""
        for ino, n in inode_list:
            left = self.lookups.get(ino, 0) - n
            if left > 0:
                self.lookups[ino] = left
            elif ino != pyfuse3.ROOT_INODE:
                self.lookups.pop(ino, None)
                self.nodes.pop(ino, None)
                self.parents.pop(ino, None)

    async def getattr(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.EntryAttributes:
        """FUSE GETATTR: the node's attributes (:meth:`Node.stat_cached` on the trio loop,
        else :meth:`Node.stat` in a worker thread: :meth:`Dispatcher.serve`). ENOENT for an
        unknown inode."""
        if self._releasing:
            await self._after_releases()
        node = self._node(inode)
        return await self.dispatch.serve(
            self._entry_cached, self._entry, node, inode, pid=_pid(ctx), uid=_uid(ctx)
        )

    async def setattr(
        self,
        inode: pyfuse3.InodeT,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: pyfuse3.FileHandleT | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        """FUSE SETATTR: only a size change (``open(O_TRUNC)``, truncate(2)) is done
        (:meth:`Node.truncate`, in a worker thread). EROFS on a read-only mount; EPERM for
        chmod/chown and utime (modes, owners and times are generated); refusals are recorded
        (``refused.jsonl``)."""
        node = self._node(inode)
        if fields.update_mode or fields.update_uid or fields.update_gid:
            # chmod/chown: modes and owners are generated (docs/guarantees.md "Other users")
            raise self._no_write(
                "chmod/chown",
                node.path,
                ctx,
                errno.EPERM,
                "modes and owners in the mount are generated",
            )
        if self.ctx.read_only:  # the kernel mount is not "ro" (snapshots/ takes mkdir)
            raise self._refuse("setattr", node.path, ctx, errno.EROFS, "the mount is read-only")
        if fields.update_size:
            # open(O_TRUNC) and truncate(); the kernel adds mtime/ctime, which follow the data
            self._check_writer("truncate", node.path, ctx)
            await self.dispatch.thread(
                node.truncate,
                attr.st_size,
                on_error=self._refusal("truncate", node.path, _pid(ctx), _uid(ctx)),
            )
        elif fields.update_atime or fields.update_mtime:
            # utime/touch: times come from the data (message store times, config files)
            raise self._no_write(
                "utime", node.path, ctx, errno.EPERM, "times in the mount come from the data"
            )
        return await self.dispatch.thread(self._entry, node, inode)

    async def access(
        self, inode: pyfuse3.InodeT, mode: pyfuse3.ModeT, ctx: pyfuse3.RequestContext
    ) -> bool:
        """access(2) without default_permissions: True when the shown mode bits allow
        ``mode`` to the caller (the owner's bits for the mounting user and root, the others'
        bits for anyone else); writes also need :meth:`Context.may_write`."""
        node = self._node(inode)
        st = await self.dispatch.serve(node.stat_cached, node.stat, uid=_uid(ctx))
        uid = _uid(ctx)
        if mode & os.W_OK and (self.ctx.read_only or not self.ctx.may_write(uid)):
            return False
        bits = st.mode & 0o777
        if uid == 0:  # root: anything but executing a file no one may execute
            return not (mode & os.X_OK and not bits & 0o111)
        shift = 6 if uid in (None, self.ctx.owner_uid) else 0
        want = (
            (4 if mode & os.R_OK else 0)
            | (2 if mode & os.W_OK else 0)
            | (1 if mode & os.X_OK else 0)
        )
        return not want & ~(bits >> shift) & 0o7

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        """FUSE STATFS: the store's file system (``os.statvfs`` of the store root, in a
        worker thread; for a store in object storage, of the cache directory)."""
        store = self.ctx.store
        # a store in object storage: the file system its blocks are cached on
        where = store.root if store.source.local else (self.ctx.snapshot_cache_dir or "/")
        st = await self.dispatch.run_sync(os.statvfs, where)
        s = pyfuse3.StatvfsData()
        for name in (
            "f_bsize",
            "f_frsize",
            "f_blocks",
            "f_bfree",
            "f_bavail",
            "f_files",
            "f_ffree",
            "f_favail",
            "f_namemax",
        ):
            setattr(s, name, getattr(st, name))
        return s

    # -- directories ------------------------------------------------------------------------
    async def opendir(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileHandleT:
        """FUSE OPENDIR: a directory handle that remembers the caller's pid and uid.
        ENOTDIR for a file, EMFILE past :class:`fusefs.base.HandleBudget`."""
        node = self._node(inode)
        if not node.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        uid = _uid(ctx)
        self._take(uid, node.path, ctx)
        with self._lock:
            fh = self._next_fh
            self._next_fh += 1
            self.dir_handles[fh] = (inode, _pid(ctx), uid)
        return fh

    def _take(self, uid: int | None, path: str, ctx: pyfuse3.RequestContext | None) -> None:
        try:
            self.budget.take(uid)
        except FsError as exc:
            raise self._refuse("open", path, ctx, errno.EMFILE, str(exc)) from None

    async def readdir(
        self, fh: pyfuse3.FileHandleT, start_id: int, token: pyfuse3.ReaddirToken
    ) -> None:
        """FUSE READDIRPLUS: the entries after ``start_id`` in inode order, each with its
        attributes (a lookup each): ``next_id`` is the entry's inode, so a listing that goes on
        after entries were added neither repeats nor skips one. On the trio loop when the
        directory's :meth:`Node.list_cached` and :meth:`Node.child_cached` and every child's
        :meth:`Node.stat_cached` answer (``view/`` once its parts are known), else in a worker
        thread (:meth:`Dispatcher.serve`: :meth:`_names`, :meth:`_entries`); a child that
        fails to load is skipped (logged). EBADF for an unknown handle."""
        inode, pid, uid = self.dir_handles.get(fh, (None, None, None))
        if inode is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        node = self._node(inode)

        # Entries go out in inode order and next_id is the entry's inode, so a listing never
        # repeats or skips an entry, even when one is added or removed meanwhile (one added
        # after the listing began shows in the next; passthroughfs.py does the same). The
        # order is the names' inodes
        # (``path_inode(node.sub(name))``: each child's path), computed once per listing and
        # kept for the handle (:meth:`_listing`); children and their attributes are built
        # only for the entries a reply takes, a chunk at a time: building every child on
        # every call made ``ls`` of 22,500 topics take 9 s (a reply holds a few dozen).
        serve = self.dispatch.serve
        names = self._listing(fh) if start_id else None
        if names is None:
            names = await serve(self._names_cached, self._names, node, pid=pid, uid=uid)
            self._keep_listing(fh, names)

        at = bisect.bisect_right(names, (start_id, "\U0010ffff"))
        while at < len(names):
            chunk = names[at : at + READDIR_CHUNK]
            at += len(chunk)
            got = await serve(self._entries_cached, self._entries, node, chunk, pid=pid, uid=uid)
            for ino, name, child, attr in got:
                if not pyfuse3.readdir_reply(token, os.fsencode(name), attr, ino):
                    return
                self._remember(child, inode)

    def _order(self, node: Node, names: list[str]) -> list[tuple[int, str]]:
        """``(inode, name)`` of each child name of ``node``, in inode order."""
        sub = node.sub if isinstance(node, Dir) else (lambda n: f"{node.path.rstrip('/')}/{n}")
        return sorted((int(self.inode_of(sub(name))), name) for name in names)

    def _names(self, node: Node) -> list[tuple[int, str]]:
        """A listing's order (:meth:`_order`) of :meth:`Node.list`: may block."""
        return self._order(node, node.list())

    def _names_cached(self, node: Node) -> list[tuple[int, str]] | None:
        """:meth:`_names` when :meth:`Node.list_cached` answers, else None (the trio loop)."""
        names = node.list_cached()
        return None if names is None else self._order(node, names)

    def _entries(self, node: Node, chunk: list[tuple[int, str]]) -> DirEntries:
        """The children of ``node`` named in ``chunk`` with their attributes (may block); one
        that fails to load is skipped (logged), one whose stat fails is listed with a
        placeholder size."""
        out: DirEntries = []
        for ino, name in chunk:
            try:
                child = node.child(name)
            except Exception as exc:  # noqa: BLE001 - one bad entry never fails a listing
                log.warning("%s/%s skipped in a listing: %s", node.path, name, exc)
                continue
            if child is None or not self._listed_at(child, node, name, ino):
                continue
            try:
                attr = self._entry(child, ino)
            except FsError:
                continue
            except Exception as exc:  # noqa: BLE001 - e.g. a view over a damaged queue
                # Listed with a placeholder size; opening it reports the error (EIO).
                log.warning("%s: %s", child.path, exc)
                st = Stat(RO_DIR if child.is_dir else RO_FILE, 0, self.ctx.mount_time_ns)
                attr = self._attrs(child, ino, st)
            out.append((ino, name, child, attr))
        return out

    def _entries_cached(self, node: Node, chunk: list[tuple[int, str]]) -> DirEntries | None:
        """:meth:`_entries` when every child's :meth:`Node.child_cached` and
        :meth:`Node.stat_cached` answer, else None (the trio loop), with its rules: a child
        gone since the listing (FsError) or that fails to load is skipped (logged), one whose
        stat fails is listed with a placeholder size; one bad entry never fails a listing."""
        out: DirEntries = []
        for ino, name in chunk:
            try:
                child = node.child_cached(name)
            except FsError:
                continue
            except Exception as exc:  # noqa: BLE001 - as _entries: the entry is skipped
                log.warning("%s/%s skipped in a listing: %s", node.path, name, exc)
                continue
            if child is None:
                return None
            if not self._listed_at(child, node, name, ino):
                continue
            try:
                attr = self._entry_cached(child, ino)
            except FsError:
                continue
            except Exception as exc:  # noqa: BLE001 - as _entries: a placeholder size
                log.warning("%s: %s", child.path, exc)
                st = Stat(RO_DIR if child.is_dir else RO_FILE, 0, self.ctx.mount_time_ns)
                attr = self._attrs(child, ino, st)
            if attr is None:
                return None
            out.append((ino, name, child, attr))
        return out

    def _listed_at(self, child: Node, node: Node, name: str, ino: int) -> bool:
        """Whether ``child`` has the inode its listing gave it (it is at ``node.sub(name)``);
        logged when not."""
        if self.inode_of(child.path) == ino:
            return True
        log.warning("%s: listed as %s/%s", child.path, node.path, name)
        return False

    def _listing(self, fh: int) -> list[tuple[int, str]] | None:
        """The ``(inode, name)`` order kept for directory handle ``fh``, or None."""
        with self._lock:
            got = self._listings.get(fh)
            if got is not None:
                self._listings.move_to_end(fh)
            return got

    def _keep_listing(self, fh: int, listing: list[tuple[int, str]]) -> None:
        """Keep a handle's listing for its next readdir calls: at most
        :data:`LISTINGS_KEPT` handles' listings and :data:`LISTING_NAMES_KEPT` names in all,
        the least recently read going first (a handle whose listing went computes it again)."""
        with self._lock:
            self._listings[fh] = listing
            self._listings.move_to_end(fh)
            total = sum(len(x) for x in self._listings.values())
            while len(self._listings) > 1 and (
                len(self._listings) > LISTINGS_KEPT or total > LISTING_NAMES_KEPT
            ):
                _, gone = self._listings.popitem(last=False)
                total -= len(gone)

    async def releasedir(self, fh: pyfuse3.FileHandleT) -> None:
        """FUSE RELEASEDIR: the directory handle is gone; its share of the handle budget is
        given back."""
        entry = self.dir_handles.pop(fh, None)
        with self._lock:
            self._listings.pop(fh, None)
        if entry is not None:
            self.budget.give(entry[2])

    async def mkdir(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: pyfuse3.ModeT,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        """FUSE MKDIR: :meth:`Node.mkdir` of the parent, in a worker thread (``topics/T``,
        ``groups/G``, ``snapshots/S``). EACCES for a user who may not write
        (:meth:`fusefs.base.Context.may_write`); the node's errnos otherwise; refusals recorded."""
        parent = self._node(parent_inode)
        text = os.fsdecode(name)
        # Only the owner creates (topics, groups, snapshots); the nodes answer EROFS where a
        # read-only mount cannot create (a ro mount still takes snapshots).
        path = parent.path.rstrip("/") + "/" + text
        self._check_writer("mkdir", path, ctx, owner_only=True)
        other_snapshot = parent.path == "/snapshots" and self.budget.counted(_uid(ctx))
        if other_snapshot and len(self.others_snapshots) >= OTHERS_SNAPSHOTS:
            raise self._refuse(
                "mkdir",
                path,
                ctx,
                errno.ENOBUFS,
                f"users other than the mounting user and root hold at most {OTHERS_SNAPSHOTS} "
                "snapshots at a time (each holds memory until it is dropped): rmdir one",
            )
        if other_snapshot:  # reserved here, on the loop: concurrent mkdirs cannot pass the bound
            self.others_snapshots.add(path)

        def make() -> pyfuse3.EntryAttributes:
            try:
                child = parent.mkdir(text)
            except BaseException:
                if other_snapshot:
                    self.others_snapshots.discard(path)
                raise
            attr = self._entry(child, self.inode_of(child.path))
            self._remember(child, parent_inode)
            return attr

        attr = await self.dispatch.thread(
            make, on_error=self._refusal("mkdir", path, _pid(ctx), _uid(ctx))
        )
        self._invalidate(parent_inode)
        await self.dispatch.run_sync(self._tree_moved)
        return attr

    async def rmdir(
        self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        """FUSE RMDIR: :meth:`Node.rmdir` of the parent, in a worker thread. The removed
        tree's inodes (and a topic's ``view/`` directory) answer ENOENT from then on, and a
        directory made again under the name gets new inode numbers. EACCES for a user who may
        not write."""
        parent = self._node(parent_inode)
        path = self._child_path(parent_inode, name)
        # only the owner drops snapshots (docs/guarantees.md "Other users")
        self._check_writer("rmdir", path, ctx, owner_only=True)
        text = os.fsdecode(name)
        await self.dispatch.thread(
            parent.rmdir, text, on_error=self._refusal("rmdir", path, _pid(ctx), _uid(ctx))
        )
        # rmdir topics/T, groups/G, snapshots/S: the nodes of what went (and of the topic's
        # view/ tree) answer ENOENT from now on, whatever the kernel still holds, and what is
        # made again under the name gets new inode numbers
        gone: tuple[str, ...] = (path,)
        self.others_snapshots.discard(path)
        if parent.path in ("/topics", "/groups", "/snapshots"):
            self.removed[path] = self.removed.get(path, 0) + 1
        if parent.path == "/topics":
            gone += (f"/view/{topic_dir_name(text)}",)
        with self._lock:
            dropped = [
                ino
                for ino, node in self.nodes.items()
                if any(node.path == g or node.path.startswith(g + "/") for g in gone)
            ]
        for ino in dropped:  # cached attributes (views keep theirs briefly) ask again: ENOENT
            self._invalidate(ino)
        with self._lock:
            for ino in dropped:
                self.nodes.pop(ino, None)
        self._invalidate(parent_inode)
        await self.dispatch.run_sync(self._tree_moved)

    async def unlink(
        self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        """FUSE UNLINK: files of the mount are never removed: EPERM (EROFS on a read-only
        mount), recorded."""
        raise self._no_write(
            "unlink",
            self._child_path(parent_inode, name),
            ctx,
            errno.EPERM,
            "files of the mount cannot be removed",
        )

    async def create(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: pyfuse3.ModeT,
        flags: pyfuse3.FlagT,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        """FUSE CREATE: no file is ever created: EACCES (EROFS on a read-only mount),
        recorded; mkdir makes topics and groups."""
        raise self._no_write(
            "create",
            self._child_path(parent_inode, name),
            ctx,
            errno.EACCES,
            "files cannot be created here (mkdir makes topics and groups)",
        )

    async def mknod(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: pyfuse3.ModeT,
        rdev: int,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        """FUSE MKNOD: no file is ever created: EACCES (EROFS on a read-only mount),
        recorded."""
        raise self._no_write(
            "mknod",
            self._child_path(parent_inode, name),
            ctx,
            errno.EACCES,
            "files cannot be created here",
        )

    async def symlink(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        target: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        """FUSE SYMLINK: no link is ever created: EACCES (EROFS on a read-only mount),
        recorded."""
        raise self._no_write(
            "symlink",
            self._child_path(parent_inode, name),
            ctx,
            errno.EACCES,
            "links cannot be created here",
        )

    async def setxattr(
        self,
        inode: pyfuse3.InodeT,
        name: pyfuse3.XAttrNameT,
        value: bytes,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        """Extended attributes are not kept: ENOTSUP (``setfattr``, ``cp --preserve=xattr``,
        ``rsync -X``), recorded in ``refused.jsonl`` like every refused write. getxattr and
        listxattr stay unimplemented on purpose: libfuse's ENOSYS makes the kernel stop
        asking, where an answer would cost a request per write (``security.capability``)."""
        raise self._no_xattr("setxattr", inode, ctx, f" (setting {os.fsdecode(name)!r})")

    async def removexattr(
        self, inode: pyfuse3.InodeT, name: pyfuse3.XAttrNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        """No extended attributes to remove: ENOTSUP, recorded as :meth:`setxattr`."""
        raise self._no_xattr("removexattr", inode, ctx)

    def _no_xattr(
        self, op: str, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext, what: str = ""
    ) -> pyfuse3.FUSEError:
        node = self.nodes.get(inode)
        path = node.path if node is not None else "?"
        return self._refuse(op, path, ctx, errno.ENOTSUP, "extended attributes are not kept" + what)

    async def link(
        self,
        inode: pyfuse3.InodeT,
        new_parent_inode: pyfuse3.InodeT,
        new_name: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        """FUSE LINK: no link is ever created: EPERM (EROFS on a read-only mount),
        recorded."""
        raise self._no_write(
            "link",
            self._child_path(new_parent_inode, new_name),
            ctx,
            errno.EPERM,
            "links cannot be created here",
        )

    async def rename(
        self,
        parent_inode_old: pyfuse3.InodeT,
        name_old: pyfuse3.FileNameT,
        parent_inode_new: pyfuse3.InodeT,
        name_new: pyfuse3.FileNameT,
        flags: pyfuse3.FlagT,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        """FUSE RENAME: files of the mount are never renamed: EPERM (EROFS on a read-only
        mount), recorded."""
        raise self._no_write(
            "rename",
            self._child_path(parent_inode_old, name_old),
            ctx,
            errno.EPERM,
            "files of the mount cannot be renamed",
        )

    # -- files ------------------------------------------------------------------------------
    def _invalidate(self, inode: pyfuse3.InodeT, attr_only: bool = True) -> None:
        """Drop the kernel's cached attributes (and pages) of an inode it knows."""
        if inode not in self.nodes:
            return
        try:
            pyfuse3.invalidate_inode(inode, attr_only)
        except OSError as exc:  # ENOENT: the kernel forgot it already
            log.debug("invalidate_inode(%d): %s", inode, exc)

    def follower_changed(self, changes: dict[str, list[str]]) -> None:
        """A follower refresh saw the writer delete files (expiry): drop the kernel's cached
        entries of their ``raw/`` paths, which sealed files keep for an hour; and topics
        (``changes["topics"]``: their queues deleted, the topic perhaps made again): drop
        their rendered views, as ``rmdir topics/T`` on the writer's own mount does. Runs in
        the follower's thread, never in a request handler (where it could deadlock)."""
        for topic in changes.get("topics", ()):
            self.ctx.views.drop_topic(topic)
        self._tree_moved()
        for rel in changes.get("deleted", ()):
            parent, name = os.path.split("/raw/" + rel)
            try:
                pyfuse3.invalidate_entry(self.inode_of(parent), os.fsencode(name))
            except (OSError, AttributeError) as exc:  # not known to the kernel: fine
                log.debug("invalidate_entry(%s): %s", rel, exc)

    async def open(
        self, inode: pyfuse3.InodeT, flags: pyfuse3.FlagT, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileInfo:
        """FUSE OPEN: a new file handle for the node's :class:`Handle`; its ``direct_io`` and
        ``keep_cache`` go to the kernel in the ``FileInfo``. :meth:`Node.open_as` in a worker
        thread, after :meth:`Node.open_cached` on the trio loop for a read-only open
        (:meth:`Dispatcher.serve`; EINTR when the caller is signalled meanwhile). EISDIR for a directory;
        for writing, EROFS on a read-only mount and EACCES for a user who may not write; EMFILE
        past the handle budget."""
        if self._releasing:
            await self._after_releases()
        node = self._node(inode)
        if node.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if writing:
            if self.ctx.read_only:  # the kernel mount is not "ro" (snapshots/ takes mkdir)
                raise self._refuse("open", node.path, ctx, errno.EROFS, "the mount is read-only")
            self._check_writer("open", node.path, ctx)
        uid = _uid(ctx)
        self._take(uid, node.path, ctx)
        handle: Handle | None = None
        try:
            if writing:
                handle = await self.dispatch.thread(
                    node.open_as,
                    flags,
                    uid,
                    pid=_pid(ctx),
                    uid=uid,
                    on_error=self._refusal("open", node.path, _pid(ctx), uid),
                )
            else:
                handle = await self.dispatch.serve(
                    node.open_cached, node.open_as, flags, uid, pid=_pid(ctx), uid=uid
                )
            if handle.stale_attrs:  # the kernel's size predates what this open reads
                await self.dispatch.run_sync(self._invalidate, inode, True)
        except BaseException:
            self.budget.give(uid)
            if handle is not None:  # opened, then cancelled: its descriptor goes too
                with contextlib.suppress(Exception):
                    handle.release()
            raise
        handle.inode = inode
        handle.pid = _pid(ctx)
        handle.uid = uid
        with self._lock:
            fh = self._next_fh
            self._next_fh += 1
            self.handles[fh] = handle
        return pyfuse3.FileInfo(
            fh=fh, direct_io=handle.direct_io, keep_cache=handle.keep_cache, nonseekable=False
        )

    def _handle_refusal(self, op: str, h: Handle) -> OnError:
        node = self.nodes.get(getattr(h, "inode", 0))
        return self._refusal(
            op,
            node.path if node is not None else "?",
            getattr(h, "pid", None),
            getattr(h, "uid", None),
        )

    def _handle(self, fh: pyfuse3.FileHandleT) -> Handle:
        h = self.handles.get(fh)
        if h is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        return h

    # pyfuse3 replies with any contiguous buffer (PyObject_GetBuffer in fuse_read_async): a
    # page-cache read (fusefs.base.pread_cached on the loop) returns a bytearray, which the stub's
    # ``bytes`` omits.
    async def read(  # type: ignore[override]
        self, fh: pyfuse3.FileHandleT, off: int, size: int
    ) -> bytes | bytearray:
        """FUSE READ: up to ``size`` bytes at ``off`` (:meth:`Handle.read_cached` on the trio
        loop from memory or the page cache, else :meth:`Handle.read` in a worker thread, EINTR
        when the caller is signalled meanwhile: :meth:`Dispatcher.serve`). EBADF for an
        unknown handle."""
        h = self._handle(fh)
        return await self.dispatch.serve(h.read_cached, h.read, off, size, pid=h.pid)

    async def write(self, fh: pyfuse3.FileHandleT, off: int, buf: bytes) -> int:
        """FUSE WRITE: :meth:`Handle.write` in a worker thread (``off`` is not used: the
        writable files take lines). A refusal is recorded; the kernel's caches of the files the
        write changed are dropped before the answer."""
        h = self._handle(fh)
        try:
            return await self.dispatch.thread(
                h.write, buf, on_error=self._handle_refusal("write", h)
            )
        finally:
            await self._after_write(h)

    async def flush(self, fh: pyfuse3.FileHandleT) -> None:
        """FUSE FLUSH (each close(2) of a descriptor): :meth:`Handle.flush` in a worker
        thread, whose error close(2) returns; nothing for a ``cheap_close`` handle."""
        h = self._handle(fh)
        if h.cheap_close:  # nothing to commit
            return
        try:
            await self.dispatch.thread(h.flush, on_error=self._handle_refusal("close", h))
        finally:
            await self._after_write(h)

    async def _after_write(self, h: Handle) -> None:
        """Before a write or flush is answered: drop what the kernel caches of the files it
        changed (``Handle.invalidates``)."""
        if h.invalidates:
            await self.dispatch.run_sync(self._invalidate_after, h)

    def _invalidate_after(self, h: Handle) -> None:
        """After a commit through ``h``: its own inode, and siblings whose content moved."""
        self._invalidate(h.inode, attr_only=False)
        for path in h.invalidates:
            self._invalidate(self.inode_of(path), attr_only=False)
        self._tree_moved()

    def _tree_moved(self) -> None:
        """After a change that may rewrite topics.json or subscriptionGroup.json (a mkdir, an
        rmdir, a commit, a follower's refresh): when the tree's time moved
        (:meth:`Context.tree_mtime_ns`, the mtime of every generated directory), drop the
        cached attributes of the directories the kernel knows (but ``raw/``'s, asked each
        time), so ``stat`` and ``rsync`` see the new time at once, not a second later. Blocks
        (two stats): a worker thread."""
        now = self.ctx.tree_mtime_ns()
        if now == self._tree_seen:
            return
        self._tree_seen = now
        with self._lock:
            dirs = [
                ino
                for ino, node in self.nodes.items()
                if node.is_dir and not (node.path + "/").startswith("/raw/")
            ]
        for ino in dirs:
            self._invalidate(ino)

    def release_all(self) -> int:
        """Release every handle still open, as RELEASE would (the daemon is stopping with
        files open: once unmounted the kernel sends none): a produce file's unfinished line is
        stored, an ``offset`` file's committed, a ``topic.json`` write applied, each refusal
        recorded in refused.jsonl. Call it once the FUSE loop is over (no request runs).
        Returns how many handles were open."""
        handles, self.handles = self.handles, {}
        for h in handles.values():
            self.budget.give(getattr(h, "uid", None))
            try:
                h.release()
            except Exception as exc:  # noqa: BLE001 - each one told, the others released
                _answer(exc, h.release, self._handle_refusal("close", h))
        return len(handles)

    async def fsync(self, fh: pyfuse3.FileHandleT, datasync: bool) -> None:
        """FUSE FSYNC: :meth:`Handle.fsync` in a worker thread."""
        h = self._handle(fh)
        await self.dispatch.thread(h.fsync, on_error=self._handle_refusal("fsync", h))

    async def release(self, fh: pyfuse3.FileHandleT) -> None:
        """FUSE RELEASE (the last descriptor closed): :meth:`Handle.release`, on the trio
        loop for a ``cheap_close`` handle, else in a worker thread; no process sees its errors
        (a refusal, such as an unfinished line a produce file cannot store, is recorded in
        refused.jsonl), and the kernel cannot wait for it: it answers close(2) first."""
        h = self.handles.pop(fh, None)
        if h is not None:
            self.budget.give(getattr(h, "uid", None))
            if h.cheap_close:
                try:
                    h.release()
                except Exception:
                    log.exception("release of %s", type(h).__name__)
                return
            holds = h.holds_unfinished()  # (before the first await: see _after_releases)
            if holds:
                self._releasing += 1
            try:
                await self.dispatch.thread(h.release, on_error=self._handle_refusal("close", h))
            finally:
                try:
                    await self._after_write(h)
                finally:
                    if holds:
                        self._releasing -= 1
                        if not self._releasing and self._released is not None:
                            self._released.set()
                            self._released = None
