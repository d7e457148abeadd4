"""The partition timeline as data: rows and lanes from the controller's history and the
brokers' state-change log lines. PURE (no I/O; time is passed in).

Inputs: the controller's `PartitionHistory` (`Admin.describe_partition_history`: every
metadata record that changed the partition, its replicas' brokers and the controller),
and optionally lines of broker or controller logs; lines of the `minikafka.state_change`
logger that name the partition (`[Partition T-P broker=B] became leader at epoch 3 ...`,
`partition T-P: leader 1 -> 2 ...`) become rows of their own, placed by their time stamp.

Outputs: `Timeline.rows` (the text table, in time order) and, per replica broker, its
role over time (`Span`: leader, in the ISR, in the ELR, out of sync; and fenced spells)
plus marks (unclean elections, offline spells, log lines) for the pictures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Final

import msgspec

from client.admin import PartitionHistory, PartitionHistoryEvent

NO_LEADER: Final = -1

#: `2026-11-24 00:17:44,497 INFO minikafka.state_change: <message>` (the processes' format).
_LOG_LINE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2}),(?P<ms>\d{3}) "
    r"(?P<level>[A-Z]+) minikafka\.state_change: (?P<message>.*)$"
)
_BROKER_PREFIX = re.compile(r"^\[Partition (?P<tp>\S+) broker=(?P<broker>-?\d+)\] (?P<text>.*)$")
_NAME_CHARS = "A-Za-z0-9._-"


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the timeline table."""

    time_ms: int
    #: The metadata offset (controller events), None for log lines.
    offset: int | None
    #: "controller", "broker N" or the log file's name.
    source: str
    kinds: tuple[str, ...]
    detail: str
    #: The partition after this row (partition events only).
    leader: int | None = None
    leader_epoch: int | None = None
    isr: tuple[int, ...] | None = None
    elr: tuple[int, ...] | None = None
    state: str = ""
    replayed: bool = False
    level: str = ""


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """A broker's role in the partition from `start_ms` to `end_ms`."""

    broker: int
    start_ms: int
    end_ms: int
    #: "leader", "isr", "elr", "replica" (out of sync) or "fenced".
    role: str
    leader_epoch: int


class Mark(msgspec.Struct, frozen=True, kw_only=True):
    time_ms: int
    broker: int  # -1: the partition as a whole
    #: "unclean-election", "offline", "leader", "log", "broker-fenced", "broker-unfenced", ...
    kind: str
    label: str


class Timeline(msgspec.Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    brokers: tuple[int, ...]
    rows: tuple[Row, ...]
    spans: tuple[Span, ...]
    marks: tuple[Mark, ...]
    start_ms: int
    end_ms: int
    truncated: bool
    has_elr: bool


def history_rows(history: PartitionHistory) -> list[Row]:
    """The controller's events as rows (partition state filled on partition events)."""
    rows: list[Row] = []
    for event in history.events:
        partition_event = event.broker_id < 0 and "controller" not in event.kinds
        rows.append(
            Row(
                time_ms=event.time_ms,
                offset=event.metadata_offset,
                source="controller",
                kinds=tuple(event.kinds),
                detail=event.detail,
                leader=event.leader if partition_event else None,
                leader_epoch=event.leader_epoch if partition_event else None,
                isr=tuple(event.isr) if partition_event else None,
                elr=tuple(event.elr) if partition_event and event.elr is not None else None,
                state=event.state if partition_event else "",
                replayed=event.replayed,
            )
        )
    return rows


def _local_ms(date: str, clock: str, millis: str) -> int:
    """The processes log local time (Python logging's default)."""
    stamp = datetime.strptime(f"{date} {clock}", "%Y-%m-%d %H:%M:%S")
    return int(stamp.timestamp()) * 1000 + int(millis)


def log_rows(lines: Iterable[str], topic: str, partition: int, *, source: str) -> list[Row]:
    """The state-change log lines of `lines` that name partition `topic`-`partition`."""
    name = re.compile(
        rf"(?<![{_NAME_CHARS}]){re.escape(f'{topic}-{partition}')}(?![{_NAME_CHARS}])"
    )
    rows: list[Row] = []
    for line in lines:
        match = _LOG_LINE.match(line.rstrip("\n"))
        if match is None:
            continue
        message = match["message"]
        if not name.search(message):
            continue
        where = source
        prefixed = _BROKER_PREFIX.match(message)
        if prefixed is not None:
            where = f"broker {prefixed['broker']}"
            message = prefixed["text"]
        rows.append(
            Row(
                time_ms=_local_ms(match["date"], match["time"], match["ms"]),
                offset=None,
                source=where,
                kinds=("log",),
                detail=message,
                level=match["level"],
            )
        )
    return rows


def _roles(event: PartitionHistoryEvent, broker: int) -> str:
    if event.leader == broker:
        return "leader"
    if broker in event.isr:
        return "isr"
    if event.elr is not None and broker in event.elr:
        return "elr"
    return "replica"


def build_timeline(
    history: PartitionHistory, extra_rows: Sequence[Row] = (), *, now_ms: int
) -> Timeline:
    """Rows, lanes and marks of one partition, from its history up to `now_ms`."""
    partition_events = [
        e for e in history.events if e.broker_id < 0 and "controller" not in e.kinds
    ]
    brokers = sorted({b for e in partition_events for b in e.replicas})
    rows = sorted(
        [*history_rows(history), *extra_rows],
        key=lambda row: (row.time_ms, row.offset if row.offset is not None else -1),
    )
    times = [row.time_ms for row in rows] or [now_ms]
    start_ms = min(times)
    end_ms = max(max(times), now_ms)
    spans: list[Span] = []
    marks: list[Mark] = []
    for index, event in enumerate(partition_events):
        until = partition_events[index + 1].time_ms if index + 1 < len(partition_events) else end_ms
        for broker in event.replicas:
            spans.append(
                Span(
                    broker=broker,
                    start_ms=event.time_ms,
                    end_ms=until,
                    role=_roles(event, broker),
                    leader_epoch=event.leader_epoch,
                )
            )
        for kind in ("unclean-election", "offline", "leader"):
            if kind in event.kinds:
                marks.append(
                    Mark(
                        time_ms=event.time_ms,
                        broker=event.leader if kind != "offline" else NO_LEADER,
                        kind=kind,
                        label=event.detail or kind,
                    )
                )
    fenced_since: dict[int, int] = {}
    for event in history.events:
        if event.broker_id < 0 or event.broker_id not in brokers:
            continue
        kinds = set(event.kinds)
        if kinds & {"broker-fenced", "broker-registered"} and "broker-unfenced" not in kinds:
            fenced_since.setdefault(event.broker_id, event.time_ms)
        if "broker-unfenced" in kinds and event.broker_id in fenced_since:
            since = fenced_since.pop(event.broker_id)
            spans.append(
                Span(
                    broker=event.broker_id,
                    start_ms=since,
                    end_ms=event.time_ms,
                    role="fenced",
                    leader_epoch=-1,
                )
            )
        marks.extend(
            Mark(time_ms=event.time_ms, broker=event.broker_id, kind=kind, label=event.detail)
            for kind in event.kinds
        )
    for broker, since in fenced_since.items():
        spans.append(
            Span(broker=broker, start_ms=since, end_ms=end_ms, role="fenced", leader_epoch=-1)
        )
    for row in extra_rows:
        broker = -1
        if row.source.startswith("broker "):
            broker = int(row.source.removeprefix("broker "))
        marks.append(Mark(time_ms=row.time_ms, broker=broker, kind="log", label=row.detail))
    return Timeline(
        topic=history.topic,
        partition=history.partition,
        brokers=tuple(brokers),
        rows=tuple(rows),
        spans=tuple(spans),
        marks=tuple(sorted(marks, key=lambda mark: mark.time_ms)),
        start_ms=start_ms,
        end_ms=end_ms,
        truncated=history.truncated,
        has_elr=any(e.elr is not None for e in partition_events),
    )
