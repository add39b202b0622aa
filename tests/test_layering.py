"""The core is engine-agnostic: importing it must not load pyspark (DESIGN.md section 2)."""

from __future__ import annotations

import subprocess
import sys


def test_broker_core_does_not_import_pyspark() -> None:
    code = (
        "import sys, broker_core, broker_core.client, broker_core.bulk, broker_core.topic_log\n"
        "loaded = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"broker_core loaded {out.stdout.strip()}"


def test_public_surface_is_sorted_and_importable() -> None:
    import broker_core

    assert broker_core.__all__ == sorted(broker_core.__all__)
    for name in broker_core.__all__:
        assert hasattr(broker_core, name), name
