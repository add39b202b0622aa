"""``check``: verify an internal topic's files, and optionally repair what can be repaired.

What is checked, per internal topic (``docs/CLI.md``, ``pubsub topics check``):

- **the log**: commits are contiguous (a missing version below the newest is a gap), every commit
  decodes, every path it names is a segment name, and it replays;
- **checkpoints** and the ``_last_checkpoint`` hint: each checkpoint decodes and agrees with its
  summary and with the JSON commits that remain (``log.checkpoint_verify``);
- **segments**: every live segment is there, decodes, and holds the rows its ``add`` records;
- **cursors**: the newest version of every subscription's cursor decodes;
- **the producer registry**: its newest version decodes (reported only: no safe fallback exists);
- **records** (``check_records``): the log's ``metaData`` (a Delta schema, Parquet, no partition
  columns, a known format version), the newest compacted-view pointer (decodes, names a view file
  that exists, a horizon within the log's offsets), and the topic's and its namespace's policy
  records (reported only: the fix is ``pubsub policies set`` or a restore).

What ``repair`` does (a dry run unless ``dry_run=False``):

- a damaged **checkpoint** is rebuilt from the JSON commits (the state at its version, replayed from
  an older readable checkpoint or version 0), and a damaged hint is rewritten;
- a damaged **segment** is set aside: its bytes are copied to ``<topic>/_damaged/<name>`` (for
  forensics), and one ``REPAIR`` commit removes it with a *data-loss record* (the ``remove`` keeps the
  segment's ``pubsub.*`` tags, so the lost offsets stay documented, plus ``pubsub.dataLoss``: why).
  Readers then skip the hole (``failOnDataLoss=false`` semantics) and the Spark source with
  ``failOnDataLoss=true`` fails naming it (``docs/PROTOCOL.md`` section 4.9);
- a damaged newest **cursor** version is superseded by a copy of the newest readable one.

A gap or an undecodable commit cannot be repaired here (nothing else holds what it held): the
finding says so, and the fix is to restore the file from a backup.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from broker_core.broker.broker import Broker
from broker_core.broker.tenancy import topic_dir
from broker_core.errors import BrokerPersistenceError, LogCorrupted, SegmentCorrupted, SymlinkRefused
from broker_core.jobs.progress import JobSummary, check_flag, existing_log, resolve_targets, run_each
from broker_core.log.actions import Action, Remove
from broker_core.log.checkpoint import LAST_CHECKPOINT, LOG_DIR, checkpoint_path, read_checkpoint, write_checkpoint
from broker_core.log.checkpoint_verify import replayed_state, verify_checkpoint
from broker_core.log.gaps import commit_path, commit_versions
from broker_core.log.segment import read_segment_checked
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import Snapshot
from broker_core.log.state_store import VersionedState
from broker_core.log.transaction_log import TransactionLog
from broker_core.naming import TopicName
from broker_core.storage import FileIO
from broker_core.subscription.cursor import Cursor
from broker_core.subscription.cursor_store import CURSORS_DIR, list_subscriptions

DAMAGED_DIR = "_damaged"
"""Where repair keeps a copy of each segment it set aside (hidden from Delta readers and vacuum)."""
TAG_DATA_LOSS = "pubsub.dataLoss"
"""The ``remove`` tag of a data-loss record: why the segment was set aside."""
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: what kind, which file, what is wrong, and what repair does (or "" if it cannot)."""

    kind: str
    file: str
    detail: str
    repair: str

    def describe(self) -> str:
        fix = f"; repair: {self.repair}" if self.repair else "; cannot be repaired here: restore it from a backup"
        return f"{self.kind} {self.file}: {self.detail}{fix}"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The findings on one internal topic, and what was repaired (nothing in a dry run)."""

    topic: str
    findings: tuple[Finding, ...]
    repaired: tuple[str, ...]
    dry_run: bool

    @property
    def changed(self) -> bool:
        return not self.dry_run and bool(self.repaired)

    @property
    def ok(self) -> bool:
        return not self.findings

    def describe(self) -> str:
        if not self.findings:
            return "ok"
        lines = [f"{len(self.findings)} problem(s)"] + [f"    {f.describe()}" for f in self.findings]
        if self.repaired:
            lines.append(f"    repaired: {', '.join(self.repaired)}")
        return "\n".join(lines)


def check_topic(broker: Broker, topic: str | TopicName, *, repair: bool = False,
                dry_run: bool = True) -> JobSummary[CheckResult]:
    """Check every internal topic of ``topic`` (a topic or ``tenant/namespace``); with ``repair`` and
    ``dry_run=False``, repair what can be repaired (see the module docstring).

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist.
        InvalidConfiguration: a bad argument.
    """
    check_flag(repair, "repair")
    check_flag(dry_run, "dry_run")
    target, partitions = resolve_targets(broker, topic)
    return run_each("check", target, partitions,
                    lambda part: _check(broker, part, execute=repair and not dry_run), dry_run=dry_run or not repair)


def _check(broker: Broker, topic: TopicName, *, execute: bool) -> CheckResult:
    log = existing_log(broker, topic)
    if log is None:
        return CheckResult(str(topic), (), (), not execute)
    io, path = broker.io, topic_dir(topic)
    findings: list[Finding] = []
    repaired: list[str] = []
    versions = commit_versions(io, path)
    present = set(versions)
    gaps = [v for v in range(versions[0], versions[-1]) if v not in present] if versions else []
    findings += [Finding("gap", commit_path(path, v), f"version {v} is missing although version "
                         f"{versions[-1]} exists", "") for v in gaps]
    bad_checkpoints = _check_checkpoints(io, path, findings)
    snap = None
    try:
        snap = TransactionLog(io, path, checkpoint_interval=1 << 62).snapshot()
    except LogCorrupted as exc:
        if not gaps:  # a gap was reported already, with the version it misses
            version = exc.context.get("version")
            file = commit_path(path, version) if isinstance(version, int) else f"{path}/{LOG_DIR}"
            findings.append(Finding("log", file, str(exc), ""))
    damaged: list[tuple[SegmentRef, str]] = []
    if snap is not None:
        for seg in snap.segments:
            try:
                read_segment_checked(io, path, seg, max_message_bytes=log.max_message_bytes)  # D125
            except SegmentCorrupted as exc:
                damaged.append((seg, str(exc)))
                findings.append(Finding("segment", f"{path}/{seg.path}", str(exc),
                                        f"set aside to {path}/{DAMAGED_DIR}/ with a data-loss record of offsets "
                                        f"{seg.base_offset}..{seg.end_offset - 1}"))
            except SymlinkRefused as exc:  # never set aside: that would copy what the link points at
                findings.append(Finding("segment", f"{path}/{seg.path}", str(exc), ""))
    cursors = _check_cursors(io, path, findings)
    findings += check_records(broker, topic, snap)
    try:  # the producer registry has no safe fallback (leases decide exclusivity): report only
        VersionedState(io, f"{path}/_producers", anchor=path).latest()
    except LogCorrupted as exc:
        findings.append(Finding("producers", f"{path}/_producers", str(exc), ""))
    if execute:
        repaired += _rebuild_checkpoints(io, path, bad_checkpoints)
        if damaged and snap is not None:
            repaired += _set_aside(broker, topic, damaged)
        for state, name in cursors:
            state.update(lambda doc: None if doc is None else dict(doc))
            repaired.append(name)
    return CheckResult(str(topic), tuple(findings), tuple(repaired), not execute)


def _check_checkpoints(io: FileIO, path: str, findings: list[Finding]) -> list[int]:
    """Damaged checkpoints (versions), and a hint that names nothing usable, as findings."""
    bad = []
    for name in io.list_dir(f"{path}/{LOG_DIR}"):
        match = _CHECKPOINT_RE.match(name)
        if match is None:
            continue
        version = int(match.group(1))
        try:
            state = read_checkpoint(io, path, version)
            wrong = None if state is None else verify_checkpoint(io, path, state)  # decodes, but lies?
        except LogCorrupted as exc:
            state, wrong = None, str(exc)
        if wrong is not None:
            bad.append(version)
            detail = wrong if state is None else f"disagrees with the JSON commits: {wrong}"
            findings.append(Finding("checkpoint", checkpoint_path(path, version), detail,
                                    "rebuilt from the JSON commits"))
    hint = io.read_bytes(f"{path}/{LOG_DIR}/{LAST_CHECKPOINT}")
    if hint is not None:
        try:
            int(json.loads(hint)["version"])
        except (ValueError, KeyError, TypeError, RecursionError):
            findings.append(Finding("hint", f"{path}/{LOG_DIR}/{LAST_CHECKPOINT}", "not a checkpoint hint",
                                    "rewritten to name the newest checkpoint"))
            bad.append(-1)
    return bad


def _rebuild_checkpoints(io: FileIO, path: str, bad: list[int]) -> list[str]:
    done = []
    for version in sorted(v for v in bad if v >= 0):
        state = replayed_state(io, path, version, skip=set(bad))
        if state is None:
            continue  # the commits before it are gone: readers keep skipping it
        io.delete(checkpoint_path(path, version))
        write_checkpoint(io, path, state)
        done.append(checkpoint_path(path, version))
    if -1 in bad:
        newest = _newest_readable_checkpoint(io, path)
        if newest is not None:  # never leave no hint: with version 0 cleaned up, it is how the topic exists
            hint = f"{path}/{LOG_DIR}/{LAST_CHECKPOINT}"
            io.replace(hint, json.dumps({"version": newest.version, "numOfAddFiles": len(newest.segments)}).encode(),
                       anchor=path)
            done.append(hint)
    return done


def _newest_readable_checkpoint(io: FileIO, path: str) -> Snapshot | None:
    versions = sorted((int(m.group(1)) for n in io.list_dir(f"{path}/{LOG_DIR}") if (m := _CHECKPOINT_RE.match(n))),
                      reverse=True)
    for version in versions:
        try:
            return read_checkpoint(io, path, version)
        except LogCorrupted:
            continue
    return None


def _set_aside(broker: Broker, topic: TopicName, damaged: list[tuple[SegmentRef, str]]) -> list[str]:
    """Copy each damaged segment to ``_damaged/`` and remove it in one ``REPAIR`` commit with its
    data-loss record (``docs/PROTOCOL.md`` section 4.9)."""
    io, path = broker.io, topic_dir(topic)
    for seg, _ in damaged:
        data = io.read_bytes(f"{path}/{seg.path}")
        copy = f"{path}/{DAMAGED_DIR}/{seg.path}"
        if data is not None and not io.exists(copy):
            io.write_new(copy, data, anchor=path)
    now_ms = int(time.time() * 1000)

    def build(snap: Snapshot) -> list[Action]:
        live = {s.path for s in snap.segments}
        return [Remove(path=seg.path, data_change=True, deletion_timestamp=now_ms, size=seg.size_bytes,
                       tags={**seg.tags(), TAG_DATA_LOSS: why[:1000]})
                for seg, why in damaged if seg.path in live]

    log = broker.topic_log(topic, create=False)  # the shared handle: this process's readers see it at once
    log.log.commit(build, operation="REPAIR", parameters={"setAside": [seg.path for seg, _ in damaged]})
    log.notify()
    return [f"{path}/{seg.path}" for seg, _ in damaged]


def _check_cursors(io: FileIO, path: str, findings: list[Finding]) -> list[tuple[VersionedState, str]]:
    """Cursors whose newest version is damaged (as findings), with their state for the repair."""
    out = []
    for sub in list_subscriptions(io, path):
        state = VersionedState(io, f"{path}/{CURSORS_DIR}/{sub}", keep_versions=50, anchor=path,
                               validate=Cursor.from_json, fall_back=True)
        try:
            version, _ = state.latest()
        except (LogCorrupted, BrokerPersistenceError) as exc:
            findings.append(Finding("cursor", f"{path}/{CURSORS_DIR}/{sub}", str(exc), ""))
            continue
        if version in state.damaged:
            findings.append(Finding("cursor", f"{path}/{CURSORS_DIR}/{sub}/{version:020d}.json",
                                    state.damaged[version], "superseded by a copy of the newest readable version"))
            out.append((state, f"{path}/{CURSORS_DIR}/{sub}"))
    return out


def check_records(broker: Broker, topic: TopicName, snap: Snapshot | None) -> list[Finding]:
    """Findings on the records beside the segments: the metaData in force, the compacted-view pointer,
    and the policy records (reported only: none has a safe automatic repair)."""
    path = topic_dir(topic)
    findings = [] if snap is None else _check_metadata(path, snap)
    findings += _check_view_pointer(broker.io, path, snap)
    findings += [Finding("policies", file, why, "") for file, why in broker.policies.damaged_records(topic)]
    return findings


def _check_metadata(path: str, snap: Snapshot) -> list[Finding]:
    meta, where = snap.metadata, f"{path}/{LOG_DIR}"
    problems = []
    try:
        schema = json.loads(meta.schema_string)
        if not isinstance(schema, dict) or schema.get("type") != "struct" or not isinstance(schema.get("fields"), list):
            problems.append("its schemaString is not a Delta struct schema")
    except (ValueError, RecursionError):
        problems.append("its schemaString is not JSON")
    if meta.format.provider != "parquet":
        problems.append(f"its format is {meta.format.provider!r}, not 'parquet'")
    if meta.partition_columns:
        problems.append(f"it partitions by {meta.partition_columns}, which no topic does")
    fmt = meta.configuration.get("pubsub.formatVersion")
    if fmt is not None and fmt != "1":
        problems.append(f"its pubsub.formatVersion is {fmt!r}, not '1'")
    return [Finding("metaData", where, f"the metaData in force at version {snap.version}: {why}; the log was "
                    "edited by hand or written by a foreign writer", "") for why in problems]


def _check_view_pointer(io: FileIO, path: str, snap: Snapshot | None) -> list[Finding]:
    from broker_core.topic.compacted_view import STATE_DIR, ViewPointer

    state = VersionedState(io, f"{path}/{STATE_DIR}", anchor=path)
    try:
        version, doc = state.latest()
        if doc is None:
            return []
        pointer = ViewPointer.from_json(version, doc, where=f"the compacted-view pointer of {path!r}")
    except (LogCorrupted, BrokerPersistenceError) as exc:
        return [Finding("view pointer", f"{path}/{STATE_DIR}", str(exc), "")]
    file = f"{path}/{STATE_DIR}/{version:020d}.json"
    problems = []
    if not io.exists(f"{path}/{pointer.file}"):
        problems.append(f"it names {pointer.file!r}, which does not exist")
    if pointer.rows < 0 or pointer.horizon < 0 or pointer.rows > pointer.horizon:
        problems.append(f"its rows ({pointer.rows}) and horizon ({pointer.horizon}) are not 0 <= rows <= horizon")
    elif snap is not None and pointer.ledger_id == snap.ledger_id and pointer.horizon > snap.next_offset:
        problems.append(f"its horizon {pointer.horizon} is past the log's next offset {snap.next_offset}")
    return [Finding("view pointer", file, f"{why}; compact the topic again (`pubsub compact TOPIC`)", "")
            for why in problems]


__all__ = ["DAMAGED_DIR", "TAG_DATA_LOSS", "CheckResult", "Finding", "check_records", "check_topic"]
