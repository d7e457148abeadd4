"""The admin client's shell: its connections and lifecycle, and calling any reachable
broker (which forwards to the controller) with failover until the request timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Self, TypeVar

import grpc
import grpc.aio

from client.errors import (
    IllegalStateError,
    KafkaConnectionError,
    NoBrokersAvailable,
    authorization_error,
)
from client.group_admin import GroupCalls
from client.security import client_tls
from client.transport import BrokerConnections
from minikafka.v1 import broker_pb2_grpc

T = TypeVar("T")


class AdminBase:
    """Connections, `close()`, `async with`, and `_call` (any broker, with failover);
    the admin mixins (`client.admin_topics`, `client.admin_cluster`,
    `client.admin_offsets`) build their calls on it."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        *,
        client_id: str = "minikafka-admin",
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_check_hostname: bool = True,
    ) -> None:
        tls = client_tls(
            security_protocol=security_protocol,
            ssl_cafile=ssl_cafile,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            ssl_check_hostname=ssl_check_hostname,
        )
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._conn = BrokerConnections(
            bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            client_id=client_id,
            tls=tls,
        )
        self._closed = False
        self._groups = GroupCalls(
            self._conn, timeout_s=request_timeout_ms / 1000, backoff_s=retry_backoff_ms / 1000
        )

    async def close(self) -> None:
        self._closed = True
        await self._conn.close()

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise IllegalStateError(f"{what}: the admin client is closed")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(
        self, fn: Callable[[broker_pb2_grpc.BrokerServiceAsyncStub], Awaitable[T]], what: str
    ) -> T:
        """Call any reachable broker; connection failures move on to the next one and
        are retried until the request timeout."""
        if self._closed:
            raise IllegalStateError(f"{what}: the admin client is closed")
        deadline = self._conn.clock_s() + self.request_timeout_ms / 1000
        errors: list[str] = []
        while True:
            for address in self._conn.any_stub_addresses():
                try:
                    return await fn(self._conn.stub(address))
                except grpc.aio.AioRpcError as exc:
                    if exc.code() is grpc.StatusCode.PERMISSION_DENIED:
                        raise authorization_error(
                            exc.details() or "", context=f"{what} at {address}"
                        ) from exc
                    if exc.code() not in (
                        grpc.StatusCode.UNAVAILABLE,
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                    ):
                        raise KafkaConnectionError(
                            f"{what} failed at {address}: {exc.code().name} {exc.details()}"
                        ) from exc
                    errors.append(f"{address}: {exc.code().name}")
            if self._conn.clock_s() >= deadline:
                raise NoBrokersAvailable(f"{what}: no broker answered ({'; '.join(errors[-3:])})")
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    @property
    def _timeout_s(self) -> float:
        return self.request_timeout_ms / 1000
