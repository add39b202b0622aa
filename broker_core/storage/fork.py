"""What a forked child keeps of its parent's handles: nothing it can use, and it finds out at once.

``os.fork`` (multiprocessing's default start method on Linux before Python 3.14, gunicorn and
celery prefork workers, Spark's Python workers) copies memory but only the forking thread.  Every
thread the parent ran (producer senders, consumer dispatchers, the inotify reader, prefetch pools,
obstore's tokio runtime) is gone in the child, and a lock one of them held at that instant stays
locked forever.  A handle made before the fork would wait on them: an S3 request blocked for good,
a send that never completes.

So this module is the one place the library hooks ``os.register_at_fork``: in the child it bumps
the process *generation* and runs the resets that modules registered with ``on_fork_in_child``
(process-wide registries emptied, their locks made anew, pools forgotten).  Anything that owns
threads, connections or a registry's handles records the generation it was born in and calls
``check_born`` before use: an object from before the fork raises ``CreatedBeforeFork`` at once
instead of hanging, while a ``Client`` created in the child starts from scratch and works
(``docs/CLIENT.md`` section "Forking processes", ``docs/DECISIONS.md`` D140-D144).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from broker_core.errors import CreatedBeforeFork

_generation = 0
_resets: list[Callable[[], None]] = []


def generation() -> int:
    """This process's generation: 0 in the process that imported the library, +1 per fork since."""
    return _generation


def check_born(born: int, what: str) -> None:
    """Raise ``CreatedBeforeFork`` if ``what`` was created in generation ``born``, before a fork."""
    if born != _generation:
        raise created_before_fork(what)


def created_before_fork(what: str) -> CreatedBeforeFork:
    """The error for using ``what`` (made before this process was forked) in the child."""
    return CreatedBeforeFork(
        f"{what} was created before this process was forked (parent pid {os.getppid()}); its threads and "
        "connections stayed in the parent. Create the Client after the fork, in the child, or start "
        "worker processes with the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn'))",
        pid=os.getpid(),
    )


def on_fork_in_child(reset: Callable[[], None]) -> None:
    """Run ``reset`` in every forked child, right after the fork (one thread, nothing else running).

    A reset must only rebind module state (new empty dictionaries, new locks, ``None`` for a pool):
    it may not take a lock or call into storage, since either may be held by a thread that is gone."""
    _resets.append(reset)


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1
    for reset in _resets:
        with contextlib.suppress(Exception):  # a reset that fails must not kill the child
            reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["check_born", "created_before_fork", "generation", "on_fork_in_child"]
