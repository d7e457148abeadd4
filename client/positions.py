"""The consumer's positions and offset queries: seeks, `position`, beginning and end
offsets, offsets by timestamp, topics and partitions.

Seeks change a partition's state (`client.subscription`); lookups go through
`OffsetLookup` (ListOffsets, retried while a new leader has no offset yet). A lookup that
completes after the user sought again is dropped: the user's last seek wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from client.consumer_config import PartitionArg, check_timestamps, partition_args, topic_partition
from client.errors import (
    CorruptRecordError,
    IllegalStateError,
    NoOffsetForPartitionError,
    RecordDeserializationError,
)
from client.offset_lookup import OffsetLookup
from client.offset_rules import EARLIEST, LATEST
from client.records import OffsetAndTimestamp, TopicPartition
from client.subscription import FetchStatus, SubscriptionState
from client.transport import BrokerConnections, check_topic_name
from minikafka.errors import ErrorCode


class ConsumerPositions:
    """Positions of one consumer's partitions; `offsets` and `conn` exist once the
    consumer started (`wake` wakes its fetcher)."""

    def __init__(self, subscription: SubscriptionState, wake: Callable[[], None]) -> None:
        self.subscription = subscription
        self.wake = wake
        self.offsets: OffsetLookup | None = None
        self.conn: BrokerConnections | None = None

    def _lookup_service(self) -> OffsetLookup:
        if self.offsets is None:
            raise IllegalStateError("call `await consumer.start()` first")
        return self.offsets

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {type(offset).__name__} {offset!r}")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        state = self.subscription.state(topic_partition(partition, "seek()"))
        state.seeks += 1
        state.seek(offset, -1)
        self.wake()

    async def seek_to(self, which: int, partitions: Sequence[PartitionArg]) -> None:
        """`seek_to_beginning` (EARLIEST) / `seek_to_end` (LATEST) of `partitions` (all
        assigned when none are given)."""
        what = "seek_to_beginning()" if which == EARLIEST else "seek_to_end()"
        tps = partition_args(partitions, what) or list(self.subscription.assignment)
        states = {tp: self.subscription.state(tp) for tp in tps}  # unassigned: fail first
        seeks: dict[TopicPartition, int] = {}
        for tp, state in states.items():
            state.seeks += 1
            seeks[tp] = state.seeks
        found = await self._lookup_service().lookup({tp: which for tp in tps})
        for tp, answer in found.items():
            # Still assigned (the same state) and not sought again since: the user's seek
            # wins over an automatic reset that completed meanwhile.
            current = self.subscription.assignment.get(tp)
            if current is states[tp] and current.seeks == seeks[tp]:
                current.seek(answer.offset, -1)
        self.wake()

    async def position(self, partition: TopicPartition) -> int:
        tp = topic_partition(partition, "position()")
        state = self.subscription.state(tp)
        if state.error is not None and not isinstance(
            state.error, RecordDeserializationError | CorruptRecordError
        ):
            raise state.error  # (at those two, the position is the offset it stopped at)
        if state.status is FetchStatus.NO_POSITION:
            raise NoOffsetForPartitionError(tp)
        if state.status is FetchStatus.AWAITING_RESET and state.reset_to is not None:
            which, generation = state.reset_to, state.generation
            found = await self._lookup_service().lookup({tp: which})
            state = self.subscription.state(tp)
            if state.reset_to == which and state.generation == generation:
                state.seek(found[tp].offset, -1)
                self.wake()
            if state.error is not None:
                raise state.error
        return state.position()

    def highwater(self, partition: TopicPartition) -> int | None:
        hw = self.subscription.state(partition).high_watermark
        return hw if hw >= 0 else None

    async def offsets_at(
        self, which: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """EARLIEST (log start) or LATEST (high watermark) offsets of `partitions`."""
        what = "beginning_offsets()" if which == EARLIEST else "end_offsets()"
        tps = partition_args([partitions], what)
        found = await self._lookup_service().lookup(dict.fromkeys(tps, which))
        return {tp: answer.offset for tp, answer in found.items()}

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        found = await self._lookup_service().lookup(check_timestamps(timestamps))
        return {tp: answer if answer.offset >= 0 else None for tp, answer in found.items()}

    async def topics(self) -> set[str]:
        assert self.conn is not None
        view = await self.conn.fetch_view([])
        return {name for name, info in view.topics.items() if info.error_code == ErrorCode.NONE}

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        assert self.conn is not None
        check_topic_name(topic)
        found = self.conn.view.partitions_for(topic)
        if found is None:
            found = (await self.conn.fetch_view([topic])).partitions_for(topic)
        return None if found is None else set(found)


__all__ = ["EARLIEST", "LATEST", "ConsumerPositions"]
