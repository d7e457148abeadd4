"""Prometheus metrics of one broker process (its own registry, served on --metrics-listen)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class PartitionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One hosted partition as the gauges see it."""

    topic: str
    partition: int
    role: str
    high_watermark: int
    log_end_offset: int
    isr_size: int
    replica_count: int
    min_insync_replicas: int
    #: follower id -> offsets behind the leader's LEO (leaders only; -1 when unknown)
    follower_lag: dict[int, int] = msgspec.field(default_factory=dict)


class PartitionGaugeSource:
    """What the gauge collector reads from the replica manager at scrape time."""

    def __init__(self, snapshot: Callable[[], list[PartitionRow]]) -> None:
        self.snapshot = snapshot


class _PartitionCollector(Collector):
    def __init__(self, source: PartitionGaugeSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        hw = GaugeMetricFamily(
            "minikafka_partition_high_watermark", "High watermark", labels=labels
        )
        leo = GaugeMetricFamily(
            "minikafka_partition_log_end_offset", "Log end offset", labels=labels
        )
        lag = GaugeMetricFamily(
            "minikafka_follower_lag_offsets",
            "Offsets a follower is behind the leader's log end (-1: not fetched yet)",
            labels=[*labels, "follower"],
        )
        under_replicated = 0
        under_min_isr = 0
        leaders = 0
        for row in self._source.snapshot():
            key = [row.topic, str(row.partition)]
            hw.add_metric(key, row.high_watermark)
            leo.add_metric(key, row.log_end_offset)
            if row.role != "leader":
                continue
            leaders += 1
            under_replicated += row.isr_size < row.replica_count
            under_min_isr += row.isr_size < row.min_insync_replicas
            for follower, behind in row.follower_lag.items():
                lag.add_metric([*key, str(follower)], behind)
        yield hw
        yield leo
        yield lag
        yield GaugeMetricFamily(
            "minikafka_under_replicated_partitions",
            "Led partitions whose ISR is smaller than the replica set",
            value=under_replicated,
        )
        yield GaugeMetricFamily(
            "minikafka_under_min_isr_partitions",
            "Led partitions whose ISR is below min.insync.replicas",
            value=under_min_isr,
        )
        yield GaugeMetricFamily(
            "minikafka_leader_partitions", "Partitions this broker leads", value=leaders
        )


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.produce_requests = Counter(
            "minikafka_produce_partition_requests",
            "Produce requests per partition, by error code",
            ["error"],
            registry=self.registry,
        )
        self.fetch_requests = Counter(
            "minikafka_fetch_requests", "Fetch requests", ["kind"], registry=self.registry
        )
        self.produce_latency = Histogram(
            "minikafka_produce_latency_seconds", "Produce request latency", registry=self.registry
        )
        self.fetch_latency = Histogram(
            "minikafka_fetch_latency_seconds",
            "Fetch request latency (includes long-poll waiting)",
            ["kind"],
            registry=self.registry,
        )
        self.isr_shrinks = Counter(
            "minikafka_isr_shrinks", "ISR shrinks committed", registry=self.registry
        )
        self.isr_expands = Counter(
            "minikafka_isr_expands", "ISR expands committed", registry=self.registry
        )

    def watch_partitions(self, source: PartitionGaugeSource) -> None:
        self.registry.register(_PartitionCollector(source))
