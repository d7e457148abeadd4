"""Partition history: what each replayed metadata record changed, kept bounded in memory.

`events_of(before, offset, record, ...)` is PURE: from the state before a record and the
record, the history events it adds (a partition created, a new leader or leader epoch,
an unclean election, ISR shrinks and expands, ELR changes, a partition going offline or
recovering; brokers registering, fenced, unfenced or in controlled shutdown; a new
controller epoch). `PartitionHistory` is the bounded store the controller keeps and
`minikafka timeline` reads through `DescribePartitionHistory`.

Derived in the replay path, not stored in the metadata log: whoever applies records to
the controller's state (`state_machine.replay`, at run time after a commit, on a standby
replaying committed records) calls `PartitionHistory.observe` with the state before each
record, in order; whoever replaces the state wholesale (a snapshot loaded at start-up)
calls `seed`. So the history survives any change of where records come from (journal
today, the Raft log of the controller quorum next), and it needs no record of its own.

Bounds: `events_per_partition_max` events per partition (oldest dropped first),
`events_max` partition events in all (the globally oldest dropped first), and
`broker_events_max` broker and controller events. A dropped event marks the partition's
history as truncated. A deleted topic's history is dropped with it.

The metadata log keeps no time, so an event carries the wall-clock time at which this
controller applied its record; records applied while starting up (replayed from disk)
are marked `replayed` and carry the start-up time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

import msgspec

from controller.model import (
    NO_LEADER,
    BrokerRegistration,
    ClusterState,
    PartitionKey,
    PartitionRegistration,
)
from controller.records import (
    BrokerRecord,
    ControllerEpochRecord,
    PartitionRecord,
    Record,
    RemoveTopicRecord,
)

EVENTS_PER_PARTITION_MAX: Final = 256
EVENTS_MAX: Final = 100_000
BROKER_EVENTS_MAX: Final = 10_000

# Event kinds (the wire carries them as strings: `PartitionHistoryEvent.kinds`).
CREATED: Final = "created"
SNAPSHOT: Final = "snapshot"  # the partition as the controller found it at start-up
LEADER: Final = "leader"  # a new leader or leader epoch
UNCLEAN_ELECTION: Final = "unclean-election"
OFFLINE: Final = "offline"
RECOVERED: Final = "recovered"
ISR_SHRINK: Final = "isr-shrink"
ISR_EXPAND: Final = "isr-expand"
ELR: Final = "elr"
REPLICAS: Final = "replicas"
CHANGED: Final = "changed"  # only the partition epoch moved
BROKER_REGISTERED: Final = "broker-registered"
BROKER_FENCED: Final = "broker-fenced"
BROKER_UNFENCED: Final = "broker-unfenced"
BROKER_CONTROLLED_SHUTDOWN: Final = "broker-controlled-shutdown"
CONTROLLER: Final = "controller"


class HistoryEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One step in a partition's history (or a broker's / the controller's)."""

    metadata_offset: int
    time_ms: int
    replayed: bool = False
    kinds: tuple[str, ...]
    topic: str = ""
    partition: int = -1
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    #: None when the controller's model has no eligible leader replicas (KIP-966).
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    state: str = ""
    previous_leader: int = NO_LEADER
    broker_id: int = -1
    broker_epoch: int = -1
    detail: str = ""

    @property
    def is_partition_event(self) -> bool:
        return self.broker_id < 0 and CONTROLLER not in self.kinds


def _ids(registration: PartitionRegistration, field: str) -> tuple[int, ...] | None:
    """An optional id-list field of a registration (`elr`, `last_known_elr`, KIP-966):
    None while the model does not have it (read by name so that this module works with
    and without those fields)."""
    value = getattr(registration, field, None)
    if value is None:
        return None
    return tuple(int(member) for member in value)


def _partition_kinds(
    before: PartitionRegistration | None, after: PartitionRegistration
) -> list[str]:
    kinds: list[str] = []
    if before is None:
        return [CREATED]
    old_isr, new_isr = set(before.isr), set(after.isr)
    if after.leader == NO_LEADER and before.leader != NO_LEADER:
        kinds.append(OFFLINE)
    elif after.leader != NO_LEADER and (
        after.leader != before.leader or after.leader_epoch != before.leader_epoch
    ):
        kinds.append(LEADER)
        if after.recovering and not before.recovering:
            kinds.append(UNCLEAN_ELECTION)
    if before.recovering and not after.recovering:
        kinds.append(RECOVERED)
    if old_isr - new_isr:
        kinds.append(ISR_SHRINK)
    if new_isr - old_isr:
        kinds.append(ISR_EXPAND)
    if (_ids(before, "elr"), _ids(before, "last_known_elr")) != (
        _ids(after, "elr"),
        _ids(after, "last_known_elr"),
    ):
        kinds.append(ELR)
    if before.replicas != after.replicas:
        kinds.append(REPLICAS)
    return kinds or [CHANGED]


def _describe_partition(
    kinds: Sequence[str], before: PartitionRegistration | None, after: PartitionRegistration
) -> str:
    parts: list[str] = []
    if CREATED in kinds or SNAPSHOT in kinds:
        parts.append(f"replicas {list(after.replicas)}")
    if before is not None:
        if OFFLINE in kinds:
            parts.append(f"leader {before.leader} -> none (offline)")
        elif LEADER in kinds:
            shown = before.leader if before.leader != NO_LEADER else "none"
            parts.append(f"leader {shown} -> {after.leader} at epoch {after.leader_epoch}")
        if UNCLEAN_ELECTION in kinds:
            parts.append(f"UNCLEAN: {after.leader} was not in ISR {list(before.isr)}")
        if before.isr != after.isr:
            parts.append(f"isr {list(before.isr)} -> {list(after.isr)}")
    return "; ".join(parts)


def _partition_event(
    key: PartitionKey,
    before: PartitionRegistration | None,
    after: PartitionRegistration,
    *,
    kinds: list[str],
    offset: int,
    time_ms: int,
    replayed: bool,
) -> HistoryEvent:
    return HistoryEvent(
        metadata_offset=offset,
        time_ms=time_ms,
        replayed=replayed,
        kinds=tuple(kinds),
        topic=key[0],
        partition=key[1],
        leader=after.leader,
        leader_epoch=after.leader_epoch,
        partition_epoch=after.partition_epoch,
        replicas=after.replicas,
        isr=after.isr,
        elr=_ids(after, "elr"),
        last_known_elr=_ids(after, "last_known_elr"),
        state=after.status.value,
        previous_leader=before.leader if before is not None else NO_LEADER,
        detail=_describe_partition(kinds, before, after),
    )


def _broker_kinds(before: BrokerRegistration | None, after: BrokerRegistration) -> list[str]:
    kinds: list[str] = []
    if before is None or before.broker_epoch != after.broker_epoch:
        kinds.append(BROKER_REGISTERED)
    if after.fenced and (before is None or not before.fenced) and BROKER_REGISTERED not in kinds:
        kinds.append(BROKER_FENCED)
    if not after.fenced and (before is None or before.fenced):
        kinds.append(BROKER_UNFENCED)
    if after.in_controlled_shutdown and (before is None or not before.in_controlled_shutdown):
        kinds.append(BROKER_CONTROLLED_SHUTDOWN)
    return kinds


def events_of(
    before: ClusterState, offset: int, record: Record, *, time_ms: int, replayed: bool = False
) -> list[HistoryEvent]:
    """The history events `record` (applied at `offset` onto `before`) adds. PURE."""
    match record:
        case PartitionRecord(topic=topic, partition=partition, registration=after):
            key = (topic, partition)
            old = before.partitions.get(key)
            kinds = _partition_kinds(old, after)
            return [
                _partition_event(
                    key, old, after, kinds=kinds, offset=offset, time_ms=time_ms, replayed=replayed
                )
            ]
        case BrokerRecord(registration=after):
            old_broker = before.brokers.get(after.broker_id)
            broker_kinds = _broker_kinds(old_broker, after)
            if not broker_kinds:
                return []
            return [
                HistoryEvent(
                    metadata_offset=offset,
                    time_ms=time_ms,
                    replayed=replayed,
                    kinds=tuple(broker_kinds),
                    broker_id=after.broker_id,
                    broker_epoch=after.broker_epoch,
                    detail=f"broker {after.broker_id} (epoch {after.broker_epoch}): "
                    + ", ".join(kind.removeprefix("broker-") for kind in broker_kinds),
                )
            ]
        case ControllerEpochRecord(controller_id=controller_id, controller_epoch=epoch):
            return [
                HistoryEvent(
                    metadata_offset=offset,
                    time_ms=time_ms,
                    replayed=replayed,
                    kinds=(CONTROLLER,),
                    detail=f"controller {controller_id} active at controller epoch {epoch}",
                )
            ]
    return []


class PartitionHistory:
    """The bounded store of history events (the shell's; single-threaded, like replay)."""

    def __init__(
        self,
        *,
        wall_ms: Callable[[], int],
        events_per_partition_max: int = EVENTS_PER_PARTITION_MAX,
        events_max: int = EVENTS_MAX,
        broker_events_max: int = BROKER_EVENTS_MAX,
    ) -> None:
        self._wall_ms = wall_ms
        self._per_partition_max = events_per_partition_max
        self._events_max = events_max
        self._partitions: dict[PartitionKey, deque[tuple[int, HistoryEvent]]] = {}
        #: Every stored partition event in arrival order: (key, sequence number).
        self._order: deque[tuple[PartitionKey, int]] = deque()
        self._truncated: set[PartitionKey] = set()
        self._brokers: deque[HistoryEvent] = deque(maxlen=broker_events_max)
        self._sequence = 0
        self._count = 0

    def seed(self, state: ClusterState, *, replayed: bool = True) -> None:
        """Start from `state` as a whole (loaded at start-up, or a snapshot): one
        `snapshot` event per partition. Earlier history of those partitions is unknown,
        so their history counts as truncated."""
        now_ms = self._wall_ms()
        for key in sorted(state.partitions):
            registration = state.partitions[key]
            self._add(
                key,
                _partition_event(
                    key,
                    None,
                    registration,
                    kinds=[SNAPSHOT],
                    offset=state.metadata_offset,
                    time_ms=now_ms,
                    replayed=replayed,
                ),
            )
            self._truncated.add(key)

    def observe(
        self, before: ClusterState, offset: int, record: Record, *, replayed: bool = False
    ) -> None:
        """Record what `record` (applied at `offset` onto `before`) changed."""
        if isinstance(record, RemoveTopicRecord):
            self._forget_topic(record.name)
            return
        for event in events_of(before, offset, record, time_ms=self._wall_ms(), replayed=replayed):
            if event.is_partition_event:
                self._add((event.topic, event.partition), event)
            else:
                self._brokers.append(event)

    def events(self, topic: str, partition: int) -> tuple[list[HistoryEvent], bool]:
        """The partition's events merged with the events of every broker that was ever
        one of its replicas and of the controller, in metadata-offset order; and whether
        older events are missing. Empty when the partition is unknown."""
        key = (topic, partition)
        stored = [event for _, event in self._partitions.get(key, ())]
        if not stored:
            return [], False
        brokers = {replica for event in stored for replica in event.replicas}
        first = stored[0].metadata_offset
        others = [
            event
            for event in self._brokers
            if event.metadata_offset >= first
            and (event.broker_id in brokers or event.broker_id < 0)
        ]
        merged = sorted([*stored, *others], key=lambda event: event.metadata_offset)
        return merged, key in self._truncated

    def _add(self, key: PartitionKey, event: HistoryEvent) -> None:
        events = self._partitions.setdefault(key, deque())
        self._sequence += 1
        events.append((self._sequence, event))
        self._order.append((key, self._sequence))
        self._count += 1
        if len(events) > self._per_partition_max:
            events.popleft()
            self._count -= 1
            self._truncated.add(key)
        while self._count > self._events_max and self._order:
            oldest_key, sequence = self._order.popleft()
            oldest = self._partitions.get(oldest_key)
            if oldest and oldest[0][0] == sequence:
                oldest.popleft()
                self._count -= 1
                self._truncated.add(oldest_key)
        # Entries of `_order` whose events left already are skipped when reached; keep
        # the deque from growing past twice the bound with them.
        if len(self._order) > 2 * self._events_max:
            live = {(k, seq) for k, q in self._partitions.items() for seq, _ in q}
            self._order = deque(item for item in self._order if item in live)

    def _forget_topic(self, name: str) -> None:
        for key in [key for key in self._partitions if key[0] == name]:
            self._count -= len(self._partitions.pop(key))
            self._truncated.discard(key)
