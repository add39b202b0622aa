"""Decoded segments kept in memory, least recently used first out, within a byte budget.

A consumer's dispatch window spans thousands of tiny segments under a trickle of small commits, and
re-decoding each file per claim cost more than everything else it does
(``benchmarks/bench_trickle.py``); a reader also fetches a segment piecewise.  Segment files never
change once committed (a new name per write), so an entry never goes stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator

import pyarrow as pa

ALWAYS_KEPT_ENTRIES = 4  # kept whatever their size
BUDGET_BYTES = 64 << 20  # beyond those, entries stay up to this many bytes ...
MAX_ENTRIES = 16_384  # ... and this many entries


def table_bytes(table: pa.Table) -> int:
    """The decoded size of ``table``, taken once per entry (eviction subtracts what was charged).
    With pyarrow 26 the table's own ``get_total_buffer_size`` is the cheapest way (~0.3 us for a
    tiny segment; summing its record batches' took ~1.2, ``nbytes`` ~10); D77 measured the opposite
    on an older pyarrow (10-20 us for the table), so this is re-measured, not assumed (D111)."""
    return table.get_total_buffer_size()


class SegmentCache:
    """Decoded segment tables by segment path, thread-safe.

    Args:
        budget_bytes: the decoded bytes kept beyond the ``always_kept`` most recent entries.
        always_kept: this many most recently used entries stay whatever their size.
        max_entries: no more entries than this (beyond ``always_kept``), whatever their size.
    """

    def __init__(self, *, budget_bytes: int = BUDGET_BYTES, always_kept: int = ALWAYS_KEPT_ENTRIES,
                 max_entries: int = MAX_ENTRIES) -> None:
        self._tables: OrderedDict[str, tuple[pa.Table, int]] = OrderedDict()  # path -> (rows, bytes)
        self._bytes = 0
        self.budget_bytes = budget_bytes
        self.always_kept = always_kept
        self.max_entries = max_entries
        self._lock = threading.Lock()

    def get(self, path: str) -> pa.Table | None:
        """The cached table of ``path`` (now the most recently used), or None."""
        with self._lock:
            entry = self._tables.get(path)
            if entry is None:
                return None
            self._tables.move_to_end(path)
            return entry[0]

    def put(self, path: str, table: pa.Table) -> None:
        """Keep ``table`` as ``path``'s, then evict the least recently used entries over the budget."""
        size_bytes = table_bytes(table)  # outside the lock: readers and the readahead thread share it
        with self._lock:
            if path not in self._tables:
                self._tables[path] = (table, size_bytes)
                self._bytes += size_bytes
            while len(self._tables) > self.always_kept and (
                self._bytes > self.budget_bytes or len(self._tables) > self.max_entries
            ):
                self._bytes -= self._tables.popitem(last=False)[1][1]

    def __contains__(self, path: object) -> bool:
        with self._lock:
            return path in self._tables

    def __iter__(self) -> Iterator[str]:
        """The cached paths, least recently used first (a copy: safe while others use the cache)."""
        with self._lock:
            return iter(list(self._tables))

    def __len__(self) -> int:
        return len(self._tables)

    @property
    def size_bytes(self) -> int:
        """The decoded bytes held (each entry charged the size taken when it was put)."""
        return self._bytes

    def entry_sizes(self) -> dict[str, int]:
        """Each entry's charged size (for tests of the accounting)."""
        with self._lock:
            return {path: size for path, (_, size) in self._tables.items()}

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._bytes = 0


__all__ = ["ALWAYS_KEPT_ENTRIES", "BUDGET_BYTES", "MAX_ENTRIES", "SegmentCache", "table_bytes"]
