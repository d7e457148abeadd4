"""The Spark wire reader's connection side: its channels (opened lazily in the process
that uses them), the cluster metadata snapshot it refreshes, and the bounded back-off
between retries."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final, Self

import grpc
import msgspec

from client.security import client_tls
from client.spark.errors import SourceReadError
from client.spark.offsets import TP
from client.spark.options import DEFAULT_FETCH, FetchConfig, TlsSettings
from minikafka.errors import ErrorCode
from minikafka.grpc_options import channel_options
from minikafka.tls import open_sync_channel
from minikafka.v1 import broker_pb2, broker_pb2_grpc

_CONNECTION_CODES: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
    }
)
METADATA_TIMEOUT_S: Final = 2.0
BACKOFF_INITIAL_S: Final = 0.05
BACKOFF_MAX_S: Final = 1.0


class PartitionLeader(msgspec.Struct, frozen=True, kw_only=True):
    leader: int
    leader_epoch: int


class ClusterSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Brokers, existing topics and partition leaders as one broker reported them."""

    brokers: dict[int, str]
    topics: frozenset[str]
    partitions: dict[TP, PartitionLeader]

    def partitions_of(self, topic: str) -> list[TP]:
        return sorted(tp for tp in self.partitions if tp[0] == topic)


class Backoff:
    """Exponential back-off between retries (the only waiting this module does)."""

    def __init__(self) -> None:
        self._delay_s = BACKOFF_INITIAL_S

    def sleep(self, deadline: float) -> None:
        time.sleep(max(0.0, min(self._delay_s, deadline - time.monotonic())))
        self._delay_s = min(self._delay_s * 2, BACKOFF_MAX_S)

    def reset(self) -> None:
        self._delay_s = BACKOFF_INITIAL_S


def is_connection_error(exc: grpc.RpcError) -> bool:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    return code in _CONNECTION_CODES


class WireBase:
    """Channels and metadata of one `client.spark.wire.WireReader`; close() when done."""

    def __init__(
        self,
        bootstrap_servers: Sequence[str],
        *,
        timeout_ms: int,
        tls: TlsSettings | None = None,
        fetch: FetchConfig = DEFAULT_FETCH,
    ) -> None:
        if not bootstrap_servers:
            raise ValueError("bootstrap_servers is empty")
        #: The files are read here, where the reader runs (driver or executor).
        self._tls = (
            client_tls(
                security_protocol="SSL",
                ssl_cafile=tls.ssl_cafile,
                ssl_certfile=tls.ssl_certfile,
                ssl_keyfile=tls.ssl_keyfile,
                ssl_check_hostname=True,
            )
            if tls is not None
            else None
        )
        self._bootstrap = list(bootstrap_servers)
        self._timeout_s = timeout_ms / 1000
        self._fetch = fetch
        self._rpc_timeout_s = fetch.request_timeout_ms / 1000
        self._channels: dict[str, grpc.Channel] = {}
        self._snapshot: ClusterSnapshot | None = None
        self._preferred: str | None = None  # the last address that answered metadata

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _stub(self, address: str) -> broker_pb2_grpc.BrokerServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = open_sync_channel(address, channel_options(), self._tls)
            self._channels[address] = channel
        return broker_pb2_grpc.BrokerServiceStub(channel)

    # ---- metadata --------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot if self._snapshot is not None else self.refresh()

    def refresh(self) -> ClusterSnapshot:
        """Metadata for every topic from the first broker that answers (bounded)."""
        deadline = time.monotonic() + self._timeout_s
        backoff = Backoff()
        errors: dict[str, str] = {}
        while True:
            known = list(self._snapshot.brokers.values()) if self._snapshot else []
            first = [self._preferred] if self._preferred else []
            for address in dict.fromkeys([*first, *self._bootstrap, *known]):
                try:
                    reply = self._stub(address).Metadata(
                        broker_pb2.MetadataRequest(), timeout=METADATA_TIMEOUT_S
                    )
                except grpc.RpcError as exc:
                    errors[address] = str(exc.code()) if isinstance(exc, grpc.Call) else str(exc)
                    if self._preferred == address:
                        self._preferred = None
                    continue
                self._preferred = address
                self._snapshot = snapshot_of(reply)
                return self._snapshot
            if time.monotonic() >= deadline:
                raise SourceReadError(
                    f"no broker answered a metadata request within {self._timeout_s:.0f}s: "
                    + ", ".join(f"{a}: {e}" for a, e in sorted(errors.items()))
                )
            backoff.sleep(deadline)


def snapshot_of(reply: broker_pb2.MetadataResponse) -> ClusterSnapshot:
    brokers = {b.broker_id: f"{b.host}:{b.port}" for b in reply.brokers}
    topics: set[str] = set()
    partitions: dict[TP, PartitionLeader] = {}
    for topic in reply.topics:
        if topic.error_code != ErrorCode.NONE:
            continue
        topics.add(topic.name)
        for part in topic.partitions:
            partitions[(topic.name, part.partition)] = PartitionLeader(
                leader=part.leader, leader_epoch=part.leader_epoch
            )
    return ClusterSnapshot(brokers=brokers, topics=frozenset(topics), partitions=partitions)
