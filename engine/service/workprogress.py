"""How far long work is: the engine's one progress protocol (verify, recover, snapshot-verify,
the recovery at open).

A *progress factory* is ``progress(total, desc, unit) -> bar``, and a bar has ``update(n)``
(``n`` more units done) and ``close()``: tqdm's shape, so the command line passes a function
returning a tqdm bar (``mount/progress.py``), and the mount daemon one that sends the counts
through its ready pipe. The engine draws nothing: it calls the factory once per phase
(``desc`` names the phase: "CommitLog", "recovering CommitLog", ...; ``unit`` is ``"B"`` for
bytes, else what is counted) and updates the bar per segment, per file or per few MB, never per
record. ``None`` means no progress (:func:`bar`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, Self


class ProgressBar(Protocol):
    """What the engine calls on a bar: ``update(n)`` (``n`` more units done) and ``close()``
    (a tqdm bar is one)."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> object: ...


#: ``progress(total, desc, unit) -> bar``: see the module docstring.
ProgressFactory = Callable[[int, str, str], ProgressBar]


class NoProgress:
    """A bar that shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def no_progress(total: int, desc: str, unit: str = "B") -> NoProgress:
    """The factory of :class:`NoProgress` bars."""
    return NoProgress()


def bar(progress: ProgressFactory | None, total: int, desc: str, unit: str = "B") -> ProgressBar:
    """A bar from the factory ``progress`` (None: a :class:`NoProgress`)."""
    return (progress or no_progress)(total, desc, unit)
