package sparkpubsub.scan;

/**
 * The decimal text of a non-decreasing sequence of longs (a batch's entry ids), kept from one value
 * to the next: the next id is usually the same or one more, which costs a carry, not a conversion.
 */
final class DecimalCounter {
    private final byte[] digits = new byte[20];
    private int length;
    private long value = Long.MIN_VALUE;

    /** Writes {@code next} in decimal into {@code buf} at {@code at}; returns the position after it. */
    int put(long next, byte[] buf, int at) {
        if (next == value + 1 && next > 0) {
            increment();
        } else if (next != value || value == Long.MIN_VALUE) {
            length = SegmentReader.putLong(digits, 0, next);
        }
        value = next;
        System.arraycopy(digits, 0, buf, at, length);
        return at + length;
    }

    private void increment() {
        int i = length - 1;
        while (i >= 0 && digits[i] == '9') {
            digits[i--] = '0';
        }
        if (i >= 0) {
            digits[i]++;
        } else { // 99..9 + 1: one digit more
            System.arraycopy(digits, 0, digits, 1, length);
            digits[0] = '1';
            length++;
        }
    }
}
