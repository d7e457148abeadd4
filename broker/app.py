"""Broker composition root: builds storage, replica manager, servicers and the gRPC server,
owns the background tasks (one TaskGroup) and the shutdown order.

Shutdown (SIGTERM/SIGINT): stop accepting requests, finish in-flight ones within a grace
period, then flush every log, write checkpoints and the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path

import grpc
import msgspec
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from broker.clock import Clock, SystemClock
from broker.config import BrokerConfig
from broker.controller_link import ControllerForwarder, ControllerLink
from broker.group.coordinator import GroupCoordinator, OffsetsTopicSettings
from broker.group.model import GroupConfig
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.metadata_cache import BrokerInfo, MetadataCache
from broker.replica.fetcher import FetcherManager, FetcherSettings
from broker.replica.isr_reporter import IsrReporter
from broker.replica.leader_endpoint import GrpcLeaderEndpoint, LeaderEndpoint
from broker.replica.manager import ReplicaManager
from broker.replica.partition import Role
from broker.replica.state import LeaderState
from broker.replica.transitions import check_replica_fetch_epoch
from broker.server.broker_servicer import AdminBackend, BrokerServicer, ReplicaServicer
from broker.server.control_servicer import ControlServicer
from broker.server.metrics import BrokerMetrics, PartitionGaugeSource, PartitionRow
from broker.server.response_budget import ResponseBudget
from broker.standalone import StandaloneAdminFactory, StandaloneStore
from minikafka import grpc_options
from minikafka.acl import AclError, parse_super_users
from minikafka.allocator import tune_for_large_buffers
from minikafka.authorization import refusal
from minikafka.config import ConfigError, parse_host_port
from minikafka.errors import ErrorCode
from minikafka.grpc_auth import AuthGuard, Authorize
from minikafka.grpc_guard import DecodeGuard
from minikafka.metrics_http import MetricsServer, serve_metrics
from minikafka.principal import MappingRuleError, Rule, parse_rules
from minikafka.tls import TlsMaterial, load_tls
from minikafka.tls import bind as tls_bind
from minikafka.v1 import broker_pb2_grpc, common_pb2

logger = logging.getLogger(__name__)


def server_options(config: BrokerConfig) -> list[tuple[str, int]]:
    """gRPC server options: message size, per-connection stream limit, keepalive and
    connection age (README "Limits"). A response a client never reads stays in gRPC's
    memory until its connection closes (cancelling the handler does not free it), so
    connections are closed at `max_connection_age_ms` (+ the grace for in-flight calls)."""
    options = [
        *grpc_options.server_options(),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        # Clients may ping as often as every 10 s without being told to go away.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
    ]
    if config.keepalive_time_ms > 0:
        options.append(("grpc.keepalive_time_ms", config.keepalive_time_ms))
    if config.max_connection_age_ms > 0:
        options.append(("grpc.max_connection_age_ms", config.max_connection_age_ms))
        options.append(("grpc.max_connection_age_grace_ms", config.max_connection_age_grace_ms))
    return options


def new_server(
    config: BrokerConfig,
    security: BrokerSecurity | None = None,
    authorize: Authorize | None = None,
) -> grpc.aio.Server:
    """A gRPC server with `server_options` that answers undecodable requests with
    INVALID_ARGUMENT (`minikafka.grpc_guard`) and, under TLS, names (and refuses unmapped)
    callers (`minikafka.grpc_auth`)."""
    interceptors: list[grpc.aio.ServerInterceptor] = [DecodeGuard()]
    if security is not None:
        interceptors.append(AuthGuard(security.rules, authorize))
    return grpc.aio.server(options=server_options(config), interceptors=interceptors)


class BrokerSecurity(msgspec.Struct, frozen=True, kw_only=True):
    """The broker's TLS material (None: plaintext), principal mapping rules and ACL
    enforcement (TLS or the authorizer on)."""

    tls: TlsMaterial | None
    rules: tuple[Rule, ...]
    authorizer: bool
    super_users: frozenset[str]


def load_security(config: BrokerConfig) -> BrokerSecurity | None:
    """`BrokerSecurity` from the config, None without TLS and authorizer (plaintext, no
    interceptor: exactly as before); ConfigError when invalid."""
    tls = load_tls(config.tls_cert, config.tls_key, config.tls_ca)
    if tls is None and not config.authorizer:
        return None
    try:
        rules = parse_rules(config.ssl_principal_mapping_rules)
        super_users = parse_super_users(config.super_users)
    except (MappingRuleError, AclError) as exc:
        raise ConfigError(str(exc)) from None
    return BrokerSecurity(
        tls=tls, rules=rules, authorizer=config.authorizer, super_users=super_users
    )


SHUTDOWN_GRACE_S = 5.0
CONTROLLED_SHUTDOWN_TIMEOUT_S = 10.0


def _default_log_config(config: BrokerConfig) -> LogConfig:
    return LogConfig(
        segment_bytes=config.log_segment_bytes,
        retention_ms=config.log_retention_ms,
        retention_bytes=config.log_retention_bytes,
        max_message_bytes=config.message_max_bytes,
    )


class Broker:
    """One broker process. `serve()` runs until `stop()` or cancellation."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        clock: Clock | None = None,
        standalone_admin: StandaloneAdminFactory | None = None,
    ) -> None:
        if not config.standalone and not config.controller:
            raise ValueError("a broker needs --controller HOST:PORT, or --standalone")
        if config.standalone and standalone_admin is None:
            raise ValueError(
                "a standalone broker needs its admin backend (the composition root passes "
                "minikafka_cli.standalone_admin.build)"
            )
        self._standalone_admin = standalone_admin
        self.config = config
        self.clock = clock or SystemClock()
        self.metadata = MetadataCache()
        self.metrics = BrokerMetrics()
        self._stopping = asyncio.Event()
        self.bound_port = 0
        self.logs: LogManager | None = None
        self.link: ControllerLink | None = None
        self.fetchers: FetcherManager | None = None
        self.metrics_server: MetricsServer | None = None
        self.security = load_security(config)  # ConfigError before anything is opened

    def _replica_fetch_refusal(
        self, broker_id: int, broker_epoch: int
    ) -> tuple[ErrorCode, str] | None:
        """Why a replica fetch is refused as a whole, or None to serve it.

        Nothing is served before this broker has registered with the controller (it
        cannot be a legitimate leader yet). The follower must be registered, and not an
        older incarnation than the metadata shows (zombie fencing). A newer epoch than the
        metadata shows is served (the metadata is behind), but that incarnation is
        ISR-eligible only once the metadata shows it (`isr.is_isr_eligible`)."""
        link = self.link
        unsafe = self.config.unsafe_test_control_before_registration  # test-only: hole 2
        if link is not None and link.broker_epoch < 0 and not unsafe:
            return (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.config.broker_id} has not registered with the controller yet",
            )
        known = self.metadata.brokers.get(broker_id)
        if not check_replica_fetch_epoch(
            broker_epoch, known.broker_epoch if known is not None else None
        ):
            return (
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {broker_id} epoch {broker_epoch} is not its current registration",
            )
        return None

    def _authorize(
        self, principal: str, method: str, request: object
    ) -> tuple[grpc.StatusCode, str] | None:
        """The authorizer's answer for one call, from the ACLs the controller pushed."""
        assert self.security is not None
        return refusal(
            method,
            request,
            principal=principal,
            acls=self.metadata.acls,
            super_users=self.security.super_users,
        )

    def stop(self) -> None:
        """Ask `serve()` to shut down gracefully (safe from a signal handler)."""
        self._stopping.set()

    async def serve(self, *, ready: asyncio.Event | None = None) -> None:
        config = self.config
        data_dir = Path(config.data_dir)
        self.logs = logs = LogManager(
            data_dir,
            _default_log_config(config),
            now_ms=self.clock.wall_ms(),
            node_id=config.broker_id,
            boot_id=config.unsafe_test_boot_id,
            max_open_files=config.max_open_segment_files,
        )
        try:
            await self._serve(logs, data_dir, ready)
        finally:
            if self.metrics_server is not None:
                await asyncio.to_thread(self.metrics_server.close)
                self.metrics_server = None
            logs.shutdown(broker_epoch=self.link.broker_epoch if self.link is not None else -1)
            logger.info("broker %s stopped; logs flushed and checkpointed", config.broker_id)

    async def _serve(self, logs: LogManager, data_dir: Path, ready: asyncio.Event | None) -> None:
        config = self.config
        host, port = parse_host_port(config.listen, what="--listen")
        replicas = ReplicaManager(
            config=config,
            logs=logs,
            clock=self.clock,
            topic_configs=lambda topic: dict(self.metadata.topic_configs.get(topic, {})),
        )
        self.replicas = replicas
        self.metrics.watch_partitions(PartitionGaugeSource(lambda: _gauge_rows(replicas)))
        self.metrics.watch_quarantine(replicas.quarantine)

        security = self.security
        tls = security.tls if security is not None else None
        authorize = self._authorize if security is not None and security.authorizer else None
        server = new_server(config, security, authorize)
        self.bound_port = _bind(server, host, port, tls, mutual=True, what=config.listen)
        adv_host, adv_port = (
            parse_host_port(config.advertise, what="--advertise")
            if config.advertise
            else (host, self.bound_port)
        )
        external_server: grpc.aio.Server | None = None
        ext_host, ext_port = "", 0
        if config.external_listen:
            bind_host, bind_port = parse_host_port(config.external_listen, what="--external-listen")
            external_server = new_server(config, security, authorize)
            bound = _bind(
                external_server,
                bind_host,
                bind_port,
                tls,
                mutual=False,
                what=config.external_listen,
            )
            ext_host, ext_port = (
                parse_host_port(config.external_advertise, what="--external-advertise")
                if config.external_advertise
                else (bind_host, bound)
            )
        endpoint = common_pb2.BrokerEndpoint(
            broker_id=config.broker_id,
            host=adv_host,
            port=adv_port,
            rack=config.rack or "",
            external_host=ext_host,
            external_port=ext_port,
        )
        self.metadata.brokers = {
            config.broker_id: BrokerInfo(
                broker_id=config.broker_id,
                host=adv_host,
                port=adv_port,
                rack=config.rack or "",
                external_host=ext_host,
                external_port=ext_port,
            )
        }
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        if config.metrics_listen:
            metrics_host, metrics_port = parse_host_port(
                config.metrics_listen, what="--metrics-listen"
            )
            try:
                self.metrics_server = serve_metrics(
                    self.metrics.registry, metrics_host, metrics_port
                )
            except OSError as exc:
                raise OSError(
                    f"cannot serve metrics on {config.metrics_listen}: {exc.strerror or exc}"
                ) from None

        link: ControllerLink | None = None
        admin: AdminBackend
        if config.standalone:
            assert self._standalone_admin is not None
            store = StandaloneStore(
                data_dir=data_dir,
                broker_id=config.broker_id,
                replicas=replicas,
                metadata=self.metadata,
                now_ms=self.clock.monotonic_ms(),
            )
            admin = self._standalone_admin(
                store=store, config=config, endpoint=endpoint, clock=self.clock
            )
        else:
            assert config.controller is not None
            link = ControllerLink(
                address=config.controller,
                broker_id=config.broker_id,
                endpoint=endpoint,
                previous_broker_epoch=logs.proven_broker_epoch,
                directory_id=logs.directory_id,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                on_registered=logs.record_registration,
                tls=tls,
            )
            admin = ControllerForwarder(link)
        self.link = link

        coordinator = GroupCoordinator(
            replicas=replicas,
            metadata=self.metadata,
            admin=admin,
            settings=OffsetsTopicSettings(
                num_partitions=config.offsets_topic_num_partitions,
                replication_factor=config.offsets_topic_replication_factor,
                commit_timeout_ms=config.offsets_commit_timeout_ms,
                compaction_min_records=config.offsets_compaction_min_records,
                lease_ms=config.replica_lag_time_max_ms,
            ),
            clock=self.clock,
            group_config=GroupConfig(
                session_timeout_ms=config.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            ),
        )
        self.metrics.watch_groups(coordinator.metrics)
        self.response_budget = budget = ResponseBudget(
            total_bytes=config.max_outstanding_response_bytes,
            per_connection_bytes=config.max_outstanding_response_bytes_per_connection,
        )
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(
            BrokerServicer(
                replicas=replicas,
                metadata=self.metadata,
                admin=admin,
                metrics=self.metrics,
                fetch_max_bytes=config.fetch_max_bytes,
                message_max_bytes=config.message_max_bytes,
                response_budget=budget,
                coordinator=coordinator,
            ),
            server,
        )
        if external_server is not None:
            broker_pb2_grpc.add_BrokerServiceServicer_to_server(
                BrokerServicer(
                    replicas=replicas,
                    metadata=self.metadata,
                    admin=admin,
                    metrics=self.metrics,
                    fetch_max_bytes=config.fetch_max_bytes,
                    message_max_bytes=config.message_max_bytes,
                    external=True,
                    response_budget=budget,
                    coordinator=coordinator,
                ),
                external_server,
            )
            health_pb2_grpc.add_HealthServicer_to_server(health_servicer, external_server)
        broker_pb2_grpc.add_ReplicaServiceServicer_to_server(
            ReplicaServicer(
                replicas=replicas,
                metrics=self.metrics,
                refusal=self._replica_fetch_refusal,
                fetch_max_bytes=config.fetch_max_bytes,
            ),
            server,
        )
        try:
            async with asyncio.TaskGroup() as tasks:
                if link is not None:
                    self._wire_cluster_mode(server, link, replicas, tasks)
                await server.start()
                if external_server is not None:
                    await external_server.start()
                await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
                logger.info(
                    "broker %s listening on %s:%s (advertised %s:%s)%s",
                    config.broker_id,
                    host,
                    self.bound_port,
                    adv_host,
                    adv_port,
                    " in standalone mode" if config.standalone else "",
                )
                if ready is not None:
                    ready.set()
                tasks.create_task(self._housekeeping(logs))
                await self._stopping.wait()
                if link is not None:
                    moved = await link.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
                    logger.info(
                        "controlled shutdown %s",
                        "completed" if moved else "timed out; stopping anyway",
                    )
                raise _Stop
        except* _Stop:
            pass
        finally:
            await health_servicer.enter_graceful_shutdown()
            if external_server is not None:
                await external_server.stop(SHUTDOWN_GRACE_S)
            await server.stop(SHUTDOWN_GRACE_S)
            await coordinator.close()
            if link is not None:
                await link.final_heartbeat()
                await link.close()
            replicas.snapshot_producer_states()

    def _wire_cluster_mode(
        self,
        server: grpc.aio.Server,
        link: ControllerLink,
        replicas: ReplicaManager,
        tasks: asyncio.TaskGroup,
    ) -> None:
        """Controller link, control servicer, follower fetchers and the ISR reporter."""
        tls = self.security.tls if self.security is not None else None
        control = self.start_cluster_mode(
            link, replicas, tasks, connect=lambda leader: GrpcLeaderEndpoint(leader, tls)
        )
        broker_pb2_grpc.add_BrokerControlServiceServicer_to_server(control, server)

    def start_cluster_mode(
        self,
        link: ControllerLink,
        replicas: ReplicaManager,
        tasks: asyncio.TaskGroup,
        *,
        connect: Callable[[BrokerInfo], LeaderEndpoint],
    ) -> ControlServicer:
        """Start the controller link, the follower fetchers (`connect`: the port to the
        leaders) and the ISR reporter in `tasks`; returns the control servicer to serve.
        The simulator (tests/sim) calls this too, with in-memory ports."""
        config = self.config
        metadata = self.metadata
        fetchers = FetcherManager(
            settings=FetcherSettings(
                broker_id=config.broker_id,
                max_wait_ms=config.replica_fetch_wait_max_ms,
                max_bytes=config.replica_fetch_response_max_bytes,
                partition_max_bytes=config.replica_fetch_max_bytes,
                backoff_ms=config.replica_fetch_backoff_ms,
                broker_epoch=lambda: link.broker_epoch,
                now_ms=self.clock.wall_ms,
                unsafe_stale_answers=config.unsafe_test_apply_stale_fetch_answers,
            ),
            endpoint_of=lambda broker_id: metadata.brokers.get(broker_id),
            tasks=tasks,
            connect=connect,
        )
        self.fetchers = fetchers

        def on_change() -> None:
            replicas.set_isr_eligible(metadata.isr_eligible_epochs())
            fetchers.sync(list(replicas.partitions.values()))

        control = ControlServicer(
            replicas=replicas,
            metadata=metadata,
            broker_epoch=lambda: link.broker_epoch,
            session_controller_epoch=lambda: link.controller_epoch,
            on_change=on_change,
            unsafe_before_registration=config.unsafe_test_control_before_registration,
        )
        reporter = IsrReporter(
            replicas=replicas,
            sender=link,
            clock=self.clock,
            metrics=self.metrics,
            check_interval_ms=max(50, min(500, config.replica_lag_time_max_ms // 4)),
        )
        replicas.on_isr_proposal = reporter.propose
        tasks.create_task(link.run(), name="controller-link")
        tasks.create_task(reporter.run(), name="isr-reporter")
        return control

    async def _housekeeping(self, logs: LogManager) -> None:
        """Checkpoints, flushes and retention on their intervals; runs until cancelled."""
        config = self.config
        tick_ms = min(
            config.checkpoint_interval_ms,
            config.log_flush_interval_ms,
            config.log_retention_check_interval_ms,
        )
        next_checkpoint = next_retention = 0
        while True:
            await asyncio.sleep(tick_ms / 1000)
            now = self.clock.monotonic_ms()
            try:
                # On the loop, not in a thread: segment descriptors, the file budget,
                # dirty flags and the recovery point are shared with appends, reads,
                # rolls and truncations without locks that span an fsync (an adversarial
                # review found a cross-partition write and never-fsynced segments when
                # this ran in `asyncio.to_thread`).
                logs.flush_due(self.clock.wall_ms())
                if now >= next_checkpoint:
                    logs.checkpoint()
                    next_checkpoint = now + config.checkpoint_interval_ms
                if now >= next_retention:
                    logs.run_retention(self.clock.wall_ms())
                    next_retention = now + config.log_retention_check_interval_ms
            except Exception:
                # A storage error (no space, no descriptors) must not end the broker's
                # task group silently: log it and try again at the next tick.
                logger.exception("housekeeping failed; retrying at the next tick")


def _bind(
    server: grpc.aio.Server,
    host: str,
    port: int,
    tls: TlsMaterial | None,
    *,
    mutual: bool,
    what: str,
) -> int:
    """Bind a listening port (TLS, with a required client certificate when `mutual`, if
    `tls`); a clear OSError if the address is taken or unavailable."""
    try:
        bound = tls_bind(server, f"{host}:{port}", tls, require_client_cert=mutual)
    except RuntimeError as exc:  # grpc reports a failed bind this way
        raise OSError(f"cannot listen on {what}: the address is in use or not available") from exc
    if bound == 0:
        raise OSError(f"cannot listen on {what}: the address is in use or not available")
    return bound


class _Stop(Exception):
    """Raised inside the task group to cancel the background tasks on shutdown."""


def _gauge_rows(replicas: ReplicaManager) -> list[PartitionRow]:
    rows: list[PartitionRow] = []
    for p in replicas.partitions.values():
        if p.role is Role.OFFLINE:
            continue
        state = p.state
        lag: dict[int, int] = {}
        if isinstance(state, LeaderState):
            leo = p.log.log_end_offset
            lag = {
                f.broker_id: (leo - f.log_end_offset if f.log_end_offset >= 0 else -1)
                for f in state.followers
            }
        rows.append(
            PartitionRow(
                topic=p.topic,
                partition=p.partition,
                role=p.role.value,
                high_watermark=p.log.high_watermark,
                log_end_offset=p.log.log_end_offset,
                isr_size=len(p.isr),
                replica_count=len(p.replicas),
                min_insync_replicas=p.settings.min_insync_replicas,
                follower_lag=lag,
            )
        )
    return rows


def run(config: BrokerConfig, *, standalone_admin: StandaloneAdminFactory | None = None) -> None:
    """Run a broker until SIGTERM/SIGINT, under uvloop when available."""
    tune_for_large_buffers()
    broker = Broker(config, standalone_admin=standalone_admin)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, broker.stop)
        await broker.serve()

    loop_factory = None
    if config.use_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
