"""The compose cluster with the TLS override (deploy/docker-compose.tls.yml), for real: the
one-shot `certs` service makes the CA and certificates, every controller and broker starts with
TLS, and a host client holding the copied client files produces and consumes over TLS through
the external listeners; a plaintext client is refused there, and the internal listeners refuse
a TLS client without a certificate (mutual TLS) but serve one with a certificate of the CA.

Skips (with the reason) where there is no Docker engine or Compose tool; everything it creates
(containers, network, volumes including the certificates) is removed in `finally`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from client import Admin, Consumer, NewTopic, Producer, TopicPartition
from minikafka.v1 import broker_pb2, broker_pb2_grpc
from tests.docker.compose import (
    CLUSTER_SERVICES,
    TLS_COMPOSE_FILE,
    CommandError,
    ComposeProject,
    base_image,
    compose_command,
    docker_unavailable_reason,
    run,
)
from tests.support.cluster import wait_until
from tests.support.processes import free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

TOPIC = "secure"
PARTITIONS = 3
RECORDS = 60
BASE_IMAGE_TIMEOUT_S = 300.0
BUILD_TIMEOUT_S = 240.0
START_TIMEOUT_S = 150.0
CERTS = "/etc/minikafka/certs"

# Run inside broker-1's container: a TLS client of controller-1's mutual-TLS listener, first
# with the CA only (refused), then with broker-1's own certificate (served). Prints both.
_INTERNAL_PROBE = f"""
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
def check(credentials):
    with grpc.secure_channel("controller-1:9093", credentials) as channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code().name
        return "SERVED"
ca = open("{CERTS}/ca.crt", "rb").read()
key = open("{CERTS}/broker-1.key", "rb").read()
cert = open("{CERTS}/broker-1.crt", "rb").read()
print(check(grpc.ssl_channel_credentials(ca)), check(grpc.ssl_channel_credentials(ca, key, cert)))
"""


@pytest.fixture(scope="module")
def project() -> Iterator[ComposeProject]:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    command = compose_command()
    assert command is not None
    ports = {broker_id: free_port() for broker_id in (1, 2, 3)}
    compose = ComposeProject(
        command, f"mktls{uuid.uuid4().hex[:10]}", ports, overrides=[TLS_COMPOSE_FILE]
    )
    python_image = base_image(BASE_IMAGE_TIMEOUT_S)
    compose.build(python_image, BUILD_TIMEOUT_S)
    try:
        with compose.logs_on_failure():
            compose.up(START_TIMEOUT_S)
            compose.wait_healthy(CLUSTER_SERVICES, START_TIMEOUT_S)
        yield compose
    finally:
        compose.down()


@pytest.fixture(scope="module")
def client_tls(project: ComposeProject, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """kafka-python-style TLS settings with the files copied out of the `certs` volume."""
    directory = tmp_path_factory.mktemp("compose-client-certs")
    files = {
        name: project.copy_out("certs", f"{CERTS}/{name}", directory / name)
        for name in ("ca.crt", "client.crt", "client.key")
    }
    return {
        "security_protocol": "SSL",
        "ssl_cafile": str(files["ca.crt"]),
        "ssl_certfile": str(files["client.crt"]),
        "ssl_keyfile": str(files["client.key"]),
    }


def bootstrap(project: ComposeProject) -> str:
    return ",".join(f"127.0.0.1:{port}" for port in project.broker_ports.values())


def test_certs_service_made_the_certificates_once(project: ComposeProject) -> None:
    state = project.state("certs")
    assert state["Status"] == "exited"
    assert state["ExitCode"] == 0
    listing = project.compose("logs", "--no-color", "certs", timeout_s=60)
    assert "7 certificates and the CA" in listing


def test_host_client_produces_and_consumes_over_tls(
    project: ComposeProject, client_tls: dict[str, Any]
) -> None:
    with project.logs_on_failure():

        def created() -> bool:
            try:
                with Admin(bootstrap(project), **client_tls) as admin:
                    admin.create_topics(NewTopic(TOPIC, PARTITIONS, 3))
            except Exception as exc:  # brokers still registering: retried until the deadline
                print(f"create_topics: {exc!r}")
                return False
            return True

        wait_until(created, timeout_s=START_TIMEOUT_S, interval_s=1.0, what="topic created")
        values = [f"secret-{n}".encode() for n in range(RECORDS)]
        with Producer(bootstrap_servers=bootstrap(project), acks="all", **client_tls) as producer:
            futures = [
                producer.send(TOPIC, value, partition=n % PARTITIONS)
                for n, value in enumerate(values)
            ]
            acked = {future.result(timeout=60).offset for future in futures}
        assert len(acked) == RECORDS // PARTITIONS  # offsets 0..19 on each partition

        got: list[bytes] = []
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        with Consumer(
            bootstrap_servers=bootstrap(project), auto_offset_reset="earliest", **client_tls
        ) as consumer:
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            for _ in range(60):  # bounded: at most 60 polls of 1 s
                for records in consumer.poll(timeout_ms=1000).values():
                    got += [r.value for r in records if r.value is not None]
                if len(got) >= RECORDS:
                    break
        assert sorted(got) == sorted(values)


def test_plaintext_client_is_refused(project: ComposeProject, client_tls: dict[str, Any]) -> None:
    port = project.broker_ports[1]
    request = broker_pb2.MetadataRequest(topics=[])
    with (
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        broker_pb2_grpc.BrokerServiceStub(channel).Metadata(request, timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # The same listener over TLS (CA only: the external listener asks for no certificate).
    ca = Path(client_tls["ssl_cafile"]).read_bytes()
    with grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(ca)) as channel:
        reply = broker_pb2_grpc.BrokerServiceStub(channel).Metadata(request, timeout=10)
    assert {broker.port for broker in reply.brokers} == set(project.broker_ports.values())


def test_internal_listeners_require_a_client_certificate(project: ComposeProject) -> None:
    container = project.container("broker-1")
    try:
        out = run(["docker", "exec", container, "python3", "-c", _INTERNAL_PROBE], timeout_s=60)
    except CommandError as exc:
        pytest.fail(f"probe failed: {exc}")
    without_cert, with_cert = out.split()
    assert without_cert == "UNAVAILABLE"
    assert with_cert == "SERVED"
