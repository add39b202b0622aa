"""``messages_from_rows``: the consumer's part index is set as each message is built, and message ids
come from the read's entry and batch-index arrays, converted at the first ``message_id()`` (D112)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from broker_core.log.segment import SEGMENT_SCHEMA
from broker_core.message import messages_from_rows
from broker_core.message_id import MessageId


def _rows(n: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"value": f"m{i}".encode(), "sticky_key_hash": i, "publish_time": 1_000 * i} for i in range(n)],
        schema=SEGMENT_SCHEMA,
    )


def test_messages_carry_the_given_source_and_their_ids() -> None:
    offsets = np.array([10, 11, 12, 13], np.int64)
    entries = np.array([5, 5, 6, 7], np.int64)
    indexes = np.array([0, 1, -1, -1], np.int64)
    msgs = messages_from_rows(_rows(4), offsets, entries, indexes, ledger_id=9, partition=2, topic="t", source=3)
    assert [m._source for m in msgs] == [3, 3, 3, 3]
    assert [m._offset for m in msgs] == [10, 11, 12, 13]
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2", b"m3"]
    expected = [MessageId(2, 9, 5, 0), MessageId(2, 9, 5, 1), MessageId(2, 9, 6, -1), MessageId(2, 9, 7, -1)]
    assert [m.message_id() for m in reversed(msgs)] == expected[::-1]  # any row may ask first
    assert [m.message_id() for m in msgs] == expected
    assert all(type(m.message_id().entry_id()) is int for m in msgs)


def test_without_a_source_messages_are_unassigned() -> None:
    offsets = np.array([0, 1], np.int64)
    msgs = messages_from_rows(_rows(2), offsets, offsets, np.array([-1, -1], np.int64), ledger_id=1, partition=-1,
                              topic="t")
    assert [m._source for m in msgs] == [-1, -1]
    assert msgs[1].message_id() == MessageId(-1, 1, 1, -1)
