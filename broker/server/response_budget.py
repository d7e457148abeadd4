"""ResponseBudget: bytes of fetch responses handed to gRPC but not yet sent, per connection and
in total, so that clients that never read cannot pin unbounded broker memory.

gRPC keeps a response in memory until the client's flow-control window lets it out, and
cancelling the handler does not free it (measured: only closing the connection does; the
broker's `--max-connection-age-ms` + grace does that). A fetch therefore takes its
response size from this budget and gives it back when the RPC ends (`add_done_callback`:
sent, failed, or the connection closed). A fetch that finds no room waits for some (up to
its `max_wait_ms`) and is answered without records if there is still none.

Accounting is plain arithmetic (no I/O); only `wait_for_room` awaits, on an event that
every `give_back` sets.
"""

from __future__ import annotations

import asyncio
import contextlib


class ResponseBudget:
    """Outstanding response bytes, broker-wide (`total_bytes`) and per connection."""

    def __init__(self, *, total_bytes: int, per_connection_bytes: int) -> None:
        if total_bytes < 1 or per_connection_bytes < 1:
            raise ValueError("response budgets must be at least one byte")
        self.total_bytes = total_bytes
        self.per_connection_bytes = per_connection_bytes
        self.outstanding_bytes = 0
        self._by_connection: dict[str, int] = {}
        self._freed = asyncio.Event()

    def room(self, connection: str) -> int:
        """Bytes a new response on `connection` may still take (0 when full)."""
        used = self._by_connection.get(connection, 0)
        return max(
            0,
            min(
                self.total_bytes - self.outstanding_bytes,
                self.per_connection_bytes - used,
            ),
        )

    def take(self, connection: str, size_bytes: int) -> None:
        """Account a response of `size_bytes` (the caller checked `room`)."""
        if size_bytes <= 0:
            return
        self.outstanding_bytes += size_bytes
        self._by_connection[connection] = self._by_connection.get(connection, 0) + size_bytes

    def give_back(self, connection: str, size_bytes: int) -> None:
        """The response ended (sent, failed or its connection closed): free its bytes."""
        if size_bytes <= 0:
            return
        self.outstanding_bytes -= size_bytes
        left = self._by_connection.get(connection, 0) - size_bytes
        if left > 0:
            self._by_connection[connection] = left
        else:
            self._by_connection.pop(connection, None)
        self._freed.set()

    async def wait_for_room(self, connection: str, timeout_s: float) -> int:
        """Wait (at most `timeout_s`) until `connection` has room; returns the room."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            self._freed.clear()  # before the check: a give_back after it wakes us
            room = self.room(connection)
            remaining = deadline - loop.time()
            if room > 0 or remaining <= 0:
                return room
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), remaining)
