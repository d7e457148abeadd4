"""The producer: `AsyncProducer` (asyncio) and `Producer` (sync, on a private loop thread).

`send()` partitions a record (murmur2 for keys, sticky otherwise), appends it to the
partition's open batch in the `RecordAccumulator` and returns a `FutureRecordMetadata`.
A sender task drains ready batches, encodes each with one `build_batch` call (with the
producer id, epoch and sequence when idempotent), groups them by leader into Produce
requests, and keeps several requests in flight. Retriable errors are retried with
back-off until `delivery_timeout_ms`, refreshing metadata first when the error says the
leader moved; definite errors fail only the affected batch's records.

Idempotence (default with acks=all): a producer id and epoch from `InitProducerId`, a
sequence per partition, at most `max_in_flight_requests_per_connection` (<= 5) batches
in flight per partition, retries resent with their original sequence and in sequence
order; DUPLICATE_SEQUENCE_NUMBER means "already written" and counts as success.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final, Literal, NamedTuple

import grpc
import grpc.aio

from client.accumulator import (
    RECORD_OVERHEAD_BYTES,
    BatchResult,
    BufferFull,
    FutureRecordMetadata,
    ProducerBatch,
    RecordAccumulator,
)
from client.errors import (
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    MiniKafkaClientError,
    ProducerClosedError,
    check_config_keys,
    from_response,
)
from client.loop_thread import LoopThread
from client.metadata import ClusterView
from client.partitioner import DefaultPartitioner, Partitioner
from client.records import RecordMetadata, TopicPartition
from client.transport import (
    BrokerConnections,
    LeaderMoved,
    await_unless_moved,
    check_number,
    check_topic_name,
    is_connection_error,
)
from minikafka.errors import INVALID_METADATA_CODES, RETRIABLE_CODES, ErrorCode
from minikafka.record_batch import HEADER_SIZE, Compression, build_batch_from_rows
from minikafka.v1 import broker_pb2, controller_pb2

logger = logging.getLogger(__name__)

Serializer = Callable[[Any], bytes | None]
Headers = Sequence[tuple[str, bytes]] | None

#: Bytes of records per batch (estimated). Each batch is one acks=all round trip of the
#: replication pipeline, so large batches are what carry throughput; 1 MiB plus the
#: batch header stays within the broker's default `max.message.bytes` (1 MiB + 1 KiB).
DEFAULT_BATCH_SIZE: Final = 1 << 20
MAX_IN_FLIGHT_IDEMPOTENT: Final = 5
#: The Produce deadline is the broker-side `timeout_ms` plus this (transfer, queueing).
PRODUCE_DEADLINE_MARGIN_S: Final = 2.0
#: A Produce outstanding this long starts metadata checks for a moved leader.
PRODUCE_STALL_S: Final = 0.5


class _TopicRoute(NamedTuple):
    """What `send()` needs to place a record of one topic, cached per metadata view."""

    view: ClusterView
    partitions: list[int]
    available: list[int]
    tps: dict[int, TopicPartition]
    batch_size: int


def topic_batch_size(batch_size: int, view: ClusterView, topic: str) -> int:
    """`batch_size`, lowered so a full batch fits the largest batch the brokers accept
    for the topic (its `max.message.bytes`, or the broker default they report); record
    sizes are estimated generously, see `estimate_size`."""
    info = view.topics.get(topic)
    if info is None:
        return batch_size
    override = info.configs.get("max.message.bytes")
    limit = int(override) if override is not None and override.isdigit() else 0
    limit = limit or info.max_message_bytes
    if limit <= 0:
        return batch_size
    return max(1, min(batch_size, limit - HEADER_SIZE))


def parse_acks(acks: int | str) -> int:
    """`all` / -1 / 0 / 1 -> the wire value."""
    if isinstance(acks, str):
        text = acks.strip().lower()
        if text == "all":
            return -1
        try:
            acks = int(text)
        except ValueError:
            raise ValueError(f"acks must be 0, 1, -1 or 'all', got {acks!r}") from None
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks must be 0, 1, -1 or 'all', got {acks!r}")
    return acks


def _now_ms() -> float:
    return time.monotonic() * 1000


def _header_pairs(headers: Any) -> tuple[list[tuple[str, bytes]], int]:
    """`headers` as a list of `(str, bytes)` pairs and their estimated size; a clear
    `TypeError` for anything else (a dict, a pair of the wrong shape)."""
    if isinstance(headers, str | bytes | dict) or not isinstance(headers, Sequence):
        raise TypeError(
            "headers must be a list of (str, bytes) pairs, e.g. [('trace-id', b'42')], got "
            f"{type(headers).__name__}"
        )
    pairs: list[tuple[str, bytes]] = []
    size = 0
    for pair in headers:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise TypeError(f"each header must be a (str, bytes) pair, got {pair!r}")
        name, data = pair
        if not isinstance(name, str) or not isinstance(data, bytes):
            raise TypeError(
                f"each header must be a (str, bytes) pair, got ({type(name).__name__}, "
                f"{type(data).__name__})"
            )
        size += len(name) + len(data) + 4
        pairs.append((name, data))
    return pairs, size


def _to_bytes(
    what: str, data: Any, serializer: Serializer | None
) -> bytes | None:  # kafka-python semantics
    if serializer is not None:
        data = serializer(data)
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(
        f"{what} must be bytes or None, got {type(data).__name__}; "
        f"pass {what}_serializer= to convert it (e.g. str.encode)"
    )


class AsyncProducer:
    """asyncio producer. `await start()` (or `async with`), `await send(...)`,
    `await send_and_wait(...)`, `await flush()`, `await stop()`.

    Example::

        async with AsyncProducer(bootstrap_servers="127.0.0.1:9092") as producer:
            md = await producer.send_and_wait("orders", b"hello", key=b"k1")
            fut = await producer.send("orders", b"later")   # queued; await fut for metadata
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
    ) -> None:
        self.acks = parse_acks(acks)
        for name, value, minimum in (
            ("linger_ms", linger_ms, 0),
            ("batch_size", batch_size, 1),
            ("buffer_memory", buffer_memory, 1),
            ("max_request_size", max_request_size, 1),
            ("retry_backoff_ms", retry_backoff_ms, 0),
            ("request_timeout_ms", request_timeout_ms, 1),
            ("delivery_timeout_ms", delivery_timeout_ms, 1),
            ("max_block_ms", max_block_ms, 0),
            ("metadata_max_age_ms", metadata_max_age_ms, 0),
        ):
            check_number(name, value, minimum=minimum)
        if retries is not None:
            check_number("retries", retries, minimum=0, integral=True)
        if enable_idempotence is None:
            enable_idempotence = self.acks == -1
        if enable_idempotence and self.acks != -1:
            raise ValueError("enable_idempotence=True requires acks='all' (-1)")
        if enable_idempotence and not 1 <= max_in_flight_requests_per_connection <= 5:
            raise ValueError(
                "enable_idempotence=True requires max_in_flight_requests_per_connection <= 5"
            )
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be >= 1")
        if batch_size <= 0 or buffer_memory < batch_size:
            raise ValueError("need 0 < batch_size <= buffer_memory")
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError(
                "delivery_timeout_ms must be >= linger_ms + request_timeout_ms "
                f"({delivery_timeout_ms} < {linger_ms} + {request_timeout_ms})"
            )
        self.compression = Compression.parse(compression_type)
        self.idempotent = enable_idempotence
        self.linger_ms = linger_ms
        self.max_request_size = max_request_size
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.max_block_ms = max_block_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self._metadata_max_age_ms = metadata_max_age_ms
        self._user_partitioner = partitioner
        self._partitioner = DefaultPartitioner()
        self._sticky = self._partitioner.sticky
        #: No serializers: bytes keys and values are appended as they are.
        self._plain = key_serializer is None and value_serializer is None
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self.accumulator = RecordAccumulator(batch_size=batch_size, buffer_memory=buffer_memory)
        self._append = self.accumulator.append
        self._conn: BrokerConnections | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._space_freed: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False
        self._closing = False
        self._closed = False
        # idempotence state
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._retrying: set[TopicPartition] = set()
        self._epoch_bump_pending = False
        self._in_flight_requests: dict[int, int] = {}
        #: Brokers that answered a Produce on the current channel. gRPC does not keep
        #: concurrent calls in order (calls queued while a channel connects go out in
        #: any order), so a broker gets one request at a time until it has answered one.
        self._warm_brokers: set[int] = set()
        #: Partitions with a batch acknowledged under the current producer epoch. Until
        #: then a partition has one batch in flight: a leader that does not know the
        #: producer accepts any sequence, so a later batch overtaking the first one
        #: would be written before it.
        self._confirmed: set[TopicPartition] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._topic_cache: dict[str, _TopicRoute] = {}
        self._fatal: BaseException | None = None

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, fetch metadata and (when idempotent) a producer id; start sending."""
        if self._closed:
            raise ProducerClosedError("the producer was stopped; create a new one")
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._space_freed = asyncio.Event()
        self._conn = BrokerConnections(
            self._bootstrap,
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            metadata_max_age_ms=self._metadata_max_age_ms,
            client_id=self._client_id,
        )
        try:
            await self._conn.refresh()
            if self.idempotent:
                await self._init_producer_id()
        except BaseException:
            await self._conn.close()
            raise
        self._sender = asyncio.create_task(self._run_sender(), name="minikafka-producer-sender")
        self._started = True

    async def _init_producer_id(self) -> None:
        assert self._conn is not None
        request = controller_pb2.InitProducerIdRequest(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch
        )
        errors: list[str] = []
        deadline = _now_ms() + self.request_timeout_ms
        while True:
            for address in self._conn.any_stub_addresses():
                try:
                    response = await self._conn.stub(address).InitProducerId(
                        request, timeout=self._conn.timeout_s
                    )
                except grpc.aio.AioRpcError as exc:
                    errors.append(f"{address}: {exc.code().name} {exc.details()}")
                    continue
                if response.error_code == ErrorCode.NONE:
                    self.producer_id = response.producer_id
                    self.producer_epoch = response.producer_epoch
                    self._next_sequence.clear()
                    self._confirmed.clear()
                    logger.info("producer id %s epoch %s", self.producer_id, self.producer_epoch)
                    return
                error = from_response(response.error_code, context="InitProducerId")
                if not error.retriable:
                    raise error
                errors.append(f"{address}: {error}")
            if _now_ms() >= deadline:
                raise KafkaConnectionError(
                    "cannot get a producer id for the idempotent producer "
                    "(pass enable_idempotence=False to produce without one): "
                    + "; ".join(errors[-3:])
                )
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def flush(self) -> None:
        """Send everything buffered now and wait until each of those records is done
        (bound it with `asyncio.timeout` if needed)."""
        self._check_started()
        await self._flush(None)

    async def _flush(self, limit_s: float | None) -> None:
        deadline = None if limit_s is None else time.monotonic() + limit_s
        pending = self.accumulator.incomplete()
        if pending:
            self.accumulator.flushing += 1
            self._wake()
            try:
                waiters = [b.aio_future() for b in pending]
                _done, not_done = await asyncio.wait(waiters, timeout=limit_s)
                if not_done:
                    raise KafkaTimeoutError(
                        f"flush: {len(not_done)} batches not done after {limit_s} s"
                    )
            finally:
                self.accumulator.flushing -= 1
        if self.acks == 0 and self._tasks:
            # acks=0 records are done once their request is on its way; flush (and so
            # close) also waits for those requests, or closing would cancel them.
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            _sent, unsent = await asyncio.wait(list(self._tasks), timeout=left)
            if unsent:
                raise KafkaTimeoutError(
                    f"flush: {len(unsent)} acks=0 requests still on their way after {limit_s} s"
                )

    async def stop(self, flush_timeout_s: float | None = None) -> None:
        """Flush (up to `flush_timeout_s` seconds), then close. Records still unsent fail."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closing = True
        try:
            await self._flush(flush_timeout_s)
        except KafkaTimeoutError:
            logger.warning("producer closed with unsent records after %s s", flush_timeout_s)
        finally:
            self._closed = True
            self._wake()
            for batch in self.accumulator.incomplete():
                self._fail(batch, ProducerClosedError("producer closed before delivery"))
            if self._sender is not None:
                self._sender.cancel()
                await asyncio.gather(self._sender, return_exceptions=True)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._conn is not None:
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

    # ---- send -----------------------------------------------------------------------

    def _check_started(self) -> None:
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed")
        if not self._started:
            raise IllegalStateError("call `await producer.start()` first")

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
        assert self._conn is not None
        assert self._space_freed is not None
        deadline = _now_ms() + self.max_block_ms
        while True:
            outcome = self.try_append(topic, value, key, partition, headers, timestamp_ms)
            if isinstance(outcome, FutureRecordMetadata):
                return outcome
            remaining_ms = deadline - _now_ms()
            if remaining_ms <= 0:
                raise KafkaTimeoutError(
                    f"send blocked longer than max_block_ms={self.max_block_ms} ({outcome})"
                )
            if outcome == "metadata":
                await self._conn.wait_for_topic(topic, int(remaining_ms))
            else:
                self._space_freed.clear()
                self._wake()
                try:
                    await asyncio.wait_for(self._space_freed.wait(), remaining_ms / 1000)
                except TimeoutError:
                    continue

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

    def try_append(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Headers,
        timestamp_ms: int | None,
    ) -> FutureRecordMetadata | Literal["metadata", "buffer"]:
        """Append without waiting: the record's future, or why it must wait. Thread-safe
        (the sync `Producer` calls it from user threads)."""
        if self._closing or self._closed:
            raise ProducerClosedError("the producer is closed")
        if self._fatal is not None:
            raise IllegalStateError(f"the producer failed: {self._fatal}") from self._fatal
        # Per-record work is what bounds a Python producer: plain bytes without
        # serializers or headers (the common case) take the shortest path.
        if self._plain and type(value) is bytes and (key is None or type(key) is bytes):
            size = RECORD_OVERHEAD_BYTES + len(value) + (0 if key is None else len(key))
        else:
            if self._key_serializer is not None or not (key is None or type(key) is bytes):
                key = _to_bytes("key", key, self._key_serializer)
            if self._value_serializer is not None or not (value is None or type(value) is bytes):
                value = _to_bytes("value", value, self._value_serializer)
            size = RECORD_OVERHEAD_BYTES
            if key is not None:
                size += len(key)
            if value is not None:
                size += len(value)
        if headers:
            headers, header_bytes = _header_pairs(headers)
            size += header_bytes
        else:
            headers = None
        if size > self.max_request_size:
            raise MessageSizeTooLargeError(
                f"record of ~{size} bytes exceeds max_request_size={self.max_request_size}"
            )
        try:
            route = self._topic_cache.get(topic)
        except TypeError:  # unhashable: no topic name (check_topic_name says so)
            route = None
        if route is None or route.view is not self._conn.view:  # type: ignore[union-attr]
            check_topic_name(topic)
            route = self._route(topic)
            if route is None:
                return "metadata"
        if partition is None:
            if self._user_partitioner is not None:
                partition = self._user_partitioner(key, route.partitions, route.available)
            elif key is None:
                partition = self._sticky.get(topic)
                if partition is None:
                    partition = self._partitioner(topic, key, route.partitions, route.available)
            else:
                partition = self._partitioner(topic, key, route.partitions, route.available)
        tp = route.tps.get(partition)
        if tp is None:
            if isinstance(partition, bool) or not isinstance(partition, int):
                raise TypeError(
                    f"partition must be an int or None, got {type(partition).__name__} "
                    f"{partition!r}"
                )
            raise ValueError(
                f"partition {partition} of {topic!r} does not exist (partitions {route.partitions})"
            )
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            raise TypeError(
                "timestamp_ms must be an int >= 0 (milliseconds since the epoch) or None, got "
                f"{type(timestamp_ms).__name__} {timestamp_ms!r}"
            )
        try:
            future, wake = self._append(
                tp, timestamp_ms, key, value, headers, size, None, route.batch_size
            )
        except BufferFull:
            return "buffer"
        if wake:
            if key is None and self._user_partitioner is None and future._index > 0:
                self._partitioner.on_new_batch(topic, partition, route.partitions, route.available)
            self._wake_threadsafe()
        return future

    def _conn_view(self) -> ClusterView:
        assert self._conn is not None
        return self._conn.view

    def _route(self, topic: str) -> _TopicRoute | None:
        """The cached partitions of `topic` under the current view (None: unknown)."""
        view = self._conn_view()
        found = view.partitions_for(topic)
        if found is None:
            return None
        cached = self._topic_cache.get(topic)
        if cached is not None and cached.partitions != found:
            self._partitioner.reset(topic)
        route = _TopicRoute(
            view=view,
            partitions=found,
            available=view.available_partitions(topic),
            tps={p: TopicPartition(topic, p) for p in found},
            batch_size=topic_batch_size(self.accumulator.batch_size, view, topic),
        )
        self._topic_cache[topic] = route
        return route

    # ---- sender ---------------------------------------------------------------------

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _wake_threadsafe(self) -> None:
        loop = self._loop
        if loop is None or self._wakeup is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wakeup.set()
        else:
            loop.call_soon_threadsafe(self._wakeup.set)

    def _can_send(self, batch: ProducerBatch) -> bool:
        assert self._conn is not None
        tp = batch.tp
        leader = self._conn.view.leader(tp.topic, tp.partition)
        if leader is None:
            return False
        limit = self.max_in_flight if leader.broker_id in self._warm_brokers else 1
        if self._in_flight_requests.get(leader.broker_id, 0) >= limit:
            return False
        if not self.idempotent:
            return True
        if self._epoch_bump_pending and not (batch.payload is not None and batch.maybe_written):
            # Only a batch that may have been written is resent under the old epoch (to
            # learn whether it was); every other batch waits for the new epoch.
            return False
        in_flight = len(self._in_flight.get(tp, ()))
        if tp in self._retrying or tp not in self._confirmed:
            return in_flight == 0
        return in_flight < min(self.max_in_flight, MAX_IN_FLIGHT_IDEMPOTENT)

    async def _run_sender(self) -> None:
        assert self._wakeup is not None
        assert self._conn is not None
        try:
            while not self._closed:
                now = _now_ms()
                self._expire(now)
                if self._epoch_bump_pending and self._ready_for_epoch_bump():
                    await self._bump_epoch()
                drained = self.accumulator.drain(
                    now, self.linger_ms, self._can_send, force=self._closing
                )
                if drained.batches:
                    self._dispatch(drained.batches, now)
                view = self._conn.view
                leaderless = [tp for tp in drained.blocked if view.leader(*tp) is None]
                if leaderless or self._conn.metadata_stale():
                    self._maybe_refresh_metadata(leaderless)
                self._wakeup.clear()
                next_ms = min(
                    drained.next_ready_ms,
                    self.accumulator.next_expiry_ms(self.delivery_timeout_ms) + 1.0,
                )
                wait_ms = max(0.0, min(next_ms - _now_ms(), 1000.0))
                if leaderless:
                    wait_ms = min(wait_ms, float(self.retry_backoff_ms))
                if drained.batches:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), wait_ms / 1000)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: fail every record rather than hang them
            logger.exception("producer sender crashed")
            self._fatal = exc
            for batch in self.accumulator.incomplete():
                self._fail(batch, IllegalStateError(f"producer sender crashed: {exc!r}"))
            raise

    def _ready_for_epoch_bump(self) -> bool:
        """Nothing in flight, and no partition's next batch may have been written.

        Queues are in sequence order and the leader appends a producer's batches in
        sequence order, so every batch behind one that was definitely not written was
        not written either: those are re-sequenced under the new epoch."""
        if any(self._in_flight.values()):
            return False
        return not any(b.payload is not None and b.maybe_written for b in self.accumulator.heads())

    async def _bump_epoch(self) -> None:
        try:
            await self._init_producer_id()
        except MiniKafkaClientError as exc:
            logger.warning("cannot bump the producer epoch yet: %s", exc)
            return
        for batch in self.accumulator.queued():
            if batch.payload is not None:
                batch.payload = None
                batch.base_sequence = -1
                batch.maybe_written = False
        self._retrying.clear()
        self._epoch_bump_pending = False

    def _dispatch(self, batches: list[ProducerBatch], now: float) -> None:
        assert self._conn is not None
        by_broker: dict[int, list[ProducerBatch]] = {}
        for batch in batches:
            self._encode(batch)
            batch.attempts += 1
            leader = self._conn.view.leader(batch.tp.topic, batch.tp.partition)
            assert leader is not None  # checked by _can_send
            by_broker.setdefault(leader.broker_id, []).append(batch)
            if self.idempotent:
                self._in_flight.setdefault(batch.tp, []).append(batch)
        for broker_id, group in by_broker.items():
            request: list[ProducerBatch] = []
            size = 0
            for batch in group:
                assert batch.payload is not None
                if request and size + len(batch.payload) > self.max_request_size:
                    self._start_request(broker_id, request)
                    request, size = [], 0
                request.append(batch)
                size += len(batch.payload)
            if request:
                self._start_request(broker_id, request)

    def _start_request(self, broker_id: int, batches: list[ProducerBatch]) -> None:
        # Counted now, not when the task first runs, so the next drain sees it.
        self._in_flight_requests[broker_id] = self._in_flight_requests.get(broker_id, 0) + 1
        self._spawn(self._send_request(broker_id, batches))

    def _encode(self, batch: ProducerBatch) -> None:
        if batch.payload is not None:
            return
        if self.idempotent:
            sequence = self._next_sequence.get(batch.tp, 0)
            batch.base_sequence = sequence
            batch.producer_epoch = self.producer_epoch
            self._next_sequence[batch.tp] = (sequence + batch.record_count) & 0x7FFFFFFF
            batch.payload = build_batch_from_rows(
                batch.records,
                first_timestamp_ms=batch.first_timestamp_ms,
                compression=self.compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=sequence,
            )
        else:
            batch.payload = build_batch_from_rows(
                batch.records,
                first_timestamp_ms=batch.first_timestamp_ms,
                compression=self.compression,
            )

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_request(self, broker_id: int, batches: list[ProducerBatch]) -> None:
        assert self._conn is not None
        try:
            await self._send_request_inner(broker_id, batches)
        finally:
            self._in_flight_requests[broker_id] -= 1
            self._wake()

    async def _send_request_inner(self, broker_id: int, batches: list[ProducerBatch]) -> None:
        assert self._conn is not None
        view = self._conn.view
        broker = view.brokers.get(broker_id)
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
        request = broker_pb2.ProduceRequest(
            acks=self.acks, timeout_ms=self.request_timeout_ms, partitions=parts
        )
        if broker is None:
            for batch in batches:
                self._retry_or_fail(
                    batch, KafkaConnectionError(f"broker {broker_id} left the cluster")
                )
            return
        # A request never outlives its batches' delivery timeout (as Kafka expires
        # in-flight batches): past it they fail, whatever the broker does later.
        delivery_left_s = (
            min(b.created_ms for b in batches) + self.delivery_timeout_ms - _now_ms()
        ) / 1000
        timeout_s = max(
            0.001, min(self.request_timeout_ms / 1000 + PRODUCE_DEADLINE_MARGIN_S, delivery_left_s)
        )
        if self.acks == 0:
            await self._send_without_acks(broker_id, broker, request, batches, timeout_s)
            return
        conn = self._conn
        sent_epochs = [
            (batch.tp, part.current_leader_epoch)
            for batch, part in zip(batches, parts, strict=True)
        ]
        try:
            response = await await_unless_moved(
                self._conn.broker_stub(broker).Produce(request, timeout=timeout_s),
                expected_s=PRODUCE_STALL_S,
                moved=lambda: conn.view.leader_moved(sent_epochs),
                refresh=lambda: self._maybe_refresh_metadata(()),
            )
        except LeaderMoved:
            # Its leader was replaced (it is paused or cut off): what it may have written
            # is either replicated to the new leader (a retry is deduplicated) or will be
            # truncated, so resend now rather than after the request timeout.
            self._warm_brokers.discard(broker_id)
            for batch in batches:
                batch.maybe_written = True
                self._retry_or_fail(
                    batch,
                    KafkaConnectionError(
                        f"broker {broker_id} stopped answering and lost the leadership of "
                        f"{batch.tp.topic}-{batch.tp.partition}"
                    ),
                    backoff=False,
                )
            return
        except grpc.aio.AioRpcError as exc:
            self._warm_brokers.discard(broker_id)
            if not is_connection_error(exc) and exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                error: MiniKafkaClientError = IllegalStateError(
                    f"Produce to broker {broker_id} failed: {exc.code().name} {exc.details()}"
                )
                for batch in batches:
                    self._finish_failed(batch, error)
                return
            for batch in batches:
                batch.maybe_written = True
                self._retry_or_fail(
                    batch,
                    KafkaConnectionError(
                        f"Produce to broker {broker_id} failed: {exc.code().name}"
                    ),
                )
            self._maybe_refresh_metadata([b.tp for b in batches])
            return
        self._warm_brokers.add(broker_id)
        by_tp = {(p.topic, p.partition): p for p in response.partitions}
        refresh: list[TopicPartition] = []
        for batch in batches:
            result = by_tp.get((batch.tp.topic, batch.tp.partition))
            if result is None:
                self._finish_failed(
                    batch,
                    IllegalStateError(f"broker {broker_id} did not answer for {batch.tp}"),
                )
                continue
            code = int(result.error_code)
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                self._finish_ok(
                    batch,
                    BatchResult(
                        result.base_offset, result.log_append_time_ms, result.log_start_offset
                    ),
                )
                continue
            error = from_response(
                code, result.error_message, context=f"Produce {batch.tp.topic}-{batch.tp.partition}"
            )
            if code in INVALID_METADATA_CODES or code in (
                ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            ):
                # A leader that cannot replicate may have been replaced behind its back
                # (it is cut off from the controller): look again before retrying.
                refresh.append(batch.tp)
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._earlier_pending(batch):
                self._retry_or_fail(batch, error)
            elif code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._epoch_bump_pending:
                # Definitely not written: it waits (in sequence order) for the next epoch
                # and is re-sequenced then (`_bump_epoch`).
                self._remove_in_flight(batch)
                batch.maybe_written = False
                self.accumulator.reenqueue(batch, 0.0)
            elif code in RETRIABLE_CODES:
                if code in (
                    ErrorCode.REQUEST_TIMED_OUT,
                    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                ):
                    batch.maybe_written = True
                self._retry_or_fail(batch, error)
            else:
                self._finish_failed(batch, error)
        if refresh:
            self._maybe_refresh_metadata(refresh)

    async def _send_without_acks(
        self,
        broker_id: int,
        broker: Any,
        request: broker_pb2.ProduceRequest,
        batches: list[ProducerBatch],
        timeout_s: float,
    ) -> None:
        """acks=0, as in Kafka: a record is done once its request is on its way, with
        no offset (-1) and no retry; nothing the broker answers reaches the caller."""
        assert self._conn is not None
        call = self._conn.broker_stub(broker).Produce(request, timeout=timeout_s)
        for batch in batches:
            self._finish_ok(batch, BatchResult(-1, -1, -1))
        try:
            response = await call
        except grpc.aio.AioRpcError as exc:
            self._warm_brokers.discard(broker_id)
            logger.warning("acks=0 Produce to broker %s failed: %s", broker_id, exc.code().name)
            self._maybe_refresh_metadata([b.tp for b in batches])
            return
        self._warm_brokers.add(broker_id)
        if any(p.error_code in INVALID_METADATA_CODES for p in response.partitions):
            self._maybe_refresh_metadata([b.tp for b in batches])

    def _earlier_pending(self, batch: ProducerBatch) -> bool:
        for other in self.accumulator.incomplete():
            if (
                other is not batch
                and other.tp == batch.tp
                and 0 <= other.base_sequence < batch.base_sequence
            ):
                return True
        return False

    def _remove_in_flight(self, batch: ProducerBatch) -> None:
        in_flight = self._in_flight.get(batch.tp)
        if in_flight and batch in in_flight:
            in_flight.remove(batch)

    def _retry_or_fail(
        self, batch: ProducerBatch, error: MiniKafkaClientError, *, backoff: bool = True
    ) -> None:
        now = _now_ms()
        self._remove_in_flight(batch)
        out_of_time = now + self.retry_backoff_ms > batch.created_ms + self.delivery_timeout_ms
        out_of_retries = self.retries is not None and batch.attempts > self.retries
        if out_of_time or out_of_retries or self._closed:
            if out_of_time:
                earlier = batch.last_error
                error = KafkaTimeoutError(
                    f"{batch.tp.topic}-{batch.tp.partition}: not delivered within "
                    f"delivery_timeout_ms={self.delivery_timeout_ms}; last error: {error}"
                    + (f"; before that: {earlier}" if earlier and earlier != str(error) else "")
                )
            self._finish_failed(batch, error)
            return
        batch.last_error = str(error)
        logger.debug("retrying batch for %s after %s", batch.tp, error)
        if self.idempotent:
            self._retrying.add(batch.tp)
        self.accumulator.reenqueue(batch, now + self.retry_backoff_ms if backoff else 0.0)

    def _finish_ok(self, batch: ProducerBatch, result: BatchResult) -> None:
        self._remove_in_flight(batch)
        if self.idempotent and batch.producer_epoch == self.producer_epoch:
            self._confirmed.add(batch.tp)
        if batch.tp in self._retrying and not any(
            b.payload is not None and b.tp == batch.tp for b in self.accumulator.queued()
        ):
            self._retrying.discard(batch.tp)
        self.accumulator.release(batch)
        batch.complete(result)
        self._space_available()

    def _finish_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        self._remove_in_flight(batch)
        if self.idempotent and batch.payload is not None and batch.base_sequence >= 0:
            # The partition's sequence has a hole now: get a new epoch before reusing it.
            self._epoch_bump_pending = True
        self._fail(batch, error)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.accumulator.release(batch)
        batch.fail(error)
        self._space_available()

    def _space_available(self) -> None:
        if self._space_freed is not None:
            self._space_freed.set()

    def _expire(self, now: float) -> None:
        for batch in self.accumulator.pop_expired(now, self.delivery_timeout_ms):
            self._finish_failed(
                batch,
                KafkaTimeoutError(
                    f"{batch.tp.topic}-{batch.tp.partition}: {batch.record_count} records "
                    f"expired after delivery_timeout_ms={self.delivery_timeout_ms} "
                    "while queued (no leader?)"
                ),
            )

    def _maybe_refresh_metadata(self, tps: Sequence[TopicPartition]) -> None:
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = asyncio.create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        assert self._conn is not None
        try:
            await self._conn.refresh()
        except KafkaConnectionError as exc:
            logger.warning("metadata refresh failed: %s", exc)
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        self._wake()

    # ---- introspection ----------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        self._check_started()
        assert self._conn is not None
        return await self._conn.wait_for_topic(topic, self.max_block_ms)


class Producer:
    """Synchronous producer (kafka-python style); runs an `AsyncProducer` on a private
    event loop thread.

    Example::

        with Producer(bootstrap_servers="127.0.0.1:9092", acks="all") as producer:
            future = producer.send("orders", b"hello", key=b"k1")
            metadata = future.result(timeout=10)  # RecordMetadata(topic, partition, offset...)
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
        inner = self._inner
        outcome = inner.try_append(topic, value, key, partition, headers, timestamp_ms)
        if isinstance(outcome, FutureRecordMetadata):
            return outcome
        return self._thread.run(
            inner.send(topic, value, key, partition, headers, timestamp_ms),
            inner.max_block_ms / 1000 + 1,
        )

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait (at most `timeout` s) until it is done."""
        self._thread.run(self._inner._flush(timeout))

    def partitions_for(self, topic: str) -> list[int]:
        return self._thread.run(self._inner.partitions_for(topic))

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
