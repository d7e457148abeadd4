"""Result records and the pure statistics of the suite: medians, percentiles, ratios."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

MIB = 1 << 20


class Run(msgspec.Struct, frozen=True, kw_only=True):
    """One measured run of a throughput case."""

    records: int
    payload_bytes: int
    seconds: float
    #: CPU seconds per process (by name) spent during the run.
    cpu_s: dict[str, float]

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mib_per_s(self) -> float:
        return self.payload_bytes / MIB / self.seconds if self.seconds > 0 else 0.0


class CaseResult(msgspec.Struct, frozen=True, kw_only=True):
    """A case: its runs (after a warm-up) and their medians."""

    name: str
    group: str
    system: str
    record_bytes: int
    runs: list[Run]
    records_per_s: float
    mib_per_s: float
    #: Median CPU seconds per MiB of payload, per process, and summed over processes.
    cpu_s_per_mib: dict[str, float]
    notes: str = ""


class LatencyResult(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    rate_per_s: int
    record_bytes: int
    linger_ms: int
    runs: list[dict[str, float]]
    #: Medians over runs of p50 / p99 / p99.9, in ms.
    p50_ms: float
    p99_ms: float
    p999_ms: float
    delivered: int
    notes: str = ""


class FailoverResult(msgspec.Struct, frozen=True, kw_only=True):
    mode: str
    trials_ms: list[float]
    median_ms: float
    max_ms: float
    acked: int
    lost: int
    notes: str = ""


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (`fraction` in [0, 1])."""
    if not sorted_values:
        return math.nan
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rank = max(math.ceil(fraction * len(sorted_values)), 1)
    return float(sorted_values[rank - 1])


def summarize(
    name: str, *, group: str, system: str, record_bytes: int, runs: list[Run], notes: str = ""
) -> CaseResult:
    """Medians over runs of throughput and of CPU seconds per MiB for each process."""
    per_process: dict[str, list[float]] = {}
    for run in runs:
        mib = run.payload_bytes / MIB
        for proc, seconds in run.cpu_s.items():
            per_process.setdefault(proc, []).append(seconds / mib if mib else math.nan)
        per_process.setdefault("total", []).append(sum(run.cpu_s.values()) / mib if mib else 0)
    return CaseResult(
        name=name,
        group=group,
        system=system,
        record_bytes=record_bytes,
        runs=runs,
        records_per_s=median([r.records_per_s for r in runs]),
        mib_per_s=median([r.mib_per_s for r in runs]),
        cpu_s_per_mib={p: round(median(v), 5) for p, v in per_process.items()},
        notes=notes,
    )


def ratio(ours: float, baseline: float) -> float:
    """ours / baseline, NaN when the baseline is missing or zero."""
    if not baseline or math.isnan(baseline) or math.isnan(ours):
        return math.nan
    return ours / baseline
