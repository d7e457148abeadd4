"""Kafka tools' `--property KEY=VALUE` settings (the console consumer's formatter, the
console producer's line reader) read onto the fields of a struct. PURE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def property_changes(
    properties: Mapping[str, str],
    *,
    booleans: Mapping[str, str],
    texts: Mapping[str, str],
    kind: str,
    error: type[ValueError],
    empty_texts: bool = True,
) -> dict[str, Any]:
    """Field name -> value for `properties`: a boolean property takes true or false (any
    case, spaces around), a text property its bytes (not empty unless `empty_texts`).
    Raises `error` naming the property, or, for an unknown name, every `kind` property."""
    changes: dict[str, Any] = {}
    for name, value in properties.items():
        if name in booleans:
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                raise error(f"property {name} takes true or false, got {value!r}")
            changes[booleans[name]] = lowered == "true"
        elif name in texts:
            if not value and not empty_texts:
                raise error(f"property {name} must not be empty")
            changes[texts[name]] = value.encode()
        else:
            known = ", ".join(sorted([*booleans, *texts]))
            raise error(f"unknown {kind} property {name!r} (known: {known})")
    return changes
