"""Session expiry driven by a manual clock: deterministic fencing through the real engine."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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


async def test_the_late_end_of_a_replaced_heartbeat_stream_does_not_fence_the_broker(
    tmp_path: Path,
) -> None:
    """Issue 14: a broker's connection breaks and it reconnects its heartbeat stream with
    the same epoch; the old stream's end reaches the controller only afterwards. That late
    end must not fence a broker that is heartbeating on its new stream."""
    config = ControllerConfig(
        data_dir=str(tmp_path),
        listen="127.0.0.1:0",
        session_timeout_ms=60_000,
        heartbeat_interval_ms=100,
        auto_leader_rebalance_enable=False,
    )
    fake: FakeBroker | None = None
    async with ControllerApp(config) as app:
        try:
            fake = FakeBroker(1, app.address)
            await fake.join()
            await fake.stop_heartbeats()
            processed = asyncio.Event()
            broken = app.engine.heartbeat_stream_broken

            async def observed(**kwargs: Any) -> None:
                await broken(**kwargs)
                processed.set()

            app.engine.heartbeat_stream_broken = observed  # type: ignore[method-assign]
            request = controller_pb2.BrokerHeartbeatRequest(
                broker_id=1, broker_epoch=fake.broker_epoch, metadata_offset=fake.metadata_offset
            )
            old_stream = fake.controller.BrokerHeartbeatStream(iter([request] * 1000))
            first = await old_stream.read()
            assert isinstance(first, controller_pb2.BrokerHeartbeatResponse)
            assert first.error_code == common_pb2.NONE
            new_stream = fake.controller.BrokerHeartbeatStream(iter([request] * 1000))
            second = await new_stream.read()
            assert isinstance(second, controller_pb2.BrokerHeartbeatResponse)
            assert second.error_code == common_pb2.NONE
            old_stream.cancel()  # the old connection's end arrives late
            await asyncio.wait_for(processed.wait(), WAIT_S)
            assert not app.engine.state.brokers[1].fenced
            # The current stream breaking still fences at once.
            processed.clear()
            new_stream.cancel()
            await asyncio.wait_for(processed.wait(), WAIT_S)
            assert app.engine.state.brokers[1].fenced
        finally:
            if fake is not None:
                await fake.stop()
