"""PURE controller state machine: request handlers return (records to journal, reply).

Like Kafka's `QuorumController` control managers answering with `ControllerResult`: a
handler reads the current `ClusterState`, decides, and returns the records that express the
decision plus the reply to send once those records are durable. The state itself changes
only through `replay(state, offset, record)`, both at run time (after the journal write)
and at start-up (journal replay), so the two can never disagree.

Broker lifecycle (journaled in `BrokerRegistration`):
    register -> fenced; heartbeat after catching up on metadata -> unfenced;
    ControlledShutdown -> in_controlled_shutdown (leaderships moved, out of ISRs);
    session timeout or heartbeat with want_shutdown -> fenced (out of every ISR but the last
    member, leaderships moved or the partition left leaderless).

Liveness (heartbeat deadlines) and what brokers have acknowledged are not journaled; the
shell passes them in (`session_alive`, `caught_up_offset`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Generic, TypeVar

import msgspec

from controller.election import ElectionMode, elect_leader
from controller.model import (
    NO_LEADER,
    BrokerRegistration,
    ClusterState,
    PartitionKey,
    PartitionRegistration,
    TopicRecord,
)
from controller.partition_change import ElectionKind, PartitionChange, build_partition_change
from controller.placement import assign_replicas
from controller.records import (
    BrokerRecord,
    ClusterIdRecord,
    ControllerEpochRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RemoveTopicRecord,
    TopicUpsertRecord,
)
from controller.topic_config import (
    TOPIC_CONFIGS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    min_insync_replicas,
    unclean_leader_election_enabled,
    validate_topic_configs,
    validate_topic_name,
)
from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.topic_config import colliding_topic

DELETED_TOPICS_REMEMBERED: Final = 1000
PRODUCER_EPOCH_MAX: Final = 32767  # Kafka's producer epoch is an int16

T = TypeVar("T")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """The part of `ControllerConfig` that decisions depend on."""

    controller_id: int = 0
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    leader_imbalance_per_broker_percentage: int = 10


class ElectionEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A new leader was elected (for metrics and the state-change log)."""

    topic: str
    partition: int
    kind: ElectionKind
    leader: int
    previous_leader: int
    leader_epoch: int


class ControllerResult(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    records: tuple[Record, ...] = ()
    reply: T
    elections: tuple[ElectionEvent, ...] = ()
    warnings: tuple[str, ...] = ()  # logged at WARNING once the records are durable


# ---- replies ---------------------------------------------------------------------------


class RegisterReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    broker_epoch: int = -1


class HeartbeatReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorCode = ErrorCode.NONE
    is_fenced: bool = True
    should_shut_down: bool = False


class AlterPartitionItem(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


class AlterPartitionItemResult(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    error: ErrorCode = ErrorCode.NONE
    registration: PartitionRegistration | None = None


class AlterPartitionReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorCode = ErrorCode.NONE
    items: tuple[AlterPartitionItemResult, ...] = ()


class ControlledShutdownReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorCode = ErrorCode.NONE
    remaining: tuple[PartitionKey, ...] = ()


class NewTopic(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    num_partitions: int = -1  # -1: the controller default
    replication_factor: int = -1  # -1: the controller default
    configs: dict[str, str] = msgspec.field(default_factory=dict)


class TopicResult(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str = ""


class ElectionType(enum.Enum):
    PREFERRED = "preferred"
    UNCLEAN = "unclean"


class ElectionOutcome(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    leader: int = NO_LEADER


class ConfigReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorCode = ErrorCode.NONE
    message: str = ""


class ProducerIdReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorCode = ErrorCode.NONE
    producer_id: int = -1
    producer_epoch: int = -1


# ---- replay ------------------------------------------------------------------------------


def replay(state: ClusterState, offset: int, record: Record) -> ClusterState:
    """The state after applying `record`, journaled at `offset` (offsets only grow)."""
    replace = msgspec.structs.replace
    state = replace(state, metadata_offset=max(state.metadata_offset, offset))
    match record:
        case ClusterIdRecord(cluster_id=cluster_id):
            return replace(state, cluster_id=cluster_id)
        case ControllerEpochRecord(controller_id=controller_id, controller_epoch=epoch):
            assert epoch > state.controller_epoch, "controller epochs never go backwards"
            return replace(state, controller_id=controller_id, controller_epoch=epoch)
        case BrokerRecord(registration=registration):
            brokers = {**state.brokers, registration.broker_id: registration}
            offsets = {**state.broker_offsets, registration.broker_id: offset}
            return replace(
                state,
                brokers=brokers,
                broker_offsets=offsets,
                last_broker_epoch=max(state.last_broker_epoch, registration.broker_epoch),
            )
        case TopicUpsertRecord(topic=topic):
            deleted = tuple(name for name in state.deleted_topics if name != topic.name)
            return replace(
                state, topics={**state.topics, topic.name: topic}, deleted_topics=deleted
            )
        case PartitionRecord(topic=topic, partition=partition, registration=registration):
            assert topic in state.topics, f"partition of unknown topic {topic}"
            partitions = {**state.partitions, (topic, partition): registration}
            return replace(state, partitions=partitions)
        case RemoveTopicRecord(name=name):
            topics = {key: value for key, value in state.topics.items() if key != name}
            partitions = {key: value for key, value in state.partitions.items() if key[0] != name}
            deleted = (*(n for n in state.deleted_topics if n != name), name)
            return replace(
                state,
                topics=topics,
                partitions=partitions,
                deleted_topics=deleted[-DELETED_TOPICS_REMEMBERED:],
            )
        case ProducerIdsRecord(next_producer_id=next_id):
            return replace(state, next_producer_id=max(state.next_producer_id, next_id))
    raise AssertionError(f"unknown record {record!r}")


def snapshot_records(state: ClusterState) -> list[Record]:
    """Records that rebuild `state` when replayed onto an empty state (at one offset)."""
    records: list[Record] = []
    if state.cluster_id:
        records.append(ClusterIdRecord(cluster_id=state.cluster_id))
    if state.controller_epoch:
        records.append(
            ControllerEpochRecord(
                controller_id=state.controller_id, controller_epoch=state.controller_epoch
            )
        )
    records.append(ProducerIdsRecord(next_producer_id=state.next_producer_id))
    records.extend(BrokerRecord(registration=state.brokers[b]) for b in sorted(state.brokers))
    records.extend(RemoveTopicRecord(name=name) for name in state.deleted_topics)
    records.extend(TopicUpsertRecord(topic=state.topics[t]) for t in sorted(state.topics))
    records.extend(
        PartitionRecord(topic=key[0], partition=key[1], registration=state.partitions[key])
        for key in sorted(state.partitions)
    )
    return records


def bootstrap(state: ClusterState, *, controller_id: int, new_cluster_id: str) -> list[Record]:
    """Records journaled at every controller start: cluster id once, a new controller epoch."""
    records: list[Record] = []
    if not state.cluster_id:
        records.append(ClusterIdRecord(cluster_id=new_cluster_id))
    records.append(
        ControllerEpochRecord(
            controller_id=controller_id, controller_epoch=state.controller_epoch + 1
        )
    )
    return records


# ---- shared helpers ------------------------------------------------------------------------


class _Changes:
    """Accumulates partition changes of one request; later changes see earlier ones."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.partitions: dict[PartitionKey, PartitionRegistration] = {}
        self.elections: list[ElectionEvent] = []
        self.warnings: list[str] = []

    def current(self, key: PartitionKey) -> PartitionRegistration:
        return self.partitions.get(key) or self.state.partitions[key]

    def apply(self, key: PartitionKey, change: PartitionChange | None) -> PartitionRegistration:
        old = self.current(key)
        if change is None:
            return old
        new = change.registration
        self.partitions[key] = new
        if change.election is not None:
            self.elections.append(
                ElectionEvent(
                    topic=key[0],
                    partition=key[1],
                    kind=change.election,
                    leader=new.leader,
                    previous_leader=old.leader,
                    leader_epoch=new.leader_epoch,
                )
            )
        return new

    def records(self) -> list[Record]:
        return [
            PartitionRecord(topic=key[0], partition=key[1], registration=registration)
            for key, registration in sorted(self.partitions.items())
        ]


def _topic_configs(state: ClusterState, topic: str) -> Mapping[str, str]:
    record = state.topics.get(topic)
    return record.configs if record is not None else {}


def _min_isr(state: ClusterState, settings: Settings, topic: str) -> int:
    return min_insync_replicas(_topic_configs(state, topic), default=settings.min_insync_replicas)


def _automatic_mode(state: ClusterState, settings: Settings, topic: str) -> ElectionMode:
    """ONLINE, or UNCLEAN when the topic allows electing an out-of-sync replica."""
    allowed = unclean_leader_election_enabled(
        _topic_configs(state, topic), default=settings.unclean_leader_election_enable
    )
    return ElectionMode.UNCLEAN if allowed else ElectionMode.ONLINE


def _partitions_of_broker(state: ClusterState, broker_id: int) -> list[PartitionKey]:
    return sorted(key for key, part in state.partitions.items() if broker_id in part.replicas)


def _without(isr: Sequence[int], broker_id: int) -> tuple[int, ...]:
    """The ISR without `broker_id`, except that the last member always stays."""
    remaining = tuple(member for member in isr if member != broker_id)
    return remaining if remaining else tuple(isr)


def _remove_broker(
    state: ClusterState,
    settings: Settings,
    broker_id: int,
    *,
    alive: frozenset[int],
    reason: str,
    recover_last_member: bool = False,
) -> _Changes:
    """Take `broker_id` out of every ISR (not the last member) and move its leaderships.

    With `recover_last_member` (an unclean restart), a partition whose last ISR member is
    this broker is marked RECOVERING: its log may have lost an unflushed tail.
    """
    changes = _Changes(state)
    for key in _partitions_of_broker(state, broker_id):
        current = changes.current(key)
        mark_recovering = recover_last_member and current.isr == (broker_id,)
        if mark_recovering:
            changes.warnings.append(
                f"partition {key[0]}-{key[1]}: broker {broker_id} restarted after an unclean "
                "stop and is the last in-sync replica; keeping it (last replica standing) and "
                "marking the partition RECOVERING: records it had not flushed may be lost"
            )
        change = build_partition_change(
            current,
            alive=alive - {broker_id},
            min_insync_replicas=_min_isr(state, settings, key[0]),
            mode=_automatic_mode(state, settings, key[0]),
            target_isr=_without(current.isr, broker_id),
            mark_recovering=mark_recovering,
        )
        changes.apply(key, change)
        if change is not None and change.registration.leader == NO_LEADER != current.leader:
            changes.warnings.append(
                f"partition {key[0]}-{key[1]} is offline: broker {broker_id} ({reason}) led it "
                f"and no other in-sync replica is available (ISR {list(current.isr)})"
            )
    return changes


def _elect_leaderless(
    state: ClusterState, settings: Settings, keys: Iterable[PartitionKey], *, alive: frozenset[int]
) -> _Changes:
    changes = _Changes(state)
    for key in keys:
        current = changes.current(key)
        if current.leader != NO_LEADER:
            continue
        changes.apply(
            key,
            build_partition_change(
                current,
                alive=alive,
                min_insync_replicas=_min_isr(state, settings, key[0]),
                mode=_automatic_mode(state, settings, key[0]),
            ),
        )
    return changes


def _check_broker(state: ClusterState, broker_id: int, broker_epoch: int) -> ErrorCode:
    broker = state.brokers.get(broker_id)
    if broker is None:
        return ErrorCode.BROKER_ID_NOT_REGISTERED
    if broker.broker_epoch != broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    return ErrorCode.NONE


# ---- broker lifecycle ----------------------------------------------------------------------


def register_broker(
    state: ClusterState,
    settings: Settings,
    *,
    broker_id: int,
    host: str,
    port: int,
    rack: str,
    incarnation_id: str,
    clean_shutdown: bool,
    session_alive: bool,
    external_host: str = "",
    external_port: int = 0,
) -> ControllerResult[RegisterReply]:
    """Register (or re-register) a broker with a new epoch; it starts fenced.

    `session_alive`: the id's current session has not expired. Another incarnation is then
    refused (two processes must never share a broker id). Leaderships of the id are stale
    and move; after an unclean stop it also leaves every ISR (last member: RECOVERING).
    """

    def refuse(code: ErrorCode, message: str) -> ControllerResult[RegisterReply]:
        return ControllerResult(reply=RegisterReply(error=code, message=message))

    if broker_id < 0:
        return refuse(ErrorCode.INVALID_REQUEST, f"broker id {broker_id} is negative")
    if not host or not 0 < port <= 65535:
        return refuse(ErrorCode.INVALID_REQUEST, f"invalid broker endpoint {host!r}:{port}")
    if not incarnation_id:
        return refuse(ErrorCode.INVALID_REQUEST, "incarnation_id is empty")
    existing = state.brokers.get(broker_id)
    if existing is not None and session_alive and existing.incarnation_id != incarnation_id:
        return refuse(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            f"broker {broker_id} is already registered by incarnation {existing.incarnation_id} "
            "whose session has not expired",
        )
    registration = BrokerRegistration(
        broker_id=broker_id,
        host=host,
        port=port,
        rack=rack,
        external_host=external_host,
        external_port=external_port,
        incarnation_id=incarnation_id,
        broker_epoch=state.last_broker_epoch + 1,
        fenced=True,
    )
    if clean_shutdown:
        # After a clean stop the log is whole: it stays in the ISRs it is still part of and
        # only its (stale) leaderships move until it is unfenced again.
        changes = _Changes(state)
        for key in _partitions_of_broker(state, broker_id):
            current = state.partitions[key]
            if current.leader == broker_id:
                changes.apply(
                    key,
                    build_partition_change(
                        current,
                        alive=state.eligible_brokers() - {broker_id},
                        min_insync_replicas=_min_isr(state, settings, key[0]),
                        mode=_automatic_mode(state, settings, key[0]),
                    ),
                )
    else:
        changes = _remove_broker(
            state,
            settings,
            broker_id,
            alive=state.eligible_brokers(),
            reason="restarted after an unclean stop",
            recover_last_member=True,
        )
    return ControllerResult(
        records=(BrokerRecord(registration=registration), *changes.records()),
        reply=RegisterReply(broker_epoch=registration.broker_epoch),
        elections=tuple(changes.elections),
        warnings=tuple(changes.warnings),
    )


def heartbeat(
    state: ClusterState,
    settings: Settings,
    *,
    broker_id: int,
    broker_epoch: int,
    want_shutdown: bool,
    caught_up_offset: int,
) -> ControllerResult[HeartbeatReply]:
    """Liveness is the shell's business; here: unfence a caught-up broker, fence a leaving one.

    `caught_up_offset`: the newest metadata offset the broker is known to have applied
    (reported in the heartbeat or acknowledged to the dispatcher).
    """
    error = _check_broker(state, broker_id, broker_epoch)
    if error is not ErrorCode.NONE:
        return ControllerResult(reply=HeartbeatReply(error=error))
    broker = state.brokers[broker_id]
    if want_shutdown:
        result = fence_broker(state, settings, broker_id=broker_id, reason="shutting down")
        return ControllerResult(
            records=result.records,
            reply=HeartbeatReply(is_fenced=True, should_shut_down=True),
            elections=result.elections,
            warnings=result.warnings,
        )
    caught_up = caught_up_offset >= state.broker_offsets.get(broker_id, 0)
    if broker.fenced and not broker.in_controlled_shutdown and caught_up:
        unfenced = msgspec.structs.replace(broker, fenced=False)
        changes = _elect_leaderless(
            state,
            settings,
            _partitions_of_broker(state, broker_id),
            alive=state.eligible_brokers() | {broker_id},
        )
        return ControllerResult(
            records=(BrokerRecord(registration=unfenced), *changes.records()),
            reply=HeartbeatReply(is_fenced=False),
            elections=tuple(changes.elections),
            warnings=tuple(changes.warnings),
        )
    return ControllerResult(reply=HeartbeatReply(is_fenced=broker.fenced))


def fence_broker(
    state: ClusterState, settings: Settings, *, broker_id: int, reason: str
) -> ControllerResult[None]:
    """Fence a broker whose session expired (or that is leaving): ISRs and leaderships."""
    broker = state.brokers.get(broker_id)
    if broker is None or broker.fenced:
        return ControllerResult(reply=None)
    changes = _remove_broker(
        state, settings, broker_id, alive=state.eligible_brokers(), reason=reason
    )
    fenced = msgspec.structs.replace(broker, fenced=True)
    return ControllerResult(
        records=(BrokerRecord(registration=fenced), *changes.records()),
        reply=None,
        elections=tuple(changes.elections),
        warnings=tuple(changes.warnings),
    )


def controlled_shutdown(
    state: ClusterState, settings: Settings, *, broker_id: int, broker_epoch: int
) -> ControllerResult[ControlledShutdownReply]:
    """Move the broker's leaderships to other ISR members and take it out of ISRs.

    A partition whose ISR holds no other acceptable leader keeps this broker as leader (and
    in its ISR) and is reported in `remaining`; the broker may retry.
    """
    error = _check_broker(state, broker_id, broker_epoch)
    if error is not ErrorCode.NONE:
        return ControllerResult(reply=ControlledShutdownReply(error=error))
    broker = state.brokers[broker_id]
    if broker.fenced:
        return ControllerResult(reply=ControlledShutdownReply())
    alive = state.eligible_brokers() - {broker_id}
    changes = _Changes(state)
    remaining: list[PartitionKey] = []
    for key in _partitions_of_broker(state, broker_id):
        current = state.partitions[key]
        target_isr = _without(current.isr, broker_id)
        if current.leader == broker_id:
            successor = elect_leader(
                assignment=current.replicas,
                isr=target_isr,
                alive=alive,
                current_leader=NO_LEADER,
                mode=ElectionMode.ONLINE,
            )
            if successor.leader == NO_LEADER or target_isr == current.isr:
                remaining.append(key)
                continue
        changes.apply(
            key,
            build_partition_change(
                current,
                alive=alive,
                min_insync_replicas=_min_isr(state, settings, key[0]),
                target_isr=target_isr,
            ),
        )
    records: list[Record] = []
    if not broker.in_controlled_shutdown:
        shutting = msgspec.structs.replace(broker, in_controlled_shutdown=True)
        records.append(BrokerRecord(registration=shutting))
    return ControllerResult(
        records=(*records, *changes.records()),
        reply=ControlledShutdownReply(remaining=tuple(remaining)),
        elections=tuple(changes.elections),
    )


def alter_partition(
    state: ClusterState,
    settings: Settings,
    *,
    broker_id: int,
    broker_epoch: int,
    items: Sequence[AlterPartitionItem],
) -> ControllerResult[AlterPartitionReply]:
    """ISR changes proposed by leaders, validated against leader and partition epochs."""
    error = _check_broker(state, broker_id, broker_epoch)
    if error is not ErrorCode.NONE:
        return ControllerResult(reply=AlterPartitionReply(error=error))
    eligible = state.eligible_brokers()
    changes = _Changes(state)
    results: list[AlterPartitionItemResult] = []
    for item in items:
        key = (item.topic, item.partition)

        def fail(code: ErrorCode, item: AlterPartitionItem = item) -> None:
            results.append(
                AlterPartitionItemResult(topic=item.topic, partition=item.partition, error=code)
            )

        if key not in state.partitions:
            fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        current = changes.current(key)
        if current.leader != broker_id:
            fail(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            continue
        if item.leader_epoch != current.leader_epoch:
            fail(ErrorCode.FENCED_LEADER_EPOCH)
            continue
        if item.partition_epoch != current.partition_epoch:
            fail(ErrorCode.INVALID_UPDATE_VERSION)
            continue
        new_isr = set(item.new_isr)
        if (
            broker_id not in new_isr
            or len(new_isr) != len(item.new_isr)
            or not new_isr <= set(current.replicas)
        ):
            fail(ErrorCode.INVALID_REQUEST)
            continue
        if not (new_isr - set(current.isr)) <= eligible:
            fail(ErrorCode.INELIGIBLE_REPLICA)
            continue
        new = changes.apply(
            key,
            build_partition_change(
                current,
                alive=eligible | {broker_id},
                min_insync_replicas=_min_isr(state, settings, item.topic),
                target_isr=new_isr,
            ),
        )
        assert new.leader == broker_id
        results.append(
            AlterPartitionItemResult(topic=item.topic, partition=item.partition, registration=new)
        )
    return ControllerResult(
        records=tuple(changes.records()),
        reply=AlterPartitionReply(items=tuple(results)),
        elections=tuple(changes.elections),
    )


# ---- topics and configs ----------------------------------------------------------------------


def create_topics(
    state: ClusterState, settings: Settings, *, topics: Sequence[NewTopic], validate_only: bool
) -> ControllerResult[tuple[TopicResult, ...]]:
    """Validate and place new topics: leader = first replica, ISR = all replicas, epochs 0."""
    racks = {b: state.brokers[b].rack for b in sorted(state.eligible_brokers())}
    counts: dict[str, int] = {}
    for topic in topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    records: list[Record] = []
    results: list[TopicResult] = []
    accepted: list[str] = []
    for topic in topics:
        try:
            validate_topic_name(topic.name)
            if counts[topic.name] > 1:
                raise MiniKafkaError(
                    f"topic {topic.name!r} appears more than once in the request",
                    code=ErrorCode.INVALID_REQUEST,
                )
            if topic.name in state.topics:
                raise MiniKafkaError(
                    f"topic {topic.name!r} already exists", code=ErrorCode.TOPIC_ALREADY_EXISTS
                )
            collision = colliding_topic(topic.name, [*state.topics, *accepted])
            if collision is not None:
                raise MiniKafkaError(
                    f"topic {topic.name!r} collides with existing topic {collision!r} "
                    "('.' and '_' are the same character in metric names)",
                    code=ErrorCode.INVALID_TOPIC_EXCEPTION,
                )
            num_partitions = topic.num_partitions
            if num_partitions == -1:
                num_partitions = settings.num_partitions
            replication_factor = topic.replication_factor
            if replication_factor == -1:
                replication_factor = settings.default_replication_factor
            assignment = assign_replicas(
                topic=topic.name,
                broker_racks=racks,
                num_partitions=num_partitions,
                replication_factor=replication_factor,
            )
            configs = validate_topic_configs(topic.configs, replication_factor=replication_factor)
        except MiniKafkaError as error:
            results.append(TopicResult(name=topic.name, error=error.code, message=error.message))
            continue
        results.append(TopicResult(name=topic.name))
        accepted.append(topic.name)
        if validate_only:
            continue
        records.append(
            TopicUpsertRecord(
                topic=TopicRecord(name=topic.name, num_partitions=num_partitions, configs=configs)
            )
        )
        records.extend(
            PartitionRecord(
                topic=topic.name,
                partition=index,
                registration=PartitionRegistration(
                    replicas=replicas, leader=replicas[0], isr=replicas
                ),
            )
            for index, replicas in enumerate(assignment)
        )
    return ControllerResult(records=tuple(records), reply=tuple(results))


def delete_topics(
    state: ClusterState, *, names: Sequence[str]
) -> ControllerResult[tuple[TopicResult, ...]]:
    records: list[Record] = []
    results: list[TopicResult] = []
    for name in dict.fromkeys(names):
        if name not in state.topics:
            results.append(
                TopicResult(
                    name=name,
                    error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    message=f"topic {name!r} does not exist",
                )
            )
            continue
        records.append(RemoveTopicRecord(name=name))
        results.append(TopicResult(name=name))
    return ControllerResult(records=tuple(records), reply=tuple(results))


def alter_configs(
    state: ClusterState,
    settings: Settings,
    *,
    topic: str,
    set_configs: Mapping[str, str],
    delete_configs: Sequence[str],
    validate_only: bool,
) -> ControllerResult[ConfigReply]:
    """Change a topic's configs with the same validation as at creation.

    Enabling unclean.leader.election.enable elects leaders for the topic's offline
    partitions at once (as Kafka does).
    """
    record = state.topics.get(topic)
    if record is None:
        return ControllerResult(
            reply=ConfigReply(
                error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                message=f"topic {topic!r} does not exist",
            )
        )
    both = sorted(set(set_configs) & set(delete_configs))
    if both:
        return ControllerResult(
            reply=ConfigReply(
                error=ErrorCode.INVALID_REQUEST,
                message=f"configs {both} are both set and deleted",
            )
        )
    unknown = sorted(key for key in delete_configs if key not in TOPIC_CONFIGS)
    if unknown:
        return ControllerResult(
            reply=ConfigReply(
                error=ErrorCode.INVALID_CONFIG, message=f"unknown topic config {unknown[0]!r}"
            )
        )
    merged = {k: v for k, v in record.configs.items() if k not in delete_configs}
    merged.update(set_configs)
    replication_factor = min(
        len(state.partitions[key].replicas) for key in state.topic_partitions(topic)
    )
    try:
        configs = validate_topic_configs(merged, replication_factor=replication_factor)
    except MiniKafkaError as error:
        return ControllerResult(reply=ConfigReply(error=error.code, message=error.message))
    if validate_only or configs == record.configs:
        return ControllerResult(reply=ConfigReply())
    upsert = TopicUpsertRecord(topic=msgspec.structs.replace(record, configs=configs))
    after = replay(state, state.metadata_offset, upsert)
    changes = _Changes(after)
    if UNCLEAN_LEADER_ELECTION_ENABLE in set_configs:
        changes = _elect_leaderless(
            after, settings, after.topic_partitions(topic), alive=after.eligible_brokers()
        )
    return ControllerResult(
        records=(upsert, *changes.records()),
        reply=ConfigReply(),
        elections=tuple(changes.elections),
    )


# ---- elections -------------------------------------------------------------------------------


def elect_leaders(
    state: ClusterState,
    settings: Settings,
    *,
    election_type: ElectionType,
    partitions: Sequence[PartitionKey] | None,
) -> ControllerResult[tuple[ElectionOutcome, ...]]:
    """Operator (or automatic rebalance) elections; `partitions=None` means every partition.

    PREFERRED: the first assigned replica if it is alive and in the ISR.
    UNCLEAN: only for partitions without a leader: any alive replica, even when the topic
    disallows unclean elections (an operator override); the ISR is reset to [leader].
    """
    keys = sorted(state.partitions) if partitions is None else list(dict.fromkeys(partitions))
    eligible = state.eligible_brokers()
    changes = _Changes(state)
    outcomes: list[ElectionOutcome] = []
    for key in keys:
        topic, partition = key
        if key not in state.partitions:
            outcomes.append(
                ElectionOutcome(
                    topic=topic,
                    partition=partition,
                    error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    message=f"partition {topic}-{partition} does not exist",
                )
            )
            continue
        current = changes.current(key)

        def outcome(
            code: ErrorCode, message: str, leader: int, key: PartitionKey = key
        ) -> ElectionOutcome:
            return ElectionOutcome(
                topic=key[0], partition=key[1], error=code, message=message, leader=leader
            )

        if election_type is ElectionType.PREFERRED:
            preferred = current.replicas[0]
            if current.leader == preferred:
                outcomes.append(
                    outcome(
                        ErrorCode.ELECTION_NOT_NEEDED,
                        f"preferred replica {preferred} already leads",
                        current.leader,
                    )
                )
                continue
            if preferred not in eligible or preferred not in current.isr:
                outcomes.append(
                    outcome(
                        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"preferred replica {preferred} is not "
                        + ("in the ISR" if preferred in eligible else "alive and unfenced"),
                        current.leader,
                    )
                )
                continue
            mode = ElectionMode.PREFERRED
        else:
            if current.leader != NO_LEADER:
                outcomes.append(
                    outcome(
                        ErrorCode.ELECTION_NOT_NEEDED,
                        f"partition has a leader ({current.leader})",
                        current.leader,
                    )
                )
                continue
            mode = ElectionMode.UNCLEAN
        new = changes.apply(
            key,
            build_partition_change(
                current,
                alive=eligible,
                min_insync_replicas=_min_isr(state, settings, topic),
                mode=mode,
            ),
        )
        if new.leader == NO_LEADER:
            outcomes.append(
                outcome(
                    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                    f"no replica of {list(current.replicas)} is alive and unfenced",
                    NO_LEADER,
                )
            )
            continue
        outcomes.append(outcome(ErrorCode.NONE, "", new.leader))
    return ControllerResult(
        records=tuple(changes.records()),
        reply=tuple(outcomes),
        elections=tuple(changes.elections),
    )


# ---- producer ids ----------------------------------------------------------------------------


def init_producer_id(
    state: ClusterState, *, producer_id: int, producer_epoch: int
) -> ControllerResult[ProducerIdReply]:
    """A new producer id (journaled counter, never reused) or the next epoch of an existing one."""
    if producer_id == -1 or (producer_id >= 0 and producer_epoch >= PRODUCER_EPOCH_MAX):
        new_id = state.next_producer_id
        return ControllerResult(
            records=(ProducerIdsRecord(next_producer_id=new_id + 1),),
            reply=ProducerIdReply(producer_id=new_id, producer_epoch=0),
        )
    if not 0 <= producer_id < state.next_producer_id:
        return ControllerResult(reply=ProducerIdReply(error=ErrorCode.UNKNOWN_PRODUCER_ID))
    if producer_epoch < 0:
        return ControllerResult(reply=ProducerIdReply(error=ErrorCode.INVALID_PRODUCER_EPOCH))
    return ControllerResult(
        reply=ProducerIdReply(producer_id=producer_id, producer_epoch=producer_epoch + 1)
    )
