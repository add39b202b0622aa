package sparkpubsub.scan;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.util.SerializableConfiguration;

/**
 * A bounded read of planned segment files in the source's schema, by Spark's own vectorized
 * Parquet reader: {@code spark.read.format("sparkpubsub.scan.PubsubScan").option("plan", ...)}.
 * The Python driver plans (spark_pubsub.native_plan) and passes the plan as text; this side only
 * reads the files it names and fills each batch's offsets and message ids in a loop.
 */
public final class PubsubScan implements TableProvider {
    static final StructType SOURCE_SCHEMA = StructType.fromDDL(
        "key STRING, value BINARY, topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL, "
        + "messageId STRING NOT NULL, publishTime TIMESTAMP NOT NULL, eventTime TIMESTAMP, "
        + "properties MAP<STRING, STRING>, producerName STRING, sequenceId BIGINT, orderingKey BINARY, "
        + "redeliveryCount INT NOT NULL, deliverAt TIMESTAMP, internalTopic STRING NOT NULL, "
        + "timestamp TIMESTAMP NOT NULL, timestampType INT NOT NULL");

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SOURCE_SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new PlannedTable(properties);
    }

    static final class PlannedTable implements SupportsRead {
        private final Map<String, String> properties;

        PlannedTable(Map<String, String> properties) {
            this.properties = properties;
        }

        @Override public String name() { return "spark_pubsub_planned_segments"; }
        @Override public StructType schema() { return SOURCE_SCHEMA; }
        @Override public Set<TableCapability> capabilities() { return EnumSet.of(TableCapability.BATCH_READ); }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new Builder(options);
        }
    }

    static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
        private final CaseInsensitiveStringMap options;
        private StructType required = SOURCE_SCHEMA;

        Builder(CaseInsensitiveStringMap options) {
            this.options = options;
        }

        @Override public void pruneColumns(StructType requiredSchema) {
            List<StructField> kept = new ArrayList<>();
            Set<String> names = new LinkedHashSet<>(List.of(requiredSchema.fieldNames()));
            for (StructField f : SOURCE_SCHEMA.fields()) {
                if (names.contains(f.name())) {
                    kept.add(f);
                }
            }
            required = new StructType(kept.toArray(new StructField[0]));
        }

        @Override public Scan build() { return this; }
        @Override public StructType readSchema() { return required; }
        @Override public String description() { return "spark_pubsub planned segments"; }
        @Override public Batch toBatch() { return this; }

        @Override
        public InputPartition[] planInputPartitions() {
            var sql = SparkSession.active().sessionState().conf();
            List<List<ScanPlan.FileRead>> groups = ScanPlan.pack(ScanPlan.parse(options.get("plan")),
                sql.filesMaxPartitionBytes(), sql.filesOpenCostInBytes(), SparkSession.active().leafNodeDefaultParallelism());
            InputPartition[] parts = new InputPartition[groups.size()];
            for (int i = 0; i < parts.length; i++) {
                parts[i] = new SegmentReader.Part(groups.get(i).toArray(new ScanPlan.FileRead[0]));
            }
            return parts;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            SparkSession spark = SparkSession.active();
            Configuration conf = spark.sessionState().newHadoopConf();
            SegmentReader.configure(conf, spark, required);
            Broadcast<SerializableConfiguration> shared = SerializableConfiguration.broadcast(spark.sparkContext(), conf);
            int capacity = spark.sessionState().conf().parquetVectorizedReaderBatchSize();
            boolean ignoreMissing = "true".equalsIgnoreCase(options.getOrDefault("ignoreMissingFiles", "false"));
            return new SegmentReader.Factory(shared, required, capacity, ignoreMissing);
        }
    }
}
