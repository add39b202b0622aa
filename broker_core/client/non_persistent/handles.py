"""A non-persistent handle's ties to its ``Client``: the topics of its root, and the client's handle set.

Producers, readers and consumers of non-persistent topics find their topics in the process
registry of the client's storage root (``broker_core.non_persistent.registry_for``), and register
with the client so that ``Client.close`` closes them too, as it closes persistent handles.
"""

from __future__ import annotations

from typing import Any

from broker_core.client.context import HandleOwner
from broker_core.non_persistent import NonPersistentRegistry, registry_for


def registry_of(client: HandleOwner) -> NonPersistentRegistry:
    """The non-persistent topics of ``client``'s storage root in this process."""
    return registry_for(client._broker.io.root_uri)


def track(client: HandleOwner, handle: Any) -> None:
    """Register ``handle`` with ``client`` (it calls ``client._forget`` when it closes)."""
    with client._lock:
        client._handles.add(handle)


__all__ = [
    "registry_of",
    "track",
]
