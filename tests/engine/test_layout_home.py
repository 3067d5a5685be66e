"""One home for the CommitLog record layout (issue 11): the magic codes, the property
separators, ``SCHEDULE_TOPIC_XXXX``, ``__CRC32#`` and the struct formats of the record head are
written in engine/format/message.py only, and no other module assigns one of message.py's constant
names again; every module of engine/, fusefs/, mount/ and pipeline/ imports them. (Which layer
may import which: tests/test_layers.py.)

The source is read with ``ast``, so comments and docstrings may mention the values; code
(constants, f-string parts) may not. A separator counts when a string or bytes constant is
exactly ``\\x01`` or ``\\x02``, or has one next to printable text (``"TAGS\\x01"``); a binary
constant such as the IPv4 address ``b"\\x7f\\x00\\x00\\x01"`` does not.
"""

import ast
from collections import Counter

import pytest

from conftest import REPO
from rmqfs.engine.format import message

LAYERS = ("engine", "fusefs", "mount", "pipeline")
HOME = "engine/format/message.py"

#: Copies allowed outside message.py, per (file, kind): none.
ALLOWED: Counter = Counter()  # no copy left anywhere

_MAGICS = {
    message.MAGIC_V1,
    message.MAGIC_V2,
    message.MAGIC_BLANK,
    message.MAGIC_V1_SIGNED,
    message.MAGIC_V2_SIGNED,
    message.MAGIC_BLANK_SIGNED,
}
_NAMES = {message.SCHEDULE_TOPIC: "SCHEDULE_TOPIC_XXXX", message.PROPERTY_CRC32: "__CRC32#"}
_FORMATS = {message.FIXED_V4.format, message.PREFIX.format, message.RECORD_HEAD.format}
_SEPS = (message.NAME_VALUE_SEPARATOR, message.PROPERTY_SEPARATOR)


def _docstrings(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                out.add(id(body[0].value))
    return out


def _is_separator(value) -> bool:
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if text in _SEPS:
        return True
    for i, ch in enumerate(text):
        if ch in _SEPS:
            near = text[i - 1 : i] + text[i + 1 : i + 2]
            if any(" " <= c <= "~" for c in near):
                return True
    return False


def layout_copies(source: str) -> list[tuple[int, str, object]]:
    """``[(line, kind, value)]`` of the record-layout constants written in ``source``."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int)
        ):
            if -node.operand.value in _MAGICS:  # a signed magic, -626843481
                found.append((node.lineno, "magic", -node.operand.value))
            continue
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        v = node.value
        if isinstance(v, int) and not isinstance(v, bool) and v in _MAGICS:
            found.append((node.lineno, "magic", hex(v)))
        elif isinstance(v, (str, bytes)):
            text = v.decode("latin-1") if isinstance(v, bytes) else v
            for name, kind in _NAMES.items():
                if name in text:
                    found.append((node.lineno, kind, v))
            if text in _FORMATS:
                found.append((node.lineno, "record struct format", v))
            if _is_separator(v):
                found.append((node.lineno, "separator", v))
    return found


def _sources():
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8")


def test_the_record_layout_is_written_in_engine_message_only():
    counts = Counter()
    where = {}
    for rel, src in _sources():
        if rel == HOME:
            continue
        for line, kind, value in layout_copies(src):
            counts[(rel, kind)] += 1
            where.setdefault((rel, kind), []).append(f"{rel}:{line}: {value!r}")
    extra = [w for key, n in counts.items() if n > ALLOWED.get(key, 0) for w in where[key]]
    assert not extra, (
        "import these from engine/format/message.py instead of writing them again:\n"
        + "\n".join(extra)
    )


def test_engine_message_defines_them():
    found = {kind for _, kind, _ in layout_copies((REPO / HOME).read_text(encoding="utf-8"))}
    assert {
        "magic",
        "separator",
        "SCHEDULE_TOPIC_XXXX",
        "__CRC32#",
        "record struct format",
    } <= found


@pytest.mark.parametrize(
    "source, kinds",
    [
        ('X = 0xDAA320A7\n', ["magic"]),
        ('def f(m):\n    return m == -626843481\n', ["magic"]),  # MAGIC_V1 as a signed int32
        ('T = "SCHEDULE_TOPIC_XXXX"\n', ["SCHEDULE_TOPIC_XXXX"]),
        ('def f(p):\n    return p.split("\\x02")\n', ["separator"]),
        ('def f(t):\n    return f"TAGS\\x01{t}\\x02"\n', ["separator", "separator"]),
        ('P = b"__CRC32#\\x01"\n', ["__CRC32#", "separator"]),
        ('import struct\nH = struct.Struct(">iI")\n', ["record struct format"]),
        ('IP = b"\\x7f\\x00\\x00\\x01"\n', []),  # an address, not a separator
        (
            '"""A docstring may say 0xDAA320A7, SCHEDULE_TOPIC_XXXX and k\\x01v\\x02."""\n'
            '# so may a comment: "\\x02"\n',
            [],
        ),
    ],
)
def test_the_scanner_finds_a_copy(source, kinds):
    """The check above can fail: each kind of copy is found (and docstrings are not)."""
    assert sorted(k for _, k, _ in layout_copies(source)) == sorted(kinds)


#: message.py's names allowed to be defined again, as (file, name): none.
ALLOWED_REDEFINED: set = set()  # none


def redefined(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``[(line, name)]`` of module-level assignments to one of ``names``."""
    out = []
    for node in ast.parse(source).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        out += [(node.lineno, t.id) for t in targets if isinstance(t, ast.Name) and t.id in names]
    return out


def test_no_module_defines_a_constant_of_engine_message_again():
    """``TRANSACTION_ROLLBACK_TYPE = 0xC`` or ``SCHEDULE_TOPIC = ...`` in another module is a
    second home of a message.py constant (import it)."""
    names = {n for n in vars(message) if n.isupper() and not n.startswith("_")}
    assert {"SCHEDULE_TOPIC", "TRANSACTION_ROLLBACK_TYPE", "CRC32_RESERVED_LEN"} <= names
    bad = [
        f"{rel}:{line}: {name}"
        for rel, src in _sources()
        if rel != HOME
        for line, name in redefined(src, names)
        if (rel, name) not in ALLOWED_REDEFINED
    ]
    assert not bad, bad
    assert redefined("from x import A\nA = 1\nB: int = 2\ndef f():\n    A = 3\n", {"A", "B"}) == [
        (2, "A"),
        (3, "B"),
    ]


#: The names of the magic codes (issue 33: they are named in engine/format and the C core only;
#: other modules ask ``is_record_magic``, ``is_v2_magic``, ``record_magic``, ``RECORD_MAGICS``).
MAGIC_NAMES = {n for n in vars(message) if n.startswith("MAGIC_")}


def named_magics(source: str) -> list[tuple[int, str]]:
    """``[(line, name)]`` where ``source`` names a magic code (imports included)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in MAGIC_NAMES:
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in MAGIC_NAMES:
            out.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, a.name) for a in node.names if a.name in MAGIC_NAMES]
    return out


def test_magic_codes_are_named_in_engine_format_only():
    assert {"MAGIC_V1", "MAGIC_V2", "MAGIC_BLANK"} <= MAGIC_NAMES
    bad = [
        f"{rel}:{line}: {name}"
        for rel, src in _sources()
        if not rel.startswith("engine/format/")
        for line, name in named_magics(src)
    ]
    assert not bad, "ask engine/format/message.py (is_record_magic, ...):\n" + "\n".join(bad)
    found = named_magics("from m import MAGIC_V2\nx = m.MAGIC_V1 == MAGIC_V2\n")
    assert sorted(found) == [(1, "MAGIC_V2"), (2, "MAGIC_V1"), (2, "MAGIC_V2")]
