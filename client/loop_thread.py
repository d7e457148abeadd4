"""A private event loop on a daemon thread, used by the synchronous client classes.

The sync `Producer`, `Consumer` and `Admin` build their asyncio twin on this loop and
call into it with `run(coro, timeout_s)`; one code path does batching, retries and
metadata for both APIs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from client.errors import IllegalStateError, KafkaTimeoutError

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class LoopThread:
    """`closed_error` builds the exception `run` raises once `stop` was called (the
    client was closed); by default an `IllegalStateError` naming the thread."""

    def __init__(self, name: str, closed_error: Callable[[], BaseException] | None = None) -> None:
        self.name = name
        self._closed_error = closed_error
        self._stopped = False
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (at most `timeout_s`)."""
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError("a blocking client call was made from the client's own loop")
        if self._stopped or self.loop.is_closed():
            coro.close()
            if self._closed_error is not None:
                raise self._closed_error()
            raise IllegalStateError(f"{self.name}: the client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        # Wait first, then take the result: the coroutine's own KafkaTimeoutError is also
        # a TimeoutError and must not be mistaken for ours.
        concurrent.futures.wait([future], timeout_s)
        if not future.done():
            future.cancel()
            raise KafkaTimeoutError(f"call did not finish within {timeout_s} s")
        return future.result()

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.loop.call_soon_threadsafe(callback)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopped = True
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
