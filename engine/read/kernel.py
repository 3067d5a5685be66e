"""The compiled core of the columnar decoder: ``_kernel.c`` built with the system C compiler and
loaded with ctypes.

``engine.read.columnar`` decodes the common record (V1, IPv4 hosts, plain body) column-wise;
:meth:`Kernel.decode` (``rmq_decode``) does it in one pass over each record, with no Python
and no temporary array per record: the checks against the record's ConsumeQueue unit, the walk
of its variable part, the body CRC-32 (``UtilAll.crc32``, checked as
``MessageDecoder.decode(..., checkCRC)``), the properties split of
``MessageDecoder.string2messageProperties``, the numeric fields, msgIds
(``MessageDecoder.createMessageId``) and host texts, written straight into Arrow buffers.
:meth:`Kernel.json_lines` writes ``messages.jsonl`` lines from a batch. :meth:`Kernel.crc32`
and :meth:`Kernel.utf8_bad` are the primitives the decoder is built from, for the tests. The
record layout stays in ``engine.format.message``: callers pass field offsets and widths from
its field table.

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
from dataclasses import dataclass
from importlib import resources

import numpy as np

__all__ = ["Kernel", "Decoded", "load", "build", "library_name"]

log = logging.getLogger(__name__)

ABI = 3  # RMQ_KERNEL_ABI of _kernel.c
CC = os.environ.get("CC", "cc")
CFLAGS = ("-O3", "-std=c99", "-shared", "-fPIC", "-Wall")
LIBS = ("-lz",)
#: most pairs one properties area may have on the fast path (its repeated-name check is
#: quadratic); a record with more goes through the per-record decoder
MAX_FAST_PAIRS = 64

_i64p = ctypes.POINTER(ctypes.c_int64)
_vp = ctypes.c_void_p


class _Strings(ctypes.Structure):
    """``rmq_strings``: an Arrow string/binary array being filled."""

    _fields_ = [("offsets", _vp), ("data", _vp), ("cap", ctypes.c_int64), ("len", ctypes.c_int64)]


class _DecodeArgs(ctypes.Structure):
    """``rmq_decode_args`` of ``_kernel.c``, field for field."""

    _i32, _i64, _u32, _u8 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint8
    _fields_ = [
        ("buf", _vp), ("pos", _vp), ("size", _vp), ("phys", _vp), ("qoff", _vp), ("n", _i64),
        ("queue_id", _i32), ("topic_len", _i32), ("topic", ctypes.c_char_p),
        ("want", _i32), ("max_pairs", _i32),
        ("at_total", _i32), ("at_magic", _i32), ("at_crc", _i32), ("at_queue", _i32),
        ("at_phys", _i32), ("at_sysflag", _i32), ("at_born_host", _i32),
        ("at_store_host", _i32), ("at_body_len", _i32), ("fixed", _i32), ("tl_size", _i32),
        ("pl_size", _i32), ("at_qoff", _i32), ("pad0_", _i32),
        ("max_topic", _i64), ("max_props", _i64),
        ("magic_v1", _u32), ("magic_v2", _u32), ("rare_flags", _u32), ("crc_mask", _u32),
        ("pair_sep", _u8), ("name_sep", _u8), ("key_sep", _u8), ("pad_", _u8),
        ("tag_name", ctypes.c_char_p), ("keys_name", ctypes.c_char_p),
        ("tag_len", _i32), ("keys_len", _i32),
        ("nfix", _i32), ("pad2_", _i32), ("fix_at", _vp), ("fix_width", _vp), ("fix_dst", _vp),
        ("fast", _vp),
        ("body", _Strings), ("topics", _Strings), ("tags", _Strings), ("key_items", _Strings),
        ("prop_names", _Strings), ("prop_values", _Strings), ("born_host", _Strings),
        ("store_host", _Strings),
        ("tags_valid", _vp), ("key_lists", _vp), ("prop_maps", _vp), ("msg_id", _vp),
        ("rows", _i64), ("bad", _i64), ("bad_value", _i64), ("bad_code", _i32), ("pad3_", _i32),
    ]  # fmt: skip


#: ``want`` flags of :meth:`Kernel.decode` (``RMQ_WANT_*``, ``RMQ_CHECK_CRC`` of _kernel.c)
WANT_BODY, WANT_TOPIC, WANT_TAGS, WANT_KEYS, WANT_PROPS = 1, 2, 4, 8, 16
WANT_MSGID, WANT_BORN_HOST, WANT_STORE_HOST, CHECK_CRC = 32, 64, 128, 256
#: ``bad_code`` of a :class:`Decoded` (``RMQ_BAD_*``): what the first damaged record failed
BAD_MAGIC, BAD_TOTAL, BAD_PHYS, BAD_QUEUE, BAD_CRC, BAD_QOFF = 1, 2, 3, 4, 5, 6


@dataclass
class Decoded:
    """What :meth:`Kernel.decode` found.

    ``fast``: bool per record, True for the records decoded here (``rows`` of them, the
    columns' rows, in order); the others are left to the per-record decoder. ``fixed``: the
    numeric columns asked for (native int32/int64 arrays). ``strings``: ``(int32 offsets,
    uint8 data)`` of Arrow string arrays by name (``body``, ``topic``, ``tags``,
    ``bornHost``, ``storeHost``, one per row; ``key_items``, ``prop_names``,
    ``prop_values``, the values of the lists and maps ``key_lists`` and ``prop_maps``
    offset). ``tags_valid``: the validity bitmap of ``tags``. ``msg_id``: 32 upper-case hex
    digits per row. ``bad``: index of the first damaged record, -1 when none (its
    ``bad_code`` and the ``bad_value`` found; the records before it were decoded).
    """

    fast: np.ndarray
    rows: int
    fixed: dict
    strings: dict
    tags_valid: np.ndarray
    key_lists: np.ndarray
    prop_maps: np.ndarray
    msg_id: np.ndarray
    bad: int
    bad_code: int
    bad_value: int


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
        lib.rmq_crc32.restype = None
        lib.rmq_crc32.argtypes = [_vp, _vp, _vp, ctypes.c_int64, _vp]
        lib.rmq_utf8_check.restype = ctypes.c_int
        lib.rmq_utf8_check.argtypes = [_vp, _vp, _vp, ctypes.c_int64, _i64p]
        lib.rmq_decode.restype = ctypes.c_int32
        lib.rmq_decode.argtypes = [ctypes.POINTER(_DecodeArgs)]
        lib.rmq_json_lines.restype = ctypes.c_int64
        lib.rmq_json_lines.argtypes = [
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, *[_vp] * 10, ctypes.c_int64, _i64p,
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

    def decode(
        self,
        buf: np.ndarray,
        pos,
        size,
        phys,
        layout: dict,
        fixed: list[tuple[str, int, int]],
        want: int,
        queue_id: int | None = None,
        topic: bytes | None = None,
        queue_offsets=None,
    ) -> Decoded:
        """Decode the common records among those at ``pos`` (``rmq_decode``, see ``_kernel.c``).

        Args:
            buf: the mapped CommitLog file (1-d uint8).
            pos, size, phys: int64 arrays, one entry per record: where it starts in ``buf``,
                its unit's size (bytes) and its unit's CommitLog offset; ``pos + size`` must
                lie in ``buf`` (ValueError otherwise) and the sizes add up to less than 2 GiB
                (OverflowError: Arrow's int32 offsets).
            layout: the V1/IPv4 record layout and constants by ``_DecodeArgs`` field name
                (``at_*`` offsets, sizes, magics, separators, ``tag_name``/``keys_name``
                bytes; ``engine.read.columnar`` builds it from ``engine.format.message``).
            fixed: numeric columns to fill, ``(name, offset in the record, width 4 or 8)``.
            want: ``WANT_*`` flags of the other columns, ``CHECK_CRC`` to check BODYCRC.
            queue_id: the QUEUEID every record must have (None: not checked).
            topic: the topic every decoded record must have (None: any; its name is read with
                ``WANT_TOPIC``).
            queue_offsets: int64 array, each record's unit's queue offset: its QUEUEOFFSET
                (``layout["at_qoff"]``) must equal it (None: not checked), so a unit that
                points at another unit's record is damage (``BAD_QOFF``).

        Returns a :class:`Decoded`. Raises ValueError for positions outside ``buf``."""
        pos, size, phys = self._i64(pos), self._i64(size), self._i64(phys)
        self._check(buf, pos, size)
        n = len(pos)
        total = int(size.sum())
        if total > np.iinfo(np.int32).max:
            raise OverflowError("more than 2 GiB of records in one decode")
        a = _DecodeArgs()
        for name, value in layout.items():
            setattr(a, name, value)
        keep: list = [buf, pos, size, phys]  # memory the C code reads or writes
        a.buf, a.pos, a.size, a.phys, a.n = (
            buf.ctypes.data, pos.ctypes.data, size.ctypes.data, phys.ctypes.data, n,
        )  # fmt: skip
        if queue_offsets is not None:
            qoff = self._i64(queue_offsets)
            if len(qoff) != n:
                raise ValueError("one queue offset per record")
            keep.append(qoff)
            a.qoff = qoff.ctypes.data
        a.queue_id = -1 if queue_id is None else queue_id
        a.topic_len = -1 if topic is None else len(topic)
        a.topic = topic or b""
        a.want = want
        a.max_pairs = MAX_FAST_PAIRS
        a.tag_len, a.keys_len = len(layout["tag_name"]), len(layout["keys_name"])
        cols = {name: _out(n, np.int64 if w == 8 else np.int32) for name, _, w in fixed}
        at = np.array([off for _, off, _ in fixed], dtype=np.int32)
        width = np.array([w for _, _, w in fixed], dtype=np.int32)
        dst = (ctypes.c_void_p * max(1, len(fixed)))(*(c.ctypes.data for c in cols.values()))
        keep += [at, width, dst]
        a.nfix, a.fix_at, a.fix_width, a.fix_dst = (
            len(fixed),
            at.ctypes.data,
            width.ctypes.data,
            ctypes.addressof(dst),
        )
        fast = _out(n, dtype=np.uint8)
        a.fast = fast.ctypes.data

        def strings(field: str, flag: int, items: int, cap: int):
            if not want & flag:
                items, cap = 0, 0
            offsets = _out(items + 1, dtype=np.int32)
            data = _out(max(cap, 1), dtype=np.uint8)
            s = getattr(a, field)
            s.offsets, s.data, s.cap = offsets.ctypes.data, data.ctypes.data, cap
            keep.extend((offsets, data))
            return offsets, data

        host = 27  # "255.255.255.255:-2147483648"
        out = {
            "body": strings("body", WANT_BODY, n, total),
            "topic": strings("topics", WANT_TOPIC if topic is None else 0, n, total),
            "tags": strings("tags", WANT_TAGS, n, total),
            "key_items": strings("key_items", WANT_KEYS, total // 2 + n, total),
            "prop_names": strings("prop_names", WANT_PROPS, total // 4 + n, total),
            "prop_values": strings("prop_values", WANT_PROPS, total // 4 + n, total),
            "bornHost": strings("born_host", WANT_BORN_HOST, n, host * n),
            "storeHost": strings("store_host", WANT_STORE_HOST, n, host * n),
        }
        valid = _out((n + 7) // 8 if want & WANT_TAGS else 1, dtype=np.uint8)
        key_lists = _out(n + 1 if want & WANT_KEYS else 1, dtype=np.int32)
        prop_maps = _out(n + 1 if want & WANT_PROPS else 1, dtype=np.int32)
        msg_id = _out(32 * n if want & WANT_MSGID else 1, dtype=np.uint8)
        a.tags_valid, a.key_lists = valid.ctypes.data, key_lists.ctypes.data
        a.prop_maps, a.msg_id = prop_maps.ctypes.data, msg_id.ctypes.data
        status = self.lib.rmq_decode(ctypes.byref(a))
        if status == 2:
            raise AssertionError("rmq_decode: an output bound was broken")
        rows = a.rows

        def cut(offsets, data, count):  # an output not asked for has no rows
            count = min(count, len(offsets) - 1)
            return offsets[: count + 1], data[: int(offsets[count])] if count else data[:0]

        strings_out = {
            name: cut(offs, data, rows) for name, (offs, data) in out.items()
            if name not in ("key_items", "prop_names", "prop_values")
        }  # fmt: skip
        items = int(key_lists[rows]) if want & WANT_KEYS else 0
        pairs = int(prop_maps[rows]) if want & WANT_PROPS else 0
        for name, count in (("key_items", items), ("prop_names", pairs), ("prop_values", pairs)):
            offs, data = out[name]
            strings_out[name] = cut(offs, data, count)
        return Decoded(
            fast=fast.view(bool),
            rows=rows,
            fixed={name: col[:rows] for name, col in cols.items()},
            strings=strings_out,
            tags_valid=valid[: (rows + 7) // 8],
            key_lists=key_lists[: rows + 1],
            prop_maps=prop_maps[: rows + 1],
            msg_id=msg_id[: 32 * rows],
            bad=a.bad if status == 1 else -1,
            bad_code=a.bad_code,
            bad_value=a.bad_value,
        )

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


def _out(count: int, dtype=np.uint8) -> np.ndarray:
    """An output array of ``count`` elements (uninitialised) in Arrow's memory pool: it keeps
    freed memory for the next batch, where fresh ``malloc``ed pages would each be faulted in
    and zeroed by the kernel again (a tenth of a decode)."""
    dtype = np.dtype(dtype)
    import pyarrow as pa

    return np.frombuffer(pa.allocate_buffer(max(count, 1) * dtype.itemsize), dtype=dtype)[:count]


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
