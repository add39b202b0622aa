"""``pubsub tenants ...`` and ``pubsub namespaces ...`` (with ``namespaces policies ...``)."""

from __future__ import annotations

import argparse
from typing import Any

from broker_core.cli import policies
from broker_core.cli.common import Context, Output, add_command, add_group
from broker_core.naming import NamespaceName, validate_tenant


def register(commands: Any) -> None:
    tenants = add_group(commands, "tenants", help="create, list and delete tenants")
    create = add_command(
        tenants,
        "create",
        help="create a tenant",
        handler=_create_tenant,
        epilog="example: pubsub tenants create acme",
    )
    create.add_argument("tenant", metavar="TENANT")
    add_command(tenants, "list", help="list the tenants", handler=_list_tenants)
    delete = add_command(
        tenants,
        "delete",
        help="delete a tenant that has no namespaces",
        handler=_delete_tenant,
        description="Delete a tenant that has no namespaces. "
        "'public' cannot be deleted: every open of the root re-creates it.",
    )
    delete.add_argument("tenant", metavar="TENANT")

    namespaces = add_group(commands, "namespaces", help="create, list and delete namespaces; policies")
    create = add_command(
        namespaces,
        "create",
        help="create a namespace in an existing tenant",
        handler=_create_namespace,
        epilog="example: pubsub namespaces create acme/orders",
    )
    create.add_argument("namespace", metavar="TENANT/NAMESPACE")
    listing = add_command(namespaces, "list", help="list a tenant's namespaces", handler=_list_namespaces)
    listing.add_argument("tenant", metavar="TENANT")
    delete = add_command(
        namespaces,
        "delete",
        help="delete a namespace that has no topics",
        handler=_delete_namespace,
        description="Delete a namespace that has no topics, with its policies. 'public/default' cannot "
        "be deleted: every open of the root re-creates it.",
    )
    delete.add_argument("namespace", metavar="TENANT/NAMESPACE")
    policies.register(namespaces, "namespace")


def _create_tenant(ctx: Context, args: argparse.Namespace) -> Output:
    name = validate_tenant(args.tenant)
    ctx.broker.admin.create_tenant(name)
    return Output({"tenant": name, "created": True}, [f"created tenant {name}"])


def _list_tenants(ctx: Context, args: argparse.Namespace) -> Output:
    names = ctx.broker.admin.list_tenants()
    return Output({"tenants": names}, names)


def _delete_tenant(ctx: Context, args: argparse.Namespace) -> Output:
    name = validate_tenant(args.tenant)
    ctx.broker.admin.delete_tenant(name)
    return Output({"tenant": name, "deleted": True}, [f"deleted tenant {name}"])


def _create_namespace(ctx: Context, args: argparse.Namespace) -> Output:
    ns = str(NamespaceName.parse(args.namespace))
    ctx.broker.admin.create_namespace(ns)
    return Output({"namespace": ns, "created": True}, [f"created namespace {ns}"])


def _list_namespaces(ctx: Context, args: argparse.Namespace) -> Output:
    names = ctx.broker.admin.list_namespaces(validate_tenant(args.tenant))
    return Output({"tenant": args.tenant, "namespaces": names}, names)


def _delete_namespace(ctx: Context, args: argparse.Namespace) -> Output:
    ns = str(NamespaceName.parse(args.namespace))
    ctx.broker.admin.delete_namespace(ns)
    return Output({"namespace": ns, "deleted": True}, [f"deleted namespace {ns}"])


__all__ = ["register"]
