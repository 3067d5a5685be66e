"""Explicit Spark schema of one decoded message line of the rmqfs mount.

Every ``MNT/topics/<topic>/messages.jsonl`` and ``MNT/topics/<topic>/<queueId>/messages.jsonl``
line is one JSON object with RocketMQ's ``MessageExt`` field names. Read them with this
schema, never with inference: inference turns ``properties`` into a struct whose shape
changes from file to file (see shared/reference/spark-integration.md, section 0, rule 6).

Units and encodings:

* ``bornTimestamp`` / ``storeTimestamp``: epoch milliseconds (UTC) stored as BIGINT. Jobs
  derive TIMESTAMP columns themselves (``pipeline.report.read_messages`` adds
  ``bornTime`` / ``storeTime``).
* ``storeSize``: bytes of the whole CommitLog record. ``commitLogOffset``: byte offset of
  the record in the CommitLog. ``queueOffset``: index of the entry in its ConsumeQueue.
* ``body``: the body text, or base64 of the raw bytes when ``bodyEncoding`` is ``"base64"``
  (``bodyEncoding`` is absent, so NULL, for text bodies).
* ``tags`` is NULL when the message has no tag. ``keys`` is the KEYS property split on spaces.

``MESSAGE_DDL`` needs nothing else. Importing ``MESSAGE_SCHEMA`` (a ``StructType``)
imports pyspark, and only on first access, so code without Spark (such as the FUSE side,
which may want to publish the DDL) can still use this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

__all__ = ["MESSAGE_DDL", "MESSAGE_SCHEMA", "FIELD_NAMES"]

#: Spark DDL of one decoded line, in the order the mount writes the fields.
MESSAGE_DDL = (
    "topic STRING, "
    "queueId INT, "
    "queueOffset BIGINT, "
    "commitLogOffset BIGINT, "
    "storeSize INT, "
    "msgId STRING, "
    "tags STRING, "
    "keys ARRAY<STRING>, "
    "bornTimestamp BIGINT, "
    "bornHost STRING, "
    "storeTimestamp BIGINT, "
    "storeHost STRING, "
    "sysFlag INT, "
    "flag INT, "
    "bodyCRC INT, "
    "reconsumeTimes INT, "
    "preparedTransactionOffset BIGINT, "
    "properties MAP<STRING, STRING>, "
    "body STRING, "
    "bodyEncoding STRING"
)



def _top_level_fields(ddl: str) -> list[str]:
    """Split a DDL column list on the commas that are not inside ``<...>``."""
    fields, depth, start = [], 0, 0
    for i, ch in enumerate(ddl):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            fields.append(ddl[start:i].strip())
            start = i + 1
    fields.append(ddl[start:].strip())
    return fields


#: Column names of ``MESSAGE_DDL`` in order.
FIELD_NAMES: tuple[str, ...] = tuple(f.split(None, 1)[0] for f in _top_level_fields(MESSAGE_DDL))


def _build_schema() -> "StructType":
    """Build the ``StructType`` equal to ``MESSAGE_DDL`` (all fields nullable)."""
    from pyspark.sql.types import (
        ArrayType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    string, int_, long_ = StringType(), IntegerType(), LongType()
    return StructType(
        [
            StructField("topic", string),
            StructField("queueId", int_),
            StructField("queueOffset", long_),
            StructField("commitLogOffset", long_),
            StructField("storeSize", int_),
            StructField("msgId", string),
            StructField("tags", string),
            StructField("keys", ArrayType(string)),
            StructField("bornTimestamp", long_),
            StructField("bornHost", string),
            StructField("storeTimestamp", long_),
            StructField("storeHost", string),
            StructField("sysFlag", int_),
            StructField("flag", int_),
            StructField("bodyCRC", int_),
            StructField("reconsumeTimes", int_),
            StructField("preparedTransactionOffset", long_),
            StructField("properties", MapType(string, string)),
            StructField("body", string),
            StructField("bodyEncoding", string),
        ]
    )


_schema_cache: "StructType | None" = None


def __getattr__(name: str):
    """Module attribute hook: ``MESSAGE_SCHEMA`` is built (importing pyspark) on first use."""
    global _schema_cache
    if name == "MESSAGE_SCHEMA":
        if _schema_cache is None:
            _schema_cache = _build_schema()
        return _schema_cache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
