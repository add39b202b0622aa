"""obstore for this process: the installed native module, or a fresh copy of it in a forked child.

obstore runs every request on one tokio runtime per loaded copy of its native library, started on
first use and never restarted.  A child forked after that inherits the runtime without its worker
threads, so its first request waits forever, through any store, old or new (obstore documents that
it is not fork-safe; ``docs/DECISIONS.md`` D141).  A child whose parent had made requests therefore
loads its own copy of the native library: the same file copied to a private temporary path, which
the dynamic loader treats as a different library, with its own (not yet started) runtime.  It costs
one file copy (~15 MB, tens of milliseconds) per forked child that opens an object store.

The copy's exception classes are its own; ``native_errors`` re-raises them as the installed
module's classes of the same name, so callers (and tests that inject errors) need only know
``obstore.exceptions``.  Where the copy cannot be loaded (no writable temporary folder, a loader
that refuses it), opening a store fails at once with ``CreatedBeforeFork`` instead of hanging.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from broker_core.errors import CreatedBeforeFork
from broker_core.storage.fork import on_fork_in_child

_LOCK = threading.Lock()
_module: ModuleType | None = None  # the native module this process uses, once it has used one
_inherited_stale = False  # an ancestor made requests through the installed module: its runtime is dead here
_kept: list[Any] = []  # stores inherited from before a fork, kept alive (see ``keep_forever``)


def native() -> ModuleType:
    """The native obstore module (``obstore._obstore``) this process's requests go through."""
    global _module
    module = _module
    if module is not None:
        return module
    with _LOCK:
        if _module is None:
            import obstore._obstore as installed

            _module = _fresh_copy(installed) if _inherited_stale else installed
        return _module


def is_installed(module: ModuleType) -> bool:
    import obstore._obstore as installed

    return module is installed


@contextlib.contextmanager
def native_errors(module: ModuleType) -> Iterator[None]:
    """Re-raise a copy's obstore errors as the installed module's class of the same name."""
    try:
        yield
    except Exception as exc:
        if is_installed(module) or not isinstance(exc, module.exceptions.BaseError):
            raise
        import obstore.exceptions as installed_errors

        kind = getattr(installed_errors, type(exc).__name__, installed_errors.GenericError)
        raise kind(str(exc)) from None


def keep_forever(store: Any) -> None:
    """Never drop ``store`` (one inherited from before a fork): dropping its connections would talk
    to the parent's runtime, whose locks may be held by threads that do not exist here."""
    _kept.append(store)


def _fresh_copy(installed: ModuleType) -> ModuleType:
    source = installed.__file__
    assert source is not None
    try:
        folder = tempfile.mkdtemp(prefix="pubsub-obstore-")
        try:
            target = os.path.join(folder, os.path.basename(source))
            shutil.copyfile(source, target)
            loader = importlib.machinery.ExtensionFileLoader(installed.__name__, target)
            spec = importlib.util.spec_from_file_location(installed.__name__, target, loader=loader)
            assert spec is not None
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # the loaded library stays mapped
    except Exception as exc:
        raise CreatedBeforeFork(
            f"this process was forked after its parent used an object store, and obstore's runtime does not "
            f"survive a fork; loading a private copy of it failed ({type(exc).__name__}: {exc}). Start worker "
            "processes with the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn')), or open "
            "object-store roots only after forking",
            pid=os.getpid(),
        ) from None
    return module


def _after_fork() -> None:
    global _LOCK, _module, _inherited_stale
    if _module is not None:
        _inherited_stale = True  # whichever module the parent used (installed or a copy), it is dead here
    _module, _LOCK = None, threading.Lock()


on_fork_in_child(_after_fork)


__all__ = ["is_installed", "keep_forever", "native", "native_errors"]
