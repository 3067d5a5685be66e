"""Makes a mount of a snapshot in object storage read its manifest again every 0.2 s instead
of every ``MANIFEST_POLL`` seconds, for the test of an upload to a mounted location
(tests/mount/test_mount_objectstore.py puts this directory on the PYTHONPATH of the daemons
it starts, as ``tests/quickidle`` does). Production code knows nothing of it."""

try:
    import rmqfs.engine.live.objectsource as _objectsource
except ImportError:  # not a process of this project
    pass
else:
    _objectsource.MANIFEST_POLL = 0.2
