"""Test-only start-up hook of the sink kill trial (``test_sink_exactly_once.py``): a deterministic pause.

The trial must cut a sink commit between two partition commits.  Racing a poll against the commit
(stop the job "the instant" a partition commit shows up) misses on a busy 2-core machine, so the
trial arms this hook instead: the job's Python processes import it at start-up (its folder is put on
``PYTHONPATH`` together with ``PUBSUB_TEST_PAUSE_DIR``), and the first sink partition commit after
``<dir>/arm`` appears claims the arm (one rename, so only one process pauses), writes
``<dir>/paused`` and waits to be killed.  Without the environment variable it does nothing.
"""

from __future__ import annotations

import os
import time

_DIR = os.environ.get("PUBSUB_TEST_PAUSE_DIR")

if _DIR:
    from broker_core.topic import topic_log

    _commit_staged = topic_log.TopicLog.commit_staged

    def _pausing_commit_staged(self, segments, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = _commit_staged(self, segments, *args, **kwargs)
        txn = kwargs.get("txn")
        if txn is not None and str(txn[0]).startswith("pubsub.sink."):
            try:
                os.rename(os.path.join(_DIR, "arm"), os.path.join(_DIR, f"taken-{os.getpid()}"))
            except OSError:
                return result  # not armed (or another process took the arm)
            with open(os.path.join(_DIR, "paused"), "w") as handle:
                handle.write(f"{self.path} {txn[1]}\n")
            while True:  # one partition of the batch is committed, the others are not: kill me now
                time.sleep(1)
        return result

    topic_log.TopicLog.commit_staged = _pausing_commit_staged  # type: ignore[method-assign]
