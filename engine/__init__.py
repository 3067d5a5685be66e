"""rmqfs's engine: Apache RocketMQ's on-disk store (CommitLog, ConsumeQueue, IndexFile) in Python.

The public API is the names below (``from engine import MessageStore, Message, StoreConfig``);
they stay here whatever moves inside the package (docs/engine.md, "Public API"). The modules
behind them are grouped by layer, each importing only the ones before it
(tests/test_layers.py):

- ``engine.errors``: the errors, each with its errno (imported by every layer);
- ``engine.format``: the on-disk files and their primitives (records, units, IndexFiles,
  checkpoint, config/*.json, segment files, hashes, CRCs);
- ``engine.storeconfig``: ``StoreConfig``, broker.conf;
- ``engine.service``: the store's services (put, dispatch, recovery, flush, getMessage,
  cleanup, the lock, validation, the progress protocol);
- ``engine.read``: the column-wise reader (numpy, Arrow), the columns, the JSON line;
- ``engine.live``: following a live writer, snapshots, status, stats, consumer progress;
- ``engine.store``: ``MessageStore``, the façade over all of the above;
- ``engine.tools``: offline verify and recover, above the store.

Only the errors are imported with the package: every other name is imported on first use
(module ``__getattr__``), so ``import engine`` stays light (the FUSE daemon does not load numpy
or pyarrow at import; ``StoreFiles`` needs numpy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigFileError,
    CorruptRecordError,
    FlushDiskTimeoutError,
    InvalidNameError,
    MessageIllegalError,
    MessageTooLargeError,
    NoSuchGroupError,
    NoSuchSnapshotError,
    NoSuchTopicError,
    OffsetOutOfRangeError,
    PermissionDeniedError,
    PropertiesSizeExceededError,
    PutMessageError,
    ReadOnlyStoreError,
    SnapshotExistsError,
    StoreError,
    StoreLockedError,
    SystemTopicError,
    UnsafeStoreError,
)

if TYPE_CHECKING:  # what __getattr__ below returns, for type checkers and editors
    from .format.message import Message
    from .read.columnar import StoreFiles
    from .service.getmessage import GetMessageResult
    from .service.putmessage import PutResult
    from .store import MessageStore
    from .storeconfig import StoreConfig
    from .tools.verify import NotAStoreError, recover_store, verify_store

#: name -> the module that defines it, imported on first access.
_LAZY = {
    "MessageStore": "rmqfs.engine.store",
    "Message": "rmqfs.engine.format.message",
    "StoreConfig": "rmqfs.engine.storeconfig",
    "PutResult": "rmqfs.engine.service.putmessage",
    "GetMessageResult": "rmqfs.engine.service.getmessage",
    "StoreFiles": "rmqfs.engine.read.columnar",
    "verify_store": "rmqfs.engine.tools.verify",
    "recover_store": "rmqfs.engine.tools.verify",
    "NotAStoreError": "rmqfs.engine.tools.verify",
}

__all__ = [
    # the store and its requests and results
    "MessageStore",
    "Message",
    "StoreConfig",
    "PutResult",
    "GetMessageResult",
    # the column-wise reader (numpy, pyarrow)
    "StoreFiles",
    # offline tools
    "verify_store",
    "recover_store",
    # errors (engine/errors.py): every one is a StoreError and carries its errno
    "StoreError",
    "CorruptRecordError",
    "ConfigFileError",
    "PutMessageError",
    "MessageIllegalError",
    "MessageTooLargeError",
    "PropertiesSizeExceededError",
    "InvalidNameError",
    "NoSuchTopicError",
    "NoSuchGroupError",
    "SystemTopicError",
    "PermissionDeniedError",
    "OffsetOutOfRangeError",
    "ReadOnlyStoreError",
    "StoreLockedError",
    "FlushDiskTimeoutError",
    "SnapshotExistsError",
    "NoSuchSnapshotError",
    "UnsafeStoreError",
    "NotAStoreError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
