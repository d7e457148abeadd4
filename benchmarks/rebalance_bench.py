"""Consumer-group rebalance time (issue 20): a member joins, then leaves, N rounds.

Runs in its own process with its own 3-broker cluster, the brokers telling members to
heartbeat every `heartbeat_interval_ms` (`--group-consumer-heartbeat-interval-ms`; the
broker's default is 5000 ms, Kafka's too: a rebalance takes about two heartbeat
intervals, see the README's consumer-group section). A producer writes a steady stream
to every partition of a 6-partition topic; `members` consumers of one group poll it in
one event loop, each told its partitions by its rebalance listener.

Each round: with the group stable over the base members, a new member starts at T0 (join)
and is stopped at T1 (a graceful leave). A measurement ends when the assignment is
*stable and fetching*: every partition owned by exactly one live member, each member
owning its share (the `uniform`-style split the default `range` assignor gives 6
partitions: 6 / members each) and every partition's owner has returned a record of it
since it got it. The median and max over the rounds are reported, per kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

import msgspec

from benchmarks import stats
from benchmarks.cluster import BenchCluster
from benchmarks.harness import run_async
from client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRebalanceListener,
    NewTopic,
    TopicPartition,
)

TOPIC = "rebalance"
GROUP = "rebalance-bench"
#: Target of issue 20's acceptance: median rebalance time on join and on leave.
TARGET_MS = 1000.0
ROUND_TIMEOUT_S = 30.0


class RebalanceSpec(msgspec.Struct, frozen=True, kw_only=True):
    rounds: int = 5
    partitions: int = 6
    #: Members before the join (the join makes one more).
    members: int = 2
    heartbeat_interval_ms: int = 250
    session_timeout_ms: int = 3000
    #: Records per second over all partitions: a new owner's first record comes within
    #: about partitions / rate seconds.
    rate_per_s: float = 600.0
    data_dir: str | None = None
    log_level: str = "WARNING"


class RebalanceResult(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    trials_ms: list[float]
    median_ms: float
    max_ms: float
    heartbeat_interval_ms: int
    notes: str = ""


class _Member(ConsumerRebalanceListener):
    """One consumer with its poll loop: what it owns and which owned partitions it has
    returned records of since it got them."""

    def __init__(self, name: str, bootstrap: str, spec: RebalanceSpec) -> None:
        self.name = name
        self.consumer = AsyncConsumer(
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            client_id=name,
            auto_offset_reset="latest",
            session_timeout_ms=spec.session_timeout_ms,
            heartbeat_interval_ms=spec.heartbeat_interval_ms,
            fetch_max_wait_ms=50,
        )
        self.owned: set[TopicPartition] = set()
        self.fetching: set[TopicPartition] = set()
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running = True

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([TOPIC], listener=self)
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> None:
        """Leave the group (a graceful stop) and end the poll loop."""
        self._running = False
        if self._task is not None:
            await self._task
        await self.consumer.stop()
        self.owned.clear()
        self.changed.set()

    async def _poll(self) -> None:
        while self._running:
            batches = await self.consumer.getmany(timeout_ms=50)
            new = {tp for tp, records in batches.items() if records and tp in self.owned}
            if new - self.fetching:
                self.fetching |= new
                self.changed.set()

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.owned |= assigned
        self.fetching -= assigned
        self.changed.set()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.owned -= revoked
        self.fetching -= revoked
        self.changed.set()


def stable(members: list[_Member], partitions: int) -> bool:
    """Every partition owned by exactly one member, each member owning its share, and
    every owner fetching what it owns."""
    owners: dict[TopicPartition, int] = {}
    for member in members:
        for tp in member.owned:
            owners[tp] = owners.get(tp, 0) + 1
    share = partitions // len(members)
    return (
        len(owners) == partitions
        and all(count == 1 for count in owners.values())
        and all(len(m.owned) in (share, share + 1) for m in members)
        and all(m.fetching >= m.owned for m in members)
    )


async def _until_stable(members: list[_Member], partitions: int, t0: float) -> float:
    """Milliseconds from `t0` until `stable` (bounded by `ROUND_TIMEOUT_S`)."""
    deadline = t0 + ROUND_TIMEOUT_S
    while not stable(members, partitions):
        if time.monotonic() > deadline:
            shown = {m.name: (sorted(m.owned), len(m.fetching)) for m in members}
            raise TimeoutError(f"group not stable after {ROUND_TIMEOUT_S}s: {shown}")
        for member in members:
            member.changed.clear()
        waits = [asyncio.create_task(m.changed.wait()) for m in members]
        await asyncio.wait(waits, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
    return round((time.monotonic() - t0) * 1000, 1)


async def _produce(producer: AsyncProducer, spec: RebalanceSpec, running: list[bool]) -> None:
    interval_s = 1 / spec.rate_per_s
    sent = 0
    start = time.monotonic()
    while running[0]:
        await producer.send(TOPIC, b"x", partition=sent % spec.partitions)
        sent += 1
        await asyncio.sleep(max(start + sent * interval_s - time.monotonic(), 0))


async def _rounds(cluster: BenchCluster, spec: RebalanceSpec) -> list[RebalanceResult]:
    async with AsyncAdmin(cluster.bootstrap) as admin:
        await admin.create_topics(NewTopic(TOPIC, spec.partitions, 3, {"min.insync.replicas": "2"}))
    times: dict[str, list[float]] = {"join": [], "leave": []}
    running = [True]
    async with AsyncProducer(bootstrap_servers=cluster.bootstrap, acks=1, linger_ms=1) as producer:
        sender = asyncio.create_task(_produce(producer, spec, running))
        base = [_Member(f"m{n}", cluster.bootstrap, spec) for n in range(spec.members)]
        try:
            for member in base:
                await member.start()
            await _until_stable(base, spec.partitions, time.monotonic())
            for trial in range(spec.rounds):
                joiner = _Member(f"joiner-{trial}", cluster.bootstrap, spec)
                t0 = time.monotonic()
                await joiner.start()
                times["join"].append(await _until_stable([*base, joiner], spec.partitions, t0))
                t1 = time.monotonic()
                await joiner.stop()
                times["leave"].append(await _until_stable(base, spec.partitions, t1))
        finally:
            for member in base:
                with contextlib.suppress(Exception):
                    await member.stop()
            running[0] = False
            await sender
    note = (
        f"{spec.members} -> {spec.members + 1} -> {spec.members} members over "
        f"{spec.partitions} partitions; until every partition has one owner that returned a "
        "record of it"
    )
    return [
        RebalanceResult(
            kind=kind,
            trials_ms=values,
            median_ms=stats.median(values),
            max_ms=max(values),
            heartbeat_interval_ms=spec.heartbeat_interval_ms,
            notes=note,
        )
        for kind, values in times.items()
    ]


def run_rebalance(spec: RebalanceSpec) -> list[RebalanceResult]:
    """Every round on a fresh cluster; with `spec.data_dir` its data and logs are kept."""
    with tempfile.TemporaryDirectory(prefix="rebalance-") as tmp:
        cluster = BenchCluster(
            Path(spec.data_dir or tmp),
            log_level=spec.log_level,
            broker_args=[
                "--group-consumer-heartbeat-interval-ms",
                str(spec.heartbeat_interval_ms),
                "--offsets-topic-num-partitions",
                "3",
            ],
        )
        cluster.start()
        try:
            return run_async(_rounds(cluster, spec))
        finally:
            cluster.stop()


def main() -> None:
    """`python -m benchmarks.rebalance_bench`: this part alone, printed."""
    for result in run_rebalance(RebalanceSpec()):
        print(
            f"rebalance ({result.kind}): median {result.median_ms:.0f} ms, max "
            f"{result.max_ms:.0f} ms over {result.trials_ms} (heartbeat interval "
            f"{result.heartbeat_interval_ms} ms; {result.notes})"
        )


if __name__ == "__main__":
    main()
