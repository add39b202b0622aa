"""End-to-end demo on a local folder: produce to a partitioned topic, read it back, show the log.

Run with ``make demo`` (it creates the virtualenv first).  Everything happens under ``--root``; run
it twice and the second run appends to the same topic, which shows that ids and offsets continue.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pyarrow as pa

from broker_core import Admin, AlreadyExists, Client, CompressionType, MessageId


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default="demo-data", help="storage root folder (created if missing)")
    parser.add_argument("--messages", type=int, default=10_000, help="messages to send one by one")
    args = parser.parse_args(argv)
    if args.messages < 1:
        parser.error(f"--messages must be >= 1, got {args.messages}")

    root = os.path.abspath(args.root)
    client = Client(root, create_root=True)  # the demo's own folder: creating it is what the user asked for
    admin = Admin.open(root)
    topic = "persistent://public/default/orders"
    try:
        admin.create_partitioned_topic(topic, 3)
        print(f"created {topic} with 3 partitions under {root}")
    except AlreadyExists:
        print(f"{topic} exists under {root}; appending to it")

    producer = client.create_producer(
        topic, batching_enabled=True, block_if_queue_full=True, compression_type=CompressionType.LZ4
    )
    started = time.perf_counter()
    for i in range(args.messages):
        producer.send_async(f"order-{i}".encode(), None, partition_key=f"customer-{i % 100}",
                            properties={"source": "demo"})
    producer.flush()
    elapsed = time.perf_counter() - started
    print(f"sent {args.messages} messages with send_async (batching on) in {elapsed:.2f}s "
          f"({args.messages / elapsed:,.0f} msg/s)")

    table = pa.table({"value": [f"bulk-{i}".encode() for i in range(100_000)],
                      "key": [f"customer-{i % 100}" for i in range(100_000)]})
    started = time.perf_counter()
    results = producer.send_table(table)
    elapsed = time.perf_counter() - started
    print(f"appended {table.num_rows} messages in bulk in {elapsed:.2f}s: "
          + ", ".join(f"partition {r.partition}: {r.rows}" for r in results))
    last = producer.send(b"the last one", partition_key="customer-7")
    print(f"sent one more synchronously: message id {last}")
    producer.close()

    reader = client.create_reader(topic, MessageId.earliest)
    counts = [0, 0, 0]
    first = None
    while reader.has_message_available():
        msg = reader.read_next()
        first = first or msg
        counts[msg.message_id().partition()] += 1
    print(f"read back {sum(counts)} messages per partition {counts}; the first: {first!r}")

    per_key = client.create_reader(topic + "-partition-" + str(last.partition()), last,
                                   start_message_id_inclusive=True)
    msg = per_key.read_next(timeout_millis=1000)
    print(f"reader at id {last} (inclusive) reads {msg.data()!r} with key {msg.partition_key()!r}")
    client.close()

    log_dir = os.path.join(root, "public", "default", "persistent", "orders-partition-0", "_delta_log")
    versions = sorted(n for n in os.listdir(log_dir) if n.endswith(".json"))
    print(f"partition 0's Delta log has {len(versions)} commits; the newest is {versions[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
