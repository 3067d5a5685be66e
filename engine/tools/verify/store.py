""":func:`verify_store`: every check of a store, in order (CommitLog, ConsumeQueues, IndexFiles,
config, the 5.x timer store), read-only and without the store's recovery.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ...format.dledger import DIR_PREFIX, open_dledger
from ...format.source import LOCAL, StoreSource
from ...service.lock import lock_holder
from ...service.storetree import foreign_layouts, unsafe_entries
from ...service.workprogress import no_progress
from .commitlog import Records, check_segments, forget_deleted_topics, scan_commitlog, scan_dledger
from .config import check_config
from .index import check_index_files
from .queues import check_consume_queues
from .report import SNAPSHOT_SKIPS, VerifyResult, check_store_dir
from .timer import check_timer_store

if TYPE_CHECKING:
    from ...service.workprogress import ProgressFactory
    from ...storeconfig import StoreConfig


def verify_store(
    root: str,
    config: StoreConfig | None = None,
    progress: ProgressFactory | None = None,
    check_index: bool = True,
    source: StoreSource = LOCAL,
) -> VerifyResult:
    """Verify every file of the store at ``root`` without writing anything (what the broker's
    recovery checks, ``CommitLog.checkMessageAndReturnSize``, ``ConsumeQueue.recover``,
    ``IndexFile.load``, without its repairs).

    Args:
        root: the store directory (for a source that is not local, its
            :attr:`engine.format.source.StoreSource.root`).
        config: a :class:`engine.store.StoreConfig` (segment sizes for a new file, index
            geometry, delay levels); default settings when None.
        progress: a progress factory, ``progress(total, desc, unit) -> bar``
            (:mod:`engine.service.workprogress`; tqdm's shape): one bar per phase (CommitLog bytes,
            ConsumeQueue queues, IndexFile files).
        check_index: check the IndexFiles too.
        source: where every file is read from (:mod:`engine.format.source`): the local
            filesystem, or a snapshot in object storage read in place (CommitLog files in
            ranges of :data:`.commitlog.RANGE` bytes); for the latter, the checks of a live
            directory (lock, ``abort``, links) are skipped and listed in
            :attr:`VerifyResult.skipped`.

    Returns:
        A :class:`VerifyResult`.

    Raises:
        NotAStoreError: ``root`` is not a store.
        ObjectStoreError: object storage could not be read (names the object); a file whose
            sum differs from its manifest's raises CorruptRecordError naming it.
    """
    from ...store import StoreConfig

    if source.local:
        root = os.path.abspath(root)
    check_store_dir(root, source)
    cfg = config or StoreConfig()
    progress = progress or no_progress
    res = VerifyResult(root)
    res.explicit_config = config is not None
    if not source.local:
        res.skipped.extend(SNAPSHOT_SKIPS)
    bad = unsafe_entries(root) if source.local else []
    if bad:
        # Nothing is read through a link or from a special file: the store is refused whole.
        for entry in bad:
            res.add(
                "error",
                "unsafe",
                entry.split(" (")[0],
                f"{entry}: a store holds only regular files and directories; rmqfs refuses "
                "to open it until this is removed",
            )
        return res
    unreadable = False
    for f in foreign_layouts(root, source):
        if f.refuses_read:
            unreadable = True
            res.add(
                "error",
                "layout",
                f.path,
                f"{f.what}: rmqfs cannot read this store yet (and never writes it)",
            )
        elif f.path.startswith(DIR_PREFIX):
            pass  # a DLedger CommitLog: read below, entry by entry
        elif f.refuses_write:
            res.add(
                "warning",
                "layout",
                f.path,
                f"{f.what}: rmqfs reads it but refuses to write this store (the broker "
                "would misread what it appends)"
                if f.what.startswith("RocksDB")
                else f"{f.what}: rmqfs reads the plain layout beside it but refuses to write "
                "this store (the broker would misread what it appends)",
            )
    if unreadable:
        return res
    res.lock_holder = lock_holder(root, others_only=True) if source.local else None
    if source.local and res.lock_holder is None and source.lexists(os.path.join(root, "abort")):
        res.add(
            "warning",
            "abort",
            "abort",
            "the store was not shut down cleanly (a broker or "
            "mount stopped without closing it); opening it runs the broker's abnormal "
            "recovery",
        )
    segs = check_segments(root, cfg, res, source)
    recs = Records()
    try:
        dledger = open_dledger(root, source)
        if dledger is None:
            scan_commitlog(segs, cfg, res, recs, progress)
        else:
            scan_dledger(dledger, segs, cfg, res, recs, progress)
        forget_deleted_topics(root, recs, source)
        check_consume_queues(root, res, recs, cfg, progress, source)
        if check_index and cfg.message_index_enable:
            check_index_files(root, segs, res, recs, cfg, progress, source)
        check_config(root, res, source)
        check_timer_store(root, res, recs, cfg, source)
    finally:
        if segs:
            segs[0].files.close()  # one reader for all of them
    return res
