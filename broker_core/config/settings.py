"""Broker settings: a frozen pydantic model with Pulsar's setting names (``loader`` reads TOML).

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

from typing import Literal

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

_MIB = 1024 * 1024


class BrokerConfig(BaseModel):
    """Broker-wide settings.

    Field names are snake_case; each field's Pulsar (camelCase) name is its alias, and both are
    accepted on input.  The model's alias generator derives the Pulsar name from the field name
    (``max_message_size`` -> ``maxMessageSize``); a field whose Pulsar name is spelled otherwise
    (``defaultRetentionSizeInMB``) names it itself.  The generator sets ``validation_alias`` plus
    ``serialization_alias`` rather than ``alias`` so that type checkers see the Python names as the
    constructor's keywords (``BrokerConfig(max_message_size=...)``); ``model_dump(by_alias=True)``
    gives Pulsar names.

    Values are validated strictly: ``"5"`` is not an int and ``1`` is not a boolean, because a
    config file that says the wrong thing should fail rather than be guessed at.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        strict=True,
        alias_generator=AliasGenerator(validation_alias=to_camel, serialization_alias=to_camel),
    )

    # --- Pulsar settings --------------------------------------------------------------------------

    max_message_size: int = Field(
        default=5 * _MIB,
        gt=0,
        description="Largest message payload in bytes that a producer may send without chunking.",
    )
    cluster_name: str = Field(
        default="standalone",
        min_length=1,
        description="The cluster name metrics carry in their ``cluster`` label (``pubsub metrics``).",
    )
    broker_deduplication_enabled: bool = Field(
        default=False,
        description="Drop resent messages whose producer sequence id was already committed.",
    )
    allow_auto_topic_creation: bool = Field(
        default=True,
        description="Create a topic the first time a producer or consumer names it.",
    )
    allow_auto_topic_creation_type: Literal["non-partitioned", "partitioned"] = Field(
        default="non-partitioned",
        description="The kind of topic auto-creation makes.",
    )
    default_num_partitions: int = Field(
        default=1,
        ge=1,
        description="Partitions of an auto-created partitioned topic.",
    )
    max_num_partitions_per_partitioned_topic: int = Field(
        default=1024,
        ge=0,
        description="Upper bound on a partitioned topic's partitions; 0 means no bound. Finite by default "
        "(Pulsar: unbounded): every partition is a directory that stats, retention and deletion visit.",
    )
    broker_deduplication_max_number_of_producers: int = Field(
        default=10_000,
        gt=0,
        description="How many producers' last sequence ids deduplication remembers per topic.",
    )

    delayed_delivery_enabled: bool = Field(
        default=True,
        description="Honour deliver-at times on Shared and Key_Shared subscriptions.",
    )
    delayed_delivery_tick_time_millis: int = Field(
        default=1000,
        gt=0,
        description="How often consumers look for delayed messages that became due (ms).",
    )
    is_delayed_delivery_deliver_at_time_strict: bool = Field(
        default=False,
        description="Deliver only once deliverAt <= now; off (Pulsar's default): once deliverAt <= now + tick.",
    )
    subscription_key_shared_use_consistent_hashing: bool = Field(
        default=True,
        description="AUTO_SPLIT Key_Shared uses consistent hashing instead of hash ranges (Pulsar 4.x: on).",
    )
    subscription_key_shared_consistent_hashing_replica_points: int = Field(
        default=100,
        gt=0,
        description="Points per consumer on the consistent-hashing ring.",
    )
    allow_auto_subscription_creation: bool = Field(
        default=True,
        description="Create a durable subscription when a consumer first subscribes with its name.",
    )

    default_retention_time_in_minutes: int = Field(
        default=0,
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
        ge=0,
        description="Seconds after which unacknowledged messages expire (0: never).",
    )
    backlog_quota_default_limit_bytes: int = Field(
        default=-1,
        ge=-1,
        description="Backlog size limit per topic in bytes (-1: no limit).",
    )
    backlog_quota_default_limit_second: int = Field(
        default=-1,
        ge=-1,
        description="Backlog age limit per topic in seconds (-1: no limit).",
    )
    precise_time_based_backlog_quota_check: bool = Field(
        default=False,
        description="Time-quota eviction expires messages older than 90% of the limit instead of whole "
        "segments older than the limit.",
    )
    backlog_quota_default_retention_policy: Literal[
        "producer_request_hold", "producer_exception", "consumer_backlog_eviction"
    ] = Field(
        default="producer_request_hold",
        description="What happens when a backlog quota is exceeded.",
    )
    schema_compatibility_strategy: Literal[
        "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
        "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
    ] = Field(
        default="FULL",
        description="How a new schema version must relate to a topic's registered ones (docs/CLIENT.md).",
    )
    is_allow_auto_update_schema_enabled: bool = Field(
        default=True,
        description="Producers may register a new (compatible) schema version themselves.",
    )
    is_schema_validation_enforced: bool = Field(
        default=False,
        description="Refuse producers and consumers without a schema on a topic that has one.",
    )

    retention_check_interval_in_seconds: int = Field(
        default=120,
        gt=0,
        description="How often `pubsub maintain` applies retention to a topic.",
    )
    message_expiry_check_interval_in_minutes: int = Field(
        default=5,
        gt=0,
        description="How often `pubsub maintain` expires messages older than the message TTL.",
    )
    backlog_quota_check_interval_in_seconds: int = Field(
        default=60,
        gt=0,
        description="How often `pubsub maintain` enforces backlog quotas.",
    )
    broker_service_compaction_monitor_interval_in_seconds: int = Field(
        default=60,
        gt=0,
        description="How often `pubsub maintain` checks a topic's compaction threshold.",
    )
    broker_service_compaction_threshold_in_bytes: int = Field(
        default=0,
        ge=0,
        description="Compact a topic once this many bytes were written since its last compaction (0: off).",
    )

    # --- spark-pubsub storage settings (not in Pulsar) --------------------------------------------

    removed_segment_grace_period_in_seconds: int = Field(
        default=600,
        ge=60,
        description="How long after a committed remove (merge, retention, TTL, compaction) `pubsub maintain`'s "
        "vacuum deletes the segment file (Pulsar deletes a ledger once nothing needs it; readers holding an "
        "older snapshot re-read the log). Files no commit ever named keep the one-hour floor.",
    )
    log_history_retention_in_seconds: int = Field(
        default=600,
        ge=60,
        description="How much log history (commits, checkpoints) `pubsub maintain`'s cleanup-logs keeps: it "
        "deletes what precedes the newest checkpoint older than this.",
    )

    checkpoint_interval: int = Field(
        default=100,
        gt=0,
        description="Commits between log checkpoints (like Delta's delta.checkpointInterval).",
    )
    producer_lease_ms: int = Field(
        default=30_000,
        gt=0,
        description="Milliseconds a producer registration stays valid without being renewed.",
    )
    commit_max_retries: int = Field(
        default=1000,
        gt=0,
        description="How many lost put-if-absent races a commit retries before giving up.",
    )
    consumer_lease_ms: int = Field(
        default=30_000,
        gt=0,
        description="Milliseconds a consumer stays registered without renewing; then its messages are redelivered.",
    )
    subscription_key_shared_auto_split_range_size: int = Field(
        default=65536,
        ge=2,
        description="Slots of AUTO_SPLIT hash ranges (consistent hashing off); a power of two >= 2.",
    )
    clock_skew_tolerance_ms: int = Field(
        default=0,
        ge=0,
        description="Clock skew between hosts that leases tolerate: added to every producer and consumer lease "
        "written, so a host whose clock runs this far ahead still sees a live holder as live (roots shared "
        "across machines, e.g. on an object store).",
    )
    new_entries_check_max_delay_millis: int = Field(
        default=1000,
        gt=0,
        description=(
            "Longest wait (ms) between two polls of an idle consumer or reader for new commits: polling "
            "backs off from the client's poll interval up to this, so it bounds the first message's "
            "delay after a long idle (on storage that cannot notify)."
        ),
    )
    file_system_notifications_enabled: bool = Field(
        default=True,
        description="On local roots, wake consumers and readers on new commits through inotify (Linux).",
    )
    fsync_enabled: bool = Field(
        default=True,
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
