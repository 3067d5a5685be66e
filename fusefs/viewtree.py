"""``view/``: the decoded messages laid out for Spark (mount contract sections 2 and 4).

``view/topic=<topic>/queue=<queueId>/part-<20-digit first queue offset>.jsonl`` with ``%``
(and the other characters Spark unescapes) escaped as ``%XX``, plus ``_schema.ddl``. A part
covers a fixed range of queue offsets and never changes once full; bodies are base64 so that
``spark.read.schema(ddl).json(...)`` reads them as BINARY.
"""

from __future__ import annotations

import re

from engine.errors import StoreError
from engine.validation import parse_decimal

from . import render as R
from .nodes import (RO_FILE, Dir, StaticFile, Stat, ViewFile, ViewHandle,
                    _check_read_only_open, _ms_to_ns)

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


class ViewRootDir(Dir):
    def list(self):
        s = self.ctx.store
        names = ["_schema.ddl"]
        names += [f"topic={escape_partition_value(t)}" for t in s.topic_names()
                  if any(s.max_offset(t, q) > s.min_offset(t, q) for q in s.queue_ids(t))]
        return names

    def child(self, name):
        if name == "_schema.ddl":
            return StaticFile(self.ctx, self.sub(name), (R.VIEW_DDL + "\n").encode())
        if not name.startswith("topic="):
            return None
        topic = unescape_partition_value(name[6:])
        if escape_partition_value(topic) != name[6:] or topic not in self.ctx.store.topic_names():
            return None
        return ViewTopicDir(self.ctx, self.sub(name), topic)


class ViewTopicDir(Dir):
    def __init__(self, ctx, path, topic):
        super().__init__(ctx, path)
        self.topic = topic

    def list(self):
        s = self.ctx.store
        return [f"queue={q}" for q in s.queue_ids(self.topic)
                if s.max_offset(self.topic, q) > s.min_offset(self.topic, q)]

    def child(self, name):
        q = parse_decimal(name[6:]) if name.startswith("queue=") else None
        if q is None or q not in self.ctx.store.queue_ids(self.topic):
            return None
        return ViewQueueDir(self.ctx, self.sub(name), self.topic, q)


class ViewQueueDir(Dir):
    def __init__(self, ctx, path, topic, queue_id):
        super().__init__(ctx, path)
        self.topic, self.queue_id = topic, queue_id

    def _parts(self):
        s = self.ctx.store
        lo, hi = s.min_offset(self.topic, self.queue_id), s.max_offset(self.topic, self.queue_id)
        p = self.ctx.part_messages
        return [k * p for k in range(lo // p, (hi - 1) // p + 1)] if hi > lo else []

    def list(self):
        return [f"part-{first:020d}.jsonl" for first in self._parts()]

    def child(self, name):
        m = re.fullmatch(r"part-([0-9]{20})\.jsonl", name)
        if not m or int(m.group(1)) not in self._parts():
            return None
        return ViewPartFile(self.ctx, self.sub(name), self.topic, self.queue_id,
                            int(m.group(1)))


class ViewPartFile(ViewFile):
    """Lines of queue offsets ``[first, first + part_messages)``, body always base64."""

    def __init__(self, ctx, path, topic, queue_id, first):
        super().__init__(ctx, path)
        self.topic, self.queue_id, self.first = topic, queue_id, first

    def view(self):
        return self.ctx.views.queue("view", self.topic, self.queue_id, R.render_view_message)

    def _range(self, v):
        last = self.first + self.ctx.part_messages
        return v.byte_offset(self.first), v.byte_offset(last), v.next_offset >= last

    def stat(self):
        v = self.view()
        a, b, full = self._range(v)
        return Stat(RO_FILE, b - a, self._mtime_ns(v, full), live=not full)

    def _mtime_ns(self, v, full: bool) -> int:
        """Store time of the part's newest (last) message; fixed once the part is full.

        The queue view's own mtime moves with every new message of the queue, which would
        make a full part look modified (Spark's ``modifiedAfter``, rsync).
        """
        cache = _part_mtimes(self.ctx)
        key = (self.topic, self.queue_id, self.first)
        ns = cache.get(key)
        if ns is not None:
            return ns
        last = min(self.first + self.ctx.part_messages, v.next_offset) - 1
        ns = 0
        if last >= max(self.first, v.first_offset or 0):
            try:
                ns = _ms_to_ns(self.ctx.store.get_message(self.topic, self.queue_id,
                                                          last).store_timestamp)
            except StoreError:
                ns = 0
        ns = ns or self.ctx.mount_time_ns
        if full:
            cache[key] = ns
        return ns

    def open(self, flags):
        _check_read_only_open(flags)
        v = self.view()
        a, b, _ = self._range(v)
        return PartHandle(v.log, a, b)


def _part_mtimes(ctx) -> dict:
    """Per-mount cache ``{(topic, queueId, first): mtime ns}`` of full parts."""
    cache = getattr(ctx, "_view_part_mtimes", None)
    if cache is None:
        cache = ctx._view_part_mtimes = {}
    return cache


class PartHandle(ViewHandle):
    def __init__(self, log, start, end):
        super().__init__(log, start)
        self.end = end

    def read(self, offset, length):
        return self.log.read(self.start + offset, length, self.end)


