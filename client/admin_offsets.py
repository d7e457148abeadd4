"""Offset lookups for the admin client: `list_offsets`, asked of each partition's
leader and retried on retriable errors until the request timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Final

import grpc
import grpc.aio

from client.admin_args import topic_partitions
from client.admin_base import AdminBase
from client.admin_model import OffsetInfo, OffsetSpec
from client.errors import (
    KafkaConnectionError,
    MiniKafkaClientError,
    NoBrokersAvailable,
    from_response,
)
from client.records import TopicPartition
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2

#: ListOffsets timestamps that name the log start and the high watermark (the wire's).
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1


class OffsetAdmin(AdminBase):
    """`AsyncAdmin`'s `list_offsets`."""

    async def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: OffsetSpec = "latest"
    ) -> dict[TopicPartition, OffsetInfo]:
        """The offset `spec` names in each partition, asked of its leader: "earliest"
        (the log start offset), "latest" (the high watermark: the offset the next
        committed record gets) or a timestamp in ms (the first offset whose record's
        timestamp is at or after it; -1 when none is).

        Retriable errors (leader moving, metadata behind, a new leader whose high
        watermark is not known yet) are retried until the request timeout.
        """
        wanted = topic_partitions(partitions, "list_offsets()")
        if spec == "earliest":
            timestamp_ms = EARLIEST_TIMESTAMP
        elif spec == "latest":
            timestamp_ms = LATEST_TIMESTAMP
        elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            timestamp_ms = spec
        else:
            raise ValueError(
                f"list_offsets(): spec must be 'earliest', 'latest' or a timestamp in ms >= 0, "
                f"got {spec!r}"
            )
        deadline = self._conn.clock_s() + self.request_timeout_ms / 1000
        result: dict[TopicPartition, OffsetInfo] = {}
        pending = list(dict.fromkeys(wanted))
        while True:
            problems: dict[TopicPartition, MiniKafkaClientError] = {}
            view = await self._conn.fetch_view(sorted({tp.topic for tp in pending}))
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                info = view.partition(tp.topic, tp.partition)
                if info is None or info.leader < 0 or info.leader not in view.brokers:
                    problems[tp] = from_response(
                        ErrorCode.LEADER_NOT_AVAILABLE
                        if info is not None
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        context=f"list offsets of {tp.topic}-{tp.partition}",
                    )
                    continue
                by_leader.setdefault(info.leader, []).append(tp)
            for leader, tps in sorted(by_leader.items()):
                request = broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(
                            topic=tp.topic,
                            partition=tp.partition,
                            timestamp_ms=timestamp_ms,
                            current_leader_epoch=-1,
                        )
                        for tp in tps
                    ]
                )
                try:
                    reply = await self._conn.broker_stub(view.brokers[leader]).ListOffsets(
                        request, timeout=self._timeout_s
                    )
                except grpc.aio.AioRpcError as exc:
                    for tp in tps:
                        problems[tp] = KafkaConnectionError(
                            f"list offsets of {tp.topic}-{tp.partition}: leader {leader} "
                            f"{exc.code().name} {exc.details()}"
                        )
                    continue
                for part in reply.partitions:
                    tp = TopicPartition(part.topic, part.partition)
                    if part.error_code != ErrorCode.NONE:
                        problems[tp] = from_response(
                            part.error_code,
                            part.error_message,
                            context=f"list offsets of {tp.topic}-{tp.partition}",
                        )
                        continue
                    result[tp] = OffsetInfo(
                        offset=part.offset,
                        timestamp_ms=part.timestamp_ms,
                        leader_epoch=part.leader_epoch,
                        log_start_offset=part.log_start_offset,
                        high_watermark=part.high_watermark,
                        log_end_offset=part.log_end_offset,
                    )
            pending = [tp for tp in pending if tp not in result]
            if not pending:
                return {tp: result[tp] for tp in wanted}
            fatal = [p for p in problems.values() if not p.retriable]
            if fatal:
                raise fatal[0]
            if self._conn.clock_s() >= deadline:
                first = problems.get(pending[0])
                if first is not None:
                    raise first
                raise NoBrokersAvailable(f"list offsets: no answer for {pending[0]}")
            await asyncio.sleep(self.retry_backoff_ms / 1000)
