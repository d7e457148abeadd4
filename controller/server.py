"""gRPC `ControllerService`: translate requests to engine calls and replies back. No rules here.

A controller that is not the active one (a standby, or one still starting) answers every
call with NOT_CONTROLLER in the response's error fields (per topic for CreateTopics and
DeleteTopics), except `DescribeQuorum`, which any controller answers: callers use it to
find the active controller.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from controller import codec
from controller.engine import ControllerEngine
from controller.quorum import NotControllerError
from controller.state_machine import AlterPartitionItem, ElectionType
from minikafka.acl import AclError
from minikafka.acl_wire import binding_from_wire, binding_to_wire, filter_from_wire
from minikafka.errors import ErrorCode
from minikafka.v1 import common_pb2, controller_pb2, controller_pb2_grpc, raft_pb2

ServicerContext = grpc.aio.ServicerContext[Any, Any]

_ELECTION_TYPES = {
    controller_pb2.PREFERRED: ElectionType.PREFERRED,
    controller_pb2.UNCLEAN: ElectionType.UNCLEAN,
}


_NOT_CONTROLLER = codec.wire_code(ErrorCode.NOT_CONTROLLER)


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(
        self,
        engine: Callable[[], ControllerEngine | None],
        *,
        describe_quorum: Callable[[], raft_pb2.DescribeQuorumResponse],
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
    ) -> None:
        self._current_engine = engine
        self._describe_quorum = describe_quorum
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._session_timeout_ms = session_timeout_ms
        self._stream_numbers = itertools.count(1)

    @property
    def _engine(self) -> ControllerEngine:
        engine = self._current_engine()
        if engine is None:
            raise NotControllerError("the controller is still starting", leader_id=None)
        return engine

    async def DescribeQuorum(
        self, request: raft_pb2.DescribeQuorumRequest, context: ServicerContext
    ) -> raft_pb2.DescribeQuorumResponse:
        return self._describe_quorum()

    async def RegisterBroker(
        self, request: controller_pb2.RegisterBrokerRequest, context: ServicerContext
    ) -> controller_pb2.RegisterBrokerResponse:
        try:
            return await self._register_broker(request)
        except NotControllerError as error:
            return controller_pb2.RegisterBrokerResponse(
                error_code=_NOT_CONTROLLER, error_message=str(error)
            )

    async def _register_broker(
        self, request: controller_pb2.RegisterBrokerRequest
    ) -> controller_pb2.RegisterBrokerResponse:
        engine = self._engine
        reply = await engine.register_broker(
            broker_id=request.broker_id,
            host=request.endpoint.host,
            port=request.endpoint.port,
            rack=request.endpoint.rack,
            incarnation_id=request.incarnation_id,
            previous_broker_epoch=(request.previous_broker_epoch if request.clean_shutdown else -1),
            directory_id=request.directory_id,
            external_host=request.endpoint.external_host,
            external_port=request.endpoint.external_port,
        )
        return controller_pb2.RegisterBrokerResponse(
            error_code=codec.wire_code(reply.error),
            error_message=reply.message,
            broker_epoch=reply.broker_epoch,
            heartbeat_interval_ms=self._heartbeat_interval_ms,
            session_timeout_ms=self._session_timeout_ms,
            controller_epoch=engine.state.controller_epoch,
        )

    async def BrokerHeartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest, context: ServicerContext
    ) -> controller_pb2.BrokerHeartbeatResponse:
        try:
            engine = self._engine
            reply = await engine.heartbeat(
                broker_id=request.broker_id,
                broker_epoch=request.broker_epoch,
                metadata_offset=request.metadata_offset,
                want_shutdown=request.want_shutdown,
            )
        except NotControllerError:
            # No epoch announced: only the active controller's replies announce one.
            return controller_pb2.BrokerHeartbeatResponse(error_code=_NOT_CONTROLLER)
        return controller_pb2.BrokerHeartbeatResponse(
            error_code=codec.wire_code(reply.error),
            is_fenced=reply.is_fenced,
            should_shut_down=reply.should_shut_down,
            controller_epoch=engine.state.controller_epoch,
        )

    async def BrokerHeartbeatStream(
        self,
        request_iterator: AsyncIterator[controller_pb2.BrokerHeartbeatRequest],
        context: ServicerContext,
    ) -> AsyncIterator[controller_pb2.BrokerHeartbeatResponse]:
        last: controller_pb2.BrokerHeartbeatRequest | None = None
        accepted = False
        # This stream's identity, in opening order: a newer stream of the broker replaces it
        # (even if this one's queued heartbeats are still being answered).
        stream = next(self._stream_numbers)
        try:
            async for request in request_iterator:
                last = request
                reply = await self.BrokerHeartbeat(request, context)
                accepted = reply.error_code == ErrorCode.NONE
                engine = self._current_engine()
                if accepted and engine is not None:
                    engine.heartbeat_stream_seen(request.broker_id, stream)
                yield reply
        finally:
            engine = self._current_engine()
            if last is not None and accepted and not last.want_shutdown and engine is not None:
                # Shielded: this also runs when the stream is cancelled by a dead peer.
                await asyncio.shield(
                    engine.heartbeat_stream_broken(
                        broker_id=last.broker_id, broker_epoch=last.broker_epoch, stream=stream
                    )
                )

    async def AlterPartition(
        self, request: controller_pb2.AlterPartitionRequest, context: ServicerContext
    ) -> controller_pb2.AlterPartitionResponse:
        try:
            return await self._alter_partition(request)
        except NotControllerError:
            return controller_pb2.AlterPartitionResponse(error_code=_NOT_CONTROLLER)

    async def _alter_partition(
        self, request: controller_pb2.AlterPartitionRequest
    ) -> controller_pb2.AlterPartitionResponse:
        reply = await self._engine.alter_partition(
            broker_id=request.broker_id,
            broker_epoch=request.broker_epoch,
            items=[
                AlterPartitionItem(
                    topic=item.topic,
                    partition=item.partition,
                    leader_epoch=item.leader_epoch,
                    partition_epoch=item.partition_epoch,
                    new_isr=tuple(item.new_isr),
                    member_epochs={
                        member.broker_id: member.broker_epoch for member in item.new_isr_with_epochs
                    },
                    leader_min_insync_replicas=item.leader_min_insync_replicas,
                )
                for item in request.partitions
            ],
        )
        results = []
        for item in reply.items:
            result = controller_pb2.AlterPartitionResult(
                topic=item.topic, partition=item.partition, error_code=codec.wire_code(item.error)
            )
            if item.registration is not None:
                result.leader = item.registration.leader
                result.leader_epoch = item.registration.leader_epoch
                result.isr.extend(item.registration.isr)
                result.partition_epoch = item.registration.partition_epoch
            results.append(result)
        return controller_pb2.AlterPartitionResponse(
            error_code=codec.wire_code(reply.error), partitions=results
        )

    async def ControlledShutdown(
        self, request: controller_pb2.ControlledShutdownRequest, context: ServicerContext
    ) -> controller_pb2.ControlledShutdownResponse:
        try:
            reply = await self._engine.controlled_shutdown(
                broker_id=request.broker_id, broker_epoch=request.broker_epoch
            )
        except NotControllerError:
            return controller_pb2.ControlledShutdownResponse(error_code=_NOT_CONTROLLER)
        return controller_pb2.ControlledShutdownResponse(
            error_code=codec.wire_code(reply.error),
            remaining_partitions=[
                common_pb2.TopicPartition(topic=topic, partition=partition)
                for topic, partition in reply.remaining
            ],
        )

    async def CreateTopics(
        self, request: controller_pb2.CreateTopicsRequest, context: ServicerContext
    ) -> controller_pb2.CreateTopicsResponse:
        try:
            results = await self._engine.create_topics(
                topics=codec.new_topics(request), validate_only=request.validate_only
            )
        except NotControllerError as error:
            return controller_pb2.CreateTopicsResponse(
                topics=_not_controller_topics([t.name for t in request.topics], error)
            )
        return controller_pb2.CreateTopicsResponse(topics=codec.topic_results(results))

    async def CreatePartitions(
        self, request: controller_pb2.CreatePartitionsRequest, context: ServicerContext
    ) -> controller_pb2.CreatePartitionsResponse:
        try:
            results = await self._engine.create_partitions(
                topics=codec.new_partitions(request), validate_only=request.validate_only
            )
        except NotControllerError as error:
            return controller_pb2.CreatePartitionsResponse(
                topics=_not_controller_topics([t.name for t in request.topics], error)
            )
        return controller_pb2.CreatePartitionsResponse(topics=codec.topic_results(results))

    async def DescribePartitionHistory(
        self, request: controller_pb2.DescribePartitionHistoryRequest, context: ServicerContext
    ) -> controller_pb2.DescribePartitionHistoryResponse:
        try:
            engine = self._engine
        except NotControllerError as error:
            return controller_pb2.DescribePartitionHistoryResponse(
                error_code=_NOT_CONTROLLER, error_message=str(error)
            )
        # Every controller replays the committed log, so a standby answers too.
        return codec.partition_history_response(
            engine.state, request.topic, request.partition, engine.history
        )

    async def DeleteTopics(
        self, request: controller_pb2.DeleteTopicsRequest, context: ServicerContext
    ) -> controller_pb2.DeleteTopicsResponse:
        try:
            results = await self._engine.delete_topics(names=list(request.names))
        except NotControllerError as error:
            return controller_pb2.DeleteTopicsResponse(
                topics=_not_controller_topics(list(request.names), error)
            )
        return controller_pb2.DeleteTopicsResponse(topics=codec.topic_results(results))

    async def DescribeCluster(
        self, request: controller_pb2.DescribeClusterRequest, context: ServicerContext
    ) -> controller_pb2.DescribeClusterResponse:
        try:
            state = self._engine.describe()
        except NotControllerError:
            return controller_pb2.DescribeClusterResponse(error_code=_NOT_CONTROLLER)
        return codec.describe_cluster_response(
            state,
            topics=list(request.topics),
            eligible_leader_replicas=self._engine.settings.eligible_leader_replicas,
        )

    async def ElectLeaders(
        self, request: controller_pb2.ElectLeadersRequest, context: ServicerContext
    ) -> controller_pb2.ElectLeadersResponse:
        election_type = _ELECTION_TYPES.get(request.election_type)
        if election_type is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown election type {request.election_type}",
            )
            raise AssertionError("abort returns only by raising")
        try:
            outcomes = await self._engine.elect_leaders(
                election_type=election_type,
                partitions=[(tp.topic, tp.partition) for tp in request.partitions] or None,
            )
        except NotControllerError:
            return controller_pb2.ElectLeadersResponse(error_code=_NOT_CONTROLLER)
        return controller_pb2.ElectLeadersResponse(results=codec.election_results(outcomes))

    async def AlterConfigs(
        self, request: controller_pb2.AlterConfigsRequest, context: ServicerContext
    ) -> controller_pb2.AlterConfigsResponse:
        try:
            reply = await self._engine.alter_configs(
                topic=request.topic,
                set_configs=dict(request.set),
                delete_configs=list(request.delete),
                validate_only=request.validate_only,
            )
        except NotControllerError as error:
            return controller_pb2.AlterConfigsResponse(
                error_code=_NOT_CONTROLLER, error_message=str(error)
            )
        return controller_pb2.AlterConfigsResponse(
            error_code=codec.wire_code(reply.error), error_message=reply.message
        )

    async def InitProducerId(
        self, request: controller_pb2.InitProducerIdRequest, context: ServicerContext
    ) -> controller_pb2.InitProducerIdResponse:
        try:
            reply = await self._engine.init_producer_id(
                producer_id=request.producer_id, producer_epoch=request.producer_epoch
            )
        except NotControllerError:
            return controller_pb2.InitProducerIdResponse(
                error_code=_NOT_CONTROLLER, producer_id=-1, producer_epoch=-1
            )
        return controller_pb2.InitProducerIdResponse(
            error_code=codec.wire_code(reply.error),
            producer_id=reply.producer_id,
            producer_epoch=reply.producer_epoch,
        )

    async def CreateAcls(
        self, request: controller_pb2.CreateAclsRequest, context: ServicerContext
    ) -> controller_pb2.CreateAclsResponse:
        try:
            bindings = [binding_from_wire(message) for message in request.acls]
        except AclError as error:
            return controller_pb2.CreateAclsResponse(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(error)
            )
        try:
            reply = await self._engine.create_acls(bindings=bindings)
        except NotControllerError as error:
            return controller_pb2.CreateAclsResponse(
                error_code=_NOT_CONTROLLER, error_message=str(error)
            )
        return controller_pb2.CreateAclsResponse(
            error_code=codec.wire_code(reply.error), error_message=reply.message
        )

    async def DeleteAcls(
        self, request: controller_pb2.DeleteAclsRequest, context: ServicerContext
    ) -> controller_pb2.DeleteAclsResponse:
        try:
            filters = [filter_from_wire(message) for message in request.filters]
        except AclError as error:
            return controller_pb2.DeleteAclsResponse(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(error)
            )
        try:
            reply = await self._engine.delete_acls(filters=filters)
        except NotControllerError as error:
            return controller_pb2.DeleteAclsResponse(
                error_code=_NOT_CONTROLLER, error_message=str(error)
            )
        return controller_pb2.DeleteAclsResponse(
            error_code=codec.wire_code(reply.error),
            error_message=reply.message,
            deleted=[binding_to_wire(binding) for binding in reply.deleted],
        )

    async def DescribeAcls(
        self, request: controller_pb2.DescribeAclsRequest, context: ServicerContext
    ) -> controller_pb2.DescribeAclsResponse:
        try:
            acl_filter = filter_from_wire(request.filter)
        except AclError as error:
            return controller_pb2.DescribeAclsResponse(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(error)
            )
        try:
            bindings = self._engine.describe_acls(acl_filter)
        except NotControllerError as error:
            return controller_pb2.DescribeAclsResponse(
                error_code=_NOT_CONTROLLER, error_message=str(error)
            )
        return controller_pb2.DescribeAclsResponse(
            acls=[binding_to_wire(binding) for binding in bindings]
        )


def _not_controller_topics(
    names: list[str], error: NotControllerError
) -> list[controller_pb2.TopicResult]:
    return [
        controller_pb2.TopicResult(name=name, error_code=_NOT_CONTROLLER, error_message=str(error))
        for name in names
    ]
