"""Spark schemas of the decoded messages (mount contract sections 2.1 and 4).

* :data:`VIEW_DDL` is the DDL of one ``view/`` line, shipped in ``MNT/view/_schema.ddl``.
  ``spark.read.schema(VIEW_DDL).json("file://MNT/view")`` gives one row per message.
* :data:`DATASOURCE_DDL` is the schema of that DataFrame as Spark builds it: the line's
  columns, then the partition columns ``topic`` (taken from the directory name, which wins over
  the equal data column) and ``queue`` (INT, inferred from ``queue=<n>``). The ``rocketmq``
  data source (``pipeline.datasource``) returns exactly this schema, so the two can be compared
  or unioned.

Units and encodings: ``bornTimestamp`` / ``storeTimestamp`` are epoch milliseconds (BIGINT);
``storeSize`` is the bytes of the whole CommitLog record; ``commitLogOffset`` its byte offset
in the CommitLog; ``queueOffset`` the index of its ConsumeQueue unit; ``body`` the message body
(decompressed) as BINARY (base64 in the JSON lines); ``tags`` NULL when the message has none;
``keys`` the KEYS property split on spaces; ``properties`` every property, as a map.
"""

from __future__ import annotations

# The one definition of the columns is engine.schema; these names stay for pipeline/.
from engine.schema import DATASOURCE_DDL, VIEW_DDL, split_ddl

__all__ = ["VIEW_DDL", "DATASOURCE_DDL", "FIELD_NAMES", "split_ddl"]

#: Column names of a ``messages.jsonl`` line, in the order the mount writes them.
FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in split_ddl(VIEW_DDL))
