"""RocksDB config (RocketMQ 5.2+): topics, subscription groups and consumer offsets.

When a broker keeps its config in RocksDB, the JSON files under ``config/`` are no longer
written (``topics.json`` is stale then), so these databases are the source of truth.

v1 (``storeType=defaultRocksDB``, ``RocksDBTopicConfigManager``,
``RocksDBSubscriptionGroupManager``, ``RocksDBConsumerOffsetManager`` over
``ConfigRocksDBStorage``): one database each, ``config/topics/``, ``config/subscriptionGroups/``,
``config/consumerOffsets/`` (``rocksdbConfigFilePath``), families ``default``,
``kvDataVersion`` and ``forbidden``. In ``default`` the key is the UTF-8 name (a topic, a
group, or ``topic@group`` for offsets) and the value fastjson JSON: a ``TopicConfig``, a
``SubscriptionGroupConfig``, or ``{"offsetTable": {queueId: offset}}``
(``RocksDBOffsetSerializeWrapper``).

v2 (5.3.2+, ``configManagerVersion=v2``, ``TopicConfigManagerV2``,
``SubscriptionGroupManagerV2``, ``ConsumerOffsetManagerV2`` over ``ConfigStorage``): one
database ``config/rdb/``, family ``default``, binary keys (big-endian)::

    table record   byte 0x01 (TablePrefix.TABLE) | short tableId | byte 0x02 (RecordPrefix.DATA)
    topic, group   ... | short nameLen | name                    (ConfigHelper.keyBufOf)
                   value: byte 0x01 (SerializationType.JSON) | JSON   (ConfigHelper.valueBufOf)
    offset         ... | short groupLen | group | 0x01 | short topicLen | topic | 0x01 | int queueId
                   value: long offset              (ConsumerOffsetManagerV2.keyOfConsumerOffset)
    data version   0x01 | short tableId | byte 0x01 (RecordPrefix.DATA_VERSION) | "data_version"

tableId: 1 consumer offsets, 2 pull offsets, 3 topics, 4 subscription groups (``TableId``).

:func:`load_rocksdb_config` returns the tables in the shape of the JSON files, so the
managers of :mod:`engine.format.config` read them unchanged. rmqfs writes none of these
databases (a writer refuses the store: ``engine.service.storetree.foreign_layouts``).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from ..errors import CorruptRecordError
from .config import loads_fastjson
from .rocksdb import CTRL_1, ReadOnlyDB, is_rocksdb_dir

#: v1 databases under config/ (``rocksdbConfigFilePath``) and the JSON table each replaces
V1_DATABASES = {
    "topics": "topicConfigTable",
    "subscriptionGroups": "subscriptionGroupTable",
    "consumerOffsets": "offsetTable",
}
#: the v2 database under config/ (``ConfigStorage``)
V2_DATABASE = "rdb"

TABLE_PREFIX = 0x01  # TablePrefix.TABLE
RECORD_DATA_VERSION = 0x01  # RecordPrefix.DATA_VERSION
RECORD_DATA = 0x02  # RecordPrefix.DATA
JSON_SERIALIZATION = 0x01  # SerializationType.JSON
TABLE_CONSUMER_OFFSET = 1  # TableId.CONSUMER_OFFSET
TABLE_PULL_OFFSET = 2  # TableId.PULL_OFFSET
TABLE_TOPIC = 3  # TableId.TOPIC
TABLE_SUBSCRIPTION_GROUP = 4  # TableId.SUBSCRIPTION_GROUP

#: v2 record key head: byte tablePrefix | short tableId | byte recordPrefix
V2_KEY_HEAD = struct.Struct(">BhB")
#: v2 length of a name in a key
V2_NAME_LEN = struct.Struct(">h")
#: v2 offset key after the group: CTRL_1 | short topicLen (the topic follows)
V2_OFFSET_TOPIC_HEAD = struct.Struct(">Bh")
#: v2 offset key end: CTRL_1 | int queueId
V2_OFFSET_KEY_TAIL = struct.Struct(">Bi")
#: v2 offset value: long offset
V2_OFFSET_VALUE = struct.Struct(">q")


def rocksdb_config_dirs(config_dir: str) -> list[str]:
    """The RocksDB config databases under ``config_dir`` (names: ``rdb`` and/or the v1 ones)."""
    out = []
    for name in (V2_DATABASE, *V1_DATABASES):
        d = os.path.join(config_dir, name)
        try:
            if os.path.isdir(d) and is_rocksdb_dir(os.listdir(d)):
                out.append(name)
        except OSError:
            continue
    return out


def _json(raw: bytes, what: str) -> Any:
    try:
        return loads_fastjson(raw.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptRecordError(f"{what}: not JSON ({exc})") from None


def _name(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CorruptRecordError(f"{what}: key {raw.hex()} is not UTF-8") from None


def load_v1(path: str, table: str) -> dict:
    """One v1 database (``RocksDBConfigManager.loadData``) as ``{table: {name: value}}``.

    ``table`` is ``topicConfigTable``, ``subscriptionGroupTable`` or ``offsetTable``; offsets'
    values are their ``offsetTable`` maps (``RocksDBConsumerOffsetManager.decodeOffset``).
    Raises CorruptRecordError for a value that is not JSON."""
    db = ReadOnlyDB(path)
    try:
        out = {}
        for key, value in db.family("default").items():
            assert isinstance(key, bytes)  # a raw-mode database's keys are bytes
            name = _name(key, path)
            obj = _json(value, f"{path}: {name}")
            if table == "offsetTable":
                if not isinstance(obj, dict):
                    raise CorruptRecordError(f"{path}: {name}: not an object")
                obj = obj.get("offsetTable") or {}
            out[name] = obj
        return {table: out}
    finally:
        db.close()


def decode_v2_name_key(key: bytes, table_id: int) -> str | None:
    """The name of a v2 topic or group key of table ``table_id`` (``ConfigHelper.keyBufOf``),
    None for a key of another table or record; CorruptRecordError when malformed."""
    if len(key) < V2_KEY_HEAD.size:
        return None
    prefix, tid, record = V2_KEY_HEAD.unpack_from(key)
    if prefix != TABLE_PREFIX or tid != table_id or record != RECORD_DATA:
        return None
    pos = V2_KEY_HEAD.size
    if len(key) < pos + V2_NAME_LEN.size:
        raise CorruptRecordError(f"config/rdb: key {key.hex()} is too short")
    (n,) = V2_NAME_LEN.unpack_from(key, pos)
    pos += V2_NAME_LEN.size
    if n < 0 or len(key) != pos + n:
        raise CorruptRecordError(f"config/rdb: key {key.hex()} is malformed")
    return _name(key[pos:], "config/rdb")


def decode_v2_offset_key(key: bytes) -> tuple[str, str, int] | None:
    """``(group, topic, queueId)`` of a v2 consumer offset key
    (``ConsumerOffsetManagerV2.keyOfConsumerOffset``), None for another table's key;
    CorruptRecordError when malformed."""
    if len(key) < V2_KEY_HEAD.size:
        return None
    prefix, tid, record = V2_KEY_HEAD.unpack_from(key)
    if prefix != TABLE_PREFIX or tid != TABLE_CONSUMER_OFFSET or record != RECORD_DATA:
        return None
    try:
        pos = V2_KEY_HEAD.size
        (gn,) = V2_NAME_LEN.unpack_from(key, pos)
        pos += V2_NAME_LEN.size
        group = key[pos : pos + gn]
        pos += gn
        c1, tn = V2_OFFSET_TOPIC_HEAD.unpack_from(key, pos)
        pos += V2_OFFSET_TOPIC_HEAD.size
        topic = key[pos : pos + tn]
        pos += tn
        c2, qid = V2_OFFSET_KEY_TAIL.unpack_from(key, pos)
        pos += V2_OFFSET_KEY_TAIL.size
    except struct.error:
        raise CorruptRecordError(f"config/rdb: offset key {key.hex()} is too short") from None
    if c1 != CTRL_1 or c2 != CTRL_1 or gn < 0 or tn < 0 or pos != len(key):
        raise CorruptRecordError(f"config/rdb: offset key {key.hex()} is malformed")
    return _name(group, "config/rdb"), _name(topic, "config/rdb"), qid


def _v2_json(value: bytes, what: str) -> Any:
    if not value or value[0] != JSON_SERIALIZATION:
        raise CorruptRecordError(f"config/rdb: {what}: not a JSON value (SerializationType)")
    return _json(value[1:], f"config/rdb: {what}")


def load_v2(path: str) -> dict[str, dict]:
    """The v2 database as ``{"topicConfigTable": ..., "subscriptionGroupTable": ...,
    "offsetTable": {"topic@group": {queueId: offset}}}`` (``TopicConfigManagerV2.loadTopicConfig``,
    ``SubscriptionGroupManagerV2``, ``ConsumerOffsetManagerV2.loadConsumerOffsets``; LMQ offsets
    left out as it does). Raises CorruptRecordError for a malformed key or value."""
    db = ReadOnlyDB(path)
    topics: dict = {}
    groups: dict = {}
    offsets: dict[str, dict[int, int]] = {}
    try:
        for key, value in db.family("default").items():
            assert isinstance(key, bytes)  # a raw-mode database's keys are bytes
            name = decode_v2_name_key(key, TABLE_TOPIC)
            if name is not None:
                topics[name] = _v2_json(value, f"topic {name}")
                continue
            name = decode_v2_name_key(key, TABLE_SUBSCRIPTION_GROUP)
            if name is not None:
                groups[name] = _v2_json(value, f"group {name}")
                continue
            off = decode_v2_offset_key(key)
            if off is not None:
                group, topic, qid = off
                if len(value) != V2_OFFSET_VALUE.size:
                    raise CorruptRecordError(
                        f"config/rdb: offset of {topic}@{group} is not 8 bytes"
                    )
                if not topic.startswith("%LMQ%"):  # MixAll.isLmq: skipped on load
                    offsets.setdefault(f"{topic}@{group}", {})[qid] = V2_OFFSET_VALUE.unpack(value)[
                        0
                    ]
    finally:
        db.close()
    return {"topicConfigTable": topics, "subscriptionGroupTable": groups, "offsetTable": offsets}


def load_rocksdb_config(config_dir: str) -> dict[str, dict] | None:
    """The config tables a RocksDB config holds, the JSON files' shape, keyed by the JSON file
    each replaces (``topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``):
    v2 (``config/rdb``) when present, else the v1 databases present; None when there is none.
    Raises CorruptRecordError for a database or record that does not read."""
    names = rocksdb_config_dirs(config_dir)
    if not names:
        return None
    if V2_DATABASE in names:
        v2 = load_v2(os.path.join(config_dir, V2_DATABASE))
        return _json_shape(
            {
                "topics.json": {"topicConfigTable": v2["topicConfigTable"]},
                "subscriptionGroup.json": {"subscriptionGroupTable": v2["subscriptionGroupTable"]},
                "consumerOffset.json": {"offsetTable": v2["offsetTable"]},
            }
        )
    files = {
        "topics": "topics.json",
        "subscriptionGroups": "subscriptionGroup.json",
        "consumerOffsets": "consumerOffset.json",
    }
    out = {}
    for name, table in V1_DATABASES.items():
        if name in names:
            out[files[name]] = load_v1(os.path.join(config_dir, name), table)
    return _json_shape(out)


def _json_shape(tables: dict) -> dict:
    """A JSON round trip: the managers expect what ``json.loads`` gives (string queue ids)."""
    return json.loads(json.dumps(tables))
