"""Producers, consumers and readers of non-persistent topics (``non-persistent://...``).

``Client.create_producer``, ``Client.create_reader`` and ``Client.subscribe`` hand a
non-persistent topic to this package; the classes here expose the same methods as ``Producer``,
``Consumer`` and ``Reader``.  Messages never touch storage: ``broker_core.non_persistent`` relays
each one, inside this process, to the consumers and readers connected at the moment it is sent
(``docs/NON_PERSISTENT.md`` says what that means across processes and what is refused).

- ``send`` delivers before it returns; ``send_async`` delivers and runs its callback before it
  returns.  Batching settings are accepted and have no effect (every send is its own entry).
- Acknowledgments only forget the message (nothing is stored to acknowledge).  A negative ack, an
  ack timeout or ``redeliver_unacknowledged_messages`` dispatches the consumer's in-memory copy
  again on its subscription, with the redelivery count raised, to whichever consumer the
  subscription type picks now.  A message still unacknowledged when its consumer closes is lost.
- A consumer or reader whose receiver queue is full when a message arrives misses it (Pulsar drops
  non-persistent messages a consumer has no permits for).

One concept a module: ``producer`` and ``reader`` (each handle and the function that creates it),
``consumer`` (the consumer handle), ``subscribe`` (what ``Client.subscribe`` decides and builds for
non-persistent topics), ``handles`` (a handle's ties to its ``Client``), ``receiver_queue`` (the
blocking read that readers and consumers share) and ``refusals`` (how what a non-persistent topic
cannot do is refused).

May import: ``non_persistent``, the rest of ``client`` except ``client.client``, and what they may
import.
"""

from __future__ import annotations

from broker_core.client.non_persistent.consumer import NonPersistentConsumer
from broker_core.client.non_persistent.producer import NonPersistentProducer, create_non_persistent_producer
from broker_core.client.non_persistent.reader import NonPersistentReader, create_non_persistent_reader
from broker_core.client.non_persistent.subscribe import (
    check_pattern_mode,
    is_non_persistent_subscription,
    list_non_persistent_topics,
    subscribe_non_persistent,
)

__all__ = [
    "NonPersistentConsumer",
    "NonPersistentProducer",
    "NonPersistentReader",
    "check_pattern_mode",
    "create_non_persistent_producer",
    "create_non_persistent_reader",
    "is_non_persistent_subscription",
    "list_non_persistent_topics",
    "subscribe_non_persistent",
]
