"""Nemesis self-tests (R38): each fault injector does what it claims.

The proxy is checked against a plain echo server (forward, blackhole, heal, delay,
reset, attribution of connections to processes); the process and storage nemeses
against a real cluster.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.chaos.history import History
from tests.support.chaos_cluster import ChaosCluster, broker_name
from tests.support.chaos_proxy import CLIENT, ProxyNet
from tests.support.cluster import wait_until

pytestmark = pytest.mark.chaos


@pytest.fixture
def echo() -> Iterator[str]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    server.close()


@pytest.fixture
def net() -> Iterator[ProxyNet]:
    proxies = ProxyNet()
    yield proxies
    proxies.close()


def dial(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def round_trip(sock: socket.socket, payload: bytes, timeout_s: float = 5.0) -> bytes:
    sock.settimeout(timeout_s)
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.timeout(60)
def test_proxy_forwards_blackholes_and_heals(echo: str, net: ProxyNet) -> None:
    address = net.add("echo", echo)
    with dial(address) as sock:
        assert round_trip(sock, b"hello") == b"hello"
        net.block(CLIENT, "echo")
        sock.settimeout(0.5)
        sock.sendall(b"lost?")
        with pytest.raises(TimeoutError):  # nothing passes for as long as the block lasts
            sock.recv(4096)
        net.heal()
        sock.settimeout(5)
        assert sock.recv(4096) == b"lost?"  # held bytes flow after the heal, like TCP
    assert net.accepted == [(CLIENT, "echo")]


@pytest.mark.timeout(60)
def test_proxy_blocks_only_the_named_link(echo: str, net: ProxyNet) -> None:
    address = net.add("echo", echo)
    net.block("someone-else", "echo")
    with dial(address) as sock:
        assert round_trip(sock, b"still here") == b"still here"


@pytest.mark.timeout(60)
def test_proxy_delay_adds_latency(echo: str, net: ProxyNet) -> None:
    address = net.add("echo", echo)
    with dial(address) as sock:
        net.delay("echo", 150)
        started = time.monotonic()
        assert round_trip(sock, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.3  # both directions delayed
        net.heal()
        started = time.monotonic()
        assert round_trip(sock, b"fast") == b"fast"
        assert time.monotonic() - started < 0.3


def exchange_twice(sock: socket.socket) -> None:
    for payload in (b"y", b"z"):
        sock.sendall(payload)
        sock.recv(4096)


@pytest.mark.timeout(60)
def test_proxy_reset_sends_rst(echo: str, net: ProxyNet) -> None:
    address = net.add("echo", echo)
    with dial(address) as sock:
        assert round_trip(sock, b"x") == b"x"
        assert net.reset("echo") == 1
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            exchange_twice(sock)


@pytest.mark.timeout(60)
def test_proxy_attributes_connections_to_processes(echo: str, net: ProxyNet) -> None:
    address = net.add("echo", echo)
    host, port = address.rsplit(":", 1)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])));"
            "s.sendall(b'hi'); s.recv(2); sys.stdin.read()",
            host,
            port,
        ],
        stdin=subprocess.PIPE,
    )
    try:
        net.set_pids(lambda: {"child": child.pid})
        wait_until(lambda: net.accepted, timeout_s=10, what="the child's connection")
        assert net.accepted == [("child", "echo")]
    finally:
        child.kill()
        child.wait(timeout=10)


# ---- against a real cluster -------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ChaosCluster]:
    running = ChaosCluster(tmp_path, history=History())
    try:
        running.start()
        yield running
    finally:
        running.stop()


def healthy(address: str, timeout_s: float = 1.0) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


@pytest.mark.timeout(120)
def test_cluster_traffic_crosses_the_proxies_and_isolation_cuts_it(cluster: ChaosCluster) -> None:
    # Brokers reached the controller through its proxy, attributed to themselves.
    origins = {origin for origin, dest in cluster.net.accepted if dest == "controller"}
    assert {broker_name(b) for b in cluster.brokers} <= origins
    assert healthy(cluster.proxy[2])
    cluster.net.isolate(broker_name(2))
    assert not healthy(cluster.proxy[2])  # the client -> b2 link passes nothing
    assert healthy(cluster.brokers[2].address)  # the process itself is fine
    # Cut from the controller, b2 misses its heartbeats and gets fenced.
    cluster.wait_fenced(2)
    cluster.net.heal()
    assert healthy(cluster.proxy[2], timeout_s=5)
    cluster.wait_active(3)


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.timeout(120)
def test_process_nemeses(cluster: ChaosCluster) -> None:
    cluster.pause(3)
    pid = cluster.brokers[3].pid
    wait_until(lambda: process_state(pid) == "T", timeout_s=5, what="SIGSTOP to take effect")
    assert not healthy(cluster.brokers[3].address)
    cluster.resume(3)
    assert healthy(cluster.brokers[3].address, timeout_s=5)
    assert cluster.terminate(3) == 0  # graceful
    cluster.start_broker(3)
    cluster.kill(3)
    assert cluster.brokers[3].proc is not None
    assert cluster.brokers[3].proc.returncode == -9
    cluster.wait_fenced(3)
    cluster.start_broker(3)
    cluster.wait_active(3)
    cluster.kill_controller()
    assert not cluster.controller.alive()
    cluster.start_controller()
    cluster.wait_active(3)
    actions = [op["value"] for op in cluster.history.ops] if cluster.history else []
    assert actions[:3] == ["pause", "resume", "terminate"]


@pytest.mark.timeout(120)
def test_corruption_damages_the_stopped_replicas_tail(cluster: ChaosCluster) -> None:
    from minikafka.record_batch import build_batch
    from tests.support.wire import produce

    cluster.create_topic("c", rf=3, min_insync_replicas="2")
    cluster.wait_full_isr("c", 1)
    leader = cluster.wait_leader("c")
    for i in range(5):
        batch = build_batch([(1000, None, b"v%d-%d" % (i, j), None) for j in range(10)])
        assert produce(cluster.stub(leader), "c", batch).error_code == 0
    victim = next(b for b in cluster.brokers if b != leader)
    wait_until(lambda: len(cluster.replica_log(victim, "c", 0)) == 5, what="replica has 5")
    cluster.kill(victim)
    info = cluster.corrupt_tail(victim, "c", 0, rng=random.Random(1))
    assert info["damaged_batch_base_offset"] == 40
    # The damaged batch and the torn copy no longer validate: 4 good batches remain.
    assert [b[0] for b in cluster.replica_log(victim, "c", 0)] == [0, 10, 20, 30]
    with pytest.raises(AssertionError, match="stopped"):
        cluster.corrupt_tail(leader, "c", 0, rng=random.Random(1))


@pytest.mark.timeout(120)
def test_preferred_election_moves_leadership_back(cluster: ChaosCluster) -> None:
    cluster.create_topic("e", rf=3, min_insync_replicas="2")
    cluster.wait_full_isr("e", 1)
    preferred, epoch, _ = cluster.leader_of("e")
    cluster.terminate(preferred)
    moved = cluster.wait_leader("e", not_in=(preferred,))
    cluster.start_broker(preferred)
    cluster.wait_full_isr("e", 1)
    assert cluster.elect("e", 0, "preferred") == 0
    wait_until(lambda: cluster.leader_of("e")[0] == preferred, what="preferred leader back")
    assert moved != preferred
    assert cluster.leader_of("e")[1] >= epoch + 2


def test_a_broker_that_loses_its_port_race_stays_reachable_through_its_proxy(
    tmp_path: Path,
) -> None:
    """The port a broker was given is taken before it binds (another process won the
    race): it moves to a fresh port, and its proxy (whose address it advertises) must
    follow, or the controller can never reach it and it stays fenced."""
    cluster = ChaosCluster(tmp_path / "cluster", brokers=1)
    first = cluster.brokers[1].address
    host, port = first.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind((host, int(port)))
        squatter.listen()
        try:
            cluster.start()  # waits until the broker is active (unfenced)
            assert cluster.brokers[1].address != first
            channel = grpc.insecure_channel(cluster.proxy[1])
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=10
                )
            finally:
                channel.close()
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            cluster.stop()
