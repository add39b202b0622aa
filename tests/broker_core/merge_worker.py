"""Subprocess side of the merge tests in ``test_jobs_merge_segments.py``.

Run as ``python merge_worker.py <mode> <root> <arg>`` on a root whose topic ``jobs_worker.T`` exists.
Lines are flushed at once so a SIGKILL loses nothing that was printed.

- ``append <n>``: prints ``ready``, then appends n small segments (values ``w:<i>``), printing ``ack
  <end offset>`` after each commit: a producer in another process while the test merges.
- ``merge <seed>``: warms up, prints ``ready`` and waits for ``go`` on stdin; then loops: append one to
  three small segments (values ``p:<offset>``, ``ack <end offset>`` after each), and merge every
  planned run one by one (``merged <version>`` after each commit), so a kill lands in an append, a
  run's read, its file write, its commit, or between them.
"""

from __future__ import annotations

import random
import sys

from jobs_worker import T, make_broker
from log_helpers import producer_table

from broker_core.jobs.merge_segments import merge_run, plan_runs
from broker_core.naming import TopicName


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    mode, root, arg = sys.argv[1], sys.argv[2], int(sys.argv[3])
    broker = make_broker(root)
    log = broker.topic_log(TopicName.parse(T), create=False)
    log.snapshot()
    if mode == "append":
        emit("ready")
        for i in range(arg):
            result = log.append(producer_table("w", range(2 * i, 2 * i + 2)), layout=[2])
            assert result.segment is not None
            emit(f"ack {result.segment.end_offset}")
        return
    rng = random.Random(arg)
    log.read(0, 1)  # warm up: the first read pays for lazy imports
    emit("ready")
    sys.stdin.readline()
    while True:
        for _ in range(rng.randint(1, 3)):
            start = log.snapshot().next_offset
            rows = rng.randint(1, 5)
            result = log.append(producer_table("p", range(start, start + rows)), layout=[-rows])
            assert result.segment is not None
            emit(f"ack {result.segment.end_offset}")
        runs = plan_runs(log.snapshot().segments, target_bytes=rng.choice([4000, 12000, 1 << 30]),
                         min_segments=2, min_age_ms=0, now_ms=1 << 62)
        for run in runs:
            done = merge_run(log, run)
            if done.status == "merged":
                emit(f"merged {done.version}")


if __name__ == "__main__":
    main()
