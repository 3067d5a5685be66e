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
``getConfirmOffset() == flushedWhere``). On open the store recovers like the broker (reference
section 7): it finds the last valid record, drops a torn tail, truncates ConsumeQueue units and
index items past it and re-dispatches the records the queues lack.

getMessage lives in :mod:`engine.getmessage`; flush services: :meth:`MessageStore.flush`
(FlushRealTimeService, the fsync() path) and the group-commit thread (GroupCommitService).
"""

from __future__ import annotations

import errno
import itertools
import logging
import operator
import os
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field

from .checkpoint import StoreCheckpoint
from .lock import lock_holder, release_store_lock, take_store_lock
from .cleanup import CleanReport, CleanService
from .commitlog import CommitLog
from .config import (PERM_READ, PERM_WRITE, ConsumerOffsetManager, SubscriptionGroupManager,
                     TopicConfig, TopicConfigManager, validate_group_name, validate_queue_nums,
                     validate_topic_name)
from .consumequeue import (CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue, deliver_tags_code, pack_units,
                           queue_dir_id)
from .consumequeue import store_file_size as cq_store_file_size
from .indexfile import IndexService
from .mappedfile import remove_temp_files
from .storetree import check_store_tree
from .errors import (CorruptRecordError, FlushDiskTimeoutError, MessageIllegalError,
                     MessageTooLargeError, NoSuchTopicError, OffsetOutOfRangeError,
                     PermissionDeniedError, PutMessageError, ReadOnlyStoreError,
                     StoreLockedError)
from .message import Message  # noqa: F401 - the put request; part of the store API
from .message import (COMPRESSED_FLAG, COMPRESSION_LZ4, COMPRESSION_TYPE_MASK, COMPRESSION_ZLIB,
                      COMPRESSION_ZSTD, INNER_BATCH_FLAG, MAX_MESSAGE_SIZE, PROPERTY_DELAY, PROPERTY_KEYS,
                      PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, PROPERTY_SHARDING_KEY,
                      PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_WAIT, TRANSACTION_PREPARED_TYPE,
                      TRANSACTION_ROLLBACK_TYPE, Host, MessageRecord, compress_body,
                      encode_message, host_from_str, offset_msg_id)
from .validation import check_messages, parse_decimal
from .getmessage import (GetMessageResult, GetMessageStatus,  # noqa: F401 - re-exported
                         get_messages, parse_subscription)
# The fast put path and the recovery scan (kept apart from the imports above on purpose).
from .errors import PropertiesSizeExceededError
from .javahash import java_hash_u32, key_hash_of_u32, pow31, tags_code, utf16_len
from .message import (BODY_CRC_MASK, BORNHOST_V6_FLAG, FIXED_V4, MAGIC_V1, MAGIC_V2,
                      MAX_PROPERTIES_LENGTH, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, RECORD_HEAD,
                      INT32, RECORD_SLACK, SCHEDULE_TOPIC, STOREHOSTADDRESS_V6_FLAG,
                      STORE_TIMESTAMP_END_MAX, TRANSACTION_TYPE_MASK, cal_msg_length, crc32,
                      decode_properties, decode_record, encode_blank, read_store_timestamp)
from .uniqkey import UniqKeyGenerator

log = logging.getLogger(__name__)

# Property items of the fast put path and the recovery scan, built once from message.py's names
# (MessageDecoder.messageProperties2String: name NAME_VALUE_SEPARATOR value PROPERTY_SEPARATOR).
_TAGS_ITEM = (PROPERTY_TAGS + NAME_VALUE_SEPARATOR).encode()
_KEYS_ITEM = PROPERTY_KEYS + NAME_VALUE_SEPARATOR
_SHARDING_ITEM = PROPERTY_SHARDING_KEY + NAME_VALUE_SEPARATOR
_PROPERTY_END = PROPERTY_SEPARATOR.encode()
_PROPERTY_END_BYTE = _PROPERTY_END[0]
_UNIQ_ITEM_FORMAT = (b"%s%s%s" + (PROPERTY_UNIQ_KEY + NAME_VALUE_SEPARATOR).encode()
                     + b"%s" + _PROPERTY_END)  # topic, properties length, head, UNIQ_KEY value
_UNIQ_ITEM_OVERHEAD = len(PROPERTY_UNIQ_KEY) + len(NAME_VALUE_SEPARATOR) + len(PROPERTY_SEPARATOR)
_HOSTS_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_TIME_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def read_java_properties(text: str) -> dict[str, str]:
    """Parse ``java.util.Properties`` text: ``key=value``, ``key: value`` or ``key value``;
    ``#``/``!`` comments; a line ending in an odd number of backslashes continues; escapes
    ``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>``. Later keys win."""
    lines = text.splitlines()
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        key, j, n = [], 0, len(line)
        while j < n and line[j] not in "=: \t\f":
            if line[j] == "\\" and j + 1 < n:
                key.append(line[j:j + 2])
                j += 2
                continue
            key.append(line[j])
            j += 1
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
            while j < n and line[j] in " \t\f":
                j += 1
        out[_unescape("".join(key))] = _unescape(line[j:])
    return out


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    res, j = [], 0
    while j < len(text):
        c = text[j]
        if c == "\\" and j + 1 < len(text):
            nxt = text[j + 1]
            if nxt == "u" and j + 6 <= len(text):
                try:
                    res.append(chr(int(text[j + 2:j + 6], 16)))
                    j += 6
                    continue
                except ValueError:
                    pass
            res.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            j += 2
            continue
        res.append(c)
        j += 1
    return "".join(res)


def _bool(value: str) -> bool:
    """A Java ``Boolean.parseBoolean``: "true" (any case) is True, anything else False."""
    return value.strip().lower() == "true"


_COMPRESSION_TYPES = {"LZ4": COMPRESSION_LZ4, "ZSTD": COMPRESSION_ZSTD, "ZLIB": COMPRESSION_ZLIB}


@dataclass
class StoreConfig:
    """Store settings, named after ``MessageStoreConfig``/``BrokerConfig`` keys.

    Sizes in bytes, intervals in ms. :meth:`from_broker_conf` reads a broker.conf.
    """

    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_STORE_UNIT_SIZE
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    sync_flush_timeout: int = 5000
    max_message_size: int = MAX_MESSAGE_SIZE
    check_crc_on_recover: bool = True
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    # BrokerConfig/BrokerIdentity.defaultBrokerName(): the local host name, "DEFAULT_BROKER"
    # when it cannot be had.
    broker_name: str = field(default_factory=lambda: socket.gethostname() or "DEFAULT_BROKER")
    default_topic_queue_nums: int = 4
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000
    delete_file_batch_max: int = 10
    delete_commit_log_files_interval: int = 100
    store_path_root_dir: str | None = None  # storePathRootDir, for tools given only broker.conf
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    auto_message_version_on_topic_len: bool = True
    # Producer-side compression (DefaultMQProducer.compressMsgBodyOverHowmuch, default 4096
    # there): bodies of at least this many bytes are stored compressed; -1 never compresses.
    compress_msg_body_over_howmuch: int = -1
    compress_type: str = "ZLIB"  # rocketmq.message.compressType: ZLIB, LZ4 or ZSTD
    compress_level: int = 5  # rocketmq.message.compressLevel
    # getMessage limits (MessageStoreConfig)
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    max_filter_message_size: int = 16000

    _KEYS = {
        "mappedFileSizeCommitLog": ("mapped_file_size_commit_log", int),
        "mappedFileSizeConsumeQueue": ("mapped_file_size_consume_queue", int),
        "flushDiskType": ("flush_disk_type", str),
        "flushIntervalCommitLog": ("flush_interval_commit_log", int),
        "flushCommitLogLeastPages": ("flush_commit_log_least_pages", int),
        "flushCommitLogThoroughInterval": ("flush_commit_log_thorough_interval", int),
        "syncFlushTimeout": ("sync_flush_timeout", int),
        "maxMessageSize": ("max_message_size", int),
        "checkCRCOnRecover": ("check_crc_on_recover", _bool),
        "brokerIP1": ("broker_ip1", str),
        "listenPort": ("listen_port", int),
        "brokerName": ("broker_name", str),
        "defaultTopicQueueNums": ("default_topic_queue_nums", int),
        "messageDelayLevel": ("message_delay_level", str),
        "messageIndexEnable": ("message_index_enable", _bool),
        "maxHashSlotNum": ("max_hash_slot_num", int),
        "maxIndexNum": ("max_index_num", int),
        "fileReservedTime": ("file_reserved_time", int),
        "deleteWhen": ("delete_when", str),
        "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", int),
        "diskSpaceCleanForciblyRatio": ("disk_space_clean_forcibly_ratio", float),
        "diskSpaceWarningLevelRatio": ("disk_space_warning_level_ratio", float),
        "cleanFileForciblyEnable": ("clean_file_forcibly_enable", _bool),
        "cleanResourceInterval": ("clean_resource_interval", int),
        "deleteFileBatchMax": ("delete_file_batch_max", int),
        "deleteCommitLogFilesInterval": ("delete_commit_log_files_interval", int),
        "storePathRootDir": ("store_path_root_dir", str),
        "enabledAppendPropCRC": ("enabled_append_prop_crc", _bool),
        "forceVerifyPropCRC": ("force_verify_prop_crc", _bool),
        "autoMessageVersionOnTopicLen": ("auto_message_version_on_topic_len", _bool),
        "compressMsgBodyOverHowmuch": ("compress_msg_body_over_howmuch", int),
        "compressType": ("compress_type", str),
        "compressLevel": ("compress_level", int),
        "maxTransferBytesOnMessageInMemory": ("max_transfer_bytes_on_message_in_memory", int),
        "maxTransferCountOnMessageInMemory": ("max_transfer_count_on_message_in_memory", int),
        "maxTransferBytesOnMessageInDisk": ("max_transfer_bytes_on_message_in_disk", int),
        "maxTransferCountOnMessageInDisk": ("max_transfer_count_on_message_in_disk", int),
        "accessMessageInMemoryMaxRatio": ("access_message_in_memory_max_ratio", int),
        "maxFilterMessageSize": ("max_filter_message_size", int),
    }

    @classmethod
    def from_broker_conf(cls, path: str) -> "StoreConfig":
        """Read a RocketMQ ``broker.conf`` (a Java properties file, see
        :func:`read_java_properties`) with the broker's key names.

        Unknown keys are ignored; a bad value raises ValueError naming the key.
        """
        cfg = cls()
        with open(path, encoding="utf-8") as f:
            props = read_java_properties(f.read())
        for key, value in props.items():
            if key in cls._KEYS:
                attr, conv = cls._KEYS[key]
                try:
                    setattr(cfg, attr, conv(value.strip()))
                except ValueError as exc:
                    raise ValueError(f"{path}: bad value for {key}: {value!r}") from exc
        if cfg.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ValueError(f"{path}: flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH")
        cfg.compress_type = cfg.compress_type.upper()
        if cfg.compress_type not in _COMPRESSION_TYPES:
            raise ValueError(f"{path}: compressType must be one of {sorted(_COMPRESSION_TYPES)}")
        return cfg

    @property
    def store_host(self) -> Host:
        """``(address bytes, port)`` of brokerIP1:listenPort (IPv4 or IPv6).

        Raises ValueError when brokerIP1 is not an IP address.
        """
        ip = self.broker_ip1.strip("[]")
        try:
            return host_from_str(f"[{ip}]:{self.listen_port}" if ":" in ip
                                 else f"{ip}:{self.listen_port}")
        except (OSError, ValueError):
            raise ValueError(f"brokerIP1 {self.broker_ip1!r} is not an IPv4 or IPv6 address") \
                from None

    def delay_level_table(self) -> dict[int, int]:
        """``{level: delay ms}`` parsed from ``messageDelayLevel`` (levels start at 1)."""
        table = {}
        for i, item in enumerate(self.message_delay_level.split(), start=1):
            table[i] = int(item[:-1]) * _TIME_UNITS[item[-1]]
        return table


@dataclass(frozen=True)
class PutResult:
    """Where a put message went: queue offset (units) and CommitLog offset/size (bytes)."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    store_timestamp: int
    msg_id: str
    uniq_key: str | None

    @classmethod
    def _fast(cls, topic, queue_id, queue_offset, commitlog_offset, size, store_timestamp,
              msg_id, uniq_key) -> "PutResult":
        """Construct without the frozen dataclass's per-field ``object.__setattr__`` calls."""
        obj = _new_object(cls)
        _set_attr(obj, "__dict__", {
            "topic": topic, "queue_id": queue_id, "queue_offset": queue_offset,
            "commitlog_offset": commitlog_offset, "size": size,
            "store_timestamp": store_timestamp, "msg_id": msg_id, "uniq_key": uniq_key})
        return obj


_new_object = object.__new__
_set_attr = object.__setattr__
_BORN_OF = operator.attrgetter("born_timestamp")
_SHORTS = [n.to_bytes(2, "big") for n in range(4096)]  # big-endian int16 of small lengths


@dataclass
class _Dispatch:
    """``DispatchRequest``: what a record contributes to the derived files."""

    topic: str
    queue_id: int
    commitlog_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: list[str] = field(default_factory=list)
    uniq_key: str | None = None
    sys_flag: int = 0


class MessageStore:
    """A RocketMQ store directory opened for reading and writing.

    Args:
        root: the store directory (``storePathRootDir``); created when missing.
        config: settings; segment sizes of existing files win over it.
        read_only: take no lock, write nothing (derived data missing on disk is rebuilt in
            memory only).
        follow: read-only only: follow a store another process writes (see
            :mod:`engine.follower`): trust the writer's files instead of recovering them and
            let :attr:`follower` advance the visible state. None (the default) follows when
            a live process holds the store's lock, and also a cleanly closed store that its
            files describe whole (normal recovery rebuilt nothing in memory), in case a
            writer starts later; a crashed store no one holds is recovered and frozen.

    Attributes:
        follower: the :class:`engine.follower.Follower` of a following store, else None.

    Raises:
        StoreLockedError: another process holds ``lock``.
        CorruptRecordError: files that cannot be a store (mixed segment sizes, ...).
    """

    def __init__(self, root: str, config: StoreConfig | None = None, read_only: bool = False,
                 follow: bool | None = None):
        self.root = os.path.abspath(root)
        self.config = config or StoreConfig()
        self.read_only = read_only
        self.put_lock = threading.RLock()
        self._closed = False
        self._lock_fd = None
        if not read_only:
            os.makedirs(self.root, exist_ok=True)
        elif not os.path.isdir(self.root):
            raise FileNotFoundError(errno.ENOENT, "no store directory", self.root)
        # Never through a link, never a FIFO or device (engine/storetree.py).
        check_store_tree(self.root)
        if not read_only:
            self._take_lock()
            for sub in ("", "config", "commitlog", "index"):
                for n in remove_temp_files(os.path.join(self.root, sub)):
                    log.warning("removed %s/%s: a file a crash left half-created", sub or ".", n)
        self.abort_path = os.path.join(self.root, "abort")
        self.checkpoint_path = os.path.join(self.root, "checkpoint")
        self.last_exit_ok = not os.path.exists(self.abort_path)
        auto_follow = follow is None
        if follow is None:
            follow = read_only and lock_holder(self.root) is not None
        self.follower = None
        self.writer_pid = None
        if follow:
            if not read_only:
                raise ValueError("only a read-only store can follow a writer")
            self.writer_pid = lock_holder(self.root)
            # the writer's abort file says it is running, not that it crashed
            self.last_exit_ok = True
        config_dir = os.path.join(self.root, "config")
        self.topic_config = TopicConfigManager(config_dir, read_only)
        self.consumer_offsets = ConsumerOffsetManager(config_dir, read_only)
        self.subscription_groups = SubscriptionGroupManager(config_dir, read_only)
        self.checkpoint = StoreCheckpoint.read(self.checkpoint_path)
        self.commitlog = CommitLog(os.path.join(self.root, "commitlog"),
                                   self.config.mapped_file_size_commit_log, read_only)
        self.commitlog.force_verify_prop_crc = self.config.force_verify_prop_crc
        self.store_host: Host = self.config.store_host
        self.uniq_keys = UniqKeyGenerator(self.store_host[0])
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_file_size = self.config.mapped_file_size_consume_queue
        self._round_robin: dict[str, int] = {}
        self._tags_cache: dict[str, tuple[bytes, int]] = {}  # TAGS -> (encoded property, tagsCode)
        self._plain_topics: dict[str, tuple] = {}  # topic -> (config, state, _plain_topic info)
        self._delay_levels = self.config.delay_level_table()
        self.dispatchers: list = []  # objects with dispatch(list[_Dispatch]) / truncate(offset)
        # What opening the store repaired, and queues whose units point at no valid record
        # (found while reading): "<path>: <what>" lines for logs and status.json.
        self.repairs: list[str] = []
        self.damaged: dict[tuple[str, int], str] = {}
        self.index_service: IndexService | None = None
        self.listeners: list = []  # callables(list[PutResult]) run after each put
        if self.config.message_index_enable:
            self.index_service = IndexService(os.path.join(self.root, "index"),
                                              self.config.max_hash_slot_num,
                                              self.config.max_index_num, read_only)
            self.index_service.load(self.last_exit_ok, self.checkpoint.index_msg_timestamp)
            self.dispatchers.append(self.index_service)
        # topicQueueTable: the next queue offset to assign, ahead of the ConsumeQueue while a
        # SYNC_FLUSH put waits for its flush (getMaxOffsetInQueue(committed=false)).
        self._queue_offsets: dict[tuple[str, int], int] = {}
        # SYNC_FLUSH: dispatches waiting for their records to be flushed, in CommitLog order.
        self._pending: list[tuple[int, list]] = []
        self._flush_lock = threading.Lock()
        self._gc_cond = threading.Condition()
        self._gc_waiters: list = []
        self._dispatched_store_timestamp = self.checkpoint.logics_msg_timestamp
        self._last_thorough_flush = time.monotonic()
        self._checkpoint_written = False
        # TopicAttributes "queue.type" = BatchCQ (5.x): served by batchconsumequeue/.
        self._batch_cq_topics = {name for name, t in self.topic_config.topics.items()
                                 if str(t.attributes.get("queue.type", "")).lower() == "batchcq"}
        self._load_consume_queues()
        if follow:
            from .follower import Follower
            self.follower = Follower(self)
            self.follower.open()
        else:
            self.recover()
            if read_only and auto_follow and self.last_exit_ok and \
                    not any(cq.mem for cq in self.consume_queues.values()):
                # A clean store that no one writes now, whose files say all there is: it is
                # followed too, should a writer start later (nothing changes until then).
                from .follower import Follower
                self.follower = Follower(self)
                self.follower.attach()
        if not read_only:
            with open(self.abort_path, "w") as f:  # 5.x writes the pid
                f.write(str(os.getpid()))
        self.disk_full = False  # set by the CleanService above diskSpaceWarningLevelRatio
        self.clean_service = CleanService(self)
        if not read_only:
            self.clean_service.start()
        self._stop_flush = threading.Event()
        self._flush_thread = None
        self._group_commit_thread = None
        if not read_only:
            self._flush_thread = threading.Thread(target=self._flush_loop, name="rmq-flush",
                                                  daemon=True)
            self._flush_thread.start()
            if self.sync_flush:
                self._group_commit_thread = threading.Thread(
                    target=self._group_commit_loop, name="rmq-group-commit", daemon=True)
                self._group_commit_thread.start()

    @property
    def sync_flush(self) -> bool:
        """``flushDiskType == SYNC_FLUSH``."""
        return self.config.flush_disk_type == "SYNC_FLUSH"

    # ------------------------------------------------------------------------------------------
    # lock, open, recovery

    def _take_lock(self) -> None:
        self._lock_fd = take_store_lock(self.root)

    def _load_consume_queues(self) -> None:
        """Open every ``consumequeue/<topic>/<queueId>`` and recover it (``ConsumeQueue.recover``).

        The file size comes from the files: the most common size among files that are not the
        newest of their queue (those are complete), else among all files, else the config.
        """
        base = os.path.join(self.root, "consumequeue")
        if not os.path.isdir(base):
            return
        queues = []
        for topic in sorted(os.listdir(base)):
            tdir = os.path.join(base, topic)
            if not os.path.isdir(tdir):
                continue
            try:
                validate_topic_name(topic)
            except PutMessageError as exc:
                log.warning("consumequeue/%s skipped: %s", topic, exc)
                continue
            for q in sorted(os.listdir(tdir)):
                if queue_dir_id(q) is None or not os.path.isdir(os.path.join(tdir, q)):
                    continue  # "007" or a file: not a queue (verify warns)
                queues.append((topic, int(q), os.path.join(tdir, q)))
        size, trusted = cq_store_file_size([qdir for _, _, qdir in queues])
        if size:
            self._cq_file_size = size
        for topic, q, qdir in queues:
            cq = ConsumeQueue(qdir, topic, q, self._cq_file_size, self.read_only,
                              trusted_size=trusted)
            cq.recover()
            for what in cq.files.repairs:
                log.warning("ConsumeQueue %s/%d: %s", topic, q, what)
                self.repairs.append(f"consumequeue/{topic}/{q}: {what}")
            self.consume_queues[(topic, q)] = cq

    def recover(self) -> None:
        """Find the end of the CommitLog and make the ConsumeQueues agree with it.

        Normal recovery (no ``abort`` file) scans from the newest record the queues point at;
        abnormal recovery starts from the segment the checkpoint vouches for
        (``isMappedFileMatchedRecover``). Either way the scan stops at the first invalid
        record, everything after it is dropped, and records the queues lack are dispatched
        (idempotently). If a queue turns out to miss older units, the scan restarts from the
        first segment.
        """
        cl = self.commitlog
        if not cl.files.segments:
            for cq in self.consume_queues.values():
                cq.truncate_to(cq.min_offset)
            cl.max_offset = cl.files.min_offset
            return
        self._check_queue_tails()
        start = self._recovery_start()
        if self.index_service is not None:
            # The IndexFiles may lag the ConsumeQueues (deleted, or dropped after a crash).
            start = max(cl.min_offset, min(start, self._record_boundary(
                self.index_service.end_phy_offset)))
        end, gap = self._scan_and_dispatch(start, full=start <= cl.min_offset)
        if gap and start > cl.min_offset:
            log.warning("a ConsumeQueue lacks older units; re-dispatching the whole CommitLog")
            end, _ = self._scan_and_dispatch(cl.min_offset, full=True)
        last, prev = self._scan_last, self._scan_prev
        if last is not None and prev is not None and \
                last.commitlog_offset + last.store_size == end and \
                self._ends_with_separator(prev) is True and \
                self._ends_with_separator(last) is False:
            # A tear inside the properties passes the size and body-CRC checks. 5.x writers
            # end a properties area with PROPERTY_SEPARATOR (\x02) (4.9.x ones do not): when
            # the record before does, the last record of the log must too.
            log.warning("CommitLog: the last record at %d is torn inside its properties; "
                        "dropped", last.commitlog_offset)
            end = last.commitlog_offset
        if cl.scan_error:
            log.warning("CommitLog: dropping a torn tail at %d: %s", end, cl.scan_error)
        for cq in self.consume_queues.values():
            cq.truncate_dirty(end)
            cq.correct_min_offset(cl.min_offset)
        for d in self.dispatchers:
            d.truncate(end)
        cl.truncate(end)
        cl.flushed_where = end

    def _ends_with_separator(self, rec: MessageRecord) -> bool | None:
        """Whether the record's properties area ends with PROPERTY_SEPARATOR; None when it is
        empty."""
        props_len = rec.store_size - cal_msg_length(rec.sys_flag, len(rec.body),
                                                    len(rec.topic.encode()), 0,
                                                    rec.magic == MAGIC_V2)
        if props_len <= 0:
            return None
        end = rec.commitlog_offset + rec.store_size
        return self.commitlog.files.read(end - 1, 1) == _PROPERTY_END

    def _check_queue_tails(self) -> None:
        """Drop trailing ConsumeQueue units that do not describe their record.

        A torn unit can look valid (offset and size intact, tagsCode half written); RocketMQ
        would keep it. Each queue's last units are compared with the CommitLog record they
        point at (start, size, queue offset, tagsCode) and dropped until one agrees; the scan
        that follows re-dispatches them. Cost: one record read per queue.
        """
        cl = self.commitlog
        for cq in self.consume_queues.values():
            while cq.max_offset > cq.min_offset:
                qoff = cq.max_offset - 1
                off, size, tc = cq.unit(qoff)
                if size == 0x7FFFFFFF:
                    break
                try:
                    rec = cl.read_message(off, size) if off >= cl.min_offset else None
                except CorruptRecordError:
                    rec = None
                if rec is not None and rec.commitlog_offset == off and \
                        rec.queue_offset == qoff and rec.topic == cq.topic and \
                        rec.queue_id == cq.queue_id and \
                        self._dispatch_of(rec).tags_code == tc:
                    break
                if rec is None and off < cl.min_offset:
                    break  # expired record: nothing to compare with
                log.warning("ConsumeQueue %s/%d: unit %d does not match the CommitLog; "
                            "dropped and rebuilt", cq.topic, cq.queue_id, qoff)
                cq.truncate_to(qoff)
                cq.files.repairs.append(f"unit {qoff} did not match the CommitLog")

    def _record_boundary(self, offset: int) -> int:
        """``offset`` when a valid record starts there, else the start of its segment."""
        cl = self.commitlog
        if offset <= cl.min_offset:
            return cl.min_offset
        try:
            size = INT32.unpack(cl.files.read(offset, 4))[0]
            cl.read_message(offset, size)
            return offset
        except (CorruptRecordError, struct.error):
            return offset - offset % cl.file_size

    def _recovery_start(self) -> int:
        cl = self.commitlog
        if self.last_exit_ok:
            last = max((cq.last_commitlog_offset for cq in self.consume_queues.values()),
                       default=-1)
            # A queue whose files had to be repaired (torn or missing file) is re-dispatched
            # from its last good unit on.
            damaged = [cq.last_commitlog_offset for cq in self.consume_queues.values()
                       if cq.files.repairs]
            if damaged:
                last = min(damaged)
                if last < cl.min_offset:
                    return cl.min_offset
            if last >= cl.min_offset:
                seg = cl.files.find(last)
                if seg is not None:
                    try:
                        size = INT32.unpack(cl.files.read(last, 4))[0]
                        cl.read_message(last, size, check_crc=True)
                        return last
                    except (CorruptRecordError, struct.error):
                        pass
            return cl.min_offset
        # Abnormal: newest segment whose first record is older than the checkpoint.
        min_ts = self.checkpoint.min_timestamp
        for seg in reversed(cl.files.segments):
            head = os.pread(seg.fd, STORE_TIMESTAMP_END_MAX, 0)
            if len(head) < STORE_TIMESTAMP_END_MAX:
                continue
            if RECORD_HEAD.unpack_from(head)[1] not in (MAGIC_V1, MAGIC_V2):
                continue
            store_ts = read_store_timestamp(head)
            if store_ts and store_ts <= min_ts:
                return seg.start
        return cl.min_offset

    def _scan_and_dispatch(self, start: int, full: bool) -> tuple[int, bool]:
        cl = self.commitlog
        batch: list[_Dispatch] = []
        gap = False
        cqs = self.consume_queues
        index = self.index_service
        # Records the ConsumeQueues and the index already hold need no decoding. The index
        # drops them (offset below its endPhyOffset); _dispatch would compare each one's unit
        # with the record (_verify_present) and change nothing when they agree. So the unit is
        # compared here, from offset, size and the tagsCode read straight from the record,
        # against units read ahead in blocks. From the first record of a queue that goes to
        # _dispatch (a unit that differs, or any other reason), every later record of that
        # queue goes there too, so a truncation and rewrite happen exactly as on the decoded
        # path. Other dispatchers see every record decoded.
        skip_known = self._recover_undecoded and all(d is index for d in self.dispatchers)
        indexed_below = index.end_phy_offset if index is not None else None
        light = self._light_unit
        pack_unit = UNIT.pack
        windows: dict = {}  # (topic, queueId) -> (first queue offset, raw units read ahead)
        dirty: set = set()  # queues with a record handed to _dispatch
        self._scan_last = self._scan_prev = None
        last = prev = None  # (buf, pos) of the last two records, decoded after the scan
        for (buf, pos, phys, _size, topic, qid, qoff, sys_flag) in cl.scan_raw(
                start, check_crc=self.config.check_crc_on_recover):
            prev, last = last, (buf, pos)
            d = None
            key = (topic, qid)
            if skip_known and (indexed_below is None or phys < indexed_below):
                if sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_PREPARED_TYPE,
                                                        TRANSACTION_ROLLBACK_TYPE):
                    continue  # no unit, and already indexed
                cq = cqs.get(key)
                if cq is not None and qoff < cq.max_offset and topic != SCHEDULE_TOPIC \
                        and not sys_flag & _HOSTS_V6:
                    size, tc, store_ts = light(buf, pos)
                    if key not in dirty:
                        if qoff < cq.min_offset:
                            continue  # not present, not written: as _dispatch does
                        w = windows.get(key)
                        if w is None or not w[0] <= qoff < w[0] + len(w[1]) // CQ_STORE_UNIT_SIZE:
                            w = windows[key] = (qoff, cq.read_units(qoff, 4096))
                        i = (qoff - w[0]) * CQ_STORE_UNIT_SIZE
                        if w[1][i:i + CQ_STORE_UNIT_SIZE] == pack_unit(phys, size, tc):
                            continue
                    d = _Dispatch(topic, qid, phys, size, tc, store_ts, qoff, [], None,
                                  sys_flag)
            if d is None:
                d = self._dispatch_of(decode_record(buf, pos, check_crc=False))
            dirty.add(key)
            if d is not None:
                batch.append(d)
            if len(batch) >= 4096:
                gap |= self._dispatch(batch, recovering=True, full=full)
                batch = []
        if batch:
            gap |= self._dispatch(batch, recovering=True, full=full)
        if prev is not None:
            self._scan_prev = decode_record(prev[0], prev[1], check_crc=False)
        if last is not None:
            self._scan_last = decode_record(last[0], last[1], check_crc=False)
        return cl.scan_end, gap

    _tags_codes: dict = {}  # TAGS value -> tagsCode, shared (a pure function)
    _recover_undecoded = True  # False: recovery decodes every record (tests compare the two)

    def _light_unit(self, buf, pos: int) -> tuple[int, int, int]:
        """``(size, tagsCode, storeTimestamp)`` that :meth:`_dispatch_of` gives a record with
        IPv4 hosts whose layout :meth:`CommitLog.scan_raw` checked, without decoding it
        (tagsCode from the TAGS property). Not for ``SCHEDULE_TOPIC_XXXX`` (its tagsCode is a
        deliver time)."""
        (total, magic, _, _, _, _, _, _, _, _, _, store_ts, _, _, _, _,
         body_len) = FIXED_V4.unpack_from(buf, pos)
        p = pos + FIXED_V4.size + body_len
        if magic == MAGIC_V1:
            tlen = buf[p]
            if tlen > 127:
                tlen -= 256
            p += 1 + tlen + 2
        else:
            p += 2 + int.from_bytes(buf[p:p + 2], "big", signed=True) + 2
        tc = 0
        end = pos + total
        item = _TAGS_ITEM
        at = buf.find(item, p, end)
        if at >= 0:
            # decode_properties(...).get("TAGS"), read in place: one item named TAGS (at the
            # start or after a separator) and no other occurrence; anything else is decoded.
            v = at + len(item)
            if (at == p or buf[at - 1] == _PROPERTY_END_BYTE) and buf.find(item, v, end) < 0:
                vend = buf.find(_PROPERTY_END, v, end)
                raw = bytes(buf[v:vend if vend >= 0 else end])
            else:
                tags = decode_properties(bytes(buf[p:end])).get(PROPERTY_TAGS)
                raw = tags.encode("utf-8", "surrogatepass") if tags else b""
            if raw:
                tcs = MessageStore._tags_codes
                tc = tcs.get(raw)
                if tc is None:
                    tc = tags_code(raw.decode("utf-8", errors="replace"))
                    if len(tcs) < 4096:
                        tcs[raw] = tc
        return total, tc, store_ts

    def _dispatch_of(self, rec: MessageRecord) -> _Dispatch | None:
        tc = rec.tags_code
        if rec.topic == SCHEDULE_TOPIC:
            deliver = deliver_tags_code(rec.properties.get(PROPERTY_DELAY), rec.store_timestamp,
                                        self._delay_levels)
            if deliver is not None:
                tc = deliver
        return _Dispatch(rec.topic, rec.queue_id, rec.commitlog_offset, rec.store_size, tc,
                         rec.store_timestamp, rec.queue_offset, rec.keys, rec.uniq_key,
                         rec.sys_flag)

    def _consume_queue(self, topic: str, queue_id: int, create: bool) -> ConsumeQueue | None:
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None and create:
            qdir = os.path.join(self.root, "consumequeue", topic, str(queue_id))
            cq = ConsumeQueue(qdir, topic, queue_id, self._cq_file_size, self.read_only)
            self.consume_queues[(topic, queue_id)] = cq
        return cq

    def _dispatch(self, batch: list[_Dispatch], recovering: bool = False,
                  full: bool = False) -> bool:
        """Write ConsumeQueue units (and run the dispatchers) for ``batch``.

        Returns True when a unit's queue offset lies past its queue's end (a gap).
        """
        gap = False
        per_queue: dict[tuple[str, int], list[_Dispatch]] = {}
        for d in batch:
            if d.sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
                continue
            if d.sys_flag & INNER_BATCH_FLAG or d.topic in self._batch_cq_topics:
                # BatchCQ topics dispatch to batchconsumequeue/, which is not written here;
                # a plain ConsumeQueue for them would make a broker refuse the store.
                continue
            per_queue.setdefault((d.topic, d.queue_id), []).append(d)
        for (topic, qid), items in per_queue.items():
            cq = self._consume_queue(topic, qid, create=True)
            if recovering:
                # Units already present are skipped (ConsumeQueue.putMessagePositionInfo),
                # but first compared: after a power cut a unit in the middle of what was
                # re-dispatched may be torn (a unit can straddle two pages). From the first
                # one that differs, the queue is rewritten.
                self._verify_present(cq, items)
                items = [d for d in items if d.queue_offset >= cq.max_offset]
                if not items:
                    continue
                if items[0].queue_offset > cq.max_offset:
                    if not full or cq.max_offset > cq.min_offset:
                        gap = True
                        if not full:
                            continue
                    if cq.max_offset == cq.min_offset and not cq.files.segments and not cq.mem:
                        cq.max_offset = cq.min_offset = items[0].queue_offset
                    else:
                        gap = True
                        continue
                # Units must be contiguous; stop at a hole (a later full pass fills it).
                run = [items[0]]
                for d in items[1:]:
                    if d.queue_offset != run[-1].queue_offset + 1:
                        gap = True
                        break
                    run.append(d)
                items = run
                if topic not in self.topic_config.topics:
                    self._register_topic(topic, qid)
                elif qid >= self.topic_config.topics[topic].read_queue_nums:
                    self._register_topic(topic, qid)
            units = b"".join(UNIT.pack(d.commitlog_offset, d.size, d.tags_code) for d in items)
            cq.put_units(items[0].queue_offset, units)
        for disp in self.dispatchers:
            disp.dispatch(batch)
        if batch and not recovering:
            self._dispatched_store_timestamp = batch[-1].store_timestamp
        return gap

    def _verify_present(self, cq: ConsumeQueue, items: list) -> None:
        """Truncate ``cq`` at the first unit of ``items`` (queue order) it holds differently."""
        present = [d for d in items if cq.min_offset <= d.queue_offset < cq.max_offset]
        if not present:
            return
        lo, hi = present[0].queue_offset, present[-1].queue_offset + 1
        units = {q: (off, size, tc) for q, off, size, tc in cq.iter_units(lo, hi)}
        for d in present:
            if units.get(d.queue_offset) != (d.commitlog_offset, d.size, d.tags_code):
                log.warning("ConsumeQueue %s/%d: unit %d differs from the CommitLog; "
                            "rewritten from there", cq.topic, cq.queue_id, d.queue_offset)
                cq.truncate_to(d.queue_offset)
                return

    def _register_topic(self, topic: str, queue_id: int) -> None:
        cfg = self.topic_config.get(topic)
        n = max(queue_id + 1, self.config.default_topic_queue_nums)
        if cfg is None:
            cfg = TopicConfig(topic, n, n)
        else:
            cfg = TopicConfig(**{**cfg.__dict__, "read_queue_nums": max(cfg.read_queue_nums, n),
                                 "write_queue_nums": max(cfg.write_queue_nums, n)})
        if self.read_only:
            self.topic_config.topics[topic] = cfg
        else:
            self.topic_config.put(cfg)

    # ------------------------------------------------------------------------------------------
    # topics and queues

    def topic_names(self) -> list[str]:
        """Every topic: from topics.json and from the ConsumeQueues, sorted."""
        names = set(self.topic_config.topics)
        names.update(t for t, _ in self.consume_queues)
        return sorted(names)

    def create_topic(self, name: str, queue_nums: int | None = None,
                     perm: int = PERM_READ | PERM_WRITE) -> TopicConfig:
        """Create a topic (or return the existing one) and persist topics.json.

        Raises InvalidNameError for a name RocketMQ would refuse; ReadOnlyStoreError.
        """
        validate_topic_name(name)
        if self.read_only:
            raise ReadOnlyStoreError("store is read-only")
        existing = self.topic_config.get(name)
        if existing is not None:
            return existing
        n = validate_queue_nums(self.config.default_topic_queue_nums if queue_nums is None
                                else queue_nums)
        cfg = TopicConfig(name, n, n, perm)
        self.topic_config.put(cfg)
        return cfg

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of a topic: ``range(readQueueNums)`` plus any queue with data."""
        ids = {q for t, q in self.consume_queues if t == topic}
        cfg = self.topic_config.get(topic)
        if cfg is not None:
            ids.update(range(cfg.shown_queue_nums))
        return sorted(ids)

    def queue_max_offsets(self, topic: str) -> dict[int, int]:
        """``{queueId: maxOffset}`` of a topic's queues, as one consistent cut.

        Taken under the put lock, so a put is either wholly in the cut or not at all; merging
        the queues up to these offsets by CommitLog offset gives CommitLog order.
        """
        with self.put_lock:
            return {q: cq.max_offset for (t, q), cq in list(self.consume_queues.items())
                    if t == topic}

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """``getOffsetInQueueByTime`` (LOWER): first queue offset stored at or after
        ``timestamp`` (epoch ms); ``maxOffset`` when every message is older.
        """
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            off, size, _ = cq.unit(mid)
            if self.commitlog.read_message(off, size).store_timestamp >= timestamp:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue's ConsumeQueue, or None when it has never had a message."""
        return self.consume_queues.get((topic, queue_id))

    def min_offset(self, topic: str, queue_id: int) -> int:
        """``getMinOffsetInQueue``: first queue offset still readable."""
        cq = self.consume_queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int, committed: bool = True) -> int:
        """``getMaxOffsetInQueue``: one past the last queue offset.

        ``committed`` False counts the offsets already assigned to puts whose units are not
        dispatched yet (SYNC_FLUSH waiting for its flush), like RocketMQ's
        ``getMaxOffsetInQueue(topic, queueId, false)``.
        """
        if not committed:
            n = self._queue_offsets.get((topic, queue_id))
            if n is not None:
                return n
        cq = self.consume_queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    # ------------------------------------------------------------------------------------------
    # reading

    def read_record(self, commitlog_offset: int, size: int) -> MessageRecord:
        """Decode the record at a CommitLog offset. Raises CorruptRecordError."""
        return self.commitlog.read_message(commitlog_offset, size)

    def message_at(self, commitlog_offset: int) -> MessageRecord | None:
        """The record starting at a CommitLog offset, or None when none starts there."""
        cl = self.commitlog
        if not cl.min_offset <= commitlog_offset < cl.max_offset:
            return None
        head = cl.files.read(commitlog_offset, 4)
        if len(head) < 4:
            return None
        size = INT32.unpack(head)[0]
        if size <= 0 or commitlog_offset + size > cl.max_offset:
            return None
        try:
            rec = cl.read_message(commitlog_offset, size)
        except CorruptRecordError:
            return None
        return rec if rec.commitlog_offset == commitlog_offset else None

    def query_by_key(self, topic: str, key: str, max_num: int = 64, begin: int = 0,
                     end: int = 2**63 - 1) -> list[MessageRecord]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY equal ``key``, via the IndexFiles.

        Like ``queryMsgByKey``: at most ``max_num`` (capped at 64), store time within
        ``[begin, end]`` (epoch ms), newest first; hash collisions are filtered out here.
        """
        if self.index_service is None:
            return []
        out = []
        for off in self.index_service.query(topic, key, max_num, begin, end):
            rec = self.message_at(off)
            if rec is not None and rec.topic == topic and (
                    key in rec.keys or rec.uniq_key == key):
                out.append(rec)
        return out

    def get_message(self, topic: str, queue_id: int, queue_offset: int) -> MessageRecord:
        """The message at a queue offset. Raises OffsetOutOfRangeError / NoSuchTopicError."""
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            raise NoSuchTopicError(f"no queue {topic}/{queue_id}")
        if not cq.min_offset <= queue_offset < cq.max_offset:
            raise OffsetOutOfRangeError(
                f"offset {queue_offset} outside [{cq.min_offset}, {cq.max_offset})")
        off, size, _ = cq.unit(queue_offset)
        try:
            return self.commitlog.read_message(off, size)
        except CorruptRecordError as exc:
            self.note_damage(topic, queue_id, queue_offset, exc)
            raise

    def note_damage(self, topic: str, queue_id: int, queue_offset: int, exc) -> None:
        """Remember (for status.json) and log, once per queue, a unit that reads no record."""
        if (topic, queue_id) not in self.damaged and len(self.damaged) < 10_000:
            what = f"unit {queue_offset}: {exc}"
            self.damaged[(topic, queue_id)] = what
            log.error("ConsumeQueue %s/%d damaged: %s (rmqfs recover rebuilds it)",
                      topic, queue_id, what)

    def iter_queue(self, topic: str, queue_id: int, start: int = 0, end: int | None = None):
        """Yield ``(queueOffset, MessageRecord)`` for ``[start, end)`` of one queue.

        Reads ConsumeQueue units in batches and, where a batch's records lie close together in
        the CommitLog (one queue of a few), the whole span with one pread. Raises
        CorruptRecordError for a unit that points at no valid record.
        """
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            return
        cl = self.commitlog
        files = cl.files
        end = cq.max_offset if end is None else min(end, cq.max_offset)
        pos = max(start, cq.min_offset)
        while pos < end:
            raw = cq.read_units(pos, min(_READ_BATCH, end - pos))
            if not raw:
                return
            units = UNIT.iter_unpack(raw)
            for group in _spans(list(units), files.file_size):
                first, last = group[0], group[-1]
                lo, hi = first[0], last[0] + last[1]
                data = files.read(lo, hi - lo)
                try:
                    if len(data) != hi - lo:
                        raise CorruptRecordError(
                            f"records of {hi - lo} bytes not in the CommitLog", lo)
                    for off, size, _tags in group:
                        if off - lo + size > len(data):
                            raise CorruptRecordError(
                                f"record of {size} bytes not in the CommitLog", off)
                        rec = decode_record(data, off - lo, check_crc=False)
                        if rec.store_size > size:
                            raise CorruptRecordError(
                                f"record of {rec.store_size} bytes, its unit says {size}", off)
                        yield pos, rec
                        pos += 1
                except CorruptRecordError as exc:
                    self.note_damage(topic, queue_id, pos, exc)
                    raise

    # ------------------------------------------------------------------------------------------
    # writing

    def _select_queue(self, msg: Message, cfg: TopicConfig) -> int:
        n = cfg.write_queue_nums
        if msg.queue_id is not None:
            if not 0 <= msg.queue_id < max(n, cfg.read_queue_nums):
                raise PutMessageError(f"queueId {msg.queue_id} is not a queue of {cfg.topic_name}"
                                      f" (0..{n - 1})")
            return msg.queue_id
        if msg.sharding_key is not None:
            return (zlib.crc32(msg.sharding_key.encode()) & 0x7FFFFFFF) % n
        i = self._round_robin.get(cfg.topic_name, 0)
        self._round_robin[cfg.topic_name] = i + 1
        return i % n

    def put_messages(self, messages: list[Message], batch: bool = False,
                     internal: bool = False) -> list[PutResult]:
        """Append messages and dispatch them; all of them or none are stored.

        Every message is first checked against :mod:`engine.validation` (RocketMQ's client and
        proxy rules: no reserved property names, no control characters in tags, keys or
        properties, an integer queueId...). ``internal`` True skips those checks, for puts the
        broker makes itself (its retry, schedule and transaction records carry system
        properties) and for tests that build odd stores on purpose; the size limits apply
        either way.

        ``batch`` gives RocketMQ's MessageBatch semantics (``putMessages``): one topic, one
        queue for all (chosen once), consecutive queue offsets, and the records kept together
        in one CommitLog segment.

        When this returns, the records are in the CommitLog (page cache) and visible to readers.
        With SYNC_FLUSH the call waits (group commit: concurrent callers share one fdatasync)
        until they are on disk, and they become visible only then, as RocketMQ's
        ReputMessageService dispatches only up to the flushed offset. Encoding errors are
        raised before anything is written.

        Raises:
            NoSuchTopicError: a topic that was never created.
            PermissionDeniedError: a topic whose perm lacks the write bit.
            MessageIllegalError: a message breaks a rule of :mod:`engine.validation`
                (EINVAL), or needs batchconsumequeue/.
            MessageTooLargeError / PropertiesSizeExceededError: too large (EMSGSIZE).
            PutMessageError: a queueId that is not a queue of the topic, a mixed batch.
            ReadOnlyStoreError: the store is read-only.
            FlushDiskTimeoutError: SYNC_FLUSH and the flush took longer than
                ``syncFlushTimeout`` ms (the records are appended; see the error).
            OSError: the disk failed (e.g. ENOSPC); nothing of the batch is kept.
        """
        if self.read_only:
            raise ReadOnlyStoreError("store is read-only")
        if self.disk_full:
            raise OSError(errno.ENOSPC, "disk usage above diskSpaceWarningLevelRatio; "
                          "the store refuses messages until expired files are deleted")
        if not messages:
            return []
        if not internal:
            check_messages(messages)
        out = None if batch else self._put_plain(messages)
        if out is not None:
            for listener in self.listeners:
                listener(out)
            return out
        now = int(time.time() * 1000)
        encoded = []
        cfg_ = self.config
        with self.put_lock:
            if self._closed:
                raise ReadOnlyStoreError("store is closed")
            targets = []  # (topic, queueId, extra properties) after the delay rewrite
            if batch and len({m.topic for m in messages}) > 1:
                raise PutMessageError("a batch must have a single topic")
            for msg in messages:
                cfg = self.topic_config.get(msg.topic)
                if cfg is None:
                    raise NoSuchTopicError(f"topic {msg.topic} does not exist")
                if not cfg.writable:
                    raise PermissionDeniedError(
                        f"topic {msg.topic} has perm {cfg.perm}, without write permission")
                if msg.sys_flag & INNER_BATCH_FLAG or msg.topic in self._batch_cq_topics:
                    raise MessageIllegalError(
                        f"{msg.topic}: inner-batch messages and BatchCQ topics need "
                        "batchconsumequeue/, which this engine does not write")
                qid = targets[0][1] if batch and targets else self._select_queue(msg, cfg)
                if msg.delay_level > 0 and msg.topic != SCHEDULE_TOPIC:
                    level = min(msg.delay_level, max(self._delay_levels, default=1))
                    self._schedule_topic()
                    targets.append((SCHEDULE_TOPIC, level - 1, {
                        PROPERTY_REAL_TOPIC: msg.topic, PROPERTY_REAL_QID: str(qid),
                        PROPERTY_DELAY: str(level)}))
                else:
                    targets.append((msg.topic, qid, None))
            delays = []
            for msg, (topic, qid, extra) in zip(messages, targets):
                props = dict(msg.properties or {})
                if msg.tags:
                    props[PROPERTY_TAGS] = msg.tags
                if msg.keys:
                    props[PROPERTY_KEYS] = (msg.keys if isinstance(msg.keys, str)
                                            else " ".join(msg.keys))
                if msg.sharding_key is not None:
                    props.setdefault(PROPERTY_SHARDING_KEY, msg.sharding_key)
                if not msg.wait_store_msg_ok:
                    props[PROPERTY_WAIT] = "false"
                if extra:
                    props.update(extra)
                born = msg.born_timestamp or now
                props.setdefault(PROPERTY_UNIQ_KEY, self.uniq_keys.next(born))
                delays.append(props.get(PROPERTY_DELAY) if topic == SCHEDULE_TOPIC else None)
                body, sys_flag = msg.body, msg.sys_flag
                if self._should_compress(msg):
                    kind = _COMPRESSION_TYPES[cfg_.compress_type.upper()]
                    body = compress_body(body, kind, cfg_.compress_level)
                    sys_flag = (sys_flag & ~COMPRESSION_TYPE_MASK) | COMPRESSED_FLAG | kind
                encoded.append(encode_message(
                    topic, body, queue_id=qid, properties=props, born_timestamp=born,
                    born_host=msg.born_host or (b"\x7f\x00\x00\x01", 0),
                    store_host=self.store_host, flag=msg.flag, sys_flag=sys_flag,
                    max_message_size=cfg_.max_message_size,
                    auto_v2=cfg_.auto_message_version_on_topic_len,
                    append_prop_crc=cfg_.enabled_append_prop_crc))
            # assignOffset: consecutive queue offsets, not for prepared/rollback records.
            next_offsets: dict[tuple[str, int], int] = {}
            queue_offsets = []
            for e in encoded:
                key = (e.topic, e.queue_id)
                if e.sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
                    queue_offsets.append(0)
                    continue
                if key not in next_offsets:
                    next_offsets[key] = self.max_offset(*key, committed=False)
                queue_offsets.append(next_offsets[key])
                next_offsets[key] += 1
            cl = self.commitlog
            start = cl.max_offset
            before = {k: self.max_offset(*k) for k in next_offsets}
            results = cl.append(encoded, queue_offsets, now, together=batch)
            dispatch = []
            for e, qoff, res, delay in zip(encoded, queue_offsets, results, delays):
                tc = e.tags_code
                if delay is not None:
                    deliver = deliver_tags_code(delay, now, self._delay_levels)
                    if deliver is not None:
                        tc = deliver
                dispatch.append(_Dispatch(e.topic, e.queue_id, res[0], res[1], tc, now, qoff,
                                       e.keys, e.uniq_key, e.sys_flag))
            if self.sync_flush:
                self._pending.append((cl.max_offset, dispatch))
            else:
                try:
                    self._dispatch(dispatch)
                except OSError:
                    for key, old in before.items():
                        cq = self.consume_queues.get(key)
                        if cq is not None:
                            cq.truncate_to(old)
                    for d in self.dispatchers:
                        d.truncate(start)
                    cl.truncate(start)
                    raise
            self._queue_offsets.update(next_offsets)
            end = cl.max_offset
            out = [PutResult(e.topic, e.queue_id, qoff, res[0], res[1], now,
                             offset_msg_id(self.store_host, res[0]), e.uniq_key)
                   for e, qoff, res in zip(encoded, queue_offsets, results)]
        if self.sync_flush:
            if all(m.wait_store_msg_ok for m in messages):
                self._wait_flushed(end, out)
            else:
                with self._gc_cond:
                    self._gc_cond.notify()
        for listener in self.listeners:
            listener(out)
        return out

    def _should_compress(self, msg: Message) -> bool:
        """``DefaultMQProducerImpl.tryToCompressMessage``: body >= compressMsgBodyOverHowmuch."""
        if msg.compress is not None:
            return msg.compress
        limit = self.config.compress_msg_body_over_howmuch
        return 0 <= limit <= len(msg.body) and not msg.sys_flag & COMPRESSED_FLAG

    def _schedule_topic(self) -> None:
        """Create ``SCHEDULE_TOPIC_XXXX`` with one queue per delay level, as the broker does."""
        if self.topic_config.get(SCHEDULE_TOPIC) is None:
            n = max(len(self._delay_levels), 1)
            self.topic_config.put(TopicConfig(SCHEDULE_TOPIC, n, n))

    # ------------------------------------------------------------------------------------------
    # getMessage

    def get_messages(self, group: str, topic: str, queue_id: int, offset: int,
                     max_msg_nums: int = 32, tags: str | None = None) -> GetMessageResult:
        """``DefaultMessageStore.getMessage``: up to ``max_msg_nums`` messages from a queue
        offset, with RocketMQ's status and next-offset correction (reference section 10).

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
        """
        return get_messages(self, topic, queue_id, offset, max_msg_nums,
                            parse_subscription(tags))

    # Fields of Message the fast path handles itself; any other field must hold its default.
    _PLAIN_FIELDS = frozenset(("topic", "body", "tags", "keys", "properties", "queue_id",
                               "sharding_key", "flag", "born_timestamp", "born_host",
                               "sys_flag"))
    _plain_extra: tuple | None = None  # (attrgetter of the other fields, their defaults)
    _msg_id_prefix: str | None = None  # hex of the store host for offset msgIds

    def _plain_topic(self, topic: str):
        """Per-topic pieces for the fast path, or None when the topic needs the general one:
        ``(writeQueueNums, queues, topic length byte + name, 91 + name length,
        hash of "topic#")``. Cached while the topic's config stays the same."""
        cfg = self.topic_config.get(topic)
        if (cfg is None or not cfg.writable or topic == SCHEDULE_TOPIC
                or topic in self._batch_cq_topics):
            return None
        state = (cfg.perm, cfg.write_queue_nums, cfg.read_queue_nums)
        hit = self._plain_topics.get(topic)
        if hit is not None and hit[0] is cfg and hit[1] == state:
            return hit[2]
        raw = topic.encode("utf-8")
        if len(topic) > 127 or len(raw) > 127:
            return None
        info = (cfg.write_queue_nums, max(cfg.write_queue_nums, cfg.read_queue_nums),
                bytes((len(raw),)) + raw, cal_msg_length(0, 0, len(raw), 0), java_hash_u32(topic + "#"))
        if len(self._plain_topics) > 65536:
            self._plain_topics.clear()
        self._plain_topics[topic] = (cfg, state, info)
        return info

    def _put_plain(self, messages: list[Message]) -> list[PutResult] | None:
        """The put path for the common case, fused: encode, append and dispatch in one pass.

        Handles puts where every message has no user properties, sysFlag 0, an IPv4 (or
        default) born host, a V1 topic (not SCHEDULE_TOPIC_XXXX, not a BatchCQ topic) and
        every other Message field at its default (no delay_level, compress or
        wait_store_msg_ok=False), under ASYNC_FLUSH with an IPv4 store host, without
        enabledAppendPropCRC or compressMsgBodyOverHowmuch; returns None for anything else
        (nothing written, round-robin state restored), and :meth:`put_messages` runs the
        general path. MessageBatch puts (``batch=True``) never come here; the disk-full
        refusal is checked before. It keeps the shared state as the general path does
        (topicQueueTable ``_queue_offsets``, ``_dispatched_store_timestamp``). Writes exactly the bytes the general path writes (tests/test_fastpaths.py): the
        offsets are known up front so each record is packed once, the ConsumeQueue units of a
        queue are packed in one call, UNIQ_KEYs come in one batch with their hashes, and the
        index keys are written in one batch.
        """
        cfgs = self.config
        if (self.sync_flush or len(self.store_host[0]) != 4 or cfgs.enabled_append_prop_crc
                or cfgs.compress_msg_body_over_howmuch >= 0):
            return None
        extra = MessageStore._plain_extra
        if extra is None:
            import dataclasses
            fields = [f for f in dataclasses.fields(Message) if f.name not in self._PLAIN_FIELDS]
            # one attrgetter call and one comparison per message for all the other fields
            names = [f.name for f in fields] + ["topic"]  # "topic": always a tuple
            extra = MessageStore._plain_extra = (
                operator.attrgetter(*names), tuple(f.default for f in fields))
        extra_of, extra_defaults = extra
        max_body = cfgs.max_message_size
        now = int(time.time() * 1000)
        with self.put_lock:
            if self._closed:
                raise ReadOnlyStoreError("store is closed")
            cl = self.commitlog
            fs = cl.file_size
            start = pos = chunk_start = cl.max_offset
            seg_end = pos - pos % fs + fs
            chunks = []
            pieces: list = []
            topics: dict[str, tuple] = {}
            queues: dict[tuple[str, int], list] = {}  # key -> [next queue offset, units]
            queue_offsets = self._queue_offsets
            rr = self._round_robin
            rr_before = dict(rr)
            # A fallback leaves no trace: round-robin positions and the UNIQ_KEY counter are
            # put back, so the general path assigns what it would have assigned alone.
            counter_before = self.uniq_keys._next_counter
            tags_cache = self._tags_cache
            uniq_next = self.uniq_keys.next_with_hash
            if any(map(_BORN_OF, messages)):  # ids follow each born time
                uniq_keys = uniq_hashes = itertools.repeat(None)
            else:  # one batch of ids, in message order as one by one
                uniq_keys, uniq_hashes = self.uniq_keys.next_many(len(messages), now)
            pack = FIXED_V4.pack
            sip, sport = self.store_host
            id_prefix = self._msg_id_prefix
            if id_prefix is None:
                id_prefix = self._msg_id_prefix = (sip + struct.pack(">i", sport)).hex().upper()
            index = self.index_service
            idx: list[int] = []
            p32 = pow31(32)
            limit = max_body + RECORD_SLACK
            default_born = (b"\x7f\x00\x00\x01", 0)
            out: list[PutResult] = []
            new_object = _new_object
            shorts = _SHORTS
            set_attr = _set_attr
            for m, uniq, uniq_hash in zip(messages, uniq_keys, uniq_hashes):
                topic = m.topic
                body = m.body
                blen = len(body)
                bh = m.born_host
                info = topics.get(topic)
                if info is None:
                    info = topics[topic] = self._plain_topic(topic)
                if (info is None or m.properties or m.sys_flag or blen > max_body
                        or (bh is not None and len(bh[0]) != 4)):
                    rr.clear()
                    rr.update(rr_before)
                    self.uniq_keys._next_counter = counter_before
                    return None
                if extra_of(m)[:-1] != extra_defaults:
                    rr.clear()
                    rr.update(rr_before)
                    self.uniq_keys._next_counter = counter_before
                    return None
                nwq, nq, tail, base, topic_hash = info
                qid = m.queue_id
                if qid is None:
                    if m.sharding_key is not None:
                        qid = (zlib.crc32(m.sharding_key.encode()) & 0x7FFFFFFF) % nwq
                    else:
                        i = rr.get(topic, 0)
                        rr[topic] = i + 1
                        qid = i % nwq
                elif not 0 <= qid < nq:
                    raise PutMessageError(f"queueId {qid} is not a queue of {topic}"
                                          f" (0..{nwq - 1})")
                tags = m.tags
                if tags:
                    head_tc = tags_cache.get(tags)
                    if head_tc is None:
                        head_tc = (_TAGS_ITEM + tags.encode() + _PROPERTY_END, tags_code(tags))
                        if len(tags_cache) < 4096:
                            tags_cache[tags] = head_tc
                    head, tc = head_tc
                else:
                    head, tc = b"", 0
                keys = m.keys
                if keys:
                    keys = keys if isinstance(keys, str) else " ".join(keys)
                    head += f"{_KEYS_ITEM}{keys}{PROPERTY_SEPARATOR}".encode()
                if m.sharding_key is not None:
                    head += f"{_SHARDING_ITEM}{m.sharding_key}{PROPERTY_SEPARATOR}".encode()
                born = m.born_timestamp or now
                if uniq is None:
                    uniq, uniq_hash = uniq_next(born)
                plen = len(head) + len(uniq) + _UNIQ_ITEM_OVERHEAD
                if plen > MAX_PROPERTIES_LENGTH:
                    raise PropertiesSizeExceededError(
                        f"properties are {plen} bytes, more than {MAX_PROPERTIES_LENGTH}")
                total = base + blen + plen
                if total > limit:
                    raise MessageTooLargeError(
                        f"message record is {total} bytes, more than maxMessageSize + 64 KiB")
                if pos + total + 8 > seg_end:
                    if total + 8 > fs:
                        raise MessageTooLargeError(f"record of {total} bytes does not fit in a "
                                                  f"{fs}-byte CommitLog segment")
                    pieces.append(encode_blank(seg_end - pos))
                    chunks.append((chunk_start, pieces))
                    pieces = []
                    pos = chunk_start = seg_end
                    seg_end += fs
                key = (topic, qid)
                q = queues.get(key)
                if q is None:
                    nxt = queue_offsets.get(key) if queue_offsets else None
                    if nxt is None:
                        cq = self.consume_queues.get(key)
                        nxt = cq.max_offset if cq is not None else 0
                    q = queues[key] = [nxt, []]
                qoff = q[0]
                q[0] = qoff + 1
                q[1] += (pos, total, tc)
                if bh is None:
                    bh = default_born
                # header | body | topic length + topic | properties length + properties
                pieces += (pack(total, MAGIC_V1, crc32(body) & BODY_CRC_MASK, qid, m.flag, qoff,
                                pos, 0, born, bh[0], bh[1], now, sip, sport, 0, 0, blen),
                           body, _UNIQ_ITEM_FORMAT % (
                               tail, shorts[plen] if plen < 4096 else plen.to_bytes(2, "big"),
                               head, uniq.encode()))
                if index is not None:
                    h = (topic_hash * p32 + uniq_hash) & 0xFFFFFFFF
                    if h & 0x80000000:
                        h = 0x100000000 - h
                        if h > 0x7FFFFFFF:
                            h = 0
                    idx += (h, pos, now)
                    if keys:
                        for k in keys.split(" "):
                            if k:
                                idx += (key_hash_of_u32(
                                    (topic_hash * pow31(utf16_len(k)) + java_hash_u32(k))
                                    & 0xFFFFFFFF), pos, now)
                res = new_object(PutResult)  # PutResult._fast, inlined
                set_attr(res, "__dict__", {
                    "topic": topic, "queue_id": qid, "queue_offset": qoff,
                    "commitlog_offset": pos, "size": total, "store_timestamp": now,
                    "msg_id": id_prefix + "%016X" % pos, "uniq_key": uniq})
                out.append(res)
                pos += total
            chunks.append((chunk_start, pieces))
            cl.append_chunks(chunks, pos, now)
            self._dispatch_plain(messages, out, queues, idx, start, now)
            queue_offsets.update((k, v[0]) for k, v in queues.items())
            self._dispatched_store_timestamp = now
        return out

    def _dispatch_plain(self, messages, out, queues, idx, start: int, now: int) -> None:
        """ConsumeQueue units, index keys and other dispatchers for :meth:`_put_plain`; on an
        OSError everything of the batch is undone (CommitLog included) and it is re-raised."""
        index = self.index_service
        others = [d for d in self.dispatchers if d is not index]
        before = {}
        try:
            for key, (nxt, units) in queues.items():
                cq = self._consume_queue(key[0], key[1], create=True)
                before[key] = cq.max_offset
                cq.put_units(nxt - len(units) // 3, pack_units(units))
            if index is not None and idx:
                if idx[1] > index.end_phy_offset:
                    index.put_hashed(idx)
                else:  # cannot happen after recovery; keep the general rule anyway
                    others.insert(0, index)
            if others:
                batch = [_Dispatch(r.topic, r.queue_id, r.commitlog_offset, r.size, 0,
                                   now, r.queue_offset, [], r.uniq_key, 0) for r in out]
                for m, d in zip(messages, batch):
                    d.tags_code = tags_code(m.tags) if m.tags else 0
                    k = m.keys
                    if k:
                        d.keys = [t for t in (k if isinstance(k, str) else
                                              " ".join(k)).split(" ") if t]
                for d in others:
                    d.dispatch(batch)
        except OSError:
            for key, old in before.items():
                self.consume_queues[key].truncate_to(old)
            for d in self.dispatchers:
                d.truncate(start)
            self.commitlog.truncate(start)
            raise

    # ------------------------------------------------------------------------------------------
    # consumer offsets and groups

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit a consumer offset (persisted atomically in consumerOffset.json).

        Raises OffsetOutOfRangeError outside ``[minOffset, maxOffset]``, InvalidNameError for a
        bad group name, NoSuchTopicError for an unknown queue, ReadOnlyStoreError.
        """
        if self.read_only:
            raise ReadOnlyStoreError("store is read-only")
        validate_group_name(group)
        if topic not in self.topic_names() or queue_id not in self.queue_ids(topic):
            raise NoSuchTopicError(f"no queue {topic}/{queue_id}")
        lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        if not lo <= offset <= hi:
            raise OffsetOutOfRangeError(f"offset {offset} outside [{lo}, {hi}] of {topic}/"
                                        f"{queue_id}")
        self.consumer_offsets.commit(group, topic, queue_id, offset)

    def group_names(self) -> list[str]:
        """Groups from subscriptionGroup.json and consumerOffset.json, sorted."""
        return sorted(set(self.subscription_groups.groups) | self.consumer_offsets.groups())

    def create_group(self, group: str) -> None:
        """Create a subscription group (persisted). Raises InvalidNameError."""
        if self.read_only:
            raise ReadOnlyStoreError("store is read-only")
        self.subscription_groups.create(group)

    # ------------------------------------------------------------------------------------------
    # flush and close

    def flush(self, least_pages: int = 0) -> bool:
        """Force appended data to disk, then the ConsumeQueues, index and checkpoint.

        This is the fsync() path. The CommitLog is synced without holding the put lock, so
        puts continue meanwhile. Under SYNC_FLUSH the records synced here are then dispatched
        (made visible). ``least_pages`` > 0 skips the round when fewer 4 KiB pages are dirty
        (``flushCommitLogLeastPages``). Returns True when CommitLog data was synced.
        Raises OSError from the disk.
        """
        if self.read_only:
            return False
        cl = self.commitlog
        with self._flush_lock:
            with self.put_lock:
                end, ts = cl.max_offset, cl.last_store_timestamp
            synced = cl.flush(least_pages, end, ts)
            with self.put_lock:
                if self.sync_flush:
                    self._dispatch_flushed(cl.flushed_where)
                # the ConsumeQueue content synced below covers at least this
                logics_ts = self._dispatched_store_timestamp
            if not synced and least_pages:
                return False
            for cq in list(self.consume_queues.values()):
                cq.flush()
            cp = self.checkpoint
            before = (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
                      cp.confirm_phy_offset)
            cp.physic_msg_timestamp = cl.flushed_store_timestamp
            cp.logics_msg_timestamp = logics_ts
            if self.index_service is not None:
                cp.index_msg_timestamp = self.index_service.flush()
            cp.confirm_phy_offset = cl.flushed_where
            if (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
                    cp.confirm_phy_offset) != before or not self._checkpoint_written:
                cp.write(self.checkpoint_path)
                self._checkpoint_written = True
            return synced

    def _dispatch_flushed(self, flushed: int) -> None:
        """SYNC_FLUSH: dispatch the pending puts whose records end at or before ``flushed``.

        Caller holds the put lock. A dispatch error leaves the batch pending (retried on the
        next flush; a restart re-dispatches it from the CommitLog anyway).
        """
        while self._pending and self._pending[0][0] <= flushed:
            self._dispatch(self._pending[0][1])
            self._pending.pop(0)

    def _wait_flushed(self, end: int, results: list) -> None:
        """GroupCommitService: wait until the CommitLog is flushed to ``end``."""
        timeout = self.config.sync_flush_timeout / 1000
        waiter = [end, threading.Event(), None]
        with self._gc_cond:
            self._gc_waiters.append(waiter)
            self._gc_cond.notify()
        if not waiter[1].wait(timeout):
            raise FlushDiskTimeoutError(
                f"FLUSH_DISK_TIMEOUT: CommitLog not flushed to {end} within syncFlushTimeout "
                f"{self.config.sync_flush_timeout} ms; the messages are appended and will be "
                "visible after the next flush", results)
        if waiter[2] is not None:
            raise waiter[2]

    def _group_commit_loop(self) -> None:
        """Serve SYNC_FLUSH waiters: one fdatasync covers every request queued before it."""
        while not self._stop_flush.is_set():
            with self._gc_cond:
                if not self._gc_waiters and not self._pending:
                    self._gc_cond.wait(0.01)
                waiters, self._gc_waiters = self._gc_waiters, []
            if not waiters and not self._pending:
                continue
            error = None
            try:
                self.flush_commitlog()
            except Exception as exc:  # noqa: BLE001 - reported to every waiter
                log.exception("group commit flush failed")
                error = exc
                self._stop_flush.wait(0.01)  # do not spin on a failing disk
            flushed = self.commitlog.flushed_where
            for w in waiters:
                if error is None and flushed < w[0]:
                    with self._gc_cond:  # appended after this round: next round
                        self._gc_waiters.append(w)
                    continue
                w[2] = error
                w[1].set()

    def flush_commitlog(self) -> bool:
        """Sync the CommitLog only (and, under SYNC_FLUSH, dispatch what became durable).

        The cheap half of :meth:`flush` that group commit runs per round; ConsumeQueues and the
        checkpoint follow on the background flush interval. Returns True if data was synced.
        """
        cl = self.commitlog
        with self._flush_lock:
            with self.put_lock:
                end, ts = cl.max_offset, cl.last_store_timestamp
            synced = cl.flush(0, end, ts)
            if self.sync_flush:
                with self.put_lock:
                    self._dispatch_flushed(cl.flushed_where)
            return synced

    def delete_expired_files(self, manual: bool = True) -> CleanReport:
        """Delete expired files now (``deleteExpiredCommitLog``; see :mod:`engine.cleanup`).

        ``manual``: like mqadmin's request, up to 20 runs whatever the hour and disk usage;
        otherwise one run under the usual triggers. Returns what was deleted.
        Raises ReadOnlyStoreError on a read-only store.
        """
        if self.read_only:
            raise ReadOnlyStoreError("store is read-only")
        if manual:
            return self.clean_service.delete_expired_files()
        return self.clean_service.run_once()

    def _flush_loop(self) -> None:
        """FlushRealTimeService: every ``flushIntervalCommitLog`` ms flush when at least
        ``flushCommitLogLeastPages`` pages are dirty, and everything every
        ``flushCommitLogThoroughInterval`` ms (checkpoint included). Under SYNC_FLUSH the
        CommitLog is synced by group commit; this loop then keeps the ConsumeQueues and the
        checkpoint close behind (FlushConsumeQueueService)."""
        cfg = self.config
        interval = cfg.flush_interval_commit_log / 1000
        while not self._stop_flush.wait(interval):
            try:
                now = time.monotonic()
                if self.sync_flush or (now - self._last_thorough_flush) * 1000 >= \
                        cfg.flush_commit_log_thorough_interval:
                    self._last_thorough_flush = now
                    self.flush(0)
                else:
                    self.flush(cfg.flush_commit_log_least_pages)
            except Exception:  # noqa: BLE001 - keep flushing; the next round retries
                log.exception("background flush failed")

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
        self._stop_flush.set()
        if self._flush_thread is not None:
            self._flush_thread.join()
        if self._group_commit_thread is not None:
            self._group_commit_thread.join()
        with self.put_lock:
            self._closed = True
        clean = True
        if not self.read_only:
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - recorded as an abnormal shutdown
                log.exception("flush at close failed; the next open recovers")
                clean = False
            # DefaultMessageStore.shutdown keeps ``abort`` while dispatch is behind.
            clean = clean and not self._pending
        with self._gc_cond:
            waiters, self._gc_waiters = self._gc_waiters, []
        for w in waiters:  # flushed above
            w[1].set()
        with self.put_lock:
            for d in self.dispatchers:
                if hasattr(d, "close"):
                    d.close()
            if not self.read_only and clean:
                try:
                    os.unlink(self.abort_path)
                except FileNotFoundError:
                    pass
            for cq in self.consume_queues.values():
                cq.close()
            self.commitlog.close()
            release_store_lock(self._lock_fd)
            self._lock_fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_READ_BATCH = 1024  # ConsumeQueue units read at once by iter_queue
_SPAN_MAX = 4 << 20  # at most this many CommitLog bytes in one read
_SPAN_SLACK = 4  # read a span when it is at most this many times the records' own bytes


def _spans(units: list, file_size: int):
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
            if off < lo or hi > seg_end or hi - lo > _SPAN_MAX or (
                    j > i and hi - lo > _SPAN_SLACK * (own + size)):
                break
            own += size
            j += 1
        if j == i:
            j = i + 1  # a single record: read it alone
        yield units[i:j]
        i = j
