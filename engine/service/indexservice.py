"""IndexService: the store's key index over the IndexFiles of ``index/`` (RocketMQ
``IndexService`` in ``store/.../index/``): loads and drops files after a crash, dispatches keys,
rolls to a new file when one is full, cuts them when the CommitLog is cut, deletes expired ones
and answers queries across files, with many readers and one writer (:class:`_RWLock`). Each
file's bytes are :mod:`engine.format.indexfile`'s.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..errors import CorruptRecordError, StoreError
from ..format.indexfile import (
    DEFAULT_HASH_SLOT_NUM,
    DEFAULT_INDEX_NUM,
    INDEX_FILE_NAME,
    LONG_MAX,
    MAX_MSGS_NUM_BATCH,
    IndexCheck,
    IndexFile,
    IndexInPlace,
    build_key,
    check_geometry,
    index_file_name,
    name_after,
    record_entries,
    topic_prefix_hash,
)
from ..format.javahash import index_key_hash
from ..format.mappedfile import fsync_dir
from ..format.message import TRANSACTION_ROLLBACK_TYPE
from ..format.source import LOCAL, StoreSource

if TYPE_CHECKING:
    from .dispatch import DispatchRequest

log = logging.getLogger(__name__)
_UNLOADED = object()  # (the writer not asked for yet)

#: Entries (keys) a put of this many or fewer hands :meth:`IndexService.put_hashed` wait in
#: memory (a single put's UNIQ_KEY and keys, a small batch's) until :data:`PENDING_ENTRIES`
#: have gathered, or anything reads or changes the files: they are then written in one compiled
#: call, as RocketMQ's ReputMessageService builds the index behind the CommitLog (a batch of 16
#: with a compiled call of its own: 55-61 against 50 us).
FEW_ENTRIES = 64
#: Pending entries written at once (:meth:`IndexService.put_hashed`).
PENDING_ENTRIES = 256
#: Pending entries are written by the put that comes this long (ms of store time) after the
#: oldest of them, so a writer that keeps putting never leaves them waiting longer; the
#: store's flush thread writes them every round (``flushIntervalCommitLog``) in any case.
PENDING_MS = 100
#: One int64 of the pending entries (native order: keyHash, phyOffset and storeTimestamp of
#: each entry one after another, as ``array("q")`` and the compiled single put hold them).
_INT64 = struct.Struct("=q")


class _RWLock:
    """Many readers or one writer (``ReentrantReadWriteLock`` without reentrancy).

    A waiting writer blocks new readers, so a stream of queries cannot starve it.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class IndexService:
    """The ``index/`` directory: builds and queries the key index (``IndexService``).

    Args:
        index_dir: ``<storeRoot>/index`` (created on the first key).
        hash_slot_num, index_num: ``maxHashSlotNum`` / ``maxIndexNum`` for new files.
        read_only: never write or delete; keys dispatched while read-only go to in-memory files
            (anonymous mappings) appended after the on-disk ones, so queries also cover records
            a read-only store had to index itself.
        max_msgs_num_batch: the cap on one query (``maxMsgsNumBatch``).
        timestamp_of: CommitLog offset -> the record's STORETIMESTAMP (epoch ms) or None; gives
            :meth:`truncate` the exact endTimestamp of a cut file (:func:`cut_index`).

    Existing files (17-digit names) are opened in name order; zero-length ones are deleted
    (skipped when read-only), other names ignored. ``files`` is the list, oldest first.

    Threads: :meth:`dispatch`, :meth:`truncate`, :meth:`delete_expired`, :meth:`flush` and
    :meth:`close` are serialised by an internal lock (the store calls dispatch under its put
    lock anyway); :meth:`query` may run in other threads at the same time. Deleting or closing
    files waits for running queries.

    Raises:
        CorruptRecordError: an index file whose size fits no geometry.
    """

    # Dispatcher capabilities (engine.service.dispatch): the fast put path hands it pre-hashed keys
    # (put_hashed), and it ignores records below end_phy_offset, so recovery may skip them.
    puts_hashed_keys = True
    skips_below_end_offset = True

    def __init__(
        self,
        index_dir: str,
        hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
        index_num: int = DEFAULT_INDEX_NUM,
        read_only: bool = False,
        *,
        max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH,
        timestamp_of: Callable[[int], int | None] | None = None,
        source: StoreSource = LOCAL,
        load_writer: Callable[[], IndexInPlace | None] | None = None,
    ):
        check_geometry(hash_slot_num, index_num)
        self.timestamp_of = timestamp_of
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.read_only = read_only
        self.max_msgs_num_batch = max_msgs_num_batch
        self.files: list[IndexFile] = []
        # entries of recent single puts not written yet (flat keyHash, phyOffset,
        # storeTimestamp, in CommitLog order, as native int64: _INT64): see put_hashed. A
        # bytearray, so that the compiled single put appends to it too (lane_state)
        self._pending = bytearray()
        # the buffer and its limits (taken at open), what put_hashed and the compiled single
        # put both go by
        self._lane_state = (self._pending, FEW_ENTRIES, PENDING_ENTRIES, PENDING_MS)
        # the compiled core's writer into a file's mapping, loaded at the first write (None:
        # none, Python's steps write); every write of this service goes through it, so the
        # slot tables Python's steps keep are never behind a file
        self._load_writer = load_writer
        self._writer: IndexInPlace | object | None = _UNLOADED
        self._topic_hashes: dict[str, int] = {}  # topic -> hash of "topic#"
        self._mutex = threading.RLock()
        self._rw = _RWLock()
        names = []
        if source.isdir(index_dir):
            names = sorted(
                n
                for n in source.listdir(index_dir)
                if INDEX_FILE_NAME.fullmatch(n) and source.isfile(os.path.join(index_dir, n))
            )
        try:
            for n in names:
                path = os.path.join(index_dir, n)
                if source.file_size(path) == 0:  # created but never sized (crash)
                    if not read_only:
                        os.unlink(path)
                    continue
                self.files.append(
                    IndexFile(path, hash_slot_num, index_num, read_only=read_only, source=source)
                )
        except BaseException:
            for f in self.files:
                f.close()
            raise

    @contextmanager
    def frozen(self) -> Iterator[list[IndexFile]]:
        """Hold off every change to the index files (puts, truncation, rolling, deletion)
        while the block runs; yields the list of files (a snapshot freezes them)."""
        with self._mutex:
            self._write_pending()
            yield self.files

    # -- load ---------------------------------------------------------------------------------
    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> list[str]:
        """``IndexService.load``: after an abnormal exit, destroy every file whose endTimestamp
        is later than the checkpoint's ``indexMsgTimestamp`` (epoch ms); re-dispatching the
        CommitLog from :attr:`end_phy_offset` rebuilds them. Read-only: the files are only
        dropped from the list (and closed), not deleted.

        Returns:
            The names of the files dropped.
        """
        if last_exit_ok:
            return []
        with self._mutex, self._rw.write():
            keep, dropped = [], []
            for f in self.files:
                if f.end_timestamp > index_msg_timestamp:
                    f.destroy()
                    dropped.append(f.name)
                else:
                    keep.append(f)
            self.files = keep
        return dropped

    def drop_inconsistent(
        self, newest: int = 2, quick: bool = False, check: IndexCheck | None = None
    ) -> list[tuple[str, str]]:
        """After an abnormal exit: check the ``newest`` files (those a crash or a live copy
        can have caught mid-write) with :meth:`IndexFile.structure_problem`; the first
        inconsistent one and every newer one are destroyed (dropped only, when read-only), so
        recovery's re-dispatch from :attr:`end_phy_offset` rebuilds their entries from the
        CommitLog. RocketMQ's ``IndexService.load`` trusts a file whose endTimestamp is not
        past the checkpoint; a file copied while written can pass that test and still be torn.
        ``quick``: check only the header against the file and its slots
        (:meth:`IndexFile.header_problem`), what a writable open does after a clean exit.
        ``check``: what finds the problems of the whole file (:data:`IndexCheck`, the
        compiled core's; numpy's by default).

        Returns:
            ``(name, problem)`` of each file dropped.
        """
        with self._mutex, self._rw.write():
            first_bad = None
            for i in range(max(0, len(self.files) - newest), len(self.files)):
                f = self.files[i]
                problem = f.header_problem() if quick else f.structure_problem(check)
                if problem is not None:
                    first_bad = (i, problem)
                    break
            if first_bad is None:
                return []
            i, problem = first_bad
            dropped = []
            for f in self.files[i:]:
                f.destroy()
                dropped.append(
                    (f.name, problem if f is self.files[i] else "newer than an inconsistent file")
                )
            self.files = self.files[:i]
            return dropped

    # -- properties ---------------------------------------------------------------------------
    @property
    def last_timestamp(self) -> int:
        """endTimestamp (epoch ms) of the newest entry (written or pending), 0 without any."""
        last = self._pending[-8:]  # (one read: the buffer may shrink in another thread)
        if last:
            return _INT64.unpack(last)[0]
        files = self.files
        return files[-1].end_timestamp if files else 0

    @property
    def end_phy_offset(self) -> int:
        """The phyOffset of the newest record indexed, its entries written or pending: the
        newest file's endPhyOffset once they are written (0 without files)."""
        last = self._pending[-16:-8]  # (one read: the buffer may shrink in another thread)
        if last:
            return _INT64.unpack(last)[0]
        files = self.files
        return files[-1].end_phy_offset if files else 0

    def item_count(self) -> int:
        """Index items in every file (what recovery reports as rebuilt, by difference)."""
        with self._mutex:
            self._write_pending()
            return sum(max(0, f.index_count - 1) for f in self.files)

    # -- build --------------------------------------------------------------------------------
    def dispatch(self, batch: list[DispatchRequest]) -> None:
        """Index a batch of dispatched records (``CommitLogDispatcherBuildIndex``/``buildIndex``).

        Each item needs ``topic``, ``commitlog_offset``, ``store_timestamp`` (epoch ms), ``keys``
        (list of str, or the raw KEYS string split on " "), ``uniq_key`` (str or None) and
        ``sys_flag``. Puts ``topic#uniqKey`` (when not None) then ``topic#key`` for each
        non-empty key; skips ROLLBACK records and records before the newest file's endPhyOffset
        (already indexed); rolls to a new file when one is full.

        One deviation: a record *at* endPhyOffset (the newest indexed one, which a restart may
        dispatch again) only gets the keys it does not have yet, so re-dispatch never doubles
        its entries. RocketMQ would index it again, but never re-dispatches it.

        Raises:
            OSError: from the disk (the keys put so far stay; :meth:`truncate` undoes them).
        """
        with self._mutex:
            self._write_pending()
            entries: list[int] = []  # flat keyHash, phyOffset, storeTimestamp
            prefixes = self._topic_hashes
            last = -1  # offset of the newest pending entry
            for d in batch:
                if d.sys_flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_ROLLBACK_TYPE:
                    continue
                keys = d.keys
                if isinstance(keys, str):
                    keys = keys.split(" ")
                uniq = d.uniq_key
                if uniq is None and not keys:
                    continue
                offset = d.commitlog_offset
                if entries:
                    end_phy = last
                elif self.files:
                    end_phy = self.files[-1].end_phy_offset
                else:
                    end_phy = None
                if end_phy is not None and offset <= end_phy:
                    if offset < end_phy:
                        continue  # already indexed
                    # The newest indexed record again (a restart re-dispatching it): only the
                    # keys it lacks, one by one.
                    self._put_entries(entries)
                    entries = []
                    self._put_again(d.topic, uniq, keys, offset, d.store_timestamp)
                    continue
                topic = d.topic
                ph = prefixes.get(topic)
                if ph is None:
                    ph = topic_prefix_hash(topic)
                    if len(prefixes) < 65536:
                        prefixes[topic] = ph
                entries += record_entries(ph, uniq, keys or (), offset, d.store_timestamp)
                last = offset
            self._put_entries(entries)

    def _put_again(
        self, topic: str, uniq: str | None, keys: list[str], offset: int, store_timestamp: int
    ) -> None:
        idx_keys = [build_key(topic, uniq)] if uniq is not None else []
        idx_keys += [build_key(topic, k) for k in keys or () if k]
        files = self.files
        holders = []  # files that already hold items of this very record
        for f in reversed(files):
            if f.end_phy_offset != offset:
                break
            if f.index_count > 1:
                holders.append(f)
        for key in idx_keys:
            if holders and any(f.has_key_at(key, offset) for f in holders):
                continue
            self._put(key, offset, store_timestamp)

    def put_hashed(self, entries: Sequence[int]) -> None:
        """Index pre-hashed keys of new records (the store's put path).

        ``entries`` is flat ``[keyHash, phyOffset, storeTimestamp, ...]`` in CommitLog order
        (a list or an ``array("q")``), every phyOffset after :attr:`end_phy_offset`; keyHash
        is ``index_key_hash("topic#key")``. Written by :meth:`writer` into each file's mapping
        (:meth:`IndexFile.put_hashed`; Python's step without it, or where a file is not
        mapped). Rolls to new files as they fill.

        A put of :data:`FEW_ENTRIES` or fewer (a single message's keys, a small batch's) on a
        writable store waits in memory with those before it, and they are written together:
        one compiled call for many puts instead of one each, as RocketMQ's ReputMessageService
        indexes behind the CommitLog. They are written once :data:`PENDING_ENTRIES` have
        gathered, by the put :data:`PENDING_MS` after the oldest, by the flush thread's next
        round (:meth:`write_pending`), and before anything else writes or hands out the files
        (a larger put, :meth:`dispatch`, :meth:`frozen` for a snapshot, expiry, close); a cut
        (:meth:`truncate`) drops those past it. :meth:`query` reads them where they wait and
        :attr:`end_phy_offset` counts them, so the store answers for a put as soon as it
        returns; a reader of the files themselves (a follower) sees them once written. A
        crash loses only what recovery indexes again from the CommitLog (past the files'
        endPhyOffset). Callers hold the store's put lock (every put path, recovery and the
        flush thread's SYNC_FLUSH dispatch do): a few entries are added without the
        service's own lock.

        Raises:
            OSError: from the disk. Entries of earlier puts that could not be written stay
                pending (written by the next call that succeeds); this call's are kept too,
                and the caller undoes its put with :meth:`truncate`, which drops them.
        """
        if not entries:
            return
        pending, few, cap, ms = self._lane_state  # (the limits the compiled put keeps too)
        if len(entries) <= 3 * few and not self.read_only:
            # without the mutex (puts hold the store's put lock): the buffer only grows here
            # (and in the compiled single put, under the same lock), and what shrinks it
            # takes the mutex; the flush thread's write reads a copy (_write_pending), so it
            # is never exported while another thread appends, and may empty the buffer right
            # after the append: nothing of it is read after that
            oldest = pending[16:24]  # (before the append: the buffer may be emptied after it)
            if not isinstance(entries, array) or entries.typecode != "q":
                entries = array("q", entries)
            pending += entries
            oldest_ts = _INT64.unpack(oldest)[0] if oldest else entries[2]
            if len(pending) < 24 * cap and entries[-1] - oldest_ts < ms:
                return
            self.write_pending_now()
            return
        with self._mutex:
            if pending:
                self._write_pending()
            files = self.files
            i = 0
            if files:  # the usual case, without a layer more: all go to the last file
                last = files[-1]
                if last.index_count < last.index_num and not last.read_only:
                    i = last.put_hashed(entries, 0, None, self.writer())
                    if 3 * i == len(entries):
                        return
            self._put_entries(entries, i)

    def lane_state(self) -> tuple[bytearray, int, int, int]:
        """``(the pending entries, FEW_ENTRIES, PENDING_ENTRIES, PENDING_MS)`` for the compiled
        single put (``engine/read/_putobj.c``'s Lane), which adds a put's entries (``FEW_ENTRIES``
        or fewer) where :meth:`put_hashed` would, under the store's put lock as every caller
        of it holds: to the end of the buffer (native int64 keyHash, phyOffset,
        storeTimestamp each), only where entries wait already and the last one's phyOffset is
        below the put's (:attr:`end_phy_offset`'s rule), and tells its caller when they are
        due (``PENDING_ENTRIES`` gathered, or its store time ``PENDING_MS`` or more after the
        oldest's), who then calls :meth:`write_pending_now`. The caller undoes a put that
        fails after the append with :meth:`truncate`, as for :meth:`put_hashed`."""
        return self._lane_state

    def write_pending_now(self) -> None:
        """Write the entries waiting (:meth:`put_hashed`) into the files now, under the
        service's lock: what a put that finds them due calls.

        Raises:
            OSError: from the disk; those not written stay pending (the next write takes
                them), and the caller undoes its put (:meth:`truncate`).
        """
        with self._mutex:
            self._write_pending()

    def write_pending(self) -> bool:
        """Write the entries single puts left pending (:meth:`put_hashed`) into the files, so
        that a reader of the files (a follower, a backup) finds them; the store's flush
        thread calls it every round. A disk error is logged, not raised: those not written
        stay pending for the next round (and :meth:`close` reports them). Returns whether
        none is left."""
        if self._pending:
            with self._mutex:
                try:
                    self._write_pending()
                except OSError as exc:
                    log.warning(
                        "index entries of %d puts not written yet: %s", self.pending_count, exc
                    )
                    return False
        return True

    def _write_pending(self) -> None:
        """Write the pending entries (caller holds the mutex). On an error those not written
        stay pending and the error is raised."""
        pending = self._pending
        if not pending:
            return
        # written from a copy: a put appends to the buffer meanwhile (the writer releases
        # the GIL), which a buffer exporting its memory would refuse; they stay in the buffer
        # until written, so a query or end_phy_offset in another thread still counts them
        batch = array("q", pending)
        done = [0]
        try:
            self._put_entries(batch, 0, done)
        finally:  # (those written go; a put's appended since stay)
            del pending[: 24 * done[0]]

    def writer(self) -> IndexInPlace | None:
        """The compiled core's writer into an IndexFile's mapping (``engine.read.kernel.
        IndexWriter``, loaded at the first call by the callable the store gave; this layer does
        not import engine.read), None without one. Caller holds the mutex (it keeps state
        between calls)."""
        w = self._writer
        if w is _UNLOADED:
            w = self._writer = self._load_writer() if self._load_writer is not None else None
        return w  # type: ignore[return-value]

    def _put_entries(
        self, entries: Sequence[int], i: int = 0, done: list[int] | None = None
    ) -> None:
        """Write entries ``i ..`` into the newest file (by :meth:`writer`), rolling as files
        fill; ``done[0]`` follows how many are written (what an error leaves unwritten starts
        there)."""
        in_place = self.writer()
        total = len(entries) // 3
        while i < total:
            f = self._writable_last()
            j = f.put_hashed(entries, i, None, in_place)
            if j == i:
                f = self._new_file()
                j = f.put_hashed(entries, i, None, in_place)
                if j == i:
                    raise StoreError(f"{f.name}: a new index file refused a key")
            i = j
            if done is not None:
                done[0] = i

    def _put(self, key: str, offset: int, store_timestamp: int) -> None:
        f = self._writable_last()
        if f.put_key(key, offset, store_timestamp):
            return
        f = self._new_file()
        if not f.put_key(key, offset, store_timestamp):
            raise StoreError(f"{f.name}: a new index file refused a key")

    def _writable_last(self) -> IndexFile:
        """``getAndCreateLastIndexFile``: the newest file unless full (or on disk while
        read-only), else a new one."""
        if self.files:
            last = self.files[-1]
            if not last.is_write_full and not last.read_only:
                return last
        return self._new_file()

    def _new_file(self) -> IndexFile:
        prev = self.files[-1] if self.files else None
        end_phy = prev.end_phy_offset if prev else 0
        end_ts = prev.end_timestamp if prev else 0
        if self.read_only:
            f = IndexFile(None, self.hash_slot_num, self.index_num, end_phy, end_ts)
        else:
            os.makedirs(self.index_dir, exist_ok=True)
            name = index_file_name()
            last_name = next((g.name for g in reversed(self.files) if not g.in_memory), None)
            if last_name is not None and name <= last_name:
                name = name_after(last_name)  # keep names unique and in creation order
            while os.path.exists(os.path.join(self.index_dir, name)):
                name = name_after(name)
            f = IndexFile(
                os.path.join(self.index_dir, name),
                self.hash_slot_num,
                self.index_num,
                end_phy,
                end_ts,
            )
            fsync_dir(self.index_dir)
        with self._rw.write():
            self.files.append(f)
        return f

    def truncate(self, phy_offset: int) -> None:
        """Forget index entries of records at or after ``phy_offset`` (the CommitLog was cut).

        From the newest file back: a file whose items all lie at or after the cut is destroyed
        (as is an empty file whose endPhyOffset is at or after it), the first file holding
        older items is cut with :meth:`IndexFile.truncate`, and older files are untouched.
        Read-only: only in-memory files change; on-disk files keep their entries past the cut
        (stale: they point beyond the CommitLog's end, and query callers verify each offset).
        """
        with self._mutex:
            pending = self._pending
            if pending:
                entries = array("q", pending)  # (puts, which append, hold the put lock too)
                if entries[-2] >= phy_offset:
                    keep = 0  # entries before the cut, in CommitLog order
                    while keep < len(entries) and entries[keep + 1] < phy_offset:
                        keep += 3
                    del pending[8 * keep :]  # (a query reads a copy: _pending_hits)
                if pending:  # the files hold only records before the pending ones
                    return
            self._truncate_files(phy_offset)

    def _truncate_files(self, phy_offset: int) -> None:
        """:meth:`truncate` of the files (caller holds the mutex; nothing pending)."""
        with self._rw.write():
            while self.files:
                f = self.files[-1]
                if f.read_only:
                    break
                if f.index_count <= 1:
                    if f.end_phy_offset < phy_offset:
                        break
                    f.destroy()
                    self.files.pop()
                    continue
                if f.end_phy_offset < phy_offset:
                    break
                if f.truncate(phy_offset, self.timestamp_of) > 1:
                    break
                f.destroy()
                self.files.pop()

    def delete_expired(self, min_phy_offset: int) -> int:
        """``IndexService.deleteExpiredFile``: delete files, oldest first and never the newest,
        whose endPhyOffset < ``min_phy_offset`` (the CommitLog's min offset); stops at the first
        file that is still needed. No-op when read-only. Returns the number deleted.
        """
        if self.read_only:
            return 0
        with self._mutex:
            self._write_pending()
            files = list(self.files)
            if not files or files[0].end_phy_offset >= min_phy_offset:
                return 0
            victims = []
            for f in files[:-1]:
                if f.end_phy_offset >= min_phy_offset:
                    break
                victims.append(f)
            with self._rw.write():
                for f in victims:
                    self.files.remove(f)
                    f.destroy()
            return len(victims)

    def follow(self) -> list[str]:
        """Follower (read-only, another process writes ``index/``): open the files the
        writer created since, forget those it deleted (expiry), re-read the newest files'
        headers. Every file is marked ``live``. Returns the paths of the forgotten files.
        """
        try:
            names = sorted(n for n in os.listdir(self.index_dir) if INDEX_FILE_NAME.match(n))
        except FileNotFoundError:
            names = []
        with self._mutex:
            known = {f.name: f for f in self.files if not f.in_memory}
            present = set(names)
            gone = [f for f in self.files if not f.in_memory and f.name not in present]
            added = []
            newest = max(known, default="")
            for n in names:
                if n in known or n <= newest:
                    continue
                path = os.path.join(self.index_dir, n)
                try:
                    if os.path.getsize(path) == 0:
                        break  # being created: next time
                    f = IndexFile(path, self.hash_slot_num, self.index_num, read_only=True)
                except (OSError, CorruptRecordError):
                    break
                added.append(f)
            for f in self.files[-2:] + added:
                f.live = True
                if not f.in_memory:
                    f.reload_header()
            if gone or added:
                with self._rw.write():
                    self.files = [f for f in self.files if f not in gone] + added
                    for f in gone:
                        f.close()
            return [f.path for f in gone if f.path is not None]

    # -- query --------------------------------------------------------------------------------
    def query(
        self,
        topic: str,
        key: str,
        max_num: int = MAX_MSGS_NUM_BATCH,
        begin: int = 0,
        end: int = LONG_MAX,
    ) -> list[int]:
        """CommitLog offsets of messages indexed under ``topic#key`` (``queryOffset``).

        ``max_num`` is capped at ``max_msgs_num_batch`` (64). Files are read newest first, only
        those whose time span overlaps ``[begin, end]`` (epoch ms); the scan stops at a file
        whose beginTimestamp < ``begin`` or once ``max_num`` offsets are found. Offsets come
        newest first and may include other keys with the same 32-bit hash, or repeat.

        Raises:
            CorruptRecordError: a file was truncated behind the store's back.
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        out: list[int] = []
        if max_num <= 0:
            return out
        idx_key = build_key(topic, key)
        # the newest first: the entries of single puts not written yet, read in memory (a
        # query writes nothing), then the files
        out = hits = self._pending_hits(idx_key, max_num, begin, end)
        if len(out) >= max_num:
            return out
        # Under the lock, only the files to read and a reader of each (a duplicated
        # descriptor): the walks run after it, so a writer (a roll to a new file, truncation,
        # expiry) never waits for a walk, however long a damaged file makes it.
        todo = []
        with self._rw.read():
            for f in reversed(self.files):
                if f.is_time_matched(begin, end):
                    todo.append((f, f.reader()))
                if f.begin_timestamp < begin:
                    break
        seen = set(hits)  # written since they were read from memory: the same entries
        try:
            for f, io in todo:
                found = f.select_phy_offsets(idx_key, max_num - len(out), begin, end, io)
                if seen:
                    found = [off for off in found if off not in seen]
                out = out + found
                if len(out) >= max_num:
                    break
        finally:
            for _, io in todo:
                io.close()
        return out

    def _pending_hits(self, idx_key: str, max_num: int, begin: int, end: int) -> list[int]:
        """CommitLog offsets of the pending entries under ``idx_key`` (``topic#key``) stored
        within ``[begin, end]`` (epoch ms), newest first, at most ``max_num``."""
        pending = array("q", self._pending)  # a copy: a write or a cut shrinks it in place
        if not pending:
            return []
        h = index_key_hash(idx_key)
        out = []
        for i in range(len(pending) - 3, -1, -3):
            if pending[i] == h and begin <= pending[i + 2] <= end:
                out.append(pending[i + 1])
                if len(out) >= max_num:
                    break
        return out

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> tuple[bool, int]:
        """``fdatasync`` the files written since the last flush.

        Returns:
            ``(written, end_timestamp)``: whether a file was written (and synced) since the
            last flush, and the newest endTimestamp (epoch ms) now on disk: every key of a
            record stored at or before it is durable, so the store may write it to
            ``checkpoint.indexMsgTimestamp``. ``(False, 0)`` when read-only. RocketMQ sets
            that value only in ``IndexService.flush(IndexFile)``, when a full file is flushed,
            so an open that indexes nothing leaves the checkpoint's as it was (0 included):
            the store writes it only once this open changed the data.
        """
        if self.read_only:
            return False, 0
        with self._mutex:
            self.write_pending()  # what it cannot write stays pending: the files still sync
            written = False
            for f in self.files:
                written = f.flush() or written
            files = self.files  # what is on disk, not what waits
            return written, files[-1].end_timestamp if files else 0

    def touch_written(self) -> None:
        """Set to now the mtime of the IndexFiles written since it was last set
        (:meth:`IndexFile.touch`; ``MessageStore.touch_written``)."""
        if self.read_only:
            return
        with self._mutex:
            for f in self.files:
                f.touch()

    @property
    def pending_count(self) -> int:
        """Entries waiting to be written (:meth:`put_hashed`)."""
        return len(self._pending) // 24

    def close(self) -> None:
        """Flush (unless read-only) and close every file (``IndexService.shutdown``).

        Raises:
            OSError: from the flush, or entries that could not be written (a full disk):
                every file is closed all the same; the store then keeps ``abort``, and the
                next open indexes those records again from the CommitLog.
        """
        with self._mutex:
            try:
                if not self.read_only:
                    self.flush()
            finally:
                with self._rw.write():
                    for f in self.files:
                        try:
                            f.close()
                        except OSError:
                            pass
                    self.files = []
            lost = self.pending_count
            del self._pending[:]
            if lost:
                raise OSError(f"{lost} index entries could not be written before close")
