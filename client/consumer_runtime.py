"""The parts of a started consumer (connections, fetcher, record delivery, metrics)
and how they are wired together."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from client.consumer_config import ConsumerConfig
from client.delivery import RecordDelivery
from client.fetcher import Fetcher
from client.metrics import ConsumerMetrics
from client.records import Deserializer
from client.subscription import SubscriptionState
from client.transport import BrokerConnections, ClientPorts
from minikafka.tls import TlsMaterial


class ConsumerRuntime(NamedTuple):
    """The parts of a started consumer."""

    conn: BrokerConnections
    fetcher: Fetcher
    delivery: RecordDelivery
    metrics: ConsumerMetrics

    @classmethod
    def create(
        cls,
        *,
        config: ConsumerConfig,
        ports: ClientPorts,
        bootstrap_servers: str | Sequence[str],
        client_id: str,
        tls: TlsMaterial | None,
        subscription: SubscriptionState,
        deserializers: tuple[Deserializer | None, Deserializer | None],
        on_metadata: Callable[[], None],
    ) -> ConsumerRuntime:
        """`ports`: how the connections make stubs, and the clock every part reads."""
        clock = ports.clock_s
        conn = BrokerConnections(
            bootstrap_servers,
            request_timeout_ms=int(config.request_timeout_ms),
            retry_backoff_ms=int(config.retry_backoff_ms),
            metadata_max_age_ms=int(config.metadata_max_age_ms),
            client_id=client_id,
            tls=tls,
            ports=ports,
        )
        metrics = ConsumerMetrics(clock() * 1000)
        fetcher = Fetcher(
            settings=config,
            conn=conn,
            subscription=subscription,
            metrics=metrics,
            clock=clock,
            on_metadata=on_metadata,
        )
        key_deserializer, value_deserializer = deserializers
        delivery = RecordDelivery(
            subscription,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            retry_backoff_ms=config.retry_backoff_ms,
            metrics=metrics,
            wake_fetcher=fetcher.wake,
            clock=clock,
        )
        return cls(conn, fetcher, delivery, metrics)
