"""PURE replica placement for new topics: Kafka's `AdminUtils.assignReplicasToBrokers`.

Striped round-robin: partition p's first replica is broker (p + start_index) mod n; the
following replicas are shifted by an amount that grows every n partitions, so leaders and
followers spread evenly. With racks, brokers are first arranged rack-alternated (one
broker per rack in turn) and a replica is skipped while its rack already holds one of the
partition's replicas and some rack does not. Kafka draws `start_index` and the shift at
random; we derive them from the topic name so placement is deterministic and testable.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from minikafka.errors import ErrorCode, MiniKafkaError


def assign_replicas(
    *,
    topic: str,
    broker_racks: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
) -> list[tuple[int, ...]]:
    """Replica lists (first = preferred leader) for partitions 0..num_partitions-1.

    `broker_racks` maps each usable broker to its rack ("" when it has none). Racks are
    honoured when at least one broker has one. Raises INVALID_REPLICATION_FACTOR /
    INVALID_PARTITIONS for impossible requests.
    """
    if num_partitions < 1:
        raise MiniKafkaError(
            f"number of partitions must be at least 1, got {num_partitions}",
            code=ErrorCode.INVALID_PARTITIONS,
        )
    if replication_factor < 1:
        raise MiniKafkaError(
            f"replication factor must be at least 1, got {replication_factor}",
            code=ErrorCode.INVALID_REPLICATION_FACTOR,
        )
    if replication_factor > len(broker_racks):
        raise MiniKafkaError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(broker_racks)} available brokers",
            code=ErrorCode.INVALID_REPLICATION_FACTOR,
        )
    seed = zlib.crc32(topic.encode("utf-8"))
    broker_count = len(broker_racks)
    start_index = seed % broker_count
    replica_shift = (seed // broker_count) % broker_count
    if any(broker_racks.values()):
        return assign_rack_aware(
            broker_racks=broker_racks,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            start_index=start_index,
            replica_shift=replica_shift,
        )
    return assign_rack_unaware(
        brokers=sorted(broker_racks),
        num_partitions=num_partitions,
        replication_factor=replication_factor,
        start_index=start_index,
        replica_shift=replica_shift,
    )


def assign_rack_unaware(
    *,
    brokers: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    start_index: int,
    replica_shift: int,
) -> list[tuple[int, ...]]:
    broker_count = len(brokers)
    assert 1 <= replication_factor <= broker_count
    assignment: list[tuple[int, ...]] = []
    shift = replica_shift
    for partition in range(num_partitions):
        if partition > 0 and partition % broker_count == 0:
            shift += 1
        first = (partition + start_index) % broker_count
        replicas = [brokers[first]]
        for index in range(replication_factor - 1):
            replicas.append(brokers[_replica_index(first, shift, index, broker_count)])
        assignment.append(tuple(replicas))
    return assignment


def assign_rack_aware(
    *,
    broker_racks: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
    start_index: int,
    replica_shift: int,
) -> list[tuple[int, ...]]:
    brokers = rack_alternated(broker_racks)
    broker_count = len(brokers)
    rack_count = len(set(broker_racks.values()))
    assert 1 <= replication_factor <= broker_count
    assignment: list[tuple[int, ...]] = []
    shift = replica_shift
    for partition in range(num_partitions):
        if partition > 0 and partition % broker_count == 0:
            shift += 1
        first = (partition + start_index) % broker_count
        leader = brokers[first]
        replicas = [leader]
        racks_used = {broker_racks[leader]}
        k = 0
        for _ in range(replication_factor - 1):
            # Bounded: within broker_count steps every broker is visited once more.
            while True:
                broker = brokers[_replica_index(first, shift * rack_count, k, broker_count)]
                k += 1
                rack = broker_racks[broker]
                rack_ok = rack not in racks_used or len(racks_used) == rack_count
                broker_ok = broker not in replicas or len(replicas) == broker_count
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    break
        assignment.append(tuple(replicas))
    return assignment


def rack_alternated(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered one per rack in turn.

    Racks {a: [0, 5], b: [3, 4], c: [1, 2]} give 0 3 1 5 4 2 (Kafka's example).
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(broker_racks):
        by_rack.setdefault(broker_racks[broker_id], []).append(broker_id)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    result: list[int] = []
    for round_index in range(max(len(queue) for queue in queues)):
        result.extend(queue[round_index] for queue in queues if round_index < len(queue))
    return result


def _replica_index(first: int, second_replica_shift: int, index: int, broker_count: int) -> int:
    shift = 1 + (second_replica_shift + index) % (broker_count - 1)
    return (first + shift) % broker_count
