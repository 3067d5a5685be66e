"""Engine benchmark: append, read back and abnormal recovery, against a plain ``os.write`` loop.

Usage::

    python -m bench.engine [--quick] [--dir DIR] [--out bench-out] [--repeat N]
                           [--only append|read|recovery|queues|growth ...] [--grow-to SIZE]

Everything runs in one process, on one core (the store's flush thread sleeps in fdatasync), in a
temporary directory under ``--dir`` (default ``bench-out/``, i.e. the disk of the checkout), so
the store and the baseline write to the same filesystem:

* **append**: ``MessageStore.put_messages`` of 100-byte, 1 KiB and 16 KiB bodies (loghub lines,
  tags ``TagA``, a UNIQ_KEY per message indexed in the IndexFile, 4 queues round-robin) in
  batches of 256 and of 1, and 100-byte bodies as MessageBatches of 256 (``batch=True``: one
  queue a batch, kept whole in one segment, as RocketMQ's ``putMessages``) and through
  ``MessageStore.put_bodies`` in batches of 256 (no ``Message`` and, with ``results=False``,
  no ``PutResult`` a body: what the mount's ``produce`` calls for each ``write()``; its
  records have no TAGS property, so they are 10 bytes shorter), and the issue's message (tags,
  a key of its own, a UNIQ_KEY) as ``Message`` objects (with and without PutResults) and as
  columns (``put_bodies(..., tags=, keys=)``: what ``rmqfs produce -a -k`` and the mount's
  ``produce.jsonl`` lines of body, tags and keys call). The baseline
  writes the very same number of CommitLog bytes with a sequential ``os.write`` loop, one
  write per batch, to a new file in the same directory.
  Reported: messages/s (wall clock, and per CPU-second of the process: what one core does
  when the machine is shared), MB/s of CommitLog bytes, and the ratio of the two bandwidths.
* **read**: ``MessageStore.iter_queue`` over every queue of the 1 KiB store (decoded
  ``MessageRecord``s) and ``get_message`` by queue offset, messages/s.
* **recovery**: a store of 1 GiB of CommitLog (one 1 GiB segment, 1 KiB bodies) is closed, the
  ``abort`` file is created as a crashed broker leaves it, and ``MessageStore(...)`` is timed:
  abnormal recovery scans every record from the start of the segment with CRC checks.
  Reported in MB/s of CommitLog scanned. The files are in the page cache (just written).
  Three times: with the derived files as the store left them, with ``index/`` removed (every
  record's UNIQ_KEY indexed again) and with ``consumequeue/`` removed (every unit rebuilt).
* **queues**: how a batch's cost grows with its topic's queues: 64,000 100-byte messages in
  batches of 16 and of 256 into a topic of 4, 16 and 64 queues (the round robin spreads each
  batch over all of them: one ConsumeQueue append a queue a batch), µs a message of CPU and
  the ratio to 4 queues.

* **growth** (only with ``--only growth``: it writes 10 GiB): how the costs above grow with the
  store. One store (default config: 1 GiB CommitLog segments, the IndexFile on, 4 queues) is
  filled with batches of 256 x 100-byte bodies to ``--grow-to`` bytes of CommitLog (bytes, or
  with a suffix K/M/G/T: ``10G``, ``512M``; default 10 GiB, ``--quick`` 1 GiB), one step per
  GiB (``--quick``: per 128 MiB). At each mark: the step's appends in messages/s and MB/s (wall
  clock and per CPU-second), the same bytes written by the plain ``os.write`` loop (one write
  per batch-sized chunk) to a scratch file in the same directory, deleted at once, and the
  ratio; 20,000 single puts (``put_messages([m])``, ``--quick`` 5,000), messages/s; 20,000
  ``get_message`` at random (queue, queue offset) over the whole store (``--quick`` 5,000),
  messages/s. At the first, middle and last mark (``--quick``: the last) the store is closed,
  its ``abort`` file put back and the reopen timed (abnormal recovery), with the CommitLog
  bytes it scanned (``MessageStore.recovery_report.bytes_scanned``) and a check that the
  CommitLog and every queue came back to what was written. Like RocketMQ's
  ``CommitLog.recoverAbnormally`` (which walks the segments from the last one back to the
  newest whose first message is older than the checkpoint's ``getMinTimestamp``, min of the
  CommitLog and ConsumeQueue flush times less 3 s, and checks every record from there to the
  end), recovery scans from a segment start, not from the start of the store: at a mark the
  store has just rolled into a new segment (a few seconds old), so recovery goes one segment
  further back and scans about 1 GiB whatever the store's size. The store is written once
  (``--repeat`` does not apply) and removed at the end, also on failure or Ctrl-C. The quick
  run takes about 16 s on the 2-vCPU machine of docs/performance.md; a 10 GiB run about
  2 minutes if the disk keeps up with about 120 MB/s of writeback (an estimate from the quick
  run, not measured). Results go to ``engine-growth[-quick].json`` when growth runs alone.

Every case runs ``--repeat`` times (default 5; store and baseline alternate) and the best run
of each is reported, since the machine may be shared; all run times are in the JSON.
Messages are created before the clock starts (a producer has its messages already); batches are
reused round-robin. Results are printed as a table and written to ``bench-out/engine.json``.
``--quick`` runs a tenth of the volume with a 128 MiB CommitLog for recovery.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rmqfs.engine.store import Message, MessageStore, StoreConfig

REPO = Path(__file__).resolve().parents[1]
LOGHUB = Path(os.environ.get("RMQFS_SHARED", REPO.parent / "shared")) / "data" / "loghub"
TOPIC = "BenchTopic"
BATCH = 256
MB = 1_000_000
MIB = 1 << 20
GIB = 1 << 30


def _corpus() -> bytes:
    """Real log text to cut bodies from (loghub), or a fixed pattern when it is missing."""
    parts = []
    for p in sorted(LOGHUB.glob("*_2k.log")):
        parts.append(p.read_bytes())
    data = b"".join(parts)
    return data if len(data) > 1 << 20 else (b"0123456789abcdef" * 65536)


def make_batches(
    body_size: int, batch: int, distinct: int, keyed: bool = False
) -> list[list[Message]]:
    """``distinct`` batches of ``batch`` messages with bodies of exactly ``body_size`` bytes and
    tags; ``keyed``: each with a key of its own too (``order-<n>``, as a producer's business key:
    the message the issue's RocketMQ figures put, with tags, a key and a UNIQ_KEY)."""
    corpus = _corpus()
    out, pos = [], 0
    for b in range(distinct):
        msgs = []
        for i in range(batch):
            if pos + body_size > len(corpus):
                pos = (pos + 7919) % max(1, len(corpus) - body_size)
            key = f"order-{b * batch + i}" if keyed else None
            msgs.append(Message(TOPIC, corpus[pos : pos + body_size], tags="TagA", keys=key))
            pos += body_size
        out.append(msgs)
    return out


def _open(root: str, **cfg) -> MessageStore:
    store = MessageStore(root, StoreConfig(**cfg))
    store.create_topic(TOPIC, 4)
    return store


def _append_once(
    work: str,
    batches,
    nbatches: int,
    tag: str,
    message_batch: bool = False,
    bodies: bool = False,
    results: bool = True,
    keyed: bool = False,
) -> tuple[float, float, int, list]:
    """One run of :func:`bench_append`: ``(seconds, CPU seconds, CommitLog bytes, the bytes of
    each distinct batch)``; ``bodies``: the batches' bodies through ``put_bodies`` without
    PutResults (what the mount's produce calls), their bytes from the CommitLog's end, and with
    ``keyed`` their tags and keys too, as columns (``rmqfs produce -a -k``, ``produce.jsonl``
    lines of body, tags and keys), PutResults as ``results`` says; ``results`` False:
    ``put_messages`` builds none either (what produce.jsonl calls)."""
    root = os.path.join(work, f"append-{tag}")
    store = _open(root)
    sizes = []
    if bodies:
        plain = [[m.body for m in b] for b in batches]
        keys = [[m.keys for m in b] for b in batches] if keyed else None
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(nbatches):
            j = i % len(plain)
            if i < len(plain):
                start = store.commitlog.max_offset
            if keys is None:
                store.put_bodies(TOPIC, plain[j], results=False)
            else:
                store.put_bodies(TOPIC, plain[j], results=results, tags="TagA", keys=keys[j])
            if i < len(plain):
                sizes.append(store.commitlog.max_offset - start)
    else:
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(nbatches):
            start = store.commitlog.max_offset
            store.put_messages(batches[i % len(batches)], batch=message_batch, results=results)
            if i < len(batches):
                sizes.append(store.commitlog.max_offset - start)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    written = store.commitlog.max_offset
    store.close()
    shutil.rmtree(root)
    return elapsed, cpu, written, sizes


def _plain_once(work: str, sizes: list, written: int, tag: str) -> float:
    """The baseline: the same bytes, one os.write per batch, sequentially to a new file."""
    chunks = [bytes(n) for n in sizes]
    path = os.path.join(work, f"plain-{tag}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left, i = written, 0
        t1 = time.perf_counter()
        while left > 0:
            chunk = chunks[i % len(chunks)]
            if len(chunk) > left:
                chunk = chunk[:left]
            os.write(fd, chunk)
            left -= len(chunk)
            i += 1
        return time.perf_counter() - t1
    finally:  # also on failure or Ctrl-C: the scratch file never stays on the disk
        os.close(fd)
        os.unlink(path)


def bench_append(
    work: str,
    body_size: int,
    batch: int,
    count: int,
    repeat: int,
    message_batch: bool = False,
    bodies: bool = False,
    keyed: bool = False,
    results: bool = True,
) -> dict:
    """Put ``count`` messages in batches of ``batch`` (``message_batch``: as MessageBatches;
    ``bodies``: their bodies through ``put_bodies``; ``keyed``: each message with a key of its
    own; ``results`` False: no PutResults built), then write as many bytes with os.write;
    ``repeat`` times, alternating, keeping the best run of each (the machine is shared)."""
    batches = make_batches(body_size, batch, max(1, min(64, count // batch)), keyed)
    nbatches = max(1, count // batch)
    runs = []
    for _r in range(repeat):
        tag = f"{body_size}-{batch}"
        elapsed, cpu, written, sizes = _append_once(
            work, batches, nbatches, tag, message_batch, bodies, results, keyed
        )
        plain = _plain_once(work, sizes, written, tag)
        runs.append((elapsed, cpu, plain))
    elapsed, cpu, _ = min(runs)
    plain_elapsed = min(r[2] for r in runs)
    n = nbatches * batch
    mbps = written / elapsed / MB
    plain_mbps = written / plain_elapsed / MB
    return {
        "body_bytes": body_size,
        "batch": batch,
        "message_batch": message_batch,
        "put_bodies": bodies,
        "keyed": keyed,
        "results": results,
        "messages": n,
        "commitlog_bytes": written,
        "seconds": round(elapsed, 3),
        "cpu_seconds": round(cpu, 3),
        "messages_per_s": round(n / elapsed),
        "messages_per_cpu_s": round(n / cpu) if cpu > 0 else None,
        "mb_per_s": round(mbps, 1),
        "plain_write_mb_per_s": round(plain_mbps, 1),
        "ratio_to_plain_write": round(mbps / plain_mbps, 3),
        "runs_seconds": [[round(a, 3), round(c, 3)] for a, _, c in runs],
    }


def bench_read(work: str, body_size: int, count: int, repeat: int) -> dict:
    """Fill a store, then read every queue back by queue offset (best of ``repeat``)."""
    root = os.path.join(work, f"read-{body_size}")
    store = _open(root)
    batches = make_batches(body_size, BATCH, distinct=16)
    for i in range(max(1, count // BATCH)):
        store.put_messages(batches[i % len(batches)])
    queues = store.queue_ids(TOPIC)
    gc.collect()
    seq = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = 0
        for q in queues:
            for _qoff, _rec in store.iter_queue(TOPIC, q):
                n += 1
        seq = min(seq, time.perf_counter() - t0)
    # Single reads by queue offset (get_message), a strided sample over all queues.
    sample = min(n, 50_000)
    single = float("inf")
    for _ in range(repeat):
        t1 = time.perf_counter()
        done = 0
        for q in queues:
            hi = store.max_offset(TOPIC, q)
            step = max(1, hi * len(queues) // sample)
            for off in range(0, hi, step):
                store.get_message(TOPIC, q, off)
                done += 1
        single = min(single, time.perf_counter() - t1)
    store.close()
    shutil.rmtree(root)
    return {
        "body_bytes": body_size,
        "messages": n,
        "iter_queue_messages_per_s": round(n / seq),
        "get_message_messages_per_s": round(done / single),
        "get_message_reads": done,
    }


#: what the recovery part takes away before each reopen: nothing (the derived files are as a
#: broker leaves them), the IndexFiles, or the ConsumeQueues (both rebuilt from the CommitLog);
#: last, the IndexFiles of a CommitLog with a record whose properties are not UTF-8 every
#: :data:`DAMAGE_EVERY` bytes (a damaged or hostile store: Java writes UTF-8)
RECOVERY_LOSSES = ("none", "index", "consumequeue", "index, not UTF-8")
DAMAGE_EVERY = 4 * MIB


def _damage_properties(segment: str, end: int, every: int) -> int:
    """Make the UNIQ_KEY of the first record after each ``every`` bytes of the CommitLog
    ``segment`` (records up to ``end``) not UTF-8, in place, its length kept (the body CRC does
    not cover properties); returns how many."""
    name = b"UNIQ_KEY\x01"
    n = 0
    with open(segment, "r+b") as f:
        for at in range(0, end, every):
            f.seek(at)
            chunk = f.read(min(64 * 1024, end - at))
            i = chunk.find(name)
            if i < 0:
                continue
            f.seek(at + i + len(name) + 2)
            f.write(b"\xff\xc3\x28")  # a byte that starts nothing, a lead byte cut short
            n += 1
    return n


def bench_recovery(
    work: str, size: int, repeat: int, body_size: int = 1024, losses=RECOVERY_LOSSES
) -> list[dict]:
    """Build ``size`` bytes of CommitLog in one segment, fake a crash, time the reopen (best of
    ``repeat``: each reopen finds the abort file again and scans the whole segment), once per
    loss of :data:`RECOVERY_LOSSES` in ``losses``: with ``index`` or ``consumequeue`` that
    directory is removed before each reopen, and recovery rebuilds it (the count it reports
    is checked); ``index, not UTF-8`` damages the CommitLog first (:func:`_damage_properties`,
    so it comes last). One dict per loss."""
    # what abnormal recovery's batched scan loads on its first use (numpy, pyarrow): loaded
    # now, so that the first reopen (the "none" row) times recovery and not the imports
    from rmqfs.engine.read import recoverruns  # noqa: F401

    root = os.path.join(work, "recovery")
    store = _open(root, mapped_file_size_commit_log=size)
    batches = make_batches(body_size, BATCH, distinct=16)
    per_batch = sum(r.size for r in store.put_messages(batches[0]))
    i = 1
    while store.commitlog.max_offset + per_batch + 8 < size:
        store.put_messages(batches[i % len(batches)])
        i += 1
    built = store.commitlog.max_offset
    messages = i * BATCH
    store.close()
    rows = []
    for lose in losses:
        times = []
        ok = True
        lost_dir = lose.split(",")[0]
        damaged = 0
        if lose == "index, not UTF-8":
            segment = os.path.join(root, "commitlog", f"{0:020d}")
            damaged = _damage_properties(segment, built, DAMAGE_EVERY)
        for _ in range(repeat):
            if lose != "none":
                shutil.rmtree(os.path.join(root, lost_dir))
            Path(root, "abort").write_text("0")  # a broker that died leaves its abort file
            gc.collect()
            t0 = time.perf_counter()
            store = MessageStore(root, StoreConfig(mapped_file_size_commit_log=size))
            times.append(time.perf_counter() - t0)
            rep = store.recovery_report
            ok = ok and store.commitlog.max_offset == built and not store.last_exit_ok
            ok = ok and rep is not None
            if rep is not None and lost_dir == "index":  # a UNIQ_KEY a message
                ok = ok and rep.index_rebuilt == messages
            if rep is not None and lose == "consumequeue":
                ok = ok and rep.units_rebuilt == messages
            store.close()
        elapsed = min(times)
        rows.append(
            {
                "lost": lose,
                "records_not_utf8": damaged,
                "commitlog_bytes": built,
                "messages": messages,
                "body_bytes": body_size,
                "seconds": round(elapsed, 3),
                "mb_per_s": round(built / elapsed / MB, 1),
                "messages_per_s": round(messages / elapsed),
                "recovered_whole_log": ok,
                "runs_seconds": [round(t, 3) for t in times],
            }
        )
    shutil.rmtree(root)
    return rows


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from ``text``: an integer (bytes), or a number with a binary suffix K, M, G or T
    (any case, optionally followed by ``B`` or ``iB``): ``10G`` = ``10GiB`` = 10 * 2**30 bytes,
    ``512M`` = 512 * 2**20, ``1.5G`` = 1.5 * 2**30. Raises ValueError for anything else or 0."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K, M, G or T)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise ValueError(f"not a positive size: {text!r}")
    return value


def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def growth_marks(grow_to: int, step: int) -> list[int]:
    """The CommitLog sizes (bytes) at which the growth part measures: every ``step`` bytes up
    to ``grow_to`` bytes, and ``grow_to`` itself when it is not a multiple of ``step``."""
    marks = list(range(step, grow_to + 1, step))
    if not marks or marks[-1] != grow_to:
        marks.append(grow_to)
    return marks


def _grow_step(store: MessageStore, batches: list, mark: int, sizes: list) -> dict:
    """Batches of ``batches`` until the CommitLog holds ``mark`` bytes; the first batches' sizes
    (bytes) go to ``sizes`` (the plain baseline writes chunks of those sizes)."""
    start = store.commitlog.max_offset
    n = 0
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    while store.commitlog.max_offset < mark:
        res = store.put_messages(batches[n % len(batches)])
        if len(sizes) < len(batches):
            sizes.append(sum(r.size for r in res))
        n += 1
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "step_bytes": store.commitlog.max_offset - start,
        "step_messages": n * BATCH,
        "step_seconds": round(elapsed, 3),
        "step_cpu_seconds": round(cpu, 3),
    }


def _single_puts(store: MessageStore, singles: list, count: int) -> float:
    """``count`` puts of one message each (``put_messages([m])``): messages/s, wall clock."""
    gc.collect()
    t0 = time.perf_counter()
    for i in range(count):
        store.put_messages(singles[i % len(singles)])
    return count / (time.perf_counter() - t0)


def _random_gets(store: MessageStore, count: int, seed: int) -> float:
    """``count`` ``get_message`` calls at random (queue, queue offset) over the whole store
    (offsets drawn before the clock starts): messages/s, wall clock."""
    rng = random.Random(seed)
    spans = [
        (q, store.min_offset(TOPIC, q), store.max_offset(TOPIC, q)) for q in store.queue_ids(TOPIC)
    ]
    spans = [s for s in spans if s[2] > s[1]]
    picks = []
    for _ in range(count):
        q, lo, hi = spans[rng.randrange(len(spans))]
        picks.append((q, rng.randrange(lo, hi)))
    gc.collect()
    t0 = time.perf_counter()
    for q, off in picks:
        store.get_message(TOPIC, q, off)
    return count / (time.perf_counter() - t0)


#: queues: the topic sizes and batch sizes of the queues part.
QUEUE_COUNTS = (4, 16, 64)
QUEUE_BATCHES = (16, BATCH)


def bench_queues(
    work: str,
    queue_counts: tuple[int, ...] = QUEUE_COUNTS,
    batch_sizes: tuple[int, ...] = QUEUE_BATCHES,
    count: int = 64_000,
    repeat: int = 5,
) -> list[dict]:
    """How a batch's cost grows with its topic's queues: ``count`` 100-byte messages (the
    append part's: tags, an indexed UNIQ_KEY) in batches of each of ``batch_sizes`` into a
    fresh store's topic of each of ``queue_counts`` queues, the round robin spreading each batch
    over all of them (a ConsumeQueue append per queue a batch). CPU time of the puts after 16
    batches to warm the store, the best of ``repeat`` runs; µs a message and messages per
    CPU-second, and the ratio to the fewest queues at the same batch size. One dict per case;
    the stores are removed."""
    rows: list[dict] = []
    for b in batch_sizes:
        batches = make_batches(100, b, distinct=16)
        n = max(count // b, 1)
        for q in queue_counts:
            best = float("inf")
            for k in range(repeat):
                root = os.path.join(work, f"queues-{q}-{b}-{k}")
                store = MessageStore(root, StoreConfig())
                try:
                    store.create_topic(TOPIC, q)
                    for i in range(16):
                        store.put_messages(batches[i % 16])
                    gc.collect()
                    c0 = time.process_time()
                    for i in range(n):
                        store.put_messages(batches[i % 16])
                    best = min(best, time.process_time() - c0)
                finally:
                    store.close()
                    shutil.rmtree(root, ignore_errors=True)
            us = best / (n * b) * 1e6
            rows.append(
                {
                    "queues": q,
                    "batch": b,
                    "messages": n * b,
                    "us_per_message": round(us, 3),
                    "messages_per_cpu_s": round(n * b / max(best, 1e-9)),
                }
            )
    for r in rows:
        first = next(x for x in rows if x["batch"] == r["batch"])
        r["x_fewest_queues"] = round(r["us_per_message"] / first["us_per_message"], 2)
    return rows


def print_queues_table(rows: list[dict]) -> None:
    """The queues part as a Markdown table."""
    print()
    print(f"| queues | batch | µs a message | per CPU-second | x of {rows[0]['queues']} queues |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['queues']} | {r['batch']} | {r['us_per_message']:.3f} | "
            f"{r['messages_per_cpu_s']:,} | {r['x_fewest_queues']:.2f} |"
        )


def _recover_at(root: str, store: MessageStore) -> tuple[MessageStore, dict]:
    """Close ``store``, put its ``abort`` file back as a crashed broker leaves it and time the
    reopen (abnormal recovery): the reopened store and what recovery did (seconds, CommitLog
    bytes scanned and from where, whether the CommitLog and every queue came back whole)."""
    written = store.commitlog.max_offset
    queues = store.queue_max_offsets(TOPIC)
    store.close()
    Path(root, "abort").write_text("0")
    gc.collect()
    t0 = time.perf_counter()
    store = MessageStore(root, StoreConfig())
    elapsed = time.perf_counter() - t0
    rep = store.recovery_report
    return store, {
        "recovery_seconds": round(elapsed, 3),
        "recovery_commitlog_bytes": written,
        "recovery_scan_start": rep.scan_start if rep else None,
        "recovery_bytes_scanned": rep.bytes_scanned if rep else None,
        "recovered_whole_store": (
            store.commitlog.max_offset == written
            and not store.last_exit_ok
            and store.queue_max_offsets(TOPIC) == queues
        ),
    }


def bench_growth(
    work: str, marks: list[int], single_count: int, read_count: int, recover_at: set[int]
) -> list[dict]:
    """Grow one store (default config: 1 GiB segments, index on, 4 queues) with batches of
    256 x 100-byte bodies to each CommitLog size of ``marks`` (bytes) in turn; at each mark:
    the step's appends (messages/s, MB/s, per CPU-second) against as many bytes of plain
    ``os.write`` (a scratch file, deleted at once), ``single_count`` single puts (messages/s),
    ``read_count`` random ``get_message`` (messages/s), and at the marks of ``recover_at`` an
    abnormal recovery (seconds). One dict per mark; the store is removed at the end, also on
    failure or Ctrl-C."""
    # What abnormal recovery's batched scan loads on its first use (numpy, pyarrow), loaded now,
    # so that the first recovery times the recovery and not the imports.
    from rmqfs.engine.read import recoverruns  # noqa: F401

    root = os.path.join(work, "growth")
    batches = make_batches(100, BATCH, distinct=64)
    singles = make_batches(100, 1, distinct=64)
    sizes: list[int] = []
    rows: list[dict] = []
    store = _open(root)
    try:
        for mark in marks:
            row = _grow_step(store, batches, mark, sizes)
            row["commitlog_bytes"] = store.commitlog.max_offset
            plain = _plain_once(work, sizes, row["step_bytes"], "growth")
            mbps = row["step_bytes"] / row["step_seconds"] / MB
            plain_mbps = row["step_bytes"] / plain / MB
            row.update(
                messages_per_s=round(row["step_messages"] / row["step_seconds"]),
                messages_per_cpu_s=round(row["step_messages"] / max(row["step_cpu_seconds"], 1e-9)),
                mb_per_s=round(mbps, 1),
                plain_write_mb_per_s=round(plain_mbps, 1),
                ratio_to_plain_write=round(mbps / plain_mbps, 4),
                single_puts=single_count,
                single_put_messages_per_s=round(_single_puts(store, singles, single_count)),
                get_message_reads=read_count,
                get_message_messages_per_s=round(_random_gets(store, read_count, mark)),
            )
            if mark in recover_at:
                store, rec = _recover_at(root, store)
                row.update(rec)
            rows.append(row)
            print(_growth_line(row), flush=True)
    finally:
        try:
            store.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return rows


def _growth_line(r: dict) -> str:
    line = (
        f"growth {r['commitlog_bytes'] / 2**30:6.3f} GiB  batch {r['messages_per_s']:>9,} msg/s "
        f"({r['messages_per_cpu_s']:,} per CPU-s) {r['mb_per_s']:>6.1f} MB/s  plain "
        f"{r['plain_write_mb_per_s']:>7.1f} MB/s  single {r['single_put_messages_per_s']:,} msg/s  "
        f"get {r['get_message_messages_per_s']:,} msg/s"
    )
    if "recovery_seconds" in r:
        line += (
            f"  recovery {r['recovery_seconds']} s "
            f"({(r['recovery_bytes_scanned'] or 0) / 2**20:.0f} MiB scanned)"
        )
    return line


def machine() -> dict:
    """CPU model, cores, Python, kernel and filesystem of the run."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a tenth of the volume (smoke run); growth: 1 GiB in steps of 128 MiB",
    )
    ap.add_argument("--dir", default=None, help="where the stores go (default: bench-out/)")
    ap.add_argument("--out", default=str(REPO / "bench-out"), help="where engine.json goes")
    ap.add_argument(
        "--repeat", type=int, default=5, help="runs per case; the best is reported (default 5)"
    )
    ap.add_argument(
        "--only",
        choices=["append", "read", "recovery", "queues", "growth"],
        action="append",
        help="run only these parts (repeatable); growth runs only when named here",
    )
    ap.add_argument(
        "--grow-to",
        type=_size_arg,
        default=None,
        metavar="SIZE",
        help="growth: CommitLog size to grow to, bytes or with K/M/G/T (default 10G, --quick 1G)",
    )
    args = ap.parse_args(argv)
    scale = 0.1 if args.quick else 1.0
    os.makedirs(args.out, exist_ok=True)
    base = args.dir or args.out
    os.makedirs(base, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-engine-", dir=base)
    parts = set(args.only or ["append", "read", "recovery", "queues"])
    results: dict = {
        "machine": machine(),
        "command": " ".join(["python -m bench.engine", *(sys.argv[1:] if argv is None else argv)]),
        "dir": os.path.abspath(work),
    }
    try:
        if "append" in parts:
            results["append"] = []
            # (body bytes, batch, MessageBatch, put_bodies, a key each, PutResults built)
            cases = [
                (body, batch, False, False, False, True)
                for body in (100, 1024, 16384)
                for batch in (BATCH, 1)
            ]
            cases[1:1] = [
                (100, BATCH, True, False, False, True),
                (100, BATCH, False, True, False, True),
                (
                    100,
                    BATCH,
                    False,
                    False,
                    True,
                    True,
                ),  # the message: tags, a key, UNIQ_KEY
                (100, BATCH, False, False, True, False),  # the same, no PutResults built
                (100, BATCH, False, True, True, True),  # the same from columns (put_bodies)
                (100, BATCH, False, True, True, False),
            ]
            cases[8:8] = [(100, 1, False, False, True, True)]
            counts = {100: 500_000, 1024: 300_000, 16384: 40_000}
            for body, batch, message_batch, bodies, keyed, results_too in cases:
                count = counts[body]
                n = int(count * scale) if batch > 1 else int(min(count, 20_000) * scale)
                r = bench_append(
                    work,
                    body,
                    batch,
                    max(n, batch),
                    args.repeat,
                    message_batch,
                    bodies,
                    keyed,
                    results_too,
                )
                results["append"].append(r)
                kind = " MessageBatch" if message_batch else " put_bodies" if bodies else ""
                kind += (" keyed" if keyed else "") + ("" if results_too else ", no results")
                print(
                    f"append {body:>6} B x{batch:<4}{kind} {r['messages_per_s']:>9,} msg/s "
                    f"({r['messages_per_cpu_s']:,} per CPU-s) "
                    f"{r['mb_per_s']:>8.1f} MB/s  plain {r['plain_write_mb_per_s']:>8.1f} "
                    f"MB/s  ratio {r['ratio_to_plain_write']:.3f}",
                    flush=True,
                )
        if "read" in parts:
            r = bench_read(work, 1024, int(200_000 * scale), args.repeat)
            results["read"] = r
            print(
                f"read   {r['body_bytes']:>6} B  iter_queue {r['iter_queue_messages_per_s']:,}"
                f" msg/s  get_message {r['get_message_messages_per_s']:,} msg/s",
                flush=True,
            )
        if "recovery" in parts:
            size = (128 if args.quick else 1024) * 1024 * 1024
            results["recovery"] = bench_recovery(work, size, args.repeat)
            for r in results["recovery"]:
                print(
                    f"recovery {r['commitlog_bytes'] / 2**20:.0f} MiB, lost: {r['lost']:<12} "
                    f"in {r['seconds']} s: {r['mb_per_s']} MB/s "
                    f"({r['messages_per_s']:,} msg/s)",
                    flush=True,
                )
        if "queues" in parts:
            results["queues"] = bench_queues(work, count=int(64_000 * scale), repeat=args.repeat)
            for r in results["queues"]:
                print(
                    f"queues {r['queues']:>3} batch {r['batch']:>4}  {r['us_per_message']:.3f} µs "
                    f"a message ({r['messages_per_cpu_s']:,} per CPU-s, "
                    f"{r['x_fewest_queues']:.2f}x)",
                    flush=True,
                )
        if "growth" in parts:
            t0 = time.perf_counter()
            results["growth"] = run_growth(work, args.grow_to, args.quick)
            results["growth_seconds"] = round(time.perf_counter() - t0, 1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results)
    name = "engine-growth" if parts == {"growth"} else "engine"
    out = Path(args.out) / (f"{name}-quick.json" if args.quick else f"{name}.json")
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def run_growth(work: str, grow_to: int | None, quick: bool) -> list[dict]:
    """The growth part as ``main`` runs it: to ``grow_to`` bytes of CommitLog (default 10 GiB,
    ``quick`` 1 GiB) in steps of 1 GiB (``quick``: 128 MiB), 20,000 single puts and reads per
    mark (``quick``: 5,000), recovery at the first, middle and last mark (``quick``: last)."""
    step = 128 * MIB if quick else GIB
    marks = growth_marks(grow_to or (GIB if quick else 10 * GIB), step)
    recover_at = {marks[-1]}
    if not quick:
        recover_at |= {marks[0], marks[max(0, len(marks) // 2 - 1)]}
    samples = 5_000 if quick else 20_000
    return bench_growth(work, marks, samples, samples, recover_at)


def _append_kind(r: dict) -> str:
    """How an append case put its batches, as the table names it."""
    if r.get("message_batch"):
        return "MessageBatch"
    if r.get("put_bodies") and not r.get("keyed"):
        return "put_bodies, batch"
    kind = "a key each, batch" if r.get("keyed") else "batch"
    if r.get("put_bodies"):
        kind = "put_bodies, tags and " + kind
    return kind if r.get("results", True) else kind.replace("batch", "no PutResults, batch")


def print_table(results: dict) -> None:
    """The results as a Markdown table (pasted into docs/performance.md)."""
    if any(k in results for k in ("append", "read", "recovery")):
        print()
        print("| case | messages/s | per CPU-second | MB/s | plain os.write MB/s | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
    for r in results.get("append", []):
        print(
            f"| append {r['body_bytes']} B bodies, "
            f"{_append_kind(r)} {r['batch']} | "
            f"{r['messages_per_s']:,} | {r['messages_per_cpu_s']:,} | {r['mb_per_s']:.1f} | "
            f"{r['plain_write_mb_per_s']:.1f} | {r['ratio_to_plain_write']:.2f} |"
        )
    r = results.get("read")
    if r:
        print(
            f"| read back, iter_queue ({r['body_bytes']} B) | "
            f"{r['iter_queue_messages_per_s']:,} | | | | |"
        )
        print(
            f"| read back, get_message by queue offset ({r['body_bytes']} B) | "
            f"{r['get_message_messages_per_s']:,} | | | | |"
        )
    for r in results.get("recovery", []):
        lost = {
            "none": "",
            "index": ", IndexFiles rebuilt",
            "consumequeue": ", ConsumeQueues rebuilt",
            "index, not UTF-8": ", IndexFiles rebuilt, a record not in UTF-8 every 4 MiB",
        }
        print(
            f"| abnormal recovery{lost[r['lost']]}, {r['commitlog_bytes'] / 2**20:.0f} MiB "
            f"CommitLog ({r['body_bytes']} B bodies) | {r['messages_per_s']:,} | | "
            f"{r['mb_per_s']:.1f} | | |"
        )
    if results.get("queues"):
        print_queues_table(results["queues"])
    if results.get("growth"):
        print_growth_table(results["growth"])


def print_growth_table(rows: list[dict]) -> None:
    """The growth part as a Markdown table, one row per mark (CommitLog GiB; messages/s and
    MB/s of the step's batch appends; recovery in seconds and MiB of CommitLog scanned), and a
    line saying how the last step compares with the first."""
    print()
    print(
        "| CommitLog GiB | batch msg/s | per CPU-s | MB/s | plain MB/s | ratio | single put msg/s "
        "| get_message msg/s | recovery s | recovery scanned MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rec = scanned = ""
        if "recovery_seconds" in r:
            rec = f"{r['recovery_seconds']:.3f}" + ("" if r["recovered_whole_store"] else " (!)")
            scanned = f"{(r['recovery_bytes_scanned'] or 0) / MIB:,.0f}"
        print(
            f"| {r['commitlog_bytes'] / GIB:.3f} | {r['messages_per_s']:,} | "
            f"{r['messages_per_cpu_s']:,} | {r['mb_per_s']:.1f} | {r['plain_write_mb_per_s']:.1f} | "
            f"{r['ratio_to_plain_write']:.3f} | {r['single_put_messages_per_s']:,} | "
            f"{r['get_message_messages_per_s']:,} | {rec} | {scanned} |"
        )
    first, last = rows[0], rows[-1]
    print()
    print(
        f"From the first step to the last ({first['commitlog_bytes'] / GIB:.3f} to "
        f"{last['commitlog_bytes'] / GIB:.3f} GiB of CommitLog), last/first: batch appends "
        f"{last['messages_per_s'] / first['messages_per_s']:.2f}x "
        f"({last['messages_per_cpu_s'] / first['messages_per_cpu_s']:.2f}x per CPU-second), "
        f"single puts {last['single_put_messages_per_s'] / first['single_put_messages_per_s']:.2f}x, "
        f"get_message {last['get_message_messages_per_s'] / first['get_message_messages_per_s']:.2f}x."
    )
    recs = [r for r in rows if "recovery_seconds" in r]
    if recs:
        print(
            "Abnormal recovery: "
            + ", ".join(
                f"{r['recovery_seconds']:.3f} s for {(r['recovery_bytes_scanned'] or 0) / MIB:,.0f} "
                f"MiB scanned of {r['recovery_commitlog_bytes'] / GIB:.3f} GiB"
                for r in recs
            )
            + "."
        )


if __name__ == "__main__":
    sys.exit(main())
