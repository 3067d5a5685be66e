""":func:`recover_store` (``rmqfs recover``): repairs what :func:`verify_store` finds; the CommitLog
is extended and truncated through the engine's file queue (``CommitLog.truncate``:
:class:`engine.format.mappedfile.FileQueue`), never by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import ConfigFileError, CorruptRecordError, StoreError
from ...format.commitlog import CommitLog
from ...format.consumequeue import queue_dir_id
from ...format.consumequeue import store_file_size as cq_store_file_size
from ...format.indexfile import index_geometry, read_index_header
from ...format.mappedfile import extend_with_zeros, fsync_dir, fsync_file
from ...service.lock import StoreLock, release_store_lock, take_store_lock
from ...service.storetree import check_layout, check_store_tree, remove_tree, walk_tree
from .listing import index_names, segment_files
from .report import VerifyResult, check_store_dir
from .store import verify_store

if TYPE_CHECKING:
    from ...service.workprogress import ProgressFactory
    from ...store import MessageStore
    from ...storeconfig import StoreConfig


@dataclass
class RecoverReport:
    """What :func:`recover_store` did, as human-readable lines, and the final verification."""

    actions: list[str] = field(default_factory=list)
    before: VerifyResult | None = None
    after: VerifyResult | None = None


def check_recoverable(root: str, config: StoreConfig) -> None:
    """Raise UnsupportedLayoutError (naming what and what to do) when :func:`recover_store`
    must not write the store at ``root``: a layout rmqfs does not write
    (``storetree.check_layout``: DLedger, RocksDB, controller mode...), or ``config``'s
    broker.conf settings saying the broker expects another kind of store or keeps its files
    elsewhere (``StoreConfig.check_layout_settings``). verify's advice asks it too."""
    check_layout(root, read_only=False)
    config.check_layout_settings(root, read_only=False)


def recover_store(
    root: str,
    config: StoreConfig | None = None,
    progress: ProgressFactory | None = None,
    rebuild: bool = False,
) -> RecoverReport:
    """Repair the store at ``root`` so that :func:`verify_store` passes.

    ``progress``: a progress factory (:mod:`engine.service.workprogress`) for the verifications and
    the store's recovery.

    Steps: extend CommitLog files that were cut short (zeros); truncate the CommitLog at the
    first invalid record, like the broker's recovery (valid records after it are copied to
    ``lost+found/<time>/`` first); delete ConsumeQueues and IndexFiles with errors (all of them
    with ``rebuild``); open the store, whose recovery re-dispatches what the derived files lack;
    verify; if errors or lag remain, rebuild every derived file and verify again.

    Raises:
        UnsupportedLayoutError: a layout rmqfs does not write, in the store or in ``config``'s
            broker.conf settings: nothing is touched.
        StoreLockedError: a broker or mount holds the store (names its pid).
        NotAStoreError: ``root`` is not a store.
        StoreError: a damage this cannot repair (e.g. a CommitLog file missing in the middle).
    """
    from ...store import MessageStore, StoreConfig

    root = os.path.abspath(root)
    check_store_dir(root)
    cfg = config or StoreConfig()
    report = RecoverReport()
    check_store_tree(root)  # links and special files: refused, never repaired through
    check_recoverable(root, cfg)  # before anything is deleted
    if config is None:  # the files it rebuilds take the sizes of those they replace
        cfg = _store_geometry(root, cfg)
    lock = take_store_lock(root)
    try:
        before = verify_store(root, config, progress)
        report.before = before
        if not before.problems and not before.suppressed and not rebuild:
            report.actions.append("nothing to repair")
            report.after = before
            return report
        for p in before.errors:  # the kinds of BY_HAND (unsafe ones are refused above)
            if p.kind in ("commitlog-gap", "commitlog-name", "commitlog-oversize"):
                raise StoreError(f"cannot repair {p.path}: {p.what}")
            if p.kind == "config":
                # offsets and topics are not derived data: nothing is changed, the operator
                # restores the file (or its .bak)
                raise ConfigFileError(f"cannot repair {p.path}: {p.what}")
            if p.kind == "timer":  # the waiting timed messages are not derived data either
                raise StoreError(f"cannot repair {p.path}: {p.what}")
        for path, size in sorted(before.bad_segment_sizes.items()):
            if size > before.segment_size:
                raise StoreError(
                    f"cannot repair {path}: {size} bytes, larger than the "
                    f"{before.segment_size}-byte segments"
                )
            extend_with_zeros(path, before.segment_size)
            report.actions.append(
                f"extended {os.path.relpath(path, root)} from {size} to "
                f"{before.segment_size} bytes with zeros"
            )
        for path in before.empty_files:
            os.unlink(path)
            report.actions.append(
                f"deleted {os.path.relpath(path, root)} (empty: a crash while it was created)"
            )
        if before.bad_segment_sizes or before.empty_files:
            before = verify_store(root, config, progress)
        saved_checkpoint = None
        try:
            with open(os.path.join(root, "checkpoint"), "rb") as f:
                saved_checkpoint = f.read()
        except FileNotFoundError:
            pass
        cut = before.first_bad
        if cut is not None:
            _truncate_commitlog(root, before, cut, report)
        derived = list(before.bad_queues)
        if rebuild:
            derived = _all_queue_dirs(root)
        for rel in sorted(derived):
            _delete_files(os.path.join(root, rel), segment_files(os.path.join(root, rel)))
            report.actions.append(f"deleted {rel} (rebuilt from the CommitLog)")
        index_dir = os.path.join(root, "index")
        bad_index = sorted(before.bad_index_files)
        if rebuild:
            bad_index = [f"index/{n}" for n in index_names(index_dir)]
        if bad_index:
            first_bad = min(os.path.basename(r) for r in bad_index)
            for n in index_names(index_dir):
                if n >= first_bad:
                    victim = os.path.join(index_dir, n)
                    remove_tree(victim)
                    report.actions.append(f"deleted index/{n} (rebuilt from the CommitLog)")
        _force_full_redispatch(root)
        _reopen(root, cfg, MessageStore, lock, report, progress)
        after = verify_store(root, config, progress)
        if not after.ok or any(p.kind.endswith(("lag", "missing")) for p in after.problems):
            report.actions.append(
                "derived files still disagree: rebuilding every ConsumeQueue "
                "and IndexFile from the CommitLog"
            )
            for rel in _all_queue_dirs(root):
                _delete_files(os.path.join(root, rel), segment_files(os.path.join(root, rel)))
            _delete_files(index_dir, index_names(index_dir))
            _reopen(root, cfg, MessageStore, lock, report, progress)
            after = verify_store(root, config, progress)
        report.after = after
        if after.ok:
            _sync_and_checkpoint(root, after)
        elif saved_checkpoint is not None:  # leave the broker's own checkpoint as it was
            with open(os.path.join(root, "checkpoint"), "wb") as f:
                f.write(saved_checkpoint)
        return report
    finally:
        release_store_lock(lock)


def _delete_files(directory: str, names: list[str]) -> None:
    """Delete the derived files (ConsumeQueue or IndexFile) ``names`` in ``directory``; a
    directory in the place of one (damage) goes too."""
    for n in names:
        p = os.path.join(directory, n)
        remove_tree(p)  # a directory in its place too, at any depth


def _store_geometry(root: str, cfg: StoreConfig) -> StoreConfig:
    """``cfg`` with the store's own ConsumeQueue file size and IndexFile geometry where its
    files show them (:func:`engine.format.consumequeue.store_file_size`, the most common index
    file size by :func:`engine.format.indexfile.index_geometry`): without a broker.conf, the
    files ``recover`` deletes are rebuilt at the sizes of those they replace, not at
    StoreConfig's defaults, so a broker configured as the store was still loads them
    (RocketMQ maps every ConsumeQueue and IndexFile at its configured size)."""
    size, _ = cq_store_file_size([os.path.join(root, rel) for rel in _all_queue_dirs(root)])
    if size and size != cfg.mapped_file_size_consume_queue:
        cfg = dataclasses.replace(cfg, mapped_file_size_consume_queue=size)
    index_dir = os.path.join(root, "index")
    sizes: dict[int, int] = {}
    for n in index_names(index_dir):
        with contextlib.suppress(OSError):
            fsize = os.path.getsize(os.path.join(index_dir, n))
            sizes[fsize] = sizes.get(fsize, 0) + 1
    if sizes:
        common = max(sizes, key=lambda k: (sizes[k], k))
        with contextlib.suppress(CorruptRecordError):
            slots, num = index_geometry(common, cfg.max_hash_slot_num, cfg.max_index_num)
            if (slots, num) != (cfg.max_hash_slot_num, cfg.max_index_num):
                cfg = dataclasses.replace(cfg, max_hash_slot_num=slots, max_index_num=num)
    return cfg


def _all_queue_dirs(root: str) -> list[str]:
    base = os.path.join(root, "consumequeue")
    out = []
    if os.path.isdir(base):
        for t in sorted(os.listdir(base)):
            tdir = os.path.join(base, t)
            if os.path.isdir(tdir):
                out += [
                    f"consumequeue/{t}/{q}"
                    for q in sorted(os.listdir(tdir))
                    if queue_dir_id(q) is not None and os.path.isdir(os.path.join(tdir, q))
                ]
    return out


def _force_full_redispatch(root: str) -> None:
    """Make the next open re-dispatch the whole CommitLog (idempotently): the broker's abnormal
    recovery (``abort`` present) from the first file, since no file is older than a checkpoint
    whose CommitLog and ConsumeQueue timestamps are 0. indexMsgTimestamp is kept, so only the
    IndexFiles written after it are rebuilt."""
    from ...format.checkpoint import StoreCheckpoint

    path = os.path.join(root, "checkpoint")
    try:
        cp = StoreCheckpoint.read(path)
    except CorruptRecordError:
        cp = StoreCheckpoint()  # rewritten from the data at the end of the recovery
    cp.physic_msg_timestamp = 0
    cp.logics_msg_timestamp = 0
    # Keep the IndexFiles: verify vouched for them (damaged ones are gone already); records
    # after the newest one's endPhyOffset are indexed by the re-dispatch.
    cp.index_msg_timestamp = 2**62
    cp.write(path)
    with open(os.path.join(root, "abort"), "w") as f:
        f.write(str(os.getpid()))


def _sync_and_checkpoint(root: str, res: VerifyResult) -> None:
    """fsync the rebuilt derived files, then write a checkpoint that vouches for them: CommitLog
    and ConsumeQueue timestamps = the last record's store time, indexMsgTimestamp = the newest
    IndexFile's endTimestamp, confirmPhyOffset = the end of the CommitLog."""
    from ...format.checkpoint import StoreCheckpoint

    for sub in ("consumequeue", "index"):
        for dirpath, _dirs, files, _depth in walk_tree(os.path.join(root, sub)):
            for name in files:
                fsync_file(os.path.join(dirpath, name))
            fsync_dir(dirpath)
    index_ts = 0
    names = index_names(os.path.join(root, "index"))
    if names:
        head = read_index_header(os.path.join(root, "index", names[-1]))
        if head is not None:
            index_ts = head[1]  # endTimestamp
    path = os.path.join(root, "checkpoint")
    cp = StoreCheckpoint.read(path)
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = res.last_store_timestamp
    cp.index_msg_timestamp = index_ts
    cp.confirm_phy_offset = res.commitlog_end
    cp.write(path)


def _reopen(
    root: str,
    cfg: StoreConfig,
    store_cls: type[MessageStore],
    lock: StoreLock,
    report: RecoverReport,
    progress: ProgressFactory | None = None,
) -> None:
    """Open the store for writing under recover's lock ``lock`` (its recovery
    re-dispatches; ``progress`` shows how far) and close it cleanly; the lock stays held.
    What that recovery did is one line of ``report.actions``. The close writes the
    checkpoint from the data even when the open re-dispatched nothing: the one on disk is
    :func:`_force_full_redispatch`'s, written only to steer this open."""
    store = store_cls(root, cfg, held_lock=lock, progress=progress)
    try:
        store.flusher.note_data_moved()
        rec = store.recovery_report
        if rec is not None and rec.did_something():
            report.actions.append(f"opened the store: {rec.summary()}")
    finally:
        store.close()


def _truncate_commitlog(root: str, res: VerifyResult, cut: int, report: RecoverReport) -> None:
    """Drop the CommitLog from ``cut`` on, as the broker's recovery does
    (``CommitLog.truncate``: ``MappedFileQueue.truncateDirtyFiles``, the files after the one
    holding ``cut`` deleted and that one zeroed from ``cut``); valid records after it are
    saved under lost+found/ first (fsynced before anything is cut). The zeroed file is
    fsynced, then the directory."""
    cl_dir = os.path.join(root, "commitlog")
    fs = res.segment_size
    names = segment_files(cl_dir)
    dropped_records = res.records_after_bad
    if dropped_records or res.data_after_bad:
        dest = os.path.join(root, "lost+found", time.strftime("%Y%m%d%H%M%S"), "commitlog")
        os.makedirs(dest, exist_ok=True)
        for n in names:
            if int(n) + fs > cut:
                shutil.copyfile(os.path.join(cl_dir, n), os.path.join(dest, n))
                fsync_file(os.path.join(dest, n))  # the copy is durable before the cut
        d = dest
        while d != root:  # commitlog/, <time>/, lost+found/ and their names
            fsync_dir(d)
            d = os.path.dirname(d)
        fsync_dir(root)
        report.actions.append(
            f"copied the CommitLog files from offset {cut - cut % fs} to "
            f"{os.path.relpath(dest, root)} (they hold {dropped_records} "
            "valid records"
            + (" and other data" if res.data_after_bad else "")
            + " after the damage, which recovery drops)"
        )
    commitlog = CommitLog(cl_dir, fs)
    # what opening the file queue for writing repaired (a half-created file, a gap, a short
    # file: MappedFileQueue.load's rules) is part of what recover did
    report.actions.extend(f"CommitLog: {r}" for r in commitlog.files.repairs)
    try:
        before = commitlog.segment_count
        commitlog.truncate(cut)
        removed = before - commitlog.segment_count
        commitlog.files.sync_file(cut)
    finally:
        commitlog.close()
    if os.path.isdir(cl_dir):
        fsync_dir(cl_dir)
    report.actions.append(
        f"truncated the CommitLog at offset {cut} (zeroed the rest of its "
        f"file" + (f", deleted {removed} later files)" if removed else ")")
    )
