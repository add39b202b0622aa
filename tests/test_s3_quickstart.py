"""docs/S3.md runs as written: its Python steps and its ``pubsub`` lines, on the test emulator.

The page's endpoint (``http://127.0.0.1:5000``) becomes the fixture's, its bucket a fresh one; the
emulator's start is the fixture's; the Spark step runs in tests/spark_pubsub/test_s3_quickstart_spark.py.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import uuid
from pathlib import Path

import pytest
from moto_s3 import MotoS3

from broker_core.cli import main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "S3.md"
ENDPOINT = "http://127.0.0.1:5000"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_s3_quickstart_runs_as_written(moto_s3: MotoS3, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = f"quickstart-{uuid.uuid4().hex[:8]}"

    def local(text: str) -> str:
        return text.replace(ENDPOINT, moto_s3.endpoint).replace("quickstart", bucket)

    setup, cli = blocks("bash")
    assert f"curl -X PUT {ENDPOINT}/quickstart" in setup
    moto_s3.create_bucket(bucket)
    python = [b for b in blocks("python") if "spark." not in b]
    assert len(python) == 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(local(python[0]), str(PAGE), "exec"), {})  # the page's own code
    assert "b'hello from s3'" in out.getvalue()
    variables: dict[str, str] = {}
    codes = []
    for line in local(cli).splitlines():
        if re.match(r"^[A-Z0-9_]+=", line):
            name, value = line.split("=", 1)
            variables[name] = shlex.split(value)[0]
            continue
        command = line.split("#", 1)[0]
        for name, value in variables.items():
            command = command.replace(f"${name}", value)
        argv = shlex.split(command)
        assert argv[0] == "pubsub"
        codes.append((main(argv[1:]), capsys.readouterr()))
    assert [code for code, _ in codes] == [0, 0, 1]
    assert "persistent://public/default/orders" in codes[0][1].out
    assert "does not exist" in codes[2][1].err and "--create-root" in codes[2][1].err
