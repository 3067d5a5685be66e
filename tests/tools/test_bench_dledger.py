"""bench/dledger.py on stores of a few thousand messages, so the bench cannot rot: the command
end to end (the plain store and its DLedger copy per size, every row measured, the growth
lines, dledger.json). The figures themselves are not checked (a few thousand messages on a
shared machine say nothing); that every row is measured for both stores at every size is."""

from __future__ import annotations

import json

import pytest

from bench import dledger, stores
from rmqfs.engine.read import kernel

pytestmark = [
    pytest.mark.skipif(not list(stores.LOGHUB.glob("*_2k.log")), reason="no loghub logs"),
    pytest.mark.skipif(kernel.load() is None, reason="no compiled decoder"),
]


def test_command_measures_every_row_at_every_size(tmp_path, capsys):
    assert dledger.main(["--sizes", "2000,4000", "--passes", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "load average:" in out and "from 2,000 to 4,000 messages (2x)" in out
    for label, _ in dledger.ROWS:
        assert out.count(label) == 3  # a row per size and its growth line
    doc = json.loads((tmp_path / "dledger.json").read_text())
    assert [s["messages"] for s in doc["sizes"]] == [2000, 4000]
    for size in doc["sizes"]:
        for _, key in dledger.ROWS:
            assert min(size[f"{key}_us_per_msg"].values()) > 0
        # the DLedger copy has no IndexFiles: every record's UNIQ_KEY and key are rebuilt
        assert size["index_entries_rebuilt"] == {"plain": 0, "dledger": 2 * size["messages"]}
    assert (tmp_path / "dledger" / "store-4000-1x8" / "dledger-n0").is_dir()
