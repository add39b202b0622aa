"""An S3 emulator for the tests: ``moto_server`` on 127.0.0.1 at a free port, with one bucket.

Nothing leaves the loopback address: the store is reached only at ``http://127.0.0.1:<port>`` and
with explicit (fake) credentials, so obstore never looks for instance metadata.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass

BUCKET = "pubsub-tests"
ACCESS_KEY_ID = "AKIATESTPUBSUB0001"
SECRET_ACCESS_KEY = "moto-secret-Zq8v3XwPtL2n"  # a test checks it never shows in messages
_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class MotoS3:
    endpoint: str
    process: subprocess.Popen[bytes]

    @property
    def storage_options(self) -> dict[str, str]:
        return {
            "aws_endpoint": self.endpoint,
            "aws_region": "us-east-1",
            "aws_access_key_id": ACCESS_KEY_ID,
            "aws_secret_access_key": SECRET_ACCESS_KEY,
            "aws_allow_http": "true",
        }

    @property
    def environment(self) -> dict[str, str]:
        """The same settings as the standard ``AWS_*`` variables (for worker processes)."""
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def fresh_root(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:16]}"

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


@dataclass(frozen=True)
class Root:
    """A storage root for a test: ``url`` plus the ``storage_options`` to open it with."""

    kind: str
    url: str
    storage_options: dict[str, str]

    @property
    def is_s3(self) -> bool:
        return self.kind == "s3"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto(*, unauthenticated_actions: int | None = None) -> MotoS3:
    """Start ``moto_server`` (from the venv next to this interpreter) and create the bucket.

    ``unauthenticated_actions``: enforce IAM after that many requests (moto's
    ``INITIAL_NO_AUTH_ACTION_COUNT``), so tests can set up users first and then see 403s; the bucket
    is then not created here."""
    port = _free_port()
    binary = os.path.join(os.path.dirname(sys.executable), "moto_server")
    env = dict(os.environ)
    if unauthenticated_actions is not None:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(unauthenticated_actions)
    process = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = MotoS3(endpoint=f"http://127.0.0.1:{port}", process=process)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:  # readiness: the port accepts a connection (bounded by the deadline)
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("moto_server did not listen within 30 s") from None
            time.sleep(0.05)
    if unauthenticated_actions is None:
        server.create_bucket(BUCKET)
    return server


def stop_moto(server: MotoS3) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)
