"""The official client's ``logger`` choices (``ConsoleLogger``, ``FileLogger``, ``LoggerLevel``).

The official ``logger`` argument routes the C++ core's log lines.  This library has no C++ core:
it logs through Python's ``logging`` under the ``broker_core`` logger, which is where to configure
levels and handlers.  ``Client(logger=...)`` is therefore type-checked as the official client
does (``None``, a ``logging.Logger``, a ``ConsoleLogger`` or a ``FileLogger``) and otherwise has
no effect; ``docs/CLIENT.md`` says so.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from broker_core.client.args import check_type
from broker_core.errors import InvalidConfiguration


class LoggerLevel(enum.IntEnum):
    """The official log levels."""

    Debug = 0
    Info = 1
    Warn = 2
    Error = 3


class ConsoleLogger:
    """Official name: log to the console at ``log_level``.  Accepted, no effect (see module doc)."""

    def __init__(self, log_level: LoggerLevel = LoggerLevel.Info) -> None:
        self.log_level = check_type(LoggerLevel, log_level, "log_level")


class FileLogger:
    """Official name: log to ``log_file`` at ``log_level``.  Accepted, no effect (see module doc)."""

    def __init__(self, log_level: LoggerLevel, log_file: str) -> None:
        self.log_level = check_type(LoggerLevel, log_level, "log_level")
        self.log_file = check_type(str, log_file, "log_file")


def check_logger(logger: Any) -> None:
    """Refuse what the official client refuses for ``logger``, with a ``ValueError``."""
    if logger is not None and not isinstance(logger, logging.Logger | ConsoleLogger | FileLogger):
        raise InvalidConfiguration(
            f"argument 'logger' must be None, a logging.Logger, a ConsoleLogger or a FileLogger, got "
            f"{type(logger).__name__} {logger!r}",
            argument="logger",
        )


__all__ = ["ConsoleLogger", "FileLogger", "LoggerLevel", "check_logger"]
