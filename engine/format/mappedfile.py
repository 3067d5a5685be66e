"""A sequence of fixed-size files named by their 20-digit start offset (``MappedFileQueue``).

RocketMQ keeps the CommitLog, each ConsumeQueue and the batch queues as a directory of files of
one size, each named ``UtilAll.offset2FileName(fileFromOffset)`` (docs/format.md). Nothing
on disk records the write position: the owner derives it by scanning and calls
:meth:`FileQueue.truncate_dirty`.

Files are created at their full size as sparse files (``ftruncate``), like RocketMQ's
preallocated mapped files, so a broker loading the directory finds the length it expects. Reads
use ``os.pread`` and read-only mmaps, which are safe to call from several threads. A
:class:`FileQueue` writes through a shared writable mmap of the file it appends to (no system
call per write, as RocketMQ's ``MappedFile.appendMessage`` into its ``MappedByteBuffer``), with
the blocks under it allocated ahead (``posix_fallocate``, :data:`ALLOC_STEP` at a time), so a
full disk is an ``OSError(ENOSPC)`` from that call, before anything is written, never a SIGBUS
from a store into a hole.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import itertools
import mmap
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable

from ..errors import CorruptRecordError
from .source import LOCAL, StoreSource

SEGMENT_NAME = re.compile(r"[0-9]{20}\Z")  # offset2FileName: 20 ASCII digits


#: The largest offset a segment may reach: RocketMQ's offsets are Java longs
#: (``UtilAll.offset2FileName(long)``, ConsumeQueue units and the checkpoint store them as
#: 8-byte signed integers), so a segment's start plus its size stays at or below 2^63 - 1.
MAX_OFFSET = (1 << 63) - 1


def offset_problem(start: int, size: int) -> str | None:
    """Why a segment named ``start`` (bytes, its name) with ``size`` bytes cannot be one of a
    RocketMQ store's, or None: it must end at or below :data:`MAX_OFFSET`."""
    if start + size > MAX_OFFSET:
        return (
            f"named offset {start}, but a segment of {size} bytes there ends past "
            f"{MAX_OFFSET}, the largest offset RocketMQ addresses (a Java long): not a segment "
            "of a RocketMQ store; move it out of the directory"
        )
    return None


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the offset zero-padded to 20 digits."""
    return f"{offset:020d}"


#: Bytes of a file allocated at a time ahead of :class:`FileQueue`'s mapped writes (capped by
#: the file's size): one ``posix_fallocate`` per this many bytes appended.
ALLOC_STEP = 1 << 20
#: Smallest allocation step (files of up to 64 of these: a ConsumeQueue's, small segments)
ALLOC_STEP_MIN = 64 << 10
PAGE = mmap.PAGESIZE
#: Writes from this size on go out with ``pwrite`` instead of the mapping: a mapped write pays
#: a page fault for each new page (and writeback a write-protect of each), which costs more
#: than the kernel's copy for a batch; a single record, unit or index entry saves its system
#: call.
MAPPED_WRITE_MAX = 4096

TMP_SUFFIX = ".tmp"  # files being built; never part of a queue, removed when a store opens


def create_preallocated(path: str, size: int, exclusive: bool = False) -> int:
    """Create ``path`` at its full ``size`` (bytes) as a sparse file and return an O_RDWR fd.

    RocketMQ preallocates its mapped files, and a broker refuses a file of another length
    ("length not matched"), so the file appears whole or not at all: it is built without a
    name (``O_TMPFILE``), sized with ``ftruncate`` (no free blocks needed) and fsynced, then
    linked into place (``linkat``), and the directory is fsynced. A crash at any point leaves
    either no ``path`` or one of the full size, and nothing else in the directory (a broker
    would choke on any other file name there). Where the filesystem has no ``O_TMPFILE``, the
    file is built as ``<path>.tmp`` and renamed; :func:`remove_temp_files` removes a leftover
    when the store opens.

    Raises:
        FileExistsError: ``exclusive`` and ``path`` exists.
        OSError: from the disk (ENOSPC, EACCES, ...); nothing is left behind then.
    """
    directory = os.path.dirname(path) or "."
    if exclusive and os.path.lexists(path):
        raise FileExistsError(errno.EEXIST, "file exists", path)
    tmp = None
    try:
        fd = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        tmp = path + TMP_SUFFIX
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
        if tmp is None:
            try:
                _link_fd(fd, path)
            except FileExistsError:
                if exclusive:
                    raise
                tmp = path + TMP_SUFFIX
                _link_fd(fd, tmp)
                os.rename(tmp, path)
        elif exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.rename(tmp, path)
        fsync_dir(directory)
    except BaseException:
        os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    return fd


def _link_fd(fd: int, path: str) -> None:
    """Give the unnamed (O_TMPFILE) file ``fd`` the name ``path``: ``linkat`` of
    /proc/self/fd/N with AT_SYMLINK_FOLLOW (a directory fd makes os.link use linkat)."""
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fd}", os.path.basename(path), dst_dir_fd=dfd, follow_symlinks=True)
    finally:
        os.close(dfd)


def remove_temp_files(directory: str) -> list[str]:
    """Delete the ``*.tmp`` files a crash left in ``directory`` (not recursive).

    Returns their names. Only regular files (or links) named ``*.tmp`` are removed; a missing
    directory is no error.
    """
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    gone = []
    for n in names:
        if n.endswith(TMP_SUFFIX):
            p = os.path.join(directory, n)
            if os.path.islink(p) or os.path.isfile(p):
                os.unlink(p)
                gone.append(n)
    return gone


class Segment:
    """One file of a :class:`MappedFiles` / :class:`FileQueue`: ``[start, start + size)`` of the
    logical byte space; ``fd`` its descriptor (a :class:`FileQueue`'s), -1 where the file is
    only listed (:class:`MappedFiles`: mapped when read) or once closed.

    The segment owns its descriptor: :meth:`close` closes it (the queue's close, a truncation),
    and a segment dropped from its queue without one (expiry, a follower's look at files the
    writer deleted) closes it when the last holder lets go of it: a reader that took the segment
    before the file was deleted reads the deleted file's bytes through it for as long as it
    holds it, and its number is never another file's meanwhile (RocketMQ's
    ``ReferenceResource``: a MappedFile is destroyed once its last reference is released)."""

    __slots__ = ("start", "path", "fd", "size")

    def __init__(self, start: int, path: str, fd: int, size: int):
        self.start = start
        self.path = path
        self.fd = fd
        self.size = size

    def close(self) -> None:
        """Close the descriptor now (a second call, or a listed-only file: nothing to do);
        ``fd`` is -1 after, so a late reader gets EBADF, never another file's bytes."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        if self.fd >= 0:
            self.close()

    @property
    def end(self) -> int:
        """First offset after this file."""
        return self.start + self.size


def _segment_start(seg: Segment) -> int:
    return seg.start


#: a read-only mapping of one segment file, what :meth:`MappedFiles.locate` hands out
SegmentMap = mmap.mmap


class MappedFiles:
    """A directory of files of one size named by their 20-digit start offset
    (``MappedFileQueue``), addressed by absolute byte offset and read through read-only mmaps:
    the one model of a segmented file. This class is its read-only mode, what a reader of a
    store another process may be writing uses (``engine.read.columnar``: the CommitLog of
    ``StoreFiles`` and each ConsumeQueue; verify; the mount's render workers);
    :class:`FileQueue` adds the descriptors and the writes.

    Files are opened ``O_RDONLY``, mapped lazily (the first read of each, :meth:`locate`),
    never written, created or deleted, and no lock file is taken. The listing
    (:meth:`refresh`) tolerates what a live writer leaves: empty files (being created) are
    skipped, files deleted meanwhile dropped, a gap tolerated (an offset in a missing file
    reads as absent). Reading a CommitLog of a broker's store: ``MappedFile.selectMappedBuffer``
    over ``MappedFileQueue.findMappedFileByOffset``.

    Attributes:
        segments: the files, in offset order (:class:`Segment`; replaced as a whole, never
            changed in place, so a reader that takes it once sees one consistent list).
        file_size: the segment size (here the largest listed file's); 0 without files.
    """

    read_only = True

    def __init__(self, directory: str, *, listed: bool = True, source: StoreSource = LOCAL):
        self.directory = directory
        #: where the files are read from (:mod:`engine.format.source`): a source that is not
        #: local is never mapped; its bytes come by range (:meth:`span`, :meth:`pread_segment`)
        self.source = source
        self._lock = threading.Lock()
        self.segments: list[Segment] = []
        self.file_size = 0
        self.maps: dict[int, mmap.mmap] = {}  # locate's mappings, by file start
        self.views: dict[int, mmap.mmap] = {}  # file_view's mappings (closed by close())
        if listed:
            self.refresh()

    @property
    def lock(self) -> threading.Lock:
        """Guards swaps of :attr:`segments` and the creation of a mapping: whoever replaces
        the list (expiry, a follower's refresh) does it under this lock, and whoever needs the
        list and its descriptors to stay together (a snapshot) reads it under it; plain
        readers take the list once."""
        return self._lock

    def refresh(self) -> list[Segment]:
        """Re-list the files (new segments, segments deleted by retention); returns the
        segments no longer listed."""
        listed = [
            (start, size) for start, size in list_segments(self.directory, self.source) if size
        ]
        old = self.segments
        self.segments = [
            Segment(start, os.path.join(self.directory, offset_to_file_name(start)), -1, size)
            for start, size in listed
        ]
        self.file_size = max(size for _, size in listed) if listed else 0
        present = {start for start, _ in listed}
        gone = [seg for seg in old if seg.start not in present]
        self.forget_maps(seg.start for seg in gone)
        return gone

    def oldest_gone(self) -> bool:
        """Whether the oldest listed file is no longer on the disk (deleted by expiry, by this
        process or by a writer another process follows, before this listing caught up).
        Local files only (False for another source)."""
        segs = self.segments
        return bool(segs) and self.source.local and not os.path.lexists(segs[0].path)

    def forget_maps(self, starts: Iterable[int]) -> None:
        """Drop the mappings kept of the files that start at ``starts`` (deleted by expiry, or
        gone from the listing), so their blocks go back to the disk as RocketMQ's
        ``MappedFile.destroy`` gives them back: not closed here, a reader that took one a
        moment ago still reads it, and it is unmapped with its last reference."""
        with self._lock:
            for start in starts:
                self.maps.pop(start, None)
                self.views.pop(start, None)

    def _relist(self) -> None:
        """What :meth:`locate` does when no listed file holds an offset: list again."""
        self.refresh()

    @property
    def min_offset(self) -> int:
        """Start offset of the first file (``getMinOffset``), 0 when there is none."""
        segs = self.segments
        return segs[0].start if segs else 0

    @property
    def end_offset(self) -> int:
        """End of the last file, 0 when there is none."""
        segs = self.segments
        return segs[-1].end if segs else 0

    def find(self, offset: int) -> Segment | None:
        """The file holding ``offset`` (``findMappedFileByOffset``): the one named by
        ``offset`` rounded down to :attr:`file_size`, or None."""
        segs = self.segments
        fs = self.file_size
        if not segs or not fs or offset < segs[0].start or offset >= segs[-1].end:
            return None
        i = (offset - segs[0].start) // fs
        if i < len(segs):
            seg = segs[i]
            if seg.start <= offset < seg.end:
                return seg
        # a listing with a gap or a short file (a reader's): the file named by the offset
        start = offset - offset % fs
        i = bisect.bisect_right(segs, start, key=_segment_start) - 1
        if i >= 0 and segs[i].start == start and offset < segs[i].end:
            return segs[i]
        return None

    def release_pages(self) -> None:
        """Unmap the pages read so far from every mapped file (``MADV_DONTNEED``): they stay
        in the page cache, but leave this process's RSS (which otherwise grows to every file
        read, in every process that reads it). A later read maps them again (a minor fault a
        page). Safe while another thread reads: a read-only file mapping loses nothing."""
        with self._lock:
            maps = list(itertools.chain(self.maps.values(), self.views.values()))
        for m in maps:
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):  # closed meanwhile
                pass

    def _map(self, seg: Segment) -> mmap.mmap | None:
        m = self.maps.get(seg.start)
        if m is None:
            with self._lock:
                m = self.maps.get(seg.start)
                if m is None:
                    try:
                        if seg.fd >= 0:  # a FileQueue's file: its own descriptor
                            m = mmap.mmap(seg.fd, 0, access=mmap.ACCESS_READ)
                        else:  # never through a link (ELOOP), never a FIFO
                            fd = self.open_file(seg.start)
                            try:
                                m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                            finally:
                                os.close(fd)
                    except (FileNotFoundError, ValueError):
                        return None
                    self.maps[seg.start] = m
        return m

    @property
    def ranged(self) -> bool:
        """Whether :meth:`span` reads by range (a source that is not local): a reader then
        asks for what it needs, since the cost grows with the span."""
        return not self.source.local

    def span(self, offset: int, end: int) -> tuple[bytes | mmap.mmap, int] | None:
        """``(buffer, base)`` holding the bytes ``[offset, end)`` (``end`` clipped to the end of
        the file holding ``offset``): ``buffer[x - base]`` is the byte at ``x``. A local file's
        buffer is its whole mapping (:meth:`locate`); a source that is not local gives the
        cached block that holds the range (``StoreSource.window``, no copy), else reads just
        the range (a reader of object storage asks for what it needs, never a whole segment).
        None when no file holds ``offset``.

        Raises:
            OSError: as :meth:`locate`; ObjectStoreError: the range could not be read.
        """
        if self.source.local:
            loc = self.locate(offset)
            return None if loc is None else (loc[0], offset - loc[1])
        seg = self._find_listed(offset)
        if seg is None:
            return None
        pos = offset - seg.start
        win = self.source.window(seg.path, pos)  # the cached block: no copy
        if win is not None and pos - win[1] + min(end, seg.end) - offset <= len(win[0]):
            return win[0], seg.start + win[1]
        return self.pread_segment(seg, min(end, seg.end) - offset, pos), offset

    def _find_listed(self, offset: int) -> Segment | None:
        """:meth:`find`, listing the files again once when none holds ``offset``."""
        if not self.file_size or offset < 0:
            return None
        seg = self.find(offset)
        if seg is None:
            self._relist()
            seg = self.find(offset)
        return seg

    def pread_segment(self, seg: Segment, length: int, pos: int) -> bytes:
        """Up to ``length`` bytes at ``pos`` in file ``seg`` (fewer at its end): its descriptor
        when it has one, else the source's range read.

        Raises:
            OSError; ObjectStoreError: the source could not read the range.
        """
        if seg.fd >= 0:
            return os.pread(seg.fd, length, pos)
        return self.source.pread(seg.path, length, pos)

    def locate(self, offset: int) -> tuple[mmap.mmap, int] | None:
        """``(read-only mapping of the file holding offset, position in it)`` or None (no such
        file, even after listing again). A file that grew since it was mapped is mapped
        again. The mapping is kept until :meth:`close`. Local files only (:meth:`span` reads
        any source).

        Raises:
            OSError: ELOOP when the file is a link (never followed: :meth:`open_file`),
                EACCES when it is not a regular file."""
        if not self.source.local:
            return None
        seg = self._find_listed(offset)
        if seg is None:
            return None
        m = self._map(seg)
        if m is None:
            return None
        pos = offset - seg.start
        if pos >= len(m):  # the file grew since it was mapped
            with self._lock:
                self.maps.pop(seg.start, None)
            m = self._map(seg)
            if m is None or pos >= len(m):
                return None
        return m, pos

    def open_file(self, start: int) -> int:
        """A read-only descriptor of the file named by ``start`` (whatever its size or
        alignment; listed by :meth:`refresh` or not), opened without following a link
        (``O_NOFOLLOW``; ``O_NONBLOCK`` so a FIFO never blocks) and refused unless a regular
        file. The caller closes it.

        Raises:
            OSError: ENOENT, ELOOP for a link, EACCES for anything but a regular file, ...
        """
        path = os.path.join(self.directory, offset_to_file_name(start))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EACCES, "not a regular file", path)
        return fd

    def file_view(self, start: int) -> mmap.mmap | None:
        """Read-only mapping of the whole file named by ``start``, opened as :meth:`open_file`
        does, whatever its size or alignment (for a checker that must read misnamed or
        mis-sized files, which :meth:`locate` cannot address); None for an empty file. Kept
        until :meth:`close`. OSErrors of the open propagate."""
        m = self.views.get(start)
        if m is None:
            with self._lock:
                m = self.views.get(start)
                if m is None:
                    fd = self.open_file(start)
                    try:
                        m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                    except ValueError:  # empty file
                        return None
                    finally:
                        os.close(fd)
                    self.views[start] = m
        return m

    def pread_file(self, start: int, length: int, pos: int) -> bytes:
        """Up to ``length`` bytes at ``pos`` (fewer at its end) of the file named by ``start``,
        whatever its size or alignment, listed or not (for a checker that must read misnamed
        or mis-sized files, as :meth:`file_view` maps them): a local file opened as
        :meth:`open_file` does, else one range read of the source.

        Raises:
            OSError: as :meth:`open_file`; ObjectStoreError: the source could not read it.
        """
        if not self.source.local:
            path = os.path.join(self.directory, offset_to_file_name(start))
            return self.source.pread(path, length, pos)
        fd = self.open_file(start)
        try:
            return os.pread(fd, length, pos)
        finally:
            os.close(fd)

    def data_ranges(self, start: int, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``[lo, hi)`` (positions in the file named by ``start``) that may hold
        data, in order: the holes of a sparse file are left out (``SEEK_DATA``/``SEEK_HOLE``),
        so a new preallocated segment costs nothing to check. Where ``SEEK_DATA`` fails (ENXIO:
        only a hole up to the end) nothing more is data; where ``SEEK_HOLE`` fails the data
        runs to ``hi``."""
        out: list[tuple[int, int]] = []
        fd = self.open_file(start)
        try:
            p = lo
            while p < hi:
                try:
                    p = os.lseek(fd, p, os.SEEK_DATA)
                except OSError:
                    break
                if p >= hi:
                    break
                try:
                    hole = os.lseek(fd, p, os.SEEK_HOLE)
                except OSError:
                    hole = hi
                stop = min(hi, hole)
                out.append((p, stop))
                p = stop
        finally:
            os.close(fd)
        return out

    def close(self) -> None:
        """Unmap every file (buffers already taken from them keep their own copies); the
        listing stays."""
        with self._lock:
            for m in itertools.chain(self.maps.values(), self.views.values()):
                try:
                    m.close()
                except BufferError:  # still exported by a live numpy view: dropped with it
                    pass
            self.maps.clear()
            self.views.clear()


class FileQueue(MappedFiles):
    """:class:`MappedFiles` opened for writing (or, ``read_only``, opened once and followed):
    each file's descriptor kept, files of ``file_size`` bytes created, written, truncated and
    deleted (``MappedFileQueue``). Its files read through mmaps as well (:meth:`locate`).

    Args:
        directory: where the files are (created on first write).
        file_size: bytes per file; when files exist, their size wins (pass ``None`` to require
            it from the files).
        read_only: open files read-only and never create or delete any.
        trusted_size: ``file_size`` is known for sure (e.g. from other queues), so a lone file
            shorter than it is a torn file rather than a smaller segment size.
        derived: the files can be rebuilt (ConsumeQueue): files after a missing one are
            dropped instead of refusing the load.

    Raises:
        CorruptRecordError: files of different sizes, or names that are not 20-digit offsets
            aligned to the size.
    """

    def __init__(
        self,
        directory: str,
        file_size: int | None,
        read_only: bool = False,
        *,
        trusted_size: bool = False,
        derived: bool = False,
        source: StoreSource = LOCAL,
    ):
        super().__init__(directory, listed=False, source=source)
        if not source.local and not read_only:
            raise ValueError(f"{directory}: only a local store is written")
        self.read_only = read_only
        # bytes up to which the files' mtimes show the writes (touch_written); the owner says
        # where its data ends once it knows (mark_touched)
        self._touched_to = 0
        # the writable mapping of the file written last (:meth:`write`; None in it: that file
        # takes pwrite) and the end of the range allocated under it (a position in the file)
        self._wmap: tuple[Segment, mmap.mmap | None] | None = None
        self._allocated = 0
        self.repairs: list[str] = []  # what load had to repair (for logs and reports)
        if not read_only:
            for n in remove_temp_files(directory):
                self.repairs.append(f"removed {n} (a file a crash left half-created)")
        listed = list_segments(directory, source) if source.isdir(directory) else []
        names = [offset_to_file_name(start) for start, _ in listed]
        sizes = [size for _, size in listed]
        # MappedFileQueue.load: a zero-length last file is deleted.
        while names and sizes[-1] == 0:
            if not read_only:
                os.unlink(os.path.join(directory, names[-1]))
            names.pop()
            sizes.pop()
        # Every file but the last must have the segment size. The last one may be shorter when
        # a crash tore it (a broker refuses such a queue; here it is zero-extended, so the torn
        # part reads as the end of the data and recovery truncates there).
        body = set(sizes[:-1])
        if len(body) > 1:
            raise CorruptRecordError(
                f"{directory}: files of different sizes {sorted(body)}; all must be equal"
            )
        if body:
            size = body.pop()
            if sizes[-1] > size:
                raise CorruptRecordError(
                    f"{directory}: last file is {sizes[-1]} bytes, larger than the others ({size})"
                )
            file_size = size
        elif sizes and not (trusted_size and file_size and sizes[0] < file_size):
            file_size = sizes[0]
        if not file_size or file_size <= 0:
            raise ValueError(f"{directory}: no files and no file size given")
        self.file_size = file_size
        flags = (os.O_RDONLY if read_only else os.O_RDWR) | os.O_NOFOLLOW
        for n, size in zip(names, sizes):
            start = int(n)
            path = os.path.join(directory, n)
            if start % file_size:
                raise CorruptRecordError(f"{directory}/{n}: start not a multiple of {file_size}")
            problem = offset_problem(start, file_size)
            if problem is not None:
                raise CorruptRecordError(f"{directory}/{n}: {problem}")
            if self.segments and start != self.segments[-1].end:
                if not derived:
                    raise CorruptRecordError(f"{directory}/{n}: gap after the previous file")
                # A ConsumeQueue is derived data: drop what follows the gap; recovery
                # re-dispatches it from the CommitLog.
                self.repairs.append(f"gap before {n}: later files dropped")
                if not read_only:
                    for later in names[names.index(n) :]:
                        os.unlink(os.path.join(directory, later))
                break
            fd = os.open(path, flags) if source.local else -1  # not local: read by range
            if size < file_size:
                self.repairs.append(f"{n} is {size} bytes, short of {file_size}: zero-extended")
                if not read_only:
                    os.ftruncate(fd, file_size)
            self.segments.append(Segment(start, path, fd, file_size))

    # -- lookup -----------------------------------------------------------------------------
    def refresh(self, add: bool = True) -> list[Segment]:
        """Make :attr:`segments` match the directory, for a read-only queue another process
        writes (a follower's): drop the files the writer deleted, and with ``add`` append the
        new full-size files that continue the list (a file being created, size 0 until its
        ``ftruncate``, or one that is not ours ends the walk). A file in the middle cannot
        vanish alone: the run of files that ends at the newest one is kept.

        The list is replaced as a whole under :attr:`lock`, so readers (:meth:`find`) always
        see one consistent list. Returns the segments dropped: their descriptors close when
        the last reader holding one lets go of it (:class:`Segment`).
        """
        names = segment_names(self.directory)  # [] once the directory is gone
        present = {int(n) for n in names}
        old = self.segments
        keep = [seg for seg in old if seg.start in present]
        run: list[Segment] = []
        for seg in keep:
            if run and seg.start != run[-1].end:
                run = []
            run.append(seg)
        keep = run
        gone = [seg for seg in old if seg not in keep]
        if add:
            nxt = keep[-1].end if keep else None
            for n in names:
                start = int(n)
                if nxt is not None and start < nxt:
                    continue
                if nxt is not None and start != nxt:
                    break
                path = os.path.join(self.directory, n)
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    break
                size = os.fstat(fd).st_size
                if not keep and size > 0 and start % size == 0:
                    self.file_size = size  # the first file of a new queue: its size is the size
                if size != self.file_size or start % self.file_size:
                    os.close(fd)  # being created (size 0 until ftruncate), or not ours
                    break
                keep.append(Segment(start, path, fd, self.file_size))
                nxt = start + self.file_size
        if gone or len(keep) != len(old):
            with self._lock:  # readers take the list once (find) or under it (snapshots)
                self.segments = keep
        return gone

    def _relist(self) -> None:
        """A FileQueue's list is its own (the writer's, or what :meth:`refresh` followed):
        :meth:`locate` never lists again."""

    def dup_segments(self, dup: Callable[[int], int] = os.dup) -> list[tuple[int, int, int]]:
        """``(start offset, dup of its descriptor, size)`` of every segment, taken under
        :attr:`lock` (the descriptors stay valid after an expiry unlinks the files).
        ``dup``: the duplicating function (the caller's, to track what it must close)."""
        with self._lock:
            return [(s.start, dup(s.fd), s.size) for s in self.segments]

    def roll_next(self, offset: int) -> int:
        """Start of the file after the one holding ``offset`` (``rollNextFile``)."""
        return offset + self.file_size - offset % self.file_size

    # -- I/O --------------------------------------------------------------------------------
    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``, never crossing a file end; b"" if no file."""
        seg = self.find(offset)
        if seg is None:
            return b""
        return self.pread_segment(seg, min(length, seg.end - offset), offset - seg.start)

    def segment_for_write(self, offset: int) -> Segment:
        """The file holding ``offset``, created (sparse, full size) when it is the next one."""
        seg = self.find(offset)
        if seg is not None:
            return seg
        with self._lock:
            seg = self.find(offset)
            if seg is not None:
                return seg
            start = offset - offset % self.file_size
            if self.segments and start != self.segments[-1].end:
                raise ValueError(f"offset {offset} is not in the next file of {self.directory}")
            if not os.path.isdir(self.directory):
                _makedirs_durable(self.directory)
            path = os.path.join(self.directory, offset_to_file_name(start))
            # Whole or not at all, and the new name survives a power cut once its data is
            # fdatasync'ed (SYNC_FLUSH acknowledges after fdatasync of the file only).
            fd = create_preallocated(path, self.file_size)
            seg = Segment(start, path, fd, self.file_size)
            self.segments.append(seg)
            return seg

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset``; it must not cross a file end.

        A write under :data:`MAPPED_WRITE_MAX` bytes is a copy into the file's shared
        writable mapping (``MappedFile.appendMessage``: no system call per write), the blocks
        under it allocated first (:meth:`_allocate`), so a full disk raises here with nothing
        written; a larger one, or one to a file that cannot be mapped, is a ``pwrite``. The
        bytes are in the page cache when this returns, either way (readers through ``pread``
        or their own mappings see them; :meth:`flush` syncs them).

        Raises:
            OSError: ENOSPC (the disk is full), EIO, ...; nothing of ``data`` is written.
        """
        n = len(data)
        w = self._wmap
        if w is not None and n < MAPPED_WRITE_MAX:  # the usual small append: no lookup
            pos = offset - w[0].start
            end = pos + n
            m = w[1]
            if 0 <= pos and end <= self._allocated and m is not None:
                m[pos:end] = data
                return
        seg = self.segment_for_write(offset)
        pos = offset - seg.start
        end = pos + n
        if end > seg.size:
            raise ValueError("write crosses a file boundary")
        if n >= MAPPED_WRITE_MAX:
            pwrite_all(seg.fd, data, pos)
            return
        w = self._wmap
        if w is None or w[0] is not seg:
            w = self._map_for_write(seg)
        m = w[1]
        if m is not None and end > self._allocated:
            m = self._allocate(seg, pos, end)
        if m is None:
            pwrite_all(seg.fd, data, pos)
        else:
            m[pos:end] = data

    def write_window(self, offset: int, n: int) -> tuple[mmap.mmap, int, int] | None:
        """Where a writer may store up to ``n`` bytes at ``offset`` itself, as :meth:`write`
        would through the mapping (``MappedFile.appendMessage`` handing ``doAppend`` its
        ``MappedByteBuffer``): ``(the file's writable mapping, the position of offset in it,
        the bytes from there that are allocated, at least n)``, the blocks allocated first as
        :meth:`write` allocates them. None where :meth:`write` must take the bytes: ``n`` from
        :data:`MAPPED_WRITE_MAX` on, ``offset`` outside the file mapped for writing (the first
        write into the next file maps it), ``[offset, offset + n)`` crossing the file's end, a
        file that cannot be mapped or allocated. The writer exports the mapping only while it
        stores (:meth:`write` may close it at its next call).

        Raises:
            OSError: ENOSPC, EIO, ... from ``posix_fallocate``; nothing is written.
        """
        w = self._wmap
        if w is None or n >= MAPPED_WRITE_MAX:
            return None
        seg, m = w
        pos = offset - seg.start
        end = pos + n
        if m is None or pos < 0 or end > seg.size:
            return None
        if end > self._allocated:
            m = self._allocate(seg, pos, end)
            if m is None:
                return None
        return m, pos, self._allocated - pos

    def _map_for_write(self, seg: Segment) -> tuple[Segment, mmap.mmap | None]:
        """Map ``seg`` shared and writable in place of the file written before (one writable
        mapping per queue, so thousands of queues never hold thousands of mappings)."""
        with self._lock:
            self._unmap_written(None)
            try:
                m: mmap.mmap | None = no_readahead(mmap.mmap(seg.fd, seg.size))  # shared, rw
            except (OSError, ValueError):
                m = None  # cannot be mapped (address space, a file gone short): pwrite it
            self._wmap = (seg, m)
            self._allocated = 0
            return self._wmap

    def _allocate(self, seg: Segment, pos: int, end: int) -> mmap.mmap | None:
        """Allocate the blocks of ``seg`` up to past ``end`` (:data:`ALLOC_STEP` ahead), so the
        mapped write of ``[pos, end)`` never stores into a hole (a store into a hole of a full
        disk is a SIGBUS). Returns the mapping, or None where the filesystem cannot allocate
        (then the file is written with ``pwrite`` from now on).

        Raises:
            OSError: ENOSPC, EIO, ... from ``posix_fallocate``.
        """
        step = min(ALLOC_STEP, max(ALLOC_STEP_MIN, seg.size // 64))
        lo = max(self._allocated, pos - pos % PAGE)
        hi = min(seg.size, end + step - end % step)
        try:
            os.posix_fallocate(seg.fd, lo, hi - lo)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            with self._lock:
                self._unmap_written(None)
                self._wmap = (seg, None)
            return None
        self._allocated = hi
        w = self._wmap
        return w[1] if w is not None else None

    def _unmap_written(self, seg: Segment | None) -> None:
        """Close the writable mapping (of ``seg`` only, unless None); caller holds the lock."""
        w = self._wmap
        if w is not None and (seg is None or w[0] is seg):
            self._wmap = None
            if w[1] is not None:
                w[1].close()

    def zero_range(self, offset: int, end: int) -> None:
        """Make ``[offset, end)`` of one file read as zeros and free its blocks.

        Used to drop a torn tail: ``ftruncate`` down then back up keeps the file's length (a
        broker requires it) and does not need free space, so it works on a full disk.
        """
        seg = self.find(offset)
        if seg is None or end <= offset:
            return
        if _reads_as_zeros(seg.fd, offset - seg.start, end - seg.start):
            return  # the usual clean reopen: leave the file, and its mtime, alone
        if end < seg.end:
            # Zero only the range: the bytes after it must stay.
            os.pwrite(seg.fd, bytes(end - offset), offset - seg.start)
            return
        os.ftruncate(seg.fd, offset - seg.start)
        os.ftruncate(seg.fd, seg.size)
        w = self._wmap
        if w is not None and w[0] is seg:  # the blocks from there on are freed
            self._allocated = min(self._allocated, offset - seg.start)

    def truncate_dirty(self, offset: int, delete_at_start: bool = False) -> None:
        """Drop everything at or after ``offset`` (``truncateDirtyFiles``).

        Files that start after ``offset`` are deleted; the file holding it is zeroed from there.
        With ``delete_at_start`` a file that starts exactly at ``offset`` is deleted too, as
        ``ConsumeQueue.truncateDirtyLogicFiles`` does (its first unit is dirty): a broker would
        otherwise read its zero first unit as a message.
        """
        self._touched_to = min(self._touched_to, offset)
        with self._lock:
            while self.segments and (
                self.segments[-1].start > offset
                or (delete_at_start and self.segments[-1].start == offset)
            ):
                seg = self.segments.pop()
                self._unmap_written(seg)
                seg.close()
                os.unlink(seg.path)
        last = self.find(offset)
        if last is not None:
            self.zero_range(offset, last.end)

    def sync_file(self, offset: int) -> None:
        """``fsync`` (data and metadata: a :meth:`truncate_dirty` freed its blocks) the file
        holding ``offset``; no file holds it: nothing to do. Raises OSError."""
        seg = self.find(offset)
        if seg is not None:
            os.fsync(seg.fd)

    def delete_first(self) -> Segment | None:
        """Delete the oldest file (expiry); never the last one. Returns it, or None."""
        with self._lock:
            if len(self.segments) <= 1:
                return None
            seg = self.segments.pop(0)
            self._unmap_written(seg)
        seg.close()
        os.unlink(seg.path)
        return seg

    def flush(self, start: int = 0, end: int | None = None) -> None:
        """``fdatasync`` the files overlapping ``[start, end)`` (all files by default)."""
        for seg in list(self.segments):
            if seg.end > start and (end is None or seg.start < end):
                os.fdatasync(seg.fd)

    def mark_touched(self, end: int) -> None:
        """Say that the files' mtimes show every byte before ``end`` (the data as an open
        found it): :meth:`touch_written` stamps only what is written after."""
        self._touched_to = end

    def touch_written(self, end: int) -> None:
        """Set to now the mtime of the files holding bytes written since the last call (or
        :meth:`mark_touched`), up to ``end`` (where the owner's data ends): a store into a
        page of a shared mapping that is dirty already moves no mtime (the kernel stamps a
        page's first store after writeback only), and a backup's quick check (rsync, restic:
        size and mtime) would skip a file whose bytes changed. Errors are ignored (a file
        being deleted by expiry); nothing on a read-only queue."""
        start = self._touched_to
        if end <= start or self.read_only:
            return
        self._touched_to = end
        for seg in list(self.segments):
            if seg.end > start and seg.start < end:
                try:
                    os.utime(seg.fd)
                except (OSError, ValueError):  # (ValueError: its descriptor just closed)
                    pass

    def close(self) -> None:
        """Close every file descriptor and unmap every file."""
        with self._lock:
            self._unmap_written(None)
            for seg in self.segments:
                seg.close()
            self.segments = []
        super().close()


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    """Write all of ``data`` (bytes-like of single bytes) at ``pos`` of ``fd``: one ``pwrite``,
    more only after a short write. Raises OSError (ENOSPC)."""
    n = os.pwrite(fd, data, pos)
    if n == len(data):
        return
    view = memoryview(data)[n:]
    pos += n
    while view:
        n = os.pwrite(fd, view, pos)
        view = view[n:]
        pos += n


def _reads_as_zeros(fd: int, start: int, end: int, budget: int = 4 << 20) -> bool:
    """True when ``[start, end)`` of the file is known to read as zeros: holes
    (``SEEK_DATA``/``SEEK_HOLE``) plus at most ``budget`` bytes of data checked by reading."""
    pos = start
    try:
        while pos < end:
            data = os.lseek(fd, pos, os.SEEK_DATA)
            if data >= end:
                return True
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
            if hole - data > budget:
                return False
            budget -= hole - data
            if os.pread(fd, hole - data, data).count(0) != hole - data:
                return False
            pos = hole
    except OSError as exc:
        return exc.errno == errno.ENXIO  # no data after pos; other errors: not known
    return True


def map_read_only(fd: int) -> SegmentMap:
    """A read-only map of the whole file ``fd`` (the caller may close ``fd`` after): how a
    file's bytes are read in place, here only (a segment, or a block of one cached from object
    storage: ``engine.live.blockcache``). Raises ValueError for an empty file, OSError."""
    return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)


def extend_with_zeros(path: str, size: int) -> None:
    """Extend the segment file ``path``, cut short (a crash while it was created, a partial
    copy), to ``size`` bytes of which the new ones read as zeros (``ftruncate`` up: a hole,
    no space used), and ``fsync`` it: a broker maps every segment at its full size
    (``MappedFile``), and zeros past the data end it as recovery expects. Opened without
    following a link and refused unless a regular file.

    Raises:
        ValueError: the file is already larger than ``size``.
        OSError: ENOENT, ELOOP for a link, EACCES for anything but a regular file, ...
    """
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EACCES, "not a regular file", path)
        if st.st_size > size:
            raise ValueError(f"{path}: {st.st_size} bytes, larger than {size}")
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    """fsync the file ``path`` by name (its data and metadata), e.g. a file a store wrote
    through descriptors since closed: ``rmqfs recover`` makes the ConsumeQueues and IndexFiles
    it had rebuilt durable before writing a checkpoint that vouches for them. Raises OSError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def no_readahead(m: mmap.mmap) -> mmap.mmap:
    """``madvise(MADV_RANDOM)`` on a writable mapping of a file being filled: a store's first
    touch of a page faults it in, and with readahead the kernel would read (for a hole or
    preallocated blocks: zero) the pages around it as well, a window at a time, of which a
    queue's few units or an IndexFile's scattered slots use little (a fresh store's first puts
    took 24 ms instead of 10). Only this mapping is advised; readers map their own. Advice:
    a kernel that refuses it changes nothing else. Returns ``m``."""
    with contextlib.suppress(OSError):
        m.madvise(mmap.MADV_RANDOM)
    return m


def fsync_dir(path: str) -> None:
    """fsync a directory, so the names created or removed in it survive a power cut (the one
    home of this step for every file the store creates: segments, IndexFiles, config)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _makedirs_durable(path: str) -> None:
    """``os.makedirs`` and fsync each parent whose entry was added, so the new directory
    survives a power cut."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    for d in reversed(missing):
        fsync_dir(os.path.dirname(d))


def segment_names(directory: str, source: StoreSource = LOCAL) -> list[str]:
    """Names in ``directory`` that are segment names (:data:`SEGMENT_NAME`: 20 ASCII digits,
    ``UtilAll.offset2FileName``), sorted, so in offset order; whatever their file type (callers
    that need regular files check). [] when the directory does not exist; other OSErrors
    propagate. The one listing of a CommitLog or ConsumeQueue directory: :func:`list_segments`
    (so :class:`FileQueue` and :class:`MappedFiles`), verify, the follower and consumequeue
    use it."""
    try:
        names = source.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if SEGMENT_NAME.fullmatch(n))


def list_segments(directory: str, source: StoreSource = LOCAL) -> list[tuple[int, int]]:
    """``(start offset, size in bytes)`` of each regular file (a link is followed) in
    ``directory`` with a segment name (:func:`segment_names`), in offset order; a file deleted
    while listed (retention, a writer's truncation) is left out. [] when the directory does not
    exist; other OSErrors propagate. One ``stat`` a file.

    The listing :class:`FileQueue` loads (``MappedFileQueue.load``) and :class:`MappedFiles`
    refreshes."""
    out = []
    for n in segment_names(directory, source):
        try:
            size = source.file_size(os.path.join(directory, n))
        except FileNotFoundError:
            continue
        except PermissionError:  # not a regular file
            continue
        out.append((int(n), size))
    return out
