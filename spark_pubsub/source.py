"""``format("pubsub")``: the Python data source that Spark instantiates for reads and writes.

Each hook parses the options on the driver (typed, validated) and hands back a reader or writer
object that Spark pickles to executors; all messaging logic lives in ``broker_core``.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_pubsub.options import SinkOptions, SourceOptions, parse_options
from spark_pubsub.schema import source_schema
from spark_pubsub.worker_import import WorkerImportable


class PubSubDataSource(DataSource, metaclass=WorkerImportable):
    """Topics on a spark-pubsub storage root as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "pubsub"

    def schema(self) -> StructType:
        # Spark asks for the schema when load() is called on the driver: validating the options here
        # reports a bad one there, not in a worker traceback when the query first runs
        from spark_pubsub.offset_specs import check_offsets_syntax
        from spark_pubsub.offsets import PartitionPlanner, read_plan

        options = parse_options(SourceOptions, self.options)
        for option, spec in (("startingOffsets", options.starting_offsets), ("endingOffsets", options.ending_offsets)):
            if spec is not None:
                check_offsets_syntax(spec, option)
        planner = PartitionPlanner(options)
        if not options.wait_for_topic and options.fail_on_data_loss:
            # a typo in a topic fails here, with the close names, not at the first action; Spark does
            # not say whether this is a batch or a stream read, so a stream whose checkpointed topic
            # was deleted is judged here as well (failOnDataLoss=false leaves that to the query)
            planner.require_topics()
        if options.emit == "ranges":  # a stream of offset ranges (spark_pubsub/stream_ranges.py)
            from spark_pubsub.stream_ranges import RANGES_SCHEMA

            return RANGES_SCHEMA
        typed = read_plan(options, planner)  # a typed topic: docs/SPARK.md
        if typed is None:
            return source_schema(include_headers=options.include_headers)
        return typed.spark_schema(include_headers=options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_pubsub.batch_reader import PubSubBatchReader

        return PubSubBatchReader(parse_options(SourceOptions, self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_pubsub.stream_reader import PubSubStreamReader

        return PubSubStreamReader(parse_options(SourceOptions, self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_pubsub.sink import PubSubBatchWriter

        return PubSubBatchWriter(parse_options(SinkOptions, self.options), schema, overwrite=overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_pubsub.sink import PubSubStreamWriter

        return PubSubStreamWriter(parse_options(SinkOptions, self.options), schema, overwrite=overwrite)


__all__ = ["PubSubDataSource"]
