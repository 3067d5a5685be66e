"""A RocksDB store (RocketMQ 5.2+, tests/rocksdbstore.py) through a real read-only mount: its
queue files and JSON lines equal the plain store's it was converted from; a read-write
mount is refused."""

from __future__ import annotations

import pytest

from conftest import fuse, run_rmqfs
from rmqfs.engine import Message
from rmqfs.engine.store import MessageStore
from rocksdbstore import write_config_v1, write_rocksdb_cq
from stores import copy_store

pytestmark = [fuse, pytest.mark.fuse]


def test_a_read_only_mount_of_a_rocksdb_store_shows_the_plain_store_s_messages(
    tmp_path, mount_store
):
    plain = tmp_path / "plain"
    with MessageStore(str(plain)) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"m%d" % i + bytes(range(256)), tags="a") for i in range(9)])
    rdb = tmp_path / "rdb"
    copy_store(plain, rdb)
    write_rocksdb_cq(rdb)
    write_config_v1(rdb)
    mp = mount_store(plain, "ro", name="mp")
    try:
        want = {
            q: (mp.mnt / "topics" / "T" / q / "messages.jsonl").read_bytes() for q in ("0", "1")
        }
        want_view = sorted(p.name for p in (mp.mnt / "view").rglob("*") if p.is_file())
    finally:
        mp.umount()
    m = mount_store(rdb, "ro")
    try:
        for q, data in want.items():
            assert (m.mnt / "topics" / "T" / q / "messages.jsonl").read_bytes() == data
            assert data.count(b"\n") in (4, 5)
        got_view = sorted(p.name for p in (m.mnt / "view").rglob("*") if p.is_file())
        assert got_view == want_view
        status = (m.mnt / "status.json").read_text()
        assert "RocksDB ConsumeQueues" in status
    finally:
        m.umount()
    (tmp_path / "rw").mkdir()
    res = run_rmqfs("mount", str(rdb), str(tmp_path / "rw"), check=False, timeout=60)
    assert res.returncode != 0 and "-o ro" in res.stderr
