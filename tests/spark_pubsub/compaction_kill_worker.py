"""Subprocess side of the Spark compaction kill trials in ``test_compaction_job.py``.

Run as ``python compaction_kill_worker.py <root> <seed>``: starts a ``local[2]`` SparkSession (the
driver that the test SIGKILLs), prints ``ready`` and waits for ``go`` on stdin, then appends and runs
the Spark compaction job in a loop until killed, printing one flushed line per event:

- ``ack <n>``: an append returned; the topic holds at least ``n`` messages.
- ``phase <name>``: a phase of the job ended (``planning``, ``winners``, ``payload plan``, ``views``,
  ``written``, ``commit``).
- ``compacted <horizon>``: the job committed its view.
"""

from __future__ import annotations

import os
import random
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession

from broker_core import Client
from spark_pubsub.compaction_job import compact_with_spark


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    root, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = Client(root)
    compact_with_spark(spark, root, "t", dry_run=True)  # warm up: the first run pays for lazy imports
    emit("ready")
    sys.stdin.readline()
    batch = 0
    while True:
        batch += 1
        producer = client.create_producer("t", batching_enabled=rng.random() < 0.5, batching_max_messages=9)
        for i in range(rng.randint(1, 60)):
            key = rng.choice([None, *(f"k{j}" for j in range(40))])
            producer.send_async(None if rng.random() < 0.1 else f"{seed}:{batch}:{i}".encode(), None,
                                partition_key=key)
        producer.flush()
        producer.close()
        emit(f"ack {batch}")
        summary = compact_with_spark(spark, root, "t", progress=lambda name: emit(f"phase {name}"))
        result = summary.results[0]
        if result.status == "compacted":
            emit(f"compacted {result.horizon}")


if __name__ == "__main__":
    main()
