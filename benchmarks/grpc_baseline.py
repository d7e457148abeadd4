"""Raw grpc.aio ceilings from the same run: upload, download and 100 B round trips.

The server is a spawned process with generic handlers and identity (bytes) serializers,
the same uvloop and message-size options as the brokers: `Sink` swallows an upload,
`Pull` answers a download of the requested size, `Echo` returns its request. No
protobuf, no storage: what Python gRPC lets through at a given message size.
"""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time
from pathlib import Path

import grpc

from benchmarks import stats
from benchmarks.harness import run_async, until, warm_and_measure

MAX_MESSAGE_BYTES = 64 << 20
OPTIONS = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
SINK = "/bench.Baseline/Sink"
PULL = "/bench.Baseline/Pull"
ECHO = "/bench.Baseline/Echo"


async def serve(address: str) -> None:
    cache: dict[int, bytes] = {}

    async def sink(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return b""

    async def pull(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        (size,) = struct.unpack("<I", request)
        data = cache.get(size)
        if data is None:
            data = cache.setdefault(size, b"p" * size)
        return data

    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler(
        "bench.Baseline",
        {
            "Sink": grpc.unary_unary_rpc_method_handler(sink),
            "Pull": grpc.unary_unary_rpc_method_handler(pull),
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
        },
    )
    server = grpc.aio.server(options=OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(address)
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


def start_server(address: str, log_path: Path) -> subprocess.Popen[bytes]:
    """Start the baseline server as a child process and wait until it answers."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.grpc_baseline", address],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    with grpc.insecure_channel(address) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
        except grpc.FutureTimeoutError:
            proc.kill()
            proc.wait(timeout=10)
            raise RuntimeError(f"the gRPC baseline server at {address} did not start") from None
    return proc


async def _window(
    n_in_flight: int,
    deadline: float,
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes],
    request: bytes,
) -> int:
    """Keep `n_in_flight` calls going until `deadline`; returns calls completed."""
    done = 0

    async def lane() -> None:
        nonlocal done
        while await until(deadline):
            await call(request, timeout=30)
            done += 1

    await asyncio.gather(*(lane() for _ in range(n_in_flight)))
    return done


def throughput(
    address: str,
    server_pid: int,
    *,
    direction: str,
    message_bytes: int,
    window: int,
    seconds: float,
    runs: int,
    record_bytes: int,
) -> list[stats.Run]:
    """Upload (`direction="upload"`) or download `message_bytes` messages, `window` in flight.

    Records are counted as `message_bytes // record_bytes` per message, so that rates
    compare with a broker run at the same batch size.
    """

    async def main() -> list[stats.Run]:
        async with grpc.aio.insecure_channel(address, options=OPTIONS) as channel:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]
            if direction == "upload":
                call = channel.unary_unary(SINK)
                request = b"u" * message_bytes
            else:
                call = channel.unary_unary(PULL)
                request = struct.pack("<I", message_bytes)
            await call(request, timeout=30)

            async def body() -> tuple[int, int]:
                calls = await _window(window, time.perf_counter() + seconds, call, request)
                return calls * (message_bytes // record_bytes), calls * message_bytes

            return await warm_and_measure({"grpc-server": server_pid}, runs, body)

    return run_async(main())


def round_trips(address: str, *, seconds: float, runs: int) -> list[dict[str, float]]:
    """100 B unary echo at concurrency 1: p50 / p99 in ms per run (after a warm-up)."""

    async def main() -> list[dict[str, float]]:
        async with grpc.aio.insecure_channel(address, options=OPTIONS) as channel:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ECHO)
            payload = b"e" * 100
            results: list[dict[str, float]] = []
            for index in range(runs + 1):
                samples: list[float] = []
                deadline = time.perf_counter() + seconds
                while time.perf_counter() < deadline:
                    start = time.perf_counter()
                    await call(payload, timeout=10)
                    samples.append((time.perf_counter() - start) * 1000)
                if index:  # run 0 is the warm-up
                    samples.sort()
                    results.append(
                        {
                            "p50_ms": stats.percentile(samples, 0.5),
                            "p99_ms": stats.percentile(samples, 0.99),
                            "calls_per_s": len(samples) / seconds,
                        }
                    )
            return results

    return run_async(main())


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(sys.argv[1]))
