"""Per-partition record batching for the producer (thread-safe, no asyncio).

`send()` appends records to the open `ProducerBatch` of their partition; the sender
drains batches that are full, have lingered `linger_ms`, or are being flushed. Total
buffered bytes are bounded by `buffer_memory`; `append` raises `BufferFull` when a
record does not fit, and the caller waits for `release` to free space. Each batch has
one `concurrent.futures.Future`; a record's `FutureRecordMetadata` is (batch, index),
so no future exists per record.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

import msgspec

from client.errors import KafkaTimeoutError
from client.records import RecordMetadata, TopicPartition
from minikafka.record_batch import EncodableRow, TimestampType

#: Bytes counted per record on top of key, value and headers (msgpack framing, delta).
RECORD_OVERHEAD_BYTES = 16


def estimate_size(key: bytes | None, value: bytes | None, headers: Any) -> int:
    size = RECORD_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        for name, data in headers:
            size += len(name) + len(data) + 4
    return size


class BatchResult(NamedTuple):
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


class BufferFull(Exception):
    """Internal: the record does not fit in `buffer_memory` right now."""


class ProducerBatch:
    """Records bound for one partition, sent and acknowledged together."""

    __slots__ = (
        "_aio",
        "attempts",
        "base_sequence",
        "closed",
        "created_ms",
        "first_timestamp_ms",
        "future",
        "last_error",
        "maybe_written",
        "payload",
        "producer_epoch",
        "records",
        "retry_after_ms",
        "size_bytes",
        "tp",
    )

    def __init__(self, tp: TopicPartition, created_ms: float) -> None:
        self.tp = tp
        self.created_ms = created_ms
        #: Timestamp of the batch's first record; `records` hold deltas from it.
        self.first_timestamp_ms = 0
        self.records: list[EncodableRow] = []
        self.size_bytes = 0
        self.closed = False
        self.future: concurrent.futures.Future[BatchResult] = concurrent.futures.Future()
        #: The encoded batch, built once at first send and reused by retries.
        self.payload: bytes | None = None
        self.base_sequence = -1
        self.producer_epoch = -1
        self.attempts = 0
        self.retry_after_ms = 0.0
        #: A previous attempt may have been written (timeout, lost connection).
        self.maybe_written = False
        #: Why the previous attempt failed (kept for the delivery-timeout error).
        self.last_error: str | None = None
        self._aio: asyncio.Future[BatchResult] | None = None

    @property
    def record_count(self) -> int:
        return len(self.records)

    def done(self) -> bool:
        return self.future.done()

    def complete(self, result: BatchResult) -> None:
        if self.future.done():
            return
        self.future.set_result(result)
        if self._aio is not None and not self._aio.done():
            self._aio.set_result(result)

    def fail(self, error: BaseException) -> None:
        if self.future.done():
            return
        self.future.set_exception(error)
        if self._aio is not None and not self._aio.done():
            self._aio.set_exception(error)
            self._aio.exception()  # mark retrieved: per-record awaiters re-raise it

    def aio_future(self) -> asyncio.Future[BatchResult]:
        """An asyncio future of this batch on the running loop (created once)."""
        if self._aio is None:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[BatchResult] = loop.create_future()
            self._aio = fut

            def copy(src: concurrent.futures.Future[BatchResult]) -> None:
                def apply() -> None:
                    if fut.done():
                        return
                    exc = src.exception()
                    if exc is not None:
                        fut.set_exception(exc)
                        fut.exception()
                    else:
                        fut.set_result(src.result())

                loop.call_soon_threadsafe(apply)

            self.future.add_done_callback(copy)
        return self._aio


class FutureRecordMetadata(msgspec.Struct, eq=False):
    """The future of one sent record: `result(timeout)` / `get(timeout)` or `await`.

    Compatible with the `concurrent.futures.Future` API (`result`, `exception`,
    `done`, `add_done_callback`, ...) plus kafka-python's `get`, `succeeded`, `failed`,
    `add_callback`, `add_errback`. (A msgspec struct only because one is built per
    record and its constructor is C code; it is (batch, index), no future of its own.)
    """

    _batch: ProducerBatch
    _index: int

    def _metadata(self, result: BatchResult) -> RecordMetadata:
        batch = self._batch
        if result.log_append_time_ms >= 0:
            timestamp, ts_type = result.log_append_time_ms, int(TimestampType.LOG_APPEND_TIME)
        else:
            timestamp = batch.first_timestamp_ms + batch.records[self._index][0]
            ts_type = int(TimestampType.CREATE_TIME)
        offset = result.base_offset + self._index if result.base_offset >= 0 else -1
        return RecordMetadata(batch.tp.topic, batch.tp.partition, offset, timestamp, ts_type)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        future = self._batch.future
        try:
            return self._metadata(future.result(timeout))
        except concurrent.futures.TimeoutError:
            # On Python >= 3.11 this is the builtin TimeoutError, which the batch's own
            # KafkaTimeoutError (delivery timeout) also is: re-raise that one as it is.
            if future.done():
                raise
            raise KafkaTimeoutError(
                f"record not acknowledged within {timeout} s (it may still be delivered)"
            ) from None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """kafka-python's name for `result`."""
        return self.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.future.exception(timeout)

    def done(self) -> bool:
        return self._batch.future.done()

    @property
    def is_done(self) -> bool:
        return self._batch.future.done()

    def succeeded(self) -> bool:
        f = self._batch.future
        return f.done() and f.exception() is None

    def failed(self) -> bool:
        f = self._batch.future
        return f.done() and f.exception() is not None

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._batch.future.done()

    def cancel(self) -> bool:
        """Records cannot be taken back once handed to the producer."""
        return False

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], object]) -> None:
        self._batch.future.add_done_callback(lambda _f: fn(self))

    def add_callback(self, fn: Callable[[RecordMetadata], object]) -> FutureRecordMetadata:
        def on_done(f: concurrent.futures.Future[BatchResult]) -> None:
            if f.exception() is None:
                fn(self._metadata(f.result()))

        self._batch.future.add_done_callback(on_done)
        return self

    def add_errback(self, fn: Callable[[BaseException], object]) -> FutureRecordMetadata:
        def on_done(f: concurrent.futures.Future[BatchResult]) -> None:
            exc = f.exception()
            if exc is not None:
                fn(exc)

        self._batch.future.add_done_callback(on_done)
        return self

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        batch = self._batch
        if not batch.future.done():
            yield from asyncio.shield(batch.aio_future()).__await__()
        return self._metadata(batch.future.result())


class DrainResult(NamedTuple):
    batches: list[ProducerBatch]
    #: Monotonic ms at which some queued batch becomes ready (inf when none).
    next_ready_ms: float
    #: Partitions that had a ready batch but could not send (no leader, window full).
    blocked: list[TopicPartition]


class RecordAccumulator:
    def __init__(self, *, batch_size: int, buffer_memory: int) -> None:
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        #: The batch records of each partition are appended to (closed once drained).
        self._open: dict[TopicPartition, ProducerBatch] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._buffered_bytes = 0
        #: A lower bound of `created_ms` over queued batches (inf: none queued), so the
        #: sender scans for expired batches only when one may have expired.
        self._oldest_created_ms = float("inf")
        self.flushing = 0

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes

    def append(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
        size: int,
        now_ms: float | None,
        batch_size: int | None = None,
    ) -> tuple[FutureRecordMetadata, bool]:
        """Add a record to the open batch of `tp`; returns its future and whether the
        sender should be woken (a batch was created or filled). The record is stored as
        the row `build_batch_from_rows` encodes. `now_ms` (monotonic) is read from the
        clock when None, only if a batch is created; `batch_size` overrides the
        accumulator's for this topic. Raises `BufferFull`."""
        if batch_size is None:
            batch_size = self.batch_size
        lock = self._lock
        lock.acquire()  # (not `with`: this runs once per record, and `with` costs 2x)
        try:
            buffered = self._buffered_bytes + size
            batch = self._open.get(tp)
            if (
                batch is not None
                and not batch.closed
                and batch.size_bytes + size < batch_size
                and buffered <= self.buffer_memory
            ):  # fast path: room in the open batch and in the buffer
                records = batch.records
                records.append((timestamp_ms - batch.first_timestamp_ms, key, value, headers))
                batch.size_bytes += size
                self._buffered_bytes = buffered
                return FutureRecordMetadata(batch, len(records) - 1), False
            return self._append_slow(
                tp, timestamp_ms, key, value, headers, size, now_ms, batch_size
            )
        finally:
            lock.release()

    def _append_slow(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
        size: int,
        now_ms: float | None,
        batch_size: int,
    ) -> tuple[FutureRecordMetadata, bool]:
        """`append` when the open batch is full or missing (called with the lock held)."""
        buffered = self._buffered_bytes + size
        if buffered > self.buffer_memory and self._buffered_bytes > 0:
            raise BufferFull
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        wake = False
        batch = queue[-1] if queue else None
        if (
            batch is None
            or batch.closed
            or batch.payload is not None
            or (batch.size_bytes + size > batch_size and batch.records)
        ):
            if now_ms is None:
                now_ms = time.monotonic() * 1000
            fresh = ProducerBatch(tp, now_ms)
            fresh.first_timestamp_ms = timestamp_ms
            fresh.records.append((0, key, value, headers))  # before any shared state changes
            if batch is not None and not batch.closed:
                batch.closed = True
            batch = fresh
            queue.append(batch)
            self._oldest_created_ms = min(self._oldest_created_ms, now_ms)
            self._open[tp] = batch
            self._incomplete.add(batch)
            wake = True
        else:
            if not batch.records:
                batch.first_timestamp_ms = timestamp_ms
            batch.records.append((timestamp_ms - batch.first_timestamp_ms, key, value, headers))
        batch.size_bytes += size
        self._buffered_bytes += size
        if batch.size_bytes >= batch_size:
            batch.closed = True
            wake = True
        return FutureRecordMetadata(batch, len(batch.records) - 1), wake

    def wait_for_space(self, size: int, timeout_s: float) -> bool:
        """Block the calling (non-loop) thread until `size` bytes fit or time runs out."""
        with self._space:
            return self._space.wait_for(
                lambda: (
                    self._buffered_bytes + size <= self.buffer_memory or self._buffered_bytes == 0
                ),
                timeout_s,
            )

    def has_space(self, size: int) -> bool:
        return self._buffered_bytes + size <= self.buffer_memory or self._buffered_bytes == 0

    def drain(
        self,
        now_ms: float,
        linger_ms: float,
        can_send: Callable[[ProducerBatch], bool],
        *,
        force: bool = False,
    ) -> DrainResult:
        """Pop at most one ready batch per partition whose `can_send` allows it."""
        ready: list[ProducerBatch] = []
        blocked: list[TopicPartition] = []
        next_ready_ms = float("inf")
        with self._lock:
            flush = force or self.flushing > 0
            for tp, queue in self._queues.items():
                if not queue:
                    continue
                head = queue[0]
                if head.retry_after_ms > now_ms:
                    next_ready_ms = min(next_ready_ms, head.retry_after_ms)
                    continue
                is_ready = (
                    flush
                    or head.closed
                    or head.payload is not None
                    or len(queue) > 1
                    or now_ms - head.created_ms >= linger_ms
                )
                if not is_ready:
                    next_ready_ms = min(next_ready_ms, head.created_ms + linger_ms)
                    continue
                if not can_send(head):
                    blocked.append(tp)
                    continue
                queue.popleft()
                head.closed = True
                ready.append(head)
        return DrainResult(ready, next_ready_ms, blocked)

    def reenqueue(self, batch: ProducerBatch, retry_after_ms: float) -> None:
        """Put a batch back at the front of its partition's queue, keeping sequence order
        among batches that already carry a sequence."""
        with self._lock:
            batch.retry_after_ms = retry_after_ms
            queue = self._queues.setdefault(batch.tp, deque())
            index = 0
            if batch.base_sequence >= 0:
                while (
                    index < len(queue)
                    and queue[index].payload is not None
                    and 0 <= queue[index].base_sequence < batch.base_sequence
                ):
                    index += 1
            queue.insert(index, batch)
            self._oldest_created_ms = min(self._oldest_created_ms, batch.created_ms)

    def release(self, batch: ProducerBatch) -> None:
        """The batch is done (acknowledged or failed): free its memory."""
        with self._space:
            if batch in self._incomplete:
                self._incomplete.discard(batch)
                self._buffered_bytes -= batch.size_bytes
                self._space.notify_all()

    def incomplete(self) -> list[ProducerBatch]:
        with self._lock:
            return list(self._incomplete)

    def queued(self) -> list[ProducerBatch]:
        with self._lock:
            return [b for q in self._queues.values() for b in q]

    def heads(self) -> list[ProducerBatch]:
        """The next batch of every partition with a batch queued."""
        with self._lock:
            return [q[0] for q in self._queues.values() if q]

    def next_expiry_ms(self, delivery_timeout_ms: float) -> float:
        """When a queued batch may next pass `delivery_timeout_ms` (inf: none queued)."""
        return self._oldest_created_ms + delivery_timeout_ms

    def pop_expired(self, now_ms: float, delivery_timeout_ms: float) -> list[ProducerBatch]:
        """Remove and return the queued batches created more than `delivery_timeout_ms`
        before `now_ms`. Scans the queues only when one may have expired."""
        if now_ms - self._oldest_created_ms <= delivery_timeout_ms:
            # Read without the lock: only this (sender) thread moves the bound back
            # (`reenqueue`); appends only add newer batches.
            return []
        with self._lock:
            if now_ms - self._oldest_created_ms <= delivery_timeout_ms:
                return []
            expired: list[ProducerBatch] = []
            oldest = float("inf")
            for tp, queue in self._queues.items():
                if any(now_ms - b.created_ms > delivery_timeout_ms for b in queue):
                    kept: deque[ProducerBatch] = deque()
                    for b in queue:
                        (expired if now_ms - b.created_ms > delivery_timeout_ms else kept).append(b)
                    self._queues[tp] = queue = kept
                for b in queue:
                    oldest = min(oldest, b.created_ms)
            self._oldest_created_ms = oldest
            return expired

    def has_queued(self) -> bool:
        with self._lock:
            return any(self._queues.values())
