"""Handing records out (no sockets): records before a stop are delivered, then the error
comes back at every call that reaches the partition first, other partitions go on."""

from __future__ import annotations

import pytest

from client.delivery import RecordDelivery
from client.errors import (
    CorruptRecordError,
    LogTruncationError,
    NoOffsetForPartitionError,
    RecordDeserializationError,
)
from client.metrics import ConsumerMetrics
from client.offset_rules import EARLIEST
from client.records import ConsumerRecord, Deserializer, TopicPartition
from client.subscription import FetchStatus, SubscriptionState
from minikafka.record_batch import build_batch, stamp

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def batch(base: int, values: list[bytes]) -> bytes:
    return stamp(
        build_batch([(1000, None, v, None) for v in values]), base_offset=base, leader_epoch=1
    )


def damaged(base: int) -> bytes:
    data = bytearray(batch(base, [b"x"]))
    data[-1] ^= 0x01  # body CRC no longer matches
    return bytes(data)


def delivery(
    subscription: SubscriptionState, value_deserializer: Deserializer | None = None
) -> RecordDelivery:
    return RecordDelivery(
        subscription,
        key_deserializer=None,
        value_deserializer=value_deserializer,
        retry_backoff_ms=100,
        metrics=ConsumerMetrics(0.0),
        wake_fetcher=lambda: None,
        clock=lambda: 0.0,
    )


def fetched(subscription: SubscriptionState, tp: TopicPartition, data: bytes, start: int) -> None:
    state = subscription.state(tp)
    state.seek(start, -1)
    state.raw.append((data, start))


def offsets(got: dict[TopicPartition, list[ConsumerRecord]]) -> dict[TopicPartition, list[int]]:
    return {tp: [r.offset for r in records] for tp, records in got.items()}


def test_records_before_a_damaged_batch_then_its_error_while_others_go_on() -> None:
    subscription = SubscriptionState([], EARLIEST)
    subscription.assign({TP0, TP1})
    fetched(subscription, TP0, batch(0, [b"a", b"b"]) + damaged(2) + batch(3, [b"c"]), 0)
    out = delivery(subscription)
    first = out.take(100, only={TP0})
    assert offsets(first) == {TP0: [0, 1]}
    with pytest.raises(CorruptRecordError) as info:
        out.take(100, only={TP0})
    assert (info.value.offset, info.value.next_offset) == (2, 3)
    state = subscription.state(TP0)
    assert (state.status, state.position()) == (FetchStatus.FAILED, 2)
    fetched(subscription, TP1, batch(0, [b"p1"]), 0)
    results, raised = [], 0
    for _ in range(4):  # rotation: TP1 is first in every other call
        try:
            results.append(offsets(out.take(100)))
        except CorruptRecordError:
            raised += 1
    assert results == [{TP1: [0]}]
    assert raised == 3
    state.seek(3, -1)  # past it
    state.raw.append((batch(3, [b"c"]), 3))
    assert offsets(out.take(100)) == {TP0: [3]}


def test_a_record_that_does_not_deserialize_stops_its_partition() -> None:
    subscription = SubscriptionState([], EARLIEST)
    subscription.assign({TP0})
    fetched(subscription, TP0, batch(0, [b"1", b"2", b"x", b"4"]), 0)
    out = delivery(subscription, value_deserializer=int)
    assert [r.value for r in out.take(100)[TP0]] == [1, 2]
    with pytest.raises(RecordDeserializationError) as info:
        out.take(100)
    assert info.value.offset == 2
    assert subscription.state(TP0).position() == 2


def test_a_truncated_partition_delivers_nothing_more() -> None:
    subscription = SubscriptionState([], EARLIEST)
    subscription.assign({TP0})
    fetched(subscription, TP0, batch(0, [b"a", b"b"]), 0)
    state = subscription.state(TP0)
    state.fail(LogTruncationError(TP0, 0, 0), state.position())  # buffered records are gone
    with pytest.raises(LogTruncationError):
        delivery(subscription).take(100)


def test_a_one_time_error_is_reported_once_and_a_missing_position_until_a_seek() -> None:
    subscription = SubscriptionState([], None)
    subscription.assign({TP0})
    out = delivery(subscription)
    for _ in range(2):
        with pytest.raises(NoOffsetForPartitionError):
            out.take(10)
    state = subscription.state(TP0)
    state.seek(0, -1)
    state.error = ValueError("once")
    with pytest.raises(ValueError, match="once"):
        out.take(10)
    assert out.take(10) == {}
    assert state.retry_after == pytest.approx(0.1)


def test_paused_partitions_are_skipped() -> None:
    subscription = SubscriptionState([], EARLIEST)
    subscription.assign({TP0})
    fetched(subscription, TP0, batch(0, [b"a"]), 0)
    subscription.pause([TP0])
    out = delivery(subscription)
    assert out.take(10) == {}
    subscription.resume([TP0])
    assert offsets(out.take(10)) == {TP0: [0]}


#: name -> (records per buffered response, budgets of successive takes, offsets each
#: take hands out). A take may hand out a whole decoded response as it is, part of one,
#: or span responses; the position and the offsets handed out are the same either way.
HAND_OUTS: dict[str, tuple[list[int], list[int], list[list[int]]]] = {
    "a whole response in one take": ([3], [10], [[0, 1, 2]]),
    "exactly a whole response": ([3], [3], [[0, 1, 2]]),
    "a response in two takes": ([3], [2, 2], [[0, 1], [2]]),
    "one take across two responses": ([2, 3], [10], [[0, 1, 2, 3, 4]]),
    "a whole response, then part of the next": ([2, 3], [4, 4], [[0, 1, 2, 3], [4]]),
    "part, then the rest and the next": ([3, 2], [1, 10], [[0], [1, 2, 3, 4]]),
}


@pytest.mark.parametrize(("sizes", "budgets", "expected"), HAND_OUTS.values(), ids=HAND_OUTS.keys())
def test_records_are_handed_out_in_order_within_the_budget(
    sizes: list[int], budgets: list[int], expected: list[list[int]]
) -> None:
    subscription = SubscriptionState((), EARLIEST)
    subscription.assign({TP0})
    wakes: list[int] = []
    handing = RecordDelivery(
        subscription,
        key_deserializer=None,
        value_deserializer=None,
        retry_backoff_ms=100,
        metrics=ConsumerMetrics(0.0),
        wake_fetcher=lambda: wakes.append(1),
        clock=lambda: 0.0,
    )
    state = subscription.state(TP0)
    state.seek(0, -1)
    base = 0
    for size in sizes:
        state.raw.append((batch(base, [b"v%d" % i for i in range(size)]), base))
        base += size
    state.fetch_offset = base
    got = []
    for budget in budgets:
        taken = handing.take(budget)
        got.append([r.offset for r in taken.get(TP0, [])])
        assert state.position() == got[-1][-1] + 1
    assert got == expected
    assert handing.take(10) == {}
    assert state.position() == base
    assert wakes  # the fetcher hears when buffered data drains (room for the next fetch)
