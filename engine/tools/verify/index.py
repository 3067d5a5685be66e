"""verify's IndexFile checks: each file under ``index/`` read leniently
(:func:`engine.format.indexfile.scan_index_file`: ``IndexFile.load`` without raising), then
its header, hash slots and item chains, and every item against the record it names.
"""

from __future__ import annotations

import bisect
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ...format.indexfile import IndexScan, build_key, scan_index_file
from ...format.javahash import index_key_hash
from ...format.source import StoreSource
from .commitlog import Records, SegmentFile, read_record_at, record_index
from .listing import index_names, not_files, regular_files
from .report import VerifyResult

if TYPE_CHECKING:
    from ...service.workprogress import ProgressFactory
    from ...storeconfig import StoreConfig


def check_index_files(
    root: str,
    segs: list[SegmentFile],
    res: VerifyResult,
    recs: Records,
    cfg: StoreConfig,
    progress: ProgressFactory,
    source: StoreSource,
) -> None:
    """Check every IndexFile under ``root``/index (``IndexService.load``, ``IndexFile``): each
    file read through ``source`` by :func:`engine.format.indexfile.scan_index_file` and its
    items checked against the records ``recs`` (the keys re-read from ``segs``); then the
    records with keys that no file indexes (``index-lag``, a warning: re-dispatched on open)
    and the keys missing inside the indexed range (``index-missing``). ``progress`` gets one
    bar in files. Raises OSError / ObjectStoreError from the source."""
    idx_dir = os.path.join(root, "index")
    names = []
    if source.isdir(idx_dir):
        listed = index_names(idx_dir, source)
        names = regular_files(idx_dir, listed, source)
        for odd in not_files(idx_dir, listed, source):
            res.add("error", "index-size", f"index/{odd}", "not a regular file")
            res.bad_index_files.add(f"index/{odd}")
    bar = progress(len(names), "IndexFile", "file")
    last_indexed = -1
    first_indexed = None
    found = 0
    for name in names:
        rel = f"index/{name}"
        path = os.path.join(idx_dir, name)
        r = _check_index_file(path, rel, segs, res, recs, cfg, source)
        bar.update(1)
        if r is None:
            continue
        lo, hi, n = r
        res.index_files += 1
        if n:
            found += n
            last_indexed = max(last_indexed, hi)
            first_indexed = lo if first_indexed is None else min(first_indexed, lo)
    bar.close()
    if recs.last_keyed > last_indexed and recs.last_keyed >= res.commitlog_min:
        i = bisect.bisect_right(recs.offsets, last_indexed)
        missing = sum(1 for k in recs.nkeys[i:] if k)
        res.add(
            "warning",
            "index-lag",
            "index",
            f"{missing} records with keys after CommitLog offset {max(last_indexed, 0)} are "
            "not indexed yet (re-dispatched when the store is opened for writing)",
        )
    if first_indexed is not None:
        i = bisect.bisect_left(recs.offsets, first_indexed)
        j = bisect.bisect_right(recs.offsets, last_indexed)
        expected = sum(recs.nkeys[i:j])
        if found < expected:
            res.add(
                "warning",
                "index-missing",
                "index",
                f"{expected - found} keys of records in CommitLog [{first_indexed}, "
                f"{last_indexed}] have no index item",
            )


def _read_index_file(
    path: str, rel: str, res: VerifyResult, cfg: StoreConfig, source: StoreSource
) -> IndexScan | None:
    """One IndexFile read by the format's lenient reader
    (:func:`engine.format.indexfile.scan_index_file`, ``IndexFile.load``); None, with the
    problem added to ``res``, when its size or header make it unusable (an empty file is a
    warning: the broker deletes it on load)."""
    scan = scan_index_file(path, cfg.max_hash_slot_num, cfg.max_index_num, source, rel)
    if scan.problem is None:
        return scan
    what, text = scan.problem
    if what == "empty":
        res.add("warning", "index-size", rel, text)
        return None
    if what == "geometry":
        text += " (give the broker.conf with its maxHashSlotNum and maxIndexNum: --config)"
    res.add("error", "index-header" if what == "header" else "index-size", rel, text)
    res.bad_index_files.add(rel)
    return None


def _check_index_file(
    path: str,
    rel: str,
    segs: list[SegmentFile],
    res: VerifyResult,
    recs: Records,
    cfg: StoreConfig,
    source: StoreSource,
) -> tuple[int, int, int] | None:
    """Check one IndexFile (its header, slots and items read through ``source`` in file order
    by :func:`_read_index_file`); returns (first phy, last phy, valid items) or None if
    unusable."""
    scan = _read_index_file(path, rel, res, cfg, source)
    if scan is None:
        return None
    (b_ts, _e_ts, b_phy, e_phy, slot_count, count) = scan.header
    slots, items = scan.hash_slot_num, scan.items
    bad = False

    def err(what: str, n: int | None = None) -> None:
        nonlocal bad
        bad = True
        res.add("error", "index-item" if n is not None else "index-header", rel, what, n)

    past_end, past_count = None, 0
    cached: tuple[int, Any, set[int]] = (
        -1,
        None,
        set(),
    )  # (phyOffset, record, key hashes) of the last item's record
    # the newest item of each bucket (numpy: a full file's 5 million slots and 20 million
    # items; 0 where a bucket has none; item numbers are below indexNum, an int32)
    buckets = items.key_hashes() % slots
    bucket_newest = np.zeros(slots, dtype=np.int32)
    if len(buckets):
        np.maximum.at(bucket_newest, buckets, np.arange(1, len(buckets) + 1, dtype=np.int32))
    valid = 0
    end = res.first_bad if res.first_bad is not None else res.commitlog_end
    for n, (h, phy, tdiff, prev) in enumerate(items, start=1):
        res.index_items += 1
        bucket = h % slots
        if h < 0:
            err(f"item {n}: negative keyHash {h}", n)
            continue
        if prev < 0 or prev >= n:
            err(f"item {n}: prevIndex {prev} does not point at an older item", n)
        elif prev and items[prev - 1][0] % slots != bucket:
            err(f"item {n}: prevIndex {prev} is in another hash bucket", n)
        if tdiff < 0:
            err(f"item {n}: negative timeDiff {tdiff}", n)
            continue
        if phy < res.commitlog_min:
            valid += 1
            continue  # the record expired; the file goes once all its records have
        i = record_index(recs, phy)
        if i is None:
            if phy >= end:
                if not (res.lock_holder and res.first_bad is None):  # else: newer than the scan
                    past_end = past_end or (n, phy)
                    past_count += 1
            else:
                err(f"item {n}: phyOffset {phy} is not the start of a record", n)
            continue
        if cached[0] != phy:
            rec = read_record_at(segs, phy)
            hashes = set()
            if rec is not None:
                if rec.uniq_key is not None:
                    hashes.add(index_key_hash(build_key(rec.topic, rec.uniq_key)))
                for k in rec.keys:
                    hashes.add(index_key_hash(build_key(rec.topic, k)))
            cached = (phy, rec, hashes)
        _, rec, hashes = cached
        if rec is None:
            err(f"item {n}: the record at {phy} does not decode", n)
            continue
        if h not in hashes:
            err(
                f"item {n}: keyHash {h} is not the hash of a key of the record at {phy} "
                f"(topic {rec.topic}, keys {rec.keys}, UNIQ_KEY {rec.uniq_key})",
                n,
            )
            continue
        if n > 1 and b_ts > 0 and rec.store_timestamp >= b_ts:
            expect = (rec.store_timestamp - b_ts) // 1000
            if tdiff != min(expect, 2**31 - 1):
                err(
                    f"item {n}: timeDiff {tdiff} s, the record was stored {expect} s after "
                    "the file's beginTimestamp",
                    n,
                )
                continue
        valid += 1
    if past_end:
        res.add(
            "error",
            "index-item",
            rel,
            f"{past_count} items from item {past_end[0]} on point past the end of the "
            f"CommitLog ({end}): the index is ahead of the CommitLog",
            past_end[0],
        )
    used_slots = scan.slots
    # each slot's checks in numpy; the slots found wrong said one by one, in slot order
    nums, vals = used_slots.numbers, used_slots.values
    outside = (vals < 0) | (vals >= count)
    inside = np.where(outside, 1, vals)
    other_bucket = ~outside & (buckets[inside - 1] != nums) if len(buckets) else ~outside
    not_newest = ~outside & ~other_bucket & (bucket_newest[nums] != vals)
    for j in np.flatnonzero(outside | other_bucket | not_newest).tolist():
        slot, v = int(nums[j]), int(vals[j])
        if outside[j]:
            err(f"hash slot {slot} points at item {v}, outside [1, {count})")
        elif other_bucket[j]:
            err(f"hash slot {slot} points at item {v} of another bucket")
        else:
            newest = int(bucket_newest[slot]) or None
            err(
                f"hash slot {slot} points at item {v}, but item {newest} is the "
                "newest of its bucket (items unreachable)"
            )
    bucket_newest[nums] = 0
    missing_slots = np.flatnonzero(bucket_newest)
    if len(missing_slots):
        err(
            f"{len(missing_slots)} hash buckets with items have an empty slot "
            f"(e.g. slot {int(missing_slots[0])})"
        )
    used = len(used_slots)
    if used != slot_count:
        err(f"hashSlotCount {slot_count} but {used} slots are in use")
    if items:
        if e_phy != items[-1][1]:
            err(f"endPhyOffset {e_phy} != the last item's phyOffset {items[-1][1]}")
        if b_phy != items[0][1]:
            err(f"beginPhyOffset {b_phy} != the first item's phyOffset {items[0][1]}")
    if bad:
        res.bad_index_files.add(rel)
    if not items:
        return (e_phy, e_phy, 0)
    return (items[0][1], items[-1][1], valid)
