"""Checks and conversions of the records given to `send()` and `send_batch()` (bytes
or serialized, headers, partition and timestamp arguments), and the route a topic's
records take under one metadata view (`TopicRoute`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from client.metadata import ClusterView
from client.records import TopicPartition

Serializer = Callable[[Any], bytes | None]
Headers = Sequence[tuple[str, bytes]] | None


class HasView(Protocol):
    """Where the current cluster view is read (the producer's connections)."""

    view: ClusterView


class TopicRoute(NamedTuple):
    """What `send()` needs to place a record of one topic, cached per metadata view."""

    view: ClusterView
    partitions: list[int]
    available: list[int]
    tps: dict[int, TopicPartition]
    batch_size: int


def header_pairs(headers: Any) -> tuple[list[tuple[str, bytes]], int]:
    """`headers` as a list of `(str, bytes)` pairs and their estimated size; a clear
    `TypeError` for anything else (a dict, a pair of the wrong shape)."""
    if isinstance(headers, str | bytes | dict) or not isinstance(headers, Sequence):
        raise TypeError(
            "headers must be a list of (str, bytes) pairs, e.g. [('trace-id', b'42')], got "
            f"{type(headers).__name__}"
        )
    pairs: list[tuple[str, bytes]] = []
    size = 0
    for pair in headers:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise TypeError(f"each header must be a (str, bytes) pair, got {pair!r}")
        name, data = pair
        if not isinstance(name, str) or not isinstance(data, bytes):
            raise TypeError(
                f"each header must be a (str, bytes) pair, got ({type(name).__name__}, "
                f"{type(data).__name__})"
            )
        size += len(name) + len(data) + 4
        pairs.append((name, data))
    return pairs, size


def to_bytes(what: str, data: Any, serializer: Serializer | None) -> bytes | None:
    """`data` (serialized first when a serializer is given) as bytes or None, with
    kafka-python's semantics; a clear `TypeError` for anything else."""
    if serializer is not None:
        data = serializer(data)
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(
        f"{what} must be bytes or None, got {type(data).__name__}; "
        f"pass {what}_serializer= to convert it (e.g. str.encode)"
    )


def bad_partition(topic: str, partition: object, route: TopicRoute) -> Exception:
    if isinstance(partition, bool) or not isinstance(partition, int):
        return TypeError(
            f"partition must be an int or None, got {type(partition).__name__} {partition!r}"
        )
    return ValueError(
        f"partition {partition} of {topic!r} does not exist (partitions {route.partitions})"
    )


def bad_timestamp(timestamp_ms: object) -> TypeError:
    return TypeError(
        "timestamp_ms must be an int >= 0 (milliseconds since the epoch) or None, got "
        f"{type(timestamp_ms).__name__} {timestamp_ms!r}"
    )
