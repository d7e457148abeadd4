"""murmur2 and the default partitioner match Kafka's Java client bit for bit."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.partitioner import DefaultPartitioner, default_partition, murmur2, to_positive

# org.apache.kafka.common.utils.UtilsTest.testMurmur2 (values as Java ints).
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# kafka-python / aiokafka test_partitioner.py: partition over 1000 partitions, compared
# there with the Java client's default partitioner.
JAVA_PARTITION_1000 = [
    (b"", 681),
    (b"a", 524),
    (b"ab", 434),
    (b"abc", 107),
    (b"123456789", 566),
    (b"\x00 ", 742),
]


@pytest.mark.parametrize(
    ("key", "expected"), KAFKA_MURMUR2, ids=[k.decode() for k, _ in KAFKA_MURMUR2]
)
def test_murmur2_matches_kafka_utils(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(
    ("key", "expected"), JAVA_PARTITION_1000, ids=[repr(k) for k, _ in JAVA_PARTITION_1000]
)
def test_default_partition_matches_java_client(key: bytes, expected: int) -> None:
    assert default_partition(key, 1000) == expected


def test_to_positive_clears_sign_bit_instead_of_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=500))
def test_default_partition_is_in_range_and_stable(key: bytes, n: int) -> None:
    p = default_partition(key, n)
    assert 0 <= p < n
    assert default_partition(key, n) == p
    assert -(2**31) <= murmur2(key) < 2**31


def test_default_partition_rejects_no_partitions() -> None:
    with pytest.raises(ValueError, match="positive"):
        default_partition(b"k", 0)


def test_keyed_records_use_murmur2() -> None:
    part = DefaultPartitioner(random.Random(1))
    assert part("t", b"abc", list(range(1000)), list(range(1000))) == 107


def test_unkeyed_records_stick_until_a_new_batch() -> None:
    part = DefaultPartitioner(random.Random(7))
    all_partitions = [0, 1, 2, 3]
    first = part("t", None, all_partitions, all_partitions)
    assert all(part("t", None, all_partitions, all_partitions) == first for _ in range(50))
    part.on_new_batch("t", first, all_partitions, all_partitions)
    second = part("t", None, all_partitions, all_partitions)
    assert second != first
    # Another topic's batch does not move this topic.
    part.on_new_batch("other", second, all_partitions, all_partitions)
    assert part("t", None, all_partitions, all_partitions) == second


def test_unkeyed_records_prefer_available_partitions() -> None:
    part = DefaultPartitioner(random.Random(3))
    assert part("t", None, [0, 1, 2], [2]) == 2
