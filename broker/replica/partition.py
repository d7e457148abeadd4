"""Partition: binds one PartitionLog to its replication state on this broker.

Caller: ReplicaManager (and through it the gRPC servicers and the follower fetcher).
Affects: the partition's log, high watermark, ISR view and waiters.

Roles and their transitions (driven by LeaderAndIsr from the controller, or by the
standalone topic store):

    NONE -> LEADER | FOLLOWER            first LeaderAndIsr naming this broker
    LEADER <-> FOLLOWER                  a newer leader epoch names another leader
    any -> NONE                          StopReplica / topic deleted

Waiting is event-driven: every change of the log end offset or high watermark resolves
the current `changed()` future, so long-poll fetches and acks=all produces wake up
without polling.
"""

from __future__ import annotations

import asyncio
import enum
import logging

import msgspec

from broker.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from broker.log.partition_log import AppendInfo, PartitionLog, ReadResult
from broker.topic_settings import TopicSettings
from minikafka.errors import ErrorCode

logger = logging.getLogger(__name__)
state_change_logger = logging.getLogger("minikafka.state_change")

NO_LEADER = -1


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


class FollowerProgress(msgspec.Struct, frozen=True, kw_only=True):
    """What the leader knows about one follower (Kafka's ReplicaState)."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    last_fetch_leader_leo: int = -1


class PartitionRead(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to one partition of a fetch."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    diverging_epoch: tuple[int, int] | None = None


def check_leader_epoch(requested: int, current: int) -> None:
    """Fence requests made against another leader epoch (-1 skips the check)."""
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpochError(
            f"request leader epoch {requested} is older than the current epoch {current}"
        )
    raise UnknownLeaderEpochError(
        f"request leader epoch {requested} is newer than this broker's epoch {current}"
    )


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
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.local_broker_id = local_broker_id
        self.settings = settings
        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        self.followers: dict[int, FollowerProgress] = {}
        self._changed: asyncio.Future[None] | None = None
        self._log_prefix = f"[Partition {topic}-{partition} broker={local_broker_id}] "

    # ---- waiting ---------------------------------------------------------------

    def changed(self) -> asyncio.Future[None]:
        """A future resolved at the next change of LEO, HW or role."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def _signal(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    # ---- role changes ----------------------------------------------------------

    def make_leader(
        self,
        *,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: frozenset[int],
        now_ms: int,
    ) -> None:
        """Become (or stay) leader at `leader_epoch`.

        Follower progress is reset: a new leader does not know its followers' LEOs until
        they fetch, so the HW cannot move on stale information (Kafka does the same).
        """
        new_epoch = leader_epoch != self.leader_epoch or self.role is not Role.LEADER
        self.role = Role.LEADER
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        if new_epoch:
            self.log.epoch_cache.assign(leader_epoch, self.log.log_end_offset)
            self.followers = {
                broker: FollowerProgress(broker_id=broker, last_caught_up_time_ms=now_ms)
                for broker in replicas
                if broker != self.local_broker_id
            }
            state_change_logger.info(
                "%sbecame leader at epoch %s (partition epoch %s, isr %s, leo %s, hw %s)",
                self._log_prefix,
                leader_epoch,
                partition_epoch,
                sorted(isr),
                self.log.log_end_offset,
                self.log.high_watermark,
            )
        self._maybe_advance_high_watermark()
        self._signal()

    def make_follower(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: frozenset[int],
    ) -> None:
        """Follow `leader_id` at `leader_epoch`; the fetcher truncates by epoch first."""
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self.followers = {}
        state_change_logger.info(
            "%sbecame follower of %s at epoch %s (leo %s, hw %s)",
            self._log_prefix,
            leader_id,
            leader_epoch,
            self.log.log_end_offset,
            self.log.high_watermark,
        )
        self._signal()

    def make_offline(self) -> None:
        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.followers = {}
        self._signal()

    # ---- leader path -----------------------------------------------------------

    def append_as_leader(
        self, records: bytes, *, acks: int, current_leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        """Validate and append a produce record set; raises a BrokerError on refusal.

        For acks=all the ISR is checked *before* appending (NOT_ENOUGH_REPLICAS with nothing
        appended), as Kafka does.
        """
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition}"
                f" (leader is {self.leader_id})"
            )
        check_leader_epoch(current_leader_epoch, self.leader_epoch)
        if acks == -1 and len(self.isr) < self.settings.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"ISR {sorted(self.isr)} has {len(self.isr)} members, below "
                f"min.insync.replicas={self.settings.min_insync_replicas}"
            )
        info = self.log.append_as_leader(
            records,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
            log_append_time=self.settings.log_append_time,
        )
        if self.settings.fsync:
            self.log.flush()
        self._maybe_advance_high_watermark()
        self._signal()
        return info

    def produce_outcome(self, required_offset: int) -> ErrorCode | None:
        """For a parked acks=all produce that needs the HW to reach `required_offset`:
        NONE when done, an error when it can never complete, None to keep waiting."""
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            return ErrorCode.NONE
        if len(self.isr) < self.settings.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return None

    async def wait_for_high_watermark(self, required_offset: int, timeout_ms: int) -> ErrorCode:
        """Park an acks=all produce until the HW covers `required_offset` (purgatory)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            outcome = self.produce_outcome(required_offset)
            if outcome is not None:
                return outcome
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            try:
                await asyncio.wait_for(asyncio.shield(self.changed()), remaining)
            except TimeoutError:
                return ErrorCode.REQUEST_TIMED_OUT

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched from `fetch_offset`: that is its LEO (Kafka updateFetchState).

        `now_ms` is monotonic. A fetch at or beyond our LEO means caught up now; a fetch at
        or beyond the LEO we had at its previous fetch means it was caught up then.
        """
        progress = self.followers.get(replica_id) or FollowerProgress(broker_id=replica_id)
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            caught_up_ms = now_ms
        elif fetch_offset >= progress.last_fetch_leader_leo >= 0:
            caught_up_ms = progress.last_fetch_time_ms
        else:
            caught_up_ms = progress.last_caught_up_time_ms
        self.followers[replica_id] = FollowerProgress(
            broker_id=replica_id,
            log_end_offset=fetch_offset,
            last_caught_up_time_ms=max(caught_up_ms, progress.last_caught_up_time_ms),
            last_fetch_time_ms=now_ms,
            last_fetch_leader_leo=leader_leo,
        )
        before = self.log.high_watermark
        self._maybe_advance_high_watermark()
        if self.log.high_watermark != before:
            self._signal()

    def _maybe_advance_high_watermark(self) -> None:
        """HW = min LEO over the ISR, never decreasing, frozen below min.insync.replicas."""
        if self.role is not Role.LEADER:
            return
        if len(self.isr) < self.settings.min_insync_replicas:
            return
        leos = [self.log.log_end_offset]
        for broker in self.isr:
            if broker == self.local_broker_id:
                continue
            progress = self.followers.get(broker)
            leos.append(progress.log_end_offset if progress is not None else -1)
        candidate = min(leos)
        if candidate > self.log.high_watermark:
            self.log.update_high_watermark(candidate)

    # ---- reads -----------------------------------------------------------------

    def read(
        self,
        offset: int,
        *,
        max_bytes: int,
        current_leader_epoch: int,
        up_to_high_watermark: bool,
        min_one_batch: bool = True,
    ) -> PartitionRead:
        """Read for a consumer (bounded by the HW) or a follower (bounded by the LEO)."""
        if self.role is Role.NONE:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} hosts no replica role for "
                f"{self.topic}-{self.partition}"
            )
        check_leader_epoch(current_leader_epoch, self.leader_epoch)
        hw = self.log.high_watermark
        if up_to_high_watermark and hw <= offset <= self.log.log_end_offset:
            # Nothing committed at or after `offset` yet (Kafka answers empty, not an error).
            return PartitionRead(
                records=b"",
                high_watermark=hw,
                log_start_offset=self.log.log_start_offset,
                log_end_offset=self.log.log_end_offset,
                leader_epoch=self.leader_epoch,
            )
        result: ReadResult = self.log.read(
            offset,
            max_bytes=max_bytes,
            max_offset=hw if up_to_high_watermark else None,
            min_one_batch=min_one_batch,
        )
        return PartitionRead(
            records=result.records,
            high_watermark=hw,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
            leader_epoch=self.leader_epoch,
        )
