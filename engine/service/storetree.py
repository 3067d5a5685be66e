"""What may be inside a store directory, and opening files there without following links.

A store is data handed to the daemon, possibly by someone else (a tarball, a shared disk), and
the daemon may serve it to other users (``allow_other``). So nothing in it may make the engine
read or write outside it: a symbolic link anywhere under the store root (``commitlog/x ->
/etc/shadow``, ``consumequeue/T -> /``) or a special file (a FIFO would block the reader
forever, a device would be read as data) makes the whole store refused with
:class:`~engine.errors.UnsafeStoreError`, naming the entries. The root itself may be a link
(``/data/store -> /mnt/disk/store``): it is resolved once when the store opens.

Files are then opened with ``O_NOFOLLOW`` by their owners (:mod:`engine.format.mappedfile`,
:mod:`engine.format.indexfile`); :func:`open_beneath` opens a path below the root one component at a
time (``openat`` with ``O_NOFOLLOW``), for readers such as ``raw/`` that serve names chosen
by users while the store is live.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import UnsafeStoreError, UnsupportedLayoutError
from ..format.config import LMQ_CONSUMER_OFFSET_FILE
from ..format.dledger import DIR_PREFIX, layout_problem
from ..format.message import is_lmq
from ..format.rocksdb import is_rocksdb_dir
from ..format.source import LOCAL, StoreSource

MAX_LISTED = 5  # entries named in the error message


#: How deep a store's tree goes: its deepest files are ``consumequeue/TOPIC/QUEUE/FILE`` (4
#: levels; a DLedger ``dledger-ID/data/FILE`` 3); a directory nested deeper than this below the
#: root is not a store's and is refused (:func:`unsafe_entries`), and no walk goes below it.
#: Bounds every walk of a store tree: Python 3.11's ``os.walk`` and ``shutil.rmtree`` recurse
#: once per level and fail with RecursionError past about 1,000.
MAX_STORE_DEPTH = 32


def walk_tree(
    root: str,
    max_depth: int = MAX_STORE_DEPTH,
    onerror: Callable[[OSError], None] | None = None,
) -> Iterator[tuple[str, list[str], list[str], int]]:
    """``os.walk(root, followlinks=False)`` (top-down) without recursion, to ``max_depth``.

    Yields ``(dirpath, dirnames, filenames, depth)``: ``depth`` is 0 for ``root``, 1 for its
    subdirectories, ...; a caller may prune ``dirnames`` in place as with ``os.walk``. The
    subdirectories of a directory at ``max_depth`` are yielded in its ``dirnames`` but never
    entered. Links (to directories too) are listed in ``filenames``, never followed. An
    unreadable directory is passed to ``onerror(OSError)`` (if given) and skipped. Memory is
    one list of names per directory pending on the stack; no call recurses.
    """
    stack: list[tuple[str, int]] = [(root, 0)]
    while stack:
        top, depth = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(top) as it:
                for entry in it:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        yield top, dirs, files, depth
        if depth < max_depth:
            stack.extend((os.path.join(top, d), depth + 1) for d in reversed(dirs))


def remove_tree(path: str) -> None:
    """``shutil.rmtree(path)`` without recursion (any depth): files, links and special files
    are unlinked, never followed, then the directories deepest first. Raises OSError as
    ``rmtree`` does."""
    if not os.path.isdir(path) or os.path.islink(path):
        os.unlink(path)
        return
    order: list[str] = []
    for dirpath, _dirs, files, _depth in walk_tree(path, max_depth=1 << 62):
        order.append(dirpath)
        for name in files:
            os.unlink(os.path.join(dirpath, name))
    for dirpath in reversed(order):
        os.rmdir(dirpath)


def unsafe_entries(root: str, limit: int = 1000) -> list[str]:
    """Paths (relative to ``root``) of symbolic links and special files below ``root``, and
    of directories nested deeper than :data:`MAX_STORE_DEPTH` (not entered).

    Walks the whole tree without following links or recursing (:func:`walk_tree`); stops after
    ``limit`` finds. An unreadable directory is reported as well (its content is unknown).
    """
    found: list[str] = []

    def onerror(exc: OSError) -> None:
        if exc.filename and os.path.abspath(exc.filename) != os.path.abspath(root):
            found.append(os.path.relpath(exc.filename, root) + f" ({exc.strerror})")

    for dirpath, dirs, files, depth in walk_tree(root, onerror=onerror):
        if depth >= MAX_STORE_DEPTH and dirs:
            found.append(
                os.path.relpath(os.path.join(dirpath, dirs[0]), root)
                + f" (a directory nested deeper than {MAX_STORE_DEPTH} levels: no store's)"
            )
            if len(found) >= limit:
                return found
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            try:
                mode = os.lstat(p).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                found.append(os.path.relpath(p, root) + " (symbolic link)")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                found.append(os.path.relpath(p, root) + " (special file)")
            if len(found) >= limit:
                return found
    return found


def check_store_tree(root: str) -> None:
    """Raise UnsafeStoreError when :func:`unsafe_entries` finds anything below ``root``."""
    bad = unsafe_entries(root)
    if bad:
        more = f" and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
        raise UnsafeStoreError(
            f"store {root} holds entries rmqfs never follows or reads: "
            f"{', '.join(bad[:MAX_LISTED])}{more}; remove them (a store holds only regular "
            "files and directories)"
        )


@dataclass(frozen=True)
class ForeignLayout:
    """An entry of a store directory that is not the plain layout rmqfs reads and writes.

    Attributes:
        path: relative to the store root (``dledger-n0``, ``consumequeue/CURRENT``, ...).
        what: the layout it belongs to, in RocketMQ's terms.
        refuses_write: writing the store (a mount, any offline writer) would make the broker
            misread it or lose what rmqfs appended, so every writer refuses.
        refuses_read: rmqfs would show the store wrong (its messages are not where it
            reads), so even a read-only open refuses.
    """

    path: str
    what: str
    refuses_write: bool
    refuses_read: bool = False

    def to_json(self) -> dict:
        """``status.json``'s ``notUnderstood`` entry."""
        return {"path": self.path, "what": self.what, "refusesWrite": self.refuses_write}


#: Top-level entries of the plain layout (``StorePathConfigHelper``) and rmqfs's own.
PLAIN_TOP = {"commitlog", "consumequeue", "index", "config", "checkpoint", "abort", "lock"}
#: The epoch file of a 5.x controller-mode broker (``enableControllerMode``,
#: ``AutoSwitchHAService`` creates it; ``EpochFileCache``): its store is one replica of a
#: sync-state set, so writing is refused (:func:`foreign_layouts`); read, and carried
#: byte-exact by snapshots.
CONTROLLER_TOP = {
    "epochFileCheckpoint": "the controller's epoch file (EpochFileCache): a controller-mode replica",
    "epochFileCheckpoint.bak": "the controller's epoch file (EpochFileCache): a controller-mode "
    "replica",
}
#: Top-level entries rmqfs leaves as they are and that writing beside them cannot break:
#: the 5.x timer store, the broker's identity, the broker's abort.bak, recover's lost+found/.
KEPT_TOP = {
    "timerwheel": "the 5.x timer wheel (TimerWheel)",
    "timerlog": "the 5.x timer log (TimerLog)",
    "brokerIdentity": "the broker's identity (cluster#broker#id)",
    "abort.bak": "a copy of abort",
    "lost+found": "records rmqfs recover saved",
    # engine.live.manifest.MANIFEST_NAME (a layer above this one)
    "SNAPSHOT.json": "the manifest of the rmqfs snapshot this store was restored from",
}


def controller_replica(root: str, source: StoreSource = LOCAL) -> bool:
    """Whether the store ``root`` is a 5.x controller-mode replica: it holds the epoch file
    (or its ``.bak``) that only ``AutoSwitchHAService`` creates (``EpochFileCache``)."""
    return any(source.isfile(os.path.join(root, n)) for n in CONTROLLER_TOP)


def _is_rocksdb(names: list[str]) -> bool:
    return is_rocksdb_dir(names)


def rocksdb_consume_queue(root: str, source: StoreSource = LOCAL) -> bool:
    """Whether the store ``root`` keeps its ConsumeQueues in RocksDB: ``consumequeue/`` is a
    RocksDB database (``storeType=defaultRocksDB``, ``RocksDBConsumeQueueStore``; also a
    double-write broker's, ``rocksdbCQDoubleWriteEnable``, whose database files sit beside
    the topic directories). The one place that decides file vs RocksDB ConsumeQueues for
    every reader (``MessageStore``, ``StoreFiles``).

    A double-write broker's ``consumequeue/`` holds both the database files and the topic
    directories; it reads the files (``CombineConsumeQueueStore``, ``combineCQPreferCQType``
    defaults to ``default``), and so does rmqfs: only a database without topic directories
    is read from RocksDB."""
    base = os.path.join(root, "consumequeue")
    try:
        names = source.listdir(base)
    except OSError:
        return False
    return is_rocksdb_dir(names) and not any(source.isdir(os.path.join(base, n)) for n in names)


def lmq_queues(root: str, source: StoreSource = LOCAL) -> list[str]:
    """The LMQ queues of the store ``root``, sorted: the ``consumequeue/%LMQ%*`` directories
    (``MixAll.isLmq``; an LMQ is never in topics.json, only its ConsumeQueue shows it)."""
    try:
        names = source.listdir(os.path.join(root, "consumequeue"))
    except OSError:
        return []
    return sorted(n for n in names if is_lmq(n))


#: The files besides ``consumequeue/%LMQ%*`` that mark a store as an LMQ broker's
#: (``LmqConsumerOffsetManager``'s offsets, ``BrokerPathConfigHelper.getLmqConsumerOffsetPath``,
#: and its ``.bak``, ``ConfigManager.persist``), relative to the store root.
LMQ_MARK_FILES = (
    os.path.join("config", LMQ_CONSUMER_OFFSET_FILE),
    os.path.join("config", LMQ_CONSUMER_OFFSET_FILE + ".bak"),
)


def lmq_marks(root: str, source: StoreSource = LOCAL) -> list[str]:
    """What marks the store ``root`` as an LMQ broker's (rocketmq-mqtt's light queues), as
    paths relative to ``root``: the offsets file of :data:`LMQ_MARK_FILES` that exist, then
    the first ``consumequeue/%LMQ%*`` directory (:func:`lmq_queues`). Empty for a plain store.

    Either mark alone makes the store an LMQ one: an ``LmqConsumerOffsetManager`` broker
    (``enableLmq``) writes the offsets file whether or not a light queue's ConsumeQueue is
    on disk yet (they are created on the first dispatch, ``ConsumeQueue.multiDispatchLmqQueue``),
    and a copy may have lost either."""
    found = [p for p in LMQ_MARK_FILES if source.lexists(os.path.join(root, p))]
    lmq = lmq_queues(root, source)
    if lmq:
        found.append("consumequeue/" + lmq[0])
    return found


def foreign_layouts(root: str, source: StoreSource = LOCAL) -> list[ForeignLayout]:
    """What the store directory ``root`` holds besides the plain layout
    (``../docs/format.md``), each with whether it makes rmqfs refuse to write or read.

    - ``dledger-<selfId>/``: a DLedger CommitLog (``DLedgerCommitLog``, 4.5-4.9 automatic
      failover): one replica of a Raft group. Appending outside the group would diverge it:
      refused for writing; read (:mod:`engine.format.dledger`) unless
      :func:`engine.format.dledger.layout_problem` says why not (several replicas, a
      pre-migration ``commitlog/`` beside it): then refused for reading too.
    - a RocksDB database in ``consumequeue/`` (5.2+ ``storeType=defaultRocksDB``,
      ``RocksDBConsumeQueueStore``) or under ``config/`` (``topics/``, ``subscriptionGroups/``,
      ``consumerOffsets/``, ``rdb/``: the RocksDB config managers): the broker reads its queues
      and offsets there, so file ConsumeQueues and JSON config rmqfs writes would be ignored:
      refused for writing; read (:mod:`engine.format.rocksdbcq`,
      :mod:`engine.format.rocksdbconfig`).
    - ``batchconsumequeue/`` (``BatchConsumeQueue``, read by :mod:`engine.format.batchcq`),
      ``%LMQ%`` queues under ``consumequeue/`` or only ``config/lmqConsumerOffset.json``
      (:func:`lmq_marks`; rocketmq-mqtt's light queues, dispatched from
      ``INNER_MULTI_DISPATCH``), compaction logs
      (``compaction/compactionLog``, ``CompactionStore``): rmqfs neither writes nor rebuilds
      them, so a write or a rebuild would leave the broker's view of them wrong.
    - ``epochFileCheckpoint`` (and ``.bak``, :data:`CONTROLLER_TOP`): a 5.x controller-mode
      replica (``AutoSwitchHAService``). Only records up to the checkpoint's confirmPhyOffset
      are confirmed by the sync-state set (``CommitLog.getConfirmOffset``; the reput stops there:
      ``ReputMessageService.getReputEndOffset``); a slave truncates what its master lacks
      (``AutoSwitchHAClient``), so what rmqfs appended could be lost, and a writer that moved
      confirmPhyOffset would confirm what the group never did: refused for writing.
    - the timer store, identity (:data:`KEPT_TOP`) and anything else unknown:
      listed, never touched, not refused.
    """
    out: list[ForeignLayout] = []
    try:
        top = sorted(source.listdir(root))
    except OSError:
        return out
    for name in top:
        p = os.path.join(root, name)
        if name.startswith(DIR_PREFIX) and source.isdir(p):
            problem = layout_problem(root, source)
            out.append(
                ForeignLayout(
                    name,
                    "a DLedger CommitLog (DLedgerCommitLog): one replica of a Raft group"
                    + (f"; {problem}" if problem else ""),
                    True,
                    refuses_read=problem is not None,
                )
            )
        elif name == "batchconsumequeue":
            out.append(ForeignLayout(name, "BatchConsumeQueues (BatchConsumeQueue)", True))
        elif name == "compaction":
            logs = os.path.join(p, "compactionLog")
            busy = source.isdir(logs) and bool(source.listdir(logs))
            what = "compaction logs (CompactionStore)" if busy else "compaction's checkpoint"
            out.append(ForeignLayout(name, what, busy))
        elif name in CONTROLLER_TOP:
            out.append(ForeignLayout(name, CONTROLLER_TOP[name], True))
        elif name in KEPT_TOP:
            out.append(ForeignLayout(name, KEPT_TOP[name], False))
        elif name not in PLAIN_TOP:
            out.append(ForeignLayout(name, "not part of a RocketMQ store", False))
    cq = os.path.join(root, "consumequeue")
    try:
        names = source.listdir(cq)
    except OSError:
        names = []
    if _is_rocksdb(names):
        out.append(
            ForeignLayout(
                "consumequeue",
                "RocksDB ConsumeQueues (RocksDBConsumeQueueStore): read; never written (the "
                "broker reads its queues from RocksDB and would ignore file ConsumeQueues)",
                True,
            )
        )
    lmq = lmq_queues(root, source)
    if lmq:
        out.append(
            ForeignLayout(
                "consumequeue/" + lmq[0],
                f"{len(lmq)} LMQ queue(s) (INNER_MULTI_DISPATCH, rocketmq-mqtt)",
                True,
            )
        )
    else:
        # marked only by its offsets file (LmqConsumerOffsetManager): still an LMQ store, so
        # a writer would make the broker's light queues miss what it puts (and a re-dispatch
        # would create a queue directory per INNER_MULTI_DISPATCH name the records hold)
        for mark in lmq_marks(root, source):
            out.append(
                ForeignLayout(
                    mark,
                    "LMQ consumer offsets (LmqConsumerOffsetManager): an LMQ store "
                    "(INNER_MULTI_DISPATCH, rocketmq-mqtt)",
                    True,
                )
            )
    for name in ("topics", "subscriptionGroups", "consumerOffsets", "rdb"):
        d = os.path.join(root, "config", name)
        try:
            if source.isdir(d) and _is_rocksdb(source.listdir(d)):
                out.append(
                    ForeignLayout(
                        f"config/{name}",
                        "RocksDB config (ConfigRocksDBStorage): read; never written (the "
                        "broker reads topics, groups and offsets there, not the JSON files)",
                        True,
                    )
                )
        except OSError:
            continue
    return out


def check_layout(root: str, read_only: bool, source: StoreSource = LOCAL) -> list[ForeignLayout]:
    """:func:`foreign_layouts` of ``root``; raise UnsupportedLayoutError when one refuses
    writing (``read_only`` False) or reading, naming each and what to do."""
    found = foreign_layouts(root, source)
    bad = [f for f in found if f.refuses_read or (not read_only and f.refuses_write)]
    if bad:
        named = "; ".join(f"{f.path}: {f.what}" for f in bad[:MAX_LISTED])
        if any(f.refuses_read for f in bad):
            advice = "rmqfs cannot read this store yet, and never writes it"
        elif all(f.path in CONTROLLER_TOP for f in bad):
            advice = (
                "rmqfs never writes a controller-mode replica (what it appended past the "
                "confirm offset could be truncated by the broker, and moving confirmPhyOffset "
                "would confirm what the sync-state set never did); mount it read-only "
                "(rmqfs mount -o ro) to read it"
            )
        elif all(f.what.startswith("RocksDB") for f in bad):
            advice = (
                "rmqfs never writes a RocksDB ConsumeQueue or config store (the broker reads its "
                "queues, topics and offsets from RocksDB and would ignore file ConsumeQueues and "
                "JSON config rmqfs wrote); mount it read-only (rmqfs mount -o ro) to read it"
            )
        elif all(f.path.startswith(DIR_PREFIX) for f in bad):
            advice = (
                "rmqfs never writes a DLedger store (appending outside its Raft group would "
                "diverge this replica from the others); mount it read-only (rmqfs mount -o ro) "
                "to read it"
            )
        else:
            advice = (
                "rmqfs does not write this layout (the broker would misread what it appends); "
                "open it read-only (mount -o ro) to read it"
            )
        raise UnsupportedLayoutError(f"store {root} holds {named}: {advice}")
    return found


def open_beneath(root: str, rel: str, flags: int = os.O_RDONLY) -> int:
    """Open ``root/rel`` without following any link below ``root``; return the fd.

    Each directory component is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the one
    before (``openat``), the last with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks) and
    must be a regular file or a directory.

    Raises:
        OSError: ELOOP for a link, ENOENT, EACCES for a special file, ...
    """
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise OSError(errno.EACCES, "path leaves the store", rel)
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for p in parts[:-1]:
            nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        if not parts:
            fd, dfd = dfd, -1
            return fd
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    finally:
        if dfd >= 0:
            os.close(dfd)
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.close(fd)
        raise OSError(errno.EACCES, "not a regular file", rel)
    if flags & os.O_NONBLOCK == 0:
        import fcntl

        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
    return fd


def lstat_beneath(root: str, rel: str) -> os.stat_result:
    """``lstat`` of ``root/rel`` where no directory on the way may be a link (ELOOP)."""
    parts = [p for p in rel.split("/") if p]
    if not parts:
        return os.stat(root)
    dfd = (
        open_beneath(root, "/".join(parts[:-1]), os.O_RDONLY)
        if len(parts) > 1
        else os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    )
    try:
        return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)
