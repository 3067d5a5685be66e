"""One walk over CommitLog files (issue 22, section 1): what lies between records (the blank
END_OF_FILE record, DLedger entry headers and fillers) is known to engine/format/ only, whose
``CommitLog.scan_raw`` is the walk recovery, the follower, the columnar reader (Spark,
``view/``) and verify's DLedger check use. No module of engine/, fusefs/, mount/ or pipeline/
outside engine/format/ names the blank magic or the DLedger entry layout, so none can walk the
files with rules of its own (RocketMQ has one ``checkMessageAndReturnSize`` for recovery and
reput). The source is read with ``ast``: comments and docstrings may name them."""

import pytest

from conftest import REPO
from homes import names_used, uses_outside

HOME = "engine/format/"
#: the names a walk needs to step over what is not a record
WALK_NAMES = {
    "MAGIC_BLANK",
    "MAGIC_BLANK_SIGNED",
    "FILLER_MAGIC",
    "FILLER",
    "ENTRY_HEADER",
    "ENTRY_MAGIC",
    "entry_problem",
}
#: (file, name) still allowed, each with why (none left: verify walks a plain CommitLog with
#: engine.format.commitlog.walk_segment, the lenient walk of the same rules)
ALLOWED: set[tuple[str, str]] = set()


def walk_names(source: str) -> list[tuple[int, str]]:
    """``[(line, name)]`` of the uses of :data:`WALK_NAMES` in ``source`` (imports, names,
    attributes)."""
    return names_used(source, WALK_NAMES)


def test_the_commitlog_is_walked_in_the_format_module_only():
    found = uses_outside(HOME, WALK_NAMES, ALLOWED)
    assert not found, (
        "walk the CommitLog with engine.format.commitlog.CommitLog.scan_raw instead:\n"
        + "\n".join(found)
    )


def test_the_allowed_uses_are_still_there():
    """An allowance no longer needed is removed (so the list says what is left to do)."""
    for rel, name in ALLOWED:
        assert name in {n for _, n in walk_names((REPO / rel).read_text(encoding="utf-8"))}


@pytest.mark.parametrize(
    "source, names",
    [
        ("from engine.format.message import MAGIC_BLANK\n", ["MAGIC_BLANK"]),
        ("import m\nif magic == m.MAGIC_BLANK:\n    pass\n", ["MAGIC_BLANK"]),
        ("from ..format.dledger import ENTRY_HEADER, FILLER\n", ["ENTRY_HEADER", "FILLER"]),
        ('"""MAGIC_BLANK in a docstring"""\n# FILLER_MAGIC in a comment\n', []),
    ],
)
def test_the_scanner_finds_a_use(source, names):
    assert sorted(n for _, n in walk_names(source)) == sorted(names)


def test_walk_segment_names_what_ends_a_file():
    """The lenient walk (verify's) steps over records by TOTALSIZE and names what ends the
    data, with the format's rules: the blank END_OF_FILE record, zeros, a torn header, another
    magic, a record past the file's end."""
    import struct

    from rmqfs.engine.format.commitlog import walk_segment
    from rmqfs.engine.format.message import MAGIC_BLANK, MAGIC_V1, MAGIC_V2

    def head(total, magic):
        return struct.pack(">iI", total, magic)

    def rec(total, magic=MAGIC_V2):
        return head(total, magic) + b"x" * (total - 8)

    def kinds(buf):
        return [(s.kind, s.pos) for s in walk_segment(buf, len(buf))]

    two = rec(20) + rec(30, MAGIC_V1)
    assert kinds(two) == [("record", 0), ("record", 20)]
    assert kinds(two + head(64, MAGIC_BLANK) + bytes(56)) == [
        ("record", 0),
        ("record", 20),
        ("blank", 50),
    ]
    assert kinds(two + bytes(16)) == [("record", 0), ("record", 20), ("zeros", 50)]
    assert kinds(two + b"\1\2\3") == [("record", 0), ("record", 20), ("torn", 50)]
    assert kinds(two + head(12, 0x1234) + bytes(4))[-1] == ("not_record", 50)
    assert kinds(two + head(-5, MAGIC_V2))[-1] == ("not_record", 50)
    assert kinds(two + head(100, MAGIC_V2) + bytes(8))[-1] == ("past_end", 50)
