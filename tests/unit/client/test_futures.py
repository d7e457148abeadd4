"""Record and batch futures: `concurrent.futures.wait` / `as_completed` accept record
futures; a `send_batch()` future resolves to its records' metadata in call order."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import pytest

from client.accumulator import RecordAccumulator, estimate_size
from client.batch import BatchResult, ProducerBatch
from client.errors import NotEnoughReplicasError
from client.futures import BatchSlice, FutureBatchMetadata, FutureRecordMetadata
from client.records import RecordMetadata, TopicPartition

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def records(acc: RecordAccumulator, tp: TopicPartition, count: int) -> list[Any]:
    """Record futures, typed as what `concurrent.futures.wait` takes: they are no
    `Future` subclass (one is built per record), only behave as one."""
    size = estimate_size(None, b"v", None)
    futures: list[FutureRecordMetadata] = [
        acc.append(tp, 1000, None, b"v", None, size, 0.0)[0] for _ in range(count)
    ]
    return futures


def test_wait_returns_record_futures_done_and_not_done() -> None:
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 20)
    first = records(acc, TP, 2)
    second = records(acc, TP1, 1)
    (batch0,) = [b for b in acc.incomplete() if b.tp == TP]
    batch0.complete(BatchResult(5, -1, 0))
    done, not_done = concurrent.futures.wait(first + second, timeout=0.05)
    assert done == set(first)
    assert not_done == set(second)


def test_wait_wakes_when_the_batch_completes_from_another_thread() -> None:
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 20)
    futures = records(acc, TP, 3)
    (batch,) = acc.incomplete()
    timer = threading.Timer(0.05, batch.complete, args=(BatchResult(0, -1, 0),))
    timer.start()
    done, not_done = concurrent.futures.wait(futures, timeout=5)
    timer.join()
    assert (len(done), not_done) == (3, set())
    assert batch.future.record_waiters == []  # wait() took its waiters back


def test_first_exception_and_as_completed() -> None:
    acc = RecordAccumulator(batch_size=1 << 20, buffer_memory=1 << 20)
    ok = records(acc, TP, 1)
    bad = records(acc, TP1, 2)
    batches = {b.tp: b for b in acc.incomplete()}
    timer = threading.Timer(0.05, batches[TP1].fail, args=(NotEnoughReplicasError("x"),))
    timer.start()
    done, not_done = concurrent.futures.wait(
        ok + bad, timeout=5, return_when=concurrent.futures.FIRST_EXCEPTION
    )
    timer.join()
    assert done == set(bad)
    assert not_done == set(ok)
    batches[TP].complete(BatchResult(0, -1, 0))
    assert set(concurrent.futures.as_completed(ok + bad, timeout=5)) == set(ok + bad)


def slices(batch: ProducerBatch, start: int, count: int) -> BatchSlice:
    return BatchSlice(batch, start, count)


def test_a_batch_future_lists_metadata_in_call_order() -> None:
    a, b = ProducerBatch(TP, 0.0), ProducerBatch(TP1, 0.0)
    for batch, values in ((a, [b"x", b"y"]), (b, [b"k"])):
        batch.first_timestamp_ms = 1000
        batch.records.extend((0, None, v, None) for v in values)
    # Call order: x (TP), k (TP1), y (TP): slices hold [x, y] then [k].
    future = FutureBatchMetadata([slices(a, 0, 2), slices(b, 0, 1)], order=[0, 2, 1])
    assert not future.done()
    a.complete(BatchResult(10, -1, 3))
    assert not future.done()
    b.complete(BatchResult(20, -1, 0))
    got = future.result(1)
    assert [(m.partition, m.offset) for m in got] == [(0, 10), (1, 20), (0, 11)]
    assert got[0] == RecordMetadata("t", 0, 10, 1000, 0, 3, -1, 1, -1)
    assert future.written() == sorted(got, key=lambda m: (m.partition, m.offset))


def test_a_batch_future_fails_with_the_first_failure_once_all_are_done() -> None:
    a, b = ProducerBatch(TP, 0.0), ProducerBatch(TP1, 0.0)
    for batch in (a, b):
        batch.records.append((0, None, b"v", None))
    future = FutureBatchMetadata([slices(a, 0, 1), slices(b, 0, 1)], order=None)
    error = NotEnoughReplicasError("no")
    a.fail(error)
    assert not future.done()  # b is still on its way
    b.complete(BatchResult(0, -1, 0))
    with pytest.raises(NotEnoughReplicasError):
        future.result(1)
    assert [m.partition for m in future.written()] == [1]


def test_a_batch_future_result_times_out_as_indefinite() -> None:
    a = ProducerBatch(TP, 0.0)
    a.records.append((0, None, b"v", None))
    future = FutureBatchMetadata([slices(a, 0, 1)], order=None)
    with pytest.raises(TimeoutError) as info:
        future.result(0.01)
    assert getattr(info.value, "indefinite", None) is True


async def test_a_batch_future_is_awaitable() -> None:
    a = ProducerBatch(TP, 0.0)
    a.records.extend([(0, None, b"v", None), (0, None, b"w", None)])
    future = FutureBatchMetadata([slices(a, 0, 2)], order=None)
    threading.Timer(0.01, a.complete, args=(BatchResult(7, -1, 0),)).start()
    assert [m.offset for m in await future] == [7, 8]
