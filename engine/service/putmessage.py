"""Putting messages: the two put paths of the store (RocketMQ ``DefaultMessageStore.putMessage``
/ ``putMessages``, ``CommitLog.asyncPutMessage(s)`` and ``DefaultAppendMessageCallback``).

:func:`put_messages` is the general path: it validates (engine.service.validation), applies delay
levels and compression, encodes each record with :func:`engine.format.message.encode_message`, appends
them to the CommitLog and dispatches them (engine.service.dispatch), or queues them for the group commit
under SYNC_FLUSH. :func:`put_plain` is the fast path for the common case (no user properties,
IPv4 hosts, ASYNC_FLUSH): it packs the very same bytes with :data:`engine.format.message.FIXED_V4` and
message.py's property names in one pass (tests/engine/test_fastpaths.py compares the two byte for
byte), or returns None and changes nothing. PutResult says where a message went.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import logging
import operator
import os
import struct
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

# The fast put path and the recovery scan (kept apart from the imports above on purpose).
from ..errors import (
    MessageIllegalError,
    MessageTooLargeError,
    NoSuchTopicError,
    PermissionDeniedError,
    PropertiesSizeExceededError,
    PutMessageError,
    ReadOnlyStoreError,
)
from ..format.config import MAX_TOPIC_BYTES, TopicConfig
from ..format.consumequeue import deliver_tags_code, pack_units
from ..format.indexfile import build_key
from ..format.javahash import java_hash_u32, key_hash_of_u32, pow31, tags_code, utf16_len
from ..format.message import (
    BODY_CRC_MASK,
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    FIXED_V4,
    INNER_BATCH_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    PROPERTY_DELAY,
    PROPERTY_END,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    RECORD_SLACK,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    Message,
    cal_msg_length,
    compress_body,
    crc32,
    encode_blank,
    encode_message,
    offset_msg_id,
    property_prefix,
    topic_field,
    topic_needs_v2,
)
from ..format.timerwheel import WHEEL_FILE
from ..storeconfig import COMPRESSION_TYPES
from . import dispatch
from .dispatch import DispatchRequest
from .validation import check_messages

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..store import MessageStore

log = logging.getLogger(__name__)

# Property items, built once from message.py's names (MessageDecoder.messageProperties2String).
_TAGS_ITEM = property_prefix(PROPERTY_TAGS)
_KEYS_ITEM = property_prefix(PROPERTY_KEYS).decode()
_SHARDING_ITEM = property_prefix(PROPERTY_SHARDING_KEY).decode()
_UNIQ_ITEM_FORMAT = b"%s%s%s" + property_prefix(PROPERTY_UNIQ_KEY) + b"%s" + PROPERTY_END
_UNIQ_ITEM_OVERHEAD = len(property_prefix(PROPERTY_UNIQ_KEY)) + len(PROPERTY_END)
# Fields of Message the fast path handles itself; any other field must hold its default.
_PLAIN_FIELDS = frozenset(
    (
        "topic",
        "body",
        "tags",
        "keys",
        "properties",
        "queue_id",
        "sharding_key",
        "flag",
        "born_timestamp",
        "born_host",
        "sys_flag",
    )
)
_OTHER_FIELDS = [f for f in dataclasses.fields(Message) if f.name not in _PLAIN_FIELDS]
# One attrgetter call and one comparison per message check all the other fields ("topic" is
# added so the getter always returns a tuple).
_PLAIN_EXTRA = (
    operator.attrgetter(*[f.name for f in _OTHER_FIELDS], "topic"),
    tuple(f.default for f in _OTHER_FIELDS),
)


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
    def _fast(
        cls,
        topic: str,
        queue_id: int,
        queue_offset: int,
        commitlog_offset: int,
        size: int,
        store_timestamp: int,
        msg_id: str,
        uniq_key: str | None,
    ) -> PutResult:
        """Construct without the frozen dataclass's per-field ``object.__setattr__`` calls."""
        obj = _new_object(cls)
        _set_attr(
            obj,
            "__dict__",
            {
                "topic": topic,
                "queue_id": queue_id,
                "queue_offset": queue_offset,
                "commitlog_offset": commitlog_offset,
                "size": size,
                "store_timestamp": store_timestamp,
                "msg_id": msg_id,
                "uniq_key": uniq_key,
            },
        )
        return obj


_new_object = object.__new__
_set_attr = object.__setattr__
_BORN_OF = operator.attrgetter("born_timestamp")
_SHORTS = [n.to_bytes(2, "big") for n in range(4096)]  # big-endian int16 of small lengths


class PutService:
    """The put paths' state, one per store (``store.putter``; RocketMQ keeps it in
    ``CommitLog`` and ``DefaultAppendMessageCallback``).

    Attributes (changed by this module's put functions only, under the store's put lock):
        queue_offsets: topicQueueTable, the next queue offset to assign per (topic, queueId),
            ahead of the ConsumeQueue while a SYNC_FLUSH put waits for its flush
            (``getMaxOffsetInQueue(committed=false)``).
        round_robin: the next queue per topic for messages with no queue and no sharding key.
        tags_cache: TAGS value -> (encoded property, tagsCode), for the fast path.
        plain_topics: topic -> (config, state, :func:`plain_topic` info), for the fast path.
        msg_id_prefix: hex of the store host, the first half of offset msgIds (set on the
            first fast put).
    """

    def __init__(self, store: MessageStore):
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.round_robin: dict[str, int] = {}
        self.tags_cache: dict[str, tuple[bytes, int]] = {}
        self.plain_topics: dict[str, tuple[TopicConfig, tuple[int, int, int], PlainTopic]] = {}
        self.msg_id_prefix: str | None = None

    def assigned_offset(self, topic: str, queue_id: int) -> int | None:
        """The next queue offset a put assigns in the queue, None before the first put of
        this open."""
        return self.queue_offsets.get((topic, queue_id))

    def forget_topic(self, topic: str) -> None:
        """Drop what is cached of a deleted topic (caller holds the put lock)."""
        for key in [k for k in self.queue_offsets if k[0] == topic]:
            del self.queue_offsets[key]
        self.round_robin.pop(topic, None)
        self.plain_topics.pop(topic, None)


def select_queue(store: MessageStore, msg: Message, cfg: TopicConfig) -> int:
    n = cfg.write_queue_nums
    if msg.queue_id is not None:
        if not 0 <= msg.queue_id < max(n, cfg.read_queue_nums):
            raise PutMessageError(
                f"queueId {msg.queue_id} is not a queue of {cfg.topic_name} (0..{n - 1})"
            )
        return msg.queue_id
    if msg.sharding_key is not None:
        return (zlib.crc32(msg.sharding_key.encode()) & 0x7FFFFFFF) % n
    rr = store.putter.round_robin
    i = rr.get(cfg.topic_name, 0)
    rr[cfg.topic_name] = i + 1
    return i % n


def put_messages(
    store: MessageStore, messages: list[Message], batch: bool = False
) -> list[PutResult]:
    """Append messages and dispatch them; all of them or none are stored.

    Every message is first checked against :mod:`engine.service.validation` (RocketMQ's client and
    proxy rules: no reserved property names, no control characters in tags, keys or
    properties, an integer queueId...); :func:`put_internal` is the broker's own path,
    without them.

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
        MessageIllegalError: a message breaks a rule of :mod:`engine.service.validation`
            (EINVAL), or needs batchconsumequeue/.
        MessageTooLargeError / PropertiesSizeExceededError: too large (EMSGSIZE).
        PutMessageError: a queueId that is not a queue of the topic, a mixed batch.
        ReadOnlyStoreError: the store is read-only.
        FlushDiskTimeoutError: SYNC_FLUSH and the flush took longer than
            ``syncFlushTimeout`` ms (the records are appended; see the error).
        OSError: the disk failed (e.g. ENOSPC); nothing of the batch is kept.
    """
    if messages:
        check_messages(messages)
    return _put(store, messages, batch)


def put_internal(
    store: MessageStore, messages: list[Message], batch: bool = False
) -> list[PutResult]:
    """The broker's own put path: :func:`put_messages` without the client rules of
    :mod:`engine.service.validation`, for records the broker writes itself (its retry, schedule
    and transaction records carry system properties and reserved topics; RocketMQ's
    ``DefaultMessageStore.putMessage`` checks none of the client's rules). The size limits
    and everything else apply as in :func:`put_messages`. Nothing in rmqfs's faces (the
    mount, ``rmqfs produce``) calls it; tests build broker-written stores with it.
    """
    return _put(store, messages, batch)


def _put(store: MessageStore, messages: list[Message], batch: bool) -> list[PutResult]:
    store.check_writable()
    if store.disk_full:
        raise OSError(
            errno.ENOSPC,
            "disk usage above diskSpaceWarningLevelRatio; "
            "the store refuses messages until expired files are deleted",
        )
    if not messages:
        return []
    out = None if batch else put_plain(store, messages)
    if out is not None:
        for listener in store.listeners:
            listener(out)
        return out
    now = int(time.time() * 1000)
    encoded = []
    cfg_ = store.config
    with store.put_lock:
        if store.closed:
            raise ReadOnlyStoreError("store is closed")
        # (topic, queueId, extra properties) after the delay rewrite
        targets: list[tuple[str, int, dict[str, str] | None]] = []
        if batch and len({m.topic for m in messages}) > 1:
            raise PutMessageError("a batch must have a single topic")
        for msg in messages:
            cfg = store.topic_config.get(msg.topic)
            if cfg is None:
                raise NoSuchTopicError(f"topic {msg.topic} does not exist")
            if not cfg.writable:
                raise PermissionDeniedError(
                    f"topic {msg.topic} has perm {cfg.perm}, without write permission"
                )
            if msg.sys_flag & INNER_BATCH_FLAG or msg.topic in store.batch_cq_topics:
                raise MessageIllegalError(
                    f"{msg.topic}: inner-batch messages and BatchCQ topics need "
                    "batchconsumequeue/, which this engine does not write"
                )
            qid = targets[0][1] if batch and targets else select_queue(store, msg, cfg)
            if msg.delay_level > 0 and msg.topic != SCHEDULE_TOPIC:
                level = min(msg.delay_level, max(store.delay_levels, default=1))
                schedule_topic(store)
                targets.append(
                    (
                        SCHEDULE_TOPIC,
                        level - 1,
                        {
                            PROPERTY_REAL_TOPIC: msg.topic,
                            PROPERTY_REAL_QID: str(qid),
                            PROPERTY_DELAY: str(level),
                        },
                    )
                )
            else:
                targets.append(timer_target(store, msg, qid, now))
        delays = []
        for msg, (topic, qid, extra) in zip(messages, targets):
            props = dict(msg.properties or {})
            if msg.tags:
                props[PROPERTY_TAGS] = msg.tags
            if msg.keys:
                props[PROPERTY_KEYS] = msg.keys if isinstance(msg.keys, str) else " ".join(msg.keys)
            if msg.sharding_key is not None:
                props.setdefault(PROPERTY_SHARDING_KEY, msg.sharding_key)
            if not msg.wait_store_msg_ok:
                props[PROPERTY_WAIT] = "false"
            if extra:
                props.update(extra)
            born = msg.born_timestamp or now
            props.setdefault(PROPERTY_UNIQ_KEY, store.uniq_keys.next(born))
            delays.append(props.get(PROPERTY_DELAY) if topic == SCHEDULE_TOPIC else None)
            body, sys_flag = msg.body, msg.sys_flag
            if should_compress(store, msg):
                kind = COMPRESSION_TYPES[cfg_.compress_type.upper()]
                body = compress_body(body, kind, cfg_.compress_level)
                sys_flag = (sys_flag & ~COMPRESSION_TYPE_MASK) | COMPRESSED_FLAG | kind
            encoded.append(
                encode_message(
                    topic,
                    body,
                    queue_id=qid,
                    properties=props,
                    born_timestamp=born,
                    born_host=msg.born_host or (b"\x7f\x00\x00\x01", 0),
                    store_host=store.store_host,
                    flag=msg.flag,
                    sys_flag=sys_flag,
                    max_message_size=cfg_.max_message_size,
                    auto_v2=cfg_.auto_message_version_on_topic_len,
                    append_prop_crc=cfg_.enabled_append_prop_crc,
                )
            )
        # assignOffset: consecutive queue offsets, not for prepared/rollback records.
        next_offsets: dict[tuple[str, int], int] = {}
        queue_offsets = []
        for e in encoded:
            key = (e.topic, e.queue_id)
            if e.sys_flag & TRANSACTION_TYPE_MASK in (
                TRANSACTION_PREPARED_TYPE,
                TRANSACTION_ROLLBACK_TYPE,
            ):
                queue_offsets.append(0)
                continue
            if key not in next_offsets:
                next_offsets[key] = store.max_offset(*key, committed=False)
            queue_offsets.append(next_offsets[key])
            next_offsets[key] += 1
        cl = store.commitlog
        start = cl.max_offset
        before = {k: store.max_offset(*k) for k in next_offsets}
        results = cl.append(encoded, queue_offsets, now, together=batch)
        requests = []
        for e, qoff, res, delay in zip(encoded, queue_offsets, results, delays):
            tc = e.tags_code
            if delay is not None:
                deliver = deliver_tags_code(delay, now, store.delay_levels)
                if deliver is not None:
                    tc = deliver
            requests.append(
                DispatchRequest(
                    e.topic,
                    e.queue_id,
                    res[0],
                    res[1],
                    tc,
                    now,
                    qoff,
                    e.keys,
                    e.uniq_key,
                    e.sys_flag,
                )
            )
        if store.sync_flush:
            store.flusher.add_pending(cl.max_offset, requests)
        else:
            try:
                dispatch.dispatch(store, requests)
            except OSError:
                for key, old in before.items():
                    cq = store.consume_queues.get(key)
                    if cq is not None:
                        cq.truncate_to(old)
                for d in store.dispatchers:
                    d.truncate(start)
                cl.truncate(start)
                raise
        store.putter.queue_offsets.update(next_offsets)
        end = cl.max_offset
        out = [
            PutResult(
                e.topic,
                e.queue_id,
                qoff,
                res[0],
                res[1],
                now,
                offset_msg_id(store.store_host, res[0]),
                e.uniq_key,
            )
            for e, qoff, res in zip(encoded, queue_offsets, results)
        ]
    if store.sync_flush:
        if all(m.wait_store_msg_ok for m in messages):
            store.flusher.wait_flushed(end, out)
        else:
            store.flusher.wake()
    for listener in store.listeners:
        listener(out)
    return out


def should_compress(store: MessageStore, msg: Message) -> bool:
    """``DefaultMQProducerImpl.tryToCompressMessage``: body >= compressMsgBodyOverHowmuch."""
    if msg.compress is not None:
        return msg.compress
    limit = store.config.compress_msg_body_over_howmuch
    return 0 <= limit <= len(msg.body) and not msg.sys_flag & COMPRESSED_FLAG


def timer_enabled(store: MessageStore) -> bool:
    """Whether the broker of ``store`` runs a timer store (so delivers timed messages):
    ``StoreConfig.timer_wheel_enable`` when set (broker.conf ``timerWheelEnable``), else whether
    the store has a ``timerwheel`` (every 5.x broker's store has one; a 4.x broker has no timer
    store and would deliver a message of ``rmq_sys_wheel_timer`` to no one)."""
    flag = store.config.timer_wheel_enable
    if flag is not None:
        return flag
    return os.path.isfile(os.path.join(store.root, WHEEL_FILE))


def timer_target(
    store: MessageStore, msg: Message, qid: int, now: int
) -> tuple[str, int, dict[str, str] | None]:
    """``(topic, queueId, extra properties)`` of ``msg`` as the broker stores it: a timed one
    (``deliver_time_ms``/``delay_time_ms``/``delay_time_sec``) rewritten as
    ``HookUtils.handleScheduleMessage`` and ``transformTimerMessage`` do, anything else as it is.

    The deliver time (epoch ms; ``now`` plus the delay for a delay) is rounded down to
    ``timerPrecisionMs``, one tick earlier when it falls on one, and becomes ``TIMER_OUT_MS``;
    ``REAL_TOPIC``/``REAL_QID`` keep the real topic and queue; the message goes to
    ``rmq_sys_wheel_timer`` queue 0 (created with one queue, as ``TopicConfigManager`` does).
    The producer's own property (``TIMER_DELIVER_MS``, ...) stays. A deliver time not after
    ``now`` leaves the message in its topic (delivered at once), and so do prepared and
    rollback records (``handleScheduleMessage`` only rewrites NOT and COMMIT ones).

    Raises:
        MessageIllegalError: more than ``timerMaxDelaySec`` ahead (``WHEEL_TIMER_MSG_ILLEGAL``),
            or the store's broker runs no timer store (:func:`timer_enabled`;
            ``WHEEL_TIMER_NOT_ENABLE``).
    """
    given = [
        (name, value)
        for name, value in (
            (PROPERTY_TIMER_DELAY_SEC, msg.delay_time_sec),
            (PROPERTY_TIMER_DELAY_MS, msg.delay_time_ms),
            (PROPERTY_TIMER_DELIVER_MS, msg.deliver_time_ms),
        )
        if value is not None
    ]
    tran = msg.sys_flag & TRANSACTION_TYPE_MASK
    if (
        not given
        or msg.topic == TIMER_TOPIC
        or tran
        not in (
            TRANSACTION_NOT_TYPE,
            TRANSACTION_COMMIT_TYPE,
        )
    ):
        return msg.topic, qid, None
    if not timer_enabled(store):
        raise MessageIllegalError(
            "a timed message needs RocketMQ 5's timer store, and this store has no timerwheel "
            "(a 4.x broker's, or timerWheelEnable=false): use a delay level, or set "
            "timerWheelEnable=true in the broker.conf given to rmqfs if its broker is 5.x"
        )
    name, value = given[0]  # transformTimerMessage: DELAY_SEC, then DELAY_MS, then DELIVER_MS
    if name == PROPERTY_TIMER_DELAY_SEC:
        deliver = now + value * 1000
    elif name == PROPERTY_TIMER_DELAY_MS:
        deliver = now + value
    else:
        deliver = value
    extra = {name: str(value)}
    if deliver <= now:
        return msg.topic, qid, extra
    cfg = store.config
    if deliver - now > cfg.timer_max_delay_sec * 1000:
        raise MessageIllegalError(
            f"deliver time {deliver} is more than timerMaxDelaySec ({cfg.timer_max_delay_sec} s) "
            "ahead (WHEEL_TIMER_MSG_ILLEGAL)"
        )
    tick = cfg.timer_precision_ms
    deliver = deliver - tick if deliver % tick == 0 else deliver // tick * tick
    if store.topic_config.get(TIMER_TOPIC) is None:
        store.topic_config.put(TopicConfig(TIMER_TOPIC, 1, 1))
    extra.update(
        {
            PROPERTY_TIMER_OUT_MS: str(deliver),
            PROPERTY_REAL_TOPIC: msg.topic,
            PROPERTY_REAL_QID: str(qid),
        }
    )
    return TIMER_TOPIC, 0, extra


def schedule_topic(store: MessageStore) -> None:
    """Create ``SCHEDULE_TOPIC_XXXX`` with one queue per delay level, as the broker does."""
    if store.topic_config.get(SCHEDULE_TOPIC) is None:
        n = max(len(store.delay_levels), 1)
        store.topic_config.put(TopicConfig(SCHEDULE_TOPIC, n, n))


#: :func:`plain_topic`'s pieces: (writeQueueNums, queues, TOPIC field, base record length,
#: hash of "topic#", MAGICCODE).
PlainTopic = tuple[int, int, bytes, int, int, int]


def plain_topic(store: MessageStore, topic: str) -> PlainTopic | None:
    """Per-topic pieces for the fast path, or None when the topic needs the general one:
    ``(writeQueueNums, queues, TOPIC field (length + name), 91 + name length (+1 for V2),
    hash of "topic#", MAGICCODE)``; a topic over 127 chars takes the V2 record, as in the
    general path (``message.topic_needs_v2``). Cached while the topic's config stays the same."""
    cfg = store.topic_config.get(topic)
    if cfg is None or not cfg.writable or topic == SCHEDULE_TOPIC or topic in store.batch_cq_topics:
        return None
    state = (cfg.perm, cfg.write_queue_nums, cfg.read_queue_nums)
    cache = store.putter.plain_topics
    hit = cache.get(topic)
    if hit is not None and hit[0] is cfg and hit[1] == state:
        return hit[2]
    raw = topic.encode("utf-8")
    v2 = topic_needs_v2(topic, store.config.auto_message_version_on_topic_len)
    if len(raw) > (MAX_TOPIC_BYTES if v2 else MAX_TOPIC_LENGTH_V1):
        return None  # the general path refuses it
    info = (
        cfg.write_queue_nums,
        max(cfg.write_queue_nums, cfg.read_queue_nums),
        topic_field(raw, v2),
        cal_msg_length(0, 0, len(raw), 0, v2),
        java_hash_u32(build_key(topic, "")),
        MAGIC_V2 if v2 else MAGIC_V1,
    )
    if len(cache) > 65536:
        cache.clear()
    cache[topic] = (cfg, state, info)
    return info


def put_plain(store: MessageStore, messages: list[Message]) -> list[PutResult] | None:
    """The put path for the common case, fused: encode, append and dispatch in one pass.

    Handles puts where every message has no user properties, sysFlag 0, an IPv4 (or
    default) born host, a V1 or V2 topic (not SCHEDULE_TOPIC_XXXX, not a BatchCQ topic) and
    every other Message field at its default (no delay_level, compress or
    wait_store_msg_ok=False), under ASYNC_FLUSH with an IPv4 store host, without
    enabledAppendPropCRC or compressMsgBodyOverHowmuch; returns None for anything else
    (nothing written, round-robin state restored), and :meth:`put_messages` runs the
    general path. MessageBatch puts (``batch=True``) never come here; the disk-full
    refusal is checked before. It keeps the shared state as the general path does
    (topicQueueTable ``putter.queue_offsets``, ``dispatched_store_timestamp``). Writes exactly the
    bytes the general path writes (tests/engine/test_fastpaths.py): the
    offsets are known up front so each record is packed once, the ConsumeQueue units of a
    queue are packed in one call, UNIQ_KEYs come in one batch with their hashes, and the
    index keys are written in one batch.
    """
    cfgs = store.config
    if (
        store.sync_flush
        or len(store.store_host[0]) != 4
        or cfgs.enabled_append_prop_crc
        or cfgs.compress_msg_body_over_howmuch >= 0
    ):
        return None
    extra_of, extra_defaults = _PLAIN_EXTRA
    max_body = cfgs.max_message_size
    now = int(time.time() * 1000)
    with store.put_lock:
        if store.closed:
            raise ReadOnlyStoreError("store is closed")
        cl = store.commitlog
        fs = cl.file_size
        start = pos = chunk_start = cl.max_offset
        seg_end = pos - pos % fs + fs
        chunks = []
        pieces: list = []
        topics: dict[str, PlainTopic | None] = {}
        queues: dict[tuple[str, int], list] = {}  # key -> [next queue offset, units]
        putter = store.putter
        queue_offsets = putter.queue_offsets
        rr = putter.round_robin
        rr_before = dict(rr)
        # A fallback leaves no trace: round-robin positions and the UNIQ_KEY counter are
        # put back, so the general path assigns what it would have assigned alone.
        counter_before = store.uniq_keys.counter
        tags_cache = putter.tags_cache
        uniq_next = store.uniq_keys.next_with_hash
        uniq_keys: Iterable[str | None]
        uniq_hashes: Iterable[int | None]
        if any(map(_BORN_OF, messages)):  # ids follow each born time
            uniq_keys = itertools.repeat(None)
            uniq_hashes = itertools.repeat(None)
        else:  # one batch of ids, in message order as one by one
            uniq_keys, uniq_hashes = store.uniq_keys.next_many(len(messages), now)
        pack = FIXED_V4.pack
        sip, sport = store.store_host
        id_prefix = putter.msg_id_prefix
        if id_prefix is None:
            id_prefix = putter.msg_id_prefix = (sip + struct.pack(">i", sport)).hex().upper()
        index = store.index_service
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
                info = topics[topic] = plain_topic(store, topic)
            if (
                info is None
                or m.properties
                or m.sys_flag
                or blen > max_body
                or (bh is not None and len(bh[0]) != 4)
            ):
                rr.clear()
                rr.update(rr_before)
                store.uniq_keys.counter = counter_before
                return None
            if extra_of(m)[:-1] != extra_defaults:
                rr.clear()
                rr.update(rr_before)
                store.uniq_keys.counter = counter_before
                return None
            nwq, nq, tail, base, topic_hash, magic = info
            qid = m.queue_id
            if qid is None:
                if m.sharding_key is not None:
                    qid = (zlib.crc32(m.sharding_key.encode()) & 0x7FFFFFFF) % nwq
                else:
                    i = rr.get(topic, 0)
                    rr[topic] = i + 1
                    qid = i % nwq
            elif not 0 <= qid < nq:
                raise PutMessageError(f"queueId {qid} is not a queue of {topic} (0..{nwq - 1})")
            tags = m.tags
            if tags:
                head_tc = tags_cache.get(tags)
                if head_tc is None:
                    head_tc = (_TAGS_ITEM + tags.encode() + PROPERTY_END, tags_code(tags))
                    if len(tags_cache) < 4096:
                        tags_cache[tags] = head_tc
                head, tc = head_tc
            else:
                head, tc = b"", 0
            mkeys = m.keys
            keys = "" if not mkeys else mkeys if isinstance(mkeys, str) else " ".join(mkeys)
            if keys:
                head += f"{_KEYS_ITEM}{keys}{PROPERTY_SEPARATOR}".encode()
            if m.sharding_key is not None:
                head += f"{_SHARDING_ITEM}{m.sharding_key}{PROPERTY_SEPARATOR}".encode()
            born = m.born_timestamp or now
            if uniq is None or uniq_hash is None:  # ids follow each born time
                uniq, uniq_hash = uniq_next(born)
            plen = len(head) + len(uniq) + _UNIQ_ITEM_OVERHEAD
            if plen > MAX_PROPERTIES_LENGTH:
                raise PropertiesSizeExceededError(
                    f"properties are {plen} bytes, more than {MAX_PROPERTIES_LENGTH}"
                )
            total = base + blen + plen
            if total > limit:
                raise MessageTooLargeError(
                    f"message record is {total} bytes, more than maxMessageSize + 64 KiB"
                )
            if pos + total + 8 > seg_end:
                if total + 8 > fs:
                    raise MessageTooLargeError(
                        f"record of {total} bytes does not fit in a {fs}-byte CommitLog segment"
                    )
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
                    cq = store.consume_queues.get(key)
                    nxt = cq.max_offset if cq is not None else 0
                q = queues[key] = [nxt, []]
            qoff = q[0]
            q[0] = qoff + 1
            q[1] += (pos, total, tc)
            if bh is None:
                bh = default_born
            # header | body | topic length + topic | properties length + properties
            pieces += (
                pack(
                    total,
                    magic,
                    crc32(body) & BODY_CRC_MASK,
                    qid,
                    m.flag,
                    qoff,
                    pos,
                    0,
                    born,
                    bh[0],
                    bh[1],
                    now,
                    sip,
                    sport,
                    0,
                    0,
                    blen,
                ),
                body,
                _UNIQ_ITEM_FORMAT
                % (
                    tail,
                    shorts[plen] if plen < 4096 else plen.to_bytes(2, "big"),
                    head,
                    uniq.encode(),
                ),
            )
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
                            idx += (
                                key_hash_of_u32(
                                    (topic_hash * pow31(utf16_len(k)) + java_hash_u32(k))
                                    & 0xFFFFFFFF
                                ),
                                pos,
                                now,
                            )
            res = new_object(PutResult)  # PutResult._fast, inlined
            set_attr(
                res,
                "__dict__",
                {
                    "topic": topic,
                    "queue_id": qid,
                    "queue_offset": qoff,
                    "commitlog_offset": pos,
                    "size": total,
                    "store_timestamp": now,
                    "msg_id": id_prefix + "%016X" % pos,
                    "uniq_key": uniq,
                },
            )
            out.append(res)
            pos += total
        chunks.append((chunk_start, pieces))
        cl.append_chunks(chunks, pos, now)
        dispatch_plain(store, messages, out, queues, idx, start, now)
        queue_offsets.update((k, v[0]) for k, v in queues.items())
        store.dispatched_store_timestamp = now
    return out


def dispatch_plain(
    store: MessageStore,
    messages: list[Message],
    out: list[PutResult],
    queues: dict[tuple[str, int], list],
    idx: list[int],
    start: int,
    now: int,
) -> None:
    """ConsumeQueue units, index keys and other dispatchers for :meth:`_put_plain`; on an
    OSError everything of the batch is undone (CommitLog included) and it is re-raised."""
    index = store.index_service
    others = [d for d in store.dispatchers if not dispatch.puts_hashed_keys(d)]
    before = {}
    try:
        for key, (nxt, units) in queues.items():
            cq = store.writable_consume_queue(key[0], key[1])
            before[key] = cq.max_offset
            cq.put_units(nxt - len(units) // 3, pack_units(units))
        if index is not None and idx:
            if idx[1] > index.end_phy_offset:
                index.put_hashed(idx)
            else:  # cannot happen after recovery; keep the general rule anyway
                others.insert(0, index)
        if others:
            batch = [
                DispatchRequest(
                    r.topic,
                    r.queue_id,
                    r.commitlog_offset,
                    r.size,
                    0,
                    now,
                    r.queue_offset,
                    [],
                    r.uniq_key,
                    0,
                )
                for r in out
            ]
            for m, d in zip(messages, batch):
                d.tags_code = tags_code(m.tags) if m.tags else 0
                k = m.keys
                if k:
                    d.keys = [t for t in (k if isinstance(k, str) else " ".join(k)).split(" ") if t]
            for d in others:
                d.dispatch(batch)
    except OSError:
        for key, old in before.items():
            store.consume_queues[key].truncate_to(old)
        for d in store.dispatchers:
            d.truncate(start)
        store.commitlog.truncate(start)
        raise
