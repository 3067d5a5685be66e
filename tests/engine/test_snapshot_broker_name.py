"""``SNAPSHOT.json`` records the broker's name (issue 23, item 2): what the ``rocketmq`` data
source names a snapshot copy's rows by."""

from __future__ import annotations

import json

from rmqfs.engine.live.snapshot import SnapshotManager
from rmqfs.engine.store import Message, MessageStore


def test_manifest_records_the_config_broker_name(tmp_path, small_config):
    cfg = small_config
    cfg.broker_name = "broker-x"  # broker.conf's brokerName, as the mount's --config gives it
    with MessageStore(str(tmp_path / "store"), cfg) as s:
        s.create_topic("T", queue_nums=1)
        s.put_messages([Message("T", b"m")])
        manager = SnapshotManager(s)
        try:
            snap = manager.create("s1")
            doc = json.loads(manager.manifest(snap, timeout=60))
        finally:
            manager.close()
    assert doc["brokerName"] == "broker-x"
