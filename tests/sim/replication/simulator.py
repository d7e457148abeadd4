"""Deterministic simulation of the replication protocol: the real broker and controller code
in one event loop on virtual time, a seeded fault schedule, the history checker as oracle.

One run = one seed. `params_for(seed)` draws the cluster (3-5 brokers, 1-2 partitions of
RF 3, min.insync.replicas 2), the network quality and the fault rates; everything else
(the schedule, delays, losses, the workload's choices, uuids) comes from the same seeded
`random.Random`, and `VirtualTimeLoop` runs every task in a fixed order, so a seed replays
exactly (`MINIKAFKA_SIM_SEED=<n>`).

A run:

1. Start the controller and the brokers, create topic `t`, wait for every partition to
   have a leader.
2. Chaos (`chaos_ms`): producers send unique integers (acks=all and acks=1) to the leader
   their metadata names, consumers poll each partition from the leader (assign()-style,
   from offset 0 upwards), and the nemesis crashes brokers (a process crash, or a power
   loss: a new boot id, and the records no fsync covered are lost), restarts them,
   wipes a data directory (once per run at most),
   pauses a broker (its messages leave late), cuts links (one-way too), and asks the
   controller for preferred and unclean elections. The network meanwhile delays, drops
   and duplicates messages per the seed's rates.
3. Recovery: a lossless network, every broker up and resumed; producers stop; once every
   partition has a leader, final polls read each partition from offset 0 to its high
   watermark.

`tests.chaos.checker.check` then judges the history (lost or duplicated acknowledged
writes, reads of unknown or failed values, non-monotonic or skipping reads, reads above
the HW). A run that broke anything raises `Violation` with the seed, the parameters, the
fault schedule and the checker's report.

The fault-suite canary switch (`BrokerConfig.unsafe_test_hw_is_leo`) is passed through
`broker_settings`, so the same runs prove the checker sees an unsafe high watermark.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc.aio
import msgspec

from controller.config import ControllerConfig
from controller.engine import ControllerEngine
from controller.model import NO_LEADER
from controller.state_machine import ElectionType, NewTopic
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch, decode_records
from minikafka.v1 import broker_pb2
from tests.chaos.checker import UNCLEAN_EXPECTED, CheckResult, check
from tests.chaos.history import History, Op, key_of
from tests.sim.replication.cluster import CONTROLLER_ADDRESS, SimBroker, SimController
from tests.sim.replication.network import Network
from tests.sim.replication.vloop import SimClock, SimulationStuckError, VirtualTimeLoop

#: acks=all writes go to TOPIC, acks=1 writes to ACKS1_TOPIC: an acks=1 write may be lost
#: (and its offset reused) when its leader fails, which the checker must not confuse
#: with a loss of acknowledged acks=all writes, so the two are judged apart.
TOPIC = "t"
ACKS1_TOPIC = "t1"
REPLICATION_FACTOR = 3
MIN_INSYNC = 2
SETTLE_MS_MAX = 30_000
#: After recovery, how long a partition may stay offline before the operator steps in.
OFFLINE_GRACE_MS = 5000
PRODUCE_TIMEOUT_MS = 1500
FINAL_READ_ATTEMPTS = 200


class Violation(AssertionError):
    """The history checker (or a process) found a fault; the message says how to replay."""


class SimParams(msgspec.Struct, frozen=True, kw_only=True):
    brokers: int
    partitions: int
    chaos_ms: int
    drop_rate: float
    duplicate_rate: float
    max_delay_ms: int
    fault_interval_ms: int
    producers: int
    produce_interval_ms: int
    acks_all_share: float
    wipes: bool
    unclean_elections: bool


def params_for(seed: int) -> SimParams:
    rng = random.Random(seed ^ 0x5EED5)
    return SimParams(
        brokers=rng.choice((3, 3, 4, 5)),
        partitions=rng.choice((1, 2)),
        chaos_ms=rng.randrange(2500, 6000),
        drop_rate=rng.choice((0.0, 0.01, 0.05)),
        duplicate_rate=rng.choice((0.0, 0.02)),
        max_delay_ms=rng.choice((1, 5, 20)),
        fault_interval_ms=rng.choice((150, 300, 600)),
        producers=rng.choice((1, 2, 3)),
        produce_interval_ms=rng.choice((5, 20)),
        acks_all_share=rng.choice((1.0, 0.8)),
        wipes=rng.random() < 0.3,
        unclean_elections=rng.random() < 0.3,
    )


class RunStats(msgspec.Struct, frozen=True, kw_only=True):
    seed: int
    virtual_ms: int
    events: int
    messages: int
    acknowledged: int
    read: int
    faults: int
    crashes: int


class _VirtualHistory(History):
    """The chaos suite's `History` with virtual timestamps (a replay is identical)."""

    def __init__(self, clock: SimClock) -> None:
        super().__init__()
        self._clock = clock

    def _append(self, op: Op) -> Op:
        op = super()._append(op)
        op["time"] = self._clock.monotonic_ms()
        return op


def _scratch() -> str | None:
    """Where the brokers' data directories go: memory (tmpfs) when there is one, as the
    simulated disk's durability comes from the crash model, not from the device."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@contextmanager
def _seeded_uuids(rng: random.Random) -> Iterator[None]:
    """uuid4 (directory ids, incarnation ids) drawn from the run's generator."""
    original = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = original


@contextmanager
def _quiet_logging() -> Iterator[None]:
    """The processes' logs off (they cost time), unless MINIKAFKA_SIM_LOG is set."""
    if os.environ.get("MINIKAFKA_SIM_LOG"):
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


class Simulation:
    def __init__(
        self,
        seed: int,
        *,
        broker_settings: dict[str, Any] | None = None,
        params: SimParams | None = None,
    ) -> None:
        self.seed = seed
        self.params = params or params_for(seed)
        self.broker_settings = broker_settings or {}
        self.rng = random.Random(seed)
        self.schedule: list[str] = []
        self.ops: list[Op] = []
        self.result: CheckResult | None = None
        self._loop: VirtualTimeLoop | None = None
        self._errors: list[str] = []
        self._unclean_elected = False
        self._side_tasks: set[asyncio.Future[None]] = set()
        self.topics = [TOPIC] + ([ACKS1_TOPIC] if self.params.acks_all_share < 1 else [])
        self.partition_keys = [
            (topic, partition)
            for topic in self.topics
            for partition in range(self.params.partitions)
        ]
        self._crashes = 0
        self._faults = 0

    # ---- driving a run ---------------------------------------------------------------------

    def run(self) -> RunStats:
        loop = VirtualTimeLoop()
        self._loop = loop
        with (
            tempfile.TemporaryDirectory(prefix="minikafka-sim-", dir=_scratch()) as root,
            _seeded_uuids(self.rng),
            _quiet_logging(),
        ):
            try:
                main = loop.create_task(self._main(Path(root)))
                stats = loop.run_until_complete(main)
            finally:
                self._stop_everything(loop)
        return stats

    def _stop_everything(self, loop: VirtualTimeLoop) -> None:
        for _ in range(10):
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            if not pending:
                break
            for task in pending:
                task.cancel()
            try:
                loop.run_until_complete(asyncio.wait(pending))
            except SimulationStuckError:
                continue  # a task waits on one that was just cancelled: cancel again
        for broker in getattr(self, "brokers", []):
            if broker.logs is not None:
                broker.logs.abandon()
                broker.logs = None
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def _note(self, text: str) -> None:
        assert self._loop is not None
        self.schedule.append(f"{int(self._loop.time() * 1000):>7} ms  {text}")

    def _violation(self, problem: str) -> Violation:
        return Violation(
            f"{problem}\nseed {self.seed}: replay with MINIKAFKA_SIM_SEED={self.seed}\n"
            f"params: {self.params}\nfault schedule:\n" + "\n".join(self.schedule)
        )

    async def _main(self, root: Path) -> RunStats:
        params = self.params
        assert self._loop is not None
        clock = SimClock(self._loop)
        self.clock = clock
        self.history = history = _VirtualHistory(clock)
        history.meta(seed=self.seed, params=msgspec.to_builtins(params))
        self.network = network = Network(
            self.rng,
            drop_rate=params.drop_rate,
            duplicate_rate=params.duplicate_rate,
            max_delay_ms=params.max_delay_ms,
        )
        self.controller = SimController(
            network,
            clock,
            ControllerConfig(
                node_id=0,
                listen=CONTROLLER_ADDRESS,
                data_dir="unused-by-the-simulation",
                default_replication_factor=REPLICATION_FACTOR,
                min_insync_replicas=MIN_INSYNC,
                auto_leader_rebalance_enable=False,
            ),
            random.Random(self.rng.getrandbits(64)),
        )
        await self.controller.start()
        settings: dict[str, Any] = {
            "replica_lag_time_max_ms": 2000,
            "replica_fetch_wait_max_ms": 100,
            **self.broker_settings,
        }
        self.brokers = [
            SimBroker(broker_id, network, clock, root, settings=settings)
            for broker_id in range(1, params.brokers + 1)
        ]
        for broker in self.brokers:
            self._start(broker)
        await self._until(self._all_unfenced, "every broker registered and unfenced")
        created = await self.engine.create_topics(
            topics=[
                NewTopic(
                    name=topic,
                    num_partitions=params.partitions,
                    replication_factor=REPLICATION_FACTOR,
                    configs={"min.insync.replicas": str(MIN_INSYNC)},
                )
                for topic in self.topics
            ],
            validate_only=False,
        )
        assert all(result.error is ErrorCode.NONE for result in created), created
        await self._until(self._all_led, "every partition led")

        stop = asyncio.Event()
        self._values = iter(range(1, 1 << 62))
        self._acknowledged = 0
        self._read = 0
        producers = [
            asyncio.ensure_future(self._producer(number, stop))
            for number in range(1, params.producers + 1)
        ]
        consumers = [
            asyncio.ensure_future(self._consumer(topic, partition, stop))
            for topic, partition in self.partition_keys
        ]
        nemesis = asyncio.ensure_future(self._nemesis())
        await asyncio.sleep(params.chaos_ms / 1000)
        nemesis.cancel()
        await asyncio.wait({nemesis})
        await self._recover()
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.wait(producers + consumers)
        await self._final_polls()
        self.ops = history.ops
        result = self._judge(self.ops)
        self.result = result
        if self._errors:
            raise self._violation("process errors:\n" + "\n".join(self._errors))
        if not result.valid:
            raise self._violation(result.to_text())
        assert self._loop is not None
        return RunStats(
            seed=self.seed,
            virtual_ms=int(self._loop.time() * 1000),
            events=self._loop.jumps,
            messages=network.messages,
            acknowledged=self._acknowledged,
            read=self._read,
            faults=self._faults,
            crashes=self._crashes,
        )

    def _judge(self, ops: list[Op]) -> CheckResult:
        """The checker's verdict on the acks=all topic (nothing acknowledged may be lost
        unless an unclean election ran), then on the acks=1 topic (loss allowed, but no
        read of a value never sent or definitely failed, nor above the HW)."""
        strict = check(
            _only_topic(ops, TOPIC), expected=UNCLEAN_EXPECTED if self._unclean_elected else ()
        )
        if not strict.valid or ACKS1_TOPIC not in self.topics:
            return strict
        return check(_only_topic(ops, ACKS1_TOPIC), expected=UNCLEAN_EXPECTED)

    @property
    def engine(self) -> ControllerEngine:
        engine = self.controller.engine
        assert engine is not None
        return engine

    async def _within(self, bound_ms: int, condition: Callable[[], bool]) -> bool:
        for _ in range(bound_ms // 50):
            if condition():
                return True
            await asyncio.sleep(0.05)
        return condition()

    async def _until(self, condition: Callable[[], bool], what: str) -> None:
        for _ in range(SETTLE_MS_MAX // 50):
            if condition():
                return
            await asyncio.sleep(0.05)
        state = self.engine.state
        raise self._violation(
            f"not reached within {SETTLE_MS_MAX} ms: {what}"
            + "".join(f"\n{error}" for error in self._errors)
            + "".join(f"\n  {key}: {state.partitions.get(key)}" for key in self.partition_keys)
            + "".join(f"\n  broker {b.broker_id}: {b}" for b in state.brokers.values())
        )

    def _all_unfenced(self) -> bool:
        brokers = self.engine.state.brokers
        return len(brokers) == self.params.brokers and not any(b.fenced for b in brokers.values())

    def _all_led(self) -> bool:
        state = self.engine.state
        parts = [(key, state.partitions.get(key)) for key in self.partition_keys]
        return all(
            p is not None
            and p.leader != NO_LEADER
            and self._broker(p.leader).alive
            and self._leads(self._broker(p.leader), key)
            for key, p in parts
        )

    def _all_committed(self) -> bool:
        state = self.engine.state
        for key in self.partition_keys:
            registration = state.partitions.get(key)
            if registration is None or registration.leader == NO_LEADER:
                return False
            inner = self._broker(registration.leader).broker
            if inner is None or not hasattr(inner, "replicas"):
                return False
            partition = inner.replicas.partitions.get(key)
            if partition is None or partition.log.high_watermark < partition.log.log_end_offset:
                return False
        return True

    def _broker(self, broker_id: int) -> SimBroker:
        return self.brokers[broker_id - 1]

    @staticmethod
    def _leads(broker: SimBroker, key: tuple[str, int]) -> bool:
        inner = broker.broker
        if inner is None or not hasattr(inner, "replicas"):
            return False
        partition = inner.replicas.partitions.get(key)
        return partition is not None and partition.role.value == "leader"

    def _start(self, broker: SimBroker) -> None:
        broker.start()
        main = broker._main
        assert main is not None

        def done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                self._errors.append(f"{broker.name} stopped: {task.exception()!r}")

        main.add_done_callback(done)

    # ---- the workload --------------------------------------------------------------------

    def _leader_address(self, topic: str, partition: int) -> str | None:
        """Where a client would send: the leader in a random live broker's metadata."""
        alive = [b for b in self.brokers if b.alive and b.broker is not None]
        if not alive:
            return None
        broker = self.rng.choice(alive).broker
        assert broker is not None
        for info in broker.metadata.partitions_of(topic):
            if info.partition == partition and info.leader >= 0:
                return self._broker(info.leader).address
        return None

    async def _producer(self, number: int, stop: asyncio.Event) -> None:
        params = self.params
        history = self.history
        source = f"producer-{number}"
        while not stop.is_set():
            await asyncio.sleep(self.rng.randint(1, params.produce_interval_ms) / 1000)
            partition = self.rng.randrange(params.partitions)
            acks_all = self.rng.random() < params.acks_all_share
            topic = TOPIC if acks_all else ACKS1_TOPIC
            address = self._leader_address(topic, partition)
            if address is None:
                continue
            value = next(self._values)
            key = key_of(topic, partition)
            op = history.invoke(
                number, "send", [["send", key, value]], acks="all" if acks_all else "1"
            )
            request = broker_pb2.ProduceRequest(acks=-1 if acks_all else 1, timeout_ms=1000)
            request.partitions.add(
                topic=topic,
                partition=partition,
                records=build_batch([(self.clock.wall_ms(), None, str(value).encode(), None)]),
                current_leader_epoch=-1,
            )
            try:
                response = await self.network.unary(
                    source, address, "BrokerService", "Produce", request, PRODUCE_TIMEOUT_MS / 1000
                )
            except grpc.aio.AioRpcError as error:
                history.complete(op, "info", [["send", key, value]], error=error.code().name)
                continue
            assert isinstance(response, broker_pb2.ProduceResponse)
            answer = response.partitions[0]
            if answer.error_code == ErrorCode.NONE:
                self._acknowledged += 1
                history.complete(op, "ok", [["send", key, [answer.base_offset, value]]])
            else:
                history.complete(
                    op,
                    "info" if answer.indefinite else "fail",
                    [["send", key, value]],
                    error=ErrorCode(answer.error_code).name,
                )

    async def _fetch(
        self, source: str, topic: str, partition: int, offset: int, *, final: bool = False
    ) -> tuple[list[list[int]], int] | None:
        """(offset, value) pairs from `offset` and the HW, from the leader; None: no answer.

        A consumer asks the leader some broker's metadata names (maybe an old one, still
        serving its own HW). The final polls ask the controller's leader, fenced by its
        leader epoch: they must see everything committed."""
        leader_epoch = -1
        if final:
            registration = self.engine.state.partitions.get((topic, partition))
            if registration is None or registration.leader == NO_LEADER:
                return None
            address: str | None = self._broker(registration.leader).address
            leader_epoch = registration.leader_epoch
        else:
            address = self._leader_address(topic, partition)
        if address is None:
            return None
        request = broker_pb2.FetchRequest(max_wait_ms=50, min_bytes=1, max_bytes=1 << 20)
        request.partitions.add(
            topic=topic,
            partition=partition,
            fetch_offset=offset,
            current_leader_epoch=leader_epoch,
            last_fetched_epoch=-1,
            partition_max_bytes=1 << 20,
        )
        try:
            response = await self.network.unary(
                source, address, "BrokerService", "Fetch", request, 1
            )
        except grpc.aio.AioRpcError:
            return None
        assert isinstance(response, broker_pb2.FetchResponse)
        answer = response.partitions[0]
        if answer.error_code != ErrorCode.NONE:
            return None
        pairs: list[list[int]] = []
        records = answer.records
        position = 0
        while position < len(records):
            header, rows = decode_records(memoryview(records)[position:])
            for index, row in enumerate(rows):
                record_offset = header.base_offset + index
                if record_offset >= offset and row[2] is not None:
                    pairs.append([record_offset, int(row[2])])
            position += header.size
        return pairs, answer.high_watermark

    async def _consumer(self, topic: str, partition: int, stop: asyncio.Event) -> None:
        history = self.history
        key = key_of(topic, partition)
        process = source = f"consumer-{key}"
        position = 0
        while not stop.is_set():
            fetched = await self._fetch(source, topic, partition, position)
            if fetched is None or not fetched[0]:
                await asyncio.sleep(0.02)
                continue
            pairs, hw = fetched
            op = history.invoke(process, "poll", [["poll"]])
            history.complete(op, "ok", [["poll", {key: pairs}]], hw={key: hw})
            self._read += len(pairs)
            position = pairs[-1][0] + 1

    async def _final_polls(self) -> None:
        history = self.history
        history.meta(final_poll_targets=[key_of(*key) for key in self.partition_keys])
        for topic, partition in self.partition_keys:
            key = key_of(topic, partition)
            pairs: list[list[int]] = []
            position = 0
            hw = -1
            for _ in range(FINAL_READ_ATTEMPTS):
                fetched = await self._fetch(f"final-{key}", topic, partition, position, final=True)
                if fetched is None:
                    await asyncio.sleep(0.05)
                    continue
                more, hw = fetched
                pairs += more
                if more:
                    position = more[-1][0] + 1
                if position >= hw:
                    break
            else:
                raise self._violation(f"final polls could not read {key} up to its HW")
            op = history.invoke(f"final-{key}", "poll", [["poll"]])
            history.complete(op, "ok", [["poll", {key: pairs}]], hw={key: hw}, final=True)

    # ---- the nemesis -----------------------------------------------------------------------

    def _down(self) -> list[SimBroker]:
        return [b for b in self.brokers if not b.alive]

    async def _nemesis(self) -> None:
        params = self.params
        max_down = 1 if params.brokers == 3 else 2
        wiped = False
        actions = ["crash", "power-loss", "cut", "cut-one-way", "pause", "preferred"]
        if params.unclean_elections:
            actions.append("unclean")
        if params.wipes:
            actions.append("wipe")
        while True:
            low = params.fault_interval_ms // 2
            await asyncio.sleep(self.rng.randint(low, params.fault_interval_ms * 3 // 2) / 1000)
            action = self.rng.choice(actions)
            self._faults += 1
            up = [b for b in self.brokers if b.alive and not b.paused]
            if action in ("crash", "power-loss", "wipe"):
                if action == "wipe" and wiped:
                    continue
                if len(self._down()) >= max_down or not up:
                    continue
                victim = self.rng.choice(up)
                if action == "wipe":
                    wiped = True
                await self._crash(victim, power_loss=action != "crash", wipe=action == "wipe")
                restart_ms = self.rng.randint(50, 1500)
                self._side(self._restart_later(victim, restart_ms))
            elif action in ("cut", "cut-one-way"):
                names = [self.controller.name] + [b.name for b in self.brokers]
                source, target = self.rng.sample(names, 2)
                self.network.set_cut(source, target, True)
                if action == "cut":
                    self.network.set_cut(target, source, True)
                arrow = "->" if action == "cut-one-way" else "<->"
                self._note(f"cut {source} {arrow} {target}")
                self._side(
                    self._heal_later(source, target, self.rng.randint(100, 2000), action == "cut")
                )
            elif action == "pause":
                if not up:
                    continue
                victim = self.rng.choice(up)
                victim.pause()
                self._note(f"pause {victim.name}")
                self._side(self._resume_later(victim, self.rng.randint(50, 1500)))
            elif action == "preferred":
                self._note("preferred election")
                await self.engine.elect_leaders(
                    election_type=ElectionType.PREFERRED, partitions=None
                )
            elif action == "unclean":
                self._note("unclean election")
                before = {key: part.leader for key, part in self.engine.state.partitions.items()}
                outcomes = await self.engine.elect_leaders(
                    election_type=ElectionType.UNCLEAN, partitions=None
                )
                for outcome in outcomes:
                    key = (outcome.topic, outcome.partition)
                    if (
                        outcome.error is ErrorCode.NONE
                        and outcome.leader != NO_LEADER
                        and before.get(key) == NO_LEADER
                    ):
                        self._unclean_elected = True
                        self._note(f"  unclean: {key} led by broker {outcome.leader}")

    def _side(self, work: Coroutine[Any, Any, None]) -> None:
        """A delayed nemesis step (restart, heal, resume), kept until it ran."""
        task = asyncio.ensure_future(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _crash(self, broker: SimBroker, *, power_loss: bool, wipe: bool) -> None:
        self._crashes += 1
        kind = "wipe" if wipe else "power loss" if power_loss else "crash"
        self._note(f"{kind} {broker.name}")
        self.history.nemesis(kind, broker=broker.broker_id)
        await broker.crash(wipe=wipe, lose_unsynced=power_loss)
        if power_loss:
            broker.new_boot()

    async def _restart_later(self, broker: SimBroker, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        if not broker.alive:
            self._note(f"restart {broker.name}")
            self._start(broker)

    async def _heal_later(self, source: str, target: str, delay_ms: int, both: bool) -> None:
        await asyncio.sleep(delay_ms / 1000)
        self.network.set_cut(source, target, False)
        if both:
            self.network.set_cut(target, source, False)
        self._note(f"heal {source} {target}")

    async def _resume_later(self, broker: SimBroker, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        broker.resume()
        self._note(f"resume {broker.name}")

    async def _recover(self) -> None:
        self._note("recovery: lossless network, every broker up")
        self.network.quiet()
        for broker in self.brokers:
            broker.resume()
            if not broker.alive:
                self._start(broker)
        if not await self._within(OFFLINE_GRACE_MS, self._all_led):
            # Every replica of a partition lost power (or one was wiped) at some point: with
            # eligible leader replicas it stays offline until an operator's unclean election
            # (README Guarantees), which may lose what the power losses took: the checker
            # allows the losses of an unclean election from here on.
            offline = [
                key
                for key in self.partition_keys
                if (part := self.engine.state.partitions.get(key)) is not None
                and part.leader == NO_LEADER
            ]
            self._note(f"operator: unclean election (longest log) for offline {offline}")
            self._unclean_elected = True
            await self.engine.elect_leaders(election_type=ElectionType.UNCLEAN, partitions=offline)
        await self._until(self._all_led, "every partition led after recovery")
        # A new leader's HW may lag its log until its followers fetched (KIP-207): the
        # final polls read up to the HW, so wait for it to cover every leader's log.
        await self._until(self._all_committed, "every leader's HW at its log end")


def _only_topic(ops: list[Op], topic: str) -> list[Op]:
    """The ops about `topic` (sends and polls name their keys), plus every meta and nemesis op."""
    prefix = f"{topic}/"

    def about(op: Op) -> bool:
        if op.get("f") in ("meta", "nemesis"):
            return True
        # a send names its key in its value, a poll in its process ("consumer-t/0")
        return f"'{prefix}" in repr(op.get("value")) or f"-{prefix}" in str(op.get("process"))

    return [op for op in ops if about(op)]


def run_seed(seed: int, **options: Any) -> RunStats:
    return Simulation(seed, **options).run()


def timed_runs(seeds: range, **options: Any) -> tuple[list[RunStats], float]:
    started = time.perf_counter()
    stats = [run_seed(seed, **options) for seed in seeds]
    return stats, time.perf_counter() - started
