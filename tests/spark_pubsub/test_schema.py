"""The source's vectorised column builders against the one-message-at-a-time definitions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core import MessageId
from spark_pubsub.schema import message_id_strings

INT63 = st.integers(min_value=0, max_value=2**63 - 1)
BATCH = st.integers(min_value=-1, max_value=2**31 - 1)


@settings(max_examples=200, deadline=None)
@given(
    ledger=INT63,
    partition=st.integers(min_value=-1, max_value=2**31 - 1),
    ids=st.lists(st.tuples(INT63, BATCH), max_size=20),
    same_batch=st.booleans(),
)
def test_message_id_strings_are_the_admin_form(
    ledger: int, partition: int, ids: list[tuple[int, int]], same_batch: bool
) -> None:
    if same_batch:  # the constant-batch-index shortcut (unbatched entries, or one batch)
        ids = [(entry, ids[0][1]) for entry, _ in ids]
    entries = np.array([e for e, _ in ids], dtype=np.int64)
    batches = np.array([b for _, b in ids], dtype=np.int64)
    got = message_id_strings(ledger, entries, partition, batches).to_pylist()
    expected = [MessageId(partition, ledger, e, b).to_admin_string() for e, b in ids]
    assert got == expected
    assert [MessageId.parse(s) for s in got] == [MessageId(partition, ledger, e, b) for e, b in ids]
