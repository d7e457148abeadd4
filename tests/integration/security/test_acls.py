"""ACLs with real processes: a controller and two brokers with mutual TLS, `--authorizer`
and super users `User:broker` (every server's certificate) and `User:admin`.

- a principal without WRITE cannot produce, and nothing is appended;
- a DENY overrides an ALLOW;
- ACLs live in the controller's metadata log: they survive a controller restart (and the
  brokers, fully synced by the restarted controller, still enforce them);
- a process holding a certificate of the cluster's CA but not a super user's principal
  cannot replica-fetch, send control requests to a broker or call the controller, and the
  high watermark and the ISR do not move.

ACL changes reach the brokers with the next UpdateMetadata (asynchronously, as in Kafka):
the tests wait until each broker's authorizer gives the expected answer (`_allowed`, a
probe that changes nothing) before relying on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from client import Admin, Consumer, NewTopic, Producer, TopicPartition
from client.errors import (
    ClusterAuthorizationFailedError,
    MiniKafkaClientError,
    TopicAuthorizationFailedError,
)
from minikafka.acl import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc
from minikafka_cli.dev_certs import CertPaths, make_ca, make_certificate
from tests.integration.test_cli import mk
from tests.support.cluster import Cluster, wait_until
from tests.support.processes import server_channel

pytestmark = pytest.mark.timeout(240)

RULES = "RULE:^CN=([a-z]+)$/$1/"
TOPIC = "orders"


class Certs:
    def __init__(self, root: Path) -> None:
        self.ca = make_ca(root)
        self.names = {
            name: make_certificate(self.ca, root, name, common_name=name)
            for name in ("broker", "admin", "alice", "bob", "carol", "mallory")
        }

    def server_args(self) -> list[str]:
        broker = self.names["broker"]
        return [
            "--tls-cert",
            str(broker.cert),
            "--tls-key",
            str(broker.key),
            "--tls-ca",
            str(self.ca.cert),
            "--ssl-principal-mapping-rules",
            RULES,
            "--authorizer",
            "--super-users",
            "User:broker;User:admin",
        ]

    def credentials(self, name: str) -> grpc.ChannelCredentials:
        paths: CertPaths = self.names[name]
        return grpc.ssl_channel_credentials(
            self.ca.cert.read_bytes(), paths.key.read_bytes(), paths.cert.read_bytes()
        )

    def client(self, name: str) -> dict[str, object]:
        paths = self.names[name]
        return {
            "security_protocol": "SSL",
            "ssl_cafile": str(self.ca.cert),
            "ssl_certfile": str(paths.cert),
            "ssl_keyfile": str(paths.key),
        }


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("acl-certs"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("acl-cluster"),
        brokers=2,
        broker_args=certs.server_args(),
        controller_args=["--session-timeout-ms", "1500", *certs.server_args()],
        credentials=certs.credentials("admin"),
    )
    try:
        running.start()
        admin = Admin(running.bootstrap, **certs.client("admin"))
        try:
            admin.create_topics([NewTopic(TOPIC, 1, 2)])
        finally:
            admin.close()
        running.wait_leader(TOPIC)
        running.wait_isr(TOPIC, 0, [1, 2])
        yield running
    finally:
        running.stop()


def _acl(principal: str, operation: Operation, **fields: object) -> AclBinding:
    base: dict[str, object] = {
        "principal": principal,
        "resource_type": ResourceType.TOPIC,
        "resource_name": TOPIC,
        "operation": operation,
    }
    return AclBinding(**(base | fields))  # type: ignore[arg-type]


def _admin(cluster: Cluster, certs: Certs) -> Admin:
    return Admin(cluster.bootstrap, **certs.client("admin"))


def _allowed(address: str, credentials: grpc.ChannelCredentials) -> bool:
    """Whether the broker's authorizer lets this caller WRITE the topic: a Produce with no
    records (authorized: the broker answers it, appending nothing; refused:
    PERMISSION_DENIED)."""
    request = broker_pb2.ProduceRequest(acks=1, timeout_ms=1000)
    request.partitions.add(topic=TOPIC, partition=0, records=b"")
    with server_channel(address, credentials) as channel:
        try:
            broker_pb2_grpc.BrokerServiceStub(channel).Produce(request, timeout=10)
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.PERMISSION_DENIED:
                raise
            return False
    return True


def _wait_enforced(cluster: Cluster, certs: Certs, name: str, allowed: bool) -> None:
    credentials = certs.credentials(name)
    for process in cluster.brokers.values():
        address = process.address

        def enforced(address: str = address) -> bool:
            return _allowed(address, credentials) is allowed

        wait_until(
            enforced,
            timeout_s=30,
            what=f"{name} {'allowed' if allowed else 'denied'} WRITE at {address}",
        )


def _end(cluster: Cluster, certs: Certs) -> tuple[int, int]:
    """(high watermark, log end offset) as the leader answers."""
    admin = _admin(cluster, certs)
    try:
        info = admin.list_offsets([TopicPartition(TOPIC, 0)])[TopicPartition(TOPIC, 0)]
    finally:
        admin.close()
    return info.high_watermark, info.log_end_offset


def _produce(cluster: Cluster, certs: Certs, name: str, count: int) -> list[int]:
    producer = Producer(
        bootstrap_servers=cluster.bootstrap,
        acks="all",
        delivery_timeout_ms=10_000,
        request_timeout_ms=5_000,
        retries=0,
        **certs.client(name),
    )
    try:
        futures = [producer.send(TOPIC, f"{name}-{i}".encode()) for i in range(count)]
        return [future.get(timeout=30).offset for future in futures]
    finally:
        producer.close()


def test_principal_without_write_cannot_produce(cluster: Cluster, certs: Certs) -> None:
    admin = _admin(cluster, certs)
    try:
        admin.create_acls([_acl("User:alice", Operation.WRITE), _acl("User:bob", Operation.READ)])
    finally:
        admin.close()
    _wait_enforced(cluster, certs, "alice", True)
    _produce(cluster, certs, "alice", 3)
    before = _end(cluster, certs)
    with pytest.raises(TopicAuthorizationFailedError):
        _produce(cluster, certs, "bob", 1)
    assert _end(cluster, certs) == before
    # bob may READ: he sees alice's records, and only hers.
    consumer = Consumer(
        TOPIC,
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5_000,
        **certs.client("bob"),
    )
    try:
        values = [record.value for record in consumer]
    finally:
        consumer.close()
    assert values
    assert all(value.startswith(b"alice-") for value in values)
    assert len(values) == before[0]
    # alice may WRITE (and so DESCRIBE) but not READ: her consumer's poll raises.
    reader = Consumer(
        TOPIC,
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        **certs.client("alice"),
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            reader.poll(timeout_ms=10_000)
    finally:
        reader.close()


def test_deny_overrides_allow(cluster: Cluster, certs: Certs) -> None:
    admin = _admin(cluster, certs)
    try:
        admin.create_acls([_acl("User:carol", Operation.ALL)])
        _wait_enforced(cluster, certs, "carol", True)
        assert _produce(cluster, certs, "carol", 1)
        admin.create_acls(
            [
                _acl(
                    "User:carol",
                    Operation.WRITE,
                    resource_name="ord",
                    pattern_type=PatternType.PREFIXED,
                    permission=Permission.DENY,
                )
            ]
        )
    finally:
        admin.close()
    _wait_enforced(cluster, certs, "carol", False)
    before = _end(cluster, certs)
    with pytest.raises(TopicAuthorizationFailedError):
        _produce(cluster, certs, "carol", 1)
    assert _end(cluster, certs) == before


def test_non_broker_certificate_cannot_replicate_or_control(cluster: Cluster, certs: Certs) -> None:
    leader, epoch, isr = cluster.leader_of(TOPIC)
    follower = next(b for b in cluster.brokers if b != leader)
    before = _end(cluster, certs)
    mallory = certs.credentials("mallory")
    state = cluster.describe()
    broker_epoch = next(b.broker_epoch for b in state.brokers if b.endpoint.broker_id == follower)
    fetch = broker_pb2.ReplicaFetchRequest(
        replica_id=follower, broker_epoch=broker_epoch, max_wait_ms=0, max_bytes=1 << 20
    )
    # A forged follower fetch far beyond the log end would move the HW if it were served.
    fetch.partitions.add(topic=TOPIC, partition=0, fetch_offset=before[1] + 1000)
    with server_channel(cluster.brokers[leader].address, mallory) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            broker_pb2_grpc.ReplicaServiceStub(channel).Fetch(fetch, timeout=10)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "CLUSTER_AUTHORIZATION_FAILED" in (refused.value.details() or "")
        with pytest.raises(grpc.RpcError) as control:
            broker_pb2_grpc.BrokerControlServiceStub(channel).LeaderAndIsr(
                broker_pb2.LeaderAndIsrRequest(), timeout=10
            )
        assert control.value.code() is grpc.StatusCode.PERMISSION_DENIED
    with server_channel(cluster.controller.address, mallory) as channel:
        with pytest.raises(grpc.RpcError) as shrink:
            controller_pb2_grpc.ControllerServiceStub(channel).AlterPartition(
                controller_pb2.AlterPartitionRequest(broker_id=leader), timeout=10
            )
        assert shrink.value.code() is grpc.StatusCode.PERMISSION_DENIED
    # A client certificate may not call the controller's admin API directly either.
    admin = Admin(cluster.bootstrap, **certs.client("mallory"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_cluster()
    finally:
        admin.close()
    assert cluster.leader_of(TOPIC) == (leader, epoch, isr)
    assert _end(cluster, certs) == before


def test_acls_survive_controller_restart(cluster: Cluster, certs: Certs) -> None:
    admin = _admin(cluster, certs)
    try:
        admin.create_acls([_acl("User:*", Operation.DESCRIBE)])
        expected = admin.describe_acls()
    finally:
        admin.close()
    assert _acl("User:*", Operation.DESCRIBE) in expected
    cluster.controller.terminate()
    cluster.controller.start()
    cluster.wait_active(len(cluster.brokers))
    admin = _admin(cluster, certs)
    try:
        wait_until(
            lambda: _describe_or_none(admin) == expected,
            timeout_s=30,
            what="the restarted controller's ACLs",
        )
        assert admin.describe_acls(AclFilter(principal="User:*")) == [
            _acl("User:*", Operation.DESCRIBE)
        ]
    finally:
        admin.close()
    # The restarted controller syncs every broker in full, ACLs included: alice still
    # writes, bob still does not.
    _wait_enforced(cluster, certs, "alice", True)
    assert not _allowed(cluster.bootstrap, certs.credentials("bob"))


def _describe_or_none(admin: Admin) -> list[AclBinding] | None:
    try:
        return admin.describe_acls()
    except MiniKafkaClientError:
        return None  # NOT_CONTROLLER while the restarted controller catches up


def test_acls_command(cluster: Cluster, certs: Certs) -> None:
    admin = certs.names["admin"]
    b = [
        "--bootstrap-server",
        cluster.bootstrap,
        "--ssl-cafile",
        str(certs.ca.cert),
        "--ssl-certfile",
        str(admin.cert),
        "--ssl-keyfile",
        str(admin.key),
    ]
    added = mk(
        "acls",
        "--add",
        "--allow-principal",
        "User:dave",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "ledger",
        *b,
    ).stdout
    assert "ResourcePattern(resourceType=TOPIC, name=ledger, patternType=LITERAL)" in added
    listed = mk("acls", "--list", "--topic", "ledger", *b).stdout
    assert "(principal=User:dave, host=*, operation=READ, permissionType=ALLOW)" in listed
    assert "(principal=User:dave, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed
    removed = mk(
        "acls",
        "--remove",
        "--allow-principal",
        "User:dave",
        "--operation",
        "Read",
        "--topic",
        "ledger",
        *b,
    ).stdout
    assert "operation=READ" in removed
    assert "operation=DESCRIBE" not in removed
    listed = mk("acls", "--list", "--principal", "User:dave", *b).stdout
    assert "operation=READ" not in listed
    assert "operation=DESCRIBE" in listed
    # A principal that may not ALTER the cluster cannot add ACLs.
    bob = certs.names["bob"]
    refused = mk(
        "acls",
        "--add",
        "--allow-principal",
        "User:bob",
        "--operation",
        "All",
        "--topic",
        TOPIC,
        "--bootstrap-server",
        cluster.bootstrap,
        "--ssl-cafile",
        str(certs.ca.cert),
        "--ssl-certfile",
        str(bob.cert),
        "--ssl-keyfile",
        str(bob.key),
        check=False,
    )
    assert refused.returncode != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    # Bad input is a usage error naming the problem.
    bad = mk(
        "acls",
        "--add",
        "--allow-principal",
        "alice",
        "--operation",
        "Read",
        "--topic",
        "x",
        *b,
        check=False,
    )
    assert bad.returncode != 0
    assert "User:NAME" in bad.stderr
