"""The simulated network's slowed answers (`Network.slow_answers`, used by the nemesis's
`slow-rival`): until a virtual time, the answers on one directed link arrive a fixed
delay late; the requests on that link, the answers on the reverse link, and every answer
after that time are not slowed, and nothing draws from the run's generator."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

from minikafka.v1 import controller_pb2
from tests.sim.replication.network import Network, SimContext
from tests.sim.replication.vloop import VirtualTimeLoop

Message = controller_pb2.BrokerHeartbeatRequest


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


class _Echo:
    """Answers at once and records when each request arrived (virtual ms)."""

    def __init__(self) -> None:
        self.arrived_ms: list[int] = []

    async def Echo(self, request: Message, context: SimContext) -> Message:
        self.arrived_ms.append(round(asyncio.get_running_loop().time() * 1000))
        return Message(broker_id=request.broker_id)


def _timings() -> tuple[list[tuple[int, int]], list[int], list[int], int]:
    """(sent, answered) ms of calls a -> b during and after the slowing, the ms at which
    b's and a's echo saw their requests, and the generator's next draw."""
    rng = random.Random(7)
    network = Network(rng, drop_rate=0.0, duplicate_rate=0.0, max_delay_ms=0)
    echo_a, echo_b = _Echo(), _Echo()
    network.add("a:1", _Host("a", {"S": echo_a}))
    network.add("b:1", _Host("b", {"S": echo_b}))
    calls: list[tuple[int, int]] = []

    async def call(source: str, address: str) -> None:
        loop = asyncio.get_running_loop()
        sent = round(loop.time() * 1000)
        answer = await network.unary(source, address, "S", "Echo", Message(broker_id=1), 5.0)
        assert isinstance(answer, Message)
        assert answer.broker_id == 1
        if source == "a":
            calls.append((sent, round(loop.time() * 1000)))

    async def scenario() -> None:
        # b's answers to a are 300 ms late until t = 1 s.
        network.slow_answers("b", "a", 0.3, 1.0)
        await call("a", "b:1")  # t = 0: answered at 300
        await call("b", "a:1")  # the reverse link: not slowed (t = 300)
        await call("a", "b:1")  # t = 300: answered at 600
        await asyncio.sleep(0.5)
        await call("a", "b:1")  # t = 1100: after the slowing, at once

    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    return calls, echo_b.arrived_ms, echo_a.arrived_ms, rng.getrandbits(32)


def test_answers_on_a_slowed_link_arrive_late_until_the_slowing_ends() -> None:
    calls, arrived_at_b, arrived_at_a, _ = _timings()
    assert calls == [(0, 300), (300, 600), (1100, 1100)]
    assert arrived_at_b == [0, 300, 1100]  # the requests are not slowed
    assert arrived_at_a == [300]  # nor the reverse link's answer (the call took 0 ms)


def test_the_slowing_draws_nothing_from_the_generator() -> None:
    """The same calls without the slowing draw the same numbers: the default seeds, which
    never slow a link, run as before."""
    rng = random.Random(7)
    network = Network(rng, drop_rate=0.0, duplicate_rate=0.0, max_delay_ms=0)
    network.add("a:1", _Host("a", {"S": _Echo()}))
    network.add("b:1", _Host("b", {"S": _Echo()}))

    async def scenario() -> None:
        for source, address in (("a", "b:1"), ("b", "a:1"), ("a", "b:1"), ("a", "b:1")):
            await network.unary(source, address, "S", "Echo", Message(broker_id=1), 5.0)

    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert _timings()[3] == rng.getrandbits(32)
