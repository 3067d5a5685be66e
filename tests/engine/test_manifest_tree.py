"""The tree of a snapshot in object storage (engine.live.objectsource.ManifestTree): every
directory and file a naive tree of the manifest's paths has, in name order, and no object per
directory (issue 36 item 5: a 1,000,000-file manifest made a node each, 1.1 GB; now about 460
MB with the manifest)."""

import json

import pytest

from rmqfs.engine.live.manifest import parse_manifest
from rmqfs.engine.live.objectsource import ManifestTree

PATHS = [
    "checkpoint",
    "commitlog/00000000000000000000",
    "config/topics.json",
    "config/topics.json.bak",
    "consumequeue/A-b/0/00000000000000000000",  # '-' and '.' sort before '/'
    "consumequeue/A.c/1/00000000000000000000",
    "consumequeue/A/0/00000000000000000000",
    "consumequeue/A/0/00000000000006000000",
    "consumequeue/A/10/00000000000000000000",
    "consumequeue/A/2/00000000000000000000",
    "consumequeue/A0/3/00000000000000000000",
    "index/20261128000000000",
]


def _tree(paths=PATHS) -> ManifestTree:
    files = {p: {"size": 100 + i, "stored": 10, "crc32c": "00000000"} for i, p in enumerate(paths)}
    doc = {"format": 1, "name": "s", "time": 1, "commitLogOffset": 5, "files": files}
    data = json.dumps(doc).encode()
    return ManifestTree(parse_manifest(data), data, "SNAPSHOT.json")


def _naive(paths) -> dict[str, set[str]]:
    """{directory prefix: its entry names} of the paths and SNAPSHOT.json."""
    out: dict[str, set[str]] = {"": set()}
    for p in [*paths, "SNAPSHOT.json"]:
        parts = p.split("/")
        for d in range(len(parts)):
            prefix = "".join(x + "/" for x in parts[:d])
            out.setdefault(prefix, set()).add(parts[d])
    return out


def test_every_directory_lists_what_a_naive_tree_lists():
    tree = _tree()
    want = _naive(PATHS)
    for prefix, names in want.items():
        rel = prefix.rstrip("/")
        assert tree.is_dir(rel), prefix
        got = tree.names(rel)
        assert got is not None and len(got) == len(set(got)) and set(got) == names, prefix
        assert got == sorted(got)
        for name in names:
            child = prefix + name
            assert (tree.file(child) is not None) != tree.is_dir(child), child
    # no directory is listed that the paths do not make
    for rel in ("nope", "consumequeue/A/0/00000000000000000000", "consumequeue/A/1", "conf"):
        assert tree.names(rel) is None, rel


def test_sizes_data_ends_and_what_is_not_there():
    tree = _tree()
    i = tree.file("commitlog/00000000000000000000")
    assert (int(tree.sizes[i]), int(tree.data_end[i])) == (101, 5)  # cut at commitLogOffset
    j = tree.file("SNAPSHOT.json")
    assert j == tree.manifest_index
    for rel in ("nope", "consumequeue/A/0", "consumequeue/A/..", "commitlog"):
        assert tree.file(rel) is None, rel
    assert len(tree) == len(PATHS) + 1


def test_a_name_both_file_and_directory_is_refused():
    with pytest.raises(ValueError, match="both a file and a directory"):
        _tree(["config", "config/topics.json"])
