"""bench/compressed.py on stores of a few thousand messages, so the bench cannot rot: the
command end to end (a store of compressed bodies per size, the decode, the inflation alone and
the per-record decoder measured, the growth line, compressed.json). The figures themselves are
not checked (a few thousand messages on a shared machine say nothing)."""

from __future__ import annotations

import json

import pytest

from bench import compressed, stores
from rmqfs.engine.read import kernel

pytestmark = [
    pytest.mark.skipif(not list(stores.LOGHUB.glob("*_2k.log")), reason="no loghub logs"),
    pytest.mark.skipif(kernel.load() is None, reason="no compiled decoder"),
]


def test_command_measures_every_figure_at_every_size(tmp_path, capsys):
    args = ["--sizes", "1000,2000", "--body", "5000", "--passes", "1", "--out", str(tmp_path)]
    assert compressed.main(args) == 0
    out = capsys.readouterr().out
    assert "load average:" in out and "1,000 to 2,000 messages" in out
    doc = json.loads((tmp_path / "compressed.json").read_text())
    assert [r["n"] for r in doc["sizes"]] == [1000, 2000]
    for r in doc["sizes"]:
        assert min(r["decode_us"], r["inflate_us"], r["per_record_us"]) > 0
