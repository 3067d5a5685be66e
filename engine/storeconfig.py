"""StoreConfig: the store's settings, and broker.conf (RocketMQ ``MessageStoreConfig`` and
``BrokerConfig``, read from a Java properties file as ``MixAll.properties2Object`` does).

Field names are RocketMQ's in snake_case (``mapped_file_size_commit_log`` for
``mappedFileSizeCommitLog``); :meth:`StoreConfig.from_broker_conf` reads a broker.conf. The JSON
config files of the store (topics, consumer offsets, subscription groups) are engine/format/config.py.
"""

from __future__ import annotations

import difflib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .errors import StoreError, UnsupportedLayoutError
from .format.consumequeue import CQ_STORE_UNIT_SIZE
from .format.message import (
    COMPRESSION_LZ4,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    MAX_LMQ_CONSUME_QUEUE_NUM,
    MAX_MESSAGE_SIZE,
    Host,
    host_from_str,
)
from .format.source import LOCAL, StoreSource

# The fast put path and the recovery scan (kept apart from the imports above on purpose).

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
                key.append(line[j : j + 2])
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
                    res.append(chr(int(text[j + 2 : j + 6], 16)))
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


COMPRESSION_TYPES = {"LZ4": COMPRESSION_LZ4, "ZSTD": COMPRESSION_ZSTD, "ZLIB": COMPRESSION_ZLIB}


#: Where a store's brokerName comes from (:func:`settle_broker_name`), first rule first.
BROKER_NAME_OPTION = "--broker-name"
BROKER_NAME_CONF = "broker.conf"
BROKER_NAME_SNAPSHOT = "SNAPSHOT.json"
BROKER_NAME_IDENTITY = "brokerIdentity"
BROKER_NAME_HOST = "host name"
_MAX_IDENTITY = 4096


def host_broker_name() -> str:
    """``BrokerIdentity.defaultBrokerName()``: the local host name, ``DEFAULT_BROKER`` when it
    cannot be had."""
    return socket.gethostname() or "DEFAULT_BROKER"


def identity_broker_name(root: str, source: StoreSource = LOCAL) -> str | None:
    """The broker name in the 5.x ``brokerIdentity`` file of the store at ``root``
    (``MessageStoreConfig.storePathBrokerIdentity``, written by ``BrokerMetadata`` in controller
    mode): ``cluster#broker#id`` or the properties ``brokerName=<name>``. None without a file
    or a name in it (read errors included: the file is a hint, never needed)."""
    try:
        raw = source.read_file(os.path.join(root, "brokerIdentity"), _MAX_IDENTITY)
    except (OSError, StoreError):
        return None
    text = raw.decode("utf-8", "replace")
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "brokerName" and value.strip():
            return value.strip()
    parts = text.strip().split("#")
    if len(parts) == 3 and parts[1]:
        return parts[1]
    return None


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
    broker_name: str = field(default_factory=host_broker_name)
    # Where broker_name came from (not a broker.conf key): one of the BROKER_NAME_* rules, and
    # the broker.conf read (None without one); :meth:`broker_name_source` says it in words.
    broker_name_rule: str = field(default=BROKER_NAME_HOST, compare=False)
    broker_conf: str | None = field(default=None, compare=False)
    # BrokerConfig.brokerClusterName and namesrvAddr (";"-separated): only checked against
    # mqadmin's -c / -n options of the offline commands (mount/mqadmin.py).
    broker_cluster_name: str = "DefaultCluster"
    namesrv_addr: str | None = None
    default_topic_queue_nums: int = 4
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # the 5.x timer store (MessageStoreConfig): a tick's length, the furthest deliver time a
    # timed message may have, and whether the broker runs its timer wheel. None: timed messages
    # are accepted on a store that has a ``timerwheel`` (a 5.x broker's, whose default is true)
    # and refused on one without (a 4.x broker would deliver them at once).
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 3600 * 24 * 3
    timer_wheel_enable: bool | None = None
    # MessageStoreConfig.maxLmqConsumeQueueNum: the LMQ queues a read builds from records'
    # INNER_MULTI_DISPATCH before it dispatches to no new one (engine.service.dispatch)
    max_lmq_consume_queue_num: int = MAX_LMQ_CONSUME_QUEUE_NUM
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
    # broker.conf keys that place the store's files or choose its kind (LAYOUT_KEYS), as the
    # file gives them: :meth:`layout_refusals` judges them; and the notes on keys that look
    # like a misspelt setting (:meth:`from_broker_conf`)
    layout_settings: dict[str, str] = field(default_factory=dict, compare=False)
    conf_notes: list[str] = field(default_factory=list, compare=False)
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    auto_message_version_on_topic_len: bool = True
    # deleteTopic also deletes the topic's POP retry topics (BrokerConfig, default true in 5.x)
    clear_retry_topic_when_delete_topic: bool = True
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

    _KEYS: ClassVar[dict[str, tuple[str, Callable[[str], Any]]]] = {
        "mappedFileSizeCommitLog": ("mapped_file_size_commit_log", int),
        "mappedFileSizeConsumeQueue": ("mapped_file_size_consume_queue", int),
        # RocketMQ 4.3 and older spell them so (setMapedFileSizeCommitLog)
        "mapedFileSizeCommitLog": ("mapped_file_size_commit_log", int),
        "mapedFileSizeConsumeQueue": ("mapped_file_size_consume_queue", int),
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
        "brokerClusterName": ("broker_cluster_name", str),
        "namesrvAddr": ("namesrv_addr", str),
        "defaultTopicQueueNums": ("default_topic_queue_nums", int),
        "messageDelayLevel": ("message_delay_level", str),
        "timerPrecisionMs": ("timer_precision_ms", int),
        "timerMaxDelaySec": ("timer_max_delay_sec", int),
        "timerWheelEnable": ("timer_wheel_enable", _bool),
        "maxLmqConsumeQueueNum": ("max_lmq_consume_queue_num", int),
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
        "clearRetryTopicWhenDeleteTopic": ("clear_retry_topic_when_delete_topic", _bool),
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
    def from_broker_conf(cls, path: str) -> StoreConfig:
        """Read a RocketMQ ``broker.conf`` (a Java properties file, see
        :func:`read_java_properties`) with the broker's key names.

        Keys rmqfs does not use are ignored, as the broker ignores keys it does not know
        (``MixAll.properties2Object``); one that looks like a misspelt setting rmqfs reads
        (``flushDiskTyp``) gets a note in :attr:`conf_notes`, which the mount logs and prints.
        The keys of :data:`LAYOUT_KEYS` are kept for :meth:`layout_refusals`. A bad value
        raises ValueError naming the key.
        """
        cfg = cls()
        with open(path, encoding="utf-8") as f:
            props = read_java_properties(f.read())
        cfg.broker_conf = path
        if props.get("brokerName", "").strip():
            cfg.broker_name_rule = BROKER_NAME_CONF
        read_keys = sorted({*cls._KEYS, *LAYOUT_KEYS})  # what a misspelt key is compared with
        for key, value in props.items():
            if key in LAYOUT_KEYS:
                cfg.layout_settings[key] = value.strip()
            if key in cls._KEYS:
                attr, conv = cls._KEYS[key]
                try:
                    setattr(cfg, attr, conv(value.strip()))
                except ValueError as exc:
                    raise ValueError(f"{path}: bad value for {key}: {value!r}") from exc
            elif key not in LAYOUT_KEYS and key not in _OTHER_ROCKETMQ_KEYS:
                near = difflib.get_close_matches(key, read_keys, n=1, cutoff=0.85)
                if near and near[0] not in props:
                    cfg.conf_notes.append(
                        f"{path}: {key} is not a setting rmqfs reads (ignored, as the broker "
                        f"ignores keys it does not know); did you mean {near[0]}?"
                    )
        if cfg.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ValueError(f"{path}: flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH")
        cfg.compress_type = cfg.compress_type.upper()
        if cfg.compress_type not in COMPRESSION_TYPES:
            raise ValueError(f"{path}: compressType must be one of {sorted(COMPRESSION_TYPES)}")
        return cfg

    def check_layout_settings(self, root: str, read_only: bool) -> None:
        """Raise UnsupportedLayoutError (naming the config, the settings and what to do) when
        :meth:`layout_refusals` refuses a store at ``root`` opened with these settings; every
        opener asks before it reads, creates or deletes anything (``MessageStore``, ``recover``)."""
        refusals = self.layout_refusals(read_only)
        if refusals:
            advice = (
                "mount it read-only (rmqfs mount -o ro) to read it"
                if not read_only and not self.layout_refusals(True)
                else "rmqfs does not open such a store"
            )
            raise UnsupportedLayoutError(
                f"store {root}: {self.broker_conf or 'the config'} says "
                f"{'; '.join(refusals)}: {advice}"
            )

    def layout_refusals(self, read_only: bool) -> list[str]:
        """Why a store opened with these settings must not be opened (``read_only`` False: for
        writing): each :data:`LAYOUT_KEYS` setting that places the store's files where rmqfs
        does not read them (the CommitLog outside ``storePathRootDir/commitlog`` or in several
        directories, ``MultiPathMappedFileQueue``; read-only CommitLog directories; a DLedger
        log outside the root), or, for writing, makes the broker expect what rmqfs does not
        write (a DLedger or RocksDB store, controller mode, an epoch file elsewhere). [] when
        none does. RocketMQ's paths: ``MessageStoreConfig.getStorePathCommitLog``,
        ``getStorePathEpochFile``, ``DLedgerCommitLog``'s ``setDataStorePath``."""
        s = self.layout_settings
        root = s.get("storePathRootDir") or self.store_path_root_dir
        out = []
        cl = s.get("storePathCommitLog", "")
        if "," in cl:
            out.append(
                f"storePathCommitLog={cl} spreads the CommitLog over several directories "
                "(MultiPathMappedFileQueue), which rmqfs does not read"
            )
        elif cl and not _standard_path(cl, root, "commitlog"):
            out.append(
                f"storePathCommitLog={cl} puts the CommitLog outside the store's root "
                f"({root or 'storePathRootDir'}/commitlog), where rmqfs reads it"
            )
        if s.get("readOnlyCommitLogStorePaths"):
            out.append(
                "readOnlyCommitLogStorePaths="
                f"{s['readOnlyCommitLogStorePaths']} adds CommitLog directories rmqfs does not read"
            )
        dl = s.get("storePathDLedgerCommitLog", "")
        if dl:
            pm = _path_module(dl, root)
            head, tail = pm.split(pm.normpath(dl))
            if (
                "," in dl
                or tail != "data"
                or not pm.basename(head).startswith("dledger-")
                or (root and pm.normpath(pm.dirname(head)) != pm.normpath(root))
            ):
                out.append(
                    f"storePathDLedgerCommitLog={dl} puts the DLedger log outside the store's "
                    "root (ROOT/dledger-SELFID/data), where rmqfs reads it"
                )
        if read_only:
            return out
        epoch = s.get("storePathEpochFile", "")
        if epoch and not _standard_path(epoch, root, "epochFileCheckpoint"):
            out.append(
                f"storePathEpochFile={epoch} keeps a controller-mode replica's epoch file "
                "outside the store's root, where rmqfs looks for it before it writes"
            )
        for key, what in (
            ("enableDLegerCommitLog", "a DLedger CommitLog"),
            ("enableControllerMode", "a controller-mode replica"),
        ):
            if s.get(key, "").lower() == "true":
                out.append(f"{key}=true: the broker keeps {what}, which rmqfs never writes")
        kind = s.get("storeType", "")
        if kind.lower() == "defaultrocksdb":  # (StoreType, compared ignoring case)
            out.append(
                f"storeType={kind}: the broker keeps its ConsumeQueues in RocksDB, which rmqfs "
                "never writes"
            )
        return out

    def to_broker_conf(self) -> list[tuple[str, str]]:
        """``[(key, value)]`` of every setting, as broker.conf lines would hold them (the
        broker's key names, booleans ``true``/``false``), sorted by key; unset keys left out.
        mqadmin ``getBrokerConfig`` prints a running broker's the same way."""
        out = []
        for key, (attr, _conv) in self._KEYS.items():
            value = getattr(self, attr)
            if value is None or key.startswith("maped"):  # (the old spellings: read only)
                continue
            out.append(
                (key, ("true" if value else "false") if isinstance(value, bool) else str(value))
            )
        return sorted(out)

    def broker_name_source(self) -> str:
        """Where :attr:`broker_name` came from, in words for a log line, ``status.json``'s
        ``brokerNameFrom`` and the snapshot manifest: ``--broker-name``, ``brokerName= in
        PATH``, ``the snapshot's SNAPSHOT.json``, ``the store's brokerIdentity file``, or
        ``the host name (no --config)`` / ``the host name (PATH has no brokerName=)``."""
        rule = self.broker_name_rule
        if rule == BROKER_NAME_OPTION:
            return "--broker-name"
        if rule == BROKER_NAME_CONF:
            return f"brokerName= in {self.broker_conf}"
        if rule == BROKER_NAME_SNAPSHOT:
            return "the snapshot's SNAPSHOT.json"
        if rule == BROKER_NAME_IDENTITY:
            return "the store's brokerIdentity file"
        if self.broker_conf:
            return f"the host name ({self.broker_conf} has no brokerName=)"
        return "the host name (no --config)"

    @property
    def store_host(self) -> Host:
        """``(address bytes, port)`` of brokerIP1:listenPort (IPv4 or IPv6).

        Raises ValueError when brokerIP1 is not an IP address.
        """
        ip = self.broker_ip1.strip("[]")
        try:
            return host_from_str(
                f"[{ip}]:{self.listen_port}" if ":" in ip else f"{ip}:{self.listen_port}"
            )
        except (OSError, ValueError):
            raise ValueError(
                f"brokerIP1 {self.broker_ip1!r} is not an IPv4 or IPv6 address"
            ) from None

    def delay_level_table(self) -> dict[int, int]:
        """``{level: delay ms}`` parsed from ``messageDelayLevel`` (levels start at 1)."""
        table = {}
        for i, item in enumerate(self.message_delay_level.split(), start=1):
            table[i] = int(item[:-1]) * _TIME_UNITS[item[-1]]
        return table


#: RocketMQ broker.conf keys (the setters of MessageStoreConfig, BrokerConfig, NettyServerConfig,
#: NettyClientConfig and BrokerIdentity, 4.3 to 5.3) that look like a key rmqfs reads but are
#: other settings: never noted as misspelt (:meth:`StoreConfig.from_broker_conf`)
_OTHER_ROCKETMQ_KEYS = frozenset(
    {
        "accessMessageInMemoryHotRatio",
        "brokerIP2",
        "mappedFileSizeConsumeQueueExt",
        "mapperFileSizeBatchConsumeQueue",
    }
)
#: broker.conf keys that place a store's files or choose what kind of store it is
#: (MessageStoreConfig, BrokerConfig): :meth:`StoreConfig.layout_refusals` judges them.
LAYOUT_KEYS = frozenset(
    {
        "storePathRootDir",
        "storePathCommitLog",
        "readOnlyCommitLogStorePaths",
        "storePathDLedgerCommitLog",
        "storePathEpochFile",
        "enableDLegerCommitLog",
        "enableControllerMode",
        "storeType",
    }
)


def _standard_path(value: str, root: str | None, name: str) -> bool:
    """Whether ``value`` (one path a broker.conf gives) is ``root/name``, RocketMQ's default
    place (``root`` None: the broker's default root, ``~/store`` of the user it runs as, so
    any ``.../store/name``)."""
    pm = _path_module(value, root)
    path = pm.normpath(value)
    if root:
        return path == pm.normpath(pm.join(root, name))
    parent, base = pm.split(path)
    return base == name and pm.basename(parent) == "store"


def _path_module(*paths: str | None) -> Any:
    """``ntpath`` where a broker.conf path is a Windows one (a drive letter or a backslash: a
    store copied from a Windows broker), else ``posixpath``."""
    import ntpath
    import posixpath

    for p in paths:
        if p and ("\\" in p or (len(p) > 1 and p[1] == ":" and p[0].isalpha())):
            return ntpath
    return posixpath


def settle_broker_name(
    config: StoreConfig | None,
    root: str | None,
    name: str | None = None,
    source: StoreSource = LOCAL,
    snapshot_broker: str | None = None,
) -> StoreConfig:
    """Decide the brokerName a mount reports (``status.json``) and writes into its snapshots'
    manifests, by the first rule that applies: ``name`` (the ``--broker-name`` option), the
    ``brokerName=`` of ``--config``'s broker.conf (RocketMQ's ``BrokerConfig``),
    ``snapshot_broker`` (a snapshot in object storage: its ``SNAPSHOT.json``'s brokerName, the
    name of the broker it was taken of), the store's ``brokerIdentity`` file
    (:func:`identity_broker_name`; ``root`` None: not looked for), else the host name
    (``BrokerIdentity.defaultBrokerName()``, RocketMQ's default, which two machines often
    share: ``vm``, ``localhost``). :meth:`StoreConfig.broker_name_source` then says which.

    Returns ``config`` (a new default StoreConfig when None) with ``broker_name`` and
    ``broker_name_rule`` set. Raises ValueError for an empty ``name``.
    """
    cfg = config if config is not None else StoreConfig()
    if name is not None:
        if not name.strip() or name != name.strip():
            raise ValueError(f"--broker-name {name!r}: give a name without surrounding spaces")
        cfg.broker_name, cfg.broker_name_rule = name, BROKER_NAME_OPTION
        return cfg
    if cfg.broker_name_rule == BROKER_NAME_CONF:
        return cfg
    if snapshot_broker and snapshot_broker.strip():
        cfg.broker_name, cfg.broker_name_rule = snapshot_broker, BROKER_NAME_SNAPSHOT
        return cfg
    found = identity_broker_name(root, source) if root is not None else None
    if found:
        cfg.broker_name, cfg.broker_name_rule = found, BROKER_NAME_IDENTITY
    return cfg
