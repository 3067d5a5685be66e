"""bench/decode.py (issue 16) on stores of a few thousand messages, so the bench cannot rot: its
measuring function in this process, and the command end to end (a child process per size,
the table, decode.json). The figures themselves are not checked (a few thousand messages
on a shared machine say nothing); that every stage is found and measured is."""

from __future__ import annotations

import json

import pytest

from bench import decode, stores
from rmqfs.engine.read import kernel

pytestmark = [
    pytest.mark.skipif(not list(stores.LOGHUB.glob("*_2k.log")), reason="no loghub logs"),
    pytest.mark.skipif(kernel.load() is None, reason="no compiled decoder"),
]


def test_measure_finds_every_stage(tmp_path, capsys):
    store, built = decode.ensure_store(3000, tmp_path)
    assert built > 0 and decode.ensure_store(3000, tmp_path)[1] == 0  # reused the second time
    res = decode.measure(store, 3000, passes=1, work=tmp_path)
    for label in decode.COLUMN_SETS:
        assert res["decode"][label]["crc"] > 0 and res["decode"][label]["no_crc"] > 0
    # every stage was measured; together they are the all-columns decode
    assert list(res["stages"]) == [label for label, _, _ in decode.STAGES]
    assert res["stages_total_us"] == pytest.approx(sum(res["stages"].values()))
    assert res["stages"]["header checks + numeric fields"] > 0
    part = res["part"]
    assert part["messages"] == 3000 // decode.QUEUES and part["parquet_bytes"] > 0
    assert part["render_us"] > part["decode_us"] > 0
    assert res["lines"]["bytes"] > 0 and res["lines"]["us"] > 0
    assert res["memory"]["end"]["VmHWM"] >= res["memory"]["peak_anon_decode"] > 0
    assert not list(tmp_path.glob("parts-*"))  # the Parquet parts are removed
    # the same-run baseline: queue 0 read back from local Parquet, each column set
    base = res["parquet"]
    assert base["messages"] == part["messages"] and base["parquet_bytes"] > 0
    assert set(base["us"]) == set(decode.COLUMN_SETS) and min(base["us"].values()) > 0
    assert not list(tmp_path.glob("baseline-*"))
    decode.print_table([res, res])
    out = capsys.readouterr().out
    assert "<= 0.5" in out and "<= 0.3" in out and "<= 1.2" in out
    assert "cost per message is flat" in out
    assert out.count("decode / Parquet read (ratio)") == len(decode.COLUMN_SETS)


def test_command_writes_the_table_and_json(tmp_path, capsys):
    assert decode.main(["--sizes", "2000,4000", "--passes", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "load average:" in out and "      2,000       4,000" in out
    doc = json.loads((tmp_path / "decode.json").read_text())
    assert [s["messages"] for s in doc["sizes"]] == [2000, 4000]
    assert all(s["commitlog_bytes"] > 0 for s in doc["sizes"])
