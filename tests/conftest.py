"""Shared pytest fixtures."""

import pytest


@pytest.fixture(scope="session")
def spark():
    """One quiet local[2] SparkSession for the whole test run (UTC, no UI, 2 shuffle partitions).

    It uses the same settings as the report job (``pipeline.report.build_session``). It is skipped
    when pyspark is not installed, and stopped at the end of the session. Tests that use it should be
    marked ``@pytest.mark.spark``.
    """
    pytest.importorskip("pyspark")
    from pipeline.report import build_session

    session = build_session(master="local[2]", app_name="rmqfs-tests", shuffle_partitions=2)
    yield session
    session.stop()
