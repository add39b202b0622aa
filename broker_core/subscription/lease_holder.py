"""Who holds a consumer's lease, and whether that holder is provably gone.

A consumer's entry in the cursor records the process that registered it (host, process id, and the
kernel boot id and process-id namespace that make the id unambiguous).  Two uses:

- every ``ConsumerBusy`` raised because of a lease says who holds it (``describe``);
- a lease whose holder is *provably* gone is released at once instead of being waited out
  (``is_gone``): only when the holder ran under this very kernel boot and process-id namespace and
  either its process no longer exists, or it is this process and no consumer of that name is open
  here.  Anything else (another machine, another container, an entry written before holders were
  recorded) is kept until it expires: an Exclusive subscription must never have two active
  consumers, and a lease of another machine cannot be checked (``docs/DECISIONS.md`` D137).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections import Counter
from datetime import UTC, datetime

_LOCK = threading.Lock()
_OPEN: Counter[str] = Counter()  # lease key (``lease_key``) -> joins not yet left
_SPACE: dict[int, tuple[str, str]] = {}  # pid -> (boot id, pid namespace), cached per process


def _pid_space() -> tuple[str, str]:
    """(boot id, pid namespace) of this process; ("", "") where the system does not tell."""
    pid = os.getpid()
    space = _SPACE.get(pid)
    if space is None:
        boot = ns = ""
        with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        with contextlib.suppress(OSError):
            ns = str(os.stat("/proc/self/ns/pid").st_ino)
        space = _SPACE[pid] = (boot, ns)
    return space


def this_holder() -> dict[str, str]:
    """The holder record of a lease taken by this process."""
    boot, ns = _pid_space()
    return {"host": socket.gethostname(), "pid": str(os.getpid()), "boot": boot, "pidNs": ns}


def describe(holder: dict[str, str]) -> str:
    """``process 123 on host x`` (or ``an unrecorded process`` for entries written before holders were)."""
    if not holder.get("pid"):
        return "an unrecorded process"
    return f"process {holder['pid']} on host {holder.get('host', '?')}"


def expiry_text(lease_expires_ms: int, now_ms: int) -> str:
    """``2026-11-29 03:04:05 UTC (in 27 s)``."""
    at = datetime.fromtimestamp(lease_expires_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{at} (in {max(0, lease_expires_ms - now_ms) / 1000:.0f} s)"


def lease_key(root_uri: str, subscription: str, name: str) -> str:
    """What identifies one consumer's lease: the root, the subscription (with its topic), the name."""
    return f"{root_uri}|{subscription}|{name}"


def opening(key: str) -> None:
    """A consumer of this process is joining: counted before its join commits (see ``is_gone``)."""
    with _LOCK:
        _OPEN[key] += 1


def closed(key: str) -> None:
    """A consumer of this process left, was closed without leaving, or its join failed."""
    with _LOCK:
        _OPEN[key] -= 1
        if _OPEN[key] <= 0:
            del _OPEN[key]


def is_gone(holder: dict[str, str], key: str) -> bool:
    """Whether the lease's holder provably can no longer use it (see the module docstring)."""
    if not holder:
        return False
    boot, ns = _pid_space()
    if not boot or not ns or holder.get("boot") != boot or holder.get("pidNs") != ns:
        return False
    try:
        pid = int(holder.get("pid", ""))
    except ValueError:
        return False
    if pid == os.getpid():
        with _LOCK:
            return key not in _OPEN
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False


__all__ = ["closed", "describe", "expiry_text", "is_gone", "lease_key", "opening", "this_holder"]
