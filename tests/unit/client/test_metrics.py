"""Client metrics with a fake clock: totals, rates over the sliding window (or the
client's age while it is younger) and latencies, and the names `metrics()` reports."""

from __future__ import annotations

import math

import pytest

from client.metrics import SAMPLE_MS, WINDOW_MS, ConsumerMetrics, Latency, Meter, ProducerMetrics

#: name -> (samples as (value, at_ms), client started at ms, asked at ms, expected rate/s)
RATE_ROWS: dict[str, tuple[list[tuple[float, float]], float, float, float]] = {
    "nothing recorded": ([], 0.0, 10_000.0, 0.0),
    "young client: divided by its age": ([(100, 500.0)], 0.0, 2_000.0, 50.0),
    "one sample, old client: divided by the window so far": (
        [(3_000, 100_000.0)],
        0.0,
        102_000.0,
        3_000 * 1000 / (102_000.0 - (100_000 // SAMPLE_MS - WINDOW_MS / SAMPLE_MS + 1) * SAMPLE_MS),
    ),
    "samples older than the window are not counted": (
        [(1_000, 0.0), (60, 40_000.0)],
        0.0,
        40_000.0,
        60 * 1000 / (40_000.0 - (40_000 // SAMPLE_MS - WINDOW_MS / SAMPLE_MS + 1) * SAMPLE_MS),
    ),
}


@pytest.mark.parametrize("name", RATE_ROWS)
def test_meter_rate(name: str) -> None:
    samples, started_ms, now_ms, expected = RATE_ROWS[name]
    meter = Meter()
    for value, at_ms in samples:
        meter.record(value, at_ms)
    assert meter.total == sum(v for v, _ in samples)
    assert meter.rate_per_s(now_ms, started_ms) == pytest.approx(expected)


def test_meter_drops_old_samples_but_keeps_the_total() -> None:
    meter = Meter()
    for second in range(0, 600):
        meter.record(1, second * 1000.0)
    assert meter.total == 600
    assert len(meter._samples) <= WINDOW_MS / SAMPLE_MS + 1
    assert meter.rate_per_s(599_999.0, 0.0) == pytest.approx(1.0, rel=0.05)


def test_latency_average_and_maximum_over_the_window() -> None:
    latency = Latency()
    assert all(math.isnan(v) for v in latency.avg_max_ms(0.0))
    latency.record(500.0, 0.0)  # out of the window by the time it is asked
    latency.record(10.0, 50_000.0)
    latency.record(30.0, 51_000.0)
    assert latency.avg_max_ms(52_000.0) == (20.0, 30.0)
    assert latency.count == 3


def test_producer_report_names_and_values() -> None:
    metrics = ProducerMetrics(0.0)
    metrics.records.record(10, 1_000.0)
    metrics.bytes.record(1_000, 1_000.0)
    metrics.requests.record(1, 1_000.0)
    metrics.retries.record(4, 1_000.0)
    metrics.errors.record(2, 1_000.0)
    metrics.latency.record(7.0, 1_000.0)
    report = metrics.report(2_000.0)
    assert report == {
        "record-send-total": 10,
        "record-send-rate": 5.0,
        "byte-total": 1_000,
        "byte-rate": 500.0,
        "request-total": 1,
        "request-rate": 0.5,
        "request-latency-avg": 7.0,
        "request-latency-max": 7.0,
        "record-retry-total": 4,
        "record-retry-rate": 2.0,
        "record-error-total": 2,
        "record-error-rate": 1.0,
    }


def test_consumer_report_names_and_values() -> None:
    metrics = ConsumerMetrics(0.0)
    metrics.records.record(100, 500.0)
    metrics.bytes.record(4_000, 500.0)
    metrics.fetches.record(2, 500.0)
    metrics.latency.record(3.0, 500.0)
    report = metrics.report(4_000.0)
    assert report == {
        "records-consumed-total": 100,
        "records-consumed-rate": 25.0,
        "bytes-consumed-total": 4_000,
        "bytes-consumed-rate": 1_000.0,
        "fetch-total": 2,
        "fetch-rate": 0.5,
        "fetch-latency-avg": 3.0,
        "fetch-latency-max": 3.0,
        "fetch-error-total": 0,
        "fetch-error-rate": 0.0,
    }
