"""Queue readers share one protocol (issue 33, item 3): ConsumeQueue, BatchConsumeQueue and
RocksDBConsumeQueue each are an ``engine.format.queue.QueueReader`` (RocketMQ's
``ConsumeQueueInterface``), none a subclass of another nor carrying a stand-in for another's
attributes, and no reader of queues asks which kind it was given.

mypy checks the classes against the protocol statically (``make lint``); these tests hold it at
run time, on queues opened from real stores of each kind, and read the reader modules' source
for ``isinstance`` on a concrete queue class.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from bcqstore import build_bcq_store
from rmqfs.engine import Message
from rmqfs.engine.format.batchcq import BatchConsumeQueue
from rmqfs.engine.format.consumequeue import ConsumeQueue
from rmqfs.engine.format.queue import QueueReader
from rmqfs.engine.format.rocksdbcq import RocksDBConsumeQueue
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.store import MessageStore
from rocksdbstore import write_rocksdb_cq
from stores import copy_store

REPO = Path(__file__).resolve().parent.parent.parent
KINDS = (ConsumeQueue, BatchConsumeQueue, RocksDBConsumeQueue)
#: the concrete queue classes by name, as a module imports them
CONCRETE = {c.__name__ for c in KINDS}
#: the modules that read queues: each takes a QueueReader and never asks its kind
READERS = (
    "engine/read/columnar.py",
    "engine/read/scheduled.py",
    "engine/service/getmessage.py",
    "engine/live/stats.py",
    "engine/tools/verify/queues.py",
    "fusefs/views.py",
    "mount/admin.py",
    "pipeline/datasource.py",
)
#: the protocol's members: its methods and properties, and its annotated attributes
MEMBERS = sorted(
    {n for n in vars(QueueReader) if not n.startswith("_")} | set(QueueReader.__annotations__)
)


@pytest.fixture(scope="module")
def queues(tmp_path_factory):
    """``{kind: the queue of a store of that kind}``, each opened by the store and by
    StoreFiles (the two places that open queues)."""
    base = tmp_path_factory.mktemp("kinds")
    plain = base / "plain"
    with MessageStore(str(plain)) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"m%d" % i, tags="a") for i in range(12)])
    rdb = base / "rocksdb"
    copy_store(plain, rdb)
    write_rocksdb_cq(rdb)
    bcq = base / "bcq"
    build_bcq_store(bcq)
    out = {}
    stores: list[MessageStore | StoreFiles] = []
    for kind, root, topic in (
        (ConsumeQueue, plain, "T"),
        (RocksDBConsumeQueue, rdb, "T"),
        (BatchConsumeQueue, bcq, "B"),
    ):
        s = MessageStore(str(root), read_only=True)
        sf = StoreFiles(str(root))
        stores += [s, sf]
        out[kind] = (s.consume_queue(topic, 0), sf.queue(topic, 0))
    yield out
    for opened in stores:
        opened.close()


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_each_kind_is_a_queue_reader(queues, kind):
    """The store and StoreFiles hand out a queue of each kind, and it answers the protocol:
    every member there, units read as 20-byte ConsumeQueue units."""
    for q in queues[kind]:
        assert type(q) is kind
        assert isinstance(q, QueueReader)
        for name in MEMBERS:
            assert hasattr(q, name), (kind.__name__, name)
        assert q.max_offset > q.min_offset >= 0
        raw = q.read_units(q.min_offset, 2)
        assert len(raw) == 40
        assert q.unit(q.min_offset) == next(iter(q.iter_units(q.min_offset)))[1:]
        assert q.catch_up() >= 0 and isinstance(q.follow_files(add=False), list)
        assert q.units_per_file > 0 and q.file_count >= 0


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_each_kind_takes_the_protocols_arguments(kind):
    """Each method accepts what the protocol passes, by the protocol's names (a reader may call
    ``offset_by_time(ts, at, lo, hi)`` on any kind)."""
    for name in MEMBERS:
        want = vars(QueueReader).get(name)
        if not inspect.isfunction(want):
            continue
        have = inspect.signature(getattr(kind, name)).parameters
        for p in list(inspect.signature(want).parameters)[1:]:
            assert p in have, (kind.__name__, name, p)


def test_no_kind_subclasses_another_or_stands_in_for_its_files():
    """Before: RocksDBConsumeQueue subclassed ConsumeQueue, skipped its ``__init__`` and set
    ``files`` to a stand-in of the FileQueue."""
    for a in KINDS:
        for b in KINDS:
            assert a is b or not issubclass(a, b), (a.__name__, b.__name__)
    src = inspect.getsource(inspect.getmodule(RocksDBConsumeQueue))
    assert "type: ignore[assignment]" not in src
    assert "files" not in {
        n for n in vars(RocksDBConsumeQueue) if not n.startswith("__")
    } and "self.files" not in inspect.getsource(RocksDBConsumeQueue)


def _isinstance_targets(tree: ast.AST) -> list[ast.Name | ast.Attribute]:
    """The nodes naming a concrete queue class that an ``isinstance``/``issubclass`` asks
    about."""
    out: list[ast.Name | ast.Attribute] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            continue
        arg = node.args[1]
        for n in arg.elts if isinstance(arg, ast.Tuple) else [arg]:
            named = n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)
            if named in CONCRETE and isinstance(n, (ast.Name, ast.Attribute)):
                out.append(n)
    return out


@pytest.mark.parametrize("path", READERS)
def test_readers_never_ask_a_queues_kind(path):
    """Before: StoreFiles.offset_by_time asked ``isinstance(q, BatchConsumeQueue)``
    (columnar.py), and the readers' annotations were unions of the kinds."""
    tree = ast.parse((REPO / path).read_text())
    asked = [(n.lineno, ast.unparse(n)) for n in _isinstance_targets(tree)]
    assert asked == []


def test_no_module_imports_a_queue_class_only_to_ask_isinstance():
    """A module that imports ConsumeQueue, BatchConsumeQueue or RocksDBConsumeQueue opens one
    or annotates with it; one that names it only in ``isinstance`` would be a reader asking
    the kind, which the protocol answers."""
    bad = []
    paths = sorted(
        p
        for layer in ("engine", "fusefs", "mount", "pipeline")
        for p in (REPO / layer).rglob("*.py")
    )
    for path in paths:
        tree = ast.parse(path.read_text())
        imported = {
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for a in node.names
            if a.name in CONCRETE
        }
        asked = {id(n) for n in _isinstance_targets(tree)}
        for name in sorted(imported):
            uses = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
            ]
            if uses and all(id(n) in asked for n in uses):
                bad.append(f"{path.relative_to(REPO)}: {name}")
    assert bad == []


def test_the_import_check_finds_a_module_that_only_asks_isinstance(tmp_path):
    """The check above, on a module written to fail it."""
    tree = ast.parse(
        "from .consumequeue import ConsumeQueue\n"
        "def f(q):\n"
        "    return isinstance(q, (ConsumeQueue, int))\n"
    )
    assert [n.id for n in _isinstance_targets(tree)] == ["ConsumeQueue"]
