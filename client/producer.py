"""The producer facade: `AsyncProducer` (asyncio) and `Producer` (sync, on a private loop
thread).

`send()` places a record (`client.appender`: murmur2 for keys, sticky otherwise) in its
partition's open batch of the `RecordAccumulator` and returns a `FutureRecordMetadata`;
`send_batch()` places the records of one call a batch at a time and returns one
`FutureBatchMetadata`. The `Sender` task (`client.sender`) drains ready batches, sends
them and applies the PURE response policy (`client.produce_policy`); idempotence
bookkeeping is `client.sequences`; `client.producer_runtime` connects and starts the
sender and waits for metadata or buffer space when an append lacks them. Retriable
errors are retried with back-off until `delivery_timeout_ms`, refreshing metadata first
when the error says the leader moved; definite errors fail only the affected batch's
records.

Idempotence (default with acks=all): a producer id and epoch from `InitProducerId`, a
sequence per partition, at most `max_in_flight_requests_per_connection` (<= 5) batches
in flight per partition, retries resent with their original sequence and in sequence
order; DUPLICATE_SEQUENCE_NUMBER means "already written" and counts as success.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from client.accumulator import RecordAccumulator, monotonic_ms
from client.appender import BatchPlan, Headers, RecordAppender, Serializer
from client.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    ProducerClosedError,
    check_config_keys,
)
from client.futures import FutureBatchMetadata, FutureRecordMetadata
from client.loop_thread import LoopThread
from client.metrics import ProducerMetrics
from client.partitioner import Partitioner
from client.producer_config import (
    DEFAULT_BATCH_SIZE,
    ProducerConfig,
    parse_acks,
    topic_batch_size,
)
from client.producer_runtime import start_sender, wait_for_append
from client.records import RecordMetadata
from client.security import client_tls
from client.sender import Sender
from client.sequences import SequenceTracker
from client.transport import BrokerConnections, ClientPorts

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "AsyncProducer",
    "Producer",
    "parse_acks",
    "topic_batch_size",
]


class AsyncProducer:
    """asyncio producer. `await start()` (or `async with`), `await send(...)`,
    `await send_batch(...)`, `await send_and_wait(...)`, `await flush()`, `await stop()`.

    Example::

        async with AsyncProducer(bootstrap_servers="127.0.0.1:9092") as producer:
            md = await producer.send_and_wait("orders", b"hello", key=b"k1")
            fut = await producer.send("orders", b"later")   # queued; await fut for metadata
            many = await producer.send_batch("orders", [b"a", b"b", b"c"])
            offsets = [m.offset for m in await many]
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        client_id: str = "minikafka-python",
        acks: int | str = -1,
        linger_ms: int = 5,
        batch_size: int = DEFAULT_BATCH_SIZE,
        buffer_memory: int = 64 << 20,
        max_request_size: int = 8 << 20,
        retries: int | None = None,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        max_block_ms: int = 60_000,
        metadata_max_age_ms: int = 300_000,
        enable_idempotence: bool | None = None,
        max_in_flight_requests_per_connection: int = 5,
        compression_type: str | None = None,
        partitioner: Partitioner | None = None,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_check_hostname: bool = True,
        ports: ClientPorts | None = None,
    ) -> None:
        """`ports` (`client.transport.ClientPorts`; None: production's): the stub factory
        and monotonic clock every request, deadline and timer of the producer uses."""
        self._tls = client_tls(
            security_protocol=security_protocol,
            ssl_cafile=ssl_cafile,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            ssl_check_hostname=ssl_check_hostname,
        )
        self.config = config = ProducerConfig.create(
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            buffer_memory=buffer_memory,
            max_request_size=max_request_size,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            max_block_ms=max_block_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            enable_idempotence=enable_idempotence,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            compression_type=compression_type,
        )
        self._ports = ports
        #: Monotonic milliseconds for the sender, the accumulator and the metrics
        #: (tests may replace it before `start()`): the `ports` clock when given.
        self.clock: Callable[[], float] = monotonic_ms if ports is None else ports.clock_ms
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self.accumulator = RecordAccumulator(
            batch_size=config.batch_size, buffer_memory=config.buffer_memory
        )
        self.appender = RecordAppender(
            accumulator=self.accumulator,
            max_request_size=config.max_request_size,
            partitioner=partitioner,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            wake=self._wake_sender,
            refusal=self._refusal,
        )
        self.sequences = SequenceTracker(
            enabled=config.idempotent, max_in_flight=config.max_in_flight
        )
        self._conn: BrokerConnections | None = None
        self._sender: Sender | None = None
        self._metrics: ProducerMetrics | None = None
        self._started = False
        self._closing = False
        self._closed = False

    @property
    def acks(self) -> int:
        return self.config.acks

    @property
    def idempotent(self) -> bool:
        return self.config.idempotent

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, fetch metadata and (when idempotent) a producer id; start sending."""
        if self._closed:
            raise ProducerClosedError("the producer was stopped; create a new one")
        if self._started:
            return
        self.accumulator.clock = self.clock
        self._metrics = ProducerMetrics(self.clock())
        conn, sender = await start_sender(
            config=self.config,
            clock=self.clock,
            bootstrap_servers=self._bootstrap,
            client_id=self._client_id,
            tls=self._tls,
            accumulator=self.accumulator,
            sequences=self.sequences,
            metrics=self._metrics,
            ports=self._ports,
        )
        self._conn = conn
        self._sender = sender
        self.appender.conn = conn
        sender.on_crash = self._refuse_appends
        sender.start()
        self._started = True

    async def flush(self) -> None:
        """Send everything buffered now and wait until each of those records is done
        (bound it with `asyncio.timeout` if needed)."""
        self._check_started()
        assert self._sender is not None
        await self._sender.flush(None)

    async def stop(self, flush_timeout_s: float | None = None) -> None:
        """Flush (up to `flush_timeout_s` seconds), then close. Records still unsent fail."""
        if self._closed or not self._started:
            self._closed = True
            self._refuse_appends()
            return
        sender = self._sender
        assert sender is not None
        assert self._conn is not None
        self._closing = sender.closing = True
        self._refuse_appends()
        try:
            await sender.flush(flush_timeout_s)
        except KafkaTimeoutError:
            logger.warning("producer closed with unsent records after %s s", flush_timeout_s)
        finally:
            self._closed = True
            await sender.close()
            await self._conn.close()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _check_started(self) -> None:
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed")
        if not self._started:
            raise IllegalStateError("call `await producer.start()` first")

    def _refusal(self) -> BaseException:
        """Why appends are refused (closed, or the sender crashed)."""
        fatal = self._sender.fatal if self._sender is not None else None
        if fatal is not None and not (self._closing or self._closed):
            error = IllegalStateError(f"the producer failed: {fatal}")
            error.__cause__ = fatal
            return error
        return ProducerClosedError("the producer is closed")

    def _refuse_appends(self) -> None:
        self.appender.refused = True

    def _wake_sender(self) -> None:
        if self._sender is not None:
            self._sender.wake_threadsafe()

    # ---- send -----------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Headers = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue a record; returns an awaitable of its `RecordMetadata`.

        Waits (up to `max_block_ms`) for topic metadata and for buffer space.
        """
        self._check_started()
        deadline = self.clock() + self.config.max_block_ms
        while True:
            outcome = self.appender.try_append(topic, value, key, partition, headers, timestamp_ms)
            if isinstance(outcome, FutureRecordMetadata):
                return outcome
            await self._wait_for(outcome, topic, deadline)

    async def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Headers] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureBatchMetadata:
        """Queue many records with one call; returns one future (also awaitable) of the
        list of their `RecordMetadata`, in the order of `values`.

        `keys` and `headers`, when given, hold one item per value (None for none). The
        records are placed as `send()` would place them one by one (murmur2 for keys,
        the sticky partition otherwise, or `partition`), with the same idempotence,
        ordering and error handling, but checked, sized and appended a batch at a time
        (no per-record future). Every record is checked before any is queued; a bad one
        raises and queues nothing. Waits (up to `max_block_ms`) for metadata and for
        buffer space, as `send()`.
        """
        self._check_started()
        deadline = self.clock() + self.config.max_block_ms
        plan = await self._plan(topic, values, keys, headers, partition, timestamp_ms, deadline)
        return await self.complete_batch(plan, deadline)

    async def _plan(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Headers] | None,
        partition: int | None,
        timestamp_ms: int | None,
        deadline: float,
    ) -> BatchPlan:
        while True:
            plan = self.appender.plan_batch(topic, values, keys, headers, partition, timestamp_ms)
            if isinstance(plan, BatchPlan):
                return plan
            await self._wait_for(plan, topic, deadline)

    async def complete_batch(self, plan: BatchPlan, deadline: float) -> FutureBatchMetadata:
        """Append the rest of `plan`, waiting for buffer space until `deadline` (clock
        ms); its future once every record is queued."""
        while not self.appender.fill(plan):
            await self._wait_for("buffer", plan.topic, deadline)
        return plan.future()

    async def _wait_for(self, what: str, topic: str, deadline: float) -> None:
        """Wait for what an append lacked (see `client.producer_runtime`)."""
        assert self._sender is not None
        assert self._conn is not None
        await wait_for_append(
            what, topic, deadline, self.clock, self.config.max_block_ms, self._sender, self._conn
        )

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Headers = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        future = await self.send(topic, value, key, partition, headers, timestamp_ms)
        return await future

    # ---- introspection ----------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        self._check_started()
        assert self._conn is not None
        return await self._conn.wait_for_topic(topic, int(self.config.max_block_ms))

    def metrics(self) -> dict[str, dict[str, float]]:
        """kafka-python's `metrics()`: `{"producer-metrics": {name: value}}` with records
        and bytes sent (totals and per second over the last 30 s), requests and their
        latency (ms), retried and failed records."""
        if self._metrics is None:
            return {"producer-metrics": {}}
        return {"producer-metrics": self._metrics.report(self.clock())}


class Producer:
    """Synchronous producer (kafka-python style); runs an `AsyncProducer` on a private
    event loop thread.

    Example::

        with Producer(bootstrap_servers="127.0.0.1:9092", acks="all") as producer:
            future = producer.send("orders", b"hello", key=b"k1")
            metadata = future.result(timeout=10)  # RecordMetadata(topic, partition, offset...)
            many = producer.send_batch("orders", [b"a", b"b"]).result(timeout=10)
            producer.flush()
    """

    def __init__(self, bootstrap_servers: str | Sequence[str] = "localhost:9092", **config: Any):
        check_config_keys("Producer", config, AsyncProducer.__init__)
        self._thread = LoopThread(
            "minikafka-producer",
            closed_error=lambda: ProducerClosedError("the producer is closed"),
        )
        try:
            self._inner: AsyncProducer = self._thread.run(self._make(bootstrap_servers, config))
        except BaseException:
            self._thread.stop()
            raise
        self._try_append = self._inner.appender.try_append
        self._closed = False

    @staticmethod
    async def _make(
        bootstrap_servers: str | Sequence[str], config: dict[str, Any]
    ) -> AsyncProducer:
        producer = AsyncProducer(bootstrap_servers, **config)
        await producer.start()
        return producer

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Headers = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue a record; returns a future with `.result(timeout)` / `.get(timeout)`.

        Blocks up to `max_block_ms` when topic metadata is missing or the buffer is full.
        """
        outcome = self._try_append(topic, value, key, partition, headers, timestamp_ms)
        if isinstance(outcome, FutureRecordMetadata):
            return outcome
        inner = self._inner
        return self._thread.run(
            inner.send(topic, value, key, partition, headers, timestamp_ms),
            inner.config.max_block_ms / 1000 + 1,
        )

    def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Headers] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureBatchMetadata:
        """Queue many records with one call; returns one future of the list of their
        `RecordMetadata` (in the order of `values`). See `AsyncProducer.send_batch`."""
        inner = self._inner
        deadline = inner.clock() + inner.config.max_block_ms
        plan = inner.appender.plan_batch(topic, values, keys, headers, partition, timestamp_ms)
        timeout_s = inner.config.max_block_ms / 1000 + 1
        if not isinstance(plan, BatchPlan):
            return self._thread.run(
                inner.send_batch(topic, values, keys, headers, partition, timestamp_ms),
                timeout_s,
            )
        if inner.appender.fill(plan):
            return plan.future()
        return self._thread.run(inner.complete_batch(plan, deadline), timeout_s)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait (at most `timeout` s) until it is done."""
        inner = self._inner
        inner._check_started()
        assert inner._sender is not None
        self._thread.run(inner._sender.flush(timeout))

    def partitions_for(self, topic: str) -> list[int]:
        return self._thread.run(self._inner.partitions_for(topic))

    def metrics(self) -> dict[str, dict[str, float]]:
        """See `AsyncProducer.metrics`."""
        return self._inner.metrics()

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._inner.stop(timeout))
        finally:
            self._thread.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
