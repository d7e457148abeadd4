"""ControllerLink: the broker's side of ControllerService (register, heartbeat, AlterPartition,
controlled shutdown) and the forwarding of admin calls. The only broker module that calls
the controller.

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
from collections.abc import AsyncIterator, Callable

import grpc

from minikafka.errors import ErrorCode
from minikafka.v1 import common_pb2, controller_pb2, controller_pb2_grpc

logger = logging.getLogger(__name__)

RPC_TIMEOUT_S = 5.0
BACKOFF_MS_MIN = 50
BACKOFF_MS_MAX = 500
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    # gRPC's default reconnect back-off grows to minutes: a peer that was down for a few
    # seconds would then stay unreachable long after it came back.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]


class ControllerUnavailableError(Exception):
    """The controller could not be reached or refused the call."""


class ControllerLink:
    """Registration and heartbeats of one broker, plus calls it makes to the controller."""

    def __init__(
        self,
        *,
        address: str,
        broker_id: int,
        endpoint: common_pb2.BrokerEndpoint,
        clean_shutdown: bool,
        heartbeat_interval_ms: int,
        on_registered: Callable[[int], None] | None = None,
    ) -> None:
        self._address = address
        self._broker_id = broker_id
        self._endpoint = endpoint
        self._clean_shutdown = clean_shutdown
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._on_registered = on_registered
        self.incarnation_id = uuid.uuid4().hex
        self.broker_epoch = -1
        self.fenced = True
        self.registered = asyncio.Event()
        self.metadata_offset = -1
        self._channel = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        self.stub = controller_pb2_grpc.ControllerServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def run(self) -> None:
        """Register, then heartbeat over a stream forever; re-register when the controller
        forgets us. A broken stream is reconnected with capped exponential back-off."""
        backoff_ms = BACKOFF_MS_MIN
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                await self._heartbeat_stream()
                backoff_ms = BACKOFF_MS_MIN
            except (grpc.aio.AioRpcError, ControllerUnavailableError) as exc:
                logger.warning(
                    "controller %s: %s; retrying in %s ms",
                    self._address,
                    _describe(exc),
                    backoff_ms,
                )
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, BACKOFF_MS_MAX)

    async def _heartbeat_stream(self) -> None:
        """Heartbeat every interval on one stream until our registration goes stale.

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

        call = self.stub.BrokerHeartbeatStream(requests())
        try:
            async for reply in call:
                self._apply_heartbeat_reply(reply)
                if self.broker_epoch != epoch:
                    return
        finally:
            stop.set()
            call.cancel()

    async def _register(self) -> None:
        reply = await self.stub.RegisterBroker(
            controller_pb2.RegisterBrokerRequest(
                broker_id=self._broker_id,
                endpoint=self._endpoint,
                incarnation_id=self.incarnation_id,
                clean_shutdown=self._clean_shutdown,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        if reply.error_code != ErrorCode.NONE:
            raise ControllerUnavailableError(
                f"registration refused: {ErrorCode(reply.error_code).name} {reply.error_message}"
            )
        self.broker_epoch = reply.broker_epoch
        if reply.heartbeat_interval_ms > 0:
            self._heartbeat_interval_ms = reply.heartbeat_interval_ms
        # Later re-registrations of this process lost nothing: the log was never cut.
        self._clean_shutdown = True
        self.registered.set()
        logger.info(
            "registered with controller %s as broker %s, epoch %s",
            self._address,
            self._broker_id,
            self.broker_epoch,
        )
        if self._on_registered is not None:
            self._on_registered(self.broker_epoch)

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
        if reply.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            logger.warning(
                "controller no longer knows broker %s epoch %s (%s); registering again",
                self._broker_id,
                self.broker_epoch,
                ErrorCode(reply.error_code).name,
            )
            self.broker_epoch = -1
            self.registered.clear()
            return
        if reply.error_code != ErrorCode.NONE:
            raise ControllerUnavailableError(
                f"heartbeat refused: {ErrorCode(reply.error_code).name}"
            )
        if self.fenced != reply.is_fenced:
            logger.info(
                "broker %s is now %s", self._broker_id, "fenced" if reply.is_fenced else "active"
            )
        self.fenced = reply.is_fenced

    async def alter_partition(
        self, items: list[controller_pb2.AlterPartitionItem]
    ) -> controller_pb2.AlterPartitionResponse:
        return await self.stub.AlterPartition(
            controller_pb2.AlterPartitionRequest(
                broker_id=self._broker_id, broker_epoch=self.broker_epoch, partitions=items
            ),
            timeout=RPC_TIMEOUT_S,
        )

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move our leaderships away; True when none remain."""
        if self.broker_epoch < 0:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            try:
                reply = await self.stub.ControlledShutdown(
                    controller_pb2.ControlledShutdownRequest(
                        broker_id=self._broker_id, broker_epoch=self.broker_epoch
                    ),
                    timeout=max(0.1, min(RPC_TIMEOUT_S, deadline - loop.time())),
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


class ControllerForwarder:
    """AdminBackend that forwards admin calls to the controller, as Kafka brokers do."""

    def __init__(self, link: ControllerLink) -> None:
        self._stub = link.stub

    async def create_topics(
        self, request: controller_pb2.CreateTopicsRequest
    ) -> controller_pb2.CreateTopicsResponse:
        return await self._stub.CreateTopics(request, timeout=30)

    async def delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest
    ) -> controller_pb2.DeleteTopicsResponse:
        return await self._stub.DeleteTopics(request, timeout=30)

    async def describe_cluster(
        self, request: controller_pb2.DescribeClusterRequest
    ) -> controller_pb2.DescribeClusterResponse:
        return await self._stub.DescribeCluster(request, timeout=RPC_TIMEOUT_S)

    async def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse:
        return await self._stub.ElectLeaders(request, timeout=30)

    async def alter_configs(
        self, request: controller_pb2.AlterConfigsRequest
    ) -> controller_pb2.AlterConfigsResponse:
        return await self._stub.AlterConfigs(request, timeout=30)

    async def init_producer_id(
        self, request: controller_pb2.InitProducerIdRequest
    ) -> controller_pb2.InitProducerIdResponse:
        return await self._stub.InitProducerId(request, timeout=RPC_TIMEOUT_S)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)
