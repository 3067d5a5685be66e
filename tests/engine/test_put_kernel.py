"""The compiled put path (``rmq_put`` of engine/read/_kernel.c, driven by
``engine.service.putmessage.put_plain``) writes what the Python encoder writes, and what an
independent reader reads back.

* Hypothesis draws batches (V1 and V2 topics, tags, keys with characters outside the BMP,
  sharding keys, explicit queues, born times and hosts, flags, bodies from empty to a
  segment's worth) and puts them twice: through the compiled path, and through the general
  path (``encode_message``, ``CommitLog.append``, the dispatchers) with the compiled path
  switched off. The CommitLog, ConsumeQueue and IndexFile files must be equal byte for byte,
  and so must the PutResults.
* tests/refreader.py (written from the format reference, not from the engine) reads the
  compiled path's store back: every record passes its checks (TOTALSIZE, body CRC, physical
  offset), the blank records end their segments, each ConsumeQueue unit points at its record
  and each UNIQ_KEY and key is found through the IndexFile's slot chains.
* A record the compiled path refuses (properties or record too large) changes nothing.
* The compiled IndexFile step (``rmq_index_put``, through its writer into a file's mapping,
  ``rmq_index_put_mapped``) builds what ``indexfile.index_step`` builds, stores those bytes where
  ``IndexFile.put_hashed`` writes them, asks for every unallocated chunk under them before
  storing anything, and refuses any write outside the mapping. Its check of a whole file after
  a crash (``rmq_index_check``) finds what the numpy check finds, on written and mutated files.

tests/engine/test_kernel_sanitize.py runs this file against the sanitizer build (the
Makefile's SAN_TESTS).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
import tempfile
from array import array
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import refreader
import rmqfs.engine.store as store_mod
from rmqfs.engine.errors import (
    CorruptRecordError,
    MessageTooLargeError,
    PropertiesSizeExceededError,
    PutMessageError,
)
from rmqfs.engine.format import indexfile
from rmqfs.engine.format.config import TopicConfig
from rmqfs.engine.format.message import MAX_PROPERTIES_LENGTH
from rmqfs.engine.format.uniqkey import UniqKeyGenerator
from rmqfs.engine.read import kernel
from rmqfs.engine.service import putmessage
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from stores import fix_uniq_keys, put_internal

pytestmark = pytest.mark.skipif(kernel.load() is None, reason="no compiled kernel")

T0 = 1_795_305_347_998
SEGMENT = 8 * 1024
LONG = "L" * 140  # a V2 record (over 127 chars)
TOPICS = {"T": 4, "Other": 2, LONG: 1}

texts = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02 "),
    min_size=1,
    max_size=12,
)


class KeyText(str):
    """Text given as a str subclass whose ``str()`` and ``format()`` say something else (as an
    ``Enum`` mixed with ``str`` does): stored as its characters, one value (keys never joined
    letter by letter)."""

    def __str__(self) -> str:
        return "not-" + str.__str__(self)

    def __format__(self, spec: str) -> str:
        return "not-" + str.__str__(self)


#: keys as the put paths take them: None, "" (no KEYS item), a value (spaces separating keys),
#: a str subclass, a list (joined with spaces; [""] an empty value), a long value
keys_given = st.one_of(
    st.none(),
    st.just(""),
    texts,
    st.lists(texts, min_size=2, max_size=3).map(" ".join),
    texts.map(KeyText),
    st.lists(st.one_of(texts, st.just("")), max_size=3),
    st.just("k" * 700),
)


def _message(route_strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Messages of :data:`TOPICS`, their queue given by ``route_strategy`` (None: round robin,
    ("q", n): a queueId, ("s", text): a sharding key)."""
    return st.builds(
        lambda topic, body, tags, keys, route, born, host, flag, rare: Message(
            topic,
            # now and then a record too large for a segment, or properties too long: refused
            b"z" * (SEGMENT + 100) if rare == 1 else body,
            tags=tags,
            keys="K" * (MAX_PROPERTIES_LENGTH + 1) if rare == 0 else keys,
            queue_id=route[1] % TOPICS[topic] if route and route[0] == "q" else None,
            sharding_key=route[1] if route and route[0] == "s" else None,
            born_timestamp=born,
            born_host=host,
            flag=flag,
        ),
        st.sampled_from(sorted(TOPICS)),
        st.one_of(st.binary(max_size=300), st.binary(min_size=2000, max_size=4000)),
        st.one_of(st.none(), texts, texts.map(KeyText)),
        keys_given,
        route_strategy,
        st.one_of(st.just(0), st.integers(T0 - 10**9, T0)),
        st.one_of(st.none(), st.tuples(st.binary(min_size=4, max_size=4), st.integers(0, 65535))),
        st.sampled_from([0, 0, 7, -1]),
        st.integers(0, 60),
    )


messages = _message(
    st.one_of(
        st.none(),
        st.tuples(st.just("q"), st.integers(0, 3)),
        st.tuples(st.just("s"), texts),
    )
)
batches = st.lists(st.lists(messages, min_size=1, max_size=12), min_size=1, max_size=6)
#: batches without sharding keys: each message's KEYS go to rmq_put apart from the heads
keyed_batches = st.lists(
    st.lists(
        _message(st.one_of(st.none(), st.tuples(st.just("q"), st.integers(0, 3)))),
        min_size=1,
        max_size=12,
    ),
    min_size=1,
    max_size=6,
)


#: the put comparisons' hypothesis settings (RMQFS_PUT_EXAMPLES examples each)
PUT_EXAMPLES = settings(
    max_examples=int(os.environ.get("RMQFS_PUT_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _put_all(
    root: str, batches: list[list[Message]], compiled: bool, batch: bool = False, **config
) -> list:
    """Put each batch (``batch``: as a MessageBatch) into a new store, compiled or by the
    general path: the PutResults, and for a batch the store refused, ``(error type,
    message)`` in its place (what a refusal leaves, the round robin and the UNIQ_KEY
    counter, shows in the later batches' results)."""
    clock = itertools.count(T0, 1300)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_mod.time, "time", lambda: next(clock) / 1000)
        if not compiled:
            mp.setattr(putmessage, "put_plain", lambda store, msgs, *args: None)
        cfg = StoreConfig(
            mapped_file_size_commit_log=SEGMENT,
            mapped_file_size_consume_queue=8 * 20,
            max_hash_slot_num=8,
            max_index_num=40,
            **config,
        )
        s = MessageStore(root, cfg)
        fix_uniq_keys(s, 65533)
        for topic, n in TOPICS.items():
            s.topic_config.put(TopicConfig(topic, n, n))
        results = []
        try:
            for msgs in batches:
                try:
                    out = put_internal(s, msgs, batch)
                except (MessageTooLargeError, PropertiesSizeExceededError) as exc:
                    results.append((type(exc).__name__, str(exc)))
                    continue
                if compiled:
                    assert s.putter.call is not None  # the compiled path ran
                results += out
        finally:
            s.close()
    return results


def _files(root: str, sub: str) -> list[tuple[str, bytes]]:
    base = Path(root) / sub
    if not base.exists():
        return []
    return [
        (str(p.relative_to(base)), p.read_bytes()) for p in sorted(base.rglob("*")) if p.is_file()
    ]


@PUT_EXAMPLES
@given(batches)
def test_compiled_put_writes_the_python_encoders_bytes(batches):
    with tempfile.TemporaryDirectory() as tmp:
        fast = _put_all(os.path.join(tmp, "c"), batches, True)
        general = _put_all(os.path.join(tmp, "p"), batches, False)
        assert fast == general
        for sub in ("commitlog", "consumequeue"):
            assert _files(os.path.join(tmp, "c"), sub) == _files(os.path.join(tmp, "p"), sub)
        # index files are named by creation time: compare their bytes in order
        fi = [b for _, b in _files(os.path.join(tmp, "c"), "index")]
        gi = [b for _, b in _files(os.path.join(tmp, "p"), "index")]
        assert fi == gi
        stored: list[Message] = []
        results = []
        it = iter(fast)
        for b in batches:
            first = next(it)
            if type(first) is tuple:  # refused, whole
                continue
            results += [first, *(next(it) for _ in b[1:])]
            stored += b
        if stored:
            _read_back(os.path.join(tmp, "c"), stored, results)


#: mostly single puts (their own entry, rmq_put_one via _put_one), with batches between them
singles = st.lists(
    st.one_of(
        st.lists(messages, min_size=1, max_size=1),
        st.lists(messages, min_size=1, max_size=1),
        st.lists(messages, min_size=2, max_size=4),
    ),
    min_size=1,
    max_size=10,
)


@PUT_EXAMPLES
@given(singles)
def test_single_puts_write_the_python_encoders_bytes(batches):
    test_compiled_put_writes_the_python_encoders_bytes.hypothesis.inner_test(batches)


@PUT_EXAMPLES
@given(keyed_batches)
def test_batches_of_keys_of_their_own_write_the_python_encoders_bytes(batches):
    """Batches without sharding keys, whose KEYS the compiled path hands over message by
    message (``rmq_put``'s ``keys``/``keys_len``), every way keys are given."""
    test_compiled_put_writes_the_python_encoders_bytes.hypothesis.inner_test(batches)


@PUT_EXAMPLES
@given(batches)
def test_message_batches_write_the_python_encoders_bytes(batches):
    """MessageBatch puts (``batch=True``) on the compiled path: one queue for the batch (the
    first message's queueId or sharding key, else the round robin once), consecutive queue
    offsets, the records whole in one segment, a batch larger than a segment refused with
    nothing written; the general path's bytes, results and refusals."""
    # a MessageBatch has one topic; a later message's queueId or sharding key is not used
    batches = [[dataclasses.replace(m, topic=b[0].topic) for m in b] for b in batches]
    with tempfile.TemporaryDirectory() as tmp:
        fast = _put_all(os.path.join(tmp, "c"), batches, True, batch=True)
        general = _put_all(os.path.join(tmp, "p"), batches, False, batch=True)
        assert fast == general
        for sub in ("commitlog", "consumequeue"):
            assert _files(os.path.join(tmp, "c"), sub) == _files(os.path.join(tmp, "p"), sub)
        fi = [b for _, b in _files(os.path.join(tmp, "c"), "index")]
        assert fi == [b for _, b in _files(os.path.join(tmp, "p"), "index")]
        stored: list[Message] = []
        results = []
        it = iter(fast)
        for b in batches:
            first = next(it)
            if type(first) is tuple:  # refused, whole (not a PutResult)
                continue
            res = [first, *(next(it) for _ in b[1:])]
            assert len({r.queue_id for r in res}) == 1
            assert [r.queue_offset for r in res] == list(
                range(res[0].queue_offset, res[0].queue_offset + len(b))
            )
            assert len({r.commitlog_offset // SEGMENT for r in res}) == 1
            stored += b
            results += res
        if stored:
            _read_back(os.path.join(tmp, "c"), stored, results)


def _read_back(root: str, msgs: list[Message], results: list) -> None:
    """The independent reader finds every message where its PutResult says, with its
    fields, its ConsumeQueue unit and its index entries."""
    scan = refreader.scan_commitlog(os.path.join(root, "commitlog"))
    recs = {r["physicalOffset"]: r for r in scan["records"]}
    assert len(recs) == len(msgs)
    for off, length in scan["blanks"]:
        assert (off + length) % SEGMENT == 0
    index_dir = os.path.join(root, "index")
    for m, res in zip(msgs, results):
        r = recs[res.commitlog_offset]
        assert (r["totalSize"], r["queueOffset"], r["queueId"]) == (
            res.size,
            res.queue_offset,
            res.queue_id,
        )
        assert (r["topic"], r["body"], r["flag"], r["sysFlag"]) == (m.topic, m.body, m.flag, 0)
        assert r["storeTimestamp"] == res.store_timestamp
        assert r["bornTimestamp"] == (m.born_timestamp or res.store_timestamp)
        born = m.born_host or (b"\x7f\x00\x00\x01", 0)
        assert r["bornHostRaw"] == born[0] + born[1].to_bytes(4, "big")
        props = r["properties"]
        assert props["UNIQ_KEY"] == res.uniq_key
        assert props.get("TAGS") == (m.tags or None)
        keys = m.keys if isinstance(m.keys, str) or not m.keys else " ".join(m.keys)
        assert props.get("KEYS") == (keys or None)
        assert refreader.offset_msg_id(r["storeHostRaw"], res.commitlog_offset) == res.msg_id
        units = refreader.read_consumequeue(root, m.topic, res.queue_id)
        assert units[res.queue_offset] == (
            res.commitlog_offset,
            res.size,
            refreader.tags_code(m.tags),
        )
        found = refreader.index_lookup_dir(index_dir, f"{m.topic}#{res.uniq_key}", 8)
        assert res.commitlog_offset in found
        for k in (keys or "").split(" "):
            if k:
                assert res.commitlog_offset in refreader.index_lookup_dir(
                    index_dir, f"{m.topic}#{k}", 8
                )


@pytest.mark.parametrize("message_batch", [False, True])
@pytest.mark.parametrize("compiled", [True, False])
def test_a_refused_batch_writes_nothing_and_moves_what_the_general_path_moves(
    tmp_path, monkeypatch, compiled, message_batch
):
    """Nothing of a refused batch is written; the round robin and the UNIQ_KEY counter move as
    the general path moves them (every message's queue is picked first, then each is encoded
    with its UNIQ_KEY up to the one refused): the compiled path and the general path leave
    the same state."""
    if not compiled:
        monkeypatch.setattr(putmessage, "put_plain", lambda store, msgs, *args: None)
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"first", tags="a")])
        end = s.commitlog.max_offset
        offsets = dict(s.putter.queue_offsets)
        counter = s.uniq_keys.counter
        too_many = "k" * (MAX_PROPERTIES_LENGTH + 1)
        batch = [Message("T", b"ok"), Message("T", b"x", keys=too_many), Message("T", b"y")]
        with pytest.raises(PropertiesSizeExceededError):
            put_internal(s, batch, batch=message_batch)
        assert s.commitlog.max_offset == end
        assert dict(s.putter.queue_offsets) == offsets
        # the first put's, and one a message (a MessageBatch: one for the batch)
        assert s.putter.round_robin == {"T": 2 if message_batch else 4}
        assert s.uniq_keys.counter == counter + 2  # "ok" and "x" took theirs
        res = s.put_messages([Message("T", b"next")])
        assert res[0].commitlog_offset == end
        assert (res[0].queue_id, res[0].queue_offset) == (0, 1)


def _state(s: MessageStore) -> tuple:
    """What a refused put may move: round robin, UNIQ_KEY counter, queue offsets, the end."""
    return (
        dict(s.putter.round_robin),
        s.uniq_keys.counter,
        dict(s.putter.queue_offsets),
        s.commitlog.max_offset,
    )


def _both_paths(tmp_path, monkeypatch, steps) -> list[tuple]:
    """Run ``steps(store)`` on a store put to by the compiled path and on one put to by the
    general path alone (the same UNIQ_KEY counter to start), returning what each gave."""
    got = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(putmessage, "put_plain", lambda store, msgs, *args: None)
            with MessageStore(str(tmp_path / f"s{compiled}"), StoreConfig(**_SMALL)) as s:
                s.create_topic("T", 3)
                s.uniq_keys.counter = 100
                got.append(steps(s, mp))
    return got


_SMALL = dict(mapped_file_size_commit_log=256 << 10)


def test_a_bad_queue_id_mid_batch_moves_the_round_robin_as_the_general_path(tmp_path, monkeypatch):
    """The general path picks each message's queue in order (``_targets``): the messages
    before one whose queueId is not the topic's advance the round robin before the refusal;
    the compiled path leaves it where the general path does, so the next put goes to the same
    queue on both."""

    def steps(s, mp):
        s.put_messages([Message("T", b"a")])
        batch = [Message("T", b"b"), Message("T", b"c"), Message("T", b"d", queue_id=7)]
        with pytest.raises(PutMessageError, match="queueId 7"):
            s.put_messages(batch)
        after = _state(s)
        r = s.put_messages([Message("T", b"e")])[0]
        return after, (r.queue_id, r.queue_offset, r.commitlog_offset)

    compiled, general = _both_paths(tmp_path, monkeypatch, steps)
    assert compiled == general
    assert compiled[0][0] == {"T": 3}  # "a", then "b" and "c" before the refusal


def test_a_single_put_the_disk_refuses_takes_its_uniq_key_as_the_general_path(
    tmp_path, monkeypatch
):
    """A single put whose record needs blocks the disk cannot allocate (ENOSPC from
    ``posix_fallocate``) writes nothing, and has taken its UNIQ_KEY as the general path has
    (which takes it when encoding, before the append fails): the ids after it are the same."""
    import errno

    from rmqfs.engine.format import mappedfile

    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device (test)")

    def steps(s, mp):
        for _ in range(57):  # up to where the next record needs blocks not yet allocated
            s.put_messages([Message("T", b"f" * 1000)])
        end = s.commitlog.max_offset
        with mp.context() as m2:
            m2.setattr(mappedfile.os, "posix_fallocate", no_room)
            with pytest.raises(OSError) as exc:
                s.put_messages([Message("T", b"x" * 3000)])  # past the blocks allocated
        assert exc.value.errno == errno.ENOSPC and s.commitlog.max_offset == end
        after = _state(s)
        r = s.put_messages([Message("T", b"y")])[0]
        return after, (r.queue_id, r.queue_offset, r.commitlog_offset, r.uniq_key[-4:])

    compiled, general = _both_paths(tmp_path, monkeypatch, steps)
    assert compiled == general


def test_a_batch_rolls_segments_with_blank_records(tmp_path):
    """A batch that crosses several segments: each ends with its END_OF_FILE blank and
    one pwrite per segment brings the records in (refreader checks every record)."""
    cfg = StoreConfig(mapped_file_size_commit_log=4096)
    with MessageStore(str(tmp_path / "s"), cfg) as s:
        s.create_topic("T", 3)
        res = s.put_messages([Message("T", bytes([i]) * 700, tags="t") for i in range(40)])
        assert len({r.commitlog_offset // 4096 for r in res}) >= 8
    scan = refreader.scan_commitlog(str(tmp_path / "s" / "commitlog"))
    assert [r["physicalOffset"] for r in scan["records"]] == [r.commitlog_offset for r in res]
    assert len(scan["blanks"]) == len({r.commitlog_offset // 4096 for r in res}) - 1


#: the fields of rmq_put_args rmq_put_one sets for its call and gives back
_ONE_FIELDS = (
    "n", "ntopics", "together", "now", "start", "want_index", "bodies", "body_at", "body_end",
    "topic_of", "topic_slot", "head_of", "queue_of", "born", "born_host", "flag", "uniq",
    "uniq_len", "heads", "head_end", "head_tags_code", "head_keys_at", "head_keys_len", "out",
    "cap",
)  # fmt: skip


def test_a_single_puts_entry_refuses_arguments_out_of_range(tmp_path):
    """``rmq_put_one`` (a single put's entry) refuses a queue that is not one of its topic's,
    a length out of range (lengths that would overflow the encoder's sums included) and a
    missing buffer with code 3, changing nothing; it gives the struct's fields a batch set
    back after a put and after a refusal; bodies that are not bytes go in place."""
    cfg = StoreConfig(max_message_size=4096)
    with MessageStore(str(tmp_path / "s"), cfg) as s:
        s.create_topic("T", 4)
        s.put_messages([Message("T", b"batch%d" % i, keys="k") for i in range(3)])
        call = s.putter.call
        ffi, lib, a = call.ffi, call.lib, call.args
        before = [getattr(a, f) for f in _ONE_FIELDS]
        first = s.put_messages([Message("T", bytearray(b"ab"), tags="t")])[0]
        assert s.get_message("T", first.queue_id, first.queue_offset).body == b"ab"
        assert [getattr(a, f) for f in _ONE_FIELDS] == before
        end = s.commitlog.max_offset
        o = ffi.new("int64_t[7]")
        big = b"B" * a.max_total
        ok = dict(head=b"", head_len=0, keys_at=0, keys_len=0, body=b"x", body_len=1)
        ok |= dict(uniq=b"U" * 32, uniq_len=32, queue=1, dst=ffi.NULL, room=0, out=o)

        def one(**bad):
            v = ok | bad
            return lib.rmq_put_one(
                a, T0, end, v["head"], v["head_len"], 0, v["keys_at"], v["keys_len"],
                v["body"], v["body_len"], v["uniq"], v["uniq_len"], v["queue"], 0, 0, 0,
                ffi.NULL, 1, v["dst"], v["room"], v["out"],
            )  # fmt: skip

        assert one(body=big, body_len=len(big)) == 1  # too large: rmq_put's own refusal
        assert a.bad_code == lib.RMQ_PUT_TOO_LARGE
        assert [getattr(a, f) for f in _ONE_FIELDS] == before
        for bad in (
            dict(queue=-1),
            dict(queue=4),
            dict(head=b"KEYS\x01k\x02", head_len=7, keys_at=5, keys_len=3),
            dict(keys_len=-1),
            dict(head_len=(1 << 29) + 1),
            dict(body_len=-1),
            dict(body=big, body_len=len(big) + 1),
            dict(body_len=2**63 - 60),
            dict(uniq_len=2**31 - 10),
            dict(body=ffi.NULL),
            dict(uniq=ffi.NULL),
            dict(room=-1),
            dict(room=4096),  # room without a place
            dict(dst=ffi.new("uint8_t[]", 8), room=-8),
            dict(out=ffi.NULL),
        ):
            assert one(**bad) == 3, bad
            assert [getattr(a, f) for f in _ONE_FIELDS] == before
        assert s.commitlog.max_offset == end
        r = s.put_messages([Message("T", memoryview(b"cd"), keys="k")])[0]
        assert r.commitlog_offset == end
        assert s.get_message("T", r.queue_id, r.queue_offset).body == b"cd"
        assert [m.body for m in s.query_by_key("T", "k")] == [
            b"cd",
            b"batch2",
            b"batch1",
            b"batch0",
        ]


@pytest.fixture(scope="module")
def one_call(tmp_path_factory):
    """A store's compiled put struct after a batch and a single put of topic T (4 queues),
    CommitLog segments of :data:`SEGMENT` bytes (the fuzzed starts roll into the next)."""
    cfg = StoreConfig(mapped_file_size_commit_log=SEGMENT)
    with MessageStore(str(tmp_path_factory.mktemp("one") / "s"), cfg) as s:
        s.create_topic("T", 4)
        s.put_messages([Message("T", b"batch", keys="k")] * 2)
        s.put_messages([Message("T", b"one")])
        yield s.putter.call


_HUGE = st.sampled_from([2**29, 2**29 + 1, 2**31 - 10, 2**31 - 1])


@settings(max_examples=300, deadline=None)
@given(
    head_len=st.one_of(st.integers(-3, 80), _HUGE),
    keys=st.tuples(st.integers(-3, 80), st.integers(-3, 80)),
    body_len=st.one_of(st.integers(-3, 400), st.sampled_from([2**40, 2**63 - 60])),
    uniq_len=st.one_of(st.integers(-3, 80), _HUGE),
    queue=st.integers(-2, 5),
    start=st.one_of(  # anywhere, or a record's length before a segment's end
        st.integers(0, 3 * SEGMENT), st.integers(1, 700).map(lambda d: 2 * SEGMENT - d)
    ),
    room=st.one_of(st.none(), st.integers(-3, 700)),
    seed=st.binary(min_size=1, max_size=8),
)
def test_a_single_puts_entry_takes_any_arguments(
    one_call, head_len, keys, body_len, uniq_len, queue, start, room, seed
):
    """Fuzzed under the sanitizer build (SAN_TESTS): whatever lengths, offsets, queue and
    place for the record (``dst`` of ``room`` bytes, a heap block of exactly that size, or
    none) it is handed (each buffer as long as its length says, where that is small enough to
    build), ``rmq_put_one`` refuses with 3 exactly what breaks its rules, returns one of
    rmq_put's codes otherwise, writes a record into ``dst`` only where it fits, and gives back
    every field it set."""
    ffi, lib, a = one_call.ffi, one_call.lib, one_call.args
    before = [getattr(a, f) for f in _ONE_FIELDS]

    def buf(n):
        return (seed * (n // len(seed) + 1))[:n] if 0 < n <= 4096 else b"?"

    keys_at, keys_len = keys
    o = ffi.new("int64_t[7]")
    # a heap block of exactly room bytes (one byte for a room of 0 or less): ASan sees a byte
    # written past it
    dst = ffi.NULL if room is None else ffi.new("uint8_t[]", max(room, 1))
    room = room or 0
    rc = lib.rmq_put_one(
        a, T0, start, buf(head_len), head_len, 7, keys_at, keys_len, buf(body_len), body_len,
        buf(uniq_len), uniq_len, queue, 3, 0, 0, ffi.NULL, 1, dst, room, o,
    )  # fmt: skip
    broken = (
        room < 0
        or not 0 <= queue < a.nslots
        or not 0 <= head_len <= 2**29
        or keys_at < 0
        or keys_len < 0
        or keys_at + keys_len > head_len
        or not 0 <= body_len <= a.max_total
        or not 0 <= uniq_len <= 2**29
    )
    assert rc == 3 if broken else rc in (0, 1, 2)
    assert [getattr(a, f) for f in _ONE_FIELDS] == before
    if rc == 0:
        assert (o[0], o[2]) == (o[3] - o[1], 3) and o[1] > 0
        if dst != ffi.NULL:  # the record, whole, in the room it had, in its segment
            assert o[4] == o[1] <= room and o[6] == 1
            assert start // SEGMENT == (o[3] - 1) // SEGMENT
            assert int.from_bytes(ffi.buffer(dst, 4), "big") == o[1]
    elif dst != ffi.NULL:  # nothing written
        assert ffi.buffer(dst, max(room, 1))[:] == bytes(max(room, 1))


def test_a_single_put_after_another_topics_batch_failed_names_its_own_topic(tmp_path):
    """A batch points the struct at its topics' tables before its last steps; one that fails
    after that (its buffers, a full memory) must not leave the next single put of the topic
    before it encoding its record with the batch's topic name and hash (the single put's
    tables are cached: ``_PutCall.set_topic``)."""
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 4)
        s.create_topic("Other", 1)
        s.put_messages([Message("T", b"a")])
        call = s.putter.call
        # what _batch_args does first for a batch of Other, which then fails
        _, tables = call.topic_tables(("Other",), (putmessage.plain_topic(s, "Other"),))
        call.set_varying((call.ffi.NULL,) * 10 + tuple(tables))
        r = s.put_messages([Message("T", b"b", keys="kb")])[0]
        rec = s.get_message("T", r.queue_id, r.queue_offset)
        assert (rec.topic, rec.body) == ("T", b"b")
        assert [m.body for m in s.query_by_key("T", "kb")] == [b"b"]
    scan = refreader.scan_commitlog(str(tmp_path / "s" / "commitlog"))
    assert [r["topic"] for r in scan["records"]] == ["T", "T"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-3, 12), min_size=1, max_size=16),
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(-5000, 10**7)),
        max_size=40,
    ),
    st.integers(0, 3),
    st.integers(1, 6),
    st.integers(0, 5),
    st.sampled_from([0, -1, T0]),
)
def test_compiled_index_step_equals_the_python_one(table, entries, start, count, slot_count, ts0):
    """The compiled step (``rmq_index_put_mapped``, the writer into a mapping with every chunk
    allocated, its chain heads read from the mapping's slots) against
    ``indexfile.index_step``: the same items, slots and header, from any slot table (values
    that are invalid, or above indexCount, included), from any entry on; nothing else of the
    mapping written."""
    flat = array("q", [v for e in entries for v in (e[0], e[1], T0 + e[2])])
    start = min(start, len(entries))
    n = len(entries) - start
    assume(n > 0)
    state = (count, slot_count, ts0, 77)
    py_slots = array("i", table)
    items, old, (c, s_count, begin_ts, begin_phy, ts, phy) = indexfile.index_step(
        py_slots, flat, start, n, state
    )
    base = indexfile.INDEX_HEADER_SIZE + 4 * len(table)
    mapping = bytearray(b"\x5a" * (base + (count + n + 1) * indexfile.INDEX_SIZE))
    mapping[40:base] = struct.pack(f">{len(table)}i", *table)
    chunks = bytearray([1]) * (len(mapping) // 4096 + 1)
    nslots = len(table)
    got = kernel.load().index_writer()(mapping, chunks, 4096, base, nslots, flat, start, n, state)
    assert got == (begin_ts, ts, begin_phy, phy, s_count, c)
    want = bytearray(b"\x5a" * len(mapping))
    want[:40] = indexfile.HEADER.pack(*got)
    want[40:base] = struct.pack(f">{len(table)}i", *py_slots)
    at = base + count * indexfile.INDEX_SIZE
    want[at : at + len(items)] = items
    assert mapping == want
    for slot in old:
        assert mapping[40 + 4 * slot : 44 + 4 * slot] == indexfile.SLOT.pack(py_slots[slot])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 3000),
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40), st.integers(-5000, 10**7)),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 30),
    st.sampled_from([0, -1, T0]),
    st.integers(0, 2**32 - 1),
    st.sampled_from([64, 4096]),
)
def test_in_place_index_writer_stores_the_steps_bytes(
    nslots, entries, count, ts0, allocated, chunk_size
):
    """``Kernel.index_writer()`` into a buffer standing for the file: with chunks missing it
    names them and stores nothing; once they are allocated it stores the items, slots and
    header :func:`indexfile.index_step` builds, at the file's positions, and nothing else."""
    flat = array("q", [v for e in entries for v in (e[0], e[1], T0 + e[2])])
    n = len(entries)
    items_base = indexfile.INDEX_HEADER_SIZE + 4 * nslots
    size = items_base + (count + n + 3) * indexfile.INDEX_SIZE
    nchunks = -(-size // chunk_size)
    chunks = bytearray(((allocated >> (c % 32)) & 1) for c in range(nchunks))
    table = [(7 * i) % (count + 2) for i in range(nslots)]
    state = (count, 3, ts0, 77)
    writer = kernel.load().index_writer()
    mapping = bytearray(b"\xa5" * size)
    mapping[40:items_base] = struct.pack(f">{nslots}i", *table)
    before = bytes(mapping)
    got = writer(mapping, chunks, chunk_size, items_base, nslots, flat, 0, n, state)
    if isinstance(got, list):  # chunks to allocate: nothing stored
        assert got and all(not chunks[c] for c in got)
        assert mapping == before
        for c in got:
            chunks[c] = 1
        got = writer(mapping, chunks, chunk_size, items_base, nslots, flat, 0, n, state)
        if isinstance(got, list):  # more than the writer names at once
            chunks[:] = b"\x01" * nchunks
            got = writer(mapping, chunks, chunk_size, items_base, nslots, flat, 0, n, state)
    py_table = array("i", table)
    items, old, (c, slot_count, begin_ts, begin_phy, ts, phy) = indexfile.index_step(
        py_table, flat, 0, n, state
    )
    assert got == (begin_ts, ts, begin_phy, phy, slot_count, c)
    want = bytearray(before)
    want[:40] = indexfile.HEADER.pack(*got)
    for slot in old:
        want[40 + 4 * slot : 44 + 4 * slot] = indexfile.SLOT.pack(py_table[slot])
    at = items_base + count * indexfile.INDEX_SIZE
    want[at : at + len(items)] = items
    assert mapping == want


def test_in_place_index_writer_refuses_writes_outside_the_mapping():
    """Items past the mapping's end, a slot table that overlaps the items and a chunk table
    shorter than the file are refused (OSError EIO: the put is undone) with nothing stored."""
    writer = kernel.load().index_writer()
    flat = array("q", [5, 100, T0])
    base = indexfile.INDEX_HEADER_SIZE + 4 * 16
    for size, items_base, nchunks, count in (
        (base + 20, base, 1, 1),  # item 1 ends past the mapping
        (base + 60, base - 4, 1, 1),  # the slot table runs into the items
        (base + 60, base, 0, 1),  # no chunk table
    ):
        mapping = bytearray(size)
        with pytest.raises(OSError):
            writer(mapping, bytearray(b"\x01" * nchunks), 4096, items_base, 16, flat, 0, 1,
                   (count, 0, 0, 0))  # fmt: skip
        assert mapping == bytearray(size)


def test_in_place_index_writer_refuses_counts_a_java_int_cannot_hold():
    """A hashSlotCount the put would carry past 2**31 - 1, or a negative one (a header that
    lies; the counts are Java ints), is refused (OSError EIO: the put is undone) with nothing
    stored; no geometry of a file over 2**31 - 1 bytes (whose indexCount could pass it) is
    taken."""
    writer = kernel.load().index_writer()
    base = indexfile.INDEX_HEADER_SIZE + 4 * 16
    flat = array("q", [5, 100, T0])
    for slot_count in (2**31 - 1, -1):
        mapping = bytearray(base + 200)
        with pytest.raises(OSError):
            writer(mapping, bytearray(b"\x01"), 4096, base, 16, flat, 0, 1, (1, slot_count, 0, 0))
        assert mapping == bytearray(len(mapping))
    got = writer(bytearray(base + 200), bytearray(b"\x01"), 4096, base, 16, flat, 0, 1,
                 (1, 2**31 - 2, 0, 0))  # fmt: skip
    assert got[4] == 2**31 - 1  # (the last count that fits)
    with pytest.raises(CorruptRecordError):
        indexfile.index_geometry(40 + 84 * 536_870_912)  # indexNum 2**31
    with pytest.raises(ValueError):
        indexfile.check_geometry(536_870_912, 2**31)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 40),
    st.integers(1, 60),
    st.integers(0, 2**32 - 1),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=12),
    st.booleans(),
)
def test_compiled_index_check_finds_what_numpy_finds(slots, count, seed, flips, noise):
    """``Kernel.index_check`` (``rmq_index_check``) against ``indexfile.structure_findings``
    on the slots and items of a file its own put path wrote, with bytes overwritten, and on
    bytes that are noise: the same findings, the first bad slot included."""
    import random

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        f = indexfile.IndexFile(os.path.join(d, "i"), slots, count + 1)
        entries = []
        for i in range(count - 1):
            entries += [rng.randrange(2**31), 100 * i + rng.randrange(3), T0 + 1000 * i]
        if entries:
            f.put_hashed(entries)
        f.close()
        data = bytearray(Path(d, "i").read_bytes())
    base = indexfile.INDEX_HEADER_SIZE
    body = bytearray(rng.randbytes(len(data) - base)) if noise else data[base:]
    for at, value in flips:
        body[at % len(body)] = value
    slot_raw = bytes(body[: 4 * slots])
    raw = bytes(body[4 * slots + indexfile.INDEX_SIZE : 4 * slots + indexfile.INDEX_SIZE * count])
    want = indexfile.structure_findings(slot_raw, raw, slots, count)
    assert kernel.load().index_check(slot_raw, raw, slots, count) == want
    if not flips and not noise:
        assert want.slot == -1 and not (want.negative or want.bad_prev or want.cross_bucket)


def test_compiled_index_check_refuses_short_buffers():
    k = kernel.load()
    with pytest.raises(ValueError):
        k.index_check(bytes(8), bytes(20), 4, 2)  # 4 slots need 16 bytes
    with pytest.raises(ValueError):
        k.index_check(bytes(16), bytes(19), 4, 2)  # item 1 needs 20 bytes
    with pytest.raises(ValueError):
        k.index_check(b"", b"", 0, 1)


def test_next_keys_are_next_manys_ids():
    """The put path's ids (``next_keys``, no hashes) are ``next_many``'s, the 16-bit counter's
    wrap included."""
    a, b = UniqKeyGenerator(), UniqKeyGenerator()
    b._prefix = a._prefix
    for counter in (0, 65000, 65530, 65535):
        a.counter = b.counter = counter
        for n in (1, 5, 300):
            assert a.next_keys(n, T0) == b.next_many(n, T0)[0]
            assert a.counter == b.counter


def test_a_single_puts_ids_are_next_manys(tmp_path):
    """A single put's UNIQ_KEY (taken by the compiled lane from the generator's state) is
    ``next_many``'s id for its born timestamp: the same time part, a time of a later month
    (the generator's month rolled), one before it, the 16-bit counter's wrap; the counter
    moves as ``next_many``'s."""
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 2)
        b = UniqKeyGenerator()
        b._prefix = s.uniq_keys.lane_state()[0]
        later = T0 + 7 + 86_400_000 * 40
        for counter in (0, 65535):
            s.uniq_keys.counter = b.counter = counter
            for born in (T0, T0, T0 + 7, later, T0, later + 1):
                r = s.put_messages([Message("T", b"x", born_timestamp=born)])[0]
                assert r.uniq_key == b.next_many(1, born)[0][0]
                assert s.uniq_keys.counter == b.counter
        assert s.putter.call is not None and s.putter.call.lane is not None  # (the lane's ids)


def test_large_bodies_are_read_in_place(tmp_path):
    """Batches of large bodies (read by rmq_put where they are, not from a joined copy) and of
    small ones write the same bytes as the general path."""
    big = [[Message("T", bytes([i % 251]) * (2500 + i), tags="t") for i in range(9)]]
    mixed = [[Message("Other", b"x" * (i * 900), keys=f"k{i}") for i in range(7)]]
    for batches in (big, mixed, big + mixed):
        root = tmp_path / str(len(os.listdir(tmp_path)))
        fast = _put_all(str(root / "c"), batches, True)
        assert fast == _put_all(str(root / "p"), batches, False)
        for sub in ("commitlog", "consumequeue"):
            assert _files(str(root / "c"), sub) == _files(str(root / "p"), sub)
        _read_back(str(root / "c"), [m for b in batches for m in b], fast)


def test_sync_flush_puts_take_the_compiled_path(tmp_path):
    """SYNC_FLUSH: the compiled path appends, the flush thread dispatches after the group
    commit, and the call returns with the records on disk: the same files as the general
    path's, and every put flushed when it returns."""
    rnd_batches = [
        [Message("T", b"s%d" % i, tags="a", keys=[f"k{i}", "x"]) for i in range(j % 5 + 1)]
        for j in range(12)
    ]
    fast = _put_all(str(tmp_path / "c"), rnd_batches, True, flush_disk_type="SYNC_FLUSH")
    general = _put_all(str(tmp_path / "p"), rnd_batches, False, flush_disk_type="SYNC_FLUSH")
    assert fast == general
    for sub in ("commitlog", "consumequeue"):
        assert _files(str(tmp_path / "c"), sub) == _files(str(tmp_path / "p"), sub)
    assert [b for _, b in _files(str(tmp_path / "c"), "index")] == [
        b for _, b in _files(str(tmp_path / "p"), "index")
    ]
    _read_back(str(tmp_path / "c"), [m for b in rnd_batches for m in b], fast)
    cfg = StoreConfig(flush_disk_type="SYNC_FLUSH")
    with MessageStore(str(tmp_path / "s"), cfg) as s:
        s.create_topic("T", 2)
        for i in range(5):
            res = s.put_messages([Message("T", b"m%d" % i)] * 3)
            assert s.putter.call is not None
            assert s.commitlog.flushed_where >= res[-1].commitlog_offset + res[-1].size
            assert s.get_message("T", res[-1].queue_id, res[-1].queue_offset).body == b"m%d" % i


def test_a_broker_put_the_lane_does_not_take_moves_what_the_general_path_moves(
    tmp_path, monkeypatch
):
    """Found by a review: a broker put (``put_internal``, no client rules) of a message the
    single put's lane does not take (tags or a list of keys UTF-8 cannot encode, a bytes
    KEYS value, a str body) went wrong where the general path would have: raised before the
    queue was chosen and the UNIQ_KEY taken (the general path chooses and takes them first),
    stored a bytes KEYS value the general path refuses, or left a queue's next offset in the
    topicQueueTable. Each now goes to the general path, and the store is left as the general
    path alone leaves it: the same error, round robin, UNIQ_KEY counter, topicQueueTable and
    CommitLog end, and the next put goes to the same queue, offset and id."""
    odd = [
        Message("T", b"x", tags="bad-\ud800"),
        Message("T", b"x", keys=["ok", "bad-\udfff"]),
        Message("T", b"x", keys=b"raw"),  # type: ignore[arg-type]
        Message("T", "a str body", queue_id=2),  # type: ignore[arg-type]
    ]

    def steps(s, mp):
        s.put_messages([Message("T", b"first")])
        seen = []
        for m in odd:
            try:
                r = put_internal(s, [m])[0]
                seen.append(("put", r.queue_id, r.queue_offset, r.uniq_key[-4:]))
            except Exception as exc:  # noqa: BLE001 (the general path's error, whatever it is)
                seen.append(type(exc).__name__)
            seen.append(_state(s))
        r = s.put_messages([Message("T", b"next")])[0]
        return seen, (r.queue_id, r.queue_offset, r.commitlog_offset, r.uniq_key[-4:])

    compiled, general = _both_paths(tmp_path, monkeypatch, steps)
    assert compiled == general


def test_a_put_interrupted_after_its_record_is_written_leaves_no_record(tmp_path):
    """Found by a review: an exception between the lane's write into the mapping and the
    CommitLog counting the record (a signal's KeyboardInterrupt there) left a valid record
    past the CommitLog's end, which recovery counted. The record is zeroed where it was
    written: the store reopens with the puts that succeeded only."""
    root = str(tmp_path / "s")
    with MessageStore(root) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"kept")])
        cl = s.commitlog
        real = cl.appended_in_place
        segment = cl.files.segments[0]

        def interrupted(end, now):
            cl.appended_in_place = real
            raise KeyboardInterrupt

        cl.appended_in_place = interrupted
        end = cl.max_offset
        with pytest.raises(KeyboardInterrupt):
            s.put_messages([Message("T", b"lost")])
        assert cl.max_offset == end and os.pread(segment.fd, 64, end) == bytes(64)
        s.put_messages([Message("T", b"after")])
    with MessageStore(root) as s:
        got = s.get_messages("G", "T", 0, 0, 10).messages
        assert [m.body for m in got] == [b"kept", b"after"]


def test_a_broker_put_of_a_body_that_is_not_bytes_is_refused(tmp_path):
    """Found by a review: a broker put (``put_internal``) of a body whose items are not
    single bytes (an ``array("i")``, a memoryview cast to ints) went to the general path,
    which wrote its item count as BODYLENGTH and TOTALSIZE while the record took its size in
    bytes: a damaged record. It is refused as the client's put refuses it, nothing written."""
    from array import array as arr

    from rmqfs.engine.errors import MessageIllegalError

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 1)
        end = s.commitlog.max_offset
        for body in (arr("i", [1, 2, 3]), memoryview(b"x" * 8).cast("i"), "text", 7):
            with pytest.raises(MessageIllegalError, match="body must be bytes"):
                put_internal(s, [Message("T", body)])  # type: ignore[arg-type]
        assert s.commitlog.max_offset == end
        put_internal(s, [Message("T", bytearray(b"ok"))])
    assert [r["body"] for r in refreader.read_commitlog(tmp_path / "s" / "commitlog")] == [b"ok"]
