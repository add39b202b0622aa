"""The pulsar-client-shaped Python client."""

from __future__ import annotations

from broker_core.client.client import Client
from broker_core.client.producer import BatchingType, Producer
from broker_core.client.reader import Reader

__all__ = ["BatchingType", "Client", "Producer", "Reader"]
