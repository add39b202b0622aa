"""Where a message's send -> receive time goes on a local root: per-stage timestamps for
``bench_consume.py --wakeup --trace``.

The producer process of the run wraps the functions of its send path (the sender thread's batch
cut, a pool worker's upload and group commit, the segment encode, every ``fsync``, the commit's
hard link) and stamps, for each message, when its batch passed each stage (``time.time()`` seconds,
the clock the consumer's receive times use).  The consumer process stamps the receive.  The parent
prints the consecutive differences as p50/p99 (ms): what the publish delay, each wait and each
storage call cost the message.  The wrappers are this benchmark's alone; nothing in the library
changes.  An ``fsync`` is counted in the stage of the thread that issued it: a sync run on a helper
thread is charged to none (its cost shows in the wall-clock gap around it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# the stages in the order a message passes them (each a wall-clock time, seconds)
STAGES = ("send", "cut", "upload", "encoded", "uploaded", "commit", "linked", "committed", "callback", "receive")
TITLES = {
    "cut": "publish delay and hold (send -> cut)",
    "upload": "pool wake-up (cut -> upload starts)",
    "encoded": "rows + Parquet encode",
    "uploaded": "segment write, file + directory fsync",
    "commit": "wait for the commit in flight",
    "linked": "commit: snapshot, fsyncs, link",
    "receive_from_link": "consumer: link -> receive",
    "committed": "commit: directory fsync after the link",
    "callback": "sender wake-up to the callback",
}


class ProducerTrace:
    """Stamps per message (indexed by sequence id - ``first``) while installed in a producer process."""

    def __init__(self, count: int, first: int) -> None:
        self.first = first
        self.times = {stage: np.full(count, np.nan) for stage in STAGES[1:-2]}
        self.fsync_s = {"upload": [], "commit": []}  # durations of the fsyncs the stage's thread ran
        self._local = threading.local()
        self._offset_s = time.time() - time.monotonic()

    def _stamp(self, stage: str, seqs: list[int], when: float | None = None) -> None:
        index = np.asarray(seqs, dtype=np.int64) - self.first
        index = index[(index >= 0) & (index < len(self.times[stage]))]
        self.times[stage][index] = time.time() if when is None else when

    def install(self) -> None:
        from broker_core.client import producer_pipeline, producer_sender
        from broker_core.topic import appends, topic_log

        trace = self
        local = self._local

        def seqs_of(items: list[Any]) -> list[int]:
            return [seq for item in items for seq in item.batch.sequence_ids]

        original_launch = producer_sender.ProducerSender._launch

        def launch(self: Any, q: Any, batch: Any, dedup: bool) -> Any:
            trace._stamp("cut", batch.sequence_ids)
            return original_launch(self, q, batch, dedup)

        original_upload = producer_pipeline.ProducerPipeline._upload

        def upload(self: Any, q: Any, item: Any) -> None:
            local.seqs, local.stage = seqs_of([item]), "upload"
            trace._stamp("upload", local.seqs)
            try:
                original_upload(self, q, item)
            finally:
                local.stage = None

        original_prepare = topic_log.TopicLog.prepare

        def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original_prepare(self, *args, **kwargs)  # the batch is "uploaded" when this returns
            if getattr(local, "stage", None) == "upload":
                trace._stamp("uploaded", local.seqs)
            return out

        original_commit = producer_pipeline.ProducerPipeline._commit_group

        def commit(self: Any, q: Any, group: list[Any]) -> None:
            local.seqs, local.stage = seqs_of(group), "commit"
            trace._stamp("commit", local.seqs)
            try:
                original_commit(self, q, group)
            finally:
                trace._stamp("committed", local.seqs)
                local.stage = None

        original_encode = appends.encode_segment

        def encode(*args: Any, **kwargs: Any) -> Any:
            out = original_encode(*args, **kwargs)
            if getattr(local, "stage", None) == "upload":
                trace._stamp("encoded", local.seqs)
            return out

        original_fsync = os.fsync

        def fsync(fd: Any) -> None:
            started = time.perf_counter()
            try:
                original_fsync(fd)
            finally:
                stage = getattr(local, "stage", None)
                if stage in trace.fsync_s:
                    trace.fsync_s[stage].append(time.perf_counter() - started)

        original_link = os.link

        def link(*args: Any, **kwargs: Any) -> None:
            original_link(*args, **kwargs)
            if getattr(local, "stage", None) == "commit":
                trace._stamp("linked", local.seqs)

        producer_sender.ProducerSender._launch = launch  # type: ignore[method-assign]
        producer_pipeline.ProducerPipeline._upload = upload  # type: ignore[method-assign]
        topic_log.TopicLog.prepare = prepare  # type: ignore[method-assign]
        producer_pipeline.ProducerPipeline._commit_group = commit  # type: ignore[method-assign]
        appends.encode_segment = encode  # type: ignore[assignment]
        os.fsync = fsync
        os.link = link

    def save(self, out: str) -> None:
        np.savez(out + ".trace.npz", **self.times,
                 fsync_upload=np.asarray(self.fsync_s["upload"]), fsync_commit=np.asarray(self.fsync_s["commit"]))


def load(out: str, send_s: np.ndarray, receive_s: np.ndarray, committed_s: np.ndarray) -> dict[str, np.ndarray]:
    """The per-message stage times of one run (seconds), with send, callback and receive added."""
    saved = np.load(out + ".trace.npz")
    times = {stage: saved[stage] for stage in STAGES[1:-2]}
    times["send"] = send_s
    times["receive"] = receive_s
    times["callback"] = committed_s
    times["fsync_upload"] = saved["fsync_upload"]
    times["fsync_commit"] = saved["fsync_commit"]
    return times


def breakdown(runs: list[dict[str, np.ndarray]], pct: Callable[[np.ndarray], tuple[float, float]]) -> list[str]:
    """Lines of the per-stage table: p50/p99 of each consecutive stage difference (ms)."""
    def cat(key: str) -> np.ndarray:
        return np.concatenate([run[key] for run in runs])

    pairs = [("send", "cut"), ("cut", "upload"), ("upload", "encoded"), ("encoded", "uploaded"),
             ("uploaded", "commit"), ("commit", "linked"), ("linked", "receive"), ("linked", "committed"),
             ("committed", "callback")]
    lines = [f"{'stage (ms)':<44}{'p50':>8}{'p99':>8}"]
    for start, end in pairs:
        diff = (cat(end) - cat(start)) * 1000
        diff = diff[~np.isnan(diff)]
        if not len(diff):
            continue
        title = TITLES["receive_from_link" if end == "receive" else end]
        p50, p99 = pct(diff)
        lines.append(f"{title:<44}{p50:>8.2f}{p99:>8.2f}")
    for start, end, title in (("send", "linked", "send -> link (visible to readers)"),
                              ("send", "receive", "send -> receive")):
        total = (cat(end) - cat(start)) * 1000
        total = total[~np.isnan(total)]
        lines.append(f"{title:<44}{pct(total)[0]:>8.2f}{pct(total)[1]:>8.2f}")
    for key, title in (("fsync_upload", "one fsync on the upload thread"),
                       ("fsync_commit", "one fsync on the commit thread")):
        values = cat(key) * 1000
        if len(values):
            lines.append(f"{title:<44}{pct(values)[0]:>8.2f}{pct(values)[1]:>8.2f}   ({len(values)} calls)")
    return lines


__all__ = ["ProducerTrace", "breakdown", "load"]
