"""How a non-persistent handle refuses what a non-persistent topic cannot do.

Every refusal is an ``OperationNotSupported`` that points at ``docs/NON_PERSISTENT.md``, which
says why the operation needs storage and what to use instead.
"""

from __future__ import annotations

NP_DOCS = "see docs/NON_PERSISTENT.md"
"""The pointer every refusal message ends with."""


__all__ = ["NP_DOCS"]
