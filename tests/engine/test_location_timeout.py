"""A server that accepts connections and never answers fails an S3 request in bounded time
(engine/live/location.py ``open_location``): every command, Spark read and mount request
opens its location there, with ``S3_ATTEMPTS`` tries of ``timeout`` seconds each, where
pyarrow's defaults wait about 100 s a request."""

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from conftest import run_rmqfs
from rmqfs.engine.errors import ObjectStoreError
from rmqfs.engine.live.location import S3_ATTEMPTS, open_location


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port whose server accepts every connection and never sends a byte; closed
    (listener and connections) when the test ends, however it ends."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    lsock.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                held.append(lsock.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        lsock.close()


def _uri(port: int) -> str:
    return f"s3://bkt/snap?endpoint_override=127.0.0.1:{port}&scheme=http"


def test_a_request_to_a_silent_server_fails_in_bounded_time(silent_server, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fs, base = open_location(_uri(silent_server), timeout=1.0)
    assert base == "bkt/snap"
    t = time.monotonic()
    with pytest.raises(OSError, match=r"Timeout|timed out|too slow"):
        fs.get_file_info(base + "/SNAPSHOT.json")
    took = time.monotonic() - t
    # each try gives up after a second without a byte; pyarrow's default takes ~100 s
    assert took < S3_ATTEMPTS * 1.0 + 8, took


def test_a_location_with_other_options_is_pyarrows_as_it_stands(silent_server):
    fs, base = open_location(_uri(silent_server) + "&allow_bucket_creation=true")
    assert type(fs).__name__ == "S3FileSystem" and base == "bkt/snap"
    with pytest.raises(ObjectStoreError, match="not a storage location"):
        open_location("s3://bkt/x?no_such_option=1")


@pytest.mark.long
def test_snapshot_verify_of_a_silent_server_ends_with_one_line(silent_server, monkeypatch):
    """The command line's default: a hung server costs one request's tries (about 20 s), and
    the reason is one line."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    t = time.monotonic()
    res = run_rmqfs("snapshot-verify", _uri(silent_server), check=False, timeout=90)
    took = time.monotonic() - t
    assert res.returncode == 1, res
    assert "Traceback" not in res.stderr
    assert "SNAPSHOT.json" in res.stderr and "server unreachable" in res.stderr, res.stderr
    assert took < 60, took


def test_the_bounded_filesystem_keeps_the_region_from_uri_found(monkeypatch):
    """For an AWS URI without ``region=``, pyarrow's from_uri asks AWS for the bucket's region
    (ResolveS3BucketRegion); the bounded filesystem keeps it rather than the SDK's default
    (us-east-1, where the bucket's requests would fail). from_uri is stood in for here: this
    machine reaches no AWS."""
    import pyarrow.fs as pafs

    from rmqfs.engine.live import location

    real = location.pyarrow_filesystem

    def resolved(uri):
        if uri.startswith("s3://") and "region=" not in uri:
            return pafs.S3FileSystem(region="eu-north-1", anonymous=True), "bkt/snap"
        return real(uri)

    monkeypatch.setattr(location, "pyarrow_filesystem", resolved)
    fs, base = open_location("s3://bkt/snap", timeout=1.0)
    assert (type(fs).__name__, fs.region, base) == ("S3FileSystem", "eu-north-1", "bkt/snap")
    fs, _ = open_location(_uri(9) + "&region=ap-south-1", timeout=1.0)
    assert fs.region == "ap-south-1"
