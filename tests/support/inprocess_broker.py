"""A real standalone broker running in this test process (its own thread and event loop),
bound to 127.0.0.1 on a free port: for tests that call it many times (fuzzing) or need to
look inside it (its response budget, its logs)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from broker.app import Broker
from broker.config import BrokerConfig
from broker.server.response_budget import ResponseBudget
from minikafka_cli import standalone_admin
from tests.support.processes import free_port

START_TIMEOUT_S = 30.0


class InProcessBroker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker = Broker(
            config, standalone_admin=standalone_admin.build if config.standalone else None
        )
        self.address = config.listen
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="inprocess-broker", daemon=True)
        self._ready = threading.Event()
        self.error: BaseException | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            ready = asyncio.Event()
            serving = asyncio.create_task(self.broker.serve(ready=ready))
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait({serving, waiter}, return_when=asyncio.FIRST_COMPLETED)
            self._ready.set()
            await serving

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the test by stop()
            self.error = exc
        finally:
            self._ready.set()

    def start(self) -> InProcessBroker:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise TimeoutError("the in-process broker did not start")
        if self.error is not None:
            raise RuntimeError("the in-process broker failed to start") from self.error
        return self

    def broker_budget(self) -> ResponseBudget:
        return self.broker.response_budget

    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def stop(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.broker.stop)
        self._thread.join(START_TIMEOUT_S)
        if self.error is not None:
            raise RuntimeError("the in-process broker failed") from self.error


@contextmanager
def inprocess_broker(data_dir: Path, **settings: object) -> Iterator[InProcessBroker]:
    """A standalone broker on 127.0.0.1 with `settings` over the defaults (stopped after)."""
    config = BrokerConfig(
        broker_id=1,
        listen=f"127.0.0.1:{free_port()}",
        data_dir=str(data_dir),
        standalone=True,
        use_uvloop=False,
    )
    config = msgspec.structs.replace(config, **settings)
    broker = InProcessBroker(config).start()
    try:
        yield broker
    finally:
        broker.stop()
