"""Controller metrics (Prometheus), all named `minikafka_controller_*`.

Gauges refreshed after every commit: active and fenced brokers, offline and recovering
partitions, eligible leader replicas and partitions with an empty ISR (KIP-966),
preferred-replica imbalance, topic and partition counts, the controller
epoch, the metadata offset, and `active_controller_count` (1 on the active controller,
Kafka's ActiveControllerCount). Counters: `leader_elections_total{type}` and
`unclean_leader_elections_total`. Each controller owns its `CollectorRegistry` (several
can run in one process, in tests); `minikafka.metrics_http` serves it and adds the
process metrics. docs/metrics.md maps every name to Kafka's.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.model import ClusterState, PartitionStatus
from controller.partition_change import ElectionKind
from controller.rebalance import preferred_replica_imbalance
from minikafka.metrics_http import add_process_metrics

PREFIX = "minikafka_controller_"


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.active_brokers = Gauge(
            PREFIX + "active_brokers", "Registered, unfenced brokers", registry=self.registry
        )
        self.fenced_brokers = Gauge(
            PREFIX + "fenced_brokers", "Registered, fenced brokers", registry=self.registry
        )
        self.offline_partitions = Gauge(
            PREFIX + "offline_partitions", "Partitions without a leader", registry=self.registry
        )
        self.recovering_partitions = Gauge(
            PREFIX + "recovering_partitions",
            "Partitions led by an uncleanly elected leader whose ISR is not yet healthy",
            registry=self.registry,
        )
        self.preferred_replica_imbalance = Gauge(
            PREFIX + "preferred_replica_imbalance",
            "Partitions not led by their preferred replica",
            registry=self.registry,
        )
        self.global_topics = Gauge(PREFIX + "global_topic_count", "Topics", registry=self.registry)
        self.global_partitions = Gauge(
            PREFIX + "global_partition_count", "Partitions", registry=self.registry
        )
        self.controller_epoch = Gauge(
            PREFIX + "controller_epoch", "This controller's epoch", registry=self.registry
        )
        self.metadata_offset = Gauge(
            PREFIX + "metadata_offset",
            "Offset of the last committed metadata record",
            registry=self.registry,
        )
        self.leader_elections = Counter(
            PREFIX + "leader_elections",
            "Leader elections by type (clean, preferred, eligible: from the ELR, unclean)",
            ["type"],
            registry=self.registry,
        )
        self.unclean_leader_elections = Counter(
            PREFIX + "unclean_leader_elections",
            "Unclean leader elections (possible data loss)",
            registry=self.registry,
        )
        self.eligible_leader_replicas = Gauge(
            PREFIX + "eligible_leader_replicas",
            "Eligible leader replicas over all partitions (KIP-966: out of the ISR, holding "
            "every committed record)",
            registry=self.registry,
        )
        self.partitions_with_empty_isr = Gauge(
            PREFIX + "partitions_with_empty_isr",
            "Partitions whose ISR is empty (they wait for an eligible replica)",
            registry=self.registry,
        )
        self.active_controller_count = Gauge(
            PREFIX + "active_controller_count",
            "1 on the active controller, 0 elsewhere (Kafka's ActiveControllerCount)",
            registry=self.registry,
        )
        for kind in ElectionKind:
            self.leader_elections.labels(type=kind.value)
        # The controller quorum (issue 18): the Raft metrics of Kafka's KafkaRaftMetrics.
        self.raft_epoch = Gauge(
            PREFIX + "raft_epoch",
            "The Raft epoch this controller is in (the controller epoch brokers see)",
            registry=self.registry,
        )
        self.raft_high_watermark = Gauge(
            PREFIX + "raft_high_watermark",
            "End offset of the committed metadata log as this controller knows it",
            registry=self.registry,
        )
        self.commit_latency = Histogram(
            PREFIX + "commit_latency_seconds",
            "From proposing a request's records to their commit on a majority (active only)",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=self.registry,
        )
        self.follower_lag = Gauge(
            PREFIX + "follower_lag_records",
            "Entries the leader holds that a voter has not fetched (on the leader)",
            ["voter"],
            registry=self.registry,
        )
        self.raft_elections = Counter(
            PREFIX + "elections",
            "Elections this controller stood in (became a candidate)",
            registry=self.registry,
        )
        self.activations = Counter(
            PREFIX + "activations",
            "Times this controller became the active controller",
            registry=self.registry,
        )
        self.raft_refused = Counter(
            PREFIX + "raft_messages_refused",
            "Raft messages refused (another cluster, not a voter of this quorum)",
            registry=self.registry,
        )
        add_process_metrics(self.registry, role="controller")

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
        self.eligible_leader_replicas.set(sum(len(p.elr) for p in state.partitions.values()))
        self.partitions_with_empty_isr.set(sum(1 for p in state.partitions.values() if not p.isr))

    def clear_state(self) -> None:
        """A standby reports no cluster state (the active controller does), so a sum over
        the quorum counts each partition and broker once."""
        for gauge in (
            self.active_brokers,
            self.fenced_brokers,
            self.offline_partitions,
            self.recovering_partitions,
            self.preferred_replica_imbalance,
            self.global_topics,
            self.global_partitions,
            self.eligible_leader_replicas,
            self.partitions_with_empty_isr,
        ):
            gauge.set(0)

    def set_active(self, active: bool) -> None:
        """Whether this controller is the active one (it runs the handlers)."""
        self.active_controller_count.set(1 if active else 0)

    def observe_election(self, kind: ElectionKind) -> None:
        self.leader_elections.labels(type=kind.value).inc()
        if kind is ElectionKind.UNCLEAN:
            self.unclean_leader_elections.inc()
