"""What every ``pubsub`` command shares: the parser class, the storage root, output, value parsing.

Exit codes: 0 success; 1 the operation failed (not found, exists already, in use, storage error); 2
the command line or a configuration value is invalid (argparse errors, bad names, unknown policy
keys, malformed durations), detected before anything is changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import re
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

from broker_core.broker.broker import Broker
from broker_core.broker.near_names import close_topics, did_you_mean
from broker_core.errors import NamespaceNotFound, NotAllowedError, TopicNotFound
from broker_core.naming import NamespaceName, TopicName

ROOT_ENV = "PUBSUB_ROOT"
"""The environment variable naming the storage root when ``--root`` is not given."""


class UsageError(Exception):
    """The command line is wrong (exit code 2); raised instead of argparse's print-and-exit."""


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, raised rather than printed (see ``main``)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


@dataclass(frozen=True, slots=True)
class Output:
    """What a command prints: ``data`` with ``--json``, else ``lines``."""

    data: Any
    lines: list[str] = field(default_factory=list)
    exit_code: int = 0  # non-zero when the command ran but found a problem (``topics check``)
    printed: bool = False  # the command printed its output itself as it went (``maintain --every``)


Handler = Callable[["Context", argparse.Namespace], Output]


def common_options() -> CliParser:
    """Options accepted by every command, before or after the subcommand names."""
    parent = CliParser(add_help=False)
    group = parent.add_argument_group("global options")
    group.add_argument(
        "--root",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=f"the storage root: a folder, file:// URL or s3://bucket/prefix (default: ${ROOT_ENV})",
    )
    group.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        action="append",
        default=argparse.SUPPRESS,
        help="an object-store option (aws_endpoint=..., aws_region=...; repeatable); AWS_* variables also apply",
    )
    group.add_argument(
        "--config",
        metavar="TOML",
        default=argparse.SUPPRESS,
        help="broker settings file (default: <root>/_pubsub/broker.toml, else built-ins)",
    )
    group.add_argument(
        "--create-root",
        action="store_true",
        default=argparse.SUPPRESS,
        help="create the storage root if it does not exist (by default a missing root is an error)",
    )
    group.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print machine-readable JSON on stdout"
    )
    return parent


def add_command(
    subparsers: Any,
    name: str,
    *,
    help: str,
    description: str | None = None,
    epilog: str | None = None,
    handler: Handler | None = None,
) -> CliParser:
    """Add a subcommand carrying the global options; ``handler`` runs it (groups have none)."""
    text = description or help[:1].upper() + help[1:] + "."
    parser: CliParser = subparsers.add_parser(
        name,
        help=help,
        description=text if "\n" in text else textwrap.fill(text, 100),
        epilog=epilog,
        parents=[common_options()],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if handler is not None:
        parser.set_defaults(handler=handler)
    return parser


def add_group(subparsers: Any, name: str, *, help: str, description: str | None = None) -> Any:
    """Add a command group (``pubsub topics ...``) and return its subparsers."""
    parser = add_command(subparsers, name, help=help, description=description)
    return parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)


def storage_options(pairs: list[str] | None) -> dict[str, str]:
    """``--storage-option KEY=VALUE`` pairs as a dict (a pair without ``=`` is a usage error; its
    value is not echoed, it may be a secret)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError("--storage-option takes KEY=VALUE (e.g. aws_endpoint=http://127.0.0.1:9000); "
                             "one was given without '=' or without a key")
        out[key.strip()] = value
    return out


class Context:
    """The parsed arguments and, opened on first use, the storage root's broker."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._broker: Broker | None = None

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def now(self) -> int:
        """ "Now" in epoch ms: ``--now`` where a command has it, else the wall clock."""
        return now_ms(self.args)

    @property
    def broker(self) -> Broker:
        """The root's broker.  A missing root is an error: a typo must not create a new root."""
        if self._broker is None:
            root = getattr(self.args, "root", None) or os.environ.get(ROOT_ENV)
            if not root:
                raise UsageError(f"no storage root: pass --root DIR or set {ROOT_ENV}")
            self._broker = Broker.for_url(
                root,
                getattr(self.args, "config", None),
                create_root=bool(getattr(self.args, "create_root", False)),
                storage_options=storage_options(getattr(self.args, "storage_option", None)),
            )
        return self._broker


# -- names and topics ----------------------------------------------------------------------------------


def persistent_topic(text: str) -> TopicName:
    """Parse a topic that must be persistent (the CLI sees storage, not other processes' memory)."""
    name = TopicName.parse(text)
    if not name.is_persistent:
        raise NotAllowedError(
            f"{name} is non-persistent: it lives in the memory of the processes using it, which the "
            "pubsub command cannot see",
            topic=str(name),
        )
    return name


def require_topic(broker: Broker, name: TopicName) -> list[TopicName]:
    """The internal topics of an existing topic (never creates one; partition logs may not exist yet).

    Raises:
        NamespaceNotFound, TopicNotFound: with a message saying how to create it.
    """
    admin = broker.admin
    if not admin.namespace_exists(NamespaceName.parse(name.namespace_name)):
        raise NamespaceNotFound(
            f"namespace {name.namespace_name} of topic {name} does not exist", namespace=name.namespace_name
        )
    try:
        return admin.topic_partitions(name, auto_create=False)
    except TopicNotFound:
        near = close_topics(admin, name)
        if near:  # a typo: name the topics meant, never suggest creating the typo
            hint = f"{did_you_mean(near)} ('pubsub topics list {name.namespace_name}' lists them all)"
        else:
            hint = (f"'pubsub topics list {name.namespace_name}' lists the existing ones; to make it, "
                    f"'pubsub topics create {name}'")
        raise TopicNotFound(f"topic {name} does not exist; {hint}", topic=str(name)) from None


def require_target(args: argparse.Namespace) -> str | TopicName:
    """A job's target: the positional topic or ``--namespace`` (exactly one)."""
    topic, namespace = getattr(args, "topic", None), getattr(args, "namespace", None)
    if (topic is None) == (namespace is None):
        raise UsageError("give either a TOPIC or --namespace TENANT/NAMESPACE (exactly one)")
    if namespace is not None:
        return str(NamespaceName.parse(namespace))
    return TopicName.parse(str(topic))


# -- values -------------------------------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d|w)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_SIZE = re.compile(r"^(\d+)([kmgt]?)(i?b)?$", re.IGNORECASE)
_SIZE_FACTOR = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_INT = re.compile(r"^-?\d+$")


def duration_ms(text: str) -> int:
    """``30s``, ``10m``, ``2h``, ``7d``, ``1w`` (or ``500ms``) as milliseconds (argparse type)."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number and a unit (ms, s, m, h, d, w), e.g. 30m or 7d"
        )
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def size_bytes(text: str) -> int:
    """``512``, ``64K``, ``10M``, ``2G``, ``1T`` (binary units, optional ``B``/``iB``) as bytes."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use a number and an optional unit (K, M, G, T), e.g. 500M or 10G"
        )
    return int(match.group(1)) * _SIZE_FACTOR[match.group(2).lower()]


def minutes(text: str) -> int:
    """A duration in whole minutes, or ``0`` / ``-1`` (no limit), for retention time (argparse type)."""
    if text.strip() in ("-1", "0"):
        return int(text)
    ms = duration_ms(text)
    if ms % 60_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of minutes")
    return ms // 60_000


def megabytes(text: str) -> int:
    """A size in whole MB, or ``0`` / ``-1`` (no limit), for retention size (argparse type)."""
    if text.strip() in ("-1", "0"):
        return int(text)
    size = size_bytes(text)
    if size % (1 << 20):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of megabytes (M)")
    return size >> 20


def seconds(text: str) -> int:
    """A duration in whole seconds, or ``0`` (argparse type)."""
    ms = 0 if text.strip() == "0" else duration_ms(text)
    if ms % 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds")
    return ms // 1000


def count(text: str) -> int:
    """An int >= 1 (argparse type)."""
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def offset(text: str) -> int:
    """An int >= 0 (argparse type)."""
    if not re.fullmatch(r"\d+", text.strip()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def time_ms(text: str, *, now_ms: int) -> int:
    """A point in time: epoch milliseconds, ISO 8601 (naive means UTC), or a duration ago (``10m``)."""
    value = text.strip()
    if re.fullmatch(r"\d+", value):
        return int(value)
    if _DURATION.match(value):
        return now_ms - duration_ms(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            f"invalid time {text!r}: use ISO 8601 (2024-05-01T12:00:00Z), epoch milliseconds, or a "
            "duration ago such as 10m, 2h or 7d"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def now_ms(args: argparse.Namespace) -> int:
    """``--now`` if given (jobs evaluate "as of" it), else the wall clock."""
    wall = time.time_ns() // 1_000_000
    given = getattr(args, "now", None)
    return wall if given is None else time_ms(given, now_ms=wall)


def iso(ms: int | None) -> str | None:
    """Epoch ms as ISO 8601 UTC with milliseconds."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def policy_value(text: str) -> bool | int | str:
    """A policy value typed on the command line: ``true``/``false``, an integer, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return int(text) if _INT.match(text) else text


def key_values(pairs: Sequence[str]) -> dict[str, bool | int | str]:
    """``key=value`` arguments as a dict (a key given twice is an error)."""
    out: dict[str, bool | int | str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"expected key=value, got {pair!r}")
        if key.strip() in out:
            raise UsageError(f"policy {key.strip()!r} is given twice")
        out[key.strip()] = policy_value(value.strip())
    return out


# -- JSON of library results ----------------------------------------------------------------------------


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def plain(value: Any) -> Any:
    """A job result (dataclasses, tuples, properties) as JSON-able data with camelCase keys."""
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {camel(f.name): plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for attr, member in inspect.getmembers(type(value)):
            if isinstance(member, property) and not attr.startswith("_"):
                out[camel(attr)] = plain(getattr(value, attr))
        describe = getattr(value, "describe", None)
        if callable(describe):
            out["summary"] = describe()
        return out
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str)


__all__ = [
    "ROOT_ENV",
    "CliParser",
    "Context",
    "Handler",
    "Output",
    "UsageError",
    "add_command",
    "add_group",
    "camel",
    "common_options",
    "count",
    "dump",
    "duration_ms",
    "iso",
    "key_values",
    "megabytes",
    "minutes",
    "now_ms",
    "offset",
    "persistent_topic",
    "plain",
    "policy_value",
    "require_target",
    "require_topic",
    "seconds",
    "size_bytes",
    "time_ms",
]
