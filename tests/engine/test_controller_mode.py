"""5.x controller-mode replicas and the 5.x checkpoint's extra fields (issue 22, section 2.6):
masterFlushedOffset and confirmPhyOffset kept, records past the confirm offset not shown,
``epochFileCheckpoint`` (and ``.bak``) and ``brokerIdentity`` never touched and carried
byte-exact by snapshots."""

from __future__ import annotations

import shutil
import struct

import pytest

from rmqfs.engine.errors import UnsupportedLayoutError
from rmqfs.engine.format.checkpoint import StoreCheckpoint
from rmqfs.engine.live.snapshot import freeze
from rmqfs.engine.store import Message, MessageStore
from rmqfs.engine.tools.verify import recover_store

EPOCH = b"2\n1734567890\n1-0\n2-4096\n"  # EpochFileCache: count, crc32, epoch-startOffset
IDENTITY = b"brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=-1\n"


def _store(root, n=3) -> list[int]:
    """A plain store with ``n`` messages in topic T; returns each record's end offset."""
    ends = []
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        for i in range(n):
            s.put_messages([Message("T", f"m{i}".encode())])
            ends.append(s.commitlog.max_offset)
    return ends


def _set_checkpoint(root, **fields) -> None:
    path = str(root / "checkpoint")
    cp = StoreCheckpoint.read(path)
    for k, v in fields.items():
        setattr(cp, k, v)
    cp.write(path)


def _bodies(root) -> list[bytes]:
    with MessageStore(str(root), read_only=True) as s:
        return [r.body for _, r in s.iter_queue("T", 0)]


def test_a_5x_checkpoint_keeps_master_flushed_offset_through_a_write(tmp_path):
    """A 5.x checkpoint's masterFlushedOffset (byte 24: set by a slave's HA client) is kept by
    an open, a write and a close, as StoreCheckpoint.flush writes back what it read; the
    confirmPhyOffset of a store not in controller mode is the end of what is durable (what
    CommitLog.getConfirmOffset returns there under SYNC_FLUSH); bytes past 40 stay zero."""
    root = tmp_path / "s"
    _store(root, 1)
    _set_checkpoint(root, master_flushed_offset=123_456)
    with MessageStore(str(root)) as s:
        s.put_messages([Message("T", b"more")])
        end = s.commitlog.max_offset
    raw = (root / "checkpoint").read_bytes()
    assert len(raw) == 4096 and raw[40:] == bytes(4056)
    assert struct.unpack(">qq", raw[24:40]) == (123_456, end)


def _controller(root) -> None:
    (root / "epochFileCheckpoint").write_bytes(EPOCH)
    (root / "epochFileCheckpoint.bak").write_bytes(EPOCH)
    (root / "brokerIdentity").write_bytes(IDENTITY)


def test_a_controller_replica_is_never_written(tmp_path):
    """A store with the controller's epoch file is one replica of a sync-state set: what rmqfs
    appended could be truncated by AutoSwitchHAClient, and moving confirmPhyOffset would
    confirm what the set never did. Every writer refuses, naming -o ro; the epoch file, its
    .bak, brokerIdentity and the checkpoint are left byte for byte."""
    root = tmp_path / "s"
    _store(root, 2)
    _controller(root)
    _set_checkpoint(root, master_flushed_offset=7, confirm_phy_offset=5)
    kept = {
        n: (root / n).read_bytes()
        for n in ("epochFileCheckpoint", "epochFileCheckpoint.bak", "brokerIdentity", "checkpoint")
    }
    with pytest.raises(UnsupportedLayoutError, match="controller-mode replica") as exc:
        MessageStore(str(root))
    assert "-o ro" in str(exc.value)
    with pytest.raises(UnsupportedLayoutError, match="controller"):
        recover_store(str(root))
    with MessageStore(str(root), read_only=True):
        pass
    assert {n: (root / n).read_bytes() for n in kept} == kept


def test_a_write_leaves_broker_identity_as_it_is(tmp_path):
    """brokerIdentity alone (no epoch file) refuses nothing and is untouched by a write."""
    root = tmp_path / "s"
    _store(root, 1)
    (root / "brokerIdentity").write_bytes(IDENTITY)
    with MessageStore(str(root)) as s:
        s.put_messages([Message("T", b"more")])
    assert (root / "brokerIdentity").read_bytes() == IDENTITY


def test_records_past_the_confirm_offset_are_not_shown(tmp_path):
    """In controller mode the broker dispatches only records wholly at or before the confirm
    offset (ReputMessageService.getReputEndOffset = CommitLog.getConfirmOffset); records its
    ConsumeQueues hold were served already and stay visible. A read-only open shows the same,
    and says how much it left out."""
    root = tmp_path / "s"
    ends = _store(root, 3)
    _controller(root)
    # ConsumeQueues hold everything: all served already, whatever the confirm offset says
    _set_checkpoint(root, confirm_phy_offset=ends[0])
    assert _bodies(root) == [b"m0", b"m1", b"m2"]
    # no ConsumeQueue yet (the broker had dispatched nothing): only confirmed records show,
    # and a record that ends past the confirm offset waits
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index", ignore_errors=True)
    _set_checkpoint(root, confirm_phy_offset=ends[2] - 1)
    assert _bodies(root) == [b"m0", b"m1"]
    with MessageStore(str(root), read_only=True) as s:
        assert s.recovery_report.unconfirmed == ends[2] - ends[1]
        assert s.recovery_report.to_json()["unconfirmedBytes"] == ends[2] - ends[1]
        assert "past confirmPhyOffset not shown" in s.recovery_report.summary()
        assert s.max_offset("T", 0) == 2
    _set_checkpoint(root, confirm_phy_offset=ends[2])
    assert _bodies(root) == [b"m0", b"m1", b"m2"]


def test_a_plain_store_shows_records_past_its_confirm_offset(tmp_path):
    """Without the epoch file the confirm offset does not limit what a consumer sees
    (CommitLog.getConfirmOffset: flushedWhere or maxOffset when not in controller mode)."""
    root = tmp_path / "s"
    ends = _store(root, 2)
    shutil.rmtree(root / "consumequeue")
    _set_checkpoint(root, confirm_phy_offset=ends[0])
    assert _bodies(root) == [b"m0", b"m1"]


def test_a_snapshot_carries_the_replica_files_byte_exact(tmp_path):
    """freeze() serves epochFileCheckpoint, its .bak and brokerIdentity byte for byte, and
    the snapshot's checkpoint keeps the replica's masterFlushedOffset and confirmPhyOffset."""
    root = tmp_path / "s"
    ends = _store(root, 2)
    _controller(root)
    _set_checkpoint(root, master_flushed_offset=ends[1], confirm_phy_offset=ends[1])
    with MessageStore(str(root), read_only=True) as s:
        snap = freeze(s, "s1")
        got = {rel: f.read(0, f.size) for rel, f in snap.files.items()}
        snap.release()
    assert got["epochFileCheckpoint"] == EPOCH
    assert got["epochFileCheckpoint.bak"] == EPOCH
    assert got["brokerIdentity"] == IDENTITY
    assert struct.unpack(">qq", got["checkpoint"][24:40]) == (ends[1], ends[1])
