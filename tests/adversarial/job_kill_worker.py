"""Subprocess side of ``test_kills.py``'s job test: a producer and the maintenance jobs, until SIGKILLed.

Run as ``python job_kill_worker.py '<json args>'`` (``root``, ``topic``, ``trial``, ``seed``).  Lines are
flushed at once, so a SIGKILL loses nothing printed.  It prints ``ready``, then loops: send one to three
messages ``<trial>-<i>`` synchronously (``acked <value>`` once each send returned), then run
``merge_segments`` (``merged``), a checkpoint (``checkpointed``) or retention (``retained``), chosen by the
seed, so a kill lands inside a send, a merge's read, write or commit, a checkpoint's write, or between.
"""

from __future__ import annotations

import json
import random
import sys

from broker_core import Client
from broker_core.broker.broker import Broker
from broker_core.jobs import checkpoint, merge_segments, run_retention


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    args = json.loads(sys.argv[1])
    rng = random.Random(args["seed"])
    client = Client(args["root"])
    broker = Broker.for_url(args["root"])
    topic, trial = args["topic"], args["trial"]
    producer = client.create_producer(topic, producer_name=f"w{trial}", batching_enabled=False)
    emit("ready")
    sent = 0
    while True:
        for _ in range(rng.randint(1, 3)):
            value = f"{trial}-{sent}"
            producer.send(value.encode())
            emit(f"acked {value}")
            sent += 1
        job = rng.choice(["merge", "checkpoint", "retention"])
        if job == "merge":
            merge_segments(broker, topic, min_age_ms=0, min_segments=2, dry_run=False)
            emit("merged")
        elif job == "checkpoint":
            checkpoint(broker, topic)
            emit("checkpointed")
        else:
            run_retention(broker, topic, dry_run=False)
            emit("retained")


if __name__ == "__main__":
    main()
