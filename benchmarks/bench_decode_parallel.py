"""Where the decode of a backlog of tiny segments can run: one thread, a thread pool, a helper process.

Run from the repository root::

    .venv/bin/python benchmarks/bench_decode_parallel.py [--segments N] [--window W] [--repeats R]

Issue #10 asks a consumer process to drain a backlog of 3-message segments at >= 20,000 msg/s.  The
consumer's CPU goes mostly to one Parquet open + decode per segment (``decode_segment``, ~130 us
here, D77), and pyarrow releases the GIL while it decodes, so the question this answers is whether
more cores can take that work, measured on the same files in the same run:

a. one thread decodes every file (what a consumer's dispatch thread or its one readahead thread does);
b. a pool of ``--threads`` threads decodes them (each file re-takes the GIL several times, so the
   threads queue for it behind each other and behind any thread running Python);
c. a helper process decodes windows of ``--window`` files and sends each window back as one Arrow IPC
   stream, which the calling process reads and slices into per-segment tables (what a segment cache
   would hold): the calling process's own CPU per file is what stays on its GIL;
d. one C++ call per window of ``--window`` files (``pyarrow.dataset.FileSystemDataset.from_paths`` with
   the known schema, no inference, ``to_table(use_threads=True)`` on Arrow's own thread pool, so the
   GIL is not re-taken per file), split back into per-segment tables by their row counts (D94).

Figures per file: wall time and the CPU of the calling process (for c also the helper's own; the
helper is started once and warmed up before timing, as a consumer would keep it), each the median of
``--repeats`` interleaved runs, with ratios against a.  This is a benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

_REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_REPO))

from broker_core.log.segment import SEGMENT_SCHEMA, decode_segment, encode_segment  # noqa: E402

MESSAGES_PER_SEGMENT = 3
VALUE_BYTES = 100
_HEADER = struct.Struct("<qd")  # a helper's answer: IPC stream bytes, its CPU seconds so far


def make_segments(folder: str, count: int) -> list[str]:
    """``count`` segment files of 3 x 100-byte messages, encoded as producers write them."""
    paths = []
    for i in range(count):
        rows = [{"value": b"x" * VALUE_BYTES, "sticky_key_hash": 0, "producer_name": "p",
                 "sequence_id": MESSAGES_PER_SEGMENT * i + j, "publish_time": 1_700_000_000_000_000 + i}
                for j in range(MESSAGES_PER_SEGMENT)]
        path = os.path.join(folder, f"part-{i:032x}.parquet")
        with open(path, "wb") as handle:
            handle.write(encode_segment(pa.Table.from_pylist(rows, schema=SEGMENT_SCHEMA)).to_pybytes())
        paths.append(path)
    return paths


def decode(path: str) -> pa.Table:
    """As a consumer reads a small local segment (``log.segment._open``): one read, decoded from memory."""
    with open(path, "rb") as handle:
        return decode_segment(pa.BufferReader(handle.read()))


def helper_main() -> None:
    """The helper process: decode each window of paths read from stdin, answer with one IPC stream."""
    out = sys.stdout.buffer
    for line in sys.stdin:
        tables = [decode(path) for path in json.loads(line)]
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, SEGMENT_SCHEMA) as writer:
            writer.write_table(pa.concat_tables(tables).combine_chunks())
        data = sink.getvalue()
        out.write(_HEADER.pack(data.size, time.process_time()))
        out.write(data)
        out.flush()


def one_thread(paths: list[str]) -> None:
    for path in paths:
        decode(path)


def thread_pool(paths: list[str], pool: ThreadPoolExecutor) -> None:
    list(pool.map(decode, paths, chunksize=16))


class Helper:
    """A helper process, started once (as a consumer would keep one) and warmed up before timing."""

    def __init__(self, warm_up: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--helper"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.cpu_s = 0.0
        self.send(warm_up)
        self.receive()

    def send(self, paths: list[str]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(paths) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self) -> pa.Table:
        assert self.proc.stdout is not None
        size, self.cpu_s = _HEADER.unpack(self.proc.stdout.read(_HEADER.size))
        return pa.ipc.open_stream(pa.py_buffer(self.proc.stdout.read(size))).read_all()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


def helper_process(paths: list[str], window: int, helper: Helper) -> float:
    """Decode in the helper, one window in flight ahead; returns the helper's CPU seconds for it."""
    cpu_before = helper.cpu_s
    windows = [paths[i:i + window] for i in range(0, len(paths), window)]
    helper.send(windows[0])
    for i, names in enumerate(windows):
        if i + 1 < len(windows):  # one window in flight ahead, as a readahead would ask
            helper.send(windows[i + 1])
        table = helper.receive()
        rows = [table.slice(MESSAGES_PER_SEGMENT * j, MESSAGES_PER_SEGMENT) for j in range(len(names))]
        assert sum(r.num_rows for r in rows) == MESSAGES_PER_SEGMENT * len(names)
    return helper.cpu_s - cpu_before


def dataset_windows(paths: list[str], window: int) -> None:
    """Each window of files decoded by one dataset scan, split into per-segment tables; the scan keeps
    the order of the files it is given (checked: the sequence ids come back ascending)."""
    fmt = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))
    filesystem = pafs.LocalFileSystem()
    for i in range(0, len(paths), window):
        names = paths[i:i + window]
        table = ds.FileSystemDataset.from_paths(names, schema=SEGMENT_SCHEMA, format=fmt,
                                                filesystem=filesystem).to_table(use_threads=True)
        rows = [table.slice(MESSAGES_PER_SEGMENT * j, MESSAGES_PER_SEGMENT) for j in range(len(names))]
        assert sum(r.num_rows for r in rows) == MESSAGES_PER_SEGMENT * len(names)
        sequence = table.column("sequence_id").to_numpy()
        assert (sequence[1:] > sequence[:-1]).all(), "the scan reordered the files"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=3000)
    parser.add_argument("--window", type=int, default=300, help="files per helper round trip")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--helper", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.helper:
        helper_main()
        return
    folder = tempfile.mkdtemp(prefix="bench-decode-")
    load_before = os.getloadavg()[0]
    try:
        paths = make_segments(folder, opts.segments)
        pq.read_metadata(paths[0])  # pyarrow's lazy imports, outside the timings
        pool = ThreadPoolExecutor(opts.threads)
        helper = Helper(paths[:opts.window])
        runs: dict[str, list[tuple[float, float]]] = {"one thread": [], f"{opts.threads} threads": [],
                                                      "helper process": [], "dataset window": []}
        helper_cpu: list[float] = []
        for _ in range(opts.repeats):  # interleaved, so background load hits all three alike
            for label in runs:
                start, cpu = time.perf_counter(), time.process_time()
                if label == "one thread":
                    one_thread(paths)
                elif label == "helper process":
                    helper_cpu.append(helper_process(paths, opts.window, helper))
                elif label == "dataset window":
                    dataset_windows(paths, opts.window)
                else:
                    thread_pool(paths, pool)
                runs[label].append((time.perf_counter() - start, time.process_time() - cpu))
        pool.shutdown()
        helper.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    n = opts.segments
    median = {label: (sorted(r[0] for r in v)[len(v) // 2], sorted(r[1] for r in v)[len(v) // 2])
              for label, v in runs.items()}
    base_wall = median["one thread"][0]
    print(f"decode of {n:,} segments of {MESSAGES_PER_SEGMENT} x {VALUE_BYTES} B; {os.cpu_count()} CPUs, load "
          f"average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after; medians of {opts.repeats}")
    print(f"{'variant':<18}{'wall us/file':>14}{'ratio':>8}{'caller CPU us/file':>20}{'msg/s (wall)':>14}")
    for label, (wall, cpu) in median.items():
        print(f"{label:<18}{wall / n * 1e6:>14,.1f}{base_wall / wall:>7.2f}x{cpu / n * 1e6:>20,.1f}"
              f"{n * MESSAGES_PER_SEGMENT / wall:>14,.0f}")
    print(f"the helper process's own CPU: {sorted(helper_cpu)[len(helper_cpu) // 2] / n * 1e6:,.1f} us/file")


if __name__ == "__main__":
    main()
