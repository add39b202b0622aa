"""Driver-side topic resolution for the source: which internal topics a query reads, and their bounds.

A read never creates a topic (DECISIONS D57): missing topics are listed, and ``require_topics`` makes
that an error unless ``waitForTopic``; a checkpointed offset whose topic is gone or lies past its end
is data loss, judged by ``failOnDataLoss`` (``check_data_loss``).  ``PartitionPlanner`` builds on this.
"""

from __future__ import annotations

import time
from typing import Any

from broker_core.broker.broker import Broker
from broker_core.broker.near_names import close_topics, did_you_mean
from broker_core.errors import DataLoss, InvalidConfiguration, InvalidTopicName, OperationNotSupported, TopicNotFound
from broker_core.naming import TopicName
from broker_core.topic.compacted_view import CompactedTopic
from spark_pubsub.options import SourceOptions

_DISCOVERY_S = 1.0


class TopicResolver:
    """The subscribed topics of a source and their offsets; driver-only state, dropped when pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._broker: Broker | None = None
        self._topics: list[tuple[TopicName, str, int]] = []
        self.missing: list[str] = []  # subscribed topics that do not exist (waitForTopic, or gone)
        self._awaited: list[str] = []  # retry letter topics not created yet
        self._resolved = False
        self._stale = False  # an internal topic's log vanished: resolve the topics again
        # logs a read may create: partitions of existing partitioned topics, retry letter topics
        self._partition_logs: set[str] = set()
        self._discovered_s = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_broker": None, "_topics": [], "missing": [], "_resolved": False,
                "_stale": False, "_partition_logs": set(), "_discovered_s": 0.0, "_awaited": []}


    @property
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = Broker.for_url(self.options.root, storage_options=self.options.storage_options)
        return self._broker

    @property
    def lease_ms(self) -> int:
        return self.options.lease_renew_ms or self.broker.config.consumer_lease_ms

    def internal_topics(self) -> list[tuple[TopicName, str, int]]:
        """(internal topic, display name, partition index) of every subscribed topic that exists.

        A read never creates a topic: the missing ones are listed in ``missing`` (``require_topics``
        makes that an error where it is one).  Re-resolved at most once a second while a topic is
        missing, a log vanished (deleted) or a pattern subscription may match new topics.
        """
        now = time.monotonic()
        settled = (self.options.topics_pattern is None and not self.missing and not self._awaited
                   and not self._stale)
        if self._resolved and (settled or now - self._discovered_s < _DISCOVERY_S):
            return self._topics
        self._discovered_s = now
        option = ("topicsPattern" if self.options.topics_pattern else "topics" if self.options.topics
                  else "topic")
        try:
            if self.options.topics_pattern:
                _, names = self.broker.match_topics(self.options.topics_pattern)
            elif self.options.topics:
                names = [t.strip() for t in self.options.topics.split(",") if t.strip()]
            else:
                names = [self.options.topic or ""]
            for name in names:
                TopicName.parse(name)
        except (InvalidConfiguration, InvalidTopicName) as exc:  # say which option held the bad value
            raise InvalidConfiguration(f"option {option}: {exc}", option=option) from None
        if self.options.retry_enable and self.options.subscription:
            # a consumer with retry enabled also reads its retry letter topics
            names = names + [f"{TopicName.parse(n)}-{self.options.subscription}-RETRY" for n in names
                             if not n.endswith("-RETRY")]
        out: list[tuple[TopicName, str, int]] = []
        missing: list[str] = []
        awaited: list[str] = []
        partition_logs: set[str] = set()
        for name in names:
            topic = TopicName.parse(name)
            if not topic.is_persistent:
                raise OperationNotSupported(f"{topic} is non-persistent: Spark reads persistent topics only")
            # the retry letter topic of a retryEnable subscription is created with the subscription,
            # as a Pulsar consumer with retry enabled does (per allowAutoTopicCreation); nothing else is
            retry = bool(self.options.retry_enable) and name.endswith("-RETRY")
            try:
                partitions = self.broker.partitions(topic, auto_create=retry)
            except TopicNotFound:
                # a retry letter topic appears with its first retry: watched for, never an error
                (awaited if name.endswith("-RETRY") else missing).append(str(topic))
                continue
            partitioned = len(partitions) > 1 or partitions[0] != topic
            for index, part in enumerate(partitions):
                out.append((part, str(part), index if partitioned else -1))
                if partitioned or retry:
                    partition_logs.add(str(part))
        self._partition_logs = partition_logs
        self._topics, self.missing, self._awaited, self._stale, self._resolved = out, missing, awaited, False, True
        return out

    def require_topics(self, checkpointed: dict[str, Any] | None = None) -> None:
        """``TopicNotFound`` for a subscribed topic that does not exist, unless ``waitForTopic``.

        A topic with ``checkpointed`` positions existed when the query read it: that is for
        ``check_data_loss`` (``failOnDataLoss``) to judge, not an error here.
        """
        self.internal_topics()
        held = checkpointed or {}
        missing = [t for t in self.missing if not any(name.startswith(t) for name in held)]
        if missing and not self.options.wait_for_topic:
            near = [n for t in missing for n in close_topics(self.broker.admin, TopicName.parse(t))]
            hint = f"{did_you_mean(near)} " if near else ""
            raise TopicNotFound(
                f"topic {', '.join(missing)} does not exist (under {self.options.root}); {hint}a read never "
                "creates a topic: create it ('pubsub topics create ...') or produce to it first, or, for a "
                "streaming query, set .option('waitForTopic', 'true') to wait for it to appear",
                topic=missing[0],
            )

    def _log(self, name: TopicName) -> Any:
        """The topic's log handle.  Only the partition logs of a partitioned topic that exists are
        created (they appear with their first message); a topic never is."""
        return self.broker.topic_log(name, create=str(name) in self._partition_logs)

    def _bounds(self, name: TopicName) -> tuple[int, int] | None:
        """(first, next) offset of an internal topic; None once its log was deleted (re-resolve then).

        A partition of a partitioned topic whose log was never written is empty, not missing.
        """
        try:
            snap = self.broker.topic_log(name, create=False).snapshot()
        except TopicNotFound:
            snap = None
        if snap is None or snap.deleted:
            if snap is None and str(name) in self._partition_logs and self.broker.admin.partitioned_topic_metadata(
                    name.partitioned_topic_name):
                return 0, 0
            self._stale = True
            return None
        return snap.first_offset, snap.next_offset

    def bounds(self) -> dict[str, tuple[int, int]]:
        """(first, next) offset of every existing internal topic, by display name.

        With ``readCompacted`` the first offset is where the compacted view starts
        (``CompactedTopic.earliest``): the view keeps the latest value of every key after retention
        removed the segments below its horizon, exactly as the client's compacted reader reads it.
        """
        out = {}
        for topic, display, _ in self.internal_topics():
            found = self._bounds(topic)
            if found is not None and self.options.read_compacted:
                log = self.broker.topic_log(topic, create=False)
                found = (CompactedTopic(log).earliest(log.snapshot()), found[1])
            if found is not None:
                out[display] = found
        return out

    def latest_positions(self) -> dict[str, int]:
        return {name: end for name, (_, end) in self.bounds().items()}

    def earliest_positions(self) -> dict[str, int]:
        return {name: first for name, (first, _) in self.bounds().items()}

    def timestamp_positions(self, timestamp_ms: int) -> dict[str, int]:
        present = self.bounds()
        return {display: self._log(t).offset_for_publish_time(timestamp_ms)
                for t, display, _ in self.internal_topics() if display in present}

    def check_data_loss(self, positions: dict[str, int], bounds: dict[str, tuple[int, int]]) -> dict[str, int]:
        """Apply ``failOnDataLoss`` to a query's checkpointed positions against the topics as they are.

        A position whose internal topic is gone (deleted) or lies past its end (the topic was deleted
        and re-created) no longer exists: by default the query fails naming the topic and offset;
        with ``failOnDataLoss=false`` it drops the position, or restarts that topic from its start.
        """
        lost = {name: pos for name, pos in positions.items() if name not in bounds or pos > bounds[name][1]}
        if not lost:
            return positions
        if self.options.fail_on_data_loss:
            detail = "; ".join(
                f"{name} at offset {pos} ("
                + ("the topic no longer exists" if name not in bounds else f"it now ends at {bounds[name][1]}")
                + ")" for name, pos in sorted(lost.items()))
            raise DataLoss(
                f"the query's checkpointed offsets no longer exist: {detail}; the topic was deleted (or deleted "
                "and re-created). Start a new checkpoint, or set .option('failOnDataLoss', 'false') to go on "
                "from what there is", topic=next(iter(sorted(lost))), offsets=lost,
            )
        out = {name: pos for name, pos in positions.items() if name not in lost}
        for name in lost:
            if name in bounds:
                out[name] = bounds[name][0]
        return out


__all__ = ["TopicResolver"]
