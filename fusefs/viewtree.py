"""``view/``: the decoded messages laid out for Spark (mount contract sections 2 and 4).

``view/topic=<topic>/queue=<queueId>/part-<20-digit first queue offset>.jsonl`` with ``%``
(and the other characters Spark unescapes) escaped as ``%XX``, plus ``_schema.ddl``. A part
covers a fixed range of queue offsets and never changes once full; bodies are base64 so that
``spark.read.schema(ddl).json(...)`` reads them as BINARY.
"""

from __future__ import annotations

import re

from . import render as R
from .nodes import (RO_FILE, Dir, StaticFile, Stat, ViewFile, ViewHandle,
                    _check_read_only_open, _ms_to_ns)

def escape_partition_value(value: str) -> str:
    """Escape a value for a Hive-style directory name the way Spark unescapes it."""
    out = []
    for ch in value:
        if ch in '%/=:\\"\'#?*[]{}^' or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def unescape_partition_value(name: str) -> str:
    """Inverse of :func:`escape_partition_value`."""
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
        if not name.startswith("queue=") or not name[6:].isdigit():
            return None
        q = int(name[6:])
        if f"queue={q}" != name or q not in self.ctx.store.queue_ids(self.topic):
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
        m = re.fullmatch(r"part-(\d{20})\.jsonl", name)
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
        return Stat(RO_FILE, b - a, _ms_to_ns(v.log.mtime_ms) or self.ctx.mount_time_ns,
                    live=not full)

    def open(self, flags):
        _check_read_only_open(flags)
        v = self.view()
        a, b, _ = self._range(v)
        return PartHandle(v.log, a, b)


class PartHandle(ViewHandle):
    def __init__(self, log, start, end):
        super().__init__(log, start)
        self.end = end

    def read(self, offset, length):
        return self.log.read(self.start + offset, length, self.end)


