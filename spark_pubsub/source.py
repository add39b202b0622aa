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

from broker_core.errors import InvalidConfiguration
from spark_pubsub.options import SinkOptions, SourceOptions, parse_options
from spark_pubsub.schema import SOURCE_SCHEMA


class PubSubDataSource(DataSource):
    """Topics on a spark-pubsub storage root as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "pubsub"

    def schema(self) -> StructType:
        from spark_pubsub.typed_values import read_plan

        try:
            options = parse_options(SourceOptions, self.options)
        except InvalidConfiguration:
            return SOURCE_SCHEMA  # the reader reports a bad option when the query starts, naming it
        typed = read_plan(options)  # a typed topic: docs/SPARK.md
        return SOURCE_SCHEMA if typed is None else typed.spark_schema()

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
