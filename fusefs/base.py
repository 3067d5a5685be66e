"""The filesystem tree's building blocks: what every node module imports, and nothing above.

Node, Dir, Stat, Handle and the generic handles and files, FsError (an errno), the mode bits of
the permission model, and Context (what every node needs: the store, the view cache, the
snapshot manager, the mount's flags). The tree modules (``nodes`` the topics/groups/messages/
raw tree and the root, ``viewtree`` the ``view/`` tree, ``snapshots`` the ``snapshots/`` tree)
build on this; ``ops`` maps the kernel's requests onto it. Each operation a node or handle
answers has a blocking method (``stat``, ``read``...) and may have a fast one beside it
(``stat_cached``, ``read_cached``...: "Where work runs" below) that answers on the trio loop
or says None, "not ready". Nothing here imports pyfuse3 or trio, so the whole tree runs
without a kernel mount (tests/fs/).
"""

from __future__ import annotations

import contextvars
import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from rmqfs.engine import errors as E
from rmqfs.engine.live.snapshot import SnapshotManager

_log = logging.getLogger("rmqfs.refused")
_T = TypeVar("_T")

if TYPE_CHECKING:  # annotations only
    from rmqfs.engine.store import MessageStore

    from .views import ViewCache

# Permission model (docs/guarantees.md): everything belongs to the mounting user; files
# that accept writes (produce, produce.jsonl, offset) are 0644 and the directories that accept
# mkdir (topics/, groups/, snapshots/) 0755, so only the owner (and root) may write. `-o allow_other_write`
# makes them 0666/0777. A read-only mount shows no write bit anywhere. The modes are what the
# daemon enforces itself (Context.check_write), so `default_permissions` agrees with them.
DIR_MODE = stat.S_IFDIR | 0o755  # topics/ and groups/ (mkdir), as write_mode() shows them
RO_DIR = stat.S_IFDIR | 0o555  # every other directory: nothing can be created in it
RO_FILE = stat.S_IFREG | 0o444
RW_FILE = stat.S_IFREG | 0o644
WO_FILE = RW_FILE  # produce files: writable by the owner, read as empty by anyone
OTHERS_WRITE = 0o022  # the group and other write bits added by allow_other_write

VIEW_PART_MESSAGES = 100_000  # queue offsets per view/ part


class FsError(Exception):
    """A filesystem error with its errno."""

    def __init__(self, err: int, message: str = "") -> None:
        super().__init__(message or os.strerror(err))
        self.errno = err


def fs_error(exc: E.StoreError) -> FsError:
    """The FsError for an engine error (its ``errno`` attribute)."""
    return FsError(exc.errno, str(exc))


@dataclass
class Stat:
    """What getattr reports: mode bits, size in bytes, mtime in ns, and whether it may change."""

    mode: int
    size: int = 0
    mtime_ns: int = 0
    live: bool = True
    blocks: int | None = None  # 512-byte blocks in the store; None: 1 when not empty (du)
    attr_timeout: float | None = None  # seconds the kernel may cache it; None: by ``live``


#: The uid of the user whose request the current thread serves (``fusefs.ops`` sets it around
#: the work it hands to a worker thread; None: the daemon itself, or no request). What a
#: request makes the daemon hold on its behalf is charged to it: renders in the cache
#: (``fusefs.views.RenderBudget``).
REQUEST_UID: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "rmqfs_request_uid", default=None
)


def as_user(uid: int | None, fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` with :data:`REQUEST_UID` set to ``uid`` for its duration."""
    token = REQUEST_UID.set(uid)
    try:
        return fn(*args)
    finally:
        REQUEST_UID.reset(token)


# --------------------------------------------------------------------------------------------
# Where work runs: the trio loop or a worker thread (docs/architecture.md, "fusefs: where work
# runs"). Each request the FUSE layer (``fusefs.ops``) serves names its two phases: first a
# *fast* method on the trio loop, side-effect free until it answers, that returns the answer
# or None ("not ready": answering would block) and raises nothing but :class:`FsError` (the
# request's answer); when it says not ready, the *blocking* method in a worker thread, at one
# named point (``ops.Dispatcher.thread``, ``trio.to_thread.run_sync``). The fast methods are
# :meth:`Node.stat_cached`, :meth:`Node.list_cached`, :meth:`Node.child_cached`,
# :meth:`Node.open_cached` and :meth:`Handle.read_cached`; each answers None by default (the
# operation always takes a thread), so a node opts in by overriding it next to the blocking
# method it shortcuts (``tests/fs/test_dispatch.py`` holds each pair together, names in
# :data:`FAST_METHODS`). Nothing is retried: a fast method that fails is answered as the
# blocking one would be (a bug is EIO, logged), never run again in a thread.

#: each fast method and the blocking method it answers for (the pairs of the two phases)
FAST_METHODS = {
    "stat_cached": "stat",
    "list_cached": "list",
    "child_cached": "child",
    "open_cached": "open",
    "read_cached": "read",
}


def pread_cached(fd: int, length: int, offset: int) -> bytearray | None:
    """``length`` bytes at ``offset`` of ``fd`` when every one is in the page cache, else None
    (never blocks: ``preadv`` with ``RWF_NOWAIT``, Linux 4.14+). A short read is None too: the
    end of the file or a page not cached, which the blocking ``os.pread`` tells apart. Only
    ``length <= 0`` reads nothing (an empty buffer)."""
    buf = bytearray(max(length, 0))
    if length <= 0:
        return buf
    nowait = getattr(os, "RWF_NOWAIT", None)
    if nowait is None:  # not Linux: every read takes a thread
        return None
    try:
        n = os.preadv(fd, [buf], offset, nowait)
    except OSError:  # EAGAIN (BlockingIOError): not cached; EOPNOTSUPP: no RWF_NOWAIT here
        return None
    return buf if n == length else None


class HandleBudget:
    """How many open files and directories users other than the mount's owner may hold.

    Each open handle of a ``raw/`` file or a view holds a descriptor of the daemon, and every
    handle holds memory: without a bound, a user let in by ``-o allow_other`` opening files
    by the thousand would use up the daemon's RLIMIT_NOFILE, and the owner's produce, mkdir
    of a snapshot or unmount would fail with EMFILE. Users other than the owner (and root)
    share ``total`` handles, each at most ``per_uid``; past that their open/opendir fails
    with EMFILE and is logged, and the owner is never counted or refused.
    """

    def __init__(self, owner_uid: int, total: int, per_uid: int) -> None:
        self.owner_uid, self.total, self.per_uid = owner_uid, total, per_uid
        self.held: dict[int, int] = {}  # uid -> handles open
        self._lock = threading.Lock()

    @classmethod
    def for_limit(cls, owner_uid: int, nofile: int) -> HandleBudget:
        """A quarter of the daemon's descriptor limit ``nofile`` for others, at most 4096
        a user."""
        total = max(16, nofile // 4)
        return cls(owner_uid, total, min(total, 4096))

    def counted(self, uid: int | None) -> bool:
        """Whether ``uid``'s handles count (everyone but the owner, root and the daemon)."""
        return uid is not None and uid not in (0, self.owner_uid)

    def take(self, uid: int | None) -> None:
        """Count one more handle of ``uid``. Raises FsError(EMFILE) past the bound."""
        if not self.counted(uid):
            return
        assert uid is not None
        with self._lock:
            mine = self.held.get(uid, 0)
            if mine >= self.per_uid or sum(self.held.values()) >= self.total:
                raise FsError(
                    errno.EMFILE,
                    f"uid {uid} holds {mine} open files of this mount; "
                    f"other users may hold {self.per_uid} each, {self.total} in all",
                )
            self.held[uid] = mine + 1

    def give(self, uid: int | None) -> None:
        """One handle of ``uid`` closed."""
        if not self.counted(uid):
            return
        assert uid is not None
        with self._lock:
            left = self.held.get(uid, 0) - 1
            if left > 0:
                self.held[uid] = left
            else:
                self.held.pop(uid, None)


class LineBudget:
    """Bytes of unfinished lines that ``produce`` / ``produce.jsonl`` handles may buffer, and
    of unfinished ``topic.json`` objects, all together (:class:`fusefs.nodes.ProduceHandle`
    and :class:`fusefs.nodes.TopicJsonWriteHandle` ask before their buffers grow).

    Each handle's unfinished line is bounded by what one message may be (``maxMessageSize``,
    about 5.4 MB for ``produce.jsonl``), but handles are many: a user let in with
    ``allow_other_write`` holding 100 handles with 5.3 MB unfinished each took the daemon from
    60 to 595 MB, and 4,096 handles would ask for 22 GB. So the total is bounded too, in two
    pools that cannot starve each other: users other than the owner (and root) share
    ``others_total`` bytes, each at most ``per_uid``; the owner, root and the daemon share
    ``owner_total``. Past that a write that would grow a buffer fails with ENOBUFS and a
    reason (logged, kept in ``refused.jsonl``); complete lines never need the budget.
    """

    #: Defaults: 256 MiB for the owner, 64 MiB for all other users, 32 MiB for each of them.
    OWNER_TOTAL, OTHERS_TOTAL, PER_UID = 256 << 20, 64 << 20, 32 << 20

    def __init__(
        self,
        owner_uid: int,
        owner_total: int = OWNER_TOTAL,
        others_total: int = OTHERS_TOTAL,
        per_uid: int = PER_UID,
    ) -> None:
        self.owner_uid = owner_uid
        self.owner_total, self.others_total, self.per_uid = owner_total, others_total, per_uid
        self.held: dict[int | None, int] = {}  # uid -> bytes buffered (owner's under None)
        self._lock = threading.Lock()

    def _key(self, uid: int | None) -> int | None:
        return None if uid is None or uid in (0, self.owner_uid) else uid

    def take(self, uid: int | None, n: int) -> None:
        """Count ``n`` more buffered bytes of ``uid``. Raises FsError(ENOBUFS) past the bound
        (nothing counted then)."""
        key = self._key(uid)
        with self._lock:
            mine = self.held.get(key, 0)
            if key is None:
                over = mine + n > self.owner_total
                bound = f"the mounting user's writes may buffer {self.owner_total} in all"
            else:
                others = sum(v for k, v in self.held.items() if k is not None)
                over = mine + n > self.per_uid or others + n > self.others_total
                bound = f"other users may buffer {self.per_uid} each, {self.others_total} in all"
            if over:
                raise FsError(
                    errno.ENOBUFS,
                    f"unfinished lines of open produce files (and topic.json writes) hold "
                    f"{mine} bytes of uid {uid}; {bound}: end lines with a newline, or close "
                    "some files",
                )
            self.held[key] = mine + n

    def give(self, uid: int | None, n: int) -> None:
        """``n`` buffered bytes of ``uid`` stored or dropped."""
        key = self._key(uid)
        with self._lock:
            left = self.held.get(key, 0) - n
            if left > 0:
                self.held[key] = left
            else:
                self.held.pop(key, None)

    def used(self, uid: int | None = None) -> int:
        """Bytes buffered by ``uid``'s pool (the owner's for None, 0 and the owner)."""
        with self._lock:
            return self.held.get(self._key(uid), 0)


class RefusalLog:
    """The recent refusals of write requests, for ``MNT/refused.jsonl`` and the log.

    A refused write answers only an errno; its reason would be lost where no log is read (no
    syslog on the machine, or another user's mount). Each refusal is kept here, in a ring of
    the newest ``keep`` per user (a user writing bad lines in a loop holds no more memory, and
    cannot push anyone else's out: one shared ring let 3,382 refused mkdirs of another
    user in 20 s leave the owner none), for at most ``users`` users besides the owner (the one
    refused longest ago goes first). Entries: ``time`` (epoch ms), ``pid``, ``uid``, ``op``
    (write, close, open, mkdir, rmdir, truncate, ...), ``path`` (in the mount), ``errno`` (its
    name, e.g. ``EINVAL``) and ``reason``. A user reads their own; the owner and root read all.

    Each refusal is also logged as one warning line, at most ``log_burst`` a user every
    ``log_window`` seconds; past that they are counted, and the count is logged with the next
    line of that user's that may be (a loop of refused writes does not grow the log without
    bound: it grew 1.47 MB every 20 s).
    """

    def __init__(
        self,
        owner_uid: int,
        keep: int = 1000,
        users: int = 64,
        log_burst: int = 20,
        log_window: float = 10.0,
    ) -> None:
        import collections

        self.owner_uid = owner_uid
        self.keep, self.users = keep, users
        self.log_burst, self.log_window = log_burst, log_window
        # uid -> its ring; ordered by the time of its last refusal (least recent first)
        self.rings: collections.OrderedDict[int | None, collections.deque] = (
            collections.OrderedDict()
        )
        # uid -> [window start (monotonic s), lines logged in it, refusals not logged]
        self._logged: dict[int | None, list] = {}
        self._lock = threading.Lock()

    def record(
        self, op: str, path: str, pid: int | None, uid: int | None, err: int, reason: str
    ) -> None:
        """Keep and log one refusal (``err``: the errno answered)."""
        import collections

        name = errno.errorcode.get(err, str(err))
        entry = {
            "time": int(time.time() * 1000),
            "pid": pid,
            "uid": uid,
            "op": op,
            "path": path,
            "errno": name,
            "reason": reason or os.strerror(err),
        }
        now = time.monotonic()
        with self._lock:
            ring = self.rings.get(uid)
            if ring is None:
                ring = self.rings[uid] = collections.deque(maxlen=self.keep)
                others = [u for u in self.rings if u != self.owner_uid]
                if len(others) > self.users:  # the user refused longest ago goes
                    gone = others[0]
                    del self.rings[gone]
                    self._logged.pop(gone, None)
            self.rings.move_to_end(uid)
            ring.append(entry)
            window = self._logged.setdefault(uid, [now, 0, 0])
            if now - window[0] >= self.log_window:
                window[:] = [now, 0, window[2]]
            if window[1] >= self.log_burst:
                window[2] += 1
                return
            window[1] += 1
            skipped, window[2] = window[2], 0
        if skipped:
            _log.warning(
                "%d refusals of uid %s not logged (at most %d a %g s; refused.jsonl keeps them)",
                skipped, uid, self.log_burst, self.log_window,
            )  # fmt: skip
        _log.warning(
            "refused %s %s (pid %s, uid %s): %s: %s", op, path, pid, uid, name, entry["reason"]
        )

    def lines_for(self, uid: int | None) -> bytes:
        """The kept refusals ``uid`` may read, oldest first, one JSON object a line: its own,
        or everyone's for the owner, root and the daemon (None)."""
        import json

        with self._lock:
            if uid is not None and uid not in (0, self.owner_uid):
                entries = list(self.rings.get(uid, ()))
            else:
                entries = [e for ring in self.rings.values() for e in ring]
        entries.sort(key=lambda e: e["time"])  # stable: each ring is in order already
        return b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in entries)


class Context:
    """What every node needs: the store, the view cache, mount flags and a start time."""

    def __init__(
        self,
        store: MessageStore,
        views: ViewCache,
        read_only: bool,
        part_messages: int = VIEW_PART_MESSAGES,
        pid: int | None = None,
        others_write: bool = False,
        snapshot_cache_dir: str | None = None,
        location: str | None = None,
    ) -> None:
        self.owner_uid = os.getuid()
        self.owner_gid = os.getgid()
        self.others_write = others_write  # -o allow_other_write
        self.store = store
        self.views = views
        self.read_only = read_only or store.read_only
        self.part_messages = part_messages
        self.pid = pid or os.getpid()
        self.mount_time_ns = time.time_ns()
        self.config_dir = os.path.join(store.root, "config")
        # nothing under the store changes: a read-only mount of a store no one writes
        self.frozen = self.read_only and store.follower is None
        self.snapshot_cache_dir = snapshot_cache_dir  # where snapshot manifests are kept
        # a snapshot in object storage (printable: no credentials), which the store was read from
        self.location = location
        self.snapshots: SnapshotManager | None = None  # made on first use: snapshot_manager()
        self.refusals = RefusalLog(self.owner_uid)  # refused writes: MNT/refused.jsonl
        self.line_budget = LineBudget(self.owner_uid)  # unfinished produce lines, all handles

    def snapshot_manager(self) -> SnapshotManager:
        """The mount's :class:`engine.live.snapshot.SnapshotManager` (made on first use)."""
        if self.snapshots is None:
            self.snapshots = SnapshotManager(self.store, self.snapshot_cache_dir)
        return self.snapshots

    def may_write(self, uid: int | None) -> bool:
        """Whether the user ``uid`` may write (produce, commit, mkdir): the mounting user,
        root, or anyone with ``allow_other_write``. ``None`` (no request context) is the
        daemon itself."""
        return uid is None or uid in (0, self.owner_uid) or self.others_write

    def check_write(self, uid: int | None) -> None:
        """Raise FsError(EROFS) on a read-only mount, FsError(EACCES) unless
        :meth:`may_write`."""
        if self.read_only:
            raise FsError(errno.EROFS)
        if not self.may_write(uid):
            raise FsError(
                errno.EACCES,
                "only the mounting user may write (mount with -o allow_other_write to let others)",
            )

    def write_mode(self, mode: int) -> int:
        """``mode`` of a writable node as shown: no write bit on a read-only mount, the group
        and other write bits with allow_other_write."""
        if self.read_only:
            return mode & ~0o222
        return mode | OTHERS_WRITE if self.others_write else mode

    def file_mtime_ns(self, *names: str) -> int:
        """Newest mtime (ns) of files under ``config/``; the mount time when none exists.

        Directories and metadata files take their mtime from the config file they show, so
        it is stable across mounts and changes exactly when their content does.
        """
        best = 0
        for name in names:
            try:
                path = os.path.join(self.config_dir, name)
                best = max(best, self.store.source.mtime_ns(path))
            except OSError:
                pass
        return best or self.mount_time_ns

    def tree_mtime_ns(self) -> int:
        """mtime of the generated directories: when a topic or group was last created."""
        return self.file_mtime_ns("topics.json", "subscriptionGroup.json")


def ms_to_ns(ms: int) -> int:
    """Milliseconds (the store's timestamps) to nanoseconds (``Stat.mtime_ns``)."""
    return ms * 1_000_000


# --------------------------------------------------------------------------------------------
# Base classes


class Node:
    """A path in the tree: the contract every file and directory implements.

    ``fusefs.ops`` maps each kernel request onto one method. Errors: a method raises
    :class:`FsError` with the errno the request should answer (pyfuse3 ``FUSEError``);
    ``ops`` also turns an engine ``StoreError`` and an ``OSError`` into their errno, and any
    other exception into EIO (logged: a bug never kills the mount). Threads: a method runs in a
    worker thread (``trio.to_thread``, several at once, so nodes guard shared state
    themselves) and may block on the disk or the store's locks; its fast method
    (``stat_cached`` for ``stat``...) runs first on the trio loop, never blocks and answers
    None when only the blocking method can answer (see "Where work runs" above). Nodes are
    made per lookup
    and may be dropped at any time (keep state in the store, the view cache or
    :class:`Context`, not in a node).
    """

    is_dir = False

    def __init__(self, ctx: Context, path: str) -> None:
        self.ctx = ctx
        self.path = path  # in the mount, from "/": the inode is a hash of it (ops.path_inode)

    def stat(self) -> Stat:
        """getattr/lookup: the node's :class:`Stat`. May read the disk or render (a view's
        size); ENOENT when what it shows is gone (a deleted topic), EIO on damage."""
        raise NotImplementedError

    def stat_cached(self) -> Stat | None:
        """:meth:`stat` when it can answer without blocking (from memory), else None; on the
        trio loop. Default: None (getattr takes a thread)."""
        return None

    # directories
    def list_cached(self) -> list[str] | None:
        """:meth:`list` when it can answer without blocking, else None; on the trio loop.
        Default: None."""
        return None

    def list(self) -> list[str]:
        """readdir: the names of the children, in listing order. ENOTDIR for a file. A child
        that fails to load is skipped by ``ops`` (logged), not the whole listing."""
        raise FsError(errno.ENOTDIR)

    def child(self, name: str) -> Node | None:
        """lookup: the child ``name``, or None (ENOENT). ENOTDIR for a file. A directory
        whose children live in the store's memory (``view/``) answers :meth:`child_cached`
        too: lookups and listings there answer on the trio loop when the child's
        :meth:`stat_cached` does too."""
        raise FsError(errno.ENOTDIR)

    def child_cached(self, name: str) -> Node | None:
        """:meth:`child` when it can answer without blocking, else None; on the trio loop. No
        such child is FsError(ENOENT) here (None is "not ready"). Default: None."""
        return None

    def never_child(self, name: str) -> bool:
        """True when no child can ever have this name here (not a name this directory
        makes, whatever the store holds): the FUSE layer lets the kernel cache the miss for
        long (Spark looks up a ``.<file>.crc`` beside each file it reads)."""
        return False

    def mkdir(self, name: str) -> Node:
        """mkdir ``name`` here and return the new child. ``ops`` has already refused users
        other than the owner (EACCES/EPERM, :meth:`Context.check_write`). Default: ENOTDIR
        for a file, EROFS on a read-only mount, else EPERM."""
        if not self.is_dir:
            raise FsError(errno.ENOTDIR)
        raise FsError(errno.EROFS if self.ctx.read_only else errno.EPERM)

    def rmdir(self, name: str) -> None:
        """rmdir the child ``name`` (``snapshots/S``, ``topics/T``, ``groups/G``). Default:
        EROFS on a read-only mount, else EPERM."""
        raise FsError(errno.EROFS if self.ctx.read_only else errno.EPERM)

    # files
    def open(self, flags: int) -> Handle:
        """open(2) with ``flags`` (``O_ACCMODE``, ``O_TRUNC``...): a new :class:`Handle`
        that the kernel holds until release. EISDIR for a directory, EACCES (or EROFS) for a
        write open of a read-only file; EMFILE past :class:`HandleBudget`."""
        raise FsError(errno.EISDIR)

    def open_as(self, flags: int, uid: int | None) -> Handle:
        """:meth:`open` for the user ``uid`` (the FUSE layer calls this); a file whose content
        depends on who reads it (``refused.jsonl``) overrides it."""
        return self.open(flags)

    def open_cached(self, flags: int, uid: int | None) -> Handle | None:
        """:meth:`open_as` when it can answer without blocking (a rendered ``view/`` part),
        else None; on the trio loop, for an open for reading. The handle is the caller's (it
        registers it, or releases it when the open is cancelled). Default: None."""
        return None

    def truncate(self, size: int) -> None:
        """setattr(size): ``open(O_TRUNC)`` and truncate(2) of a writable file (the writable
        files take size 0 only, EINVAL otherwise). EISDIR for a directory, EACCES for a
        read-only file."""
        raise FsError(errno.EISDIR if self.is_dir else errno.EACCES)


class Dir(Node):
    """A directory with a fixed set of named children plus optional dynamic ones.

    Subclasses override :meth:`entries` (and :meth:`list`/:meth:`child` for children that
    are looked up without being listed, or listed from the store)."""

    is_dir = True

    def entries(self) -> dict[str, Callable[[], Node]]:
        """``{name: factory}`` of listed children; ``factory()`` makes the child Node."""
        return {}

    def list(self) -> list[str]:
        """The names of :meth:`entries`."""
        return list(self.entries())

    def child(self, name: str) -> Node | None:
        """The child ``name`` made by its :meth:`entries` factory, or None."""
        f = self.entries().get(name)
        return f() if f else None

    def stat(self) -> Stat:
        """A read-only directory whose mtime is the tree's (:meth:`Context.tree_mtime_ns`)."""
        return Stat(RO_DIR, 0, self.ctx.tree_mtime_ns())

    def sub(self, name: str) -> str:
        """The path of the child ``name``."""
        return f"{self.path.rstrip('/')}/{name}"


def present(node: Node | None) -> Node:
    """``node``, or FsError(ENOENT) when it is None: a :meth:`Node.child_cached` answers no
    such child so (its None is "not ready")."""
    if node is None:
        raise FsError(errno.ENOENT)
    return node


class Handle:
    """An open file: what :meth:`Node.open` returns and the kernel's file handle names.

    ``direct_io`` (the kernel reads through to :meth:`read` every time, for content that
    changes without a size change) and ``keep_cache`` (keep cached pages across opens) go to
    the kernel in pyfuse3's ``FileInfo``. Errors are :class:`FsError` as for :class:`Node`.
    Threads: as for :class:`Node` (:meth:`read_cached` answers on the trio loop from memory or
    the page cache, :func:`pread_cached`); one handle may see concurrent reads (the
    kernel issues them in parallel), writes come in order.
    """

    direct_io = False
    keep_cache = False
    writable = False
    inode = 0  # set by the FUSE layer
    pid: int | None = None  # the process that opened it (set by the FUSE layer)
    uid: int | None = None  # the user who opened it (set by the FUSE layer)
    invalidates: tuple = ()  # paths whose kernel cache a write or flush here makes stale

    def read(self, offset: int, length: int) -> bytes | bytearray:
        """read(2): up to ``length`` bytes at ``offset``; short (or empty) only at the end of
        the file, as FUSE expects unless ``direct_io``. EBADF when not open for reading."""
        raise FsError(errno.EBADF)

    def read_cached(self, offset: int, length: int) -> bytes | bytearray | None:
        """:meth:`read` when it can answer without blocking (memory, the page cache), else
        None; on the trio loop. Default: None (reads take a thread)."""
        return None

    def write(self, data: bytes) -> int:
        """write(2) of ``data``; returns the bytes taken (all of them). The offset is not
        passed: writable files take lines, buffered until a newline or :meth:`flush`
        (``produce``, ``offset``, ``topic.json``). EBADF when not open for writing; EINVAL/EFBIG... for
        bad content, recorded in ``refused.jsonl`` by ``ops``."""
        raise FsError(errno.EBADF)

    def flush(self) -> None:
        """close(2) of one descriptor (may be called more than once per handle): commit
        what was written; an error here is what close(2) returns to the writer."""

    def fsync(self) -> None:
        """fsync(2): make what was written durable (the store's flush)."""

    def release(self) -> None:
        """The last descriptor closed: free what the handle holds (its errors are only
        logged; the kernel does not report them)."""

    def holds_unfinished(self) -> bool:
        """Whether :meth:`release` has something to store or commit (an unfinished line, a
        number, an object): the FUSE layer has readers wait for it, as the kernel answers
        close(2) before the daemon has the RELEASE done. Default: False."""
        return False

    #: :meth:`release` never blocks (it closes a descriptor of a regular file at most) and
    #: :meth:`flush` does nothing: the FUSE layer runs both on the trio loop.
    cheap_close = False
    #: the kernel's attributes of the file predate what this open reads (the file grew since
    #: the kernel cached its size): the FUSE layer drops them before answering the open
    stale_attrs = False


class BytesHandle(Handle):
    """A snapshot of generated content, read with direct_io (its size may change)."""

    direct_io = True

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, offset: int, length: int) -> bytes:
        """``[offset, offset + length)`` of the bytes taken at open."""
        return self.data[offset : offset + length]

    def read_cached(self, offset: int, length: int) -> bytes:
        """:meth:`read`: memory only, so always on the trio loop."""
        return self.read(offset, length)


class GeneratedFile(Node):
    """A small read-only file rendered on demand (status.json, offsets.json, ...)."""

    def content(self) -> bytes:
        """The file's bytes, rendered now."""
        raise NotImplementedError

    def mtime_ns(self) -> int:
        """The file's mtime in ns: the mount's start unless a subclass knows better."""
        return self.ctx.mount_time_ns

    def stat(self) -> Stat:
        """Read-only; the size of :meth:`content` (rendered to know it), :meth:`mtime_ns`."""
        return Stat(RO_FILE, len(self.content()), self.mtime_ns())

    def open(self, flags: int) -> Handle:
        """A :class:`BytesHandle` of :meth:`content` as it is now; EACCES for writing."""
        if flags & os.O_ACCMODE != os.O_RDONLY:
            raise FsError(errno.EACCES)
        return BytesHandle(self.content())


def check_read_only_open(flags: int) -> None:
    """Raise FsError(EACCES) unless ``flags`` open for reading only."""
    if flags & os.O_ACCMODE != os.O_RDONLY:
        raise FsError(errno.EACCES)


class StaticFile(GeneratedFile):
    """``README.txt`` and ``view.ddl``: a read-only file of fixed bytes, cacheable
    (``live=False``), the tree's mtime.

    Errnos: EACCES for an open for writing.
    Threads: getattr (:meth:`stat`) and open run in a worker thread (``trio.to_thread``); reads
    answer on the trio loop from the bytes taken at open (``BytesHandle.read_cached``)."""

    def __init__(self, ctx: Context, path: str, data: bytes) -> None:
        super().__init__(ctx, path)
        self.data = data

    def content(self) -> bytes:
        """The fixed bytes."""
        return self.data

    def stat(self) -> Stat:
        """Read-only, its size, the tree's mtime, cacheable (``live=False``)."""
        return Stat(RO_FILE, len(self.data), self.ctx.tree_mtime_ns(), live=False)
