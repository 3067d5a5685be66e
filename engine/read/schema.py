"""The contract's message columns: names, Arrow types and Spark DDL, defined once.

Mount contract sections 2.1 and 4. Every decoded form of a message uses these columns:
``topics/*/messages.jsonl`` lines (:data:`LINE_COLUMNS`, JSON), the ``view/`` Parquet parts
(:data:`PART_COLUMNS`: the partition columns ``topic`` and ``queue`` are left to the directory
names ``topic=<t>/queue=<q>``), the ``rocketmq`` Spark data source and the columnar decoder
(:func:`arrow_schema`: the part's columns, then ``topic`` and ``queue``, which is what
``spark.read.parquet("file://MNT/view")`` returns).

Units and encodings: ``bornTimestamp`` / ``storeTimestamp`` are epoch milliseconds (BIGINT);
``storeSize`` is the bytes of the whole CommitLog record (TOTALSIZE); ``commitLogOffset`` its
byte offset in the CommitLog; ``queueOffset`` the index of its ConsumeQueue unit; ``msgId`` the
offset message id (``MessageDecoder.createMessageId``: 32 or 56 upper-case hex digits);
``tags`` NULL when the message has none; ``keys`` the KEYS property split on spaces;
``properties`` every property as a map (``string2messageProperties``); ``body`` the message
body, decompressed, as BINARY.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = [
    "int_values",
    "LINE_COLUMNS",
    "PART_COLUMNS",
    "PARTITION_COLUMNS",
    "COLUMN_NAMES",
    "VIEW_DDL",
    "DATASOURCE_DDL",
    "BROKER_COLUMN",
    "SOURCE_COLUMNS",
    "SOURCE_DDL",
    "SCHEDULED_COLUMNS",
    "SCHEDULED_DDL",
    "PART_DDL",
    "arrow_schema",
    "part_schema",
    "split_ddl",
]

# (name, Spark DDL type) of a message, in RocketMQ ``MessageExt`` order. Arrow types follow
# from the DDL type (_ARROW below), so each column is written here once.
LINE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "STRING"),
    ("queueId", "INT"),
    ("queueOffset", "BIGINT"),
    ("commitLogOffset", "BIGINT"),
    ("storeSize", "INT"),
    ("msgId", "STRING"),
    ("tags", "STRING"),
    ("keys", "ARRAY<STRING>"),
    ("bornTimestamp", "BIGINT"),
    ("bornHost", "STRING"),
    ("storeTimestamp", "BIGINT"),
    ("storeHost", "STRING"),
    ("sysFlag", "INT"),
    ("flag", "INT"),
    ("bodyCRC", "INT"),
    ("reconsumeTimes", "INT"),
    ("preparedTransactionOffset", "BIGINT"),
    ("properties", "MAP<STRING,STRING>"),
    ("body", "BINARY"),
)
#: Partition columns of ``view/`` (``topic=<t>/queue=<q>`` directories), in Spark's order.
PARTITION_COLUMNS: tuple[tuple[str, str], ...] = (("topic", "STRING"), ("queue", "INT"))
#: Columns stored in a ``view/`` Parquet part: a line's columns without the partition ``topic``.
PART_COLUMNS: tuple[tuple[str, str], ...] = tuple(c for c in LINE_COLUMNS if c[0] != "topic")
#: Columns of the decoder's batches and of the data source: the part's, then the partitions.
_ALL = PART_COLUMNS + PARTITION_COLUMNS
COLUMN_NAMES: tuple[str, ...] = tuple(n for n, _ in _ALL)


def _ddl(cols: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{n} {t}" for n, t in cols)


#: DDL of one ``messages.jsonl`` line (the JSON view; topic first).
VIEW_DDL = _ddl(LINE_COLUMNS)
#: DDL of a ``view/`` Parquet part's own columns.
PART_DDL = _ddl(PART_COLUMNS)
#: DDL of ``spark.read.parquet(view)`` (the mount's ``view.ddl``); the ``rocketmq`` data source
#: adds ``brokerName`` (:data:`SOURCE_DDL`).
DATASOURCE_DDL = _ddl(_ALL)
#: The column the ``rocketmq`` data source adds after :data:`DATASOURCE_DDL`'s: the name of
#: the broker whose store the row comes from (``pipeline.datasource.store_broker_name``). Not
#: part of ``view/`` nor of ``view.ddl``: one mount is one broker, and ``spark.read.parquet(view)``
#: must keep returning exactly :data:`DATASOURCE_DDL` (the report adds the column there itself).
BROKER_COLUMN: tuple[str, str] = ("brokerName", "STRING")
#: Columns of the ``rocketmq`` data source: the view's, then ``brokerName``.
SOURCE_COLUMNS: tuple[tuple[str, str], ...] = _ALL + (BROKER_COLUMN,)
#: DDL of the ``rocketmq`` data source (``brokerName`` never null).
SOURCE_DDL = _ddl(SOURCE_COLUMNS) + " NOT NULL"
#: The column a waiting message adds (``scheduled.jsonl``, the data source's ``scheduled``
#: option): when it is delivered, epoch ms.
SCHEDULED_COLUMNS: tuple[tuple[str, str], ...] = _ALL + (("deliverTimestamp", "BIGINT"),)
#: DDL of the ``rocketmq`` data source with ``scheduled=true``: the messages waiting for delivery.
SCHEDULED_DDL = _ddl(SCHEDULED_COLUMNS)


def split_ddl(ddl: str) -> list[tuple[str, str]]:
    """``[(column, type), ...]`` of a DDL column list (commas inside ``<...>`` kept)."""
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
    return [(name, kind) for name, kind in (f.split(None, 1) for f in fields)]


def _arrow_type(ddl_type: str) -> pa.DataType:
    import pyarrow as pa

    s = pa.string()
    return {
        "STRING": s,
        "INT": pa.int32(),
        "BIGINT": pa.int64(),
        "BINARY": pa.binary(),
        "ARRAY<STRING>": pa.list_(s),
        "MAP<STRING,STRING>": pa.map_(s, s),
    }[ddl_type]


_cache: dict[str, pa.Schema] = {}


def arrow_schema() -> pa.Schema:
    """Arrow schema of the decoder's batches: :data:`PART_COLUMNS` then ``topic``, ``queue``."""
    s = _cache.get("all")
    if s is None:
        import pyarrow as pa

        s = _cache["all"] = pa.schema([(n, _arrow_type(t)) for n, t in _ALL])
    return s


def part_schema() -> pa.Schema:
    """Arrow schema of a ``view/`` Parquet part (:data:`PART_COLUMNS`)."""
    s = _cache.get("part")
    if s is None:
        import pyarrow as pa

        s = _cache["part"] = pa.schema([(n, _arrow_type(t)) for n, t in PART_COLUMNS])
    return s


def int_values(col: pa.Array, null: int | None = None) -> np.ndarray:
    """The values of an integer Arrow array: a zero-copy numpy view of its data buffer
    (native order, what Arrow holds), or, where it has nulls and ``null`` is given, a copy with
    ``null`` in their place. Where pandas is installed, pyarrow's ``to_numpy`` and
    ``fill_null`` import it on their first call in a process (0.3 s here: a tenth of a 4 GiB
    store's recovery after a crash, paid for one column). ValueError for another type, for
    nulls without ``null``, or for a ``null`` the type cannot hold."""
    import numpy as np
    import pyarrow as pa

    t = col.type
    if not pa.types.is_integer(t) or (col.null_count and null is None):
        raise ValueError(f"not an integer column without nulls: {t}, {col.null_count} nulls")
    dtype = np.dtype(f"{'u' if pa.types.is_unsigned_integer(t) else 'i'}{t.bit_width // 8}")
    values = np.frombuffer(col.buffers()[1], dtype, len(col), col.offset * dtype.itemsize)
    if not col.null_count or null is None:
        return values
    info = np.iinfo(dtype)
    if not info.min <= null <= info.max:
        raise ValueError(f"{null} is not a value of {t}")
    bits = np.unpackbits(np.frombuffer(col.buffers()[0], np.uint8), bitorder="little")
    return np.where(bits[col.offset : col.offset + len(col)].astype(bool), values, null)
