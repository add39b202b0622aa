"""What every reconcile job shares: its targets, argument checks, progress on a terminal, a summary.

A job runs over internal topics (the partitions of a topic, or every persistent topic of a
namespace), one at a time, and returns a ``JobSummary`` holding one result per internal topic.
Progress goes to stderr only when stderr is a terminal, so a job run from cron, a test or
``spark-submit`` prints nothing; the summary is always logged on the ``broker_core.jobs`` logger,
which is what operators keep.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TextIO, TypeVar

from broker_core.broker.broker import Broker
from broker_core.errors import InvalidConfiguration, NotAllowedError
from broker_core.naming import NamespaceName, TopicName
from broker_core.topic.topic_log import TopicLog

LOGGER = logging.getLogger("broker_core.jobs")


class PartitionResult(Protocol):
    """What a job reports for one internal topic."""

    @property
    def topic(self) -> str: ...

    @property
    def changed(self) -> bool: ...

    def describe(self) -> str: ...


R = TypeVar("R", bound=PartitionResult)


@dataclass(frozen=True, slots=True)
class JobSummary(Generic[R]):
    """The outcome of one job run: one result per internal topic, in the order they were processed.

    Attributes:
        job: the job's name (``retention``, ``ttl``, ...).
        target: the topic or namespace the job was asked to process.
        dry_run: True when nothing was changed on purpose.
        results: per internal topic, what was (or would be) changed and why.
        elapsed_ms: wall time of the run.
    """

    job: str
    target: str
    dry_run: bool
    results: tuple[R, ...]
    elapsed_ms: float

    @property
    def changed(self) -> bool:
        """Whether the run changed storage (always False for a dry run)."""
        return any(r.changed for r in self.results)

    def result_for(self, topic: str | TopicName) -> R:
        """The result of one internal topic (by its full name)."""
        name = str(topic if isinstance(topic, TopicName) else TopicName.parse(topic))
        for result in self.results:
            if result.topic == name:
                return result
        raise KeyError(f"{name} was not processed by this {self.job} run of {self.target}")

    def describe(self) -> str:
        mode = " (dry run)" if self.dry_run else ""
        lines = [
            f"{self.job} of {self.target}{mode}: {len(self.results)} internal topic(s), "
            f"{self.elapsed_ms:.0f} ms"
        ]
        lines += [f"  {r.topic}: {r.describe()}" for r in self.results]
        return "\n".join(lines)


class JobProgress(Generic[R]):
    """Collects per-topic results, shows progress on a terminal, logs and returns the summary.

    Args:
        job: the job's name.
        target: what the job was asked to process.
        total: how many internal topics will be processed.
        dry_run: whether the run changes nothing.
        stream: where progress goes; stderr by default, and only when it is a terminal.
    """

    def __init__(
        self, job: str, target: str, *, total: int, dry_run: bool, stream: TextIO | None = None
    ) -> None:
        self._job = job
        self._target = target
        self._total = total
        self._dry_run = dry_run
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._results: list[R] = []
        self._start = time.perf_counter()

    def add(self, result: R) -> None:
        """Record one internal topic's result (and redraw the progress line on a terminal)."""
        self._results.append(result)
        if self._tty:
            self._stream.write(f"\r[{self._job}] {len(self._results)}/{self._total} {result.topic}\x1b[K")
            self._stream.flush()

    def finish(self) -> JobSummary[R]:
        """Clear the progress line, log the summary at INFO and return it."""
        if self._tty and self._results:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
        summary = JobSummary(
            job=self._job,
            target=self._target,
            dry_run=self._dry_run,
            results=tuple(self._results),
            elapsed_ms=(time.perf_counter() - self._start) * 1000,
        )
        LOGGER.info("%s", summary.describe())
        return summary


def run_each(
    job: str, target: str, partitions: Sequence[TopicName], each: Callable[[TopicName], R], *, dry_run: bool
) -> JobSummary[R]:
    """Run ``each`` over the internal topics in order, showing progress; return the logged summary."""
    progress: JobProgress[R] = JobProgress(job, target, total=len(partitions), dry_run=dry_run)
    for part in partitions:
        progress.add(each(part))
    return progress.finish()


# --- targets and arguments ---------------------------------------------------------------------------


def resolve_targets(broker: Broker, target: str | TopicName) -> tuple[str, list[TopicName]]:
    """The internal topics a job processes: a topic's partitions, or every persistent topic of a
    namespace (``tenant/namespace``).  Nothing is created.

    Raises:
        InvalidConfiguration: ``broker`` is not a ``Broker`` or ``target`` is not a name.
        TopicNotFound / NamespaceNotFound: the topic or namespace does not exist.
        NotAllowedError: a non-persistent topic (it has no log to maintain).
    """
    if not isinstance(broker, Broker):
        raise InvalidConfiguration(f"argument 'broker' must be a Broker, got {type(broker).__name__}")
    if isinstance(target, str) and target.count("/") == 1 and "://" not in target:
        namespace = NamespaceName.parse(target)
        topics = [TopicName.parse(t) for t in broker.admin.list_topics(str(namespace))]
        internal = [p for t in topics if t.is_persistent for p in broker.partitions(t, auto_create=False)]
        return str(namespace), internal
    if not isinstance(target, str | TopicName):
        raise InvalidConfiguration(
            "argument 'topic' must be a topic name or 'tenant/namespace', got "
            f"{type(target).__name__} {target!r}"
        )
    name = target if isinstance(target, TopicName) else TopicName.parse(target)
    if not name.is_persistent:
        raise NotAllowedError(
            f"{name} is non-persistent: it has no log for a job to maintain", topic=str(name)
        )
    return str(name), broker.partitions(name, auto_create=False)


def existing_log(broker: Broker, topic: TopicName) -> TopicLog | None:
    """The shared log handle of an internal topic, or None when it was never created (a partition
    of a partitioned topic is created by its first producer or reader)."""
    log = broker.topic_log(topic, create=False)
    return log if log.exists() else None


def check_flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidConfiguration(f"argument {name!r} must be True or False, got {value!r}", argument=name)
    return value


def check_ms(value: object, name: str, *, allow_none: bool = False, minimum: int = 0) -> int | None:
    """An int count of milliseconds (or a time in ms) of at least ``minimum``; bools are refused."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidConfiguration(
            f"argument {name!r} must be an int >= {minimum}, got {value!r}", argument=name
        )
    return value


MIN_SAFE_AGE_MS = 60 * 60_000
"""The shortest log retention / vacuum age accepted without ``enforce_min_age=False`` (one hour)."""


def check_age(value: object, name: str, *, enforce: object) -> int:
    """A destructive job's minimum age in ms: shorter than ``MIN_SAFE_AGE_MS`` only when asked for,
    because a shorter age can delete a file a write is about to commit or a slow reader still needs."""
    age = check_ms(value, name)
    assert age is not None
    if check_flag(enforce, "enforce_min_age") and age < MIN_SAFE_AGE_MS:
        raise InvalidConfiguration(
            f"argument {name!r} = {age} ms is below the safe minimum of {MIN_SAFE_AGE_MS} ms: in-flight "
            "writes and slow readers could lose files; pass enforce_min_age=False only when nothing else "
            "uses the topic",
            argument=name,
        )
    return age


def now_or(now_ms: object) -> int:
    """``now_ms`` when given (tests, replays, a scheduler's logical time), else the wall clock."""
    checked = check_ms(now_ms, "now_ms", allow_none=True)
    return time.time_ns() // 1_000_000 if checked is None else checked


__all__ = [
    "LOGGER",
    "MIN_SAFE_AGE_MS",
    "JobProgress",
    "JobSummary",
    "PartitionResult",
    "check_age",
    "check_flag",
    "check_ms",
    "existing_log",
    "now_or",
    "resolve_targets",
    "run_each",
]
