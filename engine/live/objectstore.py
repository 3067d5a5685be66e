"""Snapshots in object storage: upload, download and listing over ``pyarrow.fs``.

A *location* is one snapshot's place: a plain path (a local directory) or anything
``pyarrow.fs.FileSystem.from_uri`` accepts (``s3://bucket/prefix?endpoint_override=host:port&scheme=http``,
``gs://``, ``hdfs://``, ``file:///``); S3 credentials come from the standard AWS settings
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``~/.aws``), as pyarrow reads them. The
location holds the snapshot's files under their manifest names and ``SNAPSHOT.json``
(:mod:`engine.live.snapshot`), exactly as a local copy does.

:func:`upload_snapshot` makes a location the copy of a snapshot directory (``MNT/snapshots/NAME``
or a copy of one), as ``rsync --delete`` does a directory, in this order:

1. read the location's manifest (if any) and list its files;
2. delete the location's manifest: from here until step 5 the location holds no manifest, so it
   is never read as a whole snapshot (``snapshot-verify`` and ``snapshot-download`` refuse it);
3. upload each file whose ``(size, crc32c)`` differs from the old manifest's entry, or which
   the location lacks (or holds with a length outside ``[stored, size]``): a sealed CommitLog
   segment has the same entry in every snapshot and is uploaded once; every byte read is
   summed and must match the source's manifest (a damaged source is refused, not uploaded);
4. delete the location's files the new manifest does not name (expired segments);
5. write the new ``SNAPSHOT.json`` last.

An upload that stops between 2 and 5 (server down, killed) leaves no manifest; the next upload
then finds none and uploads every file again. Uploads go through ``open_output_stream``
(multipart for big files, pyarrow's choice) in :data:`CHUNK` pieces, ``workers`` files at a time;
the stream is flushed every :data:`FLUSH_EVERY` bytes, which waits for the parts in flight, so a
file holds at most that much memory.

What is sent of a file is its *stored prefix*: the manifest's ``stored`` bytes
(:func:`engine.live.snapshot.stored_size`), everything after them zeros (a live CommitLog
segment after the snapshot's cut, a ConsumeQueue file after its last unit, a live IndexFile
after its last item). Those zeros are neither read nor sent: the prefix's sum, extended by
them (:func:`engine.format.crc.crc32c_zeros`), is checked against the manifest's crc32c of the
whole file, and every reader of the location (:func:`download_snapshot`, ``snapshot-verify``,
:class:`engine.live.remote.RemoteSnapshot`, the mount) serves them as zeros: a preallocated
1 GiB segment holding 1 MB of records costs 1 MB. An object may also hold more of its file,
up to the whole (a copy made by ``aws s3 sync``, or an upload of a manifest without
``stored``); readers accept that. A local directory as the location gets each file at its
full size, the zeros a hole (``ftruncate``), as :func:`download_snapshot` restores it: a copy
that mounts. Holes inside the prefix (a sparse local copy) are sent as zeros from one shared
buffer without being read.

:func:`download_snapshot` restores a location into an empty local directory: each file is
written as ``NAME.part``, summed as it arrives, its zero runs left as holes, then renamed; the
manifest is written last. ``snapshot-verify URI`` is :func:`engine.live.snapshot.verify_copy`
with the location's filesystem.

Errors name the file and the location (:class:`engine.errors.ObjectStoreError`); a location's
query parameters that carry secrets (``secret_key``, ``session_token``) are never printed.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..errors import ManifestError, ObjectStoreError
from ..format.crc import CHUNK, crc32c, crc32c_zeros, file_pieces
from ..service import workprogress
from .location import DEFAULT_WORKERS, explain, is_local, join, list_files, read_small
from .manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST,
    FileEntry,
    Manifest,
    parse_manifest,
    read_manifest_file,
)

if TYPE_CHECKING:
    import pyarrow.fs as pafs

T = TypeVar("T")

#: Bytes written to an output stream between two flushes (a flush waits for the parts sent).
FLUSH_EVERY = 64 << 20
#: A restored file's zero runs of this many aligned bytes stay holes (the page size).
HOLE_BLOCK = 4096
_zeros: bytes | None = None
_zeros_lock = threading.Lock()


def _zero_chunk() -> bytes:
    global _zeros
    if _zeros is None:
        with _zeros_lock:
            if _zeros is None:
                _zeros = bytes(CHUNK)
    return _zeros


def read_manifest(fs: pafs.FileSystem, base: str, where: str) -> tuple[Manifest, bytes] | None:
    """The location's ``SNAPSHOT.json``: ``(manifest, bytes)`` (its size checked against
    :data:`MAX_MANIFEST` before it is read, then :func:`engine.live.manifest.parse_manifest`),
    or None when there is none.

    Raises:
        ObjectStoreError: it cannot be read (server unreachable, credentials refused) or is
            over :data:`MAX_MANIFEST` bytes; the message names it and ``where``.
        ManifestError: it is not a manifest: ``where``, ``SNAPSHOT.json`` and the field.
    """
    data = read_small(fs, join(base, MANIFEST_NAME), MAX_MANIFEST, where)
    if data is None:
        return None
    try:
        return parse_manifest(data), data
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None


class _Stop(Exception):
    """Another file's transfer failed: stop this one."""


def _upload_one(
    src: str, rel: str, want: FileEntry, fs: pafs.FileSystem, dest: str, stop: threading.Event
) -> int:
    """Upload one file's stored prefix (its ``stored`` bytes; the
    zeros after it are neither read nor sent), summing it; returns the bytes sent. The sum,
    extended by the zeros up to ``size``, must be the manifest's crc32c. Raises ValueError
    (source damaged or not the manifest's size), OSError, _Stop."""
    size, stored = want.size, want.stored
    fd = os.open(os.path.join(src, *rel.split("/")), os.O_RDONLY | os.O_NOFOLLOW)
    try:
        have = os.fstat(fd).st_size
        if have != size:
            raise ValueError(f"the source file has {have} bytes, its manifest says {size}")
        crc = 0
        unflushed = 0
        zeros = _zero_chunk()
        with fs.open_output_stream(dest, compression=None) as out:

            def send(data: bytes) -> None:
                nonlocal unflushed
                if stop.is_set():
                    raise _Stop
                out.write(data)
                unflushed += len(data)
                if unflushed >= FLUSH_EVERY:  # waits for the parts in flight: bounded memory
                    out.flush()
                    unflushed = 0

            for n, chunk in file_pieces(fd, 0, stored):
                if chunk is None:  # a hole: zeros from the shared buffer, never read
                    crc = crc32c_zeros(crc, n)
                    for k in range(0, n, CHUNK):
                        send(zeros if n - k >= CHUNK else zeros[: n - k])
                else:
                    crc = crc32c(chunk, crc)
                    send(bytes(chunk))  # a copy: the view is reused for the next piece
            problem = want.crc_problem(crc, stored)  # the zeros the manifest says follow
            if problem is not None:
                raise ValueError(
                    f"the source file has {problem} (damaged source; no manifest written)"
                )
        if is_local(fs) and size > stored:
            # A local directory is a copy that mounts as a store: the file at its full size,
            # the zeros a hole (what snapshot-download makes of an object).
            os.truncate(dest, size)
        return stored
    finally:
        os.close(fd)


def _delete(fs: pafs.FileSystem, base: str, rel: str, where: str) -> None:
    """Delete the location's file ``rel`` (gone already: fine). Raises ObjectStoreError."""
    try:
        fs.delete_file(join(base, rel))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ObjectStoreError(f"deleting {rel} of {where}: {explain(exc)}") from None


def _transfer_error(doing: str, exc: BaseException) -> ObjectStoreError:
    """The error of a failed file transfer: what was being done, then why (a local file's
    OSError names that file; the rest as :func:`engine.live.location.explain` words it)."""
    text = explain(exc)
    if isinstance(exc, OSError) and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    return ObjectStoreError(f"{doing}: {text}")


def _run_all(
    items: Iterable[T],
    func: Callable[[T], int],
    workers: int,
    stop: threading.Event,
    bar: workprogress.ProgressBar,
) -> None:
    """Run ``func(item) -> bytes done`` for each item in ``workers`` threads, updating the
    progress ``bar`` as each ends (under a lock, from the worker); at the first exception set
    ``stop`` (the others end at their next piece) and raise it. At most ``4 * workers`` items
    are in flight: a million items cost no million futures."""
    lock = threading.Lock()

    def run(item: T) -> None:
        n = func(item)
        with lock:
            bar.update(n)

    window = workers * 4  # futures in flight: the rest wait as items, not as futures
    todo = iter(items)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rmq-objectstore") as pool:
        pending: set[Future[None]] = set()
        try:
            while True:
                for item in todo:
                    pending.add(pool.submit(run, item))
                    if len(pending) >= window:
                        break
                if not pending:
                    break
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    exc = fut.exception()
                    if exc is not None and not isinstance(exc, _Stop):
                        raise exc
        except BaseException:
            stop.set()
            for fut in pending:
                fut.cancel()
            raise


#: The name prefix of the object an upload keeps at its location while it runs
#: (``UPLOADING-<random hex>``, :func:`upload_snapshot`): two uploads to one location at once
#: would each write a manifest over the other's files
UPLOADING = "UPLOADING-"


def upload_snapshot(
    src: str,
    fs: pafs.FileSystem,
    base: str,
    where: str | None = None,
    workers: int | None = None,
    progress: workprogress.ProgressFactory | None = None,
    force: bool = False,
) -> dict:
    """Make the location ``base`` of ``fs`` a copy of the snapshot directory ``src`` (see the
    module docstring for the order of the steps).

    Args:
        src: a local directory holding ``SNAPSHOT.json`` and the files it names.
        fs, base: the location (:func:`open_location`).
        where: the location as printed in messages (default ``base``).
        workers: files uploaded at once (default :data:`DEFAULT_WORKERS`).
        progress: a progress factory (:mod:`engine.service.workprogress`): one bar ("upload",
            bytes to upload) updated as each file is done.
        force: go on although another upload's :data:`UPLOADING` marker is there (one that
            was killed; its marker is removed).

    An upload keeps a marker object (:data:`UPLOADING`) at the location while it runs: one
    that finds another's refuses to start, and one that finds another's appeared before its
    manifest is written refuses to write it (the location then holds no manifest; the next
    upload repairs it), so two uploads at once never leave one's manifest over the other's
    files.

    Returns:
        ``{"name", "commitLogOffset", "messageCount", "uploaded": [[rel, bytes], ...],
        "skipped": [[rel, bytes], ...], "deleted": [rel, ...], "uploadedBytes",
        "skippedBytes", "bytes", "seconds"}``: each file's bytes are its stored prefix (what
        an upload sends), ``uploadedBytes`` and ``skippedBytes`` their sums, ``bytes`` the
        files' sizes as restored (zeros included).

    Raises:
        ObjectStoreError: ``src`` is not a snapshot (no or a bad manifest, a file that does not
            match it), another upload to the location is under way, or a transfer failed (the
            message names the file and the location); the location then holds no manifest.
    """
    where = where or base
    start_t = time.monotonic()
    man_path = os.path.join(src, MANIFEST_NAME)
    try:
        doc, data = read_manifest_file(man_path)
    except FileNotFoundError:
        raise ObjectStoreError(
            f"{src} has no {MANIFEST_NAME} (not a snapshot or a copy of one)"
        ) from None
    except OSError as exc:
        raise ObjectStoreError(f"{man_path}: {exc.strerror or exc}") from None
    except ManifestError as exc:
        raise ManifestError(f"{src}: {exc}") from None
    # The marker goes first, then the location is read: of two uploads started together, each
    # finds the other's marker, or the second finds the first's, so never do both go on with
    # what they listed before the other began (a review had one skip every file as unchanged
    # and write its manifest over the other's files).
    mine = f"{UPLOADING}{os.urandom(8).hex()}"
    try:
        if is_local(fs):  # (object stores have no directories)
            fs.create_dir(base, recursive=True)
        with fs.open_output_stream(join(base, mine), compression=None) as out:
            out.write(f"{socket.gethostname()} pid {os.getpid()} at {time.time():.0f}\n".encode())
    except OSError as exc:
        raise ObjectStoreError(f"writing {mine} to {where}: {explain(exc)}") from None
    try:
        try:
            old = read_manifest(fs, base, where)
        except ManifestError:
            old = None  # a bad manifest there is replaced: every file is sent again
        remote = list_files(fs, base, where)
        markers = sorted(
            r for r in remote if r.startswith(UPLOADING) and "/" not in r and r != mine
        )
        running = [r for r in markers if not _marker_stale(fs, join(base, r))]
        if running and not force:
            raise ObjectStoreError(
                f"{where}: another upload to it is under way ({running[0]} is there): wait "
                "for it to end; if it was killed, upload again with --force"
            )
        for rel in markers:  # the markers of uploads that were killed (or forced past)
            _delete(fs, base, rel, where)
        return _upload(
            src, fs, base, where, workers, progress, doc, data, old, remote, mine, start_t
        )
    except _Overlapped:
        # Our marker stays, marked as an overlap's: the other upload, which may have listed
        # the location before our files went there, finds it at its own end and writes no
        # manifest either; an upload started later takes it for stale (it proceeds once no
        # upload runs). The location holds no snapshot until an upload runs alone.
        try:
            with fs.open_output_stream(join(base, mine), compression=None) as out:
                out.write(f"{_OVERLAP} {socket.gethostname()} pid {os.getpid()}\n".encode())
        except OSError:
            pass  # (stale once this process is gone, as any of this host's)
        mine = ""
        raise
    finally:
        if mine:
            try:
                _delete(fs, base, mine, where)
            except ObjectStoreError:  # (the server gone too): known as no running upload's
                _ABANDONED.add(mine)


class _Overlapped(ObjectStoreError):
    """An upload found another's marker at its end: neither writes a manifest."""


#: The first word of the marker an upload leaves when it overlapped another (:class:`_Overlapped`)
_OVERLAP = "overlapped"


#: Seconds after which another host's upload marker is taken for one of an upload that was
#: killed (one of this host's is as soon as its process is gone)
MARKER_STALE = 12 * 3600
#: markers of this process's uploads that ended (failed) without removing them
_ABANDONED: set[str] = set()


def _marker_stale(fs: pafs.FileSystem, path: str) -> bool:
    """Whether the :data:`UPLOADING` marker at ``path`` is an upload's that no longer runs: one
    of this host's whose process is gone, or one this process left when its upload failed, or
    one an upload left when it overlapped another (:data:`_OVERLAP`), or one older than
    :data:`MARKER_STALE`."""
    if path.rpartition("/")[2] in _ABANDONED:
        return True
    try:
        raw = read_small(fs, path, 512, path)
        info = fs.get_file_info(path)
    except (OSError, ObjectStoreError):
        return False  # (cannot tell: taken for a running one)
    if raw is None:
        return True  # gone meanwhile
    text = raw.decode("utf-8", "replace").split()
    if text[:1] == [_OVERLAP]:
        return True  # an upload's that overlapped another and ended (it writes it last)
    if len(text) >= 3 and text[0] == socket.gethostname() and text[2].isdigit():
        try:
            os.kill(int(text[2]), 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass
    mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
    return time.time() - mtime > MARKER_STALE


def _upload(
    src: str,
    fs: pafs.FileSystem,
    base: str,
    where: str,
    workers: int | None,
    progress: workprogress.ProgressFactory | None,
    doc: Manifest,
    data: bytes,
    old: tuple[Manifest, bytes] | None,
    remote: dict[str, int],
    mine: str,
    start_t: float,
) -> dict:
    """:func:`upload_snapshot`'s steps once its marker ``mine`` is at the location (``old``:
    the manifest there, ``remote``: its listing, both read before)."""
    files = doc.files
    if old is not None or MANIFEST_NAME in remote:
        _delete(fs, base, MANIFEST_NAME, where)
    old_files = old[0].files if old is not None else None
    upload: list[str] = []
    skipped: list[str] = []
    for rel, want in files.by_weight(stored=True):  # big files first: the threads end together
        prev = old_files.get(rel) if old_files is not None else None
        # The same file (size and sum) is there when its object holds at least the stored
        # prefix and at most the whole file (an older upload sent it whole): readers take
        # the first stored bytes and zeros after them, which the sums say match.
        same = (
            prev is not None
            and prev.size == want.size
            and prev.crc32c == want.crc32c
            and want.stored <= remote.get(rel, -1) <= want.size
        )
        (skipped if same else upload).append(rel)
    stored = files.__getitem__

    if is_local(fs):  # object stores have no directories; a local target needs them
        for parent in sorted({rel.rpartition("/")[0] for rel in upload}):
            try:
                fs.create_dir(join(base, parent) if parent else base, recursive=True)
            except OSError as exc:
                raise ObjectStoreError(f"creating {join(where, parent)}: {exc}") from None

    stop = threading.Event()
    done = workprogress.bar(progress, sum(stored(r).stored for r in upload), "upload")

    def one(rel: str) -> int:
        try:
            return _upload_one(src, rel, files[rel], fs, join(base, rel), stop)
        except _Stop:
            raise
        except (OSError, ValueError, EOFError) as exc:
            raise _transfer_error(f"uploading {rel} to {where}", exc) from None

    try:
        _run_all(upload, one, workers or DEFAULT_WORKERS, stop, done)
    finally:
        done.close()

    deleted = sorted(
        rel
        for rel in remote
        if rel not in files and rel != MANIFEST_NAME and not rel.startswith(UPLOADING)
    )
    for rel in deleted:
        _delete(fs, base, rel, where)
    started = sorted(
        r for r in list_files(fs, base, where) if r.startswith(UPLOADING) and r != mine
    )
    if started:  # another upload began meanwhile: its files and ours are mixed now
        raise _Overlapped(
            f"{where}: another upload to it started meanwhile ({started[0]}); this one wrote no "
            f"{MANIFEST_NAME}, so the location holds no snapshot until an upload ends alone "
            "(upload again once the other has ended)"
        )
    try:
        with fs.open_output_stream(join(base, MANIFEST_NAME), compression=None) as out:
            out.write(data)
    except OSError as exc:
        raise ObjectStoreError(f"writing {MANIFEST_NAME} to {where}: {explain(exc)}") from None
    return {
        "name": doc.get("name"),
        "commitLogOffset": doc.get("commitLogOffset"),
        "messageCount": doc.get("messageCount"),
        "uploaded": [[r, stored(r).stored] for r in sorted(upload)],
        "skipped": [[r, stored(r).stored] for r in sorted(skipped)],
        "deleted": deleted,
        "uploadedBytes": sum(stored(r).stored for r in upload),
        "skippedBytes": sum(stored(r).stored for r in skipped),
        "bytes": files.total_size(),
        "seconds": round(time.monotonic() - start_t, 3),
    }


def _write_sparse(fd: int, data: memoryview, offset: int) -> None:
    """Write ``data`` at ``offset`` of a new file, leaving each :data:`HOLE_BLOCK` of zeros
    unwritten (a hole); runs of non-zero blocks go in one ``pwrite``."""
    arr = np.frombuffer(data, dtype=np.uint8)
    blocks = -(-len(arr) // HOLE_BLOCK)
    pad = np.zeros(blocks * HOLE_BLOCK, dtype=np.uint8)
    pad[: len(arr)] = arr
    used = list(np.asarray(pad.reshape(blocks, HOLE_BLOCK).any(axis=1)).tolist())
    i = 0
    while i < blocks:
        if not used[i]:
            i += 1
            continue
        j = i
        while j < blocks and used[j]:
            j += 1
        start, end = i * HOLE_BLOCK, min(j * HOLE_BLOCK, len(arr))
        while start < end:
            start += os.pwrite(fd, data[start:end], offset + start)
        i = j


def _download_one(
    fs: pafs.FileSystem, path: str, dest: str, want: FileEntry, stop: threading.Event
) -> int:
    """Download one file to ``dest`` (through ``dest.part``), zero runs as holes; returns the
    bytes downloaded. The object holds at least the file's stored prefix
    (:func:`engine.live.snapshot.stored_size`) and at most its ``size``; the file is then cut
    to ``size`` (``ftruncate``: the rest a hole) and its sum, extended by those zeros, must be
    the manifest's crc32c. Raises ValueError (short, longer, damaged), OSError, _Stop."""
    size, stored = want.size, want.stored
    part = dest + ".part"
    try:
        f = fs.open_input_stream(path, compression=None)
    except FileNotFoundError:
        raise ValueError("missing") from None
    fd = -1
    ok = False
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        crc = n = 0
        while n <= size:
            if stop.is_set():
                raise _Stop
            buf = f.read_buffer(min(CHUNK, size + 1 - n))
            if not buf.size:
                break
            crc = crc32c(buf, crc)
            _write_sparse(fd, memoryview(buf), n)
            n += buf.size
        if n < stored:
            raise ValueError(f"short: {n} of {stored} bytes")
        if n > size:
            raise ValueError(f"longer than the manifest's {size} bytes")
        problem = want.crc_problem(crc, n)
        if problem is not None:
            raise ValueError(f"damaged: {problem}")
        os.ftruncate(fd, size)
        os.fsync(fd)
        ok = True
    finally:
        f.close()
        if fd >= 0:
            os.close(fd)
        if fd >= 0 and not ok:
            try:
                os.unlink(part)
            except OSError:
                pass
    os.replace(part, dest)
    return n


def download_snapshot(
    fs: pafs.FileSystem,
    base: str,
    dest: str,
    where: str | None = None,
    workers: int | None = None,
    progress: workprogress.ProgressFactory | None = None,
) -> dict:
    """Restore the snapshot at ``base`` of ``fs`` into the local directory ``dest`` (new or
    empty): every file the manifest names, checked against its size and CRC32C as it arrives
    (written as ``NAME.part``, renamed when whole; zero runs of :data:`HOLE_BLOCK` bytes
    and everything past the object's end, up to the file's ``size``, left as holes), then
    ``SNAPSHOT.json``. The directory then mounts (``rmqfs mount DEST MNT``): each file has
    its manifest ``size`` (a 1 GiB segment is 1 GiB, sparse), as a broker expects.

    Returns:
        ``{"name", "commitLogOffset", "messageCount", "files", "bytes", "downloadedBytes",
        "seconds"}``: ``bytes`` the files' sizes, ``downloadedBytes`` what the objects held.

    Raises:
        ObjectStoreError: the location holds no manifest (an upload that did not finish, or
            not a snapshot), ``dest`` is not empty, a file is missing, short or damaged, or a
            transfer failed: the message names the file and the location; ``dest`` then holds
            no manifest.
    """
    where = where or base
    start_t = time.monotonic()
    read = read_manifest(fs, base, where)
    if read is None:
        raise ObjectStoreError(
            f"{where} has no {MANIFEST_NAME}: not a snapshot, or an upload that did not finish"
        )
    doc, data = read
    files = doc.files
    # a file is written through "<name>.part" and the manifest last through its own: a
    # manifest naming one of those too (no store does) would have them overwrite each other
    clash = next(
        (r for r in files if r.endswith(".part") and (r[:-5] in files or r[:-5] == MANIFEST_NAME)),
        None,
    )
    if clash is not None:
        raise ObjectStoreError(
            f"{where}: {MANIFEST_NAME} names both {clash[:-5]} and {clash}, which a download "
            "writes through: not a snapshot rmqfs wrote, nothing downloaded"
        )
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise ObjectStoreError(f"{dest}: not an empty directory (restore into a new one)")
    os.makedirs(dest, exist_ok=True)
    made: set[str] = set()
    for rel in files:  # parents one level at a time (paths are at most MAX_PATH_PARTS deep)
        parent = rel.rpartition("/")[0]
        if parent and parent not in made:
            path = dest
            for part in parent.split("/"):
                path = os.path.join(path, part)
                if not os.path.isdir(path):
                    os.mkdir(path)
            made.add(parent)
    stop = threading.Event()
    done = workprogress.bar(progress, files.total_stored(), "download")
    got = [0]
    got_lock = threading.Lock()

    def one(item: tuple[str, FileEntry]) -> int:
        rel, want = item
        local = os.path.join(dest, *rel.split("/"))
        try:
            n = _download_one(fs, join(base, rel), local, want, stop)
        except _Stop:
            raise
        except (OSError, ValueError) as exc:
            raise _transfer_error(f"downloading {rel} from {where}", exc) from None
        with got_lock:
            got[0] += n
        return n

    try:
        _run_all(files.by_weight(stored=True), one, workers or DEFAULT_WORKERS, stop, done)
    finally:
        done.close()
    tmp = os.path.join(dest, MANIFEST_NAME + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(dest, MANIFEST_NAME))
    return {
        "name": doc.get("name"),
        "commitLogOffset": doc.get("commitLogOffset"),
        "messageCount": doc.get("messageCount"),
        "files": len(files),
        "bytes": files.total_size(),
        "downloadedBytes": got[0],
        "seconds": round(time.monotonic() - start_t, 3),
    }
