"""``rmqfs verify s3://...`` (issue 32, item 2): a snapshot uploaded with ``rmqfs
snapshot-upload`` to a real S3 server (SeaweedFS's ``weed mini``, ``tests/s3server.py``, started
once for the module and always stopped) is verified in place, read-only, as a user runs it: the
report of its local copy, exit 0 and the OK line for a good snapshot, exit 1 naming the
damaged file for a damaged one; ``recover`` of a URI refused (exit 2); a location the server
cannot serve one line naming it, no traceback."""

import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import run_rmqfs
from rmqfs.engine.format.crc import crc32c
from rmqfs.engine.live.snapshot import MANIFEST_NAME
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from s3server import BUCKET, KEY, SECRET
from stores import snapshot_copy

SEG = 64 * 1024
CONF = (
    f"mappedFileSizeCommitLog={SEG}\nmappedFileSizeConsumeQueue=2000\n"
    "maxHashSlotNum=64\nmaxIndexNum=256\n"
)


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A snapshot copy of a store of several 64 KiB CommitLog files, two topics with keys."""
    root = tmp_path_factory.mktemp("verify-s3")
    cfg = StoreConfig(
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=2000,
        max_hash_slot_num=64,
        max_index_num=256,
    )
    with MessageStore(str(root / "store"), cfg) as s:
        s.create_topic("T", 2)
        s.create_topic("U", 1)
        s.put_messages(
            [
                Message("T" if i % 3 else "U", f"line {i} {'x' * (100 + i % 50)}".encode(),
                        tags="A" if i % 2 else None, keys=[f"k{i}"])
                for i in range(1500)
            ]
        )  # fmt: skip
        assert len(s.commitlog.files.segments) >= 3
        return snapshot_copy(s, root / "copy")


def _verify(*args) -> tuple[int, str, str]:
    res = run_rmqfs("verify", *args, check=False)
    return res.returncode, res.stdout, res.stderr


def _damage(copy: Path, dest: Path) -> str:
    """A copy of ``copy`` with one bit of a record's body flipped in its second CommitLog file,
    its manifest's sum of that file written anew (a snapshot of a damaged store, which
    snapshot-upload sends as it is). Returns the file's path in the store."""
    bad = Path(shutil.copytree(copy, dest))
    units = (bad / "consumequeue" / "T" / "0" / f"{0:020d}").read_bytes()
    off = next(o for o, _, _ in struct.iter_unpack(">qiq", units) if SEG <= o < 2 * SEG)
    seg = bad / "commitlog" / f"{off - off % SEG:020d}"
    data = bytearray(seg.read_bytes())
    data[off % SEG + 88] ^= 0x20  # V1 record, IPv4 hosts: the body starts at +88
    seg.write_bytes(bytes(data))
    doc = json.loads((bad / MANIFEST_NAME).read_text())
    doc["files"][f"commitlog/{seg.name}"]["crc32c"] = f"{crc32c(bytes(data)):08x}"
    (bad / MANIFEST_NAME).write_text(json.dumps(doc))
    return f"commitlog/{seg.name}"


def test_verify_a_snapshot_in_object_storage_in_place(aws, copy, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    uri = aws.uri("verify/good")
    run_rmqfs("snapshot-upload", copy, uri)
    rc, out, err = _verify(uri, "--config", conf)
    assert rc == 0, (out, err)
    assert out.splitlines()[-1].startswith("OK: no errors"), out
    assert "SKIPPED lock:" in out and "SKIPPED abort:" in out
    # the report of the local copy, the skipped checks aside
    lrc, lout, _ = _verify(copy, "--config", conf)
    assert lrc == 0
    assert [x for x in out.splitlines() if not x.startswith("SKIPPED")] == lout.splitlines()
    assert "CommitLog:    " in out and " 1500 records" in out
    assert KEY not in out + err and SECRET not in out + err
    doc = json.loads(_verify(uri, "--config", conf, "--json")[1])
    assert doc["ok"] and doc["records"] == 1500 and len(doc["skipped"]) == 3

    # a damaged snapshot: exit 1, the damaged file named, the same report as its local copy
    bad = tmp_path / "bad"
    rel = _damage(copy, bad)
    uri = aws.uri("verify/bad")
    run_rmqfs("snapshot-upload", bad, uri)
    rc, out, err = _verify(uri, "--config", conf)
    assert rc == 1, (out, err)
    assert f"ERROR   {rel} @ " in out and "body CRC mismatch" in out, out
    # the verdict, then what to do: recover writes local stores only
    assert out.splitlines()[-2].startswith("FAILED: "), out
    assert out.splitlines()[-1] == (
        "BY HAND: recover repairs a local store only: snapshot-download it first"
    ), out
    assert "errors" in err and "Traceback" not in err
    lrc, lout, _ = _verify(bad, "--config", conf)
    assert lrc == 1

    def findings(text: str) -> list[str]:  # the report, without what to do about it
        return [
            x.split(" (rmqfs recover")[0]
            for x in text.splitlines()
            if not x.startswith(("SKIPPED", "BY HAND"))
        ]

    assert findings(out) == findings(lout)
    assert lout.splitlines()[-1].endswith("(rmqfs recover repairs them)"), lout

    # recover writes a local store only: a URI is refused, nothing read or written
    res = run_rmqfs("recover", uri, check=False)
    assert res.returncode == 2, res
    assert "recover repairs a local store only" in res.stderr and "snapshot-download" in res.stderr

    # what the server cannot serve: one line naming it, no traceback
    rc, out, err = _verify(aws.uri("verify/none"), "--config", conf)
    assert rc == 1 and "Traceback" not in err, err
    assert "SNAPSHOT.json" in err and "verify/none" in err, err
    aws.fs().delete_file(f"{BUCKET}/verify/good/{rel}")  # an object its manifest names
    rc, out, err = _verify(aws.uri("verify/good"), "--config", conf)
    assert rc == 1 and "Traceback" not in err, err
    # (the source's own log line, "EIO reading ...", comes before it)
    last = err.splitlines()[-1]
    assert last.startswith(f"rmqfs: reading {rel} of s3://{BUCKET}/verify/good"), err
    assert "gone" in last and SECRET not in err
