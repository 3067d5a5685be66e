"""``SNAPSHOT.json``: the one parser of a snapshot's manifest, its types checked, held compactly.

Every reader of a manifest goes through :func:`parse_manifest` (``snapshot-verify``,
``snapshot-upload``, ``snapshot-download``, :class:`engine.live.remote.RemoteSnapshot` and so
the mount of a URI and the ``rocketmq`` data source): a manifest is data from elsewhere (an
object store anyone with the bucket's credentials writes), so each field's JSON type and range
is checked before anything uses it, and whatever is wrong is one
:class:`engine.errors.ManifestError` naming ``SNAPSHOT.json`` and the field (or the byte where
the JSON breaks), never a ``TypeError`` from deep inside a reader.

What a manifest may make a reader hold is bounded by its bytes (:data:`MAX_MANIFEST`, checked
before it is read) and by what a store can hold, not by what it claims:

- file entries are kept in arrays (size, stored, crc32c: 20 bytes an entry) beside one dict of
  their names, never a dict per entry: a 46 MB manifest of 1,000,000 entries costs a reader
  about 200 MB while parsed and 150 MB after (it was 2.5 GB);
- the ``queues`` table likewise (topic index, queue id, min and max: 24 bytes a queue), looked up
  by a sorted key array;
- nesting is bounded (:data:`MAX_MANIFEST_DEPTH`; Python's JSON parser recurses and fails with
  ``RecursionError`` past about 1,000 levels: that is refused as too deep too), and so are file
  paths: at most :data:`MAX_PATH_PARTS` parts (a snapshot's deepest file is
  ``consumequeue/TOPIC/QUEUE/FILE``), no part longer than 255 bytes, no ``..``.
"""

from __future__ import annotations

import hashlib
import os
import re
from array import array
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..errors import ManifestError
from ..format.crc import crc32c_zeros

MANIFEST_NAME = "SNAPSHOT.json"
#: The largest manifest read, checked before it is read (a store of 100,000 files has a
#: manifest of about 10 MB; 1,000,000 files about 50 MB).
MAX_MANIFEST = 64 << 20
#: How deep a manifest's JSON nests: a valid one is 4 deep (``queues`` / topic / queue id /
#: ``[min, max]``); anything deeper is refused.
MAX_MANIFEST_DEPTH = 8
#: Parts of a file's path: a snapshot's deepest file is ``consumequeue/TOPIC/QUEUE/FILE``.
MAX_PATH_PARTS = 8
#: Bytes of one part of a path (a Linux file name) and of a whole path (PATH_MAX - 1).
MAX_PART_BYTES = 255
MAX_PATH_BYTES = 4095
#: Sizes and offsets: a Java long.
MAX_LONG = (1 << 63) - 1
#: Queue ids: a Java int, written in ASCII decimal without sign or leading zeros (``str.isdigit``
#: would take ``²`` and other scripts' digits, which ``int()`` then refuses).
MAX_QUEUE_ID = (1 << 31) - 1
QUEUE_ID_RE = re.compile(r"(?:0|[1-9][0-9]{0,9})\Z")
CRC_RE = re.compile(r"[0-9a-f]{8}\Z")
_ENTRY_KEYS = frozenset(("size", "stored", "crc32c"))
#: Fields of the head (everything but ``files`` and ``queues``) and the JSON type each must
#: have: ``int`` is an integer (never a boolean), ``str`` a string, ``None`` allowed where said.
HEAD_FIELDS: dict[str, tuple[type, ...]] = {
    "format": (int,),
    "name": (str,),
    "time": (int,),
    "commitLogOffset": (int,),
    "commitLogMinOffset": (int,),
    "messageCount": (int,),
    "storePathRootDir": (str,),
    "brokerName": (str, type(None)),
    "brokerNameFrom": (str, type(None)),
}
#: Head fields that are counts or offsets: at least 0.
_NON_NEGATIVE = {"time", "commitLogOffset", "commitLogMinOffset", "messageCount"}
CHECKPOINT_FIELDS = (
    "physicMsgTimestamp",
    "logicsMsgTimestamp",
    "indexMsgTimestamp",
    "confirmPhyOffset",
)

__all__ = [
    "CRC_RE",
    "FileEntry",
    "MANIFEST_NAME",
    "MAX_MANIFEST",
    "MAX_MANIFEST_DEPTH",
    "MAX_PATH_PARTS",
    "Manifest",
    "ManifestError",
    "ManifestFiles",
    "ManifestQueues",
    "QUEUE_ID_RE",
    "parse_manifest",
    "read_manifest_file",
]


class FileEntry(NamedTuple):
    """One file of a manifest: ``size`` bytes as restored, the first ``stored`` of which hold
    data (zeros after; ``size`` for a manifest written before rmqfs recorded ``stored``),
    ``crc32c`` the 8 lowercase hex digits of the CRC32C of all ``size`` bytes."""

    size: int
    stored: int
    crc32c: str

    def crc_problem(self, crc: int, n: int) -> str | None:
        """Whether a file whose first ``n`` bytes have CRC32C ``crc`` (the rest up to
        :attr:`size` zeros, never read: :func:`engine.format.crc.crc32c_zeros`) is this entry's:
        None, else ``"crc32c X, expected Y"``. The one comparison of a file with its manifest
        (upload, download, snapshot-verify, the store source of a mount)."""
        got = f"{crc32c_zeros(crc, self.size - n):08x}"
        return None if got == self.crc32c else f"crc32c {got}, expected {self.crc32c}"


class ManifestFiles(Mapping[str, FileEntry]):
    """The ``files`` table: ``{relative path: FileEntry}``, in the manifest's order, held as
    three arrays and one dict of names (about 150 bytes an entry with its name)."""

    def __init__(
        self, index: dict[str, int], sizes: np.ndarray, stored: np.ndarray, crcs: np.ndarray
    ):
        self._index = index
        self._names = list(index)
        self.sizes = sizes  #: int64, bytes, in the manifest's order
        self.stored = stored  #: int64, bytes
        self.crcs = crcs  #: uint32

    def __getitem__(self, rel: str) -> FileEntry:
        i = self._index[rel]
        return FileEntry(int(self.sizes[i]), int(self.stored[i]), f"{int(self.crcs[i]):08x}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, rel: object) -> bool:
        return rel in self._index

    def name(self, i: int) -> str:
        """The ``i``-th file's path (manifest order)."""
        return self._names[i]

    def total_size(self) -> int:
        """Sum of the files' sizes (bytes as restored)."""
        return int(self.sizes.sum()) if len(self.sizes) else 0

    def total_stored(self) -> int:
        """Sum of the files' stored prefixes (bytes an object-storage copy holds)."""
        return int(self.stored.sum()) if len(self.stored) else 0

    def by_weight(self, stored: bool) -> Iterator[tuple[str, FileEntry]]:
        """``(rel, entry)`` biggest first (by stored prefix or by size): what parallel transfers
        take so their threads end together. Holds one index array (8 bytes a file)."""
        key = self.stored if stored else self.sizes
        for i in np.argsort(-key, kind="stable"):
            yield self._names[i], self[self._names[i]]


class ManifestQueues:
    """The ``queues`` table: ``{topic: {queueId: [minOffset, maxOffset]}}`` as arrays sorted by
    (topic, queue id): 24 bytes a queue; lookups by binary search."""

    def __init__(
        self, topics: list[str], tix: np.ndarray, qids: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ):
        order = np.lexsort((qids, tix))
        self.topic_names = topics
        self._tix = {t: i for i, t in enumerate(topics)}
        self._keys = (tix[order].astype(np.int64) << 32) | qids[order].astype(np.int64)
        self._lo = lo[order]
        self._hi = hi[order]

    def __len__(self) -> int:
        return len(self._keys)

    def topics(self) -> list[str]:
        """Topics with a queue, sorted."""
        return sorted(self.topic_names[int(t)] for t in np.unique(self._keys >> 32))

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic``, ascending ([] for a topic not in the table)."""
        t = self._tix.get(topic)
        if t is None:
            return []
        a, b = np.searchsorted(self._keys, [t << 32, (t + 1) << 32])
        return [int(k & 0xFFFFFFFF) for k in self._keys[a:b]]

    def span(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """``(minOffset, maxOffset)`` of a queue, or None when the table lacks it."""
        t = self._tix.get(topic)
        if t is None or not 0 <= queue_id <= MAX_QUEUE_ID:
            return None
        key = (t << 32) | queue_id
        i = int(np.searchsorted(self._keys, key))
        if i < len(self._keys) and int(self._keys[i]) == key:
            return int(self._lo[i]), int(self._hi[i])
        return None

    def rows(self) -> Iterator[tuple[str, int, int, int]]:
        """``(topic, queueId, minOffset, maxOffset)`` for every queue, sorted."""
        for k, lo, hi in zip(self._keys.tolist(), self._lo.tolist(), self._hi.tolist()):
            yield self.topic_names[k >> 32], k & 0xFFFFFFFF, lo, hi


class Manifest:
    """A parsed, checked ``SNAPSHOT.json`` (:func:`parse_manifest`).

    Attributes:
        head: the fields but ``files`` and ``queues`` (:data:`HEAD_FIELDS` and ``checkpoint``),
            types checked; fields this version does not know are checked for depth and left out.
        files: :class:`ManifestFiles`.
        queues: :class:`ManifestQueues`, or None for a manifest without the table (made before
            rmqfs wrote one).
        digest: SHA-256 of the bytes: two manifests are equal when their bytes are.
    """

    def __init__(
        self, head: dict, files: ManifestFiles, queues: ManifestQueues | None, digest: bytes
    ):
        self.head = head
        self.files = files
        self.queues = queues
        self.digest = digest

    def get(self, key: str, default: Any = None) -> Any:
        """A head field (``name``, ``commitLogOffset``, ``brokerName``, ...), or ``default``."""
        return self.head.get(key, default)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Manifest) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)


# -- parsing -------------------------------------------------------------------------------------


class _Obj:
    """A JSON object as the parser gave it: its ``(key, value)`` pairs (no dict built)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list) -> None:
        self.pairs = pairs


class _Packed:
    """A files entry checked and packed while parsing (its values are in the arrays, in order)."""

    __slots__ = ()


class _QTable:
    """A topic's queue table checked and packed while parsing: rows ``[start, end)``."""

    __slots__ = ("start", "end")

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


_PACKED = _Packed()


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, (_Obj, _Packed, _QTable)) else "an object"
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(field: str, what: str) -> ManifestError:
    return ManifestError(f"{MANIFEST_NAME}: {field}: {what}")


def _is_int(v: Any) -> bool:
    return type(v) is int  # not bool, not a float


class _Parser:
    def __init__(self) -> None:
        self.sizes = array("q")
        self.stored = array("q")
        self.crcs = array("I")
        self.qids = array("l")
        self.lo = array("q")
        self.hi = array("q")

    def hook(self, pairs: list) -> Any:
        n = len(pairs)
        if n == 3 or n == 2:
            # rmqfs writes size, stored, crc32c in this order (older manifests: no stored)
            size: Any
            stored: Any
            crc: Any
            if n == 3:
                (k0, size), (k1, stored), (k2, crc) = pairs
                ok = k0 == "size" and k1 == "stored" and k2 == "crc32c"
            else:
                (k0, size), (k2, crc) = pairs
                stored = size
                ok = k0 == "size" and k2 == "crc32c"
            if not ok:
                d: dict[str, Any] = dict(pairs)
                ok = len(d) == n and "size" in d and "crc32c" in d and d.keys() <= _ENTRY_KEYS
                if ok:
                    size, crc = d["size"], d["crc32c"]
                    stored = d.get("stored", size)
            if (
                ok
                and type(size) is int
                and type(stored) is int
                and 0 <= stored <= size <= MAX_LONG
                and type(crc) is str
                and CRC_RE.match(crc)
            ):
                self.sizes.append(size)
                self.stored.append(stored)
                self.crcs.append(int(crc, 16))
                return _PACKED
            if n == 2 and all(type(v) is list for _, v in pairs):
                return self._queue_table(pairs)
            return _Obj(pairs)
        if n and all(type(v) is list for _, v in pairs):
            return self._queue_table(pairs)
        return _Obj(pairs)

    def _queue_table(self, pairs: list) -> Any:
        """A topic's ``{queueId: [min, max]}``: packed when every row is right, else left for
        the checks that name the bad field."""
        start = len(self.qids)
        seen = set()
        for q, span in pairs:
            if not (
                QUEUE_ID_RE.match(q)
                and len(span) == 2
                and _is_int(span[0])
                and _is_int(span[1])
                and 0 <= span[0] <= span[1] <= MAX_LONG
                and int(q) <= MAX_QUEUE_ID
                and q not in seen
            ):
                del self.qids[start:], self.lo[start:], self.hi[start:]
                return _Obj(pairs)
            seen.add(q)
            self.qids.append(int(q))
            self.lo.append(span[0])
            self.hi.append(span[1])
        return _QTable(start, len(self.qids))


def _check_path(rel: Any) -> None:
    if type(rel) is not str:
        raise _fail("files", f"a name that is not a string: {_show(rel)}")
    parts = rel.split("/")
    if (
        rel == MANIFEST_NAME
        or len(parts) > MAX_PATH_PARTS
        or any(p in ("", ".", "..") or "\0" in p for p in parts)
    ):
        why = (
            f"more than {MAX_PATH_PARTS} parts (a snapshot's deepest file is "
            "consumequeue/TOPIC/QUEUE/FILE)"
            if len(parts) > MAX_PATH_PARTS
            else "not a relative store path (an empty part, '.', '..', NUL or the manifest)"
        )
        raise _fail(f"files[{_show(rel)}]", why)
    if len(rel) > MAX_PART_BYTES // 4 or not rel.isascii():  # only then can a limit be passed
        raw = rel.encode("utf-8", "surrogatepass")
        if len(raw) > MAX_PATH_BYTES or any(
            len(p.encode("utf-8", "surrogatepass")) > MAX_PART_BYTES for p in parts
        ):
            raise _fail(
                f"files[{_show(rel)}]",
                f"a path over {MAX_PATH_BYTES} bytes or a part over {MAX_PART_BYTES}",
            )


def _depth_ok(value: Any, field: str, depth: int) -> None:
    """Refuse ``value`` (at ``depth``) when it nests past :data:`MAX_MANIFEST_DEPTH` (no
    recursion)."""
    stack = [(value, depth)]
    while stack:
        v, d = stack.pop()
        if d > MAX_MANIFEST_DEPTH:
            raise _fail(
                field, f"nested deeper than {MAX_MANIFEST_DEPTH} levels (a manifest is at most 4)"
            )
        if isinstance(v, _Obj):
            stack.extend((x, d + 1) for _, x in v.pairs)
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)


def parse_manifest(data: bytes) -> Manifest:
    """Parse and check a ``SNAPSHOT.json``'s bytes.

    Checks, each failure one :class:`~engine.errors.ManifestError` naming ``SNAPSHOT.json`` and
    the field (``files['commitlog/0...0'].size: ...``) or the byte where the JSON breaks:

    - at most :data:`MAX_MANIFEST` bytes, UTF-8, JSON, an object nested at most
      :data:`MAX_MANIFEST_DEPTH` deep, no key twice in one object;
    - ``files``: an object of relative store paths (no empty part, ``.``, ``..``, NUL, at most
      :data:`MAX_PATH_PARTS` parts, 255 bytes a part, 4095 a path, not the manifest itself, no
      name both a file and a directory) to ``{"size": int >= 0, "stored": int, "crc32c": 8
      lowercase hex digits}`` with ``0 <= stored <= size`` (``stored`` may be missing: the
      whole file); integers are JSON integers (``true`` and ``1.0`` are refused) up to 2^63-1;
    - ``queues`` (optional): ``{topic: {queueId: [min, max]}}``, topic a valid path part, queue
      ids ASCII decimals (``0`` or ``[1-9][0-9]*``, at most 2^31-1: not ``²``, ``07``, ``+7``),
      ``0 <= min <= max`` integers;
    - the head fields (:data:`HEAD_FIELDS`) of their types, counts and offsets >= 0, and
      ``checkpoint`` an object of integers.

    Cost: about 2 µs and, while parsing, about 200 bytes a file entry; the result holds about
    150 bytes an entry (:class:`ManifestFiles`).

    Raises:
        ManifestError: the bytes are not such a manifest.
    """
    if len(data) > MAX_MANIFEST:
        raise ManifestError(f"{MANIFEST_NAME}: over {MAX_MANIFEST} bytes ({len(data)})")
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{MANIFEST_NAME}: not UTF-8 at byte {exc.start}") from None
    import json

    p = _Parser()
    try:
        root = json.loads(text, object_pairs_hook=p.hook)
    except json.JSONDecodeError as exc:
        at = len(text[: exc.pos].encode("utf-8", "surrogatepass"))
        raise ManifestError(f"{MANIFEST_NAME}: not JSON at byte {at}: {exc.msg}") from None
    except RecursionError:
        raise ManifestError(
            f"{MANIFEST_NAME}: nested deeper than {MAX_MANIFEST_DEPTH} levels (a manifest is at most 4)"
        ) from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise ManifestError(f"{MANIFEST_NAME}: not JSON: {exc}") from None
    del text
    digest = hashlib.sha256(data).digest()
    if not isinstance(root, _Obj):
        raise ManifestError(f"{MANIFEST_NAME}: not a JSON object")
    top: dict[str, Any] = {}
    for key, value in root.pairs:
        if key in top:
            raise _fail(key, "given twice")
        top[key] = value
    if not isinstance(top.get("files"), _Obj):
        raise ManifestError(f'{MANIFEST_NAME}: no "files" table (an object of the files)')
    files = _files(p, top.pop("files"))
    queues = None
    if "queues" in top:
        queues = _queues(p, top.pop("queues"))
    elif len(p.qids):
        raise _fail("queues", "a queue table outside the queues field")
    head: dict[str, Any] = {}
    for key, value in top.items():
        types = HEAD_FIELDS.get(key)
        if types is not None:
            if not (type(value) in types and (key not in _NON_NEGATIVE or value >= 0)):
                kind = " or ".join(
                    "null" if t is type(None) else {int: "an integer", str: "a string"}[t]
                    for t in types
                )
                more = " >= 0" if key in _NON_NEGATIVE else ""
                raise _fail(key, f"{_show(value)} is not {kind}{more}")
            head[key] = value
        elif key == "checkpoint":
            if not isinstance(value, _Obj):
                raise _fail(key, f"{_show(value)} is not an object")
            cp = {}
            for k, v in value.pairs:
                if k in CHECKPOINT_FIELDS:
                    if not _is_int(v) or abs(v) > MAX_LONG:
                        raise _fail(f"checkpoint.{k}", f"{_show(v)} is not an integer")
                    cp[k] = v
                else:
                    _depth_ok(v, f"checkpoint.{k}", 2)
            head[key] = cp
        else:
            _depth_ok(value, key, 1)  # a field this version does not know: left out
            if isinstance(value, (_Packed, _QTable)) or _holds_packed(value):
                raise _fail(key, "a file entry or queue table outside files and queues")
    return Manifest(head, files, queues, digest)


def _holds_packed(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (_Packed, _QTable)):
            return True
        if isinstance(v, _Obj):
            stack.extend(x for _, x in v.pairs)
        elif isinstance(v, list):
            stack.extend(v)
    return False


def _files(p: _Parser, table: _Obj) -> ManifestFiles:
    index: dict[str, int] = {}
    n = len(table.pairs)
    sizes = np.empty(n, np.int64)
    stored = np.empty(n, np.int64)
    crcs = np.empty(n, np.uint32)
    packed = 0
    psz, pst, pcr = (
        np.frombuffer(a, dtype=t) if len(a) else np.empty(0, t)
        for a, t in ((p.sizes, np.int64), (p.stored, np.int64), (p.crcs, np.uint32))
    )
    dirs: set[str] = set()
    for i, (rel, want) in enumerate(table.pairs):
        _check_path(rel)
        if rel in index:
            raise _fail(f"files[{_show(rel)}]", "named twice")
        index[rel] = i
        parent = rel.rpartition("/")[0]
        while parent and parent not in dirs:
            dirs.add(parent)
            parent = parent.rpartition("/")[0]
        if want is _PACKED:
            if packed >= len(psz):
                raise _fail("files", "entries out of order")
            sizes[i], stored[i], crcs[i] = psz[packed], pst[packed], pcr[packed]
            packed += 1
            continue
        field = f"files[{_show(rel)}]"
        if not isinstance(want, _Obj):
            raise _fail(field, f"{_show(want)} is not an object")
        d: dict[str, Any] = {}
        for k, v in want.pairs:
            if k in d:
                raise _fail(f"{field}.{k}", "given twice")
            d[k] = v
        size: Any = d.get("size")
        if not (_is_int(size) and 0 <= size <= MAX_LONG):
            raise _fail(f"{field}.size", f"{_show(size)} is not an integer >= 0")
        crc: Any = d.get("crc32c")
        if not (type(crc) is str and CRC_RE.match(crc)):
            raise _fail(f"{field}.crc32c", f"{_show(crc)} is not 8 lowercase hex digits")
        st: Any = d.get("stored", size)
        if not (_is_int(st) and 0 <= st <= size):
            raise _fail(f"{field}.stored", f"{_show(st)} is not an integer from 0 to size ({size})")
        for k, v in d.items():
            if k not in _ENTRY_KEYS:
                _depth_ok(v, f"{field}.{k}", 3)
        sizes[i], stored[i], crcs[i] = size, st, int(crc, 16)
    if packed != len(psz):
        raise _fail("files", "a file entry outside the files table")
    for rel in index:
        if rel in dirs:
            raise _fail(f"files[{_show(rel)}]", "both a file and a directory")
    return ManifestFiles(index, sizes, stored, crcs)


def _check_topic(topic: Any) -> None:
    if not (
        type(topic) is str
        and topic not in ("", ".", "..")
        and "/" not in topic
        and "\0" not in topic
        and len(topic.encode("utf-8", "surrogatepass")) <= MAX_PART_BYTES
    ):
        raise _fail("queues", f"topic {_show(topic)} is not a valid topic name")


def _queues(p: _Parser, table: Any) -> ManifestQueues:
    if not isinstance(table, _Obj):
        raise _fail("queues", f"{_show(table)} is not an object")
    topics: list[str] = []
    seen: set[str] = set()
    tix = np.empty(len(p.qids), np.int32)
    covered = 0
    extra_q: list[int] = []
    extra_lo: list[int] = []
    extra_hi: list[int] = []
    extra_t: list[int] = []
    for topic, qs in table.pairs:
        _check_topic(topic)
        if topic in seen:
            raise _fail(f"queues[{_show(topic)}]", "given twice")
        seen.add(topic)
        t = len(topics)
        topics.append(topic)
        if isinstance(qs, _QTable):
            tix[qs.start : qs.end] = t
            covered += qs.end - qs.start
            continue
        if not isinstance(qs, _Obj):
            raise _fail(f"queues[{_show(topic)}]", f"{_show(qs)} is not an object")
        ids: set[str] = set()
        for q, span in qs.pairs:
            field = f"queues[{_show(topic)}][{_show(q)}]"
            if not (QUEUE_ID_RE.match(q) and int(q) <= MAX_QUEUE_ID):
                raise _fail(field, f"queue id {_show(q)} is not a decimal from 0 to {MAX_QUEUE_ID}")
            if q in ids:
                raise _fail(field, "given twice")
            ids.add(q)
            if not (
                isinstance(span, list)
                and len(span) == 2
                and all(_is_int(x) and 0 <= x <= MAX_LONG for x in span)
                and span[0] <= span[1]
            ):
                raise _fail(field, f"{_show(span)} is not [min, max], integers 0 <= min <= max")
            extra_t.append(t)
            extra_q.append(int(q))
            extra_lo.append(span[0])
            extra_hi.append(span[1])
    if covered != len(p.qids):
        raise _fail("queues", "a queue table outside the queues field")

    def arr(a: array, dtype: Any) -> np.ndarray:
        return np.frombuffer(a, dtype=dtype).copy() if len(a) else np.empty(0, dtype)

    return ManifestQueues(
        topics,
        np.concatenate([tix, np.array(extra_t, np.int32)]),
        np.concatenate([arr(p.qids, np.int64), np.array(extra_q, np.int64)]),
        np.concatenate([arr(p.lo, np.int64), np.array(extra_lo, np.int64)]),
        np.concatenate([arr(p.hi, np.int64), np.array(extra_hi, np.int64)]),
    )


def read_manifest_file(path: str) -> tuple[Manifest, bytes]:
    """Read and parse a local ``SNAPSHOT.json``: its size checked against
    :data:`MAX_MANIFEST` before anything is read (opened with ``O_NOFOLLOW``).

    Returns:
        ``(manifest, bytes)``.

    Raises:
        FileNotFoundError: no such file.
        OSError: it cannot be read.
        ManifestError: it is larger than :data:`MAX_MANIFEST` or not a manifest.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_MANIFEST:
            raise ManifestError(
                f"{path}: over {MAX_MANIFEST} bytes ({size}): not a manifest rmqfs reads"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_MANIFEST + 1)
    finally:
        os.close(fd)
    return parse_manifest(data), data


def restored_broker_name(root: str) -> str | None:
    """``brokerName`` of the ``SNAPSHOT.json`` at the top of the local directory ``root``: a
    store restored from a snapshot (a copy of ``MNT/snapshots/NAME``, or what
    ``snapshot-download`` wrote) names the broker it was taken of. None without one (or
    without the field, or an empty one).

    Raises:
        ManifestError: a ``SNAPSHOT.json`` that is not a manifest (the field named).
    """
    try:
        name = read_manifest_file(os.path.join(root, MANIFEST_NAME))[0].get("brokerName")
    except OSError:
        return None
    return name if isinstance(name, str) and name else None
