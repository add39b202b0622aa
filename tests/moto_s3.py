"""An S3 emulator for the tests: ``moto_server`` on 127.0.0.1 at a free port, with one bucket.

Nothing leaves the loopback address: the store is reached only at ``http://127.0.0.1:<port>`` and
with explicit (fake) credentials, so obstore never looks for instance metadata.

The server is moto's, run by this file (``python moto_s3.py <host> <port>``) behind one change:
its writes are made one at a time (``OneWriteAtATime``).  moto checks ``If-None-Match: *`` and then
stores the object in two steps on a threaded server, so two conditional PUTs of one key could both
succeed (seen: one key with two winners in 1,500 contended commits on a loaded machine).  Every
commit of the project is such a PUT; two winners are a lost update that real S3 never produces
(a cursor claim lost under another consumer's, so one message delivered to two consumers).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

BUCKET = "pubsub-tests"
ACCESS_KEY_ID = "AKIATESTPUBSUB0001"
SECRET_ACCESS_KEY = "moto-secret-Zq8v3XwPtL2n"  # a test checks it never shows in messages
_START_TIMEOUT_S = 120.0  # imports and builds its S3 app first: ~20 s on a 2-core machine at load 25


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

    def fresh_root(self, *, create: bool = True) -> str:
        """A new prefix, created as a root (its marker written: an empty prefix is no root) unless not ``create``."""
        url = f"s3://{BUCKET}/{uuid.uuid4().hex[:16]}"
        if create:
            from broker_core.broker.root_check import open_root
            from broker_core.storage import file_io_for

            open_root(file_io_for(url, storage_options=self.storage_options), url, create_root=True)
        return url

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=60) as response:
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


def start_moto(*, unauthenticated_actions: int | None = None) -> MotoS3:
    """Start ``moto_server`` (from the venv next to this interpreter) and create the bucket.

    ``unauthenticated_actions``: enforce IAM after that many requests (moto's
    ``INITIAL_NO_AUTH_ACTION_COUNT``), so tests can set up users first and then see 403s; the bucket
    is then not created here."""
    env = dict(os.environ)
    if unauthenticated_actions is not None:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(unauthenticated_actions)
    # the server binds port 0 itself and prints the port it got once it listens: a port picked
    # here and bound there could be taken by another process in between (parallel test workers)
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "127.0.0.1", "0"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout=_START_TIMEOUT_S)
    line = process.stdout.readline() if ready else b""
    process.stdout.close()
    if not line.strip().isdigit():
        process.kill()
        process.wait(timeout=10)
        raise RuntimeError(f"moto_server did not listen within {_START_TIMEOUT_S:.0f} s "
                           f"(exit code {process.returncode}, said {line!r})")
    server = MotoS3(endpoint=f"http://127.0.0.1:{int(line)}", process=process)
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


@contextlib.contextmanager
def refusing_metadata_service() -> Iterator[str]:
    """A stand-in for the instance-metadata service on 127.0.0.1 that refuses every request (403), as
    the real one does off EC2 or without a role; yields its URL for ``aws_metadata_endpoint``, so a
    test of "no credentials" never reaches 169.254.169.254."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Refuse(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            self.send_response(403)
            self.end_headers()
            self.wfile.write(b"Forbidden")

        do_GET = do_PUT = _refuse

        def log_message(self, *args: Any) -> None:
            """Keep the test output quiet (the base class logs each request to stderr)."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


_WRITES = frozenset({"PUT", "POST", "DELETE"})


class OneWriteAtATime:
    """WSGI middleware: a write request (PUT, POST, DELETE) runs alone, reads run alongside.

    moto decides a conditional write (``If-None-Match``, ``If-Match``) by reading the key and then
    storing it, with other request threads free to run in between; holding one lock over each write
    makes the check and the store one step, as on S3 (a write also never interleaves with another
    write's steps).  moto builds the whole response inside the call, so the lock covers all of it."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in _WRITES:
            return self.app(environ, start_response)
        with self.lock:
            return self.app(environ, start_response)


def _serve(host: str, port: int) -> None:
    """``moto_server -H host -p port`` with ``OneWriteAtATime`` in front (moto's own ``main`` minus
    options); prints the port it listens on (port 0: one the system picks) once it listens."""
    import signal

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    # build the S3 app before listening: built by the first request instead (seconds of imports),
    # the bucket's creation timed out on a loaded machine; now "listening" means "ready"
    app.app_instances["s3"] = create_backend_app("s3")
    server = make_server(host, port, OneWriteAtATime(app), threaded=True, request_handler=MotoRequestHandler)
    os.environ["MOTO_PORT"] = str(server.server_port)
    print(server.server_port, flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nobody reads the pipe from here on
    server.serve_forever()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
