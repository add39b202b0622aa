"""Broker settings: a frozen pydantic model with Pulsar's setting names, and its TOML loader.

Settings that exist in Pulsar's ``broker.conf`` keep their Pulsar names (camelCase) as aliases, so a
value copied from a Pulsar deployment means the same thing here; Python code reads the snake_case
field names.  Settings that only make sense for a broker-less, log-on-storage design (checkpoints,
producer leases, commit retries, fsync) are ours and are named in the same style.

Precedence (lowest first): built-in defaults < the TOML file < keyword overrides.  ``conf/broker.toml``
at the repository root spells out the built-in defaults; a test keeps the two identical.  Namespace and
topic policies, which sit between the file and explicit arguments, are applied by their own modules.

Every failure is an ``InvalidConfiguration`` whose message names the setting by its Pulsar name, the
bad value, the expected type or range, and where the value came from.
"""

from __future__ import annotations

import difflib
import os
import tomllib
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from broker_core.errors import InvalidConfiguration

_MIB = 1024 * 1024


class BrokerConfig(BaseModel):
    """Broker-wide settings.

    Field names are snake_case; each field's Pulsar (camelCase) name is its alias, and both are
    accepted on input.  The alias is given as ``validation_alias`` plus ``serialization_alias``
    rather than ``alias`` so that type checkers see the Python names as the constructor's keywords
    (``BrokerConfig(max_message_size=...)``); ``model_dump(by_alias=True)`` gives Pulsar names.

    Values are validated strictly: ``"5"`` is not an int and ``1`` is not a boolean, because a
    config file that says the wrong thing should fail rather than be guessed at.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, strict=True)

    # --- Pulsar settings --------------------------------------------------------------------------

    max_message_size: int = Field(
        default=5 * _MIB,
        validation_alias="maxMessageSize",
        serialization_alias="maxMessageSize",
        gt=0,
        description="Largest message payload in bytes that a producer may send without chunking.",
    )
    broker_deduplication_enabled: bool = Field(
        default=False,
        validation_alias="brokerDeduplicationEnabled",
        serialization_alias="brokerDeduplicationEnabled",
        description="Drop resent messages whose producer sequence id was already committed.",
    )
    allow_auto_topic_creation: bool = Field(
        default=True,
        validation_alias="allowAutoTopicCreation",
        serialization_alias="allowAutoTopicCreation",
        description="Create a topic the first time a producer or consumer names it.",
    )
    allow_auto_topic_creation_type: Literal["non-partitioned", "partitioned"] = Field(
        default="non-partitioned",
        validation_alias="allowAutoTopicCreationType",
        serialization_alias="allowAutoTopicCreationType",
        description="The kind of topic auto-creation makes.",
    )
    default_num_partitions: int = Field(
        default=1,
        validation_alias="defaultNumPartitions",
        serialization_alias="defaultNumPartitions",
        ge=1,
        description="Partitions of an auto-created partitioned topic.",
    )
    max_num_partitions_per_partitioned_topic: int = Field(
        default=1024,
        validation_alias="maxNumPartitionsPerPartitionedTopic",
        serialization_alias="maxNumPartitionsPerPartitionedTopic",
        ge=0,
        description="Upper bound on a partitioned topic's partitions; 0 means no bound. Finite by default "
        "(Pulsar: unbounded): every partition is a directory that stats, retention and deletion visit.",
    )
    broker_deduplication_max_number_of_producers: int = Field(
        default=10_000,
        validation_alias="brokerDeduplicationMaxNumberOfProducers",
        serialization_alias="brokerDeduplicationMaxNumberOfProducers",
        gt=0,
        description="How many producers' last sequence ids deduplication remembers per topic.",
    )

    delayed_delivery_enabled: bool = Field(
        default=True,
        validation_alias="delayedDeliveryEnabled",
        serialization_alias="delayedDeliveryEnabled",
        description="Honour deliver-at times on Shared and Key_Shared subscriptions.",
    )
    delayed_delivery_tick_time_millis: int = Field(
        default=1000,
        validation_alias="delayedDeliveryTickTimeMillis",
        serialization_alias="delayedDeliveryTickTimeMillis",
        gt=0,
        description="How often consumers look for delayed messages that became due (ms).",
    )
    is_delayed_delivery_deliver_at_time_strict: bool = Field(
        default=False,
        validation_alias="isDelayedDeliveryDeliverAtTimeStrict",
        serialization_alias="isDelayedDeliveryDeliverAtTimeStrict",
        description="Deliver only once deliverAt <= now; off (Pulsar's default): once deliverAt <= now + tick.",
    )
    subscription_key_shared_use_consistent_hashing: bool = Field(
        default=True,
        validation_alias="subscriptionKeySharedUseConsistentHashing",
        serialization_alias="subscriptionKeySharedUseConsistentHashing",
        description="AUTO_SPLIT Key_Shared uses consistent hashing instead of hash ranges (Pulsar 4.x: on).",
    )
    subscription_key_shared_consistent_hashing_replica_points: int = Field(
        default=100,
        validation_alias="subscriptionKeySharedConsistentHashingReplicaPoints",
        serialization_alias="subscriptionKeySharedConsistentHashingReplicaPoints",
        gt=0,
        description="Points per consumer on the consistent-hashing ring.",
    )
    allow_auto_subscription_creation: bool = Field(
        default=True,
        validation_alias="allowAutoSubscriptionCreation",
        serialization_alias="allowAutoSubscriptionCreation",
        description="Create a durable subscription when a consumer first subscribes with its name.",
    )

    default_retention_time_in_minutes: int = Field(
        default=0,
        validation_alias="defaultRetentionTimeInMinutes",
        serialization_alias="defaultRetentionTimeInMinutes",
        ge=-1,
        description="Minutes acknowledged messages are kept (0: not kept, -1: forever).",
    )
    default_retention_size_in_mb: int = Field(
        default=0,
        validation_alias="defaultRetentionSizeInMB",
        serialization_alias="defaultRetentionSizeInMB",
        ge=-1,
        description="Megabytes of acknowledged messages kept per topic (0: none, -1: no limit).",
    )
    ttl_duration_default_in_seconds: int = Field(
        default=0,
        validation_alias="ttlDurationDefaultInSeconds",
        serialization_alias="ttlDurationDefaultInSeconds",
        ge=0,
        description="Seconds after which unacknowledged messages expire (0: never).",
    )
    backlog_quota_default_limit_bytes: int = Field(
        default=-1,
        validation_alias="backlogQuotaDefaultLimitBytes",
        serialization_alias="backlogQuotaDefaultLimitBytes",
        ge=-1,
        description="Backlog size limit per topic in bytes (-1: no limit).",
    )
    backlog_quota_default_limit_second: int = Field(
        default=-1,
        validation_alias="backlogQuotaDefaultLimitSecond",
        serialization_alias="backlogQuotaDefaultLimitSecond",
        ge=-1,
        description="Backlog age limit per topic in seconds (-1: no limit).",
    )
    precise_time_based_backlog_quota_check: bool = Field(
        default=False,
        validation_alias="preciseTimeBasedBacklogQuotaCheck",
        serialization_alias="preciseTimeBasedBacklogQuotaCheck",
        description="Time-quota eviction expires messages older than 90% of the limit instead of whole "
        "segments older than the limit.",
    )
    backlog_quota_default_retention_policy: Literal[
        "producer_request_hold", "producer_exception", "consumer_backlog_eviction"
    ] = Field(
        default="producer_request_hold",
        validation_alias="backlogQuotaDefaultRetentionPolicy",
        serialization_alias="backlogQuotaDefaultRetentionPolicy",
        description="What happens when a backlog quota is exceeded.",
    )
    schema_compatibility_strategy: Literal[
        "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
        "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
    ] = Field(
        default="FULL",
        validation_alias="schemaCompatibilityStrategy",
        serialization_alias="schemaCompatibilityStrategy",
        description="How a new schema version must relate to a topic's registered ones (docs/CLIENT.md).",
    )
    is_allow_auto_update_schema_enabled: bool = Field(
        default=True,
        validation_alias="isAllowAutoUpdateSchemaEnabled",
        serialization_alias="isAllowAutoUpdateSchemaEnabled",
        description="Producers may register a new (compatible) schema version themselves.",
    )
    is_schema_validation_enforced: bool = Field(
        default=False,
        validation_alias="isSchemaValidationEnforced",
        serialization_alias="isSchemaValidationEnforced",
        description="Refuse producers and consumers without a schema on a topic that has one.",
    )

    # --- spark-pubsub storage settings (not in Pulsar) --------------------------------------------

    checkpoint_interval: int = Field(
        default=100,
        validation_alias="checkpointInterval",
        serialization_alias="checkpointInterval",
        gt=0,
        description="Commits between log checkpoints (like Delta's delta.checkpointInterval).",
    )
    producer_lease_ms: int = Field(
        default=30_000,
        validation_alias="producerLeaseMs",
        serialization_alias="producerLeaseMs",
        gt=0,
        description="Milliseconds a producer registration stays valid without being renewed.",
    )
    commit_max_retries: int = Field(
        default=1000,
        validation_alias="commitMaxRetries",
        serialization_alias="commitMaxRetries",
        gt=0,
        description="How many lost put-if-absent races a commit retries before giving up.",
    )
    consumer_lease_ms: int = Field(
        default=30_000,
        validation_alias="consumerLeaseMs",
        serialization_alias="consumerLeaseMs",
        gt=0,
        description="Milliseconds a consumer stays registered without renewing; then its messages are redelivered.",
    )
    subscription_key_shared_auto_split_range_size: int = Field(
        default=65536,
        validation_alias="subscriptionKeySharedAutoSplitRangeSize",
        serialization_alias="subscriptionKeySharedAutoSplitRangeSize",
        ge=2,
        description="Slots of AUTO_SPLIT hash ranges (consistent hashing off); a power of two >= 2.",
    )
    clock_skew_tolerance_ms: int = Field(
        default=0,
        validation_alias="clockSkewToleranceMs",
        serialization_alias="clockSkewToleranceMs",
        ge=0,
        description="Clock skew between hosts that leases tolerate: added to every producer and consumer lease "
        "written, so a host whose clock runs this far ahead still sees a live holder as live (roots shared "
        "across machines, e.g. on an object store).",
    )
    new_entries_check_max_delay_millis: int = Field(
        default=1000,
        validation_alias="newEntriesCheckMaxDelayMillis",
        serialization_alias="newEntriesCheckMaxDelayMillis",
        gt=0,
        description=(
            "Longest wait (ms) between two polls of an idle consumer or reader for new commits: polling "
            "backs off from the client's poll interval up to this, so it bounds the first message's "
            "delay after a long idle (on storage that cannot notify)."
        ),
    )
    file_system_notifications_enabled: bool = Field(
        default=True,
        validation_alias="fileSystemNotificationsEnabled",
        serialization_alias="fileSystemNotificationsEnabled",
        description="On local roots, wake consumers and readers on new commits through inotify (Linux).",
    )
    fsync_enabled: bool = Field(
        default=True,
        validation_alias="fsyncEnabled",
        serialization_alias="fsyncEnabled",
        description="fsync segment and log files before a commit becomes visible.",
    )

    @property
    def delayed_delivery_lookahead_ms(self) -> int:
        """How early a delayed message may go out: Pulsar's non-strict mode delivers once
        ``deliverAt <= now + tick``; strict mode (``isDelayedDeliveryDeliverAtTimeStrict``) never early."""
        return 0 if self.is_delayed_delivery_deliver_at_time_strict else self.delayed_delivery_tick_time_millis

    @field_validator("subscription_key_shared_auto_split_range_size")
    @classmethod
    def _range_size_power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"must be a power of two (65536, 1024, 64, ...), got {value}")
        return value

    @model_validator(mode="after")
    def _default_partitions_within_limit(self) -> BrokerConfig:
        limit = self.max_num_partitions_per_partitioned_topic
        if limit and self.default_num_partitions > limit:
            raise ValueError(
                f"defaultNumPartitions = {self.default_num_partitions} exceeds "
                f"maxNumPartitionsPerPartitionedTopic = {limit}; lower the first or raise the second"
            )
        return self

    @property
    def consumer_lease_written_ms(self) -> int:
        """The consumer lease a holder writes: ``consumerLeaseMs`` plus the clock-skew tolerance."""
        return self.consumer_lease_ms + self.clock_skew_tolerance_ms

    @property
    def producer_lease_written_ms(self) -> int:
        """The producer lease a holder writes: ``producerLeaseMs`` plus the clock-skew tolerance."""
        return self.producer_lease_ms + self.clock_skew_tolerance_ms


# --- error translation -----------------------------------------------------------------------------


def _expected(field: FieldInfo) -> str:
    """Describe what a field accepts, e.g. ``an int > 0`` or ``one of 'a', 'b'``."""
    annotation = field.annotation
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(choice) for choice in typing.get_args(annotation))
    type_name = getattr(annotation, "__name__", str(annotation))
    text = {"bool": "a boolean (true or false)", "int": "an int", "str": "a string"}.get(
        type_name, f"a {type_name}"
    )
    bounds = [
        f"{op} {bound}"
        for constraint in field.metadata
        for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
        if (bound := getattr(constraint, attr, None)) is not None
    ]
    return " ".join([text, " and ".join(bounds)]) if bounds else text


def _field_index(model: type[BaseModel] | None) -> dict[str, tuple[str, FieldInfo]]:
    """Map both python names and aliases to (user-facing name, field)."""
    index: dict[str, tuple[str, FieldInfo]] = {}
    for name, field in (model.model_fields if model is not None else {}).items():
        validation_alias = field.validation_alias if isinstance(field.validation_alias, str) else None
        public = field.alias or validation_alias or name
        index[name] = (public, field)
        index[public] = (public, field)
    return index


def validation_error_message(
    exc: ValidationError, *, source: str, model: type[BaseModel] | None = None
) -> str:
    """Render a pydantic ``ValidationError`` as one message for ``InvalidConfiguration``.

    Pydantic's own text names Python locations and model internals; users think in setting names and
    files.  This names each bad setting by its user-facing name (the alias), shows the bad value and
    what was expected, and says where the value came from.

    Args:
        exc: the error from validating a settings model.
        source: where the values came from (a file path, "keyword overrides", ...).
        model: the model that was validated; when given, messages use its aliases, state each
            field's type and range, and suggest the nearest name for an unknown setting.

    Returns:
        ``"Invalid configuration in <source>: <problem>[; <problem>...]"``.
    """
    fields = _field_index(model)
    known_names = sorted(fields)  # python names and aliases, so a typo of either finds its match
    problems: list[str] = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        public, field = fields.get(str(error["loc"][0]), (loc, None)) if error["loc"] else (loc, None)
        key = public if len(error["loc"]) <= 1 else loc
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            problem = f"unknown setting {key!r} (value {error['input']!r})"
            close = difflib.get_close_matches(key, known_names, n=1)
            if close:
                problem += f"; did you mean {close[0]!r}?"
        elif error["type"] == "missing":
            problem = f"setting {key!r} is required"
        elif not error["loc"]:
            problem = message
        else:
            problem = f"{key} = {error['input']!r} is invalid: {message[:1].lower()}{message[1:]}"
            if field is not None and len(error["loc"]) == 1:
                problem += f" (expected {_expected(field)})"
        problems.append(problem)
    return f"Invalid configuration in {source}: " + "; ".join(problems)


# --- loading ---------------------------------------------------------------------------------------


def _read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    location = os.fspath(path)
    try:
        with open(location, "rb") as handle:
            values = tomllib.load(handle)
    except FileNotFoundError:
        raise InvalidConfiguration(
            f"Configuration file not found: {location!r}; pass an existing TOML file or path=None "
            "for the built-in defaults",
            path=location,
        ) from None
    except OSError as exc:
        raise InvalidConfiguration(
            f"Cannot read configuration file {location!r}: {exc}", path=location
        ) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidConfiguration(
            f"Configuration file {location!r} is not valid TOML: {exc}", path=location
        ) from exc
    tables = sorted(key for key, value in values.items() if isinstance(value, dict))
    if tables:
        raise InvalidConfiguration(
            f"Invalid configuration in {location}: TOML tables are not supported ({', '.join(tables)}); "
            "write each setting as a flat top-level key, e.g. maxMessageSize = 5242880",
            path=location,
        )
    return values


def _normalise_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Key overrides by alias so they merge with file values (which use aliases)."""
    index = _field_index(BrokerConfig)
    normalised: dict[str, Any] = {}
    for key, value in overrides.items():
        public = index[key][0] if key in index else key
        if public in normalised:
            raise InvalidConfiguration(
                f"Invalid configuration in keyword overrides: {public!r} is given twice (by its "
                "Python name and its Pulsar name); pass it once",
                key=public,
            )
        normalised[public] = value
    return normalised


def load_broker_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> BrokerConfig:
    """Load broker settings: built-in defaults < the TOML file at ``path`` < ``overrides``.

    Args:
        path: a flat TOML file of Pulsar-named settings (like ``conf/broker.toml``); ``None`` means
            the built-in defaults only.
        **overrides: settings by Python name (``max_message_size``) or Pulsar name (``maxMessageSize``).

    Returns:
        The validated, frozen settings.

    Raises:
        InvalidConfiguration: the file is missing or malformed, or a setting is unknown or invalid.
    """
    file_values: dict[str, Any] = {}
    location: str | None = None
    config = BrokerConfig()
    if path is not None:
        location = os.fspath(path)
        file_values = _read_toml(location)
        config = _validate(file_values, source=location, path=location)
    if not overrides:
        return config
    # The file was valid on its own, so any error from here on is caused by the overrides.
    merged = {**file_values, **_normalise_overrides(overrides)}
    where = "keyword overrides" + (f" (on top of {location})" if location is not None else "")
    return _validate(merged, source=where, path=location)


def _validate(values: Mapping[str, Any], *, source: str, path: str | None) -> BrokerConfig:
    try:
        return BrokerConfig.model_validate(values)
    except ValidationError as exc:
        keys = [str(error["loc"][0]) for error in exc.errors() if error["loc"]]
        message = validation_error_message(exc, source=source, model=BrokerConfig)
        raise InvalidConfiguration(message, path=path, keys=keys) from exc


__all__ = [
    "BrokerConfig",
    "load_broker_config",
    "validation_error_message",
]
