"""`async for record in consumer` (`client.consumer_calls.iterate_records`) over a
scripted `getmany`: records in order, the poll bounded at 1 s, the end when the consumer
stops, and the default `consumer_timeout_ms` (infinite) accepted."""

from __future__ import annotations

import asyncio
from typing import Any

from client.consumer_calls import iterate_records
from client.errors import ConsumerStoppedError
from client.records import ConsumerRecord, TopicPartition

TP = TopicPartition("t", 0)


def record(offset: int) -> ConsumerRecord:
    return ConsumerRecord("t", 0, offset, 0, 0, None, b"v", [], 0)


class ScriptedPolls:
    """`getmany` answering each call with the next scripted answer (a batch, or an
    exception to raise); an empty answer takes its whole timeout on the consumer's clock
    (`now_s`), as a poll that waited for records does."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.timeouts_ms: list[int] = []
        self.now_s = 0.0

    async def __call__(self, *, timeout_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        self.timeouts_ms.append(timeout_ms)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if not answer:
            self.now_s += timeout_ms / 1000
        return dict(answer)


async def collect(polls: ScriptedPolls, consumer_timeout_ms: float) -> list[int]:
    return [
        r.offset async for r in iterate_records(polls, consumer_timeout_ms, lambda: polls.now_s)
    ]


def test_an_infinite_consumer_timeout_polls_a_second_at_a_time_until_stopped() -> None:
    polls = ScriptedPolls(
        [{TP: [record(0), record(1)]}, {}, {TP: [record(2)]}, ConsumerStoppedError("x")]
    )
    assert asyncio.run(collect(polls, float("inf"))) == [0, 1, 2]
    assert polls.timeouts_ms == [1000, 1000, 1000, 1000]


def test_a_short_consumer_timeout_bounds_each_poll_and_ends_the_iteration() -> None:
    polls = ScriptedPolls([{TP: [record(5)]}, {}])
    assert asyncio.run(collect(polls, 0)) == [5]
    assert polls.timeouts_ms == [0, 0]


def test_the_iteration_ends_after_consumer_timeout_ms_without_records_on_its_clock() -> None:
    polls = ScriptedPolls([{}, {TP: [record(7)]}, {}, {}, {}, {TP: [record(8)]}])
    assert asyncio.run(collect(polls, 2500)) == [7]
    # after record 7: empty polls at 1 s, 2 s and 3 s of the clock; 3 s >= 2.5 s ends it
    assert polls.timeouts_ms == [1000] * 5
    assert polls.answers == [{TP: [record(8)]}]
