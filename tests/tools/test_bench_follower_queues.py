"""bench/follower_queues.py on small stores, so the bench cannot rot: the command end to end
(a writer and its follower per size, every figure measured, the growth line,
follower_queues.json). The figures themselves are not checked."""

from __future__ import annotations

import json

from bench import follower_queues


def test_command_measures_every_figure_at_every_size(tmp_path, capsys):
    args = ["--queues", "70,140", "--steps", "3", "--out", str(tmp_path)]
    assert follower_queues.main(args) == 0
    out = capsys.readouterr().out
    assert "load average:" in out and "70 to 140 queues" in out
    doc = json.loads((tmp_path / "follower_queues.json").read_text())
    assert [r["queues"] for r in doc["sizes"]] == [70, 140]
    for r in doc["sizes"]:
        assert min(r["after_put_ms"], r["full_ms"], r["pread_each_ms"]) > 0
