"""mqadmin's deleteTopic, deleteSubGroup and updateTopic as file operations on a real mount:
``rmdir topics/T``, ``rmdir groups/G`` and a JSON write to ``topics/T/topic.json``
(the tree without a kernel: tests/fs/test_tree.py)."""

import errno
import json
import os
import subprocess

import pytest

import refreader
from conftest import fuse, run_rmqfs

pytestmark = [fuse, pytest.mark.fuse]


def test_rmdir_topic_and_group_and_topic_json_write(mount_store):
    m = mount_store()
    t = m.mnt / "topics"
    os.mkdir(t / "T")
    os.mkdir(t / "U")
    (t / "T" / "produce").write_bytes(b"".join(b"t%d\n" % i for i in range(20)))
    (t / "U" / "produce").write_bytes(b"u\n")
    os.mkdir(m.mnt / "groups" / "G")
    (m.mnt / "groups" / "G" / "T" / "0" / "offset").write_text("2\n")
    (m.mnt / "groups" / "G" / "U" / "0" / "offset").write_text("1\n")
    assert (t / "T" / "bodies.txt").read_bytes().count(b"\n") == 20  # rendered and cached
    with open(t / "T" / "messages.jsonl", "rb") as held:  # open while the topic goes:
        os.rmdir(t / "T")  # its reads answer ENOENT
        with pytest.raises(OSError) as info:
            held.read()
        assert info.value.errno == errno.ENOENT
    assert sorted(os.listdir(t)) == ["U"]
    assert not (t / "T").exists()
    assert not (m.mnt / "raw" / "consumequeue" / "T").exists()
    with pytest.raises(OSError) as info:
        os.rmdir(t / "SCHEDULE_TOPIC_XXXX")
    assert info.value.errno == errno.ENOENT
    with pytest.raises(OSError) as info:
        os.rmdir(t / "U" / "0")
    assert info.value.errno == errno.EPERM
    offsets = json.loads((m.mnt / "raw" / "config" / "consumerOffset.json").read_text())
    assert list(offsets["offsetTable"]) == ["U@G"]

    # topic.json: the fields to change, as one write (shell redirection)
    subprocess.run(f"echo '{{\"perm\": 4}}' > '{t}/U/topic.json'", shell=True, check=True)
    assert json.loads((t / "U" / "topic.json").read_text())["perm"] == 4
    with pytest.raises(OSError) as info:  # refused at write(), nothing changed
        (t / "U" / "topic.json").write_text('{"perm": 5}\n')
    assert info.value.errno == errno.EINVAL
    assert json.loads((t / "U" / "topic.json").read_text())["perm"] == 4
    with pytest.raises(OSError) as info:
        (t / "U" / "produce").write_bytes(b"x\n")
    assert info.value.errno == errno.EACCES

    os.rmdir(m.mnt / "groups" / "G")
    assert os.listdir(m.mnt / "groups") == []
    os.mkdir(t / "T")  # the name again: a new, empty topic
    assert (t / "T" / "bodies.txt").read_bytes() == b""
    m.umount()

    topics = json.loads((m.store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert sorted(topics) == ["T", "U"] and topics["U"]["perm"] == 4
    groups = json.loads((m.store / "config" / "subscriptionGroup.json").read_text())
    assert groups["subscriptionGroupTable"] == {}
    offsets = json.loads((m.store / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"] == {}
    recs = refreader.read_commitlog(m.store / "commitlog")
    assert sum(r["topic"] == "T" for r in recs) == 20
    r = run_rmqfs("verify", m.store)
    assert "OK: no errors, 0 warnings" in r.stdout, r.stdout
