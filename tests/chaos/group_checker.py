"""Checks a consumer-group history (pure): the workers' event logs, the producers' history
and the group's final committed offsets.

Input: the events of `tests/support/group_worker.py` (every process's log, merged), the
`History` ops of the producers and the nemesis (`kill-consumer`, `pause-consumer`,
`resume-consumer` carry the worker's `pid`), and the committed offsets read at the end.
Times are CLOCK_MONOTONIC nanoseconds (a worker's `mono_ns`, an op's `time`), one clock
for every process of the machine. A member is one worker process (its pid).

Ownership: a member owns a partition from its `assigned` event until its `revoked` or
`lost` event, its `stop`, or its kill -9. A member that is paused and then learns it lost
its partitions (`lost`: the coordinator fenced it while it was stopped) stopped owning
them when it was paused; what it does after it resumes and before it learns it (records
it had fetched) is the zombie window the README describes: counted (`zombie-records`),
not a violation, but a commit it sends then must be refused.

Violations (each check fails on a history that has the anomaly, `test_group_checker.py`):

- `concurrent-owners`: two members owned one partition at the same time;
- `unowned-record`: a member processed a record of a partition it did not own (outside
  its zombie window);
- `unprocessed`: a record acknowledged to a producer was never processed by the group;
- `wrong-record`: a processed record is not the acknowledged one at that offset;
- `commit-backwards`: a commit succeeded with an offset below one that had succeeded
  before it was sent;
- `commit-lost`: the final committed offset is below an offset whose commit succeeded;
- `zombie-commit`: a commit succeeded for a partition its member did not own;
- `resume-mismatch`: a member's first record of a partition it was given is not at the
  group's committed offset at that time (the last successful commit, or one that may
  have landed: in flight then, or of unknown outcome; offset 0 when none).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from tests.chaos.history import Op

Event = dict[str, Any]

KILL = "kill-consumer"
PAUSE = "pause-consumer"
RESUME = "resume-consumer"

VIOLATIONS = (
    "concurrent-owners",
    "unowned-record",
    "unprocessed",
    "wrong-record",
    "commit-backwards",
    "commit-lost",
    "zombie-commit",
    "resume-mismatch",
)


class Interval(msgspec.Struct, frozen=True, kw_only=True):
    """One member's ownership of one partition: [start_ns, end_ns); `raw_end_ns` is when
    the member itself learnt it lost the partition (after its zombie window)."""

    pid: int
    name: str
    key: str
    start_ns: int
    end_ns: float
    raw_end_ns: float
    ended_by: str


class Commit(msgspec.Struct, frozen=True, kw_only=True):
    """One commit: `outcome` ok / fail / info, or `unknown` (its process died first)."""

    pid: int
    offsets: dict[str, int]
    invoke_ns: int
    done_ns: float
    outcome: str


class GroupCheckResult(msgspec.Struct, frozen=True, kw_only=True):
    valid: bool
    violations: dict[str, list[dict[str, Any]]]
    stats: dict[str, int]

    def to_text(self) -> str:
        lines = [f"group check: {'VALID' if self.valid else 'INVALID'}", f"stats: {self.stats}"]
        for kind, found in self.violations.items():
            if found:
                lines.append(f"{kind}: {len(found)}")
                lines.extend(f"  {json.dumps(v, sort_keys=True)}" for v in found[:16])
        return "\n".join(lines)

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "group-results.json").write_bytes(msgspec.json.encode(self))
        (directory / "group-results.txt").write_text(self.to_text() + "\n")


def key_of(tp: Sequence[Any]) -> str:
    return f"{tp[0]}/{tp[1]}"


def read_events(paths: Iterable[Path]) -> list[Event]:
    """Every worker log's events, in monotonic-time order; a line cut short by a kill -9
    (the last of its file) is skipped."""
    events: list[Event] = []
    for path in paths:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                if number != len(lines):
                    raise ValueError(f"{path}:{number}: not JSON") from None
    return sorted(events, key=lambda e: e["mono_ns"])


def _nemesis(ops: Sequence[Op], action: str) -> dict[int, list[int]]:
    """pid -> times of one nemesis action on consumer processes."""
    out: dict[int, list[int]] = defaultdict(list)
    for op in ops:
        if op.get("f") == "nemesis" and op.get("value") == action and "pid" in op:
            out[int(op["pid"])].append(int(op["time"]))
    return out


def ownership(events: Sequence[Event], ops: Sequence[Op]) -> list[Interval]:
    """Every member's ownership intervals (see the module docstring)."""
    kills = _nemesis(ops, KILL)
    pauses = _nemesis(ops, PAUSE)
    open_: dict[tuple[int, str], tuple[str, int]] = {}
    out: list[Interval] = []

    def close(pid: int, key: str, end_ns: float, ended_by: str) -> None:
        name, start = open_.pop((pid, key))
        end = end_ns
        if ended_by == "lost":
            paused = [t for t in pauses.get(pid, []) if start <= t < end_ns]
            if paused:
                end = min(paused)
        out.append(
            Interval(
                pid=pid,
                name=name,
                key=key,
                start_ns=start,
                end_ns=end,
                raw_end_ns=end_ns,
                ended_by=ended_by,
            )
        )

    for event in events:
        pid, kind = int(event["pid"]), event["event"]
        if kind == "assigned":
            for tp in event["partitions"]:
                open_[(pid, key_of(tp))] = (event["name"], int(event["mono_ns"]))
        elif kind in ("revoked", "lost"):
            for tp in event["partitions"]:
                if (pid, key_of(tp)) in open_:
                    close(pid, key_of(tp), int(event["mono_ns"]), kind)
        elif kind == "stop":
            for pid_, key in [k for k in open_ if k[0] == pid]:
                close(pid_, key, int(event["mono_ns"]), "stop")
    for pid, key in list(open_):
        killed = [t for t in kills.get(pid, []) if t >= open_[(pid, key)][1]]
        if killed:
            close(pid, key, min(killed), "kill")
        else:
            close(pid, key, math.inf, "end")
    return sorted(out, key=lambda i: (i.key, i.start_ns))


def commits(events: Sequence[Event], ops: Sequence[Op]) -> list[Commit]:
    """Every commit, its invoke paired with its member's next outcome (one in flight per
    member); an invoke its process never completed has outcome `unknown`."""
    pending: dict[int, Event] = {}
    out: list[Commit] = []
    for event in events:
        if event["event"] != "commit":
            continue
        pid = int(event["pid"])
        if event["type"] == "invoke":
            if pid in pending:  # cannot happen with one commit in flight: keep it unknown
                out.append(_commit(pending.pop(pid), math.inf, "unknown"))
            pending[pid] = event
        elif pid in pending:
            out.append(_commit(pending.pop(pid), int(event["mono_ns"]), event["type"]))
    out.extend(_commit(invoke, math.inf, "unknown") for invoke in pending.values())
    return sorted(out, key=lambda c: c.invoke_ns)


def _commit(invoke: Event, done_ns: float, outcome: str) -> Commit:
    return Commit(
        pid=int(invoke["pid"]),
        offsets={k: int(v) for k, v in invoke["offsets"].items()},
        invoke_ns=int(invoke["mono_ns"]),
        done_ns=done_ns,
        outcome=outcome,
    )


def acknowledged(ops: Sequence[Op]) -> dict[tuple[str, int], int]:
    """(key, offset) -> value of every send acknowledged to a producer."""
    out: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.get("f") == "send" and op["type"] == "ok":
            for mop in op["value"]:
                offset, value = mop[2]
                out[(mop[1], int(offset))] = int(value)
    return out


def _covering(intervals: Sequence[Interval], t: int) -> Interval | None:
    return next((i for i in intervals if i.start_ns <= t < i.raw_end_ns), None)


def check_group(
    events: Sequence[Event], ops: Sequence[Op], final_committed: dict[str, int]
) -> GroupCheckResult:
    """Every check of the module docstring over one scenario's history."""
    found: dict[str, list[dict[str, Any]]] = {kind: [] for kind in VIOLATIONS}
    intervals = ownership(events, ops)
    by_owner: dict[tuple[int, str], list[Interval]] = defaultdict(list)
    by_key: dict[str, list[Interval]] = defaultdict(list)
    for interval in intervals:
        by_owner[(interval.pid, interval.key)].append(interval)
        by_key[interval.key].append(interval)

    for key, owned in by_key.items():
        for n, a in enumerate(owned):
            for b in owned[n + 1 :]:
                if a.pid != b.pid and a.start_ns < b.end_ns and b.start_ns < a.end_ns:
                    found["concurrent-owners"].append(
                        {"key": key, "first": a.name, "second": b.name, **_spans(a, b)}
                    )

    acked = acknowledged(ops)
    processed: set[tuple[str, int]] = set()
    first_of: dict[Interval, Event] = {}
    zombie_records = 0
    for event in events:
        if event["event"] != "record":
            continue
        key, offset, t = key_of(event["tp"]), int(event["offset"]), int(event["mono_ns"])
        processed.add((key, offset))
        expected = acked.get((key, offset))
        if expected is not None and expected != event["value"]:
            found["wrong-record"].append(
                {"key": key, "offset": offset, "value": event["value"], "acked": expected}
            )
        covering = _covering(by_owner.get((int(event["pid"]), key), []), t)
        if covering is None:
            found["unowned-record"].append(
                {"key": key, "offset": offset, "member": event["name"], "mono_ns": t}
            )
            continue
        if t >= covering.end_ns:
            zombie_records += 1
        first_of.setdefault(covering, event)
    for key, offset in sorted(set(acked) - processed):
        found["unprocessed"].append({"key": key, "offset": offset, "value": acked[(key, offset)]})

    every = commits(events, ops)
    _check_commits(every, by_owner, final_committed, found)
    resumes_from_commits = _check_resumes(every, first_of, found)

    stats = {
        "intervals": len(intervals),
        "records": sum(1 for e in events if e["event"] == "record"),
        "distinct_records": len(processed),
        "acknowledged": len(acked),
        "commits_ok": sum(1 for c in every if c.outcome == "ok"),
        "commits_refused": sum(1 for c in every if c.outcome == "fail"),
        "commits_unknown": sum(1 for c in every if c.outcome in ("info", "unknown")),
        "zombie_records": zombie_records,
        "resumes_checked": len(first_of),
        "resumes_from_commits": resumes_from_commits,
        "members": len({int(e["pid"]) for e in events}),
    }
    return GroupCheckResult(
        valid=not any(found.values()),
        violations={k: v for k, v in found.items() if v},
        stats=stats,
    )


def _spans(a: Interval, b: Interval) -> dict[str, Any]:
    return {
        "first_span": [a.start_ns, a.end_ns if a.end_ns != math.inf else None, a.ended_by],
        "second_span": [b.start_ns, b.end_ns if b.end_ns != math.inf else None, b.ended_by],
    }


def _check_commits(
    every: Sequence[Commit],
    by_owner: dict[tuple[int, str], list[Interval]],
    final_committed: dict[str, int],
    found: dict[str, list[dict[str, Any]]],
) -> None:
    succeeded = [c for c in every if c.outcome == "ok"]
    for later in succeeded:
        for key, offset in later.offsets.items():
            before = [
                c.offsets[key]
                for c in succeeded
                if key in c.offsets and c.done_ns < later.invoke_ns
            ]
            if before and offset < max(before):
                found["commit-backwards"].append(
                    {"key": key, "offset": offset, "earlier": max(before), "pid": later.pid}
                )
            owned = by_owner.get((later.pid, key), [])
            if not any(i.start_ns <= later.invoke_ns < i.end_ns for i in owned):
                found["zombie-commit"].append(
                    {"key": key, "offset": offset, "pid": later.pid, "invoke_ns": later.invoke_ns}
                )
    highest: dict[str, int] = {}
    for commit in succeeded:
        for key, offset in commit.offsets.items():
            highest[key] = max(highest.get(key, -1), offset)
    for key, offset in sorted(highest.items()):
        final = final_committed.get(key, -1)
        if final < offset:
            found["commit-lost"].append({"key": key, "final": final, "committed": offset})


def _check_resumes(
    every: Sequence[Commit],
    first_of: dict[Interval, Event],
    found: dict[str, list[dict[str, Any]]],
) -> int:
    """Checks each first record of an ownership; returns how many of them were compared
    with a committed offset (the others with offset 0: nothing committed yet)."""
    from_commits = 0
    for interval, event in first_of.items():
        key, start = interval.key, interval.start_ns
        done = [
            c.offsets[key]
            for c in every
            if c.outcome == "ok" and key in c.offsets and c.done_ns < start
        ]
        base = max(done, default=0)
        # Commits that may have landed by then without the checker knowing: sent before
        # and answered after, or never answered for sure (a timeout, a killed process).
        in_flight = {
            c.offsets[key]
            for c in every
            if key in c.offsets
            and c.invoke_ns < start
            and (c.outcome in ("info", "unknown") or (c.outcome == "ok" and c.done_ns >= start))
        }
        allowed = {base} | {o for o in in_flight if o >= base}
        from_commits += bool(done or in_flight)
        if int(event["offset"]) not in allowed:
            found["resume-mismatch"].append(
                {
                    "key": key,
                    "member": interval.name,
                    "first_offset": int(event["offset"]),
                    "committed": sorted(allowed),
                    "assigned_ns": start,
                }
            )
    return from_commits
