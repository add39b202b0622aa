"""What every reconcile job shares: its targets, argument checks, progress reports, a summary.

A job runs over internal topics (the partitions of a topic, or every persistent topic of a
namespace), one at a time, and returns a ``JobSummary`` holding one result per internal topic.
Progress goes to the ``ProgressListener`` installed with ``reporting_progress`` (the ``pubsub``
command installs one that draws on a terminal, ``broker_core/cli/progress.py``), and nowhere
otherwise: the library itself never writes to stderr, so a job run from a notebook, cron, a test or
``spark-submit`` prints nothing.  The summary is always logged on the ``broker_core.jobs`` logger,
which is what operators keep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

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


class ProgressListener(Protocol):
    """Receives a job's progress: which internal topic it works on, and steps within one.

    Calls come from the thread running the job; they must be cheap and must not raise.
    """

    def topic_started(self, job: str, index: int, total: int, topic: str) -> None:
        """The job starts on internal topic ``index`` (0-based) of ``total``."""

    def step(self, job: str, detail: str) -> None:
        """A step within the current internal topic (``detail`` says which, e.g. ``run 2/5``)."""

    def job_finished(self, job: str) -> None:
        """The job is done (also after a failure)."""


_LISTENER: ContextVar[ProgressListener | None] = ContextVar("broker_core_jobs_progress", default=None)


@contextmanager
def reporting_progress(listener: ProgressListener | None) -> Iterator[None]:
    """Send the progress of the jobs run inside this block (in this thread or task) to ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def report_step(job: str, detail: str) -> None:
    """Report a step within the current internal topic to the installed listener, if any."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.step(job, detail)


class JobProgress(Generic[R]):
    """Collects per-topic results, reports progress to the installed listener, logs and returns the
    summary.

    Args:
        job: the job's name.
        target: what the job was asked to process.
        total: how many internal topics will be processed.
        dry_run: whether the run changes nothing.
        listener: where progress goes; by default the one installed with ``reporting_progress``.
    """

    def __init__(
        self, job: str, target: str, *, total: int, dry_run: bool, listener: ProgressListener | None = None
    ) -> None:
        self._job = job
        self._target = target
        self._total = total
        self._dry_run = dry_run
        self._listener = listener if listener is not None else _LISTENER.get()
        self._results: list[R] = []
        self._started = 0
        self._start = time.perf_counter()

    def start(self, topic: str) -> None:
        """Announce the next internal topic (before its work, so a long one shows what runs)."""
        if self._listener is not None:
            self._listener.topic_started(self._job, self._started, self._total, topic)
        self._started += 1

    def add(self, result: R) -> None:
        """Record one internal topic's result."""
        self._results.append(result)

    def end(self) -> None:
        """Tell the listener the job is over (``finish`` does; call it alone when the job failed, so a
        terminal's progress line is cleared before the error shows, or keeps a summary of its own)."""
        if self._listener is not None:
            self._listener.job_finished(self._job)

    def finish(self) -> JobSummary[R]:
        """Tell the listener the job is done, log the summary at INFO and return it."""
        self.end()
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
    try:
        for part in partitions:
            progress.start(str(part))
            progress.add(each(part))
    except BaseException:
        progress.end()
        raise
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
    "ProgressListener",
    "check_age",
    "check_flag",
    "check_ms",
    "existing_log",
    "now_or",
    "report_step",
    "reporting_progress",
    "resolve_targets",
    "run_each",
]
