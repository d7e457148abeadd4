"""Nemesis self-tests (R38): each fault injector does what it claims.

The proxy is checked against a plain echo server (forward, blackhole, heal, delay,
reset, attribution of connections to processes); the process and storage nemeses
against a real cluster.
"""

from __future__ import annotations

import contextlib
import random
import re
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


class EchoServer:
    """An echo server that records what it received and can die (its connections closed,
    its port closed) and come back on the same port."""

    def __init__(self) -> None:
        self.received = bytearray()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.port = 0
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self.port = server.getsockname()[1]
        server.settimeout(0.2)
        self._server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, args=(server, self._stop))
        self._thread.start()

    def _accept(self, server: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(4096):
                with self._lock:
                    self.received += data
                conn.sendall(data)

    def die(self) -> None:
        """Close every connection and stop listening (the process is gone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._server is not None:
            self._server.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:  # as the kernel does for a dead process: FIN (shutdown wakes
            with contextlib.suppress(OSError):  # the serving thread's recv)
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def got(self) -> bytes:
        with self._lock:
            return bytes(self.received)


@pytest.fixture
def echo_server() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.die()


def recv_exactly(sock: socket.socket, size: int, timeout_s: float = 5.0) -> bytes:
    sock.settimeout(timeout_s)
    got = b""
    while len(got) < size:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.timeout(60)
def test_one_way_block_holds_one_direction_and_releases_in_order(
    echo_server: EchoServer, net: ProxyNet
) -> None:
    address = net.add("echo", echo_server.address)
    with dial(address) as sock:
        assert round_trip(sock, b"warm") == b"warm"
        # Replies held: the requests still reach the server.
        net.block_one_way("echo", CLIENT)
        for part in (b"a", b"bb", b"ccc"):
            sock.sendall(part)
        wait_until(lambda: echo_server.got() == b"warmabbccc", timeout_s=5, what="requests")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(4096)
        net.unblock_one_way("echo", CLIENT)
        assert recv_exactly(sock, 6) == b"abbccc"  # delivered late, in order
        # Requests held: nothing reaches the server, so nothing comes back.
        net.block_one_way(CLIENT, "echo")
        sock.sendall(b"later")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(4096)
        assert echo_server.got() == b"warmabbccc"
        net.unblock_one_way(CLIENT, "echo")
        assert recv_exactly(sock, 5) == b"later"


@pytest.mark.timeout(60)
def test_one_way_delay_slows_only_that_direction(echo_server: EchoServer, net: ProxyNet) -> None:
    address = net.add("echo", echo_server.address)
    with dial(address) as sock:
        assert round_trip(sock, b"warm") == b"warm"
        net.delay_one_way("echo", CLIENT, 400)
        started = time.monotonic()
        sock.sendall(b"x")
        wait_until(lambda: echo_server.got().endswith(b"x"), timeout_s=5, what="the request")
        arrived_s = time.monotonic() - started
        assert recv_exactly(sock, 1) == b"x"
        returned_s = time.monotonic() - started
        assert arrived_s < 0.3  # the request was not delayed ...
        assert returned_s >= 0.4  # ... the reply was
        # A delay line, not a queue of sleeps: back-to-back chunks keep their spacing.
        started = time.monotonic()
        for part in (b"1", b"2", b"3", b"4"):
            sock.sendall(part)
            time.sleep(0.05)  # the spacing of the sends under test
        assert recv_exactly(sock, 4) == b"1234"
        assert 0.4 <= time.monotonic() - started < 1.2
        net.heal()
        started = time.monotonic()
        assert round_trip(sock, b"fast") == b"fast"
        assert time.monotonic() - started < 0.3


@pytest.mark.timeout(60)
def test_a_server_death_resets_its_peers_unless_swallowed(
    echo_server: EchoServer, net: ProxyNet
) -> None:
    address = net.add("echo", echo_server.address)
    with dial(address) as plain:
        assert round_trip(plain, b"hi") == b"hi"
        echo_server.die()
        plain.settimeout(5)
        with pytest.raises(ConnectionResetError):
            exchange_twice(plain)
    echo_server.start()
    net.swallow_resets("echo")
    with dial(address) as sock:
        assert round_trip(sock, b"hi") == b"hi"
        echo_server.die()
        wait_until(lambda: net.swallowed(), timeout_s=5, what="the connection swallowed")
        assert net.swallowed() == [(CLIENT, "echo", "echo")]
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):  # no FIN, no RST: open and silent
            sock.recv(4096)
        sock.sendall(b"anyone?")  # dropped while the server is away
        with pytest.raises(TimeoutError):
            sock.recv(4096)
        echo_server.start()
        with dial(address) as fresh:  # new connections reach the new server ...
            assert round_trip(fresh, b"new") == b"new"
        sock.sendall(b"still there?")  # ... the old one stays silent
        with pytest.raises(TimeoutError):
            sock.recv(4096)
        assert net.reset("echo") == 1  # the restarted host answers with an RST
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            exchange_twice(sock)
        assert echo_server.got() == b"hihinew"


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


@pytest.mark.timeout(120)
def test_swallowed_resets_keep_a_dead_brokers_session_until_it_times_out(
    tmp_path: Path,
) -> None:
    """Killed behind a proxy that swallows the reset, a broker's heartbeat stream does not
    break: the controller keeps its session (and refuses a new incarnation) until the
    session timeout, as after a power loss where no RST reaches the controller. Without
    the swallowing the broken stream fences it at once."""
    session_timeout_s = 6.0
    cluster = ChaosCluster(
        tmp_path / "cluster",
        history=History(),
        controller_args=["--session-timeout-ms", str(int(session_timeout_s * 1000))],
    )
    try:
        cluster.start()
        cluster.kill(2)  # not swallowed: the stream breaks, fenced long before the timeout
        started = time.monotonic()
        cluster.wait_fenced(2, timeout_s=session_timeout_s / 2)
        assert time.monotonic() - started < session_timeout_s / 2
        cluster.start_broker(2)
        cluster.wait_active(3)
        cluster.swallow_resets(broker_name(3))
        cluster.kill(3)
        killed = time.monotonic()
        cluster.start_broker(3)  # a new incarnation while the old session lives
        # Its host answers the controller's requests to the old incarnation with an RST
        # (the controller's channel reconnects); the heartbeat stream stays silent.
        cluster.reset_connections_to(broker_name(3))
        cluster.wait_fenced(3, timeout_s=2 * session_timeout_s)
        fenced_after_s = time.monotonic() - killed
        assert fenced_after_s >= session_timeout_s * 0.8, fenced_after_s
        log = cluster.controller.log_text()
        assert "broker 3 heartbeat stream broke" not in log
        # The old session ends at the timeout either way: the expiry timer fences it, or
        # the new incarnation's registration, accepted once the session has run out,
        # replaces it before the timer's next pass (then no "missed heartbeats" line; seen
        # in CI).
        epochs = set(re.findall(r"broker 3 at \S+ epoch (\d+):", log))
        assert "broker 3 missed heartbeats" in log or len(epochs) >= 2, log
        assert "DUPLICATE_BROKER_REGISTRATION" in cluster.brokers[3].log_text()
        cluster.wait_active(3)  # registered once the old session expired
        assert (broker_name(3), "controller", broker_name(3)) in cluster.net.swallowed()
        cluster.heal_network()
        wait_until(lambda: not cluster.net.swallowed(), timeout_s=5, what="swallowed reset")
    finally:
        cluster.stop()
