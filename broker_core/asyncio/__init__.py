"""The asyncio client, shaped like ``pulsar.asyncio`` of the official ``pulsar-client`` package.

``from broker_core.asyncio import Client`` replaces ``from pulsar.asyncio import Client``::

    client = Client("./data")
    producer = await client.create_producer("orders")
    await producer.send(b"hello")
    consumer = await client.subscribe("orders", "billing")
    msg = await consumer.receive()
    await consumer.acknowledge(msg)
    await client.close()

It is the synchronous client underneath (``broker_core/asyncio/client.py`` says how the work is
kept off the event loop).  Errors are the synchronous client's: ``PulsarException`` here is the
project's error root, whose ``error()`` gives the ``Result`` code as ``pulsar.asyncio``'s does.

May import: ``client`` and what it may import.  Never the CLI.
"""

from __future__ import annotations

from broker_core.asyncio.client import Client
from broker_core.asyncio.consumer import Consumer, Reader
from broker_core.asyncio.producer import Producer
from broker_core.errors import PulsarException

__all__ = ["Client", "Consumer", "Producer", "PulsarException", "Reader"]
