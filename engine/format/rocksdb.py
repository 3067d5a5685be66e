"""Opening a broker's RocksDB database read-only, without writing a byte into the store.

RocketMQ 5.2+ keeps ConsumeQueues (``RocksDBConsumeQueueStore``, ``consumequeue/``) and, with
the same switch or ``configManagerVersion=v2``, its topics, groups and offsets
(``ConfigRocksDBStorage``, ``config/topics/`` ...; ``ConfigStorage``, ``config/rdb/``) in
RocksDB databases. They are read through rocksdict (RocksDB's own reader; never a hand-made
one), opened read-only: a read-only open takes no ``LOCK``, so a database a running broker
holds is read as it was at the open (its SST files, MANIFEST and WAL replayed in memory).

rocksdict writes ``rocksdict-config.json`` into the directory it opens, and RocksDB its info
``LOG``; a store must not change when it is read (a read-only mount, a store on a read-only
disk, a backup being taken). So the database is opened through a private shadow directory
(``tempfile.mkdtemp``) holding symbolic links to the database's files (``CURRENT``,
``MANIFEST-*``, ``OPTIONS-*``, ``*.sst``, ``*.log``): what the open writes goes there.

Corrupt input (a database RocksDB cannot open, a key or value of the wrong shape) raises
:class:`engine.errors.CorruptRecordError`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError

if TYPE_CHECKING:
    from rocksdict import Rdict

#: ``AbstractRocksDBStorage.CTRL_0/1/2``: the separators of RocketMQ's RocksDB keys.
CTRL_0 = 0x00
CTRL_1 = 0x01
CTRL_2 = 0x02

# files RocksDB writes and a read-only open does not need (or would rewrite): not linked
_NOT_LINKED = ("LOCK", "LOG", "rocksdict-config.json")


def is_rocksdb_dir(names: Iterable[str]) -> bool:
    """Whether a directory listing ``names`` is a RocksDB database: a ``CURRENT`` file and a
    ``MANIFEST-*`` (``DBImpl``'s layout; what RocketMQ's ``AbstractRocksDBStorage`` opens)."""
    names = list(names)
    return "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)


def is_rocksdb_file(name: str) -> bool:
    """Whether ``name`` is one of RocksDB's own files (``CURRENT``, ``IDENTITY``, ``LOCK``,
    ``LOG*``, ``MANIFEST-*``, ``OPTIONS-*``, ``*.sst``, ``*.log``, ``*.blob``): what a
    double-write broker (``rocksdbCQDoubleWriteEnable``: its RocksDB ConsumeQueue shares
    ``consumequeue/`` with the topic directories) puts beside the topic directories."""
    return (
        name in ("CURRENT", "IDENTITY", "LOCK", "rocksdict-config.json")
        or name.startswith(("LOG", "MANIFEST-", "OPTIONS-"))
        or name.endswith((".sst", ".log", ".blob", ".dbtmp"))
    )


class ReadOnlyDB:
    """A RocksDB database opened read-only through a shadow directory (module docstring).

    Args:
        path: the database directory (``consumequeue/``, ``config/topics/`` ...).

    Attributes:
        families: ``{column family name: rocksdict Rdict}``, every family of the database
            (``DB::ListColumnFamilies``), keys and values as bytes (``raw_mode``).

    Raises:
        CorruptRecordError: RocksDB cannot open it (names the path and RocksDB's reason).
    """

    def __init__(self, path: str):
        from rocksdict import AccessType, Options, Rdict

        self.path = path
        self._shadow = tempfile.mkdtemp(prefix="rmqfs-rocksdb-")
        self._db = None
        try:
            for name in os.listdir(path):
                if name in _NOT_LINKED or name.startswith("LOG"):
                    continue
                src = os.path.join(path, name)
                if os.path.isfile(src):
                    os.symlink(src, os.path.join(self._shadow, name))
            opts = Options(raw_mode=True)
            opts.create_if_missing(False)
            try:
                names = Rdict.list_cf(self._shadow, opts)
                self._db = Rdict(
                    self._shadow,
                    opts,
                    column_families={n: Options(raw_mode=True) for n in names if n != "default"},
                    access_type=AccessType.read_only(),
                )
            except Exception as exc:  # noqa: BLE001 - rocksdict raises Exception for a Status
                raise CorruptRecordError(f"{path}: RocksDB cannot open it: {exc}") from None
            self.families = {
                n: (self._db if n == "default" else self._db.get_column_family(n)) for n in names
            }
        except BaseException:
            self.close()
            raise

    def family(self, name: str) -> Rdict:
        """The column family ``name`` (raw mode: bytes keys and values); CorruptRecordError
        when the database has none."""
        try:
            return self.families[name]
        except KeyError:
            raise CorruptRecordError(f"{self.path}: no column family {name!r}") from None

    def close(self) -> None:
        """Close the database and remove the shadow directory."""
        if self._db is not None:
            try:
                self._db.close()
            except Exception:  # noqa: BLE001 - already closed
                pass
            self._db = None
        shutil.rmtree(self._shadow, ignore_errors=True)
