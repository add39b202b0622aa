"""``df.write.format("pubsub")`` and ``df.writeStream.format("pubsub")``: the Arrow writers.

Driver (constructor): validate the DataFrame's columns and the options, resolve the target topic's
partitions; keep only picklable state.  Executors (``write``): convert each Arrow record batch to
segment rows, route them to partitions, and *stage* one segment per internal topic (nothing becomes
visible).  Driver (``commit``): make the staged segments visible, one commit per internal topic.

Streaming writes are exactly-once: micro-batch ``batchId`` is committed as the idempotent write
``(pubsub.sink.<sinkId>, batchId)`` (``broker_core.producer.bulk.commit_staged_once``), so a batch that Spark
replays after a failure, or whose commit it calls twice, lands once even if it spans several
partitions or topics.  The default sink id is derived from the checkpoint (its absolute path and
the query id recorded in it), so one checkpoint is one sink.
"""

from __future__ import annotations

import contextlib
import random
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from broker_core.broker.broker import Broker
from broker_core.errors import InvalidConfiguration, InvalidMessage, NotAllowedError, PulsarException
from broker_core.hashing.keys import HashingScheme
from broker_core.log.segment import CompressionType
from broker_core.naming import TopicName
from broker_core.producer.bulk import commit_staged_once, discard_staged, recorded_staged, route_rows, to_segment_rows
from broker_core.producer.routing import SinglePartitionRouter
from broker_core.topic.topic_log import StagedSegment, TopicLog
from spark_pubsub.options import SinkOptions
from spark_pubsub.sink_columns import SinkColumns, sequence_base
from spark_pubsub.sink_identity import default_sink_id
from spark_pubsub.typed_values import binary_value_schema, is_typed_value, plan_write
from spark_pubsub.worker_import import WorkerImportable

MAX_BUFFERED_ROWS = 500_000
"""A task stages an internal topic's buffered rows as a segment once this many have accumulated..."""
MAX_BUFFERED_BYTES = 64 << 20
"""...or once they take this many bytes of Arrow memory (else at the end of the task)."""

SINK_APP_PREFIX = "pubsub.sink."
"""The ``txn`` app id of a streaming sink is this prefix plus its sink id."""

_COMPRESSION = {"NONE": CompressionType.NONE, "LZ4": CompressionType.LZ4, "ZLIB": CompressionType.ZLib,
                "ZSTD": CompressionType.ZSTD, "SNAPPY": CompressionType.SNAPPY}


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one write task staged: (internal topic, its segments in write order) pairs."""

    staged: tuple[tuple[str, tuple[StagedSegment, ...]], ...]
    rows: int


def _collect(messages: Sequence[WriterCommitMessage | None]) -> dict[str, list[StagedSegment]]:
    """Staged segments per internal topic, in task order (None: a failed task, ignored)."""
    out: dict[str, list[StagedSegment]] = {}
    for message in messages:
        if isinstance(message, SinkCommitMessage):
            for topic, segments in message.staged:
                out.setdefault(topic, []).extend(segments)
    return out


def _open_log(broker: Broker, internal_topic: str, *, create: bool = True) -> TopicLog:
    return broker.topic_log(TopicName.parse(internal_topic), create=create)


def _resolve_topic(broker: Broker, topic: str, *, where: str) -> tuple[str, ...]:
    """The internal topic names of ``topic`` (auto-created per the broker config)."""
    try:
        partitions = broker.partitions(topic)
    except PulsarException as exc:
        raise type(exc)(f"{where} {topic!r}: {exc}", **exc.context) from None
    if not partitions[0].is_persistent:
        raise NotAllowedError(
            f"{where} {topic!r} is non-persistent; the pubsub sink writes persistent topics only "
            "(use persistent://tenant/namespace/topic or a short name)", topic=topic,
        )
    return tuple(str(p) for p in partitions)


def _task_sequence_base() -> int:
    """The first sequence id of this write task (``sink_columns.sequence_base``): the micro-batch id
    Spark sets as a local property of streaming tasks (0 for a batch write) and the task's partition."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # called outside a Spark task (tests)
        return 0
    batch = context.getLocalProperty("streaming.sql.batchId")
    return sequence_base(int(batch) if batch and batch.isdigit() else 0, context.partitionId())


def _single_partition_route(rows: pa.Table, num_partitions: int, *, seed: int,
                            scheme: HashingScheme) -> np.ndarray:
    router = SinglePartitionRouter(num_partitions, scheme=scheme, partition=seed % num_partitions)
    return router.choose_many(rows.column("key"))


def _groups(codes: np.ndarray, count: int) -> Iterator[tuple[int, np.ndarray]]:
    """(code, row indexes in input order) for every code present, vectorised (one stable sort)."""
    if count == 1 or (len(codes) and (codes == codes[0]).all()):
        yield int(codes[0]), np.arange(len(codes))
        return
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=count))
    start = 0
    for code, stop in enumerate(bounds):
        if stop > start:
            yield code, order[start:stop]
        start = int(stop)


class _PubSubWriter:
    """State and logic shared by the batch and the streaming writer (driver constructs, executors write)."""

    def __init__(self, options: SinkOptions, schema: StructType, *, overwrite: bool, streaming: bool) -> None:
        if overwrite:
            raise InvalidConfiguration(
                "format('pubsub') cannot overwrite: a topic is an append-only log; use mode('append') "
                "(to start over, delete the topic with the admin API)", option="mode",
            )
        columns = SinkColumns.validate(binary_value_schema(schema) if is_typed_value(schema) else schema)
        if options.topic is None and not columns.has_topic:
            raise InvalidConfiguration(
                "option topic: say where to write with .option('topic', 'my-topic'), or add a string "
                "column 'topic' to route each row", option="topic",
            )
        # the driver opens the root once, creating it only on request (createRoot)
        Broker.for_url(options.root, create_root=options.create_root,
                       storage_options=dict(options.storage_options))
        self._root = options.root
        self._storage = dict(options.storage_options)
        broker = self._broker()
        self._topic = options.topic
        self._partitions = (_resolve_topic(broker, options.topic, where="option topic")
                            if options.topic else ())
        self._columns = columns
        self._compression = _COMPRESSION[options.compression_type]
        self._scheme = HashingScheme[options.hashing_scheme]
        self._single_partition = options.routing_mode == "SinglePartition"
        self._max_message_size = broker.config.max_message_size
        self._sink_id = self._sink_id_for(options) if streaming else None
        self._owner = (default_sink_id(options.checkpoint_location, self._storage)
                       if options.checkpoint_location else None)
        if self._sink_id is not None:
            self._seed = zlib.crc32(self._sink_id.encode())
            self._producer = options.producer_name or f"spark-sink-{self._sink_id}"
        else:
            self._seed = random.randrange(1 << 30)
            self._producer = options.producer_name or f"spark-batch-{self._seed:08x}"
        # last: registering a schema is the one write the driver makes, after every check passed
        # a struct value: docs/SPARK.md
        self._typed = plan_write(options.root, options.topic, schema, storage_options=self._storage)

    def _broker(self) -> Broker:
        return Broker.for_url(self._root, storage_options=self._storage)

    @staticmethod
    def _sink_id_for(options: SinkOptions) -> str:
        if options.sink_id is not None:
            sink_id = options.sink_id.strip()
            allowed = all(c.isascii() and (c.isalnum() or c in "_-.=") for c in sink_id)
            if not sink_id or len(sink_id) > 150 or not allowed or not sink_id[0].isalnum():
                raise InvalidConfiguration(
                    f"option sinkId={options.sink_id!r}: use 1-150 characters of letters, digits and _-.= "
                    "starting with a letter or digit", option="sinkId",
                )
            return sink_id
        if not options.checkpoint_location:
            raise InvalidConfiguration(
                "option sinkId: a streaming write needs .option('checkpointLocation', ...) (or an explicit "
                ".option('sinkId', ...)) to commit each micro-batch exactly once", option="sinkId",
            )
        return default_sink_id(options.checkpoint_location, dict(options.storage_options))

    # -- executors ------------------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        broker = self._broker()
        next_sequence_id = _task_sequence_base()
        buffers: dict[str, list[pa.Table]] = {}
        buffered: dict[str, tuple[int, int]] = {}
        staged: dict[str, list[StagedSegment]] = {}
        resolved: dict[str, tuple[str, ...]] = {}
        total = 0

        def stage(internal: str) -> None:
            pieces = buffers.pop(internal)
            buffered.pop(internal)
            table = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
            segment = _open_log(broker, internal, create=False).stage(table, compression=self._compression)
            staged.setdefault(internal, []).append(segment)

        try:
            for batch in iterator:
                if not batch.num_rows:
                    continue
                table = pa.Table.from_batches([batch])
                now_ms = int(time.time() * 1000)
                for topic, part in self._split_by_topic(table):
                    internals = self._internals(broker, topic, resolved)
                    first_sequence_id, next_sequence_id = next_sequence_id, next_sequence_id + part.num_rows
                    for internal, rows in self._route(part, internals, now_ms, first_sequence_id):
                        buffers.setdefault(internal, []).append(rows)
                        count, size = buffered.get(internal, (0, 0))
                        count, size = count + rows.num_rows, size + rows.nbytes
                        buffered[internal] = (count, size)
                        total += rows.num_rows
                        if count >= MAX_BUFFERED_ROWS or size >= MAX_BUFFERED_BYTES:
                            stage(internal)
            for internal in list(buffers):
                stage(internal)
        except BaseException:
            for internal, segments in staged.items():
                # best effort: the files are invisible; vacuum removes leftovers
                with contextlib.suppress(Exception):
                    discard_staged(_open_log(broker, internal, create=False), segments)
            raise
        return SinkCommitMessage(staged=tuple((t, tuple(s)) for t, s in staged.items()), rows=total)

    def _split_by_topic(self, table: pa.Table) -> Iterator[tuple[str, pa.Table]]:
        """The option topic overrides the column (as in Spark's Kafka sink); else rows grouped by topic."""
        if self._topic is not None:
            yield self._topic, table
            return
        column = table.column("topic")
        if column.null_count:
            raise InvalidMessage(
                "format('pubsub') sink: column 'topic' is null in a row; give every row a topic, or set "
                ".option('topic', ...) for all rows", column="topic",
            )
        encoded = pc.dictionary_encode(column).combine_chunks()
        names = encoded.dictionary.to_pylist()
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        for code, take in _groups(codes, len(names)):
            yield names[code], table if len(take) == table.num_rows else table.take(pa.array(take))

    def _internals(self, broker: Broker, topic: str, cache: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
        if topic == self._topic:
            return self._partitions
        internals = cache.get(topic)
        if internals is None:
            internals = cache[topic] = _resolve_topic(broker, topic, where="column topic holds")
        return internals

    def _route(self, table: pa.Table, internals: tuple[str, ...], now_ms: int,
               first_sequence_id: int) -> Iterator[tuple[str, pa.Table]]:
        if self._typed is not None:
            table = self._typed.encode(table)
        bulk = self._columns.to_bulk(table, now_ms=now_ms, default_producer=self._producer,
                                     first_sequence_id=first_sequence_id)
        rows, explicit = to_segment_rows(bulk, publish_time_ms=now_ms,
                                         max_message_size=self._max_message_size,
                                         default_producer=self._producer)
        if self._typed is not None:
            rows = self._typed.stamp(rows)
        router = None
        if self._single_partition:
            seed, scheme = self._seed, self._scheme

            def router(r: pa.Table, n: int) -> np.ndarray:
                return _single_partition_route(r, n, seed=seed, scheme=scheme)

        chosen = route_rows(rows, explicit, len(internals), hashing_scheme=self._scheme, router=router)
        for index, take in _groups(chosen.astype(np.int64), len(internals)):
            yield internals[index], rows if len(take) == rows.num_rows else rows.take(pa.array(take))

    # -- driver ---------------------------------------------------------------------------------------

    def _discard(self, messages: Sequence[WriterCommitMessage | None],
                 keep: dict[str, list[StagedSegment]]) -> None:
        broker = self._broker()
        for internal, segments in _collect(messages).items():
            try:
                log = _open_log(broker, internal, create=False)
                discard_staged(log, segments, keep={s.path for s in keep.get(internal, [])})
            except Exception:  # best effort: staged files are invisible; vacuum removes leftovers
                continue


class PubSubBatchWriter(_PubSubWriter, DataSourceArrowWriter, metaclass=WorkerImportable):
    """``df.write.format("pubsub")``: one commit per internal topic (atomic per internal topic).

    Args:
        options: the parsed sink options.
        schema: the DataFrame's schema (validated here, before anything is written).
        overwrite: must be False: a topic is an append-only log.
    """

    def __init__(self, options: SinkOptions, schema: StructType, *, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite=overwrite, streaming=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _PubSubWriter.write(self, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        broker = self._broker()
        for internal, segments in sorted(_collect(messages).items()):
            _open_log(broker, internal).commit_staged(segments)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._discard(messages, keep={})


class PubSubStreamWriter(_PubSubWriter, DataSourceStreamArrowWriter, metaclass=WorkerImportable):
    """``df.writeStream.format("pubsub")``: each micro-batch committed exactly once.

    Args:
        options: the parsed sink options (``sinkId``, or the ``checkpointLocation`` Spark adds).
        schema: the DataFrame's schema (validated here, before anything is written).
        overwrite: must be False: a topic is an append-only log.
    """

    def __init__(self, options: SinkOptions, schema: StructType, *, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite=overwrite, streaming=True)

    @property
    def sink_id(self) -> str:
        assert self._sink_id is not None
        return self._sink_id

    @property
    def app_id(self) -> str:
        return SINK_APP_PREFIX + self.sink_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _PubSubWriter.write(self, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        broker = self._broker()
        commit_staged_once(broker.io, lambda internal: _open_log(broker, internal), _collect(messages),
                           app_id=self.app_id, version=batchId, owner=self._owner)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        broker = self._broker()
        recorded = recorded_staged(broker.io, app_id=self.app_id, version=batchId) or {}
        self._discard(messages, keep=recorded)


__all__ = ["MAX_BUFFERED_BYTES", "MAX_BUFFERED_ROWS", "PubSubBatchWriter", "PubSubStreamWriter",
           "SinkCommitMessage", "default_sink_id"]
