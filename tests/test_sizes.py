"""No function of the code runs past :data:`MAX_LINES` lines (issue 33 item 5): a function that
long does several things, each of which wants a name (and a test) of its own.

Every function and method of engine/, fusefs/, mount/ and pipeline/ is measured with ``ast``,
nested ones included, from its ``def`` line to its last line (decorators not counted).
:data:`ALLOWED` names those that still run past the limit; it only shrinks: a function split
below the limit must leave it (:func:`test_the_allowlist_names_only_long_functions`), and a
new long function cannot join it without this file saying so in review.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("engine", "fusefs", "mount", "pipeline")
MAX_LINES = 150

#: ``path::qualified name`` of the functions over :data:`MAX_LINES` lines, each to be split
#: along its seams (none now: a function that must stay longer is named here, with why).
ALLOWED: set[str] = set()


def function_sizes(source: str) -> dict[str, int]:
    """``{qualified name: lines}`` of every function in ``source`` (methods as
    ``Class.name``, nested functions as ``outer.inner``)."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    out[name] = child.end_lineno - child.lineno + 1
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return out


def code_functions() -> dict[str, int]:
    """``{path::qualified name: lines}`` of every function of the code."""
    out: dict[str, int] = {}
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for name, n in function_sizes(path.read_text(encoding="utf-8")).items():
                out[f"{rel}::{name}"] = n
    return out


def test_no_function_runs_past_the_limit():
    long = {
        name: n for name, n in code_functions().items() if n > MAX_LINES and name not in ALLOWED
    }
    assert not long, (
        f"functions over {MAX_LINES} lines (split them along their seams): "
        + ", ".join(f"{name} ({n})" for name, n in sorted(long.items()))
    )


def test_the_allowlist_names_only_long_functions():
    """A function split (or renamed, or gone) leaves :data:`ALLOWED`: the list only shrinks."""
    sizes = code_functions()
    stale = sorted(name for name in ALLOWED if sizes.get(name, 0) <= MAX_LINES)
    assert not stale, f"no longer over {MAX_LINES} lines, take them off ALLOWED: {stale}"


def test_the_measure_finds_nested_functions_and_methods():
    body = "".join(f"            x{i} = {i}\n" for i in range(MAX_LINES))
    source = (
        "class A:\n"
        "    def short(self):\n"
        "        def inner():\n"
        f"{body}"
        "            return 1\n"
        "        return inner\n"
    )
    sizes = function_sizes(source)
    assert sizes == {"A.short.inner": MAX_LINES + 2, "A.short": MAX_LINES + 4}
