"""Key_Shared consumer selection: which connected consumer owns a message's sticky key hash.

The three mappings of Pulsar 4.x, one module each: ``ConsistentHashingSelector`` (``AUTO_SPLIT``
under ``subscriptionKeySharedUseConsistentHashing``, the 4.x default), ``AutoSplitHashRangeSelector``
(``AUTO_SPLIT`` with consistent hashing off) and ``StickySelector`` (``STICKY``); ``selector_for``
picks one.  ``base`` holds what they share.

May import: the base modules (``errors``, ``hashing``).
"""

from __future__ import annotations

from collections.abc import Iterable

from broker_core.subscription.key_shared.auto_split import (
    DEFAULT_RANGE_SIZE,
    AutoSplitHashRangeSelector,
    check_range_size,
    end_keys_from_regions,
)
from broker_core.subscription.key_shared.auto_split import join as auto_split_join
from broker_core.subscription.key_shared.auto_split import leave as auto_split_leave
from broker_core.subscription.key_shared.base import (
    HASH_RANGE_SIZE,
    KeySharedConsumer,
    KeySharedMode,
    KeySharedSelector,
)
from broker_core.subscription.key_shared.consistent import DEFAULT_POINTS_PER_CONSUMER, ConsistentHashingSelector
from broker_core.subscription.key_shared.sticky import StickySelector


def selector_for(
    mode: KeySharedMode | int | str,
    consistent_hashing: bool,
    consumers: Iterable[KeySharedConsumer],
    *,
    points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER,
    range_size: int = DEFAULT_RANGE_SIZE,
) -> KeySharedSelector:
    """The selector a subscription uses.

    Args:
        mode: the consumers' Key_Shared mode.
        consistent_hashing: the broker setting ``subscriptionKeySharedUseConsistentHashing``; it
            replaces hash ranges with the ring for ``AutoSplit`` only.
        consumers: the connected consumers.
        points_per_consumer: ring points per consumer (``...ConsistentHashingReplicaPoints``).
        range_size: auto-split slots (``subscriptionKeySharedAutoSplitRangeSize``).
    """
    if KeySharedMode.coerce(mode) is KeySharedMode.Sticky:
        return StickySelector(consumers)
    if consistent_hashing:
        return ConsistentHashingSelector(consumers, points_per_consumer=points_per_consumer)
    return AutoSplitHashRangeSelector(consumers, range_size=range_size)


__all__ = [
    "DEFAULT_POINTS_PER_CONSUMER",
    "DEFAULT_RANGE_SIZE",
    "HASH_RANGE_SIZE",
    "AutoSplitHashRangeSelector",
    "ConsistentHashingSelector",
    "KeySharedConsumer",
    "KeySharedMode",
    "KeySharedSelector",
    "StickySelector",
    "auto_split_join",
    "auto_split_leave",
    "check_range_size",
    "end_keys_from_regions",
    "selector_for",
]
