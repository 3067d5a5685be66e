"""Stores the tests of several layers build: small segments, a produce/read pair, and a store
holding every kind of CommitLog record (one home; the tests import them from here)."""

import zlib

from engine.message import (COMPRESSED_FLAG, INNER_BATCH_FLAG, NEED_UNWRAP_FLAG,
                            TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE, encode_message,
                            host_from_str)
from engine.store import Message, MessageStore, StoreConfig

SMALL = dict(mapped_file_size_commit_log=8 * 1024, mapped_file_size_consume_queue=16 * 20,
             max_hash_slot_num=16, max_index_num=64)


def small() -> StoreConfig:
    return StoreConfig(**SMALL)


def produce(root, n, topic="T", queue_id=None, tag="m", cfg=None):
    with MessageStore(str(root), cfg or small()) as s:
        if s.topic_config.get(topic) is None:
            s.create_topic(topic, 2)
        s.put_messages([Message(topic, f"{tag}{i}".encode(), keys=[f"k{tag}{i}"],
                                queue_id=queue_id) for i in range(n)])


def bodies(root, topic="T", cfg=None):
    with MessageStore(str(root), cfg or small(), read_only=True) as s:
        return sorted(rec.body for q in s.queue_ids(topic)
                      for _, rec in s.iter_queue(topic, q))


def small_segments(**kw):
    base = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=100 * 20,
                max_hash_slot_num=64, max_index_num=256)
    base.update(kw)
    return StoreConfig(**base)


def put_internal(store, msgs):
    """Put records a client could not send (odd properties, broker-internal topics) on purpose."""
    return store.put_messages(msgs, internal=True)


def every_kind_store(root):
    """V1 and V2 records, IPv6 hosts, zlib/lz4/zstd bodies, __CRC32#, transactions, delayed
    messages, odd bodies and properties, a non-UTF-8 property, an inner-batch record (in the
    CommitLog only), segments crossed."""
    odd = [b"", b"plain", "ünï \u2028 \x00 \" \\".encode(), b"\xff\xfe\x00bin", b"x" * 9000]
    with MessageStore(str(root), small_segments(compress_msg_body_over_howmuch=1024,
                                      compress_type="LZ4")) as s:
        long_topic = "%RETRY%" + "g" * 200
        for t, n in (("T", 3), (long_topic, 1), ("Z", 1)):
            s.create_topic(t, n)
        msgs = []
        for i, b in enumerate(odd * 4):
            msgs.append(Message("T", b, tags=["a", None, "Tä\"g", ""][i % 4],
                                keys=[None, "k1  k2 ", ["only"]][i % 3],
                                properties=[None, {"ü": "\n", "e": ""}, {"x": "a\x01b"}][i % 3]))
        put_internal(s, msgs)
        put_internal(s, [Message("T", b"big " * 2000), Message("T", b"big " * 2000,
                                                               compress=False)])
        put_internal(s, [Message(long_topic, b"v2 record", tags="r")])
        put_internal(s, [Message("T", b"from v6", born_host=host_from_str("[2001:db8::7]:42"))])
        put_internal(s, [Message("T", b"delayed", delay_level=2)])
        put_internal(s, [Message("T", b"half", sys_flag=TRANSACTION_PREPARED_TYPE)])
        put_internal(s, [Message("T", b"commit", sys_flag=TRANSACTION_COMMIT_TYPE)])
        put_internal(s, [Message("Z", zlib.compress(b"legacy zlib"), sys_flag=COMPRESSED_FLAG,
                                compress=False)])
        host = (b"\x7f\0\0\1", 1)
        e = encode_message("Z", b"inner", queue_id=0, born_timestamp=1, born_host=host,
                           store_host=host, sys_flag=INNER_BATCH_FLAG | NEED_UNWRAP_FLAG,
                           properties={"INNER_NUM": "3", "INNER_BASE": "0"})
        s.commitlog.append([e], [0])
        put_internal(s, [Message("Z", b"after inner", tags="z")])
    for kind in ("ZSTD", "ZLIB"):
        with MessageStore(str(root), small_segments(compress_msg_body_over_howmuch=1024,
                                          compress_type=kind)) as s:
            put_internal(s, [Message("T", b"compress me " * 500)] * 3)
    with MessageStore(str(root), small_segments(enabled_append_prop_crc=True)) as s:
        put_internal(s, [Message("T", b"with crc property", tags="c")] * 3)
    with MessageStore(str(root), small_segments(broker_ip1="::1")) as s:
        put_internal(s, [Message("T", b"stored by a v6 broker")] * 2)
    return root
