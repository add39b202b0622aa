"""Driver-side planning: offsets, admission control, claims and acknowledgments (topics: ``topic_resolver``).

Every decision about *which* messages belong to a subscription is delegated to ``broker_core``
(``SubscriptionPart.claim``, the cursor); this module turns those decisions into Spark offsets (JSON
dicts of plain values) and input partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from broker_core.client.subscription_part import SubscriptionPart
from broker_core.errors import InvalidConfiguration
from broker_core.message import BytesSchema
from broker_core.naming import TopicName
from broker_core.subscription.cursor import ConsumerType, Cursor
from broker_core.subscription.ranges import RangeSet
from broker_core.topic.compacted_view import CompactedTopic
from broker_core.topic.scan import ScanTask, split_slots
from spark_pubsub.offset_specs import parse_offsets_spec, parse_starting_offsets
from spark_pubsub.options import SourceOptions
from spark_pubsub.scan_partition import ScanPartition
from spark_pubsub.topic_resolver import TopicResolver
from spark_pubsub.typed_values import TypedRead, resolve_read

Work = tuple[str, list[tuple[int, int]], dict[int, int]]
"""(internal topic, offset ranges ``[from, to)``, redelivery count by offset) of one batch."""

_TYPES = {"Exclusive": ConsumerType.Exclusive, "Failover": ConsumerType.Failover, "Shared": ConsumerType.Shared,
          "Key_Shared": ConsumerType.KeyShared}


class PartitionPlanner(TopicResolver):
    """Plans batches over the resolved topics; holds driver-only state that is dropped when pickled."""

    def __init__(self, options: SourceOptions) -> None:
        claims = options.subscription is not None and options.subscription_type in ("Shared", "Key_Shared")
        if options.read_compacted and claims:
            raise InvalidConfiguration(  # Pulsar's rule, as for Client.subscribe(is_read_compacted=True)
                f"option readCompacted: can only be used with Exclusive or Failover subscriptions, not "
                f"subscriptionType={options.subscription_type}", option="readCompacted",
            )
        super().__init__(options)
        self._parts: dict[str, SubscriptionPart] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_parts": {}}

    # -- subscription -------------------------------------------------------------------------------

    def _part(self, consumer: str, topic: TopicName, display: str, index: int) -> SubscriptionPart:
        part = self._parts.get(display)
        if part is None:
            opts = self.options
            key_shared = None
            if opts.subscription_type == "Key_Shared":
                key_shared = {"mode": opts.key_shared_mode, "allowOutOfOrder": opts.allow_out_of_order_delivery,
                              "consistentHashing": self.broker.config.subscription_key_shared_use_consistent_hashing,
                              "replicaPoints":
                                  self.broker.config.subscription_key_shared_consistent_hashing_replica_points,
                              "rangeSize": self.broker.config.subscription_key_shared_auto_split_range_size,
                              "stickyRanges": [list(r) for r in opts.sticky_range_list]}
            assert opts.subscription is not None
            part = SubscriptionPart(
                name=topic, display_topic=display, partition=index, log=self._log(topic),
                store=self.broker.cursor_store(topic, opts.subscription), subscription=opts.subscription,
                consumer_name=consumer, sub_type=_TYPES[opts.subscription_type], priority_level=opts.priority_level,
                key_shared=key_shared, schema=BytesSchema(),
            )
            self._parts[display] = part
        return part

    def join(self, consumer: str) -> None:
        """Register the query as a consumer on every internal topic (taking over its own old lease)."""
        earliest = self.options.subscription_initial_position == "Earliest"
        for topic, display, index in self.internal_topics():
            part = self._part(consumer, topic, display, index)
            log = part.log

            def initial(log: Any = log) -> int:
                snap = log.snapshot()
                return snap.first_offset if earliest else snap.next_offset

            part.join(now_ms=int(time.time() * 1000), lease_ms=self.lease_ms, initial_offset=initial,
                      auto_create=self.broker.config.allow_auto_subscription_creation, takeover=True)

    def renew(self, consumer: str) -> None:
        for part in list(self._parts.values()):
            if not part.renew(now_ms=int(time.time() * 1000), lease_ms=self.lease_ms):
                part.join(now_ms=int(time.time() * 1000), lease_ms=self.lease_ms, initial_offset=lambda: 0,
                          auto_create=True, takeover=True)

    def stop(self, consumer: str) -> None:
        """Range mode leaves (nothing is claimed).  Claim mode leaves where the query holds no claims
        (an AvailableNow run that ended: its last ``latestOffset`` settled everything), so the next
        scheduled run (a new consumer) is not left a share of the Key_Shared key ranges by a member
        that will not read again; where it holds claims (a batch whose ``commit`` has not come) it
        stays until the lease lapses or the same consumerName restarts and settles them."""
        if self.options.subscription_type in ("Exclusive", "Failover"):
            for part in self._parts.values():
                part.leave()
            return

        def leave_if_idle(cursor: Cursor | None) -> Cursor | None:
            if cursor is None or consumer not in cursor.consumers or cursor.claims.get(consumer):
                return None
            cursor.remove_consumer(consumer)
            return cursor

        for part in self._parts.values():
            part.store.update(leave_if_idle)

    def cursor_positions(self, consumer: str) -> dict[str, int]:
        out = {}
        for topic, display, index in self.internal_topics():
            _, cursor = self._part(consumer, topic, display, index).store.load()
            out[display] = cursor.mark_delete if cursor is not None else self._log(topic).snapshot().next_offset
        return out

    # -- admission control ----------------------------------------------------------------------------

    def _failover_view(self, consumer: str) -> tuple[dict[str, int], set[str]]:
        """Failover: each internal topic's markDelete, and those where this consumer is not active."""
        now_ms = int(time.time() * 1000)
        marks: dict[str, int] = {}
        inactive: set[str] = set()
        for topic, display, index in self.internal_topics():
            part = self._part(consumer, topic, display, index)
            _, cursor = part.store.load()
            if cursor is None or not part.is_active(cursor, now_ms):
                inactive.add(display)
            if cursor is not None:
                marks[display] = cursor.mark_delete
        return marks, inactive

    def advance(
        self, start: dict[str, Any], *, max_rows: int | None, max_bytes: int | None, min_rows: int | None,
        target: dict[str, int] | None, consumer: str | None = None,
    ) -> dict[str, Any]:
        """Range mode: the next end offsets under the read limits (``start`` when nothing to read).

        A Failover subscription reads only the partitions where this query is the active consumer,
        and a partition it (again) becomes active on is read from the cursor's markDelete, where the
        previous active consumer got to: such a batch says so in ``from`` (``plan`` reads
        ``[from, end)`` there), so the batch stays a pure function of its offsets.
        """
        checkpointed = dict(start.get("parts", {}))
        self.require_topics(checkpointed)  # a topic deleted mid-query is failOnDataLoss's call
        bounds = self.bounds()
        positions = self.check_data_loss(checkpointed, bounds)
        latest = {name: end for name, (_, end) in bounds.items()}
        earliest = {name: first for name, (first, _) in bounds.items()}
        # failOnDataLoss=false restarted a re-created topic from its start: the batch reads from there
        restarted = {n: p for n, p in positions.items() if n in checkpointed and checkpointed[n] != p}
        marks: dict[str, int] = {}
        inactive: set[str] = set()
        failover = self.options.subscription is not None and self.options.subscription_type == "Failover"
        if consumer is not None and failover:
            marks, inactive = self._failover_view(consumer)
        skips: dict[str, int] = dict(restarted)
        available: dict[str, int] = {}
        for name, last in latest.items():
            begin: int = positions.setdefault(name, earliest[name])  # new partition or topic: from its start
            if marks.get(name, -1) > begin:
                begin = positions[name] = skips[name] = marks[name]
            if name in inactive:
                available[name] = 0
                continue
            cap = min(last, target.get(name, begin) if target is not None else last)
            available[name] = max(0, cap - begin)
        total = sum(available.values())
        if total == 0 or (min_rows and total < min_rows):
            return start
        budget = total if max_rows is None else min(total, max_rows)
        if max_bytes is not None:
            budget = min(budget, max(1, max_bytes // self._avg_message_bytes()))
        end = dict(positions)
        remaining = budget
        # fair share: spread the budget over partitions with data, round by round
        while remaining > 0:
            holders = [n for n, a in available.items() if a > 0]
            if not holders:
                break
            share = max(1, remaining // len(holders))
            for name in holders:
                take = min(share, available[name], remaining)
                end[name] += take
                available[name] -= take
                remaining -= take
                if remaining == 0:
                    break
        out: dict[str, Any] = {"v": 1, "parts": end, "from": skips} if skips else {"v": 1, "parts": end}
        if self.options.read_compacted:
            out["compacted"] = self.compacted_views()  # the batch's view, so a replay reads the same rows
        return out

    def compacted_views(self) -> dict[str, list[Any]]:
        """readCompacted: ``[horizon, view file]`` of the newest compacted view of each internal topic."""
        out: dict[str, list[Any]] = {}
        for topic, display, _ in self.internal_topics():
            log = self._log(topic)
            view = CompactedTopic(log).view(log.snapshot())
            if view is not None:
                out[display] = [view.horizon, view.file]
        return out

    def _avg_message_bytes(self) -> int:
        sizes = records = 0
        for topic, _, _ in self.internal_topics():
            for seg in self._log(topic).log.cached_snapshot().segments[-8:]:
                sizes += seg.size_bytes
                records += seg.num_records
        return max(1, sizes // records) if records else 1024

    def claim(
        self, consumer: str, start: dict[str, Any], *, max_rows: int | None, max_bytes: int | None,
        min_rows: int | None, target: dict[str, int] | None,
    ) -> dict[str, Any]:
        """Claim mode: claim the next messages in the cursor; the end offset lists exactly them."""
        budget = max_rows if max_rows is not None else 1_000_000
        if max_bytes is not None:
            budget = min(budget, max(1, max_bytes // self._avg_message_bytes()))
        now_ms = int(time.time() * 1000)
        if min_rows:
            backlog = 0
            for topic, display, index in self.internal_topics():
                _, cursor = self._part(consumer, topic, display, index).store.load()
                if cursor is not None:
                    backlog += self._log(topic).snapshot().next_offset - cursor.mark_delete
            if backlog < min_rows:
                return start
        claims: dict[str, list[list[int]]] = {}
        redelivery: dict[str, dict[str, int]] = {}
        delayed = self.broker.config.delayed_delivery_enabled
        # fair share, round by round: an internal topic with a big backlog must not starve the others
        # (a topic that appeared after an AvailableNow run started waits for the next run)
        pending = [t for t in self.internal_topics() if target is None or t[1] in target]
        taken: dict[str, list[int]] = {}
        while budget > 0 and pending:
            share = max(1, budget // len(pending))
            more = []
            for topic, display, index in pending:
                limit = min(share, budget)
                if limit <= 0:
                    break
                part = self._part(consumer, topic, display, index)
                cap = target.get(display) if target is not None else None
                offsets, cursor = part.claim(now_ms=now_ms, limit=limit, delayed_enabled=delayed,
                                             max_offset=cap,
                                             deliver_ahead_ms=self.broker.config.delayed_delivery_lookahead_ms)
                if not offsets:
                    continue
                budget -= len(offsets)
                taken.setdefault(display, []).extend(offsets)
                if len(offsets) >= limit:
                    more.append((topic, display, index))  # it may have more
                if cursor is not None:
                    counts = {str(o): cursor.redelivery[o] for o in offsets if cursor.redelivery.get(o)}
                    if counts:
                        redelivery.setdefault(display, {}).update(counts)
            pending = more
        for display, offsets in taken.items():
            ranges = RangeSet()
            ranges.add_offsets(offsets)
            claims[display] = ranges.to_json()
        if not claims:
            return start
        end: dict[str, Any] = {"v": 1, "seq": int(start.get("seq", 0)) + 1, "clock": now_ms, "claims": claims}
        if redelivery:
            end["redelivery"] = redelivery
        return end

    # -- planning and acknowledgment ----------------------------------------------------------------

    def batch_work(self, start: dict[str, Any], end: dict[str, Any]) -> tuple[list[Work], dict[str, list[Any]]]:
        """A batch's offset ranges per internal topic (with redelivery counts in claim mode), and the
        compacted views it reads (``readCompacted``): what ``plan`` splits into tasks and what
        ``emit=ranges`` hands over (``stream_ranges``)."""
        work: list[Work] = []
        if "claims" in end:
            if end == start:
                return [], {}
            for display, ranges in end["claims"].items():
                counts = {int(k): int(v) for k, v in end.get("redelivery", {}).get(display, {}).items()}
                work.append((display, [(int(a), int(b)) for a, b in ranges], counts))
        else:
            earliest = None
            for display, stop in end.get("parts", {}).items():
                begin = end.get("from", {}).get(display, start.get("parts", {}).get(display))
                if begin is None:
                    earliest = earliest or self.earliest_positions()
                    begin = earliest.get(display, 0)
                if int(stop) > int(begin):
                    work.append((display, [(int(begin), int(stop))], {}))
        if not work:
            return [], {}
        # readCompacted: the views the batch's end offset recorded (a bounded spark.read has none: now)
        views = end["compacted"] if "compacted" in end else (
            self.compacted_views() if self.options.read_compacted else {})
        return work, views

    def plan(self, start: dict[str, Any], end: dict[str, Any]) -> list[ScanPartition]:
        """Input partitions for a batch; each internal topic is split into key-hash slices when
        ``minPartitions`` asks for more tasks, so every task owns whole keys, in order."""
        work, views = self.batch_work(start, end)
        if not work:
            return []
        topics = {display: (topic, index) for topic, display, index in self.internal_topics()}
        wanted = self.options.min_partitions or 1
        slices = max(1, -(-wanted // len(work)))
        slot_ranges: list[tuple[int, int] | None] = [None] if slices == 1 else list(split_slots(slices))
        out = []
        for display, ranges, counts in work:
            if display not in topics:
                topic = TopicName.parse(display)
                index = topic.partition_index
            else:
                topic, index = topics[display]
            view = views.get(display)
            for slot_range in slot_ranges:
                for piece in _split_ranges(ranges, self.options.max_records_per_partition):
                    task = ScanTask(root=self.options.root, topic_path="/".join(topic.relative_path()),
                                    topic=display, partition=index, ranges=tuple(piece), slot_range=slot_range,
                                    fail_on_data_loss=self.options.fail_on_data_loss, redelivery=counts,
                                    compacted=None if view is None else (int(view[0]), str(view[1])),
                                    storage_options=tuple(sorted(self.options.storage_options.items())),
                                    max_message_bytes=self.broker.topic_log(topic, create=False).max_message_bytes)
                    out.append(ScanPartition([task], include_headers=self.options.include_headers))
        return out

    def settle(self, consumer: str, start: dict[str, Any]) -> None:
        """``start`` ends a batch that completed: acknowledge it, and in claim mode give back every
        other claim this consumer still holds.  Those belong to batches whose ``commit`` never came
        (the run died first) or were claimed for a batch Spark never planned (the run died between
        ``latestOffset`` and writing its offset log); either way they are redelivered (at-least-once),
        where keeping them would strand them under a consumer name that never reads them again."""
        self.acknowledge(consumer, start)
        if "claims" not in start:
            return
        for topic, display, index in self.internal_topics():
            part = self._part(consumer, topic, display, index)

            def fn(cursor: Cursor | None) -> Cursor | None:
                mine = cursor.claims.get(consumer) if cursor is not None else None
                if cursor is None or not mine:
                    return None
                cursor.release(consumer, list(mine.offsets()))
                return cursor

            part.store.update(fn)

    def acknowledge(self, consumer: str, end: dict[str, Any]) -> None:
        """Acknowledge a committed batch in the cursor (idempotent)."""
        if self.options.subscription is None:
            return
        now_ms = int(time.time() * 1000)
        for topic, display, index in self.internal_topics():
            part = self._part(consumer, topic, display, index)
            if "claims" in end:
                ranges = end["claims"].get(display)
                if not ranges:
                    continue
                offsets = [o for a, b in ranges for o in range(int(a), int(b))]

                def ack_claims(cursor: Cursor | None, offsets: list[int] = offsets) -> Cursor | None:
                    if cursor is None:
                        return None
                    cursor.ack(offsets)
                    cursor.renew(consumer, now_ms=now_ms, lease_ms=self.lease_ms)
                    return cursor

                fn: Callable[[Cursor | None], Cursor | None] = ack_claims
            else:
                stop = end.get("parts", {}).get(display)
                if stop is None:
                    continue

                def ack_range(cursor: Cursor | None, stop: int = int(stop)) -> Cursor | None:
                    if cursor is None or stop - 1 < cursor.mark_delete:
                        return None
                    cursor.ack_cumulative(stop - 1)
                    return cursor

                fn = ack_range

            part.store.update(fn)


def _split_ranges(ranges: list[tuple[int, int]], limit: int | None) -> list[list[tuple[int, int]]]:
    """Cut offset ranges into pieces of at most ``limit`` offsets (``maxRecordsPerPartition``, as in
    Spark's Kafka source): more tasks for a big backlog, at the price of a key's messages in one
    batch landing in several tasks.  Without a limit, one piece."""
    if not limit:
        return [ranges]
    pieces: list[list[tuple[int, int]]] = [[]]
    room = limit
    for start, stop in ranges:
        while start < stop:
            take = min(stop - start, room)
            pieces[-1].append((start, start + take))
            start += take
            room -= take
            if room == 0:
                pieces.append([])
                room = limit
    return [p for p in pieces if p]


def read_plan(options: Any, planner: PartitionPlanner | None = None) -> TypedRead | None:
    """The typed read of a source's options (driver side; resolves the topics like the planner)."""
    if options.value_format == "binary":
        return None
    planner = planner or PartitionPlanner(options)
    return resolve_read(options.value_format, options.root, [t for t, _, _ in planner.internal_topics()],
                        storage_options=options.storage_options)



__all__ = ["PartitionPlanner", "parse_offsets_spec", "parse_starting_offsets", "read_plan"]
