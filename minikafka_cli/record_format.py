"""How `minikafka consume` prints a record: Kafka's console-consumer formatter
(`--property print.timestamp=true ...`) and JSON lines (`--output json`). PURE.

Kafka's `DefaultMessageFormatter` writes, in this order and each only when asked for:
`CreateTime:<ms>` (or `LogAppendTime:<ms>`, `NO_TIMESTAMP`), `Partition:<p>`,
`Offset:<o>`, the headers (`k1:v1,k2:v2`, or `NO_HEADERS`), the key, the value, with
`key.separator` (a tab) between fields and `line.separator` after the value; a missing
key or value is `null.literal` ("null").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from minikafka_cli.properties import property_changes

#: Kafka's timestamp type names, by the record's timestamp type (0 create, 1 append).
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


class FormatError(ValueError):
    """A --property that is not one of the formatter's, or a value it cannot take."""


class TextFormat(msgspec.Struct, frozen=True, kw_only=True):
    """Kafka's console-consumer formatter properties (and their defaults)."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"


_BOOLEAN = {
    "print.timestamp": "print_timestamp",
    "print.partition": "print_partition",
    "print.offset": "print_offset",
    "print.headers": "print_headers",
    "print.key": "print_key",
    "print.value": "print_value",
}
_TEXT = {
    "key.separator": "key_separator",
    "line.separator": "line_separator",
    "headers.separator": "headers_separator",
    "headers.key.separator": "headers_key_separator",
    "null.literal": "null_literal",
}


def text_format(properties: Mapping[str, str], base: TextFormat | None = None) -> TextFormat:
    """`base` (the defaults) with Kafka formatter `properties` applied; unknown names and
    non-boolean values of print.* raise `FormatError` naming the valid ones."""
    changes = property_changes(
        properties, booleans=_BOOLEAN, texts=_TEXT, kind="formatter", error=FormatError
    )
    return msgspec.structs.replace(base or TextFormat(), **changes)


def format_text(record: Any, fmt: TextFormat) -> bytes:
    """One record as Kafka's DefaultMessageFormatter writes it."""
    fields: list[bytes] = []
    if fmt.print_timestamp:
        if record.timestamp is None or record.timestamp < 0:
            fields.append(b"NO_TIMESTAMP")
        else:
            name = TIMESTAMP_TYPES.get(record.timestamp_type, "CreateTime")
            fields.append(f"{name}:{record.timestamp}".encode())
    if fmt.print_partition:
        fields.append(f"Partition:{record.partition}".encode())
    if fmt.print_offset:
        fields.append(f"Offset:{record.offset}".encode())
    if fmt.print_headers:
        headers: Sequence[tuple[str, bytes]] = record.headers or ()
        if headers:
            fields.append(
                fmt.headers_separator.join(
                    key.encode() + fmt.headers_key_separator + _bytes(value, fmt)
                    for key, value in headers
                )
            )
        else:
            fields.append(b"NO_HEADERS")
    if fmt.print_key:
        fields.append(_bytes(record.key, fmt))
    if fmt.print_value:
        fields.append(_bytes(record.value, fmt))
    return fmt.key_separator.join(fields) + fmt.line_separator


def _bytes(value: bytes | None, fmt: TextFormat) -> bytes:
    return fmt.null_literal if value is None else value


def _json_bytes(name: str, value: bytes | None, out: dict[str, Any]) -> None:
    """`name`: the bytes as UTF-8 text, or (not UTF-8) `name_base64`: base64; null when
    missing."""
    if value is None:
        out[name] = None
        return
    try:
        out[name] = value.decode("utf-8")
    except UnicodeDecodeError:
        out[f"{name}_base64"] = base64.b64encode(value).decode("ascii")


def format_json(record: Any) -> bytes:
    """One record as a JSON line: topic, partition, offset, timestamp, timestampType,
    key, value, headers (a list of {key, value}). Bytes that are not UTF-8 are given as
    base64 under `key_base64` / `value_base64` instead of `key` / `value`."""
    out: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestampType": TIMESTAMP_TYPES.get(record.timestamp_type, "CreateTime"),
    }
    _json_bytes("key", record.key, out)
    _json_bytes("value", record.value, out)
    headers = []
    for key, value in record.headers or ():
        header: dict[str, Any] = {"key": key}
        _json_bytes("value", value, header)
        headers.append(header)
    out["headers"] = headers
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
