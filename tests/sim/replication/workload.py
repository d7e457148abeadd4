"""The simulation's clients: producers, assign()-style consumers and the final polls, each
recording its operations in the run's history in the checker's format.

Producers send unique integers, acks=all to `TOPIC` and acks=1 to `ACKS1_TOPIC`, to the
leader some live broker's metadata names; the answer decides the op's type (ok, fail:
nothing appended, info: indefinite). Consumers poll each partition from offset 0 upwards.
An offsets client per partition asks ListOffsets(LATEST) (`end-offset` ops: the checker's
KIP-207 rule, latest offsets one client sees never decrease). The final polls read every
partition up to its HW from the controller's leader.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc.aio

from controller.model import NO_LEADER
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch, decode_records
from minikafka.v1 import broker_pb2
from tests.chaos.checker import LATEST_OFFSET_OP
from tests.chaos.history import key_of

if TYPE_CHECKING:
    from tests.sim.replication.simulator import Simulation

TOPIC = "t"
ACKS1_TOPIC = "t1"
PRODUCE_TIMEOUT_MS = 1500
FINAL_READ_ATTEMPTS = 200
#: The offsets client asks ListOffsets(LATEST) every 1..this many ms.
LATEST_OFFSETS_INTERVAL_MS = 20


class Workload:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._values = iter(range(1, 1 << 62))
        self.acknowledged = 0
        self.read = 0
        self.latest_answered = 0

    def _leader(self, topic: str, partition: int) -> tuple[str, int] | None:
        """Where a client would send, and the leader epoch it would name: the leader in a
        random live broker's metadata."""
        alive = [b for b in self.sim.brokers if b.alive and b.broker is not None]
        if not alive:
            return None
        broker = self.sim.rng.choice(alive).broker
        assert broker is not None
        for info in broker.metadata.partitions_of(topic):
            if info.partition == partition and info.leader >= 0:
                return self.sim.broker(info.leader).address, info.leader_epoch
        return None

    def _leader_address(self, topic: str, partition: int) -> str | None:
        found = self._leader(topic, partition)
        return None if found is None else found[0]

    async def producer(self, number: int, stop: asyncio.Event) -> None:
        params = self.sim.params
        history = self.sim.history
        source = f"producer-{number}"
        while not stop.is_set():
            await asyncio.sleep(self.sim.rng.randint(1, params.produce_interval_ms) / 1000)
            partition = self.sim.rng.randrange(params.partitions)
            acks_all = self.sim.rng.random() < params.acks_all_share
            topic = TOPIC if acks_all else ACKS1_TOPIC
            address = self._leader_address(topic, partition)
            if address is None:
                continue
            value = next(self._values)
            key = key_of(topic, partition)
            op = history.invoke(
                number, "send", [["send", key, value]], acks="all" if acks_all else "1"
            )
            request = broker_pb2.ProduceRequest(acks=-1 if acks_all else 1, timeout_ms=1000)
            request.partitions.add(
                topic=topic,
                partition=partition,
                records=build_batch([(self.sim.clock.wall_ms(), None, str(value).encode(), None)]),
                current_leader_epoch=-1,
            )
            try:
                response = await self.sim.network.unary(
                    source, address, "BrokerService", "Produce", request, PRODUCE_TIMEOUT_MS / 1000
                )
            except grpc.aio.AioRpcError as error:
                history.complete(op, "info", [["send", key, value]], error=error.code().name)
                continue
            assert isinstance(response, broker_pb2.ProduceResponse)
            answer = response.partitions[0]
            if answer.error_code == ErrorCode.NONE:
                self.acknowledged += 1
                history.complete(op, "ok", [["send", key, [answer.base_offset, value]]])
            else:
                history.complete(
                    op,
                    "info" if answer.indefinite else "fail",
                    [["send", key, value]],
                    error=ErrorCode(answer.error_code).name,
                )

    async def _fetch(
        self, source: str, topic: str, partition: int, offset: int, *, final: bool = False
    ) -> tuple[list[list[int]], int] | None:
        """(offset, value) pairs from `offset` and the HW, from the leader; None: no answer.

        A consumer asks the leader some broker's metadata names (maybe an old one, still
        serving its own HW). The final polls ask the controller's leader, fenced by its
        leader epoch: they must see everything committed."""
        leader_epoch = -1
        if final:
            registration = self.sim.engine.state.partitions.get((topic, partition))
            if registration is None or registration.leader == NO_LEADER:
                return None
            address: str | None = self.sim.broker(registration.leader).address
            leader_epoch = registration.leader_epoch
        else:
            address = self._leader_address(topic, partition)
        if address is None:
            return None
        request = broker_pb2.FetchRequest(max_wait_ms=50, min_bytes=1, max_bytes=1 << 20)
        request.partitions.add(
            topic=topic,
            partition=partition,
            fetch_offset=offset,
            current_leader_epoch=leader_epoch,
            last_fetched_epoch=-1,
            partition_max_bytes=1 << 20,
        )
        try:
            response = await self.sim.network.unary(
                source, address, "BrokerService", "Fetch", request, 1
            )
        except grpc.aio.AioRpcError:
            return None
        assert isinstance(response, broker_pb2.FetchResponse)
        answer = response.partitions[0]
        if answer.error_code != ErrorCode.NONE:
            return None
        pairs: list[list[int]] = []
        records = answer.records
        position = 0
        while position < len(records):
            header, rows = decode_records(memoryview(records)[position:])
            for index, row in enumerate(rows):
                record_offset = header.base_offset + index
                if record_offset >= offset and row[2] is not None:
                    pairs.append([record_offset, int(row[2])])
            position += header.size
        return pairs, answer.high_watermark

    async def consumer(self, topic: str, partition: int, stop: asyncio.Event) -> None:
        history = self.sim.history
        key = key_of(topic, partition)
        process = source = f"consumer-{key}"
        position = 0
        while not stop.is_set():
            fetched = await self._fetch(source, topic, partition, position)
            if fetched is None or not fetched[0]:
                await asyncio.sleep(0.02)
                continue
            pairs, hw = fetched
            op = history.invoke(process, "poll", [["poll"]])
            history.complete(op, "ok", [["poll", {key: pairs}]], hw={key: hw})
            self.read += len(pairs)
            position = pairs[-1][0] + 1

    async def latest_offsets(self, topic: str, partition: int, stop: asyncio.Event) -> None:
        """ListOffsets(LATEST) of one partition, as Kafka's consumer asks it: the client
        keeps the newest leader epoch its metadata showed, never acts on older metadata,
        and names that epoch in the request (KIP-320), so a deposed leader that has not
        heard of its successor refuses instead of answering its stale HW. Each answer is
        an `end-offset` op (ok: [key, offset]; fail: refused or no answer)."""
        history = self.sim.history
        key = key_of(topic, partition)
        process = f"offsets-{key}"
        known_epoch = -1
        while not stop.is_set():
            await asyncio.sleep(self.sim.rng.randint(1, LATEST_OFFSETS_INTERVAL_MS) / 1000)
            found = self._leader(topic, partition)
            if found is None or found[1] < known_epoch:
                continue
            address, known_epoch = found
            request = broker_pb2.ListOffsetsRequest()
            request.partitions.add(
                topic=topic, partition=partition, timestamp_ms=-1, current_leader_epoch=known_epoch
            )
            op = history.invoke(process, LATEST_OFFSET_OP, key, leader_epoch=known_epoch)
            try:
                response = await self.sim.network.unary(
                    process, address, "BrokerService", "ListOffsets", request, 1
                )
            except grpc.aio.AioRpcError as error:
                history.complete(op, "fail", key, error=error.code().name)
                continue
            assert isinstance(response, broker_pb2.ListOffsetsResponse)
            answer = response.partitions[0]
            if answer.error_code != ErrorCode.NONE:
                history.complete(op, "fail", key, error=ErrorCode(answer.error_code).name)
                continue
            self.latest_answered += 1
            history.complete(op, "ok", [key, answer.offset], broker=address)

    async def final_polls(self) -> None:
        history = self.sim.history
        history.meta(final_poll_targets=[key_of(*key) for key in self.sim.partition_keys])
        for topic, partition in self.sim.partition_keys:
            key = key_of(topic, partition)
            pairs: list[list[int]] = []
            position = 0
            hw = -1
            for _ in range(FINAL_READ_ATTEMPTS):
                fetched = await self._fetch(f"final-{key}", topic, partition, position, final=True)
                if fetched is None:
                    await asyncio.sleep(0.05)
                    continue
                more, hw = fetched
                pairs += more
                if more:
                    position = more[-1][0] + 1
                if position >= hw:
                    break
            else:
                raise self.sim.violation(f"final polls could not read {key} up to its HW")
            op = history.invoke(f"final-{key}", "poll", [["poll"]])
            history.complete(op, "ok", [["poll", {key: pairs}]], hw={key: hw}, final=True)
