"""The ``pubsub`` command line (``pubsub --help``); ``main(argv)`` returns the exit status.

May import: anything in ``broker_core`` except ``asyncio``.  Nothing imports it but ``__main__``.
"""

from __future__ import annotations

from broker_core.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
