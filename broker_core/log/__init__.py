"""The Delta-protocol transaction log of an internal topic (``docs/PROTOCOL.md``).

Beside the log: ``segment`` (the Parquet encoding of the segment files that ``add`` actions name)
and ``state_store`` (small versioned JSON documents committed the same way: cursors, registries,
tenant and namespace records, policies).

May import: the base modules and ``storage``.  Never ``topic`` or anything above it.
"""

from __future__ import annotations

from broker_core.log.actions import Add, CommitInfo, Metadata, Protocol, Remove, Txn
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import Snapshot
from broker_core.log.transaction_log import CommitResult, NothingToCommit, TransactionLog

__all__ = [
    "Add",
    "CommitInfo",
    "CommitResult",
    "Metadata",
    "NothingToCommit",
    "Protocol",
    "Remove",
    "SegmentRef",
    "Snapshot",
    "TransactionLog",
    "Txn",
]
