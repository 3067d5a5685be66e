"""bench/objectstore.py's growth line (:func:`bench.objectstore.reader_growth`): each figure of
the reader alone per CommitLog byte needed, large store over small. The run itself needs a
local S3 server and minutes; the arithmetic that says how the cost grows is checked here."""

from __future__ import annotations

from bench.objectstore import reader_growth


def _res(needed: int, s3_s: float, local_s: float, requests: int, over: float) -> dict:
    return {
        "needed": needed,
        "s3_s": s3_s,
        "local_s": local_s,
        "requests": requests,
        "bytes_over_needed": over,
    }


def test_linear_costs_grow_by_one():
    small = _res(1 << 30, 2.0, 1.0, 64, 1.01)
    large = _res(4 << 30, 8.0, 4.0, 256, 1.01)
    assert reader_growth(small, large) == {
        "needed_x": 4.0,
        "s3_s_per_byte_x": 1.0,
        "local_s_per_byte_x": 1.0,
        "requests_per_byte_x": 1.0,
        "bytes_over_needed_x": 1.0,
    }


def test_a_cost_growing_faster_than_the_bytes_shows():
    small = _res(1 << 30, 2.0, 1.0, 64, 1.0)
    large = _res(4 << 30, 16.0, 4.0, 256, 1.1)  # S3 time per byte doubles
    g = reader_growth(small, large)
    assert g["s3_s_per_byte_x"] == 2.0 and g["local_s_per_byte_x"] == 1.0
    assert g["bytes_over_needed_x"] == 1.1
