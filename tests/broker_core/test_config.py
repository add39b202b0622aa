from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from broker_core.config import BrokerConfig, load_broker_config, validation_error_message
from broker_core.errors import InvalidConfiguration

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_TOML = REPO_ROOT / "conf" / "broker.toml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    config = BrokerConfig()
    assert config.max_message_size == 5 * 1024 * 1024
    assert config.broker_deduplication_enabled is False
    assert config.allow_auto_topic_creation is True
    assert config.allow_auto_topic_creation_type == "non-partitioned"
    assert config.default_num_partitions == 1
    assert config.max_num_partitions_per_partitioned_topic == 1024
    assert config.broker_deduplication_max_number_of_producers == 10_000
    assert config.checkpoint_interval == 100
    assert config.producer_lease_ms == 30_000
    assert config.commit_max_retries == 1000
    assert config.fsync_enabled is True
    assert load_broker_config() == config


def test_pulsar_names_are_the_aliases() -> None:
    dumped = BrokerConfig().model_dump(by_alias=True)
    assert dumped["maxMessageSize"] == 5242880
    assert dumped["brokerDeduplicationMaxNumberOfProducers"] == 10000
    assert BrokerConfig.model_validate({"maxMessageSize": 10}) == BrokerConfig(max_message_size=10)
    assert BrokerConfig.model_validate({"max_message_size": 10}).max_message_size == 10


def test_shipped_toml_is_a_truthful_copy_of_the_defaults() -> None:
    assert load_broker_config(SHIPPED_TOML) == BrokerConfig()
    # Every setting is spelled out, by its Pulsar name.
    with SHIPPED_TOML.open("rb") as handle:
        keys = set(tomllib.load(handle))
    assert keys == set(BrokerConfig().model_dump(by_alias=True))


def test_file_values_override_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path, "maxMessageSize = 1024\nallowAutoTopicCreationType = 'partitioned'\n")
    config = load_broker_config(path)
    assert config.max_message_size == 1024
    assert config.allow_auto_topic_creation_type == "partitioned"
    assert config.checkpoint_interval == 100  # untouched keys keep their defaults
    assert load_broker_config(str(path)) == config


def test_overrides_beat_the_file_by_either_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "maxMessageSize = 1024\ndefaultNumPartitions = 4\n")
    config = load_broker_config(path, max_message_size=2048, fsyncEnabled=False)
    assert config.max_message_size == 2048
    assert config.fsync_enabled is False
    assert config.default_num_partitions == 4
    assert load_broker_config(maxMessageSize=7).max_message_size == 7


def test_override_given_twice_is_refused() -> None:
    with pytest.raises(InvalidConfiguration, match="given twice"):
        load_broker_config(max_message_size=1, maxMessageSize=2)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "maxMesageSize = 1024\n")
    with pytest.raises(InvalidConfiguration) as info:
        load_broker_config(path)
    message = str(info.value)
    assert "unknown setting 'maxMesageSize'" in message
    assert "did you mean 'maxMessageSize'" in message
    assert str(path) in message
    assert info.value.path == str(path)  # type: ignore[attr-defined]


def test_unknown_override() -> None:
    with pytest.raises(InvalidConfiguration) as info:
        load_broker_config(max_mesage_size=1)
    message = str(info.value)
    assert message.startswith("Invalid configuration in keyword overrides: ")
    assert "unknown setting 'max_mesage_size'" in message
    assert "did you mean 'max_message_size'" in message


def test_wrong_type(tmp_path: Path) -> None:
    path = _write(tmp_path, 'maxMessageSize = "five"\n')
    with pytest.raises(InvalidConfiguration) as info:
        load_broker_config(path)
    message = str(info.value)
    assert "maxMessageSize = 'five'" in message
    assert "an int > 0" in message
    assert str(path) in message


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ("maxMessageSize = -1", "maxMessageSize = -1 is invalid: input should be greater than 0"),
        ("maxMessageSize = 0", "(expected an int > 0)"),
        ("defaultNumPartitions = 0", "defaultNumPartitions = 0"),
        ("maxNumPartitionsPerPartitionedTopic = -3", "(expected an int >= 0)"),
        ("maxMessageSize = 1.5", "maxMessageSize = 1.5"),
        ('maxMessageSize = "5242880"', "an int > 0"),
        ("fsyncEnabled = 1", "expected a boolean"),
        ('fsyncEnabled = "yes"', "fsyncEnabled = 'yes'"),
        ("producerLeaseMs = -30000", "producerLeaseMs"),
        ("commitMaxRetries = 0", "commitMaxRetries"),
        ("checkpointInterval = 0", "checkpointInterval"),
        ("removedSegmentGracePeriodInSeconds = 0", "removedSegmentGracePeriodInSeconds = 0"),
        ("removedSegmentGracePeriodInSeconds = -600", "(expected an int >= 60)"),
        ("removedSegmentGracePeriodInSeconds = 59", "removedSegmentGracePeriodInSeconds = 59"),
        ('removedSegmentGracePeriodInSeconds = "10m"', "removedSegmentGracePeriodInSeconds = '10m'"),
        ("logHistoryRetentionInSeconds = 0", "logHistoryRetentionInSeconds = 0"),
        ("logHistoryRetentionInSeconds = 600.5", "logHistoryRetentionInSeconds = 600.5"),
    ],
)
def test_bad_values(tmp_path: Path, toml: str, fragment: str) -> None:
    path = _write(tmp_path, toml + "\n")
    with pytest.raises(InvalidConfiguration) as info:
        load_broker_config(path)
    assert fragment in str(info.value)


def test_bad_enum_value(tmp_path: Path) -> None:
    path = _write(tmp_path, 'allowAutoTopicCreationType = "sharded"\n')
    with pytest.raises(InvalidConfiguration) as info:
        load_broker_config(path)
    message = str(info.value)
    assert "allowAutoTopicCreationType = 'sharded'" in message
    assert "one of 'non-partitioned', 'partitioned'" in message


def test_bad_override_value_names_its_source(tmp_path: Path) -> None:
    path = _write(tmp_path, "maxMessageSize = 1024\n")
    with pytest.raises(InvalidConfiguration) as info:
        load_broker_config(path, default_num_partitions=-2)
    message = str(info.value)
    assert "keyword overrides" in message
    assert "defaultNumPartitions = -2" in message  # named by the Pulsar name, not the Python one


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, "maxMessageSize = -1\nbogus = 1\n")
    with pytest.raises(InvalidConfiguration) as info:
        load_broker_config(path)
    assert "maxMessageSize" in str(info.value)
    assert "bogus" in str(info.value)
    assert set(info.value.keys) == {"maxMessageSize", "bogus"}  # type: ignore[attr-defined]


def test_default_partitions_must_fit_the_limit() -> None:
    with pytest.raises(InvalidConfiguration, match="defaultNumPartitions = 8 exceeds"):
        load_broker_config(default_num_partitions=8, max_num_partitions_per_partitioned_topic=4)
    assert load_broker_config(default_num_partitions=8).default_num_partitions == 8  # 0 = unlimited


def test_frozen() -> None:
    config = BrokerConfig()
    with pytest.raises(ValidationError):
        config.max_message_size = 1
    assert hash(config) == hash(BrokerConfig())


def test_direct_construction_forbids_extras() -> None:
    with pytest.raises(ValidationError):
        BrokerConfig.model_validate({"maxMesageSize": 1})


def test_malformed_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, "maxMessageSize = = 3\n")
    with pytest.raises(InvalidConfiguration, match="not valid TOML") as info:
        load_broker_config(path)
    assert str(path) in str(info.value)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_bytes(b"maxMessageSize = 1 # \xff\n")
    with pytest.raises(InvalidConfiguration, match="not valid TOML"):
        load_broker_config(path)


def test_tables_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "[broker]\nmaxMessageSize = 1\n")
    with pytest.raises(InvalidConfiguration, match="flat top-level key"):
        load_broker_config(path)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(InvalidConfiguration, match="not found") as info:
        load_broker_config(missing)
    assert str(missing) in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfiguration, match="Cannot read"):
        load_broker_config(tmp_path)


def test_invalid_configuration_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_broker_config(tmp_path / "nope.toml")


class _OtherModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    poll_interval_ms: int = Field(default=100, alias="pollIntervalMs", ge=10, le=60_000)


def test_validation_error_message_is_reusable_for_other_models() -> None:
    with pytest.raises(ValidationError) as info:
        _OtherModel.model_validate({"pollIntervalMs": 5, "pollInterval": 1})
    message = validation_error_message(info.value, source="spark options", model=_OtherModel)
    assert message.startswith("Invalid configuration in spark options: ")
    assert "pollIntervalMs = 5" in message
    assert "(expected an int >= 10 and <= 60000)" in message
    assert "did you mean 'pollIntervalMs'" in message
    # Without the model it still names the key and the value.
    bare = validation_error_message(info.value, source="x")
    assert "pollIntervalMs = 5" in bare


def test_clock_skew_tolerance_is_added_to_the_leases_written() -> None:
    config = load_broker_config(None, clockSkewToleranceMs=2_000, consumerLeaseMs=10_000, producerLeaseMs=6_000)
    assert (config.consumer_lease_written_ms, config.producer_lease_written_ms) == (12_000, 8_000)
    assert BrokerConfig().consumer_lease_written_ms == BrokerConfig().consumer_lease_ms
    with pytest.raises(InvalidConfiguration, match="clockSkewToleranceMs"):
        load_broker_config(None, clockSkewToleranceMs=-1)


def test_a_consumer_lease_survives_an_observer_clock_running_ahead_by_the_tolerance(tmp_path: Path) -> None:
    from broker_core import Client
    from broker_core.broker.broker import Broker
    from broker_core.config import BrokerConfig
    from broker_core.naming import TopicName

    config = BrokerConfig(consumer_lease_ms=1_000, clock_skew_tolerance_ms=5_000, fsync_enabled=False)
    client = Client(str(tmp_path), broker_config=config)
    try:
        client.subscribe("t", "s", consumer_name="c1")
        _, cursor = Broker.for_url(str(tmp_path), config).cursor_store(TopicName.parse("t"), "s").load()
        assert cursor is not None
        written = cursor.consumers["c1"].lease_expires_ms
        # an observer 4 s ahead of the writer (more than the lease, less than lease + tolerance): still live
        assert "c1" in cursor.live_consumers(written - 6_000 + 4_000)
    finally:
        client.close()
