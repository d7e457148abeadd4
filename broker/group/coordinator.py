"""The group coordinator (shell): committed offsets in `__consumer_offsets`.

Rules live in the pure modules (`offsets` for placement, records, replay and error
mapping; `membership` for the member-epoch checks); this class only reads and writes the
log and keeps the loaded state.

- **Topic**: created on first FindCoordinator with `offsets.topic.num.partitions`
  partitions, replication factor min(`offsets.topic.replication.factor`, live brokers),
  `min.insync.replicas` 2 when that is 3 or more, and `retention.ms=-1` (minikafka does
  not compact: commits are kept by never deleting segments by age, and `compactor` moves
  the log start past what a snapshot replaces). Once created, the topic's
  real partition count is what places groups; the setting is not read again.
- **Coordinator**: this broker coordinates the groups of the `__consumer_offsets`
  partitions it leads. Each request checks leadership (NOT_COORDINATOR otherwise) and
  the leader's lease (`offsets.coordinator_lease_holds`: enough followers fetched from it
  within replica.lag.time.max.ms; COORDINATOR_NOT_AVAILABLE otherwise, FindCoordinator
  too), so a leader cut off from the cluster stops answering before a new coordinator
  could fence its members.
- **Loading**: the first request after this broker became leader at a leader epoch starts
  one task that replays the partition from its log start to its log end (as leader, the
  log is the truth: everything acknowledged is in it); until it is done every request for
  that partition gets COORDINATOR_LOAD_IN_PROGRESS. A new leader epoch loads again.
- **Membership** (the pure `Group`) is appended the same way after every heartbeat that
  changed more than deadlines, before it is answered; loading replays it and restarts the
  members' deadlines. Heartbeats of one group are serialised by a lock.
- **Compaction** (`compactor`): every append passes the partition's gate; once a
  partition holds `compaction_min_records` records and more than twice its live keys, a
  snapshot of its live keys is appended and its log start offset moved to it, so a load
  replays the live state and what came since, not the whole history.
- **Commits** are appended as one batch with acks=all and answered once the high
  watermark covers them; only then do they enter the loaded state (a later append of the
  same key wins there as in the log). An append error is mapped by `commit_error`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

import msgspec

from broker.clock import Clock
from broker.group.compactor import OffsetsAppender, read_pairs
from broker.group.membership import (
    check_offset_commit,
    check_offset_fetch,
    expire,
    heartbeat,
    restart_deadlines,
    without_deadlines,
)
from broker.group.model import (
    Group,
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    HeartbeatResult,
    TopicPartition,
    group_state,
)
from broker.group.offsets import (
    OFFSETS_TOPIC,
    OffsetRecord,
    Offsets,
    commit_error,
    coordinator_lease_holds,
    coordinator_partition,
    encode_commit,
    encode_group,
    replay,
    replay_groups,
)
from broker.metadata_cache import MetadataCache
from broker.replica.manager import ReplicaManager
from broker.replica.partition import Partition
from broker.replica.state import LeaderState
from minikafka.errors import ErrorCode, MiniKafkaError, code_from_wire
from minikafka.record_batch import build_batch
from minikafka.v1 import controller_pb2

logger = logging.getLogger(__name__)


class TopicCreator(Protocol):
    """The one admin call the coordinator needs (the broker's AdminBackend has it)."""

    async def create_topics(
        self, request: controller_pb2.CreateTopicsRequest
    ) -> controller_pb2.CreateTopicsResponse: ...


class OffsetsTopicSettings(msgspec.Struct, frozen=True, kw_only=True):
    num_partitions: int = 50
    replication_factor: int = 3
    commit_timeout_ms: int = 5_000
    #: A partition is compacted once it holds this many records and more than twice its
    #: live keys (`offsets.compaction_due`).
    compaction_min_records: int = 10_000
    #: How long a leader may coordinate without hearing from enough followers
    #: (`offsets.coordinator_lease_holds`; the broker's replica.lag.time.max.ms).
    lease_ms: int = 10_000


class Refusal(msgspec.Struct, frozen=True):
    code: ErrorCode
    message: str


class CoordinatorAnswer(msgspec.Struct, frozen=True, kw_only=True):
    error: Refusal | None = None
    node_id: int = -1
    partition: int = -1


class GroupRow(msgspec.Struct, frozen=True, kw_only=True):
    """One group this broker coordinates, as the group gauges see it."""

    group_id: str
    members: int
    #: (topic, partition) -> high watermark of the local replica minus the committed offset
    lag: dict[tuple[str, int], int] = msgspec.field(default_factory=dict)


class GroupSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    groups: list[GroupRow]
    rebalances: int


class _Loaded:
    """One `__consumer_offsets` partition's state on its leader, at one leader epoch."""

    def __init__(self, leader_epoch: int) -> None:
        self.leader_epoch = leader_epoch
        self.done = False
        self.offsets: Offsets = {}
        self.groups: dict[str, Group] = {}
        #: group -> its membership as last written to the log (None: no members).
        self.persisted: dict[str, Group | None] = {}
        #: One heartbeat of a group at a time (its transition is written before the next).
        self.locks: dict[str, asyncio.Lock] = {}
        #: (group, partition) -> log offset of the commit in `offsets` made by this leader.
        self.commit_offsets: dict[tuple[str, TopicPartition], int] = {}
        self.task: asyncio.Task[None] | None = None
        #: Every append to the partition at this epoch goes through it (set by the
        #: coordinator when it starts loading).
        self.appender: OffsetsAppender | None = None

    def live_keys(self) -> int:
        return sum(len(parts) for parts in self.offsets.values()) + sum(
            1 for group in self.persisted.values() if group is not None
        )


class GroupCoordinator:
    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        admin: TopicCreator,
        settings: OffsetsTopicSettings,
        clock: Clock,
        group_config: GroupConfig | None = None,
    ) -> None:
        self._group_config = group_config or GroupConfig()
        self._replicas = replicas
        self._metadata = metadata
        self._admin = admin
        self._settings = settings
        self._clock = clock
        self._loaded: dict[int, _Loaded] = {}
        #: Target assignments computed (group epoch bumps), for the metrics.
        self.rebalances = 0
        self._creating: asyncio.Task[None] | None = None

    # ---- FindCoordinator ------------------------------------------------------------

    async def find_coordinator(self, group_id: str) -> CoordinatorAnswer:
        count = self._partition_count()
        if count == 0:
            await self._create_topic()
            return CoordinatorAnswer(
                error=Refusal(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{OFFSETS_TOPIC} is being created; retry",
                )
            )
        partition = coordinator_partition(group_id, count)
        leader = next(
            (
                i.leader
                for i in self._metadata.partitions_of(OFFSETS_TOPIC)
                if i.partition == partition
            ),
            -1,
        )
        if leader < 0 or leader not in self._metadata.brokers:
            return CoordinatorAnswer(
                error=Refusal(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{OFFSETS_TOPIC}-{partition} has no live leader",
                ),
                partition=partition,
            )
        try:
            local = self._replicas.leader_partition(OFFSETS_TOPIC, partition)
        except MiniKafkaError:
            local = None  # another broker leads it
        refusal = None if local is None else self._lease_refusal(local)
        if refusal is not None:
            return CoordinatorAnswer(error=refusal, partition=partition)
        return CoordinatorAnswer(node_id=leader, partition=partition)

    def _partition_count(self) -> int:
        return len(self._metadata.partitions_of(OFFSETS_TOPIC))

    async def _create_topic(self) -> None:
        """Ask for the topic once at a time; a concurrent creation elsewhere is fine."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create_topic_once())
        await asyncio.shield(self._creating)

    async def _create_topic_once(self) -> None:
        rf = max(1, min(self._settings.replication_factor, len(self._metadata.brokers)))
        request = controller_pb2.CreateTopicsRequest(timeout_ms=self._settings.commit_timeout_ms)
        request.topics.add(
            name=OFFSETS_TOPIC,
            num_partitions=self._settings.num_partitions,
            replication_factor=rf,
            configs={"min.insync.replicas": "2" if rf >= 3 else "1", "retention.ms": "-1"},
        )
        response = await self._admin.create_topics(request)
        for result in response.topics:
            if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                logger.warning(
                    "creating %s failed: %s %s",
                    OFFSETS_TOPIC,
                    code_from_wire(result.error_code).name,
                    result.error_message,
                )

    # ---- OffsetCommit / OffsetFetch -------------------------------------------------

    async def commit(
        self,
        group_id: str,
        *,
        member_id: str,
        member_epoch: int,
        offsets: Sequence[tuple[TopicPartition, OffsetRecord]],
        timeout_ms: int,
    ) -> Refusal | None:
        """Write the commits and answer once committed (None), or why not."""
        found = self._serving(group_id)
        if isinstance(found, Refusal):
            return found
        loaded, partition, index = found
        check = check_offset_commit(self._group(loaded, group_id), member_id, member_epoch)
        if check is not ErrorCode.NONE:
            return Refusal(check, f"commit refused for member {member_id!r} epoch {member_epoch}")
        if not offsets:
            return None
        now_ms = self._clock.wall_ms()
        stamped = [
            (tp, msgspec.structs.replace(r, commit_timestamp_ms=now_ms)) for tp, r in offsets
        ]
        pairs = [encode_commit(group_id, tp, record) for tp, record in stamped]
        batch = build_batch([(now_ms, key, value, None) for key, value in pairs])
        result = await self._appender(loaded).append(
            batch, timeout_ms or self._settings.commit_timeout_ms
        )
        if result.error_code is not ErrorCode.NONE:
            return Refusal(commit_error(result.error_code), result.error_message)
        if self._loaded.get(index) is loaded and partition.leader_epoch == loaded.leader_epoch:
            committed = loaded.offsets.setdefault(group_id, {})
            for tp, record in stamped:
                # Appends may be acknowledged out of order: the later log offset wins.
                if loaded.commit_offsets.get((group_id, tp), -1) < result.base_offset:
                    loaded.commit_offsets[(group_id, tp)] = result.base_offset
                    committed[tp] = record
        return None

    def fetch(
        self,
        group_id: str,
        *,
        member_id: str,
        member_epoch: int,
        partitions: Sequence[TopicPartition] | None,
    ) -> dict[TopicPartition, OffsetRecord | None] | Refusal:
        """The committed offsets (None: none committed), or why the request is refused."""
        found = self._serving(group_id)
        if isinstance(found, Refusal):
            return found
        loaded = found[0]
        check = check_offset_fetch(self._group(loaded, group_id), member_id, member_epoch)
        if check is not ErrorCode.NONE:
            return Refusal(check, f"fetch refused for member {member_id!r} epoch {member_epoch}")
        committed = loaded.offsets.get(group_id, {})
        wanted = sorted(committed) if partitions is None else partitions
        return {tp: committed.get(tp) for tp in wanted}

    # ---- ConsumerGroupHeartbeat -----------------------------------------------------

    async def heartbeat(self, group_id: str, request: HeartbeatRequest) -> HeartbeatResult:
        """One member's heartbeat, by the pure rules of `membership`. A transition that
        changed more than deadlines is written to the group's partition (acks=all) before
        it is answered, so a new coordinator knows the members, their epochs and their
        partitions. Heartbeats of one group are handled one at a time."""
        found = self._serving(group_id)
        if isinstance(found, Refusal):
            return HeartbeatResult(error=int(found.code), message=found.message)
        loaded, _, index = found
        async with loaded.locks.setdefault(group_id, asyncio.Lock()):
            if self._loaded.get(index) is not loaded:
                return HeartbeatResult(
                    error=int(ErrorCode.NOT_COORDINATOR), message="the coordinator moved"
                )
            existing = self._group(loaded, group_id)
            group = existing or Group(
                group_id=group_id, assignor=self._group_config.default_assignor
            )
            topics = {t for m in group.members.values() for t in m.subscribed_topics}
            topics |= request.subscribed_topics or frozenset()
            counts = {t: n for t in sorted(topics) if (n := len(self._metadata.partitions_of(t)))}
            before = group.assignment_epoch
            group, result = heartbeat(
                group,
                request,
                partition_counts=counts,
                now_ms=self._clock.monotonic_ms(),
                config=self._group_config,
            )
            if existing is None and not group.members:
                return result  # a refused first heartbeat creates no group
            # An empty group is kept (not a tombstone): its epoch must never start over,
            # or a commit from an old incarnation could match a new member epoch.
            durable = without_deadlines(group)
            if durable != loaded.persisted.get(group_id):
                refusal = await self._persist(loaded, group_id, durable)
                if refusal is not None:
                    return HeartbeatResult(error=int(refusal.code), message=refusal.message)
                loaded.persisted[group_id] = durable
            self.rebalances += group.assignment_epoch != before
            self._store(loaded, group)
            return result

    async def _persist(self, loaded: _Loaded, group_id: str, group: Group | None) -> Refusal | None:
        key, value = encode_group(group_id, group)
        result = await self._appender(loaded).append(
            build_batch([(self._clock.wall_ms(), key, value, None)]),
            self._settings.commit_timeout_ms,
        )
        if result.error_code is not ErrorCode.NONE:
            return Refusal(commit_error(result.error_code), result.error_message)
        return None

    @staticmethod
    def _appender(loaded: _Loaded) -> OffsetsAppender:
        assert loaded.appender is not None, "set when the partition started loading"
        return loaded.appender

    def metrics(self) -> GroupSnapshot:
        """The groups of the partitions this broker leads and has loaded, their members and
        their lag where this broker hosts a replica of the partition."""
        rows: list[GroupRow] = []
        for index, loaded in sorted(self._loaded.items()):
            if not loaded.done:
                continue
            try:
                partition = self._replicas.leader_partition(OFFSETS_TOPIC, index)
            except MiniKafkaError:
                continue
            if partition.leader_epoch != loaded.leader_epoch:
                continue
            for group_id in sorted(set(loaded.offsets) | set(loaded.groups)):
                group = self._group(loaded, group_id)  # silent members expired
                lag: dict[tuple[str, int], int] = {}
                for tp, record in loaded.offsets.get(group_id, {}).items():
                    local = self._replicas.partitions.get((tp.topic, tp.partition))
                    if local is not None:
                        lag[(tp.topic, tp.partition)] = max(
                            0, local.log.high_watermark - record.offset
                        )
                members = 0 if group is None else len(group.members)
                rows.append(GroupRow(group_id=group_id, members=members, lag=lag))
        return GroupSnapshot(groups=rows, rebalances=self.rebalances)

    def _group(self, loaded: _Loaded, group_id: str) -> Group | None:
        """The group with the members whose session or rebalance timeout passed removed."""
        group = loaded.groups.get(group_id)
        if group is None:
            return None
        group, expired = expire(group, now_ms=self._clock.monotonic_ms(), config=self._group_config)
        if expired:
            self.rebalances += 1
            logger.info("group %s: fenced %s (session or rebalance timeout)", group_id, expired)
            self._store(loaded, group)
        return group

    @staticmethod
    def _store(loaded: _Loaded, group: Group) -> None:
        loaded.groups[group.group_id] = group  # kept when empty: its epoch goes on

    # ---- group admin ----------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, GroupState, int]] | Refusal:
        """(group, state, member count) of every group this broker coordinates: those with
        members or committed offsets, in the `__consumer_offsets` partitions it leads."""
        found: list[tuple[str, GroupState, int]] = []
        for info in self._metadata.partitions_of(OFFSETS_TOPIC):
            serving = self._serving_partition(info.partition, "")
            if isinstance(serving, Refusal):
                if serving.code is ErrorCode.NOT_COORDINATOR:
                    continue  # another broker leads it
                return serving
            loaded = serving[0]
            for group_id in sorted(set(loaded.offsets) | set(loaded.groups)):
                group = self._group(loaded, group_id)
                if group is None:
                    found.append((group_id, GroupState.EMPTY, 0))
                else:
                    found.append((group_id, group_state(group), len(group.members)))
        return sorted(found)

    def describe_group(self, group_id: str) -> Group | Refusal:
        """The group (members, epochs, assignments); an empty `Group` when it has only
        committed offsets; GROUP_ID_NOT_FOUND when it has neither."""
        found = self._serving(group_id)
        if isinstance(found, Refusal):
            return found
        loaded = found[0]
        group = self._group(loaded, group_id)
        if group is not None:
            return group
        if group_id in loaded.offsets:
            return Group(group_id=group_id)
        return Refusal(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")

    async def delete_group(self, group_id: str, *, timeout_ms: int) -> Refusal | None:
        """Delete the group: its committed offsets and its membership record (tombstones,
        acks=all); NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND when there is
        nothing to delete. A group made again later starts at epoch 0."""
        found = self._serving(group_id)
        if isinstance(found, Refusal):
            return found
        loaded, _, index = found
        group = self._group(loaded, group_id)
        if group is not None and group.members:
            return Refusal(
                ErrorCode.NON_EMPTY_GROUP,
                f"group {group_id!r} has {len(group.members)} members: stop them first",
            )
        committed = loaded.offsets.get(group_id, {})
        if not committed and group is None:
            return Refusal(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        now_ms = self._clock.wall_ms()
        tombstones = [encode_commit(group_id, tp, None) for tp in sorted(committed)]
        if loaded.persisted.get(group_id) is not None:
            tombstones.append(encode_group(group_id, None))
        if not tombstones:  # known only in memory: nothing to write
            loaded.groups.pop(group_id, None)
            return None
        result = await self._appender(loaded).append(
            build_batch([(now_ms, key, value, None) for key, value in tombstones]),
            timeout_ms or self._settings.commit_timeout_ms,
        )
        if result.error_code is not ErrorCode.NONE:
            return Refusal(commit_error(result.error_code), result.error_message)
        if self._loaded.get(index) is loaded:
            loaded.offsets.pop(group_id, None)
            loaded.groups.pop(group_id, None)
            loaded.persisted.pop(group_id, None)
            for key in [k for k in loaded.commit_offsets if k[0] == group_id]:
                del loaded.commit_offsets[key]
        return None

    # ---- leadership and loading -----------------------------------------------------

    def _serving(self, group_id: str) -> tuple[_Loaded, Partition, int] | Refusal:
        count = self._partition_count()
        if count == 0:
            return Refusal(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{OFFSETS_TOPIC} does not exist yet (FindCoordinator creates it)",
            )
        return self._serving_partition(coordinator_partition(group_id, count), group_id)

    def _serving_partition(
        self, index: int, group_id: str
    ) -> tuple[_Loaded, Partition, int] | Refusal:
        try:
            partition = self._replicas.leader_partition(OFFSETS_TOPIC, index)
        except MiniKafkaError as exc:
            return Refusal(ErrorCode.NOT_COORDINATOR, f"not the coordinator of {group_id!r}: {exc}")
        refusal = self._lease_refusal(partition)
        if refusal is not None:
            return refusal
        loaded = self._loaded.get(index)
        if loaded is None or loaded.leader_epoch != partition.leader_epoch:
            if loaded is not None and loaded.task is not None:
                loaded.task.cancel()
            loaded = _Loaded(partition.leader_epoch)
            loaded.appender = OffsetsAppender(
                replicas=self._replicas,
                partition=partition,
                index=index,
                leader_epoch=partition.leader_epoch,
                min_records=self._settings.compaction_min_records,
                timeout_ms=self._settings.commit_timeout_ms,
                wall_ms=self._clock.wall_ms,
                live_keys=loaded.live_keys,
            )
            self._loaded[index] = loaded
            loaded.task = asyncio.create_task(self._load(index, partition, loaded))
        if not loaded.done:
            return Refusal(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"loading {OFFSETS_TOPIC}-{index} at leader epoch {loaded.leader_epoch}",
            )
        return loaded, partition, index

    def _lease_refusal(self, partition: Partition) -> Refusal | None:
        """COORDINATOR_NOT_AVAILABLE while too few followers fetched from this leader
        lately: it may have been replaced without knowing it (see
        `offsets.coordinator_lease_holds`)."""
        state = partition.state
        if not isinstance(state, LeaderState) or coordinator_lease_holds(
            follower_fetch_ms=[f.last_fetch_time_ms for f in state.followers],
            min_insync_replicas=state.min_insync_replicas,
            now_ms=self._clock.monotonic_ms(),
            lease_ms=self._settings.lease_ms,
        ):
            return None
        return Refusal(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"{OFFSETS_TOPIC}-{partition.partition}: too few followers fetched from this "
            f"leader in the last {self._settings.lease_ms} ms; it may have been replaced",
        )

    async def _load(self, index: int, partition: Partition, loaded: _Loaded) -> None:
        try:
            await self._replay_log(partition, loaded)
        except (MiniKafkaError, OSError):
            # The next request for this partition starts a fresh load.
            logger.exception("loading %s-%d failed", OFFSETS_TOPIC, index)
            if self._loaded.get(index) is loaded:
                del self._loaded[index]

    async def _replay_log(self, partition: Partition, loaded: _Loaded) -> None:
        log = partition.log
        pairs = await read_pairs(partition, log.log_start_offset, log.log_end_offset)
        loaded.offsets = replay({}, pairs)
        now_ms = self._clock.monotonic_ms()
        for group_id, group in replay_groups({}, pairs).items():
            loaded.groups[group_id] = restart_deadlines(group, now_ms=now_ms)
            loaded.persisted[group_id] = without_deadlines(group)
        loaded.done = True
        logger.info(
            "loaded %s-%d at leader epoch %d: %d groups",
            OFFSETS_TOPIC,
            partition.partition,
            loaded.leader_epoch,
            len(loaded.offsets),
        )

    async def close(self) -> None:
        tasks = [
            t
            for lo in self._loaded.values()
            for t in (lo.task, lo.appender.compaction if lo.appender else None)
            if t is not None
        ]
        if self._creating is not None:
            tasks.append(self._creating)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
