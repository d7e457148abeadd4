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


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
