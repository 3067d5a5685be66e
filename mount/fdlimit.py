"""The process's limit on open files (``RLIMIT_NOFILE``), raised before a store is opened.

A store holds one open descriptor per CommitLog, ConsumeQueue and IndexFile file, as a
RocketMQ broker holds a ``FileChannel`` per ``MappedFile`` (and one more for each file mapped
for writing: CPython's ``mmap`` keeps a duplicate): a broker's store of a few hundred topics
opens thousands. Brokers are told to run with ``ulimit -n 655350``, and the JVM raises its
soft limit to the hard one at start (HotSpot's ``MaxFDLimit``, on by default), so RocketMQ's
own tools (``mqadmin``) never meet the shell's usual 1,024. rmqfs's command line and mount
do the same here.
"""

from __future__ import annotations

import resource


def raise_fd_limit(beyond_hard: bool = False) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (what the JVM does for every Java
    program); with ``beyond_hard`` (the mount's daemon, whose snapshots hold a descriptor per
    store file) first try the kernel's ``fs.nr_open`` (at most 1,048,576) as hard and soft
    limit, which only root may. Never lowers a limit; a refusal leaves it as it was. Returns
    the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    targets = [hard]
    if beyond_hard:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                targets.insert(0, max(min(int(f.read()), 1 << 20), hard))
        except (OSError, ValueError):
            pass
    for target in targets:
        if target == resource.RLIM_INFINITY or target <= soft:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, max(target, hard)))
            break
        except (OSError, ValueError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
