"""The Prometheus side every process shares: the `/metrics` endpoint and process metrics.

Every metric of every process starts with `minikafka_` (docs/metrics.md lists them all
with their Kafka JMX counterparts). Each process owns one `CollectorRegistry` (so several
can run in one test process) and serves it with `prometheus_client`'s own HTTP server
(`serve_metrics`, on `--metrics-listen`), in a daemon thread: scraping never runs on the
event loop. `add_process_metrics` registers the standard process collector under the
`minikafka_process_` prefix (CPU seconds, resident memory, open file descriptors, start
time) and `minikafka_build_info{version, role}`.
"""

from __future__ import annotations

import threading
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector, start_http_server

from minikafka import __version__

PREFIX: Final = "minikafka"


class MetricsServer:
    """A running `/metrics` endpoint; `address` is the bound HOST:PORT (port 0 works)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str) -> None:
        self._server = server
        self._thread = thread
        port = server.server_address[1]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Serve `registry` at http://host:port/metrics (text exposition format)."""
    server, thread = start_http_server(port, host, registry=registry)
    return MetricsServer(server, thread, host)


def add_process_metrics(registry: CollectorRegistry, *, role: str) -> None:
    """`minikafka_process_*` and `minikafka_build_info{version, role}` in `registry`."""
    ProcessCollector(namespace=PREFIX, registry=registry)
    info = Gauge(
        f"{PREFIX}_build_info",
        "Always 1: the version and role of this process",
        ["version", "role"],
        registry=registry,
    )
    info.labels(version=__version__, role=role).set(1)
