"""One set of gRPC channel options for every process (`minikafka.grpc_options`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minikafka.grpc_options import channel_options, server_options
from minikafka.limits import GRPC_MESSAGE_BYTES_MAX

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {},
            {
                "grpc.max_send_message_length": GRPC_MESSAGE_BYTES_MAX,
                "grpc.max_receive_message_length": GRPC_MESSAGE_BYTES_MAX,
                "grpc.initial_reconnect_backoff_ms": 100,
                "grpc.min_reconnect_backoff_ms": 100,
                "grpc.max_reconnect_backoff_ms": 1_000,
            },
            id="defaults",
        ),
        pytest.param(
            {"keepalive_time_ms": 30_000, "max_message_bytes": 1024},
            {
                "grpc.max_send_message_length": 1024,
                "grpc.max_receive_message_length": 1024,
                "grpc.initial_reconnect_backoff_ms": 100,
                "grpc.min_reconnect_backoff_ms": 100,
                "grpc.max_reconnect_backoff_ms": 1_000,
                "grpc.keepalive_time_ms": 30_000,
            },
            id="client-keepalive",
        ),
    ],
)
def test_channel_options(kwargs: dict[str, int], expected: dict[str, int]) -> None:
    options = channel_options(**kwargs)
    assert dict(options) == expected
    assert len(options) == len(expected)  # no option given twice


def test_servers_never_share_a_port() -> None:
    assert dict(server_options())["grpc.so_reuseport"] == 0


def test_no_other_module_spells_the_reconnect_backoff() -> None:
    """Channel options have one home: a second copy could disagree."""
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("minikafka", "minikafka_cli", "broker", "controller", "client")
        for path in (ROOT / package).rglob("*.py")
        if path.name != "grpc_options.py" and 'reconnect_backoff_ms"' in path.read_text()
    ]
    assert offenders == []
