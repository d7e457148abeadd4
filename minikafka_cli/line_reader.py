"""How `minikafka produce` turns an input line into a record: Kafka's console-producer
line reader (`--property parse.key=true --property key.separator=: ...`). PURE.

Kafka's `LineMessageReader` reads, in this order and each only when asked for: the
headers (`k1:v1,k2:v2`, ended by `headers.delimiter`, a tab), the key (ended by
`key.separator`, a tab), then the value (the rest of the line). A key or value equal to
`null.marker` (unset by default) is sent as null. Differences: `headers.separator` is a
plain string here (a regular expression in Kafka); unknown properties are refused (Kafka
ignores them); a header value cannot be null (minikafka's headers carry bytes), so one
equal to `null.marker` is an error and, with `ignore.error`, a header without its key
separator gets an empty value.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from minikafka_cli.properties import property_changes


class LineFormatError(ValueError):
    """A --property that is not one of the line reader's, or values it cannot take
    together."""


class LineError(ValueError):
    """An input line the line reader cannot split as its properties say."""


class LineFormat(msgspec.Struct, frozen=True, kw_only=True):
    """Kafka's console-producer line-reader properties (and their defaults)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None


class ParsedLine(msgspec.Struct, frozen=True, kw_only=True):
    """One record read from a line: key and value (None: null), headers in order."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


_BOOLEAN = {
    "parse.key": "parse_key",
    "parse.headers": "parse_headers",
    "ignore.error": "ignore_error",
}
_TEXT = {
    "key.separator": "key_separator",
    "headers.delimiter": "headers_delimiter",
    "headers.separator": "headers_separator",
    "headers.key.separator": "headers_key_separator",
    "null.marker": "null_marker",
}

#: Pairs that may not be equal (Kafka refuses the same pairs), as field names.
_DISTINCT = (
    ("headers_delimiter", "headers_separator"),
    ("headers_delimiter", "headers_key_separator"),
    ("headers_separator", "headers_key_separator"),
    ("null_marker", "key_separator"),
    ("null_marker", "headers_separator"),
    ("null_marker", "headers_delimiter"),
    ("null_marker", "headers_key_separator"),
)


def _property_name(field: str) -> str:
    return next(name for name, f in [*_BOOLEAN.items(), *_TEXT.items()] if f == field)


def line_format(properties: Mapping[str, str], base: LineFormat | None = None) -> LineFormat:
    """`base` (the defaults) with Kafka line-reader `properties` applied. Unknown names,
    boolean properties that are not true/false, empty separators and separators that
    would make a line ambiguous raise `LineFormatError` naming what is wrong."""
    changes = property_changes(
        properties,
        booleans=_BOOLEAN,
        texts=_TEXT,
        kind="line-reader",
        error=LineFormatError,
        empty_texts=False,
    )
    fmt = msgspec.structs.replace(base or LineFormat(), **changes)
    for first, second in _DISTINCT:
        if getattr(fmt, first) == getattr(fmt, second):
            raise LineFormatError(
                f"{_property_name(first)} and {_property_name(second)} may not be equal"
            )
    return fmt


def _split(line: bytes, start: int, separator: bytes, what: str, fmt: LineFormat) -> int | None:
    """Where `separator` starts in `line` from `start`; None when it is missing and
    `ignore.error` is on (the part is then absent)."""
    index = line.find(separator, start)
    if index >= 0:
        return index
    if fmt.ignore_error:
        return None
    raise LineError(f"has no {what} {_shown(separator)}")


def _null(part: bytes, fmt: LineFormat) -> bytes | None:
    return None if part == fmt.null_marker else part


def _shown(part: bytes) -> str:
    """`part` quoted for a message: as text when it is UTF-8, as bytes when not."""
    try:
        return repr(part.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(part)


def _pairs(text: bytes, separator: bytes) -> list[bytes]:
    """`text` split at `separator` as Java's `String.split` does it: trailing empty parts
    are dropped (`a:1,` is one header, `,` none), an empty `text` is one empty part."""
    parts = text.split(separator)
    if text:
        while parts and not parts[-1]:
            parts.pop()
    return parts


def _headers(text: bytes, fmt: LineFormat) -> list[tuple[str, bytes]]:
    headers: list[tuple[str, bytes]] = []
    for pair in _pairs(text, fmt.headers_separator):
        key, found, value = pair.partition(fmt.headers_key_separator)
        if not found:
            if fmt.ignore_error:
                # Kafka keeps such a header with a null value; minikafka's headers carry
                # bytes, so it gets an empty one.
                value = b""
            else:
                raise LineError(
                    f"header {_shown(pair)} has no header key separator "
                    f"{_shown(fmt.headers_key_separator)}"
                )
        if key == fmt.null_marker:
            raise LineError(
                f"a header key equals the null marker {_shown(key)}: keys cannot be null"
            )
        if value == fmt.null_marker:
            raise LineError(
                f"the value of header {_shown(key)} equals the null marker: minikafka "
                "header values are bytes and cannot be null"
            )
        try:
            headers.append((key.decode("utf-8"), value))
        except UnicodeDecodeError as exc:
            raise LineError(f"header key {_shown(key)} is not UTF-8") from exc
    return headers


def parse_line(line: bytes, fmt: LineFormat) -> ParsedLine:
    """The record `line` (without its line ending) stands for under `fmt`; raises
    `LineError` when a separator it needs is missing (unless `ignore.error`)."""
    position = 0
    headers: list[tuple[str, bytes]] = []
    if fmt.parse_headers:
        end = _split(line, 0, fmt.headers_delimiter, "headers delimiter", fmt)
        if end is not None:
            text = line[:end]
            position = end + len(fmt.headers_delimiter)
            if text != fmt.null_marker:
                headers = _headers(text, fmt)
    key: bytes | None = None
    if fmt.parse_key:
        end = _split(line, position, fmt.key_separator, "key separator", fmt)
        if end is not None:
            key = _null(line[position:end], fmt)
            position = end + len(fmt.key_separator)
    return ParsedLine(key=key, value=_null(line[position:], fmt), headers=headers)
