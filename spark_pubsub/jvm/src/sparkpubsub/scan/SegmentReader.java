package sparkpubsub.scan;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapred.FileSplit;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.parquet.HadoopReadOptions;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.parquet.io.SeekableInputStream;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.SerializableConfiguration;
import scala.Option;

/** Reads one planned segment file into batches of the source's (pruned) schema. */
final class SegmentReader implements PartitionReader<ColumnarBatch> {
    /** Source column to the segment file's column it passes through (null: made here). */
    private static final String[][] FILE_COLUMNS = {
        {"key", "key"}, {"value", "value"}, {"publishTime", "publish_time"}, {"eventTime", "event_time"},
        {"properties", "properties"}, {"producerName", "producer_name"}, {"sequenceId", "sequence_id"},
        {"orderingKey", "ordering_key"}, {"deliverAt", "deliver_at"}, {"timestamp", "publish_time"},
    };
    private static final StructType SEGMENT_SCHEMA = StructType.fromDDL(
        "key STRING, value BINARY, publish_time TIMESTAMP, event_time TIMESTAMP, properties MAP<STRING, STRING>, "
        + "producer_name STRING, sequence_id BIGINT, ordering_key BINARY, deliver_at TIMESTAMP");
    private static final String REQUESTED = "org.apache.spark.sql.parquet.row.requested_schema";

    /** Consecutive planned files, read one after the other by one Spark task. */
    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final ScanPlan.FileRead[] files;

        Part(ScanPlan.FileRead[] files) {
            this.files = files;
        }
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Broadcast<SerializableConfiguration> conf;
        private final StructType required;
        private final int capacity;
        private final boolean ignoreMissing;

        Factory(Broadcast<SerializableConfiguration> conf, StructType required, int capacity, boolean ignoreMissing) {
            this.conf = conf;
            this.required = required;
            this.capacity = capacity;
            this.ignoreMissing = ignoreMissing;
        }

        @Override public boolean supportColumnarReads(InputPartition partition) { return true; }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("spark_pubsub: the planned scan reads columnar batches only");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            ScanPlan.FileRead[] files = ((Part) partition).files;
            Configuration hadoop = conf.value().value();
            return new PartitionReader<>() {
                private int next;
                private SegmentReader current;

                @Override
                public boolean next() throws IOException {
                    while (current == null || !current.next()) {
                        close();
                        if (next == files.length) {
                            return false;
                        }
                        current = new SegmentReader(hadoop, files[next++], required, capacity, ignoreMissing);
                    }
                    return true;
                }

                @Override public ColumnarBatch get() { return current.get(); }

                @Override
                public void close() throws IOException {
                    if (current != null) {
                        current.close();
                        current = null;
                    }
                }
            };
        }
    }

    /** The segment columns a pruned source schema needs, in the file-reading order. */
    static StructType fileColumns(StructType required) {
        List<StructField> kept = new ArrayList<>();
        for (StructField f : SEGMENT_SCHEMA.fields()) {
            for (String[] pair : FILE_COLUMNS) {
                if (pair[1].equals(f.name()) && required.getFieldIndex(pair[0]).isDefined()) {
                    kept.add(f);
                    break;
                }
            }
        }
        if (kept.isEmpty()) { // a count: the rows of the smallest column
            kept.add(SEGMENT_SCHEMA.apply("publish_time"));
        }
        return new StructType(kept.toArray(new StructField[0]));
    }

    static void configure(Configuration conf, SparkSession spark, StructType required) {
        conf.set("parquet.read.support.class",
            "org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport");
        conf.set(REQUESTED, fileColumns(required).json());
        var sql = spark.sessionState().conf();
        conf.set("spark.sql.session.timeZone", sql.sessionLocalTimeZone());
        conf.setBoolean("spark.sql.caseSensitive", false);
        conf.setBoolean("spark.sql.parquet.binaryAsString", false);
        conf.setBoolean("spark.sql.parquet.int96AsTimestamp", true);
        conf.setBoolean("spark.sql.parquet.inferTimestampNTZ.enabled", true);
        conf.setBoolean("spark.sql.legacy.parquet.nanosAsLong", false);
    }

    private final ScanPlan.FileRead file;
    private final VectorizedParquetRecordReader reader;
    private final ColumnVector[] out;
    private final int[] fromFile; // per output column: the file batch's column, or -1
    private final int offsetAt;
    private final int messageIdAt;
    private final int[] publishAt;
    private final OnHeapColumnVector offsets;
    private final OnHeapColumnVector messageIds;
    private final OnHeapColumnVector publish;
    private final SlicedVector[] slices;
    private final ColumnarBatch batch;
    private final byte[] idBuffer = new byte[80];
    private final int idPrefix;
    private final byte[] idMiddle;
    private final DecimalCounter entryText = new DecimalCounter();
    private long position; // rows of the file read so far
    private int run; // the run the next row's offset falls in (rows come in offset order)
    private boolean done;

    SegmentReader(Configuration conf, ScanPlan.FileRead file, StructType required, int capacity, boolean ignoreMissing) {
        this.file = file;
        StructType fileColumns = fileColumns(required);
        VectorizedParquetRecordReader opened = new VectorizedParquetRecordReader(
            null, "CORRECTED", "UTC", "CORRECTED", "UTC", false, capacity);
        try {
            Path path = new Path(file.path);
            FileSplit split = new FileSplit(path, 0, Long.MAX_VALUE, new String[0]);
            TaskAttemptContextImpl context = new TaskAttemptContextImpl(conf, new TaskAttemptID());
            if (file.maxMessageBytes < 0) {
                opened.initialize(split, context);
            } else {
                // the footer is read once, here: checked (D175), then handed to the reader with its stream
                HadoopInputFile input = HadoopInputFile.fromPath(path, conf);
                SeekableInputStream stream = input.newStream();
                try {
                    ParquetMetadata footer = ParquetFileReader.readFooter(
                        input, HadoopReadOptions.builder(conf, path).build(), stream);
                    SegmentBounds.check(file, footer.getBlocks());
                    opened.initialize(split, context, Option.apply(input), Option.apply(stream), Option.apply(footer));
                } catch (IOException | RuntimeException e) {
                    stream.close();
                    throw e;
                }
            }
            opened.initBatch(new StructType(), InternalRow.empty());
            opened.enableReturningBatches();
        } catch (FileNotFoundException e) {
            if (!ignoreMissing) {
                throw new IllegalStateException("spark_pubsub: a planned segment file is missing: " + file.path
                    + " (vacuumed after planning; failOnDataLoss=false skips it)", e);
            }
            opened = null;
        } catch (IOException | InterruptedException e) {
            throw new IllegalStateException("spark_pubsub: cannot read " + file.path + ": " + e, e);
        }
        reader = opened;
        done = opened == null;
        String[] names = required.fieldNames();
        out = new ColumnVector[names.length];
        fromFile = new int[names.length];
        slices = new SlicedVector[names.length];
        int offsetIndex = -1;
        int idIndex = -1;
        List<Integer> publishIndexes = new ArrayList<>();
        for (int i = 0; i < names.length; i++) {
            fromFile[i] = -1;
            for (String[] pair : FILE_COLUMNS) {
                if (pair[0].equals(names[i])) {
                    fromFile[i] = fileColumns.fieldIndex(pair[1]);
                }
            }
            if (names[i].equals("publishTime") || names[i].equals("timestamp")) {
                publishIndexes.add(i);
            }
            switch (names[i]) {
                case "topic" -> out[i] = constant(file.topic);
                case "internalTopic" -> out[i] = constant(file.internalTopic);
                case "partition" -> out[i] = constant(file.partition);
                case "redeliveryCount", "timestampType" -> out[i] = constant(0);
                case "offset" -> offsetIndex = i;
                case "messageId" -> idIndex = i;
                default -> { }
            }
        }
        offsetAt = offsetIndex;
        messageIdAt = idIndex;
        publishAt = publishIndexes.stream().mapToInt(Integer::intValue).toArray();
        offsets = offsetAt >= 0 ? new OnHeapColumnVector(capacity, DataTypes.LongType) : null;
        messageIds = messageIdAt >= 0 ? new OnHeapColumnVector(capacity, DataTypes.StringType) : null;
        publish = publishAt.length > 0 ? new OnHeapColumnVector(capacity, DataTypes.LongType) : null;
        if (offsetAt >= 0) out[offsetAt] = offsets;
        if (messageIdAt >= 0) out[messageIdAt] = messageIds;
        batch = new ColumnarBatch(out);
        idPrefix = putAscii(idBuffer, 0, file.ledgerId + ":");
        idMiddle = (":" + file.partition + ":").getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    }

    private static ConstantColumnVector constant(String value) {
        ConstantColumnVector v = new ConstantColumnVector(1, DataTypes.StringType);
        v.setUtf8String(UTF8String.fromString(value));
        return v;
    }

    private static ConstantColumnVector constant(int value) {
        ConstantColumnVector v = new ConstantColumnVector(1, DataTypes.IntegerType);
        v.setInt(value);
        return v;
    }

    @Override
    public boolean next() throws IOException {
        while (!done) {
            if (position >= file.rowHi || !reader.nextBatch()) {
                done = true;
                return false;
            }
            ColumnarBatch read = reader.resultBatch();
            int n = read.numRows();
            long lo = Math.max(file.rowLo, position);
            long hi = Math.min(file.rowHi, position + n);
            long first = position;
            position += n;
            if (hi <= lo) {
                continue;
            }
            int from = (int) (lo - first);
            int rows = (int) (hi - lo);
            boolean whole = from == 0 && rows == n;
            for (int i = 0; i < out.length; i++) {
                if (fromFile[i] >= 0) {
                    ColumnVector v = read.column(fromFile[i]);
                    if (whole) {
                        out[i] = v;
                    } else {
                        if (slices[i] == null) {
                            slices[i] = new SlicedVector(v);
                        }
                        slices[i].slice(v, from, rows);
                        out[i] = slices[i];
                    }
                }
            }
            fill(file.baseOffset + lo, rows);
            batch.setNumRows(rows);
            return true;
        }
        return false;
    }

    /** Offsets, message ids and the never-null publish time of the batch's rows. */
    private void fill(long firstOffset, int rows) {
        if (offsets != null) {
            for (int i = 0; i < rows; i++) {
                offsets.putLong(i, firstOffset + i);
            }
        }
        if (messageIds != null) {
            messageIds.reset();
            long[] runs = file.runs;
            for (int i = 0; i < rows; i++) {
                long offset = firstOffset + i;
                while (offset >= runs[run + 1] && run + 5 < runs.length) {
                    run += 5;
                }
                long rel = offset - runs[run + 2];
                long size = runs[run + 4];
                long entry = size < 0 ? runs[run + 3] + rel : runs[run + 3] + rel / size;
                long index = size < 0 ? -1 : rel % size;
                int at = entryText.put(entry, idBuffer, idPrefix);
                System.arraycopy(idMiddle, 0, idBuffer, at, idMiddle.length);
                at = putLong(idBuffer, at + idMiddle.length, index);
                messageIds.putByteArray(i, idBuffer, 0, at);
            }
        }
        if (publishAt.length > 0) {
            ColumnVector times = out[publishAt[0]];
            ColumnVector never = times;
            if (times.hasNull()) { // declared non-null: a missing publish time reads as the epoch
                for (int i = 0; i < rows; i++) {
                    publish.putLong(i, times.isNullAt(i) ? 0L : times.getLong(i));
                }
                never = publish;
            }
            for (int at : publishAt) {
                out[at] = never;
            }
        }
    }

    private static int putAscii(byte[] buf, int at, String text) {
        for (int i = 0; i < text.length(); i++) {
            buf[at + i] = (byte) text.charAt(i);
        }
        return at + text.length();
    }

    /** Writes {@code value} in decimal at {@code at}; returns the position after it. */
    static int putLong(byte[] buf, int at, long value) {
        if (value < 0) {
            if (value == Long.MIN_VALUE) {
                return putAscii(buf, at, Long.toString(value));
            }
            buf[at++] = '-';
            value = -value;
        }
        int digits = 1;
        for (long v = value; v >= 10; v /= 10) {
            digits++;
        }
        for (int i = at + digits - 1; i >= at; i--) {
            buf[i] = (byte) ('0' + value % 10);
            value /= 10;
        }
        return at + digits;
    }

    @Override public ColumnarBatch get() { return batch; }

    @Override
    public void close() throws IOException {
        if (reader != null) {
            reader.close();
        }
        if (offsets != null) offsets.close();
        if (messageIds != null) messageIds.close();
        if (publish != null) publish.close();
    }
}
