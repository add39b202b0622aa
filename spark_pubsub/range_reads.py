"""``read_ranges``: the messages of an ``emit=ranges`` micro-batch, read by Spark's own Parquet reader.

Meant for ``foreachBatch``::

    def handle(ranges, batch_id):
        messages = spark_pubsub.read_ranges(ranges.sparkSession, root, ranges)
        ...

The batch's rows (``stream_ranges.RANGES_SCHEMA``, a handful: one per internal topic) come to the
driver; each becomes a native plan (``native_plan.plan_topic_read``) of exactly its offsets, read
from the log as it is now, with the compacted view the batch pinned, and ``native_scan.scan_plans``
reads them: the schema and values of ``format("pubsub")`` for the same batch.  DataFrame API only
(works on Spark Connect).  Where Spark cannot open the root, or a topic has a record schema whose
``value`` is decoded in Python, the ranges are read through ``spark.read.format("pubsub")`` instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from broker_core.broker.broker import Broker
from broker_core.errors import DataLoss, InvalidConfiguration
from broker_core.naming import TopicName
from spark_pubsub.native_plan import TopicRead, plan_topic_read
from spark_pubsub.native_scan import option_strings, root_uri, scan_plans, spark_can_open, spark_url
from spark_pubsub.offsets import read_plan
from spark_pubsub.options import SourceOptions, parse_options
from spark_pubsub.schema import SOURCE_SCHEMA
from spark_pubsub.stream_ranges import REQUIRED_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_OWN_OPTIONS = ("failOnDataLoss", "valueFormat", "spark_root", "storage_options")


class Range(NamedTuple):
    """Offsets ``[start, end)`` of one internal topic, as the stream planned them."""

    internal_topic: str
    partition: int
    start: int
    end: int
    ledger_id: int | None
    view: tuple[int, str] | None  # (horizon, file) of the batch's compacted view


def read_ranges(
    spark: SparkSession,
    root: str,
    ranges: DataFrame,
    *,
    failOnDataLoss: bool = True,
    valueFormat: str | None = None,
    spark_root: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    **others: Any,
) -> DataFrame:
    """The messages of the offset ranges in ``ranges`` (a micro-batch of
    ``spark.readStream.format("pubsub").option("emit", "ranges")``), with exactly the schema and
    values ``format("pubsub")`` gives for the same batch.

    Args:
        spark: a classic or Spark Connect session (in ``foreachBatch``: ``ranges.sparkSession``).
        root: the storage root, as given to the stream.
        ranges: the micro-batch DataFrame (or any DataFrame with its columns; several batches'
            rows may be given at once: adjacent ranges of a topic are read as one).
        failOnDataLoss: as the stream's option (pass the same): offsets retention removed, or a
            topic re-created since the batch was planned, fail with ``DataLoss``; False skips them.
        valueFormat, spark_root, storage_options: as for ``read_topic``.

    Raises:
        InvalidConfiguration: ``ranges`` lacks a column, holds an impossible range, or an option is
            unknown or is one the stream's ranges already decide (topic, startingOffsets, ...).
        DataLoss: see ``failOnDataLoss``.
    """
    _refuse(others)
    wanted = _collect(ranges)
    topics = sorted({_user_topic(r) for r in wanted}) or ["persistent://public/default/unused"]
    strings = option_strings({"path": root, "topics": ",".join(topics), "failOnDataLoss": failOnDataLoss,
                              "valueFormat": valueFormat}, storage_options)
    options: SourceOptions = parse_options(SourceOptions, strings)
    merged = merge_ranges(wanted)
    if not merged:  # an empty batch (or only empty ranges): nothing to plan
        return spark.createDataFrame([], SOURCE_SCHEMA)
    if read_plan(options) is not None:  # a typed topic: the value is decoded in Python (docs/SPARK.md)
        log.info("read_ranges: a topic has a record schema; reading through format('pubsub'), which decodes value")
        return _through_source(spark, options, strings, merged)
    plans = plan_ranges(options, merged)
    base = spark_url(spark_root or root_uri(options.root, options.storage_options))
    if not spark_can_open(spark, base, plans, instead="reading the ranges through format('pubsub') instead"):
        return _through_source(spark, options, strings, merged)
    return scan_plans(spark, base, plans, fail_on_data_loss=options.fail_on_data_loss)


def _refuse(others: Mapping[str, Any]) -> None:
    """A keyword ``read_ranges`` does not take: a typed error naming it and what to do instead."""
    by_lower = {o.lower(): o for o in _OWN_OPTIONS}
    fixed = {f.alias: f.title for f in SourceOptions.model_fields.values() if f.alias and f.alias not in by_lower}
    for name in others:
        if name.lower() in fixed:
            raise InvalidConfiguration(
                f"option {fixed[name.lower()]} of read_ranges: the stream's ranges decide which messages are "
                "read (set it on spark.readStream.format('pubsub'))", option=name,
            )
        near = difflib.get_close_matches(name, _OWN_OPTIONS, n=1, cutoff=0.6) or difflib.get_close_matches(
            name.lower(), [o.lower() for o in _OWN_OPTIONS], n=1, cutoff=0.6)
        hint = (f"did you mean {by_lower.get(near[0], near[0])!r}?" if near
                else f"valid options: {', '.join(_OWN_OPTIONS)}")
        raise InvalidConfiguration(f"unknown option {name!r} for read_ranges; {hint}", option=name)


def _collect(ranges: Any) -> list[Range]:
    """The rows of the ranges DataFrame, checked (a handful: one per internal topic and batch)."""
    columns = getattr(ranges, "columns", None)
    if columns is None or not hasattr(ranges, "collect"):
        raise InvalidConfiguration(
            f"read_ranges: ranges must be the micro-batch DataFrame of a stream read with "
            f".option('emit', 'ranges'), got {type(ranges).__name__}", option="ranges",
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InvalidConfiguration(
            f"read_ranges: ranges lacks the column(s) {', '.join(missing)} (it has {', '.join(columns) or 'none'}); "
            "pass the micro-batch DataFrame of spark.readStream.format('pubsub').option('emit', 'ranges')",
            option="ranges",
        )
    optional = [c for c in ("ledgerId", "compactedHorizon", "compactedFile") if c in columns]
    out = []
    for row in ranges.select(*REQUIRED_COLUMNS, *optional).collect():
        values = row.asDict()
        start, end = values["startOffset"], values["endOffset"]
        if values["internalTopic"] is None or start is None or end is None or not 0 <= start <= end:
            raise InvalidConfiguration(
                f"read_ranges: row {values} is not an offset range (internalTopic and 0 <= startOffset <= "
                "endOffset are required)", option="ranges",
            )
        horizon, file = values.get("compactedHorizon"), values.get("compactedFile")
        view = (int(horizon), str(file)) if horizon is not None and file is not None else None
        partition = values["partition"]
        out.append(Range(str(values["internalTopic"]), -1 if partition is None else int(partition), int(start),
                         int(end), values.get("ledgerId"), view))
    return out


def _user_topic(r: Range) -> str:
    name = TopicName.parse(r.internal_topic)
    return str(name.partitioned_topic_name) if r.partition >= 0 else str(name)


def merge_ranges(ranges: list[Range]) -> list[Range]:
    """Sorted, with a range that starts where the previous one of the same topic, ledger and view
    ends merged into it (several batches given at once are read as one scan per topic)."""
    out: list[Range] = []
    for r in sorted(ranges, key=lambda r: (r.internal_topic, r.start, r.end)):
        last = out[-1] if out else None
        if last is not None and last._replace(start=r.start, end=r.end) == r and last.end == r.start:
            out[-1] = last._replace(end=r.end)
        elif r.end > r.start:
            out.append(r)
    return out


def plan_ranges(options: SourceOptions, ranges: list[Range]) -> list[TopicRead]:
    """One native plan per range, from the log as it is now (one snapshot per internal topic)."""
    broker = Broker.for_url(options.root, storage_options=options.storage_options)
    plans = []
    snapshots: dict[str, Any] = {}
    for r in ranges:
        topic_log = broker.topic_log(TopicName.parse(r.internal_topic), create=False)
        snap = snapshots.get(r.internal_topic) or snapshots.setdefault(r.internal_topic, topic_log.snapshot())
        if options.fail_on_data_loss and (snap.deleted or (r.ledger_id is not None and snap.ledger_id != r.ledger_id)):
            raise DataLoss(
                f"{r.internal_topic} was deleted or re-created (ledger {snap.ledger_id}, the batch was planned on "
                f"ledger {r.ledger_id}): offsets [{r.start}, {r.end}) no longer hold the batch's messages; set "
                "failOnDataLoss=false to read what there is", topic=r.internal_topic,
            )
        start, view = r.start, None
        if r.view is not None and r.start < r.view[0]:  # below the batch's horizon: its view serves
            start = min(r.end, r.view[0])
            view = (r.view[1], r.start, start)
        plan = plan_topic_read(topic_log, topic=r.internal_topic, partition=r.partition, start=start, end=r.end,
                               read_compacted=False, fail_on_data_loss=options.fail_on_data_loss, snapshot=snap)
        if view is not None:
            plan = dataclasses.replace(plan, view=view)
        if plan.segments or plan.view is not None:
            plans.append(plan)
    return plans


def _through_source(spark: SparkSession, options: SourceOptions, strings: dict[str, str],
                    ranges: list[Range]) -> DataFrame:
    """The ranges read by ``spark.read.format("pubsub")``: one bounded read per range, every other
    partition of its topic given an empty range.  A compacted view is the one current now."""
    broker = Broker.for_url(options.root, storage_options=options.storage_options)
    frames = []
    for r in ranges:
        topic = _user_topic(r)
        empty = {str(p): 0 for p in broker.partitions(TopicName.parse(topic))}
        reader = spark.read.format("pubsub").options(**{**strings, "topics": topic})
        if r.view is not None:
            reader = reader.option("readCompacted", "true")
        frames.append(reader.option("startingOffsets", json.dumps({**empty, r.internal_topic: r.start}))
                      .option("endingOffsets", json.dumps({**empty, r.internal_topic: r.end})).load())
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


__all__ = ["Range", "merge_ranges", "plan_ranges", "read_ranges"]
