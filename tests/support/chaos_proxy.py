"""Network nemesis: an asyncio TCP proxy in front of every server, with per-link faults.

Each server (controller, broker) gets one proxy; brokers advertise their proxy
(`--advertise`) and dial the controller through its proxy (`--controller`), so every
byte between processes, and between the test's clients and the cluster, crosses a proxy.
The proxy attributes each accepted connection to the process that opened it (the peer
port's socket inode, looked up in /proc), so faults act on directed links between
named processes:

- `block(src, dst)`: a blackhole. Bytes from `src` to `dst` (and the replies on those
  connections) are held, not forwarded: the connection stays open and passes nothing,
  which is what a partition looks like to an HTTP/2 stream. `heal()` lets them flow.
- `delay(dst, ms)`: latency added to every chunk forwarded to or from `dst`.
- `reset(dst)`: RST every connection to `dst` (new ones are served normally).

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


class _Link:
    """One proxied connection (origin -> destination)."""

    def __init__(self, origin: str, dest: str, down: asyncio.StreamWriter) -> None:
        self.origin = origin
        self.dest = dest
        self.writers: list[asyncio.StreamWriter] = [down]


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
        self._delay_ms: dict[str, float] = {}
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
        try:
            await asyncio.gather(
                self._pump(link, down_reader, up_writer), self._pump(link, up_reader, down_writer)
            )
        finally:
            self._links.discard(link)
            for writer in link.writers:
                writer.close()

    async def _pump(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                while (link.origin, link.dest) in self._blocked:
                    await self._changed.wait()
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    break
                while (link.origin, link.dest) in self._blocked:
                    await self._changed.wait()
                delay_ms = self._delay_ms.get(link.dest, 0.0)
                if delay_ms:
                    await asyncio.sleep(delay_ms / 1000)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for other in link.writers:
                _abort(other)

    # ---- faults --------------------------------------------------------------------

    def block(self, src: str, dst: str) -> None:
        """Blackhole the directed link src -> dst (connections src opened to dst)."""
        self._apply(lambda: self._blocked.add((src, dst)))

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
        def change() -> None:
            self._blocked.clear()
            self._delay_ms.clear()

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
