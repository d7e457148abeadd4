"""Scenario harness: seeds, the cluster + history of one run, and the checked verdict.

`MINIKAFKA_CHAOS_LONG=1` selects the long mode (more seeds, the soak);
`Run.sample_end_offsets` samples ListOffsets(LATEST) on every broker and
`Run.verify_end_offsets` fails the run if it ever went backwards (KIP-207);
`MINIKAFKA_CHAOS_SEED=N` replays one seed. A failing run prints its seed, the nemesis
schedule and the checker's report, and leaves `history.jsonl`, `results.json` and
`results.txt` in the run's artifact directory, plus one partition timeline per partition
of its workloads (`timeline-<topic>-<partition>.html` and `.txt`, as `minikafka
timeline` draws them from the controller's history and the brokers' logs).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import grpc
import pytest

from client import TopicPartition
from client.admin import partition_history
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from minikafka_cli.timeline import read_log_rows, write_timeline
from minikafka_cli.timeline_model import build_timeline
from tests.chaos.checker import LATEST_OFFSET_OP, CheckResult, check
from tests.chaos.history import History, Op, key_of
from tests.chaos.workload import Workload
from tests.support.chaos_cluster import ChaosCluster
from tests.support.lazyfs import unavailable_reason as lazyfs_unavailable_reason
from tests.support.processes import server_channel

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
        self.samplers: list[EndOffsetSampler] = []
        self.timelines_attached = False
        self.history.meta(scenario=name, seed=seed)

    def start_cluster(self, brokers: int = 3, **kwargs: Any) -> ChaosCluster:
        """A `ChaosCluster` under the run's directory (`tls=True`: TLS and mutual TLS on
        every listener; the workloads' clients and the harness's channels follow)."""
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
            client_config=self.cluster.client_config,
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
            self.history,
            cluster.client_bootstrap,
            every,
            seed=self.seed,
            producers=0,
            consumers=0,
            client_config=cluster.client_config,
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
            self.attach_timelines()
            pytest.fail(self.failure_text(result.to_text()), pytrace=False)
        return result

    def attach_timelines(self) -> list[Path]:
        """Write the timeline of every partition the workloads used into the artifacts
        (best effort: a controller that is down gives no history; the reason is written
        instead). Returns the files written."""
        cluster = self.cluster
        if cluster is None or self.timelines_attached:
            return []
        self.timelines_attached = True
        partitions = sorted({tp for w in self.workloads for tp in w.partitions})
        logs = [process.log_path for process in cluster.brokers.values()]
        logs.append(cluster.controller.log_path)
        written: list[Path] = []
        self.artifacts.mkdir(parents=True, exist_ok=True)
        for tp in partitions:
            name = f"timeline-{tp.topic}-{tp.partition}"
            try:
                response = cluster.controller_stub().DescribePartitionHistory(
                    controller_pb2.DescribePartitionHistoryRequest(
                        topic=tp.topic, partition=tp.partition
                    ),
                    timeout=5,
                )
                history = partition_history(tp.topic, tp.partition, response)
                rows = read_log_rows([p for p in logs if p.exists()], tp.topic, tp.partition)
                timeline = build_timeline(history, rows, now_ms=time.time_ns() // 1_000_000)
                for suffix in (".html", ".txt"):
                    write_timeline(timeline, self.artifacts / f"{name}{suffix}")
                    written.append(self.artifacts / f"{name}{suffix}")
            except (grpc.RpcError, OSError) as exc:
                (self.artifacts / f"{name}.txt").write_text(f"no timeline: {exc}\n")
        print(f"timelines: {', '.join(str(p) for p in written) or 'none'}")
        return written

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

    def sample_end_offsets(self, topic: str, partition: int) -> EndOffsetSampler:
        """Start sampling ListOffsets(LATEST) of one partition on every broker (see
        `EndOffsetSampler`); `verify_end_offsets` judges the samples."""
        assert self.cluster is not None
        sampler = EndOffsetSampler(self.history, self.cluster, topic, partition).start()
        self.samplers.append(sampler)
        return sampler

    def verify_end_offsets(self) -> list[dict[str, Any]]:
        """Stop the samplers; fail the test (with seed and schedule) if an end offset that
        a leader answered ever went backwards (KIP-207). Returns the regressions."""
        for sampler in self.samplers:
            sampler.stop()
        self.history.dump(self.artifacts / "history.jsonl")
        regressions = end_offset_regressions(self.history.ops)
        answered = sum(sampler.answers for sampler in self.samplers)
        print(f"end offsets: {answered} answers, {len(regressions)} went backwards")
        if regressions:
            detail = "\n".join(json.dumps(r, sort_keys=True) for r in regressions[:32])
            pytest.fail(
                self.failure_text(
                    f"ListOffsets(LATEST) went backwards {len(regressions)} time(s):\n{detail}"
                ),
                pytrace=False,
            )
        return regressions

    def close(self) -> None:
        for sampler in self.samplers:
            sampler.stop()
        for workload in self.workloads:
            with suppress(RuntimeError):
                workload.stop(timeout_s=5)
        if self.cluster is not None:
            self.cluster.stop()
        self.history.dump(self.artifacts / "history.jsonl")


#: The history op of one ListOffsets(LATEST) answer.
END_OFFSET = LATEST_OFFSET_OP
SAMPLER_PROCESS = "end-offset-sampler"


class EndOffsetSampler:
    """A thread asking every broker in turn, directly (not through the proxies), for the
    latest offset (ListOffsets LATEST, the high watermark) of one partition, as fast as
    they answer, until stopped. Each answer a broker gives as leader is recorded in the
    history as an `end-offset` op (invoke + ok, value [key, offset], with the broker and
    its leader epoch); refusals (not the leader, fenced, unavailable) are not recorded.
    The calls are sequential, so the recorded order is the real-time order.
    """

    def __init__(self, history: History, cluster: ChaosCluster, topic: str, partition: int):
        self.history = history
        self.cluster = cluster
        self.key = key_of(topic, partition)
        self.request = broker_pb2.ListOffsetsRequest(
            partitions=[
                broker_pb2.ListOffsetsPartition(
                    topic=topic, partition=partition, timestamp_ms=-1, current_leader_epoch=-1
                )
            ]
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="end-offset-sampler", daemon=True)
        self.answers = 0

    def start(self) -> EndOffsetSampler:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        channels = {
            broker_id: server_channel(process.address, self.cluster.credentials)
            for broker_id, process in self.cluster.brokers.items()
        }
        try:
            while not self._stop.is_set():
                for broker_id, process in self.cluster.brokers.items():
                    if not process.alive() or process.paused:
                        continue
                    self._sample(broker_id, channels[broker_id])
                self._stop.wait(0.001)  # yield between rounds; the calls pace the loop
        finally:
            for channel in channels.values():
                channel.close()

    def _sample(self, broker_id: int, channel: grpc.Channel) -> None:
        op = self.history.invoke(SAMPLER_PROCESS, END_OFFSET, self.key, broker=broker_id)
        try:
            reply = broker_pb2_grpc.BrokerServiceStub(channel).ListOffsets(
                self.request, timeout=1.0
            )
        except grpc.RpcError as exc:
            self.history.complete(op, "fail", self.key, error=str(exc.code()))
            return
        answer = reply.partitions[0]
        if answer.error_code != ErrorCode.NONE:
            self.history.complete(op, "fail", self.key, error=int(answer.error_code))
            return
        self.answers += 1
        self.history.complete(
            op, "ok", [self.key, int(answer.offset)], leader_epoch=int(answer.leader_epoch)
        )


def end_offset_regressions(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Answers of `end-offset` ops (in history order) lower than an earlier answer for
    the same key: the latest offset a client was told went backwards (KIP-207)."""
    highest: dict[str, tuple[int, Any, int]] = {}
    out: list[dict[str, Any]] = []
    for op in ops:
        if op.get("f") != END_OFFSET or op["type"] != "ok":
            continue
        key, offset = op["value"]
        before = highest.get(key)
        if before is not None and offset < before[0]:
            out.append(
                {
                    "key": key,
                    "offset": offset,
                    "broker": op.get("broker"),
                    "leader_epoch": op.get("leader_epoch"),
                    "op": op["index"],
                    "highest_before": before[0],
                    "highest_from_broker": before[1],
                    "highest_in_epoch": before[2],
                }
            )
        if before is None or offset > before[0]:
            highest[key] = (offset, op.get("broker"), op.get("leader_epoch", -1))
    return out


@contextmanager
def scenario(name: str, seed: int, root: Path) -> Iterator[Run]:
    run = Run(name, seed, root)
    print(f"{name}: seed {seed} (replay: MINIKAFKA_CHAOS_SEED={seed})")
    try:
        yield run
    except BaseException:
        print(run.failure_text("(exception; see traceback)"))
        with suppress(Exception):
            run.attach_timelines()
        raise
    finally:
        run.close()
