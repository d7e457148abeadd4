"""Composition root of the controller process: data directory, metadata quorum, engine, gRPC
server (ControllerService, RaftService, health), metrics.

Start-up, in order: the gRPC server listens (health NOT_SERVING; other controllers may
already ask `DescribeQuorum`), the data directory is prepared (`metadata_dir`: converted
from a single-controller journal, or formatted once a majority of voters has answered),
the Raft loop starts, and health turns SERVING: at once for a standby of a larger quorum,
once active for a quorum of one (it elects itself in a moment).

`ControllerApp` (an async context manager) runs everything inside one `asyncio.TaskGroup`
and stops it in order: health NOT_SERVING, a graceful resign of the Raft leader (the
others elect a successor without waiting for a timeout), engine duties, gRPC server (with a
grace period), metrics endpoint, Raft loop, peer channels, storage. `serve` runs it until
cancelled; `run` adds uvloop and SIGTERM/SIGINT handling (both graceful). A storage error
in the Raft loop stops the controller (the error propagates).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
import signal
import time
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from controller import codec
from controller.config import ControllerConfig, split_host_port
from controller.engine import ControllerEngine
from controller.liveness import Clock, SystemClock
from controller.metadata_dir import (
    Decision,
    MetadataDirError,
    PeerAnswer,
    convert_journal,
    finish_or_clean_conversion,
    format_decision,
    format_directory,
    has_journal,
    is_formatted,
    open_storage,
    start_problem,
)
from controller.metrics import ControllerMetrics
from controller.quorum import MetadataQuorum
from controller.raft.config import RaftConfig
from controller.raft.file_storage import FileRaftStorage
from controller.raft_transport import CHANNEL_OPTIONS, RaftServicer, RaftTransport
from controller.server import ControllerServicer
from minikafka.acl import AclError, parse_super_users
from minikafka.authorization import refusal
from minikafka.config import ConfigError
from minikafka.grpc_auth import AuthGuard
from minikafka.grpc_options import server_options
from minikafka.metrics_http import MetricsServer, serve_metrics
from minikafka.principal import MappingRuleError, parse_rules
from minikafka.tls import TlsMaterial, bind, load_tls, open_channel
from minikafka.v1 import (
    controller_pb2,
    controller_pb2_grpc,
    raft_pb2,
    raft_pb2_grpc,
)

logger = logging.getLogger(__name__)

SERVER_STOP_GRACE_S: Final = 1.0
SERVICE_NAME: Final = controller_pb2.DESCRIPTOR.services_by_name["ControllerService"].full_name
#: How often a new directory asks the other voters again while it waits to format.
FORMAT_PROBE_INTERVAL_S: Final = 0.5
PROBE_TIMEOUT_S: Final = 1.0
#: How long a resigning leader gives its EndQuorumEpoch messages to leave.
RESIGN_FLUSH_S: Final = 0.3


def new_cluster_id() -> str:
    """A random 22-character URL-safe id, like Kafka's."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def raft_config(config: ControllerConfig, *, cluster_id: str) -> RaftConfig:
    """The Raft timing derived from the two quorum timeouts (all in ms)."""
    fetch_timeout = config.quorum_fetch_timeout_ms
    fetch_max_wait = min(200, fetch_timeout // 2)
    return RaftConfig(
        node_id=config.node_id,
        voters=tuple(sorted(config.voters())),
        cluster_id=cluster_id,
        election_timeout_ms=config.quorum_election_timeout_ms,
        fetch_timeout_ms=fetch_timeout,
        check_quorum_timeout_ms=fetch_timeout * 3 // 2,
        fetch_max_wait_ms=fetch_max_wait,
        request_timeout_ms=fetch_max_wait * 2,
        begin_quorum_retry_ms=fetch_max_wait,
    )


class ControllerApp:
    """A running controller; `address` is the bound HOST:PORT (useful with port 0)."""

    def __init__(self, config: ControllerConfig, *, clock: Clock | None = None) -> None:
        config.validate()
        self.config = config
        #: Broker sessions run on this clock (tests inject a manual one); Raft on real time.
        self._clock = clock if clock is not None else SystemClock(time.monotonic_ns)
        self.metrics = ControllerMetrics()
        self.address = ""
        self.metrics_address: str | None = None
        self._engine: ControllerEngine | None = None
        self.quorum: MetadataQuorum | None = None
        self._main: asyncio.Task[None] | None = None
        self._voters = config.voters()
        self._tls = load_tls(config.tls_cert, config.tls_key, config.tls_ca)
        try:
            self._rules = parse_rules(config.ssl_principal_mapping_rules)
            self._super_users = parse_super_users(config.super_users)
        except (MappingRuleError, AclError) as exc:
            raise ConfigError(str(exc)) from None

    @property
    def engine(self) -> ControllerEngine:
        assert self._engine is not None, "controller not started"
        return self._engine

    async def __aenter__(self) -> ControllerApp:
        """Start in a background task; return once listening (a quorum of one: once active),
        or raise why it could not start."""
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        self._main = asyncio.create_task(self._run(started), name="controller")
        try:
            await asyncio.wait({self._main, started}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await self.__aexit__()  # stopped while starting: stop in order
            raise
        if not started.done():
            await self._main  # raises the start-up error
            raise RuntimeError("controller stopped during start-up")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._main is not None
        if self._main.done():
            if not self._main.cancelled():
                self._main.exception()  # it stopped on its own: `wait()` raised the error
            return
        self._main.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._main

    async def wait(self) -> None:
        """Until the controller stops (it only stops on its own after a fatal error)."""
        assert self._main is not None
        await asyncio.shield(self._main)

    async def _run(self, started: asyncio.Future[None]) -> None:
        try:
            async with asyncio.TaskGroup() as task_group:
                await self._serve(task_group, started)
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:  # the reason it stopped, not a group of one
                raise group.exceptions[0] from None
            raise

    async def _serve(self, task_group: asyncio.TaskGroup, started: asyncio.Future[None]) -> None:
        config = self.config
        lone = len(self._voters) == 1
        storage: FileRaftStorage | None = None
        if lone:  # nobody to ask: the directory is ready before anything listens
            storage, cluster_id = await self._prepare_storage()
        try:
            server, health = await self._start_grpc()
        except BaseException:
            if storage is not None:
                storage.close()
            raise
        metrics_server: MetricsServer | None = None
        transport: RaftTransport | None = None
        loop_task: asyncio.Task[None] | None = None
        try:
            metrics_server = await asyncio.to_thread(self._start_metrics)
            if not lone:
                started.set_result(None)  # listening: peers may ask DescribeQuorum now
                storage, cluster_id = await self._prepare_storage()
            assert storage is not None
            peers = {
                node_id: address
                for node_id, address in self._voters.items()
                if node_id != config.node_id
            }
            rconfig = raft_config(config, cluster_id=cluster_id)
            transport = RaftTransport(
                peers=peers, send_timeout_ms=rconfig.request_timeout_ms, tls=self._tls
            )
            quorum = MetadataQuorum(
                config=rconfig,
                storage=storage,
                transport=transport,
                metrics=self.metrics,
                snapshot_every_records=config.snapshot_every_records,
                monotonic_ms=lambda: time.monotonic_ns() // 1_000_000,
                wall_ms=lambda: time.time_ns() // 1_000_000,
                rng=random.Random(),
            )
            engine = ControllerEngine(
                config=config,
                quorum=quorum,
                cluster_id=cluster_id,
                clock=self._clock,
                metrics=self.metrics,
                task_group=task_group,
                tls=self._tls,
            )
            self.quorum = quorum
            self._engine = engine
            task_group.create_task(transport.run(), name="raft-transport")
            loop_task = task_group.create_task(quorum.run(), name="raft")
            if lone:
                await _first_of(engine.activated.wait(), loop_task)
            for service in ("", SERVICE_NAME):
                await health.set(service, health_pb2.HealthCheckResponse.SERVING)
            if not started.done():
                started.set_result(None)
            # Until cancelled; a failing Raft loop cancels this too (the task group).
            await asyncio.Event().wait()
        finally:
            await health.enter_graceful_shutdown()
            if (
                self.quorum is not None
                and loop_task is not None
                and not loop_task.done()
                and len(self._voters) > 1
            ):
                await self._resign(self.quorum, transport)
            if self._engine is not None:
                await self._engine.close()
            await server.stop(SERVER_STOP_GRACE_S)
            if metrics_server is not None:
                await asyncio.to_thread(metrics_server.close)
            if loop_task is not None:
                loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop_task
            if transport is not None:
                await transport.close()
            if storage is not None:
                storage.close()
            logger.info("controller %d stopped", config.node_id)

    async def _resign(self, quorum: MetadataQuorum, transport: RaftTransport | None) -> None:
        """Hand leadership over before stopping (bounded)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RESIGN_FLUSH_S):
                await quorum.resign()
                if transport is not None:
                    await transport.flush()

    # ---- the data directory -----------------------------------------------------------------

    async def _prepare_storage(self) -> tuple[FileRaftStorage, str]:
        config = self.config
        data_dir = Path(config.data_dir)
        await asyncio.to_thread(finish_or_clean_conversion, data_dir)
        problem = start_problem(
            data_dir, voter_count=len(self._voters), cluster_id=config.cluster_id
        )
        if problem is not None:
            raise MetadataDirError(problem)
        if not is_formatted(data_dir):
            if has_journal(data_dir):
                await asyncio.to_thread(
                    convert_journal, data_dir, configured_cluster_id=config.cluster_id
                )
            else:
                await self._format(data_dir)
        storage = await asyncio.to_thread(open_storage, data_dir, cluster_id=config.cluster_id)
        return storage, storage.cluster_id

    async def _format(self, data_dir: Path) -> None:
        config = self.config
        if len(self._voters) == 1:
            cluster_id = config.cluster_id or new_cluster_id()
            await asyncio.to_thread(
                format_directory, data_dir, cluster_id=cluster_id, can_vote=True
            )
            return
        assert config.cluster_id is not None  # start_problem
        last_reason = ""
        while True:
            answers = await self._probe_peers()
            decision = format_decision(
                cluster_id=config.cluster_id, voter_count=len(self._voters), answers=answers
            )
            if decision.decision is Decision.REFUSE:
                raise MetadataDirError(f"refusing to format {data_dir}: {decision.reason}")
            if decision.decision is not Decision.WAIT:
                logger.info("formatting %s: %s", data_dir, decision.reason)
                await asyncio.to_thread(
                    format_directory,
                    data_dir,
                    cluster_id=config.cluster_id,
                    can_vote=decision.decision is Decision.NEW_CLUSTER,
                )
                return
            if decision.reason != last_reason:
                logger.info("waiting to format %s: %s", data_dir, decision.reason)
                last_reason = decision.reason
            await asyncio.sleep(FORMAT_PROBE_INTERVAL_S)

    async def _probe_peers(self) -> list[PeerAnswer]:
        peers = [
            (node_id, address)
            for node_id, address in sorted(self._voters.items())
            if node_id != self.config.node_id
        ]
        answers = await asyncio.gather(
            *(_probe(node_id, address, self._tls) for node_id, address in peers)
        )
        return [answer for answer in answers if answer is not None]

    # ---- servers ----------------------------------------------------------------------------

    def _describe_quorum(self) -> raft_pb2.DescribeQuorumResponse:
        voters = dict(self._voters)
        if len(voters) == 1 and self.address:
            voters = {self.config.node_id: self.address}
        quorum = self.quorum
        if quorum is None:
            return codec.unformatted_quorum_response(
                node_id=self.config.node_id,
                cluster_id=self.config.cluster_id or "",
                voters=voters,
                now_ms=time.time_ns() // 1_000_000,
            )
        engine = self._engine
        return codec.describe_quorum_response(
            quorum.view(), voters=voters, active=engine is not None and engine.is_active
        )

    async def _start_grpc(self) -> tuple[grpc.aio.Server, health_aio.HealthServicer]:
        config = self.config
        server = grpc.aio.server(
            options=server_options(max_message_bytes=config.grpc_max_message_bytes),
            # Under TLS every caller is named (an unmapped certificate subject is refused);
            # with the authorizer every call is checked against the committed ACLs.
            interceptors=[AuthGuard(self._rules, self._authorize if config.authorizer else None)]
            if self._tls is not None or config.authorizer
            else None,
        )
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(
            ControllerServicer(
                lambda: self._engine,
                describe_quorum=self._describe_quorum,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                session_timeout_ms=config.session_timeout_ms,
            ),
            server,
        )
        raft_pb2_grpc.add_RaftServiceServicer_to_server(
            RaftServicer(lambda message: self.quorum is not None and self.quorum.deliver(message)),
            server,
        )
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        for service in ("", SERVICE_NAME):
            await health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        host, port = split_host_port(config.listen)
        try:
            bound_port = bind(
                server, f"{_bracket(host)}:{port}", self._tls, require_client_cert=True
            )
        except RuntimeError:  # grpc reports a failed bind this way (its text is noise)
            raise OSError(
                f"cannot listen on {config.listen}: the address is in use or not available"
            ) from None
        if bound_port == 0:
            raise OSError(
                f"cannot listen on {config.listen}: the address is in use or not available"
            )
        await server.start()
        self.address = f"{_bracket(host)}:{bound_port}"
        logger.info("controller %d listening on %s", config.node_id, self.address)
        return server, health

    def _authorize(
        self, principal: str, method: str, request: object
    ) -> tuple[grpc.StatusCode, str] | None:
        """The authorizer's answer from the ACLs this controller has applied (none before
        its metadata is loaded: only super users get in)."""
        engine = self._engine
        return refusal(
            method,
            request,
            principal=principal,
            acls=engine.state.acls if engine is not None else (),
            super_users=self._super_users,
        )

    def _start_metrics(self) -> MetricsServer | None:
        """prometheus_client's HTTP server (a thread) on --metrics-listen."""
        if self.config.metrics_listen is None:
            return None
        host, port = split_host_port(self.config.metrics_listen)
        try:
            metrics_server = serve_metrics(self.metrics.registry, host, port)
        except OSError as exc:
            raise OSError(
                f"cannot serve metrics on {self.config.metrics_listen}: {exc.strerror or exc}"
            ) from None
        self.metrics_address = metrics_server.address
        logger.info("controller metrics on http://%s/metrics", self.metrics_address)
        return metrics_server


async def _probe(node_id: int, address: str, tls: TlsMaterial | None) -> PeerAnswer | None:
    """What voter `node_id` says about itself (None: no answer)."""
    try:
        async with open_channel(address, CHANNEL_OPTIONS, tls) as channel:
            stub = controller_pb2_grpc.ControllerServiceStub(channel)
            reply = await stub.DescribeQuorum(
                raft_pb2.DescribeQuorumRequest(), timeout=PROBE_TIMEOUT_S
            )
    except grpc.aio.AioRpcError:
        return None
    if reply.node_id != node_id:
        logger.warning(
            "the quorum names %s as controller %d, but controller %d answers there",
            address,
            node_id,
            reply.node_id,
        )
        return None
    return PeerAnswer(
        node_id=node_id,
        cluster_id=reply.cluster_id,
        formatted=reply.formatted,
        epoch=reply.leader_epoch,
        log_end_offset=reply.log_end_offset,
        can_vote=reply.can_vote,
    )


async def _first_of(waiting: Coroutine[Any, Any, Any], failing: asyncio.Task[None]) -> None:
    """Wait for `waiting`, or until `failing` ends (its task group then cancels us)."""
    waiter = asyncio.ensure_future(waiting)
    try:
        await asyncio.wait({waiter, failing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


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
