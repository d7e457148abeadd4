"""The producer's shell around its sender: connecting and starting the `Sender`, and
waiting for what an append lacked (topic metadata or buffer space) until
`max_block_ms`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from client.accumulator import RecordAccumulator
from client.errors import KafkaTimeoutError
from client.metrics import ProducerMetrics
from client.producer_config import ProducerConfig
from client.sender import Sender
from client.sequences import SequenceTracker
from client.transport import BrokerConnections, ClientPorts
from minikafka.tls import TlsMaterial


async def start_sender(
    *,
    config: ProducerConfig,
    clock: Callable[[], float],
    bootstrap_servers: str | Sequence[str],
    client_id: str,
    tls: TlsMaterial | None,
    accumulator: RecordAccumulator,
    sequences: SequenceTracker,
    metrics: ProducerMetrics,
    ports: ClientPorts | None = None,
) -> tuple[BrokerConnections, Sender]:
    """Connections with fresh metadata and a `Sender` holding a producer id when
    idempotent (not started yet); the connections are closed when either fails.
    `ports`: how the connections make stubs and read time (None: production's)."""
    conn = BrokerConnections(
        bootstrap_servers,
        request_timeout_ms=int(config.request_timeout_ms),
        retry_backoff_ms=int(config.retry_backoff_ms),
        metadata_max_age_ms=int(config.metadata_max_age_ms),
        client_id=client_id,
        tls=tls,
        ports=ports,
    )
    sender = Sender(
        config=config,
        conn=conn,
        accumulator=accumulator,
        sequences=sequences,
        metrics=metrics,
        clock=clock,
    )
    try:
        await conn.refresh()
        if config.idempotent:
            await sender.init_producer_id()
    except BaseException:
        await conn.close()
        raise
    return conn, sender


async def wait_for_append(
    what: str,
    topic: str,
    deadline: float,
    clock: Callable[[], float],
    max_block_ms: float,
    sender: Sender,
    conn: BrokerConnections,
) -> None:
    """Wait for what an append lacked ("metadata" of `topic`, or "buffer" space);
    `KafkaTimeoutError` once `deadline` (clock ms: `max_block_ms` after the call) has
    passed."""
    remaining_ms = deadline - clock()
    if remaining_ms <= 0:
        raise KafkaTimeoutError(f"send blocked longer than max_block_ms={max_block_ms} ({what})")
    if what == "metadata":
        await conn.wait_for_topic(topic, int(remaining_ms))
        return
    sender.space_freed.clear()
    sender.wake()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(sender.space_freed.wait(), remaining_ms / 1000)
