"""Client error handling against a scripted in-process broker (real gRPC on 127.0.0.1).

The scripted broker lets each test choose the exact per-partition error codes, so
retries, idempotent sequence handling and truncation detection are checked
deterministically, independently of the real broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
import grpc.aio
import pytest

from client import AsyncConsumer, AsyncProducer, TopicPartition
from client.errors import (
    KafkaTimeoutError,
    LogTruncationError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumberError,
    UnknownServerError,
)
from client.transport import BrokerConnections
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch, decode_records, parse_header, stamp
from minikafka.v1 import broker_pb2, broker_pb2_grpc, common_pb2, controller_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

FetchHandler = Callable[[broker_pb2.FetchPartition], broker_pb2.FetchPartitionResponse]


class ScriptedBroker(broker_pb2_grpc.BrokerServiceServicer):
    """One broker leading every partition of topic `t`; answers as scripted."""

    def __init__(self, partitions: int = 1) -> None:
        self.port = 0
        self.partitions = partitions
        self.leader_epoch = 3
        self.metadata_calls = 0
        self.produce_codes: list[int] = []
        self.produced: list[tuple[int, bytes]] = []  # (partition, batch) as received
        self.next_offset = 0
        self.init_error = ErrorCode.NONE
        self.fetch_handler: FetchHandler | None = None
        self.fetch_requests: list[broker_pb2.FetchPartition] = []
        self.latest_offset = 0
        #: Codes by (producer epoch, base sequence), taken before `produce_codes`.
        self.codes_by_sequence: dict[tuple[int, int], int] = {}
        #: Simulated time each Produce takes before it answers.
        self.produce_latency_s = 0.0
        #: ("start" | "end", base sequence) per Produce partition, in order.
        self.produce_events: list[tuple[str, int]] = []

    async def Metadata(
        self, request: broker_pb2.MetadataRequest, context: object
    ) -> broker_pb2.MetadataResponse:
        self.metadata_calls += 1
        return broker_pb2.MetadataResponse(
            cluster_id="fake",
            controller_id=1,
            brokers=[common_pb2.BrokerEndpoint(broker_id=1, host="127.0.0.1", port=self.port)],
            topics=[
                common_pb2.TopicMetadata(
                    name="t",
                    partitions=[
                        common_pb2.PartitionMetadata(
                            partition=p,
                            leader=1,
                            leader_epoch=self.leader_epoch,
                            replicas=[1],
                            isr=[1],
                        )
                        for p in range(self.partitions)
                    ],
                )
            ],
        )

    async def InitProducerId(
        self, request: controller_pb2.InitProducerIdRequest, context: object
    ) -> controller_pb2.InitProducerIdResponse:
        if self.init_error != ErrorCode.NONE:
            return controller_pb2.InitProducerIdResponse(error_code=self.init_error)
        return controller_pb2.InitProducerIdResponse(
            producer_id=7, producer_epoch=max(request.producer_epoch + 1, 0)
        )

    async def Produce(
        self, request: broker_pb2.ProduceRequest, context: object
    ) -> broker_pb2.ProduceResponse:
        results = []
        sequences = [parse_header(part.records).base_sequence for part in request.partitions]
        self.produce_events.extend(("start", seq) for seq in sequences)
        if self.produce_latency_s:
            await asyncio.sleep(self.produce_latency_s)
        self.produce_events.extend(("end", seq) for seq in sequences)
        for part in request.partitions:
            self.produced.append((part.partition, part.records))
            sent = parse_header(part.records)
            code = self.codes_by_sequence.pop((sent.producer_epoch, sent.base_sequence), None)
            if code is None:
                code = self.produce_codes.pop(0) if self.produce_codes else ErrorCode.NONE
            base = -1
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                header = parse_header(part.records)
                base = self.next_offset
                if code == ErrorCode.NONE:
                    self.next_offset += header.record_count
                else:
                    base = 0
            results.append(
                broker_pb2.PartitionProduceResponse(
                    topic=part.topic,
                    partition=part.partition,
                    error_code=code,
                    error_message=f"scripted {ErrorCode(code).name}",
                    base_offset=base,
                    log_append_time_ms=-1,
                )
            )
        return broker_pb2.ProduceResponse(partitions=results)

    async def Fetch(
        self, request: broker_pb2.FetchRequest, context: object
    ) -> broker_pb2.FetchResponse:
        assert self.fetch_handler is not None
        self.fetch_requests.extend(request.partitions)
        return broker_pb2.FetchResponse(
            partitions=[self.fetch_handler(p) for p in request.partitions]
        )

    async def ListOffsets(
        self, request: broker_pb2.ListOffsetsRequest, context: object
    ) -> broker_pb2.ListOffsetsResponse:
        return broker_pb2.ListOffsetsResponse(
            partitions=[
                broker_pb2.ListOffsetsPartitionResponse(
                    topic=p.topic,
                    partition=p.partition,
                    offset=0 if p.timestamp_ms == -2 else self.latest_offset,
                )
                for p in request.partitions
            ]
        )


@pytest.fixture
async def broker() -> AsyncIterator[ScriptedBroker]:
    servicer = ScriptedBroker(partitions=2)  # type: ignore[abstract]
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(servicer, server)
    servicer.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer
    finally:
        await server.stop(grace=None)


def address(broker: ScriptedBroker) -> str:
    return f"127.0.0.1:{broker.port}"


def producer(broker: ScriptedBroker, **config: object) -> AsyncProducer:
    return AsyncProducer(address(broker), retry_backoff_ms=10, linger_ms=1, **config)  # type: ignore[arg-type]


async def test_not_leader_refreshes_metadata_and_retries_same_sequence(
    broker: ScriptedBroker,
) -> None:
    broker.produce_codes = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NONE]
    async with producer(broker) as p:
        metadata_before = broker.metadata_calls
        md = await p.send_and_wait("t", b"v", partition=0)
    assert md.offset == 0
    assert broker.metadata_calls > metadata_before
    first, second = broker.produced[0][1], broker.produced[1][1]
    assert first == second  # the retry resends the same bytes: same sequence
    header = parse_header(first)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 0)


async def test_sequences_advance_per_partition(broker: ScriptedBroker) -> None:
    async with producer(broker) as p:
        for partition in (0, 1, 0):
            await p.send_and_wait("t", b"a", partition=partition)
            await p.send_and_wait("t", b"b", partition=partition)
    sequences = [(part, parse_header(b).base_sequence) for part, b in broker.produced]
    assert [s for part, s in sequences if part == 0] == [0, 1, 2, 3]
    assert [s for part, s in sequences if part == 1] == [0, 1]


async def test_duplicate_sequence_counts_as_success(broker: ScriptedBroker) -> None:
    broker.next_offset = 10
    broker.produce_codes = [ErrorCode.DUPLICATE_SEQUENCE_NUMBER]
    async with producer(broker) as p:
        md = await p.send_and_wait("t", b"v", partition=0)
    assert md.offset == 0  # the original offset the broker returned


async def test_definite_errors_fail_only_the_affected_batch(broker: ScriptedBroker) -> None:
    broker.produce_codes = [ErrorCode.MESSAGE_TOO_LARGE]
    async with producer(broker, enable_idempotence=False) as p:
        failed = await p.send("t", b"big", partition=0)
        with pytest.raises(MessageSizeTooLargeError, match="scripted MESSAGE_TOO_LARGE") as info:
            await failed
        assert info.value.errno == 10
        ok = await p.send_and_wait("t", b"small", partition=1)
    assert ok.partition == 1


async def test_out_of_order_sequence_is_fatal_for_the_batch(broker: ScriptedBroker) -> None:
    broker.produce_codes = [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
    async with producer(broker) as p:
        with pytest.raises(OutOfOrderSequenceNumberError):
            await p.send_and_wait("t", b"v", partition=0)
        # The producer bumps its epoch and keeps working with fresh sequences.
        md = await p.send_and_wait("t", b"w", partition=0)
    assert md.offset == 0
    last = parse_header(broker.produced[-1][1])
    assert (last.producer_epoch, last.base_sequence) == (1, 0)


async def test_first_batch_of_a_partition_travels_alone(broker: ScriptedBroker) -> None:
    # A leader that does not know the producer accepts any sequence, and gRPC may
    # deliver concurrent calls in any order: a later batch must not overtake the first.
    broker.produce_latency_s = 0.05
    async with producer(broker, batch_size=17, buffer_memory=1 << 20) as p:
        futures = [await p.send("t", b"%d" % i, partition=0) for i in range(6)]
        await p.flush()
        offsets = [(await f).offset for f in futures]
    # The first batch is written first; the scripted broker does not check sequences, so
    # later concurrent batches may land in any order here (the real broker refuses an
    # out-of-order sequence and the producer retries it in order).
    assert offsets[0] == 0
    assert sorted(offsets) == list(range(6))
    assert broker.produce_events[:3] == [("start", 0), ("end", 0), ("start", 1)]
    # Once the first batch is acknowledged, several are in flight at once.
    starts_before_first_end = broker.produce_events[2:].index(("end", 1))
    assert starts_before_first_end > 1


async def test_batches_behind_a_failed_one_keep_their_order_in_the_next_epoch(
    broker: ScriptedBroker,
) -> None:
    # b1 fails for good, so the partition's sequence has a hole; b2 and b3 were
    # rejected as out of order and are re-sequenced under a new epoch, still in order.
    broker.codes_by_sequence = {
        (0, 1): ErrorCode.MESSAGE_TOO_LARGE,
        (0, 2): ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        (0, 3): ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    }
    async with producer(broker, batch_size=18, buffer_memory=1 << 20) as p:
        assert (await p.send_and_wait("t", b"b0", partition=0)).offset == 0
        futures = [await p.send("t", b"b%d" % i, partition=0) for i in (1, 2, 3)]
        with pytest.raises(MessageSizeTooLargeError):
            await futures[0]
        assert [(await f).offset for f in futures[1:]] == [1, 2]
    resent = [parse_header(b) for _, b in broker.produced[-2:]]
    assert [(h.producer_epoch, h.base_sequence) for h in resent] == [(1, 0), (1, 1)]
    assert [decode_records(b)[1][0][2] for _, b in broker.produced[-2:]] == [b"b2", b"b3"]


async def test_retriable_errors_stop_at_the_delivery_timeout(broker: ScriptedBroker) -> None:
    broker.produce_codes = [ErrorCode.NOT_ENOUGH_REPLICAS] * 10_000
    # Long enough that at least one attempt is answered even on a loaded machine.
    async with producer(broker, request_timeout_ms=200, delivery_timeout_ms=2000) as p:
        with pytest.raises(KafkaTimeoutError, match="NOT_ENOUGH_REPLICAS"):
            await p.send_and_wait("t", b"v", partition=0)


async def test_an_unanswered_request_fails_at_the_delivery_timeout(
    broker: ScriptedBroker,
) -> None:
    """The broker never answers: the record fails when its delivery timeout passes, not
    after the request's own deadline plus a retry (Kafka expires in-flight batches)."""
    broker.produce_latency_s = 60
    delivery_timeout_ms = 1500
    async with producer(
        broker, request_timeout_ms=1000, delivery_timeout_ms=delivery_timeout_ms
    ) as p:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(KafkaTimeoutError, match="delivery_timeout_ms"):
            await p.send_and_wait("t", b"v", partition=0)
        elapsed_s = loop.time() - started
    # Without the cap: 1 s + the deadline margin, then a retry of as long again.
    assert elapsed_s < delivery_timeout_ms / 1000 + 1.0


async def test_init_producer_id_failure_fails_start(broker: ScriptedBroker) -> None:
    broker.init_error = ErrorCode.UNKNOWN_SERVER_ERROR
    p = producer(broker)
    with pytest.raises(UnknownServerError, match="InitProducerId"):
        await p.start()


def batch_at(base: int, epoch: int, values: list[bytes]) -> bytes:
    built = build_batch([(1000, None, v, None) for v in values])
    return stamp(built, base_offset=base, leader_epoch=epoch)


def truncating_log() -> FetchHandler:
    """The first fetch sees offsets 0-9 in epoch 1; then an unclean election loses 5-9:
    the leader's epoch 1 ends at 5 and epoch 2 starts there."""

    def handle(p: broker_pb2.FetchPartition) -> broker_pb2.FetchPartitionResponse:
        response = broker_pb2.FetchPartitionResponse(
            topic=p.topic, partition=p.partition, high_watermark=10, leader_epoch=3
        )
        if p.partition != 0:
            return response
        if p.fetch_offset == 0:
            response.records = batch_at(0, 1, [b"%d" % i for i in range(10)])
        elif p.last_fetched_epoch == 1 and p.fetch_offset > 5:
            response.diverging_epoch.epoch = 1
            response.diverging_epoch.end_offset = 5
        elif p.fetch_offset == 5:
            response.records = batch_at(5, 2, [b"new-5", b"new-6"])
        elif p.fetch_offset < 5:
            response.records = batch_at(0, 1, [b"%d" % i for i in range(5)]) + batch_at(
                5, 2, [b"new-5", b"new-6"]
            )
        return response

    return handle


async def drain_until_error(consumer: AsyncConsumer) -> None:
    for _ in range(50):
        await consumer.getmany(timeout_ms=200)


async def test_truncation_under_the_consumer_is_detected(broker: ScriptedBroker) -> None:
    broker.fetch_handler = truncating_log()
    tp = TopicPartition("t", 0)
    async with AsyncConsumer(
        bootstrap_servers=address(broker), auto_offset_reset="earliest", fetch_max_wait_ms=50
    ) as consumer:
        consumer.assign([tp])
        first = await consumer.getmany(timeout_ms=5000, max_records=100)
        assert [r.offset for r in first[tp]] == list(range(10))
        with pytest.raises(LogTruncationError) as info:
            await drain_until_error(consumer)
        assert (info.value.tp, info.value.offset, info.value.divergent_offset) == (tp, 10, 5)
        # It stays raised until the user repositions the consumer.
        with pytest.raises(LogTruncationError):
            await consumer.getmany(timeout_ms=10)
        consumer.seek(tp, 5)
        again = await consumer.getmany(timeout_ms=5000)
        assert [r.value for r in again[tp]] == [b"new-5", b"new-6"]
    sent = [p for p in broker.fetch_requests if p.partition == 0 and p.fetch_offset == 10]
    assert sent[0].last_fetched_epoch == 1
    assert sent[0].current_leader_epoch == 3


async def test_truncation_resets_when_asked(broker: ScriptedBroker) -> None:
    broker.fetch_handler = truncating_log()
    tp = TopicPartition("t", 0)
    async with AsyncConsumer(
        bootstrap_servers=address(broker),
        auto_offset_reset="earliest",
        reset_on_truncation=True,
        fetch_max_wait_ms=50,
    ) as consumer:
        consumer.assign([tp])
        first = await consumer.getmany(timeout_ms=5000, max_records=100)
        assert len(first[tp]) == 10
        again = await consumer.getmany(timeout_ms=5000)
        assert [(r.offset, r.value, r.leader_epoch) for r in again[tp]] == [
            (5, b"new-5", 2),
            (6, b"new-6", 2),
        ]
        assert await consumer.position(tp) == 7


async def test_the_next_fetch_travels_before_the_previous_response_is_consumed(
    broker: ScriptedBroker,
) -> None:
    second_fetch = asyncio.Event()

    def endless(p: broker_pb2.FetchPartition) -> broker_pb2.FetchPartitionResponse:
        if len(broker.fetch_requests) >= 2:
            second_fetch.set()
        response = broker_pb2.FetchPartitionResponse(
            topic=p.topic, partition=p.partition, high_watermark=1000, leader_epoch=3
        )
        if p.partition == 0:
            response.records = batch_at(p.fetch_offset, 1, [b"v"] * 10)
        return response

    broker.fetch_handler = endless
    tp = TopicPartition("t", 0)
    async with AsyncConsumer(
        bootstrap_servers=address(broker), auto_offset_reset="earliest", fetch_max_wait_ms=50
    ) as consumer:
        consumer.assign([tp])
        await asyncio.wait_for(second_fetch.wait(), 5)
        # Nothing was consumed yet, and the second response is already on its way.
        assert [p.fetch_offset for p in broker.fetch_requests][:2] == [0, 10]
        got = await consumer.getmany(timeout_ms=5000, max_records=15)
        offsets = [r.offset for r in got[tp]]
        assert offsets in (list(range(10)), list(range(15)))  # one or both responses
        assert await consumer.position(tp) == len(offsets)


class SilentBroker(ScriptedBroker):
    """Accepts connections but never answers Metadata (a paused process)."""

    async def Metadata(
        self, request: broker_pb2.MetadataRequest, context: object
    ) -> broker_pb2.MetadataResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_metadata_refresh_does_not_wait_for_a_silent_broker(broker: ScriptedBroker) -> None:
    """The first bootstrap broker never answers: the refresh asks the next one after the
    hedge delay and uses its answer, long before the 30 s request timeout."""
    silent = SilentBroker()  # type: ignore[abstract]
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(silent, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    conn = BrokerConnections([f"127.0.0.1:{port}", address(broker)], request_timeout_ms=30_000)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        view = await conn.refresh(["t"])
        elapsed_s = loop.time() - started
        assert view.partitions_for("t") == [0, 1]
        assert elapsed_s < 5, f"refresh took {elapsed_s:.1f} s"
    finally:
        await conn.close()
        await server.stop(grace=None)
