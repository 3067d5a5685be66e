"""Broker metadata files under ``config/``: topics, consumer offsets, subscription groups.

RocketMQ serialises these with fastjson 1.x in pretty mode (``RemotingSerializable.toJson``;
docs/format.md): tab indentation, keys sorted, and ``Map<Integer, Long>`` keys written as
bare integers (``{0:543,1:543}``), which is not strict JSON. The reader here accepts both bare and
quoted integer keys; the writer emits strict JSON (quoted keys), which fastjson reads as well, so
the files work with a broker and with ``jq``.

Files are persisted atomically: the old file is kept as ``<file>.bak`` and the new content is
written to ``<file>.tmp``, fsynced and renamed over ``<file>``; the directory is then fsynced.
Loading falls back to ``<file>.bak`` when ``<file>`` is missing, empty or unparsable
(``ConfigManager.load``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigFileError, InvalidNameError
from .source import LOCAL, StoreSource

log = logging.getLogger(__name__)

#: The largest config file read (a consumerOffset.json of a million queues is about 50 MB).
MAX_CONFIG_FILE = 1 << 30
TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR

# TopicValidator: "^[%|a-zA-Z0-9_-]+$", at most 127 chars for a topic (TOPIC_MAX_LENGTH);
# group names follow the same character rule (at most 255 chars).
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")  # used with fullmatch: "$" would pass "a\n"
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
# HookUtils.MAX_TOPIC_LENGTH: the longest topic (UTF-8 bytes) a broker stores, since Linux file
# names hold 255 bytes and each topic is a directory (consumequeue/<topic>).
MAX_TOPIC_BYTES = 255
# readQueueNums/writeQueueNums: RocketMQ requires them positive (a broker refuses 0 or less in
# updateAndCreateTopic); it sets no upper bound, so one stray number can make a listing of
# topics/<t>/ enumerate 10^8 queues. rmqfs accepts 1..MAX_QUEUE_NUMS when creating a topic and
# shows at most that many configured queues of a loaded one (queues with data are always shown).
MAX_QUEUE_NUMS = 1024


def validate_queue_nums(n: object) -> int:
    """Return ``n`` when it is an int in ``1..MAX_QUEUE_NUMS``; raise InvalidNameError (EINVAL)
    otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_QUEUE_NUMS:
        raise InvalidNameError(f"queue count {n!r}: use 1-{MAX_QUEUE_NUMS}")
    return n


PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1


RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"  # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"  # MixAll.DLQ_GROUP_TOPIC_PREFIX


def max_topic_length(name: str) -> int:
    """Longest name a topic may be created with: 127 chars (``TopicValidator.TOPIC_MAX_LENGTH``),
    except the broker's retry and dead-letter topics ``%RETRY%<group>`` / ``%DLQ%<group>``:
    255 (``TopicValidator.RETRY_OR_DLQ_TOPIC_MAX_LENGTH``, RocketMQ after 5.3.3, #9480), which
    is also the most any topic may hold (``HookUtils.MAX_TOPIC_LENGTH``: a topic is a directory
    name). Topics over 127 chars are stored as V2 records (2-byte topic length)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if name.startswith(prefix):
            return MAX_TOPIC_BYTES
    return TOPIC_MAX_LENGTH


def validate_topic_name(name: str) -> None:
    """Raise InvalidNameError unless ``name`` follows ``TopicValidator.validateTopic``
    (``^[%|a-zA-Z0-9_-]+$``, at most :func:`max_topic_length` chars): the rule for creating a
    topic. Loading a store uses :func:`topic_path_problem` instead."""
    limit = max_topic_length(name or "")
    if not name or len(name) > limit or not _VALID_NAME.fullmatch(name):
        raise InvalidNameError(f"invalid topic name {name!r}: use 1-{limit} of [%|a-zA-Z0-9_-]")


@functools.lru_cache(maxsize=4096)
def topic_path_problem(name: str) -> str | None:
    """Why a topic found in a store (``topics.json``, a ``consumequeue/<topic>`` directory, a
    record) cannot be shown, or None when it can.

    A broker loads every name (``TopicConfigManager.decode``,
    ``ConsumeQueueStore.loadConsumeQueues``: no validation), so the client's creation rule does
    not apply here. Refused are only names unsafe as one path component: empty, ``.``,
    ``..``, holding ``/`` or NUL, not UTF-8 (a directory name), or over 255 bytes of UTF-8,
    which no Linux file name holds (``HookUtils.MAX_TOPIC_LENGTH``; a broker cannot create
    the topic's ConsumeQueue directory).
    """
    if not name:
        return "empty name"
    if name in (".", ".."):
        return f"{name!r} names a directory"
    if "/" in name:
        return "contains '/'"
    if "\0" in name:
        return "contains NUL"
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "not UTF-8"
    if n > MAX_TOPIC_BYTES:
        return f"{n} bytes: a file name holds at most {MAX_TOPIC_BYTES}"
    return None


def validate_group_name(name: str) -> None:
    """Raise InvalidNameError unless ``name`` is a valid consumer group name."""
    if not name or len(name) > GROUP_MAX_LENGTH or not _VALID_NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid group name {name!r}: use 1-{GROUP_MAX_LENGTH} of [%|a-zA-Z0-9_-]"
        )


_STRING_OR_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)')


def loads_fastjson(text: str) -> Any:
    """Parse fastjson output: JSON plus bare integer object keys. Raises ValueError."""

    def repl(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return m.group(0)
        return f'{m.group(1)}"{m.group(2)}"{m.group(3)}'

    return json.loads(_STRING_OR_BARE_KEY.sub(repl, text))


def dumps_pretty(obj: object) -> str:
    """Serialise like fastjson's pretty mode: tabs, sorted keys, no space after ':'."""
    return json.dumps(obj, indent="\t", sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: A JSON string of a ``str`` (json's own, in C: what :func:`dumps_pretty` writes for a key).
_json_str: Callable[[str], str] = json.encoder.encode_basestring


def dumps_pretty_table(
    obj: Mapping[str, object], name: str, cache: dict[str, tuple[str, str]]
) -> str:
    """:func:`dumps_pretty` of ``obj``, whose member ``name`` is a table (a dict of str keys)
    whose entries' text is kept in ``cache`` between calls (key -> (its value's ``repr``, its
    text)): an entry whose value is the one rendered before is not rendered again (the
    ``repr`` is a snapshot: two values of the JSON types these files hold have the same one
    only where their JSON is the same; an entry changed in place is seen), and
    ``cache`` ends holding the entries of this table only. A config manager rewrites its whole
    file for each change, which is one entry of thousands (a topic created, an offset
    committed); json's pretty encoder runs in Python (``indent`` turns its C encoder off) and
    took 67 ms a write of 1,600 topics. The text is the same as :func:`dumps_pretty`'s
    (tests/engine/test_config_compat.py holds them equal): an entry's text is its own pretty form
    indented two levels deeper (JSON strings hold no raw newline)."""
    table = obj.get(name)
    if not isinstance(table, dict) or not all(type(k) is str for k in [*obj, *table]):
        return dumps_pretty(obj)  # (not a table of str keys: json's own order and text)
    fresh: dict[str, tuple[str, str]] = {}
    parts = []
    for key in sorted(table):
        value = table[key]
        snapshot = repr(value)
        hit = cache.get(key)
        if hit is None or hit[0] != snapshot:
            hit = (snapshot, dumps_pretty(value).replace("\n", "\n\t\t"))
        fresh[key] = hit
        parts.append(_json_str(key) + ":" + hit[1])
    cache.clear()
    cache.update(fresh)
    table_text = "{\n\t\t" + ",\n\t\t".join(parts) + "\n\t}" if parts else "{}"
    top = [
        _json_str(key)
        + ":"
        + (table_text if key == name else dumps_pretty(obj[key]).replace("\n", "\n\t"))
        for key in sorted(obj)
    ]
    return "{\n\t" + ",\n\t".join(top) + "\n}"


def load_config_file(
    path: str, parse: Callable[[Any], Any] | None = None, source: StoreSource = LOCAL
) -> Any:
    """Load ``path`` or, failing that, ``path.bak``, as RocketMQ's ``ConfigManager.load`` does.

    A file that is missing or empty is skipped; one that is not UTF-8, not (fastjson) JSON,
    nested too deeply, or that ``parse`` refuses, is logged and the ``.bak`` is tried. The
    broker loads an empty table when both fail; rmqfs refuses instead (offsets or topics would
    silently vanish).

    Args:
        path: the config file.
        parse: ``callable(obj) -> value`` that checks the JSON's shape and types and raises
            ValueError or TypeError naming what is wrong; the identity when None.

    Returns:
        ``parse(obj)`` of the first usable file, or None when neither holds anything.

    Raises:
        ConfigFileError: a file exists that cannot be used and no ``.bak`` can; the message
            names each file and its reason.
    """
    return _load_first((path, path + ".bak"), parse, source)


def load_config_file_only(
    path: str, parse: Callable[[Any], Any] | None = None, source: StoreSource = LOCAL
) -> Any:
    """:func:`load_config_file` without the ``.bak`` fallback (for ``rmqfs verify``), read
    through ``source``. Raises ConfigFileError as :func:`load_config_file`."""
    return _load_first((path,), parse, source)


def _load_first(
    paths: Iterable[str], parse: Callable[[Any], Any] | None, source: StoreSource = LOCAL
) -> Any:
    errors = []
    for p in paths:
        try:  # never through a link, never a FIFO (engine.format.source)
            data = source.read_file(p, MAX_CONFIG_FILE)
        except FileNotFoundError:
            continue
        except OSError as exc:
            errors.append(f"{p}: {exc.strerror}")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            errors.append(f"{p}: not UTF-8 (byte {exc.start})")
            continue
        if not text.strip():
            continue
        try:
            obj = loads_fastjson(text)
            value = parse(obj) if parse is not None else obj
        except RecursionError:
            errors.append(f"{p}: JSON nested too deeply")
            continue
        except (ValueError, TypeError) as exc:
            errors.append(f"{p}: {exc}")
            continue
        if errors:
            log.warning(
                "%s; loaded %s instead (as the broker's ConfigManager does)",
                "; ".join(errors),
                os.path.basename(p),
            )
        return value
    if errors:
        raise ConfigFileError("; ".join(errors))
    return None


def _table(raw: object, key: str) -> dict:
    """``raw[key]`` as a dict (missing/null: empty). Raises TypeError naming the field."""
    if not isinstance(raw, dict):
        raise TypeError(f"top level is a {type(raw).__name__}, not an object")
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{key} is a {type(value).__name__}, not an object")
    return value


def _int(value: object, what: str) -> int:
    """A JSON integer (not a bool, not a float). Raises TypeError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} is {value!r}, not an integer")
    return value


def _counter(raw: object) -> int:
    dv = raw.get("dataVersion") if isinstance(raw, dict) else None
    if not isinstance(dv, dict):
        return 0
    c = dv.get("counter", 0)
    return c if isinstance(c, int) and not isinstance(c, bool) else 0


def persist_config_file(
    path: str, obj: object, table: tuple[str, dict[str, tuple[str, str]]] | None = None
) -> None:
    """Write ``obj`` to ``path`` atomically, keeping the previous content as ``path.bak``.
    ``table``: ``(the name of obj's table, the writer's cache of its entries)``, rendered by
    :func:`dumps_pretty_table` (the same text, an entry rendered once until it changes)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    if table is not None and isinstance(obj, dict):
        data = dumps_pretty_table(obj, table[0], table[1]).encode("utf-8")
    else:
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
    """Write ``path`` through ``path.tmp`` (written, fsynced, renamed). A failure (ENOSPC, EIO)
    removes the temporary file, leaves ``path`` as it was and raises the OSError."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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
        return {
            "attributes": self.attributes,
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, name: str, d: dict) -> TopicConfig:
        """Build from a ``topicConfigTable`` entry (4.x entries lack ``attributes``).

        Raises TypeError naming the field when a value has the wrong JSON type.
        """
        if not isinstance(d, dict):
            raise TypeError(f"topic {name!r}: entry is not an object")
        where = f"topic {name!r}: "
        attrs = d.get("attributes") or {}
        if not isinstance(attrs, dict):
            raise TypeError(where + "attributes is not an object")
        tft = d.get("topicFilterType", "SINGLE_TAG")
        if not isinstance(tft, str):
            raise TypeError(where + "topicFilterType is not a string")
        return cls(
            name,
            _int(d.get("readQueueNums", 4), where + "readQueueNums"),
            _int(d.get("writeQueueNums", 4), where + "writeQueueNums"),
            _int(d.get("perm", 6), where + "perm"),
            tft,
            _int(d.get("topicSysFlag", 0), where + "topicSysFlag"),
            bool(d.get("order", False)),
            dict(attrs),
        )

    @property
    def shown_queue_nums(self) -> int:
        """Configured queues a listing shows: max(read, write), clamped to
        ``0..MAX_QUEUE_NUMS`` (a topics.json written elsewhere may hold any number)."""
        return max(0, min(max(self.read_queue_nums, self.write_queue_nums), MAX_QUEUE_NUMS))

    @property
    def consumed_queue_nums(self) -> int:
        """Queues consumers read: ``readQueueNums``, clamped to ``0..MAX_QUEUE_NUMS`` (the queues
        ``AdminBrokerProcessor.getConsumeStats`` reports a group's progress on)."""
        return max(0, min(self.read_queue_nums, MAX_QUEUE_NUMS))

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

    def __init__(
        self,
        config_dir: str,
        read_only: bool = False,
        raw: dict | None = None,
        source: StoreSource = LOCAL,
    ):
        """``raw``: the table when it comes from elsewhere than the file (a RocksDB config,
        :func:`engine.format.rocksdbconfig.load_rocksdb_config`); the file is then not read."""
        self.path = os.path.join(config_dir, "topics.json")
        self.read_only = read_only
        self.lock = threading.Lock()
        # each table entry's text as last written (persist_config_file's cache)
        self._rendered: dict[str, tuple[str, str]] = {}
        self.topics: dict[str, TopicConfig] = {}
        self.skipped: dict[str, dict] = {}  # entries with unsafe names, written back as is
        self.skip_reasons: dict[str, str] = {}  # their reasons (topic_path_problem)
        if raw is None:
            raw = load_config_file(self.path, self.parse, source) or {}
        for name, d in _table(raw, "topicConfigTable").items():
            problem = topic_path_problem(name)
            if problem is not None:
                log.warning("%s: topic %r skipped: %s", self.path, name, problem)
                self.skipped[name] = d
                self.skip_reasons[name] = problem
                continue
            cfg = TopicConfig.from_json(name, d)
            if max(cfg.read_queue_nums, cfg.write_queue_nums) > MAX_QUEUE_NUMS:
                log.warning(
                    "%s: topic %s has %d queues; only queues 0-%d and queues with data are shown",
                    self.path,
                    name,
                    max(cfg.read_queue_nums, cfg.write_queue_nums),
                    MAX_QUEUE_NUMS - 1,
                )
            self.topics[name] = cfg
        self.counter = _counter(raw)
        self._extra = {k: v for k, v in raw.items() if k not in ("topicConfigTable", "dataVersion")}

    @staticmethod
    def parse(raw: object) -> object:
        for name, d in _table(raw, "topicConfigTable").items():
            TopicConfig.from_json(name, d)
        return raw

    def get(self, name: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self.topics.get(name)

    def put(self, cfg: TopicConfig) -> None:
        """Create or replace a topic and persist topics.json.

        When the write fails (ENOSPC, ...) the table is left as it was and OSError raised.
        InvalidNameError for a name unsafe as a path (:func:`topic_path_problem`): the
        broker's own topics (``%RETRY%``/``%DLQ%`` of long groups) pass, a name no
        ``consumequeue/<topic>`` directory can have does not (``HookUtils.checkBeforePutMessage``).
        """
        problem = topic_path_problem(cfg.topic_name)
        if problem is not None:
            raise InvalidNameError(f"invalid topic name {cfg.topic_name!r}: {problem}")
        with self.lock:
            old = self.topics.get(cfg.topic_name)
            self.topics[cfg.topic_name] = cfg
            try:
                self._persist()
            except BaseException:
                if old is None:
                    del self.topics[cfg.topic_name]
                else:
                    self.topics[cfg.topic_name] = old
                raise

    def remove(self, name: str) -> None:
        """Delete a topic's config and persist (restored in memory when the write fails)."""
        with self.lock:
            old = self.topics.pop(name, None)
            if old is not None:
                try:
                    self._persist()
                except BaseException:
                    self.topics[name] = old
                    raise

    def _persist(self) -> None:
        if self.read_only:
            return
        obj = dict(self._extra)
        obj["dataVersion"] = _data_version(self.counter + 1)
        table = {n: c.to_json() for n, c in self.topics.items()}
        table.update(self.skipped)
        obj["topicConfigTable"] = table
        persist_config_file(self.path, obj, ("topicConfigTable", self._rendered))
        self.counter += 1


#: ``BrokerPathConfigHelper.getLmqConsumerOffsetPath``: the offsets file of a broker with LMQ
LMQ_CONSUMER_OFFSET_FILE = "lmqConsumerOffset.json"


class ConsumerOffsetManager:
    """``config/consumerOffset.json``: committed offsets, ``offsetTable["topic@group"][queueId]``.

    The value is the next queue offset to consume (RocketMQ's convention).
    """

    def __init__(
        self,
        config_dir: str,
        read_only: bool = False,
        raw: dict | None = None,
        source: StoreSource = LOCAL,
    ):
        """``raw``: the table when it comes from elsewhere than the file (a RocksDB config,
        :func:`engine.format.rocksdbconfig.load_rocksdb_config`); the file is then not read."""
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.read_only = read_only
        self.lock = threading.Lock()
        # each table entry's text as last written (persist_config_file's cache)
        self._rendered: dict[str, tuple[str, str]] = {}
        self.table: dict[str, dict[int, int]] = {}
        # (table, counter, its groups, {group: {topic: queues}}): built once per change
        self._index: tuple | None = None
        if raw is None:
            raw = load_config_file(self.path, self.parse, source) or {}
        self.table = self._offsets(raw)
        self.counter = _counter(raw)
        self._extra = {
            k: v for k, v in raw.items() if k not in ("offsetTable", "dataVersion", "groupTopicMap")
        }
        # LmqConsumerOffsetManager (a broker with enableLmq) keeps every group's offsets in
        # lmqConsumerOffset.json instead: read-only, its offsets are shown as well (they win
        # over consumerOffset.json's); rmqfs never writes that file (an LMQ store is only read).
        self.lmq_path = os.path.join(config_dir, LMQ_CONSUMER_OFFSET_FILE)
        if read_only:
            self.table.update(load_config_file(self.lmq_path, self.parse_lmq, source) or {})

    @classmethod
    def parse(cls, raw: object) -> object:
        """``raw`` when :meth:`_offsets` accepts it (for :func:`load_config_file`)."""
        cls._offsets(raw)
        return raw

    @classmethod
    def parse_lmq(cls, raw: object) -> dict[str, dict[int, int]]:
        """The offsets of ``config/lmqConsumerOffset.json`` (``LmqConsumerOffsetManager``'s
        JSON) as ``{"topic@group": {queueId: offset}}``: its ``offsetTable`` (the shape of
        consumerOffset.json: groups that are not LMQs) and its ``lmqOffsetTable``
        (``{"topic@group": offset}`` of ``%LMQ%`` groups, queue 0), the latter winning.
        Raises TypeError/ValueError for another shape (for :func:`load_config_file`)."""
        table = cls._offsets(raw)
        for key, off in _table(raw, "lmqOffsetTable").items():
            table[key] = {0: _int(off, f"lmqOffsetTable[{key!r}]")}
        return table

    @staticmethod
    def _offsets(raw: object) -> dict[str, dict[int, int]]:
        """``offsetTable`` as ``{"topic@group": {queueId: offset}}``; TypeError/ValueError when
        it is not an object of objects mapping integer queue ids to integer offsets."""
        table = {}
        for key, queues in _table(raw, "offsetTable").items():
            if queues is None:
                queues = {}
            if not isinstance(queues, dict):
                raise TypeError(f"offsetTable[{key!r}] is not an object")
            row = {}
            for q, o in queues.items():
                try:
                    qid = int(q)
                except ValueError:
                    raise ValueError(
                        f"offsetTable[{key!r}]: queue id {q!r} is not an integer"
                    ) from None
                row[qid] = _int(o, f"offsetTable[{key!r}][{q}]")
            table[key] = row
        return table

    def _groups_index(self) -> tuple[set[str], dict[str, dict[str, dict[int, int]]]]:
        """``(every group with an offset, {group: {topic: queues}})`` of the table, built in
        one pass and kept until the table changes (a lookup or a listing per group costs that
        group, not the table: 20,000 groups took ``ls groups/`` 2 min 48 s)."""
        idx = self._index
        if idx is not None and idx[0] is self.table and idx[1] == self.counter:
            return idx[2], idx[3]
        table = self.table
        groups: set[str] = set()
        by_group: dict[str, dict[str, dict[int, int]]] = {}
        for key, queues in list(table.items()):
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if len(parts) < 2:
                continue
            if _VALID_NAME.fullmatch(parts[1]) and len(parts[1]) <= GROUP_MAX_LENGTH:
                groups.add(parts[1])
            if len(parts) == 2:
                by_group.setdefault(parts[1], {})[parts[0]] = queues
        self._index = (table, self.counter, groups, by_group)
        return groups, by_group

    def groups(self) -> set[str]:
        """Every group that has an offset (broadcast keys included, without the suffix); a
        set the caller must not change."""
        return self._groups_index()[0]

    def topics_of(self, group: str) -> dict[str, dict[int, int]]:
        """``{topic: {queueId: offset}}`` committed by ``group``."""
        return {t: dict(q) for t, q in self._groups_index()[1].get(group, {}).items()}

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when there is none (``queryOffset``)."""
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set an offset and persist the file atomically before returning
        (:meth:`commit_queues` of one queue)."""
        self.commit_queues(group, topic, {queue_id: offset})

    def commit_queues(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Set the offsets of queues of ``topic`` for ``group`` (``{queueId: offset}``) in one
        write of the file: all of them or, on a failed write (ENOSPC...), none, in memory too
        (a commit; mqadmin's resetOffsetByTime of a topic, one request a broker). What a
        failure undoes is the row's old values, not a copy of the table."""
        if not offsets:
            return
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self.lock:
            row = self.table.get(key)
            old = {} if row is None else {q: row[q] for q in offsets if q in row}
            self.table.setdefault(key, {}).update(offsets)
            self._index = None
            try:
                self._persist()
            except BaseException:  # ENOSPC...: the commit did not happen, in memory either
                if row is None:
                    del self.table[key]
                else:
                    for q in offsets:
                        if q in old:
                            row[q] = old[q]
                        else:
                            del row[q]
                self._index = None
                raise
            self.counter += 1

    def _mutate(self, change: Callable[[dict[str, dict[int, int]]], Any]) -> Any:
        """Apply ``change(table)`` and persist; on a failed write (ENOSPC...) the table is
        restored, in memory too, and the OSError raised. Returns what ``change`` returns."""
        with self.lock:
            before = {k: dict(v) for k, v in self.table.items()}
            result = change(self.table)
            self._index = None
            try:
                self._persist()
            except BaseException:
                self.table = before
                raise
            self.counter += 1
            return result

    def remove_topic(self, topic: str) -> list[str]:
        """``ConsumerOffsetManager.cleanOffsetByTopic``: drop every ``topic@group`` entry
        (keys of exactly two parts whose first is ``topic``). Returns the removed keys."""

        def change(table: dict[str, dict[int, int]]) -> list[str]:
            gone = [
                k
                for k in table
                if k.split(TOPIC_GROUP_SEPARATOR)[0] == topic
                and len(k.split(TOPIC_GROUP_SEPARATOR)) == 2
            ]
            for k in gone:
                del table[k]
            return gone

        return self._mutate(change) if self._keys(topic=topic) else []

    def remove_group(self, group: str) -> list[str]:
        """``ConsumerOffsetManager.removeOffset``: drop every ``topic@group`` entry of
        ``group``. Returns the removed keys."""

        def change(table: dict[str, dict[int, int]]) -> list[str]:
            gone = [
                k
                for k in table
                if len(k.split(TOPIC_GROUP_SEPARATOR)) == 2
                and k.split(TOPIC_GROUP_SEPARATOR)[1] == group
            ]
            for k in gone:
                del table[k]
            return gone

        return self._mutate(change) if self._keys(group=group) else []

    def clone(self, src: str, dest: str, topic: str) -> dict[int, int] | None:
        """``ConsumerOffsetManager.cloneOffset``: ``topic@dest`` becomes a copy of
        ``topic@src`` (replacing what dest had). Returns the copied offsets, or None (and
        changes nothing) when ``src`` has none for ``topic``."""
        offsets = self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{src}")
        if offsets is None:
            return None
        copy = dict(offsets)

        def change(table: dict[str, dict[int, int]]) -> None:
            table[f"{topic}{TOPIC_GROUP_SEPARATOR}{dest}"] = dict(copy)

        self._mutate(change)
        return copy

    def _keys(self, topic: str | None = None, group: str | None = None) -> list[str]:
        out = []
        for k in self.table:
            parts = k.split(TOPIC_GROUP_SEPARATOR)
            if (
                len(parts) == 2
                and (topic is None or parts[0] == topic)
                and (group is None or parts[1] == group)
            ):
                out.append(k)
        return out

    def _persist(self) -> None:
        if self.read_only:
            return
        group_topics: dict[str, list[str]] = {}
        for key in self.table:
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if len(parts) == 2:
                group_topics.setdefault(parts[1], []).append(parts[0])
        obj = dict(self._extra)
        obj["dataVersion"] = _data_version(self.counter + 1)
        obj["groupTopicMap"] = {g: sorted(ts) for g, ts in sorted(group_topics.items())}
        obj["offsetTable"] = {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}
        persist_config_file(self.path, obj, ("offsetTable", self._rendered))


class SubscriptionGroupManager:
    """``config/subscriptionGroup.json``: the consumer groups (``SubscriptionGroupConfig``)."""

    def __init__(
        self,
        config_dir: str,
        read_only: bool = False,
        raw: dict | None = None,
        source: StoreSource = LOCAL,
    ):
        """``raw``: the table when it comes from elsewhere than the file (a RocksDB config,
        :func:`engine.format.rocksdbconfig.load_rocksdb_config`); the file is then not read."""
        self.path = os.path.join(config_dir, "subscriptionGroup.json")
        self.read_only = read_only
        self.lock = threading.Lock()
        # each table entry's text as last written (persist_config_file's cache)
        self._rendered: dict[str, tuple[str, str]] = {}
        if raw is None:
            raw = load_config_file(self.path, self.parse, source) or {}
        self.groups: dict[str, dict] = {}
        self.skipped: dict[str, object] = {}  # entries with invalid names, written back as is
        for name, d in _table(raw, "subscriptionGroupTable").items():
            try:
                validate_group_name(name)
            except InvalidNameError as exc:
                log.warning("%s: group skipped: %s", self.path, exc)
                self.skipped[name] = d
                continue
            self.groups[name] = d
        self.counter = _counter(raw)
        self._extra = {
            k: v for k, v in raw.items() if k not in ("subscriptionGroupTable", "dataVersion")
        }

    @staticmethod
    def parse(raw: object) -> object:
        for name, d in _table(raw, "subscriptionGroupTable").items():
            if not isinstance(d, dict):
                raise TypeError(f"subscriptionGroupTable[{name!r}] is not an object")
        return raw

    @staticmethod
    def default_entry(group: str) -> dict:
        """A new ``SubscriptionGroupConfig`` with RocketMQ's field defaults."""
        return {
            "attributes": {},
            "brokerId": 0,
            "consumeBroadcastEnable": True,
            "consumeEnable": True,
            "consumeFromMinEnable": True,
            "consumeMessageOrderly": False,
            "consumeTimeoutMinute": 15,
            "groupName": group,
            "groupRetryPolicy": {"type": "CUSTOMIZED"},
            "groupSysFlag": 0,
            "notifyConsumerIdsChangedEnable": True,
            "retryMaxTimes": 16,
            "retryQueueNums": 1,
            "subscriptionDataSet": [],
            "whichBrokerWhenConsumeSlowly": 1,
        }

    def create(self, group: str) -> None:
        """Add a group with RocketMQ's defaults and persist (no-op if it exists)."""
        validate_group_name(group)
        with self.lock:
            if group in self.groups:
                return
            self._replace(group, self.default_entry(group))

    def update(self, group: str, fields: dict) -> dict:
        """``SubscriptionGroupManager.updateSubscriptionGroupConfig``: set ``fields``
        (SubscriptionGroupConfig's JSON names, checked by the caller) on the group, creating
        it with the defaults first when missing, and persist. Returns the new entry."""
        validate_group_name(group)
        with self.lock:
            entry = dict(self.groups.get(group) or self.default_entry(group))
            entry.update(fields)
            entry["groupName"] = group
            self._replace(group, entry)
            return entry

    def remove(self, group: str) -> bool:
        """``deleteSubscriptionGroupConfig``: drop the group's entry, and its
        ``forbiddenTable`` entry (``forbiddenTable.remove(groupName)``: a group made again
        under the name starts with no topic forbidden), and persist. Returns whether it
        existed."""
        with self.lock:
            if group not in self.groups:
                return False
            self._replace(group, None)
            return True

    def _replace(self, group: str, entry: dict | None) -> None:
        """Set (or with None remove) one entry and persist, under ``self.lock``; a failed
        write (ENOSPC...) leaves no trace in memory either."""
        old = self.groups.get(group)
        if entry is None:
            self.groups.pop(group, None)
        else:
            self.groups[group] = entry
        if self.read_only:
            return
        obj = dict(self._extra)
        obj.setdefault("forbiddenTable", {})
        forbidden = obj["forbiddenTable"]
        if entry is None and isinstance(forbidden, dict) and group in forbidden:
            obj["forbiddenTable"] = {k: v for k, v in forbidden.items() if k != group}
        obj["dataVersion"] = _data_version(self.counter + 1)
        obj["subscriptionGroupTable"] = {**self.groups, **self.skipped}
        try:
            persist_config_file(self.path, obj, ("subscriptionGroupTable", self._rendered))
        except BaseException:
            if old is None:
                self.groups.pop(group, None)
            else:
                self.groups[group] = old
            raise
        if "forbiddenTable" in self._extra:
            self._extra["forbiddenTable"] = obj["forbiddenTable"]
        self.counter += 1


#: topics.json fields ``updateTopic`` may change (TopicConfig's JSON name -> keyword of
#: ``MessageStore.update_topic``).
TOPIC_UPDATE_FIELDS = {
    "readQueueNums": "read_queue_nums",
    "writeQueueNums": "write_queue_nums",
    "perm": "perm",
    "order": "order",
}


def topic_update_from_json(current: TopicConfig, obj: object) -> dict:
    """The ``MessageStore.update_topic`` keywords of a JSON object written to a topic's
    ``topic.json``: only :data:`TOPIC_UPDATE_FIELDS` may change (their values are checked by
    ``update_topic``); any other field of the entry may be present (the file read, edited and
    written back) but must keep its value. Raises InvalidNameError (EINVAL) naming the field."""
    if not isinstance(obj, dict):
        raise InvalidNameError("topic.json takes a JSON object, e.g. {\"perm\": 4}")
    now = current.to_json()
    out = {}
    for name, value in obj.items():
        if name in TOPIC_UPDATE_FIELDS:
            if name == "order" and not isinstance(value, bool):
                raise InvalidNameError(f"order {value!r}: use true or false")
            if name != "order" and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidNameError(f"{name} {value!r}: use an integer")
            out[TOPIC_UPDATE_FIELDS[name]] = value
        elif name in now:
            if value != now[name]:
                raise InvalidNameError(
                    f"{name} cannot be changed here (only {', '.join(TOPIC_UPDATE_FIELDS)})"
                )
        else:
            raise InvalidNameError(
                f"unknown topic field {name!r} (settable: {', '.join(TOPIC_UPDATE_FIELDS)})"
            )
    return out


#: ``SubscriptionGroupConfig`` fields ``updateSubGroup`` may set: name -> (type, min, max).
GROUP_FIELDS = {
    "consumeEnable": (bool, None, None),
    "consumeFromMinEnable": (bool, None, None),
    "consumeBroadcastEnable": (bool, None, None),
    "consumeMessageOrderly": (bool, None, None),
    "notifyConsumerIdsChangedEnable": (bool, None, None),
    "retryQueueNums": (int, 0, MAX_QUEUE_NUMS),
    "retryMaxTimes": (int, -1, 2**31 - 1),
    "brokerId": (int, 0, 2**63 - 1),
    "whichBrokerWhenConsumeSlowly": (int, 0, 2**63 - 1),
    "consumeTimeoutMinute": (int, 1, 2**31 - 1),
    "groupSysFlag": (int, 0, 2**31 - 1),
}


def check_group_fields(fields: dict) -> dict:
    """``fields`` when each is a settable ``SubscriptionGroupConfig`` field of the right JSON
    type (booleans true/false, integers in range, not ``true`` for an integer); raises
    InvalidNameError (EINVAL) naming the first that is not."""
    if not isinstance(fields, dict):
        raise InvalidNameError("a group's fields must be a JSON object")
    for name, value in fields.items():
        spec = GROUP_FIELDS.get(name)
        if spec is None:
            raise InvalidNameError(
                f"unknown or read-only group field {name!r} (settable: {', '.join(GROUP_FIELDS)})"
            )
        kind, lo, hi = spec
        if kind is bool or lo is None or hi is None:
            if not isinstance(value, bool):
                raise InvalidNameError(f"{name} {value!r}: use true or false")
        elif isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise InvalidNameError(f"{name} {value!r}: use an integer in {lo}..{hi}")
    return dict(fields)


class DeletedTopics:
    """``config/rmqfs.deletedTopics.json``: topics deleted while records of theirs remain in
    the CommitLog, each with the CommitLog offset at its deletion.

    RocketMQ keeps no such record: its ``deleteTopic`` drops the ConsumeQueues and relies on
    the reput starting past them (``DefaultMessageStore.start``: reputFromOffset = the
    largest physical offset any ConsumeQueue holds), so a crash recovery that scans from an
    older segment (``CommitLog.recoverAbnormally``), or a deleted topic whose records end
    the CommitLog, dispatches them again and the topic's queues come back. rmqfs writes this
    file so that recovery, ``recover --rebuild`` and ``verify`` skip a deleted topic's records
    below that offset; records written after (a topic created again) are the new topic's.
    Entries go once the CommitLog's min offset passes them (:meth:`prune`). A broker ignores
    the file. Format: fastjson like the broker's files, ``{"deletedTopicTable": {topic:
    offset}, "dataVersion": ...}``.
    """

    FILE = "rmqfs.deletedTopics.json"

    def __init__(self, config_dir: str, read_only: bool = False, source: StoreSource = LOCAL):
        self.path = os.path.join(config_dir, self.FILE)
        self.read_only = read_only
        self.lock = threading.Lock()
        raw = load_config_file(self.path, self.parse, source) or {}
        self.table: dict[str, int] = dict(_table(raw, "deletedTopicTable"))
        self.counter = _counter(raw)

    @staticmethod
    def parse(raw: object) -> object:
        for name, off in _table(raw, "deletedTopicTable").items():
            _int(off, f"deletedTopicTable[{name!r}]")
        return raw

    def below(self, topic: str) -> int:
        """Records of ``topic`` below this CommitLog offset belong to a deleted topic (0:
        none)."""
        return self.table.get(topic, 0)

    def add(self, topic: str, offset: int) -> None:
        """Remember ``topic`` deleted at CommitLog ``offset`` and persist."""
        with self.lock:
            old = self.table.get(topic)
            self.table[topic] = max(offset, old or 0)
            try:
                self._persist()
            except BaseException:
                if old is None:
                    del self.table[topic]
                else:
                    self.table[topic] = old
                raise

    def prune(self, min_offset: int) -> None:
        """Forget deletions whose records have all expired (offset <= CommitLog min)."""
        with self.lock:
            gone = [t for t, off in self.table.items() if off <= min_offset]
            if not gone or self.read_only:
                return
            for t in gone:
                del self.table[t]
            self._persist()

    def _persist(self) -> None:
        if self.read_only:
            return
        if not self.table and not os.path.exists(self.path):
            return
        obj = {
            "dataVersion": _data_version(self.counter + 1),
            "deletedTopicTable": dict(sorted(self.table.items())),
        }
        persist_config_file(self.path, obj)
        self.counter += 1


def _parse_delay_offsets(raw: object) -> object:
    for q, o in _table(raw, "offsetTable").items():
        _int(o, f"offsetTable[{q}]")
    return raw


def config_parsers() -> dict:
    """``{file name under config/: parse function}`` for :func:`load_config_file`: the checks
    the store applies when it opens, for ``rmqfs verify`` to apply the same."""
    return {
        "topics.json": TopicConfigManager.parse,
        "consumerOffset.json": ConsumerOffsetManager.parse,
        "subscriptionGroup.json": SubscriptionGroupManager.parse,
        "delayOffset.json": _parse_delay_offsets,
        DeletedTopics.FILE: DeletedTopics.parse,
    }
