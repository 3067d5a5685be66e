"""engine/live/manifest.py: the one parser of SNAPSHOT.json (issue 36 items 5, 6, 9).

Every field's JSON type and range is checked and a bad one is one ManifestError naming
SNAPSHOT.json and the field, through every reader (parse_manifest, verify_copy, RemoteSnapshot,
download); nesting and path depth are bounded; a large but legal manifest (generated here)
costs a reader bounded memory and time, measured in a subprocess (VmHWM)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import SRC_PATH
from rmqfs.engine.errors import ManifestError, StoreError
from rmqfs.engine.live.location import open_location
from rmqfs.engine.live.manifest import MAX_MANIFEST, parse_manifest
from rmqfs.engine.live.objectstore import download_snapshot
from rmqfs.engine.live.remote import RemoteSnapshot
from rmqfs.engine.live.snapshot import verify_copy
from rmqfs.engine.service.storetree import remove_tree

CRC = "00000000"


def _doc(**over):
    doc = {
        "format": 1,
        "name": "s",
        "time": 1,
        "commitLogOffset": 0,
        "messageCount": 0,
        "queues": {"T": {"0": [0, 1]}},
        "files": {
            "commitlog/00000000000000000000": {"size": 8, "stored": 0, "crc32c": "8a4d1b6b"},
            "consumequeue/T/0/00000000000000000000": {"size": 20, "crc32c": CRC},
        },
    }
    doc.update(over)
    return doc


def _bytes(doc) -> bytes:
    return json.dumps(doc).encode()


def test_a_good_manifest_reads_compactly():
    m = parse_manifest(_bytes(_doc()))
    assert m.get("commitLogOffset") == 0 and m.get("name") == "s"
    seg = m.files["commitlog/00000000000000000000"]
    assert (seg.size, seg.stored, seg.crc32c) == (8, 0, "8a4d1b6b")
    cq = m.files["consumequeue/T/0/00000000000000000000"]
    assert cq.stored == cq.size == 20  # no stored: the whole file
    assert m.files.total_size() == 28 and len(m.files) == 2
    assert m.queues is not None and list(m.queues.rows()) == [("T", 0, 0, 1)]
    assert m.queues.span("T", 0) == (0, 1) and m.queues.span("T", 1) is None
    assert m == parse_manifest(_bytes(_doc())) != parse_manifest(_bytes(_doc(name="t")))


def _entry(**kw):
    return {"size": 8, "crc32c": CRC, **kw}


BAD = [
    # (what, document bytes, words the message must hold)
    ("commitLogOffset a list", _doc(commitLogOffset=[1]), "commitLogOffset: [1] is not an integer"),
    ("a boolean count", _doc(messageCount=True), "messageCount: True is not an integer"),
    ("a negative time", _doc(time=-1), "time: -1 is not an integer >= 0"),
    ("queue id ²", _doc(queues={"T": {"²": [0, 1]}}), "queues['T']['²']: queue id '²'"),
    ("queue id 07", _doc(queues={"T": {"07": [0, 1]}}), "queue id '07'"),
    ("queue id past an int", _doc(queues={"T": {"2147483648": [0, 1]}}), "queue id"),
    ("span not ints", _doc(queues={"T": {"0": [0, 1.5]}}), "is not [min, max]"),
    ("span min > max", _doc(queues={"T": {"0": [2, 1]}}), "is not [min, max]"),
    ("queues a list", _doc(queues=[1]), "queues: [1] is not an object"),
    ("a topic '..'", _doc(queues={"..": {"0": [0, 1]}}), "topic '..'"),
    ("size true", _doc(files={"a": _entry(size=True)}), "files['a'].size: True"),
    ("size a float", _doc(files={"a": _entry(size=8.0)}), "files['a'].size: 8.0"),
    ("size < 0", _doc(files={"a": _entry(size=-1)}), "files['a'].size: -1"),
    ("stored > size", _doc(files={"a": _entry(stored=9)}), "files['a'].stored: 9"),
    ("stored a string", _doc(files={"a": _entry(stored="1")}), "files['a'].stored: '1'"),
    ("crc32c upper case", _doc(files={"a": _entry(crc32c="0000000A")}), "files['a'].crc32c"),
    ("an entry not an object", _doc(files={"a": [8]}), "files['a']: [8] is not an object"),
    ("a path with ..", _doc(files={"config/../../x": _entry()}), "files['config/../../x']"),
    ("an absolute path", _doc(files={"/etc/passwd": _entry()}), "files['/etc/passwd']"),
    ("a 2,000-part path", _doc(files={"/".join(["d"] * 2000): _entry()}), "more than 8 parts"),
    ("file and directory", _doc(files={"a": _entry(), "a/b": _entry()}), "both a file and a dir"),
    ("the manifest itself", _doc(files={"SNAPSHOT.json": _entry()}), "files['SNAPSHOT.json']"),
    ("no files", {"name": "x"}, 'no "files" table'),
    ("not an object", [1, 2], "not a JSON object"),
    ("an entry hidden in a field", _doc(x={"size": 1, "crc32c": CRC}), "outside"),
    ("a deep unknown field", _doc(x=json.loads("[" * 20 + "]" * 20)), "x: nested deeper than 8"),
]


@pytest.mark.parametrize("what,doc,words", BAD, ids=[b[0] for b in BAD])
def test_every_bad_field_is_one_error_naming_the_manifest_and_the_field(what, doc, words):
    with pytest.raises(ManifestError) as got:
        parse_manifest(_bytes(doc))
    msg = str(got.value)
    assert msg.startswith("SNAPSHOT.json: ") and words in msg, msg
    assert isinstance(got.value, StoreError) and "\n" not in msg


@pytest.mark.parametrize(
    "data,words",
    [
        (b'{"files": {}, "name": "a" "b"}', "not JSON at byte 26"),
        (b'{"files": {}, "name": "\xff"}', "not UTF-8 at byte 23"),
        (b'{"files": {}, "x": ' + b"[" * 2000 + b"]" * 2000 + b"}", "nested deeper than 8"),
        (b'{"files": {}, "x": ' + b'{"a":' * 2000 + b"1" + b"}" * 2001, "nested deeper than 8"),
        (b'{"files": {}, "files": {}}', "files: given twice"),
        (b'{"files": {"a": {"size": 1, "size": 1, "crc32c": "00000000"}}}', "size: given twice"),
        (
            b'{"files": {"a": {"size": 1, "crc32c": "00000000"}, "a": {"size": 1, "crc32c": '
            b'"00000000"}}}',
            "files['a']: named twice",
        ),
        (b'{"files": {}, "time": ' + b"9" * 5000 + b"}", "not JSON"),
        (b" " * (MAX_MANIFEST + 1), "over 67108864 bytes"),
    ],
)
def test_bad_json_is_refused_with_the_byte_or_the_bound(data, words):
    with pytest.raises(ManifestError, match=r"^SNAPSHOT\.json: ") as got:
        parse_manifest(data)
    assert words in str(got.value), str(got.value)


def test_every_reader_gives_the_same_error(tmp_path):
    """verify_copy, RemoteSnapshot (the mount of a URI, the data source) and download: one
    ManifestError naming SNAPSHOT.json and the field, never a TypeError."""
    loc = tmp_path / "loc"
    loc.mkdir()
    (loc / "SNAPSHOT.json").write_bytes(_bytes(_doc(queues={"T": {"²": [0, 1]}})))
    want = "queues['T']['²']: queue id '²' is not a decimal"
    for read in (
        lambda: verify_copy(str(loc)),
        lambda: RemoteSnapshot(str(loc)),
        lambda: download_snapshot(*open_location(str(loc)), str(tmp_path / "d")),
    ):
        with pytest.raises(ManifestError, match=r"SNAPSHOT\.json") as got:
            read()
        assert want in str(got.value)


def test_a_deep_directory_in_a_copy_is_reported_not_walked(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "SNAPSHOT.json").write_bytes(_bytes(_doc(files={})))
    deep = copy / "junk"
    path = str(deep)
    os.mkdir(path)
    for _ in range(1100):
        path = os.path.join(path, "d")
        os.mkdir(path)
    try:
        problems = verify_copy(str(copy))[1]
        assert len(problems) == 1 and problems[0][1].startswith("extra: a directory nested deep")
    finally:
        remove_tree(str(deep))  # pytest's own cleanup (shutil.rmtree) recurses


#: A large but legal manifest (generated) read by verify_copy, RemoteSnapshot and the mount's
#: tree in a child; prints its peak RSS (VmHWM) and seconds.
_CHILD = r"""
import json, os, sys, time
kind, loc = sys.argv[1], sys.argv[2]
t = time.monotonic()
if kind == "verify":
    from rmqfs.engine.live.snapshot import verify_copy
    doc, problems = verify_copy(loc, workers=2)
    got = [len(doc.files), len(problems)]
elif kind == "remote":
    from rmqfs.engine.live.remote import RemoteSnapshot
    r = RemoteSnapshot(loc)
    got = [len(r.queue_ids("T")), r.max_offset("T", 7)]
else:
    from rmqfs.engine.live.objectstore import read_manifest
    from rmqfs.engine.live.location import open_location
    from rmqfs.engine.live.objectsource import ManifestTree
    fs, base = open_location(loc)
    m, data = read_manifest(fs, base, loc)
    got = [len(ManifestTree(m, data, "SNAPSHOT.json"))]
with open("/proc/self/status") as f:
    rss = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
print(json.dumps({"got": got, "rss_mb": rss // 1024, "s": round(time.monotonic() - t, 2)}))
"""


def _big(path, files: int, queues: int) -> int:
    """A manifest of ``files`` file entries and one topic of ``queues`` queues, compact JSON."""
    os.makedirs(path)
    with open(os.path.join(path, "SNAPSHOT.json"), "w") as f:
        f.write('{"format":1,"name":"big","time":1,"commitLogOffset":0,"messageCount":0,')
        f.write('"queues":{"T":{' + ",".join(f'"{q}":[0,{q}]' for q in range(queues)) + "}},")
        f.write('"files":{')
        f.write(",".join(f'"index/{i:020d}":{{"size":{i},"crc32c":"{CRC}"}}' for i in range(files)))
        f.write("}}")
    return os.path.getsize(os.path.join(path, "SNAPSHOT.json"))


@pytest.mark.parametrize("kind", ["verify", "remote", "tree"])
def test_a_large_legal_manifest_costs_bounded_memory_and_time(tmp_path, kind):
    """300,000 file entries and 300,000 queues (a 26 MB manifest): every reader under 500 MB
    and a few seconds (before: verify about 1 GB, a dict per entry and a future per file)."""
    loc = tmp_path / "big"
    size = _big(str(loc), 300_000, 300_000)
    env = dict(os.environ, PYTHONPATH=SRC_PATH)
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, str(loc)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    print(f"{kind}: {size:,} bytes of manifest: peak {out['rss_mb']} MB, {out['s']} s")
    assert out["rss_mb"] < 500 and out["s"] < 30, out
    if kind == "verify":
        assert out["got"] == [300_000, 300_000]  # every file missing: named, not a traceback
    elif kind == "remote":
        assert out["got"] == [300_000, 7]
