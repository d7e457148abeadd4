"""The simulation's real-client workload: idempotent `client.producer.AsyncProducer`s
(acks=all, retries on, a short `delivery_timeout_ms`) sending unique integers to `TOPIC`.

Each producer is the production class wired through its `ClientPorts`: its broker stubs
are `SimStub`s from the process `client-<n>` (so its requests and answers cross the
simulated network: delayed, lost, cut, and the brokers crash under them) and its clock is
the loop's virtual time (linger, back-off, request and delivery timeouts, metadata age).
`CLIENT_WORKERS` workers share one producer, each sending one record at a time to a
seeded-random partition, so batches of several records and several batches per partition
are in flight at once, which is what idempotence (sequence numbers, retries in order,
DUPLICATE_SEQUENCE_NUMBER) has to get right.

Every send is recorded as the other producers' are (`workload.Workload.producer`): `ok`
with its offset, otherwise `fail` or `info` as the fault suite's real-client workload
classifies the client's exception (`tests.chaos.workload.classify`: with retries every
failure is indefinite). A worker whose send was indefinite goes on as a new process (as
in Jepsen and the fault suite). The checker judges these sends with the rest of `TOPIC`:
a value acknowledged and lost, or written twice (the `duplicate` anomaly: an idempotent
producer's retry appended again), is a violation, unless an unclean election ran. A
producer whose `buffer_memory` still holds bytes once stopped (a record in no live batch)
is a process error of the run.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from client.errors import IllegalStateError, MiniKafkaClientError
from client.producer import AsyncProducer
from client.transport import ClientPorts
from tests.chaos.history import key_of
from tests.chaos.workload import classify
from tests.sim.replication.workload import TOPIC

if TYPE_CHECKING:
    from minikafka.v1 import broker_pb2_grpc
    from tests.sim.replication.simulator import Simulation

#: Concurrent senders sharing one producer.
CLIENT_WORKERS = 3
#: Client values start here (the hand-built producers' values count up from 1).
FIRST_CLIENT_VALUE = 1 << 40
REQUEST_TIMEOUT_MS = 1500
DELIVERY_TIMEOUT_MS = 4000
#: Pause before a producer that could not start (no broker answered) tries again.
START_RETRY_S = 0.2


class ClientWorkload:
    """`SimParams.client_producers` real producers; `start` returns their tasks."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._values = iter(range(FIRST_CLIENT_VALUE, FIRST_CLIENT_VALUE + (1 << 40)))
        self.acknowledged = 0
        #: Every producer made, for the tests (the production class, not a copy).
        self.producers: list[AsyncProducer] = []

    def start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """The producers' tasks; one that raised (a crashed sender, a client bug) is a
        process error of the run, as a broker's crashed main task is."""
        tasks = [
            asyncio.ensure_future(self.producer(number, stop))
            for number in range(1, self.sim.params.client_producers + 1)
        ]
        for task in tasks:
            task.add_done_callback(self._failed)
        return tasks

    def _failed(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.sim._errors.append(f"client producer failed: {task.exception()!r}")

    def make_producer(self, number: int) -> AsyncProducer:
        source = f"client-{number}"
        network = self.sim.network
        loop = asyncio.get_running_loop()

        def stub(address: str) -> broker_pb2_grpc.BrokerServiceAsyncStub:
            return network.stub(source, address, "BrokerService")  # type: ignore[return-value]

        return AsyncProducer(
            [broker.address for broker in self.sim.brokers],
            client_id=source,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            retry_backoff_ms=50,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            max_block_ms=DELIVERY_TIMEOUT_MS,
            metadata_max_age_ms=5000,
            ports=ClientPorts(stub_factory=stub, clock_s=loop.time),
        )

    async def producer(self, number: int, stop: asyncio.Event) -> None:
        producer = self.make_producer(number)
        self.producers.append(producer)
        while not stop.is_set():
            try:
                await producer.start()
                break
            except MiniKafkaClientError:  # no broker answered, no producer id yet
                await asyncio.sleep(START_RETRY_S)
        else:
            await producer.stop()
            return
        try:
            await asyncio.gather(
                *(self._worker(producer, number, worker, stop) for worker in range(CLIENT_WORKERS))
            )
        finally:
            await producer.stop(flush_timeout_s=DELIVERY_TIMEOUT_MS / 1000)
        # Every batch is done now (acknowledged or failed), so all its memory is free: a
        # record held anywhere else was lost track of.
        leaked = producer.accumulator.buffered_bytes
        if leaked:
            raise AssertionError(f"client-{number}: {leaked} bytes never released after stop")

    async def _worker(
        self, producer: AsyncProducer, number: int, worker: int, stop: asyncio.Event
    ) -> None:
        sim = self.sim
        params = sim.params
        incarnation = 0
        single_attempt = producer.config.retries == 0
        while not stop.is_set():
            await asyncio.sleep(sim.rng.randint(1, params.produce_interval_ms) / 1000)
            partition = sim.rng.randrange(params.partitions)
            key = key_of(TOPIC, partition)
            value = next(self._values)
            process = f"client-{number}.{worker}#{incarnation}"
            op = sim.history.invoke(process, "send", [["send", key, value]], acks="all")
            try:
                future = await producer.send(
                    TOPIC,
                    str(value).encode(),
                    partition=partition,
                    timestamp_ms=sim.clock.wall_ms(),
                )
                metadata = await future
            except IllegalStateError:  # the sender crashed (a client bug): a process error
                raise
            except Exception as error:
                outcome = classify(error, single_attempt=single_attempt)
                sim.history.complete(op, outcome, [["send", key, value]], error=repr(error))
                if outcome == "info":
                    incarnation += 1
                continue
            self.acknowledged += 1
            sim.history.complete(op, "ok", [["send", key, [metadata.offset, value]]])
