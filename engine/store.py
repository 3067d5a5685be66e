"""The message store: CommitLog, ConsumeQueues, metadata, recovery (``DefaultMessageStore``).

A store directory is byte-compatible with a RocketMQ broker's ``storePathRootDir``::

    commitlog/<20-digit offset>       CommitLog segments
    consumequeue/<topic>/<queueId>/   ConsumeQueue files
    config/topics.json, consumerOffset.json, subscriptionGroup.json
    checkpoint, abort, lock

The CommitLog is the source of truth. Every put appends the records, then dispatches them to the
ConsumeQueues and the index (``ReputMessageService``). Under ASYNC_FLUSH dispatch runs inline,
so a put that returns is visible to readers; under SYNC_FLUSH it runs right after the group
commit's fdatasync, so nothing unflushed is ever visible (the bound RocketMQ's reput has with
``getConfirmOffset() == flushedWhere``). On open the store recovers like the broker
(``CommitLog.recoverNormally``/``recoverAbnormally``): it finds the last valid record, drops a
torn tail, truncates ConsumeQueue units and index items past it and re-dispatches the records
the queues lack.

getMessage lives in :mod:`engine.service.getmessage`; flush services: :meth:`MessageStore.flush`
(FlushRealTimeService, the fsync() path) and the group-commit thread (GroupCommitService).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .errors import (
    CorruptRecordError,
    DescriptorsError,
    InvalidNameError,
    NoSuchGroupError,
    NoSuchTopicError,
    OffsetOutOfRangeError,
    ReadOnlyStoreError,
    SystemTopicError,
    UnsupportedLayoutError,
)
from .format.batchcq import BATCH_CQ_DIR, BatchConsumeQueue
from .format.checkpoint import StoreCheckpoint
from .format.commitlog import CommitLog
from .format.config import (
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_GROUP_SEPARATOR,
    ConsumerOffsetManager,
    DeletedTopics,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
    topic_path_problem,
    validate_group_name,
    validate_queue_nums,
    validate_topic_name,
)
from .format.consumequeue import UNIT, ConsumeQueue, queue_dir_id
from .format.consumequeue import store_file_size as cq_store_file_size
from .format.dledger import dledger_dirs, open_dledger
from .format.innerbatch import InnerBatchCache, unit_message
from .format.mappedfile import offset_to_file_name, remove_temp_files

# The fast put path and the recovery scan (kept apart from the imports above on purpose).
from .format.message import (
    MIN_RECORD_SIZE,
    RECORD_HEAD,
    RECORD_SLACK,
    Host,
    Message,
    MessageRecord,
    check_body_crc,
    decode_record,
    is_lmq,
    is_record_magic,
)
from .format.queue import QueueReader
from .format.rocksdbconfig import load_rocksdb_config
from .format.rocksdbcq import RocksDBConsumeQueue, RocksDBConsumeQueues
from .format.source import LOCAL, StoreSource
from .format.uniqkey import UniqKeyGenerator
from .service import dispatch, flush, putmessage, recovery, workprogress
from .service.cleanup import CleanReport, CleanService

# The store's API in one import: MessageStore, the put request and its result, the config, and
# getMessage's result (each defined in its own module).
from .service.getmessage import GetMessageResult, GetMessageStatus, get_messages, parse_subscription  # noqa: F401
from .service.indexservice import IndexService
from .service.lock import StoreLock, lock_holder, release_store_lock, take_store_lock
from .service.putmessage import PutResult
from .service.storetree import (
    ForeignLayout,
    check_layout,
    check_store_tree,
    lmq_marks,
    remove_tree,
    rocksdb_consume_queue,
)
from .service.validation import check_not_lmq
from .storeconfig import StoreConfig

if TYPE_CHECKING:
    from .live.follower import Follower

log = logging.getLogger(__name__)


class QueueTable(dict):
    """``{(topic, queueId): queue}`` (the store's ConsumeQueues, its BatchConsumeQueues), with
    each topic's queue ids kept beside it (:attr:`topics`), so that testing a topic and
    listing its queues cost that topic's queues, not the store's: an LMQ store holds up to
    ``maxLmqConsumeQueueNum`` (20,000) queues of one unit each, and a listing of ``topics/``
    looks every topic up once."""

    def __init__(self) -> None:
        super().__init__()
        #: topic -> its queue ids in the table (a topic is absent once it has none)
        self.topics: dict[str, set[int]] = {}

    def __setitem__(self, key: tuple[str, int], value: Any) -> None:
        super().__setitem__(key, value)
        self.topics.setdefault(key[0], set()).add(key[1])

    def _forget(self, key: tuple[str, int]) -> None:
        ids = self.topics.get(key[0])
        if ids is not None:
            ids.discard(key[1])
            if not ids:
                del self.topics[key[0]]

    def __delitem__(self, key: tuple[str, int]) -> None:
        super().__delitem__(key)
        self._forget(key)

    def pop(self, key: tuple[str, int], *default: Any) -> Any:
        had = key in self
        out = super().pop(key, *default)
        if had:
            self._forget(key)
        return out

    def clear(self) -> None:
        super().clear()
        self.topics.clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key: tuple[str, int], default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self) -> Any:
        raise TypeError("QueueTable.popitem: use pop(key)")


#: The file a writer creates at open and removes at a clean close (``DefaultMessageStore``'s
#: ``abort``): one left behind makes the next open recover as after a crash.
ABORT_FILE = "abort"


def closed_cleanly(root: str, source: StoreSource = LOCAL) -> bool:
    """Whether the store ``root`` has no ``abort`` left (:data:`ABORT_FILE`): its last writer
    closed it cleanly, or none is open (a running writer holds one)."""
    return not source.lexists(os.path.join(root, ABORT_FILE))


def _out_of_descriptors(root: str, exc: OSError) -> DescriptorsError:
    """The :class:`DescriptorsError` of a store whose open ran out of file descriptors
    (``exc``, EMFILE): the soft and hard ``RLIMIT_NOFILE`` and what to do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    return DescriptorsError(
        f"{root}: out of file descriptors opening {exc.filename or 'a store file'} (the limit "
        f"of open files is {soft}, at most {hard_text}): a store keeps a descriptor open for "
        "each CommitLog, ConsumeQueue and IndexFile file, as a broker does; raise the limit "
        "(ulimit -n) and open it again"
    )


def _load_kernel() -> Any:
    """The compiled core (``engine.read.kernel.load``: None without one), for the put path
    and the IndexFile check after a crash, which sit below engine.read."""
    from .read import kernel

    return kernel.load()


def _load_index_writer() -> Any:
    """A new ``engine.read.kernel.IndexWriter`` (the IndexService's own: it keeps state
    between calls), None without the compiled core."""
    k = _load_kernel()
    return k.index_writer() if k is not None else None


def _recovery_runs(
    files: Any,
    start: int,
    check_crc: bool,
    max_message_size: int,
    committed: int | None,
    after: tuple[int, int] | None,
    index_after: int | None = None,
) -> Iterator[recovery.RecordRun] | None:
    """Recovery's batched walk of a plain CommitLog, or (``committed``: committedIndex) of a
    DLedger one from the entry after ``after`` (``engine.read.recoverruns.recovery_runs``),
    with the index entries of the records past ``index_after`` (None: none), or None without
    the compiled kernel (recovery then walks record by record); given to recovery, which sits
    below engine.read; loaded when a scan first needs it (numpy, pyarrow)."""
    if _load_kernel() is None:
        return None
    from .read import recoverruns

    return recoverruns.recovery_runs(
        files, start, check_crc, max_message_size, committed, after, index_after
    )


class MessageStore:
    """A RocketMQ store directory opened for reading and writing.

    Args:
        root: the store directory (``storePathRootDir``); created when missing.
        config: settings; segment sizes of existing files win over it.
        read_only: take no lock, write nothing (derived data missing on disk is rebuilt in
            memory only).
        follow: read-only only: follow a store another process writes (see
            :mod:`engine.live.follower`): trust the writer's files instead of recovering them and
            let :attr:`follower` advance the visible state. None (the default) follows when
            a live process holds the store's lock, and also a cleanly closed store that its
            files describe whole (normal recovery rebuilt nothing in memory), in case a
            writer starts later; a crashed store no one holds is recovered and frozen.
        held_lock: the descriptor of a store lock the caller took with
            :func:`engine.service.lock.take_store_lock` and keeps (``rmqfs recover`` holds it across
            its steps): the store writes under it and leaves it held at close. An OFD lock
            conflicts with a second one even in the same process, so such a caller cannot
            let the store take its own.
        progress: a progress factory (:mod:`engine.service.workprogress`) for the open: bars
            "loading ConsumeQueues" (queues) and "recovering CommitLog" (bytes), so a long
            recovery (after a crash, the CommitLog from the checkpoint on) says how far it is.

    Attributes:
        follower: the :class:`engine.live.follower.Follower` of a following store, else None.
        recovery_report: what the recovery at open did (:class:`engine.service.recovery.RecoveryReport`),
            None for a following store (it recovers nothing).

    Raises:
        StoreLockedError: another process holds ``lock``.
        CorruptRecordError: files that cannot be a store (mixed segment sizes, ...).
    """

    def __init__(
        self,
        root: str,
        config: StoreConfig | None = None,
        read_only: bool = False,
        follow: bool | None = None,
        held_lock: StoreLock | None = None,
        progress: workprogress.ProgressFactory | None = None,
        source: StoreSource = LOCAL,
    ):
        #: where the store's files are read from (engine.format.source): the local filesystem,
        #: or a snapshot in object storage (read-only, never followed)
        self.source = source
        if not source.local and (not read_only or follow):
            raise ValueError("a store in object storage is only read, never followed")
        self.root = os.path.abspath(root) if source.local else root
        self.recovery_report: recovery.RecoveryReport | None = None
        self.follower: Follower | None = None
        self.writer_pid: int | None = None
        self.config = config or StoreConfig()
        self.read_only = read_only
        self.put_lock = threading.RLock()
        # a group's deletion against a commit that must find the group (commit_offset's
        # existing_group): taken before the consumer offsets' and subscription groups' locks
        self._group_lock = threading.Lock()
        # a topic's deletion against a commit that checked the topic: taken first, before the
        # group lock, the consumer offsets' lock and the put lock (ConsumerManageProcessor
        # refuses a commit to a topic the broker deleted: none may land after its cleanup)
        self._topic_lock = threading.Lock()
        self._touched_end = -1  # the CommitLog's end at the last touch_written
        self._closed = False
        self._lock: StoreLock | None = None  # the lock this store took (not a held_lock)
        self._held_lock = held_lock
        # broker.conf settings that put the files elsewhere or make the broker expect another
        # kind of store: refused before anything is read or created
        self.config.check_layout_settings(self.root, read_only)
        for note in self.config.conf_notes:
            log.warning("%s", note)
        if not read_only:
            os.makedirs(self.root, exist_ok=True)
        elif not source.isdir(self.root):
            raise FileNotFoundError(errno.ENOENT, "no store directory", self.root)
        # Never through a link, never a FIFO or device (engine/service/storetree.py); object
        # storage has neither (its tree is its manifest's names, engine.live.manifest)
        if source.local:
            check_store_tree(self.root)
        # a layout rmqfs does not write (DLedger, RocksDB, BatchCQ, LMQ, ...): refused before
        # anything is created; what is left as it is goes to status.json
        self.foreign: list[ForeignLayout] = check_layout(self.root, read_only, source)
        if not read_only:
            self._take_lock()
            for sub in ("", "config", "commitlog", "index"):
                for n in remove_temp_files(os.path.join(self.root, sub)):
                    log.warning("removed %s/%s: a file a crash left half-created", sub or ".", n)
        try:
            self._open(read_only, follow, progress)
        except BaseException as exc:
            # a failed open closes what it opened and gives the lock back (an OFD lock would
            # otherwise stay held by the leaked descriptor until it is collected, refusing the
            # next open in this process; the exception holds the store while it is handled)
            self._close_opened()
            if self._lock is not None:
                release_store_lock(self._lock)
                self._lock = None
            if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
                raise _out_of_descriptors(self.root, exc) from exc
            raise

    def _close_opened(self) -> None:
        """After a failed open: stop the threads it started (the follower, clean-up and
        flush services'), then close the files it opened (the ConsumeQueues', the
        BatchConsumeQueues', the RocksDB ConsumeQueues', the IndexFiles', the CommitLog's),
        nothing flushed or written (``abort`` stays: the next open recovers); an error of a
        stop or close is logged, the open's is the one raised."""
        closers = []
        for name, stop in (
            ("follower", "stop"),
            ("clean_service", "shutdown"),
            ("flusher", "stop"),
        ):
            service = getattr(self, name, None)
            if service is not None:
                closers.append(getattr(service, stop))
        closers += [q.close for q in getattr(self, "consume_queues", {}).values()]
        closers += [q.close for q in getattr(self, "batch_queues", {}).values()]
        rocksdb_cq = getattr(self, "rocksdb_cq", None)
        closers += [rocksdb_cq.close] if rocksdb_cq is not None else []
        index = getattr(self, "index_service", None)
        closers += [f.close for f in index.files] if index is not None else []
        commitlog = getattr(self, "commitlog", None)
        closers += [commitlog.close] if commitlog is not None else []
        for close in closers:
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - the open's own error is raised
                log.warning("undoing a failed open: %s", exc)

    def _open(
        self,
        read_only: bool,
        follow: bool | None,
        progress: workprogress.ProgressFactory | None = None,
    ) -> None:
        """The rest of the constructor, under the lock: config, queues, recovery, services."""
        started = time.monotonic()
        self.abort_path = os.path.join(self.root, ABORT_FILE)
        self.checkpoint_path = os.path.join(self.root, "checkpoint")
        self.last_exit_ok = closed_cleanly(self.root, self.source)
        auto_follow = follow is None
        follow = self._follows(read_only, follow)
        config_problems = self._open_config(read_only)
        self.checkpoint = StoreCheckpoint.read(self.checkpoint_path, self.source)
        # A DLedger broker's CommitLog is dledger-<selfId>/data (only read: check_layout
        # refused a writer already); its entries past committedIndex are not messages.
        self.dledger = open_dledger(self.root, self.source)
        self.commitlog = CommitLog(
            self.dledger.data_dir if self.dledger else os.path.join(self.root, "commitlog"),
            self.config.mapped_file_size_commit_log,
            read_only,
            entries=self.dledger,
            source=self.source,
        )
        self.commitlog.force_verify_prop_crc = self.config.force_verify_prop_crc
        #: inner-batch records read lately, their messages split once (BatchCQ readers ask
        #: for one message at a time)
        self.inner_batches = InnerBatchCache()
        self.commitlog.max_message_size = self.config.max_message_size
        self.store_host: Host = self.config.store_host
        self.uniq_keys = UniqKeyGenerator(self.store_host[0])
        #: the queues of consumequeue/ (a RocksDB store's RocksDBConsumeQueue, read-only)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue | RocksDBConsumeQueue] = (
            QueueTable()
        )
        # BatchCQ topics' queues (batchconsumequeue/), read-only: engine.format.batchcq
        self.batch_queues: dict[tuple[str, int], BatchConsumeQueue] = QueueTable()
        #: the RocksDB ConsumeQueues (engine.format.rocksdbcq) of a 5.2+ store that keeps them
        #: there (storetree.rocksdb_consume_queue), else None: then consume_queues are
        #: RocksDBConsumeQueue, read-only
        self.rocksdb_cq: RocksDBConsumeQueues | None = None
        self._cq_file_size = self.config.mapped_file_size_consume_queue
        # the delay levels' delays in ms (``messageDelayLevel``), level 1 first
        self.delay_levels = self.config.delay_level_table()
        self.dispatchers: list = []  # objects with dispatch(list[DispatchRequest]) / truncate(offset)
        # What opening the store repaired, and queues whose units point at no valid record
        # (found while reading): "<path>: <what>" lines for logs and status.json.
        self.repairs: list[str] = config_problems
        self.damaged: dict[tuple[str, int], str] = {}
        #: the first damage a read found in the timer store (:meth:`note_timer_damage`), or None
        self.timer_damage: str | None = None
        # Topics the store holds but cannot show (a name unsafe as a path: topic_path_problem),
        # found in a consumequeue/ directory name or a record: {topic: reason}. topics.json's
        # are the TopicConfigManager's (skip_reasons); skipped_topics() joins both.
        self._skipped_topics: dict[str, str] = {}
        self.index_service: IndexService | None = None
        self.listeners: list = []  # callables(Sequence[PutResult]) run after each put
        if self.config.message_index_enable:
            self._open_index(read_only)
        # the put path's caches and queue offsets (engine.service.putmessage)
        self.putter = putmessage.PutService(self, _load_kernel)
        # flush, group commit and the SYNC_FLUSH dispatches waiting for them (engine.service.flush)
        self.flusher = flush.FlushService(self)
        # the store timestamp of the last record dispatched to the ConsumeQueues (what the
        # checkpoint's logicsMsgTimestamp may say once they are flushed)
        self.dispatched_store_timestamp = self.checkpoint.logics_msg_timestamp
        # TopicAttributes "queue.type" = BatchCQ (5.x): served by batchconsumequeue/.
        self.batch_cq_topics = {
            name
            for name, t in self.topic_config.topics.items()
            if str(t.attributes.get("queue.type", "")).lower() == "batchcq"
        }
        # LMQ queues (consumequeue/%LMQ%*, or their offsets file): records are fanned out
        # to them by INNER_MULTI_DISPATCH when ConsumeQueues are rebuilt (service.dispatch)
        self.lmq_enabled = bool(lmq_marks(self.root, self.source))
        self._load_consume_queues(progress)
        # the LMQ queues the store has, and what dispatch refuses past maxLmqConsumeQueueNum
        self.lmq_limit = dispatch.LmqLimit({t for t, _q in self.consume_queues if is_lmq(t)})
        self._load_batch_queues()
        if follow:
            from .live.follower import Follower

            self.follower = Follower(self)
            self.follower.open()
        else:
            self._recover(read_only and auto_follow, progress, started)
        if not read_only:
            # deletions whose records have all expired need no remembering
            self.deleted_topics.prune(self.commitlog.min_offset)
            with open(self.abort_path, "w") as f:  # 5.x writes the pid
                f.write(str(os.getpid()))
        self.disk_full = False  # set by the CleanService above diskSpaceWarningLevelRatio
        self.clean_service = CleanService(self)
        if not read_only:
            self.clean_service.start()
        if not read_only:
            self.flusher.start()

    def _follows(self, read_only: bool, follow: bool | None) -> bool:
        """Whether this open follows a writer (``follow`` None: when another process holds
        the lock of a plain store); sets :attr:`follower` (None until made) and
        :attr:`writer_pid`."""
        if follow is None and not self.source.local:
            follow = False  # a snapshot in object storage never changes
        if follow is None:
            # a DLedger store is read as it is at the open, not followed (the follower walks
            # plain CommitLogs only)
            # nor a RocksDB ConsumeQueue store (read as it is at the open, too)
            follow = (
                read_only
                and lock_holder(self.root) is not None
                and not dledger_dirs(self.root)
                and not rocksdb_consume_queue(self.root)
            )
        self.follower = None
        self.writer_pid = None
        if follow:
            if not read_only:
                raise ValueError("only a read-only store can follow a writer")
            self.writer_pid = lock_holder(self.root)
            # the writer's abort file says it is running, not that it crashed
            self.last_exit_ok = True
        return follow

    def _open_config(self, read_only: bool) -> list[str]:
        """Open config/: topics, offsets, groups, deleted topics. Returns the problems found
        (a damaged RocksDB config: its JSON files are read instead)."""
        config_dir = os.path.join(self.root, "config")
        # a RocksDB config (5.2+) is the source of truth: the JSON files are stale then
        # (only read: check_layout refused a writer already)
        config_problems: list[str] = []
        try:
            rdb = (load_rocksdb_config(config_dir) if self.source.local else None) or {}
        except CorruptRecordError as exc:
            # shown (status.json's repairs), not fatal: the JSON files beside it are read
            rdb = {}
            config_problems.append(f"config: {exc}; the JSON files are read instead")
            log.warning("%s", config_problems[0])
        src = self.source
        self.topic_config = TopicConfigManager(
            config_dir, read_only, rdb.get("topics.json"), source=src
        )
        self.consumer_offsets = ConsumerOffsetManager(
            config_dir, read_only, rdb.get("consumerOffset.json"), source=src
        )
        self.subscription_groups = SubscriptionGroupManager(
            config_dir, read_only, rdb.get("subscriptionGroup.json"), source=src
        )
        self.deleted_topics = DeletedTopics(config_dir, read_only, source=src)
        return config_problems

    def _open_index(self, read_only: bool) -> None:
        """Open index/ (messageIndexEnable): the IndexService, checked after a crash, and a
        dispatcher."""
        self.index_service = IndexService(
            os.path.join(self.root, "index"),
            self.config.max_hash_slot_num,
            self.config.max_index_num,
            read_only,
            timestamp_of=self._store_timestamp_at,
            source=self.source,
            load_writer=_load_index_writer,
        )
        self.index_service.load(self.last_exit_ok, self.checkpoint.index_msg_timestamp)
        # After a crash the newest files are checked whole; a writable open also checks
        # the header of the file it will write to after a clean exit (a header that lies:
        # an indexCount past the file, a slot past the count), and rebuilds it as well.
        dropped = []
        if not self.last_exit_ok:
            k = _load_kernel()
            dropped = self.index_service.drop_inconsistent(
                check=k.index_check if k is not None else None
            )
        elif not read_only:
            dropped = self.index_service.drop_inconsistent(newest=1, quick=True)
        if dropped:
            for name, problem in dropped:
                what = (
                    "not used by this read-only open: key lookups miss its entries"
                    if read_only
                    else "rebuilt from the CommitLog"
                )
                self.repairs.append(f"index/{name}: {problem}; {what}")
                log.warning("index/%s: %s; %s", name, problem, what)
        self.dispatchers.append(self.index_service)

    def _recover(
        self,
        may_follow: bool,
        progress: workprogress.ProgressFactory | None,
        started: float,
    ) -> None:
        """Recover the store (not followed); ``may_follow``: a read-only open that chose not to
        follow, which attaches a follower to a clean store no one writes now."""
        self.recovery_report = recovery.recover(self, progress, runs=_recovery_runs)
        self.commitlog.mark_touched()  # (the bytes found: their mtimes are the files')
        last = self.commitlog.last_store_timestamp
        if 0 < last < self.dispatched_store_timestamp:
            # the checkpoint's logicsMsgTimestamp lies after the last record kept (a copy
            # whose checkpoint was read after its CommitLog, a tail recovery dropped): the
            # ConsumeQueues hold no record that late, so the next checkpoint says the last one
            self.dispatched_store_timestamp = last
            self.flusher.note_data_moved()
        for bq in self.batch_queues.values():  # as the recovered CommitLog has them
            bq.truncate_dirty(self.commitlog.max_offset)
            bq.correct_min_offset(self.commitlog.min_offset)
        self.recovery_report.seconds = time.monotonic() - started
        if self.recovery_report.moved_data():
            # the checkpoint then says where the data now is (else it stays as it was)
            self.flusher.note_data_moved()
        if self.recovery_report.did_something():
            log.warning("%s: %s", self.root, self.recovery_report.summary())
        if (
            may_follow
            and self.dledger is None
            and self.rocksdb_cq is None
            and self.last_exit_ok
            and not any(cq.mem for cq in self.consume_queues.values())
        ):
            # A clean store that no one writes now, whose files say all there is: it is
            # followed too, should a writer start later (nothing changes until then).
            from .live.follower import Follower

            self.follower = Follower(self)
            self.follower.attach()

    def commitlog_file_of(self, offset: int) -> str:
        """The path (under the store root) of the CommitLog file that holds ``offset`` (bytes),
        by the store's ``mappedFileSizeCommitLog``, for messages naming a record's place."""
        size = self.commitlog.files.file_size or self.config.mapped_file_size_commit_log
        return "commitlog/" + offset_to_file_name(offset - offset % size)

    @property
    def cq_file_size(self) -> int:
        """The size of this store's ConsumeQueue files (``mappedFileSizeConsumeQueue``, as
        the files say)."""
        return self._cq_file_size

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has begun (read under the put lock: puts refuse after it)."""
        return self._closed

    def check_writable(self) -> None:
        """Raise unless this store may be written now: ReadOnlyStoreError on a read-only open;
        StoreLockedError when the store's ``lock`` file is no longer the one this store locked
        (renamed or removed while held: :meth:`engine.service.lock.StoreLock.check`). Every
        write (put, offsets, topics, groups, clean-up) asks first."""
        if self.read_only:
            raise ReadOnlyStoreError("store is read-only")
        held = self._lock or self._held_lock
        if held is not None:
            held.check()

    @property
    def sync_flush(self) -> bool:
        """``flushDiskType == SYNC_FLUSH``."""
        return self.config.flush_disk_type == "SYNC_FLUSH"

    # ------------------------------------------------------------------------------------------
    # lock, open, recovery

    def _take_lock(self) -> None:
        if self._held_lock is None:
            self._lock = take_store_lock(self.root)

    def _load_consume_queues(self, progress: workprogress.ProgressFactory | None = None) -> None:
        """Open every ``consumequeue/<topic>/<queueId>`` and recover it (``ConsumeQueue.recover``).

        The file size comes from the files: the most common size among files that are not the
        newest of their queue (those are complete), else among all files, else the config.
        ``progress``: a progress factory; one bar, "loading ConsumeQueues", of the queues.
        """
        base = os.path.join(self.root, "consumequeue")
        src = self.source
        if rocksdb_consume_queue(self.root, src):
            if not src.local:
                raise UnsupportedLayoutError(
                    f"store {self.root}: RocksDB ConsumeQueues in object storage are not read "
                    "in place; download the snapshot first (rmqfs snapshot-download)"
                )
            self._load_rocksdb_consume_queues(base, progress)
            return
        if not src.isdir(base):
            return
        queues = []
        for topic in sorted(src.listdir(base)):
            tdir = os.path.join(base, topic)
            if not src.isdir(tdir):
                continue
            problem = topic_path_problem(topic)
            if problem is not None:
                self.skip_topic(topic, f"consumequeue/ directory: {problem}")
                continue
            for qname in sorted(src.listdir(tdir)):
                if queue_dir_id(qname) is None or not src.isdir(os.path.join(tdir, qname)):
                    continue  # "007" or a file: not a queue (verify warns)
                queues.append((topic, int(qname), os.path.join(tdir, qname)))
        size, trusted = cq_store_file_size([qdir for _, _, qdir in queues], src)
        if size:
            self._cq_file_size = size
        bar = workprogress.bar(progress, len(queues), "loading ConsumeQueues", "queue")
        try:
            for topic, q, qdir in queues:
                cq = ConsumeQueue(
                    qdir,
                    topic,
                    q,
                    self._cq_file_size,
                    self.read_only,
                    trusted_size=trusted,
                    source=src,
                )
                cq.recover()
                for what in cq.files.repairs:
                    log.warning("ConsumeQueue %s/%d: %s", topic, q, what)
                    self.repairs.append(f"consumequeue/{topic}/{q}: {what}")
                self.consume_queues[(topic, q)] = cq
                bar.update(1)
        finally:
            bar.close()

    def _load_rocksdb_consume_queues(
        self, base: str, progress: workprogress.ProgressFactory | None = None
    ) -> None:
        """Open the RocksDB ConsumeQueues in ``base`` read-only and each queue of its offset
        table (``RocksDBConsumeQueueStore.load``); a writer was refused by check_layout."""
        self.rocksdb_cq = db = RocksDBConsumeQueues(base)
        queues = [(t, q) for t, qids in db.queues().items() for q in qids]
        bar = workprogress.bar(progress, len(queues), "loading ConsumeQueues", "queue")
        try:
            for topic, q in queues:
                problem = topic_path_problem(topic)
                if problem is not None:
                    self.skip_topic(topic, f"RocksDB ConsumeQueue: {problem}")
                    continue
                cq = RocksDBConsumeQueue(db, topic, q)
                cq.recover()
                if cq.damage is not None:  # this queue's alone: the others open
                    self.note_damage(topic, q, None, cq.damage)
                self.consume_queues[(topic, q)] = cq
                bar.update(1)
        finally:
            bar.close()

    def _load_batch_queues(self) -> None:
        """Open every ``batchconsumequeue/<topic>/<queueId>`` (a BatchCQ topic's queues,
        :class:`engine.format.batchcq.BatchConsumeQueue`), read-only: a store that has them
        refuses writers (``storetree.check_layout``)."""
        base = os.path.join(self.root, BATCH_CQ_DIR)
        if not self.source.local:
            if self.source.isdir(base):
                raise UnsupportedLayoutError(
                    f"store {self.root}: BatchConsumeQueues in object storage are not read in "
                    "place; download the snapshot first (rmqfs snapshot-download)"
                )
            return
        if not os.path.isdir(base):
            return
        for topic in sorted(os.listdir(base)):
            tdir = os.path.join(base, topic)
            if not os.path.isdir(tdir) or os.path.islink(tdir):
                continue
            problem = topic_path_problem(topic)
            if problem is not None:
                self.skip_topic(topic, f"{BATCH_CQ_DIR}/ directory: {problem}")
                continue
            for qname in sorted(os.listdir(tdir)):
                qdir = os.path.join(tdir, qname)
                if queue_dir_id(qname) is None or not os.path.isdir(qdir):
                    continue
                try:
                    bq = BatchConsumeQueue(qdir, topic, int(qname))
                except (CorruptRecordError, ValueError) as exc:
                    self.repairs.append(f"{BATCH_CQ_DIR}/{topic}/{qname}: {exc}; not shown")
                    log.warning("%s/%s/%s: %s", BATCH_CQ_DIR, topic, qname, exc)
                    continue
                self.batch_queues[(topic, int(qname))] = bq
                self.batch_cq_topics.add(topic)

    def consume_queue(self, topic: str, queue_id: int) -> QueueReader | None:
        """The queue's reader (``ConsumeQueueInterface``: its ConsumeQueue, a RocksDB store's
        RocksDBConsumeQueue, a BatchCQ topic's BatchConsumeQueue, which reads as one: a unit per
        message), or None when it has never had a message."""
        cq: QueueReader | None = self.consume_queues.get((topic, queue_id))
        if cq is None and self.batch_queues:
            return self.batch_queues.get((topic, queue_id))
        return cq

    def all_queues(self) -> list[tuple[tuple[str, int], QueueReader]]:
        """``[((topic, queueId), queue)]`` of the ConsumeQueues and BatchConsumeQueues."""
        return [*self.consume_queues.items(), *self.batch_queues.items()]

    def file_queues(self) -> list[tuple[tuple[str, int], ConsumeQueue]]:
        """``[((topic, queueId), queue)]`` of the queues kept in ConsumeQueue files: every one of
        :attr:`consume_queues` but in a RocksDB store, which has none (its writers, follower and
        snapshots are refused). What works on the files themselves (retention's deletes, a
        snapshot's copies, the follower's reads of what a writer appended) takes these; a reader
        takes :meth:`consume_queue`."""
        return [(k, q) for k, q in list(self.consume_queues.items()) if isinstance(q, ConsumeQueue)]

    def file_queue(self, key: tuple[str, int]) -> ConsumeQueue | None:
        """The queue ``key`` (``(topic, queueId)``) of :meth:`file_queues`, or None."""
        q = self.consume_queues.get(key)
        return q if isinstance(q, ConsumeQueue) else None

    def writable_consume_queue(
        self, topic: str, queue_id: int
    ) -> ConsumeQueue | RocksDBConsumeQueue:
        """The queue's ConsumeQueue, a new empty one when it has none yet (the dispatch of
        its first unit; caller holds the put lock). A RocksDB store's queue (its read-only
        recovery's dispatch) holds the units it is given in memory."""
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            qdir = os.path.join(self.root, "consumequeue", topic, str(queue_id))
            cq = ConsumeQueue(
                qdir, topic, queue_id, self._cq_file_size, self.read_only, source=self.source
            )
            self.consume_queues[(topic, queue_id)] = cq
        return cq

    # ------------------------------------------------------------------------------------------
    # topics and queues

    def _queue_ids_of(self, topic: str) -> set[int]:
        """The ids of ``topic``'s ConsumeQueues and BatchConsumeQueues (QueueTable.topics)."""
        out: set[int] = set()
        for table in (self.consume_queues, self.batch_queues):
            if isinstance(table, QueueTable):
                out |= table.topics.get(topic, set())
            else:
                out.update(q for t, q in table if t == topic)
        return out

    def topic_names(self) -> list[str]:
        """Every topic: from topics.json and from the ConsumeQueues, sorted."""
        names = set(self.topic_config.topics)
        for table in (self.consume_queues, self.batch_queues):
            if isinstance(table, QueueTable):
                names.update(table.topics)
            else:
                names.update(t for t, _q in table)
        return sorted(names)

    def has_topic(self, name: str) -> bool:
        """Whether ``name`` is one of :meth:`topic_names` (in topics.json or with a queue), at
        the cost of that topic's queues, not of listing every topic."""
        return name in self.topic_config.topics or bool(self._queue_ids_of(name))

    def create_topic(
        self, name: str, queue_nums: int | None = None, perm: int = PERM_READ | PERM_WRITE
    ) -> TopicConfig:
        """Create a topic (or return the existing one) and persist topics.json.

        Raises InvalidNameError for a name RocketMQ would refuse, or an LMQ's
        (:func:`~engine.service.validation.check_not_lmq`); ReadOnlyStoreError. Like
        the broker's ``TopicConfigManager`` it makes system topics too: a client's request
        is refused those at its boundary (``validation.check_topic_creatable``).
        """
        validate_topic_name(name)
        check_not_lmq(name)
        self.check_writable()
        existing = self.topic_config.get(name)
        if existing is not None:
            return existing
        n = validate_queue_nums(
            self.config.default_topic_queue_nums if queue_nums is None else queue_nums
        )
        cfg = TopicConfig(name, n, n, perm)
        self.topic_config.put(cfg)
        return cfg

    def update_topic(
        self,
        name: str,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        order: bool | None = None,
        topic_sys_flag: int | None = None,
        create: bool = True,
    ) -> TopicConfig:
        """``updateTopic`` (``AdminBrokerProcessor.updateAndCreateTopic`` ->
        ``TopicConfigManager.updateTopicConfig``): set the given fields of a topic's entry in
        topics.json (creating the topic with ``defaultTopicQueueNums`` queues when missing,
        unless ``create`` is False) and persist atomically. Fields not given keep their values;
        a caller that replaces the entry as mqadmin's whole ``TopicConfig`` does gives them all
        (mount/admin.py). ``topic_sys_flag``: ``TopicSysFlag`` bits (0 or more).

        Raises InvalidNameError (a bad name or an LMQ's, queue count outside 1-1024, perm
        not 2/4/6),
        SystemTopicError (a system topic: ``validateSystemTopicWhenUpdateTopic``),
        NoSuchTopicError (``create`` False and no such topic, checked under the lock
        :meth:`delete_topic` takes: a deleted topic never comes back), ReadOnlyStoreError.
        """
        from .service.validation import is_system_topic

        validate_topic_name(name)
        check_not_lmq(name)
        if is_system_topic(name):
            raise SystemTopicError(
                f"the topic {name} is a RocketMQ system topic (the broker "
                "refuses: conflict with system topic)"
            )
        self.check_writable()
        for what, n in (("readQueueNums", read_queue_nums), ("writeQueueNums", write_queue_nums)):
            if n is not None:
                try:
                    validate_queue_nums(n)
                except InvalidNameError:
                    raise InvalidNameError(f"{what} {n!r}: use 1-1024") from None
        if topic_sys_flag is not None and not 0 <= topic_sys_flag < 1 << 31:
            raise InvalidNameError(f"topicSysFlag {topic_sys_flag!r}: use 0..2^31-1")
        if perm is not None and (isinstance(perm, bool) or perm not in (2, 4, 6)):
            raise InvalidNameError(f"perm {perm!r}: use 2 (write), 4 (read) or 6 (read and write)")
        with self.put_lock:
            if not create and not self.has_topic(name):
                raise NoSuchTopicError(f"topic {name} does not exist")
            old = self.topic_config.get(name)
            if old is None:
                n = self.config.default_topic_queue_nums
                old = TopicConfig(name, n, n)
            cfg = TopicConfig(**{**old.__dict__, "attributes": dict(old.attributes)})
            if read_queue_nums is not None:
                cfg.read_queue_nums = read_queue_nums
            if write_queue_nums is not None:
                cfg.write_queue_nums = write_queue_nums
            if perm is not None:
                cfg.perm = perm
            if order is not None:
                cfg.order = bool(order)
            if topic_sys_flag is not None:
                cfg.topic_sys_flag = topic_sys_flag
            self.topic_config.put(cfg)
            return cfg

    def delete_topic(self, name: str) -> dict:
        """``deleteTopic`` (``AdminBrokerProcessor.deleteTopicInBroker``): remove the topic's
        entry from topics.json, its consumer offsets (``cleanOffsetByTopic``: every
        ``topic@group`` key) and its ConsumeQueues (``DefaultMessageStore.deleteTopics``:
        ``consumequeue/<topic>/`` removed). Its CommitLog records stay until they expire.

        The deletion is remembered with the CommitLog's end (:class:`config.DeletedTopics`)
        before the queues are removed, so no recovery or rebuild dispatches the old records
        again, and each step can be redone: a crash in between leaves a topic that a second
        delete finishes. The offsets go first, taking only their own lock (a snapshot takes
        it before the put lock: never the other way round).

        With ``clearRetryTopicWhenDeleteTopic`` (on by default, as in RocketMQ 5.x
        ``AdminBrokerProcessor.deleteTopic``) the POP retry topics of every group that had
        offsets on it (``%RETRY%<group>+<topic>`` and ``%RETRY%<group>_<topic>``) go too.

        Returns ``{"topic", "queues": [ids removed], "offsets": [keys removed],
        "commitLogOffset": where the deletion stands, "retryTopics": [the same for each retry
        topic removed]}``. Raises NoSuchTopicError, SystemTopicError
        (``validateSystemTopicWhenUpdateTopic``), ReadOnlyStoreError.
        """
        from .service.validation import is_system_topic

        self.check_writable()
        if is_system_topic(name):
            raise SystemTopicError(
                f"the topic {name} is a RocketMQ system topic and cannot "
                "be deleted (the broker refuses: conflict with system topic)"
            )
        with self._topic_lock:  # no commit checks the topic and lands after its cleanup
            out = self._delete_topic(name)
            retry: list[dict] = []
            if self.config.clear_retry_topic_when_delete_topic:
                # clearRetryTopicWhenDeleteTopic: the POP retry topics of each group that had
                # offsets on it (KeyBuilder.buildPopRetryTopic V2 "+", V1 "_"), when they exist
                for group in dict.fromkeys(
                    k.split(TOPIC_GROUP_SEPARATOR, 1)[1] for k in out["offsets"]
                ):
                    for sep in ("+", "_"):
                        pop = f"{RETRY_GROUP_TOPIC_PREFIX}{group}{sep}{name}"
                        if self.has_topic(pop):
                            retry.append(self._delete_topic(pop))
            out["retryTopics"] = retry
            return out

    def _delete_topic(self, name: str) -> dict:
        """:meth:`delete_topic` under the topic lock."""
        if not self.has_topic(name):
            raise NoSuchTopicError(f"topic {name} does not exist")
        # the offsets first, under their own lock alone: a snapshot holds that lock and then
        # takes the put lock (engine.live.snapshot.freeze), so taking it under the put lock
        # deadlocked the two; a crash right after leaves a topic a second delete finishes
        offsets = self.consumer_offsets.remove_topic(name)
        with self.put_lock:
            # records of the topic waiting for a SYNC_FLUSH group commit lie below ``end``
            # too: their dispatch skips them (engine.service.dispatch)
            end = self.commitlog.max_offset
            self.deleted_topics.add(name, end)
            queues = sorted(q for t, q in self.consume_queues if t == name)
            for q in queues:
                self.consume_queues.pop((name, q)).close()
                self.damaged.pop((name, q), None)
            for base in ("consumequeue", "consumequeue_ext", "batchconsumequeue"):
                tdir = os.path.join(self.root, base, name)
                if os.path.isdir(tdir) and not os.path.islink(tdir):
                    remove_tree(tdir)  # no recursion: any junk depth
                    _fsync_dir(os.path.join(self.root, base))
            self.topic_config.remove(name)
            self.putter.forget_topic(name)
            self.batch_cq_topics.discard(name)
        log.info(
            "deleted topic %s: queues %s, offsets %s; its records stay in the CommitLog "
            "below %d until they expire",
            name,
            queues,
            offsets,
            end,
        )
        return {"topic": name, "queues": queues, "offsets": offsets, "commitLogOffset": end}

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of a topic: ``range(readQueueNums)`` plus any queue with data."""
        ids = self._queue_ids_of(topic)
        cfg = self.topic_config.get(topic)
        if cfg is not None:
            ids.update(range(cfg.shown_queue_nums))
        return sorted(ids)

    def read_queue_nums(self, topic: str) -> int | None:
        """The topic's ``readQueueNums`` (:attr:`TopicConfig.consumed_queue_nums`: the queues
        consumers read), None for a topic without a config in topics.json."""
        cfg = self.topic_config.get(topic)
        return None if cfg is None else cfg.consumed_queue_nums

    def queue_max_offsets(self, topic: str) -> dict[int, int]:
        """``{queueId: maxOffset}`` of a topic's queues, as one consistent cut.

        Taken under the put lock, so a put is either wholly in the cut or not at all; merging
        the queues up to these offsets by CommitLog offset gives CommitLog order.
        """
        with self.put_lock:  # (the topic's queues, not a walk of every queue)
            return {
                q: cq.max_offset
                for q in sorted(self._queue_ids_of(topic))
                if (cq := self.consume_queue(topic, q)) is not None
            }

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """``getOffsetInQueueByTime`` (LOWER): first queue offset stored at or after
        ``timestamp`` (epoch ms); ``maxOffset`` when every message is older.
        """
        cq = self.consume_queue(topic, queue_id)
        if cq is None:
            return 0
        cl = self.commitlog

        def stored_at(off: int, size: int) -> int:
            # a unit whose record expiry deleted (the queue's min offset not moved yet) counts
            # as older than any time, as units below getMinPhyOffset do in the broker's search
            if off < cl.min_offset:
                return -1
            try:
                return cl.read_message(off, size).store_timestamp
            except CorruptRecordError:
                if off < cl.min_offset:  # deleted while it was read
                    return -1
                raise

        return cq.offset_by_time(timestamp, stored_at)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """``getMinOffsetInQueue``: first queue offset still readable."""
        cq = self.consume_queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int, committed: bool = True) -> int:
        """``getMaxOffsetInQueue``: one past the last queue offset.

        ``committed`` False counts the offsets already assigned to puts whose units are not
        dispatched yet (SYNC_FLUSH waiting for its flush), like RocketMQ's
        ``getMaxOffsetInQueue(topic, queueId, false)``.
        """
        if not committed:
            n = self.putter.assigned_offset(topic, queue_id)
            if n is not None:
                return n
        cq = self.consume_queue(topic, queue_id)
        return cq.max_offset if cq else 0

    # ------------------------------------------------------------------------------------------
    # reading

    def read_record(
        self,
        commitlog_offset: int,
        size: int,
        *,
        topic: str | None = None,
        queue_id: int | None = None,
        queue_offset: int | None = None,
    ) -> MessageRecord:
        """Decode the record at a CommitLog offset, its body CRC checked
        (:func:`engine.format.message.check_body_crc`). Raises CorruptRecordError; a body CRC
        mismatch is also noted as damage of the record's queue (:meth:`note_damage`).

        ``topic``, ``queue_id``, ``queue_offset``: the ConsumeQueue unit the offset and size
        come from; the record must then be that unit's (its QUEUEID and QUEUEOFFSET:
        :func:`engine.format.message.check_unit_record`), and any damage is noted as the
        queue's."""
        try:
            if queue_id is not None and queue_offset is not None:
                hit = self.inner_batches.message(
                    commitlog_offset, size, queue_id, queue_offset, topic
                )
                if hit is not None:  # a batch record read, checked and split already
                    return hit
            rec = self.commitlog.read_message(commitlog_offset, size)
            if queue_id is not None and queue_offset is not None:
                unit_message(rec, queue_id, queue_offset, topic)
        except CorruptRecordError as exc:
            if topic is not None and queue_id is not None:
                self.note_damage(topic, queue_id, queue_offset, exc)
            raise
        if topic is not None and queue_id is not None:
            try:
                rec = check_body_crc(rec)
                if queue_offset is not None:  # an inner batch's message: the one asked for
                    rec = unit_message(rec, queue_id, queue_offset, topic, self.inner_batches)
                return rec
            except CorruptRecordError as exc:
                self.note_damage(topic, queue_id, queue_offset, exc)
                raise
        return self._checked(rec)

    def _checked(self, rec: MessageRecord, queue_offset: int | None = None) -> MessageRecord:
        """``rec`` when its body matches BODYCRC; else note the damage of its queue and raise
        CorruptRecordError (``MessageDecoder.decode(..., checkCRC=true)``)."""
        try:
            return check_body_crc(rec)
        except CorruptRecordError as exc:
            self.note_damage(
                rec.topic,
                rec.queue_id,
                rec.queue_offset if queue_offset is None else queue_offset,
                exc,
            )
            raise

    def _store_timestamp_at(self, commitlog_offset: int) -> int | None:
        # the IndexFile cut's endTimestamp (IndexService.truncate): None where no record is
        try:
            rec = self.message_at(commitlog_offset)
        except CorruptRecordError:
            return None
        return rec.store_timestamp if rec is not None else None

    def message_at(self, commitlog_offset: int) -> MessageRecord | None:
        """The record starting at a CommitLog offset, or None when none starts there.

        Only a head that can be a record's is read further: a record magic and a TOTALSIZE
        from the smallest record to maxMessageSize + 64 KiB (the largest a broker writes),
        ending in the CommitLog; an offset inside another record (a msgId naming one, made up
        or of another store) costs 8 bytes read, not the gigabyte its bytes might claim.

        A record that starts there but whose body fails its CRC is damage, not a miss: it is
        noted (:meth:`note_damage`) and CorruptRecordError raised."""
        cl = self.commitlog
        if not cl.min_offset <= commitlog_offset < cl.max_offset:
            return None
        head = cl.files.read(commitlog_offset, RECORD_HEAD.size)
        if len(head) < RECORD_HEAD.size:
            return None
        size, magic = RECORD_HEAD.unpack(head)
        if (
            not is_record_magic(magic)
            or not MIN_RECORD_SIZE <= size <= self.config.max_message_size + RECORD_SLACK
            or commitlog_offset + size > cl.max_offset
        ):
            return None
        try:
            rec = cl.read_message(commitlog_offset, size)
        except CorruptRecordError:
            return None
        return self._checked(rec) if rec.commitlog_offset == commitlog_offset else None

    def look_message_by_offset_msg_id(self, msg_id: str) -> MessageRecord | None:
        """The message an offset msgId names (32 or 56 hex digits: store host, port and
        CommitLog offset; ``MessageDecoder.decodeMessageId`` then
        ``DefaultMessageStore.lookMessageByOffset``), or None: not such a string, no record
        at that offset, or the record there has another msgId (another store host). Case
        does not matter; whitespace is not stripped.

        Raises CorruptRecordError as :meth:`message_at` does (damage is not a miss).
        """
        from .format.message import decode_offset_msg_id

        try:
            _, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            return None
        rec = self.message_at(offset)
        if rec is None or rec.msg_id != msg_id.upper() or not self.is_record_boundary(rec):
            return None
        return rec

    def is_record_boundary(self, rec: MessageRecord) -> bool:
        """Whether the store's own structures vouch that ``rec`` (decoded at
        ``rec.commitlog_offset``) is a record the CommitLog holds, not bytes inside another
        record's body that happen to form one (a ``produce.jsonl`` body can be a whole record,
        CRC and PHYSICALOFFSET right, for a topic its writer may not produce to; RocketMQ's
        ``lookMessageByOffset`` trusts the offset as it is).

        The ConsumeQueue unit at the record's own ``(topic, queueId, queueOffset)`` decides
        when that queue holds the offset (``CommitLogDispatcherBuildConsumeQueue`` made it):
        it must name this offset and size. Otherwise (a prepared transaction message, which
        no queue gets, a rollback record (no unit, no item: not served), or units already
        expired) an IndexFile item under the record's
        UNIQ_KEY or one of its KEYS must point at the offset (``CommitLogDispatcherBuildIndex``).
        """
        from .format.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, transaction_type

        cq = self.consume_queue(rec.topic, rec.queue_id)
        dispatched = transaction_type(rec.sys_flag) in (
            TRANSACTION_NOT_TYPE,
            TRANSACTION_COMMIT_TYPE,
        )
        if cq is not None and dispatched:
            try:
                off, size, _ = cq.unit(rec.queue_offset)
            except IndexError:
                pass
            else:
                return off == rec.commitlog_offset and size == rec.store_size
        if self.index_service is None:
            return False
        # an item keeps its time in whole seconds from the file's beginTimestamp
        lo, hi = rec.store_timestamp - 1000, rec.store_timestamp + 1000
        for key in dict.fromkeys(k for k in (rec.uniq_key, *rec.keys) if k):
            if rec.commitlog_offset in self.index_service.query(rec.topic, key, begin=lo, end=hi):
                return True
        return False

    def query_by_key(
        self, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = 2**63 - 1
    ) -> list[MessageRecord]:
        """Messages of ``topic`` one of whose KEYS equals ``key``, via the IndexFiles.

        Like ``queryMsgByKey`` (``queryMessage`` with ``isUniqKey`` false: a record is kept
        when its KEYS hold the key, ``MQAdminImpl.queryMessage``; a UNIQ_KEY is looked up by
        :meth:`look_messages_by_uniq_key`): at most ``max_num`` (capped at 64), store time
        within ``[begin, end]`` (epoch ms), newest first; hash collisions are filtered out
        here. Raises CorruptRecordError when a found record fails its body CRC
        (:meth:`message_at`).
        """
        return self._indexed(topic, key, max_num, begin, end, lambda r: key in r.keys)

    def _indexed(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin: int,
        end: int,
        match: Callable[[MessageRecord], bool],
    ) -> list[MessageRecord]:
        """The records of ``topic`` the IndexFiles hold under ``key`` (newest first, at most
        ``max_num``, stored within ``[begin, end]``) that ``match`` (a hit is only a hash's)."""
        if self.index_service is None:
            return []
        out = []
        for off in self.index_service.query(topic, key, max_num, begin, end):
            rec = self.message_at(off)
            if rec is not None and rec.topic == topic and match(rec):
                out.append(rec)
        return out

    def look_messages_by_uniq_key(
        self, uniq_key: str, topic: str | None = None, max_num: int = 64
    ) -> list[MessageRecord]:
        """Messages whose ``UNIQ_KEY`` property equals ``uniq_key``: the msgId a client has
        (``SendResult.getMsgId()``, ``MessageClientIDSetter``), found through the IndexFiles
        under ``topic#UNIQ_KEY`` like ``MQAdminImpl.queryMessageByUniqKey``. ``topic`` None
        searches every topic. An index hit is only a hash match: each record is read and kept
        only when its UNIQ_KEY really is ``uniq_key`` (exact, case included). Newest first
        per topic, at most ``max_num`` per topic (a retried send can store one id twice).

        Raises CorruptRecordError as :meth:`query_by_key` does.
        """
        topics = [topic] if topic is not None else self.topic_names()
        out = []
        for t in topics:
            out += self._indexed(
                t, uniq_key, max_num, 0, 2**63 - 1, lambda r: r.uniq_key == uniq_key
            )
        return out

    def get_message(self, topic: str, queue_id: int, queue_offset: int) -> MessageRecord:
        """The message at a queue offset. Raises OffsetOutOfRangeError (also when its record
        expired while it was being read) / NoSuchTopicError, and CorruptRecordError (noted as
        damage of the queue) when the unit points at no record, at one whose body fails its
        CRC, or at another unit's record (its QUEUEID or QUEUEOFFSET not the unit's:
        :func:`engine.format.message.check_unit_record`)."""
        cq = self.consume_queue(topic, queue_id)
        if cq is None:
            raise NoSuchTopicError(f"no queue {topic}/{queue_id}")
        if not cq.min_offset <= queue_offset < cq.max_offset:
            raise OffsetOutOfRangeError(
                f"offset {queue_offset} outside [{cq.min_offset}, {cq.max_offset})"
            )
        off, size, _ = cq.unit(queue_offset)
        try:
            hit = self.inner_batches.message(off, size, queue_id, queue_offset, topic)
            if hit is not None:  # a batch record read, checked and split already
                return hit
            rec = check_body_crc(self.commitlog.read_message(off, size))
            return unit_message(rec, queue_id, queue_offset, topic, self.inner_batches)
        except CorruptRecordError as exc:
            cl_min = self.commitlog.min_offset
            if off < cl_min:
                # not damage: retention (or a followed writer's) deleted the record's file
                # after the unit was read (getMessage's OFFSET_TOO_SMALL); the queue's minOffset
                # follows now (correctMinOffset), so that a reader asking again for the queue's
                # first message finds one (a follower corrects it only once its refresh that
                # saw the CommitLog's files go has got to this queue)
                cq.correct_min_offset(cl_min)
                raise OffsetOutOfRangeError(
                    f"offset {queue_offset}: its record expired while being read (the "
                    f"CommitLog starts at {self.commitlog.min_offset} now)"
                ) from exc
            self.note_damage(topic, queue_id, queue_offset, exc)
            raise

    def skip_topic(self, topic: str, reason: str) -> None:
        """Remember (for status.json) and log, once per topic, a topic the store holds that
        cannot be shown (a name unsafe as a path)."""
        if topic not in self._skipped_topics and len(self._skipped_topics) < 10_000:
            self._skipped_topics[topic] = reason
            log.warning("topic %r skipped: %s", topic, reason)

    def skipped_topics(self) -> list[dict]:
        """``[{"topic", "reason"}]``: every topic found in the store (topics.json, a
        consumequeue/ directory, a record) that is not shown because its name is unsafe as a
        path (``config.topic_path_problem``), sorted by name. A broker would load the
        others, so they are all shown, whatever the client's rule for creating one."""
        out = {t: f"topics.json: {r}" for t, r in self.topic_config.skip_reasons.items()}
        for t, r in self._skipped_topics.items():
            out[t] = f"{out[t]}; {r}" if t in out else r
        return [{"topic": t, "reason": r} for t, r in sorted(out.items())]

    def note_repair(self, line: str) -> bool:
        """Add ``line`` (``"<path>: <what>"``) to :attr:`repairs` (status.json ``repairs``, the
        recovery report's) unless a line for the same path is there; returns whether it was
        added (the caller logs it then)."""
        path = line.split(":", 1)[0] + ":"
        if any(r.startswith(path) for r in self.repairs) or len(self.repairs) >= 10_000:
            return False
        self.repairs.append(line)
        return True

    def note_timer_damage(self, what: str) -> None:
        """Remember (status.json ``timerDamage``) and log, once per open, damage a read found
        in the 5.x timer store (``timerwheel``, ``timerlog/``, ``config/timercheck`` or a
        record they name): ``scheduled.jsonl`` fails with EIO while it lasts, and ``recover``
        does not rebuild it (what to do is said here)."""
        if self.timer_damage is None:
            self.timer_damage = what
            log.warning(
                "timer store damaged: %s (scheduled.jsonl fails with EIO; rmqfs verify names "
                "it; rmqfs recover does not rebuild it: restore timerwheel, timerlog/ and "
                "config/timercheck from a backup)",
                what,
            )

    def note_damage(
        self, topic: str, queue_id: int, queue_offset: int | None, exc: Exception | str
    ) -> None:
        """Remember (for status.json ``damagedQueues``) and log, once per queue, damage a read
        found: a unit that reads no record, or a record whose body fails its CRC. ``exc``
        (the CorruptRecordError, or its text) names the CommitLog offset.

        Every read path that meets damage calls this, whichever layer it is in (the engine's
        reads, the mount's rendered views and view/ parts); the log gets one warning line,
        never a traceback."""
        if (topic, queue_id) not in self.damaged and len(self.damaged) < 10_000:
            what = str(exc) if queue_offset is None else f"unit {queue_offset}: {exc}"
            self.damaged[(topic, queue_id)] = what
            # (recover writes only what a writer may open: not a DLedger, RocksDB or controller
            # layout, nor a snapshot in object storage)
            repairable = self.source.local and not any(f.refuses_write for f in self.foreign)
            log.warning(
                "queue %s/%d damaged: %s (not served; rmqfs verify names it%s)",
                topic,
                queue_id,
                what,
                ", rmqfs recover repairs it" if repairable else "",
            )

    def iter_queue(
        self, topic: str, queue_id: int, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, MessageRecord]]:
        """Yield ``(queueOffset, MessageRecord)`` for ``[start, end)`` of one queue.

        Reads ConsumeQueue units in batches and, where a batch's records lie close together in
        the CommitLog (one queue of a few), the whole span with one pread. Messages that
        expiry deletes while the iteration runs are skipped, as a consumer's pull moves to
        minOffset (``OFFSET_TOO_SMALL``). Raises CorruptRecordError for a unit that points at
        no valid record or at one whose body fails its CRC.
        """
        cq = self.consume_queue(topic, queue_id)
        if cq is None:
            return
        cl = self.commitlog
        files = cl.files
        end = cq.max_offset if end is None else min(end, cq.max_offset)
        pos = max(start, cq.min_offset)
        while pos < end:
            raw = cq.read_units(pos, min(_READ_BATCH, end - pos))
            if cq.min_offset > pos:  # expiry moved the queue's start past pos: from there
                pos = cq.min_offset
                continue
            if not raw:
                return
            units = UNIT.iter_unpack(raw)
            for group in _spans(list(units), files.file_size):
                first, last = group[0], group[-1]
                lo, hi = first[0], last[0] + last[1]
                data = files.read(lo, hi - lo)
                at = pos  # the queue offset of group[0]
                try:
                    if len(data) != hi - lo:
                        raise CorruptRecordError(
                            f"records of {hi - lo} bytes not in the CommitLog", lo
                        )
                    for off, size, _tags in group:
                        if off - lo + size > len(data):
                            raise CorruptRecordError(
                                f"record of {size} bytes not in the CommitLog", off
                            )
                        rec = check_body_crc(decode_record(data, off - lo, check_crc=False))
                        rec = unit_message(rec, queue_id, pos, topic)
                        if rec.store_size > size:
                            raise CorruptRecordError(
                                f"record of {rec.store_size} bytes, its unit says {size}", off
                            )
                        yield pos, rec
                        pos += 1
                except CorruptRecordError as exc:
                    if cq.min_offset > pos:
                        break  # expired meanwhile: the loop goes on from the queue's start
                    k = pos - at  # the CommitLog expired under units the queue still has
                    while k < len(group) and group[k][0] < cl.min_offset:
                        k += 1
                    if k > pos - at:
                        pos = at + k
                        break
                    self.note_damage(topic, queue_id, pos, exc)
                    raise

    # ------------------------------------------------------------------------------------------
    # writing (engine.service.putmessage)

    def put_messages(
        self, messages: list[Message], batch: bool = False, results: bool = True
    ) -> Sequence[PutResult]:
        """Append messages and dispatch them; all of them or none are stored.

        See :func:`engine.service.putmessage.put_messages` (validation, ``batch`` as RocketMQ's
        MessageBatch, ``results`` False to have no PutResults built where nothing needs them,
        SYNC_FLUSH group commit, and the errors raised: NoSuchTopicError,
        PermissionDeniedError, MessageIllegalError, MessageTooLargeError,
        PropertiesSizeExceededError, PutMessageError, ReadOnlyStoreError,
        FlushDiskTimeoutError, OSError with nothing of the batch kept).
        """
        return putmessage.put_messages(self, messages, batch, results)

    def touch_written(self) -> None:
        """Set to now the mtime of every file written since the last call (the CommitLog's,
        the ConsumeQueues', the IndexFiles'): a write through a shared mapping into a page
        that is dirty already moves no mtime, so a backup's quick check (rsync, restic: size
        and mtime) of the files would skip bytes written since it last looked. The flushes
        do it too (every ``flushIntervalCommitLog``); the mount's ``raw/`` asks it before it
        answers a file's attributes, so a backup sees every write acknowledged before.
        Nothing to do on a read-only store, nor when nothing was put since the last call."""
        if self.read_only:
            return
        cl = self.commitlog
        end = cl.max_offset
        if end == self._touched_end:
            return
        self._touched_end = end
        cl.touch_written(end)
        for cq in list(self.consume_queues.values()):
            cq.touch_written()
        if self.index_service is not None:
            self.index_service.touch_written()

    def check_put(self, messages: list[Message], batch: bool = False) -> None:
        """Raise what :meth:`put_messages` would raise for ``messages`` now, changing nothing
        and writing nothing (for a caller that stores them later and must answer for them
        first: the mount's unfinished ``produce.jsonl`` line at ``close()``). See
        :func:`engine.service.putmessage.check_put` (the client rules, the topic and queue, the
        delay and timer rules, the records' sizes; ENOSPC while the disk is full)."""
        putmessage.check_put(self, messages, batch)

    def put_bodies(
        self,
        topic: str,
        bodies: list[bytes],
        queue_id: int | None = None,
        results: bool = True,
        tags: str | Sequence[str | None] | None = None,
        keys: str | Sequence[str | list[str] | None] | None = None,
    ) -> Sequence[PutResult]:
        """``put_messages`` of one message per body (its topic, queue, tags and keys only), all
        or none, without building the messages (``results`` False: nor, for a batch where
        nothing needs them, the PutResults; [] then; one body is a single put, its result
        built). ``tags``: a ``str`` (or None) for every message or one per body; ``keys``: a
        ``str`` of space-separated keys for every message or one value per body (a ``str``, a
        list of keys or None). See :func:`engine.service.putmessage.put_bodies` (RocketMQ's
        ``DefaultMessageStore.putMessages``; ValueError for a column of another length than
        ``bodies``, else the errors of :meth:`put_messages`)."""
        return putmessage.put_bodies(self, topic, bodies, queue_id, results, tags, keys)

    # ------------------------------------------------------------------------------------------
    # getMessage

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        tags: str | None = None,
    ) -> GetMessageResult:
        """``DefaultMessageStore.getMessage``: up to ``max_msg_nums`` messages from a queue
        offset, with RocketMQ's status and next-offset correction (``GetMessageStatus``).

        Args:
            group: the consumer group (kept for the API; the store does not filter by it).
            topic, queue_id, offset: where to read (offset in queue units).
            max_msg_nums: the most messages to return (the broker's transfer limits of
                ``StoreConfig`` also apply: 32 messages / 256 KiB from memory).
            tags: a subscription expression, ``"TagA || TagB"``; None, ``""`` or ``"*"`` match
                all. Matching is by tagsCode (Java hash of the tag), as the broker's
                ``DefaultMessageFilter.isMatchedByConsumeQueue``; the client re-checks strings.

        Returns:
            GetMessageResult with ``status`` (GetMessageStatus), ``next_begin_offset``,
            ``min_offset``, ``max_offset`` and ``messages`` (MessageRecord list, in order).
            A batch ends before a record whose body fails its CRC (noted as damage).

        Raises:
            CorruptRecordError: the first message found fails its body CRC.
        """
        return get_messages(self, topic, queue_id, offset, max_msg_nums, parse_subscription(tags))

    # ------------------------------------------------------------------------------------------
    # consumer offsets and groups

    def commit_offset(
        self, group: str, topic: str, queue_id: int, offset: int, existing_group: bool = False
    ) -> None:
        """Commit a consumer offset (persisted atomically in consumerOffset.json):
        :meth:`commit_offsets` of one queue."""
        self.commit_offsets(group, topic, {queue_id: offset}, existing_group)

    def commit_offsets(
        self, group: str, topic: str, offsets: dict[int, int], existing_group: bool = False
    ) -> None:
        """Commit the offsets of queues of ``topic`` (``{queueId: offset}``) in one write of
        consumerOffset.json: every one is checked first, then all are stored or, on a failed
        write (ENOSPC...), none (a commit; mqadmin ``resetOffsetByTime`` of a topic).

        ``existing_group``: only for a group the store holds, checked atomically with the
        commit against :meth:`delete_group` (a descriptor of the mount opened before the
        group's ``rmdir`` must not bring it back).

        Raises OffsetOutOfRangeError outside ``[minOffset, maxOffset]``, InvalidNameError for a
        bad group name, NoSuchTopicError for an unknown queue, NoSuchGroupError (with
        ``existing_group``), ReadOnlyStoreError.
        """
        with self._topic_lock:  # the topic checked stays until the commit is written
            self._check_commit(group, topic, offsets)
            if not existing_group:
                self.consumer_offsets.commit_queues(group, topic, offsets)
                return
            with self._group_lock:
                if not self.has_group(group):
                    raise NoSuchGroupError(f"consumer group {group} was deleted")
                self.consumer_offsets.commit_queues(group, topic, offsets)

    def _check_commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        self.check_writable()
        validate_group_name(group)
        queues = self.queue_ids(topic) if self.has_topic(topic) else []
        for queue_id, offset in offsets.items():
            if queue_id not in queues:
                raise NoSuchTopicError(f"no queue {topic}/{queue_id}")
            lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
            if not lo <= offset <= hi:
                raise OffsetOutOfRangeError(
                    f"offset {offset} outside [{lo}, {hi}] of {topic}/{queue_id}"
                )

    def group_names(self) -> list[str]:
        """Groups from subscriptionGroup.json and consumerOffset.json, sorted."""
        return sorted(set(self.subscription_groups.groups) | self.consumer_offsets.groups())

    def has_group(self, group: str) -> bool:
        """Whether ``group`` is one of :meth:`group_names`, at the cost of one lookup (not of
        listing every group)."""
        return group in self.subscription_groups.groups or group in self.consumer_offsets.groups()

    def create_group(self, group: str) -> None:
        """Create a subscription group (persisted). Raises InvalidNameError."""
        self.check_writable()
        self.subscription_groups.create(group)

    def group_config(self, group: str) -> dict | None:
        """The group's ``subscriptionGroupTable`` entry (a copy), or None."""
        entry = self.subscription_groups.groups.get(group)
        return None if entry is None else dict(entry)

    def update_group(self, group: str, fields: dict) -> dict:
        """``updateSubGroup`` (``AdminBrokerProcessor.updateAndCreateSubscriptionGroup``):
        set ``fields`` (checked by :func:`engine.format.config.check_group_fields`) on the group's
        subscriptionGroup.json entry, creating it with RocketMQ's defaults when missing.
        Returns the new entry. Raises InvalidNameError, ReadOnlyStoreError."""
        from .format.config import check_group_fields

        self.check_writable()
        validate_group_name(group)
        return self.subscription_groups.update(group, check_group_fields(fields))

    def delete_group(self, group: str, remove_offset: bool = False) -> dict:
        """``deleteSubGroup`` (``AdminBrokerProcessor.deleteSubscriptionGroup``): remove the
        group's subscriptionGroup.json entry and, with ``remove_offset`` (the request's
        ``cleanOffset``, mqadmin ``-r true``), its offsets (``ConsumerOffsetManager.
        removeOffset``). Returns ``{"group", "config": bool, "offsets": [keys]}``.
        Raises NoSuchGroupError, ReadOnlyStoreError."""
        self.check_writable()
        with self._group_lock:
            if not self.has_group(group):
                raise NoSuchGroupError(f"consumer group {group} does not exist")
            had = self.subscription_groups.remove(group)
            offsets = self.consumer_offsets.remove_group(group) if remove_offset else []
        return {"group": group, "config": had, "offsets": offsets}

    def clone_group_offset(self, src: str, dest: str, topic: str) -> dict[int, int]:
        """``cloneGroupOffset`` (``ConsumerOffsetManager.cloneOffset``): ``topic@dest``
        becomes a copy of ``topic@src``. Returns the offsets copied. Raises NoSuchTopicError,
        NoSuchGroupError (src has no offsets of the topic), InvalidNameError,
        ReadOnlyStoreError."""
        self.check_writable()
        validate_group_name(dest)
        with self._topic_lock:  # (as a commit: never after the topic's deletion)
            if not self.has_topic(topic):
                raise NoSuchTopicError(f"topic {topic} does not exist")
            copied = self.consumer_offsets.clone(src, dest, topic)
        if copied is None:
            raise NoSuchGroupError(f"consumer group {src} has no offsets of {topic}")
        return copied

    # ------------------------------------------------------------------------------------------
    # flush and close (engine.service.flush)

    def flush(self, least_pages: int = 0) -> bool:
        """Force appended data to disk, then the ConsumeQueues, index and checkpoint (the
        fsync() path; :meth:`engine.service.flush.FlushService.flush`). Returns True when CommitLog data was
        synced. Raises OSError from the disk."""
        return self.flusher.flush(least_pages)

    def flush_commitlog(self) -> bool:
        """Sync the CommitLog only (:meth:`engine.service.flush.FlushService.flush_commitlog`); True if data was
        synced."""
        return self.flusher.flush_commitlog()

    def delete_expired_files(self, manual: bool = True) -> CleanReport:
        """Delete expired files now (``deleteExpiredCommitLog``; see :mod:`engine.service.cleanup`).

        ``manual``: like mqadmin's request, up to 20 runs whatever the hour and disk usage;
        otherwise one run under the usual triggers. Returns what was deleted.
        Raises ReadOnlyStoreError on a read-only store.
        """
        self.check_writable()
        if manual:
            return self.clean_service.delete_expired_files()
        return self.clean_service.run_once()

    def close(self) -> None:
        """Flush, write the checkpoint, remove ``abort`` and release the lock.

        ``abort`` stays when the flush failed or records are still undispatched
        (``dispatchBehindBytes() > 0``): the next open then recovers abnormally.
        """
        if self._closed:
            return
        if self.follower is not None:
            self.follower.stop()
        self.clean_service.shutdown()
        self.flusher.stop()
        with self.put_lock:
            self._closed = True
        clean = True
        if not self.read_only:
            try:
                self.flusher.flush()
            except OSError as exc:  # a full disk, EIO: recorded as an abnormal shutdown
                log.error("flush at close failed; the next open recovers: %s", exc)
                clean = False
            except Exception:  # recorded as an abnormal shutdown
                log.exception("flush at close failed; the next open recovers")
                clean = False
            # DefaultMessageStore.shutdown keeps ``abort`` while dispatch is behind.
            clean = clean and not self.flusher.has_pending()
        self.flusher.release_waiters()  # flushed above
        with self.put_lock:
            for d in self.dispatchers:
                if hasattr(d, "close"):
                    try:
                        d.close()
                    except OSError as exc:  # a full disk: a line, not a traceback
                        log.error(
                            "closing %s failed; the next open recovers: %s", type(d).__name__, exc
                        )
                        clean = False
                    except Exception:  # what it left unwritten, the next open dispatches again
                        log.exception("closing %s failed; the next open recovers", type(d).__name__)
                        clean = False
            if not self.read_only and clean:
                try:
                    os.unlink(self.abort_path)
                except FileNotFoundError:
                    pass
            for cq in self.consume_queues.values():
                cq.close()
            for bq in self.batch_queues.values():
                bq.close()
            if self.rocksdb_cq is not None:
                self.rocksdb_cq.close()
            self.commitlog.close()
            release_store_lock(self._lock)
            self._lock = None

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_READ_BATCH = 1024  # ConsumeQueue units read at once by iter_queue
_SPAN_MAX = 4 << 20  # at most this many CommitLog bytes in one read
_SPAN_SLACK = 4  # read a span when it is at most this many times the records' own bytes


def _spans(
    units: list[tuple[int, int, int]], file_size: int
) -> Iterator[list[tuple[int, int, int]]]:
    """Split ``(offset, size, tagsCode)`` units into runs each worth reading with one pread:
    inside one segment, at most _SPAN_MAX bytes, and not mostly other queues' records."""
    i, n = 0, len(units)
    while i < n:
        lo = units[i][0]
        seg_end = lo - lo % file_size + file_size
        own = 0
        j = i
        while j < n:
            off, size, _ = units[j]
            hi = off + size
            if (
                off < lo
                or hi > seg_end
                or hi - lo > _SPAN_MAX
                or (j > i and hi - lo > _SPAN_SLACK * (own + size))
            ):
                break
            own += size
            j += 1
        if j == i:
            j = i + 1  # a single record: read it alone
        yield units[i:j]
        i = j
