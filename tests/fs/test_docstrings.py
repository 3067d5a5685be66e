"""The filesystem layer documents itself (issue 24): most public names of ``fusefs`` carry a
docstring, and every concrete node class says what it serves, the errnos it answers and which
thread runs its handlers (the trio loop or a worker thread). Read with ``ast``: no imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

FUSEFS = Path(__file__).resolve().parents[2] / "fusefs"

#: The least share of fusefs' public names with a docstring.
MIN_COVERAGE = 0.80

#: Node classes that are bases, never a path of the tree themselves.
ABSTRACT_NODES = {"Node", "Dir", "GeneratedFile", "ViewFile"}


def _modules() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(FUSEFS.glob("*.py"))}


def public_names(tree: ast.Module) -> list[tuple[str, bool]]:
    """``(qualified name, has a docstring)`` of a module's public functions, classes, and
    the public methods and properties of its classes (nested classes included)."""
    out: list[tuple[str, bool]] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_"):
                continue
            out.append((prefix + node.name, ast.get_docstring(node) is not None))
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return out


def node_classes(modules: dict[str, ast.Module]) -> dict[str, ast.ClassDef]:
    """Every class of fusefs that derives from ``Node`` (through any fusefs class), by name."""
    classes = {
        n.name: n for tree in modules.values() for n in tree.body if isinstance(n, ast.ClassDef)
    }

    def is_node(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "Node":
            return True
        cls = classes.get(name)
        if cls is None or name in seen:
            return False
        return any(isinstance(b, ast.Name) and is_node(b.id, seen | {name}) for b in cls.bases)

    return {name: cls for name, cls in classes.items() if is_node(name)}


def test_most_public_names_of_fusefs_have_a_docstring():
    names = [
        (f"{mod}:{name}", has)
        for mod, tree in _modules().items()
        for name, has in public_names(tree)
    ]
    assert len(names) > 200  # the walk found the package
    documented = sum(has for _, has in names)
    missing = sorted(name for name, has in names if not has)
    assert documented / len(names) >= MIN_COVERAGE, (
        f"{documented} of {len(names)} public names of fusefs have a docstring "
        f"({documented / len(names):.0%}, at least {MIN_COVERAGE:.0%} wanted); "
        f"without one: {', '.join(missing)}"
    )


def test_every_concrete_node_class_says_what_it_serves_its_errnos_and_its_thread():
    concrete = {
        name: cls for name, cls in node_classes(_modules()).items() if name not in ABSTRACT_NODES
    }
    assert len(concrete) >= 30  # topics/, groups/, raw/, view/, snapshots/ ...
    bad = []
    for name, cls in sorted(concrete.items()):
        doc = ast.get_docstring(cls) or ""
        first = doc.split("\n\n")[0]
        why = []
        if "``" not in first:
            why.append("its first paragraph names no path it serves (``...``)")
        errnos = re.search(r"^Errnos: (.*)", doc, re.M)
        if errnos is None or not re.search(r"\bE[A-Z]{2,}\b", errnos.group(1)):
            why.append("no 'Errnos:' line naming an errno")
        threads = re.search(r"^Threads: (.*?)(?:\n\n|\Z)", doc, re.M | re.S)
        if threads is None or not re.search(r"trio loop|worker thread", threads.group(1)):
            why.append("no 'Threads:' line saying trio loop or worker thread")
        if why:
            bad.append(f"{name}: {'; '.join(why)}")
    assert not bad, "\n".join(bad)
