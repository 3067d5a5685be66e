"""The compiled core of the columnar decoder: ``_kernel.c`` built with the system C compiler and
loaded with ctypes.

``engine.read.columnar`` decodes the common record (V1, IPv4 hosts, plain body) column-wise;
the loops that Arrow and numpy cannot run without a Python object or a temporary array per
record are here: the big-endian fixed fields of many records (:meth:`Kernel.gather_fields`),
variable-length parts copied into one Arrow values buffer (:meth:`Kernel.gather`), the body
CRC-32 of each record (:meth:`Kernel.crc32`, ``UtilAll.crc32``), strict UTF-8 checks
(:meth:`Kernel.utf8_bad`) and the properties split of
``MessageDecoder.string2messageProperties`` (:meth:`Kernel.split_properties`,
:meth:`Kernel.split_on`). The record layout stays in ``engine.format.message``: callers pass
field offsets and widths from its field table.

Where the library comes from (:func:`load`), first found wins:

1. ``_kernel-<digest>.so`` beside this module: ``make`` builds it (``python -m
   engine.read.kernel``);
2. the same name in the user's cache directory (``$XDG_CACHE_HOME/rmqfs``, else
   ``~/.cache/rmqfs``; only a directory owned by this user and writable by no one else);
3. built there on first use with ``cc`` (about a second, once per machine and source).

The digest covers the C source and the compiler flags, so an edited source is never served by
an old library. Without a compiler (or with ``RMQFS_NO_KERNEL=1``) :func:`load` returns None
and the columnar decoder decodes every record with the per-record decoder: the same rows,
about ten times slower; a warning says so once per process.

Every wrapper checks the positions it is given against the buffer's length before the C code
runs (the C side trusts them), and raises ValueError otherwise.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from importlib import resources

import numpy as np

__all__ = ["Kernel", "load", "build", "library_name"]

log = logging.getLogger(__name__)

ABI = 1  # RMQ_KERNEL_ABI of _kernel.c
CC = os.environ.get("CC", "cc")
CFLAGS = ("-O3", "-std=c99", "-shared", "-fPIC", "-Wall")
LIBS = ("-lz",)
#: most pairs one properties area may have on the fast path (its repeated-name check is
#: quadratic); a record with more goes through the per-record decoder
MAX_FAST_PAIRS = 64

_i64p = ctypes.POINTER(ctypes.c_int64)
_vp = ctypes.c_void_p


def _source() -> bytes:
    return resources.files(__package__).joinpath("_kernel.c").read_bytes()


def library_name() -> str:
    """``_kernel-<digest>.so``: the digest of the C source, the compiler flags and the machine."""
    h = hashlib.sha256(_source())
    h.update(" ".join((*CFLAGS, *LIBS, os.uname().machine)).encode())
    return f"_kernel-{h.hexdigest()[:16]}.so"


def build(directory: str) -> str:
    """Compile ``_kernel.c`` into ``directory``/:func:`library_name` and return its path.

    Written under a temporary name and renamed, so processes that build at once never load a
    half-written file. Raises OSError (no compiler) or subprocess.CalledProcessError (the
    compiler's message in ``stderr``)."""
    out = os.path.join(directory, library_name())
    with tempfile.TemporaryDirectory(prefix="rmqfs-kernel-") as tmp:
        src = os.path.join(tmp, "_kernel.c")
        with open(src, "wb") as f:
            f.write(_source())
        obj = os.path.join(tmp, "k.so")
        subprocess.run(
            [CC, *CFLAGS, "-o", obj, src, *LIBS], check=True, capture_output=True, text=True
        )
        fd, part = tempfile.mkstemp(prefix=".kernel-", dir=directory)
        os.close(fd)
        try:
            shutil.copyfile(obj, part)
            os.chmod(part, 0o755)
            os.replace(part, out)
        except BaseException:
            os.unlink(part)
            raise
    return out


def _cache_dir() -> str | None:
    """The user's rmqfs cache directory, created 0700; None unless it is this user's own and
    no one else can write to it (a library there is loaded and run)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "rmqfs")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o022 or not os.path.isdir(path):
        return None
    return path


class Kernel:
    """The loaded library, with numpy-facing wrappers.

    ``buf`` arguments are 1-d uint8 numpy arrays (typically ``np.frombuffer`` of a CommitLog
    mapping); positions are int64 arrays of byte offsets into it and lengths int64 arrays in
    bytes. Raises ValueError for a position outside ``buf``.
    """

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        lib.rmq_abi.restype = ctypes.c_int
        if lib.rmq_abi() != ABI:
            raise ImportError(f"rmqfs kernel ABI {lib.rmq_abi()}, expected {ABI}")
        lib.rmq_gather_fields.restype = None
        lib.rmq_gather_fields.argtypes = [_vp, _vp, ctypes.c_int64, ctypes.c_int32, _vp, _vp, _vp]
        lib.rmq_v1_tail.restype = None
        lib.rmq_v1_tail.argtypes = [
            _vp, _vp, _vp, _vp, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
            ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int32,
            _vp, _vp, _vp, _vp, _vp,
        ]  # fmt: skip
        lib.rmq_gather.restype = None
        lib.rmq_gather.argtypes = [_vp, _vp, _vp, ctypes.c_int64, _vp, _vp]
        lib.rmq_crc32.restype = None
        lib.rmq_crc32.argtypes = [_vp, _vp, _vp, ctypes.c_int64, _vp]
        lib.rmq_utf8_check.restype = ctypes.c_int
        lib.rmq_utf8_check.argtypes = [_vp, _vp, _vp, ctypes.c_int64, _i64p]
        lib.rmq_split_properties.restype = ctypes.c_int64
        lib.rmq_split_properties.argtypes = [
            _vp, _vp, _vp, ctypes.c_int64, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_int32,
            ctypes.c_char_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64,
            _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp,
        ]  # fmt: skip
        lib.rmq_json_lines.restype = ctypes.c_int64
        lib.rmq_json_lines.argtypes = [
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, *[_vp] * 10, ctypes.c_int64, _i64p,
        ]  # fmt: skip
        lib.rmq_split_on.restype = ctypes.c_int64
        lib.rmq_split_on.argtypes = [
            _vp, _vp, _vp, ctypes.c_int64, ctypes.c_uint8, ctypes.c_int64, _vp, _vp, _vp,
        ]  # fmt: skip

    @staticmethod
    def _check(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray | int) -> None:
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise ValueError("buf must be a 1-d uint8 array")
        if len(starts) and (
            int(starts.min()) < 0
            or int(np.min(lengths)) < 0
            or int((starts + lengths).max()) > len(buf)
        ):
            raise ValueError("a position lies outside the buffer")

    @staticmethod
    def _i64(a) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.int64)

    def gather_fields(
        self, buf: np.ndarray, pos: np.ndarray, fields: list[tuple[str, int, np.dtype]]
    ) -> dict[str, np.ndarray]:
        """Big-endian fields of the records at ``pos``: ``fields`` lists ``(name, offset in the
        record, numpy dtype of width 1, 2, 4 or 8)``; returns ``{name: native array}``."""
        pos = self._i64(pos)
        widths = [np.dtype(t).itemsize for _, _, t in fields]
        self._check(buf, pos, max(off + w for (_, off, _), w in zip(fields, widths)))
        n = len(pos)
        out = {name: np.empty(n, dtype=np.dtype(t).newbyteorder("=")) for name, _, t in fields}
        offs = np.array([off for _, off, _ in fields], dtype=np.int32)
        wid = np.array(widths, dtype=np.int32)
        ptrs = (ctypes.c_void_p * len(fields))(*(out[name].ctypes.data for name, _, _ in fields))
        self.lib.rmq_gather_fields(
            buf.ctypes.data, pos.ctypes.data, n, len(fields), offs.ctypes.data, wid.ctypes.data,
            ptrs,
        )  # fmt: skip
        return out

    def v1_tail(
        self,
        buf: np.ndarray,
        pos,
        end,
        blen,
        ok: np.ndarray,
        layout: tuple[int, int, int, int, int],
        topic: bytes | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Walk the variable part of V1 records (body, topic, properties; see ``_kernel.c``).

        ``pos``/``end``: where each record starts and ends in ``buf``; ``blen``: BODYLENGTH;
        ``ok``: bool array, the records to walk, cleared (in place) where the lengths do not
        add up to ``end`` or ``topic`` (when given) is not the record's topic. ``layout``:
        ``(fixed part size, topic length size, properties length size, max topic length, max
        properties length)`` from ``engine.format.message``. Returns ``(topic starts, topic
        lengths, properties starts, properties lengths)`` (int64, 0 where not ok)."""
        pos, end, blen = self._i64(pos), self._i64(end), self._i64(blen)
        self._check(buf, pos, end - pos)
        if ok.dtype != np.bool_ or not ok.flags.c_contiguous or len(ok) != len(pos):
            raise ValueError("ok must be a contiguous bool array of one entry per record")
        n = len(pos)
        tstart, tlen, pstart, plen = (np.empty(n, dtype=np.int64) for _ in range(4))
        fixed, tl_size, pl_size, max_topic, max_props = layout
        self.lib.rmq_v1_tail(
            buf.ctypes.data, pos.ctypes.data, end.ctypes.data, blen.ctypes.data, n, fixed,
            tl_size, pl_size, max_topic, max_props, topic or b"",
            -1 if topic is None else len(topic), tstart.ctypes.data, tlen.ctypes.data,
            pstart.ctypes.data, plen.ctypes.data, ok.ctypes.data,
        )  # fmt: skip
        return tstart, tlen, pstart, plen

    def gather(self, buf: np.ndarray, starts, lengths) -> tuple[np.ndarray, np.ndarray]:
        """Concatenate ``buf[starts[i]:starts[i] + lengths[i]]``: ``(int32 offsets of n + 1,
        uint8 values)``, the two buffers of an Arrow binary/string array. Raises
        OverflowError past 2 GiB (Arrow's int32 offsets)."""
        starts, lengths = self._i64(starts), self._i64(lengths)
        self._check(buf, starts, lengths)
        total = int(lengths.sum())
        if total > np.iinfo(np.int32).max:
            raise OverflowError("more than 2 GiB in one batch")
        offsets = np.empty(len(starts) + 1, dtype=np.int32)
        data = np.empty(total, dtype=np.uint8)
        self.lib.rmq_gather(
            buf.ctypes.data, starts.ctypes.data, lengths.ctypes.data, len(starts),
            offsets.ctypes.data, data.ctypes.data,
        )  # fmt: skip
        return offsets, data

    def crc32(self, buf: np.ndarray, starts, lengths) -> np.ndarray:
        """zlib CRC-32 of each piece (uint32 array)."""
        starts, lengths = self._i64(starts), self._i64(lengths)
        self._check(buf, starts, lengths)
        out = np.empty(len(starts), dtype=np.uint32)
        self.lib.rmq_crc32(
            buf.ctypes.data, starts.ctypes.data, lengths.ctypes.data, len(starts), out.ctypes.data
        )
        return out

    def utf8_bad(self, buf: np.ndarray, starts, lengths) -> int:
        """Index of the first piece that is not strict UTF-8 (as ``bytes.decode``), or -1."""
        starts, lengths = self._i64(starts), self._i64(lengths)
        self._check(buf, starts, lengths)
        bad = ctypes.c_int64(-1)
        ok = self.lib.rmq_utf8_check(
            buf.ctypes.data, starts.ctypes.data, lengths.ctypes.data, len(starts), bad
        )
        return -1 if ok else bad.value

    def split_properties(
        self,
        buf: np.ndarray,
        starts,
        lengths,
        pair_sep: bytes,
        name_sep: bytes,
        tag_name: bytes,
        keys_name: bytes,
    ) -> dict[str, np.ndarray]:
        """Split properties areas as ``MessageDecoder.string2messageProperties`` does (see
        ``_kernel.c``: a pair kept when ``name_sep`` lies strictly inside it; a repeated name
        at its first position with its last value).

        Returns arrays: ``kstart``/``klen``/``vstart``/``vlen`` (int64, one per pair),
        ``offsets`` (int32, n + 1: the pairs of area i), ``tag``/``keys`` (int64 per area: the
        pair of ``tag_name``/``keys_name`` or -1), ``slow`` (bool per area: not strict UTF-8,
        or more than :data:`MAX_FAST_PAIRS` pairs; such an area gets no pairs)."""
        starts, lengths = self._i64(starts), self._i64(lengths)
        self._check(buf, starts, lengths)
        n = len(starts)
        cap = int(((lengths + 1) // 4).sum())
        kstart, klen, vstart, vlen = (np.empty(cap, dtype=np.int64) for _ in range(4))
        offsets = np.empty(n + 1, dtype=np.int32)
        tag, keys = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        slow = np.empty(n, dtype=np.uint8)
        got = self.lib.rmq_split_properties(
            buf.ctypes.data, starts.ctypes.data, lengths.ctypes.data, n, pair_sep[0],
            name_sep[0], MAX_FAST_PAIRS, tag_name, len(tag_name), keys_name, len(keys_name),
            cap, kstart.ctypes.data, klen.ctypes.data, vstart.ctypes.data, vlen.ctypes.data,
            offsets.ctypes.data, tag.ctypes.data, keys.ctypes.data, slow.ctypes.data,
        )  # fmt: skip
        if got < 0:
            raise AssertionError("properties split: capacity bound broken")
        return {
            "kstart": kstart[:got],
            "klen": klen[:got],
            "vstart": vstart[:got],
            "vlen": vlen[:got],
            "offsets": offsets,
            "tag": tag,
            "keys": keys,
            "slow": slow.view(bool),
        }

    def split_on(self, buf: np.ndarray, starts, lengths, sep: bytes):
        """Split each piece on the byte ``sep``, dropping empty parts: ``(part starts, part
        lengths, int32 list offsets of n + 1)``."""
        starts, lengths = self._i64(starts), self._i64(lengths)
        self._check(buf, starts, lengths)
        n = len(starts)
        cap = int(((lengths + 1) // 2).sum())
        pstart, plen = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
        offsets = np.empty(n + 1, dtype=np.int32)
        got = self.lib.rmq_split_on(
            buf.ctypes.data, starts.ctypes.data, lengths.ctypes.data, n, sep[0], cap,
            pstart.ctypes.data, plen.ctypes.data, offsets.ctypes.data,
        )  # fmt: skip
        if got < 0:
            raise AssertionError("split: capacity bound broken")
        return pstart[:got], plen[:got], offsets

    def json_lines(self, batch, body_suffix: bytes, end: bytes) -> tuple[memoryview, np.ndarray]:
        """One JSON object per row of a ``pyarrow.RecordBatch``, its columns in order, as
        ``json.dumps(ensure_ascii=False, separators=(",", ":"))`` writes them: integers,
        strings (null as ``null``), lists of strings, maps of strings, and a binary column
        written as text when it is strict UTF-8, else base64 followed by ``body_suffix``.
        Each line ends with ``end`` (``}\\n`` closes the object). Returns ``(the lines (a
        bytes-like memoryview), int64 ends: the end of line i)``. Raises TypeError for a column of another type."""
        import pyarrow as pa

        n = batch.num_rows
        names = batch.schema.names
        nf = len(names)
        lit = b"".join(
            (b"{" if i == 0 else b",") + json_name(name) + b":" for i, name in enumerate(names)
        )
        lit_off = np.zeros(nf + 3, dtype=np.int32)
        lengths = [len(json_name(name)) + 2 for name in names] + [len(body_suffix), len(end)]
        np.cumsum(lengths, out=lit_off[1:])
        lit += body_suffix + end
        kinds = np.empty(nf, dtype=np.int32)
        ptrs = [(ctypes.c_void_p * nf)() for _ in range(5)]
        keep: list = []  # arrays whose memory the C code reads

        def strings(arr):  # (offsets, data) pointers of a string/binary array
            b = arr.buffers()
            keep.append(arr)
            offs = b[1].address + 4 * arr.offset
            return offs, (b[2].address if b[2] is not None and b[2].size else _EMPTY.ctypes.data)

        for f, name in enumerate(names):
            col = batch.column(f)
            t = col.type
            if pa.types.is_integer(t):
                values = np.ascontiguousarray(col.to_numpy(), dtype=np.int64)
                keep.append(values)
                kinds[f], ptrs[0][f] = _JL_INT, values.ctypes.data
            elif pa.types.is_string(t):
                kinds[f] = _JL_STR
                ptrs[0][f], ptrs[1][f] = strings(col)
                if col.null_count:
                    valid = np.ascontiguousarray(col.is_valid().to_numpy(zero_copy_only=False))
                    keep.append(valid)
                    ptrs[2][f] = valid.ctypes.data
            elif pa.types.is_binary(t):
                kinds[f] = _JL_BODY
                ptrs[0][f], ptrs[1][f] = strings(col)
            elif pa.types.is_map(t) or pa.types.is_list(t):
                offsets = np.ascontiguousarray(col.offsets.to_numpy(), dtype=np.int32)
                keep.append(offsets)
                ptrs[0][f] = offsets.ctypes.data
                if pa.types.is_map(t):
                    kinds[f] = _JL_MAP
                    ptrs[1][f], ptrs[2][f] = strings(col.keys)
                    ptrs[3][f], ptrs[4][f] = strings(col.items)
                else:
                    kinds[f] = _JL_STRLIST
                    ptrs[1][f], ptrs[2][f] = strings(col.values)
            else:
                raise TypeError(f"{name}: no JSON line rendering for {t}")
            if col.null_count and kinds[f] != _JL_STR:
                raise TypeError(f"{name}: nulls only in string columns")
        ends = np.empty(n, dtype=np.int64)
        args = (nf, kinds.ctypes.data, lit, lit_off.ctypes.data, *ptrs, ends.ctypes.data)
        # room for the lines as they usually are (a little over the strings' own bytes); the
        # kernel stops before a line that might not fit, and the buffer grows
        raw = batch.nbytes  # the batch's bytes (its slice's, for a slice)
        out = np.empty(int(raw * 1.25) + n * (lit_off[-1] + 64) + 4096, dtype=np.uint8)
        at = ctypes.c_int64(0)
        row = 0
        while True:
            row = self.lib.rmq_json_lines(row, n, *args, out.ctypes.data, len(out), at)
            if row == n:
                break
            bigger = np.empty(2 * len(out), dtype=np.uint8)
            bigger[: at.value] = out[: at.value]
            out = bigger
        out = out[: at.value]
        return out.data, ends


def json_name(name: str) -> bytes:
    """A column name as a JSON string (names are plain ASCII identifiers here)."""
    import json

    return json.dumps(name).encode()


_JL_INT, _JL_STR, _JL_STRLIST, _JL_MAP, _JL_BODY = range(5)  # _kernel.c's JL_* kinds
_EMPTY = np.zeros(1, dtype=np.uint8)

_lock = threading.Lock()
_loaded: list = []  # [Kernel | None] once load() has run


def load() -> Kernel | None:
    """The kernel of this process (loaded once; see the module's docstring for where from), or
    None without a compiler or with ``RMQFS_NO_KERNEL=1`` (a warning is logged once)."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if _loaded:
            return _loaded[0]
        kernel = None
        if os.environ.get("RMQFS_NO_KERNEL") != "1":
            try:
                kernel = Kernel(ctypes.CDLL(_find()))
            except (OSError, ImportError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", None) or exc
                log.warning(
                    "rmqfs: the compiled decoder is not available (%s); decoding record by "
                    "record, about ten times slower. Run `make` (needs a C compiler and "
                    "zlib's headers) to build it.",
                    str(detail).strip()[:500],
                )
        _loaded.append(kernel)
        return kernel


def _find() -> str:
    name = library_name()
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, name)
    if os.path.isfile(beside):
        return beside
    cache = _cache_dir()
    if cache is None:
        raise OSError("no private cache directory to build the decoder in")
    path = os.path.join(cache, name)
    if not os.path.isfile(path):
        build(cache)
    return path


def main() -> int:
    """``python -m engine.read.kernel``: build the library beside this module (``make``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, library_name())
    if not os.path.isfile(path):
        try:
            build(here)
        except subprocess.CalledProcessError as exc:
            print(exc.stderr, file=sys.stderr)
            return 1
        for old in os.listdir(here):  # libraries of older sources
            if old.startswith("_kernel-") and old.endswith(".so") and old != library_name():
                os.unlink(os.path.join(here, old))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
