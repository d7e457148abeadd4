"""ACL bindings and filters on the wire (`common.proto` AclBinding / AclFilter), both ways.

Enums travel by name; a name this version does not know is an `AclError` naming the field
(a request with it is refused as INVALID_REQUEST, never guessed at).
"""

from __future__ import annotations

import enum
from typing import TypeVar

from minikafka.acl import (
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from minikafka.v1 import common_pb2

E = TypeVar("E", bound=enum.StrEnum)


def _enum(kind: type[E], value: str, field: str) -> E:
    try:
        return kind(value.upper())
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise AclError(f"{field} {value!r} is not one of {choices}") from None


def _optional(kind: type[E], value: str, field: str) -> E | None:
    return None if not value else _enum(kind, value, field)


def binding_to_wire(binding: AclBinding) -> common_pb2.AclBinding:
    return common_pb2.AclBinding(
        principal=binding.principal,
        resource_type=binding.resource_type.value,
        resource_name=binding.resource_name,
        pattern_type=binding.pattern_type.value,
        operation=binding.operation.value,
        permission=binding.permission.value,
    )


def binding_from_wire(message: common_pb2.AclBinding) -> AclBinding:
    """The binding of a wire message; AclError when an enum name is unknown or missing."""
    return AclBinding(
        principal=message.principal,
        resource_type=_enum(ResourceType, message.resource_type, "resource type"),
        resource_name=message.resource_name,
        pattern_type=_enum(PatternType, message.pattern_type or "LITERAL", "pattern type"),
        operation=_enum(Operation, message.operation, "operation"),
        permission=_enum(Permission, message.permission or "ALLOW", "permission"),
    )


def filter_to_wire(acl_filter: AclFilter) -> common_pb2.AclFilter:
    return common_pb2.AclFilter(
        principal=acl_filter.principal or "",
        resource_type=acl_filter.resource_type.value if acl_filter.resource_type else "",
        resource_name=acl_filter.resource_name or "",
        pattern_type=acl_filter.pattern_type.value if acl_filter.pattern_type else "",
        operation=acl_filter.operation.value if acl_filter.operation else "",
        permission=acl_filter.permission.value if acl_filter.permission else "",
    )


def filter_from_wire(message: common_pb2.AclFilter) -> AclFilter:
    return AclFilter(
        principal=message.principal or None,
        resource_type=_optional(ResourceType, message.resource_type, "resource type"),
        resource_name=message.resource_name or None,
        pattern_type=_optional(PatternType, message.pattern_type, "pattern type"),
        operation=_optional(Operation, message.operation, "operation"),
        permission=_optional(Permission, message.permission, "permission"),
    )
