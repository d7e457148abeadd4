"""The simulation's real-consumer workload: `client.consumer.AsyncConsumer`s reading `TOPIC`.

Each consumer is the production class wired through its `ClientPorts`: its broker stubs
are `SimStub`s from the process `client-consumer-<n>` (so its metadata, ListOffsets and
Fetch requests and their answers cross the simulated network: delayed, lost, cut, the
brokers crash under them) and its clock is the loop's virtual time (fetch long polls,
back-offs, request timeouts, metadata age). It `assign()`s a seeded subset of `TOPIC`'s
partitions (all, or some), `seek_to_beginning`, and polls with `getmany` until the run
stops: the fetcher, KIP-320 position validation on a leader change, offset reset and
delivery all run under the seeds' faults.

Each non-empty poll is a `poll` op as `workload.Workload.consumer` records one
(`[["poll", {key: [[offset, value], ...]}]]`), so the checker judges what the real client
hands out: order, gaps below the HW, values never acknowledged or definitely failed,
duplicates. Its `hw` is, per partition, the highest high watermark any Fetch answer to
this consumer carried so far (`_WatchedStub`): every record a broker serves lies below
the HW of the answer that carried it, and that answer came before the poll returned the
record, so a read at or above it is a broker serving above its HW. (`highwater()` would
not do: it is the last answer's HW, and a new leader's may lag what an earlier answer
already carried, KIP-207.)

A consumer whose client raised (a `MiniKafkaClientError`: truncation under it, a
timeout of `seek_to_beginning`...) has its failure recorded as a `poll` op classified as
the producers' failures are (`tests.chaos.workload.classify`) and goes on as a new
process (a new consumer, read from the beginning again). Anything else it raises is a
process error of the run.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from client.consumer import AsyncConsumer
from client.errors import MiniKafkaClientError
from client.records import TopicPartition
from client.transport import ClientPorts
from tests.chaos.history import key_of
from tests.chaos.workload import classify
from tests.sim.replication.workload import TOPIC

if TYPE_CHECKING:
    from minikafka.v1 import broker_pb2_grpc
    from tests.sim.replication.network import SimStub
    from tests.sim.replication.simulator import Simulation

REQUEST_TIMEOUT_MS = 1500
#: How long one `getmany` waits for records.
POLL_TIMEOUT_MS = 200
#: Pause before a consumer that could not start (no broker answered) tries again.
START_RETRY_S = 0.2


class _WatchedStub:
    """A `SimStub` that notes, per partition, the highest HW its Fetch answers carried."""

    def __init__(self, stub: SimStub, high_watermarks: dict[str, int]) -> None:
        self.stub = stub
        self.high_watermarks = high_watermarks

    def __getattr__(self, method: str) -> Any:
        return getattr(self.stub, method)

    async def Fetch(self, request: Any, **options: Any) -> Any:
        response = await self.stub.Fetch(request, **options)
        for part in response.partitions:
            key = key_of(part.topic, part.partition)
            if part.error_code == 0 and part.high_watermark > self.high_watermarks.get(key, -1):
                self.high_watermarks[key] = part.high_watermark
        return response


class ConsumerWorkload:
    """`SimParams.client_consumers` real consumers; `start` returns their tasks."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        #: Records the consumers' polls returned, polls recorded, consumers that raised.
        self.read = 0
        self.polls = 0
        self.failures = 0
        #: Every consumer made, for the tests (the production class, not a copy).
        self.consumers: list[AsyncConsumer] = []

    def start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """The consumers' tasks; one that raised (a client bug) is a process error of the
        run, as a broker's crashed main task is."""
        tasks = [
            asyncio.ensure_future(self.consumer(number, stop))
            for number in range(1, self.sim.params.client_consumers + 1)
        ]
        for task in tasks:
            task.add_done_callback(self._failed)
        return tasks

    def _failed(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.sim._errors.append(f"client consumer failed: {task.exception()!r}")

    def make_consumer(self, number: int, high_watermarks: dict[str, int]) -> AsyncConsumer:
        source = f"client-consumer-{number}"
        network = self.sim.network
        loop = asyncio.get_running_loop()

        def stub(address: str) -> broker_pb2_grpc.BrokerServiceAsyncStub:
            watched = _WatchedStub(network.stub(source, address, "BrokerService"), high_watermarks)
            return watched  # type: ignore[return-value]

        return AsyncConsumer(
            bootstrap_servers=[broker.address for broker in self.sim.brokers],
            client_id=source,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            retry_backoff_ms=50,
            metadata_max_age_ms=5000,
            ports=ClientPorts(stub_factory=stub, clock_s=loop.time),
        )

    def _partitions(self) -> list[TopicPartition]:
        """All of `TOPIC`'s partitions, or a seeded non-empty subset of them."""
        count = self.sim.params.partitions
        chosen = self.sim.rng.sample(range(count), self.sim.rng.randint(1, count))
        return [TopicPartition(TOPIC, partition) for partition in sorted(chosen)]

    async def consumer(self, number: int, stop: asyncio.Event) -> None:
        incarnation = 0
        while not stop.is_set():
            high_watermarks: dict[str, int] = {}
            consumer = self.make_consumer(number, high_watermarks)
            self.consumers.append(consumer)
            process = f"client-consumer-{number}#{incarnation}"
            try:
                await consumer.start()
            except MiniKafkaClientError:  # no broker answered yet
                await consumer.stop()
                await asyncio.sleep(START_RETRY_S)
                continue
            try:
                await self._read(consumer, process, high_watermarks, stop)
            except MiniKafkaClientError as error:
                self.failures += 1
                history = self.sim.history
                op = history.invoke(process, "poll", [["poll"]])
                outcome = classify(error, single_attempt=True)
                history.complete(op, outcome, [["poll"]], error=repr(error))
                incarnation += 1
            finally:
                await consumer.stop()

    async def _read(
        self,
        consumer: AsyncConsumer,
        process: str,
        high_watermarks: dict[str, int],
        stop: asyncio.Event,
    ) -> None:
        history = self.sim.history
        partitions = self._partitions()
        keys = [key_of(tp.topic, tp.partition) for tp in partitions]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        op = history.invoke(process, "assign", keys)
        history.complete(op, "ok", keys)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS)
            pairs = {
                key_of(tp.topic, tp.partition): [
                    [record.offset, int(record.value)] for record in records
                ]
                for tp, records in batches.items()
                if records
            }
            if not pairs:
                continue
            op = history.invoke(process, "poll", [["poll"]])
            history.complete(
                op,
                "ok",
                [["poll", pairs]],
                hw={key: high_watermarks.get(key, -1) for key in pairs},
            )
            self.polls += 1
            self.read += sum(len(rows) for rows in pairs.values())
