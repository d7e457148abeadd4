"""The Spark source's wire reader against a `ScriptedBroker`: a new leader that has no
latest offset yet (KIP-207, OFFSET_NOT_AVAILABLE) is asked again, never believed."""

from __future__ import annotations

import asyncio

import pytest

from client.spark.wire import LATEST_TIMESTAMP, WireReader
from minikafka.errors import ErrorCode
from tests.integration.client.scripted_broker import ScriptedBroker, address

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


async def test_the_latest_offset_is_retried_until_the_new_leader_has_one(
    broker: ScriptedBroker,
) -> None:
    broker.latest_offset = 42
    broker.list_offsets_errors = [ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.OFFSET_NOT_AVAILABLE]

    def latest() -> dict[tuple[str, int], int]:
        with WireReader([address(broker)], timeout_ms=10_000) as wire:
            return wire.list_offsets([("t", 0)], LATEST_TIMESTAMP)

    # The reader is synchronous: off the loop that serves the scripted broker.
    assert await asyncio.to_thread(latest) == {("t", 0): 42}
    assert broker.list_offsets_calls == 3
