"""Produce requests: one gRPC call per group of batches bound for one leader.

`RequestSender` builds the request, bounds it by the batches' delivery timeout, waits
for the answer (giving up early on a leader that stopped answering and was replaced),
turns the answer, or the failure of the call, into one outcome per batch with the PURE
`client.produce_policy`, and hands each to the `BatchCompleter`. It also keeps the
request window of each broker: at most `max_in_flight` requests in flight, and only one
until the broker has answered on its current channel (gRPC does not keep concurrent calls
in order while a channel connects).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

import grpc
import grpc.aio

from client.batch import BatchResult, ProducerBatch
from client.completion import BatchCompleter
from client.metadata import BrokerInfo
from client.metrics import ProducerMetrics
from client.produce_policy import (
    PartitionAnswer,
    RetryRules,
    TransportFailure,
    on_partition_response,
    on_transport_failure,
    transport_failure,
)
from client.producer_config import ProducerConfig
from client.sequences import SequenceTracker
from client.transport import BrokerConnections, LeaderMoved, await_unless_moved
from minikafka.errors import INVALID_METADATA_CODES
from minikafka.v1 import broker_pb2

logger = logging.getLogger(__name__)

#: The Produce deadline is the broker-side `timeout_ms` plus this (transfer, queueing).
PRODUCE_DEADLINE_MARGIN_S: Final = 2.0
#: A Produce outstanding this long starts metadata checks for a moved leader.
PRODUCE_STALL_S: Final = 0.5


class RequestSender:
    """Produce requests of one producer and the request window of each broker."""

    def __init__(
        self,
        *,
        config: ProducerConfig,
        conn: BrokerConnections,
        completer: BatchCompleter,
        sequences: SequenceTracker,
        metrics: ProducerMetrics,
        rules: RetryRules,
        clock: Callable[[], float],
        refresh_metadata: Callable[[], None],
        wake: Callable[[], None],
        closed: Callable[[], bool],
    ) -> None:
        self.config = config
        self.conn = conn
        self.completer = completer
        self.sequences = sequences
        self.metrics = metrics
        self.rules = rules
        self.clock = clock
        self.refresh_metadata = refresh_metadata
        self.wake = wake
        self.closed = closed
        #: Requests in flight (tasks), and their count per broker.
        self.tasks: set[asyncio.Task[None]] = set()
        self._in_flight: dict[int, int] = {}
        #: Brokers that answered a Produce on the current channel.
        self._warm: set[int] = set()

    def window_open(self, broker_id: int) -> bool:
        """Whether another request may go to `broker_id` now."""
        limit = self.config.max_in_flight if broker_id in self._warm else 1
        return self._in_flight.get(broker_id, 0) < limit

    def start(self, broker_id: int, batches: list[ProducerBatch]) -> None:
        """Send `batches` to `broker_id` in one request (a task)."""
        # Counted now, not when the task first runs, so the next drain sees it.
        self._in_flight[broker_id] = self._in_flight.get(broker_id, 0) + 1
        self._spawn(self._send(broker_id, batches))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, broker_id: int, batches: list[ProducerBatch]) -> None:
        try:
            await self._produce(broker_id, batches)
        finally:
            self._in_flight[broker_id] -= 1
            self.wake()

    def _transport_failed(
        self, batch: ProducerBatch, failure: TransportFailure, detail: str
    ) -> None:
        completer = self.completer
        completer.apply(
            batch,
            on_transport_failure(
                completer.answered(batch),
                failure,
                detail,
                self.clock(),
                self.rules,
                closed=self.closed(),
            ),
        )

    async def _produce(self, broker_id: int, batches: list[ProducerBatch]) -> None:
        """One Produce request to `broker_id` for `batches`; every batch ends up done,
        queued again or waiting for the next epoch."""
        view = self.conn.view
        broker = view.brokers.get(broker_id)
        if broker is None:
            for batch in batches:
                self._transport_failed(
                    batch, TransportFailure.LEADER_GONE, f"broker {broker_id} left the cluster"
                )
            return
        parts = []
        for batch in batches:
            info = view.partition(batch.tp.topic, batch.tp.partition)
            parts.append(
                broker_pb2.PartitionProduceData(
                    topic=batch.tp.topic,
                    partition=batch.tp.partition,
                    records=batch.payload or b"",
                    current_leader_epoch=info.leader_epoch if info is not None else -1,
                )
            )
        config = self.config
        request = broker_pb2.ProduceRequest(
            acks=config.acks, timeout_ms=int(config.request_timeout_ms), partitions=parts
        )
        # A request never outlives its batches' delivery timeout (as Kafka expires
        # in-flight batches): past it they fail, whatever the broker does later.
        started = self.clock()
        delivery_left_s = (
            min(b.created_ms for b in batches) + config.delivery_timeout_ms - started
        ) / 1000
        timeout_s = max(
            0.001,
            min(config.request_timeout_ms / 1000 + PRODUCE_DEADLINE_MARGIN_S, delivery_left_s),
        )
        self.metrics.requests.record(1, started)
        if config.acks == 0:
            await self._send_without_acks(broker_id, broker, request, batches, timeout_s)
            return
        conn = self.conn
        sent_epochs = [
            (batch.tp, part.current_leader_epoch)
            for batch, part in zip(batches, parts, strict=True)
        ]
        try:
            response = await await_unless_moved(
                conn.broker_stub(broker).Produce(request, timeout=timeout_s),
                expected_s=PRODUCE_STALL_S,
                moved=lambda: conn.view.leader_moved(sent_epochs),
                refresh=self.refresh_metadata,
            )
        except LeaderMoved:
            self._warm.discard(broker_id)
            for batch in batches:
                self._transport_failed(
                    batch,
                    TransportFailure.LEADER_MOVED,
                    f"broker {broker_id} stopped answering and lost the leadership of "
                    f"{batch.tp.topic}-{batch.tp.partition}",
                )
            return
        except grpc.aio.AioRpcError as exc:
            self._warm.discard(broker_id)
            failure = transport_failure(exc.code())
            detail = f"Produce to broker {broker_id} failed: {exc.code().name}"
            if failure in (
                TransportFailure.REFUSED,
                TransportFailure.DENIED,
                TransportFailure.OTHER,
            ):
                detail += f" {exc.details()}"
            for batch in batches:
                self._transport_failed(batch, failure, detail)
            return
        now = self.clock()
        self.metrics.latency.record(now - started, now)
        self._warm.add(broker_id)
        self._answered(broker_id, batches, response, now)

    def _answered(
        self,
        broker_id: int,
        batches: list[ProducerBatch],
        response: broker_pb2.ProduceResponse,
        now: float,
    ) -> None:
        completer = self.completer
        by_tp = {(p.topic, p.partition): p for p in response.partitions}
        for batch in batches:
            result = by_tp.get((batch.tp.topic, batch.tp.partition))
            if result is None:
                self._transport_failed(
                    batch,
                    TransportFailure.NOT_ANSWERED,
                    f"broker {broker_id} did not answer for {batch.tp}",
                )
                continue
            answer = PartitionAnswer(
                error_code=result.error_code,
                error_message=result.error_message,
                base_offset=result.base_offset,
                log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset,
                indefinite=result.indefinite,
            )
            completer.apply(
                batch,
                on_partition_response(
                    completer.answered(batch),
                    answer,
                    now,
                    self.rules,
                    closed=self.closed(),
                    epoch_bump_pending=self.sequences.bump_pending,
                    earlier_pending=functools.partial(self._earlier_pending, batch),
                ),
            )

    def _earlier_pending(self, batch: ProducerBatch) -> bool:
        """A batch of the same partition with a lower sequence was in flight when `batch`
        was sent (its answer may have been read first), or is not done yet."""
        return batch.sent_behind or any(
            other is not batch
            and other.tp == batch.tp
            and 0 <= other.base_sequence < batch.base_sequence
            for other in self.completer.accumulator.incomplete()
        )

    async def _send_without_acks(
        self,
        broker_id: int,
        broker: BrokerInfo,
        request: broker_pb2.ProduceRequest,
        batches: list[ProducerBatch],
        timeout_s: float,
    ) -> None:
        """acks=0, as in Kafka: a record is done once its request is on its way, with
        no offset (-1) and no retry; nothing the broker answers reaches the caller."""
        call = self.conn.broker_stub(broker).Produce(request, timeout=timeout_s)
        # The records are done now, but their partitions stay busy until the call ends:
        # the next batch of a partition must not overtake this one on its way.
        sequences = self.completer.sequences
        on_its_way = object()
        for batch in batches:
            sequences.sent(batch.tp, on_its_way)
            batch.sent = False
            self.completer.finish_ok(batch, BatchResult(-1, -1, -1))
        try:
            response = await call
        except grpc.aio.AioRpcError as exc:
            self._warm.discard(broker_id)
            logger.warning("acks=0 Produce to broker %s failed: %s", broker_id, exc.code().name)
            self.refresh_metadata()
            return
        finally:
            for batch in batches:
                sequences.answered(batch.tp, on_its_way)
        self._warm.add(broker_id)
        if any(p.error_code in INVALID_METADATA_CODES for p in response.partitions):
            self.refresh_metadata()
