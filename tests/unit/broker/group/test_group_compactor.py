"""The append gate of `broker.group.compactor`: a compaction waits for the appends in
flight, and appends that arrive meanwhile wait for it."""

from __future__ import annotations

import asyncio

import pytest

from broker.group.compactor import AppendGate


async def test_a_compaction_waits_for_appends_in_flight_and_holds_new_ones() -> None:
    gate = AppendGate()
    order: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def append(name: str, hold: asyncio.Event | None = None) -> None:
        async with gate.append():
            order.append(f"{name} in")
            if hold is not None:
                first_in.set()
                await hold.wait()
            order.append(f"{name} out")

    async def compaction() -> None:
        async with gate.closed():
            order.append("compact in")
            await asyncio.sleep(0)  # appends that arrive now must still wait
            order.append("compact out")

    first = asyncio.create_task(append("a", release_first))
    await first_in.wait()
    compacting = asyncio.create_task(compaction())
    await asyncio.sleep(0)
    late = asyncio.create_task(append("b"))
    await asyncio.sleep(0)
    assert order == ["a in"], "the compaction and the late append wait for a"
    release_first.set()
    await asyncio.wait_for(asyncio.gather(first, compacting, late), timeout=5)
    assert order == ["a in", "a out", "compact in", "compact out", "b in", "b out"]


async def test_a_gate_reopens_when_a_compaction_fails() -> None:
    gate = AppendGate()

    async def failing() -> None:
        async with gate.closed():
            raise RuntimeError("snapshot refused")

    with pytest.raises(RuntimeError, match="refused"):
        await failing()
    async with asyncio.timeout(5), gate.append():
        pass
