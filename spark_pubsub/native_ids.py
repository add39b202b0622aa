"""Each native-scan row's offset, entry id and batch index as Spark expressions, built on the driver.

Spark's Parquet reader gives every row ``_metadata.file_name`` and ``_metadata.row_index``; the
planned snapshot (``native_plan``) gives each file's base offset and the runs that turn an offset
into an entry id and batch index.  The lookups are exact and cost a few comparisons per row:

* file -> base offset: a balanced binary search over the planned files' ``xxhash64(file_name)``
  (computed on the driver by ``spark_pubsub.xxhash64``), written as nested ``CASE WHEN hash < pivot``
  with literal leaves (no join, no broadcast), for up to ``FILE_SEARCH_LIMIT`` files per scan; each
  leaf checks its hash, so a file that is not in the plan fails the query rather than borrow a
  base offset (Spark reads only the files it is given, so this never fires).  Hashing the name once
  and comparing longs costs less than comparing the names (measured: about a fifth of the scan's
  CPU against a few percent).  Above the limit, a literal map from hash to base offset
  (``element_at``), which Spark 4 looks up through a hash index built once per task when the map
  has ``spark.sql.optimizer.mapLookupHashThreshold`` entries (a smaller map is padded with keys
  that map to null, so a stray file still fails): the same code size and about the same cost per
  row at any number of files, and no join.  Where Spark has no hashed map lookup (that setting is
  unknown), or two planned names share a hash, a broadcast hash join on the file name.
* offset -> (entry id, batch index): a binary search over the runs in the same way for up to
  ``RUN_SEARCH_LIMIT`` runs (a topic of single entries or of equal batches is one run: plain
  arithmetic), else a broadcast join on the offset bucket (``native_plan.run_table``).

Expressions are pruned with the columns they feed: a query that does not select ``messageId``
(or ``offset``) never evaluates them.  The limits keep the generated row loop of one scan under
HotSpot's 8,000 bytes of bytecode per method: a longer method is never JIT-compiled, so every row
of the scan would run in the bytecode interpreter (each leaf of a search adds ~100 bytes; 64 file
leaves alone reached 8,077).  Far larger searches would not even compile (64 KB: a search over
256 names), and Spark would fall back to its slower, interpreted evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_pubsub.native_plan import OffsetRun, SegmentRead, offset_runs, run_table
from spark_pubsub.xxhash64 import spark_xxhash64

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

FILE_SEARCH_LIMIT = 32
"""Files per scan whose base offsets are looked up by a search; more: a literal map (or a join)."""

FILE_MAP_PAD_LIMIT = 4096
"""The most entries a base-offset map is padded to for Spark to look it up by hash (the session's
``spark.sql.optimizer.mapLookupHashThreshold``, 1000 by default); above it, a smaller map would be
scanned linearly per row, so the scan joins instead."""

HASHED_MAP_CONF = "spark.sql.optimizer.mapLookupHashThreshold"

RUN_SEARCH_LIMIT = 8
"""Runs per scan mapped to ids by expression; more: a broadcast join on the offset bucket."""

FILE = "_pubsub_file"
ROW = "_pubsub_row"
OFFSET = "_pubsub_offset"
_RUN = "_pubsub_run_"  # prefix of the run table's columns once joined
_STRAY = "spark_pubsub: Spark read a file that is not in the planned snapshot: "


@dataclass(frozen=True)
class Positions:
    """A scan's rows with what their positions need (``frame``), and the position expressions.

    ``single_entries``: every run holds single entries, so ``batch`` is the literal -1.
    """

    frame: DataFrame
    offset: Column
    entry: Column
    batch: Column
    single_entries: bool


def search(key: str, pivots: Sequence[int], leaves: Sequence[str]) -> str:
    """SQL for ``leaves[i]`` where ``pivots[i] <= key < pivots[i + 1]`` (``leaves[0]`` also below
    ``pivots[0]``): a balanced binary search, ``ceil(log2(len(leaves)))`` comparisons per row.  Built
    as text and parsed once by Spark (``F.expr``): one call to the JVM however large the search,
    where building it column by column costs one call per node."""
    if len(leaves) == 1:
        return leaves[0]
    mid = len(leaves) // 2
    return (f"CASE WHEN {key} < {_long(pivots[mid])} THEN {search(key, pivots[:mid], leaves[:mid])} "
            f"ELSE {search(key, pivots[mid:], leaves[mid:])} END")


def _long(value: int) -> str:
    """A SQL bigint literal (the smallest long has no positive counterpart to negate)."""
    return "(-9223372036854775807L - 1L)" if value == -(1 << 63) else f"{value}L"


def positions(spark: Any, F: Any, rows: DataFrame, reads: tuple[SegmentRead, ...]) -> Positions:
    """Offsets, entry ids and batch indexes of ``rows`` (a scan of ``reads``' files with ``FILE`` and
    ``ROW`` columns), restricted to the planned rows of each file."""
    frame = _with_offsets(spark, F, rows, reads)
    first, last = reads[0], reads[-1]
    lo, hi = first.segment.base_offset + first.row_lo, last.segment.base_offset + last.row_hi
    if first.row_lo > 0 or last.row_hi < last.segment.num_records:  # only the ends can be partial
        frame = frame.where((F.col(OFFSET) >= lo) & (F.col(OFFSET) < hi))
    runs = offset_runs(reads)
    offset = F.col(OFFSET)
    single = all(r.size < 0 for r in runs)
    if len(runs) <= RUN_SEARCH_LIMIT:
        pivots = [r.lo for r in runs]
        entry = F.expr(search(OFFSET, pivots, [_entry_of(r) for r in runs]))
        batch = F.lit(-1) if single else F.expr(search(OFFSET, pivots, [_batch_of(r) for r in runs]))
        return Positions(frame, offset, entry, batch, single)
    table, shift = run_table(runs)
    ids = spark.createDataFrame(table)
    ids = ids.select(*[F.col(n).alias(_RUN + n) for n in table.column_names]).hint("broadcast")
    run = {n: F.col(_RUN + n) for n in table.column_names}
    frame = frame.join(ids, (F.shiftright(offset, shift) == run["bucket"]) & (offset >= run["lo"])
                       & (offset < run["hi"]))
    rel = offset - run["start"]
    batched = run["size"] > 0
    entry = run["entry_base"] + F.when(batched, F.expr(f"({OFFSET} - {_RUN}start) div {_RUN}size")).otherwise(rel)
    batch = F.when(batched, F.pmod(rel, run["size"])).otherwise(F.lit(-1))
    return Positions(frame, offset, entry, batch, single)


def _with_offsets(spark: Any, F: Any, rows: DataFrame, reads: tuple[SegmentRead, ...]) -> DataFrame:
    """``rows`` with ``OFFSET = base_offset(file) + row index``."""
    by_hash = sorted((spark_xxhash64(r.segment.path), r.segment.base_offset) for r in reads)
    unique = len({h for h, _ in by_hash}) == len(by_hash)
    key = f"xxhash64({FILE})"
    # a row whose file hash is not planned finds no base offset (null): it fails the query, naming
    # the file, instead of taking a neighbour's base offset
    stray = f"CAST(raise_error(concat('{_STRAY}', {FILE})) AS BIGINT)"
    if unique and len(by_hash) <= FILE_SEARCH_LIMIT:
        leaves = [f"CASE WHEN {key} = {_long(h)} THEN {_long(b)} END" for h, b in by_hash]
        base = f"coalesce({search(key, [h for h, _ in by_hash], leaves)}, {stray})"
        return rows.withColumn(OFFSET, F.expr(f"{base} + {ROW}"))
    entries = hashed_map_entries(spark) if unique else None
    if entries is not None and entries <= max(len(by_hash), FILE_MAP_PAD_LIMIT):
        base = f"coalesce(element_at({base_offset_map(by_hash, entries)}, {key}), {stray})"
        return rows.withColumn(OFFSET, F.expr(f"{base} + {ROW}"))
    by_name = sorted((r.segment.path, r.segment.base_offset) for r in reads)
    files = spark.createDataFrame(pa.table({"_pubsub_name": [n for n, _ in by_name],
                                            "_pubsub_base": pa.array([b for _, b in by_name], pa.int64())}))
    joined = rows.join(files.hint("broadcast"), F.col(FILE) == F.col("_pubsub_name"))
    return joined.withColumn(OFFSET, F.col("_pubsub_base") + F.col(ROW))


def hashed_map_entries(spark: Any) -> int | None:
    """How many entries a literal map needs for this session's Spark to look a key up through a hash
    index (``HASHED_MAP_CONF``); None where Spark knows no such setting (it scans literal maps)."""
    try:  # no default given: a registered setting reads as its default, an unknown one raises
        value = spark.conf.get(HASHED_MAP_CONF)
    except Exception:  # this Spark has no such setting
        return None
    try:
        return None if value is None else max(int(value), 1)
    except ValueError:
        return None


def base_offset_map(by_hash: Sequence[tuple[int, int]], entries: int) -> str:
    """SQL for a literal map ``xxhash64(file name) -> base offset`` of at least ``entries`` entries:
    the planned files, padded with keys of no planned file that map to null (a row whose file hash
    meets one still finds no base offset, so the stray check holds)."""
    planned = {h for h, _ in by_hash}
    keys = [_long(h) for h, _ in by_hash]
    values = [_long(b) for _, b in by_hash]
    filler = 0
    while len(keys) < entries:
        if filler not in planned:
            keys.append(_long(filler))
            values.append("NULL")
        filler += 1
    return f"map_from_arrays(array({', '.join(keys)}), array({', '.join(values)}))"


def _entry_of(run: OffsetRun) -> str:
    if run.size < 0:
        return f"{OFFSET} + {_long(run.entry_base - run.start)}"
    return f"{_long(run.entry_base)} + ({OFFSET} - {_long(run.start)}) div {_long(run.size)}"


def _batch_of(run: OffsetRun) -> str:
    if run.size < 0:
        return "-1L"
    return f"({OFFSET} - {_long(run.start)}) % {_long(run.size)}"


__all__ = ["FILE", "FILE_MAP_PAD_LIMIT", "FILE_SEARCH_LIMIT", "HASHED_MAP_CONF", "OFFSET", "ROW", "RUN_SEARCH_LIMIT",
           "Positions", "base_offset_map", "hashed_map_entries", "positions", "search"]
