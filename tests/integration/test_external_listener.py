"""The external listener: clients outside the brokers' network get external addresses."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from tests.support.cluster import Cluster
from tests.support.processes import free_port

pytestmark = pytest.mark.integration


def test_metadata_depends_on_the_listener(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, brokers=2)
    external: dict[int, int] = {}
    for broker_id, process in cluster.brokers.items():
        port = free_port()
        external[broker_id] = port
        # "localhost" (external) vs "127.0.0.1" (internal) tells the two answers apart.
        process.args += [
            "--external-listen",
            f"127.0.0.1:{port}",
            "--external-advertise",
            f"localhost:{port}",
        ]
    try:
        cluster.start()
        cluster.create_topic("ext", rf=2)
        internal_meta = cluster.stub(1).Metadata(broker_pb2.MetadataRequest(), timeout=5)
        assert {f"{b.host}:{b.port}" for b in internal_meta.brokers} == {
            process.address for process in cluster.brokers.values()
        }
        with grpc.insecure_channel(f"127.0.0.1:{external[1]}") as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            external_meta = stub.Metadata(broker_pb2.MetadataRequest(), timeout=5)
            assert {(b.host, b.port) for b in external_meta.brokers} == {
                ("localhost", external[b]) for b in cluster.brokers
            }
            described = stub.DescribeCluster(controller_pb2.DescribeClusterRequest(), timeout=5)
            assert {(s.endpoint.host, s.endpoint.port) for s in described.brokers} == {
                ("localhost", external[b]) for b in cluster.brokers
            }
    finally:
        cluster.stop()
