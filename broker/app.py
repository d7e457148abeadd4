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
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import start_http_server

from broker.clock import Clock, SystemClock
from broker.config import BrokerConfig
from broker.controller_link import ControllerForwarder, ControllerLink
from broker.log.config import LogConfig
from broker.log.manager import LogManager
from broker.metadata_cache import BrokerInfo, MetadataCache
from broker.replica.fetcher import FetcherManager, FetcherSettings
from broker.replica.isr_reporter import IsrReporter
from broker.replica.manager import ReplicaManager
from broker.replica.partition import Role
from broker.replica.state import LeaderState
from broker.server.broker_servicer import AdminBackend, BrokerServicer, ReplicaServicer
from broker.server.control_servicer import ControlServicer
from broker.server.metrics import BrokerMetrics, PartitionGaugeSource, PartitionRow
from broker.standalone import StandaloneController
from minikafka.allocator import tune_for_large_buffers
from minikafka.config import parse_host_port
from minikafka.v1 import broker_pb2_grpc, common_pb2, controller_pb2

logger = logging.getLogger(__name__)

GRPC_OPTIONS = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]
SHUTDOWN_GRACE_S = 5.0
CONTROLLED_SHUTDOWN_TIMEOUT_S = 10.0


class StandaloneAdmin:
    """AdminBackend over the standalone topic store."""

    def __init__(
        self, store: StandaloneController, endpoint: common_pb2.BrokerEndpoint, clock: Clock
    ) -> None:
        self._store = store
        self._endpoint = endpoint
        self._clock = clock

    async def create_topics(
        self, request: controller_pb2.CreateTopicsRequest
    ) -> controller_pb2.CreateTopicsResponse:
        return self._store.create_topics(request, now_ms=self._clock.monotonic_ms())

    async def delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest
    ) -> controller_pb2.DeleteTopicsResponse:
        return self._store.delete_topics(request)

    async def describe_cluster(
        self, request: controller_pb2.DescribeClusterRequest
    ) -> controller_pb2.DescribeClusterResponse:
        return self._store.describe_cluster(request, self._endpoint)

    async def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse:
        return self._store.elect_leaders(request)

    async def alter_configs(
        self, request: controller_pb2.AlterConfigsRequest
    ) -> controller_pb2.AlterConfigsResponse:
        return self._store.alter_configs(request)

    async def init_producer_id(
        self, request: controller_pb2.InitProducerIdRequest
    ) -> controller_pb2.InitProducerIdResponse:
        return self._store.init_producer_id(request)


def _default_log_config(config: BrokerConfig) -> LogConfig:
    return LogConfig(
        segment_bytes=config.log_segment_bytes,
        retention_ms=config.log_retention_ms,
        retention_bytes=config.log_retention_bytes,
        max_message_bytes=config.message_max_bytes,
    )


class Broker:
    """One broker process. `serve()` runs until `stop()` or cancellation."""

    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        if not config.standalone and not config.controller:
            raise ValueError("a broker needs --controller HOST:PORT, or --standalone")
        self.config = config
        self.clock = clock or SystemClock()
        self.metadata = MetadataCache()
        self.metrics = BrokerMetrics()
        self._stopping = asyncio.Event()
        self.bound_port = 0
        self.logs: LogManager | None = None
        self.link: ControllerLink | None = None
        self.fetchers: FetcherManager | None = None

    def _replica_epoch_is_current(self, broker_id: int, broker_epoch: int) -> bool:
        """Refuse replica fetches from an older incarnation of a broker (zombie fencing)."""
        known = self.metadata.brokers.get(broker_id)
        return known is None or known.broker_epoch <= 0 or broker_epoch >= known.broker_epoch

    def stop(self) -> None:
        """Ask `serve()` to shut down gracefully (safe from a signal handler)."""
        self._stopping.set()

    async def serve(self, *, ready: asyncio.Event | None = None) -> None:
        config = self.config
        data_dir = Path(config.data_dir)
        self.logs = logs = LogManager(
            data_dir, _default_log_config(config), now_ms=self.clock.wall_ms()
        )
        try:
            await self._serve(logs, data_dir, ready)
        finally:
            logs.shutdown()
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

        server = grpc.aio.server(options=GRPC_OPTIONS)
        self.bound_port = _bind(server, host, port, what=config.listen)
        adv_host, adv_port = (
            parse_host_port(config.advertise, what="--advertise")
            if config.advertise
            else (host, self.bound_port)
        )
        external_server: grpc.aio.Server | None = None
        ext_host, ext_port = "", 0
        if config.external_listen:
            bind_host, bind_port = parse_host_port(config.external_listen, what="--external-listen")
            external_server = grpc.aio.server(options=GRPC_OPTIONS)
            bound = _bind(external_server, bind_host, bind_port, what=config.external_listen)
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
            start_http_server(metrics_port, metrics_host, registry=self.metrics.registry)

        link: ControllerLink | None = None
        admin: AdminBackend
        if config.standalone:
            store = StandaloneController(
                data_dir=data_dir,
                broker_id=config.broker_id,
                replicas=replicas,
                metadata=self.metadata,
                now_ms=self.clock.monotonic_ms(),
            )
            admin = StandaloneAdmin(store, endpoint, self.clock)
        else:
            assert config.controller is not None
            link = ControllerLink(
                address=config.controller,
                broker_id=config.broker_id,
                endpoint=endpoint,
                clean_shutdown=logs.had_clean_shutdown,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
            )
            admin = ControllerForwarder(link)
        self.link = link

        broker_pb2_grpc.add_BrokerServiceServicer_to_server(
            BrokerServicer(
                replicas=replicas,
                metadata=self.metadata,
                admin=admin,
                metrics=self.metrics,
                fetch_max_bytes=config.fetch_max_bytes,
                message_max_bytes=config.message_max_bytes,
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
                ),
                external_server,
            )
            health_pb2_grpc.add_HealthServicer_to_server(health_servicer, external_server)
        broker_pb2_grpc.add_ReplicaServiceServicer_to_server(
            ReplicaServicer(
                replicas=replicas,
                metrics=self.metrics,
                broker_epoch_of=self._replica_epoch_is_current,
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
            ),
            endpoint_of=lambda broker_id: metadata.brokers.get(broker_id),
            tasks=tasks,
        )
        self.fetchers = fetchers

        def on_change() -> None:
            live = set(metadata.brokers)
            for partition in replicas.partitions.values():
                partition.ineligible = frozenset(set(partition.replicas) - live)
            fetchers.sync(list(replicas.partitions.values()))

        broker_pb2_grpc.add_BrokerControlServiceServicer_to_server(
            ControlServicer(
                replicas=replicas,
                metadata=metadata,
                broker_epoch=lambda: link.broker_epoch,
                on_change=on_change,
            ),
            server,
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
            logs.flush_due(self.clock.wall_ms())
            if now >= next_checkpoint:
                logs.checkpoint()
                next_checkpoint = now + config.checkpoint_interval_ms
            if now >= next_retention:
                logs.run_retention(self.clock.wall_ms())
                next_retention = now + config.log_retention_check_interval_ms


def _bind(server: grpc.aio.Server, host: str, port: int, *, what: str) -> int:
    """Bind a listening port; a clear OSError if the address is taken or unavailable."""
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
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


def run(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM/SIGINT, under uvloop when available."""
    tune_for_large_buffers()
    broker = Broker(config)

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
