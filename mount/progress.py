"""How far long work is, on the terminal: tqdm bars for the engine's progress factories
(:mod:`engine.service.workprogress`: ``progress(total, desc, unit) -> bar``), and the messages a
background mount daemon sends ``rmqfs mount`` through its ready pipe while it opens the store.

Bars go to stderr and only when it is a terminal (tqdm's ``disable=None``), so pipes and logs
get no control characters; what must be said anyway (the recovery summary) is a plain line.

The ready pipe (``rmqfs mount`` without ``-f`` starts the daemon with ``--ready-fd``) carries,
in order: any number of lines ``#progress {"desc": D, "n": N, "total": T, "unit": U}`` (N: how
much of phase D is done, absolute), at most one ``#recovery <summary>`` line (what recovery
did, when it did something), any ``#note <line>`` (what the user should know of the mount: a
brokerName taken from the host name), then the answer: ``ok``, or the error message, and EOF.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, NoReturn, Self, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

PROGRESS = b"#progress "
RECOVERY = b"#recovery "
NOTE = b"#note "
#: A daemon sends a phase's count at most this often (and always when the phase ends).
SEND_INTERVAL = 0.2


def terminal_bar(
    total: int, desc: str, unit: str = "B", file: TextIO | None = None, force: bool = False
) -> tqdm[NoReturn]:
    """A tqdm bar on ``file`` (stderr), hidden unless it is a terminal (or ``force``)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit == "B",
        leave=False,
        disable=False if force else None,
        file=file or sys.stderr,
    )


class _PipeBar:
    """One phase's bar whose counts go through the ready pipe."""

    def __init__(self, sender: PipeProgress, total: int, desc: str, unit: str):
        self.sender, self.total, self.desc, self.unit = sender, total, desc, unit
        self.n = 0
        self.sent_at = 0.0
        self.sender.send(self)

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.sent_at >= SEND_INTERVAL:
            self.sender.send(self)

    def close(self) -> None:
        self.sender.send(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PipeProgress:
    """A progress factory (:mod:`engine.service.workprogress`) whose bars are ``#progress`` lines
    written to ``fd`` (the daemon's ready pipe). A closed pipe (the parent is gone) is not an
    error: nothing more is sent."""

    def __init__(self, fd: int):
        self.fd = fd
        self.broken = False

    def __call__(self, total: int, desc: str, unit: str = "B") -> _PipeBar:
        return _PipeBar(self, total, desc, unit)

    def send(self, bar: _PipeBar) -> None:
        """Send ``bar``'s count as one ``#progress`` line."""
        bar.sent_at = time.monotonic()
        self._write(
            PROGRESS
            + json.dumps(
                {"desc": bar.desc, "n": bar.n, "total": bar.total, "unit": bar.unit}
            ).encode()
            + b"\n"
        )

    def recovery(self, summary: str) -> None:
        """Send the recovery's summary line."""
        self._write(RECOVERY + summary.replace("\n", " ").encode() + b"\n")

    def note(self, line: str) -> None:
        """Send a line ``rmqfs mount`` prints on its stderr (``rmqfs: <line>``)."""
        self._write(NOTE + line.replace("\n", " ").encode() + b"\n")

    def _write(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            os.write(self.fd, data)
        except OSError:
            self.broken = True


def wait_ready(fd: int, err: TextIO | None = None, force: bool = False) -> str:
    """Read the daemon's ready pipe ``fd`` to its answer; draw its progress on ``err``
    (stderr; bars only on a terminal, or with ``force``) and print its recovery summary and
    notes there as ``rmqfs: <line>``. Returns the answer (``ok``, an error message, or ""
    when the daemon exited without one)."""
    err = err or sys.stderr
    bar = None
    desc = None
    buf = b""
    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            buf += data
            while True:
                line, nl, rest = buf.partition(b"\n")
                if not nl or not line.startswith((PROGRESS, RECOVERY, NOTE)):
                    break
                buf = rest
                if line.startswith((RECOVERY, NOTE)):
                    if bar is not None:
                        bar.close()
                        bar = desc = None
                    text = line.partition(b" ")[2]
                    print(
                        "rmqfs: " + text.decode(errors="replace"),
                        file=err,
                        flush=True,
                    )
                    continue
                try:
                    msg = json.loads(line[len(PROGRESS) :])
                    n, total = int(msg["n"]), int(msg["total"])
                    name, unit = str(msg["desc"]), str(msg.get("unit", "B"))
                except (ValueError, KeyError, TypeError):
                    continue
                if bar is None or name != desc:  # (bar and desc are None together)
                    if bar is not None:
                        bar.close()
                    bar, desc = terminal_bar(total, name, unit, file=err, force=force), name
                bar.total = total
                bar.n = n
                bar.refresh()
            if buf == b"ok":
                break
    finally:
        if bar is not None:
            bar.close()
    return buf.decode(errors="replace")
