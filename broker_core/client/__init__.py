"""The pulsar-client-shaped Python client.

``client`` (``Client``, on ``client_core``: construction and what the handles share) creates the
handles: ``producer`` (with ``producer_queue``, ``producer_sender``, ``producer_connection``,
``partition_queue``, ``builder``), ``consumer`` (on ``consumer_dispatch``, its dispatcher thread, on
``consumer_acks``, its state and ack thread, and ``consumer_base``; with ``subscribe``,
``subscription_part``, ``dead_letters``, ``receive_batch``), ``reader``, ``table_view``;
``non_persistent/`` holds the non-persistent handles.  ``context`` is what a handle sees of its
client; ``retry_letters`` is the bulk retry/DLQ path for engines.

May import: everything below it, and ``jobs`` (the producer's backlog-quota guard).  Never
``asyncio`` or the CLI.  A handle depends on ``context.HandleOwner``, never on ``Client``.
"""

from __future__ import annotations

from broker_core.client.client import Client
from broker_core.client.producer import BatchingType, Producer
from broker_core.client.reader import Reader

__all__ = ["BatchingType", "Client", "Producer", "Reader"]
