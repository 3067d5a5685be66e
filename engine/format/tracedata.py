"""Message trace records: the bodies a client's trace dispatcher stores in the trace topic.

A trace message (topic ``RMQ_SYS_TRACE_TOPIC`` by default, keys = the traced msgIds) holds one
or more contexts separated by ``\\x02`` (``TraceConstants.FIELD_SPLITOR``), each a list of
fields separated by ``\\x01`` (``CONTENT_SPLITOR``), first the type
(``TraceDataEncoder.decoderFromTraceDataString``)::

    Pub            timestamp, regionId, groupName, topic, msgId, tags, keys, storeHost,
                   bodyLength, costTime, msgType[, offsetMsgId], success[, clientHost]
    SubBefore      timestamp, regionId, groupName, requestId, msgId, retryTimes, keys
    SubAfter       requestId, msgId, costTime, success, keys[, contextCode[, timestamp,
                   groupName]]
    EndTransaction timestamp, regionId, groupName, topic, msgId, tags, keys, storeHost,
                   msgType, transactionId, transactionState, fromTransactionCheck

Text, not a struct: there is no binary layout to declare.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptRecordError
from .message import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

#: TopicValidator.RMQ_SYS_TRACE_TOPIC: where traces go unless a client names another topic.
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# TraceConstants.CONTENT_SPLITOR / FIELD_SPLITOR: the properties' two separator characters
CONTENT_SPLITOR = NAME_VALUE_SEPARATOR
FIELD_SPLITOR = PROPERTY_SEPARATOR


@dataclass
class TraceEntry:
    """One decoded context: ``kind`` is Pub, SubBefore, SubAfter or EndTransaction; fields a
    kind lacks are None (timestamps in epoch ms, cost in ms)."""

    kind: str
    msg_id: str
    group: str | None = None
    timestamp: int | None = None
    cost_ms: int | None = None
    success: bool | None = None
    request_id: str | None = None
    client_host: str | None = None
    topic: str | None = None


def decode_trace_data(text: str) -> list[TraceEntry]:
    """The contexts of one trace message body (``TraceDataEncoder.decoderFromTraceDataString``).
    Unknown types are skipped (newer clients). Raises CorruptRecordError for a known type with
    too few fields or a field that is not a number where one must be."""
    out = []
    for context in text.split(FIELD_SPLITOR):
        f = context.split(CONTENT_SPLITOR)
        kind = f[0]
        need = {"Pub": 13, "SubBefore": 8, "SubAfter": 6, "EndTransaction": 13}.get(kind)
        if need is None:
            continue
        if len(f) < need:
            raise CorruptRecordError(f"trace context {kind} has {len(f)} fields, not {need}")
        try:
            if kind == "Pub":
                out.append(
                    TraceEntry(
                        kind,
                        f[5],
                        group=f[3],
                        timestamp=int(f[1]),
                        cost_ms=int(f[10]),
                        success=f[13 if len(f) >= 14 else 12].lower() == "true",
                        client_host=f[14] if len(f) >= 15 else None,
                        topic=f[4],
                    )
                )
            elif kind == "SubBefore":
                out.append(TraceEntry(kind, f[5], group=f[3], timestamp=int(f[1]), request_id=f[4]))
            elif kind == "SubAfter":
                out.append(
                    TraceEntry(
                        kind,
                        f[2],
                        group=f[8] if len(f) >= 9 else None,
                        timestamp=int(f[7]) if len(f) >= 9 else None,
                        cost_ms=int(f[3]),
                        success=f[4].lower() == "true",
                        request_id=f[1],
                    )
                )
            else:
                out.append(TraceEntry(kind, f[5], group=f[3], timestamp=int(f[1]), topic=f[4]))
        except ValueError as exc:
            raise CorruptRecordError(f"trace context {kind}: {exc}") from None
    return out


def encode_trace_context(fields: list[str]) -> str:
    """One context's text from its fields, type first (``TraceDataEncoder.encoderFromContextBean``
    joins them the same way; each context ends with the field separator)."""
    return CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR
