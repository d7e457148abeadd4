"""The replication simulation with the real client's consumer as a workload
(`consumer_workload`): `AsyncConsumer`s reading `t` through the simulated network, beside
the idempotent `AsyncProducer`s (`client_workload`), under the seeds' faults.

- `test_client_consumer_seeded_runs`: `CONSUMER_SEED_COUNT` seeds with `CLIENT_PRODUCERS`
  producers and `CLIENT_CONSUMERS` consumers; env `MINIKAFKA_SIM_CONSUMER_SEEDS` /
  `MINIKAFKA_SIM_CONSUMER_FIRST_SEED` run more.
- `test_replay_one_client_consumer_seed`: `MINIKAFKA_SIM_CONSUMER_SEED=<n>` replays one.
- The canary runs the same seeds with the unsafe HW (`unsafe_test_hw_is_leo`) and requires
  the real consumers themselves to have read acknowledged values that then vanished.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import client.consumer
import tests.sim.replication.consumer_workload
from tests.chaos import checker
from tests.sim.replication.network import SimStub
from tests.sim.replication.simulator import (
    RunStats,
    SimParams,
    Simulation,
    Violation,
    _only_topic,
    params_for,
    run_digest,
)
from tests.sim.replication.workload import TOPIC

#: Seeds per normal test run.
CONSUMER_SEED_COUNT = 10
CLIENT_PRODUCERS = 2
CLIENT_CONSUMERS = 2
#: The unsafe HW must be seen through the real consumers' reads within this many seeds.
CANARY_SEEDS = 10


def consumer_params(seed: int) -> SimParams:
    return msgspec.structs.replace(
        params_for(seed), client_producers=CLIENT_PRODUCERS, client_consumers=CLIENT_CONSUMERS
    )


def _run(seed: int) -> tuple[RunStats, Simulation]:
    simulation = Simulation(seed, params=consumer_params(seed))
    return simulation.run(), simulation


def test_client_consumer_seeded_runs(capsys: pytest.CaptureFixture[str]) -> None:
    count = int(os.environ.get("MINIKAFKA_SIM_CONSUMER_SEEDS", CONSUMER_SEED_COUNT))
    first = int(os.environ.get("MINIKAFKA_SIM_CONSUMER_FIRST_SEED", 0))
    seeds = range(first, first + count)
    started = time.perf_counter()
    runs = [_run(seed) for seed in seeds]
    elapsed = time.perf_counter() - started
    read = {stats.seed: simulation.client_consumers.read for stats, simulation in runs}
    with capsys.disabled():
        print(
            f"\nReplication simulation with the real consumer: seeds {seeds.start}.."
            f"{seeds.stop - 1}: {len(runs)} runs in {elapsed:.1f} s "
            f"({len(runs) / elapsed * 60:.0f} seeds/min); client consumers read "
            f"{sum(read.values())} records in "
            f"{sum(s.client_consumers.polls for _, s in runs)} polls, restarted after "
            f"{sum(s.client_consumers.failures for _, s in runs)} errors; faults "
            f"{sum(stats.faults for stats, _ in runs)}, crashes "
            f"{sum(stats.crashes for stats, _ in runs)}"
        )
    # Every run's real consumers read under faults: the checker judged their polls.
    assert all(count > 0 for count in read.values()), read
    assert sum(1 for stats, _ in runs if stats.crashes) > len(runs) // 2


def test_the_consumer_workload_runs_the_production_consumer() -> None:
    """The consumers are `client.consumer.AsyncConsumer` itself (not a copy or a
    subclass), reaching the brokers only through simulated-network stubs from
    `client-consumer-<n>`, on the loop's clock, and their polls are in the history."""
    workload_module = vars(tests.sim.replication.consumer_workload)
    assert workload_module["AsyncConsumer"] is client.consumer.AsyncConsumer
    quiet = msgspec.structs.replace(consumer_params(1), fault_interval_ms=10**9)
    simulation = Simulation(1, params=quiet)
    simulation.run()
    workload = simulation.client_consumers
    assert len(workload.consumers) == CLIENT_CONSUMERS  # no fault: none restarted
    for number, consumer in enumerate(workload.consumers, start=1):
        assert type(consumer) is client.consumer.AsyncConsumer
        runtime = consumer._runtime
        assert runtime is not None
        assert runtime.conn.clock_s == consumer.clock
        stub = runtime.conn.stub(simulation.brokers[0].address)
        inner = getattr(stub, "stub", None)
        assert isinstance(inner, SimStub)
        assert inner.source == f"client-consumer-{number}"
    polls = [
        op
        for op in simulation.ops
        if op["type"] == "ok"
        and op.get("f") == "poll"
        and str(op["process"]).startswith("client-consumer-")
    ]
    assert len(polls) == workload.polls > 0
    assert sum(len(rows) for op in polls for rows in op["value"][0][1].values()) == workload.read
    assert all(set(op["hw"]) == set(op["value"][0][1]) for op in polls)


def test_a_client_consumer_seed_replays_exactly() -> None:
    """The same seed twice: the same history (every op at its virtual time), fault
    schedule and outcome."""
    seed = 2
    first = run_digest(seed, client_producers=CLIENT_PRODUCERS, client_consumers=CLIENT_CONSUMERS)
    again = run_digest(seed, client_producers=CLIENT_PRODUCERS, client_consumers=CLIENT_CONSUMERS)
    assert first == again
    assert int(first.rsplit(":", 1)[1]) > 0


#: Each process runs this: objects allocated first shift the address of every later one.
_DIGEST_SCRIPT = """
import sys
ballast = [object() for _ in range(int(sys.argv[1]))]
from tests.sim.replication.simulator import run_digest
print(run_digest(int(sys.argv[2]), client_producers=2, client_consumers=2))
"""


def test_a_client_consumer_seed_replays_across_processes() -> None:
    """The same seed in two fresh processes with different str hashes and memory
    layouts (what the consumer's sets of topics, partitions and tasks iterate by) gives
    the same digest, as `MINIKAFKA_SIM_CONSUMER_SEED=<n>` needs to replay a failure."""
    root = Path(__file__).resolve().parents[3]
    digests = []
    for hash_seed, ballast in (("1", 0), ("2", 77_777)):
        finished = subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT, str(ballast), "2"],
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert finished.returncode == 0, finished.stderr[-3000:]
        digests.append(finished.stdout.strip())
    assert digests[0] == digests[1] != ""


def test_the_default_seeds_run_no_client_consumer() -> None:
    assert params_for(5).client_consumers == 0


def test_replay_one_client_consumer_seed(capsys: pytest.CaptureFixture[str]) -> None:
    seed = os.environ.get("MINIKAFKA_SIM_CONSUMER_SEED")
    if seed is None:
        pytest.skip("set MINIKAFKA_SIM_CONSUMER_SEED=<n> to replay one client consumer seed")
    simulation = Simulation(int(seed), params=consumer_params(int(seed)))
    try:
        stats = simulation.run()
    finally:
        with capsys.disabled():
            print(f"\nparams: {simulation.params}")
            print("\n".join(simulation.schedule))
    with capsys.disabled():
        print(stats, f"client consumers read {simulation.client_consumers.read}")


def _vanished_from_client_consumers(simulation: Simulation) -> list[dict[str, Any]]:
    """Values the real consumers' polls returned that the final polls no longer find."""
    ops = checker.completions(_only_topic(simulation.ops, TOPIC))
    final = checker.reads_of(ops, final_only=True)
    theirs = [
        op for op in ops if op.get("final") or str(op["process"]).startswith("client-consumer-")
    ]
    return checker.vanished(checker.reads_of(theirs), final)


def test_canary_unsafe_high_watermark_is_read_by_the_real_consumer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`unsafe_test_hw_is_leo`: a leader answers acks=all and serves records before its
    followers have them, so a leader crash takes them away. The real consumer, fetching
    below the HW its leader announces, must be among the readers of such a value (a
    `vanished` read of its own, not only the hand-built consumers' or the final polls')."""
    for seed in range(CANARY_SEEDS):
        simulation = Simulation(
            seed,
            params=consumer_params(seed),
            broker_settings={"unsafe_test_hw_is_leo": True},
        )
        try:
            simulation.run()
        except Violation:
            vanished = _vanished_from_client_consumers(simulation)
            if vanished:
                with capsys.disabled():
                    print(
                        f"\ncanary unsafe_test_hw_is_leo through the real consumer: seed "
                        f"{seed}, {len(vanished)} vanished values it had read"
                    )
                return
    pytest.fail(f"no real consumer read a vanished value in {CANARY_SEEDS} seeds")
