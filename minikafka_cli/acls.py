"""`minikafka acls` (Kafka's kafka-acls.sh): add, remove and list the ACLs the controller
keeps in its metadata log and brokers enforce under `--authorizer`.

    minikafka acls --bootstrap-server H:P --add --allow-principal User:alice \\
        --operation Write --topic orders
    minikafka acls --bootstrap-server H:P --list --topic orders
    minikafka acls --bootstrap-server H:P --remove --deny-principal User:bob --topic orders

`--add` adds one ACL per (principal, operation, resource); `--remove` removes every ACL
that matches what is given (a missing option matches anything); `--list` prints them
grouped by resource, as kafka-acls.sh does. `--ssl-cafile` / `--ssl-certfile` /
`--ssl-keyfile` reach a TLS cluster (the call needs an ACL that allows ALTER, or
DESCRIBE for `--list`, on the cluster, or a super user's certificate).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import click

from minikafka.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_binding,
)
from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    bootstrap_option,
    client_security,
    config_file_only_option,
    error_text,
    fail,
)

#: kafka-acls.sh's operation spellings (any case; ClusterAction or CLUSTER_ACTION).
_OPERATIONS = {op.value.replace("_", ""): op for op in Operation}


def _operation(value: str) -> Operation:
    found = _OPERATIONS.get(value.replace("_", "").replace("-", "").upper())
    if found is None:
        choices = ", ".join(op.value.title().replace("_", "") for op in Operation)
        raise click.BadParameter(f"{value!r} is not an operation ({choices})")
    return found


def _resources(
    topics: Sequence[str], groups: Sequence[str], cluster: bool
) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, name) for name in topics]
    resources += [(ResourceType.GROUP, name) for name in groups]
    if cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def format_acls(bindings: Sequence[AclBinding]) -> str:
    """kafka-acls.sh's listing: the ACLs grouped by resource pattern."""
    lines: list[str] = []

    def pattern(binding: AclBinding) -> tuple[str, str, str]:
        return (binding.resource_type.value, binding.resource_name, binding.pattern_type.value)

    ordered = sorted(bindings, key=pattern)
    for (kind, name, pattern_type), group in itertools.groupby(ordered, pattern):
        lines.append(
            f"Current ACLs for resource `ResourcePattern(resourceType={kind}, name={name}, "
            f"patternType={pattern_type})`: "
        )
        lines.extend(
            f" \t(principal={b.principal}, host=*, operation={b.operation.value}, "
            f"permissionType={b.permission.value})"
            for b in group
        )
        lines.append("")
    return "\n".join(lines)


@click.command("acls", context_settings=CONTEXT_SETTINGS)
@config_file_only_option
@bootstrap_option
@click.option("--add", "action", flag_value="add", help="Add ACLs.")
@click.option("--remove", "action", flag_value="remove", help="Remove matching ACLs.")
@click.option("--list", "action", flag_value="list", help="List (matching) ACLs.")
@click.option("--allow-principal", multiple=True, metavar="User:NAME", help="Principal to allow.")
@click.option("--deny-principal", multiple=True, metavar="User:NAME", help="Principal to deny.")
@click.option(
    "--principal", "principals", multiple=True, metavar="User:NAME", help="--list: only these."
)
@click.option(
    "--operation",
    "operations",
    multiple=True,
    metavar="OP",
    help="Read, Write, Create, Delete, Alter, Describe, ClusterAction or All (repeatable).",
)
@click.option("--topic", "topics", multiple=True, metavar="NAME", help="Topic resource.")
@click.option("--group", "groups", multiple=True, metavar="NAME", help="Group resource.")
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option(
    "--resource-pattern-type",
    type=click.Choice(["literal", "prefixed", "any"], case_sensitive=False),
    default=None,
    help="literal (the default for --add) or prefixed; --remove/--list: also any (default).",
)
def acls(
    bootstrap_server: str,
    action: str | None,
    allow_principal: tuple[str, ...],
    deny_principal: tuple[str, ...],
    principals: tuple[str, ...],
    operations: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    resource_pattern_type: str | None,
) -> None:
    """Add, remove or list ACLs (kafka-acls.sh)."""
    from client import Admin

    if action is None:
        raise click.UsageError("give one of --add, --remove or --list")
    ops = [_operation(value) for value in operations]
    resources = _resources(topics, groups, cluster)
    grants = [(p, Permission.ALLOW) for p in allow_principal]
    grants += [(p, Permission.DENY) for p in deny_principal]
    pattern = (
        None
        if resource_pattern_type in (None, "any")
        else PatternType(resource_pattern_type.upper())
    )
    if action == "add":
        if resource_pattern_type == "any":
            raise click.UsageError("--add needs --resource-pattern-type literal or prefixed")
        if not (grants and ops and resources):
            raise click.UsageError(
                "--add needs --allow-principal or --deny-principal, --operation and a "
                "resource (--topic, --group or --cluster)"
            )
    try:
        with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
            if action == "add":
                bindings = [
                    check_binding(
                        AclBinding(
                            principal=principal,
                            resource_type=kind,
                            resource_name=name,
                            pattern_type=pattern or PatternType.LITERAL,
                            operation=op,
                            permission=permission,
                        )
                    )
                    for (principal, permission), op, (kind, name) in itertools.product(
                        grants, ops, resources
                    )
                ]
                admin.create_acls(bindings)
                click.echo(f"Adding ACLs:\n{format_acls(bindings)}")
                return
            filters = _filters(grants, principals, ops, resources, pattern)
            if action == "remove":
                removed = admin.delete_acls(filters)
                click.echo(f"Removed ACLs:\n{format_acls(removed)}")
                return
            found = {b for f in filters for b in admin.describe_acls(f)}
            click.echo(format_acls(sorted(found)))
    except AclError as exc:
        raise click.BadParameter(str(exc)) from exc
    except click.ClickException:
        raise
    except Exception as exc:
        fail(error_text(exc))


def _filters(
    grants: list[tuple[str, Permission]],
    principals: Sequence[str],
    operations: list[Operation],
    resources: list[tuple[ResourceType, str]],
    pattern: PatternType | None,
) -> list[AclFilter]:
    """One filter per combination of what was given; a part not given matches anything."""
    who: list[tuple[str | None, Permission | None]] = [*grants, *((p, None) for p in principals)]
    what: list[Operation | None] = list(operations) or [None]
    where: list[tuple[ResourceType | None, str | None]] = list(resources) or [(None, None)]
    return [
        AclFilter(
            principal=principal,
            permission=permission,
            operation=op,
            resource_type=kind,
            resource_name=name,
            pattern_type=pattern,
        )
        for (principal, permission), op, (kind, name) in itertools.product(
            who or [(None, None)], what, where
        )
    ]
