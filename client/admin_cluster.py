"""Cluster administration: describe the cluster and a partition's history, elect
leaders, and create, delete and describe ACLs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from client.admin_args import election_partitions, topic_names
from client.admin_base import AdminBase
from client.admin_model import (
    BrokerDescription,
    ClusterDescription,
    ElectionResult,
    PartitionHistory,
    describe_topic,
    partition_history,
)
from client.errors import from_response
from client.records import TopicPartition
from minikafka.acl import AclBinding, AclFilter
from minikafka.acl_wire import binding_from_wire, binding_to_wire, filter_to_wire
from minikafka.errors import ErrorCode
from minikafka.v1 import common_pb2, controller_pb2


class ClusterAdmin(AdminBase):
    """`AsyncAdmin`'s cluster, election, partition-history and ACL calls."""

    async def describe_cluster(self, topics: Iterable[str] = ()) -> ClusterDescription:
        """Brokers (with fencing state) and topics as the controller sees them."""
        request = controller_pb2.DescribeClusterRequest(
            topics=topic_names(topics, "describe_cluster()")
        )
        response = await self._call(
            lambda stub: stub.DescribeCluster(request, timeout=self._timeout_s), "DescribeCluster"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, context="describe cluster")
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            controller_epoch=response.controller_epoch,
            brokers=sorted(
                (
                    BrokerDescription(
                        broker_id=b.endpoint.broker_id,
                        host=b.endpoint.host,
                        port=b.endpoint.port,
                        rack=b.endpoint.rack,
                        broker_epoch=b.broker_epoch,
                        fenced=b.fenced,
                        in_controlled_shutdown=b.in_controlled_shutdown,
                    )
                    for b in response.brokers
                ),
                key=lambda d: d.broker_id,
            ),
            topics=sorted((describe_topic(t) for t in response.topics), key=lambda d: d.name),
            eligible_leader_replicas_enabled=response.eligible_leader_replicas_enabled,
        )

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        """Add ACLs (kafka-acls --add); all or none: a malformed one raises
        `InvalidRequestError` and nothing is added. Existing ones are kept once."""
        request = controller_pb2.CreateAclsRequest(acls=[binding_to_wire(a) for a in acls])
        response = await self._call(
            lambda stub: stub.CreateAcls(request, timeout=self._timeout_s), "CreateAcls"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, response.error_message, context="create ACLs")

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove every ACL one of `filters` matches (kafka-acls --remove); returns them."""
        request = controller_pb2.DeleteAclsRequest(filters=[filter_to_wire(f) for f in filters])
        response = await self._call(
            lambda stub: stub.DeleteAcls(request, timeout=self._timeout_s), "DeleteAcls"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, response.error_message, context="delete ACLs")
        return [binding_from_wire(message) for message in response.deleted]

    async def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The ACLs `acl_filter` matches (all without one; kafka-acls --list)."""
        wanted = filter_to_wire(acl_filter or AclFilter())
        request = controller_pb2.DescribeAclsRequest(filter=wanted)
        response = await self._call(
            lambda stub: stub.DescribeAcls(request, timeout=self._timeout_s), "DescribeAcls"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(
                response.error_code, response.error_message, context="describe ACLs"
            )
        return [binding_from_wire(message) for message in response.acls]

    async def elect_leaders(
        self,
        election_type: Literal["preferred", "unclean"] = "preferred",
        partitions: Iterable[TopicPartition] | None = None,
        *,
        raise_errors: bool = False,
    ) -> list[ElectionResult]:
        """Run a preferred or unclean election for `partitions` (all when None).

        Each result carries its partition's code (`.error` gives the exception); with
        `raise_errors`, the first error other than ELECTION_NOT_NEEDED is raised.
        """
        kinds = {
            "preferred": controller_pb2.ElectionType.PREFERRED,
            "unclean": controller_pb2.ElectionType.UNCLEAN,
        }
        if election_type not in kinds:
            raise ValueError(
                f"election_type must be 'preferred' or 'unclean', got {election_type!r}"
            )
        request = controller_pb2.ElectLeadersRequest(
            election_type=kinds[election_type],
            partitions=[
                common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                for tp in election_partitions(partitions)
            ],
            timeout_ms=self.request_timeout_ms,
        )
        response = await self._call(
            lambda stub: stub.ElectLeaders(request, timeout=self._timeout_s), "ElectLeaders"
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(response.error_code, context="elect leaders")
        outcomes = [
            ElectionResult(
                topic=r.topic,
                partition=r.partition,
                leader=r.leader,
                error_code=int(r.error_code),
                error_message=r.error_message,
            )
            for r in response.results
        ]
        if raise_errors:
            for o in outcomes:
                if o.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
                    raise from_response(
                        o.error_code,
                        o.error_message,
                        context=f"elect leader of {o.topic}-{o.partition}",
                    )
        return outcomes

    async def describe_partition_history(self, topic: str, partition: int) -> PartitionHistory:
        """The partition's history as the controller keeps it (bounded, in memory): every
        change of leader, leader epoch, ISR (and ELR), unclean elections, offline spells,
        and the registrations and fencing of its replicas' brokers, in metadata order."""
        request = controller_pb2.DescribePartitionHistoryRequest(topic=topic, partition=partition)
        response = await self._call(
            lambda stub: stub.DescribePartitionHistory(request, timeout=self._timeout_s),
            "DescribePartitionHistory",
        )
        if response.error_code != ErrorCode.NONE:
            raise from_response(
                response.error_code,
                response.error_message,
                context=f"history of {topic}-{partition}",
            )
        return partition_history(topic, partition, response)
