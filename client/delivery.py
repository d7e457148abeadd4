"""Handing fetched records out: decode buffered responses (one msgspec call per batch)
and give records to `getmany` / `poll`, in rotation over the partitions.

A partition stops at a damaged batch (`CorruptRecordError`), at a record its
deserializer cannot read (`RecordDeserializationError`), at a truncated log or at an
offset out of range: the records before that point are handed out first, then the
error is raised by every call that reaches the partition before it found a record
elsewhere (so other partitions keep being served, and the error keeps coming back)
until the user seeks. An error to report once is raised the same way, then cleared.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Sequence

import msgspec

from client.errors import (
    ConsumerStoppedError,
    CorruptRecordError,
    NoOffsetForPartitionError,
    RecordDeserializationError,
)
from client.metrics import ConsumerMetrics
from client.records import (
    ConsumerRecord,
    Deserializer,
    FetchedBatches,
    TopicPartition,
    decode_fetched,
)
from client.subscription import FetchStatus, PartitionState, SubscriptionState


class RecordDelivery:
    """Decodes and hands out the records buffered in a `SubscriptionState`.

    `wake_fetcher` is called when a partition's buffer drains (room for the next
    fetch); `clock` gives monotonic seconds (the back-off after a reported error)."""

    def __init__(
        self,
        subscription: SubscriptionState,
        *,
        key_deserializer: Deserializer | None,
        value_deserializer: Deserializer | None,
        retry_backoff_ms: float,
        metrics: ConsumerMetrics,
        wake_fetcher: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        self.subscription = subscription
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._metrics = metrics
        self._wake_fetcher = wake_fetcher
        self._clock = clock
        self._rotation = 0

    def take(
        self, max_records: int, only: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to `max_records` records (of the partitions in `only`, when given); raises
        the error of a stopped partition reached before any record was found."""
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        budget = max_records
        assignment = self.subscription.assignment
        tps = [tp for tp in assignment if only is None or tp in only]
        if not tps:
            return result
        start = self._rotation % len(tps)
        self._rotation += 1
        for tp in tps[start:] + tps[:start]:
            if budget <= 0:
                break
            state = assignment[tp]
            if state.paused:
                continue
            taken = self._take_partition(tp, state, budget)
            if taken:
                budget -= len(taken)
                state.consumed_epoch = taken[-1].leader_epoch
                result[tp] = taken
                continue
            error = self._stopped_at(tp, state)
            if error is not None and not result:
                if state.status is not FetchStatus.FAILED and state.error is error:
                    # Reported once; the partition is fetched (or looked up) again later.
                    state.error = None
                    state.retry_after = self._clock() + self._retry_backoff_s
                raise error
        if result:
            self._metrics.records.record(max_records - budget, self._clock() * 1000)
        return result

    async def take_within(
        self,
        max_records: int,
        only: Collection[TopicPartition] | None,
        timeout_s: float,
        ready: asyncio.Event,
        closed: Callable[[], bool],
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """`take`, waiting up to `timeout_s` for records (`ready` is set when a fetch
        brought some, or an error); `{}` when none came."""
        deadline = self._clock() + timeout_s
        while True:
            try:
                result = self.take(max_records, only)
            except Exception:
                # Let the fetches run before the caller polls again: a loop that retries
                # at once would otherwise starve the other partitions.
                await asyncio.sleep(0)
                raise
            if result:
                return result
            remaining = deadline - self._clock()
            if remaining <= 0 or closed():
                return {}
            ready.clear()
            self._wake_fetcher()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), remaining)
            if closed():
                raise ConsumerStoppedError("the consumer was closed")

    @staticmethod
    def _stopped_at(tp: TopicPartition, state: PartitionState) -> BaseException | None:
        if state.status is FetchStatus.NO_POSITION:
            return NoOffsetForPartitionError(tp)
        return state.error

    def _take_partition(
        self, tp: TopicPartition, state: PartitionState, budget: int
    ) -> list[ConsumerRecord]:
        taken: list[ConsumerRecord] = []
        drained = False
        while budget > 0:
            limit = state.stop_offset if state.status is FetchStatus.FAILED else None
            if state.records_index >= len(state.records):
                if not state.raw or (limit is not None and state.raw[0][1] >= limit):
                    break
                self._decode_next(tp, state)
                continue
            end = min(len(state.records), state.records_index + budget)
            if (
                not taken
                and limit is None
                and state.records_index == 0
                and end == len(state.records)
            ):
                # All of a decoded response at once (catch-up): hand the list itself out
                # rather than two copies of it.
                taken = state.records
                state.records = []
                budget -= end
                drained = True
                continue
            chunk = state.records[state.records_index : end]
            if limit is not None and chunk[-1].offset >= limit:
                # Records at or past the stop stay (the position is the stop).
                kept = [r for r in chunk if r.offset < limit]
                state.records_index += len(kept)
                taken.extend(kept)
                break
            state.records_index = end
            budget -= len(chunk)
            taken.extend(chunk)
        if state.records_index >= len(state.records) and state.records:
            state.records = []
            state.records_index = 0
            drained = True
        if drained:
            self._wake_fetcher()
        return taken

    def _decode_next(self, tp: TopicPartition, state: PartitionState) -> None:
        data, start = state.raw.pop(0)
        try:
            fetched = decode_fetched(
                tp.topic,
                tp.partition,
                data,
                position=start,
                key_deserializer=self._key_deserializer,
                value_deserializer=self._value_deserializer,
                stop_at_corrupt=True,
            )
        except Exception:  # a deserializer failed: find the record, keep the ones before
            self._stop_at_undecodable(tp, state, data, start)
            return
        state.records = fetched.records
        state.records_index = 0
        if fetched.corrupt is not None:
            self._stop_at_corrupt(tp, state, data, fetched)
        elif not state.raw:
            self._wake_fetcher()

    @staticmethod
    def _stop_at_corrupt(
        tp: TopicPartition, state: PartitionState, data: bytes, fetched: FetchedBatches
    ) -> None:
        offset = fetched.corrupt_offset
        state.raw.insert(0, (data, offset))  # the position stays at the damaged batch
        state.fail(
            CorruptRecordError(
                tp, offset, str(fetched.corrupt), next_offset=fetched.corrupt_next_offset
            ),
            offset,
        )

    def _stop_at_undecodable(
        self, tp: TopicPartition, state: PartitionState, data: bytes, start: int
    ) -> None:
        """A deserializer raised on a record of `data`: hand out the records before it,
        then stop at it with a `RecordDeserializationError` (until the user seeks)."""
        plain = decode_fetched(tp.topic, tp.partition, data, position=start, stop_at_corrupt=True)
        good: list[ConsumerRecord] = []
        for record in plain.records:
            try:
                good.append(self._deserialized(record))
            except Exception as exc:
                state.records = good
                state.records_index = 0
                state.raw.insert(0, (data, record.offset))
                state.fail(RecordDeserializationError(tp, record.offset, exc), record.offset)
                return
        state.records = good  # every record decodes now (a flaky deserializer)
        state.records_index = 0
        if plain.corrupt is not None:
            self._stop_at_corrupt(tp, state, data, plain)

    def _deserialized(self, record: ConsumerRecord) -> ConsumerRecord:
        key, value = record.key, record.value
        if self._key_deserializer is not None and key is not None:
            key = self._key_deserializer(key)
        if self._value_deserializer is not None and value is not None:
            value = self._value_deserializer(value)
        return msgspec.structs.replace(record, key=key, value=value)

    def generations(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        assignment = self.subscription.assignment
        return {tp: assignment[tp].generation for tp in tps if tp in assignment}

    def unread(
        self, records: Sequence[ConsumerRecord], generations: dict[TopicPartition, int]
    ) -> None:
        """Give back records handed out but not delivered to the user (the sync
        iterator's read-ahead), so they are the next ones returned and `position`
        counts them as unread. A partition sought (or reset) since then keeps its
        new position instead."""
        by_tp: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in records:
            by_tp.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        for tp, unread in by_tp.items():
            state = self.subscription.assignment.get(tp)
            if state is None or state.generation != generations.get(tp):
                continue
            state.records = unread + state.records[state.records_index :]
            state.records_index = 0
