"""The pure authorizer (Kafka's model): a named-row table and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minikafka.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
    check_binding,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(
    principal: str,
    operation: Operation,
    name: str = "orders",
    *,
    kind: ResourceType = TOPIC,
    pattern: PatternType = LIT,
    permission: Permission = ALLOW,
) -> AclBinding:
    return AclBinding(
        principal=principal,
        resource_type=kind,
        resource_name=name,
        pattern_type=pattern,
        operation=operation,
        permission=permission,
    )


SUPER = frozenset({"User:broker"})

# (acls, principal, operation, resource type, name) -> allowed
CASES = [
    ("no ACL: default deny", [], "User:alice", Op.WRITE, TOPIC, "orders", False),
    ("super user needs no ACL", [], "User:broker", Op.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME, True),
    (
        "super user beats a DENY",
        [acl("User:broker", Op.ALL, permission=DENY)],
        "User:broker",
        Op.WRITE,
        TOPIC,
        "orders",
        True,
    ),
    ("literal allow", [acl("User:alice", Op.WRITE)], "User:alice", Op.WRITE, TOPIC, "orders", True),
    (
        "other operation",
        [acl("User:alice", Op.READ)],
        "User:alice",
        Op.WRITE,
        TOPIC,
        "orders",
        False,
    ),
    ("other topic", [acl("User:alice", Op.WRITE)], "User:alice", Op.WRITE, TOPIC, "order", False),
    (
        "other principal",
        [acl("User:bob", Op.WRITE)],
        "User:alice",
        Op.WRITE,
        TOPIC,
        "orders",
        False,
    ),
    ("wildcard principal", [acl("User:*", Op.READ)], "User:alice", Op.READ, TOPIC, "orders", True),
    ("wildcard topic", [acl("User:alice", Op.READ, "*")], "User:alice", Op.READ, TOPIC, "x", True),
    (
        "prefixed matches",
        [acl("User:alice", Op.WRITE, "ord", pattern=PRE)],
        "User:alice",
        Op.WRITE,
        TOPIC,
        "orders",
        True,
    ),
    (
        "prefixed is not suffix",
        [acl("User:alice", Op.WRITE, "ders", pattern=PRE)],
        "User:alice",
        Op.WRITE,
        TOPIC,
        "orders",
        False,
    ),
    (
        "literal is not a prefix",
        [acl("User:alice", Op.WRITE, "ord")],
        "User:alice",
        Op.WRITE,
        TOPIC,
        "orders",
        False,
    ),
    ("ALL allows any", [acl("User:alice", Op.ALL)], "User:alice", Op.DELETE, TOPIC, "orders", True),
    (
        "READ implies DESCRIBE",
        [acl("User:a", Op.READ)],
        "User:a",
        Op.DESCRIBE,
        TOPIC,
        "orders",
        True,
    ),
    (
        "WRITE implies DESCRIBE",
        [acl("User:a", Op.WRITE)],
        "User:a",
        Op.DESCRIBE,
        TOPIC,
        "orders",
        True,
    ),
    (
        "DESCRIBE implies no READ",
        [acl("User:a", Op.DESCRIBE)],
        "User:a",
        Op.READ,
        TOPIC,
        "orders",
        False,
    ),
    (
        "DENY wins over ALLOW",
        [acl("User:alice", Op.WRITE), acl("User:alice", Op.WRITE, permission=DENY)],
        "User:alice",
        Op.WRITE,
        TOPIC,
        "orders",
        False,
    ),
    (
        "wildcard DENY wins over a specific ALLOW",
        [acl("User:alice", Op.WRITE), acl("User:*", Op.ALL, "*", permission=DENY)],
        "User:alice",
        Op.WRITE,
        TOPIC,
        "orders",
        False,
    ),
    (
        "prefixed DENY wins over literal ALLOW",
        [
            acl("User:alice", Op.READ),
            acl("User:alice", Op.READ, "or", pattern=PRE, permission=DENY),
        ],
        "User:alice",
        Op.READ,
        TOPIC,
        "orders",
        False,
    ),
    (
        "DENY of READ does not deny DESCRIBE",
        [acl("User:a", Op.DESCRIBE), acl("User:a", Op.READ, permission=DENY)],
        "User:a",
        Op.DESCRIBE,
        TOPIC,
        "orders",
        True,
    ),
    (
        "topic ACL is not a group ACL",
        [acl("User:alice", Op.READ)],
        "User:alice",
        Op.READ,
        GROUP,
        "orders",
        False,
    ),
    (
        "cluster action",
        [acl("User:b", Op.CLUSTER_ACTION, CLUSTER_NAME, kind=CLUSTER)],
        "User:b",
        Op.CLUSTER_ACTION,
        CLUSTER,
        CLUSTER_NAME,
        True,
    ),
]


@pytest.mark.parametrize(
    ("acls", "principal", "operation", "kind", "name", "allowed"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_authorize_table(
    acls: list[AclBinding],
    principal: str,
    operation: Operation,
    kind: ResourceType,
    name: str,
    allowed: bool,
) -> None:
    assert (
        authorize(
            acls,
            super_users=SUPER,
            principal=principal,
            operation=operation,
            resource_type=kind,
            resource_name=name,
        )
        is allowed
    )


@pytest.mark.parametrize(
    ("binding", "fragment"),
    [
        pytest.param(acl("alice", Op.READ), "User:NAME", id="no User: prefix"),
        pytest.param(acl("User:", Op.READ), "User:NAME", id="empty name"),
        pytest.param(acl("User:a", Op.READ, ""), "empty", id="empty resource"),
        pytest.param(acl("User:a", Op.ALTER, "x", kind=CLUSTER), "kafka-cluster", id="cluster"),
        pytest.param(acl("User:a", Op.READ, "*", pattern=PRE), "PREFIXED", id="prefixed star"),
    ],
)
def test_bad_bindings_are_refused(binding: AclBinding, fragment: str) -> None:
    with pytest.raises(AclError, match=fragment):
        check_binding(binding)


def test_filter() -> None:
    binding = acl("User:alice", Op.WRITE)
    assert AclFilter().matches(binding)
    assert AclFilter(principal="User:alice", operation=Op.WRITE).matches(binding)
    assert not AclFilter(permission=DENY).matches(binding)


PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
NAMES = st.sampled_from(["orders", "ord", "o", "*", "payments"])
BINDINGS = st.builds(
    AclBinding,
    principal=PRINCIPALS,
    resource_type=st.sampled_from(list(ResourceType)),
    resource_name=NAMES,
    pattern_type=st.sampled_from(list(PatternType)),
    operation=st.sampled_from(list(Operation)),
    permission=st.sampled_from(list(Permission)),
)


@given(
    acls=st.lists(BINDINGS, max_size=8),
    principal=st.sampled_from(["User:alice", "User:bob"]),
    operation=st.sampled_from(list(Operation)),
    kind=st.sampled_from(list(ResourceType)),
    name=st.sampled_from(["orders", "payments", "ord"]),
    deny_pattern=st.sampled_from(list(PatternType)),
)
def test_a_matching_deny_always_wins(
    acls: list[AclBinding],
    principal: str,
    operation: Operation,
    kind: ResourceType,
    name: str,
    deny_pattern: PatternType,
) -> None:
    """Whatever ALLOWs exist, adding a DENY that matches the request denies it (for
    anyone but a super user)."""
    deny_name = name[:2] if deny_pattern is PRE else name
    deny = acl(principal, operation, deny_name, kind=kind, pattern=deny_pattern, permission=DENY)
    everything = [*acls, acl(principal, Op.ALL, "*", kind=kind), deny]
    assert not authorize(
        everything,
        super_users=SUPER,
        principal=principal,
        operation=operation,
        resource_type=kind,
        resource_name=name,
    )


@given(acls=st.lists(BINDINGS, max_size=8), operation=st.sampled_from(list(Operation)))
def test_only_allows_grant(acls: list[AclBinding], operation: Operation) -> None:
    """Without a single ALLOW (of any kind) nothing is allowed: default deny."""
    denies = [b for b in acls if b.permission is DENY]
    assert not authorize(
        denies,
        super_users=SUPER,
        principal="User:alice",
        operation=operation,
        resource_type=TOPIC,
        resource_name="orders",
    )
