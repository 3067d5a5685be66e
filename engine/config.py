"""Broker metadata files under ``config/``: topics, consumer offsets, subscription groups.

RocketMQ serialises these with fastjson 1.x in pretty mode (``RemotingSerializable.toJson``;
reference section 6): tab indentation, keys sorted, and ``Map<Integer, Long>`` keys written as
bare integers (``{0:543,1:543}``), which is not strict JSON. The reader here accepts both bare and
quoted integer keys; the writer emits strict JSON (quoted keys), which fastjson reads as well, so
the files work with a broker and with ``jq``.

Files are persisted atomically: the old file is kept as ``<file>.bak`` and the new content is
written to ``<file>.tmp``, fsynced and renamed over ``<file>``; the directory is then fsynced.
Loading falls back to ``<file>.bak`` when ``<file>`` is missing, empty or unparsable
(``ConfigManager.load``).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field

from .errors import CorruptRecordError, InvalidNameError

TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR

# TopicValidator: "^[%|a-zA-Z0-9_-]+$", at most 127 chars for a topic (TOPIC_MAX_LENGTH);
# group names follow the same character rule (at most 255 chars).
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")  # used with fullmatch: "$" would pass "a\n"
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1


RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"  # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"  # MixAll.DLQ_GROUP_TOPIC_PREFIX


def max_topic_length(name: str) -> int:
    """Longest allowed name: 127 chars (``Validators.TOPIC_MAX_LENGTH``), except the broker's
    retry and dead-letter topics ``%RETRY%<group>`` / ``%DLQ%<group>``, which a group name of up
    to 255 chars makes longer. Those need the V2 record (2-byte topic length)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if name.startswith(prefix):
            return len(prefix) + GROUP_MAX_LENGTH
    return TOPIC_MAX_LENGTH


def validate_topic_name(name: str) -> None:
    """Raise InvalidNameError unless ``name`` follows ``TopicValidator.validateTopic``
    (``^[%|a-zA-Z0-9_-]+$``, at most :func:`max_topic_length` chars)."""
    limit = max_topic_length(name or "")
    if not name or len(name) > limit or not _VALID_NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid topic name {name!r}: use 1-{limit} of [%|a-zA-Z0-9_-]")


def validate_group_name(name: str) -> None:
    """Raise InvalidNameError unless ``name`` is a valid consumer group name."""
    if not name or len(name) > GROUP_MAX_LENGTH or not _VALID_NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid group name {name!r}: use 1-{GROUP_MAX_LENGTH} of [%|a-zA-Z0-9_-]")


_STRING_OR_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)')


def loads_fastjson(text: str):
    """Parse fastjson output: JSON plus bare integer object keys. Raises ValueError."""
    def repl(m):
        if m.group(1) is None:
            return m.group(0)
        return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'
    return json.loads(_STRING_OR_BARE_KEY.sub(repl, text))


def dumps_pretty(obj) -> str:
    """Serialise like fastjson's pretty mode: tabs, sorted keys, no space after ':'."""
    return json.dumps(obj, indent="\t", sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def load_config_file(path: str):
    """Load ``path`` or, failing that, ``path.bak``; None when neither holds anything.

    Raises CorruptRecordError when both exist and neither parses.
    """
    errors = []
    for p in (path, path + ".bak"):
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        if not text.strip():
            continue
        try:
            return loads_fastjson(text)
        except ValueError as exc:
            errors.append(f"{p}: {exc}")
    if errors:
        raise CorruptRecordError("; ".join(errors))
    return None


def persist_config_file(path: str, obj) -> None:
    """Write ``obj`` to ``path`` atomically, keeping the previous content as ``path.bak``."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    data = dumps_pretty(obj).encode("utf-8")
    if os.path.exists(path):
        with open(path, "rb") as f:
            old = f.read()
        if old == data:
            return
        _write_atomic(path + ".bak", old)
    _write_atomic(path, data)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _data_version(counter: int) -> dict:
    return {"counter": counter, "stateVersion": 0, "timestamp": int(time.time() * 1000)}


@dataclass
class TopicConfig:
    """One entry of ``topicConfigTable`` (``org.apache.rocketmq.common.TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The fastjson field names and values."""
        return {"attributes": self.attributes, "order": self.order, "perm": self.perm,
                "readQueueNums": self.read_queue_nums, "topicFilterType": self.topic_filter_type,
                "topicName": self.topic_name, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, name: str, d: dict) -> "TopicConfig":
        """Build from a ``topicConfigTable`` entry (4.x entries lack ``attributes``)."""
        return cls(d.get("topicName", name), int(d.get("readQueueNums", 4)),
                   int(d.get("writeQueueNums", 4)), int(d.get("perm", 6)),
                   d.get("topicFilterType", "SINGLE_TAG"), int(d.get("topicSysFlag", 0)),
                   bool(d.get("order", False)), dict(d.get("attributes") or {}))

    @property
    def writable(self) -> bool:
        """The perm has the write bit (``PermName.isWriteable``)."""
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        """The perm has the read bit."""
        return bool(self.perm & PERM_READ)


class TopicConfigManager:
    """``config/topics.json``: the topics of the store.

    Thread-safe; every change is persisted before the call returns.
    """

    def __init__(self, config_dir: str, read_only: bool = False):
        self.path = os.path.join(config_dir, "topics.json")
        self.read_only = read_only
        self.lock = threading.Lock()
        self.topics: dict[str, TopicConfig] = {}
        self.counter = 0
        raw = load_config_file(self.path) or {}
        for name, d in (raw.get("topicConfigTable") or {}).items():
            self.topics[name] = TopicConfig.from_json(name, d)
        self.counter = int((raw.get("dataVersion") or {}).get("counter", 0))
        self._extra = {k: v for k, v in raw.items() if k not in ("topicConfigTable", "dataVersion")}

    def get(self, name: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self.topics.get(name)

    def put(self, cfg: TopicConfig) -> None:
        """Create or replace a topic and persist topics.json."""
        with self.lock:
            self.topics[cfg.topic_name] = cfg
            self._persist()

    def remove(self, name: str) -> None:
        """Delete a topic's config and persist."""
        with self.lock:
            if self.topics.pop(name, None) is not None:
                self._persist()

    def _persist(self) -> None:
        if self.read_only:
            return
        self.counter += 1
        obj = dict(self._extra)
        obj["dataVersion"] = _data_version(self.counter)
        obj["topicConfigTable"] = {n: c.to_json() for n, c in sorted(self.topics.items())}
        persist_config_file(self.path, obj)


class ConsumerOffsetManager:
    """``config/consumerOffset.json``: committed offsets, ``offsetTable["topic@group"][queueId]``.

    The value is the next queue offset to consume (RocketMQ's convention).
    """

    def __init__(self, config_dir: str, read_only: bool = False):
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.read_only = read_only
        self.lock = threading.Lock()
        self.table: dict[str, dict[int, int]] = {}
        raw = load_config_file(self.path) or {}
        for key, queues in (raw.get("offsetTable") or {}).items():
            self.table[key] = {int(q): int(o) for q, o in (queues or {}).items()}
        self.counter = int((raw.get("dataVersion") or {}).get("counter", 0))
        self._extra = {k: v for k, v in raw.items()
                       if k not in ("offsetTable", "dataVersion", "groupTopicMap")}

    def groups(self) -> set[str]:
        """Every group that has an offset (broadcast keys included, without the suffix)."""
        return {k.split(TOPIC_GROUP_SEPARATOR)[1] for k in self.table
                if TOPIC_GROUP_SEPARATOR in k}

    def topics_of(self, group: str) -> dict[str, dict[int, int]]:
        """``{topic: {queueId: offset}}`` committed by ``group``."""
        out = {}
        for key, queues in self.table.items():
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if len(parts) == 2 and parts[1] == group:
                out[parts[0]] = dict(queues)
        return out

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when there is none (``queryOffset``)."""
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set an offset and persist the file atomically before returning."""
        with self.lock:
            self.table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = offset
            self._persist()

    def _persist(self) -> None:
        if self.read_only:
            return
        self.counter += 1
        group_topics: dict[str, list[str]] = {}
        for key in self.table:
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if len(parts) == 2:
                group_topics.setdefault(parts[1], []).append(parts[0])
        obj = dict(self._extra)
        obj["dataVersion"] = _data_version(self.counter)
        obj["groupTopicMap"] = {g: sorted(ts) for g, ts in sorted(group_topics.items())}
        obj["offsetTable"] = {k: {str(q): o for q, o in sorted(v.items())}
                              for k, v in sorted(self.table.items())}
        persist_config_file(self.path, obj)


class SubscriptionGroupManager:
    """``config/subscriptionGroup.json``: the consumer groups (``SubscriptionGroupConfig``)."""

    def __init__(self, config_dir: str, read_only: bool = False):
        self.path = os.path.join(config_dir, "subscriptionGroup.json")
        self.read_only = read_only
        self.lock = threading.Lock()
        raw = load_config_file(self.path) or {}
        self.groups: dict[str, dict] = dict(raw.get("subscriptionGroupTable") or {})
        self.counter = int((raw.get("dataVersion") or {}).get("counter", 0))
        self._extra = {k: v for k, v in raw.items()
                       if k not in ("subscriptionGroupTable", "dataVersion")}

    def create(self, group: str) -> None:
        """Add a group with RocketMQ's defaults and persist (no-op if it exists)."""
        validate_group_name(group)
        with self.lock:
            if group in self.groups:
                return
            self.groups[group] = {
                "attributes": {}, "brokerId": 0, "consumeBroadcastEnable": True,
                "consumeEnable": True, "consumeFromMinEnable": True,
                "consumeMessageOrderly": False, "consumeTimeoutMinute": 15,
                "groupName": group, "groupRetryPolicy": {"type": "CUSTOMIZED"},
                "groupSysFlag": 0, "notifyConsumerIdsChangedEnable": True,
                "retryMaxTimes": 16, "retryQueueNums": 1, "subscriptionDataSet": [],
                "whichBrokerWhenConsumeSlowly": 1}
            if self.read_only:
                return
            self.counter += 1
            obj = dict(self._extra)
            obj.setdefault("forbiddenTable", {})
            obj["dataVersion"] = _data_version(self.counter)
            obj["subscriptionGroupTable"] = dict(sorted(self.groups.items()))
            persist_config_file(self.path, obj)
