"""How a non-persistent handle refuses what a non-persistent topic cannot do.

Every refusal is an ``OperationNotSupported`` that points at ``docs/NON_PERSISTENT.md``, which
says why the operation needs storage and what to use instead; building them here keeps that
pointer, and the wording of refusals that readers and consumers share, in one place.
"""

from __future__ import annotations

from typing import Any

from broker_core.errors import OperationNotSupported

NP_DOCS = "see docs/NON_PERSISTENT.md"
"""The pointer every refusal message ends with."""


def unsupported(what: str, **context: Any) -> OperationNotSupported:
    """The refusal of ``what`` (a sentence: what is refused, and why), ending with ``NP_DOCS``.

    ``context`` travels with the error as with any ``PulsarException`` (``topic=...``).
    """
    return OperationNotSupported(f"{what} ({NP_DOCS})", **context)


def seek_refused(topic_label: str) -> OperationNotSupported:
    """``seek`` on a reader or consumer: a non-persistent topic keeps no message to go back (or forward) to."""
    return unsupported(
        f"seek is not supported on non-persistent topic {topic_label}: no message is kept", topic=topic_label
    )


__all__ = ["NP_DOCS", "seek_refused", "unsupported"]
