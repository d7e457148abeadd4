"""A real cluster for tests: a controller (or a quorum of them) and N brokers as processes
on 127.0.0.1.

With `controllers=1` (the default) one controller runs alone as controller 0, as before
the quorum. With `controllers=N` they are voters 1..N of one quorum (`--quorum`, a shared
`--cluster-id`); `controllers` maps id -> process, `controller` is the first one (kept for
the single-controller helpers), and brokers get every address (`--controller A,B,C`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import grpc

from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from tests.support.processes import ServerProcess, free_port, server_channel, wait_healthy

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `predicate` until it returns a truthy value (bounded); returns that value.

    Used only where the system offers nothing to wait on (another process's state).
    """
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


class Cluster:
    def __init__(
        self,
        root: Path,
        *,
        brokers: int = 3,
        broker_args: list[str] | None = None,
        controller_args: list[str] | None = None,
        racks: list[str] | None = None,
        controllers: int = 1,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.root = root
        #: TLS channel credentials for the test's own calls (None: plaintext); the
        #: processes get their TLS flags through `broker_args` / `controller_args`.
        self.credentials = credentials
        ids = [0] if controllers == 1 else list(range(1, controllers + 1))
        addresses = {node_id: f"127.0.0.1:{free_port()}" for node_id in ids}
        quorum: list[str] = []
        if controllers > 1:
            quorum = [
                "--quorum",
                ",".join(f"{node_id}@{address}" for node_id, address in addresses.items()),
                "--cluster-id",
                f"test-{uuid.uuid4().hex[:12]}",
            ]
        self.controllers: dict[int, ServerProcess] = {
            node_id: ServerProcess(
                [
                    "controller",
                    "--id",
                    str(node_id),
                    "--listen",
                    address,
                    "--data-dir",
                    str(root / controller_dir(node_id, controllers)),
                    "--no-auto-leader-rebalance",
                    *quorum,
                    *(controller_args or ["--session-timeout-ms", "1500"]),
                ],
                address=address,
                log_path=root / f"{controller_dir(node_id, controllers)}.log",
                credentials=credentials,
            )
            for node_id, address in addresses.items()
        }
        self.controller = self.controllers[ids[0]]
        #: What brokers are given (`--controller`): every controller, comma-separated.
        self.controller_address = ",".join(addresses.values())
        self.brokers: dict[int, ServerProcess] = {}
        for broker_id in range(1, brokers + 1):
            address = f"127.0.0.1:{free_port()}"
            rack = ["--rack", racks[broker_id - 1]] if racks else []
            self.brokers[broker_id] = ServerProcess(
                [
                    "broker",
                    "--id",
                    str(broker_id),
                    "--listen",
                    address,
                    "--controller",
                    self.controller_address,
                    "--data-dir",
                    str(root / f"broker-{broker_id}"),
                    *rack,
                    *(broker_args or []),
                ],
                address=address,
                log_path=root / f"broker-{broker_id}.log",
                credentials=credentials,
            )
        self._channels: dict[str, grpc.Channel] = {}

    def start(self) -> Cluster:
        self.root.mkdir(parents=True, exist_ok=True)
        if len(self.controllers) == 1:
            self.controller.start()
            if self.controller.address != self.controller_address:  # it had to move port
                self.controller_address = self.controller.address
                for process in self.brokers.values():
                    process.args[process.args.index("--controller") + 1] = self.controller_address
        else:
            # Together: a new quorum's voters wait for each other to format.
            for process in self.controllers.values():
                process.start(wait=False)
            for process in self.controllers.values():
                wait_healthy(process.address, proc=process.proc, credentials=self.credentials)
        for process in self.brokers.values():
            process.start(wait=False)
        for process in self.brokers.values():
            process.wait_healthy()
        self.wait_active(len(self.brokers))
        return self

    def stop(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        for process in self.brokers.values():
            if process.alive():
                process.kill()
        for process in self.controllers.values():
            if process.alive():
                process.kill()

    @property
    def bootstrap(self) -> str:
        alive = [p for p in self.brokers.values() if p.alive() and not p.paused]
        return (alive or list(self.brokers.values()))[0].address

    def stub(self, broker_id: int | None = None) -> broker_pb2_grpc.BrokerServiceStub:
        address = self.brokers[broker_id].address if broker_id is not None else self.bootstrap
        channel = self._channels.get(address)
        if channel is None:
            channel = server_channel(address, self.credentials)
            self._channels[address] = channel
        return broker_pb2_grpc.BrokerServiceStub(channel)

    def describe(self) -> controller_pb2.DescribeClusterResponse:
        return self.stub().DescribeCluster(controller_pb2.DescribeClusterRequest(), timeout=5)

    def wait_active(self, count: int, timeout_s: float = 30.0) -> None:
        def active() -> bool:
            try:
                reply = self.describe()
            except grpc.RpcError:
                return False
            return sum(1 for b in reply.brokers if not b.fenced) >= count

        wait_until(active, timeout_s=timeout_s, what=f"{count} active brokers")

    def create_topic(self, name: str, *, partitions: int = 1, rf: int = 3, **configs: str) -> None:
        reply = self.stub().CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[
                    controller_pb2.CreatableTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=rf,
                        configs={k.replace("_", "."): v for k, v in configs.items()},
                    )
                ]
            ),
            timeout=30,
        )
        assert reply.topics[0].error_code == ErrorCode.NONE, reply.topics[0].error_message
        for index in range(partitions):
            self.wait_leader(name, index)

    def leader_of(self, topic: str, partition: int = 0) -> tuple[int, int, list[int]]:
        """(leader, leader epoch, isr) as the controller sees it."""
        reply = self.stub().DescribeCluster(
            controller_pb2.DescribeClusterRequest(topics=[topic]), timeout=5
        )
        for part in reply.topics[0].partitions:
            if part.partition == partition:
                return part.leader, part.leader_epoch, sorted(part.isr)
        raise KeyError((topic, partition))

    def wait_leader(
        self,
        topic: str,
        partition: int = 0,
        *,
        not_in: tuple[int, ...] = (),
        timeout_s: float = 30.0,
    ) -> int:
        """Wait until a live broker (not in `not_in`) leads and serves the partition."""

        def serving() -> int | None:
            try:
                leader, _, _ = self.leader_of(topic, partition)
            except (grpc.RpcError, KeyError, IndexError):
                return None
            if leader < 0 or leader in not_in or not self.brokers[leader].alive():
                return None
            try:
                reply = self.stub(leader).ListOffsets(
                    broker_pb2.ListOffsetsRequest(
                        partitions=[
                            broker_pb2.ListOffsetsPartition(
                                topic=topic,
                                partition=partition,
                                timestamp_ms=-1,
                                current_leader_epoch=-1,
                            )
                        ]
                    ),
                    timeout=2,
                )
            except grpc.RpcError:
                return None
            # OFFSET_NOT_AVAILABLE: it leads, but its HW is still below the start of its
            # epoch (KIP-207; after an unclean election it waits for a follower to join).
            leading = (ErrorCode.NONE, ErrorCode.OFFSET_NOT_AVAILABLE)
            return leader if reply.partitions[0].error_code in leading else None

        return wait_until(
            serving, timeout_s=timeout_s, what=f"a serving leader of {topic}-{partition}"
        )

    def wait_isr(
        self, topic: str, partition: int, expected: list[int], timeout_s: float = 30.0
    ) -> None:
        wait_until(
            lambda: self.leader_of(topic, partition)[2] == sorted(expected),
            timeout_s=timeout_s,
            what=f"isr {expected}",
        )


def controller_dir(node_id: int, controllers: int) -> str:
    """A controller's data directory (and log file stem) under the cluster root."""
    return "controller" if controllers == 1 else f"controller-{node_id}"


@contextmanager
def running_cluster(root: Path, **kwargs: object) -> Iterator[Cluster]:
    cluster = Cluster(root, **kwargs)  # type: ignore[arg-type]
    try:
        yield cluster.start()
    finally:
        cluster.stop()
