"""config/*.json as real brokers wrote them (fastjson: tabs, bare integer keys) and as we write them."""

import json

import pytest

from conftest import copy_fixture
from rmqfs.engine.format.config import loads_fastjson
from rmqfs.engine.store import MessageStore


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
