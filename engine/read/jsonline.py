"""The JSON line, both ways: one home for its field names, the build of a ``messages.jsonl``
line and the parse of a ``produce.jsonl`` line (docs/mount.md).

* out: ``topics/*/messages.jsonl`` (and ``rmqfs print-msg --json``): one JSON object per line,
  RocketMQ's ``MessageExt`` field names (:data:`LINE_FIELDS`, in ``engine.read.schema``'s
  LINE_COLUMNS order), timestamps in epoch ms; the body as text when it is valid UTF-8, else
  base64 with ``"bodyEncoding": "base64"``. :func:`build_line` is the reference; the mount's
  fast renderers (``fusefs.render``) produce the same bytes.
* in: a ``produce.jsonl`` line (the mount's produce files, ``rmqfs produce --json``): the fields
  :data:`PRODUCE_FIELDS`; :func:`parse_json_line` then :func:`message_from_json`, which applies
  ``engine.service.validation``'s rules.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..errors import MessageIllegalError
from ..format.message import Message, MessageRecord, host_to_str
from ..service.validation import check_message, describe_char
from . import kernel
from .schema import LINE_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "LINE_FIELDS",
    "BODY_ENCODING",
    "PRODUCE_FIELDS",
    "message_fields",
    "build_line",
    "build_lines",
    "DELIVER_TIMESTAMP",
    "build_scheduled_line",
    "parse_json_line",
    "plain_fields",
    "message_from_json",
]

#: The fields of a ``messages.jsonl`` line, in their order (``MessageExt``'s names).
LINE_FIELDS: tuple[str, ...] = tuple(n for n, _ in LINE_COLUMNS)
#: The field a ``scheduled.jsonl`` line adds before ``body``: when the message is delivered.
DELIVER_TIMESTAMP = "deliverTimestamp"
#: The field a line adds after ``body`` when the body is base64 (not UTF-8).
BODY_ENCODING = "bodyEncoding"
#: The fields a ``produce.jsonl`` line may have.
PRODUCE_FIELDS = frozenset(
    (
        "body",
        "bodyBase64",
        "tags",
        "keys",
        "properties",
        "queueId",
        "shardingKey",
        "delayTimeLevel",
        "deliverTimestamp",
        "delayMs",
    )
)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def message_fields(rec: MessageRecord) -> dict:
    """The contract's fields of a record, without ``body``, in their fixed order."""
    return {
        "topic": rec.topic,
        "queueId": rec.queue_id,
        "queueOffset": rec.queue_offset,
        "commitLogOffset": rec.commitlog_offset,
        "storeSize": rec.store_size,
        "msgId": rec.msg_id,
        "tags": rec.tags,
        "keys": rec.keys,
        "bornTimestamp": rec.born_timestamp,
        "bornHost": host_to_str(rec.born_host),
        "storeTimestamp": rec.store_timestamp,
        "storeHost": host_to_str(rec.store_host),
        "sysFlag": rec.sys_flag,
        "flag": rec.flag,
        "bodyCRC": rec.body_crc,
        "reconsumeTimes": rec.reconsume_times,
        "preparedTransactionOffset": rec.prepared_transaction_offset,
        "properties": rec.properties,
    }


def build_line(rec: MessageRecord) -> bytes:
    """One ``messages.jsonl`` line of ``rec``, built with ``json``: the reference of
    ``fusefs.render.render_message`` and :func:`build_lines` (the same bytes, faster; tests
    compare them)."""
    body = rec.plain_body  # first: a body left compressed adds its property
    return _line(message_fields(rec), body)


def build_scheduled_line(
    rec: MessageRecord, real_topic: str, real_queue_id: int, deliver_ms: int
) -> bytes:
    """One ``scheduled.jsonl`` line: a message waiting for delivery (``engine.read.scheduled``).

    The :func:`build_line` fields of the stored record (``rec``, in ``rmq_sys_wheel_timer`` or
    ``SCHEDULE_TOPIC_XXXX``: its queueOffset, commitLogOffset, msgId and properties are the
    stored record's) with ``topic``/``queueId`` the real ones it will be delivered to
    (``REAL_TOPIC``/``REAL_QID``) and :data:`DELIVER_TIMESTAMP` (epoch ms) before ``body``.
    """
    body = rec.plain_body
    fields = message_fields(rec)
    fields["topic"] = real_topic
    fields["queueId"] = real_queue_id
    fields[DELIVER_TIMESTAMP] = deliver_ms
    return _line(fields, body)


def _line(fields: dict, body: bytes) -> bytes:
    d = dict(fields)
    try:
        d["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        d["body"] = base64.b64encode(body).decode("ascii")
        d[BODY_ENCODING] = "base64"
    return _dumps(d).encode("utf-8") + b"\n"


#: what a line whose body is not UTF-8 has after the base64 body
_BODY_SUFFIX = b',"' + BODY_ENCODING.encode() + b'":"base64"'


def build_lines(batch: pa.RecordBatch) -> tuple[bytes | memoryview, np.ndarray]:
    """The ``messages.jsonl`` lines of a ``pyarrow.RecordBatch`` of ``engine.read.columnar``
    rows (it needs the :data:`LINE_FIELDS` columns; others are ignored), the same bytes as
    :func:`build_line` of each record.

    Returns ``(the lines concatenated (bytes-like), int64 ends: the byte offset just after line i)``. Built
    by the compiled kernel (``engine.read.kernel.Kernel.json_lines``: no Python per line);
    line by line with ``json`` where the kernel is not built.
    """
    batch = batch.select(list(LINE_FIELDS))
    k = kernel.load()
    if k is not None:
        return k.json_lines(batch, _BODY_SUFFIX, b"}\n")
    lines = []
    for row in batch.to_pylist():
        body = row.pop("body")
        row["properties"] = dict(row["properties"])
        lines.append(_line(row, body))
    ends = np.cumsum([len(x) for x in lines], dtype=np.int64)
    return b"".join(lines), ends


def parse_json_line(line: bytes) -> Any:
    """Parse one ``produce.jsonl`` line strictly: UTF-8 (no other encoding is guessed), one
    JSON value, no ``NaN``/``Infinity``, no object with the same name twice (which would
    otherwise keep the last one silently).

    Raises:
        MessageIllegalError: the line is not such JSON (the message says where).
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MessageIllegalError(f"the line is not UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):  # what json.loads says (JSONDecoder.decode does not look)
        raise MessageIllegalError("not JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)")
    try:
        return _DECODER.decode(text)
    except ValueError as exc:
        raise MessageIllegalError(f"not JSON: {exc}") from None
    except RecursionError:
        raise MessageIllegalError("not JSON: nested too deeply") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"name {k!r} appears twice")
            seen.add(k)
    return obj


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


#: the one strict decoder of produce.jsonl lines (made once: ``json.loads`` with options builds
#: a decoder a call)
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


#: the fields a ``produce.jsonl`` line may have and still be put from columns (plain_fields)
_PLAIN_FIELDS = frozenset(("body", "tags", "keys"))


def plain_fields(obj: object) -> tuple[bytes, str | None, str | None] | None:
    """``(body as UTF-8, tags, keys)`` of a parsed ``produce.jsonl`` line that has a non-empty
    ``body`` text and at most ``tags`` and ``keys`` besides, each a string or null (what
    :func:`message_from_json` makes a message of topic, body, tags and keys of, which
    ``MessageStore.put_bodies`` stores from columns, without a Message), else None (then
    :func:`message_from_json` makes its Message, or says what is wrong with it). The tags and
    keys are not checked against the rules here: ``validation.tags_keys_clean`` vouches for
    a batch's, or :func:`message_from_json` says which line breaks one."""
    if obj.__class__ is not dict or not _PLAIN_FIELDS.issuperset(obj):
        return None
    body, tags, keys = obj.get("body"), obj.get("tags"), obj.get("keys")
    if body.__class__ is not str or not body:
        return None
    if (tags is not None and tags.__class__ is not str) or (
        keys is not None and keys.__class__ is not str
    ):
        return None
    try:
        return body.encode("utf-8"), tags, keys
    except UnicodeEncodeError:  # a lone surrogate: message_from_json names it
        return None


def message_from_json(obj: object, topic: str, queue_id: int | None = None) -> Message:
    """The :class:`engine.format.message.Message` of one parsed ``produce.jsonl`` line.

    ``obj`` is what ``json.loads`` returned for the line; ``queue_id`` is the default queue
    (None: the store picks). Fields: ``body`` (text, stored as UTF-8) or ``bodyBase64``
    (strict base64), exactly one of them and not empty (RocketMQ's client refuses an empty
    body); optional ``tags``, ``keys``, ``properties``, ``queueId``, ``shardingKey``, and one of
    ``delayTimeLevel`` (a delay level, ``setDelayTimeLevel``), ``deliverTimestamp`` (epoch ms,
    ``setDeliverTimeMs``) or ``delayMs`` (``setDelayTimeMs``), where ``null`` is the same as
    leaving the field out. Any other field is refused, so a misspelt
    ``tag`` or a pasted ``messages.jsonl`` line never loses data silently.

    Raises:
        MessageIllegalError: the line breaks a rule (the message names it).
    """

    if not isinstance(obj, dict):
        raise MessageIllegalError(f"a line must be a JSON object, not {_json_type(obj)}")
    unknown = obj.keys() - PRODUCE_FIELDS
    if unknown:
        raise MessageIllegalError(
            f"unknown field {sorted(unknown)[0]!r} (fields: {', '.join(sorted(PRODUCE_FIELDS))})"
        )
    body, b64 = obj.get("body"), obj.get("bodyBase64")
    if body is not None and b64 is not None:
        raise MessageIllegalError("give body or bodyBase64, not both")
    if b64 is not None:
        if not isinstance(b64, str):
            raise MessageIllegalError(f"bodyBase64 must be a string, not {_json_type(b64)}")
        try:
            data = base64.b64decode(b64.encode("ascii"), validate=True)
        except (ValueError, binascii.Error, UnicodeEncodeError):
            raise MessageIllegalError("bodyBase64 is not valid base64") from None
    elif body is not None:
        if not isinstance(body, str):
            raise MessageIllegalError(
                f"body must be a string, not {_json_type(body)} (use bodyBase64 for bytes)"
            )
        try:
            data = body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise MessageIllegalError(f"body contains {describe_char(body[exc.start])}") from None
    else:
        raise MessageIllegalError("a line needs body or bodyBase64")
    if not data:
        raise MessageIllegalError("the body is empty (RocketMQ refuses empty bodies)")
    tags = obj.get("tags")
    if tags is not None and not isinstance(tags, str):
        raise MessageIllegalError(f"tags must be a string, not {_json_type(tags)}")
    qid = obj.get("queueId")
    if qid is None:
        qid = queue_id
    elif not isinstance(qid, int) or isinstance(qid, bool):
        raise MessageIllegalError(f"queueId must be an integer, not {_json_type(qid)}")
    props = obj.get("properties")
    if props is not None and not isinstance(props, dict):
        raise MessageIllegalError(f"properties must be an object, not {_json_type(props)}")
    timing = {}
    for name, attr in (
        ("delayTimeLevel", "delay_level"),
        ("deliverTimestamp", "deliver_time_ms"),
        ("delayMs", "delay_time_ms"),
    ):
        value = obj.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise MessageIllegalError(f"{name} must be an integer, not {_json_type(value)}")
        timing[attr] = value
    if len(timing) > 1:
        raise MessageIllegalError("give one of delayTimeLevel, deliverTimestamp and delayMs")
    msg = Message(
        topic,
        data,
        tags=tags,
        keys=obj.get("keys"),
        properties=props or None,
        queue_id=qid,
        sharding_key=obj.get("shardingKey"),
        delay_level=timing.get("delay_level", 0),
        deliver_time_ms=timing.get("deliver_time_ms"),
        delay_time_ms=timing.get("delay_time_ms"),
    )
    check_message(msg)
    return msg


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type (for messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
