"""The controller's metadata log: the shell that runs the Raft core (`controller.raft`).

One task (`run`) owns the `RaftNode`; everything else talks to it through a bounded inbox
(`deliver` for messages from the other controllers, `commit` for records to replicate,
`resign`). Each turn of the loop feeds the core the waiting events and the timer, then
performs the actions it returns, in order (`controller.raft.actions`):

- `Send` goes to the peer's queue (`raft_transport`);
- persistence actions are collected and made durable together on a worker thread (one
  fsync for many), then reported back with `persisted` (group commit);
- `ApplyEntries` / `LoadSnapshot` fold committed entries into the replayed state
  (`metadata_log.MetadataReplay`): every controller, leader or standby, holds the state of
  the committed log and nothing else; the waiters of `commit` complete once their records
  are applied;
- `RoleChanged` / `LeaderReady` go to the listener (the engine: the active controller is
  the ready leader); losing leadership fails every waiting `commit` with
  `NotControllerError` (their records may still commit under the next leader).

A snapshot of the state is taken every `snapshot_every_records` applied entries
(`metadata_log.encode_snapshot`), and the log before it is dropped. A storage error or a
broken invariant ends `run` with the error: the controller must stop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final, Protocol

import msgspec

from controller.history import PartitionHistory
from controller.metadata_log import MetadataReplay, encode_record, encode_snapshot
from controller.metrics import ControllerMetrics
from controller.model import ClusterState
from controller.raft.actions import (
    PERSISTENCE_ACTIONS,
    Action,
    ApplyEntries,
    LeaderReady,
    LoadSnapshot,
    PersistenceAction,
    Refused,
    Role,
    RoleChanged,
    Send,
)
from controller.raft.config import RaftConfig
from controller.raft.core import NotLeaderError, QuorumStatus, RaftNode
from controller.raft.messages import Message
from controller.raft.storage import RaftStorage, perform
from controller.raft_transport import RaftTransport
from controller.records import Record

logger = logging.getLogger(__name__)

#: Messages and proposals waiting for the loop; beyond this, peers' messages are refused.
INBOX_MAX: Final = 4096
#: Events one turn of the loop takes before it persists and answers.
TURN_EVENTS_MAX: Final = 512
#: A peer whose messages keep being refused (another cluster...) is logged once, then at
#: every this many refusals.
REFUSALS_LOGGED_EVERY: Final = 100


class NotControllerError(Exception):
    """This controller is not (or no longer) the active one; `leader_id` is the leader it
    knows (None: unknown)."""

    def __init__(self, message: str, *, leader_id: int | None) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class QuorumListener(Protocol):
    def leader_ready(self, epoch: int) -> None:
        """This node leads `epoch` and every earlier entry is applied."""

    def leadership_lost(self) -> None:
        """This node stopped leading (it may be elected again later)."""


class _Proposal:
    __slots__ = ("future", "payloads")

    def __init__(self, payloads: list[bytes], future: asyncio.Future[int]) -> None:
        self.payloads = payloads
        self.future = future


class _Resign:
    __slots__ = ("done",)

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done


_Event = Message | _Proposal | _Resign


class ReplicaView(msgspec.Struct, frozen=True, kw_only=True):
    node_id: int
    end_offset: int
    last_fetch_wall_ms: int  # -1: not in this epoch
    last_caught_up_wall_ms: int  # -1: not in this epoch


class QuorumView(msgspec.Struct, frozen=True, kw_only=True):
    """What DescribeQuorum reports about this node (times on the wall clock)."""

    cluster_id: str
    node_id: int
    role: Role
    epoch: int
    leader_id: int | None
    high_watermark: int
    log_end_offset: int
    can_vote: bool
    ready: bool
    replicas: tuple[ReplicaView, ...]
    now_wall_ms: int


class MetadataQuorum:
    def __init__(
        self,
        *,
        config: RaftConfig,
        storage: RaftStorage,
        transport: RaftTransport,
        metrics: ControllerMetrics,
        snapshot_every_records: int,
        monotonic_ms: Callable[[], int],
        wall_ms: Callable[[], int],
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._storage = storage
        self._transport = transport
        self._metrics = metrics
        self._snapshot_every = snapshot_every_records
        self._monotonic_ms = monotonic_ms
        self._wall_ms = wall_ms
        self._node = RaftNode(config, storage.load(), rng=rng or random.Random())
        self._history = PartitionHistory(wall_ms=wall_ms)
        self._replay = MetadataReplay(self._history)
        self._snapshot_end = 0
        self._inbox: deque[_Event] = deque()
        self._wake = asyncio.Event()
        self._pending: list[PersistenceAction] = []
        self._waiters: deque[tuple[int, asyncio.Future[int]]] = deque()
        self._ready_epoch: int | None = None
        self._refusals: dict[int, int] = {}
        self._running = False
        self.listener: QuorumListener | None = None

    # ---- queries --------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._config.node_id

    @property
    def state(self) -> ClusterState:
        """The replayed state of the committed metadata log."""
        return self._replay.state

    @property
    def history(self) -> PartitionHistory:
        """What the committed log changed, partition by partition (`minikafka timeline`)."""
        return self._history

    @property
    def ready_epoch(self) -> int | None:
        """The epoch this node leads with its marker committed (None: not the ready leader)."""
        return self._ready_epoch

    @property
    def leader_id(self) -> int | None:
        return self._node.leader_id

    @property
    def epoch(self) -> int:
        return self._node.epoch

    def view(self) -> QuorumView:
        status: QuorumStatus = self._node.status()
        now_mono, now_wall = self._monotonic_ms(), self._wall_ms()

        def wall(mono: int | None) -> int:
            return -1 if mono is None else now_wall - (now_mono - mono)

        replicas = tuple(
            ReplicaView(
                node_id=replica.node_id,
                end_offset=replica.end_offset,
                # The leader itself is always current.
                last_fetch_wall_ms=(
                    now_wall if replica.node_id == self.node_id else wall(replica.last_fetch_ms)
                ),
                last_caught_up_wall_ms=(
                    now_wall if replica.node_id == self.node_id else wall(replica.last_caught_up_ms)
                ),
            )
            for replica in status.replicas
        )
        return QuorumView(
            cluster_id=self._config.cluster_id,
            node_id=status.node_id,
            role=status.role,
            epoch=status.epoch,
            leader_id=status.leader_id,
            high_watermark=status.high_watermark,
            log_end_offset=status.log_end_offset,
            can_vote=status.can_vote,
            ready=self._ready_epoch is not None,
            replicas=replicas,
            now_wall_ms=now_wall,
        )

    # ---- events from other tasks ------------------------------------------------------------

    def deliver(self, message: Message) -> bool:
        """A message from another controller (False: not taken, the sender drops it)."""
        if not self._running or len(self._inbox) >= INBOX_MAX:
            return False
        self._push(message)
        return True

    async def commit(self, records: Sequence[Record]) -> int:
        """Replicate `records` as the ready leader and wait until they are applied to
        `state`; returns the Raft end offset after them. Raises `NotControllerError` when this
        node is not the ready leader or stops leading before they commit (their fate is then
        unknown: the next leader may commit them)."""
        if self._ready_epoch is None:
            raise self._not_controller()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._push(_Proposal([encode_record(record) for record in records], future))
        return await future

    async def resign(self) -> None:
        """Graceful resign (before a shutdown): the voters elect a successor at once."""
        if not self._running:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._push(_Resign(done))
        await done

    def _push(self, event: _Event) -> None:
        self._inbox.append(event)
        self._wake.set()

    def _not_controller(self) -> NotControllerError:
        leader = self._node.leader_id
        return NotControllerError(
            f"controller {self.node_id} is not the active controller"
            + (f" (the leader is controller {leader})" if leader is not None else ""),
            leader_id=leader if leader != self.node_id else None,
        )

    # ---- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Drive the node until cancelled (or until storage fails: the error propagates)."""
        node = self._node
        self._running = True
        try:
            self._handle(node.start(self._monotonic_ms()))
            await self._persist()
            while True:
                await self._wait_for_event()
                now = self._monotonic_ms()
                for _ in range(min(len(self._inbox), TURN_EVENTS_MAX)):
                    self._dispatch(self._inbox.popleft(), now)
                deadline = node.deadline_ms()
                if deadline is not None and now >= deadline:
                    self._handle(node.tick(now))
                self._maybe_snapshot(now)
                await self._persist()
                self._observe()
        finally:
            self._running = False
            self._fail_waiters()
            for event in self._inbox:
                if isinstance(event, _Proposal) and not event.future.done():
                    event.future.set_exception(self._not_controller())
                elif isinstance(event, _Resign) and not event.done.done():
                    event.done.set_result(None)
            self._inbox.clear()

    async def _wait_for_event(self) -> None:
        if self._inbox:
            return
        self._wake.clear()
        deadline = self._node.deadline_ms()
        if deadline is None:
            await self._wake.wait()
            return
        delay_s = max(0.0, (deadline - self._monotonic_ms()) / 1000)
        try:
            async with asyncio.timeout(delay_s):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _dispatch(self, event: _Event, now: int) -> None:
        node = self._node
        if isinstance(event, _Proposal):
            if event.future.done():  # the caller gave up before it was proposed
                return
            try:
                base, actions = node.propose(event.payloads, now)
            except NotLeaderError:
                event.future.set_exception(self._not_controller())
                return
            self._waiters.append((base + len(event.payloads), event.future))
            self._handle(actions)
        elif isinstance(event, _Resign):
            self._handle(node.resign(now))
            event.done.set_result(None)
        else:
            self._handle(node.receive(event, now))

    def _handle(self, actions: list[Action]) -> None:
        """Perform `actions` in order; persistence is queued for `_persist` (in seq order)."""
        for action in actions:
            if isinstance(action, Send):
                self._transport.send(action.message)
            elif isinstance(action, PERSISTENCE_ACTIONS):
                self._pending.append(action)
            elif isinstance(action, ApplyEntries):
                self._apply(action)
            elif isinstance(action, LoadSnapshot):
                self._replay.load(action.snapshot.data, action.snapshot.end_offset)
                self._snapshot_end = action.snapshot.end_offset
                logger.info(
                    "metadata snapshot loaded: up to offset %d (epoch %d)",
                    action.snapshot.end_offset,
                    action.snapshot.epoch,
                )
            elif isinstance(action, RoleChanged):
                self._on_role(action)
            elif isinstance(action, LeaderReady):
                self._ready_epoch = action.epoch
                logger.info(
                    "controller %d leads the quorum in epoch %d (high watermark %d)",
                    self.node_id,
                    action.epoch,
                    action.high_watermark,
                )
                if self.listener is not None:
                    self.listener.leader_ready(action.epoch)
            elif isinstance(action, Refused):
                self._metrics.raft_refused.inc()
                count = self._refusals.get(action.source, 0) + 1
                self._refusals[action.source] = count
                if count == 1 or count % REFUSALS_LOGGED_EVERY == 0:
                    logger.warning(
                        "Raft message from controller %d refused (%d so far): %s",
                        action.source,
                        count,
                        action.reason,
                    )

    def _apply(self, action: ApplyEntries) -> None:
        self._replay.apply(action.base_offset, action.entries)
        applied = self._replay.applied_end
        waiters = self._waiters
        while waiters and waiters[0][0] <= applied:
            _, future = waiters.popleft()
            if not future.done():
                future.set_result(applied)

    def _on_role(self, change: RoleChanged) -> None:
        logger.info(
            "controller %d: Raft role %s in epoch %d (leader %s)",
            self.node_id,
            change.role.value,
            change.epoch,
            change.leader_id if change.leader_id is not None else "unknown",
        )
        if change.role is Role.CANDIDATE:
            self._metrics.raft_elections.inc()
        if change.role is not Role.LEADER:
            was_ready = self._ready_epoch is not None
            self._ready_epoch = None
            self._fail_waiters()
            if was_ready and self.listener is not None:
                self.listener.leadership_lost()

    def _fail_waiters(self) -> None:
        waiters, self._waiters = self._waiters, deque()
        for _, future in waiters:
            if not future.done():
                future.set_exception(self._not_controller())

    def _maybe_snapshot(self, now: int) -> None:
        applied = self._replay.applied_end
        if applied - self._snapshot_end < self._snapshot_every:
            return
        self._handle(self._node.create_snapshot(applied, encode_snapshot(self.state), now))
        self._snapshot_end = applied
        logger.info("metadata snapshot taken at offset %d", applied)

    async def _persist(self) -> None:
        """Make the queued persistence actions durable (one fsync), report them, and repeat
        for whatever that released."""
        while self._pending:
            batch, self._pending = self._pending, []
            write = asyncio.ensure_future(asyncio.to_thread(self._write, batch))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # Stopping: let the thread finish before the storage is closed.
                await asyncio.wait({write})
                raise
            self._handle(self._node.persisted(batch[-1].seq, self._monotonic_ms()))

    def _write(self, batch: list[PersistenceAction]) -> None:
        for action in batch:
            perform(self._storage, action)
        self._storage.sync()

    def _observe(self) -> None:
        metrics = self._metrics
        node = self._node
        metrics.raft_epoch.set(node.epoch)
        metrics.raft_high_watermark.set(node.high_watermark)
        if node.role is Role.LEADER:
            end = node.log.end_offset
            for replica in node.status().replicas:
                metrics.follower_lag.labels(voter=str(replica.node_id)).set(
                    max(0, end - replica.end_offset)
                )
