"""The `broker` fixture: a `ScriptedBroker` with two partitions, served on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.client.scripted_broker import ScriptedBroker, serving


@pytest.fixture
async def broker() -> AsyncIterator[ScriptedBroker]:
    async with serving(ScriptedBroker(partitions=2)) as servicer:  # type: ignore[abstract]
        yield servicer
