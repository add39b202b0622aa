"""Cost of the local root's no-link path handling (D120, D121) on the read and write paths.

Run from a checkout (the first argument is the repository to import, default this one), once per
tree to compare, alternating, on a quiet machine::

    .venv/bin/python benchmarks/bench_local_paths.py [REPO]

Measures, on a fresh root (fsync off) holding one topic of 100 ten-message segments, the best of
a few runs of: ``read_segment_checked`` (open, read and decode a small segment), ``read_bytes`` of a
segment, ``write_new`` and ``put_if_absent`` into the topic's directory.  Nothing is asserted.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

_REPO = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, _REPO)

from broker_core import Client  # noqa: E402
from broker_core.log.segment import read_segment_checked  # noqa: E402
from broker_core.storage import LocalFileIO  # noqa: E402
from broker_core.topic.topic_log import TopicLog  # noqa: E402

TOPIC_DIR = "public/default/persistent/t"


def _best_us(fn: Callable[[int], None], n: int, repeats: int = 5) -> float:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(n)
        out.append((time.perf_counter() - start) / n * 1e6)
    return min(out)


def main() -> None:
    root = tempfile.mkdtemp(prefix="bench_local_paths_")
    try:
        os.makedirs(f"{root}/_pubsub")
        Path(f"{root}/_pubsub/broker.toml").write_text("fsyncEnabled = false\n")
        client = Client(root)
        producer = client.create_producer("persistent://public/default/t", batching_enabled=True,
                                          batching_max_messages=1000)
        for _ in range(100):
            for _ in range(10):
                producer.send_async(b"x" * 100, None)
            producer.flush()
        producer.close()
        client.close()
        io = LocalFileIO(root, fsync=False)
        segs = TopicLog(io, TOPIC_DIR).snapshot().segments
        counter = [0]

        def decode(n: int) -> None:
            for i in range(n):
                read_segment_checked(io, TOPIC_DIR, segs[i % len(segs)])

        def raw(n: int) -> None:
            for i in range(n):
                io.read_bytes(f"{TOPIC_DIR}/{segs[i % len(segs)].path}")

        def write(n: int) -> None:
            for _ in range(n):
                counter[0] += 1
                io.write_new(f"{TOPIC_DIR}/w/{counter[0]}.bin", b"y" * 1000, anchor=TOPIC_DIR)

        def commit(n: int) -> None:
            for _ in range(n):
                counter[0] += 1
                io.put_if_absent(f"{TOPIC_DIR}/c/{counter[0]}.json", b"{}\n", anchor=TOPIC_DIR)

        figures = [f"segment decode {_best_us(decode, 10_000, 3):.1f} us",
                   f"read_bytes {_best_us(raw, 10_000):.1f} us",
                   f"write_new {_best_us(write, 2000):.1f} us",
                   f"put_if_absent {_best_us(commit, 2000):.1f} us"]
        print(f"{_REPO}: " + ", ".join(figures))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
