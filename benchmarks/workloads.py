"""minikafka workloads, each run in its own spawned process: produce, catch-up, latency.

Throughput runs are closed-loop (the client's own in-flight window and buffer), time
bounded, and include the final flush. The latency run is open-loop: record *i* is due at
`t0 + i / rate` and carries that intended send time, so a stalled producer shows up as
latency instead of silently sending less (no coordinated omission).
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import procstat, stats
from benchmarks.harness import CLIENT, run_async, warm_and_measure
from client import AsyncAdmin, AsyncConsumer, NewTopic, Producer, TopicPartition

#: Checked against the clock once per this many sends.
CLOCK_EVERY = 512
STAMP = struct.Struct("<q")


class ProduceSpec(msgspec.Struct, frozen=True, kw_only=True):
    bootstrap: str
    topic: str
    replication_factor: int
    acks: int | str
    record_bytes: int
    seconds: float
    runs: int
    linger_ms: int = 5
    pids: dict[str, int] = msgspec.field(default_factory=dict)
    #: The clients' security settings (`BenchCluster.client_config`; empty: plaintext).
    client_config: dict[str, str] = msgspec.field(default_factory=dict)


class ConsumeSpec(msgspec.Struct, frozen=True, kw_only=True):
    bootstrap: str
    topic: str
    record_bytes: int
    seconds: float
    runs: int
    max_partition_fetch_bytes: int = 4 << 20
    pids: dict[str, int] = msgspec.field(default_factory=dict)


class LatencySpec(msgspec.Struct, frozen=True, kw_only=True):
    bootstrap: str
    topic: str
    rate_per_s: int
    record_bytes: int
    acks: int | str
    linger_ms: int
    warmup_s: float
    seconds_per_run: float
    runs: int
    #: Also return `(offset, intended send ns, received ns)` of every record
    #: (`benchmarks.breakdown`).
    keep_records: bool = False

    @property
    def total_records(self) -> int:
        return int(self.rate_per_s * (self.warmup_s + self.seconds_per_run * self.runs))


async def create_topic(
    bootstrap: str,
    topic: str,
    replication_factor: int,
    configs: dict[str, str] | None = None,
    client_config: dict[str, str] | None = None,
) -> None:
    async with AsyncAdmin(bootstrap, **(client_config or {})) as admin:  # type: ignore[arg-type]
        await admin.create_topics(NewTopic(topic, 1, replication_factor, configs or {}))


async def delete_topics(
    bootstrap: str, topics: list[str], client_config: dict[str, str] | None = None
) -> None:
    async with AsyncAdmin(bootstrap, **(client_config or {})) as admin:  # type: ignore[arg-type]
        await admin.delete_topics(topics)


def produce_throughput(spec: ProduceSpec) -> list[stats.Run]:
    """Warm-up + `runs` runs of `seconds` each of closed-loop sends through `Producer`."""
    run_async(
        create_topic(
            spec.bootstrap, spec.topic, spec.replication_factor, client_config=spec.client_config
        )
    )
    value = os.urandom(spec.record_bytes)
    watched = {CLIENT: os.getpid(), **spec.pids}
    runs: list[stats.Run] = []
    with Producer(
        bootstrap_servers=spec.bootstrap,
        acks=spec.acks,
        linger_ms=spec.linger_ms,
        enable_idempotence=spec.acks in ("all", -1),
        **spec.client_config,
    ) as producer:
        producer.send(spec.topic, value).result(30)
        for index in range(spec.runs + 1):
            before = procstat.sample(watched)
            start = time.perf_counter()
            deadline = start + spec.seconds
            send = producer.send
            topic = spec.topic
            sent = 0
            while True:
                for _ in range(CLOCK_EVERY):
                    send(topic, value)
                sent += CLOCK_EVERY
                if time.perf_counter() >= deadline:
                    break
            producer.flush()
            seconds = time.perf_counter() - start
            cpu = procstat.delta(before, procstat.sample(watched))
            if index:  # run 0 is the warm-up
                runs.append(
                    stats.Run(
                        records=sent,
                        payload_bytes=sent * spec.record_bytes,
                        seconds=round(seconds, 4),
                        cpu_s={k: round(v, 3) for k, v in cpu.items()},
                    )
                )
    return runs


#: Records per `send_batch` call in the bulk produce case.
SEND_BATCH_RECORDS = 2000


def produce_batch_throughput(spec: ProduceSpec) -> list[stats.Run]:
    """`produce_throughput` with `Producer.send_batch` calls of `SEND_BATCH_RECORDS`
    records each (one future per call) instead of one `send` per record."""
    run_async(create_topic(spec.bootstrap, spec.topic, spec.replication_factor))
    values = [os.urandom(spec.record_bytes)] * SEND_BATCH_RECORDS
    watched = {CLIENT: os.getpid(), **spec.pids}
    runs: list[stats.Run] = []
    with Producer(
        bootstrap_servers=spec.bootstrap,
        acks=spec.acks,
        linger_ms=spec.linger_ms,
        enable_idempotence=spec.acks in ("all", -1),
    ) as producer:
        producer.send_batch(spec.topic, values[:1]).result(30)
        for index in range(spec.runs + 1):
            before = procstat.sample(watched)
            start = time.perf_counter()
            deadline = start + spec.seconds
            send_batch = producer.send_batch
            topic = spec.topic
            sent = 0
            last = None
            while time.perf_counter() < deadline:
                last = send_batch(topic, values)
                sent += SEND_BATCH_RECORDS
            producer.flush()
            if last is not None:
                last.result(60)
            seconds = time.perf_counter() - start
            cpu = procstat.delta(before, procstat.sample(watched))
            if index:  # run 0 is the warm-up
                runs.append(
                    stats.Run(
                        records=sent,
                        payload_bytes=sent * spec.record_bytes,
                        seconds=round(seconds, 4),
                        cpu_s={k: round(v, 3) for k, v in cpu.items()},
                    )
                )
    return runs


def consume_catch_up(spec: ConsumeSpec) -> list[stats.Run]:
    """Read `topic` from offset 0 (warm-up + `runs` times), every value touched in Python."""

    async def main() -> list[stats.Run]:
        tp = TopicPartition(spec.topic, 0)
        async with AsyncConsumer(
            bootstrap_servers=spec.bootstrap,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=spec.max_partition_fetch_bytes,
        ) as consumer:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            if end == 0:
                raise RuntimeError(f"{spec.topic} is empty: nothing to catch up on")

            async def body() -> tuple[int, int]:
                consumer.seek(tp, 0)
                deadline = time.perf_counter() + spec.seconds
                seen = payload = 0
                while seen < end and time.perf_counter() < deadline:
                    batches = await consumer.getmany(timeout_ms=1000, max_records=100_000)
                    for records in batches.values():
                        seen += len(records)
                        for record in records:
                            payload += len(record.value or b"")
                return seen, payload

            return await warm_and_measure(spec.pids, spec.runs, body)

    return run_async(main())


def latency_producer(spec: LatencySpec) -> int:
    """Open-loop sender: record i is due at t0 + i/rate and carries that due time (ns)."""
    padding = os.urandom(max(spec.record_bytes - STAMP.size, 0))
    period_ns = 1_000_000_000 / spec.rate_per_s
    total = spec.total_records
    with Producer(
        bootstrap_servers=spec.bootstrap,
        acks=spec.acks,
        linger_ms=spec.linger_ms,
        enable_idempotence=spec.acks in ("all", -1),
    ) as producer:
        producer.send(spec.topic, STAMP.pack(0) + padding).result(30)
        t0_ns = time.time_ns()
        sent = 0
        while sent < total:
            due = min(int((time.time_ns() - t0_ns) / period_ns) + 1, total)
            while sent < due:
                producer.send(spec.topic, STAMP.pack(t0_ns + int(sent * period_ns)) + padding)
                sent += 1
            time.sleep(0.0005)  # the next record is due in period_ns; pacing, not a race
        producer.flush()
    return sent


def latency_consumer(spec: LatencySpec, ready_path: str) -> dict[str, Any]:
    """Receive every record; latency = receive time - intended send time, per record.

    Writes `ready_path` once assigned (the driver starts the producer after that).
    Returns per-run percentiles (ms) over the records due in each run's time slice.
    """

    async def main() -> dict[str, Any]:
        tp = TopicPartition(spec.topic, 0)
        stamps: list[int] = []
        latencies_ns: list[int] = []
        kept: list[tuple[int, int, int]] = []
        async with AsyncConsumer(
            bootstrap_servers=spec.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        ) as consumer:
            consumer.assign([tp])
            await consumer.position(tp)
            Path(ready_path).write_text("ready")  # noqa: ASYNC240
            expected = spec.total_records + 1  # + the priming record (stamp 0)
            seen = 0
            deadline = time.monotonic() + spec.warmup_s + spec.seconds_per_run * spec.runs + 60
            while seen < expected and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=100_000)
                now_ns = time.time_ns()
                for records in batches.values():
                    seen += len(records)
                    for record in records:
                        (stamp,) = STAMP.unpack_from(record.value or b"")
                        if stamp:
                            stamps.append(stamp)
                            latencies_ns.append(now_ns - stamp)
                            if spec.keep_records:
                                kept.append((record.offset, stamp, now_ns))
        outcome = slice_runs(stamps, latencies_ns, spec)
        if spec.keep_records:
            outcome["records"] = kept
        return outcome

    return run_async(main())


def slice_runs(stamps: list[int], latencies_ns: list[int], spec: LatencySpec) -> dict[str, Any]:
    """Percentiles per run: records are assigned to runs by their intended send time."""
    if not stamps:
        return {"runs": [], "delivered": 0}
    t0 = min(stamps)
    buckets: list[list[float]] = [[] for _ in range(spec.runs)]
    for stamp, latency in zip(stamps, latencies_ns, strict=True):
        since_s = (stamp - t0) / 1e9 - spec.warmup_s
        if since_s < 0:
            continue
        index = int(since_s / spec.seconds_per_run)
        if index < spec.runs:
            buckets[index].append(latency / 1e6)
    runs = []
    for bucket in buckets:
        bucket.sort()
        runs.append(
            {
                "records": float(len(bucket)),
                "p50_ms": stats.percentile(bucket, 0.5),
                "p99_ms": stats.percentile(bucket, 0.99),
                "p999_ms": stats.percentile(bucket, 0.999),
                "max_ms": bucket[-1] if bucket else float("nan"),
            }
        )
    return {"runs": runs, "delivered": len(stamps)}


def ensure_topic(bootstrap: str, topic: str, rf: int, configs: dict[str, str]) -> None:
    run_async(create_topic(bootstrap, topic, rf, configs))


def drop_topics(
    bootstrap: str, topics: list[str], client_config: dict[str, str] | None = None
) -> None:
    run_async(delete_topics(bootstrap, topics, client_config))


def wait_file(path: str, timeout_s: float) -> None:
    """Wait (bounded) for another process to create `path`."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s}s")
        time.sleep(0.05)  # another process's progress: nothing else to wait on


def gather_latency(values: list[dict[str, float]]) -> tuple[float, float, float]:
    return (
        stats.median([v["p50_ms"] for v in values]),
        stats.median([v["p99_ms"] for v in values]),
        stats.median([v["p999_ms"] for v in values]),
    )
