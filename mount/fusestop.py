"""Stopping a pyfuse3 main loop on SIGINT and SIGTERM, safely at any moment: the one handler
of the mount daemon (:mod:`mount.daemon`).

The handler only asks the loop to stop (``pyfuse3.terminate()``) and remembers which signal
came. It never logs: a signal that lands while the main thread holds the log queue's lock
deadlocked a daemon in the handler's own log call. It never calls ``terminate()`` once the loop
has returned: that reaches into the FUSE session ``pyfuse3.close`` is freeing, and a second
SIGTERM within the unmount crashed the daemon (a segfault, the store's ``abort`` left).
"""

from __future__ import annotations

import signal

import pyfuse3

#: the signals that stop a mount
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Install with :meth:`install` before the loop; call :meth:`loop_over` as soon as
    ``trio.run`` returns, before ``pyfuse3.close``, and log what it returns."""

    #: at most this many signal names are kept, however many arrive
    KEEP = 16

    def __init__(self) -> None:
        self.received: list[str] = []
        self.serving = True

    def install(self) -> None:
        """Make SIGINT and SIGTERM stop the loop (main thread only, as ``signal.signal``)."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if len(self.received) < self.KEEP:
            self.received.append(signal.Signals(signum).name)
        if self.serving:
            try:
                pyfuse3.terminate()
            except RuntimeError:  # the loop returned just now (no trio run): stopping anyway
                pass

    def loop_over(self) -> str | None:
        """The loop has returned: later signals only say that the unmount is under way.
        Returns the signals that came (``"SIGTERM"``, ``"SIGTERM, SIGINT"``), None for none."""
        self.serving = False
        return ", ".join(dict.fromkeys(self.received)) or None
