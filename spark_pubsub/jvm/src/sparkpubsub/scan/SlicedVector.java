package sparkpubsub.scan;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/** Rows [from, from + count) of another vector: a file's first or last batch of a partial read. */
final class SlicedVector extends ColumnVector {
    private ColumnVector inner;
    private int from;
    private int count;

    SlicedVector(ColumnVector inner) {
        super(inner.dataType());
        this.inner = inner;
    }

    void slice(ColumnVector vector, int start, int rows) {
        inner = vector;
        from = start;
        count = rows;
    }

    @Override public void close() {}
    @Override public boolean hasNull() { return numNulls() > 0; }
    @Override public int numNulls() {
        if (!inner.hasNull()) {
            return 0;
        }
        int n = 0;
        for (int i = 0; i < count; i++) {
            n += inner.isNullAt(from + i) ? 1 : 0;
        }
        return n;
    }
    @Override public boolean isNullAt(int rowId) { return inner.isNullAt(from + rowId); }
    @Override public boolean getBoolean(int rowId) { return inner.getBoolean(from + rowId); }
    @Override public byte getByte(int rowId) { return inner.getByte(from + rowId); }
    @Override public short getShort(int rowId) { return inner.getShort(from + rowId); }
    @Override public int getInt(int rowId) { return inner.getInt(from + rowId); }
    @Override public long getLong(int rowId) { return inner.getLong(from + rowId); }
    @Override public float getFloat(int rowId) { return inner.getFloat(from + rowId); }
    @Override public double getDouble(int rowId) { return inner.getDouble(from + rowId); }
    @Override public ColumnarArray getArray(int rowId) { return inner.getArray(from + rowId); }
    @Override public ColumnarMap getMap(int ordinal) { return inner.getMap(from + ordinal); }
    @Override public Decimal getDecimal(int rowId, int precision, int scale) {
        return inner.getDecimal(from + rowId, precision, scale);
    }
    @Override public UTF8String getUTF8String(int rowId) { return inner.getUTF8String(from + rowId); }
    @Override public byte[] getBinary(int rowId) { return inner.getBinary(from + rowId); }
    @Override public ColumnVector getChild(int ordinal) {
        throw new UnsupportedOperationException("spark_pubsub: a sliced vector has no children");
    }
}
