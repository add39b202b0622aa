"""The ``pubsub`` command: the parser, and ``main`` with its one-line errors and exit codes.

``main(argv)`` never raises and never prints a traceback (set ``PUBSUB_DEBUG=1`` to get one): it
returns 0 on success, 1 when the operation failed and 2 when the command line (or a configuration
value) is invalid, printing ``pubsub: error: <message>`` on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from broker_core.cli import maintain, metrics, reconcile, schemas, subscriptions, tenancy, topics
from broker_core.cli.common import ROOT_ENV, CliParser, Context, UsageError, common_options, dump
from broker_core.cli.progress import terminal_progress
from broker_core.errors import InvalidConfiguration, InvalidTopicName, InvalidUrl, PulsarException
from broker_core.storage.urls import mask_userinfo
from broker_core.version import package_version

PROG = "pubsub"
DEBUG_ENV = "PUBSUB_DEBUG"

_DESCRIPTION = """\
Administer a spark-pubsub storage root, shaped after pulsar-admin: tenants, namespaces, topics,
subscriptions and policies, plus the reconcile jobs (retention, TTL, backlog quotas, compaction,
segment merging, log checkpoints and cleanup, vacuum). Destructive jobs are dry runs unless --execute."""

_EPILOG = f"""\
global options (--root, --config, --json) go before or after the command.
exit codes: 0 ok, 1 the operation failed, 2 invalid command line or value.

examples:
  export {ROOT_ENV}=/data/pubsub
  pubsub tenants create acme
  pubsub namespaces create acme/orders
  pubsub namespaces policies set acme/orders retentionTimeInMinutes=1440 retentionSizeInMB=-1
  pubsub topics create acme/orders/events --partitions 4
  pubsub subscriptions create acme/orders/events billing
  pubsub topics peek acme/orders/events -s billing -n 10
  pubsub retention --namespace acme/orders --execute
  pubsub vacuum --namespace acme/orders --min-age 7d            # dry run: lists what would go
"""


def build_parser() -> CliParser:
    """The whole command tree (every level answers ``--help``)."""
    parser = CliParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        parents=[common_options()],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    tenancy.register(commands)
    topics.register(commands)
    subscriptions.register(commands)
    reconcile.register(commands)
    maintain.register(commands)
    schemas.register(commands)
    metrics.register(commands)
    return parser


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"storage error: {exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return mask_userinfo(" ".join(str(exc).split())) or type(exc).__name__  # never a URL's secret


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, UsageError | InvalidConfiguration | InvalidTopicName | InvalidUrl):
        return 2
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pubsub`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    try:
        args = build_parser().parse_args(argv)
        with terminal_progress(json_output=bool(getattr(args, "json", False))):  # long jobs, on a terminal
            output = args.handler(Context(args), args)
    except SystemExit as exc:  # --help and --version print and exit 0
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (UsageError, PulsarException, OSError) as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return _exit_code(exc)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(
            f"{PROG}: error: unexpected {type(exc).__name__}: {_one_line(exc)} "
            f"(set {DEBUG_ENV}=1 for a traceback)",
            file=sys.stderr,
        )
        return 1
    try:
        if not output.printed:  # a command that printed as it went (``maintain --every``) is done
            if getattr(args, "json", False):
                print(dump(output.data))
            elif output.lines:
                print("\n".join(output.lines))
        sys.stdout.flush()
    except BrokenPipeError:  # `pubsub ... | head`: the reader left; the command itself succeeded
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return output.exit_code


__all__ = ["DEBUG_ENV", "PROG", "build_parser", "main"]
