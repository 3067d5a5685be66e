"""config/*.json as real brokers wrote them (fastjson: tabs, bare integer keys) and as we write them."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import copy_fixture
from rmqfs.engine.format.config import dumps_pretty, dumps_pretty_table, loads_fastjson
from rmqfs.engine.store import Message, MessageStore


def test_fastjson_bare_integer_keys_are_read(tmp_path):
    root = copy_fixture("gxstax-rocketmq/store", tmp_path / "s")
    with MessageStore(root) as s:
        assert "TopicTest" in s.topic_names()
        cfg = s.topic_config.get("TopicTest")
        assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (4, 4, 6)
        assert s.consumer_offsets.query("please_rename_unique_group_name_4", "TopicTest", 2) == 543
        assert s.consumer_offsets.query("please_rename_unique_group_name", "TopicTest", 0) == 1043
        assert "please_rename_unique_group_name_4" in s.group_names()
        s.create_topic("NewTopic")
    # what we write back is strict JSON that keeps every entry the broker wrote
    topics = json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {"TopicTest", "NewTopic", "TBW102"} <= set(topics)
    assert topics["NewTopic"]["perm"] == 6 and topics["NewTopic"]["readQueueNums"] == 4
    assert (root / "config" / "topics.json.bak").exists()


def test_loads_fastjson_leaves_strings_alone():
    text = '{"a":{0:1, 12 :2},"s":"x,3:y {4:5}","n":[1,2]}'
    assert loads_fastjson(text) == {"a": {"0": 1, "12": 2}, "s": "x,3:y {4:5}", "n": [1, 2]}


def test_bak_is_used_when_the_file_is_damaged(tmp_path):
    root = copy_fixture("liushangqing9803-rocketmq-tech/store", tmp_path / "s")
    good = loads_fastjson((root / "config" / "consumerOffset.json").read_text())
    (root / "config" / "consumerOffset.json").write_text("{ truncated")
    with MessageStore(root, read_only=True) as s:
        key, queues = next(iter(good["offsetTable"].items()))
        topic, group = key.split("@")
        q, off = next(iter(queues.items()))
        assert s.consumer_offsets.query(group, topic, int(q)) == off


def test_groups_and_their_topics_follow_every_change_of_the_offsets(tmp_path, monkeypatch):
    """The groups of consumerOffset.json and each group's topics come from one index of the
    table, built once per change (a lookup per group rebuilt them from the whole table:
    ``ls groups/`` of 20,000 groups took minutes): every commit, removal and refused write
    shows at once."""
    from rmqfs.engine.store import MessageStore

    with MessageStore(str(tmp_path / "s")) as s:
        s.create_topic("T", 2)
        s.create_topic("U", 1)
        offsets = s.consumer_offsets
        assert offsets.groups() == set() and not s.has_group("G")
        s.commit_offset("G", "T", 0, 0)
        assert offsets.groups() == {"G"} and s.has_group("G")
        s.commit_offset("G", "U", 0, 0)
        s.commit_offset("H", "T", 1, 0)
        assert offsets.topics_of("G") == {"T": {0: 0}, "U": {0: 0}}
        assert offsets.topics_of("H") == {"T": {1: 0}} and offsets.topics_of("X") == {}
        offsets.topics_of("G")["T"][0] = 99  # a copy: the table is not changed through it
        assert offsets.query("G", "T", 0) == 0

        def full(*_a, **_k):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(offsets, "_persist", full)
        with pytest.raises(OSError):
            s.commit_offset("K", "T", 0, 0)
        assert offsets.groups() == {"G", "H"} and not s.has_group("K")
        monkeypatch.undo()
        s.delete_group("H", remove_offset=True)
        assert offsets.groups() == {"G"} and offsets.topics_of("H") == {}
        assert not s.has_group("H") and s.group_names() == ["G"]


def test_a_group_name_rocketmq_refuses_is_not_listed(tmp_path):
    """A broker stores whatever group a client commits (ConsumerOffsetManager.commitOffset
    checks no name), so consumerOffset.json may hold ``T@a/b``: such a group is not one of
    the store's groups (a mount lists each as a directory: a ``/`` in one made ``ls groups``
    fail with EIO for every group), but one of valid characters is. The check was anchored at
    the start only: ``a/b`` passed as ``a``."""
    from rmqfs.engine.store import MessageStore

    root = tmp_path / "s"
    with MessageStore(str(root)) as s:
        s.create_topic("T", 1)
        s.commit_offset("good", "T", 0, 0)
    path = root / "config" / "consumerOffset.json"
    doc = json.loads(path.read_text())
    for bad in ("a/b", "ok/../x", "gé", "x y", "%RETRY%ok"):
        doc["offsetTable"][f"T@{bad}"] = {"0": 0}
    path.write_text(json.dumps(doc))
    with MessageStore(str(root), read_only=True) as s:
        assert s.consumer_offsets.groups() == {"good", "%RETRY%ok"}
        assert s.group_names() == ["%RETRY%ok", "good"]


def test_deleting_a_group_drops_its_forbidden_topics(tmp_path):
    """``deleteSubscriptionGroupConfig`` also removes the group's ``forbiddenTable`` entry
    (SubscriptionGroupManager): a group made again under the name has no topic forbidden;
    other groups' entries stay."""
    from rmqfs.engine.store import MessageStore

    root = tmp_path / "s"
    with MessageStore(str(root)) as s:
        s.create_group("gf")
        s.create_group("other")
    path = root / "config" / "subscriptionGroup.json"
    doc = json.loads(path.read_text())
    doc["forbiddenTable"] = {"gf": {"T1": 1}, "other": {"T2": 1}}
    path.write_text(json.dumps(doc))
    with MessageStore(str(root)) as s:
        s.delete_group("gf")
        assert json.loads(path.read_text())["forbiddenTable"] == {"other": {"T2": 1}}
        s.create_group("gf")
    assert json.loads(path.read_text())["forbiddenTable"] == {"other": {"T2": 1}}


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),  # (control characters, quotes, U+2028 and surrogates' neighbours)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    top=st.dictionaries(st.text(max_size=6), _values, max_size=4),
    tables=st.lists(
        st.dictionaries(st.text(max_size=6), _values, max_size=6), min_size=1, max_size=4
    ),
    name=st.text(max_size=6),
)
def test_a_table_rendered_entry_by_entry_is_dumps_pretty(top, tables, name):
    """The config managers write their tables entry by entry, each entry's text kept until
    it changes (``dumps_pretty_table``): every write is byte for byte what ``dumps_pretty``
    of the whole file gives (fastjson's pretty mode), whatever changed since the last, and
    the cache ends holding only the table's entries."""
    cache: dict = {}
    for table in tables:  # (successive writes of one file, one cache)
        obj = {**top, name: table}
        assert dumps_pretty_table(obj, name, cache) == dumps_pretty(obj)
        assert set(cache) == set(table)
    assert dumps_pretty_table({name: 5}, name, cache) == dumps_pretty({name: 5})
    assert dumps_pretty_table({}, name, cache) == "{}"


def test_a_write_renders_only_the_entries_that_changed(tmp_path, monkeypatch):
    """Creating a topic renders that topic's entry (and the file's small members), not the
    thousands before it; committing an offset renders that group and topic's entry: what
    kept 2,000 more topics taking 39 s to create (json's pretty encoder runs in Python)."""
    from rmqfs.engine.format import config

    rendered: list = []
    real = config.dumps_pretty

    def counting(obj):
        rendered.append(obj)
        return real(obj)

    with MessageStore(str(tmp_path / "s")) as s:
        for i in range(50):
            s.create_topic(f"T{i}", 2)
        for t in ("T1", "T2"):
            s.put_messages([Message(t, b"m", queue_id=0) for _ in range(8)])
        s.commit_offset("G", "T1", 0, 1)
        s.commit_offset("G", "T2", 0, 1)
        monkeypatch.setattr(config, "dumps_pretty", counting)
        s.create_topic("New", 2)
        tables = [o for o in rendered if isinstance(o, dict) and "topicName" in o]
        assert [t["topicName"] for t in tables] == ["New"]
        del rendered[:]
        s.commit_offset("G", "T2", 0, 7)
        assert {"0": 7} in rendered and {"0": 1} not in rendered
    topics = json.loads((tmp_path / "s" / "config" / "topics.json").read_text())
    assert len(topics["topicConfigTable"]) >= 51
    assert (tmp_path / "s" / "config" / "topics.json").read_text() == real(topics)
