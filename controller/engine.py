"""The active controller: runs state-machine handlers one at a time and commits their records.

Every controller of the quorum replays the committed metadata log (`quorum`); only the
active one, the ready Raft leader, runs this engine's duties. When it becomes active it
commits its start records (the cluster id once, the controller epoch = its Raft epoch),
gives every unfenced broker a full session of grace (plus a reconnect back-off) and fully
syncs them, and starts the session and rebalance timers. When it stops leading it stops
all of that at once and every call fails with `NotControllerError` (the servicer answers
NOT_CONTROLLER).

For every request: take the lock, call the pure handler with the current state (plus the
inputs that are not in the log: session liveness, acknowledged metadata offsets), replicate
its records through the quorum and wait until they are committed and applied, and only then
reply. After each commit it logs the state changes, updates the metrics, and hands the
propagation plan to the dispatcher. A request runs in its own task, so a caller that goes
away cannot stop a commit halfway (its records would be applied but not propagated).

Caller: `server.ControllerServicer` (one method per RPC) and `app.ControllerApp`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from controller.config import ControllerConfig
from controller.dispatcher import Dispatcher
from controller.election import LogEnd, UncleanRecoveryStrategy
from controller.history import PartitionHistory
from controller.liveness import Clock, Liveness
from controller.metrics import ControllerMetrics
from controller.model import NO_LEADER, ClusterState, PartitionKey, PartitionRegistration
from controller.offline_replicas import offline_replica_records
from controller.partition_change import ElectionKind
from controller.propagation import plan_propagation
from controller.quorum import MetadataQuorum, NotControllerError
from controller.rebalance import partitions_to_rebalance
from controller.records import BrokerRecord, PartitionRecord, Record
from controller.state_machine import (
    AclReply,
    AlterPartitionItem,
    AlterPartitionReply,
    ConfigReply,
    ControlledShutdownReply,
    ControllerResult,
    ElectionOutcome,
    ElectionType,
    HeartbeatReply,
    NewPartitions,
    NewTopic,
    ProducerIdReply,
    RegisterReply,
    Settings,
    TopicResult,
    alter_configs,
    alter_partition,
    bootstrap,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_topics,
    elect_leaders,
    fence_broker,
    heartbeat,
    init_producer_id,
    register_broker,
    unclean_recovery_candidates,
)
from minikafka.acl import AclBinding, AclFilter
from minikafka.errors import ErrorCode
from minikafka.grpc_options import RECONNECT_DELAY_MAX_MS
from minikafka.tls import TlsMaterial
from minikafka.v1 import broker_pb2_grpc

logger = logging.getLogger(__name__)
#: While a partition waits for a longest-log unclean election, how often it is retried.
UNCLEAN_RECOVERY_RETRY_S = 1.0
state_change_logger = logging.getLogger("minikafka.state_change")

T = TypeVar("T")


def settings_from(config: ControllerConfig) -> Settings:
    return Settings(
        controller_id=config.node_id,
        default_replication_factor=config.default_replication_factor,
        num_partitions=config.num_partitions,
        min_insync_replicas=config.min_insync_replicas,
        unclean_leader_election_enable=config.unclean_leader_election_enable,
        leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
        limits=config.topic_limits(),
        eligible_leader_replicas=config.eligible_leader_replicas,
        unclean_recovery_strategy=UncleanRecoveryStrategy(config.unclean_recovery_strategy),
        kip903=not config.unsafe_test_isr_without_broker_epoch,
        unsafe_wiped_directory_is_clean=config.unsafe_test_wiped_directory_is_clean,
    )


class _Term:
    """What the active controller runs during one Raft epoch."""

    def __init__(self, epoch: int, liveness: Liveness) -> None:
        self.epoch = epoch
        self.liveness = liveness
        self.dispatcher: Dispatcher | None = None
        #: The newest heartbeat stream (by opening order) each broker heartbeated on (see
        #: heartbeat_stream_broken).
        self.heartbeat_streams: dict[int, int] = {}
        self.tasks: list[asyncio.Task[None]] = []

    @property
    def propagation(self) -> Dispatcher:
        assert self.dispatcher is not None
        return self.dispatcher


class ControllerEngine:
    def __init__(
        self,
        *,
        config: ControllerConfig,
        quorum: MetadataQuorum,
        cluster_id: str,
        clock: Clock,
        metrics: ControllerMetrics,
        task_group: asyncio.TaskGroup,
        tls: TlsMaterial | None = None,
        broker_connect: Callable[[str], broker_pb2_grpc.BrokerControlServiceAsyncStub]
        | None = None,
    ) -> None:
        self._config = config
        self._tls = tls
        #: The dispatcher's port to the brokers (None: gRPC; see `Dispatcher`).
        self._broker_connect = broker_connect
        self._settings = settings_from(config)
        self._quorum = quorum
        self._cluster_id = cluster_id
        self._clock = clock
        self._metrics = metrics
        self._lock = asyncio.Lock()
        self._task_group = task_group
        self._term: _Term | None = None
        #: In-flight request tasks in creation order (cancelled in that order on close).
        self._requests: dict[asyncio.Task[object], None] = {}
        #: Set once this controller first became active (a quorum of one starts serving then).
        self.activated = asyncio.Event()
        #: Set when a commit leaves a partition waiting for a longest-log unclean election.
        self._recovery_wanted = asyncio.Event()
        quorum.listener = self
        metrics.set_active(False)

    @property
    def state(self) -> ClusterState:
        """The committed metadata (on a standby too)."""
        return self._quorum.state

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def history(self) -> PartitionHistory:
        """Every partition's change history (`minikafka timeline`), from the replayed log."""
        return self._quorum.history

    @property
    def is_active(self) -> bool:
        return self._term is not None

    # ---- becoming active, and stopping ------------------------------------------------------

    def leader_ready(self, epoch: int) -> None:
        """QuorumListener: this node leads `epoch`; become the active controller."""
        self._task_group.create_task(self._activate(epoch), name=f"activate-epoch-{epoch}")

    def leadership_lost(self) -> None:
        """QuorumListener: stop every duty of the active controller at once."""
        term, self._term = self._term, None
        if term is None:
            return
        logger.warning(
            "controller %d is no longer the active controller (epoch %d ended)",
            self._config.node_id,
            term.epoch,
        )
        self._end_term(term)

    def _end_term(self, term: _Term) -> None:
        for task in term.tasks:
            task.cancel()
        if term.dispatcher is not None:
            self._task_group.create_task(term.dispatcher.close(), name="close-dispatcher")
        self._metrics.set_active(False)
        self._metrics.clear_state()

    async def _activate(self, epoch: int) -> None:
        async with self._lock:
            if self._quorum.ready_epoch != epoch or self._term is not None:
                return
            records = bootstrap(
                self.state,
                controller_id=self._config.node_id,
                new_cluster_id=self._cluster_id,
                controller_epoch=epoch,
            )
            try:
                await self._quorum.commit(records)
            except NotControllerError:
                return
            if self._quorum.ready_epoch != epoch:
                return
            now_ms = self._clock.monotonic_ms()
            liveness = Liveness(session_timeout_ms=self._config.session_timeout_ms)
            for broker_id, broker in sorted(self.state.brokers.items()):
                if not broker.fenced:
                    # A full session of grace, plus the time a broker whose channel was
                    # backing off while no controller answered needs to try again.
                    liveness.start_grace(broker_id, now_ms, extra_ms=RECONNECT_DELAY_MAX_MS)
            term = _Term(epoch, liveness)
            term.dispatcher = self._new_dispatcher(term)
            self._term = term
            for broker_id in sorted(liveness.alive(now_ms)):
                term.propagation.full_sync(broker_id)
            term.tasks.append(
                self._task_group.create_task(self._session_timer(term), name="session-timer")
            )
            if self._config.auto_leader_rebalance_enable:
                term.tasks.append(
                    self._task_group.create_task(self._rebalance_timer(term), name="rebalance")
                )
            term.tasks.append(
                self._task_group.create_task(self._unclean_recovery(term), name="unclean-recovery")
            )
            self._recovery_wanted.set()  # partitions may be waiting since the last term
            self._metrics.set_active(True)
            self._metrics.activations.inc()
            self._metrics.observe_state(self.state)
            self.activated.set()
        logger.info(
            "controller %d is the active controller: cluster %s, controller epoch %d, metadata "
            "offset %d, %d brokers in their grace period",
            self._config.node_id,
            self.state.cluster_id,
            epoch,
            self.state.metadata_offset,
            len(liveness.alive(now_ms)),
        )

    def _new_dispatcher(self, term: _Term) -> Dispatcher:
        config = self._config
        return Dispatcher(
            current_state=lambda: self.state,
            is_live=lambda broker_id: term.liveness.is_alive(broker_id, self._clock.monotonic_ms()),
            task_group=self._task_group,
            request_timeout_ms=config.broker_request_timeout_ms,
            retry_backoff_ms=config.broker_retry_backoff_ms,
            retry_backoff_max_ms=config.broker_retry_backoff_max_ms,
            max_message_bytes=config.grpc_max_message_bytes,
            on_replicas_offline=self._on_replicas_offline,
            tls=self._tls,
            connect=self._broker_connect,
        )

    def _require_term(self) -> _Term:
        term = self._term
        if term is None:
            leader = self._quorum.leader_id
            raise NotControllerError(
                f"controller {self._config.node_id} is not the active controller"
                + (f" (the leader is controller {leader})" if leader is not None else ""),
                leader_id=leader if leader != self._config.node_id else None,
            )
        return term

    async def _exclusive(self, handler: Callable[[_Term], Awaitable[T]]) -> T:
        """Run `handler` as the active controller under the lock, in its own task (see the
        module docstring); raises NotControllerError on a standby."""
        self._require_term()

        async def locked() -> T:
            async with self._lock:
                return await handler(self._require_term())

        task: asyncio.Task[T] = asyncio.ensure_future(locked())
        self._requests[task] = None
        task.add_done_callback(self._request_done)
        return await asyncio.shield(task)

    def _request_done(self, task: asyncio.Task[object]) -> None:
        self._requests.pop(task, None)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that went away does not see it

    # ---- broker-facing calls -----------------------------------------------------------------

    async def register_broker(
        self,
        *,
        broker_id: int,
        host: str,
        port: int,
        rack: str,
        incarnation_id: str,
        previous_broker_epoch: int,
        directory_id: str,
        external_host: str = "",
        external_port: int = 0,
    ) -> RegisterReply:
        async def handle(term: _Term) -> RegisterReply:
            now_ms = self._clock.monotonic_ms()
            result = register_broker(
                self.state,
                self._settings,
                broker_id=broker_id,
                host=host,
                port=port,
                rack=rack,
                incarnation_id=incarnation_id,
                previous_broker_epoch=previous_broker_epoch,
                directory_id=directory_id,
                session_alive=term.liveness.is_alive(broker_id, now_ms),
                external_host=external_host,
                external_port=external_port,
            )
            if result.reply.error is ErrorCode.NONE:
                term.liveness.touch(broker_id, now_ms)
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def heartbeat(
        self, *, broker_id: int, broker_epoch: int, metadata_offset: int, want_shutdown: bool
    ) -> HeartbeatReply:
        async def handle(term: _Term) -> HeartbeatReply:
            now_ms = self._clock.monotonic_ms()
            caught_up_offset = max(
                metadata_offset, term.propagation.acked_metadata_offset(broker_id, broker_epoch)
            )
            result = heartbeat(
                self.state,
                self._settings,
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                want_shutdown=want_shutdown,
                caught_up_offset=caught_up_offset,
            )
            revived = False
            if result.reply.error is ErrorCode.NONE:
                if want_shutdown:
                    term.liveness.forget(broker_id)
                else:
                    revived = term.liveness.touch(broker_id, now_ms)
            reply = await self._commit(term, result)
            if revived and self._term is term:
                # Its session had expired (fenced, queue dropped): bring it up to date.
                term.propagation.full_sync(broker_id)
            return reply

        return await self._exclusive(handle)

    async def alter_partition(
        self, *, broker_id: int, broker_epoch: int, items: Sequence[AlterPartitionItem]
    ) -> AlterPartitionReply:
        async def handle(term: _Term) -> AlterPartitionReply:
            result = alter_partition(
                self.state,
                self._settings,
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                items=items,
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def controlled_shutdown(
        self, *, broker_id: int, broker_epoch: int
    ) -> ControlledShutdownReply:
        async def handle(term: _Term) -> ControlledShutdownReply:
            result = controlled_shutdown(
                self.state, self._settings, broker_id=broker_id, broker_epoch=broker_epoch
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    # ---- admin calls -------------------------------------------------------------------------

    def describe(self) -> ClusterState:
        """The state to describe: the active controller's (NotControllerError elsewhere, so a
        client never reads a standby's possibly older state)."""
        self._require_term()
        return self.state

    async def create_topics(
        self, *, topics: Sequence[NewTopic], validate_only: bool
    ) -> tuple[TopicResult, ...]:
        async def handle(term: _Term) -> tuple[TopicResult, ...]:
            result = create_topics(
                self.state, self._settings, topics=topics, validate_only=validate_only
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def create_partitions(
        self, *, topics: Sequence[NewPartitions], validate_only: bool
    ) -> tuple[TopicResult, ...]:
        async def handle(term: _Term) -> tuple[TopicResult, ...]:
            result = create_partitions(
                self.state, self._settings, topics=topics, validate_only=validate_only
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def delete_topics(self, *, names: Sequence[str]) -> tuple[TopicResult, ...]:
        async def handle(term: _Term) -> tuple[TopicResult, ...]:
            return await self._commit(term, delete_topics(self.state, names=names))

        return await self._exclusive(handle)

    async def elect_leaders(
        self, *, election_type: ElectionType, partitions: Sequence[PartitionKey] | None
    ) -> tuple[ElectionOutcome, ...]:
        term = self._require_term()
        log_ends = None
        if election_type is ElectionType.UNCLEAN:
            state = self.state
            keys = sorted(state.partitions) if partitions is None else list(partitions)
            leaderless = [
                k for k in keys if k in state.partitions and state.partitions[k].leader == NO_LEADER
            ]
            log_ends = await self._survey(term, leaderless)

        async def handle(term: _Term) -> tuple[ElectionOutcome, ...]:
            result = elect_leaders(
                self.state,
                self._settings,
                election_type=election_type,
                partitions=partitions,
                log_ends=log_ends,
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def _survey(
        self, term: _Term, keys: Sequence[PartitionKey]
    ) -> dict[PartitionKey, dict[int, LogEnd]]:
        """Ask every alive replica of `keys` what its log holds (the longest-log strategy of
        unclean elections); {} when that strategy is not in use. A replica that does not
        answer in time is no candidate."""
        if not keys or self._settings.unclean_recovery_strategy is not (
            UncleanRecoveryStrategy.LONGEST_LOG
        ):
            return {}
        state = self.state
        alive = state.eligible_brokers()
        by_broker: dict[int, list[PartitionKey]] = {}
        for key in keys:
            for replica in state.partitions[key].replicas:
                if replica in alive:
                    by_broker.setdefault(replica, []).append(key)
        answers = await asyncio.gather(
            *(term.propagation.survey_logs(b, ks) for b, ks in sorted(by_broker.items()))
        )
        log_ends: dict[PartitionKey, dict[int, LogEnd]] = {key: {} for key in keys}
        for broker_id, answer in zip(sorted(by_broker), answers, strict=True):
            for key, end in answer.items():
                if key in log_ends:
                    log_ends[key][broker_id] = end
        for key, ends in sorted(log_ends.items()):
            logger.info(
                "unclean election survey of %s-%d: %s",
                key[0],
                key[1],
                {b: (e.last_epoch, e.log_end_offset) for b, e in sorted(ends.items())} or "none",
            )
        return log_ends

    async def _unclean_recovery(self, term: _Term) -> None:
        """Automatic unclean elections that wait for a survey of the replicas' logs (the
        topic allows unclean elections and the strategy is longest-log): whenever a commit
        leaves such a partition leaderless, and every second while one stays so (a replica
        may come back, or answer next time). Runs while `term` lasts."""
        while self._term is term:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._recovery_wanted.wait(), UNCLEAN_RECOVERY_RETRY_S)
            self._recovery_wanted.clear()
            keys = unclean_recovery_candidates(self.state, self._settings)
            if not keys:
                continue
            log_ends = await self._survey(term, keys)

            async def handle(
                term: _Term,
                keys: list[PartitionKey] = keys,
                log_ends: dict[PartitionKey, dict[int, LogEnd]] = log_ends,
            ) -> None:
                still = set(unclean_recovery_candidates(self.state, self._settings))
                waiting = [k for k in keys if k in still]
                if waiting:
                    await self._commit(
                        term,
                        elect_leaders(
                            self.state,
                            self._settings,
                            election_type=ElectionType.UNCLEAN,
                            partitions=waiting,
                            log_ends=log_ends,
                        ),
                    )

            try:
                await self._exclusive(handle)
            except NotControllerError:
                return

    async def alter_configs(
        self,
        *,
        topic: str,
        set_configs: Mapping[str, str],
        delete_configs: Sequence[str],
        validate_only: bool,
    ) -> ConfigReply:
        async def handle(term: _Term) -> ConfigReply:
            result = alter_configs(
                self.state,
                self._settings,
                topic=topic,
                set_configs=set_configs,
                delete_configs=delete_configs,
                validate_only=validate_only,
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def init_producer_id(self, *, producer_id: int, producer_epoch: int) -> ProducerIdReply:
        async def handle(term: _Term) -> ProducerIdReply:
            result = init_producer_id(
                self.state, producer_id=producer_id, producer_epoch=producer_epoch
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def create_acls(self, *, bindings: Sequence[AclBinding]) -> AclReply:
        async def handle(term: _Term) -> AclReply:
            return await self._commit(term, create_acls(self.state, bindings))

        return await self._exclusive(handle)

    async def delete_acls(self, *, filters: Sequence[AclFilter]) -> AclReply:
        async def handle(term: _Term) -> AclReply:
            return await self._commit(term, delete_acls(self.state, filters))

        return await self._exclusive(handle)

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The committed ACLs `acl_filter` matches (the active controller only)."""
        self._require_term()
        return sorted(binding for binding in self.state.acls if acl_filter.matches(binding))

    def _on_replicas_offline(
        self, broker_id: int, broker_epoch: int, keys: list[PartitionKey]
    ) -> None:
        self._task_group.create_task(
            self._replicas_offline_quietly(broker_id, broker_epoch, keys),
            name=f"replicas-offline-{broker_id}",
        )

    async def _replicas_offline_quietly(
        self, broker_id: int, broker_epoch: int, keys: list[PartitionKey]
    ) -> None:
        # NotControllerError: the next active controller fully syncs the broker and hears
        # about its offline replicas again.
        with contextlib.suppress(NotControllerError):
            await self.replicas_offline(broker_id=broker_id, broker_epoch=broker_epoch, keys=keys)

    async def replicas_offline(
        self, *, broker_id: int, broker_epoch: int, keys: Sequence[PartitionKey]
    ) -> None:
        """A broker cannot open these replicas: out of ISR and leadership
        (`controller.offline_replicas`)."""

        async def handle(term: _Term) -> None:
            records = offline_replica_records(
                self.state,
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                keys=keys,
                default_min_insync_replicas=self._settings.min_insync_replicas,
                default_unclean_leader_election=self._settings.unclean_leader_election_enable,
                eligible_leader_replicas=self._settings.eligible_leader_replicas,
                unclean_strategy=self._settings.unclean_recovery_strategy,
            )
            if not records:
                return
            state_change_logger.warning(
                "broker %d cannot open its replicas of %s (KAFKA_STORAGE_ERROR): moving them "
                "out of ISR and leadership",
                broker_id,
                sorted(keys),
            )
            await self._commit(term, ControllerResult(records=tuple(records), reply=None))

        await self._exclusive(handle)

    # ---- timers ------------------------------------------------------------------------------

    async def expire_sessions(self) -> list[int]:
        """Fence every broker whose session ran out; return their ids."""

        async def handle(term: _Term) -> list[int]:
            now_ms = self._clock.monotonic_ms()
            expired = term.liveness.expired(now_ms)
            for broker_id in expired:
                term.liveness.forget(broker_id)
                broker = self.state.brokers.get(broker_id)
                if broker is not None and not broker.fenced:
                    state_change_logger.info(
                        "broker %d missed heartbeats for %d ms: fencing it",
                        broker_id,
                        self._config.session_timeout_ms,
                    )
                await self._commit(
                    term,
                    fence_broker(
                        self.state,
                        self._settings,
                        broker_id=broker_id,
                        reason="session expired",
                    ),
                )
            return expired

        return await self._exclusive(handle)

    def heartbeat_stream_seen(self, broker_id: int, stream: int) -> None:
        """Record that `stream` (numbered in opening order) carried an accepted heartbeat of
        `broker_id`: it is the broker's current stream unless a newer one already is."""
        term = self._term
        if term is not None and stream > term.heartbeat_streams.get(broker_id, 0):
            term.heartbeat_streams[broker_id] = stream

    async def heartbeat_stream_broken(
        self, *, broker_id: int, broker_epoch: int, stream: int
    ) -> None:
        """A broker's heartbeat stream ended without a shutdown request: the process died or
        its connection broke. Fence it now rather than at the session timeout, unless the
        broker has already heartbeated on a newer stream (it reconnected; the old
        connection's end is noticed late) or registered again (a newer epoch), or this
        controller is no longer active (the stream ended because it told the broker so)."""

        async def handle(term: _Term) -> None:
            if term.heartbeat_streams.get(broker_id) != stream:
                return
            del term.heartbeat_streams[broker_id]
            broker = self.state.brokers.get(broker_id)
            if broker is None or broker.broker_epoch != broker_epoch or broker.fenced:
                return
            term.liveness.forget(broker_id)
            state_change_logger.info("broker %d heartbeat stream broke: fencing it", broker_id)
            await self._commit(
                term,
                fence_broker(
                    self.state,
                    self._settings,
                    broker_id=broker_id,
                    reason="heartbeat stream broke",
                ),
            )

        if self._term is None:
            return
        with contextlib.suppress(NotControllerError):
            await self._exclusive(handle)

    async def rebalance_leaders(self) -> tuple[ElectionOutcome, ...]:
        """One automatic preferred-leader rebalance pass."""

        async def handle(term: _Term) -> tuple[ElectionOutcome, ...]:
            keys = partitions_to_rebalance(
                self.state,
                imbalance_percentage=self._settings.leader_imbalance_per_broker_percentage,
            )
            if not keys:
                return ()
            logger.info("leader imbalance above threshold: preferred elections for %s", keys)
            result = elect_leaders(
                self.state,
                self._settings,
                election_type=ElectionType.PREFERRED,
                partitions=keys,
            )
            return await self._commit(term, result)

        return await self._exclusive(handle)

    async def _session_timer(self, term: _Term) -> None:
        """Check session deadlines every tick while `term` lasts."""
        tick_s = max(10, min(self._config.heartbeat_interval_ms, 100)) / 1000
        while self._term is term:
            await asyncio.sleep(tick_s)
            try:
                await self.expire_sessions()
            except NotControllerError:
                return

    async def _rebalance_timer(self, term: _Term) -> None:
        """Automatic preferred-leader rebalance every check interval while `term` lasts."""
        while self._term is term:
            await asyncio.sleep(self._config.leader_imbalance_check_interval_ms / 1000)
            try:
                await self.rebalance_leaders()
            except NotControllerError:
                return

    async def close(self) -> None:
        term, self._term = self._term, None
        if term is not None:
            for task in term.tasks:
                task.cancel()
            self._metrics.set_active(False)
            if term.dispatcher is not None:
                await term.dispatcher.close()
        for request in list(self._requests):
            request.cancel()

    # ---- commit ------------------------------------------------------------------------------

    async def _commit(self, term: _Term, result: ControllerResult[T]) -> T:
        """Replicate, wait until committed and applied, log, measure, propagate. Caller holds
        the lock (so the records applied meanwhile are exactly these)."""
        assert self._lock.locked()
        records = result.records
        if not records:
            return result.reply
        old = self.state
        started = time.perf_counter()
        await self._quorum.commit(records)
        self._metrics.commit_latency.observe(time.perf_counter() - started)
        state = self.state
        self._log_changes(old, records, result)
        if self._term is not term:
            # Committed, but this controller stopped leading meanwhile: the next active
            # controller fully syncs every broker, so there is nothing to propagate here.
            return result.reply
        self._metrics.observe_state(state)
        for election in result.elections:
            self._metrics.observe_election(election.kind)
        if unclean_recovery_candidates(state, self._settings):
            self._recovery_wanted.set()
        term.propagation.submit(
            plan_propagation(old, state, records),
            live=term.liveness.alive(self._clock.monotonic_ms()),
        )
        return result.reply

    @staticmethod
    def _log_changes(
        old: ClusterState,
        records: Sequence[Record],
        result: ControllerResult[T],
    ) -> None:
        # A batch may change one partition twice (e.g. an ISR shrink, then a new leader):
        # each line compares with the partition as the previous record left it.
        seen: dict[PartitionKey, PartitionRegistration] = {}
        for record in records:
            match record:
                case BrokerRecord(registration=broker):
                    state_change_logger.info(
                        "broker %d at %s:%d epoch %d: fenced=%s in_controlled_shutdown=%s",
                        broker.broker_id,
                        broker.host,
                        broker.port,
                        broker.broker_epoch,
                        broker.fenced,
                        broker.in_controlled_shutdown,
                    )
                case PartitionRecord(topic=topic, partition=partition, registration=after):
                    before = seen.get((topic, partition), old.partitions.get((topic, partition)))
                    seen[(topic, partition)] = after
                    elr = ""
                    if before is not None and (before.elr, before.last_known_elr) != (
                        after.elr,
                        after.last_known_elr,
                    ):
                        elr = (
                            f", ELR {list(before.elr)} -> {list(after.elr)}, LastKnownELR "
                            f"{list(before.last_known_elr)} -> {list(after.last_known_elr)}"
                        )
                    elif after.elr or after.last_known_elr:
                        elr = f", ELR {list(after.elr)}, LastKnownELR {list(after.last_known_elr)}"
                    state_change_logger.info(
                        "partition %s-%d: leader %s -> %d (leader epoch %d), ISR %s -> %s%s, "
                        "partition epoch %d, %s",
                        topic,
                        partition,
                        before.leader if before is not None else "none",
                        after.leader,
                        after.leader_epoch,
                        list(before.isr) if before is not None else [],
                        list(after.isr),
                        elr,
                        after.partition_epoch,
                        after.status.value,
                    )
                case _:
                    pass
        for election in result.elections:
            if election.kind is ElectionKind.UNCLEAN:
                state_change_logger.warning(
                    "UNCLEAN leader election for %s-%d: broker %d leads at epoch %d although it "
                    "was not in the ISR (previous leader %s); records acknowledged by the old "
                    "ISR may be lost, partition is RECOVERING",
                    election.topic,
                    election.partition,
                    election.leader,
                    election.leader_epoch,
                    election.previous_leader if election.previous_leader != NO_LEADER else "none",
                )
            elif election.kind is ElectionKind.ELIGIBLE:
                state_change_logger.info(
                    "leader election from the eligible leader replicas for %s-%d: broker %d "
                    "leads at epoch %d (it left the ISR while the high watermark was frozen, "
                    "so it holds every committed record)",
                    election.topic,
                    election.partition,
                    election.leader,
                    election.leader_epoch,
                )
        for warning in result.warnings:
            state_change_logger.warning("%s", warning)
