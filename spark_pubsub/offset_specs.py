"""The source's offset options: ``startingOffsets``/``endingOffsets`` in every form Spark users write.

``earliest``, ``latest``, JSON by internal topic ``{"<internal topic>": offset}``, or Kafka's JSON by
topic and partition number ``{"<topic>": {"<partition>": offset}}``; -2 means earliest, -1 latest.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from broker_core.errors import InvalidConfiguration
from broker_core.naming import TopicName
from spark_pubsub.options import SourceOptions
from spark_pubsub.topic_resolver import TopicResolver


def parse_starting_offsets(planner: TopicResolver, options: SourceOptions, *, default: str) -> dict[str, int]:
    """``startingOffsets``: "earliest", "latest" or JSON ``{"<internal topic>": offset}`` (-2 = earliest,
    -1 = latest); or ``startingTimestamp`` (publish time, inclusive)."""
    if options.starting_timestamp is not None:
        return planner.timestamp_positions(options.starting_timestamp)
    return parse_offsets_spec(planner, options.starting_offsets or default, "startingOffsets")


def check_offsets_syntax(spec: str, option: str) -> Any:
    """``"earliest"``, ``"latest"`` (any case) or the parsed JSON object; anything else is refused naming
    the option, with the nearest keyword for a misspelt one (no topic is looked at: ``load()`` calls it)."""
    text = spec.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        given = json.loads(text)
    except ValueError:
        near = difflib.get_close_matches(text.lower(), ["earliest", "latest"], n=1, cutoff=0.6)
        raise InvalidConfiguration(
            f"option {option}={spec!r} is neither 'earliest', 'latest' nor JSON like "
            '{"persistent://public/default/t-partition-0": 42}' + (f"; did you mean {near[0]!r}?" if near else ""),
            option=option,
        ) from None
    if not isinstance(given, dict):
        raise InvalidConfiguration(f"option {option}: the JSON must be an object of topic to offset", option=option)
    return given


def parse_offsets_spec(planner: TopicResolver, spec: str, option: str) -> dict[str, int]:
    given = check_offsets_syntax(spec, option)
    if given == "earliest":
        return planner.earliest_positions()
    if given == "latest":
        return planner.latest_positions()
    earliest, latest = planner.earliest_positions(), planner.latest_positions()
    out = dict(latest if option == "endingOffsets" else earliest)
    for name, value in _flatten_offsets(given, option, latest).items():
        full = str(TopicName.parse(name))
        if full not in latest:
            raise InvalidConfiguration(
                f"option {option}: {name!r} is not one of this query's internal topics: {sorted(latest)}",
                option=option,
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < -2:
            raise InvalidConfiguration(f"option {option}: offset for {name!r} must be an int >= -2, got {value!r}",
                                       option=option)
        out[full] = earliest[full] if value == -2 else latest[full] if value == -1 else value
    return out


def _flatten_offsets(given: dict[Any, Any], option: str, known: dict[str, int]) -> dict[str, Any]:
    """Offsets by internal topic from either JSON form: ``{"<internal topic>": offset}``, or Kafka's
    ``{"<topic>": {"<partition number>": offset}}`` (partition 0 of a non-partitioned topic is the
    topic itself)."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        if not isinstance(name, str):
            raise InvalidConfiguration(f"option {option}: topic names must be strings, got {name!r}", option=option)
        if not isinstance(value, dict):
            out[name] = value
            continue
        topic = TopicName.parse(name)
        for partition, offset in value.items():
            try:
                index = int(partition)
            except (TypeError, ValueError):
                index = -1
            if index < 0:
                raise InvalidConfiguration(
                    f"option {option}: partition {partition!r} of {name!r} must be a partition number >= 0",
                    option=option,
                )
            internal = str(topic.partition(index))
            if internal not in known and index == 0 and str(topic) in known:
                internal = str(topic)  # a non-partitioned topic is Kafka's partition 0
            out[internal] = offset
    return out


__all__ = ["check_offsets_syntax", "parse_offsets_spec", "parse_starting_offsets"]
