"""The RPC -> ACL table: complete for every service, and the decisions it gives."""

from __future__ import annotations

import grpc
import msgspec
import pytest

from minikafka.acl import CLUSTER_NAME, AclBinding, Operation, Permission, ResourceType
from minikafka.authorization import METHOD_ACCESS, refusal
from minikafka.v1 import broker_pb2, controller_pb2, raft_pb2

SUPER = frozenset({"User:broker"})
WRITE_ORDERS = AclBinding(
    principal="User:alice",
    resource_type=ResourceType.TOPIC,
    resource_name="orders",
    operation=Operation.WRITE,
)


def _methods() -> list[str]:
    names: list[str] = []
    for module in (broker_pb2, controller_pb2, raft_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            names.extend(f"/{service.full_name}/{method.name}" for method in service.methods)
    return names


@pytest.mark.parametrize("method", _methods())
def test_every_rpc_is_in_the_table(method: str) -> None:
    assert method in METHOD_ACCESS


def _produce(*topics: str) -> broker_pb2.ProduceRequest:
    request = broker_pb2.ProduceRequest(acks=-1)
    for topic in topics:
        request.partitions.add(topic=topic, partition=0)
    return request


def _decide(method: str, request: object, principal: str, acls: list[AclBinding]) -> str | None:
    answer = refusal(method, request, principal=principal, acls=acls, super_users=SUPER)
    if answer is None:
        return None
    code, message = answer
    assert code is grpc.StatusCode.PERMISSION_DENIED
    return message.partition(":")[0]


PRODUCE = "/minikafka.v1.BrokerService/Produce"
REPLICA_FETCH = "/minikafka.v1.ReplicaService/Fetch"
CLUSTER_ACTION = AclBinding(
    principal="User:follower",
    resource_type=ResourceType.CLUSTER,
    resource_name=CLUSTER_NAME,
    operation=Operation.CLUSTER_ACTION,
)

COMMIT = "/minikafka.v1.BrokerService/OffsetCommit"
READ_BILLING = AclBinding(
    principal="User:alice",
    resource_type=ResourceType.GROUP,
    resource_name="billing",
    operation=Operation.READ,
)
READ_ORDERS = msgspec.structs.replace(
    WRITE_ORDERS, operation=Operation.READ, principal="User:alice"
)


def _commit(group: str, topic: str) -> broker_pb2.OffsetCommitRequest:
    request = broker_pb2.OffsetCommitRequest(group_id=group)
    request.partitions.add(topic=topic, partition=0, offset=5)
    return request


# (method, request, principal, acls) -> refusal's error name (None: allowed)
CASES = [
    ("produce allowed", PRODUCE, _produce("orders"), "User:alice", [WRITE_ORDERS], None),
    (
        "produce without WRITE",
        PRODUCE,
        _produce("orders"),
        "User:bob",
        [WRITE_ORDERS],
        "TOPIC_AUTHORIZATION_FAILED",
    ),
    (
        "one denied topic denies the request",
        PRODUCE,
        _produce("orders", "payments"),
        "User:alice",
        [WRITE_ORDERS],
        "TOPIC_AUTHORIZATION_FAILED",
    ),
    (
        "DENY overrides",
        PRODUCE,
        _produce("orders"),
        "User:alice",
        [WRITE_ORDERS, msgspec.structs.replace(WRITE_ORDERS, permission=Permission.DENY)],
        "TOPIC_AUTHORIZATION_FAILED",
    ),
    (
        "replica fetch by a client",
        REPLICA_FETCH,
        broker_pb2.ReplicaFetchRequest(),
        "User:alice",
        [WRITE_ORDERS],
        "CLUSTER_AUTHORIZATION_FAILED",
    ),
    ("replica fetch by a broker", REPLICA_FETCH, None, "User:broker", [], None),
    (
        "replica fetch with CLUSTER_ACTION",
        REPLICA_FETCH,
        None,
        "User:follower",
        [CLUSTER_ACTION],
        None,
    ),
    (
        "control request by a client",
        "/minikafka.v1.BrokerControlService/LeaderAndIsr",
        None,
        "User:alice",
        [WRITE_ORDERS],
        "CLUSTER_AUTHORIZATION_FAILED",
    ),
    (
        "metadata for every topic is open",
        "/minikafka.v1.BrokerService/Metadata",
        broker_pb2.MetadataRequest(),
        "User:ANONYMOUS",
        [],
        None,
    ),
    (
        "metadata of a topic needs DESCRIBE (WRITE implies it)",
        "/minikafka.v1.BrokerService/Metadata",
        broker_pb2.MetadataRequest(topics=["orders"]),
        "User:alice",
        [WRITE_ORDERS],
        None,
    ),
    ("health is open", "/grpc.health.v1.Health/Check", None, "User:ANONYMOUS", [], None),
    (
        "offset commit with READ on the group and the topic",
        COMMIT,
        _commit("billing", "orders"),
        "User:alice",
        [READ_BILLING, READ_ORDERS],
        None,
    ),
    (
        "offset commit without the group",
        COMMIT,
        _commit("billing", "orders"),
        "User:alice",
        [READ_ORDERS],
        "GROUP_AUTHORIZATION_FAILED",
    ),
    (
        "offset commit without the topic",
        COMMIT,
        _commit("billing", "orders"),
        "User:alice",
        [READ_BILLING],
        "TOPIC_AUTHORIZATION_FAILED",
    ),
    (
        "heartbeat needs READ on the group",
        "/minikafka.v1.BrokerService/ConsumerGroupHeartbeat",
        broker_pb2.ConsumerGroupHeartbeatRequest(group_id="billing"),
        "User:bob",
        [READ_ORDERS],
        "GROUP_AUTHORIZATION_FAILED",
    ),
    (
        "find coordinator needs DESCRIBE (READ implies it)",
        "/minikafka.v1.BrokerService/FindCoordinator",
        broker_pb2.FindCoordinatorRequest(group_ids=["billing"]),
        "User:alice",
        [READ_BILLING],
        None,
    ),
    (
        "delete groups needs DELETE",
        "/minikafka.v1.BrokerService/DeleteGroups",
        broker_pb2.DeleteGroupsRequest(group_ids=["billing"]),
        "User:alice",
        [READ_BILLING],
        "GROUP_AUTHORIZATION_FAILED",
    ),
    (
        "list groups needs DESCRIBE on the cluster",
        "/minikafka.v1.BrokerService/ListGroups",
        broker_pb2.ListGroupsRequest(),
        "User:alice",
        [READ_BILLING],
        "CLUSTER_AUTHORIZATION_FAILED",
    ),
    (
        "a method not in the table is denied",
        "/minikafka.v1.BrokerService/SomethingNew",
        None,
        "User:broker",
        [],
        "CLUSTER_AUTHORIZATION_FAILED",
    ),
]


@pytest.mark.parametrize(
    ("method", "request_message", "principal", "acls", "refused"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_refusal_table(
    method: str,
    request_message: object,
    principal: str,
    acls: list[AclBinding],
    refused: str | None,
) -> None:
    assert _decide(method, request_message, principal, acls) == refused


def test_table_has_only_real_services() -> None:
    services = {
        "grpc.health.v1.Health",
        *(
            service.full_name
            for module in (broker_pb2, controller_pb2, raft_pb2)
            for service in module.DESCRIPTOR.services_by_name.values()
        ),
    }
    assert {method.split("/")[1] for method in METHOD_ACCESS} <= services
