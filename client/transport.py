"""gRPC plumbing shared by producer, consumer and admin: channels and metadata refresh.

`BrokerConnections` owns one `grpc.aio` channel per broker address, knows the bootstrap
addresses, and keeps the current `ClusterView`, refreshing it from any reachable broker.
`parse_bootstrap` validates the `bootstrap_servers` setting.

Its two ports, `ClientPorts`: how a broker's stub is made (default: a `grpc.aio` channel
per address) and the monotonic clock its deadlines and metadata age are measured on
(default: `time.monotonic`). Production keeps the defaults; the deterministic simulator
(`tests/sim/replication`) passes stubs over its simulated network and its virtual clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final, TypeAlias, TypeVar

import grpc
import grpc.aio
import msgspec

from client.errors import (
    InvalidTopicError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailable,
)
from client.metadata import BrokerInfo, ClusterView
from minikafka.errors import ErrorCode, code_name
from minikafka.grpc_options import channel_options
from minikafka.tls import TlsMaterial, open_channel
from minikafka.topic_config import topic_name_problem
from minikafka.v1 import broker_pb2, broker_pb2_grpc

logger = logging.getLogger(__name__)

#: Clients ping idle connections every 30 s to notice a dead one.
CHANNEL_OPTIONS: Final = tuple(channel_options(keepalive_time_ms=30_000))

#: A metadata request that has not been answered after this long is also sent to the
#: next broker (a paused broker must not hold up the refresh for a whole timeout).
METADATA_HEDGE_S: Final = 0.25

#: While a request is outstanding past its expected time, metadata is refreshed this
#: often to learn whether its partitions' leaders moved away (see `await_unless_moved`).
STALL_CHECK_INTERVAL_S: Final = 0.25

_T = TypeVar("_T")


#: Makes the stub of the broker at an address ("host:port").
StubFactory: TypeAlias = "Callable[[str], broker_pb2_grpc.BrokerServiceAsyncStub]"


class ClientPorts(msgspec.Struct, frozen=True, kw_only=True):
    """How a client reaches brokers and reads time (the `ports` setting of the clients
    that take it). The defaults are production's; tests and the simulator replace them.

    `stub_factory`: the stub of the broker at an address; None: a `grpc.aio` channel per
    address (with the client's TLS settings). `clock_s`: monotonic seconds, for request,
    metadata and `max_block_ms` deadlines (the producer's linger, back-off and delivery
    timeouts read it in milliseconds); its sleeps and waits run on the event loop."""

    stub_factory: StubFactory | None = None
    clock_s: Callable[[], float] = time.monotonic

    def clock_ms(self) -> float:
        """`clock_s` in milliseconds."""
        return self.clock_s() * 1000


class LeaderMoved(Exception):
    """Internal: a request was abandoned because its partitions got a newer leader."""


#: gRPC status codes that mean "this broker cannot be reached right now".
CONNECTION_CODES: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN}
)


def check_topic_name(topic: object) -> str:
    """`topic` if it is a legal topic name; `TypeError` when it is not a `str`,
    `InvalidTopicError` when the brokers could never have such a topic."""
    if not isinstance(topic, str):
        raise TypeError(f"a topic name must be a str, got {type(topic).__name__} {topic!r}")
    problem = topic_name_problem(topic)
    if problem is not None:
        raise InvalidTopicError(problem)
    return topic


def check_number(name: str, value: object, *, minimum: float, integral: bool = False) -> None:
    """Raise `KafkaConfigurationError` unless `value` is a number (an int when
    `integral`; never a bool) of at least `minimum`."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or (integral and not isinstance(number, int)):
        what = "an int" if integral else "a number"
        raise KafkaConfigurationError(
            f"{name} must be {what}, got {type(value).__name__} {value!r}"
        )
    if not number >= minimum:  # also refuses NaN
        raise KafkaConfigurationError(f"{name} must be >= {minimum}, got {value!r}")


def parse_bootstrap(bootstrap_servers: str | Sequence[str]) -> list[str]:
    """`"h:p"`, `"h1:p1,h2:p2"` or a list of those -> list of `host:port` strings."""
    if isinstance(bootstrap_servers, str):
        items = [bootstrap_servers]
    elif isinstance(bootstrap_servers, Iterable):
        items = list(bootstrap_servers)
    else:
        raise TypeError(
            "bootstrap_servers must be 'HOST:PORT[,HOST:PORT...]' or a list of those, got "
            f"{type(bootstrap_servers).__name__}"
        )
    addresses: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"bootstrap_servers entries must be 'HOST:PORT' strings, got {item!r}")
        for part in item.split(","):
            address = part.strip()
            if not address:
                continue
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(
                    f"bad bootstrap server {address!r}: expected HOST:PORT with a port in 1-65535"
                )
            addresses.append(address)
    if not addresses:
        raise ValueError("bootstrap_servers is empty: give at least one HOST:PORT")
    return addresses


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() in CONNECTION_CODES


async def await_unless_moved(
    call: Awaitable[_T],
    *,
    expected_s: float,
    moved: Callable[[], bool],
    refresh: Callable[[], None],
) -> _T:
    """Await a gRPC `call`; once it is outstanding longer than `expected_s`, ask for a
    metadata refresh every `STALL_CHECK_INTERVAL_S` and abandon the call (cancel it,
    raise `LeaderMoved`) as soon as `moved()` says its partitions have a newer leader.

    A paused or partitioned leader never answers (nor resets the connection); without
    this, a client would wait out the whole request timeout before trying the new one.
    """
    task: asyncio.Future[_T] = asyncio.ensure_future(call)
    try:
        wait_s = expected_s
        while True:
            done, _ = await asyncio.wait((task,), timeout=wait_s)
            if done:
                return task.result()
            if moved():
                raise LeaderMoved
            refresh()
            wait_s = STALL_CHECK_INTERVAL_S
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await task


class BrokerConnections:
    """Channels to brokers plus the cluster view; lives on one event loop."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        client_id: str = "minikafka-python",
        tls: TlsMaterial | None = None,
        ports: ClientPorts | None = None,
    ) -> None:
        """`ports`: the stub factory and clock (`ClientPorts`; None: production's)."""
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._tls = tls
        ports = ports or ClientPorts()
        self._stub_factory = ports.stub_factory
        #: Monotonic seconds (`ClientPorts.clock_s`): every deadline of calls made over
        #: these connections reads it.
        self.clock_s = ports.clock_s
        check_number("request_timeout_ms", request_timeout_ms, minimum=1)
        check_number("retry_backoff_ms", retry_backoff_ms, minimum=0)
        check_number("metadata_max_age_ms", metadata_max_age_ms, minimum=0)
        self._rotation = -1
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.client_id = client_id
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, broker_pb2_grpc.BrokerServiceAsyncStub] = {}
        self.view = ClusterView()
        self._view_time_ms = 0.0
        self._topics: set[str] = set()
        self._all_topics = False
        self._refresh_lock = asyncio.Lock()
        self._updated = asyncio.Event()
        self._closed = False

    # ---- channels -------------------------------------------------------------------

    def stub(self, address: str) -> broker_pb2_grpc.BrokerServiceAsyncStub:
        stub = self._stubs.get(address)
        if stub is None:
            if self._stub_factory is not None:
                stub = self._stub_factory(address)
            else:
                channel = open_channel(address, CHANNEL_OPTIONS, self._tls)
                self._channels[address] = channel
                stub = broker_pb2_grpc.BrokerServiceStub(channel)
            self._stubs[address] = stub
        return stub

    def broker_stub(self, broker: BrokerInfo) -> broker_pb2_grpc.BrokerServiceAsyncStub:
        return self.stub(broker.address)

    def any_stub_addresses(self) -> list[str]:
        """Known brokers, then the bootstrap list (deduplicated), starting one further on
        at every call: a broker cut off from the controller answers with stale metadata,
        and repeated refreshes must not keep asking only that one."""
        seen: list[str] = [b.address for b in self.view.brokers.values()]
        for address in self._bootstrap:
            if address not in seen:
                seen.append(address)
        self._rotation = (self._rotation + 1) % max(1, len(seen))
        return seen[self._rotation :] + seen[: self._rotation]

    async def close(self) -> None:
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            await channel.close(grace=None)

    # ---- metadata ---------------------------------------------------------------------

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track these topics' metadata; True when any of them was new. Raises
        (`TypeError`, `InvalidTopicError`) for a name no broker could know, which would
        otherwise be asked for in every later metadata request."""
        names = [check_topic_name(topic) for topic in topics]
        before = len(self._topics)
        self._topics.update(names)
        return len(self._topics) != before

    def track_all_topics(self) -> None:
        self._all_topics = True

    @property
    def timeout_s(self) -> float:
        return self.request_timeout_ms / 1000

    def metadata_stale(self) -> bool:
        return self.clock_s() * 1000 - self._view_time_ms > self.metadata_max_age_ms

    async def refresh(self, topics: Iterable[str] | None = None) -> ClusterView:
        """Fetch metadata (tracked topics plus `topics`) from the first broker that
        answers; raises `NoBrokersAvailable` when none does."""
        if topics is not None:
            self.add_topics(topics)
        async with self._refresh_lock:
            asked = [] if self._all_topics else sorted(self._topics)
            response = await self._first_metadata_answer(asked)
            fresh = ClusterView.from_response(response)
            self.view = self.view.merged(fresh, asked)
            self._view_time_ms = self.clock_s() * 1000
            self._updated.set()
            self._updated = asyncio.Event()
            return self.view

    async def fetch_view(self, topics: Sequence[str]) -> ClusterView:
        """Metadata of `topics` (every topic when empty) from the first broker that
        answers, without tracking them or changing `view`."""
        names = [check_topic_name(topic) for topic in topics]
        return ClusterView.from_response(await self._first_metadata_answer(names))

    async def _first_metadata_answer(self, asked: list[str]) -> broker_pb2.MetadataResponse:
        """Ask brokers in rotation order; a broker silent for `METADATA_HEDGE_S` (or
        failing) gets the next one asked too; the first answer wins."""
        waiting = self.any_stub_addresses()
        pending: dict[asyncio.Task[broker_pb2.MetadataResponse], str] = {}
        errors: list[str] = []
        try:
            while waiting or pending:
                if waiting:
                    address = waiting.pop(0)
                    call = self.stub(address).Metadata(
                        broker_pb2.MetadataRequest(topics=asked), timeout=self.timeout_s
                    )
                    pending[asyncio.ensure_future(call)] = address
                done, _ = await asyncio.wait(
                    pending,
                    timeout=METADATA_HEDGE_S if waiting else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for task in done:
                    address = pending.pop(task)
                    exc = task.exception()
                    if exc is None:
                        return task.result()
                    if not isinstance(exc, grpc.aio.AioRpcError):
                        raise exc
                    errors.append(f"{address}: {exc.code().name} {exc.details()}")
        finally:
            for task in pending:
                task.cancel()
        raise NoBrokersAvailable("no broker answered a metadata request: " + "; ".join(errors))

    async def wait_for_topic(self, topic: str, timeout_ms: int) -> list[int]:
        """Partitions of `topic`, refreshing metadata with back-off until it is known."""
        deadline = self.clock_s() + timeout_ms / 1000
        self.add_topics([topic])
        last_error = ""
        while True:
            partitions = self.view.partitions_for(topic)
            if partitions is not None:
                return partitions
            try:
                await self.refresh()
            except KafkaConnectionError as exc:
                last_error = str(exc)
            partitions = self.view.partitions_for(topic)
            if partitions is not None:
                return partitions
            info = self.view.topics.get(topic)
            if info is not None and info.error_code:
                last_error = code_name(info.error_code)
            remaining = deadline - self.clock_s()
            if remaining <= 0:
                if last_error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name:
                    raise KafkaTimeoutError(
                        f"topic {topic!r} does not exist (the brokers answer {last_error} "
                        f"for it; waited {timeout_ms} ms): create it first"
                    )
                raise KafkaTimeoutError(
                    f"topic {topic!r} not in metadata after {timeout_ms} ms"
                    + (f" ({last_error})" if last_error else "")
                )
            await asyncio.sleep(min(self.retry_backoff_ms / 1000, remaining))
