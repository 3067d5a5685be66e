"""The layers import only downward, and fusefs/ has no import cycle (README "Architecture").

engine/ (the store) <- fusefs/ (the tree) <- mount/ (CLI and daemon); pipeline/ (Spark) -> engine/.
Every import is read with ``ast``, those inside functions included, so a cycle cannot hide
behind a lazy import. The tree modules must not pull in pyfuse3 or trio: they run without a
kernel mount (tests/fs/).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("engine", "fusefs", "mount", "pipeline")
FORBIDDEN = {"engine": {"fusefs", "mount", "pipeline"},
             "fusefs": {"mount", "pipeline"},
             "pipeline": {"fusefs", "mount"}}  # mount/ (the CLI) is the top: it may use any


def imports(module: str, source: str) -> set[str]:
    """Dotted names of the project modules ``module`` (e.g. ``fusefs.nodes``) imports."""
    package = module.rsplit(".", 1)[0]
    out = set()
    tree = ast.parse(source)
    typing_only = set()  # `if TYPE_CHECKING:` blocks never run
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            typing_only |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = package + ("." + base if base else "")
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}  # from . import render
    return {m for m in out if m.split(".")[0] in LAYERS}


def graph() -> dict[str, set[str]]:
    mods = {}
    for layer in LAYERS:
        for path in sorted((REPO / layer).glob("*.py")):
            mods[f"{layer}.{path.stem}"] = path.read_text()
    return {m: {i for i in imports(m, src) if i in mods and i != m} for m, src in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle found by a depth-first walk (each reported once from its entry)."""
    found, state = [], {}

    def walk(m, stack):
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                found.append(stack[stack.index(n):] + [n])
            elif n not in state:
                walk(n, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            walk(m, [])
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_only_downward(layer):
    g = graph()
    bad = [f"{m} imports {sorted(i for i in deps if i.split('.')[0] in FORBIDDEN[layer])}"
           for m, deps in g.items() if m.startswith(layer + ".")
           and any(i.split(".")[0] in FORBIDDEN[layer] for i in deps)]
    assert not bad, bad


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_fusefs_base_imports_nothing_of_fusefs():
    assert {m for m in graph()["fusefs.base"] if m.startswith("fusefs.")} == set()


def test_the_checks_can_fail():
    """A lazy import inside a function still makes a cycle; a relative import is resolved."""
    g = {m: set(imports(m, src)) for m, src in {
        "fusefs.a": "from .b import X\n",
        "fusefs.b": "def f():\n    from . import a\n",
        "fusefs.c": "import engine.store\nif TYPE_CHECKING:\n    from . import a\n",
    }.items()}
    assert g["fusefs.a"] == {"fusefs.b", "fusefs.b.X"}
    assert "fusefs.a" in g["fusefs.b"]
    assert g["fusefs.c"] == {"engine.store"}
    assert cycles({m: {i for i in d if i in g} for m, d in g.items()}) == [
        ["fusefs.a", "fusefs.b", "fusefs.a"]]


def test_the_tree_runs_without_pyfuse3_and_trio():
    code = ("import sys\n"
            "import fusefs.base, fusefs.nodes, fusefs.viewtree, fusefs.snapshots, fusefs.views, "
            "fusefs.render\n"
            "print(sorted(m for m in ('pyfuse3', 'trio') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


TESTS = REPO / "tests"


def _test_imports(path: Path) -> set[str]:
    return {m.split(".")[0] for m in imports("tests.x", path.read_text())} | {
        n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)
        and n.id in ("fuse", "mount_store", "spark")}


@pytest.mark.parametrize("tier, forbidden", [
    ("engine", {"fusefs", "mount", "pipeline", "fuse", "mount_store", "spark"}),
    ("fs", {"mount", "pipeline", "fuse", "mount_store", "spark"}),
])
def test_tests_are_grouped_by_layer(tier, forbidden):
    """tests/engine/ runs without the filesystem, tests/fs/ without a kernel mount; tests that
    mount are in tests/mount/ (or tools/, spark/)."""
    bad = {p.name: sorted(_test_imports(p) & forbidden)
           for p in sorted((TESTS / tier).glob("test_*.py")) if _test_imports(p) & forbidden}
    assert not bad, bad
    # at the top only the checks of the whole repository: the layers, the docs' links, privacy
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == ["test_docs.py", "test_layers.py",
                                                                  "test_privacy.py"]
