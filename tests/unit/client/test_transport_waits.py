"""`await_unless_moved`: a stalled call is abandoned only once its leader moved."""

from __future__ import annotations

import asyncio

import pytest

from client.transport import LeaderMoved, await_unless_moved


async def test_a_prompt_answer_needs_no_metadata() -> None:
    refreshes: list[int] = []

    async def answer() -> str:
        return "ok"

    got = await await_unless_moved(
        answer(), expected_s=5, moved=lambda: True, refresh=lambda: refreshes.append(1)
    )
    assert got == "ok"
    assert refreshes == []


async def test_a_slow_answer_is_awaited_while_the_leader_stays() -> None:
    answered = asyncio.Event()
    refreshes: list[int] = []

    async def slow() -> str:
        await answered.wait()
        return "late"

    def refresh() -> None:
        refreshes.append(1)
        if len(refreshes) == 2:
            answered.set()

    got = await await_unless_moved(slow(), expected_s=0.01, moved=lambda: False, refresh=refresh)
    assert got == "late"
    assert len(refreshes) == 2


async def test_a_stalled_call_is_cancelled_once_the_leader_moved() -> None:
    cancelled = asyncio.Event()
    leader_moved = False

    async def stalled() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    def refresh() -> None:
        nonlocal leader_moved
        leader_moved = True  # the refresh shows a newer leader epoch

    with pytest.raises(LeaderMoved):
        await await_unless_moved(
            stalled(), expected_s=0.01, moved=lambda: leader_moved, refresh=refresh
        )
    assert cancelled.is_set()
