"""`AsyncConsumer`'s position and offset calls (seek, position, highwater, beginning
and end offsets, offsets_for_times, topics, partitions, metrics) over
`client.positions.ConsumerPositions`, and the open/started checks every call makes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from client.consumer_config import PartitionArg, partition_args
from client.consumer_runtime import ConsumerRuntime
from client.errors import ConsumerStoppedError, IllegalStateError
from client.offset_rules import EARLIEST, LATEST
from client.positions import ConsumerPositions
from client.records import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from client.subscription import SubscriptionState


class PositionCalls:
    """Mixin of `AsyncConsumer`: the calls about which partitions are read, whether
    (pause / resume) and from where."""

    _positions: ConsumerPositions
    _runtime: ConsumerRuntime | None
    _started: bool
    _closed: bool
    clock: Callable[[], float]
    subscription_state: SubscriptionState

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer is closed")
        if not self._started:
            raise IllegalStateError("call `await consumer.start()` first")

    def _check_not_closed(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer is closed")

    # ---- positions (see `client.positions`) -----------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make `offset` the next offset `getmany` / `poll` returns for `partition`."""
        self._check_not_closed()
        self._positions.seek(partition, offset)

    async def seek_to_beginning(self, *partitions: PartitionArg) -> None:
        self._check_open()
        await self._positions.seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: PartitionArg) -> None:
        self._check_open()
        await self._positions.seek_to(LATEST, partitions)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record `getmany` / `poll` returns for `partition`.

        Looks the offset up (per `auto_offset_reset`) when the partition has none
        yet; raises the partition's error (e.g. `UnknownTopicOrPartitionError` when
        it does not exist) if that does not succeed within `request_timeout_ms`.
        At a damaged batch or a record that does not deserialize, it is that offset.
        """
        self._check_open()
        return await self._positions.position(partition)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark from the last fetch (None before one)."""
        return self._positions.highwater(partition)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The log start offset of each partition (assigned or not). Raises
        `UnknownTopicOrPartitionError` for a partition that does not exist (after
        retrying for `request_timeout_ms`: it may be being created)."""
        self._check_open()
        return await self._positions.offsets_at(EARLIEST, partitions)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset after the last readable
        record); errors as `beginning_offsets`. A new leader that has not caught up
        yet answers OFFSET_NOT_AVAILABLE: asked again until `request_timeout_ms`."""
        self._check_open()
        return await self._positions.offsets_at(LATEST, partitions)

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the earliest offset whose record timestamp is at least
        the given one (ms since the epoch), with that timestamp; None when no record
        is that recent (kafka-python's `offsets_for_times`)."""
        self._check_open()
        return await self._positions.offsets_for_times(timestamps)

    async def topics(self) -> set[str]:
        """Every topic in the cluster (kafka-python's `topics()`)."""
        self._check_open()
        return await self._positions.topics()

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition ids of `topic`, or None when it does not exist."""
        self._check_open()
        return await self._positions.partitions_for_topic(topic)

    def metrics(self) -> dict[str, dict[str, float]]:
        """kafka-python's `metrics()`: `{"consumer-fetch-manager-metrics": {name: value}}`
        with records and bytes consumed (totals and per second over the last 30 s),
        fetches and their latency (ms), and failed fetches."""
        runtime = self._runtime
        report = {} if runtime is None else runtime.metrics.report(self.clock() * 1000)
        return {"consumer-fetch-manager-metrics": report}

    # ---- assignment and pausing (see `client.subscription`) ---------------------------

    def _wake(self) -> None:
        if self._runtime is not None:
            self._runtime.fetcher.wake()

    def assignment(self) -> set[TopicPartition]:
        return set(self.subscription_state.assignment)

    def subscription(self) -> set[str]:
        return set(self.subscription_state.topics)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and returning records of these (assigned) partitions; their
        position and what was fetched already stay for `resume()`."""
        self._check_not_closed()
        self.subscription_state.pause(partition_args(partitions, "pause()"))

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return records of these paused partitions again."""
        self._check_not_closed()
        self.subscription_state.resume(partition_args(partitions, "resume()"))
        self._wake()

    def paused(self) -> set[TopicPartition]:
        """The partitions paused with `pause()`."""
        return self.subscription_state.paused()


async def iterate_records(
    getmany: Callable[..., Awaitable[dict[TopicPartition, list[ConsumerRecord]]]],
    consumer_timeout_ms: float,
    clock_s: Callable[[], float],
) -> AsyncIterator[ConsumerRecord]:
    """Records from `getmany` until `consumer_timeout_ms` (on `clock_s`, monotonic
    seconds) passes without one, or the consumer is stopped (as aiokafka's `async for`
    ends)."""
    idle_since = clock_s()
    while True:
        try:
            batch = await getmany(timeout_ms=int(min(1000, consumer_timeout_ms)))
        except ConsumerStoppedError:
            return
        if not batch:
            if (clock_s() - idle_since) * 1000 >= consumer_timeout_ms:
                return
            continue
        for records in batch.values():
            for record in records:
                yield record
        idle_since = clock_s()
