"""Consumer-group administration, for `AsyncAdmin` (and so `Admin` and the
`consumer-groups` tool): list, describe and delete groups, list and alter their committed
offsets. Listing asks every broker (each answers for the groups it coordinates); the other
calls go to the group's coordinator, found again and retried by `client.group_rules`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import msgspec

from client.errors import from_response
from client.group_rules import GroupAction, commit_action
from client.records import OffsetAndMetadata, TopicPartition
from client.transport import BrokerConnections
from minikafka.errors import ErrorCode, code_from_wire
from minikafka.v1 import broker_pb2

if TYPE_CHECKING:
    from minikafka.v1.broker_pb2_grpc import BrokerServiceAsyncStub as Stub


class GroupListing(msgspec.Struct, frozen=True, kw_only=True):
    group_id: str
    state: str  # Empty, Reconciling, Stable
    members: int


class MemberDescription(msgspec.Struct, frozen=True, kw_only=True):
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    member_epoch: int
    assignment: frozenset[TopicPartition]


class GroupDescription(msgspec.Struct, frozen=True, kw_only=True):
    group_id: str
    state: str
    group_epoch: int
    assignor: str
    members: tuple[MemberDescription, ...]


class GroupCalls:
    """Group calls over one admin client's connections."""

    def __init__(self, conn: BrokerConnections, *, timeout_s: float, backoff_s: float) -> None:
        self._conn = conn
        self._timeout_s = timeout_s
        self._backoff_s = backoff_s

    async def _coordinator(self, group_id: str) -> Stub | None:
        for address in self._conn.any_stub_addresses():
            try:
                reply = await self._conn.stub(address).FindCoordinator(
                    broker_pb2.FindCoordinatorRequest(group_ids=[group_id]),
                    timeout=self._timeout_s,
                )
            except grpc.aio.AioRpcError:
                continue
            [found] = reply.coordinators
            action = commit_action(code_from_wire(found.error_code))
            if action is GroupAction.OK:
                return self._conn.stub(f"{found.host}:{found.port}")
            if action is GroupAction.FAIL:
                raise from_response(found.error_code, found.error_message, context=group_id)
            return None
        return None

    async def _on_coordinator(
        self, group_id: str, call: Callable[[Stub], Awaitable[Any]], code_of: Callable[[Any], int]
    ) -> Any:
        """`call` on the group's coordinator until its answer is not "find the
        coordinator again" or "retry" (bounded by the request timeout)."""
        deadline = self._conn.clock_s() + self._timeout_s
        while True:
            stub = await self._coordinator(group_id)
            reply: Any = None
            if stub is not None:
                try:
                    reply = await call(stub)
                except grpc.aio.AioRpcError:
                    reply = None
            if reply is not None:
                action = commit_action(code_from_wire(code_of(reply)))
                if action not in (GroupAction.FIND_COORDINATOR, GroupAction.RETRY):
                    return reply
            if self._conn.clock_s() + self._backoff_s > deadline:
                if reply is not None:
                    return reply
                raise from_response(
                    int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    f"no coordinator of group {group_id!r} answered",
                )
            await asyncio.sleep(self._backoff_s)

    async def list_groups(self) -> list[GroupListing]:
        await self._conn.refresh([])
        brokers = list(self._conn.view.brokers.values())
        deadline = self._conn.clock_s() + self._timeout_s
        found: dict[str, GroupListing] = {}
        pending = brokers
        while pending:
            waiting = []
            for broker in pending:
                reply = await self._conn.broker_stub(broker).ListGroups(
                    broker_pb2.ListGroupsRequest(), timeout=self._timeout_s
                )
                action = commit_action(code_from_wire(reply.error_code))
                if action is GroupAction.RETRY:
                    waiting.append(broker)
                    continue
                if action is not GroupAction.OK:
                    raise from_response(reply.error_code, reply.error_message, context="ListGroups")
                for g in reply.groups:
                    found[g.group_id] = GroupListing(
                        group_id=g.group_id, state=g.state, members=g.members
                    )
            pending = waiting
            if pending:
                if self._conn.clock_s() + self._backoff_s > deadline:
                    raise from_response(
                        int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), context="ListGroups"
                    )
                await asyncio.sleep(self._backoff_s)
        return sorted(found.values(), key=lambda g: g.group_id)

    async def describe_group(self, group_id: str) -> GroupDescription:
        request = broker_pb2.DescribeGroupsRequest(group_ids=[group_id])
        reply = await self._on_coordinator(
            group_id,
            lambda stub: stub.DescribeGroups(request, timeout=self._timeout_s),
            lambda r: r.groups[0].error_code,
        )
        [group] = reply.groups
        if group.error_code != ErrorCode.NONE:
            raise from_response(group.error_code, group.error_message, context=group_id)
        return GroupDescription(
            group_id=group.group_id,
            state=group.state,
            group_epoch=group.group_epoch,
            assignor=group.assignor,
            members=tuple(
                MemberDescription(
                    member_id=m.member_id,
                    instance_id=m.instance_id or None,
                    client_id=m.client_id,
                    host=m.client_host,
                    member_epoch=m.member_epoch,
                    assignment=frozenset(
                        TopicPartition(tp.topic, tp.partition) for tp in m.assignment
                    ),
                )
                for m in group.members
            ),
        )

    async def list_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        request = broker_pb2.OffsetFetchRequest(group_id=group_id, member_epoch=-1)
        reply = await self._on_coordinator(
            group_id,
            lambda stub: stub.OffsetFetch(request, timeout=self._timeout_s),
            lambda r: r.error_code,
        )
        if reply.error_code != ErrorCode.NONE:
            raise from_response(reply.error_code, reply.error_message, context=group_id)
        return {
            TopicPartition(p.topic, p.partition): OffsetAndMetadata(
                p.offset, p.metadata, p.leader_epoch
            )
            for p in reply.partitions
            if p.offset >= 0
        }

    async def alter_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """Commit `offsets` outside the group's membership: refused (UNKNOWN_MEMBER_ID,
        raised) while the group has members, as Kafka refuses to reset an active group."""
        request = broker_pb2.OffsetCommitRequest(group_id=group_id, member_epoch=-1)
        for tp, meta in sorted(offsets.items()):
            request.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=meta.offset,
                leader_epoch=meta.leader_epoch,
                metadata=meta.metadata,
            )
        reply = await self._on_coordinator(
            group_id,
            lambda stub: stub.OffsetCommit(request, timeout=self._timeout_s),
            lambda r: r.error_code,
        )
        if reply.error_code != ErrorCode.NONE:
            raise from_response(reply.error_code, reply.error_message, context=group_id)

    async def delete_group(self, group_id: str) -> None:
        request = broker_pb2.DeleteGroupsRequest(group_ids=[group_id])
        reply = await self._on_coordinator(
            group_id,
            lambda stub: stub.DeleteGroups(request, timeout=self._timeout_s),
            lambda r: r.results[0].error_code,
        )
        [result] = reply.results
        if result.error_code != ErrorCode.NONE:
            raise from_response(result.error_code, result.error_message, context=group_id)
