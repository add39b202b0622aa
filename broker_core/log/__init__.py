"""The Delta-protocol transaction log of an internal topic (``docs/PROTOCOL.md``)."""

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
