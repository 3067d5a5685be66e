"""``refused.jsonl`` and the refusal log lines (fusefs.base.RefusalLog) under a flood from
another user (issue 36 item 12: 3,382 refused mkdirs of another user in 20 s pushed every
entry of the owner's out of one shared 1,000-entry ring, and the log grew 1.47 MB every 20 s)."""

import errno
import json
import logging

from rmqfs.fusefs.base import RefusalLog

OWNER, OTHER = 1000, 1001


def _uids(lines: bytes) -> list:
    return [json.loads(x)["uid"] for x in lines.splitlines()]


def test_another_users_flood_keeps_the_owners_refusals_and_bounds_the_log(caplog):
    log = RefusalLog(OWNER, keep=1000)
    for i in range(5):
        log.record("write", f"/topics/T/produce{i}", 10, OWNER, errno.EINVAL, "bad line")
    with caplog.at_level(logging.WARNING, logger="rmqfs.refused"):
        for i in range(3382):
            log.record("mkdir", f"/topics/bad name {i}", 20, OTHER, errno.EINVAL, "bad name")
    mine = _uids(log.lines_for(OWNER))
    assert mine.count(OWNER) == 5 and mine.count(OTHER) == 1000  # the owner reads all
    theirs = _uids(log.lines_for(OTHER))
    assert theirs == [OTHER] * 1000  # their newest 1,000, none of the owner's
    assert json.loads(log.lines_for(OTHER).splitlines()[-1])["path"] == "/topics/bad name 3381"
    assert _uids(log.lines_for(1002)) == []
    # the log: 20 lines in the 10 s window, the rest counted, not written
    theirs_logged = [r.getMessage() for r in caplog.records if "uid 1001" in r.getMessage()]
    assert len(theirs_logged) == 20
    assert sum(map(len, theirs_logged)) < 4000


def test_the_log_says_how_many_it_left_out_once_the_window_passes(caplog):
    log = RefusalLog(OWNER, log_burst=2, log_window=0.0)
    with caplog.at_level(logging.WARNING, logger="rmqfs.refused"):
        log.log_window = 60.0
        for _ in range(5):
            log.record("mkdir", "/x", 1, OTHER, errno.EINVAL, "no")
        log.log_window = 0.0  # the next refusal starts a new window
        log.record("mkdir", "/y", 1, OTHER, errno.EINVAL, "no")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and lines[2].startswith("3 refusals of uid 1001 not logged")
    assert "/y" in lines[3]


def test_users_past_the_bound_drop_the_one_refused_longest_ago():
    log = RefusalLog(OWNER, keep=3, users=2)
    log.record("mkdir", "/o", 1, OWNER, errno.EINVAL, "")
    for uid in (2001, 2002, 2003):
        log.record("mkdir", "/x", 1, uid, errno.EINVAL, "")
    assert sorted(set(_uids(log.lines_for(OWNER)))) == [OWNER, 2002, 2003]
