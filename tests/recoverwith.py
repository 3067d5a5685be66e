"""Recovery by the batched walk or by ``CommitLog.scan_raw`` alone, for the tests that compare
the two (tests/engine/test_recovery_batches.py, test_recovery_dledger.py; one home)."""

from __future__ import annotations

from pathlib import Path

from rmqfs.engine.read import recoverruns
from rmqfs.engine.service import recovery


def recover_with(monkeypatch, batched: bool, budget: int = 0) -> tuple[list[int], list[tuple]]:
    """Make the stores opened next recover with the batched walk (``batched``) or with
    ``scan_raw`` alone, batches after the first ``budget`` bytes scanned, in ranges of 4 KiB
    (many decoded ahead of the one given, as in a large store; DLedger entries cut by ranges
    and read again). Returns two lists the walk fills: the records of each run given, and the
    arguments of each call of the batched walk. ``monkeypatch.undo()`` ends it."""
    real = recovery.recover
    given: list[int] = []
    calls: list[tuple] = []

    def counted(*a, **k):
        calls.append(a)
        runs = recoverruns.recovery_runs(*a, **k)
        assert runs is not None  # the compiled kernel is there
        for run in runs:
            given.append(len(run.offsets))
            yield run

    def recover(*a, **k):
        k["runs"] = counted if batched else None
        return real(*a, **k)

    monkeypatch.setattr(recovery, "recover", recover)
    monkeypatch.setattr(recovery, "BATCHES_AFTER", budget)
    monkeypatch.setattr(recoverruns, "READ_SIZE", 4096)
    return given, calls


def report_fields(r: recovery.RecoveryReport | None) -> tuple:
    """What the comparisons compare of a :class:`RecoveryReport`: where the scan started and
    ended, why, and what it scanned, cut, dropped and rebuilt."""
    assert r is not None
    return (
        r.scan_start,
        r.scan_end,
        r.torn_tail,
        r.records_scanned,
        r.records_cut,
        r.units_dropped,
        r.units_rebuilt,
        r.index_rebuilt,
    )


def derived_files(root: Path) -> dict[str, bytes]:
    """The bytes of every ConsumeQueue and index file of the store at ``root`` (an IndexFile by
    its place: its name is the time it was created)."""
    out = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted((root / "consumequeue").rglob("*"))
        if p.is_file()
    }
    index = sorted(p for p in (root / "index").glob("*") if p.is_file())
    out.update((f"index/{i}", p.read_bytes()) for i, p in enumerate(index))
    return out
