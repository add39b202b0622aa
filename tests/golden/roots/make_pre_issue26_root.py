"""Writes ``pre_issue26_root/``: a root as ``main`` left it before issues 26-28 (commit 6fcbcd8).

Run once with that code on the path, e.g.::

    git archive 6fcbcd8 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/golden/roots/make_pre_issue26_root.py OUT

It holds what those issues changed the reading or writing of: a checkpoint without the summary
later checkpoints carry (D130), commits after it, dedup ``txn`` actions, a compacted view, and
cursors without the ``holder`` (D137) or ``activity`` (D161) records; no root marker (D150).
Topic ``t`` holds ``m0``..``m9`` (keys ``k0``..``k4``); subscription ``s`` acknowledged
``m0``..``m3``; Exclusive subscription ``e`` is held by the lease of consumer ``gone``, whose
process died.
"""

from __future__ import annotations

import os
import sys

from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition
from broker_core.broker.broker import Broker
from broker_core.jobs import checkpoint
from broker_core.jobs.compaction import compact_topic

root = sys.argv[1]
config = BrokerConfig(fsync_enabled=False, broker_deduplication_enabled=True)
client = Client(root, broker_config=config, create_root=True)
consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, consumer_name="c",
                            initial_position=InitialPosition.Earliest)
producer = client.create_producer("t", producer_name="p", batching_enabled=False)
for i in range(6):
    producer.send(f"m{i}".encode(), partition_key=f"k{i % 5}", sequence_id=i)
broker = Broker.for_url(root, config)
checkpoint(broker, "t")
for i in range(6, 10):
    producer.send(f"m{i}".encode(), partition_key=f"k{i % 5}", sequence_id=i)
producer.flush()
for _ in range(4):
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
consumer.close()
compact_topic(broker, "t", dry_run=False)
client.close()
# a process that dies holding an Exclusive lease (which outlives any test): ``e`` keeps consumer ``gone``
crashed = Client(root, broker_config=BrokerConfig(fsync_enabled=False, consumer_lease_ms=10**12))
crashed.subscribe("t", "e", consumer_type=ConsumerType.Exclusive, consumer_name="gone")
os._exit(0)
