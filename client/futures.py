"""The futures `send()` and `send_batch()` return: views of producer batches.

`FutureRecordMetadata` is (batch, index): no future of its own per record, yet it
behaves as a `concurrent.futures.Future` (`result`, `exception`, `done`,
`add_done_callback`, and `concurrent.futures.wait` / `as_completed` accept it) and is
awaitable. `FutureBatchMetadata` is the one future of a `send_batch()` call: it resolves
to the calls's `RecordMetadata` list once every batch holding its records is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

import msgspec

from client.batch import BatchFuture, BatchResult, ProducerBatch
from client.errors import KafkaTimeoutError
from client.records import RecordMetadata
from minikafka.record_batch import TimestampType

_FINISHED = "FINISHED"  # concurrent.futures' state name


def record_metadata(batch: ProducerBatch, index: int, result: BatchResult) -> RecordMetadata:
    """The metadata of record `index` of `batch` written as `result` says."""
    delta, key, value, headers = batch.records[index]
    if result.log_append_time_ms >= 0:
        timestamp, ts_type = result.log_append_time_ms, int(TimestampType.LOG_APPEND_TIME)
    else:
        timestamp = batch.first_timestamp_ms + delta
        ts_type = int(TimestampType.CREATE_TIME)
    offset = result.base_offset + index if result.base_offset >= 0 else -1
    return RecordMetadata(
        batch.tp.topic,
        batch.tp.partition,
        offset,
        timestamp,
        ts_type,
        result.log_start_offset,
        -1 if key is None else len(key),
        -1 if value is None else len(value),
        -1 if not headers else sum(len(name.encode()) + len(data) for name, data in headers),
    )


def _not_acknowledged(timeout: float | None) -> KafkaTimeoutError:
    error = KafkaTimeoutError(
        f"record not acknowledged within {timeout} s (it may still be delivered)"
    )
    error.indefinite = True
    return error


class _RecordWaiters:
    """What `concurrent.futures.wait` sees as a record future's `_waiters`: installs its
    waiter on the batch future on behalf of the record (called with the batch's
    condition held)."""

    __slots__ = ("_future", "_record")

    def __init__(self, record: object, future: BatchFuture) -> None:
        self._record = record
        self._future = future

    def append(self, waiter: Any) -> None:
        self._future.record_waiters.append((self._record, waiter))

    def remove(self, waiter: Any) -> None:
        waiters = self._future.record_waiters
        for index, (record, installed) in enumerate(waiters):
            if record is self._record and installed is waiter:
                del waiters[index]
                return
        raise ValueError("waiter not installed")


class FutureRecordMetadata(msgspec.Struct, eq=False):
    """The future of one sent record: `result(timeout)` / `get(timeout)` or `await`.

    Compatible with the `concurrent.futures.Future` API (`result`, `exception`,
    `done`, `add_done_callback`, ...; `concurrent.futures.wait` and `as_completed`
    accept it) plus kafka-python's `get`, `succeeded`, `failed`, `add_callback`,
    `add_errback`. (A msgspec struct only because one is built per record and its
    constructor is C code; it is (batch, index), no future of its own.)
    """

    _batch: ProducerBatch
    _index: int

    def _metadata(self, result: BatchResult) -> RecordMetadata:
        return record_metadata(self._batch, self._index, result)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        future = self._batch.future
        try:
            return self._metadata(future.result(timeout))
        except concurrent.futures.TimeoutError:
            # On Python >= 3.11 this is the builtin TimeoutError, which the batch's own
            # KafkaTimeoutError (delivery timeout) also is: re-raise that one as it is.
            if future.done():
                raise
            raise _not_acknowledged(timeout) from None

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

    # What `concurrent.futures.wait` / `as_completed` read and lock: the batch's.
    @property
    def _condition(self) -> threading.Condition:
        return self._batch.future._condition

    @property
    def _state(self) -> str:
        return self._batch.future._state

    @property
    def _waiters(self) -> _RecordWaiters:
        return _RecordWaiters(self, self._batch.future)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        batch = self._batch
        if not batch.future.done():
            yield from asyncio.shield(batch.aio_future()).__await__()
        return self._metadata(batch.future.result())


class BatchSlice(msgspec.Struct, frozen=True, gc=False):
    """Records `[start, start + count)` of `batch` came from one `send_batch()` call."""

    batch: ProducerBatch
    start: int
    count: int


class FutureBatchMetadata(concurrent.futures.Future[list[RecordMetadata]]):
    """The one future of a `send_batch()` call (a `concurrent.futures.Future`, also
    awaitable): `result(timeout)` is the list of `RecordMetadata` of the call's records,
    in the order given, once every batch holding them is acknowledged.

    If a batch fails, the call fails with that batch's error once all its batches are
    done (the first failure in record order). Records that went to other partitions
    may have been written meanwhile (see `written()`): one call is not atomic, as many
    `send()` calls are not.
    """

    def __init__(self, slices: Sequence[BatchSlice], order: Sequence[int] | None) -> None:
        super().__init__()
        self._slices = list(slices)
        #: `order[i]`: the position in the call of the i-th record of the slices (None:
        #: the slices hold the records in call order).
        self._order = order
        self._metadata_list: list[RecordMetadata] | None = None
        self._lock = threading.Lock()
        batches = {id(s.batch): s.batch for s in self._slices}
        self._pending = len(batches)
        if not batches:  # an empty call
            self.set_result([])
        for batch in batches.values():
            batch.future.add_done_callback(self._batch_done)

    def _batch_done(self, _f: concurrent.futures.Future[BatchResult]) -> None:
        with self._lock:
            self._pending -= 1
            if self._pending:
                return
        for piece in self._slices:
            error = piece.batch.future.exception()
            if error is not None:
                self.set_exception(error)
                return
        self.set_result([])  # the metadata is built by `result()`, in the caller's thread

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        try:
            super().result(timeout)
        except concurrent.futures.TimeoutError:
            if self.done():
                raise
            raise _not_acknowledged(timeout) from None
        return self._metadata()

    def get(self, timeout: float | None = None) -> list[RecordMetadata]:
        """kafka-python's name for `result`."""
        return self.result(timeout)

    def _metadata(self) -> list[RecordMetadata]:
        if self._metadata_list is None:
            found: list[RecordMetadata] = []
            for piece in self._slices:
                result = piece.batch.future.result()
                batch = piece.batch
                found.extend(
                    record_metadata(batch, index, result)
                    for index in range(piece.start, piece.start + piece.count)
                )
            if self._order is not None:
                ordered: list[RecordMetadata | None] = [None] * len(found)
                for metadata, position in zip(found, self._order, strict=True):
                    ordered[position] = metadata
                found = [m for m in ordered if m is not None]
            self._metadata_list = found
        return self._metadata_list

    def written(self) -> list[RecordMetadata]:
        """The metadata of the call's records whose batch was written so far (any
        order): after a failure, what did reach the log."""
        out: list[RecordMetadata] = []
        for piece in self._slices:
            future = piece.batch.future
            if future.done() and future.exception() is None:
                result = future.result()
                out.extend(
                    record_metadata(piece.batch, index, result)
                    for index in range(piece.start, piece.start + piece.count)
                )
        return out

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        if not self.done():
            yield from asyncio.shield(asyncio.wrap_future(self)).__await__()
        return self.result()
