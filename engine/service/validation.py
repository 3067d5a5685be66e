"""What a message must look like before the store takes it: the one home of these rules.

RocketMQ checks a message twice before the store sees it: the client (``Validators.checkMessage``,
``Message.putUserProperty``) and, in 5.x, the proxy (``GrpcValidator.validateTag``,
``SendMessageActivity`` for keys, message group and user properties). The store itself then
writes whatever it is given, so a property named ``__CRC32#`` or a ``\\x01`` inside a tag would
make a record that recovery cuts at or that re-parses as other properties
(``MessageDecoder.string2messageProperties`` splits on ``\\x01``/``\\x02``). The rules here are
those checks, applied by :meth:`engine.store.MessageStore.put_messages` to every caller
(``rmqfs produce``, the mount's ``produce`` files, Python code); the broker's own records go
through :func:`engine.service.putmessage.put_internal` instead.

Rules (all refusals raise :class:`~engine.errors.MessageIllegalError`, errno EINVAL):

* text fields (tags, keys, shardingKey, property names and values) are ``str`` that encode to
  UTF-8 (no lone surrogates) and hold no control character (U+0000-U+001F, U+007F-U+009F:
  Guava's ``CharMatcher.javaIsoControl`` as the proxy uses it), so never ``\\x01``/``\\x02``;
* tags: not blank, no ``|`` (the subscription expression separator ``||``);
* keys: a ``str`` (space-separated keys, ``MessageConst.KEY_SEPARATOR``) or a list/tuple of
  ``str``, each non-blank and without a space (a space would split it into other keys);
* shardingKey: not blank;
* properties: a ``dict`` of ``str`` to ``str``; names and values not blank
  (``Message.putUserProperty``); no name RocketMQ reserves (:data:`RESERVED_PROPERTY_NAMES`:
  every ``MessageConst`` property name, ``STRING_HASH_SET`` and the others the broker or store
  sets, such as ``__CRC32#`` and ``__SHARDINGKEY``) and none starting with
  ``__RMQ.TRANSIENT.``; tags, keys and the sharding key have their own fields;
* queueId: an ``int`` and not a ``bool`` (``True`` would be queue 1 and name a ConsumeQueue
  directory ``True``); its range is checked against the topic by the store;
* flag and sysFlag: ``int`` in a Java int's range; born timestamp: None or 0 (the store's
  time) or epoch ms up to :data:`MAX_BORN_TIMESTAMP` (9999-01-01 00:00 UTC); delay level and
  the timer fields: :func:`check_timing`.

Size limits (maxMessageSize, 32767 bytes of properties) stay with the encoder
(:func:`engine.format.message.encode_message`), which raises
:class:`~engine.errors.MessageTooLargeError` (EMSGSIZE).

:func:`engine.read.jsonline.message_from_json` is the one parser of a ``produce.jsonl`` line; it
applies these rules.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, cast

from ..errors import InvalidNameError, MessageIllegalError, PermissionDeniedError
from ..format.message import (
    KEY_SEPARATOR,
    LMQ_PREFIX,
    PROPERTY_CRC32,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    is_lmq,
)

if TYPE_CHECKING:
    from ..format.message import Message

# org.apache.rocketmq.common.topic.TopicValidator (5.3): the broker's own topics. A client may
# not create one (AdminBrokerProcessor.updateAndCreateTopic: "is conflict with system topic",
# INVALID_PARAMETER) nor send to the NOT_ALLOWED_SEND ones
# (AbstractSendMessageProcessor.msgCheck: NO_PERMISSION, "Sending message to topic[..] is
# forbidden"); the broker writes them itself (delayed messages, transactions).
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
NOT_ALLOWED_SEND_TOPICS = frozenset(
    (
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        # not in RocketMQ's set, whose broker takes a client's record there: it has no
        # TIMER_OUT_MS, and TimerMessageStore.enqueue retries its Long.parseLong(null) for ever
        # (timerSkipUnknownError off), every timed message behind it stuck; only the broker's
        # timer hook (HookUtils.transformTimerMessage) writes it
        TIMER_TOPIC,
    )
)
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | frozenset(
    ("TBW102", "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC", "CHECKPOINT_TOPIC")
)

# org.apache.rocketmq.common.message.MessageConst (5.3): every property name it defines.
# STRING_HASH_SET is the set Message.putUserProperty refuses; the others are set by the broker
# or the store itself (__CRC32# by CommitLog with enabledAppendPropCRC, __SHARDINGKEY from the
# producer's sharding key, INNER_NUM/INNER_BASE for inner batches, ...).
RESERVED_PROPERTY_NAMES = frozenset(
    (
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "UNIQ_KEY",
        "EXTEND_UNIQ_INFO",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "INNER_NUM",
        "INNER_BASE",
        "DUP_INFO",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "__transactionId__",
        "TRANSACTION_CHECK_TIMES",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "__SHARDINGKEY",
        "PROPERTY_FORWARD_QUEUE_ID",
        "REDIRECT",
        "INNER_MULTI_DISPATCH",
        "INNER_MULTI_QUEUE_OFFSET",
        "TRACE_CONTEXT",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_DELIVER_MS",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        PROPERTY_CRC32,  # CommitLog.doAppend with enabledAppendPropCRC (STRING_HASH_SET in 5.3)
    )
)
TRANSIENT_PREFIX = "__RMQ.TRANSIENT."  # MessageConst.PROPERTY_TRANSIENT_PREFIX

# javaIsoControl, and the UTF-16 surrogates (a str holding one cannot be encoded to UTF-8)
_BAD_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: Tags :func:`check_tags` has let through (at most 4096; cleared, never rebound): the put
#: paths let a tag in this set through without looking at it again.
CHECKED_TAGS: set[str] = set()


def describe_char(ch: str) -> str:
    if "\ud800" <= ch <= "\udfff":
        return f"a lone surrogate U+{ord(ch):04X} (not encodable as UTF-8)"
    return f"control character U+{ord(ch):04X}"


def check_text(what: str, value: object) -> None:
    """Raise MessageIllegalError unless ``value`` is a non-blank ``str`` without control
    characters or lone surrogates. ``what`` names the field in the message."""
    if not isinstance(value, str):
        raise MessageIllegalError(f"{what} must be a string, not {type(value).__name__}")
    bad = _BAD_CHAR.search(value)
    if bad:
        raise MessageIllegalError(f"{what} {value!r} contains {describe_char(bad.group())}")
    if not value.strip():
        raise MessageIllegalError(f"{what} must not be empty or blank")


def check_tags(tags: str | None) -> None:
    """A message's tags (``GrpcValidator.validateTag``); ``None`` and ``""`` mean no tags."""
    if tags is None or tags == "":
        return
    if isinstance(tags, str) and tags in CHECKED_TAGS:
        return
    check_text("tags", tags)
    if "|" in tags:
        raise MessageIllegalError(f"tags {tags!r} contain '|' (the tag expression separator)")
    if len(CHECKED_TAGS) > 4096:
        CHECKED_TAGS.clear()
    # an exact str only: a subclass's own __eq__ would run in every lookup of an equal tag
    # (the compiled reader of the put path looks tags up in this set)
    CHECKED_TAGS.add(str.__str__(tags))


def check_keys(keys: list[str] | tuple[str, ...] | str | None) -> None:
    """Keys: a space-separated ``str`` or a list/tuple of keys without spaces."""
    if keys is None:
        return
    if isinstance(keys, str):
        if keys:
            bad = _BAD_CHAR.search(keys)
            if bad:
                raise MessageIllegalError(f"keys {keys!r} contain {describe_char(bad.group())}")
        return
    if not isinstance(keys, (list, tuple)):
        raise MessageIllegalError(
            f"keys must be a string or a list of strings, not {type(keys).__name__}"
        )
    for k in keys:
        check_text("key", k)
        if KEY_SEPARATOR in k:
            raise MessageIllegalError(f"key {k!r} contains a space, which separates keys")


def check_properties(props: dict[str, str] | None) -> None:
    """User properties (``Message.putUserProperty`` and the proxy's checks)."""
    if props is None:
        return
    if not isinstance(props, dict):
        raise MessageIllegalError(
            f"properties must map strings to strings, not {type(props).__name__}"
        )
    for name, value in props.items():
        check_text("property name", name)
        if name in RESERVED_PROPERTY_NAMES or name.startswith(TRANSIENT_PREFIX):
            raise MessageIllegalError(
                f"property {name!r} is reserved by RocketMQ; tags, keys and shardingKey have "
                "their own fields"
            )
        check_text(f"property {name!r}", value)


def check_queue_id(queue_id: int | None) -> None:
    """``None`` (the store picks) or an ``int`` that is not a ``bool``."""
    if queue_id is not None and (not isinstance(queue_id, int) or isinstance(queue_id, bool)):
        raise MessageIllegalError(
            f"queueId must be an integer, not {type(queue_id).__name__} {queue_id!r}"
        )


def is_system_topic(topic: str) -> bool:
    """``TopicValidator.isSystemTopic``: one of :data:`SYSTEM_TOPICS` or ``rmq_sys_*``."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def check_topic_creatable(topic: str) -> None:
    """Refuse a client's creation of a system topic (``AdminBrokerProcessor.updateAndCreateTopic``
    with ``validateSystemTopicWhenUpdateTopic``, the broker's default).

    Raises:
        InvalidNameError: ``topic`` is a system topic (EINVAL, RocketMQ INVALID_PARAMETER).
    """
    if is_system_topic(topic):
        raise InvalidNameError(
            f"the topic {topic!r} is a RocketMQ system topic; clients may not create it"
        )


def check_not_lmq(topic: str) -> None:
    """Refuse to make or write a topic named as a light message queue: ``%LMQ%...``
    (``MixAll.isLmq``) is the broker's multi-dispatch queue, made by ``CommitLog``'s
    ``MultiDispatch`` and kept out of topics.json (``LmqTopicConfigManager``), and a store
    holding one is an LMQ store, which rmqfs reads but does not write: such a topic would
    lock every writer out of the store, its own delete included.

    Raises:
        InvalidNameError: EINVAL, with the reason.
    """
    if is_lmq(topic):
        raise InvalidNameError(
            f"the topic {topic!r}: a name starting with {LMQ_PREFIX} is a light message "
            "queue's, which the broker's multi-dispatch makes; rmqfs does not write LMQ "
            "stores (docs/format.md)"
        )


def check_send_topic(topic: str) -> None:
    """Refuse a client's message to a topic only the broker writes
    (``TopicValidator.isNotAllowedSendTopic``, and ``rmq_sys_wheel_timer``: see
    :data:`NOT_ALLOWED_SEND_TOPICS`).

    Raises:
        PermissionDeniedError: EACCES (RocketMQ NO_PERMISSION).
    """
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise PermissionDeniedError(
            f"sending messages to topic {topic} is forbidden: only the broker writes it"
        )


#: Long.MAX_VALUE + 1: the deliver time and delays are Java longs (HookUtils parses them).
_LONG_END = 1 << 63


def check_timing(msg: Message) -> None:
    """A delayed or timed message's fields: ``delay_level`` an int >= 0 (the producer's
    ``setDelayTimeLevel``), ``deliver_time_ms``/``delay_time_ms``/``delay_time_sec`` ints in a
    Java long's range (``HookUtils.transformTimerMessage`` parses them with ``Long.parseLong``;
    a deliver time already past makes a plain message there), at most one of the three.

    Raises:
        MessageIllegalError: naming the field.
    """
    level = msg.delay_level
    if not isinstance(level, int) or isinstance(level, bool) or level < 0:
        raise MessageIllegalError(f"delay level must be an integer >= 0, not {level!r}")
    given = [
        (name, v)
        for name, v in (
            ("deliver time", msg.deliver_time_ms),
            ("delay ms", msg.delay_time_ms),
            ("delay sec", msg.delay_time_sec),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise MessageIllegalError("give one of deliver time, delay ms and delay sec")
    for name, v in given:
        if not isinstance(v, int) or isinstance(v, bool) or not -_LONG_END <= v < _LONG_END:
            raise MessageIllegalError(f"{name} must be an integer (epoch ms or ms), not {v!r}")


_INT_END = 1 << 31
_ZERO = 0
#: The latest born timestamp a message may carry (epoch ms): 9999-01-01 00:00 UTC, in the
#: last year ``datetime`` (and so the UNIQ_KEY's month, ``MessageClientIDSetter``) can name
#: whole in any time zone.
MAX_BORN_TIMESTAMP = 253_370_764_800_000


def check_numbers(msg: Message) -> None:
    """``flag`` and ``sys_flag`` ints in a Java int's range (``Message.flag``,
    ``MessageExt.sysFlag``); ``born_timestamp`` None or 0 (both: the store's time) or an int of
    epoch ms up to :data:`MAX_BORN_TIMESTAMP` (``MessageExt.bornTimestamp``; its UNIQ_KEY counts
    ms from the start of its month). A ``bool`` is an int here, as Python has it.

    Raises:
        MessageIllegalError: naming the field.
    """
    for name, v in (("flag", msg.flag), ("sysFlag", msg.sys_flag)):
        if not isinstance(v, int) or not -_INT_END <= v < _INT_END:
            raise MessageIllegalError(f"{name} must be an integer in a Java int's range, not {v!r}")
    born = msg.born_timestamp
    if born is not None and (not isinstance(born, int) or not 0 <= born <= MAX_BORN_TIMESTAMP):
        raise MessageIllegalError(
            f"born timestamp must be epoch ms from 0 to {MAX_BORN_TIMESTAMP} (9999-01-01 UTC), "
            f"not {born!r}"
        )


def check_body(body: object) -> None:
    """MessageIllegalError unless ``body`` is bytes, a bytearray or a contiguous memoryview of
    single bytes: the record's BODYLENGTH is the body's ``len()``, which for another buffer
    (an ``array("i")``, a memoryview cast to ints) is not its size in bytes. A rule of the
    record, checked for the broker's own puts too (``putmessage.put_internal``)."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise MessageIllegalError(f"body must be bytes, not {type(body).__name__}")
    if isinstance(body, memoryview) and (body.itemsize != 1 or not body.c_contiguous):
        # its len() would not be its size in bytes, and the put paths copy it as one block
        raise MessageIllegalError(
            "body must be bytes: a memoryview body must be contiguous, of single bytes "
            f"(this one: format {body.format!r}, {'' if body.c_contiguous else 'not '}contiguous)"
        )


def check_born_host(host: object) -> None:
    """``born_host`` None (the put's default, 127.0.0.1:0) or ``(address, port)``: the address
    4 bytes (IPv4) or 16 (IPv6), the port an int from 0 to 65535 (``InetSocketAddress``;
    ``MessageExt.bornHost``, stored as the address bytes and an int32 port).

    Raises:
        MessageIllegalError: naming what is wrong (the record would hold another host).
    """
    if host is None:
        return
    if not isinstance(host, tuple) or len(host) != 2:
        raise MessageIllegalError(f"born host must be (address bytes, port), not {host!r}")
    addr, port = host
    if not isinstance(addr, bytes) or len(addr) not in (4, 16):
        raise MessageIllegalError(
            f"born host address must be 4 bytes (IPv4) or 16 (IPv6), not {addr!r}"
        )
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise MessageIllegalError(f"born host port must be an int from 0 to 65535, not {port!r}")


def check_message(msg: Message) -> None:
    """Every rule of this module for one :class:`engine.format.message.Message`.

    Raises:
        MessageIllegalError: the first broken rule, naming the field.
        PermissionDeniedError: the topic is one only the broker writes.
    """
    check_send_topic(msg.topic)
    check_tags(msg.tags)
    check_keys(msg.keys)
    check_properties(msg.properties)
    if msg.sharding_key is not None:
        check_text("shardingKey", msg.sharding_key)
    check_queue_id(msg.queue_id)
    check_numbers(msg)
    check_born_host(msg.born_host)
    check_timing(msg)
    check_body(msg.body)


def check_messages(messages: Iterable[Message]) -> None:
    """:func:`check_message` for each message, with the common cases inline (hot path)."""
    for m in messages:
        if m.topic in NOT_ALLOWED_SEND_TOPICS:
            check_send_topic(m.topic)
        t = m.tags
        if t and (t.__class__ is not str or t not in CHECKED_TAGS):
            check_tags(t)
        if m.keys:
            check_keys(m.keys)
        if m.properties:
            check_properties(m.properties)
        if m.sharding_key is not None:
            check_text("shardingKey", m.sharding_key)
        q = m.queue_id
        if q is not None and q.__class__ is not int:
            check_queue_id(q)
        # (an int 0 is one object in CPython: anything else, or a born time, is looked at)
        if m.flag is not _ZERO or m.sys_flag is not _ZERO or m.born_timestamp is not None:
            check_numbers(m)
        if m.born_host is not None:
            check_born_host(m.born_host)
        if (
            m.delay_level is not _ZERO
            or m.deliver_time_ms is not None
            or m.delay_time_ms is not None
            or m.delay_time_sec is not None
        ):
            check_timing(m)
        if m.body.__class__ is not bytes:
            check_message(m)


_NONE_OR_INT = frozenset((type(None), int))
_NONE_OR_STR = frozenset((type(None), str))


def check_message_columns(
    messages: Sequence[Message], cols: Mapping[str, Sequence[object]]
) -> None:
    """:func:`check_messages` of a batch from its columns: ``cols`` maps each
    :class:`~engine.format.message.Message` field's name to that field of every message, in
    ``messages``' order. The batch is let through by a few C-level passes over the columns when
    they show that every message passes every rule; anything the passes cannot vouch for (a tag
    not seen before, keys or a sharding key with a character to look at, properties, a queueId
    or body of another type, a flag or sysFlag that is not an int in a Java int's range, a born
    time or host, a delay level or timer field, an unhashable field) runs :func:`check_messages` over
    ``messages``, so a refusal is the one it gives: the first broken rule of the first message
    that breaks one.

    Raises: as :func:`check_messages`.
    """
    n = len(messages)
    try:
        fast = (
            NOT_ALLOWED_SEND_TOPICS.isdisjoint(cols["topic"])
            and tags_keys_clean(cols["tags"], cols["keys"])
            and not any(cols["properties"])
            and not any(map(operator.is_not, cols["sharding_key"], repeat(None)))
            and set(map(type, cols["queue_id"])) <= _NONE_OR_INT
            and list(map(type, cols["body"])).count(bytes) == n
            and _int32s(cols["flag"])
            and _int32s(cols["sys_flag"])
            and not any(map(operator.is_not, cols["delay_level"], repeat(_ZERO)))  # (no bool)
            and all(cols[f].count(None) == n for f in _NONE_FIELDS)
        )
    except Exception:  # noqa: BLE001 - a field that fails a pass: the rules say what is wrong
        fast = False
    if not fast:
        check_messages(messages)


#: The fields a batch's columns are let through with only when every value is None (one C-level
#: ``count`` each: an object that says it equals None passes as None, as the put path reads it).
_NONE_FIELDS = (
    "born_timestamp",
    "born_host",
    "deliver_time_ms",
    "delay_time_ms",
    "delay_time_sec",
)


def _int32s(values: Sequence[object]) -> bool:
    """Whether every value is an ``int`` (a ``bool`` included, as :func:`check_numbers` has it)
    in a Java int's range. The usual column, every value equal to 0, is vouched for by its sum
    being an int (a 0.0, Decimal or numpy zero among them makes another type); an object that
    lies about equalling 0 and sums to an int could pass, as no honest value can."""
    n = len(values)
    ints = cast("Sequence[int]", values)
    if ints.count(0) == n:
        return sum(ints).__class__ is int
    if list(map(type, values)).count(int) != n:
        return False  # (a bool or an int subclass among them: check_messages decides)
    return min(ints) >= -_INT_END and max(ints) < _INT_END


def tags_keys_clean(tags: Sequence[object], keys: Sequence[object]) -> bool:
    """Whether every value of a batch's tags column (each None or a ``str``) and keys column
    passes :func:`check_tags` and :func:`check_keys`, by a few C-level passes (a tag seen
    before, keys strings without a control character or a lone surrogate); False where they
    cannot vouch for a value (a tag not seen before, a list of keys, another type): then
    :func:`check_messages` says whether and why one breaks a rule. Raises nothing: an
    unhashable tag is not vouched for."""
    try:
        return (
            set(map(type, tags)) <= _NONE_OR_STR
            and all(t in CHECKED_TAGS for t in set(tags) if t)
            and _keys_clean(keys)
        )
    except TypeError:
        return False


def _keys_clean(keys: Sequence[object]) -> bool:
    """Whether every message's keys are empty (None, "", []) or a ``str`` without a control
    character or a lone surrogate (what :func:`check_keys` accepts), by one search."""
    given = list(filter(None, keys))  # (None, "" and [] have no character to look at)
    if not given:
        return True
    if list(map(type, given)).count(str) != len(given):
        return False
    return _BAD_CHAR.search(" ".join(cast("list[str]", given))) is None


_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")


def parse_decimal(text: str) -> int | None:
    """The value of a name that is a canonical non-negative decimal (``0`` or ASCII digits
    without a leading zero, at most 19 of them: an int64), else None.

    For lookup names (``by-offset/<n>``, ``by-time/<ms>``, ``queue=<q>``): ``00``, ``+1``,
    ``1\\n``, ``²`` or Arabic-Indic digits name nothing (ENOENT), so every entry has one name.
    """
    return int(text) if _DECIMAL.fullmatch(text) else None
