"""BrokerService and ReplicaService servicers: translate wire messages to ReplicaManager calls.

No leadership, epoch or acks logic lives here; request-level problems (a malformed
request) become gRPC INVALID_ARGUMENT, everything else is a per-partition error code.

Fetch responses always fit the gRPC message limit: the records budget leaves room for
the response's own framing (`fetch_records_room`), and `_fetch_response` drops the records
of the last partitions if a first batch (always returned, as in Kafka) would still not
fit. Client fetches also take their size from the broker's `ResponseBudget` until sent.
"""

from __future__ import annotations

import logging
import time
from typing import Final, Protocol

import grpc
import msgspec

from broker.group.coordinator import GroupCoordinator, Refusal
from broker.group.model import HeartbeatRequest, HeartbeatResult, TopicPartition, group_state
from broker.group.offsets import OffsetRecord
from broker.metadata_cache import MetadataCache
from broker.replica.manager import (
    FetchItem,
    FetchResult,
    ListOffsetsItem,
    ProduceItem,
    ReplicaManager,
)
from broker.server.metrics import BrokerMetrics
from broker.server.response_budget import ResponseBudget
from minikafka.errors import ErrorCode
from minikafka.limits import GRPC_MESSAGE_BYTES_MAX
from minikafka.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    raft_pb2,
)

logger = logging.getLogger(__name__)

#: Upper bounds that keep one request from pinning the broker.
MAX_WAIT_MS_MAX = 60_000
REQUEST_TIMEOUT_MS_MAX = 300_000
#: Partitions one fetch may ask for (each costs response framing).
FETCH_PARTITIONS_MAX: Final = 10_000
#: Bytes of metadata one committed offset may carry (Kafka's offset.metadata.max.bytes).
OFFSET_METADATA_BYTES_MAX: Final = 4096
#: Error messages in responses are cut to this many characters (bounded framing).
ERROR_MESSAGE_CHARS_MAX: Final = 1000
#: Upper bound of one partition's framing in a FetchResponse, besides its topic name and
#: records: field tags and lengths, six varints, the error message, the diverging epoch.
_FETCH_PARTITION_FRAMING_BYTES: Final = 128 + 3 * ERROR_MESSAGE_CHARS_MAX


def fetch_records_room(topics: list[str], message_limit_bytes: int) -> int:
    """Bytes of records a fetch response for these partitions (one topic name each) can
    carry and still fit in `message_limit_bytes` with all its framing."""
    framing = sum(len(topic.encode()) + _FETCH_PARTITION_FRAMING_BYTES for topic in topics)
    return max(0, message_limit_bytes - framing - 64)


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
    async def create_partitions(
        self, request: controller_pb2.CreatePartitionsRequest
    ) -> controller_pb2.CreatePartitionsResponse: ...
    async def describe_partition_history(
        self, request: controller_pb2.DescribePartitionHistoryRequest
    ) -> controller_pb2.DescribePartitionHistoryResponse: ...
    async def describe_quorum(
        self, request: raft_pb2.DescribeQuorumRequest
    ) -> raft_pb2.DescribeQuorumResponse: ...
    async def create_acls(
        self, request: controller_pb2.CreateAclsRequest
    ) -> controller_pb2.CreateAclsResponse: ...
    async def delete_acls(
        self, request: controller_pb2.DeleteAclsRequest
    ) -> controller_pb2.DeleteAclsResponse: ...
    async def describe_acls(
        self, request: controller_pb2.DescribeAclsRequest
    ) -> controller_pb2.DescribeAclsResponse: ...


def _fetch_response(
    results: list[FetchResult], *, message_limit_bytes: int = GRPC_MESSAGE_BYTES_MAX
) -> broker_pb2.FetchResponse:
    """The wire response, never larger than `message_limit_bytes` (records of the last
    partitions are left out if needed; their fetchers simply ask again)."""
    response = _fetch_response_message(results)
    if response.ByteSize() > message_limit_bytes:
        for entry in reversed(response.partitions):
            if entry.records:
                entry.records = b""
                if response.ByteSize() <= message_limit_bytes:
                    break
    return response


def _fetch_response_message(results: list[FetchResult]) -> broker_pb2.FetchResponse:
    response = broker_pb2.FetchResponse()
    for result in results:
        entry = response.partitions.add(
            topic=result.topic,
            partition=result.partition,
            error_code=int(result.error_code),
            error_message=result.error_message[:ERROR_MESSAGE_CHARS_MAX],
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
    if len(partitions) > FETCH_PARTITIONS_MAX:
        return (
            f"a fetch may ask for at most {FETCH_PARTITIONS_MAX} partitions (limit "
            f"fetch.partitions.max), got {len(partitions)}"
        )
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
        response_budget: ResponseBudget | None = None,
        message_limit_bytes: int = GRPC_MESSAGE_BYTES_MAX,
        coordinator: GroupCoordinator | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._replicas = replicas
        self._metadata = metadata
        self._external = external
        self._budget = response_budget or ResponseBudget(
            total_bytes=256 * 1024 * 1024, per_connection_bytes=128 * 1024 * 1024
        )
        self._message_limit_bytes = message_limit_bytes
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
        for item, result in zip(items, results, strict=True):
            if result.error_code is ErrorCode.NONE or result.indefinite:  # appended
                self._metrics.observe_produced(item.topic, item.records)
            response.partitions.add(
                topic=result.topic,
                partition=result.partition,
                error_code=int(result.error_code),
                error_message=result.error_message,
                base_offset=result.base_offset,
                log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset,
                indefinite=result.indefinite,
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
        partitions = list(request.partitions)
        connection = context.peer()
        budget = self._budget
        room = budget.room(connection)
        if room <= 0:
            # Responses this client (or everyone) has not read yet fill the budget: wait
            # for some to be sent, as long as the fetch would have waited for data.
            room = await budget.wait_for_room(connection, request.max_wait_ms / 1000)
        max_bytes = min(
            request.max_bytes or self._fetch_max_bytes,
            self._fetch_max_bytes,
            fetch_records_room([p.topic for p in partitions], self._message_limit_bytes),
            room,
        )
        results = await self._replicas.fetch(
            items=_fetch_items(partitions),
            max_wait_ms=request.max_wait_ms,
            min_bytes=request.min_bytes,
            max_bytes=max_bytes,
            replica_id=None,
        )
        size_bytes = sum(len(result.records) for result in results)
        if size_bytes > budget.room(connection):
            # No room (a first batch is returned whatever max_bytes says): answer without
            # records; the consumer fetches again once responses have gone out.
            results = [msgspec.structs.replace(result, records=b"") for result in results]
            size_bytes = 0
            self._metrics.fetch_requests.labels(kind="consumer-throttled").inc()
        response = _fetch_response(results, message_limit_bytes=self._message_limit_bytes)
        if size_bytes:
            budget.take(connection, size_bytes)
            for result in results:
                if result.records:
                    self._metrics.topic_bytes_out.labels(topic=result.topic).inc(
                        len(result.records)
                    )

            def sent(
                _: grpc.aio.ServicerContext[broker_pb2.FetchRequest, broker_pb2.FetchResponse],
            ) -> None:
                budget.give_back(connection, size_bytes)

            context.add_done_callback(sent)  # type: ignore[arg-type]  # stub: a class, not a Protocol
        self._metrics.fetch_requests.labels(kind="consumer").inc()
        self._metrics.fetch_latency.labels(kind="consumer").observe(time.perf_counter() - started)
        return response

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
                log_start_offset=result.log_start_offset,
                high_watermark=result.high_watermark,
                log_end_offset=result.log_end_offset,
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
                    elr=info.elr,
                    last_known_elr=info.last_known_elr,
                )
        return response

    # ---- consumer groups -------------------------------------------------------------

    def _group_coordinator(self) -> GroupCoordinator | Refusal:
        if self._coordinator is None:
            return Refusal(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no coordinator")
        return self._coordinator

    async def FindCoordinator(
        self,
        request: broker_pb2.FindCoordinatorRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.FindCoordinatorRequest, broker_pb2.FindCoordinatorResponse
        ],
    ) -> broker_pb2.FindCoordinatorResponse:
        response = broker_pb2.FindCoordinatorResponse()
        coordinator = self._group_coordinator()
        for group_id in request.group_ids:
            entry = response.coordinators.add(group_id=group_id, node_id=-1, partition=-1)
            if not group_id:
                entry.error_code = int(ErrorCode.INVALID_GROUP_ID)
                entry.error_message = "group id must not be empty"
                continue
            if isinstance(coordinator, Refusal):
                entry.error_code, entry.error_message = int(coordinator.code), coordinator.message
                continue
            answer = await coordinator.find_coordinator(group_id)
            entry.partition = answer.partition
            if answer.error is not None:
                entry.error_code = int(answer.error.code)
                entry.error_message = answer.error.message
                continue
            entry.node_id = answer.node_id
            endpoint = self._metadata.brokers[answer.node_id]
            entry.host, entry.port = endpoint.address(external=self._external)
        return response

    async def OffsetCommit(
        self,
        request: broker_pb2.OffsetCommitRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.OffsetCommitRequest, broker_pb2.OffsetCommitResponse
        ],
    ) -> broker_pb2.OffsetCommitResponse:
        if request.timeout_ms < 0 or request.timeout_ms > REQUEST_TIMEOUT_MS_MAX:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"timeout_ms must be in [0, {REQUEST_TIMEOUT_MS_MAX}], got {request.timeout_ms}",
            )
        long = next(
            (p for p in request.partitions if len(p.metadata.encode()) > OFFSET_METADATA_BYTES_MAX),
            None,
        )
        if long is not None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the metadata of {long.topic}-{long.partition} is longer than "
                f"{OFFSET_METADATA_BYTES_MAX} bytes (Kafka's offset.metadata.max.bytes)",
            )
        bad = next((p for p in request.partitions if p.offset < 0 or p.partition < 0), None)
        if bad is not None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"offset and partition must be >= 0, got offset {bad.offset} for "
                f"{bad.topic}-{bad.partition}",
            )
        refusal: Refusal | None
        coordinator = self._group_coordinator()
        if not request.group_id:
            refusal = Refusal(ErrorCode.INVALID_GROUP_ID, "group id must not be empty")
        elif isinstance(coordinator, Refusal):
            refusal = coordinator
        else:
            refusal = await coordinator.commit(
                request.group_id,
                member_id=request.member_id,
                member_epoch=request.member_epoch,
                offsets=[
                    (
                        TopicPartition(p.topic, p.partition),
                        OffsetRecord(
                            offset=p.offset, leader_epoch=p.leader_epoch, metadata=p.metadata
                        ),
                    )
                    for p in request.partitions
                ],
                timeout_ms=request.timeout_ms,
            )
        response = broker_pb2.OffsetCommitResponse()
        code, message = (ErrorCode.NONE, "") if refusal is None else (refusal.code, refusal.message)
        response.error_code, response.error_message = int(code), message
        for p in request.partitions:
            response.partitions.add(
                topic=p.topic, partition=p.partition, error_code=int(code), error_message=message
            )
        return response

    async def OffsetFetch(
        self,
        request: broker_pb2.OffsetFetchRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.OffsetFetchRequest, broker_pb2.OffsetFetchResponse
        ],
    ) -> broker_pb2.OffsetFetchResponse:
        response = broker_pb2.OffsetFetchResponse()
        coordinator = self._group_coordinator()
        if not request.group_id:
            answer: dict[TopicPartition, OffsetRecord | None] | Refusal = Refusal(
                ErrorCode.INVALID_GROUP_ID, "group id must not be empty"
            )
        elif isinstance(coordinator, Refusal):
            answer = coordinator
        else:
            answer = coordinator.fetch(
                request.group_id,
                member_id=request.member_id,
                member_epoch=request.member_epoch,
                partitions=[TopicPartition(p.topic, p.partition) for p in request.partitions]
                or None,
            )
        if isinstance(answer, Refusal):
            response.error_code, response.error_message = int(answer.code), answer.message
            return response
        for tp, record in answer.items():
            response.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=-1 if record is None else record.offset,
                leader_epoch=-1 if record is None else record.leader_epoch,
                metadata="" if record is None else record.metadata,
            )
        return response

    async def ConsumerGroupHeartbeat(
        self,
        request: broker_pb2.ConsumerGroupHeartbeatRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.ConsumerGroupHeartbeatRequest, broker_pb2.ConsumerGroupHeartbeatResponse
        ],
    ) -> broker_pb2.ConsumerGroupHeartbeatResponse:
        coordinator = self._group_coordinator()
        if not request.group_id:
            result = HeartbeatResult(
                error=int(ErrorCode.INVALID_GROUP_ID), message="group id must not be empty"
            )
        elif isinstance(coordinator, Refusal):
            result = HeartbeatResult(error=int(coordinator.code), message=coordinator.message)
        else:
            result = await coordinator.heartbeat(
                request.group_id,
                HeartbeatRequest(
                    member_id=request.member_id,
                    member_epoch=request.member_epoch,
                    instance_id=request.instance_id or None,
                    client_id=request.client_id,
                    client_host=context.peer(),
                    subscribed_topics=frozenset(request.subscribed_topics.topics)
                    if request.HasField("subscribed_topics")
                    else None,
                    owned=frozenset(
                        TopicPartition(p.topic, p.partition) for p in request.owned.partitions
                    )
                    if request.HasField("owned")
                    else None,
                    server_assignor=request.server_assignor or None,
                    session_timeout_ms=request.session_timeout_ms or None,
                    rebalance_timeout_ms=request.rebalance_timeout_ms or None,
                ),
            )
        response = broker_pb2.ConsumerGroupHeartbeatResponse(
            error_code=result.error,
            error_message=result.message,
            member_id=result.member_id,
            member_epoch=result.member_epoch,
            heartbeat_interval_ms=result.heartbeat_interval_ms,
        )
        if result.assignment is not None:
            response.assignment.SetInParent()
            for tp in sorted(result.assignment):
                response.assignment.partitions.add(topic=tp.topic, partition=tp.partition)
        return response

    async def ListGroups(
        self,
        request: broker_pb2.ListGroupsRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.ListGroupsRequest, broker_pb2.ListGroupsResponse
        ],
    ) -> broker_pb2.ListGroupsResponse:
        coordinator = self._group_coordinator()
        listed = coordinator if isinstance(coordinator, Refusal) else coordinator.list_groups()
        response = broker_pb2.ListGroupsResponse()
        if isinstance(listed, Refusal):
            response.error_code, response.error_message = int(listed.code), listed.message
            return response
        for group_id, state, members in listed:
            response.groups.add(group_id=group_id, state=state.value, members=members)
        return response

    async def DescribeGroups(
        self,
        request: broker_pb2.DescribeGroupsRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.DescribeGroupsRequest, broker_pb2.DescribeGroupsResponse
        ],
    ) -> broker_pb2.DescribeGroupsResponse:
        coordinator = self._group_coordinator()
        response = broker_pb2.DescribeGroupsResponse()
        for group_id in request.group_ids:
            entry = response.groups.add(group_id=group_id)
            found = (
                coordinator
                if isinstance(coordinator, Refusal)
                else coordinator.describe_group(group_id)
            )
            if isinstance(found, Refusal):
                entry.error_code, entry.error_message = int(found.code), found.message
                continue
            entry.state = group_state(found).value
            entry.group_epoch = found.group_epoch
            entry.assignor = found.assignor
            for member in sorted(found.members.values(), key=lambda m: m.member_id):
                described = entry.members.add(
                    member_id=member.member_id,
                    instance_id=member.instance_id or "",
                    client_id=member.client_id,
                    client_host=member.client_host,
                    member_epoch=member.member_epoch,
                )
                for tp in sorted(member.assigned):
                    described.assignment.add(topic=tp.topic, partition=tp.partition)
        return response

    async def DeleteGroups(
        self,
        request: broker_pb2.DeleteGroupsRequest,
        context: grpc.aio.ServicerContext[
            broker_pb2.DeleteGroupsRequest, broker_pb2.DeleteGroupsResponse
        ],
    ) -> broker_pb2.DeleteGroupsResponse:
        if request.timeout_ms < 0 or request.timeout_ms > REQUEST_TIMEOUT_MS_MAX:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"timeout_ms must be in [0, {REQUEST_TIMEOUT_MS_MAX}], got {request.timeout_ms}",
            )
        coordinator = self._group_coordinator()
        response = broker_pb2.DeleteGroupsResponse()
        for group_id in request.group_ids:
            refusal = (
                coordinator
                if isinstance(coordinator, Refusal)
                else await coordinator.delete_group(group_id, timeout_ms=request.timeout_ms)
            )
            entry = response.results.add(group_id=group_id)
            if refusal is not None:
                entry.error_code, entry.error_message = int(refusal.code), refusal.message
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

    async def CreatePartitions(
        self,
        request: controller_pb2.CreatePartitionsRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.CreatePartitionsRequest, controller_pb2.CreatePartitionsResponse
        ],
    ) -> controller_pb2.CreatePartitionsResponse:
        return await self._admin.create_partitions(request)

    async def DescribePartitionHistory(
        self,
        request: controller_pb2.DescribePartitionHistoryRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.DescribePartitionHistoryRequest,
            controller_pb2.DescribePartitionHistoryResponse,
        ],
    ) -> controller_pb2.DescribePartitionHistoryResponse:
        return await self._admin.describe_partition_history(request)

    async def DescribeQuorum(
        self,
        request: raft_pb2.DescribeQuorumRequest,
        context: grpc.aio.ServicerContext[
            raft_pb2.DescribeQuorumRequest, raft_pb2.DescribeQuorumResponse
        ],
    ) -> raft_pb2.DescribeQuorumResponse:
        return await self._admin.describe_quorum(request)

    async def CreateAcls(
        self,
        request: controller_pb2.CreateAclsRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.CreateAclsRequest, controller_pb2.CreateAclsResponse
        ],
    ) -> controller_pb2.CreateAclsResponse:
        return await self._admin.create_acls(request)

    async def DeleteAcls(
        self,
        request: controller_pb2.DeleteAclsRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.DeleteAclsRequest, controller_pb2.DeleteAclsResponse
        ],
    ) -> controller_pb2.DeleteAclsResponse:
        return await self._admin.delete_acls(request)

    async def DescribeAcls(
        self,
        request: controller_pb2.DescribeAclsRequest,
        context: grpc.aio.ServicerContext[
            controller_pb2.DescribeAclsRequest, controller_pb2.DescribeAclsResponse
        ],
    ) -> controller_pb2.DescribeAclsResponse:
        return await self._admin.describe_acls(request)


class ReplicaServicer(broker_pb2_grpc.ReplicaServiceServicer):
    """Follower fetches (leader side)."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metrics: BrokerMetrics,
        refusal: ReplicaFetchRefusal,
        fetch_max_bytes: int,
    ) -> None:
        self._replicas = replicas
        self._metrics = metrics
        self._refusal = refusal
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
        refused = self._refusal(request.replica_id, request.broker_epoch)
        if refused is not None:
            code, message = refused
            return _fetch_response(
                [
                    FetchResult(
                        topic=item.topic,
                        partition=item.partition,
                        error_code=code,
                        error_message=message,
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
            replica_epoch=request.broker_epoch,
        )
        self._metrics.fetch_requests.labels(kind="replica").inc()
        self._metrics.fetch_latency.labels(kind="replica").observe(time.perf_counter() - started)
        response = _fetch_response(results)
        self._metrics.replication_bytes_out.inc(sum(len(p.records) for p in response.partitions))
        return response


class ReplicaFetchRefusal(Protocol):
    def __call__(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, str] | None:
        """Why a replica fetch from `broker_id` at `broker_epoch` is refused as a whole,
        or None to serve it."""
        ...


def endpoint_message(broker_id: int, host: str, port: int, rack: str) -> common_pb2.BrokerEndpoint:
    return common_pb2.BrokerEndpoint(broker_id=broker_id, host=host, port=port, rack=rack)
