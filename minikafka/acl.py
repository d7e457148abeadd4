"""Access control lists with Kafka's model, as a pure authorizer.

An ACL binding says: `principal` is ALLOWed (or DENYed) `operation` on the resources of
one type (topic, group or the cluster) whose name is `resource_name` (LITERAL; the literal
name `*` is every resource of the type) or starts with it (PREFIXED). `User:*` in a
binding is every principal.

`authorize` decides as Kafka's `StandardAuthorizer` does, with
`allow.everyone.if.no.acl.found=false`:

1. a super user (`super.users`) may do everything;
2. a matching DENY wins over any ALLOW;
3. otherwise a matching ALLOW allows; DESCRIBE is also allowed by an ALLOW of READ,
   WRITE, DELETE or ALTER (as in Kafka), and ALL matches every operation;
4. otherwise the request is denied (default deny once an authorizer is enabled).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import msgspec

#: The principal of every peer in a binding.
WILDCARD_PRINCIPAL = "User:*"
#: The LITERAL resource name that matches every resource of its type.
WILDCARD_RESOURCE = "*"
#: The cluster resource's one name (as Kafka's `kafka-cluster`).
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.StrEnum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    CLUSTER = "CLUSTER"


class PatternType(enum.StrEnum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Operation(enum.StrEnum):
    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    CLUSTER_ACTION = "CLUSTER_ACTION"


class Permission(enum.StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"


#: An ALLOW of any of these also allows the key (Kafka's implied operations).
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
}


class AclBinding(msgspec.Struct, frozen=True, kw_only=True, order=True):
    """One ACL (Kafka's AclBinding, without hosts: every host)."""

    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType = PatternType.LITERAL
    operation: Operation
    permission: Permission = Permission.ALLOW


class AclError(ValueError):
    """A binding that cannot be stored (the message says which part and why)."""


def check_binding(binding: AclBinding) -> AclBinding:
    """`binding` when it is well-formed; AclError otherwise."""
    kind, _, name = binding.principal.partition(":")
    if kind != "User" or not name:
        raise AclError(f"principal {binding.principal!r} is not User:NAME (or User:*)")
    if not binding.resource_name:
        raise AclError("the resource name is empty")
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
    if binding.pattern_type is PatternType.PREFIXED and binding.resource_name == WILDCARD_RESOURCE:
        raise AclError("a PREFIXED '*' is not a pattern; use LITERAL '*' for every resource")
    return binding


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's `super.users`: `User:a;User:b` (empty: none); AclError on a bad entry."""
    users = frozenset(part.strip() for part in text.split(";") if part.strip())
    for user in users:
        kind, _, name = user.partition(":")
        if kind != "User" or not name or name == "*":
            raise AclError(f"super user {user!r} is not User:NAME")
    return users


def _resource_matches(binding: AclBinding, resource_type: ResourceType, name: str) -> bool:
    if binding.resource_type is not resource_type:
        return False
    if binding.pattern_type is PatternType.PREFIXED:
        return name.startswith(binding.resource_name)
    return binding.resource_name in (name, WILDCARD_RESOURCE)


def authorize(
    acls: Iterable[AclBinding],
    *,
    super_users: frozenset[str],
    principal: str,
    operation: Operation,
    resource_type: ResourceType,
    resource_name: str,
) -> bool:
    """Whether `principal` may do `operation` on the resource (see the module docstring)."""
    if principal in super_users:
        return True
    allowing = IMPLIED_BY.get(operation, frozenset({operation}))
    allowed = False
    for binding in acls:
        if binding.principal not in (principal, WILDCARD_PRINCIPAL):
            continue
        if not _resource_matches(binding, resource_type, resource_name):
            continue
        if binding.permission is Permission.DENY:
            if binding.operation in (operation, Operation.ALL):
                return False
        elif binding.operation is Operation.ALL or binding.operation in allowing:
            allowed = True
    return allowed


class AclFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which bindings `--remove` / `--list` mean: each field None matches anything."""

    principal: str | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None
    operation: Operation | None = None
    permission: Permission | None = None

    def matches(self, binding: AclBinding) -> bool:
        return all(
            want is None or want == getattr(binding, field)
            for field, want in (
                ("principal", self.principal),
                ("resource_type", self.resource_type),
                ("resource_name", self.resource_name),
                ("pattern_type", self.pattern_type),
                ("operation", self.operation),
                ("permission", self.permission),
            )
        )
