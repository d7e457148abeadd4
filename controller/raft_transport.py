"""The quorum's network: Raft messages to the other controllers, and the RaftService servicer.

Outbound, each peer has a bounded queue (the oldest message is dropped when it is full:
Raft repeats what matters) and a few sender tasks that deliver it with one unary
`RaftService.Send` each, bounded by a timeout; a failed send is dropped, never retried
here (the core asks again). Inbound, the servicer decodes a message (`raft_wire`) and
hands it to the node's inbox (`deliver`); it only acknowledges receipt.

Not thread-safe: used from the controller's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import grpc

from controller.raft.messages import Message
from controller.raft_wire import WireError, from_wire, to_wire
from minikafka.grpc_options import channel_options
from minikafka.tls import TlsMaterial, open_channel
from minikafka.v1 import raft_pb2, raft_pb2_grpc

logger = logging.getLogger(__name__)

#: Messages waiting for one peer; beyond this the oldest is dropped.
PEER_QUEUE_MAX: Final = 256
#: Concurrent sends per peer (a slow send does not hold up the next message).
PEER_SENDERS: Final = 4
#: A peer that was down for a moment must be reachable again within an election timeout.
RECONNECT_BACKOFF_MAX_MS: Final = 500
CHANNEL_OPTIONS: Final = channel_options(
    max_message_bytes=64 * 1024 * 1024, reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS
)


class _Peer:
    def __init__(self, node_id: int, address: str, tls: TlsMaterial | None) -> None:
        self.node_id = node_id
        self.address = address
        self.queue: deque[Message] = deque(maxlen=PEER_QUEUE_MAX)
        self.wake = asyncio.Event()
        self.channel = open_channel(address, CHANNEL_OPTIONS, tls)
        self.stub = raft_pb2_grpc.RaftServiceStub(self.channel)
        self.failures = 0
        self.in_flight = 0


class RaftTransport:
    """Sends the node's messages to its peers (`send`); `run` drives the senders."""

    def __init__(
        self, *, peers: dict[int, str], send_timeout_ms: int, tls: TlsMaterial | None = None
    ) -> None:
        self._peers = {node_id: _Peer(node_id, address, tls) for node_id, address in peers.items()}
        self._timeout_s = send_timeout_ms / 1000
        self._idle = asyncio.Event()
        self._idle.set()
        self.sent = 0
        self.dropped = 0

    def pending(self) -> bool:
        """Whether a message is still queued or being sent."""
        return any(peer.queue or peer.in_flight for peer in self._peers.values())

    async def flush(self) -> None:
        """Until every queued message has been sent (or failed)."""
        await self._idle.wait()

    def send(self, message: Message) -> None:
        peer = self._peers.get(message.destination)
        if peer is None:
            logger.warning("no address for Raft peer %d: message dropped", message.destination)
            return
        if len(peer.queue) == peer.queue.maxlen:
            self.dropped += 1
        peer.queue.append(message)
        self._idle.clear()
        peer.wake.set()

    async def run(self) -> None:
        """Deliver queued messages until cancelled."""
        async with asyncio.TaskGroup() as tasks:
            for peer in self._peers.values():
                for index in range(PEER_SENDERS):
                    tasks.create_task(self._pump(peer), name=f"raft-send-{peer.node_id}-{index}")

    async def close(self) -> None:
        for peer in self._peers.values():
            await peer.channel.close()

    async def _pump(self, peer: _Peer) -> None:
        while True:
            while not peer.queue:
                peer.wake.clear()
                await peer.wake.wait()
            message = peer.queue.popleft()
            peer.in_flight += 1
            try:
                await peer.stub.Send(to_wire(message), timeout=self._timeout_s)
            except grpc.aio.AioRpcError as error:
                peer.failures += 1
                if peer.failures == 1 or peer.failures % 100 == 0:
                    logger.info(
                        "Raft peer %d at %s unreachable (%s, %d failed sends)",
                        peer.node_id,
                        peer.address,
                        error.code().name,
                        peer.failures,
                    )
            else:
                if peer.failures:
                    logger.info("Raft peer %d at %s reachable again", peer.node_id, peer.address)
                peer.failures = 0
                self.sent += 1
            finally:
                peer.in_flight -= 1
                if not self.pending():
                    self._idle.set()


class RaftServicer(raft_pb2_grpc.RaftServiceServicer):
    """Decodes each message and hands it to `deliver` (False: not taken)."""

    def __init__(self, deliver: Callable[[Message], bool]) -> None:
        self._deliver = deliver

    async def Send(
        self, request: raft_pb2.RaftMessage, context: grpc.aio.ServicerContext[Any, Any]
    ) -> raft_pb2.RaftAck:
        try:
            message = from_wire(request)
        except (WireError, ValueError, TypeError) as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad Raft message: {error}")
            raise AssertionError("abort returns only by raising") from None
        return raft_pb2.RaftAck(accepted=self._deliver(message))
