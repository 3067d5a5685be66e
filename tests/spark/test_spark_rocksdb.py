"""The data source over a RocksDB store (RocketMQ 5.2+, tests/rocksdbstore.py): every row
equals the plain store's it was converted from, bodies byte-exact."""

from __future__ import annotations

import pytest

from rmqfs.engine import Message
from rmqfs.engine.store import MessageStore
from rmqfs.pipeline import datasource as D
from rocksdbstore import write_config_v1, write_rocksdb_cq
from stores import copy_store

pytestmark = pytest.mark.spark


def test_rows_equal_the_plain_store_s(spark, tmp_path):
    plain = tmp_path / "plain"
    with MessageStore(str(plain)) as s:
        s.create_topic("T", 3)
        s.put_messages(
            [Message("T", b"b%d" % i + bytes(range(256)), tags=f"t{i % 2}") for i in range(30)]
        )
    rdb = tmp_path / "rdb"
    copy_store(plain, rdb)
    write_rocksdb_cq(rdb)
    write_config_v1(rdb)

    D.register(spark)

    def rows(root):
        df = spark.read.format("rocketmq").load(str(root))
        return sorted(tuple(r) for r in df.collect())

    want = rows(plain)
    assert len(want) == 30
    assert rows(rdb) == want
