"""``pubsub schemas get | upload | delete | compatibility``: a topic's schema registry (like pulsar-admin).

Schema files use pulsar-admin's JSON form: ``{"type": "AVRO", "schema": "<definition text or object>",
"properties": {}}``.  ``upload`` registers a version under the topic's compatibility strategy (an
admin upload does not need ``isAllowAutoUpdateSchema``); ``compatibility`` only checks and writes
nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from broker_core.cli.common import (
    Context,
    Output,
    UsageError,
    add_command,
    add_group,
    persistent_topic,
    require_topic,
)
from broker_core.errors import IncompatibleSchema, SchemaDefinitionError, SchemaNotFound
from broker_core.schema.compatibility import incompatibility
from broker_core.schema.info import UNTYPED, SchemaInfo
from broker_core.schema.negotiation import producer_version


def register(commands: Any) -> None:
    subs = add_group(commands, "schemas", help="a topic's schema registry (versions, upload, delete, compatibility)")
    get = add_command(subs, "get", help="show a topic's latest schema (or --version N, or --all versions)",
                      handler=_get)
    get.add_argument("topic")
    which = get.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, metavar="N", help="a given version")
    which.add_argument("--all", action="store_true", help="every version, deletion markers included")
    for name, handler, text in (
        ("upload", _upload, "register a schema version from a file (checked under the topic's strategy)"),
        ("compatibility", _compatibility, "check whether a schema file could be registered; writes nothing"),
    ):
        cmd = add_command(subs, name, help=text, handler=handler,
                          epilog='file format: {"type": "AVRO", "schema": "<Avro schema JSON>", "properties": {}}')
        cmd.add_argument("topic")
        cmd.add_argument("-f", "--filename", required=True, metavar="FILE", help="schema definition (JSON)")
    delete = add_command(subs, "delete", help="mark a topic's schema deleted (old versions stay readable)",
                         handler=_delete)
    delete.add_argument("topic")


def _doc(number: int, info: SchemaInfo | None) -> dict[str, Any]:
    return {"version": number, "deleted": True} if info is None else {"version": number, **info.to_json()}


def _get(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    registry = ctx.broker.schemas.registry(name)
    if args.all:
        docs = [_doc(n, d.info()) for n, d in registry.all_versions()]
        if not docs:  # a missing topic says so, not "no schema"
            require_topic(ctx.broker, name)
        return Output({"topic": str(name), "versions": docs}, [json.dumps(d) for d in docs] or ["no schema"])
    if args.version is not None:
        info = registry.get(args.version)
        if info is None:
            require_topic(ctx.broker, name)
            raise SchemaNotFound(f"{name} has no schema version {args.version}", topic=str(name))
        doc = _doc(args.version, info)
    else:
        latest = registry.latest()
        if latest is None:
            require_topic(ctx.broker, name)  # a deleted topic's history ends with a deletion marker
            raise SchemaNotFound(f"{name} has no schema; register one with pubsub schemas upload",
                                 topic=str(name))
        doc = _doc(*latest)
    return Output({"topic": str(name), **doc}, [f"version {doc['version']} of {name}:", json.dumps(doc, indent=1)])


def _read(path: str) -> SchemaInfo:
    try:
        raw = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read schema file {path!r}: {exc.strerror}") from None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SchemaDefinitionError(f"schema file {path!r} is not JSON: {exc}") from None
    info = SchemaInfo.from_json(doc)
    if info.type in UNTYPED:
        raise SchemaDefinitionError(f"schema file {path!r} has type {info.type.name}: there is nothing to register")
    return info


def _upload(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    info = _read(args.filename)
    schemas = ctx.broker.schemas
    policy = dataclasses.replace(schemas.policy(name), allow_auto_update=True)
    version = producer_version(schemas.registry(name), info, policy, now_ms=ctx.now())
    return Output({"topic": str(name), "version": version}, [f"{name}: schema registered as version {version}"])


def _compatibility(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    info = _read(args.filename)
    schemas = ctx.broker.schemas
    policy = schemas.policy(name)
    live = schemas.registry(name).live()
    existing = next((n for n, old in live if old.same_as(info)), None)
    conflict = None if existing is not None else incompatibility(info, live, policy.strategy)
    out = {"topic": str(name), "strategy": policy.strategy.value, "compatible": conflict is None,
           "registeredAs": existing}
    if conflict is not None:
        raise IncompatibleSchema(f"{name}: not compatible under {policy.strategy.value}: {conflict[1]}",
                                 topic=str(name), version=conflict[0], strategy=policy.strategy.value)
    note = f" (already version {existing})" if existing is not None else ""
    return Output(out, [f"{name}: compatible under {policy.strategy.value}{note}"])


def _delete(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    marker = ctx.broker.schemas.registry(name).delete(now_ms=ctx.now())
    if marker is None:
        raise SchemaNotFound(f"{name} has no schema to delete", topic=str(name))
    return Output({"topic": str(name), "deletedAt": marker}, [f"{name}: schema deleted (marker version {marker})"])


__all__ = ["register"]
