"""The producer side below the client: where a message goes and who may write.

- ``routing``: partition routing modes (round robin, single partition, custom routers, by key).
- ``registry``: producer access modes across processes (leases, fencing by epoch).
- ``bulk``: a whole Arrow table of messages appended in one commit per partition (the Spark sink).

May import: the base modules, ``storage``, ``log`` and ``topic``.  Never ``subscription``, ``broker``,
``client`` or anything above (``tests/test_layering.py``).
"""

from __future__ import annotations

__all__: list[str] = []
