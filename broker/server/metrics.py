"""Prometheus metrics of one broker process (its own registry, served on --metrics-listen)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class PartitionGaugeSource:
    """What the gauge collector needs to read from the replica manager."""

    def __init__(self, snapshot: Callable[[], list[tuple[str, int, str, int, int, int, int, int]]]):
        #: rows of (topic, partition, role, hw, leo, isr_size, replicas, min_isr)
        self.snapshot = snapshot


class _PartitionCollector(Collector):
    def __init__(self, source: PartitionGaugeSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        hw = GaugeMetricFamily(
            "minikafka_partition_high_watermark", "High watermark", labels=["topic", "partition"]
        )
        leo = GaugeMetricFamily(
            "minikafka_partition_log_end_offset", "Log end offset", labels=["topic", "partition"]
        )
        under_replicated = 0
        under_min_isr = 0
        leaders = 0
        for (
            topic,
            partition,
            role,
            high,
            end,
            isr_size,
            replicas,
            min_isr,
        ) in self._source.snapshot():
            hw.add_metric([topic, str(partition)], high)
            leo.add_metric([topic, str(partition)], end)
            if role == "leader":
                leaders += 1
                if isr_size < replicas:
                    under_replicated += 1
                if isr_size < min_isr:
                    under_min_isr += 1
        yield hw
        yield leo
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
