"""The single writer: runs state-machine handlers one at a time and commits their records.

For every request: take the lock, call the pure handler with the current state (plus the
non-journaled inputs: session liveness, acknowledged metadata offsets), append the records
to the journal (fsync), replay them into the new state, and only then reply. After each
commit it logs the state changes, updates the metrics, and hands the propagation plan to
the dispatcher. It also owns the two timers: session expiry (fencing) and the automatic
preferred-leader rebalance.

Caller: `server.ControllerServicer` (one method per RPC) and `app.serve`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TypeVar

from controller.config import ControllerConfig
from controller.dispatcher import Dispatcher
from controller.journal import Journal
from controller.liveness import Clock, Liveness
from controller.metrics import ControllerMetrics
from controller.model import NO_LEADER, ClusterState, PartitionKey, PartitionRegistration
from controller.partition_change import ElectionKind
from controller.propagation import plan_propagation
from controller.rebalance import partitions_to_rebalance
from controller.records import BrokerRecord, PartitionRecord, Record
from controller.state_machine import (
    AlterPartitionItem,
    AlterPartitionReply,
    ConfigReply,
    ControlledShutdownReply,
    ControllerResult,
    ElectionOutcome,
    ElectionType,
    HeartbeatReply,
    NewTopic,
    ProducerIdReply,
    RegisterReply,
    Settings,
    TopicResult,
    alter_configs,
    alter_partition,
    bootstrap,
    controlled_shutdown,
    create_topics,
    delete_topics,
    elect_leaders,
    fence_broker,
    heartbeat,
    init_producer_id,
    register_broker,
    replay,
)
from minikafka.errors import ErrorCode

logger = logging.getLogger(__name__)
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
    )


class ControllerEngine:
    def __init__(
        self,
        *,
        config: ControllerConfig,
        journal: Journal,
        state: ClusterState,
        clock: Clock,
        metrics: ControllerMetrics,
        task_group: asyncio.TaskGroup,
    ) -> None:
        self._config = config
        self._settings = settings_from(config)
        self._journal = journal
        self._state = state
        self._clock = clock
        self._metrics = metrics
        self._lock = asyncio.Lock()
        # Completed with the error when a commit fails: the app stops (state unknown).
        self.fatal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._liveness = Liveness(session_timeout_ms=config.session_timeout_ms)
        self._dispatcher = Dispatcher(
            current_state=lambda: self._state,
            is_live=lambda broker_id: self._liveness.is_alive(
                broker_id, self._clock.monotonic_ms()
            ),
            task_group=task_group,
            request_timeout_ms=config.broker_request_timeout_ms,
            retry_backoff_ms=config.broker_retry_backoff_ms,
            retry_backoff_max_ms=config.broker_retry_backoff_max_ms,
            max_message_bytes=config.grpc_max_message_bytes,
        )
        metrics.observe_state(state)

    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def dispatcher(self) -> Dispatcher:
        return self._dispatcher

    async def start(self, *, new_cluster_id: str) -> None:
        """Journal the start (cluster id once, a new controller epoch) and resync brokers.

        Unfenced brokers get a full session of grace: they keep their leaderships if they
        heartbeat in time, and all of them learn the new controller epoch.
        """
        async with self._lock:
            records = bootstrap(
                self._state, controller_id=self._config.node_id, new_cluster_id=new_cluster_id
            )
            now_ms = self._clock.monotonic_ms()
            for broker_id, broker in sorted(self._state.brokers.items()):
                if not broker.fenced:
                    self._liveness.touch(broker_id, now_ms)
            self._commit(ControllerResult(records=tuple(records), reply=None))
            for broker_id in sorted(self._liveness.alive(now_ms)):
                self._dispatcher.full_sync(broker_id)
        logger.info(
            "controller %d started: cluster %s, controller epoch %d, metadata offset %d",
            self._config.node_id,
            self._state.cluster_id,
            self._state.controller_epoch,
            self._state.metadata_offset,
        )

    # ---- broker-facing calls -----------------------------------------------------------------

    async def register_broker(
        self,
        *,
        broker_id: int,
        host: str,
        port: int,
        rack: str,
        incarnation_id: str,
        clean_shutdown: bool,
        external_host: str = "",
        external_port: int = 0,
    ) -> RegisterReply:
        async with self._lock:
            now_ms = self._clock.monotonic_ms()
            result = register_broker(
                self._state,
                self._settings,
                broker_id=broker_id,
                host=host,
                port=port,
                rack=rack,
                incarnation_id=incarnation_id,
                clean_shutdown=clean_shutdown,
                session_alive=self._liveness.is_alive(broker_id, now_ms),
                external_host=external_host,
                external_port=external_port,
            )
            if result.reply.error is ErrorCode.NONE:
                self._liveness.touch(broker_id, now_ms)
            return self._commit(result)

    async def heartbeat(
        self, *, broker_id: int, broker_epoch: int, metadata_offset: int, want_shutdown: bool
    ) -> HeartbeatReply:
        async with self._lock:
            now_ms = self._clock.monotonic_ms()
            caught_up_offset = max(
                metadata_offset, self._dispatcher.acked_metadata_offset(broker_id, broker_epoch)
            )
            result = heartbeat(
                self._state,
                self._settings,
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                want_shutdown=want_shutdown,
                caught_up_offset=caught_up_offset,
            )
            revived = False
            if result.reply.error is ErrorCode.NONE:
                if want_shutdown:
                    self._liveness.forget(broker_id)
                else:
                    revived = self._liveness.touch(broker_id, now_ms)
            reply = self._commit(result)
            if revived:
                # Its session had expired (fenced, queue dropped): bring it up to date.
                self._dispatcher.full_sync(broker_id)
            return reply

    async def alter_partition(
        self, *, broker_id: int, broker_epoch: int, items: Sequence[AlterPartitionItem]
    ) -> AlterPartitionReply:
        async with self._lock:
            return self._commit(
                alter_partition(
                    self._state,
                    self._settings,
                    broker_id=broker_id,
                    broker_epoch=broker_epoch,
                    items=items,
                )
            )

    async def controlled_shutdown(
        self, *, broker_id: int, broker_epoch: int
    ) -> ControlledShutdownReply:
        async with self._lock:
            return self._commit(
                controlled_shutdown(
                    self._state, self._settings, broker_id=broker_id, broker_epoch=broker_epoch
                )
            )

    # ---- admin calls -------------------------------------------------------------------------

    async def create_topics(
        self, *, topics: Sequence[NewTopic], validate_only: bool
    ) -> tuple[TopicResult, ...]:
        async with self._lock:
            return self._commit(
                create_topics(
                    self._state, self._settings, topics=topics, validate_only=validate_only
                )
            )

    async def delete_topics(self, *, names: Sequence[str]) -> tuple[TopicResult, ...]:
        async with self._lock:
            return self._commit(delete_topics(self._state, names=names))

    async def elect_leaders(
        self, *, election_type: ElectionType, partitions: Sequence[PartitionKey] | None
    ) -> tuple[ElectionOutcome, ...]:
        async with self._lock:
            return self._commit(
                elect_leaders(
                    self._state,
                    self._settings,
                    election_type=election_type,
                    partitions=partitions,
                )
            )

    async def alter_configs(
        self,
        *,
        topic: str,
        set_configs: Mapping[str, str],
        delete_configs: Sequence[str],
        validate_only: bool,
    ) -> ConfigReply:
        async with self._lock:
            return self._commit(
                alter_configs(
                    self._state,
                    self._settings,
                    topic=topic,
                    set_configs=set_configs,
                    delete_configs=delete_configs,
                    validate_only=validate_only,
                )
            )

    async def init_producer_id(self, *, producer_id: int, producer_epoch: int) -> ProducerIdReply:
        async with self._lock:
            return self._commit(
                init_producer_id(
                    self._state, producer_id=producer_id, producer_epoch=producer_epoch
                )
            )

    # ---- timers ------------------------------------------------------------------------------

    async def expire_sessions(self) -> list[int]:
        """Fence every broker whose session ran out; return their ids."""
        async with self._lock:
            now_ms = self._clock.monotonic_ms()
            expired = self._liveness.expired(now_ms)
            for broker_id in expired:
                self._liveness.forget(broker_id)
                broker = self._state.brokers.get(broker_id)
                if broker is not None and not broker.fenced:
                    state_change_logger.info(
                        "broker %d missed heartbeats for %d ms: fencing it",
                        broker_id,
                        self._config.session_timeout_ms,
                    )
                self._commit(
                    fence_broker(
                        self._state,
                        self._settings,
                        broker_id=broker_id,
                        reason="session expired",
                    )
                )
            return expired

    async def heartbeat_stream_broken(self, *, broker_id: int, broker_epoch: int) -> None:
        """A broker's heartbeat stream ended without a shutdown request: the process died or
        its connection broke. Fence it now rather than at the session timeout."""
        async with self._lock:
            broker = self._state.brokers.get(broker_id)
            if broker is None or broker.broker_epoch != broker_epoch or broker.fenced:
                return
            self._liveness.forget(broker_id)
            state_change_logger.info("broker %d heartbeat stream broke: fencing it", broker_id)
            self._commit(
                fence_broker(
                    self._state,
                    self._settings,
                    broker_id=broker_id,
                    reason="heartbeat stream broke",
                )
            )

    async def rebalance_leaders(self) -> tuple[ElectionOutcome, ...]:
        """One automatic preferred-leader rebalance pass."""
        async with self._lock:
            keys = partitions_to_rebalance(
                self._state,
                imbalance_percentage=self._settings.leader_imbalance_per_broker_percentage,
            )
            if not keys:
                return ()
            logger.info("leader imbalance above threshold: preferred elections for %s", keys)
            return self._commit(
                elect_leaders(
                    self._state,
                    self._settings,
                    election_type=ElectionType.PREFERRED,
                    partitions=keys,
                )
            )

    async def run_session_timer(self) -> None:
        """Check session deadlines every tick; runs until cancelled."""
        tick_s = max(10, min(self._config.heartbeat_interval_ms, 100)) / 1000
        while True:
            await asyncio.sleep(tick_s)
            await self.expire_sessions()

    async def run_rebalance_timer(self) -> None:
        """Automatic preferred-leader rebalance every check interval; runs until cancelled."""
        while True:
            await asyncio.sleep(self._config.leader_imbalance_check_interval_ms / 1000)
            await self.rebalance_leaders()

    async def close(self) -> None:
        await self._dispatcher.close()
        self._journal.close()

    # ---- commit ------------------------------------------------------------------------------

    def _commit(self, result: ControllerResult[T]) -> T:
        """Journal (durably), apply, log, measure, propagate. Caller holds the lock.

        Synchronous on purpose: with no await between the journal write and the state
        update, a cancelled request can never leave a durable record unapplied.
        """
        assert self._lock.locked()
        records = result.records
        if not records:
            return result.reply
        old = self._state
        try:
            last_offset = self._journal.append(records)
        except Exception as error:
            logger.critical("metadata journal write failed, stopping the controller: %s", error)
            if not self.fatal.done():
                self.fatal.set_exception(error)
            raise
        state = old
        for offset, record in enumerate(records, start=last_offset - len(records) + 1):
            state = replay(state, offset, record)
        self._state = state
        self._log_changes(old, records, result)
        self._metrics.observe_state(state)
        for election in result.elections:
            self._metrics.observe_election(election.kind)
        self._dispatcher.submit(
            plan_propagation(old, state, records),
            live=self._liveness.alive(self._clock.monotonic_ms()),
        )
        if self._journal.records_since_snapshot >= self._config.snapshot_every_records:
            self._journal.write_snapshot(state)
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
                    state_change_logger.info(
                        "partition %s-%d: leader %s -> %d (leader epoch %d), ISR %s -> %s, "
                        "partition epoch %d, %s",
                        topic,
                        partition,
                        before.leader if before is not None else "none",
                        after.leader,
                        after.leader_epoch,
                        list(before.isr) if before is not None else [],
                        list(after.isr),
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
        for warning in result.warnings:
            state_change_logger.warning("%s", warning)
