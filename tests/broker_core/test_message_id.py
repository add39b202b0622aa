"""MessageId: golden bytes from the official client, round trips, ordering and bad input."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.errors import InvalidConfiguration
from broker_core.message_id import MessageId

LEDGERS = st.integers(min_value=-1, max_value=2**63 - 1)
SMALL = st.integers(min_value=-1, max_value=2**31 - 1)


@st.composite
def message_ids(draw: st.DrawFn) -> MessageId:
    return MessageId(
        partition=draw(SMALL), ledger_id=draw(LEDGERS), entry_id=draw(LEDGERS), batch_index=draw(SMALL)
    )


@st.composite
def close_ids(draw: st.DrawFn) -> MessageId:
    """Ids from a tiny range, so that pairs often share some fields and ties get exercised."""
    small = st.integers(min_value=-1, max_value=1)
    return MessageId(draw(small), draw(small), draw(small), draw(small))


@pytest.fixture(scope="module")
def pulsar() -> object:
    """The official client, only when it happens to be installed (it is not a dependency)."""
    return pytest.importorskip("pulsar")


# --- golden vectors measured from the official pulsar-client ----------------------------------------


@pytest.mark.parametrize(
    ("message_id", "expected_hex"),
    [
        (MessageId(partition=2, ledger_id=5, entry_id=7, batch_index=3), "0805100718022003"),
        (MessageId.earliest, "08ffffffffffffffffff0110ffffffffffffffffff01"),
        (MessageId.latest, "08ffffffffffffffff7f10ffffffffffffffff7f"),
        (MessageId(ledger_id=0, entry_id=0), "08001000"),
        (MessageId(partition=3, ledger_id=0, entry_id=0), "080010001803"),
        (MessageId(-5, 1, 1, -7), "0801100118fbffffffffffffffff0120f9ffffffffffffffff01"),
    ],
)
def test_serialize_matches_official_bytes(message_id: MessageId, expected_hex: str) -> None:
    assert message_id.serialize().hex() == expected_hex
    assert MessageId.deserialize(bytes.fromhex(expected_hex)) == message_id


def test_positional_order_and_accessors_match_official() -> None:
    message_id = MessageId(2, 5, 7, 3)
    assert (message_id.partition(), message_id.ledger_id(), message_id.entry_id()) == (2, 5, 7)
    assert message_id.batch_index() == 3
    assert str(message_id) == "(5,7,2,3)"
    assert repr(message_id) == "MessageId(partition=2, ledger_id=5, entry_id=7, batch_index=3)"
    assert message_id.to_admin_string() == "5:7:2:3"


def test_earliest_and_latest() -> None:
    assert str(MessageId.earliest) == "(-1,-1,-1,-1)"
    assert str(MessageId.latest) == f"({2**63 - 1},{2**63 - 1},-1,-1)"
    assert MessageId.earliest < MessageId(ledger_id=0, entry_id=0) < MessageId.latest
    assert MessageId() == MessageId.earliest


def test_immutable_hashable_picklable() -> None:
    message_id = MessageId(1, 2, 3, 4)
    with pytest.raises(AttributeError):
        message_id._ledger_id = 9
    with pytest.raises(AttributeError):
        message_id.extra = 1
    assert len({message_id, MessageId(1, 2, 3, 4), MessageId(0, 2, 3, 4)}) == 2
    assert pickle.loads(pickle.dumps(message_id)) == message_id
    assert copy.deepcopy(message_id) == message_id


# --- round trips -----------------------------------------------------------------------------------


@given(message_ids())
def test_serialize_round_trip(message_id: MessageId) -> None:
    assert MessageId.deserialize(message_id.serialize()) == message_id
    assert MessageId.deserialize(bytearray(message_id.serialize()), topic="t") == message_id


@given(message_ids())
def test_text_round_trips(message_id: MessageId) -> None:
    assert MessageId.parse(str(message_id)) == message_id
    assert MessageId.parse(message_id.to_admin_string()) == message_id


def test_parse_forms() -> None:
    assert MessageId.parse("5:7") == MessageId(ledger_id=5, entry_id=7)
    assert MessageId.parse("5:7:2") == MessageId(partition=2, ledger_id=5, entry_id=7)
    assert MessageId.parse(" ( 5, 7, 2, 3 ) ") == MessageId(2, 5, 7, 3)
    assert MessageId.parse("earliest") is MessageId.earliest
    assert MessageId.parse("LATEST") is MessageId.latest


@pytest.mark.parametrize("text", ["", "5", "5:", "a:b", "(1,2,3)", "1:2:3:4:5", "1.5:2", "(1,2,3,4"])
def test_parse_rejects_with_accepted_forms(text: str) -> None:
    with pytest.raises(InvalidConfiguration, match="accepted forms") as info:
        MessageId.parse(text)
    assert repr(text) in str(info.value)


def test_parse_rejects_out_of_range_and_non_str() -> None:
    with pytest.raises(InvalidConfiguration, match="partition"):
        MessageId.parse(f"1:2:{2**31}")
    with pytest.raises(InvalidConfiguration, match="expects a str"):
        MessageId.parse(b"1:2")  # type: ignore[arg-type]


# --- ordering --------------------------------------------------------------------------------------


@given(close_ids(), close_ids(), close_ids())
def test_ordering_is_a_consistent_partial_order(a: MessageId, b: MessageId, c: MessageId) -> None:
    key = lambda m: (m.ledger_id(), m.entry_id(), m.batch_index())  # noqa: E731
    assert (a < b) == (key(a) < key(b))
    assert (a > b) == (b < a)
    assert (a <= b) == (a < b or a == b)
    assert (a >= b) == (b <= a)
    assert not (a < b and b < a)
    if a < b and b < c:
        assert a < c
    if a == b:
        assert hash(a) == hash(b)


def test_partition_only_difference_is_neither_equal_nor_ordered() -> None:
    a, b = MessageId(2, 5, 7, 3), MessageId(1, 5, 7, 3)
    assert a != b
    assert not (a < b or b < a or a <= b or b <= a or a > b or a >= b)


def test_batch_index_orders_within_an_entry() -> None:
    assert MessageId(0, 1, 1, -1) < MessageId(0, 1, 1, 0) < MessageId(0, 1, 2, -1)
    assert sorted([MessageId(0, 2, 0), MessageId(0, 1, 9), MessageId(0, 1, 3)]) == [
        MessageId(0, 1, 3),
        MessageId(0, 1, 9),
        MessageId(0, 2, 0),
    ]


def test_comparison_with_other_types() -> None:
    assert MessageId(0, 1, 1) != (0, 1, 1)
    with pytest.raises(TypeError):
        _ = MessageId(0, 1, 1) < (0, 1, 1)


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"partition": 2**31},
        {"batch_index": -(2**31) - 1},
        {"ledger_id": 2**63},
        {"entry_id": "1"},
        {"partition": True},
        {"ledger_id": 1.0},
    ],
)
def test_constructor_rejects_bad_fields(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidConfiguration):
        MessageId(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "hex_data",
    [
        "",  # required fields missing
        "0805",  # entryId missing
        "08051007180220",  # truncated varint value
        "ff",  # truncated key
        "08ffffffffffffffffffff01",  # eleven-byte varint
        "0805100723",  # wire type 3 (start group)
        "08051007290102",  # fixed64 runs off the end
        "080510072a05ab",  # length-delimited runs off the end
        "0005",  # field number 0
    ],
)
def test_deserialize_rejects_malformed(hex_data: str) -> None:
    with pytest.raises(InvalidConfiguration, match="cannot deserialize") as info:
        MessageId.deserialize(bytes.fromhex(hex_data))
    assert repr(hex_data) in str(info.value)


def test_deserialize_skips_unknown_fields() -> None:
    base = MessageId(2, 5, 7, 3).serialize()
    extra = (
        bytes.fromhex("2801")  # ack_set (field 5, varint)
        + bytes.fromhex("3102030405060708ff")  # field 6 as fixed64
        + bytes.fromhex("3a0408011002")  # field 7, length-delimited sub-message
        + bytes.fromhex("4d01020304")  # field 9 as fixed32
    )
    assert MessageId.deserialize(base + extra) == MessageId(2, 5, 7, 3)


def test_deserialize_rejects_non_bytes() -> None:
    with pytest.raises(InvalidConfiguration, match="expects bytes"):
        MessageId.deserialize("0805")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MessageId.deserialize(None)  # type: ignore[arg-type]


# --- against the official client, when it happens to be installed ----------------------------------


@given(message_id=message_ids())
def test_serialize_equals_official_client(pulsar: Any, message_id: MessageId) -> None:
    official = pulsar.MessageId(
        message_id.partition(), message_id.ledger_id(), message_id.entry_id(), message_id.batch_index()
    )
    assert message_id.serialize() == official.serialize()
    assert str(message_id) == str(official)
    assert MessageId.deserialize(official.serialize()) == message_id


@given(a=st.one_of(message_ids(), close_ids()), b=st.one_of(message_ids(), close_ids()))
def test_lt_le_eq_agree_with_official_client(pulsar: Any, a: MessageId, b: MessageId) -> None:
    def official(m: MessageId) -> Any:
        return pulsar.MessageId(m.partition(), m.ledger_id(), m.entry_id(), m.batch_index())

    oa, ob = official(a), official(b)
    assert (a == b) == (oa == ob)
    assert (a < b) == (oa < ob)
    assert (a <= b) == (oa <= ob)
