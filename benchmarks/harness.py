"""Running one measurement: a fresh spawned worker process, timed runs with CPU accounting."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, ParamSpec, TypeVar

from benchmarks import procstat
from benchmarks.stats import Run

P = ParamSpec("P")
T = TypeVar("T")

#: Name under which the measuring (client) process itself is accounted.
CLIENT = "client"


def in_worker(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `fn(*args)` in a fresh `spawn`ed process (never fork after importing grpc)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop (what the brokers use too)."""
    import uvloop

    return uvloop.run(main)


async def measure(pids: dict[str, int], body: Callable[[], Awaitable[tuple[int, int]]]) -> Run:
    """Time `body` (which returns records, payload bytes) and the CPU every process spent."""
    watched = {CLIENT: os.getpid(), **pids}
    before = procstat.sample(watched)
    start = time.perf_counter()
    records, payload = await body()
    seconds = time.perf_counter() - start
    cpu = procstat.delta(before, procstat.sample(watched))
    return Run(
        records=records,
        payload_bytes=payload,
        seconds=round(seconds, 4),
        cpu_s={k: round(v, 3) for k, v in cpu.items()},
    )


async def warm_and_measure(
    pids: dict[str, int], runs: int, body: Callable[[], Awaitable[tuple[int, int]]]
) -> list[Run]:
    """One unmeasured warm-up, then `runs` measured runs."""
    await body()
    return [await measure(pids, body) for _ in range(runs)]


def deadline_after(seconds: float) -> float:
    return time.perf_counter() + seconds


async def until(deadline: float) -> bool:
    """True while before `deadline`; yields to the loop once."""
    await asyncio.sleep(0)
    return time.perf_counter() < deadline
