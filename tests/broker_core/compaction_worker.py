"""Subprocess side of the kill test in ``test_compaction.py``: append and compact in a loop until killed.

Run as ``python compaction_worker.py <root> <seed>`` on a root whose topic ``TOPIC_DIR`` exists.  It
prints one line per event, flushed at once so a SIGKILL loses nothing that was printed:

- ``ready``: started and warmed up (imports, first reads); it then waits for ``go`` on stdin, so the
  test can start the next worker while it checks the previous one, and kills it at a random moment
  after ``go``.
- ``ack <n>``: an append returned; the log holds at least ``n`` messages.
- ``compacted <horizon>``: a compaction run committed its view.

Appends and compactions alternate, so a kill lands in an append, a compaction's read, its view file
write, its pointer commit, or between them.
"""

from __future__ import annotations

import random
import sys

from log_helpers import TOPIC_DIR, segment_table

from broker_core.jobs.compaction import compact_internal_topic
from broker_core.log.segment import encode_segment
from broker_core.storage import file_io_for
from broker_core.topic.topic_log import TopicLog


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    root, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = TopicLog(file_io_for(root), TOPIC_DIR)  # a folder, or s3:// through the AWS_* environment
    compact_internal_topic(log, "t", dry_run=True)  # warm up: the first run pays for lazy imports
    encode_segment(segment_table([{"key": "k", "value": b"v"}]))
    emit("ready")
    sys.stdin.readline()
    batch = 0
    while True:
        batch += 1
        rows = [{"key": rng.choice([None, *(f"k{i}" for i in range(40))]),
                 "value": None if rng.random() < 0.1 else f"{seed}:{batch}:{i}".encode()}
                for i in range(rng.randint(1, 60))]
        result = log.append(segment_table(rows), layout=[len(rows)] if rng.random() < 0.5 else [-len(rows)])
        assert result.segment is not None
        emit(f"ack {result.segment.end_offset}")
        done = compact_internal_topic(log, "t", slice_rows=rng.choice([7, 50, 1 << 20]))
        if done.status == "compacted":
            emit(f"compacted {done.horizon}")


if __name__ == "__main__":
    main()
