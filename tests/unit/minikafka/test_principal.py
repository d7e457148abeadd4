"""Principal mapping (Kafka's ssl.principal.mapping.rules): table and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minikafka.principal import (
    ANONYMOUS,
    DEFAULT_RULES,
    MappingRuleError,
    map_subject,
    parse_rules,
    principal_of,
)

CN_ONLY = r"RULE:^CN=(.*?)(,.*)?$/$1/"
SERVICE = r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=.*$/$1@$2/L"

# (rules, subject) -> user name (None: no rule matches, the peer is refused)
CASES = [
    ("default is the whole DN", DEFAULT_RULES, "CN=alice,O=Acme", "CN=alice,O=Acme"),
    ("CN rule, more parts", CN_ONLY, "CN=alice,O=Acme,C=US", "alice"),
    ("CN rule, CN alone", CN_ONLY, "CN=alice", "alice"),
    ("CN rule must match the whole DN", CN_ONLY, "O=Acme,CN=alice", None),
    ("first matching rule wins", f"{CN_ONLY},DEFAULT", "CN=bob,O=X", "bob"),
    ("falls through to DEFAULT", f"{CN_ONLY},DEFAULT", "O=Acme,CN=alice", "O=Acme,CN=alice"),
    ("service users", SERVICE, "CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
    ("lower-cased", SERVICE, "CN=Duke,OU=JavaSoft,O=Sun,L=Santa Clara", "duke@javasoft"),
    ("no rule matches", SERVICE, "CN=x,O=y", None),
    ("upper-cased", r"RULE:^CN=([a-z]+)$/$1/U", "CN=alice", "ALICE"),
    ("escaped slash", r"RULE:^CN=(.*)\/(.*)$/$2\/$1/", "CN=a/b", "b/a"),
    ("newline separates", f"{CN_ONLY}\nDEFAULT", "O=z", "O=z"),
    ("spaces around rules", f"  {CN_ONLY} ,  DEFAULT ", "CN=c", "c"),
    ("empty result is no name", r"RULE:^CN=(.*)$/$1/", "CN=", None),
]


@pytest.mark.parametrize(
    ("rules", "subject", "expected"), [pytest.param(*case[1:], id=case[0]) for case in CASES]
)
def test_mapping_table(rules: str, subject: str, expected: str | None) -> None:
    assert map_subject(subject, parse_rules(rules)) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("", "empty", id="empty"),
        pytest.param("RULE:abc", "cannot parse", id="unterminated rule"),
        pytest.param("DEFAULTS", "cannot parse", id="unknown word"),
        pytest.param("RULE:(/x/", "bad pattern", id="bad regex"),
        pytest.param("RULE:a/b/X", "cannot parse", id="unknown case flag"),
        pytest.param(r"RULE:^CN=(.*)$/$2/", "has 1 group", id="group beyond the pattern"),
    ],
)
def test_bad_rules_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(MappingRuleError, match=fragment):
        parse_rules(text)


def test_principal_of() -> None:
    rules = parse_rules(CN_ONLY)
    assert principal_of(None, rules) == ANONYMOUS
    assert principal_of("CN=alice,O=Acme", rules) == "User:alice"
    assert principal_of("O=Acme", rules) is None


@given(st.text(min_size=1).filter(lambda s: "\n" not in s))
def test_default_is_identity(subject: str) -> None:
    assert map_subject(subject, parse_rules(DEFAULT_RULES)) == subject
