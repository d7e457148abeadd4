"""A consumer's group membership (KIP-848): the heartbeat task and the reconciliation of
assignments. Decisions are the PURE rules of `client.group_rules`; commits and
committed-offset lookups are `client.group_offsets`.

The member id is a random UUID chosen once per consumer (as Kafka 4's consumer does). The
heartbeat task finds the coordinator (FindCoordinator on any broker) and sends
ConsumerGroupHeartbeat every `heartbeat_interval_ms` (the coordinator's value once it
answered); the application's next poll applies the latest assignment answer (so a
partition changes hands only between polls, as in Kafka):

1. partitions taken away: committed first when auto-commit is on (only records already
   returned by poll: a partition's position), then `on_partitions_revoked`, then dropped;
   the next heartbeat (sent at once) reports them gone, which lets the coordinator give
   them to their new owner;
2. partitions given: their committed offsets are looked up *before* they are added, so
   nothing is fetched from the reset position first; then `on_partitions_assigned`.

Fenced or forgotten (session expired): `on_partitions_lost`, every partition dropped
without a commit, and a new join with epoch 0. A consumer that has not polled for
`max_poll_interval_ms` leaves the group (its partitions go to the others) and joins again
at its next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

import grpc

from client.errors import from_response
from client.group_offsets import CoordinatorLink, GroupOffsets, MemberIdentity
from client.group_rules import GroupAction, assignment_change, commit_action, heartbeat_action
from client.records import OffsetAndMetadata, TopicPartition
from client.subscription import SubscriptionState
from client.transport import BrokerConnections
from minikafka.errors import MiniKafkaError, code_from_wire
from minikafka.v1 import broker_pb2

logger = logging.getLogger(__name__)


class ConsumerRebalanceListener:
    """kafka-python / aiokafka's listener: override what you need (methods may be
    coroutines on the `AsyncConsumer`). `on_partitions_lost` defaults to
    `on_partitions_revoked`, as in Kafka."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)


class GroupSettings:
    def __init__(
        self,
        *,
        group_id: str,
        group_instance_id: str | None,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
        enable_auto_commit: bool,
        auto_commit_interval_ms: int,
        client_id: str,
    ) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.client_id = client_id


class GroupMember:
    """Lives on the consumer's event loop; one heartbeat task at a time."""

    def __init__(
        self,
        settings: GroupSettings,
        *,
        conn: BrokerConnections,
        subscription: SubscriptionState,
        wake_fetcher: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.identity = MemberIdentity()
        self.owned: set[TopicPartition] = set()
        self.listener = ConsumerRebalanceListener()
        self._conn = conn
        self._clock_s = conn.clock_s
        self._subscription = subscription
        self._wake_fetcher = wake_fetcher
        self._coordinator = CoordinatorLink(settings.group_id, conn)
        #: Commits and committed-offset lookups (`client.group_offsets`).
        self.offsets = GroupOffsets(
            settings.group_id,
            identity=self.identity,
            coordinator=self._coordinator,
            subscription=subscription,
            heartbeat_now=self._heartbeat_now,
        )
        self._interval_s = settings.heartbeat_interval_ms / 1000
        self._sent_topics: frozenset[str] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._failure: BaseException | None = None
        self.last_poll = self._clock_s()
        self._left_for_poll_timeout = False
        #: The assignment of the last answer, applied at the next poll.
        self._target: set[TopicPartition] | None = None
        #: Grows when the member loses everything (fenced, left): an assignment being
        #: applied across an await is dropped if it changed meanwhile.
        self._generation = 0
        self._next_auto_commit = self._clock_s() + settings.auto_commit_interval_ms / 1000

    @property
    def member_id(self) -> str:
        return self.identity.member_id

    @property
    def epoch(self) -> int:
        """The member epoch the coordinator gave (0: not joined)."""
        return self.identity.epoch

    # ---- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="group-heartbeat")

    def wake(self) -> None:
        """Heartbeat now (the subscription changed, or a poll came after a poll timeout)."""
        self._wake.set()

    def _heartbeat_now(self) -> bool:
        """Heartbeat at once; False when no heartbeat will come (closing, or the task
        stopped on a failure)."""
        if self._closed or self._task is None or self._task.done():
            return False
        self.wake()
        return True

    async def close(self) -> None:
        """Commit (auto-commit), leave the group, stop the heartbeat task."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.identity.joined:
            if self.settings.enable_auto_commit and self.owned:
                await self.offsets.commit_quietly(self.owned)
            await self._leave()

    def check_failure(self) -> None:
        """Raise what stopped the heartbeat task (a configuration error), at a poll."""
        if self._failure is not None:
            raise self._failure

    async def on_poll(self) -> None:
        """Called by every poll: rejoin after a poll timeout, auto-commit when due."""
        self.check_failure()
        self.last_poll = self._clock_s()
        if self._left_for_poll_timeout:
            self._left_for_poll_timeout = False
            self.wake()
        if self.identity.joined and self._target is not None and self._target != self.owned:
            await self._apply_target(self._target)
        if (
            self.settings.enable_auto_commit
            and self.identity.joined
            and self.owned
            and self._clock_s() >= self._next_auto_commit
        ):
            self._next_auto_commit = self._clock_s() + self.settings.auto_commit_interval_ms / 1000
            await self.offsets.commit_quietly(self.owned)

    # ---- the heartbeat task -----------------------------------------------------------

    async def _run(self) -> None:
        backoff_s = self._conn.retry_backoff_ms / 1000
        while not self._closed:
            self._wake.clear()  # a wake() during this round makes the next one start at once
            wait_s = self._interval_s
            try:
                if self._subscription.topics and not self._left_for_poll_timeout:
                    if self._poll_timed_out():
                        await self._leave_for_poll_timeout()
                    else:
                        wait_s = await self._beat()
                elif self.identity.joined:
                    await self._leave()
            except (grpc.aio.AioRpcError, OSError) as exc:
                logger.debug("group %s: heartbeat failed: %s", self.settings.group_id, exc)
                self._coordinator.forget()
                wait_s = backoff_s
            except MiniKafkaError as exc:
                # A refusal of a heartbeat or of FindCoordinator.
                action = commit_action(exc.code)
                if action is GroupAction.FENCED:
                    await self._lose_everything(str(exc))
                    wait_s = 0.0
                elif action in (GroupAction.FIND_COORDINATOR, GroupAction.RETRY):
                    self._coordinator.forget()
                    wait_s = backoff_s
                else:  # a configuration error: raised at the next poll
                    self._failure = exc
                    return
            except Exception as exc:  # a bug: raised at the next poll, not lost in a task
                logger.exception("group %s: the heartbeat task failed", self.settings.group_id)
                self._failure = exc
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait_s)

    def _poll_timed_out(self) -> bool:
        idle_ms = (self._clock_s() - self.last_poll) * 1000
        return self.identity.joined and idle_ms > self.settings.max_poll_interval_ms

    async def _beat(self) -> float:
        """One heartbeat; returns how long to wait before the next."""
        stub = await self._coordinator.stub()
        if stub is None:
            return self._conn.retry_backoff_ms / 1000
        topics = self._subscription.topics
        request = broker_pb2.ConsumerGroupHeartbeatRequest(
            group_id=self.settings.group_id,
            member_id=self.identity.member_id,
            member_epoch=self.identity.epoch if self.identity.joined else 0,
            instance_id=self.settings.group_instance_id or "",
            rebalance_timeout_ms=self.settings.max_poll_interval_ms,
            session_timeout_ms=self.settings.session_timeout_ms,
            client_id=self.settings.client_id,
        )
        if not self.identity.joined or topics != self._sent_topics:
            request.subscribed_topics.topics.extend(sorted(topics))
        request.owned.SetInParent()
        for tp in sorted(self.owned):
            request.owned.partitions.add(topic=tp.topic, partition=tp.partition)
        reply = await stub.ConsumerGroupHeartbeat(request, timeout=self._conn.timeout_s)
        code = code_from_wire(reply.error_code)
        action = heartbeat_action(code)
        if action is GroupAction.OK:
            self._sent_topics = topics
            self.identity.update(reply.member_epoch, True)
            if reply.heartbeat_interval_ms > 0:
                self._interval_s = reply.heartbeat_interval_ms / 1000
            if reply.HasField("assignment"):
                # Applied by the application's next poll (as Kafka's consumer does), so a
                # partition is given up only between polls: never while records it
                # returned may still be being processed, and never committed past them.
                self._target = {
                    TopicPartition(p.topic, p.partition) for p in reply.assignment.partitions
                }
            return self._interval_s
        if action is GroupAction.REJOIN:
            await self._lose_everything(f"{code.name}: {reply.error_message}")
            return 0.0
        if action is GroupAction.FIND_COORDINATOR:
            self._coordinator.forget()
            return self._conn.retry_backoff_ms / 1000
        if action is GroupAction.RETRY:
            return self._conn.retry_backoff_ms / 1000
        raise from_response(
            reply.error_code, reply.error_message, context=f"group {self.settings.group_id}"
        )

    async def _apply_target(self, target: set[TopicPartition]) -> None:
        try:
            revoked = await self._apply(target)
        except MiniKafkaError as exc:
            action = commit_action(exc.code)
            if action is GroupAction.FENCED:
                await self._lose_everything(str(exc))
                self.wake()
            elif action not in (
                GroupAction.FIND_COORDINATOR,
                GroupAction.RETRY,
                GroupAction.AWAIT_EPOCH,
            ):
                raise
            return  # the next poll tries again
        if revoked:
            self.wake()  # acknowledge the revocation at once

    async def _apply(self, assigned: set[TopicPartition]) -> bool:
        """Apply an assignment answer; True when something was revoked."""
        revoke, add = assignment_change(self.owned, assigned)
        generation = self._generation
        if revoke:
            if self.settings.enable_auto_commit:
                await self.offsets.commit_quietly(revoke)
            await _call(self.listener.on_partitions_revoked, set(revoke))
            if generation != self._generation:
                return False  # fenced meanwhile: everything was dropped already
            self.identity.released()
            self.owned -= revoke
            self._subscription.set_assignment(set(self.owned))
        if add:
            committed = await self.offsets.fetch_committed(add)
            if generation != self._generation:
                return False  # fenced or left meanwhile: this answer is void
            self.owned |= add
            self._subscription.set_assignment(set(self.owned))
            for tp, found in committed.items():
                if found is not None:
                    self._subscription.state(tp).seek(found.offset, found.leader_epoch)
            self._wake_fetcher()
            await _call(self.listener.on_partitions_assigned, set(add))
        return bool(revoke)

    async def _lose_everything(self, why: str) -> None:
        logger.info(
            "group %s: member %s lost its partitions (%s)",
            self.settings.group_id,
            self.identity.member_id,
            why,
        )
        lost = self._drop_everything()
        self.identity.update(0, False)
        if lost:
            await _call(self.listener.on_partitions_lost, lost)

    async def _leave(self) -> None:
        stub = self._coordinator.stub_now()
        self.identity.update(joined=False)
        if stub is not None:
            request = broker_pb2.ConsumerGroupHeartbeatRequest(
                group_id=self.settings.group_id,
                member_id=self.identity.member_id,
                member_epoch=-2 if self.settings.group_instance_id else -1,
                instance_id=self.settings.group_instance_id or "",
            )
            try:
                await stub.ConsumerGroupHeartbeat(request, timeout=self._conn.timeout_s)
            except grpc.aio.AioRpcError as exc:
                logger.debug("group %s: leave failed: %s", self.settings.group_id, exc)
        lost = self._drop_everything()
        self.identity.update(epoch=0)
        if lost:
            await _call(self.listener.on_partitions_revoked, lost)

    def _drop_everything(self) -> set[TopicPartition]:
        """Forget every partition and any assignment being applied; returns them."""
        lost = set(self.owned)
        self.owned.clear()
        self._target = None
        self._generation += 1
        self._subscription.set_assignment(set())
        return lost

    async def _leave_for_poll_timeout(self) -> None:
        logger.warning(
            "group %s: no poll for more than max_poll_interval_ms=%d: leaving the group",
            self.settings.group_id,
            self.settings.max_poll_interval_ms,
        )
        self._left_for_poll_timeout = True
        await self._leave()

    # ---- offsets (delegated to `client.group_offsets`) -------------------------------

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        """Commit `offsets` (default: the position of every owned partition); raises
        `CommitFailedError` when the member was fenced (its partitions may have moved)."""
        await self.offsets.commit(
            self.offsets.positions(self.owned) if offsets is None else offsets
        )


async def _call(
    callback: Callable[[set[TopicPartition]], Any], partitions: set[TopicPartition]
) -> None:
    """Run a listener callback (plain or coroutine); its exceptions are logged."""
    try:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("the rebalance listener raised")
