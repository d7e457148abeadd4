"""Client metrics (`Producer.metrics()`, `Consumer.metrics()`): totals, rates over a
sliding window and request latencies, as Kafka's client metrics name them.

Counters are updated per batch or per request, never per record, on the client's event
loop; time is given by the caller (`now_ms`, monotonic milliseconds), so the rates are
testable with a fake clock. A rate is the sum of the samples of the last `WINDOW_MS`
divided by that window (or by the client's age, while it is younger).
"""

from __future__ import annotations

from collections import deque
from typing import Final

#: Rates cover this much recent time (Kafka: two 30 s samples).
WINDOW_MS: Final = 30_000.0
#: Width of one sample of the window.
SAMPLE_MS: Final = 5_000.0


class Meter:
    """A running total and its rate over the last `WINDOW_MS`."""

    __slots__ = ("_samples", "total")

    def __init__(self) -> None:
        self.total = 0.0
        #: [sample index, sum] for each recent sample, oldest first.
        self._samples: deque[list[float]] = deque()

    def record(self, value: float, now_ms: float) -> None:
        self.total += value
        index = now_ms // SAMPLE_MS
        samples = self._samples
        if samples and samples[-1][0] == index:
            samples[-1][1] += value
        else:
            samples.append([index, value])
            while samples and samples[0][0] <= index - WINDOW_MS / SAMPLE_MS:
                samples.popleft()

    def rate_per_s(self, now_ms: float, started_ms: float) -> float:
        """Per second over the window (or since `started_ms`, when that is shorter)."""
        first = now_ms // SAMPLE_MS - WINDOW_MS / SAMPLE_MS
        recent = sum(value for index, value in self._samples if index > first)
        # The recent samples cover from the start of sample `first + 1` until now.
        span_ms = min(now_ms - (first + 1) * SAMPLE_MS, now_ms - started_ms)
        return recent * 1000 / max(span_ms, 1.0)


class Latency:
    """Average and maximum of the latencies recorded over the last `WINDOW_MS`."""

    __slots__ = ("_samples", "count")

    def __init__(self) -> None:
        self.count = 0
        #: [sample index, count, sum, max] per recent sample.
        self._samples: deque[list[float]] = deque()

    def record(self, latency_ms: float, now_ms: float) -> None:
        self.count += 1
        index = now_ms // SAMPLE_MS
        samples = self._samples
        if samples and samples[-1][0] == index:
            sample = samples[-1]
            sample[1] += 1
            sample[2] += latency_ms
            sample[3] = max(sample[3], latency_ms)
        else:
            samples.append([index, 1, latency_ms, latency_ms])
            while samples and samples[0][0] <= index - WINDOW_MS / SAMPLE_MS:
                samples.popleft()

    def avg_max_ms(self, now_ms: float) -> tuple[float, float]:
        """(average, maximum) over the window; (nan, nan) without a recent sample."""
        first = now_ms // SAMPLE_MS - WINDOW_MS / SAMPLE_MS
        recent = [s for s in self._samples if s[0] > first]
        count = sum(s[1] for s in recent)
        if not count:
            return float("nan"), float("nan")
        return sum(s[2] for s in recent) / count, max(s[3] for s in recent)


class ProducerMetrics:
    """What `Producer.metrics()` reports (kafka-python's `producer-metrics` names)."""

    def __init__(self, now_ms: float) -> None:
        self.started_ms = now_ms
        self.records = Meter()
        self.bytes = Meter()
        self.requests = Meter()
        self.retries = Meter()
        self.errors = Meter()
        self.latency = Latency()

    def report(self, now_ms: float) -> dict[str, float]:
        avg_ms, max_ms = self.latency.avg_max_ms(now_ms)
        since = self.started_ms
        return {
            "record-send-total": self.records.total,
            "record-send-rate": self.records.rate_per_s(now_ms, since),
            "byte-total": self.bytes.total,
            "byte-rate": self.bytes.rate_per_s(now_ms, since),
            "request-total": self.requests.total,
            "request-rate": self.requests.rate_per_s(now_ms, since),
            "request-latency-avg": avg_ms,
            "request-latency-max": max_ms,
            "record-retry-total": self.retries.total,
            "record-retry-rate": self.retries.rate_per_s(now_ms, since),
            "record-error-total": self.errors.total,
            "record-error-rate": self.errors.rate_per_s(now_ms, since),
        }


class ConsumerMetrics:
    """What `Consumer.metrics()` reports (kafka-python's `consumer-fetch-manager-metrics`
    names)."""

    def __init__(self, now_ms: float) -> None:
        self.started_ms = now_ms
        self.records = Meter()
        self.bytes = Meter()
        self.fetches = Meter()
        self.errors = Meter()
        self.latency = Latency()

    def report(self, now_ms: float) -> dict[str, float]:
        avg_ms, max_ms = self.latency.avg_max_ms(now_ms)
        since = self.started_ms
        return {
            "records-consumed-total": self.records.total,
            "records-consumed-rate": self.records.rate_per_s(now_ms, since),
            "bytes-consumed-total": self.bytes.total,
            "bytes-consumed-rate": self.bytes.rate_per_s(now_ms, since),
            "fetch-total": self.fetches.total,
            "fetch-rate": self.fetches.rate_per_s(now_ms, since),
            "fetch-latency-avg": avg_ms,
            "fetch-latency-max": max_ms,
            "fetch-error-total": self.errors.total,
            "fetch-error-rate": self.errors.rate_per_s(now_ms, since),
        }
