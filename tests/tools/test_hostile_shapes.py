"""The rmqfs command on hostile shapes (issue 36 items 6, 9): a store holding a directory
1,100 levels deep, and snapshot copies whose SNAPSHOT.json has a field of the wrong JSON type.
Each command prints one line naming what is wrong, never a traceback."""

import json
import os

import pytest

from conftest import run_rmqfs
from rmqfs.engine.service.storetree import MAX_STORE_DEPTH, remove_tree
from stores import produce, small


@pytest.fixture
def deep_store(tmp_path):
    root = tmp_path / "store"
    produce(str(root), 10, cfg=small())
    junk = str(root / "junk")
    path = junk
    os.mkdir(path)
    for _ in range(1100):
        path = os.path.join(path, "d")
        os.mkdir(path)
    yield root
    remove_tree(junk)  # pytest's cleanup (shutil.rmtree) recurses once per level


@pytest.mark.parametrize("cmd", ["verify", "topicList", "recover"])
def test_a_directory_1100_deep_is_refused_in_one_line(deep_store, cmd):
    r = run_rmqfs(cmd, str(deep_store), check=False, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "Traceback" not in out and "RecursionError" not in out
    assert f"a directory nested deeper than {MAX_STORE_DEPTH} levels" in out


def _copy(tmp_path, **over):
    copy = tmp_path / "copy"
    copy.mkdir()
    doc = {
        "name": "s",
        "commitLogOffset": 0,
        "queues": {"T": {"0": [0, 1]}},
        "files": {"checkpoint": {"size": 0, "crc32c": "00000000"}},
    }
    doc.update(over)
    (copy / "SNAPSHOT.json").write_text(json.dumps(doc))
    (copy / "checkpoint").write_bytes(b"")
    return copy


@pytest.mark.parametrize(
    "over,words",
    [
        ({"commitLogOffset": [1]}, "SNAPSHOT.json: commitLogOffset: [1] is not an integer >= 0"),
        ({"queues": {"T": {"²": [0, 1]}}}, "SNAPSHOT.json: queues['T']['²']: queue id '²'"),
        (
            {"files": {"checkpoint": {"size": 0, "stored": True, "crc32c": "00000000"}}},
            "SNAPSHOT.json: files['checkpoint'].stored: True",
        ),
    ],
)
@pytest.mark.parametrize("cmd", ["snapshot-verify", "snapshot-download", "snapshot-upload"])
def test_a_bad_manifest_field_is_one_line_naming_it(tmp_path, over, words, cmd):
    copy = _copy(tmp_path, **over)
    args = {
        "snapshot-verify": [str(copy)],
        "snapshot-download": [str(copy), str(tmp_path / "restored")],
        "snapshot-upload": [str(copy), str(tmp_path / "uploaded")],
    }[cmd]
    r = run_rmqfs(cmd, *args, check=False, timeout=60)
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("rmqfs: ") and words in r.stderr, r.stderr


@pytest.mark.parametrize("twin", ["config/a.part", "SNAPSHOT.json.part"])
def test_a_manifest_naming_a_file_and_its_download_name_is_refused(tmp_path, twin):
    """A download writes each file through ``<name>.part`` and the manifest last through
    ``SNAPSHOT.json.part``: a manifest naming ``config/a`` and ``config/a.part`` (no store has
    such names) had one overwrite the other, ``config/a`` holding the other's bytes, and the
    download said OK (a review). It is refused, nothing written."""
    from rmqfs.engine.format.crc import crc32c

    loc = tmp_path / "loc"
    (loc / "config").mkdir(parents=True)
    files = {}
    for rel, data in (("config/a", b"x" * 5000), (twin, b"I am the twin\n")):
        (loc / rel).write_bytes(data)
        files[rel] = {"size": len(data), "stored": len(data), "crc32c": f"{crc32c(data):08x}"}
    man = {
        "format": 1,
        "name": "h",
        "time": 0,
        "commitLogOffset": 0,
        "commitLogMinOffset": 0,
        "messageCount": 0,
        "storePathRootDir": "/x",
        "files": files,
    }
    (loc / "SNAPSHOT.json").write_text(json.dumps(man))
    r = run_rmqfs("snapshot-download", loc, tmp_path / "out", check=False)
    assert r.returncode == 1 and "which a download writes through" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")
