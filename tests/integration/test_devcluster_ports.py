"""`minikafka dev`'s port check: a listener makes a port busy, a stopped cluster's
TIME_WAIT connections do not (it must restart at once on the same ports)."""

from __future__ import annotations

import socket

import pytest

from minikafka_cli.devcluster import _port_is_free

pytestmark = pytest.mark.integration


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_listening_port_is_busy() -> None:
    with _listener() as server:
        assert not _port_is_free(server.getsockname()[1])


def test_a_port_with_only_time_wait_connections_is_free() -> None:
    server = _listener()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end goes to TIME_WAIT
    assert client.recv(1) == b""
    client.close()
    server.close()
    with open("/proc/net/tcp") as table:
        states = table.read()
    assert f":{port:04X} " in states  # the TIME_WAIT entry is still there
    assert _port_is_free(port)
