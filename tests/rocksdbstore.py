"""Build RocketMQ 5.2+ RocksDB stores for the tests, from the Java definitions alone.

:func:`convert_to_rocksdb` turns a plain store (written by the engine) into what a broker with
``storeType=defaultRocksDB`` keeps: ``consumequeue/`` a RocksDB database with the families
``default`` and ``offset`` (``ConsumeQueueRocksDBStorage.postLoad``), LZ4 with ZSTD at the
bottom level (``RocksDBOptionsFactory.createCQCFOptions``), the keys and values of
``RocksDBConsumeQueueTable.buildCQKeyByteBuffer0``/``buildCQValueByteBuffer0`` and
``RocksDBConsumeQueueOffsetTable.buildOffsetKeyByteBuffer0``; and its config in v1
(``config/topics/`` ... : name -> fastjson JSON, families ``kvDataVersion``/``forbidden``;
``ConfigRocksDBStorage``) or v2 (``config/rdb``: ``ConfigHelper.keyBufOf``,
``ConsumerOffsetManagerV2.keyOfConsumerOffset``). The file ConsumeQueues and JSON files are
deleted. Written with struct here, never with the engine's Structs: the judge is independent.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from rocksdict import DBCompressionType, Options, Rdict

STORE_TIMESTAMP_AT = 56  # CommitLog record: STORETIMESTAMP (IPv4 born host)


def _options() -> Options:
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    o.set_compression_type(DBCompressionType.lz4())
    o.set_bottommost_compression_type(DBCompressionType.zstd())
    return o


def cq_key(topic: str, qid: int, qoff: int) -> bytes:
    t = topic.encode()
    return struct.pack(">ib", len(t), 1) + t + struct.pack(">bibq", 1, qid, 1, qoff)


def offset_key(topic: str, qid: int, kind: bytes) -> bytes:
    t = topic.encode()
    return struct.pack(">ib", len(t), 1) + t + struct.pack(">b3sbi", 1, kind, 1, qid)


def file_units(qdir: Path) -> list[tuple[int, int, int, int]]:
    """``(queueOffset, commitLogOffset, size, tagsCode)`` of a file ConsumeQueue's valid units."""
    out = []
    for name in sorted(os.listdir(qdir)):
        data = (qdir / name).read_bytes()
        base = int(name) // 20
        for i in range(len(data) // 20):
            off, size, tags = struct.unpack_from(">qiq", data, i * 20)
            if off < 0 or size <= 0:
                break
            if size != 0x7FFFFFFF:
                out.append((base + i, off, size, tags))
    return out


def _commitlog_byte(root: Path, off: int) -> bytes:
    names = sorted(os.listdir(root / "commitlog"))
    size = (root / "commitlog" / names[0]).stat().st_size
    name = names[off // size]
    with open(root / "commitlog" / name, "rb") as f:
        f.seek(off % size + STORE_TIMESTAMP_AT)
        return f.read(8)


def write_rocksdb_cq(root: Path, double_write: bool = False) -> None:
    """Replace ``root``'s file ConsumeQueues by the RocksDB ConsumeQueue holding their units
    (``double_write``: keep the files, the database files beside the topic directories, as
    ``rocksdbCQDoubleWriteEnable`` does)."""
    base = root / "consumequeue"
    queues = {
        (t, int(q)): file_units(base / t / q)
        for t in sorted(os.listdir(base))
        if (base / t).is_dir()
        for q in sorted(os.listdir(base / t))
    }
    tmp = root / "consumequeue.rocksdb"
    db = Rdict(str(tmp), _options(), column_families={"offset": _options()})
    off_cf = db.get_column_family("offset")
    max_phy = 0
    for (topic, qid), units in queues.items():
        for qoff, off, size, tags in units:
            ts = struct.unpack(">q", _commitlog_byte(root, off))[0]
            db[cq_key(topic, qid, qoff)] = struct.pack(">qiqq", off, size, tags, ts)
            max_phy = max(max_phy, off)
        if units:
            first, last = units[0], units[-1]
            off_cf[offset_key(topic, qid, b"min")] = struct.pack(">qq", first[1], first[0])
            off_cf[offset_key(topic, qid, b"max")] = struct.pack(">qq", last[1], last[0])
    off_cf[offset_key("CHECKPOINT_TOPIC", 0, b"max")] = struct.pack(">q", max_phy)
    db.flush()
    db.close()
    (tmp / "rocksdict-config.json").unlink()
    if double_write:
        for name in os.listdir(tmp):
            (tmp / name).rename(base / name)
        tmp.rmdir()
    else:
        shutil.rmtree(base)
        tmp.rename(base)


def hold_rocksdb(path: Path) -> Rdict:
    """Open the database at ``path`` read-write, as a running broker holds it (its LOCK)."""
    return Rdict(str(path), _options(), column_families={"offset": _options()})


def write_config_v1(root: Path) -> None:
    """config/topics/, subscriptionGroups/, consumerOffsets/ from the JSON files; JSON removed."""
    cfg = root / "config"
    tables = {
        "topics": ("topics.json", "topicConfigTable"),
        "subscriptionGroups": ("subscriptionGroup.json", "subscriptionGroupTable"),
        "consumerOffsets": ("consumerOffset.json", "offsetTable"),
    }
    for name, (fname, table) in tables.items():
        raw = json.loads((cfg / fname).read_text()) if (cfg / fname).exists() else {}
        fams = {"kvDataVersion": _options(), "forbidden": _options()}
        db = Rdict(str(cfg / name), _options(), column_families=fams)
        for key, value in (raw.get(table) or {}).items():
            if table == "offsetTable":
                # RocksDBOffsetSerializeWrapper, fastjson: bare integer keys
                inner = ",".join(f"{q}:{o}" for q, o in value.items())
                body = ("{" + f'"offsetTable":{{{inner}}}' + "}").encode()
            else:
                body = json.dumps(value).encode()
            db[key.encode()] = body
        db.get_column_family("kvDataVersion")[b"kvDataVersionKey"] = b'{"counter":1}'
        db.close()
        (cfg / name / "rocksdict-config.json").unlink(missing_ok=True)
        (cfg / fname).write_text('{"topicConfigTable":{}}' if name == "topics" else "{}")


def write_config_v2(root: Path) -> None:
    """config/rdb from the JSON files (TopicConfigManagerV2 & co.); the JSON left stale."""
    cfg = root / "config"
    db = Rdict(str(cfg / "rdb"), _options())

    def name_key(table: int, name: str) -> bytes:
        b = name.encode()
        return struct.pack(">bhbh", 1, table, 2, len(b)) + b

    topics = json.loads((cfg / "topics.json").read_text())["topicConfigTable"]
    for name, value in topics.items():
        db[name_key(3, name)] = b"\x01" + json.dumps(value).encode()
    groups = json.loads((cfg / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    for name, value in groups.items():
        db[name_key(4, name)] = b"\x01" + json.dumps(value).encode()
    offsets = json.loads((cfg / "consumerOffset.json").read_text())["offsetTable"]
    for key, row in offsets.items():
        topic, group = key.split("@", 1)
        g, t = group.encode(), topic.encode()
        for q, o in row.items():
            k = struct.pack(">bhbh", 1, 1, 2, len(g)) + g + struct.pack(">bh", 1, len(t)) + t
            db[k + struct.pack(">bi", 1, int(q))] = struct.pack(">q", o)
    db[struct.pack(">bhb", 1, 3, 1) + b"data_version"] = struct.pack(">qqq", 0, 1, 1)
    db.close()
    (cfg / "rdb" / "rocksdict-config.json").unlink(missing_ok=True)
    for f in ("topics.json", "subscriptionGroup.json", "consumerOffset.json"):
        (cfg / f).write_text("{}")
