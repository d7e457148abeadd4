"""Kafka-compatible partitioning (PURE): murmur2 for keyed records, sticky for unkeyed.

`murmur2` is a bit-for-bit port of Kafka's `org.apache.kafka.common.utils.Utils.murmur2`
(seed 0x9747b28c, signed 32-bit result), and `default_partition` is the Java default
partitioner's `toPositive(murmur2(key)) % num_partitions`, so keyed records land on the
same partition as with a Java, kafka-python or aiokafka producer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Final, TypeAlias

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK32: Final = 0xFFFFFFFF

#: A user partitioner: (key bytes or None, all partitions, available partitions) -> partition.
Partitioner: TypeAlias = Callable[[bytes | None, Sequence[int], Sequence[int]], int]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` as a signed 32-bit int (Java `int`)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - (length & 3)
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    extra = length & 3
    if extra == 3:
        h ^= data[whole + 2] << 16
    if extra >= 2:
        h ^= data[whole + 1] << 8
    if extra >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not `abs`)."""
    return value & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class DefaultPartitioner:
    """murmur2 for keyed records; sticky partitioning for unkeyed ones (KIP-480).

    Unkeyed records stick to one partition until the producer closes the batch being
    filled there (`on_new_batch`), then move to another available partition, so that
    unkeyed traffic forms full batches instead of one small batch per partition.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        #: topic -> the partition unkeyed records go to now (read it, never write it).
        self.sticky: dict[str, int] = {}

    def __call__(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available: Sequence[int],
    ) -> int:
        if key is not None:
            return default_partition(key, len(all_partitions))
        current = self.sticky.get(topic)
        if current is not None:
            return current
        return self._choose(topic, all_partitions, available, avoid=None)

    def reset(self, topic: str) -> None:
        """Forget the sticky partition of `topic` (its partition list changed)."""
        self.sticky.pop(topic, None)

    def on_new_batch(
        self, topic: str, previous: int, all_partitions: Sequence[int], available: Sequence[int]
    ) -> None:
        """The batch on `previous` was closed: stick to another partition from now on."""
        if self.sticky.get(topic) == previous:
            self._choose(topic, all_partitions, available, avoid=previous)

    def _choose(
        self,
        topic: str,
        all_partitions: Sequence[int],
        available: Sequence[int],
        avoid: int | None,
    ) -> int:
        pool = list(available) or list(all_partitions)
        if len(pool) > 1 and avoid is not None:
            pool = [p for p in pool if p != avoid] or pool
        chosen = pool[self._rng.randrange(len(pool))]
        self.sticky[topic] = chosen
        return chosen
