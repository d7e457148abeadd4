"""The follower's port to a leader broker: one replica fetch, in domain types.

Caller: `broker.replica.fetcher.ReplicaFetcher` (one endpoint per leader broker).
Implementations: `GrpcLeaderEndpoint` (production, the leader's `ReplicaService` over gRPC)
and in-memory ones in tests, which call a leader's `ReplicaManager.fetch` directly (Kafka's
`LeaderEndPoint` / `MockLeaderEndPoint` split). Nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import grpc
import msgspec

from broker.metadata_cache import BrokerInfo
from broker.replica.manager import FetchItem, FetchResult
from minikafka.errors import code_from_wire
from minikafka.grpc_options import channel_options
from minikafka.tls import TlsMaterial, open_channel
from minikafka.v1 import broker_pb2, broker_pb2_grpc

#: How much longer than the long-poll a fetch may take before the follower gives up on it.
RPC_MARGIN_S = 5.0


class ReplicaFetch(msgspec.Struct, frozen=True, kw_only=True):
    """One replica fetch: this follower's identity and, per partition, where it stands."""

    replica_id: int
    broker_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    items: tuple[FetchItem, ...]


class LeaderUnavailableError(Exception):
    """The fetch did not get an answer (connection refused or lost, deadline exceeded)."""


class LeaderEndpoint(Protocol):
    async def fetch(self, request: ReplicaFetch) -> Sequence[FetchResult]:
        """The leader's per-partition answers; raises `LeaderUnavailableError`."""
        ...

    async def close(self) -> None: ...


class GrpcLeaderEndpoint:
    """`LeaderEndpoint` over the leader's `ReplicaService.Fetch`."""

    def __init__(
        self,
        leader: BrokerInfo,
        tls: TlsMaterial | None = None,
        *,
        stub: broker_pb2_grpc.ReplicaServiceAsyncStub | None = None,
    ) -> None:
        """`stub`: the leader's ReplicaService (None, production: a gRPC channel to it; the
        simulator in tests/sim passes an in-memory stub, so this translation runs there
        too)."""
        self._channel: grpc.aio.Channel | None = None
        if stub is None:
            self._channel = open_channel(f"{leader.host}:{leader.port}", channel_options(), tls)
            stub = broker_pb2_grpc.ReplicaServiceStub(self._channel)
        self._stub = stub

    async def fetch(self, request: ReplicaFetch) -> list[FetchResult]:
        message = broker_pb2.ReplicaFetchRequest(
            replica_id=request.replica_id,
            broker_epoch=request.broker_epoch,
            max_wait_ms=request.max_wait_ms,
            min_bytes=request.min_bytes,
            max_bytes=request.max_bytes,
        )
        for item in request.items:
            message.partitions.add(
                topic=item.topic,
                partition=item.partition,
                fetch_offset=item.fetch_offset,
                current_leader_epoch=item.current_leader_epoch,
                last_fetched_epoch=item.last_fetched_epoch,
                partition_max_bytes=item.partition_max_bytes,
            )
        try:
            response = await self._stub.Fetch(
                message, timeout=request.max_wait_ms / 1000 + RPC_MARGIN_S
            )
        except grpc.aio.AioRpcError as exc:
            raise LeaderUnavailableError(f"{exc.code().name} {exc.details()}") from exc
        return [_result(part) for part in response.partitions]

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


def _result(part: broker_pb2.FetchPartitionResponse) -> FetchResult:
    diverging = part.diverging_epoch
    return FetchResult(
        topic=part.topic,
        partition=part.partition,
        error_code=code_from_wire(part.error_code),
        error_message=part.error_message,
        high_watermark=part.high_watermark,
        log_start_offset=part.log_start_offset,
        log_end_offset=part.log_end_offset,
        records=part.records,
        diverging_epoch=(
            (diverging.epoch, diverging.end_offset)
            if part.HasField("diverging_epoch") and diverging.epoch >= 0
            else None
        ),
        leader_epoch=part.leader_epoch,
    )
