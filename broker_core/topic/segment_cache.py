"""Decoded segments kept in memory, least recently used first out, within a byte budget.

A consumer's dispatch window spans thousands of tiny segments under a trickle of small commits, and
re-decoding each file per claim cost more than everything else it does
(``benchmarks/bench_trickle.py``); a reader also fetches a segment piecewise.  Segment files never
change once committed (a new name per write), so an entry never goes stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa

_ALWAYS_KEPT_ENTRIES = 4  # kept whatever their size
_BUDGET_BYTES = 64 << 20  # beyond those, entries stay up to this many bytes ...
_MAX_ENTRIES = 16_384  # ... and this many entries


class SegmentCache:
    """Decoded segment tables by segment path, thread-safe.

    Args:
        budget_bytes: the decoded bytes kept beyond the ``always_kept`` most recent entries.
        always_kept: this many most recently used entries stay whatever their size.
        max_entries: no more entries than this (beyond ``always_kept``), whatever their size.
    """

    def __init__(self, *, budget_bytes: int = _BUDGET_BYTES, always_kept: int = _ALWAYS_KEPT_ENTRIES,
                 max_entries: int = _MAX_ENTRIES) -> None:
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._budget_bytes = budget_bytes
        self._always_kept = always_kept
        self._max_entries = max_entries
        self._lock = threading.Lock()

    def get(self, path: str) -> pa.Table | None:
        """The cached table of ``path`` (now the most recently used), or None."""
        with self._lock:
            table = self._tables.get(path)
            if table is not None:
                self._tables.move_to_end(path)
            return table

    def put(self, path: str, table: pa.Table) -> None:
        """Keep ``table`` as ``path``'s, then evict the least recently used entries over the budget."""
        with self._lock:
            if path not in self._tables:
                self._tables[path] = table
                self._bytes += table.get_total_buffer_size()  # (``nbytes`` costs 70x more)
            while len(self._tables) > self._always_kept and (
                self._bytes > self._budget_bytes or len(self._tables) > self._max_entries
            ):
                self._bytes -= self._tables.popitem(last=False)[1].get_total_buffer_size()


__all__ = ["SegmentCache"]
