"""Broker sessions: heartbeat deadlines computed from an injected clock (not journaled).

A broker's session is alive from its registration or any accepted heartbeat until
`session_timeout_ms` later. The controller fences brokers whose session expired and drops
the session of a fenced broker; a new controller starts every unfenced broker with a full
grace period (it cannot know when they last heartbeated).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def monotonic_ms(self) -> int: ...


class SystemClock:
    def __init__(self, monotonic_ns: Callable[[], int]) -> None:
        self._monotonic_ns = monotonic_ns

    def monotonic_ms(self) -> int:
        return self._monotonic_ns() // 1_000_000


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def monotonic_ms(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> None:
        assert delta_ms >= 0
        self.now_ms += delta_ms


class Liveness:
    """Session deadlines per broker id. Caller: the controller's request loop only."""

    def __init__(self, *, session_timeout_ms: int) -> None:
        self._session_timeout_ms = session_timeout_ms
        self._deadline_ms: dict[int, int] = {}

    def touch(self, broker_id: int, now_ms: int) -> bool:
        """Extend the session; True when the broker had no live session before."""
        was_alive = self.is_alive(broker_id, now_ms)
        self._deadline_ms[broker_id] = now_ms + self._session_timeout_ms
        return not was_alive

    def start_grace(self, broker_id: int, now_ms: int, *, extra_ms: int) -> None:
        """A new active controller's grace for a broker it cannot know the last heartbeat
        of: a full session plus `extra_ms`, the time a live broker may need to notice that
        a controller is back (its channel's reconnect back-off)."""
        self._deadline_ms[broker_id] = now_ms + self._session_timeout_ms + extra_ms

    def forget(self, broker_id: int) -> None:
        self._deadline_ms.pop(broker_id, None)

    def is_alive(self, broker_id: int, now_ms: int) -> bool:
        deadline_ms = self._deadline_ms.get(broker_id)
        return deadline_ms is not None and now_ms < deadline_ms

    def alive(self, now_ms: int) -> frozenset[int]:
        return frozenset(b for b, deadline in self._deadline_ms.items() if now_ms < deadline)

    def expired(self, now_ms: int) -> list[int]:
        """Brokers whose session has run out (still tracked until `forget`)."""
        return sorted(b for b, deadline in self._deadline_ms.items() if now_ms >= deadline)

    def next_deadline_ms(self) -> int | None:
        return min(self._deadline_ms.values(), default=None)
