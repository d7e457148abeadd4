"""Controller metrics (Prometheus) and a small asyncio HTTP endpoint serving /metrics.

Names follow the brief: `active_brokers`, `fenced_brokers`, `offline_partitions`,
`preferred_replica_imbalance` (gauges, refreshed after every commit),
`leader_elections_total{type}` and `unclean_leader_elections_total` (counters). Each
controller owns its `CollectorRegistry`, so several can run in one process (tests).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from controller.model import ClusterState, PartitionStatus
from controller.partition_change import ElectionKind
from controller.rebalance import preferred_replica_imbalance

logger = logging.getLogger(__name__)

HTTP_REQUEST_BYTES_MAX: Final = 8192
HTTP_READ_TIMEOUT_S: Final = 5.0


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.active_brokers = Gauge(
            "active_brokers", "Registered, unfenced brokers", registry=self.registry
        )
        self.fenced_brokers = Gauge(
            "fenced_brokers", "Registered, fenced brokers", registry=self.registry
        )
        self.offline_partitions = Gauge(
            "offline_partitions", "Partitions without a leader", registry=self.registry
        )
        self.recovering_partitions = Gauge(
            "recovering_partitions",
            "Partitions led by an uncleanly elected leader whose ISR is not yet healthy",
            registry=self.registry,
        )
        self.preferred_replica_imbalance = Gauge(
            "preferred_replica_imbalance",
            "Partitions not led by their preferred replica",
            registry=self.registry,
        )
        self.global_topics = Gauge("global_topic_count", "Topics", registry=self.registry)
        self.global_partitions = Gauge(
            "global_partition_count", "Partitions", registry=self.registry
        )
        self.controller_epoch = Gauge(
            "controller_epoch", "This controller's epoch", registry=self.registry
        )
        self.metadata_offset = Gauge(
            "metadata_offset",
            "Offset of the last committed metadata record",
            registry=self.registry,
        )
        self.leader_elections = Counter(
            "leader_elections",
            "Leader elections by type (clean, preferred, unclean)",
            ["type"],
            registry=self.registry,
        )
        self.unclean_leader_elections = Counter(
            "unclean_leader_elections",
            "Unclean leader elections (possible data loss)",
            registry=self.registry,
        )
        for kind in ElectionKind:
            self.leader_elections.labels(type=kind.value)

    def observe_state(self, state: ClusterState) -> None:
        fenced = sum(1 for broker in state.brokers.values() if broker.fenced)
        self.active_brokers.set(len(state.brokers) - fenced)
        self.fenced_brokers.set(fenced)
        statuses = [part.status for part in state.partitions.values()]
        self.offline_partitions.set(statuses.count(PartitionStatus.OFFLINE))
        self.recovering_partitions.set(statuses.count(PartitionStatus.RECOVERING))
        self.preferred_replica_imbalance.set(preferred_replica_imbalance(state))
        self.global_topics.set(len(state.topics))
        self.global_partitions.set(len(state.partitions))
        self.controller_epoch.set(state.controller_epoch)
        self.metadata_offset.set(state.metadata_offset)

    def observe_election(self, kind: ElectionKind) -> None:
        self.leader_elections.labels(type=kind.value).inc()
        if kind is ElectionKind.UNCLEAN:
            self.unclean_leader_elections.inc()


async def start_metrics_server(registry: CollectorRegistry, host: str, port: int) -> asyncio.Server:
    """Serve `GET /metrics` (text exposition format) on host:port; other paths get 404."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HTTP_READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if (
            len(request_line) >= 2
            and request_line[0] == "GET"
            and request_line[1].split("?")[0] in ("/metrics", "/")
        ):
            body = generate_latest(registry)
            status = "200 OK"
            content_type = CONTENT_TYPE_LATEST
        else:
            body = b"not found\n"
            status = "404 Not Found"
            content_type = "text/plain"
        writer.write(
            (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
            + body
        )
        try:
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, limit=HTTP_REQUEST_BYTES_MAX)
