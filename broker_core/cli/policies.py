"""``pubsub namespaces policies ...`` and ``pubsub topics policies ...``: get, set and remove.

Keys are ``POLICY_KEYS`` (Pulsar's names); values typed as ``true``/``false``, integers or text.  A
change is validated in full (unknown keys, ranges, the retention pair) before the one commit that
applies it, so a refused command changes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from broker_core.cli.common import (
    Context,
    Output,
    UsageError,
    add_command,
    add_group,
    key_values,
    persistent_topic,
)
from broker_core.cli.common import require_topic as _require_topic
from broker_core.errors import InvalidConfiguration, NotAllowedError
from broker_core.jobs.retention import RetentionLimits
from broker_core.naming import NamespaceName, TopicName
from broker_core.topic.policies import POLICY_KEYS, EffectivePolicies, Policies, parse_policies

_KEYS_HELP = "policy keys: " + ", ".join(POLICY_KEYS)


def register(groups: Any, level: str) -> None:
    """Add ``policies get|set|remove`` under a ``namespaces`` or ``topics`` group."""
    what, metavar = ("namespace", "TENANT/NAMESPACE") if level == "namespace" else ("topic", "TOPIC")
    subs = add_group(groups, "policies", help=f"{what} policies (retention, TTL, backlog quota, ...)")
    get = add_command(subs, "get", help=f"show the policies set on a {what}", epilog=_KEYS_HELP, handler=_get)
    get.add_argument("target", metavar=metavar)
    get.add_argument(
        "--effective",
        action="store_true",
        help="show every value in force (broker defaults < namespace < topic)",
    )
    put = add_command(
        subs,
        "set",
        help=f"set {what} policies (one commit)",
        epilog=f"{_KEYS_HELP}\n\nexample: pubsub {what}s policies set {metavar} "
        "retentionTimeInMinutes=60 retentionSizeInMB=-1",
        handler=_set,
    )
    put.add_argument("target", metavar=metavar)
    put.add_argument("pairs", metavar="KEY=VALUE", nargs="+", help="values: true/false, integers, text")
    remove = add_command(
        subs, "remove", help=f"unset {what} policies (they inherit again)", epilog=_KEYS_HELP, handler=_remove
    )
    remove.add_argument("target", metavar=metavar)
    remove.add_argument("keys", metavar="KEY", nargs="+")
    for parser in (get, put, remove):
        parser.set_defaults(policy_level=level)


def _target(ctx: Context, args: argparse.Namespace) -> tuple[str, NamespaceName | TopicName]:
    if args.policy_level == "namespace":
        ns = NamespaceName.parse(args.target)
        ctx.broker.policies.namespace_policies(ns)  # NamespaceNotFound
        return "namespace", ns
    name = persistent_topic(args.target)
    if name.is_partition and ctx.broker.admin.partitioned_topic_metadata(name.partitioned_topic_name):
        raise NotAllowedError(
            f"{name} is a partition: policies apply to the whole topic {name.partitioned_topic_name}",
            topic=str(name),
        )
    _require_topic(ctx.broker, name)
    return "topic", name


def _current(ctx: Context, level: str, target: NamespaceName | TopicName) -> Policies:
    store = ctx.broker.policies
    if isinstance(target, NamespaceName):
        return store.namespace_policies(target)
    return store.topic_policies(target)


def _output(level: str, target: NamespaceName | TopicName, policies: Policies, note: str = "") -> Output:
    values = policies.to_json()
    lines = [f"{k} = {_show(v)}" for k, v in sorted(values.items())] or [
        f"no policies set on {level} {target}: it inherits them"
    ]
    return Output({level: str(target), "policies": values}, ([note] if note else []) + lines)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _get(ctx: Context, args: argparse.Namespace) -> Output:
    level, target = _target(ctx, args)
    if not args.effective:
        return _output(level, target, _current(ctx, level, target))
    broker = ctx.broker
    if level == "namespace":
        effective = EffectivePolicies.resolve(broker.config, _current(ctx, level, target))
    else:
        assert isinstance(target, TopicName)
        effective = broker.policies.effective(target, fresh=True)
    aliases = {name: f.alias or name for name, f in Policies.model_fields.items()}
    values = {aliases[f.name]: getattr(effective, f.name) for f in dataclasses.fields(effective)}
    return Output(
        {level: str(target), "effective": values}, [f"{k} = {_show(v)}" for k, v in sorted(values.items())]
    )


def _check(level: str, target: Any, current: Policies, changes: dict[str, Any], remove: list[str]) -> None:
    """Validate the change in full before committing (the store would refuse it too, but only
    this checks the retention pair, which Pulsar refuses at set time)."""
    source = f"{level} {target}"
    merged = parse_policies(current.to_json(), source=source).to_json()
    for key in remove:
        if key not in POLICY_KEYS:
            raise InvalidConfiguration(
                f"{source}: unknown policy {key!r}; known policies: {', '.join(POLICY_KEYS)}"
            )
        merged.pop(key, None)
    merged.update(parse_policies(changes, source=source).to_json())
    result = parse_policies(merged, source=source)
    minutes, mb = result.retention_time_in_minutes, result.retention_size_in_mb
    if minutes is not None and mb is not None:
        RetentionLimits(time_in_minutes=minutes, size_in_mb=mb)  # refuses 0 beside non-zero


def _set(ctx: Context, args: argparse.Namespace) -> Output:
    changes = key_values(args.pairs)
    level, target = _target(ctx, args)
    _check(level, target, _current(ctx, level, target), changes, [])
    store = ctx.broker.policies
    if level == "namespace":
        result = store.set_namespace_policies(str(target), changes)
    else:
        result = store.set_topic_policies(str(target), changes)
    return _output(level, target, result, f"updated {level} {target}:")


def _remove(ctx: Context, args: argparse.Namespace) -> Output:
    keys = list(dict.fromkeys(k.strip() for k in args.keys))
    if any("=" in k for k in keys):
        raise UsageError("policies remove takes KEY names, not KEY=VALUE")
    level, target = _target(ctx, args)
    _check(level, target, _current(ctx, level, target), {}, keys)
    store = ctx.broker.policies
    if level == "namespace":
        result = store.set_namespace_policies(str(target), {}, remove=keys)
    else:
        result = store.set_topic_policies(str(target), {}, remove=keys)
    return _output(level, target, result, f"updated {level} {target}:")


__all__ = ["register"]
