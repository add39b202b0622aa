"""Values a segment cannot store are refused at ``send``/``send_async`` for that message alone.

Before, they passed the send-time checks and failed the whole batch or group commit at commit time
(``UnknownError`` for every message in it, nothing stored).  Each case here sends good messages
around one bad one in the same batch: the bad one raises ``InvalidConfiguration`` (a ``ValueError``),
the good ones are stored.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from broker_core import Client, InvalidConfiguration, MessageId, Result

BAD_SENDS: list[dict[str, Any]] = [
    {"sequence_id": 2**63},
    {"event_timestamp": 2**63},
    {"event_timestamp": -1},
    {"deliver_at": 2**70},
    {"deliver_after": timedelta(days=999_999_999)},
    {"partition_key": "key-\ud800"},
    {"ordering_key": "\udfff"},
    {"properties": {"k": "\ud800"}},
    {"properties": {"\udc00": "v"}},
]


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "non-persistent"])
@pytest.mark.parametrize("bad", BAD_SENDS, ids=lambda kw: next(iter(kw)))
def test_bad_value_fails_alone_in_a_batch(tmp_path: Path, bad: dict[str, Any], persistent: bool) -> None:
    topic = "t" if persistent else "non-persistent://public/default/t"
    client = Client(str(tmp_path))
    try:
        reader = client.create_reader(topic, start_message_id=MessageId.earliest)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
        results: list[Any] = []
        producer.send_async(b"before", lambda r, _m: results.append(r))
        name = next(iter(bad))
        with pytest.raises(InvalidConfiguration, match=name.split("_after")[0]) as info:
            producer.send_async(b"bad", lambda r, _m: results.append(("bad", r)), **bad)
        assert isinstance(info.value, ValueError)
        with pytest.raises(InvalidConfiguration):
            producer.send(b"bad", **bad)
        producer.send_async(b"after", lambda r, _m: results.append(r))
        producer.flush()
        assert results == [Result.Ok, Result.Ok]
        got = [reader.read_next(timeout_millis=5000).data() for _ in range(2)]
        assert got == [b"before", b"after"]
    finally:
        client.close()


def test_largest_values_are_stored(tmp_path: Path) -> None:
    """The bounds are the segment's, not narrower: the extreme legal values round-trip."""
    client = Client(str(tmp_path))
    try:
        producer = client.create_producer("t")
        max_ms = (2**63 - 1) // 1000
        producer.send(b"x", sequence_id=2**63 - 1, event_timestamp=max_ms, properties={"\u00e9": "\U0001f600"},
                      partition_key="\u00fc")
        reader = client.create_reader("t", start_message_id=MessageId.earliest)
        got = reader.read_next(timeout_millis=5000)
        assert (got.sequence_id(), got.event_timestamp()) == (2**63 - 1, max_ms)
        assert got.properties() == {"\u00e9": "\U0001f600"} and got.partition_key() == "\u00fc"
    finally:
        client.close()


@pytest.mark.parametrize("initial", [2**63 - 1, 2**63, -2])
def test_initial_sequence_id_out_of_range_is_refused_at_create(tmp_path: Path, initial: int) -> None:
    client = Client(str(tmp_path))
    try:
        for topic in ("t", "non-persistent://public/default/t"):
            with pytest.raises(InvalidConfiguration, match="initial_sequence_id"):
                client.create_producer(topic, initial_sequence_id=initial)
        producer = client.create_producer("t", initial_sequence_id=2**63 - 2)
        assert producer.send(b"x") is not None
        assert producer.last_sequence_id() == 2**63 - 1
    finally:
        client.close()


def test_producer_name_must_be_text(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    try:
        with pytest.raises(InvalidConfiguration, match="producer_name"):
            client.create_producer("t", producer_name="p-\ud800")
    finally:
        client.close()
