"""Typed topics: Avro records through the client and through Spark, against plain fastavro and binary reads.

Run from the repository root::

    .venv/bin/python benchmarks/bench_schema.py [--records 1000000] [--no-spark] [--produce-only]

``--produce-only`` times a and b alone (for iterating on the producer); with ``PYTHONPATH`` set to
another checkout it measures that checkout's client (the header names the one imported).
``--consume-repeat N`` then consumes the topic N more times (c, each with a new subscription, each
after a new fastavro decode) and prints per run where the CPU went: the main, dispatch and ack
threads, the garbage collections of each generation, and the segment layout the producer cut (for
telling a slow run's cause from the machine's load: D112).

Records have 5 fields (long, string, double, int, boolean), declared as a ``Record`` class.  Figures,
each timed in this run:

a. baseline: ``fastavro.schemaless_writer`` of every record (as a dict) into its own payload, and
   ``fastavro.schemaless_reader`` of every payload back (what encoding/decoding alone costs);
b. producing: ``producer.send_async(record)`` of every ``Record`` with ``AvroSchema`` (batching on)
   and a final ``flush()``: encoding, queueing, Parquet segments and log commits;
c. consuming the way an application does by default: ``receive()`` of every message one by one
   (default receiver queue), ``value()`` on each (decoded with the writer's version, resolved to the
   reader's schema) and ``acknowledge(msg)`` of each; reported besides: the same with
   ``batch_receive`` and a cumulative acknowledgment per batch (a 50,000-message receiver queue);
d. the column decoder alone (``decode_column``) on the same payloads, which Spark uses;
e. Spark: ``spark.read.format("pubsub")`` of the topic, typed (``value`` a struct) against binary
   (``valueFormat=binary``), each fully materialised with the ``noop`` sink, after one warm-up read.

Goals: b and c at least 0.5x the fastavro baseline's throughput; the typed Spark read within 1.5x of
the binary read's time.  This is a benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script from a checkout without installing the project
    sys.path.insert(0, str(_REPO))

import fastavro  # noqa: E402
import pyarrow as pa  # noqa: E402

import broker_core  # noqa: E402
from broker_core import Client, ConsumerBatchReceivePolicy, InitialPosition  # noqa: E402
from broker_core import schema as m  # noqa: E402
from broker_core.schema.columns import decode_column  # noqa: E402

TOPIC = "bench-schema"


class Order(m.Record):
    order_id = m.Long(required=True)
    customer = m.String(required=True)
    amount = m.Double(required=True)
    quantity = m.Integer(required=True)
    paid = m.Boolean(required=True)


class Cost:
    """Wall time, CPU time of the whole process (all threads) and time in garbage collection of one
    timed phase.  On a shared machine the wall time of the baseline and of the client are taken at
    different moments of a changing load; the CPU-time ratio is the steadier figure."""

    def __init__(self) -> None:
        self.wall_s = self.cpu_s = self.gc_s = 0.0
        self._gc_start = 0.0

    def _on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_start

    def __enter__(self) -> Cost:
        gc.callbacks.append(self._on_gc)
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s, self.cpu_s = time.perf_counter() - self._wall, time.process_time() - self._cpu
        gc.callbacks.remove(self._on_gc)


def progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>12,.0f} rec/s  ({seconds:6.2f} s)"


def goal(name: str, ratio: float, target: float, higher_is_better: bool = True) -> str:
    met = ratio >= target if higher_is_better else ratio <= target
    return f"{name}: {ratio:.2f}x (goal {'>=' if higher_is_better else '<='} {target}x) {'MET' if met else 'MISSED'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--produce-only", action="store_true", help="time a and b only (no consuming, no Spark)")
    parser.add_argument("--consume-repeat", type=int, default=0, metavar="N",
                        help="consume the topic N more times, printing each run's CPU by thread and its collections")
    args = parser.parse_args()
    n = args.records
    print(f"records: {n:,}  load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores  "
          f"client: {Path(broker_core.__file__).parent.parent}")

    records = [Order(order_id=i, customer=f"customer-{i % 1000}", amount=i * 0.25, quantity=i % 50, paid=i % 2 == 0)
               for i in range(n)]
    dicts = [r._to_datum(json=False) for r in records]
    parsed = fastavro.parse_schema(Order.schema())

    progress("fastavro encode")
    payloads = []
    with Cost() as encode_cost:
        for d in dicts:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, parsed, d)
            payloads.append(buffer.getvalue())
    t_encode = encode_cost.wall_s
    progress("fastavro decode")
    with Cost() as decode_cost:
        for p in payloads:
            fastavro.schemaless_reader(io.BytesIO(p), parsed, None)
    t_decode = decode_cost.wall_s

    root = tempfile.mkdtemp(prefix="bench-schema-")
    try:
        (Path(root) / "_pubsub").mkdir()
        (Path(root) / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
        client = Client(f"file://{root}")
        schema = m.AvroSchema(Order)
        producer = client.create_producer(TOPIC, schema=schema, batching_enabled=True,
                                          batching_max_messages=10_000, batching_max_allowed_size_in_bytes=4 << 20,
                                          block_if_queue_full=True, max_pending_messages=100_000,
                                          max_pending_messages_across_partitions=100_000)
        progress("producing")
        produce_cost = produce(producer, records)
        t_produce = produce_cost.wall_s
        progress("producing the encoded payloads with BytesSchema (the client alone)")
        raw = client.create_producer(TOPIC + "-raw", batching_enabled=True, batching_max_messages=10_000,
                                     batching_max_allowed_size_in_bytes=4 << 20, block_if_queue_full=True,
                                     max_pending_messages=100_000, max_pending_messages_across_partitions=100_000)
        t_produce_raw = produce(raw, payloads).wall_s
        if args.produce_only:
            client.close()
            print(f"a. fastavro encode alone          {rate(n, t_encode)}")
            print(f"b. produce (send_async + flush)   {rate(n, t_produce)}")
            print(f"   same, BytesSchema of payloads  {rate(n, t_produce_raw)}  (the client's own cost)")
            print(goal("   produce vs fastavro encode", t_encode / t_produce, 0.5))
            print(f"   by CPU time (all threads): produce {encode_cost.cpu_s / produce_cost.cpu_s:.2f}x; "
                  f"garbage collection took {produce_cost.gc_s:.2f} s of producing")
            return

        del records, dicts  # not needed any more: the consumers' garbage collections need not scan them
        progress("consuming (receive + value + acknowledge per message)")
        consume_cost = consume(client, TOPIC, schema, n, "per-message")
        t_consume = consume_cost.wall_s
        progress("consuming the raw topic with BytesSchema (the client alone)")
        t_consume_raw = consume(client, TOPIC + "-raw", m.BytesSchema(), n, "per-message-raw").wall_s
        progress("consuming with batch_receive")
        t_consume_batch = consume_batches(client, TOPIC, schema, n)
        client.close()

        progress("decode_column")
        column = pa.array(payloads, pa.binary())
        start = time.perf_counter()
        decode_column(column, None, reader=schema.schema_info(), writer_of=lambda v: None)
        t_column = time.perf_counter() - start

        print(f"a. fastavro encode alone          {rate(n, t_encode)}")
        print(f"   fastavro decode alone          {rate(n, t_decode)}")
        print(f"b. produce (send_async + flush)   {rate(n, t_produce)}")
        print(f"   same, BytesSchema of payloads  {rate(n, t_produce_raw)}  (the client's own cost)")
        print(f"c. consume (receive+value+ack)    {rate(n, t_consume)}")
        print(f"   same, BytesSchema              {rate(n, t_consume_raw)}  (the client's own cost)")
        print(f"   batch_receive+value, cum. ack  {rate(n, t_consume_batch)}")
        print(f"d. decode_column (vectorised)     {rate(n, t_column)}")
        print(goal("   produce vs fastavro encode", t_encode / t_produce, 0.5))
        print(goal("   consume vs fastavro decode", t_decode / t_consume, 0.5))
        print(f"   batch_receive consume vs fastavro decode: {t_decode / t_consume_batch:.2f}x")
        print(f"   by CPU time (all threads): produce {encode_cost.cpu_s / produce_cost.cpu_s:.2f}x, "
              f"consume {decode_cost.cpu_s / consume_cost.cpu_s:.2f}x; garbage collection took "
              f"{produce_cost.gc_s:.2f} s of producing, {consume_cost.gc_s:.2f} s of consuming")
        print(f"   decode_column vs fastavro decode: {t_decode / t_column:.2f}x")

        if args.consume_repeat:
            repeat_consume(root, schema, payloads, parsed, n, args.consume_repeat)
        if not args.no_spark:
            spark_figures(root, n)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def produce(producer: Any, values: list[Any]) -> Cost:
    with Cost() as cost:
        for value in values:
            producer.send_async(value, None)
        producer.flush()
    producer.close()
    return cost


def consume(client: Client, topic: str, schema: m.Schema, n: int, subscription: str) -> Cost:
    """receive + value + acknowledge, one message at a time, with the consumer's defaults."""
    consumer = client.subscribe(topic, subscription, schema=schema, initial_position=InitialPosition.Earliest)
    with Cost() as cost:
        for _ in range(n):
            msg = consumer.receive()
            msg.value()
            consumer.acknowledge(msg)
    consumer.close()
    return cost


def consume_batches(client: Client, topic: str, schema: m.Schema, n: int) -> float:
    consumer = client.subscribe(topic, "bench-batches", schema=schema, initial_position=InitialPosition.Earliest,
                                receiver_queue_size=50_000,
                                batch_receive_policy=ConsumerBatchReceivePolicy(10_000, -1, 1000))
    start = time.perf_counter()
    seen = 0
    while seen < n:
        batch = consumer.batch_receive()
        for msg in batch:
            msg.value()
        seen += len(batch)
        if batch:
            consumer.acknowledge_cumulative(batch[-1])
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def thread_cpu_s(name_prefix: str) -> float:
    """CPU seconds used so far by the live threads whose names start with ``name_prefix``."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith(name_prefix) and thread.ident is not None:
            with contextlib.suppress(OSError):  # (ended meanwhile)
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return total


def repeat_consume(root: str, schema: m.Schema, payloads: list[bytes], parsed: Any, n: int, runs: int) -> None:
    """c again, ``runs`` times, each after a fastavro decode of the same payloads, with where each
    run's CPU went: a run that costs more than the others shows whether one thread, the collector or
    the whole process (the machine's load) paid for it."""
    sizes = sorted(f.stat().st_size for f in Path(root).rglob("part-*.parquet") if f.parent.name == TOPIC)
    print(f"   segments of the topic: {len(sizes)}, bytes min/median/max {sizes[0]:,}/{sizes[len(sizes) // 2]:,}/"
          f"{sizes[-1]:,}")
    client = Client(f"file://{root}")
    try:
        for run in range(runs):
            with Cost() as decode_cost:
                for p in payloads:
                    fastavro.schemaless_reader(io.BytesIO(p), parsed, None)
            consumer = client.subscribe(TOPIC, f"repeat-{run}", schema=schema,
                                        initial_position=InitialPosition.Earliest)
            gc_before = gc.get_stats()
            dispatch_s, acks_s = thread_cpu_s("pubsub-consumer-"), thread_cpu_s("pubsub-acks-")
            main_s = time.thread_time()
            with Cost() as cost:
                for _ in range(n):
                    msg = consumer.receive()
                    msg.value()
                    consumer.acknowledge(msg)
            main_s = time.thread_time() - main_s
            dispatch_s, acks_s = thread_cpu_s("pubsub-consumer-") - dispatch_s, thread_cpu_s("pubsub-acks-") - acks_s
            collections = [after["collections"] - before["collections"]
                           for before, after in zip(gc_before, gc.get_stats(), strict=True)]
            consumer.close()
            print(f"   run {run + 1}: load {os.getloadavg()[0]:4.1f}  consume {cost.wall_s:5.2f} s wall, "
                  f"{cost.cpu_s:5.2f} s CPU (main {main_s:4.2f}, dispatch {dispatch_s:4.2f}, acks {acks_s:4.2f}; "
                  f"collector {cost.gc_s:4.2f} s, collections {collections})  vs fastavro decode: "
                  f"{decode_cost.wall_s / cost.wall_s:.2f}x wall, {decode_cost.cpu_s / cost.cpu_s:.2f}x CPU")
    finally:
        client.close()


def spark_figures(root: str, n: int) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_pubsub

    progress("starting Spark")
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_pubsub.register(spark)

    def timed(value_format: str) -> float:
        df = spark.read.format("pubsub").option("serviceUrl", root).option("topic", TOPIC).option(
            "valueFormat", value_format).load()
        start = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start

    progress("Spark warm-up")
    timed("binary")
    timings: dict[str, list[float]] = {}
    for fmt in ("binary", "auto", "binary", "auto"):
        progress(f"Spark read valueFormat={fmt}")
        timings.setdefault(fmt, []).append(timed(fmt))
    binary, typed = min(timings["binary"]), min(timings["auto"])
    print(f"e. Spark binary read              {rate(n, binary)}")
    print(f"   Spark typed read               {rate(n, typed)}")
    print(goal("   typed vs binary read time", typed / binary, 1.5, higher_is_better=False))
    spark.stop()


if __name__ == "__main__":
    main()
