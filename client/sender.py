"""The producer's sender task: drains ready batches, sends them, applies the answers.

The loop (`run`) expires batches past `delivery_timeout_ms`, bumps the producer epoch
when the sequence tracker asks for it, drains at most one ready batch per partition that
may be sent now (the leader is known, the broker's request window and the partition's
idempotence window have room), encodes each with one `build_batch_from_rows` call,
groups them by leader into Produce requests and keeps several requests in flight.

The requests themselves are `client.produce_request`; what an answer means for a batch
is decided by `client.produce_policy` (PURE) and carried out by `client.completion`.
Idempotence bookkeeping lives in `client.sequences`. Time comes from the injected
`clock` (monotonic milliseconds), so tests can stand it still.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

import grpc
import grpc.aio

from client.accumulator import RecordAccumulator
from client.batch import ProducerBatch
from client.completion import BatchCompleter
from client.errors import (
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MiniKafkaClientError,
    ProducerClosedError,
    from_response,
)
from client.metrics import ProducerMetrics
from client.produce_policy import RetryRules
from client.produce_request import RequestSender
from client.producer_config import ProducerConfig
from client.sequences import SequenceTracker
from client.transport import BrokerConnections
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch_from_rows
from minikafka.v1 import controller_pb2

logger = logging.getLogger(__name__)

#: Longest sleep of the sender loop with nothing to do.
IDLE_WAIT_MS: Final = 1000.0


class Sender:
    """The background task of one producer; lives on the producer's event loop."""

    def __init__(
        self,
        *,
        config: ProducerConfig,
        conn: BrokerConnections,
        accumulator: RecordAccumulator,
        sequences: SequenceTracker,
        metrics: ProducerMetrics,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.conn = conn
        self.accumulator = accumulator
        self.sequences = sequences
        self.metrics = metrics
        self.clock = clock
        self.rules = RetryRules(
            retries=config.retries,
            retry_backoff_ms=config.retry_backoff_ms,
            delivery_timeout_ms=config.delivery_timeout_ms,
        )
        self.loop = asyncio.get_running_loop()
        self.wakeup = asyncio.Event()
        self.closing = False
        self.closed = False
        #: Why the loop crashed (a bug); sends fail with it from then on.
        self.fatal: BaseException | None = None
        #: Called when the loop crashed.
        self.on_crash: Callable[[], None] = lambda: None
        self._task: asyncio.Task[None] | None = None
        self._metadata_task: asyncio.Task[None] | None = None
        #: While a batch waits for a leader: when to ask for metadata again (clock ms).
        self._leaderless_refresh_at = 0.0
        self.completer = BatchCompleter(
            accumulator=accumulator,
            sequences=sequences,
            metrics=metrics,
            rules=self.rules,
            clock=clock,
            refresh_metadata=self._refresh_metadata,
        )
        #: Set whenever a batch is done (buffer memory was released).
        self.space_freed = self.completer.space_freed
        self.requests = RequestSender(
            config=config,
            conn=conn,
            completer=self.completer,
            sequences=sequences,
            metrics=metrics,
            rules=self.rules,
            clock=clock,
            refresh_metadata=self._refresh_metadata,
            wake=self.wake,
            closed=lambda: self.closed,
        )

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="minikafka-producer-sender")

    async def init_producer_id(self) -> None:
        """Get a producer id (or the next epoch of ours) from any broker, retrying
        retriable errors for `request_timeout_ms`."""
        conn = self.conn
        tracker = self.sequences
        request = controller_pb2.InitProducerIdRequest(
            producer_id=tracker.producer_id, producer_epoch=tracker.producer_epoch
        )
        errors: list[str] = []
        deadline = self.clock() + self.config.request_timeout_ms
        while True:
            for address in conn.any_stub_addresses():
                try:
                    response = await conn.stub(address).InitProducerId(
                        request, timeout=conn.timeout_s
                    )
                except grpc.aio.AioRpcError as exc:
                    errors.append(f"{address}: {exc.code().name} {exc.details()}")
                    continue
                if response.error_code == ErrorCode.NONE:
                    tracker.new_epoch(response.producer_id, response.producer_epoch)
                    logger.info(
                        "producer id %s epoch %s", tracker.producer_id, tracker.producer_epoch
                    )
                    return
                error = from_response(response.error_code, context="InitProducerId")
                if not error.retriable:
                    raise error
                errors.append(f"{address}: {error}")
            if self.clock() >= deadline:
                raise KafkaConnectionError(
                    "cannot get a producer id for the idempotent producer "
                    "(pass enable_idempotence=False to produce without one): "
                    + "; ".join(errors[-3:])
                )
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def flush(self, limit_s: float | None) -> None:
        """Send everything buffered now and wait (at most `limit_s`) until it is done."""
        deadline = None if limit_s is None else self.loop.time() + limit_s
        pending = self.accumulator.incomplete()
        if pending:
            self.accumulator.flushing += 1
            self.wake()
            try:
                waiters = [b.aio_future() for b in pending]
                _done, not_done = await asyncio.wait(waiters, timeout=limit_s)
                if not_done:
                    raise KafkaTimeoutError(
                        f"flush: {len(not_done)} batches not done after {limit_s} s"
                    )
            finally:
                self.accumulator.flushing -= 1
        if self.config.acks == 0 and self.requests.tasks:
            # acks=0 records are done once their request is on its way; flush (and so
            # close) also waits for those requests, or closing would cancel them.
            left = None if deadline is None else max(0.0, deadline - self.loop.time())
            _sent, unsent = await asyncio.wait(list(self.requests.tasks), timeout=left)
            if unsent:
                raise KafkaTimeoutError(
                    f"flush: {len(unsent)} acks=0 requests still on their way after {limit_s} s"
                )

    async def close(self) -> None:
        """Fail what is left (the caller flushed first) and stop every task."""
        self.closed = True
        self.wake()
        for batch in self.accumulator.incomplete():
            self.completer.fail(batch, ProducerClosedError("producer closed before delivery"))
        tasks = [t for t in (self._task, self._metadata_task) if t is not None]
        tasks.extend(self.requests.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def wake(self) -> None:
        self.wakeup.set()

    def wake_threadsafe(self) -> None:
        """`wake` from any thread (the sync `Producer` appends from user threads)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.wakeup.set()
        else:
            self.loop.call_soon_threadsafe(self.wakeup.set)

    # ---- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        config = self.config
        try:
            while not self.closed:
                now = self.clock()
                self.completer.expire(now)
                if self.sequences.bump_pending and self.sequences.ready_for_bump(
                    next_batch_maybe_written=any(
                        b.payload is not None and b.maybe_written for b in self.accumulator.heads()
                    )
                ):
                    await self._bump_epoch()
                drained = self.accumulator.drain(
                    now, config.linger_ms, self._can_send, force=self.closing
                )
                if drained.batches:
                    self._dispatch(drained.batches, now)
                view = self.conn.view
                leaderless = [tp for tp in drained.blocked if view.leader(*tp) is None]
                if (
                    leaderless and now >= self._leaderless_refresh_at
                ) or self.conn.metadata_stale():
                    # At most one refresh per back-off for a missing leader: each answer
                    # wakes this loop, which would otherwise ask again at once.
                    self._leaderless_refresh_at = now + config.retry_backoff_ms
                    self._refresh_metadata()
                self.wakeup.clear()
                next_ms = min(
                    drained.next_ready_ms,
                    self.accumulator.next_expiry_ms(config.delivery_timeout_ms) + 1.0,
                )
                wait_ms = max(0.0, min(next_ms - self.clock(), IDLE_WAIT_MS))
                if leaderless:
                    wait_ms = min(wait_ms, float(config.retry_backoff_ms))
                if drained.batches:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wakeup.wait(), wait_ms / 1000)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: fail every record rather than hang them
            logger.exception("producer sender crashed")
            self.fatal = exc
            self.on_crash()
            for batch in self.accumulator.incomplete():
                self.completer.fail(batch, IllegalStateError(f"producer sender crashed: {exc!r}"))
            raise

    def _can_send(self, batch: ProducerBatch) -> bool:
        tp = batch.tp
        leader = self.conn.view.leader(tp.topic, tp.partition)
        if leader is None:
            return False
        if not self.requests.window_open(leader.broker_id):
            return False
        return self.sequences.may_send(
            tp, sequenced=batch.payload is not None, maybe_written=batch.maybe_written
        )

    async def _bump_epoch(self) -> None:
        try:
            await self.init_producer_id()
        except MiniKafkaClientError as exc:
            logger.warning("cannot bump the producer epoch yet: %s", exc)
            return
        for batch in self.accumulator.queued():
            if batch.payload is not None:
                batch.payload = None
                batch.base_sequence = -1
                batch.maybe_written = False

    # ---- sending ------------------------------------------------------------------------

    def _dispatch(self, batches: list[ProducerBatch], now: float) -> None:
        by_broker: dict[int, list[ProducerBatch]] = {}
        for batch in batches:
            self._encode(batch)
            batch.attempts += 1
            batch.sent = True
            leader = self.conn.view.leader(batch.tp.topic, batch.tp.partition)
            assert leader is not None  # checked by _can_send
            by_broker.setdefault(leader.broker_id, []).append(batch)
            # Batches of a partition are sent in sequence order: whatever is in flight
            # has a lower sequence.
            batch.sent_behind = self.sequences.in_flight(batch.tp) > 0
            self.sequences.sent(batch.tp, batch)
            if batch.attempts > 1:
                self.metrics.retries.record(batch.record_count, now)
            else:
                self.metrics.records.record(batch.record_count, now)
                self.metrics.bytes.record(len(batch.payload or b""), now)
        for broker_id, group in by_broker.items():
            request: list[ProducerBatch] = []
            size = 0
            for batch in group:
                assert batch.payload is not None
                if request and size + len(batch.payload) > self.config.max_request_size:
                    self.requests.start(broker_id, request)
                    request, size = [], 0
                request.append(batch)
                size += len(batch.payload)
            if request:
                self.requests.start(broker_id, request)

    def _encode(self, batch: ProducerBatch) -> None:
        if batch.payload is not None:
            return
        config = self.config
        if config.idempotent:
            tracker = self.sequences
            sequence = tracker.assign(batch.tp, batch.record_count)
            batch.base_sequence = sequence
            batch.producer_epoch = tracker.producer_epoch
            batch.payload = build_batch_from_rows(
                batch.records,
                first_timestamp_ms=batch.first_timestamp_ms,
                compression=config.compression,
                producer_id=tracker.producer_id,
                producer_epoch=tracker.producer_epoch,
                base_sequence=sequence,
            )
        else:
            batch.payload = build_batch_from_rows(
                batch.records,
                first_timestamp_ms=batch.first_timestamp_ms,
                compression=config.compression,
            )

    # ---- metadata -----------------------------------------------------------------------

    def _refresh_metadata(self) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = asyncio.create_task(self._refresh())

    async def _refresh(self) -> None:
        try:
            await self.conn.refresh()
        except KafkaConnectionError as exc:
            logger.warning("metadata refresh failed: %s", exc)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        self.wake()
