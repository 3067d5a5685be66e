"""Putting messages: the two put paths of the store (RocketMQ ``DefaultMessageStore.putMessage``
/ ``putMessages``, ``CommitLog.asyncPutMessage(s)`` and ``DefaultAppendMessageCallback``).

:func:`put_messages` is the general path: it validates (engine.service.validation), applies delay
levels and compression, encodes each record with :func:`engine.format.message.encode_message`, appends
them to the CommitLog and dispatches them (engine.service.dispatch), or queues them for the group commit
under SYNC_FLUSH. :func:`put_plain` is the fast path for the common case (no user properties,
IPv4 hosts): the compiled core (``rmq_put``, engine/read/_kernel.c) encodes and places the
whole batch in one call, with the layout and property names of engine/format/message.py
(tests/engine/test_fastpaths.py and tests/engine/test_put_kernel.py compare the two paths byte
for byte), or it returns None and changes nothing. PutResult says where a message went.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import itertools
import logging
import operator
import os
import time
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, cast

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
from ..format.consumequeue import CQ_STORE_UNIT_SIZE, UNIT, deliver_tags_code
from ..format.indexfile import topic_prefix_hash
from ..format.javahash import tags_code
from ..format.message import (
    APPEND_LAYOUT,
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    HOST_V4,
    INNER_BATCH_FLAG,
    KEY_SEPARATOR,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    PROPERTY_DELAY,
    PROPERTY_END,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
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
    EncodedMessage,
    Message,
    cal_msg_length,
    compress_body,
    encode_message,
    is_lmq,
    offset_msg_id,
    property_prefix,
    record_magic,
    topic_field,
    topic_needs_v2,
)
from ..format.timerwheel import WHEEL_FILE
from ..storeconfig import COMPRESSION_TYPES
from . import dispatch
from .dispatch import DispatchRequest
from .validation import (
    CHECKED_TAGS,
    NOT_ALLOWED_SEND_TOPICS,
    check_body,
    check_born_host,
    check_message_columns,
    check_messages,
    check_not_lmq,
    check_numbers,
    tags_keys_clean,
)

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
# Fields of Message the fast path reads, in this order; any other field must hold its default.
_PLAIN_FIELDS = (
    "topic",
    "body",
    "tags",
    "keys",
    "queue_id",
    "sharding_key",
    "born_timestamp",
    "born_host",
    "flag",
    "properties",
    "sys_flag",
)
_OTHER_FIELDS = [f for f in dataclasses.fields(Message) if f.name not in _PLAIN_FIELDS]
_OTHER_DEFAULTS = tuple(f.default for f in _OTHER_FIELDS)
# One call per message reads every field, the plain ones first (the columns come from
# zip(*rows)), through the attributes (a subclass may compute a field).
_ALL_NAMES = (*_PLAIN_FIELDS, *(f.name for f in _OTHER_FIELDS))
_ATTRS_GET = operator.attrgetter(*_ALL_NAMES)
_NPLAIN = len(_PLAIN_FIELDS)
_KEYS_PREFIX = property_prefix(PROPERTY_KEYS)
_SHARDING_PREFIX = property_prefix(PROPERTY_SHARDING_KEY)
_UNIQ_PREFIX = property_prefix(PROPERTY_UNIQ_KEY)
_KEY_SEP = ord(KEY_SEPARATOR)
_DEFAULT_BORN = HOST_V4.pack(b"\x7f\x00\x00\x01", 0)
# rmq_put_args's field offsets, from message.py's FIXED_V4_FIELDS (the layout's one home);
# the hosts are written as address + port, so each port must follow its address.
assert UNIT.format in (">qiq", "qiq") and UNIT.size == CQ_STORE_UNIT_SIZE  # rmq_put's units


class PutResult(NamedTuple):
    """Where a put message went: queue offset (units) and CommitLog offset/size (bytes),
    store time (epoch ms), the offset msgId (``MessageDecoder.createMessageId``) and the
    UNIQ_KEY. A named tuple (immutable): the put path builds a batch's results in one C-level
    ``map`` (:data:`_NEW_RESULT`), not one Python constructor call each."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    store_timestamp: int
    msg_id: str
    uniq_key: str | None


_NEW_RESULT = functools.partial(tuple.__new__, PutResult)  # PutResult from its field tuple


class PutResults(Sequence[PutResult]):
    """A compiled batch put's :class:`PutResult` s, kept as the columns ``rmq_put`` wrote
    (copied out of its reused buffers: a few copies a batch) and built as they are read: one
    when indexed, all (once, then kept) when iterated, sliced or compared. RocketMQ's
    ``putMessages`` answers a batch with one ``AppendMessageResult`` (its msgIds joined); this
    is that batch's answer with a result per message for whoever reads it, at no cost per
    message for whoever does not (the mount's ``produce``, ``bench.engine``).

    ``topics``: a topic per message; ``queue_ids`` (int32), ``queue_offsets`` (units),
    ``commitlog_offsets`` (bytes, int64) and ``sizes`` (bytes, int32) arrays of as many
    values; ``store_timestamp`` the batch's (epoch ms); ``msg_ids`` the offset msgIds
    (``MessageDecoder.createMessageId``) as ASCII, each 32 characters and a separator;
    ``uniq_keys`` a UNIQ_KEY per message. Equal to a list of the same PutResults."""

    __slots__ = ("_cols", "_now", "_ids", "_uniq", "_all")

    def __init__(
        self,
        topics: Sequence[str],
        queue_ids: array,
        queue_offsets: array,
        commitlog_offsets: array,
        sizes: array,
        store_timestamp: int,
        msg_ids: bytes,
        uniq_keys: Sequence[str | None],
    ):
        self._cols = (topics, queue_ids, queue_offsets, commitlog_offsets, sizes)
        self._now = store_timestamp
        self._ids = msg_ids
        self._uniq = uniq_keys
        self._all: list[PutResult] | None = None

    def __len__(self) -> int:
        return len(self._uniq)

    def __getitem__(self, i: Any) -> Any:  # (int -> PutResult, slice -> Sequence[PutResult])
        if isinstance(i, slice):
            return self._built()[i]
        if self._all is not None:
            return self._all[i]
        n = len(self._uniq)
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("PutResults index out of range")
        t, q, qo, pos, size = (c[i] for c in self._cols)
        msg_id = self._ids[33 * i : 33 * i + 32].decode()
        return _NEW_RESULT((t, q, qo, pos, size, self._now, msg_id, self._uniq[i]))

    def __iter__(self) -> Iterator[PutResult]:
        return iter(self._built())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (PutResults, list)):
            return self._built() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (as a list's: mutable neighbours compare equal)

    def __repr__(self) -> str:
        return f"PutResults({self._built()!r})"

    def _built(self) -> list[PutResult]:
        if self._all is None:
            self._all = list(
                map(
                    _NEW_RESULT,
                    zip(
                        *self._cols,
                        itertools.repeat(self._now),
                        self._ids.decode().split(),
                        self._uniq,
                    ),
                )
            )
        return self._all


_UNLOADED = object()
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
    """

    def __init__(self, store: MessageStore, load_kernel: Callable[[], Any] | None = None):
        self._load_kernel = load_kernel
        self._kernel: Any = _UNLOADED
        self._readers: Any = _UNLOADED
        self.call: _PutCall | None = None
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.round_robin: dict[str, int] = {}
        self.tags_cache: dict[str, tuple[bytes, int]] = {}
        self.plain_topics: dict[str, tuple[TopicConfig, tuple[int, int, int], PlainTopic]] = {}

    @property
    def readers(self) -> tuple[Callable[..., Any], ...] | None:
        """The compiled readers of :class:`Message` objects, ``(vouch, keys_utf8, vouch_row)``
        (``engine.read.kernel.Kernel.message_reader``, configured with this module's field
        order), None without them: :func:`put_messages` and :func:`_own_keys` then read the
        objects in Python."""
        r = self._readers
        if r is _UNLOADED:
            k = self.kernel
            try:
                r = k.message_reader(Message, _ALL_NAMES, _OTHER_DEFAULTS) if k else None
            except (TypeError, ValueError) as exc:  # (Message changed: its fields not slots)
                log.warning("the compiled reader of messages is off: %s", exc)
                r = None
            self._readers = r
        return r

    @property
    def kernel(self) -> Any:
        """The compiled core (``engine.read.kernel.Kernel``: its ``ffi`` and ``lib``) the fast
        path encodes with, None without one (then every put takes the general path). Loaded
        on first use by the callable the store gave (this layer does not import engine.read)."""
        k = self._kernel
        if k is _UNLOADED:
            k = self._kernel = self._load_kernel() if self._load_kernel is not None else None
        return k

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


def select_queue(
    store: MessageStore, msg: Message, cfg: TopicConfig, round_robin: dict[str, int] | None = None
) -> int:
    """The queue ``msg`` goes to in topic ``cfg`` (:func:`choose_queue`), the store's round
    robin advanced (or ``round_robin``'s)."""
    n = cfg.write_queue_nums
    return choose_queue(
        store.putter.round_robin if round_robin is None else round_robin,
        cfg.topic_name,
        msg.queue_id,
        msg.sharding_key,
        n,
        max(n, cfg.read_queue_nums),
    )


def choose_queue(
    round_robin: dict[str, int],
    topic: str,
    queue_id: int | None,
    sharding_key: str | None,
    write_queues: int,
    queues: int,
) -> int:
    """The queue of a message of ``topic`` (every put path's rule): its ``queue_id`` (one of
    the topic's ``queues``), else its sharding key's hash (``SelectMessageQueueByHash``), else
    the topic's next round-robin queue (``round_robin`` advanced), among ``write_queues``.
    PutMessageError for a queueId that is not the topic's, or for none given to a topic
    without write queues (``writeQueueNums`` 0)."""
    if queue_id is not None:
        if not 0 <= queue_id < queues:
            raise PutMessageError(f"queueId {queue_id} is not a queue of {topic} (0..{queues - 1})")
        return queue_id
    if write_queues <= 0:
        # (writeQueueNums 0: a topic being drained; the broker's randomQueueId has no queue)
        raise PutMessageError(
            f"topic {topic} has no write queue (writeQueueNums 0): it takes a message only "
            f"with a queueId of its queues (0..{queues - 1})"
            if queues > 0
            else f"topic {topic} has no queue (readQueueNums and writeQueueNums 0)"
        )
    if sharding_key is not None:
        return (zlib.crc32(sharding_key.encode()) & 0x7FFFFFFF) % write_queues
    i = round_robin.get(topic, 0)
    round_robin[topic] = i + 1
    return i % write_queues


def put_messages(
    store: MessageStore, messages: list[Message], batch: bool = False, results: bool = True
) -> Sequence[PutResult]:
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
    ReputMessageService dispatches only up to the flushed offset (a disk error in that
    dispatch fails no put: the records are durable, and a later flush round makes them
    visible; ``FlushService.dispatch_flushed``). Encoding errors are
    raised before anything is written.

    Returns a :class:`PutResult` per message; with ``results`` False, [] for a batch of more
    than one message the compiled path stores without SYNC_FLUSH or a listener (which need
    them): a caller that only needs to know that the put succeeded (the mount's
    ``produce.jsonl``) saves their cost (:func:`put_bodies` has the same switch).

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
    cols = None
    if len(messages) == 1:  # one message: vouched for in C (its fields read), else checked
        readers = store.putter.readers
        if readers is not None:
            row = readers[2](messages[0], CHECKED_TAGS, NOT_ALLOWED_SEND_TOPICS)
            if row is not None:
                return _put(store, messages, batch, None, results, row)
        check_messages(messages)
    elif messages:
        readers = store.putter.readers
        if readers is not None:  # one C pass: every rule met and the columns, or None
            cols = readers[0](messages, CHECKED_TAGS, NOT_ALLOWED_SEND_TOPICS)
            if cols is not None:
                return _put(store, messages, batch, cols, results)
        cols = message_columns(messages)
        if cols is None or len(messages) <= _CHECK_EACH_UP_TO:
            check_messages(messages)
        else:
            check_message_columns(messages, dict(zip(_ALL_NAMES, cols)))
    return _put(store, messages, batch, cols, results)


def check_put(store: MessageStore, messages: list[Message], batch: bool = False) -> None:
    """Raise what :func:`put_messages` would raise for ``messages`` now, short of the disk,
    changing nothing: the client rules (:mod:`engine.service.validation`), the topic and queue
    (``_targets``, the round robin left where it is, no system topic created), the delay and
    timer rules, and the sizes of the records they would be (encoded with a stand-in
    UNIQ_KEY, none taken). For a caller that must answer for messages it stores later (the
    mount's ``produce.jsonl`` line left unfinished at ``close()``: the broker's checks of
    ``SendMessageProcessor`` and ``DefaultMessageStore.checkMessage``, which a put repeats).

    Raises: as :func:`put_messages`, but FlushDiskTimeoutError and OSError from a write
    (OSError ENOSPC while the store refuses messages for a full disk); ReadOnlyStoreError for
    a read-only or closed store."""
    _check_room(store)
    check_messages(messages)
    if not messages:
        return
    now = int(time.time() * 1000)
    with store.put_lock:
        if store.closed:
            raise ReadOnlyStoreError("store is closed")
        targets = _targets(store, messages, batch, now, dry=True)
        _encode_all(store, messages, targets, now, dry=True)


#: batches of up to this many messages are checked message by message (``check_messages``), larger
#: ones by the passes over their columns (``check_message_columns``), whose fixed cost a few
#: messages do not repay (16 keyed messages: 3.4 against 5.8 us; even at about 48)
_CHECK_EACH_UP_TO = 32


def message_columns(messages: Sequence[Message]) -> list[tuple] | None:
    """Every field of every message as columns: one tuple a field (``len(messages)`` values in
    order), :data:`_PLAIN_FIELDS` first, in that order (topic, body, tags, keys, queue_id,
    sharding_key, born_timestamp, born_host, flag, properties, sys_flag), then the others in
    :class:`Message`'s order; None where an item has no such fields (not a Message: the rules
    of :func:`check_messages` then say why). One C-level pass of attribute reads: a message's
    instance ``__dict__`` is never asked for (CPython keeps a new instance's attributes without
    one and would build it for each message put)."""
    try:
        return list(zip(*map(_ATTRS_GET, messages)))
    except AttributeError:
        return None


def _message_row(m: Message) -> tuple | None:
    """One message's fields in :func:`message_columns`' order (None: not a Message)."""
    try:
        return _ATTRS_GET(m)
    except AttributeError:
        return None


def put_internal(
    store: MessageStore, messages: list[Message], batch: bool = False
) -> Sequence[PutResult]:
    """The broker's own put path: :func:`put_messages` without the client rules of
    :mod:`engine.service.validation`, for records the broker writes itself (its retry, schedule
    and transaction records carry system properties and reserved topics; RocketMQ's
    ``DefaultMessageStore.putMessage`` checks none of the client's rules). The size limits
    and everything else apply as in :func:`put_messages`. Nothing in rmqfs's faces (the
    mount, ``rmqfs produce``) calls it; tests build broker-written stores with it.

    A text field that UTF-8 cannot encode (a lone surrogate in the tags, keys or a property)
    raises MessageIllegalError, nothing of the batch stored: every text is encoded before
    anything is written. So do the fields' own ranges, which are the record's and not the
    client's rules (a flag or sysFlag outside a Java int, a born time or host that its fields
    cannot hold, a body that is not bytes: :func:`validation.check_numbers`,
    :func:`validation.check_born_host`, :func:`validation.check_body`), checked before any
    path moves the round robin or takes a UNIQ_KEY.
    """
    for m in messages:
        check_numbers(m)
        check_born_host(m.born_host)
        check_body(m.body)
    try:
        return _put(store, messages, batch)
    except UnicodeEncodeError as exc:
        raise MessageIllegalError(
            f"a message field is not encodable as UTF-8 ({exc.reason} at position {exc.start} "
            f"of {exc.object[max(0, exc.start - 20) : exc.end + 20]!r})"
        ) from None


def _check_room(store: MessageStore) -> None:
    """ReadOnlyStoreError for a read-only store, OSError(ENOSPC) while the disk is full
    (``DefaultMessageStore.checkStoreStatus``), OSError(EIO) once a sync of the CommitLog
    failed (:meth:`FlushService.check_not_failed`)."""
    store.check_writable()
    store.flusher.check_not_failed()
    if store.disk_full:
        raise OSError(
            errno.ENOSPC,
            "disk usage above diskSpaceWarningLevelRatio; "
            "the store refuses messages until expired files are deleted",
        )


def _put(
    store: MessageStore,
    messages: list[Message],
    batch: bool,
    cols: list[tuple] | None = None,
    want_results: bool = True,
    row: tuple | None = None,
) -> Sequence[PutResult]:
    """``DefaultMessageStore.putMessage``/``putMessages`` of ``messages`` (one MessageBatch when
    ``batch``): the plain ones by :func:`put_plain`, the rest here: each checked and given its
    queue (:func:`_targets`), encoded (:func:`_encode_all`), given consecutive queue offsets
    (:func:`_assign_offsets`, ``assignOffset``), appended, and dispatched to the ConsumeQueues
    and the index (undone on a disk error: :func:`_dispatch`); with SYNC_FLUSH it waits for
    the group commit. ``cols``: :func:`message_columns` of ``messages`` when the caller has
    them, ``row`` the plain fields of the one message the compiled reader vouched for
    (``vouch_row``). Returns a :class:`PutResult` per message (``want_results`` False: see
    ``results`` in :func:`put_messages`)."""
    _check_room(store)
    if not messages:
        return []
    out = put_plain(store, messages, batch, cols, want_results, row)
    if out is not None:
        for listener in store.listeners:
            listener(out)
        return out
    now = int(time.time() * 1000)
    with store.put_lock:
        if store.closed:
            raise ReadOnlyStoreError("store is closed")
        store.flusher.check_not_failed()  # (again: a sync may have failed while it waited)
        targets = _targets(store, messages, batch, now)
        encoded, delays = _encode_all(store, messages, targets, now)
        queue_offsets, next_offsets = _assign_offsets(store, encoded)
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
        _dispatch(store, requests, start, before)
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


def _targets(
    store: MessageStore, messages: list[Message], batch: bool, now: int, dry: bool = False
) -> list[tuple[str, int, dict[str, str] | None]]:
    """Where each message goes after the delay and timer rewrites: ``(topic, queueId, extra
    properties)``; a batch goes whole to its first message's queue. Checks each topic as
    ``DefaultMessageStore.checkMessage`` and the broker's ``SendMessageProcessor`` do.
    ``dry``: change nothing (the round robin is not moved, no system topic is created:
    :func:`check_put`).

    Raises:
        PutMessageError: a batch of several topics.
        NoSuchTopicError, PermissionDeniedError, MessageIllegalError: the topic refuses it.
    """
    targets: list[tuple[str, int, dict[str, str] | None]] = []
    round_robin = dict(store.putter.round_robin) if dry else store.putter.round_robin
    if batch and len({m.topic for m in messages}) > 1:
        raise PutMessageError("a batch must have a single topic")
    for msg in messages:
        check_not_lmq(msg.topic)
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
        qid = targets[0][1] if batch and targets else select_queue(store, msg, cfg, round_robin)
        if msg.delay_level > 0 and msg.topic != SCHEDULE_TOPIC:
            level = min(msg.delay_level, max(store.delay_levels, default=1))
            if not dry:
                schedule_topic(store)
            extra = {
                PROPERTY_REAL_TOPIC: msg.topic,
                PROPERTY_REAL_QID: str(qid),
                PROPERTY_DELAY: str(level),
            }
            targets.append((SCHEDULE_TOPIC, level - 1, extra))
        else:
            targets.append(timer_target(store, msg, qid, now, dry))
    return targets


def _encode_all(
    store: MessageStore,
    messages: list[Message],
    targets: list[tuple[str, int, dict[str, str] | None]],
    now: int,
    dry: bool = False,
) -> tuple[list[EncodedMessage], list[str | None]]:
    """Each message encoded as a record for its target (properties with TAGS, KEYS, UNIQ_KEY,
    the body compressed per ``tryToCompressMessage``; ``now``: epoch ms for an unset born
    timestamp), and the DELAY level of each one rewritten to the schedule topic (None for
    the others); ``dry``: no UNIQ_KEY taken (a stand-in of the same length: :func:`check_put`).
    Raises MessageTooLargeError as :func:`engine.format.message.encode_message`."""
    cfg_ = store.config
    encoded = []
    delays = []
    for msg, (topic, qid, extra) in zip(messages, targets):
        props = dict(msg.properties or {})
        if msg.tags:
            props[PROPERTY_TAGS] = msg.tags
        keys = _keys_value(msg.keys)
        if keys is not None:
            props[PROPERTY_KEYS] = keys
        if msg.sharding_key is not None:
            props.setdefault(PROPERTY_SHARDING_KEY, msg.sharding_key)
        if not msg.wait_store_msg_ok:
            props[PROPERTY_WAIT] = "false"
        if extra:
            props.update(extra)
        born = msg.born_timestamp or now
        if PROPERTY_UNIQ_KEY not in props:
            props[PROPERTY_UNIQ_KEY] = (
                "0" * store.uniq_keys.id_length if dry else store.uniq_keys.next(born)
            )
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
    return encoded, delays


def _assign_offsets(
    store: MessageStore, encoded: list[EncodedMessage]
) -> tuple[list[int], dict[tuple[str, int], int]]:
    """``CommitLog.assignOffset``: the queue offset of each record (consecutive per queue from
    its uncommitted max offset; 0 for prepared and rollback records, which no queue holds),
    and each queue's next offset after them."""
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
    return queue_offsets, next_offsets


def _dispatch(
    store: MessageStore,
    requests: list[DispatchRequest],
    start: int,
    before: dict[tuple[str, int], int],
) -> None:
    """Hand the appended records to the ConsumeQueues and the index: to the group commit with
    SYNC_FLUSH (it dispatches once flushed), else now; a disk error while dispatching undoes
    the put (each queue back to its offset in ``before``, the dispatchers and the CommitLog
    back to ``start``) and is raised, so no half-stored message is ever visible."""
    if store.sync_flush:
        store.flusher.add_pending(store.commitlog.max_offset, requests)
        return
    try:
        dispatch.dispatch(store, requests)
    except OSError:
        _undo_put(store, before, start)
        raise


def _undo_put(store: MessageStore, before: dict[tuple[str, int], int], start: int) -> None:
    """Undo a put whose dispatch the disk refused, every put path's one undo: each queue of
    ``before`` back to its max offset there, the dispatchers (the index) and the CommitLog
    back to ``start`` (bytes), so no half-stored message is ever visible."""
    for key, old in before.items():
        cq = store.consume_queues.get(key)
        if cq is not None:
            cq.truncate_to(old)
    for d in store.dispatchers:
        d.truncate(start)
    store.commitlog.truncate(start)


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
    store: MessageStore, msg: Message, qid: int, now: int, dry: bool = False
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
    if not dry and store.topic_config.get(TIMER_TOPIC) is None:
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


#: The most queues (``max(writeQueueNums, readQueueNums)``) of a topic the compiled path puts
#: to: its per-topic tables take a few words a queue, so a topics.json written elsewhere with
#: a huge count (2147483647) would have them take gigabytes; such a topic takes the general
#: path, which holds nothing a queue it does not put to. (A broker's topics have 8 to a few
#: hundred; rmqfs creates at most 1024.)
PLAIN_MAX_QUEUES = 8192


def plain_topic(store: MessageStore, topic: str) -> PlainTopic | None:
    """Per-topic pieces for the fast path, or None when the topic needs the general one:
    ``(writeQueueNums, queues, TOPIC field (length + name), 91 + name length (+1 for V2),
    hash of "topic#", MAGICCODE)``; a topic over 127 chars takes the V2 record, as in the
    general path (``message.topic_needs_v2``). Cached while the topic's config stays the same."""
    cfg = store.topic_config.get(topic)
    if cfg is None:
        return None
    state = (cfg.perm, cfg.write_queue_nums, cfg.read_queue_nums)
    cache = store.putter.plain_topics
    hit = cache.get(topic)
    # (what the rest checks follows from the topic and its config's state, but for BatchCQ)
    if hit is not None and hit[0] is cfg and hit[1] == state and topic not in store.batch_cq_topics:
        return hit[2]
    if not cfg.writable or topic == SCHEDULE_TOPIC or topic in store.batch_cq_topics:
        return None
    if is_lmq(topic):
        return None  # the general path refuses it
    if max(cfg.write_queue_nums, cfg.read_queue_nums) > PLAIN_MAX_QUEUES:
        return None  # its tables would take memory a queue: the general path takes none
    raw = topic.encode("utf-8")
    v2 = topic_needs_v2(topic, store.config.auto_message_version_on_topic_len)
    if len(raw) > (MAX_TOPIC_BYTES if v2 else MAX_TOPIC_LENGTH_V1):
        return None  # the general path refuses it
    info = (
        cfg.write_queue_nums,
        max(cfg.write_queue_nums, cfg.read_queue_nums),
        topic_field(raw, v2),
        cal_msg_length(0, 0, len(raw), 0, v2),
        topic_prefix_hash(topic),
        record_magic(v2),
    )
    if len(cache) > 65536:
        cache.clear()
    cache[topic] = (cfg, state, info)
    return info


def put_plain(
    store: MessageStore,
    messages: list[Message],
    batch: bool = False,
    cols: list[tuple] | None = None,
    results: bool = True,
    row: tuple | None = None,
) -> Sequence[PutResult] | None:
    """The put path for the common case: the batch encoded, placed and dispatched by the
    compiled core (``rmq_put`` of engine/read/_kernel.c), Python checking and accounting per
    batch, not per message.

    Handles puts where every message has no user properties, sysFlag 0, an IPv4 (or
    default) born host, a V1 or V2 topic (not SCHEDULE_TOPIC_XXXX, not a BatchCQ topic) and
    every other Message field at its default (no delay_level, compress or
    wait_store_msg_ok=False), with an IPv4 store host, without enabledAppendPropCRC or
    compressMsgBodyOverHowmuch, with the compiled core loaded;
    returns None for anything else (nothing written, no state changed), and
    :func:`put_messages` runs the general path. The disk-full refusal is checked before.

    ``batch``: a MessageBatch (``putMessages`` of a ``MessageExtBatch``) of one topic: the
    queue is chosen once, from the first message (its queueId, its sharding key's hash, else
    the topic's round robin, advanced once), every record goes to it with consecutive queue
    offsets, and the records go whole into one CommitLog segment (the blank before the first
    when they do not all fit in the rest of it: ``doAppend(MessageExtBatch)``), as the general
    path puts them. A batch of several topics returns None (the general path refuses it).
    ``cols``: the batch's :func:`message_columns` where the caller has them; ``row``: the
    plain fields of a single message the compiled reader vouched for (``vouch_row``).

    What RocketMQ does per message in ``CommitLog.DefaultAppendMessageCallback.doAppend`` (the
    record, the END_OF_FILE blank and the roll to the next segment),
    ``ConsumeQueue.putMessagePositionInfo`` and ``IndexService.buildIndex`` (the units, the
    ``topic#key`` hashes) happens in one C call for the batch; the records are then written
    with one ``pwrite`` per CommitLog segment touched, the units with one per ConsumeQueue
    file touched, the index entries as :meth:`IndexFile.put_hashed` batches them. The bytes are
    the general path's (:func:`engine.format.message.encode_message`), which
    tests/engine/test_fastpaths.py and tests/engine/test_put_kernel.py check byte for byte.
    The shared state is kept as the general path keeps it (topicQueueTable
    ``putter.queue_offsets``, round robin, ``dispatched_store_timestamp``). Under SYNC_FLUSH
    the batch's dispatch waits for the flush as the general path's does (the flush thread
    dispatches it; ``GroupCommitService``: one ``fdatasync`` serves every batch waiting) and
    the call returns once the records are on disk.

    Raises (nothing written): PutMessageError (a queueId that is not the topic's),
    PropertiesSizeExceededError, MessageTooLargeError (over maxMessageSize + 64 KiB, or
    larger than a CommitLog segment), ReadOnlyStoreError (closed); OSError from the disk,
    everything of the batch undone (:func:`dispatch_plain`). FlushDiskTimeoutError under
    SYNC_FLUSH when the flush took longer than syncFlushTimeout (the records are appended).
    """
    cfgs = store.config
    kernel = store.putter.kernel
    if kernel is None or not _plain_store(store):
        return None
    n = len(messages)
    if n == 1 and not batch:  # the least per-call cost: no columns, one topic
        if row is None:  # (else the compiled reader vouched for a plain one: ``vouch_row``)
            row = _message_row(messages[0])
            if row is None or row[_NPLAIN:] != _OTHER_DEFAULTS or row[9] or row[10]:
                return None  # not plain: properties, sysFlag, another field not at its default
        if len(row[1]) > cfgs.max_message_size:
            return None  # the general path says why
        bh = row[7]
        born_host = None
        if bh is not None:
            if len(bh[0]) != 4:
                return None  # an IPv6 born host
            born_host = HOST_V4.pack(*bh)
        info = plain_topic(store, row[0])
        if info is None or info[0] <= 0:
            return None  # no write queue: the general path says so
        return _under_put_lock(store, _put_one, kernel, row, born_host, info)
    if cols is None:
        cols = message_columns(messages)
        if cols is None:
            return None
    for col, default in zip(cols[_NPLAIN:], _OTHER_DEFAULTS):
        if col.count(default) != n:
            return None
    cols = cols[:_NPLAIN]
    if any(cols[9]) or any(cols[10]):  # properties, sysFlag
        return None
    lens = array("q", map(len, cols[1]))
    if max(lens) > cfgs.max_message_size:
        return None  # the general path says why
    bh_c = cols[7]
    if bh_c.count(None) == n:
        born_hosts = None
    else:
        try:
            born_hosts = b"".join(map(_born_host_bytes, bh_c))
        except ValueError:  # an IPv6 born host
            return None
    tnames = tuple(dict.fromkeys(cols[0]))
    if batch and len(tnames) > 1:
        return None  # the general path refuses a batch of several topics
    infos: tuple = tuple(map(plain_topic, itertools.repeat(store), tnames))
    if None in infos or min(i[0] for i in infos) <= 0:
        return None  # no write queue: the general path says so
    return _under_put_lock(
        store, _put_compiled, kernel, cols, lens, born_hosts, tnames, infos, results, batch
    )


def _under_put_lock(
    store: MessageStore, put: Callable[..., Sequence[PutResult] | None], *args: Any
) -> Sequence[PutResult] | None:
    """``put(store, *args, now)`` under the store's put lock (``putMessageLock``; ``now`` the
    store timestamp, epoch ms), then, under SYNC_FLUSH, the wait for its records' flush
    (GroupCommitService: one fdatasync for this put and its peers'); None where ``put``
    answers None (nothing put: the general path's). ReadOnlyStoreError when the store is
    closed."""
    now = int(time.time() * 1000)
    with store.put_lock:
        if store.closed:
            raise ReadOnlyStoreError("store is closed")
        store.flusher.check_not_failed()  # (again: a sync may have failed while it waited)
        out = put(store, *args, now)
    if out is not None and store.sync_flush:
        last = out[-1]
        store.flusher.wait_flushed(last.commitlog_offset + last.size, out)
    return out


def put_bodies(
    store: MessageStore,
    topic: str,
    bodies: list[bytes],
    queue_id: int | None = None,
    results: bool = True,
    tags: str | Sequence[str | None] | None = None,
    keys: str | Sequence[str | list[str] | None] | None = None,
) -> Sequence[PutResult]:
    """``put_messages([Message(topic, body, tags=..., keys=..., queue_id=queue_id) for body in
    bodies])``, all or none, without a :class:`Message` per body on the compiled path (the
    mount's ``produce`` lines, ``rmqfs produce``; RocketMQ's ``DefaultMessageStore.putMessages``
    of messages with tags and keys at most): the topic and queue are checked once, the tags and
    keys by passes over their columns (:func:`validation.tags_keys_clean`; the rules of
    :func:`check_messages`), and the columns :func:`put_plain` reads from each message are built
    from them; one body is put as a single message (:func:`_put_one`).

    ``tags``: one value for every message (a ``str``, or None: no tags) or a sequence of one
    per body (each a ``str`` or None). ``keys``: a ``str`` for every message (space-separated
    keys, as :class:`Message` takes them) or a sequence of one per body (each a ``str``, a list
    of keys or None). With ``results`` False the compiled path builds no :class:`PutResult` for
    a batch where nothing needs them (no SYNC_FLUSH, no listener) and returns [] then: a caller
    that only needs to know the put succeeded saves their cost.

    Raises: ValueError for a ``tags`` or ``keys`` sequence whose length is not ``len(bodies)``;
    otherwise the errors of :func:`put_messages` (MessageIllegalError for a tag or key that
    breaks a rule, ...).
    """
    n = len(bodies)
    tags_c = _per_body("tags", tags, n)
    keys_c = _per_body("keys", keys, n)

    def messages() -> list[Message]:
        return [
            Message(topic, b, tags=t, keys=k, queue_id=queue_id)
            for b, t, k in zip(bodies, tags_c, keys_c)
        ]

    if not bodies:
        _check_room(store)  # as put_messages([]) does
        return []
    template = Message(topic, b"", queue_id=queue_id)
    check_messages([template])
    row = _ATTRS_GET(template)[:_NPLAIN]
    kernel = store.putter.kernel
    if (
        kernel is None
        or not _plain_store(store)
        or list(map(type, bodies)).count(bytes) != n
        or max(lens := array("q", map(len, bodies))) > store.config.max_message_size
    ):
        return put_messages(store, messages())
    info = plain_topic(store, topic)
    if info is None or info[0] <= 0:  # no write queue: the general path says so
        return put_messages(store, messages())
    if (tags is not None or keys is not None) and not tags_keys_clean(tags_c, keys_c):
        check_messages(messages())  # the rule a value breaks, or each one passes
    _check_room(store)
    if n == 1:  # one line a write (``echo >> produce``): the single put's least cost
        one = (topic, bodies[0], tags_c[0], keys_c[0], *row[4:])
        out = _under_put_lock(store, _put_one, kernel, one, None, info)
    else:
        cols = [tuple(itertools.repeat(v, n)) for v in row]
        cols[1], cols[2], cols[3] = tuple(bodies), tags_c, keys_c
        out = _under_put_lock(
            store, _put_compiled, kernel, cols, lens, None, (topic,), (info,), results, False
        )
    if out is None:  # (a line the single put's compiled lane does not take: the general path)
        return put_messages(store, messages())
    for listener in store.listeners:
        listener(out)
    return out


def _per_body(name: str, value: str | Sequence[object] | None, n: int) -> tuple:
    """:func:`put_bodies`' ``tags`` or ``keys`` as a column of ``n`` values: None or a ``str``
    for every body, else the sequence's values (ValueError when they are not ``n``)."""
    if value is None or isinstance(value, str):
        return tuple(itertools.repeat(value, n))
    col = tuple(value)
    if len(col) != n:
        raise ValueError(f"{name}: {len(col)} values for {n} bodies")
    return col


def _plain_store(store: MessageStore) -> bool:
    """Whether the store's settings let the compiled path put (IPv4 store host, no property
    CRC, no compression by size)."""
    cfg = store.config
    return (
        len(store.store_host[0]) == 4
        and not cfg.enabled_append_prop_crc
        and cfg.compress_msg_body_over_howmuch < 0
    )


def _born_host_bytes(host: tuple[bytes, int] | None) -> bytes:
    """BORNHOST of a plain record: IPv4 address and int32 port (ValueError for IPv6)."""
    if host is None:
        return _DEFAULT_BORN
    if len(host[0]) != 4:
        raise ValueError("IPv6")
    return HOST_V4.pack(*host)


class _PutCall:
    """What ``rmq_put`` is called with, kept between puts (one per store, used under its put
    lock): the argument struct with the store's constants set once, output arrays grown as
    batches grow, and the per-topic tables of recent topic sets."""

    def __init__(self, kernel: Any, store: MessageStore):
        ffi = self.ffi = kernel.ffi
        self.lib = kernel.lib
        a = self.args = ffi.new("rmq_put_args *")
        self.keep: list = [ffi.from_buffer("uint8_t[]", _UNIQ_PREFIX)]
        a.uniq_name = self.keep[0]
        a.uniq_name_len = len(_UNIQ_PREFIX)
        self.keep.append(ffi.from_buffer("uint8_t[]", _KEYS_PREFIX))
        a.keys_name = self.keep[1]
        a.keys_name_len = len(_KEYS_PREFIX)
        a.prop_end = PROPERTY_END[0]
        a.key_sep = _KEY_SEP
        a.default_born = list(_DEFAULT_BORN)
        a.max_props = MAX_PROPERTIES_LENGTH
        for field, value in APPEND_LAYOUT.items():  # engine/format's layout, by C argument
            setattr(a, field, value)
        self.store_values: tuple = ()
        self.cap = 0  # messages the output arrays hold
        self.nslots_cap = 0
        self.idx_cap = 0
        self.out_cap = 0
        self.topics: dict[tuple, tuple] = {}
        self.heads: dict[tuple, tuple] = {}
        # the pointers of the struct set by the last call (kept alive here): set again only
        # when one changes
        self.last: tuple = ()
        self.kernel = kernel
        self.lane: Any = None  # the single put's (_put_one), for the generator below
        self.lane_ids: object = None
        # the topic tables the struct points at since the last single put (set_topic)
        self.last_topic: tuple = ()
        self.last_tables: tuple = ()

    def set_store(self, store: MessageStore) -> None:
        """The store's values that may change between puts (a config reload, a UNIQ_KEY
        generator put in place of another: the lane is made again over its state)."""
        ids = store.uniq_keys
        if ids is not self.lane_ids:
            putter = store.putter
            # (a generator of another kind: no lane, single puts take the general path)
            state = getattr(ids, "lane_state", None)
            self.lane = state and self.kernel.put_lane(
                self,
                self.args,
                putter.round_robin,
                putter.queue_offsets,
                putter.tags_cache,
                _SHARDING_PREFIX,
                PutResult,
                *state(),
            )
            self.lane_ids = ids
        values = (store.store_host, store.commitlog.file_size, store.config.max_message_size)
        if values != self.store_values:
            a = self.args
            host = store.store_host
            a.store_host = list(HOST_V4.pack(*host))
            a.msg_id_prefix = list(HOST_V4.pack(*host).hex().upper().encode())
            a.file_size = store.commitlog.file_size
            a.max_total = store.config.max_message_size + RECORD_SLACK
            self.store_values = values

    def set_varying(self, varying: tuple) -> None:
        """Point the struct at this batch's per-message and per-topic tables (all but
        ``heads``, which the caller sets), when they are not the ones of the last call (a
        batch like the last one sets nothing)."""
        last = self.last
        if len(last) == len(varying) and not any(map(operator.is_not, varying, last)):
            return
        a = self.args
        (
            a.topic_of,
            a.head_of,
            a.queue_of,
            a.born,
            a.born_host,
            a.flag,
            a.head_end,
            a.head_tags_code,
            a.head_keys_at,
            a.head_keys_len,
        ) = varying[:10]
        self._point_at(varying[10:])
        self.last = varying
        # the topic tables changed: the next single put points the struct at its own again,
        # even when this batch fails before it is done (set_topic)
        self.last_topic = ()

    def set_topic(self, topic: str, info: PlainTopic) -> None:
        """Point the struct at the tables of one topic, a single put's (``rmq_put_one`` sets
        the per-message fields itself), when they are not the ones it points at already."""
        last = self.last_topic
        if last and last[1] is info and last[0] == topic:
            return
        slots, tables = self.topic_tables((topic,), (info,))
        self._point_at(tables)
        self.args.nslots = len(slots)
        self.last_topic = (topic, info)
        self.last_tables = tables  # (kept alive while the struct points at them)
        self.last = ()  # the next batch points the struct at every one of its tables again

    def _point_at(self, tables: Sequence) -> None:
        """Point the struct at a set of topics' tables (:meth:`topic_tables`' arrays, in its
        order); the caller keeps them alive."""
        a = self.args
        (
            a.topic_field,
            a.topic_field_end,
            a.topic_magic,
            a.topic_base,
            a.topic_hash,
            a.topic_nwq,
            a.topic_slot,
            a.topic_rr,
        ) = tables

    def arrays(self, n: int, nslots: int, nidx: int, nout: int) -> None:
        """Output arrays for ``n`` messages, ``nslots`` queues, ``nidx`` index entries and
        ``nout`` bytes of records, reallocated (doubling) when short."""
        ffi, a = self.ffi, self.args
        if n > self.cap:
            c = self.cap = max(n, 2 * self.cap, 64)
            self.pos = a.pos = ffi.new("int64_t[]", c)
            self.size = a.size = ffi.new("int32_t[]", c)
            self.queue = a.queue = ffi.new("int32_t[]", c)
            self.qoff = a.qoff = ffi.new("int64_t[]", c)
            self.units = a.units = ffi.new("uint8_t[]", c * CQ_STORE_UNIT_SIZE)
            self.chunks = a.chunks = ffi.new("int64_t[]", 3 * (c + 1))
            self.msg_id = a.msg_id = ffi.new("uint8_t[]", 33 * c)
            self.zeros = ffi.new("int32_t[]", c)  # topic_of / head_of of one topic / head
            self.minus_ones = ffi.from_buffer("int32_t[]", array("i", [-1]) * c)  # round robin
        if nslots > self.nslots_cap:
            c = self.nslots_cap = max(nslots, 2 * self.nslots_cap, 16)
            self.slot_units = a.slot_units = ffi.new("int64_t[]", c + 1)
            self.unit_fill = a.unit_fill = ffi.new("int64_t[]", c)
            self.slot_next = a.slot_next = ffi.new("int64_t[]", c)
        if nidx > self.idx_cap:
            c = self.idx_cap = max(nidx, 2 * self.idx_cap, 128)
            self.idx = a.idx = ffi.new("int64_t[]", 3 * c)
        a.idx_cap = self.idx_cap
        if nout > self.out_cap:
            c = self.out_cap = max(nout, 2 * self.out_cap, 1 << 16)
            self.out = a.out = ffi.new("uint8_t[]", c)
        a.cap = self.out_cap

    def head_tables(
        self,
        tags_cache: dict[str, tuple[bytes, int]],
        part: tuple[str | None, str | None, str | None],
    ) -> tuple:
        """The :func:`_heads` arrays of one head, as cffi buffers (cached)."""
        hit = self.heads.get(part)
        if hit is None:
            hit = tuple(
                self.ffi.from_buffer(t, v) for t, v in zip(_HEAD_TYPES, _heads(tags_cache, [part]))
            )
            if len(self.heads) > 256:
                self.heads.clear()
            self.heads[part] = hit
        return hit

    def topic_tables(self, tnames: tuple[str, ...], infos: tuple[PlainTopic, ...]) -> tuple:
        """``(slots, topic arrays)`` of a set of topics (cached while their configs stand):
        ``slots`` lists (topic, queueId) of every queue of each topic in order."""
        hit = self.topics.get(tnames)
        if hit is not None and hit[0] == infos:
            return hit[1], hit[2]
        ffi = self.ffi
        slots: list[tuple[str, int]] = []
        first = array("i")
        for t, info in zip(tnames, infos):
            first.append(len(slots))
            slots += [(t, q) for q in range(info[1])]
        tables = (
            ffi.from_buffer("uint8_t[]", b"".join(i[2] for i in infos)),
            ffi.from_buffer(
                "int32_t[]", array("i", itertools.accumulate(len(i[2]) for i in infos))
            ),
            ffi.from_buffer("uint32_t[]", array("I", [i[5] for i in infos])),
            ffi.from_buffer("int64_t[]", array("q", [i[3] for i in infos])),
            ffi.from_buffer("uint32_t[]", array("I", [i[4] for i in infos])),
            ffi.from_buffer("int32_t[]", array("i", [i[0] for i in infos])),
            ffi.from_buffer("int32_t[]", first),
            ffi.new("int64_t[]", len(tnames)),
        )
        if len(self.topics) > 64:
            self.topics.clear()
        self.topics[tnames] = (infos, slots, tables)
        return slots, tables


def _put_compiled(
    store: MessageStore,
    kernel: Any,
    cols: list[tuple],
    lens: array,
    born_hosts: bytes | None,
    tnames: tuple[str, ...],
    infos: tuple[PlainTopic, ...],
    results: bool,
    together: bool,
    now: int,
) -> Sequence[PutResult]:
    """:func:`put_plain` of a batch under the put lock: its columns to ``rmq_put``, its output
    to the files, its results ([] when not ``results`` and neither SYNC_FLUSH nor a listener
    needs them; a dispatcher besides the index gets them built for it alone). ``together``: a
    MessageBatch of one topic (:func:`put_plain`)."""
    topic_c, tags_c, keys_c = cols[0], cols[2], cols[3]
    n = len(topic_c)
    call = _call(store, kernel)
    ffi, lib, a = call.ffi, call.lib, call.args
    slots, tables = call.topic_tables(tnames, infos)
    nslots = len(slots)
    index = store.index_service
    # The struct does not own what its pointers point at: ``hold`` keeps this call's buffers
    # alive until rmq_put has returned; the cached ones live in ``call``.
    uniq_first = store.uniq_keys.counter
    hold, uniq_keys = _batch_args(
        call, store, cols, lens, born_hosts, tnames, infos, tables, nslots, now, index, together
    )
    _queue_state(store, call, tnames, slots, tables[7])
    a.now = now
    cl = store.commitlog
    a.start = start = cl.max_offset
    a.want_index = index is not None
    a.nslots = nslots
    a.together = together
    rc = lib.rmq_put(a)
    if rc == 2:  # short of room (properties past 512 bytes a message): nothing changed
        call.arrays(n, nslots, a.nidx, a.need)
        rc = lib.rmq_put(a)
    del hold
    if rc != 0:
        if rc == 1:
            _counters_as_refused(store, lib, a, cols, uniq_first, together)
        _refused(lib, a, rc, cl.file_size)
    # the round robin moves as the general path's, which picks every queue before it appends
    # (a disk error below leaves it moved)
    rr, rr_now = store.putter.round_robin, tables[7]
    if len(tnames) == 1:
        rr[tnames[0]] = rr_now[0]
    else:
        rr.update(zip(tnames, ffi.unpack(rr_now, len(tnames))))
    _append_out(call, cl, start, a.nchunks, a.need, a.end, now)
    used, units, sn_after = _queue_units_out(call, slots, n)
    out: Sequence[PutResult]
    if results or store.sync_flush or store.listeners:
        out = _results(call, topic_c, uniq_keys, now)
        built: Sequence[PutResult] | Callable[[], Sequence[PutResult]] = out
    else:
        out = []
        built = functools.partial(_results, call, topic_c, uniq_keys, now)
    entries = array("q")
    if index is not None:
        entries.frombytes(ffi.buffer(call.idx, 24 * a.nidx))
    _dispatch_out(store, built, tags_c, keys_c, units, entries, start, a.end, now)
    queue_offsets = store.putter.queue_offsets
    for k in used:
        queue_offsets[slots[k]] = sn_after[k]
    return out


def _put_one(
    store: MessageStore,
    kernel: Any,
    row: tuple,
    born_host: bytes | None,
    info: PlainTopic,
    now: int,
) -> Sequence[PutResult] | None:
    """:func:`_put_compiled` of one message (``row``: :func:`_message_row`'s fields), at the
    least per-call cost (``DefaultMessageStore.putMessage``): one call of the compiled lane
    (``_putobj.Lane.put``) builds its property head (TAGS from the cache, KEYS, SHARDING_KEY),
    chooses its queue (:func:`choose_queue`'s rule, the round robin advanced before the put),
    takes its UNIQ_KEY (``UniqKeyGenerator.lane_state``), encodes its record straight into the
    CommitLog's mapping where it fits what is allocated there (else into ``call.out``, then
    CommitLog's append) and builds its PutResult; what it cannot do it answers with a code,
    done here before it is called again (a tags item, a queue's first offset, the month of its
    UNIQ_KEY, a row's texts and ints as exact types, a larger buffer, the error to raise).
    On a store whose only dispatcher is its index, without SYNC_FLUSH, the lane adds the
    index entries to those waiting (``IndexService.lane_state``) where it can; then the unit
    and the entries the lane did not add (:func:`_dispatch_one`, else :func:`_dispatch_out`).
    None, nothing taken or changed, for a row the lane does not take (a text UTF-8 cannot
    encode, no companion module, ...): :func:`put_plain` answers None and the general path
    puts it or says why."""
    keys = row[3]
    if keys.__class__ is bytes:  # (not a value the rules take: the general path says so; to
        return None  # the lane, bytes are a KEYS value _lane_row encoded)
    call = _call(store, kernel)
    lane = call.lane
    if lane is None:  # (no companion module: the general path)
        return None
    nslots = info[1]
    if not call.cap or nslots > call.nslots_cap:
        call.arrays(1, nslots, 1, len(row[1]) + 512)  # else what the last call left fits
    call.set_topic(row[0], info)
    cl = store.commitlog
    start = cl.max_offset
    try:
        window = cl.files.write_window(start, info[3] + len(row[1]) + _ONE_HEAD_ROOM)
    except OSError:  # from allocating, nothing written: the record goes into call.out, and its
        window = None  # append meets the disk's error once its queue and UNIQ_KEY are taken,
        # as in the general path, which chooses and encodes before it writes
    index = store.index_service
    sync = store.sync_flush
    if index is None:
        want = None  # (no entries)
    elif not sync and len(ds := store.dispatchers) == 1 and ds[0] is index:
        want = index.lane_state()  # (the lane adds them to those waiting where it can)
    else:
        want = True  # (as a list)
    r: tuple | None = None
    try:
        r = lane.put(row, born_host, info, now, start, window, want)
        if len(r) == 3:  # a step of Python first, or the general path's (None)
            r = _lane_put(store, call, lane, r, row, born_host, info, now, start, window, want)
            if r is None:
                return None
        result, key, tc, end, in_place, need, nchunks, entries = r
        if in_place:  # (one record, in the segment it started in)
            cl.appended_in_place(end, now)
        else:
            _append_out(call, cl, start, nchunks, need, end, now)
    except BaseException:
        # anything raised (a signal's KeyboardInterrupt, even one raised as the lane's call
        # returns, before its answer is kept; a MemoryError; the disk's error of the append)
        # before the CommitLog counts the record: so that recovery and queries never find a
        # put that failed, its record goes where it was written into the mapping (what lies
        # past the CommitLog's end is zeros, or this put's record), and the index entries the
        # lane added (under the put lock, entries at or past the CommitLog's end are this
        # put's alone)
        if cl.max_offset == start:
            _forget_failed_put(window, index if want.__class__ is tuple else None, start)
        raise
    out = [result]
    qoff = result.queue_offset
    if entries is None:
        entries = []
    if sync or not _dispatch_one(
        store, key, qoff, result.commitlog_offset, result.size, tc, entries, start, now
    ):
        unit = UNIT.pack(result.commitlog_offset, result.size, tc)
        _dispatch_out(store, out, (row[2],), (keys,), [(key, qoff, unit)], entries, start, end, now)
    store.putter.queue_offsets[key] = qoff + 1
    return out


def _forget_failed_put(window: tuple | None, index: Any, start: int) -> None:
    """What a single put that failed before the CommitLog counted its record (at ``start``)
    may have left (:func:`_put_one`): its record in the mapping's ``window`` (what lies past
    the CommitLog's end is zeros, or this put's record: its first four bytes are its size),
    zeroed; its entries among the ``index``'s waiting ones (given where the lane may have added
    them; under the put lock, entries at or past the CommitLog's end are this put's alone),
    taken out. Raises nothing: the put's own error is the one raised (a mapping the failed
    append closed, a cut of the IndexFiles the disk refuses, are logged)."""
    try:
        if window is not None:
            m, pos, room = window
            size = int.from_bytes(m[pos : pos + 4], "big")
            if 0 < size <= room:
                m[pos : pos + size] = bytes(size)
        if index is not None and index.end_phy_offset >= start:
            index.truncate(start)
    except (OSError, ValueError) as exc:
        log.warning("undoing a put that failed at CommitLog offset %d: %s", start, exc)


def _lane_put(
    store: MessageStore,
    call: _PutCall,
    lane: Any,
    answer: tuple,
    row: tuple,
    born_host: bytes | None,
    info: PlainTopic,
    now: int,
    start: int,
    window: tuple | None,
    want: object,
) -> tuple | None:
    """The steps ``lane.put``'s ``answer`` (a code) asks for, each done before it is called
    again (``want``: its index argument, as :func:`_put_one` gave it), until it answers with
    its record written (its 8-tuple; :data:`_LANE_TRIES` steps
    at most): None where the general path must put the message (a row the lane does not
    take, answers that did not settle), nothing taken and nothing left behind (a queue's next
    offset a step put in the topicQueueTable goes again). Raises what the general path raises
    for a queueId that is not the topic's and for a refused record (:func:`_refused`)."""
    nslots = info[1]
    queue_offsets = store.putter.queue_offsets
    looked_up = []
    r = answer
    for _ in range(_LANE_TRIES):
        if len(r) != 3:
            return r
        rc = r[0]
        if rc == 2 and window is not None:  # short of room in the window (a roll): call.out
            window = None
        elif rc == 2:  # short of room in call.out (properties past 512 bytes a message)
            call.arrays(1, nslots, r[2], r[1])
        elif rc == _LANE_MONTH:  # its UNIQ_KEY's time is past the generator's month
            store.uniq_keys.roll_month(r[1])
        elif rc == _LANE_TAGS:  # (tags UTF-8 cannot encode: the general path says why, after
            try:  # it has chosen the queue and taken the UNIQ_KEY, as it does)
                _tags_item(store.putter.tags_cache, row[2])
            except UnicodeEncodeError:
                break
        elif rc == _LANE_OFFSET:  # the queue's first put since the store opened
            k = (row[0], r[1])
            queue_offsets[k] = store.max_offset(row[0], r[1], committed=False)
            looked_up.append(k)
        elif rc == _LANE_QUEUE:  # a queueId not the topic's, or no write queue
            choose_queue({}, row[0], row[4], row[5], info[0], nslots)  # (raises why)
            break  # (it did not: the general path says)
        elif rc == _LANE_ROW and row is not (row := _lane_row(row)):
            pass  # its texts as exact str, its ints as int, its keys their KEYS value: again
        elif rc > 0:
            _refused(call.lib, call.args, rc, store.commitlog.file_size)
        else:  # a row the lane does not take (a text UTF-8 cannot encode, ...): the general
            break  # path puts it or says why; nothing was taken or changed
        r = lane.put(row, born_host, info, now, start, window, want)
    else:
        if len(r) != 3:
            return r
    for k in looked_up:  # (the general path, alone, would not have them yet)
        queue_offsets.pop(k, None)
    return None


def _lane_row(row: tuple) -> tuple:
    """``row`` as ``_putobj.Lane.put`` takes it (a row it answered ``_LANE_ROW`` for): its
    topic, tags and sharding key exact ``str`` (a subclass's characters, as the general path
    stores them), its queueId, born timestamp and flag exact ``int`` (a bool's or IntEnum's
    value), its keys their KEYS value (a list's joined, as UTF-8 bytes: ``[""]`` is an empty
    value, written; a ``str``'s characters). ``row`` itself when nothing changes."""
    topic, tags, keys, sharding = row[0], row[2], row[3], row[5]
    qid, born, flag = (_exact_int(row[i]) for i in (4, 6, 8))
    if keys is not None and keys.__class__ is not str:
        value = _keys_value(keys)
        try:
            keys = None if value is None else str.__str__(value).encode()
        except UnicodeEncodeError:  # (the general path says so, as it says it: not here)
            return row
    new = (
        _exact_str(topic),
        row[1],
        _exact_str(tags),
        keys,
        qid,
        _exact_str(sharding),
        born,
        row[7],
        flag,
        *row[9:],
    )
    return row if all(map(operator.is_, new, row)) else new


def _exact_int(v: Any) -> Any:
    """An ``int`` subclass's value (a bool, an IntEnum: what the rules take as an int) as an
    exact ``int``; any other value as it is."""
    return int(v) if isinstance(v, int) and v.__class__ is not int else v


def _exact_str(v: Any) -> Any:
    """A ``str`` subclass's characters as an exact ``str`` (its ``__str__`` not asked); any
    other value as it is."""
    return str.__str__(v) if isinstance(v, str) and v.__class__ is not str else v


#: steps a single put's lane may ask for before its put is given to the general path, each
#: followed by one more call of ``_putobj.Lane.put`` (a tags item, a queue's offset, the
#: month, a row as it takes it, a window that is short, larger arrays: each asked once)
_LANE_TRIES = 8
#: what ``_putobj.Lane.put`` answers when it needs a step of Python first (``_putobj.c``)
_LANE_TAGS, _LANE_QUEUE, _LANE_OFFSET, _LANE_ROW, _LANE_MONTH = -1, -2, -3, -4, -5
#: bytes of a single put's window past the record's fixed part and body, for its property items:
#: the most a UNIQ_KEY item takes (``UNIQ_KEY``, separators and the id of an IPv6 producer, 56
#: hex digits), room for short TAGS or KEYS. The window is what is allocated, usually more;
#: a record that does not fit, at the end of what is allocated, takes call.out and the append.
_ONE_HEAD_ROOM = 96


def _dispatch_one(
    store: MessageStore,
    key: tuple[str, int],
    queue_offset: int,
    commitlog_offset: int,
    size: int,
    tc: int,
    entries: list[int] | bool,
    start: int,
    now: int,
) -> bool:
    """:func:`dispatch_plain` of a single put on a store whose only dispatcher is its index
    (the usual store; ``CommitLogDispatcherBuildConsumeQueue`` and ``...BuildIndex``), at the
    least per-call cost: the ConsumeQueue unit of ``key`` at ``queue_offset`` (the record at
    ``commitlog_offset``, ``size`` bytes, its tagsCode ``tc``), the index ``entries``
    (:meth:`IndexService.put_hashed`), or, where the lane added them to those waiting
    (``entries`` a bool: whether they are due), the write of those due
    (:meth:`IndexService.write_pending_now`). False, with nothing done, for any other store
    (the caller dispatches it the general way). On an OSError the put is undone (its unit,
    its entries, the CommitLog from ``start``) and the error re-raised."""
    index = store.index_service
    if entries.__class__ is not bool:  # (added by the lane: the store is one of these)
        ds = store.dispatchers
        if index is None:
            if ds or entries:
                return False
        elif (
            len(ds) != 1 or ds[0] is not index or (entries and entries[1] <= index.end_phy_offset)  # type: ignore[index]
        ):
            return False
    cq = None
    try:
        cq = store.writable_consume_queue(*key)  # (EMFILE, ...: its files opened)
        old = cq.max_offset
        cq.put_unit(queue_offset, commitlog_offset, size, tc)
        if entries.__class__ is bool:
            if entries:  # (due)
                index.write_pending_now()  # type: ignore[union-attr]
        elif index is not None and entries:
            index.put_hashed(entries)  # type: ignore[arg-type]
    except OSError:
        _undo_put(store, {key: old} if cq is not None else {}, start)
        raise
    store.dispatched_store_timestamp = now
    return True


def _call(store: MessageStore, kernel: Any) -> _PutCall:
    """The store's :class:`_PutCall` (made on the first compiled put), with the store's
    current values."""
    putter = store.putter
    call = putter.call
    if call is None:
        call = putter.call = _PutCall(kernel, store)
    call.set_store(store)
    return call


def _append_out(
    call: _PutCall, cl: Any, start: int, nchunks: int, need: int, end: int, now: int
) -> None:
    """Append the ``need`` bytes ``rmq_put`` left in ``call.out`` to the CommitLog ``cl``:
    ``nchunks`` runs (the records of one segment each, the END_OF_FILE blank ending a run
    before the next), the first at ``start``; ``end``: the CommitLog's end after them."""
    data = memoryview(call.ffi.buffer(call.out, need))  # slices of it are not copies
    if nchunks == 1:  # one segment (a chunk starts at 0 of out)
        cl.append_chunks([(start, [data])], end, now)
    else:
        c3 = call.ffi.unpack(call.chunks, 3 * nchunks)
        cl.append_chunks(
            [(c3[k], [data[c3[k + 1] : c3[k + 2]]]) for k in range(0, len(c3), 3)], end, now
        )


def _dispatch_out(
    store: MessageStore,
    results: Sequence[PutResult] | Callable[[], Sequence[PutResult]],
    tags_c: tuple,
    keys_c: tuple,
    units: list[tuple[tuple[str, int], int, bytes]],
    entries: Sequence[int],
    start: int,
    end: int,
    now: int,
) -> None:
    """The ConsumeQueue units and index entries of a compiled put whose records end the
    CommitLog at ``end``: dispatched now (:func:`dispatch_plain`), or under SYNC_FLUSH handed to
    the flush thread, which dispatches them once the CommitLog is flushed (as for the general
    path; ReputMessageService dispatches only up to the flushed offset). ``results``: the
    put's PutResults, or what builds them (for dispatchers other than the index)."""
    if store.sync_flush:
        out = results() if callable(results) else results
        tc_of = {t: tags_code(t) for t in dict.fromkeys(tags_c)}
        store.flusher.add_pending(
            end,
            [
                DispatchRequest(
                    r.topic,
                    r.queue_id,
                    r.commitlog_offset,
                    r.size,
                    tc_of[t],
                    now,
                    r.queue_offset,
                    _index_keys(k),
                    r.uniq_key,
                    0,
                )
                for r, t, k in zip(out, tags_c, keys_c)
            ],
        )
    else:
        dispatch_plain(store, (tags_c, keys_c), results, units, entries, start, now)
        store.dispatched_store_timestamp = now


def _batch_args(
    call: _PutCall,
    store: MessageStore,
    cols: list[tuple],
    lens: array,
    born_hosts: bytes | None,
    tnames: tuple[str, ...],
    infos: tuple[PlainTopic, ...],
    tables: tuple,
    nslots: int,
    now: int,
    index: Any,
    together: bool = False,
) -> tuple[list, list[str]]:
    """Set ``rmq_put``'s per-batch arguments for a batch (any put but a single message's,
    :func:`_put_one`): ``(the buffers to keep alive until it returns, the UNIQ_KEYs)``;
    ``together``: a MessageBatch (one queue for all, chosen by :func:`_batch_queue`)."""
    topic_c, bodies, tags_c, keys_c, qid_c, shard_c, born_c, _, flag_c = cols[:9]
    n = len(topic_c)
    ffi, a = call.ffi, call.args
    heads = _head_parts(tags_c, keys_c, shard_c, store.putter.readers)
    own = heads[4]  # each message's own KEYS, outside the heads
    nidx = n * (1 + heads[3]) + (own[2] + n if own else 0)
    nout = sum(lens) + 512 * n + (len(own[0]) if own else 0)
    call.arrays(n, nslots, nidx if index else 0, nout)
    head_of, head_tables = _head_args(call, store.putter.tags_cache, *heads[:3])
    fb = ffi.from_buffer
    if together:
        topic_of, queue_of = call.zeros, _batch_queue(call, store, tnames[0], infos[0], cols, n)
    else:
        rr = store.putter.round_robin
        topic_of, queue_of = _queue_args(call, tnames, infos, topic_c, qid_c, shard_c, rr)
    born: Any = ffi.NULL
    if born_c.count(0) + born_c.count(None) == n:
        uniq_keys = store.uniq_keys.next_keys(n, now)
    else:  # ids follow each born time
        born = fb("int64_t[]", array("q", [b or 0 for b in born_c]))
        uniq_next = store.uniq_keys.next
        uniq_keys = [uniq_next(b or now) for b in born_c]
    hold: list = [head_tables[0]]
    a.heads = head_tables[0]
    call.set_varying(
        (
            topic_of,
            head_of,
            queue_of,
            born,
            ffi.NULL if born_hosts is None else fb("uint8_t[]", born_hosts),
            ffi.NULL if not any(flag_c) else fb("int32_t[]", array("i", flag_c)),
            *head_tables[1:],
            *tables,
        )
    )
    body_end = fb("int64_t[]", array("q", itertools.accumulate(lens)))
    if body_end[n - 1] < _JOIN_BODIES_UNDER * n:  # small bodies: one copy is cheaper
        hold += (fb("uint8_t[]", b"".join(bodies)), body_end, ffi.NULL)
    else:  # large ones: a pointer to each, no copy
        views = [fb("uint8_t[]", b) for b in bodies]
        hold += (ffi.NULL, body_end, ffi.new("uint8_t *[]", views), views)
    a.bodies, a.body_end, a.body_at = hold[1:4]
    uniq = fb("uint8_t[]", "".join(uniq_keys).encode())
    hold.append(uniq)
    a.uniq = uniq
    if own:
        hold += (fb("uint8_t[]", own[0]), fb("int32_t[]", own[1]))
        a.keys, a.keys_len = hold[-2:]
    else:
        a.keys_len = ffi.NULL
    a.n = n
    a.uniq_len = len(uniq_keys[0])
    a.ntopics = len(tnames)
    return hold, uniq_keys


def _queue_state(
    store: MessageStore, call: _PutCall, tnames: tuple[str, ...], slots: list, rr_now: Any
) -> None:
    """Give ``rmq_put`` each topic's round robin count and each queue's next queue offset
    (topicQueueTable, else :meth:`MessageStore.max_offset` uncommitted: the queue's end)."""
    rr = store.putter.round_robin
    for i, t in enumerate(tnames):
        rr_now[i] = rr.get(t, 0)
    nexts = list(map(store.putter.queue_offsets.get, slots))  # one C-level pass over the slots
    if None in nexts:  # a queue not put to since the store opened: where its queue ends
        for k in [k for k, v in enumerate(nexts) if v is None]:
            topic, q = slots[k]
            nexts[k] = store.max_offset(topic, q, committed=False)
    call.slot_next[0 : len(nexts)] = nexts


def _head_parts(
    tags_c: tuple, keys_c: tuple, shard_c: tuple, readers: Any = None
) -> tuple[Iterable, list, list, int, tuple[bytes, array | bytes, int] | None]:
    """The property heads of a batch (the items before UNIQ_KEY, one per distinct head):
    ``(each message's head, the distinct heads, their parts, the most keys of one head, the
    messages' own KEYS)``. Without sharding keys a head is the TAGS item alone, and each
    message's KEYS value goes to ``rmq_put`` apart (:func:`_own_keys`), so a batch whose every
    message has keys of its own (an order id each) still has one head a distinct tag; with
    sharding keys (whose item follows KEYS) a head holds TAGS, KEYS and SHARDING_KEY.
    ``readers``: :attr:`PutService.readers` (:func:`_own_keys`' compiled pass)."""
    n = len(tags_c)
    own = _own_keys(keys_c, readers) if shard_c.count(None) == n else False
    if own is not False:
        distinct = list(dict.fromkeys(tags_c))
        return tags_c, distinct, [(t, None, None) for t in distinct], 0, own
    norm = [_keys_value(k) for k in keys_c]
    head_keys = list(zip(tags_c, norm, shard_c))
    distinct = list(dict.fromkeys(head_keys))
    keys_max = max(map(_key_count, distinct)) if len(distinct) > 1 else _key_count(distinct[0])
    return head_keys, distinct, distinct, keys_max, None


def _keys_value(keys: list[str] | str | None) -> str | None:
    """The KEYS property value of a message's ``keys`` as the general path writes it: a list
    joined with spaces, any keys given (even ``[""]``, an empty value); None: no KEYS item
    (None, "" or [])."""
    return None if not keys else keys if isinstance(keys, str) else " ".join(keys)


#: None -> "" (:func:`_own_keys`' C-level pass: ``get(k, k)`` is k for any other key)
_NONE_AS_EMPTY: dict[Any, str] = {None: ""}


def _own_keys(
    keys_c: tuple, readers: Any = None
) -> tuple[bytes, array | bytes, int] | Literal[False] | None:
    """Each message's KEYS value for ``rmq_put`` (``keys``, ``keys_len``): ``(the values one
    after another in UTF-8, each one's length in bytes (int32s), -1 for a message without a
    KEYS item, the spaces among them)``; None when no message has keys; False when they take
    2 GiB or more (an int32 length: the heads take them, and the properties' limit refuses
    them). One compiled pass with ``readers`` (:attr:`PutService.readers`: ``keys_utf8``,
    for keys that are None or a ``str``), else C-level passes here, but for keys given as
    lists (joined first, one by one)."""
    if readers is not None:
        got = readers[1](keys_c)
        if got is not False:
            return cast("tuple[bytes, bytes, int] | None", got)
    n = len(keys_c)
    if keys_c.count(None) == n:
        return None
    if list(map(type, keys_c)).count(str) + keys_c.count(None) == n:
        absent = map(operator.not_, keys_c)  # None and "": no KEYS item
    else:  # lists among them: joined, and [""] is an (empty) value
        keys_c = tuple(map(_keys_value, keys_c))
        absent = map(operator.is_, keys_c, itertools.repeat(None))
    if keys_c.count(None):
        values: Sequence[str] = list(map(_NONE_AS_EMPTY.get, keys_c, keys_c))
    else:
        values = keys_c
    joined = "".join(values)
    blob = joined.encode()
    if len(blob) >= 1 << 31:
        return False
    sizes = map(len, values) if len(blob) == len(joined) else map(len, map(str.encode, values))
    lens = array("i", map(operator.sub, sizes, absent))  # (an absent value is "": -1)
    return blob, lens, joined.count(KEY_SEPARATOR)


def _head_args(
    call: _PutCall, tags_cache: dict, head_keys: Iterable, distinct: list, parts: list
) -> tuple[Any, tuple]:
    """``(head_of, head tables)`` for ``rmq_put`` from :func:`_head_parts` (after
    ``call.arrays``)."""
    if len(distinct) == 1:
        return call.zeros, call.head_tables(tags_cache, parts[0])
    fb = call.ffi.from_buffer
    hindex = {h: i for i, h in enumerate(distinct)}
    head_of = fb("int32_t[]", array("i", map(hindex.__getitem__, head_keys)))
    tables = tuple(fb(t, v) for t, v in zip(_HEAD_TYPES, _heads(tags_cache, parts)))
    return head_of, tables


def _queue_args(
    call: _PutCall,
    tnames: tuple[str, ...],
    infos: tuple[PlainTopic, ...],
    topic_c: tuple,
    qid_c: tuple,
    shard_c: tuple,
    round_robin: dict[str, int],
) -> tuple[Any, Any]:
    """``(topic_of, queue_of)`` for ``rmq_put``: each message's topic among ``tnames`` and
    its queue (-1: round robin; a sharding key's hash, as ``SelectMessageQueueByHash``).
    PutMessageError for a queueId that is not the topic's, with ``round_robin`` (the
    store's, not otherwise changed here) advanced as the general path leaves it."""
    n = len(topic_c)
    fb = call.ffi.from_buffer
    if len(tnames) == 1:
        topic_of = call.zeros
    else:
        tindex = {t: i for i, t in enumerate(tnames)}
        topic_of = fb("int32_t[]", array("i", map(tindex.__getitem__, topic_c)))
    if qid_c.count(None) == n and shard_c.count(None) == n:
        return topic_of, call.minus_ones
    queues = array("i")
    by_name = dict(zip(tnames, infos))
    for t, q, sk in zip(topic_c, qid_c, shard_c):
        nwq, nq = by_name[t][:2]
        if q is None:
            q = -1 if sk is None else (zlib.crc32(sk.encode()) & 0x7FFFFFFF) % nwq
        elif not 0 <= q < nq:
            # the general path picked the queues of the messages before it (_targets)
            _advance_round_robin(round_robin, topic_c, qid_c, shard_c, len(queues))
            raise PutMessageError(f"queueId {q} is not a queue of {t} (0..{nwq - 1})")
        queues.append(q)
    return topic_of, fb("int32_t[]", queues)


def _advance_round_robin(
    round_robin: dict[str, int], topic_c: tuple, qid_c: tuple, shard_c: tuple, n: int
) -> None:
    """Advance ``round_robin`` as :func:`choose_queue` does for the first ``n`` messages of a
    batch's columns: once for each without a queueId or a sharding key."""
    for topic, qid, shard in zip(topic_c[:n], qid_c[:n], shard_c[:n]):
        if qid is None and shard is None:
            round_robin[topic] = round_robin.get(topic, 0) + 1


def _batch_queue(
    call: _PutCall, store: MessageStore, topic: str, info: PlainTopic, cols: list[tuple], n: int
) -> Any:
    """``queue_of`` of a MessageBatch of ``n`` messages of ``topic``: the queue
    :func:`select_queue` gives its first message (its queueId, its sharding key's hash, else
    the topic's round robin, advanced once for the batch), for every message.
    PutMessageError for a queueId that is not the topic's."""
    q = choose_queue(store.putter.round_robin, topic, cols[4][0], cols[5][0], *info[:2])
    return call.ffi.from_buffer("int32_t[]", array("i", (q,)) * n)


def _counters_as_refused(
    store: MessageStore, lib: Any, a: Any, cols: list[tuple], uniq_first: int, together: bool
) -> None:
    """Leave the round robin and the UNIQ_KEY counter where the general path leaves them when
    it refuses this batch (``rmq_put`` refused message ``a.bad``, changing neither): it picks
    every message's queue first (:func:`_targets`: each message without a queueId or a
    sharding key advances its topic's round robin; a MessageBatch's was advanced once, by
    :func:`_batch_queue`), then encodes them in order, each taking its UNIQ_KEY, up to the
    message refused (a record too large for a segment is refused only when appended, with
    every key taken). A single put (:func:`_put_one`) chose its queue and took its key before
    its call, as the general path does, and has nothing to put back."""
    if not together:
        _advance_round_robin(store.putter.round_robin, cols[0], cols[4], cols[5], len(cols[0]))
    if a.bad_code in (lib.RMQ_PUT_PROPS, lib.RMQ_PUT_TOO_LARGE):
        store.uniq_keys.counter = uniq_first + a.bad + 1


def _refused(lib: Any, a: Any, rc: int, segment_size: int) -> NoReturn:
    """Raise what ``rmq_put``'s refusal ``rc`` means (nothing was written)."""
    if rc == 1:
        bad, value = a.bad_code, a.bad_value
        if bad == lib.RMQ_PUT_PROPS:
            raise PropertiesSizeExceededError(
                f"properties are {value} bytes, more than {MAX_PROPERTIES_LENGTH}"
            )
        if bad == lib.RMQ_PUT_TOO_LARGE:
            raise MessageTooLargeError(
                f"message record is {value} bytes, more than maxMessageSize + 64 KiB"
            )
        if bad == lib.RMQ_PUT_BATCH:
            raise MessageTooLargeError(
                f"batch of {value} bytes does not fit in a {segment_size}-byte CommitLog segment"
            )
        raise MessageTooLargeError(
            f"record of {value} bytes does not fit in a {segment_size}-byte CommitLog segment"
        )
    raise PutMessageError(f"the compiled put path failed ({rc})")


def _queue_units_out(
    call: _PutCall, slots: list, n: int
) -> tuple[list[int], list[tuple], dict[int, int]]:
    """What ``rmq_put`` gave per queue slot: ``(slots used, [(slot key, first queue offset,
    units bytes)], next queue offset per slot used)``."""
    ffi = call.ffi
    ub = ffi.buffer(call.units, n * CQ_STORE_UNIT_SIZE)
    nslots = len(slots)
    su = ffi.unpack(call.slot_units, nslots + 1)
    sn_after = ffi.unpack(call.slot_next, nslots)
    counts = list(map(operator.sub, su[1:], su))  # units of each slot
    used = list(itertools.compress(range(nslots), counts))
    units = [
        (
            slots[k],
            sn_after[k] - counts[k],
            ub[su[k] * CQ_STORE_UNIT_SIZE : su[k + 1] * CQ_STORE_UNIT_SIZE],
        )
        for k in used
    ]
    return used, units, sn_after


def _results(call: _PutCall, topic_c: tuple, uniq_keys: list[str], now: int) -> PutResults:
    """The :class:`PutResults` of ``rmq_put``'s output (its columns copied out of ``call``)."""
    ffi = call.ffi
    n = len(topic_c)
    q, qo, pos, size = array("i"), array("q"), array("q"), array("i")
    for col, ptr in ((q, call.queue), (qo, call.qoff), (pos, call.pos), (size, call.size)):
        col.frombytes(ffi.buffer(ptr, col.itemsize * n))
    return PutResults(topic_c, q, qo, pos, size, now, ffi.buffer(call.msg_id, 33 * n)[:], uniq_keys)


def _index_keys(keys: list[str] | str | None) -> list[str]:
    """A message's KEYS as the dispatchers take them: the non-empty space-separated keys."""
    value = _keys_value(keys)
    return [k for k in value.split(KEY_SEPARATOR) if k] if value else []


def _key_count(part: tuple[str | None, str | None, str | None]) -> int:
    """Most index keys of a head's KEYS value (its spaces + 1)."""
    return part[1].count(KEY_SEPARATOR) + 1 if part[1] else 0


def _heads(
    tags_cache: dict[str, tuple[bytes, int]],
    parts: Sequence[tuple[str | None, str | None, str | None]],
) -> tuple[bytes, array, array, array, array]:
    """``rmq_put``'s heads of ``(tags, keys, sharding key)`` parts: the TAGS, KEYS and
    SHARDING_KEY items (``MessageDecoder.messageProperties2String``'s encoding; the UNIQ_KEY
    item follows), where each ends, its tagsCode, and where its KEYS value lies in it."""
    heads = bytearray()
    head_end = array("i")
    tcodes = array("q")
    keys_at = array("i")
    keys_len = array("i")
    for tags, keys, sharding in parts:
        begin = len(heads)
        if tags:
            head_tc = tags_cache.get(tags) or _tags_item(tags_cache, tags)
            heads += head_tc[0]
            tcodes.append(head_tc[1])
        else:
            tcodes.append(0)
        if keys is not None:
            heads += _KEYS_PREFIX
            k = keys.encode()
            keys_at.append(len(heads) - begin)
            keys_len.append(len(k))
            heads += k + PROPERTY_END
        else:
            keys_at.append(0)
            keys_len.append(0)
        if sharding is not None:
            heads += _SHARDING_PREFIX + sharding.encode() + PROPERTY_END
        head_end.append(len(heads))
    return bytes(heads), head_end, tcodes, keys_at, keys_len


def _tags_item(tags_cache: dict[str, tuple[bytes, int]], tags: str) -> tuple[bytes, int]:
    """The TAGS property item of ``tags`` and its tagsCode, kept in ``tags_cache``."""
    head_tc = (_TAGS_ITEM + tags.encode() + PROPERTY_END, tags_code(tags))
    if len(tags_cache) >= 4096:  # (bounded: a full cache starts again, and the single put's
        tags_cache.clear()  # lane, which reads it, finds what it asked for)
    tags_cache[tags] = head_tc
    return head_tc


#: average body size (bytes) from which rmq_put reads each body where it is rather than from
#: one joined copy
_JOIN_BODIES_UNDER = 2048
#: the C types of :func:`_heads`'s arrays
_HEAD_TYPES = ("uint8_t[]", "int32_t[]", "int64_t[]", "int32_t[]", "int32_t[]")


def dispatch_plain(
    store: MessageStore,
    tags_keys: tuple[tuple, tuple],
    out: Sequence[PutResult] | Callable[[], Sequence[PutResult]],
    units: list[tuple[tuple[str, int], int, bytes]],
    idx: Sequence[int],
    start: int,
    now: int,
) -> None:
    """ConsumeQueue units, index keys and other dispatchers for :func:`put_plain`:
    ``tags_keys`` the batch's TAGS and KEYS columns and ``out`` its PutResults, or what builds
    them (for dispatchers other than the index),
    ``units`` is ``((topic, queueId), first queue offset, encoded units)`` per queue, ``idx`` flat
    ``[keyHash, phyOffset, storeTimestamp, ...]`` (:meth:`IndexService.put_hashed`). On an
    OSError everything of the batch is undone (CommitLog included) and it is re-raised."""
    index = store.index_service
    ds = store.dispatchers
    if len(ds) == 1 and ds[0] is index:  # the usual store: the index takes the hashed keys
        others = []
    else:
        others = [d for d in ds if not dispatch.puts_hashed_keys(d)]
    before = {}
    try:
        for key, first, encoded in units:
            cq = store.writable_consume_queue(key[0], key[1])
            before[key] = cq.max_offset
            cq.put_units(first, encoded)
        if index is not None and idx:
            if idx[1] > index.end_phy_offset:
                index.put_hashed(idx)
            else:  # cannot happen after recovery; keep the general rule anyway
                others.insert(0, index)
        if others:
            if callable(out):
                out = out()
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
            for tags, keys, d in zip(*tags_keys, batch):
                d.tags_code = tags_code(tags) if tags else 0
                d.keys = _index_keys(keys)
            for d in others:
                d.dispatch(batch)
    except OSError:
        _undo_put(store, before, start)
        raise
