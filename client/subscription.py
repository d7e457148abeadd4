"""What the consumer reads: the subscription or assignment, and each assigned
partition's state (touched only on the consumer's event loop).

Each partition has an explicit `FetchStatus` (Kafka's `SubscriptionState` keeps the same
kind of state machine per partition):

    AWAITING_RESET --(offset looked up)--> FETCHING
    NO_POSITION    --(seek)--------------> FETCHING      (auto_offset_reset="none")
    FETCHING       --(out of range)------> AWAITING_RESET, or FAILED with "none"
    FETCHING       --(truncation, corrupt batch, failing deserializer, definite error)
                   ----------------------> FAILED         (sticky until a seek)
    any            --(seek / seek_to_*)--> FETCHING / AWAITING_RESET

`paused` is the user's pause (`pause()` / `resume()`), orthogonal to the status as in
Kafka: a paused partition keeps its position and buffered data but is neither fetched
nor handed out. `error` is the FAILED status's error (the records buffered below
`stop_offset` are handed out before it is raised), or, in another status, an error to
report once (a definite fetch error: the fetch is tried again after `retry_backoff_ms`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence

from client.consumer_config import partition_args, topic_names, topic_partition
from client.errors import IllegalStateError, KafkaConfigurationError
from client.metadata import ClusterView
from client.records import ConsumerRecord, TopicPartition


class FetchStatus(enum.Enum):
    #: The position must be looked up (`reset_to`: EARLIEST, LATEST).
    AWAITING_RESET = "awaiting-reset"
    #: No position and no reset policy: `NoOffsetForPartitionError` until a seek.
    NO_POSITION = "no-position"
    #: The position is known: the partition is fetched.
    FETCHING = "fetching"
    #: Stopped at `error` (truncation, out of range, corrupt batch, ...) until a seek.
    FAILED = "failed"


class PartitionState:
    """One assigned partition: status, position and the fetched data not handed out."""

    __slots__ = (
        "consumed_epoch",
        "error",
        "fetch_epoch",
        "fetch_offset",
        "generation",
        "high_watermark",
        "in_flight",
        "paused",
        "raw",
        "records",
        "records_index",
        "reset_to",
        "retry_after",
        "seeks",
        "status",
        "stop_offset",
    )

    def __init__(self, reset_to: int | None) -> None:
        self.status = FetchStatus.NO_POSITION if reset_to is None else FetchStatus.AWAITING_RESET
        #: EARLIEST / LATEST while AWAITING_RESET.
        self.reset_to = reset_to
        self.paused = False
        self.error: BaseException | None = None
        #: FAILED: records at offsets below this are still handed out, then `error`.
        self.stop_offset = -1
        #: The next offset to fetch, and the leader epoch of the last batch fetched.
        #: The position (next offset to hand out) is `position()`.
        self.fetch_offset = -1
        self.fetch_epoch = -1
        self.consumed_epoch = -1
        #: Counts position changes (seeks and resets): a fetch or lookup made before the
        #: latest change is dropped.
        self.generation = 0
        #: Explicit seeks by the user (`generation` also counts automatic resets): a
        #: `seek_to_*` lookup applies only if no later seek came in the meantime.
        self.seeks = 0
        self.high_watermark = -1
        self.in_flight = False
        #: Fetched responses not decoded yet: (records bytes, offset they start from).
        self.raw: list[tuple[bytes, int]] = []
        #: Decoded records not handed out yet (from `records_index` on).
        self.records: list[ConsumerRecord] = []
        self.records_index = 0
        #: Monotonic seconds before which the partition is not fetched (back-off).
        self.retry_after = 0.0

    def position(self) -> int:
        """The offset of the next record to hand out (-1: none known)."""
        if self.records_index < len(self.records):
            return self.records[self.records_index].offset
        if self.raw:
            return self.raw[0][1]
        return self.fetch_offset

    def seek(self, offset: int, epoch: int) -> None:
        """Go to `offset` (`epoch`: the leader epoch it is known under, or -1)."""
        self.generation += 1
        self.status = FetchStatus.FETCHING
        self.fetch_offset = offset
        self.fetch_epoch = epoch
        self.consumed_epoch = epoch
        self.raw.clear()
        self.records = []
        self.records_index = 0
        self.reset_to = None
        self.error = None
        self.retry_after = 0.0

    def await_reset(self, which: int) -> None:
        """Look the position up again (EARLIEST / LATEST)."""
        self.generation += 1
        self.status = FetchStatus.AWAITING_RESET
        self.reset_to = which

    def fail(self, error: BaseException, stop_offset: int) -> None:
        """Stop at `error` until the user seeks; the records buffered below
        `stop_offset` are still handed out first."""
        self.status = FetchStatus.FAILED
        self.error = error
        self.stop_offset = stop_offset

    def fetchable(self, now: float, max_buffered: int) -> bool:
        """Whether a fetch may be sent for this partition now."""
        return (
            self.status is FetchStatus.FETCHING
            and not self.paused
            and not self.in_flight
            and self.error is None
            and len(self.raw) < max_buffered
            and self.retry_after <= now
        )


class SubscriptionState:
    """The subscribed topics or the user's assignment (never both), and the state of
    every assigned partition. `default_reset` is where a new partition starts (EARLIEST
    / LATEST, None: no position until a seek)."""

    def __init__(self, topics: Iterable[str], default_reset: int | None) -> None:
        self.topics: frozenset[str] = frozenset(topics)
        self.user_assigned = False
        self.default_reset = default_reset
        self.assignment: dict[TopicPartition, PartitionState] = {}
        #: With a group, the coordinator assigns partitions (`client.group`), not metadata.
        self.group_managed = False
        #: subscribe(pattern=...): `topics` is every topic the metadata knows that the
        #: pattern matches in full (internal topics, `__...`, left out, as Kafka does).
        self.pattern: re.Pattern[str] | None = None

    def subscribe_to(self, topics: str | Iterable[str]) -> bool:
        """`subscribe()`'s argument checked and applied; False when it unsubscribed
        (an empty list)."""
        names = topic_names([topics] if isinstance(topics, str) else topics, "subscribe()")
        if not names and not self.user_assigned:
            self.unsubscribe()
            return False
        self.subscribe(names)
        return True

    def assign_partitions(self, partitions: object) -> set[TopicPartition]:
        """`assign()`'s argument checked and applied: the partitions now assigned."""
        if isinstance(partitions, str | TopicPartition) or not isinstance(partitions, Iterable):
            raise TypeError(
                "assign() takes a list of TopicPartition(topic, partition), got "
                f"{type(partitions).__name__} {partitions!r}"
            )
        wanted = {topic_partition(tp, "assign()") for tp in partitions}
        if not wanted and not self.topics:
            self.unsubscribe()
        else:
            self.assign(wanted)
        return wanted

    def update_assignment(self, view: ClusterView) -> None:
        """Subscribed without a group: assign every partition `view` knows of the
        subscribed topics (with a pattern, first the topics it matches)."""
        if self.pattern is not None:
            pattern = self.pattern
            self.topics = frozenset(
                t for t in view.topics if pattern.fullmatch(t) and not t.startswith("__")
            )
        if self.user_assigned or self.group_managed:
            return
        self.set_assignment(
            {
                TopicPartition(topic, partition)
                for topic in self.topics
                for partition in view.partitions_for(topic) or ()
            }
        )

    def subscribe(self, topics: Iterable[str]) -> None:
        if self.user_assigned:
            raise IllegalStateError(
                "subscribe() and assign() are mutually exclusive: this consumer has "
                "partitions assigned with assign(); call unsubscribe() first"
            )
        self.pattern = None
        self.topics = frozenset(topics)

    def assign(self, partitions: set[TopicPartition]) -> None:
        if self.topics:
            raise IllegalStateError(
                "assign() and subscribe() are mutually exclusive: this consumer is "
                f"subscribed to {sorted(self.topics)}; call unsubscribe() first"
            )
        self.user_assigned = True
        self.set_assignment(partitions)

    def subscribe_pattern(self, pattern: str) -> None:
        if self.user_assigned:
            raise IllegalStateError(
                "subscribe() and assign() are mutually exclusive: this consumer has "
                "partitions assigned with assign(); call unsubscribe() first"
            )
        if not isinstance(pattern, str) or not pattern:
            raise KafkaConfigurationError(f"pattern must be a non-empty str, got {pattern!r}")
        try:
            self.pattern = re.compile(pattern)
        except re.error as exc:
            raise KafkaConfigurationError(f"pattern {pattern!r} is not a regex: {exc}") from None
        self.topics = frozenset()

    def unsubscribe(self) -> None:
        self.topics = frozenset()
        self.pattern = None
        self.user_assigned = False
        self.set_assignment(set())

    def set_assignment(self, wanted: set[TopicPartition]) -> None:
        """Keep the state of partitions still wanted; new ones start at `default_reset`,
        added in (topic, partition) order: the fetcher plans its requests in assignment
        order, which must not follow a set's (str hash) order, so a run replays exactly."""
        for tp in list(self.assignment):
            if tp not in wanted:
                del self.assignment[tp]
        for tp in sorted(wanted):
            if tp not in self.assignment:
                self.assignment[tp] = PartitionState(self.default_reset)

    def polled(self, partitions: Sequence[object]) -> set[TopicPartition] | None:
        """The partitions a poll of `partitions` reads (None: every assigned one);
        `IllegalStateError` when nothing is subscribed nor assigned, or one of them
        is not assigned."""
        if not self.topics and not self.user_assigned and self.pattern is None:
            raise IllegalStateError(
                "the consumer is not subscribed to any topic nor assigned any partition: "
                "call subscribe() or assign() first"
            )
        wanted = set(partition_args(partitions, "getmany()")) if partitions else None
        for tp in wanted or ():
            self.state(tp)
        return wanted

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(TopicPartition(tp.topic, tp.partition))
        if state is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return state

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        states = [self.state(tp) for tp in partitions]  # every one assigned, or none paused
        for state in states:
            state.paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        states = [self.state(tp) for tp in partitions]
        for state in states:
            state.paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self.assignment.items() if state.paused}
