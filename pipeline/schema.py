"""Spark schemas of the decoded messages (mount contract sections 2.1 and 4), for pipeline/.

The one definition of the columns is :mod:`engine.schema`; this module re-exports it:

* :data:`DATASOURCE_DDL`: the schema of ``spark.read.parquet("file://MNT/view")`` (the
  columns of a ``view/`` Parquet part, then the partition columns ``topic`` STRING and
  ``queue`` INT from ``topic=<t>/queue=<q>``), shipped in ``MNT/view/_schema.ddl``. The
  ``rocketmq`` data source (``pipeline.datasource``) returns exactly this schema, so the two
  can be compared or unioned.
* :data:`VIEW_DDL`: the DDL of one ``topics/<t>/messages.jsonl`` line (``topic`` first).

Units and encodings: ``bornTimestamp`` / ``storeTimestamp`` are epoch milliseconds (BIGINT);
``storeSize`` is the bytes of the whole CommitLog record; ``commitLogOffset`` its byte offset
in the CommitLog; ``queueOffset`` the index of its ConsumeQueue unit; ``body`` the message body
(decompressed) as BINARY; ``tags`` NULL when the message has none; ``keys`` the KEYS property
split on spaces; ``properties`` every property, as a map.
"""

from __future__ import annotations

# The one definition of the columns is engine.schema; these names stay for pipeline/.
from engine.schema import DATASOURCE_DDL, VIEW_DDL, split_ddl

__all__ = ["VIEW_DDL", "DATASOURCE_DDL", "FIELD_NAMES", "split_ddl"]

#: Column names of a ``messages.jsonl`` line, in the order the mount writes them.
FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in split_ddl(VIEW_DDL))
