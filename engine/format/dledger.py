"""The DLedger CommitLog: where a DLedger broker's messages are, and its entry layout.

A broker with ``enableDLegerCommitLog=true`` (RocketMQ 4.5-4.9 automatic failover,
``DLedgerCommitLog``) keeps no ``commitlog/``: its CommitLog is the data of one replica of a
Raft group (openmessaging DLedger, ``DLedgerMmapFileStore``) under
``<storePathRootDir>/dledger-<selfId>/`` (``DLedgerConfig.getDefaultPath``)::

    dledger-n0/data/<20-digit offset>    entries, in files of mappedFileSizeCommitLog
    dledger-n0/index/<20-digit offset>   32-byte index units, unit i at i * 32
    dledger-n0/checkpoint                Java properties: committedIndex, endIndex

Each entry (``DLedgerEntryCoder.encode``; all integers big-endian)::

    off  size  field
    0    4     magic      1 (DLedgerMmapFileStore.MAGIC_1)
    4    4     size       48 + bodyLen: the whole entry
    8    8     index      0, 1, 2, ... one more each entry
    16   8     term       the leader's term; never decreases
    24   8     pos        the entry's absolute offset in data/
    32   4     channel    0
    36   4     chainCrc   0
    40   4     bodyCrc    0
    44   4     bodyLen
    48   ..    body       one whole RocketMQ message record (engine.format.message)

A file ends with a filler when the next entry does not fit: magic -1 and the size of the rest
of the file (``MmapFileList.BLANK_MAGIC_CODE``, ``MmapFileList.append``). An index unit
(``DLedgerEntryCoder.encodeIndex``) is magic int, pos long, size int, index long, term long.

The broker's append hook writes each record's PHYSICALOFFSET as ``pos + 48``
(``DLedgerCommitLog`` ``appendHook``): ConsumeQueue units, IndexFile items and offset msgIds
hold that offset, so reading a record by its unit reads ``data/`` as it would read
``commitlog/``. Only entries up to the checkpoint's ``committedIndex`` are messages: reads at or
past the end of the committed entry return nothing (``DLedgerCommitLog.getMaxOffset`` is
``DLedgerMmapFileStore.getCommittedPos``). The walk over entries is
:meth:`engine.format.commitlog.CommitLog.scan_raw`, which checks each entry as
``DLedgerMmapFileStore.recover`` does (:func:`entry_problem`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from ..errors import CorruptRecordError, UnsupportedLayoutError
from .mappedfile import segment_names
from .source import LOCAL, StoreSource

#: ``dledger-<selfId>``: the directory of one replica (DLedgerConfig.getDefaultPath).
DIR_PREFIX = "dledger-"
#: DLedgerEntry.HEADER_SIZE / BODY_OFFSET: magic, size, index, term, pos, channel, chainCrc,
#: bodyCrc, bodyLen.
ENTRY_HEADER = struct.Struct(">iiqqqiiii")
HEADER_SIZE = ENTRY_HEADER.size  # 48
#: ENTRY_HEADER's fields by name: their byte positions in the header (from its format).
ENTRY_POSITIONS = {
    name: struct.calcsize(ENTRY_HEADER.format[: i + 1])
    for i, name in enumerate(
        ("magic", "size", "index", "term", "pos", "channel", "chainCrc", "bodyCrc", "bodyLen")
    )
}
#: DLedgerMmapFileStore.MAGIC_1 (CURRENT_MAGIC in DLedger 0.1-0.3).
ENTRY_MAGIC = 1
#: MmapFileList.BLANK_MAGIC_CODE: the filler at the end of a data file (magic, size).
FILLER_MAGIC = -1
FILLER = struct.Struct(">ii")
#: What the compiled entry walk (``rmq_walk_entries``) is given: the header's size, the
#: positions of its size, index, term, pos and bodyLen fields, the entry and filler magics.
WALK_LAYOUT = (
    HEADER_SIZE,
    *(ENTRY_POSITIONS[f] for f in ("size", "index", "term", "pos", "bodyLen")),
    ENTRY_MAGIC,
    FILLER_MAGIC,
)
#: DLedgerEntryCoder.encodeIndex: magic, pos, size, index, term (INDEX_UNIT_SIZE 32).
INDEX_UNIT = struct.Struct(">iqiqq")
CHECKPOINT = "checkpoint"
COMMITTED_INDEX_KEY = "committedIndex"
END_INDEX_KEY = "endIndex"
#: The largest entry index whose index unit an ``index/`` file can hold: unit i is at byte
#: i * 32, a Java long (``DLedgerMmapFileStore.getEntryPosAndSize``).
MAX_INDEX = ((1 << 63) - 1) // INDEX_UNIT.size - 1


def read_properties(path: str) -> dict[str, str]:
    """``key=value`` lines of a Java properties file (``IOUtils.file2String`` then
    ``Properties.load``): ``#``/``!`` comments and blank lines skipped, ``:`` accepted as the
    separator, whitespace around keys and values stripped. {} when the file does not exist;
    other OSErrors propagate. Escapes and continued lines (never written by DLedger) are not
    interpreted."""
    try:
        with open(path, encoding="latin-1") as f:
            text = f.read(1 << 16)
    except FileNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            out[line] = ""
        else:
            out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


@dataclass(frozen=True)
class DLedgerLog:
    """The DLedger CommitLog of a store.

    Attributes:
        name: the replica's directory, ``dledger-<selfId>``.
        path: its absolute path.
        data_dir: ``<path>/data``, the entries (the store's CommitLog files).
        committed_index: the checkpoint's ``committedIndex`` (-1: none, nothing committed:
            ``DLedgerMmapFileStore.recover`` then leaves ``committedPos`` at -1).
        end_index: the checkpoint's ``endIndex`` (-1 when absent).
    """

    name: str
    path: str
    data_dir: str
    committed_index: int
    end_index: int

    @property
    def index_dir(self) -> str:
        """``<path>/index``: the 32-byte index units."""
        return os.path.join(self.path, "index")

    def index_unit(self, index: int) -> tuple[int, int, int, int, int] | None:
        """``(magic, pos, size, index, term)`` of entry ``index`` from ``index/``, or None
        when no index file holds it (``DLedgerMmapFileStore.getEntryPosAndSize``)."""
        at = index * INDEX_UNIT.size
        names = segment_names(self.index_dir)
        for name in reversed(names):
            start = int(name)
            if start <= at:
                try:
                    with open(os.path.join(self.index_dir, name), "rb") as f:
                        f.seek(at - start)
                        raw = f.read(INDEX_UNIT.size)
                except OSError:
                    return None
                return INDEX_UNIT.unpack(raw) if len(raw) == INDEX_UNIT.size else None
        return None

    def committed_unit(self) -> tuple[int, int, int, int, int] | None:
        """The index unit of the last committed entry, or None when nothing is committed.

        That is the unit at ``committedIndex``, or, when the checkpoint's committedIndex is
        past the last entry in ``index/`` (a replica far behind its leader), the last entry's:
        ``DLedgerMmapFileStore.updateCommittedIndex`` lowers it to the ledger's end."""
        if self.committed_index < 0:
            return None
        unit = self.index_unit(self.committed_index)
        if _is_entry(unit, self.committed_index):
            return unit
        lo, hi = 0, self.committed_index  # the last index whose unit is an entry's, if any
        if not _is_entry(self.index_unit(0), 0):
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _is_entry(self.index_unit(mid), mid):
                lo = mid
            else:
                hi = mid
        return self.index_unit(lo)

    def committed_end(self) -> int | None:
        """Where the committed entries end (``DLedgerMmapFileStore.getCommittedPos``: the
        last committed entry's pos + size), or None when nothing is committed.

        The index unit says where that entry is; it is believed only when the entry header
        at that position in ``data/`` agrees (magic 1, its index, pos and size), else the
        end is found as the engine's walk finds it (:meth:`CommitLog.scan_raw`: entries in
        order until one past committedIndex), so that a unit lying about its position
        (pointing past uncommitted entries) makes no reader serve them. Raises OSError."""
        unit = self.committed_unit()
        if unit is None:
            return None
        _, pos, size, index, _ = unit
        head = self._entry_header(pos)
        if head is not None and (head[0], head[1], head[2], head[4]) == (
            ENTRY_MAGIC,
            size,
            index,
            pos,
        ):
            return pos + size
        return self._walk_committed_end(index)

    def _data_segments(self) -> list[tuple[int, str]]:
        return [(int(n), os.path.join(self.data_dir, n)) for n in segment_names(self.data_dir)]

    def _entry_header(self, pos: int) -> tuple[int, ...] | None:
        """The entry header at absolute ``pos`` of ``data/``, or None when no file holds 48
        bytes there."""
        for start, path in reversed(self._data_segments()):
            if start <= pos:
                with open(path, "rb") as f:
                    f.seek(pos - start)
                    raw = f.read(HEADER_SIZE)
                return ENTRY_HEADER.unpack(raw) if len(raw) == HEADER_SIZE else None
        return None

    def _walk_committed_end(self, committed: int) -> int | None:
        """The end of the last entry at or below index ``committed``, walking entry headers
        from the first data file (fillers skipped, a file's zeros ending it, any header that
        fails ``entry_problem`` ending the walk): the damaged-index case only, one 48-byte
        read an entry."""
        end: int | None = None
        last_index = last_term = -1
        for start, path in self._data_segments():
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                at = 0
                while at + FILLER.size <= size:
                    f.seek(at)
                    raw = f.read(HEADER_SIZE)
                    magic, esize = FILLER.unpack_from(raw)
                    if magic == FILLER_MAGIC and esize >= FILLER.size:
                        break  # the rest of this file
                    if len(raw) < HEADER_SIZE:
                        return end
                    magic, esize, index, term, pos, _, _, _, body_len = ENTRY_HEADER.unpack(raw)
                    problem = entry_problem(
                        magic, esize, index, term, pos, body_len, start + at, last_index, last_term
                    )
                    if problem is not None or index > committed or at + esize > size:
                        return end
                    end = start + at + esize
                    last_index, last_term = index, term
                    at += esize
        return end


def _is_entry(unit: tuple[int, int, int, int, int] | None, index: int) -> bool:
    return unit is not None and unit[0] == ENTRY_MAGIC and unit[3] == index


def dledger_dirs(root: str, source: StoreSource = LOCAL) -> list[str]:
    """Names of the ``dledger-*`` directories of the store ``root``, sorted."""
    try:
        names = source.listdir(root)
    except OSError:
        return []
    return sorted(
        n for n in names if n.startswith(DIR_PREFIX) and source.isdir(os.path.join(root, n))
    )


def layout_problem(root: str, source: StoreSource = LOCAL) -> str | None:
    """Why the DLedger store ``root`` cannot be read, or None (also for a plain store).

    - more than one ``dledger-*`` directory: which replica is the store's
      (``dLegerSelfId``) is not on disk;
    - a ``commitlog/`` holding files beside ``dledger-*``: a store migrated to DLedger keeps
      its older records there, below ``dividedCommitlogOffset`` (``DLedgerCommitLog.load``,
      ``recoverOldCommitLog``); rmqfs does not join the two yet.
    """
    dirs = dledger_dirs(root, source)
    if dirs and not source.local:
        return "a DLedger CommitLog in object storage is not read in place; download it first"
    if len(dirs) > 1:
        return (
            f"{len(dirs)} DLedger directories ({', '.join(dirs)}): which one is this broker's "
            "replica (dLegerSelfId) is not recorded in the store; move the others out"
        )
    if dirs and segment_names(os.path.join(root, "commitlog")):
        return (
            f"commitlog/ beside {dirs[0]}/: a store migrated to DLedger keeps its records "
            "below dividedCommitlogOffset in commitlog/; rmqfs does not read such a store yet"
        )
    return None


def open_dledger(root: str, source: StoreSource = LOCAL) -> DLedgerLog | None:
    """The DLedger CommitLog of the store ``root``, or None for a plain store.

    Raises:
        UnsupportedLayoutError: :func:`layout_problem` says why it cannot be read.
        CorruptRecordError: the checkpoint's committedIndex or endIndex is not a number, or
            is outside -1..:data:`MAX_INDEX`.
    """
    problem = layout_problem(root, source)
    if problem:
        raise UnsupportedLayoutError(f"store {root}: {problem}")
    dirs = dledger_dirs(root, source)
    if not dirs:
        return None
    path = os.path.join(root, dirs[0])
    props = read_properties(os.path.join(path, CHECKPOINT))
    values = {}
    for key in (COMMITTED_INDEX_KEY, END_INDEX_KEY):
        text = (props.get(key, "-1") or "-1").strip()
        try:
            value = int(text)
        except ValueError:
            raise CorruptRecordError(
                f"{dirs[0]}/{CHECKPOINT}: {key} {text!r} is not a number"
            ) from None
        if not -1 <= value <= MAX_INDEX:
            raise CorruptRecordError(
                f"{dirs[0]}/{CHECKPOINT}: {key} {value} is outside -1..{MAX_INDEX}, the indexes "
                "an index/ file can address (unit i at i * 32 bytes, a Java long)"
            )
        values[key] = value
    return DLedgerLog(
        dirs[0],
        path,
        os.path.join(path, "data"),
        values[COMMITTED_INDEX_KEY],
        values[END_INDEX_KEY],
    )


def commitlog_dir(root: str, source: StoreSource = LOCAL) -> str:
    """The directory of the store's CommitLog files: ``dledger-<selfId>/data`` for a DLedger
    store (its one ``dledger-*`` directory, listed through ``source``), else ``commitlog/``."""
    dirs = dledger_dirs(root, source)
    if len(dirs) == 1:
        return os.path.join(root, dirs[0], "data")
    return os.path.join(root, "commitlog")


def entry_problem(
    magic: int,
    size: int,
    index: int,
    term: int,
    pos: int,
    body_len: int,
    at: int,
    last_index: int,
    last_term: int,
) -> str | None:
    """What is wrong with a DLedger entry header found at absolute offset ``at`` after the
    entry ``last_index`` of term ``last_term`` (-1, -1 for the first one walked), or None:
    the checks ``DLedgerMmapFileStore.recover`` makes on each entry. The magic is 1, ``pos``
    is ``at``, ``size`` is ``bodyLen + 48`` (and bodyLen > 0), each index is the one before
    plus one and terms never decrease. The walk's step of an entry
    (:func:`engine.format.commitlog.entry_step`, under ``CommitLog.scan_raw``) asks it of
    every entry."""
    if magic != ENTRY_MAGIC:
        return f"no DLedger entry at {at} (magic {magic})"
    if pos != at:
        return f"the DLedger entry at {at} says pos {pos}"
    if body_len <= 0:
        return f"DLedger entry at {at}: bodyLen {body_len} (an entry holds a record)"
    if size != body_len + HEADER_SIZE:
        return f"DLedger entry at {at}: size {size} != bodyLen {body_len} + 48"
    if last_index != -1 and index != last_index + 1:
        return f"DLedger entry at {at}: index {index} after {last_index} (not +1)"
    if term < last_term:
        return f"DLedger entry at {at}: term {term} after {last_term}"
    return None
