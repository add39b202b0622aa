"""An internal topic on storage: its log of messages, what an append may commit, what lives beside it.

- ``topic_log``: ``TopicLog``, one internal topic's append, read, tombstone and commit handle.
- ``append_checks``, ``staged_writes``, ``offset_ids``: the append path's pure checks (dedup, fencing),
  segments staged by one process and committed by another, offsets <-> message ids.
- ``segment_reads``, ``segment_cache``: reading offset ranges and publish times from a snapshot's
  segments; the decoded segments kept in memory.
- ``waiters``: in-process wake-ups of readers and consumers waiting for a commit.
- ``watch``: how a waiter learns of another process's commit (inotify, or polling that backs off).
- ``prefetch``: on object stores, the segment a polled commit adds is fetched while the poll reads on.
- ``policies``: namespace and topic policies, most specific wins.
- ``compacted_view``, ``scan``: the compacted view beside the log, bulk scans for engines.

May import: the base modules (``errors``, ``clock``, ``config``, ``naming``, ``hashing``,
``message_id``), ``storage``, ``log`` and ``schema``.  Never ``producer``, ``subscription`` or anything
above them (``tests/test_layering.py``).
"""

from __future__ import annotations

__all__: list[str] = []
