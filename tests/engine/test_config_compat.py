"""config/*.json as real brokers wrote them (fastjson: tabs, bare integer keys) and as we write them."""

import json

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
