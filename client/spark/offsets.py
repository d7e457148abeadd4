"""Pure offset planning for the Spark source: canonical offset JSON, starting/ending
offset specs, `maxOffsetsPerTrigger` proration, the split of offset ranges into Spark
input partitions.

Nothing here does I/O or imports pyspark. Offsets travel through Spark as JSON dicts
shaped like Spark's Kafka source, `{"topic": {"0": 42, "1": 7}}`; Spark compares them
as strings, so every dict handed to Spark goes through `canonical` (topics sorted,
string partition ids sorted numerically). Inside this module offsets are flat maps
from `(topic, partition)` to an offset.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

import msgspec

from client.spark.errors import SourceOptionError

#: A topic partition as the planner sees it.
TP: TypeAlias = tuple[str, int]
#: Offsets per topic partition.
Offsets: TypeAlias = dict[TP, int]
#: The nested JSON shape Spark stores in its checkpoint.
NestedOffsets: TypeAlias = dict[str, dict[str, Any]]

#: The key of the leader epochs in a checkpointed offset: per partition, the leader
#: epoch of the last record consumed (the record before the offset). `@` cannot start a
#: topic name, so it never clashes with one; offsets without it (written before epochs
#: were kept) still load.
EPOCHS_KEY: Final = "@leaderEpochs"

#: The key under which the source's reported latest offset (a query progress's
#: `latestOffset`) counts the delivered records it found truncated under the query.
TRUNCATED_KEY: Final = "@truncated"

#: Offset placeholders in `startingOffsets` / `endingOffsets` JSON (Kafka's numbering).
EARLIEST: Final = -2
LATEST: Final = -1


class OffsetRange(msgspec.Struct, frozen=True, kw_only=True):
    """Offsets `[start, end)` of one partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class OffsetSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed `startingOffsets` / `endingOffsets` value.

    `kind` is `"earliest"`, `"latest"`, `"specific"` or `"timestamp"`. For
    `"specific"`, `offsets` holds one entry per partition, possibly `EARLIEST` (-2) or
    `LATEST` (-1). For `"timestamp"` (`startingTimestamp`, `...OffsetsByTimestamp`),
    either `timestamp_ms` applies to every partition or `offsets` holds one timestamp
    (ms since the epoch) per partition.
    """

    kind: str
    offsets: Offsets = msgspec.field(default_factory=dict)
    timestamp_ms: int | None = None


# ---- canonical JSON ------------------------------------------------------------------


def nest(offsets: Mapping[TP, int], epochs: Mapping[TP, int] | None = None) -> NestedOffsets:
    """Flat offsets -> the canonical nested dict (topics sorted, partitions sorted
    numerically, string partition ids, int offsets), with the leader epochs of the
    partitions in `epochs` that are also in `offsets` under `EPOCHS_KEY`."""
    out: NestedOffsets = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    kept = {tp: epoch for tp, epoch in (epochs or {}).items() if tp in offsets}
    if kept:
        out[EPOCHS_KEY] = dict(nest(kept))
        out = dict(sorted(out.items()))  # keys stay sorted (a topic may sort before "@")
    return out


def epochs_of(nested: Mapping[str, Any]) -> Offsets:
    """The leader epochs of a checkpointed offset (empty for one written without)."""
    epochs = nested.get(EPOCHS_KEY)
    if epochs is None:
        return {}
    if not isinstance(epochs, Mapping):
        raise ValueError(f"{EPOCHS_KEY} must be an object, got {epochs!r}")
    return flatten(epochs)


def flatten(nested: Mapping[str, Mapping[str, Any]]) -> Offsets:
    """A nested offset dict (as Spark hands it back) -> flat offsets (leader epochs
    under `EPOCHS_KEY` are left out: see `epochs_of`).

    Raises `ValueError` naming the entry when a partition id or offset is not an integer.
    """
    out: Offsets = {}
    for topic, parts in nested.items():
        if str(topic).startswith("@"):
            continue  # EPOCHS_KEY: see epochs_of
        if not isinstance(parts, Mapping):
            raise ValueError(f"offsets for topic {topic!r} must be an object, got {parts!r}")
        for partition, offset in parts.items():
            out[(str(topic), _as_int(partition, f"partition id of topic {topic!r}"))] = _as_int(
                offset, f"offset of {topic}-{partition}"
            )
    return out


def canonical(nested: Mapping[str, Mapping[str, Any]]) -> NestedOffsets:
    """The canonical form of a nested offset dict (see the module docstring)."""
    return nest(flatten(nested), epochs_of(nested))


def to_json(offsets: Mapping[TP, int]) -> str:
    """Canonical JSON text of flat offsets, byte-identical to what Spark writes."""
    return json.dumps(nest(offsets))


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
    raise ValueError(f"{what} must be an integer, got {value!r}")


# ---- starting / ending offsets -------------------------------------------------------


def parse_offset_spec(text: str, *, option: str, ending: bool, streaming: bool) -> OffsetSpec:
    """Parse a `startingOffsets` (`ending=False`) or `endingOffsets` value.

    Mirrors Spark's Kafka source: `earliest`, `latest` or JSON
    `{"topic": {"0": 23, "1": -2}}` with -2 earliest and -1 latest. Batch queries may not
    start at `latest`, and ending offsets may not be `earliest` / -2.
    """
    value = text.strip()
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        if ending and lowered == "earliest":
            raise SourceOptionError(f"{option}=earliest is not allowed: a query cannot end there")
        if not ending and not streaming and lowered == "latest":
            raise SourceOptionError(
                f"{option}=latest is not allowed for batch queries (it would read nothing); "
                "use earliest or JSON offsets"
            )
        return OffsetSpec(kind=lowered)
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(
            f"{option} must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}; cannot parse {text!r}: {exc}'
        ) from exc
    if not isinstance(raw, dict) or not raw:
        raise SourceOptionError(
            f'{option} JSON must be a non-empty object like {{"topic": {{"0": 23}}}}, got {text!r}'
        )
    try:
        offsets = flatten(raw)
    except ValueError as exc:
        raise SourceOptionError(f"{option}: {exc}") from exc
    for (topic, partition), offset in sorted(offsets.items()):
        if partition < 0:
            raise SourceOptionError(f"{option}: partition {partition} of {topic!r} is negative")
        if offset < EARLIEST:
            raise SourceOptionError(
                f"{option}: offset {offset} for {topic}-{partition} is invalid "
                "(use >= 0, -1 for latest or -2 for earliest)"
            )
        if ending and offset == EARLIEST:
            raise SourceOptionError(
                f"{option}: -2 (earliest) is not allowed as an ending offset ({topic}-{partition})"
            )
        if not ending and not streaming and offset == LATEST:
            raise SourceOptionError(
                f"{option}: -1 (latest) is not allowed as a starting offset of a batch query "
                f"({topic}-{partition})"
            )
    return OffsetSpec(kind="specific", offsets=offsets)


def parse_timestamp(text: str, *, option: str) -> OffsetSpec:
    """`startingTimestamp` / `endingTimestamp`: one time (ms since the epoch) for every
    partition."""
    value = text.strip()
    if not value.isdigit():
        raise SourceOptionError(
            f"{option} must be a time in milliseconds since the epoch (>= 0), got {text!r}"
        )
    return OffsetSpec(kind="timestamp", timestamp_ms=int(value))


def parse_timestamps_by_partition(text: str, *, option: str) -> OffsetSpec:
    """`startingOffsetsByTimestamp` / `endingOffsetsByTimestamp`: JSON
    `{"topic": {"0": 1700000000000}}`, one time (ms since the epoch) per partition."""
    hint = f'{option} must be JSON like {{"topic": {{"0": 1700000000000}}}}'
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f"{hint}; cannot parse {text!r}: {exc}") from exc
    if not isinstance(raw, dict) or not raw:
        raise SourceOptionError(f"{hint}, got {text!r}")
    try:
        times = flatten(raw)
    except ValueError as exc:
        raise SourceOptionError(f"{option}: {exc}") from exc
    for (topic, partition), timestamp_ms in sorted(times.items()):
        if partition < 0:
            raise SourceOptionError(f"{option}: partition {partition} of {topic!r} is negative")
        if timestamp_ms < 0:
            raise SourceOptionError(
                f"{option}: timestamp {timestamp_ms} for {topic}-{partition} is negative"
            )
    return OffsetSpec(kind="timestamp", offsets=times)


def _check_covered(spec: OffsetSpec, wanted: list[TP], option: str, what: str) -> None:
    given = set(spec.offsets)
    missing = sorted(set(wanted) - given)
    extra = sorted(given - set(wanted))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not read by this query " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise SourceOptionError(
            f"{option} JSON must give {what} for every partition the query reads: "
            + "; ".join(parts)
        )


def timestamps_to_look_up(spec: OffsetSpec, partitions: Iterable[TP], *, option: str) -> Offsets:
    """The time to look up (ListOffsets by timestamp) for each partition of a
    `"timestamp"` spec; a per-partition JSON must name exactly the partitions read."""
    wanted = sorted(set(partitions))
    if spec.timestamp_ms is not None:
        return dict.fromkeys(wanted, spec.timestamp_ms)
    _check_covered(spec, wanted, option, "a timestamp")
    return {tp: spec.offsets[tp] for tp in wanted}


def resolve_timestamps(
    found: Mapping[TP, int],
    *,
    times: Mapping[TP, int],
    latest: Mapping[TP, int],
    no_match: str,
    option: str,
) -> Offsets:
    """Offsets from a ListOffsets-by-timestamp answer: `found` holds, per partition, the
    first offset whose record is at least as recent as `times` says, or -1 if none is.

    Where none is, `no_match` decides as in Spark's Kafka source: `"latest"` takes the
    high watermark (always for ending offsets; for starting offsets with
    `startingOffsetsByTimestampStrategy=latest`), `"error"` raises a `SourceOptionError`
    naming the partitions.
    """
    out: Offsets = {}
    unmatched: list[TP] = []
    for tp in sorted(times):
        offset = found[tp]
        if offset >= 0:
            out[tp] = offset
        elif no_match == "latest":
            out[tp] = latest[tp]
        else:
            unmatched.append(tp)
    if unmatched:
        raise SourceOptionError(
            f"{option}: no record at or after the given time in "
            + ", ".join(f"{t}-{p} (timestamp {times[(t, p)]})" for t, p in unmatched)
            + "; set startingOffsetsByTimestampStrategy=latest to start at the end instead"
        )
    return out


def resolve_spec(
    spec: OffsetSpec,
    partitions: Iterable[TP],
    *,
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    option: str,
) -> Offsets:
    """Concrete offsets for `partitions` from a spec and the cluster's earliest (log
    start) and latest (high watermark) offsets. (Timestamp specs go through
    `timestamps_to_look_up` and `resolve_timestamps`.)

    A JSON spec must name exactly the partitions being read (as Spark's Kafka source
    requires); anything else is a `SourceOptionError` listing the difference.
    """
    wanted = sorted(set(partitions))
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in wanted}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in wanted}
    if spec.kind != "specific":
        raise ValueError(f"resolve_spec cannot resolve a {spec.kind!r} spec")
    _check_covered(spec, wanted, option, "an offset")
    out: Offsets = {}
    for tp in wanted:
        offset = spec.offsets[tp]
        if offset == EARLIEST:
            out[tp] = earliest[tp]
        elif offset == LATEST:
            out[tp] = latest[tp]
        else:
            out[tp] = offset
    return out


# ---- latest offsets ------------------------------------------------------------------


def cap(latest: Mapping[TP, int], target: Mapping[TP, int] | None) -> Offsets:
    """`latest` limited to an AvailableNow `target` (partitions outside it are dropped)."""
    if target is None:
        return dict(latest)
    return {tp: min(offset, target[tp]) for tp, offset in latest.items() if tp in target}


def total_lag(start: Mapping[TP, int], latest: Mapping[TP, int]) -> int:
    """Records between `start` and `latest` (partitions missing from `start` count from 0)."""
    return sum(max(0, offset - start.get(tp, 0)) for tp, offset in latest.items())


def rate_limit(start: Mapping[TP, int], latest: Mapping[TP, int], max_rows: int) -> Offsets:
    """Spark's Kafka source proration of `maxOffsetsPerTrigger`.

    Each partition with lag gets `max_rows * lag / total_lag` offsets, rounded down, but
    rounded up when that is below one so small partitions are not starved (so a batch
    may exceed `max_rows` by less than the number of partitions, as in Spark).
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    lags = {tp: offset - start.get(tp, 0) for tp, offset in latest.items()}
    total = sum(lag for lag in lags.values() if lag > 0)
    if total < 1:
        return dict(latest)
    out: Offsets = {}
    for tp, until in latest.items():
        begin = start.get(tp, 0)
        lag = lags[tp]
        if lag <= 0:
            out[tp] = until
            continue
        prorate = max_rows * (lag / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(until, begin + step)
    return out


_DURATION_UNITS_MS: Final = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def parse_duration_ms(text: str, *, option: str) -> int:
    """A Spark duration (`"15m"`, `"30s"`, `"500ms"`, `"2h"`; a bare number is ms)."""
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if found is None or found.group(2) not in ("", *_DURATION_UNITS_MS):
        raise SourceOptionError(
            f"{option} must be a duration like '15m', '30s' or '500ms', got {text!r}"
        )
    number, unit = found.groups()
    return int(int(number) * _DURATION_UNITS_MS[unit or "ms"])


def delay_batch(
    *,
    new_records: int,
    min_records: int,
    now_ms: float,
    last_trigger_ms: float | None,
    max_delay_ms: int,
) -> bool:
    """`minOffsetsPerTrigger` as in Spark's Kafka source: skip this trigger while fewer
    than `min_records` records are new, unless `max_delay_ms` has passed since the last
    batch that ran (`last_trigger_ms`; None: none ran yet, so the first one runs)."""
    if new_records >= min_records or last_trigger_ms is None:
        return False
    return now_ms - last_trigger_ms < max_delay_ms


# ---- planning ------------------------------------------------------------------------


def plan_ranges(
    start: Mapping[TP, int], end: Mapping[TP, int], *, earliest: Mapping[TP, int]
) -> tuple[list[OffsetRange], list[OffsetRange]]:
    """Offset ranges to read between two offset maps, and the ranges that went backwards.

    Partitions only in `end` (discovered since `start`) start at `earliest`, as in
    Spark's Kafka source. Returns `(ranges, backwards)`: non-empty ranges sorted by topic
    and partition, and ranges with `end < start` (data loss: the caller fails or skips).
    """
    ranges: list[OffsetRange] = []
    backwards: list[OffsetRange] = []
    for topic, partition in sorted(end):
        tp = (topic, partition)
        begin = start[tp] if tp in start else earliest.get(tp, 0)
        until = end[tp]
        item = OffsetRange(topic=topic, partition=partition, start=begin, end=until)
        if until > begin:
            ranges.append(item)
        elif until < begin:
            backwards.append(item)
    return ranges, backwards


def _cut(item: OffsetRange, parts: int) -> list[OffsetRange]:
    """`item` in `parts` contiguous, nearly equal pieces covering the same offsets."""
    base, extra = divmod(item.size, parts)
    out: list[OffsetRange] = []
    begin = item.start
    for index in range(parts):
        length = base + (1 if index < extra else 0)
        out.append(
            OffsetRange(topic=item.topic, partition=item.partition, start=begin, end=begin + length)
        )
        begin += length
    return out


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None = None
) -> list[OffsetRange]:
    """Split ranges into Spark tasks as Spark's Kafka source does.

    `max_records` (`maxRecordsPerPartition`) first cuts each range into the fewest
    nearly equal pieces of at most that many offsets. Then, if there are fewer than
    `min_partitions` (a hint) pieces, each gets a share of the tasks proportional to its
    size (at least one, at most one per offset) and is cut again. With neither, ranges
    are returned unchanged. The pieces cover exactly the same offsets.
    """
    if max_records is not None:
        ranges = [
            piece for item in ranges for piece in _cut(item, max(1, -(-item.size // max_records)))
        ]
    if min_partitions is None or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    if total <= 0:
        return list(ranges)
    out: list[OffsetRange] = []
    for item in ranges:
        out.extend(_cut(item, max(1, min(item.size, round(item.size * min_partitions / total)))))
    return out
