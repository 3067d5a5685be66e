"""CRC32C (Castagnoli) of files and byte ranges, at hardware speed: the ``crc32c`` package.

Snapshot manifests (``SNAPSHOT.json``) and ``rmqfs snapshot-verify`` sum whole store files,
which are mostly zeros: a preallocated 1 GiB CommitLog segment holds a few MB of records and
then zeros (on disk, a hole). Zeros are never read or summed byte by byte: :func:`crc32c_zeros`
extends a CRC by ``n`` zero bytes in ``O(log n)`` steps (the GF(2) operator method of zlib's
``crc32_combine``), and :func:`crc32c_fd` skips holes with ``SEEK_DATA``/``SEEK_HOLE``.

All values are the standard finished CRC-32C (``crc32c.crc32c(data, value)`` chaining; reflected
polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF), as unsigned 32-bit ints.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator

from crc32c import crc32c

__all__ = ["crc32c", "crc32c_zeros", "crc32c_fd", "crc32c_file", "CHUNK"]

_POLY = 0x82F63B78  # CRC-32C, reflected
CHUNK = 8 << 20  # bytes read per call
_ops: list[list[int]] = []  # _ops[k]: the operator that appends 2**k zero bytes
_ops_lock = threading.Lock()
_local = threading.local()


def _times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _square(mat: list[int]) -> list[int]:
    return [_times(mat, mat[n]) for n in range(32)]


def _operators() -> list[list[int]]:
    if not _ops:
        with _ops_lock:
            if not _ops:
                one_bit = [_POLY] + [1 << (n - 1) for n in range(1, 32)]
                op = _square(_square(_square(one_bit)))  # 8 zero bits: one zero byte
                ops = [op]
                for _ in range(63):
                    ops.append(_square(ops[-1]))
                _ops.extend(ops)
    return _ops


def crc32c_zeros(crc: int, n: int) -> int:
    """``crc32c(b"\\0" * n, crc)`` without the zeros: O(log n) 32x32 GF(2) products."""
    if n <= 0:
        return crc
    if n <= 4096:
        return crc32c(bytes(n), crc)
    reg = crc ^ 0xFFFFFFFF
    ops = _operators()
    k = 0
    while n:
        if n & 1:
            reg = _times(ops[k], reg)
        n >>= 1
        k += 1
    return reg ^ 0xFFFFFFFF


def _buffer() -> memoryview:
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(CHUNK))
    return buf


def file_pieces(
    fd: int, start: int, end: int, buf: memoryview | None = None
) -> Iterator[tuple[int, memoryview | None]]:
    """Bytes ``[start, end)`` of an open file as ``(length, data)`` pieces, in order: ``data``
    None for a run of zeros the file holds as a hole (``SEEK_DATA``/``SEEK_HOLE``; not read),
    else a view of at most :data:`CHUNK` bytes read with ``preadv`` into ``buf`` (default a
    per-thread buffer): valid until the next piece is taken. On a file system without
    ``SEEK_DATA`` everything is read. The one walk of a file's data and holes (the crc32c of
    a file, an upload of one). The file offset of ``fd`` may move (``lseek``); callers use
    positional I/O only.

    Raises:
        EOFError: the file ends before ``end`` (a short file).
        OSError: from the disk.
    """
    if buf is None:
        buf = _buffer()
    pos = start
    holes = True
    while pos < end:
        stop = end
        if holes:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole (or EOF) after pos
                    size = os.fstat(fd).st_size
                    if size < end:
                        raise EOFError(f"file ends at {size}, before {end}") from None
                    yield end - pos, None
                    return
                holes = False  # SEEK_DATA unsupported here: read everything
                continue
            if data > pos:
                n = min(data, end) - pos
                yield n, None
                pos += n
                continue
            try:
                stop = min(os.lseek(fd, pos, os.SEEK_HOLE), end)
            except OSError:
                stop = end
        while pos < stop:
            want = min(CHUNK, stop - pos, len(buf))
            n = os.preadv(fd, [buf[:want]], pos)
            if n <= 0:
                raise EOFError(f"file ends at {pos}, before {end}")
            yield n, buf[:n]
            pos += n


def crc32c_fd(fd: int, start: int, end: int, crc: int = 0) -> int:
    """The CRC32C of bytes ``[start, end)`` of an open file, continuing ``crc``.

    Holes (``SEEK_DATA``) are summed as zeros without reading them; data is read with
    ``preadv`` in :data:`CHUNK` pieces into a per-thread buffer (the package releases the GIL,
    so threads sum files in parallel): :func:`file_pieces`.

    Raises:
        EOFError: the file ends before ``end`` (a short file).
        OSError: from the disk.
    """
    for n, data in file_pieces(fd, start, end):
        crc = crc32c_zeros(crc, n) if data is None else crc32c(data, crc)
    return crc


def crc32c_file(path: str) -> tuple[int, int]:
    """``(size, crc32c)`` of a whole file. Raises OSError (FileNotFoundError, ...)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return size, crc32c_fd(fd, 0, size)
    finally:
        os.close(fd)
