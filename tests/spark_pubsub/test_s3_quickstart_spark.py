"""docs/S3.md's Spark step runs as written on the test emulator (its other steps: tests/test_s3_quickstart.py)."""

from __future__ import annotations

import contextlib
import io
import re
import uuid
from pathlib import Path
from typing import Any

from moto_s3 import MotoS3

PAGE = Path(__file__).resolve().parents[2] / "docs" / "S3.md"


def test_the_s3_quickstart_spark_step_reads_what_the_client_step_wrote(spark: Any, moto_s3: MotoS3) -> None:
    bucket = f"quickstart-{uuid.uuid4().hex[:8]}"
    moto_s3.create_bucket(bucket)
    client_step, spark_step = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    namespace: dict[str, Any] = {"spark": spark}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        for step in (client_step, spark_step):
            code = step.replace("http://127.0.0.1:5000", moto_s3.endpoint).replace("quickstart", bucket)
            exec(compile(code, str(PAGE), "exec"), namespace)  # the page's own code
    assert "hello from s3" in out.getvalue()  # the show()
    assert [bytes(r.value) for r in namespace["df"].collect()] == [b"hello from s3"]
