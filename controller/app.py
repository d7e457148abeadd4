"""Composition root of the controller process: journal, engine, gRPC server, timers, metrics.

`ControllerApp` (an async context manager) starts everything inside one `asyncio.TaskGroup`
and stops it in order: health NOT_SERVING, gRPC server (with a grace period), metrics
endpoint, background tasks, broker channels, journal. `serve` runs it until cancelled;
`run` adds uvloop and SIGTERM/SIGINT handling (both graceful).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from controller.config import ControllerConfig, split_host_port
from controller.engine import ControllerEngine
from controller.journal import Journal
from controller.liveness import Clock, SystemClock
from controller.metrics import ControllerMetrics, start_metrics_server
from controller.server import ControllerServicer
from minikafka.v1 import controller_pb2, controller_pb2_grpc

logger = logging.getLogger(__name__)

SERVER_STOP_GRACE_S: Final = 1.0
SERVICE_NAME: Final = controller_pb2.DESCRIPTOR.services_by_name["ControllerService"].full_name


def new_cluster_id() -> str:
    """A random 22-character URL-safe id, like Kafka's."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


class ControllerApp:
    """A running controller; `address` is the bound HOST:PORT (useful with port 0)."""

    def __init__(self, config: ControllerConfig, *, clock: Clock | None = None) -> None:
        config.validate()
        self.config = config
        self._clock = clock if clock is not None else SystemClock(time.monotonic_ns)
        self.metrics = ControllerMetrics()
        self.address = ""
        self.metrics_address: str | None = None
        self._engine: ControllerEngine | None = None
        self._main: asyncio.Task[None] | None = None

    @property
    def engine(self) -> ControllerEngine:
        assert self._engine is not None, "controller not started"
        return self._engine

    async def __aenter__(self) -> ControllerApp:
        """Start in a background task; return once listening (or raise why it could not)."""
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        self._main = asyncio.create_task(self._run(started), name="controller")
        await asyncio.wait({self._main, started}, return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            try:
                await self._main  # raises the start-up error
            except BaseExceptionGroup as group:
                if len(group.exceptions) == 1:
                    raise group.exceptions[0] from None
                raise
            raise RuntimeError("controller stopped during start-up")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._main is not None
        self._main.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._main

    async def wait(self) -> None:
        """Until the controller stops (it only stops on its own after a fatal error)."""
        assert self._main is not None
        await asyncio.shield(self._main)

    async def _run(self, started: asyncio.Future[None]) -> None:
        async with self._running():
            started.set_result(None)
            await self.engine.fatal  # until cancelled, or a journal write failed

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        config = self.config
        journal, state = await asyncio.to_thread(Journal.open, Path(config.data_dir))
        try:
            async with asyncio.TaskGroup() as task_group:
                engine = ControllerEngine(
                    config=config,
                    journal=journal,
                    state=state,
                    clock=self._clock,
                    metrics=self.metrics,
                    task_group=task_group,
                )
                self._engine = engine
                await engine.start(new_cluster_id=config.cluster_id or new_cluster_id())
                server, health = await self._start_grpc(engine)
                metrics_server = await self._start_metrics()
                background = [task_group.create_task(engine.run_session_timer())]
                if config.auto_leader_rebalance_enable:
                    background.append(task_group.create_task(engine.run_rebalance_timer()))
                try:
                    yield
                finally:
                    await health.enter_graceful_shutdown()
                    await server.stop(SERVER_STOP_GRACE_S)
                    if metrics_server is not None:
                        metrics_server.close()
                        await metrics_server.wait_closed()
                    for task in background:
                        task.cancel()
                    await engine.close()  # also cancels the dispatcher's workers
        finally:
            journal.close()
            logger.info("controller %d stopped", config.node_id)

    async def _start_grpc(
        self, engine: ControllerEngine
    ) -> tuple[grpc.aio.Server, health_aio.HealthServicer]:
        config = self.config
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_send_message_length", config.grpc_max_message_bytes),
                ("grpc.max_receive_message_length", config.grpc_max_message_bytes),
            ]
        )
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(
            ControllerServicer(
                engine,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                session_timeout_ms=config.session_timeout_ms,
            ),
            server,
        )
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        host, port = split_host_port(config.listen)
        try:
            bound_port = server.add_insecure_port(f"{_bracket(host)}:{port}")
        except RuntimeError:  # grpc reports a failed bind this way (its text is noise)
            raise OSError(
                f"cannot listen on {config.listen}: the address is in use or not available"
            ) from None
        if bound_port == 0:
            raise OSError(
                f"cannot listen on {config.listen}: the address is in use or not available"
            )
        await server.start()
        for service in ("", SERVICE_NAME):
            await health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self.address = f"{_bracket(host)}:{bound_port}"
        logger.info("controller %d listening on %s", config.node_id, self.address)
        return server, health

    async def _start_metrics(self) -> asyncio.Server | None:
        if self.config.metrics_listen is None:
            return None
        host, port = split_host_port(self.config.metrics_listen)
        metrics_server = await start_metrics_server(self.metrics.registry, host, port)
        bound = metrics_server.sockets[0].getsockname()
        self.metrics_address = f"{_bracket(host)}:{bound[1]}"
        logger.info("controller metrics on http://%s/metrics", self.metrics_address)
        return metrics_server


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve(config: ControllerConfig, *, ready: asyncio.Event | None = None) -> None:
    """Run the controller until cancelled; set `ready` once it is listening."""
    async with ControllerApp(config) as app:
        if ready is not None:
            ready.set()
        await app.wait()


def run(config: ControllerConfig) -> None:
    """Process entry point: uvloop, `serve`, SIGTERM/SIGINT stop it gracefully."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        import uvloop

        uvloop.run(_until_signal(serve(config)))
    except ImportError:  # pragma: no cover - uvloop is absent on Windows only
        asyncio.run(_until_signal(serve(config)))


async def _until_signal(main: Coroutine[Any, Any, None]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    main_task = asyncio.ensure_future(main)
    stop_task = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({main_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_task.cancel()
        if not main_task.done():
            logger.info("signal received: stopping the controller")
            main_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await main_task
