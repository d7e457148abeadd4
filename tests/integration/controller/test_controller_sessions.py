"""Session expiry driven by a manual clock: deterministic fencing through the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.app import ControllerApp
from controller.config import ControllerConfig
from controller.liveness import ManualClock
from minikafka.v1 import common_pb2, controller_pb2
from tests.integration.controller.fake_broker import WAIT_S, FakeBroker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_session_expiry_follows_the_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(now_ms=0)
    config = ControllerConfig(
        data_dir=str(tmp_path),
        listen="127.0.0.1:0",
        session_timeout_ms=1000,
        heartbeat_interval_ms=100,
        auto_leader_rebalance_enable=False,
    )
    fakes: dict[int, FakeBroker] = {}
    try:
        async with ControllerApp(config, clock=clock) as app:
            for broker_id in (1, 2):
                fake = FakeBroker(broker_id, app.address)
                fakes[broker_id] = fake
                await fake.start_server()
                assert (await fake.register()).error_code == common_pb2.NONE

                async def unfenced(fake: FakeBroker = fake) -> bool:
                    return not (await fake.heartbeat()).is_fenced

                await wait_for(unfenced, what=f"broker {broker_id} unfenced")
            response = await fakes[1].controller.CreateTopics(
                controller_pb2.CreateTopicsRequest(
                    topics=[
                        controller_pb2.CreatableTopic(
                            name="s", num_partitions=2, replication_factor=2
                        )
                    ]
                ),
                timeout=WAIT_S,
            )
            assert response.topics[0].error_code == common_pb2.NONE
            clock.advance(500)
            await fakes[2].heartbeat()  # broker 2 stays alive until 1500
            clock.advance(499)
            assert await app.engine.expire_sessions() == []
            clock.advance(2)  # 1001: broker 1's session (deadline 1000) has run out
            await app.engine.expire_sessions()
            state = app.engine.state
            assert state.brokers[1].fenced
            assert not state.brokers[2].fenced
            for part in state.partitions.values():
                assert part.leader == 2
                assert part.isr == (2,)
            # Broker 1 heartbeats again with its epoch: fenced until it has caught up.
            reply = await fakes[1].heartbeat()
            assert reply.error_code == common_pb2.NONE
            assert reply.is_fenced

            async def caught_up() -> bool:
                return not (await fakes[1].heartbeat()).is_fenced

            await wait_for(caught_up, what="broker 1 unfenced after a full sync")
            assert not app.engine.state.brokers[1].fenced
            # It is not back in any ISR: only the leader's AlterPartition can add it.
            assert all(part.isr == (2,) for part in app.engine.state.partitions.values())
    finally:
        for fake in fakes.values():
            await fake.stop()
