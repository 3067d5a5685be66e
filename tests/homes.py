"""The scanner behind the "one home" tests (tests/engine/test_walk_home.py,
tests/engine/test_segment_home.py): where the project's modules use names that only one
package may use. The source is read with ``ast``: comments and docstrings may name them."""

import ast

from conftest import REPO

LAYERS = ("engine", "fusefs", "mount", "pipeline")


def names_used(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``[(line, name)]`` of the uses of ``names`` in ``source``: imports of those names
    (``from m import name``, ``import name``), names and attributes."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.ImportFrom, ast.Import)):
            out += [(node.lineno, a.name) for a in node.names if a.name in names]
        elif isinstance(node, ast.Name) and node.id in names:
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in names:
            out.append((node.lineno, node.attr))
    return out


def uses_outside(home: str, names: set[str], allowed: set[tuple[str, str]]) -> list[str]:
    """``"file:line: name"`` for each use of ``names`` in the project's modules outside the
    folder ``home`` (``"engine/format/"``), but the ``(file, name)`` pairs ``allowed``."""
    found = []
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(home):
                continue
            found += [
                f"{rel}:{line}: {name}"
                for line, name in names_used(path.read_text(encoding="utf-8"), names)
                if (rel, name) not in allowed
            ]
    return found
