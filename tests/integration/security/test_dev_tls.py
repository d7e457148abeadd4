"""`minikafka dev --tls`: the development cluster makes its CA and certificates, runs with
mutual TLS, and the command-line tools reach it with --ssl-cafile/--ssl-certfile/
--ssl-keyfile (a client without a certificate cannot connect)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from minikafka_cli.devcluster import DevCluster
from tests.integration.test_cli import mk

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevCluster]:
    cluster = DevCluster(
        brokers=1, controllers=1, data_dir=tmp_path, base_port=0, log_level="INFO", tls=True
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_dev_tls_cluster_with_the_cli(dev: DevCluster) -> None:
    files = dev.client_files()
    assert {path.name for path in dev.certs_dir.glob("*.crt")} >= {
        "ca.crt",
        "controller.crt",
        "broker-1.crt",
        "client.crt",
    }
    tls = [
        "--bootstrap-server",
        dev.bootstrap,
        "--ssl-cafile",
        files["ssl_cafile"],
        "--ssl-certfile",
        files["ssl_certfile"],
        "--ssl-keyfile",
        files["ssl_keyfile"],
    ]
    mk("topic", "create", "demo", *tls)
    mk("produce", "--topic", "demo", *tls, stdin="one\ntwo\n")
    out = mk("consume", "--topic", "demo", "--from-beginning", "--max-messages", "2", *tls)
    assert out.stdout.split() == ["one", "two"]
    # The ACL tool reaches the cluster too (no ACLs yet: an empty listing).
    assert mk("acls", "--list", *tls).stdout.strip() == ""
    # Without the client certificate the listener refuses the connection.
    with (
        grpc.secure_channel(
            dev.bootstrap, grpc.ssl_channel_credentials(Path(files["ssl_cafile"]).read_bytes())
        ) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
