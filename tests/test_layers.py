"""The layers import only downward, and fusefs/ has no import cycle (docs/architecture.md).

engine/ (the store) <- fusefs/ (the tree) <- mount/ (CLI and daemon); pipeline/ (Spark) -> engine/.
Inside engine/, its subpackages are layered too (:data:`ENGINE_LAYERS`): errors, format/,
storeconfig, service/, read/, live/, the store.py façade, tools/; each imports only its own layer
and those before it, so format/ imports nothing of service/, read/, live/ or tools/, and nothing
in engine/ imports tools/ but ``engine/__init__.py`` (lazily).
Every import is read with ``ast``, those inside functions included, so a cycle cannot hide
behind a lazy import (``if TYPE_CHECKING:`` blocks never run and are not counted). The tree
modules must not pull in pyfuse3 or trio: they run without a kernel mount (tests/fs/).

The four folders are installed as one namespace, ``rmqfs.engine``, ``rmqfs.fusefs``, ...
(setup.py's package-dir mapping): every import names it (:func:`test_every_import_names_the_rmqfs_namespace`).
Below, modules go by their names inside the namespace (``engine.store`` for ``rmqfs.engine.store``).
"""

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("engine", "fusefs", "mount", "pipeline")
NS = "rmqfs."
#: what a subprocess of these tests imports ``rmqfs`` from: this checkout (tests/ns/rmqfs)
ENV = dict(os.environ, PYTHONPATH=str(REPO / "tests" / "ns"))


def short(name: str) -> str:
    """``rmqfs.engine.store`` -> ``engine.store`` (names inside the namespace)."""
    return name[len(NS) :] if name.startswith(NS) else name


FORBIDDEN = {
    "engine": {"fusefs", "mount", "pipeline"},
    "fusefs": {"mount", "pipeline"},
    "pipeline": {"fusefs", "mount"},
}  # mount/ (the CLI) is the top: it may use any


def imports(module: str, source: str, is_package: bool = False) -> set[str]:
    """Dotted names of the project modules ``module`` (e.g. ``fusefs.nodes``) imports;
    ``is_package``: ``module`` is a package's ``__init__.py`` (its relative imports start from
    the package itself)."""
    package = module if is_package else module.rsplit(".", 1)[0]
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
            out |= {short(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = short(node.module or "")
            if node.module == "rmqfs":  # from rmqfs import engine
                out |= {a.name for a in node.names}
                continue
            if node.level:  # from . / from .. : up level - 1 packages from this one
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = parent + ("." + base if base else "")
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}  # from . import render
    return {m for m in out if m.split(".")[0] in LAYERS}


def modules() -> dict[str, tuple[str, bool]]:
    """Every project module, subpackages included: dotted name -> (source, is a package)."""
    mods = {}
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            package = parts[-1] == "__init__"
            mods[".".join(parts[:-1] if package else parts)] = (path.read_text(), package)
    return mods


def graph() -> dict[str, set[str]]:
    """Each project module's imports of other project modules (a fresh copy of
    :func:`_graph`'s, which parses every module once a run)."""
    return {m: set(deps) for m, deps in _graph().items()}


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    mods = modules()
    return {
        m: frozenset(i for i in imports(m, src, pkg) if i in mods and i != m)
        for m, (src, pkg) in mods.items()
    }


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle found by a depth-first walk (each reported once from its entry)."""
    found, state = [], {}

    def walk(m, stack):
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                found.append(stack[stack.index(n) :] + [n])
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
    bad = [
        f"{m} imports {sorted(i for i in deps if i.split('.')[0] in FORBIDDEN[layer])}"
        for m, deps in g.items()
        if m.startswith(layer + ".") and any(i.split(".")[0] in FORBIDDEN[layer] for i in deps)
    ]
    assert not bad, bad


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_fusefs_base_imports_nothing_of_fusefs():
    assert {m for m in graph()["fusefs.base"] if m.startswith("fusefs.")} == set()


#: engine/'s internal layers, lowest first: a module imports only its own layer and those
#: before it (type annotations under ``if TYPE_CHECKING:`` excepted: the services name the
#: MessageStore that owns them). ``engine`` itself (``__init__.py``, the public API) is above all.
ENGINE_LAYERS = (
    "engine.errors",  # the errors, each with its errno
    "engine.pythonpath",  # the PYTHONPATH of rmqfs's child processes (imports nothing)
    "engine.format",  # the on-disk files and their primitives
    "engine.storeconfig",  # StoreConfig, broker.conf
    "engine.service",  # put, dispatch, recovery, flush, getMessage, cleanup, lock, validation
    "engine.read",  # the column-wise reader (numpy, Arrow), the columns, the JSON line
    "engine.live",  # followers, snapshots, status, stats, consumer progress
    "engine.store",  # MessageStore, the façade
    "engine.tools",  # offline verify and recover, above the store
)


def engine_layer(module: str) -> int:
    """The rank of an engine module in :data:`ENGINE_LAYERS` (``engine`` itself: above all)."""
    if module == "engine":
        return len(ENGINE_LAYERS)
    for rank, layer in enumerate(ENGINE_LAYERS):
        if module == layer or module.startswith(layer + "."):
            return rank
    raise AssertionError(
        f"{module} is in no layer of ENGINE_LAYERS: add it there (and to docs/architecture.md)"
    )


def engine_upward(g: dict[str, set[str]]) -> list[str]:
    """The imports inside engine/ that go up a layer."""
    return [
        f"{m} ({ENGINE_LAYERS[engine_layer(m)]}) imports {i}"
        for m, deps in sorted(g.items())
        if m.split(".")[0] == "engine"
        for i in sorted(deps)
        if i.split(".")[0] == "engine" and engine_layer(i) > engine_layer(m)
    ]


def test_engine_modules_each_have_a_layer():
    for m in graph():
        if m.startswith("engine"):
            engine_layer(m)


def test_engine_layers_import_only_downward():
    assert engine_upward(graph()) == []


def test_format_imports_only_errors_and_format():
    """The on-disk formats are the bottom: nothing of the services, readers, live stores or
    tools (nor the store) leaks into them."""
    bad = {
        m: sorted(
            i
            for i in deps
            if i.startswith("engine") and not i.startswith(("engine.format", "engine.errors"))
        )
        for m, deps in graph().items()
        if m.startswith("engine.format")
    }
    assert not {m: d for m, d in bad.items() if d}, bad


def test_nothing_in_engine_imports_tools():
    """tools/ (verify, recover) sits above the store; only the package's public API names it,
    and lazily (by module name, not an import statement)."""
    bad = [
        f"{m} imports {i}"
        for m, deps in graph().items()
        if m.startswith("engine") and not m.startswith("engine.tools")
        for i in deps
        if i.startswith("engine.tools")
    ]
    assert bad == []


def test_import_engine_is_light():
    """``import engine`` loads only the errors: the public names load on first use, and the
    columnar reader's numpy/pyarrow only with StoreFiles (the FUSE daemon relies on it)."""
    code = (
        "import sys, rmqfs.engine\n"
        "print(sorted(m for m in sys.modules if m.removeprefix('rmqfs.').split('.')[0] in "
        "('engine', 'numpy', 'pyarrow')))\n"
        "from rmqfs.engine import MessageStore, Message, StoreConfig\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "['rmqfs.engine', 'rmqfs.engine.errors']"
    assert out[1] == "False"


def _engine_imports_that_do_not_resolve(path: Path) -> list[str]:
    """The ``engine`` imports of a file that name no module of this checkout: an old path
    (``engine.recovery`` after the move to ``engine.service``) would otherwise be found by the
    editable install's finder in another checkout and load a second copy of the engine there.
    ``from engine import X``: X is a subpackage or module, or a name of ``engine.__all__``."""
    from rmqfs import engine

    bad = []

    def exists(dotted: str) -> bool:
        base = REPO.joinpath(*dotted.split("."))
        return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            bad += [
                short(a.name)
                for a in node.names
                if short(a.name).split(".")[0] == "engine" and not exists(short(a.name))
            ]
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and node.module
            and short(node.module).split(".")[0] == "engine"
        ):
            module = short(node.module)
            if not exists(module):
                bad.append(module)
            elif module == "engine":
                bad += [
                    f"engine.{a.name}"
                    for a in node.names
                    if a.name not in engine.__all__ and not exists(f"engine.{a.name}")
                ]
    return bad


def test_engine_imports_name_modules_of_this_checkout():
    files = [
        p
        for d in (*LAYERS, "tests", "bench")
        for p in sorted((REPO / d).rglob("*.py"))
        if "java" not in p.relative_to(REPO).parts
    ]
    bad = {
        str(p.relative_to(REPO)): b for p in files if (b := _engine_imports_that_do_not_resolve(p))
    }
    assert not bad, bad


def test_the_checks_can_fail():
    """A lazy import inside a function still makes a cycle; a relative import is resolved."""
    g = {
        m: set(imports(m, src))
        for m, src in {
            "fusefs.a": "from .b import X\n",
            "fusefs.b": "def f():\n    from . import a\n",
            "fusefs.c": "import engine.store\nif TYPE_CHECKING:\n    from . import a\n",
        }.items()
    }
    assert g["fusefs.a"] == {"fusefs.b", "fusefs.b.X"}
    assert "fusefs.a" in g["fusefs.b"]
    assert g["fusefs.c"] == {"engine.store"}
    assert cycles({m: {i for i in d if i in g} for m, d in g.items()}) == [
        ["fusefs.a", "fusefs.b", "fusefs.a"]
    ]
    # two dots go up a package; a package's __init__ resolves from itself
    assert imports(
        "engine.format.message", "from ..errors import E\nfrom ..service import a\n"
    ) >= {"engine.errors", "engine.service", "engine.service.a"}
    assert imports("engine.read", "from .columnar import S\n", is_package=True) >= {
        "engine.read.columnar"
    }
    # an engine layer importing upward is found: format -> service, service -> tools
    # (lazily, inside a function); one under TYPE_CHECKING is not
    g = {
        "engine.format.message": {"engine.service.putmessage", "engine.errors"},
        "engine.service.recovery": {"engine.tools.verify"},
        "engine.service.flush": imports(
            "engine.service.flush", "if TYPE_CHECKING:\n    from ..store import S\n"
        ),
        "engine": {"engine.tools.verify"},
    }
    assert engine_upward(g) == [
        "engine.format.message (engine.format) imports engine.service.putmessage",
        "engine.service.recovery (engine.service) imports engine.tools.verify",
    ]
    with pytest.raises(AssertionError, match="no layer"):
        engine_layer("engine.newmodule")


def test_an_old_engine_path_is_found(tmp_path):
    old = tmp_path / "old.py"
    old.write_text(
        "from engine import dispatch, errors, MessageStore\nimport engine.recovery\n"
        "from engine.columnar import StoreFiles\nfrom engine.read import columnar\n"
    )
    assert _engine_imports_that_do_not_resolve(old) == [
        "engine.dispatch",
        "engine.recovery",
        "engine.columnar",
    ]


def test_the_tree_runs_without_pyfuse3_and_trio():
    code = (
        "import sys\n"
        "import rmqfs.fusefs.base, rmqfs.fusefs.nodes, rmqfs.fusefs.viewtree, "
        "rmqfs.fusefs.snapshots, rmqfs.fusefs.views, rmqfs.fusefs.render\n"
        "print(sorted(m for m in ('pyfuse3', 'trio') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def bare_imports(source: str) -> list[str]:
    """The imports of ``engine``, ``fusefs``, ``mount`` or ``pipeline`` as top-level packages
    (not ``rmqfs.``): installed, those names are another project's (issue 24), and in a checkout
    they would load a second copy of a module beside its ``rmqfs.`` one."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        bad += [n for n in names if n.split(".")[0] in LAYERS]
    return bad


#: what a user pastes: ``from engine import ...`` or ``python -m mount.cli`` in the docs
_DOC_BARE = re.compile(
    r"^\s*(?:>>> )?(?:from|import) (?:engine|fusefs|mount|pipeline)\b|-m (?:engine|fusefs|mount|pipeline)\.",
    re.M,
)


def test_every_import_names_the_rmqfs_namespace():
    files = [
        p
        for d in (*LAYERS, "tests", "bench")
        for p in sorted((REPO / d).rglob("*.py"))
        if not {"java", "ns"} & set(p.relative_to(REPO).parts)
    ]
    bad = {str(p.relative_to(REPO)): b for p in files if (b := bare_imports(p.read_text()))}
    assert not bad, bad
    docs = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
    bad_docs = {
        str(p.relative_to(REPO)): m for p in docs if (m := _DOC_BARE.findall(p.read_text()))
    }
    assert not bad_docs, bad_docs


def test_a_bare_import_is_found():
    assert bare_imports(
        "import engine.store\nfrom fusefs import nodes\nfrom rmqfs.mount import cli\n"
        "from . import x\nimport enginex\n"
    ) == ["engine.store", "fusefs"]
    assert _DOC_BARE.findall("x\n    from engine import MessageStore\npython -m mount.cli -h\n")


TESTS = REPO / "tests"


def _test_imports(path: Path) -> set[str]:
    return {m.split(".")[0] for m in imports("tests.x", path.read_text())} | {
        n.id
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Name) and n.id in ("fuse", "mount_store", "spark")
    }


@pytest.mark.parametrize(
    "tier, forbidden",
    [
        ("engine", {"fusefs", "mount", "pipeline", "fuse", "mount_store", "spark"}),
        ("fs", {"mount", "pipeline", "fuse", "mount_store", "spark"}),
    ],
)
def test_tests_are_grouped_by_layer(tier, forbidden):
    """tests/engine/ runs without the filesystem, tests/fs/ without a kernel mount; tests that
    mount are in tests/mount/ (or tools/, spark/)."""
    bad = {
        p.name: sorted(_test_imports(p) & forbidden)
        for p in sorted((TESTS / tier).glob("test_*.py"))
        if _test_imports(p) & forbidden
    }
    assert not bad, bad
    # at the top only the checks of the whole repository: the layers, the functions' sizes,
    # the docs' links, privacy
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == [
        "test_docs.py",
        "test_layers.py",
        "test_privacy.py",
        "test_sizes.py",
    ]


def test_every_long_test_named_exists():
    """conftest.LONG_TESTS names tests by file and function: a renamed or removed one would
    silently come back into `make test`'s budget (or the list would say what is not there)."""
    import ast

    from conftest import LONG_TESTS, REPO

    missing = []
    for rel, names in LONG_TESTS.items():
        path = REPO / rel
        defined = set()
        if path.exists():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        missing += [f"{rel}::{n}" for n in sorted(names - defined)]
    assert not missing, missing
