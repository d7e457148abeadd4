"""ACLs survive a quorum fail-over: three controllers (mutual TLS among themselves, the
authorizer on) and one broker; the active controller is killed and the one elected next
has the same ACLs (they are records of the replicated metadata log)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from client import Admin
from client.errors import MiniKafkaClientError
from minikafka.acl import AclBinding, Operation, ResourceType
from minikafka.v1 import raft_pb2
from tests.integration.security.test_acls import Certs
from tests.integration.test_cli import mk
from tests.support.cluster import Cluster, wait_until

pytestmark = pytest.mark.timeout(240)

GRANT = AclBinding(
    principal="User:alice",
    resource_type=ResourceType.TOPIC,
    resource_name="audit",
    operation=Operation.WRITE,
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("quorum-certs"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Cluster]:
    running = Cluster(
        tmp_path_factory.mktemp("acl-quorum"),
        brokers=1,
        controllers=3,
        broker_args=certs.server_args(),
        controller_args=["--session-timeout-ms", "1500", *certs.server_args()],
        credentials=certs.credentials("admin"),
    )
    try:
        yield running.start()
    finally:
        running.stop()


def _leader(cluster: Cluster) -> int | None:
    try:
        reply = cluster.stub().DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=5)
    except Exception:
        return None
    return reply.leader_id if reply.leader_id in cluster.controllers else None


def _acls(admin: Admin) -> list[AclBinding] | None:
    try:
        return admin.describe_acls()
    except MiniKafkaClientError:
        return None  # no active controller yet


def test_acls_survive_quorum_failover(cluster: Cluster, certs: Certs) -> None:
    admin = Admin(cluster.bootstrap, **certs.client("admin"))
    try:
        admin.create_acls([GRANT])
        assert admin.describe_acls() == [GRANT]
        old = wait_until(lambda: _leader(cluster), timeout_s=30, what="an active controller")
        cluster.controllers[old].kill()
        wait_until(
            lambda: _leader(cluster) not in (None, old),
            timeout_s=30,
            what="a new active controller",
        )
        wait_until(lambda: _acls(admin) == [GRANT], timeout_s=30, what="the ACL after fail-over")
    finally:
        admin.close()


def test_metadata_quorum_command_over_tls(cluster: Cluster, certs: Certs) -> None:
    admin = certs.names["admin"]
    tls = [
        "--ssl-cafile",
        str(certs.ca.cert),
        "--ssl-certfile",
        str(admin.cert),
        "--ssl-keyfile",
        str(admin.key),
    ]
    controllers = ",".join(p.address for p in cluster.controllers.values() if p.alive())
    out = mk("metadata-quorum", "describe", "--status", "--bootstrap-controller", controllers, *tls)
    assert "CurrentVoters:" in out.stdout
    out = mk(
        "metadata-quorum", "describe", "--status", "--bootstrap-server", cluster.bootstrap, *tls
    )
    assert "LeaderId:" in out.stdout
