"""Where acks=all latency goes: per-stage times of each record from the brokers' stage traces.

The brokers run with `MINIKAFKA_STAGE_TRACE` (`minikafka.stage_trace`) and log, with the
wall clock the benchmark's records carry, when the leader received and appended each
produce, when each follower fetch arrived and was answered with records, when each
follower received and appended them, when the HW advanced and when the produce was
answered. The latency consumer adds, per record, its offset, intended send time and
receive time. `analyze` joins them (pure) into the stages of every record:

    client queue + linger + request   intended send -> leader received the produce
    leader append                      received -> appended
    wait for follower fetch            appended -> a fetch answer carrying it left the leader
    transfer to follower               answer left -> follower received it
    follower append                    received -> appended on the follower
    follower's next fetch              appended -> the leader got the fetch reporting it
    HW advance                         that fetch -> the HW covered the produce
    consumer fetch + delivery          HW advance -> the consumer had the record
    (response to producer)             HW advance -> the produce was answered (parallel)

The follower stages are those of the follower whose report came last (the one the HW
waited for). The stages up to "consumer" add up to the record's end-to-end latency.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from pathlib import Path

import msgspec

from benchmarks import stats

STAGES: tuple[str, ...] = (
    "client queue + linger + request",
    "leader append",
    "wait for follower fetch",
    "transfer to follower",
    "follower append",
    "follower's next fetch",
    "HW advance",
    "consumer fetch + delivery",
)
RESPONSE_STAGE = "(response to producer)"


class Event(msgspec.Struct, frozen=True, array_like=True):
    at_ns: int
    kind: str
    a: int
    b: int
    c: int


class StageSummary(msgspec.Struct, frozen=True, kw_only=True):
    stage: str
    p50_ms: float
    p99_ms: float
    mean_ms: float


class Breakdown(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    records: int
    e2e_p50_ms: float
    e2e_p99_ms: float
    stages: list[StageSummary]
    #: Records of the consumer that could not be joined with a complete chain of events.
    unmatched: int


def read_events(directory: Path, topic: str, partition: int = 0) -> list[Event]:
    """Every traced event of `topic`-`partition` in `directory`'s trace files, by time."""
    events: list[Event] = []
    wanted = (topic, str(partition))
    for path in sorted(directory.glob("*.trace")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 7 or (parts[2], parts[3]) != wanted:
                continue
            events.append(
                Event(int(parts[0]), parts[1], int(parts[4]), int(parts[5]), int(parts[6]))
            )
    events.sort(key=lambda e: e.at_ns)
    return events


def _first_at_or_after(times: list[int], at_ns: int) -> int | None:
    index = bisect.bisect_left(times, at_ns)
    return times[index] if index < len(times) else None


def _first_reaching(timeline: list[tuple[int, int]], at_ns: int, offset: int) -> int | None:
    """Time of the first `(time, offset)` of a time-sorted timeline at or after `at_ns`
    whose offset is at least `offset`."""
    index = bisect.bisect_left(timeline, (at_ns, -1))
    for position in range(index, len(timeline)):
        t, reached = timeline[position]
        if reached >= offset:
            return t
    return None


class _Request(msgspec.Struct, kw_only=True):
    first: int
    end: int
    received_ns: int
    appended_ns: int
    stages_ns: dict[str, int] = msgspec.field(default_factory=dict)
    hw_ns: int = -1


def _request_stages(events: list[Event]) -> list[_Request]:
    requests = [
        _Request(first=e.a, end=e.b, received_ns=e.c, appended_ns=e.at_ns)
        for e in events
        if e.kind == "append"
    ]
    hw_events = [(e.at_ns, e.a) for e in events if e.kind == "hw"]
    resp_by_end: dict[int, list[int]] = defaultdict(list)
    fsend: dict[tuple[int, int], list[int]] = defaultdict(list)  # (replica, offset) -> times
    ffetch: dict[int, list[tuple[int, int]]] = defaultdict(list)  # replica -> (time, offset)
    fapps: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # broker -> (end, first, t)
    frecv: dict[tuple[int, int], list[int]] = defaultdict(list)  # (broker, first) -> times
    for e in events:
        if e.kind == "resp":
            resp_by_end[e.a].append(e.at_ns)
        elif e.kind == "fsend":
            fsend[(e.a, e.b)].append(e.at_ns)
        elif e.kind == "ffetch":
            ffetch[e.a].append((e.at_ns, e.b))
        elif e.kind == "fapp" and e.c > e.b:
            fapps[e.a].append((e.c, e.b, e.at_ns))
        elif e.kind == "frecv":
            frecv[(e.a, e.b)].append(e.at_ns)
    for replica in fapps:
        fapps[replica].sort()
    complete: list[_Request] = []
    for request in requests:
        chains: list[tuple[int, int, int, int, int]] = []  # fsend, frecv, fapp, ffetch, broker
        for broker, appended in fapps.items():
            # The follower append that brought the request's last record.
            index = bisect.bisect_left(appended, (request.end, -1, -1))
            if index >= len(appended) or appended[index][1] > request.end - 1:
                continue
            end, first, fapp_ns = appended[index]
            received = [t for t in frecv.get((broker, first), []) if t <= fapp_ns]
            sent = [t for t in fsend.get((broker, first), []) if t <= (received or [fapp_ns])[-1]]
            report = _first_reaching(ffetch.get(broker, []), fapp_ns, end)
            if not received or not sent or report is None:
                continue
            chains.append((sent[-1], received[-1], fapp_ns, report, broker))
        if not chains:
            continue
        sent_ns, received_ns, fapp_ns, report_ns, _ = max(chains, key=lambda c: c[3])
        hw_ns = _first_reaching(hw_events, request.appended_ns, request.end)
        if hw_ns is None:
            continue
        request.hw_ns = hw_ns
        request.stages_ns = {
            "leader append": request.appended_ns - request.received_ns,
            "wait for follower fetch": sent_ns - request.appended_ns,
            "transfer to follower": received_ns - sent_ns,
            "follower append": fapp_ns - received_ns,
            "follower's next fetch": report_ns - fapp_ns,
            "HW advance": hw_ns - report_ns,
        }
        response = _first_at_or_after(sorted(resp_by_end.get(request.end, [])), hw_ns)
        if response is not None:
            request.stages_ns[RESPONSE_STAGE] = response - hw_ns
        complete.append(request)
    return complete


def analyze(name: str, events: list[Event], records: list[tuple[int, int, int]]) -> Breakdown:
    """The breakdown of `records` (`(offset, intended send ns, received ns)` from the
    consumer) against the brokers' `events` of the same partition."""
    requests = _request_stages(events)
    requests.sort(key=lambda r: r.first)
    firsts = [r.first for r in requests]
    per_stage: dict[str, list[float]] = {stage: [] for stage in (*STAGES, RESPONSE_STAGE)}
    e2e: list[float] = []
    unmatched = 0
    for offset, intended_ns, received_ns in records:
        index = bisect.bisect_right(firsts, offset) - 1
        if index < 0 or not requests[index].first <= offset < requests[index].end:
            unmatched += 1
            continue
        request = requests[index]
        per_stage["client queue + linger + request"].append(
            (request.received_ns - intended_ns) / 1e6
        )
        for stage, value_ns in request.stages_ns.items():
            per_stage[stage].append(value_ns / 1e6)
        per_stage["consumer fetch + delivery"].append((received_ns - request.hw_ns) / 1e6)
        e2e.append((received_ns - intended_ns) / 1e6)
    summaries = []
    for stage, values in per_stage.items():
        values.sort()
        summaries.append(
            StageSummary(
                stage=stage,
                p50_ms=round(stats.percentile(values, 0.5), 3),
                p99_ms=round(stats.percentile(values, 0.99), 3),
                mean_ms=round(sum(values) / len(values), 3) if values else float("nan"),
            )
        )
    e2e.sort()
    return Breakdown(
        name=name,
        records=len(e2e),
        e2e_p50_ms=round(stats.percentile(e2e, 0.5), 3),
        e2e_p99_ms=round(stats.percentile(e2e, 0.99), 3),
        stages=summaries,
        unmatched=unmatched,
    )


def text(breakdown: Breakdown) -> str:
    """The breakdown as a table (p50 / p99 / mean per stage, ms)."""
    lines = [
        f"{breakdown.name}: {breakdown.records} records joined "
        f"({breakdown.unmatched} not), e2e p50 {breakdown.e2e_p50_ms:.2f} ms, "
        f"p99 {breakdown.e2e_p99_ms:.2f} ms",
        f"  {'stage':<34} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}",
    ]
    total = 0.0
    for summary in breakdown.stages:
        if summary.stage in STAGES:
            total += summary.mean_ms
        lines.append(
            f"  {summary.stage:<34} {summary.p50_ms:>8.2f} {summary.p99_ms:>8.2f} "
            f"{summary.mean_ms:>8.2f}"
        )
    lines.append(f"  {'sum of stage means (= e2e mean)':<34} {'':>8} {'':>8} {total:>8.2f}")
    return "\n".join(lines)
