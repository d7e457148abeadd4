"""docs/configuration.md is what the code says (`make docs` regenerates it), and the
generator sees every definition it claims to cover."""

from __future__ import annotations

from pathlib import Path

import click

from minikafka.topic_config import TOPIC_CONFIGS
from minikafka_cli.config_reference import options_table, render
from minikafka_cli.main import main

ROOT = Path(__file__).resolve().parents[1].parent
REFERENCE = ROOT / "docs" / "configuration.md"


def test_the_reference_is_current() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: run `make docs` and commit it"
    )


def test_every_topic_config_and_visible_server_option_is_listed() -> None:
    text = render()
    assert [name for name in TOPIC_CONFIGS if f"| `{name}` |" not in text] == []
    for command in ("broker", "controller"):
        options = [
            p.opts[0]
            for p in main.commands[command].params
            if isinstance(p, click.Option) and not p.hidden
        ]
        table = "\n".join(options_table(main.commands[command]))
        assert [flag for flag in options if f"`{flag}`" not in table] == []


def test_client_keys_are_listed() -> None:
    text = render()
    for key in ("acks", "linger_ms", "enable_idempotence", "auto_offset_reset", "client_rack"):
        assert f"| `{key}` |" in text
