"""The consumer's reaction to scripted fetch and offset answers (`ScriptedBroker`):
truncation (KIP-320), pipelined fetches, offsets not available yet (KIP-207)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

import pytest

from client import AsyncConsumer, TopicPartition
from client.errors import CorruptRecordError, LogTruncationError
from minikafka.errors import ErrorCode
from minikafka.v1 import broker_pb2
from tests.integration.client.scripted_broker import (
    FetchHandler,
    ScriptedBroker,
    address,
    batch_at,
    flipped,
    garbage_body_batch,
    log_handler,
    lying_batch,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


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


def empty_log(p: broker_pb2.FetchPartition) -> broker_pb2.FetchPartitionResponse:
    return broker_pb2.FetchPartitionResponse(
        topic=p.topic, partition=p.partition, high_watermark=p.fetch_offset, leader_epoch=3
    )


NOT_AVAILABLE_TWICE = [ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.OFFSET_NOT_AVAILABLE]


async def test_the_latest_offset_is_retried_while_a_new_leader_has_none(
    broker: ScriptedBroker,
) -> None:
    """KIP-207: a new leader whose HW is below its epoch's start answers
    OFFSET_NOT_AVAILABLE (retriable); end_offsets waits for the real offset."""
    broker.latest_offset = 42
    broker.list_offsets_errors = list(NOT_AVAILABLE_TWICE)
    tp = TopicPartition("t", 0)
    async with AsyncConsumer(bootstrap_servers=address(broker), retry_backoff_ms=10) as consumer:
        assert await consumer.end_offsets([tp]) == {tp: 42}
    assert broker.list_offsets_calls == 3


@pytest.mark.parametrize("how", ["auto-reset", "seek-to-end"])
async def test_a_position_reset_to_latest_waits_for_the_offset(
    broker: ScriptedBroker, how: str
) -> None:
    broker.latest_offset = 42
    broker.fetch_handler = empty_log
    tp = TopicPartition("t", 0)
    async with AsyncConsumer(
        bootstrap_servers=address(broker),
        retry_backoff_ms=10,
        auto_offset_reset="latest" if how == "auto-reset" else "earliest",
        fetch_max_wait_ms=50,
    ) as consumer:
        if how == "seek-to-end":
            consumer.assign([tp])
            assert await consumer.position(tp) == 0
            broker.list_offsets_errors = list(NOT_AVAILABLE_TWICE)
            await consumer.seek_to_end(tp)
        else:
            broker.list_offsets_errors = list(NOT_AVAILABLE_TWICE)
            consumer.assign([tp])
        assert await consumer.position(tp) == 42
        assert await consumer.getmany(timeout_ms=100) == {}  # no error surfaced
    assert not broker.list_offsets_errors


# ---- a damaged batch (issue 23 finding 3) ------------------------------------------------

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
GOOD = batch_at(0, 1, [b"a", b"b", b"c"])  # offsets 0-2


def endless(partition: int) -> Callable[[broker_pb2.FetchPartition], bytes]:
    """`partition` always has another batch at the fetch offset."""

    def records(p: broker_pb2.FetchPartition) -> bytes:
        return batch_at(p.fetch_offset, 1, [b"p%d-%d" % (partition, p.fetch_offset)])

    return records


@pytest.mark.parametrize(
    ("damaged", "next_offset"),
    [
        pytest.param(lying_batch(3, 1, [b"d"], record_count=1000), 1003, id="lying-count"),
        pytest.param(garbage_body_batch(3, 1, [b"d"]), 4, id="random-body"),
        pytest.param(flipped(batch_at(3, 1, [b"d"]), 70), 4, id="body-crc"),
        pytest.param(flipped(batch_at(3, 1, [b"d"]), 12), -1, id="header-crc"),
    ],
)
async def test_records_before_a_damaged_batch_then_an_error_until_a_seek(
    broker: ScriptedBroker, damaged: bytes, next_offset: int
) -> None:
    """The records before the damaged batch are delivered, then `CorruptRecordError(tp,
    offset)` at every poll that reaches the partition first, while the other partition
    keeps being served; a seek past the batch ends it."""
    after = batch_at(1003, 1, [b"z"])
    logs = log_handler({0: [GOOD, damaged, after]})
    other = endless(1)

    def handle(p: broker_pb2.FetchPartition) -> broker_pb2.FetchPartitionResponse:
        response = logs(p)
        if p.partition == 1:
            response.records = other(p)
            response.high_watermark = p.fetch_offset + 1
        return response

    broker.fetch_handler = handle
    async with AsyncConsumer(
        bootstrap_servers=address(broker), auto_offset_reset="earliest", fetch_max_wait_ms=20
    ) as consumer:
        consumer.assign([TP0, TP1])
        runtime = consumer._runtime
        assert runtime is not None
        fetched = runtime.fetcher.data_ready
        delivered: dict[TopicPartition, list[int]] = {TP0: [], TP1: []}
        errors: list[CorruptRecordError] = []
        served_after_error = 0
        for _ in range(100):
            fetched.clear()
            try:
                got = await consumer.getmany(timeout_ms=2000, max_records=10)
            except CorruptRecordError as exc:
                errors.append(exc)
                # A poll that raises does not wait for data: wait for the next fetch
                # (partition 1 always has more) before polling again.
                await asyncio.wait_for(fetched.wait(), 5)
                continue
            for tp, records in got.items():
                delivered[tp].extend(r.offset for r in records)
                if tp == TP1 and errors:
                    served_after_error += 1
            if len(errors) >= 3 and served_after_error >= 3:
                break
        assert delivered[TP0] == [0, 1, 2]
        assert {(e.topic_partition, e.offset, e.next_offset) for e in errors} == {
            (TP0, 3, next_offset)
        }
        assert len(errors) >= 3
        assert served_after_error >= 3
        assert await consumer.position(TP0) == 3
        consumer.pause(TP1)
        consumer.seek(TP0, 1003)
        again = await consumer.getmany(timeout_ms=5000)
        assert [r.value for r in again[TP0]] == [b"z"]
        assert TP1 not in again  # paused


async def test_the_cli_prints_the_records_before_a_damaged_batch_then_one_error(
    broker: ScriptedBroker,
) -> None:
    broker.fetch_handler = log_handler({0: [GOOD, lying_batch(3, 1, [b"d"], record_count=1000)]})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "minikafka",
        "consume",
        "--bootstrap-server",
        address(broker),
        "t",
        "--partition",
        "0",
        "--offset",
        "earliest",
        "--timeout-ms",
        "10000",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert stdout.decode().splitlines() == ["a", "b", "c"]
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: corrupt record batch at offset 3 of t-0")
    assert process.returncode == 1
