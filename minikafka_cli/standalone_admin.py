"""The admin backend of a standalone broker, composed from the controller's state machine.

A standalone broker (`minikafka broker --standalone`) is its own controller. Rather than
a second implementation of the admin rules (topic names, configs, limits, placement,
partition growth, producer ids, elections), its admin RPCs run the controller's pure
handlers (`controller.state_machine`) over a `ClusterState` holding this one broker, and
the records they return are replayed exactly as the controller replays them. The
broker's `StandaloneStore` then persists the outcome and opens or removes partitions.

The broker package never imports the controller (DESIGN §2): this composition lives
here, above both, and is handed to `broker.app.Broker` as its `standalone_admin`.
"""

from __future__ import annotations

from typing import TypeVar

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.server.broker_servicer import AdminBackend
from broker.standalone import StandaloneState, StandaloneStore, StandaloneTopic
from controller import codec
from controller.history import PartitionHistory
from controller.model import (
    BrokerRegistration,
    ClusterState,
    PartitionRegistration,
    TopicRecord,
)
from controller.state_machine import (
    ControllerResult,
    ElectionOutcome,
    Settings,
    alter_configs,
    create_partitions,
    create_topics,
    delete_topics,
    elect_leaders,
    init_producer_id,
    replay,
)
from minikafka.errors import ErrorCode
from minikafka.v1 import common_pb2, controller_pb2, raft_pb2

T = TypeVar("T")

#: The broker epoch of the one registration a standalone broker has.
STANDALONE_BROKER_EPOCH = 0


def cluster_state(
    stored: StandaloneState, *, broker_id: int, endpoint: common_pb2.BrokerEndpoint
) -> ClusterState:
    """The controller's view of a standalone broker's metadata: one unfenced broker that
    is the only replica and the leader of every partition."""
    me = (broker_id,)
    return ClusterState(
        cluster_id=stored.cluster_id,
        controller_id=broker_id,
        next_producer_id=stored.next_producer_id,
        brokers={
            broker_id: BrokerRegistration(
                broker_id=broker_id,
                host=endpoint.host,
                port=endpoint.port,
                rack=endpoint.rack,
                incarnation_id="standalone",
                broker_epoch=STANDALONE_BROKER_EPOCH,
                fenced=False,
            )
        },
        topics={
            name: TopicRecord(name=name, num_partitions=topic.partitions, configs=topic.configs)
            for name, topic in stored.topics.items()
        },
        partitions={
            (name, index): PartitionRegistration(replicas=me, leader=broker_id, isr=me)
            for name, topic in stored.topics.items()
            for index in range(topic.partitions)
        },
    )


def stored_state(state: ClusterState) -> StandaloneState:
    """What the standalone store persists of `state`."""
    return StandaloneState(
        cluster_id=state.cluster_id,
        next_producer_id=state.next_producer_id,
        topics={
            name: StandaloneTopic(partitions=record.num_partitions, configs=dict(record.configs))
            for name, record in state.topics.items()
        },
    )


_NO_ACLS = "ACLs live in the controller's metadata log: a standalone broker has none"


class StateMachineAdmin:
    """`AdminBackend` of a standalone broker (see the module docstring)."""

    def __init__(
        self,
        *,
        store: StandaloneStore,
        config: BrokerConfig,
        endpoint: common_pb2.BrokerEndpoint,
        clock: Clock,
    ) -> None:
        self._store = store
        self._endpoint = endpoint
        self._clock = clock
        self._settings = Settings(
            controller_id=config.broker_id,
            default_replication_factor=1,
            num_partitions=1,
            min_insync_replicas=config.min_insync_replicas,
            limits=config.topic_limits(),
        )
        self._state = cluster_state(store.state, broker_id=config.broker_id, endpoint=endpoint)
        self.history = PartitionHistory(wall_ms=clock.wall_ms)
        self.history.seed(self._state)

    @property
    def state(self) -> ClusterState:
        return self._state

    def _commit(self, result: ControllerResult[T]) -> T:
        """Replay the handler's records (as the controller does after its journal write),
        then persist and apply the new metadata."""
        if not result.records:
            return result.reply
        state = self._state
        for record in result.records:
            offset = state.metadata_offset + 1
            self.history.observe(state, offset, record)
            state = replay(state, offset, record)
        self._store.apply(stored_state(state), now_ms=self._clock.monotonic_ms())
        self._state = state
        return result.reply

    async def create_topics(
        self, request: controller_pb2.CreateTopicsRequest
    ) -> controller_pb2.CreateTopicsResponse:
        results = self._commit(
            create_topics(
                self._state,
                self._settings,
                topics=codec.new_topics(request),
                validate_only=request.validate_only,
            )
        )
        return controller_pb2.CreateTopicsResponse(topics=codec.topic_results(results))

    async def create_partitions(
        self, request: controller_pb2.CreatePartitionsRequest
    ) -> controller_pb2.CreatePartitionsResponse:
        results = self._commit(
            create_partitions(
                self._state,
                self._settings,
                topics=codec.new_partitions(request),
                validate_only=request.validate_only,
            )
        )
        return controller_pb2.CreatePartitionsResponse(topics=codec.topic_results(results))

    async def delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest
    ) -> controller_pb2.DeleteTopicsResponse:
        results = self._commit(delete_topics(self._state, names=list(request.names)))
        return controller_pb2.DeleteTopicsResponse(topics=codec.topic_results(results))

    async def create_acls(
        self, request: controller_pb2.CreateAclsRequest
    ) -> controller_pb2.CreateAclsResponse:
        return controller_pb2.CreateAclsResponse(
            error_code=int(ErrorCode.INVALID_REQUEST), error_message=_NO_ACLS
        )

    async def delete_acls(
        self, request: controller_pb2.DeleteAclsRequest
    ) -> controller_pb2.DeleteAclsResponse:
        return controller_pb2.DeleteAclsResponse(
            error_code=int(ErrorCode.INVALID_REQUEST), error_message=_NO_ACLS
        )

    async def describe_acls(
        self, request: controller_pb2.DescribeAclsRequest
    ) -> controller_pb2.DescribeAclsResponse:
        return controller_pb2.DescribeAclsResponse(
            error_code=int(ErrorCode.INVALID_REQUEST), error_message=_NO_ACLS
        )

    async def alter_configs(
        self, request: controller_pb2.AlterConfigsRequest
    ) -> controller_pb2.AlterConfigsResponse:
        reply = self._commit(
            alter_configs(
                self._state,
                self._settings,
                topic=request.topic,
                set_configs=dict(request.set),
                delete_configs=list(request.delete),
                validate_only=request.validate_only,
            )
        )
        return controller_pb2.AlterConfigsResponse(
            error_code=codec.wire_code(reply.error), error_message=reply.message
        )

    async def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse:
        election_type = codec.election_type(request.election_type)
        if election_type is None:
            return controller_pb2.ElectLeadersResponse(
                error_code=codec.wire_code(ErrorCode.INVALID_REQUEST)
            )
        outcomes: tuple[ElectionOutcome, ...] = self._commit(
            elect_leaders(
                self._state,
                self._settings,
                election_type=election_type,
                partitions=[(tp.topic, tp.partition) for tp in request.partitions] or None,
            )
        )
        return controller_pb2.ElectLeadersResponse(results=codec.election_results(outcomes))

    async def init_producer_id(
        self, request: controller_pb2.InitProducerIdRequest
    ) -> controller_pb2.InitProducerIdResponse:
        reply = self._commit(
            init_producer_id(
                self._state,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
            )
        )
        return controller_pb2.InitProducerIdResponse(
            error_code=codec.wire_code(reply.error),
            producer_id=reply.producer_id,
            producer_epoch=reply.producer_epoch,
        )

    async def describe_cluster(
        self, request: controller_pb2.DescribeClusterRequest
    ) -> controller_pb2.DescribeClusterResponse:
        # From what is actually open: a partition the broker could not open is OFFLINE.
        return self._store.describe_cluster(request, self._endpoint)

    async def describe_partition_history(
        self, request: controller_pb2.DescribePartitionHistoryRequest
    ) -> controller_pb2.DescribePartitionHistoryResponse:
        return codec.partition_history_response(
            self._state, request.topic, request.partition, self.history
        )

    async def describe_quorum(
        self, request: raft_pb2.DescribeQuorumRequest
    ) -> raft_pb2.DescribeQuorumResponse:
        return raft_pb2.DescribeQuorumResponse(
            error_code=int(ErrorCode.UNSUPPORTED_VERSION),
            error_message="a standalone broker has no controller quorum",
            leader_id=-1,
        )


def build(
    *,
    store: StandaloneStore,
    config: BrokerConfig,
    endpoint: common_pb2.BrokerEndpoint,
    clock: Clock,
) -> AdminBackend:
    """The `standalone_admin` factory `broker.app.Broker` takes."""
    return StateMachineAdmin(store=store, config=config, endpoint=endpoint, clock=clock)
