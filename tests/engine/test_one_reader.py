"""The two ways into a store read the same (issue 22, section 1): ``MessageStore`` opened
read-only (the mount, the offline commands) and ``StoreFiles`` (the lock-free reader of Spark's
executors) read each queue through the same format class (``ConsumeQueue``,
``BatchConsumeQueue``, ``RocksDBConsumeQueue``) and the CommitLog through the same
``MappedFiles``; they differ only in what opening does (recovery, the lock). On every layout
rmqfs reads, real brokers' stores and Java-defined ones, they must agree on the queues, each
queue's min and max offset, the search by time and every message's CommitLog offset, store
time and body."""

from __future__ import annotations

import shutil

import pytest

from bcqstore import build_bcq_store
from conftest import FIXTURES, copy_fixture
from lmqstore import build_lmq_store
from rmqfs.engine.format.consumequeue import BLANK_UNIT_SIZE
from rmqfs.engine.format.message import is_lmq
from rmqfs.engine.read.columnar import StoreFiles
from rmqfs.engine.store import MessageStore
from rocksdbstore import write_rocksdb_cq
from stores import blank_units_store, every_kind_store, produce, small

COLUMNS = ("queueOffset", "commitLogOffset", "storeTimestamp", "body")


def _fixture(name, sub="store"):
    def build(root):
        copy_fixture(name, root.parent / "copy")
        shutil.move(str(root.parent / "copy" / sub), str(root))

    return build


def _rocksdb(root):
    produce(root, 40, queue_id=None, cfg=small())
    write_rocksdb_cq(root)


BUILDERS = {
    "rocketmq-4.9.8-written": _fixture("rocketmq-4.9.8-written"),
    "rocketmq-4.9.8-dledger": _fixture("rocketmq-4.9.8-dledger"),
    "rocketmq-5.3.3-timer": _fixture("rocketmq-5.3.3-timer"),
    "mxsm-rocketmq-rust": _fixture("mxsm-rocketmq-rust", "store-v0.9.0/local-file"),
    "every-kind": every_kind_store,
    "blank-units": blank_units_store,
    "batchcq": build_bcq_store,
    "lmq": build_lmq_store,
    "rocksdb-consumequeue": _rocksdb,
}


def _rows(sf: StoreFiles, topic: str, q: int, lo: int, hi: int) -> list[tuple]:
    rows = [
        tuple(r[c] for c in COLUMNS)
        for b in sf.read_batches(topic, q, lo, hi, columns=COLUMNS)
        for r in b.to_pylist()
    ]
    if is_lmq(topic):  # an LMQ's rows are other topics' records, their QUEUEOFFSET their own
        rows = [(None, *r[1:]) for r in rows]
    return rows


def _store_rows(ms: MessageStore, topic: str, q: int, lo: int, hi: int) -> list[tuple]:
    out = []
    for qoff in range(lo, hi):
        cq = ms.consume_queue(topic, q)
        assert cq is not None
        _, size, _ = cq.unit(qoff)
        if size == BLANK_UNIT_SIZE:  # blank filler (fillPreBlank): no message
            continue
        rec = ms.get_message(topic, q, qoff)
        qo = None if is_lmq(topic) else qoff
        out.append((qo, rec.commitlog_offset, rec.store_timestamp, rec.plain_body))
    return out


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_storefiles_and_the_read_only_store_read_the_same(tmp_path, name):
    if name.startswith(("rocketmq-", "apache-", "mxsm-")) and not FIXTURES.exists():
        pytest.skip("no shared fixtures")
    root = tmp_path / "store"
    BUILDERS[name](root)
    sf = StoreFiles(str(root))
    try:
        with MessageStore(str(root), read_only=True, follow=False) as ms:
            queues = [(t, q) for t in sf.topics() for q in sf.queue_ids(t)]
            assert queues, "the store holds queues"
            compared = 0
            for t, q in queues:
                assert ms.consume_queue(t, q) is not None, (t, q)
                lo, hi = ms.min_offset(t, q), ms.max_offset(t, q)
                assert (sf.min_offset(t, q), sf.max_offset(t, q)) == (lo, hi), (t, q)
                rows = _rows(sf, t, q, lo, hi)
                assert rows == _store_rows(ms, t, q, lo, hi), (t, q)
                times = sorted({r[2] for r in rows})
                for ts in (0, *times[:: max(1, len(times) // 5)], (times or [0])[-1] + 1):
                    assert sf.offset_by_time(t, q, ts) == ms.offset_by_time(t, q, ts), (t, q, ts)
                compared += len(rows)
            assert compared > 0
    finally:
        sf.close()


def test_a_store_without_consumequeues_is_where_the_two_differ(tmp_path):
    """What opening does is the one difference: a store holding only ``commitlog/`` (here a
    store written by RocketMQ's own test, apache/rocketmq PR 3535) has its ConsumeQueues
    rebuilt in memory by ``MessageStore``'s recovery, while ``StoreFiles``, which never
    recovers, shows no queue (docs/engine.md: mount it once to recover it)."""
    if not FIXTURES.exists():
        pytest.skip("no shared fixtures")
    root = tmp_path / "store"
    _fixture("apache-rocketmq-pr3535")(root)
    assert not (root / "consumequeue").exists()
    sf = StoreFiles(str(root))
    try:
        assert sf.topics() == []
        with MessageStore(str(root), read_only=True, follow=False) as ms:
            rebuilt = [(t, q) for t in ms.topic_names() for q in ms.queue_ids(t)]
            assert any(ms.max_offset(t, q) > 0 for t, q in rebuilt)
    finally:
        sf.close()


def test_the_search_by_time_steps_over_blank_filler(tmp_path):
    """``ConsumeQueue.offset_by_time`` over a queue with blank filler units (fillPreBlank)
    among its units answers the first real unit stored at or after the time, as a scan would
    (it read the record at offset 0 for a blank unit, or raised)."""
    root = tmp_path / "store"
    blank_units_store(root)
    with MessageStore(str(root), read_only=True, follow=False) as ms:
        cq = ms.consume_queue("T", 0)
        assert cq is not None
        real = []
        for qoff in range(cq.min_offset, cq.max_offset):
            if cq.unit(qoff)[1] != BLANK_UNIT_SIZE:
                real.append((qoff, ms.get_message("T", 0, qoff).store_timestamp))
        assert len(real) < cq.max_offset - cq.min_offset  # blanks are there
        for ts in sorted({t for _, t in real}) + [0, real[-1][1] + 1]:
            want = next((q for q, t in real if t >= ts), cq.max_offset)
            assert ms.offset_by_time("T", 0, ts) == want, ts
