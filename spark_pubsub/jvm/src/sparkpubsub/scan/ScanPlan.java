package sparkpubsub.scan;

import java.io.Serializable;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The driver's plan of a read, as spark_pubsub.native_plan computes it, parsed from the text the
 * Python driver passes as the "plan" option: one line per planned segment file
 * ({@code F path sizeBytes rowLo rowHi baseOffset ledgerId partition topic internalTopic maxMessageBytes},
 * strings percent-encoded; a line without the last field reads the file unbounded) followed by the layout runs that give its rows their message ids
 * ({@code R lo hi start entryBase size}, in the offset space, size -1 for single entries).
 */
final class ScanPlan {
    private ScanPlan() {}

    /** One planned segment file: rows [rowLo, rowHi) of it, and what its rows' ids are made of. */
    static final class FileRead implements Serializable {
        private static final long serialVersionUID = 1L;
        final String path;
        final long sizeBytes;
        final long rowLo;
        final long rowHi;
        final long baseOffset;
        final long ledgerId;
        final int partition;
        final String topic;
        final String internalTopic;
        /** maxMessageSize of the file's topic: its footer is checked against it (SegmentBounds); -1: not. */
        final long maxMessageBytes;
        long[] runs = new long[0]; // lo, hi, start, entryBase, size per run, flattened

        FileRead(String[] f) {
            path = decode(f[1]);
            sizeBytes = Long.parseLong(f[2]);
            rowLo = Long.parseLong(f[3]);
            rowHi = Long.parseLong(f[4]);
            baseOffset = Long.parseLong(f[5]);
            ledgerId = Long.parseLong(f[6]);
            partition = Integer.parseInt(f[7]);
            topic = decode(f[8]);
            internalTopic = decode(f[9]);
            maxMessageBytes = f.length > 10 ? Long.parseLong(f[10]) : -1;
        }
    }

    static List<FileRead> parse(String text) {
        List<FileRead> files = new ArrayList<>();
        for (String line : (text == null ? "" : text).split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split(" ");
            if (f[0].equals("F") && (f.length == 10 || f.length == 11)) {
                files.add(new FileRead(f));
            } else if (f[0].equals("R") && f.length == 6 && !files.isEmpty()) {
                FileRead last = files.get(files.size() - 1);
                long[] runs = java.util.Arrays.copyOf(last.runs, last.runs.length + 5);
                for (int i = 0; i < 5; i++) {
                    runs[last.runs.length + i] = Long.parseLong(f[i + 1]);
                }
                last.runs = runs;
            } else {
                throw new IllegalArgumentException("spark_pubsub: bad line in the scan plan: " + line);
            }
        }
        return files;
    }

    /**
     * Consecutive files grouped into Spark partitions as Spark packs a file scan's small files: each
     * file costs its size plus the open cost, and a partition holds up to
     * {@code min(maxPartitionBytes, max(openCost, total / parallelism))}.  Files are not split.
     */
    static List<List<FileRead>> pack(List<FileRead> files, long maxPartitionBytes, long openCostBytes, int parallelism) {
        long total = 0;
        for (FileRead f : files) {
            total += f.sizeBytes + openCostBytes;
        }
        long target = Math.min(maxPartitionBytes, Math.max(openCostBytes, total / Math.max(parallelism, 1)));
        List<List<FileRead>> parts = new ArrayList<>();
        List<FileRead> current = new ArrayList<>();
        long bytes = 0;
        for (FileRead f : files) {
            long cost = f.sizeBytes + openCostBytes;
            if (!current.isEmpty() && bytes + cost > target) {
                parts.add(current);
                current = new ArrayList<>();
                bytes = 0;
            }
            current.add(f);
            bytes += cost;
        }
        if (!current.isEmpty()) {
            parts.add(current);
        }
        return parts;
    }

    private static String decode(String s) {
        return URLDecoder.decode(s, StandardCharsets.UTF_8);
    }
}
