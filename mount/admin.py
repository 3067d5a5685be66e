"""Offline commands on a store directory: RocketMQ's ``mqadmin`` as a user knows it, on files.

Every command takes the store directory as its first argument (``rmqfs CMD STORE ...``, like
``rmqfs mount STORE MNT``), and ``--config broker.conf`` for a broker's settings. Option letters
follow mqadmin where it has the command (``printMsg``, ``queryMsgByKey``/``ById``/``ByOffset``,
``topicStatus``, ``topicList``, ``consumerProgress``, ``resetOffsetByTime``,
``deleteExpiredCommitLog``; reference section 14).

Reading commands (verify, print-msg, query-msg, topic-status, topic-list, consumer-progress) open
the store read-only: they work next to a running mount or broker. Writing commands (recover,
produce, reset-offset, clean) take the store's lock like a broker does and refuse, naming the
holder's pid, while a mount or broker runs: its in-memory state would overwrite theirs. (A
running mount takes offsets through ``MNT/groups/G/T/Q/offset`` and messages through
``MNT/topics/T/produce`` instead.)

``snapshot-verify DIR`` works on a copy of a snapshot (``MNT/snapshots/NAME``), not on a store:
it checks every file against the copy's ``SNAPSHOT.json`` (size, CRC32C).

Exit status: 0 on success, 1 with ``rmqfs: <message>`` on stderr on failure (and when
``verify`` finds an error), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

from engine.progress import consumer_progress, diff_total

TIME_FORMAT_HELP = "epoch ms, or yyyy-MM-dd#HH:mm:ss:SSS (local time)"


class AdminError(Exception):
    """A failure to report as ``rmqfs: <message>`` with exit status 1."""


# ----------------------------------------------------------------------------------------------
# helpers

def parse_time(text: str, allow_now: bool = False) -> int:
    """Epoch ms from ``text``: digits (ms), ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time (as
    mqadmin's ``UtilAll.parseDate`` / ``-s`` options), or ``now`` when allowed."""
    text = text.strip()
    if allow_now and text.lower() == "now":
        return int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise AdminError(f"bad time {text!r}: use {TIME_FORMAT_HELP}"
                         + (" or now" if allow_now else "")) from None
    return int(time.mktime(dt.timetuple())) * 1000 + dt.microsecond // 1000


def format_time(ms: int) -> str:
    """``yyyy-MM-dd HH:mm:ss,SSS`` in local time, as mqadmin prints times."""
    if ms <= 0:
        return "-"
    t = time.localtime(ms // 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", t) + f",{ms % 1000:03d}"


def _progress(total: int, desc: str, unit: str = "B"):
    """The progress factory of every long command (engine.workprogress): a tqdm bar on stderr,
    hidden when stderr is not a terminal."""
    from .progress import terminal_bar
    return terminal_bar(total, desc, unit)


def _config(args):
    from engine.store import StoreConfig
    if getattr(args, "config", None):
        try:
            return StoreConfig.from_broker_conf(args.config)
        except OSError as exc:
            raise AdminError(f"cannot read {args.config}: {exc.strerror}") from None
    return None


def _check_store(path: str) -> str:
    from engine.verify import check_store_dir
    root = os.path.abspath(path)
    check_store_dir(root)
    return root


def open_store(args, write: bool = False, create: bool = False):
    """Open ``args.store``: read-only unless ``write`` (which takes the lock).

    ``create``: a missing or empty directory becomes a new store. Raises NotAStoreError for a
    path that is not a store; StoreLockedError names the holder.
    """
    from engine.store import MessageStore
    path = os.path.abspath(args.store)
    if create and (not os.path.exists(path) or (os.path.isdir(path) and not os.listdir(path))):
        root = path
    else:
        root = _check_store(path)
    # the open's recovery (long after a crash) shows its progress too
    return MessageStore(root, _config(args), read_only=not write, progress=_progress)


def _topic(store, topic: str):
    if topic not in store.topic_names():
        known = ", ".join(store.topic_names()) or "none"
        raise AdminError(f"topic {topic} does not exist (topics: {known})")
    return topic


def _queue(store, topic: str, queue_id: int) -> int:
    ids = store.queue_ids(topic)
    if queue_id not in ids:
        raise AdminError(f"queue {queue_id} is not a queue of {topic} (queues: "
                         f"{', '.join(map(str, ids))})")
    return queue_id


def _body_text(rec, charset: str) -> str:
    return rec.plain_body.decode(charset, errors="replace")


def _parse_sub_expression(expr: str | None):
    """``*`` / None -> None (all); ``TagA || TagB`` -> the set of tags (``SubscriptionData``)."""
    if expr is None or expr.strip() in ("", "*"):
        return None
    tags = {t.strip() for t in expr.split("||") if t.strip()}
    return tags or None


def _message_line(rec, print_body: bool, charset: str) -> str:
    body = _body_text(rec, charset) if print_body else "NOT PRINT BODY"
    keys = " ".join(rec.keys)
    return (f"MSGID: {rec.msg_id} topic={rec.topic} queueId={rec.queue_id} "
            f"queueOffset={rec.queue_offset} commitLogOffset={rec.commitlog_offset} "
            f"storeTimestamp={rec.store_timestamp} tags={rec.tags or ''} keys={keys} "
            f"UNIQ_KEY={rec.uniq_key or ''} BODY: {body}")


def _json_line(rec) -> str:
    from fusefs.render import render_message
    return render_message(rec).decode("utf-8").rstrip("\n")


def _print_detail(rec, print_body: bool, charset: str) -> None:
    """A message the way ``mqadmin queryMsgById`` shows it."""
    from engine.message import host_to_str
    rows = [("OffsetID", rec.msg_id), ("Topic", rec.topic), ("Tags", f"[{rec.tags or ''}]"),
            ("Keys", f"[{' '.join(rec.keys)}]"), ("Queue ID", rec.queue_id),
            ("Queue Offset", rec.queue_offset), ("CommitLog Offset", rec.commitlog_offset),
            ("Reconsume Times", rec.reconsume_times),
            ("Born Timestamp", f"{format_time(rec.born_timestamp)} ({rec.born_timestamp})"),
            ("Store Timestamp", f"{format_time(rec.store_timestamp)} ({rec.store_timestamp})"),
            ("Born Host", host_to_str(rec.born_host)),
            ("Store Host", host_to_str(rec.store_host)), ("System Flag", rec.sys_flag),
            ("Properties", json.dumps(rec.properties, ensure_ascii=False, sort_keys=True)),
            ("Body CRC", rec.body_crc), ("Store Size", rec.store_size)]
    for name, value in rows:
        print(f"{name + ':':<20} {value}")
    print(f"{'Message Body:':<20} {_body_text(rec, charset) if print_body else 'NOT PRINT BODY'}")


# ----------------------------------------------------------------------------------------------
# verify / recover

def cmd_verify(args) -> int:
    """``rmqfs verify STORE``: check every record, unit and index item; exit 1 on any error."""
    from engine.verify import verify_store
    root = _check_store(args.store)
    res = verify_store(root, _config(args), _progress)
    if args.json:
        print(json.dumps(_verify_json(res), indent=1))
    else:
        _print_verify(res)
    if res.ok:
        return 0
    print(f"rmqfs: {root}: {res.count('error')} errors", file=sys.stderr)
    return 1


def _verify_json(res) -> dict:
    """The verification as one JSON object (offsets in bytes, RocketMQ-style field names)."""
    return {"ok": res.ok, "errors": res.count("error"), "warnings": res.count("warning"),
            "segments": res.segments, "segmentSize": res.segment_size, "records": res.records,
            "commitLogMinOffset": res.commitlog_min, "commitLogMaxOffset": res.commitlog_end,
            "firstBadOffset": res.first_bad, "queues": res.queues, "units": res.units,
            "indexFiles": res.index_files, "indexItems": res.index_items,
            "lockHolder": res.lock_holder, "byHand": res.by_hand(),
            "problems": [{"severity": p.severity, "kind": p.kind, "path": p.path,
                          "offset": p.offset, "what": p.what} for p in res.problems],
            "notListed": [{"severity": sev, "kind": kind, "path": path, "count": n}
                          for (path, kind), (sev, n) in sorted(res.suppressed.items())]}


def _print_verify(res) -> None:
    if res.lock_holder:
        print(f"store in use by process {res.lock_holder}: records still being written may "
              "show as lag")
    if res.segments:
        print(f"CommitLog:    {res.segments} files of {res.segment_size} bytes, {res.records} "
              f"records, offsets [{res.commitlog_min}, {res.commitlog_end})")
    else:
        print("CommitLog:    no files")
    print(f"ConsumeQueue: {res.queues} queues, {res.units} units")
    print(f"IndexFile:    {res.index_files} files, {res.index_items} items")
    for p in res.problems:
        print(str(p))
    for (path, kind), (sev, n) in sorted(res.suppressed.items()):
        print(f"{sev.upper():7} {path}: {n} more {kind} problems")
    n_err, n_warn = res.count("error"), res.count("warning")
    if n_err:
        where = f"; the CommitLog is valid up to offset {res.first_bad}" \
            if res.first_bad is not None else ""
        by_hand = res.by_hand()  # what recover refuses: say what to do instead
        print(f"FAILED: {n_err} errors, {n_warn} warnings{where} "
              + ("(rmqfs recover repairs them)" if not by_hand else
                 "(rmqfs recover cannot repair them all)"))
        for line in by_hand:
            print(f"BY HAND: {line}")
    else:
        print(f"OK: no errors, {n_warn} warnings")


def cmd_recover(args) -> int:
    """``rmqfs recover STORE``: repair what verify finds; exit 1 if verify still fails."""
    from engine.verify import recover_store
    root = _check_store(args.store)
    report = recover_store(root, _config(args), _progress, rebuild=args.rebuild)
    before = report.before
    print(f"before: {before.count('error')} errors, {before.count('warning')} warnings")
    for line in report.actions:
        print(line)
    after = report.after
    print(f"after:  {after.count('error')} errors, {after.count('warning')} warnings; "
          f"{after.records} records, CommitLog [{after.commitlog_min}, {after.commitlog_end})")
    if not after.ok:
        for p in after.errors:
            print(str(p))
        print(f"rmqfs: {root}: {after.count('error')} errors remain", file=sys.stderr)
        return 1
    return 0


# ----------------------------------------------------------------------------------------------
# produce

def cmd_produce(args) -> int:
    """``rmqfs produce STORE -t TOPIC [FILE...]``: one message per line (stdin without FILE)."""
    from engine.config import validate_queue_nums, validate_topic_name
    from engine.errors import StoreError
    from engine.store import Message
    properties = {}
    for item in args.property or ():
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise AdminError(f"bad --property {item!r}: use NAME=VALUE")
        properties[k] = v
    from engine.validation import check_message, check_topic_creatable
    # the message fields shared by every line, checked once before the store is opened
    check_message(Message(args.topic, b"", tags=args.tags, keys=args.keys,
                          properties=properties or None, queue_id=args.queue_id))
    for path in args.files:
        if path != "-" and (not os.path.exists(path) or os.path.isdir(path)):
            raise AdminError(f"{path}: no such file")
    validate_topic_name(args.topic)
    if args.queues is not None:
        try:
            validate_queue_nums(args.queues)
        except StoreError as exc:
            raise AdminError(f"--queues: {exc}") from None
    path = os.path.abspath(args.store)
    if not args.create and (not os.path.exists(path) or (os.path.isdir(path)
                                                         and not os.listdir(path))):
        raise AdminError(f"{path} holds no store yet; pass -c to create it with topic "
                         f"{args.topic}")
    with open_store(args, write=True, create=True) as store:
        if store.topic_config.get(args.topic) is None:
            if not args.create:
                raise AdminError(f"topic {args.topic} does not exist; pass -c to create it "
                                 f"({args.queues or store.config.default_topic_queue_nums} "
                                 "queues)")
            check_topic_creatable(args.topic)  # AdminBrokerProcessor: no system topics
            store.create_topic(args.topic, args.queues)
            print(f"created topic {args.topic} with "
                  f"{store.topic_config.get(args.topic).write_queue_nums} queues")
        if args.queue_id is not None:
            _queue(store, args.topic, args.queue_id)
        counts: dict[int, int] = {}
        first = last = None
        total = 0

        def put(lines):
            nonlocal first, last, total
            msgs = [Message(args.topic, line, tags=args.tags, keys=args.keys,
                            properties=properties or None, queue_id=args.queue_id)
                    for line in lines if line]  # an empty line is no message
            if not msgs:
                return
            try:
                results = store.put_messages(msgs)
            except StoreError as exc:
                raise AdminError(f"{exc}; {total} messages before lines {total + 1}.."
                                 f"{total + len(msgs)} were produced, none after") from None
            for r in results:
                counts[r.queue_id] = counts.get(r.queue_id, 0) + 1
                first = first or r
                last = r
                total += 1
                if args.verbose:
                    print(f"{r.msg_id} {r.uniq_key} {r.queue_id} {r.queue_offset}")

        for path in args.files or ["-"]:
            _produce_stream(path, put)
        store.flush()
    if total:
        per_queue = ", ".join(f"{q}: {n}" for q, n in sorted(counts.items()))
        print(f"produced {total} messages to {args.topic} (queue: count {per_queue}), "
              f"CommitLog [{first.commitlog_offset}, {last.commitlog_offset + last.size})")
    else:
        print(f"produced 0 messages to {args.topic}")
    return 0


def _produce_stream(path: str, put, batch_bytes: int = 1 << 20) -> None:
    """Split ``path`` (``-`` = stdin) into lines and put them in batches of about 1 MiB."""
    if path == "-":
        f = sys.stdin.buffer
        size = None
    else:
        f = open(path, "rb")
        size = os.path.getsize(path)
    bar = _progress(size or 0, os.path.basename(path) if path != "-" else "stdin")
    try:
        rest = b""
        while True:
            chunk = f.read(batch_bytes)
            if not chunk:
                break
            bar.update(len(chunk))
            data = rest + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            put(data[:cut].split(b"\n"))
            rest = data[cut + 1:]
        if rest:
            put([rest])
    finally:
        bar.close()
        if path != "-":
            f.close()


# ----------------------------------------------------------------------------------------------
# print-msg / query-msg

def cmd_print_msg(args) -> int:
    """``printMsg`` / ``printMsgByQueue``: messages of a topic (or one queue) in a time range."""
    from engine.javahash import tags_code
    with open_store(args) as store:
        topic = _topic(store, args.topic)
        queues = [_queue(store, topic, args.queue_id)] if args.queue_id is not None \
            else store.queue_ids(topic)
        begin = parse_time(args.begin) if args.begin else None
        end = parse_time(args.end) if args.end else None
        tags = _parse_sub_expression(args.sub_expression)
        codes = {tags_code(t) for t in tags} if tags else None
        print_body = args.print_body.lower() != "false"
        shown = 0
        for q in queues:
            cq = store.consume_queue(topic, q)
            if cq is None:
                continue
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            if begin is not None:
                lo = store.offset_by_time(topic, q, begin)
            if end is not None:
                hi = store.offset_by_time(topic, q, end)
            for _, off, size, tc in cq.iter_units(lo, hi):
                if codes is not None and tc not in codes:
                    continue
                rec = store.read_record(off, size)
                if tags is not None and rec.tags not in tags:
                    continue
                print(_json_line(rec) if args.json else
                      _message_line(rec, print_body, args.charset))
                shown += 1
        if args.count:
            print(f"{shown} messages", file=sys.stderr)
    return 0


def cmd_query_msg(args) -> int:
    """``queryMsgByKey`` (-k -t), ``queryMsgById`` (-i) and ``queryMsgByOffset`` (-t -q -o)."""
    modes = sum(x is not None for x in (args.key, args.msg_id, args.offset))
    if modes != 1:
        raise AdminError("give one of -k KEY (with -t), -i MSGID, or -o OFFSET (with -t -q)")
    print_body = args.print_body.lower() != "false"
    with open_store(args) as store:
        if args.key is not None:
            if not args.topic:
                raise AdminError("-k needs -t TOPIC")
            topic = _topic(store, args.topic)
            begin = parse_time(args.begin) if args.begin else 0
            end = parse_time(args.end) if args.end else 2**63 - 1
            recs = store.query_by_key(topic, args.key, args.max_num, begin, end)
            if not recs:
                raise AdminError(f"no message of {topic} with key {args.key}")
            if args.json:
                for rec in recs:
                    print(_json_line(rec))
                return 0
            print(f"{'#Message ID':<34} {'#UNIQ_KEY':<34} {'#QID':>4} {'#Offset':>10}")
            for rec in recs:
                print(f"{rec.msg_id:<34} {rec.uniq_key or '':<34} {rec.queue_id:>4} "
                      f"{rec.queue_offset:>10}")
            return 0
        if args.msg_id is not None:
            recs = _by_msg_id(store, args.msg_id, args.topic)
        else:
            if not args.topic or args.queue_id is None:
                raise AdminError("-o needs -t TOPIC and -q QUEUE")
            topic = _topic(store, args.topic)
            q = _queue(store, topic, args.queue_id)
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            if not lo <= args.offset < hi:
                raise AdminError(f"offset {args.offset} is not in {topic}/{q}: queue offsets "
                                 f"are [{lo}, {hi})")
            recs = [store.get_message(topic, q, args.offset)]
        for i, rec in enumerate(recs):
            if args.json:
                print(_json_line(rec))
                continue
            if i:
                print()
            _print_detail(rec, print_body, args.charset)
    return 0


def _by_msg_id(store, msg_id: str, topic: str | None):
    """An offset msgId (32/56 hex: store host + CommitLog offset), else a UNIQ_KEY."""
    from engine.message import decode_offset_msg_id
    msg_id = msg_id.strip()
    try:
        _, offset = decode_offset_msg_id(msg_id)
    except ValueError:
        offset = None
    if offset is not None:
        rec = store.message_at(offset)
        if rec is not None and rec.msg_id == msg_id.upper() and (
                topic is None or rec.topic == topic):
            return [rec]
    topics = [_topic(store, topic)] if topic else store.topic_names()
    recs = []
    for t in topics:
        recs += [r for r in store.query_by_key(t, msg_id) if r.uniq_key == msg_id]
    if not recs:
        raise AdminError(f"no message with msgId {msg_id} (neither an offset msgId of this "
                         "store nor a UNIQ_KEY" + (f" of {topic}" if topic else "") + ")")
    return recs


# ----------------------------------------------------------------------------------------------
# topics and consumers

def cmd_topic_list(args) -> int:
    """``topicList``: every topic, one per line."""
    with open_store(args) as store:
        for t in store.topic_names():
            print(t)
    return 0


def cmd_topic_status(args) -> int:
    """``topicStatus``: per queue min/max offset and the store time of the last message."""
    with open_store(args) as store:
        topic = _topic(store, args.topic)
        broker = store.config.broker_name
        print(f"{'#Broker Name':<24} {'#QID':>4} {'#Min Offset':>12} {'#Max Offset':>12} "
              f"{'#Last Updated'}")
        for q in store.queue_ids(topic):
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            last = ""
            if hi > lo:
                last = format_time(store.get_message(topic, q, hi - 1).store_timestamp)
            print(f"{broker:<24} {q:>4} {lo:>12} {hi:>12} {last}".rstrip())
    return 0


def cmd_consumer_progress(args) -> int:
    """``consumerProgress``: one group's queues, or the diff total of every group."""
    with open_store(args) as store:
        if args.topic:
            _topic(store, args.topic)
        groups = store.group_names()
        if args.group is None:
            print(f"{'#Group':<40} {'#Diff Total':>12}")
            for g in groups:
                if args.topic and args.topic not in store.consumer_offsets.topics_of(g):
                    continue  # the group never consumed this topic
                rows = consumer_progress(store, g, args.topic)
                print(f"{g:<40} {diff_total(rows):>12}")
            return 0
        if args.group not in groups:
            raise AdminError(f"consumer group {args.group} does not exist (groups: "
                             f"{', '.join(groups) or 'none'})")
        rows = consumer_progress(store, args.group, args.topic)
        broker = store.config.broker_name
        print(f"{'#Topic':<32} {'#Broker Name':<16} {'#QID':>4} {'#Broker Offset':>14} "
              f"{'#Consumer Offset':>16} {'#Diff':>10} {'#LastTime'}")
        for r in rows:
            print(f"{r['topic']:<32} {broker:<16} {r['queueId']:>4} {r['brokerOffset']:>14} "
                  f"{r['consumerOffset']:>16} {r['diff']:>10} "
                  f"{format_time(r['lastTimestamp'])}")
        print()
        print(f"Consume Diff Total: {diff_total(rows)}")
    return 0


def cmd_reset_offset(args) -> int:
    """``resetOffsetByTime``: commit, for every queue of the topic (or ``-q``), the first offset
    stored at or after ``-s`` time, or ``-o`` offset. Written atomically to
    consumerOffset.json; refused while a mount or broker holds the store."""
    from engine.config import validate_group_name
    if (args.timestamp is None) == (args.offset is None):
        raise AdminError("give -s TIMESTAMP (ms, yyyy-MM-dd#HH:mm:ss:SSS or now) or -o OFFSET")
    validate_group_name(args.group)
    ts = parse_time(args.timestamp, allow_now=True) if args.timestamp is not None else None
    with open_store(args, write=True) as store:
        topic = _topic(store, args.topic)
        queues = [_queue(store, topic, args.queue_id)] if args.queue_id is not None \
            else store.queue_ids(topic)
        plan = []
        for q in queues:
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            if ts is not None:
                new = store.offset_by_time(topic, q, ts) if hi > lo else hi
            else:
                new = args.offset
                if not lo <= new <= hi:
                    raise AdminError(f"offset {new} is outside [{lo}, {hi}] of {topic}/{q}")
            old = store.consumer_offsets.query(args.group, topic, q)
            plan.append((q, old, new))
        for q, _, new in plan:
            store.commit_offset(args.group, topic, q, new)
        print(f"{'#Topic':<32} {'#QID':>4} {'#Old Offset':>12} {'#New Offset':>12}")
        for q, old, new in plan:
            print(f"{topic:<32} {q:>4} {old if old >= 0 else '-':>12} {new:>12}")
    return 0


def cmd_clean(args) -> int:
    """``deleteExpiredCommitLog``: run the expiry now and print what was deleted."""
    with open_store(args, write=True) as store:
        if args.file_reserved_time is not None:
            store.config.file_reserved_time = args.file_reserved_time
        before = store.commitlog.min_offset
        report = store.delete_expired_files(manual=True)
        for kind, paths in (("CommitLog", report.commitlog),
                            ("ConsumeQueue", report.consumequeue), ("IndexFile", report.index)):
            for p in paths:
                print(f"deleted {kind} {os.path.relpath(p, store.root)}")
        print(f"deleted {report.deleted} files; CommitLog min offset {before} -> "
              f"{report.min_offset} (fileReservedTime {store.config.file_reserved_time} h)")
    return 0


def cmd_snapshot_verify(args) -> int:
    """Check a copy of a snapshot (MNT/snapshots/NAME copied with tar, rsync, restic restore)
    against its SNAPSHOT.json: every file named there must exist with its size and CRC32C.
    Prints one line per problem (missing, short, damaged file) and a summary; exit 1 on any
    problem. Files the manifest does not name are reported as extra (not an error)."""
    from engine.snapshot import MANIFEST_NAME, verify_copy
    directory = args.directory
    if not os.path.isdir(directory):
        raise AdminError(f"{directory} is not a directory")
    if not os.path.isfile(os.path.join(directory, MANIFEST_NAME)):
        raise AdminError(f"{directory} has no {MANIFEST_NAME} (not a copy of a snapshot)")
    start = time.monotonic()
    doc, problems = verify_copy(directory, workers=args.jobs, progress=_progress)
    errors = [(rel, what) for rel, what in problems if what != "extra"]
    elapsed = time.monotonic() - start
    size = sum(int(v["size"]) for v in doc["files"].values())
    if args.json:
        print(json.dumps({"name": doc.get("name"), "commitLogOffset": doc.get("commitLogOffset"),
                          "files": len(doc["files"]), "bytes": size,
                          "problems": [{"file": r, "problem": w} for r, w in problems],
                          "ok": not errors}))
    else:
        for rel, what in problems:
            print(f"{'WARNING' if what == 'extra' else 'ERROR'} {rel}: {what}")
        verdict = "OK" if not errors else f"FAILED: {len(errors)} bad files"
        print(f"snapshot {doc.get('name')} (CommitLog offset {doc.get('commitLogOffset')}, "
              f"{doc.get('messageCount')} messages): {len(doc['files'])} files, {size:,} bytes "
              f"in {elapsed:.2f} s: {verdict}")
    return 1 if errors else 0


# ----------------------------------------------------------------------------------------------
# argparse

def _doc(func) -> str:
    """A command's docstring for --help, without the reST markup."""
    return (func.__doc__ or "").replace("``", "")


def _store_arg(p) -> None:
    p.add_argument("store", metavar="STORE", help="the store directory (storePathRootDir)")
    p.add_argument("--config", metavar="broker.conf",
                   help="a RocketMQ broker.conf (segment sizes, index geometry, ...)")


def _body_args(p) -> None:
    p.add_argument("-d", "--print-body", nargs="?", const="true", default="true",
                   metavar="true|false", help="print the body (default true)")
    p.add_argument("-c", "--charset", default="UTF-8", help="charset of bodies (default UTF-8)")
    p.add_argument("--json", action="store_true",
                   help="one JSON line per message, as the mount's messages.jsonl")


def add_subcommands(sub) -> None:
    """Register the offline commands on the ``rmqfs`` subparsers."""
    p = sub.add_parser("verify", help="check every record, CRC, ConsumeQueue unit and index item",
                       description=_doc(cmd_verify))
    _store_arg(p)
    p.add_argument("--json", action="store_true", help="the result as one JSON object")
    p.set_defaults(func=_run(cmd_verify))

    p = sub.add_parser("recover", help="repair what verify finds (truncate a dirty tail, rebuild "
                       "derived files)", description=_doc(cmd_recover))
    _store_arg(p)
    p.add_argument("--rebuild", action="store_true",
                   help="rebuild every ConsumeQueue and IndexFile from the CommitLog")
    p.set_defaults(func=_run(cmd_recover))

    p = sub.add_parser("produce", help="append messages, one per line of FILEs or stdin",
                       description=_doc(cmd_produce))
    p.__class__ = _IntermixedParser  # FILEs may come before or after the options
    _store_arg(p)
    p.add_argument("files", nargs="*", metavar="FILE", help="input files (- or none: stdin)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--create", action="store_true", help="create the topic if missing")
    p.add_argument("--queues", type=int, help="queues of a created topic "
                   "(default defaultTopicQueueNums, 4)")
    p.add_argument("-a", "--tags", help="TAGS of every message")
    p.add_argument("-k", "--keys", help="KEYS of every message (space separated)")
    p.add_argument("-i", "--queue-id", type=int, help="put every message in this queue "
                   "(default round-robin)")
    p.add_argument("--property", action="append", metavar="NAME=VALUE",
                   help="a user property (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print msgId, UNIQ_KEY, queueId and queueOffset of each message")
    p.set_defaults(func=_run(cmd_produce))

    p = sub.add_parser("print-msg", help="print a topic's messages (mqadmin printMsg)",
                       description=_doc(cmd_print_msg))
    _store_arg(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-i", "--queue-id", type=int, help="only this queue (printMsgByQueue)")
    p.add_argument("-b", "--begin", help=f"from this store time ({TIME_FORMAT_HELP})")
    p.add_argument("-e", "--end", help=f"before this store time ({TIME_FORMAT_HELP})")
    p.add_argument("-s", "--sub-expression", help="tags: * or TagA || TagB")
    p.add_argument("--count", action="store_true", help="print the count on stderr")
    _body_args(p)
    p.set_defaults(func=_run(cmd_print_msg))

    p = sub.add_parser("query-msg", help="find messages by key, msgId or queue offset",
                       description=_doc(cmd_query_msg))
    _store_arg(p)
    p.add_argument("-t", "--topic")
    p.add_argument("-k", "--key", help="message key (queryMsgByKey; needs -t)")
    p.add_argument("-i", "--msg-id", help="offset msgId or UNIQ_KEY (queryMsgById)")
    p.add_argument("-q", "--queue-id", type=int, help="queue of -o")
    p.add_argument("-o", "--offset", type=int, help="queue offset (queryMsgByOffset; -t -q)")
    p.add_argument("-b", "--begin", help=f"key query: from this time ({TIME_FORMAT_HELP})")
    p.add_argument("-e", "--end", help=f"key query: until this time ({TIME_FORMAT_HELP})")
    p.add_argument("-m", "--max-num", type=int, default=64, help="key query: at most (64)")
    _body_args(p)
    p.set_defaults(func=_run(cmd_query_msg))

    p = sub.add_parser("topic-list", help="list the topics (mqadmin topicList)")
    _store_arg(p)
    p.set_defaults(func=_run(cmd_topic_list))

    p = sub.add_parser("topic-status", help="per queue min/max offset and last update time",
                       description=_doc(cmd_topic_status))
    _store_arg(p)
    p.add_argument("-t", "--topic", required=True)
    p.set_defaults(func=_run(cmd_topic_status))

    p = sub.add_parser("consumer-progress", help="brokerOffset, consumerOffset and diff per queue",
                       description=_doc(cmd_consumer_progress))
    _store_arg(p)
    p.add_argument("-g", "--group", help="consumer group (default: every group's diff total)")
    p.add_argument("-t", "--topic", help="only this topic")
    p.set_defaults(func=_run(cmd_consumer_progress))

    p = sub.add_parser("reset-offset", help="commit offsets by time or value "
                       "(mqadmin resetOffsetByTime)", description=_doc(cmd_reset_offset))
    _store_arg(p)
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", help=f"{TIME_FORMAT_HELP}, or now")
    p.add_argument("-o", "--offset", type=int, help="this queue offset")
    p.add_argument("-q", "--queue-id", type=int, help="only this queue")
    p.set_defaults(func=_run(cmd_reset_offset))

    p = sub.add_parser("snapshot-verify", help="check a copy of a snapshot against its "
                       "SNAPSHOT.json (sizes, CRC32C)", description=_doc(cmd_snapshot_verify))
    p.add_argument("directory", metavar="DIR", help="the copy (holds SNAPSHOT.json)")
    p.add_argument("-j", "--jobs", type=int, help="threads summing files (default: one per CPU)")
    p.add_argument("--json", action="store_true", help="the result as one JSON object")
    p.set_defaults(func=_run(cmd_snapshot_verify))

    p = sub.add_parser("clean", help="delete expired files now (mqadmin deleteExpiredCommitLog)",
                       description=_doc(cmd_clean))
    _store_arg(p)
    p.add_argument("--file-reserved-time", type=float, metavar="HOURS",
                   help="override fileReservedTime (hours; default 72 or broker.conf)")
    p.set_defaults(func=_run(cmd_clean))


def _check_common(args) -> None:
    import codecs
    if getattr(args, "charset", None):
        try:
            codecs.lookup(args.charset)
        except LookupError:
            raise AdminError(f"unknown charset {args.charset}") from None
    if getattr(args, "print_body", None) is not None and \
            args.print_body.lower() not in ("true", "false"):
        raise AdminError(f"-d takes true or false, not {args.print_body!r}")


def _run(func):
    """Wrap a command: known failures print ``rmqfs: message`` and return 1."""
    def run(args) -> int:
        from engine.errors import StoreError
        try:
            _check_common(args)
            return func(args)
        except AdminError as exc:
            print(f"rmqfs: {exc}", file=sys.stderr)
        except StoreError as exc:
            print(f"rmqfs: {exc}", file=sys.stderr)
        except BrokenPipeError:
            sys.stderr.close()  # a closed pipe (| head) is not a failure
            return 0
        except OSError as exc:
            name = f"{exc.filename}: " if exc.filename else ""
            print(f"rmqfs: {name}{exc.strerror or exc}", file=sys.stderr)
        except ValueError as exc:
            print(f"rmqfs: {exc}", file=sys.stderr)
        return 1
    run.__doc__ = func.__doc__
    return run


class _IntermixedParser(argparse.ArgumentParser):
    """Lets positionals follow options (``produce STORE -t T a.log b.log``)."""

    _inner = False

    def parse_known_args(self, args=None, namespace=None):
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def build_parser() -> argparse.ArgumentParser:
    """A parser with only the offline commands (for tests and ``python -m mount.admin``)."""
    p = argparse.ArgumentParser(prog="rmqfs")
    add_subcommands(p.add_subparsers(dest="command", required=True))
    return p
