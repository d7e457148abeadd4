"""Issue 23 acceptance, cluster side (finding 1): an absurd CreateTopics is refused at once and
the cluster keeps serving; a broker never crash-loops on a partition it cannot open, and the
controller moves that replica out of ISR and leadership; a broker restarted with more
partitions than file descriptors comes up and serves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from tests.support.cluster import running_cluster, wait_until
from tests.support.processes import ServerProcess, standalone_broker_process
from tests.support.wire import create_topic, now_ms, produce

pytestmark = pytest.mark.integration


def test_an_absurd_create_topics_is_refused_at_once_and_the_cluster_serves(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, brokers=1) as cluster:
        started = time.monotonic()
        reply = cluster.stub().CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[
                    controller_pb2.CreatableTopic(
                        name="huge", num_partitions=100_000, replication_factor=1
                    ),
                    controller_pb2.CreatableTopic(
                        name="tiny-segments",
                        num_partitions=1,
                        replication_factor=1,
                        configs={"segment.ms": "1"},
                    ),
                ]
            ),
            timeout=10,
        )
        assert time.monotonic() - started < 5
        huge, tiny = reply.topics
        assert huge.error_code == ErrorCode.INVALID_PARTITIONS
        assert "max.partitions.per.topic=10000" in huge.error_message
        assert tiny.error_code == ErrorCode.INVALID_CONFIG
        assert "min.segment.ms=60000" in tiny.error_message
        cluster.create_topic("after", rf=1)
        result = produce(cluster.stub(), "after", build_batch([(now_ms(), None, b"v", None)]))
        assert result.error_code == ErrorCode.NONE


def test_a_replica_that_cannot_be_opened_goes_offline_and_the_controller_moves_it(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        cluster.create_topic("t", partitions=2, rf=2, min_insync_replicas="1")
        leader, _, _ = cluster.leader_of("t", 0)
        victim = 2 if leader == 1 else 1
        for partition in (0, 1):
            cluster.wait_isr("t", partition, [1, 2])
        cluster.brokers[victim].kill()
        segment = tmp_path / f"broker-{victim}" / "t-0" / "00000000000000000000.log"
        segment.unlink()
        segment.mkdir()  # the log cannot be read any more
        cluster.brokers[victim].start()
        cluster.wait_active(2)
        # The broker serves; its replica of t-0 is out of the ISR and leads nothing.
        cluster.wait_isr("t", 1, [1, 2])
        wait_until(
            lambda: cluster.leader_of("t", 0)[2] == [3 - victim],
            timeout_s=30,
            what="the offline replica to leave the ISR",
        )
        assert cluster.leader_of("t", 0)[0] == 3 - victim
        assert "is OFFLINE" in cluster.brokers[victim].log_text()
        assert cluster.brokers[victim].alive()
        shutil.rmtree(segment)


def _limited(process: ServerProcess, max_files: int) -> ServerProcess:
    """Run `process` under RLIMIT_NOFILE = `max_files` (set in the child before it starts)."""
    code = (
        "import resource, runpy, sys;"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({max_files}, {max_files}));"
        "sys.argv = ['minikafka', *sys.argv[1:]];"
        "runpy.run_module('minikafka', run_name='__main__')"
    )

    def start(*, wait: bool = True) -> ServerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(process.log_path, "ab") as log:
            process.proc = subprocess.Popen(
                [sys.executable, "-c", code, *process.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        if wait:
            process.wait_healthy()
        return process

    process.start = start  # type: ignore[method-assign]
    return process


def test_a_broker_with_more_partitions_than_file_descriptors_starts_and_serves(
    tmp_path: Path,
) -> None:
    """200 partitions, restarted with 160 file descriptors in all (the old broker opened
    every segment at start and exited with 'Too many open files')."""
    data_dir = tmp_path / "broker-1"
    process = standalone_broker_process(data_dir).start()
    with grpc.insecure_channel(process.address) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        assert create_topic(stub, "wide", partitions=200).error_code == ErrorCode.NONE
        for partition in range(200):
            batch = build_batch([(now_ms(), None, b"p%d" % partition, None)])
            result = produce(stub, "wide", batch, partition=partition, acks=1)
            assert result.error_code == ErrorCode.NONE
    assert process.terminate() == 0

    restarted = _limited(
        standalone_broker_process(data_dir, extra=["--max-open-segment-files", "32"]), 160
    )
    restarted.address = process.address
    restarted.args[restarted.args.index("--listen") + 1] = process.address
    restarted.start()
    try:
        with grpc.insecure_channel(restarted.address) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            for partition in range(200):
                fetched = stub.Fetch(
                    broker_pb2.FetchRequest(
                        max_wait_ms=0,
                        max_bytes=1 << 20,
                        partitions=[
                            broker_pb2.FetchPartition(
                                topic="wide",
                                partition=partition,
                                fetch_offset=0,
                                current_leader_epoch=-1,
                                last_fetched_epoch=-1,
                                partition_max_bytes=1 << 20,
                            )
                        ],
                    ),
                    timeout=10,
                )
                entry = fetched.partitions[0]
                assert entry.error_code == ErrorCode.NONE, entry.error_message
                assert entry.records, partition
                batch = build_batch([(now_ms(), None, b"again", None)])
                assert produce(stub, "wide", batch, partition=partition, acks=1).error_code == 0
    finally:
        assert restarted.terminate() == 0
