"""The compiled core of the columnar decoder: ``_kernel.c``, built by the build backend as the
extension module ``engine.read._kernel_cffi`` (cffi, API mode; ``engine/read/_kernel_build.py``).

``engine.read.columnar`` decodes the common record (V1, IPv4 hosts, plain body) column-wise;
:meth:`Kernel.decode` (``rmq_decode``) does it in one pass over each record, with no Python
and no temporary array per record: the checks against the record's ConsumeQueue unit, the walk
of its variable part, the body CRC-32 (``UtilAll.crc32``, checked as
``MessageDecoder.decode(..., checkCRC)``), the properties split of
``MessageDecoder.string2messageProperties``, the numeric fields, msgIds
(``MessageDecoder.createMessageId``) and host texts, written straight into Arrow buffers.
:meth:`Kernel.json_lines` writes ``messages.jsonl`` lines from a batch. The store's put path
uses ``rmq_put`` (through the module's ``ffi``/``lib``, engine.service.putmessage.put_plain)
and an :class:`IndexWriter` writing IndexFile entries straight into the file's mapping
(``rmq_index_put_mapped``). :meth:`Kernel.crc32`
and :meth:`Kernel.utf8_bad` are the primitives the decoder is built from, for the tests. The
record layout stays in ``engine.format.message``: callers pass field offsets and widths from
its field table.

The module is compiled when the package is built or installed (``pip install .``, ``pip wheel
.``, ``pip install -e .`` that ``make venv`` runs; ``make kernel`` rebuilds it in the tree
after ``_kernel.c`` changed): nothing is compiled at run time, and a wheel needs no compiler
where it is installed. The interface is declared once in ``_kernel.h``; cffi's cdef of it is
compiled against that header, so the compiler checks every field and signature used here
(``_kernel_build.py`` says how). A package imported from a zip (Spark's ``addPyFile``, see
``pipeline.datasource``) cannot load an extension module from it: :func:`load` copies the
zip's module into the user's cache directory (``$XDG_CACHE_HOME/rmqfs``, else
``~/.cache/rmqfs``; only a directory owned by this user and writable by no one else), named
by its digest, and loads it from there.

Without the module (a checkout that was not built, a platform without a wheel), with a module
built from another ``_kernel.c`` than the one beside it, or with ``RMQFS_NO_KERNEL=1``,
:func:`load` returns None and the columnar decoder decodes every record with the per-record
decoder: the same rows, about ten times slower; a warning says so once per process.

Every wrapper checks the positions it is given against the buffer's length before the C code
runs (the C side trusts them), and raises ValueError otherwise.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import tempfile
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format.commitlog import WALK_MAGICS
from ..format.dledger import WALK_LAYOUT as ENTRY_WALK_LAYOUT
from ..format.indexfile import (
    HASH_SLOT_SIZE,
    HEADER_POSITIONS,
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    INVALID_INDEX,
    ITEM_POSITIONS,
    StructureFindings,
)
from ..format.message import INDEX_KEYS_LAYOUT, PROPERTY_KEYS, PROPERTY_UNIQ_KEY
from .schema import int_values

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Kernel", "Decoded", "IndexWriter", "load"]

log = logging.getLogger(__name__)

#: most pairs one properties area may have on the fast path (its repeated-name check is
#: quadratic); a record with more goes through the per-record decoder
MAX_FAST_PAIRS = 64
#: the extension module's name (``_kernel_build.MODULE``) within this package
_MODULE = "_kernel_cffi"

#: :meth:`Kernel.message_reader`'s ``(vouch, keys_utf8, vouch_row)``
MessageReaders = tuple[
    Callable[..., "list[tuple] | None"], Callable[[Sequence], Any], Callable[..., "tuple | None"]
]
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

    def __init__(self, module: ModuleType):
        """Wrap the extension module (its ``ffi`` and ``lib``). Raises ImportError when its
        constants are not this module's or cffi finds its struct layout is not the compiler's
        (a cdef that drifted from ``_kernel.h``)."""
        self.ffi, self.lib = module.ffi, module.lib
        try:
            for struct_type in (
                "rmq_decode_args",
                "rmq_put_args",
                "rmq_index_args",
                "rmq_index_map",
                "rmq_index_check_args",
                "rmq_keys_args",
            ):
                self.ffi.new(f"{struct_type} *")  # cffi checks each field's offset and size here
        except Exception as exc:  # noqa: BLE001 - cffi's own error type (ffi.error)
            raise ImportError(f"rmqfs kernel: {exc}") from None
        for name, value in _CONSTANTS.items():
            if getattr(self.lib, name) != value:
                raise ImportError(f"rmqfs kernel: {name} is {getattr(self.lib, name)}, not {value}")
        self.objects = _companion(module)

    def message_reader(
        self, message_type: type, names: tuple[str, ...], defaults: tuple
    ) -> MessageReaders | None:
        """The put path's readers of Python objects (``_putobj.c``): ``(vouch, keys_utf8,
        vouch_row)``
        configured for exact instances of ``message_type`` (a dataclass with slots), whose
        fields ``names`` are the eleven the put path reads in ``_putobj.c``'s order, then the
        ones that must be at their ``defaults`` (by identity).

        ``vouch(messages, good_tags, banned_topics)``: the eleven columns of a list of
        messages (a tuple a field) when it can vouch that every message passes the client's
        rules and is a plain one (see ``_putobj.c``), else None. ``keys_utf8(keys)``: a KEYS
        column (a tuple or list of None or str) as ``putmessage._own_keys`` gives it (the
        UTF-8 values one after another, their int32 lengths as bytes, -1 for no value, the
        spaces among them), None when every item is None, False for one it cannot encode (not
        None or a ``str``, a lone surrogate). ``vouch_row(message, good_tags, banned_topics)``:
        ``vouch`` of one message, its eleven fields as one tuple (a single put's), else None.

        None without the companion module (then the Python paths read the objects). Raises
        TypeError when a name is not an object slot of ``message_type``."""
        objects = self.objects
        if objects is None:
            return None
        with _lock:
            objects.configure(message_type, names, defaults)
        return objects.vouch, objects.keys_utf8, objects.vouch_row

    def put_lane(
        self,
        owner: Any,
        args: Any,
        round_robin: dict,
        queue_offsets: dict,
        tags_cache: dict,
        sharding_prefix: bytes,
        result_type: type,
        uniq_prefix: str,
        uniq_state: Any,
    ) -> Any:
        """The single put's lane (``_putobj.Lane``, see ``_putobj.c``) over ``args``, a cffi
        ``rmq_put_args *`` of this kernel (its memory exported to the lane for the lane's
        life), held by ``owner`` with the arrays its pointers point at (the lane holds
        ``owner``), with the put path's round robin (topic -> next count, advanced by the lane),
        topicQueueTable ((topic, queueId) -> next queue offset, read), tags cache (tags ->
        (TAGS item, tagsCode), read), the SHARDING_KEY item's prefix, the class of its results
        (a named tuple of the eight PutResult fields) and the UNIQ_KEY generator's prefix and
        state (``UniqKeyGenerator.lane_state``: ids are taken from it). ``lane.put(row,
        born_host, info, now, start, window, index)`` puts one message, its index entries
        added to the index's waiting ones where ``index`` is ``IndexService.lane_state()``
        (``_putobj.c`` says what it returns). None without the companion module."""
        objects = self.objects
        if objects is None:
            return None
        return objects.new_lane(
            owner,
            self.ffi.buffer(args),
            round_robin,
            queue_offsets,
            tags_cache,
            sharding_prefix,
            result_type,
            uniq_prefix,
            uniq_state,
        )

    def _p(self, a: np.ndarray) -> Any:
        """``a``'s memory as a ``void *`` for the C side (``a`` must be kept alive)."""
        return self.ffi.cast("void *", a.ctypes.data)

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
    def _i64(a: np.typing.ArrayLike) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.int64)

    def crc32(
        self, buf: np.ndarray, starts: np.typing.ArrayLike, lengths: np.typing.ArrayLike
    ) -> np.ndarray:
        """zlib CRC-32 of each piece (uint32 array)."""
        starts, lengths = self._i64(starts), self._i64(lengths)
        self._check(buf, starts, lengths)
        out = np.empty(len(starts), dtype=np.uint32)
        p = self._p
        self.lib.rmq_crc32(p(buf), p(starts), p(lengths), len(starts), p(out))
        return out

    def utf8_bad(
        self, buf: np.ndarray, starts: np.typing.ArrayLike, lengths: np.typing.ArrayLike
    ) -> int:
        """Index of the first piece that is not strict UTF-8 (as ``bytes.decode``), or -1."""
        starts, lengths = self._i64(starts), self._i64(lengths)
        self._check(buf, starts, lengths)
        bad = self.ffi.new("int64_t *", -1)
        p = self._p
        ok = self.lib.rmq_utf8_check(p(buf), p(starts), p(lengths), len(starts), bad)
        return -1 if ok else int(bad[0])

    def walk(self, buf: np.ndarray, cap: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, str, int]:
        """Walk CommitLog records in ``buf`` (1-d uint8) from 0 by TOTALSIZE (``rmq_walk``: the
        rules of :func:`engine.format.commitlog.walk_segment`, which judges it in the tests).

        Returns ``(starts, sizes, kind, pos)``: int64 arrays of each whole record's position
        and TOTALSIZE, what ended the walk (one of :data:`engine.format.commitlog.STEP_KINDS`
        but ``record``, or ``end`` when the records end exactly at ``len(buf)``) and where."""
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise ValueError("buf must be a 1-d uint8 array")
        ffi, p = self.ffi, self._p
        end = ffi.new("int64_t *", 0)
        kind = ffi.new("int32_t *", 0)
        parts_s, parts_z = [], []
        base = 0
        while True:
            rest = buf[base:]
            n_cap = max(1, min(cap, len(rest) // 8 + 1))
            starts = np.empty(n_cap, np.int64)
            sizes = np.empty(n_cap, np.int64)
            n = self.lib.rmq_walk(
                p(rest), len(rest), *WALK_MAGICS,
                p(starts), p(sizes), n_cap, end, kind,
            )  # fmt: skip
            parts_s.append(starts[:n] + base)
            parts_z.append(sizes[:n])
            base += int(end[0])
            if kind[0] != self.lib.RMQ_WALK_FULL:
                break
        return (
            np.concatenate(parts_s) if len(parts_s) > 1 else parts_s[0],
            np.concatenate(parts_z) if len(parts_z) > 1 else parts_z[0],
            _WALK_KINDS[kind[0]],
            base,
        )

    def walk_entries(
        self, buf: np.ndarray, base: int, committed: int, state: list[int], cap: int = 1 << 20
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, int]:
        """Walk a DLedger CommitLog's entries in ``buf`` (1-d uint8, CommitLog offset ``base``
        at 0) from 0 (``rmq_walk_entries``: :func:`engine.format.commitlog.entry_step` and
        :func:`engine.format.commitlog.record_step` as ``CommitLog.scan_raw`` takes them, which
        judges it in the tests), up to the entry of index ``committed``; ``state`` is
        ``[last index, last term]`` (``[-1, -1]`` before the first entry), moved on in place.

        Returns ``(starts, sizes, entries, kind, pos)``: int64 arrays of each record's position
        in ``buf`` (its entry's + 48) and TOTALSIZE, and its entry's index and term (shape
        ``(n, 2)``), what ended the walk (``end``, ``filler``, ``zeros``, ``torn``,
        ``past_end``, ``damaged`` or ``committed``) and where (an entry's position)."""
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise ValueError("buf must be a 1-d uint8 array")
        ffi, p = self.ffi, self._p
        end = ffi.new("int64_t *", 0)
        kind = ffi.new("int32_t *", 0)
        st = ffi.new("int64_t[2]", state)
        layout = ffi.new("int32_t[]", list(ENTRY_WALK_LAYOUT))
        parts_s, parts_z, parts_e = [], [], []
        at = 0
        while True:
            rest = buf[at:]
            # an entry holds a header and a record head at least
            n_cap = max(1, min(cap, len(rest) // (ENTRY_WALK_LAYOUT[0] + 8) + 1))
            starts = np.empty(n_cap, np.int64)
            sizes = np.empty(n_cap, np.int64)
            entries = np.empty((n_cap, 2), np.int64)
            n = self.lib.rmq_walk_entries(
                p(rest), len(rest), base + at, committed, layout, *WALK_MAGICS[:2],
                st, p(starts), p(sizes), p(entries), n_cap, end, kind,
            )  # fmt: skip
            parts_s.append(starts[:n] + at)
            parts_z.append(sizes[:n].copy())  # not the whole output array, held by a run
            parts_e.append(entries[:n].copy())
            at += int(end[0])
            if kind[0] != self.lib.RMQ_WALK_FULL:
                break
        state[0], state[1] = int(st[0]), int(st[1])
        one = len(parts_s) == 1
        return (
            parts_s[0] if one else np.concatenate(parts_s),
            parts_z[0] if one else np.concatenate(parts_z),
            parts_e[0] if one else np.concatenate(parts_e),
            _WALK_KINDS[kind[0]],
            at,
        )

    def index_check(self, slot_raw: Any, raw: Any, slots: int, count: int) -> StructureFindings:
        """:data:`engine.format.indexfile.IndexCheck` compiled (``rmq_index_check``): one pass
        over an IndexFile's slots and items 1 .. ``count`` - 1 as stored, what
        :func:`engine.format.indexfile.structure_findings` finds (tests/engine/test_put_kernel.py
        judges it against that). ValueError when the buffers are shorter than ``slots`` slots
        and ``count`` - 1 items."""
        if slots < 1 or count < 1:
            raise ValueError("an IndexFile has a slot and an item at least")
        if len(slot_raw) < HASH_SLOT_SIZE * slots or len(raw) < INDEX_SIZE * (count - 1):
            raise ValueError("slots or items shorter than the geometry")
        ffi = self.ffi
        a = ffi.new("rmq_index_check_args *")
        newest = np.empty(slots, np.int64)
        slot_buf = ffi.from_buffer("uint8_t[]", slot_raw)
        item_buf = ffi.from_buffer("uint8_t[]", raw)
        a.slots, a.nslots, a.items, a.count = slot_buf, slots, item_buf, count
        a.item_size = INDEX_SIZE
        a.at_hash, a.at_phy, a.at_diff, a.at_prev = ITEM_POSITIONS.values()
        a.newest = self._p(newest)
        try:
            self.lib.rmq_index_check(a)
        finally:  # the caller may close the mapping the buffers are in
            ffi.release(slot_buf)
            ffi.release(item_buf)
        return StructureFindings(
            bool(a.negative),
            bool(a.bad_prev),
            bool(a.cross_bucket),
            bool(a.out_of_order),
            a.slot,
            a.slot_value,
            a.newest_value,
            a.used,
            a.last_phy,
        )

    def index_keys(
        self,
        buf: Any,
        pos: np.ndarray,
        phys: np.ndarray,
        store_ts: np.ndarray,
        prefix_hash: np.ndarray,
    ) -> tuple[np.ndarray, int]:
        """The IndexFile entries re-dispatching the records at ``pos`` of ``buf`` adds
        (``rmq_index_keys``: ``IndexService.buildIndex`` of each record, as
        :meth:`engine.service.indexservice.IndexService.dispatch` builds them from decoded
        records, which judges it in tests/engine/test_index_keys.py).

        Args:
            buf: the records (bytes-like: a file's mapping, or bytes).
            pos: int64, where each record starts in ``buf``; ``phys``: its CommitLog offset;
                ``store_ts``: its STORETIMESTAMP (epoch ms); ``prefix_hash``: uint32, the Java
                hashCode of ``topic#`` of its topic.

        Returns ``(entries, bad)``: flat int64 ``[keyHash, phyOffset, storeTimestamp, ...]`` in
        record order (what :meth:`IndexService.put_hashed` takes) of the records before
        ``bad``, and ``bad``: ``len(pos)``, or the first record read differently here than by
        the decoder (properties that are not strict UTF-8, lengths outside the record): the
        caller decodes that record (:func:`engine.read.recoverruns.index_entries`) and calls
        again from the next one."""
        ffi, p = self.ffi, self._p
        pos, phys, ts = self._i64(pos), self._i64(phys), self._i64(store_ts)
        ph = np.ascontiguousarray(prefix_hash, dtype=np.uint32)
        n = len(pos)
        if not len(phys) == len(ts) == len(ph) == n:
            raise ValueError("one CommitLog offset, timestamp and topic hash per record")
        a = ffi.new("rmq_keys_args *")
        for name, value in INDEX_KEYS_LAYOUT.items():
            setattr(a, name, value)
        uniq, keys = PROPERTY_UNIQ_KEY.encode(), PROPERTY_KEYS.encode()
        view = ffi.from_buffer("uint8_t[]", buf)
        try:
            a.buf, a.len = view, len(view)
            a.pos, a.phys, a.store_ts, a.prefix_hash, a.n = p(pos), p(phys), p(ts), p(ph), n
            # kept until the calls end
            names = ffi.from_buffer("uint8_t[]", uniq), ffi.from_buffer("uint8_t[]", keys)
            a.uniq_name, a.uniq_len = names[0], len(uniq)
            a.keys_name, a.keys_len = names[1], len(keys)
            cap = 2 * n + 16  # a UNIQ_KEY and a key a record: grown when short
            out = np.empty(3 * cap, np.int64)
            while True:
                a.entries, a.cap = p(out), cap
                self.lib.rmq_index_keys(a)
                if a.done == n or a.bad >= 0:
                    break
                a.first = a.done  # out of room: the record goes again into a larger array
                cap *= 2
                bigger = np.empty(3 * cap, np.int64)
                bigger[: 3 * a.nout] = out[: 3 * a.nout]
                out = bigger
        finally:  # the caller may close the mapping
            ffi.release(view)
        return out[: 3 * a.nout], n if a.bad < 0 else int(a.bad)

    def index_writer(self) -> IndexWriter:
        """A new :class:`IndexWriter` (one per store: it keeps its argument structs between
        calls, so two stores must not share one)."""
        return IndexWriter(self)

    def decode(
        self,
        buf: np.ndarray,
        pos: np.ndarray,
        size: np.ndarray,
        phys: np.ndarray,
        layout: dict,
        fixed: list[tuple[str, int, int]],
        want: int,
        queue_id: int | None = None,
        topic: bytes | None = None,
        queue_offsets: np.ndarray | None = None,
    ) -> Decoded:
        """Decode the common records among those at ``pos`` (``rmq_decode``, see ``_kernel.c``).

        Args:
            buf: the mapped CommitLog file (1-d uint8).
            pos, size, phys: int64 arrays, one entry per record: where it starts in ``buf``,
                its unit's size (bytes) and its unit's CommitLog offset; ``pos + size`` must
                lie in ``buf`` (ValueError otherwise) and the sizes add up to less than 2 GiB
                (OverflowError: Arrow's int32 offsets).
            layout: the V1/IPv4 record layout and constants by ``rmq_decode_args`` field name
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
        ffi, p = self.ffi, self._p
        a = ffi.new("rmq_decode_args *")
        keep: list = [buf, pos, size, phys]  # memory the C code reads or writes
        for name, value in layout.items():
            if isinstance(value, bytes):
                value = ffi.from_buffer("uint8_t[]", value)
                keep.append(value)
            setattr(a, name, value)
        a.buf, a.pos, a.size, a.phys, a.n = p(buf), p(pos), p(size), p(phys), n
        if queue_offsets is not None:
            qoff = self._i64(queue_offsets)
            if len(qoff) != n:
                raise ValueError("one queue offset per record")
            keep.append(qoff)
            a.qoff = p(qoff)
        a.queue_id = -1 if queue_id is None else queue_id
        a.topic_len = -1 if topic is None else len(topic)
        topic_c = ffi.from_buffer("uint8_t[]", topic or b"")
        a.topic = topic_c
        a.want = want
        a.max_pairs = MAX_FAST_PAIRS
        a.tag_len, a.keys_len = len(layout["tag_name"]), len(layout["keys_name"])
        cols = {name: _out(n, np.int64 if w == 8 else np.int32) for name, _, w in fixed}
        at = np.array([off for _, off, _ in fixed], dtype=np.int32)
        width = np.array([w for _, _, w in fixed], dtype=np.int32)
        dst = ffi.new("void *[]", [p(c) for c in cols.values()] or 1)
        keep += [at, width, dst, topic_c]
        a.nfix, a.fix_at, a.fix_width, a.fix_dst = len(fixed), p(at), p(width), dst
        fast = _out(n, dtype=np.uint8)
        a.fast = p(fast)

        def strings(field: str, flag: int, items: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
            if not want & flag:
                items, cap = 0, 0
            offsets = _out(items + 1, dtype=np.int32)
            data = _out(max(cap, 1), dtype=np.uint8)
            s = getattr(a, field)
            s.offsets, s.data, s.cap = p(offsets), p(data), cap
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
        a.tags_valid, a.key_lists = p(valid), p(key_lists)
        a.prop_maps, a.msg_id = p(prop_maps), p(msg_id)
        status = self.lib.rmq_decode(a)
        if status == 2:
            raise AssertionError("rmq_decode: an output bound was broken")
        rows = a.rows

        def cut(
            offsets: np.ndarray, data: np.ndarray, count: int
        ) -> tuple[np.ndarray, np.ndarray]:  # an output not asked for has no rows
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

    def json_lines(
        self, batch: pa.RecordBatch, body_suffix: bytes, end: bytes
    ) -> tuple[memoryview, np.ndarray]:
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
        ffi = self.ffi
        ptrs = [ffi.new("void *[]", max(nf, 1)) for _ in range(5)]
        keep: list = []  # arrays whose memory the C code reads

        def strings(
            arr: pa.Array,
        ) -> tuple[Any, Any]:  # (offsets, data) pointers of a string/binary array
            b = arr.buffers()
            keep.append(arr)
            offs = b[1].address + 4 * arr.offset
            data = b[2].address if b[2] is not None and b[2].size else _EMPTY.ctypes.data
            return ffi.cast("void *", offs), ffi.cast("void *", data)

        for f, name in enumerate(names):
            col = batch.column(f)
            t = col.type
            if pa.types.is_integer(t):
                values = np.ascontiguousarray(int_values(col), dtype=np.int64)
                keep.append(values)
                kinds[f], ptrs[0][f] = _JL_INT, self._p(values)
            elif pa.types.is_string(t):
                kinds[f] = _JL_STR
                ptrs[0][f], ptrs[1][f] = strings(col)
                if col.null_count:
                    valid = np.ascontiguousarray(col.is_valid().to_numpy(zero_copy_only=False))
                    keep.append(valid)
                    ptrs[2][f] = self._p(valid)
            elif pa.types.is_binary(t):
                kinds[f] = _JL_BODY
                ptrs[0][f], ptrs[1][f] = strings(col)
            elif pa.types.is_map(t) or pa.types.is_list(t):
                offsets = np.ascontiguousarray(int_values(col.offsets), dtype=np.int32)
                keep.append(offsets)
                ptrs[0][f] = self._p(offsets)
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
        lit_c = ffi.from_buffer("uint8_t[]", lit)
        p = self._p
        args = (nf, p(kinds), lit_c, p(lit_off), *ptrs, p(ends))
        # room for the lines as they usually are (a little over the strings' own bytes); the
        # kernel stops before a line that might not fit, and the buffer grows
        raw = batch.nbytes  # the batch's bytes (its slice's, for a slice)
        out = np.empty(int(raw * 1.25) + n * (lit_off[-1] + 64) + 4096, dtype=np.uint8)
        at = ffi.new("int64_t *", 0)
        row = 0
        while True:
            row = self.lib.rmq_json_lines(row, n, *args, p(out), len(out), at)
            if row == n:
                break
            bigger = np.empty(2 * len(out), dtype=np.uint8)
            bigger[: at[0]] = out[: at[0]]
            out = bigger
        out = out[: at[0]]
        return out.data, ends


class IndexWriter:
    """:data:`engine.format.indexfile.IndexInPlace` compiled (``rmq_index_put_mapped``): the
    items of ``n`` pre-hashed entries, the slots they change and the header written straight
    into an IndexFile's writable mapping, as ``IndexFile.putKey`` writes through its
    ``MappedByteBuffer`` (each chain head read from the slot in the mapping), with the bytes
    :func:`engine.format.indexfile.index_step` builds (tests/engine/test_put_kernel.py). The
    argument structs are kept between calls (a single put's one or two entries cost a call,
    not a set-up); not thread-safe: the caller holds the index's lock."""

    def __init__(self, kernel: Kernel):
        ffi = self.ffi = kernel.ffi
        self.lib = kernel.lib
        a = self.args = ffi.new("rmq_index_args *")
        a.invalid_index, a.item_size = INVALID_INDEX, INDEX_SIZE
        a.at_hash, a.at_phy, a.at_diff, a.at_prev = ITEM_POSITIONS.values()
        m = self.map = ffi.new("rmq_index_map *")
        m.header_size, m.slot_size = INDEX_HEADER_SIZE, HASH_SLOT_SIZE
        (
            m.at_begin_ts,
            m.at_end_ts,
            m.at_begin_phy,
            m.at_end_phy,
            m.at_slot_count,
            m.at_count,
        ) = HEADER_POSITIONS.values()
        self.need_cap = 256
        self.need = m.need = ffi.new("int64_t[]", self.need_cap)
        m.need_cap = self.need_cap
        self.chunks: Any = None
        self.chunks_buf: Any = None

    def __call__(
        self,
        mapping: Any,
        chunks: bytearray,
        chunk_size: int,
        items_base: int,
        nslots: int,
        entries: Sequence[int],
        start: int,
        n: int,
        state: tuple[int, int, int, int],
    ) -> tuple[int, int, int, int, int, int] | list[int]:
        """Write entries ``start .. start + n`` (flat ``[keyHash, phyOffset, storeTimestamp,
        ...]``, keyHash in [0, 2**31)) into ``mapping`` (the whole file, writable; its
        ``nslots`` hash slots after the header, items from ``items_base``); ``state`` is
        ``(indexCount, hashSlotCount, beginTimestamp, beginPhyOffset)`` and the caller has
        checked that the items fit (``indexCount + n <= indexNum``). ``chunks`` says which
        ``chunk_size``-byte chunks of the file are allocated (1): returns the header after
        (:data:`engine.format.indexfile.HEADER`'s order), or, with nothing written, the chunk
        numbers to allocate first. Raises ValueError for entries outside ``entries``, OSError
        (EIO) for a write outside the mapping (nothing written)."""
        ffi, a, m = self.ffi, self.args, self.map
        if not isinstance(entries, array) or entries.typecode != "q":
            entries = array("q", entries)
        if start < 0 or n <= 0 or 3 * (start + n) > len(entries):
            raise ValueError("entries outside the list")
        if chunks is not self.chunks:
            self.chunks_buf = m.chunks = ffi.from_buffer("uint8_t[]", chunks)
            m.nchunks = len(chunks)
            self.chunks = chunks
        a.first, a.n, a.nslots = start, n, nslots
        a.count, a.slot_count, a.begin_ts, a.begin_phy = state
        m.chunk_size, m.items_base = chunk_size, items_base
        given = view = None
        try:
            given = a.entries = ffi.from_buffer("int64_t[]", entries)
            view = ffi.from_buffer("uint8_t[]", mapping, require_writable=True)
            m.map, m.map_len = view, len(view)
            rc = self.lib.rmq_index_put_mapped(a, m)
        finally:
            for buf in (view, given):
                if buf is not None:
                    ffi.release(buf)
        if rc == n:
            return (a.begin_ts, a.end_ts, a.begin_phy, a.end_phy, a.slot_count, a.count)
        if rc == -1:
            return ffi.unpack(self.need, min(m.nneed, self.need_cap))
        # the file is shorter than its geometry says (cut by someone else): the put is undone
        raise OSError(errno.EIO, "an IndexFile write would fall outside the file")


def _out(count: int, dtype: np.typing.DTypeLike = np.uint8) -> np.ndarray:
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


_JL_INT, _JL_STR, _JL_STRLIST, _JL_MAP, _JL_BODY = range(5)  # _kernel.h's JL_* kinds
_EMPTY = np.zeros(1, dtype=np.uint8)
#: the C constants this module repeats (it imports without the binary), checked on load
#: rmq_walk's and rmq_walk_entries' kinds by value (RMQ_WALK_*): the names of
#: engine.format.commitlog.STEP_KINDS, then the entry walk's own
_WALK_KINDS = (
    "end", "blank", "zeros", "torn", "not_record", "past_end", "full",
    "filler", "damaged", "committed",
)  # fmt: skip

_CONSTANTS = {
    "RMQ_WANT_BODY": WANT_BODY, "RMQ_WANT_TOPIC": WANT_TOPIC, "RMQ_WANT_TAGS": WANT_TAGS,
    "RMQ_WANT_KEYS": WANT_KEYS, "RMQ_WANT_PROPS": WANT_PROPS, "RMQ_WANT_MSGID": WANT_MSGID,
    "RMQ_WANT_BORN_HOST": WANT_BORN_HOST, "RMQ_WANT_STORE_HOST": WANT_STORE_HOST,
    "RMQ_CHECK_CRC": CHECK_CRC, "RMQ_BAD_MAGIC": BAD_MAGIC, "RMQ_BAD_TOTAL": BAD_TOTAL,
    "RMQ_BAD_PHYS": BAD_PHYS, "RMQ_BAD_QUEUE": BAD_QUEUE, "RMQ_BAD_CRC": BAD_CRC,
    "RMQ_BAD_QOFF": BAD_QOFF, "JL_INT": _JL_INT, "JL_STR": _JL_STR, "JL_STRLIST": _JL_STRLIST,
    "JL_MAP": _JL_MAP, "JL_BODY": _JL_BODY,
    **{f"RMQ_WALK_{k.upper()}": v for v, k in enumerate(_WALK_KINDS)},
}  # fmt: skip

_lock = threading.Lock()
_loaded: list = []  # [Kernel | None] once load() has run


def load() -> Kernel | None:
    """The kernel of this process (loaded once; see the module's docstring for where from), or
    None without the compiled module, with one built from another source, or with
    ``RMQFS_NO_KERNEL=1`` (a warning is logged once)."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if _loaded:
            return _loaded[0]
        kernel = None
        if os.environ.get("RMQFS_NO_KERNEL") != "1":
            try:
                kernel = Kernel(compiled_module())
            except (OSError, ImportError) as exc:
                log.warning(
                    "rmqfs: the compiled decoder is not available (%s); decoding record by "
                    "record, about ten times slower. Build it with `make kernel` in a "
                    "checkout, or install rmqfs with pip (a wheel carries it; building "
                    "from source needs a C compiler and zlib's headers).",
                    str(exc).strip()[:500],
                )
        _loaded.append(kernel)
        return kernel


def _companion(module: ModuleType) -> ModuleType | None:
    """``_putobj``, the second extension module in the kernel's file (``_putobj.c``, the put
    path's reader of Message objects: CPython's multiple modules in one library, loaded by
    name from the same file), None (with a warning) where it will not load."""
    name = f"{__package__}._putobj"
    path = module.__file__
    try:
        if path is None:
            raise ImportError("the kernel module has no file")
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        if spec is None:
            raise ImportError(f"{path}: no module spec")
        companion = importlib.util.module_from_spec(spec)
        loader.exec_module(companion)
    except (ImportError, OSError) as exc:
        log.warning("rmqfs: the put path's reader of messages will not load (%s)", exc)
        return None
    return companion


def compiled_module() -> ModuleType:
    """The extension module: the file ``$RMQFS_KERNEL_MODULE`` names (``make sanitize``'s
    build), else imported as usual, else (a package in a zip) from the cache. Raises
    ImportError when there is none or it was built from another ``_kernel.c``."""
    import importlib

    path = os.environ.get("RMQFS_KERNEL_MODULE")
    if path:
        module = _load_file(path)
    else:
        try:
            module = importlib.import_module(f"{__package__}.{_MODULE}")
        except ImportError as exc:
            zipped = _from_zip()
            if zipped is None:
                raise ImportError(f"no {__package__}.{_MODULE} ({exc})") from None
            module = zipped
    want = source_digest()
    got = module.ffi.string(module.lib.rmq_source_digest()).decode()
    if want is not None and got != want:
        raise ImportError(
            f"{module.__file__} was built from another _kernel.c (digest {got}, the source "
            f"beside it is {want}): run `make kernel`"
        )
    return module


def source_digest() -> str | None:
    """SHA-256 (16 hex digits) of the ``_kernel.c`` and ``_kernel.h`` shipped beside this
    module (``_kernel_build.source_digest``), None when they are not there."""
    h = hashlib.sha256()
    try:
        for name in ("_kernel.c", "_kernel.h", "_putobj.c"):
            h.update(resources.files(__package__).joinpath(name).read_bytes())
    except OSError:
        return None
    return h.hexdigest()[:16]


def _from_zip() -> ModuleType | None:
    """The extension module of a package imported from a zip: zipimport loads no extension
    modules, so its bytes are copied into the user's cache directory under a name that carries
    their digest (written under a temporary name, then renamed) and loaded from there. None
    when the package is not in a zip or the zip has no module for this interpreter."""
    here = resources.files(__package__)
    if os.path.isdir(str(here)):
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        entry = here.joinpath(_MODULE + suffix)
        if entry.is_file():
            break
    else:
        return None
    data = entry.read_bytes()
    cache = _cache_dir()
    if cache is None:
        raise OSError("no private cache directory to unpack the compiled decoder in")
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = os.path.join(cache, f"{_MODULE}-{digest}{suffix}")
    if not os.path.isfile(path):
        fd, part = tempfile.mkstemp(prefix=".kernel-", dir=cache)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(part, path)
        except BaseException:
            if os.path.exists(part):
                os.unlink(part)
            raise
    return _load_file(path)


def _load_file(path: str) -> ModuleType:
    """The extension module in the file at ``path``, as ``engine.read._kernel_cffi``."""
    name = f"{__package__}.{_MODULE}"
    spec = importlib.util.spec_from_file_location(
        name, path, loader=importlib.machinery.ExtensionFileLoader(name, path)
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
