"""BrokerControlService servicer: LeaderAndIsr, StopReplica and UpdateMetadata from the
controller, translated to ReplicaManager / MetadataCache calls.

Every request is checked first by `transitions.check_control_request` (nothing before this
broker has registered; the exact broker epoch of this incarnation; no older controller
epoch than applied, no newer one than the controller session announced) and answered with
that error, changing nothing, when it fails. An UpdateMetadata older than the metadata
already applied is acknowledged and ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import grpc

from broker.metadata_cache import BrokerInfo, MetadataCache, PartitionInfo
from broker.replica.manager import ReplicaManager
from broker.replica.transitions import LeaderAndIsrPartition, check_control_request
from minikafka.acl import AclBinding, AclError
from minikafka.acl_wire import binding_from_wire
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, broker_pb2_grpc, common_pb2

logger = logging.getLogger(__name__)


def _partition_update(state: broker_pb2.PartitionState) -> LeaderAndIsrPartition:
    return LeaderAndIsrPartition(
        topic=state.topic,
        partition=state.partition,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        partition_epoch=state.partition_epoch,
        isr=frozenset(state.isr),
        replicas=tuple(state.replicas),
        is_new=state.is_new,
        recovering=state.state == "RECOVERING",
    )


def _partition_info(state: broker_pb2.PartitionState) -> PartitionInfo:
    return PartitionInfo(
        topic=state.topic,
        partition=state.partition,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        replicas=tuple(state.replicas),
        isr=tuple(state.isr),
        partition_epoch=state.partition_epoch,
        state=state.state or "ONLINE",
        elr=tuple(state.elr),
        last_known_elr=tuple(state.last_known_elr),
    )


def _broker_info(endpoint: common_pb2.BrokerEndpoint) -> BrokerInfo:
    return BrokerInfo(
        broker_id=endpoint.broker_id,
        host=endpoint.host,
        port=endpoint.port,
        rack=endpoint.rack,
        external_host=endpoint.external_host,
        external_port=endpoint.external_port,
        broker_epoch=endpoint.broker_epoch,
        in_controlled_shutdown=endpoint.in_controlled_shutdown,
    )


class ControlServicer(broker_pb2_grpc.BrokerControlServiceServicer):
    """Controller -> broker requests."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        broker_epoch: Callable[[], int],
        session_controller_epoch: Callable[[], int],
        on_change: Callable[[], None],
        unsafe_before_registration: bool = False,
    ) -> None:
        self._replicas = replicas
        #: Test-only (BrokerConfig.unsafe_test_control_before_registration): hole 2 reverted.
        self._unsafe_before_registration = unsafe_before_registration
        self._metadata = metadata
        self._broker_epoch = broker_epoch
        self._session_controller_epoch = session_controller_epoch
        self._on_change = on_change

    def _fence(self, controller_epoch: int, broker_epoch: int) -> ErrorCode | None:
        refused = check_control_request(
            controller_epoch=controller_epoch,
            broker_epoch=broker_epoch,
            current_broker_epoch=self._broker_epoch(),
            seen_controller_epoch=self._metadata.controller_epoch,
            session_controller_epoch=self._session_controller_epoch(),
            unsafe_before_registration=self._unsafe_before_registration,
        )
        if refused is not None:
            logger.info(
                "refusing a control request (controller epoch %s, broker epoch %s): %s",
                controller_epoch,
                broker_epoch,
                refused.name,
            )
            return refused
        self._metadata.controller_epoch = controller_epoch
        return None

    def _apply_configs(
        self, topic_configs: list[broker_pb2.TopicConfigs], *, metadata_offset: int
    ) -> None:
        """Apply each topic's configs unless the broker has them from a later metadata
        offset (configs travel in LeaderAndIsr and UpdateMetadata, which can arrive out of
        order)."""
        offsets = self._metadata.topic_config_offsets
        for entry in topic_configs:
            if metadata_offset < offsets.get(entry.topic, -1):
                continue
            offsets[entry.topic] = metadata_offset
            configs = dict(entry.configs)
            if self._metadata.topic_configs.get(entry.topic) != configs:
                self._metadata.topic_configs[entry.topic] = configs
                self._replicas.refresh_settings(entry.topic)

    async def LeaderAndIsr(
        self,
        request: broker_pb2.LeaderAndIsrRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.LeaderAndIsrRequest, broker_pb2.LeaderAndIsrResponse
        ],
    ) -> broker_pb2.LeaderAndIsrResponse:
        fenced = self._fence(request.controller_epoch, request.broker_epoch)
        if fenced is not None:
            return broker_pb2.LeaderAndIsrResponse(error_code=int(fenced))
        self._metadata.controller_id = request.controller_id
        for endpoint in request.live_leaders:
            self._metadata.brokers.setdefault(endpoint.broker_id, _broker_info(endpoint))
        self._apply_configs(list(request.topic_configs), metadata_offset=request.metadata_offset)
        response = broker_pb2.LeaderAndIsrResponse(error_code=int(ErrorCode.NONE))
        for state in request.partitions:
            code = self._replicas.apply_leader_and_isr(_partition_update(state))
            if code is ErrorCode.NONE:
                self._metadata.update_partition(_partition_info(state))
            response.partitions.add(
                topic=state.topic, partition=state.partition, error_code=int(code)
            )
        self._on_change()
        return response

    async def StopReplica(
        self,
        request: broker_pb2.StopReplicaRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.StopReplicaRequest, broker_pb2.StopReplicaResponse
        ],
    ) -> broker_pb2.StopReplicaResponse:
        fenced = self._fence(request.controller_epoch, request.broker_epoch)
        if fenced is not None:
            return broker_pb2.StopReplicaResponse(error_code=int(fenced))
        response = broker_pb2.StopReplicaResponse(error_code=int(ErrorCode.NONE))
        for item in request.partitions:
            code = self._replicas.stop_replica(
                item.topic,
                item.partition,
                leader_epoch=item.leader_epoch,
                delete=item.delete_partition,
            )
            response.partitions.add(
                topic=item.topic, partition=item.partition, error_code=int(code)
            )
        self._on_change()
        return response

    async def UpdateMetadata(
        self,
        request: broker_pb2.UpdateMetadataRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.UpdateMetadataRequest, broker_pb2.UpdateMetadataResponse
        ],
    ) -> broker_pb2.UpdateMetadataResponse:
        fenced = self._fence(request.controller_epoch, request.broker_epoch)
        if fenced is not None:
            return broker_pb2.UpdateMetadataResponse(error_code=int(fenced))
        cache = self._metadata
        if request.metadata_offset < cache.metadata_offset:
            # Delivered late (reordered behind a newer one): never replaces newer metadata.
            return broker_pb2.UpdateMetadataResponse(error_code=int(ErrorCode.NONE))
        cache.controller_id = request.controller_id
        if request.cluster_id:
            cache.cluster_id = request.cluster_id
        cache.brokers = {e.broker_id: _broker_info(e) for e in request.live_brokers}
        for topic in request.deleted_topics:
            cache.remove_topic(topic)
        for state in request.partitions:
            cache.update_partition(_partition_info(state))
        self._apply_configs(list(request.topic_configs), metadata_offset=request.metadata_offset)
        cache.acls = _acls(request.acls)
        cache.metadata_offset = max(cache.metadata_offset, request.metadata_offset)
        self._on_change()
        return broker_pb2.UpdateMetadataResponse(error_code=int(ErrorCode.NONE))

    async def GetReplicaLogInfo(
        self,
        request: broker_pb2.GetReplicaLogInfoRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.GetReplicaLogInfoRequest, broker_pb2.GetReplicaLogInfoResponse
        ],
    ) -> broker_pb2.GetReplicaLogInfoResponse:
        fenced = self._fence(request.controller_epoch, request.broker_epoch)
        if fenced is not None:
            return broker_pb2.GetReplicaLogInfoResponse(error_code=int(fenced))
        response = broker_pb2.GetReplicaLogInfoResponse(error_code=int(ErrorCode.NONE))
        for item in request.partitions:
            end = self._replicas.log_end(item.topic, item.partition)
            if end is None:
                response.partitions.add(
                    topic=item.topic,
                    partition=item.partition,
                    error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                )
                continue
            response.partitions.add(
                topic=item.topic,
                partition=item.partition,
                last_epoch=end[0],
                log_end_offset=end[1],
            )
        return response


def _acls(messages: Iterable[common_pb2.AclBinding]) -> frozenset[AclBinding]:
    """The pushed ACLs; one this version cannot read is left out (logged): it then
    allows nothing, and a DENY it meant is the default anyway."""
    acls: set[AclBinding] = set()
    for message in messages:
        try:
            acls.add(binding_from_wire(message))
        except AclError as error:
            logger.warning("ignoring an ACL the controller sent: %s", error)
    return frozenset(acls)
