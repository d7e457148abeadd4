"""PURE preferred-leader imbalance: which partitions an automatic rebalance should move.

Kafka's `auto.leader.rebalance.enable`: for each broker, imbalance = partitions whose
preferred (first assigned) replica is that broker but which it does not lead, divided by
the partitions preferring it. Above `leader.imbalance.per.broker.percentage`, the broker's
partitions get preferred elections, where the preferred replica can lead (alive, in ISR).
"""

from __future__ import annotations

from controller.model import ClusterState, PartitionKey


def preferred_replica_imbalance(state: ClusterState) -> int:
    """Partitions not led by their preferred replica (Kafka's PreferredReplicaImbalanceCount)."""
    return sum(1 for part in state.partitions.values() if part.leader != part.replicas[0])


def partitions_to_rebalance(
    state: ClusterState, *, imbalance_percentage: int
) -> list[PartitionKey]:
    preferring: dict[int, int] = {}
    misled: dict[int, list[PartitionKey]] = {}
    for key, part in state.partitions.items():
        preferred = part.replicas[0]
        preferring[preferred] = preferring.get(preferred, 0) + 1
        if part.leader != preferred:
            misled.setdefault(preferred, []).append(key)
    eligible = state.eligible_brokers()
    chosen: list[PartitionKey] = []
    for broker_id, keys in sorted(misled.items()):
        if broker_id not in eligible:
            continue
        if len(keys) * 100 <= imbalance_percentage * preferring[broker_id]:
            continue
        chosen.extend(key for key in keys if broker_id in state.partitions[key].isr)
    return sorted(chosen)
