"""`ClientPorts`: a client's broker stubs and monotonic clock are injectable, and every
deadline and timer of the producer and the consumer then runs on them (what the
replication simulator's real-client workloads rely on: its loop's virtual time does not
move `time.monotonic`)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from client.consumer import AsyncConsumer
from client.errors import KafkaTimeoutError, NotEnoughReplicasError
from client.producer import AsyncProducer
from client.records import TopicPartition
from client.transport import BrokerConnections, ClientPorts
from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from minikafka.v1 import broker_pb2, common_pb2, controller_pb2
from tests.sim.replication.vloop import VirtualTimeLoop

ADDRESS = "b1:9092"


class FakeStub:
    """A broker leading partition 0 of `t` (when `knows_topic`), answering Produce with
    `produce_code` (offsets from 0 on success)."""

    def __init__(self, *, knows_topic: bool = True, produce_code: int = ErrorCode.NONE) -> None:
        self.knows_topic = knows_topic
        self.produce_code = produce_code
        self.calls: list[str] = []
        self.next_offset = 0

    async def Metadata(self, request: Any, **_options: Any) -> broker_pb2.MetadataResponse:
        self.calls.append("Metadata")
        topics = []
        if self.knows_topic:
            partition = common_pb2.PartitionMetadata(
                partition=0, leader=1, leader_epoch=1, replicas=[1], isr=[1]
            )
            topics.append(common_pb2.TopicMetadata(name="t", partitions=[partition]))
        return broker_pb2.MetadataResponse(
            cluster_id="fake",
            controller_id=1,
            brokers=[common_pb2.BrokerEndpoint(broker_id=1, host="b1", port=9092)],
            topics=topics,
        )

    async def InitProducerId(
        self, request: Any, **_options: Any
    ) -> controller_pb2.InitProducerIdResponse:
        self.calls.append("InitProducerId")
        return controller_pb2.InitProducerIdResponse(producer_id=7, producer_epoch=0)

    async def Produce(
        self, request: broker_pb2.ProduceRequest, **_options: Any
    ) -> broker_pb2.ProduceResponse:
        self.calls.append("Produce")
        part = request.partitions[0]
        base = self.next_offset if self.produce_code == ErrorCode.NONE else -1
        if self.produce_code == ErrorCode.NONE:
            self.next_offset += 1
        answer = broker_pb2.PartitionProduceResponse(
            topic=part.topic,
            partition=part.partition,
            error_code=self.produce_code,
            base_offset=base,
            log_append_time_ms=-1,
        )
        return broker_pb2.ProduceResponse(partitions=[answer])

    async def ListOffsets(
        self, request: broker_pb2.ListOffsetsRequest, **_options: Any
    ) -> broker_pb2.ListOffsetsResponse:
        self.calls.append("ListOffsets")
        part = request.partitions[0]
        answer = broker_pb2.ListOffsetsPartitionResponse(
            topic=part.topic, partition=part.partition, offset=0, timestamp_ms=-1, leader_epoch=1
        )
        return broker_pb2.ListOffsetsResponse(partitions=[answer])

    async def Fetch(
        self, request: broker_pb2.FetchRequest, **_options: Any
    ) -> broker_pb2.FetchResponse:
        """The one record at offset 0; from offset 1 on, nothing within the long poll."""
        self.calls.append("Fetch")
        part = request.partitions[0]
        records = b""
        if part.fetch_offset == 0:
            records = build_batch([(0, None, b"zero", None)])
        else:
            await asyncio.sleep(request.max_wait_ms / 1000)
        answer = broker_pb2.FetchPartitionResponse(
            topic=part.topic, partition=part.partition, high_watermark=1, records=records
        )
        return broker_pb2.FetchResponse(partitions=[answer])


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def connections(stub: FakeStub, clock: FakeClock, **config: Any) -> BrokerConnections:
    asked: list[str] = []

    def factory(address: str) -> Any:
        asked.append(address)
        return stub

    conn = BrokerConnections(
        ADDRESS, ports=ClientPorts(stub_factory=factory, clock_s=clock), **config
    )
    conn.asked = asked  # type: ignore[attr-defined]
    return conn


async def test_the_stub_factory_makes_the_stubs_and_no_channel_is_opened() -> None:
    stub = FakeStub()
    conn = connections(stub, FakeClock())
    view = await conn.refresh(["t"])
    assert view.partitions_for("t") == [0]
    assert conn.asked == [ADDRESS]  # type: ignore[attr-defined]
    assert cast(object, conn.stub(ADDRESS)) is stub  # made once, then kept
    assert conn._channels == {}
    await conn.close()


async def test_metadata_age_is_measured_on_the_injected_clock() -> None:
    clock = FakeClock()
    conn = connections(FakeStub(), clock, metadata_max_age_ms=5000)
    await conn.refresh(["t"])
    assert not conn.metadata_stale()
    clock.now_s += 5.001
    assert conn.metadata_stale()


async def test_waiting_for_a_topic_ends_at_the_injected_clock_deadline() -> None:
    clock = FakeClock()
    stub = FakeStub(knows_topic=False)
    original = stub.Metadata

    async def metadata_while_time_passes(request: Any, **_options: Any) -> Any:
        clock.now_s += 4  # each refresh takes 4 s on the injected clock
        return await original(request)

    stub.Metadata = metadata_while_time_passes  # type: ignore[method-assign]
    conn = connections(stub, clock, retry_backoff_ms=0)
    with pytest.raises(KafkaTimeoutError, match="not in metadata after 10000 ms"):
        await conn.wait_for_topic("t", 10_000)
    assert stub.calls == ["Metadata"] * 3  # 4 s, 8 s, 12 s: past the 10 s deadline


def run_virtually(main: Any) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


def test_the_producer_sends_through_the_ports_on_virtual_time() -> None:
    """The linger, request and delivery timeouts and the back-off all run on the ports'
    clock and the loop: on a virtual-time loop, an acks=all idempotent send is answered,
    and one whose partition keeps refusing fails after `delivery_timeout_ms` of virtual
    time (on `time.monotonic` it would retry until the guard's minute ran out)."""
    stub = FakeStub()

    async def main(loop: asyncio.AbstractEventLoop) -> tuple[int, float, BaseException]:
        producer = AsyncProducer(
            ADDRESS,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            retry_backoff_ms=100,
            request_timeout_ms=1000,
            delivery_timeout_ms=3000,
            ports=ClientPorts(stub_factory=lambda _address: cast(Any, stub), clock_s=loop.time),
        )
        async with asyncio.timeout(60), producer:
            offset = (await producer.send_and_wait("t", b"one", partition=0)).offset
            stub.produce_code = ErrorCode.NOT_ENOUGH_REPLICAS
            started_s = loop.time()
            future = await producer.send("t", b"two", partition=0)
            with pytest.raises(KafkaTimeoutError) as refused:
                await future
            return offset, loop.time() - started_s, refused.value

    offset, waited_s, error = run_virtually(main)
    assert offset == 0
    assert 2.5 < waited_s <= 3.1  # its last retry's back-off would end past the timeout
    assert isinstance(error.__cause__, NotEnoughReplicasError) or "NOT_ENOUGH_REPLICAS" in str(
        error
    )
    assert stub.calls[:2] == ["Metadata", "InitProducerId"]
    assert stub.calls.count("Produce") > 10  # retried with back-off until the timeout


def test_the_consumer_fetches_through_the_ports_on_virtual_time() -> None:
    """The consumer's connections make their stubs with the ports' factory and its
    fetcher, delivery and poll timeout read the ports' clock: on a virtual-time loop it
    reads the record through the stub, and an empty `getmany(timeout_ms=2000)` returns
    after 2 s of virtual time (its long polls sleep on the loop)."""
    stub = FakeStub()

    async def main(loop: asyncio.AbstractEventLoop) -> tuple[list[bytes | None], float, bool]:
        consumer = AsyncConsumer(
            bootstrap_servers=ADDRESS,
            fetch_max_wait_ms=500,
            ports=ClientPorts(stub_factory=lambda _address: cast(Any, stub), clock_s=loop.time),
        )
        async with asyncio.timeout(60), consumer:
            assert consumer.clock == loop.time
            partition = TopicPartition("t", 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            first = await consumer.getmany(timeout_ms=1000)
            started_s = loop.time()
            empty = await consumer.getmany(timeout_ms=2000)
            assert consumer._runtime is not None
            no_channel = consumer._runtime.conn._channels == {}
            return (
                [record.value for record in first.get(partition, [])],
                loop.time() - started_s,
                no_channel and empty == {},
            )

    values, waited_s, empty_without_channels = run_virtually(main)
    assert values == [b"zero"]
    assert 2.0 <= waited_s < 2.6
    assert empty_without_channels
    assert stub.calls[:2] == ["Metadata", "ListOffsets"]
    assert "Fetch" in stub.calls


class LeaderlessStub(FakeStub):
    """Once `offline`, partition 0 of `t` has no leader: metadata says so (answered at
    once) and a Fetch is refused with NOT_LEADER_OR_FOLLOWER."""

    offline = False

    async def Metadata(self, request: Any, **_options: Any) -> broker_pb2.MetadataResponse:
        response = await super().Metadata(request)
        for topic in response.topics:
            for partition in topic.partitions:
                partition.leader = -1 if self.offline else partition.leader
        return response

    async def Fetch(
        self, request: broker_pb2.FetchRequest, **_options: Any
    ) -> broker_pb2.FetchResponse:
        if not self.offline:
            return await super().Fetch(request)
        self.calls.append("Fetch")
        part = request.partitions[0]
        answer = broker_pb2.FetchPartitionResponse(
            topic=part.topic, partition=part.partition, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
        )
        return broker_pb2.FetchResponse(partitions=[answer])


def test_the_fetcher_backs_off_its_metadata_refreshes_while_a_leader_is_missing() -> None:
    """While an assigned partition has no leader the fetcher asks for metadata every
    `retry_backoff_ms`, not again as soon as each answer wakes it (the simulator saw
    ~1000 Metadata requests per second from each consumer while a partition was offline,
    as fast as the brokers answered)."""
    stub = LeaderlessStub()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        consumer = AsyncConsumer(
            bootstrap_servers=ADDRESS,
            retry_backoff_ms=100,
            ports=ClientPorts(stub_factory=lambda _address: cast(Any, stub), clock_s=loop.time),
        )
        async with asyncio.timeout(60), consumer:
            partition = TopicPartition("t", 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            assert len((await consumer.getmany(timeout_ms=1000))[partition]) == 1
            stub.offline = True
            stub.calls.clear()
            assert await consumer.getmany(timeout_ms=2000) == {}

    run_virtually(main)
    refreshes = stub.calls.count("Metadata")
    assert 10 <= refreshes <= 25, refreshes  # one per 100 ms back-off over 2 s


def test_the_producer_backs_off_its_metadata_refreshes_while_a_leader_is_missing() -> None:
    """The producer's sender, too, asks for metadata at most once per `retry_backoff_ms`
    while a batch waits for a partition without a leader (the simulator saw ~1300
    Metadata requests per second from each producer while a partition was offline)."""
    stub = LeaderlessStub()
    stub.offline = True

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        producer = AsyncProducer(
            ADDRESS,
            acks="all",
            retry_backoff_ms=100,
            request_timeout_ms=1000,
            delivery_timeout_ms=2000,
            ports=ClientPorts(stub_factory=lambda _address: cast(Any, stub), clock_s=loop.time),
        )
        async with asyncio.timeout(60), producer:
            stub.calls.clear()
            future = await producer.send("t", b"one", partition=0)
            with pytest.raises(KafkaTimeoutError):
                await future

    run_virtually(main)
    assert "Produce" not in stub.calls
    refreshes = stub.calls.count("Metadata")
    assert 10 <= refreshes <= 25, refreshes  # one per 100 ms back-off over 2 s
