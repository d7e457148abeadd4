"""The simulated processes: one controller and N brokers built from the production classes,
wired to the simulated network instead of gRPC.

`SimController` runs the real `MetadataQuorum` (a quorum of one over `InMemoryStorage`),
`ControllerEngine` (state machine, dispatcher) and `ControllerServicer`. `SimBroker` builds a
broker as `broker.app.Broker.serve` does: the real `LogManager` on a directory of its own,
`ReplicaManager`, `ControllerLink`, `ReplicaServicer`, `BrokerServicer`, and
`Broker.start_cluster_mode` (fetchers, control servicer, ISR reporter) with the simulated
ports. Each broker's files live on its own `SimDisk` (`tests.support.sim_disk`), which
keeps the writes no fsync covered in memory. A broker crash cancels every task of the
process and abandons its logs (no flush, no checkpoint, no clean-shutdown file); a power
loss also drops every unsynced write of every file (segments, indexes, checkpoints, epoch
caches, producer snapshots, receipts), as the fault suite's lazyfs does; a restart builds
everything again on the same directory (after a power loss with a new boot id); a wipe
deletes the directory first.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, cast

from broker.app import Broker, _default_log_config
from broker.clock import Clock
from broker.config import BrokerConfig
from broker.controller_link import ControllerForwarder, ControllerLink
from broker.log.manager import LogManager
from broker.metadata_cache import BrokerInfo
from broker.replica.leader_endpoint import GrpcLeaderEndpoint, LeaderEndpoint, ReplicaFetch
from broker.replica.manager import FetchResult, ReplicaManager
from broker.server.broker_servicer import BrokerServicer, ReplicaServicer
from controller.app import raft_config
from controller.config import ControllerConfig
from controller.engine import ControllerEngine
from controller.metrics import ControllerMetrics
from controller.quorum import MetadataQuorum
from controller.raft.storage import InMemoryStorage
from controller.raft_transport import RaftTransport
from controller.server import ControllerServicer
from minikafka.errors import ErrorCode
from minikafka.v1 import (
    broker_pb2_grpc,
    common_pb2,
    controller_pb2_grpc,
    raft_pb2,
)
from tests.sim.replication.network import Network
from tests.sim.replication.vloop import VirtualTimeLoop
from tests.support.sim_disk import SimDisk

logger = logging.getLogger(__name__)

CLUSTER_ID = "sim-cluster-0000000000"
CONTROLLER_ADDRESS = "controller:9093"


class ObservedEndpoint:
    """A follower fetcher's leader endpoint that calls `applied` (with the partitions
    answered without error) once the fetcher has applied an answer: the fetcher applies
    every partition's answer in the step in which `fetch` returns (no await in between),
    so a callback run at the end of that turn of the loop (`VirtualTimeLoop.after_turn`:
    no turn, no tick of its own, the run stays the same) sees the logs as that answer
    left them. The simulation checks its replica
    invariants there (`invariants`)."""

    def __init__(
        self, inner: LeaderEndpoint, applied: Callable[[list[tuple[str, int]]], None]
    ) -> None:
        self._inner = inner
        self._applied = applied

    async def fetch(self, request: ReplicaFetch) -> Sequence[FetchResult]:
        results = await self._inner.fetch(request)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        # Only an answer without error ran the leader's divergence check against this
        # follower's log (an UNKNOWN_LEADER_EPOCH from a leader that has not yet taken
        # its new epoch checks nothing: seed 1633).
        keys = [
            (result.topic, result.partition)
            for result in results
            if result.error_code == ErrorCode.NONE
        ]
        loop.after_turn(lambda: self._applied(keys))
        return results

    async def close(self) -> None:
        await self._inner.close()


class _Process:
    """What every simulated process shares: its tasks, liveness and pause."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._alive = False
        self._powered_off = False
        #: Insertion-ordered (a dict, not a set: a set of tasks iterates in memory-address
        #: order, so a crash would cancel them in an order that depends on what ran
        #: before in the process, and a seed would not replay alone as it ran in a batch).
        self._tasks: dict[asyncio.Task[Any], None] = {}
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._servicers: dict[str, object] = {}

    @property
    def alive(self) -> bool:
        return self._alive

    @property
    def powered_off(self) -> bool:
        return self._powered_off

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def servicer(self, service: str) -> object | None:
        return self._servicers.get(service) if self._alive else None

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work, name=f"{self.name}:{name}")
        self._tasks[task] = None
        task.add_done_callback(self._forget_task)
        return task

    async def wait_unpaused(self) -> None:
        await self._resumed.wait()

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    def _forget_task(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)

    async def _kill_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


class SimController(_Process):
    """The controller: a quorum of one (Raft over `InMemoryStorage`) and its engine."""

    def __init__(
        self, network: Network, clock: Clock, config: ControllerConfig, rng: random.Random
    ) -> None:
        super().__init__("controller")
        self.network = network
        self.clock = clock
        self.config = config
        self.address = CONTROLLER_ADDRESS
        self._rng = rng
        self.engine: ControllerEngine | None = None
        network.add(self.address, self)

    async def start(self) -> None:
        ready = asyncio.Event()
        self._alive = True
        self.spawn(self._run(ready), "main")
        await ready.wait()

    async def _run(self, ready: asyncio.Event) -> None:
        config = self.config
        storage = InMemoryStorage(cluster_id=CLUSTER_ID, directory_id="controller-dir")
        metrics = ControllerMetrics()
        rconfig = raft_config(config, cluster_id=CLUSTER_ID)
        quorum = MetadataQuorum(
            config=rconfig,
            storage=storage,
            transport=RaftTransport(peers={}, send_timeout_ms=rconfig.request_timeout_ms),
            metrics=metrics,
            snapshot_every_records=config.snapshot_every_records,
            monotonic_ms=self.clock.monotonic_ms,
            wall_ms=self.clock.wall_ms,
            rng=self._rng,
        )
        async with asyncio.TaskGroup() as task_group:
            engine = ControllerEngine(
                config=config,
                quorum=quorum,
                cluster_id=CLUSTER_ID,
                clock=self.clock,
                metrics=metrics,
                task_group=task_group,
                broker_connect=lambda target: cast(
                    "broker_pb2_grpc.BrokerControlServiceAsyncStub",
                    self.network.stub(self.name, target, "BrokerControlService"),
                ),
            )
            self.engine = engine
            self._servicers["ControllerService"] = ControllerServicer(
                lambda: engine,
                describe_quorum=lambda: raft_pb2.DescribeQuorumResponse(
                    active=engine.is_active, node_id=config.node_id
                ),
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                session_timeout_ms=config.session_timeout_ms,
            )
            task_group.create_task(quorum.run(), name="raft")
            await engine.activated.wait()
            ready.set()
            await asyncio.Event().wait()


class SimBroker(_Process):
    """One broker, built from the production classes as `Broker.serve` builds it."""

    def __init__(
        self,
        broker_id: int,
        network: Network,
        clock: Clock,
        data_root: Path,
        *,
        settings: dict[str, Any],
        fetch_applied: Callable[[SimBroker, list[tuple[str, int]]], None] | None = None,
    ) -> None:
        super().__init__(f"broker-{broker_id}")
        self.broker_id = broker_id
        self.network = network
        self.clock = clock
        self.host = f"broker-{broker_id}"
        self.port = 9092
        self.address = f"{self.host}:{self.port}"
        self.data_dir = data_root / f"broker-{broker_id}"
        #: The machine's disk: it outlives the process and loses unsynced writes on a
        #: power loss.
        self.disk = SimDisk()
        self.settings = settings
        #: Called after each fetch answer this broker's fetchers applied (invariants).
        self.fetch_applied = fetch_applied
        #: The machine's boot id changes on a power loss (`new_boot`), not on a crash.
        self.boot_number = 0
        self.broker: Broker | None = None
        self.logs: LogManager | None = None
        self._main: asyncio.Task[None] | None = None
        network.add(self.address, self)

    def config(self) -> BrokerConfig:
        return BrokerConfig(
            broker_id=self.broker_id,
            listen=self.address,
            data_dir=str(self.data_dir),
            controller=CONTROLLER_ADDRESS,
            use_uvloop=False,
            unsafe_test_boot_id=f"boot-{self.boot_number}",
            **self.settings,
        )

    def start(self) -> None:
        assert not self._alive
        self._powered_off = False
        self._alive = True
        self.resume()
        self._main = self.spawn(self._run(), "main")

    def new_boot(self) -> None:
        """The machine rebooted (a power loss): the next start sees a new boot id."""
        self.boot_number += 1

    async def crash(self, *, wipe: bool = False, lose_unsynced: bool = False) -> None:
        """Kill the process: every task cancelled, logs abandoned as they are on disk;
        with `lose_unsynced` (a power loss) every write no fsync covered is lost too."""
        self._alive = False
        self._powered_off = lose_unsynced
        self._servicers = {}
        await self._kill_tasks()
        if self.logs is not None:
            self.logs.abandon()
            self.logs = None
        if lose_unsynced:
            self.disk.power_loss()
        else:
            self.disk.process_exit()
        self.broker = None
        if wipe:
            self.disk.rmtree(self.data_dir)

    async def _run(self) -> None:
        config = self.config()
        clock = self.clock
        logs = LogManager(
            self.data_dir,
            _default_log_config(config),
            now_ms=clock.wall_ms(),
            node_id=config.broker_id,
            boot_id=config.unsafe_test_boot_id,
            max_open_files=config.max_open_segment_files,
            disk=self.disk,
        )
        self.logs = logs
        broker = Broker(config, clock=clock)
        self.broker = broker
        broker.logs = logs
        replicas = ReplicaManager(
            config=config,
            logs=logs,
            clock=clock,
            topic_configs=lambda topic: dict(broker.metadata.topic_configs.get(topic, {})),
        )
        broker.replicas = replicas
        endpoint = common_pb2.BrokerEndpoint(
            broker_id=config.broker_id, host=self.host, port=self.port
        )
        broker.metadata.brokers = {
            config.broker_id: BrokerInfo(broker_id=config.broker_id, host=self.host, port=self.port)
        }
        link = ControllerLink(
            address=CONTROLLER_ADDRESS,
            broker_id=config.broker_id,
            endpoint=endpoint,
            previous_broker_epoch=logs.proven_broker_epoch,
            directory_id=logs.directory_id,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            on_registered=logs.record_registration,
            connect=lambda address: cast(
                "controller_pb2_grpc.ControllerServiceAsyncStub",
                self.network.stub(self.name, address, "ControllerService"),
            ),
        )
        broker.link = link
        self._servicers["ReplicaService"] = ReplicaServicer(
            replicas=replicas,
            metrics=broker.metrics,
            refusal=broker._replica_fetch_refusal,
            fetch_max_bytes=config.fetch_max_bytes,
        )
        self._servicers["BrokerService"] = BrokerServicer(
            replicas=replicas,
            metadata=broker.metadata,
            admin=ControllerForwarder(link),
            metrics=broker.metrics,
            fetch_max_bytes=config.fetch_max_bytes,
            message_max_bytes=config.message_max_bytes,
        )
        async with asyncio.TaskGroup() as tasks:
            self._servicers["BrokerControlService"] = broker.start_cluster_mode(
                link,
                replicas,
                tasks,
                connect=self._leader_endpoint,
            )
            tasks.create_task(broker._housekeeping(logs), name="housekeeping")

    def _leader_endpoint(self, leader: BrokerInfo) -> LeaderEndpoint:
        endpoint = GrpcLeaderEndpoint(
            leader,
            stub=cast(
                "broker_pb2_grpc.ReplicaServiceAsyncStub",
                self.network.stub(self.name, f"{leader.host}:{leader.port}", "ReplicaService"),
            ),
        )
        if self.fetch_applied is None:
            return endpoint
        observer = self.fetch_applied
        return ObservedEndpoint(endpoint, lambda keys: observer(self, keys))
