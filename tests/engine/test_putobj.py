"""The put path's compiled reader of Message objects (engine/read/_putobj.c, ``vouch`` and
``keys_utf8``) is judged by the Python rules it stands in for.

* ``vouch`` may answer None for anything (the caller then checks and reads the batch in
  Python), but whenever it returns columns, every message passes every client rule
  (``validation.check_messages``), is a plain one (what ``putmessage.put_plain`` takes: no
  properties, sysFlag 0, every other field at its default) and the columns are the
  messages' very field objects. Hypothesis draws batches with odd values in every field
  (types that pass for others: bool, int and str subclasses, bytearray bodies; lists of
  keys; control characters, lone surrogates, characters outside the BMP; ints past a Java
  int; subclasses of Message; a deleted slot) to find a batch it vouches for wrongly.
* It does vouch for the common batch (so the judge above is not satisfied by a reader that
  never answers), and a tag not checked before waits for ``check_tags``.
* ``keys_utf8`` gives what ``putmessage._own_keys`` computes in Python, or False.
* A put of the same batches through ``put_messages`` with and without the reader leaves the
  same files, byte for byte.
* ``configure`` refuses a class whose fields are not slots and keeps what it had; a class
  changed after (a property set over a field) is no longer vouched for.

tests/engine/test_kernel_sanitize.py runs this file against the sanitizer build (the
Makefile's SAN_TESTS).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqfs.engine.store as store_mod
from rmqfs.engine.format.message import Message
from rmqfs.engine.read import kernel
from rmqfs.engine.service import putmessage
from rmqfs.engine.service import validation as V
from rmqfs.engine.store import MessageStore, StoreConfig
from stores import fix_uniq_keys

K = kernel.load()
pytestmark = pytest.mark.skipif(
    K is None or K.objects is None, reason="no compiled kernel or no _putobj in it"
)

NAMES = tuple(f.name for f in dataclasses.fields(Message))
PLAIN = putmessage._PLAIN_FIELDS  # (the order _putobj.c's enum of fields has)
OTHERS = tuple(n for n in NAMES if n not in PLAIN)
DEFAULTS = tuple(f.default for f in dataclasses.fields(Message) if f.name in OTHERS)


def readers():
    """(vouch, keys_utf8, vouch_row) configured as the store's put path configures them."""
    r = K.message_reader(Message, (*PLAIN, *OTHERS), DEFAULTS)
    assert r is not None
    return r


class Text(str):
    """A str subclass (its own hash and equality could run Python code)."""


class Int(int):
    pass


class SubMessage(Message):
    """A subclass may compute a field: never vouched for."""


_TEXT = st.one_of(
    st.sampled_from(["x\x01", "\x00", "\x1f", "\x7f", "\x9f", "\ud800", "a\udfffb", "é\x85"]),
    st.sampled_from(["", "a", "k1 k2", " ", "é", "😀 x", "\xa0", "\u2028"]),
    st.text(max_size=6),
    st.builds(Text, st.sampled_from(["a", "b"])),
)
FIELDS = {
    "topic": st.sampled_from(["T", "U", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", 5]),
    "body": st.sampled_from([b"x", b"", bytearray(b"y"), memoryview(b"z"), "text", None]),
    "tags": st.one_of(st.none(), _TEXT, st.just(["list"]), st.just(0)),
    "keys": st.one_of(st.none(), _TEXT, st.sampled_from([["a", "b"], [""], ("t",), 7, [], b"k"])),
    "properties": st.sampled_from([None, {}, {"a": "b"}, "text"]),
    "sharding_key": st.sampled_from([None, "s", "", 5]),
    "queue_id": st.sampled_from([None, 0, 3, -1, 2**40, True, Int(1), 1.5, "1"]),
    "flag": st.sampled_from([0, 1, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1, 2**80, True, Int(0)]),
    "sys_flag": st.sampled_from([0, 4, 2**31, 1.0, "0", False, Int(0)]),
    "born_timestamp": st.sampled_from([None, 0, 1_700_000_000_000, -1]),
    "born_host": st.sampled_from([None, (b"\x7f\x00\x00\x01", 1)]),
    "delay_level": st.sampled_from([0, 3, False, None, Int(0)]),
    "compress": st.sampled_from([None, True, False]),
    "wait_store_msg_ok": st.sampled_from([True, False, 1]),
    "deliver_time_ms": st.sampled_from([None, 1_700_000_000_000]),
    "delay_time_ms": st.sampled_from([None, 0]),
    "delay_time_sec": st.sampled_from([None, 5]),
}


_PLAIN_VARIANTS = {
    "tags": st.sampled_from([None, "", "TagA"]),
    "keys": st.one_of(
        st.none(), st.sampled_from(["", "k1 k2", "é 😀"]), st.text("ab ", max_size=3)
    ),
    "queue_id": st.sampled_from([None, 0, 3]),
    "flag": st.sampled_from([0, 7, -(2**31), 2**31 - 1]),
    "topic": st.sampled_from(["T", "U"]),
}


@st.composite
def batches(draw):
    """Up to 8 messages: plain ones with the values a producer gives, and up to two odd
    ones (1 or 2 fields drawn from FIELDS, a subclass, a deleted slot)."""
    n = draw(st.integers(1, 8))
    odd = draw(st.sets(st.integers(0, n - 1), max_size=2))
    out = []
    for i in range(n):
        fields: dict = {"topic": "T", "body": b"b", "tags": "TagA"}
        for name in draw(st.sets(st.sampled_from(sorted(_PLAIN_VARIANTS)), max_size=3)):
            fields[name] = draw(_PLAIN_VARIANTS[name])
        kind = Message
        if i in odd:
            for name in draw(st.sets(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=2)):
                fields[name] = draw(FIELDS[name])
            kind = draw(st.sampled_from([Message, Message, Message, SubMessage]))
        m = kind(**fields)
        if i in odd and draw(st.integers(0, 20)) == 0:
            delattr(m, draw(st.sampled_from(NAMES)))
        out.append(m)
    return out


def _judge(msgs) -> bool:
    """Whether vouch vouched for ``msgs``; when it did, that every rule lets them through,
    that they are plain and that the columns are their fields. ``vouch_row`` (a single
    put's) of each message alone answers as ``vouch`` of it alone, with its fields."""
    vouch, _, vouch_row = readers()
    V.check_tags("TagA")  # (checked: vouch may let it through)
    for m in msgs if isinstance(msgs, list) else ():
        row = vouch_row(m, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS)
        one = vouch([m], V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS)
        assert (row is None) == (one is None)
        if row is not None:
            assert type(row) is tuple and len(row) == len(PLAIN)
            assert all(v is getattr(m, name) for v, name in zip(row, PLAIN))
            assert all(v is c[0] for v, c in zip(row, one))
    cols = vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS)
    if cols is None:
        return False
    V.check_messages(msgs)  # raises if vouch let a broken rule through
    assert len(cols) == len(PLAIN)
    for name, col in zip(PLAIN, cols):
        assert type(col) is tuple and len(col) == len(msgs)
        assert all(v is getattr(m, name) for v, m in zip(col, msgs)), name
    for m in msgs:
        assert type(m) is Message
        assert type(m.topic) is str and type(m.body) is bytes
        assert m.tags is None or type(m.tags) is str
        assert m.keys is None or type(m.keys) is str
        assert m.queue_id is None or type(m.queue_id) is int
        assert type(m.flag) is int and -(2**31) <= m.flag < 2**31
        assert type(m.sys_flag) is int and m.sys_flag == 0
        assert m.properties is m.sharding_key is m.born_timestamp is m.born_host is None
        assert tuple(getattr(m, n) for n in OTHERS) == DEFAULTS
    return True


@settings(max_examples=500, deadline=None)
@given(batches())
def test_vouch_only_for_batches_every_rule_lets_through(msgs):
    _judge(msgs)


def _odd_values() -> list[tuple[str, object]]:
    """Every (field, value) of FIELDS' sampled values, and of _TEXT's for tags and keys."""
    out = []
    for name, strategy in FIELDS.items():
        for v in _samples(strategy):
            out.append((name, v))
    return out


def _samples(strategy) -> list:
    """The values a strategy samples from (sampled_from and just, through one_of)."""
    wrapped = getattr(strategy, "wrapped_strategy", strategy)
    if hasattr(wrapped, "elements"):
        return list(wrapped.elements)
    if hasattr(wrapped, "value"):
        return [wrapped.value]
    return [v for sub in getattr(wrapped, "original_strategies", ()) for v in _samples(sub)]


@pytest.mark.parametrize(("field", "value"), _odd_values())
def test_vouch_judged_for_each_odd_value_alone(field, value):
    """Each odd value of each field, alone in one message of a plain batch: vouched for
    only when the rules let it through (the exhaustive half of the judge above)."""
    odd = Message("T", b"y", tags="TagA")
    setattr(odd, field, value)
    vouched = _judge([Message("T", b"x", tags="TagA", keys="k"), odd])
    if field in ("sys_flag", "properties", "sharding_key", "born_timestamp", "born_host"):
        assert not vouched or value is None or (value == 0 and type(value) is int)


def test_vouch_answers_for_the_common_batch():
    """A producer's batch (a checked tag, keys of its own, queues given or not) is vouched
    for; a tag never checked is not, until ``check_tags`` has let it through."""
    vouch = readers()[0]
    V.check_tags("TagA")
    msgs = [
        Message("T", b"body %d" % i, tags="TagA", keys=f"order-{i}", queue_id=i % 2 or None)
        for i in range(300)
    ]
    cols = vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS)
    assert cols is not None and cols[3][7] == "order-7" and cols[4][:2] == (None, 1)
    fresh = "never-seen-%d" % os.getpid()
    msgs[5] = Message("T", b"x", tags=fresh)
    assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is None
    V.check_tags(fresh)
    assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is not None
    assert vouch(tuple(msgs), V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is None  # a list only
    assert vouch([], V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is None


_KEYS = st.one_of(
    st.none(),
    st.text(max_size=8),
    st.sampled_from(["", " ", "a b  c", "\x00", "é ü", "😀", "\udc80", Text("x y")]),
    st.sampled_from([["a", "b"], 5, b"k"]),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_KEYS, max_size=12), st.booleans())
def test_keys_utf8_is_own_keys(keys, as_list):
    """``keys_utf8`` of a KEYS column gives what ``_own_keys`` gives in Python (the UTF-8
    values, their lengths, -1 for none, the spaces), None when no message has keys, or
    False where it cannot vouch (then Python computes it)."""
    keys_utf8 = readers()[1]
    column = list(keys) if as_list else tuple(keys)
    got = keys_utf8(column)
    if got is False:
        assert any(k is not None and not V.tags_keys_clean((), [k]) for k in keys)
        return
    try:
        want = putmessage._own_keys(tuple(keys))
    except (TypeError, UnicodeEncodeError):  # pragma: no cover - vouched values encode
        raise AssertionError(f"keys_utf8 vouched for {keys!r}") from None
    if want is None:
        assert got is None
        return
    assert got is not None
    blob, lens, spaces = got
    assert (blob, array("i", lens), spaces) == (want[0], array("i", want[1]), want[2])


def test_keys_utf8_refuses_what_is_not_a_column():
    keys_utf8 = readers()[1]
    assert keys_utf8("a b") is False
    assert keys_utf8(iter(["a"])) is False
    assert keys_utf8(()) is None


def _put_all(root: Path, batches, with_reader: bool) -> dict[str, bytes]:
    """The store files (but for config, checkpoint, lock and abort) after putting
    ``batches`` into a new store, the clock and the UNIQ_KEYs fixed."""
    clock = itertools.count(1_795_305_347_998, 1300)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_mod.time, "time", lambda: next(clock) / 1000)
        if not with_reader:
            mp.setattr(putmessage.PutService, "readers", property(lambda self: None))
        cfg = StoreConfig(mapped_file_size_commit_log=4096, max_hash_slot_num=64, max_index_num=64)
        with MessageStore(str(root), cfg) as s:
            fix_uniq_keys(s, 65533)
            s.create_topic("T", 4)
            s.create_topic("U", 2)
            for b in batches:
                s.put_messages(b)
            assert s.putter.call is not None  # the compiled path ran
    out = {}
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    indexes = [p for p in files if p.parent.name == "index"]  # (named by the wall clock)
    for p in files:
        rel = str(p.relative_to(root))
        if p in indexes:
            rel = f"index #{indexes.index(p)}"
        if not rel.startswith(("config", "checkpoint", "lock", "abort")):
            out[rel] = p.read_bytes()
    return out


def test_a_put_with_the_reader_writes_what_one_without_it_writes(tmp_path):
    """The same batches (keys, no keys, explicit queues, two topics, a fresh tag, one that
    the reader leaves to Python: a list of keys) put with the reader and without it leave
    the same CommitLog, ConsumeQueue and IndexFile bytes (the store's clock and UNIQ_KEYs
    fixed)."""
    V.check_tags("TagA")
    batches = [
        [Message("T", b"a%d" % i, tags="TagA", keys=f"k-{i}") for i in range(40)],
        [Message("T", b"b%d" % i, tags="TagB-%d" % os.getpid(), queue_id=i % 4) for i in range(20)],
        [
            Message("U" if i % 3 else "T", b"c%d" % i, keys="x y" if i % 2 else None)
            for i in range(30)
        ],
        [Message("T", b"d%d" % i, keys=["a", "b"]) for i in range(10)],
        [Message("T", b"e%d" % i, tags="TagA", keys="é 😀") for i in range(10)],
    ]
    with_it = _put_all(tmp_path / "with", batches, True)
    without = _put_all(tmp_path / "without", batches, False)
    assert with_it.keys() == without.keys()
    assert any(k.startswith("commitlog") for k in with_it)
    for name in with_it:
        assert with_it[name] == without[name], name


def test_configure_keeps_its_class_when_refused_and_a_changed_class_is_not_vouched_for():
    vouch = readers()[0]

    @dataclasses.dataclass
    class NoSlots:
        topic: str = "T"

    with pytest.raises(TypeError, match="not a slot"):
        K.message_reader(NoSlots, (*PLAIN, *OTHERS), DEFAULTS)
    with pytest.raises(ValueError):
        K.message_reader(Message, PLAIN[:5], ())
    V.check_tags("TagA")
    msgs = [Message("T", b"x", tags="TagA"), Message("T", b"y")]
    assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is not None

    @dataclasses.dataclass(slots=True)
    class Other:
        topic: str
        body: bytes
        tags: object = None

    other_names = tuple(f.name for f in dataclasses.fields(Message))
    with pytest.raises(TypeError):
        K.message_reader(Other, other_names, DEFAULTS)
    assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is not None

    slot = Message.__dict__["tags"]
    try:
        Message.tags = property(lambda self: "Computed")  # type: ignore[assignment,method-assign]
        assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is None
    finally:
        Message.tags = slot  # type: ignore[method-assign]
    assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is not None


def test_python_code_run_during_a_call_changes_nothing_it_uses():
    """Found by a review (under the sanitizer build: reads of freed memory, and a crash of the
    normal build): a set whose entry's ``__eq__`` runs Python code that empties the batch, and
    a garbage collection during the call whose finalizer shrinks it, make ``vouch`` answer
    None, never read what was freed; ``check_tags`` keeps exact ``str`` only, so the put
    path's own set runs no Python code in a lookup."""
    import gc

    vouch = readers()[0]
    hook = []

    class Tag(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            while hook:
                hook.pop()()
            return str.__eq__(self, other)

    msgs = [Message("T", b"x", tags="TagZ", keys="order-%d" % i) for i in range(64)]
    hook.append(msgs.clear)
    assert vouch(msgs, {Tag("TagZ")}, V.NOT_ALLOWED_SEND_TOPICS) is None
    assert msgs == []

    # a single message's fields deleted while vouch_row looks its tag up: it answers with the
    # values it read (held), never a freed one
    one = Message("T", b"body", tags="TagZ", keys="k")
    hook.append(lambda: [delattr(one, n) for n in ("topic", "body", "tags", "keys")])
    row = readers()[2](one, {Tag("TagZ")}, V.NOT_ALLOWED_SEND_TOPICS)
    assert row is not None and row[:4] == ("T", b"body", "TagZ", "k")
    assert not hasattr(one, "topic")

    msgs = [Message("T", b"x", keys="order-%d" % i) for i in range(300)]

    class Bomb:
        def __del__(self):
            del msgs[2:]

    gc.collect()
    gc.disable()
    b = Bomb()
    b.me = b  # cyclic garbage with a finalizer
    del b
    old = gc.get_threshold()
    gc.set_threshold(1)
    gc.enable()
    try:
        got = vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS)
    finally:
        gc.set_threshold(*old)
    assert got is None or len(got[0]) == len(msgs)

    V.check_tags(Tag("TagY"))
    assert [type(t) for t in V.CHECKED_TAGS if t == "TagY"] == [str]


def test_a_class_that_reads_its_fields_through_python_is_not_vouched_for():
    """A ``__getattribute__`` set on Message (as a property over a field) is what the Python
    path reads through: the compiled reader, which reads the slots, then vouches for nothing
    (found by a review: it vouched for a topic the override turned into a reserved one)."""
    vouch = readers()[0]
    msgs = [Message("T", b"x"), Message("T", b"y")]
    assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is not None

    def ga(self, name):
        v = object.__getattribute__(self, name)
        return "SCHEDULE_TOPIC_XXXX" if name == "topic" else v

    Message.__getattribute__ = ga  # type: ignore[method-assign]
    try:
        assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is None
    finally:
        del Message.__getattribute__  # type: ignore[attr-defined]
    assert vouch(msgs, V.CHECKED_TAGS, V.NOT_ALLOWED_SEND_TOPICS) is not None


# -- the single put's lane (``_putobj.Lane``) ------------------------------------------------


def _lane_store(tmp_path):
    """A store with topic T (4 queues) that has put a message to each (so the lane exists
    and knows every queue's next offset), its lane and the topic's PlainTopic."""
    s = MessageStore(str(tmp_path / "lane"))
    s.create_topic("T", 4)
    for _ in range(4):
        s.put_messages([Message("T", b"first", tags="TagA", keys="k")])
    call = s.putter.call
    assert call is not None and call.lane is not None
    return s, call.lane, putmessage.plain_topic(s, "T")


def _commitlog_bytes(s):
    return b"".join(
        p.read_bytes() for p in sorted((Path(s.root) / "commitlog").iterdir()) if p.is_file()
    )


def test_the_lane_answers_a_code_and_changes_nothing_for_what_it_is_handed_wrongly(tmp_path):
    """``Lane.put`` trusts nothing it is handed: rows of the wrong shape or types (a list,
    str subclasses, a float queueId, a flag past a Java int, a non-buffer body), a born host
    of the wrong size, a window that is not one (not a tuple, a read-only buffer, a position
    or room past its buffer, negative), an info of another topic's queue count: each answers
    ``(code, a, b)`` or raises TypeError, and neither the CommitLog's bytes, nor the round
    robin, nor the UNIQ_KEY counter, nor the topicQueueTable moved. Run under the sanitizer
    build too (tests/engine/test_kernel_sanitize.py)."""
    import mmap

    s, lane, info = _lane_store(tmp_path)
    try:
        start = s.commitlog.max_offset
        before = (
            _commitlog_bytes(s),
            dict(s.putter.round_robin),
            s.uniq_keys.counter,
            dict(s.putter.queue_offsets),
        )
        good = ("T", b"body", "TagA", "k", None, None, None, None, 0)

        class S(str):
            pass

        rows = [
            ["T", b"body", None, None, None, None, None, None, 0],  # a list
            good[:8],  # too short
            (S("T"), *good[1:]),
            (*good[:2], S("TagA"), *good[3:]),
            (*good[:3], S("k"), *good[4:]),
            (*good[:3], ["k"], *good[4:]),
            (*good[:4], 1.0, *good[5:]),
            (*good[:4], 2**70, *good[5:]),
            (*good[:4], -1, *good[5:]),
            (*good[:4], 4, *good[5:]),
            (*good[:5], b"shard", *good[6:]),
            (*good[:6], 1.5, *good[7:]),
            (*good[:6], 2**64, *good[7:]),
            (*good[:8], 2**31),
            (*good[:8], -(2**31) - 1),
            (*good[:8], None),
            (good[0], "not bytes", *good[2:]),
            (good[0], 12345, *good[2:]),
            (good[0], None, *good[2:]),
        ]
        answers = []
        for row in rows:
            answers.append(lane.put(row, None, info, 1, start, None, True))
        ro = mmap.mmap(-1, 4096)
        ro_view = memoryview(b"x" * 4096)
        windows = [
            [ro, 0, 10],
            (ro, 0),
            (ro_view, 0, 100),
            (ro, 4097, 10),
            (ro, 0, 4097),
            (ro, 100, 4000),
            (ro, -1, 10),
            (ro, 0, -1),
            (b"not a mapping", 0, 10),
            (ro, 2**70, 1),
        ]
        for w in windows:
            answers.append(lane.put(good, None, info, 1, start, w, True))
        for host in (b"1234567", b"123456789", "12345678", bytearray(8)):
            answers.append(lane.put(good, host, info, 1, start, None, True))
        other = (info[0], info[1] + 1, *info[2:])
        answers.append(lane.put(good, None, other, 1, start, None, True))
        answers.append(lane.put(good, None, (4,), 1, start, None, True))
        answers.append(lane.put(good, None, info, -1, start, None, True))
        answers.append(lane.put(good, None, info, 1, -5, None, True))
        for a in answers:
            assert isinstance(a, tuple) and len(a) == 3 and a[0] < 0, a
        for bad in ((), (good,), (good, None, info, 1, start, None, True, 1)):
            with pytest.raises(TypeError):
                lane.put(*bad)
        ro.close()
        assert before == (
            _commitlog_bytes(s),
            dict(s.putter.round_robin),
            s.uniq_keys.counter,
            dict(s.putter.queue_offsets),
        )
        # the store goes on: the next put is the one after the first four, on the queue the
        # round robin had before the refusals
        r = s.put_messages([Message("T", b"second", tags="TagA", keys="k")])[0]
        assert (r.commitlog_offset, r.queue_id, r.queue_offset) == (start, 0, 1)
    finally:
        s.close()


def test_the_lane_adds_index_entries_only_to_a_buffer_it_can_trust(tmp_path):
    """``Lane.put``'s index argument (``IndexService.lane_state()``: an exact bytearray of
    native int64 entries and three limits): where it is not one (another shape, a subclass,
    limits of another type or range, a buffer that holds no whole entry or none at all, one
    exported, one whose last entry is at or past the put's record, more entries than ``few``)
    the put's entries come back as a list and the buffer is as it was; otherwise they are
    added to its end and the answer says whether they are due. Run under the sanitizer build
    too (tests/engine/test_kernel_sanitize.py)."""
    s, lane, info = _lane_store(tmp_path)
    try:
        start = s.commitlog.max_offset
        good = ("T", b"body", "TagA", "k", None, None, None, None, 0)
        entry = array("q", [7, start - 1, 1]).tobytes()  # (a record before the put's)

        class Sub(bytearray):
            pass

        def put(state):
            r = lane.put(good, None, info, 1, start, None, state)  # (into the struct's buffer)
            assert isinstance(r, tuple) and len(r) == 8, r
            return r[7]

        ahead = bytearray(array("q", [7, start, 1]).tobytes())
        for state in [
            (bytearray(entry), 64, 256),
            (bytearray(entry), 64, 256, 100, 1),
            [bytearray(entry), 64, 256, 100],
            (Sub(entry), 64, 256, 100),
            (bytearray(entry), -1, 256, 100),
            (bytearray(entry), 64.0, 256, 100),
            (bytearray(entry), 2**70, 256, 100),
            (bytearray(entry), 64, 2**70, 100),
            (bytearray(entry), 64, 256, -1),
            (bytearray(entry), 1, 256, 100),  # (two entries: a UNIQ_KEY and a key)
            (bytearray(entry[:23]), 64, 256, 100),
            (bytearray(entry + entry[:8]), 64, 256, 100),
            (bytearray(), 64, 256, 100),
            (ahead, 64, 256, 100),
        ]:
            before = bytes(state[0])
            got = put(state)
            assert isinstance(got, list) and len(got) == 6 and got[1::3] == [start, start]
            assert bytes(state[0]) == before
        held = bytearray(entry)
        with memoryview(held):  # (exported: it cannot grow)
            assert isinstance(put((held, 64, 256, 100)), list)
        assert bytes(held) == entry
        for ms, due in ((100, False), (0, True)):
            buf = bytearray(entry)
            assert put((buf, 64, 256, ms)) is due
            added = array("q", bytes(buf))
            assert len(added) == 9 and list(added[4::3]) == [start, start]
            assert list(added[5::3]) == [1, 1]  # (their store time: now)
        # the oldest's store time as far back as an int64 goes (a damaged store's): due, as
        # Python's rule says, with no overflow on the way (the sanitizer build's UBSan)
        buf = bytearray(array("q", [7, start - 1, -(2**63)]).tobytes())
        assert put((buf, 64, 256, 100)) is True
        buf = bytearray(entry * 255)  # one more makes 256 entries or more: due
        assert put((buf, 64, 256, 100)) is True and len(buf) == 24 * 257
        assert isinstance(put(True), list) and put(None) is None and put(False) is None
        # found by a review: a memory error after the entries were added (the answer's
        # allocations, a shrink back that allocates too) left them there for a put that
        # failed; every run of failing allocations: added and answered, or neither
        testcapi = pytest.importorskip("_testcapi")
        if hasattr(testcapi, "set_nomemory"):
            for k, width in [(k, w) for w in (1, 2, 3, 6) for k in range(40)]:
                buf = bytearray(entry)
                testcapi.set_nomemory(k, k + width)
                try:
                    got = lane.put(good, None, info, 1, start, None, (buf, 64, 256, 100))
                except MemoryError:
                    got = None
                finally:
                    testcapi.remove_mem_hooks()
                if got is None:
                    assert bytes(buf) == entry, (k, width)
                elif isinstance(got[7], bool):
                    assert len(buf) == 72, (k, width)
                else:
                    assert bytes(buf) == entry and len(got[7]) == 6, (k, width)
    finally:
        s.close()


def test_the_lane_refuses_a_struct_it_cannot_trust_at_construction():
    """``new_lane(...)`` (the type itself cannot be called): a struct that is not a writable
    buffer of exactly one ``rmq_put_args`` (an address as an int, a read-only or short
    buffer), a result class that is not a bare tuple subclass, a UNIQ_KEY prefix that is not
    short ASCII, a state that is not three int64: TypeError, ValueError or BufferError, no
    lane. A lane holds its owner (what holds the arrays the struct points at): the collector
    frees the two together."""
    import collections
    import gc
    import weakref

    new_lane = K.objects.new_lane
    with pytest.raises(TypeError):
        K.objects.Lane()
    struct = K.ffi.new("rmq_put_args *")
    size = len(K.ffi.buffer(struct))
    state = array("q", [0, 0, 0])

    class Owner:
        pass

    owner = Owner()
    ok = (owner, K.ffi.buffer(struct), {}, {}, {}, b"S\x01", putmessage.PutResult, "ABCD", state)
    owner.lane = new_lane(*ok)  # (what is refused below is refused for the one value changed)

    def lane(i, v):
        return new_lane(*ok[:i], v, *ok[i + 1 :])

    for bad in (1, id(struct), bytes(size), bytearray(size - 1), bytearray(size + 1)):
        with pytest.raises((TypeError, ValueError, BufferError)):
            lane(1, bad)

    class WithDict(tuple):
        pass

    for bad in (list, WithDict, int, collections.OrderedDict):
        with pytest.raises(TypeError):
            lane(6, bad)
    for prefix in ("é" * 4, "A" * 49):
        with pytest.raises(ValueError):
            lane(7, prefix)
    for st_ in (array("q", [0, 0]), array("i", [0] * 6), bytearray(24), b"x" * 24):
        with pytest.raises((TypeError, BufferError)):
            lane(8, st_)
    gone = weakref.ref(owner)
    owner = ok = None  # type: ignore[assignment]
    gc.collect()
    assert gone() is None  # (the owner and its lane, a cycle, collected)


def test_a_single_put_of_a_tag_new_to_a_full_tags_cache_is_put(tmp_path):
    """Found by a review: the tags cache held at most 4,096 items and stopped taking more,
    while the lane asks for a tag's item in it, so a single put of a tag new to a full cache
    asked again forever under the put lock. A full cache starts again; the put is made."""
    s, _lane, _info = _lane_store(tmp_path)
    try:
        cache = s.putter.tags_cache
        for i in range(4096 - len(cache)):
            cache[f"filler-{i}"] = (b"TAGS\x01f\x02", 0)
        r = s.put_messages([Message("T", b"x", tags="new-tag")])[0]
        assert "new-tag" in cache and len(cache) <= 4096
        got = s.get_message("T", r.queue_id, r.queue_offset)
        assert got.tags == "new-tag" and got.body == b"x"
    finally:
        s.close()


def test_a_single_put_takes_the_int_values_the_rules_take(tmp_path):
    """Found by a review: the rules take a bool or an IntEnum for a flag, a born timestamp or
    a queueId (``validation.check_numbers``, ``check_queue_id``), and the lane, which reads
    exact ints, made such a put fail; they are put with their values, as the general path
    puts them (the same CommitLog bytes, the UNIQ_KEYs fixed)."""
    import enum

    class Q(enum.IntEnum):
        TWO = 2

    batches = [
        [Message("T", b"a", flag=True)],
        [Message("T", b"b", queue_id=Q.TWO)],
        [Message("T", b"c", born_timestamp=Q.TWO, flag=Q.TWO)],
        [Message("T", b"d", born_timestamp=True)],
    ]
    with_it = _put_all(tmp_path / "with", batches, True)
    without = _put_all(tmp_path / "without", batches, False)
    assert with_it == without and any(k.startswith("commitlog") for k in with_it)


def test_the_lane_takes_ids_from_the_generator_in_place(tmp_path):
    """Found by a review: the lane was bound to the generator the store had when it was
    made, so a generator put in its place (tests/stores.py's ``fix_uniq_keys``) was rolled
    while the lane read the old one's state: ids of the old prefix, and a born time of a
    later month asked for a roll forever. The lane follows the store's generator."""
    import time

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"x")])
        fix_uniq_keys(s, 100)
        prefix = s.uniq_keys.lane_state()[0]
        r = s.put_messages([Message("T", b"x")])[0]
        assert r.uniq_key.startswith(prefix) and r.uniq_key.endswith("0064")
        later = int(time.time() * 1000) + 40 * 86_400_000
        r = s.put_messages([Message("T", b"y", born_timestamp=later)])[0]
        assert r.uniq_key.startswith(prefix) and s.uniq_keys.counter == 102


def test_a_month_whose_next_begins_before_a_time_in_it_still_rolls(tmp_path):
    """Found by a review: where clocks go back across a month's first midnight (St. John's,
    2009-11-01 00:01 -> 2009-10-31 23:01), a time after the change is in October by local
    time while November's start is already past: the month's next start was before the time,
    and a single put of it asked for a roll forever. The next start is kept past the time; the
    id counts from the month's start, as every call did before."""
    import subprocess
    import sys

    from conftest import SRC_PATH

    script = (
        "import sys\n"
        "from rmqfs.engine.store import Message, MessageStore\n"
        "from rmqfs.engine.format.uniqkey import UniqKeyGenerator\n"
        "born = 1257043500000\n"
        "g = UniqKeyGenerator()\n"
        "g.roll_month(born)\n"
        "assert g.lane_state()[1][2] > born, g.lane_state()[1]\n"
        "with MessageStore(sys.argv[1]) as s:\n"
        "    s.create_topic('T', 1)\n"
        "    r = s.put_messages([Message('T', b'x', born_timestamp=born)])[0]\n"
        "    g2 = UniqKeyGenerator()\n"
        "    g2._prefix = s.uniq_keys.lane_state()[0]\n"
        "    g2.counter = s.uniq_keys.counter - 1\n"
        "    assert r.uniq_key == g2.next_many(1, born)[0][0], r.uniq_key\n"
        "print('ok')\n"
    )
    env = dict(os.environ, TZ="America/St_Johns", PYTHONPATH=SRC_PATH)
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "s")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_put_that_runs_out_of_memory_leaves_no_record_past_the_end(tmp_path):
    """Found by a review: a memory error after ``rmq_put_one`` wrote the record into the
    mapping (building the ids, the PutResult, the entries) failed the put but left a valid
    record past the CommitLog's end, which recovery counted after a restart, even a clean
    one. Every allocation of the lane's call made to fail in turn: each put either succeeds
    or leaves nothing past the end (the bytes there are zeros, no index entry waits for it),
    and the store reopens with exactly the puts that succeeded."""
    testcapi = pytest.importorskip("_testcapi")
    if not hasattr(testcapi, "set_nomemory"):
        pytest.skip("no _testcapi.set_nomemory")
    root = str(tmp_path / "s")
    acked = []
    failed = 0
    with MessageStore(root) as s:
        s.create_topic("T", 1)
        for _ in range(2):  # (the second's entries wait: the lane adds the next ones to them)
            s.put_messages([Message("T", b"kept", tags="TagA", keys="k")])
            acked.append(b"kept")
        assert s.index_service.pending_count == 2
        call = s.putter.call
        real = call.lane
        segment = s.commitlog.files.segments[0]
        for k, width in [(k, w) for w in (1, 2, 4) for k in range(40)]:

            class Failing:
                def put(self, *a, k=k, width=width):
                    testcapi.set_nomemory(k, k + width)  # (a run of allocations fails)
                    try:
                        return real.put(*a)
                    finally:
                        testcapi.remove_mem_hooks()

            call.lane = Failing()
            body = b"m%d" % k
            try:
                s.put_messages([Message("T", body, tags="TagA", keys="k")])
                acked.append(body)
            except MemoryError:
                failed += 1
            finally:
                call.lane = real
            end = s.commitlog.max_offset
            assert os.pread(segment.fd, 8, end - segment.start) == bytes(8), k
            # nor index entries of it waiting (the lane adds them to those that wait)
            assert s.index_service.end_phy_offset < end, k
            assert s.query_by_key("T", "k")[0].commitlog_offset < end, k
    assert failed > 5  # (the allocations after the write among them)
    with MessageStore(root) as s:
        got, offset = [], 0
        while offset < s.max_offset("T", 0):  # (32 messages a call at most)
            r = s.get_messages("G", "T", 0, offset, 100)
            got += r.messages
            offset = r.next_begin_offset
        assert [m.body for m in got] == acked
