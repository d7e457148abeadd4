"""Console-producer input: Kafka's line-reader properties (parse.key, parse.headers,
separators, null.marker, ignore.error)."""

from __future__ import annotations

import re

import pytest

from minikafka_cli.line_reader import (
    LineError,
    LineFormat,
    LineFormatError,
    ParsedLine,
    line_format,
    parse_line,
)

KEYED = {"parse.key": "true"}
FULL = {"parse.key": "true", "parse.headers": "true"}


def parsed(
    value: bytes | None, key: bytes | None = None, headers: list[tuple[str, bytes]] | None = None
) -> ParsedLine:
    return ParsedLine(key=key, value=value, headers=headers or [])


@pytest.mark.parametrize(
    ("properties", "line", "record"),
    [
        pytest.param({}, b"a\tb:c", parsed(b"a\tb:c"), id="value-only-by-default"),
        pytest.param({}, b"", parsed(b""), id="empty-line-is-an-empty-value"),
        pytest.param(KEYED, b"k\tv", parsed(b"v", b"k"), id="key-at-the-first-tab"),
        pytest.param(KEYED, b"k\tv\tw", parsed(b"v\tw", b"k"), id="only-the-first-separator"),
        pytest.param(KEYED, b"\tv", parsed(b"v", b""), id="empty-key-is-not-null"),
        pytest.param(
            {**KEYED, "key.separator": "::"}, b"k::v::w", parsed(b"v::w", b"k"), id="long-sep"
        ),
        pytest.param(
            FULL,
            b"a:1,b:2\tk\tv",
            parsed(b"v", b"k", [("a", b"1"), ("b", b"2")]),
            id="headers-key-value",
        ),
        pytest.param(
            {"parse.headers": "true"},
            b"a:1:2\tv",
            parsed(b"v", None, [("a", b"1:2")]),
            id="header-value-keeps-later-colons",
        ),
        pytest.param(
            {**FULL, "headers.delimiter": "|", "headers.separator": ";", "key.separator": "="},
            b"a:1;b:2|k=v",
            parsed(b"v", b"k", [("a", b"1"), ("b", b"2")]),
            id="custom-separators",
        ),
        pytest.param(
            {**KEYED, "null.marker": "NULL"}, b"NULL\tv", parsed(b"v", None), id="null-key"
        ),
        pytest.param(
            {**KEYED, "null.marker": "NULL"}, b"k\tNULL", parsed(None, b"k"), id="null-value"
        ),
        pytest.param(
            {**FULL, "null.marker": "NULL"}, b"NULL\tk\tv", parsed(b"v", b"k"), id="null-headers"
        ),
        pytest.param(
            {**KEYED, "null.marker": "NULL"},
            b"k\tNULLx",
            parsed(b"NULLx", b"k"),
            id="null-marker-matches-whole-parts-only",
        ),
        pytest.param(
            {**KEYED, "ignore.error": "true"},
            b"plain",
            parsed(b"plain"),
            id="ignore-error-missing-key-separator",
        ),
        pytest.param(
            {**FULL, "ignore.error": "true"},
            b"kv",
            parsed(b"kv"),
            id="ignore-error-missing-headers-delimiter-and-key-separator",
        ),
        pytest.param(
            {"parse.headers": "true", "ignore.error": "true"},
            b"flag,a:1\tv",
            parsed(b"v", None, [("flag", b""), ("a", b"1")]),
            id="ignore-error-header-without-separator",
        ),
        pytest.param({**KEYED, "parse.key": " TRUE "}, b"k\tv", parsed(b"v", b"k"), id="bool-case"),
        pytest.param(
            {"parse.headers": "true"},
            b"a:1,\tv",
            parsed(b"v", None, [("a", b"1")]),
            id="trailing-header-separator-dropped-as-java-split",
        ),
        pytest.param(
            {"parse.headers": "true"},
            b",,\tv",
            parsed(b"v"),
            id="only-header-separators-are-no-headers",
        ),
        pytest.param(
            {**FULL, "ignore.error": "true"},
            b"a:1\tv",
            parsed(b"v", None, [("a", b"1")]),
            id="ignore-error-headers-then-no-key-separator",
        ),
        pytest.param(
            {**KEYED, "key.separator": "\u00e9"},
            "k\u00e9v".encode(),
            parsed(b"v", b"k"),
            id="utf8-separator",
        ),
    ],
)
def test_parse_line(properties: dict[str, str], line: bytes, record: ParsedLine) -> None:
    assert parse_line(line, line_format(properties)) == record


@pytest.mark.parametrize(
    ("properties", "line", "message"),
    [
        pytest.param(KEYED, b"plain", "has no key separator '\\t'", id="no-key-separator"),
        pytest.param(FULL, b"a:1\tv", "has no key separator", id="headers-take-the-only-tab"),
        pytest.param(
            {"parse.headers": "true"}, b"plain", "has no headers delimiter", id="no-delimiter"
        ),
        pytest.param(
            {"parse.headers": "true"},
            b"flag\tv",
            "header 'flag' has no header key separator ':'",
            id="header-without-key-separator",
        ),
        pytest.param(
            {"parse.headers": "true"}, b"\tv", "header '' has no header key", id="empty-headers"
        ),
        pytest.param(
            {"parse.headers": "true", "null.marker": "N"},
            b"N:1\tv",
            "a header key equals the null marker 'N': keys cannot be null",
            id="null-header-key",
        ),
        pytest.param(
            {"parse.headers": "true", "null.marker": "N"},
            b"a:N\tv",
            "cannot be null",
            id="null-header-value",
        ),
        pytest.param(
            {"parse.headers": "true"},
            b"\xff:1\tv",
            "header key b'\\xff' is not UTF-8",
            id="header-key-not-utf8",
        ),
    ],
)
def test_lines_that_do_not_parse(properties: dict[str, str], line: bytes, message: str) -> None:
    with pytest.raises(LineError, match=re.escape(message)):
        parse_line(line, line_format(properties))


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        pytest.param({"parse.kee": "true"}, "unknown line-reader property 'parse.kee'", id="name"),
        pytest.param({"parse.key": "yes"}, "parse.key takes true or false", id="not-a-bool"),
        pytest.param({"key.separator": ""}, "key.separator must not be empty", id="empty"),
        pytest.param(
            {"headers.separator": ":"},
            "headers.separator and headers.key.separator may not be equal",
            id="separator-equals-key-separator",
        ),
        pytest.param(
            {"headers.delimiter": ","},
            "headers.delimiter and headers.separator may not be equal",
            id="delimiter-equals-separator",
        ),
        pytest.param(
            {"headers.delimiter": ":"},
            "headers.delimiter and headers.key.separator may not be equal",
            id="delimiter-equals-key-separator",
        ),
        pytest.param(
            {"null.marker": "\t"},
            "null.marker and key.separator may not be equal",
            id="null-marker-equals-key-separator",
        ),
        pytest.param(
            {"null.marker": ",", "key.separator": "|"},
            "null.marker and headers.separator may not be equal",
            id="null-marker-equals-headers-separator",
        ),
    ],
)
def test_bad_properties_name_the_problem(properties: dict[str, str], message: str) -> None:
    with pytest.raises(LineFormatError, match=message):
        line_format(properties)


def test_key_separator_flag_is_a_base_the_properties_refine() -> None:
    base = LineFormat(parse_key=True, key_separator=b":")
    assert parse_line(b"k:v", line_format({}, base)) == parsed(b"v", b"k")
    assert parse_line(b"k:v", line_format({"parse.key": "false"}, base)) == parsed(b"k:v")
    assert parse_line(b"k|v:w", line_format({"key.separator": "|"}, base)) == parsed(b"v:w", b"k")
