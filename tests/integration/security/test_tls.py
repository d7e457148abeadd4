"""TLS on every listener and mutual TLS on the internal one, with real processes.

A controller and two brokers run with `--tls-cert/--tls-key/--tls-ca` and mapping rules
that name only `broker` and `alice`. Replication (broker<->broker), registration and
control (broker<->controller) and clients all go over TLS; a peer without a certificate,
with a certificate of another CA, or in plaintext cannot connect; a certificate whose
subject the rules do not map is refused as UNAUTHENTICATED.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from client import Admin, Consumer, NewTopic, Producer
from client.errors import NoBrokersAvailable
from minikafka.v1 import broker_pb2, broker_pb2_grpc
from minikafka_cli.dev_certs import CertPaths, make_ca, make_certificate
from tests.integration.test_cli import mk
from tests.support.cluster import Cluster
from tests.support.processes import free_port, server_channel, standalone_broker_process

pytestmark = pytest.mark.timeout(180)

#: Only `broker` and `alice` have principals; any other subject is refused.
RULES = "RULE:^CN=(broker|alice)$/$1/"


class Certs:
    def __init__(self, root: Path) -> None:
        self.ca = make_ca(root)
        self.broker = make_certificate(self.ca, root, "broker", common_name="broker")
        self.alice = make_certificate(self.ca, root, "alice", common_name="alice")
        self.mallory = make_certificate(self.ca, root, "mallory", common_name="mallory")
        rogue_ca = make_ca(root / "rogue", common_name="rogue-ca")
        self.rogue = make_certificate(rogue_ca, root / "rogue", "alice", common_name="alice")

    def server_args(self) -> list[str]:
        return [
            "--tls-cert",
            str(self.broker.cert),
            "--tls-key",
            str(self.broker.key),
            "--tls-ca",
            str(self.ca.cert),
            "--ssl-principal-mapping-rules",
            RULES,
        ]

    def credentials(self, identity: CertPaths | None) -> grpc.ChannelCredentials:
        if identity is None:
            return grpc.ssl_channel_credentials(self.ca.cert.read_bytes())
        return grpc.ssl_channel_credentials(
            self.ca.cert.read_bytes(), identity.key.read_bytes(), identity.cert.read_bytes()
        )

    def client_config(self, identity: CertPaths | None) -> dict[str, object]:
        config: dict[str, object] = {
            "security_protocol": "SSL",
            "ssl_cafile": str(self.ca.cert),
        }
        if identity is not None:
            config.update(ssl_certfile=str(identity.cert), ssl_keyfile=str(identity.key))
        return config


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Cluster]:
    cluster = Cluster(
        tmp_path_factory.mktemp("tls-cluster"),
        brokers=2,
        broker_args=certs.server_args(),
        controller_args=["--session-timeout-ms", "1500", *certs.server_args()],
        credentials=certs.credentials(certs.alice),
    )
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _metadata(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    """The status of one Metadata call (OK when answered)."""
    with server_channel(address, credentials) as channel:
        try:
            broker_pb2_grpc.BrokerServiceStub(channel).Metadata(
                broker_pb2.MetadataRequest(), timeout=5
            )
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_replicated_produce_and_consume_over_mutual_tls(tls_cluster: Cluster, certs: Certs) -> None:
    config = certs.client_config(certs.alice)
    admin = Admin(tls_cluster.bootstrap, **config)
    try:
        admin.create_topics([NewTopic("secured", 1, 2)])
    finally:
        admin.close()
    tls_cluster.wait_leader("secured")
    tls_cluster.wait_isr("secured", 0, [1, 2])
    producer = Producer(bootstrap_servers=tls_cluster.bootstrap, acks="all", **config)
    try:
        futures = [producer.send("secured", f"v{i}".encode()) for i in range(20)]
        offsets = [future.get(timeout=30).offset for future in futures]
    finally:
        producer.close()
    assert offsets == list(range(20))
    # acks=all with both replicas in the ISR: the follower fetched over mutual TLS.
    tls_cluster.wait_isr("secured", 0, [1, 2])
    consumer = Consumer(
        "secured",
        bootstrap_servers=tls_cluster.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5_000,
        **config,
    )
    try:
        values = [record.value for _, record in zip(range(20), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(20)]


def test_client_without_certificate_is_refused(tls_cluster: Cluster, certs: Certs) -> None:
    for process in [*tls_cluster.brokers.values(), tls_cluster.controller]:
        assert _metadata(process.address, certs.credentials(None)) is grpc.StatusCode.UNAVAILABLE
    admin = Admin(tls_cluster.bootstrap, request_timeout_ms=3_000, **certs.client_config(None))
    try:
        with pytest.raises(NoBrokersAvailable):
            admin.list_topics()
    finally:
        admin.close()


def test_plaintext_client_is_refused(tls_cluster: Cluster) -> None:
    assert _metadata(tls_cluster.bootstrap, None) is grpc.StatusCode.UNAVAILABLE
    with server_channel(tls_cluster.controller.address) as channel, pytest.raises(grpc.RpcError):
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)


def test_certificate_of_another_ca_is_refused(tls_cluster: Cluster, certs: Certs) -> None:
    rogue = grpc.ssl_channel_credentials(
        certs.ca.cert.read_bytes(), certs.rogue.key.read_bytes(), certs.rogue.cert.read_bytes()
    )
    assert _metadata(tls_cluster.bootstrap, rogue) is grpc.StatusCode.UNAVAILABLE


def test_unmapped_subject_is_unauthenticated(tls_cluster: Cluster, certs: Certs) -> None:
    mallory = certs.credentials(certs.mallory)
    assert _metadata(tls_cluster.bootstrap, mallory) is grpc.StatusCode.UNAUTHENTICATED
    assert _metadata(tls_cluster.bootstrap, certs.credentials(certs.alice)) is grpc.StatusCode.OK


def test_external_listener_is_tls_without_client_certificate(tmp_path: Path, certs: Certs) -> None:
    """The external listener serves TLS to clients that have only the CA; the internal
    listener of the same broker still requires a certificate."""
    external = f"127.0.0.1:{free_port()}"
    process = standalone_broker_process(
        tmp_path / "broker-1", extra=[*certs.server_args(), "--external-listen", external]
    )
    process.credentials = certs.credentials(certs.alice)
    process.start()
    try:
        ca_only = certs.client_config(None)
        admin = Admin(external, **ca_only)
        try:
            admin.create_topics([NewTopic("outside", 1, 1)])
        finally:
            admin.close()
        producer = Producer(bootstrap_servers=external, **ca_only)
        try:
            assert producer.send("outside", b"x").get(timeout=30).offset == 0
        finally:
            producer.close()
        assert _metadata(process.address, certs.credentials(None)) is grpc.StatusCode.UNAVAILABLE
    finally:
        process.terminate()


def test_spark_reader_passes_tls_through(tls_cluster: Cluster, certs: Certs) -> None:
    """The Spark source's reader (driver and executors) with kafka.security.protocol=SSL
    and kafka.ssl.* files reads committed records over mutual TLS."""
    from client.spark.options import TlsSettings
    from client.spark.wire import WireReader

    config = certs.client_config(certs.alice)
    admin = Admin(tls_cluster.bootstrap, **config)
    try:
        admin.create_topics([NewTopic("spark-tls", 1, 2)])
    finally:
        admin.close()
    tls_cluster.wait_leader("spark-tls")
    producer = Producer(bootstrap_servers=tls_cluster.bootstrap, acks="all", **config)
    try:
        for value in (b"a", b"b", b"c"):
            producer.send("spark-tls", value).get(timeout=30)
    finally:
        producer.close()
    settings = TlsSettings(
        ssl_cafile=str(certs.ca.cert),
        ssl_certfile=str(certs.alice.cert),
        ssl_keyfile=str(certs.alice.key),
    )
    with WireReader([tls_cluster.bootstrap], timeout_ms=30_000, tls=settings) as wire:
        assert "spark-tls" in wire.refresh().topics
        values = [
            value
            for columns in wire.fetch_range("spark-tls", 0, 0, 3, fail_on_data_loss=True)
            for value in columns.values
        ]
    assert values == [b"a", b"b", b"c"]


CLUSTER_MODE = ["--controller", "127.0.0.1:1"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(
            [*CLUSTER_MODE, "--tls-cert", "x.crt"], "missing --tls-key, --tls-ca", id="partial"
        ),
        pytest.param(
            [*CLUSTER_MODE, "--authorizer", "--ssl-principal-mapping-rules", "RULE:^(.*)$/$2/"],
            "has 1 group",
            id="bad-mapping-rule",
        ),
        pytest.param(
            [*CLUSTER_MODE, "--authorizer", "--super-users", "alice"],
            "User:NAME",
            id="bad-super-user",
        ),
        pytest.param(
            ["--standalone", "--authorizer"], "--authorizer needs a controller", id="standalone"
        ),
    ],
)
def test_bad_security_flags_are_refused(tmp_path: Path, flags: list[str], message: str) -> None:
    base = ["broker", "--id", "1", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path)]
    result = mk(*base, *flags, check=False)
    assert result.returncode != 0
    assert message in result.stderr
