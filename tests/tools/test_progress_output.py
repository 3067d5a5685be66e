"""Long offline commands draw progress bars on a terminal only: a pipe or a log gets no bar
(mount/progress.py, engine/service/workprogress.py)."""

from __future__ import annotations

import json
import os

from conftest import run_rmqfs
from progressout import run_on_pty
from rmqfs.engine.store import Message, MessageStore
from stores import small


def _store(root, crash=False):
    with MessageStore(str(root), small()) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"x" * 300, keys=[f"k{i}"]) for i in range(100)])
    if crash:
        (root / "abort").write_text("1")
    return root


def test_verify_draws_bars_on_a_terminal_only(tmp_path):
    root = _store(tmp_path / "s")
    rc, out, err = run_on_pty("verify", root)
    assert rc == 0 and "OK: no errors" in out
    assert "CommitLog" in err and "ConsumeQueue" in err and "\r" in err  # tqdm's bars
    piped = run_rmqfs("verify", root)
    assert "OK: no errors" in piped.stdout
    assert piped.stderr == ""  # no bar, no control characters in a pipe


def test_produce_and_recover_show_the_recovery_of_the_open(tmp_path):
    root = _store(tmp_path / "s", crash=True)
    data = tmp_path / "lines"
    data.write_text("".join(f"line {i}\n" for i in range(50)))
    rc, out, err = run_on_pty("produce", root, "-t", "T", data)
    assert rc == 0 and "produced 50 messages" in out
    assert "recovering CommitLog" in err and "lines" in err  # the open, then the file
    (root / "abort").write_text("1")
    res = run_rmqfs("recover", root)
    assert "\r" not in res.stderr and "recovering" not in res.stderr
    # recover's reopen says what its recovery did (a crash: the abort file)
    assert "opened the store: recovery after a crash" in res.stdout


def test_snapshot_verify_draws_a_bar_on_a_terminal_only(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "f").write_bytes(b"abc")
    (copy / "SNAPSHOT.json").write_text(
        json.dumps({"name": "n", "files": {"f": {"size": 3, "crc32c": "364b3fb7"}}})
    )
    rc, out, err = run_on_pty("snapshot-verify", copy)
    assert rc == 0, out + err
    assert "verify" in err and "\r" in err
    piped = run_rmqfs("snapshot-verify", copy)
    assert piped.stderr == "" and os.path.exists(copy / "f")
