"""gRPC channel and server options shared by every process: the one home of these numbers.

Every channel (broker -> controller, follower -> leader, controller -> broker, client ->
broker, the Spark reader) is built with `channel_options`, every server starts from
`server_options`:

- messages up to `GRPC_MESSAGE_BYTES_MAX` (64 MiB) both ways (README "Limits");
- reconnect back-off from 100 ms capped at 1 s: gRPC's default grows to minutes, so a
  peer that was down for a few seconds would stay unreachable long after it came back;
- optional client keepalive pings (clients use them to notice a dead connection);
- servers bind with `grpc.so_reuseport=0`, so a stray process can never silently share
  a port (DESIGN §1).
"""

from __future__ import annotations

from typing import Final

from minikafka.limits import GRPC_MESSAGE_BYTES_MAX

#: First and smallest reconnect back-off of a channel.
RECONNECT_BACKOFF_MIN_MS: Final = 100
#: Largest reconnect back-off of a channel.
RECONNECT_BACKOFF_MAX_MS: Final = 1_000
#: The longest a live client of a channel may take to try again after its server came
#: back: the largest back-off plus gRPC's jitter (+-20%). A controller that takes over adds
#: it to the brokers' grace period.
RECONNECT_DELAY_MAX_MS: Final = RECONNECT_BACKOFF_MAX_MS * 6 // 5

Options = list[tuple[str, int]]


def channel_options(
    *,
    max_message_bytes: int = GRPC_MESSAGE_BYTES_MAX,
    keepalive_time_ms: int | None = None,
    reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS,
) -> Options:
    """Options of a client-side channel (see the module docstring). Raft peers pass a
    shorter `reconnect_backoff_max_ms`: a voter that was down for a moment must be reachable
    again within an election timeout."""
    options: Options = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MIN_MS),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MIN_MS),
        ("grpc.max_reconnect_backoff_ms", reconnect_backoff_max_ms),
    ]
    if keepalive_time_ms is not None:
        options.append(("grpc.keepalive_time_ms", keepalive_time_ms))
    return options


def server_options(*, max_message_bytes: int = GRPC_MESSAGE_BYTES_MAX) -> Options:
    """The options every server starts from; a process adds its own (the broker's
    stream, keepalive and connection-age limits)."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]
