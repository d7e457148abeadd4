"""The producer's (and metadata refresh's) error handling against a `ScriptedBroker`.

Each test scripts the exact per-partition answers, so retries, idempotent sequence
handling and indefinite outcomes are checked deterministically.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import grpc.aio
import pytest

from client import AsyncProducer
from client.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    MiniKafkaClientError,
    OutOfOrderSequenceNumberError,
    UnknownServerError,
)
from client.partitioner import default_partition
from client.transport import BrokerConnections
from minikafka.errors import ErrorCode
from minikafka.record_batch import decode_records, parse_header
from minikafka.v1 import broker_pb2, broker_pb2_grpc
from tests.chaos.workload import classify
from tests.integration.client.scripted_broker import ScriptedBroker, address

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def producer(broker: ScriptedBroker, **config: object) -> AsyncProducer:
    settings: dict[str, object] = {"retry_backoff_ms": 10, "linger_ms": 1, **config}
    return AsyncProducer(address(broker), **settings)  # type: ignore[arg-type]


async def test_not_leader_refreshes_metadata_and_retries_same_sequence(
    broker: ScriptedBroker,
) -> None:
    broker.produce_codes = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NONE]
    async with producer(broker) as p:
        metadata_before = broker.metadata_calls
        md = await p.send_and_wait("t", b"v", partition=0)
    assert md.offset == 0
    assert broker.metadata_calls > metadata_before
    report = p.metrics()["producer-metrics"]
    assert (report["record-retry-total"], report["record-send-total"]) == (1, 1)
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
    # Batch 1's answer waits until a later batch has started (not a fixed latency: a
    # loaded machine once took longer than that to send batch 2, found by CI).
    broker.produce_latency_s = 0.05
    broker.hold_until_overtaken = {1}
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


async def test_an_overtaking_batch_is_retried_after_its_predecessor_was_acknowledged(
    broker: ScriptedBroker,
) -> None:
    """Concurrent gRPC calls may reach the leader in any order: b2 overtakes b1 and is
    refused OUT_OF_ORDER_SEQUENCE_NUMBER, but b1's acknowledgement reaches the producer
    before b2's refusal. b2 was sent behind b1, so the refusal only means it overtook b1:
    it is retried under the same sequence, not failed (found by the Spark sink bench:
    "producer 7 sent sequence 18078, expected 9039" under load)."""
    b2_answers = asyncio.Event()
    broker.hold_until_overtaken = {1}  # b2 is sent while b1 is in flight
    broker.gates = {2: b2_answers}
    broker.answers = {(0, 0, 2): [(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, False)]}
    async with producer(broker, batch_size=18, buffer_memory=1 << 20) as p:
        assert (await p.send_and_wait("t", b"b0", partition=0)).offset == 0
        b1, b2 = [await p.send("t", b"b%d" % i, partition=0) for i in (1, 2)]
        assert (await b1).offset == 1  # acknowledged before b2's refusal is answered
        b2_answers.set()
        assert (await b2).offset == 2
    sent_b2 = [parse_header(data) for _, data in broker.produced if b"b2" in values_of(data)]
    assert [(h.producer_epoch, h.base_sequence) for h in sent_b2] == [(0, 2), (0, 2)]


@pytest.mark.parametrize("acks", [0, 1])
async def test_a_plain_producer_keeps_one_request_per_partition_in_flight(
    broker: ScriptedBroker, acks: int
) -> None:
    """Without sequences nothing puts an overtaking batch back in order, and gRPC may
    deliver concurrent calls in any order: a plain producer (acks=0 or acks=1 without
    idempotence) sends a partition's next batch only after its previous call ended, so
    records are written in the order sent (found by CI: acks=0 records read out of
    order). Other partitions still share the connection's window: the first call is held
    until a call of the other partition has started (or carries both), so the overlap
    checked below does not depend on how fast a loaded machine sends the second call."""
    broker.produce_latency_s = 0.05
    broker.hold_until_partitions_started = 2
    async with producer(
        broker, acks=acks, enable_idempotence=False, batch_size=17, buffer_memory=1 << 20
    ) as p:
        futures = [await p.send("t", b"%d" % i, partition=i % 2) for i in range(12)]
        await p.flush()
        for f in futures:
            await f
    for partition in (0, 1):
        sent = [
            value
            for part, batch in broker.produced
            if part == partition
            for _, _, value, _ in decode_records(batch)[1]
        ]
        assert sent == [b"%d" % i for i in range(partition, 12, 2)]
    # Per partition, calls never overlap; across partitions they do (the first two
    # calls start before either ends).
    assert broker.produce_events[:2] == [("start", -1), ("start", -1)]
    per_partition_open = {0: 0, 1: 0}
    for partition, event in broker.produce_partition_events:
        per_partition_open[partition] += 1 if event == "start" else -1
        assert per_partition_open[partition] in (0, 1), broker.produce_partition_events


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


@pytest.mark.parametrize(
    ("code", "indefinite_answer", "expected"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, True, True),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, False, False),
        (ErrorCode.REQUEST_TIMED_OUT, False, True),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, False, True),
        (ErrorCode.NOT_ENOUGH_REPLICAS, False, False),
    ],
    ids=[
        "not-leader-after-append",
        "not-leader-before-append",
        "timed-out-always-after-append",
        "below-min-isr-after-append",
        "below-min-isr-before-append",
    ],
)
async def test_a_failed_record_says_whether_it_may_have_been_written(
    broker: ScriptedBroker, code: ErrorCode, indefinite_answer: bool, expected: bool
) -> None:
    """retries=0: one attempt, and its answer decides. An error answered after the leader
    appended (indefinite=true, or a code only given after the append) may still be
    committed: the error says so; a refusal before the append is definite."""
    broker.answers = {(0, 0, 0): [(code, indefinite_answer)]}
    async with producer(broker, retries=0) as p:
        future = await p.send("t", b"v", partition=0)
        with pytest.raises(MiniKafkaClientError) as info:
            await future
    assert info.value.errno == code
    assert info.value.indefinite is expected
    assert classify(info.value, single_attempt=True) == ("info" if expected else "fail")


async def test_a_maybe_written_batch_is_never_resequenced_by_an_epoch_bump(
    broker: ScriptedBroker,
) -> None:
    """Issue 14 hole 3b: batch A (partition 0) is answered NOT_LEADER_OR_FOLLOWER after its
    append (indefinite); in the same request batch B (partition 1) fails definitively, so
    the producer must bump its epoch. A may be committed by the new leader: it is resent
    only under its original producer epoch and sequence (where a broker that has it answers
    DUPLICATE_SEQUENCE_NUMBER), never as new data under the bumped epoch."""
    broker.answers = {
        (0, 0, 0): [
            (ErrorCode.NOT_LEADER_OR_FOLLOWER, True),
            (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, False),
        ],
        (1, 0, 0): [(ErrorCode.MESSAGE_TOO_LARGE, False)],
    }
    async with producer(broker, linger_ms=60_000) as p:
        a = await p.send("t", b"A", partition=0)
        b = await p.send("t", b"B", partition=1)
        await p.flush()  # both batches drain at once: one Produce request
        with pytest.raises(MessageSizeTooLargeError) as info:
            await b
        assert (await a).partition == 0
        c = await p.send("t", b"C", partition=0)  # under the new epoch
        await p.flush()
        after = await c
    sent_a = [parse_header(data) for _, data in broker.produced if b"A" in values_of(data)]
    assert [(h.producer_epoch, h.base_sequence) for h in sent_a] == [(0, 0), (0, 0)]
    last = parse_header(broker.produced[-1][1])
    assert (after.partition, last.producer_epoch, last.base_sequence) == (0, 1, 0)
    assert info.value.indefinite is False


async def test_retriable_errors_stop_at_the_delivery_timeout(broker: ScriptedBroker) -> None:
    broker.produce_codes = [ErrorCode.NOT_ENOUGH_REPLICAS] * 10_000
    # Long enough that at least one attempt is answered even on a loaded machine.
    async with producer(broker, request_timeout_ms=200, delivery_timeout_ms=2000) as p:
        with pytest.raises(KafkaTimeoutError, match="NOT_ENOUGH_REPLICAS"):
            await p.send_and_wait("t", b"v", partition=0)


async def test_a_batch_expiring_while_it_waits_for_its_retry_names_the_last_error(
    broker: ScriptedBroker,
) -> None:
    """The schedule behind the flaky test above, built exactly: the first attempt is
    answered NOT_ENOUGH_REPLICAS, the batch is queued again for its retry, and the sender
    next runs only after the delivery timeout has passed (a loaded machine): the batch
    expires in the queue, and its error must still name the cause."""
    clock_ms = [1_000_000.0]  # the producer's clock stands still until the test moves it
    broker.produce_codes = [ErrorCode.NOT_ENOUGH_REPLICAS]
    p = AsyncProducer(
        address(broker),
        linger_ms=0,
        retry_backoff_ms=500,
        request_timeout_ms=1000,
        delivery_timeout_ms=2000,
    )
    p.clock = lambda: clock_ms[0]
    async with p:
        future = await p.send("t", b"v", partition=0)
        answered = asyncio.Event()
        p.accumulator.reenqueue = _then_set(p.accumulator.reenqueue, answered)  # type: ignore[method-assign]
        await asyncio.wait_for(answered.wait(), 10)  # the answer was handled: queued again
        (queued,) = p.accumulator.queued()
        assert "NOT_ENOUGH_REPLICAS" in (queued.last_error or "")
        clock_ms[0] += 2001  # the sender wakes up late: past the deadline, before the retry
        assert p._sender is not None
        p._sender.wake()
        with pytest.raises(KafkaTimeoutError, match="NOT_ENOUGH_REPLICAS"):
            await future
    assert len(broker.produced) == 1  # expired in the queue: never retried


def values_of(batch: bytes) -> list[bytes | None]:
    return [value for _, _, value, _ in decode_records(batch)[1]]


def _then_set(method: Callable[..., None], event: asyncio.Event) -> Callable[..., None]:
    def wrapped(*args: object, **kwargs: object) -> None:
        method(*args, **kwargs)
        event.set()

    return wrapped


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


async def test_send_batch_sequences_and_a_failed_partition(broker: ScriptedBroker) -> None:
    """One call spread over two partitions and several batches: each batch gets the next
    sequence of its partition; a batch refused for good fails the call (definite) once
    the others are done, and `written()` tells what reached the log."""
    keys = [b"k%d" % i for i in range(40)]
    by_partition = {p: [k for k in keys if default_partition(k, 2) == p] for p in (0, 1)}
    broker.answers = {(1, 0, 0): [(ErrorCode.MESSAGE_TOO_LARGE, False)]}
    async with producer(broker, batch_size=200, buffer_memory=1 << 20) as p:
        future = await p.send_batch("t", [b"value"] * len(keys), keys=keys)
        with pytest.raises(MessageSizeTooLargeError) as info:
            await future
        assert info.value.indefinite is False
        written = future.written()
    sent = [parse_header(data) for part, data in broker.produced if part == 0]
    assert sum(h.record_count for h in sent) == len(by_partition[0])
    for epoch in {h.producer_epoch for h in sent}:  # the failure bumped the epoch
        counts = [h.record_count for h in sent if h.producer_epoch == epoch]
        sequences = [h.base_sequence for h in sent if h.producer_epoch == epoch]
        assert sequences == [sum(counts[:i]) for i in range(len(counts))]
    refused = parse_header(next(data for part, data in broker.produced if part == 1))
    assert len(written) == len(keys) - refused.record_count  # all but the refused batch
    assert [m.partition for m in written].count(0) == len(by_partition[0])
