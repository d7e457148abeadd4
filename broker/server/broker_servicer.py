"""BrokerService and ReplicaService servicers: translate wire messages to ReplicaManager calls.

No leadership, epoch or acks logic lives here; request-level problems (a malformed
request) become gRPC INVALID_ARGUMENT, everything else is a per-partition error code.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import grpc

from broker.metadata_cache import MetadataCache
from broker.replica.manager import (
    FetchItem,
    FetchResult,
    ListOffsetsItem,
    ProduceItem,
    ReplicaManager,
)
from broker.server.metrics import BrokerMetrics
from minikafka.errors import ErrorCode
from minikafka.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
)

logger = logging.getLogger(__name__)

#: Upper bounds that keep one request from pinning the broker.
MAX_WAIT_MS_MAX = 60_000
REQUEST_TIMEOUT_MS_MAX = 300_000


class AdminBackend(Protocol):
    """Where admin calls go: the controller (cluster mode) or the standalone store."""

    async def create_topics(
        self, request: controller_pb2.CreateTopicsRequest
    ) -> controller_pb2.CreateTopicsResponse: ...
    async def delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest
    ) -> controller_pb2.DeleteTopicsResponse: ...
    async def describe_cluster(
        self, request: controller_pb2.DescribeClusterRequest
    ) -> controller_pb2.DescribeClusterResponse: ...
    async def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse: ...
    async def alter_configs(
        self, request: controller_pb2.AlterConfigsRequest
    ) -> controller_pb2.AlterConfigsResponse: ...
    async def init_producer_id(
        self, request: controller_pb2.InitProducerIdRequest
    ) -> controller_pb2.InitProducerIdResponse: ...


def _fetch_response(results: list[FetchResult]) -> broker_pb2.FetchResponse:
    response = broker_pb2.FetchResponse()
    for result in results:
        entry = response.partitions.add(
            topic=result.topic,
            partition=result.partition,
            error_code=int(result.error_code),
            error_message=result.error_message,
            high_watermark=result.high_watermark,
            log_start_offset=result.log_start_offset,
            log_end_offset=result.log_end_offset,
            records=result.records,
            leader_epoch=result.leader_epoch,
        )
        if result.diverging_epoch is not None:
            entry.diverging_epoch.epoch = result.diverging_epoch[0]
            entry.diverging_epoch.end_offset = result.diverging_epoch[1]
        else:
            entry.diverging_epoch.epoch = -1
            entry.diverging_epoch.end_offset = -1
    return response


def _fetch_items(partitions: list[broker_pb2.FetchPartition]) -> list[FetchItem]:
    return [
        FetchItem(
            topic=p.topic,
            partition=p.partition,
            fetch_offset=p.fetch_offset,
            current_leader_epoch=p.current_leader_epoch,
            last_fetched_epoch=p.last_fetched_epoch,
            partition_max_bytes=p.partition_max_bytes if p.partition_max_bytes > 0 else 1 << 20,
        )
        for p in partitions
    ]


async def _abort_invalid(context: grpc.aio.ServicerContext[object, object], message: str) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


def _check_fetch_bounds(
    max_wait_ms: int, min_bytes: int, max_bytes: int, partitions: list[broker_pb2.FetchPartition]
) -> str | None:
    if max_wait_ms < 0 or max_wait_ms > MAX_WAIT_MS_MAX:
        return f"max_wait_ms must be in [0, {MAX_WAIT_MS_MAX}], got {max_wait_ms}"
    if min_bytes < 0:
        return f"min_bytes must be >= 0, got {min_bytes}"
    if max_bytes < 0:
        return f"max_bytes must be >= 0, got {max_bytes}"
    for p in partitions:
        if p.partition_max_bytes < 0:
            return f"partition_max_bytes must be >= 0, got {p.partition_max_bytes}"
        if p.fetch_offset < 0:
            return f"fetch_offset must be >= 0, got {p.fetch_offset} for {p.topic}-{p.partition}"
    return None


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    """Client-facing RPCs."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        admin: AdminBackend,
        metrics: BrokerMetrics,
        fetch_max_bytes: int,
        message_max_bytes: int,
        external: bool = False,
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._external = external
        self._admin = admin
        self._metrics = metrics
        self._fetch_max_bytes = fetch_max_bytes
        self._message_max_bytes = message_max_bytes

    async def Produce(
        self,
        request: broker_pb2.ProduceRequest,
        context: grpc.aio.ServicerContext[broker_pb2.ProduceRequest, broker_pb2.ProduceResponse],
    ) -> broker_pb2.ProduceResponse:
        started = time.perf_counter()
        if request.timeout_ms < 0 or request.timeout_ms > REQUEST_TIMEOUT_MS_MAX:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"timeout_ms must be in [0, {REQUEST_TIMEOUT_MS_MAX}], got {request.timeout_ms}",
            )
        items = [
            ProduceItem(
                topic=p.topic,
                partition=p.partition,
                records=p.records,
                current_leader_epoch=p.current_leader_epoch,
            )
            for p in request.partitions
        ]
        results = await self._replicas.produce(
            acks=request.acks, timeout_ms=request.timeout_ms or 30_000, items=items
        )
        response = broker_pb2.ProduceResponse()
        for result in results:
            response.partitions.add(
                topic=result.topic,
                partition=result.partition,
                error_code=int(result.error_code),
                error_message=result.error_message,
                base_offset=result.base_offset,
                log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset,
            )
            self._metrics.produce_requests.labels(error=result.error_code.name).inc()
        self._metrics.produce_latency.observe(time.perf_counter() - started)
        return response

    async def Fetch(
        self,
        request: broker_pb2.FetchRequest,
        context: grpc.aio.ServicerContext[broker_pb2.FetchRequest, broker_pb2.FetchResponse],
    ) -> broker_pb2.FetchResponse:
        started = time.perf_counter()
        problem = _check_fetch_bounds(
            request.max_wait_ms, request.min_bytes, request.max_bytes, list(request.partitions)
        )
        if problem is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        max_bytes = min(request.max_bytes or self._fetch_max_bytes, self._fetch_max_bytes)
        results = await self._replicas.fetch(
            items=_fetch_items(list(request.partitions)),
            max_wait_ms=request.max_wait_ms,
            min_bytes=request.min_bytes,
            max_bytes=max_bytes,
            replica_id=None,
        )
        self._metrics.fetch_requests.labels(kind="consumer").inc()
        self._metrics.fetch_latency.labels(kind="consumer").observe(time.perf_counter() - started)
        return _fetch_response(results)

    async def ListOffsets(
        self,
        request: broker_pb2.ListOffsetsRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.ListOffsetsRequest, broker_pb2.ListOffsetsResponse
        ],
    ) -> broker_pb2.ListOffsetsResponse:
        results = self._replicas.list_offsets(
            [
                ListOffsetsItem(
                    topic=p.topic,
                    partition=p.partition,
                    timestamp_ms=p.timestamp_ms,
                    current_leader_epoch=p.current_leader_epoch,
                )
                for p in request.partitions
            ]
        )
        response = broker_pb2.ListOffsetsResponse()
        for result in results:
            response.partitions.add(
                topic=result.topic,
                partition=result.partition,
                error_code=int(result.error_code),
                error_message=result.error_message,
                offset=result.offset,
                timestamp_ms=result.timestamp_ms,
                leader_epoch=result.leader_epoch,
            )
        return response

    async def Metadata(
        self,
        request: broker_pb2.MetadataRequest,
        context: grpc.aio.ServicerContext[broker_pb2.MetadataRequest, broker_pb2.MetadataResponse],
    ) -> broker_pb2.MetadataResponse:
        cache = self._metadata
        response = broker_pb2.MetadataResponse(
            cluster_id=cache.cluster_id, controller_id=cache.controller_id
        )
        for broker in sorted(cache.brokers.values(), key=lambda b: b.broker_id):
            host, port = broker.address(external=self._external)
            response.brokers.add(broker_id=broker.broker_id, host=host, port=port, rack=broker.rack)
        for name in list(request.topics) or cache.topics():
            infos = cache.partitions_of(name)
            topic = response.topics.add(name=name)
            if not infos:
                topic.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            configs = cache.topic_configs.get(name, {})
            topic.configs.update(configs)
            topic.max_message_bytes = int(configs.get("max.message.bytes", self._message_max_bytes))
            live = set(cache.brokers)
            for info in infos:
                topic.partitions.add(
                    partition=info.partition,
                    error_code=int(
                        ErrorCode.NONE if info.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
                    ),
                    leader=info.leader,
                    leader_epoch=info.leader_epoch,
                    replicas=info.replicas,
                    isr=info.isr,
                    offline_replicas=[r for r in info.replicas if r not in live],
                    partition_epoch=info.partition_epoch,
                    state=info.state,
                )
        return response

    # ---- admin, forwarded ---------------------------------------------------------

    async def CreateTopics(
        self,
        request: controller_pb2.CreateTopicsRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.CreateTopicsRequest, controller_pb2.CreateTopicsResponse
        ],
    ) -> controller_pb2.CreateTopicsResponse:
        return await self._admin.create_topics(request)

    async def DeleteTopics(
        self,
        request: controller_pb2.DeleteTopicsRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.DeleteTopicsRequest, controller_pb2.DeleteTopicsResponse
        ],
    ) -> controller_pb2.DeleteTopicsResponse:
        return await self._admin.delete_topics(request)

    async def DescribeCluster(
        self,
        request: controller_pb2.DescribeClusterRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.DescribeClusterRequest, controller_pb2.DescribeClusterResponse
        ],
    ) -> controller_pb2.DescribeClusterResponse:
        response = await self._admin.describe_cluster(request)
        if self._external:
            for status in response.brokers:
                endpoint = status.endpoint
                if endpoint.external_host:
                    endpoint.host, endpoint.port = endpoint.external_host, endpoint.external_port
        return response

    async def ElectLeaders(
        self,
        request: controller_pb2.ElectLeadersRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.ElectLeadersRequest, controller_pb2.ElectLeadersResponse
        ],
    ) -> controller_pb2.ElectLeadersResponse:
        return await self._admin.elect_leaders(request)

    async def AlterConfigs(
        self,
        request: controller_pb2.AlterConfigsRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.AlterConfigsRequest, controller_pb2.AlterConfigsResponse
        ],
    ) -> controller_pb2.AlterConfigsResponse:
        return await self._admin.alter_configs(request)

    async def InitProducerId(
        self,
        request: controller_pb2.InitProducerIdRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.InitProducerIdRequest, controller_pb2.InitProducerIdResponse
        ],
    ) -> controller_pb2.InitProducerIdResponse:
        return await self._admin.init_producer_id(request)


class ReplicaServicer(broker_pb2_grpc.ReplicaServiceServicer):
    """Follower fetches (leader side)."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metrics: BrokerMetrics,
        broker_epoch_of: BrokerEpochCheck,
        fetch_max_bytes: int,
    ) -> None:
        self._replicas = replicas
        self._metrics = metrics
        self._broker_epoch_of = broker_epoch_of
        self._fetch_max_bytes = fetch_max_bytes

    async def Fetch(
        self,
        request: broker_pb2.ReplicaFetchRequest,
        context: grpc.aio.ServicerContext[broker_pb2.ReplicaFetchRequest, broker_pb2.FetchResponse],
    ) -> broker_pb2.FetchResponse:
        started = time.perf_counter()
        problem = _check_fetch_bounds(
            request.max_wait_ms, request.min_bytes, request.max_bytes, list(request.partitions)
        )
        if problem is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        items = _fetch_items(list(request.partitions))
        if not self._broker_epoch_of(request.replica_id, request.broker_epoch):
            return _fetch_response(
                [
                    FetchResult(
                        topic=item.topic,
                        partition=item.partition,
                        error_code=ErrorCode.STALE_BROKER_EPOCH,
                        error_message=(
                            f"broker {request.replica_id} epoch {request.broker_epoch} is not "
                            "its current registration"
                        ),
                    )
                    for item in items
                ]
            )
        max_bytes = min(request.max_bytes or self._fetch_max_bytes, self._fetch_max_bytes)
        results = await self._replicas.fetch(
            items=items,
            max_wait_ms=request.max_wait_ms,
            min_bytes=request.min_bytes,
            max_bytes=max_bytes,
            replica_id=request.replica_id,
        )
        self._metrics.fetch_requests.labels(kind="replica").inc()
        self._metrics.fetch_latency.labels(kind="replica").observe(time.perf_counter() - started)
        return _fetch_response(results)


class BrokerEpochCheck(Protocol):
    def __call__(self, broker_id: int, broker_epoch: int) -> bool: ...


def endpoint_message(broker_id: int, host: str, port: int, rack: str) -> common_pb2.BrokerEndpoint:
    return common_pb2.BrokerEndpoint(broker_id=broker_id, host=host, port=port, rack=rack)
