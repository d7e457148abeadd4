"""IsrReporter: proposes ISR changes of the partitions this broker leads to the controller.

Caller: ReplicaManager (expand proposals from follower fetches) and its own loop
(periodic shrink check). Affects: partitions' ISR state, via their AlterPartition results.

At most one change per partition is in flight (the partition's pending ISR state makes
sure of it); the outbox holds at most one item per partition, so it is bounded by the
number of led partitions. An unanswered proposal is resent after `resend_after_ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

import grpc

from broker.clock import Clock
from broker.replica.isr import AlterPartitionItem, AlterPartitionOutcome, AlterPartitionResult
from broker.replica.manager import ReplicaManager
from broker.replica.partition import Partition, Role
from broker.server.metrics import BrokerMetrics
from minikafka.errors import ErrorCode, code_from_wire
from minikafka.v1 import controller_pb2

logger = logging.getLogger(__name__)


class AlterPartitionSender(Protocol):
    registered: asyncio.Event

    async def alter_partition(
        self, items: list[controller_pb2.AlterPartitionItem]
    ) -> controller_pb2.AlterPartitionResponse: ...


class IsrReporter:
    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        sender: AlterPartitionSender,
        clock: Clock,
        metrics: BrokerMetrics,
        check_interval_ms: int,
        resend_after_ms: int = 2000,
    ) -> None:
        self._replicas = replicas
        self._sender = sender
        self._clock = clock
        self._metrics = metrics
        self._check_interval_ms = check_interval_ms
        self._resend_after_ms = resend_after_ms
        self._outbox: dict[tuple[str, int], tuple[Partition, AlterPartitionItem]] = {}
        self._wake = asyncio.Event()

    def propose(self, partition: Partition, item: AlterPartitionItem) -> None:
        """Queue a proposal (called synchronously from the fetch path)."""
        self._outbox[(partition.topic, partition.partition)] = (partition, item)
        self._wake.set()

    async def run(self) -> None:
        """Check for lagging followers and send proposals; runs until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._check_interval_ms / 1000)
            self._wake.clear()
            self._collect()
            if self._outbox and self._sender.registered.is_set():
                await self._send()

    def _collect(self) -> None:
        now_ms = self._clock.monotonic_ms()
        for partition in list(self._replicas.partitions.values()):
            if partition.role is not Role.LEADER:
                continue
            key = (partition.topic, partition.partition)
            item = partition.maybe_shrink()
            if item is not None:
                self._outbox[key] = (partition, item)
                continue
            pending = partition.pending_alter_partition()
            if (
                pending is not None
                and key not in self._outbox
                and now_ms - partition.last_alter_sent_ms >= self._resend_after_ms
            ):
                self._outbox[key] = (partition, pending)

    async def _send(self) -> None:
        batch = list(self._outbox.values())
        self._outbox.clear()
        now_ms = self._clock.monotonic_ms()
        for partition, _ in batch:
            partition.last_alter_sent_ms = now_ms
        request_items = [
            controller_pb2.AlterPartitionItem(
                topic=item.topic,
                partition=item.partition,
                leader_epoch=item.leader_epoch,
                partition_epoch=item.partition_epoch,
                new_isr=list(item.new_isr),
                new_isr_with_epochs=[
                    controller_pb2.IsrMember(broker_id=member, broker_epoch=epoch)
                    for member, epoch in item.new_isr_with_epochs
                ],
                leader_min_insync_replicas=item.leader_min_insync_replicas,
            )
            for _, item in batch
        ]
        try:
            response = await self._sender.alter_partition(request_items)
        except grpc.aio.AioRpcError as exc:
            logger.warning(
                "AlterPartition failed: %s %s; will resend", exc.code().name, exc.details()
            )
            return
        request_code = code_from_wire(response.error_code)
        by_key = {(r.topic, r.partition): r for r in response.partitions}
        for partition, item in batch:
            found = by_key.get((item.topic, item.partition))
            if request_code is not ErrorCode.NONE or found is None:
                result = AlterPartitionResult(
                    error_code=request_code
                    if request_code is not ErrorCode.NONE
                    else ErrorCode.UNKNOWN_SERVER_ERROR
                )
            else:
                result = AlterPartitionResult(
                    error_code=code_from_wire(found.error_code),
                    leader_epoch=found.leader_epoch,
                    isr=frozenset(found.isr),
                    partition_epoch=found.partition_epoch,
                )
            before = len(partition.isr)
            outcome = partition.on_alter_partition_result(item, result)
            if outcome is AlterPartitionOutcome.COMMITTED:
                after = len(partition.isr)
                if after < before:
                    self._metrics.isr_shrinks.inc()
                elif after > before:
                    self._metrics.isr_expands.inc()
