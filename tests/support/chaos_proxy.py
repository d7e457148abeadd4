"""Network nemesis: an asyncio TCP proxy in front of every server, with per-link faults.

Each server (controller, broker) gets one proxy; brokers advertise their proxy
(`--advertise`) and dial the controller through its proxy (`--controller`), so every
byte between processes, and between the test's clients and the cluster, crosses a proxy.
The proxy attributes each accepted connection to the process that opened it (the peer
port's socket inode, looked up in /proc), so faults act on directed links between
named processes. A connection opened by `origin` to `dest` carries two flows of bytes:
origin -> dest (requests) and dest -> origin (responses).

- `block(src, dst)`: a blackhole. Bytes from `src` to `dst` (and the replies on those
  connections) are held, not forwarded: the connection stays open and passes nothing,
  which is what a partition looks like to an HTTP/2 stream. `heal()` lets them flow.
- `block_one_way(src, dst)`: hold only the bytes flowing from process `src` to process
  `dst`, on every connection between them whichever side opened it; the other direction
  keeps flowing. `unblock_one_way` releases the held bytes, in order: with the flow
  leader -> follower this is a fetch response held for a while and then delivered late.
- `delay(dst, ms)`: latency added to every chunk forwarded to or from `dst`.
- `delay_one_way(src, dst, ms)`: latency added only to the bytes flowing from `src` to
  `dst` (a delay line: each chunk is forwarded `ms` after it arrived, in order).
- `reset(dst)`: RST every connection to `dst` (new ones are served normally).
- `swallow_resets(name)`: when process `name` dies, its peers are not told: each of its
  connections stays open and silent on the peer's side (what a power loss or a frozen
  host looks like, where no FIN or RST is sent): the controller keeps a dead broker's
  heartbeat stream, and so its session, until the session times out. Bytes the peer
  sends are dropped, also after `name` is back; new connections reach the new process.
  `reset(name)` resets the swallowed connections to `name` (as the restarted host's
  kernel answers a retransmitted request), `heal()` every swallowed connection.

The clients of the test process are the origin `"client"`; connections from processes
that are not registered are `"other"` and are never faulted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CLIENT = "client"
OTHER = "other"
CHUNK_BYTES = 64 * 1024


def _socket_inode(local_port: int, remote_port: int) -> str | None:
    """The inode of the 127.0.0.1 TCP socket (local_port -> remote_port), from /proc."""
    want_local = f":{local_port:04X}"
    want_remote = f":{remote_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if fields[1].endswith(want_local) and fields[2].endswith(want_remote):
                    return fields[9]
    return None


def _pid_holds(pid: int, inode: str) -> bool:
    target = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
    return False


#: How often a swallowed connection checks whether its dead side came back.
SWALLOW_POLL_S = 0.1
#: Chunks a delay line holds per direction (bounded: a slow link backs up into TCP).
DELAY_LINE_CHUNKS = 1024
#: `_pump` results: which side of the proxied connection ended it.
DOWN = "down"  # the side that opened the connection (origin)
UP = "up"  # the server behind the proxy (dest)


class _Link:
    """One proxied connection (origin -> destination)."""

    def __init__(self, origin: str, dest: str, down: asyncio.StreamWriter) -> None:
        self.origin = origin
        self.dest = dest
        self.writers: list[asyncio.StreamWriter] = [down]
        #: The name of the dead side while the connection is swallowed.
        self.swallowed: str | None = None


class ProxyNet:
    """All proxies of one test, on one asyncio loop in a daemon thread."""

    def __init__(self, pids: Callable[[], dict[str, int]] | None = None) -> None:
        self._pids = pids or dict
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._servers: dict[str, asyncio.Server] = {}
        self.addresses: dict[str, str] = {}
        self._blocked: set[tuple[str, str]] = set()
        self._held_flows: set[tuple[str, str]] = set()
        self._delay_ms: dict[str, float] = {}
        self._flow_delay_ms: dict[tuple[str, str], float] = {}
        self._swallowing: set[str] = set()
        self._links: set[_Link] = set()
        self._changed = self._call(self._new_event())
        #: (origin, dest) of every accepted connection, for self-tests and debugging.
        self.accepted: list[tuple[str, str]] = []

    # ---- plumbing ------------------------------------------------------------------

    async def _new_event(self) -> asyncio.Event:
        return asyncio.Event()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def _apply(self, change: Callable[[], None]) -> None:
        async def run() -> None:
            change()
            self._changed.set()
            self._changed = asyncio.Event()

        self._call(run())

    def set_pids(self, pids: Callable[[], dict[str, int]]) -> None:
        self._pids = pids

    def origin_of(self, peer_port: int, proxy_port: int) -> str:
        inode = _socket_inode(peer_port, proxy_port)
        if inode is None:
            return OTHER
        candidates = dict(self._pids())
        candidates[CLIENT] = os.getpid()
        for name, pid in candidates.items():
            if _pid_holds(pid, inode):
                return name
        return OTHER

    # ---- proxies -------------------------------------------------------------------

    def add(self, name: str, upstream: str | Callable[[], str]) -> str:
        """Start a proxy for server `name` forwarding to `upstream`; returns its address.

        `upstream` may be a function giving the server's current address, read for
        every connection: a server that had to move to another port (it lost its port
        race at start) stays reachable through its proxy."""
        current = upstream if callable(upstream) else (lambda: upstream)

        async def start() -> str:
            server = await asyncio.start_server(
                lambda r, w: self._serve(name, current, r, w), "127.0.0.1", 0
            )
            self._servers[name] = server
            return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

        address = self._call(start())
        self.addresses[name] = address
        return address

    async def _serve(
        self,
        dest: str,
        upstream: Callable[[], str],
        down_reader: asyncio.StreamReader,
        down_writer: asyncio.StreamWriter,
    ) -> None:
        host, port = upstream().rsplit(":", 1)
        peer_port = down_writer.get_extra_info("peername")[1]
        own_port = down_writer.get_extra_info("sockname")[1]
        origin = await asyncio.to_thread(self.origin_of, peer_port, own_port)
        self.accepted.append((origin, dest))
        link = _Link(origin, dest, down_writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            _abort(down_writer)
            return
        link.writers.append(up_writer)
        self._links.add(link)
        pumps = [
            asyncio.create_task(self._pump(link, down_reader, up_writer, (origin, dest), DOWN)),
            asyncio.create_task(self._pump(link, up_reader, down_writer, (dest, origin), UP)),
        ]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            ended = next(iter(done)).result()
            dead = origin if ended == DOWN else dest
            if dead in self._swallowing:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
                _abort(down_writer if ended == DOWN else up_writer)
                await self._swallow(link, dead, up_reader if ended == DOWN else down_reader)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._links.discard(link)
            for writer in link.writers:
                _abort(writer)

    def _held(self, link: _Link, flow: tuple[str, str]) -> bool:
        return (link.origin, link.dest) in self._blocked or flow in self._held_flows

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        flow: tuple[str, str],
        reader_side: str,
    ) -> str:
        """Forward one direction through a delay line; returns the side (DOWN or UP) whose
        end of the connection closed or failed."""
        writer_side = UP if reader_side == DOWN else DOWN
        line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(DELAY_LINE_CHUNKS)
        loop = asyncio.get_running_loop()

        async def feed() -> None:
            try:
                while True:
                    while self._held(link, flow):
                        await self._changed.wait()
                    data = await reader.read(CHUNK_BYTES)
                    delay_ms = max(
                        self._delay_ms.get(link.dest, 0.0), self._flow_delay_ms.get(flow, 0.0)
                    )
                    await line.put((loop.time() + delay_ms / 1000, data))
                    if not data:
                        return
            except (ConnectionError, OSError):
                await line.put((loop.time(), b""))

        feeder = asyncio.create_task(feed())
        try:
            while True:
                due, data = await line.get()
                if not data:
                    return reader_side
                wait_s = due - loop.time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                while self._held(link, flow):
                    await self._changed.wait()
                try:
                    writer.write(data)
                    await writer.drain()
                except (ConnectionError, OSError):
                    return writer_side
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)

    async def _swallow(self, link: _Link, dead: str, live_reader: asyncio.StreamReader) -> None:
        """Keep the live side of a connection whose other side died open and silent (what it
        sends is dropped) until it closes, `reset` resets it or the swallowing stops
        (`heal`). The caller then resets the live side."""
        link.swallowed = dead
        while dead in self._swallowing:
            try:
                data = await asyncio.wait_for(live_reader.read(CHUNK_BYTES), SWALLOW_POLL_S)
            except TimeoutError:
                data = None
            except (ConnectionError, OSError):
                return
            if data == b"":
                return

    # ---- faults --------------------------------------------------------------------

    def block(self, src: str, dst: str) -> None:
        """Blackhole the directed link src -> dst (connections src opened to dst)."""
        self._apply(lambda: self._blocked.add((src, dst)))

    def block_one_way(self, src: str, dst: str) -> None:
        """Hold every byte flowing from process `src` to process `dst` (requests on the
        connections `src` opened to `dst`, responses on those `dst` opened to `src`); the
        reverse direction keeps flowing."""
        self._apply(lambda: self._held_flows.add((src, dst)))

    def unblock_one_way(self, src: str, dst: str) -> None:
        """Release what `block_one_way(src, dst)` held: the bytes are delivered in order."""
        self._apply(lambda: self._held_flows.discard((src, dst)))

    def partition(self, side_a: set[str], side_b: set[str]) -> None:
        """Cut every link between the two sides, in both directions."""

        def change() -> None:
            for a in side_a:
                for b in side_b:
                    self._blocked.update({(a, b), (b, a)})

        self._apply(change)

    def isolate(self, name: str) -> None:
        """Cut `name` from every other server and from the test's clients."""
        others = {n for n in self.addresses if n != name} | {CLIENT}
        self.partition({name}, others)

    def delay(self, dst: str, delay_ms: float) -> None:
        self._apply(lambda: self._delay_ms.__setitem__(dst, delay_ms))

    def delay_one_way(self, src: str, dst: str, delay_ms: float) -> None:
        """Add `delay_ms` of latency to the bytes flowing from `src` to `dst` only."""
        self._apply(lambda: self._flow_delay_ms.__setitem__((src, dst), delay_ms))

    def swallow_resets(self, name: str) -> None:
        """From now on, when process `name` dies its peers' connections stay open and
        silent instead of being reset (see the module docstring)."""
        self._apply(lambda: self._swallowing.add(name))

    def swallowed(self) -> list[tuple[str, str, str]]:
        """(origin, dest, dead side's name) of every connection being swallowed now."""

        async def run() -> list[tuple[str, str, str]]:
            return sorted(
                (link.origin, link.dest, link.swallowed)
                for link in self._links
                if link.swallowed is not None
            )

        return self._call(run())

    def reset(self, dst: str) -> int:
        """RST every open connection to `dst`; returns how many were reset."""

        async def run() -> int:
            victims = [link for link in self._links if link.dest == dst]
            for link in victims:
                for writer in link.writers:
                    _abort(writer)
            return len(victims)

        return self._call(run())

    def heal(self) -> None:
        """Remove every fault; connections being swallowed are reset."""

        def change() -> None:
            self._blocked.clear()
            self._held_flows.clear()
            self._delay_ms.clear()
            self._flow_delay_ms.clear()
            self._swallowing.clear()

        self._apply(change)

    def blocked(self) -> set[tuple[str, str]]:
        return set(self._blocked)

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers.values():
                server.close()
            for link in list(self._links):
                for writer in link.writers:
                    _abort(writer)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
