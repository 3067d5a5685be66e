"""Makes renders observably slow, for the tests of interrupted and concurrent reads.

Python imports ``sitecustomize`` at start-up from the first directory of ``sys.path`` holding one.
Tests put this directory on the PYTHONPATH of the daemons they start (conftest's
``slow_renders`` fixture), so the daemon and every render worker it spawns (they inherit the
environment) wrap :func:`fusefs.render.render_view_chunk` to sleep ``PAUSE`` seconds per chunk
of a JSON view (8,192 messages). Production code knows nothing of it.
"""

import functools
import time

PAUSE = 2.0  # seconds per rendered chunk: longer than the tests wait before checking

try:
    import rmqfs.fusefs.render as _render
except ImportError:  # not a process of this project
    pass
else:
    _real = _render.render_view_chunk

    @functools.wraps(_real)  # same __module__/__qualname__: the pool pickles it by name
    def render_view_chunk(*args, **kwargs):
        time.sleep(PAUSE)
        return _real(*args, **kwargs)

    _render.render_view_chunk = render_view_chunk
