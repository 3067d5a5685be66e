"""Benchmarks (not tests): ``python -m bench.engine``. Results go to ``bench-out/``."""

import os
import subprocess
import sys


def child_env() -> dict[str, str]:
    """The environment for a ``python -m bench.…`` or ``rmqfs.mount.…`` process of this
    checkout: where this process's ``rmqfs`` comes from (``module_env``), then the checkout
    (``bench`` is not installed), what was there kept (a machine whose packages come from
    ``PYTHONPATH``, as the device runs carry them)."""
    from rmqfs.mount.mounts import module_env

    env = module_env()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = env["PYTHONPATH"].split(os.pathsep) if env["PYTHONPATH"] else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [root] if root not in paths else paths)
    return env


def rmqfs(*args) -> None:
    """Run this checkout's ``rmqfs`` command line with ``args``; CalledProcessError when it
    fails."""
    subprocess.run(
        [sys.executable, "-m", "rmqfs.mount.cli", *map(str, args)], check=True, env=child_env()
    )


def du(path: str | os.PathLike[str]) -> int:
    """Bytes the files below ``path`` take on disk (what ``du`` counts), files vanishing
    meanwhile skipped: how a render cache's bound is checked (bench.range_views, and the
    tests of the bound)."""
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def loadavg() -> str:
    """The load average as ``uptime`` prints it."""
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def write_result(out_dir: str | os.PathLike[str], name: str, doc: object) -> str:
    """Write ``doc`` as JSON to ``<out_dir>/<name>`` (the folder made if needed); its path."""
    import json

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    return path


def growth_line(
    rows: list[dict], size: str, figure: str, what: str, unit: str = ""
) -> tuple[float | None, str]:
    """How ``figure`` grew from the smallest ``size`` of ``rows`` to the largest (``unit``:
    what a size counts, default its key): ``(ratio, the line saying it)``; ``(None, "")`` for
    fewer than two rows."""
    if len(rows) < 2:
        return None, ""
    unit = unit or size
    lo, hi = min(rows, key=lambda r: r[size]), max(rows, key=lambda r: r[size])
    ratio = hi[figure] / max(lo[figure], 1e-9)
    flat = "flat" if ratio <= 1.15 else "grows"
    return ratio, (
        f"{what}, {lo[size]:,} to {hi[size]:,} {unit}: {ratio:.2f}x ({flat}; the {unit} grew "
        f"{hi[size] / lo[size]:.0f}x)"
    )


def targets_line(size: int, got: dict, targets: dict, digits: int = 2) -> str:
    """``targets at N messages: name figure <= target (met); ...`` for the benches' last line.

    ``got`` and ``targets`` map a measure's name to its figure and its bound (at most);
    names missing from ``got`` are left out.
    """
    parts = []
    for name, bound in targets.items():
        if name not in got:
            continue
        ok = got[name] <= bound
        parts.append(
            f"{name} {got[name]:.{digits}f} {'<=' if ok else '>'} {bound:g} "
            f"({'met' if ok else 'MISSED'})"
        )
    return f"targets at {size:,} messages: " + "; ".join(parts)
