"""A streaming job for subprocess tests: JSON files -> ``format("pubsub")``, one file per micro-batch.

Usage: ``python sink_job.py <storage root> <input dir> <checkpoint dir> <topic>``

Each input line is ``{"id": <int>, "k": <str or null>}``; the message value is the id (so a test can
check that every row arrived exactly once), the key is ``k`` (null keys are spread round robin, so a
replayed batch may be routed differently).  The job runs with ``Trigger.AvailableNow`` and exits 0
when every file present at start is written; tests SIGKILL it at random moments and restart it on
the same checkpoint.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def main(root: str, source: str, checkpoint: str, topic: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_pubsub

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark-pubsub-sink-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_pubsub.register(spark)
    stream = (
        spark.readStream.schema("id long, k string").option("maxFilesPerTrigger", 1).json(source)
        .repartition(2)
        .select(F.col("id").cast("string").alias("value"), F.col("k").alias("key"),
                F.create_map(F.lit("id"), F.col("id").cast("string")).alias("properties"))
    )
    query = (
        stream.writeStream.format("pubsub").option("serviceUrl", root).option("topic", topic)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    error = query.exception()
    spark.stop()
    if error is not None:
        print(f"query failed: {error}", file=sys.stderr)
        sys.exit(1)
    print("done", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
