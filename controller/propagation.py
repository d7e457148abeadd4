"""PURE propagation plan: which broker must hear about which change after a commit.

- A changed (or new) partition: LeaderAndIsr with its full state to each of its replicas.
- A topic whose configs changed: LeaderAndIsr for its partitions (they carry topic configs).
- A deleted topic: StopReplica(delete_partition=true) to each former replica.
- A (re-)registered broker (new broker epoch): a full sync, i.e. LeaderAndIsr for all its
  partitions and a full UpdateMetadata.
- Any change at all: UpdateMetadata (full state) to every live broker.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from controller.model import ClusterState, PartitionKey
from controller.records import (
    BrokerRecord,
    PartitionRecord,
    Record,
    RemoveTopicRecord,
    TopicUpsertRecord,
)


class Propagation(msgspec.Struct, frozen=True, kw_only=True):
    leader_and_isr: dict[int, frozenset[PartitionKey]] = msgspec.field(default_factory=dict)
    new_partitions: frozenset[PartitionKey] = frozenset()
    stop_replica: dict[int, dict[PartitionKey, int]] = msgspec.field(default_factory=dict)
    full_sync: frozenset[int] = frozenset()
    update_metadata: bool = False


def plan_propagation(
    old: ClusterState, new: ClusterState, records: Sequence[Record]
) -> Propagation:
    leader_and_isr: dict[int, set[PartitionKey]] = {}
    new_partitions: set[PartitionKey] = set()
    stop_replica: dict[int, dict[PartitionKey, int]] = {}
    full_sync: set[int] = set()

    def notify(key: PartitionKey) -> None:
        registration = new.partitions.get(key)
        if registration is None:
            return
        for replica in registration.replicas:
            leader_and_isr.setdefault(replica, set()).add(key)

    for record in records:
        match record:
            case PartitionRecord(topic=topic, partition=partition):
                notify((topic, partition))
                if (topic, partition) not in old.partitions:
                    new_partitions.add((topic, partition))
            case TopicUpsertRecord(topic=topic) if topic.name in old.topics:
                for key in new.topic_partitions(topic.name):
                    notify(key)
            case RemoveTopicRecord(name=name):
                for key in old.topic_partitions(name):
                    registration = old.partitions[key]
                    for replica in registration.replicas:
                        stop_replica.setdefault(replica, {})[key] = registration.leader_epoch
            case BrokerRecord(registration=registration):
                previous = old.brokers.get(registration.broker_id)
                if previous is None or previous.broker_epoch != registration.broker_epoch:
                    full_sync.add(registration.broker_id)
            case _:
                pass
    return Propagation(
        leader_and_isr={b: frozenset(keys) for b, keys in leader_and_isr.items()},
        new_partitions=frozenset(new_partitions),
        stop_replica=stop_replica,
        full_sync=frozenset(full_sync),
        update_metadata=bool(records),
    )
