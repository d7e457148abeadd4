"""Principals from certificate subjects: Kafka's `ssl.principal.mapping.rules`, pure.

A TLS peer is known by the distinguished name of its certificate's subject in RFC 2253
form, most specific part first (`CN=alice,O=Acme,C=US`), as Kafka's `X500Principal.getName()`
and gRPC's `x509_subject` give it. Mapping rules turn that name into a user name; the
principal is `User:<name>`. A peer without a certificate (plaintext, or TLS without client
authentication) is `User:ANONYMOUS`.

Rules are Kafka's syntax, comma- or newline-separated, tried in order, the first that
matches the WHOLE name wins:

- `RULE:pattern/replacement/` (optionally followed by `L` or `U`: lower/upper-case the
  result): a Java-style regular expression that must match the whole name; `$1`, `$2`, ...
  in the replacement are its groups; `\\/` is a literal slash inside either part;
- `DEFAULT`: the whole name unchanged.

`DEFAULT` alone is the default (the principal is the full DN). A name no rule matches has
no principal: the peer is refused (as Kafka refuses the connection).

Example: `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?)(,.*)?$/$1/L,DEFAULT`.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec

#: The principal of a peer that presented no certificate.
ANONYMOUS: Final = "User:ANONYMOUS"
#: Kafka's default mapping: the whole distinguished name.
DEFAULT_RULES: Final = "DEFAULT"

_TOKEN = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/"
    r"(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))\s*(?:[,\n]\s*|$)"
)
_JAVA_GROUP = re.compile(r"\$(\d+)")
_CASES: Final[dict[str, Literal["", "L", "U"]]] = {"": "", "L": "L", "U": "U"}


class MappingRuleError(ValueError):
    """A mapping rules text that is not Kafka's syntax (the message names the part)."""


class Rule(msgspec.Struct, frozen=True):
    """One mapping rule; `pattern` None is DEFAULT."""

    pattern: str | None
    replacement: str = ""
    case: Literal["", "L", "U"] = ""


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of a `ssl.principal.mapping.rules` text; MappingRuleError when it is
    not valid (an unknown part, a bad regular expression, or no rule at all)."""
    rules: list[Rule] = []
    position = 0
    stripped = text.strip()
    while position < len(stripped):
        match = _TOKEN.match(stripped, position)
        if match is None or match.end() == position:
            raise MappingRuleError(
                f"principal mapping rules: cannot parse {stripped[position:]!r} "
                "(expected DEFAULT or RULE:pattern/replacement/[L|U])"
            )
        position = match.end()
        if match.group("default") is not None:
            rules.append(Rule(None))
            continue
        pattern = match.group("pattern").replace("\\/", "/")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise MappingRuleError(
                f"principal mapping rules: bad pattern {pattern!r}: {exc}"
            ) from None
        replacement = match.group("replacement").replace("\\/", "/")
        groups = re.compile(pattern).groups
        for number in _JAVA_GROUP.findall(replacement):
            if int(number) > groups:
                raise MappingRuleError(
                    f"principal mapping rules: ${number} in {replacement!r} but the pattern "
                    f"{pattern!r} has {groups} group(s)"
                )
        case = _CASES[match.group("case")]
        rules.append(Rule(pattern, replacement, case))
    if not rules:
        raise MappingRuleError("principal mapping rules are empty: give at least DEFAULT")
    return tuple(rules)


def _apply(rule: Rule, name: str) -> str | None:
    if rule.pattern is None:
        return name
    match = re.fullmatch(rule.pattern, name)
    if match is None:
        return None
    replacement = _JAVA_GROUP.sub(r"\\g<\1>", rule.replacement)
    result = match.expand(replacement)  # parse_rules checked the group numbers
    if rule.case == "L":
        return result.lower()
    if rule.case == "U":
        return result.upper()
    return result


def map_subject(subject: str, rules: tuple[Rule, ...]) -> str | None:
    """The user name the first matching rule gives `subject` (an RFC 2253 DN), or None
    when no rule matches (or the result is empty)."""
    for rule in rules:
        name = _apply(rule, subject)
        if name is not None:
            return name or None
    return None


def principal_of(subject: str | None, rules: tuple[Rule, ...]) -> str | None:
    """`User:<name>` for a certificate subject, ANONYMOUS without a certificate, None
    when no rule maps the subject (the peer is to be refused)."""
    if subject is None:
        return ANONYMOUS
    name = map_subject(subject, rules)
    return None if name is None else f"User:{name}"
