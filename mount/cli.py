"""``rmqfs``: mount a RocketMQ store, unmount it, and run the Spark report.

``rmqfs mount STORE MNT`` returns once the mount is ready and keeps serving in the background;
``-f`` stays in front. ``rmqfs umount MNT`` unmounts and waits for the daemon to close the
store. Exit status 0 on success, 1 with a message on stderr on failure, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import json
import logging
import logging.handlers
import os
import queue
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .fdlimit import raise_fd_limit

if TYPE_CHECKING:
    from rmqfs.engine.store import StoreConfig

log = logging.getLogger("rmqfs")


def _parse_options(text: str | None) -> set[str]:
    return {o.strip() for o in (text or "").split(",") if o.strip()}


#: A daemon log line: time, logger, level, message (each once).
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"

#: Log records waiting for the writer thread (``_setup_logging``); past this they are dropped
#: and counted, so a flood of log lines never holds memory or the FUSE loop.
LOG_QUEUE_RECORDS = 10_000


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """A QueueHandler that never blocks: when the queue is full the record is dropped and
    counted, and the count is logged with the next record that fits."""

    def __init__(self, q: queue.Queue[logging.LogRecord]) -> None:
        super().__init__(q)
        self.dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped:
                note = logging.makeLogRecord(
                    {
                        "name": "rmqfs",
                        "levelno": logging.WARNING,
                        "levelname": "WARNING",
                        "msg": f"{self.dropped} log records dropped (the log could not keep up)",
                    }
                )
                self.queue.put_nowait(note)
                self.dropped = 0
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


def _setup_logging(args: argparse.Namespace, foreground: bool) -> queue.Queue[logging.LogRecord]:
    """The daemon's logging: records go through a bounded queue to one writer thread
    (``logging.handlers.QueueListener``), so a log call on the trio loop (a refused write,
    ``--debug``'s decisions) never waits on the disk or on syslog. Returns the queue
    (:func:`_log_written` waits until what it holds is written)."""
    level = logging.DEBUG if args.debug else logging.INFO
    handler: logging.Handler
    if args.log_file:
        handler = logging.FileHandler(args.log_file)
    elif foreground:
        handler = logging.StreamHandler(sys.stderr)
    elif os.path.exists("/dev/log"):
        handler = logging.handlers.SysLogHandler("/dev/log")
    else:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    q: queue.Queue[logging.LogRecord] = queue.Queue(LOG_QUEUE_RECORDS)
    listener = logging.handlers.QueueListener(q, handler)
    listener.start()
    atexit.register(listener.stop)  # writes what is queued before the process ends
    front = _DroppingQueueHandler(q)
    # The queue side only merges the arguments into the message (QueueHandler.prepare formats
    # with this); the writer formats the line once. Without it basicConfig gave the queue side
    # its "%(levelname)s:%(name)s:%(message)s": lines read "rmqfs INFO INFO:rmqfs:mounted".
    front.setFormatter(logging.Formatter("%(message)s"))
    logging.basicConfig(level=level, handlers=[front])
    return q


def _log_written(q: queue.Queue[logging.LogRecord], timeout: float = 5.0) -> None:
    """Wait (at most ``timeout`` seconds) until the writer thread has written every record
    queued so far: what the mount logged while it opened the store (its recovery, the
    brokerName it took) is in the log when ``rmqfs mount`` returns."""
    deadline = time.monotonic() + timeout
    while q.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.005)


def default_log_file() -> str:
    """Where a background mount logs when neither ``--log-file`` nor syslog (``/dev/log``) is
    there: ``$XDG_STATE_HOME/rmqfs/mount.log`` (``~/.local/state/rmqfs/mount.log``), so
    refusals and errors are never dropped. The directory is made private (0700)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    directory = os.path.join(state, "rmqfs")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return os.path.join(directory, "mount.log")


def _load_config(path: str | None) -> StoreConfig | None:
    from rmqfs.engine.store import StoreConfig

    if path is None:
        return None
    return StoreConfig.from_broker_conf(path)


#: The longest ``-o remote_timeout=`` (seconds).
MAX_REMOTE_TIMEOUT = 600.0


def _remote_options(
    args: argparse.Namespace,
) -> tuple[set[str], int | None, float | None] | str:
    """``(-o options without remote_cache= and remote_timeout=, the cache's bytes or None, the
    timeout in seconds or None)``, or why they are refused: a URI (a snapshot in object
    storage) is mounted only with ``ro``; ``remote_cache=SIZE`` and ``remote_timeout=SECONDS``
    only with a URI."""
    from rmqfs.engine.live.location import is_uri

    options = _parse_options(args.options)
    size = None
    timeout = None
    for o in sorted(options):
        if o.startswith("remote_cache="):
            options.discard(o)
            try:
                size = _size(o.partition("=")[2])
            except argparse.ArgumentTypeError as exc:
                return f"-o {o}: {exc}"
        elif o.startswith("remote_timeout="):
            options.discard(o)
            try:
                timeout = float(o.partition("=")[2])
            except ValueError:
                timeout = -1.0
            if not 0 < timeout <= MAX_REMOTE_TIMEOUT:
                return f"-o {o}: give seconds, more than 0 and at most {MAX_REMOTE_TIMEOUT:g}"
    if not is_uri(args.store):
        for name, value in (("remote_cache", size), ("remote_timeout", timeout)):
            if value is not None:
                return f"-o {name}= is an option of a snapshot in object storage (a URI)"
        return options, None, None
    if "ro" not in options:
        from .daemon import read_only_remote_message

        return read_only_remote_message(args.store, args.mountpoint)
    return options, size, timeout


def cmd_mount(args: argparse.Namespace) -> int:
    """Mount; in the background unless ``-f``."""
    remote = _remote_options(args)
    if isinstance(remote, str):
        print(f"rmqfs: {remote}", file=sys.stderr)
        return 1
    options, remote_cache, remote_timeout = remote
    if not args.foreground and args.ready_fd is None:
        return _spawn_background(args)  # the daemon imports what serving takes, not this one
    if args.ready_fd is None:
        _hide_location_of_foreground(args)  # (returns when there is nothing to hide)
    # the daemon serves from "/" (it must not keep the caller's directory busy): a relative
    # cache directory or log file given to `mount -f` is the caller's, made absolute here as
    # _spawn_background does for a background mount
    for name in ("cache_dir", "log_file", "config"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    from rmqfs.engine.errors import StoreError, StoreLockedError
    from rmqfs.engine.live.location import is_uri, redact

    hidden = os.environ.pop(LOCATION_ENV, None)
    if hidden is not None and redact(hidden) == args.store:
        args.store = hidden  # (handed over out of argv: see _spawn_background)

    from .daemon import Daemon, MountError
    from .progress import PipeProgress, terminal_bar

    if args.ready_fd is not None:
        # libfuse's auto_unmount helper must not inherit the pipe, or the parent never sees EOF.
        os.set_inheritable(args.ready_fd, False)
    log_queue = _setup_logging(args, foreground=args.ready_fd is None)
    # How far opening the store is (a long recovery): through the ready pipe to the parent,
    # which draws it; with -f, drawn here (on a terminal only).
    pipe = PipeProgress(args.ready_fd) if args.ready_fd is not None else None
    try:
        config = _load_config(args.config)
        daemon = Daemon(
            args.store,
            args.mountpoint,
            options,
            config,
            args.cache_dir,
            args.debug_fuse,
            cache_size=args.cache_size,
            progress=pipe or terminal_bar,
            log_file=args.log_file,
            remote_cache=remote_cache,
            remote_timeout=remote_timeout,
            broker_name=args.broker_name,
        )
        daemon.setup()
    except (MountError, StoreError, ValueError, OSError) as exc:
        msg = f"rmqfs: {exc}"
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            msg += (
                "; the store's disk is full (opening it writes: recovery, a new file): free "
                "space there, or mount it read-only (-o ro) to read it meanwhile"
            )
        if isinstance(exc, StoreLockedError) and "ro" not in _parse_options(args.options):
            # a read-only mount follows a running writer (engine.live.follower)
            msg += (
                "; stop it first, or mount it read-only next to its writer: rmqfs mount -o ro "
                f"{args.store} {args.mountpoint}"
            )
        if args.ready_fd is not None:
            os.write(args.ready_fd, msg.encode())
            os.close(args.ready_fd)
        print(msg, file=sys.stderr)
        return 1
    # absolute paths, as the daemon's later lines ("unmounted ...") name the mount point
    where = redact(args.store) if is_uri(args.store) else os.path.abspath(args.store)
    log.info("mounted %s on %s", where, daemon.mountpoint)
    os.chdir("/")
    report = daemon.recovery_report()
    if pipe is not None and report is not None and report.did_something():
        pipe.recovery(report.summary())  # the store logged it too
    note = daemon.broker_name_note()
    if pipe is not None and note is not None:
        pipe.note(note)  # the daemon logged it too (with -f, on this stderr)
    for line in daemon.config_notes():
        if pipe is not None:
            pipe.note(line)  # the store logged it too
    ready = None
    if args.ready_fd is not None:
        ready_fd = args.ready_fd

        def ready() -> None:
            """The mount answered (the kernel's INIT and a first request served): "ok" to
            the waiting `rmqfs mount`. A session that dies as it starts never says it, and
            the command fails with what libfuse wrote on this stderr (still its pipe)."""
            _log_written(log_queue)  # the log holds what the mount said before it is ready
            os.write(ready_fd, b"ok")
            os.close(ready_fd)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)

    daemon.serve(args.log_file, ready)
    return 0


#: The environment variable a location with credentials reaches the daemon through: its
#: command line, which every local user can read (``ps``), shows it redacted.
LOCATION_ENV = "RMQFS_MOUNT_LOCATION"


def _hide_location_of_foreground(args: argparse.Namespace) -> None:
    """``mount -f`` of a location with credentials: this process serves the mount, and its
    command line, which every local user can read (``ps``) for as long as it runs, holds the
    secret the user typed. It replaces itself (``execv``: the same process, terminal and
    signals) by one whose command line holds the redacted location, the real one handed over
    in :data:`LOCATION_ENV` as to a background daemon (:func:`_spawn_background`). Returns
    when the location holds no credentials or was handed over already."""
    from rmqfs.engine.live.location import is_uri, redact

    if not is_uri(args.store) or LOCATION_ENV in os.environ:
        return
    shown = redact(args.store)
    if shown == args.store:
        return
    argv = sys.argv[1:]
    if args.store not in argv:  # called as main(argv) by a program: its own argv is not it
        return
    argv[argv.index(args.store)] = shown
    from .mounts import module_env

    env = module_env()  # the same code, as for a background daemon
    env[LOCATION_ENV] = args.store
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "rmqfs.mount.cli", *argv], env)


def _spawn_background(args: argparse.Namespace) -> int:
    """Start the daemon as a new session and wait until it says the mount is ready. A location
    with credentials goes to it in its environment (:data:`LOCATION_ENV`, readable by its
    user alone), its command line holding the redacted form."""
    from rmqfs.engine.live.location import is_uri, redact

    r, w = os.pipe()
    if not args.log_file and not os.path.exists("/dev/log"):
        args.log_file = default_log_file()  # no syslog here: the log would be lost
    # The daemon runs from "/" (it must not keep the caller's directory busy): absolute paths.
    cmd = [
        sys.executable,
        "-m",
        "rmqfs.mount.cli",
        "mount",
        redact(args.store) if is_uri(args.store) else os.path.abspath(args.store),
        os.path.abspath(args.mountpoint),
        "--ready-fd",
        str(w),
    ]
    for flag, value in (
        ("-o", args.options),
        ("--config", args.config),
        ("--broker-name", args.broker_name),
        ("--cache-dir", args.cache_dir),
        ("--log-file", args.log_file),
    ):
        if value:
            if flag not in ("-o", "--broker-name"):
                value = os.path.abspath(value)
            cmd += [flag, value]
    if args.cache_size is not None:
        cmd += ["--cache-size", str(args.cache_size)]
    if args.debug:
        cmd.append("--debug")
    if args.debug_fuse:
        cmd.append("--debug-fuse")
    from .mounts import module_env

    proc = subprocess.Popen(
        cmd,
        pass_fds=(w,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**module_env(), LOCATION_ENV: args.store} if is_uri(args.store) else module_env(),
        cwd="/",
    )
    os.close(w)
    from .progress import wait_ready

    try:
        # progress bars of a long recovery (on a terminal), its summary line, then the answer
        answer = wait_ready(r, sys.stderr)
    finally:
        os.close(r)
    stderr = proc.stderr
    assert stderr is not None  # Popen(stderr=PIPE)
    if answer == "ok":
        stderr.close()
        return 0
    err = stderr.read().decode(errors="replace").strip() if not answer else ""
    proc.wait()
    how = f"exited ({proc.returncode})"
    if proc.returncode < 0:  # killed: say by what (a SIGBUS, SIGKILL from the OOM killer...)
        how = f"was killed by {signal.Signals(-proc.returncode).name}"
    print(answer or f"rmqfs: the mount daemon {how}: {err}".rstrip(": "), file=sys.stderr)
    return 1


def _mount_status(mountpoint: str) -> tuple[int | None, str | None]:
    """The daemon's pid and, for a mount that writes a local store, the store's directory
    (None for a read-only one), from the mount's status.json; (None, None) when it cannot be
    read."""
    try:
        with open(os.path.join(mountpoint, "status.json")) as f:
            st = json.load(f)
        pid = int(st["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, None
    root = st.get("storePathRootDir")
    writes = st.get("readOnly") is False and isinstance(root, str) and os.path.isabs(root)
    return pid, root if writes else None


def _running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie: an exited daemon has closed the
    store, whether or not its parent (init, once the daemon's starter left) reaped it yet; a
    container's init may take seconds to."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


#: how long ``rmqfs umount`` tries again while the mount is busy and nobody holds it (seconds)
BUSY_RETRY_S = 2.0


def _unmount(cmd: list[str], mnt: str) -> subprocess.CompletedProcess:
    """``fusermount3 -u``, tried again for up to :data:`BUSY_RETRY_S` while it says busy and no
    process holds the mount (no cwd, root or open file under it: ``mounts.mount_users``): a
    reference the kernel holds only for a moment (a lookup or a close under way, waiting for
    a loaded daemon's answer) is not a user to name, and the next try succeeds."""
    from .mounts import mount_users

    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode == 0 or "busy" not in res.stderr.lower():
            return res
        if time.monotonic() >= deadline or mount_users(mnt):
            return res
        time.sleep(0.05)


def cmd_umount(args: argparse.Namespace) -> int:
    """Unmount and wait for the daemon to close the store; with ``-z`` (``umount -l``,
    ``fusermount3 -u -z``) detach the mount and return at once: the daemon closes the store
    when the last user lets go."""
    from .mounts import is_mounted

    mnt = os.path.abspath(args.mountpoint)
    if not is_mounted(mnt):
        print(f"rmqfs: {mnt} is not mounted", file=sys.stderr)
        return 1
    pid, written = _mount_status(mnt)
    cmd = ["fusermount3", "-u"] + (["-z"] if args.lazy else []) + [mnt]
    res = _unmount(cmd, mnt)
    if res.returncode != 0:
        why = res.stderr.strip()
        if "busy" in why.lower():
            from .mounts import mount_users

            users = mount_users(mnt)
            who = "; ".join(f"pid {pid} {comm} ({what})" for pid, comm, what in users[:10])
            if len(users) > 10:
                who += f"; and {len(users) - 10} more"
            why = (
                f"it is busy: in use by {who or 'a process this user cannot see'}. Stop or "
                f"leave it (cd out, close the files), or unmount lazily: rmqfs umount -z {mnt} "
                "(detached now, closed once the last user lets go)"
            )
        print(f"rmqfs: cannot unmount {mnt}: {why}", file=sys.stderr)
        return 1
    if pid and not args.lazy:
        deadline = time.monotonic() + args.timeout
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(pid):
            print(f"rmqfs: unmounted, but daemon {pid} is still closing the store", file=sys.stderr)
            return 1
        from rmqfs.engine.store import closed_cleanly

        if written is not None and not closed_cleanly(written):
            # (a full disk at close: index entries or the last flush not written)
            print(
                f"rmqfs: unmounted, but the store {written} was not closed cleanly (the "
                "daemon's log says why): its next open recovers it as after a crash",
                file=sys.stderr,
            )
    from .mounts import clean_stale_caches

    clean_stale_caches()  # the view caches of daemons killed earlier (kill -9)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Run the Spark report (pipeline/report.py) with the arguments after ``report``."""
    from rmqfs.pipeline import report

    return report.main(args.rest)


def _size(text: str) -> int:
    """``--cache-size``: bytes, with an optional K, M, G or T suffix (powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)")
    n = int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))
    if n < 1 << 20:
        raise argparse.ArgumentTypeError(f"cache size {text!r} is below 1M")
    return n


def version() -> str:
    """rmqfs's version: the installed distribution's (pyproject.toml ``version``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("rmqfs")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _mqadmin_epilog() -> str:
    """The mqadmin names, grouped under the rmqfs command each runs (as ``git help -a`` and
    ``mqadmin`` list commands: one line per command)."""
    from .mqadmin import COMMANDS

    groups: dict[str, list[str]] = {}
    for c in COMMANDS:
        groups.setdefault(c.rmqfs, []).append(c.name)
    lines = [
        "mqadmin names (each takes mqadmin's own option letters; rmqfs NAME --help):",
        *(f"  {cmd:<20}{', '.join(names)}" for cmd, names in groups.items()),
        "",
        "rmqfs COMMAND --help shows a command's options; docs/offline-commands.md lists every",
        "mqadmin command, with the rmqfs equivalent or why it needs a live cluster.",
    ]
    return "\n".join(lines)


class RmqfsParser(argparse.ArgumentParser):
    """The ``rmqfs`` parser; ``commands`` names every command it takes (rmqfs's and the mqadmin
    names)."""

    commands: tuple[str, ...] = ()


def build_parser() -> RmqfsParser:
    """The ``rmqfs`` parser: mount, umount, report, the offline commands and their mqadmin
    names (:attr:`RmqfsParser.commands` names them all)."""
    p = RmqfsParser(
        prog="rmqfs",
        description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog=_mqadmin_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"rmqfs {version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    m = sub.add_parser("mount", help="mount a store (background once ready)")
    m.add_argument(
        "store",
        help="store directory (storePathRootDir; created if missing), or the URI of a "
        "snapshot in object storage (s3://bucket/prefix?endpoint_override=host:port, "
        "with -o ro)",
    )
    m.add_argument("mountpoint", help="an empty directory")
    m.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    m.add_argument(
        "-o",
        dest="options",
        metavar="OPTS",
        help="options, comma separated: FUSE's ro, allow_other, "
        "default_permissions; rmqfs's allow_other_write (others may produce, "
        "commit and mkdir), create (make a store in a non-empty directory) and "
        "remote_cache=SIZE and remote_timeout=SECONDS (a snapshot in object storage: "
        "bound of its local block cache under --cache-dir, default 1G; the longest one "
        "request may take before the read answers EIO, default 10)",
    )
    m.add_argument("--config", metavar="broker.conf", help="RocketMQ broker.conf to read")
    m.add_argument(
        "--broker-name",
        metavar="NAME",
        help="the store's brokerName (status.json, snapshot manifests, the data source's "
        "brokerName column), over --config's brokerName= (default: broker.conf's, else the "
        "store's brokerIdentity file, else the host name)",
    )
    m.add_argument("--cache-dir", help="where to cache rendered views (default: a temp dir)")
    m.add_argument(
        "--cache-size",
        type=_size,
        metavar="BYTES",
        help="bound of the render cache, e.g. 2G or 500M (default: the smaller of "
        "10%% of the cache directory's disk and 8G); least recently used "
        "renders are evicted",
    )
    m.add_argument(
        "--log-file",
        help="log here (default: stderr with -f, else syslog, else "
        "$XDG_STATE_HOME/rmqfs/mount.log)",
    )
    m.add_argument("--debug", action="store_true", help="debug logging")
    m.add_argument("--debug-fuse", action="store_true", help="libfuse request tracing")
    m.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    m.set_defaults(func=cmd_mount)

    u = sub.add_parser("umount", help="unmount and wait for the store to close")
    u.add_argument("mountpoint")
    u.add_argument(
        "-z",
        "--lazy",
        action="store_true",
        help="lazy unmount (busy mounts): detach now and return; the store closes when the "
        "last user lets go",
    )
    u.add_argument(
        "--timeout", type=float, default=60, help="seconds to wait for the daemon (not with -z)"
    )
    u.set_defaults(func=cmd_umount)

    # Listed here for ``rmqfs --help``; main() hands everything after "report" to the report's
    # own parser (argparse's REMAINDER does not take a leading option: --help, --out DIR).
    r = sub.add_parser("report", help="Spark report over mounted stores", add_help=False)
    r.add_argument("rest", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_report)

    from . import admin, mqadmin  # verify, recover, produce, print-msg, ... (offline)

    admin.add_subcommands(sub)
    mqadmin.add_subcommands(sub)  # their mqadmin names, with mqadmin's option letters
    p.commands = tuple(sub.choices)
    return p


#: The optional dependencies (their top-level modules) and the extra of pyproject.toml's
#: ``[project.optional-dependencies]`` that installs each.
EXTRAS = {"pyspark": "spark", "py4j": "spark", "pandas": "spark", "matplotlib": "spark"}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line message for an optional dependency that is not installed (``rmqfs
    report`` without ``rmqfs[spark]``), or None when ``exc`` is about another module (a bug,
    which keeps its traceback)."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return f"{top} is not installed; it comes with the {extra} extra: pip install 'rmqfs[{extra}]'"


def _unknown_command(parser: RmqfsParser, command: str) -> str | None:
    """Why ``command`` is no command, with the closest names (``difflib``), instead of
    argparse's list of every name; None for a known command or an option (``--help``)."""
    import difflib

    if not command or command.startswith("-"):
        return None
    choices = list(parser.commands)
    if command in choices:
        return None
    close = difflib.get_close_matches(command, choices, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"no command {command!r}{hint} (rmqfs --help lists them)"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rmqfs`` command. Exit status: 0, 1 (a failure, one line on stderr), 2 (bad
    usage), 130 (interrupted). Expected conditions never print a traceback: a missing optional
    dependency names its extra (:func:`missing_extra`), an mqadmin command that needs a live
    cluster says what to use instead (:func:`mqadmin.not_offered`), Ctrl-C ends quietly."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv else ""
    raise_fd_limit()  # a store holds a descriptor per file, as the JVM's tools may (fdlimit)
    try:
        if command == "report":
            return cmd_report(argparse.Namespace(rest=argv[1:]))
        from .mqadmin import not_offered

        why = not_offered(command)
        if why is not None:
            print(f"rmqfs: {why}", file=sys.stderr)
            return 2
        parser = build_parser()
        unknown = _unknown_command(parser, command)
        if unknown is not None:
            print(f"rmqfs: {unknown}", file=sys.stderr)
            return 2
        args = parser.parse_args(argv)
        return args.func(args)
    except ModuleNotFoundError as exc:
        msg = missing_extra(exc)
        if msg is None:
            raise
        print(f"rmqfs {command}: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rmqfs {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
