"""Makes a mount stop its idle render workers after a second instead of ``POOL_IDLE_S``, for
the test of that (conftest's ``quick_idle_workers`` fixture puts this directory on the
PYTHONPATH of the daemons it starts, as ``tests/slowrender`` does). Production code knows
nothing of it."""

try:
    import rmqfs.fusefs.views as _views
except ImportError:  # not a process of this project
    pass
else:
    _views.POOL_IDLE_S = 1.0
