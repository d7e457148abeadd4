"""Start and stop real minikafka processes for tests (by pid, on 127.0.0.1 only)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

STARTUP_TIMEOUT_S = 30.0


#: Test servers listen below the kernel's ephemeral port range. A port the kernel picks
#: for some process's `bind(0)` (Spark's JVM listens on one for its Python worker's
#: handshake) is then never one a test client may still be dialling: a client that kept
#: reconnecting to a stopped test broker's address once reached such a JVM socket, whose
#: handshake read the HTTP/2 preface "PRI " as a 1.35 GB length (OutOfMemoryError, the
#: streaming query died; a CI run failed on it).
TEST_PORTS_BELOW = 32768
TEST_PORTS_FROM = 20000
#: Each pytest-xdist worker hands out ports from its own block, one after the other (a
#: port freed by one test is not handed to the next test of the same worker at once).
WORKER_BLOCK_PORTS = 1500
_next_port: list[int] = []


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return TEST_PORTS_BELOW


def _worker_block() -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    top = min(TEST_PORTS_BELOW, _ephemeral_start())
    blocks = max((top - TEST_PORTS_FROM) // WORKER_BLOCK_PORTS, 1)
    first = TEST_PORTS_FROM + (index % blocks) * WORKER_BLOCK_PORTS
    return first, min(first + WORKER_BLOCK_PORTS, top)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1, below the kernel's ephemeral
    range (`TEST_PORTS_BELOW`), from this xdist worker's block; the kernel's choice if
    the box reserves no room below its ephemeral range."""
    first, end = _worker_block()
    if end - first < 16:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    if not _next_port:
        # A start of its own per process: two test sessions at once rarely meet.
        _next_port.append(first + (os.getpid() * 7919) % (end - first))
    for _ in range(end - first):
        port = _next_port[0]
        _next_port[0] = port + 1 if port + 1 < end else first
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port in {first}..{end - 1}")


def server_channel(
    address: str, credentials: grpc.ChannelCredentials | None = None
) -> grpc.Channel:
    """A blocking channel to a test server: TLS with `credentials`, plaintext without."""
    if credentials is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, credentials)


def wait_healthy(
    address: str,
    timeout_s: float = STARTUP_TIMEOUT_S,
    proc: subprocess.Popen[bytes] | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """Block until the gRPC health service at `address` says SERVING (over TLS with
    `credentials`)."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    with server_channel(address, credentials) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process for {address} exited with {proc.returncode}")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError as exc:
                last_error = exc
                # The server is not up yet: wait for the channel to change state instead
                # of sleeping blindly (bounded by the deadline).
                with contextlib.suppress(grpc.FutureTimeoutError):
                    grpc.channel_ready_future(channel).result(timeout=0.2)
    raise TimeoutError(f"{address} not healthy after {timeout_s}s: {last_error}")


class ServerProcess:
    """One minikafka server process (broker or controller) started by a test."""

    def __init__(
        self,
        args: list[str],
        *,
        address: str,
        log_path: Path,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.args = args
        #: TLS channel credentials the test reaches this server with (None: plaintext).
        self.credentials = credentials
        self.address = address
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def wait_healthy(self, retries: int = 3) -> None:
        """Wait until healthy; if the process lost its port to another process between
        `free_port()` and its bind, move it to a fresh port and start it again."""
        for attempt in range(retries + 1):
            try:
                wait_healthy(self.address, proc=self.proc, credentials=self.credentials)
                return
            except RuntimeError:
                if attempt == retries or "cannot listen on" not in self.log_text():
                    raise
                self._rebind()
                self.start(wait=False)

    def _rebind(self) -> None:
        index = self.args.index("--listen") + 1
        host = self.args[index].rpartition(":")[0]
        self.address = f"{host}:{free_port()}"
        self.args[index] = self.address

    def start(self, *, wait: bool = True) -> ServerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "minikafka", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        if wait:
            self.wait_healthy()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=10)

    def terminate(self, timeout_s: float = 20.0) -> int:
        """SIGTERM, wait for a graceful exit (SIGKILL after timeout_s); returns the exit code."""
        assert self.proc is not None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def standalone_broker_process(
    data_dir: Path, *, broker_id: int = 1, extra: list[str] | None = None
) -> ServerProcess:
    port = free_port()
    address = f"127.0.0.1:{port}"
    data_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "broker",
        "--id",
        str(broker_id),
        "--listen",
        address,
        "--data-dir",
        str(data_dir),
        "--standalone",
        *(extra or []),
    ]
    return ServerProcess(
        args, address=address, log_path=data_dir.parent / f"broker-{broker_id}.log"
    )
