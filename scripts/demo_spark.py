"""Spark demo on a local folder: a streaming producer query and two Key_Shared consumer queries.

Run with ``make demo`` (after the client demo).  It writes a few JSON files of click events, streams
them into a partitioned topic with ``df.writeStream.format("pubsub")``, then runs two streaming
queries on one Key_Shared subscription and shows that each user's events went to exactly one query.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default="demo-data", help="storage root folder")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    work = os.path.join(root, "_spark_demo")
    shutil.rmtree(work, ignore_errors=True)
    inbox = os.path.join(work, "inbox")
    os.makedirs(inbox)
    for batch in range(3):
        with open(os.path.join(inbox, f"clicks-{batch}.json"), "w") as handle:
            for i in range(400):
                user = f"user-{(batch * 400 + i) % 12}"
                handle.write(json.dumps({"user": user, "page": f"/p/{i % 7}", "n": batch * 400 + i}) + "\n")

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_pubsub
    from broker_core import AlreadyExists
    from broker_core.broker.admin import Admin

    topic = "persistent://public/default/clicks"
    with contextlib.suppress(AlreadyExists):
        Admin.open(root).create_partitioned_topic(topic, 2)

    spark = (SparkSession.builder.master("local[2]").appName("spark-pubsub-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_pubsub.register(spark)

    events = spark.readStream.schema("user string, page string, n long").json(inbox)
    producer = (events.select(F.col("user").alias("key"), F.to_json(F.struct("*")).cast("binary").alias("value"))
                .writeStream.format("pubsub").option("topic", topic)
                .option("checkpointLocation", os.path.join(work, "producer-ck"))
                .trigger(availableNow=True).start(root))
    producer.awaitTermination()
    written = sum(p["numInputRows"] for p in producer.recentProgress)
    print(f"streaming producer query wrote {written} messages to {topic}")

    seen = {}
    for name in ("query-a", "query-b"):
        df = (spark.readStream.format("pubsub").option("topic", topic)
              .option("subscription", "demo-analytics").option("subscriptionType", "Key_Shared")
              .option("subscriptionInitialPosition", "Earliest").option("consumerName", name)
              .option("maxMessagesPerTrigger", "500").load(root))
        seen[name] = df
    queries = {}
    for name, df in seen.items():
        queries[name] = (df.select("key", "partition", "offset").writeStream.format("memory")
                         .queryName(name.replace("-", "_"))
                         .option("checkpointLocation", os.path.join(work, f"{name}-ck"))
                         .trigger(availableNow=True).start())
    for query in queries.values():
        query.awaitTermination()
    owners: dict[str, set[str]] = {}
    for name in queries:
        rows = spark.sql(f"select key, count(*) as n from {name.replace('-', '_')} group by key").collect()
        total = sum(r["n"] for r in rows)
        print(f"Key_Shared consumer {name} received {total} messages for {len(rows)} users")
        for row in rows:
            owners.setdefault(row["key"], set()).add(name)
    moved = sorted(k for k, names in owners.items() if len(names) > 1)
    print(f"{len(owners)} users in all; {len(owners) - len(moved)} stayed with one query the whole time; "
          f"{len(moved)} moved once when the second query joined (Key_Shared keeps a key on one consumer "
          "at a time and hands it over only after the first consumer acknowledged it)")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
