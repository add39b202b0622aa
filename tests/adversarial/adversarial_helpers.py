"""Helpers of the adversarial probes (``tests/adversarial``): a topic, hand-written commits.

Test modules import it as ``from adversarial_helpers import ...`` (the directory has no
``__init__.py``, so pytest puts it on ``sys.path``); the fixtures live in ``conftest.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from broker_core import Client

T = "persistent://public/default/t"
TOPIC_DIR = "public/default/persistent/t"


def produce(client: Client, values: list[bytes], *, topic: str = T, batches: int = 1) -> None:
    """Send ``values`` in ``batches`` flushes, each flush one commit (one segment)."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10_000)
    size = max(1, len(values) // batches)
    for start in range(0, len(values), size):
        for value in values[start:start + size]:
            producer.send_async(value, None)
        producer.flush()
    producer.close()


def log_dir(root: Path) -> Path:
    return root / TOPIC_DIR / "_delta_log"


def commit_file(root: Path, version: int) -> Path:
    return log_dir(root) / f"{version:020d}.json"


def newest_version(root: Path) -> int:
    return max(int(p.name[:20]) for p in log_dir(root).glob("*.json"))


def write_commit(root: Path, actions: list[dict[str, Any]]) -> int:
    """Hand-write the next commit (as anyone able to write one object under the root could)."""
    version = newest_version(root) + 1
    commit_file(root, version).write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return version
