"""Failover under a steady acks=all stream: SIGKILL and SIGSTOP of the partition leader,
and SIGKILL of the active controller.

Runs in its own process with its own cluster (three controllers in a quorum, three
brokers). A producer sends one record every `interval_ms` (acks=all, idempotent,
min.insync.replicas=2). Modes:

- `kill` / `stop`: each trial stops the partition leader at T0 and measures T0 -> the ack
  of the first record *sent after* T0 (which the old leader can no longer have written).
  The killed broker is restarted (the paused one resumed) and the ISR is back to 3 before
  the next trial.
- `controller`: the partition is first led by a replica that is not its preferred one;
  the trial kills the active controller at T0 and measures T0 -> the first successful
  election after it: a preferred-leader election sent through a broker (which follows
  the active controller) succeeds. The killed controller is restarted and caught up
  before the next trial.

At the end every acknowledged record is read back: its offset must hold exactly its value
(zero acknowledged loss).
"""

from __future__ import annotations

import asyncio
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import msgspec

from benchmarks import stats
from benchmarks.cluster import BenchCluster
from benchmarks.harness import run_async
from benchmarks.workloads import create_topic
from client import AsyncConsumer, AsyncProducer, TopicPartition
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2_grpc, common_pb2, controller_pb2

TOPIC = "failover"
SEQ = struct.Struct("<q")
TRIAL_TIMEOUT_S = 30.0


class FailoverSpec(msgspec.Struct, frozen=True, kw_only=True):
    trials: int = 5
    modes: tuple[str, ...] = ("kill", "stop", "controller")
    controllers: int = 3
    interval_ms: float = 5.0
    record_bytes: int = 100
    session_timeout_ms: int = 1500
    request_timeout_ms: int = 2000
    settle_s: float = 0.5
    data_dir: str | None = None
    log_level: str = "WARNING"


class _Stream:
    """The steady sender and what came back."""

    def __init__(self, producer: AsyncProducer, spec: FailoverSpec) -> None:
        self.producer = producer
        self.spec = spec
        self.padding = b"p" * max(spec.record_bytes - SEQ.size, 0)
        self.sent_at: list[float] = []
        #: seq -> (offset, ack time)
        self.acked: dict[int, tuple[int, float]] = {}
        self.failed = 0
        self.running = True
        self.progress = asyncio.Event()

    async def run(self) -> None:
        interval_s = self.spec.interval_ms / 1000
        start = time.monotonic()
        while self.running:
            seq = len(self.sent_at)
            self.sent_at.append(time.monotonic())
            future = await self.producer.send(TOPIC, SEQ.pack(seq) + self.padding)
            future.add_done_callback(lambda f, s=seq: self._done(s, f))  # type: ignore[misc]
            next_due = start + (seq + 1) * interval_s
            await asyncio.sleep(max(next_due - time.monotonic(), 0))

    def _done(self, seq: int, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failed += 1
        else:
            self.acked[seq] = (future.result().offset, time.monotonic())
        self.progress.set()

    async def first_ack_after(self, t0: float, timeout_s: float) -> float:
        """Time of the ack of the first record sent at or after `t0`."""
        deadline = time.monotonic() + timeout_s
        first_seq: int | None = None
        while time.monotonic() < deadline:
            if first_seq is None:
                first_seq = next(
                    (i for i in range(len(self.sent_at) - 1, -1, -1) if self.sent_at[i] < t0),
                    -1,
                )
                first_seq += 1
            if first_seq < len(self.sent_at) and first_seq in self.acked:
                return self.acked[first_seq][1]
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), max(deadline - time.monotonic(), 0))
            except TimeoutError:
                break
        raise TimeoutError(f"no record sent after the fault was acknowledged in {timeout_s}s")


async def _read_all(bootstrap: str, end: int) -> dict[int, bytes]:
    tp = TopicPartition(TOPIC, 0)
    found: dict[int, bytes] = {}
    async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            batches = await c.getmany(timeout_ms=500, max_records=100_000)
            for records in batches.values():
                for record in records:
                    found[record.offset] = record.value or b""
            if await c.position(tp) >= end:
                break
    return found


def run_failover(spec: FailoverSpec) -> list[stats.FailoverResult]:
    """All trials; with `spec.data_dir` the cluster's data and logs are kept there."""
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
        cluster = BenchCluster(
            Path(spec.data_dir or tmp),
            session_timeout_ms=spec.session_timeout_ms,
            log_level=spec.log_level,
            controllers=spec.controllers,
        )
        cluster.start()
        try:
            return run_async(_trials(cluster, spec))
        finally:
            cluster.stop()


async def _trials(cluster: BenchCluster, spec: FailoverSpec) -> list[stats.FailoverResult]:
    await create_topic(cluster.bootstrap, TOPIC, 3, {"min.insync.replicas": "2"})
    await asyncio.to_thread(cluster.wait_isr, TOPIC, 3)
    times: dict[str, list[float]] = {mode: [] for mode in spec.modes}
    notes: list[str] = []
    async with AsyncProducer(
        bootstrap_servers=list(cluster.broker_addresses.values()),
        acks="all",
        linger_ms=0,
        request_timeout_ms=spec.request_timeout_ms,
        retry_backoff_ms=20,
    ) as producer:
        stream = _Stream(producer, spec)
        sender = asyncio.create_task(stream.run())
        try:
            for trial in range(spec.trials):
                for mode in spec.modes:
                    if mode == "controller":
                        times[mode].append(await _controller_trial(cluster, spec))
                        notes.append(f"trial {trial} {mode}")
                        continue
                    leader, _, _ = await asyncio.to_thread(cluster.wait_isr, TOPIC, 3)
                    await asyncio.sleep(spec.settle_s)  # steady state before the fault
                    t0 = time.monotonic()
                    if mode == "kill":
                        cluster.kill(leader)
                    else:
                        cluster.pause(leader)
                    acked_at = await stream.first_ack_after(t0, TRIAL_TIMEOUT_S)
                    times[mode].append(round((acked_at - t0) * 1000, 1))
                    if mode == "kill":
                        await asyncio.to_thread(cluster.restart, leader)
                    else:
                        cluster.resume(leader)
                    notes.append(f"trial {trial} {mode} broker {leader}")
            await asyncio.to_thread(cluster.wait_isr, TOPIC, 3)
        finally:
            stream.running = False
            await sender
            await producer.flush()
    end = max((offset for offset, _ in stream.acked.values()), default=-1) + 1
    found = await _read_all(cluster.bootstrap, end)
    lost = sum(
        1
        for seq, (offset, _) in stream.acked.items()
        if found.get(offset, b"")[: SEQ.size] != SEQ.pack(seq)
    )
    return [
        stats.FailoverResult(
            mode=mode,
            trials_ms=values,
            median_ms=stats.median(values),
            max_ms=max(values) if values else float("nan"),
            acked=len(stream.acked),
            lost=lost,
            notes=(
                "kill -9 of the active controller -> first successful preferred election "
                f"through a broker; {spec.controllers} controllers; "
                if mode == "controller"
                else ""
            )
            + f"{stream.failed} sends failed (not acked); session timeout "
            f"{spec.session_timeout_ms} ms, request timeout {spec.request_timeout_ms} ms",
        )
        for mode, values in times.items()
    ]


def _lead_off_preferred(cluster: BenchCluster) -> None:
    """Until the partition is led by a replica other than its preferred one (a controlled
    shutdown of the preferred leader moves it) with all three replicas in sync."""
    cluster.wait_isr(TOPIC, 3)
    (partition,) = cluster.describe([TOPIC]).topics[0].partitions
    preferred = partition.replicas[0]
    if partition.leader == preferred:
        cluster.terminate(preferred)
        cluster.restart(preferred)
    deadline = time.monotonic() + TRIAL_TIMEOUT_S
    while time.monotonic() < deadline:
        leader, _, _ = cluster.wait_isr(TOPIC, 3)
        if leader != preferred:
            return
        time.sleep(0.05)  # another process's state: nothing to wait on but polling
    raise TimeoutError("the preferred replica kept leading")


async def _first_election(cluster: BenchCluster, timeout_s: float) -> float:
    """Time a preferred election of the partition first succeeds (asked through a broker,
    again and again until it does)."""
    request = controller_pb2.ElectLeadersRequest(
        election_type=controller_pb2.PREFERRED,
        partitions=[common_pb2.TopicPartition(topic=TOPIC, partition=0)],
    )
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(cluster.bootstrap) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        while time.monotonic() < deadline:
            try:
                remaining_s = max(deadline - time.monotonic(), 0.1)
                reply = await stub.ElectLeaders(request, timeout=remaining_s)
            except grpc.aio.AioRpcError:
                continue
            if reply.results and reply.results[0].error_code == ErrorCode.NONE:
                return time.monotonic()
    raise TimeoutError(f"no successful election within {timeout_s}s")


async def _controller_trial(cluster: BenchCluster, spec: FailoverSpec) -> float:
    await asyncio.to_thread(_lead_off_preferred, cluster)
    active = await asyncio.to_thread(cluster.active_controller)
    await asyncio.sleep(spec.settle_s)  # steady state before the fault
    t0 = time.monotonic()
    cluster.kill_controller(active)
    elected_at = await _first_election(cluster, TRIAL_TIMEOUT_S)
    await asyncio.to_thread(cluster.restart_controller, active)
    successor = await asyncio.to_thread(cluster.active_controller)
    target = await asyncio.to_thread(cluster.quorum_high_watermark, successor)
    deadline = time.monotonic() + TRIAL_TIMEOUT_S
    while await asyncio.to_thread(cluster.quorum_high_watermark, active) < target:
        if time.monotonic() > deadline:
            raise TimeoutError(f"controller {active} did not catch up")
        await asyncio.sleep(0.05)  # another process's state: nothing to wait on but polling
    return round((elected_at - t0) * 1000, 1)
