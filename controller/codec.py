"""Translation between the controller's model and the wire types (`minikafka.v1`).

The only controller module besides the gRPC adapters (`server`, `dispatcher`) that knows
protobuf; no decisions are taken here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from controller.history import HistoryEvent, PartitionHistory
from controller.model import (
    NO_LEADER,
    BrokerRegistration,
    ClusterState,
    PartitionKey,
    PartitionRegistration,
)
from controller.quorum import QuorumView
from controller.state_machine import (
    ElectionOutcome,
    ElectionType,
    NewPartitions,
    NewTopic,
    TopicResult,
)
from minikafka.acl_wire import binding_to_wire
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, common_pb2, controller_pb2, raft_pb2


def wire_code(code: ErrorCode) -> common_pb2.ErrorCode.ValueType:
    return common_pb2.ErrorCode.ValueType(int(code))


def broker_endpoint(broker: BrokerRegistration) -> common_pb2.BrokerEndpoint:
    return common_pb2.BrokerEndpoint(
        broker_id=broker.broker_id,
        host=broker.host,
        port=broker.port,
        rack=broker.rack,
        external_host=broker.external_host,
        external_port=broker.external_port,
        broker_epoch=broker.broker_epoch,
        in_controlled_shutdown=broker.in_controlled_shutdown,
    )


def partition_state(
    key: PartitionKey, registration: PartitionRegistration, *, is_new: bool = False
) -> broker_pb2.PartitionState:
    return broker_pb2.PartitionState(
        topic=key[0],
        partition=key[1],
        leader=registration.leader,
        leader_epoch=registration.leader_epoch,
        isr=list(registration.isr),
        partition_epoch=registration.partition_epoch,
        replicas=list(registration.replicas),
        is_new=is_new,
        state=registration.status.value,
        elr=list(registration.elr),
        last_known_elr=list(registration.last_known_elr),
    )


def topic_configs(state: ClusterState, topics: Iterable[str]) -> list[broker_pb2.TopicConfigs]:
    return [
        broker_pb2.TopicConfigs(topic=name, configs=state.topics[name].configs)
        for name in sorted(set(topics))
        if name in state.topics
    ]


def live_brokers(state: ClusterState) -> list[common_pb2.BrokerEndpoint]:
    """Brokers clients and followers may use: registered and unfenced."""
    return [
        broker_endpoint(state.brokers[b])
        for b in sorted(state.brokers)
        if not state.brokers[b].fenced
    ]


def leader_and_isr_request(
    state: ClusterState,
    *,
    broker_epoch: int,
    keys: Collection[PartitionKey],
    new_keys: Collection[PartitionKey],
) -> broker_pb2.LeaderAndIsrRequest:
    present = sorted(key for key in keys if key in state.partitions)
    leaders = {state.partitions[key].leader for key in present} - {NO_LEADER}
    return broker_pb2.LeaderAndIsrRequest(
        controller_id=state.controller_id,
        controller_epoch=state.controller_epoch,
        broker_epoch=broker_epoch,
        partitions=[
            partition_state(key, state.partitions[key], is_new=key in new_keys) for key in present
        ],
        live_leaders=[
            broker_endpoint(state.brokers[b]) for b in sorted(leaders) if b in state.brokers
        ],
        topic_configs=topic_configs(state, (key[0] for key in present)),
        metadata_offset=state.metadata_offset,
    )


def stop_replica_request(
    state: ClusterState, *, broker_epoch: int, partitions: dict[PartitionKey, int]
) -> broker_pb2.StopReplicaRequest:
    return broker_pb2.StopReplicaRequest(
        controller_id=state.controller_id,
        controller_epoch=state.controller_epoch,
        broker_epoch=broker_epoch,
        partitions=[
            broker_pb2.StopReplicaPartition(
                topic=key[0], partition=key[1], leader_epoch=epoch, delete_partition=True
            )
            for key, epoch in sorted(partitions.items())
        ],
    )


def update_metadata_request(
    state: ClusterState, *, broker_epoch: int
) -> broker_pb2.UpdateMetadataRequest:
    return broker_pb2.UpdateMetadataRequest(
        controller_id=state.controller_id,
        controller_epoch=state.controller_epoch,
        broker_epoch=broker_epoch,
        live_brokers=live_brokers(state),
        partitions=[
            partition_state(key, state.partitions[key]) for key in sorted(state.partitions)
        ],
        topic_configs=topic_configs(state, state.topics),
        deleted_topics=list(state.deleted_topics),
        cluster_id=state.cluster_id,
        metadata_offset=state.metadata_offset,
        acls=[binding_to_wire(binding) for binding in sorted(state.acls)],
    )


def partition_metadata(
    key: PartitionKey, registration: PartitionRegistration, *, live: Collection[int]
) -> common_pb2.PartitionMetadata:
    return common_pb2.PartitionMetadata(
        partition=key[1],
        error_code=(
            common_pb2.LEADER_NOT_AVAILABLE if registration.leader == NO_LEADER else common_pb2.NONE
        ),
        leader=registration.leader,
        leader_epoch=registration.leader_epoch,
        replicas=list(registration.replicas),
        isr=list(registration.isr),
        offline_replicas=[r for r in registration.replicas if r not in live],
        partition_epoch=registration.partition_epoch,
        state=registration.status.value,
        elr=list(registration.elr),
        last_known_elr=list(registration.last_known_elr),
    )


def describe_cluster_response(
    state: ClusterState, *, topics: Collection[str], eligible_leader_replicas: bool = True
) -> controller_pb2.DescribeClusterResponse:
    """`topics` empty: every topic; unknown names get UNKNOWN_TOPIC_OR_PARTITION."""
    live = {b for b, broker in state.brokers.items() if not broker.fenced}
    names = sorted(topics) if topics else sorted(state.topics)
    described = []
    for name in names:
        record = state.topics.get(name)
        if record is None:
            described.append(
                common_pb2.TopicMetadata(
                    name=name, error_code=common_pb2.UNKNOWN_TOPIC_OR_PARTITION
                )
            )
            continue
        described.append(
            common_pb2.TopicMetadata(
                name=name,
                partitions=[
                    partition_metadata(key, state.partitions[key], live=live)
                    for key in state.topic_partitions(name)
                ],
                configs=record.configs,
            )
        )
    return controller_pb2.DescribeClusterResponse(
        cluster_id=state.cluster_id,
        controller_id=state.controller_id,
        controller_epoch=state.controller_epoch,
        brokers=[
            controller_pb2.BrokerStatus(
                endpoint=broker_endpoint(broker),
                broker_epoch=broker.broker_epoch,
                fenced=broker.fenced,
                in_controlled_shutdown=broker.in_controlled_shutdown,
            )
            for _, broker in sorted(state.brokers.items())
        ],
        topics=described,
        eligible_leader_replicas_enabled=eligible_leader_replicas,
    )


def new_topics(request: controller_pb2.CreateTopicsRequest) -> list[NewTopic]:
    return [
        NewTopic(
            name=topic.name,
            num_partitions=topic.num_partitions,
            replication_factor=topic.replication_factor,
            configs=dict(topic.configs),
        )
        for topic in request.topics
    ]


def topic_results(results: Iterable[TopicResult]) -> list[controller_pb2.TopicResult]:
    return [
        controller_pb2.TopicResult(
            name=result.name, error_code=wire_code(result.error), error_message=result.message
        )
        for result in results
    ]


def election_results(
    outcomes: Iterable[ElectionOutcome],
) -> list[controller_pb2.ElectionResult]:
    return [
        controller_pb2.ElectionResult(
            topic=outcome.topic,
            partition=outcome.partition,
            error_code=wire_code(outcome.error),
            error_message=outcome.message,
            leader=outcome.leader,
        )
        for outcome in outcomes
    ]


def new_partitions(request: controller_pb2.CreatePartitionsRequest) -> list[NewPartitions]:
    return [NewPartitions(name=topic.name, count=topic.count) for topic in request.topics]


def history_event(event: HistoryEvent) -> controller_pb2.PartitionHistoryEvent:
    return controller_pb2.PartitionHistoryEvent(
        metadata_offset=event.metadata_offset,
        time_ms=event.time_ms,
        replayed=event.replayed,
        kinds=list(event.kinds),
        leader=event.leader,
        leader_epoch=event.leader_epoch,
        partition_epoch=event.partition_epoch,
        replicas=list(event.replicas),
        isr=list(event.isr),
        has_elr=event.elr is not None,
        elr=list(event.elr or ()),
        last_known_elr=list(event.last_known_elr or ()),
        state=event.state,
        previous_leader=event.previous_leader,
        broker_id=event.broker_id,
        broker_epoch=event.broker_epoch,
        detail=event.detail,
    )


def partition_history_response(
    state: ClusterState, topic: str, partition: int, history: PartitionHistory
) -> controller_pb2.DescribePartitionHistoryResponse:
    events, truncated = history.events(topic, partition)
    if not events and (topic, partition) not in state.partitions:
        return controller_pb2.DescribePartitionHistoryResponse(
            error_code=wire_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            error_message=f"partition {topic}-{partition} does not exist",
            controller_id=state.controller_id,
        )
    return controller_pb2.DescribePartitionHistoryResponse(
        events=[history_event(event) for event in events],
        truncated=truncated,
        controller_id=state.controller_id,
    )


_ELECTION_TYPES: dict[int, ElectionType] = {
    controller_pb2.PREFERRED: ElectionType.PREFERRED,
    controller_pb2.UNCLEAN: ElectionType.UNCLEAN,
}


def election_type(value: int) -> ElectionType | None:
    """The election type of a wire value (None: not one this version knows)."""
    return _ELECTION_TYPES.get(value)


def replica_log_info_request(
    state: ClusterState, *, broker_epoch: int, keys: Iterable[PartitionKey]
) -> broker_pb2.GetReplicaLogInfoRequest:
    return broker_pb2.GetReplicaLogInfoRequest(
        controller_id=state.controller_id,
        controller_epoch=state.controller_epoch,
        broker_epoch=broker_epoch,
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in sorted(keys)],
    )


def describe_quorum_response(
    view: QuorumView, *, voters: dict[int, str], active: bool, formatted: bool = True
) -> raft_pb2.DescribeQuorumResponse:
    """DescribeQuorum from this controller's view (`quorum.MetadataQuorum.view`)."""
    leader = view.leader_id
    return raft_pb2.DescribeQuorumResponse(
        error_code=wire_code(ErrorCode.NONE),
        cluster_id=view.cluster_id,
        node_id=view.node_id,
        role=view.role.value,
        active=active,
        leader_id=leader if leader is not None else -1,
        leader_epoch=view.epoch,
        leader_address=voters.get(leader, "") if leader is not None else "",
        high_watermark=view.high_watermark,
        log_end_offset=view.log_end_offset,
        voters=[
            raft_pb2.QuorumVoter(node_id=node_id, address=address)
            for node_id, address in sorted(voters.items())
        ],
        replicas=[
            raft_pb2.QuorumReplica(
                node_id=replica.node_id,
                log_end_offset=replica.end_offset,
                last_fetch_timestamp_ms=replica.last_fetch_wall_ms,
                last_caught_up_timestamp_ms=replica.last_caught_up_wall_ms,
            )
            for replica in view.replicas
        ],
        formatted=formatted,
        can_vote=view.can_vote,
        now_ms=view.now_wall_ms,
    )


def unformatted_quorum_response(
    *, node_id: int, cluster_id: str, voters: dict[int, str], now_ms: int
) -> raft_pb2.DescribeQuorumResponse:
    """DescribeQuorum of a controller still waiting to format its data directory."""
    return raft_pb2.DescribeQuorumResponse(
        error_code=wire_code(ErrorCode.NONE),
        cluster_id=cluster_id,
        node_id=node_id,
        role="unformatted",
        leader_id=-1,
        voters=[
            raft_pb2.QuorumVoter(node_id=voter, address=address)
            for voter, address in sorted(voters.items())
        ],
        formatted=False,
        can_vote=False,
        now_ms=now_ms,
    )
