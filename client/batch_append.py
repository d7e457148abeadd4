"""The `send_batch()` path of placing records: the records of a call are checked,
serialized and partitioned with a few C-level passes, grouped by partition, and
appended a batch at a time (`RecordAccumulator.append_many`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

from client.accumulator import RECORD_OVERHEAD_BYTES, RecordAccumulator
from client.errors import MessageSizeTooLargeError
from client.futures import BatchSlice, FutureBatchMetadata
from client.partitioner import DefaultPartitioner, Partitioner, default_partition
from client.record_args import (
    HasView,
    Headers,
    Serializer,
    TopicRoute,
    bad_partition,
    bad_timestamp,
    header_pairs,
    to_bytes,
)
from client.records import TopicPartition

_time_ns = time.time_ns


class BatchGroup(NamedTuple):
    """The records of a `send_batch()` call bound for one partition, in call order."""

    tp: TopicPartition
    keys: list[bytes | None] | None
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes]] | None] | None
    sizes: list[int]


class BatchPlan:
    """A `send_batch()` call being appended: its groups, how far each got, the batch
    slices its records went to. `fill` may take several rounds (waiting for buffer space
    between them); the future exists once every record is appended."""

    def __init__(
        self,
        topic: str,
        timestamp_ms: int,
        batch_size: int,
        groups: list[BatchGroup],
        order: list[int] | None,
    ) -> None:
        self.topic = topic
        self.timestamp_ms = timestamp_ms
        self.batch_size = batch_size
        self.groups = groups
        self.order = order
        self.group_index = 0
        self.taken = 0  # records of the current group already appended
        self.slices: list[BatchSlice] = []

    @property
    def done(self) -> bool:
        return self.group_index >= len(self.groups)

    def future(self) -> FutureBatchMetadata:
        return FutureBatchMetadata(self.slices, self.order)


class BatchAppending:
    """Mixin of `client.appender.RecordAppender`: its `send_batch()` path, sharing its
    route cache, partitioner and accumulator."""

    _accumulator: RecordAccumulator
    _max_request_size: int
    _user_partitioner: Partitioner | None
    _partitioner: DefaultPartitioner
    _sticky: dict[str, int]
    _key_serializer: Serializer | None
    _value_serializer: Serializer | None
    _wake: Callable[[], None]
    _refusal: Callable[[], BaseException]
    _topic_cache: dict[str, TopicRoute]
    _route: Callable[[str], TopicRoute | None]
    refused: bool
    conn: HasView

    def _cached_route(self, topic: str) -> TopicRoute | None:
        try:
            route = self._topic_cache.get(topic)
        except TypeError:  # unhashable: no topic name (check_topic_name says so)
            route = None
        if route is None or route.view is not self.conn.view:
            route = self._route(topic)
        return route

    def plan_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Headers] | None,
        partition: int | None,
        timestamp_ms: int | None,
    ) -> BatchPlan | Literal["metadata"]:
        """Check, serialize and partition the records of a `send_batch()` call; raises
        (before anything is appended) for any bad record. "metadata": the topic's
        partitions are not known yet."""
        if self.refused:
            raise self._refusal()
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise TypeError(f"values must be a list of record values, got {type(values).__name__}")
        count = len(values)
        value_list = self._serialized("value", values, self._value_serializer)
        key_list = None
        if keys is not None:
            if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
                raise TypeError(f"keys must be a list (or None), got {type(keys).__name__}")
            if len(keys) != count:
                raise ValueError(f"keys has {len(keys)} items for {count} values")
            key_list = self._serialized("key", keys, self._key_serializer)
            if all(k is None for k in key_list):
                key_list = None
        sizes = [RECORD_OVERHEAD_BYTES + (0 if v is None else len(v)) for v in value_list]
        if key_list is not None:
            sizes = [s + (0 if k is None else len(k)) for s, k in zip(sizes, key_list, strict=True)]
        header_list: list[list[tuple[str, bytes]] | None] | None = None
        if headers is not None:
            if isinstance(headers, str | bytes) or not isinstance(headers, Sequence):
                raise TypeError(
                    "headers must be a list with one list of (str, bytes) pairs (or None) per "
                    f"value, got {type(headers).__name__}"
                )
            if len(headers) != count:
                raise ValueError(f"headers has {len(headers)} items for {count} values")
            header_list = []
            for index, item in enumerate(headers):
                if item:
                    pairs, extra = header_pairs(item)
                    header_list.append(pairs)
                    sizes[index] += extra
                else:
                    header_list.append(None)
        if sizes and max(sizes) > self._max_request_size:
            raise MessageSizeTooLargeError(
                f"record {sizes.index(max(sizes))} of ~{max(sizes)} bytes exceeds "
                f"max_request_size={self._max_request_size}"
            )
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            raise bad_timestamp(timestamp_ms)
        route = self._cached_route(topic)
        if route is None:
            return "metadata"
        targets = self._partitions_of(topic, route, key_list, partition, count)
        if isinstance(targets, int):
            group = BatchGroup(route.tps[targets], key_list, value_list, header_list, sizes)
            return BatchPlan(topic, timestamp_ms, route.batch_size, [group], None)
        by_partition: dict[int, list[int]] = {}
        for index, target in enumerate(targets):
            by_partition.setdefault(target, []).append(index)
        groups = [
            BatchGroup(
                route.tps[target],
                None if key_list is None else [key_list[i] for i in indices],
                [value_list[i] for i in indices],
                None if header_list is None else [header_list[i] for i in indices],
                [sizes[i] for i in indices],
            )
            for target, indices in by_partition.items()
        ]
        order = [i for indices in by_partition.values() for i in indices]
        return BatchPlan(topic, timestamp_ms, route.batch_size, groups, order)

    def _serialized(
        self, what: str, items: Sequence[Any], serializer: Serializer | None
    ) -> list[bytes | None]:
        if serializer is None and set(map(type, items)) <= {bytes, type(None)}:
            return list(items)
        return [to_bytes(what, item, serializer) for item in items]

    def _partitions_of(
        self,
        topic: str,
        route: TopicRoute,
        keys: list[bytes | None] | None,
        partition: int | None,
        count: int,
    ) -> int | list[int]:
        """One partition for every record, or the partition of each record."""
        if partition is not None:
            if route.tps.get(partition) is None:
                raise bad_partition(topic, partition, route)
            return partition
        if self._user_partitioner is not None:
            user = self._user_partitioner
            targets = [user(k, route.partitions, route.available) for k in keys or [None] * count]
        elif keys is None:
            sticky = self._sticky.get(topic)
            if sticky is None:
                sticky = self._partitioner(topic, None, route.partitions, route.available)
            return sticky
        else:
            sticky = self._sticky.get(topic)
            partitions = len(route.partitions)
            targets = []
            for key in keys:
                if key is not None:
                    targets.append(default_partition(key, partitions))
                else:
                    if sticky is None:
                        sticky = self._partitioner(topic, None, route.partitions, route.available)
                    targets.append(sticky)
        for target in set(targets):
            if route.tps.get(target) is None:
                raise bad_partition(topic, target, route)
        return targets

    def fill(self, plan: BatchPlan) -> bool:
        """Append as much of `plan` as the buffer takes now; True when all of it is."""
        accumulator = self._accumulator
        wake = False
        while not plan.done:
            group = plan.groups[plan.group_index]
            start = plan.taken
            slices, taken, woke = accumulator.append_many(
                group.tp,
                plan.timestamp_ms,
                None if group.keys is None else group.keys[start:],
                group.values[start:] if start else group.values,
                None if group.headers is None else group.headers[start:],
                group.sizes[start:] if start else group.sizes,
                plan.batch_size,
            )
            plan.slices.extend(slices)
            wake = wake or woke
            plan.taken += taken
            if plan.taken < len(group.values):
                break
            filled = any(piece.batch.closed for piece in slices)
            if filled and group.keys is None and self._user_partitioner is None:
                # The sticky partition's batch is full: unkeyed records move on (KIP-480).
                self._partitioner.on_new_batch(
                    plan.topic, group.tp.partition, *self._route_lists(plan.topic)
                )
            plan.group_index += 1
            plan.taken = 0
        if wake:
            self._wake()
        return plan.done

    def _route_lists(self, topic: str) -> tuple[list[int], list[int]]:
        route = self._topic_cache.get(topic)
        if route is None:
            return [], []
        return route.partitions, route.available
