"""Offline verification and repair of a store directory (``rmqfs verify`` / ``rmqfs recover``).

The package is split by what it checks: :mod:`.commitlog` (segments, records, a DLedger
CommitLog), :mod:`.queues` (ConsumeQueue, BatchCQ and RocksDB queues), :mod:`.index`
(IndexFiles), :mod:`.config` (checkpoint and ``config/*.json``), :mod:`.store` (the run of
them all, :func:`verify_store`), :mod:`.recover` (:func:`recover_store`) and :mod:`.report`
(:class:`VerifyResult`). The files are read by the lenient readers of the format modules
(``engine.format.consumequeue.UnitFile``, ``engine.format.indexfile.scan_index_file``,
``engine.format.commitlog.walk_segment``), which report damage where the store's readers raise.

:func:`verify_store` reads the files themselves, read-only and without the store's recovery (which
would hide damage), and checks:

* CommitLog: every segment has the same size, aligned names and no gaps; every record decodes
  (magic, TOTALSIZE = ``calMsgLength``, PHYSICALOFFSET = its position, BODYCRC, and the
  ``__CRC32#`` whole-record CRC when the property is present, ``MessageDecoder.createCrc32``: all
  checked by ``engine.format.message.decode_record``); blank END_OF_FILE records; nothing but zeros
  after the last record; no hole followed by data.
* ConsumeQueue: uniform file sizes; every unit points at a real record with the same
  size, topic, queueId, queueOffset and tagsCode (deliver time for ``SCHEDULE_TOPIC_XXXX``);
  nothing after the last unit; units past the CommitLog end.
* IndexFile: geometry, header counts and offsets, every slot and item chain in range,
  every item points at a record carrying a key with that hash, and the item's timeDiff.
* config/*.json parse.

Every read goes through a store source (:mod:`engine.format.source`): the local filesystem
(:data:`engine.format.source.LOCAL`: CommitLog files memory-mapped, as before), or a snapshot in
object storage read in place (``engine.live.objectsource.ObjectSource``): listings and sizes
from its manifest, the CommitLog in range reads of :data:`.commitlog.RANGE` bytes (never a
whole segment in memory), a ConsumeQueue file, an IndexFile's parts, the config files and the
checkpoint each read whole. What makes no sense for a snapshot (its lock, its ``abort`` file,
links and special files) is skipped and said so (:attr:`VerifyResult.skipped`).

Lag (records the ConsumeQueues or IndexFiles do not cover yet) is a *warning*: the store
re-dispatches it on open, as the broker's ReputMessageService does. Everything else is an *error*.

:func:`recover_store` repairs what :func:`verify_store` finds: it extends a cut segment, truncates
the CommitLog at the first invalid record (saving any valid data it drops under
``lost+found/``), deletes damaged ConsumeQueue and IndexFile files, and lets the store re-dispatch
them from the CommitLog (``CommitLog.recoverAbnormally``); when that is not enough it rebuilds every
derived file.
"""

from .recover import RecoverReport, check_recoverable, recover_store
from .report import (
    BY_HAND,
    MAX_REPORTED_PER_FILE,
    SNAPSHOT_SKIPS,
    NotAStoreError,
    Problem,
    VerifyResult,
    check_store_dir,
)
from .store import verify_store

__all__ = [
    "BY_HAND",
    "MAX_REPORTED_PER_FILE",
    "SNAPSHOT_SKIPS",
    "NotAStoreError",
    "Problem",
    "RecoverReport",
    "VerifyResult",
    "check_recoverable",
    "check_store_dir",
    "recover_store",
    "verify_store",
]
