"""ControllerLink: the broker's side of ControllerService (register, heartbeat, AlterPartition,
controlled shutdown) and the forwarding of admin calls. The only broker module that calls
the controller.

The broker knows every controller of the quorum (`--controller H:P,H:P,...`) and talks to
the active one. It finds it by asking every address `DescribeQuorum` at once and taking
the one that answers `active` (the highest epoch if two do, for a moment, during a
fail-over), and looks again whenever a call answers NOT_CONTROLLER or cannot reach its
controller. Its registration (broker epoch) is in the replicated metadata, so after a
fail-over it simply heartbeats the new active controller with the same epoch.

Lifecycle (runs until cancelled):

    UNREGISTERED --RegisterBroker ok--> REGISTERED --heartbeat STALE_BROKER_EPOCH /
    BROKER_ID_NOT_REGISTERED--> UNREGISTERED (register again, same incarnation)

Retries use capped exponential back-off; nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, TypeVar

import grpc

from minikafka.errors import ErrorCode, code_name
from minikafka.grpc_options import channel_options
from minikafka.tls import TlsMaterial, open_channel
from minikafka.v1 import common_pb2, controller_pb2, controller_pb2_grpc, raft_pb2

logger = logging.getLogger(__name__)

RPC_TIMEOUT_S = 5.0
ADMIN_TIMEOUT_S = 30.0
#: Until the controller's register reply says otherwise (the controller's default).
DEFAULT_SESSION_TIMEOUT_MS = 1500
#: A heartbeat reply later than two heartbeat intervals (at least this) makes the broker
#: ask which controller is active: one cut off from it may have been replaced, and the
#: new one expects the broker within a session.
STALL_MS_MIN: Final = 500
BACKOFF_MS_MIN = 50
BACKOFF_MS_MAX = 500
#: Looking for the active controller: each probe's deadline, and the pause between rounds
#: when none answers active (an election takes a few hundred ms).
PROBE_TIMEOUT_S: Final = 1.0
DISCOVERY_BACKOFF_MS_MIN: Final = 25
DISCOVERY_BACKOFF_MS_MAX: Final = 100
NOT_CONTROLLER: Final = int(ErrorCode.NOT_CONTROLLER)

R = TypeVar("R")


class ControllerUnavailableError(Exception):
    """The controller could not be reached or refused the call."""


class ControllerMovedError(ControllerUnavailableError):
    """The controller called is not the active one (NOT_CONTROLLER)."""


def parse_controller_addresses(value: str) -> list[str]:
    """`H:P[,H:P...]` as a list (at least one)."""
    addresses = [part.strip() for part in value.split(",") if part.strip()]
    if not addresses:
        raise ValueError("no controller address given")
    return addresses


class ControllerLink:
    """Registration and heartbeats of one broker, plus calls it makes to the controller."""

    def __init__(
        self,
        *,
        address: str,
        broker_id: int,
        endpoint: common_pb2.BrokerEndpoint,
        previous_broker_epoch: int,
        directory_id: str,
        heartbeat_interval_ms: int,
        on_registered: Callable[[int], None] | None = None,
        tls: TlsMaterial | None = None,
        connect: Callable[[str], controller_pb2_grpc.ControllerServiceAsyncStub] | None = None,
    ) -> None:
        """`connect` is the port to the controllers: a stub for a HOST:PORT address. None
        (production): a gRPC channel per address; the simulator (tests/sim) passes
        in-memory stubs."""
        self._addresses = parse_controller_addresses(address)
        self._broker_id = broker_id
        self._endpoint = endpoint
        #: The registration this broker proves it continues (-1: none; KIP-966).
        self._previous_broker_epoch = previous_broker_epoch
        self._directory_id = directory_id
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._on_registered = on_registered
        self.incarnation_id = uuid.uuid4().hex
        self.broker_epoch = -1
        #: The newest controller epoch the controller announced to this broker (register
        #: and heartbeat replies); control requests from a newer one are refused.
        self.controller_epoch = -1
        self.fenced = True
        self.registered = asyncio.Event()
        self.metadata_offset = -1
        #: The controller's session timeout (register reply).
        self._session_timeout_ms = DEFAULT_SESSION_TIMEOUT_MS
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, controller_pb2_grpc.ControllerServiceAsyncStub] = {}
        for address in self._addresses:
            if connect is not None:
                self._stubs[address] = connect(address)
                continue
            channel = open_channel(address, channel_options(), tls)
            self._channels[address] = channel
            self._stubs[address] = controller_pb2_grpc.ControllerServiceStub(channel)
        self._active = self._addresses[0]
        self._discovery = asyncio.Lock()
        self._discoveries = 0
        self._found = False  # what the latest discovery round found

    @property
    def stub(self) -> controller_pb2_grpc.ControllerServiceAsyncStub:
        return self._stubs[self._active]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()

    # ---- finding the active controller ---------------------------------------------------

    async def find_active(self) -> bool:
        """Ask every controller which one is active and use it; False when none is (an
        election is under way, or none is reachable). Concurrent callers share one round."""
        seen = self._discoveries
        async with self._discovery:
            if self._discoveries != seen:
                return self._found  # another caller looked while we waited
            self._found = await self._probe_all()
            self._discoveries += 1
            return self._found

    async def _probe_all(self) -> bool:
        async def probe(address: str) -> tuple[str, raft_pb2.DescribeQuorumResponse | None]:
            try:
                reply = await self._stubs[address].DescribeQuorum(
                    raft_pb2.DescribeQuorumRequest(), timeout=PROBE_TIMEOUT_S
                )
            except grpc.aio.AioRpcError:
                return address, None
            return address, reply

        # The first controller that answers active wins: a silent (cut off) one must not
        # hold the round up for the whole probe timeout.
        for next_reply in asyncio.as_completed([probe(address) for address in self._addresses]):
            address, reply = await next_reply
            if reply is not None and reply.active:
                if address != self._active:
                    logger.info(
                        "the active controller is now controller %d at %s (epoch %d)",
                        reply.node_id,
                        address,
                        reply.leader_epoch,
                    )
                    self._active = address
                return True
        return False

    async def _wait_for_active(self, backoff_ms: int) -> int:
        """One discovery round; when it found nothing, pause. Returns the next back-off."""
        if len(self._addresses) > 1 and await self.find_active():
            return DISCOVERY_BACKOFF_MS_MIN
        await asyncio.sleep(backoff_ms / 1000)
        return min(backoff_ms * 2, DISCOVERY_BACKOFF_MS_MAX)

    async def call(
        self,
        invoke: Callable[[controller_pb2_grpc.ControllerServiceAsyncStub, float], Awaitable[R]],
        *,
        moved: Callable[[R], bool],
        timeout_s: float,
    ) -> R:
        """`invoke(stub, timeout_s)` on the active controller; when the answer says it is
        not (`moved`) or the controller cannot be reached, find the active one and retry,
        until `timeout_s` has passed (then the last answer or error is the result)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        backoff_ms = DISCOVERY_BACKOFF_MS_MIN
        while True:
            remaining = deadline - loop.time()
            try:
                response = await invoke(self.stub, max(0.05, remaining))
            except grpc.aio.AioRpcError as error:
                # UNAVAILABLE: not delivered (no connection); anything else is final.
                if error.code() != grpc.StatusCode.UNAVAILABLE or loop.time() >= deadline:
                    raise
            else:
                if not moved(response) or loop.time() >= deadline:
                    return response
            backoff_ms = await self._wait_for_active(
                min(backoff_ms, max(1, int((deadline - loop.time()) * 1000)))
            )

    # ---- registration and heartbeats ------------------------------------------------------

    async def run(self) -> None:
        """Register, then heartbeat over a stream forever; re-register when the controller
        forgets us, follow the active controller when it moves. A broken stream is
        reconnected with capped exponential back-off."""
        backoff_ms = BACKOFF_MS_MIN
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                await self._heartbeat_stream()
                backoff_ms = BACKOFF_MS_MIN
            except ControllerMovedError as exc:
                logger.info("%s; following the active controller", exc)
                await self._wait_for_active(DISCOVERY_BACKOFF_MS_MIN)
            except (grpc.aio.AioRpcError, ControllerUnavailableError) as exc:
                logger.warning(
                    "controller %s: %s; retrying in %s ms",
                    self._active,
                    _describe(exc),
                    backoff_ms,
                )
                if len(self._addresses) > 1 and await self.find_active():
                    backoff_ms = BACKOFF_MS_MIN
                    continue
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, BACKOFF_MS_MAX)

    async def _heartbeat_stream(self) -> None:
        """Heartbeat every interval on one stream until our registration goes stale or the
        controller stops being the active one.

        The controller fences us as soon as this stream breaks (a crash is noticed at
        once, not after the session timeout).
        """
        epoch = self.broker_epoch
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[controller_pb2.BrokerHeartbeatRequest]:
            while not stop.is_set() and self.broker_epoch == epoch:
                yield controller_pb2.BrokerHeartbeatRequest(
                    broker_id=self._broker_id,
                    broker_epoch=epoch,
                    metadata_offset=self.metadata_offset,
                    want_shutdown=False,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._heartbeat_interval_ms / 1000)

        address = self._active
        call = self.stub.BrokerHeartbeatStream(requests())
        replies = aiter(call)
        # Waiting for a reply must not cancel the read (that would end the stream), so it
        # runs as a task that outlives each wait.
        read: asyncio.Task[controller_pb2.BrokerHeartbeatResponse] | None = None
        stalled = False
        try:
            while True:
                if read is None:
                    read = asyncio.ensure_future(anext(replies))
                wait_s = DISCOVERY_BACKOFF_MS_MAX / 1000 if stalled else self._stall_s()
                done, _ = await asyncio.wait({read}, timeout=wait_s)
                if not done:
                    # Silent: cut off, or just slow. Leave only for another active
                    # controller (a slow one keeps its stream, so it fences nobody).
                    stalled = True
                    if await self._moved_from(address):
                        raise ControllerMovedError(f"{address} stopped answering heartbeats")
                    continue
                stalled = False
                finished, read = read, None
                try:
                    reply = finished.result()
                except StopAsyncIteration:
                    return
                self._apply_heartbeat_reply(reply)
                if self.broker_epoch != epoch:
                    return
        finally:
            if read is not None:
                read.cancel()
            stop.set()
            call.cancel()

    def _stall_s(self) -> float:
        """How long a heartbeat reply may take before we look for another active controller
        (with a single controller address there is nowhere else to look)."""
        if len(self._addresses) == 1:
            return self._session_timeout_ms / 1000
        return max(2 * self._heartbeat_interval_ms, STALL_MS_MIN) / 1000

    async def _moved_from(self, address: str) -> bool:
        """Whether another controller than `address` is active now."""
        if len(self._addresses) == 1:
            return False
        return await self.find_active() and self._active != address

    async def _register(self) -> None:
        reply = await self.stub.RegisterBroker(
            controller_pb2.RegisterBrokerRequest(
                broker_id=self._broker_id,
                endpoint=self._endpoint,
                incarnation_id=self.incarnation_id,
                clean_shutdown=self._previous_broker_epoch >= 0,
                previous_broker_epoch=self._previous_broker_epoch,
                directory_id=self._directory_id,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        if reply.error_code == NOT_CONTROLLER:
            raise ControllerMovedError(f"{self._active} is not the active controller")
        if reply.error_code != ErrorCode.NONE:
            raise ControllerUnavailableError(
                f"registration refused: {code_name(reply.error_code)} {reply.error_message}"
            )
        if self._on_registered is not None:
            # Durably, before anything is served under the new epoch: a crash from now on
            # proves continuity with this registration only if the machine kept running.
            self._on_registered(reply.broker_epoch)
        self.broker_epoch = reply.broker_epoch
        self.controller_epoch = max(self.controller_epoch, reply.controller_epoch)
        if reply.heartbeat_interval_ms > 0:
            self._heartbeat_interval_ms = reply.heartbeat_interval_ms
        if reply.session_timeout_ms > 0:
            self._session_timeout_ms = reply.session_timeout_ms
        # A re-registration of this process lost nothing: it continues this registration.
        self._previous_broker_epoch = reply.broker_epoch
        self.registered.set()
        logger.info(
            "registered with controller %s as broker %s, epoch %s",
            self._active,
            self._broker_id,
            self.broker_epoch,
        )

    async def _heartbeat(
        self, *, want_shutdown: bool = False
    ) -> controller_pb2.BrokerHeartbeatResponse:
        reply = await self.stub.BrokerHeartbeat(
            controller_pb2.BrokerHeartbeatRequest(
                broker_id=self._broker_id,
                broker_epoch=self.broker_epoch,
                metadata_offset=self.metadata_offset,
                want_shutdown=want_shutdown,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        self._apply_heartbeat_reply(reply)
        return reply

    def _apply_heartbeat_reply(self, reply: controller_pb2.BrokerHeartbeatResponse) -> None:
        if reply.error_code == NOT_CONTROLLER:
            raise ControllerMovedError(f"{self._active} is no longer the active controller")
        if reply.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            logger.warning(
                "controller no longer knows broker %s epoch %s (%s); registering again",
                self._broker_id,
                self.broker_epoch,
                code_name(reply.error_code),
            )
            self.broker_epoch = -1
            self.registered.clear()
            return
        self.controller_epoch = max(self.controller_epoch, reply.controller_epoch)
        if reply.error_code != ErrorCode.NONE:
            raise ControllerUnavailableError(f"heartbeat refused: {code_name(reply.error_code)}")
        if self.fenced != reply.is_fenced:
            logger.info(
                "broker %s is now %s", self._broker_id, "fenced" if reply.is_fenced else "active"
            )
        self.fenced = reply.is_fenced

    # ---- other calls ------------------------------------------------------------------------

    async def alter_partition(
        self, items: list[controller_pb2.AlterPartitionItem]
    ) -> controller_pb2.AlterPartitionResponse:
        request = controller_pb2.AlterPartitionRequest(
            broker_id=self._broker_id, broker_epoch=self.broker_epoch, partitions=items
        )
        return await self.call(
            lambda stub, timeout_s: stub.AlterPartition(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=RPC_TIMEOUT_S,
        )

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move our leaderships away; True when none remain."""
        if self.broker_epoch < 0:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        request = controller_pb2.ControlledShutdownRequest(
            broker_id=self._broker_id, broker_epoch=self.broker_epoch
        )
        while loop.time() < deadline:
            try:
                reply = await self.call(
                    lambda stub, rpc_timeout_s: stub.ControlledShutdown(
                        request, timeout=rpc_timeout_s
                    ),
                    moved=lambda response: response.error_code == NOT_CONTROLLER,
                    timeout_s=max(0.1, min(RPC_TIMEOUT_S, deadline - loop.time())),
                )
            except grpc.aio.AioRpcError as exc:
                logger.warning("controlled shutdown: %s", _describe(exc))
                await asyncio.sleep(0.1)
                continue
            if reply.error_code == ErrorCode.NONE and not reply.remaining_partitions:
                return True
            await asyncio.sleep(0.1)
        return False

    async def final_heartbeat(self) -> None:
        """Tell the controller we are going away (best effort)."""
        if self.broker_epoch < 0:
            return
        try:
            await self._heartbeat(want_shutdown=True)
        except (grpc.aio.AioRpcError, ControllerUnavailableError) as exc:
            logger.info("final heartbeat not delivered: %s", _describe(exc))


def _topics_moved(
    response: controller_pb2.CreateTopicsResponse
    | controller_pb2.DeleteTopicsResponse
    | controller_pb2.CreatePartitionsResponse,
) -> bool:
    return bool(response.topics) and all(t.error_code == NOT_CONTROLLER for t in response.topics)


class ControllerForwarder:
    """AdminBackend that forwards admin calls to the active controller, as Kafka brokers do
    (following it when it moves, within each call's timeout)."""

    def __init__(self, link: ControllerLink) -> None:
        self._link = link

    async def create_topics(
        self, request: controller_pb2.CreateTopicsRequest
    ) -> controller_pb2.CreateTopicsResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.CreateTopics(request, timeout=timeout_s),
            moved=_topics_moved,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest
    ) -> controller_pb2.DeleteTopicsResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.DeleteTopics(request, timeout=timeout_s),
            moved=_topics_moved,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def describe_cluster(
        self, request: controller_pb2.DescribeClusterRequest
    ) -> controller_pb2.DescribeClusterResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.DescribeCluster(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=RPC_TIMEOUT_S,
        )

    async def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.ElectLeaders(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def create_acls(
        self, request: controller_pb2.CreateAclsRequest
    ) -> controller_pb2.CreateAclsResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.CreateAcls(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def delete_acls(
        self, request: controller_pb2.DeleteAclsRequest
    ) -> controller_pb2.DeleteAclsResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.DeleteAcls(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def describe_acls(
        self, request: controller_pb2.DescribeAclsRequest
    ) -> controller_pb2.DescribeAclsResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.DescribeAcls(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def alter_configs(
        self, request: controller_pb2.AlterConfigsRequest
    ) -> controller_pb2.AlterConfigsResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.AlterConfigs(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def init_producer_id(
        self, request: controller_pb2.InitProducerIdRequest
    ) -> controller_pb2.InitProducerIdResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.InitProducerId(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=RPC_TIMEOUT_S,
        )

    async def describe_quorum(
        self, request: raft_pb2.DescribeQuorumRequest
    ) -> raft_pb2.DescribeQuorumResponse:
        """The active controller's view (it alone knows every voter's replication)."""
        return await self._link.call(
            lambda stub, timeout_s: stub.DescribeQuorum(request, timeout=timeout_s),
            moved=lambda response: not response.active,
            timeout_s=RPC_TIMEOUT_S,
        )

    async def create_partitions(
        self, request: controller_pb2.CreatePartitionsRequest
    ) -> controller_pb2.CreatePartitionsResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.CreatePartitions(request, timeout=timeout_s),
            moved=_topics_moved,
            timeout_s=ADMIN_TIMEOUT_S,
        )

    async def describe_partition_history(
        self, request: controller_pb2.DescribePartitionHistoryRequest
    ) -> controller_pb2.DescribePartitionHistoryResponse:
        return await self._link.call(
            lambda stub, timeout_s: stub.DescribePartitionHistory(request, timeout=timeout_s),
            moved=lambda response: response.error_code == NOT_CONTROLLER,
            timeout_s=RPC_TIMEOUT_S,
        )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)
