"""Where a store's files are read from: one interface, two implementations.

Every reader of a store's files (``MessageStore`` opened read-only, ``StoreFiles``, the mount
and its render workers) reads segment files (CommitLog, ConsumeQueue, IndexFile), small files
(``config/*.json``, ``checkpoint``) and directory listings through a :class:`StoreSource`, as
s3ql reads every backend through one interface in-process (``s3ql.backends.common``):

- :data:`LOCAL` (:class:`LocalSource`): the local filesystem. Readers of a local store keep
  their descriptors and memory maps (:mod:`engine.format.mappedfile`); this source answers
  listings and small files, and never follows a link (``O_NOFOLLOW``).
- ``engine.live.objectsource.ObjectSource``: a snapshot in object storage (``s3://...``), its
  tree from its manifest, its bytes by range reads into a bounded block cache, each request
  under a bounded timeout. Nothing there is memory-mapped: :attr:`StoreSource.local` is False
  and readers ask for byte ranges (:meth:`StoreSource.pread`).

Paths are the ones a reader builds with ``os.path.join(root, ...)`` from the source's
:attr:`StoreSource.root`; a source answers only for paths under its root. Writers use the local
filesystem directly: only a local store is ever written.

What a source does not find raises ``FileNotFoundError``, like ``os``; what it cannot read
raises ``OSError`` (local) or :class:`engine.errors.ObjectStoreError` (object storage, errno
EIO), which the filesystem layer answers as EIO.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from typing import Protocol

__all__ = ["LOCAL", "LocalSource", "StoreSource"]


class StoreSource(Protocol):
    """The operations a store reader needs of where the store lies (see the module docstring).

    Attributes:
        local: True when paths are local files a reader may open and map itself.
        root: the store's root path (readers join names below it).
        spec: a picklable description another process opens the same source from
            (``engine.live.objectsource.open_source``): the mount's render workers.
    """

    local: bool
    root: str

    @property
    def spec(self) -> tuple[str, ...]: ...

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path`` (``os.listdir``). Raises FileNotFoundError, NotADirectoryError."""
        ...

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory (a link to one is, as ``os.path.isdir``)."""
        ...

    def isfile(self, path: str) -> bool:
        """Whether ``path`` is a regular file (``os.path.isfile``)."""
        ...

    def lexists(self, path: str) -> bool:
        """Whether anything is at ``path`` (``os.path.lexists``)."""
        ...

    def file_size(self, path: str) -> int:
        """Bytes of the regular file ``path`` (``os.stat``). Raises FileNotFoundError, or
        OSError(EACCES) for anything but a regular file."""
        ...

    def mtime_ns(self, path: str) -> int:
        """Modification time of ``path`` in epoch ns (0 when the source keeps none)."""
        ...

    def allocated(self, path: str) -> int:
        """Bytes of the file ``path`` that hold data (a sparse file's holes and a snapshot's
        zeros past its stored prefix left out: what ``du`` counts)."""
        ...

    def read_file(self, path: str, limit: int) -> bytes:
        """The bytes of the regular file ``path``, at most ``limit`` (a config file, a
        checkpoint). Raises FileNotFoundError; OSError(ELOOP) for a link, EACCES for anything
        but a regular file; ObjectStoreError when object storage fails."""
        ...

    def pread(self, path: str, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes of file ``path`` at ``offset`` (fewer at its end). Raises as
        :meth:`read_file`."""
        ...

    def window(self, path: str, offset: int) -> tuple[mmap.mmap, int] | None:
        """A read-only buffer of the bytes of file ``path`` around ``offset`` without a copy
        (object storage: the cached block that holds it), and the file position of its first
        byte; None where the source has none (local files: readers map them themselves).
        Raises as :meth:`pread`."""
        ...


def _open_regular(path: str) -> int:
    """A read-only descriptor of the regular file ``path``, never through a link, never
    blocking on a FIFO. Raises FileNotFoundError, OSError(ELOOP), OSError(EACCES)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EACCES, "not a regular file", path)
    return fd


class LocalSource:
    """The local filesystem as a :class:`StoreSource` (``root`` "/": any absolute path)."""

    local = True
    root = "/"

    @property
    def spec(self) -> tuple[str, ...]:
        """``("local",)``."""
        return ("local",)

    listdir = staticmethod(os.listdir)
    isdir = staticmethod(os.path.isdir)
    isfile = staticmethod(os.path.isfile)
    lexists = staticmethod(os.path.lexists)

    @staticmethod
    def file_size(path: str) -> int:
        """``os.stat(path).st_size`` of a regular file (EACCES for anything else)."""
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EACCES, "not a regular file", path)
        return st.st_size

    @staticmethod
    def mtime_ns(path: str) -> int:
        """``os.stat(path).st_mtime_ns``."""
        return os.stat(path).st_mtime_ns

    @staticmethod
    def allocated(path: str) -> int:
        """``st_blocks * 512``."""
        return os.stat(path).st_blocks * 512

    @staticmethod
    def read_file(path: str, limit: int) -> bytes:
        """Up to ``limit`` bytes of the regular file ``path`` (see :class:`StoreSource`)."""
        fd = _open_regular(path)
        try:
            chunks = []
            left = limit
            while left > 0:
                b = os.read(fd, min(left, 1 << 20))
                if not b:
                    break
                chunks.append(b)
                left -= len(b)
            return b"".join(chunks)
        finally:
            os.close(fd)

    @staticmethod
    def window(path: str, offset: int) -> None:
        """None: a reader of local files maps them itself (``MappedFiles.locate``)."""
        return None

    @staticmethod
    def pread(path: str, length: int, offset: int) -> bytes:
        """``os.pread`` of the regular file ``path`` (opened and closed for the call)."""
        fd = _open_regular(path)
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)


#: The local filesystem.
LOCAL = LocalSource()
