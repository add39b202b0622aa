"""Did-you-mean for a topic that does not exist: the existing topics whose names are close to it.

A typo in a topic name (``ordrs``) must fail naming the topics the user probably meant, not suggest
creating the typo.  One rule for the CLI and the Spark source, so both suggest the same names.  Only
asked on the error path: it lists the namespace (a LIST and a HEAD per topic on an object store).
"""

from __future__ import annotations

import difflib
from typing import Protocol

from broker_core.errors import PulsarException
from broker_core.naming import TopicName

_MAX_SUGGESTIONS = 3
_CUTOFF = 0.6


class TopicLister(Protocol):
    """What ``close_topics`` needs of an ``Admin``: the topics of a namespace."""

    def list_topics(self, namespace: str) -> list[str]: ...


def close_topics(admin: TopicLister, missing: TopicName) -> list[str]:
    """Existing topics of ``missing``'s namespace whose local names are close to its local name
    (best first, at most three); ``[]`` when none is close or the namespace cannot be listed."""
    try:
        existing = admin.list_topics(missing.namespace_name)
    except PulsarException:  # a missing namespace, an unreadable root: no suggestion, the caller's error stands
        return []
    by_local = {TopicName.parse(name).local_name: name for name in existing if name != str(missing)}
    near = difflib.get_close_matches(missing.local_name, list(by_local), n=_MAX_SUGGESTIONS, cutoff=_CUTOFF)
    return [by_local[local] for local in near]


def did_you_mean(names: list[str]) -> str:
    """``"did you mean 'a' or 'b'?"`` for a message, or ``""`` when there is nothing to suggest."""
    if not names:
        return ""
    return "did you mean " + " or ".join(repr(name) for name in names) + "?"


__all__ = ["TopicLister", "close_topics", "did_you_mean"]
