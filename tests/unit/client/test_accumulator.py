"""RecordAccumulator: batching by size and linger, memory bound, retry ordering."""

from __future__ import annotations

import pytest

from client.accumulator import (
    BatchResult,
    BufferFull,
    FutureRecordMetadata,
    ProducerBatch,
    RecordAccumulator,
    estimate_size,
)
from client.errors import KafkaTimeoutError, NotEnoughReplicasError
from client.records import RecordMetadata, TopicPartition

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def always(_batch: ProducerBatch) -> bool:
    return True


def append(
    acc: RecordAccumulator, tp: TopicPartition, value: bytes, now_ms: float = 0.0
) -> tuple[FutureRecordMetadata, bool]:
    size = estimate_size(None, value, None)
    return acc.append(tp, 1000, None, value, None, size, now_ms)


def test_records_share_one_batch_until_it_is_full() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    futures = []
    wakes = []
    for _ in range(12):
        future, wake = append(acc, TP, b"x" * 84)  # 100 bytes each with overhead
        futures.append(future)
        wakes.append(wake)
    assert wakes[0] is True  # a new batch wakes the sender (linger timer)
    assert wakes[9] is True  # the 10th record fills the batch
    assert wakes[1:9] == [False] * 8
    batches = acc.drain(0.0, 5.0, always).batches
    assert len(batches) == 1  # one batch per partition per drain
    assert batches[0].record_count == 10


@pytest.mark.parametrize(
    ("now_ms", "force", "ready"),
    [(0.0, False, False), (4.9, False, False), (5.0, False, True), (1.0, True, True)],
    ids=["fresh", "before-linger", "linger-elapsed", "flush"],
)
def test_linger(now_ms: float, force: bool, ready: bool) -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    append(acc, TP, b"x")
    result = acc.drain(now_ms, 5.0, always, force=force)
    assert bool(result.batches) is ready
    if not ready:
        assert result.next_ready_ms == 5.0


def test_blocked_partitions_are_reported_and_kept() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    append(acc, TP, b"x")
    append(acc, TP1, b"y")
    result = acc.drain(10.0, 5.0, lambda b: b.tp == TP1)
    assert [b.tp for b in result.batches] == [TP1]
    assert result.blocked == [TP]
    assert [b.tp for b in acc.drain(10.0, 5.0, always).batches] == [TP]


def test_buffer_memory_bounds_appends_and_release_frees_it() -> None:
    acc = RecordAccumulator(batch_size=200, buffer_memory=300)
    append(acc, TP, b"x" * 84)
    append(acc, TP, b"x" * 84)
    append(acc, TP, b"x" * 84)
    with pytest.raises(BufferFull):
        append(acc, TP, b"x" * 84)
    assert acc.buffered_bytes == 300
    batch = acc.drain(0.0, 0.0, always).batches[0]
    acc.release(batch)
    assert acc.buffered_bytes == 100
    append(acc, TP, b"x" * 84)


def test_an_oversized_record_still_fits_an_empty_buffer() -> None:
    acc = RecordAccumulator(batch_size=100, buffer_memory=100)
    future, _ = append(acc, TP, b"x" * 500)
    assert not future.done()


def test_record_futures_resolve_from_the_batch_result() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    f0, _ = append(acc, TP, b"a")
    f1, _ = append(acc, TP, b"b")
    batch = acc.drain(0.0, 0.0, always).batches[0]
    seen: list[RecordMetadata] = []
    f1.add_callback(seen.append)
    batch.complete(BatchResult(base_offset=40, log_append_time_ms=-1, log_start_offset=0))
    assert f0.result(1) == RecordMetadata("t", 0, 40, 1000, 0, 0, -1, 1, -1)
    assert f1.get(1).offset == 41
    assert seen == [RecordMetadata("t", 0, 41, 1000, 0, 0, -1, 1, -1)]
    assert f1.succeeded()
    assert not f1.failed()


def test_log_append_time_replaces_the_create_time() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    f0, _ = append(acc, TP, b"a")
    acc.drain(0.0, 0.0, always).batches[0].complete(BatchResult(7, 5555, 0))
    assert f0.result(1) == RecordMetadata("t", 0, 7, 5555, 1, 0, -1, 1, -1)


def test_a_failed_batch_fails_each_record_with_the_same_error() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    f0, _ = append(acc, TP, b"a")
    errors: list[BaseException] = []
    f0.add_errback(errors.append)
    error = NotEnoughReplicasError("isr too small")
    acc.drain(0.0, 0.0, always).batches[0].fail(error)
    with pytest.raises(NotEnoughReplicasError):
        f0.result(1)
    assert errors == [error]
    assert f0.failed()


def test_result_timeout_raises_kafka_timeout_error() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    f0, _ = append(acc, TP, b"a")
    with pytest.raises(KafkaTimeoutError):
        f0.result(0.01)
    with pytest.raises(TimeoutError):
        f0.result(0.01)


async def test_record_future_is_awaitable() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    f0, _ = append(acc, TP, b"a")
    f1, _ = append(acc, TP, b"b")
    batch = acc.drain(0.0, 0.0, always).batches[0]
    batch.aio_future()
    batch.complete(BatchResult(10, -1, 0))
    assert (await f0).offset == 10
    assert (await f1).offset == 11


def test_retried_batches_go_back_in_sequence_order_before_new_ones() -> None:
    acc = RecordAccumulator(batch_size=100, buffer_memory=100_000)
    for _ in range(4):
        append(acc, TP, b"x" * 84)  # one batch each
    sent = []
    for seq in range(3):
        batch = acc.drain(0.0, 0.0, always).batches[0]
        batch.payload = b"encoded"
        batch.base_sequence = seq
        sent.append(batch)
    # Responses come back out of order.
    acc.reenqueue(sent[2], 0.0)
    acc.reenqueue(sent[0], 0.0)
    acc.reenqueue(sent[1], 0.0)
    order = [acc.drain(0.0, 0.0, always).batches[0] for _ in range(4)]
    assert [b.base_sequence for b in order] == [0, 1, 2, -1]


def test_retry_back_off_delays_the_batch() -> None:
    acc = RecordAccumulator(batch_size=100, buffer_memory=100_000)
    append(acc, TP, b"x")
    batch = acc.drain(0.0, 0.0, always).batches[0]
    acc.reenqueue(batch, 100.0)
    assert acc.drain(50.0, 0.0, always).next_ready_ms == 100.0
    assert acc.drain(100.0, 0.0, always).batches == [batch]


def test_a_topic_batch_size_overrides_the_default() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    size = estimate_size(None, b"x" * 84, None)  # 100 bytes
    batches = {
        acc.append(TP, 1000, None, b"x" * 84, None, size, 0.0, 250)[0]._batch for _ in range(6)
    }
    assert sorted(b.record_count for b in batches) == [2, 2, 2]
    assert sum(b.closed for b in batches) == 2  # the last one is still open


def test_heads_are_the_next_batch_of_each_partition() -> None:
    acc = RecordAccumulator(batch_size=150, buffer_memory=100_000)
    first = append(acc, TP, b"x" * 84)[0]._batch
    append(acc, TP, b"x" * 84)  # a second batch on TP
    other = append(acc, TP1, b"x" * 84)[0]._batch
    assert set(acc.heads()) == {first, other}


def test_expired_batches_are_popped_in_queue_order_and_others_kept() -> None:
    acc = RecordAccumulator(batch_size=100, buffer_memory=100_000)
    append(acc, TP, b"x" * 90, now_ms=0.0)  # batch a (full)
    append(acc, TP, b"x" * 90, now_ms=10.0)  # batch b
    append(acc, TP1, b"x" * 90, now_ms=50.0)  # batch c
    assert acc.next_expiry_ms(100.0) == 100.0
    assert acc.pop_expired(100.0, 100.0) == []  # exactly at the timeout: not yet
    expired = acc.pop_expired(111.0, 100.0)
    assert [b.created_ms for b in expired] == [0.0, 10.0]
    assert [b.created_ms for b in acc.queued()] == [50.0]
    assert acc.next_expiry_ms(100.0) == 150.0  # recomputed by the scan


def test_a_record_sent_after_the_open_batch_expired_goes_to_a_new_batch() -> None:
    """The expired batch was the partition's open one: it failed and its memory was
    released, so a later record must not join it (found by the replication simulator's
    client workload: once a batch expired without a leader, every later send to the
    partition failed at once with that batch's delivery timeout, and its bytes were
    never released)."""
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    append(acc, TP, b"x", now_ms=0.0)
    (expired,) = acc.pop_expired(200.0, 100.0)
    expired.fail(KafkaTimeoutError("expired"))
    acc.release(expired)
    later, wake = append(acc, TP, b"y", now_ms=200.0)
    assert later._batch is not expired
    assert wake is True  # a new batch
    assert not later.done()
    assert acc.queued() == [later._batch]
    acc.release(later._batch)
    assert acc.buffered_bytes == 0


def test_a_requeued_old_batch_moves_the_expiry_back() -> None:
    acc = RecordAccumulator(batch_size=100, buffer_memory=100_000)
    append(acc, TP, b"x" * 90, now_ms=0.0)
    (old,) = acc.drain(0.0, 5.0, always).batches  # in flight
    append(acc, TP, b"x" * 90, now_ms=80.0)
    assert acc.pop_expired(150.0, 100.0) == []  # the scan sees only the new batch
    assert acc.next_expiry_ms(100.0) == 180.0
    acc.reenqueue(old, 0.0)  # its attempt failed; it is older than anything queued
    assert acc.next_expiry_ms(100.0) == 100.0
    assert acc.pop_expired(150.0, 100.0) == [old]


def many(
    acc: RecordAccumulator, values: list[bytes], *, batch_size: int = 1000, ts: int = 1000
) -> tuple[list[tuple[int, int, int]], int, bool]:
    sizes = [estimate_size(None, v, None) for v in values]
    slices, taken, wake = acc.append_many(TP, ts, None, values, None, sizes, batch_size)
    return [(s.batch.serial, s.start, s.count) for s in slices], taken, wake


def test_append_many_fills_batches_in_order() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    got, taken, wake = many(acc, [b"x" * 84] * 25)  # 100 bytes each: 9 fit below 1000
    assert taken == 25
    assert wake
    assert [(start, count) for _, start, count in got] == [(0, 9), (0, 9), (0, 7)]
    batches = acc.queued()
    assert [b.record_count for b in batches] == [9, 9, 7]
    assert [b.closed for b in batches] == [True, True, False]
    assert acc.buffered_bytes == 2500


def test_append_many_continues_the_open_batch_with_deltas_from_its_first_record() -> None:
    acc = RecordAccumulator(batch_size=1000, buffer_memory=100_000)
    append(acc, TP, b"a")  # timestamp 1000
    got, _, _ = many(acc, [b"b", b"c"], ts=1500)
    (batch,) = acc.queued()
    assert got == [(batch.serial, 1, 2)]
    assert [row[0] for row in batch.records] == [0, 500, 500]
    assert [row[2] for row in batch.records] == [b"a", b"b", b"c"]


def test_append_many_stops_at_the_buffer_limit() -> None:
    acc = RecordAccumulator(batch_size=250, buffer_memory=450)
    _, taken, _ = many(acc, [b"x" * 84] * 6, batch_size=250)  # 100 bytes each
    assert taken == 4
    assert acc.buffered_bytes == 400
    (batch, *_rest) = acc.drain(0.0, 0.0, always).batches
    acc.release(batch)
    _, again, _ = many(acc, [b"x" * 84] * 2, batch_size=250)
    assert again == 2


def test_append_many_takes_an_oversized_record_alone_into_an_empty_buffer() -> None:
    acc = RecordAccumulator(batch_size=100, buffer_memory=100)
    got, taken, _ = many(acc, [b"x" * 500, b"y"], batch_size=100)
    assert taken == 1
    assert [count for _, _, count in got] == [1]
