"""What a writer knows because it wrote the log's tip itself: enough to commit again without reading.

A writer that has just committed version v knows the state at v exactly.  Its next commit goes
straight to the conditional put of v+1: if another writer committed v+1 meanwhile, the put is
refused (S3's 412, a failed hard link locally) and the writer reads what it missed, as after any
lost race.  Reading v and v+1 first (``TransactionLog.live_snapshot``: two GETs, and a HEAD of v+2
for gaps) only repeats what a refusal says, and on an object store each read is a billed round trip
in the commit's path (``docs/PROTOCOL.md`` section 5, "Commits on object stores").

What a refusal cannot say is that the topic was deleted and created again under the same name in
between: the new log starts again at version 0, v+1 may be free there, and the put would land this
writer's commit in another topic.  (A deletion alone is caught: its tombstone commit refuses the
put, and once the deletion has removed the log, the anchor check after the put finds the deleted
directory's marker.)  Between the anchor check that ended our commit of v and the put of v+1, such
a race needs at least three requests of other processes in sequence (the deletion's marker PUT,
LIST and DELETE), then the creation's marker DELETE before our next anchor check.  So a writer
trusts its tip only while less time has passed since its commit of v returned than that commit
took (one PUT and one HEAD): a store serves the other processes at the same speed, so their
requests do not fit.  The re-reading writer of before had a window of the same order (its re-read
came two requests before its put).  A writer idle for longer re-reads first, as before.

On a local root requests are not alike (our commit pays for fsyncs, another process's
rename does not) and reading is cheap, so a local writer always re-reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from broker_core.log.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class OwnCommit:
    """This handle's last commit: the state it produced, when the put returned, how long it took."""

    snapshot: Snapshot
    done_s: float
    took_s: float

    @classmethod
    def now(cls, snapshot: Snapshot, started_s: float) -> OwnCommit:
        """The commit of ``snapshot`` whose put (with its anchor check) began at ``started_s``."""
        done_s = monotonic_s()
        return cls(snapshot=snapshot, done_s=done_s, took_s=done_s - started_s)

    def vouches_for(self, snapshot: Snapshot) -> bool:
        """May a commit build on ``snapshot`` without reading the log first?  Only on the very
        state this handle committed, and only within the time that commit took."""
        return snapshot is self.snapshot and monotonic_s() - self.done_s <= self.took_s


def monotonic_s() -> float:
    """The monotonic clock (a seam: tests freeze or advance it)."""
    return time.monotonic()


__all__ = ["OwnCommit", "monotonic_s"]
