"""Rendering of decoded messages as JSON lines (mount contract section 2.1).

One JSON object per line, RocketMQ's ``MessageExt`` field names, timestamps in epoch ms.
``topics/`` views show a body as text when it is valid UTF-8 and as base64 otherwise (with
``"bodyEncoding": "base64"``); ``view/`` (for Spark) always shows base64, so that a fixed Spark
schema reads ``body`` as BINARY. The same record always renders to the same bytes.
"""

from __future__ import annotations

import base64
import json

from engine.message import MessageRecord, host_to_str

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# Spark DDL of a view/ line; topic and queue also come from the directory names.
VIEW_DDL = ("topic STRING, queueId INT, queueOffset BIGINT, commitLogOffset BIGINT, "
            "storeSize INT, msgId STRING, tags STRING, keys ARRAY<STRING>, "
            "bornTimestamp BIGINT, bornHost STRING, storeTimestamp BIGINT, storeHost STRING, "
            "sysFlag INT, flag INT, bodyCRC INT, reconsumeTimes INT, "
            "preparedTransactionOffset BIGINT, properties MAP<STRING,STRING>, body BINARY")


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


def render_message(rec: MessageRecord) -> bytes:
    """A ``topics/`` line: body as text when UTF-8, else base64 with ``bodyEncoding``."""
    d = message_fields(rec)
    body = rec.plain_body
    try:
        d["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        d["body"] = base64.b64encode(body).decode("ascii")
        d["bodyEncoding"] = "base64"
    return _dumps(d).encode("utf-8") + b"\n"


def render_view_message(rec: MessageRecord) -> bytes:
    """A ``view/`` line: body always base64 (read by Spark as BINARY)."""
    d = message_fields(rec)
    d["body"] = base64.b64encode(rec.plain_body).decode("ascii")
    return _dumps(d).encode("utf-8") + b"\n"


def render_body(rec: MessageRecord) -> bytes:
    """A ``bodies.txt`` line: the (decompressed) body and ``\\n``."""
    return rec.plain_body + b"\n"


def render_json(obj) -> bytes:
    """Pretty JSON for small status files, ending in a newline."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
