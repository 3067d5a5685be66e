"""The names of ``view/`` (docs/spark.md): how a topic becomes a Hive partition directory,
``topic=<escaped topic>``, shortened where it would pass NAME_MAX. The one home of the rule the
mount's ``view/`` (``fusefs.viewtree``) names its directories by and the readers of those
names (``pipeline.report``) map them back by."""

from __future__ import annotations

import hashlib

# ExternalCatalogUtils.charToEscape (Spark): the characters its writer escapes as %XX.
_SPARK_ESCAPED = frozenset('"#%\'*/:=?\\{[]^\x7f') | frozenset(map(chr, range(0x20)))


def escape_partition_value(value: str) -> str:
    """Escape a value for a Hive-style directory name as Spark's ``escapePathName`` does.

    ``%RETRY%g`` -> ``%25RETRY%25g``. Spark URL-decodes partition values when it reads them
    (``unescapePathName``), so an unescaped ``%`` followed by two hex digits would be read back
    as another character (``%DLQ%CafeGroup`` -> ``%DLQÊfeGroup``). Only ASCII characters are
    escaped, one ``%XX`` each, which both Spark and :func:`unescape_partition_value` decode.
    """
    out = []
    for ch in value:
        if ch in _SPARK_ESCAPED:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def unescape_partition_value(name: str) -> str:
    """Inverse of :func:`escape_partition_value` (names it did not produce are refused by the
    callers, which check that escaping the result gives ``name`` back)."""
    from urllib.parse import unquote

    return unquote(name)


#: The longest directory entry name, in bytes (Linux NAME_MAX; FUSE refuses longer ones).
NAME_MAX = 255
TOPIC_DIR = "topic="
_DIGEST_HEX = 16  # "~" + 16 hex digits of SHA-256 end a shortened name


def topic_dir_name(topic: str) -> str:
    """The ``view/`` directory of a topic: ``topic=<escaped topic>``.

    A topic may have 255 bytes (``HookUtils.MAX_TOPIC_LENGTH``), a retry or DLQ topic of a
    long group that many; escaped and prefixed, its name can pass NAME_MAX (``topic=%25RETRY%25``
    + 248 chars is 263 bytes). Such a name is shortened to exactly what fits:
    ``topic=<escaped start of the topic>~<16 hex digits of the SHA-256 of its UTF-8>``, unique
    and mapped back by the mount (``fusefs.viewtree.ViewRootDir.child``) and the report
    (``pipeline.report``). Spark's ``topic`` column then holds
    the shortened name; the ``rocketmq`` data source (pipeline/datasource.py) reads the store
    and gives the whole one.
    """
    name = TOPIC_DIR + escape_partition_value(topic)
    if len(name.encode("utf-8", "surrogateescape")) <= NAME_MAX:
        return name
    budget = NAME_MAX - len(TOPIC_DIR) - 1 - _DIGEST_HEX
    out, n = [], 0
    for ch in topic:
        piece = escape_partition_value(ch)
        size = len(piece.encode("utf-8", "surrogateescape"))
        if n + size > budget:
            break
        out.append(piece)
        n += size
    digest = hashlib.sha256(topic.encode("utf-8", "surrogateescape")).hexdigest()[:_DIGEST_HEX]
    return f"{TOPIC_DIR}{''.join(out)}~{digest}"
