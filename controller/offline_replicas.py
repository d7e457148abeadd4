"""PURE rule for replicas a broker reports offline: out of the ISR, out of leadership.

A broker that cannot open a partition's log (corrupt directory, no file descriptors)
answers LeaderAndIsr with KAFKA_STORAGE_ERROR for it (Kafka's ZooKeeper-era controller
does the same with `onReplicasBecomeOffline`). The controller then treats that replica as
unavailable: it leaves the ISR (except as its last member, which keeps the partition's
history as `_remove_broker` does for fenced brokers) and, if it led, the partition
elects another ISR member (or none: OFFLINE until the replica or another one returns).

The report is tied to the broker epoch it was made under: a report from an older
incarnation changes nothing (the restarted broker opens its logs anew). Reports are not
journaled: after a controller fail-over the full sync sends LeaderAndIsr again and the
broker answers again. A later election may still pick the replica (e.g. as the last ISR
member when its broker unfences); it answers KAFKA_STORAGE_ERROR again and this rule
applies again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from controller.election import ElectionMode, UncleanRecoveryStrategy
from controller.model import ClusterState, PartitionKey, PartitionRegistration
from controller.partition_change import ElectionPolicy, PartitionChange, build_partition_change
from controller.records import PartitionRecord, Record
from minikafka.topic_config import min_insync_replicas, unclean_leader_election_enabled


def offline_replica_change(
    current: PartitionRegistration,
    *,
    broker_id: int,
    alive: Collection[int],
    policy: ElectionPolicy,
    mode: ElectionMode,
) -> PartitionChange | None:
    """The partition without `broker_id` in its ISR (unless it is the last member), not
    eligible (ELR: its log cannot be opened), and with a leader other than `broker_id`;
    None when nothing changes."""
    if broker_id not in current.replicas:
        return None
    remaining = tuple(member for member in current.isr if member != broker_id)
    return build_partition_change(
        current,
        alive=frozenset(alive) - {broker_id},
        policy=policy,
        mode=mode,
        target_isr=remaining or current.isr,
        unclean_shutdown=(broker_id,),
    )


def offline_replica_records(
    state: ClusterState,
    *,
    broker_id: int,
    broker_epoch: int,
    keys: Iterable[PartitionKey],
    default_min_insync_replicas: int,
    default_unclean_leader_election: bool,
    eligible_leader_replicas: bool = True,
    unclean_strategy: UncleanRecoveryStrategy = UncleanRecoveryStrategy.LONGEST_LOG,
) -> list[Record]:
    """Partition records applying `offline_replica_change` to each reported partition;
    none for a report from another incarnation of the broker or unknown partitions."""
    broker = state.brokers.get(broker_id)
    if broker is None or broker.broker_epoch != broker_epoch:
        return []
    alive = state.eligible_brokers()
    records: list[Record] = []
    for key in sorted(set(keys)):
        current = state.partitions.get(key)
        topic = state.topics.get(key[0])
        if current is None or topic is None:
            continue
        unclean = unclean_leader_election_enabled(
            topic.configs, default=default_unclean_leader_election
        )
        change = offline_replica_change(
            current,
            broker_id=broker_id,
            alive=alive,
            policy=ElectionPolicy(
                min_insync_replicas=min_insync_replicas(
                    topic.configs, default=default_min_insync_replicas
                ),
                eligible_leader_replicas=eligible_leader_replicas,
                unclean_strategy=unclean_strategy,
            ),
            mode=ElectionMode.UNCLEAN if unclean else ElectionMode.ONLINE,
        )
        if change is not None:
            records.append(
                PartitionRecord(topic=key[0], partition=key[1], registration=change.registration)
            )
    return records
