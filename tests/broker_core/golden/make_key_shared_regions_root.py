"""Writes ``key_shared_regions_root/``: a root as the code before the 4.x Key_Shared selectors left it.

Run once with that code on the path (commit 4f6b4b7), e.g.::

    git archive 4f6b4b7 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/broker_core/golden/make_key_shared_regions_root.py OUT

Topic ``t`` holds 12 keyed messages; Key_Shared subscription ``s`` (AUTO_SPLIT hash ranges) has the
consumers ``a``, ``b``, ``c`` registered with leases that outlive any test, so its cursor stores the
legacy ``regions`` layout ``c [0, 16383], b [16384, 32767], a [32768, 65535]``.
"""

from __future__ import annotations

import os
import sys

from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition

root = sys.argv[1]
config = BrokerConfig(fsync_enabled=False, subscription_key_shared_use_consistent_hashing=False,
                      consumer_lease_ms=10**12)
client = Client(root, broker_config=config)
for name in ("a", "b", "c"):
    client.subscribe("t", "s", consumer_type=ConsumerType.KeyShared, consumer_name=name,
                     initial_position=InitialPosition.Earliest, receiver_queue_size=1)
producer = client.create_producer("t", batching_enabled=False)
for i in range(12):
    producer.send(f"m{i}".encode(), partition_key=f"k{i}")
producer.flush()
os._exit(0)  # leave the consumers registered, as a process that died would
