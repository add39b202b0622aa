"""Subprocess side of the maintenance lease tests: one ``run_maintenance_pass`` as its own process.

Run as ``python maintain_worker.py '<json args>'`` (``root``, ``log``, ``holder``, ``lease_ms``,
``job_s``).  Around every job it appends ``start|end <topic> <job> <epoch ms> <holder>`` to the shared
``log`` file (one ``O_APPEND`` write per line, so two processes never interleave a line), sleeping
``job_s`` after each start so that a pass lasts long enough to be killed in the middle.  It prints the
pass summary as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs.maintain import run_maintenance_pass
from broker_core.jobs.maintenance_lease import MaintenanceLease


def main() -> None:
    args = json.loads(sys.argv[1])
    broker = Broker.for_url(args["root"], BrokerConfig(fsync_enabled=False))
    fd = os.open(args["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def observer(event: str, topic: str, job: str) -> None:
        os.write(fd, f"{event} {topic} {job} {time.time_ns() // 1_000_000} {args['holder']}\n".encode())
        if event == "start":
            time.sleep(args["job_s"])

    lease = MaintenanceLease(broker.io, holder=args["holder"], lease_ms=args["lease_ms"])
    summary = run_maintenance_pass(broker, execute=True, lease=lease, observer=observer)
    print(json.dumps({"status": summary["status"], "topics": [t["topic"] for t in summary["topics"]]}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
