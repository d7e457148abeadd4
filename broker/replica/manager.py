"""ReplicaManager: owns this broker's Partitions and routes produce, fetch and offsets to them.

Caller: the gRPC servicers (translation only) and the controller link.
Affects: partition logs (through Partition), follower progress, waiters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import msgspec

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.errors import (
    InvalidRequiredAcksError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from broker.log.errors import OffsetOutOfRangeError
from broker.log.manager import LogManager
from broker.log.quarantine import Quarantine
from broker.replica.isr import AlterPartitionItem
from broker.replica.partition import DuplicateBatchError, FailedAfterAppendError, Partition, Role
from broker.replica.transitions import LeaderAndIsrPartition, check_leader_epoch
from broker.topic_settings import TopicSettings, resolve_topic_settings
from minikafka import stage_trace
from minikafka.errors import ErrorCode, MiniKafkaError

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class ProduceItem(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    records: bytes
    current_leader_epoch: int = -1


class ProduceResult(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str = ""
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    #: With an error: answered after the batch was appended, so it may still be committed.
    indefinite: bool = False


class FetchItem(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    partition_max_bytes: int = 1024 * 1024


class FetchResult(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None
    leader_epoch: int = -1


class ListOffsetsItem(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    timestamp_ms: int
    current_leader_epoch: int = -1


class ListOffsetsResult(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str = ""
    offset: int = -1
    timestamp_ms: int = -1
    leader_epoch: int = -1
    #: The leader's log as it answered (for `topic describe --offsets`); -1 with an error.
    log_start_offset: int = -1
    high_watermark: int = -1
    log_end_offset: int = -1


def _error_fields(exc: MiniKafkaError) -> tuple[ErrorCode, str]:
    return exc.code, str(exc)


class ReplicaManager:
    """All partition replicas of one broker."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        logs: LogManager,
        clock: Clock,
        topic_configs: Callable[[str], dict[str, str]],
    ) -> None:
        self._config = config
        self._logs = logs
        self._clock = clock
        self._topic_configs = topic_configs
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: Loss receipts and discarded batches of every truncation, bounded per broker.
        self.quarantine = Quarantine(
            logs.data_dir,
            max_bytes=config.quarantine_max_bytes,
            max_copy_bytes=config.quarantine_max_copy_bytes,
            disk=logs.disk,
        )
        #: Brokers that may join an ISR and the broker epoch each must fetch with, shared
        #: by every partition (see `set_isr_eligible`).
        self._isr_eligible_epochs: dict[int, int] = {}
        #: Called with an AlterPartition proposal that a follower fetch produced (expand).
        self.on_isr_proposal: Callable[[Partition, AlterPartitionItem], None] | None = None

    # ---- partition lifecycle ---------------------------------------------------

    def settings_for(self, topic: str) -> TopicSettings:
        return resolve_topic_settings(self._config, self._topic_configs(topic))

    def log_end(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader epoch of the last batch, log end offset) of this broker's log of the
        partition, None when it holds none (the unclean recovery survey)."""
        log = self._logs.get(topic, partition)
        if log is None:
            return None
        leo = log.log_end_offset
        epoch = log.epoch_cache.epoch_for_offset(leo - 1) if leo > log.log_start_offset else None
        return (-1 if epoch is None else epoch), leo

    def set_isr_eligible(self, epochs: dict[int, int]) -> None:
        """Brokers that may join an ISR now, with their current broker epochs (from the
        metadata: live, unfenced, not in controlled shutdown)."""
        self._isr_eligible_epochs.clear()
        self._isr_eligible_epochs.update(epochs)

    def get_or_create_partition(self, topic: str, partition: int) -> Partition:
        key = (topic, partition)
        found = self.partitions.get(key)
        if found is not None:
            return found
        settings = self.settings_for(topic)
        log = self._logs.get_or_create(topic, partition, settings.log)
        created = Partition(
            topic=topic,
            partition=partition,
            log=log,
            local_broker_id=self._config.broker_id,
            settings=settings,
            clock=self._clock,
            replica_lag_time_max_ms=self._config.replica_lag_time_max_ms,
            quarantine=self.quarantine,
            isr_eligible_epochs=self._isr_eligible_epochs,
            unsafe_hw_is_leo=self._config.unsafe_test_hw_is_leo,
            unsafe_isr_without_broker_epoch=self._config.unsafe_test_isr_without_broker_epoch,
            unsafe_stale_fetch_answers=self._config.unsafe_test_apply_stale_fetch_answers,
        )
        self.partitions[key] = created
        return created

    def apply_leader_and_isr(self, update: LeaderAndIsrPartition) -> ErrorCode:
        """Apply one partition state from the controller (creating the replica if new)."""
        if self._config.broker_id not in update.replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            partition = self.get_or_create_partition(update.topic, update.partition)
        except (MiniKafkaError, OSError) as exc:
            # The log cannot be opened (corrupt directory, file limit): this replica is
            # offline; the controller moves leadership and ISR away (issue 23).
            logger.error("%s-%s: replica offline: %s", update.topic, update.partition, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return partition.apply_update(update)

    def stop_replica(
        self, topic: str, partition: int, *, leader_epoch: int, delete: bool
    ) -> ErrorCode:
        """StopReplica: stop serving (and delete the log if asked); fenced by leader epoch."""
        found = self.partitions.get((topic, partition))
        if found is not None and 0 <= leader_epoch < found.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        self.remove_partition(topic, partition, delete=delete)
        return ErrorCode.NONE

    def refresh_settings(self, topic: str) -> None:
        """Re-resolve a topic's settings after its configs changed."""
        settings = self.settings_for(topic)
        for (name, _), partition in self.partitions.items():
            if name == topic:
                partition.update_settings(settings)

    def snapshot_producer_states(self) -> None:
        """Persist every partition's producer table (at clean shutdown), so the next
        start rebuilds it from the snapshot instead of rescanning whole logs."""
        for partition in self.partitions.values():
            try:
                partition.snapshot_producer_state()
            except MiniKafkaError as exc:
                logger.warning("%s-%s: %s", partition.topic, partition.partition, exc)

    def remove_partition(self, topic: str, partition: int, *, delete: bool) -> None:
        found = self.partitions.pop((topic, partition), None)
        if found is not None:
            found.stop()
        if delete:
            log = self._logs.get(topic, partition)
            if log is not None:
                self.quarantine.forget(log.directory)
            self._logs.delete(topic, partition)

    def get_partition(self, topic: str, partition: int) -> Partition:
        found = self.partitions.get((topic, partition))
        if found is None:
            raise UnknownTopicOrPartitionError(
                f"this broker hosts no replica of {topic}-{partition}"
            )
        return found

    def leader_partition(self, topic: str, partition: int) -> Partition:
        found = self.get_partition(topic, partition)
        if found.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(
                f"broker {self._config.broker_id} is not the leader of {topic}-{partition}"
                f" (leader is {found.leader_id})"
            )
        return found

    # ---- produce ---------------------------------------------------------------

    async def produce(
        self, *, acks: int, timeout_ms: int, items: Sequence[ProduceItem]
    ) -> list[ProduceResult]:
        """Append each item on its leader; for acks=all wait until the HW covers it."""
        if acks not in (0, 1, -1):
            return [
                ProduceResult(
                    topic=item.topic,
                    partition=item.partition,
                    error_code=ErrorCode.INVALID_REQUIRED_ACKS,
                    error_message=InvalidRequiredAcksError(
                        f"acks must be 0, 1 or -1 (all), got {acks}"
                    ).message,
                )
                for item in items
            ]
        now_ms = self._clock.wall_ms()
        trace = stage_trace.TRACE
        received_ns = trace.now_ns() if trace is not None else 0
        results: list[ProduceResult] = []
        # (result index, partition, offset the HW must reach, leader epoch of the append)
        waits: list[tuple[int, Partition, int, int]] = []
        for item in items:
            try:
                partition = self.get_partition(item.topic, item.partition)
                info = partition.append_as_leader(
                    item.records,
                    acks=acks,
                    current_leader_epoch=item.current_leader_epoch,
                    now_ms=now_ms,
                )
            except DuplicateBatchError as exc:
                # Already written: answer with the original offsets once committed.
                if acks == -1:
                    waits.append(
                        (
                            len(results),
                            partition,
                            exc.original.last_offset + 1,
                            partition.leader_epoch,
                        )
                    )
                results.append(
                    ProduceResult(
                        topic=item.topic,
                        partition=item.partition,
                        error_code=ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                        error_message=exc.message,
                        base_offset=exc.original.first_offset,
                        log_start_offset=partition.log.log_start_offset,
                    )
                )
                continue
            except MiniKafkaError as exc:
                code, message = _error_fields(exc)
                results.append(
                    ProduceResult(
                        topic=item.topic,
                        partition=item.partition,
                        error_code=code,
                        error_message=message,
                        indefinite=isinstance(exc, FailedAfterAppendError),
                    )
                )
                continue
            if trace is not None:
                trace.record(
                    "append",
                    item.topic,
                    item.partition,
                    info.first_offset,
                    info.last_offset + 1,
                    received_ns,
                )
            if acks == -1:
                waits.append(
                    (len(results), partition, info.last_offset + 1, partition.leader_epoch)
                )
            results.append(
                ProduceResult(
                    topic=item.topic,
                    partition=item.partition,
                    base_offset=info.first_offset,
                    log_append_time_ms=info.log_append_time_ms,
                    log_start_offset=partition.log.log_start_offset,
                )
            )
        if waits:
            outcomes = await _wait_for_high_watermarks(waits, timeout_ms)
            for (index, _, _, _), code in zip(waits, outcomes, strict=True):
                if code is not ErrorCode.NONE:
                    # Answered after the append: the batch may still be committed by this
                    # or a later leader, so the outcome is indefinite, whatever the code.
                    results[index] = msgspec.structs.replace(
                        results[index],
                        error_code=code,
                        error_message=_wait_error_message(code, timeout_ms),
                        indefinite=True,
                    )
            if trace is not None:
                for _, partition, end, _ in waits:
                    trace.record("resp", partition.topic, partition.partition, end)
        return results

    # ---- fetch -----------------------------------------------------------------

    async def fetch(
        self,
        *,
        items: Sequence[FetchItem],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        replica_id: int | None,
        replica_epoch: int = -1,
    ) -> list[FetchResult]:
        """Serve a consumer fetch (`replica_id` None, bounded by the HW) or a follower fetch
        from incarnation `replica_epoch` of broker `replica_id` (validated by the caller).

        Long-polls: if fewer than `min_bytes` are available it waits for any of the
        partitions to change, up to `max_wait_ms`. Never polls on a timer.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, max_wait_ms) / 1000
        trace = stage_trace.TRACE if replica_id is not None else None
        if replica_id is not None:
            if trace is not None:
                for item in items:
                    trace.record(
                        "ffetch", item.topic, item.partition, replica_id, item.fetch_offset
                    )
            self._record_follower_fetches(items, replica_id, replica_epoch)
        while True:
            results, total_bytes, watched = self._read_all(
                items, max_bytes=max_bytes, replica_id=replica_id
            )
            remaining = deadline - loop.time()
            errors = any(result.error_code is not ErrorCode.NONE for result in results)
            if total_bytes >= max(1, min_bytes) or errors or remaining <= 0 or not watched:
                if trace is not None and replica_id is not None:
                    for item, result in zip(items, results, strict=True):
                        if result.records:
                            trace.record(
                                "fsend", item.topic, item.partition, replica_id, item.fetch_offset
                            )
                return results
            await _first_change(loop, watched, remaining)

    def _record_follower_fetches(
        self, items: Sequence[FetchItem], replica_id: int, replica_epoch: int
    ) -> None:
        for item in items:
            partition = self.partitions.get((item.topic, item.partition))
            if partition is None or partition.role is not Role.LEADER:
                continue
            if item.current_leader_epoch != partition.leader_epoch:
                continue  # refused below; says nothing about the current epoch
            if _diverges(partition, item):
                continue  # the follower has not truncated yet (Kafka skips it too)
            proposal = partition.record_follower_fetch(
                replica_id, item.fetch_offset, broker_epoch=replica_epoch
            )
            if proposal is not None and self.on_isr_proposal is not None:
                self.on_isr_proposal(partition, proposal)

    def _read_all(
        self, items: Sequence[FetchItem], *, max_bytes: int, replica_id: int | None
    ) -> tuple[list[FetchResult], int, list[Partition]]:
        results: list[FetchResult] = []
        watched: list[Partition] = []
        budget = max_bytes
        total = 0
        for item in items:
            partition: Partition | None = None
            try:
                partition = self.get_partition(item.topic, item.partition)
                if replica_id is not None and replica_id not in partition.replicas:
                    raise NotLeaderOrFollowerError(
                        f"broker {replica_id} is not a replica of {item.topic}-{item.partition}"
                    )
                if replica_id is not None and item.current_leader_epoch < 0:
                    raise MiniKafkaError(
                        "a replica fetch must carry the follower's current leader epoch "
                        f"for {item.topic}-{item.partition}",
                        code=ErrorCode.INVALID_REQUEST,
                    )
                read = partition.read(
                    item.fetch_offset,
                    max_bytes=max(0, min(item.partition_max_bytes, budget)),
                    current_leader_epoch=item.current_leader_epoch,
                    last_fetched_epoch=item.last_fetched_epoch,
                    replica_fetch=replica_id is not None,
                    min_one_batch=total == 0,
                )
            except MiniKafkaError as exc:
                code, message = _error_fields(exc)
                log = partition.log if partition is not None else None
                results.append(
                    FetchResult(
                        topic=item.topic,
                        partition=item.partition,
                        error_code=code,
                        error_message=message,
                        high_watermark=log.high_watermark if log is not None else -1,
                        log_start_offset=log.log_start_offset if log is not None else -1,
                        log_end_offset=log.log_end_offset if log is not None else -1,
                        leader_epoch=partition.leader_epoch if partition is not None else -1,
                    )
                )
                continue
            watched.append(partition)
            size = len(read.records)
            budget -= size
            total += size
            results.append(
                FetchResult(
                    topic=item.topic,
                    partition=item.partition,
                    high_watermark=read.high_watermark,
                    log_start_offset=read.log_start_offset,
                    log_end_offset=read.log_end_offset,
                    records=read.records,
                    diverging_epoch=read.diverging_epoch,
                    leader_epoch=read.leader_epoch,
                )
            )
            if read.diverging_epoch is not None:
                total = max(total, 1)  # answer at once: the fetcher must truncate
        return results, total, watched

    # ---- list offsets ----------------------------------------------------------

    def list_offsets(self, items: Sequence[ListOffsetsItem]) -> list[ListOffsetsResult]:
        results: list[ListOffsetsResult] = []
        for item in items:
            try:
                partition = self.leader_partition(item.topic, item.partition)
                fenced = check_leader_epoch(item.current_leader_epoch, partition.leader_epoch)
                if fenced is not None:
                    raise MiniKafkaError(f"leader epoch is {partition.leader_epoch}", code=fenced)
                log = partition.log
                if (
                    item.timestamp_ms != EARLIEST_TIMESTAMP
                    and not self._config.unsafe_test_latest_offset_before_epoch_start
                ):
                    partition.check_latest_offset_available()
                if item.timestamp_ms == EARLIEST_TIMESTAMP:
                    offset, timestamp = log.log_start_offset, -1
                elif item.timestamp_ms == LATEST_TIMESTAMP:
                    offset, timestamp = log.high_watermark, -1
                elif item.timestamp_ms >= 0:
                    found = log.offset_for_timestamp(item.timestamp_ms)
                    if found is None or found[0] >= log.high_watermark:
                        offset, timestamp = -1, -1
                    else:
                        offset, timestamp = found
                else:
                    results.append(
                        ListOffsetsResult(
                            topic=item.topic,
                            partition=item.partition,
                            error_code=ErrorCode.INVALID_REQUEST,
                            error_message=(
                                f"timestamp {item.timestamp_ms} is not -2 (earliest), "
                                "-1 (latest) or a time >= 0"
                            ),
                        )
                    )
                    continue
            except MiniKafkaError as exc:
                code, message = _error_fields(exc)
                results.append(
                    ListOffsetsResult(
                        topic=item.topic,
                        partition=item.partition,
                        error_code=code,
                        error_message=message,
                    )
                )
                continue
            results.append(
                ListOffsetsResult(
                    topic=item.topic,
                    partition=item.partition,
                    offset=offset,
                    timestamp_ms=timestamp,
                    leader_epoch=partition.leader_epoch,
                    log_start_offset=log.log_start_offset,
                    high_watermark=log.high_watermark,
                    log_end_offset=log.log_end_offset,
                )
            )
        return results


async def _wait_for_high_watermarks(
    waits: list[tuple[int, Partition, int, int]], timeout_ms: int
) -> list[ErrorCode]:
    """The outcome of each parked acks=all produce `(result index, partition, offset the
    HW must reach, leader epoch of the append)`. One wait (the common case) is awaited
    directly: `gather` wraps each in a task, two more wake-ups before the answer."""
    if len(waits) == 1:
        _, partition, end, leader_epoch = waits[0]
        return [
            await partition.wait_for_high_watermark(
                end, timeout_ms, appended_leader_epoch=leader_epoch
            )
        ]
    return list(
        await asyncio.gather(
            *(
                partition.wait_for_high_watermark(
                    end, timeout_ms, appended_leader_epoch=leader_epoch
                )
                for _, partition, end, leader_epoch in waits
            )
        )
    )


async def _first_change(
    loop: asyncio.AbstractEventLoop, partitions: list[Partition], timeout_s: float
) -> None:
    """Return at the first change of any of `partitions` or after `timeout_s`.

    Each partition has one shared `changed()` future (never cancelled: other waiters use
    it); a done-callback on each wakes our own future directly, so a long-poll fetch
    resumes one loop iteration after the append or HW advance, not after a chain of
    shield and wait wake-ups (issue 19). Callbacks and timer are removed on return.
    """
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    changes = [partition.changed() for partition in partitions]
    for change in changes:
        change.add_done_callback(wake)
    timer = loop.call_later(timeout_s, wake)
    try:
        await woken
    finally:
        timer.cancel()
        for change in changes:
            change.remove_done_callback(wake)


def _wait_error_message(code: ErrorCode, timeout_ms: int) -> str:
    maybe = "the batch was appended and may or may not be committed (indefinite)"
    if code is ErrorCode.REQUEST_TIMED_OUT:
        return f"the high watermark did not reach the batch within {timeout_ms} ms: {maybe}"
    if code is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return f"the ISR fell below min.insync.replicas after the append: {maybe}"
    if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return f"leadership moved while waiting for replication: {maybe}"
    return f"{code.name}: {maybe}"


def _diverges(partition: Partition, item: FetchItem) -> bool:
    """Whether a follower fetch still carries a diverging tail (it must truncate first)."""
    if item.last_fetched_epoch < 0:
        return False
    try:
        return partition.diverging_epoch(item.fetch_offset, item.last_fetched_epoch) is not None
    except OffsetOutOfRangeError:
        return True
