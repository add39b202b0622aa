package sparkpubsub.scan;

import java.util.List;

import org.apache.parquet.hadoop.metadata.BlockMetaData;

/**
 * The footer check of broker_core.log.segment_bounds.declared_excess (D125), for the JVM scan
 * (D175): a row group whose footer declares more uncompressed bytes than its rows may hold under
 * maxMessageSize is refused before a page of it is inflated, so a few kilobytes of zstd cannot
 * take an executor's memory.  Same allowance: {@code rows * (2 * limit + 4 KiB) + 1 MiB}.
 */
final class SegmentBounds {
    private static final long ROW_OVERHEAD_BYTES = 4096;
    private static final long GROUP_OVERHEAD_BYTES = 1L << 20;
    /**
     * Starts the reason of the exception a task throws.  A JDK exception class, not one of ours: the
     * driver deserializes a failed task's exception with its own class loader, which may not see the
     * jar (then Spark reports a ClassNotFound instead of the reason).
     */
    static final String MARKER = "SegmentTooLarge";

    private SegmentBounds() {}

    /** Refuses {@code file} when a row group of {@code blocks} declares more than its rows may hold. */
    static void check(ScanPlan.FileRead file, List<BlockMetaData> blocks) {
        long limit = file.maxMessageBytes;
        if (limit < 0) {
            return;
        }
        long allowance = 2 * limit + ROW_OVERHEAD_BYTES;
        for (int i = 0; i < blocks.size(); i++) {
            BlockMetaData group = blocks.get(i);
            long rows = group.getRowCount();
            long declared = group.getTotalByteSize();
            // saturating: a forged row count cannot wrap the bound around
            long bound = rows > (Long.MAX_VALUE - GROUP_OVERHEAD_BYTES) / allowance
                ? Long.MAX_VALUE : rows * allowance + GROUP_OVERHEAD_BYTES;
            if (declared > bound) {
                throw new IllegalStateException("spark_pubsub: " + MARKER + ": segment '" + file.path
                    + "' (topic " + file.topic + ", base offset " + file.baseOffset + ") declares " + declared
                    + " bytes uncompressed for " + rows + " row(s) in row group " + i
                    + ", more than messages of maxMessageSize=" + limit + " can hold; the read delivers none of it."
                    + "  If its messages are genuine, raise maxMessageSize (broker configuration) and read again;"
                    + " otherwise run `pubsub topics check TOPIC --repair --execute` to set it aside (its messages"
                    + " are then recorded as lost)");
            }
        }
    }
}
