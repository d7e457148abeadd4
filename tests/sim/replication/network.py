"""The simulated network: in-memory gRPC stubs that carry each call, through seeded faults,
to the real servicer of the target process.

Every port of the broker and controller shells is a gRPC stub (`ControllerLink`,
`Dispatcher`, `GrpcLeaderEndpoint` take a `connect` / `stub`), so the simulator hands them
`SimStub`s: the request is encoded and decoded (the wire format runs), delayed, maybe
dropped or duplicated, handled by the target's servicer in a task of that process (a crash
cancels it), and the answer travels back the same way. Per directed link (one-way too) a
`LinkState` can cut the link; a cut costs the caller its deadline (`DEADLINE_EXCEEDED`, as
a black-holed TCP connection does), a randomly lost message is a broken connection
(`UNAVAILABLE` at once), and so is a dead process (connection refused). A lost answer is
the interesting case: the request was handled but the caller cannot know.

The controller's heartbeat stream (bidirectional) is `SimStreamCall`: in-order delivery,
no loss or duplication (TCP), messages into a cut link are lost (the stream stalls), and a
crash of either side or a cancel by the client ends it on both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Protocol

import grpc
import grpc.aio
from google.protobuf.message import Message as ProtoMessage

_ARRIVED, _RESET, _BLACK_HOLED = "arrived", "reset", "black-holed"

#: A call without a deadline (the heartbeat stream's unary cousins always have one).
DEFAULT_DEADLINE_S = 30.0


class ProcessHost(Protocol):
    """A simulated process as the network sees it."""

    name: str

    @property
    def alive(self) -> bool: ...

    @property
    def powered_off(self) -> bool:
        """Down by a power loss (its connections die without a reset)."""

    def servicer(self, service: str) -> object | None:
        """The servicer object for `service` ("ControllerService", ...), None if not served."""

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `work` as a task of this process (cancelled when the process crashes)."""

    async def wait_unpaused(self) -> None:
        """Returns at once unless the process is paused (then when it is resumed)."""


class AnswerTrap(Protocol):
    """An adversarial delivery fault armed on a link (`Network.trap_answer`): it catches
    one answer travelling that link and decides when it arrives."""

    def catches(self, method: str, request: ProtoMessage, answer: ProtoMessage) -> bool:
        """Whether this is the answer to hold (the trap is spent once it returns True)."""

    async def release(self, request: ProtoMessage, answer: ProtoMessage) -> None:
        """Returns when the held answer is to arrive (bounded: nothing is lost)."""


class LinkState:
    """Faults on one directed link."""

    __slots__ = (
        "answer_delay_s",
        "answer_delay_until_s",
        "answer_trap",
        "cut",
        "drop_rate",
        "duplicate_rate",
        "held_until_s",
        "max_delay_ms",
    )

    def __init__(self, *, drop_rate: float, duplicate_rate: float, max_delay_ms: int) -> None:
        self.cut = False
        #: Armed by `Network.trap_answer`: holds the next answer it catches on this link.
        self.answer_trap: AnswerTrap | None = None
        #: Virtual time until which the link is stalled (`Network.hold`): a message that
        #: would arrive before then arrives then instead (nothing lost).
        self.held_until_s = 0.0
        #: Set by `Network.slow_answers`: until `answer_delay_until_s` (virtual time) every
        #: answer on this link arrives `answer_delay_s` late (requests are not slowed).
        self.answer_delay_s = 0.0
        self.answer_delay_until_s = 0.0
        self.drop_rate = drop_rate
        self.duplicate_rate = duplicate_rate
        self.max_delay_ms = max_delay_ms


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def _copy(message: ProtoMessage) -> ProtoMessage:
    """What the receiver sees: the message through its wire encoding."""
    return type(message).FromString(message.SerializeToString())


class SimContext:
    """The servicer's view of one call: the few `ServicerContext` methods servicers use."""

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self._done: list[Callable[[Any], None]] = []

    def peer(self) -> str:
        return self._peer

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise rpc_error(code, details)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._done.append(callback)

    def finish(self) -> None:
        callbacks, self._done = self._done, []
        for callback in callbacks:
            callback(self)


class Network:
    """Processes by address, links between them, and the seeded randomness of delivery."""

    def __init__(
        self,
        rng: random.Random,
        *,
        drop_rate: float,
        duplicate_rate: float,
        max_delay_ms: int,
    ) -> None:
        self.rng = rng
        self._defaults = (drop_rate, duplicate_rate, max_delay_ms)
        self.hosts: dict[str, ProcessHost] = {}  # address -> process
        self.by_name: dict[str, ProcessHost] = {}
        self.links: dict[tuple[str, str], LinkState] = {}  # (from, to) process names
        self.messages = 0
        self.dropped = 0
        self.duplicated = 0

    def add(self, address: str, host: ProcessHost) -> None:
        self.hosts[address] = host
        self.by_name[host.name] = host

    def link(self, source: str, target: str) -> LinkState:
        key = (source, target)
        state = self.links.get(key)
        if state is None:
            drop, duplicate, delay = self._defaults
            state = LinkState(drop_rate=drop, duplicate_rate=duplicate, max_delay_ms=delay)
            self.links[key] = state
        return state

    def set_cut(self, source: str, target: str, cut: bool) -> None:
        self.link(source, target).cut = cut

    def heal(self) -> None:
        for state in self.links.values():
            state.cut = False

    def hold(self, source: str, target: str, until_s: float) -> None:
        """Stall the directed link until virtual time `until_s`, then flush it: what a TCP
        connection does behind a congested switch or across a retransmission timeout.
        Unlike a cut nothing is lost, so a caller whose deadline is longer than the stall
        gets its (by then perhaps stale) answer: the "delayed responses" of issue 17."""
        state = self.link(source, target)
        state.held_until_s = max(state.held_until_s, until_s)

    def trap_answer(self, source: str, target: str, trap: AnswerTrap) -> None:
        """Arm `trap` on the directed link: the next answer from `source` to `target` it
        catches arrives when the trap releases it (a later trap replaces an unsprung one)."""
        self.link(source, target).answer_trap = trap

    def slow_answers(self, source: str, target: str, delay_s: float, until_s: float) -> None:
        """Until virtual time `until_s`, every answer from `source` to `target` arrives
        `delay_s` late (in order, nothing lost): a congested or long path one way, so the
        follower `target` trails its leader `source` by about that much while its fetches
        still come often enough to keep it in the ISR. Requests on the link are not slowed
        (a follower's own fetches to `source`, should roles swap, run at normal speed)."""
        state = self.link(source, target)
        state.answer_delay_s = delay_s
        state.answer_delay_until_s = until_s

    def quiet(self) -> None:
        """A lossless network from now on (the final phase)."""
        self._defaults = (0.0, 0.0, self._defaults[2])
        for state in self.links.values():
            state.answer_trap = None
            state.cut = False
            state.held_until_s = 0.0
            state.answer_delay_until_s = 0.0
            state.drop_rate = 0.0
            state.duplicate_rate = 0.0

    def _delay_s(self, state: LinkState) -> float:
        return self.rng.randint(0, state.max_delay_ms) / 1000

    async def transit(self, source: str, target: str) -> bool:
        """One message's trip: its delay, then whether it arrived. A paused sender's
        messages leave when it resumes (so they arrive late, as after a long GC pause)."""
        return await self._transit(source, target) is _ARRIVED

    async def _transit(self, source: str, target: str) -> str:
        """`_ARRIVED`, `_RESET` (a random loss: the connection broke, the caller learns it
        at once) or `_BLACK_HOLED` (a cut link: the caller waits for its deadline)."""
        sender = self.by_name.get(source)
        if sender is not None:
            await sender.wait_unpaused()
        state = self.link(source, target)
        self.messages += 1
        await asyncio.sleep(self._delay_s(state))
        held_s = state.held_until_s - asyncio.get_running_loop().time()
        if held_s > 0:
            await asyncio.sleep(held_s)
        if state.cut:
            self.dropped += 1
            return _BLACK_HOLED
        if self.rng.random() < state.drop_rate:
            self.dropped += 1
            return _RESET
        return _ARRIVED

    async def _lost(self, fate: str, what: str) -> None:
        if fate is _BLACK_HOLED:
            await asyncio.Event().wait()  # the caller waits for its deadline
        raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"connection reset: {what}")

    def stub(self, source: str, address: str, service: str) -> SimStub:
        return SimStub(self, source, address, service)

    async def unary(
        self,
        source: str,
        address: str,
        service: str,
        method: str,
        request: ProtoMessage,
        timeout_s: float | None,
    ) -> ProtoMessage:
        deadline_s = DEFAULT_DEADLINE_S if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(deadline_s):
                return await self._unary(source, address, service, method, request)
        except TimeoutError:
            raise rpc_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"{service}.{method} to {address}"
            ) from None

    async def _unary(
        self, source: str, address: str, service: str, method: str, request: ProtoMessage
    ) -> ProtoMessage:
        target = self.hosts.get(address)
        if target is None:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"no process at {address}")
        fate = await self._transit(source, target.name)
        if fate is not _ARRIVED:
            await self._lost(fate, f"{service}.{method} to {address}")
        if not target.alive:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"{target.name} is down")
        servicer = target.servicer(service)
        if servicer is None:
            raise rpc_error(grpc.StatusCode.UNIMPLEMENTED, f"{target.name} serves no {service}")
        handler = getattr(servicer, method)
        # Only between the cluster's processes, whose protocols must tolerate a request
        # delivered twice (a retry over a new connection); a plain client's produce is
        # not idempotent, so a copy of it is a legitimate duplicate, not a finding.
        if (
            source in self.by_name
            and self.rng.random() < self.link(source, target.name).duplicate_rate
        ):
            self.duplicated += 1
            target.spawn(self._duplicate(source, target, handler, request), f"dup-{method}")
        handled = target.spawn(self._handle(source, target, handler, request), method)
        try:
            response = await asyncio.shield(handled)
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if not handled.done() or (caller is not None and caller.cancelling()):
                handled.cancel()  # the caller gave up: gRPC cancels the server's handler
                raise
            # the server process crashed while handling it
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"{target.name} went down") from None
        fate = await self._transit(target.name, source)
        if fate is not _ARRIVED:  # handled, but the caller cannot know
            await self._lost(fate, f"the answer of {service}.{method} from {address}")
        back = self.link(target.name, source)
        if back.answer_delay_until_s > asyncio.get_running_loop().time():
            await asyncio.sleep(back.answer_delay_s)
        trap = back.answer_trap
        if trap is not None and trap.catches(method, request, response):
            back.answer_trap = None
            await trap.release(request, response)
        return _copy(response)

    async def _handle(
        self,
        source: str,
        target: ProcessHost,
        handler: Callable[[ProtoMessage, SimContext], Coroutine[Any, Any, ProtoMessage]],
        request: ProtoMessage,
    ) -> ProtoMessage:
        await target.wait_unpaused()
        context = SimContext(source)
        try:
            return await handler(_copy(request), context)
        finally:
            context.finish()

    async def _duplicate(
        self,
        source: str,
        target: ProcessHost,
        handler: Callable[[ProtoMessage, SimContext], Coroutine[Any, Any, ProtoMessage]],
        request: ProtoMessage,
    ) -> None:
        await asyncio.sleep(self._delay_s(self.link(source, target.name)))
        with contextlib.suppress(grpc.aio.AioRpcError):  # nobody waits for the copy's answer
            await self._handle(source, target, handler, request)

    def open_stream(
        self,
        source: str,
        address: str,
        service: str,
        method: str,
        requests: AsyncIterator[ProtoMessage],
    ) -> SimStreamCall:
        return SimStreamCall(self, source, address, service, method, requests)


class _Method:
    def __init__(self, stub: SimStub, method: str) -> None:
        self._stub = stub
        self._method = method

    async def __call__(
        self,
        request: ProtoMessage,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the gRPC stub's signature)
    ) -> Any:
        stub = self._stub
        return await stub.network.unary(
            stub.source, stub.address, stub.service, self._method, request, timeout
        )


class SimStub:
    """Any gRPC service stub, over the simulated network (`stub.Method(request, timeout=)`)."""

    STREAMS = frozenset({"BrokerHeartbeatStream"})

    def __init__(self, network: Network, source: str, address: str, service: str) -> None:
        self.network = network
        self.source = source
        self.address = address
        self.service = service

    def __getattr__(self, method: str) -> Any:
        if method in self.STREAMS:
            return lambda requests, **_: self.network.open_stream(
                self.source, self.address, self.service, method, requests
            )
        return _Method(self, method)


class _End:
    """End of a stream direction (`error` None: finished normally)."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class SimStreamCall:
    """A bidirectional stream call: `aiter()` for the replies, `cancel()` to end it."""

    def __init__(
        self,
        network: Network,
        source: str,
        address: str,
        service: str,
        method: str,
        requests: AsyncIterator[ProtoMessage],
    ) -> None:
        self._network = network
        self._source = source
        self._requests = requests
        self._replies: asyncio.Queue[ProtoMessage | _End] = asyncio.Queue()
        self._inbound: asyncio.Queue[ProtoMessage | _End] = asyncio.Queue()
        self._target = network.hosts.get(address)
        self._server: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._method = method
        self._service = service
        self._ended = False
        #: The client's machine lost power: nothing more of this call reaches the server.
        self._silenced = False
        if self._target is None or not self._target.alive:
            self._end(rpc_error(grpc.StatusCode.UNAVAILABLE, f"no process at {address}"))
            return
        target = self._target
        servicer = target.servicer(service)
        if servicer is None:
            self._end(rpc_error(grpc.StatusCode.UNIMPLEMENTED, f"no {service}"))
            return
        self._pump = asyncio.ensure_future(self._pump_requests(target))
        self._server = target.spawn(self._serve(target, servicer), f"stream-{method}")
        self._server.add_done_callback(self._server_done)

    def __aiter__(self) -> SimStreamCall:
        return self

    async def __anext__(self) -> ProtoMessage:
        item = await self._replies.get()
        if isinstance(item, _End):
            self._replies.put_nowait(item)  # every later read sees the end too
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        return item

    def cancel(self) -> bool:
        client = self._network.by_name.get(self._source)
        if client is not None and client.powered_off:
            # The client's machine lost power: no reset reaches the server, whose side of
            # the stream just goes quiet (the session then expires on its timeout).
            self._ended = True
            self._silenced = True
            self._replies.put_nowait(_End(rpc_error(grpc.StatusCode.CANCELLED, "power off")))
            if self._pump is not None:
                self._pump.cancel()
            return True
        self._end(rpc_error(grpc.StatusCode.CANCELLED, "cancelled by the client"))
        return True

    def _end(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._replies.put_nowait(_End(error))
        for task in (self._pump, self._server):
            if task is not None and not task.done():
                task.cancel()

    def _server_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            self._end(rpc_error(grpc.StatusCode.UNAVAILABLE, "the server went away"))
        elif task.exception() is not None:
            self._end(task.exception())

    async def _pump_requests(self, target: ProcessHost) -> None:
        """Client -> server: each request through the link, in order."""
        network = self._network
        try:
            async for request in self._requests:
                if await network.transit(self._source, target.name) and not self._silenced:
                    self._inbound.put_nowait(_copy(request))
            end: _End = _End(None)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            end = _End(error)
        # After a power loss the requests may still end (the client's generator can see
        # its stop flag before the cancellation lands): the server must not see that end.
        if not self._silenced:
            self._inbound.put_nowait(end)

    async def _inbound_requests(self) -> AsyncIterator[ProtoMessage]:
        while True:
            item = await self._inbound.get()
            if isinstance(item, _End):
                if item.error is not None:
                    raise rpc_error(grpc.StatusCode.CANCELLED, str(item.error))
                return
            yield item

    async def _serve(self, target: ProcessHost, servicer: object) -> None:
        handler = getattr(servicer, self._method)
        context = SimContext(self._source)
        network = self._network
        replies = handler(self._inbound_requests(), context)
        try:
            async for reply in replies:
                await target.wait_unpaused()
                if await network.transit(target.name, self._source):
                    self._replies.put_nowait(_copy(reply))
        finally:
            await replies.aclose()
            context.finish()
        self._end(None)
