"""Follower fetchers: one task per source (leader) broker, multiplexing its partitions.

Caller: the broker app (`FetcherManager.sync`) after every LeaderAndIsr / UpdateMetadata.
Affects: the follower partitions' logs (append, truncation, HW, log start offset).
The network is behind `leader_endpoint.LeaderEndpoint` (gRPC in production).

Each fetch carries, per partition, `fetch_offset` (our LEO), `last_fetched_epoch` (the
epoch of our last batch) and `current_leader_epoch`, so the leader checks our log
against its own on *every* fetch and answers with `diverging_epoch` when we must
truncate (KIP-320/KIP-595): truncation happens on every epoch change without a second
RPC. Fetches long-poll on the leader (`max_wait_ms`); errors back off per partition
with a capped delay. A fetcher whose leader is no longer wanted is cancelled.

An answer is applied to a partition only if it still follows the same leader in the
same leader epoch at the same fetch offset as when the request was built
(`follower_fetch.response_applies`): a fetch from a leader that keeps other partitions
may come back after a LeaderAndIsr moved this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from broker.log.errors import LogStorageError
from broker.metadata_cache import BrokerInfo
from broker.replica.follower_fetch import FetchPosition, response_applies
from broker.replica.leader_endpoint import (
    GrpcLeaderEndpoint,
    LeaderEndpoint,
    LeaderUnavailableError,
    ReplicaFetch,
)
from broker.replica.manager import FetchItem, FetchResult
from broker.replica.partition import Partition, Role
from minikafka import stage_trace
from minikafka.errors import ErrorCode

logger = logging.getLogger(__name__)

PartitionKey = tuple[str, int]


class FetcherSettings:
    def __init__(
        self,
        *,
        broker_id: int,
        max_wait_ms: int,
        max_bytes: int,
        partition_max_bytes: int,
        backoff_ms: int,
        broker_epoch: Callable[[], int],
        now_ms: Callable[[], int],
        unsafe_stale_answers: bool = False,
    ) -> None:
        self.broker_id = broker_id
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.backoff_ms = backoff_ms
        self.broker_epoch = broker_epoch
        self.now_ms = now_ms
        #: DELIBERATELY UNSAFE (`BrokerConfig.unsafe_test_apply_stale_fetch_answers`, the
        #: simulator's hole-4 canary only): an answer is applied to the partition it was
        #: asked for while that is still a follower, as before the fix.
        self.unsafe_stale_answers = unsafe_stale_answers


def position_of(partition: Partition) -> FetchPosition | None:
    """Where a follower partition fetches from now; None when it is not a follower."""
    if partition.role is not Role.FOLLOWER:
        return None
    return FetchPosition(
        leader_id=partition.leader_id,
        leader_epoch=partition.leader_epoch,
        fetch_offset=partition.fetch_position()[0],
    )


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(
        self, leader: BrokerInfo, settings: FetcherSettings, endpoint: LeaderEndpoint
    ) -> None:
        self.leader = leader
        self._settings = settings
        self.partitions: dict[PartitionKey, Partition] = {}
        self._delayed_until: dict[PartitionKey, float] = {}
        self._wakeup = asyncio.Event()
        self._endpoint = endpoint
        self.task: asyncio.Task[None] | None = None

    def set_partitions(self, partitions: dict[PartitionKey, Partition]) -> None:
        for key in partitions.keys() - self.partitions.keys():
            self._delayed_until.pop(key, None)
        self.partitions = dict(partitions)
        self._wakeup.set()

    async def close(self) -> None:
        await self._endpoint.close()

    async def run(self) -> None:
        """Fetch until cancelled; idles (no RPC) while there is nothing to fetch."""
        loop = asyncio.get_running_loop()
        backoff_s = self._settings.backoff_ms / 1000
        while True:
            now = loop.time()
            ready = {
                key: partition
                for key, partition in self.partitions.items()
                if self._delayed_until.get(key, 0.0) <= now and partition.role is Role.FOLLOWER
            }
            if not ready:
                self._wakeup.clear()
                delays = [t - now for t in self._delayed_until.values() if t > now]
                timeout = min(delays) if delays else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
                continue
            request, sent = self._build_request(ready)
            try:
                results = await self._endpoint.fetch(request)
            except LeaderUnavailableError as exc:
                logger.info(
                    "fetch from broker %s failed: %s; backing off %.0f ms",
                    self.leader.broker_id,
                    exc,
                    backoff_s * 1000,
                )
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), backoff_s)
                continue
            stale_ok = self._settings.unsafe_stale_answers
            for result in results:
                key = (result.topic, result.partition)
                partition = (ready if stale_ok else self.partitions).get(key)
                position = sent.get(key)
                if partition is None or position is None:
                    continue
                if not response_applies(
                    position, position_of(partition), same_position=not stale_ok
                ):
                    # A LeaderAndIsr (or a truncation) came while the fetch was in flight:
                    # this answer describes another position of the log. Fetch again.
                    logger.debug(
                        "%s: dropping a fetch answer for %s (now %s)",
                        partition,
                        position,
                        position_of(partition),
                    )
                    continue
                trace = stage_trace.TRACE
                if trace is None or not result.records:
                    self._handle(partition, result, loop.time() + backoff_s)
                    continue
                received_ns = trace.now_ns()
                first = partition.log.log_end_offset
                self._handle(partition, result, loop.time() + backoff_s)
                trace.record("frecv", *key, self._settings.broker_id, first, at_ns=received_ns)
                trace.record(
                    "fapp", *key, self._settings.broker_id, first, partition.log.log_end_offset
                )

    def _build_request(
        self, ready: dict[PartitionKey, Partition]
    ) -> tuple[ReplicaFetch, dict[PartitionKey, FetchPosition]]:
        # Kafka's rule: each partition has its own limit (the leader still returns at least
        # one whole batch) and the response as a whole is capped by max_bytes; idle
        # partitions must not shrink a busy one's share.
        per_partition = self._settings.partition_max_bytes
        items: list[FetchItem] = []
        sent: dict[PartitionKey, FetchPosition] = {}
        for key, partition in ready.items():
            fetch_offset, last_epoch = partition.fetch_position()
            sent[key] = FetchPosition(
                leader_id=partition.leader_id,
                leader_epoch=partition.leader_epoch,
                fetch_offset=fetch_offset,
            )
            items.append(
                FetchItem(
                    topic=key[0],
                    partition=key[1],
                    fetch_offset=fetch_offset,
                    current_leader_epoch=partition.leader_epoch,
                    last_fetched_epoch=last_epoch,
                    partition_max_bytes=per_partition,
                )
            )
        request = ReplicaFetch(
            replica_id=self._settings.broker_id,
            broker_epoch=self._settings.broker_epoch(),
            max_wait_ms=self._settings.max_wait_ms,
            min_bytes=1,
            max_bytes=self._settings.max_bytes,
            items=tuple(items),
        )
        return request, sent

    def _handle(self, partition: Partition, part: FetchResult, retry_at: float) -> None:
        key = (part.topic, part.partition)
        code = part.error_code
        now_ms = self._settings.now_ms()
        if code is ErrorCode.NONE:
            if part.diverging_epoch is not None:
                try:
                    partition.truncate_on_divergence(*part.diverging_epoch)
                except LogStorageError:
                    # No durable loss receipt (or a failed truncation): retry later.
                    logger.exception("%s: cannot truncate; backing off", partition)
                    self._delayed_until[key] = retry_at
                return
            try:
                partition.append_as_follower(
                    part.records,
                    leader_high_watermark=part.high_watermark,
                    leader_log_start_offset=part.log_start_offset,
                    now_ms=now_ms,
                )
            except Exception:
                logger.exception("%s: cannot append fetched records; backing off", partition)
                self._delayed_until[key] = retry_at
            return
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            try:
                partition.reset_out_of_range(
                    leader_log_start_offset=part.log_start_offset,
                    leader_log_end_offset=part.log_end_offset,
                )
            except LogStorageError:
                logger.exception("%s: cannot reset the log; backing off", partition)
                self._delayed_until[key] = retry_at
            return
        # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, STALE_BROKER_EPOCH, ...:
        # wait for the controller's next LeaderAndIsr (or the leader to learn the epoch).
        logger.debug(
            "%s: leader %s answered %s (%s)",
            partition,
            self.leader.broker_id,
            code.name,
            part.error_message,
        )
        self._delayed_until[key] = retry_at


class FetcherManager:
    """Keeps one ReplicaFetcher per leader broker for the partitions this broker follows."""

    def __init__(
        self,
        *,
        settings: FetcherSettings,
        endpoint_of: Callable[[int], BrokerInfo | None],
        tasks: asyncio.TaskGroup,
        connect: Callable[[BrokerInfo], LeaderEndpoint] = GrpcLeaderEndpoint,
    ) -> None:
        self._settings = settings
        self._endpoint_of = endpoint_of
        self._tasks = tasks
        self._connect = connect
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def sync(self, partitions: list[Partition]) -> None:
        """Make the fetchers match the set of follower partitions (with a live leader)."""
        wanted: dict[int, dict[tuple[str, int], Partition]] = {}
        for partition in partitions:
            if partition.role is Role.FOLLOWER and partition.leader_id >= 0:
                wanted.setdefault(partition.leader_id, {})[
                    (partition.topic, partition.partition)
                ] = partition
        for leader_id in list(self.fetchers):
            fetcher = self.fetchers[leader_id]
            endpoint = self._endpoint_of(leader_id)
            if leader_id not in wanted or endpoint is None or endpoint != fetcher.leader:
                self._stop(leader_id)
        for leader_id, assigned in wanted.items():
            existing = self.fetchers.get(leader_id)
            if existing is not None:
                existing.set_partitions(assigned)
                continue
            endpoint = self._endpoint_of(leader_id)
            if endpoint is None:
                logger.warning("no endpoint known for leader %s; not fetching yet", leader_id)
                continue
            fetcher = ReplicaFetcher(endpoint, self._settings, self._connect(endpoint))
            fetcher.task = self._tasks.create_task(fetcher.run(), name=f"fetcher-from-{leader_id}")
            self.fetchers[leader_id] = fetcher
            fetcher.set_partitions(assigned)

    def _stop(self, leader_id: int) -> None:
        fetcher = self.fetchers.pop(leader_id)
        if fetcher.task is not None:
            fetcher.task.cancel()
        self._tasks.create_task(fetcher.close())

    def stop_all(self) -> None:
        for leader_id in list(self.fetchers):
            self._stop(leader_id)
