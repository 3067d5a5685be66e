"""The fast ``topics/`` line renderer and the column-wise one (views) give the same bytes as
the plain ``json`` one, for records written by RocketMQ itself (IPv6 hosts, binary and large
bodies, non-ASCII properties) and by us (compressed bodies, odd characters, every record
kind)."""

import errno
import json
import os

import pytest

from conftest import copy_fixture
from rmqfs.engine.read.jsonline import build_line as render_message_json
from rmqfs.engine.store import Message, MessageStore
from rmqfs.fusefs.base import FsError
from rmqfs.fusefs.render import render_message
from stores import put_internal


def _records(store):
    with MessageStore(str(store), read_only=True) as s:
        out = []
        for t, q in sorted(s.consume_queues):
            out += [rec for _, rec in s.iter_queue(t, q)]
        return out


@pytest.mark.parametrize(
    "fixture", ["rocketmq-4.9.8-written/store", "apache-rocketmq-pr3535/store"]
)
def test_fast_renderer_matches_json_on_broker_written_stores(tmp_path, fixture):
    store = copy_fixture(fixture, tmp_path / "s")
    recs = _records(store)
    assert recs
    for rec in recs:
        assert render_message(rec) == render_message_json(rec)


ODD_BODIES = [
    b"",
    b"plain",
    "ünïcödé \u2028 \u0000 \t \" \\ /".encode(),
    b"\xff\xfe\x00binary",
    b"x" * 70_000,
    "emoji \U0001f600".encode(),
]


def _odd_store(path):
    """A store of ODD_BODIES, each with no tags/keys/properties, odd ones, and empty ones."""
    with MessageStore(str(path)) as s:
        s.create_topic("Odd%|_-1")
        # odd on purpose: past engine/service/validation.py's rules
        put_internal(
            s,
            [
                Message("Odd%|_-1", b, tags=t, keys=k, properties=p)
                for b in ODD_BODIES
                for t, k, p in [
                    (None, None, None),
                    ("Tä\"g", ["k 1", "k\\2"], {"ü": "\n", "a": "é"}),
                    ("", "  spaced  keys ", {}),
                ]
            ],
        )
    return path


def test_fast_renderer_matches_json_on_odd_messages(tmp_path):
    recs = _records(_odd_store(tmp_path / "s"))
    assert len(recs) == len(ODD_BODIES) * 3
    for rec in recs:
        line = render_message(rec)
        assert line == render_message_json(rec)
        assert json.loads(line)["queueOffset"] == rec.queue_offset


def _columnar_lines(store, kind):
    """{commitLogOffset: line} rendered by render.render_lines from engine.read.columnar batches."""
    import numpy as np

    from rmqfs.engine.read.columnar import StoreFiles
    from rmqfs.fusefs.render import render_lines

    files = StoreFiles(str(store))
    out = {}
    for t in files.topics():
        for q in files.queue_ids(t):
            for b in files.read_batches(
                t, q, files.min_offset(t, q), files.max_offset(t, q), batch_rows=5
            ):
                data, ends, newest = render_lines(b, kind)
                assert newest == max(b.column("storeTimestamp").to_pylist())
                starts = np.concatenate([[0], ends[:-1]])
                for off, a, e in zip(b.column("commitLogOffset").to_pylist(), starts, ends):
                    out[off] = data[a:e]
    files.close()
    return out


def _check_columnar_lines(store):
    from rmqfs.fusefs.render import render_body

    for kind, ref in (("messages", render_message), ("bodies", render_body)):
        got = _columnar_lines(store, kind)
        recs = _records(store)
        assert len(got) == len(recs) > 0
        for rec in recs:
            assert got[rec.commitlog_offset] == ref(rec), rec.commitlog_offset


@pytest.mark.parametrize(
    "fixture", ["rocketmq-4.9.8-written/store", "mxsm-rocketmq-rust/store-v0.9.0/local-file"]
)
def test_columnar_lines_match_the_record_renderers_on_broker_stores(tmp_path, fixture):
    _check_columnar_lines(copy_fixture(fixture, tmp_path / "s"))


def test_columnar_lines_match_on_odd_and_every_kind_of_message(tmp_path):
    _check_columnar_lines(_odd_store(tmp_path / "odd"))
    from stores import every_kind_store

    _check_columnar_lines(every_kind_store(tmp_path / "kinds"))
    with MessageStore(str(tmp_path / "ctl")) as s:  # control characters without short escapes
        s.create_topic("C")
        put_internal(
            s,
            [
                Message(
                    "C", b"a\x01b\x1f", tags="t\x07", keys=["k\x00"], properties={"p\x1b": "v\x02x"}
                )
            ],
        )  # control characters on purpose
    _check_columnar_lines(tmp_path / "ctl")


@pytest.mark.parametrize("which", ["blanks", "rocketmq-4.9.8-written/store"])
def test_parquet_part_rows_equal_read_batches(tmp_path, which):
    """render_part (a view/ part) takes engine.read.columnar.queue_units' array and drops blank
    filler with drop_blank_units, as StoreFiles.read_batches does: the same rows, blank units
    of a queue's second file included (issue 17: one reader of a queue's units)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rmqfs.engine.read.columnar import StoreFiles, queue_units
    from rmqfs.engine.read.schema import part_schema
    from rmqfs.fusefs import render
    from stores import blank_units_store, small

    if which == "blanks":
        root, cfg = str(blank_units_store(str(tmp_path / "s"))), small()
    else:
        root, cfg = str(copy_fixture(which, tmp_path / "s")), None
    names = part_schema().names
    parts = 0
    with MessageStore(root, cfg, read_only=True) as s:
        files = StoreFiles(root)
        for (t, q), cq in sorted(s.consume_queues.items()):
            lo, hi = cq.min_offset, cq.max_offset
            units = queue_units(cq, lo, hi)[0]
            out = str(tmp_path / f"part-{parts}.parquet")
            size, newest, rows = render.render_part(
                os.path.join(root, "commitlog"), t, q, units, lo, out
            )
            want = pa.Table.from_batches(
                list(files.read_batches(t, q, lo, hi, columns=tuple(names))), part_schema()
            )
            got = pq.read_table(out)
            assert got.equals(want) and rows == want.num_rows and size == os.path.getsize(out)
            assert newest == (want.column("storeTimestamp")[-1].as_py() if rows else 0)
            parts += 1
        files.close()
    assert parts


def test_lookup_files_hold_no_message_and_are_read_by_range(tmp_path):
    """``keys/<key>``, ``by-offset/<n>``, ``messages/<msgId>``: the node keeps each line's
    length and where its message is, not the message (a node the kernel keeps, one per name
    looked up, held the bodies: 1 MB a name); an open handle renders the line a read falls in,
    one line held at a time (each handle held every line: 400 MB for 24 bodies of 16 MiB
    inflated, found by a review). The bytes are the lines ``render_message`` gives, whatever
    the size of the reads; a message gone since the lookup reads EIO."""
    import zlib

    from fstree import tree
    from rmqfs.engine.format.message import COMPRESSED_FLAG
    from rmqfs.fusefs import nodes
    from rmqfs.fusefs import render as R
    from stores import put_internal

    inflated = 1 << 20
    with tree(tmp_path) as t:
        t.store.create_topic("T", 1)
        body = zlib.compress(b"z" * inflated, 9)
        for _ in range(6):
            m = Message("T", body, keys=["k"], queue_id=0)
            m.sys_flag, m.compress = COMPRESSED_FLAG, False
            put_internal(t.store, [m])
        t.store.put_messages([Message("T", b"plain", keys=["p"], queue_id=0)])
        node = t.node("/topics/T/keys/k")
        assert isinstance(node, nodes.MessageFile)
        assert all(not hasattr(x, "body") for x in node.locations)
        want = b"".join(R.render_message(r) for r in t.store.query_by_key("T", "k"))
        assert node.stat().size == len(want)
        h = node.open(os.O_RDONLY)
        got = bytearray()
        while chunk := h.read(len(got), 131072 + 7):
            got += chunk
            assert len(h.held[2]) < inflated * 2  # one line held, not six
        assert bytes(got) == want
        assert t.read("/topics/T/0/by-offset/6") == R.render_message(t.store.get_message("T", 0, 6))
        gone = t.node("/topics/T/0/by-offset/0")
        h2 = gone.open(os.O_RDONLY)
        gone.reload = lambda at: None  # (as a message expired since the lookup reads)
        h3 = gone.open(os.O_RDONLY)
        with pytest.raises(FsError) as err:
            h3.read(0, 10)
        assert err.value.errno == errno.EIO
        assert h2.read(0, 4) == b'{"to'
