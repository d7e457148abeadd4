"""Container health check: exit 0 when this process's gRPC health service answers SERVING.

The address is MINIKAFKA_HEALTH_ADDRESS, else MINIKAFKA_LISTEN with a wildcard host replaced by
127.0.0.1 (the same variable the controller and broker read their --listen from). With TLS
(MINIKAFKA_TLS_CERT, MINIKAFKA_TLS_KEY, MINIKAFKA_TLS_CA, as the process reads them) it connects
over mutual TLS with the process's own certificate, whose SANs include 127.0.0.1.
"""

import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TIMEOUT_S = 2.0


def health_address() -> str:
    explicit = os.environ.get("MINIKAFKA_HEALTH_ADDRESS")
    if explicit:
        return explicit
    host, _, port = os.environ.get("MINIKAFKA_LISTEN", "0.0.0.0:9092").rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"{host}:{port}"


def open_channel(address: str) -> grpc.Channel:
    """Plaintext, or mutual TLS when the process has its TLS files."""
    files = [os.environ.get(f"MINIKAFKA_TLS_{name}", "") for name in ("CA", "KEY", "CERT")]
    if not all(files):
        return grpc.insecure_channel(address)
    ca, key, cert = (Path(path).read_bytes() for path in files)
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(ca, key, cert))


def main() -> int:
    address = health_address()
    with open_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S
            )
        except grpc.RpcError as exc:
            print(f"{address}: {exc.code().name}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{address}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
