"""Spark options, validated on the driver into typed models.

Spark lower-cases option keys and passes every value as a string.  Each model field is declared with
its user-facing camelCase name; the lookup key is that name lower-cased.  Unknown options and bad
values fail with ``InvalidConfiguration`` naming the option as the user wrote it in the docs.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from broker_core.errors import InvalidConfiguration

# Options Spark itself adds to a data source's options; accepted and ignored.
_SPARK_KEYS = {"path", "checkpointlocation", "queryname"}
STORAGE_PREFIX = "storage."
STORAGE_FIELD = "storage.*"


class _Options(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)

    service_url: str | None = Field(None, alias="serviceurl", title="serviceUrl")
    path: str | None = Field(None, alias="path", title="path")
    topic: str | None = Field(None, alias="topic", title="topic")
    # ``.option("storage.aws_endpoint", ...)``: passed to the object store (the way Kafka's connector
    # passes ``kafka.*``); repr=False keeps credentials out of reprs and logs
    storage_options: dict[str, str] = Field(default_factory=dict, alias=STORAGE_FIELD, title="storage.*", repr=False)

    @property
    def root(self) -> str:
        root = self.service_url or self.path
        assert root is not None
        return root

    @model_validator(mode="after")
    def _needs_root(self) -> _Options:
        if not (self.service_url or self.path):
            raise ValueError(
                "serviceUrl: the storage root is required: .option('serviceUrl', '/path/to/root') "
                "or .load('/path/to/root')"
            )
        return self


class SourceOptions(_Options):
    """Options of ``spark.readStream.format("pubsub")`` and ``spark.read.format("pubsub")``."""

    topics: str | None = Field(None, alias="topics", title="topics")
    topics_pattern: str | None = Field(None, alias="topicspattern", title="topicsPattern")
    starting_offsets: str | None = Field(None, alias="startingoffsets", title="startingOffsets")
    ending_offsets: str | None = Field(None, alias="endingoffsets", title="endingOffsets")
    starting_timestamp: int | None = Field(None, alias="startingtimestamp", title="startingTimestamp", ge=0)
    ending_timestamp: int | None = Field(None, alias="endingtimestamp", title="endingTimestamp", ge=0)
    max_messages_per_trigger: int | None = Field(
        None, alias="maxmessagespertrigger", title="maxMessagesPerTrigger", gt=0
    )
    max_bytes_per_trigger: int | None = Field(None, alias="maxbytespertrigger", title="maxBytesPerTrigger", gt=0)
    min_messages_per_trigger: int | None = Field(
        None, alias="minmessagespertrigger", title="minMessagesPerTrigger", gt=0
    )
    max_trigger_delay: str = Field("15m", alias="maxtriggerdelay", title="maxTriggerDelay")
    fail_on_data_loss: bool = Field(True, alias="failondataloss", title="failOnDataLoss")
    min_partitions: int | None = Field(None, alias="minpartitions", title="minPartitions", gt=0)
    max_records_per_partition: int | None = Field(
        None, alias="maxrecordsperpartition", title="maxRecordsPerPartition", gt=0
    )
    read_compacted: bool = Field(False, alias="readcompacted", title="readCompacted")
    subscription: str | None = Field(None, alias="subscription", title="subscription")
    subscription_type: Literal["Exclusive", "Failover", "Shared", "Key_Shared"] = Field(
        "Exclusive", alias="subscriptiontype", title="subscriptionType"
    )
    consumer_name: str | None = Field(None, alias="consumername", title="consumerName")
    priority_level: int = Field(0, alias="prioritylevel", title="priorityLevel", ge=0)
    subscription_initial_position: Literal["Earliest", "Latest"] = Field(
        "Latest", alias="subscriptioninitialposition", title="subscriptionInitialPosition"
    )
    key_shared_mode: Literal["AutoSplit", "Sticky"] = Field("AutoSplit", alias="keysharedmode", title="keySharedMode")
    sticky_ranges: str | None = Field(None, alias="stickyranges", title="stickyRanges")
    allow_out_of_order_delivery: bool = Field(False, alias="allowoutoforderdelivery", title="allowOutOfOrderDelivery")
    lease_renew_ms: int | None = Field(None, alias="leaserenewms", title="leaseRenewMs", gt=0)
    retry_enable: bool = Field(False, alias="retryenable", title="retryEnable")
    include_headers: bool = Field(False, alias="includeheaders", title="includeHeaders")
    wait_for_topic: bool = Field(False, alias="waitfortopic", title="waitForTopic")
    value_format: Literal["auto", "typed", "binary"] = Field("auto", alias="valueformat", title="valueFormat")
    # ``ranges``: a stream's micro-batch is one row per internal topic with its offset range, for
    # ``spark_pubsub.read_ranges`` to read natively (spark_pubsub/stream_ranges.py, DECISIONS D92)
    emit: Literal["messages", "ranges"] = Field("messages", alias="emit", title="emit")

    @field_validator("subscription_type", mode="before")
    @classmethod
    def _normalise_type(cls, value: Any) -> Any:
        if isinstance(value, str):
            canonical = {
                "exclusive": "Exclusive",
                "failover": "Failover",
                "shared": "Shared",
                "key_shared": "Key_Shared",
                "keyshared": "Key_Shared",
            }
            return canonical.get(value.lower(), value)
        return value

    @field_validator("subscription_initial_position", "key_shared_mode", mode="before")
    @classmethod
    def _normalise_case(cls, value: Any) -> Any:
        if isinstance(value, str):
            for candidate in ("Earliest", "Latest", "AutoSplit", "Sticky"):
                if value.lower() == candidate.lower():
                    return candidate
        return value

    @model_validator(mode="after")
    def _one_topic_form(self) -> SourceOptions:
        given = [
            n for n, v in (("topic", self.topic), ("topics", self.topics), ("topicsPattern", self.topics_pattern)) if v
        ]
        if len(given) != 1:
            raise ValueError(
                "topic: give exactly one of the options topic, topics (comma-separated) or topicsPattern, "
                f"got {given or 'none'}"
            )
        if self.starting_offsets is not None and self.starting_timestamp is not None:
            raise ValueError("startingTimestamp: give startingOffsets or startingTimestamp, not both")
        if self.sticky_ranges and self.key_shared_mode != "Sticky":
            raise ValueError("stickyRanges: only applies with keySharedMode=Sticky")
        if self.key_shared_mode == "Sticky" and not self.sticky_ranges:
            raise ValueError("stickyRanges: keySharedMode=Sticky needs stickyRanges like '0-32767,40000-50000'")
        # parse the values that are only used later (on a code path that may never run) now, so a
        # malformed one is never silently accepted
        _ = self.sticky_range_list
        _ = self.max_trigger_delay_ms
        if self.emit == "ranges":
            self._check_ranges()
        if self.subscription is None:
            for name, value in (
                ("subscriptionType", self.subscription_type != "Exclusive"),
                ("retryEnable", self.retry_enable),
                ("consumerName", self.consumer_name),
                ("stickyRanges", self.sticky_ranges),
            ):
                if value:
                    raise ValueError(f"{name}: only applies together with the subscription option")
        return self

    def _check_ranges(self) -> None:
        """``emit=ranges`` leaves reading to ``read_ranges``: options that shape the rows of a
        Python task, and claim-mode subscriptions, have no meaning there."""
        if self.subscription is not None and self.subscription_type in ("Shared", "Key_Shared"):
            raise ValueError(
                f"emit: emit=ranges cannot be used with subscriptionType={self.subscription_type}: a "
                "Shared/Key_Shared batch is the messages claimed in the cursor (keys, delays, redelivery "
                "counts), not an offset range; read it with the default emit=messages"
            )
        for name, value in (("includeHeaders", self.include_headers), ("minPartitions", self.min_partitions),
                            ("maxRecordsPerPartition", self.max_records_per_partition),
                            ("valueFormat", self.value_format != "auto")):
            if value:
                raise ValueError(
                    f"{name}: does not apply with emit=ranges (a micro-batch is its offset ranges; "
                    "spark_pubsub.read_ranges reads them, split like any Parquet read"
                    + (", and takes valueFormat itself)" if name == "valueFormat" else ")")
                )

    @property
    def sticky_range_list(self) -> list[tuple[int, int]]:
        if not self.sticky_ranges:
            return []
        out = []
        for part in self.sticky_ranges.split(","):
            try:
                start, end = (int(x) for x in part.strip().split("-"))
            except ValueError:
                raise InvalidConfiguration(
                    f"option stickyRanges: {part!r} is not a range like '0-32767'", option="stickyRanges"
                ) from None
            if not 0 <= start <= end <= 65535:
                raise InvalidConfiguration(
                    f"option stickyRanges: {part!r} must satisfy 0 <= start <= end <= 65535",
                    option="stickyRanges",
                )
            out.append((start, end))
        return out

    @property
    def max_trigger_delay_ms(self) -> int:
        return parse_duration_ms(self.max_trigger_delay, "maxTriggerDelay")


class SinkOptions(_Options):
    """Options of ``df.writeStream.format("pubsub")`` and ``df.write.format("pubsub")``."""

    routing_mode: Literal["RoundRobinPartition", "SinglePartition"] = Field(
        "RoundRobinPartition", alias="routingmode", title="routingMode"
    )
    hashing_scheme: Literal["JavaStringHash", "Murmur3_32Hash"] = Field(
        "JavaStringHash", alias="hashingscheme", title="hashingScheme"
    )
    compression_type: Literal["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"] = Field(
        "NONE", alias="compressiontype", title="compressionType"
    )
    sink_id: str | None = Field(None, alias="sinkid", title="sinkId")
    producer_name: str | None = Field(None, alias="producername", title="producerName")
    checkpoint_location: str | None = Field(None, alias="checkpointlocation", title="checkpointLocation")
    create_root: bool = Field(False, alias="createroot", title="createRoot")

    @field_validator("compression_type", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


def parse_duration_ms(text: str, option: str) -> int:
    """``"500ms"``, ``"30s"``, ``"15m"``, ``"1h"`` or a bare number of ms."""
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    value = text.strip().lower()
    for suffix in ("ms", "s", "m", "h"):
        if value.endswith(suffix) and value[: -len(suffix)].strip().isdigit():
            return int(value[: -len(suffix)]) * units[suffix]
    if value.isdigit():
        return int(value)
    raise InvalidConfiguration(
        f"option {option}: {text!r} is not a duration; use e.g. '500ms', '30s', '15m' or '1h'", option=option
    )


def _title(model: type[BaseModel], key: str) -> str:
    for name, field in model.model_fields.items():
        if field.alias == key or name == key:
            return field.title or key
    return key


def _prefix_pattern(value: str) -> str:
    """Kafka's ``subscribePattern`` matches bare topic names; ours needs the namespace to watch."""
    return value if "://" in value else f"persistent://public/default/{value}"


@dataclass(frozen=True, slots=True)
class Alias:
    """A Kafka connector option accepted under its Kafka name (same meaning as ``target``)."""

    title: str
    target: str  # the lower-cased alias of the model field it fills
    convert: Callable[[str], str] = str


ALIASES: dict[str, Alias] = {
    a.title.lower(): a
    for a in (
        Alias("subscribe", "topics"),
        Alias("subscribePattern", "topicspattern", _prefix_pattern),
        Alias("maxOffsetsPerTrigger", "maxmessagespertrigger"),
        Alias("minOffsetsPerTrigger", "minmessagespertrigger"),
    )
}
"""Spark Kafka connector option names accepted as aliases (docs/SPARK.md, "Moving over from Kafka")."""

KAFKA_ONLY: dict[str, str] = {
    "kafka.bootstrap.servers": "the storage root replaces the brokers: .option('serviceUrl', '/path/to/root')",
    "assign": "partitions are read whole: use topic, topics (subscribe) or topicsPattern (subscribePattern)",
    "startingoffsetsbytimestamp": "use startingTimestamp (one publish time for every partition)",
    "endingoffsetsbytimestamp": "use endingTimestamp (one publish time for every partition)",
    "startingoffsetsbytimestampstrategy": "use startingTimestamp: a partition with nothing newer starts at its end",
    "kafka.group.id": "durable progress lives in a subscription: .option('subscription', 'name')",
    "groupidprefix": "durable progress lives in a subscription: .option('subscription', 'name')",
    "kafkaconsumer.polltimeoutms": "there is no broker to poll; drop the option",
    "fetchoffset.numretries": "there is no broker to ask; drop the option",
    "fetchoffset.retryintervalms": "there is no broker to ask; drop the option",
}
"""Kafka connector options with no counterpart, and what to do instead (an error names both)."""


def _known_titles(model: type[BaseModel]) -> dict[str, str]:
    titles = {f.alias: f.title or f.alias for f in model.model_fields.values() if f.alias}
    if model is SourceOptions or issubclass(model, SourceOptions):
        titles.update({key: a.title for key, a in ALIASES.items()})
    return titles


def _unknown(model: type[BaseModel], key: str) -> InvalidConfiguration:
    """The error for an option ``model`` does not know: the nearest valid name, or the Kafka hint."""
    hint = KAFKA_ONLY.get(key)
    if hint:
        return InvalidConfiguration(
            f"option {key!r} of Spark's Kafka connector has no counterpart in format('pubsub'): {hint}", option=key
        )
    titles = _known_titles(model)
    near = difflib.get_close_matches(key, list(titles), n=1, cutoff=0.6)
    if near:
        suggestion = f"did you mean {titles[near[0]]!r}?"
    else:
        suggestion = f"valid options: {', '.join(sorted(set(titles.values()), key=str.lower))}"
    where = "a read" if issubclass(model, SourceOptions) else "a write"
    return InvalidConfiguration(
        f"unknown option {key!r} for {where} with format('pubsub') (Spark passes option names lower-cased); "
        f"{suggestion}",
        option=key,
    )


def parse_options(model: type[_Options], options: Mapping[str, str]) -> Any:
    """Validate Spark's (lower-cased, string) options into ``model``; errors name the option.

    Kafka connector names (``ALIASES``) fill the field they mean; an error about such a value names
    the option as the user wrote it.  Unknown names get the nearest valid one as a suggestion.
    """
    values: dict[str, Any] = {k.lower(): v for k, v in options.items()}
    storage = {k[len(STORAGE_PREFIX):]: values.pop(k) for k in list(values) if k.startswith(STORAGE_PREFIX)}
    if any(not key for key in storage):
        raise InvalidConfiguration("option 'storage.' names no storage option; use e.g. storage.aws_endpoint")
    known = {f.alias for f in model.model_fields.values()}
    spelled: dict[str, str] = {}  # model alias -> the name the user used, when it was a Kafka alias
    for key in list(values):
        if key in known:
            continue
        if key in _SPARK_KEYS:
            values.pop(key)
            continue
        alias = ALIASES.get(key) if issubclass(model, SourceOptions) else None
        if alias is None:
            raise _unknown(model, key)
        if alias.target in values:
            raise InvalidConfiguration(
                f"options {alias.title} and {_title(model, alias.target)} mean the same thing; give one of them",
                option=alias.title,
            )
        values[alias.target] = alias.convert(values.pop(key))
        spelled[alias.target] = alias.title
    values[STORAGE_FIELD] = storage
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = err.get("loc") or ()
            msg = err.get("msg", "invalid")
            if loc:
                key = str(loc[0])
                problems.append(f"option {spelled.get(key) or _title(model, key)}={values.get(key)!r}: {msg}")
            else:
                text = msg.removeprefix("Value error, ")
                for target, title in spelled.items():
                    text = text.replace(f"{_title(model, target)}:", f"{title}:", 1)
                problems.append(text)
        raise InvalidConfiguration("; ".join(problems)) from None


__all__ = ["ALIASES", "KAFKA_ONLY", "Alias", "SinkOptions", "SourceOptions", "parse_duration_ms", "parse_options"]
