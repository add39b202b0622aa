"""Spark demo on a local folder: a streaming producer query and two Key_Shared consumer queries.

Run with ``make demo`` (after the client demo).  It writes a few JSON files of click events, streams
them into a partitioned topic with ``df.writeStream.format("pubsub")``, then runs two streaming
queries on one Key_Shared subscription until they received every message, and checks that each went
to exactly one query and that a user whose key moved to the second query was handed over once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@dataclass(frozen=True)
class KeySharedSplit:
    """What two queries on one Key_Shared subscription received: per query its users and count."""

    per_query: dict[str, set[str]]
    counts: dict[str, int]
    owners: dict[str, set[str]]
    moved: list[str]


def consume_key_shared(spark: Any, root: str, topic: str, work: str, *, expected: int,
                       timeout_s: float = 180.0) -> KeySharedSplit:
    """Run two streaming queries on one Key_Shared subscription until they received ``expected``
    messages together, and check what Key_Shared promises.

    The queries run side by side (not ``Trigger.AvailableNow``): whichever starts first may claim
    messages of every key before the other joins, and the keys that then move to the second query
    are held back until the first acknowledges what it claimed of them (Pulsar 4.x's ordering rule).
    An AvailableNow run ends as soon as nothing is claimable *now*, so the second query of such a
    pair could end at once with nothing; running both until everything is delivered shows the split.

    Raises:
        AssertionError: a message was lost or delivered twice, a query received nothing, or a user's
            messages were interleaved between the queries instead of handed over once.
    """
    frames = {}
    for name in ("query-a", "query-b"):
        frames[name] = (spark.readStream.format("pubsub").option("topic", topic)
                        .option("subscription", "demo-analytics").option("subscriptionType", "Key_Shared")
                        .option("subscriptionInitialPosition", "Earliest").option("consumerName", name)
                        .option("maxMessagesPerTrigger", "200").load(root))
    queries = {}
    for name, df in frames.items():
        queries[name] = (df.select("key", "value", "partition", "offset").writeStream.format("memory")
                         .queryName(name.replace("-", "_"))
                         .option("checkpointLocation", os.path.join(work, f"{name}-ck"))
                         .trigger(processingTime="200 milliseconds").start())
    tables = {name: name.replace("-", "_") for name in queries}

    def delivered() -> int:
        return sum(spark.table(table).count() for table in tables.values())

    deadline = time.monotonic() + timeout_s
    try:
        while delivered() < expected:
            if time.monotonic() > deadline:
                raise AssertionError(f"the Key_Shared queries received {delivered()} of {expected} "
                                     f"messages within {timeout_s:.0f} s")
            for query in queries.values():
                query.processAllAvailable()
    finally:
        for query in queries.values():
            query.stop()
    per_query: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    events: list[int] = []
    offsets: dict[str, dict[str, list[int]]] = {}  # query -> user -> the offsets it received (a key
    for name, table in tables.items():             # lives on one partition, so offsets order its events)
        rows = spark.sql(f"select key, offset, get_json_object(cast(value as string), '$.n') as n "
                         f"from {table}").collect()
        counts[name] = len(rows)
        events += [int(row["n"]) for row in rows]
        for row in rows:
            offsets.setdefault(name, {}).setdefault(row["key"], []).append(row["offset"])
        per_query[name] = set(offsets.get(name, {}))
    assert sorted(events) == list(range(expected)), "every message exactly once across the two queries"
    assert all(counts.values()), f"both queries receive a share of the users: {counts}"
    owners: dict[str, set[str]] = {}
    for name, users in per_query.items():
        for user in users:
            owners.setdefault(user, set()).add(name)
    moved = sorted(user for user, names in owners.items() if len(names) > 1)
    for user in moved:  # handed over once: everything the first owner got precedes what the second got
        spans = sorted((min(got[user]), max(got[user])) for got in offsets.values() if user in got)
        assert spans[0][1] < spans[1][0], f"{user}'s messages interleave between the queries: offsets {spans}"
    return KeySharedSplit(per_query=per_query, counts=counts, owners=owners, moved=moved)


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
    from broker_core import TopicNotFound
    from broker_core.broker.admin import Admin

    topic = "persistent://public/default/clicks"
    admin = Admin.open(root)
    with contextlib.suppress(TopicNotFound):  # a fresh topic each run: the checks count every message
        admin.delete_topic(topic, force=True)
    admin.create_partitioned_topic(topic, 2)

    own_session = SparkSession.getActiveSession() is None
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

    split = consume_key_shared(spark, root, topic, work, expected=written)
    for name, users in split.per_query.items():
        print(f"Key_Shared consumer {name} received {split.counts[name]} messages for {len(users)} users")
    print(f"{len(split.owners)} users in all; {len(split.owners) - len(split.moved)} stayed with one query the "
          f"whole time; {len(split.moved)} moved once when the second query joined (Key_Shared keeps a key on "
          "one consumer at a time and hands it over only after the first consumer acknowledged it)")
    if own_session:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
