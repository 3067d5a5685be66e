"""Read-only, lock-free access to a store for the Spark data source: a thin shim over
``engine.columnar`` (the one columnar CommitLog decoder), kept for ``pipeline.datasource``.

See ``engine.columnar`` for what is read, what is checked and what is raised.
"""

from __future__ import annotations

from engine import columnar as _c
from engine.columnar import SCHEDULE_TOPIC, UNIT_DTYPE, decode_units_per_record
from engine.schema import arrow_schema

__all__ = ["StoreFiles", "UNIT_DTYPE", "SCHEDULE_TOPIC", "arrow_schema", "records_to_batch"]


def records_to_batch(commitlog, topic, queue_id, units, queue_offsets, wanted_tags=None,
                     columns=None):
    """``engine.columnar.decode_units`` (the same arguments, batch and errors)."""
    return _c.decode_units(commitlog, topic, queue_id, units, queue_offsets, wanted_tags,
                           columns)


def _rows_batch(commitlog, topic, queue_id, units, queue_offsets):
    """The per-record decode of the same units (``decode_units_per_record``)."""
    return decode_units_per_record(commitlog, topic, queue_id, units, queue_offsets)


class StoreFiles(_c.StoreFiles):
    """``engine.columnar.StoreFiles`` decoding through :func:`records_to_batch` (looked up at
    call time, so tests can count what reaches the CommitLog)."""

    _decode = staticmethod(lambda *a: records_to_batch(*a))
