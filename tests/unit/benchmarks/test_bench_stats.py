"""Pure pieces of the benchmark harness: /proc parsing, percentiles, medians, ratios."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import procstat, stats
from benchmarks.report import SuiteResult, acceptance, cpu_bounds, ratios, table, tls_ratios
from benchmarks.workloads import LatencySpec, slice_runs

STAT = "1234 (py thon (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 40 0 0 20 0 3 0 1 2 3"


def test_parse_cpu_ticks_counts_from_last_paren() -> None:
    assert procstat.parse_cpu_ticks(STAT) == 290


def test_parse_cpu_ticks_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a /proc"):
        procstat.parse_cpu_ticks("garbage")


def test_own_cpu_seconds_is_positive_and_missing_pid_is_zero() -> None:
    import os

    assert procstat.cpu_seconds(os.getpid()) > 0
    assert procstat.cpu_seconds(2**22 + 12345) == 0.0


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [
        ([1.0], 0.5, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
        ([float(i) for i in range(1, 1001)], 0.99, 990.0),
        ([float(i) for i in range(1, 1001)], 0.999, 999.0),
        ([float(i) for i in range(1, 1001)], 1.0, 1000.0),
    ],
    ids=["single", "even", "p99", "p999", "max"],
)
def test_percentile_nearest_rank(values: list[float], fraction: float, expected: float) -> None:
    assert stats.percentile(values, fraction) == expected


def test_percentile_empty_is_nan_and_bad_fraction_raises() -> None:
    assert math.isnan(stats.percentile([], 0.5))
    with pytest.raises(ValueError, match="fraction"):
        stats.percentile([1.0], 1.5)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50))
def test_median_is_between_min_and_max(values: list[float]) -> None:
    assert min(values) <= stats.median(values) <= max(values)


def test_summarize_takes_medians_and_cpu_per_mib() -> None:
    mib = stats.MIB
    runs = [
        stats.Run(records=100, payload_bytes=mib, seconds=1.0, cpu_s={"client": 0.5, "b": 0.1}),
        stats.Run(records=300, payload_bytes=3 * mib, seconds=1.0, cpu_s={"client": 0.3, "b": 0.3}),
        stats.Run(records=200, payload_bytes=2 * mib, seconds=1.0, cpu_s={"client": 0.2, "b": 0.2}),
    ]
    case = stats.summarize("x", group="produce", system="m", record_bytes=100, runs=runs)
    assert case.records_per_s == 200
    assert case.mib_per_s == 2
    assert case.cpu_s_per_mib["client"] == 0.1
    assert case.cpu_s_per_mib["total"] == 0.2


def _case(
    name: str, group: str, rate: float, mib: float, cpu: dict[str, float] | None = None
) -> stats.CaseResult:
    return stats.CaseResult(
        name=name,
        group=group,
        system="s",
        record_bytes=100,
        runs=[],
        records_per_s=rate,
        mib_per_s=mib,
        cpu_s_per_mib=cpu or {},
    )


def test_ratios_and_acceptance() -> None:
    result = SuiteResult(started="now", quick=True)
    ours = _case("produce 100 B RF=3 acks=all", "produce", 200_000, 10.0)
    result.cases = [
        ours,
        _case("produce 100 B RF=3 acks=all send_batch", "produce", 600_000, 20.0),
        _case("consume 100 B catch-up RF=3", "consume", 1_000_000, 40.0),
        _case("grpc upload ceiling 100 B", "baseline", 3_000_000, 100.0),
        _case("grpc download ceiling", "baseline", 100_000, 200.0),
        _case("NATS JetStream R3 publish 100 B", "peer", 5_000, 1.0),
    ]
    r = ratios(result, ours)
    assert r["grpc"] == pytest.approx(0.1)
    assert r["nats"] == pytest.approx(40.0)
    assert math.isnan(r["redis"])
    checks = {target: met for target, met, _ in acceptance(result)}
    assert checks == {
        "send() RF=3 acks=all 100 B >= 30x NATS JetStream R3": True,
        "send_batch RF=3 acks=all 100 B >= 0.15x raw gRPC upload ceiling": True,  # 0.2x
        "send() RF=3 acks=all 100 B (for comparison) >= 0.15x raw gRPC upload ceiling": False,
        "consumer catch-up 100 B >= 0.25x raw gRPC download ceiling": False,  # 0.2x
    }


def test_tls_rows_are_compared_with_their_plaintext_twin() -> None:
    result = SuiteResult(started="now", quick=True)
    result.cases = [
        _case("produce 100 B RF=3 acks=all", "produce", 200_000, 10.0),
        _case("produce 100 B RF=3 acks=all (TLS)", "produce", 150_000, 7.5),
        _case("produce 100 B RF=1 acks=1", "produce", 400_000, 20.0),
    ]
    plain, tls, share = tls_ratios(result)[100]
    assert (plain, tls) == (200_000, 150_000)
    assert share == pytest.approx(0.75)
    assert list(tls_ratios(result)) == [100]
    assert "TLS ÷ plaintext, produce 100 B RF=3 acks=all: 0.75 (150.0 k vs 200.0 k rec/s)" in (
        table(result)
    )


def test_a_tls_row_without_its_plaintext_twin_has_no_ratio() -> None:
    result = SuiteResult(started="now", quick=True)
    result.cases = [_case("produce 100 B RF=3 acks=all (TLS)", "produce", 150_000, 7.5)]
    assert tls_ratios(result) == {}


def test_slice_runs_assigns_records_by_intended_send_time() -> None:
    spec = LatencySpec(
        bootstrap="",
        topic="t",
        rate_per_s=10,
        record_bytes=16,
        acks=1,
        linger_ms=5,
        warmup_s=1.0,
        seconds_per_run=1.0,
        runs=2,
    )
    second = 1_000_000_000
    stamps = [0, second // 2, second, second + 1, 2 * second, 3 * second]
    latencies = [99, 99, 1_000_000, 3_000_000, 5_000_000, 7_000_000]
    out = slice_runs(stamps, latencies, spec)
    assert out["delivered"] == 6
    assert [r["records"] for r in out["runs"]] == [2.0, 1.0]  # warm-up and tail dropped
    assert out["runs"][0]["max_ms"] == 3.0
    assert out["runs"][1]["p50_ms"] == 5.0


def test_a_missed_grpc_ratio_is_explained_by_cpu_per_mib() -> None:
    result = SuiteResult(started="now", quick=True)
    ours = _case(
        "produce 100 B RF=3 acks=all", "produce", 500_000, 50.0, {"client": 0.02, "total": 0.032}
    )
    ceiling = _case("grpc upload ceiling 100 B", "baseline", 10_000_000, 1000.0, {"total": 0.0015})
    result.cases = [ours, ceiling]
    bounds = cpu_bounds(ours, ceiling, cores=2)
    assert bounds["client_only"] == pytest.approx(0.05)  # 1 core / 0.02 s per MiB = 50 MiB/s
    assert bounds["all_processes"] == pytest.approx(0.0625)  # 2 / 0.032 = 62.5 MiB/s
    ((_, met, measured),) = [c for c in acceptance(result) if "gRPC" in c[0]]
    assert met is False
    assert "client 0.0200 s" in measured
    assert "brokers 0.0120 s" in measured
