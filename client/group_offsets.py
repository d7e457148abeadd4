"""A group member's offset handling: finding the coordinator, committing offsets (fenced
by member epoch) and looking committed offsets up. Decisions are the PURE rules of
`client.group_rules`; the heartbeat and reconciliation live in `client.group`.

`MemberIdentity` is the member id, epoch and joined flag the heartbeat maintains and every
commit and lookup presents; `GroupOffsets` reads it at each call, so a commit in flight
across a heartbeat answer sees the new epoch when it retries (STALE_MEMBER_EPOCH), and a
stale answer to a member whose heartbeat has not brought the new epoch yet waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from client.errors import CommitFailedError, from_response
from client.group_rules import GroupAction, commit_action
from client.records import OffsetAndMetadata, TopicPartition
from client.subscription import SubscriptionState
from client.transport import BrokerConnections
from minikafka.errors import ErrorCode, code_from_wire
from minikafka.v1 import broker_pb2, broker_pb2_grpc, common_pb2

logger = logging.getLogger(__name__)

#: Times a commit or lookup is sent again with a newer member epoch (STALE_MEMBER_EPOCH).
STALE_EPOCH_RETRIES = 3


class MemberIdentity:
    """Who the member is to the coordinator: a random member id chosen once per consumer
    (as Kafka 4's consumer does), its current epoch, and whether it has joined.

    `releases` grows whenever the member gives partitions up (revoked, lost, left): a
    commit refused for a stale epoch is sent again only if it did not grow meanwhile, so
    it never lands after its partitions may have gone to another member."""

    def __init__(self) -> None:
        self.member_id = uuid.uuid4().hex
        self.epoch = 0
        self.joined = False
        self.releases = 0
        self._changed = asyncio.Event()

    def update(self, epoch: int | None = None, joined: bool | None = None) -> None:
        """Set what a heartbeat answer (or leaving, or being fenced) says; wakes every
        `wait_for_change`. Leaving the group counts as a release."""
        if epoch is not None:
            self.epoch = epoch
        if joined is not None:
            if self.joined and not joined:
                self.releases += 1
            self.joined = joined
        self._changed.set()
        self._changed = asyncio.Event()

    def released(self) -> None:
        """The member gave partitions up (a revocation applied)."""
        self.releases += 1

    async def wait_for_change(self, timeout_s: float) -> None:
        """Until the next `update`, at most `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout=max(0.0, timeout_s))

    def presented(self) -> tuple[str, int]:
        """(member id, member epoch) as a commit or lookup presents them: a member that
        has not joined commits as a simple consumer ("", -1)."""
        return (self.member_id, self.epoch) if self.joined else ("", -1)


class CoordinatorLink:
    """The connection to the group's coordinator: found with FindCoordinator on any broker,
    forgotten when a call fails or an answer says it moved."""

    def __init__(self, group_id: str, conn: BrokerConnections) -> None:
        self.group_id = group_id
        self.conn = conn
        self.address: str | None = None

    def forget(self) -> None:
        self.address = None

    def stub_now(self) -> broker_pb2_grpc.BrokerServiceAsyncStub | None:
        """The known coordinator's stub, without looking it up (None: not known)."""
        return None if self.address is None else self.conn.stub(self.address)

    async def stub(self) -> broker_pb2_grpc.BrokerServiceAsyncStub | None:
        """The coordinator's stub, looked up when not known (None: none answered yet)."""
        if self.address is None:
            for address in self.conn.any_stub_addresses():
                try:
                    reply = await self.conn.stub(address).FindCoordinator(
                        broker_pb2.FindCoordinatorRequest(group_ids=[self.group_id]),
                        timeout=self.conn.timeout_s,
                    )
                except grpc.aio.AioRpcError:
                    continue
                [found] = reply.coordinators
                action = commit_action(code_from_wire(found.error_code))
                if action is GroupAction.OK:
                    self.address = f"{found.host}:{found.port}"
                    break
                if action is GroupAction.FAIL:
                    raise from_response(
                        found.error_code, found.error_message, context="FindCoordinator"
                    )
                return None
        return self.stub_now()

    async def call(
        self,
        call: Callable[[broker_pb2_grpc.BrokerServiceAsyncStub], Any],
        deadline_s: float | None = None,
    ) -> Any:
        """`call` on the coordinator, found again or retried while the answer says so,
        until `deadline_s` (monotonic; None: `request_timeout_ms` from now); returns the
        last answer."""
        deadline = self.conn.clock_s() + self.conn.timeout_s if deadline_s is None else deadline_s
        backoff_s = self.conn.retry_backoff_ms / 1000
        while True:
            stub = await self.stub()
            reply: Any = None
            if stub is not None:
                try:
                    reply = await call(stub)
                except grpc.aio.AioRpcError:
                    self.forget()
            if reply is not None:
                action = commit_action(code_from_wire(reply.error_code))
                if action is GroupAction.FIND_COORDINATOR:
                    self.forget()
                elif action is not GroupAction.RETRY:
                    return reply
            if self.conn.clock_s() + backoff_s > deadline:
                if reply is not None:
                    return reply
                raise from_response(
                    int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    f"no coordinator for group {self.group_id} answered",
                )
            await asyncio.sleep(backoff_s)


class GroupOffsets:
    """Commits and committed-offset lookups of one member, on the consumer's event loop."""

    def __init__(
        self,
        group_id: str,
        *,
        identity: MemberIdentity,
        coordinator: CoordinatorLink,
        subscription: SubscriptionState,
        heartbeat_now: Callable[[], bool],
    ) -> None:
        """`heartbeat_now`: asks the heartbeat task for a heartbeat at once (to learn
        the member's current epoch after a STALE_MEMBER_EPOCH answer); False when no
        heartbeat will come (the consumer is closing, or its heartbeat task stopped)."""
        self.group_id = group_id
        self._identity = identity
        self._heartbeat_now = heartbeat_now
        self._coordinator = coordinator
        self._subscription = subscription

    def positions(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The position (after the records poll returned) of each of `partitions` that
        has one, with the leader epoch of the last record consumed."""
        result: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in partitions:
            state = self._subscription.assignment.get(tp)
            if state is not None and state.position() >= 0:
                result[tp] = OffsetAndMetadata(state.position(), "", state.consumed_epoch)
        return result

    async def commit_quietly(self, partitions: Iterable[TopicPartition]) -> None:
        """Auto-commit the positions of `partitions`: a failure is logged, the next one
        tries again."""
        try:
            await self.commit(self.positions(partitions))
        except Exception as exc:
            logger.warning("group %s: auto-commit failed: %s", self.group_id, exc)

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit `offsets`; raises `CommitFailedError` when the member was fenced (its
        partitions may have moved), or when its epoch was stale and no newer one came
        before the partitions could have moved (see `_with_current_epoch`)."""
        if not offsets:
            return

        def request(member_id: str, epoch: int) -> broker_pb2.OffsetCommitRequest:
            built = broker_pb2.OffsetCommitRequest(
                group_id=self.group_id, member_id=member_id, member_epoch=epoch
            )
            for tp, meta in sorted(offsets.items()):
                built.partitions.add(
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=meta.offset,
                    leader_epoch=meta.leader_epoch,
                    metadata=meta.metadata,
                )
            return built

        reply = await self._with_current_epoch(request, self._send_commit, commit=True)
        code = code_from_wire(reply.error_code)
        if commit_action(code) in (GroupAction.FENCED, GroupAction.AWAIT_EPOCH):
            raise CommitFailedError(
                f"commit refused for group {self.group_id}: {reply.error_message} "
                f"[{code.name}]; the partitions may have moved to another member"
            )
        if code is not ErrorCode.NONE:
            raise from_response(reply.error_code, reply.error_message, context="OffsetCommit")

    async def _with_current_epoch(
        self,
        request: Callable[[str, int], Any],
        send: Callable[[Any, broker_pb2_grpc.BrokerServiceAsyncStub], Awaitable[Any]],
        *,
        commit: bool,
    ) -> Any:
        """Send `request(member id, epoch)` to the coordinator; returns its last answer.

        STALE_MEMBER_EPOCH means the coordinator gave this member a newer epoch that its
        heartbeat has not brought yet (a heartbeat answer was on its way): the request
        is sent again with the epoch the next heartbeat brings (asked for at once), at
        most `STALE_EPOCH_RETRIES` times, all within one request timeout. A lookup is
        always safe to repeat (Kafka's consumer retries OffsetFetch the same way). A
        commit is repeated only while the member has given nothing up since it was
        sent (`MemberIdentity.releases`): the coordinator hands a revoked partition to
        another member only after this one reported it gone, so until then a commit at
        the newer epoch still commits partitions nobody else consumes; otherwise it
        fails with `CommitFailedError`, as Kafka's commitSync does. No retry either when
        no heartbeat will come (closing) or the member left or was fenced."""
        identity = self._identity
        clock_s = self._coordinator.conn.clock_s
        deadline_s = clock_s() + self._coordinator.conn.timeout_s
        for attempt in range(STALE_EPOCH_RETRIES + 1):
            member_id, sent_epoch = identity.presented()
            releases = identity.releases
            reply = await self._coordinator.call(
                functools.partial(send, request(member_id, sent_epoch)), deadline_s
            )
            code = code_from_wire(reply.error_code)
            if commit_action(code) is not GroupAction.AWAIT_EPOCH:
                return reply
            if attempt == STALE_EPOCH_RETRIES or not identity.joined:
                return reply
            if identity.epoch == sent_epoch:
                if not self._heartbeat_now():
                    return reply
                await identity.wait_for_change(deadline_s - clock_s())
            if identity.epoch == sent_epoch or not identity.joined:
                return reply
            if commit and identity.releases != releases:
                return reply
        return reply

    async def _send_fetch(
        self,
        request: broker_pb2.OffsetFetchRequest,
        stub: broker_pb2_grpc.BrokerServiceAsyncStub,
    ) -> broker_pb2.OffsetFetchResponse:
        return await stub.OffsetFetch(request, timeout=self._coordinator.conn.timeout_s)

    async def _send_commit(
        self,
        request: broker_pb2.OffsetCommitRequest,
        stub: broker_pb2_grpc.BrokerServiceAsyncStub,
    ) -> broker_pb2.OffsetCommitResponse:
        return await stub.OffsetCommit(request, timeout=self._coordinator.conn.timeout_s)

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets (None: none committed). A fencing answer is raised, never
        read as "no committed offset"."""
        wanted = sorted(set(partitions))

        def request(member_id: str, epoch: int) -> broker_pb2.OffsetFetchRequest:
            return broker_pb2.OffsetFetchRequest(
                group_id=self.group_id,
                member_id=member_id,
                member_epoch=epoch,
                partitions=[
                    common_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                    for tp in wanted
                ],
            )

        reply = await self._with_current_epoch(request, self._send_fetch, commit=False)
        if reply.error_code != ErrorCode.NONE:
            raise from_response(reply.error_code, reply.error_message, context="OffsetFetch")
        found = {
            TopicPartition(p.topic, p.partition): (
                None if p.offset < 0 else OffsetAndMetadata(p.offset, p.metadata, p.leader_epoch)
            )
            for p in reply.partitions
        }
        return {tp: found.get(tp) for tp in wanted}
