"""Partition: binds one PartitionLog to its replication state on this broker.

Caller: ReplicaManager (and through it the gRPC servicers, the follower fetcher and the
ISR reporter). Affects: the partition's log, high watermark, ISR view and waiters.

The state is an immutable `ReplicaState` (`LeaderState | FollowerState | OfflineState`,
`broker/replica/state.py`); every decision is a pure function of `broker/replica/`
(`transitions`, `isr`, `high_watermark`, `truncation`) and this class only holds the
current value, performs the log I/O the decision asks for, and wakes waiters.

Roles (driven by LeaderAndIsr from the controller, or by the standalone topic store):

    OFFLINE -> LEADER | FOLLOWER      first LeaderAndIsr naming this broker
    LEADER <-> FOLLOWER               a newer leader epoch names another leader
    any -> OFFLINE                    StopReplica / topic deleted

Waiting is event-driven: every change of LEO, HW, ISR or role resolves the current
`changed()` future, so long-poll fetches and acks=all produces wake up without polling.

Every truncation of a non-empty suffix (divergence, out-of-range reset) first makes a
loss receipt durable, with the discarded batches when they fit the broker's bound
(`broker/log/quarantine.py`); if it cannot be written, the log is not truncated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import msgspec

from broker.clock import Clock
from broker.errors import BrokerError, NotEnoughReplicasError
from broker.log import producer_snapshots
from broker.log.errors import LogStorageError, OffsetOutOfRangeError
from broker.log.loss_receipt import (
    LossReceipt,
    TruncationCause,
    divergence_cause,
    leader_log_end_cause,
    leader_log_start_cause,
)
from broker.log.partition_log import AppendInfo, PartitionLog
from broker.log.quarantine import Quarantine
from broker.replica.high_watermark import (
    ProduceOutcome,
    advance_high_watermark,
    can_append_with_acks_all,
    follower_high_watermark,
    latest_offset_available,
    produce_outcome,
)
from broker.replica.isr import (
    AlterPartitionItem,
    AlterPartitionOutcome,
    AlterPartitionResult,
    ExpandIsr,
    NotAFollowerError,
    ShrinkIsr,
    apply_alter_partition_result,
    pending_alter_partition,
    propose_isr_change,
    record_follower_fetch,
    replica_to_expand,
    replicas_to_shrink,
)
from broker.replica.producer_state import (
    NO_PRODUCER_ID,
    BatchMetadata,
    ProducerEntry,
    Verdict,
    check_batch,
    record_batch,
)
from broker.replica.state import (
    NO_LEADER,
    FollowerState,
    LeaderState,
    OfflineState,
    ReplicaRole,
    ReplicaState,
)
from broker.replica.transitions import (
    BecomeFollower,
    BecomeLeader,
    Ignore,
    LeaderAndIsrPartition,
    UpdateIsr,
    apply_leader_isr_update,
    check_partition_access,
    decide_partition_update,
    new_follower_state,
    new_leader_state,
    stopped_state,
)
from broker.replica.truncation import (
    EpochEndOffset,
    FetchOffsetOutOfRange,
    diverging_epoch_for_fetch,
    out_of_range_reset,
    truncation_point,
)
from broker.topic_settings import TopicSettings
from minikafka import stage_trace
from minikafka.errors import ErrorCode, MiniKafkaError
from minikafka.record_batch import (
    F_PRODUCER_ID,
    BatchHeader,
    CorruptBatchError,
    header_from_fields,
    iter_batches,
    scan_batches,
)

logger = logging.getLogger(__name__)
state_change_logger = logging.getLogger("minikafka.state_change")

#: Kept for readers of this module: the roles are `ReplicaRole`.
Role = ReplicaRole


class PartitionRead(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to one partition of a fetch."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    diverging_epoch: tuple[int, int] | None = None


class DuplicateBatchError(BrokerError):
    """An idempotent producer resent a batch the log already holds (not appended again)."""

    default_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER

    def __init__(self, original: BatchMetadata) -> None:
        super().__init__(
            f"batch already written at offsets {original.first_offset}-{original.last_offset}"
        )
        self.original = original


class FailedAfterAppendError(BrokerError):
    """The batch was appended, then a later step of the append failed (fsync, producer
    snapshot): the batch may still be served and committed, so the answer is indefinite
    (issue 14 hole 3's rule). Carries the cause's code and message."""

    def __init__(self, cause: MiniKafkaError) -> None:
        super().__init__(f"{cause} (after the batch was appended)", code=cause.code)
        self.cause = cause


PRODUCER_STATE_SCAN_BYTES = 4 * 1024 * 1024
#: Producer-state snapshots kept per partition (the newest one serves; the older one
#: serves after a truncation below the newest).
PRODUCER_SNAPSHOTS_KEPT = 2
_snapshot_encoder = msgspec.msgpack.Encoder()
_snapshot_decoder = msgspec.msgpack.Decoder(list[ProducerEntry])


class Partition:
    """One partition replica hosted by this broker."""

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        log: PartitionLog,
        local_broker_id: int,
        settings: TopicSettings,
        clock: Clock,
        replica_lag_time_max_ms: int,
        quarantine: Quarantine,
        isr_eligible_epochs: Mapping[int, int] | None = None,
        unsafe_hw_is_leo: bool = False,
        unsafe_isr_without_broker_epoch: bool = False,
        unsafe_stale_fetch_answers: bool = False,
    ) -> None:
        self.topic = topic
        self._unsafe_hw_is_leo = unsafe_hw_is_leo
        #: DELIBERATELY UNSAFE, the simulator's canaries only: the rules before the fixes
        #: of holes 1 (KIP-903, `isr` functions' `kip903`) and 4 (the follower log takes
        #: a batch of an older epoch than its epoch cache's latest).
        self._kip903 = not unsafe_isr_without_broker_epoch
        self._refuse_older_epoch = not unsafe_stale_fetch_answers
        self.partition = partition
        self.log = log
        self.local_broker_id = local_broker_id
        self.settings = settings
        self._clock = clock
        self._lag_ms = replica_lag_time_max_ms
        self.state: ReplicaState = OfflineState(topic=topic, partition=partition)
        #: Brokers that may join an ISR, with the broker epoch they must fetch with
        #: (live, unfenced, not shutting down: `MetadataCache.isr_eligible_epochs`). The
        #: replica manager owns the mapping and keeps it current; read only here.
        self.isr_eligible_epochs: Mapping[int, int] = (
            {} if isr_eligible_epochs is None else isr_eligible_epochs
        )
        self.last_alter_sent_ms = 0
        self._changed: asyncio.Future[None] | None = None
        #: acks=all produces waiting for the HW, answered by `_complete_parked`.
        self._parked: list[_ParkedProduce] = []
        self._log_prefix = f"[Partition {topic}-{partition} broker={local_broker_id}] "
        #: Idempotent producers' state (producer id -> entry), rebuilt from the log.
        self.producers: dict[int, ProducerEntry] = {}
        #: Offset of the newest producer-state snapshot on disk (-1: none) and the base
        #: of the segment appends went to when it was taken (a roll takes another).
        self._snapshot_offset = -1
        self._snapshot_segment_base = log.active_segment_base
        self.rebuild_producer_state()
        #: Loss receipts and discarded batches of this partition's truncations.
        self.quarantine = quarantine.for_log(log)

    # ---- idempotent producers ----------------------------------------------------

    def rebuild_producer_state(self) -> None:
        """Rebuild the producer table: the newest snapshot at or below the LEO, then the
        batch headers of the log after it (the whole log when there is no snapshot)."""
        log = self.log
        directory = log.directory
        producer_snapshots.delete_above(directory, log.log_end_offset, disk=log.disk)
        producers: dict[int, ProducerEntry] = {}
        offset = log.log_start_offset
        self._snapshot_offset = -1
        for snapshot in reversed(producer_snapshots.offsets(directory)):
            try:
                entries = _snapshot_decoder.decode(
                    producer_snapshots.read(directory, snapshot, disk=log.disk)
                )
            except (OSError, msgspec.DecodeError) as exc:
                logger.warning(
                    "%sdropping unreadable producer snapshot at %s: %s",
                    self._log_prefix,
                    snapshot,
                    exc,
                )
                producer_snapshots.delete(directory, snapshot, disk=log.disk)
                continue
            producers = {entry.producer_id: entry for entry in entries}
            offset = max(offset, snapshot)
            self._snapshot_offset = snapshot
            break
        while offset < log.log_end_offset:
            chunk = log.read(offset, max_bytes=PRODUCER_STATE_SCAN_BYTES)
            if not chunk.records:
                break
            for _, header in iter_batches(chunk.records, verify_crc=False):
                _remember(producers, header, header.base_offset)
            offset = chunk.next_offset
        self.producers = producers

    def snapshot_producer_state(self) -> None:
        """Persist the producer table as of the LEO (after a segment roll and at clean
        shutdown), so a restart or a truncation rescans only what follows it."""
        log = self.log
        self._snapshot_segment_base = log.active_segment_base
        leo = log.log_end_offset
        if leo == self._snapshot_offset:
            return
        payload = _snapshot_encoder.encode(list(self.producers.values()))
        try:
            producer_snapshots.write(log.directory, leo, payload, disk=log.disk)
            producer_snapshots.retain_newest(log.directory, PRODUCER_SNAPSHOTS_KEPT, disk=log.disk)
        except OSError as exc:
            raise LogStorageError(f"{log.name}: cannot write a producer snapshot: {exc}") from exc
        self._snapshot_offset = leo

    def _snapshot_after_roll(self) -> None:
        if self.log.active_segment_base != self._snapshot_segment_base:
            self.snapshot_producer_state()

    def _check_sequences(self, records: bytes) -> list[BatchHeader]:
        """Check idempotent batches before appending; raises on a duplicate or a gap.

        Returns every batch's header for `_record_appended` (which counts offsets over
        all of them), or [] when no batch is idempotent (nothing to remember)."""
        try:
            scanned = scan_batches(records, verify_crc=False)
        except CorruptBatchError:
            return []  # the log's validation reports it precisely
        if all(fields[F_PRODUCER_ID] == NO_PRODUCER_ID for _, fields in scanned):
            return []  # no idempotent batch: nothing to check or remember
        headers = [header_from_fields(fields) for _, fields in scanned]
        tentative = dict(self.producers)
        next_offset = 0  # relative; only sequences matter here
        for header in headers:
            if header.producer_id == NO_PRODUCER_ID:
                next_offset += header.record_count
                continue
            check = check_batch(
                tentative.get(header.producer_id),
                producer_epoch=header.producer_epoch,
                first_sequence=header.base_sequence,
                record_count=header.record_count,
            )
            if check.verdict is Verdict.DUPLICATE:
                assert check.duplicate_of is not None
                if len(headers) == 1:
                    raise DuplicateBatchError(check.duplicate_of)
                raise BrokerError(
                    "a record set mixes already written and new batches",
                    code=ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                )
            if check.verdict is Verdict.REJECT:
                raise BrokerError(check.message, code=check.error_code)
            _remember(tentative, header, next_offset)
            next_offset += header.record_count
        return headers

    def _record_appended(self, headers: list[BatchHeader], first_offset: int) -> None:
        offset = first_offset
        for header in headers:
            _remember(self.producers, header, offset)
            offset += header.record_count

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, {self.state.role.value})"

    # ---- views -----------------------------------------------------------------

    @property
    def role(self) -> ReplicaRole:
        return self.state.role

    @property
    def leader_id(self) -> int:
        return self.state.leader_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self.state.partition_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        state = self.state
        return () if isinstance(state, OfflineState) else state.replicas

    @property
    def isr(self) -> frozenset[int]:
        state = self.state
        return frozenset() if isinstance(state, OfflineState) else state.isr

    # ---- waiting ---------------------------------------------------------------

    def changed(self) -> asyncio.Future[None]:
        """A future resolved at the next change of LEO, HW, ISR or role."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def _signal(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        if self._parked:
            self._complete_parked()

    def _complete_parked(self) -> None:
        """Answer every parked acks=all produce whose outcome is now decided, in the call
        that changed the state (the HW advance, a role or ISR change): the waiter resumes
        at the next loop iteration instead of after a chain of wake-ups."""
        for parked in self._parked:
            if not parked.answer.done():
                outcome = self.produce_outcome(parked.required_offset, parked.leader_epoch)
                if outcome is not None:
                    parked.answer.set_result(outcome)

    # ---- role changes ----------------------------------------------------------

    def apply_update(self, update: LeaderAndIsrPartition) -> ErrorCode:
        """Apply one LeaderAndIsr partition state; returns the per-partition answer."""
        decision = decide_partition_update(self.state, update, local_broker_id=self.local_broker_id)
        now_ms = self._clock.monotonic_ms()
        match decision:
            case Ignore(reason=reason, error_code=code):
                if code is not ErrorCode.NONE:
                    logger.info(
                        "%signored LeaderAndIsr (epoch %s/%s): %s",
                        self._log_prefix,
                        update.leader_epoch,
                        update.partition_epoch,
                        reason.value,
                    )
                return code
            case BecomeLeader():
                # Record where our epoch starts before anything is appended in it, so a
                # follower asking about any later epoch gets an answer (KIP-279).
                self.log.epoch_cache.assign(update.leader_epoch, self.log.log_end_offset)
                leader = new_leader_state(
                    update,
                    previous=self.state,
                    log_end_offset=self.log.log_end_offset,
                    high_watermark=self.log.high_watermark,
                    min_insync_replicas=self.settings.min_insync_replicas,
                    now_ms=now_ms,
                )
                self.state = leader
                state_change_logger.info(
                    "%sbecame leader at epoch %s (partition epoch %s, isr %s, leo %s, hw %s)",
                    self._log_prefix,
                    update.leader_epoch,
                    update.partition_epoch,
                    sorted(update.isr),
                    self.log.log_end_offset,
                    self.log.high_watermark,
                )
                self._advance_high_watermark()
            case BecomeFollower():
                # An epoch this broker led without appending to it starts at the LEO:
                # drop it, so the last fetched epoch we report is that of our last batch
                # and the new leader's older-epoch batches after it are not refused.
                self.log.epoch_cache.truncate_from_end(self.log.log_end_offset)
                self.state = new_follower_state(update)
                state_change_logger.info(
                    "%sbecame follower of %s at epoch %s (leo %s, hw %s)",
                    self._log_prefix,
                    update.leader,
                    update.leader_epoch,
                    self.log.log_end_offset,
                    self.log.high_watermark,
                )
            case UpdateIsr():
                current = self.state
                if isinstance(current, LeaderState):
                    self.state = apply_leader_isr_update(current, update, kip903=self._kip903)
                    self._advance_high_watermark()
                else:
                    self.state = new_follower_state(update)
                state_change_logger.info(
                    "%sisr is now %s (partition epoch %s)",
                    self._log_prefix,
                    sorted(update.isr),
                    update.partition_epoch,
                )
        self._signal()
        return ErrorCode.NONE

    def stop(self) -> None:
        """StopReplica: stop serving, keep the epochs so stale updates stay fenced."""
        self.state = stopped_state(self.state)
        self._signal()

    def update_settings(self, settings: TopicSettings) -> None:
        self.settings = settings
        state = self.state
        if isinstance(state, LeaderState):
            self.state = msgspec.structs.replace(
                state, min_insync_replicas=settings.min_insync_replicas
            )
            self._advance_high_watermark()
            self._signal()

    # ---- leader path -----------------------------------------------------------

    def _leader_state(self, requested_leader_epoch: int) -> LeaderState:
        code = check_partition_access(
            self.state, requested_leader_epoch=requested_leader_epoch, require_leader=True
        )
        if code is not None:
            raise BrokerError(self._access_message(code), code=code)
        state = self.state
        assert isinstance(state, LeaderState)
        return state

    def _access_message(self, code: ErrorCode) -> str:
        if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
            leader = self.leader_id
            return (
                f"broker {self.local_broker_id} is not the leader of {self.topic}-"
                f"{self.partition} (leader: {leader if leader != NO_LEADER else 'none'})"
            )
        return f"{code.name}: this broker's leader epoch is {self.leader_epoch}"

    def append_as_leader(
        self, records: bytes, *, acks: int, current_leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        """Validate and append a produce record set; raises a BrokerError on refusal.

        For acks=all the committed ISR is checked *before* appending (NOT_ENOUGH_REPLICAS
        with nothing appended), as Kafka does.
        """
        state = self._leader_state(current_leader_epoch)
        if acks == -1 and not can_append_with_acks_all(len(state.isr), state.min_insync_replicas):
            raise NotEnoughReplicasError(
                f"ISR {sorted(state.isr)} of {self.topic}-{self.partition} has {len(state.isr)} "
                f"member(s), below min.insync.replicas={state.min_insync_replicas}"
            )
        headers = self._check_sequences(records)
        end_before = self.log.log_end_offset
        try:
            info = self.log.append_as_leader(
                records,
                leader_epoch=state.leader_epoch,
                now_ms=now_ms,
                log_append_time=self.settings.log_append_time,
            )
            self._record_appended(headers, info.first_offset)
            self._snapshot_after_roll()
            if self.settings.fsync:
                self.log.flush()
        except MiniKafkaError as exc:
            if self.log.log_end_offset != end_before:  # failed after the batch went in
                raise FailedAfterAppendError(exc) from exc
            raise
        self._advance_high_watermark()
        self._signal()
        return info

    def check_latest_offset_available(self) -> None:
        """Raise OFFSET_NOT_AVAILABLE while this new leader's HW is below the start of its
        epoch (KIP-207: the latest offset must never go back across a leader change)."""
        state = self.state
        if isinstance(state, LeaderState) and not latest_offset_available(
            high_watermark=self.log.high_watermark,
            leader_epoch_start_offset=state.leader_epoch_start_offset,
        ):
            raise BrokerError(
                f"{self.topic}-{self.partition}: the new leader's high watermark "
                f"{self.log.high_watermark} is below the start of its leader epoch "
                f"{state.leader_epoch} ({state.leader_epoch_start_offset}); retry",
                code=ErrorCode.OFFSET_NOT_AVAILABLE,
            )

    def produce_outcome(self, required_offset: int, appended_leader_epoch: int) -> ErrorCode | None:
        """For a parked acks=all produce appended in `appended_leader_epoch`: NONE when
        done, an error when it can never complete here, None to keep waiting."""
        state = self.state
        leader = state if isinstance(state, LeaderState) else None
        outcome = produce_outcome(
            required_offset=required_offset,
            high_watermark=self.log.high_watermark,
            isr_size=len(leader.isr) if leader is not None else 0,
            min_isr=leader.min_insync_replicas if leader is not None else 1,
            appended_leader_epoch=appended_leader_epoch,
            leader_epoch=leader.leader_epoch if leader is not None else None,
        )
        if outcome is ProduceOutcome.COMPLETE:
            return ErrorCode.NONE
        if outcome is ProduceOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if outcome is ProduceOutcome.LEADERSHIP_CHANGED:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    async def wait_for_high_watermark(
        self, required_offset: int, timeout_ms: int, *, appended_leader_epoch: int
    ) -> ErrorCode:
        """Park an acks=all produce appended in `appended_leader_epoch` until the HW covers
        `required_offset` (purgatory). Every state change (`_signal`) decides the parked
        produces it can (`produce_outcome`); the timer answers REQUEST_TIMED_OUT."""
        outcome = self.produce_outcome(required_offset, appended_leader_epoch)
        if outcome is not None:
            return outcome
        if timeout_ms <= 0:
            return ErrorCode.REQUEST_TIMED_OUT
        loop = asyncio.get_running_loop()
        parked = _ParkedProduce(required_offset, appended_leader_epoch, loop.create_future())
        timer = loop.call_later(timeout_ms / 1000, _time_out, parked.answer)
        self._parked.append(parked)
        try:
            return await parked.answer
        finally:
            timer.cancel()
            self._parked.remove(parked)

    def _advance_high_watermark(self) -> None:
        state = self.state
        if not isinstance(state, LeaderState):
            return
        if self._unsafe_hw_is_leo:
            self.log.update_high_watermark(self.log.log_end_offset)
            self.state = msgspec.structs.replace(state, high_watermark=self.log.high_watermark)
            return
        synced = msgspec.structs.replace(state, high_watermark=self.log.high_watermark)
        advanced = advance_high_watermark(
            synced,
            leader_leo=self.log.log_end_offset,
            now_ms=self._clock.monotonic_ms(),
            replica_lag_time_max_ms=self._lag_ms,
            eligible_epochs=self.isr_eligible_epochs,
            kip903=self._kip903,
        )
        self.state = advanced
        if advanced.high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(advanced.high_watermark)
            if stage_trace.TRACE is not None:
                stage_trace.TRACE.record("hw", self.topic, self.partition, advanced.high_watermark)

    def record_follower_fetch(
        self, replica_id: int, fetch_offset: int, *, broker_epoch: int
    ) -> AlterPartitionItem | None:
        """A validated follower fetch at `fetch_offset` (its LEO) from incarnation
        `broker_epoch` of broker `replica_id`. Returns an ISR expand proposal to send to
        the controller, if this fetch made that follower eligible."""
        state = self.state
        if not isinstance(state, LeaderState):
            return None
        try:
            state = record_follower_fetch(
                state,
                broker_id=replica_id,
                fetch_offset=fetch_offset,
                leader_leo=self.log.log_end_offset,
                now_ms=self._clock.monotonic_ms(),
                broker_epoch=broker_epoch,
                kip903=self._kip903,
            )
        except NotAFollowerError:
            return None
        self.state = state
        before = self.log.high_watermark
        self._advance_high_watermark()
        if self.log.high_watermark != before:
            self._signal()
        return self._maybe_expand(replica_id)

    def _maybe_expand(self, fetched_by: int) -> AlterPartitionItem | None:
        state = self.state
        if not isinstance(state, LeaderState):
            return None
        joining = replica_to_expand(
            state,
            broker_id=fetched_by,
            eligible_epochs=self.isr_eligible_epochs,
            kip903=self._kip903,
        )
        if joining is None:
            return None
        self.state, item = propose_isr_change(state, ExpandIsr(adding=joining))
        state_change_logger.info(
            "%sproposing ISR expand: add %s to %s", self._log_prefix, joining, sorted(state.isr)
        )
        return item

    def maybe_shrink(self) -> AlterPartitionItem | None:
        """Propose removing ISR members that have not caught up within the lag time."""
        state = self.state
        if not isinstance(state, LeaderState):
            return None
        lagging = replicas_to_shrink(
            state,
            leader_leo=self.log.log_end_offset,
            now_ms=self._clock.monotonic_ms(),
            replica_lag_time_max_ms=self._lag_ms,
        )
        if not lagging:
            return None
        self.state, item = propose_isr_change(state, ShrinkIsr(removing=lagging))
        state_change_logger.info(
            "%sproposing ISR shrink: remove %s from %s (no catch-up within %s ms)",
            self._log_prefix,
            sorted(lagging),
            sorted(state.isr),
            self._lag_ms,
        )
        return item

    def pending_alter_partition(self) -> AlterPartitionItem | None:
        state = self.state
        return pending_alter_partition(state) if isinstance(state, LeaderState) else None

    def on_alter_partition_result(
        self, sent: AlterPartitionItem, result: AlterPartitionResult
    ) -> AlterPartitionOutcome:
        state = self.state
        if not isinstance(state, LeaderState):
            return AlterPartitionOutcome.STALE_RESPONSE
        self.state, outcome = apply_alter_partition_result(state, sent, result, kip903=self._kip903)
        if outcome is AlterPartitionOutcome.COMMITTED:
            state_change_logger.info(
                "%sISR change committed: isr %s, partition epoch %s",
                self._log_prefix,
                sorted(result.isr),
                result.partition_epoch,
            )
            self._advance_high_watermark()
            self._signal()
        elif outcome is not AlterPartitionOutcome.STALE_RESPONSE:
            logger.info(
                "%sAlterPartition %s: %s", self._log_prefix, result.error_code.name, outcome.value
            )
        return outcome

    # ---- follower path ---------------------------------------------------------

    def fetch_position(self) -> tuple[int, int]:
        """(fetch offset, last fetched epoch) for the next replica fetch."""
        latest = self.log.epoch_cache.latest_epoch()
        return self.log.log_end_offset, latest if latest is not None else -1

    def _epoch_entries(self) -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in self.log.epoch_cache.entries()]

    def truncate_on_divergence(self, epoch: int, end_offset: int) -> None:
        """The leader says our log diverges at (epoch, end_offset): truncate (KIP-101/279)."""
        point = truncation_point(
            local_entries=self._epoch_entries(),
            log_end_offset=self.log.log_end_offset,
            diverging=EpochEndOffset(epoch=epoch, end_offset=end_offset),
        )
        self._truncate(point.offset, cause=divergence_cause(epoch, end_offset, self.leader_id))

    def _truncate(self, offset: int, *, cause: TruncationCause) -> None:
        if offset >= self.log.log_end_offset:
            # Still drop epoch entries at or past the LEO: a short-lived leader may have
            # assigned an epoch it never appended to (Kafka UnifiedLog.truncateTo).
            self.log.epoch_cache.truncate_from_end(self.log.log_end_offset)
            return
        level = logging.WARNING if offset < self.log.high_watermark else logging.INFO
        state_change_logger.log(
            level,
            "%struncating from leo %s to %s (hw %s): %s",
            self._log_prefix,
            self.log.log_end_offset,
            offset,
            self.log.high_watermark,
            cause.detail,
        )
        receipt = self._receipt_before_truncation(offset, cause)
        self.log.truncate_to(offset)
        self.quarantine.after_truncation(receipt)
        self.rebuild_producer_state()
        self._signal()

    def _receipt_before_truncation(self, offset: int, cause: TruncationCause) -> LossReceipt | None:
        """Make the receipt of truncating to `offset` (emptying the log, at or below its
        start) durable; raises `LogStorageError` if it cannot be (do not truncate)."""
        state = self.state
        return self.quarantine.before_truncation(
            self.log,
            offset=offset,
            cause=cause,
            broker_id=self.local_broker_id,
            leader_id=state.leader_id,
            leader_epoch=state.leader_epoch,
            now_ms=self._clock.wall_ms(),
        )

    def append_as_follower(
        self,
        records: bytes,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        now_ms: int,
    ) -> None:
        """Append the leader's bytes as they are and follow its HW and log start offset."""
        if records:
            end_before = self.log.log_end_offset
            try:
                self.log.append_as_follower(
                    records, now_ms=now_ms, refuse_older_epoch=self._refuse_older_epoch
                )
                if self.settings.fsync:
                    # The leader counts this offset once our next fetch asks past it.
                    self.log.flush()
            except LogStorageError:
                if self.settings.fsync and self.log.log_end_offset != end_before:
                    # Never let the next fetch report a batch that was not fsynced (the
                    # leader would count it towards the HW): drop it, fetch it again.
                    self.log.truncate_to(end_before)
                raise
            for _, fields in scan_batches(records, verify_crc=False):
                if fields[F_PRODUCER_ID] != NO_PRODUCER_ID:
                    header = header_from_fields(fields)
                    _remember(self.producers, header, header.base_offset)
            self._snapshot_after_roll()
        if leader_log_start_offset > self.log.log_start_offset:
            self.log.maybe_increment_log_start_offset(
                min(leader_log_start_offset, self.log.log_end_offset)
            )
        self.log.update_high_watermark(
            follower_high_watermark(
                leader_hw=leader_high_watermark,
                log_end_offset=self.log.log_end_offset,
                log_start_offset=self.log.log_start_offset,
            )
        )
        self._signal()

    def reset_out_of_range(
        self, *, leader_log_start_offset: int, leader_log_end_offset: int
    ) -> None:
        reset = out_of_range_reset(
            log_end_offset=self.log.log_end_offset,
            leader_log_start_offset=leader_log_start_offset,
            leader_log_end_offset=leader_log_end_offset,
        )
        if reset.start_at is not None:
            state_change_logger.warning(
                "%sleader's log starts at %s, beyond our leo %s: restarting the log there",
                self._log_prefix,
                reset.start_at,
                self.log.log_end_offset,
            )
            receipt = self._receipt_before_truncation(
                self.log.log_start_offset,
                leader_log_start_cause(reset.start_at, self.log.log_end_offset, self.leader_id),
            )
            self.log.truncate_fully_and_start_at(reset.start_at)
            self.quarantine.after_truncation(receipt)
            producer_snapshots.delete_above(self.log.directory, -1, disk=self.log.disk)
            self.producers = {}
            self._snapshot_offset = -1
            self._signal()
        elif reset.truncate_to is not None:
            self._truncate(
                reset.truncate_to, cause=leader_log_end_cause(reset.truncate_to, self.leader_id)
            )

    # ---- reads -----------------------------------------------------------------

    def read(
        self,
        offset: int,
        *,
        max_bytes: int,
        current_leader_epoch: int,
        last_fetched_epoch: int,
        replica_fetch: bool,
        min_one_batch: bool = True,
    ) -> PartitionRead:
        """Read for a consumer (bounded by the HW; followers may serve it, KIP-392) or a
        follower (bounded by the LEO, leader only). Checks the fetcher's last fetched epoch
        against our log and answers with the diverging epoch instead of data if needed."""
        code = check_partition_access(
            self.state, requested_leader_epoch=current_leader_epoch, require_leader=replica_fetch
        )
        if code is not None:
            raise BrokerError(self._access_message(code), code=code)
        log = self.log
        hw = log.high_watermark
        if isinstance(self.state, LeaderState) or not replica_fetch:
            try:
                diverging = self.diverging_epoch(offset, last_fetched_epoch)
            except OffsetOutOfRangeError:
                if replica_fetch or offset < log.log_start_offset:
                    raise
                # A consumer's last fetched epoch this log does not know (bogus, or a
                # follower not yet in it): retriable, never OFFSET_OUT_OF_RANGE, which
                # would make the consumer reset its position (issue 23).
                latest = log.epoch_cache.latest_epoch()
                raise BrokerError(
                    f"last fetched epoch {last_fetched_epoch} is not in the log of "
                    f"{self.topic}-{self.partition} on broker {self.local_broker_id} "
                    f"(latest epoch {latest}); refresh metadata and retry",
                    code=ErrorCode.UNKNOWN_LEADER_EPOCH,
                ) from None
            if diverging is not None:
                return self._empty_read(hw, diverging=(diverging.epoch, diverging.end_offset))
        if not replica_fetch and hw <= offset <= log.log_end_offset:
            # Nothing committed at or after `offset` yet (Kafka answers empty, not an error).
            return self._empty_read(hw)
        result = log.read(
            offset,
            max_bytes=max_bytes,
            max_offset=None if replica_fetch else hw,
            min_one_batch=min_one_batch,
        )
        return PartitionRead(
            records=result.records,
            high_watermark=hw,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            leader_epoch=self.leader_epoch,
        )

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> EpochEndOffset | None:
        """Where a fetcher's log diverges from ours, judged by its last fetched epoch
        (None: it does not); raises `OffsetOutOfRangeError` for an offset outside the log."""
        log = self.log
        try:
            return diverging_epoch_for_fetch(
                local_entries=self._epoch_entries(),
                log_end_offset=log.log_end_offset,
                log_start_offset=log.log_start_offset,
                fetch_offset=fetch_offset,
                last_fetched_epoch=last_fetched_epoch,
            )
        except FetchOffsetOutOfRange as exc:
            raise OffsetOutOfRangeError(str(exc)) from exc

    def _empty_read(self, hw: int, diverging: tuple[int, int] | None = None) -> PartitionRead:
        return PartitionRead(
            records=b"",
            high_watermark=hw,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
            leader_epoch=self.leader_epoch,
            diverging_epoch=diverging,
        )


class _ParkedProduce:
    """An acks=all produce waiting for the HW: the offset it needs, the leader epoch it
    was appended in, and the future its answer is set on."""

    __slots__ = ("answer", "leader_epoch", "required_offset")

    def __init__(
        self, required_offset: int, leader_epoch: int, answer: asyncio.Future[ErrorCode]
    ) -> None:
        self.required_offset = required_offset
        self.leader_epoch = leader_epoch
        self.answer = answer


def _time_out(answer: asyncio.Future[ErrorCode]) -> None:
    if not answer.done():
        answer.set_result(ErrorCode.REQUEST_TIMED_OUT)


def is_follower(state: ReplicaState) -> bool:
    return isinstance(state, FollowerState)


def _remember(producers: dict[int, ProducerEntry], header: BatchHeader, first_offset: int) -> None:
    if header.producer_id == NO_PRODUCER_ID:
        return
    producers[header.producer_id] = record_batch(
        producers.get(header.producer_id),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        first_sequence=header.base_sequence,
        record_count=header.record_count,
        first_offset=first_offset,
    )
