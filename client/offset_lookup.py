"""ListOffsets for the consumer: log start offsets, high watermarks and offsets by
timestamp, from each partition's leader.

`lookup_once` asks every leader once and reports offsets and errors per partition;
`lookup` retries the retriable errors (a leader that moved, or OFFSET_NOT_AVAILABLE from
a new leader whose high watermark is not yet at the start of its epoch, KIP-207) with
back-off, refreshing metadata, until `request_timeout_ms`, then raises the last error
(or why the partition cannot be found).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

import grpc
import grpc.aio

from client.errors import KafkaConnectionError, MiniKafkaClientError, from_response
from client.offset_rules import missing_partition_error
from client.records import OffsetAndTimestamp, TopicPartition
from client.transport import BrokerConnections
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2

Found = dict[TopicPartition, OffsetAndTimestamp]


class OffsetLookup:
    """ListOffsets through `conn` (retries: `retry_backoff_ms`, until `request_timeout_ms`;
    `clock`: monotonic seconds)."""

    def __init__(
        self,
        conn: BrokerConnections,
        *,
        request_timeout_ms: float,
        retry_backoff_ms: float,
        clock: Callable[[], float],
    ) -> None:
        self.conn = conn
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.clock = clock

    async def lookup(self, wanted: Mapping[TopicPartition, int]) -> Found:
        """The answer for each of `wanted` (partition -> EARLIEST, LATEST or a timestamp
        in ms), retrying retriable errors until the request timeout; raises the first
        definite error, or why the rest could not be found."""
        deadline = self.clock() + self.request_timeout_ms / 1000
        remaining = {TopicPartition(tp.topic, tp.partition): ts for tp, ts in wanted.items()}
        found: Found = {}
        last_error: BaseException | None = None
        while remaining:
            got, errors = await self.lookup_once(remaining)
            for tp, answer in got.items():
                found[tp] = answer
                del remaining[tp]
            for error in errors.values():
                if isinstance(error, MiniKafkaClientError) and not error.retriable:
                    raise error
                last_error = error
            if not remaining:
                break
            if self.clock() >= deadline:
                raise missing_partition_error(self.conn.view, remaining, last_error)
            with contextlib.suppress(KafkaConnectionError):
                await self.conn.refresh({tp.topic for tp in remaining})
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        return found

    async def lookup_once(
        self, wanted: Mapping[TopicPartition, int]
    ) -> tuple[Found, dict[TopicPartition, BaseException]]:
        """One ListOffsets per leader of `wanted`: (answers, errors by partition).
        Partitions without a known leader are in neither."""
        conn = self.conn
        found: Found = {}
        errors: dict[TopicPartition, BaseException] = {}
        view = conn.view
        if any(view.leader(*tp) is None for tp in wanted):
            with contextlib.suppress(KafkaConnectionError):
                await conn.refresh({tp.topic for tp in wanted})
            view = conn.view
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            leader = view.leader(*tp)
            if leader is not None:
                by_leader.setdefault(leader.broker_id, []).append(tp)
        for broker_id, tps in by_leader.items():
            request = broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(
                        topic=tp.topic,
                        partition=tp.partition,
                        timestamp_ms=wanted[tp],
                        current_leader_epoch=self.leader_epoch(tp),
                    )
                    for tp in tps
                ]
            )
            try:
                response = await conn.broker_stub(view.brokers[broker_id]).ListOffsets(
                    request, timeout=conn.timeout_s
                )
            except grpc.aio.AioRpcError as exc:
                error = KafkaConnectionError(
                    f"ListOffsets to broker {broker_id}: {exc.code().name} {exc.details()}"
                )
                errors.update(dict.fromkeys(tps, error))
                continue
            for part in response.partitions:
                tp = TopicPartition(part.topic, part.partition)
                if tp not in wanted:
                    continue
                if part.error_code == ErrorCode.NONE:
                    found[tp] = OffsetAndTimestamp(
                        part.offset, part.timestamp_ms, part.leader_epoch
                    )
                else:
                    errors[tp] = from_response(
                        part.error_code,
                        part.error_message,
                        context=f"ListOffsets {tp.topic}-{tp.partition}",
                    )
        return found, errors

    def leader_epoch(self, tp: TopicPartition) -> int:
        info = self.conn.view.partition(tp.topic, tp.partition)
        return info.leader_epoch if info is not None else -1
