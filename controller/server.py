"""gRPC `ControllerService`: translate requests to engine calls and replies back. No rules here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from controller import codec
from controller.engine import ControllerEngine
from controller.state_machine import AlterPartitionItem, ElectionType
from minikafka.errors import ErrorCode
from minikafka.v1 import common_pb2, controller_pb2, controller_pb2_grpc

ServicerContext = grpc.aio.ServicerContext[Any, Any]

_ELECTION_TYPES = {
    controller_pb2.PREFERRED: ElectionType.PREFERRED,
    controller_pb2.UNCLEAN: ElectionType.UNCLEAN,
}


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(
        self, engine: ControllerEngine, *, heartbeat_interval_ms: int, session_timeout_ms: int
    ) -> None:
        self._engine = engine
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._session_timeout_ms = session_timeout_ms

    async def RegisterBroker(
        self, request: controller_pb2.RegisterBrokerRequest, context: ServicerContext
    ) -> controller_pb2.RegisterBrokerResponse:
        reply = await self._engine.register_broker(
            broker_id=request.broker_id,
            host=request.endpoint.host,
            port=request.endpoint.port,
            rack=request.endpoint.rack,
            incarnation_id=request.incarnation_id,
            clean_shutdown=request.clean_shutdown,
            external_host=request.endpoint.external_host,
            external_port=request.endpoint.external_port,
        )
        return controller_pb2.RegisterBrokerResponse(
            error_code=codec.wire_code(reply.error),
            error_message=reply.message,
            broker_epoch=reply.broker_epoch,
            heartbeat_interval_ms=self._heartbeat_interval_ms,
            session_timeout_ms=self._session_timeout_ms,
            controller_epoch=self._engine.state.controller_epoch,
        )

    async def BrokerHeartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest, context: ServicerContext
    ) -> controller_pb2.BrokerHeartbeatResponse:
        reply = await self._engine.heartbeat(
            broker_id=request.broker_id,
            broker_epoch=request.broker_epoch,
            metadata_offset=request.metadata_offset,
            want_shutdown=request.want_shutdown,
        )
        return controller_pb2.BrokerHeartbeatResponse(
            error_code=codec.wire_code(reply.error),
            is_fenced=reply.is_fenced,
            should_shut_down=reply.should_shut_down,
            controller_epoch=self._engine.state.controller_epoch,
        )

    async def BrokerHeartbeatStream(
        self,
        request_iterator: AsyncIterator[controller_pb2.BrokerHeartbeatRequest],
        context: ServicerContext,
    ) -> AsyncIterator[controller_pb2.BrokerHeartbeatResponse]:
        last: controller_pb2.BrokerHeartbeatRequest | None = None
        accepted = False
        try:
            async for request in request_iterator:
                last = request
                reply = await self.BrokerHeartbeat(request, context)
                accepted = reply.error_code == ErrorCode.NONE
                yield reply
        finally:
            if last is not None and accepted and not last.want_shutdown:
                # Shielded: this also runs when the stream is cancelled by a dead peer.
                await asyncio.shield(
                    self._engine.heartbeat_stream_broken(
                        broker_id=last.broker_id, broker_epoch=last.broker_epoch
                    )
                )

    async def AlterPartition(
        self, request: controller_pb2.AlterPartitionRequest, context: ServicerContext
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
        reply = await self._engine.controlled_shutdown(
            broker_id=request.broker_id, broker_epoch=request.broker_epoch
        )
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
        results = await self._engine.create_topics(
            topics=codec.new_topics(request), validate_only=request.validate_only
        )
        return controller_pb2.CreateTopicsResponse(topics=codec.topic_results(results))

    async def DeleteTopics(
        self, request: controller_pb2.DeleteTopicsRequest, context: ServicerContext
    ) -> controller_pb2.DeleteTopicsResponse:
        results = await self._engine.delete_topics(names=list(request.names))
        return controller_pb2.DeleteTopicsResponse(topics=codec.topic_results(results))

    async def DescribeCluster(
        self, request: controller_pb2.DescribeClusterRequest, context: ServicerContext
    ) -> controller_pb2.DescribeClusterResponse:
        return codec.describe_cluster_response(self._engine.state, topics=list(request.topics))

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
        outcomes = await self._engine.elect_leaders(
            election_type=election_type,
            partitions=[(tp.topic, tp.partition) for tp in request.partitions] or None,
        )
        return controller_pb2.ElectLeadersResponse(results=codec.election_results(outcomes))

    async def AlterConfigs(
        self, request: controller_pb2.AlterConfigsRequest, context: ServicerContext
    ) -> controller_pb2.AlterConfigsResponse:
        reply = await self._engine.alter_configs(
            topic=request.topic,
            set_configs=dict(request.set),
            delete_configs=list(request.delete),
            validate_only=request.validate_only,
        )
        return controller_pb2.AlterConfigsResponse(
            error_code=codec.wire_code(reply.error), error_message=reply.message
        )

    async def InitProducerId(
        self, request: controller_pb2.InitProducerIdRequest, context: ServicerContext
    ) -> controller_pb2.InitProducerIdResponse:
        reply = await self._engine.init_producer_id(
            producer_id=request.producer_id, producer_epoch=request.producer_epoch
        )
        return controller_pb2.InitProducerIdResponse(
            error_code=codec.wire_code(reply.error),
            producer_id=reply.producer_id,
            producer_epoch=reply.producer_epoch,
        )
