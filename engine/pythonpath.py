"""The ``PYTHONPATH`` a child process needs to import the same ``rmqfs`` as this one.

rmqfs starts Python children that must run this process's code: the mount's daemon and guard
(``mount.mounts.module_env``) and Spark's Python workers, which run the ``rocketmq`` data
source (``pipeline.report.spark_session``). ``rmqfs`` is a namespace package (setup.py maps
``engine/``, ``fusefs/``, ... to ``rmqfs.engine``, ...), so what a child needs on its path is
the directories this process's ``rmqfs`` namespace comes from: a checkout's ``tests/ns``;
site-packages, already on the path, when installed; nothing for an editable install, whose
finder the child has too. Never a directory holding ``engine/`` itself.
"""

from __future__ import annotations

import os


def child_pythonpath(current: str | None = None) -> str:
    """``current`` (a ``PYTHONPATH`` value; default this process's environment) with the
    directories of this process's ``rmqfs`` namespace put first, each once (str, ``os.pathsep``
    separated; empty entries dropped)."""
    import rmqfs

    if current is None:
        current = os.environ.get("PYTHONPATH", "")
    roots = [os.path.dirname(p) for p in rmqfs.__path__ if os.path.isdir(p)]
    paths = [p for p in current.split(os.pathsep) if p]
    return os.pathsep.join([r for r in roots if r not in paths] + paths)
