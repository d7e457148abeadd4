"""The simulated network's power loss: a stream whose client lost power goes quiet.

The controller fences a broker at once when its heartbeat stream ends, and only at the
session timeout when the stream just goes quiet (a power loss: no reset reaches it). The
broker's link ends its request generator (a stop flag) and then cancels the call, in one
step; the generator could still finish first, and its end reached the server as a clean
end of the stream, so power losses in the simulation fenced at once and a restart within
the session timeout (hole 2's schedule) never happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from minikafka.v1 import controller_pb2
from tests.sim.replication.network import Network, SimContext
from tests.sim.replication.vloop import VirtualTimeLoop


class _Host:
    def __init__(self, name: str, servicers: dict[str, object]) -> None:
        self.name = name
        self.alive = True
        self.powered_off = False
        self._servicers = servicers

    def servicer(self, service: str) -> object | None:
        return self._servicers.get(service)

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(work, name=name)

    async def wait_unpaused(self) -> None:
        return None


class _Server:
    """A heartbeat stream handler that records what it saw."""

    def __init__(self) -> None:
        self.requests = 0
        self.ended = False

    async def BrokerHeartbeatStream(
        self, requests: AsyncIterator[controller_pb2.BrokerHeartbeatRequest], context: SimContext
    ) -> AsyncIterator[controller_pb2.BrokerHeartbeatResponse]:
        try:
            async for _ in requests:
                self.requests += 1
                yield controller_pb2.BrokerHeartbeatResponse()
        finally:  # the stream ended, broke, or was cancelled: the controller fences
            self.ended = True


def _run(*, power_loss: bool) -> bool:
    """Whether the server saw the stream end within a second of the client's cancel."""
    server = _Server()
    seen: list[bool] = []
    network = Network(random.Random(1), drop_rate=0.0, duplicate_rate=0.0, max_delay_ms=1)
    client = _Host("broker-1", {})
    network.add("broker-1:9092", client)
    network.add("controller:9093", _Host("controller", {"ControllerService": server}))

    async def scenario() -> None:
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[controller_pb2.BrokerHeartbeatRequest]:
            while not stop.is_set():  # ControllerLink's generator, to the letter
                yield controller_pb2.BrokerHeartbeatRequest(broker_id=1)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.25)

        call = network.open_stream(
            "broker-1", "controller:9093", "ControllerService", "BrokerHeartbeatStream", requests()
        )
        await anext(aiter(call))  # the first heartbeat was answered
        client.powered_off = power_loss
        stop.set()  # as ControllerLink's `finally`: the generator's stop flag, then cancel
        call.cancel()
        await asyncio.sleep(1.0)
        seen.append(server.ended)

    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(scenario())
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    return seen[0]


def test_a_power_loss_leaves_the_stream_quiet_not_ended() -> None:
    assert not _run(power_loss=True)


def test_a_crash_ends_the_stream() -> None:
    assert _run(power_loss=False)
