"""A snapshot in object storage as a :class:`engine.format.source.StoreSource`: read in-process.

``rmqfs mount s3://bucket/prefix MNT -o ro`` opens the snapshot there (``SNAPSHOT.json`` and its
files, :mod:`engine.live.snapshot`) with ``MessageStore`` over this source, in the daemon and in
each render worker: no second filesystem, no memory map of network-backed bytes.

- **The tree is the manifest's.** Directories come from the manifest's file names, sizes from its
  entries (:mod:`engine.live.manifest` checked every name: no ``..``, bounded depth); the
  manifest itself is a file of the tree. Nothing is listed on the server.
- **Bytes by range, under a bound.** Reads go through :class:`engine.live.blockcache.BlockCache`
  (fixed blocks, one range read each, ``pyarrow.fs`` ``read_at``; least recently used blocks
  evicted, at most ``capacity`` bytes on local disk). A file's zeros past its manifest
  ``stored`` prefix (a segment's tail after the snapshot's cut) are never asked of the server.
- **A failed request is an error, not a hang.** Each request (a block, the manifest) runs in a
  thread of a bounded pool and is waited for at most ``timeout`` seconds
  (:data:`DEFAULT_TIMEOUT`); S3 requests are tried at most
  :data:`engine.live.location.S3_ATTEMPTS` times (:func:`engine.live.location.open_location`).
  What fails or times out raises :class:`engine.errors.ObjectStoreError` (errno EIO) naming
  the object and the location; nothing is cached, and the next read asks again. A request
  still hung holds its thread; when every thread is held, a read fails at once, so hung
  requests cannot pile up.
- **The manifest's sums are checked** where a file's bytes arrive in order from its start (a
  ``cat`` of a ``raw/`` file, the data source's CommitLog ranges): once its stored prefix is
  in, the CRC32C of it and its zero tail is compared with the manifest's ``crc32c``
  (:meth:`ObjectSource.check_sum` reads the rest of a file to finish it). A file whose sum
  differs raises :class:`engine.errors.CorruptRecordError` naming it (the read that finished
  the sum fails), and none of its bytes is fetched again through this source (blocks cached
  before stay readable). Best effort for a mount: bytes that arrive out of order (a random
  read, blocks fetched by another process of the mount) are not summed, and that file's sum
  is then not taken; ``rmqfs snapshot-verify URI`` checks every file.
- **An upload over the mounted location** (it deletes the manifest first,
  :mod:`engine.live.objectstore`) is seen by reading the manifest again before a fetch, at most
  every :data:`MANIFEST_POLL` seconds: once it changed or went, blocks not cached raise
  (remount) rather than return bytes of another snapshot.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import CorruptRecordError, ManifestError, ObjectStoreError, StoreError
from ..format.crc import crc32c
from ..format.mappedfile import SegmentMap
from ..format.source import LOCAL, StoreSource
from .blockcache import MIN_BLOCK, BlockCache, CacheStats
from .location import REQUEST_TIMEOUT, explain, join, open_location, read_small, redact
from .manifest import MANIFEST_NAME, MAX_MANIFEST, Manifest, parse_manifest
from .objectstore import read_manifest

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_TIMEOUT",
    "ManifestTree",
    "ObjectSource",
    "open_source",
    "store_root",
]

log = logging.getLogger("rmqfs")

#: Seconds one request (a block's range read, the manifest) may take (``-o remote_timeout=``).
DEFAULT_TIMEOUT = REQUEST_TIMEOUT
#: Bytes of block files the daemon and its render workers keep together (``-o remote_cache=``).
DEFAULT_CACHE_SIZE = 1 << 30
#: Requests in flight at once (each holds at most one block in memory).
REQUEST_THREADS = 8
#: Seconds between two reads of the manifest (one small request, before a fetch only).
MANIFEST_POLL = 10.0
#: The file in a mount's block directory that marks the server as not answering (a request
#: past its timeout still waits), for the daemon and its render workers alike.
UNANSWERED = "unanswered"
#: Seconds a mark holds at most (at least three timeouts): then reads ask the server again.
UNANSWERED_FOR = 30.0
#: Range reads kept open per source (an S3 ``open_input_file`` costs a HEAD request).
MAX_OPEN = 64
#: Files whose sum is being taken at once (their bytes arriving in order): the oldest is
#: dropped (left unchecked) past this.
MAX_SUMS = 4096
#: A file's entry in ``ObjectSource._sums`` once its sum matched the manifest's.
_SUMMED = (-1, 0)
#: Query parameters of an ``s3://`` URI this module passes on (others: pyarrow's own parse).

_T = TypeVar("_T")
_SEGMENT_NAME = re.compile(r"commitlog/[0-9]{20}\Z")  # ASCII digits ("²".isdigit() is True)


def store_root(location: str) -> str:
    """The root path readers join names below: the location without credentials and query
    (``s3://bucket/prefix``), which is also how it prints."""
    parts = urlsplit(location)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


class _Busy(Exception):
    """No request thread came free within the timeout."""


class _Unanswered(Exception):
    """A request waits past its timeout: the server is not asked meanwhile."""


class ManifestTree:
    """The tree of a snapshot's manifest, held compactly: the files' paths sorted (references
    to the manifest's own strings) and two int64 arrays (size, data end), about 24 bytes a
    file, and no object per directory (a manifest of 1,000,000 files made a tree of a node
    each, 1.1 GB): a directory is found by binary search on the sorted paths.

    Files are the manifest's ``files`` (paths checked by
    :func:`engine.live.manifest.parse_manifest`: relative, at most ``MAX_PATH_PARTS`` parts)
    and ``manifest_name`` itself. A file's bytes past its stored prefix
    (:func:`engine.live.snapshot.stored_size`) are zeros, never fetched, and so are a CommitLog
    segment's at or past the snapshot's ``commitLogOffset`` (what a manifest without
    ``stored`` says of them): :attr:`data_end`.

    Raises:
        ValueError: a name that is absolute, holds ``.`` or ``..`` or an empty part, or is
            both a file and a directory.
    """

    def __init__(self, manifest: Manifest, manifest_bytes: bytes, manifest_name: str) -> None:
        import numpy as np

        files = manifest.files
        if manifest_name in files:
            raise ValueError(f"the manifest names {manifest_name!r} among its files")
        self.paths: list[str] = sorted([*files, manifest_name])
        n = len(self.paths)
        self.manifest_index = bisect.bisect_left(self.paths, manifest_name)
        self.sizes = np.empty(n, np.int64)
        self.data_end = np.empty(n, np.int64)
        cut = manifest.get("commitLogOffset")
        for i, rel in enumerate(self.paths):
            parts = rel.split("/")
            if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"the manifest names {rel!r}, not a relative file name")
            if i + 1 < n and self.paths[i + 1].startswith(rel + "/"):
                raise ValueError(f"the manifest names {rel!r}: both a file and a directory")
            if i == self.manifest_index:
                size = end = len(manifest_bytes)
            else:
                entry = files[rel]
                size, end = entry.size, max(0, min(entry.size, entry.stored))
                if isinstance(cut, int) and _SEGMENT_NAME.match(rel):
                    end = max(0, min(end, cut - int(rel[10:])))
            self.sizes[i], self.data_end[i] = size, end

    def __len__(self) -> int:
        return len(self.paths)

    def file(self, rel: str) -> int | None:
        """Index of the file ``rel`` in path order, None when it is no file."""
        i = bisect.bisect_left(self.paths, rel)
        return i if i < len(self.paths) and self.paths[i] == rel else None

    def is_dir(self, rel: str) -> bool:
        """Whether ``rel`` ("" the root) is a directory: some file lies under it."""
        if not rel:
            return True
        prefix = rel + "/"
        i = bisect.bisect_left(self.paths, prefix)
        return i < len(self.paths) and self.paths[i].startswith(prefix)

    def names(self, rel: str) -> list[str] | None:
        """The entries of the directory ``rel`` in name order (each once), None when it is
        no directory."""
        if not self.is_dir(rel):
            return None
        prefix = rel + "/" if rel else ""
        paths = self.paths
        out = []
        i = bisect.bisect_left(paths, prefix)
        while i < len(paths) and paths[i].startswith(prefix):
            head, sep, _ = paths[i][len(prefix) :].partition("/")
            out.append(head)
            # a directory: every path under it is skipped ('/' + 1 is '0')
            i = bisect.bisect_left(paths, prefix + head + "0") if sep else i + 1
        return sorted(out)  # path order puts "A-b/x" before "A/x"


class ObjectSource:
    """The snapshot at ``location`` (a URI ``pyarrow.fs`` opens) as a
    :class:`engine.format.source.StoreSource` (see the module docstring).

    Args:
        location: ``s3://bucket/prefix?endpoint_override=...`` and the like (credentials from
            the AWS settings or the URI's user info).
        cache_dir: where this source's block files go: a private directory is made in it,
            where the render workers that open this source again (:attr:`spec`) make theirs;
            :meth:`close` deletes it whole. None: no block cache, each :meth:`pread` one range
            read (the data source, which reads each range once).
        capacity: bound of the block files' bytes (:class:`engine.live.blockcache.BlockCache`).
        timeout: seconds each request may take.
        workers: the render workers that will open this source again (:attr:`spec`): the
            daemon keeps half of ``capacity``, the workers share the other half (each at least
            two of the smallest blocks, :data:`engine.live.blockcache.MIN_BLOCK`).
        shared_dir: a render worker's: the daemon's block directory, where the mark of a
            server that does not answer (:data:`UNANSWERED`) is kept for all of them.
        manifest: the manifest's bytes as the daemon read them (a render worker's: it asks
            the server nothing to open the source).

    Raises:
        ObjectStoreError: the location cannot be read, or holds no ``SNAPSHOT.json``.
        ManifestError: the manifest is not a valid one.
    """

    local = False

    def __init__(
        self,
        location: str,
        cache_dir: str | None,
        capacity: int = DEFAULT_CACHE_SIZE,
        timeout: float = DEFAULT_TIMEOUT,
        workers: int = 0,
        shared_dir: str | None = None,
        manifest: bytes | None = None,
    ) -> None:
        self.location = location
        self.where = redact(location)
        self.root = store_root(location)
        self.timeout = timeout
        own = capacity // 2 if workers else capacity
        self._worker_capacity = max(2 * MIN_BLOCK, (capacity - own) // max(workers, 1))
        self._threads = threading.BoundedSemaphore(REQUEST_THREADS)
        self._pool = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="rmqfs-object")
        self._lock = threading.Lock()
        self._open: dict[str, Any] = {}
        self.fs, self.base = open_location(location, timeout)
        self._blocks: str | None = None
        #: where the mark of a server that does not answer is kept, for the daemon and its
        #: render workers together (the daemon's block directory); without a block cache, in
        #: this object only (``_marked_at``)
        self._unanswered: str | None = None
        self._marked_at = 0.0
        if cache_dir is not None:
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            self._blocks = tempfile.mkdtemp(prefix="blocks-", dir=cache_dir)
            self._unanswered = os.path.join(shared_dir or self._blocks, UNANSWERED)
        self._checked = time.monotonic()
        self._changed: str | None = None
        #: ``{rel: (bytes summed from the file's start, their CRC32C)}`` (:data:`_SUMMED` once
        #: checked), at most :data:`MAX_SUMS`; and the files whose sum differed (never served)
        self._sums: dict[str, tuple[int, int]] = {}
        self._bad: dict[str, str] = {}
        try:
            if manifest is None:
                doc, raw = self._manifest()
            else:
                doc, raw = parse_manifest(manifest), manifest
            self.tree = self._tree_of(doc, raw)
        except BaseException:
            self._discard()
            raise
        self.manifest: Manifest = doc
        self._manifest_bytes = raw
        self._stats = CacheStats()  # without a block cache: the range reads made
        self.cache: BlockCache | None = None
        #: the daemon's block directory, which holds the render workers' (peers of each other)
        #: and the manifest they open the source from
        self._shared = shared_dir or self._blocks
        if self._blocks is not None and shared_dir is None:
            with open(os.path.join(self._blocks, MANIFEST_NAME), "xb") as f:
                f.write(raw)
        if self._blocks is not None:
            self.cache = BlockCache(
                self._fetch, self._blocks, max(own, 2 * MIN_BLOCK), peers=self._peers
            )

    @property
    def blocks_dir(self) -> str | None:
        """This source's block cache directory (``blocks-*`` under the cache dir), or None."""
        return self._blocks

    def _peers(self) -> list[str]:
        """The other block caches of this mount (the daemon's and its render workers'): a
        block one of them holds is read from its file, not fetched again."""
        root = self._shared
        if root is None:
            return []
        try:
            names = os.listdir(root)
        except OSError:
            return []
        dirs = [root, *(os.path.join(root, n) for n in names if n.startswith("blocks-"))]
        return [d for d in dirs if d != self._blocks]

    def _discard(self) -> None:
        """Undo a constructor that failed: no thread, no directory left."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._blocks is not None:
            shutil.rmtree(self._blocks, ignore_errors=True)

    @classmethod
    def from_spec(cls, spec: tuple[str, ...]) -> ObjectSource:
        """The source :attr:`spec` describes (a render worker's: its own blocks, its share of
        the capacity, the manifest from the daemon's copy beside its blocks: nothing asked of
        the server to open it). Raises OSError when that copy is gone (the mount closed)."""
        _, location, cache_dir, capacity, timeout = spec
        with open(os.path.join(cache_dir, MANIFEST_NAME), "rb") as f:
            raw = f.read(MAX_MANIFEST + 1)
        return cls(
            location, cache_dir, int(capacity), float(timeout), shared_dir=cache_dir, manifest=raw
        )

    @property
    def spec(self) -> tuple[str, ...]:
        """``("object", location, this source's block directory, worker capacity, timeout)``
        for :func:`open_source` in a render worker. Raises ValueError for a source without a
        block cache."""
        if self._blocks is None:
            raise ValueError("a source without a block cache is not opened again elsewhere")
        return (
            "object",
            self.location,
            self._blocks,
            str(self._worker_capacity),
            str(self.timeout),
        )

    @property
    def stats(self) -> CacheStats:
        """Reads answered from the block cache and range reads made (``misses``,
        ``fetched_bytes``: every read, without a block cache)."""
        return self._stats if self.cache is None else self.cache.stats

    # -- requests ---------------------------------------------------------------------------
    def _within(self, what: str, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` in a request thread, waited for at most :attr:`timeout` seconds.

        Raises:
            ObjectStoreError: it timed out, every request thread is held by a hung request,
                or ``fn`` raised an OSError; the message says ``what`` and the location, and
                the log has it in one line (``EIO <message>``).
        """
        try:
            return self._run(fn, args)
        except FutureTimeout:
            why = f"no answer within {self.timeout:g} s (the server is down or unreachable?)"
        except _Unanswered:
            why = (
                f"not asked: a request to it had no answer within {self.timeout:g} s (the "
                "server is down or unreachable?); asked again once it answers"
            )
        except _Busy:
            why = f"every request is waiting on the server (none answered in {self.timeout:g} s)"
        except RuntimeError:  # the pool is shut down
            why = "the source is closed"
        except FileNotFoundError:
            why = "gone (a newer snapshot uploaded there no longer holds it)"
        except OSError as exc:
            why = explain(exc)
        err = ObjectStoreError(f"{what} of {self.where}: {why}")
        log.warning("EIO %s", err)
        raise err

    def _run(self, fn: Callable[..., _T], args: tuple[Any, ...]) -> _T:
        """``fn(*args)`` in a request thread; raises _Unanswered while a request (of this
        process or another that shares the mark) waits past its timeout, _Busy when no thread
        is free within the timeout, FutureTimeout when it does not end within it, else what
        ``fn`` raises.

        A request past its timeout marks the server unanswering (:data:`UNANSWERED`) until
        that request ends, however it ends, or any request gets an answer, or
        :data:`UNANSWERED_FOR` seconds (at least three timeouts) pass: meanwhile requests fail
        at once, so a reader that makes several (``ls -l`` of a topic: a view's size each)
        fails within one timeout, not one per file, and once the server answers again (the
        waiting request ends) reads ask it again."""
        if self._marked():
            raise _Unanswered
        if not self._threads.acquire(timeout=self.timeout):
            raise _Busy
        state = {"late": False, "done": False}

        def run() -> _T:
            answered = False
            try:
                data = fn(*args)
                answered = True
            finally:
                self._threads.release()
                with self._lock:
                    state["done"] = True
                    late = state["late"]
                # the request that marked the server ended, or any request got an answer
                self._unmark(late or (answered and self._marked()))
            return data

        try:
            fut = self._pool.submit(run)
        except RuntimeError:
            self._threads.release()
            raise
        try:
            return fut.result(self.timeout)
        except FutureTimeout:
            with self._lock:
                if not state["done"]:
                    state["late"] = True
            if state["late"]:
                self._mark()
            raise

    def _marked(self) -> bool:
        """Whether the server is marked unanswering (a mark at most :data:`UNANSWERED_FOR`
        seconds or three timeouts old: its request's process may have died without lifting
        it, or its request may never end)."""
        hold = max(UNANSWERED_FOR, 3 * self.timeout)
        if self._unanswered is None:
            return time.time() - self._marked_at < hold
        try:
            return time.time() - os.stat(self._unanswered).st_mtime < hold
        except OSError:
            return False

    def _mark(self) -> None:
        if self._unanswered is None:
            self._marked_at = time.time()
            return
        try:
            os.close(os.open(self._unanswered, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            os.utime(self._unanswered)
        except OSError:  # the directory is gone (closing): nothing to mark
            pass

    def _unmark(self, marked: bool) -> None:
        if not marked:
            return
        if self._unanswered is None:
            self._marked_at = 0.0
            return
        try:
            os.unlink(self._unanswered)
        except FileNotFoundError:
            pass

    def _manifest(self) -> tuple[Manifest, bytes]:
        """The location's manifest (:func:`engine.live.objectstore.read_manifest`), read
        within the timeout. Raises as the constructor."""
        got = self._within(
            f"reading {MANIFEST_NAME}", read_manifest, self.fs, self.base, self.where
        )
        if got is None:
            raise ObjectStoreError(
                f"{self.where}: no {MANIFEST_NAME}: not a snapshot, or one still being uploaded "
                "(the manifest is written last)"
            )
        return got

    def _tree_of(self, doc: Manifest, raw: bytes) -> ManifestTree:
        """The :class:`ManifestTree` of a manifest. Raises ManifestError naming what is wrong
        (a name both a file and a directory, ...)."""
        try:
            return ManifestTree(doc, raw, MANIFEST_NAME)
        except ValueError as exc:
            raise ManifestError(f"{MANIFEST_NAME} of {self.where}: {exc}") from None

    def _read_object(self, rel: str, offset: int, length: int) -> bytes:
        """One range read of ``rel``'s object (in a request thread)."""
        with self._lock:
            f = self._open.pop(rel, None)
        if f is None:
            f = self.fs.open_input_file(join(self.base, rel))
        data: bytes = f.read_at(length, offset)
        with self._lock:
            self._open[rel] = f
            while len(self._open) > MAX_OPEN:
                self._open.pop(next(iter(self._open))).close()
        return data

    def _fetch(self, rel: str, offset: int, length: int) -> bytes:
        """The block cache's range read: ``length`` bytes of ``rel`` at ``offset``, unless the
        location changed since the open (checked at most every :data:`MANIFEST_POLL` s)."""
        self._recheck()
        if self._changed is not None:
            raise ObjectStoreError(self._changed)
        bad = self._bad.get(rel)
        if bad is not None:
            raise CorruptRecordError(bad)
        data = self._within(f"reading {rel}", self._read_object, rel, offset, length)
        self._sum(rel, offset, data)
        return data

    def _sum(self, rel: str, offset: int, data: bytes) -> None:
        """Extend ``rel``'s sum with ``data`` (its bytes at ``offset``) when they continue
        what was summed; once the stored prefix is in, compare with the manifest's crc32c.
        The sum is taken outside the lock (the request threads' finishes take it); a read
        that moved the sum meanwhile wins. Raises CorruptRecordError (and marks the file bad)
        when it differs."""
        with self._lock:
            before = self._sums.get(rel, (0, 0))
            at, crc = before
            i = self.tree.file(rel)
            if not offset <= at < offset + len(data) or i is None or rel not in self.manifest.files:
                return
            end = int(self.tree.data_end[i])
        crc = crc32c(memoryview(data)[at - offset : end - offset], crc)
        at = min(end, offset + len(data))
        with self._lock:
            if self._sums.get(rel, (0, 0)) != before:
                return
            self._sums.pop(rel, None)
            if at < end:
                self._sums[rel] = (at, crc)
                while len(self._sums) > MAX_SUMS:
                    self._sums.pop(next(iter(self._sums)))
                return
            self._check(rel, crc, end)

    def _check(self, rel: str, crc: int, n: int) -> None:
        """Compare a file whose first ``n`` bytes sum to ``crc`` (zeros after) with its
        manifest entry (caller holds the lock)."""
        problem = self.manifest.files[rel].crc_problem(crc, n)
        if problem is None:
            self._sums[rel] = _SUMMED
            return
        msg = (
            f"{rel} of {self.where} has {problem} by its manifest: damaged or replaced, not "
            "served (rmqfs snapshot-verify checks every file)"
        )
        self._bad[rel] = msg
        log.error("%s", msg)
        raise CorruptRecordError(msg)

    def check_sum(self, path: str, chunk: int = 16 << 20) -> None:
        """Compare the file ``path``'s CRC32C with its manifest's: the bytes not yet summed are
        read (``chunk`` bytes a range read; nothing when its bytes already came in order, the
        zeros past its stored prefix never).

        Raises:
            FileNotFoundError: no such file. CorruptRecordError: the sum differs (named).
            ObjectStoreError: a range could not be read.
        """
        rel, _, end = self._entry(path)
        if rel == MANIFEST_NAME:
            return
        while True:
            with self._lock:
                at, crc = self._sums.get(rel, (0, 0))
                if (at, crc) == _SUMMED:
                    return
                if at >= end:  # nothing stored: a file of zeros
                    self._check(rel, 0, 0)
                    return
            got = self._fetch(rel, at, min(chunk, end - at))
            if not got:
                raise ObjectStoreError(f"{rel} of {self.where}: no bytes at {at}")

    def _recheck(self) -> None:
        now = time.monotonic()
        if self._changed is not None or now - self._checked < MANIFEST_POLL:
            return
        self._checked = now
        try:
            raw = self._within(
                f"reading {MANIFEST_NAME}", read_small, self.fs,
                join(self.base, MANIFEST_NAME), MAX_MANIFEST, self.where,
            )  # fmt: skip
        except StoreError:
            return  # the server is down: the fetch says so
        if raw != self._manifest_bytes:
            self._changed = (
                f"{self.where} changed since it was mounted (an upload to it): blocks not cached "
                "are not read from it any more; unmount and mount it again"
            )
            log.error("%s", self._changed)

    # -- the tree ---------------------------------------------------------------------------
    def _rel(self, path: str) -> str:
        """``path`` relative to :attr:`root`. Raises FileNotFoundError outside it."""
        root = self.root
        if path == root or path == root + "/":
            return ""
        if path.startswith(root + "/"):
            return path[len(root) + 1 :].rstrip("/")
        raise FileNotFoundError(2, "not in the snapshot", path)

    def _entry(self, path: str) -> tuple[str, int, int]:
        """``(rel, size, data end)`` of the file ``path``. Raises FileNotFoundError, or
        IsADirectoryError for a directory."""
        rel = self._rel(path)
        i = self.tree.file(rel)
        if i is None:
            if self.tree.is_dir(rel):
                raise IsADirectoryError(21, "a directory", path)
            raise FileNotFoundError(2, "not in the snapshot", path)
        return rel, int(self.tree.sizes[i]), int(self.tree.data_end[i])

    def listdir(self, path: str) -> list[str]:
        """Names in the directory ``path`` (FileNotFoundError, NotADirectoryError)."""
        rel = self._rel(path)
        names = self.tree.names(rel)
        if names is None:
            if self.tree.file(rel) is not None:
                raise NotADirectoryError(20, "not a directory", path)
            raise FileNotFoundError(2, "not in the snapshot", path)
        return names

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory of the snapshot."""
        try:
            return self.tree.is_dir(self._rel(path))
        except FileNotFoundError:
            return False

    def isfile(self, path: str) -> bool:
        """Whether ``path`` is a file of the snapshot."""
        try:
            return self.tree.file(self._rel(path)) is not None
        except FileNotFoundError:
            return False

    def lexists(self, path: str) -> bool:
        """Whether ``path`` is a file or a directory of the snapshot."""
        return self.isdir(path) or self.isfile(path)

    def file_size(self, path: str) -> int:
        """The file's size as its manifest says (bytes as restored)."""
        return self._entry(path)[1]

    def mtime_ns(self, path: str) -> int:
        """The snapshot's time (its manifest's ``time``, epoch ms, as ns), for every file and directory.
        Raises FileNotFoundError for what the snapshot does not hold."""
        if not self.lexists(path):
            raise FileNotFoundError(2, "not in the snapshot", path)
        created = self.manifest.get("time")
        return int(created) * 1_000_000 if isinstance(created, int) else 0

    def allocated(self, path: str) -> int:
        """The file's stored prefix (bytes after it are zeros, never fetched)."""
        return self._entry(path)[2]

    def read_file(self, path: str, limit: int) -> bytes:
        """Up to ``limit`` bytes of the file ``path`` (see :class:`engine.format.source.StoreSource`)."""
        rel, size, _ = self._entry(path)
        if rel == MANIFEST_NAME:
            return self._manifest_bytes[:limit]
        return self.pread(path, min(limit, size), 0)

    def pread(self, path: str, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes of the file ``path`` at ``offset``, through the block cache.

        Raises:
            FileNotFoundError: no such file in the snapshot.
            ObjectStoreError: a block could not be fetched in time (see the module docstring).
        """
        rel, size, stored = self._entry(path)
        if rel == MANIFEST_NAME:
            return self._manifest_bytes[offset : offset + length]
        if self.cache is not None:
            return self.cache.read(rel, size, offset, length, stored)
        stop = min(offset + length, size)  # without a block cache: one range read
        if offset >= stop:
            return b""
        n = max(0, min(stop, stored) - offset)
        data = self._fetch(rel, offset, n) if n else b""
        if len(data) != n:
            raise ObjectStoreError(
                f"{rel} of {self.where}: {n} bytes at {offset} asked, {len(data)} came back "
                "(the object is shorter than its manifest says: damaged or replaced)"
            )
        if n:
            with self._lock:
                self._stats.misses += 1
                self._stats.fetched_bytes += n
        return data + bytes(stop - offset - n) if stop - offset > n else data

    def window(self, path: str, offset: int) -> tuple[SegmentMap, int] | None:
        """The cached block of file ``path`` that holds ``offset`` (fetched first), mapped
        read-only, and the file position of its first byte; None without a block cache or
        past the file's stored prefix (:meth:`engine.live.blockcache.BlockCache.view`).

        Raises:
            FileNotFoundError: no such file; ObjectStoreError: as :meth:`pread`.
        """
        rel, size, stored = self._entry(path)
        if self.cache is None or rel == MANIFEST_NAME:
            return None
        return self.cache.view(rel, size, offset, stored)

    def refresh(self) -> bool:
        """Read the manifest again (a newer snapshot uploaded to the location): True when it
        changed, and the tree is then the new one. For a source without a block cache (the
        data source plans each query anew); a mount keeps the snapshot it mounted.

        Raises:
            ValueError: the source has a block cache. ObjectStoreError, ManifestError: as the
                constructor.
        """
        if self.cache is not None:
            raise ValueError("a mounted snapshot is not read again (its blocks are cached)")
        doc, raw = self._manifest()
        if raw == self._manifest_bytes:
            return False
        tree = self._tree_of(doc, raw)
        with self._lock:
            for f in self._open.values():
                f.close()
            self._open.clear()
            self.manifest, self._manifest_bytes, self.tree = doc, raw, tree
            self._sums.clear()  # another snapshot's files: summed anew
            self._bad.clear()
        return True

    def close(self) -> None:
        """Delete the block files (the render workers' below this source's directory too) and
        stop the request threads (a hung one is left to end)."""
        if self.cache is not None:
            self.cache.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for f in self._open.values():
                try:
                    f.close()
                except OSError:
                    pass
            self._open.clear()
        if self._blocks is not None:
            shutil.rmtree(self._blocks, ignore_errors=True)


def open_source(spec: tuple[str, ...]) -> StoreSource:
    """The source a :attr:`engine.format.source.StoreSource.spec` describes, opened in this
    process (a render worker's). Raises ValueError for an unknown spec, ObjectStoreError as
    :class:`ObjectSource`'s constructor."""
    if spec[0] == "local":
        return LOCAL
    if spec[0] == "object":
        return ObjectSource.from_spec(spec)
    raise ValueError(f"unknown store source {spec[0]!r}")
