"""Virtual time for the simulator: an asyncio event loop whose clock only moves when nothing
is ready to run, jumping straight to the next timer.

The production code runs unchanged on it: `asyncio.sleep`, `wait_for`, `timeout`,
`loop.time()` and the broker/controller `Clock` ports (`SimClock`, reading this loop's time)
all see virtual time, so a run of many simulated seconds takes milliseconds, and with no
real I/O and a FIFO ready queue the interleaving is a function of the seed alone.

`run_in_executor` (so `asyncio.to_thread`) runs the function at once on the loop's thread:
no real thread may decide an interleaving. A loop with nothing scheduled and nothing ready
is stuck (every simulated process waits on something that will never happen); `select`
raises `SimulationStuckError` then instead of blocking forever.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")

#: Virtual time one turn of the loop takes.
TURN_S = 1e-6
#: Turns of the loop at one virtual instant beyond which the run is a livelock.
SPINS_MAX = 200_000
#: Virtual wall clock at time 0 of every run (a fixed date: runs replay exactly).
WALL_EPOCH_MS = 1_800_000_000_000


class SimulationStuckError(RuntimeError):
    """Nothing is ready and no timer is scheduled: the simulation can never progress."""


class _VirtualSelector(selectors.DefaultSelector):
    """The loop's selector: never waits; a timeout means "advance virtual time"."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        loop = self.loop
        assert loop is not None
        loop.tick()
        if events or timeout == 0:
            return events
        if timeout is None:
            raise SimulationStuckError("no timer scheduled and nothing ready to run")
        loop.advance_to_next_timer(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time (seconds since the start of the run)."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_s = 0.0
        self._spins = 0
        #: Times the clock jumped (a measure of simulated work, reported as "events").
        self.jumps = 0
        self._after_turn: list[Callable[[], None]] = []

    def time(self) -> float:
        return self._virtual_s

    def after_turn(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the handles of this turn of the loop have run, within the
        turn: unlike `call_soon` it takes no turn of its own, so the clock does not tick
        for it and an observer (the simulation's invariant checks) leaves a run unchanged."""
        self._after_turn.append(callback)

    def _run_once(self) -> None:
        before = self.jumps
        super()._run_once()  # type: ignore[misc]
        while self._after_turn:
            callbacks, self._after_turn = self._after_turn, []
            for callback in callbacks:
                callback()
        if self.jumps != before:
            self._spins = 0
            return
        self._spins += 1
        if self._spins > SPINS_MAX:
            self._spins = 0
            ready = [_describe(handle) for handle in list(self._ready)[:5]]  # type: ignore[attr-defined]
            raise SimulationStuckError(
                f"livelock: {SPINS_MAX} turns of the loop at {self._virtual_s:.3f} s without "
                f"waiting for a timer (a retry loop without a pause?); ready: {ready}"
            )

    def tick(self) -> None:
        """Every turn of the loop costs a microsecond, as running code costs real time: a
        loop waiting for "the remaining 1e-17 s" (float rounding) then ends, as it does
        on a real clock."""
        self._virtual_s += TURN_S

    def advance_to_next_timer(self, timeout_s: float) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        target = self._virtual_s + timeout_s
        if scheduled:
            target = max(target, scheduled[0].when())
        self._virtual_s = target
        self.jumps += 1

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as error:  # delivered to the awaiting task, as a thread would
            future.set_exception(error)
        return future


def _describe(handle: asyncio.Handle) -> str:
    """A ready callback, with the stack of its task when it wakes one."""
    owner = getattr(getattr(handle, "_callback", None), "__self__", None)
    if isinstance(owner, asyncio.Task):
        frames = [
            f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
            for frame in owner.get_stack(limit=8)
        ]
        return f"{owner.get_name()} at {frames}"
    return repr(handle)


class SimClock:
    """The broker's and the controller's `Clock` port on the loop's virtual time."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop

    def monotonic_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def wall_ms(self) -> int:
        return WALL_EPOCH_MS + int(self._loop.time() * 1000)
