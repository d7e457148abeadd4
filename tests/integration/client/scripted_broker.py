"""A scripted in-process broker for client tests (real gRPC on 127.0.0.1).

`ScriptedBroker` leads every partition of topic `t` and answers Produce, Fetch and
ListOffsets as each test scripts them, so the client's reaction to exact per-partition
error codes is checked deterministically, independently of the real broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import crc32c
import grpc
import grpc.aio

from minikafka.errors import ErrorCode
from minikafka.record_batch import HEADER_SIZE, build_batch, parse_header, stamp
from minikafka.v1 import broker_pb2, broker_pb2_grpc, common_pb2, controller_pb2

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
        #: Base sequences whose answer waits until a Produce of a later sequence has
        #: started (at most `hold_timeout_s`): shows that the client has several batches in
        #: flight without depending on how fast it sends them.
        self.hold_until_overtaken: set[int] = set()
        self.hold_timeout_s = 5.0
        #: Base sequences whose Produce answers only once the event is set (first
        #: attempt only): lets a test decide which answer the client sees first.
        self.gates: dict[int, asyncio.Event] = {}
        self._highest_started_sequence = -1
        self._sequence_started = asyncio.Event()
        #: A Produce answers only once calls for this many distinct partitions have
        #: started (at most `hold_timeout_s`; 0: no wait): shows that calls of different
        #: partitions overlap without depending on how fast the client sends them.
        self.hold_until_partitions_started = 0
        self._started_partitions: set[int] = set()
        self._enough_partitions_started = asyncio.Event()
        #: (partition, "start" | "end") per Produce partition, in order.
        self.produce_partition_events: list[tuple[int, str]] = []
        #: Answers (code, indefinite) by (partition, producer epoch, base sequence), taken
        #: first to last before `codes_by_sequence` and `produce_codes`.
        self.answers: dict[tuple[int, int, int], list[tuple[int, bool]]] = {}
        #: Error codes ListOffsets answers (one per partition asked) before the offset.
        self.list_offsets_errors: list[int] = []
        self.list_offsets_calls = 0

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
        self.produce_partition_events.extend((p.partition, "start") for p in request.partitions)
        self._highest_started_sequence = max(self._highest_started_sequence, *sequences)
        self._sequence_started.set()
        self._started_partitions.update(p.partition for p in request.partitions)
        if len(self._started_partitions) >= self.hold_until_partitions_started:
            self._enough_partitions_started.set()
        await asyncio.wait_for(self._enough_partitions_started.wait(), self.hold_timeout_s)
        for held in sorted(self.hold_until_overtaken & set(sequences)):
            await self._wait_overtaken(held)
        for gated in sequences:
            gate = self.gates.pop(gated, None)
            if gate is not None:
                await asyncio.wait_for(gate.wait(), self.hold_timeout_s)
        if self.produce_latency_s:
            await asyncio.sleep(self.produce_latency_s)
        self.produce_events.extend(("end", seq) for seq in sequences)
        self.produce_partition_events.extend((p.partition, "end") for p in request.partitions)
        for part in request.partitions:
            self.produced.append((part.partition, part.records))
            sent = parse_header(part.records)
            scripted = self.answers.get((part.partition, sent.producer_epoch, sent.base_sequence))
            indefinite = False
            code: int | None = None
            if scripted:
                code, indefinite = scripted.pop(0)
            else:
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
                    indefinite=indefinite,
                )
            )
        return broker_pb2.ProduceResponse(partitions=results)

    async def _wait_overtaken(self, sequence: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.hold_timeout_s
        while self._highest_started_sequence <= sequence:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return  # answered anyway: the test's order check then fails
            self._sequence_started.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sequence_started.wait(), remaining)

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
        self.list_offsets_calls += 1
        answers = []
        for p in request.partitions:
            if self.list_offsets_errors:
                code = self.list_offsets_errors.pop(0)
                answers.append(
                    broker_pb2.ListOffsetsPartitionResponse(
                        topic=p.topic,
                        partition=p.partition,
                        error_code=code,
                        error_message=f"scripted {ErrorCode(code).name}",
                        offset=-1,
                    )
                )
                continue
            answers.append(
                broker_pb2.ListOffsetsPartitionResponse(
                    topic=p.topic,
                    partition=p.partition,
                    offset=0 if p.timestamp_ms == -2 else self.latest_offset,
                )
            )
        return broker_pb2.ListOffsetsResponse(partitions=answers)


@asynccontextmanager
async def serving(servicer: ScriptedBroker) -> AsyncIterator[ScriptedBroker]:
    """Serve `servicer` on 127.0.0.1 (a free port) while the block runs."""
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


def batch_at(base: int, epoch: int, values: list[bytes]) -> bytes:
    built = build_batch([(1000, None, v, None) for v in values])
    return stamp(built, base_offset=base, leader_epoch=epoch)


def _next_offset(batch: bytes) -> int:
    """The offset after `batch` as its header says (read raw: the header may be damaged)."""
    base, delta = struct.unpack_from("<q", batch, 0)[0], struct.unpack_from("<i", batch, 27)[0]
    return int(base + delta + 1)


def _reseal(batch: bytearray) -> bytes:
    """Recompute both CRCs of a batch whose bytes were changed (so that it lies)."""
    struct.pack_into("<I", batch, 21, crc32c.crc32c(bytes(batch[25:])))
    struct.pack_into("<I", batch, 17, crc32c.crc32c(bytes(batch[:17])))
    return bytes(batch)


def lying_batch(base: int, epoch: int, values: list[bytes], *, record_count: int) -> bytes:
    """A batch with sound CRCs whose header claims `record_count` records."""
    damaged = bytearray(batch_at(base, epoch, values))
    struct.pack_into("<i", damaged, 27, record_count - 1)  # last offset delta
    struct.pack_into("<i", damaged, 61, record_count)
    return _reseal(damaged)


def garbage_body_batch(base: int, epoch: int, values: list[bytes]) -> bytes:
    """A batch with sound CRCs whose records section is random bytes."""
    damaged = bytearray(batch_at(base, epoch, values))
    damaged[HEADER_SIZE:] = random.Random(7).randbytes(len(damaged) - HEADER_SIZE)
    return _reseal(damaged)


def flipped(batch: bytes, position: int) -> bytes:
    """`batch` with one bit flipped at `position` (CRCs not recomputed)."""
    damaged = bytearray(batch)
    damaged[position] ^= 0x01
    return bytes(damaged)


def log_handler(
    logs: dict[int, list[bytes]], leader_epoch: int = 3
) -> Callable[[broker_pb2.FetchPartition], broker_pb2.FetchPartitionResponse]:
    """Fetch answers from fixed logs (batches per partition, stamped): every batch that
    holds offsets at or after the fetch offset, as a broker returns them."""

    def handle(p: broker_pb2.FetchPartition) -> broker_pb2.FetchPartitionResponse:
        batches = logs.get(p.partition, [])
        end = max((_next_offset(b) for b in batches), default=0)
        return broker_pb2.FetchPartitionResponse(
            topic=p.topic,
            partition=p.partition,
            high_watermark=end,
            leader_epoch=leader_epoch,
            records=b"".join(b for b in batches if _next_offset(b) > p.fetch_offset),
        )

    return handle
