"""Offline commands on a store directory: RocketMQ's ``mqadmin`` as a user knows it, on files.

Every command takes the store directory as its first argument (``rmqfs CMD STORE ...``, like
``rmqfs mount STORE MNT``), and ``--config broker.conf`` for a broker's settings. These are the
rmqfs names with rmqfs's options; the mqadmin names (``rmqfs queryMsgByOffset``) with mqadmin's
own option letters are one table over them, mount/mqadmin.py (docs/offline-commands.md).
Every time option takes one syntax
(:func:`parse_time`).

Reading commands (verify, print-msg, query-msg, topic-status, topic-list, consumer-progress,
query-cq, stats-all, get-broker-config, broker-status) open the store read-only: they work next
to a running mount or broker. Writing commands (recover, produce, reset-offset, clean,
delete-topic, update-topic, delete-sub-group, update-sub-group, clone-group-offset) take the
store's lock like a broker does and refuse, naming the
holder's pid, while a mount or broker runs: its in-memory state would overwrite theirs. (A
running mount takes offsets through ``MNT/groups/G/T/Q/offset`` and messages through
``MNT/topics/T/produce`` instead.)

``snapshot-verify DIR`` works on a copy of a snapshot (``MNT/snapshots/NAME``), not on a store:
it checks every file against the copy's ``SNAPSHOT.json`` (size, CRC32C), in a directory or at
a URI. ``snapshot-upload SRC URI`` and ``snapshot-download URI DIR`` move snapshots to and from
object storage (engine/live/objectstore.py). ``verify URI`` checks a snapshot in object storage
in place, through its store source (engine/live/objectsource.py); ``recover URI`` is refused
(exit 2): only a local store is written.

Exit status: 0 on success, 1 with ``rmqfs: <message>`` on stderr on failure (and when
``verify`` finds an error), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import operator
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias, TypeVar

from rmqfs.engine.errors import StoreLockedError, UnsupportedLayoutError
from rmqfs.engine.live.progress import consumer_progress, diff_total

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from tqdm import tqdm

    from rmqfs.engine.format.message import MessageRecord
    from rmqfs.engine.format.tracedata import TraceEntry
    from rmqfs.engine.store import MessageStore, StoreConfig
    from rmqfs.engine.tools.verify import VerifyResult

ParserT = TypeVar("ParserT", bound=argparse.ArgumentParser)

#: A command's handler: the parsed arguments in, the exit status out.
Command = Callable[[argparse.Namespace], int]
#: What ``ArgumentParser.add_subparsers`` returns, on which the commands are registered (its
#: parsers are of the class of the parser it was added to: ``rmqfs``'s is a subclass). A string:
#: the class is subscriptable for type checkers only.
Subparsers: TypeAlias = "argparse._SubParsersAction[ParserT]"

TIME_FORMAT_HELP = "epoch ms, yyyy-MM-dd#HH:mm:ss:SSS (local time) or now"


class AdminError(Exception):
    """A failure to report as ``rmqfs: <message>`` with exit status 1."""


class UsageError(AdminError):
    """A command line that misses an argument (or gives two that exclude each other):
    ``rmqfs: <message>`` with exit status 2, as argparse's own usage errors."""


# ----------------------------------------------------------------------------------------------
# helpers


def parse_time(text: str) -> int:
    """Epoch ms from ``text``, the one syntax of every time option: digits (ms),
    ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time (mqadmin's ``UtilAll.parseDate`` pattern of
    ``resetOffsetByTime -s`` and ``printMsg -b/-e``; ``SSS`` is milliseconds), or ``now``
    (resetOffsetByTime's ``now``)."""
    text = text.strip()
    if text.lower() == "now":
        return int(time.time() * 1000)
    if re.fullmatch(r"-?[0-9]+", text):
        ms = int(text)
        if -(1 << 63) <= ms < 1 << 63:  # (mqadmin's Long.parseLong)
            return ms
    m = re.fullmatch(r"([0-9]{4}-[0-9]{2}-[0-9]{2}#[0-9]{2}:[0-9]{2}:[0-9]{2}):([0-9]{1,3})", text)
    try:
        if m is None:
            raise ValueError
        dt = datetime.datetime.strptime(m.group(1), "%Y-%m-%d#%H:%M:%S")
    except ValueError:
        raise AdminError(f"bad time {text!r}: use {TIME_FORMAT_HELP}") from None
    return int(time.mktime(dt.timetuple())) * 1000 + int(m.group(2))


def format_time(ms: int) -> str:
    """``yyyy-MM-dd HH:mm:ss,SSS`` in local time, as mqadmin prints times."""
    if ms <= 0:
        return "-"
    t = time.localtime(ms // 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", t) + f",{ms % 1000:03d}"


def _progress(total: int, desc: str, unit: str = "B") -> tqdm[NoReturn]:
    """The progress factory of every long command (engine.service.workprogress): a tqdm bar on stderr,
    hidden when stderr is not a terminal."""
    from .progress import terminal_bar

    return terminal_bar(total, desc, unit)


def broker_config(args: argparse.Namespace) -> StoreConfig | None:
    """The StoreConfig of ``--config broker.conf``, or None without it. Raises AdminError
    when the file cannot be read, ValueError for a bad value."""
    from rmqfs.engine.store import StoreConfig

    if getattr(args, "config", None):
        try:
            return StoreConfig.from_broker_conf(args.config)
        except OSError as exc:
            raise AdminError(f"cannot read {args.config}: {exc.strerror}") from None
    return None


def _check_store(path: str) -> str:
    from rmqfs.engine.tools.verify import check_store_dir

    root = os.path.abspath(path)
    check_store_dir(root)
    return root


def _through_mount(args: argparse.Namespace, mnt: str) -> str:
    """What a write command does through the mount at ``mnt`` that holds its store (the mount
    keeps offsets and the CommitLog tail in memory, so the offline writer must not race it)."""
    cmd = getattr(args, "command", "")
    topic = getattr(args, "topic", None) or "TOPIC"
    group = getattr(args, "group", None) or "GROUP"
    queue = getattr(args, "queue_id", None)
    q = "QUEUE" if queue is None else str(queue)
    if cmd == "produce":
        return f"produce through it: echo LINE >> {mnt}/topics/{topic}/produce (or cat FILE >>)"
    if cmd == "reset-offset":
        return (
            f"commit through it, one queue at a time: echo OFFSET > "
            f"{mnt}/groups/{group}/{topic}/{q}/offset ({mnt}/topics/{topic}/{q}/by-time/MS is "
            "the first message stored at or after epoch ms MS, with its queueOffset)"
        )
    if cmd == "clone-group-offset":
        src = getattr(args, "src_group", None) or "SRC"
        dest = getattr(args, "dest_group", None) or "DEST"
        return (
            f"copy through it: mkdir -p {mnt}/groups/{dest} (a new group), then one queue at a "
            f"time: cat {mnt}/groups/{src}/{topic}/QUEUE/offset > "
            f"{mnt}/groups/{dest}/{topic}/QUEUE/offset"
        )
    if cmd == "update-topic":
        return (
            f"change it through it: echo '{{\"perm\": 6}}' > {mnt}/topics/{topic}/topic.json "
            f"(mkdir {mnt}/topics/{topic} creates a topic)"
        )
    if cmd == "delete-topic":
        return f"delete it through it: rmdir {mnt}/topics/{topic}"
    if cmd == "delete-sub-group":
        return f"delete it through it: rmdir {mnt}/groups/{group} (its offsets go too, as -r true)"
    if cmd == "update-sub-group":
        return (
            f"mkdir {mnt}/groups/{group} creates a group through it; a group's settings change "
            f"with the store unmounted: rmqfs umount {mnt}"
        )
    return f"unmount it first: rmqfs umount {mnt}"


def _locked_hint(args: argparse.Namespace, exc: StoreLockedError) -> str:
    """The message for a write command refused by the store's lock: the holder, and what to
    do instead (through its mount when the holder is an rmqfs mount, else stop the broker)."""
    from .mounts import mountpoint_of

    mnt = mountpoint_of(exc.holder) if exc.holder else None
    if mnt is not None:
        return f"{exc}: it is mounted on {mnt}; {_through_mount(args, mnt)}"
    return (
        f"{exc}; stop it first (a broker: use mqadmin against it; a mount: rmqfs umount MNT, "
        "or write through the mount's files)"
    )


def open_store(args: argparse.Namespace, write: bool = False, create: bool = False) -> MessageStore:
    """Open ``args.store``: read-only unless ``write`` (which takes the lock).

    ``create``: a missing or empty directory becomes a new store. Raises NotAStoreError for a
    path that is not a store; StoreLockedError names the holder.
    """
    from rmqfs.engine.store import MessageStore

    path = os.path.abspath(args.store)
    if create and (not os.path.exists(path) or (os.path.isdir(path) and not os.listdir(path))):
        root = path
    else:
        root = _check_store(path)
    # A one-shot read follows a live writer (a broker, a mount) but does not stay attached to
    # a store no one writes: brokerStatus said "follower: True" of a cleanly closed store.
    from rmqfs.engine.service.lock import lock_holder

    follow = None if write else lock_holder(root) is not None
    # the open's recovery (long after a crash) shows its progress too
    return MessageStore(
        root, broker_config(args), read_only=not write, follow=follow, progress=_progress
    )


def _topic(store: MessageStore, topic: str) -> str:
    if topic not in store.topic_names():
        known = ", ".join(store.topic_names()) or "none"
        raise AdminError(f"topic {topic} does not exist (topics: {known})")
    return topic


def _queue(store: MessageStore, topic: str, queue_id: int) -> int:
    ids = store.queue_ids(topic)
    if queue_id not in ids:
        raise AdminError(
            f"queue {queue_id} is not a queue of {topic} (queues: {', '.join(map(str, ids))})"
        )
    return queue_id


def _body_text(rec: MessageRecord, charset: str) -> str:
    return rec.plain_body.decode(charset, errors="replace")


def _message_line(rec: MessageRecord, print_body: bool, charset: str) -> str:
    body = _body_text(rec, charset) if print_body else "NOT PRINT BODY"
    keys = " ".join(rec.keys)
    return (
        f"MSGID: {rec.msg_id} topic={rec.topic} queueId={rec.queue_id} "
        f"queueOffset={rec.queue_offset} commitLogOffset={rec.commitlog_offset} "
        f"storeTimestamp={rec.store_timestamp} tags={rec.tags or ''} keys={keys} "
        f"UNIQ_KEY={rec.uniq_key or ''} BODY: {body}"
    )


def _json_line(rec: MessageRecord) -> str:
    from rmqfs.fusefs.render import render_message

    return render_message(rec).decode("utf-8").rstrip("\n")


def _print_detail(rec: MessageRecord, print_body: bool, charset: str) -> None:
    """A message the way ``mqadmin queryMsgById`` shows it."""
    from rmqfs.engine.format.message import host_to_str

    rows = [
        ("OffsetID", rec.msg_id),
        ("Topic", rec.topic),
        ("Tags", f"[{rec.tags or ''}]"),
        ("Keys", f"[{' '.join(rec.keys)}]"),
        ("Queue ID", rec.queue_id),
        ("Queue Offset", rec.queue_offset),
        ("CommitLog Offset", rec.commitlog_offset),
        ("Reconsume Times", rec.reconsume_times),
        ("Born Timestamp", f"{format_time(rec.born_timestamp)} ({rec.born_timestamp})"),
        ("Store Timestamp", f"{format_time(rec.store_timestamp)} ({rec.store_timestamp})"),
        ("Born Host", host_to_str(rec.born_host)),
        ("Store Host", host_to_str(rec.store_host)),
        ("System Flag", rec.sys_flag),
        ("Properties", json.dumps(rec.properties, ensure_ascii=False, sort_keys=True)),
        ("Body CRC", rec.body_crc),
        ("Store Size", rec.store_size),
    ]
    for name, value in rows:
        print(f"{name + ':':<20} {value}")
    print(f"{'Message Body:':<20} {_body_text(rec, charset) if print_body else 'NOT PRINT BODY'}")


# ----------------------------------------------------------------------------------------------
# verify / recover


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every record, CRC, ConsumeQueue unit, index item, config file and the checkpoint
    of STORE, read-only; exit 1 on any error. STORE is a store directory, or a snapshot in
    object storage checked in place, nothing downloaded (a URI snapshot-upload takes:
    s3://bucket/prefix?endpoint_override=host:port&scheme=http, gs://, hdfs://, file://): its
    files read by range from the snapshot's manifest; the checks of a live directory (lock,
    abort file, links) are skipped and listed. recover refuses a URI (exit 2)."""
    from rmqfs.engine.live.location import is_uri
    from rmqfs.engine.tools.verify import verify_store

    config = broker_config(args)
    if is_uri(args.store):
        res = _verify_remote(args.store, config)
        root = res.root
        refusal: str | None = "recover repairs a local store only: snapshot-download it first"
    else:
        root = _check_store(args.store)
        res = verify_store(root, config, _progress)
        refusal = _recover_refusal(root, config)
    if args.json:
        print(json.dumps(_verify_json(res, refusal), indent=1))
    else:
        _print_verify(res, refusal)
    if res.ok:
        return 0
    print(f"rmqfs: {root}: {res.count('error')} errors", file=sys.stderr)
    return 1


def _verify_remote(location: str, config: StoreConfig | None) -> VerifyResult:
    """:func:`engine.tools.verify.verify_store` over the snapshot at the URI ``location``, read
    in place through its store source (``ObjectSource`` without a block cache: each read one
    range read). Raises ObjectStoreError (naming the object) when the server fails, as a
    StoreError the command reports in one line."""
    from rmqfs.engine.live.objectsource import ObjectSource
    from rmqfs.engine.tools.verify import verify_store

    source = ObjectSource(location, None)
    try:
        return verify_store(source.root, config, _progress, source=source)
    finally:
        source.close()


def _recover_refusal(root: str, config: StoreConfig | None) -> str | None:
    """Why ``rmqfs recover`` would refuse the store at ``root`` (a layout rmqfs never writes, in
    its files or in ``config``'s broker.conf settings), None when it would repair it: verify's
    advice names the refusal rather than a repair that cannot happen."""
    from rmqfs.engine.store import StoreConfig
    from rmqfs.engine.tools.verify import check_recoverable

    try:
        check_recoverable(root, config or StoreConfig())
    except UnsupportedLayoutError as exc:
        return str(exc)
    except OSError:
        return None  # (verify itself reports what cannot be read)
    return None


def _verify_json(res: VerifyResult, recover_refused: str | None = None) -> dict[str, Any]:
    """The verification as one JSON object (offsets in bytes, RocketMQ-style field names);
    ``recoverRefused``: why ``recover`` would not repair this store (None: it would)."""
    return {
        "ok": res.ok,
        "errors": res.count("error"),
        "warnings": res.count("warning"),
        "segments": res.segments,
        "segmentSize": res.segment_size,
        "records": res.records,
        "commitLogMinOffset": res.commitlog_min,
        "commitLogMaxOffset": res.commitlog_end,
        "firstBadOffset": res.first_bad,
        "queues": res.queues,
        "units": res.units,
        "indexFiles": res.index_files,
        "indexItems": res.index_items,
        "lockHolder": res.lock_holder,
        "byHand": res.by_hand(),
        "recoverRefused": recover_refused,
        "skipped": res.skipped,
        "problems": [
            {
                "severity": p.severity,
                "kind": p.kind,
                "path": p.path,
                "offset": p.offset,
                "what": p.what,
            }
            for p in res.problems
        ],
        "notListed": [
            {"severity": sev, "kind": kind, "path": path, "count": n}
            for (path, kind), (sev, n) in sorted(res.suppressed.items())
        ],
    }


def _print_verify(res: VerifyResult, recover_refused: str | None = None) -> None:
    """verify's report; ``recover_refused``: why ``recover`` would not repair this store."""
    if res.lock_holder:
        print(
            f"store in use by process {res.lock_holder}: records still being written may "
            "show as lag"
        )
    if res.segments:
        print(
            f"CommitLog:    {res.segments} files of {res.segment_size} bytes, {res.records} "
            f"records, offsets [{res.commitlog_min}, {res.commitlog_end})"
        )
    else:
        print("CommitLog:    no files")
    print(f"ConsumeQueue: {res.queues} queues, {res.units} units")
    print(f"IndexFile:    {res.index_files} files, {res.index_items} items")
    for why in res.skipped:
        print(f"SKIPPED {why}")
    for p in res.problems:
        print(str(p))
    for (path, kind), (sev, n) in sorted(res.suppressed.items()):
        print(f"{sev.upper():7} {path}: {n} more {kind} problems")
    n_err, n_warn = res.count("error"), res.count("warning")
    if n_err:
        where = (
            f"; the CommitLog is valid up to offset {res.first_bad}"
            if res.first_bad is not None
            else ""
        )
        by_hand = res.by_hand()  # what recover refuses: say what to do instead
        if recover_refused:
            advice = "(rmqfs recover does not repair this store)"
        elif by_hand:
            advice = "(rmqfs recover cannot repair them all)"
        else:
            advice = "(rmqfs recover repairs them)"
        print(f"FAILED: {n_err} errors, {n_warn} warnings{where} {advice}")
        if recover_refused:
            print(f"BY HAND: {recover_refused}")
        for line in by_hand:
            print(f"BY HAND: {line}")
    else:
        print(f"OK: no errors, {n_warn} warnings")


def cmd_recover(args: argparse.Namespace) -> int:
    """``rmqfs recover STORE``: repair what verify finds; exit 1 if verify still fails. A local
    store only: a snapshot in object storage (a URI) is refused with exit status 2."""
    from rmqfs.engine.live.location import is_uri, redact
    from rmqfs.engine.tools.verify import recover_store

    if is_uri(args.store):
        print(
            f"rmqfs: recover repairs a local store only; {redact(args.store)} is a snapshot in "
            "object storage, which rmqfs never writes: rmqfs verify checks it in place; to "
            "repair it, download it (rmqfs snapshot-download URI DIR), recover DIR and upload "
            "it again (rmqfs snapshot-upload)",
            file=sys.stderr,
        )
        return 2
    root = _check_store(args.store)
    report = recover_store(root, broker_config(args), _progress, rebuild=args.rebuild)
    before, after = report.before, report.after
    assert before is not None and after is not None  # recover_store verifies before and after
    print(f"before: {before.count('error')} errors, {before.count('warning')} warnings")
    for line in report.actions:
        print(line)
    print(
        f"after:  {after.count('error')} errors, {after.count('warning')} warnings; "
        f"{after.records} records, CommitLog [{after.commitlog_min}, {after.commitlog_end})"
    )
    if not after.ok:
        for p in after.errors:
            print(str(p))
        print(f"rmqfs: {root}: {after.count('error')} errors remain", file=sys.stderr)
        return 1
    return 0


# ----------------------------------------------------------------------------------------------
# produce


def _create_hint(args: argparse.Namespace, queues: int | None = None) -> str:
    """How to create the missing topic for ``produce``, in the option letters of the name it
    was run by: ``-c`` is rmqfs produce's ``--create`` but mqadmin sendMessage's tags, and
    mqadmin creates topics with updateTopic (``args.mqadmin``: the mqadmin name the command was
    typed as, set by :mod:`mount.mqadmin`). ``queues``: the count ``-c`` would create, or None
    when there is no store yet (then only ``produce -c`` creates it)."""
    n = f" ({queues} queues)" if queues else ""
    if not getattr(args, "mqadmin", None):
        return f"pass -c (--create) to create it{n or f' with topic {args.topic}'}"
    produce = f"rmqfs produce {args.store} -t {args.topic} -c{n}"
    if queues is None:
        return f"create it with {produce}"
    return (
        f"create it first, as mqadmin does: rmqfs updateTopic {args.store} -t {args.topic}; "
        f"or produce with {produce}"
    )


def cmd_produce(args: argparse.Namespace) -> int:
    """``rmqfs produce STORE -t TOPIC [FILE...]``: one message per line (stdin without FILE)."""
    from rmqfs.engine.errors import StoreError
    from rmqfs.engine.format.config import validate_queue_nums, validate_topic_name
    from rmqfs.engine.service.putmessage import PutResult
    from rmqfs.engine.service.validation import check_topic_creatable
    from rmqfs.engine.store import Message

    properties, timing = _produce_fields(args)
    if args.body is not None and args.files:
        raise UsageError("give FILEs or --body, not both")
    if args.body == "":
        # (mqadmin sendMessage: Validators.checkMessage)
        raise AdminError("--body: the message body length is zero (RocketMQ refuses empty bodies)")
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
    if not args.create and (
        not os.path.exists(path) or (os.path.isdir(path) and not os.listdir(path))
    ):
        raise AdminError(f"{path} holds no store yet; {_create_hint(args)}")
    with open_store(args, write=True, create=True) as store:
        if (args.deliver_time is not None or args.delay_ms is not None) and not args.delay_level:
            from rmqfs.engine.service.putmessage import timer_enabled

            if not timer_enabled(store):
                raise AdminError(
                    "a timed message needs RocketMQ 5's timer store, and this store has no "
                    "timerwheel: use --delay-level, or --config a broker.conf with "
                    "timerWheelEnable=true"
                )
        if store.topic_config.get(args.topic) is None:
            if not args.create:
                n = args.queues or store.config.default_topic_queue_nums
                raise AdminError(f"topic {args.topic} does not exist; {_create_hint(args, n)}")
            check_topic_creatable(args.topic)  # AdminBrokerProcessor: no system topics
            created = store.create_topic(args.topic, args.queues)
            print(f"created topic {args.topic} with {created.write_queue_nums} queues")
        if args.queue_id is not None:
            _queue(store, args.topic, args.queue_id)
        counts: collections.Counter[int] = collections.Counter()
        held: set[str] = set()  # the system topics delayed and timed messages wait in
        first: PutResult | None = None
        last: PutResult | None = None
        total = 0
        # lines with tags and keys at most go in from columns (put_bodies: no Message a line)
        plain = not (properties or args.delay_level) and (
            args.deliver_time is None and args.delay_ms is None
        )

        limit = store.config.max_message_size

        def put(lines: list[bytes], where: str = "--body", line_no: int = 1) -> None:
            """Store ``lines`` (``line_no``: the first one's number in ``where``), the lines
            before one over maxMessageSize first (AdminError naming it). A Ctrl-C while a
            batch is stored waits for it (:class:`_PutsWhole`)."""
            with whole:
                _put(lines, where, line_no)

        def _put(lines: list[bytes], where: str, line_no: int) -> None:
            nonlocal first, last, total
            long = next((i for i, line in enumerate(lines) if len(line) > limit), None)
            if long is not None:
                _put(lines[:long], where, line_no)
                raise AdminError(
                    f"{where}, line {line_no + long}: the message body is {len(lines[long])} "
                    f"bytes, more than maxMessageSize {limit}; {total} messages produced "
                    "before it, none from it on"
                )
            bodies = list(filter(None, lines))  # an empty line is no message
            if not bodies:
                return
            try:
                if plain:
                    results = store.put_bodies(
                        args.topic, bodies, args.queue_id, tags=args.tags, keys=args.keys
                    )
                else:
                    msgs = [
                        Message(
                            args.topic,
                            body,
                            tags=args.tags,
                            keys=args.keys,
                            properties=properties or None,
                            queue_id=args.queue_id,
                            **timing,
                        )
                        for body in bodies
                    ]
                    results = store.put_messages(msgs)
            except (StoreError, OSError) as exc:  # (a full disk: OSError, nothing of the batch)
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                end = line_no + len(lines) - 1
                span = f"line {line_no}" if end == line_no else f"lines {line_no}..{end}"
                raise AdminError(
                    f"{reason}; {where}, {span} (a batch of {len(bodies)} messages): none of "
                    f"them produced, nor anything after; {total} messages produced before them"
                ) from None
            counts.update(map(_RESULT_QUEUE, results))
            held.update(map(_RESULT_TOPIC, results))  # (a delayed message's: where it waits)
            held.discard(args.topic)
            first = first or results[0]
            last = results[-1]
            total += len(results)
            if args.verbose:
                for r in results:
                    print(f"{r.msg_id} {r.uniq_key} {r.queue_id} {r.queue_offset}")

        whole = _PutsWhole()
        try:
            with whole.installed():
                if args.body is not None:
                    put([args.body.encode("utf-8")])
                else:
                    for path in args.files or ["-"]:
                        _produce_stream(path, put, limit)
        except KeyboardInterrupt:
            store.flush()
            print(
                f"rmqfs produce: interrupted; {total} messages produced before it"
                + (
                    f" (CommitLog [{first.commitlog_offset}, {last.commitlog_offset + last.size}))"
                    if first is not None and last is not None
                    else ""
                )
                + ", none of the input after them",
                file=sys.stderr,
            )
            return 130
        store.flush()
    if total:
        assert first is not None and last is not None  # set by the first message put
        per_queue = ", ".join(f"{q}: {n}" for q, n in sorted(counts.items()))
        print(
            f"produced {total} messages to {args.topic} (queue: count {per_queue}), "
            f"CommitLog [{first.commitlog_offset}, {last.commitlog_offset + last.size})"
            + (f", waiting in {', '.join(sorted(held))}" if held else "")
        )
    else:
        print(f"produced 0 messages to {args.topic}")
    return 0


class _PutsWhole:
    """``rmqfs produce``'s Ctrl-C: between batches it interrupts at once (a read of the input
    that blocks, a terminal's); while a batch is being stored it waits until the batch is
    stored whole, then interrupts, so that the count printed is what the store holds. A
    context manager around each batch; :meth:`installed` sets its SIGINT handler (the main
    thread only) and puts the old one back."""

    def __init__(self) -> None:
        self.busy = False
        self.pending = False

    def __enter__(self) -> None:
        self.busy = True

    def __exit__(self, *exc: object) -> None:
        self.busy = False
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def _handler(self, signum: int, frame: object) -> None:
        if self.busy:
            self.pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = signal.signal(signal.SIGINT, self._handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, old)


def _produce_fields(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, Any]]:
    """``rmqfs produce``'s message fields shared by every line, checked once before the store
    is opened: ``(--property NAME=VALUE as a dict, the delay or timer fields of Message)``
    (a delayed or timed message: ``HookUtils.handleScheduleMessage`` stores it as the broker
    does). AdminError or StoreError for a bad one."""
    from rmqfs.engine.service.validation import check_message
    from rmqfs.engine.store import Message

    properties = {}
    for item in args.property or ():
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise AdminError(f"bad --property {item!r}: use NAME=VALUE")
        properties[k] = v
    timing = {
        "delay_level": args.delay_level or 0,
        "deliver_time_ms": args.deliver_time,
        "delay_time_ms": args.delay_ms,
    }
    check_message(
        Message(
            args.topic,
            b"",
            tags=args.tags,
            keys=args.keys,
            properties=properties or None,
            queue_id=args.queue_id,
            **timing,
        )
    )
    return properties, timing


_RESULT_QUEUE = operator.attrgetter("queue_id")  # of a PutResult
_RESULT_TOPIC = operator.attrgetter("topic")


def _produce_stream(
    path: str,
    put: Callable[[list[bytes], str, int], None],
    limit: int,
    batch_bytes: int = 1 << 20,
) -> None:
    """Split ``path`` (``-`` = stdin) into lines and ``put(lines, name, first line's number)``
    them in batches of what one read returns, at most about 1 MiB: a pipe's lines go in as
    they arrive (``tail -f app.log | rmqfs produce``), not once 1 MiB has come. A line
    without end is held as a list of pieces (no copy of what came before per read) and
    refused (AdminError) as soon as it is longer than ``limit`` bytes (maxMessageSize), so
    an endless line costs neither memory nor time past that."""
    name = "stdin" if path == "-" else path
    if path == "-":
        f = sys.stdin.buffer
        size = None
    else:
        f = open(path, "rb")  # noqa: SIM115 - closed in the finally below (stdin is not)
        size = os.path.getsize(path)
    # what is there, in one read (a pipe's lines as they come); read() where a stream has no
    # read1 (one a caller put in place of stdin)
    read: Callable[[int], bytes] = getattr(f, "read1", f.read)
    bar = _progress(size or 0, os.path.basename(path) if path != "-" else "stdin")
    try:
        line_no = 1  # the number of the line the held pieces begin
        held: list[bytes] = []  # the pieces of the unfinished line
        held_len = 0
        while True:
            chunk = read(batch_bytes)
            if not chunk:
                break
            bar.update(len(chunk))
            cut = chunk.rfind(b"\n")
            if cut < 0:
                held.append(chunk)
                held_len += len(chunk)
            else:
                lines = (b"".join(held) + chunk[:cut] if held else chunk[:cut]).split(b"\n")
                put(lines, name, line_no)
                line_no += len(lines)
                held, held_len = [chunk[cut + 1 :]], len(chunk) - cut - 1
            if held_len > limit:
                raise AdminError(
                    f"{name}, line {line_no}: longer than maxMessageSize ({limit} bytes); "
                    "the lines before it were produced, none from it on"
                )
        if held_len:
            put([b"".join(held)], name, line_no)
    finally:
        bar.close()
        if path != "-":
            f.close()


# ----------------------------------------------------------------------------------------------
# print-msg / query-msg


def cmd_print_msg(args: argparse.Namespace) -> int:
    """``printMsg`` / ``printMsgByQueue``: messages of a topic (or one queue) in a time range."""
    from rmqfs.engine.service.getmessage import parse_subscription, subscription_tags

    with open_store(args) as store:
        topic = _topic(store, args.topic)
        queues = (
            [_queue(store, topic, args.queue_id)]
            if args.queue_id is not None
            else store.queue_ids(topic)
        )
        begin = parse_time(args.begin) if args.begin else None
        end = parse_time(args.end) if args.end else None
        tags = subscription_tags(args.sub_expression)
        codes = parse_subscription(args.sub_expression)
        print_body = args.print_body.lower() != "false"
        print_msgs = _bool_arg(args.print_msg, "-p")
        if args.from_offset is not None and args.queue_id is None:
            raise UsageError("--from-offset needs -i QUEUE")
        if args.max is not None and args.max < 1:
            raise AdminError(f"--max {args.max}: give a count of at least 1")
        shown = 0
        tag_counts: dict[str, int] = {}
        for q in queues:
            cq = store.consume_queue(topic, q)
            if cq is None:
                continue
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            if args.from_offset is not None:
                if not lo <= args.from_offset <= hi:
                    raise AdminError(
                        f"offset {args.from_offset} is not in {topic}/{q}: queue offsets are "
                        f"[{lo}, {hi})"
                    )
                lo = args.from_offset
            if begin is not None:
                lo = max(lo, store.offset_by_time(topic, q, begin))
            if end is not None:
                hi = store.offset_by_time(topic, q, end)
            if not (print_msgs or args.tag_counts or tags is not None):
                # a count alone: the queue's units in the range say it, no record is read
                # (a 100 GB topic counts at once; a damaged record is counted, not reported)
                n = max(0, min(hi, cq.max_offset) - max(lo, cq.min_offset))
                shown += n if args.max is None else min(n, args.max - shown)
                continue
            for qoff, off, size, tc in cq.iter_units(lo, hi):
                if args.max is not None and shown >= args.max:
                    break
                if codes is not None and tc not in codes:
                    continue
                rec = store.read_record(off, size, topic=topic, queue_id=q, queue_offset=qoff)
                if tags is not None and rec.tags not in tags:
                    continue
                if args.tag_counts:
                    tag_counts[rec.tags or ""] = tag_counts.get(rec.tags or "", 0) + 1
                if print_msgs:
                    print(
                        _json_line(rec)
                        if args.json
                        else _message_line(rec, print_body, args.charset)
                    )
                shown += 1
        # PrintMessageByQueueCommand.printCalculateByTag: most frequent first
        for tag, n in sorted(tag_counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"Tag: {tag:<30} Count: {n}")
        if args.count:
            print(f"{shown} messages", file=sys.stderr)
    return 0


def cmd_query_msg(args: argparse.Namespace) -> int:
    """``queryMsgByKey`` (-k -t), ``queryMsgById`` (-i) and ``queryMsgByOffset`` (-t -q -o)."""
    modes = sum(x is not None for x in (args.key, args.msg_id, args.offset))
    if modes != 1:
        raise UsageError("give one of -k KEY (with -t), -i MSGID, or -o OFFSET (with -t -q)")
    print_body = args.print_body.lower() != "false"
    with open_store(args) as store:
        if args.key is not None:
            if not args.topic:
                raise UsageError("-k needs -t TOPIC")
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
                print(
                    f"{rec.msg_id:<34} {rec.uniq_key or '':<34} {rec.queue_id:>4} "
                    f"{rec.queue_offset:>10}"
                )
            return 0
        if args.msg_id is not None:
            recs = _by_msg_id(store, args.msg_id, args.topic, args.uniq_key)
            if args.first:
                recs = recs[:1]
        else:
            if not args.topic or args.queue_id is None:
                raise UsageError("-o needs -t TOPIC and -q QUEUE")
            topic = _topic(store, args.topic)
            q = _queue(store, topic, args.queue_id)
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            if not lo <= args.offset < hi:
                raise AdminError(
                    f"offset {args.offset} is not in {topic}/{q}: queue offsets are [{lo}, {hi})"
                )
            recs = [store.get_message(topic, q, args.offset)]
        for i, rec in enumerate(recs):
            if args.json:
                print(_json_line(rec))
                continue
            if i:
                print()
            _print_detail(rec, print_body, args.charset)
    return 0


def _by_msg_id(
    store: MessageStore, msg_id: str, topic: str | None, uniq_only: bool = False
) -> list[MessageRecord]:
    """An offset msgId (32/56 hex: store host + CommitLog offset), else a UNIQ_KEY
    (``uniq_only``: a UNIQ_KEY only, as ``queryMsgByUniqueKey``)."""
    msg_id = msg_id.strip()
    rec = None if uniq_only else store.look_message_by_offset_msg_id(msg_id)
    if rec is not None and (topic is None or rec.topic == topic):
        return [rec]
    recs = store.look_messages_by_uniq_key(msg_id, _topic(store, topic) if topic else None)
    if not recs:
        raise AdminError(
            f"no message with msgId {msg_id} ("
            + (
                "not a UNIQ_KEY"
                if uniq_only
                else "neither an offset msgId of this store nor a UNIQ_KEY"
            )
            + (f" of {topic}" if topic else "")
            + ")"
        )
    return recs


def cmd_query_trace(args: argparse.Namespace) -> int:
    """``queryMsgTraceById``: the trace of a message (by its msgId, the UNIQ_KEY a client has)
    as a client's trace dispatcher stored it in the trace topic (-t, default
    RMQ_SYS_TRACE_TOPIC; engine/format/tracedata.py): a Pub row (producer group, client host,
    send time, cost, status) and a Sub row per consumption, grouped by consumer group, as
    QueryMsgTraceByIdSubCommand prints them."""
    from rmqfs.engine.format.message import host_to_str
    from rmqfs.engine.format.tracedata import TRACE_TOPIC, decode_trace_data

    topic = args.trace_topic or TRACE_TOPIC
    msg_id = args.msg_id.strip()
    with open_store(args) as store:
        if topic not in store.topic_names():
            raise AdminError(
                f"this store has no trace topic {topic} (clients write traces when "
                "msgTraceEnable is on; -t names another trace topic)"
            )
        begin = parse_time(args.begin) if args.begin else 0
        end = parse_time(args.end) if args.end else 2**63 - 1
        found = []
        for rec in store.query_by_key(topic, msg_id, args.max_num, begin, end):
            host = host_to_str(rec.born_host).rsplit(":", 1)[0]
            for e in decode_trace_data(rec.plain_body.decode("utf-8", errors="replace")):
                if e.msg_id == msg_id:
                    found.append((e, e.client_host or host))
    if not found:
        raise AdminError(f"no trace of message {msg_id} in {topic}")
    before = {e.request_id: e for e, _ in found if e.kind == "SubBefore"}
    row = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"

    def when(ms: int | None) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"

    def status(e: TraceEntry) -> str:
        return "success" if e.success else "failed"

    for e, host in found:
        if e.kind == "Pub":
            print(
                row.format(
                    "#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"
                )
            )
            print(row.format("Pub", e.group, host, when(e.timestamp), f"{e.cost_ms}ms", status(e)))
            print()
    subs: dict[str, list] = {}
    for e, host in found:
        if e.kind == "SubAfter":
            b = before.get(e.request_id)
            group = e.group or (b.group if b else "") or ""
            ts = e.timestamp or (b.timestamp if b else None)
            subs.setdefault(group, []).append((e, host, ts))
    for group, rows in subs.items():
        print(
            row.format(
                "#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status"
            )
        )
        for e, host, ts in rows:
            print(row.format("Sub", group, host, when(ts), f"{e.cost_ms}ms", status(e)))
        print()
    return 0


# ----------------------------------------------------------------------------------------------
# topics and consumers


def cmd_topic_list(args: argparse.Namespace) -> int:
    """``topicList``: every topic, one per line; ``--clusters`` (mqadmin's -c): cluster name,
    topic and each consumer group with offsets on it, retry and DLQ topics left out, as
    TopicListSubCommand prints them."""
    with open_store(args) as store:
        if not args.clusters:
            for t in store.topic_names():
                print(t)
            return 0
        cluster = store.config.broker_cluster_name
        print(f"{'#Cluster Name':<20}  {'#Topic':<48}  {'#Consumer Group':<48}")
        for t in store.topic_names():
            if t.startswith(("%RETRY%", "%DLQ%")):
                continue
            groups = [
                g for g in store.group_names() if t in store.consumer_offsets.topics_of(g)
            ] or [""]
            for g in groups:
                print(f"{cluster:<20}  {t:<64}  {g:<64}".rstrip())
    return 0


def cmd_topic_status(args: argparse.Namespace) -> int:
    """``topicStatus``: per queue min/max offset and the store time of the last message."""
    with open_store(args) as store:
        topic = _topic(store, args.topic)
        broker = store.config.broker_name
        print(
            f"{'#Broker Name':<24} {'#QID':>4} {'#Min Offset':>12} {'#Max Offset':>12} "
            f"{'#Last Updated'}"
        )
        for q in store.queue_ids(topic):
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            last = ""
            if hi > lo:
                last = format_time(store.get_message(topic, q, hi - 1).store_timestamp)
            print(f"{broker:<24} {q:>4} {lo:>12} {hi:>12} {last}".rstrip())
    return 0


def cmd_consumer_progress(args: argparse.Namespace) -> int:
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
            raise AdminError(
                f"consumer group {args.group} does not exist (groups: "
                f"{', '.join(groups) or 'none'})"
            )
        rows = consumer_progress(store, args.group, args.topic)
        broker = store.config.broker_name
        print(
            f"{'#Topic':<32} {'#Broker Name':<16} {'#QID':>4} {'#Broker Offset':>14} "
            f"{'#Consumer Offset':>16} {'#Diff':>10} {'#LastTime'}"
        )
        for r in rows:
            print(
                f"{r['topic']:<32} {broker:<16} {r['queueId']:>4} {r['brokerOffset']:>14} "
                f"{r['consumerOffset']:>16} {r['diff']:>10} "
                f"{format_time(r['lastTimestamp'])}"
            )
        print()
        print(f"Consume Diff Total: {diff_total(rows)}")
    return 0


def cmd_reset_offset(args: argparse.Namespace) -> int:
    """``resetOffsetByTime``: commit, for every queue of the topic (or ``-q``), the first offset
    stored at or after ``-s`` time (``-1``: the queue's max offset, mqadmin's
    ``skipAccumulatedMessage``), or ``-o`` offset; with ``--rollback-only`` (mqadmin's ``-f
    false``) only where that is at or before the committed offset (the queue's min offset
    where none is), as ``DefaultMQAdminExtImpl.resetOffsetConsumeOffset`` does. Every queue's
    offset is checked, then all are written to consumerOffset.json in one atomic write;
    refused while a mount or broker holds the store."""
    from rmqfs.engine.format.config import validate_group_name

    if (args.timestamp is None) == (args.offset is None):
        raise UsageError("give -s TIMESTAMP (ms, yyyy-MM-dd#HH:mm:ss:SSS or now) or -o OFFSET")
    validate_group_name(args.group)
    ts = parse_time(args.timestamp) if args.timestamp is not None else None
    with open_store(args, write=True) as store:
        topic = _topic(store, args.topic)
        if not store.has_group(args.group):
            # (AdminBrokerProcessor.resetOffsetInner: SUBSCRIPTION_GROUP_NOT_EXIST; a reset
            # of a misspelt group would make a group no consumer has)
            raise AdminError(
                f"consumer group {args.group} does not exist (groups: "
                f"{', '.join(store.group_names()[:20]) or 'none'}); create it first: rmqfs "
                f"update-sub-group STORE -g {args.group}"
            )
        queues = (
            [_queue(store, topic, args.queue_id)]
            if args.queue_id is not None
            else store.queue_ids(topic)
        )
        plan: list[tuple[int, int, int | None]] = []
        for q in queues:
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            new: int | None
            if ts == -1:  # (the request's timestamp -1: the max offset)
                new = hi
            elif ts is not None:
                new = store.offset_by_time(topic, q, ts) if hi > lo else hi
            else:
                new = args.offset
                if not lo <= new <= hi:
                    raise AdminError(f"offset {new} is outside [{lo}, {hi}] of {topic}/{q}")
            old = store.consumer_offsets.query(args.group, topic, q)
            if args.rollback_only and new is not None and new > (old if old >= 0 else lo):
                new = None  # it would move forward: left as it is
            plan.append((q, old, new))
        store.commit_offsets(args.group, topic, {q: new for q, _, new in plan if new is not None})
        print(f"{'#Topic':<32} {'#QID':>4} {'#Old Offset':>12} {'#New Offset':>12}")
        for q, old, new in plan:
            shown = new if new is not None else "(kept)"
            print(f"{topic:<32} {q:>4} {old if old >= 0 else '-':>12} {shown:>12}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """``deleteExpiredCommitLog``: run the expiry now and print what was deleted."""
    with open_store(args, write=True) as store:
        if args.file_reserved_time is not None:
            store.config.file_reserved_time = args.file_reserved_time
        before = store.commitlog.min_offset
        report = store.delete_expired_files(manual=True)
        for kind, paths in (
            ("CommitLog", report.commitlog),
            ("ConsumeQueue", report.consumequeue),
            ("IndexFile", report.index),
        ):
            for p in paths:
                print(f"deleted {kind} {os.path.relpath(p, store.root)}")
        print(
            f"deleted {report.deleted} files; CommitLog min offset {before} -> "
            f"{report.min_offset} (fileReservedTime {store.config.file_reserved_time} h)"
        )
    return 0


# ----------------------------------------------------------------------------------------------
# topic and group administration (writing: the store's lock, like a broker)


def _bool_arg(text: str | None, option: str) -> bool | None:
    """mqadmin's ``Boolean.parseBoolean`` options, strictly: true or false."""
    if text is None:
        return None
    if text.strip().lower() not in ("true", "false"):
        raise AdminError(f"{option} takes true or false, not {text!r}")
    return text.strip().lower() == "true"


def _hours(text: str) -> float:
    """An argparse type: a finite number of hours, 0 or more (``inf``, ``nan`` and negative
    values are usage errors)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"give a finite number of hours, 0 or more: {text!r}")
    return value


def _count(text: str) -> int:
    """An argparse type: a count of at least 1 (``-m 0`` would find nothing, quietly)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"give a count of at least 1, not {value}")
    return value


def _int_arg(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise AdminError(f"{option} takes an integer, not {text!r}") from None


def cmd_delete_topic(args: argparse.Namespace) -> int:
    """``deleteTopic`` (AdminBrokerProcessor.deleteTopic -> deleteTopicInBroker): removes the
    topic's topics.json entry, its consumer offsets (ConsumerOffsetManager.cleanOffsetByTopic:
    every topic@group entry of consumerOffset.json) and its ConsumeQueues
    (DefaultMessageStore.deleteTopics: consumequeue/TOPIC/). CommitLog records stay until they
    expire; rmqfs remembers the deletion (config/rmqfs.deletedTopics.json) so that no recovery
    brings the queues back. System topics are refused. Refused while a mount or broker holds
    the store."""
    with open_store(args, write=True) as store:
        done = store.delete_topic(args.topic)
        store.flush()
    print(
        f"deleted topic {done['topic']}: {len(done['queues'])} ConsumeQueues, "
        f"{len(done['offsets'])} consumer offset entries"
        + (f" ({', '.join(done['offsets'])})" if done["offsets"] else "")
        + f"; its records stay in the CommitLog below offset {done['commitLogOffset']} "
        "until they expire"
    )
    for retry in done["retryTopics"]:  # (clearRetryTopicWhenDeleteTopic)
        print(
            f"deleted its POP retry topic {retry['topic']}: {len(retry['queues'])} "
            f"ConsumeQueues, {len(retry['offsets'])} consumer offset entries"
        )
    return 0


#: The ``TopicConfig`` mqadmin's updateTopic sends (``UpdateTopicSubCommand.execute``): a new
#: ``TopicConfig`` with readQueueNums and writeQueueNums set to 8, perm 6 (``PERM_READ |
#: PERM_WRITE``, the class default), topicSysFlag 0 (no ``-u``/``-s``) and order false, before
#: the options given; the broker stores it whole (``TopicConfigManager.updateTopicConfig``),
#: keeping only the current attributes.
MQADMIN_TOPIC = {"read_queue_nums": 8, "write_queue_nums": 8, "perm": 6, "order": False}


def cmd_update_topic(args: argparse.Namespace) -> int:
    """``updateTopic`` (AdminBrokerProcessor.updateAndCreateTopic ->
    TopicConfigManager.updateTopicConfig): set the topic's readQueueNums (-r), writeQueueNums
    (-w, 1-1024), perm (-p 2, 4 or 6) or order (-o) in topics.json. A missing topic is created
    from what mqadmin sends (UpdateTopicSubCommand: 8 read and 8 write queues, perm 6, order
    false) with the options given. An existing topic keeps the fields not given, unless
    --mqadmin-defaults (which ``rmqfs updateTopic`` passes): then, as mqadmin's whole
    TopicConfig does, they take mqadmin's values and topicSysFlag goes to 0; attributes are
    kept either way. System topics are refused."""
    given = dict(
        read_queue_nums=_int_arg(args.read_queue_nums, "-r"),
        write_queue_nums=_int_arg(args.write_queue_nums, "-w"),
        perm=_int_arg(args.perm, "-p"),
        order=_bool_arg(args.order, "-o"),
    )
    with open_store(args, write=True) as store:
        old = store.topic_config.get(args.topic)
        kw: dict = {k: v for k, v in given.items() if v is not None}
        sys_flag = None
        if old is None or args.mqadmin_defaults:
            kw = {**MQADMIN_TOPIC, **kw}
            sys_flag = 0
        cfg = store.update_topic(args.topic, **kw, topic_sys_flag=sys_flag)
    if old is not None and args.mqadmin_defaults:
        before, after = old.to_json(), cfg.to_json()
        given_json = {_TOPIC_JSON[k] for k, v in given.items() if v is not None}
        implied = [
            f"{k} {json.dumps(before[k])} -> {json.dumps(after[k])}"
            for k in ("readQueueNums", "writeQueueNums", "perm", "order", "topicSysFlag")
            if k not in given_json and before[k] != after[k]
        ]
        if implied:
            print(
                "note: as mqadmin's updateTopic, fields not given take its defaults: "
                + ", ".join(implied),
                file=sys.stderr,
            )
    print(
        f"{'updated' if old is not None else 'created'} topic {args.topic}: "
        + json.dumps(cfg.to_json(), sort_keys=True)
    )
    return 0


#: update-topic's options by their topics.json names.
_TOPIC_JSON = {
    "read_queue_nums": "readQueueNums",
    "write_queue_nums": "writeQueueNums",
    "perm": "perm",
    "order": "order",
}


def cmd_delete_sub_group(args: argparse.Namespace) -> int:
    """``deleteSubGroup`` (AdminBrokerProcessor.deleteSubscriptionGroup): removes the group's
    subscriptionGroup.json entry; with -r true (the request's cleanOffset) also its offsets
    (ConsumerOffsetManager.removeOffset: every topic@group entry). A group that keeps offsets
    is still listed (consumer-progress, the mount's groups/)."""
    remove = bool(_bool_arg(args.remove_offset, "-r"))
    with open_store(args, write=True) as store:
        done = store.delete_group(args.group, remove_offset=remove)
    print(
        f"deleted subscription group {args.group}"
        + ("" if done["config"] else " (it had no subscriptionGroup.json entry)")
        + (
            f"; removed {len(done['offsets'])} offset entries"
            if remove
            else "; offsets kept (-r true removes them)"
        )
    )
    return 0


_GROUP_OPTIONS = (
    ("consume_enable", "-s", "consumeEnable", bool),
    ("consume_from_min_enable", "-m", "consumeFromMinEnable", bool),
    ("consume_broadcast_enable", "-d", "consumeBroadcastEnable", bool),
    ("consume_message_orderly", "-o", "consumeMessageOrderly", bool),
    ("retry_queue_nums", "-q", "retryQueueNums", int),
    ("retry_max_times", "-r", "retryMaxTimes", int),
    ("broker_id", "-i", "brokerId", int),
    ("which_broker_when_consume_slowly", "-w", "whichBrokerWhenConsumeSlowly", int),
    ("notify_consumer_ids_changed", "-a", "notifyConsumerIdsChangedEnable", bool),
)


def mqadmin_group_config() -> dict:
    """The settable fields (``GROUP_FIELDS``) of the ``SubscriptionGroupConfig`` mqadmin's
    updateSubGroup sends before its options (``UpdateSubGroupSubCommand.execute``): the class
    defaults with consumeBroadcastEnable and consumeFromMinEnable set to false. The broker stores
    it whole (``SubscriptionGroupManager.updateSubscriptionGroupConfig``)."""
    from rmqfs.engine.format.config import GROUP_FIELDS, SubscriptionGroupManager

    entry = SubscriptionGroupManager.default_entry("")
    fields = {k: entry[k] for k in GROUP_FIELDS}
    fields.update(consumeBroadcastEnable=False, consumeFromMinEnable=False)
    return fields


def cmd_update_sub_group(args: argparse.Namespace) -> int:
    """``updateSubGroup`` (AdminBrokerProcessor.updateAndCreateSubscriptionGroup ->
    SubscriptionGroupManager.updateSubscriptionGroupConfig): set SubscriptionGroupConfig
    fields of the group in subscriptionGroup.json. A missing group is created from what
    mqadmin sends (UpdateSubGroupSubCommand: RocketMQ's defaults with consumeBroadcastEnable
    and consumeFromMinEnable false) with the options given. An existing group keeps the fields
    not given, unless --mqadmin-defaults (which ``rmqfs updateSubGroup`` passes): then, as
    mqadmin's whole config does, they take mqadmin's values; groupRetryPolicy,
    subscriptionDataSet and attributes are kept either way."""
    from rmqfs.engine.format.config import validate_group_name

    validate_group_name(args.group)
    fields = {}
    for attr, opt, name, kind in _GROUP_OPTIONS:
        raw = getattr(args, attr)
        if raw is not None:
            fields[name] = _bool_arg(raw, opt) if kind is bool else _int_arg(raw, opt)
    with open_store(args, write=True) as store:
        old = store.group_config(args.group)
        if old is None or args.mqadmin_defaults:
            fields = {**mqadmin_group_config(), **fields}
        entry = store.update_group(args.group, fields)
    if old is not None and args.mqadmin_defaults:
        given = {name for attr, _, name, _ in _GROUP_OPTIONS if getattr(args, attr) is not None}
        implied = [
            f"{k} {json.dumps(old.get(k))} -> {json.dumps(entry[k])}"
            for k in sorted(entry)
            if k not in given and k in fields and old.get(k) != entry[k]
        ]
        if implied:
            print(
                "note: as mqadmin's updateSubGroup, fields not given take its defaults: "
                + ", ".join(implied),
                file=sys.stderr,
            )
    print(
        f"{'updated' if old is not None else 'created'} subscription group {args.group}: "
        + json.dumps(entry, sort_keys=True)
    )
    return 0


def cmd_clone_group_offset(args: argparse.Namespace) -> int:
    """``cloneGroupOffset`` (ConsumerOffsetManager.cloneOffset): the destination group's
    offsets of the topic become a copy of the source group's."""
    with open_store(args, write=True) as store:
        _topic(store, args.topic)
        copied = store.clone_group_offset(args.src_group, args.dest_group, args.topic)
    print(
        f"cloned {len(copied)} offsets of {args.topic} from {args.src_group} to "
        f"{args.dest_group}: " + ", ".join(f"{q}: {o}" for q, o in sorted(copied.items()))
    )
    return 0


# ----------------------------------------------------------------------------------------------
# queues, stats, broker


def cmd_query_cq(args: argparse.Namespace) -> int:
    """``queryCq`` (QueryConsumeQueueCommand): units of one ConsumeQueue from index -i, -c of
    them: queueOffset, commitLogOffset, size, tagsCode and the record's storeTimestamp."""
    from rmqfs.engine.errors import CorruptRecordError

    with open_store(args) as store:
        topic = _topic(store, args.topic)
        q = _queue(store, topic, args.queue_id)
        lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
        start = lo if args.index is None else args.index
        if not lo <= start <= hi:
            raise AdminError(f"index {start} is not in {topic}/{q}: queue offsets are [{lo}, {hi})")
        if args.count < 1:
            raise AdminError(f"-c {args.count}: give a count of at least 1")
        cq = store.consume_queue(topic, q)
        print(
            f"{'#QueueOffset':>12} {'#CommitLogOffset':>16} {'#Size':>8} {'#TagsCode':>20} "
            f"{'#StoreTimestamp':>15} #StoreTime"
        )
        if cq is None:
            return 0
        for qoff, off, size, tc in cq.iter_units(start, min(hi, start + args.count)):
            ts: int | str
            try:
                ts = store.read_record(off, size).store_timestamp
                when = format_time(ts)
            except CorruptRecordError as exc:
                ts, when = "-", f"damaged: {exc}"
            print(f"{qoff:>12} {off:>16} {size:>8} {tc:>20} {ts:>15} {when}")
    return 0


def cmd_stats_all(args: argparse.Namespace) -> int:
    """``statsAll``: per topic (and with -q per queue) messages and bytes stored in the last
    minute, hour and day before --now (default: now), and in total. A broker counts these in
    memory (BrokerStatsManager); here they come from the ConsumeQueue units (numpy) and a
    binary search on store timestamps per queue, so a big store costs no per-message work."""
    from rmqfs.engine.live.stats import WINDOWS, topic_stats, total

    now = parse_time(args.now) if args.now else int(time.time() * 1000)
    with open_store(args) as store:
        topics = [_topic(store, args.topic)] if args.topic else store.topic_names()
        rows = []
        for t in topics:
            per_queue = topic_stats(store, t, now)
            tot = total(per_queue)
            tot["topic"] = t
            if args.active_topic and not tot["day"]["messages"]:
                continue
            rows.append(tot)
            if args.queues:
                rows += per_queue
    if args.json:
        for r in rows:
            print(json.dumps(r, sort_keys=True))
        return 0
    head = f"{'#Topic':<40} {'#QID':>4}"
    for w in WINDOWS:
        head += f" {'#Msgs/' + w:>12} {'#Bytes/' + w:>14}"
    print(head + f" {'#Msgs':>12} {'#Bytes':>14}")
    for r in rows:
        line = f"{r['topic']:<40} {'all' if r['queueId'] is None else r['queueId']:>4}"
        for w in WINDOWS:
            line += f" {r[w]['messages']:>12} {r[w]['bytes']:>14}"
        print(line + f" {r['messages']:>12} {r['bytes']:>14}")
    return 0


def cmd_get_broker_config(args: argparse.Namespace) -> int:
    """``getBrokerConfig``: the store's effective settings as broker.conf lines (key=value):
    --config's, else the defaults, with the segment sizes and index geometry the store's files
    have, and a DLedger replica's ``enableDLegerCommitLog``/``dLegerSelfId``."""
    with open_store(args) as store:
        items = dict(store.config.to_broker_conf())
        items["mappedFileSizeCommitLog"] = str(store.commitlog.file_size)
        items["mappedFileSizeConsumeQueue"] = str(store.cq_file_size)
        items["storePathRootDir"] = store.root
        index = store.index_service
        if index is not None and index.files:  # the newest file's geometry (as it was made)
            items["maxHashSlotNum"] = str(index.files[-1].hash_slot_num)
            items["maxIndexNum"] = str(index.files[-1].index_num)
        if store.dledger is not None:  # ROOT/dledger-<selfId>/data
            replica = os.path.basename(os.path.dirname(store.dledger.data_dir))
            items["enableDLegerCommitLog"] = "true"
            items["dLegerSelfId"] = replica.removeprefix("dledger-")
    for k, v in sorted(items.items()):
        print(f"{k}={v}")
    return 0


def cmd_broker_status(args: argparse.Namespace) -> int:
    """``brokerStatus``: what the mount's status.json shows (engine/live/status.py): CommitLog
    offsets, flush and dispatch lag, counts, repairs and damaged queues; --json for the
    object."""
    from rmqfs.engine.live.status import store_status

    with open_store(args) as store:
        st = store_status(store)
    if args.json:
        print(json.dumps(st, sort_keys=True))
        return 0
    for k in sorted(st):  # mqadmin prints "%-32s: %s" per runtime key
        v = st[k]
        print(f"{k:<32}: {json.dumps(v) if isinstance(v, (dict, list)) else v}")
    return 0


def _location(text: str) -> tuple[pafs.FileSystem, str, str]:
    """``(filesystem, base, printable)`` of a snapshot location (engine/live/objectstore.py)."""
    from rmqfs.engine.live.location import open_location, redact

    fs, base = open_location(text)
    return fs, base, redact(text)


def cmd_snapshot_verify(args: argparse.Namespace) -> int:
    """Check a copy of a snapshot (MNT/snapshots/NAME copied with tar, rsync, restic restore,
    or snapshot-upload) against its SNAPSHOT.json: every file named there must exist with its
    size and CRC32C. LOCATION is a directory or a URI (s3://bucket/prefix?endpoint_override=
    host:port&scheme=http, gs://, hdfs://, file://), read in place. Prints one line per
    problem (missing, short, damaged file) and a summary; exit 1 on any problem. Files the
    manifest does not name are reported as extra (not an error)."""
    from rmqfs.engine.live.location import is_uri
    from rmqfs.engine.live.snapshot import MANIFEST_NAME, verify_copy

    directory = args.directory
    fs = None
    if is_uri(directory):
        fs, base, shown = _location(directory)
    else:
        base = shown = directory
        if not os.path.isdir(directory):
            raise AdminError(f"{directory} is not a directory")
        if not os.path.isfile(os.path.join(directory, MANIFEST_NAME)):
            raise AdminError(f"{directory} has no {MANIFEST_NAME} (not a copy of a snapshot)")
    start = time.monotonic()
    try:
        doc, problems = verify_copy(base, workers=args.jobs, progress=_progress, filesystem=fs)
    except FileNotFoundError:
        if fs is None:
            raise
        raise AdminError(
            f"{shown} has no {MANIFEST_NAME}: not a snapshot, or an upload that did not finish"
        ) from None
    errors = [(rel, what) for rel, what in problems if not what.startswith("extra")]
    elapsed = time.monotonic() - start
    size = doc.files.total_size()
    if args.json:
        print(
            json.dumps(
                {
                    "name": doc.get("name"),
                    "commitLogOffset": doc.get("commitLogOffset"),
                    "files": len(doc.files),
                    "bytes": size,
                    "problems": [{"file": r, "problem": w} for r, w in problems],
                    "ok": not errors,
                }
            )
        )
    else:
        for rel, what in problems:
            print(f"{'WARNING' if what.startswith('extra') else 'ERROR'} {rel}: {what}")
        verdict = "OK" if not errors else f"FAILED: {len(errors)} bad files"
        print(
            f"snapshot {doc.get('name')} (CommitLog offset {doc.get('commitLogOffset')}, "
            f"{doc.get('messageCount')} messages): {len(doc.files)} files, {size:,} bytes "
            f"in {elapsed:.2f} s: {verdict}"
        )
    return 1 if errors else 0


def cmd_snapshot_upload(args: argparse.Namespace) -> int:
    """Upload a snapshot (MNT/snapshots/NAME, or a copy holding SNAPSHOT.json) to a location:
    a URI (s3://bucket/prefix?endpoint_override=host:port&scheme=http, gs://, hdfs://,
    file://) or a directory; S3 credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
    The location becomes a copy of the snapshot (a sync, as rsync --delete): its old
    SNAPSHOT.json is deleted first, only files whose size or CRC32C changed since the snapshot
    there are uploaded (sealed CommitLog segments once), each up to its stored size in the
    manifest (what was written: the zeros a file is preallocated with are not sent; readers
    of the location serve them), files the new snapshot lacks are deleted, and the new
    SNAPSHOT.json is written last, so an upload cut short is never read as a whole snapshot.
    Every byte sent is checked against the source's manifest."""
    from rmqfs.engine.live.objectstore import upload_snapshot

    if not os.path.isdir(args.src):
        raise AdminError(f"{args.src} is not a directory")
    fs, base, shown = _location(args.location)
    rep = upload_snapshot(
        args.src, fs, base, where=shown, workers=args.jobs, progress=_progress, force=args.force
    )
    rep["location"] = shown
    rep["brokerName"], rep["brokerNameFrom"] = _manifest_broker_name(args.src)
    if args.json:
        print(json.dumps(rep))
        return 0
    print(
        f"snapshot {rep['name']} (CommitLog offset {rep['commitLogOffset']}, "
        f"{rep['messageCount']} messages) to {shown}: "
        f"uploaded {len(rep['uploaded'])} files ({rep['uploadedBytes']:,} bytes), "
        f"skipped {len(rep['skipped'])} unchanged ({rep['skippedBytes']:,} bytes), "
        f"deleted {len(rep['deleted'])}, in {rep['seconds']:.2f} s"
    )
    print(_broker_name_line(rep["brokerName"], rep["brokerNameFrom"]))
    return 0


def _manifest_broker_name(src: str) -> tuple[str | None, str | None]:
    """``(brokerName, brokerNameFrom)`` of the snapshot manifest in ``src`` (None for what it
    lacks: a manifest written before rmqfs recorded them)."""
    from rmqfs.engine.live.manifest import MANIFEST_NAME, read_manifest_file

    try:
        doc = read_manifest_file(os.path.join(src, MANIFEST_NAME))[0]
    except (OSError, ValueError):
        return None, None
    name, source = doc.get("brokerName"), doc.get("brokerNameFrom")
    return (
        name if isinstance(name, str) and name else None,
        source if isinstance(source, str) and source else None,
    )


def _broker_name_line(name: str | None, source: str | None) -> str:
    """What snapshot-upload says of the name readers give the snapshot's rows (the data
    source's brokerName column, pipeline.datasource.store_broker_name)."""
    if name is None:
        return "no brokerName in its SNAPSHOT.json: readers name it by its location's directory"
    line = f"brokerName {name!r}, from {source or 'a mount that did not record where from'}"
    if source is not None and not source.startswith("the host name"):
        return line
    return (
        f"{line}: a fleet read refuses two snapshots of one name; to name it, snapshot a "
        "mount made with --broker-name NAME (or --config a broker.conf with brokerName=NAME), "
        'or read the fleet with .option("brokerNameFrom", "path") (each snapshot named by '
        "its location's directory)"
    )


def cmd_snapshot_download(args: argparse.Namespace) -> int:
    """Restore a snapshot from a location (a URI as for snapshot-upload, or a directory) into
    a new or empty local directory: each file is checked against the manifest's size and
    CRC32C as it arrives, written under a temporary name at its full size (the zeros after
    what the object holds a hole) and renamed; SNAPSHOT.json comes last. A location without
    SNAPSHOT.json (an upload that did not finish) is refused. The directory then mounts:
    rmqfs mount DIR MNT."""
    from rmqfs.engine.live.objectstore import download_snapshot

    fs, base, shown = _location(args.location)
    rep = download_snapshot(
        fs, base, args.directory, where=shown, workers=args.jobs, progress=_progress
    )
    rep["location"] = shown
    if args.json:
        print(json.dumps(rep))
        return 0
    print(
        f"snapshot {rep['name']} (CommitLog offset {rep['commitLogOffset']}, "
        f"{rep['messageCount']} messages) from {shown}: {rep['files']} files, "
        f"{rep['bytes']:,} bytes ({rep['downloadedBytes']:,} downloaded) in "
        f"{rep['seconds']:.2f} s: OK"
    )
    return 0


# ----------------------------------------------------------------------------------------------
# argparse


def _doc(func: Callable[..., object]) -> str:
    """A command's docstring for --help, without the reST markup."""
    return (func.__doc__ or "").replace("``", "")


class TakesArguments(Protocol):
    """What an argument is added to: an ``argparse`` parser or argument group."""

    def add_argument(self, *flags: str, **options: Any) -> Any:
        """``argparse``'s ``add_argument``."""
        ...


@dataclass(frozen=True)
class Arg:
    """One argument of a command: what ``add_argument`` takes (the flags, or a positional's
    name, and its keywords)."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]

    def add_to(self, p: TakesArguments) -> None:
        """Add the argument to ``p`` (a parser or a group)."""
        p.add_argument(*self.flags, **self.options)


def arg(*flags: str, **options: Any) -> Arg:
    """An :class:`Arg`, written as the ``add_argument`` call it stands for."""
    return Arg(flags, options)


@dataclass(frozen=True)
class OneOf:
    """Arguments of which at most one is given (``add_mutually_exclusive_group``)."""

    args: tuple[Arg, ...]

    def add_to(self, p: argparse.ArgumentParser) -> None:
        """Add the group and its arguments to ``p``."""
        group = p.add_mutually_exclusive_group()
        for a in self.args:
            a.add_to(group)


@dataclass(frozen=True)
class SubCommand:
    """An offline command, as mqadmin declares its ``SubCommand``s: its name
    (``commandName``), the mqadmin names that run it (``commandAlias``; each with mqadmin's own
    option letters, translated by :data:`mount.mqadmin.COMMANDS`), its help line, its
    arguments (``buildCommandlineOptions``) and its handler (``execute``), whose docstring is
    the description of ``rmqfs NAME --help``."""

    name: str
    mqadmin: tuple[str, ...]
    help: str
    handler: Command
    args: tuple[Arg | OneOf, ...] = ()
    on_store: bool = True  # STORE and --config come first (add_store_args)
    intermixed: bool = False  # positionals may follow options (_IntermixedParser)

    def register(self, sub: Subparsers[ParserT]) -> None:
        """Add the command's parser to the ``rmqfs`` subparsers ``sub``."""
        p = sub.add_parser(self.name, help=self.help, description=_doc(self.handler))
        if self.intermixed:
            _intermixed(p)
        if self.on_store:
            add_store_args(p)
        for a in self.args:
            a.add_to(p)
        p.set_defaults(func=wrap_command(self.handler))


def _store_args() -> tuple[Arg, ...]:
    """STORE and --config, the arguments of every command on a store."""
    return (
        arg("store", metavar="STORE", help="the store directory (storePathRootDir)"),
        arg(
            "--config",
            metavar="broker.conf",
            help="a RocketMQ broker.conf (segment sizes, index geometry, ...)",
        ),
    )


def add_store_args(p: argparse.ArgumentParser) -> None:
    """STORE and --config, the arguments of every command on a store."""
    for a in _store_args():
        a.add_to(p)


#: How the messages a command prints show their bodies (print-msg, query-msg).
BODY_ARGS = (
    arg(
        "-d",
        "--print-body",
        nargs="?",
        const="true",
        default="true",
        metavar="true|false",
        help="print the body (default true)",
    ),
    arg("-c", "--charset", default="UTF-8", help="charset of bodies (default UTF-8)"),
    arg(
        "--json",
        action="store_true",
        help="one JSON line per message, as the mount's messages.jsonl",
    ),
)

_TOPIC = arg("-t", "--topic", required=True)
_JSON = arg("--json", action="store_true", help="the result as one JSON object")

#: The offline commands, in the order ``rmqfs --help`` lists them.
COMMANDS: tuple[SubCommand, ...] = (
    SubCommand(
        "verify",
        (),
        "check every record, CRC, ConsumeQueue unit and index item",
        cmd_verify,
        (_JSON,),
    ),
    SubCommand(
        "recover",
        (),
        "repair what verify finds (truncate a dirty tail, rebuild derived files)",
        cmd_recover,
        (
            arg(
                "--rebuild",
                action="store_true",
                help="rebuild every ConsumeQueue and IndexFile from the CommitLog",
            ),
        ),
    ),
    SubCommand(
        "produce",
        ("sendMessage",),
        "append messages, one per line of FILEs or stdin",
        cmd_produce,
        (
            arg("files", nargs="*", metavar="FILE", help="input files (- or none: stdin)"),
            _TOPIC,
            arg(
                "--body",
                help="one message with this body (UTF-8) instead of FILEs (sendMessage -p)",
            ),
            arg("-c", "--create", action="store_true", help="create the topic if missing"),
            arg(
                "--queues",
                type=int,
                help="queues of a created topic (default defaultTopicQueueNums, 4)",
            ),
            arg("-a", "--tags", help="TAGS of every message"),
            arg("-k", "--keys", help="KEYS of every message (space separated)"),
            arg(
                "-i",
                "--queue-id",
                type=int,
                help="put every message in this queue (default round-robin)",
            ),
            arg(
                "--property",
                action="append",
                metavar="NAME=VALUE",
                help="a user property (repeatable)",
            ),
            OneOf(
                (
                    arg(
                        "--delay-level",
                        type=int,
                        metavar="N",
                        help="a delayed message of delay level N (messageDelayLevel)",
                    ),
                    arg(
                        "--deliver-time",
                        type=int,
                        metavar="EPOCH_MS",
                        help="a timed message delivered then (5.x timer store: "
                        "rmq_sys_wheel_timer)",
                    ),
                    arg(
                        "--delay-ms",
                        type=int,
                        metavar="MS",
                        help="a timed message delivered MS from now",
                    ),
                )
            ),
            arg(
                "-v",
                "--verbose",
                action="store_true",
                help="print msgId, UNIQ_KEY, queueId and queueOffset of each message",
            ),
        ),
        intermixed=True,  # FILEs may come before or after the options
    ),
    SubCommand(
        "print-msg",
        ("printMsg", "printMsgByQueue", "consumeMessage"),
        "print a topic's messages",
        cmd_print_msg,
        (
            _TOPIC,
            arg("-i", "--queue-id", type=int, help="only this queue (printMsgByQueue)"),
            arg("-b", "--begin", help=f"from this store time ({TIME_FORMAT_HELP})"),
            arg("-e", "--end", help=f"before this store time ({TIME_FORMAT_HELP})"),
            arg("-s", "--sub-expression", help="tags: * or TagA || TagB"),
            arg(
                "--count",
                action="store_true",
                help="print the count on stderr (with -p false and no -s tags: the queues' "
                "units in the range, no record read)",
            ),
            arg(
                "-p",
                "--print-msg",
                default="true",
                metavar="true|false",
                help="print the messages (default true; false: only --tag-counts)",
            ),
            arg("--from-offset", type=int, metavar="N", help="with -i: from this queue offset"),
            arg("--max", type=int, metavar="N", help="at most N messages"),
            arg(
                "--tag-counts",
                action="store_true",
                help="then a count per tag, most frequent first",
            ),
            *BODY_ARGS,
        ),
    ),
    SubCommand(
        "query-msg",
        ("queryMsgByKey", "queryMsgById", "queryMsgByOffset", "queryMsgByUniqueKey"),
        "find messages by key, msgId or queue offset",
        cmd_query_msg,
        (
            arg("-t", "--topic"),
            arg("-k", "--key", help="message key (queryMsgByKey; needs -t)"),
            arg("-i", "--msg-id", help="offset msgId or UNIQ_KEY (queryMsgById)"),
            arg("-q", "--queue-id", type=int, help="queue of -o"),
            arg("-o", "--offset", type=int, help="queue offset (queryMsgByOffset; -t -q)"),
            arg("-b", "--begin", help=f"key query: from this time ({TIME_FORMAT_HELP})"),
            arg("-e", "--end", help=f"key query: until this time ({TIME_FORMAT_HELP})"),
            arg("-m", "--max-num", type=_count, default=64, help="key query: at most (64)"),
            arg("--uniq-key", action="store_true", help="-i is a UNIQ_KEY, never an offset msgId"),
            arg("--first", action="store_true", help="-i: only the first message found"),
            *BODY_ARGS,
        ),
    ),
    SubCommand(
        "query-trace",
        ("queryMsgTraceById",),
        "a message's trace from the trace topic",
        cmd_query_trace,
        (
            arg("-i", "--msg-id", required=True, help="the message's msgId (UNIQ_KEY)"),
            arg("-t", "--trace-topic", help="the trace topic (default RMQ_SYS_TRACE_TOPIC)"),
            arg("-b", "--begin", help=f"from this store time ({TIME_FORMAT_HELP})"),
            arg("-e", "--end", help=f"until this store time ({TIME_FORMAT_HELP})"),
            arg("-m", "--max-num", type=_count, default=64, help="trace messages read (64)"),
        ),
    ),
    SubCommand(
        "topic-list",
        ("topicList",),
        "list the topics",
        cmd_topic_list,
        (
            arg(
                "--clusters",
                action="store_true",
                help="cluster name, topic and consumer groups",
            ),
        ),
    ),
    SubCommand(
        "topic-status",
        ("topicStatus",),
        "per queue min/max offset and last update time",
        cmd_topic_status,
        (_TOPIC,),
    ),
    SubCommand(
        "consumer-progress",
        ("consumerProgress", "getConsumerStatus"),
        "brokerOffset, consumerOffset and diff per queue",
        cmd_consumer_progress,
        (
            arg("-g", "--group", help="consumer group (default: every group's diff total)"),
            arg("-t", "--topic", help="only this topic"),
        ),
    ),
    SubCommand(
        "reset-offset",
        ("resetOffsetByTime", "skipAccumulatedMessage"),
        "commit offsets by time or value",
        cmd_reset_offset,
        (
            arg("-g", "--group", required=True),
            _TOPIC,
            arg(
                "-s",
                "--timestamp",
                help=f"{TIME_FORMAT_HELP}, now, or -1 (each queue's max offset)",
            ),
            arg("-o", "--offset", type=int, help="this queue offset"),
            arg("-q", "--queue-id", type=int, help="only this queue"),
            arg(
                "--rollback-only",
                action="store_true",
                help="only move offsets back, never forward (mqadmin's -f false)",
            ),
        ),
    ),
    SubCommand(
        "delete-topic",
        ("deleteTopic",),
        "delete a topic: topics.json entry, ConsumeQueues, offsets",
        cmd_delete_topic,
        (_TOPIC,),
    ),
    SubCommand(
        "update-topic",
        ("updateTopic",),
        "create a topic or change its queues, perm or order",
        cmd_update_topic,
        (
            _TOPIC,
            arg("-r", "--read-queue-nums", metavar="N", help="readQueueNums (1-1024)"),
            arg("-w", "--write-queue-nums", metavar="N", help="writeQueueNums (1-1024)"),
            arg("-p", "--perm", metavar="2|4|6", help="permission: 2 W, 4 R, 6 RW"),
            arg("-o", "--order", metavar="true|false", help="order topic"),
            arg(
                "--mqadmin-defaults",
                action="store_true",
                help="fields not given take the values mqadmin's updateTopic sends (8 queues, "
                "perm 6, order false), as it does; without it they keep theirs",
            ),
        ),
    ),
    SubCommand(
        "delete-sub-group",
        ("deleteSubGroup",),
        "delete a consumer group (-r true: and its offsets)",
        cmd_delete_sub_group,
        (
            arg("-g", "--group-name", dest="group", required=True),
            arg(
                "-r",
                "--remove-offset",
                metavar="true|false",
                default="false",
                help="also remove the group's offsets (default false)",
            ),
        ),
    ),
    SubCommand(
        "update-sub-group",
        ("updateSubGroup",),
        "create a consumer group or change its settings",
        cmd_update_sub_group,
        (
            arg("-g", "--group-name", dest="group", required=True),
            *(
                arg(
                    opt,
                    f"--{name}",
                    dest=attr,
                    metavar="true|false" if kind is bool else "N",
                    help=name,
                )
                for attr, opt, name, kind in _GROUP_OPTIONS
            ),
            arg(
                "--mqadmin-defaults",
                action="store_true",
                help="fields not given take the values mqadmin's updateSubGroup sends "
                "(RocketMQ's defaults, consumeBroadcastEnable and consumeFromMinEnable false), "
                "as it does; without it they keep theirs",
            ),
        ),
    ),
    SubCommand(
        "clone-group-offset",
        ("cloneGroupOffset",),
        "copy one group's offsets of a topic to another group",
        cmd_clone_group_offset,
        (
            arg("-s", "--src-group", required=True),
            arg("-d", "--dest-group", required=True),
            _TOPIC,
            arg(
                "-o",
                "--offline",
                help="accepted for mqadmin compatibility (a store on disk is always offline)",
            ),
        ),
    ),
    SubCommand(
        "query-cq",
        ("queryCq",),
        "print ConsumeQueue units",
        cmd_query_cq,
        (
            _TOPIC,
            arg("-q", "--queue", dest="queue_id", type=int, required=True),
            arg("-i", "--index", type=int, help="first queue offset (default: min offset)"),
            arg("-c", "--count", type=int, default=10, help="units (default 10)"),
        ),
    ),
    SubCommand(
        "stats-all",
        ("statsAll",),
        "messages and bytes per topic: last minute, hour, day, total",
        cmd_stats_all,
        (
            arg("-t", "--topic", help="only this topic"),
            arg(
                "-a",
                "--active-topic",
                action="store_true",
                help="only topics with messages in the last day",
            ),
            arg("-q", "--queues", action="store_true", help="a row per queue too"),
            arg("--now", help=f"the end of the windows ({TIME_FORMAT_HELP}; default now)"),
            arg("--json", action="store_true", help="one JSON object per row"),
        ),
    ),
    SubCommand(
        "get-broker-config",
        ("getBrokerConfig",),
        "the effective settings as broker.conf lines",
        cmd_get_broker_config,
    ),
    SubCommand(
        "broker-status",
        ("brokerStatus",),
        "what status.json shows, for a store not mounted",
        cmd_broker_status,
        (arg("--json", action="store_true", help="one JSON object"),),
    ),
    SubCommand(
        "snapshot-verify",
        (),
        "check a copy of a snapshot against its SNAPSHOT.json (sizes, CRC32C)",
        cmd_snapshot_verify,
        (
            arg(
                "directory",
                metavar="LOCATION",
                help="the copy (holds SNAPSHOT.json): a directory or a URI",
            ),
            arg(
                "-j",
                "--jobs",
                type=int,
                help="threads summing files (default: one per CPU; 4 for a URI)",
            ),
            _JSON,
        ),
        on_store=False,
    ),
    SubCommand(
        "snapshot-upload",
        (),
        "upload a snapshot to object storage (s3://, gs://, hdfs://, file://), only what changed",
        cmd_snapshot_upload,
        (
            arg("src", metavar="SRC", help="MNT/snapshots/NAME or a copy (holds SNAPSHOT.json)"),
            arg("location", metavar="URI", help="where the snapshot goes: a URI or a directory"),
            arg("-j", "--jobs", type=int, help="files uploaded at once (default 4)"),
            arg(
                "--force",
                action="store_true",
                help="go on although another upload's UPLOADING-* marker is there (one killed)",
            ),
            _JSON,
        ),
        on_store=False,
    ),
    SubCommand(
        "snapshot-download",
        (),
        "restore a snapshot from object storage into a new local directory",
        cmd_snapshot_download,
        (
            arg("location", metavar="URI", help="where the snapshot is: a URI or a directory"),
            arg("directory", metavar="DIR", help="a new or empty directory"),
            arg("-j", "--jobs", type=int, help="files downloaded at once (default 4)"),
            _JSON,
        ),
        on_store=False,
    ),
    SubCommand(
        "clean",
        ("deleteExpiredCommitLog",),
        "delete expired files now",
        cmd_clean,
        (
            arg(
                "--file-reserved-time",
                type=_hours,
                metavar="HOURS",
                help="override fileReservedTime (hours; default 72 or broker.conf)",
            ),
        ),
    ),
)

BY_NAME = {c.name: c for c in COMMANDS}


def add_subcommands(sub: Subparsers[ParserT]) -> None:
    """Register the offline commands (:data:`COMMANDS`) on the ``rmqfs`` subparsers."""
    for command in COMMANDS:
        command.register(sub)


def _check_common(args: argparse.Namespace) -> None:
    import codecs

    if getattr(args, "charset", None):
        try:
            codecs.lookup(args.charset)
        except LookupError:
            raise AdminError(f"unknown charset {args.charset}") from None
    if getattr(args, "print_body", None) is not None and args.print_body.lower() not in (
        "true",
        "false",
    ):
        raise AdminError(f"-d takes true or false, not {args.print_body!r}")


def wrap_command(func: Command) -> Command:
    """Wrap a command: known failures print ``rmqfs: message`` and return 1."""

    def run(args: argparse.Namespace) -> int:
        from rmqfs.engine.errors import StoreError

        try:
            _check_common(args)
            return func(args)
        except UsageError as exc:
            print(f"rmqfs: {exc}", file=sys.stderr)
            return 2
        except AdminError as exc:
            print(f"rmqfs: {exc}", file=sys.stderr)
        except StoreLockedError as exc:  # a writer holds the store: what to do instead
            print(f"rmqfs: {_locked_hint(args, exc)}", file=sys.stderr)
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

    # typeshed overloads parse_known_args on the namespace's type (None or a given one); an
    # override that passes both on to parse_known_intermixed_args matches no single overload.
    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def _intermixed(p: argparse.ArgumentParser) -> None:
    """Make ``p`` an :class:`_IntermixedParser` (a subparser is made by ``add_parser``, of the
    class of the parser the subparsers were added to)."""
    p.__class__ = _IntermixedParser


def build_parser() -> argparse.ArgumentParser:
    """A parser with only the offline commands (for tests and ``python -m rmqfs.mount.admin``)."""
    p = argparse.ArgumentParser(prog="rmqfs")
    add_subcommands(p.add_subparsers(dest="command", required=True))
    return p
