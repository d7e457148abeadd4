"""`minikafka dev`: a controller quorum and N brokers as child processes on 127.0.0.1.

Children are started with `python -m minikafka`, waited on through their gRPC health
service, and stopped with SIGTERM (brokers first, then the controllers) on Ctrl-C or
SIGTERM. Only the processes started here are ever signalled, by pid.

With more than one controller they are voters `1..N` of one quorum (`--quorum`), in
`controller-1..N/`; the cluster id they format with is kept in `<data dir>/cluster-id`, so
a restart over the same directory finds the same cluster. One controller runs alone as
controller 0 in `controller/` (the layout before the quorum).

With `tls=True` (`minikafka dev --tls`) every listener is TLS (mutual TLS: clients need a
certificate too). `<data dir>/certs/` holds a development CA, one certificate per process
(`controller-N`, `broker-N`; SANs localhost and 127.0.0.1) and `client.crt` / `client.key`
for clients; they are made once (openssl) and reused. Principals are the certificates'
common names (`User:broker-1`, `User:client`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from minikafka.grpc_options import channel_options
from minikafka.v1 import broker_pb2_grpc, controller_pb2
from minikafka_cli.dev_certs import CertPaths, make_ca, make_certificate

CLUSTER_ID_FILE = "cluster-id"

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    """True when a server could listen on `port`: no socket listens there. Connections
    of a cluster that just stopped (TIME_WAIT) do not count, as gRPC binds with
    SO_REUSEADDR too."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class StartupInterrupted(Exception):
    """Ctrl-C (or SIGTERM) arrived while the cluster was still starting."""


#: Principal mapping of the development cluster: the certificate's common name.
DEV_PRINCIPAL_RULES = "RULE:^CN=(.*?)(,.*)?$/$1/"
CERTS_DIR = "certs"


#: Pause between two health checks that found the process up but not serving yet.
NOT_SERVING_PAUSE_S = 0.1


def _channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    options = channel_options()
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)


def wait_serving(
    address: str,
    proc: subprocess.Popen[bytes],
    timeout_s: float,
    stop: threading.Event | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """Block until the health service at `address` answers SERVING (or the child dies,
    or `stop` is set); over TLS with `credentials`.

    Each check waits for the channel to connect (`wait_for_ready`, at most a second, so
    a dead child or `stop` is noticed): no `channel_ready_future`, whose connectivity
    polling thread raised "Channel closed!" when the channel closed under it."""
    deadline = time.monotonic() + timeout_s
    pause = stop if stop is not None else threading.Event()
    with _channel(address, credentials) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                raise StartupInterrupted
            if proc.poll() is not None:
                raise RuntimeError(f"the process for {address} exited with code {proc.returncode}")
            try:
                reply = stub.Check(
                    health_pb2.HealthCheckRequest(), timeout=1.0, wait_for_ready=True
                )
            except grpc.RpcError:
                continue
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
            pause.wait(NOT_SERVING_PAUSE_S)
    raise RuntimeError(f"{address} did not become healthy within {timeout_s:.0f}s")


class DevCluster:
    """The child processes of one `minikafka dev` run."""

    def __init__(
        self,
        *,
        brokers: int,
        data_dir: Path,
        base_port: int,
        log_level: str,
        controllers: int = 1,
        stop: threading.Event | None = None,
        tls: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.tls = tls
        self._credentials: grpc.ChannelCredentials | None = None
        self.log_level = log_level
        #: Set by Ctrl-C / SIGTERM; the start-up waits give up when it is.
        self.stop_requested = stop if stop is not None else threading.Event()
        if base_port:
            self.broker_ports = [base_port + i for i in range(brokers)]
            self.controller_ports = [base_port + 100 + i for i in range(controllers)]
            busy = [p for p in [*self.broker_ports, *self.controller_ports] if not _port_is_free(p)]
            if busy:
                raise RuntimeError(
                    f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use; stop what "
                    "uses them or pass --base-port 0 for free ports"
                )
        else:
            self.broker_ports = [_free_port() for _ in range(brokers)]
            self.controller_ports = [_free_port() for _ in range(controllers)]
        self.children: list[tuple[str, str, subprocess.Popen[bytes]]] = []

    @property
    def controller_ids(self) -> list[int]:
        """Voter ids: 1..N in a quorum, 0 for a lone controller."""
        if len(self.controller_ports) == 1:
            return [0]
        return list(range(1, len(self.controller_ports) + 1))

    def _controller_name(self, node_id: int) -> str:
        return "controller" if len(self.controller_ports) == 1 else f"controller-{node_id}"

    @property
    def controller_addresses(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.controller_ports]

    @property
    def controller_address(self) -> str:
        """Every controller, as brokers take them (`--controller`)."""
        return ",".join(self.controller_addresses)

    @property
    def quorum(self) -> str:
        return ",".join(
            f"{node_id}@{address}"
            for node_id, address in zip(self.controller_ids, self.controller_addresses, strict=True)
        )

    def cluster_id(self) -> str:
        """The quorum's cluster id, created once per data directory."""
        path = self.data_dir / CLUSTER_ID_FILE
        if path.exists():
            return path.read_text().strip()
        from controller.app import new_cluster_id

        cluster_id = new_cluster_id()
        path.write_text(cluster_id + "\n")
        return cluster_id

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_ports[0]}"

    @property
    def certs_dir(self) -> Path:
        return self.data_dir / CERTS_DIR

    def _certificate(self, name: str) -> CertPaths:
        """`certs/NAME.crt` / `.key`, made (signed by the dev CA) if missing."""
        directory = self.certs_dir
        ca = CertPaths(cert=directory / "ca.crt", key=directory / "ca.key")
        if not ca.cert.exists():
            ca = make_ca(directory)
        paths = CertPaths(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
        if paths.cert.exists() and paths.key.exists():
            return paths
        return make_certificate(ca, directory, name, common_name=name)

    def client_files(self) -> dict[str, str]:
        """The client settings (kafka-python's names) of a TLS dev cluster."""
        client = self._certificate("client")
        return {
            "security_protocol": "SSL",
            "ssl_cafile": str(self.certs_dir / "ca.crt"),
            "ssl_certfile": str(client.cert),
            "ssl_keyfile": str(client.key),
        }

    def _tls_args(self, name: str) -> list[str]:
        if not self.tls:
            return []
        paths = self._certificate(name)
        return [
            "--tls-cert",
            str(paths.cert),
            "--tls-key",
            str(paths.key),
            "--tls-ca",
            str(self.certs_dir / "ca.crt"),
            "--ssl-principal-mapping-rules",
            DEV_PRINCIPAL_RULES,
        ]

    def _prepare_tls(self) -> None:
        if not self.tls:
            return
        files = self.client_files()
        self._credentials = grpc.ssl_channel_credentials(
            Path(files["ssl_cafile"]).read_bytes(),
            Path(files["ssl_keyfile"]).read_bytes(),
            Path(files["ssl_certfile"]).read_bytes(),
        )

    def _spawn(self, name: str, address: str, args: list[str]) -> subprocess.Popen[bytes]:
        args = [*args, *self._tls_args(name)]
        log_path = self.data_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "minikafka", *args, "--log-level", self.log_level],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                start_new_session=True,  # Ctrl-C reaches us only; we stop children in order
            )
        self.children.append((name, address, proc))
        return proc

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._check_layout()
        self._prepare_tls()
        quorum: list[str] = []
        if len(self.controller_ports) > 1:
            quorum = ["--quorum", self.quorum, "--cluster-id", self.cluster_id()]
        for node_id, address in zip(self.controller_ids, self.controller_addresses, strict=True):
            name = self._controller_name(node_id)
            self._spawn(
                name,
                address,
                [
                    "controller",
                    "--id",
                    str(node_id),
                    "--listen",
                    address,
                    "--data-dir",
                    str(self.data_dir / name),
                    *quorum,
                ],
            )
        # Together: the voters of a new quorum wait for each other to format.
        for name, address, proc in list(self.children):
            self._wait_serving(name, address, proc)
        for index, port in enumerate(self.broker_ports, start=1):
            address = f"127.0.0.1:{port}"
            self._spawn(
                f"broker-{index}",
                address,
                [
                    "broker",
                    "--id",
                    str(index),
                    "--listen",
                    address,
                    "--controller",
                    self.controller_address,
                    "--data-dir",
                    str(self.data_dir / f"broker-{index}"),
                ],
            )
        for name, address, proc in self.children[len(self.controller_ports) :]:
            self._wait_serving(name, address, proc)
        self._wait_brokers_active(len(self.broker_ports))

    def _check_layout(self) -> None:
        """Refuse a data directory of the other layout: its brokers hold that cluster's
        partitions, which a new cluster would not know."""
        lone = (self.data_dir / "controller").is_dir()
        quorum = any(path.is_dir() for path in self.data_dir.glob("controller-*"))
        if len(self.controller_ports) > 1 and lone:
            raise RuntimeError(
                f"{self.data_dir} holds a cluster with one controller (controller/): run it "
                "with --controllers 1, or use another --data-dir"
            )
        if len(self.controller_ports) == 1 and quorum:
            raise RuntimeError(
                f"{self.data_dir} holds a cluster with a controller quorum (controller-N/): "
                "run it with that --controllers count, or use another --data-dir"
            )

    def _wait_serving(self, name: str, address: str, proc: subprocess.Popen[bytes]) -> None:
        try:
            wait_serving(address, proc, STARTUP_TIMEOUT_S, self.stop_requested, self._credentials)
        except RuntimeError as exc:
            raise RuntimeError(f"{name}: {exc}; see {self.data_dir / (name + '.log')}") from exc

    def _wait_brokers_active(self, expected: int) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        with _channel(self.bootstrap, self._credentials) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            while time.monotonic() < deadline:
                if self.stop_requested.is_set():
                    raise StartupInterrupted
                with contextlib.suppress(grpc.RpcError):
                    reply = stub.DescribeCluster(controller_pb2.DescribeClusterRequest(), timeout=2)
                    active = [b for b in reply.brokers if not b.fenced]
                    if len(active) >= expected:
                        return
                self._check_children()
                self.stop_requested.wait(0.2)  # bounded by the deadline; wakes on Ctrl-C
        raise RuntimeError(f"the {expected} brokers did not all register within the timeout")

    def _check_children(self) -> None:
        for name, _, proc in self.children:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {proc.returncode}; see "
                    f"{self.data_dir / (name + '.log')}"
                )

    def status_table(self) -> str:
        lines = ["process      address            pid      log"]
        for name, address, proc in self.children:
            lines.append(
                f"{name:<12} {address:<18} {proc.pid:<8} {self.data_dir / (name + '.log')}"
            )
        return "\n".join(lines)

    def stop(self) -> None:
        """SIGTERM brokers (in parallel), then the controllers; SIGKILL after a timeout."""
        brokers = [c for c in self.children if not c[0].startswith("controller")]
        controllers = [c for c in self.children if c[0].startswith("controller")]
        for group in (brokers, controllers):
            for _, _, proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for _, _, proc in group:
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def run_dev_cluster(
    *,
    brokers: int,
    data_dir: Path,
    base_port: int,
    log_level: str,
    controllers: int = 3,
    tls: bool = False,
) -> None:
    """Start the cluster, print where it is, and run until Ctrl-C or SIGTERM (also during
    start-up), then stop every child. Raises RuntimeError when a child fails."""
    stop = threading.Event()
    cluster = DevCluster(
        brokers=brokers,
        controllers=controllers,
        data_dir=data_dir.resolve(),
        base_port=base_port,
        log_level=log_level,
        stop=stop,
        tls=tls,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(
            f"starting {controllers} controller(s) and {brokers} brokers under "
            f"{cluster.data_dir} ...",
            flush=True,
        )
        try:
            cluster.start()
        except StartupInterrupted:
            print("interrupted while starting.", flush=True)
            return
        print(cluster.status_table())
        print(f"\nbootstrap server: {cluster.bootstrap}")
        tls_flags = ""
        if tls:
            files = cluster.client_files()
            tls_flags = (
                f" --ssl-cafile {files['ssl_cafile']} --ssl-certfile {files['ssl_certfile']}"
                f" --ssl-keyfile {files['ssl_keyfile']}"
            )
            settings = ", ".join(f"{key}={value!r}" for key, value in files.items())
            print(f"TLS (mutual): clients pass {settings}")
        print(
            f"try: minikafka topic create demo --partitions 3 --replication-factor "
            f"{min(3, brokers)} --bootstrap-server {cluster.bootstrap}{tls_flags}"
        )
        print("Ctrl-C stops the cluster.", flush=True)
        while not stop.wait(0.5):
            cluster._check_children()
    finally:
        print("stopping ...", flush=True)
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("stopped.")
