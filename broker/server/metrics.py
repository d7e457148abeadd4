"""Prometheus metrics of one broker process (its own registry, served on --metrics-listen).

Every name starts with `minikafka_` (docs/metrics.md maps them to Kafka's JMX names):
request counters and latencies, ISR shrinks and expands, bytes and records in and bytes
out per topic (Kafka's BrokerTopicMetrics), replication bytes out, per-partition gauges
read at scrape time (high watermark, log end, follower lag, under-replicated and
under-min-ISR counts, led partitions) and the process metrics (`minikafka_process_*`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.group.coordinator import GroupSnapshot
from broker.log.quarantine import Quarantine
from minikafka.metrics_http import add_process_metrics
from minikafka.record_batch import iter_batches


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


class _GroupCollector(Collector):
    """Consumer groups this broker coordinates (read from the coordinator at scrape time)."""

    def __init__(self, snapshot: Callable[[], GroupSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        members = GaugeMetricFamily(
            "minikafka_group_members",
            "Members of a group this broker coordinates",
            labels=["group"],
        )
        lag = GaugeMetricFamily(
            "minikafka_group_lag_offsets",
            "High watermark of the local replica minus the group's committed offset",
            labels=["group", "topic", "partition"],
        )
        for row in snapshot.groups:
            members.add_metric([row.group_id], row.members)
            for (topic, partition), behind in sorted(row.lag.items()):
                lag.add_metric([row.group_id, topic, str(partition)], behind)
        yield GaugeMetricFamily(
            "minikafka_group_count",
            "Groups this broker coordinates (with members or committed offsets)",
            value=len(snapshot.groups),
        )
        yield members
        yield lag
        yield CounterMetricFamily(
            "minikafka_group_rebalances",
            "Target assignments computed by this broker's coordinator (group epoch bumps)",
            value=snapshot.rebalances,
        )


class _QuarantineCollector(Collector):
    """Records and bytes this broker's truncations discarded (loss receipts), split by
    whether they were below the replica's high watermark (committed, as far as it knew),
    and the bytes of discarded batches kept in its quarantines."""

    def __init__(self, quarantine: Quarantine) -> None:
        self._quarantine = quarantine

    def collect(self) -> Iterator[Metric]:
        totals = self._quarantine.totals
        label = ["below_high_watermark"]
        records = CounterMetricFamily(
            "minikafka_discarded_records",
            "Records removed by log truncations (each has a loss receipt)",
            labels=label,
        )
        records.add_metric(["true"], totals.records_below_high_watermark)
        records.add_metric(["false"], totals.records_above_high_watermark)
        discarded_bytes = CounterMetricFamily(
            "minikafka_discarded_bytes",
            "Bytes of batches removed by log truncations (a batch holding a record below "
            "the high watermark counts as below)",
            labels=label,
        )
        discarded_bytes.add_metric(["true"], totals.bytes_below_high_watermark)
        discarded_bytes.add_metric(["false"], totals.bytes_above_high_watermark)
        yield records
        yield discarded_bytes
        yield CounterMetricFamily(
            "minikafka_loss_receipts",
            "Truncations of a non-empty log suffix (each has a loss receipt)",
            value=totals.receipts,
        )
        yield GaugeMetricFamily(
            "minikafka_quarantine_kept_bytes",
            "Bytes of discarded batches kept in this broker's quarantines "
            "(bounded by --quarantine-max-bytes)",
            value=self._quarantine.kept_bytes,
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
        self.topic_bytes_in = Counter(
            "minikafka_topic_bytes_in",
            "Bytes of record batches appended by this broker as leader, per topic",
            ["topic"],
            registry=self.registry,
        )
        self.topic_messages_in = Counter(
            "minikafka_topic_messages_in",
            "Records appended by this broker as leader, per topic",
            ["topic"],
            registry=self.registry,
        )
        self.topic_bytes_out = Counter(
            "minikafka_topic_bytes_out",
            "Bytes of record batches sent to consumers, per topic",
            ["topic"],
            registry=self.registry,
        )
        self.replication_bytes_out = Counter(
            "minikafka_replication_bytes_out",
            "Bytes of record batches sent to followers",
            registry=self.registry,
        )
        add_process_metrics(self.registry, role="broker")

    def observe_produced(self, topic: str, records: bytes) -> None:
        """A produce of `records` (whole batches) to `topic` was appended."""
        count = 0
        for _, header in iter_batches(records, verify_crc=False):
            count += header.record_count
        self.topic_bytes_in.labels(topic=topic).inc(len(records))
        self.topic_messages_in.labels(topic=topic).inc(count)

    def watch_groups(self, snapshot: Callable[[], GroupSnapshot]) -> None:
        self.registry.register(_GroupCollector(snapshot))

    def watch_partitions(self, source: PartitionGaugeSource) -> None:
        self.registry.register(_PartitionCollector(source))

    def watch_quarantine(self, quarantine: Quarantine) -> None:
        self.registry.register(_QuarantineCollector(quarantine))
