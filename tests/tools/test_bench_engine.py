"""bench/engine.py's growth and queues parts, MessageBatch appends and recovery with lost
derived files, and bench/fuse.py's produce part (issue 34) at a tiny scale, so the benches
cannot rot: every
mark measured, recovery checked whole, the store and the scratch files removed, the tables
printed; the produce part mounts, writes and counts what it stored. The figures themselves are
not checked (a few MiB on a shared machine say nothing)."""

from __future__ import annotations

import os

import pytest

from bench import engine, stores
from conftest import fuse

MIB = 1 << 20

pytestmark = pytest.mark.skipif(not list(stores.LOGHUB.glob("*_2k.log")), reason="no loghub logs")


def test_growth_measures_every_mark_and_cleans_up(tmp_path, capsys):
    marks = engine.growth_marks(5 * MIB, 2 * MIB)
    assert marks == [2 * MIB, 4 * MIB, 5 * MIB]
    rows = engine.bench_growth(str(tmp_path), marks, 300, 300, {marks[0], marks[-1]})
    assert [r["commitlog_bytes"] >= m for r, m in zip(rows, marks)] == [True] * 3
    for r in rows:
        assert r["messages_per_s"] > 0 and r["plain_write_mb_per_s"] > 0
        assert r["single_put_messages_per_s"] > 0 and r["get_message_messages_per_s"] > 0
    recovered = [r for r in rows if "recovery_seconds" in r]
    assert len(recovered) == 2 and all(r["recovered_whole_store"] for r in recovered)
    assert all(r["recovery_bytes_scanned"] > 0 for r in recovered)
    assert os.listdir(tmp_path) == []  # the store and the plain scratch files are gone
    engine.print_growth_table(rows)
    out = capsys.readouterr().out
    assert "| CommitLog GiB |" in out and "last/first: batch appends" in out
    assert "Abnormal recovery: " in out
    assert engine.parse_size("10G") == 10 << 30 and engine.parse_size("512M") == 512 * MIB


def test_append_measures_message_batches_and_put_bodies_and_cleans_up(tmp_path, capsys):
    r = engine.bench_append(str(tmp_path), 100, 256, 512, 1, message_batch=True)
    assert r["message_batch"] and r["messages"] == 512 and r["commitlog_bytes"] > 512 * 100
    # a tiny run on a fresh store: the ratio may round to 0.000, the figures say nothing
    assert r["messages_per_s"] > 0 and r["plain_write_mb_per_s"] > 0
    assert r["ratio_to_plain_write"] >= 0
    assert os.listdir(tmp_path) == []
    engine.print_table({"append": [r]})
    assert "| append 100 B bodies, MessageBatch 256 |" in capsys.readouterr().out
    b = engine.bench_append(str(tmp_path), 100, 256, 512, 1, bodies=True)
    assert b["put_bodies"] and b["messages"] == 512
    assert 512 * 100 < b["commitlog_bytes"] < r["commitlog_bytes"]  # no TAGS: put_bodies has none
    assert os.listdir(tmp_path) == []
    engine.print_table({"append": [b]})
    assert "| append 100 B bodies, put_bodies, batch 256 |" in capsys.readouterr().out
    k = engine.bench_append(str(tmp_path), 100, 256, 512, 1, keyed=True)
    # the same messages as a MessageBatch's, with a KEYS item each
    per_key = len("KEYS\x01order-0\x02")
    assert k["keyed"] and k["commitlog_bytes"] >= r["commitlog_bytes"] + 512 * per_key
    assert os.listdir(tmp_path) == []
    engine.print_table({"append": [k]})
    assert "| append 100 B bodies, a key each, batch 256 |" in capsys.readouterr().out
    bare = engine.bench_append(str(tmp_path), 100, 256, 512, 1, keyed=True, results=False)
    assert not bare["results"] and bare["commitlog_bytes"] == k["commitlog_bytes"]
    engine.print_table({"append": [bare]})
    assert (
        "| append 100 B bodies, a key each, no PutResults, batch 256 |" in capsys.readouterr().out
    )
    # the same messages from columns: the same records
    cols = engine.bench_append(str(tmp_path), 100, 256, 512, 1, bodies=True, keyed=True)
    assert cols["put_bodies"] and cols["commitlog_bytes"] == k["commitlog_bytes"]
    assert os.listdir(tmp_path) == []
    engine.print_table({"append": [cols]})
    assert (
        "| append 100 B bodies, put_bodies, tags and a key each, batch 256 |"
        in capsys.readouterr().out
    )


def test_queues_measures_every_topic_size_and_cleans_up(tmp_path, capsys):
    rows = engine.bench_queues(str(tmp_path), (2, 8), (4, 16), count=64, repeat=1)
    assert [(r["queues"], r["batch"]) for r in rows] == [(2, 4), (8, 4), (2, 16), (8, 16)]
    assert all(r["messages"] == 64 and r["us_per_message"] > 0 for r in rows)
    assert [r["x_fewest_queues"] for r in rows][::2] == [1.0, 1.0]
    assert os.listdir(tmp_path) == []
    engine.print_queues_table(rows)
    assert "| 8 | 16 |" in capsys.readouterr().out


def test_recovery_rebuilds_what_it_lost_and_cleans_up(tmp_path, capsys):
    rows = engine.bench_recovery(str(tmp_path), 4 * MIB, 1, body_size=1024)
    assert [r["lost"] for r in rows] == ["none", "index", "consumequeue", "index, not UTF-8"]
    # the whole log scanned each time, and each lost directory rebuilt whole
    assert all(r["recovered_whole_log"] and r["mb_per_s"] > 0 for r in rows)
    assert [r["records_not_utf8"] > 0 for r in rows] == [False, False, False, True]
    assert os.listdir(tmp_path) == []
    engine.print_table({"recovery": rows})
    assert "| abnormal recovery, IndexFiles rebuilt, 4 MiB" in capsys.readouterr().out


@fuse
@pytest.mark.fuse
def test_produce_part_mounts_writes_and_counts(tmp_path):
    from bench import fuse as bench_fuse

    rows = bench_fuse.produce_bench(tmp_path, 3000, 1)
    labels = [r[0] for r in rows]
    assert labels[0].startswith("engine put_bodies") and "produce.jsonl" in labels[3]
    assert labels[-1] == "300 lines > produce, one write() a line"  # (stored lines counted)
    assert all("lines/s" in r[1] for r in rows)
    assert not os.path.ismount(tmp_path / "produce-mnt")
