from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.errors import InvalidTopicName
from broker_core.naming import (
    MAX_PART_BYTES,
    NamespaceName,
    TopicDomain,
    TopicName,
    validate_namespace,
    validate_tenant,
)

P = TopicDomain.PERSISTENT
NP = TopicDomain.NON_PERSISTENT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my-topic", TopicName(P, "public", "default", "my-topic")),
        ("t/ns/x", TopicName(P, "t", "ns", "x")),
        ("persistent://t/ns/x", TopicName(P, "t", "ns", "x")),
        ("non-persistent://t/ns/x", TopicName(NP, "t", "ns", "x")),
        ("persistent://public/default/my-topic", TopicName(P, "public", "default", "my-topic")),
        ("a.b=c_d-e", TopicName(P, "public", "default", "a.b=c_d-e")),
        ("Tenant-1/Name.Space/Topic_2", TopicName(P, "Tenant-1", "Name.Space", "Topic_2")),
        ("x-partition-0", TopicName(P, "public", "default", "x-partition-0")),
        ("t/ns/x-partition-17", TopicName(P, "t", "ns", "x-partition-17")),
        ("x-partition-", TopicName(P, "public", "default", "x-partition-")),
        ("x-partition-abc", TopicName(P, "public", "default", "x-partition-abc")),
        ("x-partition-1a", TopicName(P, "public", "default", "x-partition-1a")),
        ("a..b", TopicName(P, "public", "default", "a..b")),
        ("x.", TopicName(P, "public", "default", "x.")),
        ("-x", TopicName(P, "public", "default", "-x")),
        ("=", TopicName(P, "public", "default", "=")),
        ("0", TopicName(P, "public", "default", "0")),
        ("t" * 255, TopicName(P, "public", "default", "t" * 255)),
        (f"{'a' * 255}/{'b' * 255}/{'c' * 255}", TopicName(P, "a" * 255, "b" * 255, "c" * 255)),
    ],
)
def test_parse_accepts(text: str, expected: TopicName) -> None:
    parsed = TopicName.parse(text)
    assert parsed == expected
    assert TopicName.parse(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("pulsar://t/ns/x", "unknown domain 'pulsar'"),
        ("http://t/ns/x", "unknown domain 'http'"),
        ("Persistent://t/ns/x", "unknown domain"),
        ("://t/ns/x", "unknown domain ''"),
        ("persistent://t/cluster/ns/x", "4-part form"),
        ("persistent://t/ns", "2 parts"),
        ("persistent://x", "1 part "),
        ("persistent://t/ns/a/b/c", "5 parts"),
        ("a/b", "two-part"),
        ("a/b/c/d", "may not contain '/'"),
        ("t/ns/", "empty part"),
        ("/x", "empty part"),
        ("t//x", "empty part"),
        ("persistent:///ns/x", "empty part"),
        ("..", "relative path"),
        (".", "relative path"),
        ("../x", "relative path"),
        ("t/../x", "relative path"),
        ("persistent://t/./x", "relative path"),
        ("t/ns/..", "relative path"),
        ("_delta_log", "reserved"),
        ("t/_ns/x", "reserved"),
        ("_t/ns/x", "reserved"),
        (".hidden", "reserved"),
        ("t/ns/.x", "reserved"),
        ("a\\b", "backslash"),
        ("..\\x", "backslash"),
        ("x\x00y", "control character"),
        ("x\ny", "control character"),
        ("x\ty", "control character"),
        ("x\x7fy", "control character"),
        (" x", "whitespace"),
        ("x ", "whitespace"),
        ("\tx", "whitespace"),
        ("my topic", "not allowed: ' '"),
        ("a:b", "':' is not allowed"),
        ("t/ns/a:b", "':' is not allowed"),
        ("persistent://t/ns/a:b", "contains ':'"),
        ("persistent://t:1/ns/x", "contains ':'"),
        ("persistent:/t/ns/x", "':' is not allowed"),
        ("café", "non-ASCII"),
        ("t/nämespace/x", "non-ASCII"),
        ("x\u200by", "non-ASCII"),
        ("a*b", "not allowed: '*'"),
        ("a?b", "not allowed: '?'"),
        ("a%2fb", "not allowed: '%'"),
        ("t" * 256, "256 bytes"),
        (f"{'a' * 256}/ns/x", "256 bytes"),
        ("x-partition-01", "leading zeros"),
        ("x-partition-00", "leading zeros"),
        ("-partition-3", "no topic name before"),
        ("x-partition-1-partition-2", "partition of a partition"),
    ],
)
def test_parse_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidTopicName) as info:
        TopicName.parse(text)
    message = str(info.value)
    assert fragment in message
    assert repr(text) in message  # the message names the bad value
    assert info.value.topic == text  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [None, 5, b"x", ["x"], TopicName.parse("x")])
def test_parse_rejects_non_str(value: object) -> None:
    with pytest.raises(InvalidTopicName, match="expected a str"):
        TopicName.parse(value)  # type: ignore[arg-type]


def test_invalid_topic_name_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        TopicName.parse("a/b")


def test_messages_say_the_accepted_form() -> None:
    with pytest.raises(InvalidTopicName, match=re.escape("persistent://tenant/namespace/topic")):
        TopicName.parse("pulsar://t/ns/x")


def test_properties() -> None:
    name = TopicName.parse("non-persistent://acme/orders/events")
    assert str(name) == "non-persistent://acme/orders/events"
    assert name.short_name == "events"
    assert name.namespace_name == "acme/orders"
    assert not name.is_persistent
    assert TopicName.parse("x").is_persistent
    assert name.relative_path() == ("acme", "orders", "non-persistent", "events")
    assert TopicName.parse("my-topic").relative_path() == ("public", "default", "persistent", "my-topic")


def test_partition_suffix_rules() -> None:
    base = TopicName.parse("t/ns/orders")
    assert base.partition_index == -1
    assert not base.is_partition
    assert base.partitioned_topic_name is base

    p3 = base.partition(3)
    assert str(p3) == "persistent://t/ns/orders-partition-3"
    assert p3.partition_index == 3
    assert p3.is_partition
    assert p3.partitioned_topic_name == base
    assert p3.short_name == "orders-partition-3"
    assert TopicName.parse(str(p3)) == p3
    assert base.partition(0).partition_index == 0
    assert base.partition(1234).partition_index == 1234

    for plain in ("x-partition-", "x-partition-a", "x-partition--1", "x-partition-1.5"):
        name = TopicName.parse(plain)
        assert name.partition_index == -1
        assert name.partitioned_topic_name is name


@pytest.mark.parametrize("index", [-1, -100, True, 1.0, "1", None])
def test_partition_refuses_bad_index(index: object) -> None:
    with pytest.raises(InvalidTopicName, match="partition index"):
        TopicName.parse("x").partition(index)  # type: ignore[arg-type]


def test_partition_refuses_partition_of_partition() -> None:
    with pytest.raises(InvalidTopicName, match="already partition 2"):
        TopicName.parse("x-partition-2").partition(0)


def test_partition_refuses_too_long_name() -> None:
    with pytest.raises(InvalidTopicName, match="bytes long"):
        TopicName.parse("x" * 250).partition(0)


def test_direct_construction_is_validated() -> None:
    assert TopicName("persistent", "t", "ns", "x").domain is P  # type: ignore[arg-type]
    with pytest.raises(InvalidTopicName, match="unknown domain"):
        TopicName("pulsar", "t", "ns", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidTopicName, match="relative path"):
        TopicName(P, "..", "ns", "x")
    with pytest.raises(InvalidTopicName, match="not allowed"):
        TopicName(P, "t", "ns", "a/b")
    with pytest.raises(InvalidTopicName, match="empty"):
        TopicName(P, "t", "", "x")
    with pytest.raises(InvalidTopicName, match="must be a str"):
        TopicName(P, "t", "ns", 5)  # type: ignore[arg-type]


def test_topic_name_is_frozen_and_hashable() -> None:
    name = TopicName.parse("x")
    with pytest.raises(AttributeError):
        name.local_name = "y"  # type: ignore[misc]
    assert {name, TopicName.parse("persistent://public/default/x")} == {name}


# --- tenants and namespaces ------------------------------------------------------------------------


def test_validate_tenant() -> None:
    assert validate_tenant("public") == "public"
    for bad in ("", "..", "_t", "a/b", "a:b", "ü", " t", 3):
        with pytest.raises(InvalidTopicName):
            validate_tenant(bad)  # type: ignore[arg-type]


def test_validate_namespace() -> None:
    ns = validate_namespace("acme/orders")
    assert ns == NamespaceName("acme", "orders")
    assert str(ns) == "acme/orders"
    assert ns.relative_path() == ("acme", "orders")
    assert NamespaceName.parse(str(ns)) == ns


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("acme", "1 part"),
        ("a/b/c", "3 parts"),
        ("a/", "empty"),
        ("../x", "relative path"),
        ("a/.b", "reserved"),
        ("a/b:c", "':'"),
        ("persistent://a/b", "looks like a topic"),
        ("a\\b", "backslash"),
        ("", "empty"),
    ],
)
def test_validate_namespace_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidTopicName, match=re.escape(fragment)):
        validate_namespace(text)


# --- properties ------------------------------------------------------------------------------------

_ALLOWED = string.ascii_letters + string.digits + "-_=."
_FIRST = string.ascii_letters + string.digits + "-="


def _part_strategy(max_bytes: int) -> st.SearchStrategy[str]:
    return st.builds(
        lambda first, rest: first + rest,
        st.sampled_from(_FIRST),
        st.text(alphabet=_ALLOWED, max_size=max_bytes - 1),
    )


def _no_suffix(part: str) -> bool:
    return re.search(r"-partition-[0-9]+$", part) is None


_parts = _part_strategy(MAX_PART_BYTES)


@st.composite
def _topic_names(draw: st.DrawFn) -> TopicName:
    index = draw(st.none() | st.integers(min_value=0, max_value=10**6))
    if index is None:
        local = draw(_parts.filter(_no_suffix))
    else:
        base = draw(_part_strategy(MAX_PART_BYTES - 20).filter(_no_suffix))
        local = f"{base}-partition-{index}"
    return TopicName(draw(st.sampled_from(TopicDomain)), draw(_parts), draw(_parts), local)


@given(_topic_names())
def test_valid_names_round_trip(name: TopicName) -> None:
    assert TopicName.parse(str(name)) == name
    assert TopicName.parse(str(name).split("://", 1)[1]).tenant == name.tenant
    if name.is_partition:
        assert name.partitioned_topic_name.partition(name.partition_index) == name


_NASTY = st.text(alphabet="ab/._-=:\\\x00 \té%*", max_size=40)
_PATHISH = st.lists(st.text(alphabet="ab._-=", max_size=5), min_size=1, max_size=4).map("/".join)
_CANDIDATES = st.one_of(
    _NASTY,
    _PATHISH,
    st.builds(lambda p, s: p + s, st.sampled_from(["persistent://", "non-persistent://"]), _PATHISH),
    st.builds(lambda p, s: p + s, st.sampled_from(["persistent://", "non-persistent://", "x://"]), _NASTY),
    st.text(max_size=40),
)


def _is_safe_component(part: str) -> bool:
    return (
        bool(part)
        and "/" not in part
        and "\\" not in part
        and part not in (".", "..")
        and part[0] not in "_."
        and part.isascii()
        and part.isprintable()
        and ":" not in part
        and len(part.encode()) <= MAX_PART_BYTES
    )


@given(_CANDIDATES)
def test_anything_accepted_maps_to_safe_path_components(text: str) -> None:
    try:
        name = TopicName.parse(text)
    except InvalidTopicName:
        return
    assert all(_is_safe_component(part) for part in name.relative_path())
    assert len(name.relative_path()) == 4
    assert TopicName.parse(str(name)) == name
