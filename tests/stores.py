"""Stores the tests of several layers build: small segments, a produce/read pair, and a store
holding every kind of CommitLog record (one home; the tests import them from here)."""

import errno
import os
import shutil
import zlib
from pathlib import Path

from rmqfs.engine.format.message import (
    COMPRESSED_FLAG,
    INNER_BATCH_FLAG,
    NEED_UNWRAP_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    encode_message,
    host_from_str,
)
from rmqfs.engine.live.snapshot import MANIFEST_NAME
from rmqfs.engine.store import Message, MessageStore, StoreConfig

SMALL = dict(
    mapped_file_size_commit_log=8 * 1024,
    mapped_file_size_consume_queue=16 * 20,
    max_hash_slot_num=16,
    max_index_num=64,
)


def small() -> StoreConfig:
    return StoreConfig(**SMALL)


def produce(root, n, topic="T", queue_id=None, tag="m", cfg=None):
    with MessageStore(str(root), cfg or small()) as s:
        if s.topic_config.get(topic) is None:
            s.create_topic(topic, 2)
        s.put_messages(
            [
                Message(topic, f"{tag}{i}".encode(), keys=[f"k{tag}{i}"], queue_id=queue_id)
                for i in range(n)
            ]
        )


def bodies(root, topic="T", cfg=None):
    with MessageStore(str(root), cfg or small(), read_only=True) as s:
        return sorted(rec.body for q in s.queue_ids(topic) for _, rec in s.iter_queue(topic, q))


def small_segments(**kw):
    base = dict(
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
    )
    base.update(kw)
    return StoreConfig(**base)


def put_internal(store, msgs, batch: bool = False):
    """Put records a client could not send (odd properties, broker-internal topics) on
    purpose, through the broker's own put path (:func:`engine.service.putmessage.put_internal`)."""
    from rmqfs.engine.service import putmessage

    return putmessage.put_internal(store, msgs, batch)


def every_kind_store(root):
    """V1 and V2 records, IPv6 hosts, zlib/lz4/zstd bodies, __CRC32#, transactions, delayed
    messages, odd bodies and properties, a non-UTF-8 property, an inner-batch record (in the
    CommitLog only), segments crossed."""
    odd = [b"", b"plain", "ünï \u2028 \x00 \" \\".encode(), b"\xff\xfe\x00bin", b"x" * 9000]
    with MessageStore(
        str(root), small_segments(compress_msg_body_over_howmuch=1024, compress_type="LZ4")
    ) as s:
        long_topic = "%RETRY%" + "g" * 200
        for t, n in (("T", 3), (long_topic, 1), ("Z", 1)):
            s.create_topic(t, n)
        msgs = []
        for i, b in enumerate(odd * 4):
            msgs.append(
                Message(
                    "T",
                    b,
                    tags=["a", None, "Tä\"g", ""][i % 4],
                    keys=[None, "k1  k2 ", ["only"]][i % 3],
                    properties=[None, {"ü": "\n", "e": ""}, {"x": "a\x01b"}][i % 3],
                )
            )
        put_internal(s, msgs)
        put_internal(
            s, [Message("T", b"big " * 2000), Message("T", b"big " * 2000, compress=False)]
        )
        put_internal(s, [Message(long_topic, b"v2 record", tags="r")])
        put_internal(s, [Message("T", b"from v6", born_host=host_from_str("[2001:db8::7]:42"))])
        put_internal(s, [Message("T", b"delayed", delay_level=2)])
        put_internal(s, [Message("T", b"half", sys_flag=TRANSACTION_PREPARED_TYPE)])
        put_internal(s, [Message("T", b"commit", sys_flag=TRANSACTION_COMMIT_TYPE)])
        put_internal(
            s,
            [Message("Z", zlib.compress(b"legacy zlib"), sys_flag=COMPRESSED_FLAG, compress=False)],
        )
        host = (b"\x7f\0\0\1", 1)
        e = encode_message(
            "Z",
            b"inner",
            queue_id=0,
            born_timestamp=1,
            born_host=host,
            store_host=host,
            sys_flag=INNER_BATCH_FLAG | NEED_UNWRAP_FLAG,
            properties={"INNER_NUM": "3", "INNER_BASE": "0"},
        )
        s.commitlog.append([e], [0])
        put_internal(s, [Message("Z", b"after inner", tags="z")])
    for kind in ("ZSTD", "ZLIB"):
        with MessageStore(
            str(root), small_segments(compress_msg_body_over_howmuch=1024, compress_type=kind)
        ) as s:
            put_internal(s, [Message("T", b"compress me " * 500)] * 3)
    with MessageStore(str(root), small_segments(enabled_append_prop_crc=True)) as s:
        put_internal(s, [Message("T", b"with crc property", tags="c")] * 3)
    with MessageStore(str(root), small_segments(broker_ip1="::1")) as s:
        put_internal(s, [Message("T", b"stored by a v6 broker")] * 2)
    return root


# Topics over 127 chars, stored as V2 records (MessageVersion.MESSAGE_VERSION_V2): the retry and
# dead-letter topics of a long consumer group, of the longest a broker stores (255 bytes,
# HookUtils.MAX_TOPIC_LENGTH, which a directory name also allows), and an ordinary 150-char
# topic (RocketMQ's store classes take it; only the client limits a new topic to 127).
LONG_GROUP = "G" * 248
RETRY_TOPIC = "%RETRY%" + LONG_GROUP  # 255 chars
DLQ_TOPIC = "%DLQ%" + "D" * 250  # 255 chars
LONG_TOPIC = "L" * 150
LONG_TOPICS = (RETRY_TOPIC, DLQ_TOPIC, LONG_TOPIC)


def long_topic_config() -> StoreConfig:
    """16 KiB CommitLog segments: long_topic_store's records cross several segment ends."""
    return small_segments(mapped_file_size_commit_log=16 * 1024)


def long_topic_store(root, cfg=None):
    """A store mixing V1 records (topics T, U) and V2 records (LONG_TOPICS), written by the
    engine's put paths (fast and general, one message and batches), records crossing segment
    ends; LONG_GROUP has committed offsets on T and its retry topic. Returns
    ``{topic: [bodies in put order]}``."""
    from rmqfs.engine.format.config import TopicConfig

    want: dict[str, list[bytes]] = {}
    with MessageStore(str(root), cfg or long_topic_config()) as s:
        s.create_topic("T", 4)
        s.create_topic("U", 1)
        s.create_topic(RETRY_TOPIC, 1)  # the broker's own topics: TopicValidator allows 255
        s.create_topic(DLQ_TOPIC, 1)
        s.topic_config.put(TopicConfig(LONG_TOPIC, 2, 2))  # a store-level topic
        s.create_group(LONG_GROUP)
        topics = ["T", RETRY_TOPIC, "U", DLQ_TOPIC, LONG_TOPIC]
        for i in range(60):
            t = topics[i % len(topics)]
            body = f"{t[:9]}-{i} ".encode() * (1 + i % 7) * 40  # records of 0.5-3 KiB
            want.setdefault(t, []).append(body)
            kw = dict(tags=f"tag{i % 3}", keys=[f"key{i}", "shared"])
            if i % 4 == 3:  # the general path (a property the fast path leaves to it)
                kw["properties"] = {"n": str(i)}
            put_internal(s, [Message(t, body, **kw)])
        for t in (RETRY_TOPIC, LONG_TOPIC):  # batches: several V2 records in one put
            bodies = [f"batch {t[:9]} {j}".encode() for j in range(5)]
            want[t] += bodies
            put_internal(s, [Message(t, b, keys=["shared"]) for b in bodies])
        s.commit_offset(LONG_GROUP, "T", 0, 2)
        s.commit_offset(LONG_GROUP, RETRY_TOPIC, 0, 3)
    return want


def flip_body_byte(root, topic="T", queue_id=0, queue_offset=0, cfg=None) -> int:
    """Flip one bit of the body of the message at ``topic/queue_id/queue_offset`` (a V1,
    IPv4 record: body at +88), leaving its BODYCRC and every other field as they were: a
    record that fails only its body CRC. Returns its CommitLog offset."""
    cfg = cfg or small()
    with MessageStore(str(root), cfg, read_only=True) as s:
        off, _size, _ = s.consume_queue(topic, queue_id).unit(queue_offset)
    fs = cfg.mapped_file_size_commit_log
    path = os.path.join(str(root), "commitlog", f"{off - off % fs:020d}")
    with open(path, "r+b") as f:
        f.seek(off % fs + 88)
        b = f.read(1)
        f.seek(off % fs + 88)
        f.write(bytes([b[0] ^ 0x20]))
    return off


def blank_units_store(root):
    """A store whose queue T/0 holds blank filler units (fillPreBlank) at offsets 18, 20 and
    27, in its second file (16 units a file; blanks in the first would move its min offset)."""
    from rmqfs.engine.format.consumequeue import BLANK_UNIT_SIZE, UNIT

    produce(root, 30, queue_id=0, cfg=small())
    d = os.path.join(root, "consumequeue", "T", "0")
    for q in (18, 20, 27):
        with open(os.path.join(d, sorted(os.listdir(d))[q // 16]), "r+b") as f:
            f.seek(q % 16 * 20)
            f.write(UNIT.pack(0, BLANK_UNIT_SIZE, 0))
    return root


# --------------------------------------------------------------------------------------------
# Copies


def copy_store(src, dest) -> Path:
    """``shutil.copytree(src, dest)`` that keeps the holes of sparse files: a store of
    RocketMQ's default sizes has a 1 GiB CommitLog file and 6 MB ConsumeQueue files that take
    KiB on disk, which a plain copy writes out in full (seconds and gigabytes a copy). Same
    tree, bytes, modes and times as copytree's."""
    return Path(shutil.copytree(src, dest, copy_function=_copy_sparse))


def _copy_sparse(src, dest):
    """``shutil.copy2`` writing only the data regions of ``src`` (SEEK_DATA/SEEK_HOLE)."""
    with open(src, "rb") as fi, open(dest, "wb") as fo:
        fd, size, pos = fi.fileno(), os.fstat(fi.fileno()).st_size, 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                break  # only a hole is left
            pos = os.lseek(fd, start, os.SEEK_HOLE)
            fi.seek(start)
            fo.seek(start)
            left = pos - start
            while left > 0:
                chunk = fi.read(min(left, 1 << 20))
                if not chunk:
                    break
                fo.write(chunk)
                left -= len(chunk)
        fo.truncate(size)
    shutil.copystat(src, dest)
    return dest


# --------------------------------------------------------------------------------------------
# Snapshot copies


def materialize(snap, dest: Path, manifest: bytes | None = None) -> Path:
    """Write a snapshot's files to ``dest`` (as a copy tool would), zeros as holes."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel, f in snap.files.items():
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "wb") as out:
            pos = 0
            while pos < f.size:
                chunk = f.read(pos, 1 << 20)
                if chunk.count(0) == len(chunk):
                    out.seek(len(chunk), os.SEEK_CUR)
                else:
                    out.write(chunk)
                pos += len(chunk)
            out.truncate(f.size)
    if manifest is not None:
        (dest / MANIFEST_NAME).write_bytes(manifest)
    return dest


def snapshot_copy(store, dest: Path, name: str = "s") -> Path:
    """A snapshot of the open ``store`` (``SnapshotManager``) written out at ``dest`` with its
    ``SNAPSHOT.json``, as ``cp -r MNT/snapshots/NAME`` would (:func:`materialize`)."""
    from rmqfs.engine.live.snapshot import SnapshotManager

    mgr = SnapshotManager(store)
    try:
        snap = mgr.create(name)
        return materialize(snap, dest, mgr.manifest(snap))
    finally:
        mgr.close()


def fleet_store(root, tag: str, topics: dict, cfg=None) -> None:
    """One broker's store of a fleet: topic ``t`` has ``n`` messages over its queues
    (``{t: (queues, n)}``), bodies starting with ``tag`` (different stores, different rows)."""
    with MessageStore(str(root), cfg or small_segments()) as s:
        for t, (nq, n) in topics.items():
            s.create_topic(t, nq)
            s.put_messages(
                [
                    Message(t, f"{tag}-{t}-{i} ".encode() * (1 + i % 5), tags=f"g{i % 3}")
                    for i in range(n)
                ]
            )


def fleet_rows(name: str, path) -> list[tuple]:
    """``(name, topic, queue, queueOffset, body)`` of every message of the store at ``path``,
    sorted, read directly with ``StoreFiles`` (what a locality read of it must return)."""
    from rmqfs.engine.read.columnar import StoreFiles

    s = StoreFiles(str(path))
    out = []
    try:
        for t in s.topics():
            for q in s.queue_ids(t):
                lo, hi = s.min_offset(t, q), s.max_offset(t, q)
                for b in s.read_batches(t, q, lo, hi, columns=("queueOffset", "body")):
                    for off, body in zip(
                        b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True
                    ):
                        out.append((name, t, q, off, body))
    finally:
        s.close()
    return sorted(out)


#: Appended to a script :func:`run_measured` runs: the child's peak RSS in KiB (VmHWM: the
#: child's own; ``ru_maxrss`` keeps the parent's across fork and exec), as a last JSON line.
_PEAK_LINE = (
    "\nimport json as _json\n"
    "with open('/proc/self/status') as _f:\n"
    "    print(_json.dumps({'maxrss_kb': next(int(x.split()[1]) for x in _f"
    " if x.startswith('VmHWM:'))}))\n"
)


def run_measured(script: str, *args, timeout: float = 120) -> tuple[dict, str]:
    """Run ``python -c script ARGS`` with this run's ``sys.path``; the script prints one JSON
    object as its last line. Returns ``(that object plus "maxrss_kb": the child's peak RSS in
    KiB, its stderr)``; asserts that it exited 0 with no traceback."""
    import json
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", script + _PEAK_LINE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    *rest, peak = r.stdout.splitlines()
    got = {**json.loads(rest[-1]), **json.loads(peak)}
    print(
        f"peak RSS {got['maxrss_kb'] // 1024} MiB"
        + (f", {got['seconds']:.2f} s" if "seconds" in got else "")
    )
    return got, r.stderr


def fix_uniq_keys(store, counter: int) -> None:
    """Give ``store`` a UNIQ_KEY generator of a fixed prefix (127.0.0.1, pid 1, class loader
    0xFF) whose counter starts at ``counter``: two stores given the same one write the same
    UNIQ_KEYs, so tests can compare their files byte for byte."""
    from rmqfs.engine.format.uniqkey import UniqKeyGenerator

    store.uniq_keys = UniqKeyGenerator()
    store.uniq_keys._prefix = "7F0000010001000000FF"
    store.uniq_keys.counter = counter
