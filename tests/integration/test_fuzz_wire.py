"""Fuzzing the wire contract (issue 23): Hypothesis over requests and batch bytes, against a real
standalone broker in this process on 127.0.0.1.

Properties, for every generated request: the broker answers (no crash, no hang); a
request-level refusal is INVALID_ARGUMENT (never UNKNOWN or INTERNAL); every per-partition
refusal is a Kafka error code; and nothing the leader refuses is appended: after the run,
every batch in the log passes framing and content validation. (Records are not decoded on
the leader, by design, so a body that is not a record list with an honest header is
stored and refused by consumers; see `broker.log.partition_log.validate_leader_record_set`.)
Bounded: a fixed number of examples per property, no long polls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minikafka.errors import ErrorCode
from minikafka.record_batch import (
    Compression,
    build_batch,
    content_problem,
    iter_batches,
)
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from tests.support.inprocess_broker import InProcessBroker, inprocess_broker
from tests.support.lying_batches import _FIELDS, patch_header, with_body
from tests.support.wire import create_topic, now_ms

pytestmark = pytest.mark.integration

KNOWN_CODES = {int(code) for code in ErrorCode}
ALLOWED_STATUS = {grpc.StatusCode.INVALID_ARGUMENT}
TOPIC = "fuzz"
EXAMPLES = 60
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Record timestamps near the time of the run (fixed, so data generation is reproducible).
BASE_MS = now_ms()
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with inprocess_broker(tmp_path_factory.mktemp("fuzz") / "broker") as running:
        with grpc.insecure_channel(running.address) as channel:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            assert create_topic(stub, TOPIC, partitions=2).error_code == ErrorCode.NONE
        yield running
        assert running.alive()
        _check_stored_batches(running)


@pytest.fixture(scope="module")
def stub(broker: InProcessBroker) -> Iterator[broker_pb2_grpc.BrokerServiceStub]:
    with grpc.insecure_channel(broker.address) as channel:
        yield broker_pb2_grpc.BrokerServiceStub(channel)


def _check_stored_batches(broker: InProcessBroker) -> None:
    """No batch the leader should have refused is in the log."""
    data_dir = Path(broker.config.data_dir)
    stored = 0
    for partition in (0, 1):
        for segment in sorted((data_dir / f"{TOPIC}-{partition}").glob("*.log")):
            for _, header in iter_batches(segment.read_bytes()):
                assert content_problem(header) is None, header
                stored += 1
    assert stored > 0, "the fuzzer should have appended some honest batches"


def _call(fn: object, request: object) -> object | None:
    """The response, or None for an allowed request-level refusal."""
    try:
        response: object = fn(request, timeout=10)  # type: ignore[operator]
        return response
    except grpc.RpcError as exc:
        _check_refusal(exc)
        return None


def _check_refusal(exc: grpc.RpcError) -> None:
    """A request-level refusal must be INVALID_ARGUMENT, never UNKNOWN or INTERNAL."""
    code = exc.code()
    if code not in ALLOWED_STATUS:
        raise AssertionError(f"refused with {code}: {exc.details()}")


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """A batch: honest, with lying header fields, with a foreign body, cut short, or noise."""
    rows = draw(
        st.lists(
            st.tuples(
                st.integers(BASE_MS - 1000, BASE_MS + 1000),
                st.none() | st.binary(max_size=8),
                st.none() | st.binary(max_size=64),
                st.none(),
            ),
            min_size=1,
            max_size=5,
        )
    )
    honest = build_batch(rows, compression=draw(st.sampled_from(list(Compression))))
    kind = draw(st.sampled_from(["honest", "lie", "body", "cut", "noise", "two"]))
    if kind == "honest":
        return honest
    if kind == "lie":
        names = draw(st.lists(st.sampled_from(sorted(_FIELDS)), min_size=1, max_size=3))
        fields = {
            name: draw(
                int64
                if _FIELDS[name][1] == "<q"
                else st.integers(-(2**15), 2**15 - 1)
                if _FIELDS[name][1] == "<h"
                else int32
            )
            for name in names
        }
        return patch_header(honest, **fields)
    if kind == "body":
        return with_body(honest, draw(st.binary(max_size=200)))
    if kind == "cut":
        return honest[: draw(st.integers(0, len(honest) - 1))]
    if kind == "two":
        return honest + honest
    return draw(st.binary(max_size=300))


@given(
    records=batches(),
    partition=st.sampled_from([0, 1, -1, 2, 2**31 - 1]),
    acks=st.sampled_from([-1, 0, 1, 2, -2]),
    timeout_ms=st.sampled_from([0, 100, 5000, -1, 300_001]),
    epoch=st.sampled_from([-1, 0, 1, 2**31 - 1]),
    topic=st.sampled_from([TOPIC, "", "nope", "x" * 300]),
)
@FUZZ_SETTINGS
def test_fuzz_produce(
    stub: broker_pb2_grpc.BrokerServiceStub,
    records: bytes,
    partition: int,
    acks: int,
    timeout_ms: int,
    epoch: int,
    topic: str,
) -> None:
    request = broker_pb2.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        partitions=[
            broker_pb2.PartitionProduceData(
                topic=topic, partition=partition, records=records, current_leader_epoch=epoch
            )
        ],
    )
    response = _call(stub.Produce, request)
    if isinstance(response, broker_pb2.ProduceResponse):
        for entry in response.partitions:
            assert entry.error_code in KNOWN_CODES


@given(
    max_wait_ms=st.sampled_from([0, 10, -1, 60_001]),
    min_bytes=st.sampled_from([0, 1, 2**31 - 1, -1]),
    max_bytes=st.sampled_from([0, 1, 1 << 20, 2**31 - 1, -1]),
    partitions=st.lists(
        st.tuples(
            st.sampled_from([TOPIC, "", "nope"]),
            st.sampled_from([0, 1, -1, 7]),
            st.sampled_from([0, 1, 5, 2**62, -1]),
            st.sampled_from([-1, 0, 5, 2**31 - 1]),
            st.sampled_from([-1, 0, 3, 2**31 - 1]),
            st.sampled_from([0, 1, 1 << 20, -5]),
        ),
        max_size=4,
    ),
)
@FUZZ_SETTINGS
def test_fuzz_fetch(
    stub: broker_pb2_grpc.BrokerServiceStub,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partitions: list[tuple[str, int, int, int, int, int]],
) -> None:
    request = broker_pb2.FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        partitions=[
            broker_pb2.FetchPartition(
                topic=topic,
                partition=partition,
                fetch_offset=offset,
                current_leader_epoch=epoch,
                last_fetched_epoch=last_epoch,
                partition_max_bytes=partition_max,
            )
            for topic, partition, offset, epoch, last_epoch, partition_max in partitions
        ],
    )
    response = _call(stub.Fetch, request)
    if isinstance(response, broker_pb2.FetchResponse):
        for entry in response.partitions:
            assert entry.error_code in KNOWN_CODES


@given(
    name=st.text(max_size=12) | st.sampled_from([TOPIC, ".", "a.b", "a_b"]),
    partitions=st.sampled_from([-1, 0, 1, 3, 10_001, 100_000, 2**31 - 1]),
    replication=st.sampled_from([-1, 0, 1, 3]),
    configs=st.dictionaries(
        st.sampled_from(
            ["segment.ms", "segment.bytes", "max.message.bytes", "min.insync.replicas", "x"]
        ),
        st.sampled_from(["0", "1", "-1", "1048576", "99999999999999999999", "abc"]),
        max_size=3,
    ),
)
@FUZZ_SETTINGS
def test_fuzz_create_topics(
    stub: broker_pb2_grpc.BrokerServiceStub,
    name: str,
    partitions: int,
    replication: int,
    configs: dict[str, str],
) -> None:
    request = controller_pb2.CreateTopicsRequest(
        validate_only=True,
        topics=[
            controller_pb2.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication,
                configs=configs,
            )
        ],
    )
    response = _call(stub.CreateTopics, request)
    if isinstance(response, controller_pb2.CreateTopicsResponse):
        for topic in response.topics:
            assert topic.error_code in KNOWN_CODES
            if topic.error_code != ErrorCode.NONE:
                assert topic.error_message


METHODS = ["Produce", "Fetch", "ListOffsets", "Metadata", "CreateTopics", "AlterConfigs"]


@given(method=st.sampled_from(METHODS), payload=st.binary(max_size=200))
@FUZZ_SETTINGS
def test_fuzz_raw_bytes(broker: InProcessBroker, method: str, payload: bytes) -> None:
    with grpc.insecure_channel(broker.address) as channel:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/minikafka.v1.BrokerService/{method}"
        )
        try:
            call(payload, timeout=10)
        except grpc.RpcError as exc:
            _check_refusal(exc)
