"""The asyncio client against the sync client doing the same work, in the same run.

Run from the repository root::

    .venv/bin/python benchmarks/bench_asyncio.py [--messages 50000]

Figures, each on a fresh root with fsync off (the client paths are what is compared, not the disk):

a. produce: the sync client's ``send_async`` with a callback per message (batching on) against the
   async client's ``await asyncio.gather(send(...) ...)`` in windows of 1,000 awaited sends;
b. consume: the sync ``receive`` + ``acknowledge`` loop against ``await receive()`` +
   ``await acknowledge()`` on one Exclusive subscription of the same topic;
c. 1,000 concurrent ``receive()`` awaits: threads before and while they wait.

A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script from a checkout without installing the project
    sys.path.insert(0, str(_REPO))

import broker_core.asyncio as aio  # noqa: E402
from broker_core import BrokerConfig, Client, InitialPosition  # noqa: E402

PAYLOAD = b"x" * 100
CONFIG = BrokerConfig(fsync_enabled=False)
WINDOW = 1000


def sync_round(root: str, n: int) -> tuple[float, float]:
    client = Client(root, broker_config=CONFIG)
    consumer = client.subscribe("t", "s", initial_position=InitialPosition.Earliest)
    producer = client.create_producer("t", batching_enabled=True, block_if_queue_full=True)
    done = threading.Event()
    count = [0]

    def callback(result: object, msg_id: object) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    start = time.perf_counter()
    for _ in range(n):
        producer.send_async(PAYLOAD, callback)
    done.wait()
    produced = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n):
        consumer.acknowledge(consumer.receive())
    consumed = time.perf_counter() - start
    client.close()
    return produced, consumed


async def async_round(root: str, n: int) -> tuple[float, float]:
    client = aio.Client(root, broker_config=CONFIG)
    consumer = await client.subscribe("t", "s", initial_position=InitialPosition.Earliest)
    producer = await client.create_producer("t", block_if_queue_full=True)
    start = time.perf_counter()
    for low in range(0, n, WINDOW):
        await asyncio.gather(*[producer.send(PAYLOAD) for _ in range(min(WINDOW, n - low))])
    produced = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n):
        await consumer.acknowledge(await consumer.receive())
    consumed = time.perf_counter() - start
    before = threading.active_count()
    waiting = [asyncio.ensure_future(consumer.receive()) for _ in range(1000)]
    await asyncio.sleep(0.05)
    print(f"c. threads before 1,000 pending receive() awaits: {before}, while they wait: {threading.active_count()}")
    for task in waiting:
        task.cancel()
    await client.close()
    return produced, consumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    args = parser.parse_args()
    n = args.messages
    work = tempfile.mkdtemp(prefix="bench-asyncio-")
    try:
        sync_p, sync_c = sync_round(str(Path(work) / "sync"), n)
        async_p, async_c = asyncio.run(async_round(str(Path(work) / "async"), n))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"a. produce {n:,}: sync send_async {n / sync_p:,.0f} msg/s, async send {n / async_p:,.0f} msg/s "
          f"({sync_p / async_p:.2f}x of sync)")
    print(f"b. consume {n:,}: sync {n / sync_c:,.0f} msg/s, async {n / async_c:,.0f} msg/s "
          f"({sync_c / async_c:.2f}x of sync)")


if __name__ == "__main__":
    main()
