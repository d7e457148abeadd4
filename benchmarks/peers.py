"""Peers driven from Python on the same box: Redis Streams and NATS JetStream R3.

The servers come from Debian (`redis-server`, `nats-server`); when missing they are
installed with apt-get (as root). They bind 127.0.0.1 on free ports, keep their data in
the run's directory, and are stopped by pid when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks import stats
from benchmarks.harness import run_async, until, warm_and_measure

PACKAGES = {"redis-server": "redis-server", "nats-server": "nats-server"}
#: In-flight acked publishes for NATS (reference/performance.md §3.1, P2).
NATS_IN_FLIGHT = 256
#: XADDs per pipeline for Redis (P1).
REDIS_PIPELINE = 1000
STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_installed(binaries: list[str]) -> list[str]:
    """apt-get install the missing servers; returns what could not be installed."""
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        packages = [PACKAGES[b] for b in missing]
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run(
                ["apt-get", "install", "-y", "--no-install-recommends", *packages],
                env=env,
                check=False,
                capture_output=True,
                timeout=300,
            )
            if any(shutil.which(b) is None for b in missing):
                subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
                subprocess.run(
                    ["apt-get", "install", "-y", "--no-install-recommends", *packages],
                    env=env,
                    check=False,
                    capture_output=True,
                    timeout=300,
                )
    return [b for b in binaries if shutil.which(b) is None]


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for port {port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)  # another process starting: nothing to wait on but the port
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


class PeerServers:
    """Child server processes of one peer (stopped by pid)."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: list[int] = []

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items() if proc.poll() is None}

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def start_redis(root: Path) -> PeerServers:
    servers = PeerServers("redis", root)
    port = free_port()
    proc = servers.spawn(
        "redis-server",
        [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(root),
        ],
    )
    servers.ports = [port]
    wait_port(port, proc, STARTUP_TIMEOUT_S)
    return servers


def start_nats_r3(root: Path) -> PeerServers:
    """Three nats-server processes in one cluster, JetStream with file storage."""
    servers = PeerServers("nats", root)
    client_ports = [free_port() for _ in range(3)]
    cluster_ports = [free_port() for _ in range(3)]
    routes = ", ".join(f"nats://127.0.0.1:{p}" for p in cluster_ports)
    for index in range(3):
        store = root / f"n{index + 1}"
        store.mkdir(parents=True, exist_ok=True)
        conf = root / f"n{index + 1}.conf"
        conf.write_text(
            f'server_name: "n{index + 1}"\n'
            f"listen: 127.0.0.1:{client_ports[index]}\n"
            f'jetstream {{ store_dir: "{store}" }}\n'
            f'cluster {{ name: "bench", listen: 127.0.0.1:{cluster_ports[index]}, '
            f"routes: [{routes}] }}\n"
        )
        servers.spawn(f"nats-{index + 1}", ["nats-server", "-c", str(conf)])
    servers.ports = client_ports
    for index, port in enumerate(client_ports):
        wait_port(port, servers.procs[f"nats-{index + 1}"], STARTUP_TIMEOUT_S)
    return servers


def redis_xadd(
    port: int, pids: dict[str, int], *, record_bytes: int, seconds: float, runs: int
) -> list[stats.Run]:
    """XADD from redis-py (hiredis, asyncio) in pipelines of 1000, closed loop."""
    import redis.asyncio as aredis

    async def main() -> list[stats.Run]:
        client = aredis.Redis(host="127.0.0.1", port=port)
        value = os.urandom(record_bytes)
        try:
            await client.delete("bench")

            async def body() -> tuple[int, int]:
                deadline = time.perf_counter() + seconds
                count = 0
                while await until(deadline):
                    pipe = client.pipeline(transaction=False)
                    for _ in range(REDIS_PIPELINE):
                        pipe.xadd("bench", {"v": value})
                    await pipe.execute()
                    count += REDIS_PIPELINE
                return count, count * record_bytes

            return await warm_and_measure(pids, runs, body)
        finally:
            await client.aclose()

    return run_async(main())


def redis_xread(
    port: int, pids: dict[str, int], *, record_bytes: int, seconds: float, runs: int
) -> list[stats.Run]:
    """XREAD COUNT 10000 from the start of the stream written by `redis_xadd`."""
    import redis.asyncio as aredis

    async def main() -> list[stats.Run]:
        client = aredis.Redis(host="127.0.0.1", port=port)
        try:
            total = int(await client.xlen("bench"))

            async def body() -> tuple[int, int]:
                deadline = time.perf_counter() + seconds
                last = "0"
                seen = payload = 0
                while seen < total and await until(deadline):
                    reply: Any = await client.xread({"bench": last}, count=10_000)
                    if not reply:
                        break
                    entries = reply[0][1]
                    for entry_id, fields in entries:
                        payload += len(fields[b"v"])
                        last = entry_id
                    seen += len(entries)
                return seen, payload

            return await warm_and_measure(pids, runs, body)
        finally:
            await client.aclose()

    return run_async(main())


def nats_publish(
    ports: list[int], pids: dict[str, int], *, record_bytes: int, seconds: float, runs: int
) -> list[stats.Run]:
    """JetStream acked publishes (R3 file stream) from nats-py, 256 in flight."""
    import nats

    async def main() -> list[stats.Run]:
        nc = await nats.connect([f"nats://127.0.0.1:{p}" for p in ports])
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while True:  # the JetStream meta leader needs a moment after start
                try:
                    await js.add_stream(name="BENCH", subjects=["bench.>"], num_replicas=3)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.25)
            value = os.urandom(record_bytes)
            await js.publish("bench.r3", value, timeout=30)

            async def body() -> tuple[int, int]:
                stop = time.perf_counter() + seconds
                count = 0

                async def lane() -> None:
                    nonlocal count
                    while await until(stop):
                        await js.publish("bench.r3", value, timeout=30)
                        count += 1

                await asyncio.gather(*(lane() for _ in range(NATS_IN_FLIGHT)))
                return count, count * record_bytes

            return await warm_and_measure(pids, runs, body)
        finally:
            await nc.close()

    return run_async(main())


def redis_reset(port: int) -> None:
    """Drop the benchmark stream (between record sizes)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        client.delete("bench")
    finally:
        client.close()
