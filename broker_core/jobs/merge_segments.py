"""Segment merging: rewrite runs of small, old, consecutive segments as one segment each (Delta's OPTIMIZE).

Every producer flush commits one small segment (``DECISIONS.md`` D8), so a busy topic grows
thousands of files an hour, and opening it, checkpointing it and reading it all cost time in
proportion to its live segments.  This job bin-packs them, the way Delta's OPTIMIZE does:

**Which segments.** Walk the live segments in offset order and cut them into *runs*.  A segment can
join a run when it is smaller than ``target_bytes``, at least ``min_age_ms`` old (by its ``add``'s
``modificationTime``, i.e. its commit: the tail that tailing readers are reading stays as it is), and
its codec is recognisable from its name.  A run only grows with a segment that continues it exactly
(its base offset and base entry id are the previous one's end, so the merged segment is contiguous in
both spaces, ``segment_ref``), has the same codec (the merged file keeps the log's codec) and keeps
the run's total input size within ``target_bytes``; anything else starts a new run.  Runs of fewer
than ``min_segments`` segments are left alone.  The pure function ``plan_runs`` is the whole rule.

**The rewrite.** A run becomes one file holding the same rows in the same order, encoded with the
run's codec, and its ``add`` carries tags computed from the run: the first segment's base offset and
base entry id, the summed record count, the normalised concatenation of the entry layouts and the
publish-time bounds.  Offsets and message ids are functions of those tags, so every reader, cursor,
compacted view and Spark offset means the same message after the merge as before.

**The commit**, one per run: a ``remove`` (``dataChange: false``, with ``deletionTimestamp``) per old
segment and one ``add`` (``dataChange: false``) of the merged one, ``"operation": "OPTIMIZE"``.  It
goes through the log's put-if-absent commit and its retry loop, and every attempt re-validates the
run against the latest log: every segment of the run must still be live at the same base offset.
Appends only add segments after the end, so losing a race to one just costs a retry (and appends are
never blocked: they retry the same way against our commit).  If retention or another merge removed a
segment of the run meanwhile, the run is abandoned and its new file deleted (it was never named).  A
kill before the commit leaves an orphan file that ``vacuum`` deletes; after it, the old files stay
as tombstones until ``vacuum`` deletes them, so readers holding an older snapshot finish their reads.

Merging rewrites data but changes no message, so it needs no dry-run safety margin the way deletion
does; it still defaults to ``dry_run=True`` like the other jobs that change storage.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from broker_core.broker.broker import Broker
from broker_core.jobs.progress import (
    JobSummary,
    check_flag,
    check_ms,
    existing_log,
    now_or,
    report_step,
    resolve_targets,
    run_each,
)
from broker_core.log.actions import Action, Add, Remove
from broker_core.log.segment import codec_of, encode_segment, new_segment_name, read_segment_checked
from broker_core.log.segment_ref import SegmentRef, normalise_layout
from broker_core.log.snapshot import Snapshot
from broker_core.naming import TopicName
from broker_core.topic.topic_log import TopicLog

MIB = 1 << 20
DEFAULT_TARGET_BYTES = 128 * MIB
DEFAULT_MIN_SEGMENTS = 2
DEFAULT_MIN_AGE_MS = 10 * 60_000
OPERATION = "OPTIMIZE"

# --- the plan ---------------------------------------------------------------------------------------


def _continues(prev: SegmentRef, seg: SegmentRef) -> bool:
    return seg.base_offset == prev.end_offset and seg.base_entry_id == prev.end_entry_id


def plan_runs(
    segments: Sequence[SegmentRef], *, target_bytes: int, min_segments: int, min_age_ms: int, now_ms: int
) -> list[tuple[SegmentRef, ...]]:
    """The runs to merge, in offset order (a pure function; the rule is in the module docstring)."""
    runs: list[tuple[SegmentRef, ...]] = []
    current: list[SegmentRef] = []
    size = 0
    for seg in segments:
        codec = codec_of(seg.path)
        eligible = (codec is not None and seg.size_bytes < target_bytes
                    and now_ms - seg.modification_time_ms >= min_age_ms)
        joins = (eligible and bool(current) and _continues(current[-1], seg)
                 and codec_of(current[-1].path) == codec and size + seg.size_bytes <= target_bytes)
        if not joins:
            if len(current) >= min_segments:
                runs.append(tuple(current))
            current, size = [], 0
        if eligible:
            current.append(seg)
            size += seg.size_bytes
    if len(current) >= min_segments:
        runs.append(tuple(current))
    return runs


def merged_ref(run: Sequence[SegmentRef], *, path: str, size_bytes: int, now_ms: int) -> SegmentRef:
    """The ``SegmentRef`` (hence the ``add`` tags) of a run rewritten as one segment at ``path``."""
    layout: list[int] = []
    for seg in run:
        layout.extend(seg.layout)
    return SegmentRef(
        path=path,
        base_offset=run[0].base_offset,
        num_records=sum(s.num_records for s in run),
        base_entry_id=run[0].base_entry_id,
        layout=normalise_layout(layout),
        size_bytes=size_bytes,
        min_publish_ms=min(s.min_publish_ms for s in run),
        max_publish_ms=max(s.max_publish_ms for s in run),
        modification_time_ms=now_ms,
    )


# --- the result -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MergedRun:
    """One run: its segments, what it became, and whether it was merged.

    Attributes:
        status: ``planned`` (dry run), ``merged`` (committed at ``version``) or ``abandoned`` (a
            segment of it was removed meanwhile; its new file was deleted).
    """

    paths: tuple[str, ...]
    base_offset: int
    num_records: int
    bytes_in: int
    status: str
    merged_path: str | None = None
    bytes_out: int = 0
    version: int | None = None


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What merging did (or, in a dry run, would do) to one internal topic.

    Attributes:
        segments_before: live segments when the job planned.
        segments_after: that count after the merged (or, in a dry run, planned) runs.
        bytes_in, bytes_out: bytes of the merged segments and of the files that replaced them.
        runs: every planned run and its outcome.
        removed_paths, added_paths: segment files retired and written by committed runs.
    """

    topic: str
    segments_before: int
    segments_after: int
    bytes_in: int
    bytes_out: int
    runs: tuple[MergedRun, ...]
    removed_paths: tuple[str, ...]
    added_paths: tuple[str, ...]
    dry_run: bool

    @property
    def changed(self) -> bool:
        return any(r.status == "merged" for r in self.runs)

    @property
    def abandoned_runs(self) -> int:
        return sum(r.status == "abandoned" for r in self.runs)

    def describe(self) -> str:
        if self.dry_run:
            planned = sum(len(r.paths) for r in self.runs)
            return (f"would merge {planned} segment(s) ({self.bytes_in} bytes) in {len(self.runs)} run(s); "
                    f"segments {self.segments_before} -> {self.segments_after}")
        merged = [r for r in self.runs if r.status == "merged"]
        return (f"merged {len(self.removed_paths)} segment(s) in {len(merged)} run(s), {self.bytes_in} -> "
                f"{self.bytes_out} bytes; segments {self.segments_before} -> {self.segments_after}; "
                f"{self.abandoned_runs} run(s) abandoned (segments removed meanwhile)")


# --- the job ----------------------------------------------------------------------------------------


def check_options(target_bytes: object, min_segments: object, min_age_ms: object) -> tuple[int, int, int]:
    """The job's options checked (``InvalidConfiguration`` naming the bad one), before anything runs."""
    target = check_ms(target_bytes, "target_bytes", minimum=1)
    least = check_ms(min_segments, "min_segments", minimum=2)
    age = check_ms(min_age_ms, "min_age_ms")
    assert target is not None and least is not None and age is not None
    return target, least, age


def merge_segments(
    broker: Broker,
    topic: str | TopicName,
    *,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    min_segments: int = DEFAULT_MIN_SEGMENTS,
    min_age_ms: int = DEFAULT_MIN_AGE_MS,
    dry_run: bool = True,
    now_ms: int | None = None,
) -> JobSummary[MergeResult]:
    """Merge runs of small, old, consecutive segments of each internal topic into one segment each.

    Args:
        broker: the storage root's broker.
        topic: a topic (all its partitions) or a namespace ``tenant/namespace``.
        target_bytes: segments this large or larger are left alone, and a run's input stays within it.
        min_segments: the fewest segments worth merging into one (at least 2).
        min_age_ms: segments committed more recently than this stay (the tail tailing readers read).
        dry_run: plan only (the default); commit and write nothing.
        now_ms: "now" for the age rule (defaults to the wall clock).

    Returns:
        One ``MergeResult`` per internal topic.

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist.
        InvalidConfiguration: a bad argument (nothing changed).
    """
    check_flag(dry_run, "dry_run")
    target, least, age = check_options(target_bytes, min_segments, min_age_ms)
    now = now_or(now_ms)
    name, partitions = resolve_targets(broker, topic)
    return run_each(
        "merge-segments",
        name,
        partitions,
        lambda part: _merge(broker, part, target=target, least=least, age=age, now=now, dry_run=dry_run),
        dry_run=dry_run,
    )


def _merge(broker: Broker, topic: TopicName, *, target: int, least: int, age: int, now: int,
           dry_run: bool) -> MergeResult:
    log = existing_log(broker, topic)
    if log is None:
        return MergeResult(str(topic), 0, 0, 0, 0, (), (), (), dry_run)
    snap = log.snapshot()
    runs = plan_runs(snap.segments, target_bytes=target, min_segments=least, min_age_ms=age, now_ms=now)
    if dry_run:
        done = [MergedRun(tuple(s.path for s in run), run[0].base_offset, sum(s.num_records for s in run),
                          sum(s.size_bytes for s in run), "planned") for run in runs]
    else:
        done = []
        for index, run in enumerate(runs):  # rewriting is the long part: say which run is being written
            report_step("merge-segments", f"run {index + 1}/{len(runs)} ({len(run)} segments)")
            done.append(merge_run(log, run))
    merged = [r for r in done if r.status in ("merged", "planned")]
    return MergeResult(
        topic=str(topic),
        segments_before=len(snap.segments),
        segments_after=len(snap.segments) - sum(len(r.paths) - 1 for r in merged),
        bytes_in=sum(r.bytes_in for r in merged),
        bytes_out=sum(r.bytes_out for r in merged),
        runs=tuple(done),
        removed_paths=tuple(p for r in done if r.status == "merged" for p in r.paths),
        added_paths=tuple(r.merged_path for r in done if r.status == "merged" and r.merged_path),
        dry_run=dry_run,
    )


class _Abandoned(Exception):
    """Raised by the commit's ``build`` when a segment of the run is no longer live."""


def _read_run(log: TopicLog, run: Sequence[SegmentRef]) -> pa.Table:
    """The run's rows, read as consumers read them: a missing or changed segment, or one holding a
    message above ``maxMessageSize`` (a decompression bomb, D125), is refused before it is merged."""
    return pa.concat_tables([read_segment_checked(log.io, log.path, seg, max_message_bytes=log.max_message_bytes)
                             for seg in run])


def merge_run(log: TopicLog, run: Sequence[SegmentRef]) -> MergedRun:
    """Rewrite one run as one segment and commit the swap, or abandon it (see the module docstring)."""
    codec = codec_of(run[0].path)
    assert codec is not None  # plan_runs only takes segments whose codec it knows
    rows = _read_run(log, run)
    path = new_segment_name(codec)
    data = encode_segment(rows, compression=codec)
    log.io.write_new(f"{log.path}/{path}", data, anchor=log.path)  # fsynced before the commit names it
    paths = tuple(s.path for s in run)
    parameters: dict[str, object] = {}

    def build(snap: Snapshot) -> list[Action]:
        for seg in run:  # validated against the latest log on every attempt
            i = snap.segment_index_for(seg.base_offset)
            if i >= len(snap.segments) or snap.segments[i].path != seg.path:
                raise _Abandoned(seg.path)
        now_ms = time.time_ns() // 1_000_000  # real time: vacuum's minimum age counts from it
        ref = merged_ref(run, path=path, size_bytes=len(data), now_ms=now_ms)
        actions: list[Action] = [
            Remove(path=seg.path, data_change=False, deletion_timestamp=now_ms, extended_file_metadata=True,
                   partition_values={}, size=seg.size_bytes)
            for seg in run
        ]
        actions.append(Add(path=path, size=len(data), modification_time=now_ms, data_change=False,
                           stats=f'{{"numRecords":{ref.num_records}}}', tags=ref.tags()))
        parameters.clear()  # commit() renders commitInfo from this dict after build returns
        parameters.update(mergedSegments=len(run), baseOffset=ref.base_offset, numRecords=ref.num_records)
        return actions

    base = MergedRun(paths, run[0].base_offset, rows.num_rows, sum(s.size_bytes for s in run), "abandoned")
    try:
        result = log.log.commit(build, operation=OPERATION, parameters=parameters)
    except _Abandoned:
        log.io.delete(f"{log.path}/{path}")  # no commit names it: nobody can have opened it
        return base
    # any other error leaves the file: the commit may have landed, and vacuum removes an orphan
    return MergedRun(paths, base.base_offset, base.num_records, base.bytes_in, "merged", path, len(data),
                     result.version)


__all__ = [
    "DEFAULT_MIN_AGE_MS",
    "DEFAULT_MIN_SEGMENTS",
    "DEFAULT_TARGET_BYTES",
    "OPERATION",
    "MergeResult",
    "MergedRun",
    "check_options",
    "codec_of",
    "merge_run",
    "merge_segments",
    "merged_ref",
    "plan_runs",
]
