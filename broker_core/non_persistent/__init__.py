"""Non-persistent topics: in-memory dispatch inside one process, with Pulsar's subscription rules.

A ``non-persistent://`` topic is never written to storage.  There is no broker process to relay
through either, so a non-persistent topic exists only inside the process that uses it: every
``Client`` of one storage root in a process shares one ``NonPersistentRegistry`` (keyed by the
root's URI), and a published message reaches the consumers and readers that are connected to the
topic *in this process at the moment it is published*.  Another process using the same topic name
has a different topic; the two never see each other's messages.

What a ``publish`` does, as a Pulsar broker does for a non-persistent topic:

- every subscription with connected consumers gets the message once, per its type:
  Exclusive (the one consumer), Failover (the active consumer of this partition, chosen by
  ``broker_core.subscription.failover.active_consumer``), Shared (round-robin over the connected consumers of
  the highest priority level that has room), Key_Shared (the owner of the message's sticky key
  hash, from ``broker_core.subscription.key_shared``: AUTO_SPLIT ranges split and merged as consumers join and
  leave, consistent hashing, or STICKY ranges);
- every connected reader gets it;
- a subscription without consumers, a consumer whose receiver queue is full, and a Key_Shared hash
  nobody owns all *drop* the message (counted in ``stats()``); nothing is kept for later.

Message ids are ``(ledger 0, entry n, partition, batch -1)``: ``n`` counts the messages published
to this internal topic in this process since it was first used (topic objects are never discarded,
so an id is never reused within a process).  Ids are not meaningful in another process.

This package is the "broker" half: it knows nothing about the client classes, which connect through
the ``Receiver`` protocol (``offer`` a message without blocking; refuse it when full).  One concept
a module: ``receiver`` (that protocol), ``subscription`` (membership and dispatch of one
subscription), ``topic`` (publish, producers and their access modes, readers, stats) and ``registry``
(the topics of one storage root in this process).

May import: the base modules, ``message``, ``producer`` and ``subscription``.  Never ``client``;
a subscription knows its topic only as a ``SubscribedTopic``.
"""

from __future__ import annotations

from broker_core.non_persistent.receiver import Receiver
from broker_core.non_persistent.registry import NonPersistentRegistry, registry_for
from broker_core.non_persistent.subscription import NonPersistentSubscription
from broker_core.non_persistent.topic import NON_PERSISTENT_LEDGER_ID, NonPersistentTopic, ProducerToken

__all__ = [
    "NON_PERSISTENT_LEDGER_ID",
    "NonPersistentRegistry",
    "NonPersistentSubscription",
    "NonPersistentTopic",
    "ProducerToken",
    "Receiver",
    "registry_for",
]
