"""A quorum of three real controllers on 127.0.0.1 (in this process) with fake brokers.

What the quorum adds to one controller: exactly one is active, the standbys replay the
committed log and refuse every call with NOT_CONTROLLER (DescribeQuorum names the leader),
a fail-over keeps every registration, topic and epoch (the controller epoch is the Raft
epoch, so it only grows), a wiped voter catches up before it votes, and a controller of
another cluster is refused.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from controller.app import ControllerApp
from controller.config import ControllerConfig
from controller.journal import JOURNAL_FILE, Journal
from controller.metadata_dir import MetadataDirError
from controller.model import TopicRecord
from controller.records import ClusterIdRecord, ControllerEpochRecord, TopicUpsertRecord
from minikafka.v1 import common_pb2, controller_pb2, controller_pb2_grpc, raft_pb2
from tests.integration.controller.fake_broker import WAIT_S, FakeBroker, wait_for
from tests.support.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

CLUSTER_ID = "quorum-test"
NOT_CONTROLLER = common_pb2.NOT_CONTROLLER


class Quorum:
    """Three ControllerApps of one quorum; each can be stopped and started again."""

    def __init__(self, root: Path, *, size: int = 3) -> None:
        self.root = root
        self.addresses = {node_id: f"127.0.0.1:{free_port()}" for node_id in range(1, size + 1)}
        self.apps: dict[int, ControllerApp] = {}

    def config(self, node_id: int, *, cluster_id: str = CLUSTER_ID) -> ControllerConfig:
        return ControllerConfig(
            node_id=node_id,
            listen=self.addresses[node_id],
            data_dir=str(self.root / f"controller-{node_id}"),
            quorum=",".join(f"{n}@{a}" for n, a in self.addresses.items()),
            cluster_id=cluster_id,
            session_timeout_ms=1500,
            heartbeat_interval_ms=50,
            auto_leader_rebalance_enable=False,
        )

    async def start(self, node_id: int) -> ControllerApp:
        app = ControllerApp(self.config(node_id))
        await app.__aenter__()
        self.apps[node_id] = app
        return app

    async def stop(self, node_id: int) -> None:
        app = self.apps.pop(node_id)
        await app.__aexit__(None, None, None)

    async def stop_all(self) -> None:
        for node_id in list(self.apps):
            await self.stop(node_id)

    async def active(self, *, not_in: tuple[int, ...] = ()) -> ControllerApp:
        async def one_active() -> ControllerApp | None:
            active = [
                app
                for node_id, app in self.apps.items()
                if node_id not in not_in and app.quorum is not None and app.engine.is_active
            ]
            return active[0] if len(active) == 1 else None

        return await wait_for(one_active, timeout_s=20, what="exactly one active controller")


@pytest.fixture
async def quorum(tmp_path: Path) -> AsyncIterator[Quorum]:
    group = Quorum(tmp_path)
    try:
        await asyncio.gather(*(group.start(node_id) for node_id in group.addresses))
        yield group
    finally:
        await group.stop_all()


async def describe_quorum(address: str) -> raft_pb2.DescribeQuorumResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        return await stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=WAIT_S)


async def create_topic(broker: FakeBroker, name: str, rf: int) -> controller_pb2.TopicResult:
    response = await broker.controller.CreateTopics(
        controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.CreatableTopic(name=name, num_partitions=2, replication_factor=rf)
            ]
        ),
        timeout=WAIT_S,
    )
    (result,) = response.topics
    return result


async def test_one_active_controller_and_standbys_that_replay(quorum: Quorum) -> None:
    active = await quorum.active()
    standbys = [app for app in quorum.apps.values() if app is not active]
    samples = {
        node_id: app.metrics.registry.get_sample_value(
            "minikafka_controller_active_controller_count"
        )
        or 0.0
        for node_id, app in quorum.apps.items()
    }
    assert sorted(samples.values()) == [0, 0, 1]
    assert samples[active.config.node_id] == 1
    epoch = active.metrics.registry.get_sample_value("minikafka_controller_raft_epoch")
    assert epoch == active.engine.state.controller_epoch
    fakes = [FakeBroker(broker_id, active.address) for broker_id in (1, 2, 3)]
    try:
        for fake in fakes:
            await fake.join()
        assert (await create_topic(fakes[0], "t", rf=3)).error_code == common_pb2.NONE
        # The standbys hold the committed state without serving it.
        for standby in standbys:

            async def replayed(standby: ControllerApp = standby) -> bool:
                return "t" in standby.engine.state.topics

            await wait_for(replayed, what="standby replays the topic")
            assert not standby.engine.is_active
            assert standby.engine.state.controller_epoch == active.engine.state.controller_epoch
            stranger = FakeBroker(9, standby.address)
            try:
                await stranger.start_server()
                assert (await stranger.register()).error_code == NOT_CONTROLLER
                refused = await create_topic(stranger, "u", rf=1)
                assert refused.error_code == NOT_CONTROLLER
                assert "not the active controller" in refused.error_message
            finally:
                await stranger.stop()
            view = await describe_quorum(standby.address)
            assert not view.active
            assert view.role == "follower"
            assert view.leader_id == active.config.node_id
            assert view.leader_address == active.address
        # The leader's view has every voter's replication state.
        leader_view = await describe_quorum(active.address)
        assert leader_view.active
        assert leader_view.cluster_id == CLUSTER_ID
        assert sorted(r.node_id for r in leader_view.replicas) == [1, 2, 3]
        assert leader_view.leader_epoch == active.engine.state.controller_epoch
        registry = active.metrics.registry
        assert registry.get_sample_value("minikafka_controller_commit_latency_seconds_count")
        elections = registry.get_sample_value("minikafka_controller_elections_total")
        assert elections is not None
        assert elections >= 1  # it stood at least once (a split vote adds rounds)
        for voter in ("1", "2", "3"):
            lag = registry.get_sample_value(
                "minikafka_controller_follower_lag_records", {"voter": voter}
            )
            assert lag is not None
    finally:
        for fake in fakes:
            await fake.stop()


async def test_fail_over_keeps_registrations_topics_and_grows_the_epoch(quorum: Quorum) -> None:
    first = await quorum.active()
    fakes = [FakeBroker(broker_id, first.address) for broker_id in (1, 2, 3)]
    try:
        for fake in fakes:
            await fake.join()
        assert (await create_topic(fakes[0], "keep", rf=3)).error_code == common_pb2.NONE
        epochs = {fake.broker_id: fake.broker_epoch for fake in fakes}
        old_epoch = first.engine.state.controller_epoch
        for fake in fakes:
            await fake.stop_heartbeats()
        await quorum.stop(first.config.node_id)  # a graceful stop: it resigns
        second = await quorum.active()
        assert second.engine.state.controller_epoch > old_epoch
        assert "keep" in second.engine.state.topics
        for fake in fakes:
            await fake.reconnect(second.address)
            # Same registration: the new active controller knows it (no STALE_BROKER_EPOCH).
            reply = await fake.heartbeat()
            assert reply.error_code == common_pb2.NONE, reply
            assert reply.controller_epoch == second.engine.state.controller_epoch
            assert fake.broker_epoch == epochs[fake.broker_id]
            fake.start_heartbeats()

        async def synced() -> bool:
            return all(
                any(
                    r.controller_epoch == second.engine.state.controller_epoch
                    for r in f.leader_and_isr
                )
                for f in fakes
            )

        await wait_for(synced, what="full sync of every broker by the new active controller")
        assert not any(b.fenced for b in second.engine.state.brokers.values())
    finally:
        for fake in fakes:
            await fake.stop()


async def test_a_wiped_voter_catches_up_before_it_votes(
    quorum: Quorum, caplog: pytest.LogCaptureFixture
) -> None:
    active = await quorum.active()
    wiped = next(node_id for node_id in quorum.apps if node_id != active.config.node_id)
    fake = FakeBroker(1, active.address)
    try:
        await fake.join()
        assert (await create_topic(fake, "before", rf=1)).error_code == common_pb2.NONE
        await quorum.stop(wiped)
        shutil.rmtree(quorum.root / f"controller-{wiped}")
        assert (await create_topic(fake, "during", rf=1)).error_code == common_pb2.NONE
        caplog.set_level("INFO", logger="controller.metadata_dir")
        app = await quorum.start(wiped)

        async def caught_up() -> bool:
            return app.quorum is not None and {"before", "during"} <= set(app.engine.state.topics)

        await wait_for(caught_up, what="the wiped voter catches up")
        formatted = [r.getMessage() for r in caplog.records if "formatted" in r.getMessage()]
        assert formatted
        assert formatted[-1].endswith("(votes once caught up from the leader)")
        view = await describe_quorum(app.address)
        assert view.can_vote  # caught up: it votes again
        assert view.leader_id == active.config.node_id
    finally:
        await fake.stop()


async def test_a_controller_of_another_cluster_is_refused(quorum: Quorum) -> None:
    await quorum.active()
    stranger = Quorum(quorum.root / "other")
    stranger.addresses = {**quorum.addresses, 4: f"127.0.0.1:{free_port()}"}
    app = ControllerApp(stranger.config(4, cluster_id="another-cluster"))
    async with app:
        with pytest.raises(MetadataDirError, match="belongs to cluster 'quorum-test'"):
            await app.wait()


async def test_a_single_controller_journal_is_converted(tmp_path: Path) -> None:
    data_dir = tmp_path / "controller"
    journal, _ = Journal.open(data_dir)
    journal.append(
        [
            ClusterIdRecord(cluster_id="legacy"),
            ControllerEpochRecord(controller_id=0, controller_epoch=7),
            TopicUpsertRecord(topic=TopicRecord(name="old", num_partitions=1)),
        ]
    )
    journal.close()
    config = ControllerConfig(data_dir=str(data_dir), listen="127.0.0.1:0")
    async with ControllerApp(config) as app:
        state = app.engine.state
        assert state.cluster_id == "legacy"
        assert "old" in state.topics
        assert state.controller_epoch == 8  # the Raft epoch after the journal's 7
        assert state.metadata_offset > 3
    assert not (data_dir / JOURNAL_FILE).exists()
    assert (data_dir / (JOURNAL_FILE + ".migrated")).exists()
    async with ControllerApp(config) as app:  # and it restarts from the Raft log
        assert app.engine.state.controller_epoch == 9
        assert "old" in app.engine.state.topics


async def test_a_quorum_refuses_a_journal(tmp_path: Path) -> None:
    group = Quorum(tmp_path)
    journal, _ = Journal.open(tmp_path / "controller-1")
    journal.append([ClusterIdRecord(cluster_id=CLUSTER_ID)])
    journal.close()
    app = ControllerApp(group.config(1))
    async with app:
        with pytest.raises(MetadataDirError, match="single-controller metadata journal"):
            await app.wait()
