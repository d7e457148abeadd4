"""One producer batch: the records bound for one partition, sent and acknowledged together.

A `ProducerBatch` holds its records as the rows `build_batch_from_rows` encodes, the
encoded payload once sent, its idempotence state and one `BatchFuture`. Record futures
(`client.futures`) are views of (batch, index) and never own a future; `BatchFuture`
also completes the waiters that `concurrent.futures.wait` / `as_completed` install on
those record futures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from client.records import TopicPartition
from minikafka.record_batch import EncodableRow

#: Bytes counted per record on top of key, value and headers (msgpack framing, delta).
RECORD_OVERHEAD_BYTES: Final = 16

_serials = itertools.count()


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


class BatchFuture(concurrent.futures.Future[BatchResult]):
    """The future of a batch. `record_waiters` are (record future, waiter) pairs that
    `concurrent.futures.wait` installed through a record future's `_waiters`: when the
    batch completes they are told that record is done."""

    def __init__(self) -> None:
        super().__init__()
        self.record_waiters: list[tuple[object, Any]] = []

    def set_result(self, result: BatchResult) -> None:
        super().set_result(result)
        self._notify_records(failed=False)

    def set_exception(self, exception: BaseException | None) -> None:
        super().set_exception(exception)
        self._notify_records(failed=True)

    def _notify_records(self, *, failed: bool) -> None:
        # Under the condition `wait()` holds while it checks states and installs waiters:
        # a waiter installed before the state changed is in the list, one checking after
        # sees the batch done.
        with self._condition:
            for record, waiter in self.record_waiters:
                if failed:
                    waiter.add_exception(record)
                else:
                    waiter.add_result(record)


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
        "indefinite",
        "last_error",
        "maybe_written",
        "payload",
        "producer_epoch",
        "records",
        "retry_after_ms",
        "sent",
        "sent_behind",
        "serial",
        "size_bytes",
        "tp",
    )

    def __init__(self, tp: TopicPartition, created_ms: float) -> None:
        self.tp = tp
        self.serial = next(_serials)
        self.created_ms = created_ms
        #: Timestamp of the batch's first record; `records` hold deltas from it.
        self.first_timestamp_ms = 0
        self.records: list[EncodableRow] = []
        self.size_bytes = 0
        self.closed = False
        self.future = BatchFuture()
        #: The encoded batch, built once at first send and reused by retries.
        self.payload: bytes | None = None
        self.base_sequence = -1
        self.producer_epoch = -1
        self.attempts = 0
        self.retry_after_ms = 0.0
        #: An attempt under the current sequence may have been written (an answer given
        #: after the leader appended, a timeout, a lost connection): it is resent only
        #: under that sequence, never re-sequenced.
        self.maybe_written = False
        #: Some attempt may have been written (never cleared): the `indefinite` of the
        #: error the batch fails with.
        self.indefinite = False
        #: An attempt is on its way and not answered yet.
        self.sent = False
        #: When the current attempt was sent, an earlier batch of the partition was in
        #: flight: an OUT_OF_ORDER_SEQUENCE_NUMBER may only mean this one overtook it
        #: (concurrent gRPC calls reach the leader in any order), even if that batch is
        #: acknowledged by the time the refusal is read.
        self.sent_behind = False
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

    def add_done_callback(self, fn: Callable[[ProducerBatch], object]) -> None:
        self.future.add_done_callback(lambda _f: fn(self))
