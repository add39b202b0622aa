"""Subscriptions on storage: cursors, and which consumer gets which message.

- ``cursor``, ``cursor_store``, ``ranges``: the cursor document (mark-delete position, acked ranges,
  claims and leases), where it is committed, and the offset range sets it is made of.
- ``dispatch``: the subscription types' dispatch rules as pure functions.
- ``key_shared`` (Key_Shared selectors), ``failover`` (the active consumer), ``backoff``
  (redelivery backoff).

May import: the base modules, ``storage``, ``log`` and ``topic``.  Never ``producer``, ``broker``,
``client`` or anything above (``tests/test_layering.py``).
"""

from __future__ import annotations

__all__: list[str] = []
