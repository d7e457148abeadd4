"""`python -m benchmarks` (`make bench`): the whole suite with same-run baselines and peers.

Order: storage micro-benchmark; raw gRPC ceilings (upload at the producer's batch size,
download at the consumer's fetch size, 100 B round trips); minikafka producer
throughput (100 B and 1 KiB; RF=1 acks=1, RF=3 acks=1, RF=3 acks=all, and RF=3 acks=all
with `send_batch`) and consumer catch-up on one 3-broker cluster; RF=3 acks=all again with
TLS and mutual TLS on every listener and link (its own 3-broker cluster, the same
workload; reported as TLS ÷ plaintext); the Spark sink's batch write into RF=3 acks=all next
to `Producer.send_batch` and `send()` on its own 3-broker cluster (reported as sink ÷
send_batch; benchmarks/spark_bench.py); open-loop end-to-end
latency at 10 k rec/s and at 10/50/80 % of the measured RF=3 acks=all 1 KiB maximum
(`latency_load.png`); the per-stage breakdown of the 10 k rec/s acks=all latency on a
cluster whose brokers trace their stages (`benchmarks.breakdown`); failover (kill -9 and
SIGSTOP of the leader, kill -9 of the active controller; own cluster with a quorum of
three controllers); consumer-group rebalance time when a member joins and leaves
(`rebalance_bench`, own cluster, heartbeat interval 250 ms); Redis Streams and NATS
JetStream R3 driven from Python. Each measurement runs in a fresh spawned process: a
warm-up and three runs, median reported. Writes results.json and PNG plots to --out.

    python -m benchmarks [--quick] [--out benchmarks/results] [--skip peers,failover]

Only the TLS comparison (plaintext and TLS RF=3 acks=all rows, fresh clusters):

    python -c "from benchmarks.suite import tls_comparison; tls_comparison()"

Only the Spark sink comparison (producer rows and sink rows, one fresh cluster):

    python -c "from benchmarks.suite import spark_comparison; spark_comparison()"
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import msgspec

from benchmarks import (
    breakdown,
    failover,
    grpc_baseline,
    peers,
    rebalance_bench,
    spark_bench,
    stats,
    workloads,
)
from benchmarks.cluster import BenchCluster
from benchmarks.harness import in_worker
from benchmarks.report import (
    SPARK_BASELINE_CASE,
    SPARK_SEND_CASE,
    SPARK_SINK_CASE,
    TLS_SUFFIX,
    SuiteResult,
    acceptance_text,
    plot,
    table,
    write_json,
)

PARTS = (
    "storage",
    "grpc",
    "minikafka",
    "tls",
    "spark",
    "latency",
    "breakdown",
    "failover",
    "rebalance",
    "peers",
)
#: Open-loop rates of the latency sweep, as shares of the measured RF=3 acks=all 1 KiB
#: maximum throughput.
SWEEP_SHARES = (0.1, 0.5, 0.8)
SIZES = (100, 1024)
#: (label, replication factor, acks) of the producer cases.
PRODUCE_CONFIGS: tuple[tuple[str, int, int | str], ...] = (
    ("RF=1 acks=1", 1, 1),
    ("RF=3 acks=1", 3, 1),
    ("RF=3 acks=all", 3, "all"),
)
#: The producer case measured again with TLS (label of the TLS row: `report.TLS_SUFFIX`).
TLS_CONFIG: tuple[str, int, int | str] = ("RF=3 acks=all", 3, "all")
PRODUCE_NOTES = "Producer, linger 5 ms, default batch/window"


class Budget:
    """Run lengths: the full suite (< 10 min on 2 cores) or a --quick smoke run."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.seconds = 0.5 if quick else 2.0
        self.runs = 3
        self.latency_warmup_s = 0.5 if quick else 1.0
        self.latency_run_s = 0.5 if quick else 3.0
        self.failover_trials = 1 if quick else 5
        self.rebalance_rounds = 2 if quick else 7
        self.storage_mib = 8 if quick else 64
        self.spark_rows = 100_000 if quick else 1_000_000


def _storage(budget: Budget) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.storage_bench", "--total-mib", str(budget.storage_mib)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return proc.stdout.strip()


def _storage_part(result: SuiteResult, budget: Budget) -> None:
    result.storage = _storage(budget)
    for line in result.storage.splitlines():
        if line.startswith("append "):
            result.storage_append_ratio = float(line.split()[-1])


def _grpc(result: SuiteResult, budget: Budget, root: Path) -> None:
    from client.producer import DEFAULT_BATCH_SIZE

    address = f"127.0.0.1:{peers.free_port()}"
    server = grpc_baseline.start_server(address, root / "grpc-baseline.log")
    try:
        for size in SIZES:
            runs = in_worker(
                grpc_baseline.throughput,
                address,
                server.pid,
                direction="upload",
                message_bytes=DEFAULT_BATCH_SIZE,
                window=5,
                seconds=budget.seconds,
                runs=budget.runs,
                record_bytes=size,
            )
            result.cases.append(
                stats.summarize(
                    f"grpc upload ceiling {size} B",
                    group="baseline",
                    system="grpc",
                    record_bytes=size,
                    runs=runs,
                    notes=f"unary {DEFAULT_BATCH_SIZE >> 10} KiB messages, 5 in flight",
                )
            )
        runs = in_worker(
            grpc_baseline.throughput,
            address,
            server.pid,
            direction="download",
            message_bytes=4 << 20,
            window=1,
            seconds=budget.seconds,
            runs=budget.runs,
            record_bytes=1024,
        )
        result.cases.append(
            stats.summarize(
                "grpc download ceiling",
                group="baseline",
                system="grpc",
                record_bytes=1024,
                runs=runs,
                notes="unary 4 MiB responses, 1 in flight (as one consumer fetch)",
            )
        )
        rtts = in_worker(
            grpc_baseline.round_trips, address, seconds=budget.seconds, runs=budget.runs
        )
        result.rtt = {
            "p50_ms": stats.median([r["p50_ms"] for r in rtts]),
            "p99_ms": stats.median([r["p99_ms"] for r in rtts]),
        }
    finally:
        server.terminate()
        server.wait(timeout=10)


def _minikafka(result: SuiteResult, budget: Budget, root: Path, parts: set[str]) -> None:
    run_id = uuid.uuid4().hex[:6]
    with BenchCluster(root / "cluster") as cluster:
        pids = {n: p for n, p in cluster.pids().items()}
        if "minikafka" in parts:
            for size in SIZES:
                for label, rf, acks in PRODUCE_CONFIGS:
                    topic = f"bench-{run_id}-{size}-rf{rf}-acks{acks}"
                    spec = workloads.ProduceSpec(
                        bootstrap=cluster.bootstrap,
                        topic=topic,
                        replication_factor=rf,
                        acks=acks,
                        record_bytes=size,
                        seconds=budget.seconds,
                        runs=budget.runs,
                        pids=pids,
                    )
                    runs = in_worker(workloads.produce_throughput, spec)
                    result.cases.append(
                        stats.summarize(
                            f"produce {size} B {label}",
                            group="produce",
                            system="minikafka",
                            record_bytes=size,
                            runs=runs,
                            notes=PRODUCE_NOTES,
                        )
                    )
                    if acks == "all":
                        bulk = msgspec.structs.replace(spec, topic=f"{topic}-bulk")
                        runs = in_worker(workloads.produce_batch_throughput, bulk)
                        result.cases.append(
                            stats.summarize(
                                f"produce {size} B {label} send_batch",
                                group="produce",
                                system="minikafka",
                                record_bytes=size,
                                runs=runs,
                                notes=f"Producer.send_batch of {workloads.SEND_BATCH_RECORDS} "
                                "records per call, linger 5 ms",
                            )
                        )
                        in_worker(workloads.drop_topics, cluster.bootstrap, [bulk.topic])
                        consume = workloads.ConsumeSpec(
                            bootstrap=cluster.bootstrap,
                            topic=topic,
                            record_bytes=size,
                            seconds=budget.seconds,
                            runs=budget.runs,
                            pids=pids,
                        )
                        runs = in_worker(workloads.consume_catch_up, consume)
                        result.cases.append(
                            stats.summarize(
                                f"consume {size} B catch-up RF=3",
                                group="consume",
                                system="minikafka",
                                record_bytes=size,
                                runs=runs,
                                notes="AsyncConsumer, 4 MiB partition fetches, every value "
                                "touched in Python",
                            )
                        )
                    in_worker(workloads.drop_topics, cluster.bootstrap, [topic])
                    # Deleting a large log can stall a broker past the session timeout
                    # (see build/PERFORMANCE.md); the next case needs all brokers back.
                    cluster.wait_active(len(cluster.broker_addresses))
        if "latency" in parts:
            result.latency.append(_latency(cluster, budget, root, run_id))
            _latency_sweep(result, cluster, budget, root, run_id)
    fencing = [
        line.split(" INFO ")[0] + " " + line.split("state_change: ", 1)[-1]
        for line in (root / "cluster" / "controller.log").read_text().splitlines()
        if "missed heartbeats" in line
    ]
    result.machine["brokers_fenced_by_session_timeout"] = fencing


def _produce_rows(
    result: SuiteResult,
    budget: Budget,
    root: Path,
    *,
    tls: bool,
    configs: tuple[tuple[str, int, int | str], ...],
) -> None:
    """The producer rows of `configs` at every size, each on a fresh topic of one fresh
    3-broker cluster (`tls`: TLS and mutual TLS on every listener and link, the clients
    presenting a certificate; the row's name ends with `report.TLS_SUFFIX`)."""
    run_id = uuid.uuid4().hex[:6]
    suffix = TLS_SUFFIX if tls else ""
    with BenchCluster(root / ("cluster-tls" if tls else "cluster-plain"), tls=tls) as cluster:
        pids = cluster.pids()
        for size in SIZES:
            for label, rf, acks in configs:
                spec = workloads.ProduceSpec(
                    bootstrap=cluster.bootstrap,
                    topic=f"bench-{run_id}-{size}-rf{rf}-acks{acks}{'-tls' if tls else ''}",
                    replication_factor=rf,
                    acks=acks,
                    record_bytes=size,
                    seconds=budget.seconds,
                    runs=budget.runs,
                    pids=pids,
                    client_config=cluster.client_config,
                )
                runs = in_worker(workloads.produce_throughput, spec)
                result.cases.append(
                    stats.summarize(
                        f"produce {size} B {label}{suffix}",
                        group="produce",
                        system="minikafka",
                        record_bytes=size,
                        runs=runs,
                        notes=PRODUCE_NOTES + ("; TLS + mutual TLS" if tls else ""),
                    )
                )
                in_worker(
                    workloads.drop_topics, cluster.bootstrap, [spec.topic], cluster.client_config
                )
                cluster.wait_active(len(cluster.broker_addresses))


def _tls(result: SuiteResult, budget: Budget, root: Path) -> None:
    """RF=3 acks=all with TLS, next to the plaintext row of the `minikafka` part."""
    _produce_rows(result, budget, root, tls=True, configs=(TLS_CONFIG,))


def tls_comparison(quick: bool = False, work_dir: Path | None = None) -> SuiteResult:
    """Only the TLS comparison: plaintext RF=3 acks=all, then the same with TLS, each on
    its own fresh cluster, at both sizes; prints the rows and TLS ÷ plaintext."""
    budget = Budget(quick)
    result = SuiteResult(started=time.strftime("%Y-%m-%d %H:%M:%S %Z"), quick=quick)
    with contextlib.ExitStack() as stack:
        root = work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mk-tls-")))
        root.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        _produce_rows(result, budget, root, tls=False, configs=(TLS_CONFIG,))
        _produce_rows(result, budget, root, tls=True, configs=(TLS_CONFIG,))
        result.seconds = round(time.monotonic() - start, 1)
    print(table(result))
    return result


def _spark(result: SuiteResult, budget: Budget, root: Path) -> None:
    """Spark sink rows/s into RF=3 acks=all, with `send_batch` and `send()` on the same
    fresh cluster just before (100 B records; the sink's target is >= 0.5x send_batch)."""
    run_id = uuid.uuid4().hex[:6]
    size = SIZES[0]
    with BenchCluster(root / "cluster-spark") as cluster:
        pids = cluster.pids()
        spec = workloads.ProduceSpec(
            bootstrap=cluster.bootstrap,
            topic=f"spark-base-{run_id}",
            replication_factor=3,
            acks="all",
            record_bytes=size,
            seconds=budget.seconds,
            runs=budget.runs,
            pids=pids,
        )
        for name, workload, topic, notes in (
            (
                SPARK_BASELINE_CASE,
                workloads.produce_batch_throughput,
                f"{spec.topic}-bulk",
                f"send_batch of {workloads.SEND_BATCH_RECORDS} records per call, linger 5 ms",
            ),
            (SPARK_SEND_CASE, workloads.produce_throughput, spec.topic, PRODUCE_NOTES),
        ):
            runs = in_worker(workload, msgspec.structs.replace(spec, topic=topic))
            result.cases.append(
                stats.summarize(
                    name,
                    group="spark",
                    system="minikafka",
                    record_bytes=size,
                    runs=runs,
                    notes=notes,
                )
            )
            in_worker(workloads.drop_topics, cluster.bootstrap, [topic])
            cluster.wait_active(len(cluster.broker_addresses))
        sink = spark_bench.SparkSinkSpec(
            bootstrap=cluster.bootstrap,
            topic=f"spark-sink-{run_id}",
            record_bytes=size,
            rows=budget.spark_rows,
            runs=budget.runs,
            pids=pids,
        )
        runs = in_worker(spark_bench.sink_throughput, sink)
        result.cases.append(
            stats.summarize(
                SPARK_SINK_CASE,
                group="spark",
                system="spark",
                record_bytes=size,
                runs=runs,
                notes=f"df.write.format('minikafka') of {sink.rows} cached rows, "
                f"local[{sink.tasks}], sink defaults (acks=all, idempotent)",
            )
        )


def spark_comparison(quick: bool = False, work_dir: Path | None = None) -> SuiteResult:
    """Only the Spark sink part: prints its rows and the sink ÷ send_batch check."""
    budget = Budget(quick)
    result = SuiteResult(started=time.strftime("%Y-%m-%d %H:%M:%S %Z"), quick=quick)
    with contextlib.ExitStack() as stack:
        root = work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mk-spk-")))
        root.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        _spark(result, budget, root)
        result.seconds = round(time.monotonic() - start, 1)
    print(table(result))
    print(acceptance_text(result))
    return result


def _latency_spec(
    cluster: BenchCluster, budget: Budget, topic: str, rate_per_s: int, *, runs: int
) -> workloads.LatencySpec:
    return workloads.LatencySpec(
        bootstrap=cluster.bootstrap,
        topic=topic,
        rate_per_s=rate_per_s,
        record_bytes=1024,
        acks="all",
        linger_ms=5,
        warmup_s=budget.latency_warmup_s,
        seconds_per_run=budget.latency_run_s,
        runs=runs,
    )


def _open_loop(
    spec: workloads.LatencySpec, root: Path, name: str
) -> tuple[stats.LatencyResult, list[tuple[int, int, int]]]:
    """One open-loop latency measurement on a fresh RF=3 topic (min.insync.replicas=2);
    also returns the consumer's records when `spec.keep_records`."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    in_worker(workloads.ensure_topic, spec.bootstrap, spec.topic, 3, {"min.insync.replicas": "2"})
    ready = root / f"{spec.topic}.ready"
    spawn = get_context("spawn")
    with (
        ProcessPoolExecutor(1, mp_context=spawn) as consumer_pool,
        ProcessPoolExecutor(1, mp_context=spawn) as producer_pool,
    ):
        consumed = consumer_pool.submit(workloads.latency_consumer, spec, str(ready))
        workloads.wait_file(str(ready), 60)
        sent = producer_pool.submit(workloads.latency_producer, spec).result()
        outcome = consumed.result()
    in_worker(workloads.drop_topics, spec.bootstrap, [spec.topic])
    runs = outcome["runs"]
    p50, p99, p999 = workloads.gather_latency(runs)
    latency = stats.LatencyResult(
        name=name,
        rate_per_s=spec.rate_per_s,
        record_bytes=spec.record_bytes,
        linger_ms=spec.linger_ms,
        runs=runs,
        p50_ms=round(p50, 2),
        p99_ms=round(p99, 2),
        p999_ms=round(p999, 2),
        delivered=int(outcome["delivered"]),
        notes=f"{sent} sent; latency = consumer receive - intended send time",
    )
    return latency, outcome.get("records", [])


def _latency(cluster: BenchCluster, budget: Budget, root: Path, run_id: str) -> stats.LatencyResult:
    spec = _latency_spec(cluster, budget, f"latency-{run_id}", 10_000, runs=budget.runs)
    name = f"e2e RF=3 acks=all {spec.rate_per_s // 1000} k rec/s x 1 KiB, linger 5 ms"
    return _open_loop(spec, root, name)[0]


def _max_rate(result: SuiteResult, cluster: BenchCluster, budget: Budget, run_id: str) -> float:
    """RF=3 acks=all 1 KiB records/s: this run's producer row, else measured here."""
    case = result.case("produce 1024 B RF=3 acks=all")
    if case is not None:
        return case.records_per_s
    spec = workloads.ProduceSpec(
        bootstrap=cluster.bootstrap,
        topic=f"sweep-max-{run_id}",
        replication_factor=3,
        acks="all",
        record_bytes=1024,
        seconds=budget.seconds,
        runs=1,
        pids=cluster.pids(),
    )
    runs = in_worker(workloads.produce_throughput, spec)
    in_worker(workloads.drop_topics, cluster.bootstrap, [spec.topic])
    cluster.wait_active(len(cluster.broker_addresses))
    return stats.summarize(
        "max", group="produce", system="minikafka", record_bytes=1024, runs=runs
    ).records_per_s


def _latency_sweep(
    result: SuiteResult, cluster: BenchCluster, budget: Budget, root: Path, run_id: str
) -> None:
    """Open-loop latency at `SWEEP_SHARES` of the measured maximum throughput."""
    top = _max_rate(result, cluster, budget, run_id)
    result.machine["sweep_max_records_per_s"] = round(top)
    for share in SWEEP_SHARES:
        rate = max(int(top * share), 100)
        spec = _latency_spec(cluster, budget, f"sweep-{run_id}-{int(share * 100)}", rate, runs=1)
        name = f"open loop {share:.0%} of max ({_rate_text(rate)} rec/s) RF=3 acks=all 1 KiB"
        result.latency_sweep.append(_open_loop(spec, root, name)[0])


def _rate_text(rate: float) -> str:
    return f"{rate / 1000:.1f} k" if rate >= 1000 else f"{rate:.0f}"


def _breakdown(result: SuiteResult, budget: Budget, root: Path) -> None:
    """The 10 k rec/s acks=all latency run on a cluster whose brokers trace their stages
    (`minikafka.stage_trace`), joined per record (`benchmarks.breakdown`)."""
    from minikafka import stage_trace

    trace_dir = root / "stage-trace"
    run_id = uuid.uuid4().hex[:6]
    with BenchCluster(
        root / "cluster-traced", broker_env={stage_trace.ENV: str(trace_dir)}
    ) as cluster:
        spec = msgspec.structs.replace(
            _latency_spec(cluster, budget, f"traced-{run_id}", 10_000, runs=budget.runs),
            keep_records=True,
        )
        name = "breakdown, e2e RF=3 acks=all 10 k rec/s x 1 KiB, linger 5 ms (traced brokers)"
        _, records = _open_loop(spec, root, name)
        # Late events are flushed by the followers' next long-poll fetches.
        time.sleep(2 * stage_trace.FLUSH_EVERY_S + 1)
    events = breakdown.read_events(trace_dir, spec.topic)
    result.breakdown.append(breakdown.analyze(name, events, records))


def _failover(result: SuiteResult, budget: Budget, root: Path) -> None:
    spec = failover.FailoverSpec(
        trials=budget.failover_trials, request_timeout_ms=1000, data_dir=str(root / "failover")
    )
    result.failover.extend(in_worker(failover.run_failover, spec))


def _rebalance(result: SuiteResult, budget: Budget, root: Path) -> None:
    spec = rebalance_bench.RebalanceSpec(
        rounds=budget.rebalance_rounds, data_dir=str(root / "rebalance")
    )
    result.rebalance.extend(in_worker(rebalance_bench.run_rebalance, spec))


def _peers(result: SuiteResult, budget: Budget, root: Path) -> None:
    missing = peers.ensure_installed(["redis-server", "nats-server"])
    result.skipped.extend(f"{m} not installed (needs root and apt-get)" for m in missing)
    if "redis-server" not in missing:
        redis = peers.start_redis(root / "redis")
        try:
            for size in SIZES:
                runs = in_worker(
                    peers.redis_xadd,
                    redis.ports[0],
                    redis.pids(),
                    record_bytes=size,
                    seconds=budget.seconds,
                    runs=budget.runs,
                )
                result.cases.append(
                    stats.summarize(
                        f"Redis XADD {size} B",
                        group="peer",
                        system="redis",
                        record_bytes=size,
                        runs=runs,
                        notes="redis-py + hiredis, pipelines of 1000, no persistence",
                    )
                )
                runs = in_worker(
                    peers.redis_xread,
                    redis.ports[0],
                    redis.pids(),
                    record_bytes=size,
                    seconds=budget.seconds,
                    runs=budget.runs,
                )
                result.cases.append(
                    stats.summarize(
                        f"Redis XREAD {size} B",
                        group="peer",
                        system="redis",
                        record_bytes=size,
                        runs=runs,
                        notes="XREAD COUNT 10000",
                    )
                )
                in_worker(peers.redis_reset, redis.ports[0])
        finally:
            redis.stop()
    if "nats-server" not in missing:
        nats = peers.start_nats_r3(root / "nats")
        try:
            for size in SIZES:
                runs = in_worker(
                    peers.nats_publish,
                    nats.ports,
                    nats.pids(),
                    record_bytes=size,
                    seconds=budget.seconds,
                    runs=budget.runs,
                )
                result.cases.append(
                    stats.summarize(
                        f"NATS JetStream R3 publish {size} B",
                        group="peer",
                        system="nats",
                        record_bytes=size,
                        runs=runs,
                        notes=f"nats-py, {peers.NATS_IN_FLIGHT} acked publishes in flight, "
                        "file store, 3 servers",
                    )
                )
        finally:
            nats.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: short runs, 1 trial")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--skip", default="", help=f"comma-separated parts of {PARTS}")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="data and logs, kept (default: a tmp dir)"
    )
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(PARTS)
    if unknown:
        parser.error(f"unknown parts to skip: {sorted(unknown)}; known: {PARTS}")
    parts = set(PARTS) - skip
    budget = Budget(args.quick)
    result = SuiteResult(
        started=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        quick=args.quick,
        machine={
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_at_start": os.getloadavg(),
        },
    )
    steps: list[tuple[str, Callable[[Path], None]]] = []
    if "storage" in parts:
        steps.append(("storage", lambda root: _storage_part(result, budget)))
    if "grpc" in parts:
        steps.append(("gRPC ceilings", lambda root: _grpc(result, budget, root)))
    if parts & {"minikafka", "latency"}:
        steps.append(("minikafka", lambda root: _minikafka(result, budget, root, parts)))
    if "tls" in parts:
        steps.append(("TLS", lambda root: _tls(result, budget, root)))
    if "spark" in parts:
        steps.append(("Spark sink", lambda root: _spark(result, budget, root)))
    if "breakdown" in parts:
        steps.append(("breakdown", lambda root: _breakdown(result, budget, root)))
    if "failover" in parts:
        steps.append(("failover", lambda root: _failover(result, budget, root)))
    if "rebalance" in parts:
        steps.append(("rebalance", lambda root: _rebalance(result, budget, root)))
    if "peers" in parts:
        steps.append(("peers", lambda root: _peers(result, budget, root)))

    from tqdm import tqdm  # type: ignore[import-untyped]

    start = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.work_dir is not None:  # kept afterwards: logs of every process are there
            root = args.work_dir.resolve()
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mk-bench-")))
        with tqdm(steps, desc="benchmarks", unit="part", file=sys.stderr) as bar:
            for name, step in bar:
                bar.set_postfix_str(name)
                try:
                    step(root)
                except Exception as exc:  # one broken part must not hide the others
                    result.skipped.append(f"{name}: {type(exc).__name__}: {exc}")
                    tqdm.write(f"{name} failed: {exc!r}", file=sys.stderr)
    result.seconds = round(time.monotonic() - start, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(result, args.out / "results.json")
    plots = plot(result, args.out)
    if result.storage:
        print(result.storage)
        print()
    print(table(result))
    for item in result.breakdown:
        print()
        print(breakdown.text(item))
    print()
    print(acceptance_text(result))
    for note in result.skipped:
        print(f"skipped/failed: {note}")
    print(f"\n{args.out / 'results.json'}; plots: {', '.join(str(p) for p in plots)}")
    print(f"suite took {result.seconds:.0f} s")
    return 1 if any("failed" in s or ":" in s for s in result.skipped) else 0
