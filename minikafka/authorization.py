"""Which ACL every RPC needs: the one table (`METHOD_ACCESS`), and the decision for one call.

Each full gRPC method name maps to what the caller must be allowed (`Need`): an operation
on the cluster, or on every topic the request names. `OPEN` methods need no ACL (the
health check; Metadata for every topic and InitProducerId, which reveal or grant nothing
a client can use without the topic ACLs that Produce and Fetch check). A method that is
not in the table is DENIED: a new RPC is closed until someone decides what it needs.

A refusal is `PERMISSION_DENIED` whose message starts with the Kafka error name
(`TOPIC_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`), so a client can tell
which it is; the servicer never runs, so nothing is appended or changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

import grpc
import msgspec

from minikafka.acl import CLUSTER_NAME, AclBinding, Operation, ResourceType, authorize
from minikafka.errors import ErrorCode

TopicsOf = Callable[[Any], Iterable[str]]


class Need(msgspec.Struct, frozen=True):
    """`operation` on the cluster (`topics` and `groups` None), or on each consumer group
    `groups(request)` names and each topic `topics(request)` names (Kafka's OffsetCommit
    needs READ on the group and on every topic it commits)."""

    operation: Operation
    topics: TopicsOf | None = None
    groups: TopicsOf | None = None


#: No ACL is needed (any authenticated caller).
OPEN: Final = None


def _partition_topics(request: Any) -> Iterable[str]:
    return {item.topic for item in request.partitions}


def _topics_field(request: Any) -> Iterable[str]:
    return set(request.topics)


def _named_topics(request: Any) -> Iterable[str]:
    return {item.name for item in request.topics}


def _names_field(request: Any) -> Iterable[str]:
    return set(request.names)


def _topic_field(request: Any) -> Iterable[str]:
    return {request.topic}


def _group_field(request: Any) -> Iterable[str]:
    return {request.group_id}


def _group_ids_field(request: Any) -> Iterable[str]:
    return set(request.group_ids)


_CLUSTER_ACTION = Need(Operation.CLUSTER_ACTION)
_BROKER = "/minikafka.v1.BrokerService/"
_CONTROLLER = "/minikafka.v1.ControllerService/"

#: Full method name -> what its caller needs (OPEN: nothing). Absent: denied.
METHOD_ACCESS: Final[dict[str, Need | None]] = {
    "/grpc.health.v1.Health/Check": OPEN,
    "/grpc.health.v1.Health/Watch": OPEN,
    # Clients, on a broker.
    f"{_BROKER}Produce": Need(Operation.WRITE, _partition_topics),
    f"{_BROKER}Fetch": Need(Operation.READ, _partition_topics),
    f"{_BROKER}ListOffsets": Need(Operation.DESCRIBE, _partition_topics),
    # Named topics need DESCRIBE (implied by READ/WRITE); all topics: open (see above).
    f"{_BROKER}Metadata": Need(Operation.DESCRIBE, _topics_field),
    f"{_BROKER}CreateTopics": Need(Operation.CREATE, _named_topics),
    f"{_BROKER}DeleteTopics": Need(Operation.DELETE, _names_field),
    f"{_BROKER}DescribeCluster": Need(Operation.DESCRIBE),
    f"{_BROKER}ElectLeaders": Need(Operation.ALTER),
    f"{_BROKER}AlterConfigs": Need(Operation.ALTER, _topic_field),
    f"{_BROKER}InitProducerId": OPEN,
    f"{_BROKER}CreatePartitions": Need(Operation.ALTER, _named_topics),
    f"{_BROKER}DescribePartitionHistory": Need(Operation.DESCRIBE, _topic_field),
    f"{_BROKER}DescribeQuorum": Need(Operation.DESCRIBE),
    f"{_BROKER}CreateAcls": Need(Operation.ALTER),
    f"{_BROKER}DeleteAcls": Need(Operation.ALTER),
    f"{_BROKER}DescribeAcls": Need(Operation.DESCRIBE),
    # Consumer groups, as Kafka authorizes them: the group, and the topics a commit or
    # offset fetch names. ListGroups lists every group: DESCRIBE on the cluster.
    f"{_BROKER}FindCoordinator": Need(Operation.DESCRIBE, groups=_group_ids_field),
    f"{_BROKER}OffsetCommit": Need(Operation.READ, _partition_topics, _group_field),
    f"{_BROKER}OffsetFetch": Need(Operation.DESCRIBE, _partition_topics, _group_field),
    f"{_BROKER}ConsumerGroupHeartbeat": Need(Operation.READ, groups=_group_field),
    f"{_BROKER}ListGroups": Need(Operation.DESCRIBE),
    f"{_BROKER}DescribeGroups": Need(Operation.DESCRIBE, groups=_group_ids_field),
    f"{_BROKER}DeleteGroups": Need(Operation.DELETE, groups=_group_ids_field),
    # Brokers among themselves and with the controller.
    "/minikafka.v1.ReplicaService/Fetch": _CLUSTER_ACTION,
    "/minikafka.v1.BrokerControlService/LeaderAndIsr": _CLUSTER_ACTION,
    "/minikafka.v1.BrokerControlService/StopReplica": _CLUSTER_ACTION,
    "/minikafka.v1.BrokerControlService/UpdateMetadata": _CLUSTER_ACTION,
    "/minikafka.v1.BrokerControlService/GetReplicaLogInfo": _CLUSTER_ACTION,
    # The controller: brokers (which forward their clients' admin calls after checking
    # them) and the other voters.
    f"{_CONTROLLER}RegisterBroker": _CLUSTER_ACTION,
    f"{_CONTROLLER}BrokerHeartbeat": _CLUSTER_ACTION,
    f"{_CONTROLLER}BrokerHeartbeatStream": _CLUSTER_ACTION,
    f"{_CONTROLLER}AlterPartition": _CLUSTER_ACTION,
    f"{_CONTROLLER}ControlledShutdown": _CLUSTER_ACTION,
    f"{_CONTROLLER}CreateTopics": _CLUSTER_ACTION,
    f"{_CONTROLLER}DeleteTopics": _CLUSTER_ACTION,
    f"{_CONTROLLER}DescribeCluster": _CLUSTER_ACTION,
    f"{_CONTROLLER}ElectLeaders": _CLUSTER_ACTION,
    f"{_CONTROLLER}AlterConfigs": _CLUSTER_ACTION,
    f"{_CONTROLLER}InitProducerId": _CLUSTER_ACTION,
    f"{_CONTROLLER}CreatePartitions": _CLUSTER_ACTION,
    f"{_CONTROLLER}DescribePartitionHistory": _CLUSTER_ACTION,
    f"{_CONTROLLER}CreateAcls": _CLUSTER_ACTION,
    f"{_CONTROLLER}DeleteAcls": _CLUSTER_ACTION,
    f"{_CONTROLLER}DescribeAcls": _CLUSTER_ACTION,
    f"{_CONTROLLER}DescribeQuorum": Need(Operation.DESCRIBE),
    "/minikafka.v1.RaftService/Send": _CLUSTER_ACTION,
}


def refusal(
    method: str,
    request: Any,
    *,
    principal: str,
    acls: Iterable[AclBinding],
    super_users: frozenset[str],
) -> tuple[grpc.StatusCode, str] | None:
    """Why `principal` may not make this call (`PERMISSION_DENIED`, message), or None.

    `request` is the decoded request (None for a streaming request: only cluster needs
    are decided without it)."""
    if method not in METHOD_ACCESS:
        return (
            grpc.StatusCode.PERMISSION_DENIED,
            f"{ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name}: {method} is not in the "
            "authorization table",
        )
    need = METHOD_ACCESS[method]
    if need is None:
        return None
    acl_list = list(acls)

    def allowed(resource_type: ResourceType, name: str) -> bool:
        return authorize(
            acl_list,
            super_users=super_users,
            principal=principal,
            operation=need.operation,
            resource_type=resource_type,
            resource_name=name,
        )

    if need.topics is None and need.groups is None:
        if allowed(ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return (
            grpc.StatusCode.PERMISSION_DENIED,
            f"{ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name}: {principal} may not "
            f"{need.operation.value} on the cluster ({method})",
        )
    if request is None or not hasattr(request, "DESCRIPTOR"):
        return (
            grpc.StatusCode.PERMISSION_DENIED,
            f"{ErrorCode.TOPIC_AUTHORIZATION_FAILED.name}: {method} has no request to check",
        )
    if need.groups is not None:
        denied_groups = sorted(
            group for group in need.groups(request) if not allowed(ResourceType.GROUP, group)
        )
        if denied_groups:
            return (
                grpc.StatusCode.PERMISSION_DENIED,
                f"{ErrorCode.GROUP_AUTHORIZATION_FAILED.name}: {principal} may not "
                f"{need.operation.value} group(s) {', '.join(denied_groups)} ({method})",
            )
    if need.topics is None:
        return None
    denied = sorted(
        topic for topic in need.topics(request) if not allowed(ResourceType.TOPIC, topic)
    )
    if not denied:
        return None
    return (
        grpc.StatusCode.PERMISSION_DENIED,
        f"{ErrorCode.TOPIC_AUTHORIZATION_FAILED.name}: {principal} may not "
        f"{need.operation.value} topic(s) {', '.join(denied)} ({method})",
    )
