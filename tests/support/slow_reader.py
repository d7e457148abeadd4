"""A raw HTTP/2 client that sends one gRPC call and never reads the answer (issue 23, finding 2).

It announces an initial stream window of 0 and never sends WINDOW_UPDATE, so the server
can send at most 64 KiB of the response (the connection window) and must hold the rest.
Hand-written frames (HPACK literals, no Huffman): no HTTP/2 library is needed.
"""

from __future__ import annotations

import socket
import struct

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _SETTINGS = 0, 1, 4
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
_INITIAL_WINDOW_SIZE = 0x4


def _frame(frame_type: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([frame_type, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field without indexing (names and values < 127 bytes)."""
    if len(name) >= 127 or len(value) >= 127:
        raise ValueError("header too long for this little encoder")
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def open_unread_call(host: str, port: int, method: str, request: bytes) -> socket.socket:
    """Send `request` to gRPC `method` ("/pkg.Service/Method") and return the socket, which
    the caller keeps open and never reads (close it to end the call)."""
    sock = socket.create_connection((host, port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0, struct.pack(">HI", _INITIAL_WINDOW_SIZE, 0)))
    sock.recv(4096)  # the server's SETTINGS (acknowledged below); nothing is read after this
    sock.sendall(_frame(_SETTINGS, _ACK, 0, b""))
    headers = b"".join(
        _literal(name, value)
        for name, value in (
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", method.encode()),
            (b":authority", b"localhost"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        )
    )
    sock.sendall(_frame(_HEADERS, _END_HEADERS, 1, headers))
    message = b"\x00" + struct.pack(">I", len(request)) + request
    sock.sendall(_frame(_DATA, _END_STREAM, 1, message))
    return sock
