"""A minikafka cluster (a controller or a quorum of them + N brokers) as child processes
for the benchmarks.

Unlike `minikafka dev`, brokers can be killed (SIGKILL), stopped (SIGTERM), paused
(SIGSTOP), resumed and restarted by id, controllers of a quorum killed and restarted, and
every pid is exposed for CPU accounting. Only the processes started here are ever
signalled, by pid.

With `tls=True` every listener and link is TLS with mutual TLS (as `minikafka dev
--tls`): a development CA and one certificate per process plus a client certificate are
made under `<data dir>/certs`; `client_config` is what the benchmark's clients pass.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc

from minikafka.v1 import broker_pb2_grpc, controller_pb2, controller_pb2_grpc, raft_pb2
from minikafka_cli.dev_certs import CertPaths, make_ca, make_certificate
from minikafka_cli.devcluster import _free_port, wait_serving

#: Subject (CN) of the benchmark clients' certificate in a TLS cluster.
CLIENT_CERT = "bench-client"

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


class BenchCluster:
    def __init__(
        self,
        data_dir: Path,
        *,
        brokers: int = 3,
        session_timeout_ms: int = 1500,
        heartbeat_interval_ms: int = 250,
        log_level: str = "INFO",
        controllers: int = 1,
        tls: bool = False,
        broker_args: Sequence[str] = (),
        broker_env: dict[str, str] | None = None,
    ) -> None:
        """`broker_args`: extra arguments of every broker (after the defaults);
        `broker_env`: extra environment of the broker processes (the stage trace switch)."""
        self.data_dir = data_dir
        self.broker_args = list(broker_args)
        self.broker_env = dict(broker_env or {})
        self.tls = tls
        self.certs: dict[str, CertPaths] = {}
        self.log_level = log_level
        ids = [0] if controllers == 1 else list(range(1, controllers + 1))
        #: Controller id -> address (one controller: id 0, as before the quorum).
        self.controller_addresses = {node_id: f"127.0.0.1:{_free_port()}" for node_id in ids}
        self.controller_address = ",".join(self.controller_addresses.values())
        self.cluster_id = f"bench-{uuid.uuid4().hex[:12]}"
        self.broker_addresses = {i: f"127.0.0.1:{_free_port()}" for i in range(1, brokers + 1)}
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()

    @property
    def bootstrap(self) -> str:
        live = [
            address
            for broker_id, address in self.broker_addresses.items()
            if self.alive(broker_id) and broker_id not in self.paused
        ]
        return (live or list(self.broker_addresses.values()))[0]

    @property
    def certs_dir(self) -> Path:
        return self.data_dir / "certs"

    @property
    def client_config(self) -> dict[str, str]:
        """The clients' security settings (empty when plaintext)."""
        if not self.tls:
            return {}
        client = self.certs[CLIENT_CERT]
        return {
            "security_protocol": "SSL",
            "ssl_cafile": str(self.certs["ca"].cert),
            "ssl_certfile": str(client.cert),
            "ssl_keyfile": str(client.key),
        }

    @property
    def credentials(self) -> grpc.ChannelCredentials | None:
        """Channel credentials of the suite's own calls (None when plaintext)."""
        if not self.tls:
            return None
        client = self.certs[CLIENT_CERT]
        return grpc.ssl_channel_credentials(
            self.certs["ca"].cert.read_bytes(), client.key.read_bytes(), client.cert.read_bytes()
        )

    def _channel(self, address: str) -> grpc.Channel:
        credentials = self.credentials
        if credentials is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, credentials)

    def _make_certs(self) -> None:
        """The CA, a certificate per process and the client's (openssl; SANs `localhost`
        and `127.0.0.1`)."""
        ca = make_ca(self.certs_dir, common_name="minikafka-bench-ca")
        self.certs["ca"] = ca
        names = [self._controller_name(n) for n in self.controller_addresses]
        names += [f"broker-{b}" for b in self.broker_addresses]
        for name in [*names, CLIENT_CERT]:
            self.certs[name] = make_certificate(ca, self.certs_dir, name, common_name=name)

    def _tls_args(self, name: str) -> list[str]:
        if not self.tls:
            return []
        return [
            "--tls-cert",
            str(self.certs[name].cert),
            "--tls-key",
            str(self.certs[name].key),
            "--tls-ca",
            str(self.certs["ca"].cert),
        ]

    def pids(self) -> dict[str, int]:
        """Process name -> pid of every live process."""
        return {name: proc.pid for name, proc in self.procs.items() if proc.poll() is None}

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        tls = self._tls_args(name)
        with open(self.data_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "minikafka", *args, *tls, "--log-level", self.log_level],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(
                    os.environ,
                    PYTHONUNBUFFERED="1",
                    **(self.broker_env if name.startswith("broker") else {}),
                ),
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def _broker_args(self, broker_id: int) -> list[str]:
        return [
            "broker",
            "--id",
            str(broker_id),
            "--listen",
            self.broker_addresses[broker_id],
            "--controller",
            self.controller_address,
            "--data-dir",
            str(self.data_dir / f"broker-{broker_id}"),
            *self.broker_args,
        ]

    def _controller_name(self, node_id: int) -> str:
        return "controller" if len(self.controller_addresses) == 1 else f"controller-{node_id}"

    def _controller_args(self, node_id: int) -> list[str]:
        quorum: list[str] = []
        if len(self.controller_addresses) > 1:
            voters = ",".join(f"{n}@{a}" for n, a in self.controller_addresses.items())
            quorum = ["--quorum", voters, "--cluster-id", self.cluster_id]
        return [
            "controller",
            "--id",
            str(node_id),
            "--listen",
            self.controller_addresses[node_id],
            "--data-dir",
            str(self.data_dir / self._controller_name(node_id)),
            "--session-timeout-ms",
            str(self.session_timeout_ms),
            "--heartbeat-interval-ms",
            str(self.heartbeat_interval_ms),
            "--no-auto-leader-rebalance",
            *quorum,
        ]

    def start(self) -> BenchCluster:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.tls:
            self._make_certs()
        for node_id in self.controller_addresses:  # together: a new quorum formats at once
            self._spawn(self._controller_name(node_id), self._controller_args(node_id))
        for node_id, address in self.controller_addresses.items():
            wait_serving(
                address,
                self.procs[self._controller_name(node_id)],
                STARTUP_TIMEOUT_S,
                credentials=self.credentials,
            )
        for broker_id in self.broker_addresses:
            self._spawn(f"broker-{broker_id}", self._broker_args(broker_id))
        for broker_id, address in self.broker_addresses.items():
            wait_serving(
                address,
                self.procs[f"broker-{broker_id}"],
                STARTUP_TIMEOUT_S,
                credentials=self.credentials,
            )
        self.wait_active(len(self.broker_addresses))
        return self

    def alive(self, broker_id: int) -> bool:
        proc = self.procs.get(f"broker-{broker_id}")
        return proc is not None and proc.poll() is None

    def describe(
        self, topics: list[str] | None = None, timeout_s: float = 5.0
    ) -> controller_pb2.DescribeClusterResponse:
        with self._channel(self.bootstrap) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            request = controller_pb2.DescribeClusterRequest(topics=topics or [])
            return stub.DescribeCluster(request, timeout=timeout_s)

    def wait_active(self, count: int, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(grpc.RpcError):
                if sum(1 for b in self.describe().brokers if not b.fenced) >= count:
                    return
            time.sleep(0.1)  # another process's state: nothing to wait on but polling
        raise TimeoutError(f"{count} brokers did not become active within {timeout_s}s")

    def partition_state(self, topic: str, partition: int = 0) -> tuple[int, int, list[int]]:
        """(leader, leader epoch, sorted ISR) as the controller sees it."""
        for part in self.describe([topic]).topics[0].partitions:
            if part.partition == partition:
                return part.leader, part.leader_epoch, sorted(part.isr)
        raise KeyError((topic, partition))

    def wait_isr(
        self, topic: str, size: int, partition: int = 0, timeout_s: float = 60.0
    ) -> tuple[int, int, list[int]]:
        """Wait until the partition has a live leader and an ISR of `size` brokers."""
        deadline = time.monotonic() + timeout_s
        state: tuple[int, int, list[int]] | None = None
        while time.monotonic() < deadline:
            with contextlib.suppress(grpc.RpcError, KeyError, IndexError):
                state = self.partition_state(topic, partition)
                leader, _, isr = state
                if leader > 0 and self.alive(leader) and len(isr) >= size:
                    return state
            time.sleep(0.05)  # another process's state: nothing to wait on but polling
        raise TimeoutError(f"{topic}-{partition}: ISR of {size} not reached (last {state})")

    def kill(self, broker_id: int) -> None:
        """SIGKILL a broker and reap it."""
        proc = self.procs[f"broker-{broker_id}"]
        proc.kill()
        proc.wait(timeout=10)
        self.paused.discard(broker_id)

    def terminate(self, broker_id: int) -> None:
        """SIGTERM a broker (controlled shutdown: its leaderships move) and reap it."""
        proc = self.procs[f"broker-{broker_id}"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT_S)

    def active_controller(self, timeout_s: float = STARTUP_TIMEOUT_S) -> int:
        """The id of the active controller (asked with DescribeQuorum; waits for one)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node_id, address in self.controller_addresses.items():
                proc = self.procs.get(self._controller_name(node_id))
                if proc is None or proc.poll() is not None:
                    continue
                with contextlib.suppress(grpc.RpcError), self._channel(address) as channel:
                    reply = controller_pb2_grpc.ControllerServiceStub(channel).DescribeQuorum(
                        raft_pb2.DescribeQuorumRequest(), timeout=2
                    )
                    if reply.active:
                        return node_id
            time.sleep(0.05)  # another process's state: nothing to wait on but polling
        raise TimeoutError(f"no active controller within {timeout_s}s")

    def quorum_high_watermark(self, node_id: int) -> int:
        with self._channel(self.controller_addresses[node_id]) as channel:
            reply = controller_pb2_grpc.ControllerServiceStub(channel).DescribeQuorum(
                raft_pb2.DescribeQuorumRequest(), timeout=5
            )
        return int(reply.high_watermark)

    def kill_controller(self, node_id: int) -> None:
        proc = self.procs[self._controller_name(node_id)]
        proc.kill()
        proc.wait(timeout=10)

    def restart_controller(self, node_id: int) -> None:
        name = self._controller_name(node_id)
        if self.procs[name].poll() is None:
            raise RuntimeError(f"controller {node_id} is still running")
        proc = self._spawn(name, self._controller_args(node_id))
        wait_serving(
            self.controller_addresses[node_id],
            proc,
            STARTUP_TIMEOUT_S,
            credentials=self.credentials,
        )

    def pause(self, broker_id: int) -> None:
        os.kill(self.procs[f"broker-{broker_id}"].pid, signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        os.kill(self.procs[f"broker-{broker_id}"].pid, signal.SIGCONT)
        self.paused.discard(broker_id)

    def restart(self, broker_id: int) -> None:
        """Start a killed broker again on the same address and data directory."""
        if self.alive(broker_id):
            raise RuntimeError(f"broker {broker_id} is still running")
        proc = self._spawn(f"broker-{broker_id}", self._broker_args(broker_id))
        wait_serving(
            self.broker_addresses[broker_id], proc, STARTUP_TIMEOUT_S, credentials=self.credentials
        )

    def stop(self) -> None:
        """SIGTERM brokers, then the controllers; SIGKILL whatever does not exit in time."""
        for broker_id in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                self.resume(broker_id)
        brokers = [p for n, p in self.procs.items() if not n.startswith("controller")]
        controller = [p for n, p in self.procs.items() if n.startswith("controller")]
        for group in (brokers, controller):
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in group:
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)

    def __enter__(self) -> BenchCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
