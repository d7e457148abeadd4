"""Scenario harness: seeds, the cluster + history of one run, and the checked verdict.

`MINIKAFKA_CHAOS_LONG=1` selects the long mode (more seeds, the soak);
`MINIKAFKA_CHAOS_SEED=N` replays one seed. A failing run prints its seed, the nemesis
schedule and the checker's report, and leaves `history.jsonl`, `results.json` and
`results.txt` in the run's artifact directory.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from client import TopicPartition
from tests.chaos.checker import CheckResult, check
from tests.chaos.history import History
from tests.chaos.workload import Workload
from tests.support.chaos_cluster import ChaosCluster
from tests.support.lazyfs import unavailable_reason as lazyfs_unavailable_reason

LONG = os.environ.get("MINIKAFKA_CHAOS_LONG") == "1"


def seeds(ci: Sequence[int] = (1,), long: Sequence[int] = (1, 2, 3)) -> list[int]:
    """The seeds a scenario runs with: one pinned by the environment, else per mode."""
    pinned = os.environ.get("MINIKAFKA_CHAOS_SEED")
    if pinned:
        return [int(pinned)]
    return list(long if LONG else ci)


class Run:
    """One scenario run: seed, rng, history, cluster and artifacts."""

    def __init__(self, name: str, seed: int, root: Path) -> None:
        self.name = name
        self.seed = seed
        self.rng = random.Random(seed)
        self.root = root
        self.artifacts = root / "artifacts"
        self.history = History()
        self.cluster: ChaosCluster | None = None
        self.workloads: list[Workload] = []
        self.history.meta(scenario=name, seed=seed)

    def start_cluster(self, brokers: int = 3, **kwargs: Any) -> ChaosCluster:
        if kwargs.get("lazy_fs"):
            reason = lazyfs_unavailable_reason()
            if reason is not None:
                pytest.skip(f"power loss needs a FUSE mount: {reason}")
        self.cluster = ChaosCluster(
            self.root / "cluster", brokers=brokers, history=self.history, **kwargs
        )
        self.cluster.start()
        return self.cluster

    def topic(
        self,
        name: str = "q",
        *,
        partitions: int = 2,
        rf: int = 3,
        configs: dict[str, str] | None = None,
    ) -> list[TopicPartition]:
        assert self.cluster is not None
        settings = {"min_insync_replicas": "2", **(configs or {})}
        self.cluster.create_topic(name, partitions=partitions, rf=rf, **settings)
        if rf == len(self.cluster.brokers):
            self.cluster.wait_full_isr(name, partitions)
        return [TopicPartition(name, p) for p in range(partitions)]

    @staticmethod
    def topic_partitions(name: str, partitions: int) -> list[TopicPartition]:
        return [TopicPartition(name, p) for p in range(partitions)]

    def workload(self, partitions: Sequence[TopicPartition], **kwargs: Any) -> Workload:
        assert self.cluster is not None
        first = 1 + 10 * len(self.workloads)
        workload = Workload(
            self.history,
            self.cluster.client_bootstrap,
            partitions,
            seed=self.seed,
            first_worker=first,
            **kwargs,
        )
        self.workloads.append(workload)
        return workload

    def heal(self) -> None:
        """Remove every fault: heal the network, resume and restart every process."""
        cluster = self.cluster
        assert cluster is not None
        cluster.record("heal")
        cluster.net.heal()
        for process in [cluster.controller, *cluster.brokers.values()]:
            if process.alive() and process.paused:
                process.resume()
        if not cluster.controller.alive():
            cluster.start_controller()
        for broker_id, process in cluster.brokers.items():
            if not process.alive():
                cluster.start_broker(broker_id)
        cluster.wait_active(len(cluster.brokers), timeout_s=60)

    def converge_and_check(
        self,
        topic: str,
        partitions: int,
        *,
        expected: Iterable[str] = (),
        strict: bool = False,
        full_isr: bool = True,
        must_be_valid: bool = True,
    ) -> CheckResult:
        """Stop the workloads, heal, wait for convergence (I14), run the final polls and
        the checker, and compare the replicas' logs (I3)."""
        cluster = self.cluster
        assert cluster is not None
        for workload in self.workloads:
            workload.stop()
        self.heal()
        if full_isr:
            cluster.wait_full_isr(topic, partitions, timeout_s=60)
        every = sorted({tp for w in self.workloads for tp in w.partitions})
        reader = Workload(
            self.history, cluster.client_bootstrap, every, seed=self.seed, producers=0, consumers=0
        )
        reader.final_polls(timeout_s=60)
        result = self.verify(expected=expected, strict=strict, must_be_valid=must_be_valid)
        if full_isr:
            cluster.wait_identical_replicas(topic, partitions)
        return result

    def count(self, f: str, op_type: str) -> int:
        return sum(1 for op in self.history.ops if op.get("f") == f and op["type"] == op_type)

    def schedule(self) -> list[dict[str, Any]]:
        return [op for op in self.history.ops if op.get("f") == "nemesis"]

    def verify(
        self, *, expected: Iterable[str] = (), strict: bool = False, must_be_valid: bool = True
    ) -> CheckResult:
        """Check the history; fail the test (with seed, schedule and report) if invalid."""
        self.history.dump(self.artifacts / "history.jsonl")
        result = check(self.history.ops, expected=expected, strict=strict)
        result.write(self.artifacts)
        print(result.to_text())
        if must_be_valid and not result.valid:
            pytest.fail(self.failure_text(result.to_text()), pytrace=False)
        return result

    def failure_text(self, detail: str) -> str:
        schedule = "\n".join(
            "  " + json.dumps({k: v for k, v in op.items() if k != "time"}, sort_keys=True)
            for op in self.schedule()
        )
        return (
            f"{self.name} FAILED with seed {self.seed} "
            f"(replay: MINIKAFKA_CHAOS_SEED={self.seed} pytest tests/chaos -k {self.name})\n"
            f"schedule:\n{schedule}\nartifacts: {self.artifacts}\n{detail}"
        )

    def close(self) -> None:
        for workload in self.workloads:
            with suppress(RuntimeError):
                workload.stop(timeout_s=5)
        if self.cluster is not None:
            self.cluster.stop()
        self.history.dump(self.artifacts / "history.jsonl")


@contextmanager
def scenario(name: str, seed: int, root: Path) -> Iterator[Run]:
    run = Run(name, seed, root)
    print(f"{name}: seed {seed} (replay: MINIKAFKA_CHAOS_SEED={seed})")
    try:
        yield run
    except BaseException:
        print(run.failure_text("(exception; see traceback)"))
        raise
    finally:
        run.close()
