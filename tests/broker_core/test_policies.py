"""Policies: levels, precedence, validation, and changes picked up without a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import BrokerConfig, Client, InvalidConfiguration, MessageTooBig, NamespaceNotFound
from broker_core.broker.admin import Admin
from broker_core.naming import TopicName
from broker_core.topic.policies import POLICY_KEYS, EffectivePolicies, Policies, PolicyStore


def _store(root: Path, **config: object) -> PolicyStore:
    admin = Admin.open(str(root), broker_config=BrokerConfig(**config))  # type: ignore[arg-type]
    return PolicyStore(admin.io, admin.config, cache_ms=0)


def test_broker_defaults_apply_when_nothing_is_set(tmp_path: Path) -> None:
    store = _store(tmp_path, default_retention_time_in_minutes=7, ttl_duration_default_in_seconds=30)
    eff = store.effective(TopicName.parse("t"))
    assert eff.retention_time_in_minutes == 7
    assert eff.message_ttl_in_seconds == 30
    assert eff.backlog_quota_policy == "producer_request_hold"
    assert eff.max_message_size == 5 * 1024 * 1024


def test_topic_beats_namespace_beats_broker(tmp_path: Path) -> None:
    store = _store(tmp_path, default_retention_time_in_minutes=7)
    store.set_namespace_policies("public/default", {"retentionTimeInMinutes": 60, "messageTTLInSeconds": 10})
    store.set_topic_policies("a", {"retentionTimeInMinutes": 5})
    a, b = store.effective(TopicName.parse("a")), store.effective(TopicName.parse("b"))
    assert (a.retention_time_in_minutes, a.message_ttl_in_seconds) == (5, 10)
    assert (b.retention_time_in_minutes, b.message_ttl_in_seconds) == (60, 10)
    # a partition inherits its partitioned topic's policies
    assert store.effective(TopicName.parse("a-partition-3")).retention_time_in_minutes == 5
    # removing the topic value falls back to the namespace
    store.set_topic_policies("a", {}, remove=["retentionTimeInMinutes"])
    assert store.effective(TopicName.parse("a")).retention_time_in_minutes == 60


def test_policies_are_shared_through_storage(tmp_path: Path) -> None:
    _store(tmp_path).set_namespace_policies("public/default", {"deduplicationEnabled": True})
    other = PolicyStore(Admin.open(str(tmp_path)).io, BrokerConfig(), cache_ms=0)
    assert other.namespace_policies("public/default").deduplication_enabled is True


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"retentionTimeInMinute": 5}, "retentionTimeInMinute"),
        ({"retentionSizeInMB": -5}, "retentionSizeInMB"),
        ({"messageTTLInSeconds": -1}, "messageTTLInSeconds"),
        ({"backlogQuotaPolicy": "drop_everything"}, "backlogQuotaPolicy"),
        ({"maxMessageSize": 0}, "maxMessageSize"),
    ],
)
def test_bad_policy_values_are_refused_and_nothing_changes(tmp_path: Path, changes: dict, needle: str) -> None:
    store = _store(tmp_path)
    store.set_namespace_policies("public/default", {"messageTTLInSeconds": 3})
    with pytest.raises(InvalidConfiguration, match=needle):
        store.set_namespace_policies("public/default", changes)
    assert store.namespace_policies("public/default") == Policies(messageTTLInSeconds=3)


def test_unknown_namespace_and_unknown_removal_are_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(NamespaceNotFound):
        store.set_namespace_policies("nobody/here", {"messageTTLInSeconds": 3})
    with pytest.raises(InvalidConfiguration, match="unknown policy"):
        store.set_topic_policies("t", {}, remove=["noSuchPolicy"])
    assert "retentionTimeInMinutes" in POLICY_KEYS


def test_resolution_order_is_most_specific_wins() -> None:
    config = BrokerConfig(broker_deduplication_enabled=False)
    eff = EffectivePolicies.resolve(
        config, Policies(deduplicationEnabled=True, maxMessageSize=10), Policies(maxMessageSize=20)
    )
    assert eff.deduplication_enabled is True
    assert eff.max_message_size == 20


def test_a_running_producer_follows_a_policy_change_without_restart(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    try:
        producer = client.create_producer("t", producer_name="p")
        producer.send(b"x" * 100)
        client._broker.policies.set_topic_policies("t", {"maxMessageSize": 50})
        producer._policy_expires = 0.0  # the producer re-reads policies at most once a second
        with pytest.raises(MessageTooBig, match="maxMessageSize=50"):
            producer.send(b"x" * 100)
        client._broker.policies.set_topic_policies("t", {"deduplicationEnabled": True})
        producer._policy_expires = 0.0
        producer.send(b"a", sequence_id=10)
        duplicate = producer.send(b"a", sequence_id=10)
        assert duplicate.entry_id() == -1  # dropped as a duplicate once the policy turned dedup on
    finally:
        client.close()


def test_a_stale_cache_is_re_read_by_one_caller_while_the_others_get_the_old_policies(tmp_path: Path) -> None:
    """On an object store a re-read is several round trips: callers arriving while one runs (a
    producer's upload workers) get the stale policies instead of each paying for a re-read."""
    import threading

    admin = Admin.open(str(tmp_path))
    store = PolicyStore(admin.io, admin.config, cache_ms=0)
    topic = TopicName.parse("t")
    first = store.effective(topic)
    entered, release = threading.Event(), threading.Event()
    original = store.topic_policies

    def slow_topic_policies(name: TopicName) -> Policies | None:
        entered.set()
        assert release.wait(timeout=30)
        return original(name)

    store.topic_policies = slow_topic_policies  # type: ignore[method-assign]
    reader = threading.Thread(target=store.effective, args=(topic,))
    reader.start()
    assert entered.wait(timeout=30)
    assert store.effective(topic) is first  # answered from the stale cache at once, no second re-read
    release.set()
    reader.join(timeout=30)
    store.topic_policies = original  # type: ignore[method-assign]
    assert store.effective(topic) == first
