"""The message rules of engine/service/validation.py, without a mount: each rule refuses its whole
class (not one instance), the store stays untouched by a refused put, and the lookup-name
parser accepts only canonical decimals."""

import errno
import json
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqfs.engine.errors import (
    InvalidNameError,
    MessageIllegalError,
    MessageTooLargeError,
    PutMessageError,
)
from rmqfs.engine.format.config import TopicConfig, validate_group_name, validate_topic_name
from rmqfs.engine.read import jsonline as J
from rmqfs.engine.service import validation as V
from rmqfs.engine.store import Message, MessageStore, StoreConfig
from rmqfs.engine.tools.verify import verify_store
from stores import put_internal

CONTROL = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]


@pytest.fixture
def store(tmp_path):
    with MessageStore(str(tmp_path / "s"), StoreConfig(mapped_file_size_commit_log=64 * 1024)) as s:
        s.create_topic("T", 4)
        yield s


def _refused(store, msg, match=None):
    end = store.commitlog.max_offset
    with pytest.raises(MessageIllegalError, match=match) as info:
        store.put_messages([Message("T", b"first"), msg])  # one bad message: none stored
    assert info.value.errno == errno.EINVAL
    assert store.commitlog.max_offset == end
    return info.value


def test_every_reserved_property_name_is_refused(store):
    for name in sorted(V.RESERVED_PROPERTY_NAMES) + ["__RMQ.TRANSIENT.X"]:
        _refused(store, Message("T", b"x", properties={name: "v"}), "reserved")
    # the instance: __CRC32# would make recovery cut the CommitLog there
    _refused(store, Message("T", b"x", properties={"__CRC32#": "0000000000"}))
    assert store.put_messages([Message("T", b"x", properties={"crc": "1", "Keys": "k"})])


def test_rocketmq_string_hash_set_is_covered():
    """MessageConst.STRING_HASH_SET (5.3.3: its 51 ``STRING_HASH_SET.add`` lines), the set
    Message.putUserProperty refuses (TIMER_DELAY_MS, DLQ_ORIGIN_TOPIC and
    DLQ_ORIGIN_MESSAGE_ID were missing from both lists: a message with TIMER_DELAY_MS was
    stored for delivery at once; a review)."""
    string_hash_set = {
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
    assert len(string_hash_set) == 51
    assert string_hash_set <= V.RESERVED_PROPERTY_NAMES
    assert {"__CRC32#", "__SHARDINGKEY", "INNER_NUM", "INNER_BASE"} <= V.RESERVED_PROPERTY_NAMES


def test_separators_and_control_characters_are_refused_in_every_text_field(store):
    for ch in CONTROL:
        for msg in [
            Message("T", b"x", tags=f"t{ch}"),
            Message("T", b"x", keys=f"k{ch}"),
            Message("T", b"x", keys=[f"k{ch}"]),
            Message("T", b"x", sharding_key=ch + "s"),
            Message("T", b"x", properties={f"n{ch}": "v"}),
            Message("T", b"x", properties={"n": f"v{ch}"}),
        ]:
            _refused(store, msg, "control character")
    # the instance: a TAGS value that would re-parse as a KEYS property
    _refused(store, Message("T", b"x", tags="t\x02KEYS\x01evil"))
    # bodies are bytes and may hold anything
    assert store.put_messages([Message("T", bytes(range(256)))])


def test_lone_surrogates_are_refused(store):
    for msg in [
        Message("T", b"x", tags="\ud800"),
        Message("T", b"x", keys="a\udfff"),
        Message("T", b"x", keys=["\udc80"]),
        Message("T", b"x", properties={"p": "\ud800"}),
        Message("T", b"x", properties={"\ud800": "v"}),
    ]:
        _refused(store, msg, "surrogate")


def test_blank_and_malformed_fields(store):
    _refused(store, Message("T", b"x", tags="   "), "blank")
    _refused(store, Message("T", b"x", tags="a||b"), "'|'")
    _refused(store, Message("T", b"x", keys=["a b"]), "space")
    _refused(store, Message("T", b"x", keys=[""]), "blank")
    _refused(store, Message("T", b"x", keys=[1]), "string")
    _refused(store, Message("T", b"x", keys={"a": 1}), "string")
    _refused(store, Message("T", b"x", properties={"a": ""}), "blank")
    _refused(store, Message("T", b"x", properties={"": "v"}), "blank")
    _refused(store, Message("T", b"x", properties={"a": 1}), "string")
    _refused(store, Message("T", b"x", properties=[("a", "b")]), "map strings")
    _refused(store, Message("T", b"x", sharding_key=" "), "blank")
    for qid in (True, False, 1.0, "1"):
        _refused(store, Message("T", b"x", queue_id=qid), "queueId")
    # what stays allowed: empty tags/keys mean none, a space-separated keys string
    res = store.put_messages(
        [Message("T", b"x", tags="", keys=""), Message("T", b"y", keys=" a  b ", queue_id=3)]
    )
    assert res[1].queue_id == 3
    assert store.get_message("T", 3, 0).keys == ["a", "b"]


def test_a_memoryview_body_must_be_contiguous_single_bytes(store):
    """A memoryview whose ``len()`` is not its size in bytes (items wider than a byte), or
    that is not one block (a strided slice), is refused as a body by every put; bytes-like
    bodies that are one block of bytes are stored as given."""
    from array import array

    wide = memoryview(array("i", [1, 2, 3]))
    strided = memoryview(b"abcdefgh" * 500)[::2]
    for body, what in ((wide, "format 'i'"), (strided, "not contiguous")):
        _refused(store, Message("T", body), what)
        end = store.commitlog.max_offset
        with pytest.raises(MessageIllegalError, match=what):
            store.put_messages([Message("T", body)])  # a single put
        with pytest.raises(MessageIllegalError, match=what):
            store.put_messages([Message("T", body)] * 3, batch=True)
        with pytest.raises(MessageIllegalError, match=what):
            store.put_bodies("T", [b"ok", body])
        assert store.commitlog.max_offset == end
    good = [bytearray(b"ba"), memoryview(b"mv"), memoryview(bytearray(b"xyz"))[1:]]
    res = store.put_messages([Message("T", b, queue_id=0) for b in good])
    got = [store.get_message("T", 0, r.queue_offset).body for r in res]
    assert got == [b"ba", b"mv", b"yz"]
    r = store.put_messages([Message("T", memoryview(b"one"), queue_id=0)])[0]
    assert store.get_message("T", 0, r.queue_offset).body == b"one"


def test_bool_queue_id_never_names_a_consume_queue(store, tmp_path):
    """Issue 9 item 2: queueId true was taken as queue 1 with its CQ at consumequeue/T/True."""
    _refused(store, Message("T", b"b0", queue_id=True))
    store.put_messages([Message("T", b"b1", queue_id=1)])
    assert sorted(p.name for p in (tmp_path / "s" / "consumequeue" / "T").iterdir()) == ["1"]


def test_sizes_stay_emsgsize(store):
    big = store.config.max_message_size + 1
    with pytest.raises(MessageTooLargeError) as info:
        store.put_messages([Message("T", b"x" * big)])
    assert info.value.errno == errno.EMSGSIZE and isinstance(info.value, MessageIllegalError)


def test_internal_puts_skip_the_rules(store):
    """The broker's own records (retry/schedule) carry system properties."""
    res = put_internal(store, [Message("T", b"x", properties={"RETRY_TOPIC": "A"})])
    assert store.message_at(res[0].commitlog_offset).properties["RETRY_TOPIC"] == "A"


def test_refused_puts_leave_a_store_verify_finds_clean(tmp_path):
    root = tmp_path / "s"
    with MessageStore(str(root)) as s:
        s.create_topic("T", 2)
        for bad in [{"__CRC32#": "0000000000"}, {"a\x01b": "c"}, {"TAGS": "x"}]:
            with pytest.raises(MessageIllegalError):
                s.put_messages([Message("T", b"ok"), Message("T", b"x", properties=bad)])
        s.put_messages([Message("T", b"after")])
    res = verify_store(str(root))
    assert res.records == 1 and res.count("error") == 0


# -- produce.jsonl lines ---------------------------------------------------------------------


def _line(obj) -> Message:
    return J.message_from_json(J.parse_json_line(json.dumps(obj).encode()), "T")


def test_json_line_fields_and_types():
    m = _line(
        {
            "body": "hé",
            "tags": "A",
            "keys": ["k1", "k2"],
            "properties": {"p": "v"},
            "queueId": 2,
            "shardingKey": "s",
        }
    )
    assert (m.body, m.tags, m.keys, m.properties, m.queue_id, m.sharding_key) == (
        "hé".encode(),
        "A",
        ["k1", "k2"],
        {"p": "v"},
        2,
        "s",
    )
    assert _line({"bodyBase64": "AAE=", "tags": None, "keys": None}).body == b"\x00\x01"
    assert J.message_from_json({"body": "x"}, "T", 3).queue_id == 3  # the directory's queue
    bad = [
        [1],
        "s",
        1,
        None,
        True,  # not an object
        {},
        {"tags": "t"},
        {"body": None},  # no body
        {"body": ""},
        {"bodyBase64": ""},  # empty body
        {"body": "a", "bodyBase64": "YQ=="},  # both
        {"body": 1},
        {"body": ["a"]},
        {"body": {"a": "b"}},  # body types
        {"bodyBase64": "***"},
        {"bodyBase64": 5},
        {"bodyBase64": "é"},
        {"body": "x", "queueId": True},
        {"body": "x", "queueId": 1.0},
        {"body": "x", "queueId": "1"},
        {"body": "x", "queueId": [1]},
        {"body": "x", "tags": 1},
        {"body": "x", "tags": ["a"]},
        {"body": "x", "keys": 1},
        {"body": "x", "keys": [1]},
        {"body": "x", "keys": {"a": "b"}},
        {"body": "x", "properties": []},
        {"body": "x", "properties": "a=b"},
        {"body": "x", "properties": {"a": 1}},
        {"body": "x", "properties": {"a": None}},
        {"body": "x", "shardingKey": 1},
        {"body": "x", "tag": "misspelt"},
        {"body": "x", "queueOffset": 0},
        {"body": "\ud800"},
        {"body": "x", "tags": "\ud800"},
        {"body": "x", "properties": {"__CRC32#": "0"}},
        {"body": "x", "tags": "t\u0002KEYS\u0001evil"},
    ]
    for obj in bad:
        with pytest.raises(MessageIllegalError):
            J.message_from_json(obj, "T")


def test_json_line_parsing_is_strict():
    for raw in [
        b'{"body": "a", "body": "b"}',
        b'{"body": NaN}',
        b'{"body": Infinity}',
        b'{"body": "\xff"}',
        b"\xef\xbb\xbf{}",
        b'{"body": "x"} {}',
        b"[" * 100_000,
        '{"body": "x"}'.encode("utf-16"),
    ]:
        with pytest.raises(MessageIllegalError):
            J.message_from_json(J.parse_json_line(raw), "T")


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=8,
    )
)
def test_any_json_value_is_a_message_or_message_illegal(obj):
    """Whatever JSON a line holds, the parser returns a Message that passes the rules or
    raises MessageIllegalError (never another exception)."""
    for value in (
        obj,
        {"body": "x", "tags": obj},
        {"body": "x", "keys": obj},
        {"body": "x", "properties": obj},
        {"body": "x", "queueId": obj},
        {"body": obj},
        {"bodyBase64": obj},
        {"body": "x", "shardingKey": obj},
    ):
        try:
            line = json.dumps(value).encode()
        except (ValueError, UnicodeEncodeError):
            continue
        try:
            msg = J.message_from_json(J.parse_json_line(line), "T")
        except MessageIllegalError:
            continue
        V.check_message(msg)


# -- names -----------------------------------------------------------------------------------


def test_names_ending_in_newline_are_refused():
    for bad in ["T\n", "a\nb", "\n"]:
        with pytest.raises(InvalidNameError):
            validate_topic_name(bad)
        with pytest.raises(InvalidNameError):
            validate_group_name(bad)
    validate_topic_name("%RETRY%G-1_|x")


def test_only_canonical_decimals_are_lookup_names():
    assert [V.parse_decimal(s) for s in ["0", "7", "10", "9223372036854775807"]] == [
        0,
        7,
        10,
        9223372036854775807,
    ]
    for bad in [
        "",
        "00",
        "01",
        "+1",
        "-1",
        " 1",
        "1 ",
        "1\n",
        "²",
        "١",
        "٣٤",
        "1_000",
        "0x1",
        "1e3",
        "1.0",
        "12345678901234567890",
        "9" * 5000,
    ]:
        assert V.parse_decimal(bad) is None, bad


def test_cli_produce_refuses_bad_fields_with_a_clear_message(tmp_path):
    from conftest import run_rmqfs

    src = tmp_path / "in.txt"
    src.write_bytes(b"a\n")
    for args, words in [
        (["--property", "__CRC32#=0000000000"], "reserved"),
        (["--property", "UNIQ_KEY=x"], "reserved"),
        (["-a", "a||b"], "'|'"),
        (["-k", "k\x01"], "control character"),
        (["--property", "p=\x02"], "control character"),
    ]:
        r = run_rmqfs("produce", tmp_path / "s", "-t", "T", "-c", src, *args, check=False)
        assert r.returncode == 1 and r.stderr.startswith("rmqfs: ") and words in r.stderr, (
            args,
            r.stderr,
        )
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "s").exists()  # refused before the store was created


def test_the_json_line_has_one_home(tmp_path):
    """engine.read.jsonline owns the JSON line both ways (issue 17, item 2b): a built line has
    LINE_FIELDS in order (engine.read.schema's columns), bodyEncoding only after a base64 body;
    the produce fields are what message_from_json takes."""
    from stores import every_kind_store

    root = every_kind_store(tmp_path / "s")
    seen_b64 = False
    with MessageStore(str(root), read_only=True) as s:
        for t in s.topic_names():
            for q in s.queue_ids(t):
                for _, rec in s.iter_queue(t, q):
                    obj = json.loads(J.build_line(rec))
                    names = list(obj)
                    if names[-1] == J.BODY_ENCODING:
                        seen_b64 = True
                        names.pop()
                    assert tuple(names) == J.LINE_FIELDS
                    assert list(J.message_fields(rec)) == list(J.LINE_FIELDS[:-1])
    assert seen_b64
    for name in J.PRODUCE_FIELDS - {"body", "bodyBase64"}:
        obj = {"body": "x", name: None}
        assert J.message_from_json(J.parse_json_line(json.dumps(obj).encode()), "T").body == b"x"


class _Odd:
    """A field value that equals everything and has no truth value (a numpy array's kind)."""

    def __eq__(self, other):
        return True

    def __hash__(self):
        return hash("T")

    def __bool__(self):
        raise ValueError("the truth value of an _Odd is ambiguous")


_ODD = st.sampled_from([mock.ANY, _Odd()])

_FIELD_VALUES = {
    "topic": st.sampled_from(["T", "U", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"]),
    "tags": st.one_of(
        st.none(),
        st.sampled_from(["", "a", "b|c", " ", "x\x01", "\ud800", "ok"]),
        st.text(max_size=4),
        st.just(["list"]),
        st.just(0),
        _ODD,
    ),
    "keys": st.one_of(
        st.none(),
        st.sampled_from(["", "k1 k2", "k\x02", ["a", "b"], ["a b"], [""], ("t",), 7, []]),
        st.text(max_size=4),
        _ODD,
    ),
    "properties": st.one_of(
        st.none(), st.sampled_from([{}, {"a": "b"}, {"KEYS": "x"}, {"a": ""}, "text"]), _ODD
    ),
    "sharding_key": st.one_of(st.none(), st.sampled_from(["s", " ", "s\x03", 5]), _ODD),
    "queue_id": st.one_of(st.none(), st.sampled_from([0, 3, True, 1.5, "1"])),
    "body": st.sampled_from([b"x", b"", bytearray(b"y"), memoryview(b"z"), "text", None]),
    "flag": st.sampled_from([0, 1, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1, True, 0.0, None]),
    "sys_flag": st.sampled_from([0, 4, 2**31, 1.0, "0"]),
    "born_timestamp": st.sampled_from(
        [None, 0, 1_700_000_000_000, V.MAX_BORN_TIMESTAMP, V.MAX_BORN_TIMESTAMP + 1, -1, 2.5]
    ),
    "delay_level": st.sampled_from([0, 3, -1, "3", 1.0, False, None]),
    # (no object that says it equals None: a batch's None columns are counted, not looked at
    # one by one, see validation._NONE_FIELDS)
    "deliver_time_ms": st.sampled_from([None, 1_700_000_000_000, 2**63, 1.5, "1"]),
    "delay_time_ms": st.sampled_from([None, 0, 1000, -(2**63) - 1, True]),
    "delay_time_sec": st.sampled_from([None, 5, "5"]),
}


@st.composite
def _batches(draw):
    n = draw(st.integers(1, 6))
    out = []
    for _ in range(n):
        fields = {"topic": "T", "body": b"b"}
        for name in draw(st.sets(st.sampled_from(sorted(_FIELD_VALUES)), max_size=2)):
            fields[name] = draw(_FIELD_VALUES[name])
        out.append(Message(**fields))
    return out


def _outcome(check) -> str:
    try:
        check()
    except Exception as exc:  # noqa: BLE001 - the very error either check raises
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@settings(max_examples=400, deadline=None)
@given(_batches())
def test_the_column_check_refuses_what_the_message_check_refuses(msgs):
    """``check_message_columns`` (the put path's check of a batch from its columns) lets
    through exactly what ``check_messages`` lets through, and refuses the rest with the same
    error: the first broken rule of the first message that breaks one."""
    from rmqfs.engine.service import putmessage
    from rmqfs.engine.service.putmessage import message_columns

    cols = message_columns(msgs)
    named = dict(zip(putmessage._ALL_NAMES, cols))
    mine = _outcome(lambda: V.check_message_columns(msgs, named))
    assert mine == _outcome(lambda: V.check_messages(msgs))


@pytest.mark.parametrize(
    ("field", "match"),
    [
        ({"flag": 2**40}, "flag"),
        ({"flag": 1.5}, "flag"),
        ({"flag": 0.0}, "flag"),
        ({"sys_flag": 2**31}, "sysFlag"),
        ({"born_timestamp": 2**70}, "born timestamp"),
        ({"born_timestamp": -5}, "born timestamp"),
        ({"born_timestamp": "x"}, "born timestamp"),
        ({"delay_level": "3"}, "delay level"),
        ({"delay_time_ms": 1.5}, "delay ms"),
        ({"deliver_time_ms": 1, "delay_time_sec": 1}, "give one of"),
    ],
)
def test_every_put_refuses_numbers_out_of_their_fields_range(tmp_path, field, match):
    """A flag or sysFlag that is not an int in a Java int's range, a born timestamp that is
    not epoch ms from 0 to 9999-01-01, a delay level or timer field of the wrong type, or two
    timer fields, is a MessageIllegalError naming the field for a single put and for a batch,
    with nothing written; before, they surfaced as TypeError, OverflowError, ValueError,
    struct.error or OSError(EOVERFLOW) from deep in the put paths (a bytes body skipped the
    timing rules). The store closes cleanly after (a single put's CommitLog mapping is not left
    exported)."""
    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"first")])
        end = s.commitlog.max_offset
        for n in (1, 3):
            with pytest.raises(MessageIllegalError, match=match):
                s.put_messages([Message("T", b"x", **field)] * n)
        assert s.commitlog.max_offset == end
        r = s.put_messages([Message("T", b"y", flag=-7, born_timestamp=V.MAX_BORN_TIMESTAMP)])[0]
        assert s.get_message("T", r.queue_id, r.queue_offset).body == b"y"


def test_check_put_refuses_what_the_put_refuses_and_changes_nothing(tmp_path):
    """``MessageStore.check_put`` raises the error ``put_messages`` raises for the same
    messages (topic, queue, size, properties, timer rules), and changes nothing: no record,
    the round robin and the UNIQ_KEY counter where they were, no system topic created; for
    messages the put takes it raises nothing."""
    cfg = StoreConfig(max_message_size=1024, timer_wheel_enable=False)
    with MessageStore(str(tmp_path / "s"), cfg) as s:
        s.create_topic("T", 2)
        s.topic_config.put(TopicConfig("R", 1, 1, perm=4))
        cases = [
            Message("Nope", b"x"),
            Message("R", b"x"),  # perm 4: no write bit
            Message("T", b"x", queue_id=2),
            Message("T", b"x" * 1025),
            Message("T", b"x", properties={"p": "v" * 40_000}),
            Message("T", b"x", delay_time_ms=60_000),  # no timer store
            Message("T", b"x", tags="a|b"),  # a client rule
        ]
        rr, counter = dict(s.putter.round_robin), s.uniq_keys.counter
        topics = set(s.topic_config.topics)
        for m in cases:
            with pytest.raises(Exception) as checked:
                s.check_put([m])
            with pytest.raises(Exception) as put:
                s.put_messages([m])
            assert type(checked.value) is type(put.value) and str(checked.value) == str(
                put.value
            ), m
        s.putter.round_robin.clear()
        s.putter.round_robin.update(rr)
        s.uniq_keys.counter = counter
        for m in (Message("T", b"ok"), Message("T", b"late", delay_level=3)):
            s.check_put([m])
        assert s.putter.round_robin == rr and s.uniq_keys.counter == counter
        assert set(s.topic_config.topics) == topics  # no SCHEDULE_TOPIC_XXXX made
        assert s.commitlog.max_offset == 0


@pytest.mark.parametrize(
    "host, match",
    [
        ((b"\n\x00\x00\x01c", 8080), "4 bytes"),  # 5 bytes: was cut to 4 and stored
        ((b"\n\x00\x01", 8080), "4 bytes"),  # 3 bytes: was padded with a zero
        (("10.0.0.1", 80), "4 bytes"),  # text: a bare struct.error
        ((b"\n\x00\x00\x01", 2**31), "port"),  # past int32: a bare struct.error
        ((b"\n\x00\x00\x01", -1), "port"),
        ((b"\n\x00\x00\x01",), "address bytes, port"),
    ],
)
def test_a_bad_born_host_is_refused_on_every_path(store, host, match):
    """A born host is 4 or 16 address bytes and a port 0..65535; anything else is refused
    (EINVAL) before anything is written, alone or in a batch, on the compiled path and the
    general one alike, the round robin and the UNIQ_KEY counter left as they were."""
    rr, counter = dict(store.putter.round_robin), store.uniq_keys.counter
    for msgs in (
        [Message("T", b"x", born_host=host)],
        [Message("T", b"a")] * 40 + [Message("T", b"x", born_host=host)],  # the column pass
        [Message("T", b"x", born_host=host, properties={"p": "v"})],  # the general path
    ):
        with pytest.raises(MessageIllegalError, match=match):
            store.put_messages(msgs)
    assert store.commitlog.max_offset == 0
    assert store.putter.round_robin == rr and store.uniq_keys.counter == counter
    ok = store.put_messages([Message("T", b"y", born_host=(b"\n\x00\x00\x01", 65535))])
    assert store.get_message("T", ok[0].queue_id, 0).born_host == (b"\n\x00\x00\x01", 65535)


def test_a_topic_without_write_queues_takes_only_a_queue_id(tmp_path):
    """writeQueueNums 0 (a topic being drained): a message without a queueId is refused with
    a reason (it was a bare ZeroDivisionError), one with a queueId of its read queues is put,
    as the broker's SendMessageProcessor checks it against max(read, write)."""
    with MessageStore(str(tmp_path / "s")) as s:
        s.topic_config.put(TopicConfig("Z", read_queue_nums=4, write_queue_nums=0))
        for put in (
            lambda: s.put_messages([Message("Z", b"a")]),
            lambda: s.put_messages([Message("Z", b"a", sharding_key="k")]),
            lambda: s.put_bodies("Z", [b"a", b"b"]),
            lambda: s.put_messages([Message("Z", b"a")] * 3, batch=True),
        ):
            with pytest.raises(PutMessageError, match="no write queue") as info:
                put()
            assert info.value.errno == errno.EINVAL
        assert s.putter.round_robin.get("Z") is None and s.commitlog.max_offset == 0
        assert s.put_messages([Message("Z", b"q3", queue_id=3)])[0].queue_id == 3
        assert s.put_bodies("Z", [b"b0", b"b1"], queue_id=1)[1].queue_offset == 1


def test_put_internal_refuses_what_the_record_cannot_hold(store):
    """put_internal skips the client's rules, not the record's fields: a flag past a Java int
    or a bad born host is MessageIllegalError on both paths (it was an OverflowError on the
    compiled path and a struct.error on the general one, which had moved the round robin)."""
    rr, counter = dict(store.putter.round_robin), store.uniq_keys.counter
    for bad in (
        Message("T", b"x", flag=2**31),
        Message("T", b"x", flag=2**31, properties={"p": "v"}),
        Message("T", b"x", born_host=(b"\x01\x02\x03", 1)),
    ):
        with pytest.raises(MessageIllegalError):
            put_internal(store, [Message("T", b"a"), bad])
    assert store.commitlog.max_offset == 0
    assert store.putter.round_robin == rr and store.uniq_keys.counter == counter
