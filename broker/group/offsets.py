"""PURE committed offsets: where a group's offsets live, how they are written as records of
the internal topic `__consumer_offsets`, and how a coordinator rebuilds them by replay.

- **Placement**: a group belongs to partition `coordinator_partition(group_id, N)` of
  `__consumer_offsets`, Kafka's formula: `(Java String.hashCode(group_id) & 0x7fffffff) % N`
  (the hash of the group id's UTF-16 code units, `h = 31 * h + unit` in 32-bit arithmetic),
  so a group lands on the partition it would have in Kafka. N is the topic's partition count
  as created (never changed afterwards). The group's coordinator is that partition's leader.
- **Records**: key `["offset", group, topic, partition]`, value an `OffsetRecord` (msgpack);
  a value of nil is a tombstone (the offset was deleted). The last record of a key wins, so
  replaying a partition from its start rebuilds every group's offsets exactly as they were
  acknowledged; nothing is kept outside the log.
- **Membership**: key `["group", group, "", -1]`, value the whole `Group` (members,
  epochs, assignments, target) after each transition that changed more than deadlines;
  nil when its last member left. A new coordinator replays them (`replay_groups`) and
  restarts every member's deadlines from its load (`membership.restart_deadlines`), so
  members keep their epochs and partitions across a coordinator change.
- **Compaction** (`snapshot`, `compaction_due`): Kafka compacts `__consumer_offsets`;
  minikafka instead appends a snapshot of a partition's live keys (one record per
  committed offset and per group, the values replay would give) and moves the log start
  offset to it, once the partition holds `min_records` records and more than twice its
  live keys; replaying the snapshot alone gives the same state, so a load reads O(live
  keys + min_records) records instead of the whole history.
- **Leader epoch**: a committed offset keeps the leader epoch of the record it points after
  (-1 when the consumer does not know it), so a consumer resuming after an unclean election
  can detect that the log was truncated below its position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from broker.group.model import Group, TopicPartition
from minikafka.errors import ErrorCode

OFFSETS_TOPIC = "__consumer_offsets"
_KEY_KIND_OFFSET = "offset"
_KEY_KIND_GROUP = "group"


class OffsetRecord(msgspec.Struct, frozen=True, kw_only=True):
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


class OffsetKey(msgspec.Struct, frozen=True, array_like=True):
    kind: str
    group_id: str
    topic: str
    partition: int


#: group id -> partition -> committed offset.
Offsets = dict[str, dict[TopicPartition, OffsetRecord]]

_key_decoder = msgspec.msgpack.Decoder(OffsetKey)
_value_decoder = msgspec.msgpack.Decoder(OffsetRecord | None)
_group_decoder = msgspec.msgpack.Decoder(Group)
_encoder = msgspec.msgpack.Encoder()


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: over UTF-16 code units, signed 32-bit."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + int.from_bytes(encoded[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def coordinator_partition(group_id: str, partition_count: int) -> int:
    """The `__consumer_offsets` partition of `group_id` (Kafka's `partitionFor`)."""
    if partition_count <= 0:
        raise ValueError(f"partition_count must be positive, got {partition_count}")
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partition_count


def encode_commit(
    group_id: str, tp: TopicPartition, record: OffsetRecord | None
) -> tuple[bytes, bytes | None]:
    """(key, value) of one commit (`None`: a tombstone)."""
    key = _encoder.encode(OffsetKey(_KEY_KIND_OFFSET, group_id, tp.topic, tp.partition))
    return key, None if record is None else _encoder.encode(record)


def decode_commit(
    key: bytes | None, value: bytes | None
) -> tuple[str, TopicPartition, OffsetRecord | None] | None:
    """The commit a record holds, or None for a record that is not a commit (another kind
    of key, written by a newer version: skipped, never fatal)."""
    if key is None:
        return None
    try:
        decoded = _key_decoder.decode(key)
    except msgspec.DecodeError:
        return None
    if decoded.kind != _KEY_KIND_OFFSET:
        return None
    record = None if value is None else _value_decoder.decode(value)
    return decoded.group_id, TopicPartition(decoded.topic, decoded.partition), record


def encode_group(group_id: str, group: Group | None) -> tuple[bytes, bytes | None]:
    """(key, value) of a group's membership record (`None`: a tombstone, no members)."""
    key = _encoder.encode(OffsetKey(_KEY_KIND_GROUP, group_id, "", -1))
    return key, None if group is None else _encoder.encode(group)


def replay_groups(
    groups: Mapping[str, Group], records: Iterable[tuple[bytes | None, bytes | None]]
) -> dict[str, Group]:
    """`groups` after the membership records among (key, value), in log order: the last
    record of a group wins, a tombstone removes it; other records are skipped."""
    result = dict(groups)
    for key, value in records:
        if key is None:
            continue
        try:
            decoded = _key_decoder.decode(key)
        except msgspec.DecodeError:
            continue
        if decoded.kind != _KEY_KIND_GROUP:
            continue
        if value is None:
            result.pop(decoded.group_id, None)
        else:
            result[decoded.group_id] = _group_decoder.decode(value)
    return result


def replay(
    offsets: Mapping[str, Mapping[TopicPartition, OffsetRecord]],
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> Offsets:
    """`offsets` after the (key, value) records, in log order: the last record of a key
    wins, a tombstone removes it, a group left without offsets disappears."""
    result: Offsets = {group: dict(parts) for group, parts in offsets.items()}
    for key, value in records:
        commit = decode_commit(key, value)
        if commit is None:
            continue
        group_id, tp, record = commit
        if record is None:
            result.get(group_id, {}).pop(tp, None)
            if group_id in result and not result[group_id]:
                del result[group_id]
        else:
            result.setdefault(group_id, {})[tp] = record
    return result


def snapshot(
    offsets: Mapping[str, Mapping[TopicPartition, OffsetRecord]], groups: Mapping[str, Group]
) -> list[tuple[bytes, bytes | None]]:
    """The records that, replayed on their own, give exactly `offsets` and `groups`: one per
    live key, in a stable order (groups, then offsets, sorted), no tombstones."""
    pairs: list[tuple[bytes, bytes | None]] = [
        encode_group(group_id, groups[group_id]) for group_id in sorted(groups)
    ]
    for group_id in sorted(offsets):
        committed = offsets[group_id]
        pairs.extend(encode_commit(group_id, tp, committed[tp]) for tp in sorted(committed))
    return pairs


def compaction_due(*, records_in_log: int, live_keys: int, min_records: int) -> bool:
    """Whether a partition holding `records_in_log` records (log end - log start) for
    `live_keys` live keys should be compacted: at least `min_records`, and more than twice
    the live keys (so each compaction at least halves it, and a load never reads more
    than about max(min_records, 2 * live keys) records plus what came since)."""
    return records_in_log >= min_records and records_in_log > 2 * live_keys


def coordinator_lease_holds(
    *, follower_fetch_ms: Iterable[int], min_insync_replicas: int, now_ms: int, lease_ms: int
) -> bool:
    """Whether the leader of a `__consumer_offsets` partition may still act as the
    coordinator of its groups: at least `min_insync_replicas - 1` followers fetched from it
    (in its leader epoch) within the last `lease_ms` (`replica.lag.time.max.ms`).

    A leader cut off from its followers (and the controller) keeps thinking it leads, and
    would answer heartbeats from memory while a new leader coordinates the same groups:
    members talking to it would keep partitions the new coordinator gives to others. A
    new coordinator can only hand out partitions it has written with acks=all, i.e. with
    `min_insync_replicas - 1` followers fetching from it, not from the old leader; so once
    the old one has not heard from that many followers for `lease_ms` it stops. The new
    one fences a member for silence at the earliest a session timeout after it took over
    (it restarts every member's deadline when it loads), so members never have two
    coordinators at once as long as `lease_ms` is below their session timeout.
    """
    recent = sum(1 for fetched in follower_fetch_ms if now_ms - fetched <= lease_ms)
    return recent + 1 >= min_insync_replicas


def commit_error(append_error: ErrorCode) -> ErrorCode:
    """What a commit answers when its append to `__consumer_offsets` failed (Kafka's
    mapping in GroupMetadataManager): the client then finds the coordinator again, or
    retries the same coordinator, and never mistakes it for a rejected offset."""
    if append_error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.LEADER_NOT_AVAILABLE,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if append_error in (
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
    ):
        return ErrorCode.NOT_COORDINATOR
    return append_error
