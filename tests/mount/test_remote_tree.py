"""The tree of a snapshot in object storage (mount.remotefs.Tree), without a kernel: every
directory and file a naive tree of the manifest's paths has, in name order, with inodes that
decode back, readdir cookies that resume, and no object per directory (issue 36 item 5: a
1,000,000-file manifest made a node each, 1.1 GB; now about 460 MB with the manifest)."""

import json

import pytest

from rmqfs.engine.live.manifest import parse_manifest
from rmqfs.mount.remotefs import Tree

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


def _tree(paths=PATHS) -> Tree:
    files = {p: {"size": 100 + i, "stored": 10, "crc32c": "00000000"} for i, p in enumerate(paths)}
    doc = {"format": 1, "name": "s", "time": 1, "commitLogOffset": 5, "files": files}
    data = json.dumps(doc).encode()
    return Tree(parse_manifest(data), data, "SNAPSHOT.json")


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
    seen = {}
    todo = [("", 1)]
    while todo:
        prefix, inode = todo.pop()
        assert tree.dir_path(inode) == prefix
        entries = list(tree.children(prefix))
        names = [name for _, name, _ in entries]
        assert len(names) == len(set(names)) and set(names) == want[prefix], prefix
        seen[prefix] = names
        for _, name, child in entries:
            assert tree.lookup(prefix, name) == child
            if tree.file_index(child) is None:
                todo.append((prefix + name + "/", child))
            else:
                assert tree.paths[tree.file_index(child)] == prefix + name
    assert set(seen) == set(want)
    # cookies resume where a readdir stopped
    full = list(tree.children("consumequeue/A/"))
    for k in range(len(full)):
        assert list(tree.children("consumequeue/A/", full[k][0])) == full[k + 1 :]


def test_sizes_data_ends_and_what_is_not_there():
    tree = _tree()
    i = tree.file_index(tree.lookup("commitlog/", "00000000000000000000"))
    assert (int(tree.sizes[i]), int(tree.data_end[i])) == (101, 5)  # cut at commitLogOffset
    j = tree.file_index(tree.lookup("", "SNAPSHOT.json"))
    assert j == tree.manifest_index and tree.sizes[j] == len(tree.manifest_bytes)
    for prefix, name in (("", "nope"), ("consumequeue/", "A/0"), ("consumequeue/A/", "..")):
        assert tree.lookup(prefix, name) is None
    n = len(tree)
    for inode in (0, 2 + n + 8 * 999, 2 + n + 7):  # no such file or directory
        assert tree.file_index(inode) is None and tree.dir_path(inode) is None


def test_a_name_both_file_and_directory_is_refused():
    with pytest.raises(ValueError, match="both a file and a directory"):
        _tree(["config", "config/topics.json"])
