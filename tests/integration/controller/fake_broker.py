"""In-test brokers for controller integration tests.

A `FakeBroker` serves `BrokerControlService` on 127.0.0.1:0 and records every request it
receives; it registers with the controller and heartbeats like a real broker (reporting the
newest UpdateMetadata offset it applied), but has no log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from minikafka.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
)

T = TypeVar("T")
WAIT_S = 10.0


async def wait_for(
    predicate: Callable[[], Awaitable[T | None]], *, timeout_s: float = WAIT_S, what: str = ""
) -> T:
    """Poll an async predicate until it returns a truthy value, bounded by `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.02)


class FakeBroker(broker_pb2_grpc.BrokerControlServiceServicer):
    def __init__(self, broker_id: int, controller_address: str, *, rack: str = "") -> None:
        self.broker_id = broker_id
        self.rack = rack
        self.incarnation_id = uuid.uuid4().hex
        self.leader_and_isr: list[broker_pb2.LeaderAndIsrRequest] = []
        self.stop_replica: list[broker_pb2.StopReplicaRequest] = []
        self.update_metadata: list[broker_pb2.UpdateMetadataRequest] = []
        #: What the controller's unclean-election survey hears: (last epoch, log end offset).
        self.log_ends: dict[tuple[str, int], tuple[int, int]] = {}
        self.surveys: list[broker_pb2.GetReplicaLogInfoRequest] = []
        self.metadata_offset = -1
        self.broker_epoch = -1
        self.last_heartbeat: controller_pb2.BrokerHeartbeatResponse | None = None
        self.port = 0
        self._changed = asyncio.Condition()
        self._server: grpc.aio.Server | None = None
        self._controller_address = controller_address
        self._channel = grpc.aio.insecure_channel(controller_address)
        self.controller = controller_pb2_grpc.ControllerServiceStub(self._channel)
        self._heartbeat_task: asyncio.Task[None] | None = None
        self.heartbeat_interval_s = 0.05

    # ---- BrokerControlService ---------------------------------------------------------------

    async def LeaderAndIsr(
        self, request: broker_pb2.LeaderAndIsrRequest, context: Any
    ) -> broker_pb2.LeaderAndIsrResponse:
        async with self._changed:
            self.leader_and_isr.append(request)
            self._changed.notify_all()
        return broker_pb2.LeaderAndIsrResponse()

    async def StopReplica(
        self, request: broker_pb2.StopReplicaRequest, context: Any
    ) -> broker_pb2.StopReplicaResponse:
        async with self._changed:
            self.stop_replica.append(request)
            self._changed.notify_all()
        return broker_pb2.StopReplicaResponse()

    async def GetReplicaLogInfo(
        self, request: broker_pb2.GetReplicaLogInfoRequest, context: Any
    ) -> broker_pb2.GetReplicaLogInfoResponse:
        """Answers the controller's unclean-election survey from `log_ends`."""
        self.surveys.append(request)
        response = broker_pb2.GetReplicaLogInfoResponse()
        for item in request.partitions:
            end = self.log_ends.get((item.topic, item.partition))
            if end is None:
                response.partitions.add(
                    topic=item.topic,
                    partition=item.partition,
                    error_code=common_pb2.UNKNOWN_TOPIC_OR_PARTITION,
                )
            else:
                response.partitions.add(
                    topic=item.topic,
                    partition=item.partition,
                    last_epoch=end[0],
                    log_end_offset=end[1],
                )
        return response

    async def UpdateMetadata(
        self, request: broker_pb2.UpdateMetadataRequest, context: Any
    ) -> broker_pb2.UpdateMetadataResponse:
        async with self._changed:
            self.update_metadata.append(request)
            self.metadata_offset = max(self.metadata_offset, request.metadata_offset)
            self._changed.notify_all()
        return broker_pb2.UpdateMetadataResponse()

    # ---- lifecycle --------------------------------------------------------------------------

    async def start_server(self) -> None:
        self._server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        broker_pb2_grpc.add_BrokerControlServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()

    async def register(
        self, *, clean_shutdown: bool = True
    ) -> controller_pb2.RegisterBrokerResponse:
        response = await self.controller.RegisterBroker(
            controller_pb2.RegisterBrokerRequest(
                broker_id=self.broker_id,
                endpoint=common_pb2.BrokerEndpoint(
                    broker_id=self.broker_id, host="127.0.0.1", port=self.port, rack=self.rack
                ),
                incarnation_id=self.incarnation_id,
                clean_shutdown=clean_shutdown,
                # A clean stop proves the last registration's epoch (KIP-966).
                previous_broker_epoch=self.broker_epoch if clean_shutdown else -1,
                directory_id=f"fake-directory-{self.broker_id}",
            ),
            timeout=WAIT_S,
        )
        if response.error_code == common_pb2.NONE:
            self.broker_epoch = response.broker_epoch
            self.heartbeat_interval_s = response.heartbeat_interval_ms / 1000
        return response

    async def heartbeat(
        self, *, want_shutdown: bool = False
    ) -> controller_pb2.BrokerHeartbeatResponse:
        response = await self.controller.BrokerHeartbeat(
            controller_pb2.BrokerHeartbeatRequest(
                broker_id=self.broker_id,
                broker_epoch=self.broker_epoch,
                metadata_offset=self.metadata_offset,
                want_shutdown=want_shutdown,
            ),
            timeout=WAIT_S,
        )
        self.last_heartbeat = response
        return response

    def start_heartbeats(self) -> None:
        assert self._heartbeat_task is None
        self._heartbeat_task = asyncio.create_task(self._heartbeat_loop())

    async def stop_heartbeats(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
            self._heartbeat_task = None

    async def _heartbeat_loop(self) -> None:
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.heartbeat()
            await asyncio.sleep(self.heartbeat_interval_s)

    async def join(self) -> None:
        """Start serving, register, heartbeat until unfenced."""
        if self._server is None:
            await self.start_server()
        self.last_heartbeat = None
        response = await self.register()
        assert response.error_code == common_pb2.NONE, response
        self.start_heartbeats()

        async def unfenced() -> bool:
            return self.last_heartbeat is not None and not self.last_heartbeat.is_fenced

        await wait_for(unfenced, what=f"broker {self.broker_id} unfenced")

    async def reconnect(self, controller_address: str) -> None:
        await self._channel.close()
        self._controller_address = controller_address
        self._channel = grpc.aio.insecure_channel(controller_address)
        self.controller = controller_pb2_grpc.ControllerServiceStub(self._channel)

    async def stop(self) -> None:
        await self.stop_heartbeats()
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        await self._channel.close()

    # ---- observations -----------------------------------------------------------------------

    def partition_states(self) -> dict[tuple[str, int], broker_pb2.PartitionState]:
        """Newest state per partition from LeaderAndIsr, as a broker would apply it."""
        newest: dict[tuple[str, int], broker_pb2.PartitionState] = {}
        for request in self.leader_and_isr:
            for state in request.partitions:
                key = (state.topic, state.partition)
                old = newest.get(key)
                if old is None or (state.leader_epoch, state.partition_epoch) >= (
                    old.leader_epoch,
                    old.partition_epoch,
                ):
                    newest[key] = state
        return newest

    async def wait_for_state(
        self,
        key: tuple[str, int],
        predicate: Callable[[broker_pb2.PartitionState], bool],
        *,
        timeout_s: float = WAIT_S,
    ) -> broker_pb2.PartitionState:
        async def matched() -> broker_pb2.PartitionState | None:
            state = self.partition_states().get(key)
            return state if state is not None and predicate(state) else None

        async with asyncio.timeout(timeout_s):
            async with self._changed:
                while True:
                    found = await matched()
                    if found is not None:
                        return found
                    await self._changed.wait()
