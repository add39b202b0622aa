"""Runs pyspark's own Python data source lookup (the code Spark runs in a fresh worker) and prints
the names it found, one per line.  Used from a process whose working directory is outside the repo."""

from __future__ import annotations

import io
import struct

from pyspark.sql.worker import lookup_data_sources


def main() -> None:
    out = io.BytesIO()
    lookup_data_sources._main(io.BytesIO(), out)
    data = out.getvalue()
    (count,) = struct.unpack(">i", data[:4])
    pos, names = 4, []
    for _ in range(count):
        (size,) = struct.unpack(">i", data[pos : pos + 4])
        names.append(data[pos + 4 : pos + 4 + size].decode())
        pos += 4 + size
        (size,) = struct.unpack(">i", data[pos : pos + 4])
        pos += 4 + size
    print("\n".join(names))


if __name__ == "__main__":
    main()
