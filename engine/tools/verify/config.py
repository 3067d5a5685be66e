"""verify's checks of the checkpoint (``StoreCheckpoint``) and of ``config/*.json``
(``ConfigManager.load``).
"""

from __future__ import annotations

import os
import time

from ...errors import CorruptRecordError
from ...format.config import config_parsers, load_config_file, load_config_file_only
from ...format.rocksdbconfig import load_rocksdb_config
from ...format.source import StoreSource
from .report import VerifyResult

#: the ``config/*.json`` files verify loads (each with its ``.bak``)
CONFIG_FILES = (
    "topics.json",
    "consumerOffset.json",
    "subscriptionGroup.json",
    "delayOffset.json",
    "rmqfs.deletedTopics.json",
)


def check_config(root: str, res: VerifyResult, source: StoreSource) -> None:
    """The checkpoint (``StoreCheckpoint``), a RocksDB config's databases (5.2+, local only:
    ``RocksDBConfigManager.load``) and each ``config/*.json`` (``ConfigManager.load``) read
    through ``source``: each must load; a file that loads only from its ``.bak`` is a
    warning."""
    from ...format.checkpoint import StoreCheckpoint

    try:
        cp = StoreCheckpoint.read(os.path.join(root, "checkpoint"), source)
    except CorruptRecordError as exc:
        res.add("error", "checkpoint", "checkpoint", str(exc))
    else:
        for severity, what in cp.problems(
            res.first_store_timestamp,
            res.last_store_timestamp,
            int(time.time() * 1000),
            live=res.lock_holder is not None,
        ):
            res.add(
                severity,
                "checkpoint",
                "checkpoint",
                f"{what}: damaged (rmqfs recover rewrites it from the CommitLog's last record)"
                if severity == "error"
                else f"{what}: damaged (recovery after a crash scans more of the CommitLog; "
                "rmqfs recover rewrites it)",
            )
    if source.local:
        try:  # a RocksDB config (5.2+) is what the broker loads its tables from, not the JSON
            load_rocksdb_config(os.path.join(root, "config"))
        except CorruptRecordError as exc:
            res.add(
                "error",
                "config",
                "config",
                f"RocksDB config: {exc} (the broker cannot load its topics, groups and offsets "
                "from it; rmqfs shows the JSON files beside it instead, which may be stale)",
            )
    parsers = config_parsers()
    for name in CONFIG_FILES:
        path = os.path.join(root, "config", name)
        if not source.lexists(path) and not source.lexists(path + ".bak"):
            continue
        try:
            load_config_file(path, parsers[name], source)
        except CorruptRecordError as exc:
            res.add("error", "config", f"config/{name}", f"cannot be loaded: {exc}")
            continue
        if source.lexists(path) and source.lexists(path + ".bak"):
            # The file itself must load; when only its .bak does, say so (the broker and
            # rmqfs load the .bak, so this is a warning, and the next write replaces the file).
            try:
                load_config_file_only(path, parsers[name], source)
            except CorruptRecordError as exc:
                res.add(
                    "warning", "config", f"config/{name}", f"{exc}; {name}.bak is loaded instead"
                )
