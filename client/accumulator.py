"""Per-partition record batching for the producer (thread-safe, no asyncio).

`send()` appends records to the open `ProducerBatch` of their partition; the sender
drains batches that are full, have lingered `linger_ms`, or are being flushed. Total
buffered bytes are bounded by `buffer_memory`; `append` raises `BufferFull` when a
record does not fit, and the caller waits for `release` to free space. Each batch has
one future; a record's `FutureRecordMetadata` is (batch, index), so no future exists
per record. `append_many` adds the records of one `send_batch()` call in a few steps per
batch, not per record. Time comes from the `clock` given (monotonic milliseconds).
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

from client.batch import (
    RECORD_OVERHEAD_BYTES,
    BatchResult,
    ProducerBatch,
    estimate_size,
)
from client.futures import BatchSlice, FutureRecordMetadata
from client.records import TopicPartition

__all__ = [
    "RECORD_OVERHEAD_BYTES",
    "BatchResult",
    "BufferFull",
    "DrainResult",
    "FutureRecordMetadata",
    "ProducerBatch",
    "RecordAccumulator",
    "estimate_size",
    "monotonic_ms",
]


def monotonic_ms() -> float:
    """The producer's default clock: monotonic time in milliseconds."""
    return time.monotonic() * 1000


class BufferFull(Exception):
    """Internal: the record does not fit in `buffer_memory` right now."""


class DrainResult(NamedTuple):
    batches: list[ProducerBatch]
    #: Monotonic ms at which some queued batch becomes ready (inf when none).
    next_ready_ms: float
    #: Partitions that had a ready batch but could not send (no leader, window full).
    blocked: list[TopicPartition]


class RecordAccumulator:
    def __init__(
        self, *, batch_size: int, buffer_memory: int, clock: Callable[[], float] = monotonic_ms
    ) -> None:
        self.batch_size = batch_size
        self.clock = clock
        self.buffer_memory = buffer_memory
        self._lock = threading.Lock()
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        #: The batch records of each partition are appended to (closed once drained).
        self._open: dict[TopicPartition, ProducerBatch] = {}
        self._incomplete: dict[ProducerBatch, None] = {}  # creation order, not addresses
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
            batch = self._new_batch(tp, queue, timestamp_ms, now_ms)
            batch.records.append((0, key, value, headers))
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

    def append_many(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        headers: Sequence[Sequence[tuple[str, bytes]] | None] | None,
        sizes: Sequence[int],
        batch_size: int,
    ) -> tuple[list[BatchSlice], int, bool]:
        """Append the records `(keys[i], values[i], headers[i])` (None for `keys` or
        `headers`: none has one), all stamped `timestamp_ms`, to the batches of `tp` in
        order; as many as fit in `buffer_memory` now (at least one when the buffer is
        empty). Returns the slices of batches they went to, how many were taken and
        whether the sender should be woken. Sizes are summed once (`accumulate`) and the
        rows of each batch built with one `zip`, so the cost per record is C code."""
        total = len(values)
        if total == 0:
            return [], 0, False
        cumulative = list(itertools.accumulate(sizes))
        slices: list[BatchSlice] = []
        wake = False
        with self._lock:
            taken = 0
            while taken < total:
                before = cumulative[taken - 1] if taken else 0
                free = self.buffer_memory - self._buffered_bytes
                queue = self._queues.get(tp)
                if queue is None:
                    queue = self._queues[tp] = deque()
                batch = queue[-1] if queue else None
                if batch is None or batch.closed or batch.payload is not None:
                    batch = None
                room = batch_size - (batch.size_bytes if batch is not None else 0)
                # Records [taken, end) fit the batch (strictly below batch_size, as
                # `append`) and the buffer.
                limit = before + min(room - 1, free)
                end = bisect.bisect_right(cumulative, limit, taken, total)
                if end == taken:
                    if batch is not None and batch.records:
                        batch.closed = True  # full: the next one opens a new batch
                        wake = True
                        if self._buffered_bytes and free < sizes[taken]:
                            break
                        continue
                    if self._buffered_bytes and free < sizes[taken]:
                        break  # the buffer is full: the caller waits for space
                    end = taken + 1  # an oversized record alone (as `append`)
                if batch is None:
                    batch = self._new_batch(tp, queue, timestamp_ms)
                    wake = True
                delta = timestamp_ms - batch.first_timestamp_ms
                start = len(batch.records)
                batch.records.extend(
                    zip(
                        itertools.repeat(delta, end - taken),
                        itertools.repeat(None) if keys is None else keys[taken:end],
                        values[taken:end],
                        itertools.repeat(None) if headers is None else headers[taken:end],
                        strict=False,
                    )
                )
                added = cumulative[end - 1] - before
                batch.size_bytes += added
                self._buffered_bytes += added
                slices.append(BatchSlice(batch, start, end - taken))
                if batch.size_bytes >= batch_size or end < total:
                    batch.closed = True
                    wake = True
                taken = end
        return slices, taken, wake

    def _new_batch(
        self,
        tp: TopicPartition,
        queue: deque[ProducerBatch],
        timestamp_ms: int,
        now_ms: float | None = None,
    ) -> ProducerBatch:
        """Open a new batch at the end of `queue`, closing the one before (called with
        the lock held; `now_ms` None: read the clock)."""
        if now_ms is None:
            now_ms = self.clock()
        fresh = ProducerBatch(tp, now_ms)
        fresh.first_timestamp_ms = timestamp_ms
        if queue and not queue[-1].closed:
            queue[-1].closed = True
        queue.append(fresh)
        self._oldest_created_ms = min(self._oldest_created_ms, now_ms)
        self._open[tp] = fresh
        self._incomplete[fresh] = None
        return fresh

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
        with self._lock:
            if batch in self._incomplete:
                del self._incomplete[batch]
                self._buffered_bytes -= batch.size_bytes

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
        before `now_ms` (closed: no record joins them any more). Scans the queues only
        when one may have expired."""
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
            for b in expired:
                b.closed = True
            return expired
