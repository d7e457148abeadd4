"""Clock port: the only place the broker reads time, so tests can pass a manual clock."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch (timestamps, retention)."""
        ...

    def monotonic_ms(self) -> int:
        """A monotonic millisecond counter (timeouts, lag)."""
        ...


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000
