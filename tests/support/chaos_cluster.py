"""A cluster wired for fault injection, and the process / storage / election nemeses.

`ChaosCluster` is `tests.support.cluster.Cluster` with a `ProxyNet` proxy in front of
every server: brokers advertise their proxy and reach the controller through its proxy,
and the test's clients bootstrap through the brokers' proxies, so network faults act on
every link. Observation (describe, leader, replica logs) bypasses the proxies.

With a controller quorum (`controllers=N`), the controllers are processes `c1..cN` and
reach each other through their proxies too (`--quorum` names the proxies), so a
controller can be cut off from its peers and the brokers; observation asks the active
controller (found with `DescribeQuorum`).

With `tls=True` every process runs with TLS and mutual TLS (`--tls-cert/--tls-key/
--tls-ca`): a development CA and one certificate per process (`CN=<process name>`, SANs
`localhost` and `127.0.0.1`, the addresses every process, proxy and client dials) plus a
client certificate are made under `<root>/certs` (`minikafka_cli.dev_certs`). The proxies
forward bytes, so TLS passes through them end to end; the test's own channels
(`credentials`) and its clients (`client_config`) present the client certificate.

Every nemesis action is recorded in the history (process "nemesis") when one is given.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from minikafka.errors import ErrorCode
from minikafka.record_batch import CorruptBatchError, iter_batches
from minikafka.v1 import common_pb2, controller_pb2, controller_pb2_grpc, raft_pb2
from minikafka_cli.dev_certs import CertPaths, make_ca, make_certificate
from tests.chaos.history import History
from tests.support.chaos_proxy import ProxyNet
from tests.support.cluster import Cluster, wait_until
from tests.support.lazyfs import LazyMount
from tests.support.processes import ServerProcess, server_channel, wait_healthy

#: (base offset, last offset, leader epoch, crc) of one batch in a replica's log.
BatchId = tuple[int, int, int, int]

FAST_BROKER_ARGS = ["--replica-lag-time-max-ms", "1500"]
FAST_CONTROLLER_ARGS = ["--session-timeout-ms", "1500", "--heartbeat-interval-ms", "300"]


def _address_of(process: ServerProcess) -> Callable[[], str]:
    """The process's address at call time (it changes if the process had to move)."""
    return lambda: process.address


def broker_name(broker_id: int) -> str:
    return f"b{broker_id}"


def controller_name(node_id: int) -> str:
    """A quorum member's process name in the proxy net (a lone controller: "controller")."""
    return f"c{node_id}"


class ChaosCluster(Cluster):
    def __init__(
        self,
        root: Path,
        *,
        brokers: int = 3,
        broker_args: list[str] | None = None,
        controller_args: list[str] | None = None,
        history: History | None = None,
        lazy_fs: bool = False,
        controllers: int = 1,
        tls: bool = False,
    ) -> None:
        """`lazy_fs`: every broker's data directory is a lazy file system
        (`tests.support.lazyfs`), which `power_loss` needs. `tls`: TLS and mutual TLS on
        every listener and link (certificates made under `root/certs`)."""
        self.certs = ChaosCerts(root / "certs", brokers, controllers) if tls else None
        super().__init__(
            root,
            brokers=brokers,
            broker_args=[*FAST_BROKER_ARGS, *(broker_args or [])],
            controller_args=[*FAST_CONTROLLER_ARGS, *(controller_args or [])],
            controllers=controllers,
            credentials=self.certs.credentials() if self.certs is not None else None,
        )
        if self.certs is not None:
            for node_id, process in self.controllers.items():
                process.args += self.certs.server_args(controller_name(node_id))
            for broker_id, process in self.brokers.items():
                process.args += self.certs.server_args(broker_name(broker_id))
        self.history = history
        self.net = ProxyNet(self._pids)
        # Upstreams are read per connection: a server that lost its port race at start
        # moves to another port (`ServerProcess.wait_healthy`), its proxy follows.
        self.controller_proxy: dict[int, str] = {}
        if controllers == 1:
            controller_proxy = self.net.add("controller", lambda: self.controller.address)
            self.controller_proxy[0] = controller_proxy
        else:
            for node_id, process in self.controllers.items():
                self.controller_proxy[node_id] = self.net.add(
                    controller_name(node_id), _address_of(process)
                )
            quorum = ",".join(
                f"{node_id}@{address}" for node_id, address in self.controller_proxy.items()
            )
            for process in self.controllers.values():
                process.args[process.args.index("--quorum") + 1] = quorum
            controller_proxy = ",".join(self.controller_proxy.values())
        self.proxy: dict[int, str] = {}
        for broker_id, process in self.brokers.items():
            self.proxy[broker_id] = self.net.add(broker_name(broker_id), _address_of(process))
            at = process.args.index("--controller")
            process.args[at + 1] = controller_proxy
            process.args += ["--advertise", self.proxy[broker_id]]
            # Each broker runs on its own simulated machine: a power loss is a reboot (a
            # new boot id), so a restarted broker cannot claim its page cache survived.
            process.args += ["--unsafe-test-boot-id", f"chaos-boot-{broker_id}-0"]
        self.reboots: dict[int, int] = dict.fromkeys(self.brokers, 0)
        self._controller_channel: grpc.Channel | None = None
        self.mounts: dict[int, LazyMount] = {}
        if lazy_fs:
            for broker_id in self.brokers:
                self.mounts[broker_id] = LazyMount(
                    root / f"broker-{broker_id}.disk",
                    root / f"broker-{broker_id}",
                    root / f"lazyfs-{broker_id}.log",
                )

    def start(self) -> ChaosCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        for mount in self.mounts.values():
            mount.mount()
        super().start()
        return self

    def _pids(self) -> dict[str, int]:
        pids = {broker_name(b): p.pid for b, p in self.brokers.items() if p.alive()}
        if len(self.controllers) == 1:
            if self.controller.alive():
                pids["controller"] = self.controller.pid
        else:
            for node_id, process in self.controllers.items():
                if process.alive():
                    pids[controller_name(node_id)] = process.pid
        return pids

    @property
    def client_bootstrap(self) -> list[str]:
        """Every broker's proxy: what the test's clients dial."""
        return list(self.proxy.values())

    @property
    def client_config(self) -> dict[str, str]:
        """The security settings of the test's clients (empty: plaintext)."""
        return self.certs.client_config() if self.certs is not None else {}

    def stop(self) -> None:
        for process in [*self.brokers.values(), *self.controllers.values()]:
            if process.alive() and process.paused:
                process.resume()
        super().stop()
        if self._controller_channel is not None:
            self._controller_channel.close()
        self.net.close()
        for mount in self.mounts.values():
            mount.unmount()

    def _channel_to(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = server_channel(address, self.credentials)
            self._channels[address] = channel
        return channel

    # ---- observation (straight to the controller, never through a proxy) -------------

    def controller_stub(self) -> controller_pb2_grpc.ControllerServiceStub:
        """The (active) controller, straight (not through a proxy)."""
        if len(self.controllers) > 1:
            address = self.controllers[self.active_controller()].address
            return controller_pb2_grpc.ControllerServiceStub(self._channel_to(address))
        if self._controller_channel is None:
            self._controller_channel = server_channel(self.controller_address, self.credentials)
        return controller_pb2_grpc.ControllerServiceStub(self._controller_channel)

    def quorum_of(self, node_id: int) -> raft_pb2.DescribeQuorumResponse:
        """What controller `node_id` says about the quorum (asked directly)."""
        stub = controller_pb2_grpc.ControllerServiceStub(
            self._channel_to(self.controllers[node_id].address)
        )
        reply: raft_pb2.DescribeQuorumResponse = stub.DescribeQuorum(
            raft_pb2.DescribeQuorumRequest(), timeout=2
        )
        return reply

    def active_controller(self, timeout_s: float = 30.0, not_in: tuple[int, ...] = ()) -> int:
        """The id of the active controller (waiting for one, bounded)."""

        def find() -> tuple[int] | None:
            for node_id, process in self.controllers.items():
                if not process.alive() or process.paused or node_id in not_in:
                    continue
                try:
                    if self.quorum_of(node_id).active:
                        return (node_id,)
                except grpc.RpcError:
                    continue
            return None

        return wait_until(find, timeout_s=timeout_s, what="an active controller")[0]

    def _describe(self, topics: list[str] | None = None) -> controller_pb2.DescribeClusterResponse:
        """DescribeCluster at the active controller (asking again when it moved meanwhile)."""

        def ask() -> controller_pb2.DescribeClusterResponse | None:
            try:
                reply: controller_pb2.DescribeClusterResponse = (
                    self.controller_stub().DescribeCluster(
                        controller_pb2.DescribeClusterRequest(topics=topics or []), timeout=5
                    )
                )
            except grpc.RpcError:
                if len(self.controllers) == 1:
                    raise
                return None
            return None if reply.error_code == ErrorCode.NOT_CONTROLLER else reply

        return wait_until(ask, timeout_s=30, what="DescribeCluster at the active controller")

    def describe(self) -> controller_pb2.DescribeClusterResponse:
        return self._describe()

    def leader_of(self, topic: str, partition: int = 0) -> tuple[int, int, list[int]]:
        reply = self._describe([topic])
        for part in reply.topics[0].partitions:
            if part.partition == partition:
                return part.leader, part.leader_epoch, sorted(part.isr)
        raise KeyError((topic, partition))

    def try_leader_of(self, topic: str, partition: int = 0) -> tuple[int, int, list[int]] | None:
        try:
            return self.leader_of(topic, partition)
        except (grpc.RpcError, KeyError, IndexError):
            return None

    def replicas_of(self, topic: str, partition: int) -> list[int]:
        reply = self._describe([topic])
        for part in reply.topics[0].partitions:
            if part.partition == partition:
                return sorted(part.replicas)
        raise KeyError((topic, partition))

    def assignment_of(self, topic: str, partition: int) -> list[int]:
        """The replicas in assignment order (the first is the preferred leader; elections
        take the first eligible one)."""
        reply = self._describe([topic])
        for part in reply.topics[0].partitions:
            if part.partition == partition:
                return list(part.replicas)
        raise KeyError((topic, partition))

    def broker_epoch(self, broker_id: int) -> int:
        """The broker epoch the controller holds for `broker_id` (-1: not registered)."""
        for broker in self.describe().brokers:
            if broker.endpoint.broker_id == broker_id:
                return int(broker.broker_epoch)
        return -1

    def wait_full_isr(self, topic: str, partitions: int, timeout_s: float = 40.0) -> None:
        """Until every partition's ISR holds all its replicas."""
        for p in range(partitions):
            self.wait_isr(topic, p, self.replicas_of(topic, p), timeout_s=timeout_s)

    def truncate_tail(
        self, broker_id: int, topic: str, partition: int, *, rng: random.Random
    ) -> dict[str, Any]:
        """Power loss of a STOPPED broker: cut its last segment at a random byte inside
        the last third of the file (losing a suffix, possibly tearing a batch)."""
        assert not self.brokers[broker_id].alive(), "truncate only a stopped broker"
        segments = sorted(self.partition_dir(broker_id, topic, partition).glob("*.log"))
        segment = next(s for s in reversed(segments) if s.stat().st_size > 0)
        size = segment.stat().st_size
        keep = rng.randrange(size * 2 // 3, size)
        with segment.open("r+b") as data:
            data.truncate(keep)
        self.reboot(broker_id)  # a power loss: the machine restarts too
        info = {"segment": segment.name, "size": size, "kept": keep}
        self.record("truncate", broker=broker_id, topic=topic, partition=partition, **info)
        return info

    # ---- nemeses -------------------------------------------------------------------

    def record(self, action: str, **info: Any) -> None:
        if self.history is not None:
            self.history.nemesis(action, **info)

    def kill(self, broker_id: int) -> None:
        self.record("kill", broker=broker_id)
        self.brokers[broker_id].kill()

    def reboot(self, broker_id: int) -> None:
        """The broker's (simulated) machine restarts: its next start sees a new boot id."""
        self.reboots[broker_id] += 1
        args = self.brokers[broker_id].args
        at = args.index("--unsafe-test-boot-id")
        args[at + 1] = f"chaos-boot-{broker_id}-{self.reboots[broker_id]}"

    def power_loss(self, broker_id: int) -> None:
        """Power failure of a broker's machine: kill -9, and every write it had not
        fsynced is gone (its lazy file system drops them); the machine reboots (a new boot
        id). Needs `lazy_fs=True`."""
        mount = self.mounts.get(broker_id)
        assert mount is not None, "power_loss needs a cluster started with lazy_fs=True"
        self.record("power-loss", broker=broker_id)
        if self.brokers[broker_id].alive():
            self.brokers[broker_id].kill()
        mount.power_loss()
        self.reboot(broker_id)

    def start_broker(self, broker_id: int) -> None:
        self.record("start", broker=broker_id)
        process = self.brokers[broker_id]
        process.start(wait=False)
        wait_healthy(process.address, proc=process.proc, credentials=self.credentials)

    def terminate(self, broker_id: int) -> int:
        self.record("terminate", broker=broker_id)
        return self.brokers[broker_id].terminate()

    def pause(self, broker_id: int) -> None:
        self.record("pause", broker=broker_id)
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.record("resume", broker=broker_id)
        self.brokers[broker_id].resume()

    def wipe_data_dir(self, broker_id: int) -> list[str]:
        """The disk of a STOPPED broker is wiped (or replaced by an empty one): every entry
        of its data directory is deleted, the directory itself (a mount point with
        `lazy_fs`) stays. Returns the names deleted."""
        assert not self.brokers[broker_id].alive(), "wipe only a stopped broker"
        data_dir = self.root / f"broker-{broker_id}"
        deleted = sorted(entry.name for entry in data_dir.iterdir())
        for entry in data_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.record("wipe", broker=broker_id, deleted=deleted)
        return deleted

    # ---- network nemeses (process names: `broker_name(id)`, "controller", "client") ---

    def block_one_way(self, src: str, dst: str) -> None:
        """Hold the bytes flowing from `src` to `dst` (the reverse direction flows)."""
        self.record("block-one-way", src=src, dst=dst)
        self.net.block_one_way(src, dst)

    def unblock_one_way(self, src: str, dst: str) -> None:
        """Deliver what `block_one_way(src, dst)` held, in order, and let it flow again."""
        self.record("unblock-one-way", src=src, dst=dst)
        self.net.unblock_one_way(src, dst)

    def delay_one_way(self, src: str, dst: str, delay_ms: float) -> None:
        self.record("delay-one-way", src=src, dst=dst, delay_ms=delay_ms)
        self.net.delay_one_way(src, dst, delay_ms)

    def swallow_resets(self, name: str) -> None:
        """When `name` dies, its peers' connections stay open and silent (no FIN, no RST)
        until it is back: the controller keeps a dead broker's session until it times out."""
        self.record("swallow-resets", process=name)
        self.net.swallow_resets(name)

    def reset_connections_to(self, name: str) -> int:
        """RST every connection to `name`, swallowed ones included (a restarted host
        answering its peers' retransmissions); returns how many."""
        self.record("reset", process=name)
        return self.net.reset(name)

    def heal_network(self) -> None:
        self.record("heal-network")
        self.net.heal()

    def wait_fenced(self, broker_id: int, timeout_s: float = 20.0) -> None:
        """Until the controller considers `broker_id` gone (session expiry)."""

        def fenced() -> bool:
            try:
                reply = self.describe()
            except grpc.RpcError:
                return False
            return all(b.fenced for b in reply.brokers if b.endpoint.broker_id == broker_id)

        wait_until(fenced, timeout_s=timeout_s, what=f"broker {broker_id} fenced")

    def hard_bounce(self, broker_id: int) -> None:
        """SIGKILL, wait for the controller to notice, restart."""
        self.kill(broker_id)
        self.wait_fenced(broker_id)
        self.start_broker(broker_id)

    def kill_controller(self, node_id: int | None = None) -> None:
        """kill -9 of a controller (the only one when `node_id` is None)."""
        process = self.controller if node_id is None else self.controllers[node_id]
        self.record("kill-controller", controller=node_id)
        process.kill()

    def start_controller(self, node_id: int | None = None) -> None:
        """Start a controller again; a member of a quorum is healthy once it runs (it need
        not be, or become, the active one)."""
        process = self.controller if node_id is None else self.controllers[node_id]
        self.record("start-controller", controller=node_id)
        if len(self.controllers) == 1:
            process.start()
        else:
            process.start(wait=False)
            wait_healthy(process.address, proc=process.proc, credentials=self.credentials)

    def wipe_controller(self, node_id: int) -> list[str]:
        """The disk of a STOPPED controller is replaced by an empty one."""
        process = self.controllers[node_id]
        assert not process.alive(), "wipe only a stopped controller"
        data_dir = Path(process.args[process.args.index("--data-dir") + 1])
        deleted = sorted(entry.name for entry in data_dir.iterdir()) if data_dir.exists() else []
        shutil.rmtree(data_dir, ignore_errors=True)
        self.record("wipe-controller", controller=node_id, deleted=deleted)
        return deleted

    def elect(self, topic: str, partition: int, kind: str = "preferred") -> int:
        """Ask the controller for a preferred or unclean election; returns the error code."""
        self.record("elect", topic=topic, partition=partition, kind=kind)
        reply = self.controller_stub().ElectLeaders(
            controller_pb2.ElectLeadersRequest(
                election_type=(
                    controller_pb2.ElectionType.UNCLEAN
                    if kind == "unclean"
                    else controller_pb2.ElectionType.PREFERRED
                ),
                partitions=[common_pb2.TopicPartition(topic=topic, partition=partition)],
                timeout_ms=8000,
            ),
            timeout=10,
        )
        for result in reply.results:
            return int(result.error_code)
        return int(reply.error_code)

    def partition_dir(self, broker_id: int, topic: str, partition: int) -> Path:
        return self.root / f"broker-{broker_id}" / f"{topic}-{partition}"

    def corrupt_tail(
        self, broker_id: int, topic: str, partition: int, *, rng: random.Random
    ) -> dict[str, Any]:
        """Damage the last segment of a STOPPED broker: flip bytes inside the last batch
        and cut a torn batch onto the end. Returns what was done."""
        assert not self.brokers[broker_id].alive(), "corrupt only a stopped broker"
        segments = sorted(self.partition_dir(broker_id, topic, partition).glob("*.log"))
        segment = next(s for s in reversed(segments) if s.stat().st_size > 0)
        data = bytearray(segment.read_bytes())
        batches = list(_valid_batches(bytes(data)))
        assert batches, f"{segment} has no batch to damage"
        last_pos, last_size = batches[-1][0], batches[-1][1]
        flip_at = last_pos + rng.randrange(61, last_size) if last_size > 61 else last_pos + 8
        data[flip_at] ^= 0xFF
        torn = bytes(data[last_pos : last_pos + last_size // 2])
        segment.write_bytes(bytes(data) + torn)
        info = {
            "segment": segment.name,
            "flipped_byte": flip_at,
            "damaged_batch_base_offset": batches[-1][2],
            "torn_bytes": len(torn),
        }
        self.record("corrupt", broker=broker_id, topic=topic, partition=partition, **info)
        return info

    def replica_log(self, broker_id: int, topic: str, partition: int) -> list[BatchId]:
        """The valid batches of one replica, read from its segment files."""
        out: list[BatchId] = []
        for segment in sorted(self.partition_dir(broker_id, topic, partition).glob("*.log")):
            for _, _, base, last, epoch, crc in _valid_batches(segment.read_bytes()):
                out.append((base, last, epoch, crc))
        return out

    def wait_identical_replicas(
        self, topic: str, partitions: int, timeout_s: float = 30.0
    ) -> dict[int, list[BatchId]]:
        """Until every replica of every partition holds the same batches (I3 / I14)."""
        logs: dict[int, list[BatchId]] = {}
        for p in range(partitions):

            def same(p: int = p) -> bool:
                holders = [b for b in self.brokers if self.partition_dir(b, topic, p).exists()]
                replicas = [self.replica_log(b, topic, p) for b in holders]
                logs[p] = replicas[0]
                return all(log == replicas[0] for log in replicas)

            wait_until(same, timeout_s=timeout_s, what=f"identical replicas of {topic}-{p}")
        return logs


class ChaosCerts:
    """The certificates of one TLS run: a development CA, one certificate per process
    (named and `CN=` after its process name: `c0` / `cN`, `bN`) and one for the test's
    clients and channels (`CN=chaos-client`). No authorizer runs, so any certificate the
    CA signed may make every call; the per-process subjects keep the principals apart in
    the logs."""

    CLIENT = "chaos-client"

    def __init__(self, directory: Path, brokers: int, controllers: int) -> None:
        self.directory = directory
        self.ca = make_ca(directory, common_name="minikafka-chaos-ca")
        controller_ids = [0] if controllers == 1 else list(range(1, controllers + 1))
        names = [
            *(controller_name(node_id) for node_id in controller_ids),
            *(broker_name(broker_id) for broker_id in range(1, brokers + 1)),
        ]
        self.process: dict[str, CertPaths] = {
            name: make_certificate(self.ca, directory, name, common_name=name) for name in names
        }
        self.client = make_certificate(self.ca, directory, self.CLIENT, common_name=self.CLIENT)

    def server_args(self, name: str) -> list[str]:
        """The TLS flags of process `name`."""
        paths = self.process[name]
        return [
            "--tls-cert",
            str(paths.cert),
            "--tls-key",
            str(paths.key),
            "--tls-ca",
            str(self.ca.cert),
        ]

    def credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials presenting the client certificate."""
        return grpc.ssl_channel_credentials(
            self.ca.cert.read_bytes(),
            self.client.key.read_bytes(),
            self.client.cert.read_bytes(),
        )

    def client_config(self) -> dict[str, str]:
        """kafka-python style settings for `Producer` / `Consumer` / `Admin`."""
        return {
            "security_protocol": "SSL",
            "ssl_cafile": str(self.ca.cert),
            "ssl_certfile": str(self.client.cert),
            "ssl_keyfile": str(self.client.key),
        }


def _valid_batches(data: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """(position, size, base offset, last offset, epoch, crc) up to the first bad batch."""
    out: list[tuple[int, int, int, int, int, int]] = []
    try:
        for pos, header in iter_batches(data):
            out.append(
                (
                    pos,
                    header.size,
                    header.base_offset,
                    header.base_offset + header.last_offset_delta,
                    header.leader_epoch,
                    header.crc,
                )
            )
    except CorruptBatchError:
        pass
    return out
