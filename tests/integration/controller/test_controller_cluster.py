"""A real controller on 127.0.0.1:0 with in-test fake brokers (real gRPC both ways)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.app import ControllerApp
from controller.config import ControllerConfig
from minikafka.v1 import common_pb2, controller_pb2
from tests.integration.controller.fake_broker import WAIT_S, FakeBroker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SESSION_TIMEOUT_MS = 600


def config_for(data_dir: Path, **overrides: object) -> ControllerConfig:
    values: dict[str, object] = {
        "data_dir": str(data_dir),
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": 50,
        "auto_leader_rebalance_enable": False,
    }
    values.update(overrides)
    return ControllerConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[ControllerApp]:
    async with ControllerApp(config_for(tmp_path / "controller")) as app:
        yield app


@pytest.fixture
async def brokers(controller: ControllerApp) -> AsyncIterator[dict[int, FakeBroker]]:
    fakes = {broker_id: FakeBroker(broker_id, controller.address) for broker_id in (1, 2, 3)}
    try:
        for fake in fakes.values():
            await fake.join()
        yield fakes
    finally:
        for fake in fakes.values():
            await fake.stop()


async def describe(app: ControllerApp, *topics: str) -> controller_pb2.DescribeClusterResponse:
    async with grpc.aio.insecure_channel(app.address) as channel:
        from minikafka.v1 import controller_pb2_grpc

        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        return await stub.DescribeCluster(
            controller_pb2.DescribeClusterRequest(topics=list(topics)), timeout=WAIT_S
        )


async def create_topic(
    broker: FakeBroker, name: str, *, partitions: int = 1, rf: int = 3, **configs: str
) -> controller_pb2.TopicResult:
    response = await broker.controller.CreateTopics(
        controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=rf,
                    configs={k.replace("_", "."): v for k, v in configs.items()},
                )
            ]
        ),
        timeout=WAIT_S,
    )
    (result,) = response.topics
    return result


async def partition(app: ControllerApp, topic: str, index: int = 0) -> common_pb2.PartitionMetadata:
    response = await describe(app, topic)
    return response.topics[0].partitions[index]


async def metric(app: ControllerApp, name: str) -> float:
    import asyncio

    assert app.metrics_address is not None
    host, port = app.metrics_address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
    await writer.drain()
    body = (await reader.read()).decode()
    writer.close()
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} not exposed")


async def test_register_heartbeat_unfence_and_health(
    controller: ControllerApp, brokers: dict[int, FakeBroker]
) -> None:
    cluster = await describe(controller)
    assert [b.endpoint.broker_id for b in cluster.brokers] == [1, 2, 3]
    assert not any(b.fenced for b in cluster.brokers)
    assert len({b.broker_epoch for b in cluster.brokers}) == 3
    assert cluster.controller_epoch == 1
    assert cluster.cluster_id
    for fake in brokers.values():
        assert fake.update_metadata, "a registered broker gets a full UpdateMetadata"
        assert fake.update_metadata[-1].cluster_id == cluster.cluster_id
        assert fake.update_metadata[-1].controller_epoch == 1
        assert fake.update_metadata[-1].broker_epoch == fake.broker_epoch
    assert await metric(controller, "minikafka_controller_active_brokers") == 3
    async with grpc.aio.insecure_channel(controller.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_heartbeat_errors_and_duplicate_registration(
    controller: ControllerApp, brokers: dict[int, FakeBroker]
) -> None:
    fake = brokers[1]
    stale = await fake.controller.BrokerHeartbeat(
        controller_pb2.BrokerHeartbeatRequest(broker_id=1, broker_epoch=fake.broker_epoch + 100),
        timeout=WAIT_S,
    )
    assert stale.error_code == common_pb2.STALE_BROKER_EPOCH
    unknown = await fake.controller.BrokerHeartbeat(
        controller_pb2.BrokerHeartbeatRequest(broker_id=42, broker_epoch=1), timeout=WAIT_S
    )
    assert unknown.error_code == common_pb2.BROKER_ID_NOT_REGISTERED
    impostor = FakeBroker(1, controller.address)
    try:
        await impostor.start_server()
        response = await impostor.register()
        assert response.error_code == common_pb2.DUPLICATE_BROKER_REGISTRATION
    finally:
        await impostor.stop()


async def test_create_topic_sends_leader_and_isr_to_replicas(
    controller: ControllerApp, brokers: dict[int, FakeBroker]
) -> None:
    result = await create_topic(brokers[1], "orders", partitions=3, rf=3, min_insync_replicas="2")
    assert result.error_code == common_pb2.NONE, result
    described = await describe(controller, "orders")
    assert described.topics[0].configs == {"min.insync.replicas": "2"}
    for meta in described.topics[0].partitions:
        assert meta.leader == meta.replicas[0]
        assert list(meta.isr) == list(meta.replicas)
        assert meta.state == "ONLINE"
        for replica in meta.replicas:
            state = await brokers[replica].wait_for_state(
                ("orders", meta.partition), lambda s: True
            )
            assert state.leader == meta.leader
            assert state.is_new
            assert state.leader_epoch == 0
    too_big = await create_topic(brokers[1], "big", rf=4)
    assert too_big.error_code == common_pb2.INVALID_REPLICATION_FACTOR
    assert too_big.error_message == "replication factor 4 is larger than the 3 available brokers"
    bad_isr = await create_topic(brokers[1], "m", rf=2, min_insync_replicas="3")
    assert bad_isr.error_code == common_pb2.INVALID_CONFIG


async def test_broker_timeout_moves_leader(
    controller: ControllerApp, brokers: dict[int, FakeBroker]
) -> None:
    assert (await create_topic(brokers[1], "t", rf=3)).error_code == common_pb2.NONE
    meta = await partition(controller, "t")
    old_leader = meta.leader
    await brokers[old_leader].stop_heartbeats()

    async def moved() -> common_pb2.PartitionMetadata | None:
        current = await partition(controller, "t")
        return current if current.leader not in (old_leader, -1) else None

    current = await wait_for(moved, what="leader moved away from the silent broker")
    assert old_leader not in current.isr
    assert current.leader_epoch == 1
    assert list(current.offline_replicas) == [old_leader]
    for survivor in (b for b in meta.replicas if b != old_leader):
        state = await brokers[survivor].wait_for_state(("t", 0), lambda s: s.leader_epoch == 1)
        assert state.leader == current.leader
        assert list(state.isr) == list(current.isr)
    cluster = await describe(controller)
    assert [b.fenced for b in cluster.brokers if b.endpoint.broker_id == old_leader] == [True]
    assert await metric(controller, "minikafka_controller_fenced_brokers") == 1
    assert (
        await metric(controller, 'minikafka_controller_leader_elections_total{type="clean"}') == 1
    )


async def test_controlled_shutdown(
    controller: ControllerApp, brokers: dict[int, FakeBroker]
) -> None:
    assert (await create_topic(brokers[1], "t", rf=3)).error_code == common_pb2.NONE
    leader = (await partition(controller, "t")).leader
    fake = brokers[leader]
    response = await fake.controller.ControlledShutdown(
        controller_pb2.ControlledShutdownRequest(broker_id=leader, broker_epoch=fake.broker_epoch),
        timeout=WAIT_S,
    )
    assert response.error_code == common_pb2.NONE
    assert list(response.remaining_partitions) == []
    meta = await partition(controller, "t")
    assert meta.leader != leader
    assert leader not in meta.isr
    await fake.stop_heartbeats()
    final = await fake.heartbeat(want_shutdown=True)
    assert final.should_shut_down
    cluster = await describe(controller)
    (status,) = [b for b in cluster.brokers if b.endpoint.broker_id == leader]
    assert status.fenced
    assert status.in_controlled_shutdown


async def test_unclean_election_scenario(
    controller: ControllerApp, brokers: dict[int, FakeBroker]
) -> None:
    assert (await create_topic(brokers[1], "u", rf=2)).error_code == common_pb2.NONE
    meta = await partition(controller, "u")
    leader, follower = meta.replicas
    # The leader shrinks the ISR to itself (the follower fell behind).
    shrink = await brokers[leader].controller.AlterPartition(
        controller_pb2.AlterPartitionRequest(
            broker_id=leader,
            broker_epoch=brokers[leader].broker_epoch,
            partitions=[
                controller_pb2.AlterPartitionItem(
                    topic="u",
                    partition=0,
                    leader_epoch=meta.leader_epoch,
                    partition_epoch=meta.partition_epoch,
                    new_isr=[leader],
                )
            ],
        ),
        timeout=WAIT_S,
    )
    (item,) = shrink.partitions
    assert item.error_code == common_pb2.NONE
    assert list(item.isr) == [leader]
    assert item.partition_epoch == meta.partition_epoch + 1
    # A stale proposal (old partition epoch) is refused.
    stale = await brokers[leader].controller.AlterPartition(
        controller_pb2.AlterPartitionRequest(
            broker_id=leader,
            broker_epoch=brokers[leader].broker_epoch,
            partitions=[
                controller_pb2.AlterPartitionItem(
                    topic="u",
                    partition=0,
                    leader_epoch=meta.leader_epoch,
                    partition_epoch=meta.partition_epoch,
                    new_isr=[leader, follower],
                )
            ],
        ),
        timeout=WAIT_S,
    )
    assert stale.partitions[0].error_code == common_pb2.INVALID_UPDATE_VERSION
    await brokers[leader].stop_heartbeats()

    async def offline() -> common_pb2.PartitionMetadata | None:
        current = await partition(controller, "u")
        return current if current.leader == -1 else None

    current = await wait_for(offline, what="partition offline")
    assert current.state == "OFFLINE"
    # The fenced last member left the ISR into the eligible leader replicas (KIP-966).
    assert (list(current.isr), list(current.elr)) == ([], [leader])
    assert await metric(controller, "minikafka_controller_offline_partitions") == 1
    assert await metric(controller, "minikafka_controller_partitions_with_empty_isr") == 1
    # Operator override: unclean election although the topic does not allow it. The
    # longest-log strategy surveys the alive replicas first: the follower answers.
    brokers[follower].log_ends[("u", 0)] = (0, 5)
    response = await brokers[follower].controller.ElectLeaders(
        controller_pb2.ElectLeadersRequest(
            election_type=controller_pb2.UNCLEAN,
            partitions=[common_pb2.TopicPartition(topic="u", partition=0)],
        ),
        timeout=WAIT_S,
    )
    (result,) = response.results
    assert result.error_code == common_pb2.NONE
    assert result.leader == follower
    current = await partition(controller, "u")
    assert current.state == "RECOVERING"
    assert list(current.isr) == [follower]
    assert await metric(controller, "minikafka_controller_unclean_leader_elections_total") == 1
    state = await brokers[follower].wait_for_state(("u", 0), lambda s: s.leader == follower)
    assert state.state == "RECOVERING"


async def test_delete_topic_and_alter_configs(
    controller: ControllerApp, brokers: dict[int, FakeBroker]
) -> None:
    assert (await create_topic(brokers[1], "d", rf=2)).error_code == common_pb2.NONE
    altered = await brokers[1].controller.AlterConfigs(
        controller_pb2.AlterConfigsRequest(topic="d", set={"retention.ms": "1000"}),
        timeout=WAIT_S,
    )
    assert altered.error_code == common_pb2.NONE
    replicas = list((await partition(controller, "d")).replicas)

    async def configs_pushed() -> bool:
        return all(
            any(
                c.topic == "d" and c.configs.get("retention.ms") == "1000"
                for r in brokers[b].leader_and_isr
                for c in r.topic_configs
            )
            for b in replicas
        )

    await wait_for(configs_pushed, what="topic configs in LeaderAndIsr")
    deleted = await brokers[1].controller.DeleteTopics(
        controller_pb2.DeleteTopicsRequest(names=["d", "nope"]), timeout=WAIT_S
    )
    assert [t.error_code for t in deleted.topics] == [
        common_pb2.NONE,
        common_pb2.UNKNOWN_TOPIC_OR_PARTITION,
    ]

    async def stopped() -> bool:
        return all(
            any(
                p.topic == "d" and p.delete_partition
                for r in brokers[b].stop_replica
                for p in r.partitions
            )
            for b in replicas
        )

    await wait_for(stopped, what="StopReplica to the replicas")

    async def announced() -> bool:
        return all("d" in b.update_metadata[-1].deleted_topics for b in brokers.values())

    await wait_for(announced, what="deleted topic in UpdateMetadata")


async def test_controller_restart_keeps_epochs_increasing(tmp_path: Path) -> None:
    data_dir = tmp_path / "controller"
    fakes: list[FakeBroker] = []
    try:
        async with ControllerApp(config_for(data_dir)) as first:
            fake = FakeBroker(1, first.address)
            fakes.append(fake)
            await fake.join()
            assert (await create_topic(fake, "keep", rf=1)).error_code == common_pb2.NONE
            epoch_before = fake.broker_epoch
            cluster_before = await describe(first)
            await fake.stop_heartbeats()
        async with ControllerApp(config_for(data_dir)) as second:
            await fake.reconnect(second.address)
            cluster = await describe(second, "keep")
            assert cluster.cluster_id == cluster_before.cluster_id
            assert cluster.controller_epoch == cluster_before.controller_epoch + 1
            assert [t.name for t in cluster.topics] == ["keep"]
            # The broker heartbeats again within its grace period with its old epoch ...
            fake.start_heartbeats()

            async def synced() -> bool:
                return any(
                    r.controller_epoch == cluster.controller_epoch for r in fake.leader_and_isr
                )

            await wait_for(synced, what="LeaderAndIsr with the new controller epoch")
            # ... and a restarted broker gets a strictly newer epoch.
            await fake.stop_heartbeats()
            fake.incarnation_id = "restarted"

            async def reregistered() -> bool:
                response = await fake.register()
                return response.error_code == common_pb2.NONE

            await wait_for(reregistered, what="re-registration after the session expired")
            assert fake.broker_epoch > epoch_before
    finally:
        for fake in fakes:
            await fake.stop()


async def test_automatic_preferred_rebalance(tmp_path: Path) -> None:
    config = config_for(
        tmp_path / "controller",
        auto_leader_rebalance_enable=True,
        leader_imbalance_check_interval_ms=200,
    )
    fakes: dict[int, FakeBroker] = {}
    try:
        async with ControllerApp(config) as app:
            for broker_id in (1, 2):
                fakes[broker_id] = FakeBroker(broker_id, app.address)
                await fakes[broker_id].join()
            assert (await create_topic(fakes[1], "r", rf=2)).error_code == common_pb2.NONE
            meta = await partition(app, "r")
            preferred, other = meta.replicas
            # The preferred leader is bounced: leadership moves to the other replica.
            await fakes[preferred].stop_heartbeats()

            async def moved() -> bool:
                return (await partition(app, "r")).leader == other

            await wait_for(moved, what="leader moved")
            fakes[preferred].incarnation_id = "again"
            await fakes[preferred].join()
            current = await partition(app, "r")
            # Back in sync: the leader expands the ISR, then the rebalance moves it back.
            expand = await fakes[other].controller.AlterPartition(
                controller_pb2.AlterPartitionRequest(
                    broker_id=other,
                    broker_epoch=fakes[other].broker_epoch,
                    partitions=[
                        controller_pb2.AlterPartitionItem(
                            topic="r",
                            partition=0,
                            leader_epoch=current.leader_epoch,
                            partition_epoch=current.partition_epoch,
                            new_isr=[preferred, other],
                            new_isr_with_epochs=[
                                controller_pb2.IsrMember(
                                    broker_id=preferred,
                                    broker_epoch=fakes[preferred].broker_epoch,
                                )
                            ],
                        )
                    ],
                ),
                timeout=WAIT_S,
            )
            assert expand.partitions[0].error_code == common_pb2.NONE

            async def rebalanced() -> bool:
                return (await partition(app, "r")).leader == preferred

            await wait_for(rebalanced, what="automatic preferred election")
            assert (
                await metric(app, 'minikafka_controller_leader_elections_total{type="preferred"}')
                == 1
            )
    finally:
        for fake in fakes.values():
            await fake.stop()


async def test_port_in_use_is_refused(controller: ControllerApp, tmp_path: Path) -> None:
    with pytest.raises(OSError, match="cannot listen on"):
        async with ControllerApp(config_for(tmp_path / "other", listen=controller.address)):
            pass


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [pytest.param("longest-log", 3, id="longest-log"), pytest.param("first-alive", 2, id="first")],
)
async def test_an_unclean_election_picks_by_the_recovery_strategy(
    tmp_path: Path, strategy: str, expected: int
) -> None:
    """Issue 15: with longest-log the controller asks the alive replicas what their logs
    hold and elects the longest (by last leader epoch, then end offset); first-alive takes
    the first alive replica in assignment order, as Kafka does."""
    config = config_for(tmp_path / "controller", unclean_recovery_strategy=strategy)
    fakes: dict[int, FakeBroker] = {}
    async with ControllerApp(config) as app:
        try:
            for broker_id in (1, 2, 3, 4):
                fakes[broker_id] = FakeBroker(broker_id, app.address)
                await fakes[broker_id].join()
            response = await fakes[1].controller.CreateTopics(
                controller_pb2.CreateTopicsRequest(
                    topics=[
                        controller_pb2.CreatableTopic(
                            name="s", replication_factor=3, num_partitions=1
                        )
                    ]
                ),
                timeout=WAIT_S,
            )
            assert response.topics[0].error_code == common_pb2.NONE
            meta = await partition(app, "s")
            leader, *others = meta.replicas
            # Make the others the replicas 2 and 3, in assignment order, out of the ISR.
            shrink = await fakes[leader].controller.AlterPartition(
                controller_pb2.AlterPartitionRequest(
                    broker_id=leader,
                    broker_epoch=fakes[leader].broker_epoch,
                    partitions=[
                        controller_pb2.AlterPartitionItem(
                            topic="s",
                            partition=0,
                            leader_epoch=meta.leader_epoch,
                            partition_epoch=meta.partition_epoch,
                            new_isr=[leader],
                        )
                    ],
                ),
                timeout=WAIT_S,
            )
            assert shrink.partitions[0].error_code == common_pb2.NONE
            await fakes[leader].stop_heartbeats()

            async def offline() -> bool:
                return (await partition(app, "s")).leader == -1

            await wait_for(offline, what="partition offline")
            first, second = others
            fakes[first].log_ends[("s", 0)] = (4, 900)  # more offsets, an older epoch
            fakes[second].log_ends[("s", 0)] = (5, 120)  # a newer epoch: longer history
            elected = await fakes[first].controller.ElectLeaders(
                controller_pb2.ElectLeadersRequest(
                    election_type=controller_pb2.UNCLEAN,
                    partitions=[common_pb2.TopicPartition(topic="s", partition=0)],
                ),
                timeout=WAIT_S,
            )
            (result,) = elected.results
            assert result.error_code == common_pb2.NONE
            assert result.leader == (second if expected == 3 else first)
            surveyed = bool(fakes[first].surveys) and bool(fakes[second].surveys)
            assert surveyed is (strategy == "longest-log")
        finally:
            for fake in fakes.values():
                await fake.stop()
