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

from controller.election import ElectionMode, LogEnd, UncleanRecoveryStrategy, elect_leader
from controller.model import (
    NO_LEADER,
    BrokerRegistration,
    ClusterState,
    PartitionKey,
    PartitionRegistration,
    TopicRecord,
)
from controller.partition_change import (
    ElectionKind,
    ElectionPolicy,
    PartitionChange,
    build_partition_change,
    clear_eligible,
)
from controller.placement import assign_replicas
from controller.records import (
    AclRecord,
    BrokerRecord,
    ClusterIdRecord,
    ControllerEpochRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RemoveAclRecord,
    RemoveTopicRecord,
    TopicUpsertRecord,
)
from minikafka.acl import AclBinding, AclError, AclFilter, check_binding
from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.limits import TopicLimits, check_capacity, check_partition_count, replicas_per_broker
from minikafka.topic_config import (
    FLUSH_POLICY,
    MIN_INSYNC_REPLICAS,
    TOPIC_CONFIGS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    colliding_topic,
    min_insync_replicas,
    unclean_leader_election_enabled,
    validate_topic_configs,
    validate_topic_name,
    with_effective_defaults,
)

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
    limits: TopicLimits = TopicLimits()
    #: KIP-966 (on by default; off restores "last replica standing" as a negative control).
    eligible_leader_replicas: bool = True
    unclean_recovery_strategy: UncleanRecoveryStrategy = UncleanRecoveryStrategy.LONGEST_LOG
    #: False only in the replication simulator's hole-1 canary (DELIBERATELY UNSAFE): the
    #: AlterPartition check before KIP-903 (see `_members_eligible`).
    kip903: bool = True
    #: Test-only (the simulator's hole-5 canary): a new data directory counts as clean.
    unsafe_wiped_directory_is_clean: bool = False


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
    #: The broker epoch each member of `new_isr` fetched with (-1: not given), KIP-903.
    member_epochs: dict[int, int] = msgspec.field(default_factory=dict)
    #: The min.insync.replicas the leader applies (0: not given).
    leader_min_insync_replicas: int = 0


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
        case AclRecord(binding=binding):
            return replace(state, acls=state.acls | {binding})
        case RemoveAclRecord(binding=binding):
            return replace(state, acls=state.acls - {binding})
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
    records.extend(AclRecord(binding=binding) for binding in sorted(state.acls))
    return records


def bootstrap(
    state: ClusterState,
    *,
    controller_id: int,
    new_cluster_id: str,
    controller_epoch: int | None = None,
) -> list[Record]:
    """Records journaled when a controller becomes active: cluster id once, a new controller
    epoch: `controller_epoch` (the quorum's Raft epoch, above every earlier one), or the next
    one when None."""
    records: list[Record] = []
    if not state.cluster_id:
        records.append(ClusterIdRecord(cluster_id=new_cluster_id))
    epoch = state.controller_epoch + 1 if controller_epoch is None else controller_epoch
    records.append(ControllerEpochRecord(controller_id=controller_id, controller_epoch=epoch))
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


def _policy(state: ClusterState, settings: Settings, topic: str) -> ElectionPolicy:
    return ElectionPolicy(
        min_insync_replicas=_min_isr(state, settings, topic),
        eligible_leader_replicas=settings.eligible_leader_replicas,
        unclean_strategy=settings.unclean_recovery_strategy,
    )


def _leader_policy(policy: ElectionPolicy, leader_min_insync_replicas: int) -> ElectionPolicy:
    """The policy for a change the leader proposed: ELR upkeep uses the smaller of the
    configured min.insync.replicas and the one the leader applies (0: not given). A
    replica joins the ELR only while the ISR is below the minimum, i.e. while the HW
    stands still; a leader that has not applied a raised minimum yet still advances its HW
    on the old one, so the replica it shrinks out may miss committed records."""
    if 0 < leader_min_insync_replicas < policy.min_insync_replicas:
        return msgspec.structs.replace(policy, min_insync_replicas=leader_min_insync_replicas)
    return policy


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
    lost: Mapping[PartitionKey, RestartLoss] | None = None,
) -> _Changes:
    """Take `broker_id` out of every ISR and move its leaderships.

    A broker that is only gone (fenced, shutting down; `lost` None) leaves the ISR; with
    eligible leader replicas it joins the ELR when the ISR is (or becomes) smaller than
    min.insync.replicas, even as its last member (the ISR becomes empty and the partition
    waits for an ELR member); without ELR the last member stays in the ISR.

    After a restart (`lost` maps the broker's partitions to what its replica may have
    lost there) a replica that may miss records it had acknowledged leaves the ISR and the
    ELR, even as the last member: the partition goes offline rather than being led by a
    replica that may miss committed records (KIP-966), until an eligible replica returns
    or an unclean election. Without ELR an unflushed-tail loss keeps the old rule (the last
    member stays and the partition is marked RECOVERING: "last replica standing"); a
    replaced data directory always leaves.
    """
    changes = _Changes(state)
    elr = settings.eligible_leader_replicas
    for key in _partitions_of_broker(state, broker_id):
        current = changes.current(key)
        loss = RestartLoss.NONE if lost is None else lost.get(key, RestartLoss.NONE)
        others = tuple(member for member in current.isr if member != broker_id)
        last_standing = not elr and loss is RestartLoss.UNFLUSHED and current.isr == (broker_id,)
        target_isr: tuple[int, ...] = others
        unclean_shutdown: tuple[int, ...] = ()
        if loss in (RestartLoss.EVERYTHING, RestartLoss.STALE) or (
            elr and loss is not RestartLoss.NONE
        ):
            unclean_shutdown = (broker_id,)
        elif not elr:
            target_isr = _without(current.isr, broker_id)
        if last_standing:
            changes.warnings.append(
                f"partition {key[0]}-{key[1]}: broker {broker_id} {reason} and is the last "
                "in-sync replica; eligible leader replicas are off, so it is kept (last "
                "replica standing) and the partition marked RECOVERING: records it had not "
                "flushed may be lost"
            )
        change = build_partition_change(
            current,
            alive=alive - {broker_id},
            policy=_policy(state, settings, key[0]),
            mode=_automatic_mode(state, settings, key[0]),
            target_isr=target_isr,
            unclean_shutdown=unclean_shutdown,
            mark_recovering=last_standing,
        )
        changes.apply(key, change)
        if change is None:
            continue
        after = change.registration
        if (
            unclean_shutdown
            and broker_id in (*current.isr, *current.elr)
            and not (after.isr or after.elr)
        ):
            changes.warnings.append(
                f"partition {key[0]}-{key[1]} is offline: broker {broker_id}, the last replica "
                f"known to hold every committed record, {reason} and may have lost "
                "acknowledged records. To accept the possible loss: minikafka leader-election "
                f"--election-type unclean --topic {key[0]} --partition {key[1]}"
            )
        elif after.leader == NO_LEADER != current.leader:
            waiting = f"; it waits for an eligible replica {list(after.elr)}" if after.elr else ""
            changes.warnings.append(
                f"partition {key[0]}-{key[1]} is offline: broker {broker_id} ({reason}) led it "
                f"and no other in-sync replica is available (ISR {list(current.isr)}){waiting}"
            )
    return changes


class RestartLoss(enum.Enum):
    """What a registering broker's replicas may have lost since its last registration."""

    NONE = "none"  # it proves it continues that registration: nothing
    UNFLUSHED = "unflushed"  # no proof: whatever it had not fsynced (not for flush.policy=fsync)
    #: It proves an older registration: a directory rolled back in time (a restored
    #: backup or VM snapshot), which may miss anything written since, fsynced or not.
    STALE = "stale"
    EVERYTHING = "everything"  # another data directory: every replica it held


def restart_loss(
    existing: BrokerRegistration | None,
    *,
    previous_broker_epoch: int,
    directory_id: str,
    unsafe_wiped_directory_is_clean: bool = False,
) -> tuple[RestartLoss, str]:
    """What a registering broker may have lost, and why (KIP-966's clean-shutdown proof,
    plus the data directory's identity).

    Nothing: a broker id never registered before (it held nothing), or the broker proves
    it continues its last registration: it names that registration's broker epoch as its
    previous one (written at a clean shutdown, or kept by a crash the operating system
    survived, so every completed write is still there) with the same data directory.
    Without the proof (-1) its unflushed writes may be gone; with the proof of another
    (older) registration, anything written since may be, fsynced or not (`STALE`: a
    restored copy; a crash between a registration and its record also presents one, which
    costs availability only); with another data directory, everything is.

    `unsafe_wiped_directory_is_clean` (test-only, the simulator's canary) selects the rule
    before the fix: another (new, empty) data directory has lost nothing.
    """
    if existing is None:
        return RestartLoss.NONE, ""
    if existing.directory_id and directory_id != existing.directory_id:
        if unsafe_wiped_directory_is_clean:
            return RestartLoss.NONE, ""
        return RestartLoss.EVERYTHING, (
            f"came back with data directory {directory_id or '(none)'} instead of "
            f"{existing.directory_id} (a wiped or replaced disk)"
        )
    if previous_broker_epoch != existing.broker_epoch:
        if previous_broker_epoch < 0:
            return RestartLoss.UNFLUSHED, "restarted without proof of a clean shutdown"
        return RestartLoss.STALE, (
            f"restarted claiming broker epoch {previous_broker_epoch}, not its last "
            f"registration's {existing.broker_epoch} (a directory rolled back in time)"
        )
    return RestartLoss.NONE, ""


def _replica_loss(state: ClusterState, key: PartitionKey, loss: RestartLoss) -> RestartLoss:
    """What the broker's replica of `key` may have lost: flush.policy=fsync topics lose no
    committed record to an unflushed tail (every offset below the HW was fsynced)."""
    fsynced = _topic_configs(state, key[0]).get(FLUSH_POLICY) == "fsync"
    if loss is RestartLoss.UNFLUSHED and fsynced:
        return RestartLoss.NONE
    return loss


def _elect_leaderless(
    state: ClusterState,
    settings: Settings,
    keys: Iterable[PartitionKey],
    *,
    alive: frozenset[int],
    start: _Changes | None = None,
) -> _Changes:
    """Elect leaders for the leaderless partitions of `keys` (ISR, then ELR; unclean only
    where the topic allows it and, with the longest-log strategy, never here: that needs
    a survey of the replicas' logs, which `unclean_recovery` brings)."""
    changes = start if start is not None else _Changes(state)
    for key in keys:
        current = changes.current(key)
        if current.leader != NO_LEADER:
            continue
        changes.apply(
            key,
            build_partition_change(
                current,
                alive=alive,
                policy=_policy(state, settings, key[0]),
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
    previous_broker_epoch: int,
    directory_id: str,
    session_alive: bool,
    external_host: str = "",
    external_port: int = 0,
) -> ControllerResult[RegisterReply]:
    """Register (or re-register) a broker with a new epoch; it starts fenced.

    `session_alive`: the id's current session has not expired. Another incarnation is then
    refused (two processes must never share a broker id). Leaderships of the id are stale
    and move. A broker that cannot prove its log is intact (`restart_is_intact`) also
    leaves every ISR, even as its last member (the partition goes offline).
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
        directory_id=directory_id,
    )
    loss, why = restart_loss(
        existing,
        previous_broker_epoch=previous_broker_epoch,
        directory_id=directory_id,
        unsafe_wiped_directory_is_clean=settings.unsafe_wiped_directory_is_clean,
    )
    if loss is RestartLoss.NONE:
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
                        policy=_policy(state, settings, key[0]),
                        mode=_automatic_mode(state, settings, key[0]),
                    ),
                )
    else:
        keys = _partitions_of_broker(state, broker_id)
        changes = _remove_broker(
            state,
            settings,
            broker_id,
            alive=state.eligible_brokers(),
            reason=why,
            lost={k: _replica_loss(state, k, loss) for k in keys},
        )
        if changes.partitions:
            changes.warnings.append(
                f"broker {broker_id} {why}: it leaves every ISR it was in until it has "
                "caught up again"
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
                policy=_policy(state, settings, key[0]),
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


def _members_eligible(
    state: ClusterState,
    current: PartitionRegistration,
    new_isr: set[int],
    member_epochs: Mapping[int, int],
    eligible: frozenset[int],
    *,
    kip903: bool = True,
) -> bool:
    """KIP-841 / KIP-903: every member the change adds is unfenced, not shutting down, and
    fetched with its current broker epoch (an added member without an epoch is refused:
    the leader may be judging by a previous incarnation's progress); a member whose epoch
    is given must give its current one. `kip903=False` (unsafe, the hole-1 canary only):
    an added member need only be unfenced and not shutting down, as before the fix."""
    if not kip903:
        return all(member in current.isr or member in eligible for member in new_isr)
    for member in new_isr:
        epoch = member_epochs.get(member, -1)
        registered = state.brokers.get(member)
        if epoch >= 0 and (registered is None or registered.broker_epoch != epoch):
            return False
        if member not in current.isr and (member not in eligible or epoch < 0):
            return False
    return True


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
        if not _members_eligible(
            state, current, new_isr, item.member_epochs, eligible, kip903=settings.kip903
        ):
            fail(ErrorCode.INELIGIBLE_REPLICA)
            continue
        new = changes.apply(
            key,
            build_partition_change(
                current,
                alive=eligible | {broker_id},
                policy=_leader_policy(
                    _policy(state, settings, item.topic), item.leader_min_insync_replicas
                ),
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
    partition_count = len(state.partitions)
    hosted = replicas_per_broker(part.replicas for part in state.partitions.values())
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
            check_partition_count(num_partitions, settings.limits)
            assignment = assign_replicas(
                topic=topic.name,
                broker_racks=racks,
                num_partitions=num_partitions,
                replication_factor=replication_factor,
            )
            check_capacity(
                existing_partitions=partition_count,
                existing_replicas=hosted,
                new_assignment=assignment,
                limits=settings.limits,
            )
            configs = validate_topic_configs(
                with_effective_defaults(
                    topic.configs,
                    default_min_insync_replicas=settings.min_insync_replicas,
                    replication_factor=replication_factor,
                ),
                replication_factor=replication_factor,
                limits=settings.limits,
            )
        except MiniKafkaError as error:
            results.append(TopicResult(name=topic.name, error=error.code, message=error.message))
            continue
        results.append(TopicResult(name=topic.name))
        accepted.append(topic.name)
        partition_count += len(assignment)
        for broker_id, added in replicas_per_broker(assignment).items():
            hosted[broker_id] = hosted.get(broker_id, 0) + added
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


class NewPartitions(msgspec.Struct, frozen=True, kw_only=True):
    """Grow topic `name` to `count` partitions in total (Kafka's CreatePartitionsTopic)."""

    name: str
    count: int


def create_partitions(
    state: ClusterState,
    settings: Settings,
    *,
    topics: Sequence[NewPartitions],
    validate_only: bool,
) -> ControllerResult[tuple[TopicResult, ...]]:
    """Add partitions to existing topics, placed as creation places them.

    The new partitions get the replica lists that `assign_replicas` gives the topic with
    `count` partitions on today's eligible brokers (so partition p lands where it would
    have, had the topic been created with `count`), at the replication factor of the
    topic's existing partitions; leader = first replica, ISR = all replicas, epochs 0.
    Refusals, per topic: an unknown topic (UNKNOWN_TOPIC_OR_PARTITION), the same topic
    twice (INVALID_REQUEST), a count not above the current one or above the per-topic
    limit (INVALID_PARTITIONS), too few eligible brokers (INVALID_REPLICATION_FACTOR),
    the cluster or a broker past its partition limit (POLICY_VIOLATION).
    """
    racks = {b: state.brokers[b].rack for b in sorted(state.eligible_brokers())}
    counts: dict[str, int] = {}
    for topic in topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    records: list[Record] = []
    results: list[TopicResult] = []
    partition_count = len(state.partitions)
    hosted = replicas_per_broker(part.replicas for part in state.partitions.values())
    for topic in topics:
        try:
            if counts[topic.name] > 1:
                raise MiniKafkaError(
                    f"topic {topic.name!r} appears more than once in the request",
                    code=ErrorCode.INVALID_REQUEST,
                )
            record = state.topics.get(topic.name)
            if record is None:
                raise MiniKafkaError(
                    f"topic {topic.name!r} does not exist",
                    code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                )
            current = record.num_partitions
            if topic.count == current:
                raise MiniKafkaError(
                    f"topic {topic.name!r} already has {current} partitions",
                    code=ErrorCode.INVALID_PARTITIONS,
                )
            if topic.count < current:
                raise MiniKafkaError(
                    f"topic {topic.name!r} has {current} partitions, more than the "
                    f"{topic.count} asked for: partitions can be added, never removed",
                    code=ErrorCode.INVALID_PARTITIONS,
                )
            check_partition_count(topic.count, settings.limits)
            replication_factor = len(state.partitions[(topic.name, 0)].replicas)
            added = assign_replicas(
                topic=topic.name,
                broker_racks=racks,
                num_partitions=topic.count,
                replication_factor=replication_factor,
            )[current:]
            check_capacity(
                existing_partitions=partition_count,
                existing_replicas=hosted,
                new_assignment=added,
                limits=settings.limits,
            )
        except MiniKafkaError as error:
            results.append(TopicResult(name=topic.name, error=error.code, message=error.message))
            continue
        results.append(TopicResult(name=topic.name))
        partition_count += len(added)
        for broker_id, count in replicas_per_broker(added).items():
            hosted[broker_id] = hosted.get(broker_id, 0) + count
        if validate_only:
            continue
        records.append(
            TopicUpsertRecord(topic=msgspec.structs.replace(record, num_partitions=topic.count))
        )
        records.extend(
            PartitionRecord(
                topic=topic.name,
                partition=index,
                registration=PartitionRegistration(
                    replicas=replicas, leader=replicas[0], isr=replicas
                ),
            )
            for index, replicas in enumerate(added, start=current)
        )
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
        configs = validate_topic_configs(
            merged, replication_factor=replication_factor, limits=settings.limits
        )
    except MiniKafkaError as error:
        return ControllerResult(reply=ConfigReply(error=error.code, message=error.message))
    if validate_only or configs == record.configs:
        return ControllerResult(reply=ConfigReply())
    upsert = TopicUpsertRecord(topic=msgspec.structs.replace(record, configs=configs))
    after = replay(state, state.metadata_offset, upsert)
    changes = _Changes(after)
    if configs.get(MIN_INSYNC_REPLICAS) != record.configs.get(MIN_INSYNC_REPLICAS):
        # Who was eligible under the old minimum says nothing under the new one (KIP-966).
        for key in after.topic_partitions(topic):
            cleared = clear_eligible(after.partitions[key])
            if cleared is not None:
                changes.partitions[key] = cleared
    if UNCLEAN_LEADER_ELECTION_ENABLE in set_configs:
        changes = _elect_leaderless(
            after,
            settings,
            after.topic_partitions(topic),
            alive=after.eligible_brokers(),
            start=changes,
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
    log_ends: Mapping[PartitionKey, Mapping[int, LogEnd]] | None = None,
) -> ControllerResult[tuple[ElectionOutcome, ...]]:
    """Operator (or automatic rebalance) elections; `partitions=None` means every partition.

    PREFERRED: the first assigned replica if it is alive and in the ISR.
    UNCLEAN: only for partitions without a leader, even when the topic disallows unclean
    elections (an operator override): an alive ISR or ELR member if there is one (a clean
    election after all), else an alive replica chosen by the unclean recovery strategy
    (longest log among the surveyed replicas of `log_ends`, or the first alive one); the
    ISR and ELR are reset to [leader].
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
        surveyed = None if log_ends is None else _current_answers(state, log_ends.get(key, {}))
        new = changes.apply(
            key,
            build_partition_change(
                current,
                alive=eligible,
                policy=_policy(state, settings, topic),
                mode=mode,
                log_ends=surveyed,
            ),
        )
        if new.leader == NO_LEADER:
            alive = [r for r in current.replicas if r in eligible]
            why = (
                f"no replica of {list(current.replicas)} is alive and unfenced"
                if not alive
                else f"no alive replica of {alive} answered the survey of its log"
            )
            outcomes.append(outcome(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, why, NO_LEADER))
            continue
        outcomes.append(outcome(ErrorCode.NONE, "", new.leader))
    return ControllerResult(
        records=tuple(changes.records()),
        reply=tuple(outcomes),
        elections=tuple(changes.elections),
    )


def _current_answers(state: ClusterState, answers: Mapping[int, LogEnd]) -> dict[int, LogEnd]:
    """The survey answers given by each broker's current registration: one that restarted
    since it answered may hold less now."""
    current: dict[int, LogEnd] = {}
    for broker_id, answer in answers.items():
        broker = state.brokers.get(broker_id)
        if broker is not None and answer.broker_epoch in (-1, broker.broker_epoch):
            current[broker_id] = answer
    return current


def unclean_recovery_candidates(state: ClusterState, settings: Settings) -> list[PartitionKey]:
    """Leaderless partitions an automatic unclean election would serve (the topic allows
    one), that wait for it because the longest-log strategy needs a survey of the logs
    first, and that have an alive replica to survey."""
    if settings.unclean_recovery_strategy is not UncleanRecoveryStrategy.LONGEST_LOG:
        return []
    alive = state.eligible_brokers()
    keys: list[PartitionKey] = []
    for key, part in sorted(state.partitions.items()):
        if part.leader != NO_LEADER or not set(part.replicas) & alive:
            continue
        if _automatic_mode(state, settings, key[0]) is ElectionMode.UNCLEAN:
            keys.append(key)
    return keys


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


# ---- ACLs ---------------------------------------------------------------------------------


class AclReply(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    #: The bindings a delete removed.
    deleted: tuple[AclBinding, ...] = ()


def create_acls(state: ClusterState, bindings: Sequence[AclBinding]) -> ControllerResult[AclReply]:
    """Add `bindings` (all or none: one malformed binding refuses the request); a binding
    that already exists is not written again."""
    try:
        checked = [check_binding(binding) for binding in bindings]
    except AclError as error:
        return ControllerResult(reply=AclReply(error=ErrorCode.INVALID_REQUEST, message=str(error)))
    new = sorted(set(checked) - state.acls)
    return ControllerResult(
        records=tuple(AclRecord(binding=binding) for binding in new), reply=AclReply()
    )


def delete_acls(state: ClusterState, filters: Sequence[AclFilter]) -> ControllerResult[AclReply]:
    """Remove every binding any of `filters` matches (an empty filter matches all)."""
    doomed = sorted(b for b in state.acls if any(f.matches(b) for f in filters))
    return ControllerResult(
        records=tuple(RemoveAclRecord(binding=binding) for binding in doomed),
        reply=AclReply(deleted=tuple(doomed)),
    )
